/* frontend/onnx_nn.c -- ONNX's neural-network ops: MatMul, Gemm, Einsum, the reductions
 * (Reduce*, ArgMax, ArgMin, CumSum), convolutions and pooling (1-D as 2-D with a unit height),
 * BatchNormalization, Softmax. One handler per row of frontend/onnx.def; the dispatcher
 * (onnx.c) has checked the attributes and looked the inputs up into m->in[]. */
#include "onnx_impl.h"

#include <stdio.h>
#include <string.h>

/* ---- linear algebra ---- */

enum kiln_status
onnx_op_matmul(struct onnx_imp *m)
{
    return onnx_set_output(
        m, 0,
        onnx_lib2(m, "matmul", onnx_out0(m), onnx_tensor(m, m->in[0]), onnx_tensor(m, m->in[1])));
}

/* Gemm: alpha (A' B') + beta C, with A' = A or A^T (transpose), A' B^T as `dense`, a constant C
 * scaled at import time. */
enum kiln_status
onnx_op_gemm(struct onnx_imp *m)
{
    struct onnx_value *a = m->in[0], *b = m->in[1], *c = m->in[2];
    if (onnx_vrank(m, a) != 2 || onnx_vrank(m, b) != 2)
        return BAD(m, "A and B must be 2-D (ranks %u and %u)", onnx_vrank(m, a), onnx_vrank(m, b));
    double            alpha = onnx_attr_float(m, "alpha", 1), beta = onnx_attr_float(m, "beta", 1);
    enum kiln_dtype   dt = onnx_vdtype(m, a);
    uint32_t          ta = onnx_tensor(m, a), tb = onnx_tensor(m, b), t;
    struct onnx_attrs as = {0};
    if (onnx_attr_int(m, "transA", 0))
        ta = onnx_lib1(m, "transpose", onnx_suffixed(m, onnx_out0(m), "At"), ta, &as);
    bool tb_ = onnx_attr_int(m, "transB", 0) != 0;
    bool last = alpha == 1 && (!c || beta == 0);
    if (tb_) {
        /* x . w^T without materialising the transpose */
        t = onnx_lib2(m, "dense", last ? onnx_out0(m) : onnx_suffixed(m, onnx_out0(m), "mm"), ta,
                      tb);
    } else {
        t = onnx_lib2(m, "matmul", last ? onnx_out0(m) : onnx_suffixed(m, onnx_out0(m), "mm"), ta,
                      tb);
    }
    if (alpha != 1)
        t = onnx_lib2(m, "mul",
                      c && beta != 0 ? onnx_suffixed(m, onnx_out0(m), "scaled") : onnx_out0(m), t,
                      onnx_scalar(m, onnx_suffixed(m, onnx_out0(m), "alpha"), alpha, dt));
    if (c && beta != 0) {
        uint32_t tc;
        if (beta != 1 && c->is_const) {
            struct frontend_const k = c->c;
            k.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)k.numel);
            if (!k.data)
                return m->ctx->err.status;
            for (int64_t i = 0; i < k.numel; i++)
                k.data[i] = c->c.data[i] * beta;
            tc = onnx_weight(m, onnx_suffixed(m, c->name, "beta"), &k);
        } else {
            tc = onnx_tensor(m, c);
            if (beta != 1)
                tc = onnx_lib2(m, "mul", onnx_suffixed(m, onnx_out0(m), "C"), tc,
                               onnx_scalar(m, onnx_suffixed(m, onnx_out0(m), "beta"), beta, dt));
        }
        t = onnx_lib2(m, "add", onnx_out0(m), t, tc);
    }
    return onnx_set_output(m, 0, t);
}

/* Einsum: the equation without its spaces. */
enum kiln_status
onnx_op_einsum(struct onnx_imp *m)
{
    const char *eq = onnx_attr_str(m, "equation", NULL);
    if (!eq)
        return BAD(m, "attribute 'equation' is required");
    char *e = kiln_arena_strdup(m->ctx, eq), *w = e;
    if (!e)
        return m->ctx->err.status;
    for (const char *p = eq; *p; p++)
        if (*p != ' ')
            *w++ = *p;
    *w = 0;
    uint32_t in[16];
    if (m->nin == 0 || m->nin > 16)
        return UNSUP(m, "%zu inputs; 1 to 16 are supported", m->node->n_input);
    for (uint32_t i = 0; i < m->nin; i++)
        in[i] = onnx_tensor(m, m->in[i]);
    struct onnx_attrs as = {0};
    onnx_at_str(m, &as, "eq", e);
    return onnx_set_output(m, 0, onnx_lib(m, "einsum", onnx_out0(m), m->nin, in, &as));
}

