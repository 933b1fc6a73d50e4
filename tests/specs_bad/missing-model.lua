-- A run must name its model.
-- expect-at: 4
-- expect: run needs model
return run {
  gpu = "h100",
}
