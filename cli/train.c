/* train.c: `boost train RUN [-D name=value ...] [--backend cpu|cuda|auto] [--log FILE]
 * [--save-every N] [--keep N] [-o DIR] [--resume CKPT|auto] [--plan PLAN]`: turns the run spec into
 * a plan (written to DIR/plan/, or a temporary folder without -o), or takes a generated plan with
 * --plan, then hands it to the training loop (runtime/train.c). Exit 0 done, 1 failure while
 * running, 2 bad input. One process per GPU (a world in the environment, runtime/world.h): ranks >
 * 0 generate their plan in a private folder and print and log nothing; the ranks find each other
 * through an NCCL id file. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/commands.h"
#include "gen/gen.h"              // defines: spec_load_run, parse_override, gen_write
#include "runtime/plan.h"         // defines: plan_load, plan_free
#include "runtime/pipeline.h"     // defines: Pipeline, pipeline_open
#include "runtime/train.h"        // defines: TrainOptions, train_with_plan, train_apply_overrides
#include "runtime/checkpoint.h"   // defines: ckpt_remove_tree
#include "runtime/world.h"        // defines: world_from_env, world_job_id
#include "runtime/comm_mpi.h"     // defines: comm_mpi_finish

static int train_locked(int argc, char **argv);

static void train_usage(FILE *f) {
    fprintf(f,
        "usage: boost train RUN [-D name=value ...] [--backend cpu|cuda|auto] [--log FILE]\n"
        "                       [--save-every N] [--keep "
        "N] [-o DIR] [--resume CKPT|auto] [--plan PLAN]\n"
        "                       [--ckpt-format full|sharded] [--ckpt-async]\n"
        "                       [--straggler-factor X|off]\n"
        "  RUN             a run spec: a path, or a name under specs/runs/ (e.g. tiny-cola)\n"
        "  -D name=value   override a spec setting (tp=2, steps=50, lr=1e-3, data=FILE, ...)\n"
        "  --backend B     cpu, cuda or auto (cuda when a GPU is there; default auto)\n"
        "  --log FILE      JSON lines, one per step: step, "
        "loss, val_loss, tokens_per_s, lr, grad_norm\n"
        "  --tensorboard DIR  the same numbers (and MoE "
        "expert loads) as TensorBoard event files in DIR\n"
        "  -o DIR          checkpoints DIR/step-NNNNNN/ (and the generated plan in DIR/plan/)\n"
        "  --save-every N  a checkpoint every N steps (always one at the end with -o)\n"
        "  --keep N        keep only the newest N complete "
        "checkpoints in DIR (and the last good one)\n"
        "  --ckpt-format F full: every tensor whole in "
        "model.safetensors + optimizer.safetensors (the\n"
        "                  default for one process); "
        "sharded: each rank writes only the slices it owns\n"
        "                  (rank-RRRRR.safetensors + "
        "index.json; the default when several processes run)\n"
        "  --ckpt-async    copy the state to host memory at the step boundary and write it on\n"
        "                  a background thread while training goes on (the next save, a stop\n"
        "                  and the end wait for it); each save's time lost by the loop is logged\n"
        "  --straggler-factor X  name a rank whose time outside collective waits is above X\n"
        "                  times the median, over the steps between progress lines (default\n"
        "                  1.5; off)\n"
        "  --resume CKPT   continue from a checkpoint "
        "folder, or from the newest one in a run's DIR\n"
        "                  that verifies (damaged newer "
        "ones are named and passed over); any tp and\n"
        "                  layout of the same model. "
        "'auto': the newest in -o DIR, or step 0 if none\n"
        "  --plan PLAN     train a generated plan (plan.txt or its folder) instead of a run spec;\n"
        "                  -D may then change only training settings (steps, lr, data, ...)\n"
        "  --print-every N without a terminal: a progress line every N steps\n"
        "  --val-batches N validation micro-batches per evaluation (default 8)\n"
        "  --quiet         only the header, errors and the summary\n"
        "SIGINT (Ctrl-C) or SIGTERM ends the step under "
        "way, saves a checkpoint (with -o) and stops;\n"
        "a second one stops at once. Several processes "
        "(mpirun, srun) agree at each step boundary: a\n"
        "signal to any of them stops all after the same "
        "step, with one checkpoint and one exit status.\n"
        "-o DIR is locked (DIR/.lock): a second run on it "
        "refuses. Checkpoints are written atomically,\n"
        "so a killed run loses at most the steps since "
        "its last checkpoint. state.json records each\n"
        "file's CRC-32C, checked on resume (boost ckpt "
        "verify DIR checks one). A step whose loss or\n"
        "gradient norm is NaN or inf is skipped; max_bad_steps "
        "of them in a row (train field, default 5)\n"
        "stop the run with exit status 1. With spike_window=W (train field, 0: off) a step\n"
        "whose loss or gradient norm is spike_z standard deviations above the last W good\n"
        "steps' mean is skipped; spike_rollback_after of them in a row roll back to the last\n"
        "good checkpoint (see README).\n");
}

static int int_arg(const char *flag, const char *v, int lo, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v ? v : "", &end, 10);
    if (!v || end == v || *end || errno || x < lo || x > 1000000000) {
        fprintf(stderr, "boost train: %s needs a whole number >= %d, got '%s'\n", flag, lo,
                v ? v : "");
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* mkdir -p: 0, or -1 with errno set. */
static int make_dirs(const char *path) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    } // never a cut name
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* ---- the -o folder's lock: DIR/.lock holds "PID HOST" of the run that writes there ---- */
static char *lock_path;   /* the lock this process holds, or NULL */

