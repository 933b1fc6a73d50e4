-- polaris: an ALCF-Polaris-like cluster: nodes of 4 x A100 (40 GB) joined by NVLink, two 200 Gb/s
-- Slingshot NICs per node (12.5 GB/s per GPU across nodes). Figures the cluster leaves out
-- (latencies) are the GPU file's. Used by `boost plan --cluster polaris`.
return cluster "polaris" {
  gpu = "a100",
  gpus_per_node = 4,
  nvlink_gbs = 300,          -- per GPU per direction (NVLink 3, 600 GB/s total)
  net_gbs = 12.5,            -- 2 x 200 Gb/s per node, shared by 4 GPUs
  memory_gb = 40,
}
