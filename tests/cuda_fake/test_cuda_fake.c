/* tests/cuda_fake/test_cuda_fake.c -- the host side of kiln's GPU runtime against a stand-in
 * driver (tests/cuda_fake/fake_libcuda.c, loaded as libcuda.so.1 from the build directory's
 * fake_cuda/: the test re-executes itself with it first on LD_LIBRARY_PATH). No kernel runs;
 * what is checked is every driver call kiln makes and its arguments:
 *   - the public device API (include/kiln.h "CUDA devices"): open, memory, copies, timing, and
 *     a driver failure's message;
 *   - modules of the cuda target (compiled here by NVRTC for sm_80): which kernels kiln_prepare,
 *     kiln_call_prepared and kiln_call launch, with which device pointers: the weight-derived
 *     buffers computed once into the prepared handle's device memory and read from there by
 *     every prepared call, which launches only the other kernels; the call area (workspace)
 *     allocated by the first call and reused by the next; a handle used in another CUDA
 *     context refused; failures (out of memory, a failed launch) reported with the driver's
 *     error and nothing leaked;
 *   - CUDA-event timing of a prepared and a plain call (the fake's launches take 1 ms each).
 * Whether the kernels compute the right values is tests/cuda_rt's business, on a GPU. */
#include "../harness.h"
#include "kiln.h"
#include "kiln_abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KILN_FAKE_CUDA_DIR
#define KILN_FAKE_CUDA_DIR "fake_cuda"
#endif

/* The fake's inspection functions and the driver entry points the tests call directly. */
static const char *(*fake_log)(void);
static void (*fake_log_clear)(void);
static int (*fake_live)(void);
static void (*fake_fail)(const char *entry, int after, int r);
static int (*drv_push)(void *c);
static int (*drv_pop)(void **c);

static char tmpdir[64];

static const char *
msg(const kiln_ctx *ctx)
{
    const struct kiln_error *e = kiln_ctx_error(ctx);
    return e ? e->msg : "";
}

/* The number of the allocation the log's first "alloc aN" line after `from` names; 0 if none. */
static int
alloc_id(const char *from)
{
    const char *p = strstr(from, "alloc a");
    return p ? atoi(p + 7) : 0;
}

static void
check_log(const char *want, const char *what)
{
    if (strcmp(fake_log(), want) != 0)
        harness_fail(__FILE__, __LINE__, "%s: the driver saw\n%s--- want ---\n%s", what, fake_log(),
                     want);
}

/* A module of the cuda target, and device tensors for its arguments (all f32). */
struct mod {
    kiln_ctx           *ctx;
    struct kiln_module *m;
    struct kiln_cuda   *cu;
    uint32_t            n;
    uint64_t            dev[8];
    int                 id[8]; /* the fake's allocation numbers of dev[] */
    DLTensor            t[8];
    DLTensor           *a[8];
};

static void
mod_free(struct mod *M)
{
    for (uint32_t i = 0; i < M->n; i++)
        kiln_cuda_free(M->cu, M->dev[i]);
    kiln_cuda_close(M->cu);
    kiln_module_free(M->m);
    kiln_ctx_free(M->ctx);
    memset(M, 0, sizeof *M);
}

