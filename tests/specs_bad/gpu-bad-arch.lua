-- A GPU whose arch is neither sm_NN nor sm_NNa.
-- expect-at: 7
-- expect: arch must look like | got "sm_100b"
return run {
  model = "tiny-cola",
  gpu = gpu "x900" {
    arch = "sm_100b",
    sm_count = 148, bf16_tflops = 2250, hbm_gbs = 8000, nvlink_gbs = 900, net_gbs = 50,
    memory_gb = 180, tune = {},
  },
}
