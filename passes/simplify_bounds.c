/* passes/simplify_bounds.c -- the simplifier's state: the memo tables, the scratch pool, and
 * bounds of integer expressions under the session's variable ranges.
 *
 * Bounds are kiln_ival_bound's (ir/arith.c: saturating intervals, INT64_MIN / INT64_MAX
 * standing for -inf / +inf), memoised per environment (a set of variable ranges; expressions
 * are DAGs). The memo tables are keyed by node id and their entries carry a generation, so
 * changing the environment (entering a loop) is O(1). The scratch pool holds the rules' linear
 * forms (simplify.c): bump allocation in blocks, released when the node that needed them is
 * done. */
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

/* ---- bounds: kiln_ival_bound (ir/arith.c) under the session's ranges, memoised ---- */

static struct kiln_ival
bound_var(void *ud, kiln_expr e)
{
    const struct simp *S = ud;
    for (uint32_t i = S->nr; i-- > 0;)
        if (S->r[i].var.id == e.id && S->r[i].min <= S->r[i].max)
            return (struct kiln_ival){S->r[i].min, S->r[i].max};
    return kiln_ival_dtype(kiln_expr_dtype(S->ctx, e));
}

static struct kiln_ival
bound_sub(void *ud, kiln_expr e)
{
    return kiln_simp_bound(ud, e);
}

struct kiln_ival
kiln_simp_bound(struct simp *S, kiln_expr e)
{
    const struct slot *s = table_get(&S->bm, e.id);
    if (s)
        return (struct kiln_ival){s->a, s->b};
    struct kiln_ival_env env = {S->ctx, bound_var, bound_sub, S};
    struct kiln_ival     v = kiln_ival_bound(&env, e);
    if (!table_put(S->ctx, &S->bm, e.id, v.lo, v.hi))
        kiln_simp_oom(S);
    return v;
}
