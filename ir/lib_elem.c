/* ir/lib_elem.c -- elementwise library ops: unary math (neg ... floor, sin ... atanh, round,
 * ceil, sign, reciprocal, isnan, isinf), activations (relu, leaky_relu, gelu, silu) and binary
 * arithmetic with NumPy broadcasting (add ... pow, mod).
 *
 * Each op is one compute definition over the output's axes. Unary ops keep the input's shape;
 * binary ops broadcast right-aligned, and an input dimension of extent 1 facing a larger one is
 * read at index 0. Formulas follow PyTorch: gelu is x * 0.5 * (1 + erf(x / sqrt 2)) (or the tanh
 * approximation with approximate="tanh"), silu is x * sigmoid(x), leaky_relu keeps x where
 * x > 0 and scales it by alpha elsewhere. Ops whose meaning is clear on integers (neg, abs,
 * square, relu, add, sub, mul, maximum, minimum) accept any numeric dtype, and div divides
 * integers truncating toward zero (C and ONNX; by 0 it gives 0, never a trap). sign and mod
 * take any numeric dtype; the others need a float dtype. */
#include "lib_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>

static const char *const no_attrs[] = {NULL};

/* A formula over the loaded element x (dtype dt) with the op's parameter p. */
typedef kiln_expr (*unary_fn)(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double p);

/* What a unary op computes per element: the expression operator op, or fn(x, p). */
struct unary {
    enum kiln_op op;
    unary_fn     fn;
    double       p;
    bool         need_float;
    bool         pred; /* the result is bool (isnan, isinf), else x's dtype */
};

static enum kiln_status
map1(struct libcall *c, struct unary u)
{
    const struct kiln_tensor *x = lib_in(c, 0);
    KILN_TRY(u.need_float ? lib_want_float(c, 0) : lib_want_numeric(c, 0));
    KILN_TRY(lib_begin(c));
    enum kiln_dtype dt = (enum kiln_dtype)x->dtype;
    uint32_t        t = lib_tensor(c, NULL, u.pred ? KILN_DTYPE_BOOL : dt, x->ndim, x->shape);
    if (t == KILN_NONE)
        return c->ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS];
    lib_axes(c, x->ndim, ax);
    kiln_expr v = lib_load(c, 0, ax);
    kiln_expr body = u.fn ? u.fn(c, v, dt, u.p) : kiln_unary(c->ctx, u.op, v);
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, NULL);
}

static enum kiln_status
simple(struct libcall *c, enum kiln_op op, bool need_float)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map1(c, (struct unary){.op = op, .need_float = need_float});
}

enum kiln_status
kiln_lib_neg(struct libcall *c)
{
    return simple(c, KILN_OP_NEG, false);
}

enum kiln_status
kiln_lib_abs(struct libcall *c)
{
    return simple(c, KILN_OP_ABS, false);
}

enum kiln_status
kiln_lib_exp(struct libcall *c)
{
    return simple(c, KILN_OP_EXP, true);
}

enum kiln_status
kiln_lib_log(struct libcall *c)
{
    return simple(c, KILN_OP_LOG, true);
}

enum kiln_status
kiln_lib_sqrt(struct libcall *c)
{
    return simple(c, KILN_OP_SQRT, true);
}

enum kiln_status
kiln_lib_rsqrt(struct libcall *c)
{
    return simple(c, KILN_OP_RSQRT, true);
}

enum kiln_status
kiln_lib_tanh(struct libcall *c)
{
    return simple(c, KILN_OP_TANH, true);
}

enum kiln_status
kiln_lib_sigmoid(struct libcall *c)
{
    return simple(c, KILN_OP_SIGMOID, true);
}

enum kiln_status
kiln_lib_erf(struct libcall *c)
{
    return simple(c, KILN_OP_ERF, true);
}

enum kiln_status
kiln_lib_floor(struct libcall *c)
{
    return simple(c, KILN_OP_FLOOR, true);
}

