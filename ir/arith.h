/* ir/arith.h -- integer arithmetic analysis of index expressions (ir/arith.c), included by
 * ir.h: intervals of expressions under variable ranges, affine forms (an expression as a
 * constant plus a sum of coefficient x atom), and strides (the coefficient of one variable).
 *
 * Every computation on bounds and coefficients is checked: what would overflow int64 gives up
 * (the bound becomes unbounded, the form is refused), nothing wraps. The parser's bounds check,
 * the simplifier, lowering and both code generators read these; no other file extracts
 * intervals or affine forms of its own. */
#ifndef KILN_ARITH_H
#define KILN_ARITH_H

/* ---- intervals ----
 * [lo, hi] with INT64_MIN standing for -inf (as lo) and INT64_MAX for +inf (as hi): the
 * saturating form. An operation whose bound would overflow makes that side unbounded, which is
 * always sound. */
struct kiln_ival {
    int64_t lo, hi;
};
#define KILN_IVAL_FULL ((struct kiln_ival){INT64_MIN, INT64_MAX})

static inline bool
kiln_ival_finite(struct kiln_ival v)
{
    return v.lo != INT64_MIN && v.hi != INT64_MAX;
}
struct kiln_ival kiln_ival_add(struct kiln_ival a, struct kiln_ival b);
struct kiln_ival kiln_ival_scale(struct kiln_ival a, int64_t k);
struct kiln_ival kiln_ival_mul(struct kiln_ival a, struct kiln_ival b);
struct kiln_ival kiln_ival_floordiv(struct kiln_ival a, struct kiln_ival b);
struct kiln_ival kiln_ival_floormod(struct kiln_ival a, struct kiln_ival b);
struct kiln_ival kiln_ival_dtype(enum kiln_dtype dt); /* full for i64 and non-integers */

/* How an interval analysis sees its environment: var gives the bound of a VAR node (its range,
 * or kiln_ival_dtype when it has none); sub gives the bound of an operand, so that a caller
 * can memoise (NULL: kiln_ival_bound, recursively, unmemoised). */
struct kiln_ival_env {
    const kiln_ctx *ctx;
    struct kiln_ival (*var)(void *ud, kiln_expr v);
    struct kiln_ival (*sub)(void *ud, kiln_expr e);
    void *ud;
};

/* Bounds of integer or bool expression e, from its node and its operands' bounds (through
 * env->sub): + - * // % min max abs neg by interval arithmetic (// and % by constants exactly),
 * comparisons and logic decided where the bounds allow, select of a decided condition its
 * branch, casts between integers; i8 / i32 nodes wrap, so they are bounded by their dtype's
 * range; everything else (floats, loads, i64 loads) by its dtype's range. */
struct kiln_ival kiln_ival_bound(const struct kiln_ival_env *env, kiln_expr e);

/* Exact interval of e, or false: plain interval arithmetic with no reasoning past it, for the
 * .kg bounds check (what it accepts is part of the language and must not change when the
 * simplifier learns more). Bounds are exact int64 values, INT64_MIN and INT64_MAX included;
 * an operand without an interval, or an operation that overflows, has none, except that an
 * operand of min or max without one spans its integer dtype (so a clamp bounds a float cast or
 * an i64 load). + - * min max abs neg exactly; // by an interval excluding 0; % by a positive
 * (negative) interval is [0, max-1] ([min+1, 0]) unless the dividend already lies in [0, min
 * divisor); comparisons and logic are [0, 1]; select is the union of its branches (its condition is
 * not read); casts from integers or bool keep the interval (refused when it does not fit i8 / i32);
 * loads have their dtype's range (none for i64). Operands are read through env->sub (NULL:
 * recursively) and env->var; a sub returning false means no interval. */
struct kiln_ival_exact_env {
    const kiln_ctx *ctx;
    bool (*var)(void *ud, kiln_expr v, struct kiln_ival *out);
    bool (*sub)(void *ud, kiln_expr e, struct kiln_ival *out);
    void *ud;
};
bool kiln_ival_exact(const struct kiln_ival_exact_env *env, kiln_expr e, struct kiln_ival *out);

/* ---- affine forms ----
 * scale * e = c + sum k_i * atom_i, reading the top layer of e: integer constants, ADD, SUB
 * and NEG of i64 operands, MUL of an i64 operand by a constant; every other node is an atom
 * (a variable, a load, floordiv, min, a product of two non-constants, ...). konst may read
 * further nodes as constants (NULL: INT nodes only). Each atom is passed to term with its
 * coefficient as it is met (an atom met twice is passed twice); *c accumulates the constant.
 * Returns false when a coefficient or the constant overflows int64 or term returns false;
 * *c and what term received are then partial. */
struct kiln_affine_fn {
    bool (*konst)(void *ud, kiln_expr e, int64_t *v);
    bool (*term)(void *ud, kiln_expr atom, int64_t k);
    void *ud;
};
bool kiln_affine(const kiln_ctx *ctx, kiln_expr e, int64_t scale, int64_t *c,
                 const struct kiln_affine_fn *fn);

/* Whether expression e reads variable v. */
bool kiln_expr_uses(const kiln_ctx *ctx, kiln_expr e, kiln_expr v);

/* The stride of e along variable v: *k such that e = k * v + (terms free of v), reading i64
 * ADD, SUB, NEG and MUL by a constant as kiln_affine does (subexpressions free of v are not
 * looked into). False when v occurs in any other way (under floordiv, in a load, in a product
 * of non-constants) or a coefficient overflows; with limit > 0 also when a coefficient or a
 * constant factor on the way reaches limit in magnitude. */
bool kiln_affine_stride(const kiln_ctx *ctx, kiln_expr e, kiln_expr v, int64_t limit, int64_t *k);

/* ---- monotonicity ----
 * How e varies with variable v: constant (v does not occur), non-decreasing, non-increasing, or
 * unknown, reading + - min max, * by a constant, // by a positive constant, neg and casts (a
 * product of two non-constants is constant only when neither mentions v). */
enum kiln_mono { KILN_MONO_CONST, KILN_MONO_INC, KILN_MONO_DEC, KILN_MONO_UNKNOWN };
enum kiln_mono kiln_expr_monotone(const kiln_ctx *ctx, kiln_expr e, kiln_expr v);

#endif /* KILN_ARITH_H */
