-- An MoE block with no experts.
-- expect-at: 7
-- expect: experts must be | got 0
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },
    moe = moe { experts = 0, top_k = 1 },
  },
}
