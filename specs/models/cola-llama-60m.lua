-- cola-llama-60m: LLaMA-2-style 60m shapes; every projection is CoLA, A -> SiLU -> B, rank d/4.
return model "cola-llama-60m" {
  hidden = 512, layers = 8, heads = 8, ffn = 1376, vocab = 32000,
  lowrank = cola { rank = 128 },
}
