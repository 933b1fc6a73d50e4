/* commands.h: the subcommands of bin/boost. Each returns the process exit status:
 * 0 success, 1 a failure while running (I/O, numerics, device), 2 bad input (spec, flags, files).
 * They parse arguments and print; the work is done by the libraries (gen/, runtime/, common/). */
#ifndef BOOST_COMMANDS_H
#define BOOST_COMMANDS_H
int cmd_gen(int argc, char **argv);      /* cli/gen.c:     spec -> plan.txt, kernels.cu, report.md */
int cmd_report(int argc, char **argv);   /* cli/gen.c:     the report as text or JSON */
int cmd_project(int argc, char **argv);  /* cli/project.c: cost model of one iteration per layout */
int cmd_plan(int argc, char **argv);     /* cli/plan.c:    the fastest feasible layout on N GPUs */
int cmd_train(int argc, char **argv);    /* cli/train.c:   train from a run spec or a plan */
int cmd_tune(int argc, char **argv);     /* cli/tune.c:    time kernel candidates on a GPU */
int cmd_kernels(int argc, char **argv);  /* cli/kernels.c: NVRTC-compile a kernels.cu */
int cmd_plot(int argc, char **argv);     /* cli/plot.c:    plots with gnuplot */
int cmd_ckpt(int argc, char **argv);     /* cli/ckpt.c:    verify checkpoint folders */
int cmd_eval(int argc, char **argv);     /* cli/eval.c:    loss, perplexity, bits per byte */
int cmd_sample(int argc, char **argv);   /* cli/sample.c:  generate from a checkpoint */
int cmd_export(int argc, char **argv);   /* cli/export.c:  config.json + model.safetensors */
int cmd_tokenize(int argc, char **argv);  /* cli/tokenize.c: text -> llm.c token shards, and back */
int cmd_tokenizer(int argc, char **argv); /* cli/tokenize.c: train a byte-level BPE tokenizer */
int cmd_import(int argc, char **argv);   /* cli/import.c:  a Hugging Face LLaMA -> spec + step-0 checkpoint */
int cmd_doctor(int argc, char **argv);   /* cli/doctor.c:  GPUs, CUDA libraries, what is missing */

/* "CMD: MESSAGE" on stderr (cmd: "boost sample", ...); returns 2, the exit status of bad input.
 * Defined in cli/refuse.c. */
int cli_refuse(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif
