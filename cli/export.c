/* export.c: `boost export CKPT --format hf -o DIR`: a checkpoint as a Hugging Face model folder:
 * config.json, model.safetensors (F32), generation_config.json, and for byte models a byte-level
 * tokenizer.json + tokenizer_config.json. A full-rank LLaMA is written in the Hugging Face LLaMA
 * layout (model.layers.N.self_attn.q_proj.weight ..., nn.Linear's [out, in] weights), which
 * `transformers` loads as LlamaForCausalLM; BOOST's RoPE already rotates the halves of each head
 * (pairs i, i + head_dim/2) as Hugging Face's does, so no rows are permuted. Which layout a model
 * gets is read from its factorization's row (gen/factor.c): the LLaMA layout when every factor has
 * a Hugging Face name (FactorDef.hf_tensor: W -> q_proj.weight), else, as for a low-rank or MoE
 * model (CoLA, SVD, LaX, usv), its canonical names under "model." and the x @ W orientation
 * (model.L0.q.A [d, r], norms as [d]) and gets tools/hf/modeling_boost.py beside them with an
 * auto_map, so AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True) loads it
 * (docs/import-export.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/commands.h"
#include "cli/infer.h"
#include "gen/factor.h"      // defines: factorization_find, factorization_factor
#include "common/kernel_catalog.h"   // defines: kcat_find, KK_*
#include "runtime/checkpoint.h" // defines: ckpt_reader_*
#include "common/json.h"         // defines: json_write_string
#include "common/files.h"        // defines: file_commit

static void export_usage(FILE *f) {
    fprintf(f, "usage: boost export CKPT --format hf -o DIR [--run RUN] [-D name=value ...] [--bos "
               "ID] [--eos ID]\n"
               "  CKPT        a checkpoint folder (DIR/step-NNNNNN), or a run's output folder (its "
               "newest step);\n"
               "              any tp, dp or pp it was trained at\n"
               "  --format hf a Hugging Face model folder: config.json, model.safetensors (F32), "
               "generation_config.json;\n"
               "              a full-rank LLaMA in the LLaMA layout (transformers' "
               "LlamaForCausalLM loads it as is);\n"
               "              low-rank and MoE models (CoLA, SVD, LaX) under their canonical names "
               "with modeling_boost.py\n"
               "              and an auto_map: AutoModelForCausalLM.from_pretrained(DIR, "
               "trust_remote_code=True);\n"
               "              byte models (vocab 256 trained on text) also get a byte-level "
               "tokenizer.json\n"
               "  -o DIR      the output folder (created; the files above replaced)\n"
               "  --run, -D   the run spec and overrides that rebuild the model's plan (as for "
               "boost eval)\n"
               "  --bos, --eos  token ids written to config.json and generation_config.json "
               "(default: none, null)\n"
               "Evaluate with lm-evaluation-harness: lm_eval --model hf --model_args "
               "pretrained=DIR,trust_remote_code=True "
               "--tasks ...\n");
}

/* One tensor of the export: a canon, its output name and shape, transposed or not. */
typedef struct {
    char name[160];
    int canon;
    int transpose;
    int ndim;
    int64_t shape[2];
} Out;

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

/* Close w (the temporary file tmp) and rename it to DIR/name. 0, or 1 with a message. */
static int publish(FILE *w, const char *tmp, const char *outdir, const char *name) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    if (file_commit(w, tmp, path)) {
        fprintf(stderr, "boost export: %s: write failed: %s\n", path,
                strerror(errno ? errno : EIO));
        return 1;
    }
    return 0;
}

static FILE *open_tmp(const char *outdir, const char *name, char *tmp, size_t len) {
    snprintf(tmp, len, "%s/.%s.tmp", outdir, name);
    return fopen(tmp, "wb");
}

/* The output name and shape of every canon: the LLaMA layout (hf_llama; a projection's factor
 * L<i>.<proj>.<factor> under its row's hf_tensor name, transposed) or "model." + canon. 0 or 2. */