/* ---- reductions ---- */

/* The Reduce* ops: an optional elementwise step before (square, abs, exp(x - max)), one
 * reduction of the op library over the axes, an optional step after (sqrt, log, + max). */
enum reduce_kind {
    RED_SUM,
    RED_MEAN,
    RED_SUM_SQUARE,
    RED_MAX,
    RED_MIN,
    RED_PROD,
    RED_L1,
    RED_L2,
    RED_LOG_SUM,
    RED_LOG_SUM_EXP,
};

static enum kiln_status
reduce(struct onnx_imp *m, enum reduce_kind kind)
{
    /* axes became an input at opset 13 for ReduceSum, at 18 for the others */
    bool               axes_input = m->opset >= (kind == RED_SUM ? 13 : 18);
    struct onnx_value *x = m->in[0];
    uint32_t           r = onnx_vrank(m, x), na = 0;
    int64_t            ax[KILN_MAX_DIMS];
    if (axes_input) {
        struct onnx_value *a = m->in[1];
        if (a && !onnx_const_ints(m, a, 1, "axes", ax, &na, KILN_MAX_DIMS))
            return m->ctx->err.status;
    } else if (!onnx_attr_ints(m, "axes", ax, &na, KILN_MAX_DIMS, NULL)) {
        return m->ctx->err.status;
    }
    const char     *o = onnx_out0(m);
    enum kiln_dtype dt = onnx_vdtype(m, x);
    uint32_t        tx = onnx_tensor(m, x);
    if (!na && axes_input && onnx_attr_int(m, "noop_with_empty_axes", 0)) {
        /* the input itself; what the ops with an elementwise step give is not settled */
        if (kind >= RED_SUM_SQUARE && kind != RED_MAX && kind != RED_MIN && kind != RED_PROD)
            return UNSUP(m, "noop_with_empty_axes with empty axes is not supported for this op");
        return onnx_set_output(m, 0, onnx_reshape(m, o, tx, r, onnx_vshape(m, x)));
    }
    for (uint32_t i = 0; i < na; i++)
        if (onnx_norm_axis(ax[i], r) < 0 || onnx_norm_axis(ax[i], r) >= (int64_t)r)
            return BAD(m, "axis %lld is out of range for rank %u", (long long)ax[i], r);
    bool is_float = onnx_is_float(dt);
    if (!is_float && (kind == RED_MEAN || kind == RED_L2 || kind >= RED_LOG_SUM))
        return UNSUP(m, "element type %s: this reduction needs a float type", kiln_dtype_name(dt));
    if (dt == KILN_DTYPE_BOOL)
        return UNSUP(m, "element type bool is not supported");
    bool     kd = onnx_attr_int(m, "keepdims", 1) != 0;
    int64_t *axes = na ? kiln_arena_alloc(m->ctx, sizeof(int64_t) * na) : NULL;
    if (na && !axes)
        return m->ctx->err.status;
    if (na)
        memcpy(axes, ax, sizeof(int64_t) * na);
    struct onnx_attrs as = {0}, ask = {0};
    if (na) {
        onnx_at_ints(m, &as, "axes", axes, na);
        onnx_at_ints(m, &ask, "axes", axes, na);
    }
    onnx_at_int(m, &as, "keepdims", kd);
    onnx_at_int(m, &ask, "keepdims", 1);

    static const char *const lib[] = {
        [RED_SUM] = "reduce_sum",        [RED_MEAN] = "reduce_mean",
        [RED_SUM_SQUARE] = "reduce_sum", [RED_MAX] = "reduce_max",
        [RED_MIN] = "reduce_min",        [RED_PROD] = "reduce_prod",
        [RED_L1] = "reduce_sum",         [RED_L2] = "reduce_sum",
        [RED_LOG_SUM] = "reduce_sum",    [RED_LOG_SUM_EXP] = "reduce_sum",
    };
    bool     post = kind == RED_L2 || kind == RED_LOG_SUM || kind == RED_LOG_SUM_EXP;
    uint32_t mx = KILN_NONE;
    if (kind == RED_SUM_SQUARE || kind == RED_L2) {
        tx = onnx_lib1(m, "square", onnx_suffixed(m, o, "sq"), tx, NULL);
    } else if (kind == RED_L1) {
        tx = onnx_lib1(m, "abs", onnx_suffixed(m, o, "abs"), tx, NULL);
    } else if (kind == RED_LOG_SUM_EXP) {
        /* log(sum(exp(x - max))) + max: no overflow for large x */
        mx = onnx_lib1(m, "reduce_max", onnx_suffixed(m, o, "max"), tx, &ask);
        tx = onnx_lib2(m, "sub", onnx_suffixed(m, o, "shifted"), tx, mx);
        tx = onnx_lib1(m, "exp", onnx_suffixed(m, o, "exp"), tx, NULL);
    }
    uint32_t t = onnx_lib1(m, lib[kind], post ? onnx_suffixed(m, o, "sum") : o, tx, &as);
    if (kind == RED_L2)
        t = onnx_lib1(m, "sqrt", o, t, NULL);
    else if (kind == RED_LOG_SUM)
        t = onnx_lib1(m, "log", o, t, NULL);
    else if (kind == RED_LOG_SUM_EXP) {
        t = onnx_lib1(m, "log", onnx_suffixed(m, o, "log"), t, NULL);
        if (!kd && t != KILN_NONE)
            mx = onnx_reshape(m, onnx_suffixed(m, o, "max_flat"), mx, m->g->tensor[t].ndim,
                              m->g->tensor[t].shape);
        t = onnx_lib2(m, "add", o, t, mx);
    }
    return onnx_set_output(m, 0, t);
}

