/* tests/cuda/test_cuda.c -- the CUDA C backend on every machine: every library op (the
 * default schedule, and a GPU schedule binding each stage's fused spatial loops to blocks and
 * threads) and every random graph and schedule of the lowering property test is emitted as
 * CUDA C, compiled by NVRTC and accepted by ptxas, for sm_80 and sm_90. Where the CUDA
 * toolkit is missing the tests skip with the reason; running the kernels needs a GPU and is
 * tests/cuda_rt's. */
#include "../gen.h"
#include "../harness.h"

#include "../../codegen/codegen.h"
#include "../../codegen/nvrtc.h"
#include "../../passes/passes.h"
#include "../../passes/state.h"

#include <stdlib.h>
#include <string.h>

static const char *const archs[] = {"sm_80", "sm_90"};

static bool
toolkit(void)
{
    if (kiln_nvrtc_available())
        return true;
    harness_skip("no NVRTC: the CUDA toolkit's libnvrtc could not be loaded");
    return false;
}

/* Lowers g under s, emits CUDA C and compiles it for both architectures; false (and a failure
 * naming the case) when any step refuses. */
static bool
compile_case(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_schedule *s,
             const char *what, uint32_t *nkernels)
{
    struct kiln_func       *f;
    struct kiln_cuda_source src;
    const char             *step = "lowering";
    bool                    ok = kiln_lower(ctx, g, s, &f) == KILN_OK;
    if (ok) {
        step = "CUDA C";
        ok = kiln_cg_cuda_source(ctx, f, "kiln_test", &src) == KILN_OK;
    }
    for (size_t a = 0; ok && a < KILN_COUNTOF(archs); a++) {
        const char *ptx;
        step = "NVRTC";
        ok = kiln_nvrtc_ptx(ctx, src.text, "kiln_test.cu", archs[a], false, &ptx) == KILN_OK;
        if (ok) {
            step = "ptxas";
            ok = kiln_ptxas_check(ctx, ptx, archs[a]) == KILN_OK;
        }
        for (uint32_t k = 0; ok && k < src.nkernel; k++)
            ok = strstr(ptx, src.kernel[k].name) != NULL;
    }
    if (!ok) {
        char            msg[2048] = "";
        const char     *gs = "";
        struct kiln_buf js = {0};
        kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        kiln_graph_print(ctx, g, KILN_PRINT_EXPANDED, &gs);
        kiln_sched_to_json(ctx, s, &js);
        harness_fail(__FILE__, __LINE__, "%s: %s failed: %s\n--- graph ---\n%s--- schedule ---\n%s",
                     what, step, msg, gs, js.data ? js.data : "");
        kiln_ctx_error_clear(ctx);
        return false;
    }
    *nkernels += src.nkernel;
    return true;
}

/* Each stage at root: its spatial loops fused, split by 64 (or fewer when shorter), the outer
 * part bound to blockIdx.x and the inner to threadIdx.x. */
static bool
gpu_schedule(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_schedule *out)
{
    struct kiln_schedule none = {0};
    struct kiln_state    st;
    struct kiln_buf      js = {0};
    if (kiln_state_build(ctx, g, &none, &st) != KILN_OK)
        return false;
    kiln_buf_puts(ctx, &js, "{\"steps\": [");
    const char *sep = "";
    for (uint32_t o = 0; o < st.norder; o++) {
        const struct kiln_stage *sg = &st.st[st.order[o]];
        if (sg->attach != KILN_ATTACH_ROOT || sg->ndim == 0)
            continue;
        const char *nm = kiln_sym_str(ctx, sg->name);
        char        fused[512] = "";
        int64_t     ext = 1;
        for (uint32_t k = 0; k < sg->ndim; k++) {
            ext *= sg->it[k].extent;
            strncat(fused, k ? "@" : "", sizeof fused - strlen(fused) - 1);
            strncat(fused, kiln_sym_str(ctx, sg->it[k].name), sizeof fused - strlen(fused) - 1);
        }
        if (sg->ndim > 1) {
            kiln_buf_printf(ctx, &js, "%s{\"op\": \"fuse\", \"stage\": \"%s\", \"iters\": [", sep,
                            nm);
            for (uint32_t k = 0; k < sg->ndim; k++)
                kiln_buf_printf(ctx, &js, "%s\"%s\"", k ? ", " : "",
                                kiln_sym_str(ctx, sg->it[k].name));
            kiln_buf_puts(ctx, &js, "]}");
            sep = ", ";
        }
        kiln_buf_printf(ctx, &js,
                        "%s{\"op\": \"split\", \"stage\": \"%s\", \"iter\": \"%s\", \"factors\": "
                        "[%lld]}, {\"op\": \"bind\", \"stage\": \"%s\", \"iter\": \"%s.0\", "
                        "\"thread\": \"blockIdx.x\"}, {\"op\": \"bind\", \"stage\": \"%s\", "
                        "\"iter\": \"%s.1\", \"thread\": \"threadIdx.x\"}",
                        sep, nm, fused, (long long)(ext < 64 ? ext : 64), nm, fused, nm, fused);
        sep = ", ";
    }
    kiln_buf_puts(ctx, &js, "]}");
    return js.data && kiln_sched_from_json(ctx, js.data, js.len, out) == KILN_OK;
}

