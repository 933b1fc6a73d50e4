-- h200: NVIDIA H200 SXM 141GB in 8-GPU nodes (one 400 Gb/s NIC per GPU).
-- Compute, memory, HBM and NVLink figures are NVIDIA datasheet values (dense bf16 without
-- sparsity; NVLink 900 GB/s total = 450 GB/s per direction). Latencies are rough small-message
-- NCCL all-reduce figures for the alpha-beta model, not datasheet values: replace with measurements.
return gpu "h200" {
  arch = "sm_90",
  sm_count = 132,
  bf16_tflops = 989,
  hbm_gbs = 4800,
  nvlink_gbs = 450,
  net_gbs = 50,              -- 400 Gb/s per GPU
  nvlink_latency_us = 10,
  net_latency_us = 20,
  gpus_per_node = 8,
  memory_gb = 141,
  tune = { row_block = 256, elem_block = 256, attn_block_q = 64, attn_block_k = 64 },
}
