/* tests/runtime/test_runtime.c -- the runtime: kiln_abi_call's checks against a hand-built
 * descriptor and a hand-written kernel (every misuse with its exact message, correct calls with
 * byte_offset, explicit strides and more arguments than the stack table holds), the parallel-for
 * (every iteration exactly once for many sizes and thread counts, error propagation, nested
 * calls serial), aligned allocation, the clock; and, through tests/abi/fake_module.c compiled
 * into a shared object with libkiln_rt.a, the exported entry points (runtime/so_entry.c), the
 * module loader's errors and the libkiln-free consumer program examples/dlopen/consumer.c. */
#include "../../runtime/runtime.h"
#include "../abi/so_build.h"
#include "../harness.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- a hand-built descriptor: C[4, 8] = a[4, 8] + b[1, 8] ---- */

static const int64_t             shape_a[2] = {4, 8}, shape_b[2] = {1, 8};
static const struct kiln_abi_arg args3[3] = {
    {"a", kDLFloat, 32, 1, 2, shape_a, 4, 0},
    {"b", kDLFloat, 32, 1, 2, shape_b, 16, 1},
    {"C", kDLFloat, 32, 1, 2, shape_a, 4, 2},
};
static int kernel_calls;

static int32_t
add_kernel(void *const *data)
{
    const float *a = data[0], *b = data[1];
    float       *c = data[2];
    kernel_calls++;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            c[i * 8 + j] = a[i * 8 + j] + b[j];
    return 0;
}

static const struct kiln_abi_desc desc3 = {KILN_ABI_VERSION, 3,    args3, add_kernel, "{}", "",
                                           kDLCPU,           NULL, 0,     NULL,       NULL};

struct fixture {
    _Alignas(64) float a[32 + 16];
    _Alignas(64) float b[8 + 16];
    _Alignas(64) float c[32 + 16];
    int64_t   sa[2], sb[2], sc[2];
    DLTensor  ta, tb, tc;
    DLTensor *args[3];
    char      err[256];
};

static void
fixture_init(struct fixture *f)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < 48; i++) {
        f->a[i] = (float)i;
        f->c[i] = -1;
    }
    for (int j = 0; j < 24; j++)
        f->b[j] = (float)(100 * j);
    f->sa[0] = 4, f->sa[1] = 8, f->sb[0] = 1, f->sb[1] = 8, f->sc[0] = 4, f->sc[1] = 8;
    f->ta = (DLTensor){f->a, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, f->sa, NULL, 0};
    f->tb = (DLTensor){f->b, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, f->sb, NULL, 0};
    f->tc = (DLTensor){f->c, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, f->sc, NULL, 0};
    f->args[0] = &f->ta, f->args[1] = &f->tb, f->args[2] = &f->tc;
}

static int32_t
call3(struct fixture *f)
{
    f->err[0] = 'x';
    return kiln_abi_call(&desc3, f->args, 3, f->err, sizeof f->err);
}

/* Expect status st and message msg from a call that must not reach the kernel. */
#define EXPECT_REFUSED(f, st, msg)          \
    do {                                    \
        int calls_ = kernel_calls;          \
        CHECK_EQ_INT(st, call3(f));         \
        CHECK_EQ_STR(msg, (f)->err);        \
        CHECK_EQ_INT(calls_, kernel_calls); \
    } while (0)

