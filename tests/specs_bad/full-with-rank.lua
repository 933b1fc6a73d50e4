-- full{} takes no rank.
-- expect-at: 7
-- expect: unknown key 'rank' in full{} | no fields
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256,
    lowrank = full { rank = 32 },
  },
  parallel = { layout = "megatron" },
}
