// moe_router_bwd: dp[e] = SCALE*COEF*E*f_e/rows (load-balance loss) + the gates' part (chosen e:
// (dgates - sum_k dgates*gates)/S renormalised, dgates raw), then the softmax backward
// dlogits[m,e] (+)= p[e]*(dp[e] - sum_e' p[e']*dp[e']). One thread per token row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_PROBS}} *probs, const {{T_SEL}} *sel, const {{T_GATES}} *gates, const {{T_AUX}} *aux,
         const {{T_DGATES}} *dgates, {{T_DLOGITS}} *dlogits{{RANK_ARGS}}) {
    constexpr int E = {{EXPERTS}}, K = {{TOP_K}};
    const long long m = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (m >= {{ROWS}}) return;
    const {{T_PROBS}} *p = probs + m * E;
    const float lb = {{SCALE}} * {{COEF}} * (float)E / (float){{ROWS}};
    float S = 0.f, gd = 0.f;
    for (int k = 0; k < K; k++) {
        S += ld(p + (int)ld(sel + m * K + k));
        gd += ld(dgates + m * K + k) * ld(gates + m * K + k);
    }
    float dot = 0.f;
    for (int pass = 0; pass < 2; pass++)
        for (int e = 0; e < E; e++) {
            float dp = lb * ld(aux + 1 + e);
            for (int k = 0; k < K; k++)
                if ((int)ld(sel + m * K + k) == e) {
                    const float dg = ld(dgates + m * K + k);
                    dp += {{NORM}} ? (dg - gd) / S : dg;
                }
            if (pass == 0) { dot += ld(p + e) * dp; continue; }
            // z-loss ZCOEF/ROWS * sum lse^2: 2*ZCOEF*lse*p_e/ROWS
            const float zg = {{ZCOEF}} > 0.f ? {{SCALE}} * 2.f * {{ZCOEF}} * ld(aux + 2 + 2 * E + m) / (float){{ROWS}} : 0.f;
            const float v = ld(p + e) * (dp - dot) + zg * ld(p + e);
            {{T_DLOGITS}} *o = dlogits + m * {{LDDL}} + e;
            st(o, {{ACC}} ? ld(o) + v : v);
        }
}
