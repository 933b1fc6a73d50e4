-- llama-1b-h200: full-rank LLaMA-1B on a single H200.
return run {
  model = "llama-1b",
  gpu = "h200",
  parallel = { tp = 1, pp = 1, dp = 1, layout = "megatron" },
  features = { online_rmsnorm = false, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 4, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
