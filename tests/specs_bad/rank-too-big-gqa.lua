-- With 2 of 4 kv heads, k and v map 128 -> 64, so rank 96 fits q but not k.
-- expect-at: 7
-- expect: rank 96 of 'k' | min(128, 64) = 64
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, kv_heads = 2, ffn = 352, vocab = 256,
    lowrank = cola { rank = 96 },
  },
}