enum kiln_status
onnx_op_reduce_sum(struct onnx_imp *m)
{
    return reduce(m, RED_SUM);
}

enum kiln_status
onnx_op_reduce_mean(struct onnx_imp *m)
{
    return reduce(m, RED_MEAN);
}

enum kiln_status
onnx_op_reduce_sum_square(struct onnx_imp *m)
{
    return reduce(m, RED_SUM_SQUARE);
}

enum kiln_status
onnx_op_reduce_max(struct onnx_imp *m)
{
    return reduce(m, RED_MAX);
}

enum kiln_status
onnx_op_reduce_min(struct onnx_imp *m)
{
    return reduce(m, RED_MIN);
}

enum kiln_status
onnx_op_reduce_prod(struct onnx_imp *m)
{
    return reduce(m, RED_PROD);
}

enum kiln_status
onnx_op_reduce_l1(struct onnx_imp *m)
{
    return reduce(m, RED_L1);
}

enum kiln_status
onnx_op_reduce_l2(struct onnx_imp *m)
{
    return reduce(m, RED_L2);
}

enum kiln_status
onnx_op_reduce_log_sum(struct onnx_imp *m)
{
    return reduce(m, RED_LOG_SUM);
}

enum kiln_status
onnx_op_reduce_log_sum_exp(struct onnx_imp *m)
{
    return reduce(m, RED_LOG_SUM_EXP);
}

/* ArgMax, ArgMin: the library's argmax / argmin (int64 output). */
enum kiln_status
onnx_op_arg_reduce(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    enum kiln_dtype    dt = onnx_vdtype(m, x);
    if (dt == KILN_DTYPE_BOOL)
        return UNSUP(m, "element type bool is not supported");
    if (onnx_vrank(m, x) == 0)
        return BAD(m, "input '%s' is a scalar; it needs at least 1 dimension", x->name);
    int64_t axis = onnx_attr_int(m, "axis", 0);
    if (onnx_norm_axis(axis, onnx_vrank(m, x)) < 0
        || onnx_norm_axis(axis, onnx_vrank(m, x)) >= (int64_t)onnx_vrank(m, x))
        return BAD(m, "axis %lld is out of range for rank %u", (long long)axis, onnx_vrank(m, x));
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "axis", axis);
    onnx_at_int(m, &as, "keepdims", onnx_attr_int(m, "keepdims", 1) != 0);
    onnx_at_int(m, &as, "select_last_index", onnx_attr_int(m, "select_last_index", 0) != 0);
    return onnx_set_output(m, 0, onnx_lib1(m, m->op->kop, onnx_out0(m), onnx_tensor(m, x), &as));
}

