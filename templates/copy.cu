// copy: dst (+)= src over 2-D slices. One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_SRC}} *src, {{T_DST}} *dst{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    float u[{{VEC}}], v[{{VEC}}];
    ldv<{{VEC}}>(src + m * {{LDS}} + j, u);
    if ({{ACC}}) {
        ldv<{{VEC}}>(dst + m * {{LDD}} + j, v);
        for (int e = 0; e < {{VEC}}; e++) u[e] += v[e];
    }
    stv<{{VEC}}>(dst + m * {{LDD}} + j, u);
}
