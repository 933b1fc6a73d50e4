-- cola-moe-7b: cola-llama-7b's shapes (r = d/4 = 1024) with a mixture of 8 CoLA experts (top-2) in
-- every other layer's MLP; each expert is half the dense MLP's width. For the dispatch figures.
return model "cola-moe-7b" {
  hidden = 4096, layers = 32, heads = 32, ffn = 11008, vocab = 32000,
  lowrank = cola { rank = 1024 },
  moe = moe { experts = 8, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01, every = 2, expert_ffn = 5504 },
}
