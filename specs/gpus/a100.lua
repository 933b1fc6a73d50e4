-- a100: NVIDIA A100 SXM4 80GB, as in 4-GPU nodes (one 200 Gb/s NIC per GPU).
-- Compute, memory, HBM and NVLink figures are NVIDIA datasheet values (dense bf16 without
-- sparsity; NVLink 600 GB/s total = 300 GB/s per direction). Latencies are rough small-message
-- NCCL all-reduce figures for the alpha-beta model, not datasheet values: replace with measurements.
return gpu "a100" {
  arch = "sm_80",
  -- the arch's limits (CUDA C Programming Guide, "Compute capabilities", CC 8.0)
  smem_block_kib = 163,       -- opt-in shared memory a block
  smem_sm_kib = 164,          -- shared memory of an SM usable by blocks
  regs_sm = 65536, threads_sm = 2048, blocks_sm = 32,
  kernel_report = true,      -- every report's kernel table compiles for this arch
  sm_count = 108,
  bf16_tflops = 312,
  hbm_gbs = 2039,
  nvlink_gbs = 300,
  net_gbs = 25,              -- 200 Gb/s per GPU
  nvlink_latency_us = 10,
  net_latency_us = 20,
  gpus_per_node = 4,
  memory_gb = 80,
  tune = { row_block = 256, elem_block = 256, attn_block_q = 64, attn_block_k = 64 },
}
