/* tests/cuda/test_cuda.c -- the CUDA C backend on every machine: every library op (the
 * default schedule, and a GPU schedule binding each stage's fused spatial loops to blocks and
 * threads) and every random graph and schedule of the lowering property test is emitted as
 * CUDA C, compiled by NVRTC and accepted by ptxas, for sm_80 and sm_90. The kernels of the
 * library ops (those schedules and programs of their GPU sketches) and bench_gpu's hand-written
 * schedules (benchmarks/gpu_sched.c, at small sizes) also run: compiled as C++
 * with a CUDA stand-in, on CPU threads, against the reference (test_emulated). Where the CUDA
 * toolkit is missing the NVRTC tests skip with the reason; running the kernels on a GPU is
 * tests/cuda_rt's. Vector loops (test_vector) must use float4/float2 accesses exactly where
 * contiguous and provably aligned; the emulated run counts misaligned ones as errors. The
 * target's -fast-math must reach NVRTC (test_fast_math). */
#include "../cuda_emu.h"
#include "../gen.h"
#include "../harness.h"

#include "../../benchmarks/gpu_sched.h"
#include "../../codegen/codegen.h"
#include "../../codegen/nvrtc.h"
#include "../../passes/passes.h"
#include "../../passes/state.h"
#include "../../tuner/tuner.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const archs[] = {"sm_80", "sm_90"};

static uint32_t nvector_compiled; /* float4 / float2 accesses in the kernels compile_case built */

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
        kiln_cg_cuda_align_params(f); /* as kiln_graph_compile does for the cuda target */
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
    for (uint32_t k = 0; k < src.nkernel; k++)
        nvector_compiled += src.kernel[k].nvector;
    return true;
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
            if (kiln_test_gpu_schedule(ctx, g, &gpu))
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
    printf("%llu random cases, %u kernels compiled, %u vector accesses\n", (unsigned long long)n,
           nk, nvector_compiled);
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
    /* two 1 KiB tiles: the partial k tile is guarded, not split off (loops inside GPU loops
     * are not partitioned) */
    CHECK_EQ_INT(2048, k->shared_bytes);
    uint32_t nsync = 0;
    for (const char *p = src.text; (p = strstr(p, "__syncthreads();")); p++)
        nsync++;
    printf("%u barriers\n", nsync);
    CHECK(strstr(src.text, "__shared__ __align__(16) float") != NULL);
    CHECK(nsync >= 2); /* after each fill and each tile's use */
    compile_case(ctx, g, &s, "shared-memory matmul", &nk);
    kiln_ctx_free(ctx);
}

/* ---- vector loops ----
 * Graphs whose inner loop is split and vectorized (docs/schedule.md): what each kernel must
 * hold in its PTX. `ld` / `st`: vector loads / stores of width `vw` expected (1) or excluded
 * (0). The emulated run executes them all (test_emulated). */
struct vec_case {
    const char *what, *kg, *json;
    const char *vw; /* ".v4.f32" or ".v2.f32" */
    int         ld, st;
};

#define VEC_BIND(S, OUTER, INNER)                                                    \
    "{\"op\": \"bind\", \"stage\": \"" S "\", \"iter\": \"" OUTER "\", \"thread\": " \
    "\"blockIdx.x\"}, {\"op\": \"bind\", \"stage\": \"" S "\", \"iter\": \"" INNER   \
    "\", \"thread\": \"threadIdx.x\"}"
#define VEC_SPLIT(S, IT, F)                                                                   \
    "{\"op\": \"split\", \"stage\": \"" S "\", \"iter\": \"" IT "\", \"factors\": [" F "]}, " \
    "{\"op\": \"vectorize\", \"stage\": \"" S "\", \"iter\": \"" IT ".1\"}"

static const char vec_add_kg[] =
    "input a: f32[8, 16]\ninput b: f32[8, 16]\ny = add(a, b)\nz = relu(y)\noutput z\n";

