/* tests/visit/test_visit.c -- the statement visitor and mutator (ir/visit.c): visits per kind
 * and their order on a hand-built nest, kind callbacks replacing the default, skip, early stop
 * and failure; a mutator that rewrites one kind and shares every unchanged subtree, a no-op
 * mutator, a deep copy, a stopped mutation and errors. */
#include "../harness.h"

#include <string.h>

/* alloc T: heap f32[4]
 *   for i in [0, +4): T[i] = A[i] * 2
 *   for j in [0, +4):
 *     let t = j + 1
 *     if t < 4: B[j] = T[j] + T[t]
 *     else:     B[j] = T[j] */
struct nest {
    kiln_ctx         *ctx;
    struct kiln_func *f;
    uint32_t          A, B, T;
    struct kiln_stmt *root, *seq, *fi, *fj, *let, *if_, *st_t, *st_then, *st_els;
};

static struct nest
build(void)
{
    struct nest n = {.ctx = kiln_ctx_new(NULL)};
    kiln_ctx   *ctx = n.ctx;
    int64_t     sh[1] = {4};
    n.f = kiln_func_new(ctx, "k");
    n.A = kiln_func_add_buffer(n.f, "A", KILN_DTYPE_F32, 1, sh, KILN_SCOPE_GLOBAL, 0);
    n.B = kiln_func_add_buffer(n.f, "B", KILN_DTYPE_F32, 1, sh, KILN_SCOPE_GLOBAL, 1);
    n.T = kiln_func_add_buffer(n.f, "T", KILN_DTYPE_F32, 1, sh, KILN_SCOPE_HEAP, KILN_NONE);
    kiln_expr i = kiln_fresh_var(ctx, "i"), j = kiln_fresh_var(ctx, "j"),
              t = kiln_fresh_var(ctx, "t"), zero = kiln_idx(ctx, 0), four = kiln_idx(ctx, 4);
    n.st_t = kiln_stmt_store(
        ctx, n.T, 1, &i,
        kiln_mul(ctx, kiln_func_load(n.f, n.A, 1, &i), kiln_float(ctx, 2, KILN_DTYPE_F32)));
    n.fi = kiln_stmt_for(ctx, i, zero, four, KILN_LOOP_SERIAL, n.st_t);
    kiln_expr tj = kiln_func_load(n.f, n.T, 1, &j);
    n.st_then =
        kiln_stmt_store(ctx, n.B, 1, &j, kiln_add(ctx, tj, kiln_func_load(n.f, n.T, 1, &t)));
    n.st_els = kiln_stmt_store(ctx, n.B, 1, &j, tj);
    n.if_ = kiln_stmt_if(ctx, kiln_lt(ctx, t, four), n.st_then, n.st_els);
    n.let = kiln_stmt_let(ctx, t, kiln_add(ctx, j, kiln_idx(ctx, 1)), n.if_);
    n.fj = kiln_stmt_for(ctx, j, zero, four, KILN_LOOP_SERIAL, n.let);
    struct kiln_stmt *items[2] = {n.fi, n.fj};
    n.seq = kiln_stmt_seq(ctx, 2, items);
    n.root = n.f->body = kiln_stmt_alloc(ctx, n.T, n.seq);
    CHECK(n.root != NULL);
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(n.f, false));
    return n;
}

/* Runs f on A = 1, 2, 3, 4 and returns B in out. */
static void
run(struct kiln_func *f, double out[4])
{
    double  a[4] = {1, 2, 3, 4};
    double *bufs[2] = {a, out};
    CHECK_EQ_INT(KILN_OK, kiln_func_eval(f, false, bufs));
}

/* The printed nest (arena memory, freed with the context). */
static char *
print(struct kiln_func *f)
{
    struct kiln_buf b = {0};
    CHECK_EQ_INT(KILN_OK, kiln_func_print(f, &b));
    return b.data;
}

/* ---- visitor ---- */

struct counts {
    int  pre[6], post[6], expr[6];
    char order[32]; /* pre-order kinds, one letter each: F S Q I L A */
    char post_order[32];
    int  npre, npost;
    int  skip_kind, stop_kind, fail_kind; /* -1: none */
};

static const char kind_letter[] = "FSQILA";

static enum kiln_walk
count_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct counts *c = v->user;
    c->pre[s->kind]++;
    c->order[c->npre++] = kind_letter[s->kind];
    if (s->kind == c->stop_kind)
        return KILN_WALK_STOP;
    if (s->kind == c->fail_kind)
        return KILN_WALK_FAIL;
    return s->kind == c->skip_kind ? KILN_WALK_SKIP : KILN_WALK_GO;
}

