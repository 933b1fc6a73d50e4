/* test_plan_tiny.h: writes a small hand-made plan (embedding -> RMSNorm -> vocab-parallel head ->
 * cross-entropy, forward and backward) at any TP degree, so the loader and the Engine can be tested
 * without the generator. Replicated embed/final_norm (rep=1), head split on the vocab; the two
 * backward GEMMs run as one grouped_gemm. */
#ifndef BOOST_TEST_PLAN_TINY_H
#define BOOST_TEST_PLAN_TINY_H
#include <stdio.h>

#define TINY_V 16
#define TINY_D 8
#define TINY_MB 2
#define TINY_SEQ 4
#define TINY_M (TINY_MB * TINY_SEQ)

/* Returns 0 on success. grad_accum enters xent_bwd's scale. */
static int write_tiny_plan(const char *path, int tp, int grad_accum) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int vl = TINY_V / tp, M = TINY_M, d = TINY_D;
    fprintf(f, "boost-plan 1\n# a hand-made plan for the runtime tests\n");
    fprintf(f, "model name=tiny-head family=full hidden=%d layers=0 heads=1 kv_heads=1 head_dim=8 ffn=0 vocab=%d eps=1e-05 rope_theta=10000\n", d, TINY_V);
    fprintf(f, "run name=tiny-head tp=%d pp=1 dp=1 layout=btp micro_batch=%d seq=%d grad_accum=%d dtype=bf16 online_rmsnorm=0 group_linears=0 checkpoint=none gpu=h100 arch=sm_90\n",
            tp, TINY_MB, TINY_SEQ, grad_accum);
    fprintf(f, "train steps=10 lr=0.01 min_lr=0.001 warmup=2 beta1=0.9 beta2=0.95 adam_eps=1e-08 weight_decay=0.1 clip=1 seed=7 eval_every=5\n");
    fprintf(f, "data path= val_fraction=0.1\n");
    fprintf(f, "arena act bytes=2600\n");
    fprintf(f, "canon embed shape=%dx%d init=normal std=0.5 seed=0x1234567 decay=0\n", TINY_V, d);
    fprintf(f, "canon final_norm shape=1x%d init=ones std=0 seed=0x99 decay=0\n", d);
    fprintf(f, "canon head shape=%dx%d init=normal std=0.5 seed=0xabcdef decay=1\n", d, TINY_V);
    fprintf(f, "param embed shape=%dx%d dtype=bf16\n", TINY_V, d);
    fprintf(f, "part embed canon=embed src=0:%d,0:%d dst=0,0 rep=1\n", TINY_V, d);
    fprintf(f, "param final_norm shape=1x%d dtype=bf16\n", d);
    fprintf(f, "part final_norm canon=final_norm src=0:1,0:%d dst=0,0 rep=1\n", d);
    fprintf(f, "param head shape=%dx%d dtype=bf16\n", d, vl);
    /* two column blocks per rank, to exercise several parts per param */
    fprintf(f, "part head canon=head src=0:%d,0%%r%d:%d%%r%d dst=0,0 rep=0\n", d, vl, vl / 2, vl);
    fprintf(f, "part head canon=head src=0:%d,%d%%r%d:%d%%r%d dst=0,%d rep=0\n", d, vl / 2, vl, vl, vl, vl / 2);
    fprintf(f, "input tokens dtype=i32 shape=%d\ninput targets dtype=i32 shape=%d\noutput loss dtype=fp32 shape=1\n", M, M);
    fprintf(f, "buffer x dtype=fp32 shape=%dx%d offset=0 live=0:10\n", M, d);
    fprintf(f, "buffer xn dtype=fp32 shape=%dx%d offset=256 live=1:7\n", M, d);
    fprintf(f, "buffer rstd dtype=fp32 shape=%d offset=512 live=1:9\n", M);
    fprintf(f, "buffer logits dtype=fp32 shape=%dx%d offset=544 live=2:6\n", M, vl);
    fprintf(f, "buffer stats dtype=fp32 shape=%dx3 offset=1056 live=3:4\n", M);
    fprintf(f, "buffer stats_all dtype=fp32 shape=%dx%d offset=1152 live=4:5\n", M, 3 * tp);
    fprintf(f, "buffer lse dtype=fp32 shape=%d offset=1536 live=5:6\n", M);
    fprintf(f, "buffer dlogits dtype=fp32 shape=%dx%d offset=1568 live=6:7\n", M, vl);
    fprintf(f, "buffer dxn dtype=fp32 shape=%dx%d offset=2080 live=7:9\n", M, d);
    fprintf(f, "buffer dx dtype=fp32 shape=%dx%d offset=2336 live=9:10\n", M, d);
    fprintf(f, "section forward\n");
    fprintf(f, "kernel embedding_fwd name=emb grid=1 block=1 smem=0 tokens=tokens table=embed out=x rows=%d cols=%d vocab=%d\n", M, d, TINY_V);
    fprintf(f, "kernel rmsnorm_fwd name=rms grid=1 block=1 smem=0 x=x gamma=final_norm out=xn rstd=rstd rows=%d cols=%d ldx=%d ldo=%d divisor=%d eps=1e-05\n", M, d, d, d, d);
    fprintf(f, "gemm ta=0 tb=0 m=%d n=%d k=%d A=xn lda=%d B=head ldb=%d C=logits ldc=%d alpha=1 beta=0\n", M, vl, d, d, vl, vl);
    fprintf(f, "kernel xent_fwd name=xf grid=1 block=1 smem=0 logits=logits targets=targets stats=stats rows=%d cols=%d ldl=%d vocab_offset=0%%r%d\n", M, vl, vl, vl);
    fprintf(f, "allgather src=stats dst=stats_all rows=%d cols=3 ld_src=3 ld_dst=%d dtype=fp32 dir=fwd tag=loss\n", M, 3 * tp);
    fprintf(f, "kernel xent_combine name=xc grid=1 block=1 smem=0 stats_all=stats_all lse=lse loss=loss rows=%d tp=%d\n", M, tp);
    fprintf(f, "section backward\n");
    fprintf(f, "kernel xent_bwd name=xb grid=1 block=1 smem=0 logits=logits targets=targets lse=lse dlogits=dlogits rows=%d cols=%d ldl=%d vocab_offset=0%%r%d scale=%.9g\n",
            M, vl, vl, vl, 1.0 / (M * grad_accum));
    fprintf(f, "grouped_gemm count=2\n");
    fprintf(f, "member ta=1 tb=0 m=%d n=%d k=%d A=xn lda=%d B=dlogits ldb=%d C=d.head ldc=%d alpha=1 beta=1\n", d, vl, M, d, vl, vl);
    fprintf(f, "member ta=0 tb=1 m=%d n=%d k=%d A=dlogits lda=%d B=head ldb=%d C=dxn ldc=%d alpha=1 beta=0\n", M, d, vl, vl, vl, d);
    fprintf(f, "allreduce buf=dxn elems=%d dtype=fp32 op=sum dir=bwd tag=head\n", M * d);
    fprintf(f, "kernel rmsnorm_bwd name=rb grid=1 block=1 smem=0 x=x gamma=final_norm rstd=rstd dout=dxn dx=dx dgamma=d.final_norm rows=%d cols=%d ldx=%d ldo=%d divisor=%d acc=0 phase=0\n", M, d, d, d, d);
    fprintf(f, "kernel embedding_bwd name=eb grid=1 block=1 smem=0 tokens=tokens dout=dx dtable=d.embed rows=%d cols=%d vocab=%d\n", M, d, TINY_V);
    fprintf(f, "section optimizer\noptimizer adamw\n");
    return fclose(f) ? -1 : 0;
}

#endif
