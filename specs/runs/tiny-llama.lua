-- tiny-llama: the full-rank twin of tiny-cola (same shapes), split over two ranks the Megatron way.
return run {
  model = "tiny-llama",
  gpu = "h100",
  parallel = { tp = 2, pp = 1, dp = 1, layout = "megatron" },
  features = { online_rmsnorm = false, group_linears = true, checkpoint = "none" },
  train = {
    micro_batch = 4, seq = 64, grad_accum = 1, dtype = "bf16",
    lr = 3e-3, min_lr = 3e-4, warmup = 20, steps = 200,
    seed = 1234, eval_every = 50,
  },
  data = { path = "corpus", val_fraction = 0.1 },
}
