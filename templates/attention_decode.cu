// attention_decode: query row m (position p = pos[0] + m) of head h against the KV cache rows
// 0..p of kv head h / (heads/kv_heads): out = softmax(scale q k^T) v. One block per (row, head):
// the scores sit in shared memory (max_seq floats), then a block max and sum, then each thread
// owns head_dim/BLOCK output columns.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_Q}} *q, const {{T_KCACHE}} *kcache, const {{T_VCACHE}} *vcache, const {{T_POS}} *pos, {{T_OUT}} *out{{RANK_ARGS}}) {
    __shared__ float s[{{MAX_SEQ}}];
    const int h = blockIdx.x % {{HEADS}};
    const long long m = blockIdx.x / {{HEADS}};
    const long long p = (long long)ld(pos) + m;
    const int kvh = h / ({{HEADS}} / {{KV_HEADS}});
    const long long n = p < {{MAX_SEQ}} ? p + 1 : {{MAX_SEQ}};
    const {{T_Q}} *qr = q + m * {{LDQ}} + (long long)h * {{HEAD_DIM}};
    const {{T_KCACHE}} *K = kcache + (long long)kvh * {{MAX_SEQ}} * {{HEAD_DIM}};
    const {{T_VCACHE}} *V = vcache + (long long)kvh * {{MAX_SEQ}} * {{HEAD_DIM}};
    float mx = -3.0e38f;
    for (long long j = threadIdx.x; j < n; j += {{BLOCK}}) {
        float d = 0.f;
        for (int t = 0; t < {{HEAD_DIM}}; t++) d += ld(qr + t) * ld(K + j * {{HEAD_DIM}} + t);
        s[j] = d * {{SCALE}};
        mx = fmaxf(mx, s[j]);
    }
    mx = block_max<{{BLOCK}}>(mx);
    float sum = 0.f;
    for (long long j = threadIdx.x; j < n; j += {{BLOCK}}) { s[j] = expf(s[j] - mx); sum += s[j]; }
    sum = block_sum<{{BLOCK}}>(sum);
    __syncthreads();
    for (int t = threadIdx.x; t < {{HEAD_DIM}}; t += {{BLOCK}}) {
        float o = 0.f;
        for (long long j = 0; j < n; j++) o += s[j] * ld(V + j * {{HEAD_DIM}} + t);
        st(out + m * {{LDO}} + (long long)h * {{HEAD_DIM}} + t, o / sum);
    }
}
