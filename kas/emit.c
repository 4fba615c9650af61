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
        const struct kas_node *nd = &d->node[i];
        const struct cdims    *in = &c[nd->in[0]], *out = &c[i];
        char                   b0[16], b1[16], b2[16];
        const char            *t = tname(d, i, b0), *x = tname(d, nd->in[0], b1);
        const char            *x2 = nd->nin == 2 ? tname(d, nd->in[1], b2) : NULL;
        switch ((enum kas_prim)nd->prim) {
        case KAS_INPUT:
        case KAS_NPRIM:
            break;
        case KAS_UNFOLD: {
            int  pad = nd->c * (nd->b - 1) / 2;
            char he[64] = "h", we[64] = "w";
            if (nd->a & 1)
                snprintf(he, sizeof he, "h + i * %d - %d", nd->c, pad);
            if (nd->a & 2)
                snprintf(we, sizeof we, "w + j * %d - %d", nd->c, pad);
            kiln_buf_printf(ctx, b, "%s[n", t);
            for (int k = 0; k < in->r; k++)
                kiln_buf_printf(ctx, b, ", %s", dimvar[k]);
            kiln_buf_printf(ctx, b, "%s%s, h, w] = select(", (nd->a & 1) ? ", i" : "",
                            (nd->a & 2) ? ", j" : "");
            const char *sep = "";
            if (nd->a & 1) {
                kiln_buf_printf(ctx, b, "0 <= %s && %s < %lld", he, he, (long long)in->h);
                sep = " && ";
            }
            if (nd->a & 2)
                kiln_buf_printf(ctx, b, "%s0 <= %s && %s < %lld", sep, we, we, (long long)in->w);
            kiln_buf_printf(ctx, b, ", %s[", x);
            index_list(b, ctx, in, -1, NULL, -1, true, he, we);
            kiln_buf_puts(ctx, b, "], 0.0) where ");
            if (nd->a & 1)
                kiln_buf_printf(ctx, b, "i < %d, ", nd->b);
            if (nd->a & 2)
                kiln_buf_printf(ctx, b, "j < %d, ", nd->b);
            kiln_buf_printf(ctx, b, "h < %lld, w < %lld\n", (long long)in->h, (long long)in->w);
            break;
        }
        case KAS_SHIFT: {
            char    he[64] = "h", we[64] = "w";
            int64_t ext = nd->a == 0 ? in->h : in->w;
            snprintf(nd->a == 0 ? he : we, 64, "(%s + %lld) %% %lld", nd->a == 0 ? "h" : "w",
                     (long long)(nd->b > 0 ? 1 : ext - 1), (long long)ext);
            kiln_buf_printf(ctx, b, "%s[", t);
            index_list(b, ctx, out, -1, NULL, -1, false, NULL, NULL);
            kiln_buf_printf(ctx, b, "] = %s[", x);
            index_list(b, ctx, in, -1, NULL, -1, true, he, we);
            kiln_buf_printf(ctx, b, "] where h < %lld, w < %lld\n", (long long)in->h,
                            (long long)in->w);
            break;
        }
        case KAS_GROUP:
        case KAS_UNGROUP:
            kiln_buf_printf(ctx, b, "%s = reshape(%s, shape=", t, x);
            shape_list(b, ctx, batch, out);
            kiln_buf_puts(ctx, b, ")\n");
            break;
        case KAS_SCALE:
            kiln_buf_printf(ctx, b, "%s[", t);
            index_list(b, ctx, out, -1, NULL, -1, false, NULL, NULL);
            kiln_buf_printf(ctx, b, "] = %s[", x);
            index_list(b, ctx, in, -1, NULL, -1, false, NULL, NULL);
            kiln_buf_printf(ctx, b, "] * w%d[", i);
            for (int k = 0, first = 1; k < in->r; k++)
                if (nd->a & (1 << k)) {
                    kiln_buf_printf(ctx, b, "%s%s", first ? "" : ", ", dimvar[k]);
                    first = 0;
                }
            kiln_buf_puts(ctx, b, "]\n");
            break;
        case KAS_FC:
            kiln_buf_printf(ctx, b, "%s[", t);
            index_list(b, ctx, out, nd->a, "o", -1, false, NULL, NULL);
            kiln_buf_printf(ctx, b, "] += %s[", x);
            index_list(b, ctx, in, nd->a, "r", -1, false, NULL, NULL);
            kiln_buf_printf(ctx, b, "] * w%d[o, r]\n", i);
            break;
        case KAS_CONV: {
            int64_t         cg;
            struct kas_mono wd[KAS_MAX_WDIMS];
            kas_node_weight(d, i, wd);
            kas_mono_eval(wd[1], vals, &cg);
            kiln_buf_printf(ctx, b, "%s = conv2d(%s, w%d, padding=[%d, %d], groups=%lld)\n", t, x,
                            i, nd->b / 2, nd->c / 2, (long long)(in->d[0] / cg));
            break;
        }
        case KAS_MIX:
            kiln_buf_printf(ctx, b, "%s[", t);
            index_list(b, ctx, in, nd->a, "o", nd->b, false, NULL, NULL);
            kiln_buf_printf(ctx, b, "] += %s[", x);
            {
                kiln_buf_puts(ctx, b, "n");
                for (int k = 0; k < in->r; k++)
                    kiln_buf_printf(ctx, b, ", %s",
                                    k == nd->a   ? "r"
                                    : k == nd->b ? "s"
                                                 : dimvar[k]);
                if (in->sp)
                    kiln_buf_puts(ctx, b, ", h, w");
            }
            kiln_buf_printf(ctx, b, "] * w%d[o, r, s]\n", i);
            break;
        case KAS_GRAM:
            kiln_buf_printf(ctx, b, "%s[n, p, q] += %s[n, p, h, w] * %s[n, q, h, w]\n", t, x, x2);
            break;
        case KAS_APPLY:
            if (c[nd->in[1]].sp)
                kiln_buf_printf(ctx, b, "%s[n, p, h, w] += %s[n, p, q] * %s[n, q, h, w]\n", t, x,
                                x2);
            else
                kiln_buf_printf(ctx, b, "%s[n, p, r] += %s[n, p, q] * %s[n, q, r]\n", t, x, x2);
            break;
        case KAS_BINARY: {
            const struct cdims *i2 = &c[nd->in[1]];
            if (in->sp == i2->sp) {
                kiln_buf_printf(ctx, b, "%s = %s(%s, %s)\n", t, kas_binop_name[nd->a], x, x2);
                break;
            }
            char ea[128], eb[128];
            snprintf(ea, sizeof ea, "%s[n%s%s%s%s%s%s]", x, in->r > 0 ? ", a" : "",
                     in->r > 1 ? ", b" : "", in->r > 2 ? ", c" : "", in->r > 3 ? ", d" : "",
                     in->r > 4 ? ", e" : "", in->sp ? ", h, w" : "");
            snprintf(eb, sizeof eb, "%s[n%s%s%s%s%s%s]", x2, i2->r > 0 ? ", a" : "",
                     i2->r > 1 ? ", b" : "", i2->r > 2 ? ", c" : "", i2->r > 3 ? ", d" : "",
                     i2->r > 4 ? ", e" : "", i2->sp ? ", h, w" : "");
            kiln_buf_printf(ctx, b, "%s[", t);
            index_list(b, ctx, out, -1, NULL, -1, false, NULL, NULL);
            kiln_buf_puts(ctx, b, "] = ");
            binop_expr(b, ctx, nd->a, ea, eb, false);
            kiln_buf_puts(ctx, b, "\n");
            break;
        }
        case KAS_FOLD: {
            const char *red = nd->b == KAS_FOLD_MAX ? "max=" : "+=";
            kiln_buf_printf(ctx, b, "%s[", t);
            int64_t cnt;
            if (nd->a == KAS_DIM_SPATIAL) {
                index_list(b, ctx, out, -1, NULL, -1, false, NULL, NULL);
                kiln_buf_printf(ctx, b, "] %s %s[", red, x);
                index_list(b, ctx, in, -1, NULL, -1, false, NULL, NULL);
                cnt = in->h * in->w;
            } else {
                index_list(b, ctx, in, -1, NULL, nd->a, false, NULL, NULL);
                /* the output's dims after the folded one shift down a letter: rename */
                kiln_buf_printf(ctx, b, "] %s %s[", red, x);
                index_list(b, ctx, in, nd->a, "r", -1, false, NULL, NULL);
                cnt = in->d[nd->a];
            }
            if (nd->b == KAS_FOLD_MEAN)
                kiln_buf_printf(ctx, b, "] / %lld.0\n", (long long)cnt);
            else
                kiln_buf_puts(ctx, b, "]\n");
            break;
        }
        case KAS_UNARY:
            if (nd->a == KAS_SQRT) {
                kiln_buf_printf(ctx, b, "%s[", t);
                index_list(b, ctx, out, -1, NULL, -1, false, NULL, NULL);
                kiln_buf_printf(ctx, b, "] = sqrt(abs(%s[", x);
                index_list(b, ctx, in, -1, NULL, -1, false, NULL, NULL);
                kiln_buf_puts(ctx, b, "]))\n");
            } else {
                kiln_buf_printf(ctx, b, "%s = %s(%s)\n", t, kas_unop_name[nd->a], x);
            }
            break;
        case KAS_SOFTMAX:
            kiln_buf_printf(ctx, b, "%s = softmax(%s, axis=%d)\n", t, x, 1 + nd->a);
            break;
        case KAS_POOL:
            kiln_buf_printf(ctx, b, "%s = %s(%s, kernel=%d, stride=1, padding=%d)\n", t,
                            nd->a ? "max_pool2d" : "avg_pool2d", x, nd->b, nd->b / 2);
            break;
        case KAS_DOWNSAMPLE: {
            char he[32], we[32];
            snprintf(he, sizeof he, "h * %d", nd->b);
            snprintf(we, sizeof we, "w * %d", nd->b);
            kiln_buf_printf(ctx, b, "%s[", t);
            index_list(b, ctx, out, -1, NULL, -1, false, NULL, NULL);
            kiln_buf_printf(ctx, b, "] = %s[", x);
            index_list(b, ctx, in, -1, NULL, -1, true, he, we);
            kiln_buf_printf(ctx, b, "] where h < %lld, w < %lld\n", (long long)out->h,
                            (long long)out->w);
            break;
        }
        }
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

