/* passes/flatten.c -- storage flattening: every load and store of a multi-dimensional buffer
 * gets one row-major element index, ((i0*s1 + i1)*s2 + i2)..., from the buffer's shape.
 *
 * The index is built in Horner form with the builders and left to the simplifier, which
 * distributes it into its canonical affine form (so `(h*2 + kh)*W + w*2 + kw` comes out as one
 * sum whose constant parts are folded). Every expression of the function is rewritten: store
 * indices and values, and the loads inside loop bounds, if conditions and let values (a
 * data-dependent bound is rare but legal). Buffers of rank 1 keep their index; rank-0 buffers
 * use index 0. Shapes are positive and at most 2^40 elements (kiln_graph_add_tensor), so the
 * strides cannot overflow. */
#include "passes.h"

struct flat {
    struct kiln_func *f;
};

/* The flat index of an access to buffer b with n indices, or nil after recording an error. */
static kiln_expr
flat_index(struct kiln_func *f, uint32_t b, uint32_t n, const kiln_expr *idx, const char *what)
{
    kiln_ctx *ctx = f->ctx;
    if (b >= f->nbuf) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "flatten", "%s of buffer %u, which does not exist", what,
                  b);
        return (kiln_expr){0};
    }
    const struct kiln_buffer *buf = &f->buf[b];
    if (buf->ndim == 0)
        return kiln_idx(ctx, 0);
    if (n != buf->ndim) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "flatten", "%s of %s has %u indices, not %u", what,
                  kiln_sym_str(ctx, buf->name), n, (unsigned)buf->ndim);
        return (kiln_expr){0};
    }
    kiln_expr e = idx[0];
    for (uint32_t d = 1; d < n; d++)
        e = kiln_add(ctx, kiln_mul(ctx, e, kiln_idx(ctx, buf->shape[d])), idx[d]);
    return e;
}

static kiln_expr
map_load(void *ud, kiln_expr load, uint32_t n, const kiln_expr *idx)
{
    struct flat *F = ud;
    kiln_ctx    *ctx = F->f->ctx;
    uint32_t     b = (uint32_t)kiln_node_get(ctx, load)->imm;
    kiln_expr    e = flat_index(F->f, b, n, idx, "load");
    if (!e.id)
        return e;
    return kiln_load(ctx, b, kiln_expr_dtype(ctx, load), 1, &e);
}

static kiln_expr
fexpr(struct flat *F, kiln_expr e)
{
    return kiln_expr_map_loads(F->f->ctx, e, map_load, F);
}

/* A statement mutator: loop bounds, if conditions and let values have their loads
 * flattened (the default), a store its own index too. */
static kiln_expr
fexpr_cb(struct kiln_stmt_mutator *m, const struct kiln_stmt *s, enum kiln_stmt_field field,
         kiln_expr e)
{
    (void)s;
    (void)field;
    return fexpr(m->user, e);
}

static struct kiln_stmt *
fstore(struct kiln_stmt_mutator *m, struct kiln_stmt *s)
{
    struct flat *F = m->user;
    kiln_ctx    *ctx = F->f->ctx;
    kiln_expr    idx[KILN_MAX_DIMS + 1];
    uint32_t     n = 0;
    for (uint32_t l = s->u.store.index.id; l; l = ctx->node[l].kid[1]) {
        if (n == KILN_MAX_DIMS + 1) {
            KILN_FAIL(ctx, KILN_ERR_INVALID, "flatten", "store with more than %d indices",
                      KILN_MAX_DIMS);
            return NULL;
        }
        idx[n++] = fexpr(F, (kiln_expr){ctx->node[l].kid[0]});
        if (!idx[n - 1].id)
            return NULL;
    }
    kiln_expr flat = flat_index(F->f, s->u.store.buf, n, idx, "store");
    kiln_expr list = flat.id ? kiln_index_list(ctx, 1, &flat) : flat;
    kiln_expr val = fexpr(F, s->u.store.value);
    if (!list.id || !val.id)
        return NULL;
    struct kiln_stmt *c = kiln_arena_alloc(ctx, sizeof *c);
    if (!c)
        return NULL;
    *c = *s;
    c->u.store.index = list;
    c->u.store.value = val;
    return c;
}

enum kiln_status
kiln_pass_flatten(struct kiln_func *f)
{
    kiln_ctx                *ctx = f->ctx;
    struct flat              F = {.f = f};
    struct kiln_stmt_mutator m = {
        .ctx = ctx, .user = &F, .pass = "flatten", .expr = fexpr_cb, .store = fstore};
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_stmt *body = kiln_stmt_mutate(&m, f->body);
    if (!body) {
        if (kiln_ok(ctx))
            KILN_FAIL(ctx, KILN_ERR_INTERNAL, "flatten", "rewriting %s failed",
                      kiln_sym_str(ctx, f->name));
        return ctx->err.status;
    }
    f->body = body;
    return kiln_pass_simplify(f);
}
