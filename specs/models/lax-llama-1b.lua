-- lax-llama-1b: LLaMA-2-style 1b shapes; CoLA factors plus LaX latent crossings (each B
-- also takes the previous projection's rank-r latent), rank d/4 everywhere.
return model "lax-llama-1b" {
  hidden = 2048, layers = 24, heads = 32, ffn = 5472, vocab = 32000,
  lowrank = lax { rank = 512, base = "cola" },
}
