-- lax-llama-7b: LLaMA-2-style 7b shapes; CoLA factors plus LaX latent crossings (each B
-- also takes the previous projection's rank-r latent), rank d/4 everywhere.
return model "lax-llama-7b" {
  hidden = 4096, layers = 32, heads = 32, ffn = 11008, vocab = 32000,
  lowrank = lax { rank = 1024, base = "cola" },
}
