/* tests/interp/test_interp.c -- the reference interpreter and the op statistics, on graphs
 * built directly through the internal API (no parser, no op library). Values are checked
 * against hand-computed numbers or plain C loops written here; a property test evaluates
 * random elementwise and reduction definitions both with the interpreter and with a direct
 * recursive evaluator written in this file. */
#include "../harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define F32  KILN_DTYPE_F32
#define I8   KILN_DTYPE_I8
#define I32  KILN_DTYPE_I32
#define I64  KILN_DTYPE_I64
#define BOOL KILN_DTYPE_BOOL

/* ---- graph-building helpers ---- */

static uint32_t
tensor(struct kiln_graph *g, const char *name, enum kiln_dtype dt, uint32_t ndim,
       const int64_t *shape, enum kiln_tensor_kind kind)
{
    uint32_t t = kiln_graph_add_tensor(g, name, dt, ndim, shape, kind);
    CHECK(t != KILN_NONE);
    return t;
}

static kiln_expr
ax(kiln_ctx *ctx, uint32_t k)
{
    return kiln_axis(ctx, k);
}

static kiln_expr
rv(kiln_ctx *ctx, uint32_t k)
{
    return kiln_rvar(ctx, k);
}

static kiln_expr
ld1(kiln_ctx *ctx, struct kiln_graph *g, uint32_t t, kiln_expr i)
{
    return kiln_load(ctx, t, (enum kiln_dtype)g->tensor[t].dtype, 1, &i);
}

static kiln_expr
ld2(kiln_ctx *ctx, struct kiln_graph *g, uint32_t t, kiln_expr i, kiln_expr j)
{
    kiln_expr idx[2] = {i, j};
    return kiln_load(ctx, t, (enum kiln_dtype)g->tensor[t].dtype, 2, idx);
}

/* Adds a one-op "compute" statement defining a new tensor; returns its index. */
static uint32_t
define(struct kiln_graph *g, const char *name, enum kiln_dtype dt, uint32_t ndim,
       const int64_t *shape, enum kiln_reduce red, uint32_t nred, const int64_t *rext,
       kiln_expr body, bool output)
{
    CHECK_EQ_INT(KILN_OK, kiln_graph_begin_call(g, "compute", 0, NULL, 0, NULL, 0, 0));
    uint32_t t = tensor(g, name, dt, ndim, shape, KILN_TENSOR_OP);
    CHECK_EQ_INT(KILN_OK, kiln_graph_add_op(g, t, red, nred, rext, body, NULL, NULL));
    CHECK_EQ_INT(KILN_OK, kiln_graph_end_call(g, t));
    if (output)
        CHECK_EQ_INT(KILN_OK, kiln_graph_mark_output(g, t));
    return t;
}

static void
report(kiln_ctx *ctx, const char *what)
{
    char msg[700];
    kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
    harness_fail(__FILE__, __LINE__, "%s: %s", what, msg);
}

/* Evaluates g; outs receive the outputs. Returns the status. */
static enum kiln_status
eval(kiln_ctx *ctx, struct kiln_graph *g, const double *const *args, double *const *outs)
{
    return kiln_graph_eval(ctx, g, args, outs);
}

static bool
same(double a, double b)
{
    return a == b || (isnan(a) && isnan(b));
}

static double
frand(struct kiln_rng *r)
{
    return 2 * kiln_rng_uniform(r) - 1;
}

/* ---- value tests ---- */

static void
test_matmul(void)
{
    enum { M = 5, K = 7, N = 3 };
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           a = tensor(g, "A", F32, 2, (int64_t[]){M, K}, KILN_TENSOR_INPUT);
    uint32_t           b = tensor(g, "B", F32, 2, (int64_t[]){K, N}, KILN_TENSOR_WEIGHT);
    kiln_expr          body = kiln_mul(ctx, ld2(ctx, g, a, ax(ctx, 0), rv(ctx, 0)),
                                       ld2(ctx, g, b, rv(ctx, 0), ax(ctx, 1)));
    define(g, "C", F32, 2, (int64_t[]){M, N}, KILN_REDUCE_SUM, 1, (int64_t[]){K}, body, true);

    struct kiln_rng r = kiln_rng_new(opt_seed());
    double          A[M * K], B[K * N], C[M * N], want[M * N];
    for (int i = 0; i < M * K; i++)
        A[i] = frand(&r);
    for (int i = 0; i < K * N; i++)
        B[i] = frand(&r);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += A[i * K + k] * B[k * N + j];
            want[i * N + j] = s;
        }
    const double *args[] = {A, B};
    double       *outs[] = {C};
    if (eval(ctx, g, args, outs) != KILN_OK)
        report(ctx, "matmul");
    for (int i = 0; i < M * N; i++)
        CHECK(same(want[i], C[i]));
    kiln_ctx_free(ctx);
}

static void
test_max_min_reductions(void)
{
    enum { R = 4, K = 6 };
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", F32, 2, (int64_t[]){R, K}, KILN_TENSOR_INPUT);
    uint32_t           xi = tensor(g, "xi", I32, 2, (int64_t[]){R, K}, KILN_TENSOR_INPUT);
    kiln_expr          e = ld2(ctx, g, x, ax(ctx, 0), rv(ctx, 0));
    kiln_expr          ei = ld2(ctx, g, xi, ax(ctx, 0), rv(ctx, 0));
    define(g, "mx", F32, 1, (int64_t[]){R}, KILN_REDUCE_MAX, 1, (int64_t[]){K}, e, true);
    define(g, "mn", F32, 1, (int64_t[]){R}, KILN_REDUCE_MIN, 1, (int64_t[]){K}, e, true);
    define(g, "mxi", I32, 1, (int64_t[]){R}, KILN_REDUCE_MAX, 1, (int64_t[]){K}, ei, true);
    define(g, "mni", I32, 1, (int64_t[]){R}, KILN_REDUCE_MIN, 1, (int64_t[]){K}, ei, true);

    struct kiln_rng r = kiln_rng_new(opt_seed() + 1);
    double          X[R * K], XI[R * K], mx[R], mn[R], mxi[R], mni[R];
    for (int i = 0; i < R * K; i++) {
        X[i] = 100 * frand(&r) - 200; /* all negative: max must not be 0 */
        XI[i] = (double)((int)kiln_rng_below(&r, 2000) - 1000);
    }
    const double *args[] = {X, XI};
    double       *outs[] = {mx, mn, mxi, mni};
    if (eval(ctx, g, args, outs) != KILN_OK)
        report(ctx, "max/min");
    for (int i = 0; i < R; i++) {
        double a = -INFINITY, b = INFINITY, c = -1e9, d = 1e9;
        for (int k = 0; k < K; k++) {
            a = fmax(a, X[i * K + k]);
            b = fmin(b, X[i * K + k]);
            c = fmax(c, XI[i * K + k]);
            d = fmin(d, XI[i * K + k]);
        }
        CHECK(same(a, mx[i]));
        CHECK(same(b, mn[i]));
        CHECK(same(c, mxi[i]));
        CHECK(same(d, mni[i]));
    }
    kiln_ctx_free(ctx);
}

