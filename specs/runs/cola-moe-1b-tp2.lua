-- cola-moe-1b-tp2: the MoE CoLA 1B on two H100s with the bottleneck-aware layout (routing
-- replicated, experts sharded on d), for the report's MoE collective figures.
return run {
  model = "cola-moe-1b",
  gpu = "h100",
  parallel = { tp = 2, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = { micro_batch = 4, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
