-- cola-llama-350m: LLaMA-2-style 350m shapes; every projection is CoLA, A -> SiLU -> B, rank d/4.
return model "cola-llama-350m" {
  hidden = 1024, layers = 24, heads = 16, ffn = 2736, vocab = 32000,
  lowrank = cola { rank = 256 },
}
