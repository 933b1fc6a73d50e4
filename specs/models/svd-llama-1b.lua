-- svd-llama-1b: LLaMA-2-style 1b shapes; every projection is a plain low-rank product
-- A -> B (no activation in the bottleneck), rank d/4.
return model "svd-llama-1b" {
  hidden = 2048, layers = 24, heads = 32, ffn = 5472, vocab = 32000,
  lowrank = svd { rank = 512 },
}