static enum kiln_walk
count_post(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct counts *c = v->user;
    c->post[s->kind]++;
    c->post_order[c->npost++] = kind_letter[s->kind];
    return KILN_WALK_GO;
}

static enum kiln_walk
count_expr(struct kiln_stmt_visitor *v, const struct kiln_stmt *s, enum kiln_stmt_field field,
           kiln_expr e)
{
    struct counts *c = v->user;
    CHECK(e.id != 0);
    switch (field) {
    case KILN_STMT_FIELD_FOR_MIN:
        CHECK_EQ_INT(s->u.for_.min.id, e.id);
        break;
    case KILN_STMT_FIELD_FOR_EXTENT:
        CHECK_EQ_INT(s->u.for_.extent.id, e.id);
        break;
    case KILN_STMT_FIELD_STORE_INDEX:
        CHECK_EQ_INT(s->u.store.index.id, e.id);
        break;
    case KILN_STMT_FIELD_STORE_VALUE:
        CHECK_EQ_INT(s->u.store.value.id, e.id);
        break;
    case KILN_STMT_FIELD_IF_COND:
        CHECK_EQ_INT(s->u.if_.cond.id, e.id);
        break;
    case KILN_STMT_FIELD_LET_VALUE:
        CHECK_EQ_INT(s->u.let.value.id, e.id);
        break;
    }
    c->expr[s->kind]++;
    return KILN_WALK_GO;
}

static struct kiln_stmt_visitor
counter(struct counts *c)
{
    memset(c, 0, sizeof *c);
    c->skip_kind = c->stop_kind = c->fail_kind = -1;
    return (struct kiln_stmt_visitor){
        .user = c, .pre = count_pre, .post = count_post, .expr = count_expr};
}

static void
test_visit_counts(void)
{
    struct nest              n = build();
    struct counts            c;
    struct kiln_stmt_visitor v = counter(&c);
    CHECK_EQ_INT(KILN_WALK_GO, kiln_stmt_visit(&v, n.root));
    static const int want[6] = {[KILN_STMT_FOR] = 2, [KILN_STMT_STORE] = 3, [KILN_STMT_SEQ] = 1,
                                [KILN_STMT_IF] = 1,  [KILN_STMT_LET] = 1,   [KILN_STMT_ALLOC] = 1};
    for (int k = 0; k < 6; k++) {
        CHECK_EQ_INT(want[k], c.pre[k]);
        CHECK_EQ_INT(want[k], c.post[k]);
    }
    /* min and extent of two loops, index and value of three stores, a condition, a value */
    CHECK_EQ_INT(4, c.expr[KILN_STMT_FOR]);
    CHECK_EQ_INT(6, c.expr[KILN_STMT_STORE]);
    CHECK_EQ_INT(1, c.expr[KILN_STMT_IF]);
    CHECK_EQ_INT(1, c.expr[KILN_STMT_LET]);
    CHECK_EQ_INT(0, c.expr[KILN_STMT_SEQ] + c.expr[KILN_STMT_ALLOC]);
    CHECK_EQ_STR("AQFSFLISS", c.order);
    CHECK_EQ_STR("SFSSILFQA", c.post_order);
    CHECK_EQ_INT(KILN_WALK_GO, kiln_stmt_visit(&v, NULL)); /* nothing */
    kiln_ctx_free(n.ctx);
}

/* A for callback that visits the body only: the loops' bounds are no longer offered. */
static enum kiln_walk
body_only(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    return kiln_stmt_visit(v, s->u.for_.body);
}

static void
test_visit_kind_callback(void)
{
    struct nest              n = build();
    struct counts            c;
    struct kiln_stmt_visitor v = counter(&c);
    v.for_ = body_only;
    CHECK_EQ_INT(KILN_WALK_GO, kiln_stmt_visit(&v, n.root));
    CHECK_EQ_INT(0, c.expr[KILN_STMT_FOR]);
    CHECK_EQ_INT(6, c.expr[KILN_STMT_STORE]);
    CHECK_EQ_STR("AQFSFLISS", c.order); /* pre and post still run around the callback */
    CHECK_EQ_INT(2, c.post[KILN_STMT_FOR]);
    kiln_ctx_free(n.ctx);
}

