-- An explicit pipeline split that leaves a stage without layers.
-- expect-at: 6
-- expect: stages[2] is 0: every pipeline stage needs at least one layer
return run {
  model = "tiny-cola-4l",
  parallel = { pp = 2, stages = {4, 0} },
  train = { grad_accum = 4 },
}