/* Whether process pid runs on this host: it exists and is not a zombie (a process killed with its
 * launcher stays one until reaped). */
static int pid_runs(long pid) {
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) return 0;
    char path[64], state = 0;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    int got = fscanf(f, "%*d (%*[^)]) %c", &state);
    fclose(f);
    return !(got == 1 && (state == 'Z' || state == 'X'));
}

/* Take DIR/.lock for this process (world rank 0 takes it for its job). 0, or 2 with a message when
 * another live run holds it. A lock left by a process of this host that no longer exists (a killed
 * run; a process of this host that is still ending gets 3 s) is taken over, with a note; one of
 * another host is refused, naming it. */
static int lock_outdir(const char *dir) {
    char host[256] = "?", line[400];
    gethostname(host, sizeof host - 1);
    size_t n = strlen(dir) + 8;
    char *path = malloc(n);
    if (!path) { fprintf(stderr, "boost train: out of memory\n"); return 1; }
    snprintf(path, n, "%s/.lock", dir);
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0) {
            int len = snprintf(line, sizeof line, "%ld %s\n", (long)getpid(), host);
            int ok = write(fd, line, (size_t)len) == len;
            if (close(fd) != 0 || !ok) {
                fprintf(stderr, "boost train: %s: cannot write the lock: %s\n", path,
                        strerror(errno));
                unlink(path); free(path); return 1;
            }
            lock_path = path;
            return 0;
        }
        if (errno != EEXIST) {
            fprintf(stderr, "boost train: %s: cannot create the lock: %s\n", path, strerror(errno));
            free(path); return 1;
        }
        long pid = 0;
        char other[256] = "";
        FILE *f = fopen(path, "r");
        int got = f ? fscanf(f, "%ld %255s", &pid, other) : 0;
        if (f) fclose(f);
        int here = got == 2 && !strcmp(other, host);
        /* a job torn down by its launcher may take a moment to go: wait up to 3 s for it */
        for (int w = 0; attempt == 0 && here && w < 60 && pid_runs(pid); w++) usleep(50000);
        if (attempt == 0 && here && !pid_runs(pid)) {
            fprintf(stderr,
                    "boost train: note: %s: taking over the lock "
                    "of pid %ld on %s, which no longer runs\n", path, pid, host);
            unlink(path);
            continue;
        }
        if (got == 2)
            fprintf(stderr,
                    "boost train: %s is in use by another run: pid %ld on host %s holds %s; "
                    "wait for it to end or give another -o (if that run is gone, remove %s)\n",
                    dir, pid, other, path, path);
        else
            fprintf(stderr,
                    "boost train: %s is in use by another run (%s exists but "
                    "names no pid and host); if no run writes there, remove %s\n", dir, path, path);
        free(path);
        return 2;
    }
    free(path);
    return 2;
}

static void unlock_outdir(void) {
    if (lock_path) unlink(lock_path);
    free(lock_path);
    lock_path = NULL;
}

int cmd_train(int argc, char **argv) {
    int rc = train_locked(argc, argv);
    unlock_outdir();
    /* under mpirun: finalize, or stop the other ranks when this one failed */
    comm_mpi_finish(rc);
    return rc;
}

