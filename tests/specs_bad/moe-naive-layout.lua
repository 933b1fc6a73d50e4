-- Experts that share factors (rank-r dispatch) exist only in the bottleneck-aware layout.
-- expect-at: 9
-- expect: shares expert factors | layout "btp" only
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },
    moe = moe { experts = 4, top_k = 2, shared = {"gate.A", "down.B"} },
  },
  parallel = { tp = 2, layout = "naive" },
}
