/* ir/arith.c -- integer arithmetic analysis of index expressions: intervals (saturating bounds
 * and exact intervals), affine forms and strides (ir/arith.h).
 *
 * Saturating bounds (kiln_ival_bound) are what the simplifier, lowering and the passes reason
 * with: INT64_MIN / INT64_MAX stand for -inf / +inf, an overflowing bound becomes infinite on
 * its side, narrow integers (i8, i32) wrap and are bounded by their dtype's range. Exact
 * intervals (kiln_ival_exact) are the .kg bounds check's: every bound an exact int64 value,
 * anything that overflows or is not understood has no interval at all. Both share the corner
 * arithmetic below (products and quotients of interval ends, checked). Affine forms read the
 * top layer of an i64 expression; all coefficient arithmetic is checked. */
#include "ir.h"

#define NINF INT64_MIN
#define PINF INT64_MAX

static int64_t
min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t
max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static bool
is_intlike(enum kiln_dtype dt)
{
    return kiln_dtype_is_int(dt) || dt == KILN_DTYPE_BOOL;
}

/* The hull of four corner values. */
static struct kiln_ival
hull4(const int64_t c[4])
{
    struct kiln_ival r = {c[0], c[0]};
    for (int i = 1; i < 4; i++) {
        r.lo = min64(r.lo, c[i]);
        r.hi = max64(r.hi, c[i]);
    }
    return r;
}

/* [a.lo, a.hi] * [b.lo, b.hi] on exact ends: false when a corner product overflows. */
static bool
corners_mul(struct kiln_ival a, struct kiln_ival b, struct kiln_ival *out)
{
    int64_t c[4];
    if (kiln_mul_overflows(a.lo, b.lo, &c[0]) || kiln_mul_overflows(a.lo, b.hi, &c[1])
        || kiln_mul_overflows(a.hi, b.lo, &c[2]) || kiln_mul_overflows(a.hi, b.hi, &c[3]))
        return false;
    *out = hull4(c);
    return true;
}

/* floor(a / d) of exact ends with 0 outside [b.lo, b.hi]; (INT64_MIN, -1), which overflows,
 * gives INT64_MAX (the saturating form's +inf; exact callers exclude it first). */
static int64_t
sfdiv(int64_t a, int64_t d)
{
    if (a == INT64_MIN && d == -1)
        return PINF;
    return kiln_scalar_floordiv(a, d);
}

static struct kiln_ival
corners_floordiv(struct kiln_ival a, struct kiln_ival b)
{
    int64_t c[4] = {sfdiv(a.lo, b.lo), sfdiv(a.lo, b.hi), sfdiv(a.hi, b.lo), sfdiv(a.hi, b.hi)};
    return hull4(c);
}

/* ---- saturating intervals ---- */

static int64_t
lo_add(int64_t a, int64_t b) /* lower bounds: -inf absorbs, overflow saturates to -inf */
{
    int64_t r;
    if (a == NINF || b == NINF || kiln_add_overflows(a, b, &r))
        return NINF;
    return r;
}

static int64_t
hi_add(int64_t a, int64_t b) /* upper bounds: +inf absorbs, overflow saturates to +inf */
{
    int64_t r;
    if (a == PINF || b == PINF || kiln_add_overflows(a, b, &r))
        return PINF;
    return r;
}

struct kiln_ival
kiln_ival_add(struct kiln_ival a, struct kiln_ival b)
{
    return (struct kiln_ival){lo_add(a.lo, b.lo), hi_add(a.hi, b.hi)};
}

struct kiln_ival
kiln_ival_scale(struct kiln_ival a, int64_t k)
{
    int64_t lo, hi;
    if (k == 0)
        return (struct kiln_ival){0, 0};
    if (k > 0) {
        lo = a.lo == NINF || kiln_mul_overflows(a.lo, k, &lo) ? NINF : lo;
        hi = a.hi == PINF || kiln_mul_overflows(a.hi, k, &hi) ? PINF : hi;
    } else {
        lo = a.hi == PINF || kiln_mul_overflows(a.hi, k, &lo) ? NINF : lo;
        hi = a.lo == NINF || kiln_mul_overflows(a.lo, k, &hi) ? PINF : hi;
    }
    return (struct kiln_ival){lo, hi};
}