static const struct vec_case vec_cases[] = {
    {"aligned add, float4", vec_add_kg,
     "{\"steps\": [" VEC_SPLIT("y", "j", "4") ", " VEC_BIND("y", "i", "j.0") ", " VEC_SPLIT(
         "z", "j", "4") ", " VEC_BIND("z", "i", "j.0") "]}",
     ".v4.f32", 1, 1},
    {"aligned add, two float4 steps, one thread", vec_add_kg,
     "{\"steps\": [" VEC_SPLIT("y", "j", "8") ", " VEC_SPLIT("z", "j", "8") "]}", ".v4.f32", 1, 1},
    {"aligned add, float2", vec_add_kg,
     "{\"steps\": [" VEC_SPLIT("y", "j", "2") ", " VEC_BIND("y", "i", "j.0") ", " VEC_SPLIT(
         "z", "j", "2") ", " VEC_BIND("z", "i", "j.0") "]}",
     ".v2.f32", 1, 1},
    {"matmul, inner axis float4",
     "input A: f32[16, 8]\nweight B: f32[8, 32]\nC[i, j] += A[i, k] * B[k, j]\noutput C\n",
     "{\"steps\": [{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"j\", \"factors\": [4]}, "
     "{\"op\": \"reorder\", \"stage\": \"C\", \"order\": [\"i\", \"j.0\", \"k\", \"j.1\"]}, "
     "{\"op\": \"vectorize\", \"stage\": \"C\", \"iter\": \"j.1\"}, " VEC_BIND("C", "i",
                                                                               "j.0") "]}",
     ".v4.f32", 1, 1},
    /* reads x[i, j + 1]: contiguous, but not a multiple of 4: scalar loads */
    {"offset read",
     "input x: f32[8, 20]\ny = slice(x, starts=[0, 1], ends=[8, 17], axes=[0, 1])\noutput y\n",
     "{\"steps\": [" VEC_SPLIT("y", "j", "4") ", " VEC_BIND("y", "i", "j.0") "]}", ".v4.f32", 0, 1},
    /* reads x[j, i]: stride 8 in the vector loop's variable: scalar loads */
    {"transposed read", "input x: f32[16, 8]\ny = transpose(x)\noutput y\n",
     "{\"steps\": [" VEC_SPLIT("y", "j", "4") ", " VEC_BIND("y", "i", "j.0") "]}", ".v4.f32", 0, 1},
};

/* Each vector case's PTX, for sm_80 and sm_90 and accepted by ptxas, holds the vector loads
 * and stores it must and none it must not; with its parameters only 4-byte aligned (the
 * ABI's default, not the cuda target's) no parameter is accessed as a vector (workspace
 * buffers, 64-byte aligned, still are). */
static void
test_vector(void)
{
    if (!toolkit())
        return;
    uint32_t nvec = 0, nkern = 0;
    for (size_t i = 0; i < KILN_COUNTOF(vec_cases); i++) {
        const struct vec_case *v = &vec_cases[i];
        for (int aligned = 1; aligned >= 0; aligned--) {
            kiln_ctx               *ctx = kiln_ctx_new(NULL);
            struct kiln_graph      *g = PARSE(ctx, v->kg);
            struct kiln_schedule    s;
            struct kiln_func       *f;
            struct kiln_cuda_source src;
            if (!g || kiln_sched_from_json(ctx, v->json, strlen(v->json), &s) != KILN_OK
                || kiln_lower(ctx, g, &s, &f) != KILN_OK) {
                harness_fail(__FILE__, __LINE__, "%s: %s", v->what, kiln_ctx_error(ctx)->msg);
                kiln_ctx_free(ctx);
                continue;
            }
            if (aligned)
                kiln_cg_cuda_align_params(f);
            if (kiln_cg_cuda_source(ctx, f, "vec", &src) != KILN_OK) {
                harness_fail(__FILE__, __LINE__, "%s: %s", v->what, kiln_ctx_error(ctx)->msg);
                kiln_ctx_free(ctx);
                continue;
            }
            uint32_t n = 0;
            for (uint32_t k = 0; k < src.nkernel; k++)
                n += src.kernel[k].nvector;
            if (aligned) {
                nvec += n;
                nkern += src.nkernel;
            }
            for (size_t a = 0; a < KILN_COUNTOF(archs); a++) {
                const char *ptx = NULL;
                CHECK_EQ_INT(KILN_OK,
                             kiln_nvrtc_ptx(ctx, src.text, "vec.cu", archs[a], false, &ptx));
                if (!ptx)
                    break;
                CHECK_EQ_INT(KILN_OK, kiln_ptxas_check(ctx, ptx, archs[a]));
                bool ld = false, st = false;
                for (uint32_t q = 0; !aligned && q < f->nparam; q++) {
                    char pat[32]; /* a float4/float2 access of parameter q: "*)&bQ_" */
                    snprintf(pat, sizeof pat, "*)&b%u_", f->param[q]);
                    if (strstr(src.text, pat))
                        harness_fail(__FILE__, __LINE__,
                                     "%s: a vector access of a 4-byte aligned parameter\n%s",
                                     v->what, src.text);
                }
                for (const char *p = ptx; (p = strstr(p, "global")); p++) {
                    const char *eol = strchr(p, '\n'), *w = strstr(p, v->vw);
                    bool        here = w && (!eol || w < eol);
                    ld |= here && p > ptx + 3 && !strncmp(p - 3, "ld.", 3);
                    st |= here && p > ptx + 3 && !strncmp(p - 3, "st.", 3);
                }
                if (aligned && (ld != (v->ld != 0) || st != (v->st != 0)))
                    harness_fail(__FILE__, __LINE__,
                                 "%s (%s): vector loads %d (want %d), stores %d (want %d)\n%s",
                                 v->what, archs[a], ld, v->ld, st, v->st, src.text);
            }
            kiln_ctx_free(ctx);
        }
    }
    printf("%zu vector cases: %u kernels, %u float4/float2 accesses\n", KILN_COUNTOF(vec_cases),
           nkern, nvec);
    CHECK(nvec > 0);
}

