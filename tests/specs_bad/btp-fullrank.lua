-- The bottleneck layout on a full-rank model.
-- expect-at: 6
-- expect: layout btp | full-rank | use layout "megatron"
return run {
  model = "tiny-llama",
  parallel = { layout = "btp" },
}
