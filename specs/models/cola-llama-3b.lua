-- cola-llama-3b: LLaMA-2-style 3b shapes; every projection is CoLA, A -> SiLU -> B, rank d/4.
return model "cola-llama-3b" {
  hidden = 3072, layers = 28, heads = 24, ffn = 8192, vocab = 32000,
  lowrank = cola { rank = 768 },
}