static void
test_abi_ok(void)
{
    struct fixture f;
    fixture_init(&f);
    CHECK_EQ_INT(KILN_ABI_OK, call3(&f));
    CHECK_EQ_STR("", f.err);
    for (int i = 0; i < 32; i++)
        CHECK(f.c[i] == (float)i + (float)(100 * (i % 8)));
    /* byte_offset: the data pointer plus offset is what the kernel sees */
    fixture_init(&f);
    f.ta.data = f.a + 1;
    f.ta.byte_offset = 3 * sizeof(float);
    f.tb.byte_offset = 16 * sizeof(float); /* b + 16: 64-byte aligned */
    f.tc.data = (char *)f.c - 8;
    f.tc.byte_offset = 8 + 4 * sizeof(float);
    CHECK_EQ_INT(KILN_ABI_OK, call3(&f));
    for (int i = 0; i < 32; i++)
        CHECK(f.c[4 + i] == f.a[4 + i] + f.b[16 + i % 8]);
    CHECK(f.c[3] == -1 && f.c[36] == -1);
    /* explicit compact strides; an extent-1 dimension may have any stride */
    fixture_init(&f);
    int64_t st_a[2] = {8, 1}, st_b[2] = {12345, 1}, st_b0[2] = {0, 1};
    f.ta.strides = st_a;
    f.tb.strides = st_b;
    CHECK_EQ_INT(KILN_ABI_OK, call3(&f));
    f.tb.strides = st_b0;
    CHECK_EQ_INT(KILN_ABI_OK, call3(&f));
    /* no error buffer at all, or a one-byte one */
    fixture_init(&f);
    CHECK_EQ_INT(KILN_ABI_OK, kiln_abi_call(&desc3, f.args, 3, NULL, 0));
    f.ta.dtype.bits = 64;
    CHECK_EQ_INT(KILN_ABI_ERR_DTYPE, kiln_abi_call(&desc3, f.args, 3, NULL, 0));
    char one[1] = {'x'};
    CHECK_EQ_INT(KILN_ABI_ERR_DTYPE, kiln_abi_call(&desc3, f.args, 3, one, 1));
    CHECK(one[0] == 0);
    char small[12];
    CHECK_EQ_INT(KILN_ABI_ERR_DTYPE, kiln_abi_call(&desc3, f.args, 3, small, sizeof small));
    CHECK_EQ_STR("argument 0 ", small);
}

static void
test_abi_count_and_null(void)
{
    struct fixture f;
    fixture_init(&f);
    int calls = kernel_calls;
    CHECK_EQ_INT(KILN_ABI_ERR_NARGS, kiln_abi_call(&desc3, f.args, 2, f.err, sizeof f.err));
    CHECK_EQ_STR("expected 3 arguments (a, b, C), got 2", f.err);
    CHECK_EQ_INT(KILN_ABI_ERR_NARGS, kiln_abi_call(&desc3, f.args, -1, f.err, sizeof f.err));
    CHECK_EQ_STR("expected 3 arguments (a, b, C), got -1", f.err);
    CHECK_EQ_INT(KILN_ABI_ERR_NULL, kiln_abi_call(&desc3, NULL, 3, f.err, sizeof f.err));
    CHECK_EQ_STR("the argument array is NULL; expected 3 arguments (a, b, C)", f.err);
    CHECK_EQ_INT(KILN_ABI_ERR_NULL, kiln_abi_call(NULL, f.args, 3, f.err, sizeof f.err));
    CHECK_EQ_STR("no module descriptor", f.err);
    CHECK_EQ_INT(calls, kernel_calls);

    f.args[1] = NULL;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_NULL, "argument 1 (b) is NULL");
    fixture_init(&f);
    f.ta.data = NULL;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_NULL, "argument 0 (a) has NULL data");
    fixture_init(&f);
    f.tc.shape = NULL;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_NULL, "argument 2 (C) has NULL shape");
}

static void
test_abi_device_dtype(void)
{
    struct fixture f;
    fixture_init(&f);
    f.tb.device = (DLDevice){kDLCUDA, 0};
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DEVICE,
                   "argument 1 (b) is on device cuda:0; this code runs on cpu");
    f.tb.device = (DLDevice){kDLROCM, 3};
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DEVICE,
                   "argument 1 (b) is on device rocm:3; this code runs on cpu");
    f.tb.device = (DLDevice){(DLDeviceType)99, 1};
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DEVICE,
                   "argument 1 (b) is on device type 99:1; this code runs on cpu");
    /* the device id of a CPU tensor does not matter */
    fixture_init(&f);
    f.ta.device.device_id = 7;
    CHECK_EQ_INT(KILN_ABI_OK, call3(&f));

    fixture_init(&f);
    f.ta.dtype.bits = 64;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DTYPE, "argument 0 (a) has dtype f64, expected f32");
    f.ta.dtype = (DLDataType){kDLInt, 32, 1};
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DTYPE, "argument 0 (a) has dtype i32, expected f32");
    f.ta.dtype = (DLDataType){kDLUInt, 8, 1};
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DTYPE, "argument 0 (a) has dtype u8, expected f32");
    f.ta.dtype = (DLDataType){kDLBfloat, 16, 1};
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DTYPE, "argument 0 (a) has dtype bf16, expected f32");
    f.ta.dtype = (DLDataType){6, 8, 1};
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DTYPE, "argument 0 (a) has dtype bool, expected f32");
    f.ta.dtype = (DLDataType){kDLFloat, 32, 4};
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DTYPE, "argument 0 (a) has dtype f32x4, expected f32");
    f.ta.dtype = (DLDataType){42, 32, 1};
    EXPECT_REFUSED(&f, KILN_ABI_ERR_DTYPE,
                   "argument 0 (a) has dtype code 42 bits 32, expected f32");
}

