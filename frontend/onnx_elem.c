/* frontend/onnx_elem.c -- ONNX elementwise ops: unary and binary maps onto the library's ops
 * (Pow of mixed or integer dtypes through casts), Clip, PRelu, the activations written as chains
 * of library ops, Sum/Max/Min/Mean, IsInf, Mod, ThresholdedRelu, Shrink and Hardmax. One handler
 * per row of frontend/onnx.def; the dispatcher (onnx.c) has checked the attributes and looked the
 * inputs up into m->in[]. */
#include "onnx_impl.h"

#include <string.h>

/* Relu, Sigmoid, Tanh, Abs, Neg, Exp, Log, Sqrt, Erf, Floor, Ceil, Round, Sign, Reciprocal,
 * IsNaN, Sin ... Atanh: the library op of the row. */
enum kiln_status
onnx_op_unary(struct onnx_imp *m)
{
    return onnx_set_output(m, 0,
                           onnx_lib1(m, m->op->kop, onnx_out0(m), onnx_tensor(m, m->in[0]), NULL));
}

/* t cast to dt, named BASE_suffix. */
static uint32_t
cast_named(struct onnx_imp *m, uint32_t t, enum kiln_dtype dt, const char *suffix)
{
    struct onnx_attrs as = {0};
    onnx_at_str(m, &as, "dtype", kiln_dtype_name(dt));
    return onnx_lib1(m, "cast", onnx_suffixed(m, onnx_out0(m), suffix), t, &as);
}

/* Pow whose inputs differ in dtype or are integers: the result has the base's dtype. A float
 * base takes the exponent cast to its dtype; an integer base is raised in f64 and cast back
 * (truncating toward zero, saturating), exact while the power is below 2^53. */
static enum kiln_status
pow_mixed(struct onnx_imp *m, uint32_t ta, enum kiln_dtype da, uint32_t tb, enum kiln_dtype db)
{
    if (da == KILN_DTYPE_BOOL || db == KILN_DTYPE_BOOL)
        return UNSUP(m, "Pow of bool is not supported (numeric dtypes only)");
    if (onnx_is_float(da))
        return onnx_set_output(
            m, 0, onnx_lib2(m, "pow", onnx_out0(m), ta, cast_named(m, tb, da, "exponent")));
    if (!kiln_dtype_is_int(da))
        return UNSUP(m, "Pow of %s is not supported", kiln_dtype_name(da));
    uint32_t fa = cast_named(m, ta, KILN_DTYPE_F64, "base64");
    uint32_t fb = db == KILN_DTYPE_F64 ? tb : cast_named(m, tb, KILN_DTYPE_F64, "exponent64");
    uint32_t p = onnx_lib2(m, "pow", onnx_suffixed(m, onnx_out0(m), "pow64"), fa, fb);
    struct onnx_attrs as = {0};
    onnx_at_str(m, &as, "dtype", kiln_dtype_name(da));
    return onnx_set_output(m, 0, onnx_lib1(m, "cast", onnx_out0(m), p, &as));
}