static void
test_floordiv_floormod(void)
{
    enum { N = 8 };
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", I64, 1, (int64_t[]){N}, KILN_TENSOR_INPUT);
    uint32_t           d = tensor(g, "d", I64, 1, (int64_t[]){N}, KILN_TENSOR_INPUT);
    kiln_expr          ex = ld1(ctx, g, x, ax(ctx, 0)), ed = ld1(ctx, g, d, ax(ctx, 0));
    define(g, "q", I64, 1, (int64_t[]){N}, KILN_REDUCE_NONE, 0, NULL, kiln_floordiv(ctx, ex, ed),
           true);
    define(g, "m", I64, 1, (int64_t[]){N}, KILN_REDUCE_NONE, 0, NULL, kiln_floormod(ctx, ex, ed),
           true);
    double        X[N] = {-7, 7, -7, 7, 0, -1, -9223372036854775807.0 - 1, 6};
    double        D[N] = {2, -2, -2, 2, 5, 3, -1, 3};
    double        wq[N] = {-4, -4, 3, 3, 0, -1, -9223372036854775807.0 - 1, 2};
    double        wm[N] = {1, -1, -1, 1, 0, 2, 0, 0};
    double        q[N], m[N];
    const double *args[] = {X, D};
    double       *outs[] = {q, m};
    if (eval(ctx, g, args, outs) != KILN_OK)
        report(ctx, "floordiv");
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(wq[i], q[i]);
        CHECK_EQ_INT(wm[i], m[i]);
    }
    kiln_ctx_free(ctx);
}

static void
test_casts_and_wrapping(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           xi = tensor(g, "xi", I32, 1, (int64_t[]){4}, KILN_TENSOR_INPUT);
    uint32_t           xf = tensor(g, "xf", F32, 1, (int64_t[]){6}, KILN_TENSOR_INPUT);
    uint32_t           x8 = tensor(g, "x8", I8, 1, (int64_t[]){3}, KILN_TENSOR_INPUT);
    kiln_expr          ei = ld1(ctx, g, xi, ax(ctx, 0));
    kiln_expr          ef = ld1(ctx, g, xf, ax(ctx, 0));
    /* i32 x*x wraps; i64 of the same does not */
    define(g, "sq32", I32, 1, (int64_t[]){4}, KILN_REDUCE_NONE, 0, NULL, kiln_mul(ctx, ei, ei),
           true);
    kiln_expr e64 = kiln_cast(ctx, I64, ei);
    define(g, "sq64", I64, 1, (int64_t[]){4}, KILN_REDUCE_NONE, 0, NULL, kiln_mul(ctx, e64, e64),
           true);
    /* i32 -> i8 wraps */
    define(g, "to8", I8, 1, (int64_t[]){4}, KILN_REDUCE_NONE, 0, NULL, kiln_cast(ctx, I8, ei),
           true);
    /* f32 -> i32 truncates toward zero and saturates; NaN -> 0; f32 -> bool is != 0 */
    define(g, "fi", I32, 1, (int64_t[]){6}, KILN_REDUCE_NONE, 0, NULL, kiln_cast(ctx, I32, ef),
           true);
    define(g, "fb", BOOL, 1, (int64_t[]){6}, KILN_REDUCE_NONE, 0, NULL, kiln_cast(ctx, BOOL, ef),
           true);
    /* i8 sum reduction wraps on store: 100 + 100 + 100 = 300 -> 44 */
    define(g, "s8", I8, 0, NULL, KILN_REDUCE_SUM, 1, (int64_t[]){3}, ld1(ctx, g, x8, rv(ctx, 0)),
           true);
    /* i32 -> f32 exact, bool -> f32 */
    define(g, "back", F32, 1, (int64_t[]){4}, KILN_REDUCE_NONE, 0, NULL,
           kiln_add(ctx, kiln_cast(ctx, F32, ei),
                    kiln_cast(ctx, F32, kiln_lt(ctx, ei, kiln_int(ctx, 0, I32)))),
           true);
    CHECK(kiln_ok(ctx));

    double        XI[4] = {70000, -3, 200, -129}, XF[6] = {2.7, -2.7, 1e10, -1e10, NAN, 0};
    double        X8[3] = {100, 100, 100};
    double        sq32[4], sq64[4], to8[4], fi[6], fb[6], s8[1], back[4];
    const double *args[] = {XI, XF, X8};
    double       *outs[] = {sq32, sq64, to8, fi, fb, s8, back};
    if (eval(ctx, g, args, outs) != KILN_OK)
        report(ctx, "casts");
    CHECK_EQ_INT(605032704, sq32[0]); /* 4.9e9 - 2^32 */
    CHECK_EQ_INT(4900000000LL, sq64[0]);
    CHECK_EQ_INT(9, sq32[1]);
    CHECK_EQ_INT(112, to8[0]); /* 70000 = 0x11170 -> 0x70 */
    CHECK_EQ_INT(-3, to8[1]);
    CHECK_EQ_INT(-56, to8[2]);
    CHECK_EQ_INT(127, to8[3]);
    CHECK_EQ_INT(2, fi[0]);
    CHECK_EQ_INT(-2, fi[1]);
    CHECK_EQ_INT(2147483647, fi[2]);
    CHECK_EQ_INT(-2147483647LL - 1, fi[3]);
    CHECK_EQ_INT(0, fi[4]);
    CHECK_EQ_INT(0, fi[5]);
    CHECK_EQ_INT(1, fb[0]);
    CHECK_EQ_INT(1, fb[4]); /* NaN != 0 */
    CHECK_EQ_INT(0, fb[5]);
    CHECK_EQ_INT(44, s8[0]);
    CHECK(back[0] == 70000 && back[1] == -2 && back[3] == -128);
    kiln_ctx_free(ctx);
}

