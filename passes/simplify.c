/* passes/simplify.c -- the arithmetic simplifier: canonical affine forms of index
 * expressions and the rewrite rules that use them (bounds: simplify_bounds.c; statements:
 * simplify_stmt.c).
 *
 * Integer index expressions (KILN_DTYPE_I64) are normalised to a *linear form*: a constant plus
 * a sum of coefficient x atom, where an atom is any subexpression that is not itself affine
 * (a variable, a load, floordiv/floormod/min/max/select/cast, a non-affine product), already
 * simplified. Terms are kept sorted by the atoms' structural hash (kiln_expr_hash), so the
 * expression rebuilt from a linear form does not depend on the order nodes were created in:
 * positive terms summed in atom order, minus the negative ones, plus the constant. The rules
 * (floordiv/floormod by constants, comparisons, min/max) work on linear forms and return linear
 * forms or atoms that are, by construction, fixed points of the rules; that is what makes the
 * simplifier idempotent (simplify(simplify(e)) has the id of simplify(e)), and hash-consing
 * makes "no change" return the input's id. Arithmetic on index expressions is assumed not to
 * overflow (as in Halide and TVM); coefficient arithmetic is checked, and a node whose linear
 * form would overflow is kept as an opaque atom. Other dtypes are only rebuilt through the
 * builders (which fold constants): float arithmetic is never reassociated, so results stay
 * bit-exact; i8/i32 wrap, so they get no affine reasoning either. Everything is memoised per
 * environment (simplify_bounds.c). */
#include "simplify_int.h"

#include <stdlib.h>
#include <string.h>

static bool
is_i64(const struct simp *S, kiln_expr e)
{
    return kiln_expr_dtype(S->ctx, e) == KILN_DTYPE_I64;
}