/* Cross-thread reductions (tests/gen.c's cases): one kernel per reduction whose block is the
 * bound loop's threads, a per-thread accumulator, a shared-memory combine with barriers and
 * one store by thread 0; NVRTC and ptxas accept them for sm_80 and sm_90. (test_emulated
 * runs them.) */
static void
test_cross_thread(void)
{
    if (!toolkit())
        return;
    static const uint32_t threads[] = {64, 32, 7, 32, 128, 100, 256};
    for (size_t i = 0; i < kiln_test_nxred_cases; i++) {
        const struct kiln_test_xred *x = &kiln_test_xred_cases[i];
        kiln_ctx                    *ctx = kiln_ctx_new(NULL);
        struct kiln_graph           *g = PARSE(ctx, x->kg);
        struct kiln_schedule         s;
        struct kiln_func            *f;
        struct kiln_cuda_source      src;
        uint32_t                     nk = 0;
        if (!g || kiln_sched_from_json(ctx, x->json, strlen(x->json), &s) != KILN_OK
            || kiln_lower(ctx, g, &s, &f) != KILN_OK
            || kiln_cg_cuda_source(ctx, f, "xr", &src) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "%s: %s", x->what, kiln_ctx_error(ctx)->msg);
            kiln_ctx_free(ctx);
            continue;
        }
        /* the reduction's kernel (a sum to a scalar initialises it in a kernel of its own) */
        uint32_t r = src.nkernel > 1 && src.kernel[0].block[0] == 1;
        CHECK(r < src.nkernel && i < KILN_COUNTOF(threads));
        if (r < src.nkernel && i < KILN_COUNTOF(threads)) {
            const struct kiln_cuda_kernel *k = &src.kernel[r];
            CHECK_EQ_INT(threads[i], k->block[0]);
            CHECK(k->block[1] == 1 && k->block[2] == 1);
            CHECK_EQ_INT(threads[i] * 4, k->shared_bytes);
        }
        CHECK(strstr(src.text, "float kiln_acc1 = ") != NULL);
        CHECK(strstr(src.text, "__shared__ float kiln_red1[") != NULL);
        CHECK(strstr(src.text, "kiln_red1[threadIdx.x] = kiln_acc1;") != NULL);
        CHECK(strstr(src.text, "if (threadIdx.x == 0) ") != NULL);
        compile_case(ctx, g, &s, x->what, &nk);
        kiln_ctx_free(ctx);
    }
}

/* ---- running the CUDA C on the CPU ----
 * Without a GPU the emitted kernels still run: the test compiles their CUDA C as C++ with a
 * prelude that stands in for CUDA (tests/cuda_emu.h: blockIdx / threadIdx thread-local,
 * __shared__ a static shared by the block's threads, __syncthreads a pthread barrier), runs each
 * block's threads as real threads, blocks one after another, and compares the outputs with the
 * reference interpreter.
 * So guards, barriers, shared memory, the workspace and the operators' semantics are checked,
 * not only that NVRTC accepts the code. */

/* A case to run: its graph, lowered function and CUDA C. */
struct emu_case {
    kiln_ctx               *ctx;
    struct kiln_graph      *g;
    struct kiln_func       *f;
    struct kiln_cuda_source src;
    const char             *what;
};

/* Appends case c's source inside its own namespace, with its kernels' entry points
 * (tests/cuda_emu.h). */
static bool
emu_append(struct kiln_buf *out, kiln_ctx *octx, uint32_t i, const struct emu_case *c)
{
    char ns[32];
    snprintf(ns, sizeof ns, "kiln_case_%u", i);
    return kiln_test_emu_append(octx, out, ns, c->src.text);
}

struct emu_thread {
    void (*fn)(void **);
    void **args;
    void (*set)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, pthread_barrier_t *);
    unsigned           b[3], t[3];
    pthread_barrier_t *barrier;
};

static void *
emu_thread_main(void *ud)
{
    struct emu_thread *t = ud;
    t->set(t->b[0], t->b[1], t->b[2], t->t[0], t->t[1], t->t[2], t->barrier);
    t->fn(t->args);
    return NULL;
}

