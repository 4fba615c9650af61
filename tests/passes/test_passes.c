/* tests/passes/test_passes.c -- the loop-nest passes of passes/: the arithmetic simplifier
 * (exact expected forms, then properties on random expressions in the spirit of Halide's
 * simplifier fuzzer: evaluation-equivalence inside the ranges, sound bounds, idempotence and
 * "no change => same id"), storage flattening and loop partitioning (printed results for small
 * nests, semantics checked with the loop-nest interpreter kiln_func_eval on random inputs, and
 * an IR walk proving the hot loop of padded stencils and convolutions has no select or if).
 * Random tests print the seed and both expressions (or functions) on failure. */
#include "../../passes/passes.h"
#include "../harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers: variables, printing ---- */

static kiln_expr
V(kiln_ctx *ctx, const char *name)
{
    return kiln_var_named(ctx, kiln_sym_cstr(ctx, name), KILN_DTYPE_I64);
}

static kiln_expr
C(kiln_ctx *ctx, int64_t v)
{
    return kiln_idx(ctx, v);
}

struct text {
    char   s[4096];
    size_t n;
};

static void tput(struct text *t, const char *fmt, ...) KILN_PRINTF(2, 3);

static void
tput(struct text *t, const char *fmt, ...)
{
    va_list ap;
    if (t->n >= sizeof t->s - 1)
        return;
    va_start(ap, fmt);
    int k = vsnprintf(t->s + t->n, sizeof t->s - t->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        t->n += (size_t)k < sizeof t->s - t->n ? (size_t)k : sizeof t->s - t->n - 1;
}

/* Prints an expression as a tree (test expressions are small). */
static void
pexpr(kiln_ctx *ctx, kiln_expr e, struct text *t)
{
    const struct kiln_node  *n = kiln_node_get(ctx, e);
    static const char *const sym[KILN_OP_COUNT] = {
        [KILN_OP_ADD] = "+",       [KILN_OP_SUB] = "-",      [KILN_OP_MUL] = "*",
        [KILN_OP_FLOORDIV] = "//", [KILN_OP_FLOORMOD] = "%", [KILN_OP_EQ] = "==",
        [KILN_OP_NE] = "!=",       [KILN_OP_LT] = "<",       [KILN_OP_LE] = "<=",
        [KILN_OP_AND] = "&&",      [KILN_OP_OR] = "||",      [KILN_OP_DIV] = "/",
    };
    if (!e.id) {
        tput(t, "nil");
    } else if (n->op == KILN_OP_INT) {
        if (n->dtype == KILN_DTYPE_BOOL)
            tput(t, "%s", n->imm ? "true" : "false");
        else
            tput(t, "%lld", (long long)n->imm);
    } else if (n->op == KILN_OP_FLOAT) {
        tput(t, "%g", kiln_expr_float_value(ctx, e));
    } else if (n->op == KILN_OP_VAR) {
        if (kiln_var_kind_of(n->imm) == KILN_VAR_NAMED)
            tput(t, "%s", kiln_sym_str(ctx, kiln_var_index(n->imm)));
        else
            tput(t, "%s%u", kiln_var_kind_of(n->imm) == KILN_VAR_AXIS ? "ax" : "rv",
                 kiln_var_index(n->imm));
    } else if (n->op == KILN_OP_LOAD) {
        tput(t, "b%lld[", (long long)n->imm);
        for (uint32_t i = 0; i < kiln_load_nidx(ctx, e); i++) {
            tput(t, i ? ", " : "");
            pexpr(ctx, kiln_load_idx(ctx, e, i), t);
        }
        tput(t, "]");
    } else if (sym[n->op]) {
        kiln_expr a = {n->kid[0]}, b = {n->kid[1]};
        tput(t, "(");
        pexpr(ctx, a, t);
        tput(t, " %s ", sym[n->op]);
        pexpr(ctx, b, t);
        tput(t, ")");
    } else {
        tput(t, "%s(", kiln_op_name[n->op]);
        for (int i = 0; i < kiln_op_arity[n->op]; i++) {
            tput(t, i ? ", " : "");
            pexpr(ctx, (kiln_expr){kiln_node_get(ctx, e)->kid[i]}, t);
        }
        tput(t, ")");
    }
}

static const char *
show(kiln_ctx *ctx, kiln_expr e, struct text *t)
{
    t->n = 0;
    t->s[0] = 0;
    pexpr(ctx, e, t);
    return t->s;
}

/* simplify(e) must be `want` (same id) and a fixed point. */
static void
check_simp(kiln_ctx *ctx, int line, kiln_expr e, kiln_expr want, const struct kiln_var_range *r,
           uint32_t nr)
{
    struct text a, b, c;
    kiln_expr   got = kiln_simplify_expr(ctx, e, r, nr);
    if (got.id != want.id) {
        harness_fail(__FILE__, line, "simplify %s\n  want: %s\n  got:  %s", show(ctx, e, &a),
                     show(ctx, want, &b), show(ctx, got, &c));
        return;
    }
    kiln_expr again = kiln_simplify_expr(ctx, got, r, nr);
    if (again.id != got.id)
        harness_fail(__FILE__, line, "not idempotent: %s -> %s", show(ctx, got, &a),
                     show(ctx, again, &b));
}
#define SIMP(e, want, r, nr) check_simp(ctx, __LINE__, e, want, r, nr)

/* ---- simplifier: exact forms ---- */

static void
test_simplify_affine(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    kiln_expr i = V(ctx, "i"), j = V(ctx, "j"), k = V(ctx, "k");
    SIMP(kiln_sub(ctx, kiln_add(ctx, i, j), i), j, NULL, 0);
    SIMP(kiln_add(ctx, kiln_mul(ctx, i, C(ctx, 2)), kiln_mul(ctx, C(ctx, 3), i)),
         kiln_mul(ctx, i, C(ctx, 5)), NULL, 0);
    SIMP(kiln_add(ctx, kiln_add(ctx, i, C(ctx, 3)), kiln_sub(ctx, j, C(ctx, 3))),
         kiln_add(ctx, i, j), NULL, 0);
    SIMP(kiln_sub(ctx, kiln_mul(ctx, kiln_add(ctx, i, C(ctx, 2)), C(ctx, 3)), C(ctx, 6)),
         kiln_mul(ctx, i, C(ctx, 3)), NULL, 0);
    /* (i - j) + (j - k) + 4 */
    SIMP(kiln_add(ctx, kiln_add(ctx, kiln_sub(ctx, i, j), kiln_sub(ctx, j, k)), C(ctx, 4)),
         kiln_add(ctx, kiln_sub(ctx, i, k), C(ctx, 4)), NULL, 0);
    /* 5 - i stays a subtraction from the constant; -i alone is a negation */
    SIMP(kiln_sub(ctx, C(ctx, 5), i), kiln_sub(ctx, C(ctx, 5), i), NULL, 0);
    SIMP(kiln_sub(ctx, kiln_sub(ctx, j, i), j), kiln_unary(ctx, KILN_OP_NEG, i), NULL, 0);
    /* the order terms were written in does not matter */
    kiln_expr s1 = kiln_add(ctx, kiln_add(ctx, i, j), k),
              s2 = kiln_add(ctx, kiln_add(ctx, k, i), j);
    CHECK_EQ_INT(kiln_simplify_expr(ctx, s1, NULL, 0).id, kiln_simplify_expr(ctx, s2, NULL, 0).id);
    /* products: constants distribute, non-affine products keep their content outside */
    SIMP(kiln_mul(ctx, kiln_add(ctx, i, C(ctx, 1)), C(ctx, 4)),
         kiln_add(ctx, kiln_mul(ctx, i, C(ctx, 4)), C(ctx, 4)), NULL, 0);
    SIMP(kiln_mul(ctx, kiln_mul(ctx, i, C(ctx, 2)), kiln_mul(ctx, j, C(ctx, 3))),
         kiln_mul(ctx, kiln_mul(ctx, i, j), C(ctx, 6)), NULL, 0);
    /* a variable with one possible value is that value */
    struct kiln_var_range one = {i, 7, 7};
    SIMP(kiln_add(ctx, i, j), kiln_add(ctx, j, C(ctx, 7)), &one, 1);
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

static void
test_simplify_divmod(void)
{
    kiln_ctx             *ctx = kiln_ctx_new(NULL);
    kiln_expr             i = V(ctx, "i"), j = V(ctx, "j"), x = V(ctx, "x");
    struct kiln_var_range r[] = {{j, 0, 7}, {x, 0, 15}};
    kiln_expr             ij = kiln_add(ctx, kiln_mul(ctx, i, C(ctx, 8)), j);
    SIMP(kiln_floordiv(ctx, ij, C(ctx, 8)), i, r, 2);
    SIMP(kiln_floormod(ctx, ij, C(ctx, 8)), j, r, 2);
    /* without j's range only the multiple leaves */
    SIMP(kiln_floordiv(ctx, ij, C(ctx, 8)), kiln_add(ctx, i, kiln_floordiv(ctx, j, C(ctx, 8))),
         NULL, 0);
    SIMP(kiln_floormod(ctx, ij, C(ctx, 8)), kiln_floormod(ctx, j, C(ctx, 8)), NULL, 0);
    /* x // 16 -> 0 and x % 16 -> x for 0 <= x < 16 */
    SIMP(kiln_floordiv(ctx, x, C(ctx, 16)), C(ctx, 0), r, 2);
    SIMP(kiln_floormod(ctx, x, C(ctx, 16)), x, r, 2);
    SIMP(kiln_floordiv(ctx, kiln_add(ctx, x, C(ctx, 16)), C(ctx, 16)), C(ctx, 1), r, 2);
    /* (x // 4) // 2 -> x // 8, (x // 4 + 1) // 2 -> (x + 4) // 8 */
    SIMP(kiln_floordiv(ctx, kiln_floordiv(ctx, i, C(ctx, 4)), C(ctx, 2)),
         kiln_floordiv(ctx, i, C(ctx, 8)), NULL, 0);
    SIMP(kiln_floordiv(ctx, kiln_add(ctx, kiln_floordiv(ctx, i, C(ctx, 4)), C(ctx, 1)), C(ctx, 2)),
         kiln_floordiv(ctx, kiln_add(ctx, i, C(ctx, 4)), C(ctx, 8)), NULL, 0);
    /* common factors: (4i + 2) // 8 -> i // 2, (4i + 2) % 8 -> (i % 2)*4 + 2 */
    kiln_expr i42 = kiln_add(ctx, kiln_mul(ctx, i, C(ctx, 4)), C(ctx, 2));
    SIMP(kiln_floordiv(ctx, i42, C(ctx, 8)), kiln_floordiv(ctx, i, C(ctx, 2)), NULL, 0);
    SIMP(kiln_floormod(ctx, i42, C(ctx, 8)),
         kiln_add(ctx, kiln_mul(ctx, kiln_floormod(ctx, i, C(ctx, 2)), C(ctx, 4)), C(ctx, 2)), NULL,
         0);
    /* (i*4 + j') // 8 with j' in [0, 4) drops j' */
    struct kiln_var_range r4 = {j, 0, 3};
    SIMP(kiln_floordiv(ctx, kiln_add(ctx, kiln_mul(ctx, i, C(ctx, 4)), j), C(ctx, 8)),
         kiln_floordiv(ctx, i, C(ctx, 2)), &r4, 1);
    /* x % c when the coefficients are multiples of c; (x % 8) % 4 -> x % 4 */
    SIMP(kiln_floormod(ctx, kiln_add(ctx, kiln_mul(ctx, i, C(ctx, 6)), kiln_mul(ctx, x, C(ctx, 3))),
                       C(ctx, 3)),
         C(ctx, 0), NULL, 0);
    SIMP(kiln_floormod(ctx, kiln_floormod(ctx, i, C(ctx, 8)), C(ctx, 4)),
         kiln_floormod(ctx, i, C(ctx, 4)), NULL, 0);
    /* (f // 12)*12 + ((f % 12) // 4)*4 + f % 4 -> f (a split of a fused index, undone) */
    kiln_expr f = V(ctx, "f");
    SIMP(
        kiln_add(
            ctx,
            kiln_add(ctx, kiln_mul(ctx, kiln_floordiv(ctx, f, C(ctx, 12)), C(ctx, 12)),
                     kiln_mul(ctx, kiln_floordiv(ctx, kiln_floormod(ctx, f, C(ctx, 12)), C(ctx, 4)),
                              C(ctx, 4))),
            kiln_floormod(ctx, f, C(ctx, 4))),
        f, NULL, 0);
    /* x - (x // 5)*5 -> x % 5, (x + 3) - ((x + 3) // 2)*2 -> (x + 1) % 2 */
    SIMP(kiln_sub(ctx, i, kiln_mul(ctx, kiln_floordiv(ctx, i, C(ctx, 5)), C(ctx, 5))),
         kiln_floormod(ctx, i, C(ctx, 5)), NULL, 0);
    kiln_expr i3 = kiln_add(ctx, i, C(ctx, 3));
    SIMP(kiln_sub(ctx, i3, kiln_mul(ctx, kiln_floordiv(ctx, i3, C(ctx, 2)), C(ctx, 2))),
         kiln_floormod(ctx, kiln_add(ctx, i, C(ctx, 1)), C(ctx, 2)), NULL, 0);
    /* (i // 4) * 4 + i % 4 -> i */
    SIMP(kiln_add(ctx, kiln_mul(ctx, kiln_floordiv(ctx, i, C(ctx, 4)), C(ctx, 4)),
                  kiln_floormod(ctx, i, C(ctx, 4))),
         i, NULL, 0);
    /* negative divisors become positive ones: i // -2 = (-i) // 2, i % -2 = -((-i) % 2) */
    kiln_expr ni = kiln_unary(ctx, KILN_OP_NEG, i);
    SIMP(kiln_floordiv(ctx, i, C(ctx, -2)), kiln_floordiv(ctx, ni, C(ctx, 2)), NULL, 0);
    SIMP(kiln_floormod(ctx, i, C(ctx, -2)),
         kiln_unary(ctx, KILN_OP_NEG, kiln_floormod(ctx, ni, C(ctx, 2))), NULL, 0);
    /* a symbolic divisor: 0 <= x < j' decides both */
    struct kiln_var_range r5[] = {{x, 0, 15}, {j, 16, 40}};
    SIMP(kiln_floordiv(ctx, x, j), C(ctx, 0), r5, 2);
    SIMP(kiln_floormod(ctx, x, j), x, r5, 2);
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

static void
test_simplify_compare(void)
{
    kiln_ctx             *ctx = kiln_ctx_new(NULL);
    kiln_expr             i = V(ctx, "i"), j = V(ctx, "j"), h = V(ctx, "h"), kh = V(ctx, "kh");
    kiln_expr             T = kiln_bool(ctx, true), F = kiln_bool(ctx, false);
    struct kiln_var_range r[] = {{i, 0, 15}, {j, 0, 3}};
    SIMP(kiln_lt(ctx, i, C(ctx, 16)), T, r, 2);
    SIMP(kiln_lt(ctx, i, C(ctx, 15)), kiln_lt(ctx, i, C(ctx, 15)), r, 2);
    SIMP(kiln_le(ctx, C(ctx, 0), i), T, r, 2);
    SIMP(kiln_lt(ctx, kiln_add(ctx, i, j), C(ctx, 19)), T, r, 2);
    SIMP(kiln_lt(ctx, kiln_add(ctx, i, j), C(ctx, 18)),
         kiln_lt(ctx, kiln_add(ctx, i, j), C(ctx, 18)), r, 2);
    /* canonical forms: <= becomes <, common factors divide out, constants move right */
    SIMP(kiln_le(ctx, i, C(ctx, 5)), kiln_lt(ctx, i, C(ctx, 6)), NULL, 0);
    SIMP(kiln_lt(ctx, kiln_mul(ctx, i, C(ctx, 2)), C(ctx, 7)), kiln_lt(ctx, i, C(ctx, 4)), NULL, 0);
    SIMP(kiln_lt(ctx, kiln_mul(ctx, i, C(ctx, 2)), C(ctx, -5)), kiln_lt(ctx, i, C(ctx, -2)), NULL,
         0);
    SIMP(kiln_lt(ctx, kiln_sub(ctx, i, j), C(ctx, 3)), kiln_lt(ctx, i, kiln_add(ctx, j, C(ctx, 3))),
         NULL, 0);
    /* the padding test 0 <= h*2 + kh - 1 */
    kiln_expr pos = kiln_sub(ctx, kiln_add(ctx, kiln_mul(ctx, h, C(ctx, 2)), kh), C(ctx, 1));
    SIMP(kiln_le(ctx, C(ctx, 0), pos),
         kiln_lt(ctx, C(ctx, 0), kiln_add(ctx, kiln_mul(ctx, h, C(ctx, 2)), kh)), NULL, 0);
    struct kiln_var_range rp[] = {{h, 1, 7}, {kh, 0, 2}};
    SIMP(kiln_le(ctx, C(ctx, 0), pos), T, rp, 2);
    SIMP(kiln_lt(ctx, pos, C(ctx, 16)), T, rp, 2);
    /* equality */
    SIMP(kiln_binary(ctx, KILN_OP_EQ, kiln_add(ctx, i, C(ctx, 1)), kiln_add(ctx, j, C(ctx, 1))),
         kiln_binary(ctx, KILN_OP_EQ, i, j), NULL, 0);
    SIMP(kiln_binary(ctx, KILN_OP_EQ, kiln_mul(ctx, i, C(ctx, 2)), C(ctx, 3)), F, NULL, 0);
    SIMP(kiln_binary(ctx, KILN_OP_NE, kiln_mul(ctx, i, C(ctx, 2)), C(ctx, 3)), T, NULL, 0);
    SIMP(kiln_binary(ctx, KILN_OP_EQ, i, C(ctx, 20)), F, r, 2);
    /* logic and selects with decided parts */
    kiln_expr jc = kiln_lt(ctx, j, C(ctx, 2));
    SIMP(kiln_and(ctx, kiln_lt(ctx, i, C(ctx, 16)), jc), jc, r, 2);
    SIMP(kiln_binary(ctx, KILN_OP_OR, kiln_lt(ctx, i, C(ctx, 16)), jc), T, r, 2);
    SIMP(kiln_unary(ctx, KILN_OP_NOT, kiln_lt(ctx, i, j)), kiln_le(ctx, j, i), NULL, 0);
    kiln_expr x = kiln_float(ctx, 1.5, KILN_DTYPE_F32), y = kiln_float(ctx, 2.5, KILN_DTYPE_F32);
    SIMP(kiln_select(ctx, kiln_lt(ctx, i, C(ctx, 16)), x, y), x, r, 2);
    SIMP(kiln_select(ctx, kiln_lt(ctx, C(ctx, 20), i), i, j), j, r, 2);
    /* min / max decided by bounds */
    SIMP(kiln_min(ctx, i, kiln_add(ctx, j, C(ctx, 20))), i, r, 2);
    SIMP(kiln_max(ctx, kiln_add(ctx, i, C(ctx, 1)), i), kiln_add(ctx, i, C(ctx, 1)), NULL, 0);
    SIMP(kiln_min(ctx, kiln_min(ctx, h, C(ctx, 5)), C(ctx, 3)), kiln_min(ctx, h, C(ctx, 3)), NULL,
         0);
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

static void
test_simplify_floats_and_identity(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    kiln_expr i = V(ctx, "i"), j = V(ctx, "j");
    kiln_expr a = kiln_load(ctx, 0, KILN_DTYPE_F32, 1, &i),
              b = kiln_load(ctx, 1, KILN_DTYPE_F32, 1, &j);
    /* float arithmetic is not reassociated: (a + b) - a stays */
    kiln_expr fe = kiln_sub(ctx, kiln_add(ctx, a, b), a);
    SIMP(fe, fe, NULL, 0);
    /* but the indices of its loads are simplified */
    kiln_expr idx = kiln_sub(ctx, kiln_add(ctx, i, j), j);
    kiln_expr ld = kiln_load(ctx, 0, KILN_DTYPE_F32, 1, &idx);
    SIMP(kiln_mul(ctx, ld, b), kiln_mul(ctx, a, b), NULL, 0);
    /* already canonical: same id and no node created */
    kiln_expr canon = kiln_add(ctx, kiln_mul(ctx, i, C(ctx, 4)), j);
    uint32_t  before = ctx->nnode;
    CHECK_EQ_INT(canon.id, kiln_simplify_expr(ctx, canon, NULL, 0).id);
    CHECK_EQ_INT(before, ctx->nnode);
    CHECK_EQ_INT(i.id, kiln_simplify_expr(ctx, i, NULL, 0).id);
    /* i32 arithmetic wraps: no affine reasoning, only the builders */
    kiln_expr n = kiln_var_named(ctx, kiln_sym_cstr(ctx, "n"), KILN_DTYPE_I32);
    kiln_expr ne = kiln_sub(ctx, kiln_add(ctx, n, kiln_int(ctx, 1, KILN_DTYPE_I32)), n);
    SIMP(ne, ne, NULL, 0);
    /* coefficients that overflow keep the expression opaque, correctly */
    kiln_expr big =
        kiln_add(ctx, kiln_mul(ctx, i, C(ctx, INT64_MAX)), kiln_mul(ctx, i, C(ctx, INT64_MAX)));
    kiln_expr sb = kiln_simplify_expr(ctx, big, NULL, 0);
    CHECK(sb.id != 0);
    CHECK_EQ_INT(sb.id, kiln_simplify_expr(ctx, sb, NULL, 0).id);
    /* bounds */
    int64_t               lo, hi;
    struct kiln_var_range r[] = {{i, 0, 3}, {j, 0, 7}};
    CHECK(kiln_expr_bounds(ctx, kiln_add(ctx, kiln_mul(ctx, i, C(ctx, 8)), j), r, 2, &lo, &hi));
    CHECK_EQ_INT(0, lo);
    CHECK_EQ_INT(31, hi);
    CHECK(kiln_expr_bounds(ctx, kiln_sub(ctx, kiln_add(ctx, i, j), i), r, 2, &lo, &hi));
    CHECK_EQ_INT(0, lo); /* correlated terms cancel first */
    CHECK_EQ_INT(7, hi);
    CHECK(!kiln_expr_bounds(ctx, kiln_add(ctx, i, V(ctx, "u")), r, 2, &lo, &hi));
    CHECK_EQ_INT(INT64_MIN, lo);
    CHECK(kiln_expr_bounds(ctx, kiln_floormod(ctx, V(ctx, "u"), C(ctx, 5)), NULL, 0, &lo, &hi));
    CHECK_EQ_INT(0, lo);
    CHECK_EQ_INT(4, hi);
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

/* ---- simplifier: random expressions ---- */

#define NVAR 4

struct gen {
    kiln_ctx       *ctx;
    struct kiln_rng r;
    kiln_expr       var[NVAR];
};

static int64_t
rnd(struct gen *G, int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)kiln_rng_below(&G->r, (uint64_t)(hi - lo + 1));
}

static kiln_expr gen_bool(struct gen *G, int depth);

static int64_t
gen_divisor(struct gen *G)
{
    int64_t d = rnd(G, 1, 9);
    return rnd(G, 0, 3) == 0 ? -d : d;
}

static kiln_expr
gen_int(struct gen *G, int depth)
{
    kiln_ctx *ctx = G->ctx;
    if (depth <= 0 || rnd(G, 0, 5) == 0)
        return rnd(G, 0, 4) < 3 ? G->var[rnd(G, 0, NVAR - 1)] : C(ctx, rnd(G, -10, 10));
    switch (rnd(G, 0, 15)) {
    case 14: { /* quotient and remainder of one value: (t // c) * c*k + (t or t % m) % c * k */
        kiln_expr t = gen_int(G, depth - 1), u = t;
        int64_t   c = rnd(G, 1, 6), k = rnd(G, -2, 2);
        if (rnd(G, 0, 1))
            u = kiln_floormod(ctx, t, C(ctx, c * rnd(G, 1, 3)));
        return kiln_add(ctx, kiln_mul(ctx, kiln_floordiv(ctx, t, C(ctx, c)), C(ctx, c * k)),
                        kiln_mul(ctx, kiln_floormod(ctx, u, C(ctx, c)), C(ctx, k)));
    }
    case 15: { /* remainder written out: t*k - (t // c) * c*k */
        kiln_expr t = gen_int(G, depth - 1);
        int64_t   c = rnd(G, 1, 6), k = rnd(G, 1, 3);
        return kiln_sub(ctx, kiln_mul(ctx, t, C(ctx, k)),
                        kiln_mul(ctx, kiln_floordiv(ctx, t, C(ctx, c)), C(ctx, c * k)));
    }
    case 0:
    case 1:
        return kiln_add(ctx, gen_int(G, depth - 1), gen_int(G, depth - 1));
    case 2:
        return kiln_sub(ctx, gen_int(G, depth - 1), gen_int(G, depth - 1));
    case 3:
        return kiln_mul(ctx, gen_int(G, depth - 1), C(ctx, rnd(G, -6, 6)));
    case 4:
        return kiln_mul(ctx, gen_int(G, depth - 1), gen_int(G, 0));
    case 5:
    case 6:
        return kiln_floordiv(ctx, gen_int(G, depth - 1), C(ctx, gen_divisor(G)));
    case 7:
    case 8:
        return kiln_floormod(ctx, gen_int(G, depth - 1), C(ctx, gen_divisor(G)));
    case 9:
        return kiln_min(ctx, gen_int(G, depth - 1), gen_int(G, depth - 1));
    case 10:
        return kiln_max(ctx, gen_int(G, depth - 1), gen_int(G, depth - 1));
    case 11:
        return kiln_select(ctx, gen_bool(G, depth - 1), gen_int(G, depth - 1),
                           gen_int(G, depth - 1));
    case 12: { /* a symbolic divisor that is never 0 */
        kiln_expr d = kiln_max(ctx, gen_int(G, 1), C(ctx, 1));
        return kiln_binary(ctx, rnd(G, 0, 1) ? KILN_OP_FLOORDIV : KILN_OP_FLOORMOD,
                           gen_int(G, depth - 1), d);
    }
    default:
        return kiln_unary(ctx, rnd(G, 0, 1) ? KILN_OP_NEG : KILN_OP_ABS, gen_int(G, depth - 1));
    }
}

static kiln_expr
gen_bool(struct gen *G, int depth)
{
    kiln_ctx *ctx = G->ctx;
    int       c = depth <= 0 ? 0 : (int)rnd(G, 0, 5);
    if (c <= 2) {
        static const enum kiln_op cmp[] = {KILN_OP_LT, KILN_OP_LE, KILN_OP_EQ, KILN_OP_NE};
        return kiln_binary(ctx, cmp[rnd(G, 0, 3)], gen_int(G, depth - 1), gen_int(G, depth - 1));
    }
    if (c == 3)
        return kiln_unary(ctx, KILN_OP_NOT, gen_bool(G, depth - 1));
    return kiln_binary(ctx, c == 4 ? KILN_OP_AND : KILN_OP_OR, gen_bool(G, depth - 1),
                       gen_bool(G, depth - 1));
}

struct env {
    kiln_expr var[NVAR];
    int64_t   val[NVAR];
};

static int64_t
fdiv_ref(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

#define EV_LIMIT ((int64_t)1 << 40)

/* Reference evaluation on int64; false when a value leaves +-2^40 (the simplifier assumes no
 * overflow) or on division by zero. Selects, && and || are lazy. */
static bool
ev(kiln_ctx *ctx, kiln_expr e, const struct env *en, int64_t *out)
{
    const struct kiln_node n = *kiln_node_get(ctx, e);
    kiln_expr              ka = {n.kid[0]}, kb = {n.kid[1]};
    int64_t                a = 0, b = 0, r;
    enum kiln_op           op = (enum kiln_op)n.op;
    if (op == KILN_OP_INT) {
        *out = n.imm;
        return true;
    }
    if (op == KILN_OP_VAR) {
        for (int i = 0; i < NVAR; i++)
            if (en->var[i].id == e.id) {
                *out = en->val[i];
                return true;
            }
        return false;
    }
    if (op == KILN_OP_SELECT) {
        if (!ev(ctx, ka, en, &a))
            return false;
        return ev(ctx, (kiln_expr){n.kid[a ? 1 : 2]}, en, out);
    }
    if (op == KILN_OP_AND || op == KILN_OP_OR) {
        if (!ev(ctx, ka, en, &a))
            return false;
        if (op == KILN_OP_AND ? !a : a) {
            *out = a;
            return true;
        }
        return ev(ctx, kb, en, out);
    }
    if (!ev(ctx, ka, en, &a) || (kiln_op_arity[op] > 1 && !ev(ctx, kb, en, &b)))
        return false;
    if (op == KILN_OP_ADD)
        r = a + b;
    else if (op == KILN_OP_SUB)
        r = a - b;
    else if (op == KILN_OP_MUL)
        r = a * b;
    else if (op == KILN_OP_NEG)
        r = -a;
    else if (op == KILN_OP_ABS)
        r = a < 0 ? -a : a;
    else if (op == KILN_OP_FLOORDIV || op == KILN_OP_FLOORMOD) {
        if (b == 0)
            return false;
        r = fdiv_ref(a, b);
        if (op == KILN_OP_FLOORMOD)
            r = a - r * b;
    } else if (op == KILN_OP_MIN)
        r = a < b ? a : b;
    else if (op == KILN_OP_MAX)
        r = a > b ? a : b;
    else if (op == KILN_OP_EQ)
        r = a == b;
    else if (op == KILN_OP_NE)
        r = a != b;
    else if (op == KILN_OP_LT)
        r = a < b;
    else if (op == KILN_OP_LE)
        r = a <= b;
    else if (op == KILN_OP_NOT)
        r = !a;
    else
        return false;
    if (r > EV_LIMIT || r < -EV_LIMIT)
        return false;
    *out = r;
    return true;
}

static bool
random_expr_case(uint64_t seed, uint64_t *checked)
{
    kiln_ctx             *ctx = kiln_ctx_new(NULL);
    struct gen            G = {.ctx = ctx, .r = kiln_rng_new(seed)};
    struct kiln_var_range rg[NVAR];
    uint32_t              nr = 0;
    struct env            en;
    static const char    *names[NVAR - 1] = {"x", "y", "z"};
    for (int v = 0; v < NVAR; v++) {
        G.var[v] = v < NVAR - 1 ? V(ctx, names[v]) : kiln_axis(ctx, 0);
        en.var[v] = G.var[v];
        if (rnd(&G, 0, 4) > 0) { /* bounded, sometimes to one value */
            int64_t lo = rnd(&G, -20, 20);
            rg[nr++] = (struct kiln_var_range){G.var[v], lo, lo + rnd(&G, 0, 1) * rnd(&G, 0, 30)};
        }
    }
    bool        is_bool = rnd(&G, 0, 4) == 0;
    kiln_expr   e = is_bool ? gen_bool(&G, (int)rnd(&G, 1, 5)) : gen_int(&G, (int)rnd(&G, 1, 6));
    kiln_expr   s = kiln_simplify_expr(ctx, e, rg, nr);
    kiln_expr   s0 = kiln_simplify_expr(ctx, e, NULL, 0);
    bool        ok = e.id && s.id && s0.id && kiln_ok(ctx);
    struct text ta, tb;
    if (!ok) {
        printf("seed %llu: simplification failed: %s\n  %s\n", (unsigned long long)seed,
               kiln_ok(ctx) ? "nil" : kiln_ctx_error(ctx)->msg, show(ctx, e, &ta));
        kiln_ctx_free(ctx);
        return false;
    }
    /* idempotence and no-change-same-id: simplifying a simplified expression returns it and
     * interns nothing */
    uint32_t  nnode = ctx->nnode;
    kiln_expr s2 = kiln_simplify_expr(ctx, s, rg, nr);
    if (s2.id == s.id && ctx->nnode != nnode) {
        printf("seed %llu: re-simplifying created %u nodes: %s\n", (unsigned long long)seed,
               ctx->nnode - nnode, show(ctx, s, &ta));
        ok = false;
    }
    if (s2.id != s.id) {
        printf("seed %llu: not idempotent\n  once:  %s\n  twice: %s\n", (unsigned long long)seed,
               show(ctx, s, &ta), show(ctx, s2, &tb));
        ok = false;
    }
    if (kiln_simplify_expr(ctx, s0, NULL, 0).id != s0.id) {
        printf("seed %llu: not idempotent without ranges: %s\n", (unsigned long long)seed,
               show(ctx, s0, &ta));
        ok = false;
    }
    int64_t blo, bhi;
    kiln_expr_bounds(ctx, e, rg, nr, &blo, &bhi);
    for (int t = 0; t < 24 && ok; t++) {
        for (int v = 0; v < NVAR; v++) {
            en.val[v] = rnd(&G, -40, 40);
            for (uint32_t k = 0; k < nr; k++)
                if (rg[k].var.id == G.var[v].id)
                    en.val[v] = rnd(&G, rg[k].min, rg[k].max);
        }
        int64_t want, got, got0;
        if (!ev(ctx, e, &en, &want))
            continue;
        (*checked)++;
        bool g1 = ev(ctx, s, &en, &got), g0 = ev(ctx, s0, &en, &got0);
        bool bad = !g1 || got != want || !g0 || got0 != want || want < blo || want > bhi;
        if (bad) {
            printf("seed %llu: x=%lld y=%lld z=%lld ax0=%lld: want %lld, got %lld (no ranges "
                   "%lld), bounds [%lld, %lld]\n",
                   (unsigned long long)seed, (long long)en.val[0], (long long)en.val[1],
                   (long long)en.val[2], (long long)en.val[3], (long long)want,
                   g1 ? (long long)got : -999999LL, g0 ? (long long)got0 : -999999LL,
                   (long long)blo, (long long)bhi);
            printf("  ranges:");
            for (uint32_t k = 0; k < nr; k++)
                printf(" %s in [%lld, %lld]", show(ctx, rg[k].var, &ta), (long long)rg[k].min,
                       (long long)rg[k].max);
            printf("\n  original:   %s\n", show(ctx, e, &ta));
            printf("  simplified: %s\n", show(ctx, s, &ta));
            printf("  no ranges:  %s\n", show(ctx, s0, &ta));
            ok = false;
        }
    }
    kiln_ctx_free(ctx);
    return ok;
}

static void
test_simplify_random(void)
{
    uint64_t n = opt_iters_or(600), checked = 0, failed = 0;
    for (uint64_t i = 0; i < n && failed < 5; i++)
        if (!random_expr_case(opt_seed() * 1000003u + i, &checked))
            failed++;
    if (failed)
        harness_fail(__FILE__, __LINE__, "%llu of %llu random expressions failed (seeds above)",
                     (unsigned long long)failed, (unsigned long long)n);
    CHECK(checked > n * 4); /* most samples were evaluable */
}

/* Evaluation with ir/scalar.h's semantics (what both interpreters compute: i64 wraps). With
 * `checked`, false when an addition, subtraction, multiplication or negation overflows: the
 * simplifier may assume that the input does not overflow, never that its output does not. */
static bool
ev_wrap(kiln_ctx *ctx, kiln_expr e, const kiln_expr *var, const int64_t *val, int nvar,
        bool checked, int64_t *out)
{
    const struct kiln_node n = *kiln_node_get(ctx, e);
    enum kiln_op           op = (enum kiln_op)n.op;
    union kiln_scalar      a = {.i = 0}, b = {.i = 0}, r;
    if (op == KILN_OP_INT) {
        *out = n.imm;
        return true;
    }
    if (op == KILN_OP_VAR) {
        for (int i = 0; i < nvar; i++)
            if (var[i].id == e.id) {
                *out = val[i];
                return true;
            }
        return false;
    }
    if (op == KILN_OP_SELECT) {
        if (!ev_wrap(ctx, (kiln_expr){n.kid[0]}, var, val, nvar, checked, &a.i))
            return false;
        return ev_wrap(ctx, (kiln_expr){n.kid[a.i ? 1 : 2]}, var, val, nvar, checked, out);
    }
    if (!ev_wrap(ctx, (kiln_expr){n.kid[0]}, var, val, nvar, checked, &a.i)
        || (kiln_op_arity[op] > 1
            && !ev_wrap(ctx, (kiln_expr){n.kid[1]}, var, val, nvar, checked, &b.i)))
        return false;
    int64_t t;
    if (checked
        && ((op == KILN_OP_ADD && __builtin_add_overflow(a.i, b.i, &t))
            || (op == KILN_OP_SUB && __builtin_sub_overflow(a.i, b.i, &t))
            || (op == KILN_OP_MUL && __builtin_mul_overflow(a.i, b.i, &t))
            || (op == KILN_OP_NEG && a.i == INT64_MIN)))
        return false;
    enum kiln_dtype odt = kiln_expr_dtype(ctx, (kiln_expr){n.kid[0]});
    if (!kiln_scalar_eval(op, odt, (enum kiln_dtype)n.dtype, a, b, &r))
        return false;
    *out = r.i;
    return true;
}

/* Comparisons at the ends of the i64 range: for every assignment under which the input
 * evaluates without overflow, the simplified form (with no ranges) gives the same value under
 * wrap-around. `x <= y` once became `x < y + 1`, false for y = INT64_MAX. */
static void
test_simplify_compare_extremes(void)
{
    kiln_ctx     *ctx = kiln_ctx_new(NULL);
    kiln_expr     x = V(ctx, "x"), y = V(ctx, "y"), z = V(ctx, "z");
    kiln_expr     var[3] = {x, y, z};
    const int64_t M = INT64_MAX, m = INT64_MIN;
    const int64_t vals[] = {m, m + 1, m + 2, -2, -1, 0, 1, 2, M - 2, M - 1, M};
    kiln_expr     es[] = {
            kiln_le(ctx, x, y),
            kiln_le(ctx, y, x), /* x >= y */
            kiln_lt(ctx, x, y),
            kiln_unary(ctx, KILN_OP_NOT, kiln_lt(ctx, x, y)),
            kiln_unary(ctx, KILN_OP_NOT, kiln_le(ctx, x, y)),
            kiln_le(ctx, x, kiln_add(ctx, y, C(ctx, 2))),
            kiln_le(ctx, kiln_add(ctx, x, y), z),
            kiln_le(ctx, kiln_sub(ctx, x, y), C(ctx, 0)),
            kiln_le(ctx, C(ctx, 0), kiln_sub(ctx, x, y)),
            kiln_le(ctx, kiln_mul(ctx, x, C(ctx, 2)),
                    kiln_add(ctx, kiln_mul(ctx, y, C(ctx, 2)), C(ctx, 3))),
            kiln_le(ctx, x, C(ctx, 5)),
            kiln_le(ctx, C(ctx, 5), x),
            kiln_le(ctx, x, C(ctx, M)),
            kiln_le(ctx, x, C(ctx, M - 1)),
            kiln_le(ctx, C(ctx, m), x),
            kiln_le(ctx, C(ctx, m + 1), x),
            kiln_unary(ctx, KILN_OP_NOT, kiln_lt(ctx, x, C(ctx, m + 1))),
            kiln_binary(ctx, KILN_OP_EQ, x, y),
            kiln_binary(ctx, KILN_OP_NE, x, y),
            kiln_select(ctx, kiln_le(ctx, x, y), x, y),
            kiln_and(ctx, kiln_le(ctx, x, y), kiln_le(ctx, y, z)),
    };
    int      bad = 0;
    uint64_t checked = 0;
    for (size_t k = 0; k < KILN_COUNTOF(es); k++) {
        kiln_expr   s = kiln_simplify_expr(ctx, es[k], NULL, 0);
        struct text ta, tb;
        CHECK(s.id != 0);
        if (!s.id)
            continue;
        for (size_t i = 0; i < KILN_COUNTOF(vals); i++)
            for (size_t j = 0; j < KILN_COUNTOF(vals); j++)
                for (size_t l = 0; l < KILN_COUNTOF(vals); l++) {
                    int64_t v[3] = {vals[i], vals[j], vals[l]}, want, got;
                    if (!ev_wrap(ctx, es[k], var, v, 3, true, &want))
                        continue;
                    bool ok = ev_wrap(ctx, s, var, v, 3, false, &got) && got == want;
                    if (!ok && bad++ < 5)
                        printf("x=%lld y=%lld z=%lld: %s is %lld, simplified %s is %lld\n",
                               (long long)v[0], (long long)v[1], (long long)v[2],
                               show(ctx, es[k], &ta), (long long)want, show(ctx, s, &tb),
                               (long long)got);
                    checked++;
                }
    }
    CHECK(bad == 0);
    CHECK(checked > KILN_COUNTOF(es) * 100); /* most assignments were evaluable */
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

/* ---- loop nests: helpers ---- */

static const char *
fprint(struct kiln_func *f)
{
    struct kiln_buf b = {0};
    if (kiln_func_print(f, &b) != KILN_OK || !b.data)
        return "(print failed)";
    return b.data;
}

/* Runs f on parameter storage initialised from seed (inputs random, everything else 0) and
 * returns the concatenated parameters (malloc'ed), or NULL when evaluation failed. */
static double *
run(struct kiln_func *f, bool flat, uint64_t seed, size_t *total)
{
    struct kiln_rng r = kiln_rng_new(seed);
    size_t          n = 0, off = 0;
    for (uint32_t p = 0; p < f->nparam; p++)
        n += (size_t)kiln_buffer_numel(&f->buf[f->param[p]]);
    double  *all = malloc(sizeof(double) * (n ? n : 1));
    double **bufs = malloc(sizeof(double *) * (f->nparam ? f->nparam : 1));
    for (uint32_t p = 0; p < f->nparam; p++) {
        bufs[p] = all + off;
        for (int64_t i = 0; i < kiln_buffer_numel(&f->buf[f->param[p]]); i++)
            all[off++] = (double)(int)kiln_rng_below(&r, 17) - 8; /* exact in f32 */
    }
    enum kiln_status st = kiln_func_eval(f, flat, bufs);
    free(bufs);
    if (st != KILN_OK) {
        printf("eval failed: %s\n%s", kiln_ctx_error(f->ctx)->msg, fprint(f));
        free(all);
        return NULL;
    }
    *total = n;
    return all;
}

static bool
same_results(struct kiln_func *f, bool flat, const double *want, size_t n, uint64_t seed)
{
    size_t  m = 0;
    double *got = run(f, flat, seed, &m);
    bool    ok = got && m == n;
    for (size_t i = 0; ok && i < n; i++)
        if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])))) {
            printf("element %zu: want %g, got %g\n", i, want[i], got[i]);
            ok = false;
        }
    free(got);
    return ok;
}

static bool
has_cond_expr(kiln_ctx *ctx, kiln_expr e)
{
    const struct kiln_node *n = kiln_node_get(ctx, e);
    if (!e.id)
        return false;
    if (n->op == KILN_OP_SELECT)
        return true;
    for (int i = 0; i < kiln_op_arity[n->op]; i++)
        if (has_cond_expr(ctx, (kiln_expr){kiln_node_get(ctx, e)->kid[i]}))
            return true;
    return false;
}

static enum kiln_walk
stop_at_if(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    (void)v;
    return s->kind == KILN_STMT_IF ? KILN_WALK_STOP : KILN_WALK_GO;
}

static enum kiln_walk
stop_at_select(struct kiln_stmt_visitor *v, const struct kiln_stmt *s, enum kiln_stmt_field field,
               kiln_expr e)
{
    (void)s;
    if (field == KILN_STMT_FIELD_FOR_MIN || field == KILN_STMT_FIELD_FOR_EXTENT)
        return KILN_WALK_GO; /* loop bounds are not looked at */
    return has_cond_expr(v->user, e) ? KILN_WALK_STOP : KILN_WALK_GO;
}

/* Whether s contains an if statement or a select. */
static bool
has_cond(kiln_ctx *ctx, const struct kiln_stmt *s)
{
    struct kiln_stmt_visitor v = {.user = ctx, .pre = stop_at_if, .expr = stop_at_select};
    return kiln_stmt_visit(&v, s) == KILN_WALK_STOP;
}

struct find_loop {
    kiln_expr               var;
    const struct kiln_stmt *found;
};

static enum kiln_walk
find_loop_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct find_loop *F = v->user;
    if (s->kind != KILN_STMT_FOR || s->u.for_.var.id != F->var.id)
        return KILN_WALK_GO;
    F->found = s;
    return KILN_WALK_STOP;
}

