/* tests/gen.c -- test inputs shared by the code-generation tests (tests/gen.h): random kernel
 * graphs, random legal schedules, one small graph per library op. */
#include "gen.h"

#include "../passes/state.h"

#include <stdlib.h>
#include <string.h>

/* ---- random graphs ---- */

struct gen {
    kiln_ctx          *ctx;
    struct kiln_graph *g;
    struct kiln_rng   *r;
    uint32_t           ntensor;
};

static uint32_t
pick(struct kiln_rng *r, uint32_t n)
{
    return (uint32_t)kiln_rng_below(r, n);
}

static uint32_t
add_input(struct gen *G, const char *name, uint32_t ndim, const int64_t *shape, bool weight)
{
    return kiln_graph_add_tensor(G->g, name, KILN_DTYPE_F32, ndim, shape,
                                 weight ? KILN_TENSOR_WEIGHT : KILN_TENSOR_INPUT);
}

static kiln_expr
rand_leaf(struct gen *G, uint32_t t, uint32_t ndim_out)
{
    /* load of t indexed by axes of the output (t's rank <= output rank, aligned right) */
    kiln_ctx                 *ctx = G->ctx;
    const struct kiln_tensor *tt = &G->g->tensor[t];
    kiln_expr                 idx[KILN_MAX_DIMS];
    for (uint32_t d = 0; d < tt->ndim; d++)
        idx[d] = kiln_axis(ctx, ndim_out - tt->ndim + d);
    return kiln_load(ctx, t, KILN_DTYPE_F32, tt->ndim, idx);
}

static kiln_expr
rand_expr(struct gen *G, const uint32_t *src, uint32_t nsrc, uint32_t ndim, int depth)
{
    kiln_ctx        *ctx = G->ctx;
    struct kiln_rng *r = G->r;
    if (depth == 0 || pick(r, 4) == 0) {
        if (pick(r, 6) == 0) {
            /* not half-integers: their differences are integers, and a comparison of a
             * softmax sum (1 up to rounding) with one is decided by rounding alone */
            int k = (int)pick(r, 7);
            return kiln_float(ctx, k - 3.0 + 0.5 + 0.03125 * k, KILN_DTYPE_F32);
        }
        return rand_leaf(G, src[pick(r, nsrc)], ndim);
    }
    kiln_expr a = rand_expr(G, src, nsrc, ndim, depth - 1);
    switch (pick(r, 10)) {
    case 0:
        return kiln_unary(ctx, KILN_OP_NEG, a);
    case 1:
        return kiln_unary(ctx, KILN_OP_TANH, a);
    case 2:
        return kiln_max(ctx, a, kiln_float(ctx, 0, KILN_DTYPE_F32));
    case 3:
        return kiln_unary(ctx, KILN_OP_EXP,
                          kiln_unary(ctx, KILN_OP_NEG, kiln_unary(ctx, KILN_OP_ABS, a)));
    case 4:
        /* not 0.25: x - x^2 peaks at exactly 1/4, and near that tie whether the compiled code
         * fuses the multiply-add decides the branch (seed 1795764730 drew it) */
        return kiln_select(ctx, kiln_lt(ctx, a, kiln_float(ctx, 0.2578125, KILN_DTYPE_F32)), a,
                           rand_expr(G, src, nsrc, ndim, depth - 1));
    case 5:
        return kiln_sub(ctx, a, rand_expr(G, src, nsrc, ndim, depth - 1));
    case 6:
    case 7:
        return kiln_mul(ctx, a, rand_expr(G, src, nsrc, ndim, depth - 1));
    default:
        return kiln_add(ctx, a, rand_expr(G, src, nsrc, ndim, depth - 1));
    }
}

static void
begin(struct gen *G, uint32_t line)
{
    kiln_graph_begin_call(G->g, "compute", 0, NULL, 0, NULL, line, 1);
}

/* out[axes] = reduce over r of src[...] with r inserted at a random position of src's dims. */
static uint32_t
gen_reduce(struct gen *G, uint32_t src, const char *name)
{
    kiln_ctx                 *ctx = G->ctx;
    const struct kiln_tensor *s = &G->g->tensor[src];
    if (s->ndim < 2)
        return KILN_NONE;
    uint32_t  rd = pick(G->r, s->ndim);
    int64_t   shape[KILN_MAX_DIMS], rext = s->shape[rd];
    kiln_expr idx[KILN_MAX_DIMS];
    uint32_t  n = 0;
    for (uint32_t d = 0; d < s->ndim; d++) {
        if (d == rd) {
            idx[d] = kiln_rvar(ctx, 0);
        } else {
            idx[d] = kiln_axis(ctx, n);
            shape[n++] = s->shape[d];
        }
    }
    uint32_t  t = kiln_graph_add_tensor(G->g, name, KILN_DTYPE_F32, n, shape, KILN_TENSOR_OP);
    kiln_expr body = kiln_load(ctx, src, KILN_DTYPE_F32, s->ndim, idx);
    if (pick(G->r, 2))
        body = kiln_mul(ctx, body, body);
    enum kiln_reduce red = pick(G->r, 3) ? KILN_REDUCE_SUM : KILN_REDUCE_MAX;
    begin(G, 10);
    kiln_graph_add_op(G->g, t, red, 1, &rext, body, NULL, NULL);
    kiln_graph_end_call(G->g, t);
    return t;
}

/* C[i, j] = sum_k A[i, k] * B[k, j] with fresh A, B. */
static uint32_t
gen_matmul(struct gen *G, const char *name)
{
    kiln_ctx *ctx = G->ctx;
    int64_t   M = 1 + pick(G->r, 24), N = 1 + pick(G->r, 40), K = 1 + pick(G->r, 20);
    char      an[32], bn[32];
    snprintf(an, sizeof an, "%s_a", name);
    snprintf(bn, sizeof bn, "%s_b", name);
    int64_t   sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
    uint32_t  a = add_input(G, an, 2, sa, false), b = add_input(G, bn, 2, sb, true);
    uint32_t  c = kiln_graph_add_tensor(G->g, name, KILN_DTYPE_F32, 2, sc, KILN_TENSOR_OP);
    kiln_expr ia[2] = {kiln_axis(ctx, 0), kiln_rvar(ctx, 0)};
    kiln_expr ib[2] = {kiln_rvar(ctx, 0), kiln_axis(ctx, 1)};
    kiln_expr body = kiln_mul(ctx, kiln_load(ctx, a, KILN_DTYPE_F32, 2, ia),
                              kiln_load(ctx, b, KILN_DTYPE_F32, 2, ib));
    begin(G, 11);
    kiln_graph_add_op(G->g, c, KILN_REDUCE_SUM, 1, &K, body, NULL, NULL);
    kiln_graph_end_call(G->g, c);
    return c;
}

