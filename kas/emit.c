/* kas/emit.c -- the emitters: a design as .kg text / a kiln kernel graph for one placeholder,
 * and as a PyTorch nn.Module source file that works for every placeholder.
 *
 * The kernel graph uses library calls where the library has the primitive (conv2d, reshape,
 * softmax, pooling, activations, same-shape binary ops) and compute definitions elsewhere
 * (unfold with dilation on one axis, shifts, fc / mix / gram / apply contractions, folds,
 * strided picks), so it compiles and tunes like any other graph; its FLOPs and parameters
 * (kiln_call_stats) are the formulas of kas/prim.c. Tensors are named t<i> after their node
 * (x the input, y the output) and weights w<i>, in both emitters, so a state dict moves across.
 * Layout: [N, d0, .., d(r-1), h, w]. */
#include "kas.h"

#include <stdio.h>
#include <string.h>

struct cdims {
    int64_t d[KAS_MAX_RANK];
    int     r;
    bool    sp;
    int64_t h, w;
};

static bool
cdims_of(const struct kas_shape *s, const int64_t *vals, const struct kas_placeholder *ph,
         struct cdims *c)
{
    c->r = s->rank;
    c->sp = s->spatial;
    c->h = ph->H / s->down;
    c->w = ph->W / s->down;
    for (int k = 0; k < s->rank; k++)
        if (!kas_mono_eval(s->d[k], vals, &c->d[k]))
            return false;
    return true;
}

static const char *
tname(const struct kas_design *d, int i, char *buf)
{
    if (i == 0)
        return "x";
    if (i == d->nnode - 1)
        return "y";
    snprintf(buf, 16, "t%d", i);
    return buf;
}

static const char *const dimvar[KAS_MAX_RANK] = {"a", "b", "c", "d", "e"};

/* "n, a, b, h, w" with dim `rep` named by `repname` (NULL = keep) and dim `skip` left out. */
static void
index_list(struct kiln_buf *b, kiln_ctx *ctx, const struct cdims *c, int rep, const char *repname,
           int skip, bool spatial_exprs, const char *he, const char *we)
{
    kiln_buf_puts(ctx, b, "n");
    for (int k = 0; k < c->r; k++) {
        if (k == skip)
            continue;
        kiln_buf_printf(ctx, b, ", %s", k == rep && repname ? repname : dimvar[k]);
    }
    if (c->sp)
        kiln_buf_printf(ctx, b, ", %s, %s", spatial_exprs ? he : "h", spatial_exprs ? we : "w");
}

static void
shape_list(struct kiln_buf *b, kiln_ctx *ctx, int64_t batch, const struct cdims *c)
{
    kiln_buf_printf(ctx, b, "[%lld", (long long)batch);
    for (int k = 0; k < c->r; k++)
        kiln_buf_printf(ctx, b, ", %lld", (long long)c->d[k]);
    if (c->sp)
        kiln_buf_printf(ctx, b, ", %lld, %lld", (long long)c->h, (long long)c->w);
    kiln_buf_puts(ctx, b, "]");
}

/* op(a, b) as an expression: kg syntax, or Python (py) */
static void
binop_expr(struct kiln_buf *b, kiln_ctx *ctx, int op, const char *ea, const char *eb, bool py)
{
    switch ((enum kas_binop)op) {
    case KAS_ADD:
        kiln_buf_printf(ctx, b, "%s + %s", ea, eb);
        break;
    case KAS_SUB:
        kiln_buf_printf(ctx, b, "%s - %s", ea, eb);
        break;
    case KAS_MUL:
        kiln_buf_printf(ctx, b, "%s * %s", ea, eb);
        break;
    case KAS_MAX:
        kiln_buf_printf(ctx, b, "%s(%s, %s)", py ? "torch.maximum" : "max", ea, eb);
        break;
    case KAS_MIN:
        kiln_buf_printf(ctx, b, "%s(%s, %s)", py ? "torch.minimum" : "min", ea, eb);
        break;
    case KAS_NBINOP:
        break;
    }
}

/* One statement of the .kg text: node i (nd) writing tensor t from x (and x2); c holds every
 * node's concrete dims, in and out nd's input and output. */
struct kas_kg_emit {
    kiln_ctx                *ctx;
    struct kiln_buf         *b;
    const struct kas_design *d;
    int                      i;
    const struct kas_node   *nd;
    const struct cdims      *c, *in, *out;
    const int64_t           *vals;
    int64_t                  batch;
    const char              *t, *x, *x2;
};

void
kas_emit_kg_input(const struct kas_kg_emit *e)
{
    (void)e;
}

