/* frontend/onnx_loss.c -- ONNX ops composed of existing library ops, without a library op of
 * their own: the training losses NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, OneHot,
 * EyeLike, DepthToSpace, SpaceToDepth, GatherND, InstanceNormalization,
 * MeanVarianceNormalization and LRN; and ScatterElements and ScatterND, onto ir/lib_scatter.c's
 * ops.
 *
 * The losses: the log-probability of each sample's target class is a gather_elements along the
 * class axis, its weight a gather from the weight input, and an ignored target is masked out by
 * `where`. The labels are data, so a target outside [0, C) reads the element the library's
 * gathers clamp it to (as GatherND's indices); ONNX leaves such targets undefined unless they
 * equal ignore_index, whose loss and weight are 0. One handler per row of frontend/onnx.def; the
 * dispatcher (onnx.c) has checked the attributes and looked the inputs up into m->in[]. */
#include "onnx_impl.h"

#include <math.h>
#include <string.h>

enum loss_reduction { LOSS_NONE, LOSS_SUM, LOSS_MEAN };

/* The negative log-likelihood loss of log-probabilities lp[N,C,d1..dk] (a tensor of dtype dt and
 * the shape of m->in[0]) at targets m->in[1] [N,d1..dk], weighted by m->in[2] [C] when present:
 *
 *   loss[n,d] = -lp[n, t[n,d], d] * w[t[n,d]]      (0 where t[n,d] = ignore_index)
 *
 * reduced by `reduction`: none keeps [N,d1..dk]; sum adds everything up (rank 0); mean divides
 * that sum by the sum of the weights applied (the count of targets not ignored without a weight
 * input), as ONNX defines it. Returns the loss tensor, named after output 0. */
static uint32_t
nll(struct onnx_imp *m, uint32_t lp, enum loss_reduction red)
{
    struct onnx_value *x = m->in[0], *tv = m->in[1], *wv = m->in[2];
    const char        *o = onnx_out0(m);
    uint32_t           r = onnx_vrank(m, x), rt = onnx_vrank(m, tv);
    const int64_t     *ts = onnx_vshape(m, tv);
    enum kiln_dtype    dt = onnx_vdtype(m, x), tdt = onnx_vdtype(m, tv);
    bool               has_ii = onnx_attr(m, "ignore_index") != NULL;
    int64_t            ii = onnx_attr_int(m, "ignore_index", 0);

    /* the target's log-probability: lp[n, t[n,d], d] */
    int64_t sh[KILN_MAX_DIMS];
    sh[0] = ts[0];
    sh[1] = 1;
    memcpy(sh + 2, ts + 1, sizeof(int64_t) * (rt - 1));
    uint32_t          t = onnx_tensor(m, tv);
    uint32_t          tu = onnx_reshape(m, onnx_suffixed(m, o, "target"), t, r, sh);
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "axis", 1);
    uint32_t in[3] = {lp, tu};
    uint32_t g = onnx_lib(m, "gather_elements", onnx_suffixed(m, o, "picked"), 2, in, &as);
    g = onnx_reshape(m, onnx_suffixed(m, o, "picked1"), g, rt, ts);

    /* the weight of each target: w[t], 1 without a weight input */
    uint32_t w = KILN_NONE;
    if (wv) {
        struct onnx_attrs ga = {0};
        onnx_at_int(m, &ga, "axis", 0);
        in[0] = onnx_tensor(m, wv);
        in[1] = t;
        w = onnx_lib(m, "gather", onnx_suffixed(m, o, "weight"), 2, in, &ga);
        g = onnx_lib2(m, "mul", onnx_suffixed(m, o, "weighted"), g, w);
    }
    uint32_t loss =
        onnx_lib1(m, "neg", red == LOSS_NONE && !has_ii ? o : onnx_suffixed(m, o, "nll"), g, NULL);

    /* an ignored target: loss and weight 0 */
    if (has_ii) {
        uint32_t ign = onnx_lib2(m, "equal", onnx_suffixed(m, o, "ignored"), t,
                                 onnx_scalar(m, onnx_suffixed(m, o, "ii"), (double)ii, tdt));
        uint32_t zero = onnx_scalar(m, onnx_suffixed(m, o, "zero"), 0, dt);
        in[0] = ign;
        in[1] = zero;
        in[2] = loss;
        loss =
            onnx_lib(m, "where", red == LOSS_NONE ? o : onnx_suffixed(m, o, "kept"), 3, in, NULL);
        in[2] = w != KILN_NONE ? w : onnx_scalar(m, onnx_suffixed(m, o, "one"), 1, dt);
        w = onnx_lib(m, "where", onnx_suffixed(m, o, "wkept"), 3, in, NULL);
    }
    if (red == LOSS_NONE)
        return loss;
    struct onnx_attrs all = {0}; /* every axis, dropped: rank 0 */
    onnx_at_int(m, &all, "keepdims", 0);
    if (red == LOSS_SUM || w == KILN_NONE)
        return onnx_lib1(m, red == LOSS_SUM ? "reduce_sum" : "reduce_mean", o, loss, &all);
    uint32_t s = onnx_lib1(m, "reduce_sum", onnx_suffixed(m, o, "sum"), loss, &all);
    uint32_t ws = onnx_lib1(m, "reduce_sum", onnx_suffixed(m, o, "wsum"), w, &all);
    return onnx_lib2(m, "div", o, s, ws);
}

