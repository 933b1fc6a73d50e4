-- A spec's own error() call keeps its line.
-- expect-at: 5
-- expect: ranks above 64 are not allowed here
local rank = 128
if rank > 64 then error("ranks above 64 are not allowed here") end
return run { model = "tiny-cola" }