/* out[n, h, w] = sum_{kh, kw} select(inside, x[n, h+kh-1, w+kw-1], 0) * w[kh, kw]: padding. */
static uint32_t
gen_stencil(struct gen *G, const char *name)
{
    kiln_ctx *ctx = G->ctx;
    int64_t   C = 1 + pick(G->r, 4), H = 1 + pick(G->r, 12), W = 1 + pick(G->r, 12);
    int64_t   sx[3] = {C, H, W}, sw[2] = {3, 3}, rext[2] = {3, 3};
    char      xn[32], wn[32];
    snprintf(xn, sizeof xn, "%s_x", name);
    snprintf(wn, sizeof wn, "%s_w", name);
    uint32_t  x = add_input(G, xn, 3, sx, false), w = add_input(G, wn, 2, sw, true);
    uint32_t  t = kiln_graph_add_tensor(G->g, name, KILN_DTYPE_F32, 3, sx, KILN_TENSOR_OP);
    kiln_expr h =
        kiln_sub(ctx, kiln_add(ctx, kiln_axis(ctx, 1), kiln_rvar(ctx, 0)), kiln_idx(ctx, 1));
    kiln_expr ww =
        kiln_sub(ctx, kiln_add(ctx, kiln_axis(ctx, 2), kiln_rvar(ctx, 1)), kiln_idx(ctx, 1));
    kiln_expr in = kiln_and(
        ctx, kiln_and(ctx, kiln_le(ctx, kiln_idx(ctx, 0), h), kiln_lt(ctx, h, kiln_idx(ctx, H))),
        kiln_and(ctx, kiln_le(ctx, kiln_idx(ctx, 0), ww), kiln_lt(ctx, ww, kiln_idx(ctx, W))));
    kiln_expr ix[3] = {kiln_axis(ctx, 0), h, ww};
    kiln_expr iw[2] = {kiln_rvar(ctx, 0), kiln_rvar(ctx, 1)};
    kiln_expr body = kiln_mul(ctx,
                              kiln_select(ctx, in, kiln_load(ctx, x, KILN_DTYPE_F32, 3, ix),
                                          kiln_float(ctx, 0, KILN_DTYPE_F32)),
                              kiln_load(ctx, w, KILN_DTYPE_F32, 2, iw));
    begin(G, 12);
    kiln_graph_add_op(G->g, t, KILN_REDUCE_SUM, 2, rext, body, NULL, NULL);
    kiln_graph_end_call(G->g, t);
    return t;
}

/* An elementwise op over tensors of t's shape (and lower-rank broadcasts of fresh inputs). */
static uint32_t
gen_elementwise(struct gen *G, uint32_t t, const char *name)
{
    const struct kiln_tensor *tt = &G->g->tensor[t];
    uint32_t                  src[3] = {t, t, t}, nsrc = 1;
    int64_t                   shape[KILN_MAX_DIMS];
    uint32_t                  ndim = tt->ndim;
    memcpy(shape, tt->shape, sizeof shape);
    if (pick(G->r, 2) && ndim > 0) {
        char bn[32];
        snprintf(bn, sizeof bn, "%s_bias", name);
        uint32_t bd = 1 + pick(G->r, ndim);
        src[nsrc++] = add_input(G, bn, bd, shape + ndim - bd, true);
    }
    uint32_t  out = kiln_graph_add_tensor(G->g, name, KILN_DTYPE_F32, ndim, shape, KILN_TENSOR_OP);
    kiln_expr body = rand_expr(G, src, nsrc, ndim, 3);
    begin(G, 13);
    kiln_graph_add_op(G->g, out, KILN_REDUCE_NONE, 0, NULL, body, NULL, NULL);
    kiln_graph_end_call(G->g, out);
    return out;
}

/* ---- graphs from the op library ---- */

static struct kiln_attr
attr_int(kiln_ctx *ctx, const char *name, int64_t v)
{
    return (struct kiln_attr){.name = kiln_sym_cstr(ctx, name), .kind = KILN_ATTR_INT, .i = v};
}

static struct kiln_attr
attr_ints(kiln_ctx *ctx, const char *name, uint32_t n, const int64_t *v)
{
    return (struct kiln_attr){
        .name = kiln_sym_cstr(ctx, name), .kind = KILN_ATTR_INTS, .n = n, .ints = v};
}