static void
test_abi_shape_stride_align(void)
{
    struct fixture f;
    fixture_init(&f);
    int64_t s3[3] = {4, 8, 1};
    f.tc.ndim = 3;
    f.tc.shape = s3;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_SHAPE, "argument 2 (C) has shape [4, 8, 1], expected [4, 8]");
    f.tc.ndim = -1;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_SHAPE, "argument 2 (C) has rank -1, expected 2 (shape [4, 8])");
    f.tc.ndim = 0;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_SHAPE, "argument 2 (C) has rank 0, expected 2 (shape [4, 8])");
    fixture_init(&f);
    f.sa[1] = 9;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_SHAPE, "argument 0 (a) has shape [4, 9], expected [4, 8]");
    fixture_init(&f);
    f.sb[0] = 8, f.sb[1] = 1;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_SHAPE, "argument 1 (b) has shape [8, 1], expected [1, 8]");

    fixture_init(&f);
    int64_t transposed[2] = {1, 4};
    f.ta.strides = transposed;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_STRIDE,
                   "argument 0 (a) has strides [1, 4], expected NULL or the compact row-major "
                   "strides [8, 1]");
    int64_t padded[2] = {16, 1};
    f.ta.strides = padded;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_STRIDE,
                   "argument 0 (a) has strides [16, 1], expected NULL or the compact row-major "
                   "strides [8, 1]");
    fixture_init(&f);
    int64_t bstride[2] = {8, 2};
    f.tb.strides = bstride;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_STRIDE,
                   "argument 1 (b) has strides [8, 2], expected NULL or the compact row-major "
                   "strides [8, 1]");

    /* b must be 16-byte aligned after byte_offset */
    fixture_init(&f);
    f.tb.data = f.b + 1;
    char want[128];
    snprintf(want, sizeof want,
             "argument 1 (b) has data + byte_offset = %#lx, not aligned to 16 bytes",
             (unsigned long)(uintptr_t)(f.b + 1));
    EXPECT_REFUSED(&f, KILN_ABI_ERR_ALIGN, want);
    f.tb.byte_offset = 12; /* b + 1 + 3 floats = b + 4: aligned again */
    CHECK_EQ_INT(KILN_ABI_OK, call3(&f));
    fixture_init(&f);
    f.tb.byte_offset = 4;
    snprintf(want, sizeof want,
             "argument 1 (b) has data + byte_offset = %#lx, not aligned to 16 bytes",
             (unsigned long)(uintptr_t)(f.b + 1));
    EXPECT_REFUSED(&f, KILN_ABI_ERR_ALIGN, want);
    /* a (align 4) at an odd address */
    fixture_init(&f);
    f.ta.data = (char *)f.a + 2;
    snprintf(want, sizeof want,
             "argument 0 (a) has data + byte_offset = %#lx, not aligned to 4 bytes",
             (unsigned long)(uintptr_t)((char *)f.a + 2));
    EXPECT_REFUSED(&f, KILN_ABI_ERR_ALIGN, want);
}

static void
test_abi_alias(void)
{
    struct fixture f;
    fixture_init(&f);
    f.tc.data = f.a;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_ALIAS,
                   "argument 2 (C) is an output and overlaps argument 0 (a)");
    /* a partial overlap, reached through byte_offset */
    fixture_init(&f);
    f.tc.data = f.a;
    f.tc.byte_offset = 31 * sizeof(float);
    EXPECT_REFUSED(&f, KILN_ABI_ERR_ALIAS,
                   "argument 2 (C) is an output and overlaps argument 0 (a)");
    /* adjacent is fine: C starts right after a's 32 floats */
    f.tc.byte_offset = 32 * sizeof(float);
    float big[80];
    memcpy(big, f.a, sizeof f.a);
    f.ta.data = big;
    f.tc.data = big;
    CHECK_EQ_INT(KILN_ABI_OK, call3(&f));
    for (int i = 0; i < 32; i++)
        CHECK(big[32 + i] == big[i] + f.b[i % 8]);
    /* inputs may overlap each other: b reads a's first row */
    fixture_init(&f);
    f.tb.data = f.a;
    f.ta.data = f.a;
    CHECK_EQ_INT(KILN_ABI_OK, call3(&f));
    /* an input placed inside the output */
    fixture_init(&f);
    f.tb.data = f.c + 16;
    EXPECT_REFUSED(&f, KILN_ABI_ERR_ALIAS,
                   "argument 2 (C) is an output and overlaps argument 1 (b)");
}

