/* passes/graph_simplify.c -- graph-level simplification of a kernel graph with known weight
 * values (kiln_graph_simplify): constant folding, batch-norm folding into the convolution or
 * dense layer before it, removal of identity copies and of dead statements, and dropping of
 * weights nothing reads. The result is a new graph plus new weight values computing the same
 * outputs from the same inputs. kiln_graph_channels_last rebuilds a graph the same way to make
 * its convolutions, pooling and the elementwise statements between them compute on
 * channels-last activations, and kiln_graph_winograd to compute 3x3 convolutions as Winograd's
 * F(2x2, 3x3) (ir/lib_wino.c).
 *
 * Everything works on statements (library calls and hand-written compute definitions) and is
 * generic over what they compute; only batch-norm folding looks at call kinds (batch_norm after
 * conv2d or dense). Rewriting never edits a graph: each round rebuilds one, copying the
 * statements it keeps (definitions with their loads retargeted) in their order.
 *
 * Round 1, constants. A statement is *known* when everything it reads from outside itself is a
 * weight with known values or a tensor of a known statement. A known tensor that a kept
 * statement reads becomes a new weight, computed at compile time by the reference interpreter
 * (on a subgraph of just the known statements it needs), when it is not larger than what it is
 * computed from: at most max(1024, S) elements, with S the elements of the weights it reads
 * (through other known statements, summed). Otherwise (a broadcast of a small weight to a large
 * tensor) the statement stays and its own known inputs are considered in turn. Statements whose
 * results no kept statement or output reads are dropped.
 *
 * Round 2, patterns. add(y, b) where y is the output of a bias-free conv2d or dense read by
 * nothing else and b a known weight varying only along y's channel axis (conv2d's axis 1,
 * dense's last; the bias of ONNX's Gemm) becomes that statement's bias. batch_norm(x, gamma,
 * beta, mean, var) whose input x is the output of a conv2d (any groups, so depthwise too) or of
 * a 2-D dense (bias add absorbed or not), read by nothing else and not an output, with the
 * weight, bias and the four parameters all known weights, becomes one conv2d / dense with
 * weight w'[k,...] = w[k,...] s[k] and bias b'[k] = (b[k] - mean[k]) s[k] + beta[k],
 * s = gamma / sqrt(var + eps), computed in double. A statement with one definition whose body
 * is a load of a tensor of the same shape and dtype at the same point (a reshape to the same
 * shape, an Identity, a transpose by the identity permutation) is replaced by that tensor,
 * unless it is an output. Dead statements are dropped again.
 *
 * Arguments of the result: the graph's inputs in their order (all of them, read or not), then
 * the weights in the order the result first reads them. Weight names are kept; new weights are
 * named after what they replace (`w_bn` for a folded convolution weight, `w_bn_bias` for its
 * bias, the folded tensor's own name, '.' replaced by '_'), with `_N` added on a clash. */
#include "passes.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define FOLD_MIN_ELEMS 1024 /* a folded tensor may always be this large */

/* What a graph reads and defines, per statement. */
struct facts {
    kiln_ctx                *ctx;
    const struct kiln_graph *g;
    const double *const     *w;       /* per argument: values, NULL when unknown */
    uint32_t                *argpos;  /* tensor -> argument index, KILN_NONE */
    uint32_t                *defcall; /* tensor -> statement defining it, KILN_NONE */
    uint32_t               **rd;      /* per statement: distinct tensors read from outside it */
    uint32_t                *nrd;
};

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

static enum kiln_status
facts_init(struct facts *f, kiln_ctx *ctx, const struct kiln_graph *g, const double *const *w)
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
static const double *
arg_values(const struct facts *f, uint32_t t)
{
    uint32_t a = f->argpos[t];
    return a != KILN_NONE && f->w && f->g->tensor[t].kind == KILN_TENSOR_WEIGHT ? f->w[a] : NULL;
}

static bool
call_is(const struct facts *f, uint32_t c, const char *kind)
{
    return !strcmp(kiln_sym_str(f->ctx, f->g->call[c].kind), kind);
}

/* ---- rebuilding ---- */

struct rebuild {
    kiln_ctx           *ctx;
    const struct facts *f;
    struct kiln_graph  *ng;
    uint32_t           *map;   /* old tensor -> new tensor, KILN_NONE */
    uint32_t           *alias; /* old tensor -> old tensor read in its place, KILN_NONE */
    const double      **val;   /* old op tensor -> values when it becomes a weight */
    const double      **nw;    /* per argument of ng: values, NULL for inputs and unknowns */
    uint32_t            nnw, capnw;
    uint32_t           *nhwc; /* channels_last: old 4-D tensor -> new tensor holding it NHWC */
};

static uint32_t
resolve(const struct rebuild *r, uint32_t t)
{
    while (r->alias && r->alias[t] != KILN_NONE)
        t = r->alias[t];
    return t;
}

static enum kiln_status
rebuild_init(struct rebuild *r, const struct facts *f)
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
static const char *
fresh_name(struct rebuild *r, const char *base, uint32_t self)
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
static uint32_t
add_arg(struct rebuild *r, const char *name, const struct kiln_tensor *like,
        enum kiln_tensor_kind kind, const double *v)
{
    uint32_t t = kiln_graph_add_tensor(r->ng, name, (enum kiln_dtype)like->dtype, like->ndim,
                                       like->shape, kind);
    if (t == KILN_NONE || !KILN_VEC_PUSH(r->ctx, r->nw, r->nnw, r->capnw, v))
        return KILN_NONE;
    return t;
}