/* Add, Sub, Mul, Div, Pow with NumPy broadcasting; before opset 7 `broadcast` and `axis`. */
enum kiln_status
onnx_op_binary(struct onnx_imp *m)
{
    const char        *op = m->op->kop;
    struct onnx_value *a = m->in[0], *b = m->in[1];
    if (!strcmp(op, "pow") && b->is_const && b->c.numel == 1 && b->c.data[0] == 2
        && onnx_is_float(onnx_vdtype(m, a)) && onnx_vdtype(m, a) == onnx_vdtype(m, b)
        && onnx_vrank(m, b) <= onnx_vrank(m, a))
        /* x^2, as exporters write a variance: x*x, the same value (both are the exact square
         * rounded once) without a call to pow */
        return onnx_set_output(m, 0, onnx_lib1(m, "square", onnx_out0(m), onnx_tensor(m, a), NULL));
    uint32_t ta = onnx_tensor(m, a), tb = onnx_tensor(m, b);
    uint32_t ra = onnx_vrank(m, a), rb = onnx_vrank(m, b);
    if (m->opset < 7 && !onnx_attr_int(m, "broadcast", 0)) {
        if (ra != rb || memcmp(onnx_vshape(m, a), onnx_vshape(m, b), sizeof(int64_t) * ra))
            return BAD(m, "inputs differ in shape and broadcast is 0");
    } else if (m->opset < 7 && onnx_attr(m, "axis")) {
        /* legacy broadcasting: b's dimensions line up with a's from `axis` on */
        int64_t ax = onnx_norm_axis(onnx_attr_int(m, "axis", 0), ra);
        if (ax < 0 || ax + rb > ra)
            return BAD(m, "axis %lld does not fit shapes of rank %u and %u",
                       (long long)onnx_attr_int(m, "axis", 0), ra, rb);
        int64_t  sh[KILN_MAX_DIMS];
        uint32_t n = (uint32_t)(ra - ax);
        for (uint32_t i = 0; i < n; i++)
            sh[i] = i < rb ? onnx_vshape(m, b)[i] : 1;
        tb = onnx_reshape(m, onnx_suffixed(m, onnx_out0(m), "b"), tb, n, sh);
    }
    enum kiln_dtype da = onnx_vdtype(m, a), db = onnx_vdtype(m, b);
    if (!strcmp(op, "pow") && (da != db || !onnx_is_float(da)))
        return pow_mixed(m, ta, da, tb, db);
    if (da != db)
        return UNSUP(m, "inputs of different dtypes (%s, %s) are not supported",
                     kiln_dtype_name(da), kiln_dtype_name(db));
    return onnx_set_output(m, 0, onnx_lib2(m, op, onnx_out0(m), ta, tb));
}

enum kiln_status
onnx_op_leaky_relu(struct onnx_imp *m)
{
    struct onnx_attrs as = {0};
    onnx_at_float(m, &as, "alpha", onnx_attr_float(m, "alpha", 0.01));
    return onnx_set_output(m, 0,
                           onnx_lib1(m, "leaky_relu", onnx_out0(m), onnx_tensor(m, m->in[0]), &as));
}

enum kiln_status
onnx_op_gelu(struct onnx_imp *m)
{
    const char *ap = onnx_attr_str(m, "approximate", "none");
    if (!ap || (strcmp(ap, "none") && strcmp(ap, "tanh")))
        return UNSUP(m, "approximate '%s' is not supported (none, tanh)", ap ? ap : "?");
    struct onnx_attrs as = {0};
    onnx_at_str(m, &as, "approximate", ap);
    return onnx_set_output(m, 0, onnx_lib1(m, "gelu", onnx_out0(m), onnx_tensor(m, m->in[0]), &as));
}

/* Clip: max(min(x, hi), lo) with bounds from attributes (opset < 11) or inputs (constants are
 * folded into scalar weights, runtime inputs are read as rank-0 tensors). */
enum kiln_status
onnx_op_clip(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    enum kiln_dtype    dt = onnx_vdtype(m, x);
    uint32_t           bound[2] = {KILN_NONE, KILN_NONE}; /* lo, hi */
    const char        *o = onnx_out0(m);
    if (m->opset < 11) {
        if (onnx_attr(m, "min"))
            bound[0] = onnx_scalar(m, onnx_suffixed(m, o, "min"), onnx_attr_float(m, "min", 0), dt);
        if (onnx_attr(m, "max"))
            bound[1] = onnx_scalar(m, onnx_suffixed(m, o, "max"), onnx_attr_float(m, "max", 0), dt);
    } else {
        for (uint32_t i = 0; i < 2; i++) {
            struct onnx_value *b = m->in[i + 1];
            if (!b)
                continue;
            if (onnx_vrank(m, b) > 1 || (onnx_vrank(m, b) == 1 && onnx_vshape(m, b)[0] != 1))
                return BAD(m, "input %u ('%s') must be a scalar", i + 1, b->name);
            bound[i] = onnx_tensor(m, b);
        }
    }
    uint32_t t = onnx_tensor(m, x);
    if (bound[1] != KILN_NONE)
        t = onnx_lib2(m, "minimum", bound[0] != KILN_NONE ? onnx_suffixed(m, o, "hi") : o, t,
                      bound[1]);
    if (bound[0] != KILN_NONE)
        t = onnx_lib2(m, "maximum", o, t, bound[0]);
    if (bound[0] == KILN_NONE && bound[1] == KILN_NONE)
        t = onnx_reshape(m, o, t, onnx_vrank(m, x), onnx_vshape(m, x));
    return onnx_set_output(m, 0, t);
}

