/* passes/partition.c -- loop partitioning: a loop whose body tests conditions affine in the
 * loop variable (convolution padding, `if k == 0` initialisation, split guards) is cut into up
 * to three consecutive loops so that the middle, hot one has those tests decided and removed.
 *
 * For a loop `for v in [lo, hi]` (constant bounds; not a vector or GPU loop) every comparison
 * reachable from the body's if conditions and select conditions is analysed: with E the
 * comparison written as `E < 0` or `E == 0`, the simplifier proves E(v+1) - E(v) = k, a
 * non-zero constant, and bounds the rest R = E - k*v over the ranges of the other variables
 * (enclosing loops, and the inner loops and lets in scope at the comparison). The comparison
 * then has one value for every v on each of two rays (v <= t1, v >= t2). The middle range is
 * chosen greedily, comparison by comparison in body order, as the ray with the largest overlap
 * with what is left; a comparison none of whose rays overlaps it is left alone. When the
 * middle is a non-empty proper sub-range the loop becomes [lo, a) [a, b] (b, hi]: the middle
 * keeps the loop variable, the side pieces get fresh variables and deep copies of the body,
 * and every piece is simplified with its own range (so the side pieces lose whatever is
 * decided there too, and pieces of extent 1 disappear into their bodies). Then the pass
 * recurses into the pieces' bodies (outer loops first). Splitting a loop into consecutive
 * pieces preserves its semantics whatever the analysis finds, and the tests are removed only
 * by the simplifier, so a weak analysis costs speed, never correctness. Pieces keep the
 * loop's kind (each piece of a parallel loop is a parallel loop).
 *
 * Loops inside a GPU loop (a kernel's per-thread loops) are left whole: a GPU predicates a
 * boundary test for next to nothing, while each split copies the body, and the copies, times
 * the unrolling GPU schedules ask for, made a ResNet-18 convolution kernel of ten unrolled
 * nests that NVRTC compiled in 24 s (4 s for the whole network's other kernels together). */
#include "passes.h"

#include <stdio.h>
#include <string.h>

/* Side pieces are cold (they run a few iterations of their loop); loops inside them are still
 * split, but not inside a side piece of such a split: that bounds the copies of a body made for
 * a nest of depth d to about 3 * 3^MAX_COLD per level instead of 3^d. */
#define MAX_COLD 1

/* Conditions not affine in the loop variable are evaluated at every value of a loop of at most
 * this many iterations, and at this many points of a longer one (see rays_by_scan). */
#define SCAN_MAX 64

struct ray {
    int64_t lo, hi; /* inclusive; INT64_MIN / INT64_MAX: unbounded */
};

struct cond {
    struct ray ray[2];
    uint32_t   nray;
};

struct part {
    struct kiln_stmt_mutator m; /* the walk (pstmt); m.user = the pass */
    kiln_ctx                *ctx;
    struct kiln_var_range   *r; /* enclosing loops (and, while analysing, the body's) */
    uint32_t                 nr, capr;
    uint32_t                 cold; /* side pieces enclosing the statement being partitioned */
    uint32_t                 gpu;  /* GPU loops enclosing it */
    struct kiln_simplifier  *S;    /* one session; its ranges follow r/nr (see ranges()) */
    uint32_t                 snr;  /* nr the session's ranges were set with, or UINT32_MAX */
    /* analysis of one loop */
    kiln_expr    v;
    int64_t      vlo, vhi; /* its range */
    uint32_t    *seen;     /* open-addressing set of expression ids */
    uint32_t     capseen, nseen;
    struct cond *cond;
    uint32_t     ncond, capcond;
};

static bool
push_range(struct part *P, kiln_expr var, int64_t lo, int64_t hi)
{
    if (P->nr == P->capr) {
        uint32_t               cap = P->capr ? 2 * P->capr : 16;
        struct kiln_var_range *r =
            kiln_mem_realloc(P->ctx, P->r, sizeof(*r) * P->capr, sizeof(*r) * cap);
        if (!r) {
            KILN_FAIL(P->ctx, KILN_ERR_NOMEM, "partition", "out of memory");
            return false;
        }
        P->r = r;
        P->capr = cap;
    }
    P->r[P->nr++] = (struct kiln_var_range){var, lo, hi};
    P->snr = UINT32_MAX; /* same count, different entries possible after a reset */
    return true;
}

