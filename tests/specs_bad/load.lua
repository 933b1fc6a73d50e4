-- Specs cannot compile code at run time.
-- expect-at: 4
-- expect: 'load' is not available in specs
local f = load("return 1")
return run { model = "tiny-cola" }
