/* ir/lib_nn.c -- neural-network library ops: pooling (max_pool2d, avg_pool2d, the global
 * pools), unfold (sliding-window extraction), softmax / log_softmax, batch_norm and layer_norm.
 *
 * Pooling follows PyTorch exactly, including ceil_mode (the last window must start inside the
 * input or its left padding) and avg_pool2d's divisor: with count_include_pad the window is
 * clipped to the padded input, without it to the input itself. Where that divisor is the same
 * for every output point the average is the sum times a reciprocal constant; elsewhere the
 * count is an index expression (min/max of the window ends) cast to the element type. Padding
 * reads as -inf for max pooling and 0 for the sums, via a select on the bounds of the index.
 * softmax and log_softmax subtract the maximum along the axis before exponentiating (OUT.max,
 * OUT.exp, OUT.sum, OUT). layer_norm computes the mean and the biased variance in two passes
 * (OUT.mean, OUT.var) rather than E[x^2] - E[x]^2, which cancels catastrophically. Reduced
 * tensors drop the reduced dimensions; their variables keep the names of the axes they came
 * from, so `y.max[i] max= x[i, j]`. */
#include "lib_impl.h"

#include <math.h>
#include <string.h>

static const char *const nchw[] = {"n", "c", "h", "w"};
static const char *const nhwc[] = {"n", "h", "w", "c"};

/* ---- pooling ---- */

struct pool {
    int64_t           k[2], s[2], p[2], d[2];
    bool              ceil;
    struct lib_layout l;
};

static enum kiln_status
get_pool(struct libcall *c, struct pool *pl, bool avg)
{
    int64_t pad[4];
    if (!lib_attr(c, "kernel"))
        return lib_fail(c, "missing attribute kernel");
    KILN_TRY(lib_get_pair(c, "kernel", 1, pl->k));
    KILN_TRY(lib_check_min(c, "kernel", pl->k, 2, 1));
    KILN_TRY(lib_get_pair(c, "stride", 1, pl->s));
    if (!lib_attr(c, "stride")) {
        pl->s[0] = pl->k[0];
        pl->s[1] = pl->k[1];
    }
    KILN_TRY(lib_check_min(c, "stride", pl->s, 2, 1));
    KILN_TRY(lib_get_pad(c, "padding", false, pad));
    pl->p[0] = pad[0];
    pl->p[1] = pad[1];
    KILN_TRY(lib_check_min(c, "padding", pl->p, 2, 0));
    pl->d[0] = pl->d[1] = 1;
    if (!avg) {
        KILN_TRY(lib_get_pair(c, "dilation", 1, pl->d));
        KILN_TRY(lib_check_min(c, "dilation", pl->d, 2, 1));
    }
    KILN_TRY(lib_get_bool(c, "ceil_mode", false, &pl->ceil));
    for (int i = 0; i < 2; i++)
        if (pl->p[i] > pl->k[i] / 2)
            return lib_fail_attr(c, lib_attr(c, "padding"),
                                 "padding %lld must be at most half the kernel size %lld",
                                 (long long)pl->p[i], (long long)pl->k[i]);
    KILN_TRY(lib_get_layout(c, &pl->l));
    return avg ? lib_want_float(c, 0) : lib_want_numeric(c, 0); /* max: integers too */
}

/* PyTorch's pooling output size; sets *ovf when it overflows. */
static int64_t
pool_out(bool *ovf, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil)
{
    int64_t e = lib_ck_add(ovf, in, lib_ck_mul(ovf, 2, p));
    e = lib_ck_sub(ovf, e, lib_ck_add(ovf, lib_ck_mul(ovf, d, k - 1), 1));
    e = lib_ck_add(ovf, e, ceil ? s - 1 : 0);
    int64_t o = kiln_scalar_floordiv(e, s) + 1;
    /* o - 1 <= e / s, so (o - 1) * s <= e does not overflow */
    if (ceil && o > 0 && (o - 1) * s >= lib_ck_add(ovf, in, p))
        o--;
    return o;
}