void
kas_design_describe(const struct kas_design *d, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 1; i < d->nnode && len + 1 < size; i++) {
        const struct kas_node *n = &d->node[i];
        char                   m[64] = "";
        if (n->prim == KAS_FC || n->prim == KAS_CONV || n->prim == KAS_MIX || n->prim == KAS_GROUP)
            kas_mono_print(n->m, false, m, sizeof m);
        const char *sub = n->prim == KAS_UNARY    ? kas_unop_name[n->a]
                          : n->prim == KAS_BINARY ? kas_binop_name[n->a]
                          : n->prim == KAS_FOLD   ? kas_fold_name[n->b]
                                                  : NULL;
        len += (size_t)snprintf(buf + len, size - len, "%s%d=%s", i > 1 ? " " : "", i,
                                sub ? sub : kas_prim_name[n->prim]);
        if (len >= size)
            break;
        switch ((enum kas_prim)n->prim) {
        case KAS_UNFOLD:
            len += (size_t)snprintf(buf + len, size - len, "(%s,%d,d%d",
                                    n->a == 1   ? "h"
                                    : n->a == 2 ? "w"
                                                : "hw",
                                    n->b, n->c);
            break;
        case KAS_CONV:
            len += (size_t)snprintf(buf + len, size - len, "(%dx%d,%s,%s", n->b, n->c,
                                    n->a == 0   ? "dense"
                                    : n->a == 1 ? "G"
                                                : "dw",
                                    m);
            break;
        case KAS_FC:
        case KAS_GROUP:
            len += (size_t)snprintf(buf + len, size - len, "(%d,%s", n->a, m);
            break;
        case KAS_MIX:
            len += (size_t)snprintf(buf + len, size - len, "(%d,%d,%s", n->a, n->b, m);
            break;
        case KAS_SHIFT:
            len += (size_t)snprintf(buf + len, size - len, "(%s,%+d", n->a ? "w" : "h", n->b);
            break;
        case KAS_FOLD:
            if (n->a == KAS_DIM_SPATIAL)
                len += (size_t)snprintf(buf + len, size - len, "(hw");
            else
                len += (size_t)snprintf(buf + len, size - len, "(%d", n->a);
            break;
        case KAS_POOL:
            len += (size_t)snprintf(buf + len, size - len, "(%s%d", n->a ? "max" : "avg", n->b);
            break;
        case KAS_SCALE:
            len += (size_t)snprintf(buf + len, size - len, "(");
            for (int k = 0; k < KAS_MAX_RANK && len < size; k++)
                if (n->a & (1 << k))
                    len += (size_t)snprintf(buf + len, size - len, "%d", k);
            break;
        case KAS_UNGROUP:
        case KAS_SOFTMAX:
            len += (size_t)snprintf(buf + len, size - len, "(%d", n->a);
            break;
        case KAS_INPUT:
        case KAS_GRAM:
        case KAS_APPLY:
        case KAS_BINARY:
        case KAS_UNARY:
        case KAS_DOWNSAMPLE:
        case KAS_NPRIM:
            len += (size_t)snprintf(buf + len, size - len, "(");
            break;
        }
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
        kiln_buf_printf(ctx, b, "))  # %s\n", kas_prim_name[d->node[i].prim]);
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
        char                    b0[16], b1[16], b2[16], li[16], lo[16];
        const char             *t = tname(d, i, b0), *x = tname(d, nd->in[0], b1);
        const char             *x2 = nd->nin == 2 ? tname(d, nd->in[1], b2) : NULL;
        kiln_buf_printf(ctx, b, "        %s = ", t);
        switch ((enum kas_prim)nd->prim) {
        case KAS_INPUT:
        case KAS_NPRIM:
            break;
        case KAS_UNFOLD:
            if ((nd->a & 3) == 3)
                kiln_buf_printf(ctx, b, "window(window(%s, %d, %d, -2), %d, %d, -1)", x, nd->b,
                                nd->c, nd->b, nd->c);
            else
                kiln_buf_printf(ctx, b, "window(%s, %d, %d, %d)", x, nd->b, nd->c,
                                nd->a == 1 ? -2 : -1);
            break;
        case KAS_SHIFT:
            kiln_buf_printf(ctx, b, "torch.roll(%s, shifts=%d, dims=%d)", x, -nd->b,
                            nd->a == 0 ? -2 : -1);
            break;
        case KAS_GROUP:
        case KAS_UNGROUP:
            kiln_buf_printf(ctx, b, "%s.reshape(N", x);
            for (int k = 0; k < nd->out.rank; k++) {
                kiln_buf_puts(ctx, b, ", ");
                py_size(b, ctx, nd->out.d[k]);
            }
            if (nd->out.spatial)
                kiln_buf_printf(ctx, b, ", %s.shape[-2], %s.shape[-1]", x, x);
            kiln_buf_puts(ctx, b, ")");
            break;
        case KAS_SCALE: { /* index the weight so it broadcasts: w[:, None, None] */
            kiln_buf_printf(ctx, b, "%s * self.w%d[", x, i);
            for (int k = 0; k < in->rank; k++)
                kiln_buf_printf(ctx, b, "%s%s", k ? ", " : "", nd->a & (1 << k) ? ":" : "None");
            kiln_buf_printf(ctx, b, "%s]", in->spatial ? ", None, None" : "");
            break;
        }
        case KAS_FC:
            py_letters(li, in, -1, 0, -1);
            py_letters(lo, in, nd->a, 'o', -1);
            kiln_buf_printf(ctx, b, "torch.einsum(\"%s,o%c->%s\", %s, self.w%d)", li, 'a' + nd->a,
                            lo, x, i);
            break;
        case KAS_CONV: {
            kiln_buf_printf(ctx, b, "F.conv2d(%s, self.w%d, padding=(%d, %d), groups=", x, i,
                            nd->b / 2, nd->c / 2);
            if (nd->a == 0)
                kiln_buf_puts(ctx, b, "1)");
            else if (nd->a == 1)
                kiln_buf_puts(ctx, b, "G)");
            else {
                py_size(b, ctx, in->d[0]);
                kiln_buf_puts(ctx, b, ")");
            }
            break;
        }
        case KAS_MIX:
            py_letters(li, in, -1, 0, -1);
            py_letters(lo, in, nd->a, 'o', nd->b);
            kiln_buf_printf(ctx, b, "torch.einsum(\"%s,o%c%c->%s\", %s, self.w%d)", li, 'a' + nd->a,
                            'a' + nd->b, lo, x, i);
            break;
        case KAS_GRAM:
            kiln_buf_printf(ctx, b, "torch.einsum(\"nahw,nbhw->nab\", %s, %s)", x, x2);
            break;
        case KAS_APPLY:
            kiln_buf_printf(ctx, b, "torch.einsum(\"%s\", %s, %s)",
                            d->node[nd->in[1]].out.spatial ? "nab,nbhw->nahw" : "nab,nbc->nac", x,
                            x2);
            break;
        case KAS_BINARY: {
            const struct kas_shape *i2 = &d->node[nd->in[1]].out;
            char                    ea[48], eb[48];
            snprintf(ea, sizeof ea, "%s%s", x,
                     in->spatial || !i2->spatial ? "" : "[..., None, None]");
            snprintf(eb, sizeof eb, "%s%s", x2,
                     i2->spatial || !in->spatial ? "" : "[..., None, None]");
            binop_expr(b, ctx, nd->a, ea, eb, true);
            break;
        }
        case KAS_FOLD: {
            static const char *const fn[KAS_NFOLD] = {"sum", "mean", "amax"};
            if (nd->a == KAS_DIM_SPATIAL)
                kiln_buf_printf(ctx, b, "%s.%s(dim=(-2, -1))", x, fn[nd->b]);
            else
                kiln_buf_printf(ctx, b, "%s.%s(dim=%d)", x, fn[nd->b], 1 + nd->a);
            break;
        }
        case KAS_UNARY: {
            static const char *const fn[KAS_NUNOP] = {"torch.relu", "F.gelu",     "torch.sigmoid",
                                                      "torch.tanh", "torch.abs",  "torch.exp",
                                                      "torch.neg",  "torch.sqrt", "torch.square"};
            if (nd->a == KAS_SQRT)
                kiln_buf_printf(ctx, b, "torch.sqrt(torch.abs(%s))", x);
            else
                kiln_buf_printf(ctx, b, "%s(%s)", fn[nd->a], x);
            break;
        }
        case KAS_SOFTMAX:
            kiln_buf_printf(ctx, b, "torch.softmax(%s, dim=%d)", x, 1 + nd->a);
            break;
        case KAS_POOL:
            kiln_buf_printf(ctx, b, "F.%s(%s, %d, stride=1, padding=%d)",
                            nd->a ? "max_pool2d" : "avg_pool2d", x, nd->b, nd->b / 2);
            break;
        case KAS_DOWNSAMPLE:
            kiln_buf_printf(ctx, b, "%s[..., ::%d, ::%d]", x, nd->b, nd->b);
            break;
        }
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
