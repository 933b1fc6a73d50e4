/* world.c: reads the multi-process world from the launcher's environment (runtime/world.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/world.h"

int world_env_number(const char *name, long *out) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1000000) return -1;
    *out = x;
    return 1;
}

int world_from_env(int *rank, int *size, char *err, size_t errlen) {
    static const char *const PAIRS[][2] = {
        {"BOOST_RANK", "BOOST_WORLD_SIZE"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
    };
    for (size_t i = 0; i < sizeof PAIRS / sizeof PAIRS[0]; i++) {
        long r = 0, s = 0;
        int hr = world_env_number(PAIRS[i][0], &r), hs = world_env_number(PAIRS[i][1], &s);
        if (hr == 0 && hs == 0) continue;
        if (hr < 0 || hs < 0 || (hs && s < 1) || (hr && hs && r >= s)) {
            snprintf(err, errlen, "%s=%s %s=%s: expected a rank 0..size-1 and a size >= 1", PAIRS[i][0],
                     getenv(PAIRS[i][0]) ? getenv(PAIRS[i][0]) : "", PAIRS[i][1], getenv(PAIRS[i][1]) ? getenv(PAIRS[i][1]) : "");
            return -1;
        }
        if (hs == 0) {
            snprintf(err, errlen, "%s is set but %s is not: set both (rank and world size)", PAIRS[i][0], PAIRS[i][1]);
            return -1;
        }
        if (s <= 1) return 0;
        if (hr == 0) {
            snprintf(err, errlen, "%s=%ld is set but %s is not: set both (rank and world size)", PAIRS[i][1], s, PAIRS[i][0]);
            return -1;
        }
        *rank = (int)r;
        *size = (int)s;
        return 1;
    }
    return 0;
}

int world_rank(void) {
    int r = 0, s = 1;
    char err[256];
    return world_from_env(&r, &s, err, sizeof err) == 1 ? r : 0;
}

void world_job_id(char *out, size_t n) {
    const char *names[] = {"SLURM_JOB_ID", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "BOOST_JOB_ID"};
    const char *v = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !v; i++)
        if (getenv(names[i]) && *getenv(names[i])) v = getenv(names[i]);
    if (!v) v = "0";
    size_t k = 0;
    for (; *v && k + 1 < n; v++)
        out[k++] = ((*v >= 'a' && *v <= 'z') || (*v >= 'A' && *v <= 'Z') || (*v >= '0' && *v <= '9') || *v == '-' || *v == '.')
                       ? *v : '_';
    if (n) out[k] = 0;
}
