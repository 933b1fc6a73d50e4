-- Low-rank checkpointing needs low-rank tensors.
-- expect-at: 6
-- expect: checkpoint "lowrank" needs a low-rank model
return run {
  model = "tiny-llama",
  features = { checkpoint = "lowrank" },
}
