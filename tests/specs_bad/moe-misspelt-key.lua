-- A misspelt key in moe{}.
-- expect-at: 7
-- expect: unknown key 'expers' in moe | did you mean 'experts'
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },
    moe = moe { expers = 4, top_k = 2 },
  },
}