/* One library call on fresh inputs; returns its output or KILN_NONE. */
static uint32_t
gen_library(struct gen *G)
{
    kiln_ctx        *ctx = G->ctx;
    struct kiln_rng *r = G->r;
    int64_t          N = 1 + pick(r, 2), C = 1 + pick(r, 6), H = 2 + pick(r, 9), W = 2 + pick(r, 9);
    int64_t          sx[4] = {N, C, H, W};
    uint32_t         x = add_input(G, "x", 4, sx, false), in[3] = {x};
    struct kiln_attr at[4];
    uint32_t         nin = 1, nat = 0, out = KILN_NONE;
    static int64_t   k2[2], p2[2], perm[4] = {0, 2, 3, 1};
    const char      *op;
    switch (pick(r, 9)) {
    case 0: { /* convolution, possibly grouped/depthwise and strided */
        int64_t groups = pick(r, 2) ? 1 : C, K = groups * (1 + pick(r, 3));
        int64_t R = 1 + pick(r, 3), S = 1 + pick(r, 3);
        if (R > H || S > W)
            R = S = 1;
        int64_t sw[4] = {K, C / groups, R, S};
        in[nin++] = add_input(G, "w", 4, sw, true);
        at[nat++] = attr_int(ctx, "stride", 1 + pick(r, 2));
        at[nat++] = attr_int(ctx, "padding", pick(r, 2));
        at[nat++] = attr_int(ctx, "groups", groups);
        op = "conv2d";
        break;
    }
    case 1:
    case 2:
        k2[0] = 1 + pick(r, H < 3 ? H : 3);
        k2[1] = 1 + pick(r, W < 3 ? W : 3);
        at[nat++] = attr_ints(ctx, "kernel", 2, k2);
        at[nat++] = attr_int(ctx, "stride", 1 + pick(r, 2));
        op = pick(r, 2) ? "max_pool2d" : "avg_pool2d";
        break;
    case 3:
        at[nat++] = attr_int(ctx, "axis", -1 - (int64_t)pick(r, 3));
        op = pick(r, 2) ? "softmax" : "log_softmax";
        break;
    case 4:
        k2[0] = k2[1] = 1 + 2 * pick(r, 2);
        p2[0] = p2[1] = k2[0] / 2;
        at[nat++] = attr_ints(ctx, "kernel", 2, k2);
        at[nat++] = attr_ints(ctx, "padding", 2, p2);
        op = "unfold";
        break;
    case 5:
        at[nat++] = attr_ints(ctx, "perm", 4, perm);
        op = "transpose";
        break;
    case 6:
        op = NULL; /* batch_norm, below */
        break;
    case 7:
        op = "gelu";
        break;
    default:
        op = "global_avg_pool2d";
        break;
    }
    if (!op) { /* batch_norm needs 5 inputs: rebuild the input list */
        uint32_t    bn[5] = {x, 0, 0, 0, 0};
        int64_t     sc[1] = {C};
        const char *names[4] = {"gamma", "beta", "mean", "var"};
        for (int i = 0; i < 4; i++)
            bn[1 + i] = add_input(G, names[i], 1, sc, true);
        kiln_lib_call(G->g, "batch_norm", "y", 5, bn, 0, NULL, 20, 1, &out);
        return out;
    }
    kiln_lib_call(G->g, op, "y", nin, in, nat, at, 20, 1, &out);
    return out;
}

struct kiln_graph *
kiln_test_gen_graph(kiln_ctx *ctx, struct kiln_rng *r)
{
    struct gen G = {ctx, kiln_graph_new(ctx), r, 0};
    uint32_t   t;
    switch (pick(r, 5)) {
    case 3:
    case 4:
        t = gen_library(&G);
        if (t == KILN_NONE)
            return NULL;
        break;
    case 0:
        t = gen_matmul(&G, "mm");
        break;
    case 1:
        t = gen_stencil(&G, "conv");
        break;
    default: {
        int64_t shape[3] = {1 + pick(r, 9), 1 + pick(r, 17), 1 + pick(r, 33)};
        t = add_input(&G, "x", 1 + pick(r, 3), shape, false);
        break;
    }
    }
    uint32_t n = 1 + pick(r, 3);
    for (uint32_t i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%u", i);
        uint32_t next = pick(r, 3) == 0 ? gen_reduce(&G, t, name) : KILN_NONE;
        if (next == KILN_NONE)
            next = gen_elementwise(&G, t, name);
        t = next;
    }
    kiln_graph_default_outputs(G.g);
    return kiln_ok(ctx) ? G.g : NULL;
}

/* ---- random schedules: steps that fail to apply or lower are dropped ---- */

static bool
sched_ok(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_schedule *s)
{
    struct kiln_arena_mark m = kiln_arena_mark(ctx);
    uint32_t               em = kiln_expr_mark(ctx);
    struct kiln_func      *f;
    bool                   ok = kiln_lower(ctx, g, s, &f) == KILN_OK;
    kiln_ctx_error_clear(ctx);
    kiln_arena_rewind(ctx, m);
    (void)em;
    return ok;
}

static const struct kiln_stage *
rand_stage(const struct kiln_state *st, struct kiln_rng *r)
{
    for (int tries = 0; tries < 8; tries++) {
        const struct kiln_stage *s = &st->st[st->order[pick(r, st->norder)]];
        if (s->attach != KILN_ATTACH_INLINE)
            return s;
    }
    return NULL;
}

static int64_t
rand_factor(struct kiln_rng *r, int64_t ext)
{
    static const int64_t f[] = {2, 3, 4, 8, 16};
    if (pick(r, 2))
        for (int64_t d = 2 + pick(r, 8); d > 1; d--)
            if (ext % d == 0)
                return d;
    return f[pick(r, 5)];
}