/* The session with the current ranges (r[0..nr) only grows by push_range and shrinks by
 * resetting nr, so a changed nr means changed ranges). */
static struct kiln_simplifier *
ranges(struct part *P)
{
    if (P->snr != P->nr) {
        kiln_simplifier_ranges(P->S, P->r, P->nr);
        P->snr = P->nr;
    }
    return P->S;
}

static kiln_expr
simplify(struct part *P, kiln_expr e)
{
    return kiln_simplifier_expr(ranges(P), e);
}

static void
bounds(struct part *P, kiln_expr e, int64_t *lo, int64_t *hi)
{
    kiln_simplifier_bounds(ranges(P), e, lo, hi);
}

/* Pushes the range of a loop's variable from the bounds of its min and extent. */
static bool
push_loop_range(struct part *P, const struct kiln_stmt *s)
{
    int64_t mlo, mhi, elo, ehi, hi;
    bounds(P, s->u.for_.min, &mlo, &mhi);
    bounds(P, s->u.for_.extent, &elo, &ehi);
    if (!kiln_ok(P->ctx))
        return false;
    if (mhi == INT64_MAX || ehi == INT64_MAX || ehi < 1 || kiln_add_overflows(mhi, ehi - 1, &hi))
        hi = INT64_MAX;
    return push_range(P, s->u.for_.var, mlo, hi);
}

static bool
seen_insert(struct part *P, uint32_t id) /* true if id was not in the set yet */
{
    if (2 * (P->nseen + 1) > P->capseen) {
        uint32_t  cap = P->capseen ? 2 * P->capseen : 256;
        uint32_t *s = kiln_mem_realloc(P->ctx, NULL, 0, sizeof(*s) * cap);
        if (!s) {
            KILN_FAIL(P->ctx, KILN_ERR_NOMEM, "partition", "out of memory");
            return false;
        }
        memset(s, 0, sizeof(*s) * cap);
        for (uint32_t i = 0; i < P->capseen; i++) {
            uint32_t k = P->seen[i];
            if (!k)
                continue;
            uint32_t j = (uint32_t)kiln_mix64(k) & (cap - 1);
            while (s[j])
                j = (j + 1) & (cap - 1);
            s[j] = k;
        }
        kiln_mem_free(P->ctx, P->seen, sizeof(*P->seen) * P->capseen);
        P->seen = s;
        P->capseen = cap;
    }
    uint32_t j = (uint32_t)kiln_mix64(id) & (P->capseen - 1);
    while (P->seen[j]) {
        if (P->seen[j] == id)
            return false;
        j = (j + 1) & (P->capseen - 1);
    }
    P->seen[j] = id;
    P->nseen++;
    return true;
}

/* ---- analysis of one comparison ---- */

static int64_t
cdiv(int64_t a, int64_t b) /* b > 0 */
{
    int64_t q = a / b;
    return (a % b != 0 && a > 0) ? q + 1 : q;
}

static void
add_ray(struct cond *c, int64_t lo, int64_t hi)
{
    if (lo <= hi)
        c->ray[c->nray++] = (struct ray){lo, hi};
}

/* The rays of v on which `k*v + R < 0` (lt) or `k*v + R == 0` has one value for every R in
 * [rlo, rhi] (INT64_MIN / INT64_MAX: unbounded). */
