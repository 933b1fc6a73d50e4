-- A value without a key.
-- expect-at: 4
-- expect: positional or non-string key | name = value
return run {
  "tiny-cola",
}