/* A transpose statement in ng: NCHW tensor t to NHWC (to_nhwc), or NHWC back to NCHW. */
static uint32_t
transpose_nhwc(struct rebuild *r, uint32_t t, const char *name, bool to_nhwc)
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
static uint32_t
get(struct rebuild *r, uint32_t t)
{
    const struct kiln_graph  *g = r->f->g;
    const struct kiln_tensor *tt;
    t = resolve(r, t);
    if (r->map[t] != KILN_NONE)
        return r->map[t];
    tt = &g->tensor[t];
    if (tt->kind == KILN_TENSOR_WEIGHT) {
        r->map[t] =
            add_arg(r, kiln_sym_str(r->ctx, tt->name), tt, KILN_TENSOR_WEIGHT, arg_values(r->f, t));
    } else if (tt->kind == KILN_TENSOR_OP && r->val[t]) {
        const char *name = fresh_name(r, kiln_sym_str(r->ctx, tt->name), t);
        r->map[t] = name ? add_arg(r, name, tt, KILN_TENSOR_WEIGHT, r->val[t]) : KILN_NONE;
    } else if (r->nhwc && r->nhwc[t] != KILN_NONE) {
        /* held channels-last (channels_last): transposed back, under its own name */
        r->map[t] = transpose_nhwc(r, r->nhwc[t], kiln_sym_str(r->ctx, tt->name), false);
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
    uint32_t        t = resolve(r, (uint32_t)kiln_node_get(r->ctx, load)->imm);
    return kiln_load(r->ctx, r->map[t], (enum kiln_dtype)r->f->g->tensor[t].dtype, n, idx);
}

/* Creates every input of the old graph, in order. */
static enum kiln_status
add_inputs(struct rebuild *r)
{
    const struct kiln_graph *g = r->f->g;
    for (uint32_t i = 0; i < g->narg; i++) {
        uint32_t t = g->arg[i];
        if (g->tensor[t].kind == KILN_TENSOR_INPUT
            && (r->map[t] = add_arg(r, kiln_sym_str(r->ctx, g->tensor[t].name), &g->tensor[t],
                                    KILN_TENSOR_INPUT, NULL))
                   == KILN_NONE)
            return r->ctx->err.status;
    }
    return KILN_OK;
}

/* Copies statement c: same kind, attributes and definitions, loads retargeted. */
static enum kiln_status
copy_call(struct rebuild *r, uint32_t c)
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
        if ((in[i] = call->in[i] == KILN_NONE ? KILN_NONE : get(r, call->in[i])) == KILN_NONE
            && call->in[i] != KILN_NONE)
            return ctx->err.status;
    for (uint32_t i = 0; i < r->f->nrd[c]; i++)
        if (get(r, r->f->rd[c][i]) == KILN_NONE)
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

static enum kiln_status
mark_outputs(struct rebuild *r, const uint32_t *outs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = resolve(r, outs[i]);
        KILN_ENSURE(r->ctx, r->map[t] != KILN_NONE);
        KILN_TRY(kiln_graph_mark_output(r->ng, r->map[t]));
    }
    return kiln_graph_verify(r->ng);
}

/* ---- round 1: constants and dead statements ---- */

static enum kiln_status
fold_constants(const struct facts *f, struct rebuild *out, struct kiln_simplify_report *rep)
{
    kiln_ctx                *ctx = f->ctx;
    const struct kiln_graph *g = f->g;
    uint32_t                 nc = g->ncall + 1, nt = g->ntensor + 1;
    bool                    *known = kiln_arena_alloc(ctx, nc), *keep = kiln_arena_alloc(ctx, nc);
    bool                    *eval = kiln_arena_alloc(ctx, nc), *tknown = kiln_arena_alloc(ctx, nt);
    bool                    *mat = kiln_arena_alloc(ctx, nt);
    double                  *cap = kiln_arena_alloc(ctx, sizeof(double) * nt);
    if (!known || !keep || !eval || !tknown || !mat || !cap)
        return ctx->err.status;
    for (uint32_t t = 0; t < g->ntensor; t++)
        if (arg_values(f, t)) {
            tknown[t] = true;
            cap[t] = (double)kiln_tensor_numel(&g->tensor[t]);
        }
    for (uint32_t c = 0; c < g->ncall; c++) {
        bool   k = true;
        double s = 0;
        for (uint32_t i = 0; i < f->nrd[c]; i++) {
            k = k && tknown[f->rd[c][i]];
            s += cap[f->rd[c][i]];
        }
        known[c] = k;
        for (uint32_t o = g->call[c].op_begin; o < g->call[c].op_end; o++) {
            tknown[g->op[o].out] = k;
            cap[g->op[o].out] = s;
        }
    }
    for (uint32_t i = 0; i < g->noutput; i++)
        keep[f->defcall[g->output[i]]] = true;
    /* backwards: a kept statement keeps what it reads, or has it folded */
    for (uint32_t c = g->ncall; c-- > 0;) {
        for (uint32_t i = 0; (keep[c] || eval[c]) && i < f->nrd[c]; i++) {
            uint32_t t = f->rd[c][i], d = f->defcall[t];
            if (d == KILN_NONE)
                continue;
            if (eval[c]) /* computing c at compile time needs d's values */
                eval[d] = true;
            if (!keep[c])
                continue;
            double n = (double)kiln_tensor_numel(&g->tensor[t]);
            if (known[d] && n <= fmax(cap[t], FOLD_MIN_ELEMS))
                mat[t] = eval[d] = true;
            else
                keep[d] = true;
        }
    }
    /* compile-time values: one subgraph of the statements to evaluate, its outputs the tensors
     * that become weights (those of statements that are kept anyway are not folded) */
    uint32_t *outs = kiln_arena_alloc(ctx, sizeof(uint32_t) * nt), nout = 0;
    if (!outs)
        return ctx->err.status;
    for (uint32_t t = 0; t < g->ntensor; t++)
        if (mat[t] && !keep[f->defcall[t]])
            outs[nout++] = t;
    KILN_TRY(rebuild_init(out, f));
    if (nout) {
        struct rebuild sub;
        KILN_TRY(rebuild_init(&sub, f));
        for (uint32_t c = 0; c < g->ncall; c++)
            if (eval[c])
                KILN_TRY(copy_call(&sub, c));
        KILN_TRY(mark_outputs(&sub, outs, nout));
        double **vals = kiln_arena_alloc(ctx, sizeof(double *) * nout);
        if (!vals)
            return ctx->err.status;
        for (uint32_t i = 0; i < nout; i++) {
            vals[i] = kiln_arena_alloc(ctx, sizeof(double)
                                                * (size_t)kiln_tensor_numel(&g->tensor[outs[i]]));
            if (!vals[i])
                return ctx->err.status;
            out->val[outs[i]] = vals[i];
        }
        KILN_TRY(kiln_graph_eval(ctx, sub.ng, sub.nw, vals));
    }
    KILN_TRY(add_inputs(out));
    for (uint32_t c = 0; c < g->ncall; c++) {
        if (keep[c])
            KILN_TRY(copy_call(out, c));
        else if (eval[c])
            rep->calls_folded++;
        else
            rep->dead_removed++;
    }
    rep->constants_folded += nout;
    return mark_outputs(out, g->output, g->noutput);
}

