/* ir/visit.c -- walking a loop nest: the statement visitor and mutator (ir/ir.h).
 *
 * Both recurse by default and call a pass's callbacks only for the statement kinds it set,
 * so a pass states what it does at the nodes it cares about and nothing else. Recursion
 * depth is the statement nesting depth, less chains of ALLOCs: sequence items are walked in a
 * loop, and so is an ALLOC nested directly in an ALLOC when the pass has no ALLOC callback
 * (lowering wraps the body in one ALLOC per root temporary). The mutator
 * never writes its input: a node whose children all come back unchanged is returned as is,
 * any other is rebuilt as a shallow copy holding the new children. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* ---- visitor ---- */

static bool
ends(enum kiln_walk r)
{
    return r == KILN_WALK_STOP || r == KILN_WALK_FAIL;
}

static enum kiln_walk
visit_expr(struct kiln_stmt_visitor *v, const struct kiln_stmt *s, enum kiln_stmt_field f,
           kiln_expr e)
{
    return v->expr ? v->expr(v, s, f, e) : KILN_WALK_GO;
}

enum kiln_walk
kiln_stmt_visit_children(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    enum kiln_walk r = KILN_WALK_GO;
    if (!s)
        return r;
    switch ((enum kiln_stmt_kind)s->kind) {
    case KILN_STMT_FOR:
        if (ends(r = visit_expr(v, s, KILN_STMT_FIELD_FOR_MIN, s->u.for_.min))
            || ends(r = visit_expr(v, s, KILN_STMT_FIELD_FOR_EXTENT, s->u.for_.extent)))
            return r;
        return kiln_stmt_visit(v, s->u.for_.body);
    case KILN_STMT_STORE:
        if (ends(r = visit_expr(v, s, KILN_STMT_FIELD_STORE_INDEX, s->u.store.index)))
            return r;
        return ends(r = visit_expr(v, s, KILN_STMT_FIELD_STORE_VALUE, s->u.store.value))
                   ? r
                   : KILN_WALK_GO;
    case KILN_STMT_SEQ:
        for (uint32_t i = 0; i < s->u.seq.n; i++)
            if (ends(r = kiln_stmt_visit(v, s->u.seq.item[i])))
                return r;
        return KILN_WALK_GO;
    case KILN_STMT_IF:
        if (ends(r = visit_expr(v, s, KILN_STMT_FIELD_IF_COND, s->u.if_.cond))
            || ends(r = kiln_stmt_visit(v, s->u.if_.then)))
            return r;
        return kiln_stmt_visit(v, s->u.if_.els);
    case KILN_STMT_LET:
        if (ends(r = visit_expr(v, s, KILN_STMT_FIELD_LET_VALUE, s->u.let.value)))
            return r;
        return kiln_stmt_visit(v, s->u.let.body);
    case KILN_STMT_ALLOC:
        return kiln_stmt_visit(v, s->u.alloc.body);
    }
    return KILN_WALK_GO;
}

static enum kiln_walk visit_node(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);

/* A chain of ALLOCs (lowering wraps the function body in one per root temporary) for a
 * visitor with no ALLOC callback: pre on each ALLOC going down, the innermost body, then post
 * on each going up, in a loop; recursing along the chain overflowed the stack at about 60,000
 * statements. */
static enum kiln_walk
visit_alloc_chain(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    const struct kiln_stmt **up = NULL; /* the ALLOCs entered, for post */
    uint32_t                 n = 0, cap = 0;
    enum kiln_walk           r = KILN_WALK_GO;
    const struct kiln_stmt  *a = s;
    for (; a && a->kind == KILN_STMT_ALLOC; a = a->u.alloc.body) {
        if (v->post && n == cap) {
            const struct kiln_stmt **g = realloc(up, sizeof *up * (cap ? 2 * cap : 64));
            if (!g) /* out of memory: the rest of the chain by recursion */
                break;
            up = g;
            cap = cap ? 2 * cap : 64;
        }
        r = v->pre ? v->pre(v, a) : KILN_WALK_GO;
        if (ends(r))
            goto out;
        if (v->post)
            up[n++] = a;
        if (r == KILN_WALK_SKIP) { /* its body is not visited; its post still runs */
            a = NULL;
            break;
        }
    }
    if (a && ends(r = a->kind == KILN_STMT_ALLOC ? visit_node(v, a) : kiln_stmt_visit(v, a)))
        goto out;
    r = KILN_WALK_GO;
    while (n > 0)
        if (ends(r = v->post(v, up[--n])))
            goto out;
    r = KILN_WALK_GO;
out:
    free(up);
    return r;
}

