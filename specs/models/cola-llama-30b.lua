-- cola-llama-30b: LLaMA-2-style 30b shapes; every projection is CoLA, A -> SiLU -> B, rank d/4.
return model "cola-llama-30b" {
  hidden = 8192, layers = 36, heads = 64, ffn = 22016, vocab = 32000,
  lowrank = cola { rank = 2048 },
}
