/* ir/lib_scatter.c -- scatter_elements and scatter_nd, written as gathers over the updates so
 * that they stay compute definitions with static bounds.
 *
 * scatter_elements(x, indices, updates) writes updates[u] to x at u with u[axis] replaced by
 * indices[u] (ONNX ScatterElements, torch.scatter). Read from the output's side: element p of
 * the output is hit by update j (along the axis) when p lies inside the indices' shape in every
 * other dimension and indices[p with axis = j] (a negative index counting from the end) equals
 * p[axis]. Without a reduction the output is the last hitting update, else x[p]: OUT.last is the
 * largest hitting j (a max reduction of select(hit, j, -1)), and OUT reads updates at it. With
 * reduction "add" OUT is x[p] plus the sum of the hitting updates, with "max" / "min" the
 * extreme of x[p] and the hitting updates: one reduction over j each. "mul" has no reduction
 * kind in the IR: x[p] times the product of select(hit, update, 1) over j, written out as a
 * balanced tree (at most SCATTER_MUL_MAX factors, as reduce_prod). scatter_nd is the same over
 * index rows q of indices [Q, k]: row q hits p when each of its k components names p[0..k).
 * An index outside [-n, n) hits nothing, so nothing is read or written out of bounds. */
#include "lib_impl.h"

#include <string.h>

struct scatter {
    uint32_t axis, r;
    int64_t  n, m; /* the axis' extent in x, in indices */
};

/* The most updates a "mul" reduction multiplies: the IR has no product reduction, so the
 * product of the hitting updates is written out, as reduce_prod does. */
#define SCATTER_MUL_MAX 256

/* A factor of the "mul" reduction: the update of position j where it hits, else 1. */
typedef kiln_expr (*mul_factor)(struct libcall *c, const void *ud, const kiln_expr *ax, int64_t j);

/* The product of factor(j) for j in lo..hi-1, as a balanced tree (depth log2). */
static kiln_expr
mul_tree(struct libcall *c, mul_factor f, const void *ud, const kiln_expr *ax, int64_t lo,
         int64_t hi)
{
    if (hi - lo == 1)
        return f(c, ud, ax, lo);
    int64_t mid = lo + (hi - lo) / 2;
    return kiln_mul(c->ctx, mul_tree(c, f, ud, ax, lo, mid), mul_tree(c, f, ud, ax, mid, hi));
}

/* Parses `reduction` into *kind, or *mul for "mul" (no reduction kind: written out). */
/* What scatter_elements and scatter_nd check alike: input x (0) not a scalar, integer indices
 * (1), updates (2) of x's dtype, a numeric x for a reduction; sx, si and su get the three
 * shapes as text for the callers' own messages. */
static enum kiln_status
scatter_check(struct libcall *c, enum kiln_reduce kind, bool mul, char *sx, char *si, char *su)
{
    const struct kiln_tensor *x = lib_in(c, 0), *ix = lib_in(c, 1), *up = lib_in(c, 2);
    if (x->ndim == 0)
        return lib_fail(c, "input %s is a scalar; it needs at least 1 dimension",
                        lib_in_name(c, 0));
    enum kiln_dtype idt = (enum kiln_dtype)ix->dtype;
    if (!kiln_dtype_is_int(idt))
        return lib_fail(c, "indices %s have dtype %s; an integer dtype (i8, i32, i64) is required",
                        lib_in_name(c, 1), kiln_dtype_name(idt));
    if (up->dtype != x->dtype)
        return lib_fail(c, "updates %s have dtype %s; input %s has %s", lib_in_name(c, 2),
                        kiln_dtype_name((enum kiln_dtype)up->dtype), lib_in_name(c, 0),
                        kiln_dtype_name((enum kiln_dtype)x->dtype));
    if (kind != KILN_REDUCE_NONE || mul)
        KILN_TRY(lib_want_numeric(c, 0));
    lib_shape_str(x->shape, x->ndim, sx, LIB_SHAPE_BUF);
    lib_shape_str(ix->shape, ix->ndim, si, LIB_SHAPE_BUF);
    lib_shape_str(up->shape, up->ndim, su, LIB_SHAPE_BUF);
    return KILN_OK;
}

