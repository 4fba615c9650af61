/* ir/scalar.c -- the one definition of what kiln's operators compute on single values: integer
 * wrap-around per dtype, floor division and modulo, float -> int saturation, rounding to a
 * float dtype, NaN-propagating min/max, sigmoid, and unary/binary operators and casts on
 * values held as double (floats) or int64 (integers and bool).
 *
 * The graph interpreter (interp.c), the loop-nest interpreter (interp_loop.c), the builders'
 * constant folding (expr.c) and the simplifier call these, and the LLVM backend emits code
 * with the same meaning (codegen/llvm_expr.c states where it must differ), so the oracles and
 * the folders cannot drift apart. Semantics (docs/ir.md): floats compute in double; integers
 * compute on int64 and wrap to their width after every operation (+, -, * wrap as two's
 * complement); floordiv/floormod round toward -inf with the divisor's sign, and a divisor of
 * -1 wraps (INT64_MIN / -1 is INT64_MIN) instead of trapping; comparisons give 0/1; min/max
 * of floats propagate NaN; float -> int truncates toward zero and saturates, NaN gives 0; any
 * -> bool is `!= 0` (NaN is true). */
#include "ir.h"

#include <math.h>

bool
kiln_dtype_is_float(enum kiln_dtype dt)
{
    return dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64 || dt == KILN_DTYPE_F16
           || dt == KILN_DTYPE_BF16;
}

bool
kiln_dtype_is_int(enum kiln_dtype dt)
{
    return dt == KILN_DTYPE_I8 || dt == KILN_DTYPE_I32 || dt == KILN_DTYPE_I64;
}

bool
kiln_dtype_range(enum kiln_dtype dt, int64_t *lo, int64_t *hi)
{
    if (dt == KILN_DTYPE_BOOL) {
        *lo = 0;
        *hi = 1;
    } else if (dt == KILN_DTYPE_I8) {
        *lo = INT8_MIN;
        *hi = INT8_MAX;
    } else if (dt == KILN_DTYPE_I32) {
        *lo = INT32_MIN;
        *hi = INT32_MAX;
    } else {
        *lo = INT64_MIN;
        *hi = INT64_MAX;
        return dt == KILN_DTYPE_I64;
    }
    return true;
}

int64_t
kiln_scalar_wrap(int64_t v, enum kiln_dtype dt)
{
    if (dt == KILN_DTYPE_BOOL)
        return v != 0;
    if (dt == KILN_DTYPE_I8)
        return (int8_t)(uint8_t)((uint64_t)v & 0xffu);
    if (dt == KILN_DTYPE_I32)
        return (int32_t)(uint32_t)((uint64_t)v & 0xffffffffu);
    return v;
}

int64_t
kiln_scalar_to_int(double x, enum kiln_dtype dt)
{
    int64_t lo, hi;
    if (dt == KILN_DTYPE_BOOL)
        return x != 0;
    kiln_dtype_range(dt, &lo, &hi); /* a float dtype saturates like i64 */
    if (isnan(x))
        return 0;
    if (x <= (double)lo)
        return lo;
    if (x >= (double)hi) /* (double)INT64_MAX is 2^63 */
        return hi;
    return (int64_t)x;
}

/* v rounded to `mant` explicit mantissa bits with exponents down to emin (below that the
 * spacing stays fixed: subnormals), ties to even; above max it overflows to infinity. */
static double
round_to(double v, int mant, int emin, double max)
{
    if (!isfinite(v) || v == 0)
        return v;
    int e;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    e -= 1;
    if (e < emin)
        e = emin;
    double q = ldexp(1, e - mant);   /* spacing of representable values near v */
    double r = nearbyint(v / q) * q; /* ties to even in the default rounding mode */
    if (fabs(r) > max)
        return v > 0 ? INFINITY : -INFINITY;
    return r;
}

double
kiln_scalar_round(double v, enum kiln_dtype dt)
{
    if (dt == KILN_DTYPE_F32)
        return (double)(float)v;
    if (dt == KILN_DTYPE_F16)
        return round_to(v, 10, -14, 65504);
    if (dt == KILN_DTYPE_BF16)
        return round_to(v, 7, -126, 3.3895313892515355e38);
    return v;
}

int64_t
kiln_scalar_floordiv(int64_t a, int64_t b)
{
    if (b == -1) /* a / -1 overflows for INT64_MIN: wrap instead */
        return (int64_t)(0 - (uint64_t)a);
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0)))
        q--;
    return q;
}

int64_t
kiln_scalar_floormod(int64_t a, int64_t b)
{
    if (b == -1)
        return 0;
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0)))
        m += b;
    return m;
}

double
kiln_scalar_fmin(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : fmin(a, b);
}

double
kiln_scalar_fmax(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : fmax(a, b);
}