void
kas_emit_kg_unfold(const struct kas_kg_emit *e)
{
    kiln_ctx           *ctx = e->ctx;
    struct kiln_buf    *b = e->b;
    const struct cdims *in = e->in;
    int                 axes = e->nd->p.unfold.axes, k = e->nd->p.unfold.k;
    int                 dil = e->nd->p.unfold.dilation, pad = dil * (k - 1) / 2;
    char                he[64] = "h", we[64] = "w";
    if (axes & KAS_AXIS_H)
        snprintf(he, sizeof he, "h + i * %d - %d", dil, pad);
    if (axes & KAS_AXIS_W)
        snprintf(we, sizeof we, "w + j * %d - %d", dil, pad);
    kiln_buf_printf(ctx, b, "%s[n", e->t);
    for (int j = 0; j < in->r; j++)
        kiln_buf_printf(ctx, b, ", %s", dimvar[j]);
    kiln_buf_printf(ctx, b, "%s%s, h, w] = select(", (axes & KAS_AXIS_H) ? ", i" : "",
                    (axes & KAS_AXIS_W) ? ", j" : "");
    const char *sep = "";
    if (axes & KAS_AXIS_H) {
        kiln_buf_printf(ctx, b, "0 <= %s && %s < %lld", he, he, (long long)in->h);
        sep = " && ";
    }
    if (axes & KAS_AXIS_W)
        kiln_buf_printf(ctx, b, "%s0 <= %s && %s < %lld", sep, we, we, (long long)in->w);
    kiln_buf_printf(ctx, b, ", %s[", e->x);
    index_list(b, ctx, in, -1, NULL, -1, true, he, we);
    kiln_buf_puts(ctx, b, "], 0.0) where ");
    if (axes & KAS_AXIS_H)
        kiln_buf_printf(ctx, b, "i < %d, ", k);
    if (axes & KAS_AXIS_W)
        kiln_buf_printf(ctx, b, "j < %d, ", k);
    kiln_buf_printf(ctx, b, "h < %lld, w < %lld\n", (long long)in->h, (long long)in->w);
}

void
kas_emit_kg_shift(const struct kas_kg_emit *e)
{
    kiln_ctx           *ctx = e->ctx;
    struct kiln_buf    *b = e->b;
    const struct cdims *in = e->in;
    int                 axis = e->nd->p.shift.axis;
    char                he[64] = "h", we[64] = "w";
    int64_t             ext = axis == 0 ? in->h : in->w;
    snprintf(axis == 0 ? he : we, 64, "(%s + %lld) %% %lld", axis == 0 ? "h" : "w",
             (long long)(e->nd->p.shift.offset > 0 ? 1 : ext - 1), (long long)ext);
    kiln_buf_printf(ctx, b, "%s[", e->t);
    index_list(b, ctx, e->out, -1, NULL, -1, false, NULL, NULL);
    kiln_buf_printf(ctx, b, "] = %s[", e->x);
    index_list(b, ctx, in, -1, NULL, -1, true, he, we);
    kiln_buf_printf(ctx, b, "] where h < %lld, w < %lld\n", (long long)in->h, (long long)in->w);
}

static void
kg_reshape(const struct kas_kg_emit *e)
{
    kiln_buf_printf(e->ctx, e->b, "%s = reshape(%s, shape=", e->t, e->x);
    shape_list(e->b, e->ctx, e->batch, e->out);
    kiln_buf_puts(e->ctx, e->b, ")\n");
}

void
kas_emit_kg_group(const struct kas_kg_emit *e)
{
    kg_reshape(e);
}

void
kas_emit_kg_ungroup(const struct kas_kg_emit *e)
{
    kg_reshape(e);
}

void
kas_emit_kg_scale(const struct kas_kg_emit *e)
{
    kiln_ctx        *ctx = e->ctx;
    struct kiln_buf *b = e->b;
    kiln_buf_printf(ctx, b, "%s[", e->t);
    index_list(b, ctx, e->out, -1, NULL, -1, false, NULL, NULL);
    kiln_buf_printf(ctx, b, "] = %s[", e->x);
    index_list(b, ctx, e->in, -1, NULL, -1, false, NULL, NULL);
    kiln_buf_printf(ctx, b, "] * w%d[", e->i);
    for (int k = 0, first = 1; k < e->in->r; k++)
        if (e->nd->p.scale.mask & (1 << k)) {
            kiln_buf_printf(ctx, b, "%s%s", first ? "" : ", ", dimvar[k]);
            first = 0;
        }
    kiln_buf_puts(ctx, b, "]\n");
}

void
kas_emit_kg_fc(const struct kas_kg_emit *e)
{
    kiln_ctx        *ctx = e->ctx;
    struct kiln_buf *b = e->b;
    int              dim = e->nd->p.fc.dim;
    kiln_buf_printf(ctx, b, "%s[", e->t);
    index_list(b, ctx, e->out, dim, "o", -1, false, NULL, NULL);
    kiln_buf_printf(ctx, b, "] += %s[", e->x);
    index_list(b, ctx, e->in, dim, "r", -1, false, NULL, NULL);
    kiln_buf_printf(ctx, b, "] * w%d[o, r]\n", e->i);
}