static int32_t
failing_kernel(void *const *data)
{
    (void)data;
    return KILN_ABI_ERR_NOMEM;
}

static void
test_abi_kernel_status(void)
{
    struct fixture f;
    fixture_init(&f);
    struct kiln_abi_desc d = desc3;
    d.kernel = failing_kernel;
    CHECK_EQ_INT(KILN_ABI_ERR_NOMEM, kiln_abi_call(&d, f.args, 3, f.err, sizeof f.err));
    CHECK_EQ_STR("the kernel failed: a temporary buffer could not be allocated (status 8)", f.err);
    d.kernel = NULL;
    CHECK_EQ_INT(KILN_ABI_ERR_RUNTIME, kiln_abi_call(&d, f.args, 3, f.err, sizeof f.err));
    CHECK_EQ_STR("no kernel: the descriptor has no kernel (status 9)", f.err);
    d = desc3;
    d.abi_version = KILN_ABI_VERSION + 1;
    CHECK_EQ_INT(KILN_ABI_ERR_RUNTIME, kiln_abi_call(&d, f.args, 3, f.err, sizeof f.err));
    CHECK_EQ_STR("module built for kiln ABI version 3; this runtime implements version 2", f.err);
}

/* ---- more arguments than the on-stack pointer table holds: 69 scalar inputs, 1 output ---- */

enum { NMANY = 70 };
static struct kiln_abi_arg many_args[NMANY];

static int32_t
sum_kernel(void *const *data)
{
    double s = 0;
    for (int i = 0; i < NMANY - 1; i++)
        s += *(const double *)data[i];
    *(double *)data[NMANY - 1] = s;
    return 0;
}

static void
test_abi_many_args(void)
{
    static char names[NMANY][8];
    for (int i = 0; i < NMANY; i++) {
        snprintf(names[i], sizeof names[i], "x%d", i);
        many_args[i] = (struct kiln_abi_arg){
            names[i], kDLFloat, 64, 1, 0, NULL, 8, (uint8_t)(i == NMANY - 1 ? 2 : 0)};
    }
    struct kiln_abi_desc d = {KILN_ABI_VERSION, NMANY, many_args, sum_kernel, "{}", "",
                              kDLCPU,           NULL,  0,         NULL,       NULL};
    double               v[NMANY];
    DLTensor             t[NMANY];
    DLTensor            *a[NMANY];
    for (int i = 0; i < NMANY; i++) {
        v[i] = i;
        t[i] = (DLTensor){&v[i], {kDLCPU, 0}, 0, {kDLFloat, 64, 1}, NULL, NULL, 0};
        a[i] = &t[i];
    }
    char err[256];
    CHECK_EQ_INT(KILN_ABI_OK, kiln_abi_call(&d, a, NMANY, err, sizeof err));
    CHECK(v[NMANY - 1] == (NMANY - 1) * (NMANY - 2) / 2.0);
    /* the names list in a count error is truncated, not overflowed */
    CHECK_EQ_INT(KILN_ABI_ERR_NARGS, kiln_abi_call(&d, a, 3, err, sizeof err));
    CHECK(strncmp(err, "expected 70 arguments (x0, x1, x2, ", 35) == 0);
    CHECK(strstr(err, "...), got 3") != NULL);
    /* a scalar output sharing an input's address */
    t[NMANY - 1].data = &v[5];
    CHECK_EQ_INT(KILN_ABI_ERR_ALIAS, kiln_abi_call(&d, a, NMANY, err, sizeof err));
    CHECK_EQ_STR("argument 69 (x69) is an output and overlaps argument 5 (x5)", err);
}

/* ---- parallel-for ---- */

struct cover {
    atomic_int *hits;
    atomic_int  chunks;
    int64_t     n;
};