/* Every library op: the default schedule (one thread per kernel) and the GPU schedule. */
static void
test_library_ops(void)
{
    if (!toolkit())
        return;
    uint32_t nk = 0, ncase = 0;
    for (size_t i = 0; i < kiln_test_nop_cases; i++) {
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_graph   *g = PARSE(ctx, kiln_test_op_cases[i]);
        struct kiln_schedule none = {0}, gpu = {0};
        if (g) {
            compile_case(ctx, g, &none, "default schedule", &nk);
            if (gpu_schedule(ctx, g, &gpu))
                compile_case(ctx, g, &gpu, "GPU schedule", &nk);
            else
                harness_fail(__FILE__, __LINE__, "op case %zu: no GPU schedule: %s", i,
                             kiln_ctx_error(ctx)->msg);
            ncase++;
        }
        kiln_ctx_free(ctx);
    }
    printf("%u op cases, %u kernels compiled for %zu architectures\n", ncase, nk,
           KILN_COUNTOF(archs));
}

/* The lowering property test's random graphs and schedules (tests/gen.c). */
static void
test_random_schedules(void)
{
    if (!toolkit())
        return;
    uint64_t n = opt_iters_or(40), seed = opt_seed();
    uint32_t nk = 0;
    for (uint64_t i = 0; i < n; i++) {
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_rng      r = kiln_rng_new(seed + i);
        struct kiln_graph   *g = kiln_test_gen_graph(ctx, &r);
        struct kiln_schedule s;
        if (g) {
            kiln_test_gen_schedule(ctx, g, &r, &s);
            char what[64];
            snprintf(what, sizeof what, "case seed %llu", (unsigned long long)(seed + i));
            compile_case(ctx, g, &s, what, &nk);
        } else {
            harness_fail(__FILE__, __LINE__, "graph generation failed: %s",
                         kiln_ctx_error(ctx)->msg);
        }
        kiln_ctx_free(ctx);
    }
    printf("%llu random cases, %u kernels compiled\n", (unsigned long long)n, nk);
}

/* A matmul bound to a 2-D grid of 2-D blocks, then its relu to a 1-D grid: one kernel per
 * root stage, whose launch dimensions are its bound loops' extents, reading its indices from
 * blockIdx / threadIdx; the PTX compiles. */
static void
test_launch(void)
{
    if (!toolkit())
        return;
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = PARSE(ctx, "input A: f32[64, 32]\nweight B: f32[32, 48]\n"
                                      "C[i, j] += A[i, k] * B[k, j]\nD = relu(C)\noutput D\n");
    const char        *js =
        "{\"steps\": [{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [16]},"
        "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"j\", \"factors\": [16]},"
        "{\"op\": \"reorder\", \"stage\": \"C\", \"order\": [\"i.0\", \"j.0\", \"i.1\", \"j.1\"]},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.0\", \"thread\": \"blockIdx.y\"},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.0\", \"thread\": \"blockIdx.x\"},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.1\", \"thread\": \"threadIdx.y\"},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.1\", \"thread\": \"threadIdx.x\"},"
        "{\"op\": \"fuse\", \"stage\": \"D\", \"iters\": [\"i\", \"j\"]},"
        "{\"op\": \"split\", \"stage\": \"D\", \"iter\": \"i@j\", \"factors\": [128]},"
        "{\"op\": \"bind\", \"stage\": \"D\", \"iter\": \"i@j.0\", \"thread\": \"blockIdx.x\"},"
        "{\"op\": \"bind\", \"stage\": \"D\", \"iter\": \"i@j.1\", \"thread\": \"threadIdx.x\"}]}";
    struct kiln_schedule    s;
    struct kiln_func       *f;
    struct kiln_cuda_source src;
    if (!g || kiln_sched_from_json(ctx, js, strlen(js), &s) != KILN_OK
        || kiln_lower(ctx, g, &s, &f) != KILN_OK
        || kiln_cg_cuda_source(ctx, f, "mm", &src) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s", kiln_ctx_error(ctx)->msg);
        kiln_ctx_free(ctx);
        return;
    }
    CHECK_EQ_INT(2, src.nkernel);
    if (src.nkernel == 2) {
        const struct kiln_cuda_kernel *c = &src.kernel[0], *d = &src.kernel[1];
        CHECK_EQ_STR("mm_k0", c->name);
        CHECK(c->grid[0] == 3 && c->grid[1] == 4 && c->grid[2] == 1);
        CHECK(c->block[0] == 16 && c->block[1] == 16 && c->block[2] == 1);
        CHECK(d->grid[0] == 24 && d->grid[1] == 1 && d->block[0] == 128 && d->block[1] == 1);
        CHECK(!c->prepare && !d->prepare && c->shared_bytes == 0);
    }
    CHECK(strstr(src.text, "(long long)blockIdx.y") && strstr(src.text, "(long long)threadIdx.x"));
    CHECK(strstr(src.text, "__launch_bounds__(256) mm_k0"));
    const char *ptx;
    CHECK_EQ_INT(KILN_OK, kiln_nvrtc_ptx(ctx, src.text, "mm.cu", "sm_80", false, &ptx));
    kiln_ctx_free(ctx);
}