struct kiln_ival
kiln_ival_mul(struct kiln_ival a, struct kiln_ival b)
{
    if (a.lo == a.hi && a.lo != NINF && a.lo != PINF)
        return kiln_ival_scale(b, a.lo);
    if (b.lo == b.hi && b.lo != NINF && b.lo != PINF)
        return kiln_ival_scale(a, b.lo);
    if (kiln_ival_finite(a) && kiln_ival_finite(b)) {
        struct kiln_ival r;
        if (!corners_mul(a, b, &r) || r.lo == NINF || r.hi == PINF)
            return KILN_IVAL_FULL;
        return r;
    }
    if (a.lo >= 0 && b.lo >= 0) {
        int64_t lo;
        return (struct kiln_ival){kiln_mul_overflows(a.lo, b.lo, &lo) ? 0 : lo, PINF};
    }
    return KILN_IVAL_FULL;
}

struct kiln_ival
kiln_ival_floordiv(struct kiln_ival a, struct kiln_ival b)
{
    if (b.lo == b.hi && b.lo != 0 && b.lo != NINF && b.lo != PINF) {
        int64_t d = b.lo;
        if (d == -1)
            return kiln_ival_scale(a, -1);
        if (d > 0)
            return (struct kiln_ival){a.lo == NINF ? NINF : kiln_scalar_floordiv(a.lo, d),
                                      a.hi == PINF ? PINF : kiln_scalar_floordiv(a.hi, d)};
        return (struct kiln_ival){a.hi == PINF ? NINF : kiln_scalar_floordiv(a.hi, d),
                                  a.lo == NINF ? PINF : kiln_scalar_floordiv(a.lo, d)};
    }
    if (b.lo >= 1 || (b.hi <= -1 && b.hi != NINF)) {
        if (kiln_ival_finite(a) && b.lo != NINF && b.hi != PINF)
            return corners_floordiv(a, b);
        if (b.lo >= 1 && a.lo >= 0)
            return (struct kiln_ival){0, a.hi == PINF ? PINF : kiln_scalar_floordiv(a.hi, b.lo)};
    }
    return KILN_IVAL_FULL;
}

struct kiln_ival
kiln_ival_floormod(struct kiln_ival a, struct kiln_ival b)
{
    if (b.lo == b.hi && b.lo != 0 && b.lo != NINF && b.lo != PINF) {
        int64_t d = b.lo;
        if (kiln_ival_finite(a) && d != -1
            && kiln_scalar_floordiv(a.lo, d) == kiln_scalar_floordiv(a.hi, d))
            return (struct kiln_ival){kiln_scalar_floormod(a.lo, d), kiln_scalar_floormod(a.hi, d)};
        if (d > 0)
            return (struct kiln_ival){0, a.lo >= 0 && a.hi < d - 1 ? a.hi : d - 1};
        return (struct kiln_ival){d + 1, a.hi <= 0 && a.lo > d + 1 ? a.lo : 0};
    }
    if (b.lo >= 1) {
        int64_t hi = b.hi == PINF ? PINF : b.hi - 1;
        if (a.lo >= 0 && a.hi < hi)
            hi = a.hi;
        return (struct kiln_ival){0, hi};
    }
    if (b.hi <= -1 && b.hi != NINF) {
        int64_t lo = b.lo == NINF ? NINF : b.lo + 1;
        if (a.hi <= 0 && a.lo > lo)
            lo = a.lo;
        return (struct kiln_ival){lo, 0};
    }
    return KILN_IVAL_FULL;
}

struct kiln_ival
kiln_ival_dtype(enum kiln_dtype dt)
{
    struct kiln_ival r;
    kiln_dtype_range(dt, &r.lo, &r.hi); /* the full range for i64 and floats */
    return r;
}

static struct kiln_ival
sub_bound(const struct kiln_ival_env *env, kiln_expr e)
{
    return env->sub ? env->sub(env->ud, e) : kiln_ival_bound(env, e);
}

