-- A learning rate below zero.
-- expect-at: 6
-- expect: lr must be a number > 0 | got -0.001
return run {
  model = "tiny-cola",
  train = { lr = -1e-3 },
}
