// xent_fwd: vocabulary-parallel cross-entropy, the local part over cols = the rank's vocab slice
// starting at vocab_offset. stats[m*3+0] = local max, [1] = sum_j exp(l - local max), [2] = the
// target's logit when the target is in this slice, else 0. One block per row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_LOGITS}} *logits, const int *targets, {{T_STATS}} *stats{{RANK_ARGS}}) {
    const long long m = blockIdx.x;
    const {{T_LOGITS}} *lr = logits + m * {{LDL}};
    float mx = __int_as_float(0xff800000);
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float a[{{VEC}}];
        ldv<{{VEC}}>(lr + j, a);
        for (int e = 0; e < {{VEC}}; e++) mx = fmaxf(mx, a[e]);
    }
    mx = block_max<{{BLOCK}}>(mx);
    float se = 0.f;
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float a[{{VEC}}];
        ldv<{{VEC}}>(lr + j, a);
        for (int e = 0; e < {{VEC}}; e++) se += expf(a[e] - mx);
    }
    se = block_sum<{{BLOCK}}>(se);
    if (threadIdx.x == 0) {
        const long long t = (long long)targets[m] - (long long)({{VOCAB_OFFSET}});
        st(stats + m * 3 + 0, mx);
        st(stats + m * 3 + 1, se);
        st(stats + m * 3 + 2, (t >= 0 && t < {{COLS}}) ? ld(lr + t) : 0.f);
    }
}
