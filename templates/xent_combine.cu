// xent_combine: stats_all = the allgather of every rank's stats (rows x 3*tp). Global max g,
// sumexp = sum_r se_r*exp(max_r - g), lse[m] = g + log(sumexp), target logit = sum_r t_r,
// loss[0] = mean_m (lse[m] - target logit). One block; fixed summation order (deterministic).
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_STATS_ALL}} *stats_all, {{T_LSE}} *lse, {{T_LOSS}} *loss{{RANK_ARGS}}) {
    float total = 0.f;
    for (long long m = threadIdx.x; m < {{ROWS}}; m += {{BLOCK}}) {
        const {{T_STATS_ALL}} *s = stats_all + m * 3 * {{TP}};
        float g = __int_as_float(0xff800000), tl = 0.f, se = 0.f;
        for (int r = 0; r < {{TP}}; r++) g = fmaxf(g, ld(s + 3 * r));
        for (int r = 0; r < {{TP}}; r++) {
            se += ld(s + 3 * r + 1) * expf(ld(s + 3 * r) - g);
            tl += ld(s + 3 * r + 2);
        }
        const float l = g + logf(se);
        st(lse + m, l);
        total += l - tl;
    }
    total = block_sum<{{BLOCK}}>(total);
    if (threadIdx.x == 0) st(loss, total / (float){{ROWS}});
}
