-- llama-13b: LLaMA-2-style 13b shapes, full rank (dense projections, SwiGLU MLP).
return model "llama-13b" {
  hidden = 5120, layers = 40, heads = 40, ffn = 13824, vocab = 32000,
  lowrank = full {},
}