static void
test_visit_skip_stop_fail(void)
{
    struct nest              n = build();
    struct counts            c;
    struct kiln_stmt_visitor v = counter(&c);
    /* skip: the let's value and body are left out, its post still runs */
    c.skip_kind = KILN_STMT_LET;
    CHECK_EQ_INT(KILN_WALK_GO, kiln_stmt_visit(&v, n.root));
    CHECK_EQ_STR("AQFSFL", c.order);
    CHECK_EQ_STR("SFLFQA", c.post_order);
    CHECK_EQ_INT(0, c.expr[KILN_STMT_LET] + c.expr[KILN_STMT_IF]);
    /* stop at the first store: nothing after it, no post at all */
    v = counter(&c);
    c.stop_kind = KILN_STMT_STORE;
    CHECK_EQ_INT(KILN_WALK_STOP, kiln_stmt_visit(&v, n.root));
    CHECK_EQ_STR("AQFS", c.order);
    CHECK_EQ_INT(0, c.npost);
    CHECK_EQ_INT(2, c.expr[KILN_STMT_FOR]); /* the first loop's bounds came before its body */
    CHECK_EQ_INT(0, c.expr[KILN_STMT_STORE]);
    /* fail at the if: the walk ends there and says so */
    v = counter(&c);
    c.fail_kind = KILN_STMT_IF;
    CHECK_EQ_INT(KILN_WALK_FAIL, kiln_stmt_visit(&v, n.root));
    CHECK_EQ_STR("AQFSFLI", c.order);
    CHECK_EQ_STR("SF", c.post_order);
    kiln_ctx_free(n.ctx);
}

/* ---- mutator ---- */

struct triple {
    uint32_t buf;
    int      calls;
    bool     stop_after_one;
};

/* Stores to one buffer store three times their value; the others are kept. */
static struct kiln_stmt *
triple_store(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    struct triple *T = m->user;
    if (s->u.store.buf != T->buf)
        return s;
    T->calls++;
    kiln_expr         idx = {kiln_node_get(m->ctx, s->u.store.index)->kid[0]};
    struct kiln_stmt *r =
        kiln_stmt_store(m->ctx, s->u.store.buf, 1, &idx,
                        kiln_mul(m->ctx, s->u.store.value, kiln_float(m->ctx, 3, KILN_DTYPE_F32)));
    if (T->stop_after_one)
        m->stop = true;
    return r;
}

static void
test_mutate_one_kind(void)
{
    struct nest              n = build();
    char                    *before = print(n.f);
    double                   b0[4], b1[4];
    struct triple            T = {.buf = n.B};
    struct kiln_stmt_mutator m = {.ctx = n.ctx, .user = &T, .store = triple_store};
    run(n.f, b0);
    struct kiln_stmt *r = kiln_stmt_mutate(&m, n.root);
    CHECK(r != NULL);
    CHECK_EQ_INT(2, T.calls);
    /* the path to the rewritten stores is new, everything else is shared */
    CHECK(r != n.root);
    const struct kiln_stmt *seq = r->u.alloc.body;
    CHECK(seq != n.seq);
    CHECK_EQ_INT(2, seq->u.seq.n);
    CHECK(seq->u.seq.item[0] == n.fi); /* stores to T only: untouched, the same node */
    const struct kiln_stmt *fj = seq->u.seq.item[1];
    CHECK(fj != n.fj && fj->u.for_.body != n.let && fj->u.for_.body->u.let.body != n.if_);
    CHECK_EQ_INT(n.fj->u.for_.var.id, fj->u.for_.var.id);
    CHECK_EQ_INT(n.fj->u.for_.extent.id, fj->u.for_.extent.id);
    /* the input is unchanged */
    CHECK(n.seq->u.seq.item[1] == n.fj && n.fj->u.for_.body == n.let
          && n.if_->u.if_.then == n.st_then);
    CHECK_EQ_STR(before, print(n.f));
    n.f->body = r;
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(n.f, false));
    run(n.f, b1);
    for (int k = 0; k < 4; k++)
        CHECK_NEAR(3 * b0[k], b1[k], 0);
    CHECK_NEAR(18, b1[0], 0); /* T = 2A = 2 4 6 8: B[0] = (2 + 4) * 3 */
    kiln_ctx_free(n.ctx);
}

static kiln_expr
same_expr(struct kiln_stmt_mutator *m, const struct kiln_stmt *s, enum kiln_stmt_field field,
          kiln_expr e)
{
    (void)m;
    (void)s;
    (void)field;
    return e;
}