enum kiln_walk
kiln_stmt_visit(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    if (!s)
        return KILN_WALK_GO;
    if (s->kind == KILN_STMT_ALLOC && !v->alloc)
        return visit_alloc_chain(v, s);
    return visit_node(v, s);
}

static enum kiln_walk
visit_node(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    enum kiln_walk r = v->pre ? v->pre(v, s) : KILN_WALK_GO;
    if (ends(r))
        return r;
    if (r != KILN_WALK_SKIP) {
        enum kiln_walk (*kind)(struct kiln_stmt_visitor *, const struct kiln_stmt *) = NULL;
        switch ((enum kiln_stmt_kind)s->kind) {
        case KILN_STMT_FOR:
            kind = v->for_;
            break;
        case KILN_STMT_STORE:
            kind = v->store;
            break;
        case KILN_STMT_SEQ:
            kind = v->seq;
            break;
        case KILN_STMT_IF:
            kind = v->if_;
            break;
        case KILN_STMT_LET:
            kind = v->let;
            break;
        case KILN_STMT_ALLOC:
            kind = v->alloc;
            break;
        }
        r = kind ? kind(v, s) : kiln_stmt_visit_children(v, s);
        if (ends(r))
            return r;
    }
    r = v->post ? v->post(v, s) : KILN_WALK_GO;
    return ends(r) ? r : KILN_WALK_GO;
}

/* ---- the buffers a statement accesses ---- */

struct used_walk {
    const kiln_ctx *ctx;
    uint32_t        nbuf, stamp, *mark, *used, n;
};

static void
use_buf(struct used_walk *w, uint32_t b)
{
    if (b < w->nbuf && w->mark[b] != w->stamp) {
        w->mark[b] = w->stamp;
        w->used[w->n++] = b;
    }
}

static bool
used_load(void *ud, kiln_expr e)
{
    struct used_walk *w = ud;
    use_buf(w, (uint32_t)w->ctx->node[e.id].imm);
    return true;
}

static enum kiln_walk
used_expr(struct kiln_stmt_visitor *v, const struct kiln_stmt *s, enum kiln_stmt_field f,
          kiln_expr e)
{
    (void)s;
    (void)f;
    struct used_walk *w = v->user;
    kiln_expr_visit_loads(w->ctx, e, used_load, w);
    return KILN_WALK_GO;
}

static enum kiln_walk
used_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    if (s->kind == KILN_STMT_STORE)
        use_buf(v->user, s->u.store.buf);
    return KILN_WALK_GO;
}

uint32_t
kiln_stmt_buffers(const kiln_ctx *ctx, const struct kiln_stmt *s, uint32_t nbuf, uint32_t *mark,
                  uint32_t stamp, uint32_t *used, uint32_t n)
{
    struct used_walk         w = {ctx, nbuf, stamp, mark, used, n};
    struct kiln_stmt_visitor v = {.user = &w, .pre = used_pre, .expr = used_expr};
    kiln_stmt_visit(&v, s);
    return w.n;
}

uint32_t
kiln_used_params(const uint32_t *param_of, const uint32_t *used, uint32_t n, uint32_t *out)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (param_of[used[i]])
            out[k++] = param_of[used[i]] - 1;
    for (uint32_t i = 1; i < k; i++) /* insertion sort: a statement uses few parameters */
        for (uint32_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            uint32_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return k;
}

/* ---- mutator ---- */

static const char *
pass_of(const struct kiln_stmt_mutator *m)
{
    return m->pass ? m->pass : "mutate";
}

