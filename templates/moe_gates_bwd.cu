// moe_gates_bwd: dgates[m, k] = sum_j dout[m, j] * eo[sel[m,k]*CAPACITY + slot[m,k], j] over the
// rank's columns (0 for a dropped choice). One block per token row; deterministic block sums.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_DOUT}} *dout, const {{T_EO}} *eo, const {{T_SEL}} *sel, const {{T_SLOT}} *slot,
         {{T_DGATES}} *dgates{{RANK_ARGS}}) {
    const long long m = blockIdx.x;
    for (int k = 0; k < {{TOP_K}}; k++) {
        const long long s = (long long)ld(slot + m * {{TOP_K}} + k);
        float part = 0.f;
        if (s >= 0) {
            const long long r = (long long)ld(sel + m * {{TOP_K}} + k) * {{CAPACITY}} + s;
            for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
                float a[{{VEC}}], b[{{VEC}}];
                ldv<{{VEC}}>(dout + m * {{LDO}} + j, a);
                ldv<{{VEC}}>(eo + r * {{LDE}} + j, b);
                for (int e = 0; e < {{VEC}}; e++) part += a[e] * b[e];
            }
        }
        const float v = block_sum<{{BLOCK}}>(part);
        if (threadIdx.x == 0) st(dgates + m * {{TOP_K}} + k, v);
    }
}
