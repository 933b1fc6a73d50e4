-- ffn 350 cannot be split over 4 ranks.
-- expect-at: 9
-- expect: ffn (350) | divisible by tp (4) | tp can be 1, 2
return run {
  model = model "odd-ffn" {
    hidden = 128, layers = 2, heads = 4, ffn = 350, vocab = 256,
    lowrank = cola { rank = 32 },
  },
  parallel = { tp = 4, layout = "btp" },
}