static int32_t
cover_body(int64_t begin, int64_t end, void *closure)
{
    struct cover *c = closure;
    if (begin < 0 || end > c->n || begin >= end)
        return 99;
    atomic_fetch_add(&c->chunks, 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&c->hits[i], 1);
    return 0;
}

static void
test_parallel_cover(void)
{
    static const int64_t sizes[] = {1, 2, 3, 5, 7, 8, 16, 63, 64, 65, 1000, 1001, 4099};
    static const int32_t threads[] = {0, 1, 2, 3, 4, 7, 16, 33};
    for (size_t t = 0; t < KILN_COUNTOF(threads); t++) {
        kiln_rt_set_num_threads(threads[t]);
        if (threads[t] > 0)
            CHECK_EQ_INT(threads[t], kiln_rt_num_threads());
        else
            CHECK(kiln_rt_num_threads() >= 1);
        int32_t max_chunks = kiln_rt_num_threads();
        for (size_t s = 0; s < KILN_COUNTOF(sizes); s++) {
            int64_t      n = sizes[s];
            atomic_int  *hits = calloc((size_t)n, sizeof *hits);
            struct cover c = {hits, 0, n};
            CHECK_EQ_INT(0, kiln_rt_parallel_for(n, cover_body, &c));
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += atomic_load(&hits[i]) != 1;
            if (bad)
                harness_fail(__FILE__, __LINE__, "n=%lld threads=%d: %lld iterations not run once",
                             (long long)n, (int)threads[t], (long long)bad);
            int chunks = atomic_load(&c.chunks);
            CHECK(chunks >= 1 && chunks <= max_chunks && chunks <= n);
            free(hits);
        }
    }
    kiln_rt_set_num_threads(-5); /* negative means default */
    CHECK(kiln_rt_num_threads() >= 1);
    kiln_rt_set_num_threads(0);
    /* nothing to do */
    struct cover c = {NULL, 0, 0};
    CHECK_EQ_INT(0, kiln_rt_parallel_for(0, cover_body, &c));
    CHECK_EQ_INT(0, kiln_rt_parallel_for(-3, cover_body, &c));
    CHECK_EQ_INT(0, atomic_load(&c.chunks));
    CHECK_EQ_INT(KILN_ABI_ERR_RUNTIME, kiln_rt_parallel_for(10, NULL, NULL));
}

struct fail_at {
    int64_t    bad; /* iteration that fails, or -1: every chunk fails */
    atomic_int calls;
};

static int32_t
fail_body(int64_t begin, int64_t end, void *closure)
{
    struct fail_at *f = closure;
    atomic_fetch_add(&f->calls, 1);
    if (f->bad < 0)
        return (int32_t)(100 + begin % 7);
    return begin <= f->bad && f->bad < end ? 42 : 0;
}

static void
test_parallel_errors(void)
{
    static const int32_t threads[] = {1, 2, 4, 8};
    for (size_t t = 0; t < KILN_COUNTOF(threads); t++) {
        kiln_rt_set_num_threads(threads[t]);
        for (int64_t bad = 0; bad < 100; bad += 13) {
            struct fail_at f = {bad, 0};
            CHECK_EQ_INT(42, kiln_rt_parallel_for(100, fail_body, &f));
        }
        struct fail_at f = {-1, 0};
        int32_t        st = kiln_rt_parallel_for(100, fail_body, &f);
        CHECK(st >= 100 && st < 107);
    }
    kiln_rt_set_num_threads(0);
}

struct nest {
    atomic_int inner_calls;
    atomic_int bad;
};

static int32_t
inner_body(int64_t begin, int64_t end, void *closure)
{
    struct nest *n = closure;
    atomic_fetch_add(&n->inner_calls, 1);
    if (begin != 0 || end != 50)
        atomic_fetch_add(&n->bad, 1);
    return 0;
}

static int32_t
outer_body(int64_t begin, int64_t end, void *closure)
{
    for (int64_t i = begin; i < end; i++) {
        int32_t st = kiln_rt_parallel_for(50, inner_body, closure);
        if (st)
            return st;
    }
    return 0;
}

static void
test_parallel_nested(void)
{
    kiln_rt_set_num_threads(4);
    struct nest n = {0, 0};
    CHECK_EQ_INT(0, kiln_rt_parallel_for(8, outer_body, &n));
    /* each of the 8 outer iterations ran its inner loop as one serial chunk [0, 50) */
    CHECK_EQ_INT(8, atomic_load(&n.inner_calls));
    CHECK_EQ_INT(0, atomic_load(&n.bad));
    kiln_rt_set_num_threads(0);
}