static bool
mod_build(struct mod *M, const char *name, const char *kg, const char *sched)
{
    memset(M, 0, sizeof *M);
    M->ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = PARSE(M->ctx, kg);
    char               path[128];
    static unsigned    serial; /* modules are -z nodelete: a fresh path each time */
    snprintf(path, sizeof path, "%s/%s%u.so", tmpdir, name, serial++);
    struct kiln_compile_options opt = {.target = "cuda -arch=sm_80",
                                       .schedule_json = sched,
                                       .schedule_len = sched ? strlen(sched) : 0,
                                       .name = name};
    enum kiln_status st = g ? kiln_graph_compile(M->ctx, g, &opt, path, NULL) : KILN_ERR_INVALID;
    if (st == KILN_ERR_UNSUPPORTED && strncmp(msg(M->ctx), "no NVRTC", 8) == 0) {
        harness_skip("no NVRTC: cuda modules cannot be built here");
        return false;
    }
    if (st != KILN_OK || kiln_module_load(M->ctx, path, &M->m) != KILN_OK
        || kiln_cuda_open(M->ctx, 0, &M->cu) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "building %s: %s", name, msg(M->ctx));
        unlink(path);
        return false;
    }
    unlink(path);
    M->n = kiln_module_nargs(M->m);
    CHECK(M->n <= 8);
    fake_log_clear();
    for (uint32_t i = 0; i < M->n && i < 8; i++) {
        struct kiln_module_arg a;
        kiln_module_arg(M->m, i, &a);
        const char *before = fake_log() + strlen(fake_log());
        if (kiln_cuda_alloc(M->ctx, M->cu, (size_t)a.bytes, &M->dev[i]) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "kiln_cuda_alloc: %s", msg(M->ctx));
            return false;
        }
        M->id[i] = alloc_id(before);
        M->t[i] = (DLTensor){(void *)(uintptr_t)M->dev[i], {kDLCUDA, 0}, a.ndim, a.dl_dtype,
                             (int64_t *)a.shape,           NULL,         0};
        M->a[i] = &M->t[i];
    }
    fake_log_clear();
    return true;
}

/* "a1+0, a2+0, a3+0": the arguments as the fake logs them. */
static const char *
args_str(const struct mod *M, unsigned mask, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < M->n && n < size; i++)
        if (mask >> i & 1)
            n += (size_t)snprintf(buf + n, size - n, "%sa%d+0", n ? ", " : "", M->id[i]);
    return buf;
}

static const char mm_kg[] = "input x: f32[8, 16]\nweight w: f32[16, 16]\n"
                            "y[i, j] += x[i, k] * w[k, j]\noutput y\n";
/* w packed into panels of 4 columns: a weight-derived stage, computed at root (kernel 0) */
static const char mm_pack[] =
    "{\"steps\": [{\"op\": \"pack\", \"stage\": \"w\", \"dim\": 1, \"factor\": 4, \"outer\": 0}]}";

/* The public device API on the fake device. */
static void
test_device(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_cuda *cu = NULL;
    CHECK_EQ_INT(KILN_OK, kiln_cuda_open(ctx, 0, &cu));
    if (!cu) {
        fprintf(stderr, "%s\n", msg(ctx));
        kiln_ctx_free(ctx);
        return;
    }
    CHECK_EQ_STR("kiln fake CUDA device", kiln_cuda_name(cu));
    CHECK_EQ_STR("sm_80", kiln_cuda_arch(cu));
    int      live = fake_live();
    uint64_t d = 0;
    float    in[16], out[16];
    for (int i = 0; i < 16; i++)
        in[i] = (float)i * 0.5f, out[i] = -1;
    CHECK_EQ_INT(KILN_OK, kiln_cuda_alloc(ctx, cu, sizeof in, &d));
    CHECK(d != 0 && d % 256 == 0);
    CHECK_EQ_INT(KILN_OK, kiln_cuda_upload(ctx, cu, d, in, sizeof in));
    CHECK_EQ_INT(KILN_OK, kiln_cuda_download(ctx, cu, out, d, sizeof out));
    CHECK(memcmp(in, out, sizeof in) == 0);
    /* a copy past the allocation: the driver's error, named */
    CHECK_EQ_INT(KILN_ERR_BACKEND, kiln_cuda_download(ctx, cu, out, d + 8, sizeof out));
    CHECK_EQ_STR("cuda: cuMemcpyDtoH_v2 failed: CUDA_ERROR_INVALID_VALUE: fake driver error",
                 msg(ctx));
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(KILN_OK, kiln_cuda_sync(ctx, cu));
    kiln_cuda_free(cu, d);
    CHECK_EQ_INT(live, fake_live());
    fake_fail("cuMemAlloc_v2", 0, 2);
    CHECK_EQ_INT(KILN_ERR_NOMEM, kiln_cuda_alloc(ctx, cu, 64, &d));
    CHECK_EQ_STR("cuda: cuMemAlloc_v2 of 64 bytes failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
                 msg(ctx));
    fake_fail(NULL, 0, 0);
    kiln_cuda_close(cu);
    kiln_ctx_free(ctx);
}