/* The checks both losses share: the input's rank and dtype, the target's shape and dtype, the
 * weight's; the reduction into *red. */
static bool
loss_check(struct onnx_imp *m, enum loss_reduction *red)
{
    struct onnx_value *x = m->in[0], *tv = m->in[1], *wv = m->in[2];
    uint32_t           r = onnx_vrank(m, x), rt = onnx_vrank(m, tv);
    const int64_t     *xs = onnx_vshape(m, x), *ts = onnx_vshape(m, tv);
    enum kiln_dtype    tdt = onnx_vdtype(m, tv);
    const char        *rs = onnx_attr_str(m, "reduction", "mean");
    if (!rs)
        return false;
    if (!strcmp(rs, "none"))
        *red = LOSS_NONE;
    else if (!strcmp(rs, "sum"))
        *red = LOSS_SUM;
    else if (!strcmp(rs, "mean"))
        *red = LOSS_MEAN;
    else {
        BAD(m, "reduction '%s' is not one of none, sum, mean", rs);
        return false;
    }
    if (!onnx_is_float(onnx_vdtype(m, x))) {
        BAD(m, "input 0 ('%s') is %s; a float type is required", x->name,
            kiln_dtype_name(onnx_vdtype(m, x)));
        return false;
    }
    if (r < 2) {
        BAD(m, "input 0 ('%s') has rank %u; at least 2 (N, C, ...) is required", x->name, r);
        return false;
    }
    if (tdt != KILN_DTYPE_I32 && tdt != KILN_DTYPE_I64) {
        BAD(m, "input 1 ('%s') is %s; the targets must be int32 or int64", tv->name,
            kiln_dtype_name(tdt));
        return false;
    }
    bool same = rt + 1 == r && ts[0] == xs[0];
    for (uint32_t d = 1; same && d < rt; d++)
        same = ts[d] == xs[d + 1];
    if (!same) {
        BAD(m, "input 1 ('%s') must have input 0's shape without dimension 1 (N, d1, ...)",
            tv->name);
        return false;
    }
    if (wv
        && (onnx_vrank(m, wv) != 1 || onnx_vshape(m, wv)[0] != xs[1]
            || onnx_vdtype(m, wv) != onnx_vdtype(m, x))) {
        BAD(m, "input 2 ('%s') must be a 1-D tensor of input 0's dtype with C = %lld entries",
            wv->name, (long long)xs[1]);
        return false;
    }
    return true;
}

enum kiln_status
onnx_op_nll_loss(struct onnx_imp *m)
{
    enum loss_reduction red;
    if (!loss_check(m, &red))
        return m->ctx->err.status;
    return onnx_set_output(m, 0, nll(m, onnx_tensor(m, m->in[0]), red));
}

/* SoftmaxCrossEntropyLoss: the negative log-likelihood of log_softmax over the class axis; the
 * optional second output is that log_softmax. */
enum kiln_status
onnx_op_softmax_cross_entropy(struct onnx_imp *m)
{
    enum loss_reduction red;
    if (!loss_check(m, &red))
        return m->ctx->err.status;
    const Onnx__NodeProto *n = m->node;
    bool                   want_lp = n->n_output > 1 && n->output[1] && *n->output[1];
    struct onnx_attrs      as = {0};
    onnx_at_int(m, &as, "axis", 1);
    uint32_t         lp = onnx_lib1(m, "log_softmax",
                            want_lp ? n->output[1] : onnx_suffixed(m, onnx_out0(m), "log_prob"),
                                    onnx_tensor(m, m->in[0]), &as);
    enum kiln_status st = onnx_set_output(m, 0, nll(m, lp, red));
    if (st != KILN_OK || !want_lp)
        return st;
    return onnx_set_output(m, 1, lp);
}

/* ---- OneHot, EyeLike ---- */

/* OneHot: equal(indices, iota) along the new axis, then where(values[1], values[0]). depth must
 * be a constant; negative indices count from the end (indices + depth), any other index outside
 * [0, depth) gives a row of off values. A float index is truncated toward zero first. */
