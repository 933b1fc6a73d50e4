// add: out = a + b (out may alias a). One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_A}} *a, const {{T_B}} *b, {{T_OUT}} *out{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    float u[{{VEC}}], v[{{VEC}}];
    ldv<{{VEC}}>(a + m * {{LDA}} + j, u);
    ldv<{{VEC}}>(b + m * {{LDB}} + j, v);
    for (int e = 0; e < {{VEC}}; e++) u[e] += v[e];
    stv<{{VEC}}>(out + m * {{LDO}} + j, u);
}
