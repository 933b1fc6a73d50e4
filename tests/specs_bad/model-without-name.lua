-- model needs a name before its table.
-- expect-at: 5
-- expect: model needs a name first | model "my-model"
return run {
  model = model { hidden = 128 },
}