enum kiln_status
onnx_op_one_hot(struct onnx_imp *m)
{
    struct onnx_value *iv = m->in[0], *dv = m->in[1], *vv = m->in[2];
    const char        *o = onnx_out0(m);
    uint32_t           r = onnx_vrank(m, iv);
    int64_t            axis = onnx_attr_int(m, "axis", -1), a = onnx_norm_axis(axis, r + 1);
    if (a < 0 || a > (int64_t)r)
        return BAD(m, "axis %lld is out of range for an output of rank %u", (long long)axis, r + 1);
    if (r + 1 > KILN_MAX_DIMS)
        return UNSUP(m, "the result would have %u dimensions; at most %d", r + 1, KILN_MAX_DIMS);
    if (!dv->is_const)
        return UNSUP(m,
                     "dynamic shape: input 1 (depth, '%s') must be a constant initializer or "
                     "Constant output",
                     dv->name);
    if (dv->c.numel != 1)
        return BAD(m, "input 1 (depth) has %lld elements; it must be a scalar",
                   (long long)dv->c.numel);
    double dd = trunc(dv->c.data[0]);
    if (!(dd >= 1 && dd <= (double)ONNX_CONST_MAX_ELEMS))
        return BAD(m, "depth %g is not in [1, %lld]", dv->c.data[0],
                   (long long)ONNX_CONST_MAX_ELEMS);
    int64_t depth = (int64_t)dd;
    if (onnx_vrank(m, vv) != 1 || onnx_vshape(m, vv)[0] != 2)
        return BAD(m, "input 2 (values, '%s') must hold two values [off, on]", vv->name);

    /* the indices as i64, negative ones counting from the end, with a 1 at the new axis */
    enum kiln_dtype   idt = onnx_vdtype(m, iv);
    uint32_t          t = onnx_tensor(m, iv);
    struct onnx_attrs ca = {0};
    if (idt != KILN_DTYPE_I64) {
        onnx_at_str(m, &ca, "dtype", "i64");
        t = onnx_lib1(m, "cast", onnx_suffixed(m, o, "index"), t, &ca);
    }
    uint32_t neg = onnx_lib2(m, "less", onnx_suffixed(m, o, "neg"), t,
                             onnx_scalar(m, onnx_suffixed(m, o, "zero"), 0, KILN_DTYPE_I64));
    uint32_t wrapped =
        onnx_lib2(m, "add", onnx_suffixed(m, o, "wrapped"), t,
                  onnx_scalar(m, onnx_suffixed(m, o, "depth"), (double)depth, KILN_DTYPE_I64));
    uint32_t in[3] = {neg, wrapped, t};
    t = onnx_lib(m, "where", onnx_suffixed(m, o, "norm"), 3, in, NULL);
    int64_t sh[KILN_MAX_DIMS], ish[KILN_MAX_DIMS];
    for (uint32_t d = 0, k = 0; d <= r; d++) {
        sh[d] = d == a ? 1 : onnx_vshape(m, iv)[k++];
        ish[d] = d == a ? depth : 1;
    }
    t = onnx_reshape(m, onnx_suffixed(m, o, "unsq"), t, r + 1, sh);

    /* 0 .. depth-1 along the new axis */
    struct frontend_const c = {.dtype = KILN_DTYPE_I64, .ndim = r + 1, .numel = depth};
    memcpy(c.shape, ish, sizeof(int64_t) * (r + 1));
    c.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)depth);
    if (!c.data)
        return m->ctx->err.status;
    for (int64_t k = 0; k < depth; k++)
        c.data[k] = (double)k;
    uint32_t hot = onnx_lib2(m, "equal", onnx_suffixed(m, o, "hot"), t,
                             onnx_weight(m, onnx_suffixed(m, o, "iota"), &c));

    /* values[1] where hot, values[0] elsewhere */
    uint32_t v = onnx_tensor(m, vv), on, off;
    if (vv->is_const) {
        on = onnx_scalar(m, onnx_suffixed(m, o, "on"), vv->c.data[1], vv->c.dtype);
        off = onnx_scalar(m, onnx_suffixed(m, o, "off"), vv->c.data[0], vv->c.dtype);
    } else {
        int64_t           b[4] = {1, 2, 0, 1};
        struct onnx_attrs s1 = {0}, s0 = {0};
        onnx_at_ints(m, &s1, "starts", &b[0], 1);
        onnx_at_ints(m, &s1, "ends", &b[1], 1);
        onnx_at_ints(m, &s0, "starts", &b[2], 1);
        onnx_at_ints(m, &s0, "ends", &b[3], 1);
        on = onnx_lib1(m, "slice", onnx_suffixed(m, o, "on"), v, &s1);
        off = onnx_lib1(m, "slice", onnx_suffixed(m, o, "off"), v, &s0);
    }
    in[0] = hot;
    in[1] = on;
    in[2] = off;
    return onnx_set_output(m, 0, onnx_lib(m, "where", o, 3, in, NULL));
}