/* The loop binding var inside s (first found), or NULL. */
static const struct kiln_stmt *
find_loop(const struct kiln_stmt *s, kiln_expr var)
{
    struct find_loop         F = {var, NULL};
    struct kiln_stmt_visitor v = {.user = &F, .pre = find_loop_pre};
    kiln_stmt_visit(&v, s);
    return F.found;
}

static enum kiln_walk
count_loop(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    *(uint32_t *)v->user += s->kind == KILN_STMT_FOR;
    return KILN_WALK_GO;
}

static uint32_t
count_loops(const struct kiln_stmt *s)
{
    uint32_t                 n = 0;
    struct kiln_stmt_visitor v = {.user = &n, .pre = count_loop};
    kiln_stmt_visit(&v, s);
    return n;
}

/* ---- simplify pass ---- */

static void
test_pass_simplify(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_func *f = kiln_func_new(ctx, "k");
    int64_t           sh[1] = {16};
    uint32_t          A = kiln_func_add_buffer(f, "A", KILN_DTYPE_F32, 1, sh, KILN_SCOPE_GLOBAL, 0);
    kiln_expr         i = kiln_fresh_var(ctx, "i"), j = kiln_fresh_var(ctx, "j"),
              u = kiln_fresh_var(ctx, "u");
    kiln_expr one = kiln_float(ctx, 1, KILN_DTYPE_F32);
    /* for i in [0,4): for j in [0,1): if i < 8: A[i*4 + j] = 1; for u in [3, +0): A[u] = 1 */
    kiln_expr         idx = kiln_add(ctx, kiln_mul(ctx, i, C(ctx, 4)), j);
    struct kiln_stmt *st = kiln_stmt_store(ctx, A, 1, &idx, one);
    struct kiln_stmt *guard = kiln_stmt_if(ctx, kiln_lt(ctx, i, C(ctx, 8)), st, NULL);
    struct kiln_stmt *lj = kiln_stmt_for(ctx, j, C(ctx, 0), C(ctx, 1), KILN_LOOP_SERIAL, guard);
    struct kiln_stmt *li = kiln_stmt_for(ctx, i, C(ctx, 0), C(ctx, 4), KILN_LOOP_SERIAL, lj);
    struct kiln_stmt *dead = kiln_stmt_for(ctx, u, C(ctx, 3), C(ctx, 0), KILN_LOOP_SERIAL,
                                           kiln_stmt_store(ctx, A, 1, &u, one));
    struct kiln_stmt *items[2] = {li, dead};
    f->body = kiln_stmt_seq(ctx, 2, items);
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, false));
    CHECK_EQ_INT(KILN_OK, kiln_pass_simplify(f));
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, false));
    CHECK_EQ_STR("func k(A: f32[16]):\n"
                 "  for i in [0, +4):\n"
                 "    A[(i * 4)] = 1\n",
                 fprint(f));
    /* narrowing: inside `if i < 2` of a loop over [0, 8), i // 2 is 0; the else branch knows
     * i >= 2 */
    struct kiln_func *g = kiln_func_new(ctx, "g");
    uint32_t          B = kiln_func_add_buffer(g, "B", KILN_DTYPE_I64, 1, sh, KILN_SCOPE_GLOBAL, 0);
    kiln_expr         q = kiln_floordiv(ctx, i, C(ctx, 2));
    kiln_expr         c2 = kiln_lt(ctx, C(ctx, 1), i);
    struct kiln_stmt *s1 = kiln_stmt_store(ctx, B, 1, &i, q);
    struct kiln_stmt *s2 =
        kiln_stmt_store(ctx, B, 1, &i, kiln_select(ctx, c2, C(ctx, 5), C(ctx, 6)));
    struct kiln_stmt *br = kiln_stmt_if(ctx, kiln_lt(ctx, i, C(ctx, 2)), s1, s2);
    g->body = kiln_stmt_for(ctx, i, C(ctx, 0), C(ctx, 8), KILN_LOOP_SERIAL, br);
    CHECK_EQ_INT(KILN_OK, kiln_pass_simplify(g));
    CHECK_EQ_STR("func g(B: i64[16]):\n"
                 "  for i in [0, +8):\n"
                 "    if (i < 2):\n"
                 "      B[i] = 0\n"
                 "    else:\n"
                 "      B[i] = 5\n",
                 fprint(g));
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

