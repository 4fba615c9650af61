/* passes/graph_rebuild.c -- what the graph passes share (graph_rebuild.h): the facts of a graph
 * (per statement, the tensors it reads from outside itself; per tensor, its argument position and
 * defining statement) and the rebuilding of a graph into a new one. Rewriting never edits a
 * graph: each round rebuilds one, copying the statements it keeps (definitions with their loads
 * retargeted) in their order; a weight is created when first read, so the result's arguments are
 * the inputs in order, then the weights in first-read order. */
#include "graph_rebuild.h"

#include <string.h>

struct collect {
    const struct kiln_graph *g;
    uint32_t                 lo, hi; /* ops of the statement */
    uint32_t                *stamp, mark;
    uint32_t                *buf, n;
};

static bool
note_read(void *ud, kiln_expr load)
{
    struct collect *cl = ud;
    uint32_t        t = (uint32_t)kiln_node_get(cl->g->ctx, load)->imm;
    uint32_t        op = cl->g->tensor[t].op;
    if ((op != KILN_NONE && op >= cl->lo && op < cl->hi) || cl->stamp[t] == cl->mark)
        return true;
    cl->stamp[t] = cl->mark;
    cl->buf[cl->n++] = t;
    return true;
}

enum kiln_status
kiln_gr_facts_init(struct facts *f, kiln_ctx *ctx, const struct kiln_graph *g,
                   const double *const *w)
{
    uint32_t nt = g->ntensor + 1, nc = g->ncall + 1;
    *f = (struct facts){ctx, g, w, NULL, NULL, NULL, NULL};
    f->argpos = kiln_arena_alloc(ctx, sizeof(uint32_t) * nt);
    f->defcall = kiln_arena_alloc(ctx, sizeof(uint32_t) * nt);
    f->rd = kiln_arena_alloc(ctx, sizeof(uint32_t *) * nc);
    f->nrd = kiln_arena_alloc(ctx, sizeof(uint32_t) * nc);
    struct collect cl = {g, 0,
                         0, kiln_arena_alloc(ctx, sizeof(uint32_t) * nt),
                         0, kiln_arena_alloc(ctx, sizeof(uint32_t) * nt),
                         0};
    if (!f->argpos || !f->defcall || !f->rd || !f->nrd || !cl.stamp || !cl.buf)
        return ctx->err.status;
    for (uint32_t t = 0; t < g->ntensor; t++) {
        f->argpos[t] = f->defcall[t] = KILN_NONE;
        cl.stamp[t] = UINT32_MAX;
    }
    for (uint32_t i = 0; i < g->narg; i++)
        f->argpos[g->arg[i]] = i;
    for (uint32_t c = 0; c < g->ncall; c++) {
        const struct kiln_call *call = &g->call[c];
        for (uint32_t o = call->op_begin; o < call->op_end; o++)
            f->defcall[g->op[o].out] = c;
        cl.lo = call->op_begin;
        cl.hi = call->op_end;
        cl.mark = c;
        cl.n = 0;
        for (uint32_t o = call->op_begin; o < call->op_end; o++)
            kiln_expr_visit_loads(ctx, g->op[o].body, note_read, &cl);
        /* and its inputs, which a folded body need not load (i - i is 0) but the copy of the
         * statement passes to the library again */
        for (uint32_t i = 0; i < call->nin; i++)
            if (call->in[i] != KILN_NONE && cl.stamp[call->in[i]] != cl.mark) {
                cl.stamp[call->in[i]] = cl.mark;
                cl.buf[cl.n++] = call->in[i];
            }
        f->nrd[c] = cl.n;
        if (cl.n) {
            f->rd[c] = kiln_arena_alloc(ctx, sizeof(uint32_t) * cl.n);
            if (!f->rd[c])
                return ctx->err.status;
            memcpy(f->rd[c], cl.buf, sizeof(uint32_t) * cl.n);
        }
    }
    /* every definition must belong to a statement: the rebuild copies statements */
    for (uint32_t o = 0; o < g->nop; o++)
        if (f->defcall[g->op[o].out] == KILN_NONE)
            return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "simplify",
                             "definition of %s belongs to no statement",
                             kiln_graph_tensor_name(g, g->op[o].out));
    return KILN_OK;
}

/* Known values of tensor t when it is a weight argument, else NULL. */
const double *
kiln_gr_arg_values(const struct facts *f, uint32_t t)
{
    uint32_t a = f->argpos[t];
    return a != KILN_NONE && f->w && f->g->tensor[t].kind == KILN_TENSOR_WEIGHT ? f->w[a] : NULL;
}

bool
kiln_gr_call_is(const struct facts *f, uint32_t c, const char *kind)
{
    return !strcmp(kiln_sym_str(f->ctx, f->g->call[c].kind), kind);
}

uint32_t
kiln_gr_resolve(const struct rebuild *r, uint32_t t)
{
    while (r->alias && r->alias[t] != KILN_NONE)
        t = r->alias[t];
    return t;
}