void
kas_emit_kg_conv(const struct kas_kg_emit *e)
{
    int64_t         cg;
    struct kas_mono wd[KAS_MAX_WDIMS];
    kas_node_weight(e->d, e->i, wd);
    kas_mono_eval(wd[1], e->vals, &cg);
    kiln_buf_printf(e->ctx, e->b, "%s = conv2d(%s, w%d, padding=[%d, %d], groups=%lld)\n", e->t,
                    e->x, e->i, e->nd->p.conv.kh / 2, e->nd->p.conv.kw / 2,
                    (long long)(e->in->d[0] / cg));
}

void
kas_emit_kg_mix(const struct kas_kg_emit *e)
{
    kiln_ctx           *ctx = e->ctx;
    struct kiln_buf    *b = e->b;
    const struct cdims *in = e->in;
    int                 mi = e->nd->p.mix.i, mj = e->nd->p.mix.j;
    kiln_buf_printf(ctx, b, "%s[", e->t);
    index_list(b, ctx, in, mi, "o", mj, false, NULL, NULL);
    kiln_buf_printf(ctx, b, "] += %s[", e->x);
    kiln_buf_puts(ctx, b, "n");
    for (int k = 0; k < in->r; k++)
        kiln_buf_printf(ctx, b, ", %s", k == mi ? "r" : k == mj ? "s" : dimvar[k]);
    if (in->sp)
        kiln_buf_puts(ctx, b, ", h, w");
    kiln_buf_printf(ctx, b, "] * w%d[o, r, s]\n", e->i);
}

void
kas_emit_kg_gram(const struct kas_kg_emit *e)
{
    kiln_buf_printf(e->ctx, e->b, "%s[n, p, q] += %s[n, p, h, w] * %s[n, q, h, w]\n", e->t, e->x,
                    e->x2);
}

void
kas_emit_kg_apply(const struct kas_kg_emit *e)
{
    if (e->c[e->nd->in[1]].sp)
        kiln_buf_printf(e->ctx, e->b, "%s[n, p, h, w] += %s[n, p, q] * %s[n, q, h, w]\n", e->t,
                        e->x, e->x2);
    else
        kiln_buf_printf(e->ctx, e->b, "%s[n, p, r] += %s[n, p, q] * %s[n, q, r]\n", e->t, e->x,
                        e->x2);
}

void
kas_emit_kg_binary(const struct kas_kg_emit *e)
{
    kiln_ctx           *ctx = e->ctx;
    struct kiln_buf    *b = e->b;
    const struct cdims *in = e->in, *i2 = &e->c[e->nd->in[1]];
    int                 op = e->nd->p.binary.op;
    const char         *x = e->x, *x2 = e->x2;
    if (in->sp == i2->sp) {
        kiln_buf_printf(ctx, b, "%s = %s(%s, %s)\n", e->t, kas_binop_name[op], x, x2);
        return;
    }
    char ea[128], eb[128];
    snprintf(ea, sizeof ea, "%s[n%s%s%s%s%s%s]", x, in->r > 0 ? ", a" : "", in->r > 1 ? ", b" : "",
             in->r > 2 ? ", c" : "", in->r > 3 ? ", d" : "", in->r > 4 ? ", e" : "",
             in->sp ? ", h, w" : "");
    snprintf(eb, sizeof eb, "%s[n%s%s%s%s%s%s]", x2, i2->r > 0 ? ", a" : "", i2->r > 1 ? ", b" : "",
             i2->r > 2 ? ", c" : "", i2->r > 3 ? ", d" : "", i2->r > 4 ? ", e" : "",
             i2->sp ? ", h, w" : "");
    kiln_buf_printf(ctx, b, "%s[", e->t);
    index_list(b, ctx, e->out, -1, NULL, -1, false, NULL, NULL);
    kiln_buf_puts(ctx, b, "] = ");
    binop_expr(b, ctx, op, ea, eb, false);
    kiln_buf_puts(ctx, b, "\n");
}

void
kas_emit_kg_fold(const struct kas_kg_emit *e)
{
    kiln_ctx           *ctx = e->ctx;
    struct kiln_buf    *b = e->b;
    const struct cdims *in = e->in;
    int                 dim = e->nd->p.fold.dim, op = e->nd->p.fold.op;
    const char         *red = op == KAS_FOLD_MAX ? "max=" : "+=";
    kiln_buf_printf(ctx, b, "%s[", e->t);
    int64_t cnt;
    if (dim == KAS_DIM_SPATIAL) {
        index_list(b, ctx, e->out, -1, NULL, -1, false, NULL, NULL);
        kiln_buf_printf(ctx, b, "] %s %s[", red, e->x);
        index_list(b, ctx, in, -1, NULL, -1, false, NULL, NULL);
        cnt = in->h * in->w;
    } else {
        index_list(b, ctx, in, -1, NULL, dim, false, NULL, NULL);
        /* the output's dims after the folded one shift down a letter: rename */
        kiln_buf_printf(ctx, b, "] %s %s[", red, e->x);
        index_list(b, ctx, in, dim, "r", -1, false, NULL, NULL);
        cnt = in->d[dim];
    }
    if (op == KAS_FOLD_MEAN)
        kiln_buf_printf(ctx, b, "] / %lld.0\n", (long long)cnt);
    else
        kiln_buf_puts(ctx, b, "]\n");
}