/* ---- memory and time ---- */

static void
test_alloc(void)
{
    static const int64_t sizes[] = {1, 3, 63, 64, 65, 1000, 4096, 1 << 20};
    for (size_t i = 0; i < KILN_COUNTOF(sizes); i++) {
        unsigned char *p = kiln_rt_alloc(sizes[i]);
        CHECK(p != NULL);
        CHECK_EQ_INT(0, (uintptr_t)p % 64);
        if (p) {
            memset(p, 0xab, (size_t)sizes[i]);
            CHECK(p[sizes[i] - 1] == 0xab);
        }
        kiln_rt_free(p);
    }
    CHECK(kiln_rt_alloc(0) == NULL);
    CHECK(kiln_rt_alloc(-1) == NULL);
    CHECK(kiln_rt_alloc(INT64_MIN) == NULL);
    CHECK(kiln_rt_alloc(INT64_MAX) == NULL);
    CHECK(kiln_rt_alloc(INT64_MAX - 62) == NULL);
    kiln_rt_free(NULL);
}

static void
test_now(void)
{
    double t0 = kiln_rt_now();
    CHECK(t0 > 0);
    double prev = t0;
    for (int i = 0; i < 1000; i++) {
        double t = kiln_rt_now();
        CHECK(t >= prev);
        prev = t;
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    CHECK(kiln_rt_now() - t0 >= 0.0019);
}

/* ---- the exported entry points and the module loader, over tests/abi/fake_module.c ---- */

struct sodir {
    char build[1024], tmp[64], log[128];
};

static int
sodir_init(struct sodir *s)
{
    if (!so_build_dir(s->build, sizeof s->build)) {
        harness_fail(__FILE__, __LINE__, "cannot find the build directory");
        return 0;
    }
    snprintf(s->tmp, sizeof s->tmp, "/tmp/kiln-rt-XXXXXX");
    if (!mkdtemp(s->tmp)) {
        harness_fail(__FILE__, __LINE__, "mkdtemp failed");
        return 0;
    }
    snprintf(s->log, sizeof s->log, "%s/build.log", s->tmp);
    return 1;
}

static void
sodir_fini(struct sodir *s)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", s->tmp);
}

/* Builds tests/abi/fake_module.c (with extra defines) into tmp/name; -z nodelete as for
 * generated modules (codegen/llvm_emit.c): a dlclose must not unload libgomp under its idle
 * worker threads (the consumer crashed at exit on a loaded machine without it). */
static int
build_fake(const struct sodir *s, const char *name, const char *defines)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             SO_BUILD_CC " -std=c11 -O1 -fPIC -shared -fopenmp" SO_BUILD_SAN
                         " %s -Iinclude tests/abi/fake_module.c -Wl,--whole-archive "
                         "'%s/libkiln_rt.a' -Wl,--no-whole-archive -Wl,-z,nodelete -o '%s/%s'",
             defines, s->build, s->tmp, name);
    if (so_build_run(cmd, s->log) != 0) {
        harness_fail(__FILE__, __LINE__, "building %s failed: %s", name, cmd);
        so_build_dump(s->log);
        return 0;
    }
    return 1;
}

static void
check_load_error(kiln_ctx *ctx, const char *path, enum kiln_status st, const char *msg)
{
    struct kiln_module *m = (struct kiln_module *)&m; /* must be reset to NULL */
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(st, kiln_module_load(ctx, path, &m));
    CHECK(m == NULL);
    const struct kiln_error *e = kiln_ctx_error(ctx);
    CHECK(e != NULL);
    if (e && !strstr(e->msg, msg))
        harness_fail(__FILE__, __LINE__, "loading %s: want a message containing\n  %s\ngot\n  %s",
                     path, msg, e->msg);
}

