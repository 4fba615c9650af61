/* ir/lib_reduce.c -- reductions over axes: reduce_sum, reduce_max, reduce_min, reduce_mean,
 * reduce_prod, argmax, argmin and cumsum.
 *
 * reduce_sum / max / min are one reduction each, with a reduction variable per reduced axis
 * (extent-1 axes need none). reduce_mean is the sum then a multiplication by 1/n (OUT.sum,
 * OUT). The IR has no product reduction, so reduce_prod multiplies the elements of one axis
 * at a time as a balanced tree of products written out in the body (OUT.prodK for the axes
 * but the last): exact, and the same on every backend, but its size grows with the extent,
 * which is therefore limited to LIB_PROD_MAX.
 *
 * argmax / argmin first reduce the axis to its maximum (OUT.max / OUT.min), then take the
 * smallest (largest with select_last_index) index whose element equals it: a MIN (MAX)
 * reduction of select(x == m, j, n - 1) (of select(..., j, 0)). The default n - 1 (0) keeps
 * the result in [0, n) whatever the data; it is never the answer unless it is the right one.
 * A NaN is the maximum and the minimum (the reductions propagate it), and an element matches
 * it when it is itself NaN, so the first NaN wins as in NumPy.
 *
 * cumsum is out[.., i, ..] = sum over j of select(j <= i, x[.., j, ..], 0) (j < i exclusive,
 * j >= i or j > i reversed): quadratic in the extent, but one reduction that every backend
 * and the scheduler already handle. */
#include "lib_impl.h"

#include <stdio.h>
#include <string.h>

/* The longest axis reduce_prod multiplies out. */
#define LIB_PROD_MAX 256

/* Which axes of input 0 a reduction removes, and the output's shape. */
struct red_axes {
    uint32_t    rank;
    bool        red[KILN_MAX_DIMS];
    bool        keep;
    uint32_t    nout;
    int64_t     oshape[KILN_MAX_DIMS];
    int64_t     n;                     /* elements reduced into each output element */
    const char *names[KILN_MAX_DIMS];  /* per input axis */
    const char *onames[KILN_MAX_DIMS]; /* per output axis */
};

static void
red_finish(struct libcall *c, struct red_axes *ra)
{
    const struct kiln_tensor *x = lib_in(c, 0);
    lib_generic_names(ra->rank, ra->names, NULL);
    ra->nout = 0;
    ra->n = 1;
    for (uint32_t i = 0; i < ra->rank; i++) {
        if (ra->red[i])
            ra->n *= x->shape[i];
        if (!ra->red[i] || ra->keep) {
            ra->onames[ra->nout] = ra->names[i];
            ra->oshape[ra->nout++] = ra->red[i] ? 1 : x->shape[i];
        }
    }
}

/* Reads axes (absent: every axis; an empty list: none, as NumPy's axis=()) and keepdims. */
static enum kiln_status
get_red_axes(struct libcall *c, struct red_axes *ra)
{
    static const char *const attrs[] = {"axes", "keepdims", NULL};
    const int64_t           *v;
    uint32_t                 n;
    bool                     given;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_list(c, "axes", &v, &n, &given));
    KILN_TRY(lib_get_bool(c, "keepdims", true, &ra->keep));
    const struct kiln_tensor *x = lib_in(c, 0);
    memset(ra->red, 0, sizeof ra->red);
    ra->rank = x->ndim;
    for (uint32_t i = 0; i < (given ? n : x->ndim); i++) {
        uint32_t a = i;
        if (given)
            KILN_TRY(lib_axis(c, "axes", v[i], x->ndim, false, &a));
        if (ra->red[a])
            return lib_fail_attr(c, lib_attr(c, "axes"), "axis %lld is listed twice",
                                 (long long)v[i]);
        ra->red[a] = true;
    }
    red_finish(c, ra);
    return KILN_OK;
}

/* The index of an input-shaped tensor read at output axes ax: reduced axes read rv[i] (or,
 * when rv is NULL, 0), the others their output axis. */
