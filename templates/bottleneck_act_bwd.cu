// bottleneck_act_bwd: dy = dz * act'(y). norm=0: dh (+)= dy. norm=1 (online norm backward):
// dh (+)= dy*rstd*rho and dstat[m] = -(sum_j dy*h) * rstd^3 / (2*divisor). One block per row.
// y NULL: recomputed as h*rstd.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_H}} *h, const {{T_Y}} *y, const {{T_RSTD}} *rstd, const {{T_RHO}} *rho,
         const {{T_DZ}} *dz, {{T_DH}} *dh, {{T_DSTAT}} *dstat{{RANK_ARGS}}) {
    const long long m = blockIdx.x;
    const float r = {{NORM}} ? ld(rstd + m) : 1.f;
    const float scale = {{NORM}} ? r * ld(rho + m) : 1.f;
    float part = 0.f;
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float yv[{{VEC}}], d[{{VEC}}], hv[{{VEC}}], o[{{VEC}}];
        ldv<{{VEC}}>(dz + m * {{LDZ}} + j, d);
        if ({{NORM}} || !y) ldv<{{VEC}}>(h + m * {{LDH}} + j, hv);
        if (y) ldv<{{VEC}}>(y + m * {{LDY}} + j, yv);
        else for (int e = 0; e < {{VEC}}; e++) yv[e] = hv[e] * r;
        if ({{ACC}}) ldv<{{VEC}}>(dh + m * {{LDDH}} + j, o);
        else for (int e = 0; e < {{VEC}}; e++) o[e] = 0.f;
        for (int e = 0; e < {{VEC}}; e++) {
            const float dy = d[e] * act_grad({{ACT}}, yv[e]);
            o[e] += dy * scale;
            if ({{NORM}}) part += dy * hv[e];
        }
        stv<{{VEC}}>(dh + m * {{LDDH}} + j, o);
    }
    if ({{NORM}}) {
        const float s = block_sum<{{BLOCK}}>(part);
        if (threadIdx.x == 0) st(dstat + m, -s * r * r * r / (2.f * (float){{DIVISOR}}));
    }
}