/* ---- flatten ---- */

static void
test_flatten(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_func *f = kiln_func_new(ctx, "k");
    int64_t           s2[2] = {4, 5}, s3[3] = {2, 4, 5};
    uint32_t          A = kiln_func_add_buffer(f, "A", KILN_DTYPE_F32, 3, s3, KILN_SCOPE_GLOBAL, 0);
    uint32_t  S = kiln_func_add_buffer(f, "S", KILN_DTYPE_F32, 0, NULL, KILN_SCOPE_GLOBAL, 1);
    uint32_t  B = kiln_func_add_buffer(f, "B", KILN_DTYPE_F32, 2, s2, KILN_SCOPE_GLOBAL, 2);
    kiln_expr i = kiln_fresh_var(ctx, "i"), j = kiln_fresh_var(ctx, "j");
    /* B[i, j] = A[1, i, j] * S[] + A[0, 3 - i, j] */
    kiln_expr ia[3] = {C(ctx, 1), i, j}, ib[3] = {C(ctx, 0), kiln_sub(ctx, C(ctx, 3), i), j};
    kiln_expr v =
        kiln_add(ctx, kiln_mul(ctx, kiln_func_load(f, A, 3, ia), kiln_func_load(f, S, 0, NULL)),
                 kiln_func_load(f, A, 3, ib));
    kiln_expr         ij[2] = {i, j};
    struct kiln_stmt *st = kiln_stmt_store(ctx, B, 2, ij, v);
    f->body = kiln_stmt_for(ctx, i, C(ctx, 0), C(ctx, 4), KILN_LOOP_SERIAL,
                            kiln_stmt_for(ctx, j, C(ctx, 0), C(ctx, 5), KILN_LOOP_SERIAL, st));
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, false));
    size_t  n = 0;
    double *want = run(f, false, 7, &n);
    CHECK(want != NULL);
    CHECK_EQ_INT(KILN_OK, kiln_pass_flatten(f));
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, true));
    CHECK_EQ_STR("func k(A: f32[2, 4, 5], S: f32[], B: f32[4, 5]):\n"
                 "  for i in [0, +4):\n"
                 "    for j in [0, +5):\n"
                 "      B[((i * 5) + j)] = (A[((j - (i * 5)) + 15)] + (S[0] * A[(((i * 5) + j) + "
                 "20)]))\n",
                 fprint(f));
    CHECK(want && same_results(f, true, want, n, 7));
    free(want);
    /* a wrong number of indices is an error naming the buffer */
    struct kiln_func *g = kiln_func_new(ctx, "g");
    uint32_t          G = kiln_func_add_buffer(g, "G", KILN_DTYPE_F32, 2, s2, KILN_SCOPE_GLOBAL, 0);
    g->body = kiln_stmt_store(ctx, G, 1, &i, kiln_float(ctx, 0, KILN_DTYPE_F32));
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_pass_flatten(g));
    CHECK_EQ_STR("store of G has 1 indices, not 2", kiln_ctx_error(ctx)->msg);
    kiln_ctx_free(ctx);
}

