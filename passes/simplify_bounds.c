/* passes/simplify_bounds.c -- the simplifier's state and its interval analysis: the memo
 * tables, the scratch pool, and bounds of integer expressions under variable ranges.
 *
 * Bounds are intervals with INT64_MIN / INT64_MAX standing for -inf / +inf, computed
 * structurally and memoised per environment (a set of variable ranges; expressions are DAGs).
 * The memo tables are keyed by node id and their entries carry a generation, so changing the
 * environment (entering a loop) is O(1). Interval arithmetic saturates: an overflowing bound
 * becomes infinite, which is always sound. Narrow integers (i8, i32) wrap, so their bounds are
 * their dtype's range; floats have none. The scratch pool holds the rules' linear forms
 * (simplify.c): bump allocation in blocks, released when the node that needed them is done. */
#include "simplify_int.h"

#include <string.h>

/* ---- scratch pool ---- */

struct pblock {
    struct pblock *next;
    size_t         size, used; /* bytes of data after the header */
};

#define PBLOCK_HDR ((sizeof(struct pblock) + 15) & ~(size_t)15)
#define PBLOCK_MIN ((size_t)16384)

static void *
pool_alloc(struct pool *p, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!p->head || p->head->size - p->head->used < n) {
        size_t         size = n > PBLOCK_MIN ? n : PBLOCK_MIN;
        struct pblock *b = kiln_mem_realloc(p->ctx, NULL, 0, PBLOCK_HDR + size);
        if (!b)
            return NULL;
        b->next = p->head;
        b->size = size;
        b->used = 0;
        p->head = b;
    }
    void *r = (char *)p->head + PBLOCK_HDR + p->head->used;
    p->head->used += n;
    return r;
}

static struct pmark
pool_mark(const struct pool *p)
{
    return (struct pmark){p->head, p->head ? p->head->used : 0};
}

static void
pool_release(struct pool *p, struct pmark m)
{
    while (p->head && p->head != m.head) {
        struct pblock *b = p->head;
        p->head = b->next;
        kiln_mem_free(p->ctx, b, PBLOCK_HDR + b->size);
    }
    if (p->head)
        p->head->used = m.used;
}

/* ---- memo tables keyed by node id, valid for one generation (environment) ---- */

static const struct slot *
table_get(const struct table *t, uint32_t key)
{
    if (!t->cap)
        return NULL;
    for (uint32_t i = (uint32_t)kiln_mix64(key) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (!t->s[i].key)
            return NULL;
        if (t->s[i].key == key && t->s[i].gen == t->gen)
            return &t->s[i];
    }
}

static void
table_insert(struct slot *s, uint32_t cap, struct slot v)
{
    uint32_t i = (uint32_t)kiln_mix64(v.key) & (cap - 1);
    while (s[i].key && !(s[i].key == v.key && s[i].gen == v.gen))
        i = (i + 1) & (cap - 1);
    s[i] = v;
}

static bool
table_put(kiln_ctx *ctx, struct table *t, uint32_t key, int64_t a, int64_t b)
{
    if (4 * (t->used + 1) > 3 * t->cap) {
        uint32_t ncap = 64;
        while (ncap < 4 * (t->live + 1))
            ncap *= 2;
        struct slot *ns = kiln_mem_realloc(ctx, NULL, 0, sizeof(struct slot) * ncap);
        if (!ns)
            return false;
        memset(ns, 0, sizeof(struct slot) * ncap);
        for (uint32_t i = 0; i < t->cap; i++)
            if (t->s[i].key && t->s[i].gen == t->gen)
                table_insert(ns, ncap, t->s[i]);
        kiln_mem_free(ctx, t->s, sizeof(struct slot) * t->cap);
        t->s = ns;
        t->cap = ncap;
        t->used = t->live;
    }
    uint32_t i = (uint32_t)kiln_mix64(key) & (t->cap - 1);
    while (t->s[i].key && !(t->s[i].key == key && t->s[i].gen == t->gen))
        i = (i + 1) & (t->cap - 1);
    if (!t->s[i].key) {
        t->used++;
        t->live++;
    }
    t->s[i] = (struct slot){.key = key, .gen = t->gen, .a = a, .b = b};
    return true;
}

static void
table_bump(struct table *t)
{
    t->gen++;
    t->live = 0;
}

static void
table_free(kiln_ctx *ctx, struct table *t)
{
    kiln_mem_free(ctx, t->s, sizeof(struct slot) * t->cap);
    *t = (struct table){0};
}

/* ---- simplifier state ---- */

void
kiln_simp_init(struct simp *S, kiln_ctx *ctx)
{
    *S = (struct simp){.ctx = ctx, .pool = {.ctx = ctx}};
    S->sm.gen = S->bm.gen = 1;
}