static void
test_mutate_nothing_and_copy(void)
{
    struct nest              n = build();
    struct kiln_stmt_mutator m = {.ctx = n.ctx, .expr = same_expr};
    uint32_t                 nnode = n.ctx->nnode;
    CHECK(kiln_stmt_mutate(&m, n.root) == n.root); /* nothing changed: the same tree */
    CHECK_EQ_INT(nnode, n.ctx->nnode);
    /* a deep copy: every node new, the same text */
    char *before = print(n.f);
    m.copy = true;
    struct kiln_stmt *r = kiln_stmt_mutate(&m, n.root);
    CHECK(r && r != n.root && r->u.alloc.body != n.seq);
    const struct kiln_stmt *seq = r->u.alloc.body;
    CHECK(seq->u.seq.item != n.seq->u.seq.item);
    CHECK(seq->u.seq.item[0] != n.fi && seq->u.seq.item[0]->u.for_.body != n.st_t);
    const struct kiln_stmt *if_ = seq->u.seq.item[1]->u.for_.body->u.let.body;
    CHECK(if_ != n.if_ && if_->u.if_.then != n.st_then && if_->u.if_.els != n.st_els);
    n.f->body = r;
    char *after = print(n.f);
    CHECK_EQ_STR(before, after);
    kiln_ctx_free(n.ctx);
}

static void
test_mutate_stop(void)
{
    struct nest              n = build();
    struct triple            T = {.buf = n.B, .stop_after_one = true};
    struct kiln_stmt_mutator m = {.ctx = n.ctx, .user = &T, .store = triple_store};
    struct kiln_stmt        *r = kiln_stmt_mutate(&m, n.root);
    CHECK(r && r != n.root);
    CHECK_EQ_INT(1, T.calls);
    CHECK(m.stop);
    const struct kiln_stmt *if_ = r->u.alloc.body->u.seq.item[1]->u.for_.body->u.let.body;
    CHECK(if_ != n.if_);
    CHECK(if_->u.if_.then != n.st_then); /* rewritten before the stop */
    CHECK(if_->u.if_.els == n.st_els);   /* not reached: kept */
    kiln_ctx_free(n.ctx);
}

static struct kiln_stmt *
refuse_if(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    (void)s;
    KILN_FAIL(m->ctx, KILN_ERR_UNSUPPORTED, "test", "no ifs here");
    return NULL;
}

static void
test_mutate_errors(void)
{
    struct nest              n = build();
    struct kiln_stmt_mutator m = {.ctx = n.ctx, .pass = "test", .if_ = refuse_if};
    CHECK(kiln_stmt_mutate(&m, n.root) == NULL);
    CHECK_EQ_INT(KILN_ERR_UNSUPPORTED, kiln_ctx_error(n.ctx)->status);
    CHECK(kiln_stmt_mutate(&m, n.fi) == NULL); /* the context is in error: nothing is done */
    kiln_ctx_error_clear(n.ctx);
    /* a loop without a body */
    struct kiln_stmt *bad = kiln_arena_alloc(n.ctx, sizeof *bad);
    *bad = *n.fi;
    bad->u.for_.body = NULL;
    m.if_ = NULL;
    CHECK(kiln_stmt_mutate(&m, bad) == NULL);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_ctx_error(n.ctx)->status);
    CHECK(strstr(kiln_ctx_error(n.ctx)->msg, "missing statement") != NULL);
    kiln_ctx_free(n.ctx);
}

/* ---- a deep chain of ALLOCs ----
 *
 * Lowering wraps the body in one ALLOC per root temporary; walking that chain by recursion
 * overflowed the stack at about 60,000 statements. DEEP nested ALLOCs (far more than an 8 MB
 * stack held by recursion) around B[0] = A[0]. */
#define DEEP 300000

struct deep {
    kiln_ctx         *ctx;
    struct kiln_func *f;
    uint32_t          A, B, first; /* buffer of the outermost ALLOC */
    struct kiln_stmt *root, *store;
};

