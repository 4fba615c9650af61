/* ir/lib_tensor.c -- data-movement library ops: reshape, flatten, transpose, concat, pad and
 * slice. Each is one elementwise compute definition whose body is a load of the input at
 * rewritten indices; none computes anything, and all accept any dtype.
 *
 * reshape does not go through one flat index for the whole tensor: it splits both shapes into
 * the shortest groups of consecutive dimensions with equal element counts (a [N, C, H, W] to
 * [N, C*H*W] reshape has groups {N}, {C, H, W}) and flattens/unflattens within each group, so
 * untouched dimensions keep plain axis indices and the index arithmetic stays small. concat is
 * a select chain over the concat axis (each branch lazily loads one input at a shifted index).
 * pad follows ONNX (pads = [begin_0, ..., begin_r-1, end_0, ..., end_r-1], negative pads
 * crop) with modes constant (select on the bounds), edge (clamped index) and reflect (index
 * mirrored at the borders without repeating them, as numpy's "reflect"). slice follows ONNX /
 * NumPy: negative starts and ends count from the end, both are clamped to the dimension, and a
 * negative step walks backwards. */
#include "lib_impl.h"

#include <stdio.h>
#include <string.h>

/* Output OUT of shape oshape whose element at ax is x[idx]. */
static enum kiln_status
gather(struct libcall *c, uint32_t on, const int64_t *oshape,
       void (*index)(struct libcall *c, const kiln_expr *ax, kiln_expr *idx, const void *ud),
       const void *ud)
{
    KILN_TRY(lib_begin(c));
    uint32_t t = lib_tensor(c, NULL, (enum kiln_dtype)lib_in(c, 0)->dtype, on, oshape);
    if (t == KILN_NONE)
        return c->ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS], idx[KILN_MAX_DIMS];
    lib_axes(c, on, ax);
    index(c, ax, idx, ud);
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, lib_load(c, 0, idx), NULL);
}

/* ---- reshape, flatten ---- */

struct reshape {
    const int64_t *oshape;
    uint32_t       on;
};

static void
reshape_index(struct libcall *c, const kiln_expr *ax, kiln_expr *idx, const void *ud)
{
    const struct reshape     *rs = ud;
    const struct kiln_tensor *x = lib_in(c, 0);
    kiln_ctx                 *ctx = c->ctx;
    const int64_t            *is = x->shape, *os = rs->oshape;
    uint32_t                  in = x->ndim, on = rs->on, i = 0, o = 0;
    while (i < in || o < on) {
        uint32_t gi = i, go = o;
        int64_t  pi = 1, po = 1;
        if (i < in)
            pi *= is[i++];
        if (o < on)
            po *= os[o++];
        while (pi != po) {
            if (pi < po && i < in)
                pi *= is[i++];
            else if (po < pi && o < on)
                po *= os[o++];
            else
                break; /* unreachable: the element counts agree */
        }
        kiln_expr flat = lib_idx(c, 0);
        for (uint32_t k = go; k < o; k++)
            if (os[k] != 1)
                flat = kiln_add(ctx, kiln_mul(ctx, flat, lib_idx(c, os[k])), ax[k]);
        bool    leading = true;
        int64_t stride = pi;
        for (uint32_t k = gi; k < i; k++) {
            stride /= is[k];
            if (is[k] == 1) {
                idx[k] = lib_idx(c, 0);
                continue;
            }
            kiln_expr e = kiln_floordiv(ctx, flat, lib_idx(c, stride));
            idx[k] = leading ? e : kiln_floormod(ctx, e, lib_idx(c, is[k]));
            leading = false;
        }
    }
}

static enum kiln_status
reshape_to(struct libcall *c, const int64_t *oshape, uint32_t on)
{
    struct reshape rs = {oshape, on};
    return gather(c, on, oshape, reshape_index, &rs);
}