/* PRelu: max(x, 0) + slope * min(x, 0), slope broadcast against x. */
enum kiln_status
onnx_op_prelu(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0], *sl = m->in[1];
    const char        *o = onnx_out0(m);
    uint32_t           tx = onnx_tensor(m, x), ts = onnx_tensor(m, sl);
    if (m->opset < 7 && onnx_vrank(m, sl) == 1 && onnx_vrank(m, x) >= 2 && onnx_vshape(m, sl)[0] > 1
        && onnx_vrank(m, x) > 2) { /* legacy: a per-channel slope [C] against [N, C, ...] */
        int64_t sh[KILN_MAX_DIMS];
        sh[0] = onnx_vshape(m, sl)[0];
        for (uint32_t i = 1; i + 2 < onnx_vrank(m, x) + 1; i++)
            sh[i] = 1;
        ts = onnx_reshape(m, onnx_suffixed(m, o, "slope"), ts, onnx_vrank(m, x) - 1, sh);
    }
    uint32_t zero = onnx_scalar(m, onnx_suffixed(m, o, "zero"), 0, onnx_vdtype(m, x));
    uint32_t pos = onnx_lib2(m, "maximum", onnx_suffixed(m, o, "pos"), tx, zero);
    uint32_t neg = onnx_lib2(m, "minimum", onnx_suffixed(m, o, "neg"), tx, zero);
    uint32_t sc = onnx_lib2(m, "mul", onnx_suffixed(m, o, "scaled"), neg, ts);
    return onnx_set_output(m, 0, onnx_lib2(m, "add", o, pos, sc));
}

/* ---- activations written as chains of library ops with scalar constants ----
 *   HardSigmoid  max(min(alpha x + beta, 1), 0)       HardSwish  x HardSigmoid(x; 1/6, 1/2)
 *   Softplus     log(exp(x) + 1)                      Softsign   x / (|x| + 1)
 *   Elu          max(x, 0) + alpha (exp(min(x, 0)) - 1)
 *   Selu         gamma (max(x, 0) + alpha (exp(min(x, 0)) - 1))
 *   Celu         max(x, 0) + min(alpha (exp(x / alpha) - 1), 0)
 * K(v) is a scalar weight of x's dtype, STEP(s) the name of an intermediate. */
#define K(v)    onnx_scalar(m, onnx_suffixed(m, o, "k"), (v), dt)
#define STEP(s) onnx_suffixed(m, o, s)

/* Input 0 must have a float dtype (returned in *dt). */
static bool
float_input(struct onnx_imp *m, enum kiln_dtype *dt)
{
    *dt = onnx_vdtype(m, m->in[0]);
    if (onnx_is_float(*dt))
        return true;
    UNSUP(m, "%s of %s is not supported (float dtypes only)", m->op->name, kiln_dtype_name(*dt));
    return false;
}

/* max(min(alpha t + beta, 1), 0), named `name`. */
static uint32_t
hard_sigmoid(struct onnx_imp *m, uint32_t t, enum kiln_dtype dt, double alpha, double beta,
             const char *name)
{
    const char *o = onnx_out0(m);
    uint32_t    a = onnx_lib2(m, "mul", STEP("ax"), t, K(alpha));
    a = onnx_lib2(m, "add", STEP("axb"), a, K(beta));
    a = onnx_lib2(m, "minimum", STEP("min1"), a, K(1));
    return onnx_lib2(m, "maximum", name, a, K(0));
}

