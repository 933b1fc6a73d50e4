-- A gradient bucket of 0 MB would issue no bucket at all.
-- expect-at: 6
-- expect: dp_bucket_mb
return run {
  model = "tiny-cola",
  parallel = { tp = 1, dp = 2, dp_bucket_mb = 0 },
}
