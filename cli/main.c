/* main.c: bin/boost, one binary with subcommands. It only dispatches; every subcommand lives in
 * cli/ and calls the libraries (see commands.h). */
#include <stdio.h>
#include <string.h>
#include "cli/commands.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"gen",     cmd_gen,     "generate plan.txt, kernels.cu and report.md for a run spec"},
    {"report",  cmd_report,  "print a run's report (parameters, FLOPs, collectives, memory); "
                             "--json"},
    {"train",   cmd_train,   "train a run on the cpu or cuda backend"},
    {"project", cmd_project, "project seconds per iteration for megatron, naive and btp layouts"},
    {"plan",    cmd_plan,    "search the fastest layout of a model on N GPUs that fits in memory"},
    {"tune",    cmd_tune,    "time kernel configurations on a GPU and write the tuning file"},
    {"kernels", cmd_kernels, "compile a kernels.cu with NVRTC, report registers and spills"},
    {"plot",    cmd_plot,    "plot loss curves from a training log (gnuplot)"},
    {"ckpt",    cmd_ckpt,    "verify checkpoint folders (checksums, sharded indexes); merge one "
                             "into a safetensors file"},
    {"eval",    cmd_eval,    "loss, perplexity and bits per byte of a checkpoint on held-out data"},
    {"sample",  cmd_sample,  "generate text from a checkpoint (temperature, top-k, top-p)"},
    {"export",  cmd_export,  "write a checkpoint as config.json + model.safetensors for PyTorch"},
    {"tokenize", cmd_tokenize, "text files or JSON lines -> llm.c token shards with a "
                               "tokenizer.json; --decode"},
    {"tokenizer", cmd_tokenizer, "tokenizer train: a byte-level BPE tokenizer.json "
                                 "of a given size"},
    {"import",  cmd_import,  "a Hugging Face LLaMA checkpoint as a model spec + step-0 checkpoint "
                             "(SVD to low rank)"},
    {"doctor",  cmd_doctor,  "GPUs, driver, CUDA libraries found (path, version), what is missing"},
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: boost COMMAND [ARGS]   (boost COMMAND --help for its options)\n\n"
               "commands:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout); return 0;
    }
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "boost: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