/* ---- round 2: batch-norm folding, identities, dead statements ---- */

/* The tensor statement c copies unchanged (one definition, body a load of a tensor of the same
 * shape and dtype at the same point), else KILN_NONE. */
static uint32_t
identity_source(const struct facts *f, uint32_t c)
{
    const struct kiln_graph *g = f->g;
    const struct kiln_call  *call = &g->call[c];
    if (call->op_end - call->op_begin != 1)
        return KILN_NONE;
    const struct kiln_opdef *d = &g->op[call->op_begin];
    const struct kiln_node  *n = kiln_node_get(f->ctx, d->body);
    if (d->reduce != KILN_REDUCE_NONE || d->out != call->out || n->op != KILN_OP_LOAD)
        return KILN_NONE;
    uint32_t                  src = (uint32_t)n->imm;
    const struct kiln_tensor *a = &g->tensor[src], *b = &g->tensor[d->out];
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->ndim == 0
        || kiln_load_nidx(f->ctx, d->body) != a->ndim)
        return KILN_NONE;
    for (uint32_t k = 0; k < a->ndim; k++) {
        if (a->shape[k] != b->shape[k])
            return KILN_NONE;
        const struct kiln_node *ix = kiln_node_get(f->ctx, kiln_load_idx(f->ctx, d->body, k));
        bool axis = ix->op == KILN_OP_VAR && ix->imm == kiln_var_key(KILN_VAR_AXIS, k);
        bool zero = ix->op == KILN_OP_INT && ix->imm == 0 && a->shape[k] == 1;
        if (!axis && !zero)
            return KILN_NONE;
    }
    return src;
}

static const struct kiln_attr *
find_attr(const struct facts *f, const struct kiln_call *call, const char *name)
{
    for (uint32_t i = 0; i < call->nattr; i++)
        if (!strcmp(kiln_sym_str(f->ctx, call->attr[i].name), name))
            return &call->attr[i];
    return NULL;
}

static double
attr_float(const struct facts *f, const struct kiln_call *call, const char *name, double dflt)
{
    const struct kiln_attr *a = find_attr(f, call, name);
    if (a && a->kind == KILN_ATTR_FLOAT)
        return a->f;
    if (a && a->kind == KILN_ATTR_INT)
        return (double)a->i;
    return dflt;
}

/* A conv2d or dense statement with the statements folded into it. */
struct fuse {
    uint32_t bias; /* tensor holding the bias ([K] or broadcast along the channel), KILN_NONE */
    uint32_t add;  /* the add statement that supplied bias (absorbed), KILN_NONE */
    uint32_t bn;   /* the batch_norm statement folded in, KILN_NONE */
};

/* Whether statement c is a conv2d or dense whose output channel is its weight's dimension 0:
 * conv2d's axis 1, dense's last axis. *axis receives the output axis of the channel. */
static bool
is_linear(const struct facts *f, uint32_t c, uint32_t *axis)
{
    const struct kiln_call *call = &f->g->call[c];
    uint32_t                rank = f->g->tensor[call->out].ndim;
    if (call->nin < 2 || call->nin > 3 || !arg_values(f, call->in[1]))
        return false;
    if (call_is(f, c, "conv2d") && rank == 4)
        *axis = 1;
    else if (call_is(f, c, "dense") && rank >= 1)
        *axis = rank - 1;
    else
        return false;
    return f->g->tensor[call->out].shape[*axis] == f->g->tensor[call->in[1]].shape[0];
}

/* Whether add statement a adds a known weight along the channel of a bias-free conv2d / dense
 * output read by nothing else; *conv and *bias receive the statement and the bias tensor. */
static bool
bias_add(const struct facts *f, uint32_t a, const uint32_t *readers, uint32_t *conv, uint32_t *bias)
{
    const struct kiln_graph *g = f->g;
    const struct kiln_call  *add = &g->call[a];
    if (!call_is(f, a, "add") || add->nin != 2)
        return false;
    for (uint32_t side = 0; side < 2; side++) {
        uint32_t x = add->in[side], b = add->in[1 - side], c = f->defcall[x], axis;
        if (c == KILN_NONE || g->call[c].out != x || readers[x] != 1 || !is_linear(f, c, &axis)
            || g->call[c].nin != 2 || !arg_values(f, b))
            continue;
        const struct kiln_tensor *xt = &g->tensor[x], *bt = &g->tensor[b];
        bool                      ok = bt->ndim <= xt->ndim && bt->dtype == xt->dtype;
        for (uint32_t k = 0; ok && k < bt->ndim; k++) {
            uint32_t xa = xt->ndim - bt->ndim + k;
            ok = bt->shape[k] == (xa == axis ? xt->shape[axis] : 1);
        }
        if (ok && kiln_tensor_numel(bt) == xt->shape[axis]) {
            *conv = c;
            *bias = b;
            return true;
        }
    }
    return false;
}

/* Whether batch_norm statement b can be folded into the conv2d / dense (with a bias add
 * perhaps) that defines its input; *conv receives that statement. readers[t]: statements
 * reading t, plus one for an output; owner[c]: the linear statement that absorbed add c. */
