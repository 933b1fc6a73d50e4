// attention_bwd_simt: the gradient of attention_fwd_simt on CUDA cores (gen/kernels.c uses it where
// the tensor-core attention_bwd.cu does not apply: head_dim > 128), recomputing P tile by tile from
// lse. One launch, two kinds of blocks (both deterministic, no atomics):
//  - the first batch*heads*ceil(seq/BQ) blocks own BQ queries each: delta_i = sum dout_i*out_i,
//    then over key tiles in shared memory: p = exp(s - lse_i), dp = dout_i . v_j,
//    ds = p (dp - delta_i), dq_i = scale * sum_j ds k_j;
//  - the next batch*kv_heads*ceil(seq/BQ) blocks own BQ keys each and loop over every query head
//    of their group and over query tiles: dv_j = sum_i p v-grad, dk_j = scale * sum_i ds q_i.
// A group of G = head_dim/16 threads owns one query (or key), 16 dims per thread.
extern "C" __global__ void __launch_bounds__({{BLOCK_Q}} * ({{HEAD_DIM}} / 16), 1)
{{NAME}}(const {{T_Q}} *q, const {{T_K}} *k, const {{T_V}} *v, const {{T_OUT}} *out, const {{T_DOUT}} *dout,
         const {{T_LSE}} *lse, {{T_DQ}} *dq, {{T_DK}} *dk, {{T_DV}} *dv{{RANK_ARGS}}) {
    constexpr int D = {{HEAD_DIM}}, DT = 16, G = D / DT, BQ = {{BLOCK_Q}}, BK = {{BLOCK_K}};
    constexpr int NT = BQ * G, NB = ({{SEQ}} + BQ - 1) / BQ, GROUP = {{HEADS}} / {{KV_HEADS}};
    constexpr int QBLOCKS = {{BATCH}} * {{HEADS}} * NB;
    __shared__ bf16 s1[BK * D], s2[BK * D];       // [BK, D]: k, v tiles or q, dout tiles
    __shared__ float s_lse[BK], s_delta[BK];
    const int g = threadIdx.x % G, own = threadIdx.x / G;
    if (blockIdx.x < QBLOCKS) {
        const int qb = blockIdx.x % NB, bh = blockIdx.x / NB;
        const int h = bh % {{HEADS}}, b = bh / {{HEADS}}, kvh = h / GROUP;
        const int i = qb * BQ + own;
        const bool valid = i < {{SEQ}};
        const long long row = (long long)b * {{SEQ}} + i;
        float qr[DT], dor[DT], acc[DT], delta = 0.f;
        for (int t = 0; t < DT; t++) {
            const long long c = h * D + g * DT + t;
            qr[t] = valid ? ld(q + row * {{LDQ}} + c) : 0.f;
            dor[t] = valid ? ld(dout + row * {{LDDO}} + c) : 0.f;
            delta += valid ? dor[t] * ld(out + row * {{LDO}} + c) : 0.f;
            acc[t] = 0.f;
        }
        delta = group_sum<G>(delta);
        const float L = valid ? ld(lse + ((long long)b * {{HEADS}} + h) * {{SEQ}} + i) : 0.f;
        const int last = min(qb * BQ + BQ, {{SEQ}}) - 1;
        for (int k0 = 0; k0 <= last; k0 += BK) {
            __syncthreads();
            for (int idx = threadIdx.x; idx < BK * D; idx += NT) {
                const int kk = idx / D, d = idx % D, kp = k0 + kk;
                const long long krow = (long long)b * {{SEQ}} + kp;
                s1[idx] = __float2bfloat16(kp < {{SEQ}} ? ld(k + krow * {{LDK}} + kvh * D + d) : 0.f);
                s2[idx] = __float2bfloat16(kp < {{SEQ}} ? ld(v + krow * {{LDV}} + kvh * D + d) : 0.f);
            }
            __syncthreads();
            if (!valid) continue;
            const int kn = min(BK, i - k0 + 1);
            for (int kk = 0; kk < kn; kk++) {
                const bf16 *kr = s1 + kk * D + g * DT, *vr = s2 + kk * D + g * DT;
                float s = 0.f, dp = 0.f;
                for (int t = 0; t < DT; t++) {
                    s += qr[t] * __bfloat162float(kr[t]);
                    dp += dor[t] * __bfloat162float(vr[t]);
                }
                s = group_sum<G>(s);
                dp = group_sum<G>(dp);
                const float p = expf(s * {{SCALE}} - L), ds = p * (dp - delta);
                for (int t = 0; t < DT; t++) acc[t] += ds * __bfloat162float(kr[t]);
            }
        }
        if (!valid) return;
        for (int t = 0; t < DT; t++) st(dq + row * {{LDDQ}} + h * D + g * DT + t, acc[t] * {{SCALE}});
        return;
    }
    // key blocks
    const int kbid = blockIdx.x - QBLOCKS;
    const int kb = kbid % NB, bk = kbid / NB;
    const int kvh = bk % {{KV_HEADS}}, b = bk / {{KV_HEADS}};
    const int j = kb * BQ + own;
    const bool valid = j < {{SEQ}};
    const long long krow = (long long)b * {{SEQ}} + j;
    float kr[DT], vr[DT], gk[DT], gv[DT];
    for (int t = 0; t < DT; t++) {
        const long long c = kvh * D + g * DT + t;
        kr[t] = valid ? ld(k + krow * {{LDK}} + c) : 0.f;
        vr[t] = valid ? ld(v + krow * {{LDV}} + c) : 0.f;
        gk[t] = 0.f; gv[t] = 0.f;
    }
    for (int hg = 0; hg < GROUP; hg++) {
        const int h = kvh * GROUP + hg;
        for (int q0 = kb * BQ; q0 < {{SEQ}}; q0 += BK) {     // queries i >= the block's first key
            __syncthreads();
            for (int idx = threadIdx.x; idx < BK * D; idx += NT) {
                const int qq = idx / D, d = idx % D, qp = q0 + qq;
                const long long qrow = (long long)b * {{SEQ}} + qp;
                s1[idx] = __float2bfloat16(qp < {{SEQ}} ? ld(q + qrow * {{LDQ}} + h * D + d) : 0.f);
                s2[idx] = __float2bfloat16(qp < {{SEQ}} ? ld(dout + qrow * {{LDDO}} + h * D + d) : 0.f);
            }
            for (int qq = own; qq < BK; qq += BQ) {          // delta and lse of the tile's queries
                const int qp = q0 + qq;
                const long long qrow = (long long)b * {{SEQ}} + qp;
                float part = 0.f;
                if (qp < {{SEQ}})
                    for (int t = 0; t < DT; t++) {
                        const long long c = h * D + g * DT + t;
                        part += ld(dout + qrow * {{LDDO}} + c) * ld(out + qrow * {{LDO}} + c);
                    }
                part = group_sum<G>(part);
                if (g == 0) {
                    s_delta[qq] = part;
                    s_lse[qq] = qp < {{SEQ}} ? ld(lse + ((long long)b * {{HEADS}} + h) * {{SEQ}} + qp) : 0.f;
                }
            }
            __syncthreads();
            if (!valid) continue;
            const int q1 = min(BK, {{SEQ}} - q0);
            for (int qq = max(0, j - q0); qq < q1; qq++) {   // causal: queries i >= j
                const bf16 *qv = s1 + qq * D + g * DT, *dov = s2 + qq * D + g * DT;
                float s = 0.f, dp = 0.f;
                for (int t = 0; t < DT; t++) {
                    s += __bfloat162float(qv[t]) * kr[t];
                    dp += __bfloat162float(dov[t]) * vr[t];
                }
                s = group_sum<G>(s);
                dp = group_sum<G>(dp);
                const float p = expf(s * {{SCALE}} - s_lse[qq]), ds = p * (dp - s_delta[qq]);
                for (int t = 0; t < DT; t++) {
                    gv[t] += p * __bfloat162float(dov[t]);
                    gk[t] += ds * __bfloat162float(qv[t]);
                }
            }
        }
    }
    if (!valid) return;
    for (int t = 0; t < DT; t++) {
        const long long c = kvh * D + g * DT + t;
        st(dk + krow * {{LDDK}} + c, gk[t] * {{SCALE}});
        st(dv + krow * {{LDDV}} + c, gv[t]);
    }
}