static uint64_t
gcd_u(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static uint64_t
mag(int64_t v)
{
    return v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
}

/* gcd of |a| and |b| as int64; 0 when it is not representable (2^63) or both are 0 */
static int64_t
gcd64(int64_t a, int64_t b)
{
    uint64_t g = gcd_u(mag(a), mag(b));
    return g > (uint64_t)INT64_MAX ? 0 : (int64_t)g;
}

/* ---- linear forms ---- */

struct term {
    uint64_t h; /* structural hash of the atom: the sort key */
    uint32_t atom;
    int64_t  k; /* never 0 after normalisation */
};

struct lin {
    struct term *t;
    uint32_t     n, cap;
    int64_t      c;
};

static bool
lin_reserve(struct simp *S, struct lin *L, uint32_t need)
{
    if (need <= L->cap)
        return true;
    uint32_t     cap = L->cap ? 2 * L->cap : 8;
    struct term *t;
    while (cap < need)
        cap *= 2;
    t = kiln_simp_alloc(S, sizeof(*t) * cap);
    if (!t)
        return false;
    if (L->n)
        memcpy(t, L->t, sizeof(*t) * L->n);
    L->t = t;
    L->cap = cap;
    return true;
}

static bool
lin_term(struct simp *S, struct lin *L, kiln_expr atom, int64_t k)
{
    if (!k)
        return true;
    if (!lin_reserve(S, L, L->n + 1))
        return false;
    L->t[L->n++] = (struct term){kiln_expr_hash(S->ctx, atom), atom.id, k};
    return true;
}

/* L += k * M (unsorted); false on overflow or OOM */
static bool
lin_add(struct simp *S, struct lin *L, const struct lin *M, int64_t k)
{
    int64_t v;
    if (!mul_ok(M->c, k, &v) || !add_ok(L->c, v, &L->c))
        return false;
    if (!lin_reserve(S, L, L->n + M->n))
        return false;
    for (uint32_t i = 0; i < M->n; i++) {
        if (!mul_ok(M->t[i].k, k, &v))
            return false;
        L->t[L->n++] = (struct term){M->t[i].h, M->t[i].atom, v};
    }
    return true;
}

static bool
lin_scale(struct lin *L, int64_t k)
{
    if (!mul_ok(L->c, k, &L->c))
        return false;
    for (uint32_t i = 0; i < L->n; i++)
        if (!mul_ok(L->t[i].k, k, &L->t[i].k))
            return false;
    return true;
}

static int
term_cmp(const void *pa, const void *pb)
{
    const struct term *a = pa, *b = pb;
    if (a->h != b->h)
        return a->h < b->h ? -1 : 1;
    return a->atom < b->atom ? -1 : a->atom > b->atom;
}

static kiln_expr simp(struct simp *S, kiln_expr e);
static bool      lin_of(struct simp *S, kiln_expr e, struct lin *L);
static bool      lin_norm(struct simp *S, struct lin *L);

struct parse_ud {
    struct simp *S;
    struct lin  *L;
};

static bool
parse_term(void *ud, kiln_expr atom, int64_t k)
{
    struct parse_ud *u = ud;
    return lin_term(u->S, u->L, atom, k);
}

/* The linear form of a simplified expression (its affine top layer, kiln_affine); an expression
 * whose form overflows is one atom. */
static bool
parse(struct simp *S, kiln_expr e, struct lin *L)
{
    struct parse_ud       u = {S, L};
    struct kiln_affine_fn fn = {NULL, parse_term, &u};
    *L = (struct lin){0};
    if (!kiln_affine(S->ctx, e, 1, &L->c, &fn)) {
        if (!live(S))
            return false;
        *L = (struct lin){0};
        return lin_term(S, L, e, 1);
    }
    return lin_norm(S, L);
}

static bool smod(struct simp *S, const struct lin *L0, int64_t d, struct lin *out);

/* Whether y % c equals x % c for every value: y is x, or y is x % m with c dividing m. */
static bool
same_mod(const struct simp *S, kiln_expr y, kiln_expr x, int64_t c)
{
    int64_t m;
    if (y.id == x.id)
        return true;
    return op_of(S, y) == KILN_OP_FLOORMOD && kid(S, y, 0).id == x.id
           && kiln_expr_is_int(S->ctx, kid(S, y, 1), &m) && m > 0 && m % c == 0;
}

/* Recombines quotient/remainder pairs; c > 0 a constant:
 *   k*c*(x // c) + k*(y % c)  ->  k*x     when y % c == x % c (y is x, or x = y % m, c | m)
 *   k*x - k*c*(x // c)        ->  k*(x % c)  (every term of k*x present in L)
 * Returns 1 if it changed L, 0 if not, -1 on failure. */
static int
recombine(struct simp *S, struct lin *L)
{
    kiln_ctx *ctx = S->ctx;
    for (uint32_t i = 0; i < L->n; i++) {
        kiln_expr d = {L->t[i].atom};
        int64_t   c, want, kd = L->t[i].k;
        if (op_of(S, d) != KILN_OP_FLOORDIV || !kiln_expr_is_int(ctx, kid(S, d, 1), &c) || c <= 0)
            continue;
        kiln_expr x = kid(S, d, 0);
        for (uint32_t j = 0; j < L->n; j++) {
            kiln_expr m = {L->t[j].atom};
            if (op_of(S, m) != KILN_OP_FLOORMOD || kid(S, m, 1).id != kid(S, d, 1).id
                || !mul_ok(L->t[j].k, c, &want) || want != kd || !same_mod(S, x, kid(S, m, 0), c))
                continue;
            int64_t    k = L->t[j].k;
            struct lin X;
            if (!lin_of(S, x, &X))
                return -1;
            L->t[i].k = 0;
            L->t[j].k = 0;
            return lin_add(S, L, &X, k) ? 1 : -1;
        }
        if (kd % c != 0 || kd / c == INT64_MIN)
            continue;
        int64_t    k = -(kd / c), kc;
        struct lin X, M;
        uint32_t   found = 0;
        if (!lin_of(S, x, &X))
            return -1;
        for (uint32_t t = 0; t < X.n; t++)
            for (uint32_t j = 0; j < L->n; j++)
                if (L->t[j].atom == X.t[t].atom && mul_ok(k, X.t[t].k, &want)
                    && L->t[j].k == want) {
                    found++;
                    break;
                }
        int64_t nc;
        if (!X.n || found != X.n || !mul_ok(k, X.c, &kc) || kc == INT64_MIN
            || !add_ok(L->c, -kc, &nc))
            continue;
        L->c = nc;
        for (uint32_t t = 0; t < X.n; t++)
            for (uint32_t j = 0; j < L->n; j++)
                if (L->t[j].atom == X.t[t].atom) {
                    L->t[j].k = 0;
                    break;
                }
        L->t[i].k = 0;
        if (!smod(S, &X, c, &M))
            return -1;
        return lin_add(S, L, &M, k) ? 1 : -1;
    }
    return 0;
}

/* Sorts terms by atom, merges equal atoms, drops zero terms, recombines div/mod pairs. */
static bool
lin_norm(struct simp *S, struct lin *L)
{
    for (;;) {
        if (L->n > 1)
            qsort(L->t, L->n, sizeof(*L->t), term_cmp);
        uint32_t w = 0;
        for (uint32_t i = 0; i < L->n; i++) {
            if (w && L->t[w - 1].atom == L->t[i].atom) {
                if (!add_ok(L->t[w - 1].k, L->t[i].k, &L->t[w - 1].k))
                    return false;
            } else {
                L->t[w++] = L->t[i];
            }
            if (!L->t[w - 1].k)
                w--;
        }
        L->n = w;
        int r = recombine(S, L);
        if (r < 0)
            return false;
        if (!r)
            return true;
    }
}

static struct kiln_ival
lin_bound(struct simp *S, const struct lin *L)
{
    struct kiln_ival v = {L->c, L->c};
    for (uint32_t i = 0; i < L->n && (v.lo != NINF || v.hi != PINF); i++)
        v = kiln_ival_add(
            v, kiln_ival_scale(kiln_simp_bound(S, (kiln_expr){L->t[i].atom}), L->t[i].k));
    return v;
}

/* Rebuilds the canonical expression of L (which must be normalised). */
static kiln_expr
build(struct simp *S, const struct lin *L)
{
    kiln_ctx *ctx = S->ctx;
    kiln_expr p = {0}, m = {0};
    for (uint32_t i = 0; i < L->n; i++) {
        int64_t   k = L->t[i].k;
        kiln_expr a = {L->t[i].atom};
        if (k == INT64_MIN)
            return (kiln_expr){0};
        kiln_expr t = k == 1 || k == -1 ? a : kiln_mul(ctx, a, kiln_idx(ctx, k > 0 ? k : -k));
        if (k > 0)
            p = p.id ? kiln_add(ctx, p, t) : t;
        else
            m = m.id ? kiln_add(ctx, m, t) : t;
    }
    if (!p.id && !m.id)
        return kiln_idx(ctx, L->c);
    if (!p.id) {
        if (L->c)
            return kiln_sub(ctx, kiln_idx(ctx, L->c), m);
        return kiln_unary(ctx, KILN_OP_NEG, m);
    }
    kiln_expr e = m.id ? kiln_sub(ctx, p, m) : p;
    return L->c ? kiln_add(ctx, e, kiln_idx(ctx, L->c)) : e;
}

/* Adds k * atom to L where atom is a freshly built, rule-closed expression: constants and
 * atoms with a single possible value fold into the constant. */
static bool
add_atom(struct simp *S, struct lin *L, kiln_expr atom, int64_t k)
{
    int64_t v;
    if (!atom.id)
        return false;
    if (!kiln_expr_is_int(S->ctx, atom, &v)) {
        struct kiln_ival b = kiln_simp_bound(S, atom);
        if (b.lo != b.hi || b.lo == NINF || b.lo == PINF) {
            if (!kiln_simp_memo_put(S, atom, atom)) /* rule-closed: a fixed point */
                return false;
            return lin_term(S, L, atom, k);
        }
        v = b.lo;
    }
    return mul_ok(v, k, &v) && add_ok(L->c, v, &L->c);
}

/* L = parse(simplify(e)) */
static bool
lin_of(struct simp *S, kiln_expr e, struct lin *L)
{
    kiln_expr s = simp(S, e);
    if (!s.id)
        return false;
    return parse(S, s, L);
}

static bool
lin_copy(struct simp *S, struct lin *dst, const struct lin *src)
{
    *dst = (struct lin){0};
    return lin_add(S, dst, src, 1);
}

/* Distinct gcd(k_i, d) values in (1, d) for the terms of R, descending. */
static uint32_t
divisor_candidates(const struct lin *R, int64_t d, int64_t *g, uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < R->n; i++) {
        int64_t v = gcd64(R->t[i].k, d);
        bool    dup = v <= 1 || v >= d;
        for (uint32_t j = 0; j < n && !dup; j++)
            dup = g[j] == v;
        if (!dup && n < max)
            g[n++] = v;
    }
    for (uint32_t i = 1; i < n; i++) /* insertion sort, descending */
        for (uint32_t j = i; j > 0 && g[j - 1] < g[j]; j--) {
            int64_t t = g[j];
            g[j] = g[j - 1];
            g[j - 1] = t;
        }
    return n;
}