static enum kiln_status
pool_shape(struct libcall *c, const struct pool *pl, int64_t shape[4])
{
    const struct kiln_tensor *x = lib_in(c, 0);
    const struct lib_layout  *l = &pl->l;
    uint32_t                  sp[2] = {l->h, l->w};
    shape[l->n] = x->shape[l->n];
    shape[l->c] = x->shape[l->c];
    bool ovf = false;
    for (int i = 0; i < 2; i++)
        shape[sp[i]] =
            pool_out(&ovf, x->shape[sp[i]], pl->k[i], pl->s[i], pl->p[i], pl->d[i], pl->ceil);
    if (ovf)
        return lib_fail_overflow(
            c, (const char *const[]){"kernel", "stride", "padding", "dilation", NULL});
    if (shape[l->h] < 1 || shape[l->w] < 1)
        return lib_fail(c,
                        "input %s of %lldx%lld is too small for kernel %lldx%lld (padding "
                        "%lldx%lld, dilation %lldx%lld)",
                        lib_in_name(c, 0), (long long)x->shape[l->h], (long long)x->shape[l->w],
                        (long long)pl->k[0], (long long)pl->k[1], (long long)pl->p[0],
                        (long long)pl->p[1], (long long)pl->d[0], (long long)pl->d[1]);
    return KILN_OK;
}

/* The window body: x at the window position, or `fill` in the padding. */
static kiln_expr
pool_body(struct libcall *c, const struct pool *pl, const int64_t shape[4], struct lib_red *r,
          double fill)
{
    const struct kiln_tensor *x = lib_in(c, 0);
    kiln_ctx                 *ctx = c->ctx;
    kiln_expr                 ax[4], cond = kiln_bool(ctx, true);
    lib_axes(c, 4, ax);
    kiln_expr                rh = lib_rvar(c, r, pl->k[0], "rh");
    kiln_expr                rw = lib_rvar(c, r, pl->k[1], "rw");
    const struct lib_layout *l = &pl->l;
    kiln_expr                xi[4] = {ax[0], ax[1], ax[2], ax[3]};
    xi[l->h] = lib_window_idx(c, &cond, ax[l->h], rh, x->shape[l->h], shape[l->h], pl->k[0],
                              pl->s[0], pl->d[0], pl->p[0]);
    xi[l->w] = lib_window_idx(c, &cond, ax[l->w], rw, x->shape[l->w], shape[l->w], pl->k[1],
                              pl->s[1], pl->d[1], pl->p[1]);
    return kiln_select(ctx, cond, lib_load(c, 0, xi), lib_f(c, fill, (enum kiln_dtype)x->dtype));
}

enum kiln_status
kiln_lib_max_pool2d(struct libcall *c)
{
    static const char *const attrs[] = {"kernel",    "stride", "padding", "dilation",
                                        "ceil_mode", "layout", NULL};
    struct pool              pl;
    int64_t                  shape[4];
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(get_pool(c, &pl, false));
    KILN_TRY(pool_shape(c, &pl, shape));
    KILN_TRY(lib_begin(c));
    uint32_t t = lib_tensor(c, NULL, (enum kiln_dtype)lib_in(c, 0)->dtype, 4, shape);
    if (t == KILN_NONE)
        return c->ctx->err.status;
    struct lib_red r = {0};
    kiln_expr      body = pool_body(c, &pl, shape, &r, -INFINITY);
    return lib_define(c, t, KILN_REDUCE_MAX, &r, body, pl.l.nhwc ? nhwc : nchw);
}

/* Number of elements avg_pool2d divides by along one dimension, as an index expression of
 * output axis o; *constant tells whether it is the same for every o. */
static kiln_expr
pool_count(struct libcall *c, kiln_expr o, int64_t in, int64_t out, int64_t k, int64_t s, int64_t p,
           bool include_pad, bool *constant)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr start = kiln_sub(ctx, kiln_mul(ctx, o, lib_idx(c, s)), lib_idx(c, p));
    kiln_expr end = kiln_add(ctx, start, lib_idx(c, k));
    int64_t   last_end = (out - 1) * s - p + k;
    if (include_pad) {
        /* window clipped to the padded input [-p, in + p) */
        *constant = last_end <= in + p;
        if (*constant)
            return lib_idx(c, k);
        return kiln_sub(ctx, kiln_min(ctx, end, lib_idx(c, in + p)), start);
    }
    *constant = p == 0 && last_end <= in;
    if (*constant)
        return lib_idx(c, k);
    return kiln_sub(ctx, kiln_min(ctx, end, lib_idx(c, in)), kiln_max(ctx, start, lib_idx(c, 0)));
}

