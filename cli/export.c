/* export.c: `boost export CKPT --format hf -o DIR`: a checkpoint as DIR/config.json plus
 * DIR/model.safetensors (F32) for PyTorch. A full-rank LLaMA is written in the Hugging Face LLaMA
 * layout (model.layers.N.self_attn.q_proj.weight ..., nn.Linear's [out, in] weights), which
 * `transformers` loads as LlamaForCausalLM; BOOST's RoPE already rotates the halves of each head
 * (pairs i, i + head_dim/2) as Hugging Face's does, so no rows are permuted. A low-rank model (CoLA,
 * SVD, LaX) keeps the canonical names and x @ W orientation (L0.q.A [d, r], L0.q.B [r, d], norms as
 * [d]); tools/boost_hf.py loads either. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/commands.h"
#include "cli/infer.h"
#include "runtime/checkpoint.h"   // defines: ckpt_reader_*
#include "runtime/safetensors.h"  // defines: st_open, st_find, st_read_f32, json_write_string

static void export_usage(FILE *f) {
    fprintf(f,
        "usage: boost export CKPT --format hf -o DIR [--run RUN]\n"
        "  CKPT        a checkpoint folder (DIR/step-NNNNNN), or a run's output folder (its newest step)\n"
        "  --format hf config.json + model.safetensors (F32): a full-rank LLaMA in the Hugging Face LLaMA\n"
        "              layout (transformers' LlamaForCausalLM loads it as is); low-rank models (CoLA, SVD,\n"
        "              LaX) under their canonical names, for tools/boost_hf.py\n"
        "  -o DIR      the output folder (created; existing files config.json, model.safetensors replaced)\n"
        "Load it in PyTorch:  import boost_hf; model = boost_hf.load(\"DIR\"); logits = model(tokens)\n");
}

/* One tensor of the export: a canon, its output name and shape, transposed or not. */
typedef struct { char name[160]; int canon; int transpose; int ndim; int64_t shape[2]; } Out;

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