static struct kiln_ival
bound_cmp(const struct kiln_ival_env *env, enum kiln_op op, kiln_expr a, kiln_expr b)
{
    enum kiln_dtype odt = kiln_expr_dtype(env->ctx, a);
    if (!is_intlike(odt) || odt == KILN_DTYPE_U64) /* u64 orders its bit patterns unsigned */
        return (struct kiln_ival){0, 1};
    struct kiln_ival x = sub_bound(env, a), y = sub_bound(env, b);
    bool             t, f;
    if (op == KILN_OP_LT) {
        t = x.hi != PINF && y.lo != NINF && x.hi < y.lo;
        f = x.lo != NINF && y.hi != PINF && x.lo >= y.hi;
    } else if (op == KILN_OP_LE) {
        t = x.hi != PINF && y.lo != NINF && x.hi <= y.lo;
        f = x.lo != NINF && y.hi != PINF && x.lo > y.hi;
    } else { /* EQ, NE */
        t = kiln_ival_finite(x) && kiln_ival_finite(y) && x.lo == x.hi && y.lo == y.hi
            && x.lo == y.lo;
        f = (x.hi != PINF && y.lo != NINF && x.hi < y.lo)
            || (x.lo != NINF && y.hi != PINF && x.lo > y.hi);
        if (op == KILN_OP_NE) {
            bool s = t;
            t = f;
            f = s;
        }
    }
    return t ? (struct kiln_ival){1, 1} : f ? (struct kiln_ival){0, 0} : (struct kiln_ival){0, 1};
}

struct kiln_ival
kiln_ival_bound(const struct kiln_ival_env *env, kiln_expr e)
{
    const struct kiln_node n = env->ctx->node[e.id];
    enum kiln_dtype        dt = (enum kiln_dtype)n.dtype;
    kiln_expr              a = {n.kid[0]}, b = {n.kid[1]};
    if (!is_intlike(dt))
        return KILN_IVAL_FULL;
    if (dt != KILN_DTYPE_I64 && dt != KILN_DTYPE_BOOL && n.op != KILN_OP_INT)
        return kiln_ival_dtype(dt); /* narrow integers wrap: no reasoning past their range */
    switch ((enum kiln_op)n.op) {
    case KILN_OP_INT:
        return (struct kiln_ival){n.imm, n.imm};
    case KILN_OP_VAR:
        return env->var(env->ud, e);
    case KILN_OP_ADD:
        return kiln_ival_add(sub_bound(env, a), sub_bound(env, b));
    case KILN_OP_SUB:
        return kiln_ival_add(sub_bound(env, a), kiln_ival_scale(sub_bound(env, b), -1));
    case KILN_OP_NEG:
        return kiln_ival_scale(sub_bound(env, a), -1);
    case KILN_OP_MUL:
        return kiln_ival_mul(sub_bound(env, a), sub_bound(env, b));
    case KILN_OP_FLOORDIV:
        return kiln_ival_floordiv(sub_bound(env, a), sub_bound(env, b));
    case KILN_OP_FLOORMOD:
        return kiln_ival_floormod(sub_bound(env, a), sub_bound(env, b));
    case KILN_OP_MIN: {
        struct kiln_ival x = sub_bound(env, a), y = sub_bound(env, b);
        return (struct kiln_ival){min64(x.lo, y.lo), min64(x.hi, y.hi)};
    }
    case KILN_OP_MAX: {
        struct kiln_ival x = sub_bound(env, a), y = sub_bound(env, b);
        return (struct kiln_ival){max64(x.lo, y.lo), max64(x.hi, y.hi)};
    }
    case KILN_OP_ABS: {
        struct kiln_ival x = sub_bound(env, a);
        if (x.lo >= 0)
            return x;
        if (x.hi <= 0)
            return kiln_ival_scale(x, -1);
        struct kiln_ival nx = kiln_ival_scale(x, -1);
        return (struct kiln_ival){0, max64(nx.hi, x.hi)};
    }
    case KILN_OP_SELECT: {
        struct kiln_ival c = sub_bound(env, a), x, y;
        if (c.lo == c.hi)
            return sub_bound(env, c.lo ? b : (kiln_expr){n.kid[2]});
        x = sub_bound(env, b);
        y = sub_bound(env, (kiln_expr){n.kid[2]});
        return (struct kiln_ival){min64(x.lo, y.lo), max64(x.hi, y.hi)};
    }
    case KILN_OP_CAST: {
        enum kiln_dtype from = kiln_expr_dtype(env->ctx, a);
        if (dt == KILN_DTYPE_BOOL)
            return (struct kiln_ival){0, 1};
        if (is_intlike(from)) /* widening to i64: value preserved */
            return sub_bound(env, a);
        return KILN_IVAL_FULL;
    }
    case KILN_OP_EQ:
    case KILN_OP_NE:
    case KILN_OP_LT:
    case KILN_OP_LE:
        return bound_cmp(env, (enum kiln_op)n.op, a, b);
    case KILN_OP_AND: {
        struct kiln_ival x = sub_bound(env, a), y = sub_bound(env, b);
        if (x.hi == 0 || y.hi == 0)
            return (struct kiln_ival){0, 0};
        return (struct kiln_ival){x.lo && y.lo ? 1 : 0, 1};
    }
    case KILN_OP_OR: {
        struct kiln_ival x = sub_bound(env, a), y = sub_bound(env, b);
        if (x.lo == 1 || y.lo == 1)
            return (struct kiln_ival){1, 1};
        return (struct kiln_ival){0, x.hi || y.hi ? 1 : 0};
    }
    case KILN_OP_NOT: {
        struct kiln_ival x = sub_bound(env, a);
        return (struct kiln_ival){1 - x.hi, 1 - x.lo};
    }
    case KILN_OP_NIL:
    case KILN_OP_FLOAT:
    case KILN_OP_LIST:
    case KILN_OP_LOAD:
    case KILN_OP_DIV:
    case KILN_OP_POW:
    case KILN_OP_FMOD:
    case KILN_OP_FLOOR:
    case KILN_OP_EXP:
    case KILN_OP_LOG:
    case KILN_OP_SQRT:
    case KILN_OP_RSQRT:
    case KILN_OP_TANH:
    case KILN_OP_ERF:
    case KILN_OP_SIGMOID:
    case KILN_OP_SIN:
    case KILN_OP_COS:
    case KILN_OP_TAN:
    case KILN_OP_ASIN:
    case KILN_OP_ACOS:
    case KILN_OP_ATAN:
    case KILN_OP_SINH:
    case KILN_OP_COSH:
    case KILN_OP_ASINH:
    case KILN_OP_ACOSH:
    case KILN_OP_ATANH:
    case KILN_OP_COUNT:
        break;
    }
    return kiln_ival_dtype(dt);
}

