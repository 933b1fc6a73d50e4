-- tiny-usv: like tiny-cola, with the tiny-usv model (U S V^T factors, btp only).
return run {
  model = "tiny-usv",
  gpu = "h100",
  parallel = { tp = 2, pp = 1, dp = 1, layout = "btp" },
  features = { online_rmsnorm = true, group_linears = true, checkpoint = "lowrank" },
  train = {
    micro_batch = 4, seq = 64, grad_accum = 1, dtype = "bf16",
    lr = 3e-3, min_lr = 3e-4, warmup = 20, steps = 200,
    beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8, weight_decay = 0.1, clip = 1.0,
    seed = 1234, eval_every = 50,
  },
  data = { path = "corpus", val_fraction = 0.1 },
}