/* Random ranks and shapes: B[i...] = A[reversed i...] * 2 (A's shape is B's
 * reversed), flattened, must compute what the multi-dimensional nest computed. */
static void
test_flatten_random(void)
{
    uint64_t n = opt_iters_or(100);
    for (uint64_t it = 0; it < n; it++) {
        uint64_t          seed = opt_seed() * 31u + it;
        struct kiln_rng   r = kiln_rng_new(seed);
        kiln_ctx         *ctx = kiln_ctx_new(NULL);
        struct kiln_func *f = kiln_func_new(ctx, "fl");
        uint32_t          rank = (uint32_t)kiln_rng_below(&r, 5);
        int64_t           sb[KILN_MAX_DIMS], sa[KILN_MAX_DIMS];
        kiln_expr         iv[KILN_MAX_DIMS], rv[KILN_MAX_DIMS];
        for (uint32_t d = 0; d < rank; d++)
            sb[d] = 1 + (int64_t)kiln_rng_below(&r, 4);
        for (uint32_t d = 0; d < rank; d++)
            sa[d] = sb[rank - 1 - d];
        uint32_t A = kiln_func_add_buffer(f, "A", KILN_DTYPE_F32, rank, sa, KILN_SCOPE_GLOBAL, 0);
        uint32_t B = kiln_func_add_buffer(f, "B", KILN_DTYPE_F32, rank, sb, KILN_SCOPE_GLOBAL, 1);
        for (uint32_t d = 0; d < rank; d++)
            iv[d] = kiln_fresh_var(ctx, "i");
        for (uint32_t d = 0; d < rank; d++)
            rv[d] = iv[rank - 1 - d];
        kiln_expr v =
            kiln_mul(ctx, kiln_func_load(f, A, rank, rv), kiln_float(ctx, 2, KILN_DTYPE_F32));
        struct kiln_stmt *body = kiln_stmt_store(ctx, B, rank, iv, v);
        for (uint32_t d = rank; d-- > 0;)
            body = kiln_stmt_for(ctx, iv[d], C(ctx, 0), C(ctx, sb[d]), KILN_LOOP_SERIAL, body);
        f->body = body;
        size_t  m = 0;
        double *want = run(f, false, seed, &m);
        bool    ok = want && kiln_pass_flatten(f) == KILN_OK && kiln_func_verify(f, true) == KILN_OK
                  && same_results(f, true, want, m, seed);
        if (!ok)
            printf("seed %llu: rank %u:\n%s", (unsigned long long)seed, rank, fprint(f));
        CHECK(ok);
        free(want);
        kiln_ctx_free(ctx);
    }
}