static bool
bn_foldable(const struct facts *f, uint32_t b, const uint32_t *readers, const uint32_t *owner,
            uint32_t *conv)
{
    const struct kiln_graph *g = f->g;
    const struct kiln_call  *bn = &g->call[b];
    if (!call_is(f, b, "batch_norm") || bn->nin != 5)
        return false;
    uint32_t x = bn->in[0], d = f->defcall[x], axis;
    if (d == KILN_NONE || g->call[d].out != x || readers[x] != 1)
        return false;
    uint32_t c = owner[d] != KILN_NONE ? owner[d] : d;
    /* batch_norm normalises axis 1: the channel axis of conv2d, of a 2-D dense */
    if (!is_linear(f, c, &axis) || axis != 1
        || (g->call[c].nin == 3 && !arg_values(f, g->call[c].in[2])))
        return false;
    int64_t k = g->tensor[x].shape[1];
    for (uint32_t i = 1; i < 5; i++)
        if (!arg_values(f, bn->in[i]) || kiln_tensor_numel(&g->tensor[bn->in[i]]) != k)
            return false;
    *conv = c;
    return true;
}

/* Emits conv2d / dense statement c with its bias add and batch norm folded in (fu), defining
 * the output of the last statement folded. */
static enum kiln_status
emit_fused(struct rebuild *r, uint32_t c, const struct fuse *fu)
{
    kiln_ctx                 *ctx = r->ctx;
    const struct facts       *f = r->f;
    const struct kiln_graph  *g = f->g;
    const struct kiln_call   *cv = &g->call[c];
    const struct kiln_tensor *wt = &g->tensor[cv->in[1]];
    int64_t                   k = wt->shape[0], per = kiln_tensor_numel(wt) / k;
    const double             *w = arg_values(f, cv->in[1]);
    const double             *bias = fu->bias != KILN_NONE ? arg_values(f, fu->bias) : NULL;
    double                   *nb = kiln_arena_alloc(ctx, sizeof(double) * (size_t)k);
    double                   *nw = NULL;
    uint32_t                  out = fu->bn != KILN_NONE    ? g->call[fu->bn].out
                                    : fu->add != KILN_NONE ? g->call[fu->add].out
                                                           : cv->out;
    if (!nb)
        return ctx->err.status;
    for (int64_t i = 0; i < k; i++)
        nb[i] = bias ? bias[i] : 0.0;
    if (fu->bn != KILN_NONE) {
        const struct kiln_call *bn = &g->call[fu->bn];
        const double           *gamma = arg_values(f, bn->in[1]), *beta = arg_values(f, bn->in[2]);
        const double           *mean = arg_values(f, bn->in[3]), *var = arg_values(f, bn->in[4]);
        double                  eps = attr_float(f, bn, "eps", 1e-5);
        if (!(nw = kiln_arena_alloc(ctx, sizeof(double) * (size_t)(k * per))))
            return ctx->err.status;
        for (int64_t i = 0; i < k; i++) {
            double s = gamma[i] / sqrt(var[i] + eps);
            for (int64_t j = 0; j < per; j++)
                nw[i * per + j] = w[i * per + j] * s;
            nb[i] = (nb[i] - mean[i]) * s + beta[i];
        }
    }
    const char *wname = kiln_sym_str(ctx, wt->name);
    const char *bname = bias ? kiln_sym_str(ctx, g->tensor[fu->bias].name) : wname;
    uint32_t    in[3] = {get(r, cv->in[0]), KILN_NONE, KILN_NONE};
    if (in[0] == KILN_NONE)
        return ctx->err.status;
    if (nw) {
        const char *n1 = fresh_name(r, kiln_arena_printf(ctx, "%s_bn", wname), KILN_NONE);
        if (!n1 || (in[1] = add_arg(r, n1, wt, KILN_TENSOR_WEIGHT, nw)) == KILN_NONE)
            return ctx->err.status;
    } else if ((in[1] = get(r, cv->in[1])) == KILN_NONE) {
        return ctx->err.status;
    }
    struct kiln_tensor bt = {.dtype = wt->dtype, .ndim = 1, .shape = {k}};
    const char        *n2 = fresh_name(
               r, kiln_arena_printf(ctx, nw ? (bias ? "%s_bn" : "%s_bn_bias") : "%s", bname), KILN_NONE);
    if (!n2 || (in[2] = add_arg(r, n2, &bt, KILN_TENSOR_WEIGHT, nb)) == KILN_NONE)
        return ctx->err.status;
    uint32_t nt;
    KILN_TRY(kiln_lib_call(r->ng, kiln_sym_str(ctx, cv->kind),
                           kiln_sym_str(ctx, g->tensor[out].name), 3, in, cv->nattr, cv->attr,
                           cv->line, cv->col, &nt));
    r->map[out] = nt;
    return KILN_OK;
}

