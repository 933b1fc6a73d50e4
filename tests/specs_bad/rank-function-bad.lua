-- A rank function that returns nothing for the MLP.
-- expect-at: 8
-- expect: rank function returned nil | layer 0, 'gate' | whole number
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = cola {
      rank = function(layer, proj)
        if proj == "q" or proj == "k" or proj == "v" or proj == "o" then return 32 end
      end,
    },
  },
}
