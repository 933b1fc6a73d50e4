-- tiny-cola-moe: tiny-cola with a mixture of 4 low-rank experts (top-2) in every layer's MLP,
-- for tests and the MoE demo. The experts use the MLP ranks (32) and a narrower ffn.
return model "tiny-cola-moe" {
  hidden = 128, layers = 2, heads = 4, kv_heads = 4, ffn = 352, vocab = 256,
  lowrank = cola { rank = 32 },
  moe = moe { experts = 4, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01, every = 1, expert_ffn = 192 },
}