/* ---- exact intervals ---- */

static bool
sub_exact(const struct kiln_ival_exact_env *env, kiln_expr e, struct kiln_ival *out)
{
    return env->sub ? env->sub(env->ud, e, out) : kiln_ival_exact(env, e, out);
}

/* The exact interval of a binary arithmetic node from its operands' intervals. */
static bool
exact_binary(enum kiln_op op, struct kiln_ival a, struct kiln_ival b, struct kiln_ival *out)
{
    switch (op) {
    case KILN_OP_ADD:
        return !kiln_add_overflows(a.lo, b.lo, &out->lo)
               && !kiln_add_overflows(a.hi, b.hi, &out->hi);
    case KILN_OP_SUB:
        return b.lo != INT64_MIN && b.hi != INT64_MIN && !kiln_add_overflows(a.lo, -b.hi, &out->lo)
               && !kiln_add_overflows(a.hi, -b.lo, &out->hi);
    case KILN_OP_MUL:
        return corners_mul(a, b, out);
    case KILN_OP_FLOORDIV:
        if ((b.lo <= 0 && b.hi >= 0)
            || ((a.lo == INT64_MIN || a.hi == INT64_MIN) && (b.lo == -1 || b.hi == -1)))
            return false;
        *out = corners_floordiv(a, b);
        return true;
    case KILN_OP_FLOORMOD:
        if (b.lo > 0)
            *out = a.lo >= 0 && a.hi < b.lo ? a : (struct kiln_ival){0, b.hi - 1};
        else if (b.hi < 0)
            *out = (struct kiln_ival){b.lo + 1, 0};
        else
            return false;
        return true;
    case KILN_OP_MIN:
        *out = (struct kiln_ival){min64(a.lo, b.lo), min64(a.hi, b.hi)};
        return true;
    case KILN_OP_MAX:
        *out = (struct kiln_ival){max64(a.lo, b.lo), max64(a.hi, b.hi)};
        return true;
    default:
        return false;
    }
}

