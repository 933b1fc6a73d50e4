/* test_gen_twice.c: the generator is a library without hidden state or exits. Several different
 * runs generated one after the other in one process give the same bytes as a fresh `bin/boost gen`
 * of each; a kernel op with no room for an operand or constant, and memory running out while a
 * graph is built, come back as errors from the API instead of ending the process. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/unit/testlib.h"
#include "gen/gen.h"
#include "gen/ir.h"
#include "gen/build_fixture.h"
#include "gen/pipeline.h"

static char *slurp(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) { free(s); s = NULL; }
    fclose(f);
    if (s) s[n] = 0;
    *len = n;
    return s;
}

/* 0 when dir_a/name and dir_b/name hold the same bytes; else 1 with why. */
static int same_file(const char *dir_a, const char *dir_b, const char *name, char *why, size_t whylen) {
    char pa[700], pb[700];
    snprintf(pa, sizeof pa, "%s/%s", dir_a, name);
    snprintf(pb, sizeof pb, "%s/%s", dir_b, name);
    long na = 0, nb = 0;
    char *a = slurp(pa, &na), *b = slurp(pb, &nb);
    int rc = 0;
    if (!a || !b) { snprintf(why, whylen, "cannot read %.250s", a ? pb : pa); rc = 1; }
    else if (na != nb || memcmp(a, b, (size_t)na)) {
        long i = 0;
        while (i < na && i < nb && a[i] == b[i]) i++;
        snprintf(why, whylen, "%s: %ld vs %ld bytes, first difference at byte %ld", name, na, nb, i);
        rc = 1;
    }
    free(a); free(b);
    return rc;
}

/* Runs of different kinds (MoE btp, full-rank megatron, low-rank btp, LaX), generated in turn in
 * this process, then each once more by a fresh bin/boost; the files must match byte for byte. */
static void twice_in_one_process(const char *tmp) {
    static const char *runs[] = {"tiny-cola-moe", "tiny-llama", "tiny-cola", "tiny-lax", "tiny-cola"};
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";
    Run *run = calloc(1, sizeof *run);
    char err[1024], dir[600], fresh[600], cmd[1600], nm[200], why[300];
    for (int i = 0; i < (int)(sizeof runs / sizeof runs[0]); i++) {
        snprintf(nm, sizeof nm, "run %d (%s) generated in this process after %d others matches a fresh process", i + 1, runs[i], i);
        int rc = spec_load_run(runs[i], NULL, 0, run, err, sizeof err);
        if (rc) { CHECK(0, nm, "spec: %s", err); continue; }
        snprintf(dir, sizeof dir, "%s/in-%d", tmp, i);
        rc = gen_write(run, dir, err, sizeof err);
        if (rc) { CHECK(0, nm, "gen_write: %s", err); continue; }
        snprintf(fresh, sizeof fresh, "%s/fresh-%d", tmp, i);
        snprintf(cmd, sizeof cmd, "%s gen %s -o %s >/dev/null", boost, runs[i], fresh);
        if (system(cmd) != 0) { CHECK(0, nm, "'%s' failed", cmd); continue; }
        int bad = same_file(dir, fresh, "plan.txt", why, sizeof why) || same_file(dir, fresh, "kernels.cu", why, sizeof why)
                  || same_file(dir, fresh, "report.md", why, sizeof why);
        CHECK(!bad, nm, "%s", why);
    }
    free(run);
}