void
kas_emit_kg_unary(const struct kas_kg_emit *e)
{
    kiln_ctx        *ctx = e->ctx;
    struct kiln_buf *b = e->b;
    if (e->nd->p.unary.op == KAS_SQRT) {
        kiln_buf_printf(ctx, b, "%s[", e->t);
        index_list(b, ctx, e->out, -1, NULL, -1, false, NULL, NULL);
        kiln_buf_printf(ctx, b, "] = sqrt(abs(%s[", e->x);
        index_list(b, ctx, e->in, -1, NULL, -1, false, NULL, NULL);
        kiln_buf_puts(ctx, b, "]))\n");
    } else {
        kiln_buf_printf(ctx, b, "%s = %s(%s)\n", e->t, kas_unop_name[e->nd->p.unary.op], e->x);
    }
}

void
kas_emit_kg_softmax(const struct kas_kg_emit *e)
{
    kiln_buf_printf(e->ctx, e->b, "%s = softmax(%s, axis=%d)\n", e->t, e->x,
                    1 + e->nd->p.softmax.dim);
}

void
kas_emit_kg_pool(const struct kas_kg_emit *e)
{
    int k = e->nd->p.pool.k;
    kiln_buf_printf(e->ctx, e->b, "%s = %s(%s, kernel=%d, stride=1, padding=%d)\n", e->t,
                    e->nd->p.pool.kind == KAS_POOL_MAX ? "max_pool2d" : "avg_pool2d", e->x, k,
                    k / 2);
}

void
kas_emit_kg_downsample(const struct kas_kg_emit *e)
{
    kiln_ctx        *ctx = e->ctx;
    struct kiln_buf *b = e->b;
    int              f = e->nd->p.downsample.factor;
    char             he[32], we[32];
    snprintf(he, sizeof he, "h * %d", f);
    snprintf(we, sizeof we, "w * %d", f);
    kiln_buf_printf(ctx, b, "%s[", e->t);
    index_list(b, ctx, e->out, -1, NULL, -1, false, NULL, NULL);
    kiln_buf_printf(ctx, b, "] = %s[", e->x);
    index_list(b, ctx, e->in, -1, NULL, -1, true, he, we);
    kiln_buf_printf(ctx, b, "] where h < %lld, w < %lld\n", (long long)e->out->h,
                    (long long)e->out->w);
}

enum kiln_status
kas_emit_kg(kiln_ctx *ctx, const struct kas_design *d, const struct kas_placeholder *ph,
            int64_t batch, struct kiln_buf *b)
{
    int64_t      vals[KAS_NVAR];
    struct cdims c[KAS_MAX_NODES];
    kas_design_vals(d, ph, vals);
    for (int i = 0; i < d->nnode; i++)
        if (!cdims_of(&d->node[i].out, vals, ph, &c[i]))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas",
                             "a size of node %d is not a positive integer for placeholder "
                             "C=%lld K=%lld",
                             i, (long long)ph->C, (long long)ph->K);
    char desc[512];
    kas_design_describe(d, desc, sizeof desc);
    kiln_buf_printf(ctx, b, "# kiln kas kernel %016llx: %s\n", (unsigned long long)d->hash, desc);
    kiln_buf_printf(ctx, b, "# placeholder C=%lld K=%lld H=%lld W=%lld stride %d;",
                    (long long)ph->C, (long long)vals[KAS_K], (long long)ph->H, (long long)ph->W,
                    d->stride);
    for (int v = KAS_G; v < KAS_NVAR; v++)
        if (d->val[v].num) {
            char m[64];
            kas_mono_print(d->val[v], false, m, sizeof m);
            kiln_buf_printf(ctx, b, " %s=%s=%lld", kas_var_name[v], m, (long long)vals[v]);
        }
    kiln_buf_puts(ctx, b, "\ninput x: f32");
    shape_list(b, ctx, batch, &c[0]);
    kiln_buf_puts(ctx, b, "\n");
    for (int i = 1; i < d->nnode; i++) {
        struct kas_mono wd[KAS_MAX_WDIMS];
        int             nw = kas_node_weight(d, i, wd);
        if (!nw)
            continue;
        kiln_buf_printf(ctx, b, "weight w%d: f32[", i);
        for (int k = 0; k < nw; k++) {
            int64_t v = 0;
            kas_mono_eval(wd[k], vals, &v);
            kiln_buf_printf(ctx, b, "%s%lld", k ? ", " : "", (long long)v);
        }
        kiln_buf_puts(ctx, b, "]\n");
    }
    for (int i = 1; i < d->nnode; i++) {
        const struct kas_node   *nd = &d->node[i];
        char                     b0[16], b1[16], b2[16];
        const struct kas_kg_emit e = {ctx,
                                      b,
                                      d,
                                      i,
                                      nd,
                                      c,
                                      &c[nd->in[0]],
                                      &c[i],
                                      vals,
                                      batch,
                                      tname(d, i, b0),
                                      tname(d, nd->in[0], b1),
                                      nd->nin == 2 ? tname(d, nd->in[1], b2) : NULL};
        kas_prims[nd->prim].emit_kg(&e);
    }
    kiln_buf_puts(ctx, b, "output y\n");
    return kiln_ok(ctx) ? KILN_OK : kiln_ctx_error(ctx)->status;
}