bool
kiln_ival_exact(const struct kiln_ival_exact_env *env, kiln_expr e, struct kiln_ival *out)
{
    const kiln_ctx         *ctx = env->ctx;
    const struct kiln_node *n = kiln_node_get(ctx, e);
    enum kiln_op            op = (enum kiln_op)n->op;
    struct kiln_ival        a, b;
    switch (kiln_op_kind(op)) {
    case KILN_OPK_NONE:
    case KILN_OPK_LIST:
        return false;
    case KILN_OPK_LEAF:
        if (op == KILN_OP_INT) {
            *out = (struct kiln_ival){n->imm, n->imm};
            return true;
        }
        return op == KILN_OP_VAR && env->var(env->ud, e, out);
    case KILN_OPK_LOAD: /* an element holds its dtype's range; i64 and u64 have none */
        return n->dtype != KILN_DTYPE_I64 && n->dtype != KILN_DTYPE_U64
               && kiln_dtype_range((enum kiln_dtype)n->dtype, &out->lo, &out->hi);
    case KILN_OPK_SELECT:
        if (!sub_exact(env, (kiln_expr){n->kid[1]}, &a)
            || !sub_exact(env, (kiln_expr){n->kid[2]}, &b))
            return false;
        *out = (struct kiln_ival){min64(a.lo, b.lo), max64(a.hi, b.hi)};
        return true;
    case KILN_OPK_CAST: {
        kiln_expr       k = {n->kid[0]};
        enum kiln_dtype from = kiln_expr_dtype(ctx, k);
        if (!is_intlike(from) || !sub_exact(env, k, &a) || (from == KILN_DTYPE_U64 && a.lo < 0))
            return false;
        int64_t lo, hi; /* a value the cast would wrap is not exact; u64 reads >= 0 */
        kiln_dtype_range((enum kiln_dtype)n->dtype, &lo, &hi);
        if (a.lo < (n->dtype == KILN_DTYPE_U64 ? 0 : lo) || a.hi > hi)
            return false;
        *out = a;
        return true;
    }
    case KILN_OPK_UNARY:
    case KILN_OPK_BINARY:
        break;
    }
    if (kiln_op_flags[op] & (KILN_OPF_CMP | KILN_OPF_LOGIC)) {
        *out = (struct kiln_ival){0, 1};
        return true;
    }
    if (op == KILN_OP_MIN || op == KILN_OP_MAX) {
        /* a clamp bounds even an operand without an interval of its own (a float cast to an
         * integer, an i64 load): that operand holds its integer dtype's range */
        kiln_expr x = {n->kid[0]}, y = {n->kid[1]};
        if ((!sub_exact(env, x, &a) && !kiln_dtype_range(kiln_expr_dtype(ctx, x), &a.lo, &a.hi))
            || (!sub_exact(env, y, &b) && !kiln_dtype_range(kiln_expr_dtype(ctx, y), &b.lo, &b.hi)))
            return false;
        return exact_binary(op, a, b, out);
    }
    if (!(kiln_op_flags[op] & KILN_OPF_ARITH) || !sub_exact(env, (kiln_expr){n->kid[0]}, &a))
        return false;
    if (op == KILN_OP_NEG || op == KILN_OP_ABS) {
        if (a.lo == INT64_MIN)
            return false;
        if (op == KILN_OP_NEG || a.hi <= 0)
            *out = (struct kiln_ival){-a.hi, -a.lo};
        else
            *out = a.lo >= 0 ? a : (struct kiln_ival){0, max64(-a.lo, a.hi)};
        return true;
    }
    return sub_exact(env, (kiln_expr){n->kid[1]}, &b) && exact_binary(op, a, b, out);
}

/* ---- affine forms ---- */