enum kiln_status
kiln_lib_sin(struct libcall *c)
{
    return simple(c, KILN_OP_SIN, true);
}

enum kiln_status
kiln_lib_cos(struct libcall *c)
{
    return simple(c, KILN_OP_COS, true);
}

enum kiln_status
kiln_lib_tan(struct libcall *c)
{
    return simple(c, KILN_OP_TAN, true);
}

enum kiln_status
kiln_lib_asin(struct libcall *c)
{
    return simple(c, KILN_OP_ASIN, true);
}

enum kiln_status
kiln_lib_acos(struct libcall *c)
{
    return simple(c, KILN_OP_ACOS, true);
}

enum kiln_status
kiln_lib_atan(struct libcall *c)
{
    return simple(c, KILN_OP_ATAN, true);
}

enum kiln_status
kiln_lib_sinh(struct libcall *c)
{
    return simple(c, KILN_OP_SINH, true);
}

enum kiln_status
kiln_lib_cosh(struct libcall *c)
{
    return simple(c, KILN_OP_COSH, true);
}

enum kiln_status
kiln_lib_asinh(struct libcall *c)
{
    return simple(c, KILN_OP_ASINH, true);
}

enum kiln_status
kiln_lib_acosh(struct libcall *c)
{
    return simple(c, KILN_OP_ACOSH, true);
}

enum kiln_status
kiln_lib_atanh(struct libcall *c)
{
    return simple(c, KILN_OP_ATANH, true);
}

/* ---- unary ops built from other operators ---- */

/* ceil(x) = -floor(-x) */
static kiln_expr
op_ceil(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double p)
{
    (void)dt;
    (void)p;
    kiln_ctx *ctx = c->ctx;
    return kiln_unary(ctx, KILN_OP_NEG,
                      kiln_unary(ctx, KILN_OP_FLOOR, kiln_unary(ctx, KILN_OP_NEG, x)));
}

enum kiln_status
kiln_lib_ceil(struct libcall *c)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map1(c, (struct unary){.fn = op_ceil, .need_float = true});
}

/* Round half to even: f = floor(x) and d = x - f (exact: 0 <= d < 1); f + 1 where d > 1/2, or
 * where d = 1/2 and f is odd (f != 2 floor(f/2)); else f. Infinities give d = NaN and come
 * back as f + 1 = f; NaN stays NaN. */
static kiln_expr
op_round(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double p)
{
    (void)p;
    kiln_ctx *ctx = c->ctx;
    kiln_expr half = lib_f(c, 0.5, dt), one = lib_f(c, 1, dt);
    kiln_expr f = kiln_unary(ctx, KILN_OP_FLOOR, x), f1 = kiln_add(ctx, f, one);
    kiln_expr d = kiln_sub(ctx, x, f);
    kiln_expr even = kiln_binary(
        ctx, KILN_OP_EQ, f,
        kiln_mul(ctx, kiln_unary(ctx, KILN_OP_FLOOR, kiln_mul(ctx, f, half)), lib_f(c, 2, dt)));
    kiln_expr tie = kiln_select(ctx, even, f, f1);
    return kiln_select(ctx, kiln_lt(ctx, d, half), f,
                       kiln_select(ctx, kiln_lt(ctx, half, d), f1, tie));
}

enum kiln_status
kiln_lib_round(struct libcall *c)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map1(c, (struct unary){.fn = op_round, .need_float = true});
}

/* sign(x): -1 below 0, 1 above, else x itself (0, -0, NaN). */
static kiln_expr
op_sign(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double p)
{
    (void)p;
    kiln_ctx *ctx = c->ctx;
    kiln_expr zero = lib_f(c, 0, dt);
    return kiln_select(ctx, kiln_lt(ctx, x, zero), lib_f(c, -1, dt),
                       kiln_select(ctx, kiln_lt(ctx, zero, x), lib_f(c, 1, dt), x));
}

