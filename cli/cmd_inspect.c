/* cli/cmd_inspect.c -- `kiln inspect FILE [--json] [--no-simplify] ...`: what a graph computes and
 * what it costs. One row per statement (library call or compute definition) with its output's shape
 * and dtype and the statistics of kiln_graph_call (FLOPs, bytes moved, parameters read, all counted
 * from the compute definitions: cli/README.md states the rules), then totals, the arguments, the
 * outputs and the structural hash. Totals: FLOPs and bytes are sums over the statements; parameters
 * are the elements of every weight argument (a weight read by two statements counts once). --json
 * prints the same as one JSON object. An ONNX model is shown after the graph pipeline, as
 * compile/tune/eval use it (cli_optimize; one line on stderr says what changed), unless
 * --no-simplify. */
#include "cli.h"

#include "../ir/ir.h"

#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln inspect FILE.kg|MODEL.onnx [--json] [--no-simplify] [--no-channels-last]\n"
    "                    [--no-winograd] [--dump-after PASS]\n"
    "\n"
    "Prints one row per statement of the graph: output name, kind (library op or \"compute\"),\n"
    "output shape and dtype, FLOPs, bytes moved and parameters read; then totals, the\n"
    "arguments (inputs and weights), the outputs and the graph's structural hash. An ONNX\n"
    "model is shown after the graph pipeline, as `kiln compile` uses it: simplified\n"
    "(constants and batch norms folded, dead statements removed), channels-last, Winograd\n"
    "convolutions; one line on stderr says what changed.\n"
    "\n"
    "  --json               print one JSON object instead (see cli/README.md for its fields)\n"
    "  --no-simplify        show an ONNX model as imported (no graph pass)\n"
    "  --no-channels-last   keep its activations NCHW\n"
    "  --no-winograd        keep its convolutions direct\n"
    "  --dump-after PASS    print the graph after PASS (simplify, channels-last, winograd)\n"
    "                       in .kg text on stderr\n";

struct row {
    struct kiln_call_info   call;
    struct kiln_tensor_info t; /* the statement's output */
};

/* Finds the tensor named name (the graph's index by name); fills info (zeroed if absent). */
static void
tensor_by_name(const struct kiln_graph *g, const char *name, struct kiln_tensor_info *info)
{
    uint32_t t = name ? kiln_graph_find(g, name) : KILN_NONE;
    kiln_graph_tensor(g, t, info); /* zeroed for KILN_NONE */
}

static const char *
kind_name(enum kiln_tensor_kind k)
{
    switch (k) {
    case KILN_TENSOR_INPUT:
        return "input";
    case KILN_TENSOR_WEIGHT:
        return "weight";
    case KILN_TENSOR_OP:
        break;
    }
    return "op";
}

static double
total_params(const struct kiln_graph *g)
{
    double p = 0;
    for (uint32_t i = 0; i < kiln_graph_nargs(g); i++) {
        struct kiln_tensor_info t;
        kiln_graph_tensor(g, kiln_graph_arg(g, i), &t);
        if (t.kind == KILN_TENSOR_WEIGHT)
            p += (double)kiln_graph_tensor_numel(g, kiln_graph_arg(g, i));
    }
    return p;
}

static size_t
max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