/* The command line of `boost train`. */
typedef struct {
    TrainOptions opt;
    const char *run_arg, *plan_arg;
    const char *dvals[TRAIN_MAX_OVERRIDES];   /* the -D name=value texts */
    int ndefs;
} TrainArgs;

/* One option that takes a value (next): 0, or 2 after saying what is wrong. */
static int train_option(TrainArgs *t, const char *a, const char *next) {
    TrainOptions *opt = &t->opt;
    if (!strcmp(a, "--backend")) {
        if (strcmp(next, "cpu") && strcmp(next, "cuda") && strcmp(next, "auto")) {
            fprintf(stderr, "boost train: --backend %s: expected cpu, cuda or auto\n", next);
            return 2;
        }
        opt->backend = next;
    } else if (!strcmp(a, "--log")) opt->log_path = next;
    else if (!strcmp(a, "--tensorboard")) opt->tensorboard = next;
    else if (!strcmp(a, "-o")) opt->outdir = next;
    else if (!strcmp(a, "--resume")) opt->resume = next;
    else if (!strcmp(a, "--plan")) t->plan_arg = next;
    else if (!strcmp(a, "--save-every")) return int_arg(a, next, 1, &opt->save_every) ? 2 : 0;
    else if (!strcmp(a, "--keep")) return int_arg(a, next, 1, &opt->keep) ? 2 : 0;
    else if (!strcmp(a, "--print-every")) return int_arg(a, next, 1, &opt->print_every) ? 2 : 0;
    else if (!strcmp(a, "--val-batches")) return int_arg(a, next, 1, &opt->val_batches) ? 2 : 0;
    else if (!strcmp(a, "--ckpt-format")) {
        if (strcmp(next, "full") && strcmp(next, "sharded")) {
            fprintf(stderr, "boost train: --ckpt-format %s: expected full or sharded\n", next);
            return 2;
        }
        opt->ckpt_format = !strcmp(next, "full") ? 1 : 2;
    } else if (!strcmp(a, "--straggler-factor")) {
        char *end;
        int off = !strcmp(next, "off");
        opt->straggler_factor = off ? -1 : strtod(next, &end);
        if (!off && (*end || !(opt->straggler_factor > 1))) {
            fprintf(stderr,
                    "boost train: --straggler-factor %s: expected a number above 1 or off\n", next);
            return 2;
        }
    }
    return 0;
}

/* The options that must come together. 0, or 2 after saying what is wrong. */
static int check_train_args(const TrainArgs *t) {
    const TrainOptions *opt = &t->opt;
    if (!t->run_arg && !t->plan_arg) { train_usage(stderr); return 2; }
    if (opt->ckpt_async && !opt->outdir) {
        fprintf(stderr, "boost train: --ckpt-async needs -o DIR (the checkpoints it saves)\n");
        return 2;
    }
    if (opt->keep > 0 && !opt->outdir) {
        fprintf(stderr, "boost train: --keep %d needs -o DIR (the checkpoints it keeps)\n",
                opt->keep);
        return 2;
    }
    if (opt->resume && !strcmp(opt->resume, "auto") && !opt->outdir) {
        fprintf(stderr, "boost train: --resume auto resumes from the run's own checkpoints: it "
                "needs -o DIR\n");
        return 2;
    }
    if (t->run_arg && t->plan_arg) {
        fprintf(stderr, "boost train: give a run spec or --plan, not both\n");
        return 2;
    }
    return 0;
}

