/* cli/main.c -- the kiln command: global options (--help, --version), `kiln help CMD`, and a
 * dispatch table of subcommands, each `int cmd_NAME(int argc, char **argv)` in its own file
 * (cli/cli.h). Adding a subcommand is one row here plus its file. Exit status everywhere:
 * 0 success, 1 failure (bad file, parse or evaluation error), 2 usage error. */
#include "cli.h"

#include <string.h>

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct command commands[] = {
    {"inspect", cmd_inspect, "statements, shapes, FLOPs, bytes and parameters of a graph"},
    {"eval", cmd_eval, "evaluate a graph with the reference interpreter"},
    {"compile", cmd_compile, "compile a graph to a shared object"},
    {"run", cmd_run, "call a compiled module on random inputs, check and time it"},
    {"tune", cmd_tune, "search fast schedules and store them in a records database"},
    {"records", cmd_records, "list, export or import tuning records"},
    {"costmodel", cmd_costmodel,
     "train a cost model on records, or measure how well one ranks them"},
    {"onnx-test", cmd_onnx_test, "run ONNX backend conformance tests through kiln"},
    {"sample", cmd_sample, "sample new kernels to replace a convolution (.kg and PyTorch)"},
    {"worker", cmd_worker, "measure candidates for tuners on other machines (Redis Streams)"},
    {"search", cmd_search, "search kernels faster than a convolution at its accuracy (PyTorch)"},
};

static void
usage(FILE *f)
{
    fprintf(f, "usage: kiln [--help] [--version] COMMAND [ARGS]\n"
               "\n"
               "kiln is a tensor compiler. Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'kiln help COMMAND' or 'kiln COMMAND --help' describes a command.\n");
}

static const struct command *
find(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

static int
unknown(const char *name)
{
    fprintf(stderr, "kiln: unknown command '%s'\n", name);
    usage(stderr);
    return 2;
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *a = argv[1];
    if (cli_is_help(a)) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(a, "--version") || !strcmp(a, "-V")) {
        printf("kiln %s\n", KILN_VERSION);
        return 0;
    }
    if (!strcmp(a, "help")) {
        if (argc == 2) {
            usage(stdout);
            return 0;
        }
        if (argc > 3) {
            fprintf(stderr, "kiln help: one command at a time\n");
            return 2;
        }
        const struct command *c = find(argv[2]);
        if (!c)
            return unknown(argv[2]);
        char  help[] = "--help";
        char *sub[] = {argv[2], help, NULL};
        return c->fn(2, sub);
    }
    if (a[0] == '-') {
        fprintf(stderr, "kiln: unknown option '%s'\n", a);
        usage(stderr);
        return 2;
    }
    const struct command *c = find(a);
    if (!c)
        return unknown(a);
    return c->fn(argc - 1, argv + 1);
}
