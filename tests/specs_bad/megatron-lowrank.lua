-- Megatron's layout on a low-rank model.
-- expect-at: 7
-- expect: layout megatron needs a full-rank model | use layout "btp"
return run {
  model = "tiny-cola",
  parallel = { tp = 2,
    layout = "megatron" },
}
