-- 2 kv heads cannot be split over 4 ranks.
-- expect-at: 9
-- expect: kv_heads (2) | divisible by tp (4) | tp can be 1, 2
return run {
  model = model "gqa" {
    hidden = 256, layers = 2, heads = 8, kv_heads = 2, ffn = 352, vocab = 256,
    lowrank = cola { rank = 32 },
  },
  parallel = { tp = 4 },
}
