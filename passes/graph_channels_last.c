/* passes/graph_channels_last.c -- channels-last activations (kiln_graph_channels_last):
 * rebuilds a graph (graph_rebuild.c) so that its convolutions, pooling and the statements
 * between them (elementwise ops; concatenation, slices, batch norms and reductions with their
 * axes renumbered; channel shuffles) compute on NHWC activations, with transposes where an NCHW
 * tensor meets a channels-last statement and back (passes/README.md). */
#include "graph_rebuild.h"

#include <string.h>

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
        if (kiln_gr_call_is(f, c, *kinds))
            return true;
    return false;
}

/* Where NCHW axis a sits in NHWC. */
static const uint32_t nhwc_pos[4] = {0, 3, 1, 2};

/* How statement c runs channels-last. */
enum cl_kind {
    CL_NO,      /* stays as it is */
    CL_SAME,    /* same attributes, channels-last output (window ops add layout="nhwc") */
    CL_AXES,    /* its axis attributes renumbered (concat, slice, batch_norm, reductions) */
    CL_PLAIN,   /* a reduction whose result is not 4-D and reads the same either way */
    CL_SHUFFLE, /* the head of a channel shuffle: reshape, transpose, reshape */
    CL_DONE,    /* emitted with the head of its shuffle */
};

static const char *const cl_axes_ops[] = {"concat",     "slice",       "batch_norm",
                                          "reduce_sum", "reduce_mean", "reduce_max",
                                          "reduce_min", "reduce_prod", NULL};

/* An axis attribute's value as an axis of a rank-4 tensor, or -1 when out of range. */
static int64_t
norm_axis(int64_t a)
{
    a = a < 0 ? a + 4 : a;
    return a >= 0 && a < 4 ? a : -1;
}

/* The values of an INT or INTS attribute (n = 0 for others). */
static const int64_t *
attr_ints(const struct kiln_attr *a, uint32_t *n)
{
    *n = a->kind == KILN_ATTR_INTS ? a->n : a->kind == KILN_ATTR_INT ? 1 : 0;
    return a->kind == KILN_ATTR_INTS ? a->ints : &a->i;
}

/* Whether every axis that statement call's attribute NAME lists is a valid rank-4 axis (an
 * absent attribute counts as valid: each op's default is handled where it is emitted). */
static bool
axes_valid(const struct facts *f, const struct kiln_call *call, const char *name)
{
    const struct kiln_attr *a = kiln_gr_find_attr(f, call, name);
    uint32_t                n;
    const int64_t          *v = a ? attr_ints(a, &n) : NULL;
    if (a && a->kind != KILN_ATTR_INT && a->kind != KILN_ATTR_INTS)
        return false;
    for (uint32_t i = 0; a && i < n; i++)
        if (norm_axis(v[i]) < 0)
            return false;
    return true;
}

/* A reduction whose result has fewer than 4 dimensions reads the same from NHWC when the axes
 * it keeps stay in order: the channel is reduced, or both spatial axes are (N, C remain). */
static bool
reduce_keeps_order(const struct facts *f, const struct kiln_call *call)
{
    const struct kiln_attr *a = kiln_gr_find_attr(f, call, "axes");
    if (!a)
        return true; /* every axis */
    uint32_t       n;
    const int64_t *v = attr_ints(a, &n);
    bool           red[4] = {0};
    for (uint32_t i = 0; i < n; i++)
        red[norm_axis(v[i])] = true;
    return red[1] || (red[2] && red[3]);
}

/* How statement c can run channels-last: a convolution or pooling of a 4-D NCHW input (no
 * layout attribute yet); an elementwise op on 4-D tensors that all are channels-last already
 * (other operands may only be single elements, which broadcast the same either way); a
 * concat of channels-last tensors, a slice, batch norm or reduction of one (its axes
 * renumbered). */