/* Reduction "mul": x times the n updates' factors (f: the update where it hits, else 1), the
 * product written out (the IR has no product reduction). */
static enum kiln_status
scatter_mul(struct libcall *c, mul_factor f, const void *ud, int64_t n)
{
    const struct kiln_tensor *x = lib_in(c, 0);
    uint32_t                  t = lib_tensor(c, NULL, (enum kiln_dtype)x->dtype, x->ndim, x->shape);
    if (t == KILN_NONE)
        return c->ctx->err.status;
    const char *nm[KILN_MAX_DIMS];
    kiln_expr   ax[KILN_MAX_DIMS];
    lib_generic_names(x->ndim, nm, NULL);
    lib_axes(c, x->ndim, ax);
    kiln_expr body = kiln_mul(c->ctx, lib_load(c, 0, ax), mul_tree(c, f, ud, ax, 0, n));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, nm);
}

static enum kiln_status
scatter_reduction(struct libcall *c, enum kiln_reduce *kind, bool *mul)
{
    const char *red;
    *mul = false;
    KILN_TRY(lib_get_string(c, "reduction", "none", &red));
    if (!strcmp(red, "none"))
        *kind = KILN_REDUCE_NONE;
    else if (!strcmp(red, "add"))
        *kind = KILN_REDUCE_SUM;
    else if (!strcmp(red, "max"))
        *kind = KILN_REDUCE_MAX;
    else if (!strcmp(red, "min"))
        *kind = KILN_REDUCE_MIN;
    else if (!strcmp(red, "mul")) {
        *kind = KILN_REDUCE_NONE;
        *mul = true;
    } else
        return lib_fail(c, "reduction \"%s\" is not one of none, add, mul, max, min", red);
    return KILN_OK;
}

/* Whether update j (the reduction variable) hits output element ax: the condition that ax lies
 * inside the indices' shape (so its load is in range) and the index equals ax[axis]. */
static kiln_expr
scatter_hit(struct libcall *c, const struct scatter *s, const kiln_expr *ax, kiln_expr j,
            kiln_expr *in_range, kiln_expr *ui)
{
    kiln_ctx                 *ctx = c->ctx;
    const struct kiln_tensor *ix = lib_in(c, 1);
    kiln_expr                 cond = kiln_bool(ctx, true);
    for (uint32_t d = 0; d < s->r; d++) {
        ui[d] = d == s->axis ? j : ax[d];
        if (d != s->axis && ix->shape[d] < lib_in(c, 0)->shape[d])
            cond = lib_bound(c, cond, ax[d], false, true, ix->shape[d]);
    }
    *in_range = cond;
    kiln_expr v = kiln_cast(ctx, KILN_DTYPE_I64, lib_load(c, 1, ui));
    kiln_expr p = ax[s->axis];
    kiln_expr hit =
        kiln_binary(ctx, KILN_OP_OR, kiln_binary(ctx, KILN_OP_EQ, v, p),
                    kiln_binary(ctx, KILN_OP_EQ, kiln_add(ctx, v, lib_idx(c, s->n)), p));
    return hit;
}

/* scatter_elements' "mul" factor: update j where it hits, else 1. */
static kiln_expr
scatter_mul_factor(struct libcall *c, const void *ud, const kiln_expr *ax, int64_t j)
{
    const struct scatter *s = ud;
    kiln_expr             ui[KILN_MAX_DIMS], in_range;
    enum kiln_dtype       dt = (enum kiln_dtype)lib_in(c, 0)->dtype;
    kiln_expr             hit = scatter_hit(c, s, ax, lib_idx(c, j), &in_range, ui);
    kiln_expr             one = lib_f(c, 1, dt);
    return kiln_select(c->ctx, in_range, kiln_select(c->ctx, hit, lib_load(c, 2, ui), one), one);
}

