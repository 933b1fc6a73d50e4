-- tiny-cola-4l: tiny-cola with 4 layers, for the pipeline tests (pp=2 and pp=4 at toy size).
return model "tiny-cola-4l" {
  hidden = 128, layers = 4, heads = 4, kv_heads = 4, ffn = 352, vocab = 256,
  lowrank = cola { rank = 32 },
}
