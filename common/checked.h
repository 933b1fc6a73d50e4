/* checked.h: overflow-checked arithmetic for every size, offset and count read from a file
 * (plan.txt, safetensors headers, index.json, state.json, token shard headers). Each returns 0 on
 * success and -1 when the result does not fit (or an argument is out of range), so a crafted number
 * becomes a clear error at the reader instead of a wrapped value that passes a bounds check. */
#ifndef BOOST_CHECKED_H
#define BOOST_CHECKED_H

#include <stdint.h>

/* The largest element count or byte size any reader accepts (2^50: a petabyte; far above any
 * real tensor, far below where int64 products wrap). */
#define CK_MAX_SIZE ((int64_t)1 << 50)

static inline int ck_add(int64_t a, int64_t b, int64_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

static inline int ck_mul(int64_t a, int64_t b, int64_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

/* Product of n non-negative dimensions, at most CK_MAX_SIZE: the element count of a shape. */
static inline int ck_numel(const int64_t *dims, int n, int64_t *out) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i] < 0 || ck_mul(p, dims[i], &p) || p > CK_MAX_SIZE) return -1;
    }
    *out = p;
    return 0;
}

/* rows * cols * elem_bytes as a byte count, all non-negative, at most CK_MAX_SIZE. */
static inline int ck_bytes(int64_t rows, int64_t cols, int64_t elem_bytes, int64_t *out) {
    int64_t d[3] = {rows, cols, elem_bytes};
    return ck_numel(d, 3, out);
}

/* Is [off, off + len) inside [0, limit)? All checked: 0 yes, -1 no (negative, wrapped or past). */
static inline int ck_span(int64_t off, int64_t len, int64_t limit) {
    int64_t end;
    if (off < 0 || len < 0 || ck_add(off, len, &end)) return -1;
    return end <= limit ? 0 : -1;
}

/* A JSON number (a double) as a whole non-negative integer of at most CK_MAX_SIZE; the range is
 * checked before the conversion, so no out-of-range float-to-integer cast happens. */
static inline int ck_whole(double v, int64_t *out) {
    if (!(v >= 0) || v > (double)CK_MAX_SIZE || v != (double)(int64_t)v) return -1;
    *out = (int64_t)v;
    return 0;
}

#endif
