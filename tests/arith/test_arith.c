/* tests/arith/test_arith.c -- the arithmetic-analysis module (ir/arith.c): interval operations
 * and their overflow to unbounded, exact intervals, affine forms (including what they refuse)
 * and strides; random expressions checked against brute-force evaluation over every point of
 * small variable ranges (the seed is printed; --seed replays, --iters sets the count). */
#include "../harness.h"

#include <string.h>

#define NV 3

static kiln_expr
C(kiln_ctx *ctx, int64_t v)
{
    return kiln_idx(ctx, v);
}

static kiln_expr
V(kiln_ctx *ctx, const char *name)
{
    return kiln_var_named(ctx, kiln_sym_cstr(ctx, name), KILN_DTYPE_I64);
}

static bool
ival_eq(struct kiln_ival a, int64_t lo, int64_t hi)
{
    return a.lo == lo && a.hi == hi;
}

/* ---- interval operations ---- */

static void
test_ival_ops(void)
{
    struct kiln_ival a = {2, 5}, b = {-3, 4};
    CHECK(ival_eq(kiln_ival_add(a, b), -1, 9));
    CHECK(ival_eq(kiln_ival_scale(a, -2), -10, -4));
    CHECK(ival_eq(kiln_ival_scale(KILN_IVAL_FULL, 0), 0, 0));
    CHECK(ival_eq(kiln_ival_mul(a, b), -15, 20));
    CHECK(ival_eq(kiln_ival_floordiv((struct kiln_ival){-7, 9}, (struct kiln_ival){4, 4}), -2, 2));
    CHECK(
        ival_eq(kiln_ival_floordiv((struct kiln_ival){-7, 9}, (struct kiln_ival){-4, -4}), -3, 1));
    CHECK(ival_eq(kiln_ival_floormod((struct kiln_ival){5, 7}, (struct kiln_ival){4, 4}), 1, 3));
    CHECK(ival_eq(kiln_ival_floormod((struct kiln_ival){0, 100}, (struct kiln_ival){4, 4}), 0, 3));
    CHECK(ival_eq(kiln_ival_floormod(KILN_IVAL_FULL, (struct kiln_ival){-4, -4}), -3, 0));
    /* a divisor interval holding 0 bounds nothing */
    CHECK(ival_eq(kiln_ival_floordiv(a, b), INT64_MIN, INT64_MAX));
    CHECK(ival_eq(kiln_ival_dtype(KILN_DTYPE_I8), INT8_MIN, INT8_MAX));
    CHECK(ival_eq(kiln_ival_dtype(KILN_DTYPE_F32), INT64_MIN, INT64_MAX));
    /* overflow makes the side unbounded, never wraps */
    struct kiln_ival big = {1, INT64_MAX - 1};
    CHECK(ival_eq(kiln_ival_add(big, (struct kiln_ival){0, 5}), 1, INT64_MAX));
    CHECK(ival_eq(kiln_ival_add((struct kiln_ival){INT64_MIN + 1, 0}, (struct kiln_ival){-2, 0}),
                  INT64_MIN, 0));
    CHECK(ival_eq(kiln_ival_scale((struct kiln_ival){-1, (int64_t)1 << 62}, 4), -4, INT64_MAX));
    CHECK(ival_eq(kiln_ival_scale((struct kiln_ival){-1, (int64_t)1 << 62}, -4), INT64_MIN, 4));
    CHECK(ival_eq(kiln_ival_mul((struct kiln_ival){-((int64_t)1 << 40), (int64_t)1 << 40},
                                (struct kiln_ival){-((int64_t)1 << 40), (int64_t)1 << 40}),
                  INT64_MIN, INT64_MAX));
    CHECK(ival_eq(
        kiln_ival_floordiv((struct kiln_ival){INT64_MIN + 1, 0}, (struct kiln_ival){-1, -1}), 0,
        INT64_MAX));
    CHECK(kiln_ival_finite(a));
    CHECK(!kiln_ival_finite((struct kiln_ival){0, INT64_MAX}));
}

/* ---- variable ranges and a brute-force reference ---- */

struct rng_env {
    kiln_ctx *ctx;
    kiln_expr var[NV];
    int64_t   lo[NV], hi[NV], val[NV];
};

static int
var_slot(const struct rng_env *R, kiln_expr v)
{
    for (int i = 0; i < NV; i++)
        if (R->var[i].id == v.id)
            return i;
    return -1;
}

