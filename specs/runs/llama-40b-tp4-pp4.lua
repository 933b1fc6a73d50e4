-- llama-40b-tp4-pp4: full-rank LLaMA-40B on four 4xA100 nodes (TP4, PP4).
return run {
  model = "llama-40b",
  gpu = "a100",
  parallel = { tp = 4, pp = 4, dp = 1, layout = "megatron" },
  features = { online_rmsnorm = false, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 4, grad_accum = 16, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