/* Splits R (constant excluded) into R1 = terms whose coefficient g divides, and the rest R2
 * (with R's constant). */
static bool
split_by(struct simp *S, const struct lin *R, int64_t g, struct lin *R1, struct lin *R2)
{
    *R1 = (struct lin){0};
    *R2 = (struct lin){.c = R->c};
    for (uint32_t i = 0; i < R->n; i++) {
        struct lin *D = R->t[i].k % g == 0 ? R1 : R2;
        if (!lin_reserve(S, D, D->n + 1))
            return false;
        D->t[D->n++] = R->t[i];
    }
    return true;
}

/* (R1 + q*g) / g, all of R1's coefficients being multiples of g */
static void
divide_exact(struct lin *R1, int64_t g, int64_t q)
{
    for (uint32_t i = 0; i < R1->n; i++)
        R1->t[i].k /= g;
    R1->c = q;
}

static bool sdiv(struct simp *S, const struct lin *L0, int64_t d, struct lin *out);
static bool smod(struct simp *S, const struct lin *L0, int64_t d, struct lin *out);

/* out = floordiv(L0, d) as a linear form, d != 0. */
static bool
sdiv(struct simp *S, const struct lin *L0, int64_t d, struct lin *out)
{
    kiln_ctx  *ctx = S->ctx;
    struct lin L, R = {0};
    *out = (struct lin){0};
    if (d == INT64_MIN)
        return false;
    if (!lin_copy(S, &L, L0))
        return false;
    if (d < 0) { /* floor(x / d) = floor(-x / -d) */
        if (!lin_scale(&L, -1))
            return false;
        d = -d;
    }
    if (d == 1)
        return lin_add(S, out, &L, 1);
    /* terms with coefficients divisible by d leave the division */
    for (uint32_t i = 0; i < L.n; i++) {
        struct lin *D = L.t[i].k % d == 0 ? out : &R;
        int64_t     k = L.t[i].k % d == 0 ? L.t[i].k / d : L.t[i].k;
        if (!lin_reserve(S, D, D->n + 1))
            return false;
        D->t[D->n++] = (struct term){L.t[i].h, L.t[i].atom, k};
    }
    out->c = kiln_scalar_floordiv(L.c, d);
    R.c = kiln_scalar_floormod(L.c, d);
    if (!R.n)
        return true;
    /* decided by bounds */
    struct kiln_ival b = lin_bound(S, &R);
    if (kiln_ival_finite(b) && kiln_scalar_floordiv(b.lo, d) == kiln_scalar_floordiv(b.hi, d))
        return add_ok(out->c, kiln_scalar_floordiv(b.lo, d), &out->c);
    /* (g*A + B) // d = (A + q) // (d/g) when g | d and B in [q*g, q*g + g) */
    int64_t  cand[16];
    uint32_t nc = divisor_candidates(&R, d, cand, 16);
    for (uint32_t i = 0; i < nc; i++) {
        struct lin R1, R2, sub;
        int64_t    g = cand[i];
        if (!split_by(S, &R, g, &R1, &R2))
            return false;
        struct kiln_ival b2 = lin_bound(S, &R2);
        if (!R1.n || !kiln_ival_finite(b2)
            || kiln_scalar_floordiv(b2.lo, g) != kiln_scalar_floordiv(b2.hi, g))
            continue;
        divide_exact(&R1, g, kiln_scalar_floordiv(b2.lo, g));
        return sdiv(S, &R1, d / g, &sub) && lin_add(S, out, &sub, 1);
    }
    /* (x // a + r) // d = (x + r*a) // (a*d) for a > 0 */
    if (R.n == 1 && R.t[0].k == 1) {
        kiln_expr at = {R.t[0].atom};
        int64_t   a, ad, ra;
        if (op_of(S, at) == KILN_OP_FLOORDIV && kiln_expr_is_int(ctx, kid(S, at, 1), &a) && a > 0
            && mul_ok(a, d, &ad) && mul_ok(R.c, a, &ra)) {
            struct lin X, sub;
            if (!lin_of(S, kid(S, at, 0), &X))
                return false;
            if (add_ok(X.c, ra, &X.c))
                return sdiv(S, &X, ad, &sub) && lin_add(S, out, &sub, 1);
        }
    }
    kiln_expr num = build(S, &R);
    return num.id && add_atom(S, out, kiln_floordiv(ctx, num, kiln_idx(ctx, d)), 1);
}

