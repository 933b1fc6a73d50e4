-- cola-moe-7b-shared: cola-moe-7b with the experts' gate/up A and down B shared per layer (rank-r
-- dispatch: each token projected to its 2048-wide gate/up latent once, combined at rank 1024).
return model "cola-moe-7b-shared" {
  hidden = 4096, layers = 32, heads = 32, ffn = 11008, vocab = 32000,
  lowrank = cola { rank = 1024 },
  moe = moe { experts = 8, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01, every = 2, expert_ffn = 5504,
              shared = {"gate.A", "up.A", "down.B"} },
}
