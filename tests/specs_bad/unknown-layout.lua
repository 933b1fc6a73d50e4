-- A layout that does not exist.
-- expect-at: 6
-- expect: layout must be one of megatron, naive, btp | "zigzag"
return run {
  model = "tiny-cola",
  parallel = { tp = 2, layout = "zigzag" },
}
