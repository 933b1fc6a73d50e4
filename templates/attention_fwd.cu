// attention_fwd: causal attention on the tensor cores, FlashAttention-2 style (mma.sync m16n8k16,
// bf16 operands, fp32 accumulators; prelude.cuh has the fragment layout). One block of BQ/16 warps
// per (batch, head, tile of BQ queries); warp w owns queries q0+16w .. q0+16w+15 and keeps their Q
// (A fragments), scores, output and row statistics in registers. Keys and values stream through
// shared memory in tiles of BK ([BK, D] each in dynamic shared memory sized at launch, rows padded
// by 8 so that ldmatrix hits 32 different banks; V's B fragments come from the transposing ldmatrix), copied with cp.async so that V's copy
// overlaps S and the next K's copy overlaps P V. Per tile and warp: S = Q K^T (mma), an online softmax on S's C
// fragments in base 2 (row max and sum over the 4 lanes that share a row), P rounded to bf16 A
// fragments without leaving registers, O += P V (mma). Tiles past a warp's last query are skipped;
// only tiles that reach the diagonal or the sequence end are masked. The longest query tiles are
// launched first. out = softmax(scale q k^T + causal mask) v; lse[(b*heads+h)*seq + i] = the
// log-sum-exp of query i's scaled scores. GQA: head h reads kv head h / (heads/kv_heads).
// gen/kernels.c uses this template for head_dim a multiple of 16 up to 128, attention_fwd_simt.cu
// (CUDA cores) otherwise.
extern "C" __global__ void __launch_bounds__({{BLOCK_Q}} * 2, 1)
{{NAME}}(const {{T_Q}} *q, const {{T_K}} *k, const {{T_V}} *v, {{T_OUT}} *out, {{T_LSE}} *lse{{RANK_ARGS}}) {
    constexpr int D = {{HEAD_DIM}}, BQ = {{BLOCK_Q}}, BK = {{BLOCK_K}}, SEQ = {{SEQ}};
    constexpr int NT = BQ * 2, GROUP = {{HEADS}} / {{KV_HEADS}}, BH = {{BATCH}} * {{HEADS}};
    constexpr int KD = D / 16, NS = BK / 8, NO = D / 8;   // k-steps over D; n-tiles of S and of O
    constexpr int LDS = D + 8;                             // padded shared rows
    constexpr int NQB = (SEQ + BQ - 1) / BQ;
    BOOST_DYNAMIC_SHARED(smem);                            // {{SMEM}} bytes
    bf16 *const ks = (bf16 *)smem, *const vs = ks + BK * LDS;   // [BK, D] each, 16-byte aligned rows
    const float sl2 = {{SCALE}} * 1.4426950409f;           // scores in base 2: scale * log2(e)
    const float NEG_INF = __int_as_float(0xff800000);
    const int qb = NQB - 1 - (int)(blockIdx.x / BH), bh = blockIdx.x % BH;
    const int h = bh % {{HEADS}}, b = bh / {{HEADS}}, kvh = h / GROUP;
    const int lane = threadIdx.x & 31, q0 = qb * BQ, w0 = q0 + (int)(threadIdx.x >> 5) * 16;
    const int wlast = w0 < SEQ ? min(w0 + 15, SEQ - 1) : -1;   // the warp's last query (-1: none)
    const long long seq0 = (long long)b * SEQ;                  // row of token 0 of this sequence

    unsigned qf[KD][4];                                    // Q [16, D] as A fragments
    for (int kd = 0; kd < KD; kd++)
        for (int r = 0; r < 4; r++) {
            const int i = w0 + mma_a_row(lane, 2 * r), d = kd * 16 + mma_a_col(lane, 2 * r);
            const {{T_Q}} *p = q + (seq0 + i) * {{LDQ}} + h * D + d;
            qf[kd][r] = i < SEQ ? pack_bf16x2(ld(p), ld(p + 1)) : 0u;
        }
    float o[NO][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};   // m, l: row halves g, g+8
    for (int n = 0; n < NO; n++) for (int e = 0; e < 4; e++) o[n][e] = 0.f;

    // K and V tiles alternate through cp.async, FA2's overlap with single buffers: V of tile t
    // lands while the warps compute S, K of tile t+1 while they compute O += P V.
    const int last = min(q0 + BQ, SEQ) - 1;               // the block's last query
    tile_to_shared_async<BK, D, LDS, NT>(ks, k + seq0 * {{LDK}} + kvh * D, {{LDK}}, SEQ);
    cp_async_commit();
    for (int k0 = 0; k0 <= last; k0 += BK) {
        const bool active = k0 <= wlast;                   // causal: else the warp's queries precede the tile
        cp_async_wait<0>();
        __syncthreads();                                   // K tile in; every warp is done with the last V tile
        tile_to_shared_async<BK, D, LDS, NT>(vs, v + (seq0 + k0) * {{LDV}} + kvh * D, {{LDV}}, SEQ - k0);
        cp_async_commit();
        float s[NS][4];                                    // S [16, BK], then P
        if (active) {
            for (int n = 0; n < NS; n++) for (int e = 0; e < 4; e++) s[n][e] = 0.f;
            for (int n = 0; n < NS; n += 2)                    // two n-tiles (16 keys) an ldmatrix
                for (int kd = 0; kd < KD; kd++) {
                    unsigned b0[2], b1[2];
                    mma_load_b_nk(b0, b1, ks + n * 8 * LDS + kd * 16, LDS);
                    mma_bf16_16816(s[n], qf[kd], b0);
                    mma_bf16_16816(s[n + 1], qf[kd], b1);
                }
            const bool masked = k0 + BK - 1 > w0 || k0 + BK > SEQ;   // the tile reaches the diagonal or the end
            float mx[2] = {m[0], m[1]};
            for (int n = 0; n < NS; n++)
                for (int e = 0; e < 4; e++) {
                    float x = s[n][e] * sl2;
                    if (masked) {
                        const int key = k0 + n * 8 + mma_c_col(lane, e), qi = w0 + mma_c_row(lane, e);
                        if (key > qi || key >= SEQ) x = NEG_INF;
                    }
                    s[n][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float corr[2], rs[2] = {0.f, 0.f};
            for (int hf = 0; hf < 2; hf++) {                   // the 4 lanes of a group share the row
                mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
                mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
                corr[hf] = exp2f(m[hf] - mx[hf]);              // key 0 is in every row's first tile: mx finite
                m[hf] = mx[hf];
            }
            for (int n = 0; n < NS; n++)
                for (int e = 0; e < 4; e++) {
                    const float p = exp2f(s[n][e] - mx[e >> 1]);
                    s[n][e] = p;
                    rs[e >> 1] += p;
                }
            for (int hf = 0; hf < 2; hf++) l[hf] = l[hf] * corr[hf] + rs[hf];   // this lane's part of the row sum
            for (int n = 0; n < NO; n++)
                for (int e = 0; e < 4; e++) o[n][e] *= corr[e >> 1];
        }
        cp_async_wait<0>();
        __syncthreads();                                   // V tile in; every warp is done with the K tile
        if (k0 + BK <= last)
            tile_to_shared_async<BK, D, LDS, NT>(ks, k + (seq0 + k0 + BK) * {{LDK}} + kvh * D, {{LDK}}, SEQ - k0 - BK);
        cp_async_commit();
        if (!active) continue;
        for (int kk = 0; kk < BK / 16; kk++) {             // O += P V, 16 keys a step
            unsigned pa[4];
            mma_c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
            for (int n = 0; n < NO; n += 2) {
                unsigned b0[2], b1[2];
                mma_load_b_kn(b0, b1, vs + kk * 16 * LDS + n * 8, LDS);
                mma_bf16_16816(o[n], pa, b0);
                mma_bf16_16816(o[n + 1], pa, b1);
            }
        }
    }
    if (wlast < 0) return;
    for (int hf = 0; hf < 2; hf++) {
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
    }
    for (int n = 0; n < NO; n++)
        for (int e = 0; e < 4; e++) {
            const int i = w0 + mma_c_row(lane, e);
            if (i < SEQ) st(out + (seq0 + i) * {{LDO}} + h * D + n * 8 + mma_c_col(lane, e), o[n][e] / l[e >> 1]);
        }
    if ((lane & 3) == 0)
        for (int hf = 0; hf < 2; hf++) {
            const int i = w0 + mma_c_row(lane, 2 * hf);
            if (i < SEQ) st(lse + ((long long)b * {{HEADS}} + h) * SEQ + i, m[hf] * 0.6931471806f + logf(l[hf]));
        }
}