static void
test_lazy_select_guards_load(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", F32, 1, (int64_t[]){4}, KILN_TENSOR_INPUT);
    /* y[i] = select(i < 4, x[i], -1) over i in [0, 6): padding */
    kiln_expr i = ax(ctx, 0);
    kiln_expr body = kiln_select(ctx, kiln_lt(ctx, i, kiln_idx(ctx, 4)), ld1(ctx, g, x, i),
                                 kiln_float(ctx, -1, F32));
    define(g, "y", F32, 1, (int64_t[]){6}, KILN_REDUCE_NONE, 0, NULL, body, true);
    /* z[i] = select(i >= 1, x[i - 1], 0) + select(i < 4, x[i], 0): shifted sum, both guarded */
    kiln_expr im1 = kiln_sub(ctx, i, kiln_idx(ctx, 1));
    kiln_expr z = kiln_add(ctx,
                           kiln_select(ctx, kiln_le(ctx, kiln_idx(ctx, 1), i), ld1(ctx, g, x, im1),
                                       kiln_float(ctx, 0, F32)),
                           kiln_select(ctx, kiln_lt(ctx, i, kiln_idx(ctx, 4)), ld1(ctx, g, x, i),
                                       kiln_float(ctx, 0, F32)));
    define(g, "z", F32, 1, (int64_t[]){5}, KILN_REDUCE_NONE, 0, NULL, z, true);
    double        X[4] = {1, 2, 3, 4}, y[6], zz[5];
    const double *args[] = {X};
    double       *outs[] = {y, zz};
    if (eval(ctx, g, args, outs) != KILN_OK)
        report(ctx, "select");
    double wy[6] = {1, 2, 3, 4, -1, -1}, wz[5] = {1, 3, 5, 7, 4};
    for (int k = 0; k < 6; k++)
        CHECK(y[k] == wy[k]);
    for (int k = 0; k < 5; k++)
        CHECK(zz[k] == wz[k]);
    kiln_ctx_free(ctx);
}

/* A value an f32 tensor stores beyond the f32 range is inf, as in compiled code: exp(100) * 1e30
 * (2.7e73 in double) is inf, and so is its negation. Finite values keep the double: exp(100)
 * alone (2.7e43) would overflow f32 but stays inside the body, so exp(100) * 1e-30 is finite,
 * and 0.1 is not rounded to f32. */
static void
test_f32_store_overflow(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", F32, 1, (int64_t[]){3}, KILN_TENSOR_INPUT);
    kiln_expr          e = kiln_unary(ctx, KILN_OP_EXP, ld1(ctx, g, x, ax(ctx, 0)));
    define(g, "big", F32, 1, (int64_t[]){3}, KILN_REDUCE_NONE, 0, NULL,
           kiln_mul(ctx, e, kiln_float(ctx, 1e30, F32)), true);
    define(g, "neg", F32, 1, (int64_t[]){3}, KILN_REDUCE_NONE, 0, NULL,
           kiln_mul(ctx, e, kiln_float(ctx, -1e30, F32)), true);
    define(g, "small", F32, 1, (int64_t[]){3}, KILN_REDUCE_NONE, 0, NULL,
           kiln_mul(ctx, e, kiln_float(ctx, 1e-30, F32)), true);
    double        X[3] = {100, 0, -1}, big[3], neg[3], small[3];
    const double *args[] = {X};
    double       *outs[] = {big, neg, small};
    if (eval(ctx, g, args, outs) != KILN_OK)
        report(ctx, "f32 overflow");
    CHECK(isinf(big[0]) && big[0] > 0);
    CHECK(isinf(neg[0]) && neg[0] < 0);
    CHECK(big[1] == 1e30 && neg[1] == -1e30);
    CHECK(big[2] == exp(-1.0) * 1e30);
    CHECK(small[0] == exp(100.0) * 1e-30);
    kiln_ctx_free(ctx);
}

static void
test_nan_propagation(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", F32, 2, (int64_t[]){2, 3}, KILN_TENSOR_INPUT);
    kiln_expr          e = ld2(ctx, g, x, ax(ctx, 0), rv(ctx, 0));
    define(g, "mx", F32, 1, (int64_t[]){2}, KILN_REDUCE_MAX, 1, (int64_t[]){3}, e, true);
    define(g, "mn", F32, 1, (int64_t[]){2}, KILN_REDUCE_MIN, 1, (int64_t[]){3}, e, true);
    kiln_expr r = kiln_max(ctx, ld2(ctx, g, x, ax(ctx, 0), ax(ctx, 1)), kiln_float(ctx, 0, F32));
    define(g, "relu", F32, 2, (int64_t[]){2, 3}, KILN_REDUCE_NONE, 0, NULL, r, true);
    double        X[6] = {1, NAN, 3, -1, -2, -3}, mx[2], mn[2], relu[6];
    const double *args[] = {X};
    double       *outs[] = {mx, mn, relu};
    if (eval(ctx, g, args, outs) != KILN_OK)
        report(ctx, "nan");
    CHECK(isnan(mx[0]) && isnan(mn[0]));
    CHECK(mx[1] == -1 && mn[1] == -3);
    CHECK(relu[0] == 1 && isnan(relu[1]) && relu[3] == 0);
    kiln_ctx_free(ctx);
}

static void
test_out_of_bounds_error(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", F32, 2, (int64_t[]){1, 56}, KILN_TENSOR_INPUT);
    kiln_expr          j1 = kiln_add(ctx, ax(ctx, 1), kiln_idx(ctx, 1));
    define(g, "y", F32, 2, (int64_t[]){1, 56}, KILN_REDUCE_NONE, 0, NULL,
           ld2(ctx, g, x, ax(ctx, 0), j1), true);
    double        X[56] = {0}, y[56];
    const double *args[] = {X};
    double       *outs[] = {y};
    CHECK_EQ_INT(KILN_ERR_INVALID, eval(ctx, g, args, outs));
    CHECK(kiln_ctx_error(ctx) != NULL);
    if (kiln_ctx_error(ctx)) {
        CHECK_EQ_STR("y: index [0, 56] of x is out of bounds for shape [1, 56]",
                     kiln_ctx_error(ctx)->msg);
        CHECK_EQ_STR("interp", kiln_ctx_error(ctx)->pass);
    }
    /* negative index, in a reduction */
    kiln_ctx_error_clear(ctx);
    struct kiln_graph *g2 = kiln_graph_new(ctx);
    uint32_t           v = tensor(g2, "v", F32, 1, (int64_t[]){3}, KILN_TENSOR_INPUT);
    define(g2, "s", F32, 1, (int64_t[]){2}, KILN_REDUCE_SUM, 1, (int64_t[]){3},
           ld1(ctx, g2, v, kiln_sub(ctx, ax(ctx, 0), rv(ctx, 0))), true);
    double V[3] = {1, 2, 3}, s[2];
    args[0] = V;
    outs[0] = s;
    CHECK_EQ_INT(KILN_ERR_INVALID, eval(ctx, g2, args, outs));
    if (kiln_ctx_error(ctx))
        CHECK_EQ_STR("s: index [-1] of v is out of bounds for shape [3]", kiln_ctx_error(ctx)->msg);
    kiln_ctx_free(ctx);
}