static void
print_text(const char *path, const struct kiln_graph *g, const struct row *rows, uint32_t n)
{
    char   shape[256], flops[64], bytes[64], params[64], dtype[256];
    double tf = 0, tb = 0, tp = total_params(g);
    size_t wout = strlen("output"), wkind = strlen("kind"), wshape = strlen("shape");
    size_t wdt = strlen("dtype"), wf = strlen("FLOPs"), wb = strlen("bytes"), wp = strlen("params");
    for (uint32_t i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        tf += r->call.flops;
        tb += r->call.bytes;
        wout = max_size(wout, strlen(r->call.output));
        wkind = max_size(wkind, strlen(r->call.kind));
        wshape = max_size(wshape, strlen(cli_shape(shape, sizeof shape, r->t.ndim, r->t.shape)));
        wdt = max_size(wdt, strlen(kiln_dtype_name(r->t.dtype)));
        wf = max_size(wf, strlen(cli_flops(flops, sizeof flops, r->call.flops)));
        wb = max_size(wb, strlen(cli_bytes(bytes, sizeof bytes, r->call.bytes)));
        wp = max_size(wp, strlen(cli_count(params, sizeof params, r->call.params)));
    }
    wf = max_size(wf, strlen(cli_flops(flops, sizeof flops, tf)));
    wb = max_size(wb, strlen(cli_bytes(bytes, sizeof bytes, tb)));
    wp = max_size(wp, strlen(cli_count(params, sizeof params, tp)));

    printf("%s: %u statement%s, %u op%s, hash %016llx\n\n", path, n, n == 1 ? "" : "s",
           kiln_graph_nops(g), kiln_graph_nops(g) == 1 ? "" : "s",
           (unsigned long long)kiln_graph_hash(g));
    printf("  %-*s  %-*s  %-*s  %-*s  %*s  %*s  %*s\n", (int)wout, "output", (int)wkind, "kind",
           (int)wshape, "shape", (int)wdt, "dtype", (int)wf, "FLOPs", (int)wb, "bytes", (int)wp,
           "params");
    for (uint32_t i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        printf("  %-*s  %-*s  %-*s  %-*s  %*s  %*s  %*s\n", (int)wout, r->call.output, (int)wkind,
               r->call.kind, (int)wshape, cli_shape(shape, sizeof shape, r->t.ndim, r->t.shape),
               (int)wdt, kiln_dtype_name(r->t.dtype), (int)wf,
               cli_flops(flops, sizeof flops, r->call.flops), (int)wb,
               cli_bytes(bytes, sizeof bytes, r->call.bytes), (int)wp,
               cli_count(params, sizeof params, r->call.params));
    }
    int wlead = (int)(wout + wkind + wshape + wdt + 6);
    printf("  %-*s  %*s  %*s  %*s\n", wlead, "total", (int)wf, cli_flops(flops, sizeof flops, tf),
           (int)wb, cli_bytes(bytes, sizeof bytes, tb), (int)wp,
           cli_count(params, sizeof params, tp));

    size_t wname = 0, wtype = 0;
    for (uint32_t i = 0; i < kiln_graph_nargs(g); i++) {
        struct kiln_tensor_info t;
        kiln_graph_tensor(g, kiln_graph_arg(g, i), &t);
        wname = max_size(wname, strlen(t.name));
        wtype = max_size(wtype, strlen(kiln_dtype_name(t.dtype))
                                    + strlen(cli_shape(shape, sizeof shape, t.ndim, t.shape)));
    }
    for (uint32_t i = 0; i < kiln_graph_noutputs(g); i++) {
        struct kiln_tensor_info t;
        kiln_graph_tensor(g, kiln_graph_output(g, i), &t);
        wname = max_size(wname, strlen(t.name));
    }
    printf("\narguments\n");
    for (uint32_t i = 0; i < kiln_graph_nargs(g); i++) {
        struct kiln_tensor_info t;
        uint32_t                ti = kiln_graph_arg(g, i);
        kiln_graph_tensor(g, ti, &t);
        snprintf(dtype, sizeof dtype, "%s%s", kiln_dtype_name(t.dtype),
                 cli_shape(shape, sizeof shape, t.ndim, t.shape));
        if (t.kind == KILN_TENSOR_WEIGHT)
            printf("  %-6s  %-*s  %-*s  %s params\n", kind_name(t.kind), (int)wname, t.name,
                   (int)wtype, dtype,
                   cli_count(params, sizeof params, (double)kiln_graph_tensor_numel(g, ti)));
        else
            printf("  %-6s  %-*s  %s\n", kind_name(t.kind), (int)wname, t.name, dtype);
    }
    if (kiln_graph_nargs(g) == 0)
        printf("  (none)\n");
    printf("\noutputs\n");
    for (uint32_t i = 0; i < kiln_graph_noutputs(g); i++) {
        struct kiln_tensor_info t;
        kiln_graph_tensor(g, kiln_graph_output(g, i), &t);
        printf("  %-*s  %s%s\n", (int)wname, t.name, kiln_dtype_name(t.dtype),
               cli_shape(shape, sizeof shape, t.ndim, t.shape));
    }
}

static void
json_shape(int ndim, const int64_t *shape)
{
    printf("[");
    for (int i = 0; i < ndim; i++)
        printf("%s%lld", i ? ", " : "", (long long)shape[i]);
    printf("]");
}

