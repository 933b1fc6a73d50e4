-- h100: NVIDIA H100 SXM5 80GB in 8-GPU nodes (one 400 Gb/s NIC per GPU).
-- Compute, memory, HBM and NVLink figures are NVIDIA datasheet values (dense bf16 without
-- sparsity; NVLink 900 GB/s total = 450 GB/s per direction). Latencies are rough small-message
-- NCCL all-reduce figures for the alpha-beta model, not datasheet values: replace with measurements.
return gpu "h100" {
  arch = "sm_90",
  -- the arch's limits (CUDA C Programming Guide, "Compute capabilities", CC 9.0)
  smem_block_kib = 227,       -- opt-in shared memory a block
  smem_sm_kib = 228,          -- shared memory of an SM usable by blocks
  regs_sm = 65536, threads_sm = 2048, blocks_sm = 32,
  kernel_report = true,      -- every report's kernel table compiles for this arch
  sm_count = 132,
  bf16_tflops = 989,
  hbm_gbs = 3350,
  nvlink_gbs = 450,
  net_gbs = 50,              -- 400 Gb/s per GPU
  nvlink_latency_us = 10,
  net_latency_us = 20,
  gpus_per_node = 8,
  memory_gb = 80,
  tune = { row_block = 256, elem_block = 256, attn_block_q = 64, attn_block_k = 64 },
}
