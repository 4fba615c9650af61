/* tests/cuda_rt/test_cuda_rt.c -- the CUDA driver layer (runtime/cuda.c). Everywhere: argument
 * checks, and kiln_cuda_open's message on a machine without the driver ("no CUDA driver
 * (libcuda.so.1: ...)") or without a device. Where a device is present: a hand-written kernel
 * compiled by NVRTC for the device's architecture, loaded, run on fresh random inputs (seeded
 * by --seed) and compared with the same function computed on the CPU, then timed with CUDA
 * events; and the driver-side errors (PTX the JIT refuses, a missing kernel, bad launch
 * shapes); and generated modules of the cuda target run through kiln_module_call and through
 * prepared calls (kiln_module_prepare, kiln_module_call_prepared) against the reference; and
 * every library op compiled for the device under several schedules (lib_ops; also runs on the
 * emulating stand-in driver of tests/measure/fake_cuda.c). The device parts skip without a
 * driver or device ("no CUDA driver: ..."). */
#include "../../codegen/codegen.h"
#include "../../codegen/nvrtc.h"
#include "../../ir/scalar.h"
#include "../../passes/passes.h"
#include "../../runtime/cuda.h"
#include "../../tuner/tuner.h"
#include "../cuda_emu.h"
#include "../gen.h"
#include "../harness.h"
#include "kiln.h"
#include "kiln_abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 256 /* the kernel's tile size: blocks must have exactly this many threads */

/* The kernel on the CPU: y[i] = sum_j (j + 1) exp(tile[(t + j) % BLOCK]) within i's block. */
static void
reference(float *y, const float *x, int n)
{
    for (int b = 0; b < n; b += BLOCK)
        for (int t = 0; t < BLOCK && b + t < n; t++) {
            float acc = 0.0f;
            for (int j = 0; j < 4; j++) {
                int   s = b + (t + j) % BLOCK;
                float v = s < n ? x[s] : 0.0f;
                acc += expf(v) * (float)(j + 1);
            }
            y[b + t] = acc;
        }
}

static const char *
msg(const kiln_ctx *ctx)
{
    const struct kiln_error *e = kiln_ctx_error(ctx);
    return e ? e->msg : "";
}

/* Opens device 0, or checks why it cannot be opened and skips with the reason: NULL then. */
static struct kiln_cuda *
open_or_skip(kiln_ctx *ctx)
{
    struct kiln_cuda *cu = NULL;
    int               st = kiln_cuda_open(ctx, 0, &cu);
    if (st == KILN_OK)
        return cu;
    char why[400];
    snprintf(why, sizeof why, "%.300s", msg(ctx));
    CHECK_EQ_INT(KILN_ERR_UNSUPPORTED, st);
    CHECK(cu == NULL);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* the message names the library and says why it did not load */
        CHECK(strncmp(why, "no CUDA driver (libcuda.so.1: ", 30) == 0);
        CHECK(strlen(why) > 31);
    } else {
        CHECK(strstr(why, "no CUDA device") != NULL || strstr(why, "no CUDA driver") != NULL);
        dlclose(h);
    }
    char skip[450];
    snprintf(skip, sizeof skip, "%s%s", strstr(why, "no CUDA driver") ? "no CUDA driver: " : "",
             why);
    harness_skip(skip);
    return NULL;
}

/* Argument checks that need no driver. */
static void
test_args(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_open(NULL, 0, NULL));
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_open(ctx, 0, NULL));
    CHECK_EQ_STR("kiln_cuda_open: out is NULL", msg(ctx));
    kiln_ctx_error_clear(ctx);
    struct kiln_cuda_module *m = (void *)1;
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_module_load(ctx, NULL, ".version 8.0", &m));
    CHECK(m == NULL);
    CHECK_EQ_STR("kiln_cuda_module_load: cu is NULL", msg(ctx));
    kiln_ctx_error_clear(ctx);
    uint64_t d = 1;
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_alloc(ctx, NULL, 16, &d));
    CHECK(d == 0);
    kiln_ctx_error_clear(ctx);
    const uint32_t one[3] = {1, 1, 1};
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_launch(ctx, NULL, "k", one, one, 0, NULL));
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_sync(ctx, NULL));
    kiln_ctx_error_clear(ctx);
    double ms = -1;
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_time(ctx, NULL, NULL, NULL, 10, &ms));
    CHECK(ms == 0);
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_upload(ctx, NULL, 0, NULL, 4));
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_download(ctx, NULL, NULL, 0, 4));
    CHECK(kiln_cuda_arch(NULL) == NULL);
    CHECK(kiln_cuda_name(NULL) == NULL);
    kiln_cuda_close(NULL);
    kiln_cuda_module_free(NULL);
    kiln_cuda_free(NULL, 0);
    kiln_ctx_free(ctx);
}

