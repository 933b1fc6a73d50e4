-- cola-llama-130m: LLaMA-2-style 130m shapes; every projection is CoLA, A -> SiLU -> B, rank d/4.
return model "cola-llama-130m" {
  hidden = 768, layers = 12, heads = 12, ffn = 2048, vocab = 32000,
  lowrank = cola { rank = 256 },
}
