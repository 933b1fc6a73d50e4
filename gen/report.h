/* report.h: the run report (gen/report.c): report.md or its JSON form, from a run's graph, memory
 * plan and cost figures. */
#ifndef BOOST_GEN_REPORT_H
#define BOOST_GEN_REPORT_H

#include <stddef.h>
#include <stdio.h>
#include "gen/model.h"

int report_write(const Run *run, FILE *f, int json, char *err, size_t errlen);

#endif
