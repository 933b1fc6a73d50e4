-- 1F1B over fewer micro-batches than stages.
-- expect-at: 7
-- expect: grad_accum (2) is less than pp (4)
return run {
  model = "tiny-cola-4l",
  parallel = { pp = 4 },
  train = { grad_accum = 2 },
}