void
kiln_simp_env(struct simp *S, const struct kiln_var_range *r, uint32_t nr)
{
    S->r = r;
    S->nr = nr;
    table_bump(&S->sm);
    table_bump(&S->bm);
}

void
kiln_simp_fini(struct simp *S)
{
    table_free(S->ctx, &S->sm);
    table_free(S->ctx, &S->bm);
    pool_release(&S->pool, (struct pmark){0});
}

void
kiln_simp_oom(struct simp *S)
{
    if (!S->oom)
        KILN_FAIL(S->ctx, KILN_ERR_NOMEM, "simplify", "out of memory");
    S->oom = true;
}

void *
kiln_simp_alloc(struct simp *S, size_t n)
{
    void *p = pool_alloc(&S->pool, n);
    if (!p)
        kiln_simp_oom(S);
    return p;
}

struct pmark
kiln_simp_mark(const struct simp *S)
{
    return pool_mark(&S->pool);
}

void
kiln_simp_release(struct simp *S, struct pmark m)
{
    pool_release(&S->pool, m);
}

bool
kiln_simp_memo_get(const struct simp *S, kiln_expr e, kiln_expr *out)
{
    const struct slot *s = table_get(&S->sm, e.id);
    if (s)
        *out = (kiln_expr){(uint32_t)s->a};
    return s != NULL;
}

bool
kiln_simp_memo_put(struct simp *S, kiln_expr e, kiln_expr out)
{
    if (table_put(S->ctx, &S->sm, e.id, out.id, 0))
        return true;
    kiln_simp_oom(S);
    return false;
}

/* ---- intervals: lo == INT64_MIN is -inf, hi == INT64_MAX is +inf ---- */

static int64_t
lo_add(int64_t a, int64_t b)
{
    int64_t r;
    if (a == NINF || b == NINF || !add_ok(a, b, &r))
        return NINF;
    return r;
}

struct ival
kiln_iv_add(struct ival a, struct ival b)
{
    return (struct ival){lo_add(a.lo, b.lo), hi_add(a.hi, b.hi)};
}

struct ival
kiln_iv_scale(struct ival a, int64_t k)
{
    int64_t lo, hi;
    if (k == 0)
        return (struct ival){0, 0};
    if (k > 0) {
        lo = a.lo == NINF || !mul_ok(a.lo, k, &lo) ? NINF : lo;
        hi = a.hi == PINF || !mul_ok(a.hi, k, &hi) ? PINF : hi;
    } else {
        lo = a.hi == PINF || !mul_ok(a.hi, k, &lo) ? NINF : lo;
        hi = a.lo == NINF || !mul_ok(a.lo, k, &hi) ? PINF : hi;
    }
    return (struct ival){lo, hi};
}

static struct ival
iv_mul(struct ival a, struct ival b)
{
    if (a.lo == a.hi && a.lo != NINF && a.lo != PINF)
        return kiln_iv_scale(b, a.lo);
    if (b.lo == b.hi && b.lo != NINF && b.lo != PINF)
        return kiln_iv_scale(a, b.lo);
    if (iv_finite(a) && iv_finite(b)) {
        int64_t c[4];
        if (!mul_ok(a.lo, b.lo, &c[0]) || !mul_ok(a.lo, b.hi, &c[1]) || !mul_ok(a.hi, b.lo, &c[2])
            || !mul_ok(a.hi, b.hi, &c[3]))
            return IV_FULL;
        struct ival r = {c[0], c[0]};
        for (int i = 1; i < 4; i++) {
            r.lo = c[i] < r.lo ? c[i] : r.lo;
            r.hi = c[i] > r.hi ? c[i] : r.hi;
        }
        if (r.lo == NINF || r.hi == PINF)
            return IV_FULL;
        return r;
    }
    if (a.lo >= 0 && b.lo >= 0) {
        int64_t lo;
        return (struct ival){mul_ok(a.lo, b.lo, &lo) ? lo : 0, PINF};
    }
    return IV_FULL;
}

/* floor(a / d) for a finite numerator bound; (INT64_MIN, -1) saturates */
static int64_t
sfdiv(int64_t a, int64_t d)
{
    if (a == INT64_MIN && d == -1)
        return PINF;
    return kiln_scalar_floordiv(a, d);
}

