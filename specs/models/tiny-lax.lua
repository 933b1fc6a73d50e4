-- tiny-lax: a tiny model for tests and the demo: CoLA factors with LaX latent crossings, rank 32.
return model "tiny-lax" {
  hidden = 128, layers = 2, heads = 4, kv_heads = 4, ffn = 352, vocab = 256,
  lowrank = lax { rank = 32, base = "cola" },
}
