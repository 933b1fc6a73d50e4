/* test_spec.c: the spec language through spec_load_run and parse_override: every shipped spec
 * loads, fields match the spec text, rank functions and tables, defaults, -D overrides, the tuning
 * file, and every bad spec in tests/specs_bad/ fails with status 2 at the line its header names. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "gen/gen.h"          // defines: spec_load_run, parse_override
#include "tests/unit/testlib.h"

static Run run;               /* big (per-layer ranks): kept off the stack */
static char err[8192];

static int load(const char *arg, const Override *ov, int nov) {
    err[0] = 0;
    memset(&run, 0, sizeof run);
    return spec_load_run(arg, ov, nov, &run, err, sizeof err);
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted names of the *.lua files in dir (not *.tuning.lua); returns the count. */
static int list_lua(const char *dir, char **names, int max) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max)
        if (ends_with(e->d_name, ".lua") && !ends_with(e->d_name, ".tuning.lua")) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    return n;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) { printf("FAIL - write %s\n", path); exit(1); }
    fputs(text, f);
    fclose(f);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strdup(buf);
}

/* ------------------------------------------------------------------ shipped specs */

static void test_shipped_runs(void) {
    char *names[256];
    int n = list_lua("specs/runs", names, 256);
    CHECK(n >= 10, "shipped runs present", "found %d run specs in specs/runs", n);
    for (int i = 0; i < n; i++) {
        char path[600], name[300];
        snprintf(path, sizeof path, "specs/runs/%s", names[i]);
        snprintf(name, sizeof name, "run %s loads", names[i]);
        int rc = load(path, NULL, 0);
        char want[300];
        snprintf(want, sizeof want, "%.*s", (int)strlen(names[i]) - 4, names[i]);
        CHECK(rc == 0 && strcmp(run.name, want) == 0, name, "rc=%d name=%s: %s", rc, run.name, err);
        free(names[i]);
    }
}

static void test_shipped_models(void) {
    char *names[256];
    int n = list_lua("specs/models", names, 256);
    const char *required[] = {"tiny-cola", "tiny-llama", "tiny-svd", "tiny-lax", "tiny-cola-gqa", "svd-llama-1b",
                              "svd-llama-7b", "lax-llama-1b", "lax-llama-7b"};
    const char *sizes[] = {"60m", "130m", "350m", "1b", "3b", "7b", "13b", "30b", "40b"};
    int missing = 0;
    char path[600];
    for (int i = 0; i < 9; i++) {
        snprintf(path, sizeof path, "specs/models/%s.lua", required[i]);
        if (access(path, R_OK)) { missing++; printf("# missing %s\n", path); }
        snprintf(path, sizeof path, "specs/models/cola-llama-%s.lua", sizes[i]);
        if (access(path, R_OK)) { missing++; printf("# missing %s\n", path); }
        snprintf(path, sizeof path, "specs/models/llama-%s.lua", sizes[i]);
        if (access(path, R_OK)) { missing++; printf("# missing %s\n", path); }
    }
    CHECK(missing == 0, "every required model spec is shipped", "%d missing", missing);
    for (int i = 0; i < n; i++) {
        char model[300], name[300];
        snprintf(model, sizeof model, "model=%.*s", (int)strlen(names[i]) - 4, names[i]);
        int full = strncmp(names[i], "llama-", 6) == 0 || strncmp(names[i], "tiny-llama", 10) == 0;
        Override ov[4];
        int nov = 0;
        nov += parse_override(model, &ov[nov], err, sizeof err);
        nov += parse_override(full ? "layout=megatron" : "layout=btp", &ov[nov], err, sizeof err);
        nov += parse_override("checkpoint=none", &ov[nov], err, sizeof err);
        nov += parse_override("tp=1", &ov[nov], err, sizeof err);
        snprintf(name, sizeof name, "model %s loads", names[i]);
        int rc = load("specs/runs/tiny-cola.lua", ov, nov);
        CHECK(nov == 4 && rc == 0 && strcmp(run.model.family, full ? "full" : run.model.family) == 0, name,
              "rc=%d: %s", rc, err);
        free(names[i]);
    }
}

/* ------------------------------------------------------------------ fields */

static int all_ranks(const Model *m, int factor, int rank, int act) {
    for (int l = 0; l < m->layers; l++)
        for (int p = 0; p < NPROJ; p++)
            if (m->proj[l][p].factor != factor || m->proj[l][p].rank != rank || m->proj[l][p].act != act) return 0;
    return 1;
}