enum kiln_status
kas_emit_graph(kiln_ctx *ctx, const struct kas_design *d, const struct kas_placeholder *ph,
               int64_t batch, struct kiln_graph **out)
{
    struct kiln_buf b = {0};
    *out = NULL;
    KILN_TRY(kas_emit_kg(ctx, d, ph, batch, &b));
    return kiln_ir_parse(ctx, b.data, b.len, "<kas>", out);
}

/* ---- one-line descriptions: "label(parameters" (the inputs follow) ---- */

static void
describe_plain(const char *label, char *buf, size_t size)
{
    snprintf(buf, size, "%s(", label);
}

void
kas_describe_input(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)n, (void)m;
    describe_plain("input", buf, size);
}

void
kas_describe_unfold(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)m;
    int axes = n->p.unfold.axes;
    snprintf(buf, size, "unfold(%s,%d,d%d",
             axes == KAS_AXIS_H   ? "h"
             : axes == KAS_AXIS_W ? "w"
                                  : "hw",
             n->p.unfold.k, n->p.unfold.dilation);
}

void
kas_describe_shift(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)m;
    snprintf(buf, size, "shift(%s,%+d", n->p.shift.axis ? "w" : "h", n->p.shift.offset);
}

void
kas_describe_group(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    snprintf(buf, size, "group(%d,%s", n->p.group.dim, m);
}

void
kas_describe_ungroup(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)m;
    snprintf(buf, size, "ungroup(%d", n->p.ungroup.dim);
}

void
kas_describe_scale(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)m;
    size_t len = (size_t)snprintf(buf, size, "scale(");
    for (int k = 0; k < KAS_MAX_RANK && len < size; k++)
        if (n->p.scale.mask & (1 << k))
            len += (size_t)snprintf(buf + len, size - len, "%d", k);
}

void
kas_describe_fc(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    snprintf(buf, size, "fc(%d,%s", n->p.fc.dim, m);
}

void
kas_describe_conv(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    int kind = n->p.conv.kind;
    snprintf(buf, size, "conv(%dx%d,%s,%s", n->p.conv.kh, n->p.conv.kw,
             kind == KAS_CONV_DENSE     ? "dense"
             : kind == KAS_CONV_GROUPED ? "G"
                                        : "dw",
             m);
}

void
kas_describe_mix(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    snprintf(buf, size, "mix(%d,%d,%s", n->p.mix.i, n->p.mix.j, m);
}

void
kas_describe_gram(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)n, (void)m;
    describe_plain("gram", buf, size);
}

void
kas_describe_apply(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)n, (void)m;
    describe_plain("apply", buf, size);
}

void
kas_describe_binary(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)m;
    describe_plain(kas_binop_name[n->p.binary.op], buf, size);
}

void
kas_describe_fold(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)m;
    const char *op = kas_fold_name[n->p.fold.op];
    if (n->p.fold.dim == KAS_DIM_SPATIAL)
        snprintf(buf, size, "%s(hw", op);
    else
        snprintf(buf, size, "%s(%d", op, n->p.fold.dim);
}

void
kas_describe_unary(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)m;
    describe_plain(kas_unop_name[n->p.unary.op], buf, size);
}

void
kas_describe_softmax(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)m;
    snprintf(buf, size, "softmax(%d", n->p.softmax.dim);
}

void
kas_describe_pool(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)m;
    snprintf(buf, size, "pool(%s%d", n->p.pool.kind == KAS_POOL_MAX ? "max" : "avg", n->p.pool.k);
}

void
kas_describe_downsample(const struct kas_node *n, const char *m, char *buf, size_t size)
{
    (void)n, (void)m;
    describe_plain("downsample", buf, size);
}

void
kas_design_describe(const struct kas_design *d, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 1; i < d->nnode && len + 1 < size; i++) {
        const struct kas_node *n = &d->node[i];
        char                   m[64], label[128];
        if (n->m.num)
            kas_mono_print(n->m, false, m, sizeof m);
        else
            m[0] = 0;
        kas_prims[n->prim].describe(n, m, label, sizeof label);
        len += (size_t)snprintf(buf + len, size - len, "%s%d=%s", i > 1 ? " " : "", i, label);
        if (len >= size)
            break;
        for (int k = 0; k < n->nin; k++)
            len += (size_t)snprintf(buf + len, size - len, "%s%s%d",
                                    k || buf[len - 1] != '(' ? "," : "", "@", n->in[k]);
        if (len < size)
            len += (size_t)snprintf(buf + len, size - len, ")");
    }
    if (len >= size && size > 4)
        memcpy(buf + size - 4, "...", 4);
}

