-- b200: NVIDIA B200 (Blackwell, HGX/DGX B200 board at 1,000 W) in 8-GPU nodes, one 400 Gb/s NIC per GPU.
-- Sources: NVIDIA HGX B200 / DGX B200 datasheets for bf16 (4.5 PFLOP/s with 2:4 sparsity per GPU,
-- so 2,250 dense), memory (DGX B200: 1,440 GB for 8 GPUs = 180 GB each), HBM (64 TB/s for 8 = 8,000
-- GB/s each), NVLink 5 (1.8 TB/s total a GPU = 900 GB/s per direction) and the network (8 ConnectX-7
-- at 400 Gb/s). ASSUMED, not datasheet values: sm_count (148, as reported by the CUDA device query
-- of shipping parts), the latencies (the H100's rough alpha-beta figures: replace with measurements)
-- and the tuning table (the H100's, never autotuned on a B200: run `boost tune` there).
return gpu "b200" {
  arch = "sm_100",           -- "sm_100a" for the arch-specific features (tcgen05, TMEM)
  -- the arch's limits (CUDA C Programming Guide, "Compute capabilities", CC 10.0)
  smem_block_kib = 227,      -- opt-in shared memory a block
  smem_sm_kib = 228,         -- shared memory of an SM usable by blocks
  regs_sm = 65536, threads_sm = 2048, blocks_sm = 32,
  kernel_report = false,     -- true adds an sm_100 column to every report's kernel table
  sm_count = 148,            -- assumed (see above)
  bf16_tflops = 2250,
  hbm_gbs = 8000,
  nvlink_gbs = 900,
  net_gbs = 50,              -- 400 Gb/s per GPU
  nvlink_latency_us = 10,    -- assumed
  net_latency_us = 20,       -- assumed
  gpus_per_node = 8,
  memory_gb = 180,
  tune = { row_block = 256, elem_block = 256, attn_block_q = 64, attn_block_k = 64 },  -- assumed
}