enum kiln_status
kiln_lib_sign(struct libcall *c)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map1(c, (struct unary){.fn = op_sign, .need_float = false});
}

static kiln_expr
op_reciprocal(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double p)
{
    (void)p;
    return kiln_binary(c->ctx, KILN_OP_DIV, lib_f(c, 1, dt), x);
}

enum kiln_status
kiln_lib_reciprocal(struct libcall *c)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map1(c, (struct unary){.fn = op_reciprocal, .need_float = true});
}

/* isnan(x): x != x. */
static kiln_expr
op_isnan(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double p)
{
    (void)dt;
    (void)p;
    return kiln_binary(c->ctx, KILN_OP_NE, x, x);
}

enum kiln_status
kiln_lib_isnan(struct libcall *c)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map1(c, (struct unary){.fn = op_isnan, .need_float = true, .pred = true});
}

/* isinf(x): x above the largest finite value of its dtype (+inf, when bit 0 of which is set) or
 * below its negation (-inf, bit 1). */
static kiln_expr
op_isinf(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double which)
{
    kiln_ctx *ctx = c->ctx;
    double    big = dt == KILN_DTYPE_F64    ? DBL_MAX
                    : dt == KILN_DTYPE_F16  ? 65504.0
                    : dt == KILN_DTYPE_BF16 ? 0x1.fep127
                                            : (double)FLT_MAX;
    int       w = (int)which;
    kiln_expr pos = (w & 1) ? kiln_lt(ctx, lib_f(c, big, dt), x) : kiln_bool(ctx, false);
    kiln_expr neg = (w & 2) ? kiln_lt(ctx, x, lib_f(c, -big, dt)) : kiln_bool(ctx, false);
    return kiln_binary(ctx, KILN_OP_OR, pos, neg);
}

enum kiln_status
kiln_lib_isinf(struct libcall *c)
{
    static const char *const attrs[] = {"detect_negative", "detect_positive", NULL};
    int64_t                  neg, pos;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "detect_negative", 1, &neg));
    KILN_TRY(lib_get_int(c, "detect_positive", 1, &pos));
    if ((neg != 0 && neg != 1) || (pos != 0 && pos != 1))
        return lib_fail_attr(
            c, lib_attr(c, neg != 0 && neg != 1 ? "detect_negative" : "detect_positive"),
            "attribute %s must be 0 or 1, got %lld",
            neg != 0 && neg != 1 ? "detect_negative" : "detect_positive",
            (long long)(neg != 0 && neg != 1 ? neg : pos));
    return map1(
        c, (struct unary){
               .fn = op_isinf, .p = (double)(pos | neg << 1), .need_float = true, .pred = true});
}

static kiln_expr
op_square(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double p)
{
    (void)dt;
    (void)p;
    return kiln_mul(c->ctx, x, x);
}

enum kiln_status
kiln_lib_square(struct libcall *c)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map1(c, (struct unary){.fn = op_square, .p = 0, .need_float = false});
}

/* ---- activations ---- */

static kiln_expr
op_relu(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double p)
{
    (void)p;
    return kiln_max(c->ctx, x, lib_f(c, 0, dt));
}

enum kiln_status
kiln_lib_relu(struct libcall *c)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map1(c, (struct unary){.fn = op_relu, .p = 0, .need_float = false});
}

static kiln_expr
op_leaky(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double alpha)
{
    kiln_ctx *ctx = c->ctx;
    return kiln_select(ctx, kiln_lt(ctx, lib_f(c, 0, dt), x), x,
                       kiln_mul(ctx, x, lib_f(c, alpha, dt)));
}

enum kiln_status
kiln_lib_leaky_relu(struct libcall *c)
{
    static const char *const attrs[] = {"alpha", NULL};
    double                   alpha;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_float(c, "alpha", 0.01, &alpha));
    return map1(c, (struct unary){.fn = op_leaky, .p = alpha, .need_float = true});
}