static bool
rand_step(kiln_ctx *ctx, const struct kiln_state *st, struct kiln_rng *r, struct kiln_step *out)
{
    const struct kiln_stage *s = rand_stage(st, r);
    if (!s || s->nleaf == 0)
        return false;
    memset(out, 0, sizeof *out);
    out->stage = s->name;
    uint32_t                 p = pick(r, s->nleaf);
    const struct kiln_iterv *it = &s->it[s->leaf[p]];
    out->iter = it->name;
    switch (pick(r, 16)) {
    case 13: {
        /* pack an argument read by some stage along a random dimension */
        const struct kiln_graph  *g = st->g;
        uint32_t                  a = g->arg[pick(r, g->narg)];
        const struct kiln_tensor *t = &g->tensor[a];
        if (t->ndim == 0)
            return false;
        out->kind = KILN_STEP_PACK;
        out->stage = t->name;
        out->value = pick(r, t->ndim);
        out->factors[0] = 2 + pick(r, 7);
        out->n = 1;
        return true;
    }
    case 14: {
        const struct kiln_graph *g = st->g;
        uint32_t                 a = g->arg[pick(r, g->narg)];
        out->kind = KILN_STEP_CACHE_READ;
        out->stage = g->tensor[a].name;
        out->n = 1;
        out->iters[0] = s->name;
        return true;
    }
    case 15:
        if (s->nleaf < 2)
            return false;
        out->kind = KILN_STEP_TILE;
        out->n = 2;
        out->iters[0] = s->it[s->leaf[0]].name;
        out->iters[1] = s->it[s->leaf[1]].name;
        out->factors[0] = rand_factor(r, s->it[s->leaf[0]].extent);
        out->factors[1] = rand_factor(r, s->it[s->leaf[1]].extent);
        return true;
    case 0:
    case 1:
    case 2:
        out->kind = KILN_STEP_SPLIT;
        out->n = (uint8_t)(1 + pick(r, 2));
        for (uint32_t j = 0; j < out->n; j++)
            out->factors[j] = rand_factor(r, it->extent);
        return true;
    case 3:
        if (s->nleaf < 2)
            return false;
        out->kind = KILN_STEP_REORDER;
        out->n = 2;
        out->iters[0] = s->it[s->leaf[s->nleaf - 1]].name;
        out->iters[1] = s->it[s->leaf[pick(r, s->nleaf - 1)]].name;
        return true;
    case 4:
        if (p + 1 >= s->nleaf)
            return false;
        out->kind = KILN_STEP_FUSE;
        out->n = 2;
        out->iters[0] = it->name;
        out->iters[1] = s->it[s->leaf[p + 1]].name;
        return true;
    case 5:
        out->kind = KILN_STEP_PARALLEL;
        out->iter = s->it[s->leaf[0]].name;
        return true;
    case 6:
        out->kind = KILN_STEP_VECTORIZE;
        out->iter = s->it[s->leaf[s->nleaf - 1]].name;
        return true;
    case 7:
        out->kind = KILN_STEP_UNROLL;
        return true;
    case 8: {
        /* compute_at a producer of a stage at one of its loops */
        for (uint32_t i = 0; i < st->norder; i++) {
            const struct kiln_stage *c = &st->st[st->order[i]];
            if (c == s || c->attach == KILN_ATTACH_INLINE || !c->nleaf)
                continue;
            out->kind = KILN_STEP_COMPUTE_AT;
            out->target = c->name;
            out->iter = c->it[c->leaf[pick(r, c->nleaf)]].name;
            if (pick(r, 2))
                return true;
        }
        return out->kind == KILN_STEP_COMPUTE_AT;
    }
    case 9:
        out->kind = KILN_STEP_COMPUTE_INLINE;
        return true;
    case 10:
        out->kind = KILN_STEP_CACHE_WRITE;
        return true;
    case 11:
        out->kind = KILN_STEP_RFACTOR;
        return true;
    default:
        out->kind = KILN_STEP_AUTO_UNROLL;
        out->value = (int64_t[]){0, 16, 64, 512}[pick(r, 4)];
        return true;
    }
    (void)ctx;
}

/* Whether stage c reads tensor t through a select on bounds its reads can leave. */
bool
kiln_test_pads(kiln_ctx *ctx, const struct kiln_state *st, const struct kiln_stage *c, uint32_t t)
{
    struct kiln_pad pad;
    const char     *why;
    memset(&pad, 0, sizeof pad);
    if (c->attach == KILN_ATTACH_INLINE
        || kiln_pad_scan(ctx, c->body, t, st->t[t].shape, st->t[t].ndim, st->t[c->tensor].shape,
                         c->ndim, c->rext, c->nred, &pad, &why)
               != KILN_OK) {
        kiln_ctx_error_clear(ctx);
        return false;
    }
    return !why && pad.fill.id;
}

/* A pad step for an argument some stage reads through bounds checks, put first (it moves no
 * loop), and maybe its padded copy computed at a loop of that reader. Drawn after the other
 * steps, so the schedules of earlier seeds stay as they were. */
static void
add_pad(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_rng *r, struct kiln_schedule *s)
{
    struct kiln_state st;
    uint32_t          a = g->arg[pick(r, g->narg)], reader = KILN_NONE;
    if (pick(r, 2) || kiln_state_build(ctx, g, s, &st) != KILN_OK) {
        kiln_ctx_error_clear(ctx);
        return;
    }
    for (uint32_t i = 0; i < st.norder && reader == KILN_NONE; i++) {
        const struct kiln_stage *c = &st.st[st.order[i]];
        if (kiln_test_pads(ctx, &st, c, a))
            reader = st.order[i];
    }
    if (reader == KILN_NONE)
        return;
    const struct kiln_stage *c = &st.st[reader];
    struct kiln_step         pad = {.kind = KILN_STEP_PAD, .stage = g->tensor[a].name, .n = 1};
    pad.iters[0] = c->name;
    if (kiln_sched_push(ctx, s, pad) != KILN_OK)
        return;
    memmove(&s->step[1], &s->step[0], sizeof(struct kiln_step) * (s->nstep - 1));
    s->step[0] = pad;
    if (!sched_ok(ctx, g, s)) {
        memmove(&s->step[0], &s->step[1], sizeof(struct kiln_step) * --s->nstep);
        return;
    }
    if (pick(r, 2) || !c->nleaf)
        return;
    char name[96];
    snprintf(name, sizeof name, "%s.pad", kiln_sym_str(ctx, g->tensor[a].name));
    struct kiln_step at = {.kind = KILN_STEP_COMPUTE_AT,
                           .stage = kiln_sym_cstr(ctx, name),
                           .target = c->name,
                           .iter = c->it[c->leaf[pick(r, c->nleaf)]].name};
    kiln_sched_push(ctx, s, at);
    if (!sched_ok(ctx, g, s))
        s->nstep--;
}

void
kiln_test_gen_schedule(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_rng *r,
                       struct kiln_schedule *s)
{
    memset(s, 0, sizeof *s);
    uint32_t want = pick(r, 12);
    for (uint32_t tries = 0; tries < 4 * want + 4 && s->nstep < want; tries++) {
        struct kiln_state      st;
        struct kiln_arena_mark m = kiln_arena_mark(ctx);
        if (kiln_state_build(ctx, g, s, &st) != KILN_OK) {
            kiln_ctx_error_clear(ctx);
            return;
        }
        struct kiln_step step;
        bool             have = rand_step(ctx, &st, r, &step);
        (void)m;
        if (!have)
            continue;
        kiln_sched_push(ctx, s, step);
        if (!sched_ok(ctx, g, s))
            s->nstep--;
    }
    add_pad(ctx, g, r, s);
}

/* Each stage at root: its spatial loops fused, split by 64 (or fewer when shorter), the outer
 * part bound to blockIdx.x and the inner to threadIdx.x. */
