-- vocab 250 cannot be split over 4 ranks.
-- expect-at: 9
-- expect: vocab (250) | divisible by tp (4)
return run {
  model = model "odd-vocab" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 250,
    lowrank = cola { rank = 32 },
  },
  parallel = { tp = 4 },
}
