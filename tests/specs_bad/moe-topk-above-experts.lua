-- An MoE block whose tokens pick more experts than there are.
-- expect-at: 7
-- expect: top_k (6) must not exceed experts (4)
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },
    moe = moe { experts = 4, top_k = 6 },
  },
}
