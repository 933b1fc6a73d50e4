-- llama-130m: LLaMA-2-style 130m shapes, full rank (dense projections, SwiGLU MLP).
return model "llama-130m" {
  hidden = 768, layers = 12, heads = 12, ffn = 2048, vocab = 32000,
  lowrank = full {},
}
