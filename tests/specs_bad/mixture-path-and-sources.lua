-- A data table with both a path and a mixture's sources.
-- expect-at: 6
-- expect: data has both path and sources | drop path
return run {
  model = "tiny-cola",
  data = { path = "corpus",
    sources = { { path = "corpus", weight = 1 } },
  },
}