static enum kiln_status
fold_patterns(const struct facts *f, struct rebuild *out, struct kiln_simplify_report *rep)
{
    kiln_ctx                *ctx = f->ctx;
    const struct kiln_graph *g = f->g;
    uint32_t                 nc = g->ncall + 1, nt = g->ntensor + 1;
    uint32_t                *readers = kiln_arena_alloc(ctx, sizeof(uint32_t) * nt);
    uint32_t                *owner = kiln_arena_alloc(ctx, sizeof(uint32_t) * nc);
    struct fuse             *fu = kiln_arena_alloc(ctx, sizeof(struct fuse) * nc);
    bool                    *folded = kiln_arena_alloc(ctx, nc), *live = kiln_arena_alloc(ctx, nc);
    bool                    *need = kiln_arena_alloc(ctx, nt);
    KILN_TRY(rebuild_init(out, f));
    out->alias = kiln_arena_alloc(ctx, sizeof(uint32_t) * nt);
    if (!readers || !owner || !fu || !folded || !live || !need || !out->alias)
        return ctx->err.status;
    for (uint32_t c = 0; c < g->ncall; c++) {
        owner[c] = KILN_NONE;
        fu[c] =
            (struct fuse){g->call[c].nin == 3 ? g->call[c].in[2] : KILN_NONE, KILN_NONE, KILN_NONE};
        for (uint32_t i = 0; i < f->nrd[c]; i++)
            readers[f->rd[c][i]]++;
    }
    for (uint32_t i = 0; i < g->noutput; i++)
        readers[g->output[i]]++;
    for (uint32_t t = 0; t < g->ntensor; t++)
        out->alias[t] = KILN_NONE;
    /* statements are visited in order, so a bias add is absorbed before the batch norm after
     * it is considered */
    for (uint32_t c = 0, conv, bias; c < g->ncall; c++) {
        if (bias_add(f, c, readers, &conv, &bias) && fu[conv].add == KILN_NONE) {
            fu[conv].add = c;
            fu[conv].bias = bias;
            owner[c] = conv;
            folded[c] = true;
            continue;
        }
        if (bn_foldable(f, c, readers, owner, &conv) && fu[conv].bn == KILN_NONE) {
            fu[conv].bn = c;
            folded[c] = true;
            continue;
        }
        uint32_t src = identity_source(f, c);
        if (src != KILN_NONE && !g->tensor[g->call[c].out].is_output) {
            out->alias[g->call[c].out] = src;
            rep->identities_removed++;
        }
    }
    /* liveness through the aliases: identities are never live, their readers read the source */
    for (uint32_t i = 0; i < g->noutput; i++)
        need[resolve(out, g->output[i])] = true;
    for (uint32_t c = g->ncall; c-- > 0;) {
        for (uint32_t o = g->call[c].op_begin; o < g->call[c].op_end && !live[c]; o++)
            live[c] = need[g->op[o].out];
        for (uint32_t i = 0; live[c] && i < f->nrd[c]; i++)
            need[resolve(out, f->rd[c][i])] = true;
        if (!live[c] && out->alias[g->call[c].out] == KILN_NONE)
            rep->dead_removed++;
    }
    KILN_TRY(add_inputs(out));
    for (uint32_t c = 0; c < g->ncall; c++) {
        if (!live[c] || folded[c])
            continue;
        if (fu[c].add != KILN_NONE || fu[c].bn != KILN_NONE) {
            KILN_TRY(emit_fused(out, c, &fu[c]));
            rep->bias_adds_folded += fu[c].add != KILN_NONE;
            rep->batch_norms_folded += fu[c].bn != KILN_NONE;
        } else {
            KILN_TRY(copy_call(out, c));
        }
    }
    return mark_outputs(out, g->output, g->noutput);
}

/* ---- channels-last activations (kiln_graph_channels_last) ---- */

static const char *const cl_window[] = {
    "conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d", "global_max_pool2d", NULL};
static const char *const cl_elementwise[] = {
    "neg",     "abs", "exp",   "log",     "sqrt",       "rsqrt", "square", "tanh",
    "sigmoid", "erf", "floor", "relu",    "leaky_relu", "gelu",  "silu",   "add",
    "sub",     "mul", "div",   "maximum", "minimum",    "pow",   NULL};

static bool
kind_in(const struct facts *f, uint32_t c, const char *const *kinds)
{
    for (; *kinds; kinds++)
        if (call_is(f, c, *kinds))
            return true;
    return false;
}

/* Whether statement c runs channels-last: a convolution or pooling of a 4-D NCHW input (no
 * layout attribute yet), or an elementwise op on 4-D tensors that all are channels-last already
 * (other operands may only be single elements, which broadcast the same either way). */
static bool
cl_eligible(const struct facts *f, uint32_t c, const bool *cl_tensor)
{
    const struct kiln_graph *g = f->g;
    const struct kiln_call  *call = &g->call[c];
    if (call->nin == 0 || g->tensor[call->out].ndim != 4)
        return false;
    if (kind_in(f, c, cl_window))
        return !find_attr(f, call, "layout") && g->tensor[call->in[0]].ndim == 4;
    if (!kind_in(f, c, cl_elementwise))
        return false;
    bool any = false;
    for (uint32_t i = 0; i < call->nin; i++) {
        const struct kiln_tensor *t = &g->tensor[call->in[i]];
        if (t->ndim == 4 && cl_tensor[call->in[i]])
            any = true;
        else if (kiln_tensor_numel(t) != 1)
            return false;
    }
    return any;
}

static uint32_t
find_root(uint32_t *root, uint32_t c)
{
    while (root[c] != c)
        c = root[c] = root[root[c]];
    return c;
}

/* The new tensor holding old 4-D tensor t channels-last, transposing it on first use. */
static uint32_t
get_nhwc(struct rebuild *r, uint32_t t)
{
    if (r->nhwc[t] != KILN_NONE)
        return r->nhwc[t];
    uint32_t nt = get(r, t);
    if (nt == KILN_NONE)
        return KILN_NONE;
    const char *name = fresh_name(
        r, kiln_arena_printf(r->ctx, "%s_nhwc", kiln_sym_str(r->ctx, r->f->g->tensor[t].name)),
        KILN_NONE);
    return r->nhwc[t] = name ? transpose_nhwc(r, nt, name, true) : KILN_NONE;
}

/* Emits statement c channels-last: its 4-D inputs read channels-last, a window op with
 * layout="nhwc"; the result is held channels-last, under NAME_nhwc. */