/* ---- partition ---- */

/* out[i] = sum_k select(0 <= i*s + k - p && i*s + k - p < n, x[i*s + k - p], 0) * w[k] */
static struct kiln_func *
stencil_1d(kiln_ctx *ctx, int64_t n, int64_t kw, int64_t s, int64_t p, enum kiln_loop_kind kind,
           kiln_expr *iv)
{
    struct kiln_func *f = kiln_func_new(ctx, "stencil");
    int64_t           on = (n + 2 * p - kw) / s + 1;
    int64_t           sx[1] = {n}, sw[1] = {kw}, so[1] = {on};
    uint32_t          X = kiln_func_add_buffer(f, "x", KILN_DTYPE_F32, 1, sx, KILN_SCOPE_GLOBAL, 0);
    uint32_t          W = kiln_func_add_buffer(f, "w", KILN_DTYPE_F32, 1, sw, KILN_SCOPE_GLOBAL, 1);
    uint32_t          O = kiln_func_add_buffer(f, "y", KILN_DTYPE_F32, 1, so, KILN_SCOPE_GLOBAL, 2);
    kiln_expr         i = kiln_fresh_var(ctx, "i"), k = kiln_fresh_var(ctx, "k");
    kiln_expr         pos = kiln_sub(ctx, kiln_add(ctx, kiln_mul(ctx, i, C(ctx, s)), k), C(ctx, p));
    kiln_expr in = kiln_and(ctx, kiln_le(ctx, C(ctx, 0), pos), kiln_lt(ctx, pos, C(ctx, n)));
    kiln_expr zero = kiln_float(ctx, 0, KILN_DTYPE_F32);
    kiln_expr xv = kiln_select(ctx, in, kiln_func_load(f, X, 1, &pos), zero);
    kiln_expr acc =
        kiln_add(ctx, kiln_func_load(f, O, 1, &i), kiln_mul(ctx, xv, kiln_func_load(f, W, 1, &k)));
    struct kiln_stmt *init = kiln_stmt_store(ctx, O, 1, &i, zero);
    struct kiln_stmt *upd = kiln_stmt_for(ctx, k, C(ctx, 0), C(ctx, kw), KILN_LOOP_SERIAL,
                                          kiln_stmt_store(ctx, O, 1, &i, acc));
    struct kiln_stmt *items[2] = {init, upd};
    f->body = kiln_stmt_for(ctx, i, C(ctx, 0), C(ctx, on), kind, kiln_stmt_seq(ctx, 2, items));
    *iv = i;
    return f;
}

/* Inside a GPU loop (a kernel's per-thread loops) nothing is split: the stencil under a
 * gpu_block loop keeps its one loop and its bounds tests. */
static void
test_partition_gpu(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    kiln_expr         i, b = kiln_fresh_var(ctx, "b");
    struct kiln_func *f = stencil_1d(ctx, 8, 3, 1, 1, KILN_LOOP_SERIAL, &i);
    f->body = kiln_stmt_for(ctx, b, C(ctx, 0), C(ctx, 1), KILN_LOOP_GPU_BLOCK, f->body);
    f->body->u.for_.axis = 0;
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, false));
    CHECK_EQ_INT(KILN_OK, kiln_pass_partition(f));
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, false));
    const struct kiln_stmt *loop = find_loop(f->body, i);
    CHECK(loop && has_cond(ctx, loop));
    int64_t ext = 0;
    CHECK(loop && kiln_expr_is_int(ctx, loop->u.for_.extent, &ext) && ext == 8);
    kiln_ctx_free(ctx);
}

static void
test_partition_stencil(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    kiln_expr         i;
    struct kiln_func *f = stencil_1d(ctx, 8, 3, 1, 1, KILN_LOOP_PARALLEL, &i);
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, false));
    size_t  n = 0;
    double *want = run(f, false, 3, &n);
    CHECK_EQ_INT(KILN_OK, kiln_pass_partition(f));
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, false));
    CHECK_EQ_STR("func stencil(x: f32[8], w: f32[3], y: f32[8]):\n"
                 "  y[0] = 0\n"
                 "  y[0] = ((w[0] * 0) + y[0])\n"
                 "  for k in [1, +2):\n"
                 "    y[0] = ((x[(k + -1)] * w[k]) + y[0])\n"
                 "  for i in [1, +6) parallel:\n"
                 "    y[i] = 0\n"
                 "    for k in [0, +3):\n"
                 "      y[i] = (y[i] + (w[k] * x[((k + i) + -1)]))\n"
                 "  y[7] = 0\n"
                 "  for k in [0, +2):\n"
                 "    y[7] = ((w[k] * x[(k + 6)]) + y[7])\n"
                 "  y[7] = ((w[2] * 0) + y[7])\n",
                 fprint(f));
    const struct kiln_stmt *mid = find_loop(f->body, i);
    CHECK(mid && !has_cond(ctx, mid));
    CHECK(want && same_results(f, false, want, n, 3));
    free(want);
    kiln_ctx_free(ctx);
}

/* A padded 2-D convolution nest with an if-guarded bias, built by hand:
 *   for o, h, w: y[o,h,w] = (if ... ) ; for c, kh, kw: y += select(in bounds, x[..], 0) * wt[..] */
