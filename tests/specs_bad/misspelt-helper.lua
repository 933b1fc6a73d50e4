-- A misspelt helper name gets a suggestion.
-- expect-at: 6
-- expect: undeclared global 'cloa' | did you mean 'cola'?
return run {
  model = model "m" { hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = cloa { rank = 32 } },
}