/* CumSum: the axis input must be known at import time. */
enum kiln_status
onnx_op_cumsum(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    int64_t            axis;
    uint32_t           n = 0;
    if (!onnx_const_ints(m, m->in[1], 1, "axis", &axis, &n, 1))
        return m->ctx->err.status;
    if (n != 1)
        return BAD(m, "input 1 (axis) must hold one value, got %u", n);
    enum kiln_dtype dt = onnx_vdtype(m, x);
    if (dt == KILN_DTYPE_BOOL)
        return UNSUP(m, "element type bool is not supported");
    uint32_t r = onnx_vrank(m, x);
    if (r == 0)
        return BAD(m, "input '%s' is a scalar; it needs at least 1 dimension", x->name);
    if (onnx_norm_axis(axis, r) < 0 || onnx_norm_axis(axis, r) >= (int64_t)r)
        return BAD(m, "axis %lld is out of range for rank %u", (long long)axis, r);
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "axis", axis);
    onnx_at_int(m, &as, "exclusive", onnx_attr_int(m, "exclusive", 0) != 0);
    onnx_at_int(m, &as, "reverse", onnx_attr_int(m, "reverse", 0) != 0);
    return onnx_set_output(m, 0, onnx_lib1(m, "cumsum", onnx_out0(m), onnx_tensor(m, x), &as));
}

/* ---- convolution and pooling ---- */

struct window {
    uint32_t nsp;              /* spatial dimensions: 1 or 2 */
    int64_t  k[2], s[2], d[2]; /* kernel, strides, dilations */
    int64_t  pads[4];          /* top, left, bottom, right (ONNX begin..., end...) */
    int64_t  opad[2];          /* ConvTranspose output_padding */
};

/* "[a, b]", an arena string (or "?" when out of memory). */
static const char *
dims_str(struct onnx_imp *m, const int64_t *v, uint32_t n)
{
    const char *s =
        n == 1 ? kiln_arena_printf(m->ctx, "[%lld]", (long long)v[0])
               : kiln_arena_printf(m->ctx, "[%lld, %lld]", (long long)v[0], (long long)v[1]);
    return s ? s : "?";
}

/* Reads kernel_shape, strides, dilations, pads, auto_pad for nsp spatial dimensions of input
 * extents in[]; fills w with 2-D values (1-D padded with a unit height). kshape, when given, is
 * the weight's spatial shape: kernel_shape defaults to it and must agree with it. */
static bool
read_window(struct onnx_imp *m, uint32_t nsp, const int64_t *in, const int64_t *kshape,
            bool transpose, struct window *w)
{
    int64_t  k[2] = {1, 1}, s[2] = {1, 1}, d[2] = {1, 1}, p[4] = {0}, op[2] = {0};
    uint32_t nk, ns, nd, np, nop;
    bool     hk;
    if (!onnx_attr_ints(m, "kernel_shape", k, &nk, 2, &hk)
        || !onnx_attr_ints(m, "strides", s, &ns, 2, NULL)
        || !onnx_attr_ints(m, "dilations", d, &nd, 2, NULL)
        || !onnx_attr_ints(m, "pads", p, &np, 4, NULL)
        || !onnx_attr_ints(m, "output_padding", op, &nop, 2, NULL))
        return false;
    if (!hk) {
        if (!kshape) {
            BAD(m, "attribute 'kernel_shape' is required");
            return false;
        }
        for (uint32_t i = 0; i < nsp; i++)
            k[i] = kshape[i];
        nk = nsp;
    }
    if (hk && kshape && nk == nsp && (k[0] != kshape[0] || (nsp == 2 && k[1] != kshape[1]))) {
        BAD(m, "attribute 'kernel_shape' is %s but the weight's spatial shape is %s",
            dims_str(m, k, nk), dims_str(m, kshape, nsp));
        return false;
    }
    if (nk != nsp || (ns && ns != nsp) || (nd && nd != nsp) || (np && np != 2 * nsp)
        || (nop && nop != nsp)) {
        BAD(m, "kernel_shape, strides, dilations, pads must have %u, %u, %u, %u entries", nsp, nsp,
            nsp, 2 * nsp);
        return false;
    }
    if (!ns)
        s[0] = s[1] = 1;
    if (!nd)
        d[0] = d[1] = 1;
    for (uint32_t i = 0; i < nsp; i++)
        if (k[i] < 1 || s[i] < 1 || d[i] < 1) {
            BAD(m, "kernel_shape, strides and dilations must be positive");
            return false;
        }
    const char *ap = onnx_attr_str(m, "auto_pad", "NOTSET");
    if (!ap)
        return false;
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
        for (uint32_t i = 0; i < nsp; i++) {
            int64_t total;
            if (transpose) {
                int64_t outn = in[i] * s[i];
                total = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * d[i] + 1 - outn;
            } else {
                int64_t outn = (in[i] + s[i] - 1) / s[i];
                total = (outn - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in[i];
            }
            if (total < 0)
                total = 0;
            int64_t small = total / 2, big = total - small;
            bool    upper = !strcmp(ap, "SAME_UPPER");
            p[i] = upper ? small : big;
            p[i + nsp] = upper ? big : small;
        }
    } else if (!strcmp(ap, "VALID")) {
        memset(p, 0, sizeof p);
    } else if (strcmp(ap, "NOTSET")) {
        UNSUP(m, "auto_pad '%s' is not supported", ap);
        return false;
    }
    int64_t  os[4];
    uint32_t nos;
    bool     has_os;
    if (!onnx_attr_ints(m, "output_shape", os, &nos, 4, &has_os))
        return false;
    if (has_os) {
        /* ConvTranspose: the pads that give this output shape (ONNX's formula) */
        if (nos == nsp + 2)
            memmove(os, os + 2, sizeof(int64_t) * nsp);
        else if (nos != nsp) {
            BAD(m, "output_shape has %u entries; %u expected", nos, nsp);
            return false;
        }
        bool upper = !strcmp(ap, "SAME_UPPER");
        for (uint32_t i = 0; i < nsp; i++) {
            int64_t total = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * d[i] + 1 - os[i];
            if (total < 0) {
                op[i] -= total;
                total = 0;
            }
            p[i] = upper ? total / 2 : total - total / 2;
            p[i + nsp] = upper ? total - total / 2 : total / 2;
        }
    }
    memset(w, 0, sizeof *w);
    w->nsp = nsp;
    /* 2-D view: a 1-D window is [1, k] */
    uint32_t o = nsp == 1 ? 1 : 0;
    w->k[0] = w->s[0] = w->d[0] = 1;
    for (uint32_t i = 0; i < nsp; i++) {
        w->k[o + i] = k[i];
        w->s[o + i] = s[i];
        w->d[o + i] = d[i];
        w->opad[o + i] = op[i];
        w->pads[o + i] = p[i];
        w->pads[2 + o + i] = p[nsp + i];
    }
    return true;
}

