// attention_fwd_simt: causal attention on CUDA cores, flash style (gen/kernels.c uses it where the
// tensor-core attention_fwd.cu does not apply: head_dim > 128). Per (batch, head) and tile of BQ
// queries, the keys and values stream through shared memory in tiles of BK with an online softmax;
// no seq x seq matrix exists. A group of G = head_dim/16 threads (a power of two) owns one query
// (16 dims each) and reduces its dot products with shuffles. out = softmax(scale q k^T + mask) v;
// lse[(b*heads+h)*seq + i] is the log-sum-exp of query i's scaled scores. GQA: head h reads kv
// head h / (heads/kv_heads).
extern "C" __global__ void __launch_bounds__({{BLOCK_Q}} * ({{HEAD_DIM}} / 16), 1)
{{NAME}}(const {{T_Q}} *q, const {{T_K}} *k, const {{T_V}} *v, {{T_OUT}} *out, {{T_LSE}} *lse{{RANK_ARGS}}) {
    constexpr int D = {{HEAD_DIM}}, DT = 16, G = D / DT, BQ = {{BLOCK_Q}}, BK = {{BLOCK_K}};
    constexpr int NT = BQ * G, NQB = ({{SEQ}} + BQ - 1) / BQ, GROUP = {{HEADS}} / {{KV_HEADS}};
    __shared__ bf16 ks[BK * D], vs[BK * D];       // [BK, D] each
    const int qb = blockIdx.x % NQB, bh = blockIdx.x / NQB;
    const int h = bh % {{HEADS}}, b = bh / {{HEADS}}, kvh = h / GROUP;
    const int g = threadIdx.x % G, i = qb * BQ + threadIdx.x / G;
    const bool valid = i < {{SEQ}};
    const long long qrow = (long long)b * {{SEQ}} + i;
    float qr[DT], o[DT];
    for (int t = 0; t < DT; t++) {
        qr[t] = valid ? ld(q + qrow * {{LDQ}} + h * D + g * DT + t) * {{SCALE}} : 0.f;
        o[t] = 0.f;
    }
    float mx = __int_as_float(0xff800000), l = 0.f;
    const int last = min(qb * BQ + BQ, {{SEQ}}) - 1;       // the block's last query
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < BK * D; idx += NT) {
            const int kk = idx / D, d = idx % D, kp = k0 + kk;
            const long long krow = (long long)b * {{SEQ}} + kp;
            ks[idx] = __float2bfloat16(kp < {{SEQ}} ? ld(k + krow * {{LDK}} + kvh * D + d) : 0.f);
            vs[idx] = __float2bfloat16(kp < {{SEQ}} ? ld(v + krow * {{LDV}} + kvh * D + d) : 0.f);
        }
        __syncthreads();
        if (!valid) continue;
        const int kn = min(BK, i - k0 + 1);                // causal: keys k0 .. i
        for (int kk = 0; kk < kn; kk++) {
            const bf16 *kr = ks + kk * D + g * DT, *vr = vs + kk * D + g * DT;
            float s = 0.f;
            for (int t = 0; t < DT; t++) s += qr[t] * __bfloat162float(kr[t]);
            s = group_sum<G>(s);
            const float mn = fmaxf(mx, s), corr = expf(mx - mn), p = expf(s - mn);
            l = l * corr + p;
            for (int t = 0; t < DT; t++) o[t] = o[t] * corr + p * __bfloat162float(vr[t]);
            mx = mn;
        }
    }
    if (!valid) return;
    const float inv = 1.f / l;
    for (int t = 0; t < DT; t++) st(out + qrow * {{LDO}} + h * D + g * DT + t, o[t] * inv);
    if (g == 0) st(lse + ((long long)b * {{HEADS}} + h) * {{SEQ}} + i, mx + logf(l));
}