enum kiln_status
kiln_lib_reshape(struct libcall *c)
{
    static const char *const attrs[] = {"shape", NULL};
    const int64_t           *v;
    uint32_t                 n;
    bool                     given;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_list(c, "shape", &v, &n, &given));
    if (!given)
        return lib_fail(c, "missing attribute shape");
    const struct kiln_tensor *x = lib_in(c, 0);
    const struct kiln_attr   *a = lib_attr(c, "shape");
    char                      sx[LIB_SHAPE_BUF], sv[LIB_SHAPE_BUF];
    if (n > KILN_MAX_DIMS)
        return lib_fail_attr(c, a, "shape %s has more than %d dimensions",
                             lib_shape_str(v, n, sv, sizeof sv), KILN_MAX_DIMS);
    int64_t shape[KILN_MAX_DIMS], known = 1, numel = kiln_tensor_numel(x);
    int     infer = -1;
    bool    overflow = false;
    for (uint32_t i = 0; i < n; i++) {
        shape[i] = v[i];
        if (v[i] == -1) {
            if (infer >= 0)
                return lib_fail_attr(c, a, "shape %s has more than one -1",
                                     lib_shape_str(v, n, sv, sizeof sv));
            infer = (int)i;
        } else if (v[i] <= 0) {
            return lib_fail_attr(c, a, "shape entry %lld must be positive or -1", (long long)v[i]);
        } else {
            overflow |= kiln_mul_overflows(known, v[i], &known);
        }
    }
    lib_shape_str(x->shape, x->ndim, sx, sizeof sx);
    lib_shape_str(v, n, sv, sizeof sv);
    if (infer >= 0) {
        if (overflow || numel % known)
            return lib_fail(c, "cannot reshape %s (%lld elements) to %s", sx, (long long)numel, sv);
        shape[infer] = numel / known;
    } else if (overflow || known != numel) {
        if (overflow)
            return lib_fail(c, "cannot reshape %s (%lld elements) to %s", sx, (long long)numel, sv);
        return lib_fail(c, "cannot reshape %s (%lld elements) to %s (%lld elements)", sx,
                        (long long)numel, sv, (long long)known);
    }
    return reshape_to(c, shape, n);
}

enum kiln_status
kiln_lib_flatten(struct libcall *c)
{
    static const char *const attrs[] = {"axis", NULL};
    int64_t                  axis_attr;
    uint32_t                 axis;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "axis", 1, &axis_attr));
    const struct kiln_tensor *x = lib_in(c, 0);
    KILN_TRY(lib_axis(c, "axis", axis_attr, x->ndim, true, &axis));
    int64_t shape[2] = {1, 1};
    for (uint32_t i = 0; i < x->ndim; i++)
        shape[i < axis ? 0 : 1] *= x->shape[i];
    return reshape_to(c, shape, 2);
}

/* ---- transpose ---- */

static void
transpose_index(struct libcall *c, const kiln_expr *ax, kiln_expr *idx, const void *ud)
{
    const uint32_t *perm = ud;
    for (uint32_t i = 0; i < lib_in(c, 0)->ndim; i++)
        idx[perm[i]] = ax[i];
}

enum kiln_status
kiln_lib_transpose(struct libcall *c)
{
    static const char *const attrs[] = {"perm", NULL};
    const int64_t           *v;
    uint32_t                 n, perm[KILN_MAX_DIMS];
    bool                     given, seen[KILN_MAX_DIMS] = {0};
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_list(c, "perm", &v, &n, &given));
    const struct kiln_tensor *x = lib_in(c, 0);
    const struct kiln_attr   *a = lib_attr(c, "perm");
    char                      sv[LIB_SHAPE_BUF];
    if (!given) {
        for (uint32_t i = 0; i < x->ndim; i++)
            perm[i] = x->ndim - 1 - i;
    } else {
        if (n != x->ndim)
            return lib_fail_attr(c, a, "perm %s has %u entries but input %s has rank %u",
                                 lib_shape_str(v, n, sv, sizeof sv), n, lib_in_name(c, 0), x->ndim);
        for (uint32_t i = 0; i < n; i++) {
            int64_t p = v[i] < 0 ? v[i] + (int64_t)n : v[i];
            if (p < 0 || p >= (int64_t)n || seen[p])
                return lib_fail_attr(c, a, "perm %s is not a permutation of 0..%u",
                                     lib_shape_str(v, n, sv, sizeof sv), n - 1);
            seen[p] = true;
            perm[i] = (uint32_t)p;
        }
    }
    int64_t shape[KILN_MAX_DIMS];
    for (uint32_t i = 0; i < x->ndim; i++)
        shape[i] = x->shape[perm[i]];
    return gather(c, x->ndim, shape, transpose_index, perm);
}

/* ---- concat ---- */

