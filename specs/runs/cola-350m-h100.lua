-- cola-350m-h100: CoLA LLaMA-350M on a single H100.
return run {
  model = "cola-llama-350m",
  gpu = "h100",
  parallel = { tp = 1, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 8, seq = 1024, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