static void test_fields(void) {
    int rc = load("tiny-cola", NULL, 0);   /* by name */
    const Model *m = &run.model;
    CHECK(rc == 0, "tiny-cola loads by name", "%s", err);
    CHECK(m->hidden == 128 && m->layers == 2 && m->heads == 4 && m->kv_heads == 4 && m->ffn == 352 &&
          m->vocab == 256 && m->head_dim == 32, "tiny-cola shapes", "d=%d L=%d h=%d kv=%d ff=%d V=%d hd=%d",
          m->hidden, m->layers, m->heads, m->kv_heads, m->ffn, m->vocab, m->head_dim);
    CHECK(strcmp(m->family, "cola") == 0 && !m->lax && m->mlp_gate_act == ACT_NONE &&
          all_ranks(m, FACTOR_COLA, 32, ACT_SILU), "tiny-cola: CoLA rank 32, SiLU inside, no gate act",
          "family=%s gate_act=%d", m->family, m->mlp_gate_act);
    CHECK(m->norm_eps == 1e-5 && m->rope_theta == 10000 && m->init_std == 0.02, "model defaults",
          "eps=%g theta=%g std=%g", m->norm_eps, m->rope_theta, m->init_std);
    CHECK(run.tp == 2 && run.pp == 1 && run.dp == 1 && run.layout == LAYOUT_BTP && run.online_rmsnorm == 1 &&
          run.group_linears == 1 && run.checkpoint == CKPT_LOWRANK, "tiny-cola parallel and features",
          "tp=%d layout=%d ckpt=%d", run.tp, run.layout, run.checkpoint);
    CHECK(run.micro_batch == 4 && run.seq == 64 && run.lr == 3e-3 && run.min_lr == 3e-4 && run.warmup == 20 &&
          run.steps == 200 && run.eval_every == 50 && run.seed == 1234 && run.grad_accum == 1 &&
          run.dtype == DT_BF16 && run.beta1 == 0.9 && run.beta2 == 0.95 && run.adam_eps == 1e-8 &&
          run.weight_decay == 0.1 && run.clip == 1.0 && run.decay_embeddings == 0,
          "tiny-cola train", "mb=%d seq=%d lr=%g min_lr=%g", run.micro_batch, run.seq, run.lr, run.min_lr);
    CHECK(strcmp(run.data, "corpus") == 0 && run.val_fraction == 0.1, "tiny-cola data", "data=%s", run.data);
    CHECK(strcmp(run.gpu.name, "h100") == 0 && strcmp(run.gpu.arch, "sm_90") == 0 && run.gpu.sm_count == 132 &&
          run.gpu.bf16_tflops == 989 && run.gpu.hbm_gbs == 3350 && run.gpu.nvlink_gbs == 450 &&
          run.gpu.memory_gb == 80 && run.gpu.tune_row_block == 256 && run.gpu.tune_attn_block_k == 64,
          "h100 figures", "%s %s %d", run.gpu.name, run.gpu.arch, run.gpu.sm_count);
    CHECK(strcmp(run.name, "tiny-cola") == 0 && strcmp(run.file, "specs/runs/tiny-cola.lua") == 0 &&
          strcmp(m->file, "specs/models/tiny-cola.lua") == 0, "names and files", "%s %s %s", run.name, run.file, m->file);

    rc = load("specs/runs/cola-7b-tp4.lua", NULL, 0);
    CHECK(rc == 0 && m->hidden == 4096 && m->layers == 32 && m->heads == 32 && m->ffn == 11008 && m->vocab == 32000 &&
          m->head_dim == 128 && all_ranks(m, FACTOR_COLA, 1024, ACT_SILU) && run.tp == 4 && run.seq == 4096 &&
          run.micro_batch == 4 && run.layout == LAYOUT_BTP, "cola-7b-tp4", "rc=%d %s", rc, err);
    CHECK(strcmp(run.gpu.arch, "sm_80") == 0 && run.gpu.sm_count == 108 && run.gpu.bf16_tflops == 312 &&
          run.gpu.hbm_gbs == 2039 && run.gpu.nvlink_gbs == 300 && run.gpu.memory_gb == 80 && run.gpu.gpus_per_node == 4,
          "a100 figures", "%s %d", run.gpu.arch, run.gpu.sm_count);
    rc = load("specs/runs/llama-7b-tp4.lua", NULL, 0);
    CHECK(rc == 0 && strcmp(m->family, "full") == 0 && all_ranks(m, FACTOR_FULL, 0, ACT_NONE) &&
          m->mlp_gate_act == ACT_SILU && run.layout == LAYOUT_MEGATRON, "llama-7b-tp4: full rank, SwiGLU, megatron",
          "rc=%d %s", rc, err);
    rc = load("specs/runs/cola-1b-h200.lua", NULL, 0);
    CHECK(rc == 0 && run.tp == 1 && strcmp(run.gpu.name, "h200") == 0 && run.gpu.hbm_gbs == 4800 &&
          run.gpu.memory_gb == 141 && m->hidden == 2048 && m->layers == 24 && m->ffn == 5472 &&
          all_ranks(m, FACTOR_COLA, 512, ACT_SILU), "cola-1b-h200", "rc=%d %s", rc, err);
    rc = load("tiny-svd", NULL, 0);
    CHECK(rc == 0 && strcmp(m->family, "svd") == 0 && all_ranks(m, FACTOR_SVD, 32, ACT_NONE) && !m->lax &&
          m->mlp_gate_act == ACT_NONE, "tiny-svd: identity bottleneck", "rc=%d %s", rc, err);
    rc = load("tiny-lax", NULL, 0);
    CHECK(rc == 0 && strcmp(m->family, "lax") == 0 && m->lax == 1 && all_ranks(m, FACTOR_COLA, 32, ACT_SILU),
          "tiny-lax: CoLA base with lax=1", "rc=%d %s", rc, err);
    rc = load("tiny-cola-gqa", NULL, 0);
    CHECK(rc == 0 && m->kv_heads == 2 && m->heads == 4, "tiny-cola-gqa: 2 kv heads", "rc=%d kv=%d", rc, m->kv_heads);
    rc = load("cola-30b-tp4-pp4", NULL, 0);
    CHECK(rc == 0 && m->hidden == 8192 && m->layers == 36 && m->heads == 64 && m->ffn == 22016 &&
          all_ranks(m, FACTOR_COLA, 2048, ACT_SILU) && run.tp == 4 && run.pp == 4, "cola-30b-tp4-pp4",
          "rc=%d %s", rc, err);
}

