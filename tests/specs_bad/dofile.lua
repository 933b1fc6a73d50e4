-- Specs cannot run other files.
-- expect-at: 4
-- expect: 'dofile' is not available in specs
dofile("specs/runs/tiny-cola.lua")
return run { model = "tiny-cola" }
