/* tests/abi/test_abi.c -- generated shared objects used without libkiln: kiln compiles matrix
 * products of several sizes (kiln_graph_compile), and examples/dlopen/consumer.c, built here
 * against include/kiln_abi.h and libdl only, loads and checks each one (entry points, results,
 * refused misuse, thread counts, concurrent calls). The same objects are loaded through libkiln's
 * kiln_module_* API and compared with the reference interpreter. A product whose weight is
 * built into the module (embedded) is called with its input and output alone, by two threads
 * making the first call at once, and checked against the interpreter and the same product
 * compiled with the weight as an argument.
 *
 * Skips (exit 77) while `kiln compile --help` does not print a usage: until then the
 * generated objects are not a finished feature. KILN_TEST_FORCE_COMPILE=1 runs it anyway. */
#include "../../runtime/runtime.h"
#include "../harness.h"
#include "so_build.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
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

/* ---- embedded weights ---- */

struct first_call {
    kiln_call_fn       call;
    DLTensor          *args[2];
    pthread_barrier_t *bar;
    int32_t            rc;
    char               err[256];
};

static void *
first_call_thread(void *p)
{
    struct first_call *f = p;
    pthread_barrier_wait(f->bar);
    f->rc = f->call(f->args, 2, f->err, sizeof f->err);
    return NULL;
}

/* Elements of got[0..n) not within the usual tolerance of want (k terms per sum). */
static int
mismatches(const float *got, const double *want, int n, int k)
{
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += !(fabs(got[i] - want[i]) <= (1e-5 + 1e-4 * fabs(want[i])) * sqrt(k));
    return bad;
}

/* Compiles C = a b (b a weight with values w when w != NULL: embedded) with b packed, so the
 * module has weight-derived buffers. 0 on failure (reported). */
static int
compile_embedded(const char *path, const char *src, const double *w)
{
    static const char sched[] =
        "{\"steps\": [{\"op\": \"pack\", \"stage\": \"b\", \"dim\": 1, \"factor\": 4, "
        "\"outer\": 0}]}";
    kiln_ctx                   *ctx = kiln_ctx_new(NULL);
    struct kiln_graph          *g = PARSE(ctx, src);
    const double               *ws[2] = {NULL, w};
    struct kiln_compile_options opt = {NULL, sched, strlen(sched), "emb"};
    int                         ok = g != NULL;
    if (ok && kiln_graph_compile_weights(ctx, g, &opt, w ? ws : NULL, path, NULL) != KILN_OK) {
        char msg[1024];
        kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        harness_fail(__FILE__, __LINE__, "compiling %s: %s", path, msg);
        ok = 0;
    }
    kiln_ctx_free(ctx);
    return ok;
}

