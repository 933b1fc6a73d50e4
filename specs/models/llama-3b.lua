-- llama-3b: LLaMA-2-style 3b shapes, full rank (dense projections, SwiGLU MLP).
return model "llama-3b" {
  hidden = 3072, layers = 28, heads = 24, ffn = 8192, vocab = 32000,
  lowrank = full {},
}
