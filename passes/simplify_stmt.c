/* passes/simplify_stmt.c -- the statement simplifier (kiln_pass_simplify, kiln_simplify_stmt):
 * every expression of a loop nest simplified under the ranges of its enclosing loops.
 *
 * The walker keeps a stack of variable ranges (loops, lets, and the `v < K` / `K < v` /
 * `v == K` conditions of enclosing if branches) and a stack of pending substitutions (loops of
 * extent 1 and lets of constants or variables disappear into their bodies). It uses one
 * simplifier session (passes.h) for the whole walk, so expressions simplified under one set of
 * ranges share a memo; changing the ranges invalidates it in O(1). The walk is a statement
 * mutator (ir/visit.c): its callbacks rewrite loops, sequences, ifs, lets and allocs in place,
 * and stores take the default (rebuilt when an expression changed); a removed statement
 * becomes an empty SEQ, and sequences splice nested sequences
 * and drop empty ones. GPU block/thread loops of extent 1 are kept: they are launch
 * dimensions. */
#include "passes.h"

#include <stdint.h>

struct walk {
    struct kiln_stmt_mutator m; /* m.user = the walk */
    kiln_ctx                *ctx;
    struct kiln_simplifier  *S;
    struct kiln_var_range   *r; /* ranges of the enclosing loops (innermost last) */
    uint32_t                 nr, capr;
    kiln_expr               *from, *to; /* pending substitutions */
    uint32_t                 ns, caps;
    struct kiln_stmt        *empty;
};

struct ival {
    int64_t lo, hi; /* INT64_MIN / INT64_MAX: unbounded */
};

#define NINF INT64_MIN
#define PINF INT64_MAX

static bool
nomem(struct walk *W)
{
    KILN_FAIL(W->ctx, KILN_ERR_NOMEM, "simplify", "out of memory");
    return false;
}

static enum kiln_op
op_of(const struct walk *W, kiln_expr e)
{
    return (enum kiln_op)kiln_node_get(W->ctx, e)->op;
}

/* Bounds of a (simplified) integer expression under the current ranges. */
static struct ival
bound(struct walk *W, kiln_expr e)
{
    struct ival v;
    kiln_simplifier_bounds(W->S, e, &v.lo, &v.hi);
    return v;
}

static bool
is_intlike(enum kiln_dtype dt)
{
    /* u64 is left out: its bit patterns order unsigned, unlike the rules' int64 arithmetic */
    return (kiln_dtype_is_int(dt) && dt != KILN_DTYPE_U64) || dt == KILN_DTYPE_BOOL;
}

static bool
push_range(struct walk *W, kiln_expr var, int64_t lo, int64_t hi)
{
    if (W->nr == W->capr) {
        uint32_t               cap = W->capr ? 2 * W->capr : 16;
        struct kiln_var_range *r =
            kiln_mem_realloc(W->ctx, W->r, sizeof(*r) * W->capr, sizeof(*r) * cap);
        if (!r)
            return nomem(W);
        W->r = r;
        W->capr = cap;
    }
    W->r[W->nr++] = (struct kiln_var_range){var, lo, hi};
    kiln_simplifier_ranges(W->S, W->r, W->nr);
    return true;
}

static void
pop_ranges(struct walk *W, uint32_t nr)
{
    if (W->nr != nr) {
        W->nr = nr;
        kiln_simplifier_ranges(W->S, W->r, W->nr);
    }
}

static bool
push_subst(struct walk *W, kiln_expr var, kiln_expr val)
{
    if (W->ns == W->caps) {
        uint32_t   cap = W->caps ? 2 * W->caps : 16;
        kiln_expr *f = kiln_mem_realloc(W->ctx, W->from, sizeof(*f) * W->caps, sizeof(*f) * cap);
        if (!f) {
            return nomem(W);
        }
        W->from = f;
        kiln_expr *t = kiln_mem_realloc(W->ctx, W->to, sizeof(*t) * W->caps, sizeof(*t) * cap);
        if (!t) {
            return nomem(W);
        }
        W->to = t;
        W->caps = cap;
    }
    W->from[W->ns] = var;
    W->to[W->ns++] = val;
    return true;
}

static kiln_expr
wexpr(struct walk *W, kiln_expr e)
{
    if (W->ns)
        e = kiln_expr_subst_vars(W->ctx, e, W->from, W->to, W->ns);
    return kiln_simplifier_expr(W->S, e);
}

bool
kiln_stmt_empty(const struct kiln_stmt *s)
{
    return s->kind == KILN_STMT_SEQ && s->u.seq.n == 0;
}

/* Narrows the ranges of variables compared with constants in cond (or in !cond when neg):
 * v < K, K < v, v == K and conjunctions of them (canonical forms of the simplifier). */
