/* benchmarks/kernel.c -- compiling, loading and calling kiln kernels for the benchmarks. */
#include "kernel.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int
fail(kiln_ctx *ctx, const char *what)
{
    char msg[1024];
    kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
    fprintf(stderr, "bench: %s: %s\n", what, msg);
    if (kiln_ctx_error(ctx) && kiln_ctx_error(ctx)->detail)
        fprintf(stderr, "%s\n", kiln_ctx_error(ctx)->detail);
    kiln_ctx_free(ctx);
    return 1;
}

int
kernel_build(const char *name, const char *kg, const char *sched, const char *db, struct kernel *k)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g;
    char               path[256];
    snprintf(path, sizeof path, "%s/kiln_bench_%s_%d.so",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name, (int)getpid());
    struct kiln_compile_options opt = {NULL, sched, sched ? strlen(sched) : 0, name};
    if (kiln_graph_parse(ctx, kg, strlen(kg), name, &g) != KILN_OK)
        return fail(ctx, "parse");
    enum kiln_status st = db ? kiln_graph_compile_tuned(ctx, g, &opt, db, path, NULL)
                             : kiln_graph_compile(ctx, g, &opt, path, NULL);
    if (st != KILN_OK)
        return fail(ctx, "compile");
    kiln_ctx_free(ctx);
    memset(k, 0, sizeof *k);
    k->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    unlink(path);
    if (!k->so) {
        fprintf(stderr, "bench: dlopen: %s\n", dlerror());
        return 1;
    }
    k->call = (kiln_call_fn)(uintptr_t)dlsym(k->so, "kiln_call");
    k->threads = (kiln_set_num_threads_fn)(uintptr_t)dlsym(k->so, "kiln_set_num_threads");
    k->prepare = (kiln_prepare_fn)(uintptr_t)dlsym(k->so, "kiln_prepare");
    k->call_prepared = (kiln_call_prepared_fn)(uintptr_t)dlsym(k->so, "kiln_call_prepared");
    return !k->call || !k->threads;
}

void
kernel_tensor(struct kernel *k, int i, float *data, int ndim, const int64_t *shape)
{
    memcpy(k->shape[i], shape, sizeof(int64_t) * (size_t)ndim);
    k->t[i] = (DLTensor){data, {kDLCPU, 0}, ndim, {kDLFloat, 32, 1}, k->shape[i], NULL, 0};
    if (i + 1 > k->nargs)
        k->nargs = i + 1;
}

void
kernel_run(void *ud)
{
    struct kernel *k = ud;
    DLTensor      *args[BENCH_MAX_ARGS];
    char           err[256];
    for (int i = 0; i < k->nargs; i++)
        args[i] = &k->t[i];
    if (k->prepare && k->call_prepared && !k->prepared
        && k->prepare(args, k->nargs, &k->prepared, err, sizeof err) != KILN_ABI_OK) {
        fprintf(stderr, "bench: kiln_prepare: %s\n", err);
        exit(1);
    }
    int32_t st = k->prepared ? k->call_prepared(k->prepared, args, k->nargs, err, sizeof err)
                             : k->call(args, k->nargs, err, sizeof err);
    if (st != KILN_ABI_OK) {
        fprintf(stderr, "bench: kiln_call%s: %s\n", k->prepared ? "_prepared" : "", err);
        exit(1);
    }
}

float *
bench_randv(size_t n, unsigned seed)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    srand(seed);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    return p;
}

double
bench_max_rel_err(const float *a, const float *b, size_t n)
{
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++)
        s = fmax(s, fabs(b[i]));
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]) / (s + 1e-30));
    return m;
}