/* ------------------------------------------------------------------ temporary specs */

static char tmpdir[256];

static const char *tmp_path(const char *name) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

/* Write a run spec into the temp folder and load it. */
static int load_text(const char *name, const char *text, const Override *ov, int nov) {
    write_file(tmp_path(name), text);
    return load(tmp_path(name), ov, nov);
}

static void test_ranks(void) {
    int rc = load_text("rank-fn.lua",
        "return run { model = model \"ranked\" {\n"
        "  hidden = 128, layers = 3, heads = 4, ffn = 352, vocab = 256,\n"
        "  lowrank = cola { rank = function(layer, proj)\n"
        "    if proj == 'q' then return 16 + 8 * layer end\n"
        "    if proj == 'down' then return 64 end\n"
        "    return 32 end },\n"
        "} }\n", NULL, 0);
    const Model *m = &run.model;
    int ok = rc == 0 && m->layers == 3;
    for (int l = 0; ok && l < 3; l++)
        for (int p = 0; p < NPROJ; p++) {
            int want = p == PROJ_Q ? 16 + 8 * l : p == PROJ_DOWN ? 64 : 32;
            if (m->proj[l][p].rank != want || m->proj[l][p].factor != FACTOR_COLA) ok = 0;
        }
    CHECK(ok, "rank function: a rank per layer and projection", "rc=%d %s", rc, err);
    CHECK(rc == 0 && strcmp(m->name, "ranked") == 0 && strcmp(m->file, tmp_path("rank-fn.lua")) == 0,
          "inline model keeps its name and file", "%s %s", m->name, m->file);

    rc = load_text("rank-table.lua",
        "return run { model = model \"tabled\" {\n"
        "  hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,\n"
        "  lowrank = svd { rank = { attn = 16, mlp = 48, down = 24 } },\n"
        "} }\n", NULL, 0);
    ok = rc == 0;
    for (int l = 0; ok && l < 2; l++)
        for (int p = 0; p < NPROJ; p++) {
            int want = p <= PROJ_O ? 16 : p == PROJ_DOWN ? 24 : 48;
            if (m->proj[l][p].rank != want || m->proj[l][p].factor != FACTOR_SVD || m->proj[l][p].act != ACT_NONE) ok = 0;
        }
    CHECK(ok, "rank table: attn, mlp and a per-projection key", "rc=%d %s", rc, err);

    rc = load_text("lax-svd.lua",
        "local r = 24  -- locals and arithmetic are fine\n"
        "return run { model = model \"lax-svd\" {\n"
        "  hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, kv_heads = 2, norm_eps = 1e-6,\n"
        "  lowrank = lax { rank = r + 8, base = \"svd\" }, rope_theta = 500000, init_std = 0.01,\n"
        "} }\n", NULL, 0);
    CHECK(rc == 0 && m->lax == 1 && all_ranks(m, FACTOR_SVD, 32, ACT_NONE) && m->kv_heads == 2 &&
          m->norm_eps == 1e-6 && m->rope_theta == 500000 && m->init_std == 0.01 && strcmp(m->family, "lax") == 0,
          "lax on an svd base, optional model fields", "rc=%d %s", rc, err);
}

