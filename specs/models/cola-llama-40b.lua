-- cola-llama-40b: LLaMA-2-style 40b shapes; every projection is CoLA, A -> SiLU -> B, rank d/4.
return model "cola-llama-40b" {
  hidden = 8192, layers = 48, heads = 64, ffn = 22016, vocab = 32000,
  lowrank = cola { rank = 2048 },
}