enum kiln_status
kiln_lib_avg_pool2d(struct libcall *c)
{
    static const char *const attrs[] = {
        "kernel", "stride", "padding", "ceil_mode", "count_include_pad", "layout", NULL};
    struct pool pl;
    int64_t     shape[4];
    bool        include_pad;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(get_pool(c, &pl, true));
    KILN_TRY(lib_get_bool(c, "count_include_pad", true, &include_pad));
    KILN_TRY(pool_shape(c, &pl, shape));
    KILN_TRY(lib_begin(c));
    kiln_ctx                 *ctx = c->ctx;
    const struct kiln_tensor *x = lib_in(c, 0);
    enum kiln_dtype           dt = (enum kiln_dtype)x->dtype;
    uint32_t                  sum = lib_tensor(c, "sum", dt, 4, shape);
    if (sum == KILN_NONE)
        return ctx->err.status;
    struct lib_red     r = {0};
    const char *const *names = pl.l.nhwc ? nhwc : nchw;
    uint32_t           sh = pl.l.h, sw = pl.l.w;
    KILN_TRY(lib_define(c, sum, KILN_REDUCE_SUM, &r, pool_body(c, &pl, shape, &r, 0), names));
    uint32_t t = lib_tensor(c, NULL, dt, 4, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    kiln_expr ax[4];
    bool      ch, cw;
    lib_axes(c, 4, ax);
    kiln_expr nh =
        pool_count(c, ax[sh], x->shape[sh], shape[sh], pl.k[0], pl.s[0], pl.p[0], include_pad, &ch);
    kiln_expr nw =
        pool_count(c, ax[sw], x->shape[sw], shape[sw], pl.k[1], pl.s[1], pl.p[1], include_pad, &cw);
    kiln_expr s = lib_load_t(c, sum, ax), body;
    if (ch && cw)
        body = kiln_mul(ctx, s, lib_f(c, 1.0 / ((double)pl.k[0] * (double)pl.k[1]), dt));
    else
        body = kiln_div(ctx, s, kiln_cast(ctx, dt, kiln_mul(ctx, nh, nw)));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, names);
}

static enum kiln_status
global_pool(struct libcall *c, bool avg)
{
    static const char *const attrs[] = {"layout", NULL};
    struct lib_layout        l;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_layout(c, &l));
    KILN_TRY(lib_want_float(c, 0));
    const struct kiln_tensor *x = lib_in(c, 0);
    enum kiln_dtype           dt = (enum kiln_dtype)x->dtype;
    const char *const        *names = l.nhwc ? nhwc : nchw;
    int64_t                   shape[4] = {x->shape[0], 1, 1, 1};
    shape[l.c] = x->shape[l.c];
    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    uint32_t  acc = lib_tensor(c, avg ? "sum" : NULL, dt, 4, shape);
    if (acc == KILN_NONE)
        return ctx->err.status;
    kiln_expr      ax[4];
    struct lib_red r = {0};
    lib_axes(c, 4, ax);
    kiln_expr xi[4] = {ax[0], ax[1], ax[2], ax[3]};
    xi[l.h] = lib_rvar(c, &r, x->shape[l.h], "rh");
    xi[l.w] = lib_rvar(c, &r, x->shape[l.w], "rw");
    KILN_TRY(
        lib_define(c, acc, avg ? KILN_REDUCE_SUM : KILN_REDUCE_MAX, &r, lib_load(c, 0, xi), names));
    if (!avg)
        return KILN_OK;
    uint32_t t = lib_tensor(c, NULL, dt, 4, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    kiln_expr body = kiln_mul(ctx, lib_load_t(c, acc, ax),
                              lib_f(c, 1.0 / (double)(x->shape[l.h] * x->shape[l.w]), dt));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, names);
}