static void
red_in_idx(const struct red_axes *ra, struct libcall *c, const kiln_expr *ax, const kiln_expr *rv,
           kiln_expr *idx)
{
    for (uint32_t i = 0, k = 0; i < ra->rank; i++) {
        if (ra->red[i])
            idx[i] = rv ? rv[i] : lib_idx(c, 0);
        else
            idx[i] = ax[k];
        if (!ra->red[i] || ra->keep)
            k++;
    }
}

/* OUT.suffix (or OUT) = the reduction `kind` of input 0 over the reduced axes. */
static uint32_t
red_tensor(struct libcall *c, const struct red_axes *ra, const char *suffix, enum kiln_reduce kind)
{
    const struct kiln_tensor *x = lib_in(c, 0);
    uint32_t       t = lib_tensor(c, suffix, (enum kiln_dtype)x->dtype, ra->nout, ra->oshape);
    kiln_expr      ax[KILN_MAX_DIMS], rv[KILN_MAX_DIMS], idx[KILN_MAX_DIMS];
    struct lib_red r = {0};
    if (t == KILN_NONE)
        return KILN_NONE;
    lib_axes(c, ra->nout, ax);
    for (uint32_t i = 0; i < ra->rank; i++)
        if (ra->red[i])
            rv[i] = lib_rvar(c, &r, x->shape[i], ra->names[i]);
    red_in_idx(ra, c, ax, rv, idx);
    if (lib_define(c, t, kind, &r, lib_load(c, 0, idx), ra->onames) != KILN_OK)
        return KILN_NONE;
    return t;
}

static enum kiln_status
reduce_simple(struct libcall *c, enum kiln_reduce kind)
{
    struct red_axes ra;
    KILN_TRY(get_red_axes(c, &ra));
    KILN_TRY(lib_want_numeric(c, 0));
    KILN_TRY(lib_begin(c));
    return red_tensor(c, &ra, NULL, kind) == KILN_NONE ? c->ctx->err.status : KILN_OK;
}

enum kiln_status
kiln_lib_reduce_sum(struct libcall *c)
{
    return reduce_simple(c, KILN_REDUCE_SUM);
}

enum kiln_status
kiln_lib_reduce_max(struct libcall *c)
{
    return reduce_simple(c, KILN_REDUCE_MAX);
}

enum kiln_status
kiln_lib_reduce_min(struct libcall *c)
{
    return reduce_simple(c, KILN_REDUCE_MIN);
}

enum kiln_status
kiln_lib_reduce_mean(struct libcall *c)
{
    struct red_axes ra;
    KILN_TRY(get_red_axes(c, &ra));
    KILN_TRY(lib_want_float(c, 0));
    KILN_TRY(lib_begin(c));
    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)lib_in(c, 0)->dtype;
    uint32_t        sum = red_tensor(c, &ra, "sum", KILN_REDUCE_SUM);
    uint32_t        t = lib_tensor(c, NULL, dt, ra.nout, ra.oshape);
    if (sum == KILN_NONE || t == KILN_NONE)
        return ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS];
    lib_axes(c, ra.nout, ax);
    kiln_expr body = kiln_mul(ctx, lib_load_t(c, sum, ax), lib_f(c, 1.0 / (double)ra.n, dt));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, ra.onames);
}

/* ---- reduce_prod ---- */

/* The product of src at idx with idx[axis] = lo..hi-1, as a balanced tree (depth log2). */
static kiln_expr
prod_tree(struct libcall *c, uint32_t src, kiln_expr *idx, uint32_t axis, int64_t lo, int64_t hi)
{
    if (hi - lo == 1) {
        idx[axis] = lib_idx(c, lo);
        return lib_load_t(c, src, idx);
    }
    int64_t   mid = lo + (hi - lo) / 2;
    kiln_expr a = prod_tree(c, src, idx, axis, lo, mid);
    return kiln_mul(c->ctx, a, prod_tree(c, src, idx, axis, mid, hi));
}

