-- 2 layers cannot be split into 4 pipeline stages.
-- expect-at: 6
-- expect: pp (4) is more than the 2 layers of model tiny-cola
return run {
  model = "tiny-cola",
  parallel = { pp = 4 },
}