/* ---- PyTorch ---- */

static bool
is_constant(struct kas_mono m)
{
    for (int v = 0; v < KAS_NVAR; v++)
        if (m.e[v])
            return false;
    return true;
}

/* Free sizes relative to C or K, computed where C and K are known. */
static void
py_relative_sizes(struct kiln_buf *b, kiln_ctx *ctx, const struct kas_design *d)
{
    for (int v = KAS_G; v < KAS_NVAR; v++)
        if (d->val[v].num && !is_constant(d->val[v])) {
            char m[64];
            kas_mono_print(d->val[v], true, m, sizeof m);
            kiln_buf_printf(ctx, b, "        %s = %s\n", kas_var_name[v], m);
        }
}

static void
py_size(struct kiln_buf *b, kiln_ctx *ctx, struct kas_mono m)
{
    char s[96];
    kas_mono_print(m, true, s, sizeof s);
    kiln_buf_puts(ctx, b, s);
}

static void
py_letters(char *s, const struct kas_shape *sh, int rep, char repc, int skip)
{
    int n = 0;
    s[n++] = 'n';
    for (int k = 0; k < sh->rank; k++)
        if (k != skip)
            s[n++] = k == rep ? repc : (char)('a' + k);
    if (sh->spatial) {
        s[n++] = 'h';
        s[n++] = 'w';
    }
    s[n] = 0;
}

/* One line of the PyTorch forward: node i (nd) computing t from x (and x2); in is the first
 * input's shape. The caller writes "        t = " before and the shape comment after. */
struct kas_py_emit {
    kiln_ctx                *ctx;
    struct kiln_buf         *b;
    const struct kas_design *d;
    int                      i;
    const struct kas_node   *nd;
    const struct kas_shape  *in;
    const char              *x, *x2;
};

void
kas_emit_py_input(const struct kas_py_emit *e)
{
    (void)e;
}

void
kas_emit_py_unfold(const struct kas_py_emit *e)
{
    int axes = e->nd->p.unfold.axes, k = e->nd->p.unfold.k, dil = e->nd->p.unfold.dilation;
    if ((axes & 3) == 3)
        kiln_buf_printf(e->ctx, e->b, "window(window(%s, %d, %d, -2), %d, %d, -1)", e->x, k, dil, k,
                        dil);
    else
        kiln_buf_printf(e->ctx, e->b, "window(%s, %d, %d, %d)", e->x, k, dil,
                        axes == KAS_AXIS_H ? -2 : -1);
}

void
kas_emit_py_shift(const struct kas_py_emit *e)
{
    kiln_buf_printf(e->ctx, e->b, "torch.roll(%s, shifts=%d, dims=%d)", e->x,
                    -e->nd->p.shift.offset, e->nd->p.shift.axis == 0 ? -2 : -1);
}

static void
py_reshape(const struct kas_py_emit *e)
{
    const struct kas_node *nd = e->nd;
    kiln_buf_printf(e->ctx, e->b, "%s.reshape(N", e->x);
    for (int k = 0; k < nd->out.rank; k++) {
        kiln_buf_puts(e->ctx, e->b, ", ");
        py_size(e->b, e->ctx, nd->out.d[k]);
    }
    if (nd->out.spatial)
        kiln_buf_printf(e->ctx, e->b, ", %s.shape[-2], %s.shape[-1]", e->x, e->x);
    kiln_buf_puts(e->ctx, e->b, ")");
}

void
kas_emit_py_group(const struct kas_py_emit *e)
{
    py_reshape(e);
}

void
kas_emit_py_ungroup(const struct kas_py_emit *e)
{
    py_reshape(e);
}

void
kas_emit_py_scale(const struct kas_py_emit *e)
{
    /* index the weight so it broadcasts: w[:, None, None] */
    kiln_buf_printf(e->ctx, e->b, "%s * self.w%d[", e->x, e->i);
    for (int k = 0; k < e->in->rank; k++)
        kiln_buf_printf(e->ctx, e->b, "%s%s", k ? ", " : "",
                        e->nd->p.scale.mask & (1 << k) ? ":" : "None");
    kiln_buf_printf(e->ctx, e->b, "%s]", e->in->spatial ? ", None, None" : "");
}

void
kas_emit_py_fc(const struct kas_py_emit *e)
{
    char li[16], lo[16];
    int  dim = e->nd->p.fc.dim;
    py_letters(li, e->in, -1, 0, -1);
    py_letters(lo, e->in, dim, 'o', -1);
    kiln_buf_printf(e->ctx, e->b, "torch.einsum(\"%s,o%c->%s\", %s, self.w%d)", li, 'a' + dim, lo,
                    e->x, e->i);
}