static struct kiln_func *
conv2d(kiln_ctx *ctx, int64_t C_, int64_t H, int64_t W, int64_t O, int64_t K, int64_t s, int64_t p,
       kiln_expr *hv, kiln_expr *wv, bool vector_inner)
{
    struct kiln_func *f = kiln_func_new(ctx, "conv");
    int64_t           OH = (H + 2 * p - K) / s + 1, OW = (W + 2 * p - K) / s + 1;
    int64_t           sx[3] = {C_, H, W}, sw[4] = {O, C_, K, K}, sy[3] = {O, OH, OW};
    uint32_t          X = kiln_func_add_buffer(f, "x", KILN_DTYPE_F32, 3, sx, KILN_SCOPE_GLOBAL, 0);
    uint32_t  Wt = kiln_func_add_buffer(f, "wt", KILN_DTYPE_F32, 4, sw, KILN_SCOPE_GLOBAL, 1);
    uint32_t  Y = kiln_func_add_buffer(f, "y", KILN_DTYPE_F32, 3, sy, KILN_SCOPE_GLOBAL, 2);
    kiln_expr o = kiln_fresh_var(ctx, "o"), h = kiln_fresh_var(ctx, "h"),
              w = kiln_fresh_var(ctx, "w"), c = kiln_fresh_var(ctx, "c"),
              kh = kiln_fresh_var(ctx, "kh"), kw = kiln_fresh_var(ctx, "kw");
    kiln_expr ph = kiln_sub(ctx, kiln_add(ctx, kiln_mul(ctx, h, C(ctx, s)), kh), C(ctx, p));
    kiln_expr pw = kiln_sub(ctx, kiln_add(ctx, kiln_mul(ctx, w, C(ctx, s)), kw), C(ctx, p));
    kiln_expr in =
        kiln_and(ctx, kiln_and(ctx, kiln_le(ctx, C(ctx, 0), ph), kiln_lt(ctx, ph, C(ctx, H))),
                 kiln_and(ctx, kiln_le(ctx, C(ctx, 0), pw), kiln_lt(ctx, pw, C(ctx, W))));
    kiln_expr zero = kiln_float(ctx, 0, KILN_DTYPE_F32);
    kiln_expr xi[3] = {c, ph, pw}, wi[4] = {o, c, kh, kw}, yi[3] = {o, h, w};
    kiln_expr xv = kiln_select(ctx, in, kiln_func_load(f, X, 3, xi), zero);
    kiln_expr acc =
        kiln_add(ctx, kiln_func_load(f, Y, 3, yi), kiln_mul(ctx, xv, kiln_func_load(f, Wt, 4, wi)));
    struct kiln_stmt *upd = kiln_stmt_store(ctx, Y, 3, yi, acc);
    upd = kiln_stmt_for(ctx, kw, C(ctx, 0), C(ctx, K), KILN_LOOP_SERIAL, upd);
    upd = kiln_stmt_for(ctx, kh, C(ctx, 0), C(ctx, K), KILN_LOOP_SERIAL, upd);
    upd = kiln_stmt_for(ctx, c, C(ctx, 0), C(ctx, C_), KILN_LOOP_SERIAL, upd);
    /* bias 1 on the border rows (an if on h), 0 elsewhere */
    kiln_expr border = kiln_binary(ctx, KILN_OP_OR, kiln_binary(ctx, KILN_OP_EQ, h, C(ctx, 0)),
                                   kiln_binary(ctx, KILN_OP_EQ, h, C(ctx, OH - 1)));
    struct kiln_stmt *init = kiln_stmt_if(
        ctx, border, kiln_stmt_store(ctx, Y, 3, yi, kiln_float(ctx, 1, KILN_DTYPE_F32)),
        kiln_stmt_store(ctx, Y, 3, yi, zero));
    struct kiln_stmt *items[2] = {init, upd};
    struct kiln_stmt *body = kiln_stmt_seq(ctx, 2, items);
    body = kiln_stmt_for(ctx, w, C(ctx, 0), C(ctx, OW),
                         vector_inner ? KILN_LOOP_VECTOR : KILN_LOOP_SERIAL, body);
    body = kiln_stmt_for(ctx, h, C(ctx, 0), C(ctx, OH), KILN_LOOP_SERIAL, body);
    f->body = kiln_stmt_for(ctx, o, C(ctx, 0), C(ctx, O), KILN_LOOP_PARALLEL, body);
    *hv = h;
    *wv = w;
    return f;
}

static void
test_partition_conv2d(void)
{
    static const int64_t cfg[][4] = {{6, 7, 1, 1}, {7, 9, 2, 1}, {9, 8, 1, 2}, {8, 6, 2, 0}};
    for (size_t t = 0; t < KILN_COUNTOF(cfg); t++) {
        kiln_ctx         *ctx = kiln_ctx_new(NULL);
        kiln_expr         h, w;
        int64_t           K = cfg[t][3] == 2 ? 5 : 3;
        struct kiln_func *f =
            conv2d(ctx, 2, cfg[t][0], cfg[t][1], 3, K, cfg[t][2], cfg[t][3], &h, &w, false);
        CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, false));
        size_t  n = 0;
        double *want = run(f, false, 11 + t, &n);
        CHECK_EQ_INT(KILN_OK, kiln_pass_partition(f));
        CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, false));
        const struct kiln_stmt *mh = find_loop(f->body, h);
        const struct kiln_stmt *mw = mh ? find_loop(mh->u.for_.body, w) : NULL;
        if (cfg[t][3] > 0) {
            if (!mh || !mw)
                printf("config %zu: no hot loop:\n%s", t, fprint(f));
            CHECK(mh && mw);
            if (mw && has_cond(ctx, mw))
                printf("config %zu: hot loop keeps a condition:\n%s", t, fprint(f));
            CHECK(mw && !has_cond(ctx, mw));
        }
        CHECK(want && same_results(f, false, want, n, 11 + t));
        /* the lowering pipeline's order: flatten, partition, simplify */
        free(want);
        kiln_ctx_free(ctx);
    }
    /* flattened first, then partitioned, then simplified: same results, hot loop clean */
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    kiln_expr         h, w;
    struct kiln_func *f = conv2d(ctx, 2, 6, 7, 3, 3, 1, 1, &h, &w, false);
    size_t            n = 0;
    double           *want = run(f, false, 5, &n);
    CHECK_EQ_INT(KILN_OK, kiln_pass_simplify(f));
    CHECK_EQ_INT(KILN_OK, kiln_pass_flatten(f));
    CHECK_EQ_INT(KILN_OK, kiln_pass_partition(f));
    CHECK_EQ_INT(KILN_OK, kiln_pass_simplify(f));
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, true));
    const struct kiln_stmt *mh = find_loop(f->body, h);
    const struct kiln_stmt *mw = mh ? find_loop(mh->u.for_.body, w) : NULL;
    CHECK(mw && !has_cond(ctx, mw));
    CHECK(want && same_results(f, true, want, n, 5));
    free(want);
    /* vector loops are not split, but the loops around them are */
    struct kiln_func *g = conv2d(ctx, 1, 6, 4, 1, 3, 1, 1, &h, &w, true);
    want = run(g, false, 6, &n);
    uint32_t before = count_loops(g->body);
    CHECK_EQ_INT(KILN_OK, kiln_pass_partition(g));
    mh = find_loop(g->body, h);
    mw = mh ? find_loop(mh->u.for_.body, w) : NULL;
    CHECK(mw && mw->u.for_.loop == KILN_LOOP_VECTOR && has_cond(ctx, mw));
    int64_t ext = 0;
    CHECK(mw && kiln_expr_is_int(ctx, mw->u.for_.extent, &ext) && ext == 4);
    CHECK(count_loops(g->body) > before);
    CHECK(want && same_results(g, false, want, n, 6));
    free(want);
    kiln_ctx_free(ctx);
}