/* out = floormod(L0, d) as a linear form, d != 0. */
static bool
smod(struct simp *S, const struct lin *L0, int64_t d, struct lin *out)
{
    kiln_ctx  *ctx = S->ctx;
    struct lin L, R = {0};
    *out = (struct lin){0};
    if (d == INT64_MIN)
        return false;
    if (d < 0) { /* x mod d = -((-x) mod -d) */
        struct lin N;
        if (!lin_copy(S, &N, L0) || !lin_scale(&N, -1) || !smod(S, &N, -d, out))
            return false;
        return lin_scale(out, -1);
    }
    if (d == 1)
        return true;
    if (!lin_copy(S, &L, L0))
        return false;
    /* k * (x mod a) = k * x (mod d) when d divides k*a */
    for (bool again = true; again;) {
        again = false;
        for (uint32_t i = 0; i < L.n && !again; i++) {
            kiln_expr at = {L.t[i].atom};
            int64_t   a, ka;
            if (op_of(S, at) != KILN_OP_FLOORMOD || !kiln_expr_is_int(ctx, kid(S, at, 1), &a)
                || a <= 0 || !mul_ok(L.t[i].k, a, &ka) || ka % d != 0)
                continue;
            struct lin X;
            int64_t    k = L.t[i].k;
            if (!lin_of(S, kid(S, at, 0), &X))
                return false;
            L.t[i].k = 0;
            if (!lin_add(S, &L, &X, k) || !lin_norm(S, &L))
                return false;
            again = true;
        }
    }
    for (uint32_t i = 0; i < L.n; i++)
        if (L.t[i].k % d != 0) {
            if (!lin_reserve(S, &R, R.n + 1))
                return false;
            R.t[R.n++] = L.t[i];
        }
    R.c = kiln_scalar_floormod(L.c, d);
    if (!R.n) {
        out->c = R.c;
        return true;
    }
    struct kiln_ival b = lin_bound(S, &R);
    if (kiln_ival_finite(b)
        && kiln_scalar_floordiv(b.lo, d)
               == kiln_scalar_floordiv(b.hi, d)) { /* one period: subtract q*d */
        int64_t qd;
        if (!mul_ok(kiln_scalar_floordiv(b.lo, d), d, &qd) || qd == INT64_MIN
            || !add_ok(R.c, -qd, &R.c))
            return false;
        return lin_add(S, out, &R, 1);
    }
    /* (g*A + B) mod d = g*((A + q) mod (d/g)) + B - q*g when g | d and B in [q*g, q*g + g) */
    int64_t  cand[16];
    uint32_t nc = divisor_candidates(&R, d, cand, 16);
    for (uint32_t i = 0; i < nc; i++) {
        struct lin R1, R2, sub;
        int64_t    g = cand[i], q, qg;
        if (!split_by(S, &R, g, &R1, &R2))
            return false;
        struct kiln_ival b2 = lin_bound(S, &R2);
        if (!R1.n || !kiln_ival_finite(b2)
            || kiln_scalar_floordiv(b2.lo, g) != kiln_scalar_floordiv(b2.hi, g))
            continue;
        q = kiln_scalar_floordiv(b2.lo, g);
        if (!mul_ok(q, g, &qg) || qg == INT64_MIN || !add_ok(R2.c, -qg, &R2.c))
            return false;
        divide_exact(&R1, g, q);
        return smod(S, &R1, d / g, &sub) && lin_scale(&sub, g) && lin_add(S, out, &sub, 1)
               && lin_add(S, out, &R2, 1);
    }
    kiln_expr num = build(S, &R);
    return num.id && add_atom(S, out, kiln_floormod(ctx, num, kiln_idx(ctx, d)), 1);
}

/* ---- node rules ---- */

/* Simplifies the operands and rebuilds (the rule for everything without a better one). */
static kiln_expr
simp_kids(struct simp *S, kiln_expr e)
{
    const struct kiln_node n = S->ctx->node[e.id];
    kiln_expr              k[3] = {{0}, {0}, {0}};
    bool                   changed = false;
    for (int i = 0; i < kiln_op_arity[n.op]; i++) {
        k[i] = simp(S, (kiln_expr){n.kid[i]});
        if (!k[i].id)
            return k[i];
        changed |= k[i].id != n.kid[i];
    }
    return changed ? kiln_expr_rebuild(S->ctx, e, k) : e;
}

