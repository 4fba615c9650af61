/* tests/abi/test_abi.c -- generated shared objects used without libkiln: kiln compiles matrix
 * products of several sizes (kiln_graph_compile), and examples/dlopen/consumer.c, built here
 * against include/kiln_abi.h and libdl only, loads and checks each one (entry points, results,
 * refused misuse, thread counts, concurrent calls). The same objects are loaded through libkiln's
 * kiln_module_* API and compared with the reference interpreter.
 *
 * Skips (exit 77) while `kiln compile --help` does not print a usage: until then the
 * generated objects are not a finished feature. KILN_TEST_FORCE_COMPILE=1 runs it anyway. */
#include "../../runtime/runtime.h"
#include "../harness.h"
#include "so_build.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct env {
    char build[1024], tmp[64], log[128];
};

/* 1 when `kiln compile --help` exits 0 and prints a usage naming compile. */
static int
compile_exists(const char *build)
{
    if (getenv("KILN_TEST_FORCE_COMPILE"))
        return 1;
    char cmd[1200], out[4096] = "";
    snprintf(cmd, sizeof cmd, "'%s/kiln' compile --help 2>&1", build);
    FILE *p = popen(cmd, "r");
    if (!p)
        return 0;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    for (char *c = out; *c; c++)
        *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    return rc == 0 && strstr(out, "usage") && strstr(out, "compile");
}

static int
env_init(struct env *e)
{
    if (!so_build_dir(e->build, sizeof e->build)) {
        harness_fail(__FILE__, __LINE__, "cannot find the build directory");
        return 0;
    }
    if (!compile_exists(e->build)) {
        harness_skip("`kiln compile --help` does not answer yet, so there are no generated "
                     "shared objects to test (KILN_TEST_FORCE_COMPILE=1 tries anyway)");
        return 0;
    }
    snprintf(e->tmp, sizeof e->tmp, "/tmp/kiln-abi-XXXXXX");
    if (!mkdtemp(e->tmp)) {
        harness_fail(__FILE__, __LINE__, "mkdtemp failed");
        return 0;
    }
    snprintf(e->log, sizeof e->log, "%s/log", e->tmp);
    return 1;
}

static void
env_fini(struct env *e)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", e->tmp);
}

static const char *
mm_source(char *buf, size_t size, int m, int k, int n)
{
    snprintf(buf, size,
             "input a: f32[%d, %d]\ninput b: f32[%d, %d]\nC[i, j] += a[i, k] * b[k, j]\n"
             "output C\n",
             m, k, k, n);
    return buf;
}

/* Compiles the m x k x n product into path; 0 on failure (reported). */
static int
compile_mm(const char *path, int m, int k, int n)
{
    char                        src[256];
    kiln_ctx                   *ctx = kiln_ctx_new(NULL);
    struct kiln_graph          *g = PARSE(ctx, mm_source(src, sizeof src, m, k, n));
    int                         ok = g != NULL;
    struct kiln_compile_options opt = {NULL, NULL, 0, "mm"};
    if (ok && kiln_graph_compile(ctx, g, &opt, path, NULL) != KILN_OK) {
        char msg[1024];
        kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        harness_fail(__FILE__, __LINE__, "compiling %dx%dx%d: %s", m, k, n, msg);
        ok = 0;
    }
    kiln_ctx_free(ctx);
    return ok;
}

static const int sizes[][3] = {{1, 1, 1}, {5, 7, 3}, {33, 17, 20}, {64, 128, 32}, {130, 70, 96}};

static void
test_consumer(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    char cmd[8192], consumer[128];
    snprintf(consumer, sizeof consumer, "%s/consumer", e.tmp);
    /* only kiln_abi.h (with DLPack's header) and libdl: no libkiln on this command line, and
     * the public header copied alone into an include directory of its own, so that it is shown
     * to need nothing else of kiln's (kiln.h, the internal kiln_abi_impl.h) */
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/inc' && cp include/kiln_abi.h '%s/inc/' && " SO_BUILD_CC
             " -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -O1" SO_BUILD_SAN
             " -I'%s/inc' examples/dlopen/consumer.c -o '%s' -ldl -lpthread -lm",
             e.tmp, e.tmp, e.tmp, consumer);
    if (so_build_run(cmd, e.log) != 0) {
        harness_fail(__FILE__, __LINE__, "building the consumer failed: %s", cmd);
        so_build_dump(e.log);
        env_fini(&e);
        return;
    }
    for (size_t i = 0; i < KILN_COUNTOF(sizes); i++) {
        char so[128];
        snprintf(so, sizeof so, "%s/mm%zu.so", e.tmp, i);
        if (!compile_mm(so, sizes[i][0], sizes[i][1], sizes[i][2]))
            continue;
        snprintf(cmd, sizeof cmd, SO_BUILD_RUN_ENV "'%s' '%s' %d %d %d", consumer, so, sizes[i][0],
                 sizes[i][1], sizes[i][2]);
        if (so_build_run(cmd, e.log) != 0) {
            harness_fail(__FILE__, __LINE__, "the consumer failed on %dx%dx%d", sizes[i][0],
                         sizes[i][1], sizes[i][2]);
            so_build_dump(e.log);
        }
    }
    env_fini(&e);
}

