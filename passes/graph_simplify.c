/* passes/graph_simplify.c -- graph-level simplification of a kernel graph with known weight
 * values (kiln_graph_simplify): constant folding, batch-norm folding into the convolution or
 * dense layer before it, removal of identity copies and of dead statements, and dropping of
 * weights nothing reads. The result is a new graph plus new weight values computing the same
 * outputs from the same inputs (the rebuild machinery is graph_rebuild.c's).
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
#include "graph_rebuild.h"

#include <math.h>
#include <string.h>

#define FOLD_MIN_ELEMS 1024 /* a folded tensor may always be this large */

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
        if (kiln_gr_arg_values(f, t)) {
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
    KILN_TRY(kiln_gr_rebuild_init(out, f));
    if (nout) {
        struct rebuild sub;
        KILN_TRY(kiln_gr_rebuild_init(&sub, f));
        for (uint32_t c = 0; c < g->ncall; c++)
            if (eval[c])
                KILN_TRY(kiln_gr_copy_call(&sub, c));
        KILN_TRY(kiln_gr_mark_outputs(&sub, outs, nout));
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
    KILN_TRY(kiln_gr_add_inputs(out));
    for (uint32_t c = 0; c < g->ncall; c++) {
        if (keep[c])
            KILN_TRY(kiln_gr_copy_call(out, c));
        else if (eval[c])
            rep->calls_folded++;
        else
            rep->dead_removed++;
    }
    rep->constants_folded += nout;
    return kiln_gr_mark_outputs(out, g->output, g->noutput);
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

static double
attr_float(const struct facts *f, const struct kiln_call *call, const char *name, double dflt)
{
    const struct kiln_attr *a = kiln_gr_find_attr(f, call, name);
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
 * conv2d's axis 1 (3 with layout="nhwc"), dense's last axis. *axis receives the output axis of the
 * channel. */
static bool
is_linear(const struct facts *f, uint32_t c, uint32_t *axis)
{
    const struct kiln_call *call = &f->g->call[c];
    uint32_t                rank = f->g->tensor[call->out].ndim;
    if (call->nin < 2 || call->nin > 3 || !kiln_gr_arg_values(f, call->in[1]))
        return false;
    if (kiln_gr_call_is(f, c, "conv2d") && rank == 4) {
        const struct kiln_attr *layout = kiln_gr_find_attr(f, call, "layout");
        *axis = layout && layout->kind == KILN_ATTR_STRING && !strcmp(layout->s, "nhwc") ? 3 : 1;
    } else if (kiln_gr_call_is(f, c, "dense") && rank >= 1) {
        *axis = rank - 1;
    } else {
        return false;
    }
    return f->g->tensor[call->out].shape[*axis] == f->g->tensor[call->in[1]].shape[0];
}

/* Whether add statement a adds a known weight along the channel of a bias-free conv2d / dense
 * output read by nothing else; *conv and *bias receive the statement and the bias tensor. */
static bool
bias_add(const struct facts *f, uint32_t a, const uint32_t *readers, uint32_t *conv, uint32_t *bias)
{
    const struct kiln_graph *g = f->g;
    const struct kiln_call  *add = &g->call[a];
    if (!kiln_gr_call_is(f, a, "add") || add->nin != 2)
        return false;
    for (uint32_t side = 0; side < 2; side++) {
        uint32_t x = add->in[side], b = add->in[1 - side], c = f->defcall[x], axis;
        if (c == KILN_NONE || g->call[c].out != x || readers[x] != 1 || !is_linear(f, c, &axis)
            || g->call[c].nin != 2 || !kiln_gr_arg_values(f, b))
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
    if (!kiln_gr_call_is(f, b, "batch_norm") || bn->nin != 5)
        return false;
    uint32_t x = bn->in[0], d = f->defcall[x], axis;
    if (d == KILN_NONE || g->call[d].out != x || readers[x] != 1)
        return false;
    uint32_t c = owner[d] != KILN_NONE ? owner[d] : d;
    /* batch_norm normalises its axis (1 unless given): it must be the linear op's channel axis
     * (conv2d's 1, or 3 channels-last; a 2-D dense's 1) */
    const struct kiln_attr *ba = kiln_gr_find_attr(f, bn, "axis");
    int64_t                 bn_axis = ba ? ba->i : 1, rank = g->tensor[x].ndim;
    if (bn_axis < 0)
        bn_axis += rank;
    if (!is_linear(f, c, &axis) || (int64_t)axis != bn_axis
        || (g->call[c].nin == 3 && !kiln_gr_arg_values(f, g->call[c].in[2])))
        return false;
    int64_t k = g->tensor[x].shape[axis];
    for (uint32_t i = 1; i < 5; i++)
        if (!kiln_gr_arg_values(f, bn->in[i]) || kiln_tensor_numel(&g->tensor[bn->in[i]]) != k)
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
    const double             *w = kiln_gr_arg_values(f, cv->in[1]);
    const double             *bias = fu->bias != KILN_NONE ? kiln_gr_arg_values(f, fu->bias) : NULL;
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
        const double           *gamma = kiln_gr_arg_values(f, bn->in[1]),
                     *beta = kiln_gr_arg_values(f, bn->in[2]);
        const double *mean = kiln_gr_arg_values(f, bn->in[3]),
                     *var = kiln_gr_arg_values(f, bn->in[4]);
        double eps = attr_float(f, bn, "eps", 1e-5);
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
    uint32_t    in[3] = {kiln_gr_get(r, cv->in[0]), KILN_NONE, KILN_NONE};
    if (in[0] == KILN_NONE)
        return ctx->err.status;
    if (nw) {
        const char *n1 = kiln_gr_fresh_name(r, kiln_arena_printf(ctx, "%s_bn", wname), KILN_NONE);
        if (!n1 || (in[1] = kiln_gr_add_arg(r, n1, wt, KILN_TENSOR_WEIGHT, nw)) == KILN_NONE)
            return ctx->err.status;
    } else if ((in[1] = kiln_gr_get(r, cv->in[1])) == KILN_NONE) {
        return ctx->err.status;
    }
    struct kiln_tensor bt = {.dtype = wt->dtype, .ndim = 1, .shape = {k}};
    const char        *n2 = kiln_gr_fresh_name(
               r, kiln_arena_printf(ctx, nw ? (bias ? "%s_bn" : "%s_bn_bias") : "%s", bname), KILN_NONE);
    if (!n2 || (in[2] = kiln_gr_add_arg(r, n2, &bt, KILN_TENSOR_WEIGHT, nb)) == KILN_NONE)
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
    KILN_TRY(kiln_gr_rebuild_init(out, f));
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
        need[kiln_gr_resolve(out, g->output[i])] = true;
    for (uint32_t c = g->ncall; c-- > 0;) {
        for (uint32_t o = g->call[c].op_begin; o < g->call[c].op_end && !live[c]; o++)
            live[c] = need[g->op[o].out];
        for (uint32_t i = 0; live[c] && i < f->nrd[c]; i++)
            need[kiln_gr_resolve(out, f->rd[c][i])] = true;
        if (!live[c] && out->alias[g->call[c].out] == KILN_NONE)
            rep->dead_removed++;
    }
    KILN_TRY(kiln_gr_add_inputs(out));
    for (uint32_t c = 0; c < g->ncall; c++) {
        if (!live[c] || folded[c])
            continue;
        if (fu[c].add != KILN_NONE || fu[c].bn != KILN_NONE) {
            KILN_TRY(emit_fused(out, c, &fu[c]));
            rep->bias_adds_folded += fu[c].add != KILN_NONE;
            rep->batch_norms_folded += fu[c].bn != KILN_NONE;
        } else {
            KILN_TRY(kiln_gr_copy_call(out, c));
        }
    }
    return kiln_gr_mark_outputs(out, g->output, g->noutput);
}

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

enum kiln_status
kiln_graph_simplify(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
                    struct kiln_graph **out, const double *const **weights_out,
                    struct kiln_simplify_report *report)
{
    struct kiln_simplify_report rep = {0};
    if (report)
        *report = rep;
    KILN_TRY(kiln_gr_entry(ctx, g, "simplify", out, weights_out));
    measure(g, &rep.calls_before, &rep.ops_before, &rep.weights_before, &rep.weight_bytes_before);

    struct facts   f1, f2;
    struct rebuild r1, r2;
    KILN_TRY(kiln_gr_facts_init(&f1, ctx, g, weights));
    KILN_TRY(fold_constants(&f1, &r1, &rep));
    KILN_TRY(kiln_gr_facts_init(&f2, ctx, r1.ng, r1.nw));
    KILN_TRY(fold_patterns(&f2, &r2, &rep));

    measure(r2.ng, &rep.calls_after, &rep.ops_after, &rep.weights_after, &rep.weight_bytes_after);
    *out = r2.ng;
    if (weights_out)
        *weights_out = r2.nw;
    if (report)
        *report = rep;
    return KILN_OK;
}
