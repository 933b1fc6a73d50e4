-- A loop that never ends.
-- expect-at: 5
-- expect: spec runs too long | infinite loop
local n = 0
while true do n = n + 1 end
return run { model = "tiny-cola" }
