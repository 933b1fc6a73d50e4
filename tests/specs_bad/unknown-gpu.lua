-- A GPU without a spec.
-- expect-at: 6
-- expect: unknown gpu 'b200' | known: a100, h100, h200
return run {
  model = "tiny-cola",
  gpu = "b200",
}