/* Index lists of loads and stores: each index simplified. */
static kiln_expr
simp_indices(struct simp *S, kiln_expr list, uint32_t *n, kiln_expr **out, bool *changed)
{
    kiln_ctx *ctx = S->ctx;
    uint32_t  cnt = 0;
    for (uint32_t l = list.id; l; l = ctx->node[l].kid[1])
        cnt++;
    kiln_expr *idx = kiln_simp_alloc(S, sizeof(kiln_expr) * (cnt ? cnt : 1));
    if (!idx)
        return (kiln_expr){0};
    uint32_t i = 0;
    *changed = false;
    for (uint32_t l = list.id; l; l = ctx->node[l].kid[1], i++) {
        kiln_expr x = {ctx->node[l].kid[0]};
        idx[i] = simp(S, x);
        if (!idx[i].id)
            return idx[i];
        *changed |= idx[i].id != x.id;
    }
    *n = cnt;
    *out = idx;
    return list;
}

static kiln_expr
simp_load(struct simp *S, kiln_expr e)
{
    kiln_ctx  *ctx = S->ctx;
    uint32_t   n = 0;
    kiln_expr *idx = NULL;
    bool       changed;
    if (!simp_indices(S, kid(S, e, 0), &n, &idx, &changed).id)
        return (kiln_expr){0};
    if (!changed)
        return e;
    const struct kiln_node *nd = &ctx->node[e.id];
    return kiln_load(ctx, (uint32_t)nd->imm, (enum kiln_dtype)nd->dtype, n, idx);
}

static kiln_expr
simp_list(struct simp *S, kiln_expr e)
{
    uint32_t   n = 0;
    kiln_expr *idx = NULL;
    bool       changed;
    if (!simp_indices(S, e, &n, &idx, &changed).id)
        return (kiln_expr){0};
    return changed ? kiln_index_list(S->ctx, n, idx) : e;
}

/* Content of L: L = g * L' with L' having coprime coefficients and a positive first term. */
static int64_t
content(const struct lin *L)
{
    uint64_t g = mag(L->c);
    for (uint32_t i = 0; i < L->n; i++)
        g = gcd_u(g, mag(L->t[i].k));
    if (g == 0 || g > (uint64_t)INT64_MAX)
        return 1;
    return L->n && L->t[0].k < 0 ? -(int64_t)g : (int64_t)g;
}

static void
divide_content(struct lin *L, int64_t g)
{
    L->c /= g;
    for (uint32_t i = 0; i < L->n; i++)
        L->t[i].k /= g;
}

/* L = L * M; a non-affine product becomes the atom content(L)*content(M) * (L' * M'). */
static bool
lin_mul(struct simp *S, struct lin *L, struct lin *M)
{
    if (!M->n)
        return lin_scale(L, M->c);
    if (!L->n) {
        int64_t c = L->c;
        *L = *M;
        return lin_scale(L, c);
    }
    int64_t ga = content(L), gb = content(M), g;
    if (!mul_ok(ga, gb, &g))
        return false;
    divide_content(L, ga);
    divide_content(M, gb);
    kiln_expr a = build(S, L), b = build(S, M);
    if (!a.id || !b.id)
        return false;
    *L = (struct lin){0};
    return add_atom(S, L, kiln_mul(S->ctx, a, b), g);
}

static kiln_expr
simp_affine(struct simp *S, kiln_expr e)
{
    const struct kiln_node n = S->ctx->node[e.id];
    struct lin             L = {0}, M = {0};
    bool                   ok;
    if (n.op == KILN_OP_NEG)
        ok = lin_of(S, (kiln_expr){n.kid[0]}, &M) && lin_add(S, &L, &M, -1);
    else if (n.op == KILN_OP_MUL)
        ok = lin_of(S, (kiln_expr){n.kid[0]}, &L) && lin_of(S, (kiln_expr){n.kid[1]}, &M)
             && lin_mul(S, &L, &M);
    else /* ADD, SUB */
        ok = lin_of(S, (kiln_expr){n.kid[0]}, &L) && lin_of(S, (kiln_expr){n.kid[1]}, &M)
             && lin_add(S, &L, &M, n.op == KILN_OP_ADD ? 1 : -1);
    if (ok)
        ok = lin_norm(S, &L);
    if (!live(S))
        return (kiln_expr){0};
    if (!ok)
        return simp_kids(S, e);
    kiln_expr r = build(S, &L);
    return r.id || !live(S) ? r : simp_kids(S, e);
}

static kiln_expr
simp_divmod(struct simp *S, kiln_expr e)
{
    kiln_ctx    *ctx = S->ctx;
    enum kiln_op op = op_of(S, e);
    struct lin   L, out;
    kiln_expr    b = simp(S, kid(S, e, 1));
    int64_t      d;
    if (!b.id || !lin_of(S, kid(S, e, 0), &L))
        return (kiln_expr){0};
    if (kiln_expr_is_int(ctx, b, &d)) {
        if (d == 0) /* division by zero stays as written (it is not evaluated, or it traps) */
            return kiln_binary(ctx, op, build(S, &L), kid(S, e, 1));
        bool ok = op == KILN_OP_FLOORDIV ? sdiv(S, &L, d, &out) : smod(S, &L, d, &out);
        if (ok)
            ok = lin_norm(S, &out);
        if (!live(S))
            return (kiln_expr){0};
        if (ok) {
            kiln_expr r = build(S, &out);
            if (r.id || !live(S))
                return r;
        }
        return simp_kids(S, e);
    }
    /* symbolic divisor: 0 <= a < b decides both */
    struct kiln_ival ia = lin_bound(S, &L), ib = kiln_simp_bound(S, b);
    if (ib.lo >= 1 && ia.lo >= 0 && ia.hi < ib.lo)
        return op == KILN_OP_FLOORDIV ? kiln_idx(ctx, 0) : build(S, &L);
    kiln_expr a = build(S, &L);
    return a.id ? kiln_binary(ctx, op, a, b) : a;
}

