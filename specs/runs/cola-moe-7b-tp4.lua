-- cola-moe-7b-tp4: the 7B-sized MoE (8 CoLA experts, top-2, r = d/4) on one 4xH100 node with the
-- bottleneck-aware layout; -D model=cola-moe-7b-shared for the shared-factor experts.
return run {
  model = "cola-moe-7b",
  gpu = "h100",
  parallel = { tp = 4, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = { micro_batch = 1, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
