-- tiny-svd: a tiny model for tests and the demo: SVD factors (no bottleneck activation), rank 32.
return model "tiny-svd" {
  hidden = 128, layers = 2, heads = 4, kv_heads = 4, ffn = 352, vocab = 256,
  lowrank = svd { rank = 32 },
}