/* Prepared calls: the packing kernel runs in kiln_prepare only, into the handle's device
 * memory, which every prepared call's matmul kernel reads; kiln_call runs both into the call
 * area it keeps. */
static void
test_prepared(void)
{
    struct mod M;
    if (!mod_build(&M, "pk", mm_kg, mm_pack)) {
        mod_free(&M);
        return;
    }
    int64_t     prep = 0;
    const char *pb = strstr(kiln_module_metadata(M.m), "\"prepared_bytes\": ");
    if (pb)
        prep = atoll(pb + 18);
    CHECK_EQ_INT(16 * 16 * 4, prep); /* w packed: as many floats as w */
    /* each kernel takes the arguments it accesses: the packing w, the matmul x and y */
    char w[128], xy[128], want[1024];
    args_str(&M, 2, w, sizeof w);
    args_str(&M, 5, xy, sizeof xy);
    int live = fake_live();

    struct kiln_prepared *p = NULL;
    CHECK_EQ_INT(KILN_OK, kiln_module_prepare(M.ctx, M.m, M.a, (int32_t)M.n, &p, NULL));
    int P = alloc_id(fake_log());
    snprintf(want, sizeof want, "alloc a%d %lld\nlaunch pk_k0(%s, 0, a%d+0)\n", P, (long long)prep,
             w, P);
    check_log(want, "kiln_prepare");
    for (int rep = 0; rep < 2; rep++) {
        fake_log_clear();
        CHECK_EQ_INT(KILN_OK, kiln_module_call_prepared(M.ctx, M.m, p, M.a, (int32_t)M.n, NULL));
        snprintf(want, sizeof want, "launch pk_k1(%s, 0, a%d+0)\n", xy, P);
        check_log(want, "kiln_call_prepared");
    }

    /* kiln_call computes the packed weights into its call area, kept for the next call */
    fake_log_clear();
    CHECK_EQ_INT(KILN_OK, kiln_module_call(M.ctx, M.m, M.a, (int32_t)M.n, NULL));
    int K = alloc_id(fake_log());
    snprintf(want, sizeof want,
             "alloc a%d %lld\nlaunch pk_k0(%s, a%d+0, a%d+0)\nlaunch pk_k1(%s, a%d+0, a%d+0)\n", K,
             (long long)prep, w, K, K, xy, K, K);
    check_log(want, "first kiln_call");
    fake_log_clear();
    CHECK_EQ_INT(KILN_OK, kiln_module_call(M.ctx, M.m, M.a, (int32_t)M.n, NULL));
    snprintf(want, sizeof want, "launch pk_k0(%s, a%d+0, a%d+0)\nlaunch pk_k1(%s, a%d+0, a%d+0)\n",
             w, K, K, xy, K, K);
    check_log(want, "second kiln_call");

    /* a prepared call in another CUDA context: refused before anything is launched */
    int other;
    fake_log_clear();
    CHECK_EQ_INT(0, drv_push(&other));
    int32_t abi = 0;
    CHECK_EQ_INT(KILN_ERR_BACKEND,
                 kiln_module_call_prepared(M.ctx, M.m, p, M.a, (int32_t)M.n, &abi));
    CHECK_EQ_INT(KILN_ABI_ERR_RUNTIME, abi);
    CHECK(strstr(msg(M.ctx), "the prepared handle was made in another CUDA context") != NULL);
    kiln_ctx_error_clear(M.ctx);
    void *popped = NULL;
    CHECK_EQ_INT(0, drv_pop(&popped));
    CHECK(popped == &other);
    check_log("", "a call in another context");

    fake_log_clear();
    kiln_module_prepared_free(M.m, p);
    snprintf(want, sizeof want, "free a%d\n", P);
    check_log(want, "kiln_prepared_free");
    CHECK_EQ_INT(live + 1, fake_live()); /* the kept call area */

    /* no device memory for the handle: an error naming the allocation, no handle, no leak */
    fake_fail("cuMemAlloc_v2", 0, 2);
    p = (void *)1;
    CHECK_EQ_INT(KILN_ERR_NOMEM, kiln_module_prepare(M.ctx, M.m, M.a, (int32_t)M.n, &p, &abi));
    fake_fail(NULL, 0, 0);
    CHECK(p == NULL);
    CHECK_EQ_INT(KILN_ABI_ERR_NOMEM, abi);
    snprintf(want, sizeof want,
             "kiln_prepare: cuMemAlloc_v2 of %lld bytes failed: CUDA_ERROR_OUT_OF_MEMORY: out of "
             "memory (status 8)",
             (long long)prep);
    CHECK_EQ_STR(want, msg(M.ctx));
    kiln_ctx_error_clear(M.ctx);
    /* the packing kernel fails: the handle's memory is freed with it */
    fake_log_clear();
    fake_fail("cuLaunchKernel", 0, 719);
    CHECK_EQ_INT(KILN_ERR_BACKEND, kiln_module_prepare(M.ctx, M.m, M.a, (int32_t)M.n, &p, &abi));
    fake_fail(NULL, 0, 0);
    CHECK(p == NULL);
    CHECK_EQ_STR("the kernel failed: cuLaunchKernel of pk_k0 failed: CUDA_ERROR_LAUNCH_FAILED: "
                 "fake driver error (status 9)",
                 msg(M.ctx));
    kiln_ctx_error_clear(M.ctx);
    P = alloc_id(fake_log());
    snprintf(want, sizeof want, "alloc a%d %lld\nfree a%d\n", P, (long long)prep, P);
    check_log(want, "a failed kiln_prepare");
    CHECK_EQ_INT(live + 1, fake_live());
    mod_free(&M);
}

