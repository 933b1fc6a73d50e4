-- A model whose hidden size does not split into its heads (used by model-file-error.lua).
return model "bad-heads" {
  hidden = 100, layers = 2,
  heads = 3, ffn = 352, vocab = 256,
  lowrank = cola { rank = 16 },
}