enum kiln_status
kiln_lib_concat(struct libcall *c)
{
    static const char *const attrs[] = {"axis", NULL};
    int64_t                  axis_attr;
    uint32_t                 axis;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "axis", 0, &axis_attr));
    const struct kiln_tensor *x = lib_in(c, 0);
    if (x->ndim == 0)
        return lib_fail(c, "input %s is a scalar; it needs at least 1 dimension",
                        lib_in_name(c, 0));
    KILN_TRY(lib_axis(c, "axis", axis_attr, x->ndim, false, &axis));
    KILN_TRY(lib_same_dtype(c));
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    shape[axis] = 0;
    for (uint32_t i = 0; i < c->nin; i++) {
        const struct kiln_tensor *t = lib_in(c, i);
        char                      s0[LIB_SHAPE_BUF], s1[LIB_SHAPE_BUF];
        bool                      same = t->ndim == x->ndim;
        for (uint32_t d = 0; same && d < x->ndim; d++)
            same = d == axis || t->shape[d] == x->shape[d];
        if (!same)
            return lib_fail(c, "shapes %s of %s and %s of %s differ outside axis %u",
                            lib_shape_str(x->shape, x->ndim, s0, sizeof s0), lib_in_name(c, 0),
                            lib_shape_str(t->shape, t->ndim, s1, sizeof s1), lib_in_name(c, i),
                            axis);
        bool ovf = false;
        shape[axis] = lib_ck_add(&ovf, shape[axis], t->shape[axis]);
        if (ovf)
            return lib_fail(c, "the inputs' extents along axis %u overflow the output shape", axis);
    }
    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    uint32_t  t = lib_tensor(c, NULL, (enum kiln_dtype)x->dtype, x->ndim, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS], idx[KILN_MAX_DIMS];
    lib_axes(c, x->ndim, ax);
    memcpy(idx, ax, sizeof(kiln_expr) * x->ndim);
    /* build from the last input backwards: select(a < end_i, x_i[a - start_i], rest) */
    int64_t   end = shape[axis];
    kiln_expr body = {0};
    for (uint32_t i = c->nin; i-- > 0;) {
        int64_t start = end - lib_in(c, i)->shape[axis];
        idx[axis] = kiln_sub(ctx, ax[axis], lib_idx(c, start));
        kiln_expr v = lib_load(c, i, idx);
        body = i == c->nin - 1 ? v
                               : kiln_select(ctx, kiln_lt(ctx, ax[axis], lib_idx(c, end)), v, body);
        end = start;
    }
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, NULL);
}

/* ---- pad ---- */

enum pad_mode { PAD_CONSTANT, PAD_EDGE, PAD_REFLECT };

enum kiln_status
kiln_lib_pad(struct libcall *c)
{
    static const char *const attrs[] = {"pads", "value", "mode", NULL};
    const int64_t           *v;
    uint32_t                 n;
    bool                     given;
    double                   value;
    const char              *mode_s;
    enum pad_mode            mode;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_list(c, "pads", &v, &n, &given));
    KILN_TRY(lib_get_float(c, "value", 0.0, &value));
    KILN_TRY(lib_get_string(c, "mode", "constant", &mode_s));
    const struct kiln_attr *pa = lib_attr(c, "pads");
    if (!given)
        return lib_fail(c, "missing attribute pads");
    if (!strcmp(mode_s, "constant"))
        mode = PAD_CONSTANT;
    else if (!strcmp(mode_s, "edge"))
        mode = PAD_EDGE;
    else if (!strcmp(mode_s, "reflect"))
        mode = PAD_REFLECT;
    else
        return lib_fail_attr(c, lib_attr(c, "mode"),
                             "mode must be \"constant\", \"edge\" or \"reflect\", got \"%s\"",
                             mode_s);
    const struct kiln_tensor *x = lib_in(c, 0);
    uint32_t                  r = x->ndim;
    int64_t                   before[KILN_MAX_DIMS], after[KILN_MAX_DIMS], shape[KILN_MAX_DIMS];
    char                      sv[LIB_SHAPE_BUF];
    bool                      single = pa->kind == KILN_ATTR_INT;
    if (!single && n != 2 * r && n != r)
        return lib_fail_attr(c, pa, "pads %s has %u entries; input %s of rank %u needs %u (or %u)",
                             lib_shape_str(v, n, sv, sizeof sv), n, lib_in_name(c, 0), r, 2 * r, r);
    for (uint32_t d = 0; d < r; d++) {
        before[d] = single ? v[0] : v[d];
        after[d] = single ? v[0] : n == 2 * r ? v[r + d] : v[d];
        bool    ovf = false;
        int64_t ext = lib_ck_add(&ovf, lib_ck_add(&ovf, x->shape[d], before[d]), after[d]);
        if (ovf)
            return lib_fail_overflow(c, (const char *const[]){"pads", NULL});
        if (ext < 1)
            return lib_fail_attr(c, pa, "pads leave dimension %u of %s with extent %lld", d,
                                 lib_in_name(c, 0), (long long)ext);
        if (mode == PAD_REFLECT && (before[d] >= x->shape[d] || after[d] >= x->shape[d]))
            return lib_fail_attr(c, pa,
                                 "reflect padding %lld of dimension %u must be less than its "
                                 "extent %lld",
                                 (long long)(before[d] >= x->shape[d] ? before[d] : after[d]), d,
                                 (long long)x->shape[d]);
        shape[d] = ext;
    }
    KILN_TRY(lib_begin(c));
    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)x->dtype;
    uint32_t        t = lib_tensor(c, NULL, dt, r, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS], idx[KILN_MAX_DIMS], cond = kiln_bool(ctx, true);
    lib_axes(c, r, ax);
    for (uint32_t d = 0; d < r; d++) {
        int64_t   last = x->shape[d] - 1;
        kiln_expr i = kiln_sub(ctx, ax[d], lib_idx(c, before[d]));
        bool      lo = before[d] > 0, hi = after[d] > 0;
        switch (mode) {
        case PAD_CONSTANT:
            cond = lib_bound(c, cond, i, lo, hi, x->shape[d]);
            break;
        case PAD_EDGE:
            if (lo)
                i = kiln_max(ctx, i, lib_idx(c, 0));
            if (hi)
                i = kiln_min(ctx, i, lib_idx(c, last));
            break;
        case PAD_REFLECT:
            /* mirror at 0: |i|; mirror at last: last - |last - i| */
            if (lo)
                i = kiln_unary(ctx, KILN_OP_ABS, i);
            if (hi)
                i = kiln_sub(ctx, lib_idx(c, last),
                             kiln_unary(ctx, KILN_OP_ABS, kiln_sub(ctx, lib_idx(c, last), i)));
            break;
        }
        idx[d] = i;
    }
    kiln_expr body = kiln_select(ctx, cond, lib_load(c, 0, idx), lib_f(c, value, dt));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, NULL);
}

