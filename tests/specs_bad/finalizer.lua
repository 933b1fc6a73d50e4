-- Finalizers run outside the instruction limit, so specs cannot set them.
-- expect-at: 4
-- expect: '__gc' metamethods are not available in specs
setmetatable({}, { __gc = function() while true do end end })
return run { model = "tiny-cola" }
