// moe_combine: out[m, j] = sum over the token's kept choices k of
// gates[m,k] * eo[sel[m,k]*CAPACITY + slot[m,k], j]. One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_EO}} *eo, const {{T_SEL}} *sel, const {{T_SLOT}} *slot, const {{T_GATES}} *gates,
         {{T_OUT}} *out{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    float v[{{VEC}}], a[{{VEC}}];
    for (int e = 0; e < {{VEC}}; e++) v[e] = 0.f;
    for (int k = 0; k < {{TOP_K}}; k++) {
        const long long s = (long long)ld(slot + m * {{TOP_K}} + k);
        if (s < 0) continue;
        const long long r = (long long)ld(sel + m * {{TOP_K}} + k) * {{CAPACITY}} + s;
        const float gk = ld(gates + m * {{TOP_K}} + k);
        ldv<{{VEC}}>(eo + r * {{LDE}} + j, a);
        for (int e = 0; e < {{VEC}}; e++) v[e] += gk * a[e];
    }
    stv<{{VEC}}>(out + m * {{LDO}} + j, v);
}
