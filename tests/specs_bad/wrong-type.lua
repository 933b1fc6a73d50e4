-- A number written as a string.
-- expect-at: 7
-- expect: seq must be an integer | got the string "64"
return run {
  model = "tiny-cola",
  train = {
    seq = "64",
  },
}