/* kiln_cuda_open: its error without a driver or device, an ordinal out of range with one. */
static void
test_open(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_cuda *cu = open_or_skip(ctx);
    if (cu) {
        printf("device 0: %s (%s)\n", kiln_cuda_name(cu), kiln_cuda_arch(cu));
        CHECK(strncmp(kiln_cuda_arch(cu), "sm_", 3) == 0);
        CHECK(kiln_cuda_name(cu)[0] != 0);
        struct kiln_cuda *bad = (void *)1;
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_open(ctx, 1 << 20, &bad));
        CHECK(bad == NULL);
        CHECK(strstr(msg(ctx), "does not exist") != NULL);
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_open(ctx, -1, &bad));
        /* a second handle on the same device shares its primary context */
        struct kiln_cuda *again = NULL;
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_OK, kiln_cuda_open(ctx, 0, &again));
        kiln_cuda_close(again);
        kiln_cuda_close(cu);
    }
    kiln_ctx_free(ctx);
}

struct launch {
    struct kiln_cuda_module *m;
    uint64_t                 y, x;
    int                      n;
};

static enum kiln_status
launch_k(kiln_ctx *ctx, void *ud)
{
    struct launch *l = ud;
    void          *args[] = {&l->y, &l->x, &l->n};
    const uint32_t grid[3] = {(uint32_t)((l->n + BLOCK - 1) / BLOCK), 1, 1};
    const uint32_t block[3] = {BLOCK, 1, 1};
    return kiln_cuda_launch(ctx, l->m, "k", grid, block, 0, args);
}

/* Compiles, loads, runs and times the kernel; compares with the CPU. */
static void
test_kernel(void)
{
    kiln_ctx   *ctx = kiln_ctx_new(NULL);
    const char *ptx = NULL;
    if (kiln_nvrtc_available()) { /* what runs without a device: the kernel compiles */
        CHECK_EQ_INT(KILN_OK, kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "kiln_kernel.cu", "sm_80",
                                             false, &ptx));
        CHECK(ptx && strstr(ptx, ".entry k(") != NULL);
        kiln_ctx_error_clear(ctx);
    }
    struct kiln_cuda *cu = open_or_skip(ctx);
    if (!cu) {
        kiln_ctx_free(ctx);
        return;
    }
    int st = kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "kiln_kernel.cu", kiln_cuda_arch(cu), false,
                            &ptx);
    if (st == KILN_ERR_UNSUPPORTED) {
        char why[400];
        snprintf(why, sizeof why, "no NVRTC for %s: %.300s", kiln_cuda_arch(cu), msg(ctx));
        harness_skip(why);
        kiln_cuda_close(cu);
        kiln_ctx_free(ctx);
        return;
    }
    CHECK_EQ_INT(KILN_OK, st);
    struct launch l = {0};
    if (st == KILN_OK)
        CHECK_EQ_INT(KILN_OK, kiln_cuda_module_load(ctx, cu, ptx, &l.m));
    if (!l.m) {
        fprintf(stderr, "%s\n", msg(ctx));
        kiln_cuda_close(cu);
        kiln_ctx_free(ctx);
        return;
    }

    struct kiln_rng rng = kiln_rng_new(opt_seed());
    l.n = (1 << 20) + 1 + (int)kiln_rng_below(&rng, BLOCK - 1); /* a partial last block */
    printf("inputs: %d floats from seed %llu\n", l.n, (unsigned long long)opt_seed());
    size_t bytes = (size_t)l.n * sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes), *want = malloc(bytes);
    CHECK(x && y && want);
    for (int i = 0; x && y && i < l.n; i++) {
        x[i] = (float)(4 * kiln_rng_uniform(&rng) - 2);
        y[i] = NAN;
    }
    if (x && y && want) {
        reference(want, x, l.n);
        CHECK_EQ_INT(KILN_OK, kiln_cuda_alloc(ctx, cu, bytes, &l.x));
        CHECK_EQ_INT(KILN_OK, kiln_cuda_alloc(ctx, cu, bytes, &l.y));
        CHECK_EQ_INT(KILN_OK, kiln_cuda_upload(ctx, cu, l.x, x, bytes));
        CHECK_EQ_INT(KILN_OK, kiln_cuda_upload(ctx, cu, l.y, y, bytes)); /* NaN: unwritten */
        CHECK_EQ_INT(KILN_OK, launch_k(ctx, &l));
        CHECK_EQ_INT(KILN_OK, kiln_cuda_sync(ctx, cu));
        CHECK_EQ_INT(KILN_OK, kiln_cuda_download(ctx, cu, y, l.y, bytes));
        int bad = 0;
        for (int i = 0; i < l.n; i++)
            if (!(fabsf(y[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i]))) && bad++ < 5)
                harness_fail(__FILE__, __LINE__, "y[%d] = %.9g, want %.9g (x = %.9g)", i,
                             (double)y[i], (double)want[i], (double)x[i]);
        CHECK_EQ_INT(0, bad);

        double ms = 0;
        CHECK_EQ_INT(KILN_OK, kiln_cuda_time(ctx, cu, launch_k, &l, 50, &ms));
        CHECK(ms > 0);
        printf("k on %s (%s): %.4f ms median of 50, %.1f GB/s\n", kiln_cuda_name(cu),
               kiln_cuda_arch(cu), ms, ms > 0 ? 2.0 * (double)bytes / (ms * 1e6) : 0.0);
        if (!kiln_ok(ctx))
            fprintf(stderr, "%s\n", msg(ctx));
    }
    free(x);
    free(y);
    free(want);
    kiln_cuda_free(cu, l.x);
    kiln_cuda_free(cu, l.y);
    kiln_cuda_module_free(l.m);
    kiln_cuda_close(cu);
    kiln_ctx_free(ctx);
}

