-- A pattern that would backtrack for hours inside C, where the instruction limit cannot see.
-- expect-at: 5
-- expect: pattern '.-.-.-.-b' with 4 repetitions on 30000 characters | backtrack
local s = string.rep("a", 30000)
local found = s:find(".-.-.-.-b")
return run { model = "tiny-cola" }