static kiln_expr
simp_minmax(struct simp *S, kiln_expr e)
{
    kiln_ctx    *ctx = S->ctx;
    enum kiln_op op = op_of(S, e);
    struct lin   A, B, D = {0};
    if (!lin_of(S, kid(S, e, 0), &A) || !lin_of(S, kid(S, e, 1), &B))
        return (kiln_expr){0};
    if (lin_add(S, &D, &A, 1) && lin_add(S, &D, &B, -1) && lin_norm(S, &D)) {
        struct kiln_ival v = lin_bound(S, &D); /* a - b */
        if (v.hi != PINF && v.hi <= 0)
            return build(S, op == KILN_OP_MIN ? &A : &B);
        if (v.lo != NINF && v.lo >= 0)
            return build(S, op == KILN_OP_MIN ? &B : &A);
    }
    if (!live(S))
        return (kiln_expr){0};
    kiln_expr a = build(S, &A), b = build(S, &B);
    if (!a.id || !b.id)
        return (kiln_expr){0};
    /* min(min(x, c1), c2) -> min(x, min(c1, c2)) */
    int64_t c1, c2;
    if (B.n == 0 && op_of(S, a) == op && kiln_expr_is_int(ctx, kid(S, a, 1), &c1)) {
        c2 = B.c;
        int64_t c = op == KILN_OP_MIN ? (c1 < c2 ? c1 : c2) : (c1 > c2 ? c1 : c2);
        return simp(S, kiln_binary(ctx, op, kid(S, a, 0), kiln_idx(ctx, c)));
    }
    if (A.n == 0 && op_of(S, b) == op && kiln_expr_is_int(ctx, kid(S, b, 1), &c1)) {
        c2 = A.c;
        int64_t c = op == KILN_OP_MIN ? (c1 < c2 ? c1 : c2) : (c1 > c2 ? c1 : c2);
        return simp(S, kiln_binary(ctx, op, kid(S, b, 0), kiln_idx(ctx, c)));
    }
    return kiln_binary(ctx, op, a, b);
}

static kiln_expr
keep_cmp(struct simp *S, enum kiln_op op, const struct lin *A, const struct lin *B)
{
    kiln_expr a = build(S, A), b = build(S, B);
    return a.id && b.id ? kiln_binary(S->ctx, op, a, b) : (kiln_expr){0};
}

/* Comparison of i64 operands, canonicalised as  P < N + K  (or -K < N), P == N + K, and
 * P <= N + K when both sides keep terms. A `<=` becomes `<` only against a constant
 * (P <= K  ->  P < K + 1, K <= N  ->  K - 1 < N), where the +-1 folds exactly: rewriting
 * x <= y as x < y + 1 would add an overflow the input did not have (y = INT64_MAX). */
static kiln_expr
simp_cmp(struct simp *S, enum kiln_op op, kiln_expr ea, kiln_expr eb)
{
    kiln_ctx  *ctx = S->ctx;
    struct lin A, B, E = {0};
    if (!lin_of(S, ea, &A) || !lin_of(S, eb, &B))
        return (kiln_expr){0};
    bool ok = lin_add(S, &E, &A, 1) && lin_add(S, &E, &B, -1) && lin_norm(S, &E);
    if (!ok) /* overflow: keep the operands */
        return live(S) ? keep_cmp(S, op, &A, &B) : (kiln_expr){0};
    struct kiln_ival v = lin_bound(S, &E);
    bool             le = op == KILN_OP_LE;
    bool             lt = op == KILN_OP_LT || le; /* now E < 0, or E <= 0 for le */
    if (lt && v.hi != PINF && (le ? v.hi <= 0 : v.hi < 0))
        return kiln_bool(ctx, true);
    if (lt && v.lo != NINF && (le ? v.lo > 0 : v.lo >= 0))
        return kiln_bool(ctx, false);
    if (!lt && ((v.lo != NINF && v.lo > 0) || (v.hi != PINF && v.hi < 0)))
        return kiln_bool(ctx, op == KILN_OP_NE);
    if (!lt && v.lo == 0 && v.hi == 0)
        return kiln_bool(ctx, op == KILN_OP_EQ);
    int64_t g = 0, K;
    for (uint32_t i = 0; i < E.n; i++)
        g = gcd64(g, E.t[i].k);
    if (g <= 0)
        return keep_cmp(S, op, &A, &B);
    if (lt) {
        /* lt: g*T + c < 0  <=>  T < ceil(-c/g) = -floor(c/g);
         * le: g*T + c <= 0  <=>  T <= floor(-c/g) = -ceil(c/g) */
        int64_t q = kiln_scalar_floordiv(E.c, g);
        if (le && kiln_scalar_floormod(E.c, g) != 0)
            q++; /* ceil; cannot overflow: q <= c/g */
        if (q == INT64_MIN)
            return keep_cmp(S, op, &A, &B);
        K = -q;
    } else {
        if (E.c % g != 0)
            return kiln_bool(ctx, op == KILN_OP_NE);
        if ((E.t[0].k < 0 && !lin_scale(&E, -1)) || E.c / g == INT64_MIN)
            return keep_cmp(S, op, &A, &B);
        K = -(E.c / g);
    }
    struct lin P = {0}, N = {.c = K};
    for (uint32_t i = 0; i < E.n; i++) {
        struct lin *D = E.t[i].k > 0 ? &P : &N;
        int64_t     k = E.t[i].k / g;
        if (!lin_reserve(S, D, D->n + 1))
            return (kiln_expr){0};
        D->t[D->n++] = (struct term){E.t[i].h, E.t[i].atom, k > 0 ? k : -k};
    }
    if (le && !N.n && K < INT64_MAX) { /* P <= K  ->  P < K + 1 */
        le = false;
        N.c = K + 1;
    }
    if (!P.n) { /* -N < K  <=>  -K < N;  -N <= K  <=>  -K - 1 < N */
        N.c = 0;
        kiln_expr n = build(S, &N);
        return n.id ? kiln_lt(ctx, kiln_idx(ctx, le ? -K - 1 : -K), n) : n;
    }
    kiln_expr p = build(S, &P), n = build(S, &N);
    if (!p.id || !n.id)
        return (kiln_expr){0};
    return kiln_binary(ctx, le ? KILN_OP_LE : lt ? KILN_OP_LT : op, p, n);
}

