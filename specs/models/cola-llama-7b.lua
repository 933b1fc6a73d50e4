-- cola-llama-7b: LLaMA-2-style 7b shapes; every projection is CoLA, A -> SiLU -> B, rank d/4.
return model "cola-llama-7b" {
  hidden = 4096, layers = 32, heads = 32, ffn = 11008, vocab = 32000,
  lowrank = cola { rank = 1024 },
}
