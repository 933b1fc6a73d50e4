// moe_combine_bwd: deo[r, j] = gates[src[r]] * dout[src[r] / TOP_K, j] for a filled slot r, 0 for
// an empty one. One thread per VEC columns of a slot row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_DOUT}} *dout, const {{T_SRC}} *src, const {{T_GATES}} *gates, {{T_DEO}} *deo{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long r = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    float v[{{VEC}}];
    const long long s = (long long)ld(src + r);
    if (s >= 0) {
        const float gk = ld(gates + s);
        ldv<{{VEC}}>(dout + (s / {{TOP_K}}) * {{LDO}} + j, v);
        for (int e = 0; e < {{VEC}}; e++) v[e] *= gk;
    } else {
        for (int e = 0; e < {{VEC}}; e++) v[e] = 0.f;
    }
    stv<{{VEC}}>(deo + r * {{LDDE}} + j, v);
}