/* The same objects through libkiln's module API, against the reference interpreter. */
static void
test_module_vs_interpreter(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    for (size_t s = 0; s < KILN_COUNTOF(sizes); s++) {
        int  m = sizes[s][0], k = sizes[s][1], n = sizes[s][2];
        char so[128], src[256];
        snprintf(so, sizeof so, "%s/mm%zu.so", e.tmp, s);
        if (!compile_mm(so, m, k, n))
            continue;
        kiln_ctx           *ctx = kiln_ctx_new(NULL);
        struct kiln_module *mod = NULL;
        CHECK_EQ_INT(KILN_OK, kiln_module_load(ctx, so, &mod));
        struct kiln_graph *g = PARSE(ctx, mm_source(src, sizeof src, m, k, n));
        if (mod && g) {
            CHECK_EQ_INT(3, kiln_module_nargs(mod));
            CHECK(strstr(kiln_module_metadata(mod), "\"name\": \"mm\"") != NULL);
            char hash[32];
            snprintf(hash, sizeof hash, "\"%016llx\"", (unsigned long long)kiln_graph_hash(g));
            CHECK(strstr(kiln_module_metadata(mod), hash) != NULL);
            float          *a = kiln_rt_alloc((int64_t)sizeof(float) * m * k);
            float          *b = kiln_rt_alloc((int64_t)sizeof(float) * k * n);
            float          *c = kiln_rt_alloc((int64_t)sizeof(float) * m * n);
            double         *da = malloc(sizeof(double) * (size_t)(m * k));
            double         *db = malloc(sizeof(double) * (size_t)(k * n));
            double         *dc = malloc(sizeof(double) * (size_t)(m * n));
            struct kiln_rng r = kiln_rng_new(opt_seed() + s);
            for (int i = 0; i < m * k; i++)
                da[i] = a[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
            for (int i = 0; i < k * n; i++)
                db[i] = b[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
            int64_t       sa[2] = {m, k}, sb[2] = {k, n}, sc[2] = {m, n};
            DLTensor      ta = {a, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sa, NULL, 0};
            DLTensor      tb = {b, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sb, NULL, 0};
            DLTensor      tc = {c, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sc, NULL, 0};
            DLTensor     *args[3] = {&ta, &tb, &tc};
            const double *in[2] = {da, db};
            double       *out[1] = {dc};
            CHECK_EQ_INT(KILN_OK, kiln_graph_eval(ctx, g, in, out));
            for (int threads = 0; threads <= 3; threads++) {
                kiln_module_set_num_threads(mod, threads);
                for (int i = 0; i < m * n; i++)
                    c[i] = NAN;
                CHECK_EQ_INT(KILN_OK, kiln_module_call(ctx, mod, args, 3, NULL));
                int bad = 0;
                for (int i = 0; i < m * n; i++)
                    bad += !(fabs(c[i] - dc[i]) <= (1e-5 + 1e-4 * fabs(dc[i])) * sqrt(k));
                if (bad)
                    harness_fail(__FILE__, __LINE__, "%dx%dx%d, %d threads: %d elements differ", m,
                                 k, n, threads, bad);
            }
            kiln_rt_free(a);
            kiln_rt_free(b);
            kiln_rt_free(c);
            free(da);
            free(db);
            free(dc);
        }
        kiln_module_free(mod);
        kiln_ctx_free(ctx);
    }
    env_fini(&e);
}

/* The integer dtypes without an older ABI code: each argument's DLPack type (kDLUInt for u8 ..
 * u64, kDLInt 16 for i16), a call with those tensors computing y = a * 3 - b (wrapping at the
 * width; unsigned) against the same arithmetic in C, and a signed tensor refused for an
 * unsigned argument. */
static void
test_dtype_codes(void)
{
    static const struct {
        const char *name;
        uint8_t     code, bits;
    } dts[] = {{"u8", kDLUInt, 8},
               {"u16", kDLUInt, 16},
               {"u32", kDLUInt, 32},
               {"u64", kDLUInt, 64},
               {"i16", kDLInt, 16}};
    struct env      e;
    struct kiln_rng r = kiln_rng_new(opt_seed());
    if (!env_init(&e))
        return;
    for (size_t d = 0; d < KILN_COUNTOF(dts); d++) {
        char so[128], src[256];
        snprintf(so, sizeof so, "%s/dt%zu.so", e.tmp, d);
        snprintf(src, sizeof src,
                 "input a: %s[37]\ninput b: %s[37]\ny[i] = a[i] * %s(3) - b[i]\noutput y\n",
                 dts[d].name, dts[d].name, dts[d].name);
        kiln_ctx                   *ctx = kiln_ctx_new(NULL);
        struct kiln_graph          *g = PARSE(ctx, src);
        struct kiln_compile_options opt = {NULL, NULL, 0, "dt"};
        struct kiln_module         *mod = NULL;
        if (!g || kiln_graph_compile(ctx, g, &opt, so, NULL) != KILN_OK
            || kiln_module_load(ctx, so, &mod) != KILN_OK) {
            char msg[1024] = "";
            if (kiln_ctx_error(ctx))
                kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
            harness_fail(__FILE__, __LINE__, "%s: %s", dts[d].name, msg);
            kiln_ctx_free(ctx);
            continue;
        }
        for (uint32_t i = 0; i < 3; i++) {
            struct kiln_module_arg arg;
            CHECK_EQ_INT(KILN_OK, kiln_module_arg(mod, i, &arg));
            CHECK_EQ_STR(dts[d].name, kiln_dtype_name(arg.dtype));
            CHECK_EQ_INT(dts[d].code, arg.dl_dtype.code);
            CHECK_EQ_INT(dts[d].bits, arg.dl_dtype.bits);
        }
        size_t         size = dts[d].bits / 8;
        uint64_t       mask = dts[d].bits == 64 ? ~0ull : (1ull << dts[d].bits) - 1;
        unsigned char *a = kiln_rt_alloc(37 * 8), *b = kiln_rt_alloc(37 * 8),
                      *y = kiln_rt_alloc(37 * 8);
        uint64_t va[37], vb[37];
        for (int i = 0; i < 37; i++) { /* little-endian hosts: the low bytes of each value */
            va[i] = kiln_rng_next(&r) & mask;
            vb[i] = kiln_rng_next(&r) & mask;
            memcpy(a + (size_t)i * size, &va[i], size);
            memcpy(b + (size_t)i * size, &vb[i], size);
        }
        int64_t    shape[1] = {37};
        DLDataType t = {dts[d].code, dts[d].bits, 1};
        DLTensor   ta = {a, {kDLCPU, 0}, 1, t, shape, NULL, 0};
        DLTensor   tb = {b, {kDLCPU, 0}, 1, t, shape, NULL, 0};
        DLTensor   ty = {y, {kDLCPU, 0}, 1, t, shape, NULL, 0};
        DLTensor  *args[3] = {&ta, &tb, &ty};
        CHECK_EQ_INT(KILN_OK, kiln_module_call(ctx, mod, args, 3, NULL));
        int bad = 0;
        for (int i = 0; i < 37; i++) {
            uint64_t got = 0, want = (va[i] * 3 - vb[i]) & mask;
            memcpy(&got, y + (size_t)i * size, size);
            bad += got != want;
        }
        if (bad)
            harness_fail(__FILE__, __LINE__, "%s: %d of 37 elements differ", dts[d].name, bad);
        if (dts[d].code == kDLUInt) { /* the signed type of the same width is refused */
            char want[128];
            snprintf(want, sizeof want, "argument 0 (a) has dtype i%u, expected %s", dts[d].bits,
                     dts[d].name);
            ta.dtype.code = kDLInt;
            CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_call(ctx, mod, args, 3, NULL));
            CHECK(kiln_ctx_error(ctx) && strstr(kiln_ctx_error(ctx)->msg, want) != NULL);
        }
        kiln_rt_free(a);
        kiln_rt_free(b);
        kiln_rt_free(y);
        kiln_module_free(mod);
        kiln_ctx_free(ctx);
    }
    env_fini(&e);
}

SO_BUILD_LSAN_SUPPRESSIONS

static const struct test tests[] = {
    {"consumer", test_consumer},
    {"module_vs_interpreter", test_module_vs_interpreter},
    {"dtype_codes", test_dtype_codes},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
