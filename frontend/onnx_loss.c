/* frontend/onnx_loss.c -- ONNX's training losses, NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss, composed of library ops: the log-probability of each sample's target
 * class is a gather_elements along the class axis, its weight a gather from the weight input, and
 * an ignored target is masked out by `where`. The labels are data, so a target outside [0, C)
 * reads the element the library's gathers clamp it to; ONNX leaves such targets undefined unless
 * they equal ignore_index, whose loss and weight are 0. One handler per row of frontend/onnx.def;
 * the dispatcher (onnx.c) has checked the attributes and looked the inputs up into m->in[]. */
#include "onnx_impl.h"

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
