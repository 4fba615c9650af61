/* ir/scalar.h -- part of ir.h (included there; include ir.h): the one definition of what
 * kiln's operators compute on single values. Integer wrap-around per dtype, floor division and
 * modulo, float -> int saturation, NaN-propagating min/max, sigmoid, and unary/binary operators
 * and casts on values held as double (floats) or int64 (integers and bool).
 *
 * The graph interpreter (interp.c), the loop-nest interpreter (interp_loop.c), the builders'
 * constant folding (expr.c) and the simplifier call these, and the LLVM backend emits code
 * with the same meaning (codegen/llvm_expr.c states where it must differ), so the oracles and
 * the folders cannot drift apart. They are static inline because the interpreters run them
 * once per element and per operator (an out-of-line call cost the graph interpreter a third of
 * its speed); rounding to a float dtype, which is not on that path, is in scalar.c.
 *
 * Semantics (docs/ir.md): floats compute in double; integers compute on int64 and wrap to their
 * width after every operation (+, -, * wrap as two's complement); floordiv/floormod round
 * toward -inf with the divisor's sign, and a divisor of -1 wraps (INT64_MIN / -1 is INT64_MIN)
 * instead of trapping; comparisons give 0/1; min/max of floats propagate NaN; float -> int
 * truncates toward zero and saturates, NaN gives 0; any -> bool is `!= 0` (NaN is true).
 * Unsigned dtypes hold their value (u64 its bit pattern, so u64 compares, divides, takes
 * min/max and converts to float unsigned). */
#ifndef KILN_SCALAR_H
#define KILN_SCALAR_H

#include <math.h>

union kiln_scalar {
    double  f;
    int64_t i;
};

static inline bool
kiln_dtype_is_float(enum kiln_dtype dt) /* f16, bf16, f32, f64 */
{
    return dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64 || dt == KILN_DTYPE_F16
           || dt == KILN_DTYPE_BF16;
}

static inline bool
kiln_dtype_is_unsigned(enum kiln_dtype dt) /* u8, u16, u32, u64 (not bool) */
{
    return dt == KILN_DTYPE_U8 || dt == KILN_DTYPE_U16 || dt == KILN_DTYPE_U32
           || dt == KILN_DTYPE_U64;
}

static inline bool
kiln_dtype_is_int(enum kiln_dtype dt) /* i8, i16, i32, i64, u8 .. u64 (not bool) */
{
    return dt == KILN_DTYPE_I8 || dt == KILN_DTYPE_I16 || dt == KILN_DTYPE_I32
           || dt == KILN_DTYPE_I64 || kiln_dtype_is_unsigned(dt);
}

/* Two's complement wrap-around to dt's width; bool: != 0. */
static inline int64_t
kiln_scalar_wrap(int64_t v, enum kiln_dtype dt)
{
    if (dt == KILN_DTYPE_BOOL)
        return v != 0;
    if (dt == KILN_DTYPE_I8)
        return (int8_t)(uint8_t)((uint64_t)v & 0xffu);
    if (dt == KILN_DTYPE_I16)
        return (int16_t)(uint16_t)((uint64_t)v & 0xffffu);
    if (dt == KILN_DTYPE_I32)
        return (int32_t)(uint32_t)((uint64_t)v & 0xffffffffu);
    if (dt == KILN_DTYPE_U8)
        return (int64_t)((uint64_t)v & 0xffu);
    if (dt == KILN_DTYPE_U16)
        return (int64_t)((uint64_t)v & 0xffffu);
    if (dt == KILN_DTYPE_U32)
        return (int64_t)((uint64_t)v & 0xffffffffu);
    return v; /* i64, u64 (held as its bit pattern) */
}

/* v rounded to the nearest value of float dtype dt (ties to even; f16/bf16 overflow to inf);
 * other dtypes: v. (scalar.c) */
