-- llama-60m: LLaMA-2-style 60m shapes, full rank (dense projections, SwiGLU MLP).
return model "llama-60m" {
  hidden = 512, layers = 8, heads = 8, ffn = 1376, vocab = 32000,
  lowrank = full {},
}
