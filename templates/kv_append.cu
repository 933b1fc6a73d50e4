// kv_append: the rows' K and V heads into the KV cache [kv_heads][max_seq][head_dim] at positions
// pos[0] + m. One thread per element of a K row (and the same of V).
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_K}} *k, const {{T_V}} *v, const {{T_POS}} *pos, {{T_KCACHE}} *kcache, {{T_VCACHE}} *vcache{{RANK_ARGS}}) {
    const long long t = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (t >= (long long){{ROWS}} * {{KV_HEADS}} * {{HEAD_DIM}}) return;
    const int d = (int)(t % {{HEAD_DIM}});
    const int h = (int)((t / {{HEAD_DIM}}) % {{KV_HEADS}});
    const long long m = t / ((long long){{HEAD_DIM}} * {{KV_HEADS}});
    const long long p = (long long)ld(pos) + m;
    if (p < 0 || p >= {{MAX_SEQ}}) return;
    const long long c = ((long long)h * {{MAX_SEQ}} + p) * {{HEAD_DIM}} + d;
    st(kcache + c, ld(k + m * {{LDK}} + (long long)h * {{HEAD_DIM}} + d));
    st(vcache + c, ld(v + m * {{LDV}} + (long long)h * {{HEAD_DIM}} + d));
}