enum kiln_status
kiln_gr_rebuild_init(struct rebuild *r, const struct facts *f)
{
    kiln_ctx *ctx = f->ctx;
    *r = (struct rebuild){ctx, f, kiln_graph_new(ctx), NULL, NULL, NULL, NULL, 0, 0, NULL};
    uint32_t nt = f->g->ntensor + 1;
    r->map = kiln_arena_alloc(ctx, sizeof(uint32_t) * nt);
    r->val = kiln_arena_alloc(ctx, sizeof(double *) * nt);
    if (!r->ng || !r->map || !r->val)
        return ctx->err.status;
    r->ng->file = f->g->file;
    for (uint32_t t = 0; t < f->g->ntensor; t++)
        r->map[t] = KILN_NONE;
    return KILN_OK;
}

/* A name for a new tensor of ng based on base: base itself when it is free in both graphs (or
 * names old tensor self), else base_1, base_2, ...; characters other than [A-Za-z0-9_] become
 * '_'. */
const char *
kiln_gr_fresh_name(struct rebuild *r, const char *base, uint32_t self)
{
    char *s = kiln_arena_strdup(r->ctx, base);
    if (!s)
        return NULL;
    for (char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')
              || *p == '_'))
            *p = '_';
    for (uint32_t k = 0;; k++) {
        const char *name = k ? kiln_arena_printf(r->ctx, "%s_%u", s, k) : s;
        if (!name)
            return NULL;
        uint32_t old = kiln_graph_find(r->f->g, name);
        if ((old == KILN_NONE || old == self) && kiln_graph_find(r->ng, name) == KILN_NONE)
            return name;
    }
}

/* Adds an argument to ng (an input, or a weight with values v, NULL when unknown). */
uint32_t
kiln_gr_add_arg(struct rebuild *r, const char *name, const struct kiln_tensor *like,
                enum kiln_tensor_kind kind, const double *v)
{
    uint32_t t = kiln_graph_add_tensor(r->ng, name, (enum kiln_dtype)like->dtype, like->ndim,
                                       like->shape, kind);
    if (t == KILN_NONE || !KILN_VEC_PUSH(r->ctx, r->nw, r->nnw, r->capnw, v))
        return KILN_NONE;
    return t;
}

/* A transpose statement in ng: NCHW tensor t to NHWC (to_nhwc), or NHWC back to NCHW. */
uint32_t
kiln_gr_transpose_nhwc(struct rebuild *r, uint32_t t, const char *name, bool to_nhwc)
{
    static const int64_t in[4] = {0, 2, 3, 1}, out[4] = {0, 3, 1, 2};
    struct kiln_attr     perm = {.name = kiln_sym(r->ctx, "perm", 4),
                                 .kind = KILN_ATTR_INTS,
                                 .n = 4,
                                 .ints = to_nhwc ? in : out};
    uint32_t             nt = KILN_NONE;
    if (perm.name)
        kiln_lib_call(r->ng, "transpose", name, 1, &t, 1, &perm, 0, 0, &nt);
    return nt;
}

/* The new tensor holding old tensor t, creating a weight on first use (weights are created in
 * the order they are first read). */
uint32_t
kiln_gr_get(struct rebuild *r, uint32_t t)
{
    const struct kiln_graph  *g = r->f->g;
    const struct kiln_tensor *tt;
    t = kiln_gr_resolve(r, t);
    if (r->map[t] != KILN_NONE)
        return r->map[t];
    tt = &g->tensor[t];
    if (tt->kind == KILN_TENSOR_WEIGHT) {
        r->map[t] = kiln_gr_add_arg(r, kiln_sym_str(r->ctx, tt->name), tt, KILN_TENSOR_WEIGHT,
                                    kiln_gr_arg_values(r->f, t));
    } else if (tt->kind == KILN_TENSOR_OP && r->val[t]) {
        const char *name = kiln_gr_fresh_name(r, kiln_sym_str(r->ctx, tt->name), t);
        r->map[t] = name ? kiln_gr_add_arg(r, name, tt, KILN_TENSOR_WEIGHT, r->val[t]) : KILN_NONE;
    } else if (r->nhwc && r->nhwc[t] != KILN_NONE) {
        /* held channels-last (channels_last): transposed back, under its own name */
        r->map[t] = kiln_gr_transpose_nhwc(r, r->nhwc[t], kiln_sym_str(r->ctx, tt->name), false);
    } else {
        KILN_FAIL(r->ctx, KILN_ERR_INTERNAL, "simplify", "%s is read before it is defined",
                  kiln_graph_tensor_name(g, t));
    }
    return r->map[t];
}

static kiln_expr
remap_load(void *ud, kiln_expr load, uint32_t n, const kiln_expr *idx)
{
    struct rebuild *r = ud;
    uint32_t        t = kiln_gr_resolve(r, (uint32_t)kiln_node_get(r->ctx, load)->imm);
    return kiln_load(r->ctx, r->map[t], (enum kiln_dtype)r->f->g->tensor[t].dtype, n, idx);
}