static bool
affine_const(const kiln_ctx *ctx, kiln_expr e, const struct kiln_affine_fn *fn, int64_t *v)
{
    return fn->konst ? fn->konst(fn->ud, e, v) : kiln_expr_is_int(ctx, e, v);
}

bool
kiln_affine(const kiln_ctx *ctx, kiln_expr e, int64_t scale, int64_t *c,
            const struct kiln_affine_fn *fn)
{
    const struct kiln_node *n = &ctx->node[e.id];
    kiln_expr               a = {n->kid[0]}, b = {n->kid[1]};
    int64_t                 v, m;
    if (affine_const(ctx, e, fn, &v))
        return !kiln_mul_overflows(v, scale, &v) && !kiln_add_overflows(*c, v, c);
    if (n->dtype == KILN_DTYPE_I64) {
        switch ((enum kiln_op)n->op) {
        case KILN_OP_ADD:
            return kiln_affine(ctx, a, scale, c, fn) && kiln_affine(ctx, b, scale, c, fn);
        case KILN_OP_SUB:
            return kiln_affine(ctx, a, scale, c, fn) && !kiln_mul_overflows(scale, -1, &v)
                   && kiln_affine(ctx, b, v, c, fn);
        case KILN_OP_NEG:
            return !kiln_mul_overflows(scale, -1, &v) && kiln_affine(ctx, a, v, c, fn);
        case KILN_OP_MUL:
            if (affine_const(ctx, b, fn, &m))
                return !kiln_mul_overflows(scale, m, &v) && kiln_affine(ctx, a, v, c, fn);
            if (affine_const(ctx, a, fn, &m))
                return !kiln_mul_overflows(scale, m, &v) && kiln_affine(ctx, b, v, c, fn);
            break;
        default:
            break;
        }
    }
    return fn->term(fn->ud, e, scale);
}

bool
kiln_expr_uses(const kiln_ctx *ctx, kiln_expr e, kiln_expr v)
{
    if (!e.id)
        return false;
    if (e.id == v.id)
        return true;
    const struct kiln_node *n = kiln_node_get(ctx, e);
    if (kiln_op_kind((enum kiln_op)n->op) == KILN_OPK_LEAF)
        return false;
    for (int k = 0; k < 3; k++)
        if (kiln_expr_uses(ctx, (kiln_expr){n->kid[k]}, v))
            return true;
    return false;
}

/* |x| < limit, or no limit */
static bool
within(int64_t x, int64_t limit)
{
    return limit <= 0 || (x > -limit && x < limit);
}

bool
kiln_affine_stride(const kiln_ctx *ctx, kiln_expr e, kiln_expr v, int64_t limit, int64_t *k)
{
    if (!kiln_expr_uses(ctx, e, v)) {
        *k = 0;
        return true;
    }
    if (e.id == v.id) {
        *k = 1;
        return true;
    }
    const struct kiln_node *n = kiln_node_get(ctx, e);
    int64_t                 a, b, m;
    if (n->dtype != KILN_DTYPE_I64)
        return false;
    switch ((enum kiln_op)n->op) {
    case KILN_OP_ADD:
    case KILN_OP_SUB:
        if (!kiln_affine_stride(ctx, (kiln_expr){n->kid[0]}, v, limit, &a)
            || !kiln_affine_stride(ctx, (kiln_expr){n->kid[1]}, v, limit, &b)
            || (n->op == KILN_OP_ADD ? kiln_add_overflows(a, b, k)
                                     : b == INT64_MIN || kiln_add_overflows(a, -b, k)))
            return false;
        return within(*k, limit);
    case KILN_OP_NEG:
        if (!kiln_affine_stride(ctx, (kiln_expr){n->kid[0]}, v, limit, &a) || a == INT64_MIN)
            return false;
        *k = -a;
        return within(*k, limit);
    case KILN_OP_MUL:
        for (int s = 0; s < 2; s++)
            if (kiln_expr_is_int(ctx, (kiln_expr){n->kid[s]}, &m) && within(m, limit)
                && kiln_affine_stride(ctx, (kiln_expr){n->kid[1 - s]}, v, limit, &a))
                return !kiln_mul_overflows(a, m, k) && within(*k, limit);
        return false;
    default:
        return false;
    }
}

