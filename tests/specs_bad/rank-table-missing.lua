-- A rank table that forgets the MLP.
-- expect-at: 7
-- expect: rank table gives no rank for 'gate' | mlp =
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = cola { rank = { attn = 32 } },
  },
}