bool
kiln_test_gpu_schedule(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_schedule *out)
{
    struct kiln_schedule none = {0};
    struct kiln_state    st;
    struct kiln_buf      js = {0};
    if (kiln_state_build(ctx, g, &none, &st) != KILN_OK)
        return false;
    kiln_buf_puts(ctx, &js, "{\"steps\": [");
    const char *sep = "";
    for (uint32_t o = 0; o < st.norder; o++) {
        const struct kiln_stage *sg = &st.st[st.order[o]];
        if (sg->attach != KILN_ATTACH_ROOT || sg->ndim == 0)
            continue;
        const char *nm = kiln_sym_str(ctx, sg->name);
        char        fused[512] = "";
        int64_t     ext = 1;
        for (uint32_t k = 0; k < sg->ndim; k++) {
            ext *= sg->it[k].extent;
            strncat(fused, k ? "@" : "", sizeof fused - strlen(fused) - 1);
            strncat(fused, kiln_sym_str(ctx, sg->it[k].name), sizeof fused - strlen(fused) - 1);
        }
        if (sg->ndim > 1) {
            kiln_buf_printf(ctx, &js, "%s{\"op\": \"fuse\", \"stage\": \"%s\", \"iters\": [", sep,
                            nm);
            for (uint32_t k = 0; k < sg->ndim; k++)
                kiln_buf_printf(ctx, &js, "%s\"%s\"", k ? ", " : "",
                                kiln_sym_str(ctx, sg->it[k].name));
            kiln_buf_puts(ctx, &js, "]}");
            sep = ", ";
        }
        kiln_buf_printf(ctx, &js,
                        "%s{\"op\": \"split\", \"stage\": \"%s\", \"iter\": \"%s\", \"factors\": "
                        "[%lld]}, {\"op\": \"bind\", \"stage\": \"%s\", \"iter\": \"%s.0\", "
                        "\"thread\": \"blockIdx.x\"}, {\"op\": \"bind\", \"stage\": \"%s\", "
                        "\"iter\": \"%s.1\", \"thread\": \"threadIdx.x\"}",
                        sep, nm, fused, (long long)(ext < 64 ? ext : 64), nm, fused, nm, fused);
        sep = ", ";
    }
    kiln_buf_puts(ctx, &js, "]}");
    return js.data && kiln_sched_from_json(ctx, js.data, js.len, out) == KILN_OK;
}