static int name_outputs(const Plan *p, const Factorization *fz, int hf_llama, Out *outs) {
    static const char *attn[] = {"q", "k", "v", "o"}, *mlp[] = {"gate", "up", "down"};
    for (int c = 0; c < p->ncanons; c++) {
        const PlanCanon *k = &p->canons[c];
        Out *u = &outs[c];
        u->canon = c;
        int is_vec = k->rows == 1;
        u->ndim = is_vec ? 1 : 2;
        u->shape[0] = is_vec ? k->cols : k->rows;
        u->shape[1] = k->cols;
        snprintf(u->name, sizeof u->name, "model.%s", k->name);
        if (!hf_llama) continue;
        int layer;
        char proj[32], tail[32];
        const FactorDef *fd = NULL;
        if (!strcmp(k->name, "embed"))
            snprintf(u->name, sizeof u->name, "model.embed_tokens.weight");
        else if (!strcmp(k->name, "final_norm"))
            snprintf(u->name, sizeof u->name, "model.norm.weight");
        else if (!strcmp(k->name, "head")) {
            snprintf(u->name, sizeof u->name, "lm_head.weight");
            u->transpose = 1;
        } else if (sscanf(k->name, "L%d.%31[a-z_].%31s", &layer, proj, tail) == 3 &&
                   (fd = factorization_factor(fz, tail)) && fd->hf_tensor) {
            const char *group = NULL;
            for (int j = 0; j < 4; j++)
                if (!strcmp(proj, attn[j])) group = "self_attn";
            for (int j = 0; j < 3; j++)
                if (!strcmp(proj, mlp[j])) group = "mlp";
            if (!group) {
                fprintf(stderr, "boost export: canon %s has no place in the LLaMA layout\n",
                        k->name);
                return 2;
            }
            snprintf(u->name, sizeof u->name, "model.layers.%d.%s.%s_proj.%s", layer, group,
                     proj, fd->hf_tensor);
            u->transpose = 1;
        } else if (sscanf(k->name, "L%d.%31s", &layer, proj) == 2 &&
                   (!strcmp(proj, "attn_norm") || !strcmp(proj, "mlp_norm")))
            snprintf(u->name, sizeof u->name, "model.layers.%d.%s.weight", layer,
                     !strcmp(proj, "attn_norm") ? "input_layernorm" : "post_attention_layernorm");
        else {
            fprintf(stderr, "boost export: canon %s has no place in the LLaMA layout\n", k->name);
            return 2;
        }
        if (u->transpose) {
            u->shape[0] = k->cols;
            u->shape[1] = k->rows;
        }
    }
    return 0;
}

