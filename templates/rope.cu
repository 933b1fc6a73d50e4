// rope: in place on heads consecutive blocks of head_dim columns; position p = m % seq, pair
// (a, b) = (x[i], x[i + head_dim/2]), f = p * theta^(-2i/head_dim): a' = a cos f - b sin f,
// b' = b cos f + a sin f; inverse=1 rotates by -f. The angle is computed in double (positions
// reach tens of thousands of radians). One thread per pair.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}({{T_X}} *x{{RANK_ARGS}}) {
    constexpr int HALF = {{HEAD_DIM}} / 2;
    const long long t = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (t >= (long long){{ROWS}} * {{HEADS}} * HALF) return;
    const int i = (int)(t % HALF);
    const long long mh = t / HALF;
    const int head = (int)(mh % {{HEADS}});
    const long long m = mh / {{HEADS}};
    const long long p = m % {{SEQ}};
    const double f = (double)p * pow((double){{THETA}}, -2.0 * i / (double){{HEAD_DIM}});
    double sn, cs;
    sincos(f, &sn, &cs);
    const float c = (float)cs, s = {{INVERSE}} ? -(float)sn : (float)sn;
    {{T_X}} *row = x + m * {{LDX}} + (long long)head * {{HEAD_DIM}};
    const float a = ld(row + i), b = ld(row + i + HALF);
    st(row + i, a * c - b * s);
    st(row + i + HALF, b * c + a * s);
}