enum kiln_status
kiln_lib_scatter_elements(struct libcall *c)
{
    static const char *const attrs[] = {"axis", "reduction", NULL};
    int64_t                  axis_attr;
    struct scatter           s;
    enum kiln_reduce         kind;
    bool                     mul;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "axis", 0, &axis_attr));
    KILN_TRY(scatter_reduction(c, &kind, &mul));
    const struct kiln_tensor *x = lib_in(c, 0), *ix = lib_in(c, 1), *up = lib_in(c, 2);
    char                      sx[LIB_SHAPE_BUF], si[LIB_SHAPE_BUF], su[LIB_SHAPE_BUF];
    KILN_TRY(scatter_check(c, kind, mul, sx, si, su));
    KILN_TRY(lib_axis(c, "axis", axis_attr, x->ndim, false, &s.axis));
    if (ix->ndim != x->ndim)
        return lib_fail(c, "indices %s %s must have the rank of input %s %s", lib_in_name(c, 1), si,
                        lib_in_name(c, 0), sx);
    if (up->ndim != ix->ndim || memcmp(up->shape, ix->shape, sizeof(int64_t) * ix->ndim))
        return lib_fail(c, "updates %s %s must have the shape of indices %s %s", lib_in_name(c, 2),
                        su, lib_in_name(c, 1), si);
    for (uint32_t d = 0; d < x->ndim; d++)
        if (d != s.axis && ix->shape[d] > x->shape[d])
            return lib_fail(c, "indices %s %s exceed input %s %s in dimension %u",
                            lib_in_name(c, 1), si, lib_in_name(c, 0), sx, d);
    s.r = x->ndim;
    s.n = x->shape[s.axis];
    s.m = ix->shape[s.axis];
    if (mul && s.m > SCATTER_MUL_MAX)
        return lib_fail(c,
                        "reduction \"mul\" with %lld updates along axis %u; at most %d are "
                        "supported (the product is written out)",
                        (long long)s.m, s.axis, SCATTER_MUL_MAX);
    KILN_TRY(lib_begin(c));
    if (mul)
        return scatter_mul(c, scatter_mul_factor, &s, s.m);

    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)x->dtype;
    const char     *names[KILN_MAX_DIMS];
    kiln_expr       ax[KILN_MAX_DIMS], ui[KILN_MAX_DIMS], in_range;
    lib_generic_names(s.r, names, "j");
    uint32_t last = KILN_NONE;
    if (kind == KILN_REDUCE_NONE) {
        /* OUT.last: the last update hitting each element, -1 for none */
        last = lib_tensor(c, "last", KILN_DTYPE_I64, s.r, x->shape);
        if (last == KILN_NONE)
            return ctx->err.status;
        struct lib_red r = {0};
        lib_axes(c, s.r, ax);
        kiln_expr j = s.m > 1 ? lib_rvar(c, &r, s.m, "j") : lib_idx(c, 0);
        kiln_expr hit = scatter_hit(c, &s, ax, j, &in_range, ui);
        kiln_expr body =
            kiln_select(ctx, in_range, kiln_select(ctx, hit, j, lib_idx(c, -1)), lib_idx(c, -1));
        KILN_TRY(
            lib_define(c, last, s.m > 1 ? KILN_REDUCE_MAX : KILN_REDUCE_NONE, &r, body, names));
    }
    uint32_t t = lib_tensor(c, NULL, dt, s.r, x->shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    lib_axes(c, s.r, ax);
    kiln_expr xv = lib_load(c, 0, ax);
    if (kind == KILN_REDUCE_NONE) {
        /* updates at OUT.last where 0 <= last < m (and ax inside the updates), else x */
        kiln_expr l = lib_load_t(c, last, ax);
        kiln_expr zero = lib_idx(c, 0);
        kiln_expr ok = kiln_and(ctx, kiln_le(ctx, zero, l), kiln_lt(ctx, l, lib_idx(c, s.m)));
        for (uint32_t d = 0; d < s.r; d++) {
            ui[d] = d == s.axis ? l : ax[d];
            if (d != s.axis && ix->shape[d] < x->shape[d])
                ok = lib_bound(c, ok, ax[d], false, true, ix->shape[d]);
        }
        return lib_define(c, t, KILN_REDUCE_NONE, NULL,
                          kiln_select(ctx, ok, lib_load(c, 2, ui), xv), names);
    }
    /* one reduction over j: add x[p] once (at j = 0) and the hitting updates; max / min of x[p]
     * and the hitting updates */
    struct lib_red r = {0};
    kiln_expr      j = s.m > 1 ? lib_rvar(c, &r, s.m, "j") : lib_idx(c, 0);
    kiln_expr      hit = scatter_hit(c, &s, ax, j, &in_range, ui);
    kiln_expr      body;
    if (kind == KILN_REDUCE_SUM) {
        kiln_expr u =
            kiln_select(ctx, in_range, kiln_select(ctx, hit, lib_load(c, 2, ui), lib_f(c, 0, dt)),
                        lib_f(c, 0, dt));
        body = kiln_add(
            ctx, u,
            kiln_select(ctx, kiln_binary(ctx, KILN_OP_EQ, j, lib_idx(c, 0)), xv, lib_f(c, 0, dt)));
    } else {
        /* the extreme with x[p] in the hit itself: with one update (m = 1) there is no
         * reduction to take it */
        kiln_expr u = kiln_binary(ctx, kind == KILN_REDUCE_MAX ? KILN_OP_MAX : KILN_OP_MIN,
                                  lib_load(c, 2, ui), xv);
        body = kiln_select(ctx, in_range, kiln_select(ctx, hit, u, xv), xv);
    }
    return lib_define(c, t, s.m > 1 ? kind : KILN_REDUCE_NONE, &r, body, names);
}