const char *const kiln_test_op_cases[] = {
    "input x: f32[2, 3, 7, 6]\nweight w: f32[4, 3, 3, 3]\nweight b: f32[4]\ny = conv2d(x, w, b, "
    "stride=2, padding=1)\n",
    "input x: f32[1, 4, 6, 5]\nweight w: f32[4, 1, 3, 3]\ny = conv2d(x, w, padding=[1, 2], "
    "dilation=2, groups=4)\n",
    "input x: f32[1, 3, 5, 4]\nweight w: f32[3, 2, 3, 3]\ny = conv2d_transpose(x, w, stride=2, "
    "padding=1, output_padding=1)\n",
    "input x: f32[3, 7]\nweight w: f32[5, 7]\nweight b: f32[5]\ny = dense(x, w, b)\n",
    "input a: f32[2, 3, 4]\ninput b: f32[4, 5]\ny = matmul(a, b)\n",
    "input a: f32[2, 4, 3]\ninput b: f32[2, 5, 4]\ny = batch_matmul(a, b, transpose_a=1, "
    "transpose_b=1)\n",
    "input a: f32[3, 4]\ninput b: f32[4, 5]\ny = einsum(a, b, eq=\"ij,jk->ki\")\n",
    "input a: f32[4, 4]\ny = einsum(a, eq=\"ii->i\")\n",
    "input x: f32[3, 5]\ny = neg(x)\n",
    "input x: f32[3, 5]\ny = abs(x)\n",
    "input x: f32[3, 5]\ny = exp(x)\n",
    "input x: f32[3, 5]\nz = abs(x)\ny = log(z)\n",
    "input x: f32[3, 5]\nz = abs(x)\ny = sqrt(z)\n",
    "input x: f32[3, 5]\nz = exp(x)\ny = rsqrt(z)\n",
    "input x: f32[3, 5]\ny = square(x)\n",
    "input x: f32[3, 5]\ny = tanh(x)\n",
    "input x: f32[3, 5]\ny = sigmoid(x)\n",
    "input x: f32[3, 5]\ny = erf(x)\n",
    "input x: f32[3, 5]\ny = floor(x)\n",
    "input x: f32[3, 5]\ny = relu(x)\n",
    "input x: f32[3, 5]\ny = leaky_relu(x, alpha=0.2)\n",
    "input x: f32[3, 5]\ny = gelu(x)\n",
    "input x: f32[3, 5]\ny = gelu(x, approximate=\"tanh\")\n",
    "input x: f32[3, 5]\ny = silu(x)\n",
    "input a: f32[3, 5]\ninput b: f32[5]\ny = add(a, b)\n",
    "input a: f32[3, 1]\ninput b: f32[5]\ny = sub(a, b)\n",
    "input a: f32[2, 3, 5]\ninput b: f32[3, 1]\ny = mul(a, b)\n",
    "input a: f32[3, 5]\ninput b: f32[3, 5]\nz = exp(b)\ny = div(a, z)\n",
    "input a: f32[3, 5]\ninput b: f32[5]\ny = maximum(a, b)\n",
    "input a: f32[3, 5]\ninput b: f32[5]\ny = minimum(a, b)\n",
    "input a: f32[3, 5]\ninput b: f32[3, 5]\nz = abs(a)\ny = pow(z, b)\n",
    "input x: f32[1, 2, 7, 7]\ny = max_pool2d(x, kernel=3, stride=2, padding=1)\n",
    "input x: f32[1, 2, 7, 6]\ny = max_pool2d(x, kernel=[2, 3], dilation=2, ceil_mode=1)\n",
    "input x: f32[1, 2, 7, 7]\ny = avg_pool2d(x, kernel=3, stride=2, padding=1, "
    "count_include_pad=0)\n",
    "input x: f32[2, 3, 5, 4]\ny = global_avg_pool2d(x)\n",
    "input x: f32[2, 3, 5, 4]\ny = global_max_pool2d(x)\n",
    "input x: f32[1, 2, 6, 5]\ny = unfold(x, kernel=3, padding=1, stride=2)\n",
    "input x: f32[2, 5, 6, 3]\ny = winograd_input(x, padding=[1, 0, 2, 1], layout=\"nhwc\")\n",
    "input m: f32[16, 12, 3]\nweight b: f32[3]\ny = winograd_output(m, b, size=[5, 7])\n",
    "input x: f32[1, 2, 7, 6]\ny = winograd_input(x, padding=1, tile=4)\n",
    "input m: f32[36, 4, 2]\ny = winograd_output(m, size=[7, 6], tile=4, layout=\"nhwc\")\n",
    "input x: f32[3, 4, 5]\ny = softmax(x, axis=1)\n",
    "input x: f32[3, 4, 5]\ny = log_softmax(x)\n",
    "input x: f32[2, 3, 4, 4]\nweight g: f32[3]\nweight b: f32[3]\nweight m: f32[3]\nweight v0: "
    "f32[3]\n"
    "v = abs(v0)\ny = batch_norm(x, g, b, m, v, eps=0.001)\n",
    "input x: f32[2, 3, 6]\nweight g: f32[3, 6]\nweight b: f32[3, 6]\ny = layer_norm(x, g, b, "
    "axis=1)\n",
    "input x: f32[2, 3, 4]\ny = reshape(x, shape=[4, -1])\n",
    "input x: f32[2, 3, 4, 5]\ny = flatten(x, axis=2)\n",
    "input x: f32[2, 3, 4]\ny = transpose(x, perm=[2, 0, 1])\n",
    "input a: f32[2, 3]\ninput b: f32[2, 5]\ninput c: f32[2, 1]\ny = concat(a, b, c, axis=1)\n",
    "input x: f32[2, 3]\ny = pad(x, pads=[1, 0, 2, 3], value=0.5)\n",
    "input x: f32[3, 4]\ny = pad(x, pads=[1, 2, 1, 2], mode=\"reflect\")\n",
    "input x: f32[6, 7]\ny = slice(x, starts=[1, -1], ends=[5, 0], axes=[0, 1], steps=[2, -2])\n",
    /* indexing, comparison, logic, casts: integer and bool intermediates through the code
     * generators (the harness feeds and reads f32 tensors) */
    "input x: f32[5, 3]\ninput s: f32[2, 4]\nw[i, j] = s[i, j] * 9.0\nk = cast(w, "
    "dtype=\"i64\")\ny = gather(x, k, axis=0)\n",
    "input x: f32[2, 5, 3]\ninput s: f32[3]\nw[i] = s[i] * 9.0\nk = cast(w, dtype=\"i8\")\ny = "
    "gather(x, k, axis=-2)\n",
    "input x: f32[4, 5]\ninput s: f32[4, 2]\nw[i, j] = s[i, j] * 9.0\nk = cast(w, "
    "dtype=\"i32\")\ny = gather_elements(x, k, axis=1)\n",
    "input p: f32[3, 1]\ninput a: f32[4]\ninput b: f32[3, 4]\nc = less(p, b)\ny = where(c, a, b)\n",
    "input s: f32[3, 4]\ninput t: f32[4]\nw[i, j] = s[i, j] * 3.0\nv[j] = t[j] * 3.0\na = cast(w, "
    "dtype=\"i64\")\nb = cast(v, dtype=\"i64\")\nc = equal(a, b)\ny = cast(c, dtype=\"f32\")\n",
    "input a: f32[3, 4]\ninput b: f32[3, 1]\nc = less(a, b)\ny = cast(c, dtype=\"f32\")\n",
    "input s: f32[3, 4]\ninput t: f32[4]\nw[i, j] = s[i, j] * 3.0\nv[j] = t[j] * 3.0\na = cast(w, "
    "dtype=\"i8\")\nb = cast(v, dtype=\"i8\")\nc = less_equal(a, b)\ny = cast(c, dtype=\"f32\")\n",
    "input a: f32[2, 3]\ninput b: f32[2, 3]\nc = greater(a, b)\ny = cast(c, dtype=\"f32\")\n",
    "input s: f32[2, 3]\ninput t: f32[1]\nw[i, j] = s[i, j] * 3.0\nv[j] = t[j] * 3.0\na = cast(w, "
    "dtype=\"i32\")\nb = cast(v, dtype=\"i32\")\nc = greater_equal(a, b)\ny = cast(c, "
    "dtype=\"f32\")\n",
    "input s: f32[2, 3]\ninput t: f32[3]\na = cast(s, dtype=\"bool\")\nb = greater(t, s)\nc = "
    "logical_and(b, a)\ny = cast(c, dtype=\"f32\")\n",
    "input s: f32[2, 3]\ninput t: f32[2, 1]\na = less(s, t)\nb = greater(s, t)\nc = logical_or(a, "
    "b)\nd = logical_not(c)\ne = logical_xor(d, a)\ny = cast(e, dtype=\"f32\")\n",
    "input s: f32[3, 4]\nw[i, j] = s[i, j] * 9.0\nc = cast(w, dtype=\"i64\")\ny = cast(c, "
    "dtype=\"f32\")\n",
    "input x: f32[3, 1]\ny = expand(x, shape=[2, 1, 4])\n",
    "input x: f32[2, 3]\ny = tile(x, repeats=[2, 3])\n",
    "input x: f32[2, 4, 5]\ny = trilu(x, upper=0, k=1)\n",
    "input x: f32[3, 5, 4]\ny = reduce_sum(x, axes=[0, 2], keepdims=0)\n",
    /* integer reductions whose identity matters: every value below 0 */
    "input x: f32[3, 5, 4]\nq[i, j, k] = i32(x[i, j, k] * 4.0) - 10\nm = reduce_max(q, axes=1)\n"
    "y[i, j, k] = f32(m[i, j, k])\n",
    "input x: f32[3, 5, 4]\nq[i, j, k] = 10 - i32(x[i, j, k] * 4.0)\nm = reduce_min(q)\n"
    "y[i, j, k] = f32(m[i, j, k])\n",
    "input x: f32[3, 5, 4]\ny = reduce_mean(x, axes=-1, keepdims=0)\n",
    "input x: f32[3, 5, 4]\ny = reduce_prod(x, axes=[0, 2])\n",
    /* argmax / argmin give i64: cast for the f32-only harnesses; rounded inputs tie */
    "input x: f32[3, 5, 4]\na = argmax(x, axis=1, keepdims=0)\ny[i, k] = f32(a[i, k])\n",
    "input x: f32[3, 5, 4]\nq[i, j, k] = floor(x[i, j, k] * 2.0)\n"
    "a = argmin(q, axis=-1, select_last_index=1)\ny[i, j, k] = f32(a[i, j, k])\n",
    "input x: f32[3, 5, 4]\ny = cumsum(x, axis=1, reverse=1)\n",
    /* trigonometric and hyperbolic functions (in their domains), rounding, sign, reciprocal,
     * isnan / isinf (bool, cast back), float and integer mod */
    "input a: f32[3, 5]\ninput b: f32[5]\nw[i, j] = a[i, j] * 7.0\ny = mod(w, b, fmod=1)\n",
    "input a: f32[3, 5]\ninput b: f32[3, 1]\nw[i, j] = a[i, j] * 7.0\ny = mod(w, b)\n",
    "input x: f32[3, 5]\ny = sin(x)\n",
    "input x: f32[3, 5]\ny = cos(x)\n",
    "input x: f32[3, 5]\ny = tan(x)\n",
    "input x: f32[3, 5]\ny = atan(x)\n",
    "input x: f32[3, 5]\ny = sinh(x)\n",
    "input x: f32[3, 5]\ny = cosh(x)\n",
    "input x: f32[3, 5]\ny = asinh(x)\n",
    "input x: f32[3, 5]\nz = tanh(x)\ny = asin(z)\n",
    "input x: f32[3, 5]\nz = tanh(x)\ny = acos(z)\n",
    "input x: f32[3, 5]\nz = tanh(x)\ny = atanh(z)\n",
    "input x: f32[3, 5]\nz = exp(x)\nw[i, j] = z[i, j] + 1.0\ny = acosh(w)\n",
    "input x: f32[3, 5]\nz[i, j] = x[i, j] * 4.0\ny = round(z)\n",
    "input x: f32[3, 5]\nz[i, j] = x[i, j] * 4.0\ny = ceil(z)\n",
    "input x: f32[3, 5]\nz[i, j] = floor(x[i, j] * 2.0)\ny = sign(z)\n",
    "input x: f32[3, 5]\nz = exp(x)\ny = reciprocal(z)\n",
    "input x: f32[3, 5]\nz[i, j] = log(x[i, j])\nc = isnan(z)\ny = cast(c, dtype=\"f32\")\n",
    "input x: f32[3, 5]\nz[i, j] = 1.0 / floor(x[i, j] * 2.0)\nc = isinf(z, detect_negative=0)\n"
    "y = cast(c, dtype=\"f32\")\n",
    "input s: f32[3, 4]\ninput t: f32[4]\nw[i, j] = s[i, j] * 40.0\nv[j] = t[j] * 6.0\na = cast(w, "
    "dtype=\"i32\")\nb = cast(v, dtype=\"i32\")\nm = mod(a, b, fmod=1)\ny = cast(m, "
    "dtype=\"f32\")\n",
    "input s: f32[3, 4]\ninput t: f32[3, 1]\nw[i, j] = s[i, j] * 40.0\nv[i, j] = t[i, j] * 6.0\na "
    "= cast(w, "
    "dtype=\"i64\")\nb = cast(v, dtype=\"i64\")\nm = mod(a, b)\ny = cast(m, dtype=\"f32\")\n",
    /* scatter: duplicate and out-of-range indices; the last update wins, or they add up */
    "input x: f32[4, 5]\ninput s: f32[4, 3]\ninput u: f32[4, 3]\nw[i, j] = s[i, j] * 9.0\nk = "
    "cast(w, dtype=\"i32\")\ny = scatter_elements(x, k, u, axis=1)\n",
    "input x: f32[4, 5]\ninput s: f32[6, 5]\ninput u: f32[6, 5]\nw[i, j] = s[i, j] * 5.0\nk = "
    "cast(w, dtype=\"i64\")\ny = scatter_elements(x, k, u, reduction=\"add\")\n",
    "input x: f32[4, 3, 5]\ninput s: f32[6, 2]\ninput u: f32[6, 5]\nw[i, j] = s[i, j] * 6.0 - "
    "2.0\nk = cast(w, dtype=\"i32\")\ny = scatter_nd(x, k, u)\n",
    /* resize: nearest (rounding up at halves), bilinear, cubic with clamped edge taps and
     * tf_crop_and_resize's extrapolation */
    "input x: f32[1, 2, 3, 4]\n"
    "y = resize(x, sizes=[1, 2, 7, 9], mode=\"nearest\", nearest_mode=\"round_prefer_ceil\")\n",
    "input x: f32[1, 2, 3, 4]\ny = resize(x, sizes=[1, 2, 6, 3], mode=\"linear\")\n",
    "input x: f32[2, 5, 4]\n"
    "y = resize(x, sizes=[2, 8, 6], mode=\"cubic\", "
    "coordinate_transformation_mode=\"align_corners\", "
    "exclude_outside=1)\n",
    "input x: f32[2, 5, 4]\n"
    "y = resize(x, sizes=[2, 4, 7], mode=\"linear\", "
    "coordinate_transformation_mode=\"tf_crop_and_resize\", roi=[0, -2, 0, 10, 8, 10], "
    "roi_den=10, extrapolation_value=-1.5)\n",
};
const size_t kiln_test_nop_cases = KILN_COUNTOF(kiln_test_op_cases);