static enum cl_kind
cl_eligible(const struct facts *f, uint32_t c, const bool *cl_tensor)
{
    const struct kiln_graph *g = f->g;
    const struct kiln_call  *call = &g->call[c];
    if (call->nin == 0)
        return CL_NO;
    uint32_t out_rank = g->tensor[call->out].ndim;
    bool     in0 = g->tensor[call->in[0]].ndim == 4 && cl_tensor[call->in[0]];
    if (kind_in(f, c, cl_axes_ops) && in0) {
        if (kiln_gr_call_is(f, c, "concat")) {
            for (uint32_t i = 0; i < call->nin; i++)
                if (g->tensor[call->in[i]].ndim != 4 || !cl_tensor[call->in[i]])
                    return CL_NO;
            return axes_valid(f, call, "axis") ? CL_AXES : CL_NO;
        }
        if (kiln_gr_call_is(f, c, "slice"))
            return axes_valid(f, call, "axes") && out_rank == 4 ? CL_AXES : CL_NO;
        if (kiln_gr_call_is(f, c, "batch_norm"))
            return axes_valid(f, call, "axis") && out_rank == 4 ? CL_AXES : CL_NO;
        if (!axes_valid(f, call, "axes"))
            return CL_NO;
        return out_rank == 4 ? CL_AXES : reduce_keeps_order(f, call) ? CL_PLAIN : CL_NO;
    }
    if (out_rank != 4)
        return CL_NO;
    if (kind_in(f, c, cl_window))
        return !kiln_gr_find_attr(f, call, "layout") && g->tensor[call->in[0]].ndim == 4 ? CL_SAME
                                                                                         : CL_NO;
    if (!kind_in(f, c, cl_elementwise))
        return CL_NO;
    bool any = false;
    for (uint32_t i = 0; i < call->nin; i++) {
        const struct kiln_tensor *t = &g->tensor[call->in[i]];
        if (t->ndim == 4 && cl_tensor[call->in[i]])
            any = true;
        else if (kiln_tensor_numel(t) != 1)
            return CL_NO;
    }
    return any ? CL_SAME : CL_NO;
}

/* The statement reading statement c's output, when that output has exactly one reader
 * (readers[t]: statements reading t, plus one for an output; reader[t]: one of them) and it is
 * a one-input library call of this kind; else KILN_NONE. */
static uint32_t
sole_reader(const struct facts *f, const uint32_t *readers, const uint32_t *reader, uint32_t c,
            const char *kind)
{
    uint32_t t = f->g->call[c].out, r = reader[t];
    return readers[t] == 1 && r != KILN_NONE && kiln_gr_call_is(f, r, kind)
                   && f->g->call[r].nin == 1 && f->g->call[r].in[0] == t
               ? r
               : KILN_NONE;
}

/* Whether statement c starts a channel shuffle of a channels-last tensor: x[N, C, H, W]
 * reshaped to [N, G, C/G, H, W], transposed by [0, 2, 1, 3, 4], reshaped back to [N, C, H, W],
 * each step read only by the next (ShuffleNet's shuffle of groups, any G). *t2 and *t3 receive
 * the transpose and the last reshape. */
static bool
shuffle_head(const struct facts *f, const uint32_t *readers, const uint32_t *reader,
             const bool *cl_tensor, uint32_t c, uint32_t *t2, uint32_t *t3)
{
    static const int64_t     swap[5] = {0, 2, 1, 3, 4};
    const struct kiln_graph *g = f->g;
    const struct kiln_call  *call = &g->call[c];
    if (!kiln_gr_call_is(f, c, "reshape") || call->nin != 1)
        return false;
    const struct kiln_tensor *x = &g->tensor[call->in[0]], *y = &g->tensor[call->out];
    int64_t ch; /* the group count times the group's channels (no overflow: an empty tensor's
                 * other extents may be anything) */
    if (x->ndim != 4 || !cl_tensor[call->in[0]] || y->ndim != 5 || y->shape[0] != x->shape[0]
        || kiln_mul_overflows(y->shape[1], y->shape[2], &ch) || ch != x->shape[1]
        || y->shape[3] != x->shape[2] || y->shape[4] != x->shape[3])
        return false;
    if ((*t2 = sole_reader(f, readers, reader, c, "transpose")) == KILN_NONE
        || (*t3 = sole_reader(f, readers, reader, *t2, "reshape")) == KILN_NONE)
        return false;
    const struct kiln_attr *perm = kiln_gr_find_attr(f, &g->call[*t2], "perm");
    if (!perm || perm->kind != KILN_ATTR_INTS || perm->n != 5
        || memcmp(perm->ints, swap, sizeof swap) != 0)
        return false;
    const struct kiln_tensor *z = &g->tensor[g->call[*t3].out];
    return z->ndim == 4 && memcmp(z->shape, x->shape, sizeof(int64_t) * 4) == 0;
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
    uint32_t nt = kiln_gr_get(r, t);
    if (nt == KILN_NONE)
        return KILN_NONE;
    const char *name = kiln_gr_fresh_name(
        r, kiln_arena_printf(r->ctx, "%s_nhwc", kiln_sym_str(r->ctx, r->f->g->tensor[t].name)),
        KILN_NONE);
    return r->nhwc[t] = name ? kiln_gr_transpose_nhwc(r, nt, name, true) : KILN_NONE;
}

