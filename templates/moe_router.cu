// moe_router: softmax of the router logits, top-k experts per token (ties to the lower index),
// gates (renormalised over the k chosen when NORM), capacity slots in token order then choice
// order, the inverse slot map src, and the load-balance statistics aux = [loss, f_e, P_e] (with a
// z-loss, ZCOEF > 0: then [.., z-loss, each token's lse] and loss = both). One
// block walks the tokens in chunks of BLOCK (a thread per token): the chunk's choices go to shared
// memory, G = BLOCK/E threads per expert count them over G segments, and each assigns its
// segment's slots from the running count plus the counts of the segments before it, so the
// assignment is the sequential one (token order, then choice order) and deterministic. Indices
// are exact integers stored in fp32.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_LOGITS}} *logits, {{T_PROBS}} *probs, {{T_SEL}} *sel, {{T_GATES}} *gates, {{T_SLOT}} *slot,
         {{T_SRC}} *src, {{T_AUX}} *aux{{RANK_ARGS}}) {
    constexpr int E = {{EXPERTS}}, K = {{TOP_K}}, B = {{BLOCK}};
    constexpr long long C = {{CAPACITY}};
    constexpr int G = E >= B ? 1 : B / E;              // threads per expert
    constexpr int N = B * K;                           // choices in a chunk
    constexpr int SEG = (N + G - 1) / G;               // choices per segment
    constexpr int P = E * G > B ? E * G : B;
    __shared__ int ch[N];                              // the chunk's choices (expert or -1)
    __shared__ int part[P];                            // per (expert, segment): matches
    __shared__ long long cnt[E];                       // choices routed to each expert so far
    const int t = threadIdx.x;
    for (int e = t; e < E; e += B) cnt[e] = 0;
    for (long long r = t; r < E * C; r += B) st(src + r, -1.f);
    __syncthreads();
    for (long long base = 0; base < {{ROWS}}; base += B) {
        const long long m = base + t;
        if (m < {{ROWS}}) {
            const {{T_LOGITS}} *l = logits + m * {{LDL}};
            float mx = __int_as_float(0xff800000), se = 0.f;
            for (int e = 0; e < E; e++) mx = fmaxf(mx, ld(l + e));
            for (int e = 0; e < E; e++) se += expf(ld(l + e) - mx);
            for (int e = 0; e < E; e++) st(probs + m * E + e, expf(ld(l + e) - mx) / se);
            if ({{ZCOEF}} > 0.f) st(aux + 2 + 2 * E + m, mx + logf(se));   // z-loss: the token's lse
            float chosen = 0.f, prev_p = 2.f;
            int prev_e = -1;
            for (int k = 0; k < K; k++) {   // the k-th largest: below the previous pick in (p desc, e asc) order
                int best = -1;
                float bp = 0.f;
                for (int e = 0; e < E; e++) {
                    const float p = ld(probs + m * E + e);
                    const bool below = p < prev_p || (p == prev_p && e > prev_e);
                    if (below && (best < 0 || p > bp)) { best = e; bp = p; }
                }
                st(sel + m * K + k, (float)best);
                ch[t * K + k] = best;
                chosen += bp;
                prev_e = best; prev_p = bp;
            }
            for (int k = 0; k < K; k++) {
                const float p = ld(probs + m * E + ch[t * K + k]);
                st(gates + m * K + k, {{NORM}} ? p / chosen : p);
            }
        } else {
            for (int k = 0; k < K; k++) ch[t * K + k] = -1;
        }
        __syncthreads();
        for (int q = t; q < E * G; q += B) {           // count each segment's choices of expert q/G
            const int e = q / G, g = q % G;
            int n = 0;
            for (int i = g * SEG; i < (g + 1) * SEG && i < N; i++) n += ch[i] == e;
            part[q] = n;
        }
        __syncthreads();
        for (int q = t; q < E * G; q += B) {           // assign the segment's slots in order
            const int e = q / G, g = q % G;
            long long idx = cnt[e];
            for (int h = 0; h < g; h++) idx += part[e * G + h];
            for (int i = g * SEG; i < (g + 1) * SEG && i < N; i++) {
                if (ch[i] != e) continue;
                const long long mm = base + i / K;
                const float s = idx < C ? (float)idx : -1.f;
                st(slot + mm * K + i % K, s);
                if (idx < C) st(src + e * C + idx, (float)(mm * K + i % K));
                idx++;
            }
        }
        __syncthreads();
        for (int e = t; e < E; e += B)
            for (int h = 0; h < G; h++) cnt[e] += part[e * G + h];
        __syncthreads();
    }
    // P_e = mean over tokens of probs[:, e]: G threads per expert, then a fixed-order sum
    for (int q = t; q < E * G; q += B) {
        const int e = q / G, g = q % G;
        float s = 0.f;
        for (long long m = g; m < {{ROWS}}; m += G) s += ld(probs + m * E + e);
        ((float *)part)[q] = s;
    }
    __syncthreads();
    for (int e = t; e < E; e += B) {
        float s = 0.f;
        for (int h = 0; h < G; h++) s += ((float *)part)[e * G + h];
        st(aux + 1 + e, (float)cnt[e] / ((float){{ROWS}} * K));
        st(aux + 1 + E + e, s / (float){{ROWS}});
    }
    __syncthreads();
    if ({{ZCOEF}} > 0.f) {   // z-loss: each thread sums lse^2 of its tokens, then a fixed-order sum
        float s = 0.f;
        for (long long m = t; m < {{ROWS}}; m += B) { const float v = ld(aux + 2 + 2 * E + m); s += v * v; }
        ((float *)part)[t] = s;
    }
    __syncthreads();
    if (t == 0) {
        float a = 0.f;
        for (int e = 0; e < E; e++) a += ld(aux + 1 + e) * ld(aux + 1 + E + e);
        float z = 0.f;
        if ({{ZCOEF}} > 0.f) {
            for (int h = 0; h < B; h++) z += ((float *)part)[h];
            z = {{ZCOEF}} * z / (float){{ROWS}};
            st(aux + 1 + 2 * E, z);
        }
        st(aux, {{COEF}} * (float)E * a + z);
    }
}
