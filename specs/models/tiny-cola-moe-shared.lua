-- tiny-cola-moe-shared: tiny-cola-moe with the experts' gate/up A and down B shared by the 4 experts
-- of a layer, so each token is projected to its rank-32 latent once and dispatched in rank space.
return model "tiny-cola-moe-shared" {
  hidden = 128, layers = 2, heads = 4, kv_heads = 4, ffn = 352, vocab = 256,
  lowrank = cola { rank = 32 },
  moe = moe { experts = 4, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01, every = 1, expert_ffn = 192,
              shared = {"gate.A", "up.A", "down.B"} },
}
