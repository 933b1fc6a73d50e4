-- Attention tiles must be powers of two.
-- expect-at: 7
-- expect: attn_block_q must be a power of two | got 48
return run {
  model = "tiny-cola",
  gpu = gpu "test-gpu" { arch = "sm_90", sm_count = 132, bf16_tflops = 989, hbm_gbs = 3350, nvlink_gbs = 450,
    net_gbs = 50, memory_gb = 80, tune = { attn_block_q = 48 } },
}