static struct kiln_ival
bound_var(void *ud, kiln_expr v)
{
    const struct rng_env *R = ud;
    int                   i = var_slot(R, v);
    return i < 0 ? KILN_IVAL_FULL : (struct kiln_ival){R->lo[i], R->hi[i]};
}

static bool
exact_var(void *ud, kiln_expr v, struct kiln_ival *out)
{
    const struct rng_env *R = ud;
    int                   i = var_slot(R, v);
    if (i < 0)
        return false;
    *out = (struct kiln_ival){R->lo[i], R->hi[i]};
    return true;
}

/* Reference value of e at R->val on int64: false on overflow or division by zero (then the
 * point says nothing). Comparisons and logic give 0 / 1; select is lazy. */
static bool
ev(const struct rng_env *R, kiln_expr e, int64_t *out)
{
    const struct kiln_node n = *kiln_node_get(R->ctx, e);
    enum kiln_op           op = (enum kiln_op)n.op;
    int64_t                a = 0, b = 0, r = 0;
    if (op == KILN_OP_INT) {
        *out = n.imm;
        return true;
    }
    if (op == KILN_OP_VAR) {
        int i = var_slot(R, e);
        *out = i < 0 ? 0 : R->val[i];
        return i >= 0;
    }
    if (op == KILN_OP_SELECT) {
        if (!ev(R, (kiln_expr){n.kid[0]}, &a))
            return false;
        return ev(R, (kiln_expr){n.kid[a ? 1 : 2]}, out);
    }
    if (!ev(R, (kiln_expr){n.kid[0]}, &a)
        || (kiln_op_arity[op] > 1 && !ev(R, (kiln_expr){n.kid[1]}, &b)))
        return false;
    switch (op) {
    case KILN_OP_ADD:
        if (kiln_add_overflows(a, b, &r))
            return false;
        break;
    case KILN_OP_SUB:
        if (b == INT64_MIN || kiln_add_overflows(a, -b, &r))
            return false;
        break;
    case KILN_OP_MUL:
        if (kiln_mul_overflows(a, b, &r))
            return false;
        break;
    case KILN_OP_NEG:
    case KILN_OP_ABS:
        if (a == INT64_MIN)
            return false;
        r = op == KILN_OP_NEG || a < 0 ? -a : a;
        break;
    case KILN_OP_FLOORDIV:
    case KILN_OP_FLOORMOD:
        if (b == 0 || (a == INT64_MIN && b == -1))
            return false;
        r = op == KILN_OP_FLOORDIV ? kiln_scalar_floordiv(a, b) : kiln_scalar_floormod(a, b);
        break;
    case KILN_OP_MIN:
        r = a < b ? a : b;
        break;
    case KILN_OP_MAX:
        r = a > b ? a : b;
        break;
    case KILN_OP_LT:
        r = a < b;
        break;
    case KILN_OP_LE:
        r = a <= b;
        break;
    case KILN_OP_EQ:
        r = a == b;
        break;
    case KILN_OP_NE:
        r = a != b;
        break;
    case KILN_OP_AND:
        r = a && b;
        break;
    case KILN_OP_OR:
        r = a || b;
        break;
    case KILN_OP_NOT:
        r = !a;
        break;
    case KILN_OP_CAST: /* bool or i64 to i64 */
        r = a;
        break;
    default:
        return false;
    }
    *out = r;
    return true;
}

/* Calls fn at every point of the ranges; stops at the first false. */
static bool
each_point(struct rng_env *R, bool (*fn)(struct rng_env *R, void *ud), void *ud)
{
    for (R->val[0] = R->lo[0]; R->val[0] <= R->hi[0]; R->val[0]++)
        for (R->val[1] = R->lo[1]; R->val[1] <= R->hi[1]; R->val[1]++)
            for (R->val[2] = R->lo[2]; R->val[2] <= R->hi[2]; R->val[2]++)
                if (!fn(R, ud))
                    return false;
    return true;
}

/* ---- random expressions ---- */

struct gen {
    kiln_ctx        *ctx;
    struct kiln_rng  r;
    const kiln_expr *var;
};

static int64_t
rnd(struct gen *G, int64_t lo, int64_t hi)
{
    return lo + (int64_t)kiln_rng_below(&G->r, (uint64_t)(hi - lo + 1));
}

