/* examples/c/compile_call.c -- a C program using an installed libkiln through pkg-config:
 * it parses a kernel graph from .kg text, compiles it to a shared object, loads and calls it
 * on its own inputs, and checks the outputs against kiln's reference interpreter.
 *
 *     cc compile_call.c $(pkg-config --cflags --libs kiln) -o compile_call
 *     ./compile_call            # prints "compile_call: ok" and exits 0, or says what failed
 *
 * (examples/README.md; with a kiln installed outside the system's directories, set
 * PKG_CONFIG_PATH=PREFIX/lib/pkgconfig and add -Wl,-rpath,PREFIX/lib.) */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <kiln.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A dense layer with a relu, then a row sum written as a compute definition. */
static const char graph[] = "input  x: f32[4, 8]\n"
                            "weight w: f32[3, 8]\n"
                            "weight b: f32[3]\n"
                            "h = dense(x, w, b)\n" /* x w^T + b */
                            "y = relu(h)\n"
                            "s[i] += y[i, j]\n"
                            "output y\n"
                            "output s\n";

static int
fail(kiln_ctx *ctx, const char *what)
{
    char msg[1024];
    kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
    fprintf(stderr, "compile_call: %s: %s\n", what, msg);
    return 1;
}

int
main(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    if (!ctx)
        return 1;
    const char *tmp = getenv("TMPDIR");
    char        dir[4096], so[4200];
    snprintf(dir, sizeof dir, "%s/kiln-example-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("compile_call: mkdtemp");
        return 1;
    }
    snprintf(so, sizeof so, "%s/graph.so", dir);

    struct kiln_graph  *g = NULL;
    struct kiln_module *m = NULL;
    int                 rc = 1;
    if (kiln_graph_parse(ctx, graph, strlen(graph), "example.kg", &g) != KILN_OK) {
        rc = fail(ctx, "parse");
        goto out;
    }
    if (kiln_graph_compile(ctx, g, NULL, so, NULL) != KILN_OK) { /* default schedule, host CPU */
        rc = fail(ctx, "compile");
        goto out;
    }
    if (kiln_module_load(ctx, so, &m) != KILN_OK) {
        rc = fail(ctx, "load");
        goto out;
    }

    /* arguments in declaration order (x, w, b), then the outputs (y, s) */
    enum { NT = 5 };
    int64_t shapes[NT][2] = {{4, 8}, {3, 8}, {3, 0}, {4, 3}, {4, 0}};
    int     ndim[NT] = {2, 2, 1, 2, 1};
    float   x[32], w[24], b[3], y[12], s[4];
    float  *data[NT] = {x, w, b, y, s};
    double  xd[32], wd[24], bd[3], yd[12], sd[4]; /* the interpreter works in double */
    double *dd[NT] = {xd, wd, bd, yd, sd};
    int     n[NT] = {32, 24, 3, 12, 4};
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < n[t]; i++) {
            data[t][i] = (float)((i * (t + 3) + 1) % 9) / 4 - 1; /* small exact values */
            dd[t][i] = data[t][i];
        }
    }
    DLTensor  tens[NT];
    DLTensor *args[NT];
    for (int t = 0; t < NT; t++) {
        tens[t] = (DLTensor){data[t], {kDLCPU, 0}, ndim[t], {kDLFloat, 32, 1}, shapes[t], NULL, 0};
        args[t] = &tens[t];
    }
    if (kiln_module_call(ctx, m, args, NT, NULL) != KILN_OK) {
        rc = fail(ctx, "call");
        goto out;
    }

    const double *ins[] = {xd, wd, bd};
    double       *outs[] = {yd, sd};
    if (kiln_graph_eval(ctx, g, ins, outs) != KILN_OK) {
        rc = fail(ctx, "eval");
        goto out;
    }
    rc = 0;
    for (int t = 3; t < NT; t++) {
        for (int i = 0; i < n[t]; i++) {
            if (!(fabs(data[t][i] - dd[t][i]) <= 1e-5 * (1 + fabs(dd[t][i])))) {
                fprintf(stderr,
                        "compile_call: output %d element %d is %g, the interpreter says %g\n",
                        t - 3, i, data[t][i], dd[t][i]);
                rc = 1;
            }
        }
    }
    if (rc == 0)
        printf("compile_call: ok (%d outputs match the interpreter)\n", NT - 3);
out:
    kiln_module_free(m);
    kiln_ctx_free(ctx);
    unlink(so);
    rmdir(dir);
    return rc;
}
