// online_norm_rescale: h[m,j] *= rho[m] (undo the local scale before the all-reduce).
// One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}({{T_H}} *h, const {{T_RHO}} *rho{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    const float p = ld(rho + m);
    float v[{{VEC}}];
    ldv<{{VEC}}>(h + m * {{LDH}} + j, v);
    for (int e = 0; e < {{VEC}}; e++) v[e] *= p;
    stv<{{VEC}}>(h + m * {{LDH}} + j, v);
}
