-- cola-30b-tp4-pp4: CoLA LLaMA-30B on four 4xA100 nodes (the paper's table: TP4, PP4).
return run {
  model = "cola-llama-30b",
  gpu = "a100",
  parallel = { tp = 4, pp = 4, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = { micro_batch = 4, grad_accum = 16, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
