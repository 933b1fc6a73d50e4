-- 6 heads cannot be split over 4 ranks.
-- expect-at: 10
-- expect: heads (6) | divisible by tp (4) | tp can be 1, 2
return run {
  model = model "six-heads" {
    hidden = 192, layers = 2, heads = 6, ffn = 352, vocab = 256,
    lowrank = cola { rank = 32 },
  },
  parallel = {
    tp = 4,
  },
}