static enum kiln_status
failing(kiln_ctx *ctx, void *ud)
{
    (void)ud;
    return KILN_FAIL(ctx, KILN_ERR_INVALID, "test", "failing on purpose");
}

/* Errors the driver reports: PTX its JIT refuses, a kernel the module lacks, launch shapes,
 * a failing timed function. */
static void
test_driver_errors(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_cuda *cu = open_or_skip(ctx);
    if (!cu) {
        kiln_ctx_free(ctx);
        return;
    }
    struct kiln_cuda_module *m = (void *)1;
    CHECK_EQ_INT(KILN_ERR_BACKEND, kiln_cuda_module_load(ctx, cu, "this is not PTX", &m));
    CHECK(m == NULL);
    CHECK(strstr(msg(ctx), "cuModuleLoadDataEx") != NULL);
    printf("bad PTX: %s\n", msg(ctx));
    kiln_ctx_error_clear(ctx);

    const char *ptx = NULL;
    if (kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", kiln_cuda_arch(cu), false, &ptx)
            == KILN_OK
        && kiln_cuda_module_load(ctx, cu, ptx, &m) == KILN_OK) {
        /* the JIT's log is the detail: corrupt the kernel's return as tests/nvrtc does */
        char *bad = kiln_arena_strdup(ctx, ptx), *ret = bad ? strstr(bad, "ret;") : NULL;
        struct kiln_cuda_module *m2 = NULL;
        CHECK(ret != NULL);
        if (ret) {
            ret[1] = 'x';
            CHECK_EQ_INT(KILN_ERR_BACKEND, kiln_cuda_module_load(ctx, cu, bad, &m2));
            const struct kiln_error *e = kiln_ctx_error(ctx);
            printf("corrupted PTX: %s\n  detail: %s\n", msg(ctx),
                   e && e->detail ? e->detail : "(none)");
            CHECK(e && e->detail && strstr(e->detail, "rxt") != NULL);
            kiln_cuda_module_free(m2);
            kiln_ctx_error_clear(ctx);
        }
        const uint32_t one[3] = {1, 1, 1}, zero[3] = {0, 1, 1};
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_launch(ctx, m, "nope", one, one, 0, NULL));
        CHECK(strstr(msg(ctx), "no kernel named \"nope\"") != NULL);
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_launch(ctx, m, "k", zero, one, 0, NULL));
        kiln_ctx_error_clear(ctx);
        uint64_t d = 0;
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_alloc(ctx, cu, 0, &d));
        kiln_ctx_error_clear(ctx);
        double ms = -1;
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_time(ctx, cu, failing, NULL, 5, &ms));
        CHECK_EQ_STR("failing on purpose", msg(ctx));
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_cuda_time(ctx, cu, failing, NULL, 0, &ms));
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_OK, kiln_cuda_sync(ctx, cu));
        kiln_cuda_module_free(m);
    } else if (kiln_nvrtc_available()) {
        harness_fail(__FILE__, __LINE__, "compiling or loading the kernel: %s", msg(ctx));
    }
    kiln_cuda_close(cu);
    kiln_ctx_free(ctx);
}

/* A generated module of the cuda target (codegen/cuda_so.c): tests/gen.c's shared-memory
 * matmul compiled to a shared object, loaded with kiln_module_load. Everywhere: its metadata
 * names the target, CPU tensors are refused, and without a driver the call fails saying so.
 * On a GPU: fresh random inputs in device memory, the call, and every output element against
 * the reference interpreter. */
