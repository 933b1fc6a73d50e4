-- The model comes from a file; the error points into that file.
-- expect-at: models/bad-heads.lua:4
-- expect: hidden (100) must be divisible by heads (3)
return run {
  model = "models/bad-heads.lua",
}