static enum kiln_status
emit_nhwc(struct rebuild *r, uint32_t c)
{
    kiln_ctx                *ctx = r->ctx;
    const struct kiln_graph *g = r->f->g;
    const struct kiln_call  *call = &g->call[c];
    bool                     window = kind_in(r->f, c, cl_window);
    uint32_t                *in = kiln_arena_alloc(ctx, sizeof(uint32_t) * call->nin);
    struct kiln_attr        *attr = kiln_arena_alloc(ctx, sizeof *attr * (call->nattr + 1));
    if (!in || !attr)
        return ctx->err.status;
    for (uint32_t i = 0; i < call->nin; i++) {
        bool act = g->tensor[call->in[i]].ndim == 4 && (!window || i == 0);
        if ((in[i] = act ? get_nhwc(r, call->in[i]) : get(r, call->in[i])) == KILN_NONE)
            return ctx->err.status;
    }
    if (call->nattr) /* (attr is NULL without attributes: no memcpy from NULL) */
        memcpy(attr, call->attr, sizeof *attr * call->nattr);
    uint32_t nattr = call->nattr;
    if (window)
        attr[nattr++] = (struct kiln_attr){.name = kiln_sym(ctx, "layout", 6),
                                           .kind = KILN_ATTR_STRING,
                                           .s = "nhwc",
                                           .line = call->line,
                                           .col = call->col};
    const char *name = fresh_name(
        r, kiln_arena_printf(ctx, "%s_nhwc", kiln_sym_str(ctx, g->tensor[call->out].name)),
        KILN_NONE);
    if (!name)
        return ctx->err.status;
    return kiln_lib_call(r->ng, kiln_sym_str(ctx, call->kind), name, call->nin, in, nattr, attr,
                         call->line, call->col, &r->nhwc[call->out]);
}

/* Convolutions and pooling compute on channels-last (NHWC) activations, and the elementwise
 * statements between them follow: a tuned NCHW convolution computes an (h, w, k) tile and
 * transposes it on the way out (conv 1x1 stride 2 ran 1.3x faster channels-last). The weights
 * keep their layouts. A tensor is transposed to NHWC where a channels-last statement reads it
 * in NCHW (the network's input), and back where anything else reads it or it is an output, so
 * the graph computes the same outputs from the same inputs. */
static enum kiln_status
channels_last(const struct facts *f, struct rebuild *out, uint32_t *converted)
{
    kiln_ctx                *ctx = f->ctx;
    const struct kiln_graph *g = f->g;
    uint32_t                 nt = g->ntensor + 1;
    bool                    *cl = kiln_arena_alloc(ctx, g->ncall + 1);
    bool                    *cl_tensor = kiln_arena_alloc(ctx, nt);
    KILN_TRY(rebuild_init(out, f));
    out->nhwc = kiln_arena_alloc(ctx, sizeof(uint32_t) * nt);
    if (!cl || !cl_tensor || !out->nhwc)
        return ctx->err.status;
    for (uint32_t t = 0; t < g->ntensor; t++)
        out->nhwc[t] = KILN_NONE;
    uint32_t *root = kiln_arena_alloc(ctx, sizeof(uint32_t) * (g->ncall + 1));
    uint32_t *nwin = kiln_arena_alloc(ctx, sizeof(uint32_t) * (g->ncall + 1));
    if (!root || !nwin)
        return ctx->err.status;
    /* channels-last statements joined through the tensors they pass each other make groups; a
     * group with a single window op (a lone convolution) stays NCHW, where the two transposes
     * around it would cost more than they save. Depthwise convolutions go channels-last too:
     * vectorised over channels, with only their weights packed, they run at oneDNN's speed
     * (benchmarks/RESULTS.md) */
    for (uint32_t c = 0; c < g->ncall; c++) {
        root[c] = c;
        if (!(cl[c] = cl_eligible(f, c, cl_tensor)))
            continue;
        cl_tensor[g->call[c].out] = true;
        for (uint32_t i = 0; i < g->call[c].nin; i++) {
            uint32_t t = g->call[c].in[i];
            if (cl_tensor[t] && f->defcall[t] != KILN_NONE)
                root[find_root(root, f->defcall[t])] = find_root(root, c);
        }
    }
    for (uint32_t c = 0; c < g->ncall; c++)
        if (cl[c] && kind_in(f, c, cl_window))
            nwin[find_root(root, c)]++;
    for (uint32_t c = 0; c < g->ncall; c++)
        cl[c] = cl[c] && nwin[find_root(root, c)] >= 2;
    KILN_TRY(add_inputs(out));
    for (uint32_t c = 0; c < g->ncall; c++) {
        if (cl[c]) {
            KILN_TRY(emit_nhwc(out, c));
            (*converted)++;
        } else {
            KILN_TRY(copy_call(out, c));
        }
    }
    for (uint32_t i = 0; i < g->noutput; i++)
        if (get(out, g->output[i]) == KILN_NONE)
            return ctx->err.status;
    return mark_outputs(out, g->output, g->noutput);
}

/* ---- Winograd convolutions (kiln_graph_winograd) ---- */

/* A convolution is rewritten when its output has at least this many 2x2 tiles (a 14x14 output
 * per image): the transformed weights are 16/9 the size of the kernel and every tile reuses
 * them. At 7x7 (16 tiles, ResNet-18's last stage, 512 channels) the 16 batched products have
 * 16 rows each and stream 16 MB of transformed weights per convolution, where the direct
 * convolution reads 9.4 MB for 2.25x the multiplications. With at least WINO4_MIN_TILES tiles
 * of 4x4 (a 56x56 output) it uses F(4x4, 3x3): 4x fewer multiplications, transformed weights
 * 4x the kernel's size, 2.25 transformed elements per output pixel instead of 4. Tuned for 64
 * trials, a 56x56x64 block (products, output transform, relu, next input transform) took
 * 384 us with 4x4 tiles against 599 us with 2x2; at 28x28x128 (49 tiles of 4x4) 483 against
 * 423, so 2x2 tiles stay there. */
#define WINO_MIN_TILES  49
#define WINO4_MIN_TILES 196

struct wino_conv {
    int64_t pad[4]; /* top, left, bottom, right */
    int64_t oh, ow;
    int64_t m; /* output tile: F(m x m, 3x3) */
    bool    nhwc;
};

static bool
attr_ones(const struct facts *f, const struct kiln_call *call, const char *name)
{
    const struct kiln_attr *a = find_attr(f, call, name);
    if (!a)
        return true;
    if (a->kind == KILN_ATTR_INT)
        return a->i == 1;
    if (a->kind != KILN_ATTR_INTS)
        return false;
    for (uint32_t i = 0; i < a->n; i++)
        if (a->ints[i] != 1)
            return false;
    return true;
}

