-- tiny-cola: a tiny model for tests and the demo: CoLA factors, rank 32.
return model "tiny-cola" {
  hidden = 128, layers = 2, heads = 4, kv_heads = 4, ffn = 352, vocab = 256,
  lowrank = cola { rank = 32 },
}