/* x as 4-D: a 3-D [N, C, L] input becomes [N, C, 1, L]. */
static uint32_t
as_4d(struct onnx_imp *m, uint32_t x, const char *base)
{
    if (x == KILN_NONE || m->g->tensor[x].ndim == 4)
        return x;
    const int64_t *s = m->g->tensor[x].shape;
    int64_t        sh[4] = {s[0], s[1], 1, s[2]};
    return onnx_reshape(m, base, x, 4, sh);
}

static uint32_t
from_4d(struct onnx_imp *m, uint32_t y, uint32_t rank, const char *base)
{
    if (y == KILN_NONE || rank == 4)
        return y;
    const int64_t *s = m->g->tensor[y].shape;
    int64_t        sh[3] = {s[0], s[1], s[3]};
    return onnx_reshape(m, base, y, 3, sh);
}

static bool
spatial_rank(struct onnx_imp *m, const struct onnx_value *x)
{
    uint32_t r = onnx_vrank(m, x);
    if (r == 3 || r == 4)
        return true;
    UNSUP(m, "input has rank %u: only 1-D and 2-D (rank 3 and 4) windows are supported", r);
    return false;
}

static enum kiln_status
conv(struct onnx_imp *m, bool transpose)
{
    struct onnx_value *x = m->in[0], *w = m->in[1], *b = m->in[2];
    if (!spatial_rank(m, x))
        return m->ctx->err.status;
    uint32_t rank = onnx_vrank(m, x), nsp = rank - 2;
    if (onnx_vrank(m, w) != rank)
        return BAD(m, "weight has rank %u, input rank %u", onnx_vrank(m, w), rank);
    struct window win;
    if (!read_window(m, nsp, onnx_vshape(m, x) + 2, onnx_vshape(m, w) + 2, transpose, &win))
        return m->ctx->err.status;
    const char *o = onnx_out0(m);
    uint32_t    in[3] = {as_4d(m, onnx_tensor(m, x), onnx_suffixed(m, o, "x4")),
                         as_4d(m, onnx_tensor(m, w), onnx_suffixed(m, o, "w4")),
                      b ? onnx_tensor(m, b) : KILN_NONE};
    int64_t    *pads = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 10);
    if (!pads)
        return m->ctx->err.status;
    memcpy(pads, win.pads, sizeof(int64_t) * 4);
    memcpy(pads + 4, win.s, sizeof(int64_t) * 2);
    memcpy(pads + 6, win.d, sizeof(int64_t) * 2);
    memcpy(pads + 8, win.opad, sizeof(int64_t) * 2);
    struct onnx_attrs as = {0};
    onnx_at_ints(m, &as, "padding", pads, 4);
    onnx_at_ints(m, &as, "stride", pads + 4, 2);
    onnx_at_ints(m, &as, "dilation", pads + 6, 2);
    onnx_at_int(m, &as, "groups", onnx_attr_int(m, "group", 1));
    if (transpose)
        onnx_at_ints(m, &as, "output_padding", pads + 8, 2);
    uint32_t y = onnx_lib(m, transpose ? "conv2d_transpose" : "conv2d",
                          rank == 4 ? o : onnx_suffixed(m, o, "y4"), b ? 3 : 2, in, &as);
    return onnx_set_output(m, 0, from_4d(m, y, rank, o));
}