void
kas_emit_py_conv(const struct kas_py_emit *e)
{
    kiln_buf_printf(e->ctx, e->b, "F.conv2d(%s, self.w%d, padding=(%d, %d), groups=", e->x, e->i,
                    e->nd->p.conv.kh / 2, e->nd->p.conv.kw / 2);
    if (e->nd->p.conv.kind == KAS_CONV_DENSE)
        kiln_buf_puts(e->ctx, e->b, "1)");
    else if (e->nd->p.conv.kind == KAS_CONV_GROUPED)
        kiln_buf_puts(e->ctx, e->b, "G)");
    else {
        py_size(e->b, e->ctx, e->in->d[0]);
        kiln_buf_puts(e->ctx, e->b, ")");
    }
}

void
kas_emit_py_mix(const struct kas_py_emit *e)
{
    char li[16], lo[16];
    int  mi = e->nd->p.mix.i, mj = e->nd->p.mix.j;
    py_letters(li, e->in, -1, 0, -1);
    py_letters(lo, e->in, mi, 'o', mj);
    kiln_buf_printf(e->ctx, e->b, "torch.einsum(\"%s,o%c%c->%s\", %s, self.w%d)", li, 'a' + mi,
                    'a' + mj, lo, e->x, e->i);
}

void
kas_emit_py_gram(const struct kas_py_emit *e)
{
    kiln_buf_printf(e->ctx, e->b, "torch.einsum(\"nahw,nbhw->nab\", %s, %s)", e->x, e->x2);
}

void
kas_emit_py_apply(const struct kas_py_emit *e)
{
    kiln_buf_printf(e->ctx, e->b, "torch.einsum(\"%s\", %s, %s)",
                    e->d->node[e->nd->in[1]].out.spatial ? "nab,nbhw->nahw" : "nab,nbc->nac", e->x,
                    e->x2);
}

void
kas_emit_py_binary(const struct kas_py_emit *e)
{
    const struct kas_shape *in = e->in, *i2 = &e->d->node[e->nd->in[1]].out;
    char                    ea[48], eb[48];
    snprintf(ea, sizeof ea, "%s%s", e->x, in->spatial || !i2->spatial ? "" : "[..., None, None]");
    snprintf(eb, sizeof eb, "%s%s", e->x2, i2->spatial || !in->spatial ? "" : "[..., None, None]");
    binop_expr(e->b, e->ctx, e->nd->p.binary.op, ea, eb, true);
}

void
kas_emit_py_fold(const struct kas_py_emit *e)
{
    static const char *const fn[KAS_NFOLD] = {"sum", "mean", "amax"};
    int                      dim = e->nd->p.fold.dim;
    if (dim == KAS_DIM_SPATIAL)
        kiln_buf_printf(e->ctx, e->b, "%s.%s(dim=(-2, -1))", e->x, fn[e->nd->p.fold.op]);
    else
        kiln_buf_printf(e->ctx, e->b, "%s.%s(dim=%d)", e->x, fn[e->nd->p.fold.op], 1 + dim);
}

void
kas_emit_py_unary(const struct kas_py_emit *e)
{
    static const char *const fn[KAS_NUNOP] = {"torch.relu", "F.gelu",     "torch.sigmoid",
                                              "torch.tanh", "torch.abs",  "torch.exp",
                                              "torch.neg",  "torch.sqrt", "torch.square"};
    if (e->nd->p.unary.op == KAS_SQRT)
        kiln_buf_printf(e->ctx, e->b, "torch.sqrt(torch.abs(%s))", e->x);
    else
        kiln_buf_printf(e->ctx, e->b, "%s(%s)", fn[e->nd->p.unary.op], e->x);
}

void
kas_emit_py_softmax(const struct kas_py_emit *e)
{
    kiln_buf_printf(e->ctx, e->b, "torch.softmax(%s, dim=%d)", e->x, 1 + e->nd->p.softmax.dim);
}

void
kas_emit_py_pool(const struct kas_py_emit *e)
{
    int k = e->nd->p.pool.k;
    kiln_buf_printf(e->ctx, e->b, "F.%s(%s, %d, stride=1, padding=%d)",
                    e->nd->p.pool.kind == KAS_POOL_MAX ? "max_pool2d" : "avg_pool2d", e->x, k,
                    k / 2);
}

void
kas_emit_py_downsample(const struct kas_py_emit *e)
{
    int f = e->nd->p.downsample.factor;
    kiln_buf_printf(e->ctx, e->b, "%s[..., ::%d, ::%d]", e->x, f, f);
}

