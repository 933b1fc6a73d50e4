-- A missing comma between two fields.
-- expect-at: 6
-- expect: '}' expected | near 'gpu'
return run {
  model = "tiny-cola"
  gpu = "h100",
}
