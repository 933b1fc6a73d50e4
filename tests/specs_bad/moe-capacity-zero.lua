-- A capacity factor of zero leaves the experts no token slots.
-- expect-at: 8
-- expect: capacity_factor must be | got 0
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },
    moe = moe {
      experts = 4, top_k = 2, capacity_factor = 0,
    },
  },
}
