-- llama-7b-tp4: full-rank LLaMA-7B on one 4xA100 node with Megatron TP (the baseline of cola-7b-tp4).
return run {
  model = "llama-7b",
  gpu = "a100",
  parallel = { tp = 4, pp = 1, dp = 1, layout = "megatron" },
  features = { online_rmsnorm = false, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 4, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
