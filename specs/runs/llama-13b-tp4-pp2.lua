-- llama-13b-tp4-pp2: full-rank LLaMA-13B on two 4xA100 nodes (TP4, PP2).
return run {
  model = "llama-13b",
  gpu = "a100",
  parallel = { tp = 4, pp = 2, dp = 1, layout = "megatron" },
  features = { online_rmsnorm = false, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 4, grad_accum = 8, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