/* Runs one kernel: every block, one after another, its threads at once. */
static bool
emu_launch(void *so, const struct kiln_cuda_kernel *k, void **args)
{
    char nm[200];
    snprintf(nm, sizeof nm, "kiln_emu_%s", k->name);
    void *fp = dlsym(so, nm), *sp = dlsym(so, "kiln_emu_set");
    if (!fp || !sp)
        return false;
    struct emu_thread proto = {.args = args};
    memcpy(&proto.fn, &fp, sizeof fp);
    memcpy(&proto.set, &sp, sizeof sp);
    uint32_t           nt = k->block[0] * k->block[1] * k->block[2];
    struct emu_thread *th = calloc(nt, sizeof *th);
    pthread_t         *tid = calloc(nt, sizeof *tid);
    pthread_barrier_t  bar;
    bool               ok = th && tid && pthread_barrier_init(&bar, NULL, nt) == 0;
    for (uint32_t bz = 0; ok && bz < k->grid[2]; bz++)
        for (uint32_t by = 0; ok && by < k->grid[1]; by++)
            for (uint32_t bx = 0; ok && bx < k->grid[0]; bx++) {
                uint32_t started = 0;
                for (uint32_t i = 0; i < nt; i++) {
                    th[i] = proto;
                    th[i].barrier = &bar;
                    th[i].b[0] = bx, th[i].b[1] = by, th[i].b[2] = bz;
                    th[i].t[0] = i % k->block[0];
                    th[i].t[1] = i / k->block[0] % k->block[1];
                    th[i].t[2] = i / (k->block[0] * k->block[1]);
                    if (nt == 1)
                        emu_thread_main(&th[i]);
                    else if (pthread_create(&tid[i], NULL, emu_thread_main, &th[i]) == 0)
                        started++;
                }
                ok = nt == 1 || started == nt; /* a missing thread would hang the barrier */
                for (uint32_t i = 0; i < started; i++)
                    pthread_join(tid[i], NULL);
            }
    if (th && tid)
        pthread_barrier_destroy(&bar);
    free(th);
    free(tid);
    return ok;
}

/* Runs case c's kernels from so on fresh random inputs (seed) and compares every output with
 * the reference interpreter. */
static bool
emu_check(void *so, const struct emu_case *c, uint64_t seed)
{
    const struct kiln_graph *g = c->g;
    const struct kiln_func  *f = c->f;
    struct kiln_rng          r = kiln_rng_new(seed);
    double                 **all = calloc(g->ntensor, sizeof *all);
    float                  **host = calloc(f->nparam + 2, sizeof *host);
    void                   **args = calloc(f->nparam + 2, sizeof *args);
    bool                     ok = all && host && args;
    double                   scale = 0;
    for (uint32_t t = 0; ok && t < g->ntensor; t++) {
        int64_t n = kiln_tensor_numel(&g->tensor[t]);
        all[t] = calloc((size_t)n + 1, sizeof(double));
        for (int64_t e = 0; all[t] && g->tensor[t].kind != KILN_TENSOR_OP && e < n; e++)
            all[t][e] = (double)(float)(kiln_rng_uniform(&r) * 2 - 1);
        ok = all[t] != NULL;
    }
    ok = ok && kiln_ir_eval(c->ctx, g, all) == KILN_OK;
    for (uint32_t t = 0; ok && t < g->ntensor; t++)
        for (int64_t e = 0; e < kiln_tensor_numel(&g->tensor[t]); e++)
            scale = fmax(scale, fabs(all[t][e]));
    for (uint32_t p = 0; ok && p < f->nparam; p++) {
        uint32_t t = f->buf[f->param[p]].tensor;
        int64_t  n = kiln_tensor_numel(&g->tensor[t]);
        host[p] = malloc(sizeof(float) * (size_t)(n + 1));
        ok = host[p] != NULL;
        for (int64_t e = 0; ok && e < n; e++)
            host[p][e] = g->tensor[t].kind != KILN_TENSOR_OP ? (float)all[t][e] : NAN;
        args[p] = host[p];
    }
    char *ws = ok ? calloc(1, (size_t)c->src.ws_bytes + 64) : NULL;
    char *prep = ok ? calloc(1, (size_t)c->src.prep_bytes + 64) : NULL;
    args[f->nparam] = ws;
    args[f->nparam + 1] = prep;
    ok = ok && ws && prep;
    /* the kernels' parameters as the driver passes them: a pointer to each value, the
     * arguments the kernel accesses, then the workspace and the prepared area */
    void **params = ok ? calloc(f->nparam + 2, sizeof *params) : NULL;
    ok = ok && params;
    for (uint32_t k = 0; ok && k < c->src.nkernel; k++) {
        const struct kiln_cuda_kernel *kn = &c->src.kernel[k];
        for (uint32_t i = 0; i < kn->nparam; i++)
            params[i] = &args[kn->param[i]];
        params[kn->nparam] = &args[f->nparam];
        params[kn->nparam + 1] = &args[f->nparam + 1];
        ok = emu_launch(so, kn, params);
    }
    free(params);
    if (!ok)
        harness_fail(__FILE__, __LINE__, "%s: could not run the kernels", c->what);
    for (uint32_t p = 0; ok && p < f->nparam; p++) {
        uint32_t t = f->buf[f->param[p]].tensor;
        if (g->tensor[t].kind != KILN_TENSOR_OP)
            continue;
        for (int64_t e = 0; ok && e < kiln_tensor_numel(&g->tensor[t]); e++)
            if (!(fabs(host[p][e] - all[t][e]) <= 1e-4 * (1 + scale)
                  || (isnan(host[p][e]) && isnan(all[t][e])) /* NaN and infinities agree */
                  || (double)host[p][e] == all[t][e])) {
                harness_fail(__FILE__, __LINE__, "%s (seed %llu): %s[%lld] = %.9g, want %.9g",
                             c->what, (unsigned long long)seed,
                             kiln_sym_str(c->ctx, g->tensor[t].name), (long long)e,
                             (double)host[p][e], all[t][e]);
                ok = false;
            }
    }
    for (uint32_t t = 0; all && t < g->ntensor; t++)
        free(all[t]);
    for (uint32_t p = 0; host && p < f->nparam; p++)
        free(host[p]);
    free(all);
    free(host);
    free(args);
    free(ws);
    free(prep);
    return ok;
}

