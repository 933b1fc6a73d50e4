// rmsnorm_bwd: D[m] = sum_j dout*gamma*x (phase 2: read from dot, summed over ranks);
// dx (+)= rstd*gamma*dout - x*rstd^3*D/divisor; dgamma[j] += sum_m dout*x*rstd.
// Phase 1 only writes dot[m] = D_local[m]. Blocks 0..rows-1: one row each; the blocks after
// them: one thread per column of dgamma, walking the rows in order (deterministic).
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_X}} *x, const {{T_GAMMA}} *gamma, const {{T_RSTD}} *rstd, const {{T_DOUT}} *dout,
         {{T_DOT}} *dot, {{T_DX}} *dx, {{T_DGAMMA}} *dgamma{{RANK_ARGS}}) {
    if (blockIdx.x >= {{ROWS}}) {
        const long long j = (long long)(blockIdx.x - {{ROWS}}) * {{BLOCK}} + threadIdx.x;
        if (j >= {{COLS}} || !dgamma) return;
        float s = 0.f;
        for (long long m = 0; m < {{ROWS}}; m++)
            s += ld(dout + m * {{LDO}} + j) * ld(x + m * {{LDX}} + j) * ld(rstd + m);
        st(dgamma + j, ld(dgamma + j) + s);
        return;
    }
    const long long m = blockIdx.x;
    const {{T_X}} *xr = x + m * {{LDX}};
    const {{T_DOUT}} *dr = dout + m * {{LDO}};
    float D;
    if ({{PHASE}} == 2) {
        D = ld(dot + m);
    } else {
        float part = 0.f;
        for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
            float a[{{VEC}}], g[{{VEC}}], d[{{VEC}}];
            ldv<{{VEC}}>(xr + j, a); ldv<{{VEC}}>(gamma + j, g); ldv<{{VEC}}>(dr + j, d);
            for (int e = 0; e < {{VEC}}; e++) part += d[e] * g[e] * a[e];
        }
        D = block_sum<{{BLOCK}}>(part);
        if ({{PHASE}} == 1) {
            if (threadIdx.x == 0) st(dot + m, D);
            return;
        }
    }
    const float r = ld(rstd + m);
    const float c = r * r * r * D / (float){{DIVISOR}};
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float a[{{VEC}}], g[{{VEC}}], d[{{VEC}}], o[{{VEC}}];
        ldv<{{VEC}}>(xr + j, a); ldv<{{VEC}}>(gamma + j, g); ldv<{{VEC}}>(dr + j, d);
        if ({{ACC}}) ldv<{{VEC}}>(dx + m * {{LDDX}} + j, o);
        else for (int e = 0; e < {{VEC}}; e++) o[e] = 0.f;
        for (int e = 0; e < {{VEC}}; e++) o[e] += r * g[e] * d[e] - a[e] * c;
        stv<{{VEC}}>(dx + m * {{LDDX}} + j, o);
    }
}