enum kiln_status
onnx_op_hard_sigmoid(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    uint32_t t = onnx_tensor(m, m->in[0]);
    double   alpha = onnx_attr_float(m, "alpha", 0.2), beta = onnx_attr_float(m, "beta", 0.5);
    return onnx_set_output(m, 0, hard_sigmoid(m, t, dt, alpha, beta, onnx_out0(m)));
}

enum kiln_status
onnx_op_hard_swish(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    const char *o = onnx_out0(m);
    uint32_t    t = onnx_tensor(m, m->in[0]);
    uint32_t    y = hard_sigmoid(m, t, dt, 1.0 / 6, 0.5, STEP("hsig"));
    return onnx_set_output(m, 0, onnx_lib2(m, "mul", o, t, y));
}

enum kiln_status
onnx_op_softplus(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    const char *o = onnx_out0(m);
    uint32_t    y = onnx_lib1(m, "exp", STEP("exp"), onnx_tensor(m, m->in[0]), NULL);
    y = onnx_lib2(m, "add", STEP("exp1"), y, K(1));
    return onnx_set_output(m, 0, onnx_lib1(m, "log", o, y, NULL));
}

enum kiln_status
onnx_op_softsign(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    const char *o = onnx_out0(m);
    uint32_t    t = onnx_tensor(m, m->in[0]);
    uint32_t    y = onnx_lib1(m, "abs", STEP("abs"), t, NULL);
    y = onnx_lib2(m, "add", STEP("abs1"), y, K(1));
    return onnx_set_output(m, 0, onnx_lib2(m, "div", o, t, y));
}

enum kiln_status
onnx_op_celu(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    const char *o = onnx_out0(m);
    uint32_t    t = onnx_tensor(m, m->in[0]);
    double      alpha = onnx_attr_float(m, "alpha", 1);
    uint32_t    e = onnx_lib2(m, "mul", STEP("xa"), t, K(1 / alpha));
    e = onnx_lib1(m, "exp", STEP("exp"), e, NULL);
    e = onnx_lib2(m, "sub", STEP("exp1"), e, K(1));
    e = onnx_lib2(m, "mul", STEP("neg"), e, K(alpha));
    e = onnx_lib2(m, "minimum", STEP("negmin"), e, K(0));
    return onnx_set_output(
        m, 0, onnx_lib2(m, "add", o, onnx_lib2(m, "maximum", STEP("pos"), t, K(0)), e));
}

/* max(t, 0) + alpha (exp(min(t, 0)) - 1), named `name` (Elu; Selu before its gamma). */
static uint32_t
elu(struct onnx_imp *m, uint32_t t, enum kiln_dtype dt, double alpha, const char *name)
{
    const char *o = onnx_out0(m);
    uint32_t    e = onnx_lib2(m, "minimum", STEP("min0"), t, K(0));
    e = onnx_lib1(m, "exp", STEP("exp"), e, NULL);
    e = onnx_lib2(m, "sub", STEP("exp1"), e, K(1));
    e = onnx_lib2(m, "mul", STEP("neg"), e, K(alpha));
    return onnx_lib2(m, "add", name, onnx_lib2(m, "maximum", STEP("pos"), t, K(0)), e);
}

enum kiln_status
onnx_op_elu(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    uint32_t t = onnx_tensor(m, m->in[0]);
    return onnx_set_output(m, 0, elu(m, t, dt, onnx_attr_float(m, "alpha", 1.0), onnx_out0(m)));
}

enum kiln_status
onnx_op_selu(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    const char *o = onnx_out0(m);
    uint32_t    t = onnx_tensor(m, m->in[0]);
    double      alpha = onnx_attr_float(m, "alpha", 1.67326319217681884765625);
    double      gamma = onnx_attr_float(m, "gamma", 1.05070102214813232421875);
    uint32_t    y = elu(m, t, dt, alpha, STEP("sum"));
    return onnx_set_output(m, 0, onnx_lib2(m, "mul", o, y, K(gamma)));
}

#undef K
#undef STEP