enum kiln_status
kiln_lib_global_avg_pool2d(struct libcall *c)
{
    return global_pool(c, true);
}

enum kiln_status
kiln_lib_global_max_pool2d(struct libcall *c)
{
    return global_pool(c, false);
}

/* ---- unfold ---- */

enum kiln_status
kiln_lib_unfold(struct libcall *c)
{
    static const char *const attrs[] = {"kernel", "stride", "padding", "dilation", NULL};
    struct lib_window        wd;
    int64_t                  k[2];
    KILN_TRY(lib_allow(c, attrs));
    if (!lib_attr(c, "kernel"))
        return lib_fail(c, "missing attribute kernel");
    KILN_TRY(lib_get_pair(c, "kernel", 1, k));
    KILN_TRY(lib_check_min(c, "kernel", k, 2, 1));
    KILN_TRY(lib_get_window(c, &wd, false));
    KILN_TRY(lib_want_rank(c, 0, 4, "input", "[N, C, H, W]"));
    const struct kiln_tensor *x = lib_in(c, 0);
    int64_t                   H = x->shape[2], W = x->shape[3];
    bool                      ovf = false;
    int64_t                   ph = lib_ck_add(&ovf, lib_ck_add(&ovf, H, wd.pad[0]), wd.pad[2]);
    int64_t                   pw = lib_ck_add(&ovf, lib_ck_add(&ovf, W, wd.pad[1]), wd.pad[3]);
    int64_t                   eh = lib_ck_add(&ovf, lib_ck_mul(&ovf, wd.dil[0], k[0] - 1), 1);
    int64_t                   ew = lib_ck_add(&ovf, lib_ck_mul(&ovf, wd.dil[1], k[1] - 1), 1);
    if (ovf)
        return lib_fail_overflow(c, lib_window_attrs);
    if (eh > ph || ew > pw)
        return lib_fail(c,
                        "dilated kernel %lldx%lld does not fit input %s of %lldx%lld padded to "
                        "%lldx%lld",
                        (long long)eh, (long long)ew, lib_in_name(c, 0), (long long)H, (long long)W,
                        (long long)ph, (long long)pw);
    int64_t shape[6] = {x->shape[0],
                        x->shape[1],
                        k[0],
                        k[1],
                        (ph - eh) / wd.stride[0] + 1,
                        (pw - ew) / wd.stride[1] + 1};
    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    uint32_t  t = lib_tensor(c, NULL, (enum kiln_dtype)x->dtype, 6, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    static const char *const names[] = {"n", "c", "kh", "kw", "h", "w"};
    kiln_expr                ax[6], cond = kiln_bool(ctx, true);
    lib_axes(c, 6, ax);
    kiln_expr ih = lib_window_idx(c, &cond, ax[4], ax[2], H, shape[4], k[0], wd.stride[0],
                                  wd.dil[0], wd.pad[0]);
    kiln_expr iw = lib_window_idx(c, &cond, ax[5], ax[3], W, shape[5], k[1], wd.stride[1],
                                  wd.dil[1], wd.pad[1]);
    kiln_expr xi[4] = {ax[0], ax[1], ih, iw};
    kiln_expr body =
        kiln_select(ctx, cond, lib_load(c, 0, xi), lib_f(c, 0, (enum kiln_dtype)x->dtype));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, names);
}

/* ---- softmax, log_softmax ---- */

/* Index of a tensor reduced over `axis` (its dimension removed), read at axes ax. */
static void
drop_axis(const kiln_expr *ax, uint32_t n, uint32_t axis, kiln_expr *out)
{
    for (uint32_t i = 0, k = 0; i < n; i++)
        if (i != axis)
            out[k++] = ax[i];
}

/* A reduction over one axis of the input: the reduced shape and the display names. */
struct axis_red {
    uint32_t    axis, n;
    int64_t     rshape[KILN_MAX_DIMS]; /* shape without the axis */
    const char *names[KILN_MAX_DIMS], *rnames[KILN_MAX_DIMS];
};