/* ---- scatter_nd ---- */

/* Whether update row q hits output element ax: every component c < k of indices[q] (negative
 * ones counting from the end of dimension c) equals ax[c]. */
static kiln_expr
scatter_nd_hit(struct libcall *c, const kiln_expr *ax, kiln_expr q, int64_t k)
{
    kiln_ctx                 *ctx = c->ctx;
    const struct kiln_tensor *x = lib_in(c, 0);
    kiln_expr                 hit = kiln_bool(ctx, true);
    for (int64_t d = 0; d < k; d++) {
        kiln_expr ii[2] = {q, lib_idx(c, d)};
        kiln_expr v = kiln_cast(ctx, KILN_DTYPE_I64, lib_load(c, 1, ii));
        kiln_expr eq = kiln_binary(
            ctx, KILN_OP_OR, kiln_binary(ctx, KILN_OP_EQ, v, ax[d]),
            kiln_binary(ctx, KILN_OP_EQ, kiln_add(ctx, v, lib_idx(c, x->shape[d])), ax[d]));
        hit = d == 0 ? eq : kiln_and(ctx, hit, eq);
    }
    return hit;
}

/* scatter_nd's "mul" factor: update row j where it hits, else 1. */
static kiln_expr
scatter_nd_mul_factor(struct libcall *c, const void *ud, const kiln_expr *ax, int64_t j)
{
    int64_t                   k = *(const int64_t *)ud;
    const struct kiln_tensor *x = lib_in(c, 0);
    kiln_expr                 ui[KILN_MAX_DIMS];
    ui[0] = lib_idx(c, j);
    for (uint32_t d = 1; d < 1 + x->ndim - (uint32_t)k; d++)
        ui[d] = ax[k + d - 1];
    kiln_expr one = lib_f(c, 1, (enum kiln_dtype)x->dtype);
    return kiln_select(c->ctx, scatter_nd_hit(c, ax, ui[0], k), lib_load(c, 2, ui), one);
}

