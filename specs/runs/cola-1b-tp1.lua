-- cola-1b-tp1: CoLA LLaMA-1B on one A100, as in the paper's table (TP1).
return run {
  model = "cola-llama-1b",
  gpu = "a100",
  parallel = { tp = 1, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = { micro_batch = 4, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