/* The libraries a spec may use still work (the sandbox wraps some of them). */
static void test_libraries(void) {
    int rc = load_text("libs.lua",
        "local name = 'cola-llama-7b'\n"
        "local fam, size = name:match('^(%a+)%-llama%-(%w+)$')\n"
        "assert(fam == 'cola' and size == '7b', 'match')\n"
        "assert(('a.b'):find('.', 1, true) == 2, 'plain find')\n"
        "local n = 0\n"
        "for w in ('q k v o'):gmatch('%a') do n = n + 1 end\n"
        "assert(n == 4, 'gmatch')\n"
        "assert(('x-y'):gsub('-', '_') == 'x_y', 'gsub')\n"
        "assert(string.find(string.rep('a', 100000), 'b', 1, true) == nil, 'long plain find')\n"
        "assert(math.floor(2.5) == 2 and utf8.len(utf8.char(233, 224)) == 2 and table.concat({1, 2}, ',') == '1,2', 'libs')\n"
        "local ok, e = pcall(error, 'caught')\n"
        "assert(not ok and e == 'caught', 'pcall')\n"
        "local mt = setmetatable({}, { __index = function(t, k) return 10 end })\n"
        "return run { model = 'tiny-cola', train = { steps = mt.anything + n } }\n", NULL, 0);
    CHECK(rc == 0 && run.steps == 14, "string, table, math, utf8, pcall and setmetatable work in specs",
          "rc=%d steps=%d %s", rc, run.steps, err);
}

static void test_defaults(void) {
    int rc = load_text("only-model.lua", "return run { model = \"tiny-cola\" }\n", NULL, 0);
    CHECK(rc == 0 && run.tp == 1 && run.pp == 1 && run.dp == 1 && run.layout == LAYOUT_BTP &&
          strcmp(run.gpu.name, "h100") == 0 && run.checkpoint == CKPT_NONE && run.online_rmsnorm &&
          run.group_linears && run.micro_batch == 4 && run.seq == 4096 && run.lr == 3e-4 &&
          fabs(run.min_lr - 3e-5) < 1e-15 && run.warmup == 100 && run.steps == 1000 && run.eval_every == 50 &&
          run.seed == 1234 && strcmp(run.data, "corpus") == 0 && strcmp(run.name, "only-model") == 0,
          "defaults for everything but the model", "rc=%d %s", rc, err);
    rc = load_text("full-default.lua", "return run { model = \"tiny-llama\", train = { lr = 1e-2 }, data = \"x.bin\" }\n", NULL, 0);
    CHECK(rc == 0 && run.layout == LAYOUT_MEGATRON && fabs(run.min_lr - 1e-3) < 1e-15 && strcmp(run.data, "x.bin") == 0,
          "full-rank defaults to megatron; min_lr = lr/10; data as a path", "rc=%d layout=%d %s", rc, run.layout, err);
}

/* ------------------------------------------------------------------ overrides */

