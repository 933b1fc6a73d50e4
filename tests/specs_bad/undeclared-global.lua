-- A typo reads a global that does not exist.
-- expect-at: 6
-- expect: undeclared global 'tiny_cola' | local
return run {
  model = "tiny-cola",
  gpu = tiny_cola,
}