/* model.safetensors: header (names in canon order, offsets), then the data. 0, 1 or 2. */
static int write_weights(const Plan *p, const Out *outs, int n, CkptReader *f, int64_t step,
                         const char *outdir) {
    char tmp[1500], err[4096];
    size_t hcap = 256 + (size_t)n * 256, hl = 0;
    char *h = malloc(hcap);
    if (!h) {
        fprintf(stderr, "boost export: out of memory\n");
        return 1;
    }
    int64_t off = 0;
    hl +=
        (size_t)snprintf(h + hl, hcap - hl,
                         "{\"__metadata__\":{\"format\":\"pt\",\"model\":\"%s\",\"step\":\"%lld\"}",
                         p->model_name, (long long)step);
    for (int i = 0; i < n; i++) {
        int64_t bytes = 4 * outs[i].shape[0] * (outs[i].ndim == 2 ? outs[i].shape[1] : 1);
        char shape[64];
        if (outs[i].ndim == 1)
            snprintf(shape, sizeof shape, "%lld", (long long)outs[i].shape[0]);
        else
            snprintf(shape, sizeof shape, "%lld,%lld", (long long)outs[i].shape[0],
                     (long long)outs[i].shape[1]);
        hl += (size_t)snprintf(
            h + hl, hcap - hl,
            ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":[%lld,%lld]}", outs[i].name,
            shape, (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    hl += (size_t)snprintf(h + hl, hcap - hl, "}");
    while (hl % 8) h[hl++] = ' ';
    FILE *w = open_tmp(outdir, "model.safetensors", tmp, sizeof tmp);
    uint64_t hlen = hl;
    int bad = !w || write_all(w, &hlen, 8) || write_all(w, h, hl);
    for (int i = 0; i < n && !bad; i++) {
        const PlanCanon *k = &p->canons[outs[i].canon];
        float *src = malloc(sizeof(float) * (size_t)(k->rows * k->cols)), *dst = src;
        if (!src) {
            bad = 1;
            break;
        }
        if (ckpt_reader_read(f, ckpt_reader_find(f, k->name, 0), NULL, 0, src, err, sizeof err)) {
            fprintf(stderr, "boost export: %s\n", err);
            free(src);
            bad = 1;
            break;
        }
        if (outs[i].transpose) {
            dst = malloc(sizeof(float) * (size_t)(k->rows * k->cols));
            if (dst)
                for (int64_t r = 0; r < k->rows; r++)
                    for (int64_t c = 0; c < k->cols; c++)
                        dst[c * k->rows + r] = src[r * k->cols + c];
        }
        bad = !dst || write_all(w, dst, sizeof(float) * (size_t)(k->rows * k->cols));
        if (dst != src) free(dst);
        free(src);
    }
    free(h);
    if (bad) {
        if (w) fclose(w);
        unlink(tmp);
        fprintf(stderr, "boost export: %s/model.safetensors: write failed\n", outdir);
        return 1;
    }
    return publish(w, tmp, outdir, "model.safetensors");
}

/* A constant of the plan's first kernel of catalog kind `kind` (dflt when there is none). */
static int64_t first_kernel_int(const Plan *p, int kind, const char *key, int64_t dflt) {
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps_[s].kind == ST_KERNEL && kcat_find(p->steps_[s].kernel->kind) == kind)
            return kernel_int(p->steps_[s].kernel, key, 0, dflt);
    return dflt;
}

static void write_token_id(FILE *w, const char *key, int id) {
    if (id >= 0)
        fprintf(w, "  \"%s\": %d,\n", key, id);
    else
        fprintf(w, "  \"%s\": null,\n", key);
}

typedef struct {
    int bos, eos, byte_model;
} Tokens;

/* config.json: LLaMA's fields; for BOOST's own layout the "boost" section (every tensor's shape,
 * the factorization, MoE routing) and the auto_map to modeling_boost.py. */
static int write_config(const Plan *p, const Factorization *fz, const Out *outs, int n,
                        int hf_llama, int64_t step, const Tokens *tk, const char *outdir) {
    char tmp[1500];
    FILE *w = open_tmp(outdir, "config.json", tmp, sizeof tmp);
    if (!w) return publish(w, tmp, outdir, "config.json");
    const char *sigma = first_kernel_int(p, KK_BOTTLENECK_ACT, "act", 0) == 1 ? "silu" : "identity";
    const char *gate =
        hf_llama || first_kernel_int(p, KK_GLU_FWD, "act", 0) == 1 ? "silu" : "identity";
    fprintf(w, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n",
            hf_llama ? "LlamaForCausalLM" : "BoostForCausalLM", hf_llama ? "llama" : "boost");
    if (!hf_llama)
        fprintf(w, "  \"auto_map\": {\"AutoConfig\": \"modeling_boost.BoostConfig\", "
                   "\"AutoModelForCausalLM\": \"modeling_boost.BoostForCausalLM\"},\n");
    fprintf(
        w,
        "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
        "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
        "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.9g,\n"
        "  \"rope_theta\": %.9g,\n  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": false,\n"
        "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"torch_dtype\": \"float32\",\n  "
        "\"use_cache\": true,\n",
        p->hidden, p->ffn, p->layers, p->heads, p->kv_heads, p->head_dim, p->vocab, p->seq, p->eps,
        p->rope_theta);
    write_token_id(w, "bos_token_id", tk->bos);
    write_token_id(w, "eos_token_id", tk->eos);
    write_token_id(w, "pad_token_id", tk->byte_model ? 0 : tk->eos);
    fprintf(w, "  \"boost\": {\"model\": ");
    json_write_string(w, p->model_name);
    fprintf(w,
            ", \"family\": \"%s\", \"layout\": \"%s\", \"step\": %lld, \"lowrank_sigma\": \"%s\", "
            "\"gate_act\": \"%s\",\n"
            "    \"lax\": %s, \"weights\": \"%s\", \"trained_seq\": %d,\n"
            "    \"positions\": \"max_position_embeddings is the training sequence length; later "
            "positions are "
            "rotated by plain RoPE (no scaling, no window) where the model was never trained\"",
            p->family, hf_llama ? "hf-llama" : "canonical", (long long)step, sigma, gate,
            fz && fz->lax ? "true" : "false",
            hf_llama ? "nn.Linear [out, in]" : "x @ W [in, out]", p->seq);
    int64_t experts = first_kernel_int(p, KK_MOE_ROUTER, "experts", 0);
    if (experts > 0)
        fprintf(w,
                ",\n    \"moe\": {\"experts\": %lld, \"top_k\": %lld, \"capacity\": %lld, "
                "\"capacity_tokens\": %lld, \"norm\": %lld}",
                (long long)experts, (long long)first_kernel_int(p, KK_MOE_ROUTER, "top_k", 1),
                (long long)first_kernel_int(p, KK_MOE_ROUTER, "capacity", 0),
                (long long)first_kernel_int(p, KK_MOE_ROUTER, "rows", 0),
                (long long)first_kernel_int(p, KK_MOE_ROUTER, "norm", 0));
    if (!hf_llama) {
        fprintf(w, ",\n    \"tensors\": {");
        for (int i = 0; i < n; i++) {
            fprintf(w, "%s\"%s\": [", i ? ", " : "", p->canons[outs[i].canon].name);
            if (outs[i].ndim == 1)
                fprintf(w, "%lld]", (long long)outs[i].shape[0]);
            else
                fprintf(w, "%lld, %lld]", (long long)outs[i].shape[0], (long long)outs[i].shape[1]);
        }
        fprintf(w, "}");
    }
    fprintf(w, "}\n}\n");
    return publish(w, tmp, outdir, "config.json");
}

static int write_generation_config(const Tokens *tk, const char *outdir) {
    char tmp[1500];
    FILE *w = open_tmp(outdir, "generation_config.json", tmp, sizeof tmp);
    if (w) {
        fprintf(w, "{\n");
        write_token_id(w, "bos_token_id", tk->bos);
        write_token_id(w, "eos_token_id", tk->eos);
        write_token_id(w, "pad_token_id", tk->byte_model ? 0 : tk->eos);
        fprintf(w, "  \"do_sample\": false\n}\n");
    }
    return publish(w, tmp, outdir, "generation_config.json");
}

/* A byte model's tokenizer: token b is byte b. tokenizer.json in the `tokenizers` library's format:
 * a BPE with no merges over the 256 byte symbols of its ByteLevel alphabet (byte b shown as b
 * itself when printable, else as code point 256 + n), ByteLevel pre-tokenizer and decoder without
 * regex splitting or a prefix space, so every text encodes to its UTF-8 bytes and decodes back. The
 * pad token is byte 0 (shown as U+0100), which text does not hold. */
static int write_byte_tokenizer(const char *outdir) {
    char tmp[1500];
    FILE *w = open_tmp(outdir, "tokenizer.json", tmp, sizeof tmp);
    if (w) {
        fprintf(
            w,
            "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [], "
            "\"normalizer\": null,\n \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
            "\"add_prefix_space\": false, "
            "\"trim_offsets\": false, \"use_regex\": false},\n \"post_processor\": null,\n"
            " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
            "\"trim_offsets\": false, "
            "\"use_regex\": false},\n \"model\": {\"type\": \"BPE\", \"dropout\": null, "
            "\"unk_token\": null, "
            "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": "
            "false, "
            "\"byte_fallback\": false, \"ignore_merges\": false, \"vocab\": {");
        int extra = 0;
        for (int b = 0; b < 256; b++) {
            int printable =
                (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            int code = printable ? b : 256 + extra++;
            fprintf(w, "%s\"\\u%04x\": %d", b ? ", " : "", code, b);
        }
        fprintf(w, "}, \"merges\": []}}\n");
    }
    if (publish(w, tmp, outdir, "tokenizer.json")) return 1;
    w = open_tmp(outdir, "tokenizer_config.json", tmp, sizeof tmp);
    if (w)
        fprintf(w, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  "
                   "\"model_max_length\": 1000000000,\n"
                   "  \"clean_up_tokenization_spaces\": false,\n  \"pad_token\": \"\\u0100\",\n  "
                   "\"add_bos_token\": false,\n  \"add_eos_token\": false\n}\n");
    return publish(w, tmp, outdir, "tokenizer_config.json");
}

/* DIR/modeling_boost.py: a copy of tools/hf/modeling_boost.py, found beside the binary
 * (bin/../tools/hf), else under the current folder. 0, or 1 with a message. */
static int copy_modeling_file(const char *outdir) {
    char exe[1024], src[1200], tmp[1500];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(src, sizeof src, "%s/../tools/hf/modeling_boost.py", exe);
    if (access(src, R_OK) != 0) snprintf(src, sizeof src, "tools/hf/modeling_boost.py");
    FILE *r = fopen(src, "rb");
    if (!r) {
        fprintf(stderr,
                "boost export: %s: %s (the modeling file ships in the repository's tools/hf/: run "
                "bin/boost "
                "from its checkout)\n",
                src, strerror(errno));
        return 1;
    }
    FILE *w = open_tmp(outdir, "modeling_boost.py", tmp, sizeof tmp);
    char buf[65536];
    size_t got;
    while (w && (got = fread(buf, 1, sizeof buf, r)) > 0)
        if (write_all(w, buf, got)) break;
    fclose(r);
    return publish(w, tmp, outdir, "modeling_boost.py");
}

/* A run trained at dp > 1 or pp > 1 leaves a plan the export cannot take as it is (inference reads
 * tensor parallel plans): then the plan is rebuilt at dp = 1, pp = 1 (the checkpoint's canonical
 * tensors do not depend on either). Adds "dp=1" to o's -D list when needed. */
static void export_at_dp1(InferOptions *o) {
    char dir[1200], notes[2048], err[2048], path[1300];
    if (o->ndefs >= INFER_MAX_DEFS ||
        ckpt_resolve_for(o->ckpt, CKPT_NEED_WEIGHTS, dir, sizeof dir, notes, sizeof notes, err,
                         sizeof err))
        return;
    for (int i = 0; i < o->ndefs; i++)
        if (!strncmp(o->defs[i], "dp=", 3) || !strncmp(o->defs[i], "pp=", 3)) return;
    snprintf(path, sizeof path, "%s/../plan/plan.txt", dir);
    Plan *tp = access(path, R_OK) == 0 ? plan_load(path, err, sizeof err) : NULL;
    if (tp && (tp->dp > 1 || tp->pp > 1)) o->defs[o->ndefs++] = "dp=1";
    if (tp) plan_free(tp);
}

static int parse_export_args(int argc, char **argv, InferOptions *o, const char **format,
                             const char **outdir, Tokens *tk) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            export_usage(stdout);
            return -1;
        }
        int takes = !strcmp(a, "--format") || !strcmp(a, "-o") || !strcmp(a, "--run") ||
                    !strcmp(a, "-D") || !strcmp(a, "--bos") || !strcmp(a, "--eos");
        if (takes && !next) {
            fprintf(stderr, "boost export: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--format"))
            *format = next;
        else if (!strcmp(a, "-o"))
            *outdir = next;
        else if (!strcmp(a, "--run"))
            o->run = next;
        else if (!strcmp(a, "-D")) {
            if (o->ndefs == INFER_MAX_DEFS) {
                fprintf(stderr, "boost export: at most %d -D\n", INFER_MAX_DEFS);
                return 2;
            }
            o->defs[o->ndefs++] = next;
        } else if (!strcmp(a, "--bos") || !strcmp(a, "--eos")) {
            long id;
            if (infer_int_arg("boost export", a, next, 0, 1L << 30, &id) < 0) return 2;
            if (a[2] == 'b')
                tk->bos = (int)id;
            else
                tk->eos = (int)id;
        } else if (a[0] == '-') {
            fprintf(stderr, "boost export: unknown option %s\n", a);
            export_usage(stderr);
            return 2;
        } else if (o->ckpt) {
            fprintf(stderr, "boost export: one checkpoint only (got '%s' and '%s')\n", o->ckpt, a);
            return 2;
        } else
            o->ckpt = a;
        if (takes) i++;
    }
    if (!o->ckpt || !*outdir) {
        export_usage(stderr);
        return 2;
    }
    if (!*format || strcmp(*format, "hf")) {
        fprintf(stderr,
                "boost export: --format %s: the one format is 'hf' (a Hugging Face model folder)\n",
                *format ? *format : "(missing)");
        return 2;
    }
    return 0;
}