static void test_overrides(void) {
    const char *args[] = {"tp=4", "layout=naive", "micro_batch=8", "seq=128", "gpu=a100", "online_rmsnorm=false",
                          "group_linears=0", "checkpoint=none", "steps=7", "lr=0.01", "warmup=3", "grad_accum=2",
                          "seed=99", "data=x.bin", "eval_every=5", "dtype=fp32", "-Dpp=2", "-D dp=3", "min_lr=0"};
    int n = sizeof args / sizeof *args;
    Override ov[32];
    int nov = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        int k = parse_override(args[i], &ov[nov], err, sizeof err);
        if (k != 1) { bad++; printf("# %s\n", err); } else nov++;
    }
    CHECK(bad == 0, "parse_override accepts name=value, -Dname=value, -D name=value", "%d rejected", bad);
    int rc = load("tiny-cola", ov, nov);
    CHECK(rc == 0 && run.tp == 4 && run.pp == 2 && run.dp == 3 && run.layout == LAYOUT_NAIVE && run.micro_batch == 8 &&
          run.seq == 128 && strcmp(run.gpu.name, "a100") == 0 && run.online_rmsnorm == 0 && run.group_linears == 0 &&
          run.checkpoint == CKPT_NONE && run.steps == 7 && run.lr == 0.01 && run.warmup == 3 && run.grad_accum == 2 &&
          run.seed == 99 && strcmp(run.data, "x.bin") == 0 && run.eval_every == 5 && run.dtype == DT_FP32 &&
          run.min_lr == 0, "overrides reach every field", "rc=%d %s", rc, err);
    Override m[3];
    parse_override("model=tiny-llama", &m[0], err, sizeof err);
    parse_override("layout=megatron", &m[1], err, sizeof err);
    parse_override("checkpoint=none", &m[2], err, sizeof err);
    rc = load("tiny-cola", m, 3);
    CHECK(rc == 0 && strcmp(run.model.name, "tiny-llama") == 0 && run.layout == LAYOUT_MEGATRON,
          "override the model", "rc=%d %s", rc, err);

    Override by_path = {"model", "tests/specs_bad/models/bad-heads.lua"};
    rc = load("tiny-cola", &by_path, 1);
    CHECK(rc == 2 && strncmp(err, "tests/specs_bad/models/bad-heads.lua:4: hidden (100)", 52) == 0,
          "-D model=PATH reads the file from the working folder", "rc=%d: %s", rc, err);

    /* bad ones */
    Override o;
    int k = parse_override("tp=x", &o, err, sizeof err);
    CHECK(k == -1 && strstr(err, "-D tp=x: tp must be an integer") != NULL, "bad -D: tp=x", "k=%d: %s", k, err);
    k = parse_override("lr=fast", &o, err, sizeof err);
    CHECK(k == -1 && strstr(err, "-D lr=fast: lr must be a number") != NULL, "bad -D: lr=fast", "k=%d: %s", k, err);
    k = parse_override("layout=diagonal", &o, err, sizeof err);
    CHECK(k == -1 && strstr(err, "layout must be one of megatron, naive, btp") != NULL, "bad -D: layout=diagonal",
          "k=%d: %s", k, err);
    k = parse_override("speed=11", &o, err, sizeof err);
    CHECK(k == -1 && strstr(err, "unknown setting 'speed'") && strstr(err, "tp"), "bad -D: unknown name", "%s", err);
    k = parse_override("tp", &o, err, sizeof err);
    CHECK(k == -1 && strstr(err, "expected name=value") != NULL, "bad -D: no '='", "%s", err);
    k = parse_override("online_rmsnorm=perhaps", &o, err, sizeof err);
    CHECK(k == -1 && strstr(err, "true or false") != NULL, "bad -D: bool", "%s", err);

    /* overrides built by hand still get checked, with the -D named in the message */
    Override raw = {"tp", "x"};
    rc = load("tiny-cola", &raw, 1);
    CHECK(rc == 2 && strncmp(err, "-D tp=x: tp must be an integer", 30) == 0, "bad -D in spec_load_run: tp=x",
          "rc=%d: %s", rc, err);
    Override three = {"tp", "3"};
    rc = load("tiny-cola", &three, 1);
    CHECK(rc == 2 && strncmp(err, "-D tp=3: ", 9) == 0 && strstr(err, "divisible by tp (3)"),
          "-D tp=3: cross-field error points at the override", "rc=%d: %s", rc, err);
    Override zero = {"seq", "0"};
    rc = load("tiny-cola", &zero, 1);
    CHECK(rc == 2 && strncmp(err, "-D seq=0: seq must be an integer from 1", 39) == 0, "-D seq=0: out of range",
          "rc=%d: %s", rc, err);
    Override gpu = {"gpu", "x900"};
    rc = load("tiny-cola", &gpu, 1);
    CHECK(rc == 2 && strncmp(err, "-D gpu=x900: unknown gpu 'x900'", 31) == 0 && strstr(err, "a100, b200, h100, h200"),
          "-D gpu=x900: unknown gpu", "rc=%d: %s", rc, err);
    Override dpo[3] = {{"dp", "4"}, {"zero", "1"}, {"dp_bucket_mb", "10"}};
    rc = load("tiny-cola", dpo, 3);
    CHECK(rc == 0 && run.dp == 4 && run.zero == 1 && run.dp_bucket_bytes == 10000000, "-D dp=4 zero=1 dp_bucket_mb=10 reach the run",
          "rc=%d dp=%d zero=%d bucket=%lld: %s", rc, run.dp, run.zero, (long long)run.dp_bucket_bytes, err);
    rc = load("tiny-cola", NULL, 0);
    CHECK(rc == 0 && run.zero == 0 && run.dp_bucket_bytes == 25000000, "dp defaults: zero 0, 25 MB buckets",
          "rc=%d zero=%d bucket=%lld", rc, run.zero, (long long)run.dp_bucket_bytes);
    Override bf = {"dp_dtype", "bf16"};
    rc = load("tiny-cola", &bf, 1);
    CHECK(rc == 0 && run.dp_bf16 == 1, "-D dp_dtype=bf16 reaches the run", "rc=%d: %s", rc, err);
    Override z2 = {"zero", "2"};
    rc = load("tiny-cola", &z2, 1);
    CHECK(rc == 0 && run.zero == 2, "-D zero=2 (ZeRO-2) reaches the run", "rc=%d zero=%d: %s", rc, run.zero, err);
    Override z3 = {"zero", "3"};
    rc = load("tiny-cola", &z3, 1);
    CHECK(rc == 2 && strncmp(err, "-D zero=3: ", 11) == 0, "-D zero=3: out of range", "rc=%d: %s", rc, err);
}

