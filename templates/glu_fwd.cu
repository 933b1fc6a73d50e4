// glu_fwd: out = act(gate) * up. One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_GATE}} *gate, const {{T_UP}} *up, {{T_OUT}} *out{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    float g[{{VEC}}], u[{{VEC}}];
    ldv<{{VEC}}>(gate + m * {{LDG}} + j, g);
    ldv<{{VEC}}>(up + m * {{LDU}} + j, u);
    for (int e = 0; e < {{VEC}}; e++) g[e] = act_apply({{ACT}}, g[e]) * u[e];
    stv<{{VEC}}>(out + m * {{LDO}} + j, g);
}