double kiln_scalar_round(double v, enum kiln_dtype dt);
/* What the double-precision oracles store for v in a tensor of dtype dt: +-inf when dt is f32
 * and v is beyond the f32 range (compiled code overflows there), v rounded for f16 and bf16
 * (their rounding dwarfs any rewrite's), else v unrounded (the oracles stay exact for rewrites
 * that change f32 rounding). Used by the graph interpreter (ir/interp.c)
 * and the kernel search's evaluator (kas/eval.c), which must agree. (scalar.c) */
double kiln_scalar_held(double v, enum kiln_dtype dt);

/* Element i of an array of dtype dt at data (native byte order), as a double (i64 rounds to
 * the nearest double; bool is 0 or 1). (scalar.c) */
double kiln_scalar_load(enum kiln_dtype dt, const void *data, int64_t i);
/* Stores v into element i: float dtypes rounded by kiln_scalar_round (NaN and infinities kept),
 * integer and bool dtypes converted by kiln_scalar_to_int (saturating; NaN is 0). Returns the
 * value stored, as kiln_scalar_load reads it back. (scalar.c) */
double kiln_scalar_store(enum kiln_dtype dt, void *data, int64_t i, double v);
/* The value of f16 / bf16 bits h (IEEE binary16; the top half of a binary32). (scalar.c) */
double kiln_scalar_f16_value(uint16_t h);
double kiln_scalar_bf16_value(uint16_t h);

/* [lo, hi] of an integer or bool dtype; false (and the i64 range) for other dtypes. u64 values
 * are held as their bit patterns, so its range is the full i64 range too (true). */
static inline bool
kiln_dtype_range(enum kiln_dtype dt, int64_t *lo, int64_t *hi)
{
    if (dt == KILN_DTYPE_BOOL) {
        *lo = 0;
        *hi = 1;
    } else if (dt == KILN_DTYPE_I8) {
        *lo = INT8_MIN;
        *hi = INT8_MAX;
    } else if (dt == KILN_DTYPE_I16) {
        *lo = INT16_MIN;
        *hi = INT16_MAX;
    } else if (dt == KILN_DTYPE_I32) {
        *lo = INT32_MIN;
        *hi = INT32_MAX;
    } else if (dt == KILN_DTYPE_U8 || dt == KILN_DTYPE_U16 || dt == KILN_DTYPE_U32) {
        *lo = 0;
        *hi = dt == KILN_DTYPE_U8 ? UINT8_MAX : dt == KILN_DTYPE_U16 ? UINT16_MAX : UINT32_MAX;
    } else {
        *lo = INT64_MIN;
        *hi = INT64_MAX;
        return dt == KILN_DTYPE_I64 || dt == KILN_DTYPE_U64;
    }
    return true;
}

/* Float -> integer dtype: truncates toward zero and saturates to the dtype's range, NaN gives
 * 0 (llvm.fptosi.sat, llvm.fptoui.sat for unsigned dtypes; u64 gives its bit pattern); to
 * bool: x != 0 (NaN is true). */
static inline int64_t
kiln_scalar_to_int(double x, enum kiln_dtype dt)
{
    int64_t lo, hi;
    if (dt == KILN_DTYPE_BOOL)
        return x != 0;
    if (dt == KILN_DTYPE_U64) {
        if (isnan(x) || x <= 0)
            return 0;
        return x >= 18446744073709551616.0 ? -1 : (int64_t)(uint64_t)x;
    }
    kiln_dtype_range(dt, &lo, &hi); /* a float dtype saturates like i64 */
    if (isnan(x))
        return 0;
    if (x <= (double)lo)
        return lo;
    if (x >= (double)hi) /* (double)INT64_MAX is 2^63 */
        return hi;
    return (int64_t)x;
}

/* Integer or bool value i of dtype dt as the interpreters hold it in a double (u64 unsigned),
 * and back (wrapped to dt; a u64 beyond 2^53 rounds, like i64). */