static enum kiln_status
softmax_common(struct libcall *c, struct axis_red *ar)
{
    static const char *const attrs[] = {"axis", NULL};
    int64_t                  axis;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "axis", -1, &axis));
    KILN_TRY(lib_want_float(c, 0));
    const struct kiln_tensor *x = lib_in(c, 0);
    if (x->ndim == 0)
        return lib_fail(c, "input %s is a scalar; it needs at least 1 dimension",
                        lib_in_name(c, 0));
    KILN_TRY(lib_axis(c, "axis", axis, x->ndim, false, &ar->axis));
    ar->n = x->ndim;
    for (uint32_t i = 0, k = 0; i < x->ndim; i++)
        if (i != ar->axis)
            ar->rshape[k++] = x->shape[i];
    lib_generic_names(x->ndim, ar->names, NULL);
    for (uint32_t i = 0, k = 0; i < x->ndim; i++)
        if (i != ar->axis)
            ar->rnames[k++] = ar->names[i];
    return lib_begin(c);
}

/* OUT.suffix = reduction over the axis of src (a tensor of x's shape), of src itself or, with
 * exp_minus_max, of exp(src - max). */
static uint32_t
reduce_axis(struct libcall *c, const struct axis_red *ar, const char *suffix, enum kiln_reduce red,
            uint32_t src, bool exp_minus_max, uint32_t max)
{
    kiln_ctx                 *ctx = c->ctx;
    const struct kiln_tensor *x = lib_in(c, 0);
    uint32_t t = lib_tensor(c, suffix, (enum kiln_dtype)x->dtype, ar->n - 1, ar->rshape);
    if (t == KILN_NONE)
        return KILN_NONE;
    kiln_expr      ax[KILN_MAX_DIMS], si[KILN_MAX_DIMS];
    struct lib_red r = {0};
    lib_axes(c, ar->n - 1, ax);
    kiln_expr rv = lib_rvar(c, &r, x->shape[ar->axis], ar->names[ar->axis]);
    for (uint32_t i = 0, k = 0; i < ar->n; i++)
        si[i] = i == ar->axis ? rv : ax[k++];
    kiln_expr v = lib_load_t(c, src, si);
    if (exp_minus_max)
        v = kiln_unary(ctx, KILN_OP_EXP, kiln_sub(ctx, v, lib_load_t(c, max, ax)));
    if (lib_define(c, t, red, &r, v, ar->rnames) != KILN_OK)
        return KILN_NONE;
    return t;
}

enum kiln_status
kiln_lib_softmax(struct libcall *c)
{
    struct axis_red ar;
    KILN_TRY(softmax_common(c, &ar));
    kiln_ctx                 *ctx = c->ctx;
    const struct kiln_tensor *x = lib_in(c, 0);
    enum kiln_dtype           dt = (enum kiln_dtype)x->dtype;
    uint32_t                  max = reduce_axis(c, &ar, "max", KILN_REDUCE_MAX, c->in[0], false, 0);
    if (max == KILN_NONE)
        return ctx->err.status;
    uint32_t e = lib_tensor(c, "exp", dt, x->ndim, x->shape);
    if (e == KILN_NONE)
        return ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS], ri[KILN_MAX_DIMS];
    lib_axes(c, x->ndim, ax);
    drop_axis(ax, x->ndim, ar.axis, ri);
    kiln_expr ev =
        kiln_unary(ctx, KILN_OP_EXP, kiln_sub(ctx, lib_load(c, 0, ax), lib_load_t(c, max, ri)));
    KILN_TRY(lib_define(c, e, KILN_REDUCE_NONE, NULL, ev, ar.names));
    uint32_t sum = reduce_axis(c, &ar, "sum", KILN_REDUCE_SUM, e, false, 0);
    if (sum == KILN_NONE)
        return ctx->err.status;
    uint32_t t = lib_tensor(c, NULL, dt, x->ndim, x->shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    kiln_expr body = kiln_div(ctx, lib_load_t(c, e, ax), lib_load_t(c, sum, ri));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, ar.names);
}

