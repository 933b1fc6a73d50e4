-- Specs cannot compile files.
-- expect-at: 4
-- expect: 'loadfile' is not available in specs
local f = loadfile("specs/runs/tiny-cola.lua")
return run { model = "tiny-cola" }
