// moe_dispatch: out[r, j] = x[src[r] / TOP_K, j] for a filled slot r (src[r] = token*TOP_K + choice),
// 0 for an empty one. One thread per VEC columns of a slot row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_X}} *x, const {{T_SRC}} *src, {{T_OUT}} *out{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long r = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    float v[{{VEC}}];
    const long long s = (long long)ld(src + r);
    if (s >= 0) ldv<{{VEC}}>(x + (s / {{TOP_K}}) * {{LDX}} + j, v);
    else for (int e = 0; e < {{VEC}}; e++) v[e] = 0.f;
    stv<{{VEC}}>(out + r * {{LDO}} + j, v);
}
