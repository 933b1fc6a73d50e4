// online_norm_bwd: dx (+)= gamma*dxhat/rho + 2*x*dstat; dgamma[j] += sum_m x*dxhat/rho.
// Blocks 0..rows-1: one row each; the blocks after them: one thread per column of dgamma,
// walking the rows in order (deterministic).
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_X}} *x, const {{T_GAMMA}} *gamma, const {{T_RHO}} *rho, const {{T_DXHAT}} *dxhat,
         const {{T_DSTAT}} *dstat, {{T_DX}} *dx, {{T_DGAMMA}} *dgamma{{RANK_ARGS}}) {
    if (blockIdx.x >= {{ROWS}}) {
        const long long j = (long long)(blockIdx.x - {{ROWS}}) * {{BLOCK}} + threadIdx.x;
        if (j >= {{COLS}} || !dgamma) return;
        float s = 0.f;
        for (long long m = 0; m < {{ROWS}}; m++)
            s += ld(x + m * {{LDX}} + j) * ld(dxhat + m * {{LDDXHAT}} + j) / ld(rho + m);
        st(dgamma + j, ld(dgamma + j) + s);
        return;
    }
    const long long m = blockIdx.x;
    const float inv = 1.f / ld(rho + m);
    const float ds2 = dstat ? 2.f * ld(dstat + m) : 0.f;
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float a[{{VEC}}], g[{{VEC}}], d[{{VEC}}], o[{{VEC}}];
        ldv<{{VEC}}>(x + m * {{LDX}} + j, a);
        ldv<{{VEC}}>(gamma + j, g);
        ldv<{{VEC}}>(dxhat + m * {{LDDXHAT}} + j, d);
        if ({{ACC}}) ldv<{{VEC}}>(dx + m * {{LDDX}} + j, o);
        else for (int e = 0; e < {{VEC}}; e++) o[e] = 0.f;
        for (int e = 0; e < {{VEC}}; e++) o[e] += g[e] * d[e] * inv + a[e] * ds2;
        stv<{{VEC}}>(dx + m * {{LDDX}} + j, o);
    }
}