/* Attribute a of a CL_AXES statement with its axes renumbered for NHWC (a copy; NULL when out
 * of memory). */
static const struct kiln_attr *
remap_attr(kiln_ctx *ctx, const struct kiln_attr *a)
{
    uint32_t       n;
    const int64_t *v = attr_ints(a, &n);
    int64_t       *nv = kiln_arena_alloc(ctx, sizeof(int64_t) * (n + 1));
    if (!nv)
        return NULL;
    for (uint32_t i = 0; i < n; i++)
        nv[i] = nhwc_pos[norm_axis(v[i])];
    struct kiln_attr *na = kiln_arena_alloc(ctx, sizeof *na);
    if (!na)
        return NULL;
    *na = *a;
    if (a->kind == KILN_ATTR_INT)
        na->i = nv[0];
    else
        na->ints = nv;
    return na;
}

/* A CL_AXES statement's attributes for NHWC: "axis" and "axes" renumbered; batch_norm's
 * default channel axis (1) and slice's default axes (the first ones) written out. */
static struct kiln_attr *
nhwc_attrs(const struct facts *f, const struct kiln_call *call, uint32_t *nattr)
{
    kiln_ctx         *ctx = f->ctx;
    struct kiln_attr *attr = kiln_arena_alloc(ctx, sizeof *attr * (call->nattr + 1));
    if (!attr)
        return NULL;
    uint32_t na = 0;
    bool     has_axes = false;
    for (uint32_t i = 0; i < call->nattr; i++) {
        const struct kiln_attr *a = &call->attr[i];
        const char             *name = kiln_sym_str(ctx, a->name);
        if (!strcmp(name, "axis") || !strcmp(name, "axes")) {
            if (!(a = remap_attr(ctx, a)))
                return NULL;
            has_axes = true;
        }
        attr[na++] = *a;
    }
    struct kiln_attr extra = {.kind = KILN_ATTR_INT, .line = call->line, .col = call->col};
    if (!has_axes && kiln_gr_call_is(f, (uint32_t)(call - f->g->call), "batch_norm")) {
        extra.name = kiln_sym(ctx, "axis", 4);
        extra.i = 3;
        attr[na++] = extra;
    } else if (!has_axes && kiln_gr_call_is(f, (uint32_t)(call - f->g->call), "slice")) {
        const struct kiln_attr *starts = kiln_gr_find_attr(f, call, "starts");
        uint32_t                n;
        attr_ints(starts, &n);
        int64_t *v = kiln_arena_alloc(ctx, sizeof(int64_t) * (n + 1));
        if (!v)
            return NULL;
        for (uint32_t i = 0; i < n && i < 4; i++)
            v[i] = nhwc_pos[i];
        extra.name = kiln_sym(ctx, "axes", 4);
        extra.kind = KILN_ATTR_INTS;
        extra.n = n;
        extra.ints = v;
        attr[na++] = extra;
    }
    *nattr = na;
    return attr;
}

/* Emits statement c channels-last: its 4-D inputs read channels-last, a window op with
 * layout="nhwc", a CL_AXES one with its axes renumbered; the result is held channels-last
 * under NAME_nhwc, or, for CL_PLAIN, is the statement's own tensor. */
