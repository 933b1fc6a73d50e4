/* collective_catalog.c: the collective catalog's rows (common/collective_catalog.h), lookups by
 * word and group name, and the ring cost every reader of a collective's time uses. */
#include <string.h>
#include "common/collective_catalog.h"

static const CollKindRow KINDS[CK_COUNT] = {
#define CCAT_ROW(id, word, operands, groups, sections, phases, what) \
    {word, operands, groups, sections, phases, what},
    COLLECTIVE_CATALOG(CCAT_ROW)
#undef CCAT_ROW
};

static const char *const GROUP_NAMES[CG_COUNT] = {"tp", "dp", "ep", "edp"};

const CollKindRow *ccat_kind(int kind) {
    return kind >= 0 && kind < CK_COUNT ? &KINDS[kind] : NULL;
}

int ccat_find(const char *word) {
    for (int i = 0; word && i < CK_COUNT; i++)
        if (!strcmp(KINDS[i].word, word)) return i;
    return -1;
}

const char *ccat_word(int kind) { return kind >= 0 && kind < CK_COUNT ? KINDS[kind].word : "?"; }

const char *ccat_group_name(int group) {
    return group >= 0 && group < CG_COUNT ? GROUP_NAMES[group] : "?";
}

int ccat_group_find(const char *name) {
    for (int i = 0; name && i < CG_COUNT; i++)
        if (!strcmp(GROUP_NAMES[i], name)) return i;
    return -1;
}

int ccat_allows_group(int kind, int group) {
    const CollKindRow *k = ccat_kind(kind);
    return k && group >= 0 && group < CG_COUNT && (k->groups >> group) & 1u;
}

double ccat_wire_bytes(int kind, double bytes, int n) {
    const CollKindRow *k = ccat_kind(kind);
    if (!k || n <= 1 || bytes <= 0) return 0;
    return k->ring_phases * (double)(n - 1) / n * bytes;
}

double ccat_seconds(int kind, double bytes, int n, double bw_gbs, double alpha_us) {
    const CollKindRow *k = ccat_kind(kind);
    if (!k || n <= 1 || bytes <= 0) return 0;
    double latency = k->ring_phases * (n - 1) * alpha_us * 1e-6;
    return ccat_wire_bytes(kind, bytes, n) / (bw_gbs * 1e9) + latency;
}
