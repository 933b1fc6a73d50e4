/* plot_moe.h: `boost plot LOG --experts` (cli/plot_moe.c): the MoE expert load over training.
 * Returns the exit status (0, 1 gnuplot or I/O failure, 2 no MoE data in the log). */
#ifndef BOOST_PLOT_MOE_H
#define BOOST_PLOT_MOE_H
int plot_experts(const char *log, const char *png, const char *title, const char *gnuplot);
#include <stdio.h>
/* cli/plot.c, shared by the commands that draw with gnuplot (boost plot, boost plan): find a
 * program on PATH (1: found, its path in path), and write s as a gnuplot string (single quotes). */
int find_program(const char *name, char *path, size_t pathlen);
void gp_quote(FILE *f, const char *s);
#endif
