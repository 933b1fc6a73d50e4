/* files.c: file_read_all and file_read_stream (common/files.h): a read loop that grows one buffer
 * to the file's end, refusing files over a cap, with errors that name the file; file_commit: a
 * temporary file checked, closed and renamed into place. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common/files.h"   // defines: file_read_all, file_read_stream, file_commit

char *file_read_stream(FILE *f, const char *name, size_t max_bytes, size_t *len, char *err,
                       size_t errlen) {
    /* the buffer grows to one byte past the cap at most: reading that byte is the refusal */
    size_t limit = max_bytes < SIZE_MAX - 1 ? max_bytes + 1 : max_bytes;
    size_t cap = (size_t)1 << 16 < limit ? (size_t)1 << 16 : limit, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            snprintf(err, errlen, "%s: out of memory", name);
            errno = ENOMEM;
            return NULL;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n > max_bytes) {
            snprintf(err, errlen, "%s: larger than %zu bytes", name, max_bytes);
            free(buf);
            errno = EFBIG;
            return NULL;
        }
        if (n < cap) break;
        size_t more = cap > limit / 2 ? limit : cap * 2;
        char *grown = realloc(buf, more + 1);
        if (!grown) free(buf);
        buf = grown;
        cap = more;
    }
    if (ferror(f)) {
        int why = errno ? errno : EIO;
        snprintf(err, errlen, "%s: cannot read: %s", name, strerror(why));
        free(buf);
        errno = why;
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *file_read_all(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        int why = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(why));
        errno = why;
        return NULL;
    }
    errno = 0;
    char *buf = file_read_stream(f, path, max_bytes, len, err, errlen);
    int why = errno;
    fclose(f);
    errno = why;
    return buf;
}

int file_commit(FILE *f, const char *tmp, const char *path) {
    if (!f) return -1;
    errno = 0;
    int ok = fflush(f) == 0 && !ferror(f);
    int why = ok ? 0 : errno ? errno : EIO;
    if (fclose(f) != 0 && ok) { ok = 0; why = errno ? errno : EIO; }
    if (ok && rename(tmp, path) != 0) { ok = 0; why = errno; }
    if (ok) return 0;
    remove(tmp);
    errno = why;
    return -1;
}