/* The convolution's padding as top, left, bottom, right; false for a form not understood. */
static bool
attr_pad(const struct facts *f, const struct kiln_call *call, int64_t pad[4])
{
    const struct kiln_attr *a = find_attr(f, call, "padding");
    int64_t                 p[4] = {0, 0, 0, 0};
    if (a && a->kind == KILN_ATTR_INT) {
        p[0] = p[1] = p[2] = p[3] = a->i;
    } else if (a && a->kind == KILN_ATTR_INTS && (a->n == 2 || a->n == 4)) {
        for (uint32_t i = 0; i < 4; i++)
            p[i] = a->ints[a->n == 2 ? i % 2 : i];
    } else if (a && a->kind == KILN_ATTR_STRING && !strcmp(a->s, "same")) {
        p[0] = p[1] = p[2] = p[3] = 1; /* a 3x3 kernel at stride 1 */
    } else if (a && !(a->kind == KILN_ATTR_STRING && !strcmp(a->s, "valid"))) {
        return false;
    }
    memcpy(pad, p, sizeof p);
    return true;
}

/* Whether statement c is a conv2d that F(2x2, 3x3) computes: a 3x3 kernel of known values,
 * stride 1, dilation 1, one group, a float dtype, enough tiles. */
static bool
wino_eligible(const struct facts *f, uint32_t c, struct wino_conv *wc)
{
    const struct kiln_graph *g = f->g;
    const struct kiln_call  *call = &g->call[c];
    if (!call_is(f, c, "conv2d") || call->nin < 2 || !arg_values(f, call->in[1]))
        return false;
    const struct kiln_tensor *x = &g->tensor[call->in[0]], *w = &g->tensor[call->in[1]];
    const struct kiln_tensor *y = &g->tensor[call->out];
    const struct kiln_attr   *lay = find_attr(f, call, "layout");
    if (w->ndim != 4 || x->ndim != 4 || w->shape[2] != 3 || w->shape[3] != 3
        || (w->dtype != KILN_DTYPE_F32 && w->dtype != KILN_DTYPE_F64)
        || !attr_ones(f, call, "stride") || !attr_ones(f, call, "dilation")
        || !attr_ones(f, call, "groups") || !attr_pad(f, call, wc->pad)
        || (lay && lay->kind != KILN_ATTR_STRING))
        return false;
    wc->nhwc = lay && !strcmp(lay->s, "nhwc");
    int64_t C = x->shape[wc->nhwc ? 3 : 1], H = x->shape[wc->nhwc ? 1 : 2];
    int64_t W = x->shape[wc->nhwc ? 2 : 3];
    wc->oh = H + wc->pad[0] + wc->pad[2] - 2;
    wc->ow = W + wc->pad[1] + wc->pad[3] - 2;
    if (w->shape[1] != C || y->ndim != 4 || y->shape[wc->nhwc ? 1 : 2] != wc->oh
        || y->shape[wc->nhwc ? 2 : 3] != wc->ow)
        return false;
    wc->m = x->shape[0] * ((wc->oh + 3) / 4) * ((wc->ow + 3) / 4) >= WINO4_MIN_TILES ? 4 : 2;
    return x->shape[0] * ((wc->oh + 1) / 2) * ((wc->ow + 1) / 2) >= WINO_MIN_TILES;
}

/* U[e, c, k] = (G w[k, c] G^T)[e / a, e % a] for F(m x m, 3x3), a = m + 2, in double (ir/lib_wino.c
 * has the matrices). */
static double *
wino_weights(kiln_ctx *ctx, const double *w, int64_t K, int64_t C, int64_t m)
{
    static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    static const double G4[6][3] = {{1.0 / 4, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}};
    const double(*G)[3] = m == 2 ? G2 : G4;
    int     a = (int)m + 2;
    double *u = kiln_arena_alloc(ctx, sizeof(double) * (size_t)(a * a * C * K));
    if (!u)
        return NULL;
    for (int64_t k = 0; k < K; k++)
        for (int64_t c = 0; c < C; c++) {
            const double *g = w + (k * C + c) * 9;
            double        t[6][3]; /* G g */
            for (int i = 0; i < a; i++)
                for (int s = 0; s < 3; s++)
                    t[i][s] = G[i][0] * g[s] + G[i][1] * g[3 + s] + G[i][2] * g[6 + s];
            for (int i = 0; i < a; i++)
                for (int j = 0; j < a; j++)
                    u[((i * a + j) * C + c) * K + k] =
                        t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2];
        }
    return u;
}

/* Emits conv2d statement c as winograd_input, batch_matmul with the transformed weights, and
 * winograd_output (with the bias), the last defining the convolution's output under its name. */