static int64_t
gen_const(struct gen *G)
{
    switch (rnd(G, 0, 9)) {
    case 0: /* huge: bounds and coefficients overflow */
        return rnd(G, 0, 1) ? INT64_MAX / rnd(G, 1, 3) : INT64_MIN / rnd(G, 1, 3);
    case 1:
        return ((int64_t)1 << 62) + rnd(G, -2, 2);
    default:
        return rnd(G, -9, 9);
    }
}

static kiln_expr gen_int(struct gen *G, int depth);

/* A constant divisor (never 0) or an expression that may be 0 at some points, never the
 * constant 0 (the builders refuse to fold a division by zero). */
static kiln_expr
gen_divisor(struct gen *G, int depth)
{
    int64_t   v;
    kiln_expr d =
        rnd(G, 0, 2) ? C(G->ctx, rnd(G, 1, 5) * (rnd(G, 0, 3) ? 1 : -1)) : gen_int(G, depth - 1);
    return kiln_expr_is_int(G->ctx, d, &v) && v == 0 ? C(G->ctx, 3) : d;
}

static kiln_expr
gen_bool(struct gen *G, int depth)
{
    static const enum kiln_op cmp[] = {KILN_OP_LT, KILN_OP_LE, KILN_OP_EQ, KILN_OP_NE};
    kiln_ctx                 *ctx = G->ctx;
    switch (rnd(G, 0, 4)) {
    case 0:
        return kiln_unary(ctx, KILN_OP_NOT, kiln_lt(ctx, gen_int(G, depth), gen_int(G, depth)));
    case 1:
        return kiln_binary(ctx, rnd(G, 0, 1) ? KILN_OP_AND : KILN_OP_OR,
                           kiln_le(ctx, gen_int(G, depth), gen_int(G, depth)),
                           kiln_lt(ctx, gen_int(G, depth), gen_int(G, depth)));
    default:
        return kiln_binary(ctx, cmp[rnd(G, 0, 3)], gen_int(G, depth), gen_int(G, depth));
    }
}

static kiln_expr
gen_int(struct gen *G, int depth)
{
    kiln_ctx *ctx = G->ctx;
    if (depth <= 0 || rnd(G, 0, 5) == 0)
        return rnd(G, 0, 3) ? G->var[rnd(G, 0, NV - 1)] : C(ctx, gen_const(G));
    kiln_expr a = gen_int(G, depth - 1);
    int       op = (int)rnd(G, 0, 12);
    switch (op) {
    case 0:
    case 1:
        return kiln_add(ctx, a, gen_int(G, depth - 1));
    case 2:
        return kiln_sub(ctx, a, gen_int(G, depth - 1));
    case 3:
        return kiln_mul(ctx, a, C(ctx, rnd(G, 0, 4) ? rnd(G, -6, 6) : gen_const(G)));
    case 4:
        return kiln_mul(ctx, a, gen_int(G, depth - 1));
    case 5:
    case 6:
        return kiln_binary(ctx, op == 5 ? KILN_OP_FLOORDIV : KILN_OP_FLOORMOD, a,
                           gen_divisor(G, depth));
    case 7:
        return kiln_min(ctx, a, gen_int(G, depth - 1));
    case 8:
        return kiln_max(ctx, a, gen_int(G, depth - 1));
    case 9:
        return kiln_unary(ctx, rnd(G, 0, 1) ? KILN_OP_NEG : KILN_OP_ABS, a);
    case 10:
        return kiln_select(ctx, gen_bool(G, depth - 1), a, gen_int(G, depth - 1));
    default:
        return kiln_cast(ctx, KILN_DTYPE_I64, kiln_lt(ctx, a, gen_int(G, depth - 1)));
    }
}

static void
random_ranges(struct gen *G, struct rng_env *R)
{
    static const char *const names[NV] = {"x", "y", "z"};
    R->ctx = G->ctx;
    for (int i = 0; i < NV; i++) {
        R->var[i] = V(G->ctx, names[i]);
        R->lo[i] = rnd(G, -6, 6);
        R->hi[i] = R->lo[i] + rnd(G, 0, 4);
    }
}

/* ---- intervals against brute force ---- */

struct ival_case {
    kiln_expr        e;
    struct kiln_ival b, x;
    bool             exact;
    int64_t          bad;
    bool             hit; /* some point evaluated */
};

static bool
ival_point(struct rng_env *R, void *ud)
{
    struct ival_case *K = ud;
    int64_t           v;
    if (!ev(R, K->e, &v))
        return true;
    K->hit = true;
    if (v < K->b.lo || v > K->b.hi || (K->exact && (v < K->x.lo || v > K->x.hi))) {
        K->bad = v;
        return false;
    }
    return true;
}