/* A module without weight-derived buffers: an empty handle, prepared calls are plain calls;
 * its workspace (the matmul's result, read by the relu) is the call area, allocated by the
 * first call, reused by the next, and given back after a failed launch. */
static void
test_workspace(void)
{
    struct mod M;
    if (!mod_build(&M, "ws",
                   "input x: f32[8, 16]\nweight w: f32[16, 16]\n"
                   "t[i, j] += x[i, k] * w[k, j]\ny = relu(t)\noutput y\n",
                   NULL)) {
        mod_free(&M);
        return;
    }
    /* the matmul takes x and w, the relu y */
    char a[128], y[128], want[1024];
    args_str(&M, 3, a, sizeof a);
    args_str(&M, 4, y, sizeof y);
    struct kiln_prepared *p = NULL;
    CHECK_EQ_INT(KILN_OK, kiln_module_prepare(M.ctx, M.m, M.a, (int32_t)M.n, &p, NULL));
    check_log("", "kiln_prepare of a module with nothing to prepare");
    CHECK_EQ_INT(KILN_OK, kiln_module_call_prepared(M.ctx, M.m, p, M.a, (int32_t)M.n, NULL));
    int K = alloc_id(fake_log());
    snprintf(want, sizeof want,
             "alloc a%d 512\nlaunch ws_k0(%s, a%d+0, a%d+512)\nlaunch ws_k1(%s, a%d+0, a%d+512)\n",
             K, a, K, K, y, K, K);
    check_log(want, "the first call");
    fake_log_clear();
    fake_fail("cuLaunchKernel", 1, 719);
    CHECK_EQ_INT(KILN_ERR_BACKEND, kiln_module_call(M.ctx, M.m, M.a, (int32_t)M.n, NULL));
    fake_fail(NULL, 0, 0);
    CHECK_EQ_STR("the kernel failed: cuLaunchKernel of ws_k1 failed: CUDA_ERROR_LAUNCH_FAILED: "
                 "fake driver error (status 9)",
                 msg(M.ctx));
    kiln_ctx_error_clear(M.ctx);
    snprintf(want, sizeof want, "launch ws_k0(%s, a%d+0, a%d+512)\n", a, K, K);
    check_log(want, "a failed call");
    fake_log_clear();
    CHECK_EQ_INT(KILN_OK, kiln_module_call(M.ctx, M.m, M.a, (int32_t)M.n, NULL));
    snprintf(want, sizeof want,
             "launch ws_k0(%s, a%d+0, a%d+512)\nlaunch ws_k1(%s, a%d+0, a%d+512)\n", a, K, K, y, K,
             K);
    check_log(want, "the call after it");
    kiln_module_prepared_free(M.m, p);
    mod_free(&M);
}