static kiln_expr
op_gelu(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double tanh_approx)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr half_x = kiln_mul(ctx, x, lib_f(c, 0.5, dt));
    kiln_expr inner;
    if (tanh_approx != 0) {
        /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
        kiln_expr x3 = kiln_mul(ctx, kiln_mul(ctx, x, x), x);
        kiln_expr u = kiln_add(ctx, x, kiln_mul(ctx, x3, lib_f(c, 0.044715, dt)));
        inner = kiln_unary(ctx, KILN_OP_TANH,
                           kiln_mul(ctx, u, lib_f(c, 0.79788456080286535588 /* sqrt(2/pi) */, dt)));
    } else {
        inner = kiln_unary(ctx, KILN_OP_ERF,
                           kiln_mul(ctx, x, lib_f(c, 0.70710678118654752440 /* 1/sqrt(2) */, dt)));
    }
    return kiln_mul(ctx, half_x, kiln_add(ctx, inner, lib_f(c, 1, dt)));
}

enum kiln_status
kiln_lib_gelu(struct libcall *c)
{
    static const char *const attrs[] = {"approximate", NULL};
    const char              *approx;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_string(c, "approximate", "none", &approx));
    if (strcmp(approx, "none") && strcmp(approx, "tanh"))
        return lib_fail_attr(c, lib_attr(c, "approximate"),
                             "attribute approximate must be \"none\" or \"tanh\", got \"%s\"",
                             approx);
    return map1(c, (struct unary){.fn = op_gelu, .p = !strcmp(approx, "tanh"), .need_float = true});
}

static kiln_expr
op_silu(struct libcall *c, kiln_expr x, enum kiln_dtype dt, double p)
{
    (void)dt;
    (void)p;
    return kiln_mul(c->ctx, x, kiln_unary(c->ctx, KILN_OP_SIGMOID, x));
}

enum kiln_status
kiln_lib_silu(struct libcall *c)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map1(c, (struct unary){.fn = op_silu, .p = 0, .need_float = true});
}

/* ---- binary with broadcasting ---- */

/* The element of an op that is no single operator, from the loaded a and b of dtype dt. */
typedef kiln_expr (*binary_fn)(kiln_ctx *ctx, kiln_expr a, kiln_expr b, enum kiln_dtype dt);

static enum kiln_status map2_body(struct libcall *c, enum kiln_op op, binary_fn fn,
                                  bool need_float);

/* Integer division truncating toward zero (C, ONNX): the floor quotient, plus one where the
 * remainder is nonzero and the signs differ. Division by 0 gives 0, and by -1 the (wrapping)
 * negation: the divisor the operator sees is never 0 or -1, so compiled code cannot trap. */
static kiln_expr
int_div(kiln_ctx *ctx, kiln_expr a, kiln_expr b, enum kiln_dtype dt)
{
    kiln_expr zero = kiln_int(ctx, 0, dt), one = kiln_int(ctx, 1, dt), m1 = kiln_int(ctx, -1, dt);
    kiln_expr is0 = kiln_binary(ctx, KILN_OP_EQ, b, zero),
              ism1 = kiln_binary(ctx, KILN_OP_EQ, b, m1);
    kiln_expr d = kiln_select(ctx, kiln_binary(ctx, KILN_OP_OR, is0, ism1), one, b);
    kiln_expr q = kiln_binary(ctx, KILN_OP_FLOORDIV, a, d),
              r = kiln_binary(ctx, KILN_OP_FLOORMOD, a, d);
    kiln_expr signs = kiln_binary(ctx, KILN_OP_NE, kiln_binary(ctx, KILN_OP_LT, a, zero),
                                  kiln_binary(ctx, KILN_OP_LT, d, zero));
    kiln_expr fix = kiln_binary(ctx, KILN_OP_AND, kiln_binary(ctx, KILN_OP_NE, r, zero), signs);
    kiln_expr t = kiln_binary(ctx, KILN_OP_ADD, q, kiln_select(ctx, fix, one, zero));
    return kiln_select(ctx, is0, zero, kiln_select(ctx, ism1, kiln_unary(ctx, KILN_OP_NEG, a), t));
}

