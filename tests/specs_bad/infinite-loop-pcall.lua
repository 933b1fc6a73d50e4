-- pcall cannot swallow the instruction limit.
-- expect-at: 4
-- expect: spec runs too long
local function spin() while true do end end
while true do pcall(spin) end
return run { model = "tiny-cola" }