struct timed {
    struct mod                 *M;
    const struct kiln_prepared *p;
};

static enum kiln_status
timed_call(kiln_ctx *ctx, void *ud)
{
    struct timed *T = ud;
    return T->p ? kiln_module_call_prepared(ctx, T->M->m, T->p, T->M->a, (int32_t)T->M->n, NULL)
                : kiln_module_call(ctx, T->M->m, T->M->a, (int32_t)T->M->n, NULL);
}

/* kiln_cuda_time around module calls (as kiln run --bench and bench_gpu time them): a
 * prepared call launches one kernel (1 ms on the fake), a plain call two. */
/* A module of 300 weights, one elementwise add each: every launch passes only the arguments
 * its kernel accesses (a kernel used to take all of them, and a module of over 254 arguments,
 * MobileNetV2's 264 say, failed at its first launch). */
static void
test_many_args(void)
{
    enum { NW = 300 };
    struct kiln_buf kg = {0};
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    bool            ok = kiln_buf_printf(ctx, &kg, "input x: f32[4, 4]\n");
    for (int i = 0; ok && i < NW; i++)
        ok = kiln_buf_printf(ctx, &kg, "weight w%d: f32[4, 4]\n", i);
    for (int i = 0; ok && i < NW; i++) {
        char in[16] = "x";
        if (i)
            snprintf(in, sizeof in, "t%d", i - 1);
        ok = kiln_buf_printf(ctx, &kg, "t%d[i, j] = %s[i, j] + w%d[i, j]\n", i, in, i);
    }
    ok = ok && kiln_buf_printf(ctx, &kg, "output t%d\n", NW - 1);
    CHECK(ok);
    struct kiln_graph *g = ok ? PARSE(ctx, kg.data) : NULL;
    char               path[128];
    snprintf(path, sizeof path, "%s/many.so", tmpdir);
    struct kiln_compile_options opt = {.target = "cuda -arch=sm_80", .name = "many"};
    struct kiln_module         *m = NULL;
    struct kiln_cuda           *cu = NULL;
    enum kiln_status st = g ? kiln_graph_compile(ctx, g, &opt, path, NULL) : KILN_ERR_INVALID;
    if (st == KILN_ERR_UNSUPPORTED && strncmp(msg(ctx), "no NVRTC", 8) == 0) {
        harness_skip("no NVRTC: cuda modules cannot be built here");
        kiln_ctx_free(ctx);
        return;
    }
    CHECK_EQ_INT(KILN_OK, st);
    CHECK_EQ_INT(KILN_OK, kiln_module_load(ctx, path, &m));
    unlink(path);
    CHECK_EQ_INT(KILN_OK, kiln_cuda_open(ctx, 0, &cu));
    uint32_t  n = m ? kiln_module_nargs(m) : 0;
    uint64_t *dev = calloc(n + 1, sizeof *dev);
    DLTensor *t = calloc(n + 1, sizeof *t), **a = calloc(n + 1, sizeof *a);
    CHECK_EQ_INT(NW + 2, n);
    ok = m && cu && dev && t && a;
    for (uint32_t i = 0; ok && i < n; i++) {
        struct kiln_module_arg ma;
        ok = kiln_module_arg(m, i, &ma) == KILN_OK
             && kiln_cuda_alloc(ctx, cu, (size_t)ma.bytes, &dev[i]) == KILN_OK;
        t[i] = (DLTensor){(void *)(uintptr_t)dev[i], {kDLCUDA, 0}, ma.ndim, ma.dl_dtype,
                          (int64_t *)ma.shape,       NULL,         0};
        a[i] = &t[i];
    }
    fake_log_clear();
    if (ok)
        CHECK_EQ_INT(KILN_OK, kiln_module_call(ctx, m, a, (int32_t)n, NULL));
    if (!ok || kiln_ctx_error(ctx))
        harness_fail(__FILE__, __LINE__, "%s", msg(ctx));
    /* each launch line: NAME(ARGS, WS, PREP); an add reads x or the workspace and one weight,
     * and writes the workspace or the output: at most 3 arguments, then WS and PREP */
    int launches = 0, most = 0;
    for (const char *l = fake_log(); (l = strstr(l, "launch ")); l++, launches++) {
        const char *end = strchr(l, ')');
        int         commas = 0;
        for (const char *q = l; end && q < end; q++)
            commas += *q == ',';
        most = commas + 1 > most ? commas + 1 : most;
    }
    CHECK(launches > 0);
    CHECK(most <= 5);
    printf("  %d arguments, %d launches, at most %d parameters in one\n", (int)n, launches, most);
    for (uint32_t i = 0; i < n && dev; i++)
        kiln_cuda_free(cu, dev[i]);
    free(dev);
    free(t);
    free(a);
    kiln_cuda_close(cu);
    kiln_module_free(m);
    kiln_ctx_free(ctx);
}