/* EyeLike: a constant of the input's 2-D shape with ones on diagonal k (j - i = k), in `dtype`
 * or the input's dtype. */
enum kiln_status
onnx_op_eye_like(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    if (onnx_vrank(m, x) != 2)
        return BAD(m, "input 0 ('%s') has rank %u; EyeLike needs a 2-D input", x->name,
                   onnx_vrank(m, x));
    enum kiln_dtype             dt = onnx_vdtype(m, x);
    const Onnx__AttributeProto *da = onnx_attr(m, "dtype");
    if (da && da->has_i) {
        dt = da->i >= INT32_MIN && da->i <= INT32_MAX ? frontend_onnx_dtype((int32_t)da->i)
                                                      : KILN_DTYPE_COUNT;
        if (dt == KILN_DTYPE_COUNT)
            return UNSUP(m, "dtype %lld is not supported (kiln has no such dtype)",
                         (long long)da->i);
    }
    const int64_t        *s = onnx_vshape(m, x);
    int64_t               k = onnx_attr_int(m, "k", 0);
    struct frontend_const c = {.dtype = dt, .ndim = 2, .shape = {s[0], s[1]}};
    if (s[0] > ONNX_CONST_MAX_ELEMS / s[1])
        return UNSUP(m, "the output has more than %lld elements", (long long)ONNX_CONST_MAX_ELEMS);
    c.numel = s[0] * s[1];
    c.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)c.numel);
    if (!c.data)
        return m->ctx->err.status;
    for (int64_t i = 0; i < s[0]; i++)
        for (int64_t j = 0; j < s[1]; j++)
            c.data[i * s[1] + j] = j - i == k;
    return onnx_set_const(m, 0, &c);
}

/* ---- DepthToSpace, SpaceToDepth ---- */

/* reshape to sh6, transpose by perm, reshape to out4: the block rearrangements. */
static enum kiln_status
block_shuffle(struct onnx_imp *m, const int64_t *sh6, const int64_t *perm, const int64_t *out4)
{
    const char *o = onnx_out0(m);
    uint32_t t = onnx_reshape(m, onnx_suffixed(m, o, "blocks"), onnx_tensor(m, m->in[0]), 6, sh6);
    struct onnx_attrs as = {0};
    onnx_at_ints(m, &as, "perm", perm, 6);
    t = onnx_lib1(m, "transpose", onnx_suffixed(m, o, "moved"), t, &as);
    return onnx_set_output(m, 0, onnx_reshape(m, o, t, 4, out4));
}

/* The checks both share: a 4-D input and a blocksize b ≥ 1 dividing `what` of its dimensions
 * (C by b² for DepthToSpace, H and W by b for SpaceToDepth). */
static bool
block_check(struct onnx_imp *m, int64_t *b)
{
    struct onnx_value *x = m->in[0];
    if (onnx_vrank(m, x) != 4) {
        BAD(m, "input 0 ('%s') has rank %u; a 4-D input (N, C, H, W) is required", x->name,
            onnx_vrank(m, x));
        return false;
    }
    const Onnx__AttributeProto *a = onnx_attr(m, "blocksize");
    if (!a || !a->has_i) {
        BAD(m, "attribute 'blocksize' is required");
        return false;
    }
    *b = a->i;
    if (*b < 1 || *b > (int64_t)1 << 20) {
        BAD(m, "blocksize %lld must be at least 1", (long long)*b);
        return false;
    }
    return true;
}

enum kiln_status
onnx_op_depth_to_space(struct onnx_imp *m)
{
    int64_t b;
    if (!block_check(m, &b))
        return m->ctx->err.status;
    const int64_t *s = onnx_vshape(m, m->in[0]);
    const char    *mode = onnx_attr_str(m, "mode", "DCR");
    if (!mode)
        return m->ctx->err.status;
    bool crd = !strcmp(mode, "CRD");
    if (!crd && strcmp(mode, "DCR"))
        return BAD(m, "mode '%s' is not DCR or CRD", mode);
    if (s[1] % (b * b))
        return BAD(m, "the channels (%lld) are not a multiple of blocksize² (%lld)",
                   (long long)s[1], (long long)(b * b));
    int64_t c = s[1] / (b * b), out[4] = {s[0], c, s[2] * b, s[3] * b};
    int64_t dcr[6] = {s[0], b, b, c, s[2], s[3]}, pdcr[6] = {0, 3, 4, 1, 5, 2};
    int64_t crdv[6] = {s[0], c, b, b, s[2], s[3]}, pcrd[6] = {0, 1, 4, 2, 5, 3};
    return block_shuffle(m, crd ? crdv : dcr, crd ? pcrd : pdcr, out);
}

