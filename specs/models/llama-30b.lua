-- llama-30b: LLaMA-2-style 30b shapes, full rank (dense projections, SwiGLU MLP).
return model "llama-30b" {
  hidden = 8192, layers = 36, heads = 64, ffn = 22016, vocab = 32000,
  lowrank = full {},
}
