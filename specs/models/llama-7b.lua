-- llama-7b: LLaMA-2-style 7b shapes, full rank (dense projections, SwiGLU MLP).
return model "llama-7b" {
  hidden = 4096, layers = 32, heads = 32, ffn = 11008, vocab = 32000,
  lowrank = full {},
}