/* Sum, Max, Min: a chain of the row's binary op over 1 or more inputs. */
enum kiln_status
onnx_op_variadic(struct onnx_imp *m)
{
    struct onnx_value *a = m->in[0];
    uint32_t           t = onnx_tensor(m, a);
    if (m->nin == 1)
        return onnx_set_output(
            m, 0, onnx_reshape(m, onnx_out0(m), t, onnx_vrank(m, a), onnx_vshape(m, a)));
    for (uint32_t i = 1; i < m->nin; i++) {
        /* a name of its own per part: one suffix for all made every part probe the
         * names taken by the earlier ones (quadratic in the inputs) */
        const char *nm = i + 1 == m->nin ? onnx_out0(m)
                                         : kiln_arena_printf(m->ctx, "%s_part%u", onnx_out0(m), i);
        t = onnx_lib2(m, m->op->kop, nm, t, onnx_tensor(m, m->in[i]));
    }
    return onnx_set_output(m, 0, t);
}

/* ---- IsInf, Mean, Mod, ThresholdedRelu, Shrink, Hardmax ---- */

#define K(v)    onnx_scalar(m, onnx_suffixed(m, o, "k"), (v), dt)
#define STEP(s) onnx_suffixed(m, o, s)

enum kiln_status
onnx_op_is_inf(struct onnx_imp *m)
{
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "detect_negative", onnx_attr_int(m, "detect_negative", 1));
    onnx_at_int(m, &as, "detect_positive", onnx_attr_int(m, "detect_positive", 1));
    return onnx_set_output(m, 0,
                           onnx_lib1(m, "isinf", onnx_out0(m), onnx_tensor(m, m->in[0]), &as));
}

/* Mean: the sum of the inputs (broadcast) divided by their count. */
enum kiln_status
onnx_op_mean(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    const char *o = onnx_out0(m);
    uint32_t    t = onnx_tensor(m, m->in[0]);
    for (uint32_t i = 1; i < m->nin; i++)
        t = onnx_lib2(m, "add", kiln_arena_printf(m->ctx, "%s_part%u", o, i), t,
                      onnx_tensor(m, m->in[i]));
    return onnx_set_output(m, 0, onnx_lib2(m, "div", o, t, K((double)m->nin)));
}

/* Mod: the library's mod (fmod 0: the divisor's sign, integers only; fmod 1: the dividend's,
 * C's fmod on floats). */
enum kiln_status
onnx_op_mod(struct onnx_imp *m)
{
    enum kiln_dtype da = onnx_vdtype(m, m->in[0]), db = onnx_vdtype(m, m->in[1]);
    int64_t         fm = onnx_attr_int(m, "fmod", 0);
    if (fm != 0 && fm != 1)
        return BAD(m, "fmod %lld must be 0 or 1", (long long)fm);
    if (da != db)
        return UNSUP(m, "inputs of different dtypes (%s, %s) are not supported",
                     kiln_dtype_name(da), kiln_dtype_name(db));
    if (onnx_is_float(da) && !fm)
        return BAD(m, "fmod must be 1 for float inputs (%s)", kiln_dtype_name(da));
    if (da == KILN_DTYPE_BOOL)
        return UNSUP(m, "Mod of bool is not supported (numeric dtypes only)");
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "fmod", fm);
    uint32_t in[2] = {onnx_tensor(m, m->in[0]), onnx_tensor(m, m->in[1])};
    return onnx_set_output(m, 0, onnx_lib(m, "mod", onnx_out0(m), 2, in, &as));
}

/* ThresholdedRelu: x where x > alpha, else 0. */
enum kiln_status
onnx_op_thresholded_relu(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    const char *o = onnx_out0(m);
    uint32_t    x = onnx_tensor(m, m->in[0]);
    uint32_t in[3] = {onnx_lib2(m, "greater", STEP("gt"), x, K(onnx_attr_float(m, "alpha", 1))), x,
                      K(0)};
    return onnx_set_output(m, 0, onnx_lib(m, "where", o, 3, in, NULL));
}

