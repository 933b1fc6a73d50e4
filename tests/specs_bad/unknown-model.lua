-- A model without a spec.
-- expect-at: 5
-- expect: unknown model 'cola-llama-8b' | cola-llama-7b
return run {
  model = "cola-llama-8b",
}
