-- llama-40b: LLaMA-2-style 40b shapes, full rank (dense projections, SwiGLU MLP).
return model "llama-40b" {
  hidden = 8192, layers = 48, heads = 64, ffn = 22016, vocab = 32000,
  lowrank = full {},
}