static void
test_time(void)
{
    struct mod M;
    if (!mod_build(&M, "tm", mm_kg, mm_pack)) {
        mod_free(&M);
        return;
    }
    struct timed T = {&M, NULL};
    double       ms = -1;
    CHECK_EQ_INT(KILN_OK, kiln_module_prepare(M.ctx, M.m, M.a, (int32_t)M.n,
                                              (struct kiln_prepared **)&T.p, NULL));
    CHECK_EQ_INT(KILN_OK, kiln_cuda_time(M.ctx, M.cu, timed_call, &T, 5, &ms));
    CHECK_NEAR(1.0, ms, 1e-9);
    kiln_module_prepared_free(M.m, (struct kiln_prepared *)T.p);
    T.p = NULL;
    CHECK_EQ_INT(KILN_OK, kiln_cuda_time(M.ctx, M.cu, timed_call, &T, 4, &ms));
    CHECK_NEAR(2.0, ms, 1e-9);
    mod_free(&M);
}

static const struct test tests[] = {
    {"device", test_device}, {"prepared", test_prepared},   {"workspace", test_workspace},
    {"time", test_time},     {"many_args", test_many_args},
};

/* Runs the tests with the fake driver as libcuda.so.1: re-executes this program with the fake's
 * directory first on LD_LIBRARY_PATH (the dynamic loader reads it at start only). */
int
main(int argc, char **argv)
{
    if (!getenv("KILN_TEST_FAKE_CUDA")) {
        const char *old = getenv("LD_LIBRARY_PATH");
        char        path[4096];
        snprintf(path, sizeof path, "%s%s%s", KILN_FAKE_CUDA_DIR, old && *old ? ":" : "",
                 old ? old : "");
        setenv("LD_LIBRARY_PATH", path, 1);
        setenv("KILN_TEST_FAKE_CUDA", "1", 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "test_cuda_fake: cannot re-execute itself: %s\n", strerror(errno));
        return 1;
    }
    void       *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void       *sym[6] = {NULL};
    const char *names[6] = {"kiln_fake_cuda_log",  "kiln_fake_cuda_log_clear",
                            "kiln_fake_cuda_live", "kiln_fake_cuda_fail",
                            "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2"};
    for (int i = 0; h && i < 6; i++)
        sym[i] = dlsym(h, names[i]);
    if (!h || !sym[0] || !sym[1] || !sym[2] || !sym[3] || !sym[4] || !sym[5]) {
        fprintf(stderr, "test_cuda_fake: the fake driver %s/libcuda.so.1 did not load (%s)\n",
                KILN_FAKE_CUDA_DIR, h ? "it lacks the fake's functions" : dlerror());
        return 1;
    }
    memcpy(&fake_log, &sym[0], sizeof sym[0]);
    memcpy(&fake_log_clear, &sym[1], sizeof sym[1]);
    memcpy(&fake_live, &sym[2], sizeof sym[2]);
    memcpy(&fake_fail, &sym[3], sizeof sym[3]);
    memcpy(&drv_push, &sym[4], sizeof sym[4]);
    memcpy(&drv_pop, &sym[5], sizeof sym[5]);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-fake-cuda-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "test_cuda_fake: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    int rc = harness_main(argc, argv, tests, KILN_COUNTOF(tests));
    rmdir(tmpdir);
    return rc;
}
