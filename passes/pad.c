/* passes/pad.c -- padded copies of tensors read through bounds checks.
 *
 * A convolution or pooling reads its input as `select(0 <= ih && ih < H && ..., x[.., ih, iw],
 * 0)`: the window may hang over the edge, and the checks keep it in bounds. When the
 * innermost, vectorised loop runs along a checked dimension, every lane tests its own index
 * and every load is masked. The `pad` step (passes/state.c) copies x once into x.pad, a tensor
 * larger by the overhang on each side and holding the fill value there; the readers then load
 * x.pad at shifted indices with the bounds checks gone. This file finds the overhang
 * (kiln_pad_scan), checks that every read leaving the bounds is guarded by exactly those
 * checks, and rewrites the readers (kiln_pad_rewrite). */
#include "passes.h"

/* One scan or rewrite of a definition's reads of t. */
struct padding {
    kiln_ctx              *ctx;
    uint32_t               t, tpad; /* tpad: rewrite only */
    const int64_t         *shape;
    uint32_t               ndim;
    struct kiln_var_range  r[KILN_MAX_DIMS + KILN_MAX_REDUCE]; /* the definition's variables */
    uint32_t               nr;
    struct kiln_pad       *grow; /* scan: widened to cover every read */
    const struct kiln_pad *pad;  /* rewrite: the padding applied */
    const char            *why;
};

/* Sets up P for a definition whose axes range over [0, ax_ext[k]) and reduction variables over
 * [0, rext[r]). */
static enum kiln_status
begin(struct padding *P, kiln_ctx *ctx, uint32_t t, const int64_t *shape, uint32_t ndim,
      const int64_t *ax_ext, uint32_t nax, const int64_t *rext, uint32_t nred)
{
    *P = (struct padding){.ctx = ctx, .t = t, .shape = shape, .ndim = ndim};
    if (nax > KILN_MAX_DIMS || nred > KILN_MAX_REDUCE || ndim > KILN_MAX_DIMS)
        return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "pad", "too many dimensions");
    for (uint32_t k = 0; k < nax; k++)
        P->r[P->nr++] = (struct kiln_var_range){kiln_axis(ctx, k), 0, ax_ext[k] - 1};
    for (uint32_t k = 0; k < nred; k++)
        P->r[P->nr++] = (struct kiln_var_range){kiln_rvar(ctx, k), 0, rext[k] - 1};
    return KILN_OK;
}

/* Whether load (of t) may leave t's bounds, judged by its index ranges; lo_side / hi_side
 * receive the sides per dimension. An index the loops do not bound sets *unbounded. */
static bool
overhangs(const struct padding *P, kiln_expr load, int64_t *lo, int64_t *hi, bool *lo_side,
          bool *hi_side, bool *unbounded)
{
    bool any = false;
    for (uint32_t d = 0; d < P->ndim; d++) {
        if (!kiln_expr_bounds(P->ctx, kiln_load_idx(P->ctx, load, d), P->r, P->nr, &lo[d], &hi[d]))
            *unbounded = true;
        lo_side[d] = lo[d] < 0;
        hi_side[d] = hi[d] > P->shape[d] - 1;
        any |= lo_side[d] || hi_side[d];
    }
    return any;
}

static bool
is_load_of(const kiln_ctx *ctx, kiln_expr e, uint32_t t)
{
    const struct kiln_node *n = kiln_node_get(ctx, e);
    return n->op == KILN_OP_LOAD && (uint32_t)n->imm == t;
}

static bool
scan_node(void *ud, kiln_expr e)
{
    struct padding         *P = ud;
    const struct kiln_node *n = kiln_node_get(P->ctx, e);
    int64_t                 lo[KILN_MAX_DIMS], hi[KILN_MAX_DIMS];
    bool                    los[KILN_MAX_DIMS], his[KILN_MAX_DIMS], unbounded = false;
    if (n->op == KILN_OP_SELECT && !P->grow->fill.id) {
        kiln_expr load = {n->kid[1]}, fill = {n->kid[2]};
        if (is_load_of(P->ctx, load, P->t) && kiln_load_nidx(P->ctx, load) == P->ndim
            && overhangs(P, load, lo, hi, los, his, &unbounded))
            P->grow->fill = fill;
        return true;
    }
    if (!is_load_of(P->ctx, e, P->t))
        return true;
    if (kiln_load_nidx(P->ctx, e) != P->ndim) {
        P->why = "a read has the wrong number of indices";
        return false;
    }
    overhangs(P, e, lo, hi, los, his, &unbounded);
    if (unbounded) {
        P->why = "an index is not bounded by the loops";
        return false;
    }
    for (uint32_t d = 0; d < P->ndim; d++) {
        if (los[d] && -lo[d] > P->grow->lo[d])
            P->grow->lo[d] = -lo[d];
        if (his[d] && hi[d] - (P->shape[d] - 1) > P->grow->hi[d])
            P->grow->hi[d] = hi[d] - (P->shape[d] - 1);
    }
    return true;
}

