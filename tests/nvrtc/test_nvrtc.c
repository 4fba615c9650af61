/* tests/nvrtc/test_nvrtc.c -- CUDA C to PTX with NVRTC and the ptxas check (codegen/nvrtc.c),
 * on machines with the CUDA toolkit and no GPU: a hand-written kernel (grid indexing, a loop,
 * expf, a __shared__ array, __syncthreads) compiles for sm_80 and sm_90 and ptxas accepts the
 * PTX; --use_fast_math shows in the PTX; a syntax error is KILN_ERR_BACKEND with NVRTC's log
 * in the detail; malformed and unsupported architectures; PTX that ptxas refuses. Tests that
 * need NVRTC skip when it cannot be loaded, except where the toolkit is installed at
 * /usr/local/cuda: a library that is there but does not load is a failure. */
#include "../../codegen/nvrtc.h"
#include "../gen.h"
#include "../harness.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The error message of ctx, or "" */
static const char *
msg(const kiln_ctx *ctx)
{
    const struct kiln_error *e = kiln_ctx_error(ctx);
    return e ? e->msg : "";
}

static const char *
detail(const kiln_ctx *ctx)
{
    const struct kiln_error *e = kiln_ctx_error(ctx);
    return e && e->detail ? e->detail : "";
}

/* True when NVRTC can be used; otherwise skips (or fails, when the toolkit is installed at the
 * standard prefix and its NVRTC does not load). */
static bool
need_nvrtc(void)
{
    if (kiln_nvrtc_available())
        return true;
    kiln_ctx   *ctx = kiln_ctx_new(NULL);
    const char *ptx;
    char        why[400];
    kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", "sm_80", false, &ptx);
    snprintf(why, sizeof why, "no NVRTC: %.300s", msg(ctx));
    if (access("/usr/local/cuda/lib64/libnvrtc.so", F_OK) == 0)
        harness_fail(__FILE__, __LINE__, "the toolkit's NVRTC is installed but unusable: %s", why);
    else
        harness_skip(why);
    kiln_ctx_free(ctx);
    return false;
}

static void
test_version(void)
{
    if (!need_nvrtc())
        return;
    int v = kiln_nvrtc_version();
    printf("NVRTC %d.%d\n", v / 1000, v % 1000 / 10);
    CHECK(v >= 11020);
    CHECK(v % 10 == 0);
}

static void
test_compile(void)
{
    if (!need_nvrtc())
        return;
    static const char *const archs[] = {"sm_80", "sm_90"};
    for (size_t a = 0; a < KILN_COUNTOF(archs); a++) {
        kiln_ctx   *ctx = kiln_ctx_new(NULL);
        const char *ptx = NULL;
        char        target[32];
        int         st =
            kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "kiln_kernel.cu", archs[a], false, &ptx);
        CHECK_EQ_INT(KILN_OK, st);
        if (st != KILN_OK) {
            fprintf(stderr, "%s\n%s\n", msg(ctx), detail(ctx));
            kiln_ctx_free(ctx);
            continue;
        }
        snprintf(target, sizeof target, ".target %s", archs[a]);
        CHECK(strstr(ptx, ".entry k(") != NULL);
        CHECK(strstr(ptx, target) != NULL);
        CHECK(strstr(ptx, ".shared") != NULL); /* tile */
        CHECK(strstr(ptx, "bar.sync") != NULL || strstr(ptx, "barrier.sync") != NULL);
        CHECK(strstr(ptx, "ex2.approx") != NULL); /* expf */
        st = kiln_ptxas_check(ctx, ptx, archs[a]);
        if (st == KILN_ERR_UNSUPPORTED) {
            harness_skip(msg(ctx));
        } else {
            CHECK_EQ_INT(KILN_OK, st);
            if (st != KILN_OK)
                fprintf(stderr, "%s\n%s\n", msg(ctx), detail(ctx));
        }
        kiln_ctx_free(ctx);
    }
}