enum kiln_status
kiln_lib_reduce_prod(struct libcall *c)
{
    struct red_axes ra;
    KILN_TRY(get_red_axes(c, &ra));
    KILN_TRY(lib_want_numeric(c, 0));
    const struct kiln_tensor *x = lib_in(c, 0);
    for (uint32_t i = 0; i < ra.rank; i++)
        if (ra.red[i] && x->shape[i] > LIB_PROD_MAX)
            return lib_fail(c,
                            "axis %u of input %s has %lld elements; at most %d are supported (the "
                            "product is written out)",
                            i, lib_in_name(c, 0), (long long)x->shape[i], LIB_PROD_MAX);
    KILN_TRY(lib_begin(c));
    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)x->dtype;
    int64_t         shape[KILN_MAX_DIMS];
    uint32_t        src = c->in[0], last = KILN_NONE;
    memcpy(shape, x->shape, sizeof shape);
    for (uint32_t i = 0; i < ra.rank; i++)
        if (ra.red[i])
            last = i;
    if (last == KILN_NONE) { /* nothing reduced: a copy */
        uint32_t  t = lib_tensor(c, NULL, dt, ra.nout, ra.oshape);
        kiln_expr ax[KILN_MAX_DIMS];
        if (t == KILN_NONE)
            return ctx->err.status;
        lib_axes(c, ra.nout, ax);
        return lib_define(c, t, KILN_REDUCE_NONE, NULL, lib_load(c, 0, ax), ra.onames);
    }
    /* one axis at a time; intermediates keep the reduced axes as extent 1 */
    for (uint32_t a = 0; a <= last; a++) {
        if (!ra.red[a])
            continue;
        bool     final = a == last;
        int64_t  n = shape[a];
        char     suffix[16];
        uint32_t t;
        shape[a] = 1;
        snprintf(suffix, sizeof suffix, "prod%u", a);
        t = final ? lib_tensor(c, NULL, dt, ra.nout, ra.oshape)
                  : lib_tensor(c, suffix, dt, ra.rank, shape);
        if (t == KILN_NONE)
            return ctx->err.status;
        kiln_expr ax[KILN_MAX_DIMS], idx[KILN_MAX_DIMS];
        lib_axes(c, final ? ra.nout : ra.rank, ax);
        if (final) /* the axes reduced before are extent 1 in src: index 0 */
            red_in_idx(&ra, c, ax, NULL, idx);
        else
            memcpy(idx, ax, sizeof(kiln_expr) * ra.rank);
        kiln_expr body = prod_tree(c, src, idx, a, 0, n);
        KILN_TRY(lib_define(c, t, KILN_REDUCE_NONE, NULL, body, final ? ra.onames : ra.names));
        src = t;
    }
    return KILN_OK;
}

/* ---- argmax, argmin ---- */

