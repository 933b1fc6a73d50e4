-- Full-rank experts (layout megatron) have no low-rank factors to share.
-- expect-at: 7
-- expect: shared factor "up.A" needs low-rank experts | full-rank
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    moe = moe { experts = 4, top_k = 2, shared = {"up.A"} },
  },
  parallel = { tp = 2, layout = "megatron" },
}