enum kiln_status
onnx_op_space_to_depth(struct onnx_imp *m)
{
    int64_t b;
    if (!block_check(m, &b))
        return m->ctx->err.status;
    const int64_t *s = onnx_vshape(m, m->in[0]);
    if (s[2] % b || s[3] % b)
        return BAD(m, "the height and width (%lld, %lld) are not multiples of blocksize %lld",
                   (long long)s[2], (long long)s[3], (long long)b);
    int64_t sh[6] = {s[0], s[1], s[2] / b, b, s[3] / b, b}, perm[6] = {0, 3, 5, 1, 2, 4};
    int64_t out[4] = {s[0], s[1] * b * b, s[2] / b, s[3] / b};
    return block_shuffle(m, sh, perm, out);
}

/* ---- GatherND ---- */

/* GatherND: the k index components of each row of indices[..., k] (negative ones counting from
 * the end of their dimension) are made one linear index into the data's first batch_dims + k
 * dimensions flattened (with the row's batch offset), and a gather along axis 0 of that
 * flattened data reads the slices. The gather clamps the linear index, so an index out of range
 * reads some element of the data, never out of bounds. */
enum kiln_status
onnx_op_gather_nd(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0], *iv = m->in[1];
    const char        *o = onnx_out0(m);
    uint32_t           r = onnx_vrank(m, x), q = onnx_vrank(m, iv);
    const int64_t     *xs = onnx_vshape(m, x), *is = onnx_vshape(m, iv);
    int64_t            bd = onnx_attr_int(m, "batch_dims", 0);
    if (r < 1 || q < 1)
        return BAD(m, "data and indices must have rank at least 1 (ranks %u, %u)", r, q);
    if (bd < 0 || bd >= (int64_t)q || bd >= (int64_t)r)
        return BAD(m, "batch_dims %lld must be below both ranks (%u, %u)", (long long)bd, r, q);
    uint32_t b = (uint32_t)bd;
    int64_t  k = is[q - 1];
    if (k < 1 || k > (int64_t)(r - b))
        return BAD(m, "the last dimension of the indices (%lld) must be in [1, %u]", (long long)k,
                   r - b);
    if (onnx_vdtype(m, iv) != KILN_DTYPE_I64 && onnx_vdtype(m, iv) != KILN_DTYPE_I32)
        return BAD(m, "input 1 ('%s') is %s; indices must be int32 or int64", iv->name,
                   kiln_dtype_name(onnx_vdtype(m, iv)));
    for (uint32_t d = 0; d < b; d++)
        if (is[d] != xs[d])
            return BAD(m, "batch dimension %u differs: %lld in the data, %lld in the indices", d,
                       (long long)xs[d], (long long)is[d]);

    uint32_t t = onnx_tensor(m, iv);
    if (onnx_vdtype(m, iv) != KILN_DTYPE_I64) {
        struct onnx_attrs ca = {0};
        onnx_at_str(m, &ca, "dtype", "i64");
        t = onnx_lib1(m, "cast", onnx_suffixed(m, o, "i64"), t, &ca);
    }
    /* linear = sum_j wrap(idx[..., j]) * stride_j over data dimensions b .. b+k-1 */
    uint32_t lin = KILN_NONE;
    int64_t  stride = 1, rows = 1;
    for (int64_t j = k - 1; j >= 0; j--) {
        int64_t           dim = xs[b + j], st[3] = {j, j + 1, (int64_t)q - 1};
        struct onnx_attrs sa = {0};
        onnx_at_ints(m, &sa, "starts", &st[0], 1);
        onnx_at_ints(m, &sa, "ends", &st[1], 1);
        onnx_at_ints(m, &sa, "axes", &st[2], 1);
        char     nm[32];
        uint32_t c = onnx_lib1(m, "slice", onnx_suffixed(m, o, "comp"), t, &sa);
        snprintf(nm, sizeof nm, "neg%lld", (long long)j);
        uint32_t neg = onnx_lib2(m, "less", onnx_suffixed(m, o, nm), c,
                                 onnx_scalar(m, onnx_suffixed(m, o, "zero"), 0, KILN_DTYPE_I64));
        uint32_t wr =
            onnx_lib2(m, "add", onnx_suffixed(m, o, "wrapped"), c,
                      onnx_scalar(m, onnx_suffixed(m, o, "dim"), (double)dim, KILN_DTYPE_I64));
        uint32_t in[3] = {neg, wr, c};
        c = onnx_lib(m, "where", onnx_suffixed(m, o, "idx"), 3, in, NULL);
        if (stride != 1)
            c = onnx_lib2(
                m, "mul", onnx_suffixed(m, o, "scaled"), c,
                onnx_scalar(m, onnx_suffixed(m, o, "stride"), (double)stride, KILN_DTYPE_I64));
        lin = lin == KILN_NONE ? c : onnx_lib2(m, "add", onnx_suffixed(m, o, "lin"), lin, c);
        stride *= dim;
    }
    rows = stride;
    /* the batch offset: the flattened batch index times the rows of one batch */
    int64_t nb = 1;
    for (uint32_t d = 0; d < b; d++)
        nb *= xs[d];
    if (b) {
        struct frontend_const bc = {.dtype = KILN_DTYPE_I64, .ndim = q, .numel = nb};
        for (uint32_t d = 0; d < q; d++)
            bc.shape[d] = d < b ? xs[d] : 1;
        bc.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)nb);
        if (!bc.data)
            return m->ctx->err.status;
        for (int64_t i = 0; i < nb; i++)
            bc.data[i] = (double)(i * rows);
        lin = onnx_lib2(m, "add", onnx_suffixed(m, o, "batched"), lin,
                        onnx_weight(m, onnx_suffixed(m, o, "batch_offset"), &bc));
    }
    /* lin is indices.shape[:-1] + [1]: drop the 1 (rank 0 stays a [1]-shaped index) */
    int64_t lsh[KILN_MAX_DIMS], xsh[KILN_MAX_DIMS];
    memcpy(lsh, is, sizeof(int64_t) * (q - 1));
    lin = onnx_reshape(m, onnx_suffixed(m, o, "linear"), lin, q - 1, lsh);
    uint32_t xr = r - b - (uint32_t)k + 1;
    xsh[0] = nb * rows;
    memcpy(xsh + 1, xs + b + k, sizeof(int64_t) * (xr - 1));
    uint32_t xf = onnx_reshape(m, onnx_suffixed(m, o, "flat"), onnx_tensor(m, x), xr, xsh);
    if (q - 1 + xr - 1 > KILN_MAX_DIMS)
        return UNSUP(m, "the result would have %u dimensions; at most %d", q + xr - 2,
                     KILN_MAX_DIMS);
    struct onnx_attrs ga = {0};
    onnx_at_int(m, &ga, "axis", 0);
    uint32_t in[2] = {xf, lin};
    return onnx_set_output(m, 0, onnx_lib(m, "gather", o, 2, in, &ga));
}

