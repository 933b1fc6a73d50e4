/* tbevents.c: TensorBoard event files (tbevents.h): each record is uint64 length, uint32 masked
 * CRC-32C of those 8 bytes, the serialized Event, uint32 masked CRC-32C of it (common/crc32c.h).
 * Event {1: wall_time double, 2: step int64, 3: file_version string, 5: summary Summary};
 * Summary {1: repeated Value}; Value {1: tag string, 2: simple_value float}. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "common/crc32c.h"
#include "common/json.h"   // defines: json_parse
#include "runtime/tbevents.h"

struct TbEvents { FILE *f; char path[1200]; };

uint32_t tb_masked_crc(const void *buf, size_t len) {
    uint32_t c = crc32c_update(0, buf, len);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf pieces into a small buffer ---- */
typedef struct { unsigned char b[1024]; size_t n; } Pb;

static void pb_varint(Pb *p, uint64_t v) {
    while (v >= 0x80 && p->n < sizeof p->b) { p->b[p->n++] = (unsigned char)(v | 0x80); v >>= 7; }
    if (p->n < sizeof p->b) p->b[p->n++] = (unsigned char)v;
}
static void pb_bytes(Pb *p, int field, const void *s, size_t len) {   /* wire type 2 */
    pb_varint(p, (uint64_t)field << 3 | 2);
    pb_varint(p, len);
    if (p->n + len <= sizeof p->b) { memcpy(p->b + p->n, s, len); p->n += len; }
}
static void pb_fixed(Pb *p, int field, int wire, const void *v,
                     size_t len) { /* 1: 64-bit, 5: 32-bit */
    pb_varint(p, (uint64_t)field << 3 | (uint64_t)wire);
    if (p->n + len <= sizeof p->b) {
        memcpy(p->b + p->n, v, len);
        p->n += len;
    } /* little-endian */
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int write_record(TbEvents *t, const Pb *ev) {
    uint64_t len = ev->n;
    uint32_t lc = tb_masked_crc(&len, 8), dc = tb_masked_crc(ev->b, ev->n);
    int ok = fwrite(&len, 8, 1, t->f) == 1 && fwrite(&lc, 4, 1, t->f) == 1 &&
             fwrite(ev->b, 1, ev->n, t->f) == ev->n && fwrite(&dc, 4, 1, t->f) == 1;
    return ok ? 0 : 1;
}

/* An Event with wall time and step, then either the file version or one scalar. */
static void event_head(Pb *ev, int64_t step) {
    double wt = wall_now();
    ev->n = 0;
    pb_fixed(ev, 1, 1, &wt, 8);
    pb_varint(ev, 2 << 3 | 0);
    pb_varint(ev, (uint64_t)step);
}

static int mkdirs(const char *dir) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(tmp, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

TbEvents *tb_open(const char *dir, char *err, size_t errlen) {
    if (mkdirs(dir) != 0) {
        snprintf(err, errlen, "%s: cannot create the folder: %s", dir, strerror(errno));
        return NULL;
    }
    TbEvents *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err, errlen, "out of memory"); return NULL; }
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(t->path, sizeof t->path, "%s/events.out.tfevents.%lld.%s.%d.boost", dir,
             (long long)time(NULL), host, (int)getpid());
    t->f = fopen(t->path, "wb");
    if (!t->f) {
        snprintf(err, errlen, "%s: cannot create: %s", t->path, strerror(errno));
        free(t);
        return NULL;
    }
    Pb ev;
    event_head(&ev, 0);
    pb_bytes(&ev, 3, "brain.Event:2", 13);
    if (write_record(t, &ev) || fflush(t->f) != 0) {
        snprintf(err, errlen, "%s: write failed: %s", t->path, strerror(errno));
        tb_close(t);
        return NULL;
    }
    return t;
}

int tb_scalar(TbEvents *t, int64_t step, const char *tag, double value) {
    Pb value_msg = {.n = 0}, summary = {.n = 0}, ev;
    float v = (float)value;
    pb_bytes(&value_msg, 1, tag, strlen(tag));
    pb_fixed(&value_msg, 2, 5, &v, 4);
    pb_bytes(&summary, 1, value_msg.b, value_msg.n);
    event_head(&ev, step);
    pb_bytes(&ev, 5, summary.b, summary.n);
    return write_record(t, &ev);
}

/* Numbers, arrays of them and arrays of arrays: one scalar each. */
static int json_value_scalars(TbEvents *t, int64_t step, const char *tag, const Json *v,
                              int depth) {
    if (v->type == JSON_NUMBER) return tb_scalar(t, step, tag, v->num);
    if (v->type != JSON_ARRAY || depth > 2) return 0;
    int rc = 0;
    for (int i = 0; i < v->n && !rc; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/%d", tag, i);
        rc = json_value_scalars(t, step, sub, &v->items[i], depth + 1);
    }
    return rc;
}

int tb_json_scalars(TbEvents *t, int64_t step, const char *json, size_t len) {
    char why[128];
    Json *j = json_parse(json, len, why, sizeof why);
    int rc = 0;
    for (int i = 0; j && j->type == JSON_OBJECT && i < j->n && !rc; i++)
        rc = json_value_scalars(t, step, j->keys[i], &j->items[i], 0);
    json_free(j);
    return rc;
}

void tb_flush(TbEvents *t) { if (t && t->f) fflush(t->f); }
const char *tb_path(const TbEvents *t) { return t->path; }

void tb_close(TbEvents *t) {
    if (!t) return;
    if (t->f) fclose(t->f);
    free(t);
}