/* Creates every input of the old graph, in order. */
enum kiln_status
kiln_gr_add_inputs(struct rebuild *r)
{
    const struct kiln_graph *g = r->f->g;
    for (uint32_t i = 0; i < g->narg; i++) {
        uint32_t t = g->arg[i];
        if (g->tensor[t].kind == KILN_TENSOR_INPUT
            && (r->map[t] = kiln_gr_add_arg(r, kiln_sym_str(r->ctx, g->tensor[t].name),
                                            &g->tensor[t], KILN_TENSOR_INPUT, NULL))
                   == KILN_NONE)
            return r->ctx->err.status;
    }
    return KILN_OK;
}

/* Copies statement c: same kind, attributes and definitions, loads retargeted. */
enum kiln_status
kiln_gr_copy_call(struct rebuild *r, uint32_t c)
{
    kiln_ctx                *ctx = r->ctx;
    const struct kiln_graph *g = r->f->g;
    const struct kiln_call  *call = &g->call[c];
    /* the statement's inputs first, in order, then anything else its definitions read: new
     * weights are created in that order */
    uint32_t *in = kiln_arena_alloc(ctx, sizeof(uint32_t) * (call->nin + 1));
    if (!in)
        return ctx->err.status;
    for (uint32_t i = 0; i < call->nin; i++)
        if ((in[i] = call->in[i] == KILN_NONE ? KILN_NONE : kiln_gr_get(r, call->in[i]))
                == KILN_NONE
            && call->in[i] != KILN_NONE)
            return ctx->err.status;
    for (uint32_t i = 0; i < r->f->nrd[c]; i++)
        if (kiln_gr_get(r, r->f->rd[c][i]) == KILN_NONE)
            return ctx->err.status;
    KILN_TRY(kiln_graph_begin_call(r->ng, kiln_sym_str(ctx, call->kind), call->nin, in, call->nattr,
                                   call->attr, call->line, call->col));
    for (uint32_t o = call->op_begin; o < call->op_end; o++) {
        const struct kiln_opdef  *d = &g->op[o];
        const struct kiln_tensor *t = &g->tensor[d->out];
        uint32_t                  nt =
            kiln_graph_add_tensor(r->ng, kiln_sym_str(ctx, t->name), (enum kiln_dtype)t->dtype,
                                  t->ndim, t->shape, KILN_TENSOR_OP);
        if (nt == KILN_NONE)
            return ctx->err.status;
        r->map[d->out] = nt;
        kiln_expr body = kiln_expr_map_loads(ctx, d->body, remap_load, r);
        if (!body.id)
            return kiln_ok(ctx) ? KILN_FAIL(ctx, KILN_ERR_INTERNAL, "simplify", "nil body")
                                : ctx->err.status;
        KILN_TRY(kiln_graph_add_op(r->ng, nt, (enum kiln_reduce)d->reduce, d->nred, d->rext, body,
                                   d->axname, d->rname));
    }
    return kiln_graph_end_call(r->ng, r->map[call->out]);
}

enum kiln_status
kiln_gr_mark_outputs(struct rebuild *r, const uint32_t *outs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = kiln_gr_resolve(r, outs[i]);
        KILN_ENSURE(r->ctx, r->map[t] != KILN_NONE);
        KILN_TRY(kiln_graph_mark_output(r->ng, r->map[t]));
    }
    return kiln_graph_verify(r->ng);
}

const struct kiln_attr *
kiln_gr_find_attr(const struct facts *f, const struct kiln_call *call, const char *name)
{
    for (uint32_t i = 0; i < call->nattr; i++)
        if (!strcmp(kiln_sym_str(f->ctx, call->attr[i].name), name))
            return &call->attr[i];
    return NULL;
}

/* What both entry points do first: clear the results, check the context and the graph. */
enum kiln_status
kiln_gr_entry(kiln_ctx *ctx, const struct kiln_graph *g, const char *what, struct kiln_graph **out,
              const double *const **weights_out)
{
    *out = NULL;
    if (weights_out)
        *weights_out = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (g->ctx != ctx)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, what, "the graph belongs to another context");
    return kiln_graph_verify(g);
}

enum kiln_status
kiln_gr_rewrite(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
                const char *what, rewrite_fn pass, struct kiln_graph **out,
                const double *const **weights_out, uint32_t *converted)
{
    uint32_t n = 0;
    if (converted)
        *converted = 0;
    KILN_TRY(kiln_gr_entry(ctx, g, what, out, weights_out));
    struct facts   f;
    struct rebuild r;
    KILN_TRY(kiln_gr_facts_init(&f, ctx, g, weights));
    KILN_TRY(pass(&f, &r, &n));
    *out = r.ng;
    if (weights_out)
        *weights_out = r.nw;
    if (converted)
        *converted = n;
    return KILN_OK;
}