/* Lowers text under schedule json (NULL: default; "gpu": kiln_test_gpu_schedule) into case c. */
static bool
emu_case(struct emu_case *c, const char *text, const char *json, const char *what, uint32_t i)
{
    char                 name[32];
    struct kiln_schedule s = {0};
    c->ctx = kiln_ctx_new(NULL);
    c->what = what;
    c->g = PARSE(c->ctx, text);
    snprintf(name, sizeof name, "c%u", i);
    bool ok = c->g != NULL;
    if (ok && json && !strcmp(json, "gpu"))
        ok = kiln_test_gpu_schedule(c->ctx, c->g, &s);
    else if (ok && json)
        ok = kiln_sched_from_json(c->ctx, json, strlen(json), &s) == KILN_OK;
    ok = ok && kiln_lower(c->ctx, c->g, &s, &c->f) == KILN_OK;
    if (ok)
        kiln_cg_cuda_align_params(c->f); /* malloc's 16 bytes stand in for cudaMalloc's */
    ok = ok && kiln_cg_cuda_source(c->ctx, c->f, name, &c->src) == KILN_OK;
    for (uint32_t p = 0; ok && p < c->f->nparam; p++)
        ok = c->f->buf[c->f->param[p]].dtype == KILN_DTYPE_F32;
    return ok;
}

/* Case c: the lowering property test's random graph and schedule of seed (tests/gen.c), when
 * its kernels make float4/float2 accesses and its parameters are f32; false otherwise. */
static bool
emu_random_case(struct emu_case *c, uint64_t seed, const char *what, uint32_t i)
{
    struct kiln_rng      r = kiln_rng_new(seed);
    struct kiln_schedule s;
    char                 name[32];
    c->ctx = kiln_ctx_new(NULL);
    c->what = what;
    c->g = kiln_test_gen_graph(c->ctx, &r);
    snprintf(name, sizeof name, "c%u", i);
    if (!c->g)
        return false;
    kiln_test_gen_schedule(c->ctx, c->g, &r, &s);
    if (kiln_lower(c->ctx, c->g, &s, &c->f) != KILN_OK)
        return false;
    kiln_cg_cuda_align_params(c->f);
    if (kiln_cg_cuda_source(c->ctx, c->f, name, &c->src) != KILN_OK)
        return false;
    uint32_t nvec = 0;
    for (uint32_t k = 0; k < c->src.nkernel; k++)
        nvec += c->src.kernel[k].nvector;
    bool ok = nvec > 0;
    for (uint32_t p = 0; ok && p < c->f->nparam; p++)
        ok = c->f->buf[c->f->param[p]].dtype == KILN_DTYPE_F32;
    return ok;
}

/* Case c: a program of GPU sketch number sk of text (tuner/sketch_gpu.c), or of its first
 * sketch whose description holds frag (when not NULL), drawn from seed, with every vector knob
 * on when vec; false when there is no such sketch. */
static bool
emu_sketch_case(struct emu_case *c, const char *text, uint32_t sk, const char *frag, uint64_t seed,
                bool vec, const char *what, uint32_t i)
{
    struct kiln_target  t;
    struct kiln_hw      hw;
    struct kiln_sketch *sks;
    uint32_t            nsk = 0;
    char                name[32];
    c->ctx = kiln_ctx_new(NULL);
    c->what = what;
    c->g = PARSE(c->ctx, text);
    snprintf(name, sizeof name, "c%u", i);
    if (!c->g || kiln_cg_target_parse(c->ctx, "cuda -arch=sm_80", &t) != KILN_OK)
        return false;
    kiln_hw_from_target(&t, &hw);
    if (kiln_sketches_generate(c->ctx, c->g, &hw, &sks, &nsk) != KILN_OK)
        return false;
    for (uint32_t k = 0; frag && k < nsk; k++)
        if (strstr(sks[k].desc, frag)) {
            sk = k;
            frag = NULL;
        }
    if (sk >= nsk || frag)
        return false;
    struct kiln_rng      r = kiln_rng_new(seed);
    struct kiln_prog     p;
    struct kiln_schedule s = {0};
    kiln_prog_sample(&sks[sk], &r, &p);
    for (uint32_t k = 0; vec && k < sks[sk].nknob; k++)
        if (sks[sk].knob[k].role == KILN_KNOB_VECTORIZE)
            p.v[sks[sk].knob[k].slot] = 1;
    bool ok = kiln_prog_schedule(c->ctx, c->g, &sks[sk], &p, &s) == KILN_OK
              && kiln_lower(c->ctx, c->g, &s, &c->f) == KILN_OK;
    if (ok)
        kiln_cg_cuda_align_params(c->f);
    ok = ok && kiln_cg_cuda_source(c->ctx, c->f, name, &c->src) == KILN_OK;
    if (!ok)
        harness_fail(__FILE__, __LINE__, "%s: %s", what, kiln_ctx_error(c->ctx)->msg);
    for (uint32_t q = 0; ok && q < c->f->nparam; q++)
        ok = c->f->buf[c->f->param[q]].dtype == KILN_DTYPE_F32;
    return ok;
}

