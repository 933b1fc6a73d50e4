-- h100-8x: nodes of 8 x H100 SXM (80 GB) joined by NVLink 4 / NVSwitch, one 400 Gb/s NIC per GPU
-- (50 GB/s) across nodes, as in DGX H100 pods. Latencies are the GPU file's.
return cluster "h100-8x" {
  gpu = "h100",
  gpus_per_node = 8,
  nvlink_gbs = 450,          -- per GPU per direction (900 GB/s total)
  net_gbs = 50,
  memory_gb = 80,
}
