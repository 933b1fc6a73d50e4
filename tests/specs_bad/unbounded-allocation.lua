-- A table that grows without end.
-- expect-at: 6
-- expect: spec uses more than 64 MiB of memory
local t, i = {}, 0
while true do
  i = i + 1; t[i] = string.rep("x", 64) .. i
end
return run { model = "tiny-cola" }
