-- A flag given as a string.
-- expect-at: 6
-- expect: online_rmsnorm must be true or false | "yes"
return run {
  model = "tiny-cola",
  features = { online_rmsnorm = "yes" },
}
