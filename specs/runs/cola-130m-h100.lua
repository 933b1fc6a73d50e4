-- cola-130m-h100: CoLA LLaMA-130M on a single H100.
return run {
  model = "cola-llama-130m",
  gpu = "h100",
  parallel = { tp = 1, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 16, seq = 1024, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
