// embedding_bwd: dtable[tokens[m], j] += dout[m, j]. One thread per column walks the rows in
// order, so the sums are deterministic without atomics.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const int *tokens, const {{T_DOUT}} *dout, {{T_DTABLE}} *dtable{{RANK_ARGS}}) {
    const long long j = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (j >= {{COLS}}) return;
    for (long long m = 0; m < {{ROWS}}; m++) {
        const int t = tokens[m];
        if (t < 0 || t >= {{VOCAB}}) continue;
        {{T_DTABLE}} *p = dtable + (long long)t * {{COLS}} + j;
        st(p, ld(p) + ld(dout + m * {{LDO}} + j));
    }
}
