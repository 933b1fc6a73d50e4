-- svd-llama-7b: LLaMA-2-style 7b shapes; every projection is a plain low-rank product
-- A -> B (no activation in the bottleneck), rank d/4.
return model "svd-llama-7b" {
  hidden = 4096, layers = 32, heads = 32, ffn = 11008, vocab = 32000,
  lowrank = svd { rank = 1024 },
}
