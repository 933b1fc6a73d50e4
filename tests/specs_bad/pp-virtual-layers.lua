-- Interleaved 1F1B with chunks that do not divide the layers per stage (4 layers, pp=2, 4 chunks each).
-- expect-at: 6
-- expect: virtual_stages (4) must divide the layers per stage
return run {
  model = "tiny-cola-4l",
  parallel = { pp = 2, virtual_stages = 4 },
  train = { grad_accum = 4 },
}