enum kiln_status
kas_emit_py(kiln_ctx *ctx, const struct kas_design *d, const char *name, struct kiln_buf *b)
{
    char desc[512];
    kas_design_describe(d, desc, sizeof desc);
    kiln_buf_printf(ctx, b,
                    "\"\"\"Kernel %016llx sampled by kiln's kernel architecture search.\n\n"
                    "%s\n\nA replacement for a convolution with C input and K output channels "
                    "(stride %d).\nInput [N, C, H, W]; output [N, K, %s].\n\"\"\"\n"
                    "import math\n\nimport torch\nimport torch.nn as nn\n"
                    "import torch.nn.functional as F\n",
                    (unsigned long long)d->hash, desc, d->stride,
                    d->stride == 1 ? "H, W" : "H/2, W/2");
    bool consts = false, unfold = false;
    for (int v = KAS_G; v < KAS_NVAR; v++)
        if (d->val[v].num && is_constant(d->val[v])) {
            kiln_buf_printf(ctx, b, "%s%s = %d\n", consts ? "" : "\n", kas_var_name[v],
                            d->val[v].num);
            consts = true;
        }
    for (int i = 1; i < d->nnode; i++)
        unfold = unfold || d->node[i].prim == KAS_UNFOLD;
    if (unfold)
        kiln_buf_puts(ctx, b,
                      "\n\ndef window(x, k, dilation, dim):\n"
                      "    \"\"\"Sliding windows of k elements along dim (-2 height, -1 width), "
                      "zero padded to keep\n    the size; the window index becomes a new dim just "
                      "before the spatial dims.\"\"\"\n"
                      "    pad = dilation * (k - 1) // 2\n"
                      "    n = x.shape[dim]\n"
                      "    xp = F.pad(x, (pad, pad) if dim == -1 else (0, 0, pad, pad))\n"
                      "    return torch.stack([xp.narrow(dim, i * dilation, n) for i in "
                      "range(k)], dim=-3)\n");
    kiln_buf_puts(ctx, b, "\n\n");
    kiln_buf_printf(ctx, b,
                    "class %s(nn.Module):\n    def __init__(self, C, K=None):\n"
                    "        super().__init__()\n        K = C if K is None else K\n"
                    "        self.C, self.K = C, K\n",
                    name);
    if (d->k_is_c)
        kiln_buf_puts(ctx, b, "        assert K == C, \"this kernel was sampled for K = C\"\n");
    py_relative_sizes(b, ctx, d);
    for (int i = 1; i < d->nnode; i++) {
        struct kas_mono wd[KAS_MAX_WDIMS];
        int             nw = kas_node_weight(d, i, wd);
        if (!nw)
            continue;
        kiln_buf_printf(ctx, b, "        self.w%d = nn.Parameter(torch.empty(", i);
        for (int k = 0; k < nw; k++) {
            if (k)
                kiln_buf_puts(ctx, b, ", ");
            py_size(b, ctx, wd[k]);
        }
        kiln_buf_printf(ctx, b, "))  # %s\n", kas_prims[d->node[i].prim].name);
    }
    kiln_buf_puts(ctx, b,
                  "        self.reset_parameters()\n\n    def reset_parameters(self):\n"
                  "        # scales start as the identity, the others like nn.Conv2d's "
                  "weight (+-1/sqrt(fan_in))\n");
    bool any = false;
    for (int i = 1; i < d->nnode; i++) {
        struct kas_mono wd[KAS_MAX_WDIMS];
        if (!kas_node_weight(d, i, wd))
            continue;
        any = true;
        if (d->node[i].prim == KAS_SCALE)
            kiln_buf_printf(ctx, b, "        nn.init.ones_(self.w%d)\n", i);
        else
            kiln_buf_printf(ctx, b,
                            "        bound = 1 / math.sqrt(self.w%d[0].numel())\n"
                            "        nn.init.uniform_(self.w%d, -bound, bound)\n",
                            i, i);
    }
    if (!any)
        kiln_buf_puts(ctx, b, "        pass\n");
    kiln_buf_puts(ctx, b,
                  "\n"
                  "    def forward(self, x):\n        C, K = self.C, self.K\n"
                  "        N, H, W = x.shape[0], x.shape[2], x.shape[3]\n");
    py_relative_sizes(b, ctx, d);
    for (int i = 1; i < d->nnode; i++) {
        const struct kas_node  *nd = &d->node[i];
        const struct kas_shape *in = &d->node[nd->in[0]].out;
        char                    b0[16], b1[16], b2[16];
        const char             *t = tname(d, i, b0), *x = tname(d, nd->in[0], b1);
        const char             *x2 = nd->nin == 2 ? tname(d, nd->in[1], b2) : NULL;
        kiln_buf_printf(ctx, b, "        %s = ", t);
        const struct kas_py_emit e = {ctx, b, d, i, nd, in, x, x2};
        kas_prims[nd->prim].emit_py(&e);
        char   shp[160] = "";
        size_t sl = 0;
        for (int k = 0; k < nd->out.rank && sl < sizeof shp - 40; k++) {
            char s[48];
            kas_mono_print(nd->out.d[k], false, s, sizeof s);
            sl += (size_t)snprintf(shp + sl, sizeof shp - sl, ", %s", s);
        }
        if (nd->out.spatial)
            snprintf(shp + sl, sizeof shp - sl, nd->out.down > 1 ? ", H/%d, W/%d" : ", H, W",
                     nd->out.down, nd->out.down);
        kiln_buf_printf(ctx, b, "  # [N%s]\n", shp);
    }
    kiln_buf_puts(ctx, b, "        return y\n");
    return kiln_ok(ctx) ? KILN_OK : kiln_ctx_error(ctx)->status;
}
