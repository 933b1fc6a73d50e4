-- One enormous string.
-- expect-at: 4
-- expect: spec uses more than 64 MiB of memory
local s = string.rep("x", 1 << 30)
return run { model = "tiny-cola" }
