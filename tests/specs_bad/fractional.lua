-- Layers come whole.
-- expect-at: 6
-- expect: layers must be an integer from 1 to 256 | got 2.5
return run {
  model = model "m" {
    hidden = 128, layers = 2.5, heads = 4, ffn = 352, vocab = 256,
    lowrank = cola { rank = 32 },
  },
}