enum kiln_status
kiln_lib_scatter_nd(struct libcall *c)
{
    static const char *const attrs[] = {"reduction", NULL};
    enum kiln_reduce         kind;
    bool                     mul;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(scatter_reduction(c, &kind, &mul));
    const struct kiln_tensor *x = lib_in(c, 0), *ix = lib_in(c, 1), *up = lib_in(c, 2);
    char                      sx[LIB_SHAPE_BUF], si[LIB_SHAPE_BUF], su[LIB_SHAPE_BUF];
    KILN_TRY(scatter_check(c, kind, mul, sx, si, su));
    if (ix->ndim != 2 || ix->shape[1] > x->ndim)
        return lib_fail(c, "indices %s %s must be [Q, k] with k at most the rank of input %s %s",
                        lib_in_name(c, 1), si, lib_in_name(c, 0), sx);
    int64_t  qn = ix->shape[0], k = ix->shape[1];
    uint32_t ur = 1 + x->ndim - (uint32_t)k;
    bool     ok = up->ndim == ur && up->shape[0] == qn;
    for (uint32_t d = 1; ok && d < ur; d++)
        ok = up->shape[d] == x->shape[k + d - 1];
    if (!ok)
        return lib_fail(c, "updates %s %s must be [Q] + input %s %s's dimensions from k = %lld",
                        lib_in_name(c, 2), su, lib_in_name(c, 0), sx, (long long)k);
    if (mul && qn > SCATTER_MUL_MAX)
        return lib_fail(c,
                        "reduction \"mul\" with %lld index rows; at most %d are supported (the "
                        "product is written out)",
                        (long long)qn, SCATTER_MUL_MAX);
    KILN_TRY(lib_begin(c));
    if (mul)
        return scatter_mul(c, scatter_nd_mul_factor, &k, qn);

    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)x->dtype;
    uint32_t        r = x->ndim;
    const char     *names[KILN_MAX_DIMS];
    kiln_expr       ax[KILN_MAX_DIMS], ui[KILN_MAX_DIMS];
    lib_generic_names(r, names, "q");
    uint32_t last = KILN_NONE;
    if (kind == KILN_REDUCE_NONE) {
        /* OUT.last: the last update row hitting each element, -1 for none */
        last = lib_tensor(c, "last", KILN_DTYPE_I64, r, x->shape);
        if (last == KILN_NONE)
            return ctx->err.status;
        struct lib_red rd = {0};
        lib_axes(c, r, ax);
        kiln_expr q = lib_rvar(c, &rd, qn, "q");
        kiln_expr body = kiln_select(ctx, scatter_nd_hit(c, ax, q, k), q, lib_idx(c, -1));
        KILN_TRY(
            lib_define(c, last, qn > 1 ? KILN_REDUCE_MAX : KILN_REDUCE_NONE, &rd, body, names));
    }
    uint32_t t = lib_tensor(c, NULL, dt, r, x->shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    lib_axes(c, r, ax);
    kiln_expr xv = lib_load(c, 0, ax);
    for (uint32_t d = 1; d < ur; d++)
        ui[d] = ax[k + d - 1];
    if (kind == KILN_REDUCE_NONE) {
        /* updates at row OUT.last where 0 <= last < Q, else x */
        kiln_expr l = lib_load_t(c, last, ax);
        kiln_expr in =
            kiln_and(ctx, kiln_le(ctx, lib_idx(c, 0), l), kiln_lt(ctx, l, lib_idx(c, qn)));
        ui[0] = l;
        return lib_define(c, t, KILN_REDUCE_NONE, NULL,
                          kiln_select(ctx, in, lib_load(c, 2, ui), xv), names);
    }
    struct lib_red rd = {0};
    kiln_expr      q = lib_rvar(c, &rd, qn, "q");
    kiln_expr      hit = scatter_nd_hit(c, ax, q, k);
    ui[0] = q;
    kiln_expr u = lib_load(c, 2, ui), body;
    if (kind == KILN_REDUCE_SUM)
        body = kiln_add(
            ctx, kiln_select(ctx, hit, u, lib_f(c, 0, dt)),
            kiln_select(ctx, kiln_binary(ctx, KILN_OP_EQ, q, lib_idx(c, 0)), xv, lib_f(c, 0, dt)));
    else
        body = kiln_select(
            ctx, hit, kiln_binary(ctx, kind == KILN_REDUCE_MAX ? KILN_OP_MAX : KILN_OP_MIN, u, xv),
            xv);
    return lib_define(c, t, qn > 1 ? kind : KILN_REDUCE_NONE, &rd, body, names);
}
