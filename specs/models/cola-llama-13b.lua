-- cola-llama-13b: LLaMA-2-style 13b shapes; every projection is CoLA, A -> SiLU -> B, rank d/4.
return model "cola-llama-13b" {
  hidden = 5120, layers = 40, heads = 40, ffn = 13824, vocab = 32000,
  lowrank = cola { rank = 1280 },
}
