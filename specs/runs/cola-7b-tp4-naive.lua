-- cola-7b-tp4-naive: CoLA LLaMA-7B with Megatron's split applied inside each factor (the naive layout BTP improves on).
return run {
  model = "cola-llama-7b",
  gpu = "a100",
  parallel = { tp = 4, pp = 1, dp = 1, layout = "naive" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 4, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
