// sumsq: out[m] = sum_j x[m,j]^2 (the local statistics of a synchronised RMSNorm). One block per row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_X}} *x, {{T_OUT}} *out{{RANK_ARGS}}) {
    const long long m = blockIdx.x;
    float part = 0.f;
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float a[{{VEC}}];
        ldv<{{VEC}}>(x + m * {{LDX}} + j, a);
        for (int e = 0; e < {{VEC}}; e++) part += a[e] * a[e];
    }
    const float s = block_sum<{{BLOCK}}>(part);
    if (threadIdx.x == 0) st(out + m, s);
}
