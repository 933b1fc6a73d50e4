// rmsnorm_fwd: rstd[m] = 1/sqrt(S/divisor + eps), S = sumsq[m] if given else sum_j x[m,j]^2;
// out[m,j] = x[m,j] * rstd[m] * gamma[j]. One block per row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_X}} *x, const {{T_GAMMA}} *gamma, {{T_OUT}} *out, {{T_RSTD}} *rstd,
         const {{T_SUMSQ}} *sumsq{{RANK_ARGS}}) {
    const long long m = blockIdx.x;
    const {{T_X}} *xr = x + m * {{LDX}};
    float S;
    if (sumsq) {
        S = ld(sumsq + m);
    } else {
        float part = 0.f;
        for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
            float a[{{VEC}}];
            ldv<{{VEC}}>(xr + j, a);
            for (int e = 0; e < {{VEC}}; e++) part += a[e] * a[e];
        }
        S = block_sum<{{BLOCK}}>(part);
    }
    const float r = rsqrtf(S / (float){{DIVISOR}} + {{EPS}});
    if (rstd && threadIdx.x == 0) st(rstd + m, r);
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float a[{{VEC}}], g[{{VEC}}];
        ldv<{{VEC}}>(xr + j, a);
        ldv<{{VEC}}>(gamma + j, g);
        for (int e = 0; e < {{VEC}}; e++) a[e] = a[e] * r * g[e];
        stv<{{VEC}}>(out + m * {{LDO}} + j, a);
    }
}