/* ---- monotonicity ---- */

static enum kiln_mono
mono_join(enum kiln_mono a, enum kiln_mono b)
{
    if (a == KILN_MONO_CONST)
        return b;
    if (b == KILN_MONO_CONST || a == b)
        return a;
    return KILN_MONO_UNKNOWN;
}

static enum kiln_mono
mono_flip(enum kiln_mono a)
{
    return a == KILN_MONO_INC ? KILN_MONO_DEC : a == KILN_MONO_DEC ? KILN_MONO_INC : a;
}

enum kiln_mono
kiln_expr_monotone(const kiln_ctx *ctx, kiln_expr e, kiln_expr v)
{
    const struct kiln_node *n = &ctx->node[e.id];
    kiln_expr               a = {n->kid[0]}, b = {n->kid[1]};
    int64_t                 c;
    if (e.id == v.id)
        return KILN_MONO_INC;
    switch ((enum kiln_op)n->op) {
    case KILN_OP_INT:
    case KILN_OP_FLOAT:
    case KILN_OP_VAR:
        return KILN_MONO_CONST;
    case KILN_OP_ADD:
    case KILN_OP_MIN:
    case KILN_OP_MAX:
        return mono_join(kiln_expr_monotone(ctx, a, v), kiln_expr_monotone(ctx, b, v));
    case KILN_OP_SUB:
        return mono_join(kiln_expr_monotone(ctx, a, v), mono_flip(kiln_expr_monotone(ctx, b, v)));
    case KILN_OP_MUL:
        if (kiln_expr_is_int(ctx, b, &c))
            return c > 0   ? kiln_expr_monotone(ctx, a, v)
                   : c < 0 ? mono_flip(kiln_expr_monotone(ctx, a, v))
                           : KILN_MONO_CONST;
        return mono_join(kiln_expr_monotone(ctx, a, v), kiln_expr_monotone(ctx, b, v))
                       == KILN_MONO_CONST
                   ? KILN_MONO_CONST
                   : KILN_MONO_UNKNOWN;
    case KILN_OP_FLOORDIV:
        if (kiln_expr_is_int(ctx, b, &c) && c > 0)
            return kiln_expr_monotone(ctx, a, v);
        break;
    case KILN_OP_CAST:
    case KILN_OP_NEG:
        return n->op == KILN_OP_NEG ? mono_flip(kiln_expr_monotone(ctx, a, v))
                                    : kiln_expr_monotone(ctx, a, v);
    case KILN_OP_NIL:
    case KILN_OP_LIST:
    case KILN_OP_LOAD:
    case KILN_OP_DIV:
    case KILN_OP_FLOORMOD:
    case KILN_OP_POW:
    case KILN_OP_FMOD:
    case KILN_OP_EQ:
    case KILN_OP_NE:
    case KILN_OP_LT:
    case KILN_OP_LE:
    case KILN_OP_AND:
    case KILN_OP_OR:
    case KILN_OP_NOT:
    case KILN_OP_SELECT:
    case KILN_OP_ABS:
    case KILN_OP_FLOOR:
    case KILN_OP_EXP:
    case KILN_OP_LOG:
    case KILN_OP_SQRT:
    case KILN_OP_RSQRT:
    case KILN_OP_TANH:
    case KILN_OP_ERF:
    case KILN_OP_SIGMOID:
    case KILN_OP_SIN:
    case KILN_OP_COS:
    case KILN_OP_TAN:
    case KILN_OP_ASIN:
    case KILN_OP_ACOS:
    case KILN_OP_ATAN:
    case KILN_OP_SINH:
    case KILN_OP_COSH:
    case KILN_OP_ASINH:
    case KILN_OP_ACOSH:
    case KILN_OP_ATANH:
    case KILN_OP_COUNT:
        break;
    }
    /* anything else: constant only if it does not mention v */
    for (int i = 0; i < kiln_op_arity[n->op]; i++)
        if (n->kid[i] && kiln_expr_monotone(ctx, (kiln_expr){n->kid[i]}, v) != KILN_MONO_CONST)
            return KILN_MONO_UNKNOWN;
    return KILN_MONO_CONST;
}