static void
test_division_by_zero_error(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", I32, 2, (int64_t[]){2, 3}, KILN_TENSOR_INPUT);
    kiln_expr          e = ld2(ctx, g, x, ax(ctx, 0), ax(ctx, 1));
    define(g, "q", I32, 2, (int64_t[]){2, 3}, KILN_REDUCE_NONE, 0, NULL,
           kiln_floormod(ctx, kiln_int(ctx, 7, I32), e), true);
    double        X[6] = {1, 2, 3, 4, 0, 6}, q[6];
    const double *args[] = {X};
    double       *outs[] = {q};
    CHECK_EQ_INT(KILN_ERR_INVALID, eval(ctx, g, args, outs));
    if (kiln_ctx_error(ctx))
        CHECK_EQ_STR("q: floormod by zero at [1, 1]", kiln_ctx_error(ctx)->msg);
    kiln_ctx_free(ctx);
}

static void
test_chain_scalars_and_sharing(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", F32, 1, (int64_t[]){3}, KILN_TENSOR_INPUT);
    uint32_t           s = tensor(g, "s", F32, 0, NULL, KILN_TENSOR_WEIGHT);
    /* a deep DAG: e_{k+1} = e_k * 0.5 + e_k * 0.5 (each level uses e_k twice), so a tree walk
     * without sharing takes 2^depth steps: 60 levels finish only if every walk (the
     * interpreter's compiler, kiln_graph_add_op's checks) shares. */
    kiln_expr e = ld1(ctx, g, x, ax(ctx, 0));
    kiln_expr half = kiln_float(ctx, 0.5, F32);
    for (int k = 0; k < 60; k++)
        e = kiln_add(ctx, kiln_mul(ctx, e, half), kiln_mul(ctx, half, e));
    uint32_t t = define(g, "t", F32, 1, (int64_t[]){3}, KILN_REDUCE_NONE, 0, NULL, e, false);
    /* u = sum_i t[i] * s, a scalar; w[i] = select(t[i] < 0, exp(t[i]), 0) + exp(t[i]) shares
     * exp(t[i]) between a lazy branch and the unconditional part */
    kiln_expr sc = kiln_load(ctx, s, F32, 0, NULL);
    define(g, "u", F32, 0, NULL, KILN_REDUCE_SUM, 1, (int64_t[]){3},
           kiln_mul(ctx, ld1(ctx, g, t, rv(ctx, 0)), sc), true);
    kiln_expr ti = ld1(ctx, g, t, ax(ctx, 0));
    kiln_expr ex = kiln_unary(ctx, KILN_OP_EXP, ti);
    kiln_expr w = kiln_add(
        ctx,
        kiln_select(ctx, kiln_lt(ctx, ti, kiln_float(ctx, 0, F32)), ex, kiln_float(ctx, 0, F32)),
        ex);
    define(g, "w", F32, 1, (int64_t[]){3}, KILN_REDUCE_NONE, 0, NULL, w, true);
    CHECK(kiln_ok(ctx));
    double        X[3] = {1, -2, 0.25}, S[1] = {3}, u[1], ww[3];
    const double *args[] = {X, S};
    double       *outs[] = {u, ww};
    if (eval(ctx, g, args, outs) != KILN_OK)
        report(ctx, "chain");
    CHECK(u[0] == (1 - 2 + 0.25) * 3);
    CHECK(ww[0] == exp(1.0));
    CHECK(ww[1] == 2 * exp(-2.0));
    CHECK(ww[2] == exp(0.25));
    kiln_ctx_free(ctx);
}

/* ---- allocation failures: every failing allocation gives KILN_ERR_NOMEM, never a crash, a
 * leak or a wrong result reported as success ---- */

struct failing {
    long left; /* allocations before the first failure; < 0 = never fail */
};

static void *
failing_alloc(void *ud, void *p, size_t old_size, size_t new_size)
{
    struct failing *f = ud;
    (void)old_size;
    if (new_size == 0) {
        free(p);
        return NULL;
    }
    if (f->left == 0)
        return NULL;
    if (f->left > 0)
        f->left--;
    return realloc(p, new_size);
}

static void
test_alloc_failures(void)
{
    bool reached_ok = false;
    for (long n = 0; n < 2000 && !reached_ok; n++) {
        struct failing         f = {-1};
        struct kiln_ctx_params params = {failing_alloc, &f};
        kiln_ctx              *ctx = kiln_ctx_new(&params);
        if (!ctx)
            continue;
        /* t[i] = (x[i] + 1) * (x[i] + 1) (a shared node), then u = sum_i t[i] (a temporary) */
        struct kiln_graph *g = kiln_graph_new(ctx);
        uint32_t           x = tensor(g, "x", F32, 1, (int64_t[]){5}, KILN_TENSOR_INPUT);
        kiln_expr          p = kiln_add(ctx, ld1(ctx, g, x, ax(ctx, 0)), kiln_float(ctx, 1, F32));
        uint32_t           t = define(g, "t", F32, 1, (int64_t[]){5}, KILN_REDUCE_NONE, 0, NULL,
                                      kiln_mul(ctx, p, p), false);
        define(g, "u", F32, 0, NULL, KILN_REDUCE_SUM, 1, (int64_t[]){5}, ld1(ctx, g, t, rv(ctx, 0)),
               true);
        if (!kiln_ok(ctx)) {
            report(ctx, "building the graph");
            kiln_ctx_free(ctx);
            return;
        }
        double            X[5] = {0, 1, 2, 3, 4}, u = 0;
        const double     *args[] = {X};
        double           *outs[] = {&u};
        struct kiln_stats st1, st2;
        f.left = n;
        enum kiln_status st = eval(ctx, g, args, outs);
        kiln_op_stats(g, 1, &st1);
        kiln_call_stats(g, 0, &st2);
        if (st == KILN_OK && kiln_ok(ctx)) {
            reached_ok = true;
            CHECK(u == 1 + 4 + 9 + 16 + 25);
            CHECK(st1.flops == 5 && st2.flops == 10);
        } else if (st != KILN_OK && st != KILN_ERR_NOMEM) {
            report(ctx, "evaluating with a failing allocator");
        } else if (st == KILN_OK && kiln_ctx_error(ctx)->status != KILN_ERR_NOMEM) {
            report(ctx, "statistics with a failing allocator");
        }
        kiln_ctx_free(ctx);
    }
    CHECK(reached_ok);
}

/* ---- random property test: interpreter vs a direct recursive evaluator ---- */

enum { RN = 3 }; /* every tensor is RN x RN; reductions have extent RN per variable */

struct gen {
    kiln_ctx          *ctx;
    struct kiln_graph *g;
    struct kiln_rng    r;
    uint32_t           xf, xi; /* f32 and i32 inputs */
    uint32_t           nred;
};

static kiln_expr gen_float(struct gen *s, int depth);
static kiln_expr gen_int(struct gen *s, int depth);

static uint64_t
pick(struct gen *s, uint64_t n)
{
    return kiln_rng_below(&s->r, n);
}

