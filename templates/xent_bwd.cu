// xent_bwd: dlogits[m,j] = (exp(logits[m,j] - lse[m]) - [vocab_offset + j == targets[m]]) * scale.
// One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_LOGITS}} *logits, const int *targets, const {{T_LSE}} *lse, {{T_DLOGITS}} *dlogits{{RANK_ARGS}}) {
    constexpr long long CHUNKS = {{COLS}} / {{VEC}};
    const long long i = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (i >= {{ROWS}} * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * {{VEC}};
    const float l = ld(lse + m);
    const long long t = (long long)targets[m] - (long long)({{VOCAB_OFFSET}});
    float a[{{VEC}}];
    ldv<{{VEC}}>(logits + m * {{LDL}} + j, a);
    for (int e = 0; e < {{VEC}}; e++)
        a[e] = (expf(a[e] - l) - (j + e == t ? 1.f : 0.f)) * {{SCALE}};
    stv<{{VEC}}>(dlogits + m * {{LDDL}} + j, a);
}