/* ---- InstanceNormalization, MeanVarianceNormalization, LRN ---- */

/* A float input of rank at least `min_rank`; false (error set) otherwise. */
static bool
norm_check(struct onnx_imp *m, uint32_t min_rank)
{
    struct onnx_value *x = m->in[0];
    if (!onnx_is_float(onnx_vdtype(m, x))) {
        BAD(m, "input 0 ('%s') is %s; a float type is required", x->name,
            kiln_dtype_name(onnx_vdtype(m, x)));
        return false;
    }
    if (onnx_vrank(m, x) < min_rank) {
        BAD(m, "input 0 ('%s') has rank %u; at least %u is required", x->name, onnx_vrank(m, x),
            min_rank);
        return false;
    }
    return true;
}

/* v [C] reshaped to [C, 1, ...] (rank - 1 dimensions) to broadcast over x[N, C, ...]. */
static uint32_t
per_channel(struct onnx_imp *m, struct onnx_value *v, uint32_t rank, const char *suffix)
{
    int64_t sh[KILN_MAX_DIMS];
    sh[0] = onnx_vshape(m, v)[0];
    for (uint32_t d = 1; d + 1 < rank; d++)
        sh[d] = 1;
    return onnx_reshape(m, onnx_suffixed(m, onnx_out0(m), suffix), onnx_tensor(m, v), rank - 1, sh);
}

/* InstanceNormalization: layer_norm over the spatial dimensions 2.., then scale and B per
 * channel. */
enum kiln_status
onnx_op_instance_norm(struct onnx_imp *m)
{
    if (!norm_check(m, 3))
        return m->ctx->err.status;
    struct onnx_value *x = m->in[0];
    uint32_t           r = onnx_vrank(m, x);
    const char        *o = onnx_out0(m);
    for (uint32_t i = 1; i < 3; i++)
        if (onnx_vrank(m, m->in[i]) != 1 || onnx_vshape(m, m->in[i])[0] != onnx_vshape(m, x)[1]
            || onnx_vdtype(m, m->in[i]) != onnx_vdtype(m, x))
            return BAD(m,
                       "input %u ('%s') must be a 1-D tensor of input 0's dtype with C = %lld "
                       "entries",
                       i, m->in[i]->name, (long long)onnx_vshape(m, x)[1]);
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "axis", 2);
    onnx_at_float(m, &as, "eps", onnx_attr_float(m, "epsilon", 1e-5));
    uint32_t t = onnx_lib1(m, "layer_norm", onnx_suffixed(m, o, "norm"), onnx_tensor(m, x), &as);
    t = onnx_lib2(m, "mul", onnx_suffixed(m, o, "scaled"), t, per_channel(m, m->in[1], r, "scale"));
    return onnx_set_output(m, 0, onnx_lib2(m, "add", o, t, per_channel(m, m->in[2], r, "bias")));
}