static kiln_expr
gen_var(struct gen *s)
{
    if (s->nred && pick(s, 2))
        return rv(s->ctx, (uint32_t)pick(s, s->nred));
    return ax(s->ctx, (uint32_t)pick(s, 2));
}

/* An index into an extent-RN dimension: in range by construction, or guarded by the caller. */
static kiln_expr
gen_index(struct gen *s, int depth)
{
    if (depth <= 0 || pick(s, 3))
        return gen_var(s);
    kiln_expr e = kiln_cast(s->ctx, I64, gen_int(s, depth - 1));
    return kiln_floormod(s->ctx, e, kiln_idx(s->ctx, RN));
}

static kiln_expr
gen_bool(struct gen *s, int depth)
{
    kiln_ctx *ctx = s->ctx;
    switch (pick(s, 5)) {
    case 0:
        return kiln_lt(ctx, gen_float(s, depth - 1), gen_float(s, depth - 1));
    case 1:
        return kiln_le(ctx, gen_int(s, depth - 1), gen_int(s, depth - 1));
    case 2:
        return kiln_binary(ctx, KILN_OP_EQ, gen_int(s, depth - 1), gen_int(s, depth - 1));
    case 3:
        return kiln_binary(ctx, pick(s, 2) ? KILN_OP_AND : KILN_OP_OR, gen_bool(s, depth - 1),
                           gen_bool(s, depth - 1));
    default:
        return kiln_unary(ctx, KILN_OP_NOT, kiln_lt(ctx, gen_var(s), kiln_idx(ctx, 1)));
    }
}

static kiln_expr
gen_int(struct gen *s, int depth)
{
    kiln_ctx *ctx = s->ctx;
    if (depth <= 0) {
        switch (pick(s, 3)) {
        case 0:
            return kiln_int(ctx, (int64_t)pick(s, 11) - 5, I32);
        case 1:
            return kiln_cast(ctx, I32, gen_var(s));
        default:
            return ld2(ctx, s->g, s->xi, gen_var(s), gen_var(s));
        }
    }
    static const enum kiln_op bin[] = {KILN_OP_ADD, KILN_OP_SUB, KILN_OP_MUL, KILN_OP_MIN,
                                       KILN_OP_MAX};
    switch (pick(s, 7)) {
    case 0:
    case 1:
        return kiln_binary(ctx, bin[pick(s, 5)], gen_int(s, depth - 1), gen_int(s, depth - 1));
    case 2: { /* nonzero constant divisor */
        int64_t   d = (int64_t)pick(s, 4) + 1;
        kiln_expr den = kiln_int(ctx, pick(s, 2) ? d : -d, I32);
        return kiln_binary(ctx, pick(s, 2) ? KILN_OP_FLOORDIV : KILN_OP_FLOORMOD,
                           gen_int(s, depth - 1), den);
    }
    case 3:
        return kiln_cast(ctx, I32, kiln_mul(ctx, gen_float(s, depth - 1), kiln_float(ctx, 4, F32)));
    case 4:
        return kiln_select(ctx, gen_bool(s, depth - 1), gen_int(s, depth - 1),
                           gen_int(s, depth - 1));
    case 5:
        return kiln_unary(ctx, pick(s, 2) ? KILN_OP_NEG : KILN_OP_ABS, gen_int(s, depth - 1));
    default:
        return ld2(ctx, s->g, s->xi, gen_index(s, depth - 1), gen_index(s, depth - 1));
    }
}

static kiln_expr
gen_float(struct gen *s, int depth)
{
    kiln_ctx *ctx = s->ctx;
    if (depth <= 0) {
        switch (pick(s, 3)) {
        case 0:
            return kiln_float(ctx, (double)((int)pick(s, 9) - 4) / 4, F32);
        case 1:
            return kiln_cast(ctx, F32, gen_var(s));
        default:
            return ld2(ctx, s->g, s->xf, gen_var(s), gen_var(s));
        }
    }
    static const enum kiln_op bin[] = {KILN_OP_ADD, KILN_OP_SUB, KILN_OP_MUL, KILN_OP_DIV,
                                       KILN_OP_MIN, KILN_OP_MAX, KILN_OP_POW, KILN_OP_FMOD};
    static const enum kiln_op un[] = {
        KILN_OP_NEG,   KILN_OP_ABS,   KILN_OP_FLOOR, KILN_OP_EXP,     KILN_OP_LOG,  KILN_OP_SQRT,
        KILN_OP_RSQRT, KILN_OP_TANH,  KILN_OP_ERF,   KILN_OP_SIGMOID, KILN_OP_SIN,  KILN_OP_COS,
        KILN_OP_TAN,   KILN_OP_ASIN,  KILN_OP_ACOS,  KILN_OP_ATAN,    KILN_OP_SINH, KILN_OP_COSH,
        KILN_OP_ASINH, KILN_OP_ACOSH, KILN_OP_ATANH,
    };
    switch (pick(s, 8)) {
    case 0:
    case 1: {
        kiln_expr a = gen_float(s, depth - 1);
        kiln_expr b = pick(s, 4) ? gen_float(s, depth - 1) : a; /* sharing */
        return kiln_binary(ctx, bin[pick(s, KILN_COUNTOF(bin))], a, b);
    }
    case 2:
        return kiln_unary(ctx, un[pick(s, KILN_COUNTOF(un))], gen_float(s, depth - 1));
    case 3:
        return kiln_select(ctx, gen_bool(s, depth - 1), gen_float(s, depth - 1),
                           gen_float(s, depth - 1));
    case 4: { /* a guarded load with an index that can be out of range */
        kiln_expr i = kiln_cast(ctx, I64, gen_int(s, depth - 1));
        kiln_expr ok =
            kiln_and(ctx, kiln_le(ctx, kiln_idx(ctx, 0), i), kiln_lt(ctx, i, kiln_idx(ctx, RN)));
        return kiln_select(ctx, ok, ld2(ctx, s->g, s->xf, i, gen_var(s)), kiln_float(ctx, 0, F32));
    }
    case 5:
        return kiln_cast(ctx, F32, gen_int(s, depth - 1));
    default:
        return ld2(ctx, s->g, s->xf, gen_index(s, depth - 1), gen_index(s, depth - 1));
    }
}

/* The direct evaluator: a recursive walk over the nodes with the documented semantics. */
struct ref {
    const kiln_ctx *ctx;
    const double   *xf, *xi;
    uint32_t        tf, ti;
    const int64_t  *ax, *rv;
    bool            bad; /* out-of-range load reached (must not happen) */
};

static bool
isf(uint8_t dt)
{
    return dt == F32;
}

