-- perlmutter: nodes of 4 x A100 (80 GB) joined by NVLink, four 200 Gb/s Slingshot NICs per node
-- (25 GB/s per GPU): the machine of the paper's multi-node runs (reference/boost-paper.md). The
-- same figures as specs/gpus/a100.lua, so plans here price as `boost project ... -D gpu=a100` does.
return cluster "perlmutter" {
  gpu = "a100",
  gpus_per_node = 4,
  nvlink_gbs = 300,
  net_gbs = 25,
  memory_gb = 80,
}
