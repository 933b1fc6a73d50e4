-- tiny-usv: a tiny model for tests: each projection U S V^T (A, identity, a dense r x r core S,
-- B), the form dynamical low-rank training (DLRT) trains; rank 32. Layout btp only.
return model "tiny-usv" {
  hidden = 128, layers = 2, heads = 4, kv_heads = 4, ffn = 352, vocab = 256,
  lowrank = usv { rank = 32 },
}
