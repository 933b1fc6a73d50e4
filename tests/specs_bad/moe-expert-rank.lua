-- The experts' ffn is narrower than the MLP rank.
-- expect-at: 7
-- expect: rank 32 | 'gate' in layer 0 | min(hidden, expert_ffn) = 16
return run {
  model = model "m" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },
    moe = moe { experts = 4, top_k = 2, expert_ffn = 16 },
  },
}
