-- Specs cannot run programs.
-- expect-at: 4
-- expect: 'os' is not available in specs | specs are data
os.execute("touch /tmp/boost-spec-escape")
return run { model = "tiny-cola" }