/* The shared-memory matmul of tests/gen.c: __shared__ tiles, barriers between filling and
 * reading them, the launch of 3 x 3 blocks of 16 x 16 threads; NVRTC and ptxas accept it. */
static void
test_shared(void)
{
    if (!toolkit())
        return;
    kiln_ctx               *ctx = kiln_ctx_new(NULL);
    struct kiln_graph      *g = PARSE(ctx, kiln_test_shared_matmul_kg);
    struct kiln_schedule    s;
    struct kiln_func       *f;
    struct kiln_cuda_source src;
    uint32_t                nk = 0;
    const char             *js = kiln_test_shared_matmul;
    if (!g || kiln_sched_from_json(ctx, js, strlen(js), &s) != KILN_OK
        || kiln_lower(ctx, g, &s, &f) != KILN_OK
        || kiln_cg_cuda_source(ctx, f, "smm", &src) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s", kiln_ctx_error(ctx)->msg);
        kiln_ctx_free(ctx);
        return;
    }
    CHECK_EQ_INT(1, src.nkernel);
    const struct kiln_cuda_kernel *k = &src.kernel[0];
    CHECK(k->grid[0] == 3 && k->grid[1] == 3 && k->block[0] == 16 && k->block[1] == 16);
    /* two 1 KiB tiles in each of the two pieces the partial k tile splits the loop into */
    CHECK_EQ_INT(4096, k->shared_bytes);
    uint32_t nsync = 0;
    for (const char *p = src.text; (p = strstr(p, "__syncthreads();")); p++)
        nsync++;
    printf("%u barriers\n", nsync);
    CHECK(strstr(src.text, "__shared__ __align__(16) float") != NULL);
    CHECK(nsync >= 6); /* after each fill and each tile's use, in both pieces */
    compile_case(ctx, g, &s, "shared-memory matmul", &nk);
    kiln_ctx_free(ctx);
}

/* What CUDA cannot express is an error naming it. */
static void
test_errors(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = PARSE(ctx, "input x: f16[4]\ny = relu(x)\noutput y\n");
    struct kiln_func  *f;
    if (g && kiln_lower(ctx, g, &(struct kiln_schedule){0}, &f) == KILN_OK) {
        struct kiln_cuda_source src;
        CHECK_EQ_INT(KILN_ERR_UNSUPPORTED, kiln_cg_cuda_source(ctx, f, "k", &src));
        CHECK(strstr(kiln_ctx_error(ctx)->msg, "f16") != NULL);
        kiln_ctx_error_clear(ctx);
    }
    /* a thread loop longer than a block may be */
    g = PARSE(ctx, "input x: f32[2048]\ny = relu(x)\noutput y\n");
    struct kiln_schedule s;
    const char          *js = "{\"steps\": [{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"i\", "
                              "\"thread\": \"threadIdx.x\"}]}";
    if (g && kiln_sched_from_json(ctx, js, strlen(js), &s) == KILN_OK
        && kiln_lower(ctx, g, &s, &f) == KILN_OK) {
        struct kiln_cuda_source src;
        CHECK_EQ_INT(KILN_ERR_UNSUPPORTED, kiln_cg_cuda_source(ctx, f, "k", &src));
        printf("error: %s\n", kiln_ctx_error(ctx)->msg);
        CHECK(strstr(kiln_ctx_error(ctx)->msg, "threadIdx.x extent 2048 exceeds 1024") != NULL);
    } else {
        harness_fail(__FILE__, __LINE__, "bind: %s", kiln_ctx_error(ctx)->msg);
    }
    kiln_ctx_free(ctx);
}

static const struct test tests[] = {
    {"library_ops", test_library_ops}, {"random_schedules", test_random_schedules},
    {"launch", test_launch},           {"shared", test_shared},
    {"errors", test_errors},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
