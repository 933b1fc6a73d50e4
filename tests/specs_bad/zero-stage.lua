-- ZeRO stage 3 does not exist here (0, 1 or 2).
-- expect-at: 6
-- expect: zero | from 0 to 2
return run {
  model = "tiny-cola",
  parallel = { tp = 1, dp = 2, zero = 3 },
}
