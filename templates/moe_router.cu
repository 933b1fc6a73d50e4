// moe_router: softmax of the router logits, top-k experts per token (ties to the lower index),
// gates (renormalised over the k chosen when NORM), capacity slots in token order then choice
// order, the inverse slot map src, and the load-balance statistics aux = [loss, f_e, P_e]. One
// block: rows strided over the threads, then one thread per expert walks the tokens in order, so
// the slot assignment is deterministic. Indices are exact integers stored in fp32.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_LOGITS}} *logits, {{T_PROBS}} *probs, {{T_SEL}} *sel, {{T_GATES}} *gates, {{T_SLOT}} *slot,
         {{T_SRC}} *src, {{T_AUX}} *aux{{RANK_ARGS}}) {
    constexpr int E = {{EXPERTS}}, K = {{TOP_K}};
    constexpr long long C = {{CAPACITY}};
    for (long long m = threadIdx.x; m < {{ROWS}}; m += {{BLOCK}}) {
        const {{T_LOGITS}} *l = logits + m * {{LDL}};
        float mx = __int_as_float(0xff800000), se = 0.f;
        for (int e = 0; e < E; e++) mx = fmaxf(mx, ld(l + e));
        for (int e = 0; e < E; e++) se += expf(ld(l + e) - mx);
        for (int e = 0; e < E; e++) st(probs + m * E + e, expf(ld(l + e) - mx) / se);
        float chosen = 0.f;
        int prev_e = -1;
        float prev_p = 2.f;
        for (int k = 0; k < K; k++) {   // the k-th largest: below the previous pick in (p desc, e asc) order
            int best = -1;
            float bp = 0.f;
            for (int e = 0; e < E; e++) {
                const float p = ld(probs + m * E + e);
                const bool below = p < prev_p || (p == prev_p && e > prev_e);
                if (below && (best < 0 || p > bp)) { best = e; bp = p; }
            }
            st(sel + m * K + k, (float)best);
            chosen += bp;
            prev_e = best; prev_p = bp;
        }
        for (int k = 0; k < K; k++) {
            const float p = ld(probs + m * E + (int)ld(sel + m * K + k));
            st(gates + m * K + k, {{NORM}} ? p / chosen : p);
        }
    }
    for (long long r = threadIdx.x; r < E * C; r += {{BLOCK}}) st(src + r, -1.f);
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += {{BLOCK}}) {
        long long count = 0, routed = 0;
        float psum = 0.f;
        for (long long m = 0; m < {{ROWS}}; m++) {
            psum += ld(probs + m * E + e);
            for (int k = 0; k < K; k++) {
                if ((int)ld(sel + m * K + k) != e) continue;
                routed++;
                if (count < C) { st(slot + m * K + k, (float)count); st(src + e * C + count, (float)(m * K + k)); count++; }
                else st(slot + m * K + k, -1.f);
            }
        }
        st(aux + 1 + e, (float)routed / ((float){{ROWS}} * K));
        st(aux + 1 + E + e, psum / (float){{ROWS}});
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float a = 0.f;
        for (int e = 0; e < E; e++) a += ld(aux + 1 + e) * ld(aux + 1 + E + e);
        st(aux, {{COEF}} * (float)E * a);
    }
}
