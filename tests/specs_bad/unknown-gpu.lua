-- A GPU without a spec.
-- expect-at: 6
-- expect: unknown gpu 'x900' | known: a100, b200, h100, h200
return run {
  model = "tiny-cola",
  gpu = "x900",
}
