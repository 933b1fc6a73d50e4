/* check.c: one binary for the device checks (OpenBLAS is linked statically, so one binary instead
 * of two keeps what travels to the GPU machine small): `check steps ...` runs check_steps.c,
 * `check model ...` runs check_model.c (each built with its main renamed; see tests/gpu/build.sh). */
#include <stdio.h>
#include <string.h>

int check_steps_main(int argc, char **argv);
int check_model_main(int argc, char **argv);

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "steps")) return check_steps_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "model")) return check_model_main(argc - 1, argv + 1);
    fprintf(stderr, "usage: check steps PLAN_DIR [...] | check model PLAN_DIR [...]\n");
    return 2;
}
