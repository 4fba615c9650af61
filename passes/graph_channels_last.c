/* passes/graph_channels_last.c -- channels-last activations (kiln_graph_channels_last):
 * rebuilds a graph (graph_rebuild.c) so that its convolutions, pooling and the elementwise
 * statements between them compute on NHWC activations, with transposes where an NCHW tensor
 * meets a channels-last statement and back (passes/README.md). */
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
        return !kiln_gr_find_attr(f, call, "layout") && g->tensor[call->in[0]].ndim == 4;
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
    uint32_t nt = kiln_gr_get(r, t);
    if (nt == KILN_NONE)
        return KILN_NONE;
    const char *name = kiln_gr_fresh_name(
        r, kiln_arena_printf(r->ctx, "%s_nhwc", kiln_sym_str(r->ctx, r->f->g->tensor[t].name)),
        KILN_NONE);
    return r->nhwc[t] = name ? kiln_gr_transpose_nhwc(r, nt, name, true) : KILN_NONE;
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
        if ((in[i] = act ? get_nhwc(r, call->in[i]) : kiln_gr_get(r, call->in[i])) == KILN_NONE)
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
    const char *name = kiln_gr_fresh_name(
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
    KILN_TRY(kiln_gr_rebuild_init(out, f));
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
    KILN_TRY(kiln_gr_add_inputs(out));
    for (uint32_t c = 0; c < g->ncall; c++) {
        if (cl[c]) {
            KILN_TRY(emit_nhwc(out, c));
            (*converted)++;
        } else {
            KILN_TRY(kiln_gr_copy_call(out, c));
        }
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