static struct cond
rays_of(bool lt, int64_t k, int64_t rlo, int64_t rhi)
{
    struct cond c = {.nray = 0};
    bool        flo = rlo != INT64_MIN, fhi = rhi != INT64_MAX;
    if (k == INT64_MIN || (!flo && !fhi))
        return c;
    if ((fhi && rhi == INT64_MIN) || (flo && rlo == INT64_MIN))
        return c;       /* cannot be negated */
    if (!lt && k < 0) { /* k*v + R == 0  <=>  (-k)*v + (-R) == 0 */
        int64_t nlo = fhi ? -rhi : INT64_MIN, nhi = flo ? -rlo : INT64_MAX;
        k = -k;
        rlo = nlo;
        rhi = nhi;
        flo = rlo != INT64_MIN;
        fhi = rhi != INT64_MAX;
    }
    if (lt && k > 0) {
        if (fhi) /* true: k*v + rhi < 0 <=> v <= floor((-rhi - 1) / k) */
            add_ray(&c, INT64_MIN, kiln_scalar_floordiv(-rhi - 1, k));
        if (flo) /* false: k*v + rlo >= 0 <=> v >= ceil(-rlo / k) */
            add_ray(&c, cdiv(-rlo, k), INT64_MAX);
    } else if (lt) {
        int64_t kk = -k;
        if (fhi && kiln_scalar_floordiv(rhi, kk) < INT64_MAX) /* true: kk*v > rhi */
            add_ray(&c, kiln_scalar_floordiv(rhi, kk) + 1, INT64_MAX);
        if (flo) /* false: kk*v <= rlo */
            add_ray(&c, INT64_MIN, kiln_scalar_floordiv(rlo, kk));
    } else {
        /* k*v + R == 0 is possible only for v in [ceil(-rhi/k), floor(-rlo/k)] */
        if (fhi && cdiv(-rhi, k) > INT64_MIN)
            add_ray(&c, INT64_MIN, cdiv(-rhi, k) - 1);
        if (flo && kiln_scalar_floordiv(-rlo, k) < INT64_MAX)
            add_ray(&c, kiln_scalar_floordiv(-rlo, k) + 1, INT64_MAX);
    }
    return c;
}

/* The value of `E < 0` (lt) or `E == 0` at v = v0 for every value of the other variables: 1
 * true, 0 false, -1 undecided. */
static int
decided_at(struct part *P, kiln_expr E, bool lt, int64_t v0)
{
    kiln_expr c = kiln_idx(P->ctx, v0);
    int64_t   lo, hi;
    bounds(P, kiln_expr_subst_vars(P->ctx, E, &P->v, &c, 1), &lo, &hi);
    if (lt)
        return hi < 0 ? 1 : lo >= 0 ? 0 : -1;
    return lo == 0 && hi == 0 ? 1 : (lo > 0 || hi < 0) ? 0 : -1;
}

/* First i in (from, to) whose value differs from `want` walking from `from` towards `to`
 * (`to` when none does), assuming the values equal `want` on one run from `from`: binary
 * search, so a step is found in a long loop in log time. */
static int64_t
run_end(struct part *P, kiln_expr E, bool lt, int want, int64_t from, int64_t to)
{
    int64_t dir = to > from ? 1 : -1, good = from, bad = to; /* good: value == want */
    while ((bad - good) * dir > 1) {
        int64_t mid = good + (bad - good) / 2;
        if (decided_at(P, E, lt, P->vlo + mid) == want)
            good = mid;
        else
            bad = mid;
    }
    return bad;
}

/* A comparison not affine in v (v under a floordiv, as in a fused loop): when it is a step --
 * one value on a first run of v, none or the other on a last run, undecided only between them
 * -- those runs are its rays. (A periodic condition, `v % 2 == 1`, has none: peeling a few
 * iterations would not remove it.) Over a short loop its value is found at every v; over a
 * longer one the runs' ends are found by binary search and the step checked at SCAN_MAX evenly
 * spaced points. A step missed between those points only splits the loop where its tests stay
 * undecided, which costs speed, never correctness (see the top of the file). */
