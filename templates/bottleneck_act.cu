// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(stat[m] + eps) (the summed online-norm statistics, which follow h's rows in the same
// all-reduce buffer), y = h*rstd; norm=0: y = h. Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_H}} *h, {{T_Y}} *y, {{T_Z}} *z, {{T_RSTD}} *rstd, const {{T_STAT}} *stat{{RANK_ARGS}}) {
    const long long m = blockIdx.x;
    const {{T_H}} *hr = h + m * {{LDH}};
    float r = 1.f;
    if ({{NORM}}) {
        r = rsqrtf(ld(stat + m) + {{EPS}});
        if (rstd && threadIdx.x == 0) st(rstd + m, r);
    }
    for (int j = threadIdx.x * {{VEC}}; j < {{COLS}}; j += {{BLOCK}} * {{VEC}}) {
        float a[{{VEC}}];
        ldv<{{VEC}}>(hr + j, a);
        for (int e = 0; e < {{VEC}}; e++) a[e] *= r;
        if (y) stv<{{VEC}}>(y + m * {{LDY}} + j, a);
        for (int e = 0; e < {{VEC}}; e++) a[e] = act_apply({{ACT}}, a[e]);
        stv<{{VEC}}>(z + m * {{LDZ}} + j, a);
    }
}