static enum kiln_status
arg_reduce(struct libcall *c, bool is_max)
{
    static const char *const attrs[] = {"axis", "keepdims", "select_last_index", NULL};
    int64_t                  axis;
    bool                     last;
    struct red_axes          ra;
    uint32_t                 a;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "axis", 0, &axis));
    KILN_TRY(lib_get_bool(c, "keepdims", true, &ra.keep));
    KILN_TRY(lib_get_bool(c, "select_last_index", false, &last));
    KILN_TRY(lib_want_numeric(c, 0));
    const struct kiln_tensor *x = lib_in(c, 0);
    if (x->ndim == 0)
        return lib_fail(c, "input %s is a scalar; it needs at least 1 dimension",
                        lib_in_name(c, 0));
    KILN_TRY(lib_axis(c, "axis", axis, x->ndim, false, &a));
    memset(ra.red, 0, sizeof ra.red);
    ra.rank = x->ndim;
    ra.red[a] = true;
    red_finish(c, &ra);
    KILN_TRY(lib_begin(c));

    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)x->dtype;
    int64_t         n = x->shape[a];
    /* OUT.max: the extreme along the axis, the axis dropped */
    struct red_axes rm = ra;
    rm.keep = false;
    red_finish(c, &rm);
    uint32_t m =
        red_tensor(c, &rm, is_max ? "max" : "min", is_max ? KILN_REDUCE_MAX : KILN_REDUCE_MIN);
    uint32_t t = lib_tensor(c, NULL, KILN_DTYPE_I64, ra.nout, ra.oshape);
    if (m == KILN_NONE || t == KILN_NONE)
        return ctx->err.status;
    kiln_expr      ax[KILN_MAX_DIMS], rv[KILN_MAX_DIMS], xi[KILN_MAX_DIMS], mi[KILN_MAX_DIMS];
    struct lib_red r = {0};
    lib_axes(c, ra.nout, ax);
    rv[a] = lib_rvar(c, &r, n, ra.names[a]);
    red_in_idx(&ra, c, ax, rv, xi);
    for (uint32_t i = 0, k = 0; i < ra.rank; i++)
        if (i != a)
            mi[k++] = xi[i];
    kiln_expr v = lib_load(c, 0, xi);
    kiln_expr hit = kiln_binary(ctx, KILN_OP_EQ, v, lib_load_t(c, m, mi));
    if (dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64 || dt == KILN_DTYPE_F16
        || dt == KILN_DTYPE_BF16)
        hit = kiln_binary(ctx, KILN_OP_OR, hit, kiln_binary(ctx, KILN_OP_NE, v, v));
    kiln_expr body = kiln_select(ctx, hit, rv[a], lib_idx(c, last ? 0 : n - 1));
    return lib_define(c, t, last ? KILN_REDUCE_MAX : KILN_REDUCE_MIN, &r, body, ra.onames);
}

enum kiln_status
kiln_lib_argmax(struct libcall *c)
{
    return arg_reduce(c, true);
}

enum kiln_status
kiln_lib_argmin(struct libcall *c)
{
    return arg_reduce(c, false);
}

/* ---- cumsum ---- */

enum kiln_status
kiln_lib_cumsum(struct libcall *c)
{
    static const char *const attrs[] = {"axis", "exclusive", "reverse", NULL};
    int64_t                  axis;
    bool                     excl, rev;
    uint32_t                 a;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "axis", 0, &axis));
    KILN_TRY(lib_get_bool(c, "exclusive", false, &excl));
    KILN_TRY(lib_get_bool(c, "reverse", false, &rev));
    KILN_TRY(lib_want_numeric(c, 0));
    const struct kiln_tensor *x = lib_in(c, 0);
    if (x->ndim == 0)
        return lib_fail(c, "input %s is a scalar; it needs at least 1 dimension",
                        lib_in_name(c, 0));
    KILN_TRY(lib_axis(c, "axis", axis, x->ndim, false, &a));
    KILN_TRY(lib_begin(c));
    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)x->dtype;
    uint32_t        t = lib_tensor(c, NULL, dt, x->ndim, x->shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    const char    *names[KILN_MAX_DIMS];
    kiln_expr      ax[KILN_MAX_DIMS], xi[KILN_MAX_DIMS];
    struct lib_red r = {0};
    lib_generic_names(x->ndim, names, "j");
    lib_axes(c, x->ndim, ax);
    kiln_expr j = lib_rvar(c, &r, x->shape[a], "j");
    memcpy(xi, ax, sizeof(kiln_expr) * x->ndim);
    xi[a] = j;
    /* j <= i, j < i (exclusive), i <= j (reverse), i < j (both) */
    kiln_expr lo = rev ? ax[a] : j, hi = rev ? j : ax[a];
    kiln_expr in = kiln_binary(ctx, excl ? KILN_OP_LT : KILN_OP_LE, lo, hi);
    kiln_expr body = kiln_select(ctx, in, lib_load(c, 0, xi), lib_f(c, 0, dt));
    return lib_define(c, t, KILN_REDUCE_SUM, &r, body, names);
}