/* k(y, x, n): y[i] = sum over j < 4 of (j + 1) exp(x[i + j within its 256-thread block]),
 * with a shared-memory tile and a barrier (tests/nvrtc, tests/cuda_rt). */
const char kiln_test_cuda_kernel[] =
    "extern \"C\" __global__ void k(float *__restrict__ y, const float *__restrict__ x, int n)\n"
    "{\n"
    "    __shared__ float tile[256];\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    tile[threadIdx.x] = i < n ? x[i] : 0.0f;\n"
    "    __syncthreads();\n"
    "    if (i < n) {\n"
    "        float acc = 0.0f;\n"
    "        for (int j = 0; j < 4; j++)\n"
    "            acc += expf(tile[(threadIdx.x + j) % blockDim.x]) * (float)(j + 1);\n"
    "        y[i] = acc;\n"
    "    }\n"
    "}\n";

/* A tiled GPU matmul: 16 x 16 tiles of A and B copied into shared memory at each step of the
 * reduction's outer loop by the block's threads together; partial tiles on every axis. */
const char kiln_test_shared_matmul_kg[] =
    "input A: f32[40, 24]\ninput B: f32[24, 36]\nC = matmul(A, B)\n";
const char kiln_test_shared_matmul[] =
    "[{\"op\": \"cache_read\", \"stage\": \"A\", \"readers\": [\"C\"], \"scope\": "
    "\"shared\"},"
    "{\"op\": \"cache_read\", \"stage\": \"B\", \"readers\": [\"C\"], \"scope\": "
    "\"shared\"},"
    "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [16]},"
    "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"j\", \"factors\": [16]},"
    "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"k\", \"factors\": [16]},"
    "{\"op\": \"reorder\", \"stage\": \"C\", \"order\": [\"i.0\", \"j.0\", \"k.0\", "
    "\"i.1\", \"j.1\", \"k.1\"]},"
    "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.0\", \"thread\": \"blockIdx.y\"},"
    "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.0\", \"thread\": \"blockIdx.x\"},"
    "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.1\", \"thread\": \"threadIdx.y\"},"
    "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.1\", \"thread\": \"threadIdx.x\"},"
    "{\"op\": \"compute_at\", \"stage\": \"A.cache\", \"target\": \"C\", \"iter\": "
    "\"k.0\"},"
    "{\"op\": \"compute_at\", \"stage\": \"B.cache\", \"target\": \"C\", \"iter\": "
    "\"k.0\"},"
    "{\"op\": \"bind\", \"stage\": \"A.cache\", \"iter\": \"i0\", \"thread\": "
    "\"threadIdx.y\"},"
    "{\"op\": \"bind\", \"stage\": \"A.cache\", \"iter\": \"i1\", \"thread\": "
    "\"threadIdx.x\"},"
    "{\"op\": \"bind\", \"stage\": \"B.cache\", \"iter\": \"i0\", \"thread\": "
    "\"threadIdx.y\"},"
    "{\"op\": \"bind\", \"stage\": \"B.cache\", \"iter\": \"i1\", \"thread\": "
    "\"threadIdx.x\"}]";

