-- heads not divisible by kv_heads.
-- expect-at: 7
-- expect: heads (4) must be divisible by kv_heads (3)
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4,
    kv_heads = 3,
    ffn = 352, vocab = 256,
    lowrank = cola { rank = 32 },
  },
}
