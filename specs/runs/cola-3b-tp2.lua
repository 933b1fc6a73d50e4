-- cola-3b-tp2: CoLA LLaMA-3B on two A100s (the paper's table: TP2).
return run {
  model = "cola-llama-3b",
  gpu = "a100",
  parallel = { tp = 2, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = { micro_batch = 4, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
