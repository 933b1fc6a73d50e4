-- The 'every' function must say true or false per layer.
-- expect-at: 8
-- expect: 'every' function returned | layer 0 | true or false
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },
    moe = moe { experts = 4, top_k = 2,
      every = function(layer) return layer end },
  },
}
