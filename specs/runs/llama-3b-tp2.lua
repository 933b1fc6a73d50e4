-- llama-3b-tp2: full-rank LLaMA-3B on two A100s with Megatron TP.
return run {
  model = "llama-3b",
  gpu = "a100",
  parallel = { tp = 2, pp = 1, dp = 1, layout = "megatron" },
  features = { online_rmsnorm = false, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 4, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