/* The divisor b of dtype dt where it is neither 0 nor -1, else 1 (*is0, *ism1: the tests). */
static kiln_expr
safe_divisor(kiln_ctx *ctx, kiln_expr b, enum kiln_dtype dt, kiln_expr *is0, kiln_expr *ism1)
{
    *is0 = kiln_binary(ctx, KILN_OP_EQ, b, kiln_int(ctx, 0, dt));
    *ism1 = kiln_binary(ctx, KILN_OP_EQ, b, kiln_int(ctx, -1, dt));
    return kiln_select(ctx, kiln_binary(ctx, KILN_OP_OR, *is0, *ism1), kiln_int(ctx, 1, dt), b);
}

/* Integer modulo with the divisor's sign (Python, ONNX Mod fmod=0): floormod by the safe
 * divisor, which is right for -1 (always 0) and gives 0 for a divisor of 0. */
static kiln_expr
int_mod_floor(kiln_ctx *ctx, kiln_expr a, kiln_expr b, enum kiln_dtype dt)
{
    kiln_expr is0, ism1;
    return kiln_binary(ctx, KILN_OP_FLOORMOD, a, safe_divisor(ctx, b, dt, &is0, &ism1));
}

/* Integer remainder with the dividend's sign (C's %, fmod; ONNX Mod fmod=1): the floor
 * modulo r, less the divisor d where r != 0 and the signs of a and d differ. */
static kiln_expr
int_mod_trunc(kiln_ctx *ctx, kiln_expr a, kiln_expr b, enum kiln_dtype dt)
{
    kiln_expr is0, ism1, zero = kiln_int(ctx, 0, dt);
    kiln_expr d = safe_divisor(ctx, b, dt, &is0, &ism1);
    kiln_expr r = kiln_binary(ctx, KILN_OP_FLOORMOD, a, d);
    kiln_expr signs = kiln_binary(ctx, KILN_OP_NE, kiln_binary(ctx, KILN_OP_LT, a, zero),
                                  kiln_binary(ctx, KILN_OP_LT, d, zero));
    kiln_expr fix = kiln_binary(ctx, KILN_OP_AND, kiln_binary(ctx, KILN_OP_NE, r, zero), signs);
    return kiln_select(ctx, fix, kiln_binary(ctx, KILN_OP_SUB, r, d), r);
}

static enum kiln_status
map2_fn(struct libcall *c, enum kiln_op op, binary_fn fn, bool need_float)
{
    KILN_TRY(lib_allow(c, no_attrs));
    return map2_body(c, op, fn, need_float);
}

/* map2_fn once the attributes are checked. */
static enum kiln_status
map2_body(struct libcall *c, enum kiln_op op, binary_fn fn, bool need_float)
{
    KILN_TRY(lib_same_dtype(c));
    KILN_TRY(need_float ? lib_want_float(c, 0) : lib_want_numeric(c, 0));
    const struct kiln_tensor *a = lib_in(c, 0), *b = lib_in(c, 1);
    int64_t                   shape[KILN_MAX_DIMS];
    uint32_t                  n;
    if (!lib_bcast_shape(a->shape, a->ndim, b->shape, b->ndim, shape, &n)) {
        char sa[LIB_SHAPE_BUF], sb[LIB_SHAPE_BUF];
        return lib_fail(c, "shapes %s of %s and %s of %s do not broadcast",
                        lib_shape_str(a->shape, a->ndim, sa, sizeof sa), lib_in_name(c, 0),
                        lib_shape_str(b->shape, b->ndim, sb, sizeof sb), lib_in_name(c, 1));
    }
    KILN_TRY(lib_begin(c));
    uint32_t t = lib_tensor(c, NULL, (enum kiln_dtype)a->dtype, n, shape);
    if (t == KILN_NONE)
        return c->ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS], ia[KILN_MAX_DIMS], ib[KILN_MAX_DIMS];
    lib_axes(c, n, ax);
    lib_bcast_idx(c, a->shape, a->ndim, shape, n, ax, ia);
    lib_bcast_idx(c, b->shape, b->ndim, shape, n, ax, ib);
    kiln_expr la = lib_load(c, 0, ia), lb = lib_load(c, 1, ib);
    kiln_expr body =
        fn ? fn(c->ctx, la, lb, (enum kiln_dtype)a->dtype) : kiln_binary(c->ctx, op, la, lb);
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, NULL);
}