static struct ival
iv_floordiv(struct ival a, struct ival b)
{
    if (b.lo == b.hi && b.lo != 0 && b.lo != NINF && b.lo != PINF) {
        int64_t d = b.lo;
        if (d == -1)
            return kiln_iv_scale(a, -1);
        if (d > 0)
            return (struct ival){a.lo == NINF ? NINF : kiln_scalar_floordiv(a.lo, d),
                                 a.hi == PINF ? PINF : kiln_scalar_floordiv(a.hi, d)};
        return (struct ival){a.hi == PINF ? NINF : kiln_scalar_floordiv(a.hi, d),
                             a.lo == NINF ? PINF : kiln_scalar_floordiv(a.lo, d)};
    }
    if (b.lo >= 1 || (b.hi <= -1 && b.hi != NINF)) {
        if (iv_finite(a) && b.lo != NINF && b.hi != PINF) {
            int64_t     c[4] = {sfdiv(a.lo, b.lo), sfdiv(a.lo, b.hi), sfdiv(a.hi, b.lo),
                                sfdiv(a.hi, b.hi)};
            struct ival r = {c[0], c[0]};
            for (int i = 1; i < 4; i++) {
                r.lo = c[i] < r.lo ? c[i] : r.lo;
                r.hi = c[i] > r.hi ? c[i] : r.hi;
            }
            return r;
        }
        if (b.lo >= 1 && a.lo >= 0)
            return (struct ival){0, a.hi == PINF ? PINF : kiln_scalar_floordiv(a.hi, b.lo)};
    }
    return IV_FULL;
}

static struct ival
iv_floormod(struct ival a, struct ival b)
{
    if (b.lo == b.hi && b.lo != 0 && b.lo != NINF && b.lo != PINF) {
        int64_t d = b.lo;
        if (iv_finite(a) && d != -1
            && kiln_scalar_floordiv(a.lo, d) == kiln_scalar_floordiv(a.hi, d))
            return (struct ival){kiln_scalar_floormod(a.lo, d), kiln_scalar_floormod(a.hi, d)};
        if (d > 0)
            return (struct ival){0, a.lo >= 0 && a.hi < d - 1 ? a.hi : d - 1};
        return (struct ival){d + 1, a.hi <= 0 && a.lo > d + 1 ? a.lo : 0};
    }
    if (b.lo >= 1) {
        int64_t hi = b.hi == PINF ? PINF : b.hi - 1;
        if (a.lo >= 0 && a.hi < hi)
            hi = a.hi;
        return (struct ival){0, hi};
    }
    if (b.hi <= -1 && b.hi != NINF) {
        int64_t lo = b.lo == NINF ? NINF : b.lo + 1;
        if (a.hi <= 0 && a.lo > lo)
            lo = a.lo;
        return (struct ival){lo, 0};
    }
    return IV_FULL;
}

static struct ival
dtype_range(enum kiln_dtype dt)
{
    struct ival r;
    kiln_dtype_range(dt, &r.lo, &r.hi); /* the full range (IV_FULL) for i64 and floats */
    return r;
}

static struct ival
bound_var(const struct simp *S, kiln_expr e)
{
    for (uint32_t i = S->nr; i-- > 0;)
        if (S->r[i].var.id == e.id && S->r[i].min <= S->r[i].max)
            return (struct ival){S->r[i].min, S->r[i].max};
    return dtype_range(kiln_expr_dtype(S->ctx, e));
}

static struct ival
bound_cmp(struct simp *S, enum kiln_op op, kiln_expr a, kiln_expr b)
{
    if (!is_intlike(kiln_expr_dtype(S->ctx, a)))
        return (struct ival){0, 1};
    struct ival x = kiln_simp_bound(S, a), y = kiln_simp_bound(S, b);
    bool        t, f;
    if (op == KILN_OP_LT) {
        t = x.hi != PINF && y.lo != NINF && x.hi < y.lo;
        f = x.lo != NINF && y.hi != PINF && x.lo >= y.hi;
    } else if (op == KILN_OP_LE) {
        t = x.hi != PINF && y.lo != NINF && x.hi <= y.lo;
        f = x.lo != NINF && y.hi != PINF && x.lo > y.hi;
    } else { /* EQ, NE */
        t = iv_finite(x) && iv_finite(y) && x.lo == x.hi && y.lo == y.hi && x.lo == y.lo;
        f = (x.hi != PINF && y.lo != NINF && x.hi < y.lo)
            || (x.lo != NINF && y.hi != PINF && x.lo > y.hi);
        if (op == KILN_OP_NE) {
            bool s = t;
            t = f;
            f = s;
        }
    }
    return t ? (struct ival){1, 1} : f ? (struct ival){0, 0} : (struct ival){0, 1};
}

