-- A run file that builds a run but does not return it.
-- expect-at: 1
-- expect: a run spec must end with: return run
local r = run { model = "tiny-cola" }