static bool
is_cmp(enum kiln_op op)
{
    return op == KILN_OP_LT || op == KILN_OP_LE || op == KILN_OP_EQ || op == KILN_OP_NE;
}

/* !(a < b) -> b <= a and friends, for integer operands (not floats: NaN) */
static kiln_expr
simp_not(struct simp *S, kiln_expr e)
{
    kiln_ctx *ctx = S->ctx;
    kiln_expr a = simp(S, kid(S, e, 0));
    if (!a.id)
        return a;
    enum kiln_op op = op_of(S, a);
    if (is_cmp(op) && is_intlike(kiln_expr_dtype(ctx, kid(S, a, 0)))) {
        kiln_expr x = kid(S, a, 0), y = kid(S, a, 1), f;
        if (op == KILN_OP_LT)
            f = kiln_le(ctx, y, x);
        else if (op == KILN_OP_LE)
            f = kiln_lt(ctx, y, x);
        else
            f = kiln_binary(ctx, op == KILN_OP_EQ ? KILN_OP_NE : KILN_OP_EQ, x, y);
        return simp(S, f);
    }
    return a.id == kid(S, e, 0).id ? e : kiln_unary(ctx, KILN_OP_NOT, a);
}

static kiln_expr
simp_logic(struct simp *S, kiln_expr e)
{
    enum kiln_op op = op_of(S, e);
    kiln_expr    a = simp(S, kid(S, e, 0)), b;
    int64_t      v;
    if (!a.id)
        return a;
    if (kiln_expr_is_int(S->ctx, a, &v) && (op == KILN_OP_AND ? !v : v))
        return a;
    b = simp(S, kid(S, e, 1));
    if (!b.id)
        return b;
    /* fold constants here: the builder only folds a constant second operand */
    if (kiln_expr_is_int(S->ctx, a, &v))
        return b; /* a is the identity: true for &&, false for || */
    if (kiln_expr_is_int(S->ctx, b, &v))
        return (op == KILN_OP_AND ? v : !v) ? a : b;
    return kiln_binary(S->ctx, op, a, b); /* folds x && x */
}

static kiln_expr
simp_select(struct simp *S, kiln_expr e)
{
    kiln_expr c = simp(S, kid(S, e, 0));
    int64_t   v;
    if (!c.id)
        return c;
    if (kiln_expr_is_int(S->ctx, c, &v))
        return simp(S, kid(S, e, v ? 1 : 2));
    kiln_expr a = simp(S, kid(S, e, 1)), b = simp(S, kid(S, e, 2));
    if (!a.id || !b.id)
        return (kiln_expr){0};
    return kiln_select(S->ctx, c, a, b);
}

static kiln_expr
simp_abs(struct simp *S, kiln_expr e)
{
    kiln_expr a = simp(S, kid(S, e, 0));
    if (!a.id)
        return a;
    struct kiln_ival v = kiln_simp_bound(S, a);
    if (v.lo >= 0)
        return a;
    if (v.hi <= 0)
        return simp(S, kiln_unary(S->ctx, KILN_OP_NEG, a));
    return a.id == kid(S, e, 0).id ? e : kiln_unary(S->ctx, KILN_OP_ABS, a);
}

static kiln_expr
simp_node(struct simp *S, kiln_expr e)
{
    const struct kiln_node n = S->ctx->node[e.id];
    bool                   i64 = n.dtype == KILN_DTYPE_I64;
    switch ((enum kiln_op)n.op) {
    case KILN_OP_NIL:
    case KILN_OP_INT:
    case KILN_OP_FLOAT:
    case KILN_OP_VAR:
        return e;
    case KILN_OP_LIST:
        return simp_list(S, e);
    case KILN_OP_LOAD:
        return simp_load(S, e);
    case KILN_OP_ADD:
    case KILN_OP_SUB:
    case KILN_OP_MUL:
    case KILN_OP_NEG:
        return i64 ? simp_affine(S, e) : simp_kids(S, e);
    case KILN_OP_FLOORDIV:
    case KILN_OP_FLOORMOD:
        return i64 ? simp_divmod(S, e) : simp_kids(S, e);
    case KILN_OP_MIN:
    case KILN_OP_MAX:
        return i64 ? simp_minmax(S, e) : simp_kids(S, e);
    case KILN_OP_EQ:
    case KILN_OP_NE:
    case KILN_OP_LT:
    case KILN_OP_LE:
        if (is_i64(S, (kiln_expr){n.kid[0]}))
            return simp_cmp(S, (enum kiln_op)n.op, (kiln_expr){n.kid[0]}, (kiln_expr){n.kid[1]});
        return simp_kids(S, e);
    case KILN_OP_AND:
    case KILN_OP_OR:
        return simp_logic(S, e);
    case KILN_OP_NOT:
        return simp_not(S, e);
    case KILN_OP_SELECT:
        return simp_select(S, e);
    case KILN_OP_ABS:
        return i64 ? simp_abs(S, e) : simp_kids(S, e);
    case KILN_OP_DIV:
    case KILN_OP_POW:
    case KILN_OP_FMOD:
    case KILN_OP_CAST:
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
        return simp_kids(S, e);
    case KILN_OP_COUNT:
        break;
    }
    return e;
}

