-- lowrank must be one of the factor helpers.
-- expect-at: 7
-- expect: lowrank must be cola{rank=}, svd{rank=}, lax{rank=} or full{} | "cola"
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = "cola",
  },
}