/* ------------------------------------------------------------------ tuning file and specs folder */

static void test_tuning(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/specs", tmpdir);
    mkdir(dir, 0755);
    const char *sub[] = {"gpus", "models", "runs"};
    for (int i = 0; i < 3; i++) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s", dir, sub[i]);
        mkdir(p, 0755);
    }
    char *h100 = read_file("specs/gpus/h100.lua"), *tiny = read_file("specs/models/tiny-cola.lua");
    if (!h100 || !tiny) { CHECK(0, "tuning file overrides tune", "cannot read shipped specs"); return; }
    write_file(tmp_path("specs/gpus/h100.lua"), h100);
    write_file(tmp_path("specs/models/tiny-cola.lua"), tiny);
    free(h100);
    free(tiny);
    write_file(tmp_path("specs/runs/t.lua"), "return run { model = \"tiny-cola\", gpu = \"h100\" }\n");
    write_file(tmp_path("specs/gpus/h100.tuning.lua"),
               "-- written by boost tune\nreturn tune { row_block = 128, attn_block_k = 32 }\n");
    int rc = load(tmp_path("specs/runs/t.lua"), NULL, 0);
    CHECK(rc == 0 && run.gpu.tune_row_block == 128 && run.gpu.tune_attn_block_k == 32 &&
          run.gpu.tune_elem_block == 256 && run.gpu.tune_attn_block_q == 64,
          "tuning file overrides the tune table (specs folder found from the run's path)",
          "rc=%d row=%d k=%d %s", rc, run.gpu.tune_row_block, run.gpu.tune_attn_block_k, err);
    write_file(tmp_path("specs/gpus/h100.tuning.lua"), "return {\n  row_block = 100,\n}\n");
    rc = load(tmp_path("specs/runs/t.lua"), NULL, 0);
    char want[700];
    snprintf(want, sizeof want, "%s:2: row_block must be a multiple of 32", tmp_path("specs/gpus/h100.tuning.lua"));
    CHECK(rc == 2 && strstr(err, want) != NULL, "bad tuning file: error at its line", "rc=%d: %s", rc, err);
    remove(tmp_path("specs/gpus/h100.tuning.lua"));

    setenv("BOOST_SPECS", dir, 1);
    rc = load("t", NULL, 0);
    CHECK(rc == 0 && strcmp(run.name, "t") == 0 && run.gpu.tune_row_block == 256, "BOOST_SPECS names the specs folder",
          "rc=%d %s", rc, err);
    unsetenv("BOOST_SPECS");

    write_file(tmp_path("specs/models/tiny-cola.lua"), "return model \"tiny-colas\" { hidden = 128, layers = 2, "
               "heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 } }\n");
    rc = load(tmp_path("specs/runs/t.lua"), NULL, 0);
    CHECK(rc == 2 && strstr(err, "declares model \"tiny-colas\"") && strstr(err, "tiny-cola.lua:1:"),
          "model name must match its file name", "rc=%d: %s", rc, err);
}

