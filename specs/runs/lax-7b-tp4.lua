-- lax-7b-tp4: CoLA+LaX LLaMA-7B on a 4xA100 node with bottleneck-aware TP.
return run {
  model = "lax-llama-7b",
  gpu = "a100",
  parallel = { tp = 4, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = { micro_batch = 4, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
