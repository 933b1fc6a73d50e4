/* model.c: names of the enums in model.h, for messages, the plan and the report, and the full
 * widths of each projection. */
#include "gen/model.h"

const char *layout_name(int layout) {
    switch (layout) {
    case LAYOUT_MEGATRON: return "megatron";
    case LAYOUT_NAIVE: return "naive";
    case LAYOUT_BTP: return "btp";
    }
    return "?";
}

const char *proj_name(int proj) {
    static const char *names[NPROJ] = {"q", "k", "v", "o", "gate", "up", "down"};
    return proj >= 0 && proj < NPROJ ? names[proj] : "?";
}

int64_t proj_in(const Model *m, int p) {
    if (p == PROJ_O) return (int64_t)m->heads * m->head_dim;
    if (p == PROJ_DOWN) return m->ffn;
    return m->hidden;
}

int64_t proj_out(const Model *m, int p) {
    switch (p) {
    case PROJ_Q: return (int64_t)m->heads * m->head_dim;
    case PROJ_K: case PROJ_V: return (int64_t)m->kv_heads * m->head_dim;
    case PROJ_GATE: case PROJ_UP: return m->ffn;
    default: return m->hidden;
    }
}
