// online_norm_fwd: local statistics of the rank's shard: s = sum_j x^2, rho = sqrt(s/cols + eps),
// xhat = x/rho*gamma, stat[m*ldstat] = s/divisor (the rank's share of the global mean square,
// written into the statistics after the activations of the all-reduce buffer). One block per row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_X}} *x, const {{T_GAMMA}} *gamma, {{T_XHAT}} *xhat, {{T_RHO}} *rho,
         {{T_STAT}} *stat{{RANK_ARGS}}) {
    const long long m = blockIdx.x;
    const {{T_X}} *xr = x + m * {{LDX}};
    float part = 0.f;
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float a[{{VEC}}];
        ldv<{{VEC}}>(xr + j, a);
        for (int e = 0; e < {{VEC}}; e++) part += a[e] * a[e];
    }
    const float s = block_sum<{{BLOCK}}>(part);
    const float p = sqrtf(s / (float){{COLS}} + {{EPS}});
    if (threadIdx.x == 0) {
        st(rho + m, p);
        if (stat) st(stat + m * {{LDSTAT}}, s / (float){{DIVISOR}});
    }
    const float inv = 1.f / p;
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float a[{{VEC}}], g[{{VEC}}];
        ldv<{{VEC}}>(xr + j, a);
        ldv<{{VEC}}>(gamma + j, g);
        for (int e = 0; e < {{VEC}}; e++) a[e] = a[e] * inv * g[e];
        stv<{{VEC}}>(xhat + m * {{LDXHAT}} + j, a);
    }
}
