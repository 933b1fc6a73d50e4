-- llama-1b: LLaMA-2-style 1b shapes, full rank (dense projections, SwiGLU MLP).
return model "llama-1b" {
  hidden = 2048, layers = 24, heads = 32, ffn = 5472, vocab = 32000,
  lowrank = full {},
}