static void
test_partition_if(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_func *f = kiln_func_new(ctx, "f_if");
    int64_t           sh[1] = {10};
    uint32_t          A = kiln_func_add_buffer(f, "A", KILN_DTYPE_I64, 1, sh, KILN_SCOPE_GLOBAL, 0);
    kiln_expr         i = kiln_fresh_var(ctx, "i");
    /* for i in [0, 10): if i < 3: A[i] = 1 else: A[i] = 2 */
    struct kiln_stmt *br =
        kiln_stmt_if(ctx, kiln_lt(ctx, i, C(ctx, 3)), kiln_stmt_store(ctx, A, 1, &i, C(ctx, 1)),
                     kiln_stmt_store(ctx, A, 1, &i, C(ctx, 2)));
    f->body = kiln_stmt_for(ctx, i, C(ctx, 0), C(ctx, 10), KILN_LOOP_SERIAL, br);
    size_t  n = 0;
    double *want = run(f, false, 1, &n);
    CHECK_EQ_INT(KILN_OK, kiln_pass_partition(f));
    CHECK_EQ_STR("func f_if(A: i64[10]):\n"
                 "  for i.1 in [0, +3):\n"
                 "    A[i.1] = 1\n"
                 "  for i in [3, +7):\n"
                 "    A[i] = 2\n",
                 fprint(f));
    CHECK(want && same_results(f, false, want, n, 1));
    free(want);
    /* `if k == 0` initialisation is peeled */
    struct kiln_func *g = kiln_func_new(ctx, "g_init");
    uint32_t          B = kiln_func_add_buffer(g, "B", KILN_DTYPE_I64, 1, sh, KILN_SCOPE_GLOBAL, 0);
    kiln_expr         k = kiln_fresh_var(ctx, "k"), z = C(ctx, 0);
    struct kiln_stmt *init = kiln_stmt_if(ctx, kiln_binary(ctx, KILN_OP_EQ, k, C(ctx, 0)),
                                          kiln_stmt_store(ctx, B, 1, &z, C(ctx, 0)), NULL);
    kiln_expr         acc = kiln_add(ctx, kiln_func_load(g, B, 1, &z), k);
    struct kiln_stmt *items[2] = {init, kiln_stmt_store(ctx, B, 1, &z, acc)};
    g->body = kiln_stmt_for(ctx, k, C(ctx, 0), C(ctx, 10), KILN_LOOP_SERIAL,
                            kiln_stmt_seq(ctx, 2, items));
    want = run(g, false, 2, &n);
    CHECK_EQ_INT(KILN_OK, kiln_pass_partition(g));
    CHECK_EQ_STR("func g_init(B: i64[10]):\n"
                 "  B[0] = 0\n"
                 "  B[0] = B[0]\n"
                 "  for k in [1, +9):\n"
                 "    B[0] = (B[0] + k)\n",
                 fprint(g));
    CHECK(want && same_results(g, false, want, n, 2));
    free(want);
    /* nothing to gain: a condition that is never decided on a sub-range leaves the loop alone */
    struct kiln_func *e = kiln_func_new(ctx, "e");
    uint32_t          E = kiln_func_add_buffer(e, "E", KILN_DTYPE_I64, 1, sh, KILN_SCOPE_GLOBAL, 0);
    kiln_expr odd = kiln_binary(ctx, KILN_OP_EQ, kiln_floormod(ctx, i, C(ctx, 2)), C(ctx, 1));
    e->body =
        kiln_stmt_for(ctx, i, C(ctx, 0), C(ctx, 10), KILN_LOOP_SERIAL,
                      kiln_stmt_store(ctx, E, 1, &i, kiln_select(ctx, odd, C(ctx, 1), C(ctx, 2))));
    const char *before = fprint(e);
    CHECK_EQ_INT(KILN_OK, kiln_pass_partition(e));
    CHECK_EQ_STR(before, fprint(e));
    /* a guard of a partial tile under a fused loop, `(f // 4) * 3 + j < 10` for f in [0, 16):
     * not affine in f, but a step, so the loop splits where the guard stops holding */
    struct kiln_func *t = kiln_func_new(ctx, "t_fused");
    int64_t           sh12[1] = {12};
    uint32_t  T = kiln_func_add_buffer(t, "T", KILN_DTYPE_I64, 1, sh12, KILN_SCOPE_GLOBAL, 0);
    kiln_expr fv = kiln_fresh_var(ctx, "f"), j = kiln_fresh_var(ctx, "j");
    kiln_expr row = kiln_add(ctx, kiln_mul(ctx, kiln_floordiv(ctx, fv, C(ctx, 4)), C(ctx, 3)), j);
    struct kiln_stmt *guarded = kiln_stmt_if(ctx, kiln_lt(ctx, row, C(ctx, 10)),
                                             kiln_stmt_store(ctx, T, 1, &row, fv), NULL);
    t->body = kiln_stmt_for(ctx, fv, C(ctx, 0), C(ctx, 16), KILN_LOOP_PARALLEL,
                            kiln_stmt_for(ctx, j, C(ctx, 0), C(ctx, 3), KILN_LOOP_SERIAL, guarded));
    want = run(t, false, 3, &n);
    CHECK_EQ_INT(KILN_OK, kiln_pass_partition(t));
    const char *got = fprint(t);
    CHECK(strstr(got, "for f in [0, +12) parallel:\n    for j in [0, +3):\n      T[") != NULL);
    CHECK(want && same_results(t, false, want, n, 3));
    free(want);
    /* the same kind of guard over a loop longer than SCAN_MAX (a 24-channel partial tile of
     * 256 channels fused with 7 rows, 77 iterations): the step is found by binary search */
    struct kiln_func *u = kiln_func_new(ctx, "u_fused");
    int64_t           sh256[1] = {256};
    uint32_t  U = kiln_func_add_buffer(u, "U", KILN_DTYPE_I64, 1, sh256, KILN_SCOPE_GLOBAL, 0);
    kiln_expr ch = kiln_add(ctx, kiln_mul(ctx, kiln_floordiv(ctx, fv, C(ctx, 7)), C(ctx, 24)), j);
    u->body = kiln_stmt_for(ctx, fv, C(ctx, 0), C(ctx, 77), KILN_LOOP_PARALLEL,
                            kiln_stmt_for(ctx, j, C(ctx, 0), C(ctx, 24), KILN_LOOP_SERIAL,
                                          kiln_stmt_if(ctx, kiln_lt(ctx, ch, C(ctx, 256)),
                                                       kiln_stmt_store(ctx, U, 1, &ch, fv), NULL)));
    want = run(u, false, 4, &n);
    CHECK_EQ_INT(KILN_OK, kiln_pass_partition(u));
    got = fprint(u);
    CHECK(strstr(got, "for f in [0, +70) parallel:\n    for j in [0, +24):\n      U[") != NULL);
    CHECK(want && same_results(u, false, want, n, 4));
    free(want);
    kiln_ctx_free(ctx);
}

/* Random padded stencils: sizes, kernel, stride, padding and loop kind drawn from the seed. */
static void
test_partition_random(void)
{
    uint64_t n = opt_iters_or(60);
    for (uint64_t it = 0; it < n; it++) {
        uint64_t        seed = opt_seed() * 7919u + it;
        struct kiln_rng r = kiln_rng_new(seed);
        int64_t         len = 1 + (int64_t)kiln_rng_below(&r, 12);
        int64_t         kw = 1 + (int64_t)kiln_rng_below(&r, 5);
        int64_t         s = 1 + (int64_t)kiln_rng_below(&r, 3);
        int64_t         p = (int64_t)kiln_rng_below(&r, (uint64_t)kw);
        if (len + 2 * p < kw)
            continue;
        kiln_ctx         *ctx = kiln_ctx_new(NULL);
        kiln_expr         i;
        struct kiln_func *f = stencil_1d(
            ctx, len, kw, s, p, kiln_rng_below(&r, 2) ? KILN_LOOP_SERIAL : KILN_LOOP_PARALLEL, &i);
        size_t  m = 0;
        double *want = run(f, false, seed, &m);
        bool    ok = want && kiln_pass_partition(f) == KILN_OK && kiln_pass_simplify(f) == KILN_OK
                  && kiln_func_verify(f, false) == KILN_OK && same_results(f, false, want, m, seed);
        const struct kiln_stmt *mid = ok ? find_loop(f->body, i) : NULL;
        if (mid && has_cond(ctx, mid)) { /* acceptable only if no iteration is free of padding */
            int64_t lo, ext;
            kiln_expr_is_int(ctx, mid->u.for_.min, &lo);
            kiln_expr_is_int(ctx, mid->u.for_.extent, &ext);
            for (int64_t v = lo; v < lo + ext; v++)
                if (v * s - p >= 0 && v * s - p + kw - 1 < len)
                    ok = false;
        }
        if (ok) { /* the pass is idempotent on statements too */
            char *once = strdup(fprint(f));
            ok = kiln_pass_simplify(f) == KILN_OK && !strcmp(once, fprint(f));
            free(once);
        }
        if (!ok)
            printf("seed %llu: n %lld k %lld s %lld p %lld:\n%s", (unsigned long long)seed,
                   (long long)len, (long long)kw, (long long)s, (long long)p, fprint(f));
        CHECK(ok);
        free(want);
        kiln_ctx_free(ctx);
    }
}

/* Allocation failures: from the N-th allocation on, every allocation fails; the pipeline
 * must stop with KILN_ERR_NOMEM (never crash, never leak: ASan builds check that) for every N
 * until it has enough memory to succeed. */
struct faulty {
    uint64_t n, fail_at;
    bool     armed;
};

static void *
faulty_alloc(void *ud, void *p, size_t old_size, size_t new_size)
{
    struct faulty *F = ud;
    (void)old_size;
    if (new_size == 0) {
        free(p);
        return NULL;
    }
    if (F->armed && ++F->n >= F->fail_at)
        return NULL;
    return realloc(p, new_size);
}

static void
test_out_of_memory(void)
{
    uint64_t at = 1;
    for (; at < 100000; at++) {
        struct faulty          F = {.fail_at = at};
        struct kiln_ctx_params prm = {.alloc = faulty_alloc, .alloc_ud = &F};
        kiln_ctx              *ctx = kiln_ctx_new(&prm);
        kiln_expr              h, w;
        struct kiln_func      *f = conv2d(ctx, 2, 6, 7, 2, 3, 1, 1, &h, &w, false);
        if (!f || kiln_func_verify(f, false) != KILN_OK) {
            CHECK(false);
            kiln_ctx_free(ctx);
            return;
        }
        F.armed = true;
        enum kiln_status st = kiln_pass_simplify(f);
        if (st == KILN_OK)
            st = kiln_pass_flatten(f);
        if (st == KILN_OK)
            st = kiln_pass_partition(f);
        if (st == KILN_OK)
            st = kiln_pass_simplify(f);
        F.armed = false;
        bool done = st == KILN_OK;
        if (!done && (st != KILN_ERR_NOMEM || kiln_ctx_error(ctx)->status != KILN_ERR_NOMEM)) {
            printf("failing at allocation %llu: %s: %s\n", (unsigned long long)at,
                   kiln_status_name(st), kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->msg : "");
            CHECK(false);
            done = true;
        }
        if (st == KILN_OK)
            CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, true));
        kiln_ctx_free(ctx);
        if (done)
            break;
    }
    printf("  %llu allocation failure points\n", (unsigned long long)(at - 1));
    CHECK(at > 1 && at < 100000);
}

static const struct test tests[] = {
    {"simplify_affine", test_simplify_affine},
    {"simplify_divmod", test_simplify_divmod},
    {"simplify_compare", test_simplify_compare},
    {"simplify_floats_and_identity", test_simplify_floats_and_identity},
    {"simplify_random", test_simplify_random},
    {"simplify_compare_extremes", test_simplify_compare_extremes},
    {"pass_simplify", test_pass_simplify},
    {"flatten", test_flatten},
    {"flatten_random", test_flatten_random},
    {"partition_stencil", test_partition_stencil},
    {"partition_gpu", test_partition_gpu},
    {"partition_conv2d", test_partition_conv2d},
    {"partition_if", test_partition_if},
    {"partition_random", test_partition_random},
    {"out_of_memory", test_out_of_memory},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
