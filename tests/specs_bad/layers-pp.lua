-- 2 layers cannot be split into 4 pipeline stages.
-- expect-at: 6
-- expect: layers (2) must be divisible by pp (4)
return run {
  model = "tiny-cola",
  parallel = { pp = 4 },
}