/* MeanVarianceNormalization: (x - mean) / (sqrt(variance) + 1e-9) over `axes` (default 0, 2,
 * 3), the statistics in two passes (mean, then the mean of squared deviations). */
enum kiln_status
onnx_op_mvn(struct onnx_imp *m)
{
    if (!norm_check(m, 1))
        return m->ctx->err.status;
    struct onnx_value *x = m->in[0];
    const char        *o = onnx_out0(m);
    int64_t           *axes = kiln_arena_alloc(m->ctx, sizeof(int64_t) * KILN_MAX_DIMS);
    uint32_t           n;
    bool               present;
    if (!axes || !onnx_attr_ints(m, "axes", axes, &n, KILN_MAX_DIMS, &present))
        return m->ctx->err.status;
    if (!present) {
        if (onnx_vrank(m, x) != 4)
            return BAD(m, "input 0 ('%s') has rank %u; the default axes (0, 2, 3) need rank 4",
                       x->name, onnx_vrank(m, x));
        axes[0] = 0;
        axes[1] = 2;
        axes[2] = 3;
        n = 3;
    }
    struct onnx_attrs as = {0};
    onnx_at_ints(m, &as, "axes", axes, n);
    onnx_at_int(m, &as, "keepdims", 1);
    uint32_t t = onnx_tensor(m, x);
    uint32_t mean = onnx_lib1(m, "reduce_mean", onnx_suffixed(m, o, "mean"), t, &as);
    uint32_t d = onnx_lib2(m, "sub", onnx_suffixed(m, o, "centred"), t, mean);
    uint32_t sq = onnx_lib1(m, "square", onnx_suffixed(m, o, "sq"), d, NULL);
    uint32_t var = onnx_lib1(m, "reduce_mean", onnx_suffixed(m, o, "var"), sq, &as);
    uint32_t sd = onnx_lib1(m, "sqrt", onnx_suffixed(m, o, "std"), var, NULL);
    sd = onnx_lib2(m, "add", onnx_suffixed(m, o, "den"), sd,
                   onnx_scalar(m, onnx_suffixed(m, o, "eps"), 1e-9, onnx_vdtype(m, x)));
    return onnx_set_output(m, 0, onnx_lib2(m, "div", o, d, sd));
}

/* LRN: x / (bias + alpha/size · Σ x²)^beta, the sum over the channels c - ⌊(size-1)/2⌋ ..
 * c + ⌈(size-1)/2⌉ within [0, C): x² zero-padded along axis 1, then `size` slices added. */
enum kiln_status
onnx_op_lrn(struct onnx_imp *m)
{
    if (!norm_check(m, 3))
        return m->ctx->err.status;
    struct onnx_value *x = m->in[0];
    uint32_t           r = onnx_vrank(m, x);
    const char        *o = onnx_out0(m);
    enum kiln_dtype    dt = onnx_vdtype(m, x);
    int64_t            size = onnx_attr_int(m, "size", 0), c = onnx_vshape(m, x)[1];
    if (!onnx_attr(m, "size"))
        return BAD(m, "attribute 'size' is required");
    if (size < 1 || size > 1024)
        return BAD(m, "size %lld is not in [1, 1024]", (long long)size);
    double alpha = onnx_attr_float(m, "alpha", 1e-4), beta = onnx_attr_float(m, "beta", 0.75),
           bias = onnx_attr_float(m, "bias", 1.0);
    uint32_t t = onnx_tensor(m, x);
    uint32_t sq = onnx_lib1(m, "square", onnx_suffixed(m, o, "sq"), t, NULL);
    int64_t *pads = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 2 * r);
    if (!pads)
        return m->ctx->err.status;
    memset(pads, 0, sizeof(int64_t) * 2 * r);
    pads[1] = (size - 1) / 2;
    pads[r + 1] = size - 1 - pads[1];
    struct onnx_attrs pa = {0};
    onnx_at_ints(m, &pa, "pads", pads, 2 * r);
    uint32_t padded = size > 1 ? onnx_lib1(m, "pad", onnx_suffixed(m, o, "padded"), sq, &pa) : sq;
    uint32_t sum = KILN_NONE;
    for (int64_t i = 0; i < size; i++) {
        int64_t          *b = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 3);
        struct onnx_attrs sa = {0};
        if (!b)
            return m->ctx->err.status;
        b[0] = i;
        b[1] = i + c;
        b[2] = 1;
        onnx_at_ints(m, &sa, "starts", &b[0], 1);
        onnx_at_ints(m, &sa, "ends", &b[1], 1);
        onnx_at_ints(m, &sa, "axes", &b[2], 1);
        uint32_t s =
            size > 1 ? onnx_lib1(m, "slice", onnx_suffixed(m, o, "window"), padded, &sa) : padded;
        sum = sum == KILN_NONE ? s : onnx_lib2(m, "add", onnx_suffixed(m, o, "sum"), sum, s);
    }
    uint32_t den =
        onnx_lib2(m, "mul", onnx_suffixed(m, o, "scaled"), sum,
                  onnx_scalar(m, onnx_suffixed(m, o, "alpha"), alpha / (double)size, dt));
    den = onnx_lib2(m, "add", onnx_suffixed(m, o, "biased"), den,
                    onnx_scalar(m, onnx_suffixed(m, o, "bias"), bias, dt));
    den = onnx_lib2(m, "pow", onnx_suffixed(m, o, "den"), den,
                    onnx_scalar(m, onnx_suffixed(m, o, "beta"), beta, dt));
    return onnx_set_output(m, 0, onnx_lib2(m, "div", o, t, den));
}

