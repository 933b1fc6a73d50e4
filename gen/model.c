/* model.c: names of the enums in model.h, for messages, the plan and the report. */
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
