-- A mixture source without a file: the message names its line.
-- expect-at: 9
-- expect: source needs path
return run {
  model = "tiny-cola",
  data = {
    sources = {
      { path = "corpus", weight = 1 },
      { weight = 1 },   -- { a brace in a comment is not an item }
    },
  },
}
