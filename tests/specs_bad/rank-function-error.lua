-- A rank function that fails inside: the error points into the function.
-- expect-at: 9
-- expect: attempt to add a 'number' with a 'string' | in the rank function, called for layer 0, 'q'
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = cola {
      rank = function(layer, proj)
        return layer + proj
      end,
    },
  },
}