/* k_op and k_const return -1 (and mark the op) when the op is full; the process goes on. */
static void overflow_is_an_error(void) {
    Run *r = calloc(1, sizeof *r);
    run_tiny_cola(r);
    Graph *g = graph_new(r, LAYOUT_BTP);
    int x = ir_tensor(g, "x", 8, 4, IR_BF16, TR_ACT, PS_SHARD1);
    Op *o = k_begin(g, "add");
    int fails = 0;
    for (int i = 0; i < OP_MAX_OPND; i++) fails += k_op(g, o, "a", opnd(x, 0, 0), 0, 0) != 0;
    int rc = k_op(g, o, "one_more", opnd(x, 0, 0), 0, 0);
    CHECK(fails == 0 && rc == -1 && o->nops == OP_MAX_OPND && (o->overflow & OP_OVF_OPERANDS)
          && strstr(g->err, "one_more") && strstr(g->err, "OP_MAX_OPND"),
          "an operand past OP_MAX_OPND is an error, not an exit",
          "fails %d rc %d nops %d overflow %d err '%s'", fails, rc, o->nops, o->overflow, g->err);
    fails = 0;
    for (int i = 0; i < KMAX_CONST; i++) fails += k_const(o, "c", i) != 0;
    rc = k_const_r(o, "one_more", 1, 0);
    CHECK(fails == 0 && rc == -1 && o->k.nconst == KMAX_CONST && (o->overflow & OP_OVF_CONSTS),
          "a constant past KMAX_CONST is an error, not an exit", "fails %d rc %d nconst %d", fails, rc, o->k.nconst);
    graph_free(g);
    free(r);
}

static long vm_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0;
    if (!f) return -1;
    if (fscanf(f, "%ld", &pages) != 1) pages = -1;
    fclose(f);
    return pages < 0 ? -1 : pages * sysconf(_SC_PAGESIZE);
}

/* graph_build under an address-space limit that grows from tight to ample, each try in a child
 * process: every try must either build the graph (exit 3) or return NULL with status 1 and
 * "out of memory" (exit 0); an exit from inside the library (the old exit(1)) or a crash fails. */
static void out_of_memory_is_an_error(void) {
    Run *run = calloc(1, sizeof *run);
    char err[1024];
    if (spec_load_run("tiny-cola", NULL, 0, run, err, sizeof err)) { CHECK(0, "oom: spec", "%s", err); free(run); return; }
    malloc_trim(0);
    long base = vm_bytes();
    if (base <= 0) { printf("ok - graph_build returns out of memory as an error # SKIP no /proc/self/statm\n"); free(run); return; }
    int clean = 0, built = 0, other = 0;
    char first_other[160] = "";
    fflush(stdout); fflush(stderr);
    for (long extra = 0; extra <= (1L << 30) && !built; extra = extra ? extra * 3 / 2 : 16 << 10) {
        pid_t pid = fork();
        if (pid == 0) {
            malloc_trim(0);   /* the heap's free space would hide the limit */
            struct rlimit lim = {(rlim_t)(base + extra), (rlim_t)(base + extra)};
            setrlimit(RLIMIT_AS, &lim);
            int status = 0;
            Graph *g = graph_build(run, run->layout, run->checkpoint, err, sizeof err, &status);
            if (g) _exit(3);
            _exit(status == 1 && strstr(err, "out of memory") ? 0 : 4);
        }
        int ws = 0;
        if (pid < 0 || waitpid(pid, &ws, 0) != pid) { other++; break; }
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) clean++;
        else if (WIFEXITED(ws) && WEXITSTATUS(ws) == 3) built++;
        else {
            if (!other) snprintf(first_other, sizeof first_other, "limit base+%ld: %s %d", extra,
                                 WIFEXITED(ws) ? "exit" : "signal", WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
            other++;
        }
    }
    CHECK(clean > 0 && built == 1 && other == 0, "graph_build returns out of memory as an error at every limit tried",
          "%d clean errors, %d built, %d other endings (%s)", clean, built, other, first_other);
    free(run);
}

int main(void) {
    char tmp[] = "/tmp/boost-gen-twice-XXXXXX";
    if (!mkdtemp(tmp)) { CHECK(0, "tmpdir", "mkdtemp failed"); TEST_EXIT(); }
    out_of_memory_is_an_error();
    twice_in_one_process(tmp);
    overflow_is_an_error();
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmp);
    TEST_EXIT();
}
