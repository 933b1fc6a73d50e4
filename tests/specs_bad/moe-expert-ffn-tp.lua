-- The experts' ffn must split evenly over the tensor-parallel ranks.
-- expect-at: 9
-- expect: experts' ffn (190) | divisible by tp (4)
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },
    moe = moe { experts = 4, top_k = 2, expert_ffn = 190 },
  },
  parallel = { tp = 4 },
}