static inline double
kiln_scalar_int_double(int64_t i, enum kiln_dtype dt)
{
    return dt == KILN_DTYPE_U64 ? (double)(uint64_t)i : (double)i;
}

static inline int64_t
kiln_scalar_double_int(double v, enum kiln_dtype dt)
{
    return kiln_scalar_wrap(
        kiln_scalar_to_int(v, dt == KILN_DTYPE_U64 ? KILN_DTYPE_U64 : KILN_DTYPE_I64), dt);
}

/* Rounds toward -inf; b != 0; b == -1 wraps. */
static inline int64_t
kiln_scalar_floordiv(int64_t a, int64_t b)
{
    if (b == -1) /* a / -1 overflows for INT64_MIN: wrap instead */
        return (int64_t)(0 - (uint64_t)a);
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* Takes the sign of b; b != 0. */
static inline int64_t
kiln_scalar_floormod(int64_t a, int64_t b)
{
    if (b == -1)
        return 0;
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0)))
        m += b;
    return m;
}

/* NaN if either operand is NaN. */
static inline double
kiln_scalar_fmin(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : fmin(a, b);
}

static inline double
kiln_scalar_fmax(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : fmax(a, b);
}

static inline double
kiln_scalar_sigmoid(double x)
{
    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

/* The trigonometric and hyperbolic functions SIN .. ATANH on x (libm's). */
static inline double
kiln_scalar_trig_(enum kiln_op op, double x)
{
    if (op == KILN_OP_SIN)
        return sin(x);
    if (op == KILN_OP_COS)
        return cos(x);
    if (op == KILN_OP_TAN)
        return tan(x);
    if (op == KILN_OP_ASIN)
        return asin(x);
    if (op == KILN_OP_ACOS)
        return acos(x);
    if (op == KILN_OP_ATAN)
        return atan(x);
    if (op == KILN_OP_SINH)
        return sinh(x);
    if (op == KILN_OP_COSH)
        return cosh(x);
    if (op == KILN_OP_ASINH)
        return asinh(x);
    if (op == KILN_OP_ACOSH)
        return acosh(x);
    return atanh(x);
}

/* The float intrinsics FLOOR .. SIGMOID and SIN .. ATANH on x (for kiln_scalar_eval). */
static inline double
kiln_scalar_math_(enum kiln_op op, double x)
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
    if (op == KILN_OP_SIGMOID)
        return kiln_scalar_sigmoid(x);
    return kiln_scalar_trig_(op, x);
}

/* Operator op (unary: b ignored) on operands of dtype odt, giving dtype dt (integer results
 * wrapped to dt; floats unrounded). False, with r zeroed or meaningless, when op is not an
 * operator on odt values (floordiv of floats, exp of an integer, select, ...) or an integer
 * floordiv/floormod divides by zero: the caller reports that. */