static void
test_fast_math(void)
{
    if (!need_nvrtc())
        return;
    kiln_ctx   *ctx = kiln_ctx_new(NULL);
    const char *exact = NULL, *fast = NULL;
    CHECK_EQ_INT(KILN_OK,
                 kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", "sm_80", false, &exact));
    CHECK_EQ_INT(KILN_OK, kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", "sm_80", true, &fast));
    if (exact && fast) {
        /* --use_fast_math flushes denormals (.ftz on float arithmetic, where accurate code
         * uses it only inside expf) and maps expf to a plain ex2.approx */
        CHECK(strstr(exact, "mul.ftz.f32") == NULL && strstr(exact, "add.ftz.f32") == NULL);
        CHECK(strstr(fast, "mul.ftz.f32") != NULL || strstr(fast, "add.ftz.f32") != NULL);
        CHECK(strlen(fast) < strlen(exact));
    }
    kiln_ctx_free(ctx);
}

static void
test_syntax_error(void)
{
    if (!need_nvrtc())
        return;
    static const char bad[] = "extern \"C\" __global__ void k(float *y)\n"
                              "{\n"
                              "    y[0] = 1.0f\n"
                              "}\n";
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    const char       *ptx = "unchanged";
    int               before = harness_failures;
    CHECK_EQ_INT(KILN_ERR_BACKEND, kiln_nvrtc_ptx(ctx, bad, "kiln_bad.cu", "sm_80", false, &ptx));
    CHECK(ptx == NULL);
    CHECK_EQ_STR("NVRTC: compiling kiln_bad.cu for sm_80 failed", msg(ctx));
    CHECK_EQ_STR("nvrtc", kiln_ctx_error(ctx)->pass);
    /* NVRTC's log: "kiln_bad.cu(3): error: expected a \";\"" */
    CHECK(strstr(detail(ctx), "kiln_bad.cu(") != NULL);
    CHECK(strstr(detail(ctx), "error") != NULL);
    if (harness_failures != before)
        fprintf(stderr, "detail: %s\n", detail(ctx));
    kiln_ctx_free(ctx);
}

/* Needs no NVRTC: architectures are checked before the library is loaded. */
static void
test_bad_arch(void)
{
    static const char *const bad[] = {"sm_x",  "sm_",     "sm_8",    "compute_80", "SM_80",
                                      "sm_08", "sm_80b",  "sm_1000", "sm_80 ",     "",
                                      "80",    "sm_90aa", "sm_-80"};
    for (size_t i = 0; i < KILN_COUNTOF(bad); i++) {
        kiln_ctx   *ctx = kiln_ctx_new(NULL);
        const char *ptx = "unchanged";
        CHECK_EQ_INT(KILN_ERR_INVALID,
                     kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", bad[i], false, &ptx));
        CHECK(ptx == NULL);
        CHECK(strstr(msg(ctx), "malformed GPU architecture") != NULL);
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_ptxas_check(ctx, ".version 8.0\n", bad[i]));
        CHECK(strstr(msg(ctx), "malformed GPU architecture") != NULL);
        kiln_ctx_free(ctx);
    }
    kiln_ctx   *ctx = kiln_ctx_new(NULL);
    const char *ptx;
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_nvrtc_ptx(ctx, NULL, "k.cu", "sm_80", false, &ptx));
    CHECK_EQ_STR("kiln_nvrtc_ptx: src is NULL", msg(ctx));
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(KILN_ERR_INVALID,
                 kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", "sm_80", false, NULL));
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_ptxas_check(ctx, NULL, "sm_80"));
    CHECK_EQ_INT(KILN_ERR_INVALID,
                 kiln_nvrtc_ptx(NULL, kiln_test_cuda_kernel, "k.cu", "sm_80", false, &ptx));
    kiln_ctx_free(ctx);
    /* well-formed ones pass the syntax check (sm_90a: architecture-specific features) */
    if (kiln_nvrtc_available()) {
        ctx = kiln_ctx_new(NULL);
        CHECK_EQ_INT(KILN_OK,
                     kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", "sm_90a", false, &ptx));
        CHECK(ptx && strstr(ptx, ".target sm_90a") != NULL);
        kiln_ctx_free(ctx);
    }
}

/* An architecture no NVRTC since 11 compiles for. */
static void
test_unsupported_arch(void)
{
    if (!need_nvrtc())
        return;
    kiln_ctx   *ctx = kiln_ctx_new(NULL);
    const char *ptx;
    int         before = harness_failures;
    int         st = kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", "sm_20", false, &ptx);
    CHECK(st == KILN_ERR_UNSUPPORTED || st == KILN_ERR_BACKEND);
    CHECK(strstr(msg(ctx), "sm_20") != NULL);
    if (harness_failures != before)
        fprintf(stderr, "%s\n", msg(ctx));
    kiln_ctx_free(ctx);
}

static void
test_ptxas_refuses(void)
{
    if (!need_nvrtc())
        return;
    kiln_ctx   *ctx = kiln_ctx_new(NULL);
    const char *ptx = NULL;
    int         before = harness_failures;
    CHECK_EQ_INT(KILN_OK, kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", "sm_80", false, &ptx));
    if (!ptx) {
        kiln_ctx_free(ctx);
        return;
    }
    int st = kiln_ptxas_check(ctx, ptx, "sm_80");
    if (st == KILN_ERR_UNSUPPORTED) {
        CHECK(strstr(msg(ctx), "no ptxas") != NULL);
        harness_skip(msg(ctx));
        kiln_ctx_free(ctx);
        return;
    }
    CHECK_EQ_INT(KILN_OK, st);
    /* corrupt the kernel's first return: "ret;" becomes the unknown instruction "rxt;" */
    char *bad = kiln_arena_strdup(ctx, ptx);
    char *ret = strstr(bad, "ret;");
    CHECK(ret != NULL);
    if (ret) {
        ret[1] = 'x';
        CHECK_EQ_INT(KILN_ERR_BACKEND, kiln_ptxas_check(ctx, bad, "sm_80"));
        CHECK(strstr(msg(ctx), "ptxas: assembling PTX for sm_80 failed") != NULL);
        CHECK(strstr(detail(ctx), "rxt") != NULL);
        CHECK(strstr(detail(ctx), "error") != NULL);
        if (harness_failures != before)
            fprintf(stderr, "%s\ndetail: %s\n", msg(ctx), detail(ctx));
    }
    /* a PTX target newer than the one assembled for is refused too */
    kiln_ctx_error_clear(ctx);
    const char *ptx90 = NULL;
    CHECK_EQ_INT(KILN_OK,
                 kiln_nvrtc_ptx(ctx, kiln_test_cuda_kernel, "k.cu", "sm_90", false, &ptx90));
    if (ptx90)
        CHECK_EQ_INT(KILN_ERR_BACKEND, kiln_ptxas_check(ctx, ptx90, "sm_80"));
    kiln_ctx_free(ctx);
}

static const struct test tests[] = {
    {"version", test_version},
    {"compile", test_compile},
    {"fast_math", test_fast_math},
    {"syntax_error", test_syntax_error},
    {"bad_arch", test_bad_arch},
    {"unsupported_arch", test_unsupported_arch},
    {"ptxas_refuses", test_ptxas_refuses},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
