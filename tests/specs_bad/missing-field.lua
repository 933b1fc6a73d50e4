-- A model without its vocabulary size.
-- expect-at: 5
-- expect: model needs vocab | vocabulary size
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352,
    lowrank = cola { rank = 32 },
  },
}