/* Every library op under the default and the GPU schedule, a program of each of its GPU
 * sketches (up to 4), and the shared-memory matmul, run as CPU threads against the reference. */
static void
test_emulated(void)
{
    enum {
        NRANDOM = 16,
        CAP = 6 * 64 + 32 + 9 + 1 + 2 + 2 + (int)KILN_COUNTOF(vec_cases) + NRANDOM + 3 * 8
    };
    static struct emu_case cases[CAP];
    static char            what[CAP][64];
    uint32_t               n = 0;
    for (size_t i = 0; i < kiln_test_nop_cases && i < 64; i++)
        for (uint32_t sk = 0; sk < 4; sk++) {
            snprintf(what[n], sizeof what[n], "op case %zu, GPU sketch %u", i, sk);
            if (emu_sketch_case(&cases[n], kiln_test_op_cases[i], sk, NULL,
                                opt_seed() + 97 * i + sk, false, what[n], n))
                n++;
            else
                kiln_ctx_free(cases[n].ctx);
        }
    for (size_t i = 0; i < kiln_test_nop_cases && i < 64; i++)
        for (int gpu = 0; gpu < 2; gpu++) {
            snprintf(what[n], sizeof what[n], "op case %zu, %s schedule", i,
                     gpu ? "GPU" : "default");
            if (emu_case(&cases[n], kiln_test_op_cases[i], gpu ? "gpu" : NULL, what[n], n))
                n++;
            else
                kiln_ctx_free(cases[n].ctx); /* another dtype than f32: not emulated */
        }
    for (size_t i = 0; i < KILN_COUNTOF(vec_cases); i++) {
        snprintf(what[n], sizeof what[n], "vector case: %s", vec_cases[i].what);
        if (emu_case(&cases[n], vec_cases[i].kg, vec_cases[i].json, what[n], n))
            n++;
        else {
            harness_fail(__FILE__, __LINE__, "%s: %s", what[n], kiln_ctx_error(cases[n].ctx)->msg);
            kiln_ctx_free(cases[n].ctx);
        }
    }
    for (size_t i = 0; i < kiln_test_nxred_cases && i < 32; i++) {
        snprintf(what[n], sizeof what[n], "cross-thread reduction: %s",
                 kiln_test_xred_cases[i].what);
        if (emu_case(&cases[n], kiln_test_xred_cases[i].kg, kiln_test_xred_cases[i].json, what[n],
                     n))
            n++;
        else {
            harness_fail(__FILE__, __LINE__, "%s: %s", what[n], kiln_ctx_error(cases[n].ctx)->msg);
            kiln_ctx_free(cases[n].ctx);
        }
    }
    /* random graphs and schedules whose kernels use vector accesses: the first NRANDOM of
     * 400 seeds */
    uint32_t nrandom = 0;
    for (uint64_t sd = opt_seed(); sd < opt_seed() + 400 && nrandom < NRANDOM; sd++) {
        snprintf(what[n], sizeof what[n], "random case seed %llu", (unsigned long long)sd);
        if (emu_random_case(&cases[n], sd, what[n], n)) {
            n++;
            nrandom++;
        } else {
            kiln_ctx_free(cases[n].ctx);
        }
    }
    printf("%u random cases with vector accesses\n", nrandom);
    /* programs of the cross-thread reduction sketch (tuner/sketch_gpu.c) */
    static const char *const xsk[] = {
        "input x: f32[1, 300]\nweight W: f32[20, 300]\ny = dense(x, W)\noutput y\n",
        "input x: f32[2, 8, 7, 7]\ny = global_avg_pool2d(x)\noutput y\n",
        "input x: f32[3, 500]\ny = softmax(x, axis=-1)\noutput y\n",
    };
    for (size_t i = 0; i < KILN_COUNTOF(xsk); i++)
        for (uint64_t d = 0; d < 3; d++) {
            snprintf(what[n], sizeof what[n], "cross-thread sketch %zu, draw %llu", i,
                     (unsigned long long)d);
            if (emu_sketch_case(&cases[n], xsk[i], 0, "gpu-cross-thread-reduce",
                                opt_seed() + 31 * i + d, false, what[n], n))
                n++;
            else {
                harness_fail(__FILE__, __LINE__, "%s: no such sketch or program", what[n]);
                kiln_ctx_free(cases[n].ctx);
            }
        }
    /* programs of the tiled GPU sketches with their vector knob on (tuner/sketch_gpu.c): for
     * each sketch of a matmul and two convolutions that has one, the first of 40 draws whose
     * kernels make float4/float2 accesses; every graph must have some */
    static const char *const vsk[] = {
        "input a: f32[40, 64]\nweight b: f32[64, 48]\nc[i, j] += a[i, k] * b[k, j]\noutput c\n",
        "input x: f32[1, 8, 16, 16]\nweight w: f32[16, 8, 3, 3]\ny = conv2d(x, w, padding=1)\n",
        ("input x: f32[1, 8, 14, 14]\nweight w: f32[8, 8, 3, 3]\nweight b: f32[8]\n"
         "y = conv2d(x, w, b, padding=1)\nz = relu(y)\noutput z\n"),
    };
    for (size_t i = 0; i < KILN_COUNTOF(vsk); i++) {
        uint32_t found = 0;
        for (uint32_t sk = 0; sk < 8 && n < CAP; sk++)
            for (uint64_t d = 0; d < 40; d++) {
                uint64_t sd = opt_seed() + 1000 * i + 40 * sk + d;
                snprintf(what[n], sizeof what[n],
                         "vector knob: graph %zu, GPU sketch %u, seed %llu", i, sk,
                         (unsigned long long)sd);
                bool     ok = emu_sketch_case(&cases[n], vsk[i], sk, NULL, sd, true, what[n], n);
                uint32_t nv = 0;
                for (uint32_t k = 0; ok && k < cases[n].src.nkernel; k++)
                    nv += cases[n].src.kernel[k].nvector;
                if (nv > 0) {
                    printf("%s: %u float4/float2 accesses\n", what[n], nv);
                    n++;
                    found++;
                    break;
                }
                kiln_ctx_free(cases[n].ctx);
                if (!ok)
                    break; /* no such sketch */
            }
        if (!found)
            harness_fail(__FILE__, __LINE__,
                         "vector knob: no program of graph %zu has float4 accesses", i);
    }
    snprintf(what[n], sizeof what[n], "shared-memory matmul");
    if (emu_case(&cases[n], kiln_test_shared_matmul_kg, kiln_test_shared_matmul, what[n], n))
        n++;
    else {
        harness_fail(__FILE__, __LINE__, "shared-memory matmul: %s",
                     kiln_ctx_error(cases[n].ctx)->msg);
        kiln_ctx_free(cases[n].ctx);
    }
    /* the trigonometric and hyperbolic functions (sinf ... atanhf) in their domains, fmodf */
    static const char trig_kg[] =
        "input x: f32[5, 33]\n"
        "a[i, j] = sin(x[i, j]) + cos(x[i, j]) * tan(x[i, j]) - atan(x[i, j])\n"
        "b[i, j] = sinh(x[i, j]) + cosh(x[i, j]) * asinh(x[i, j])\n"
        "c[i, j] = asin(x[i, j]) + acos(x[i, j]) * atanh(x[i, j] * 0.9)\n"
        "d[i, j] = acosh(abs(x[i, j]) + 1.0) + a[i, j] + b[i, j] + c[i, j]\n"
        "e[i, j] = d[i, j] + fmod(x[i, j] * 8.0, 0.75)\n" /* exact in f32 and f64 */
        "output e\n";
    for (int gpu = 0; gpu < 2; gpu++) {
        snprintf(what[n], sizeof what[n], "trigonometric functions, %s schedule",
                 gpu ? "GPU" : "default");
        if (emu_case(&cases[n], trig_kg, gpu ? "gpu" : NULL, what[n], n))
            n++;
        else {
            harness_fail(__FILE__, __LINE__, "%s: %s", what[n], kiln_ctx_error(cases[n].ctx)->msg);
            kiln_ctx_free(cases[n].ctx);
        }
    }
    /* benchmarks/bench_gpu.c's hand-written schedules, at sizes their tiles do not divide */
    static char bench_kg[2][1024];
    gpu_matmul_kg(bench_kg[0], sizeof bench_kg[0], 72, 40, 20);
    gpu_conv3x3_kg(bench_kg[1], sizeof bench_kg[1], 12, 20, 9, 9);
    for (int b = 0; b < 2; b++) {
        snprintf(what[n], sizeof what[n], "bench_gpu's %s schedule", b ? "conv3x3" : "matmul");
        if (emu_case(&cases[n], bench_kg[b], b ? gpu_conv3x3_schedule : gpu_matmul_schedule,
                     what[n], n))
            n++;
        else {
            harness_fail(__FILE__, __LINE__, "%s: %s", what[n], kiln_ctx_error(cases[n].ctx)->msg);
            kiln_ctx_free(cases[n].ctx);
        }
    }
    /* one C++ translation unit for all cases, built with the system's C++ compiler */
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_buf all = {0};
    kiln_buf_puts(ctx, &all, kiln_test_emu_prelude);
    bool ok = true;
    for (uint32_t i = 0; i < n && ok; i++)
        ok = emu_append(&all, ctx, i, &cases[i]);
    CHECK(ok);
    char dir[] = "kiln_test_emu_XXXXXX", cpp[64], so[64], cmd[256];
    if (ok && mkdtemp(dir)) {
        snprintf(cpp, sizeof cpp, "%s/k.cpp", dir);
        snprintf(so, sizeof so, "%s/k.so", dir);
        FILE *fp = fopen(cpp, "w");
        if (fp) {
            fputs(all.data, fp);
            fclose(fp);
        }
        snprintf(cmd, sizeof cmd, "c++ -std=c++17 -O1 -shared -fPIC -w -o %s %s -lpthread", so,
                 cpp);
        int   rc = system(cmd);
        void *h = rc == 0 ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
        if (rc != 0)
            harness_fail(__FILE__, __LINE__, "c++ could not build the kernels (%s)", cmd);
        uint32_t good = 0, nvcase = 0;
        void    *cp = h ? dlsym(h, "kiln_emu_counts") : NULL;
        void (*counts)(long *, long *) = NULL;
        long vec = 0, mis = 0;
        memcpy(&counts, &cp, sizeof cp);
        for (uint32_t i = 0; h && counts && i < n; i++) {
            long v0, m0;
            counts(&v0, &m0);
            good += emu_check(h, &cases[i], opt_seed() + i);
            counts(&vec, &mis);
            nvcase += vec > v0;
            if (mis != m0)
                harness_fail(__FILE__, __LINE__, "%s: %ld float4/float2 accesses not aligned",
                             cases[i].what, mis - m0);
        }
        printf("%u of %u cases ran on CPU threads and matched the reference\n", good, n);
        printf("%u cases made %ld float4/float2 accesses, %ld of them misaligned\n", nvcase, vec,
               mis);
        CHECK_EQ_INT(n, good);
        CHECK(nvcase >= KILN_COUNTOF(vec_cases) && mis == 0);
        if (h)
            dlclose(h);
        unlink(so);
        unlink(cpp);
        rmdir(dir);
    }
    for (uint32_t i = 0; i < n; i++)
        kiln_ctx_free(cases[i].ctx);
    kiln_ctx_free(ctx);
}

