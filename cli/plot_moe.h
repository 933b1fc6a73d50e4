/* plot_moe.h: `boost plot LOG --experts` (cli/plot_moe.c): the MoE expert load over training.
 * Returns the exit status (0, 1 gnuplot or I/O failure, 2 no MoE data in the log). */
#ifndef BOOST_PLOT_MOE_H
#define BOOST_PLOT_MOE_H
int plot_experts(const char *log, const char *png, const char *title, const char *gnuplot);
#endif