enum kiln_status
onnx_op_conv(struct onnx_imp *m)
{
    return conv(m, false);
}

enum kiln_status
onnx_op_conv_transpose(struct onnx_imp *m)
{
    return conv(m, true);
}

static enum kiln_status
pool(struct onnx_imp *m, bool is_max)
{
    if (!onnx_single_output(m))
        return m->ctx->err.status;
    if (onnx_attr_int(m, "storage_order", 0))
        return UNSUP(m, "storage_order 1 is not supported");
    struct onnx_value *x = m->in[0];
    if (!spatial_rank(m, x))
        return m->ctx->err.status;
    uint32_t      rank = onnx_vrank(m, x);
    struct window w;
    if (!read_window(m, rank - 2, onnx_vshape(m, x) + 2, NULL, false, &w))
        return m->ctx->err.status;
    const char *o = onnx_out0(m);
    uint32_t    t = as_4d(m, onnx_tensor(m, x), onnx_suffixed(m, o, "x4"));
    bool        ceil_mode = onnx_attr_int(m, "ceil_mode", 0) != 0;
    bool        cip = onnx_attr_int(m, "count_include_pad", 0) != 0;
    bool        sym = w.pads[0] == w.pads[2] && w.pads[1] == w.pads[3] && 2 * w.pads[0] <= w.k[0]
               && 2 * w.pads[1] <= w.k[1];
    bool     any_pad = w.pads[0] || w.pads[1] || w.pads[2] || w.pads[3];
    int64_t *v = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 16);
    if (!v)
        return m->ctx->err.status;
    struct onnx_attrs as = {0};
    if (any_pad && !sym) {
        /* explicit padding: -max for max pooling (never selected), zeros for averages that
         * count padding; averages that do not count it cannot be padded this way */
        if (!is_max && !cip)
            return UNSUP(m, "asymmetric pads with count_include_pad 0");
        if (ceil_mode)
            return UNSUP(m, "asymmetric pads with ceil_mode 1");
        int64_t *pd = v + 8;
        pd[0] = pd[1] = pd[4] = pd[5] = 0;
        pd[2] = w.pads[0];
        pd[3] = w.pads[1];
        pd[6] = w.pads[2];
        pd[7] = w.pads[3];
        onnx_at_ints(m, &as, "pads", pd, 8);
        if (is_max)
            onnx_at_float(m, &as, "value", -3.4028234663852886e38);
        t = onnx_lib1(m, "pad", onnx_suffixed(m, o, "pad"), t, &as);
        memset(&as, 0, sizeof as);
        memset(w.pads, 0, sizeof w.pads);
    }
    memcpy(v, w.k, sizeof(int64_t) * 2);
    memcpy(v + 2, w.s, sizeof(int64_t) * 2);
    v[4] = w.pads[0];
    v[5] = w.pads[1];
    memcpy(v + 6, w.d, sizeof(int64_t) * 2);
    onnx_at_ints(m, &as, "kernel", v, 2);
    onnx_at_ints(m, &as, "stride", v + 2, 2);
    onnx_at_ints(m, &as, "padding", v + 4, 2);
    onnx_at_int(m, &as, "ceil_mode", ceil_mode);
    if (is_max)
        onnx_at_ints(m, &as, "dilation", v + 6, 2);
    else
        onnx_at_int(m, &as, "count_include_pad", cip);
    uint32_t y = onnx_lib1(m, is_max ? "max_pool2d" : "avg_pool2d",
                           rank == 4 ? o : onnx_suffixed(m, o, "y4"), t, &as);
    return onnx_set_output(m, 0, from_4d(m, y, rank, o));
}

enum kiln_status
onnx_op_max_pool(struct onnx_imp *m)
{
    return pool(m, true);
}

