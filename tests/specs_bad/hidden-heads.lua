-- hidden not divisible by heads.
-- expect-at: 7
-- expect: hidden (130) must be divisible by heads (4) | head_dim
return run {
  model = model "m" {
    hidden = 130, layers = 2,
    heads = 4, ffn = 352, vocab = 256,
    lowrank = cola { rank = 32 },
  },
}