static bool
narrow(struct walk *W, kiln_expr cond, bool neg)
{
    kiln_ctx    *ctx = W->ctx;
    enum kiln_op op = (enum kiln_op)ctx->node[cond.id].op;
    kiln_expr    a = {ctx->node[cond.id].kid[0]}, b = {ctx->node[cond.id].kid[1]};
    int64_t      k;
    if (op == KILN_OP_AND && !neg)
        return narrow(W, a, false) && narrow(W, b, false);
    if (op == KILN_OP_OR && neg)
        return narrow(W, a, true) && narrow(W, b, true);
    if (op == KILN_OP_NOT)
        return narrow(W, a, !neg);
    if (op != KILN_OP_LT && op != KILN_OP_EQ)
        return true;
    if (op == KILN_OP_EQ && neg)
        return true;
    bool var_left = op_of(W, a) == KILN_OP_VAR && kiln_expr_is_int(ctx, b, &k);
    if (!var_left && !(op_of(W, b) == KILN_OP_VAR && kiln_expr_is_int(ctx, a, &k)))
        return true;
    kiln_expr   v = var_left ? a : b;
    struct ival cur = bound(W, v);
    if (op == KILN_OP_EQ) {
        cur.lo = cur.hi = k;
    } else if (var_left != neg) { /* v < K, or !(K < v): v <= K (- 1 when strict) */
        if (k == INT64_MIN)
            return true;
        int64_t hi = neg ? k : k - 1;
        cur.hi = hi < cur.hi ? hi : cur.hi;
    } else { /* K < v, or !(v < K) */
        if (k == INT64_MAX)
            return true;
        int64_t lo = neg ? k : k + 1;
        cur.lo = lo > cur.lo ? lo : cur.lo;
    }
    if (cur.lo > cur.hi)
        return true; /* dead branch: leave it to the ranges we have */
    return push_range(W, v, cur.lo, cur.hi);
}

static struct kiln_stmt *
wfor(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    struct walk *W = m->user;
    kiln_expr    min = wexpr(W, s->u.for_.min), ext = wexpr(W, s->u.for_.extent);
    int64_t      e;
    if (!min.id || !ext.id)
        return NULL;
    bool cext = kiln_expr_is_int(W->ctx, ext, &e);
    if (cext && e <= 0)
        return W->empty;
    bool gpu = s->u.for_.loop == KILN_LOOP_GPU_BLOCK || s->u.for_.loop == KILN_LOOP_GPU_THREAD;
    if (cext && e == 1 && !gpu) {
        uint32_t ns = W->ns;
        if (!push_subst(W, s->u.for_.var, min))
            return NULL;
        struct kiln_stmt *body = kiln_stmt_mutate(m, s->u.for_.body);
        W->ns = ns;
        return body;
    }
    struct ival mi = bound(W, min), ex = bound(W, ext);
    if (ex.hi <= 0)
        return W->empty; /* never runs */
    int64_t hi;
    if (ex.hi == PINF || mi.hi == PINF || kiln_add_overflows(mi.hi, ex.hi - 1, &hi))
        hi = PINF;
    uint32_t nr = W->nr;
    if (!push_range(W, s->u.for_.var, mi.lo, hi))
        return NULL;
    struct kiln_stmt *body = kiln_stmt_mutate(m, s->u.for_.body);
    pop_ranges(W, nr);
    if (!body)
        return NULL;
    if (kiln_stmt_empty(body))
        return W->empty;
    s->u.for_.min = min;
    s->u.for_.extent = ext;
    s->u.for_.body = body;
    return s;
}

static struct kiln_stmt *
wseq(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    struct walk *W = m->user;
    uint32_t     n = 0, total = 0;
    bool         nested = false;
    for (uint32_t i = 0; i < s->u.seq.n; i++) {
        struct kiln_stmt *c = kiln_stmt_mutate(m, s->u.seq.item[i]);
        if (!c)
            return NULL;
        s->u.seq.item[i] = c;
        total += c->kind == KILN_STMT_SEQ ? c->u.seq.n : 1;
        nested |= c->kind == KILN_STMT_SEQ && c->u.seq.n > 0;
    }
    struct kiln_stmt **item = s->u.seq.item;
    if (nested) { /* splice nested sequences into a new array (no aliasing) */
        item = kiln_arena_alloc(W->ctx, sizeof(*item) * total);
        if (!item)
            return NULL;
    }
    for (uint32_t i = 0; i < s->u.seq.n; i++) {
        struct kiln_stmt *c = s->u.seq.item[i];
        if (c->kind == KILN_STMT_SEQ)
            for (uint32_t j = 0; j < c->u.seq.n; j++)
                item[n++] = c->u.seq.item[j];
        else
            item[n++] = c;
    }
    if (n == 0)
        return W->empty;
    if (n == 1)
        return item[0];
    s->u.seq.item = item;
    s->u.seq.n = n;
    return s;
}

