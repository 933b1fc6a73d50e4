/* safetensors.h: the safetensors file format (what PyTorch's safetensors loader reads): an 8-byte
 * little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, __metadata__:
 * {string: string}}, then the raw little-endian tensor bytes. Writer (F32) and checked reader;
 * the header is parsed by common/json.h. */
#ifndef BOOST_SAFETENSORS_H
#define BOOST_SAFETENSORS_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include "common/json.h"   // defines: Json (StFile.header)

/* ---- writing ---- */
/* Fills tensor i (rows*cols floats) into out; returns 0, or non-zero to abort with that code. */
typedef int (*StFillFn)(void *ctx, int i, float *out);

typedef struct {
    const char *name;
    int64_t rows, cols;       /* saved with shape [rows, cols] */
} StEntry;

/* Write n F32 tensors to path (tensor data in the order given, each filled by fill() into one
 * reused buffer) with metadata pairs meta[0..2*nmeta) = key, value, ... The file is flushed and
 * fsync'ed before it is closed. On failure the partial file is removed and err says why
 * ("PATH: write failed: No space left on device"). Returns 0 or 1. */
int st_write_f32(const char *path, const StEntry *entries, int n, const char *const *meta, int nmeta,
                 StFillFn fill, void *ctx, char *err, size_t errlen);
/* The same, also giving the CRC-32C (common/crc32c.h) and the size of the file's bytes as they
 * were written (crc, bytes may be NULL). */
int st_write_f32_sum(const char *path, const StEntry *entries, int n, const char *const *meta, int nmeta,
                     StFillFn fill, void *ctx, uint32_t *crc, int64_t *bytes, char *err, size_t errlen);

/* ---- reading ---- */
typedef struct {
    char *name;
    char dtype[16];
    int ndim;
    int64_t shape[8];
    int64_t begin, end;       /* byte offsets in the data section */
} StTensor;

typedef struct {
    char path[512];
    StTensor *tensors; int ntensors;
    Json *header;             /* the parsed header (for __metadata__) */
    unsigned char *data;      /* the data section (owned) */
    int64_t data_len;
} StFile;

/* Read and check a whole file: header length in range, JSON well formed, every tensor's dtype
 * known, its byte range inside the data section and the size of its shape. Returns 0, or 2 with
 * "PATH: what is wrong" in err (truncated, not a safetensors file, ...). */
int st_open(const char *path, StFile *f, char *err, size_t errlen);
void st_close(StFile *f);
const StTensor *st_find(const StFile *f, const char *name);
const char *st_meta(const StFile *f, const char *key);    /* NULL when absent */
/* Copy an F32 tensor's elements to out (count = product of its shape). */
void st_read_f32(const StFile *f, const StTensor *t, float *out);
int64_t st_numel(const StTensor *t);

#endif