static int64_t
wrapi(int64_t v, uint8_t dt)
{
    if (dt == I32)
        return (int32_t)(uint32_t)(uint64_t)v;
    if (dt == I8)
        return (int8_t)(uint8_t)(uint64_t)v;
    if (dt == BOOL)
        return v != 0;
    return v;
}

static int64_t
fdiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static int64_t
fmod_(int64_t a, int64_t b)
{
    int64_t m = a % b;
    return (m != 0 && (m < 0) != (b < 0)) ? m + b : m;
}

static double ref_eval(struct ref *rf, uint32_t id);

static double
ref_load(struct ref *rf, const struct kiln_node *n)
{
    const kiln_ctx *ctx = rf->ctx;
    int64_t         idx[2];
    int             k = 0;
    for (uint32_t l = n->kid[0]; l && k < 2; l = ctx->node[l].kid[1])
        idx[k++] = (int64_t)ref_eval(rf, ctx->node[l].kid[0]);
    if (idx[0] < 0 || idx[0] >= RN || idx[1] < 0 || idx[1] >= RN) {
        rf->bad = true;
        return 0;
    }
    return ((uint32_t)n->imm == rf->tf ? rf->xf : rf->xi)[idx[0] * RN + idx[1]];
}

/* Values travel as doubles: integers here stay far below 2^53 except after wrapping, which
 * happens in int64 before converting. */
static double
ref_eval(struct ref *rf, uint32_t id)
{
    const kiln_ctx        *ctx = rf->ctx;
    const struct kiln_node n = ctx->node[id];
    uint8_t                odt = n.kid[0] ? ctx->node[n.kid[0]].dtype : n.dtype;
    double                 a = 0, b = 0;
    if (n.op == KILN_OP_INT)
        return (double)n.imm;
    if (n.op == KILN_OP_FLOAT)
        return kiln_expr_float_value(ctx, (kiln_expr){id});
    if (n.op == KILN_OP_VAR)
        return (double)(kiln_var_kind_of(n.imm) == KILN_VAR_AXIS ? rf->ax
                                                                 : rf->rv)[kiln_var_index(n.imm)];
    if (n.op == KILN_OP_LOAD)
        return ref_load(rf, &n);
    if (n.op == KILN_OP_SELECT)
        return ref_eval(rf, n.kid[0]) != 0 ? ref_eval(rf, n.kid[1]) : ref_eval(rf, n.kid[2]);
    if (n.op == KILN_OP_CAST) {
        a = ref_eval(rf, n.kid[0]);
        if (isf(n.dtype))
            return a;
        if (n.dtype == BOOL)
            return a != 0;
        if (isf(odt)) {
            if (isnan(a))
                return 0;
            double lo = n.dtype == I32 ? -2147483648.0 : -9223372036854775808.0;
            double hi = n.dtype == I32 ? 2147483647.0 : 9223372036854775807.0;
            /* an integer has no negative zero: i32(-0.0) is 0, and f32 of it is +0.0 */
            return a <= lo ? lo : a >= hi ? hi : trunc(a) == 0 ? 0 : trunc(a);
        }
        return (double)wrapi((int64_t)a, n.dtype);
    }
    a = ref_eval(rf, n.kid[0]);
    if (kiln_op_arity[n.op] == 2)
        b = ref_eval(rf, n.kid[1]);
    int64_t i = isf(odt) ? 0 : (int64_t)a, j = isf(odt) ? 0 : (int64_t)b;
    switch ((enum kiln_op)n.op) {
    case KILN_OP_ADD:
        return isf(odt) ? a + b : (double)wrapi(i + j, n.dtype);
    case KILN_OP_SUB:
        return isf(odt) ? a - b : (double)wrapi(i - j, n.dtype);
    case KILN_OP_MUL:
        return isf(odt) ? a * b : (double)wrapi(i * j, n.dtype);
    case KILN_OP_DIV:
        return a / b;
    case KILN_OP_FLOORDIV:
        return (double)wrapi(fdiv(i, j), n.dtype);
    case KILN_OP_FLOORMOD:
        return (double)wrapi(fmod_(i, j), n.dtype);
    /* C's fmin/fmax, as kiln defines min/max: the sign of min(+0.0, -0.0) is left open by
     * IEEE 754, and `a < b ? a : b` picked the other zero (rsqrt then gave -inf for +inf) */
    case KILN_OP_MIN:
        return isnan(a) || isnan(b) ? NAN : fmin(a, b);
    case KILN_OP_MAX:
        return isnan(a) || isnan(b) ? NAN : fmax(a, b);
    case KILN_OP_FMOD:
        return fmod(a, b);
    case KILN_OP_POW:
        return pow(a, b);
    case KILN_OP_EQ:
        return a == b;
    case KILN_OP_NE:
        return a != b;
    case KILN_OP_LT:
        return a < b;
    case KILN_OP_LE:
        return a <= b;
    case KILN_OP_AND:
        return a != 0 && b != 0;
    case KILN_OP_OR:
        return a != 0 || b != 0;
    case KILN_OP_NOT:
        return a == 0;
    case KILN_OP_NEG:
        return isf(odt) ? -a : (double)wrapi(-i, n.dtype);
    case KILN_OP_ABS:
        return isf(odt) ? fabs(a) : (double)wrapi(i < 0 ? -i : i, n.dtype);
    case KILN_OP_FLOOR:
        return floor(a);
    case KILN_OP_EXP:
        return exp(a);
    case KILN_OP_LOG:
        return log(a);
    case KILN_OP_SQRT:
        return sqrt(a);
    case KILN_OP_RSQRT:
        return 1 / sqrt(a);
    case KILN_OP_TANH:
        return tanh(a);
    case KILN_OP_ERF:
        return erf(a);
    case KILN_OP_SIGMOID:
        return a >= 0 ? 1 / (1 + exp(-a)) : exp(a) / (1 + exp(a));
    case KILN_OP_SIN:
        return sin(a);
    case KILN_OP_COS:
        return cos(a);
    case KILN_OP_TAN:
        return tan(a);
    case KILN_OP_ASIN:
        return asin(a);
    case KILN_OP_ACOS:
        return acos(a);
    case KILN_OP_ATAN:
        return atan(a);
    case KILN_OP_SINH:
        return sinh(a);
    case KILN_OP_COSH:
        return cosh(a);
    case KILN_OP_ASINH:
        return asinh(a);
    case KILN_OP_ACOSH:
        return acosh(a);
    case KILN_OP_ATANH:
        return atanh(a);
    case KILN_OP_NIL: /* handled above, or not values */
    case KILN_OP_INT:
    case KILN_OP_FLOAT:
    case KILN_OP_VAR:
    case KILN_OP_LIST:
    case KILN_OP_LOAD:
    case KILN_OP_SELECT:
    case KILN_OP_CAST:
    case KILN_OP_COUNT:
        break;
    }
    rf->bad = true;
    return 0;
}