/* -1 to go on, else the exit status (0 after --help, 2 after saying what is wrong). */
static int parse_train_args(TrainArgs *t, int argc, char **argv) {
    memset(t, 0, sizeof *t);
    t->opt.backend = "auto";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { train_usage(stdout); return 0; }
        if (!strncmp(a, "-D", 2)) {
            const char *def = a[2] ? a + 2 : next;
            if (!a[2]) i++;
            if (!def) { fprintf(stderr, "boost train: -D needs name=value\n"); return 2; }
            if (t->ndefs == TRAIN_MAX_OVERRIDES) {
                fprintf(stderr, "boost train: too many -D (at most %d)\n", TRAIN_MAX_OVERRIDES);
                return 2;
            }
            t->dvals[t->ndefs++] = def;
            continue;
        }
        int takes_value = !strcmp(a, "--backend") || !strcmp(a, "--log") || !strcmp(a, "-o") ||
                          !strcmp(a, "--resume") || !strcmp(a, "--plan") ||
                          !strcmp(a, "--save-every") || !strcmp(a, "--keep") ||
                          !strcmp(a, "--print-every") || !strcmp(a, "--val-batches") ||
                          !strcmp(a, "--ckpt-format") || !strcmp(a, "--tensorboard") ||
                          !strcmp(a, "--straggler-factor");
        if (takes_value && !next) {
            fprintf(stderr, "boost train: %s needs a value\n", a);
            return 2;
        }
        if (takes_value) {
            if (train_option(t, a, next)) return 2;
            i++;
        } else if (!strcmp(a, "--quiet")) t->opt.quiet = 1;
        else if (!strcmp(a, "--ckpt-async")) t->opt.ckpt_async = 1;
        else if (a[0] == '-') {
            fprintf(stderr, "boost train: unknown option %s\n", a);
            train_usage(stderr);
            return 2;
        } else if (t->run_arg) {
            fprintf(stderr, "boost train: one run spec only (got '%s' and '%s')\n", t->run_arg, a);
            return 2;
        } else t->run_arg = a;
    }
    int rc = check_train_args(t);
    return rc ? rc : -1;
}

/* The run spec with its -D overrides generated into DIR/plan (rank 0 with -o) or a temporary
 * folder (tmpdir, removed by the caller); plan_file names its plan.txt. 0 or the exit status. */
static int generate_plan(const TrainArgs *t, char *plan_file, size_t plan_len, char *tmpdir,
                         size_t tmp_len) {
    const TrainOptions *opt = &t->opt;
    char err[4096];
    Override ov[TRAIN_MAX_OVERRIDES];
    for (int i = 0; i < t->ndefs; i++)
        if (parse_override(t->dvals[i], &ov[i], err, sizeof err) < 0) {
            fprintf(stderr, "boost train: %s\n", err);
            return 2;
        }
    Run *run = calloc(1, sizeof *run);
    if (!run) { fprintf(stderr, "boost train: out of memory\n"); return 1; }
    int rc = spec_load_run(t->run_arg, ov, t->ndefs, run, err, sizeof err);
    if (rc) { fprintf(stderr, "%s\n", err); free(run); return rc; }
    char plan_dir[1100];
    if (opt->outdir && world_rank() == 0)
        snprintf(plan_dir, sizeof plan_dir, "%s/plan", opt->outdir);
    else {
        snprintf(tmpdir, tmp_len, "/tmp/boost-train.XXXXXX");
        if (!mkdtemp(tmpdir)) {
            fprintf(stderr, "boost train: cannot create a temporary folder: %s\n", strerror(errno));
            free(run);
            return 1;
        }
        snprintf(plan_dir, sizeof plan_dir, "%s/plan", tmpdir);
    }
    if (opt->outdir && make_dirs(opt->outdir) != 0) {
        fprintf(stderr, "boost train: %s: cannot create: %s\n", opt->outdir, strerror(errno));
        free(run);
        return 1;
    }
    rc = gen_write(run, plan_dir, err, sizeof err);
    free(run);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        if (tmpdir[0]) ckpt_remove_tree(tmpdir);
        return rc;
    }
    snprintf(plan_file, plan_len, "%s/plan.txt", plan_dir);
    return 0;
}

/* --plan with -D name=value: the training settings of the loaded plan overridden. 0 or 2 (said). */
static int override_plan(Plan *plan, const TrainArgs *t) {
    char err[4096];
    TrainOverride tov[TRAIN_MAX_OVERRIDES];
    for (int i = 0; i < t->ndefs; i++) {
        static char names[TRAIN_MAX_OVERRIDES][64];
        const char *d = t->dvals[i], *eq = strchr(d, '=');
        if (!eq || eq == d || eq - d >= 64) {
            fprintf(stderr, "boost train: -D %s: expected name=value, e.g. -D steps=50\n", d);
            return 2;
        }
        memcpy(names[i], d, (size_t)(eq - d));
        names[i][eq - d] = 0;
        tov[i].name = names[i];
        tov[i].value = eq + 1;
    }
    if (train_apply_overrides(plan, tov, t->ndefs, err, sizeof err)) {
        fprintf(stderr, "boost train: %s\n", err);
        return 2;
    }
    return 0;
}