static inline bool
kiln_scalar_eval(enum kiln_op op, enum kiln_dtype odt, enum kiln_dtype dt, union kiln_scalar a,
                 union kiln_scalar b, union kiln_scalar *r)
{
    bool              fl = kiln_dtype_is_float(odt), ok = true;
    bool              u64 = odt == KILN_DTYPE_U64; /* bit patterns: unsigned order */
    double            x = a.f, y = b.f;
    int64_t           i = a.i, j = b.i;
    uint64_t          ui = (uint64_t)i, uj = (uint64_t)j;
    union kiln_scalar v = {.i = 0};
    switch (op) {
    case KILN_OP_ADD:
        if (fl)
            v.f = x + y;
        else
            v.i = (int64_t)(ui + uj);
        break;
    case KILN_OP_SUB:
        if (fl)
            v.f = x - y;
        else
            v.i = (int64_t)(ui - uj);
        break;
    case KILN_OP_MUL:
        if (fl)
            v.f = x * y;
        else
            v.i = (int64_t)(ui * uj);
        break;
    case KILN_OP_DIV:
        ok = fl;
        v.f = fl ? x / y : 0;
        break;
    case KILN_OP_FLOORDIV:
        ok = !fl && j != 0;
        v.i = !ok ? 0 : u64 ? (int64_t)(ui / uj) : kiln_scalar_floordiv(i, j);
        break;
    case KILN_OP_FLOORMOD:
        ok = !fl && j != 0;
        v.i = !ok ? 0 : u64 ? (int64_t)(ui % uj) : kiln_scalar_floormod(i, j);
        break;
    case KILN_OP_MIN:
        if (fl)
            v.f = kiln_scalar_fmin(x, y);
        else
            v.i = (u64 ? ui < uj : i < j) ? i : j;
        break;
    case KILN_OP_MAX:
        if (fl)
            v.f = kiln_scalar_fmax(x, y);
        else
            v.i = (u64 ? ui > uj : i > j) ? i : j;
        break;
    case KILN_OP_POW:
        ok = fl;
        v.f = fl ? pow(x, y) : 0;
        break;
    case KILN_OP_FMOD:
        ok = fl;
        v.f = fl ? fmod(x, y) : 0;
        break;
    case KILN_OP_EQ:
        v.i = fl ? x == y : i == j;
        break;
    case KILN_OP_NE:
        v.i = fl ? x != y : i != j;
        break;
    case KILN_OP_LT:
        v.i = fl ? x < y : u64 ? ui < uj : i < j;
        break;
    case KILN_OP_LE:
        v.i = fl ? x <= y : u64 ? ui <= uj : i <= j;
        break;
    case KILN_OP_AND:
        ok = !fl;
        v.i = i && j;
        break;
    case KILN_OP_OR:
        ok = !fl;
        v.i = i || j;
        break;
    case KILN_OP_NOT:
        ok = !fl;
        v.i = !i;
        break;
    case KILN_OP_NEG:
        if (fl)
            v.f = -x;
        else
            v.i = (int64_t)(0 - ui);
        break;
    case KILN_OP_ABS:
        if (fl)
            v.f = fabs(x);
        else
            v.i = i < 0 && !u64 ? (int64_t)(0 - ui) : i;
        break;
    case KILN_OP_ERF: /* the float intrinsics, alphabetically */
    case KILN_OP_EXP:
    case KILN_OP_FLOOR:
    case KILN_OP_LOG:
    case KILN_OP_RSQRT:
    case KILN_OP_SIGMOID:
    case KILN_OP_SQRT:
    case KILN_OP_TANH:
    case KILN_OP_ACOS: /* trigonometric and hyperbolic, alphabetically */
    case KILN_OP_ACOSH:
    case KILN_OP_ASIN:
    case KILN_OP_ASINH:
    case KILN_OP_ATAN:
    case KILN_OP_ATANH:
    case KILN_OP_COS:
    case KILN_OP_COSH:
    case KILN_OP_SIN:
    case KILN_OP_SINH:
    case KILN_OP_TAN:
        ok = fl;
        v.f = fl ? kiln_scalar_math_(op, x) : 0;
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
        v.i = kiln_scalar_wrap(v.i, dt);
    *r = v;
    return ok;
}

/* Cast from -> to: float -> float keeps the double (no rounding), float -> int as
 * kiln_scalar_to_int, int -> float exact in double (u64 read unsigned), int -> int wraps. */
static inline union kiln_scalar
kiln_scalar_cast(enum kiln_dtype from, enum kiln_dtype to, union kiln_scalar a)
{
    bool              ff = kiln_dtype_is_float(from), tf = kiln_dtype_is_float(to);
    union kiln_scalar r;
    if (ff && tf)
        r.f = a.f;
    else if (ff)
        r.i = kiln_scalar_to_int(a.f, to);
    else if (tf)
        r.f = from == KILN_DTYPE_U64 ? (double)(uint64_t)a.i : (double)a.i;
    else
        r.i = kiln_scalar_wrap(a.i, to);
    return r;
}

#endif /* KILN_SCALAR_H */