static enum kiln_status
emit_nhwc(struct rebuild *r, uint32_t c, enum cl_kind kind)
{
    kiln_ctx                *ctx = r->ctx;
    const struct kiln_graph *g = r->f->g;
    const struct kiln_call  *call = &g->call[c];
    bool                     window = kind_in(r->f, c, cl_window);
    bool                     bn = kiln_gr_call_is(r->f, c, "batch_norm");
    uint32_t                *in = kiln_arena_alloc(ctx, sizeof(uint32_t) * call->nin);
    if (!in)
        return ctx->err.status;
    for (uint32_t i = 0; i < call->nin; i++) {
        bool act = g->tensor[call->in[i]].ndim == 4 && (!(window || bn) || i == 0);
        if ((in[i] = act ? get_nhwc(r, call->in[i]) : kiln_gr_get(r, call->in[i])) == KILN_NONE)
            return ctx->err.status;
    }
    uint32_t          nattr = call->nattr;
    struct kiln_attr *attr;
    if (kind == CL_SAME) {
        attr = kiln_arena_alloc(ctx, sizeof *attr * (call->nattr + 1));
        if (attr && call->nattr) /* (attr is NULL without attributes: no memcpy from NULL) */
            memcpy(attr, call->attr, sizeof *attr * call->nattr);
        if (attr && window)
            attr[nattr++] = (struct kiln_attr){.name = kiln_sym(ctx, "layout", 6),
                                               .kind = KILN_ATTR_STRING,
                                               .s = "nhwc",
                                               .line = call->line,
                                               .col = call->col};
    } else {
        attr = nhwc_attrs(r->f, call, &nattr);
    }
    if (!attr)
        return ctx->err.status;
    const char *base = kiln_sym_str(ctx, g->tensor[call->out].name);
    if (kind == CL_PLAIN)
        return kiln_lib_call(r->ng, kiln_sym_str(ctx, call->kind), base, call->nin, in, nattr, attr,
                             call->line, call->col, &r->map[call->out]);
    const char *name = kiln_gr_fresh_name(r, kiln_arena_printf(ctx, "%s_nhwc", base), KILN_NONE);
    if (!name)
        return ctx->err.status;
    return kiln_lib_call(r->ng, kiln_sym_str(ctx, call->kind), name, call->nin, in, nattr, attr,
                         call->line, call->col, &r->nhwc[call->out]);
}

/* One statement of a channel shuffle in NHWC: op (reshape or transpose) of new tensor x with
 * the ints attribute NAME = v[0..n), named after old tensor t; *out receives it. */
static enum kiln_status
emit_step(struct rebuild *r, const char *op, uint32_t x, const char *name, const int64_t *v,
          uint32_t n, uint32_t t, const struct kiln_call *call, uint32_t *out)
{
    kiln_ctx        *ctx = r->ctx;
    struct kiln_attr a = {.name = kiln_sym(ctx, name, strlen(name)),
                          .kind = KILN_ATTR_INTS,
                          .n = n,
                          .ints = v,
                          .line = call->line,
                          .col = call->col};
    const char      *nn = kiln_gr_fresh_name(
             r, kiln_arena_printf(ctx, "%s_nhwc", kiln_sym_str(ctx, r->f->g->tensor[t].name)),
             KILN_NONE);
    if (!nn || !a.name)
        return ctx->err.status;
    return kiln_lib_call(r->ng, op, nn, 1, &x, 1, &a, call->line, call->col, out);
}

/* Emits the channel shuffle c1 -> c2 -> c3 (shuffle_head) on the NHWC tensor: x[N, H, W, C]
 * reshaped to [N, H, W, G, C/G], transposed by [0, 1, 2, 4, 3], reshaped to [N, H, W, C]: the
 * same permutation of the channels. */