enum kiln_status
kiln_lib_log_softmax(struct libcall *c)
{
    struct axis_red ar;
    KILN_TRY(softmax_common(c, &ar));
    kiln_ctx                 *ctx = c->ctx;
    const struct kiln_tensor *x = lib_in(c, 0);
    uint32_t                  max = reduce_axis(c, &ar, "max", KILN_REDUCE_MAX, c->in[0], false, 0);
    if (max == KILN_NONE)
        return ctx->err.status;
    uint32_t sum = reduce_axis(c, &ar, "sum", KILN_REDUCE_SUM, c->in[0], true, max);
    if (sum == KILN_NONE)
        return ctx->err.status;
    uint32_t t = lib_tensor(c, NULL, (enum kiln_dtype)x->dtype, x->ndim, x->shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS], ri[KILN_MAX_DIMS];
    lib_axes(c, x->ndim, ax);
    drop_axis(ax, x->ndim, ar.axis, ri);
    kiln_expr shifted = kiln_sub(ctx, lib_load(c, 0, ax), lib_load_t(c, max, ri));
    kiln_expr body = kiln_sub(ctx, shifted, kiln_unary(ctx, KILN_OP_LOG, lib_load_t(c, sum, ri)));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, ar.names);
}

/* ---- normalisation ---- */

static enum kiln_status
get_eps(struct libcall *c, double *eps)
{
    KILN_TRY(lib_get_float(c, "eps", 1e-5, eps));
    if (!(*eps >= 0))
        return lib_fail_attr(c, lib_attr(c, "eps"), "eps %g must not be negative", *eps);
    return KILN_OK;
}

enum kiln_status
kiln_lib_batch_norm(struct libcall *c)
{
    static const char *const attrs[] = {"eps", "axis", NULL};
    static const char *const role[] = {"input", "gamma", "beta", "mean", "var"};
    double                   eps;
    int64_t                  axis_attr;
    uint32_t                 axis;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(get_eps(c, &eps));
    KILN_TRY(lib_get_int(c, "axis", 1, &axis_attr));
    const struct kiln_tensor *x = lib_in(c, 0);
    if (x->ndim < 2) {
        char s[LIB_SHAPE_BUF];
        return lib_fail(c, "input %s must have at least 2 dimensions [N, C, ...], got %s",
                        lib_in_name(c, 0), lib_shape_str(x->shape, x->ndim, s, sizeof s));
    }
    KILN_TRY(lib_axis(c, "axis", axis_attr, x->ndim, false, &axis));
    KILN_TRY(lib_same_dtype(c));
    KILN_TRY(lib_want_float(c, 0));
    for (uint32_t i = 1; i < 5; i++) {
        const struct kiln_tensor *p = lib_in(c, i);
        if (p->ndim != 1 || p->shape[0] != x->shape[axis]) {
            char s[LIB_SHAPE_BUF];
            return lib_fail(c, "%s %s has shape %s but input %s has %lld channels%s", role[i],
                            lib_in_name(c, i), lib_shape_str(p->shape, p->ndim, s, sizeof s),
                            lib_in_name(c, 0), (long long)x->shape[axis],
                            axis == 1 ? "" : " along its axis");
        }
    }
    KILN_TRY(lib_begin(c));
    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)x->dtype;
    uint32_t        t = lib_tensor(c, NULL, dt, x->ndim, x->shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    /* axis names: n, c, h, w for NCHW (n, h, w, c for channels-last, axis 3), else generic */
    const char *names[KILN_MAX_DIMS] = {"n", "c"};
    kiln_expr   ax[KILN_MAX_DIMS];
    if (x->ndim == 4 && axis == 1) {
        names[2] = "h";
        names[3] = "w";
    } else if (x->ndim == 4 && axis == 3) {
        names[1] = "h";
        names[2] = "w";
        names[3] = "c";
    } else if (axis == 1) {
        lib_generic_names(x->ndim - 2, names + 2, NULL);
    } else {
        lib_generic_names(x->ndim, names, NULL);
    }
    lib_axes(c, x->ndim, ax);
    kiln_expr ch = ax[axis];
    kiln_expr norm = kiln_mul(
        ctx, kiln_sub(ctx, lib_load(c, 0, ax), lib_load(c, 3, &ch)),
        kiln_unary(ctx, KILN_OP_RSQRT, kiln_add(ctx, lib_load(c, 4, &ch), lib_f(c, eps, dt))));
    kiln_expr body = kiln_add(ctx, kiln_mul(ctx, norm, lib_load(c, 1, &ch)), lib_load(c, 2, &ch));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, names);
}

