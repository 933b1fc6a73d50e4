// moe_aux_add: loss[0] += aux[0] (an MoE layer's load-balance loss joins the model's loss). One thread.
extern "C" __global__ void __launch_bounds__({{BLOCK}})
{{NAME}}(const {{T_AUX}} *aux, {{T_LOSS}} *loss{{RANK_ARGS}}) {
    if (threadIdx.x == 0 && blockIdx.x == 0) st(loss, ld(loss) + ld(aux));
}