int cmd_export(int argc, char **argv) {
    InferOptions o;
    memset(&o, 0, sizeof o);
    o.cmd = "boost export";
    const char *format = NULL, *outdir = NULL;
    Tokens tk = {-1, -1, 0};
    int rc = parse_export_args(argc, argv, &o, &format, &outdir, &tk);
    if (rc) return rc < 0 ? 0 : rc;
    export_at_dp1(&o);
    Infer in;
    rc = infer_open_plan(&o, &in);
    if (rc) {
        infer_close(&in);
        return rc;
    }
    const Plan *p = in.plan;
    /* the plan's factorization row (NULL for a family this build does not know: canonical names) */
    const Factorization *fz = factorization_find(p->family);
    int hf_llama = fz && factorization_hf_llama(fz) && plan_find_canon(p, "L0.router.W") < 0;
    size_t dl = strlen(p->data_path);
    tk.byte_model = p->vocab == 256 && !(dl > 4 && !strcmp(p->data_path + dl - 4, ".bin"));
    Out *outs = calloc((size_t)p->ncanons, sizeof *outs);
    int n = p->ncanons;
    if (!outs) {
        fprintf(stderr, "boost export: out of memory\n");
        rc = 1;
    }
    if (!rc) rc = name_outputs(p, fz, hf_llama, outs);
    char err[4096];
    CkptReader *f = NULL; // a full or a sharded checkpoint (runtime/checkpoint.h)
    if (!rc && ckpt_reader_open_weights(in.dir, &f, err, sizeof err)) {
        fprintf(stderr, "boost export: %s\n", err);
        rc = 2;
    }
    for (int i = 0; i < n && !rc; i++) {
        const PlanCanon *k = &p->canons[outs[i].canon];
        int64_t rows = 0, cols = 0;
        int t = ckpt_reader_find(f, k->name, 0);
        if (t >= 0) ckpt_reader_tensor(f, t, NULL, &rows, &cols);
        if (t < 0 || rows * cols != k->rows * k->cols) {
            fprintf(stderr, "boost export: %s: tensor %s is missing or not F32 %lldx%lld\n", in.dir,
                    k->name, (long long)k->rows, (long long)k->cols);
            rc = 2;
        }
    }
    if (!rc && mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "boost export: %s: cannot create: %s\n", outdir, strerror(errno));
        rc = 1;
    }
    if (!rc) rc = write_weights(p, outs, n, f, in.st.step, outdir);
    if (!rc) rc = write_config(p, fz, outs, n, hf_llama, in.st.step, &tk, outdir);
    if (!rc) rc = write_generation_config(&tk, outdir);
    if (!rc && tk.byte_model) rc = write_byte_tokenizer(outdir);
    if (!rc && !hf_llama) rc = copy_modeling_file(outdir);
    if (!rc)
        printf("wrote %s: config.json, model.safetensors, generation_config.json%s%s (%s, %d "
               "tensors, step %lld, %s layout)\n",
               outdir, tk.byte_model ? ", tokenizer.json (bytes)" : "",
               hf_llama ? "" : ", modeling_boost.py", p->model_name, n, (long long)in.st.step,
               hf_llama ? "Hugging Face LLaMA" : "canonical BOOST");
    if (!rc && !tk.byte_model && tk.eos < 0)
        printf("note: no tokenizer written (the run's tokens come from its .bin data): copy that "
               "tokenizer's files into %s, "
               "and give --eos ID for generate() to stop\n",
               outdir);
    ckpt_reader_close(f);
    free(outs);
    infer_close(&in);
    return rc;
}