static struct cond
rays_by_scan(struct part *P, kiln_expr E, bool lt)
{
    struct cond c = {.nray = 0};
    int64_t     n = P->vhi - P->vlo + 1;
    int         first = decided_at(P, E, lt, P->vlo), last = decided_at(P, E, lt, P->vhi);
    if (n < 2 || (first < 0 && last < 0))
        return c; /* undecided at both ends: no ray (the common case, checked first) */
    int64_t t1 = 0, t2 = n - 1; /* first run [0, t1), last run (t2, n) */
    if (n <= SCAN_MAX) {
        int val[SCAN_MAX];
        for (int64_t i = 0; i < n; i++)
            val[i] = i == 0 ? first : i == n - 1 ? last : decided_at(P, E, lt, P->vlo + i);
        while (t1 < n && val[t1] >= 0 && val[t1] == first)
            t1++;
        while (t2 >= t1 && val[t2] >= 0 && val[t2] == last)
            t2--;
        for (int64_t i = t1; i <= t2; i++)
            if (val[i] >= 0)
                return c; /* decided values between the runs: not a step */
    } else {
        t1 = first >= 0 ? run_end(P, E, lt, first, 0, n) : 0;
        t2 = last >= 0 && t1 < n ? run_end(P, E, lt, last, n - 1, t1 - 1) : n - 1;
        for (int64_t j = 0; j < SCAN_MAX; j++) {
            int64_t i = j * (n - 1) / (SCAN_MAX - 1);
            int     v = decided_at(P, E, lt, P->vlo + i);
            if (i < t1 ? v != first : i > t2 ? v != last : v >= 0)
                return c;
        }
    }
    if (t1 == n || (t1 == 0 && t2 == n - 1))
        return c; /* one value throughout, or undecided at both ends */
    if (t1 > 0)
        add_ray(&c, INT64_MIN, P->vlo + t1 - 1);
    if (t2 < n - 1)
        add_ray(&c, P->vlo + t2 + 1, INT64_MAX);
    return c;
}

static bool
analyse_cmp(struct part *P, kiln_expr cmp)
{
    kiln_ctx               *ctx = P->ctx;
    const struct kiln_node *n = kiln_node_get(ctx, cmp);
    enum kiln_op            op = (enum kiln_op)n->op;
    kiln_expr               a = {n->kid[0]}, b = {n->kid[1]};
    int64_t                 k, rlo, rhi;
    if (kiln_expr_dtype(ctx, a) != KILN_DTYPE_I64)
        return true;
    kiln_expr E = kiln_sub(ctx, a, b);
    if (op == KILN_OP_LE)
        E = kiln_sub(ctx, E, kiln_idx(ctx, 1));
    kiln_expr v1 = kiln_add(ctx, P->v, kiln_idx(ctx, 1));
    kiln_expr E1 = kiln_expr_subst_vars(ctx, E, &P->v, &v1, 1);
    kiln_expr D = simplify(P, kiln_sub(ctx, E1, E));
    if (!D.id)
        return false;
    if (!kiln_expr_is_int(ctx, D, &k)) { /* not affine in v */
        struct cond c = rays_by_scan(P, E, op == KILN_OP_LT || op == KILN_OP_LE);
        if (!kiln_ok(ctx))
            return false;
        return !c.nray || KILN_VEC_PUSH(ctx, P->cond, P->ncond, P->capcond, c);
    }
    if (k == 0)
        return true; /* independent of v */
    kiln_expr R = simplify(P, kiln_sub(ctx, E, kiln_mul(ctx, P->v, kiln_idx(ctx, k))));
    if (!R.id)
        return false;
    bounds(P, R, &rlo, &rhi);
    if (!kiln_ok(ctx))
        return false;
    struct cond c = rays_of(op == KILN_OP_LT || op == KILN_OP_LE, k, rlo, rhi);
    if (!c.nray)
        return true;
    if (!KILN_VEC_PUSH(ctx, P->cond, P->ncond, P->capcond, c))
        return false;
    return true;
}

static bool collect_expr(struct part *P, kiln_expr e);

/* Walks the boolean structure of a condition down to its comparisons. */
static bool
collect_cond(struct part *P, kiln_expr c)
{
    kiln_ctx    *ctx = P->ctx;
    enum kiln_op op = (enum kiln_op)kiln_node_get(ctx, c)->op;
    kiln_expr    a = {kiln_node_get(ctx, c)->kid[0]}, b = {kiln_node_get(ctx, c)->kid[1]};
    if (op == KILN_OP_AND || op == KILN_OP_OR)
        return collect_cond(P, a) && collect_cond(P, b);
    if (op == KILN_OP_NOT)
        return collect_cond(P, a);
    if (op == KILN_OP_LT || op == KILN_OP_LE || op == KILN_OP_EQ || op == KILN_OP_NE) {
        if (!seen_insert(P, c.id | 0x80000000u)) /* analysed already (as a condition) */
            return kiln_ok(ctx);
        return analyse_cmp(P, c) && collect_expr(P, a) && collect_expr(P, b);
    }
    return collect_expr(P, c);
}

