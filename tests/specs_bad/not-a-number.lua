-- 0/0 is not a learning rate.
-- expect-at: 6
-- expect: lr must be a number > 0 | nan
return run {
  model = "tiny-cola",
  train = { lr = 0/0 },
}