/* ---- ScatterElements, Scatter ---- */

/* ScatterElements (and Scatter, its name before opset 11): the library's scatter_elements,
 * which reads the updates from the output's side. */
enum kiln_status
onnx_op_scatter_elements(struct onnx_imp *m)
{
    const char *red = onnx_attr_str(m, "reduction", "none");
    if (!red)
        return m->ctx->err.status;
    if (strcmp(red, "none") && strcmp(red, "add") && strcmp(red, "mul") && strcmp(red, "max")
        && strcmp(red, "min"))
        return BAD(m, "reduction '%s' is not one of none, add, mul, max, min", red);
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "axis", onnx_attr_int(m, "axis", 0));
    onnx_at_str(m, &as, "reduction", red);
    uint32_t in[3];
    for (uint32_t i = 0; i < 3; i++)
        in[i] = onnx_tensor(m, m->in[i]);
    return onnx_set_output(m, 0, onnx_lib(m, "scatter_elements", onnx_out0(m), 3, in, &as));
}

/* ScatterND: indices [..., k] and updates [...] + data.shape[k:] flattened to [Q, k] and
 * [Q] + data.shape[k:] for the library's scatter_nd. */
enum kiln_status
onnx_op_scatter_nd(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0], *iv = m->in[1], *uv = m->in[2];
    const char        *o = onnx_out0(m);
    const char        *red = onnx_attr_str(m, "reduction", "none");
    if (!red)
        return m->ctx->err.status;
    if (strcmp(red, "none") && strcmp(red, "add") && strcmp(red, "mul") && strcmp(red, "max")
        && strcmp(red, "min"))
        return BAD(m, "reduction '%s' is not one of none, add, mul, max, min", red);
    uint32_t       r = onnx_vrank(m, x), q = onnx_vrank(m, iv), ur = onnx_vrank(m, uv);
    const int64_t *xs = onnx_vshape(m, x), *is = onnx_vshape(m, iv), *us = onnx_vshape(m, uv);
    if (r < 1 || q < 1)
        return BAD(m, "data and indices must have rank at least 1 (ranks %u, %u)", r, q);
    int64_t k = is[q - 1], rows = 1;
    if (k < 1 || k > (int64_t)r)
        return BAD(m, "the last dimension of the indices (%lld) must be in [1, %u]", (long long)k,
                   r);
    bool ok = ur == q - 1 + r - (uint32_t)k;
    for (uint32_t d = 0; ok && d < ur; d++)
        ok = us[d] == (d + 1 < q ? is[d] : xs[k + d - (q - 1)]);
    if (!ok)
        return BAD(m, "input 2 ('%s') must have the shape indices.shape[:-1] + data.shape[k:]",
                   uv->name);
    for (uint32_t d = 0; d + 1 < q; d++)
        rows *= is[d];
    int64_t ish[2] = {rows, k}, ush[KILN_MAX_DIMS];
    ush[0] = rows;
    memcpy(ush + 1, xs + k, sizeof(int64_t) * (r - (uint32_t)k));
    uint32_t in[3] = {
        onnx_tensor(m, x),
        onnx_reshape(m, onnx_suffixed(m, o, "rows"), onnx_tensor(m, iv), 2, ish),
        onnx_reshape(m, onnx_suffixed(m, o, "updates"), onnx_tensor(m, uv), 1 + r - (uint32_t)k,
                     ush),
    };
    struct onnx_attrs as = {0};
    onnx_at_str(m, &as, "reduction", red);
    return onnx_set_output(m, 0, onnx_lib(m, "scatter_nd", o, 3, in, &as));
}