static struct ival
bound_node(struct simp *S, kiln_expr e)
{
    const struct kiln_node n = S->ctx->node[e.id];
    enum kiln_dtype        dt = (enum kiln_dtype)n.dtype;
    kiln_expr              a = {n.kid[0]}, b = {n.kid[1]};
    if (!is_intlike(dt))
        return IV_FULL;
    if (dt != KILN_DTYPE_I64 && dt != KILN_DTYPE_BOOL && n.op != KILN_OP_INT)
        return dtype_range(dt); /* narrow integers wrap: no reasoning past their range */
    switch ((enum kiln_op)n.op) {
    case KILN_OP_INT:
        return (struct ival){n.imm, n.imm};
    case KILN_OP_VAR:
        return bound_var(S, e);
    case KILN_OP_ADD:
        return kiln_iv_add(kiln_simp_bound(S, a), kiln_simp_bound(S, b));
    case KILN_OP_SUB:
        return kiln_iv_add(kiln_simp_bound(S, a), kiln_iv_scale(kiln_simp_bound(S, b), -1));
    case KILN_OP_NEG:
        return kiln_iv_scale(kiln_simp_bound(S, a), -1);
    case KILN_OP_MUL:
        return iv_mul(kiln_simp_bound(S, a), kiln_simp_bound(S, b));
    case KILN_OP_FLOORDIV:
        return iv_floordiv(kiln_simp_bound(S, a), kiln_simp_bound(S, b));
    case KILN_OP_FLOORMOD:
        return iv_floormod(kiln_simp_bound(S, a), kiln_simp_bound(S, b));
    case KILN_OP_MIN: {
        struct ival x = kiln_simp_bound(S, a), y = kiln_simp_bound(S, b);
        return (struct ival){x.lo < y.lo ? x.lo : y.lo, x.hi < y.hi ? x.hi : y.hi};
    }
    case KILN_OP_MAX: {
        struct ival x = kiln_simp_bound(S, a), y = kiln_simp_bound(S, b);
        return (struct ival){x.lo > y.lo ? x.lo : y.lo, x.hi > y.hi ? x.hi : y.hi};
    }
    case KILN_OP_ABS: {
        struct ival x = kiln_simp_bound(S, a);
        if (x.lo >= 0)
            return x;
        if (x.hi <= 0)
            return kiln_iv_scale(x, -1);
        struct ival nx = kiln_iv_scale(x, -1);
        return (struct ival){0, nx.hi > x.hi ? nx.hi : x.hi};
    }
    case KILN_OP_SELECT: {
        struct ival c = kiln_simp_bound(S, a), x, y;
        if (c.lo == c.hi)
            return kiln_simp_bound(S, c.lo ? b : (kiln_expr){n.kid[2]});
        x = kiln_simp_bound(S, b);
        y = kiln_simp_bound(S, (kiln_expr){n.kid[2]});
        return (struct ival){x.lo < y.lo ? x.lo : y.lo, x.hi > y.hi ? x.hi : y.hi};
    }
    case KILN_OP_CAST: {
        enum kiln_dtype from = kiln_expr_dtype(S->ctx, a);
        if (dt == KILN_DTYPE_BOOL)
            return (struct ival){0, 1};
        if (is_intlike(from)) /* widening to i64: value preserved */
            return kiln_simp_bound(S, a);
        return IV_FULL;
    }
    case KILN_OP_EQ:
    case KILN_OP_NE:
    case KILN_OP_LT:
    case KILN_OP_LE:
        return bound_cmp(S, (enum kiln_op)n.op, a, b);
    case KILN_OP_AND: {
        struct ival x = kiln_simp_bound(S, a), y = kiln_simp_bound(S, b);
        if (x.hi == 0 || y.hi == 0)
            return (struct ival){0, 0};
        return (struct ival){x.lo && y.lo ? 1 : 0, 1};
    }
    case KILN_OP_OR: {
        struct ival x = kiln_simp_bound(S, a), y = kiln_simp_bound(S, b);
        if (x.lo == 1 || y.lo == 1)
            return (struct ival){1, 1};
        return (struct ival){0, x.hi || y.hi ? 1 : 0};
    }
    case KILN_OP_NOT: {
        struct ival x = kiln_simp_bound(S, a);
        return (struct ival){1 - x.hi, 1 - x.lo};
    }
    case KILN_OP_NIL:
    case KILN_OP_FLOAT:
    case KILN_OP_LIST:
    case KILN_OP_LOAD:
    case KILN_OP_DIV:
    case KILN_OP_POW:
    case KILN_OP_FLOOR:
    case KILN_OP_EXP:
    case KILN_OP_LOG:
    case KILN_OP_SQRT:
    case KILN_OP_RSQRT:
    case KILN_OP_TANH:
    case KILN_OP_ERF:
    case KILN_OP_SIGMOID:
    case KILN_OP_COUNT:
        break;
    }
    return dtype_range(dt);
}

struct ival
kiln_simp_bound(struct simp *S, kiln_expr e)
{
    const struct slot *s = table_get(&S->bm, e.id);
    if (s)
        return (struct ival){s->a, s->b};
    struct ival v = bound_node(S, e);
    if (!table_put(S->ctx, &S->bm, e.id, v.lo, v.hi))
        kiln_simp_oom(S);
    return v;
}
