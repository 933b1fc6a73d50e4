-- An explicit pipeline split whose stages do not add up to the model's layers.
-- expect-at: 6
-- expect: stages sum to 5 layers, but model tiny-cola-4l has 4
return run {
  model = "tiny-cola-4l",
  parallel = { pp = 2, stages = {3, 2} },
  train = { grad_accum = 4 },
}
