// moe_dispatch_bwd: dx[m, j] (+)= sum over the token's kept choices k of
// dout[sel[m,k]*CAPACITY + slot[m,k], j] (a gather: no atomics). One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_DOUT}} *dout, const {{T_SEL}} *sel, const {{T_SLOT}} *slot, {{T_DX}} *dx{{RANK_ARGS}}) {
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
        ldv<{{VEC}}>(dout + r * {{LDO}} + j, a);
        for (int e = 0; e < {{VEC}}; e++) v[e] += a[e];
    }
    if ({{ACC}}) {
        ldv<{{VEC}}>(dx + m * {{LDDX}} + j, a);
        for (int e = 0; e < {{VEC}}; e++) v[e] += a[e];
    }
    stv<{{VEC}}>(dx + m * {{LDDX}} + j, v);
}