static void
json_tensor(const struct kiln_tensor_info *t, bool with_kind)
{
    printf("{\"name\": ");
    cli_json_string(stdout, t->name);
    if (with_kind)
        printf(", \"kind\": \"%s\"", kind_name(t->kind));
    printf(", \"dtype\": \"%s\", \"shape\": ", kiln_dtype_name(t->dtype));
    json_shape(t->ndim, t->shape);
    printf("}");
}

static void
print_json(const char *path, const struct kiln_graph *g, const struct row *rows, uint32_t n)
{
    double tf = 0, tb = 0;
    printf("{\n  \"file\": ");
    cli_json_string(stdout, path);
    printf(",\n  \"hash\": \"%016llx\",\n  \"statements\": [",
           (unsigned long long)kiln_graph_hash(g));
    for (uint32_t i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        tf += r->call.flops;
        tb += r->call.bytes;
        printf("%s\n    {\"output\": ", i ? "," : "");
        cli_json_string(stdout, r->call.output);
        printf(", \"kind\": ");
        cli_json_string(stdout, r->call.kind);
        printf(", \"dtype\": \"%s\", \"shape\": ", kiln_dtype_name(r->t.dtype));
        json_shape(r->t.ndim, r->t.shape);
        printf(", \"flops\": %.17g, \"bytes\": %.17g, \"params\": %.17g}", r->call.flops,
               r->call.bytes, r->call.params);
    }
    printf("%s],\n  \"total\": {\"flops\": %.17g, \"bytes\": %.17g, \"params\": %.17g},\n",
           n ? "\n  " : "", tf, tb, total_params(g));
    printf("  \"arguments\": [");
    for (uint32_t i = 0; i < kiln_graph_nargs(g); i++) {
        struct kiln_tensor_info t;
        kiln_graph_tensor(g, kiln_graph_arg(g, i), &t);
        printf("%s\n    ", i ? "," : "");
        json_tensor(&t, true);
    }
    printf("%s],\n  \"outputs\": [", kiln_graph_nargs(g) ? "\n  " : "");
    for (uint32_t i = 0; i < kiln_graph_noutputs(g); i++) {
        struct kiln_tensor_info t;
        kiln_graph_tensor(g, kiln_graph_output(g, i), &t);
        printf("%s\n    ", i ? "," : "");
        json_tensor(&t, false);
    }
    printf("%s]\n}\n", kiln_graph_noutputs(g) ? "\n  " : "");
}

int
cmd_inspect(int argc, char **argv)
{
    const char       *path = NULL;
    bool              json = false;
    struct cli_passes passes = {.dump_after = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(usage, stdout);
            return 0;
        }
        int pr = cli_passes_arg("inspect", argc, argv, &i, &passes);
        if (pr < 0)
            return -pr;
        if (pr)
            continue;
        if (!strcmp(a, "--json"))
            json = true;
        else if (a[0] == '-' && a[1])
            return cli_usage_error("inspect", "unknown option '%s'", a);
        else if (path)
            return cli_usage_error("inspect", "more than one file (%s, %s)", path, a);
        else
            path = a;
    }
    if (!path)
        return cli_usage_error("inspect", "missing FILE.kg");

    kiln_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    const double *const *weights = NULL;
    struct kiln_graph   *g = cli_load_model(ctx, path, &passes, &weights);
    if (g && !cli_optimize(ctx, "inspect", path, &passes, &g, &weights, true))
        g = NULL;
    if (!g) {
        kiln_ctx_free(ctx);
        return 1;
    }
    uint32_t    n = kiln_graph_ncalls(g);
    struct row *rows = calloc(n + 1, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "kiln: out of memory\n");
        kiln_ctx_free(ctx);
        return 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        kiln_graph_call(g, i, &rows[i].call);
        tensor_by_name(g, rows[i].call.output, &rows[i].t);
    }
    int rc = 0;
    if (kiln_ctx_error(ctx)) /* statistics ran out of memory */
        rc = cli_report(ctx);
    else if (json)
        print_json(path, g, rows, n);
    else
        print_text(path, g, rows, n);
    free(rows);
    kiln_ctx_free(ctx);
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "kiln: error writing the output\n");
        rc = 1;
    }
    return rc;
}
