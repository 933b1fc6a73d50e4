-- The module system is absent.
-- expect-at: 4
-- expect: 'package' is not available in specs
package.path = "./?.lua"
return run { model = "tiny-cola" }