/* e in prefix form: (add x (mul y 3)) */
static void
show(kiln_ctx *ctx, kiln_expr e)
{
    const struct kiln_node *n = kiln_node_get(ctx, e);
    if (n->op == KILN_OP_INT) {
        printf("%lld", (long long)n->imm);
        return;
    }
    if (n->op == KILN_OP_VAR) {
        printf("%s", kiln_sym_str(ctx, kiln_var_index(n->imm)));
        return;
    }
    printf("(%s", kiln_op_name[n->op]);
    for (int i = 0; i < kiln_op_arity[n->op]; i++) {
        printf(" ");
        show(ctx, (kiln_expr){n->kid[i]});
    }
    printf(")");
}

static void
print_case(const char *what, uint64_t seed, const struct rng_env *R, kiln_ctx *ctx, kiln_expr e)
{
    printf("seed %llu: %s at x=%lld y=%lld z=%lld (x in [%lld, %lld], y in [%lld, %lld], z in "
           "[%lld, %lld])\n  ",
           (unsigned long long)seed, what, (long long)R->val[0], (long long)R->val[1],
           (long long)R->val[2], (long long)R->lo[0], (long long)R->hi[0], (long long)R->lo[1],
           (long long)R->hi[1], (long long)R->lo[2], (long long)R->hi[2]);
    show(ctx, e);
    printf("\n");
}

static void
test_ival_random(void)
{
    uint64_t n = opt_iters_or(3000), hit = 0, exact = 0;
    for (uint64_t it = 0; it < n; it++) {
        uint64_t       seed = opt_seed() * 1000003u + it;
        kiln_ctx      *ctx = kiln_ctx_new(NULL);
        struct rng_env R;
        struct gen     G = {ctx, kiln_rng_new(seed), R.var};
        random_ranges(&G, &R);
        struct ival_case           K = {.e = gen_int(&G, (int)rnd(&G, 1, 5))};
        struct kiln_ival_env       env = {ctx, bound_var, NULL, &R};
        struct kiln_ival_exact_env xenv = {ctx, exact_var, NULL, &R};
        if (!K.e.id) {
            printf("seed %llu: %s\n", (unsigned long long)seed, kiln_ctx_error(ctx)->msg);
            CHECK(false);
        }
        K.b = kiln_ival_bound(&env, K.e);
        K.exact = kiln_ival_exact(&xenv, K.e, &K.x);
        CHECK(K.b.lo <= K.b.hi);
        CHECK(!K.exact || K.x.lo <= K.x.hi);
        if (!each_point(&R, ival_point, &K)) {
            print_case("value outside its interval", seed, &R, ctx, K.e);
            printf("  value %lld, bound [%lld, %lld], exact %s [%lld, %lld]\n", (long long)K.bad,
                   (long long)K.b.lo, (long long)K.b.hi, K.exact ? "yes" : "no", (long long)K.x.lo,
                   (long long)K.x.hi);
            CHECK(false);
        }
        hit += K.hit;
        exact += K.exact;
        kiln_ctx_free(ctx);
    }
    CHECK(n < 500 || hit > n / 2);
    CHECK(n < 500 || exact > n / 10);
}

