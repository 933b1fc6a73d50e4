/* test_json_oom.c: the JSON reader (common/json.c, used for safetensors headers, state.json
 * and index.json) when memory runs out part way: every failing realloc gives an "out of memory"
 * error and frees each block once (it used to free a grown item array twice). realloc is replaced
 * in this program to fail at the Nth call; so this test is not built into the sanitizer lane. */
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "common/json.h"

extern void *__libc_realloc(void *p, size_t n);
static int fail_at = -1, calls;

void *realloc(void *p, size_t n) {
    if (calls++ == fail_at) return NULL;
    return __libc_realloc(p, n);
}

int main(void) {
    // an object of 20 keys (items and keys arrays grow twice) holding an array of 20 numbers
    char text[2048];
    size_t n = 0;
    n += (size_t)snprintf(text + n, sizeof text - n, "{");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s\"key%02d\": %d", i ? ", " : "", i, i);
    n += (size_t)snprintf(text + n, sizeof text - n, ", \"list\": [");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s%d", i ? ", " : "", i);
    n += (size_t)snprintf(text + n, sizeof text - n, "]}");
    char err[256];
    calls = 0;
    Json *j = json_parse(text, n, err, sizeof err);
    int total = calls;
    CHECK(j && j->n == 21, "json: parses with memory to spare", "%s", j ? "wrong count" : err);
    json_free(j);
    int refused = 0;
    for (int k = 0; k < total;
         k++) { // each realloc of the parse fails once; a double free aborts here
        calls = 0;
        fail_at = k;
        j = json_parse(text, n, err, sizeof err);
        fail_at = -1;
        if (!j && strstr(err, "out of memory")) refused++;
        json_free(j);
    }
    CHECK(total > 2 && refused == total,
          "json: every failing realloc is an out-of-memory error, each block freed once",
          "%d of %d failures reported", refused, total);
    TEST_EXIT();
}
