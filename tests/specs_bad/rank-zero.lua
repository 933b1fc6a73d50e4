-- A rank of zero.
-- expect-at: 7
-- expect: rank of 'q' in layer 0 is 0 | at least 1 | full{}
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = cola { rank = 0 },
  },
}