double
kiln_scalar_sigmoid(double x)
{
    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

/* The float intrinsics (FLOOR .. SIGMOID) on x. */
static double
float_math(enum kiln_op op, double x)
{
    if (op == KILN_OP_FLOOR)
        return floor(x);
    if (op == KILN_OP_EXP)
        return exp(x);
    if (op == KILN_OP_LOG)
        return log(x);
    if (op == KILN_OP_SQRT)
        return sqrt(x);
    if (op == KILN_OP_RSQRT)
        return 1.0 / sqrt(x);
    if (op == KILN_OP_TANH)
        return tanh(x);
    if (op == KILN_OP_ERF)
        return erf(x);
    return kiln_scalar_sigmoid(x);
}

bool
kiln_scalar_eval(enum kiln_op op, enum kiln_dtype odt, enum kiln_dtype dt, union kiln_scalar a,
                 union kiln_scalar b, union kiln_scalar *r)
{
    bool     fl = kiln_dtype_is_float(odt), ok = true;
    double   x = a.f, y = b.f;
    int64_t  i = a.i, j = b.i;
    uint64_t ui = (uint64_t)i, uj = (uint64_t)j;
    r->i = 0;
    switch (op) {
    case KILN_OP_ADD:
        if (fl)
            r->f = x + y;
        else
            r->i = (int64_t)(ui + uj);
        break;
    case KILN_OP_SUB:
        if (fl)
            r->f = x - y;
        else
            r->i = (int64_t)(ui - uj);
        break;
    case KILN_OP_MUL:
        if (fl)
            r->f = x * y;
        else
            r->i = (int64_t)(ui * uj);
        break;
    case KILN_OP_DIV:
        ok = fl;
        r->f = fl ? x / y : 0;
        break;
    case KILN_OP_FLOORDIV:
        ok = !fl && j != 0;
        r->i = ok ? kiln_scalar_floordiv(i, j) : 0;
        break;
    case KILN_OP_FLOORMOD:
        ok = !fl && j != 0;
        r->i = ok ? kiln_scalar_floormod(i, j) : 0;
        break;
    case KILN_OP_MIN:
        if (fl)
            r->f = kiln_scalar_fmin(x, y);
        else
            r->i = i < j ? i : j;
        break;
    case KILN_OP_MAX:
        if (fl)
            r->f = kiln_scalar_fmax(x, y);
        else
            r->i = i > j ? i : j;
        break;
    case KILN_OP_POW:
        ok = fl;
        r->f = fl ? pow(x, y) : 0;
        break;
    case KILN_OP_EQ:
        r->i = fl ? x == y : i == j;
        break;
    case KILN_OP_NE:
        r->i = fl ? x != y : i != j;
        break;
    case KILN_OP_LT:
        r->i = fl ? x < y : i < j;
        break;
    case KILN_OP_LE:
        r->i = fl ? x <= y : i <= j;
        break;
    case KILN_OP_AND:
        ok = !fl;
        r->i = i && j;
        break;
    case KILN_OP_OR:
        ok = !fl;
        r->i = i || j;
        break;
    case KILN_OP_NOT:
        ok = !fl;
        r->i = !i;
        break;
    case KILN_OP_NEG:
        if (fl)
            r->f = -x;
        else
            r->i = (int64_t)(0 - ui);
        break;
    case KILN_OP_ABS:
        if (fl)
            r->f = fabs(x);
        else
            r->i = i < 0 ? (int64_t)(0 - ui) : i;
        break;
    case KILN_OP_ERF: /* the float intrinsics, alphabetically */
    case KILN_OP_EXP:
    case KILN_OP_FLOOR:
    case KILN_OP_LOG:
    case KILN_OP_RSQRT:
    case KILN_OP_SIGMOID:
    case KILN_OP_SQRT:
    case KILN_OP_TANH:
        ok = fl;
        r->f = fl ? float_math(op, x) : 0;
        break;
    case KILN_OP_CAST: /* not operators on values (cast: kiln_scalar_cast), alphabetically */
    case KILN_OP_COUNT:
    case KILN_OP_FLOAT:
    case KILN_OP_INT:
    case KILN_OP_LIST:
    case KILN_OP_LOAD:
    case KILN_OP_NIL:
    case KILN_OP_SELECT:
    case KILN_OP_VAR:
        ok = false;
        break;
    }
    if (!kiln_dtype_is_float(dt))
        r->i = kiln_scalar_wrap(r->i, dt);
    return ok;
}

union kiln_scalar
kiln_scalar_cast(enum kiln_dtype from, enum kiln_dtype to, union kiln_scalar a)
{
    bool              ff = kiln_dtype_is_float(from), tf = kiln_dtype_is_float(to);
    union kiln_scalar r;
    if (ff && tf)
        r.f = a.f;
    else if (ff)
        r.i = kiln_scalar_to_int(a.f, to);
    else if (tf)
        r.f = (double)a.i;
    else
        r.i = kiln_scalar_wrap(a.i, to);
    return r;
}
