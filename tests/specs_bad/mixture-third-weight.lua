-- A data mixture whose third source has a weight of 0: the message names that source's line.
-- expect-at: 10
-- expect: weight must be a number > 0
return run {
  model = "tiny-cola",
  data = {
    sources = {
      { path = "corpus", weight = 2 },
      { path = "README.md", weight = 1 },
      { path = "corpus", weight = 0 },
    },
  },
}
