// runtime.cu: kernels the CUDA backend itself launches (not plan steps): AdamW with fp32 master
// weights and a bf16 copy, the gradient square sum for clipping, the local-mode all-reduce over
// the ranks' buffers, and fp32 <-> bf16 conversion for host copies. Fixed names (gen/kernels.h).
extern "C" __global__ void __launch_bounds__(256)
adamw_fp32_master_bf16(float *master, bf16 *param, const float *grad, float *m, float *v, long long n,
                       float lr, float beta1, float beta2, float eps, float weight_decay,
                       float grad_scale, float bias1, float bias2) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
        const float g = grad[i] * grad_scale;
        const float mi = beta1 * m[i] + (1.f - beta1) * g;
        const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
        m[i] = mi; v[i] = vi;
        float p = master[i];
        p -= lr * ((mi / bias1) / (sqrtf(vi / bias2) + eps) + weight_decay * p);
        master[i] = p;
        if (param) param[i] = __float2bfloat16(p);
    }
}

// The same update for every parameter of a rank in one launch (multi-tensor apply): master, param,
// grad, m, v are the rank's whole buffers (element offsets as in runtime/cuda.c); block b updates
// chunk b of the table, chunks[3b..3b+2] = {first element, count (<= 65536), flags: 1 weight decay,
// 2 the parameter has a bf16 copy}. Elementwise the arithmetic of adamw_fp32_master_bf16.
extern "C" __global__ void __launch_bounds__(256)
adamw_multi_fp32_master_bf16(float *master, bf16 *param, const float *grad, float *m, float *v,
                             const long long *chunks, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float grad_scale, float bias1, float bias2) {
    const long long first = chunks[3 * (long long)blockIdx.x], count = chunks[3 * (long long)blockIdx.x + 1];
    const long long flags = chunks[3 * (long long)blockIdx.x + 2];
    const float wd = (flags & 1) ? weight_decay : 0.f;
    for (long long j = threadIdx.x; j < count; j += 256) {
        const long long i = first + j;
        const float g = grad[i] * grad_scale;
        const float mi = beta1 * m[i] + (1.f - beta1) * g;
        const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
        m[i] = mi; v[i] = vi;
        float p = master[i];
        p -= lr * ((mi / bias1) / (sqrtf(vi / bias2) + eps) + wd * p);
        master[i] = p;
        if (flags & 2) param[i] = __float2bfloat16(p);
    }
}

// ZeRO-1 (zero=1): the same update over this dp rank's shards, whose fp32 masters and moments are
// stored apart from the whole params and grads. chunks[5b..5b+4] = {param/grad element, master
// element, m/v element, count (<= 65536), flags as above}; an fp32 param's master is the param.
extern "C" __global__ void __launch_bounds__(256)
adamw_multi_sharded(float *master, bf16 *param, const float *grad, float *m, float *v,
                    const long long *chunks, float lr, float beta1, float beta2, float eps,
                    float weight_decay, float grad_scale, float bias1, float bias2) {
    const long long *c = chunks + 5 * (long long)blockIdx.x;
    const long long first = c[0], mfirst = c[1], sfirst = c[2], count = c[3], flags = c[4];
    const float wd = (flags & 1) ? weight_decay : 0.f;
    for (long long j = threadIdx.x; j < count; j += 256) {
        const long long i = first + j, k = sfirst + j;
        const float g = grad[i] * grad_scale;
        const float mi = beta1 * m[k] + (1.f - beta1) * g;
        const float vi = beta2 * v[k] + (1.f - beta2) * g * g;
        m[k] = mi; v[k] = vi;
        float p = master[mfirst + j];
        p -= lr * ((mi / bias1) / (sqrtf(vi / bias2) + eps) + wd * p);
        master[mfirst + j] = p;
        if (flags & 2) param[i] = __float2bfloat16(p);
    }
}

// partial[blockIdx.x] = sum of x[i]^2 over the block's grid-stride share (the host adds the
// partials in double, in order: deterministic).
extern "C" __global__ void __launch_bounds__(256)
boost_sumsq_fp32(const float *x, long long n, float *partial) {
    float s = 0.f;
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        s += x[i] * x[i];
    s = block_sum<256>(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Local-mode all-reduce: bufs[r][i] = sum over r' of bufs[r'][i], in rank order 0..n-1.
extern "C" __global__ void __launch_bounds__(256)
boost_allreduce_bf16(bf16 *const *bufs, int nranks, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
        float s = 0.f;
        for (int r = 0; r < nranks; r++) s += __bfloat162float(bufs[r][i]);
        for (int r = 0; r < nranks; r++) bufs[r][i] = __float2bfloat16(s);
    }
}
extern "C" __global__ void __launch_bounds__(256)
boost_allreduce_fp32(float *const *bufs, int nranks, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
        float s = 0.f;
        for (int r = 0; r < nranks; r++) s += bufs[r][i];
        for (int r = 0; r < nranks; r++) bufs[r][i] = s;
    }
}

extern "C" __global__ void __launch_bounds__(256)
boost_fp32_to_bf16(const float *src, bf16 *dst, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        dst[i] = __float2bfloat16(src[i]);
}
extern "C" __global__ void __launch_bounds__(256)
boost_bf16_to_fp32(const bf16 *src, float *dst, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        dst[i] = __bfloat162float(src[i]);
}

// x[i] *= s (the scale= of a group=edp all-reduce: the expert gradients' 1/dp).
extern "C" __global__ void __launch_bounds__(256)
boost_scale_fp32(float *x, float s, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        x[i] *= s;
}

// Expert parallelism: row r of x [rows, row_bytes] is set to zero where the slot map says the slot
// is empty (map[r] < 0), so only filled slots carry values through the ep all-to-all.
extern "C" __global__ void __launch_bounds__(256)
boost_ep_mask_rows(unsigned char *x, const float *map, long long rows, long long row_bytes) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < rows * row_bytes; i += (long long)gridDim.x * 256)
        if (map[i / row_bytes] < 0.f) x[i] = 0;
}
