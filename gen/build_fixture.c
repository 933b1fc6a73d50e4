/* build_fixture.c: runs built by hand in C, for tests that must not depend on the spec loader and
 * for bootstrapping: the tiny CoLA demo model (d=128, 2 layers, rank 32) in btp at tp=2. */
#include <string.h>
#include "gen/factor.h"
#include "gen/ir.h"
#include "gen/build_fixture.h"

void run_tiny_cola(Run *r) {
    memset(r, 0, sizeof *r);
    strcpy(r->name, "tiny-cola");
    Model *m = &r->model;
    strcpy(m->name, "tiny-cola");
    m->hidden = 128; m->layers = 2; m->heads = 4; m->kv_heads = 4; m->head_dim = 32;
    m->ffn = 352; m->vocab = 256; m->norm_eps = 1e-5; m->rope_theta = 10000;
    m->init_std = 0.02;
    factorization_apply(factorization_find("cola"), m, 32);   /* A, SiLU, B; no gate act, no LaX */
    Gpu *g = &r->gpu;
    strcpy(g->name, "h100"); strcpy(g->arch, "sm_90");   /* specs/gpus/h100.lua's, by hand */
    g->smem_block_kib = 227; g->smem_sm_kib = 228;
    g->regs_sm = 65536; g->threads_sm = 2048; g->blocks_sm = 32;
    g->sm_count = 132; g->bf16_tflops = 989; g->hbm_gbs = 3350; g->nvlink_gbs = 450; g->net_gbs = 50;
    g->nvlink_latency_us = 5; g->net_latency_us = 10; g->gpus_per_node = 8; g->memory_gb = 80;
    g->tune_row_block = 256; g->tune_elem_block = 256; g->tune_attn_block_q = 64; g->tune_attn_block_k = 64;
    r->tp = 2; r->pp = 1; r->dp = 1; r->ep = 1;
    r->layout = LAYOUT_BTP;
    r->micro_batch = 4; r->seq = 64; r->grad_accum = 1;
    r->dtype = DT_BF16; r->online_rmsnorm = 1; r->group_linears = 1; r->checkpoint = CKPT_LOWRANK;
    r->steps = 200; r->warmup = 20; r->lr = 3e-3; r->min_lr = 3e-4; r->beta1 = 0.9; r->beta2 = 0.95;
    r->adam_eps = 1e-8; r->weight_decay = 0.1; r->clip = 1.0; r->seed = 1234; r->eval_every = 50;
    strcpy(r->data, "corpus"); r->val_fraction = 0.1;
}
