/* test_docs.c: claims of the docs checked against the code. docs/cuda.md's count of catalog kinds is
 * the catalog's (runtime/plan.c) and every kind has its template; docs/plan-format.md's example
 * steps repeat no key on a line; docs/moe.md's full-rank MoE is one the spec loader takes (and the
 * page does not call it an error). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/unit/testlib.h"
#include "runtime/plan.h"
#include "gen/gen.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static void kind_count(void) {
    int n = 0, missing = 0;
    char path[128], first_missing[64] = "";
    for (; plan_catalog_kind(n); n++) {
        snprintf(path, sizeof path, "templates/%s.cu", plan_catalog_kind(n));
        if (access(path, R_OK) && !missing++) snprintf(first_missing, sizeof first_missing, "%s", plan_catalog_kind(n));
    }
    const char *doc = slurp("docs/cuda.md"), *at = doc ? strstr(doc, "one template per catalog kind (") : NULL;
    int said = at ? atoi(at + strlen("one template per catalog kind (")) : -1;
    CHECK(said == n, "docs/cuda.md counts the catalog's kernel kinds", "it says %d, the catalog has %d", said, n);
    CHECK(n > 0 && !missing, "every catalog kind has templates/KIND.cu", "%d missing, e.g. %s", missing, first_missing);
}

/* Lines of ``` blocks that start with a step keyword: no key twice. */
static void example_keys(void) {
    char *doc = slurp("docs/plan-format.md");
    int in_block = 0, bad = 0, seen = 0;
    char worst[300] = "";
    for (char *line = doc ? strtok(doc, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "```", 3)) { in_block = !in_block; continue; }
        if (!in_block || (strncmp(line, "gemm ", 5) && strncmp(line, "batched_gemm ", 13) && strncmp(line, "member ", 7))) continue;
        seen++;
        char keys[64][32];
        int nk = 0;
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", line);
        for (char *save = NULL, *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            char *eq = strchr(tok, '=');
            if (!eq || nk == 64) continue;
            snprintf(keys[nk], sizeof keys[nk], "%.*s", (int)(eq - tok), tok);
            for (int k = 0; k < nk; k++)
                if (!strcmp(keys[k], keys[nk]) && !bad++) snprintf(worst, sizeof worst, "key %.31s twice in: %.200s", keys[k], line);
            nk++;
        }
    }
    CHECK(seen >= 2 && !bad, "docs/plan-format.md's GEMM examples repeat no key", "%d example lines, %s", seen, worst);
}

static void full_rank_moe(void) {
    const char *path = "build/tmp/docs_full_moe.lua";
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("return run { model = model \"fm\" { hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,\n"
              "  lowrank = full{}, moe = moe { experts = 4 } } }\n", f);
        fclose(f);
    }
    static Run run;
    char err[2048] = "";
    int rc = spec_load_run(path, NULL, 0, &run, err, sizeof err);
    const char *doc = slurp("docs/moe.md");
    int called_error = doc && strstr(doc, "a full-rank or LaX model");
    CHECK(rc == 0 && !called_error, "full-rank MoE loads, and docs/moe.md does not call it an error",
          "rc %d (%s); the page calls it an error: %d", rc, err, called_error);
}

int main(void) {
    mkdir("build", 0755); mkdir("build/tmp", 0755);
    kind_count();
    example_keys();
    full_rank_moe();
    TEST_EXIT();
}
