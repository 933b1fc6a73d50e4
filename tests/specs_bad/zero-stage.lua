-- ZeRO stage 2 does not exist here (0 or 1).
-- expect-at: 6
-- expect: zero | from 0 to 1
return run {
  model = "tiny-cola",
  parallel = { tp = 1, dp = 2, zero = 2 },
}
