-- LaX adds v's latent to o's: different ranks cannot be added.
-- expect-at: 7
-- expect: LaX | 'v' | 'o' | ranks must be equal | layer 0 has 16 and 32
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = lax { rank = { q = 16, k = 16, v = 16, o = 32, mlp = 32 } },
  },
}
