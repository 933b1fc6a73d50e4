-- tiny-cola-gqa: a tiny model for tests and the demo: CoLA factors, rank 32, grouped-query attention (2 kv heads).
return model "tiny-cola-gqa" {
  hidden = 128, layers = 2, heads = 4, kv_heads = 2, ffn = 352, vocab = 256,
  lowrank = cola { rank = 32 },
}