/* Finds the select conditions inside e (each node once). */
static bool
collect_expr(struct part *P, kiln_expr e)
{
    kiln_ctx *ctx = P->ctx;
    if (!e.id || !seen_insert(P, e.id))
        return kiln_ok(ctx);
    const struct kiln_node *n = kiln_node_get(ctx, e);
    kiln_expr               k[3] = {{n->kid[0]}, {n->kid[1]}, {n->kid[2]}};
    int                     arity = kiln_op_arity[n->op];
    if (n->op == KILN_OP_SELECT && !collect_cond(P, k[0]))
        return false;
    for (int i = 0; i < arity; i++)
        if (!collect_expr(P, k[i]))
            return false;
    return true;
}

/* A statement visitor over the body of the loop analysed: every expression's select
 * conditions (an if's condition is one itself), under the ranges of the loops and integer
 * lets around it. */
static enum kiln_walk
collect_field(struct kiln_stmt_visitor *v, const struct kiln_stmt *s, enum kiln_stmt_field field,
              kiln_expr e)
{
    (void)s;
    return (field == KILN_STMT_FIELD_IF_COND ? collect_cond(v->user, e) : collect_expr(v->user, e))
               ? KILN_WALK_GO
               : KILN_WALK_FAIL;
}

static enum kiln_walk
collect_for(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct part *P = v->user;
    uint32_t     nr = P->nr;
    bool         ok = collect_expr(P, s->u.for_.min) && collect_expr(P, s->u.for_.extent)
              && push_loop_range(P, s) && kiln_stmt_visit(v, s->u.for_.body) == KILN_WALK_GO;
    P->nr = nr;
    return ok ? KILN_WALK_GO : KILN_WALK_FAIL;
}

static enum kiln_walk
collect_let(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct part *P = v->user;
    uint32_t     nr = P->nr;
    int64_t      lo, hi;
    bool         ok = collect_expr(P, s->u.let.value);
    if (ok && kiln_expr_dtype(P->ctx, s->u.let.value) == KILN_DTYPE_I64) {
        bounds(P, s->u.let.value, &lo, &hi);
        ok = kiln_ok(P->ctx) && push_range(P, s->u.let.var, lo, hi);
    }
    ok = ok && kiln_stmt_visit(v, s->u.let.body) == KILN_WALK_GO;
    P->nr = nr;
    return ok ? KILN_WALK_GO : KILN_WALK_FAIL;
}

static bool
collect_stmt(struct part *P, const struct kiln_stmt *s)
{
    struct kiln_stmt_visitor v = {
        .user = P, .expr = collect_field, .for_ = collect_for, .let = collect_let};
    return kiln_stmt_visit(&v, s) == KILN_WALK_GO;
}

/* ---- copying a body with the loop variable renamed ---- */

struct rename {
    kiln_expr from, to;
};

static kiln_expr
rename_expr(struct kiln_stmt_mutator *m, const struct kiln_stmt *s, enum kiln_stmt_field field,
            kiln_expr e)
{
    struct rename *R = m->user;
    (void)s;
    (void)field;
    return kiln_expr_subst_vars(m->ctx, e, &R->from, &R->to, 1);
}

/* A deep copy of s (the pass rewrites pieces in place) with from renamed to; a copying
 * statement mutator. */
static struct kiln_stmt *
copy_stmt(kiln_ctx *ctx, struct kiln_stmt *s, kiln_expr from, kiln_expr to)
{
    struct rename            R = {from, to};
    struct kiln_stmt_mutator m = {
        .ctx = ctx, .user = &R, .pass = "partition", .copy = true, .expr = rename_expr};
    return kiln_stmt_mutate(&m, s);
}

/* ---- the pass ---- */

