-- Specs cannot open files.
-- expect-at: 5
-- expect: 'io' is not available in specs | specs are data
return run {
  model = io.open("/etc/hostname"):read("l"),
}