/* ------------------------------------------------------------------ bad specs */

/* The header of a bad spec: "-- expect-at: [FILE:]LINE" and "-- expect: a | b | c". */
static void test_bad_specs(void) {
    char *names[256];
    int n = list_lua("tests/specs_bad", names, 256);
    CHECK(n >= 19, "bad specs present", "found %d in tests/specs_bad", n);
    remove("/tmp/boost-spec-escape");
    for (int i = 0; i < n; i++) {
        char path[600], name[300];
        snprintf(path, sizeof path, "tests/specs_bad/%s", names[i]);
        snprintf(name, sizeof name, "bad spec %s", names[i]);
        char *text = read_file(path);
        char at[300] = "", expect[600] = "";
        const char *p;
        if (text && (p = strstr(text, "-- expect-at: "))) sscanf(p + 14, "%299[^\n]", at);
        if (text && (p = strstr(text, "-- expect: "))) sscanf(p + 11, "%599[^\n]", expect);
        free(text);
        if (!at[0] || !expect[0]) { CHECK(0, name, "header lacks expect-at or expect"); continue; }
        char where[1000];
        if (strchr(at, ':')) snprintf(where, sizeof where, "tests/specs_bad/%s:", at);
        else snprintf(where, sizeof where, "%s:%s:", path, at);
        int rc = load(path, NULL, 0);
        int ok = rc == 2 && strncmp(err, where, strlen(where)) == 0;
        char missing[300] = "";
        for (char *tok = strtok(expect, "|"); tok; tok = strtok(NULL, "|")) {
            while (*tok == ' ') tok++;
            size_t len = strlen(tok);
            while (len && tok[len - 1] == ' ') tok[--len] = 0;
            if (!strstr(err, tok)) { ok = 0; snprintf(missing, sizeof missing, "%s", tok); }
        }
        CHECK(ok, name, "rc=%d, want '%s...'%s%s; got: %s", rc, where, missing[0] ? " containing " : "", missing, err);
        free(names[i]);
    }
    CHECK(access("/tmp/boost-spec-escape", F_OK) != 0, "os.execute did not run", "/tmp/boost-spec-escape exists");
}

/* Lua cuts chunk names to 60 characters; messages must still carry the whole path. */
static void test_long_paths(void) {
    char dir[700];
    snprintf(dir, sizeof dir, "%s/a-folder-with-a-rather-long-name/and-another-one-below-it", tmpdir);
    char mk[800];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", dir);
    if (system(mk) != 0) { CHECK(0, "long paths", "cannot create %s", dir); return; }
    const char *cases[][3] = {
        {"global.lua", "return run {\n  model = tiny_cola,\n}\n", "2: undeclared global 'tiny_cola'"},
        {"syntax.lua", "return run {\n  model = \"tiny-cola\"\n  gpu = \"h100\",\n}\n", "3: '}' expected"},
        {"loop.lua", "local n = 0\nwhile true do n = n + 1 end\n", "2: spec runs too long"},
        {"field.lua", "return run {\n  model = \"tiny-cola\",\n  train = { seq = -1 },\n}\n", "3: seq must be"},
    };
    for (int i = 0; i < 4; i++) {
        char path[800], want[900], name[100];
        snprintf(path, sizeof path, "%s/%s", dir, cases[i][0]);
        write_file(path, cases[i][1]);
        snprintf(want, sizeof want, "%s:%s", path, cases[i][2]);
        snprintf(name, sizeof name, "long path kept whole: %s", cases[i][0]);
        int rc = load(path, NULL, 0);
        CHECK(rc == 2 && strncmp(err, want, strlen(want)) == 0, name, "rc=%d, want '%s', got: %s", rc, want, err);
    }
}

static void test_binary_chunk(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/binary.lua", tmpdir);
    write_file(path, "\x1bLua\x54\x00\x19\x93\r\n\x1a\n");
    int rc = load(path, NULL, 0);
    char want[800];
    snprintf(want, sizeof want, "%s:1: this is a compiled (binary) chunk", path);
    CHECK(rc == 2 && strncmp(err, want, strlen(want)) == 0, "bytecode is refused", "rc=%d: %s", rc, err);
}