static void
test_module(void)
{
    struct sodir s;
    if (!sodir_init(&s))
        return;
    char path[256], v2[256], text[256], cmd[8192];
    snprintf(path, sizeof path, "%s/fake.so", s.tmp);
    snprintf(v2, sizeof v2, "%s/fake_v1.so", s.tmp);
    snprintf(text, sizeof text, "%s/notes.so", s.tmp);
    if (!build_fake(&s, "fake.so", "") || !build_fake(&s, "fake_v1.so", "-DFAKE_ABI_VERSION=1")) {
        sodir_fini(&s);
        return;
    }
    kiln_ctx           *ctx = kiln_ctx_new(NULL);
    struct kiln_module *m = NULL;
    CHECK_EQ_INT(KILN_OK, kiln_module_load(ctx, path, &m));
    if (m) {
        CHECK(strstr(kiln_module_metadata(m), "\"name\": \"fake_mm\"") != NULL);
        CHECK(strstr(kiln_module_source(m), "input a: f32[5, 7]") != NULL);
        CHECK_EQ_INT(3, kiln_module_nargs(m));
        CHECK_EQ_INT(kDLCPU, kiln_module_device(m));
        struct kiln_module_arg a;
        CHECK_EQ_INT(KILN_OK, kiln_module_arg(m, 2, &a));
        CHECK_EQ_STR("C", a.name);
        CHECK_EQ_INT(KILN_DTYPE_F32, a.dtype);
        CHECK_EQ_INT(2, a.ndim);
        CHECK_EQ_INT(5, a.shape[0]);
        CHECK_EQ_INT(3, a.shape[1]);
        CHECK_EQ_INT(KILN_ARG_OUTPUT, a.role);
        CHECK_EQ_INT(16, a.align);
        CHECK_EQ_INT(60, a.bytes);
        CHECK_EQ_INT(KILN_OK, kiln_module_arg(m, 1, &a));
        CHECK_EQ_INT(KILN_ARG_WEIGHT, a.role);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_arg(m, 3, &a));

        _Alignas(64) float x[35], w[21], y[15], want[15];
        for (int i = 0; i < 35; i++)
            x[i] = (float)(i % 5) - 2;
        for (int i = 0; i < 21; i++)
            w[i] = (float)(i % 3) * 0.5f;
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 3; j++) {
                float acc = 0;
                for (int k = 0; k < 7; k++)
                    acc += x[i * 7 + k] * w[k * 3 + j];
                want[i * 3 + j] = acc;
            }
        int64_t   sx[2] = {5, 7}, sw[2] = {7, 3}, sy[2] = {5, 3};
        DLTensor  tx = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sx, NULL, 0};
        DLTensor  tw = {w, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sw, NULL, 0};
        DLTensor  ty = {y, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sy, NULL, 0};
        DLTensor *args[3] = {&tx, &tw, &ty};
        for (int threads = 0; threads < 4; threads++) {
            kiln_module_set_num_threads(m, threads);
            memset(y, 0, sizeof y);
            int32_t abi = -1;
            CHECK_EQ_INT(KILN_OK, kiln_module_call(ctx, m, args, 3, &abi));
            CHECK_EQ_INT(KILN_ABI_OK, abi);
            CHECK(memcmp(y, want, sizeof y) == 0);
        }
        /* a refused call: the ABI's message becomes the context's error */
        tw.dtype.bits = 64;
        int32_t abi = 0;
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_call(ctx, m, args, 3, &abi));
        CHECK_EQ_INT(KILN_ABI_ERR_DTYPE, abi);
        CHECK(kiln_ctx_error(ctx)
              && !strcmp(kiln_ctx_error(ctx)->msg, "argument 1 (b) has dtype f64, expected f32"));
        tw.dtype.bits = 32;
        kiln_ctx_error_clear(ctx);
        ty.data = (char *)y + 4; /* C needs 16 bytes */
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_call(ctx, m, args, 3, &abi));
        CHECK_EQ_INT(KILN_ABI_ERR_ALIGN, abi);
        ty.data = y;
        kiln_ctx_error_clear(ctx);
        x[0] = -1234.0f; /* the fake kernel reports an allocation failure */
        CHECK_EQ_INT(KILN_ERR_NOMEM, kiln_module_call(ctx, m, args, 3, &abi));
        CHECK_EQ_INT(KILN_ABI_ERR_NOMEM, abi);
        CHECK(kiln_ctx_error(ctx)
              && strstr(kiln_ctx_error(ctx)->msg, "a temporary buffer could not be allocated"));
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_call(ctx, NULL, args, 3, NULL));
    }
    /* the module outlives the context that loaded it */
    kiln_ctx_free(ctx);
    CHECK_EQ_INT(3, kiln_module_nargs(m));
    kiln_module_free(m);
    kiln_module_free(NULL);

    ctx = kiln_ctx_new(NULL);
    check_load_error(ctx, "/nonexistent/mm.so", KILN_ERR_INVALID,
                     "cannot open /nonexistent/mm.so: No such file or directory");
    check_load_error(ctx, s.tmp, KILN_ERR_INVALID, "not a regular file");
    check_load_error(ctx, v2, KILN_ERR_UNSUPPORTED,
                     "was built for kiln ABI version 1; this libkiln supports version 2");
    FILE *f = fopen(text, "w");
    if (f) {
        fputs("not an ELF file\n", f);
        fclose(f);
    }
    check_load_error(ctx, text, KILN_ERR_INVALID, "not an ELF shared object");
    /* a truncated module is refused before dlopen maps it (which gave SIGBUS) */
    FILE *whole = fopen(path, "rb");
    if (whole && fseek(whole, 0, SEEK_END) == 0) {
        long size = ftell(whole);
        char cut[256], want[320];
        snprintf(cut, sizeof cut, "%s/cut.so", s.tmp);
        long sizes[] = {0, 63, 64, 1000, size / 2, size - 1};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            FILE *o = fopen(cut, "wb");
            rewind(whole);
            for (long k = 0; o && k < sizes[i]; k++)
                fputc(fgetc(whole), o);
            if (o)
                fclose(o);
            snprintf(want, sizeof want,
                     "%s: not a complete kiln module (truncated: the file has %ld bytes", cut,
                     sizes[i]);
            check_load_error(ctx, cut, KILN_ERR_INVALID, want);
        }
    } else {
        harness_fail(__FILE__, __LINE__, "cannot read %s", path);
    }
    if (whole)
        fclose(whole);
    /* a real shared object that is not a kiln module: a tiny one built here */
    snprintf(cmd, sizeof cmd,
             "printf 'int f(void);\\nint f(void) { return 1; }\\n' > '%s/plain.c' && " SO_BUILD_CC
             " -shared -fPIC" SO_BUILD_SAN " '%s/plain.c' -o '%s/plain.so'",
             s.tmp, s.tmp, s.tmp);
    if (so_build_run(cmd, s.log) == 0) {
        char plain[256];
        snprintf(plain, sizeof plain, "%s/plain.so", s.tmp);
        check_load_error(ctx, plain, KILN_ERR_INVALID,
                         "plain.so is not a kiln module: it does not export kiln_abi_version");
    } else {
        harness_fail(__FILE__, __LINE__, "building plain.so failed");
        so_build_dump(s.log);
    }
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_load(ctx, NULL, &m));
    CHECK_EQ_INT(0, kiln_module_device(NULL));
    /* a bare file name is relative to the working directory, not searched for */
    check_load_error(ctx, "fake.so", KILN_ERR_INVALID, "cannot open fake.so");
    kiln_ctx_free(ctx);

    /* the libkiln-free consumer program on the fake module */
    snprintf(cmd, sizeof cmd,
             SO_BUILD_CC
             " -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -O1" SO_BUILD_SAN
             " -Iinclude examples/dlopen/consumer.c -o '%s/consumer' -ldl -lpthread -lm",
             s.tmp);
    if (so_build_run(cmd, s.log) != 0) {
        harness_fail(__FILE__, __LINE__, "building the consumer failed");
        so_build_dump(s.log);
    } else {
        snprintf(cmd, sizeof cmd, SO_BUILD_RUN_ENV "'%s/consumer' '%s' 5 7 3", s.tmp, path);
        if (so_build_run(cmd, s.log) != 0) {
            harness_fail(__FILE__, __LINE__, "the consumer failed on fake.so");
            so_build_dump(s.log);
        }
    }
    sodir_fini(&s);
}

SO_BUILD_LSAN_SUPPRESSIONS

static const struct test tests[] = {
    {"abi_ok", test_abi_ok},
    {"abi_count_and_null", test_abi_count_and_null},
    {"abi_device_dtype", test_abi_device_dtype},
    {"abi_shape_stride_align", test_abi_shape_stride_align},
    {"abi_alias", test_abi_alias},
    {"abi_kernel_status", test_abi_kernel_status},
    {"abi_many_args", test_abi_many_args},
    {"parallel_cover", test_parallel_cover},
    {"parallel_errors", test_parallel_errors},
    {"parallel_nested", test_parallel_nested},
    {"alloc", test_alloc},
    {"now", test_now},
    {"module", test_module},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
