// embedding_fwd: out[m, j] = table[tokens[m], j]; table is the rank's vocab x cols block.
// One thread per VEC columns of a row. Tokens outside 0..vocab-1 give a zero row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const int *tokens, const {{T_TABLE}} *table, {{T_OUT}} *out{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    const int t = tokens[m];
    float v[{{VEC}}];
    if (t >= 0 && t < {{VOCAB}}) ldv<{{VEC}}>(table + (long long)t * {{COLS}} + j, v);
    else for (int e = 0; e < {{VEC}}; e++) v[e] = 0.f;
    stv<{{VEC}}>(out + m * {{LDO}} + j, v);
}