/* ---- slice ---- */

struct slice {
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS];
};

static void
slice_index(struct libcall *c, const kiln_expr *ax, kiln_expr *idx, const void *ud)
{
    const struct slice *s = ud;
    kiln_ctx           *ctx = c->ctx;
    for (uint32_t d = 0; d < lib_in(c, 0)->ndim; d++)
        idx[d] =
            kiln_add(ctx, kiln_mul(ctx, ax[d], lib_idx(c, s->step[d])), lib_idx(c, s->start[d]));
}

static int64_t
clamp(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

enum kiln_status
kiln_lib_slice(struct libcall *c)
{
    static const char *const attrs[] = {"starts", "ends", "axes", "steps", NULL};
    static const char *const list[] = {"starts", "ends", "axes", "steps"};
    const int64_t           *v[4];
    uint32_t                 n[4];
    bool                     given[4];
    KILN_TRY(lib_allow(c, attrs));
    for (int i = 0; i < 4; i++)
        KILN_TRY(lib_get_list(c, list[i], &v[i], &n[i], &given[i]));
    for (int i = 0; i < 2; i++)
        if (!given[i])
            return lib_fail(c, "missing attribute %s", list[i]);
    for (int i = 1; i < 4; i++)
        if (given[i] && n[i] != n[0])
            return lib_fail_attr(c, lib_attr(c, list[i]), "starts has %u entries but %s has %u",
                                 n[0], list[i], n[i]);
    const struct kiln_tensor *x = lib_in(c, 0);
    struct slice              s;
    int64_t                   shape[KILN_MAX_DIMS];
    bool                      seen[KILN_MAX_DIMS] = {0};
    for (uint32_t d = 0; d < x->ndim; d++) {
        s.start[d] = 0;
        s.step[d] = 1;
        shape[d] = x->shape[d];
    }
    if (!given[2] && n[0] > x->ndim)
        return lib_fail_attr(c, lib_attr(c, "starts"),
                             "starts has %u entries but input %s has rank %u", n[0],
                             lib_in_name(c, 0), x->ndim);
    for (uint32_t k = 0; k < n[0]; k++) {
        uint32_t d = k;
        if (given[2])
            KILN_TRY(lib_axis(c, "axes", v[2][k], x->ndim, false, &d));
        if (seen[d])
            return lib_fail_attr(c, lib_attr(c, "axes"), "axis %u appears twice in axes", d);
        seen[d] = true;
        int64_t step = given[3] ? v[3][k] : 1, dim = x->shape[d];
        if (step == 0)
            return lib_fail_attr(c, lib_attr(c, "steps"), "steps must not be zero");
        int64_t start = v[0][k], end = v[1][k];
        if (start < 0)
            start += dim;
        if (end < 0)
            end += dim;
        /* |step| beyond the extent takes one element, like any step larger than the span */
        int64_t count, mag = step > 0 ? (step > dim ? dim : step) : (step < -dim ? dim : -step);
        if (step > 0) {
            start = clamp(start, 0, dim);
            end = clamp(end, 0, dim);
            count = end > start ? (end - start + mag - 1) / mag : 0;
        } else {
            start = clamp(start, 0, dim - 1);
            end = clamp(end, -1, dim - 1);
            count = start > end ? (start - end + mag - 1) / mag : 0;
        }
        if (count < 1)
            return lib_fail(c,
                            "dimension %u of %s would be empty (start %lld, end %lld, step "
                            "%lld)",
                            d, lib_in_name(c, 0), (long long)v[0][k], (long long)v[1][k],
                            (long long)step);
        s.start[d] = start;
        s.step[d] = count == 1 ? 1 : step;
        shape[d] = count;
    }
    return gather(c, x->ndim, shape, slice_index, &s);
}
