-- llama-350m: LLaMA-2-style 350m shapes, full rank (dense projections, SwiGLU MLP).
return model "llama-350m" {
  hidden = 1024, layers = 24, heads = 16, ffn = 2736, vocab = 32000,
  lowrank = full {},
}