static enum kiln_status
map2(struct libcall *c, enum kiln_op op, bool need_float)
{
    return map2_fn(c, op, NULL, need_float);
}

enum kiln_status
kiln_lib_add(struct libcall *c)
{
    return map2(c, KILN_OP_ADD, false);
}

enum kiln_status
kiln_lib_sub(struct libcall *c)
{
    return map2(c, KILN_OP_SUB, false);
}

enum kiln_status
kiln_lib_mul(struct libcall *c)
{
    return map2(c, KILN_OP_MUL, false);
}

enum kiln_status
kiln_lib_div(struct libcall *c)
{
    if (c->nin == 2 && kiln_dtype_is_int((enum kiln_dtype)lib_in(c, 0)->dtype))
        return map2_fn(c, KILN_OP_DIV, int_div, false);
    return map2(c, KILN_OP_DIV, true);
}

enum kiln_status
kiln_lib_maximum(struct libcall *c)
{
    return map2(c, KILN_OP_MAX, false);
}

enum kiln_status
kiln_lib_minimum(struct libcall *c)
{
    return map2(c, KILN_OP_MIN, false);
}

enum kiln_status
kiln_lib_pow(struct libcall *c)
{
    return map2(c, KILN_OP_POW, true);
}

/* Float modulo with the divisor's sign (Python's %, NumPy's mod): C's fmod r, plus b where r != 0
 * and the signs of r and b differ. */
static kiln_expr
float_mod_floor(kiln_ctx *ctx, kiln_expr a, kiln_expr b, enum kiln_dtype dt)
{
    kiln_expr zero = kiln_const(ctx, 0, dt);
    kiln_expr r = kiln_binary(ctx, KILN_OP_FMOD, a, b);
    kiln_expr signs = kiln_binary(ctx, KILN_OP_NE, kiln_binary(ctx, KILN_OP_LT, r, zero),
                                  kiln_binary(ctx, KILN_OP_LT, b, zero));
    kiln_expr fix = kiln_binary(ctx, KILN_OP_AND, kiln_binary(ctx, KILN_OP_NE, r, zero), signs);
    return kiln_select(ctx, fix, kiln_binary(ctx, KILN_OP_ADD, r, b), r);
}

/* mod: the remainder with the divisor's sign (fmod=0, Python's %) or the dividend's (fmod=1,
 * C's % and fmod). Integers: a divisor of 0 gives 0, never a trap; floats: NaN. */
enum kiln_status
kiln_lib_mod(struct libcall *c)
{
    static const char *const attrs[] = {"fmod", NULL};
    int64_t                  fm;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "fmod", 0, &fm));
    if (fm != 0 && fm != 1)
        return lib_fail_attr(c, lib_attr(c, "fmod"), "attribute fmod must be 0 or 1, got %lld",
                             (long long)fm);
    if (kiln_dtype_is_float((enum kiln_dtype)lib_in(c, 0)->dtype))
        return map2_body(c, KILN_OP_FMOD, fm ? NULL : float_mod_floor, true);
    return map2_body(c, KILN_OP_FLOORMOD, fm ? int_mod_trunc : int_mod_floor, false);
}