enum kiln_status
onnx_op_average_pool(struct onnx_imp *m)
{
    return pool(m, false);
}

/* GlobalAveragePool, GlobalMaxPool: the library op of the row. */
enum kiln_status
onnx_op_global_pool(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    if (!spatial_rank(m, x))
        return m->ctx->err.status;
    uint32_t    rank = onnx_vrank(m, x);
    const char *o = onnx_out0(m);
    uint32_t    t = as_4d(m, onnx_tensor(m, x), onnx_suffixed(m, o, "x4"));
    uint32_t    y = onnx_lib1(m, m->op->kop, rank == 4 ? o : onnx_suffixed(m, o, "y4"), t, NULL);
    return onnx_set_output(m, 0, from_4d(m, y, rank, o));
}

/* ---- normalisation ---- */

/* BatchNormalization at inference (extra outputs are refused after the training_mode check, so
 * that a training node says why). */
enum kiln_status
onnx_op_batch_norm(struct onnx_imp *m)
{
    if (onnx_attr_int(m, "training_mode", 0))
        return UNSUP(m, "training_mode 1 is not supported (inference only)");
    if (onnx_attr_int(m, "spatial", 1) != 1)
        return UNSUP(m, "spatial 0 is not supported");
    if (!onnx_single_output(m))
        return m->ctx->err.status;
    uint32_t in[5];
    for (uint32_t i = 0; i < 5; i++)
        in[i] = onnx_tensor(m, m->in[i]);
    struct onnx_attrs as = {0};
    onnx_at_float(m, &as, "eps", onnx_attr_float(m, "epsilon", 1e-5));
    return onnx_set_output(m, 0, onnx_lib(m, "batch_norm", onnx_out0(m), 5, in, &as));
}

/* LayerNormalization's Mean and InvStdDev outputs: x as [lead, tail], the row mean and
 * 1/sqrt(biased variance + eps) by einsum, reshaped to x's rank with size-1 normalised
 * dimensions. Only computed when the node asks for them. */
static enum kiln_status
layer_norm_stats(struct onnx_imp *m, uint32_t tx, uint32_t axis, double eps)
{
    const Onnx__NodeProto *n = m->node;
    struct onnx_value     *x = m->in[0];
    uint32_t               rank = onnx_vrank(m, x);
    const int64_t         *sh = onnx_vshape(m, x);
    enum kiln_dtype        dt = onnx_vdtype(m, x);
    bool                   want[3] = {false};
    for (uint32_t k = 1; k < 3; k++)
        want[k] = k < n->n_output && n->output[k] && *n->output[k];
    if (!want[1] && !want[2])
        return KILN_OK;
    const char *base = n->output[want[1] ? 1 : 2];
    int64_t     flat[2] = {1, 1}, kd[KILN_MAX_DIMS];
    for (uint32_t i = 0; i < rank; i++) {
        flat[i >= axis] *= sh[i];
        kd[i] = i < axis ? sh[i] : 1;
    }
    struct onnx_attrs as = {0};
    onnx_at_str(m, &as, "eq", "ab->a");
    uint32_t xf = onnx_reshape(m, onnx_suffixed(m, base, "rows"), tx, 2, flat);
    uint32_t inv = onnx_scalar(m, onnx_suffixed(m, base, "inv_n"), 1.0 / (double)flat[1], dt);
    uint32_t mean = onnx_lib2(m, "mul", onnx_suffixed(m, base, "mean"),
                              onnx_lib1(m, "einsum", onnx_suffixed(m, base, "sum"), xf, &as), inv);
    int64_t  col[2] = {flat[0], 1};
    uint32_t d = onnx_lib2(m, "sub", onnx_suffixed(m, base, "dev"), xf,
                           onnx_reshape(m, onnx_suffixed(m, base, "mean_col"), mean, 2, col));
    struct onnx_attrs as2 = {0};
    onnx_at_str(m, &as2, "eq", "ab,ab->a");
    uint32_t dd[2] = {d, d};
    uint32_t var = onnx_lib2(m, "mul", onnx_suffixed(m, base, "var"),
                             onnx_lib(m, "einsum", onnx_suffixed(m, base, "ss"), 2, dd, &as2), inv);
    uint32_t rs = onnx_lib1(m, "rsqrt", onnx_suffixed(m, base, "inv_std"),
                            onnx_lib2(m, "add", onnx_suffixed(m, base, "var_eps"), var,
                                      onnx_scalar(m, onnx_suffixed(m, base, "eps"), eps, dt)),
                            NULL);
    if (want[1])
        KILN_TRY(onnx_set_output(m, 1, onnx_reshape(m, n->output[1], mean, rank, kd)));
    if (want[2])
        KILN_TRY(onnx_set_output(m, 2, onnx_reshape(m, n->output[2], rs, rank, kd)));
    return KILN_OK;
}

