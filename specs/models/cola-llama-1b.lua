-- cola-llama-1b: LLaMA-2-style 1b shapes; every projection is CoLA, A -> SiLU -> B, rank d/4.
return model "cola-llama-1b" {
  hidden = 2048, layers = 24, heads = 32, ffn = 5472, vocab = 32000,
  lowrank = cola { rank = 512 },
}