static struct kiln_stmt *pstmt(struct part *P, struct kiln_stmt *s);

/* Chooses the middle range of loop s over [lo, hi]; false on error. */
static bool
choose(struct part *P, struct kiln_stmt *s, int64_t lo, int64_t hi, int64_t *a, int64_t *b)
{
    uint32_t nr = P->nr;
    P->v = s->u.for_.var;
    P->vlo = lo;
    P->vhi = hi;
    P->ncond = 0;
    P->nseen = 0;
    if (P->capseen)
        memset(P->seen, 0, sizeof(*P->seen) * P->capseen);
    bool ok = push_range(P, s->u.for_.var, lo, hi) && collect_stmt(P, s->u.for_.body);
    P->nr = nr;
    if (!ok)
        return false;
    struct ray cur = {lo, hi};
    for (uint32_t i = 0; i < P->ncond; i++) {
        struct ray best = {1, 0};
        for (uint32_t j = 0; j < P->cond[i].nray; j++) {
            struct ray r = P->cond[i].ray[j];
            r.lo = r.lo > cur.lo ? r.lo : cur.lo;
            r.hi = r.hi < cur.hi ? r.hi : cur.hi;
            if (r.lo <= r.hi && (best.lo > best.hi || r.hi - r.lo > best.hi - best.lo))
                best = r;
        }
        if (best.lo <= best.hi)
            cur = best;
    }
    *a = cur.lo;
    *b = cur.hi;
    return true;
}

/* Partitions what remains of a piece: the body of its loop, or the piece itself when the
 * simplifier removed the loop. */
static struct kiln_stmt *
recurse_piece(struct part *P, struct kiln_stmt *q, kiln_expr var)
{
    if (q->kind == KILN_STMT_FOR && q->u.for_.var.id == var.id) {
        uint32_t nr = P->nr;
        if (!push_loop_range(P, q))
            return NULL;
        struct kiln_stmt *body = pstmt(P, q->u.for_.body);
        P->nr = nr;
        if (!body)
            return NULL;
        q->u.for_.body = body;
        return q;
    }
    return pstmt(P, q);
}

static struct kiln_stmt *
make_piece(struct part *P, struct kiln_stmt *s, struct kiln_stmt *body, kiln_expr var, int64_t lo,
           int64_t hi, bool side)
{
    kiln_ctx         *ctx = P->ctx;
    struct kiln_stmt *q = kiln_stmt_for(ctx, var, kiln_idx(ctx, lo), kiln_idx(ctx, hi - lo + 1),
                                        (enum kiln_loop_kind)s->u.for_.loop, body);
    if (!q)
        return NULL;
    q->u.for_.axis = s->u.for_.axis; /* 0: GPU loops are never split */
    q->u.for_.thread_reduce = s->u.for_.thread_reduce;
    q = kiln_simplify_stmt(ctx, q, P->r, P->nr);
    if (!q)
        return NULL;
    P->cold += side;
    q = recurse_piece(P, q, var);
    P->cold -= side;
    return q;
}