/* LayerNormalization (opset 17): layer_norm over the dimensions axis..; a Scale or B of the
 * normalised shape goes into the op, one that only broadcasts to it is applied after (mul,
 * add). stash_type only names the precision of the statistics, which kiln computes in the
 * input's dtype. */
enum kiln_status
onnx_op_layer_norm(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    uint32_t           rank = onnx_vrank(m, x);
    int64_t            axis = onnx_norm_axis(onnx_attr_int(m, "axis", -1), rank);
    if (axis < 0 || axis >= (int64_t)rank)
        return BAD(m, "axis %lld is out of range for rank %u",
                   (long long)onnx_attr_int(m, "axis", -1), rank);
    uint32_t       nt = rank - (uint32_t)axis;
    const int64_t *tail = onnx_vshape(m, x) + axis;
    uint32_t       in[3] = {onnx_tensor(m, x)}, nin = 1, post[2] = {KILN_NONE, KILN_NONE};
    for (uint32_t i = 1; i < 3; i++) {
        struct onnx_value *p = m->in[i];
        if (!p)
            continue;
        bool exact =
            onnx_vrank(m, p) == nt && !memcmp(onnx_vshape(m, p), tail, sizeof(int64_t) * nt);
        if (exact && nin == i)
            in[nin++] = onnx_tensor(m, p);
        else
            post[i - 1] = onnx_tensor(m, p);
    }
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "axis", axis);
    onnx_at_float(m, &as, "eps", onnx_attr_float(m, "epsilon", 1e-5));
    bool        last = post[0] == KILN_NONE && post[1] == KILN_NONE;
    const char *base = onnx_out0(m);
    uint32_t    t =
        onnx_lib(m, "layer_norm", last ? base : onnx_suffixed(m, base, "norm"), nin, in, &as);
    if (post[0] != KILN_NONE)
        t = onnx_lib2(m, "mul", post[1] == KILN_NONE ? base : onnx_suffixed(m, base, "scaled"), t,
                      post[0]);
    if (post[1] != KILN_NONE)
        t = onnx_lib2(m, "add", base, t, post[1]);
    KILN_TRY(onnx_set_output(m, 0, t));
    return layer_norm_stats(m, in[0], (uint32_t)axis, onnx_attr_float(m, "epsilon", 1e-5));
}

/* Softmax, LogSoftmax: the library op of the row. */
enum kiln_status
onnx_op_softmax(struct onnx_imp *m)
{
    const char        *op = m->op->kop;
    struct onnx_value *x = m->in[0];
    uint32_t           rank = onnx_vrank(m, x);
    int64_t axis = onnx_norm_axis(onnx_attr_int(m, "axis", m->opset < 13 ? 1 : -1), rank);
    if (axis < 0 || axis >= (int64_t)(rank ? rank : 1))
        return BAD(m, "axis %lld is out of range for rank %u",
                   (long long)onnx_attr_int(m, "axis", 0), rank);
    uint32_t          t = onnx_tensor(m, x);
    struct onnx_attrs as = {0};
    if (m->opset < 13 && axis + 1 < (int64_t)rank) {
        /* before opset 13: softmax over the flattened dimensions axis.. */
        int64_t inner = 1;
        for (uint32_t i = (uint32_t)axis; i < rank; i++)
            inner *= onnx_vshape(m, x)[i];
        int64_t sh[KILN_MAX_DIMS];
        memcpy(sh, onnx_vshape(m, x), sizeof(int64_t) * (size_t)axis);
        sh[axis] = inner;
        t = onnx_reshape(m, onnx_suffixed(m, onnx_out0(m), "flat"), t, (uint32_t)axis + 1, sh);
        onnx_at_int(m, &as, "axis", axis);
        t = onnx_lib1(m, op, onnx_suffixed(m, onnx_out0(m), "sm"), t, &as);
        return onnx_set_output(m, 0, onnx_reshape(m, onnx_out0(m), t, rank, onnx_vshape(m, x)));
    }
    onnx_at_int(m, &as, "axis", axis);
    return onnx_set_output(m, 0, onnx_lib1(m, op, onnx_out0(m), t, &as));
}
