// attention_bwd: the gradient of attention_fwd on the tensor cores (mma.sync m16n8k16, bf16
// operands, fp32 accumulators), FlashAttention-2 style with P recomputed from lse. One launch, two
// kinds of blocks of BQ/16 warps, each warp owning 16 rows of the block's BQ; every output element
// is written by exactly one block and summed in a fixed order, so the result is bitwise
// deterministic (no atomics; the price is that S and dP are computed twice, 7 products per tile
// pair instead of FA2's 5):
//  - the first batch*kv_heads*ceil(seq/BQ) blocks own BQ keys (K, V rows in shared memory) and
//    stream the query tiles i >= their first key of every query head of their group (Q, dO tiles
//    of BK rows, with lse and delta_i = sum_d dout_i out_i): per warp, S^T = K Q^T and
//    dP^T = V dO^T (mma), P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - delta),
//    dV += P^T dO, dK += dS^T Q (mma, P^T and dS^T as A fragments from registers);
//    dk = scale dK, dv = dV. Key tiles with more queries after them are launched first.
//  - the next batch*heads*ceil(seq/BQ) blocks own BQ queries (Q, dO rows in shared memory, lse and
//    delta) and stream the key tiles j <= their last query: S = Q K^T, dP = dO V^T,
//    dS = P (dP - delta), dQ += dS K; dq = scale dQ.
// Shared memory (dynamic, sized at launch): own rows [2*BQ, D] + streamed tiles [2*BK, D] bf16, rows
// padded by 8 (ldmatrix without bank conflicts), copied with cp.async, and lse, delta [max(BQ, BK)]
// fp32; delta and lse are read while the copies land, and the next tile's rows are requested into
// L2 while the warps compute. gen/kernels.c picks the tiles within the arch's opt-in maximum (above
// 48 KiB the backend raises the function's limit with cuFuncSetAttribute before the first launch).
// gen/kernels.c uses this template for head_dim a multiple of 16 up to 128, attention_bwd_simt.cu
// otherwise.
extern "C" __global__ void __launch_bounds__({{BLOCK_Q}} * 2, 1)
{{NAME}}(const {{T_Q}} *q, const {{T_K}} *k, const {{T_V}} *v, const {{T_OUT}} *out, const {{T_DOUT}} *dout,
         const {{T_LSE}} *lse, {{T_DQ}} *dq, {{T_DK}} *dk, {{T_DV}} *dv{{RANK_ARGS}}) {
    constexpr int D = {{HEAD_DIM}}, BQ = {{BLOCK_Q}}, BK = {{BLOCK_K}}, SEQ = {{SEQ}};
    constexpr int NT = BQ * 2, NW = BQ / 16, GROUP = {{HEADS}} / {{KV_HEADS}};
    constexpr int KD = D / 16, NS = BK / 8, NO = D / 8;   // k-steps over D; n-tiles of S and of D
    constexpr int LDS = D + 8, NB = (SEQ + BQ - 1) / BQ;
    constexpr int BKV = {{BATCH}} * {{KV_HEADS}}, BH = {{BATCH}} * {{HEADS}}, KBLOCKS = BKV * NB;
    BOOST_DYNAMIC_SHARED(smem);   // {{SMEM}} bytes: the arrays below, each 16-byte aligned (LDS % 8 == 0)
    bf16 *const own1 = (bf16 *)smem, *const own2 = own1 + BQ * LDS;       // [BQ, D]: K, V or Q, dO
    bf16 *const str1 = own2 + BQ * LDS, *const str2 = str1 + BK * LDS;    // [BK, D]: Q, dO or K, V
    float *const s_lse = (float *)(str2 + BK * LDS);                      // [max(BQ, BK)] base-2 lse
    float *const s_delta = s_lse + (BQ > BK ? BQ : BK);                   // [max(BQ, BK)] delta
    const float sl2 = {{SCALE}} * 1.4426950409f, LOG2E = 1.4426950409f;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    // delta_i = sum_d dout[i,d] out[i,d] and lse_i (base 2) of rows [r0, r0+n) of head h into
    // s_delta / s_lse, one warp a row
    auto row_stats = [&](int b, int h, int r0, int n) {
        for (int rr = warp; rr < n; rr += NW) {
            const int i = r0 + rr;
            float part = 0.f;
            if (i < SEQ) {
                const long long row = (long long)b * SEQ + i;
                for (int d = lane; d < D; d += 32)
                    part += ld(dout + row * {{LDDO}} + h * D + d) * ld(out + row * {{LDO}} + h * D + d);
            }
            for (int o = 16; o; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
            if (lane == 0) {
                s_delta[rr] = part;
                s_lse[rr] = i < SEQ ? ld(lse + ((long long)b * {{HEADS}} + h) * SEQ + i) * LOG2E : 0.f;
            }
        }
    };

    if ((int)blockIdx.x < KBLOCKS) {                       // ---- key blocks: dk, dv ----
        const int kb = (int)blockIdx.x / BKV, bk = (int)blockIdx.x % BKV;
        const int kvh = bk % {{KV_HEADS}}, b = bk / {{KV_HEADS}};
        const long long seq0 = (long long)b * SEQ;
        const int j0 = kb * BQ, w0 = j0 + warp * 16;         // block's and warp's first key
        tile_to_shared_async<BQ, D, LDS, NT>(own1, k + (seq0 + j0) * {{LDK}} + kvh * D, {{LDK}}, SEQ - j0);
        tile_to_shared_async<BQ, D, LDS, NT>(own2, v + (seq0 + j0) * {{LDV}} + kvh * D, {{LDV}}, SEQ - j0);
        cp_async_commit();
        const bf16 *kw = own1 + warp * 16 * LDS, *vw = own2 + warp * 16 * LDS;
        float gk[NO][4], gv[NO][4];                        // dK, dV [16, D]
        for (int n = 0; n < NO; n++) for (int e = 0; e < 4; e++) { gk[n][e] = 0.f; gv[n][e] = 0.f; }
        for (int hg = 0; hg < GROUP; hg++) {
            const int h = kvh * GROUP + hg;
            for (int i0 = j0 / BK * BK; i0 < SEQ; i0 += BK) {   // query tiles that see a key of the block
                __syncthreads();                           // the previous tile's readers are done
                tile_to_shared_async<BK, D, LDS, NT>(str1, q + (seq0 + i0) * {{LDQ}} + h * D, {{LDQ}}, SEQ - i0);
                tile_to_shared_async<BK, D, LDS, NT>(str2, dout + (seq0 + i0) * {{LDDO}} + h * D, {{LDDO}}, SEQ - i0);
                cp_async_commit();
                row_stats(b, h, i0, BK);                   // while the copies land
                cp_async_wait<0>();
                __syncthreads();
                {                                          // the next tile's rows into L2 meanwhile
                    const int nh = i0 + BK < SEQ ? h : h + 1, ni = i0 + BK < SEQ ? i0 + BK : j0 / BK * BK;
                    if (nh < (kvh + 1) * GROUP) {
                        tile_prefetch_l2<BK, D, NT>(q + (seq0 + ni) * {{LDQ}} + nh * D, {{LDQ}}, SEQ - ni);
                        tile_prefetch_l2<BK, D, NT>(dout + (seq0 + ni) * {{LDDO}} + nh * D, {{LDDO}}, SEQ - ni);
                        tile_prefetch_l2<BK, D, NT>(out + (seq0 + ni) * {{LDO}} + nh * D, {{LDO}}, SEQ - ni);
                    }
                }
                if (i0 + BK - 1 < w0 || w0 >= SEQ) continue;   // causal: every query precedes the warp's keys
                float s[NS][4], dp[NS][4];                 // S^T, dP^T [16 keys, BK queries]
                for (int n = 0; n < NS; n++) for (int e = 0; e < 4; e++) { s[n][e] = 0.f; dp[n][e] = 0.f; }
                for (int kd = 0; kd < KD; kd++) {
                    unsigned ka[4], va[4];
                    mma_load_a(ka, kw + kd * 16, LDS);
                    mma_load_a(va, vw + kd * 16, LDS);
                    for (int n = 0; n < NS; n += 2) {      // two n-tiles (16 queries) an ldmatrix
                        unsigned b0[2], b1[2];
                        mma_load_b_nk(b0, b1, str1 + n * 8 * LDS + kd * 16, LDS);
                        mma_bf16_16816(s[n], ka, b0);
                        mma_bf16_16816(s[n + 1], ka, b1);
                        mma_load_b_nk(b0, b1, str2 + n * 8 * LDS + kd * 16, LDS);
                        mma_bf16_16816(dp[n], va, b0);
                        mma_bf16_16816(dp[n + 1], va, b1);
                    }
                }
                const bool masked = i0 < w0 + 15 || i0 + BK > SEQ;
                for (int n = 0; n < NS; n++)
                    for (int e = 0; e < 4; e++) {
                        const int c = n * 8 + mma_c_col(lane, e), qi = i0 + c, key = w0 + mma_c_row(lane, e);
                        float p = exp2f(s[n][e] * sl2 - s_lse[c]);
                        if (masked && (qi < key || qi >= SEQ)) p = 0.f;
                        s[n][e] = p;                       // P^T
                        dp[n][e] = p * (dp[n][e] - s_delta[c]);   // dS^T
                    }
                for (int kk = 0; kk < BK / 16; kk++) {     // dV += P^T dO, dK += dS^T Q: 16 queries a step
                    unsigned pa[4], da[4];
                    mma_c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
                    mma_c_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
                    for (int n = 0; n < NO; n += 2) {
                        unsigned b0[2], b1[2];
                        mma_load_b_kn(b0, b1, str2 + kk * 16 * LDS + n * 8, LDS);
                        mma_bf16_16816(gv[n], pa, b0);
                        mma_bf16_16816(gv[n + 1], pa, b1);
                        mma_load_b_kn(b0, b1, str1 + kk * 16 * LDS + n * 8, LDS);
                        mma_bf16_16816(gk[n], da, b0);
                        mma_bf16_16816(gk[n + 1], da, b1);
                    }
                }
            }
        }
        for (int n = 0; n < NO; n++)
            for (int e = 0; e < 4; e++) {
                const int j = w0 + mma_c_row(lane, e), d = kvh * D + n * 8 + mma_c_col(lane, e);
                if (j >= SEQ) continue;
                st(dk + (seq0 + j) * {{LDDK}} + d, gk[n][e] * {{SCALE}});
                st(dv + (seq0 + j) * {{LDDV}} + d, gv[n][e]);
            }
        return;
    }
    // ---- query blocks: dq ----
    const int qid = (int)blockIdx.x - KBLOCKS;
    const int qb = NB - 1 - qid / BH, bh = qid % BH;       // the longest query tiles first
    const int h = bh % {{HEADS}}, b = bh / {{HEADS}}, kvh = h / GROUP;
    const long long seq0 = (long long)b * SEQ;
    const int q0 = qb * BQ, w0 = q0 + warp * 16;
    const int wlast = w0 < SEQ ? min(w0 + 15, SEQ - 1) : -1;
    tile_to_shared_async<BQ, D, LDS, NT>(own1, q + (seq0 + q0) * {{LDQ}} + h * D, {{LDQ}}, SEQ - q0);
    tile_to_shared_async<BQ, D, LDS, NT>(own2, dout + (seq0 + q0) * {{LDDO}} + h * D, {{LDDO}}, SEQ - q0);
    cp_async_commit();
    row_stats(b, h, q0, BQ);                               // while the copies land
    const bf16 *qw = own1 + warp * 16 * LDS, *dow = own2 + warp * 16 * LDS;
    float gq[NO][4];                                       // dQ [16, D]
    for (int n = 0; n < NO; n++) for (int e = 0; e < 4; e++) gq[n][e] = 0.f;
    const int last = min(q0 + BQ, SEQ) - 1;
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();                                   // own rows loaded; previous readers done
        tile_to_shared_async<BK, D, LDS, NT>(str1, k + (seq0 + k0) * {{LDK}} + kvh * D, {{LDK}}, SEQ - k0);
        tile_to_shared_async<BK, D, LDS, NT>(str2, v + (seq0 + k0) * {{LDV}} + kvh * D, {{LDV}}, SEQ - k0);
        cp_async_commit();
        cp_async_wait<0>();                                // (the first one also waits for the own rows)
        __syncthreads();
        if (k0 + BK <= last) {                             // the next tile's rows into L2 meanwhile
            tile_prefetch_l2<BK, D, NT>(k + (seq0 + k0 + BK) * {{LDK}} + kvh * D, {{LDK}}, SEQ - k0 - BK);
            tile_prefetch_l2<BK, D, NT>(v + (seq0 + k0 + BK) * {{LDV}} + kvh * D, {{LDV}}, SEQ - k0 - BK);
        }
        if (k0 > wlast) continue;
        float s[NS][4], dp[NS][4];                         // S, dP [16 queries, BK keys]
        for (int n = 0; n < NS; n++) for (int e = 0; e < 4; e++) { s[n][e] = 0.f; dp[n][e] = 0.f; }
        for (int kd = 0; kd < KD; kd++) {
            unsigned qa[4], da[4];
            mma_load_a(qa, qw + kd * 16, LDS);
            mma_load_a(da, dow + kd * 16, LDS);
            for (int n = 0; n < NS; n += 2) {              // two n-tiles (16 keys) an ldmatrix
                unsigned b0[2], b1[2];
                mma_load_b_nk(b0, b1, str1 + n * 8 * LDS + kd * 16, LDS);
                mma_bf16_16816(s[n], qa, b0);
                mma_bf16_16816(s[n + 1], qa, b1);
                mma_load_b_nk(b0, b1, str2 + n * 8 * LDS + kd * 16, LDS);
                mma_bf16_16816(dp[n], da, b0);
                mma_bf16_16816(dp[n + 1], da, b1);
            }
        }
        const bool masked = k0 + BK - 1 > w0 || k0 + BK > SEQ;
        for (int n = 0; n < NS; n++)
            for (int e = 0; e < 4; e++) {
                const int r = warp * 16 + mma_c_row(lane, e), key = k0 + n * 8 + mma_c_col(lane, e);
                float p = exp2f(s[n][e] * sl2 - s_lse[r]);
                if (masked && (key > q0 + r || key >= SEQ)) p = 0.f;
                dp[n][e] = p * (dp[n][e] - s_delta[r]);    // dS
            }
        for (int kk = 0; kk < BK / 16; kk++) {             // dQ += dS K, 16 keys a step
            unsigned da[4];
            mma_c_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
            for (int n = 0; n < NO; n += 2) {
                unsigned b0[2], b1[2];
                mma_load_b_kn(b0, b1, str1 + kk * 16 * LDS + n * 8, LDS);
                mma_bf16_16816(gq[n], da, b0);
                mma_bf16_16816(gq[n + 1], da, b1);
            }
        }
    }
    if (wlast < 0) return;
    for (int n = 0; n < NO; n++)
        for (int e = 0; e < 4; e++) {
            const int i = w0 + mma_c_row(lane, e);
            if (i < SEQ) st(dq + (seq0 + i) * {{LDDQ}} + h * D + n * 8 + mma_c_col(lane, e), gq[n][e] * {{SCALE}});
        }
}