static struct kiln_stmt *
pfor(struct part *P, struct kiln_stmt *s)
{
    kiln_ctx *ctx = P->ctx;
    int64_t   min, ext, a, b;
    uint8_t   kind = s->u.for_.loop;
    kiln_expr emin = simplify(P, s->u.for_.min);
    kiln_expr eext = simplify(P, s->u.for_.extent);
    if (!emin.id || !eext.id)
        return NULL;
    bool splittable =
        (kind == KILN_LOOP_SERIAL || kind == KILN_LOOP_PARALLEL || kind == KILN_LOOP_UNROLL)
        && P->cold <= MAX_COLD && P->gpu == 0;
    if (splittable && kiln_expr_is_int(ctx, emin, &min) && kiln_expr_is_int(ctx, eext, &ext)
        && ext > 1 && !kiln_add_overflows(min, ext - 1, &b)) {
        int64_t hi = b;
        if (!choose(P, s, min, hi, &a, &b))
            return NULL;
        if (a <= b && (a > min || b < hi)) {
            kiln_expr         var = s->u.for_.var;
            char              name[64];
            struct kiln_stmt *piece[3];
            snprintf(name, sizeof name, "%s",
                     kiln_sym_str(ctx, kiln_var_index(kiln_node_get(ctx, var)->imm)));
            /* copies for the side pieces before the middle piece rewrites the body in place */
            kiln_expr         v1 = {0}, v2 = {0};
            struct kiln_stmt *first_body = NULL, *last_body = NULL, *mid;
            if (a > min) {
                v1 = kiln_fresh_var(ctx, name);
                first_body = v1.id ? copy_stmt(ctx, s->u.for_.body, var, v1) : NULL;
                if (!first_body)
                    return NULL;
            }
            if (b < hi) {
                v2 = kiln_fresh_var(ctx, name);
                last_body = v2.id ? copy_stmt(ctx, s->u.for_.body, var, v2) : NULL;
                if (!last_body)
                    return NULL;
            }
            if (!(mid = make_piece(P, s, s->u.for_.body, var, a, b, false)))
                return NULL;
            /* side pieces are cold, unless the middle one does nothing (then no code was
             * copied, and the side pieces are all that is left of the loop) */
            bool     cold = !kiln_stmt_empty(mid);
            uint32_t n = 0;
            if (a > min && !(piece[n++] = make_piece(P, s, first_body, v1, min, a - 1, cold)))
                return NULL;
            piece[n++] = mid;
            if (b < hi && !(piece[n++] = make_piece(P, s, last_body, v2, b + 1, hi, cold)))
                return NULL;
            return kiln_stmt_seq(ctx, n, piece);
        }
    }
    s->u.for_.min = emin;
    s->u.for_.extent = eext;
    uint32_t nr = P->nr;
    if (!push_loop_range(P, s))
        return NULL;
    bool gpu = kind == KILN_LOOP_GPU_BLOCK || kind == KILN_LOOP_GPU_THREAD;
    P->gpu += gpu;
    struct kiln_stmt *body = pstmt(P, s->u.for_.body);
    P->gpu -= gpu;
    P->nr = nr;
    if (!body)
        return NULL;
    s->u.for_.body = body;
    return s;
}

static struct kiln_stmt *
plet(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    struct part *P = m->user;
    uint32_t     nr = P->nr;
    int64_t      lo, hi;
    if (kiln_expr_dtype(P->ctx, s->u.let.value) == KILN_DTYPE_I64) {
        bounds(P, s->u.let.value, &lo, &hi);
        if (!kiln_ok(P->ctx) || !push_range(P, s->u.let.var, lo, hi))
            return NULL;
    }
    s->u.let.body = pstmt(P, s->u.let.body);
    P->nr = nr;
    return s->u.let.body ? s : NULL;
}

static struct kiln_stmt *
pfor_cb(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    return pfor(m->user, s);
}

/* The pass is a statement mutator: loops are partitioned (in place, or replaced by their
 * pieces), lets bound their variable's range; the rest is the default walk. */
static struct kiln_stmt *
pstmt(struct part *P, struct kiln_stmt *s)
{
    return kiln_stmt_mutate(&P->m, s);
}

enum kiln_status
kiln_pass_partition(struct kiln_func *f)
{
    kiln_ctx   *ctx = f->ctx;
    struct part P = {.m = {.ctx = ctx, .pass = "partition", .for_ = pfor_cb, .let = plet},
                     .ctx = ctx,
                     .snr = UINT32_MAX};
    P.m.user = &P;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    P.S = kiln_simplifier_new(ctx);
    struct kiln_stmt *body = P.S ? pstmt(&P, f->body) : NULL;
    kiln_simplifier_free(P.S);
    kiln_mem_free(ctx, P.r, sizeof(*P.r) * P.capr);
    kiln_mem_free(ctx, P.seen, sizeof(*P.seen) * P.capseen);
    if (!body) {
        if (kiln_ok(ctx))
            KILN_FAIL(ctx, KILN_ERR_INTERNAL, "partition", "partitioning %s failed",
                      kiln_sym_str(ctx, f->name));
        return ctx->err.status;
    }
    f->body = body;
    return KILN_OK;
}
