-- A misspelt key in the train table.
-- expect-at: 7
-- expect: unknown key 'micro_bach' | train | did you mean 'micro_batch'
return run {
  model = "tiny-cola",
  train = {
    micro_bach = 4,
    seq = 64,
  },
}
