-- svd-1b-h200: SVD-factored LLaMA-1B on a single H200.
return run {
  model = "svd-llama-1b",
  gpu = "h200",
  parallel = { tp = 1, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = { micro_batch = 4, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
