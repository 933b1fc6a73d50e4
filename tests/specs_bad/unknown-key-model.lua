-- A misspelt key in an inline model.
-- expect-at: 6
-- expect: unknown key 'hiden' | model | did you mean 'hidden'
return run {
  model = model "m" {
    hiden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = cola { rank = 32 },
  },
}