/* A world's NCCL id file, where rank 0 leaves the id for the others: with -o in DIR (set before a
 * pipeline opens its stages), else (plan given) keyed by the run's name. */
static void set_nccl_id_file(const char *outdir, const Plan *plan) {
    char job[64], idfile[1400];
    world_job_id(job, sizeof job);
    if (plan) snprintf(idfile, sizeof idfile, "/tmp/boost-nccl-%s-%s.id", plan->run_name, job);
    else snprintf(idfile, sizeof idfile, "%s/.nccl-%s.id", outdir, job);
    setenv("BOOST_NCCL_ID_FILE", idfile, 1);
}

/* The plan (or a pipeline's stages) loaded from plan_file and trained; ranks > 0 of a world print
 * nothing on stdout. The exit status. */
static int train_plan_file(TrainArgs *t, const char *plan_file) {
    TrainOptions *opt = &t->opt;
    char err[4096];
    int wrank = 0, wsize = 1;
    char werr[256];
    int world = world_from_env(&wrank, &wsize, werr, sizeof werr) == 1;
    if (world && opt->outdir && !getenv("BOOST_NCCL_ID_FILE") && make_dirs(opt->outdir) == 0)
        set_nccl_id_file(opt->outdir, NULL);
    Pipeline *pipe = NULL;   /* pp > 1: one plan section per stage (runtime/pipeline.c) */
    Plan *plan = NULL;
    int rc = 0;
    if (pipeline_plan_is(plan_file) == 1) {
        pipe = pipeline_open(plan_file, opt->backend ? opt->backend : "auto", err, sizeof err);
        if (pipe) plan = pipeline_stage_plan(pipe, 0);
    } else plan = plan_load(plan_file, err, sizeof err);
    if (!plan) { fprintf(stderr, "%s\n", err); rc = 2; }
    if (!rc && t->plan_arg && t->ndefs > 0) rc = override_plan(plan, t);
    /* no -o: keyed by the run's name (a pipeline's stages are open already, keyed by the plan's
       folder) */
    if (!rc && world && !getenv("BOOST_NCCL_ID_FILE")) set_nccl_id_file(NULL, plan);
    int quiet_fd = -1, saved_stdout = -1;
    if (!rc && world && wrank > 0) {   /* only rank 0 prints and logs; errors still go to stderr */
        opt->log_path = opt->tensorboard = NULL;
        fflush(stdout);
        quiet_fd = open("/dev/null", O_WRONLY);
        saved_stdout = quiet_fd >= 0 ? dup(STDOUT_FILENO) : -1;
        if (saved_stdout >= 0) dup2(quiet_fd, STDOUT_FILENO);
    }
    if (!rc) rc = pipe ? train_with_pipeline(pipe, opt) : train_with_plan(plan, opt);
    if (saved_stdout >= 0) {
        fflush(stdout);
        dup2(saved_stdout, STDOUT_FILENO);
        close(saved_stdout);
    }
    if (quiet_fd >= 0) close(quiet_fd);
    if (pipe) pipeline_free(pipe);
    else if (plan) plan_free(plan);
    return rc;
}

static int train_locked(int argc, char **argv) {
    TrainArgs t;
    int rc = parse_train_args(&t, argc, argv);
    if (rc >= 0) return rc;
    const TrainOptions *opt = &t.opt;
    /* one run per folder (a world's rank 0 for its job) */
    if (opt->outdir && world_rank() == 0) {
        if (make_dirs(opt->outdir) != 0) {
            fprintf(stderr, "boost train: %s: cannot create: %s\n", opt->outdir, strerror(errno));
            return 1;
        }
        int lrc = lock_outdir(opt->outdir);
        if (lrc) return lrc;
    }
    char plan_file[1200], tmpdir[64] = "";
    if (t.plan_arg) {
        struct stat st;
        if (stat(t.plan_arg, &st) == 0 && S_ISDIR(st.st_mode))
            snprintf(plan_file, sizeof plan_file, "%s/plan.txt", t.plan_arg);
        else snprintf(plan_file, sizeof plan_file, "%s", t.plan_arg);
    } else {
        rc = generate_plan(&t, plan_file, sizeof plan_file, tmpdir, sizeof tmpdir);
        if (rc) return rc;
    }
    rc = train_plan_file(&t, plan_file);
    if (tmpdir[0]) ckpt_remove_tree(tmpdir);
    return rc;
}
