-- tiny-cola-pp2: the paper's tp4 x pp2 grid at toy size: tiny-cola-4l over two pipeline stages of
-- four tensor-parallel ranks each, 1F1B over four micro-batches.
return run {
  model = "tiny-cola-4l",
  gpu = "h100",
  parallel = { tp = 4, pp = 2, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = {
    micro_batch = 2, seq = 32, grad_accum = 4, dtype = "bf16",
    lr = 3e-3, min_lr = 3e-4, warmup = 20, steps = 200,
    seed = 1234, eval_every = 50,
  },
  data = { path = "corpus", val_fraction = 0.1 },
}
