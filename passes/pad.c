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

#include <string.h>

struct scan {
    kiln_ctx                    *ctx;
    uint32_t                     t;
    const int64_t               *shape;
    uint32_t                     ndim;
    const struct kiln_var_range *r;
    uint32_t                     nr;
    struct kiln_pad             *pad;
    const char                  *why;
};

/* Whether load (of t) may leave t's bounds, judged by its index ranges (lo[d], hi[d] receive
 * them). An index the loops do not bound sets *unbounded. */
static bool
overhangs(kiln_ctx *ctx, kiln_expr load, const int64_t *shape, uint32_t ndim,
          const struct kiln_var_range *r, uint32_t nr, int64_t *lo, int64_t *hi, bool *unbounded)
{
    bool any = false;
    for (uint32_t d = 0; d < ndim; d++) {
        if (!kiln_expr_bounds(ctx, kiln_load_idx(ctx, load, d), r, nr, &lo[d], &hi[d]))
            *unbounded = true;
        any |= lo[d] < 0 || hi[d] > shape[d] - 1;
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
    struct scan            *S = ud;
    const struct kiln_node *n = kiln_node_get(S->ctx, e);
    int64_t                 lo[KILN_MAX_DIMS], hi[KILN_MAX_DIMS];
    bool                    unbounded = false;
    if (n->op == KILN_OP_SELECT && !S->pad->fill.id) {
        kiln_expr load = {n->kid[1]}, fill = {n->kid[2]};
        if (is_load_of(S->ctx, load, S->t) && kiln_load_nidx(S->ctx, load) == S->ndim
            && overhangs(S->ctx, load, S->shape, S->ndim, S->r, S->nr, lo, hi, &unbounded))
            S->pad->fill = fill;
        return true;
    }
    if (!is_load_of(S->ctx, e, S->t))
        return true;
    if (kiln_load_nidx(S->ctx, e) != S->ndim) {
        S->why = "a read has the wrong number of indices";
        return false;
    }
    overhangs(S->ctx, e, S->shape, S->ndim, S->r, S->nr, lo, hi, &unbounded);
    if (unbounded) {
        S->why = "an index is not bounded by the loops";
        return false;
    }
    for (uint32_t d = 0; d < S->ndim; d++) {
        if (lo[d] < 0 && -lo[d] > S->pad->lo[d])
            S->pad->lo[d] = -lo[d];
        if (hi[d] > S->shape[d] - 1 && hi[d] - (S->shape[d] - 1) > S->pad->hi[d])
            S->pad->hi[d] = hi[d] - (S->shape[d] - 1);
    }
    return true;
}

/* The ranges of a definition's variables: axis k over [0, ax_ext[k]), reduction r over
 * [0, rext[r]). */
static uint32_t
def_ranges(kiln_ctx *ctx, const int64_t *ax_ext, uint32_t nax, const int64_t *rext, uint32_t nred,
           struct kiln_var_range *r)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < nax; k++)
        r[n++] = (struct kiln_var_range){kiln_axis(ctx, k), 0, ax_ext[k] - 1};
    for (uint32_t k = 0; k < nred; k++)
        r[n++] = (struct kiln_var_range){kiln_rvar(ctx, k), 0, rext[k] - 1};
    return n;
}

enum kiln_status
kiln_pad_scan(kiln_ctx *ctx, kiln_expr body, uint32_t t, const int64_t *shape, uint32_t ndim,
              const int64_t *ax_ext, uint32_t nax, const int64_t *rext, uint32_t nred,
              struct kiln_pad *pad, const char **why)
{
    struct kiln_var_range r[KILN_MAX_DIMS + KILN_MAX_REDUCE];
    struct scan           S = {ctx, t, shape, ndim, r, 0, pad, NULL};
    *why = NULL;
    if (nax > KILN_MAX_DIMS || nred > KILN_MAX_REDUCE || ndim > KILN_MAX_DIMS)
        return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "pad", "too many dimensions");
    S.nr = def_ranges(ctx, ax_ext, nax, rext, nred, r);
    kiln_expr_visit_nodes(ctx, body, scan_node, &S);
    *why = S.why;
    return kiln_ok(ctx) ? KILN_OK : ctx->err.status;
}

struct rewrite {
    kiln_ctx                    *ctx;
    uint32_t                     t, tpad;
    const int64_t               *shape;
    uint32_t                     ndim;
    const struct kiln_var_range *r;
    uint32_t                     nr;
    const struct kiln_pad       *pad;
    const char                  *why;
};

/* t.pad at the indices of load (of t), shifted by the low padding. */
static kiln_expr
shifted(struct rewrite *W, kiln_expr load)
{
    kiln_expr idx[KILN_MAX_DIMS];
    for (uint32_t d = 0; d < W->ndim; d++)
        idx[d] = kiln_add(W->ctx, kiln_load_idx(W->ctx, load, d), kiln_idx(W->ctx, W->pad->lo[d]));
    return kiln_load(W->ctx, W->tpad, kiln_expr_dtype(W->ctx, load), W->ndim, idx);
}

/* Whether the conjunction with leaves c[0..n) holds `need` (directly, or after simplifying
 * both under the definition's ranges); the matching leaf is cleared. */
static bool
take_check(struct rewrite *W, kiln_expr *c, uint32_t n, kiln_expr need)
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
overhang_sides(struct rewrite *W, kiln_expr load, bool *lo_side, bool *hi_side)
{
    int64_t lo[KILN_MAX_DIMS], hi[KILN_MAX_DIMS];
    bool    unbounded = false, any;
    any = overhangs(W->ctx, load, W->shape, W->ndim, W->r, W->nr, lo, hi, &unbounded);
    for (uint32_t d = 0; d < W->ndim; d++) {
        lo_side[d] = lo[d] < 0;
        hi_side[d] = hi[d] > W->shape[d] - 1;
    }
    return any;
}

static bool
replace_node(void *ud, kiln_expr e, kiln_expr *out)
{
    struct rewrite *W = ud;
    kiln_ctx       *ctx = W->ctx;
    bool            lo_side[KILN_MAX_DIMS], hi_side[KILN_MAX_DIMS];
    if (is_load_of(ctx, e, W->t)) {
        /* a read outside any guarding select: it must stay in bounds */
        if (overhang_sides(W, e, lo_side, hi_side)) {
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
    if (!is_load_of(ctx, load, W->t) || !overhang_sides(W, load, lo_side, hi_side))
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
    struct kiln_var_range r[KILN_MAX_DIMS + KILN_MAX_REDUCE];
    struct rewrite        W = {ctx, t, tpad, shape, ndim, r, 0, pad, NULL};
    *why = NULL;
    if (nax > KILN_MAX_DIMS || nred > KILN_MAX_REDUCE || ndim > KILN_MAX_DIMS) {
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "pad", "too many dimensions");
        return (kiln_expr){0};
    }
    W.nr = def_ranges(ctx, ax_ext, nax, rext, nred, r);
    kiln_expr out = kiln_expr_replace(ctx, body, replace_node, &W);
    *why = W.why;
    return W.why ? (kiln_expr){0} : out;
}
