// glu_bwd: dgate = dout*up*act'(gate), dup = dout*act(gate). One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_GATE}} *gate, const {{T_UP}} *up, const {{T_DOUT}} *dout, {{T_DGATE}} *dgate,
         {{T_DUP}} *dup{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    float g[{{VEC}}], u[{{VEC}}], d[{{VEC}}], dg[{{VEC}}];
    ldv<{{VEC}}>(gate + m * {{LDG}} + j, g);
    ldv<{{VEC}}>(up + m * {{LDU}} + j, u);
    ldv<{{VEC}}>(dout + m * {{LDO}} + j, d);
    for (int e = 0; e < {{VEC}}; e++) {
        dg[e] = d[e] * u[e] * act_grad({{ACT}}, g[e]);
        u[e] = d[e] * act_apply({{ACT}}, g[e]);
    }
    stv<{{VEC}}>(dgate + m * {{LDDG}} + j, dg);
    stv<{{VEC}}>(dup + m * {{LDDU}} + j, u);
}