static void test_failure_leaves_run_alone(void) {
    memset(&run, 0x5a, sizeof run);
    err[0] = 0;
    int rc = spec_load_run("tests/specs_bad/heads-tp.lua", NULL, 0, &run, err, sizeof err);
    unsigned char *b = (unsigned char *)&run;
    int untouched = 1;
    for (size_t i = 0; i < sizeof run; i++) untouched &= b[i] == 0x5a;
    CHECK(rc == 2 && untouched, "a failed load leaves the Run untouched", "rc=%d", rc);
    rc = spec_load_run("no/such/run.lua", NULL, 0, &run, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "no/such/run.lua") && strstr(err, "no such file"), "missing run file", "%s", err);
    rc = spec_load_run("no-such-run", NULL, 0, &run, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "no such run spec") && strstr(err, "tiny-cola"), "unknown run name lists the known",
          "%s", err);
}

/* Random damage to a valid spec (a byte changed, dropped or doubled) must give status 0 or 2,
 * and every message must start with the file and a line number. */
static void test_fuzz(void) {
    const char *base =
        "return run { model = model \"fz\" {\n"
        "  hidden = 128, layers = 2, heads = 4, kv_heads = 2, ffn = 352, vocab = 256,\n"
        "  lowrank = lax { rank = { attn = 32, mlp = 32 }, base = \"svd\" } },\n"
        "  gpu = \"a100\", parallel = { tp = 2, layout = \"btp\" },\n"
        "  train = { micro_batch = 2, seq = 64, lr = 1e-3, steps = 10 }, data = { path = \"corpus\" } }\n";
    const char *alphabet = "{}()=,\"'-.0123456789abcdefghijklmnopqrstuvwxyz_ \n[]#~";
    char path[700], text[2048], where[800];
    snprintf(path, sizeof path, "%s/fuzz.lua", tmpdir);
    snprintf(where, sizeof where, "%s:", path);
    unsigned seed = 12345;
    int bad = 0, ok = 0, errors = 0;
    char first[12000] = "";
    for (int it = 0; it < 400; it++) {
        snprintf(text, sizeof text, "%s", base);
        for (int k = 0; k < 1 + it % 3; k++) {
            size_t len = strlen(text);
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % len;
            int op = (seed >> 4) % 3;
            char ch = alphabet[(seed >> 16) % strlen(alphabet)];
            if (op == 0) text[at] = ch;
            else if (op == 1) memmove(text + at, text + at + 1, len - at);
            else if (len + 2 < sizeof text) { memmove(text + at + 1, text + at, len - at + 1); text[at] = ch; }
        }
        write_file(path, text);
        int rc = load(path, NULL, 0);
        if (rc == 0) { ok++; continue; }
        errors++;
        if (getenv("SPEC_FUZZ_SHOW")) printf("# %s\n", err);
        int good = rc == 2 && strncmp(err, where, strlen(where)) == 0 && err[strlen(where)] >= '1' &&
                   err[strlen(where)] <= '9';
        if (!good && !bad++) snprintf(first, sizeof first, "rc=%d for:\n%s\n-> %s", rc, text, err);
    }
    printf("# fuzz: %d loaded, %d rejected\n", ok, errors);
    CHECK(bad == 0 && errors > 100, "fuzzed specs: status 2 with file:line, never a crash", "%d bad; first: %s", bad, first);
}

static void test_speed(void) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = 0;
    for (int i = 0; i < 10; i++) rc |= load("specs/runs/cola-40b-tp4-pp4.lua", NULL, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / 10;
    printf("# cola-40b-tp4-pp4 loads in %.2f ms\n", ms);
    CHECK(rc == 0 && ms < 1000, "loading the 40B run is fast", "rc=%d, %.1f ms per load", rc, ms);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/boost-test-spec.XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("FAIL - temp folder: cannot create\n"); return 1; }
    test_shipped_runs();
    test_shipped_models();
    test_fields();
    test_ranks();
    test_libraries();
    test_defaults();
    test_overrides();
    test_tuning();
    test_bad_specs();
    test_long_paths();
    test_binary_chunk();
    test_failure_leaves_run_alone();
    test_fuzz();
    test_speed();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
    TEST_EXIT();
}
