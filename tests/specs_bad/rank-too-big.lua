-- A rank wider than the projection it factors.
-- expect-at: 8
-- expect: rank 200 of 'q' | larger than min(d_in, d_out) = min(128, 128) = 128
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = cola {
      rank = 200,
    },
  },
}