static void
test_module(void)
{
    if (!kiln_nvrtc_available()) {
        harness_skip("no NVRTC: the CUDA toolkit's libnvrtc could not be loaded");
        return;
    }
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_cuda *cu = NULL;
    bool              gpu = kiln_cuda_open(ctx, 0, &cu) == KILN_OK;
    char              target[64], so[] = "kiln_test_cuda_module_XXXXXX.so";
    kiln_ctx_error_clear(ctx);
    struct kiln_graph *g = PARSE(ctx, kiln_test_shared_matmul_kg);
    snprintf(target, sizeof target, "cuda -arch=%s", gpu ? kiln_cuda_arch(cu) : "sm_80");
    struct kiln_compile_options opt = {.target = target,
                                       .schedule_json = kiln_test_shared_matmul,
                                       .schedule_len = strlen(kiln_test_shared_matmul),
                                       .name = "smm"};
    int                         fd = mkstemps(so, 3);
    struct kiln_module         *m = NULL;
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    if (!g || fd < 0 || kiln_graph_compile(ctx, g, &opt, so, NULL) != KILN_OK
        || kiln_module_load(ctx, so, &m) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s", msg(ctx));
        unlink(so);
        kiln_cuda_close(cu);
        kiln_ctx_free(ctx);
        return;
    }
    unlink(so);
    CHECK(strstr(kiln_module_metadata(m), target) != NULL);
    CHECK_EQ_INT(3, kiln_module_nargs(m));
    CHECK_EQ_INT(kDLCUDA, kiln_module_device(m));
    /* A [40, 24], B [24, 36], C [40, 36] */
    int64_t         sh[3][2] = {{40, 24}, {24, 36}, {40, 36}};
    float          *host[3];
    uint64_t        dev[3] = {0, 0, 0};
    DLTensor        t[3];
    DLTensor       *args[3] = {&t[0], &t[1], &t[2]};
    struct kiln_rng rng = kiln_rng_new(opt_seed());
    for (int i = 0; i < 3; i++) {
        host[i] = malloc(sizeof(float) * (size_t)(sh[i][0] * sh[i][1]));
        for (int64_t e = 0; host[i] && e < sh[i][0] * sh[i][1]; e++)
            host[i][e] = i < 2 ? (float)(2 * kiln_rng_uniform(&rng) - 1) : NAN;
        t[i] = (DLTensor){host[i], {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sh[i], NULL, 0};
    }
    int32_t abi = 0;
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_call(ctx, m, args, 3, &abi));
    CHECK(strstr(msg(ctx), "is on device cpu:0; this code runs on cuda") != NULL);
    kiln_ctx_error_clear(ctx);
    if (!gpu) { /* device tensors that are never touched: the call stops at the driver */
        for (int i = 0; i < 3; i++)
            t[i].device.device_type = kDLCUDA;
        CHECK(kiln_module_call(ctx, m, args, 3, &abi) != KILN_OK);
        CHECK_EQ_INT(KILN_ABI_ERR_RUNTIME, abi);
        printf("without a driver: %s\n", msg(ctx));
        CHECK(strstr(msg(ctx), "no CUDA driver") != NULL);
        kiln_ctx_error_clear(ctx);
        for (int i = 0; i < 3; i++)
            free(host[i]);
        kiln_module_free(m);
        kiln_ctx_free(ctx);
        harness_skip("no CUDA driver: the module was built and loaded, not run");
        return;
    }
    for (int i = 0; i < 3; i++) {
        size_t bytes = sizeof(float) * (size_t)(sh[i][0] * sh[i][1]);
        CHECK_EQ_INT(KILN_OK, kiln_cuda_alloc(ctx, cu, bytes, &dev[i]));
        CHECK_EQ_INT(KILN_OK, kiln_cuda_upload(ctx, cu, dev[i], host[i], bytes));
        t[i].data = (void *)(uintptr_t)dev[i];
        t[i].device.device_type = kDLCUDA;
    }
    CHECK_EQ_INT(KILN_OK, kiln_module_call(ctx, m, args, 3, &abi));
    if (!kiln_ok(ctx))
        fprintf(stderr, "%s\n", msg(ctx));
    CHECK_EQ_INT(KILN_OK, kiln_cuda_download(ctx, cu, host[2], dev[2], sizeof(float) * 40 * 36));
    int bad = 0;
    for (int i = 0; i < 40; i++)
        for (int j = 0; j < 36; j++) {
            double want = 0;
            for (int k = 0; k < 24; k++)
                want += (double)host[0][i * 24 + k] * host[1][k * 36 + j];
            if (!(fabs(host[2][i * 36 + j] - want) <= 1e-5 * (1 + fabs(want))) && bad++ < 5)
                harness_fail(__FILE__, __LINE__, "C[%d, %d] = %.9g, want %.9g", i, j,
                             (double)host[2][i * 36 + j], want);
        }
    CHECK_EQ_INT(0, bad);
    printf("module on %s (%s): C matches the reference (seed %llu)\n", kiln_cuda_name(cu),
           kiln_cuda_arch(cu), (unsigned long long)opt_seed());
    for (int i = 0; i < 3; i++) {
        kiln_cuda_free(cu, dev[i]);
        free(host[i]);
    }
    kiln_module_free(m);
    kiln_cuda_close(cu);
    kiln_ctx_free(ctx);
}

/* Prepared calls of a cuda module on a GPU: a matmul whose schedule packs the weight into
 * panels (a weight-derived stage: kiln_prepare computes it once into device memory) and binds
 * the product to blocks and threads. kiln_call, and kiln_prepare + kiln_call_prepared (twice,
 * the second after the input changed), must match the reference interpreter, and the prepared
 * call must give exactly the plain call's result. Which kernels each launches is checked
 * without a GPU by tests/cuda_fake. */