static bool
random_definition(uint64_t seed)
{
    struct gen s = {.ctx = kiln_ctx_new(NULL), .r = kiln_rng_new(seed)};
    kiln_ctx  *ctx = s.ctx;
    s.g = kiln_graph_new(ctx);
    s.xf = tensor(s.g, "xf", F32, 2, (int64_t[]){RN, RN}, KILN_TENSOR_INPUT);
    s.xi = tensor(s.g, "xi", I32, 2, (int64_t[]){RN, RN}, KILN_TENSOR_INPUT);
    enum kiln_reduce red = (enum kiln_reduce)pick(&s, 4);
    s.nred = red == KILN_REDUCE_NONE ? 0 : 1 + (uint32_t)pick(&s, 2);
    bool      isint = pick(&s, 3) == 0;
    int       depth = 1 + (int)pick(&s, 5);
    kiln_expr body = isint ? gen_int(&s, depth) : gen_float(&s, depth);
    int64_t   rext[2] = {RN, RN};
    bool      ok = true;
    if (!body.id || !kiln_ok(ctx)) {
        report(ctx, "building a random body");
        kiln_ctx_free(ctx);
        return false;
    }
    /* The body may not use every reduction variable; that is fine (the sum counts repeats). */
    define(s.g, "y", isint ? I32 : F32, 2, (int64_t[]){RN, RN}, red, s.nred, rext, body, true);

    double XF[RN * RN], XI[RN * RN], Y[RN * RN];
    for (int k = 0; k < RN * RN; k++) {
        XF[k] = (double)((int)pick(&s, 17) - 8) / 4;
        XI[k] = (double)((int)pick(&s, 21) - 10);
    }
    const double *args[] = {XF, XI};
    double       *outs[] = {Y};
    if (eval(ctx, s.g, args, outs) != KILN_OK) {
        report(ctx, "evaluating a random body");
        kiln_ctx_free(ctx);
        return false;
    }
    int64_t    axv[2], rvv[2] = {0, 0};
    struct ref rf = {ctx, XF, XI, s.xf, s.xi, axv, rvv, false};
    for (axv[0] = 0; axv[0] < RN && ok; axv[0]++)
        for (axv[1] = 0; axv[1] < RN && ok; axv[1]++) {
            double acc = red == KILN_REDUCE_MAX ? -INFINITY : red == KILN_REDUCE_MIN ? INFINITY : 0;
            int64_t iacc = red == KILN_REDUCE_MAX   ? INT64_MIN
                           : red == KILN_REDUCE_MIN ? INT64_MAX
                                                    : 0;
            int     npts = red == KILN_REDUCE_NONE ? 1 : (s.nred == 1 ? RN : RN * RN);
            for (int p = 0; p < npts; p++) {
                rvv[0] = s.nred == 2 ? p / RN : p;
                rvv[1] = p % RN;
                double v = ref_eval(&rf, body.id);
                if (red == KILN_REDUCE_NONE) {
                    acc = v;
                } else if (isint) {
                    int64_t iv = (int64_t)v;
                    iacc = red == KILN_REDUCE_SUM   ? iacc + iv
                           : red == KILN_REDUCE_MAX ? (iv > iacc ? iv : iacc)
                                                    : (iv < iacc ? iv : iacc);
                } else {
                    acc = red == KILN_REDUCE_SUM   ? acc + v
                          : red == KILN_REDUCE_MAX ? (isnan(acc) || isnan(v) ? NAN : fmax(acc, v))
                                                   : (isnan(acc) || isnan(v) ? NAN : fmin(acc, v));
                }
            }
            if (isint && red != KILN_REDUCE_NONE)
                acc = (double)wrapi(iacc, I32);
            if (!isint) /* y is f32: beyond its range the stored value is inf */
                acc = kiln_scalar_held(acc, F32);
            double got = Y[axv[0] * RN + axv[1]];
            if (rf.bad || !same(acc, got)) {
                harness_fail(__FILE__, __LINE__,
                             "random definition (seed %llu, reduce %d/%u): y[%lld, %lld] = %.17g, "
                             "want %.17g%s",
                             (unsigned long long)seed, (int)red, s.nred, (long long)axv[0],
                             (long long)axv[1], got, acc,
                             rf.bad ? " (reference went out of range)" : "");
                ok = false;
            }
        }
    kiln_ctx_free(ctx);
    return ok;
}

static void
test_random_definitions(void)
{
    uint64_t n = opt_iters_or(500);
    for (uint64_t k = 0; k < n; k++)
        if (!random_definition(opt_seed() * 1000003u + k))
            break;
}

/* ---- statistics ---- */

static void
test_stats_matmul(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           a = tensor(g, "A", F32, 2, (int64_t[]){4, 8}, KILN_TENSOR_INPUT);
    uint32_t           b = tensor(g, "B", F32, 2, (int64_t[]){8, 3}, KILN_TENSOR_WEIGHT);
    kiln_expr          body = kiln_mul(ctx, ld2(ctx, g, a, ax(ctx, 0), rv(ctx, 0)),
                                       ld2(ctx, g, b, rv(ctx, 0), ax(ctx, 1)));
    define(g, "C", F32, 2, (int64_t[]){4, 3}, KILN_REDUCE_SUM, 1, (int64_t[]){8}, body, true);
    struct kiln_stats st;
    kiln_op_stats(g, 0, &st);
    CHECK(st.flops == 2.0 * 4 * 3 * 8);
    CHECK(st.bytes == (32 + 24 + 12) * 4.0);
    CHECK(st.params == 24);
    struct kiln_call_info ci;
    kiln_graph_call(g, 0, &ci);
    CHECK_EQ_STR("compute", ci.kind);
    CHECK_EQ_STR("C", ci.output);
    CHECK(ci.flops == st.flops && ci.bytes == st.bytes && ci.params == st.params);
    kiln_ctx_free(ctx);
}