/* The target's -fast-math reaches NVRTC: compiled through kiln_graph_compile to PTX, a kernel
 * with exp and div uses the approximate, flush-to-zero instructions only when asked. */
static void
test_fast_math(void)
{
    if (!toolkit())
        return;
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = PARSE(ctx, "input a: f32[3, 5]\ninput b: f32[3, 5]\nz = exp(b)\n"
                                      "y = div(a, z)\noutput y\n");
    char              *ptx[2] = {NULL, NULL};
    for (int fast = 0; g && fast < 2; fast++) {
        struct kiln_compile_options opt = {
            .target = fast ? "cuda -arch=sm_80 -fast-math" : "cuda -arch=sm_80", .name = "fm"};
        char path[] = "kiln_test_fast_XXXXXX.ptx";
        int  fd = mkstemps(path, 4);
        CHECK(fd >= 0);
        if (fd < 0)
            break;
        close(fd);
        CHECK_EQ_INT(KILN_OK, kiln_graph_compile(ctx, g, &opt, path, NULL));
        ptx[fast] = read_file(path, NULL);
        unlink(path);
    }
    CHECK(ptx[0] && ptx[1]);
    if (ptx[0] && ptx[1]) {
        CHECK(strcmp(ptx[0], ptx[1]) != 0);
        /* IEEE division by default (expf uses ex2.approx.ftz either way) */
        CHECK(strstr(ptx[0], "div.rn.f32") && !strstr(ptx[0], "div.approx"));
        CHECK(strstr(ptx[1], "div.approx.ftz.f32") && !strstr(ptx[1], "div.rn.f32"));
        CHECK_EQ_INT(KILN_OK, kiln_ptxas_check(ctx, ptx[1], "sm_80"));
    }
    free(ptx[0]);
    free(ptx[1]);
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
    {"library_ops", test_library_ops},
    {"random_schedules", test_random_schedules},
    {"launch", test_launch},
    {"shared", test_shared},
    {"emulated", test_emulated},
    {"errors", test_errors},
    {"fast_math", test_fast_math},
    {"vector", test_vector},
    {"cross_thread", test_cross_thread},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
