-- a100 nodes hold 4 GPUs: tp 8 would cross nodes.
-- expect-at: 7
-- expect: tp (8) is more than the 4 GPUs of one a100 node
return run {
  model = "cola-llama-7b",
  gpu = "a100",
  parallel = { tp = 8 },
}
