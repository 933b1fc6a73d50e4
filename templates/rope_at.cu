// rope_at: RoPE for inference: row m sits at position pos[0] + m (pos: an exact integer in fp32,
// written by the runtime before each decode step); otherwise as rope.cu. One thread per pair.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}({{T_X}} *x, const {{T_POS}} *pos{{RANK_ARGS}}) {
    constexpr int HALF = {{HEAD_DIM}} / 2;
    const long long t = (long long)blockIdx.x * {{BLOCK}} + threadIdx.x;
    if (t >= (long long){{ROWS}} * {{HEADS}} * HALF) return;
    const int i = (int)(t % HALF);
    const long long mh = t / HALF;
    const int head = (int)(mh % {{HEADS}});
    const long long m = mh / {{HEADS}};
    const long long p = (long long)ld(pos) + m;
    const double f = (double)p * pow((double){{THETA}}, -2.0 * i / (double){{HEAD_DIM}});
    double sn, cs;
    sincos(f, &sn, &cs);
    const float c = (float)cs, s = (float)sn;
    {{T_X}} *row = x + m * {{LDX}} + (long long)head * {{HEAD_DIM}};
    const float a = ld(row + i), b = ld(row + i + HALF);
    st(row + i, a * c - b * s);
    st(row + i + HALF, b * c + a * s);
}