static void
test_embedded(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    enum { M = 33, K = 17, N = 20 };
    char src[256], emb[128], ext[128];
    snprintf(src, sizeof src,
             "input a: f32[%d, %d]\nweight b: f32[%d, %d]\nC[i, j] += a[i, k] * b[k, j]\n"
             "output C\n",
             M, K, K, N);
    snprintf(emb, sizeof emb, "%s/emb.so", e.tmp);
    snprintf(ext, sizeof ext, "%s/ext.so", e.tmp);
    static double   da[M * K], db[K * N], dc[M * N];
    float          *a = kiln_rt_alloc((int64_t)sizeof(float) * M * K);
    float          *b = kiln_rt_alloc((int64_t)sizeof(float) * K * N);
    float          *c = kiln_rt_alloc((int64_t)sizeof(float) * M * N);
    float          *c1 = kiln_rt_alloc((int64_t)sizeof(float) * M * N);
    float          *c2 = kiln_rt_alloc((int64_t)sizeof(float) * M * N);
    float          *c3 = kiln_rt_alloc((int64_t)sizeof(float) * M * N);
    size_t          cbytes = sizeof(float) * M * N;
    struct kiln_rng r = kiln_rng_new(opt_seed());
    for (int i = 0; i < M * K; i++)
        da[i] = a[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
    for (int i = 0; i < K * N; i++) /* doubles: the module rounds them to f32 itself */
        b[i] = (float)(db[i] = 2 * kiln_rng_uniform(&r) - 1);
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = PARSE(ctx, src);
    double            *dbf = malloc(sizeof(double) * K * N); /* the f32 values, for the oracle */
    for (int i = 0; dbf && i < K * N; i++)
        dbf[i] = b[i];
    const double *in[2] = {da, dbf};
    double       *out[1] = {dc};
    if (!g || !dbf || kiln_graph_eval(ctx, g, in, out) != KILN_OK || !compile_embedded(emb, src, db)
        || !compile_embedded(ext, src, NULL)) {
        harness_fail(__FILE__, __LINE__, "setting up the embedded-weight modules failed");
        goto done;
    }
    int64_t   sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
    DLTensor  ta = {a, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sa, NULL, 0};
    DLTensor  tb = {b, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sb, NULL, 0};
    DLTensor  tc = {c, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sc, NULL, 0};
    DLTensor  tc1 = {c1, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sc, NULL, 0};
    DLTensor *args3[3] = {&ta, &tb, &tc};

    /* straight through the ABI: two threads make the first call (which prepares) at once */
    void *so = dlopen(emb, RTLD_NOW | RTLD_LOCAL);
    CHECK(so != NULL);
    if (!so)
        goto done;
    kiln_call_fn     call;
    kiln_metadata_fn md;
    int32_t (*embedded)(int32_t, DLTensor *, const char **);
    void *p = dlsym(so, "kiln_call"), *q = dlsym(so, "kiln_metadata"),
         *w = dlsym(so, "kiln_embedded");
    CHECK(p && q && w);
    if (!p || !q || !w) {
        dlclose(so);
        goto done;
    }
    memcpy(&call, &p, sizeof call);
    memcpy(&md, &q, sizeof md);
    memcpy(&embedded, &w, sizeof embedded);
    const char *meta = md();
    CHECK(strstr(meta, "\"args\": [{\"name\": \"a\"") != NULL);
    CHECK(strstr(meta, "\"embedded\": [{\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [17, 20], "
                       "\"role\": \"weight\"")
          != NULL);
    CHECK(strstr(meta, "\"prepared_bytes\": 0") == NULL); /* the lazy preparation is tested */
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    struct first_call f[2] = {{call, {&ta, &tc}, &bar, -1, ""}, {call, {&ta, &tc1}, &bar, -1, ""}};
    pthread_t         th[2];
    for (int i = 0; i < M * N; i++)
        c[i] = c1[i] = NAN;
    for (int i = 0; i < 2; i++)
        CHECK_EQ_INT(0, pthread_create(&th[i], NULL, first_call_thread, &f[i]));
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    for (int i = 0; i < 2; i++) {
        if (f[i].rc != KILN_ABI_OK)
            harness_fail(__FILE__, __LINE__, "first call %d: %s", i, f[i].err);
    }
    int bad = mismatches(c, dc, M * N, K) + mismatches(c1, dc, M * N, K);
    if (bad)
        harness_fail(__FILE__, __LINE__, "the concurrent first calls: %d elements differ", bad);
    /* a later call, a refused call with the weight passed, and the embedded weight itself */
    DLTensor *args2[2] = {&ta, &tc};
    char      err[256] = "";
    CHECK_EQ_INT(KILN_ABI_OK, call(args2, 2, err, sizeof err));
    CHECK_EQ_INT(0, mismatches(c, dc, M * N, K));
    CHECK_EQ_INT(KILN_ABI_ERR_NARGS, call(args3, 3, err, sizeof err));
    CHECK(strstr(err, "expected 2 arguments (a, C), got 3") && strstr(err, "built in"));
    DLTensor    tw;
    const char *wname = NULL;
    CHECK_EQ_INT(1, embedded(0, &tw, &wname));
    CHECK_EQ_INT(1, embedded(1, &tw, NULL)); /* out of range: the count only */
    CHECK_EQ_INT(1, embedded(0, &tw, &wname));
    CHECK(wname && !strcmp(wname, "b") && tw.ndim == 2 && tw.shape[0] == K && tw.shape[1] == N);
    CHECK(tw.dtype.code == kDLFloat && tw.dtype.bits == 32 && (uintptr_t)tw.data % 64 == 0);
    CHECK(tw.data && !memcmp(tw.data, b, sizeof(float) * K * N));
    dlclose(so);

    /* through libkiln: two arguments listed, the weight apart; the same as the external one */
    struct kiln_module *me = NULL, *mx = NULL;
    CHECK_EQ_INT(KILN_OK, kiln_module_load(ctx, emb, &me));
    CHECK_EQ_INT(KILN_OK, kiln_module_load(ctx, ext, &mx));
    if (me && mx) {
        CHECK_EQ_INT(2, kiln_module_nargs(me));
        CHECK_EQ_INT(1, kiln_module_nembedded(me));
        CHECK_EQ_INT(3, kiln_module_nargs(mx));
        CHECK_EQ_INT(0, kiln_module_nembedded(mx));
        struct kiln_module_arg ai;
        const void            *data = NULL;
        uint32_t               pos = 9;
        CHECK_EQ_INT(KILN_OK, kiln_module_arg(me, 1, &ai));
        CHECK(!strcmp(ai.name, "C") && ai.role == KILN_ARG_OUTPUT);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_arg(me, 2, &ai));
        CHECK_EQ_INT(KILN_OK, kiln_module_embedded(me, 0, &ai, &data, &pos));
        CHECK(!strcmp(ai.name, "b") && ai.role == KILN_ARG_WEIGHT && pos == 1 && data);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_embedded(me, 1, &ai, &data, &pos));
        CHECK(strstr(kiln_module_metadata(mx), "\"embedded\"") == NULL);
        CHECK(strstr(kiln_module_metadata(mx), "\"name\": \"b\", \"dtype\": \"f32\", \"shape\": "
                                               "[17, 20], \"role\": \"weight\"")
              != NULL);
        tc.data = c2;
        CHECK_EQ_INT(KILN_OK, kiln_module_call(ctx, me, args2, 2, NULL));
        tc.data = c3;
        CHECK_EQ_INT(KILN_OK, kiln_module_call(ctx, mx, args3, 3, NULL));
        CHECK_EQ_INT(0, mismatches(c2, dc, M * N, K));
        CHECK_EQ_INT(0, memcmp(c2, c3, cbytes)); /* same code, same weights: same bits */
        struct kiln_prepared *pr = NULL;         /* explicit prepared calls work too */
        CHECK_EQ_INT(KILN_OK, kiln_module_prepare(ctx, me, args2, 2, &pr, NULL));
        memset(c2, 0, cbytes);
        tc.data = c2;
        CHECK_EQ_INT(KILN_OK, kiln_module_call_prepared(ctx, me, pr, args2, 2, NULL));
        CHECK_EQ_INT(0, memcmp(c2, c3, cbytes));
        kiln_module_prepared_free(me, pr);
    }
    kiln_module_free(me);
    kiln_module_free(mx);
done:
    kiln_ctx_free(ctx);
    free(dbf);
    kiln_rt_free(a);
    kiln_rt_free(b);
    kiln_rt_free(c);
    kiln_rt_free(c1);
    kiln_rt_free(c2);
    kiln_rt_free(c3);
    env_fini(&e);
}

SO_BUILD_LSAN_SUPPRESSIONS

static const struct test tests[] = {
    {"consumer", test_consumer},
    {"module_vs_interpreter", test_module_vs_interpreter},
    {"dtype_codes", test_dtype_codes},
    {"embedded", test_embedded},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