static kiln_expr
simp(struct simp *S, kiln_expr e)
{
    if (!e.id || !live(S))
        return (kiln_expr){0};
    kiln_expr done;
    if (kiln_simp_memo_get(S, e, &done))
        return done;
    struct pmark m = kiln_simp_mark(S);
    kiln_expr    r = simp_node(S, e);
    kiln_simp_release(S, m);
    if (!live(S))
        return (kiln_expr){0};
    if (!r.id) /* a rule gave up (coefficient overflow): keep the node */
        r = e;
    /* an integer or bool with a single possible value is that value */
    enum kiln_dtype dt = kiln_expr_dtype(S->ctx, r);
    if (is_intlike(dt) && S->ctx->node[r.id].op != KILN_OP_INT) {
        struct kiln_ival v = kiln_simp_bound(S, r);
        if (v.lo == v.hi && v.lo != NINF && v.lo != PINF)
            r = kiln_int(S->ctx, v.lo, dt);
    }
    if (!kiln_simp_memo_put(S, e, r) || !kiln_simp_memo_put(S, r, r))
        return (kiln_expr){0};
    return r;
}

/* ---- public expression API ---- */

kiln_expr
kiln_simplify_expr(kiln_ctx *ctx, kiln_expr e, const struct kiln_var_range *r, uint32_t nr)
{
    struct simp S;
    if (!kiln_ok(ctx) || !e.id)
        return (kiln_expr){0};
    kiln_simp_init(&S, ctx);
    kiln_simp_env(&S, r, nr);
    kiln_expr out = simp(&S, e);
    kiln_simp_fini(&S);
    return kiln_ok(ctx) ? out : (kiln_expr){0};
}

bool
kiln_expr_bounds(kiln_ctx *ctx, kiln_expr e, const struct kiln_var_range *r, uint32_t nr,
                 int64_t *lo, int64_t *hi)
{
    struct simp S;
    *lo = INT64_MIN;
    *hi = INT64_MAX;
    if (!kiln_ok(ctx) || !e.id || !is_intlike(kiln_expr_dtype(ctx, e)))
        return false;
    kiln_simp_init(&S, ctx);
    kiln_simp_env(&S, r, nr);
    kiln_expr        s = simp(&S, e);
    struct kiln_ival v = s.id ? kiln_simp_bound(&S, s) : KILN_IVAL_FULL;
    kiln_simp_fini(&S);
    if (!kiln_ok(ctx))
        return false;
    *lo = v.lo;
    *hi = v.hi;
    return kiln_ival_finite(v);
}

/* ---- sessions: many expressions under one set of ranges, one memo ---- */

struct kiln_simplifier {
    struct simp S;
};

struct kiln_simplifier *
kiln_simplifier_new(kiln_ctx *ctx)
{
    struct kiln_simplifier *s = kiln_mem_realloc(ctx, NULL, 0, sizeof *s);
    if (!s) {
        KILN_FAIL(ctx, KILN_ERR_NOMEM, "simplify", "out of memory");
        return NULL;
    }
    kiln_simp_init(&s->S, ctx);
    kiln_simp_env(&s->S, NULL, 0);
    return s;
}

void
kiln_simplifier_free(struct kiln_simplifier *s)
{
    if (!s)
        return;
    kiln_ctx *ctx = s->S.ctx;
    kiln_simp_fini(&s->S);
    kiln_mem_free(ctx, s, sizeof *s);
}

void
kiln_simplifier_ranges(struct kiln_simplifier *s, const struct kiln_var_range *r, uint32_t nr)
{
    kiln_simp_env(&s->S, r, nr);
}

kiln_expr
kiln_simplifier_expr(struct kiln_simplifier *s, kiln_expr e)
{
    if (!kiln_ok(s->S.ctx) || !e.id)
        return (kiln_expr){0};
    kiln_expr out = simp(&s->S, e);
    return kiln_ok(s->S.ctx) ? out : (kiln_expr){0};
}

bool
kiln_simplifier_bounds(struct kiln_simplifier *s, kiln_expr e, int64_t *lo, int64_t *hi)
{
    *lo = INT64_MIN;
    *hi = INT64_MAX;
    if (!kiln_ok(s->S.ctx) || !e.id || !is_intlike(kiln_expr_dtype(s->S.ctx, e)))
        return false;
    kiln_expr        x = simp(&s->S, e);
    struct kiln_ival v = x.id ? kiln_simp_bound(&s->S, x) : KILN_IVAL_FULL;
    if (!kiln_ok(s->S.ctx))
        return false;
    *lo = v.lo;
    *hi = v.hi;
    return kiln_ival_finite(v);
}