/* Shrink: x + bias where x < -lambd, x - bias where x > lambd, else 0. */
enum kiln_status
onnx_op_shrink(struct onnx_imp *m)
{
    const char     *o = onnx_out0(m);
    enum kiln_dtype dt = onnx_vdtype(m, m->in[0]);
    if (dt == KILN_DTYPE_BOOL)
        return UNSUP(m, "Shrink of bool is not supported (numeric dtypes only)");
    double   bias = onnx_attr_float(m, "bias", 0), lambd = onnx_attr_float(m, "lambd", 0.5);
    uint32_t x = onnx_tensor(m, m->in[0]);
    uint32_t hi[3] = {onnx_lib2(m, "greater", STEP("gt"), x, K(lambd)),
                      onnx_lib2(m, "sub", STEP("minus"), x, K(bias)), K(0)};
    uint32_t lo[3] = {onnx_lib2(m, "less", STEP("lt"), x, K(-lambd)),
                      onnx_lib2(m, "add", STEP("plus"), x, K(bias)),
                      onnx_lib(m, "where", STEP("upper"), 3, hi, NULL)};
    return onnx_set_output(m, 0, onnx_lib(m, "where", o, 3, lo, NULL));
}

/* Hardmax: 1 at the first maximum along the axis, 0 elsewhere: argmax (kept dimension)
 * compared with the constant 0 .. n-1 laid along the axis, cast to x's dtype. Before opset 13
 * the input is seen as 2-D, [product of the dimensions before axis, product of the rest]. */
enum kiln_status
onnx_op_hardmax(struct onnx_imp *m)
{
    enum kiln_dtype dt;
    if (!float_input(m, &dt))
        return m->ctx->err.status;
    struct onnx_value *xv = m->in[0];
    const char        *o = onnx_out0(m);
    uint32_t           rank = onnx_vrank(m, xv);
    const int64_t     *shape = onnx_vshape(m, xv);
    int64_t            axis = onnx_attr_int(m, "axis", m->opset < 13 ? 1 : -1);
    int64_t            ax = onnx_norm_axis(axis, rank);
    if (rank == 0 || ax < 0 || ax >= (int64_t)rank + (m->opset < 13))
        return BAD(m, "axis %lld is out of range for rank %u", (long long)axis, rank);
    uint32_t x = onnx_tensor(m, xv), r = rank;
    int64_t  sh[KILN_MAX_DIMS];
    memcpy(sh, shape, sizeof(int64_t) * rank);
    if (m->opset < 13) { /* [d0 ... d(axis-1)] x [d(axis) ...] */
        int64_t a = 1, b = 1;
        for (uint32_t i = 0; i < rank; i++)
            *(i < ax ? &a : &b) *= shape[i];
        sh[0] = a;
        sh[1] = b;
        r = 2;
        ax = 1;
        x = onnx_reshape(m, STEP("2d"), x, r, sh);
    }
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "axis", ax);
    onnx_at_int(m, &as, "keepdims", 1);
    uint32_t              am = onnx_lib1(m, "argmax", STEP("argmax"), x, &as);
    struct frontend_const c = {.dtype = KILN_DTYPE_I64, .ndim = r, .numel = sh[ax]};
    for (uint32_t i = 0; i < r; i++)
        c.shape[i] = i == ax ? sh[ax] : 1;
    c.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)c.numel);
    if (!c.data)
        return m->ctx->err.status;
    for (int64_t i = 0; i < c.numel; i++)
        c.data[i] = (double)i;
    uint32_t          iota = onnx_weight(m, STEP("iota"), &c);
    uint32_t          eq = onnx_lib2(m, "equal", STEP("eq"), am, iota);
    struct onnx_attrs cs = {0};
    onnx_at_str(m, &cs, "dtype", kiln_dtype_name(dt));
    uint32_t y = onnx_lib1(m, "cast", m->opset < 13 ? STEP("cast") : o, eq, &cs);
    if (m->opset < 13)
        y = onnx_reshape(m, o, y, rank, shape);
    return onnx_set_output(m, 0, y);
}

#undef K
#undef STEP