/* Cross-thread reductions (a reduction loop bound to threadIdx.x, docs/schedule.md): a GEMV
 * (a dense layer at batch 1), strided and blocked; a global average pool over 7 x 7 with the
 * thread loop on one reduction axis (7 threads) or on both fused (partial last chunk); max
 * and min reductions with serial spatial loops around them; a sum to a scalar. Thread counts
 * and reduction extents are not powers of two where it matters, and most last chunks are
 * partial. */
const struct kiln_test_xred kiln_test_xred_cases[] = {
    {"GEMV, 64 threads strided",
     "input x: f32[300]\nweight W: f32[10, 300]\ny[n] += W[n, k] * x[k]\noutput y\n",
     "[{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [64]},"
     "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"n\", \"thread\": \"blockIdx.x\"},"
     "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"k.1\", \"thread\": \"threadIdx.x\"}]"},
    {"GEMV, 32 threads of 3 in a row",
     "input x: f32[1, 300]\nweight W: f32[7, 300]\ny[b, n] += W[n, k] * x[b, k]\noutput y\n",
     "[{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [32, 3]},"
     "{\"op\": \"fuse\", \"stage\": \"y\", \"iters\": [\"b\", \"n\"]},"
     "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"b@n\", \"thread\": \"blockIdx.x\"},"
     "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"k.1\", \"thread\": \"threadIdx.x\"}]"},
    {"global average pool, 7 threads",
     "input x: f32[2, 6, 7, 7]\ns[n, c] += x[n, c, rh, rw]\ny[n, c] = s[n, c] / 49.0\n"
     "output y\n",
     "[{\"op\": \"fuse\", \"stage\": \"s\", \"iters\": [\"n\", \"c\"]},"
     "{\"op\": \"bind\", \"stage\": \"s\", \"iter\": \"n@c\", \"thread\": \"blockIdx.x\"},"
     "{\"op\": \"bind\", \"stage\": \"s\", \"iter\": \"rw\", \"thread\": \"threadIdx.x\"}]"},
    {"global average pool, 32 threads over 49",
     "input x: f32[2, 6, 7, 7]\ns[n, c] += x[n, c, rh, rw]\ny[n, c] = s[n, c] / 49.0\n"
     "output y\n",
     "[{\"op\": \"fuse\", \"stage\": \"s\", \"iters\": [\"rh\", \"rw\"]},"
     "{\"op\": \"split\", \"stage\": \"s\", \"iter\": \"rh@rw\", \"factors\": [32]},"
     "{\"op\": \"bind\", \"stage\": \"s\", \"iter\": \"c\", \"thread\": \"blockIdx.x\"},"
     "{\"op\": \"bind\", \"stage\": \"s\", \"iter\": \"rh@rw.1\", \"thread\": "
     "\"threadIdx.x\"}]"},
    {"max over rows, 128 threads, serial rows",
     "input x: f32[5, 1000]\ny[i] max= x[i, k] * 3.0 - 1.0\noutput y\n",
     "[{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [128]},"
     "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"k.1\", \"thread\": \"threadIdx.x\"}]"},
    {"min over rows, 100 threads", "input x: f32[4, 3, 250]\ny[i, j] min= x[i, j, k]\noutput y\n",
     "[{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [100]},"
     "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"i\", \"thread\": \"blockIdx.x\"},"
     "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"k.1\", \"thread\": \"threadIdx.x\"}]"},
    {"sum to a scalar, 256 threads", "input x: f32[777]\nt[] += x[k]\noutput t\n",
     "[{\"op\": \"split\", \"stage\": \"t\", \"iter\": \"k\", \"factors\": [256]},"
     "{\"op\": \"bind\", \"stage\": \"t\", \"iter\": \"k.1\", \"thread\": \"threadIdx.x\"}]"},
};
const size_t kiln_test_nxred_cases = KILN_COUNTOF(kiln_test_xred_cases);