static kiln_expr
mutate_expr(struct kiln_stmt_mutator *m, const struct kiln_stmt *s, enum kiln_stmt_field f,
            kiln_expr e)
{
    if (!m->expr || m->stop)
        return e;
    return m->expr(m, s, f, e);
}

/* A new node with s's fields (the rebuilt node, or a copy). */
static struct kiln_stmt *
fresh(struct kiln_stmt_mutator *m, const struct kiln_stmt *s)
{
    struct kiln_stmt *c = kiln_arena_alloc(m->ctx, sizeof *c);
    if (c)
        *c = *s;
    return c;
}

/* The sequence's items mutated; the item array is copied only when an item changed. */
static struct kiln_stmt *
mutate_seq(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    struct kiln_stmt **item = NULL;
    uint32_t           n = s->u.seq.n;
    for (uint32_t i = 0; i < n; i++) {
        struct kiln_stmt *k = kiln_stmt_mutate(m, s->u.seq.item[i]);
        if (!k)
            return NULL;
        if (k == s->u.seq.item[i] && !item && !m->copy)
            continue;
        if (!item) { /* first change (or copying): copy the items so far */
            item = kiln_arena_alloc(m->ctx, sizeof(*item) * (n + 1));
            if (!item)
                return NULL;
            memcpy(item, s->u.seq.item, sizeof(*item) * i);
        }
        item[i] = k;
    }
    if (!item && !(m->copy && n == 0))
        return s;
    struct kiln_stmt *c = fresh(m, s);
    if (!c)
        return NULL;
    if (!item && !(item = kiln_arena_alloc(m->ctx, sizeof(*item))))
        return NULL;
    c->u.seq.item = item;
    return c;
}

struct kiln_stmt *
kiln_stmt_mutate_children(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    kiln_ctx *ctx = m->ctx;
    if (!kiln_ok(ctx))
        return NULL;
    if (!s) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, pass_of(m), "missing statement");
        return NULL;
    }
    if (s->kind > KILN_STMT_ALLOC) {
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, pass_of(m), "unknown statement kind %d", s->kind);
        return NULL;
    }
    struct kiln_stmt t = *s; /* the node with its new children */
    switch ((enum kiln_stmt_kind)s->kind) {
    case KILN_STMT_FOR:
        t.u.for_.min = mutate_expr(m, s, KILN_STMT_FIELD_FOR_MIN, s->u.for_.min);
        t.u.for_.extent = t.u.for_.min.id
                              ? mutate_expr(m, s, KILN_STMT_FIELD_FOR_EXTENT, s->u.for_.extent)
                              : t.u.for_.min;
        if (!t.u.for_.extent.id || !(t.u.for_.body = kiln_stmt_mutate(m, s->u.for_.body)))
            return NULL;
        if (!m->copy && t.u.for_.min.id == s->u.for_.min.id
            && t.u.for_.extent.id == s->u.for_.extent.id && t.u.for_.body == s->u.for_.body)
            return s;
        break;
    case KILN_STMT_STORE:
        t.u.store.index = mutate_expr(m, s, KILN_STMT_FIELD_STORE_INDEX, s->u.store.index);
        if (!t.u.store.index.id)
            return NULL;
        t.u.store.value = mutate_expr(m, s, KILN_STMT_FIELD_STORE_VALUE, s->u.store.value);
        if (!t.u.store.value.id)
            return NULL;
        if (!m->copy && t.u.store.index.id == s->u.store.index.id
            && t.u.store.value.id == s->u.store.value.id)
            return s;
        break;
    case KILN_STMT_SEQ:
        return mutate_seq(m, s);
    case KILN_STMT_IF:
        t.u.if_.cond = mutate_expr(m, s, KILN_STMT_FIELD_IF_COND, s->u.if_.cond);
        if (!t.u.if_.cond.id || !(t.u.if_.then = kiln_stmt_mutate(m, s->u.if_.then)))
            return NULL;
        if (s->u.if_.els && !(t.u.if_.els = kiln_stmt_mutate(m, s->u.if_.els)))
            return NULL;
        if (!m->copy && t.u.if_.cond.id == s->u.if_.cond.id && t.u.if_.then == s->u.if_.then
            && t.u.if_.els == s->u.if_.els)
            return s;
        break;
    case KILN_STMT_LET:
        t.u.let.value = mutate_expr(m, s, KILN_STMT_FIELD_LET_VALUE, s->u.let.value);
        if (!t.u.let.value.id || !(t.u.let.body = kiln_stmt_mutate(m, s->u.let.body)))
            return NULL;
        if (!m->copy && t.u.let.value.id == s->u.let.value.id && t.u.let.body == s->u.let.body)
            return s;
        break;
    case KILN_STMT_ALLOC:
        if (!(t.u.alloc.body = kiln_stmt_mutate(m, s->u.alloc.body)))
            return NULL;
        if (!m->copy && t.u.alloc.body == s->u.alloc.body)
            return s;
        break;
    }
    return fresh(m, &t);
}

