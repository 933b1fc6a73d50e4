-- tiny-llama: a tiny model for tests and the demo: full rank.
return model "tiny-llama" {
  hidden = 128, layers = 2, heads = 4, kv_heads = 4, ffn = 352, vocab = 256,
  lowrank = full {},
}
