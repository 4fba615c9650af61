/* examples/dlopen/consumer.c -- a program that uses a generated shared object the way a user's
 * C program would: it includes only kiln_abi.h (and DLPack's header), links only libdl and
 * pthreads, and never touches libkiln.
 *
 *     cc -I PREFIX/include consumer.c -o consumer -ldl -lpthread -lm     (kiln_abi.h's directory)
 *     kiln compile examples/matmul.kg -o mm.so && ./consumer ./mm.so 128 256 64
 *
 * The module must compute C[M, N] = a[M, K] @ b[K, N] in f32 with arguments (a, b, C). The
 * consumer checks the exported entry points (version, metadata, source), runs the product and
 * compares it with its own, checks that misuse is refused with a message (wrong count, wrong
 * dtype, wrong shape, misaligned or aliased output), runs it with 1 thread and with all cores,
 * and from four threads at once with different outputs. Prints "consumer: ok" and exits 0, or
 * prints what failed and exits 1. Built and run by tests/abi/test_abi.c,
 * tests/runtime/test_runtime.c and, against an installed kiln, tests/cli/install.sh. */
#include "kiln_abi.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define EXPECT(cond, ...)                                             \
    do {                                                              \
        if (!(cond)) {                                                \
            fprintf(stderr, "consumer: %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                             \
            fputc('\n', stderr);                                      \
            failures++;                                               \
        }                                                             \
    } while (0)

struct mm {
    kiln_call_fn call;
    int64_t      m, k, n;
    float       *a, *b, *want;
};

static void *
sym(void *so, const char *name)
{
    void *p = dlsym(so, name);
    if (!p)
        fprintf(stderr, "consumer: the module does not export %s\n", name);
    return p;
}

static float *
alloc_floats(int64_t n)
{
    size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}

/* Runs C = a @ b into c; returns the ABI status, the message in err. */
static int32_t
run(const struct mm *p, float *c, char *err, size_t errsize)
{
    int64_t   sa[2] = {p->m, p->k}, sb[2] = {p->k, p->n}, sc[2] = {p->m, p->n};
    DLTensor  ta = {p->a, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sa, NULL, 0};
    DLTensor  tb = {p->b, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sb, NULL, 0};
    DLTensor  tc = {c, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sc, NULL, 0};
    DLTensor *args[3] = {&ta, &tb, &tc};
    return p->call(args, 3, err, errsize);
}

static int
same(const struct mm *p, const float *c)
{
    for (int64_t i = 0; i < p->m * p->n; i++) {
        if (!(fabsf(c[i] - p->want[i]) <= 1e-4f * (1 + fabsf(p->want[i]))))
            return 0;
    }
    return 1;
}

static void *
worker(void *arg)
{
    const struct mm *p = arg;
    float           *c = alloc_floats(p->m * p->n);
    char             err[256];
    int              ok = c != NULL;
    for (int r = 0; ok && r < 20; r++) {
        memset(c, 0, (size_t)(p->m * p->n) * sizeof(float));
        ok = run(p, c, err, sizeof err) == KILN_ABI_OK && same(p, c);
    }
    free(c);
    return ok ? arg : NULL;
}

int
main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: consumer MODULE.so M K N\n");
        return 2;
    }
    void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "consumer: %s\n", dlerror());
        return 1;
    }
    kiln_abi_version_fn     version = (kiln_abi_version_fn)sym(so, "kiln_abi_version");
    kiln_metadata_fn        metadata = (kiln_metadata_fn)sym(so, "kiln_metadata");
    kiln_metadata_fn        source = (kiln_metadata_fn)sym(so, "kiln_source");
    kiln_set_num_threads_fn threads = (kiln_set_num_threads_fn)sym(so, "kiln_set_num_threads");
    struct mm               p = {(kiln_call_fn)sym(so, "kiln_call"),
                                 atoll(argv[2]),
                                 atoll(argv[3]),
                                 atoll(argv[4]),
                                 NULL,
                                 NULL,
                                 NULL};
    if (!version || !metadata || !source || !threads || !p.call)
        return 1;
    EXPECT(version() == KILN_ABI_VERSION, "kiln_abi_version() = %d", (int)version());
    const char *md = metadata();
    char        abi_field[32];
    snprintf(abi_field, sizeof abi_field, "\"abi_version\": %d", KILN_ABI_VERSION);
    EXPECT(md && strstr(md, abi_field) && strstr(md, "\"args\""), "metadata: %s",
           md ? md : "(null)");
    EXPECT(source() && strstr(source(), "input"), "source: %s", source() ? source() : "(null)");

    p.a = alloc_floats(p.m * p.k);
    p.b = alloc_floats(p.k * p.n);
    p.want = alloc_floats(p.m * p.n);
    float *c = alloc_floats(p.m * p.n);
    if (!p.a || !p.b || !p.want || !c)
        return 1;
    for (int64_t i = 0; i < p.m * p.k; i++)
        p.a[i] = (float)((i * 7) % 11) / 8 - 0.5f;
    for (int64_t i = 0; i < p.k * p.n; i++)
        p.b[i] = (float)((i * 5) % 13) / 16 - 0.25f;
    for (int64_t i = 0; i < p.m; i++) {
        for (int64_t j = 0; j < p.n; j++) {
            double s = 0;
            for (int64_t k = 0; k < p.k; k++)
                s += (double)p.a[i * p.k + k] * p.b[k * p.n + j];
            p.want[i * p.n + j] = (float)s;
        }
    }

    char    err[256] = "";
    int32_t st = run(&p, c, err, sizeof err);
    EXPECT(st == KILN_ABI_OK, "kiln_call: status %d: %s", (int)st, err);
    EXPECT(same(&p, c), "wrong product");

    /* misuse is refused with a message naming the argument */
    int64_t   sa[2] = {p.m, p.k}, sb[2] = {p.k, p.n}, sc[2] = {p.m, p.n}, bad[2] = {p.m + 1, p.n};
    DLTensor  ta = {p.a, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sa, NULL, 0};
    DLTensor  tb = {p.b, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sb, NULL, 0};
    DLTensor  tc = {c, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sc, NULL, 0};
    DLTensor *args[3] = {&ta, &tb, &tc};
    err[0] = 0;
    EXPECT(p.call(args, 2, err, sizeof err) == KILN_ABI_ERR_NARGS && strstr(err, "expected 3"),
           "wrong count: %s", err);
    ta.dtype.bits = 64;
    EXPECT(p.call(args, 3, err, sizeof err) == KILN_ABI_ERR_DTYPE && strstr(err, "argument 0")
               && strstr(err, "f64"),
           "wrong dtype: %s", err);
    ta.dtype.bits = 32;
    tc.shape = bad;
    EXPECT(p.call(args, 3, err, sizeof err) == KILN_ABI_ERR_SHAPE && strstr(err, "argument 2"),
           "wrong shape: %s", err);
    tc.shape = sc;
    tc.device.device_type = kDLCUDA;
    EXPECT(p.call(args, 3, err, sizeof err) == KILN_ABI_ERR_DEVICE && strstr(err, "cuda:0"),
           "wrong device: %s", err);
    tc.device.device_type = kDLCPU;
    tc.data = p.a;
    EXPECT(p.call(args, 3, err, sizeof err) == KILN_ABI_ERR_ALIAS, "aliased output: %s", err);
    tc.data = c;
    tc.byte_offset = 1;
    EXPECT(p.call(args, 3, err, sizeof err) == KILN_ABI_ERR_ALIGN, "misaligned output: %s", err);
    tc.byte_offset = 0;
    EXPECT(p.call(args, 3, NULL, 0) == KILN_ABI_OK, "NULL err buffer");

    /* thread counts */
    threads(1);
    memset(c, 0, (size_t)(p.m * p.n) * sizeof(float));
    EXPECT(run(&p, c, err, sizeof err) == KILN_ABI_OK && same(&p, c), "1 thread: %s", err);
    threads(0);
    memset(c, 0, (size_t)(p.m * p.n) * sizeof(float));
    EXPECT(run(&p, c, err, sizeof err) == KILN_ABI_OK && same(&p, c), "all cores: %s", err);

    /* concurrent calls with different outputs */
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        EXPECT(pthread_create(&t[i], NULL, worker, &p) == 0, "pthread_create");
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        EXPECT(r == &p, "concurrent call %d gave a wrong result", i);
    }

    free(p.a);
    free(p.b);
    free(p.want);
    free(c);
    dlclose(so);
    if (failures)
        return 1;
    printf("consumer: ok\n");
    return 0;
}