static struct kiln_stmt *mutate_node(struct kiln_stmt_mutator *m, struct kiln_stmt *s);

/* A chain of ALLOCs for a mutator with no ALLOC callback, in a loop (as the visitor's): the
 * innermost body mutated, then each ALLOC rebuilt around it going up (kept when its body came
 * back unchanged) and given to post. Returns NULL, nothing done, when the
 * chain could not be recorded (*fallback: out of memory), and the caller recurses instead. */
static struct kiln_stmt *
mutate_alloc_chain(struct kiln_stmt_mutator *m, struct kiln_stmt *s, bool *fallback)
{
    struct kiln_stmt **up = NULL;
    uint32_t           n = 0, cap = 0;
    struct kiln_stmt  *a = s;
    *fallback = false;
    for (; a && a->kind == KILN_STMT_ALLOC; a = a->u.alloc.body) {
        if (n == cap) {
            struct kiln_stmt **g = realloc(up, sizeof *up * (cap ? 2 * cap : 64));
            if (!g) {
                free(up);
                *fallback = true;
                return NULL;
            }
            up = g;
            cap = cap ? 2 * cap : 64;
        }
        up[n++] = a;
    }
    struct kiln_stmt *r = kiln_stmt_mutate(m, a); /* a NULL body fails there */
    while (r && n > 0) {
        struct kiln_stmt *al = up[--n];
        if (m->copy || r != al->u.alloc.body) {
            struct kiln_stmt t = *al;
            t.u.alloc.body = r;
            al = fresh(m, &t);
        }
        r = al;
        if (r && m->post && !m->stop)
            r = m->post(m, r);
    }
    free(up);
    return r;
}

struct kiln_stmt *
kiln_stmt_mutate(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    if (!kiln_ok(m->ctx))
        return NULL;
    if (s && s->kind == KILN_STMT_ALLOC && !m->alloc && !m->stop) {
        bool              fallback;
        struct kiln_stmt *r = mutate_alloc_chain(m, s, &fallback);
        if (!fallback)
            return r;
    }
    return mutate_node(m, s);
}

static struct kiln_stmt *
mutate_node(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    if (!kiln_ok(m->ctx))
        return NULL;
    if (!s) {
        KILN_FAIL(m->ctx, KILN_ERR_INVALID, pass_of(m), "missing statement");
        return NULL;
    }
    if (m->stop)
        return s;
    struct kiln_stmt *(*kind)(struct kiln_stmt_mutator *, struct kiln_stmt *) = NULL;
    switch ((enum kiln_stmt_kind)s->kind) {
    case KILN_STMT_FOR:
        kind = m->for_;
        break;
    case KILN_STMT_STORE:
        kind = m->store;
        break;
    case KILN_STMT_SEQ:
        kind = m->seq;
        break;
    case KILN_STMT_IF:
        kind = m->if_;
        break;
    case KILN_STMT_LET:
        kind = m->let;
        break;
    case KILN_STMT_ALLOC:
        kind = m->alloc;
        break;
    }
    struct kiln_stmt *r = kind ? kind(m, s) : kiln_stmt_mutate_children(m, s);
    if (r && m->post && !m->stop)
        r = m->post(m, r);
    return r;
}