enum kiln_status
kiln_lib_layer_norm(struct libcall *c)
{
    static const char *const attrs[] = {"axis", "eps", NULL};
    static const char *const role[] = {"input", "gamma", "beta"};
    double                   eps;
    int64_t                  axis_attr;
    uint32_t                 axis;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "axis", -1, &axis_attr));
    KILN_TRY(get_eps(c, &eps));
    const struct kiln_tensor *x = lib_in(c, 0);
    if (x->ndim == 0)
        return lib_fail(c, "input %s is a scalar; it needs at least 1 dimension",
                        lib_in_name(c, 0));
    KILN_TRY(lib_axis(c, "axis", axis_attr, x->ndim, false, &axis));
    KILN_TRY(lib_same_dtype(c));
    KILN_TRY(lib_want_float(c, 0));
    uint32_t       nt = x->ndim - axis;
    const int64_t *tail = &x->shape[axis];
    for (uint32_t i = 1; i < c->nin; i++) {
        const struct kiln_tensor *p = lib_in(c, i);
        if (p->ndim != nt || memcmp(p->shape, tail, sizeof(int64_t) * nt)) {
            char s1[LIB_SHAPE_BUF], s2[LIB_SHAPE_BUF];
            return lib_fail(c, "%s %s has shape %s but the normalised shape of %s is %s", role[i],
                            lib_in_name(c, i), lib_shape_str(p->shape, p->ndim, s1, sizeof s1),
                            lib_in_name(c, 0), lib_shape_str(tail, nt, s2, sizeof s2));
        }
    }
    KILN_TRY(lib_begin(c));
    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)x->dtype;
    int64_t         count = 1;
    for (uint32_t i = 0; i < nt; i++)
        count *= tail[i];
    kiln_expr   inv = lib_f(c, 1.0 / (double)count, dt);
    const char *names[KILN_MAX_DIMS];
    kiln_expr   ax[KILN_MAX_DIMS], xi[KILN_MAX_DIMS];
    lib_generic_names(x->ndim, names, NULL);
    lib_axes(c, x->ndim, ax);

    /* OUT.mean[lead] += x[lead, r...] / count; OUT.var likewise over (x - mean)^2 */
    uint32_t st[2];
    for (int pass = 0; pass < 2; pass++) {
        st[pass] = lib_tensor(c, pass ? "var" : "mean", dt, axis, x->shape);
        if (st[pass] == KILN_NONE)
            return ctx->err.status;
        struct lib_red r = {0};
        for (uint32_t i = 0; i < x->ndim; i++)
            xi[i] = i < axis ? ax[i] : lib_rvar(c, &r, x->shape[i], names[i]);
        kiln_expr v = lib_load(c, 0, xi);
        if (pass) {
            kiln_expr d = kiln_sub(ctx, v, lib_load_t(c, st[0], ax));
            v = kiln_mul(ctx, d, d);
        }
        KILN_TRY(lib_define(c, st[pass], KILN_REDUCE_SUM, &r, kiln_mul(ctx, v, inv), names));
    }
    uint32_t t = lib_tensor(c, NULL, dt, x->ndim, x->shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    kiln_expr body = kiln_mul(
        ctx, kiln_sub(ctx, lib_load(c, 0, ax), lib_load_t(c, st[0], ax)),
        kiln_unary(ctx, KILN_OP_RSQRT, kiln_add(ctx, lib_load_t(c, st[1], ax), lib_f(c, eps, dt))));
    if (c->nin > 1)
        body = kiln_mul(ctx, body, lib_load(c, 1, &ax[axis]));
    if (c->nin > 2)
        body = kiln_add(ctx, body, lib_load(c, 2, &ax[axis]));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, names);
}
