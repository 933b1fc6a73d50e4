-- MoE experts are low-rank; a full-rank model cannot take them.
-- expect-at: 7
-- expect: moe experts are low-rank | family full
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    moe = moe { experts = 4, top_k = 2 },
  },
}
