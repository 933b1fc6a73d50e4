-- The debug library is absent.
-- expect-at: 4
-- expect: 'debug' is not available in specs
local info = debug.getinfo(1)
return run { model = "tiny-cola" }