int cmd_export(int argc, char **argv) {
    InferOptions o;
    memset(&o, 0, sizeof o);
    o.cmd = "boost export";
    const char *format = NULL, *outdir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { export_usage(stdout); return 0; }
        int takes = !strcmp(a, "--format") || !strcmp(a, "-o") || !strcmp(a, "--run");
        if (takes && !next) { fprintf(stderr, "boost export: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--format")) { format = next; i++; }
        else if (!strcmp(a, "-o")) { outdir = next; i++; }
        else if (!strcmp(a, "--run")) { o.run = next; i++; }
        else if (a[0] == '-') { fprintf(stderr, "boost export: unknown option %s\n", a); export_usage(stderr); return 2; }
        else if (o.ckpt) { fprintf(stderr, "boost export: one checkpoint only (got '%s' and '%s')\n", o.ckpt, a); return 2; }
        else o.ckpt = a;
    }
    if (!o.ckpt || !outdir) { export_usage(stderr); return 2; }
    if (!format || strcmp(format, "hf")) {
        fprintf(stderr, "boost export: --format %s: the one format is 'hf' (config.json + model.safetensors)\n", format ? format : "(missing)");
        return 2;
    }
    Infer in;
    int rc = infer_open_plan(&o, &in);
    if (rc) { infer_close(&in); return rc; }
    const Plan *p = in.plan;
    if (plan_find_canon(p, "L0.router.W") >= 0 || strstr(p->family, "moe")) {
        fprintf(stderr, "boost export: model %s has MoE layers, which the export does not cover yet\n", p->model_name);
        infer_close(&in); return 2;
    }
    int hf_llama = !strcmp(p->family, "full");
    Out *outs = calloc((size_t)p->ncanons, sizeof *outs);
    int n = 0;
    static const char *attn[] = {"q", "k", "v", "o"}, *mlp[] = {"gate", "up", "down"};
    for (int c = 0; c < p->ncanons && outs; c++) {
        const PlanCanon *k = &p->canons[c];
        Out *u = &outs[n++];
        u->canon = c;
        int is_vec = k->rows == 1;
        u->ndim = is_vec ? 1 : 2;
        u->shape[0] = is_vec ? k->cols : k->rows;
        u->shape[1] = k->cols;
        snprintf(u->name, sizeof u->name, "%s", k->name);
        if (!hf_llama) continue;
        int layer; char proj[32], tail[32];
        if (!strcmp(k->name, "embed")) snprintf(u->name, sizeof u->name, "model.embed_tokens.weight");
        else if (!strcmp(k->name, "final_norm")) snprintf(u->name, sizeof u->name, "model.norm.weight");
        else if (!strcmp(k->name, "head")) { snprintf(u->name, sizeof u->name, "lm_head.weight"); u->transpose = 1; }
        else if (sscanf(k->name, "L%d.%31[a-z_].%31s", &layer, proj, tail) == 3 && !strcmp(tail, "W")) {
            const char *group = NULL;
            for (int j = 0; j < 4; j++) if (!strcmp(proj, attn[j])) group = "self_attn";
            for (int j = 0; j < 3; j++) if (!strcmp(proj, mlp[j])) group = "mlp";
            if (!group) { fprintf(stderr, "boost export: canon %s has no place in the LLaMA layout\n", k->name); rc = 2; break; }
            snprintf(u->name, sizeof u->name, "model.layers.%d.%s.%s_proj.weight", layer, group, proj);
            u->transpose = 1;
        } else if (sscanf(k->name, "L%d.%31s", &layer, proj) == 2 && (!strcmp(proj, "attn_norm") || !strcmp(proj, "mlp_norm")))
            snprintf(u->name, sizeof u->name, "model.layers.%d.%s.weight", layer,
                     !strcmp(proj, "attn_norm") ? "input_layernorm" : "post_attention_layernorm");
        else { fprintf(stderr, "boost export: canon %s has no place in the LLaMA layout\n", k->name); rc = 2; break; }
        if (u->transpose) { u->shape[0] = k->cols; u->shape[1] = k->rows; }
    }
    if (!outs) { fprintf(stderr, "boost export: out of memory\n"); rc = 1; }
    char path[1400], tmp[1500], err[4096];
    CkptReader *f = NULL;   // a full or a sharded checkpoint (runtime/checkpoint.h)
    snprintf(path, sizeof path, "%s", in.dir);
    if (!rc && ckpt_reader_open(in.dir, NULL, 0, &f, err, sizeof err)) { fprintf(stderr, "boost export: %s\n", err); rc = 2; }
    for (int i = 0; i < n && !rc; i++) {
        const PlanCanon *k = &p->canons[outs[i].canon];
        int64_t rows = 0, cols = 0;
        int t = ckpt_reader_find(f, k->name, 0);
        if (t >= 0) ckpt_reader_tensor(f, t, NULL, &rows, &cols);
        if (t < 0 || rows * cols != k->rows * k->cols) {
            fprintf(stderr, "boost export: %s: tensor %s is missing or not F32 %lldx%lld\n", path, k->name,
                    (long long)k->rows, (long long)k->cols);
            rc = 2;
        }
    }
    if (!rc && mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "boost export: %s: cannot create: %s\n", outdir, strerror(errno)); rc = 1;
    }
    // model.safetensors: header (names sorted as written, offsets), then the data
    if (!rc) {
        snprintf(tmp, sizeof tmp, "%s/.model.safetensors.tmp", outdir);
        size_t hcap = 256 + (size_t)n * 256, hl = 0;
        char *h = malloc(hcap);
        int64_t off = 0;
        hl += (size_t)snprintf(h + hl, hcap - hl, "{\"__metadata__\":{\"format\":\"pt\",\"model\":\"%s\",\"step\":\"%lld\"}",
                               p->model_name, (long long)in.st.step);
        for (int i = 0; i < n; i++) {
            int64_t bytes = 4 * outs[i].shape[0] * (outs[i].ndim == 2 ? outs[i].shape[1] : 1);
            if (outs[i].ndim == 1)
                hl += (size_t)snprintf(h + hl, hcap - hl, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[%lld,%lld]}",
                                       outs[i].name, (long long)outs[i].shape[0], (long long)off, (long long)(off + bytes));
            else
                hl += (size_t)snprintf(h + hl, hcap - hl, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[%lld,%lld]}",
                                       outs[i].name, (long long)outs[i].shape[0], (long long)outs[i].shape[1], (long long)off,
                                       (long long)(off + bytes));
            off += bytes;
        }
        hl += (size_t)snprintf(h + hl, hcap - hl, "}");
        while (hl % 8) h[hl++] = ' ';
        FILE *w = fopen(tmp, "wb");
        uint64_t hlen = hl;
        int bad = !w || write_all(w, &hlen, 8) || write_all(w, h, hl);
        for (int i = 0; i < n && !bad; i++) {
            const PlanCanon *k = &p->canons[outs[i].canon];
            float *src = malloc(sizeof(float) * (size_t)(k->rows * k->cols)), *dst = src;
            if (!src) { bad = 1; break; }
            if (ckpt_reader_read(f, ckpt_reader_find(f, k->name, 0), NULL, 0, src, err, sizeof err)) {
                fprintf(stderr, "boost export: %s\n", err); free(src); bad = 1; break;
            }
            if (outs[i].transpose) {
                dst = malloc(sizeof(float) * (size_t)(k->rows * k->cols));
                if (dst) for (int64_t r = 0; r < k->rows; r++) for (int64_t c = 0; c < k->cols; c++) dst[c * k->rows + r] = src[r * k->cols + c];
            }
            bad = !dst || write_all(w, dst, sizeof(float) * (size_t)(k->rows * k->cols));
            if (dst != src) free(dst);
            free(src);
        }
        if (w && fclose(w)) bad = 1;
        free(h);
        snprintf(path, sizeof path, "%s/model.safetensors", outdir);
        if (bad || rename(tmp, path)) { fprintf(stderr, "boost export: %s: write failed: %s\n", path, strerror(errno)); unlink(tmp); rc = 1; }
    }
    // config.json
    if (!rc) {
        snprintf(tmp, sizeof tmp, "%s/.config.json.tmp", outdir);
        FILE *w = fopen(tmp, "w");
        if (w) {
            // sigma inside the low-rank factors: what the plan's bottleneck_act steps apply
            const char *sigma = "identity";
            for (int s = 0; s < p->nsteps; s++)
                if (p->steps_[s].kind == ST_KERNEL && !strcmp(p->steps_[s].kernel->kind, "bottleneck_act") &&
                    kernel_int(p->steps_[s].kernel, "act", 0, 0) == 1) sigma = "silu";
            fprintf(w, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", hf_llama ? "LlamaForCausalLM" : "BoostForCausalLM",
                    hf_llama ? "llama" : "boost");
            fprintf(w, "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
                       "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
                       "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.9g,\n"
                       "  \"rope_theta\": %.9g,\n  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": false,\n"
                       "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"torch_dtype\": \"float32\",\n",
                    p->hidden, p->ffn, p->layers, p->heads, p->kv_heads, p->head_dim, p->vocab, p->seq, p->eps, p->rope_theta);
            fprintf(w, "  \"boost\": {\"model\": ");
            json_write_string(w, p->model_name);
            fprintf(w, ", \"family\": \"%s\", \"layout\": \"%s\", \"step\": %lld, \"lowrank_sigma\": \"%s\", \"gate_act\": \"%s\", "
                       "\"lax\": %s, \"weights\": \"%s\"}\n}\n",
                    p->family, hf_llama ? "hf-llama" : "canonical", (long long)in.st.step, sigma, hf_llama ? "silu" : "identity",
                    !strcmp(p->family, "lax") ? "true" : "false", hf_llama ? "nn.Linear [out, in]" : "x @ W [in, out]");
        }
        snprintf(path, sizeof path, "%s/config.json", outdir);
        if (!w || fclose(w) || rename(tmp, path)) { fprintf(stderr, "boost export: %s: write failed: %s\n", path, strerror(errno)); unlink(tmp); rc = 1; }
    }
    if (!rc) printf("wrote %s/config.json and model.safetensors (%s, %d tensors, step %lld, %s layout)\n", outdir, p->model_name, n,
                    (long long)in.st.step, hf_llama ? "Hugging Face LLaMA" : "canonical BOOST");
    ckpt_reader_close(f);
    free(outs);
    infer_close(&in);
    return rc;
}