static void
test_prepared(void)
{
    if (!kiln_nvrtc_available()) {
        harness_skip("no NVRTC: the CUDA toolkit's libnvrtc could not be loaded");
        return;
    }
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_cuda *cu = open_or_skip(ctx);
    if (!cu) {
        kiln_ctx_free(ctx);
        return;
    }
    static const char kg[] = "input x: f32[37, 24]\nweight w: f32[24, 40]\n"
                             "y[i, j] += x[i, k] * w[k, j]\noutput y\n";
    static const char sched[] =
        "{\"steps\": [{\"op\": \"pack\", \"stage\": \"w\", \"dim\": 1, \"factor\": 8, "
        "\"outer\": 0},"
        "{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"i\", \"factors\": [8]},"
        "{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"j\", \"factors\": [8]},"
        "{\"op\": \"reorder\", \"stage\": \"y\", \"order\": [\"i.0\", \"j.0\", \"i.1\", "
        "\"j.1\"]},"
        "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"i.0\", \"thread\": \"blockIdx.y\"},"
        "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"j.0\", \"thread\": \"blockIdx.x\"},"
        "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"i.1\", \"thread\": \"threadIdx.y\"},"
        "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"j.1\", \"thread\": "
        "\"threadIdx.x\"}]}";
    char               target[64], so[] = "kiln_test_cuda_prepared_XXXXXX.so";
    struct kiln_graph *g = PARSE(ctx, kg);
    snprintf(target, sizeof target, "cuda -arch=%s", kiln_cuda_arch(cu));
    struct kiln_compile_options opt = {
        .target = target, .schedule_json = sched, .schedule_len = strlen(sched), .name = "pmm"};
    int                 fd = mkstemps(so, 3);
    struct kiln_module *m = NULL;
    if (fd >= 0)
        close(fd);
    if (!g || fd < 0 || kiln_graph_compile(ctx, g, &opt, so, NULL) != KILN_OK
        || kiln_module_load(ctx, so, &m) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s", msg(ctx));
        unlink(so);
        kiln_cuda_close(cu);
        kiln_ctx_free(ctx);
        return;
    }
    unlink(so);
    CHECK(strstr(kiln_module_metadata(m), "\"prepared_bytes\": 0") == NULL);
    int64_t         sh[3][2] = {{37, 24}, {24, 40}, {37, 40}};
    size_t          bytes[3];
    float          *host[3], *plain = malloc(sizeof(float) * 37 * 40);
    uint64_t        dev[3] = {0, 0, 0};
    DLTensor        t[3];
    DLTensor       *args[3] = {&t[0], &t[1], &t[2]};
    struct kiln_rng rng = kiln_rng_new(opt_seed());
    for (int i = 0; i < 3; i++) {
        bytes[i] = sizeof(float) * (size_t)(sh[i][0] * sh[i][1]);
        host[i] = malloc(bytes[i]);
        for (int64_t e = 0; host[i] && e < sh[i][0] * sh[i][1]; e++)
            host[i][e] = i < 2 ? (float)(2 * kiln_rng_uniform(&rng) - 1) : NAN;
        CHECK_EQ_INT(KILN_OK, kiln_cuda_alloc(ctx, cu, bytes[i], &dev[i]));
        CHECK_EQ_INT(KILN_OK, kiln_cuda_upload(ctx, cu, dev[i], host[i], bytes[i]));
        t[i] = (DLTensor){
            (void *)(uintptr_t)dev[i], {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, sh[i], NULL, 0};
    }
    /* y against the reference, in double */
#define CHECK_Y(what)                                                                             \
    do {                                                                                          \
        int bad_ = 0;                                                                             \
        for (int i = 0; i < 37; i++)                                                              \
            for (int j = 0; j < 40; j++) {                                                        \
                double want = 0;                                                                  \
                for (int k = 0; k < 24; k++)                                                      \
                    want += (double)host[0][i * 24 + k] * host[1][k * 40 + j];                    \
                if (!(fabs(host[2][i * 40 + j] - want) <= 1e-5 * (1 + fabs(want))) && bad_++ < 5) \
                    harness_fail(__FILE__, __LINE__, "%s: y[%d, %d] = %.9g, want %.9g", what, i,  \
                                 j, (double)host[2][i * 40 + j], want);                           \
            }                                                                                     \
    } while (0)
    CHECK_EQ_INT(KILN_OK, kiln_module_call(ctx, m, args, 3, NULL));
    CHECK_EQ_INT(KILN_OK, kiln_cuda_download(ctx, cu, host[2], dev[2], bytes[2]));
    CHECK_Y("kiln_call");
    memcpy(plain, host[2], bytes[2]);
    struct kiln_prepared *p = NULL;
    CHECK_EQ_INT(KILN_OK, kiln_module_prepare(ctx, m, args, 3, &p, NULL));
    for (int rep = 0; rep < 2; rep++) {
        for (int64_t e = 0; e < 37 * 40; e++)
            host[2][e] = NAN;
        CHECK_EQ_INT(KILN_OK, kiln_cuda_upload(ctx, cu, dev[2], host[2], bytes[2]));
        CHECK_EQ_INT(KILN_OK, kiln_module_call_prepared(ctx, m, p, args, 3, NULL));
        CHECK_EQ_INT(KILN_OK, kiln_cuda_download(ctx, cu, host[2], dev[2], bytes[2]));
        CHECK_Y("kiln_call_prepared");
        if (rep == 0)
            CHECK(memcmp(plain, host[2], bytes[2]) == 0); /* the same kernels, the same bits */
        for (int64_t e = 0; e < 37 * 24; e++) /* a new input: the prepared weights still hold */
            host[0][e] = (float)(2 * kiln_rng_uniform(&rng) - 1);
        CHECK_EQ_INT(KILN_OK, kiln_cuda_upload(ctx, cu, dev[0], host[0], bytes[0]));
    }
#undef CHECK_Y
    if (!kiln_ok(ctx))
        fprintf(stderr, "%s\n", msg(ctx));
    printf("prepared calls on %s (%s): y matches the reference and the plain call (seed %llu)\n",
           kiln_cuda_name(cu), kiln_cuda_arch(cu), (unsigned long long)opt_seed());
    kiln_module_prepared_free(m, p);
    for (int i = 0; i < 3; i++) {
        kiln_cuda_free(cu, dev[i]);
        free(host[i]);
    }
    free(plain);
    kiln_module_free(m);
    kiln_cuda_close(cu);
    kiln_ctx_free(ctx);
}

/* ---- every library op on the device ---- */

/* The schedules each library op runs under: the default (one thread per kernel), the GPU
 * schedule of tests/gen.c, and a program of each of its first GPU sketches (tuner/sketch_gpu.c). */
#define LIBOP_SKETCHES 4

/* Fills argument a's host copy with random values as `kiln run` does (floats in [-1, 1],
 * booleans 0/1, integers in [-4, 4], unsigned in [0, 8]), keeping them as doubles in vals. */
static void
libop_fill(const struct kiln_module_arg *a, void *data, double *vals, int64_t n, struct kiln_rng *r)
{
    for (int64_t i = 0; i < n; i++) {
        double v;
        if (kiln_dtype_is_float(a->dtype))
            v = 2 * kiln_rng_uniform(r) - 1;
        else if (a->dtype == KILN_DTYPE_BOOL)
            v = (double)kiln_rng_below(r, 2);
        else
            v = (double)kiln_rng_below(r, 9) - (kiln_dtype_is_unsigned(a->dtype) ? 0 : 4);
        vals[i] = kiln_scalar_store(a->dtype, data, i, v);
    }
}

/* Runs the module so (g compiled for the device) on cu: random inputs from seed uploaded, the
 * call, every output downloaded and compared with the reference interpreter (floats within
 * 1e-4 of the largest magnitude, as the tuner's check; integers exactly). 1 pass, 0 fail, -1
 * when the reference refuses the random inputs (not counted). */
static int
libop_run(kiln_ctx *ctx, struct kiln_cuda *cu, const struct kiln_graph *g, const char *so,
          const char *what, uint64_t seed)
{
    struct kiln_module *m = NULL;
    if (kiln_module_load(ctx, so, &m) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s: %s", what, msg(ctx));
        return 0;
    }
    uint32_t na = kiln_graph_nargs(g), n = kiln_module_nargs(m);
    if (n != na + kiln_graph_noutputs(g)) {
        harness_fail(__FILE__, __LINE__, "%s: the module takes %u tensors, the graph %u", what, n,
                     na + kiln_graph_noutputs(g));
        kiln_module_free(m);
        return 0;
    }
    struct kiln_module_arg a[16];
    void                  *host[16] = {0};
    double                *vals[16] = {0};
    uint64_t               dev[16] = {0};
    DLTensor               t[16], *args[16];
    struct kiln_rng        r = kiln_rng_new(seed);
    int                    res = n <= 16;
    if (!res)
        harness_fail(__FILE__, __LINE__, "%s: %u tensors, more than this test holds", what, n);
    for (uint32_t i = 0; res == 1 && i < n; i++) {
        res = kiln_module_arg(m, i, &a[i]) == KILN_OK;
        int64_t numel = 1;
        for (int d = 0; res && d < a[i].ndim; d++)
            numel *= a[i].shape[d];
        host[i] = res ? calloc(1, (size_t)a[i].bytes + 16) : NULL;
        vals[i] = res ? calloc((size_t)numel + 1, sizeof(double)) : NULL;
        res = host[i] && vals[i];
        if (res && i < na)
            libop_fill(&a[i], host[i], vals[i], numel, &r);
        else if (res) /* outputs: NaN or 0xff bytes, so an element never written shows */
            for (int64_t e = 0; e < numel; e++)
                kiln_scalar_store(a[i].dtype, host[i], e,
                                  kiln_dtype_is_float(a[i].dtype) ? NAN : -1.0);
        res = res && kiln_cuda_alloc(ctx, cu, (size_t)a[i].bytes + 16, &dev[i]) == KILN_OK
              && kiln_cuda_upload(ctx, cu, dev[i], host[i], (size_t)a[i].bytes) == KILN_OK;
        t[i] = (DLTensor){(void *)(uintptr_t)dev[i], {kDLCUDA, 0}, a[i].ndim, a[i].dl_dtype,
                          (int64_t *)a[i].shape,     NULL,         0};
        args[i] = &t[i];
    }
    res = res && kiln_module_call(ctx, m, args, (int32_t)n, NULL) == KILN_OK;
    for (uint32_t i = na; res && i < n; i++)
        res = kiln_cuda_download(ctx, cu, host[i], dev[i], (size_t)a[i].bytes) == KILN_OK;
    if (!res && n <= 16)
        harness_fail(__FILE__, __LINE__, "%s: %s", what, msg(ctx));
    /* the reference in double precision, on the inputs as stored */
    double *want[16] = {0};
    for (uint32_t i = na; res && i < n; i++) {
        want[i] = calloc((size_t)kiln_graph_tensor_numel(g, kiln_graph_output(g, i - na)) + 1,
                         sizeof(double));
        res = want[i] != NULL;
    }
    if (res && kiln_graph_eval(ctx, g, (const double *const *)vals, want + na) != KILN_OK) {
        printf("  %s: the reference refused the random inputs: %s\n", what, msg(ctx));
        kiln_ctx_error_clear(ctx);
        res = -1;
    }
    double scale = 0;
    for (uint32_t i = 0; res == 1 && i < n; i++)
        for (int64_t e = 0; e < kiln_graph_tensor_numel(g, i < na ? kiln_graph_arg(g, i)
                                                                  : kiln_graph_output(g, i - na));
             e++)
            scale = fmax(scale, fabs(i < na ? vals[i][e] : want[i][e]));
    for (uint32_t i = na; res == 1 && i < n; i++) {
        int64_t numel = kiln_graph_tensor_numel(g, kiln_graph_output(g, i - na));
        int     bad = 0;
        for (int64_t e = 0; e < numel; e++) {
            double got = kiln_scalar_load(a[i].dtype, host[i], e), w = want[i][e];
            bool   ok = got == w || (isnan(got) && isnan(w));
            if (!ok && kiln_dtype_is_float(a[i].dtype) && !isinf(w))
                ok = fabs(got - w) <= 1e-4 * (1 + scale);
            if (!ok && bad++ < 3)
                harness_fail(__FILE__, __LINE__, "%s (seed %llu): %s[%lld] = %.9g, want %.9g", what,
                             (unsigned long long)seed, a[i].name, (long long)e, got, w);
        }
        if (bad)
            res = 0;
    }
    for (uint32_t i = 0; i < n && i < 16; i++) {
        kiln_cuda_free(cu, dev[i]);
        free(host[i]);
        free(vals[i]);
        free(want[i]);
    }
    kiln_module_free(m);
    return res;
}

/* Compiles case text under json (NULL: the default schedule) for target into dir and runs it
 * (libop_run); with the emulating stand-in driver (tests/measure/fake_cuda.c) the module's
 * emulation is built beside it. */
static int
libop_case(kiln_ctx *ctx, struct kiln_cuda *cu, const struct kiln_graph *g, const char *json,
           const char *target, const char *dir, bool emu, const char *what, uint64_t seed)
{
    static unsigned serial; /* a new name for each module: dlopen and the stand-in driver
                             * keep what they loaded by its path */
    char so[PATH_MAX];
    snprintf(so, sizeof so, "%s/m%u.so", dir, serial++);
    struct kiln_compile_options o = {.target = target,
                                     .schedule_json = json,
                                     .schedule_len = json ? strlen(json) : 0,
                                     .name = "op"};
    if (kiln_graph_compile(ctx, g, &o, so, NULL) != KILN_OK
        || (emu && kiln_test_emu_module(ctx, g, &o, so, NULL) != KILN_OK)) {
        harness_fail(__FILE__, __LINE__, "%s: compiling for %s: %s", what, target, msg(ctx));
        kiln_ctx_error_clear(ctx);
        return 0;
    }
    int  res = libop_run(ctx, cu, g, so, what, seed);
    char emu_so[PATH_MAX + 8];
    snprintf(emu_so, sizeof emu_so, "%s.emu", so);
    unlink(so);
    unlink(emu_so);
    return res;
}

/* Every library op (tests/gen.c's cases) compiled for the device and run through
 * kiln_module_call against the reference interpreter: under the default schedule, the GPU
 * schedule and a program of each of its first GPU sketches. KILN_TEST_SHARD=I/N runs only the
 * cases whose index is I modulo N (the device check script runs shards at once). With the
 * stand-in driver of tests/measure/fake_cuda.c first on LD_LIBRARY_PATH the kernels run
 * emulated on CPU threads, so this runs without a GPU too (slowly: one C++ compile a module). */
static void
test_lib_ops(void)
{
    if (!kiln_nvrtc_available()) {
        harness_skip("no NVRTC: the CUDA toolkit's libnvrtc could not be loaded");
        return;
    }
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_cuda *cu = open_or_skip(ctx);
    if (!cu) {
        kiln_ctx_free(ctx);
        return;
    }
    unsigned    shard = 0, nshard = 1;
    const char *sh = getenv("KILN_TEST_SHARD");
    if (sh && (sscanf(sh, "%u/%u", &shard, &nshard) != 2 || nshard == 0 || shard >= nshard)) {
        harness_fail(__FILE__, __LINE__, "KILN_TEST_SHARD=%s: expected I/N with I < N", sh);
        kiln_cuda_close(cu);
        kiln_ctx_free(ctx);
        return;
    }
    bool emu = strstr(kiln_cuda_name(cu), "kiln emulated GPU") != NULL;
    char target[64], dir[] = "/tmp/kiln_test_libops_XXXXXX";
    snprintf(target, sizeof target, "cuda -arch=%s", kiln_cuda_arch(cu));
    printf("library ops on %s (%s), shard %u of %u\n", kiln_cuda_name(cu), kiln_cuda_arch(cu),
           shard, nshard);
    if (!mkdtemp(dir)) {
        harness_fail(__FILE__, __LINE__, "mkdtemp: %s", strerror(errno));
        kiln_cuda_close(cu);
        kiln_ctx_free(ctx);
        return;
    }
    uint32_t pass = 0, fail = 0, refused = 0;
    for (size_t i = shard; i < kiln_test_nop_cases; i += nshard) {
        kiln_ctx           *c = kiln_ctx_new(NULL);
        struct kiln_graph  *g = PARSE(c, kiln_test_op_cases[i]);
        struct kiln_target  tg;
        struct kiln_hw      hw;
        struct kiln_sketch *sks = NULL;
        uint32_t            nsk = 0;
        if (g && kiln_cg_target_parse(c, target, &tg) == KILN_OK) {
            kiln_hw_from_target(&tg, &hw);
            if (kiln_sketches_generate(c, g, &hw, &sks, &nsk) != KILN_OK) {
                harness_fail(__FILE__, __LINE__, "op case %zu: no GPU sketches: %s", i, msg(c));
                nsk = 0;
            }
        }
        for (uint32_t k = 0; g && k < 2 + (nsk < LIBOP_SKETCHES ? nsk : LIBOP_SKETCHES); k++) {
            char                 what[96];
            struct kiln_schedule s = {0};
            struct kiln_buf      js = {0};
            bool                 ok = true;
            uint64_t             seed = opt_seed() + 97 * i + k;
            if (k == 1) {
                ok = kiln_test_gpu_schedule(c, g, &s);
                snprintf(what, sizeof what, "op case %zu, GPU schedule", i);
            } else if (k >= 2) {
                struct kiln_rng  r = kiln_rng_new(seed);
                struct kiln_prog p;
                kiln_prog_sample(&sks[k - 2], &r, &p);
                ok = kiln_prog_schedule(c, g, &sks[k - 2], &p, &s) == KILN_OK;
                snprintf(what, sizeof what, "op case %zu, GPU sketch %u (%s)", i, k - 2,
                         sks[k - 2].desc);
            } else {
                snprintf(what, sizeof what, "op case %zu, default schedule", i);
            }
            ok = ok && (k == 0 || kiln_sched_to_json(c, &s, &js) == KILN_OK);
            int res = 0;
            if (!ok)
                harness_fail(__FILE__, __LINE__, "%s: no schedule: %s", what, msg(c));
            else
                res = libop_case(c, cu, g, k ? js.data : NULL, target, dir, emu, what, seed);
            pass += res == 1;
            fail += res == 0;
            refused += res < 0;
        }
        kiln_ctx_free(c);
    }
    rmdir(dir);
    printf("library ops on %s: %u programs matched the reference, %u did not, %u inputs the "
           "reference refused (seed %llu)\n",
           kiln_cuda_name(cu), pass, fail, refused, (unsigned long long)opt_seed());
    CHECK(pass > 0);
    kiln_cuda_close(cu);
    kiln_ctx_free(ctx);
}

static const struct test tests[] = {
    {"module", test_module},   {"prepared", test_prepared}, {"args", test_args},
    {"open", test_open},       {"kernel", test_kernel},     {"driver_errors", test_driver_errors},
    {"lib_ops", test_lib_ops},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