static void
test_stats_conv_like(void)
{
    /* y[n, co, h, w] += x[n, ci, h + kh, w + kw] * wt[co, ci, kh, kw]   (valid 3x3 conv)
     * z[n, c, h, w] = max(y[n, c, h, w] + b[c], 0), and a two-op statement with a temporary */
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", F32, 4, (int64_t[]){1, 2, 5, 5}, KILN_TENSOR_INPUT);
    uint32_t           wt = tensor(g, "wt", F32, 4, (int64_t[]){3, 2, 3, 3}, KILN_TENSOR_WEIGHT);
    uint32_t           bias = tensor(g, "b", F32, 1, (int64_t[]){3}, KILN_TENSOR_WEIGHT);
    kiln_expr          xi[4] = {ax(ctx, 0), rv(ctx, 0), kiln_add(ctx, ax(ctx, 2), rv(ctx, 1)),
                                kiln_add(ctx, ax(ctx, 3), rv(ctx, 2))};
    kiln_expr          wi[4] = {ax(ctx, 1), rv(ctx, 0), rv(ctx, 1), rv(ctx, 2)};
    kiln_expr body = kiln_mul(ctx, kiln_load(ctx, x, F32, 4, xi), kiln_load(ctx, wt, F32, 4, wi));
    uint32_t  y = define(g, "y", F32, 4, (int64_t[]){1, 3, 3, 3}, KILN_REDUCE_SUM, 3,
                         (int64_t[]){2, 3, 3}, body, false);
    kiln_expr yi[4] = {ax(ctx, 0), ax(ctx, 1), ax(ctx, 2), ax(ctx, 3)};
    kiln_expr z =
        kiln_max(ctx, kiln_add(ctx, kiln_load(ctx, y, F32, 4, yi), ld1(ctx, g, bias, ax(ctx, 1))),
                 kiln_float(ctx, 0, F32));
    define(g, "z", F32, 4, (int64_t[]){1, 3, 3, 3}, KILN_REDUCE_NONE, 0, NULL, z, true);
    /* statement "sq" with two ops: t = y * y (temporary), q[c] += t[0, c, h, w] */
    CHECK_EQ_INT(KILN_OK, kiln_graph_begin_call(g, "sumsq", 1, &y, 0, NULL, 0, 0));
    uint32_t  t = tensor(g, "sq.t", F32, 4, (int64_t[]){1, 3, 3, 3}, KILN_TENSOR_OP);
    kiln_expr yl = kiln_load(ctx, y, F32, 4, yi);
    CHECK_EQ_INT(KILN_OK, kiln_graph_add_op(g, t, KILN_REDUCE_NONE, 0, NULL, kiln_mul(ctx, yl, yl),
                                            NULL, NULL));
    uint32_t  q = tensor(g, "sq", F32, 1, (int64_t[]){3}, KILN_TENSOR_OP);
    kiln_expr ti[4] = {kiln_idx(ctx, 0), ax(ctx, 0), rv(ctx, 0), rv(ctx, 1)};
    CHECK_EQ_INT(KILN_OK, kiln_graph_add_op(g, q, KILN_REDUCE_SUM, 2, (int64_t[]){3, 3},
                                            kiln_load(ctx, t, F32, 4, ti), NULL, NULL));
    CHECK_EQ_INT(KILN_OK, kiln_graph_end_call(g, q));
    CHECK_EQ_INT(KILN_OK, kiln_graph_mark_output(g, q));
    CHECK(kiln_ok(ctx));

    struct kiln_stats st;
    kiln_op_stats(g, 0, &st); /* 27 outputs x 18 reduction points x (mul + combine) */
    CHECK(st.flops == 27.0 * 18 * 2);
    CHECK(st.bytes == (50 + 54 + 27) * 4.0);
    CHECK(st.params == 54);
    kiln_op_stats(g, 1, &st); /* add and max per point; reads y and b, writes z */
    CHECK(st.flops == 27.0 * 2);
    CHECK(st.bytes == (27 + 3 + 27) * 4.0);
    CHECK(st.params == 3);
    kiln_op_stats(g, 2, &st); /* y*y: one distinct mul node */
    CHECK(st.flops == 27);
    struct kiln_stats cs;
    kiln_call_stats(g, 2, &cs); /* 27 (mul) + 27 (sum combines); reads y, writes sq */
    CHECK(cs.flops == 54);
    CHECK(cs.bytes == (27 + 3) * 4.0);
    CHECK(cs.params == 0);
    CHECK_EQ_INT(3, kiln_graph_ncalls(g));

    /* and the values: a plain C loop */
    double X[50], W[54], B[3], Z[27], SQ[3];
    for (int k = 0; k < 50; k++)
        X[k] = (k % 7) - 3;
    for (int k = 0; k < 54; k++)
        W[k] = (k % 5) - 2;
    for (int k = 0; k < 3; k++)
        B[k] = k - 1;
    const double *args[] = {X, W, B};
    double       *outs[] = {Z, SQ};
    if (eval(ctx, g, args, outs) != KILN_OK)
        report(ctx, "conv");
    for (int co = 0; co < 3; co++) {
        double ss = 0;
        for (int h = 0; h < 3; h++)
            for (int w = 0; w < 3; w++) {
                double s = 0;
                for (int ci = 0; ci < 2; ci++)
                    for (int kh = 0; kh < 3; kh++)
                        for (int kw = 0; kw < 3; kw++)
                            s += X[ci * 25 + (h + kh) * 5 + (w + kw)]
                                 * W[((co * 2 + ci) * 3 + kh) * 3 + kw];
                CHECK(Z[co * 9 + h * 3 + w] == fmax(s + B[co], 0));
                ss += s * s;
            }
        CHECK(SQ[co] == ss);
    }
    kiln_ctx_free(ctx);
}

static void
test_stats_shared_nodes_count_once(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    uint32_t           x = tensor(g, "x", F32, 1, (int64_t[]){10}, KILN_TENSOR_INPUT);
    kiln_expr          p = kiln_add(ctx, ld1(ctx, g, x, ax(ctx, 0)), kiln_float(ctx, 1, F32));
    /* (x+1)*(x+1) + exp(x+1): add, mul, exp, add = 4 distinct FLOP nodes; index math is free */
    kiln_expr e = kiln_add(ctx, kiln_mul(ctx, p, p), kiln_unary(ctx, KILN_OP_EXP, p));
    define(g, "y", F32, 1, (int64_t[]){10}, KILN_REDUCE_NONE, 0, NULL, e, true);
    struct kiln_stats st;
    kiln_op_stats(g, 0, &st);
    CHECK(st.flops == 40);
    CHECK(st.bytes == 80);
    CHECK(st.params == 0);
    kiln_ctx_free(ctx);
}

int
main(int argc, char **argv)
{
    static const struct test tests[] = {
        {"matmul", test_matmul},
        {"max_min_reductions", test_max_min_reductions},
        {"floordiv_floormod", test_floordiv_floormod},
        {"casts_and_wrapping", test_casts_and_wrapping},
        {"lazy_select_guards_load", test_lazy_select_guards_load},
        {"f32_store_overflow", test_f32_store_overflow},
        {"nan_propagation", test_nan_propagation},
        {"out_of_bounds_error", test_out_of_bounds_error},
        {"division_by_zero_error", test_division_by_zero_error},
        {"chain_scalars_and_sharing", test_chain_scalars_and_sharing},
        {"alloc_failures", test_alloc_failures},
        {"random_definitions", test_random_definitions},
        {"stats_matmul", test_stats_matmul},
        {"stats_conv_like", test_stats_conv_like},
        {"stats_shared_nodes_count_once", test_stats_shared_nodes_count_once},
    };
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