static void
test_ival_exact(void)
{
    kiln_ctx                  *ctx = kiln_ctx_new(NULL);
    struct rng_env             R = {.ctx = ctx};
    struct kiln_ival_exact_env xenv = {ctx, exact_var, NULL, &R};
    struct kiln_ival           x;
    kiln_expr                  i = V(ctx, "i"), u = V(ctx, "u");
    R.var[0] = i;
    R.lo[0] = 0;
    R.hi[0] = 1;
    R.var[1] = R.var[2] = (kiln_expr){0};
    /* ends at INT64_MAX are exact values, not infinities */
    kiln_expr e = kiln_sub(ctx, kiln_add(ctx, i, C(ctx, INT64_MAX - 1)), C(ctx, INT64_MAX - 1));
    CHECK(kiln_ival_exact(&xenv, e, &x) && ival_eq(x, 0, 1));
    /* overflow: no interval at all */
    CHECK(!kiln_ival_exact(&xenv, kiln_add(ctx, i, C(ctx, INT64_MAX)), &x));
    CHECK(!kiln_ival_exact(&xenv, kiln_mul(ctx, i, kiln_mul(ctx, u, C(ctx, 2))), &x));
    /* an unbounded operand poisons even where saturating bounds would not */
    CHECK(!kiln_ival_exact(&xenv, kiln_floormod(ctx, u, C(ctx, 4)), &x));
    struct kiln_ival_env env = {ctx, bound_var, NULL, &R};
    CHECK(ival_eq(kiln_ival_bound(&env, kiln_floormod(ctx, u, C(ctx, 4))), 0, 3));
    /* comparisons are [0, 1], select the union of its branches */
    kiln_expr s = kiln_select(ctx, kiln_lt(ctx, i, C(ctx, 5)), C(ctx, 3), C(ctx, 9));
    CHECK(kiln_ival_exact(&xenv, s, &x) && ival_eq(x, 3, 9));
    CHECK(ival_eq(kiln_ival_bound(&env, s), 3, 3)); /* decided by the saturating bounds */
    /* a clamp bounds an operand without an interval (a float cast): min(max(i64(f), 0), 7) */
    kiln_expr f = kiln_cast(
        ctx, KILN_DTYPE_I64,
        kiln_mul(ctx, kiln_cast(ctx, KILN_DTYPE_F64, i), kiln_float(ctx, 2.5, KILN_DTYPE_F64)));
    CHECK(!kiln_ival_exact(&xenv, f, &x));
    CHECK(kiln_ival_exact(&xenv, kiln_max(ctx, f, C(ctx, 0)), &x) && ival_eq(x, 0, INT64_MAX));
    CHECK(kiln_ival_exact(&xenv, kiln_min(ctx, kiln_max(ctx, f, C(ctx, 0)), C(ctx, 7)), &x)
          && ival_eq(x, 0, 7));
    CHECK(!kiln_ival_exact(&xenv, kiln_add(ctx, kiln_max(ctx, f, C(ctx, 0)), C(ctx, 1)), &x));
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

/* ---- affine forms ---- */

struct form {
    const kiln_ctx *ctx;
    kiln_expr       atom[32];
    int64_t         k[32];
    uint32_t        n;
};

static bool
form_term(void *ud, kiln_expr atom, int64_t k)
{
    struct form *F = ud;
    for (uint32_t i = 0; i < F->n; i++)
        if (F->atom[i].id == atom.id)
            return !kiln_add_overflows(F->k[i], k, &F->k[i]);
    if (F->n == KILN_COUNTOF(F->atom))
        return false;
    F->atom[F->n] = atom;
    F->k[F->n++] = k;
    return true;
}

static bool
is_affine_op(const kiln_ctx *ctx, kiln_expr e)
{
    const struct kiln_node *n = kiln_node_get(ctx, e);
    int64_t                 v;
    if (n->op == KILN_OP_ADD || n->op == KILN_OP_SUB || n->op == KILN_OP_NEG
        || n->op == KILN_OP_INT)
        return true;
    return n->op == KILN_OP_MUL
           && (kiln_expr_is_int(ctx, (kiln_expr){n->kid[0]}, &v)
               || kiln_expr_is_int(ctx, (kiln_expr){n->kid[1]}, &v));
}

struct affine_case {
    kiln_expr    e;
    struct form *F;
    int64_t      c;
    bool         mismatch;
};

static bool
affine_point(struct rng_env *R, void *ud)
{
    struct affine_case *A = ud;
    int64_t             want, sum = A->c, t;
    if (!ev(R, A->e, &want))
        return true;
    for (uint32_t i = 0; i < A->F->n; i++) {
        if (!ev(R, A->F->atom[i], &t) || kiln_mul_overflows(t, A->F->k[i], &t)
            || kiln_add_overflows(sum, t, &sum))
            return true; /* the form's arithmetic leaves int64 here: no claim */
    }
    A->mismatch = sum != want;
    return !A->mismatch;
}

static void
test_affine_random(void)
{
    uint64_t n = opt_iters_or(3000), ok = 0, refused = 0;
    for (uint64_t it = 0; it < n; it++) {
        uint64_t       seed = opt_seed() * 7919u + it;
        kiln_ctx      *ctx = kiln_ctx_new(NULL);
        struct rng_env R;
        struct gen     G = {ctx, kiln_rng_new(seed), R.var};
        random_ranges(&G, &R);
        struct form           F = {.ctx = ctx};
        struct affine_case    A = {.e = gen_int(&G, (int)rnd(&G, 1, 5)), .F = &F};
        struct kiln_affine_fn fn = {NULL, form_term, &F};
        if (!kiln_affine(ctx, A.e, 1, &A.c, &fn)) {
            refused++;
            kiln_ctx_free(ctx);
            continue;
        }
        ok++;
        /* the atoms are what the form could not read: never an affine operator */
        for (uint32_t i = 0; i < F.n; i++)
            if (is_affine_op(ctx, F.atom[i])) {
                print_case("an affine node left as an atom", seed, &R, ctx, A.e);
                CHECK(false);
            }
        if (!each_point(&R, affine_point, &A)) {
            print_case("form differs from the expression", seed, &R, ctx, A.e);
            CHECK(false);
        }
        kiln_ctx_free(ctx);
    }
    CHECK(n < 500 || ok > n / 2);
    CHECK(n < 500 || refused > 0); /* the huge constants overflow some forms */
}

static void
test_affine(void)
{
    kiln_ctx             *ctx = kiln_ctx_new(NULL);
    kiln_expr             x = V(ctx, "x"), y = V(ctx, "y");
    struct form           F = {.ctx = ctx};
    struct kiln_affine_fn fn = {NULL, form_term, &F};
    int64_t               c = 0;
    /* 3*(x - 2*y + 4) - (x // 2) + x*y  ->  3x - 6y - (x//2) + (x*y) + 12 */
    kiln_expr xd = kiln_floordiv(ctx, x, C(ctx, 2)), xy = kiln_mul(ctx, x, y);
    kiln_expr e = kiln_add(
        ctx,
        kiln_sub(ctx,
                 kiln_mul(ctx,
                          kiln_add(ctx, kiln_sub(ctx, x, kiln_mul(ctx, y, C(ctx, 2))), C(ctx, 4)),
                          C(ctx, 3)),
                 xd),
        xy);
    CHECK(kiln_affine(ctx, e, 1, &c, &fn));
    CHECK_EQ_INT(12, c);
    CHECK_EQ_INT(4, F.n);
    for (uint32_t i = 0; i < F.n; i++) {
        int64_t want = F.atom[i].id == x.id ? 3 : F.atom[i].id == y.id ? -6 : -1;
        if (F.atom[i].id == xy.id)
            want = 1;
        CHECK(F.atom[i].id == x.id || F.atom[i].id == y.id || F.atom[i].id == xd.id
              || F.atom[i].id == xy.id);
        CHECK_EQ_INT(want, F.k[i]);
    }
    /* a scale multiplies everything */
    F.n = 0;
    c = 0;
    CHECK(kiln_affine(ctx, kiln_add(ctx, x, C(ctx, 1)), -5, &c, &fn));
    CHECK_EQ_INT(-5, c);
    CHECK(F.n == 1 && F.atom[0].id == x.id && F.k[0] == -5);
    /* overflow refuses, never wraps */
    F.n = 0;
    c = 0;
    CHECK(!kiln_affine(
        ctx, kiln_mul(ctx, kiln_mul(ctx, x, C(ctx, (int64_t)1 << 40)), C(ctx, (int64_t)1 << 40)), 1,
        &c, &fn));
    F.n = 0;
    c = 0;
    CHECK(!kiln_affine(ctx, kiln_add(ctx, x, C(ctx, INT64_MAX)), 2, &c, &fn));
    /* i32 arithmetic wraps: it is an atom */
    kiln_expr n32 = kiln_var_named(ctx, kiln_sym_cstr(ctx, "n"), KILN_DTYPE_I32);
    kiln_expr s32 = kiln_add(ctx, n32, kiln_int(ctx, 1, KILN_DTYPE_I32));
    F.n = 0;
    c = 0;
    CHECK(kiln_affine(ctx, s32, 1, &c, &fn));
    CHECK(F.n == 1 && F.atom[0].id == s32.id && c == 0);
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

/* ---- strides ---- */

struct stride_case {
    kiln_expr e;
    int       slot;
    int64_t   k;
    bool      mismatch;
};

static bool
stride_point(struct rng_env *R, void *ud)
{
    struct stride_case *S = ud;
    int64_t             a, b, d, want;
    if (R->val[S->slot] == R->hi[S->slot] || !ev(R, S->e, &a))
        return true;
    R->val[S->slot]++;
    bool ok = ev(R, S->e, &b);
    R->val[S->slot]--;
    if (!ok || b == INT64_MIN || kiln_add_overflows(b, -a, &d))
        return true;
    want = S->k;
    S->mismatch = d != want;
    return !S->mismatch;
}

static void
test_stride_random(void)
{
    uint64_t n = opt_iters_or(3000), found = 0;
    for (uint64_t it = 0; it < n; it++) {
        uint64_t       seed = opt_seed() * 104729u + it;
        kiln_ctx      *ctx = kiln_ctx_new(NULL);
        struct rng_env R;
        struct gen     G = {ctx, kiln_rng_new(seed), R.var};
        random_ranges(&G, &R);
        struct stride_case S = {.e = gen_int(&G, (int)rnd(&G, 1, 4)),
                                .slot = (int)rnd(&G, 0, NV - 1)};
        int64_t            lim = rnd(&G, 0, 1) ? 0 : 64, k0;
        if (!kiln_affine_stride(ctx, S.e, R.var[S.slot], lim, &S.k)) {
            kiln_ctx_free(ctx);
            continue;
        }
        found++;
        CHECK(lim == 0 || (S.k > -lim && S.k < lim));
        /* the same coefficient as the affine form's */
        if (kiln_affine_stride(ctx, S.e, R.var[S.slot], 0, &k0))
            CHECK_EQ_INT(k0, S.k);
        if (!each_point(&R, stride_point, &S)) {
            print_case("stride differs from the finite difference", seed, &R, ctx, S.e);
            printf("  stride %lld along %c\n", (long long)S.k, "xyz"[S.slot]);
            CHECK(false);
        }
        kiln_ctx_free(ctx);
    }
    CHECK(n < 500 || found > n / 4);
}

static void
test_stride(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    kiln_expr v = V(ctx, "v"), w = V(ctx, "w");
    int64_t   k;
    /* (w*8 + v)*4 - v + 3 */
    kiln_expr e = kiln_add(
        ctx,
        kiln_sub(ctx, kiln_mul(ctx, kiln_add(ctx, kiln_mul(ctx, w, C(ctx, 8)), v), C(ctx, 4)), v),
        C(ctx, 3));
    CHECK(kiln_affine_stride(ctx, e, v, 0, &k) && k == 3);
    CHECK(kiln_affine_stride(ctx, e, w, 0, &k) && k == 32);
    CHECK(kiln_affine_stride(ctx, kiln_unary(ctx, KILN_OP_NEG, e), v, 0, &k) && k == -3);
    /* terms free of v are not looked into, even non-affine ones */
    kiln_expr f = kiln_add(ctx, v, kiln_floordiv(ctx, kiln_mul(ctx, w, w), C(ctx, 3)));
    CHECK(kiln_affine_stride(ctx, f, v, 0, &k) && k == 1);
    CHECK(kiln_affine_stride(ctx, f, V(ctx, "u"), 0, &k) && k == 0);
    /* v not affinely: refused */
    CHECK(!kiln_affine_stride(ctx, kiln_floordiv(ctx, v, C(ctx, 2)), v, 0, &k));
    CHECK(!kiln_affine_stride(ctx, kiln_mul(ctx, v, w), v, 0, &k));
    CHECK(!kiln_affine_stride(ctx, kiln_add(ctx, f, kiln_min(ctx, v, C(ctx, 4))), v, 0, &k));
    /* the limit bounds every coefficient and factor on the way */
    CHECK(kiln_affine_stride(ctx, e, w, 64, &k) && k == 32);
    CHECK(!kiln_affine_stride(ctx, e, w, 32, &k));
    CHECK(!kiln_affine_stride(ctx, kiln_mul(ctx, v, C(ctx, (int64_t)1 << 40)), v, 1 << 20, &k));
    /* overflow refuses */
    CHECK(!kiln_affine_stride(
        ctx, kiln_mul(ctx, kiln_mul(ctx, v, C(ctx, (int64_t)1 << 40)), C(ctx, (int64_t)1 << 40)), v,
        0, &k));
    CHECK(kiln_expr_uses(ctx, f, w) && !kiln_expr_uses(ctx, f, V(ctx, "u")));
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

static const struct test tests[] = {
    {"ival_ops", test_ival_ops},           {"ival_exact", test_ival_exact},
    {"ival_random", test_ival_random},     {"affine", test_affine},
    {"affine_random", test_affine_random}, {"stride", test_stride},
    {"stride_random", test_stride_random},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