static struct deep
build_deep(void)
{
    struct deep d = {.ctx = kiln_ctx_new(NULL)};
    int64_t     sh[1] = {4};
    d.f = kiln_func_new(d.ctx, "deep");
    d.A = kiln_func_add_buffer(d.f, "A", KILN_DTYPE_F32, 1, sh, KILN_SCOPE_GLOBAL, 0);
    d.B = kiln_func_add_buffer(d.f, "B", KILN_DTYPE_F32, 1, sh, KILN_SCOPE_GLOBAL, 1);
    kiln_expr zero = kiln_idx(d.ctx, 0);
    d.store = kiln_stmt_store(d.ctx, d.B, 1, &zero, kiln_func_load(d.f, d.A, 1, &zero));
    struct kiln_stmt *s = d.store;
    char              name[32];
    for (uint32_t k = 0; k < DEEP; k++) {
        snprintf(name, sizeof name, "T%u", DEEP - 1 - k);
        uint32_t b =
            kiln_func_add_buffer(d.f, name, KILN_DTYPE_F32, 1, sh, KILN_SCOPE_HEAP, KILN_NONE);
        s = kiln_stmt_alloc(d.ctx, b, s);
        d.first = b;
    }
    CHECK(s != NULL);
    d.root = d.f->body = s;
    return d;
}

struct deep_walk {
    uint32_t pre, post, stores;
    int64_t  last_pre, last_post; /* buffers: pre goes outward-in, post inward-out */
    bool     order_ok;
};

static enum kiln_walk
deep_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct deep_walk *w = v->user;
    if (s->kind == KILN_STMT_ALLOC) {
        w->order_ok &= w->last_pre < 0 || (int64_t)s->u.alloc.buf == w->last_pre - 1;
        w->last_pre = s->u.alloc.buf;
        w->pre++;
    }
    return KILN_WALK_GO;
}

static enum kiln_walk
deep_post(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct deep_walk *w = v->user;
    if (s->kind == KILN_STMT_ALLOC) {
        w->order_ok &= w->last_post < 0 || (int64_t)s->u.alloc.buf == w->last_post + 1;
        w->last_post = s->u.alloc.buf;
        w->post++;
    }
    return KILN_WALK_GO;
}

static enum kiln_walk
deep_store(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    (void)s;
    ((struct deep_walk *)v->user)->stores++;
    return KILN_WALK_GO;
}

static void
test_deep_alloc_chain_visit(void)
{
    struct deep              d = build_deep();
    struct deep_walk         w = {.last_pre = -1, .last_post = -1, .order_ok = true};
    struct kiln_stmt_visitor v = {
        .user = &w, .pre = deep_pre, .post = deep_post, .store = deep_store};
    CHECK_EQ_INT(KILN_WALK_GO, kiln_stmt_visit(&v, d.root));
    CHECK_EQ_INT(DEEP, w.pre);
    CHECK_EQ_INT(DEEP, w.post);
    CHECK_EQ_INT(1, w.stores);
    CHECK(w.order_ok);
    CHECK_EQ_INT(d.first, w.last_post); /* the outermost ALLOC's post is the last */
    /* the verifier walks the chain too (the code generator runs it first) */
    CHECK_EQ_INT(KILN_OK, kiln_func_verify(d.f, false));
    kiln_ctx_free(d.ctx);
}

static void
test_deep_alloc_chain_mutate(void)
{
    struct deep              d = build_deep();
    struct kiln_stmt_mutator m = {.ctx = d.ctx, .expr = same_expr};
    CHECK(kiln_stmt_mutate(&m, d.root) == d.root); /* nothing changed: the same chain */
    m.copy = true;                                 /* a deep copy: every ALLOC new */
    struct kiln_stmt *r = kiln_stmt_mutate(&m, d.root);
    CHECK(r != NULL);
    uint32_t n = 0;
    bool     fresh = true;
    for (const struct kiln_stmt *a = r, *o = d.root; a && a->kind == KILN_STMT_ALLOC;
         a = a->u.alloc.body, o = o->u.alloc.body, n++)
        fresh &= a != o && a->u.alloc.buf == o->u.alloc.buf;
    CHECK_EQ_INT(DEEP, n);
    CHECK(fresh);
    kiln_ctx_free(d.ctx);
}

static const struct test tests[] = {
    {"deep_alloc_chain_visit", test_deep_alloc_chain_visit},
    {"deep_alloc_chain_mutate", test_deep_alloc_chain_mutate},
    {"visit_counts", test_visit_counts},
    {"visit_kind_callback", test_visit_kind_callback},
    {"visit_skip_stop_fail", test_visit_skip_stop_fail},
    {"mutate_one_kind", test_mutate_one_kind},
    {"mutate_nothing_and_copy", test_mutate_nothing_and_copy},
    {"mutate_stop", test_mutate_stop},
    {"mutate_errors", test_mutate_errors},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