static struct kiln_stmt *
wif(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    struct walk *W = m->user;
    kiln_expr    c = wexpr(W, s->u.if_.cond);
    int64_t      v;
    if (!c.id)
        return NULL;
    if (kiln_expr_is_int(W->ctx, c, &v)) {
        if (v)
            return kiln_stmt_mutate(m, s->u.if_.then);
        return s->u.if_.els ? kiln_stmt_mutate(m, s->u.if_.els) : W->empty;
    }
    uint32_t nr = W->nr;
    if (!narrow(W, c, false))
        return NULL;
    struct kiln_stmt *then = kiln_stmt_mutate(m, s->u.if_.then), *els = NULL;
    pop_ranges(W, nr);
    if (!then)
        return NULL;
    if (s->u.if_.els) {
        if (!narrow(W, c, true))
            return NULL;
        els = kiln_stmt_mutate(m, s->u.if_.els);
        pop_ranges(W, nr);
        if (!els)
            return NULL;
        if (kiln_stmt_empty(els))
            els = NULL;
    }
    if (kiln_stmt_empty(then)) {
        if (!els)
            return W->empty;
        c = kiln_simplifier_expr(W->S, kiln_unary(W->ctx, KILN_OP_NOT, c));
        if (!c.id)
            return NULL;
        then = els;
        els = NULL;
    }
    s->u.if_.cond = c;
    s->u.if_.then = then;
    s->u.if_.els = els;
    return s;
}

static struct kiln_stmt *
wlet(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    struct walk *W = m->user;
    kiln_expr    val = wexpr(W, s->u.let.value);
    if (!val.id)
        return NULL;
    enum kiln_op op = op_of(W, val);
    if (op == KILN_OP_INT || op == KILN_OP_VAR) { /* trivial value: substitute */
        uint32_t ns = W->ns;
        if (!push_subst(W, s->u.let.var, val))
            return NULL;
        struct kiln_stmt *body = kiln_stmt_mutate(m, s->u.let.body);
        W->ns = ns;
        return body;
    }
    uint32_t nr = W->nr;
    if (is_intlike(kiln_expr_dtype(W->ctx, val))) {
        struct ival b = bound(W, val);
        if ((b.lo != NINF || b.hi != PINF) && !push_range(W, s->u.let.var, b.lo, b.hi))
            return NULL;
    }
    struct kiln_stmt *body = kiln_stmt_mutate(m, s->u.let.body);
    pop_ranges(W, nr);
    if (!body)
        return NULL;
    if (kiln_stmt_empty(body))
        return W->empty;
    s->u.let.value = val;
    s->u.let.body = body;
    return s;
}

static kiln_expr
wstore_expr(struct kiln_stmt_mutator *m, const struct kiln_stmt *s, enum kiln_stmt_field field,
            kiln_expr e)
{
    (void)s;
    (void)field;
    return wexpr(m->user, e);
}

/* After an ALLOC's body (the mutator's default, which walks a chain of ALLOCs in a loop: an
 * ALLOC callback recursing into the body overflowed the stack at about 60,000 root
 * temporaries): an ALLOC of an empty body is dropped. Other statements pass unchanged. */
static struct kiln_stmt *
walloc_post(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    struct walk *W = m->user;
    if (s->kind == KILN_STMT_ALLOC && kiln_stmt_empty(s->u.alloc.body))
        return W->empty;
    return s;
}

struct kiln_stmt *
kiln_simplify_stmt(kiln_ctx *ctx, struct kiln_stmt *s, const struct kiln_var_range *r, uint32_t nr)
{
    /* A mutator whose kind callbacks rewrite in place; stores take the default (their two
     * expressions simplified). */
    struct walk W = {.m = {.ctx = ctx,
                           .pass = "simplify",
                           .expr = wstore_expr,
                           .for_ = wfor,
                           .seq = wseq,
                           .if_ = wif,
                           .let = wlet,
                           .post = walloc_post},
                     .ctx = ctx};
    W.m.user = &W;
    if (!kiln_ok(ctx))
        return NULL;
    struct kiln_stmt *none[1] = {NULL};
    W.empty = kiln_stmt_seq(ctx, 0, none);
    if (!W.empty)
        return NULL;
    W.S = kiln_simplifier_new(ctx);
    if (!W.S)
        return NULL;
    bool ok = true;
    for (uint32_t i = 0; i < nr && ok; i++)
        ok = push_range(&W, r[i].var, r[i].min, r[i].max);
    struct kiln_stmt *out = ok ? kiln_stmt_mutate(&W.m, s) : NULL;
    kiln_simplifier_free(W.S);
    kiln_mem_free(ctx, W.r, sizeof(*W.r) * W.capr);
    kiln_mem_free(ctx, W.from, sizeof(*W.from) * W.caps);
    kiln_mem_free(ctx, W.to, sizeof(*W.to) * W.caps);
    if (!out && kiln_ok(ctx))
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "simplify", "statement simplification failed");
    return kiln_ok(ctx) ? out : NULL;
}

enum kiln_status
kiln_pass_simplify(struct kiln_func *f)
{
    kiln_ctx *ctx = f->ctx;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (!f->body)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "simplify", "function %s has no body",
                         kiln_sym_str(ctx, f->name));
    struct kiln_stmt *body = kiln_simplify_stmt(ctx, f->body, NULL, 0);
    if (!body)
        return ctx->err.status;
    f->body = body;
    return KILN_OK;
}