static enum kiln_status
emit_shuffle(struct rebuild *r, uint32_t c1, uint32_t c2, uint32_t c3)
{
    static const int64_t      swap[5] = {0, 1, 2, 4, 3};
    kiln_ctx                 *ctx = r->ctx;
    const struct kiln_graph  *g = r->f->g;
    const struct kiln_tensor *y = &g->tensor[g->call[c1].out];
    uint32_t                  x = get_nhwc(r, g->call[c1].in[0]), t1, t2;
    if (x == KILN_NONE)
        return ctx->err.status;
    int64_t *split = kiln_arena_alloc(ctx, sizeof(int64_t) * 14), *back = split + 5,
            *perm = split + 9;
    if (!split)
        return ctx->err.status;
    memcpy(perm, swap, sizeof swap);
    int64_t s5[5] = {y->shape[0], y->shape[3], y->shape[4], y->shape[1], y->shape[2]};
    memcpy(split, s5, sizeof s5);
    int64_t s4[4] = {y->shape[0], y->shape[3], y->shape[4], g->tensor[g->call[c1].in[0]].shape[1]};
    memcpy(back, s4, sizeof s4);
    KILN_TRY(emit_step(r, "reshape", x, "shape", split, 5, g->call[c1].out, &g->call[c1], &t1));
    KILN_TRY(emit_step(r, "transpose", t1, "perm", perm, 5, g->call[c2].out, &g->call[c2], &t2));
    return emit_step(r, "reshape", t2, "shape", back, 4, g->call[c3].out, &g->call[c3],
                     &r->nhwc[g->call[c3].out]);
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
    uint32_t                 nt = g->ntensor + 1, nc = g->ncall + 1;
    uint8_t                 *cl = kiln_arena_alloc(ctx, nc);
    bool                    *cl_tensor = kiln_arena_alloc(ctx, nt);
    uint32_t                *root = kiln_arena_alloc(ctx, sizeof(uint32_t) * nc);
    uint32_t                *nwin = kiln_arena_alloc(ctx, sizeof(uint32_t) * nc);
    uint32_t                *shuf = kiln_arena_alloc(ctx, sizeof(uint32_t) * 2 * nc);
    uint32_t                *readers = kiln_arena_alloc(ctx, sizeof(uint32_t) * 2 * nt);
    KILN_TRY(kiln_gr_rebuild_init(out, f));
    out->nhwc = kiln_arena_alloc(ctx, sizeof(uint32_t) * nt);
    if (!cl || !cl_tensor || !root || !nwin || !shuf || !readers || !out->nhwc)
        return ctx->err.status;
    uint32_t *reader = readers + nt;
    for (uint32_t t = 0; t < g->ntensor; t++) {
        out->nhwc[t] = KILN_NONE;
        reader[t] = KILN_NONE;
    }
    for (uint32_t c = 0; c < g->ncall; c++)
        for (uint32_t i = 0; i < f->nrd[c]; i++) {
            readers[f->rd[c][i]]++;
            reader[f->rd[c][i]] = c;
        }
    for (uint32_t i = 0; i < g->noutput; i++)
        readers[g->output[i]]++;
    /* channels-last statements joined through the tensors they pass each other make groups; a
     * group with a single window op (a lone convolution) stays NCHW, where the two transposes
     * around it would cost more than they save. Depthwise convolutions go channels-last too:
     * vectorised over channels, with only their weights packed, they run at oneDNN's speed
     * (benchmarks/RESULTS.md) */
    for (uint32_t c = 0; c < g->ncall; c++)
        root[c] = c;
    for (uint32_t c = 0; c < g->ncall; c++) {
        uint32_t c2, c3;
        if (cl[c] == CL_DONE)
            continue;
        if (shuffle_head(f, readers, reader, cl_tensor, c, &c2, &c3)) {
            cl[c] = CL_SHUFFLE;
            cl[c2] = cl[c3] = CL_DONE;
            shuf[2 * c] = c2;
            shuf[2 * c + 1] = c3;
            cl_tensor[g->call[c3].out] = true;
            root[c2] = root[c3] = c;
        } else if ((cl[c] = (uint8_t)cl_eligible(f, c, cl_tensor)) == CL_NO) {
            continue;
        } else if (cl[c] != CL_PLAIN) {
            cl_tensor[g->call[c].out] = true;
        }
        for (uint32_t i = 0; i < g->call[c].nin; i++) {
            uint32_t t = g->call[c].in[i];
            if (cl_tensor[t] && f->defcall[t] != KILN_NONE)
                root[find_root(root, f->defcall[t])] = find_root(root, c);
        }
    }
    for (uint32_t c = 0; c < g->ncall; c++)
        if (cl[c] == CL_SAME && kind_in(f, c, cl_window))
            nwin[find_root(root, c)]++;
    for (uint32_t c = 0; c < g->ncall; c++)
        if (nwin[find_root(root, c)] < 2)
            cl[c] = CL_NO;
    KILN_TRY(kiln_gr_add_inputs(out));
    for (uint32_t c = 0; c < g->ncall; c++) {
        if (cl[c] == CL_NO) {
            KILN_TRY(kiln_gr_copy_call(out, c));
            continue;
        }
        if (cl[c] == CL_SHUFFLE)
            KILN_TRY(emit_shuffle(out, c, shuf[2 * c], shuf[2 * c + 1]));
        else if (cl[c] != CL_DONE)
            KILN_TRY(emit_nhwc(out, c, (enum cl_kind)cl[c]));
        (*converted)++;
    }
    for (uint32_t i = 0; i < g->noutput; i++)
        if (kiln_gr_get(out, g->output[i]) == KILN_NONE)
            return ctx->err.status;
    return kiln_gr_mark_outputs(out, g->output, g->noutput);
}

enum kiln_status
kiln_graph_channels_last(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
                         struct kiln_graph **out, const double *const **weights_out,
                         uint32_t *converted)
{
    return kiln_gr_rewrite(ctx, g, weights, "layout", channels_last, out, weights_out, converted);
}
