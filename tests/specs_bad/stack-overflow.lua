-- Recursion without end.
-- expect-at: 4
-- expect: stack overflow
local function deeper(n) return 1 + deeper(n + 1) end
return run { model = "tiny-cola", train = { steps = deeper(0) } }