enum kiln_status
kiln_pad_scan(kiln_ctx *ctx, kiln_expr body, uint32_t t, const int64_t *shape, uint32_t ndim,
              const int64_t *ax_ext, uint32_t nax, const int64_t *rext, uint32_t nred,
              struct kiln_pad *pad, const char **why)
{
    struct padding P;
    *why = NULL;
    KILN_TRY(begin(&P, ctx, t, shape, ndim, ax_ext, nax, rext, nred));
    P.grow = pad;
    kiln_expr_visit_nodes(ctx, body, scan_node, &P);
    *why = P.why;
    return kiln_ok(ctx) ? KILN_OK : ctx->err.status;
}

/* t.pad at the indices of load (of t), shifted by the low padding. */
static kiln_expr
shifted(struct padding *W, kiln_expr load)
{
    kiln_expr idx[KILN_MAX_DIMS];
    for (uint32_t d = 0; d < W->ndim; d++)
        idx[d] = kiln_add(W->ctx, kiln_load_idx(W->ctx, load, d), kiln_idx(W->ctx, W->pad->lo[d]));
    return kiln_load(W->ctx, W->tpad, kiln_expr_dtype(W->ctx, load), W->ndim, idx);
}

/* Whether the conjunction with leaves c[0..n) holds `need` (directly, or after simplifying
 * both under the definition's ranges); the matching leaf is cleared. */
static bool
take_check(struct padding *W, kiln_expr *c, uint32_t n, kiln_expr need)
{
    kiln_expr sneed = kiln_simplify_expr(W->ctx, need, W->r, W->nr);
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < n; i++) {
            if (!c[i].id)
                continue;
            bool same = pass == 0 ? c[i].id == need.id
                                  : kiln_simplify_expr(W->ctx, c[i], W->r, W->nr).id == sneed.id;
            if (same) {
                c[i] = (kiln_expr){0};
                return true;
            }
        }
    return false;
}

static void
conjuncts(const kiln_ctx *ctx, kiln_expr e, kiln_expr *c, uint32_t *n, uint32_t max)
{
    const struct kiln_node *nd = kiln_node_get(ctx, e);
    if (nd->op == KILN_OP_AND) {
        kiln_expr a = {nd->kid[0]}, b = {nd->kid[1]};
        conjuncts(ctx, a, c, n, max);
        conjuncts(ctx, b, c, n, max);
    } else if (*n < max) {
        c[(*n)++] = e;
    }
}

static bool
replace_node(void *ud, kiln_expr e, kiln_expr *out)
{
    struct padding *W = ud;
    kiln_ctx       *ctx = W->ctx;
    int64_t         lo[KILN_MAX_DIMS], hi[KILN_MAX_DIMS];
    bool            lo_side[KILN_MAX_DIMS], hi_side[KILN_MAX_DIMS], unbounded = false;
    if (is_load_of(ctx, e, W->t)) {
        /* a read outside any guarding select: it must stay in bounds */
        if (overhangs(W, e, lo, hi, lo_side, hi_side, &unbounded)) {
            W->why = "a read that can leave its bounds is not guarded by a select on them";
            *out = (kiln_expr){0};
            return true;
        }
        *out = shifted(W, e);
        return true;
    }
    const struct kiln_node *n = kiln_node_get(ctx, e);
    if (n->op != KILN_OP_SELECT)
        return false;
    kiln_expr cond = {n->kid[0]}, load = {n->kid[1]}, fill = {n->kid[2]};
    if (!is_load_of(ctx, load, W->t) || !overhangs(W, load, lo, hi, lo_side, hi_side, &unbounded))
        return false;
    double fv;
    if (!W->pad->fill.id || fill.id != W->pad->fill.id || !kiln_expr_is_const(ctx, fill, &fv)) {
        W->why = "the reads leaving the bounds are not all filled with one constant";
        *out = (kiln_expr){0};
        return true;
    }
    kiln_expr c[64];
    uint32_t  nc = 0;
    conjuncts(ctx, cond, c, &nc, KILN_COUNTOF(c));
    for (uint32_t d = 0; d < W->ndim; d++) {
        kiln_expr ix = kiln_load_idx(ctx, load, d);
        if ((lo_side[d] && !take_check(W, c, nc, kiln_le(ctx, kiln_idx(ctx, 0), ix)))
            || (hi_side[d]
                && !take_check(W, c, nc, kiln_lt(ctx, ix, kiln_idx(ctx, W->shape[d]))))) {
            W->why = "a select guarding a read does not check the bounds it can leave";
            *out = (kiln_expr){0};
            return true;
        }
    }
    kiln_expr rest = kiln_bool(ctx, true);
    for (uint32_t i = 0; i < nc; i++)
        if (c[i].id)
            rest = kiln_and(ctx, rest, c[i]);
    *out = kiln_select(ctx, rest, shifted(W, load), fill);
    return true;
}

kiln_expr
kiln_pad_rewrite(kiln_ctx *ctx, kiln_expr body, uint32_t t, uint32_t tpad, const int64_t *shape,
                 uint32_t ndim, const int64_t *ax_ext, uint32_t nax, const int64_t *rext,
                 uint32_t nred, const struct kiln_pad *pad, const char **why)
{
    struct padding W;
    *why = NULL;
    if (begin(&W, ctx, t, shape, ndim, ax_ext, nax, rext, nred) != KILN_OK)
        return (kiln_expr){0};
    W.tpad = tpad;
    W.pad = pad;
    kiln_expr out = kiln_expr_replace(ctx, body, replace_node, &W);
    *why = W.why;
    return W.why ? (kiln_expr){0} : out;
}
