-- cola-moe-1b: cola-llama-1b's shapes with a mixture of 8 CoLA experts (top-2) in every other
-- layer's MLP; each expert is half the dense MLP's width, so a token's two experts cost about one
-- dense MLP. The experts use the MLP rank (512).
return model "cola-moe-1b" {
  hidden = 2048, layers = 24, heads = 32, ffn = 5472, vocab = 32000,
  lowrank = cola { rank = 512 },
  moe = moe { experts = 8, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01, every = 2, expert_ffn = 2736 },
}
