-- Specs cannot load modules.
-- expect-at: 4
-- expect: 'require' is not available in specs
local json = require("json")
return run { model = "tiny-cola" }
