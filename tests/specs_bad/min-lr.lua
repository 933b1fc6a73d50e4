-- The final learning rate above the peak.
-- expect-at: 6
-- expect: min_lr (0.01) must not exceed lr (0.001)
return run {
  model = "tiny-cola",
  train = { lr = 1e-3, min_lr = 1e-2 },
}
