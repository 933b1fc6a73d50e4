-- cola-moe-7b-shared-tp4: cola-moe-7b-shared (experts sharing gate.A, up.A, down.B) on one 4xH100 node with the
-- bottleneck-aware layout: the rank-r dispatch of bench/results/2026-12-02-moe.md.
return run {
  model = "cola-moe-7b-shared",
  gpu = "h100",
  parallel = { tp = 4, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = { micro_batch = 1, seq = 4096, lr = 3e-4, min_lr = 3e-5, warmup = 100, steps = 1000 },
}