static enum kiln_status
emit_winograd(struct rebuild *r, uint32_t c, const struct wino_conv *wc)
{
    kiln_ctx                 *ctx = r->ctx;
    const struct kiln_graph  *g = r->f->g;
    const struct kiln_call   *call = &g->call[c];
    const struct kiln_tensor *wt = &g->tensor[call->in[1]];
    const char               *yname = kiln_sym_str(ctx, g->tensor[call->out].name);
    const char               *wname = kiln_sym_str(ctx, wt->name);
    int64_t                   K = wt->shape[0], C = wt->shape[1];
    uint32_t                  x = get(r, call->in[0]), b = KILN_NONE;
    if (x == KILN_NONE || (call->nin == 3 && (b = get(r, call->in[2])) == KILN_NONE))
        return ctx->err.status;
    const double      *u = wino_weights(ctx, arg_values(r->f, call->in[1]), K, C, wc->m);
    int64_t            a = wc->m + 2;
    struct kiln_tensor ut = {.dtype = wt->dtype, .ndim = 3, .shape = {a * a, C, K}};
    const char        *uname = fresh_name(r, kiln_arena_printf(ctx, "%s_wino", wname), KILN_NONE);
    uint32_t           ua;
    if (!u || !uname || (ua = add_arg(r, uname, &ut, KILN_TENSOR_WEIGHT, u)) == KILN_NONE)
        return ctx->err.status;
    int64_t          size[2] = {wc->oh, wc->ow};
    struct kiln_attr lay = {.name = kiln_sym(ctx, "layout", 6),
                            .kind = KILN_ATTR_STRING,
                            .s = wc->nhwc ? "nhwc" : "nchw",
                            .line = call->line,
                            .col = call->col};
    struct kiln_attr tile = {.name = kiln_sym(ctx, "tile", 4),
                             .kind = KILN_ATTR_INT,
                             .i = wc->m,
                             .line = call->line,
                             .col = call->col};
    struct kiln_attr in_attr[3] = {{.name = kiln_sym(ctx, "padding", 7),
                                    .kind = KILN_ATTR_INTS,
                                    .n = 4,
                                    .ints = wc->pad,
                                    .line = call->line,
                                    .col = call->col},
                                   lay,
                                   tile};
    struct kiln_attr out_attr[3] = {{.name = kiln_sym(ctx, "size", 4),
                                     .kind = KILN_ATTR_INTS,
                                     .n = 2,
                                     .ints = size,
                                     .line = call->line,
                                     .col = call->col},
                                    lay,
                                    tile};
    const char      *vname = fresh_name(r, kiln_arena_printf(ctx, "%s_wi", yname), KILN_NONE);
    const char      *mname = fresh_name(r, kiln_arena_printf(ctx, "%s_wm", yname), KILN_NONE);
    const char      *oname = fresh_name(r, yname, call->out);
    uint32_t         v, m;
    if (!vname || !mname || !oname)
        return ctx->err.status;
    KILN_TRY(kiln_lib_call(r->ng, "winograd_input", vname, 1, &x, 3, in_attr, call->line, call->col,
                           &v));
    uint32_t mm[2] = {v, ua};
    KILN_TRY(
        kiln_lib_call(r->ng, "batch_matmul", mname, 2, mm, 0, NULL, call->line, call->col, &m));
    uint32_t oin[2] = {m, b};
    return kiln_lib_call(r->ng, "winograd_output", oname, b == KILN_NONE ? 1 : 2, oin, 3, out_attr,
                         call->line, call->col, &r->map[call->out]);
}

static enum kiln_status
winograd(const struct facts *f, struct rebuild *out, uint32_t *converted)
{
    const struct kiln_graph *g = f->g;
    KILN_TRY(rebuild_init(out, f));
    KILN_TRY(add_inputs(out));
    for (uint32_t c = 0; c < g->ncall; c++) {
        struct wino_conv wc;
        if (wino_eligible(f, c, &wc)) {
            KILN_TRY(emit_winograd(out, c, &wc));
            (*converted)++;
        } else {
            KILN_TRY(copy_call(out, c));
        }
    }
    return mark_outputs(out, g->output, g->noutput);
}

/* ---- entry point ---- */

static void
measure(const struct kiln_graph *g, uint32_t *calls, uint32_t *ops, uint32_t *nweights,
        double *bytes)
{
    *calls = g->ncall;
    *ops = g->nop;
    *nweights = 0;
    *bytes = 0;
    for (uint32_t i = 0; i < g->narg; i++) {
        const struct kiln_tensor *t = &g->tensor[g->arg[i]];
        if (t->kind == KILN_TENSOR_WEIGHT) {
            (*nweights)++;
            *bytes +=
                (double)kiln_tensor_numel(t) * (double)kiln_dtype_size((enum kiln_dtype)t->dtype);
        }
    }
}

/* What both entry points do first: clear the results, check the context and the graph. */
static enum kiln_status
entry(kiln_ctx *ctx, const struct kiln_graph *g, const char *what, struct kiln_graph **out,
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
kiln_graph_simplify(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
                    struct kiln_graph **out, const double *const **weights_out,
                    struct kiln_simplify_report *report)
{
    struct kiln_simplify_report rep = {0};
    if (report)
        *report = rep;
    KILN_TRY(entry(ctx, g, "simplify", out, weights_out));
    measure(g, &rep.calls_before, &rep.ops_before, &rep.weights_before, &rep.weight_bytes_before);

    struct facts   f1, f2;
    struct rebuild r1, r2;
    KILN_TRY(facts_init(&f1, ctx, g, weights));
    KILN_TRY(fold_constants(&f1, &r1, &rep));
    KILN_TRY(facts_init(&f2, ctx, r1.ng, r1.nw));
    KILN_TRY(fold_patterns(&f2, &r2, &rep));

    measure(r2.ng, &rep.calls_after, &rep.ops_after, &rep.weights_after, &rep.weight_bytes_after);
    *out = r2.ng;
    if (weights_out)
        *weights_out = r2.nw;
    if (report)
        *report = rep;
    return KILN_OK;
}

/* The rewrites of a graph into another: pass over its facts, counting what it changed. */
typedef enum kiln_status (*rewrite_fn)(const struct facts *f, struct rebuild *out,
                                       uint32_t *converted);

static enum kiln_status
rewrite(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights, const char *what,
        rewrite_fn pass, struct kiln_graph **out, const double *const **weights_out,
        uint32_t *converted)
{
    uint32_t n = 0;
    if (converted)
        *converted = 0;
    KILN_TRY(entry(ctx, g, what, out, weights_out));
    struct facts   f;
    struct rebuild r;
    KILN_TRY(facts_init(&f, ctx, g, weights));
    KILN_TRY(pass(&f, &r, &n));
    *out = r.ng;
    if (weights_out)
        *weights_out = r.nw;
    if (converted)
        *converted = n;
    return KILN_OK;
}

enum kiln_status
kiln_graph_channels_last(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
                         struct kiln_graph **out, const double *const **weights_out,
                         uint32_t *converted)
{
    return rewrite(ctx, g, weights, "layout", channels_last, out, weights_out, converted);
}

enum kiln_status
kiln_graph_winograd(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
                    struct kiln_graph **out, const double *const **weights_out, uint32_t *converted)
{
    return rewrite(ctx, g, weights, "winograd", winograd, out, weights_out, converted);
}
