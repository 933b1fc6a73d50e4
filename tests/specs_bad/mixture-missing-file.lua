-- A mixture source matching no file.
-- expect-at: 8
-- expect: data.sources[2]: no-such-data-*.txt matches no file
return run {
  model = "tiny-cola",
  data = { sources = {
    { path = "corpus", weight = "1" == "1" and 1 or 2 },
    { path = "no-such-data-*.txt", weight = 1 },
  } },
}
