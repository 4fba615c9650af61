/* tuner/sketch.c -- the search space: the analysis of compute definitions that the sketch rules
 * (tuner/sketch_rules.c: which ops are inlined, tiled, cached, fused, rfactored) decide on, and
 * the knobs each CPU sketch leaves free (tile lengths, vector axis, packing, unroll step,
 * parallel depth, vectorisation).
 * kiln_prog_schedule turns a sketch plus knob values into ordinary schedule steps; sampling,
 * mutation, crossover and Droplet neighbours live in tuner/annotate.c. */
#include "sketch_int.h"

#include "../passes/state.h"

#include <stdio.h>
#include <string.h>

const int64_t kiln_unroll_steps[KILN_UNROLL_NSTEPS] = {0, 16, 64, 512};

void
kiln_hw_from_target(const struct kiln_target *t, struct kiln_hw *hw)
{
    hw->vector_lanes = kiln_target_f32_lanes(t);
    hw->num_cores = t && t->num_cores > 0 ? t->num_cores : 1;
    hw->cache_line = 64;
    /* the host's caches when known, else a recent x86 core's (48 KiB, 1.25 MiB) */
    hw->l1_bytes = t && t->l1_bytes > 0 ? (int)t->l1_bytes : 48 << 10;
    hw->l2_bytes = t && t->l2_bytes > 0 ? (int)t->l2_bytes : 1280 << 10;
    hw->vector_regs = t && (t->vector_bits >= 512 || !strncmp(t->triple, "aarch64", 7)) ? 32 : 16;
    hw->gpu = t && kiln_target_is_cuda(t);
    if (hw->gpu) { /* what the features measure footprints against: a 128-byte L1 line, the
                    * 48 KiB of shared memory a block gets, an A100's or H100's 40-50 MiB L2 */
        hw->cache_line = 128;
        hw->l1_bytes = 48 << 10;
        hw->l2_bytes = 40 << 20;
    }
    hw->max_threads = 1024;
    hw->shared_bytes = 48 << 10;
    hw->max_grid_yz = 65535;
    hw->thread_regs = 64;
}

/* ---- analysis of compute definitions ---- */

static bool
collect_load(void *ud, kiln_expr load)
{
    struct loads *L = ud;
    if (L->n == KILN_COUNTOF(L->l)) {
        L->overflow = true;
        return false;
    }
    L->l[L->n++] = load;
    return true;
}

void
kiln_sk_loads_of(const kiln_ctx *ctx, kiln_expr e, struct loads *L)
{
    L->ctx = ctx;
    L->n = 0;
    L->overflow = false;
    kiln_expr_visit_loads(ctx, e, collect_load, L);
}

struct find_var {
    const kiln_ctx *ctx;
    int64_t         key;
    bool            found, expensive;
};

static bool
find_var_visit(void *ud, kiln_expr node)
{
    struct find_var        *F = ud;
    const struct kiln_node *n = kiln_node_get(F->ctx, node);
    if (n->op == KILN_OP_VAR && n->imm == F->key)
        F->found = true;
    if (n->op < KILN_OP_COUNT && kiln_op_cost[n->op] == KILN_COST_TRANS)
        F->expensive = true;
    return true;
}

static bool
mentions_axis(const kiln_ctx *ctx, kiln_expr e, uint32_t k)
{
    struct find_var F = {ctx, kiln_var_key(KILN_VAR_AXIS, k), false, false};
    kiln_expr_visit_nodes(ctx, e, find_var_visit, &F);
    return F.found;
}

static bool
has_expensive(const kiln_ctx *ctx, kiln_expr e)
{
    struct find_var F = {ctx, -1, false, false};
    kiln_expr_visit_nodes(ctx, e, find_var_visit, &F);
    return F.expensive;
}

/* Axis index of e when e is exactly a spatial variable, else -1. */
static int
plain_axis(const kiln_ctx *ctx, kiln_expr e)
{
    const struct kiln_node *n = kiln_node_get(ctx, e);
    if (n->op == KILN_OP_VAR && kiln_var_kind_of(n->imm) == KILN_VAR_AXIS)
        return (int)kiln_var_index(n->imm);
    return -1;
}

/* A constant, a spatial variable, or a spatial variable plus/minus a constant. */
static bool
simple_index(const kiln_ctx *ctx, kiln_expr e)
{
    const struct kiln_node *n = kiln_node_get(ctx, e);
    int64_t                 c;
    if (n->op == KILN_OP_INT || plain_axis(ctx, e) >= 0)
        return true;
    if (n->op == KILN_OP_ADD || n->op == KILN_OP_SUB)
        return plain_axis(ctx, (kiln_expr){n->kid[0]}) >= 0
               && kiln_expr_is_int(ctx, (kiln_expr){n->kid[1]}, &c);
    return false;
}

struct inline_map {
    struct ana *A;
};

static kiln_expr
inline_map_load(void *ud, kiln_expr load, uint32_t n, const kiln_expr *idx)
{
    struct ana             *A = ud;
    const struct kiln_node *nd = kiln_node_get(A->ctx, load);
    uint32_t                t = (uint32_t)nd->imm;
    enum kiln_dtype         dt = (enum kiln_dtype)nd->dtype;
    uint32_t                op = A->g->tensor[t].op;
    if (A->g->tensor[t].kind == KILN_TENSOR_OP && op != KILN_NONE && A->inl[op])
        return kiln_expr_subst(A->ctx, A->eff[op], idx, n, NULL, 0);
    return kiln_load(A->ctx, t, dt, n, idx);
}

static bool
strictly_inlineable(const struct ana *A, uint32_t i)
{
    const kiln_ctx           *ctx = A->ctx;
    const struct kiln_opdef  *op = &A->g->op[i];
    const struct kiln_tensor *t = &A->g->tensor[op->out];
    if (op->nred || t->is_output || has_expensive(ctx, op->body))
        return false;
    struct loads L;
    kiln_sk_loads_of(ctx, op->body, &L);
    if (L.overflow)
        return false;
    for (uint32_t j = 0; j < L.n; j++)
        for (uint32_t d = 0; d < kiln_load_nidx(ctx, L.l[j]); d++)
            if (!simple_index(ctx, kiln_load_idx(ctx, L.l[j], d)))
                return false;
    return true;
}

/* True when some output axis of op i of extent > 1 is absent from every index of the loads
 * of tensor t in L (op i's loads): op i reuses t along that axis. */
bool
kiln_sk_misses_an_axis(const struct ana *A, uint32_t i, const struct loads *L, uint32_t t)
{
    const kiln_ctx           *ctx = A->ctx;
    const struct kiln_tensor *out = &A->g->tensor[A->g->op[i].out];
    for (uint32_t k = 0; k < out->ndim; k++) {
        if (out->shape[k] <= 1)
            continue;
        bool used = false;
        for (uint32_t m = 0; m < L->n && !used; m++) {
            if ((uint32_t)kiln_node_get(ctx, L->l[m])->imm != t)
                continue;
            for (uint32_t d = 0; d < kiln_load_nidx(ctx, L->l[m]) && !used; d++)
                used = mentions_axis(ctx, kiln_load_idx(ctx, L->l[m], d), k);
        }
        if (!used)
            return true;
    }
    return false;
}

/* The number of tensors op i reads for which some output axis of extent > 1 is absent from
 * every index of their loads: the tensors it reuses. A tensor of one element (a Clip bound
 * imported from ONNX as a 0-d weight) does not count: it lives in a register whatever the
 * tiling, and counting it made MobileNetV2's min(max(conv, lo), hi) a tiled op of its own,
 * which no convolution could then be fused into (a separate pass over every activation). */
uint32_t
kiln_sk_reused_tensors(const struct ana *A, uint32_t i)
{
    const kiln_ctx *ctx = A->ctx;
    struct loads    L;
    kiln_sk_loads_of(ctx, A->eff[i], &L);
    uint32_t seen[64], nseen = 0, count = 0;
    for (uint32_t j = 0; j < L.n; j++) {
        uint32_t t = (uint32_t)kiln_node_get(ctx, L.l[j])->imm;
        bool     dup = false;
        for (uint32_t s = 0; s < nseen; s++)
            dup |= seen[s] == t;
        if (dup)
            continue;
        seen[nseen++] = t;
        if (kiln_tensor_numel(&A->g->tensor[t]) > 1)
            count += kiln_sk_misses_an_axis(A, i, &L, t);
    }
    return count;
}

/* Ansor's needs_multi_level_tiling: reused tensors >= 2, or >= 1 with a reduction. */
static bool
needs_mlt(const struct ana *A, uint32_t i)
{
    uint32_t n = kiln_sk_reused_tensors(A, i);
    return n >= 2 || (n >= 1 && A->g->op[i].nred > 0);
}

/* The one elementwise consumer op i's tensor may be computed at (reading it at exactly the
 * output's indices), or KILN_NONE. */
static uint32_t
fusible_consumer(const struct ana *A, uint32_t i)
{
    const kiln_ctx           *ctx = A->ctx;
    const struct kiln_graph  *g = A->g;
    const struct kiln_tensor *t = &g->tensor[g->op[i].out];
    if (t->is_output || A->nreader[i] != 1)
        return KILN_NONE;
    uint32_t                  c = A->reader[i];
    const struct kiln_opdef  *cop = &g->op[c];
    const struct kiln_tensor *ct = &g->tensor[cop->out];
    if (cop->nred || A->mlt[c] || ct->ndim != t->ndim)
        return KILN_NONE;
    for (uint32_t d = 0; d < t->ndim; d++)
        if (ct->shape[d] != t->shape[d])
            return KILN_NONE;
    struct loads L;
    kiln_sk_loads_of(ctx, A->eff[c], &L);
    if (L.overflow)
        return KILN_NONE;
    for (uint32_t j = 0; j < L.n; j++) {
        if ((uint32_t)kiln_node_get(ctx, L.l[j])->imm != g->op[i].out)
            continue;
        for (uint32_t d = 0; d < t->ndim; d++)
            if (plain_axis(ctx, kiln_load_idx(ctx, L.l[j], d)) != (int)d)
                return KILN_NONE;
    }
    return c;
}

struct guarded {
    const kiln_ctx          *ctx;
    const struct kiln_graph *g;
    uint32_t                 t[4];
    uint32_t                 n;
};

static bool
guarded_visit(void *ud, kiln_expr node)
{
    struct guarded         *G = ud;
    const struct kiln_node *n = kiln_node_get(G->ctx, node);
    if (n->op != KILN_OP_SELECT)
        return true;
    for (int k = 1; k <= 2; k++) {
        const struct kiln_node *v = kiln_node_get(G->ctx, (kiln_expr){n->kid[k]});
        if (v->op != KILN_OP_LOAD || G->g->tensor[v->imm].kind == KILN_TENSOR_OP)
            continue;
        bool dup = false;
        for (uint32_t j = 0; j < G->n; j++)
            dup |= G->t[j] == (uint32_t)v->imm;
        if (!dup && G->n < KILN_COUNTOF(G->t))
            G->t[G->n++] = (uint32_t)v->imm;
    }
    return true;
}

/* Arguments op i reads as the value of a select (a depthwise convolution's or a pooling's
 * window over its padding), indexed by every output axis (so no two outer tiles read the same
 * window, halos aside), that the pad step accepts for it: kept in A->padt. Tried by applying
 * the step alone, inside a scratch scope, so a read the step cannot make safe is never
 * offered. */
static void
pad_candidates(struct ana *A, uint32_t i)
{
    kiln_ctx      *ctx = A->ctx;
    struct guarded G = {ctx, A->g, {0}, 0};
    kiln_expr_visit_nodes(ctx, A->eff[i], guarded_visit, &G);
    uint32_t     reader = kiln_sym_cstr(ctx, kiln_graph_tensor_name(A->g, A->g->op[i].out));
    struct loads L;
    kiln_sk_loads_of(ctx, A->eff[i], &L);
    for (uint32_t j = 0; j < G.n; j++) {
        if (L.overflow || kiln_sk_misses_an_axis(A, i, &L, G.t[j]))
            continue; /* two outer tiles would copy the same window (a full convolution's
                       * input is not indexed by the output channels) */
        struct kiln_step     st = {.kind = KILN_STEP_PAD,
                                   .n = 1,
                                   .stage = kiln_sym_cstr(ctx, kiln_graph_tensor_name(A->g, G.t[j])),
                                   .iters = {reader}};
        struct kiln_schedule s = {&st, 1, 1};
        struct kiln_scratch  sc = kiln_scratch_begin(ctx);
        struct kiln_state    state;
        bool                 ok = kiln_state_build(ctx, A->g, &s, &state) == KILN_OK;
        kiln_ctx_error_clear(ctx);
        kiln_scratch_end(ctx, sc);
        if (ok)
            A->padt[i][A->npad[i]++] = G.t[j];
    }
}

enum kiln_status
kiln_sk_analyse(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_hw *hw, struct ana *A)
{
    uint32_t n = g->nop + 1;
    *A = (struct ana){.ctx = ctx, .g = g, .hw = hw};
    A->eff = kiln_arena_alloc(ctx, sizeof(kiln_expr) * n);
    A->inl = kiln_arena_alloc(ctx, sizeof(bool) * n);
    A->nreader = kiln_arena_alloc(ctx, sizeof(uint32_t) * n);
    A->reader = kiln_arena_alloc(ctx, sizeof(uint32_t) * n);
    A->mlt = kiln_arena_alloc(ctx, sizeof(bool) * n);
    A->fuse = kiln_arena_alloc(ctx, sizeof(uint32_t) * n);
    A->padt = kiln_arena_alloc(ctx, sizeof(*A->padt) * n);
    A->npad = kiln_arena_alloc(ctx, sizeof(uint8_t) * n);
    if (!A->eff || !A->inl || !A->nreader || !A->reader || !A->mlt || !A->fuse || !A->padt
        || !A->npad)
        return ctx->err.status;
    memset(A->npad, 0, sizeof(uint8_t) * n);
    for (uint32_t i = 0; i < g->nop; i++) {
        A->inl[i] = strictly_inlineable(A, i);
        A->eff[i] = kiln_expr_map_loads(ctx, g->op[i].body, inline_map_load, A);
        if (!A->eff[i].id)
            return ctx->err.status;
    }
    for (uint32_t i = 0; i < g->nop; i++) {
        A->reader[i] = KILN_NONE;
        if (A->inl[i])
            continue;
        struct loads L;
        kiln_sk_loads_of(ctx, A->eff[i], &L);
        uint32_t done[64], ndone = 0;
        for (uint32_t j = 0; j < L.n; j++) {
            uint32_t t = (uint32_t)kiln_node_get(ctx, L.l[j])->imm;
            uint32_t p = g->tensor[t].op;
            bool     dup = false;
            for (uint32_t s = 0; s < ndone; s++)
                dup |= done[s] == t;
            if (dup || g->tensor[t].kind != KILN_TENSOR_OP || p == KILN_NONE)
                continue;
            done[ndone++] = t;
            A->nreader[p]++;
            A->reader[p] = i;
        }
        if (L.overflow) /* be conservative: nothing it reads can be fused */
            for (uint32_t p = 0; p < i; p++)
                A->nreader[p] += 2;
    }
    for (uint32_t i = 0; i < g->nop; i++) {
        A->mlt[i] = !A->inl[i] && needs_mlt(A, i);
        if (A->mlt[i])
            pad_candidates(A, i);
    }
    for (uint32_t i = 0; i < g->nop; i++) /* after every op's mlt: a tiled reader is not fused */
        A->fuse[i] = A->mlt[i] ? fusible_consumer(A, i) : KILN_NONE;
    return kiln_ok(ctx) ? KILN_OK : ctx->err.status;
}

/* ---- names of stages and iterators (as passes/state.c makes them) ---- */

void
kiln_sketch_axis_names(kiln_ctx *ctx, const struct kiln_graph *g, uint32_t op,
                       char names[][KILN_SKETCH_NAME])
{
    const struct kiln_opdef  *o = &g->op[op];
    const struct kiln_tensor *t = &g->tensor[o->out];
    for (uint32_t k = 0; k < (uint32_t)t->ndim + o->nred; k++) {
        bool     red = k >= t->ndim;
        uint32_t nm = red ? o->rname[k - t->ndim] : o->axname[k];
        char     base[KILN_SKETCH_NAME];
        if (nm)
            snprintf(base, sizeof base, "%s", kiln_sym_str(ctx, nm));
        else
            snprintf(base, sizeof base, red ? "r%u" : "i%u", red ? k - t->ndim : k);
        snprintf(names[k], KILN_SKETCH_NAME, "%s", base);
        for (int s = 1; s < 100; s++) {
            bool clash = false;
            for (uint32_t j = 0; j < k; j++)
                clash |= !strcmp(names[j], names[k]);
            if (!clash)
                break;
            snprintf(names[k], KILN_SKETCH_NAME, "%.50s_%d", base, s);
        }
    }
}

/* ---- sketch construction ---- */

uint32_t
kiln_sk_add_knob(kiln_ctx *ctx, struct kiln_sketch *sk, enum kiln_knob_kind kind,
                 enum kiln_knob_role role, uint32_t nparts, int64_t extent, uint32_t nchoice,
                 const char *name)
{
    uint32_t width = kind == KILN_KNOB_SPLIT ? nparts : 1;
    if (sk->nknob == KILN_MAX_KNOBS || sk->nvalues + width > KILN_MAX_VALUES)
        return KILN_NONE;
    struct kiln_knob *k = &sk->knob[sk->nknob];
    *k = (struct kiln_knob){.kind = (uint8_t)kind,
                            .role = (uint8_t)role,
                            .nparts = (uint8_t)(kind == KILN_KNOB_SPLIT ? nparts : 0),
                            .slot = sk->nvalues,
                            .extent = extent,
                            .nchoice = nchoice,
                            .name = kiln_arena_strdup(ctx, name)};
    sk->nvalues += width;
    return sk->nknob++;
}

/* Argument tensors read by op i with one index exactly the spatial axis k on a dimension that
 * is not contiguous along the reduction (not the last dimension, or read by a reduction on
 * another dimension): packing them into blocks along that dimension makes the vector tile of
 * k contiguous for every reduction step. Only tensors op i reuses (some output axis absent
 * from their indices: a matmul's B, a convolution's weights), or weights: packing an
 * activation indexed by every output axis, a depthwise convolution's input, is a copy of it in
 * every call that no reuse pays back (channels-last depthwise 3x3, 256 x 28^2: its best
 * program after 1,000 trials packed the input and ran at 0.60x oneDNN; a hand-written schedule
 * packing only the weights ran at 36 us on one core, where oneDNN takes 38), where a weight is
 * packed once, when the module is prepared. A batch-1 dense reuses none of its weight W[N, K]
 * and, vectorised along N unpacked, gathers it. */
static void
pack_candidates(const struct ana *A, uint32_t i, uint32_t k, struct kiln_op_plan *p)
{
    const kiln_ctx          *ctx = A->ctx;
    const struct kiln_graph *g = A->g;
    struct loads             L;
    kiln_sk_loads_of(ctx, A->eff[i], &L);
    p->npack[k] = 0;
    for (uint32_t j = 0; j < L.n; j++) {
        uint32_t                  t = (uint32_t)kiln_node_get(ctx, L.l[j])->imm;
        const struct kiln_tensor *tt = &g->tensor[t];
        if (tt->kind == KILN_TENSOR_OP || tt->ndim < 2 || tt->ndim >= KILN_MAX_DIMS
            || (tt->kind != KILN_TENSOR_WEIGHT && !L.overflow
                && !kiln_sk_misses_an_axis(A, i, &L, t)))
            continue;
        for (uint32_t d = 0; d < tt->ndim; d++) {
            if (plain_axis(ctx, kiln_load_idx(ctx, L.l[j], d)) != (int)k)
                continue;
            bool reduce_elsewhere = false;
            for (uint32_t e = 0; e < tt->ndim; e++) {
                kiln_expr ix = kiln_load_idx(ctx, L.l[j], e);
                for (uint32_t r = 0; r < g->op[i].nred && e != d; r++) {
                    struct find_var F = {ctx, kiln_var_key(KILN_VAR_REDUCE, r), false, false};
                    kiln_expr_visit_nodes(ctx, ix, find_var_visit, &F);
                    reduce_elsewhere |= F.found;
                }
            }
            if (d + 1 == tt->ndim && !reduce_elsewhere)
                continue;
            bool dup = false;
            for (uint32_t q = 0; q < p->npack[k]; q++)
                dup |= p->pack_t[k][q] == t;
            if (!dup && p->npack[k] < KILN_COUNTOF(p->pack_t[k])) {
                p->pack_t[k][p->npack[k]] = t;
                p->pack_d[k][p->npack[k]++] = (uint8_t)d;
            }
        }
    }
}

struct gperiod {
    const kiln_ctx *ctx;
    int64_t        *per; /* per spatial axis */
};

static bool
gperiod_visit(void *ud, kiln_expr node)
{
    struct gperiod         *G = ud;
    const struct kiln_node *n = kiln_node_get(G->ctx, node);
    int64_t                 q;
    int                     a;
    if (n->op == KILN_OP_FLOORDIV && (a = plain_axis(G->ctx, (kiln_expr){n->kid[0]})) >= 0
        && a < KILN_MAX_DIMS && kiln_expr_is_int(G->ctx, (kiln_expr){n->kid[1]}, &q) && q > 1)
        G->per[a] = G->per[a] ? kiln_gcd64(G->per[a], q) : q;
    return true;
}

/* Per spatial axis of op i, the gcd of the divisors q of the floordiv(axis, q) its loads read
 * (0: none): a grouped convolution reads its input channel (k / Kg) * Cg + rc, and a vector
 * tile of k that crosses a group boundary (Cg = 4, 16 lanes) gathers its input lane by lane,
 * where one within a group broadcasts a single element. Only the plain axis as numerator: a
 * transposed convolution's (h + pad - rh) / stride is affine in h over a tile of any length
 * and has no groups to respect. */
static void
group_periods(const struct ana *A, uint32_t i, struct kiln_op_plan *p)
{
    memset(p->gperiod, 0, sizeof p->gperiod);
    struct loads L;
    kiln_sk_loads_of(A->ctx, A->eff[i], &L);
    struct gperiod G = {A->ctx, p->gperiod};
    for (uint32_t j = 0; j < L.n; j++)
        for (uint32_t d = 0; d < kiln_load_nidx(A->ctx, L.l[j]); d++)
            kiln_expr_visit_nodes(A->ctx, kiln_load_idx(A->ctx, L.l[j], d), gperiod_visit, &G);
}

/* Whether op i is a lane-wise reduction: computed plain, it can keep one accumulator per
 * vector lane along its last output axis `last` (a vector tile of it inside the reduction
 * loops). Every load reads
 * that axis only as its own last index, `last` or `last +- c` (the lanes contiguous), or not
 * at all (the value broadcast). An NHWC max or average pooling, a global pooling over H and W,
 * a reduction over a middle axis qualify; a reduction over the last input axis does not (its
 * lanes would be strided: the rfactor sketches vectorise it), nor a channels-last depthwise
 * convolution, whose weights [c, 1, kh, kw] would be gathered. */
bool
kiln_sk_lanes_along_last(const struct ana *A, uint32_t i)
{
    const kiln_ctx           *ctx = A->ctx;
    const struct kiln_opdef  *op = &A->g->op[i];
    const struct kiln_tensor *t = &A->g->tensor[op->out];
    if (t->ndim == 0 || t->shape[t->ndim - 1] <= 1 || op->reduce == KILN_REDUCE_NONE)
        return false;
    uint32_t     last = t->ndim - 1u;
    struct loads L;
    kiln_sk_loads_of(ctx, A->eff[i], &L);
    if (L.overflow)
        return false;
    for (uint32_t j = 0; j < L.n; j++) {
        uint32_t n = kiln_load_nidx(ctx, L.l[j]);
        for (uint32_t d = 0; d < n; d++) {
            kiln_expr ix = kiln_load_idx(ctx, L.l[j], d);
            if (!mentions_axis(ctx, ix, last))
                continue;
            const struct kiln_node *x = kiln_node_get(ctx, ix);
            int64_t                 c;
            bool                    along = plain_axis(ctx, ix) == (int)last
                         || ((x->op == KILN_OP_ADD || x->op == KILN_OP_SUB)
                             && plain_axis(ctx, (kiln_expr){x->kid[0]}) == (int)last
                             && kiln_expr_is_int(ctx, (kiln_expr){x->kid[1]}, &c));
            if (d + 1 != n || !along)
                return false;
        }
    }
    return true;
}

/* No knobs: every knob index KILN_NONE, nothing to pad. */
static void
plan_clear(struct kiln_op_plan *p)
{
    p->k_vaxis = p->k_vec = p->k_unroll = p->k_par = p->k_pack = p->k_loc = p->k_pad = KILN_NONE;
    p->npad = p->ndim = 0;
    for (uint32_t k = 0; k < KILN_MAX_DIMS + KILN_MAX_REDUCE; k++)
        p->k_split[k] = KILN_NONE;
}

/* Knobs of op i under its chosen mode; false when the sketch runs out of knob slots. */
/* A plain or rfactor op's output extents and work (output elements times the reduction's
 * extent), which the prediction prior's parallel rules read. */
static void
plan_extents(const struct kiln_opdef *op, const struct kiln_tensor *t, struct kiln_op_plan *p)
{
    p->ndim = (uint8_t)t->ndim;
    memcpy(p->shape, t->shape, sizeof(int64_t) * t->ndim);
    p->work = 1;
    for (uint32_t k = 0; k < t->ndim; k++)
        p->work *= t->shape[k];
    for (uint32_t r = 0; r < op->nred; r++)
        p->work *= op->rext[r];
}

static bool
plan_knobs(kiln_ctx *ctx, const struct ana *A, struct kiln_sketch *sk, uint32_t i,
           struct kiln_op_plan *p)
{
    const struct kiln_graph  *g = A->g;
    const struct kiln_opdef  *op = &g->op[i];
    const struct kiln_tensor *t = &g->tensor[op->out];
    const char               *tn = kiln_graph_tensor_name(g, op->out);
    char                      names[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME];
    char                      kn[160];
    kiln_sketch_axis_names(ctx, g, i, names);
    plan_clear(p);
    switch ((enum kiln_plan_mode)p->mode) {
    case KILN_PLAN_INLINE:
    case KILN_PLAN_CONSUMER:
        return true;
    case KILN_PLAN_PLAIN: {
        plan_extents(op, t, p);
        if (t->ndim == 0)
            return true;
        uint32_t last = t->ndim - 1u;
        if (t->shape[last] > 1 && (op->nred == 0 || kiln_sk_lanes_along_last(A, i))) {
            snprintf(kn, sizeof kn, "%s.%s vector tile", tn, names[last]);
            p->k_split[last] = kiln_sk_add_knob(ctx, sk, KILN_KNOB_SPLIT, KILN_KNOB_TILE, 1,
                                                t->shape[last], 0, kn);
            snprintf(kn, sizeof kn, "%s vectorize", tn);
            p->k_vec =
                kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_VECTORIZE, 0, 0, 2, kn);
            if (p->k_split[last] == KILN_NONE || p->k_vec == KILN_NONE)
                return false;
        }
        if (A->hw->num_cores > 1) {
            snprintf(kn, sizeof kn, "%s parallel", tn);
            p->k_par = kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_PARALLEL, 0, 0,
                                        (uint32_t)t->ndim + 1, kn);
            if (p->k_par == KILN_NONE)
                return false;
        }
        return true;
    }
    case KILN_PLAN_RFACTOR: {
        plan_extents(op, t, p);
        int64_t R = 1;
        for (uint32_t r = 0; r < op->nred; r++)
            R *= op->rext[r];
        snprintf(kn, sizeof kn, "%s reduction tile", tn);
        p->k_split[t->ndim] =
            kiln_sk_add_knob(ctx, sk, KILN_KNOB_SPLIT, KILN_KNOB_TILE, 1, R, 0, kn);
        if (p->k_split[t->ndim] == KILN_NONE)
            return false;
        if (p->rf_inner) {
            snprintf(kn, sizeof kn, "%s.rf vectorize", tn);
            p->k_vec =
                kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_VECTORIZE, 0, 0, 2, kn);
            if (p->k_vec == KILN_NONE)
                return false;
        }
        if (A->hw->num_cores > 1) {
            snprintf(kn, sizeof kn, "%s.rf parallel", tn);
            p->k_par = kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_PARALLEL, 0, 0,
                                        (uint32_t)t->ndim + 1u + !p->rf_inner, kn);
            if (p->k_par == KILN_NONE)
                return false;
        }
        return true;
    }
    case KILN_PLAN_TILE:
    case KILN_PLAN_TILE_CW:
    case KILN_PLAN_TILE_FUSE: {
        uint32_t nsplit = 0;
        p->nvcand = 0;
        group_periods(A, i, p);
        for (uint32_t k = 0; k < t->ndim; k++) {
            if (t->shape[k] <= 1)
                continue;
            snprintf(kn, sizeof kn, "%s.%s tile", tn, names[k]);
            p->k_split[k] =
                kiln_sk_add_knob(ctx, sk, KILN_KNOB_SPLIT, KILN_KNOB_TILE, 3, t->shape[k], 0, kn);
            if (p->k_split[k] == KILN_NONE)
                return false;
            p->vcand[p->nvcand++] = (uint8_t)k;
            nsplit++;
            pack_candidates(A, i, k, p);
        }
        for (uint32_t r = 0; r < op->nred; r++) {
            if (op->rext[r] <= 1)
                continue;
            snprintf(kn, sizeof kn, "%s.%s tile", tn, names[t->ndim + r]);
            p->k_split[t->ndim + r] =
                kiln_sk_add_knob(ctx, sk, KILN_KNOB_SPLIT, KILN_KNOB_TILE, 1, op->rext[r], 0, kn);
            if (p->k_split[t->ndim + r] == KILN_NONE)
                return false;
        }
        if (p->nvcand > 1) {
            snprintf(kn, sizeof kn, "%s vector axis", tn);
            p->k_vaxis =
                kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_LAYOUT, 0, 0, p->nvcand, kn);
            if (p->k_vaxis == KILN_NONE)
                return false;
        }
        bool any_pack = false;
        for (uint32_t c = 0; c < p->nvcand; c++)
            any_pack |= p->npack[p->vcand[c]] > 0;
        if (any_pack) {
            snprintf(kn, sizeof kn, "%s pack", tn);
            p->k_pack = kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_LAYOUT, 0, 0, 2, kn);
        }
        if (A->npad[i]) {
            p->npad = A->npad[i];
            memcpy(p->padt, A->padt[i], sizeof p->padt);
            snprintf(kn, sizeof kn, "%s pad", tn);
            p->k_pad = kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_LAYOUT, 0, 0, 2, kn);
        }
        snprintf(kn, sizeof kn, "%s vectorize", tn);
        p->k_vec = kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_VECTORIZE, 0, 0, 2, kn);
        snprintf(kn, sizeof kn, "%s auto_unroll", tn);
        p->k_unroll = kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_UNROLL, 0, 0,
                                       KILN_UNROLL_NSTEPS, kn);
        if (A->hw->num_cores > 1 && nsplit) {
            snprintf(kn, sizeof kn, "%s parallel", tn);
            p->k_par = kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_PARALLEL, 0, 0,
                                        nsplit + 1, kn);
        }
        return (!any_pack || p->k_pack != KILN_NONE) && (!p->npad || p->k_pad != KILN_NONE)
               && p->k_vec != KILN_NONE && p->k_unroll != KILN_NONE
               && (A->hw->num_cores <= 1 || !nsplit || p->k_par != KILN_NONE);
    }
    case KILN_PLAN_XREDUCE: /* a GPU mode */
        break;
    }
    return false;
}

static const char *
mode_desc(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_sk_option *o)
{
    switch ((enum kiln_plan_mode)o->mode) {
    case KILN_PLAN_PLAIN:
        return "plain";
    case KILN_PLAN_INLINE:
        return "inline";
    case KILN_PLAN_CONSUMER:
        return "consumer";
    case KILN_PLAN_TILE:
        return "tile";
    case KILN_PLAN_TILE_CW:
        return o->level == 1 ? "tile+cache_write@1" : "tile+cache_write@2";
    case KILN_PLAN_TILE_FUSE:
        return kiln_arena_printf(ctx, "tile+fuse(%s)@%u",
                                 kiln_graph_tensor_name(g, g->op[o->consumer].out), o->level);
    case KILN_PLAN_RFACTOR:
        return o->rf_inner ? "rfactor-inner" : "rfactor-outer";
    case KILN_PLAN_XREDUCE: /* a GPU mode */
        break;
    }
    return "?";
}

enum kiln_status
kiln_sk_name(kiln_ctx *ctx, const struct kiln_graph *g, const char *const *mode,
             struct kiln_sketch *out, uint32_t *n)
{
    struct kiln_buf desc = {0};
    for (uint32_t i = 0; i < g->nop; i++)
        if (!kiln_buf_printf(ctx, &desc, "%s%s:%s", i ? " " : "",
                             kiln_graph_tensor_name(g, g->op[i].out), mode[i] ? mode[i] : "?"))
            return ctx->err.status;
    for (uint32_t j = 0; j < *n; j++)
        if (!strcmp(out[j].desc, desc.data ? desc.data : ""))
            return KILN_OK; /* degraded into a sketch we have */
    out[*n].id = *n;
    out[*n].desc = desc.data ? desc.data : "default";
    (*n)++;
    return KILN_OK;
}

/* The CPU rule set's maker: the sketch of the options in G->cur. */
enum kiln_status
kiln_sk_cpu_make(struct kiln_sk_gen *G)
{
    kiln_ctx                *ctx = G->ctx;
    const struct kiln_graph *g = G->A->g;
    struct kiln_sketch      *sk = &G->out[G->n];
    memset(sk, 0, sizeof *sk);
    sk->priv = kiln_arena_alloc(ctx, sizeof *sk->priv);
    if (!sk->priv)
        return ctx->err.status;
    sk->priv->nop = g->nop;
    sk->priv->lanes = G->A->hw->vector_lanes;
    sk->priv->vregs = G->A->hw->vector_regs > 0      ? G->A->hw->vector_regs
                      : G->A->hw->vector_lanes >= 16 ? 32
                                                     : 16;
    sk->priv->cores = G->A->hw->num_cores;
    sk->priv->op = kiln_arena_alloc(ctx, sizeof(struct kiln_op_plan) * (g->nop + 1));
    if (!sk->priv->op)
        return ctx->err.status;
    struct kiln_sk_option *mode = kiln_arena_alloc(ctx, sizeof(*mode) * (g->nop + 1));
    if (!mode)
        return ctx->err.status;
    memcpy(mode, G->cur, sizeof(*mode) * g->nop);
    /* knobs of tiled and rfactored ops first; an op that finds no knob slots left degrades to
     * plain (and is only annotated as far as the remaining slots allow) */
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < g->nop; i++) {
            struct kiln_op_plan *p = &sk->priv->op[i];
            uint8_t              m = mode[i].mode;
            bool first = m == KILN_PLAN_TILE || m == KILN_PLAN_TILE_CW || m == KILN_PLAN_TILE_FUSE
                         || m == KILN_PLAN_RFACTOR;
            if (first != (pass == 0))
                continue;
            uint32_t nknob = sk->nknob, nvalues = sk->nvalues;
            p->mode = m;
            p->level = mode[i].level;
            p->rf_inner = mode[i].rf_inner;
            p->consumer = mode[i].consumer;
            if (plan_knobs(ctx, G->A, sk, i, p))
                continue;
            sk->nknob = nknob;
            sk->nvalues = nvalues;
            if (m == KILN_PLAN_TILE_FUSE)
                mode[p->consumer].mode = KILN_PLAN_PLAIN;
            mode[i].mode = p->mode = KILN_PLAN_PLAIN;
            if (pass == 0)
                continue; /* annotated in pass 1 */
            plan_clear(p);
        }
    /* compute location of a plain op whose only reader is tiled: at root or at the reader's
     * outermost tile */
    for (uint32_t i = 0; i < g->nop; i++) {
        struct kiln_op_plan *p = &sk->priv->op[i];
        uint32_t             r = G->A->reader[i];
        if (p->mode != KILN_PLAN_PLAIN || G->A->nreader[i] != 1 || r == KILN_NONE
            || g->tensor[g->op[i].out].is_output
            || (mode[r].mode != KILN_PLAN_TILE && mode[r].mode != KILN_PLAN_TILE_CW
                && mode[r].mode != KILN_PLAN_TILE_FUSE))
            continue;
        char kn[160];
        snprintf(kn, sizeof kn, "%s location", kiln_graph_tensor_name(g, g->op[i].out));
        p->k_loc = kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_LOCATION, 0, 0, 2, kn);
        p->reader = r;
    }
    const char **names = kiln_arena_alloc(ctx, sizeof(char *) * (g->nop + 1));
    if (!names)
        return ctx->err.status;
    for (uint32_t i = 0; i < g->nop; i++)
        names[i] = mode_desc(ctx, g, &mode[i]);
    return kiln_sk_name(ctx, g, names, G->out, &G->n);
}

/* ---- programs to schedules ---- */

uint32_t
kiln_sk_sym(struct emit *E, const char *s)
{
    return kiln_sym_cstr(E->ctx, s);
}

/* The name of the stage a step of kind `kind` adds for `base` ("C.local", "B.pack", "C.rf"),
 * however long base is: interned, so it lives as long as the context. */
const char *
kiln_sk_derived(struct emit *E, const char *base, enum kiln_step_kind kind)
{
    const char *s = kiln_arena_printf(E->ctx, "%s.%s", base, kiln_step_desc[kind].creates);
    return s ? kiln_sym_str(E->ctx, kiln_sk_sym(E, s)) : "";
}

enum kiln_status
kiln_sk_push(struct emit *E, struct kiln_step st)
{
    return kiln_sched_push(E->ctx, E->out, st);
}

enum kiln_status
kiln_sk_step1(struct emit *E, enum kiln_step_kind kind, const char *stage, const char *iter)
{
    struct kiln_step st = {.kind = (uint8_t)kind, .stage = kiln_sk_sym(E, stage)};
    if (iter)
        st.iter = kiln_sk_sym(E, iter);
    return kiln_sk_push(E, st);
}

static uint32_t
leaf_find(const struct leaves *L, const char *name)
{
    for (uint32_t i = 0; i < L->n; i++)
        if (!strcmp(L->name[i], name))
            return i;
    return KILN_NONE;
}

enum kiln_status
kiln_sk_emit_split(struct emit *E, const char *stage, struct leaves *L, const char *iter,
                   uint32_t nf, const int64_t *f)
{
    uint32_t pos = leaf_find(L, iter);
    if (pos == KILN_NONE || L->n + nf > KILN_COUNTOF(L->name))
        return KILN_FAIL(E->ctx, KILN_ERR_INTERNAL, "sketch", "sketch: no loop %s in %s", iter,
                         stage);
    struct kiln_step st = {.kind = KILN_STEP_SPLIT,
                           .stage = kiln_sk_sym(E, stage),
                           .iter = kiln_sk_sym(E, iter),
                           .n = (uint8_t)nf};
    for (uint32_t j = 0; j < nf; j++)
        st.factors[j] = f[j];
    KILN_TRY(kiln_sk_push(E, st));
    char base[KILN_SKETCH_NAME];
    snprintf(base, sizeof base, "%s", iter);
    memmove(&L->name[pos + nf + 1], &L->name[pos + 1], sizeof(L->name[0]) * (L->n - pos - 1));
    for (uint32_t j = 0; j <= nf; j++)
        snprintf(L->name[pos + j], KILN_SKETCH_NAME, "%.58s.%u", base, j);
    L->n += nf;
    return KILN_OK;
}

/* Reorders the leaves into `want` (a permutation of them). A reorder step permutes the loops it
 * lists among the positions they occupy, so each step applies whole cycles of the remaining
 * permutation (at most KILN_STEP_MAXN positions; a longer cycle is shortened by a rotation). */
enum kiln_status
kiln_sk_emit_order(struct emit *E, const char *stage, struct leaves *L,
                   char want[][KILN_SKETCH_NAME])
{
    for (uint32_t guard = 0; guard <= L->n; guard++) {
        uint32_t to[64], newat[64];
        bool     done[64] = {false}, any = false;
        for (uint32_t i = 0; i < L->n; i++) {
            to[i] = KILN_NONE;
            for (uint32_t j = 0; j < L->n && to[i] == KILN_NONE; j++)
                to[i] = strcmp(L->name[i], want[j]) ? KILN_NONE : j;
            if (to[i] == KILN_NONE)
                return KILN_FAIL(E->ctx, KILN_ERR_INTERNAL, "sketch",
                                 "sketch: loop %s of %s missing from the order", L->name[i], stage);
            done[i] = to[i] == i;
            any |= !done[i];
        }
        if (!any)
            return KILN_OK;
        uint32_t used = 0, pos[KILN_STEP_MAXN];
        for (uint32_t i = 0; i < L->n && used + 2 <= KILN_STEP_MAXN; i++) {
            if (done[i])
                continue;
            uint32_t cyc[64], m = 0;
            for (uint32_t c = i; !done[c] && m < 64; c = to[c]) {
                done[c] = true;
                cyc[m++] = c;
            }
            uint32_t take = m <= KILN_STEP_MAXN - used ? m : KILN_STEP_MAXN - used;
            for (uint32_t j = 0; j < take; j++) {
                pos[used++] = cyc[j];
                /* the loop at cyc[j] moves to cyc[j + 1]; the last taken closes the rotation */
                newat[j + 1 < take ? to[cyc[j]] : cyc[0]] = cyc[j];
            }
        }
        for (uint32_t j = 1; j < used; j++) /* positions in increasing order */
            for (uint32_t k = j; k > 0 && pos[k - 1] > pos[k]; k--) {
                uint32_t t = pos[k];
                pos[k] = pos[k - 1];
                pos[k - 1] = t;
            }
        struct kiln_step st = {
            .kind = KILN_STEP_REORDER, .stage = kiln_sk_sym(E, stage), .n = (uint8_t)used};
        char moved[KILN_STEP_MAXN][KILN_SKETCH_NAME];
        for (uint32_t j = 0; j < used; j++) {
            memcpy(moved[j], L->name[newat[pos[j]]], KILN_SKETCH_NAME);
            st.iters[j] = kiln_sk_sym(E, moved[j]);
        }
        KILN_TRY(kiln_sk_push(E, st));
        for (uint32_t j = 0; j < used; j++)
            memcpy(L->name[pos[j]], moved[j], KILN_SKETCH_NAME);
    }
    return KILN_FAIL(E->ctx, KILN_ERR_INTERNAL, "sketch", "sketch: reordering %s did not converge",
                     stage);
}

/* Fuses the n leaves starting at position pos and marks the result parallel; *name gets the
 * parallel loop's name. */
static enum kiln_status
emit_parallel(struct emit *E, const char *stage, struct leaves *L, uint32_t pos, uint32_t n,
              char *name)
{
    if (n == 0)
        return KILN_OK;
    if (n > KILN_STEP_MAXN)
        n = KILN_STEP_MAXN;
    if (n > 1) {
        struct kiln_step st = {
            .kind = KILN_STEP_FUSE, .stage = kiln_sk_sym(E, stage), .n = (uint8_t)n};
        char fused[256] = "";
        for (uint32_t j = 0; j < n; j++) {
            st.iters[j] = kiln_sk_sym(E, L->name[pos + j]);
            if (strlen(fused) + strlen(L->name[pos + j]) + 2 < sizeof fused) {
                strcat(fused, j ? "@" : "");
                strcat(fused, L->name[pos + j]);
            }
        }
        KILN_TRY(kiln_sk_push(E, st));
        if (strlen(fused) >= KILN_SKETCH_NAME)
            return KILN_FAIL(E->ctx, KILN_ERR_INTERNAL, "sketch", "sketch: fused name too long");
        snprintf(L->name[pos], KILN_SKETCH_NAME, "%s", fused);
        memmove(&L->name[pos + 1], &L->name[pos + n], sizeof(L->name[0]) * (L->n - pos - n));
        L->n -= n - 1;
    }
    if (name)
        snprintf(name, KILN_SKETCH_NAME, "%s", L->name[pos]);
    return kiln_sk_step1(E, KILN_STEP_PARALLEL, stage, L->name[pos]);
}

int64_t
kiln_sk_val(const struct emit *E, uint32_t knob, uint32_t part, int64_t dflt)
{
    if (knob == KILN_NONE)
        return dflt;
    return E->p->v[E->sk->knob[knob].slot + part];
}

static enum kiln_status
emit_inline_plain(struct emit *E, uint32_t i, const struct kiln_op_plan *p)
{
    const struct kiln_graph  *g = E->g;
    const struct kiln_opdef  *op = &g->op[i];
    const struct kiln_tensor *t = &g->tensor[op->out];
    const char               *tn = kiln_graph_tensor_name(g, op->out);
    char                      names[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME];
    struct leaves             L = {.n = 0};
    kiln_sketch_axis_names(E->ctx, g, i, names);
    for (uint32_t k = 0; k < (uint32_t)t->ndim + op->nred; k++)
        memcpy(L.name[L.n++], names[k], KILN_SKETCH_NAME);
    uint32_t nsp = t->ndim;
    char     vec[KILN_SKETCH_NAME] = "";
    if (p->k_vec != KILN_NONE && t->ndim) {
        uint32_t last = t->ndim - 1u;
        int64_t  f = kiln_sk_val(E, p->k_split[last], 0, 1);
        if (kiln_sk_val(E, p->k_vec, 0, 0) && f >= 2) {
            KILN_TRY(kiln_sk_emit_split(E, tn, &L, names[last], 1, &f));
            snprintf(vec, sizeof vec, "%.58s.1", names[last]);
            if (op->nred) {
                /* a reduction: the vector part inside the reduction loops, one accumulator per
                 * lane (spatial ..., last.0, reductions ..., last.1) */
                char want[KILN_MAX_DIMS + KILN_MAX_REDUCE + 1][KILN_SKETCH_NAME];
                memcpy(want, L.name, sizeof(L.name[0]) * L.n);
                memmove(&want[last + 1], &want[last + 2], sizeof(want[0]) * op->nred);
                memcpy(want[L.n - 1], vec, KILN_SKETCH_NAME);
                KILN_TRY(kiln_sk_emit_order(E, tn, &L, want));
            }
        }
    }
    int64_t par = kiln_sk_val(E, p->k_loc, 0, 0) ? 0 : kiln_sk_val(E, p->k_par, 0, 0);
    if (par > nsp)
        par = nsp;
    KILN_TRY(emit_parallel(E, tn, &L, 0, (uint32_t)par, NULL));
    if (vec[0])
        KILN_TRY(kiln_sk_step1(E, KILN_STEP_VECTORIZE, tn, vec));
    return KILN_OK;
}

static enum kiln_status
emit_rfactor(struct emit *E, uint32_t i, const struct kiln_op_plan *p)
{
    const struct kiln_graph  *g = E->g;
    const struct kiln_opdef  *op = &g->op[i];
    const struct kiln_tensor *t = &g->tensor[op->out];
    const char               *tn = kiln_graph_tensor_name(g, op->out);
    char                      names[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME];
    struct leaves             L = {.n = 0};
    kiln_sketch_axis_names(E->ctx, g, i, names);
    for (uint32_t k = 0; k < (uint32_t)t->ndim + op->nred; k++)
        memcpy(L.name[L.n++], names[k], KILN_SKETCH_NAME);
    char r[KILN_SKETCH_NAME];
    snprintf(r, sizeof r, "%s", names[t->ndim]);
    if (op->nred > 1) {
        struct kiln_step st = {.kind = KILN_STEP_FUSE, .stage = kiln_sk_sym(E, tn), .n = op->nred};
        char             fused[256] = "";
        for (uint32_t j = 0; j < op->nred; j++) {
            st.iters[j] = kiln_sk_sym(E, names[t->ndim + j]);
            strcat(fused, j ? "@" : "");
            strncat(fused, names[t->ndim + j], KILN_SKETCH_NAME);
        }
        KILN_TRY(kiln_sk_push(E, st));
        if (strlen(fused) + 3 >= KILN_SKETCH_NAME)
            return KILN_FAIL(E->ctx, KILN_ERR_INTERNAL, "sketch", "sketch: fused name too long");
        snprintf(r, sizeof r, "%s", fused);
        L.n = t->ndim;
        memcpy(L.name[L.n++], r, KILN_SKETCH_NAME);
    }
    int64_t f = kiln_sk_val(E, p->k_split[t->ndim], 0, 1);
    KILN_TRY(kiln_sk_emit_split(E, tn, &L, r, 1, &f));
    char        rin[KILN_SKETCH_NAME], rout[KILN_SKETCH_NAME];
    const char *rf = kiln_sk_derived(E, tn, KILN_STEP_RFACTOR);
    snprintf(rout, sizeof rout, "%.58s.0", r);
    snprintf(rin, sizeof rin, "%.58s.1", r);
    KILN_TRY(kiln_sk_step1(E, KILN_STEP_RFACTOR, tn, p->rf_inner ? rin : rout));
    /* tn.rf: spatial axes, the rfactored part (spatial), the other part (reduction) */
    struct leaves R = {.n = 0};
    for (uint32_t k = 0; k < t->ndim; k++)
        memcpy(R.name[R.n++], names[k], KILN_SKETCH_NAME);
    memcpy(R.name[R.n++], p->rf_inner ? rin : rout, KILN_SKETCH_NAME);
    memcpy(R.name[R.n++], p->rf_inner ? rout : rin, KILN_SKETCH_NAME);
    uint32_t nsp = t->ndim + (p->rf_inner ? 0u : 1u);
    if (p->rf_inner) {
        char want[64][KILN_SKETCH_NAME];
        memcpy(want, R.name, sizeof(R.name[0]) * R.n);
        memcpy(want[t->ndim], rout, KILN_SKETCH_NAME);
        memcpy(want[t->ndim + 1], rin, KILN_SKETCH_NAME);
        KILN_TRY(kiln_sk_emit_order(E, rf, &R, want));
    }
    int64_t par = kiln_sk_val(E, p->k_par, 0, 0);
    if (par > nsp)
        par = nsp;
    KILN_TRY(emit_parallel(E, rf, &R, 0, (uint32_t)par, NULL));
    /* the combine (tn over the partial results) parallel over the same spatial axes: it reads
     * rf's row as rf wrote it (a softmax's max over [12,128] rows of 64 partials ran serial) */
    if (par > t->ndim)
        par = t->ndim;
    struct leaves C = {.n = 0};
    for (uint32_t k = 0; k < t->ndim; k++)
        memcpy(C.name[C.n++], names[k], KILN_SKETCH_NAME);
    KILN_TRY(emit_parallel(E, tn, &C, 0, (uint32_t)par, NULL));
    if (p->rf_inner && kiln_sk_val(E, p->k_vec, 0, 0) && f >= 2)
        KILN_TRY(kiln_sk_step1(E, KILN_STEP_VECTORIZE, rf, rin));
    return KILN_OK;
}

/* The pad step for op i's guarded arguments (P reads them), each padded copy computed at P's
 * loop `at`: its outermost loop when P is computed at a tile of its consumer (cache write or a
 * fused consumer: the consumer's outer tile), else its last S0 loop or the fused parallel loop.
 * One outer tile's window is padded at a time, in parallel, while it is in cache; a copy at
 * P's inner tiles would be redone for every small tile. An argument packed or padded for an
 * earlier op is left alone. */
static enum kiln_status
emit_pad(struct emit *E, const struct kiln_op_plan *p, const char *P, const char *at)
{
    for (uint32_t q = 0; q < p->npad; q++) {
        uint32_t pt = p->padt[q];
        bool     done = E->npadded == KILN_COUNTOF(E->padded);
        for (uint32_t j = 0; j < E->npacked; j++)
            done |= E->packed[j] == pt;
        for (uint32_t j = 0; j < E->npadded; j++)
            done |= E->padded[j] == pt;
        if (done)
            continue;
        E->padded[E->npadded++] = pt;
        const char      *an = kiln_graph_tensor_name(E->g, pt);
        struct kiln_step st = {.kind = KILN_STEP_PAD,
                               .stage = kiln_sk_sym(E, an),
                               .n = 1,
                               .iters = {kiln_sk_sym(E, P)}};
        KILN_TRY(kiln_sk_push(E, st));
        struct kiln_step ca = {.kind = KILN_STEP_COMPUTE_AT,
                               .stage = kiln_sk_sym(E, kiln_sk_derived(E, an, KILN_STEP_PAD)),
                               .target = kiln_sk_sym(E, P),
                               .iter = kiln_sk_sym(E, at)};
        KILN_TRY(kiln_sk_push(E, ca));
    }
    return KILN_OK;
}

/* Multi-level tiling SSRSRS of op i: with cache write (tn.local computed at a tile of tn), with
 * a fused consumer (op i computed at a tile of its consumer), or alone. */
static enum kiln_status
emit_tile(struct emit *E, uint32_t i, const struct kiln_op_plan *p)
{
    kiln_ctx                 *ctx = E->ctx;
    const struct kiln_graph  *g = E->g;
    const struct kiln_opdef  *op = &g->op[i];
    const struct kiln_tensor *t = &g->tensor[op->out];
    const char               *tn = kiln_graph_tensor_name(g, op->out);
    char                      names[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME];
    kiln_sketch_axis_names(ctx, g, i, names);
    uint32_t nd = t->ndim, nr = op->nred;
    int64_t  l[KILN_MAX_DIMS][3], rl[KILN_MAX_REDUCE];
    for (uint32_t k = 0; k < nd; k++)
        for (uint32_t j = 0; j < 3; j++)
            l[k][j] = kiln_sk_val(E, p->k_split[k], j, 1);
    for (uint32_t r = 0; r < nr; r++)
        rl[r] = kiln_sk_val(E, p->k_split[nd + r], 0, 1);
    uint32_t v = p->nvcand ? p->vcand[kiln_sk_val(E, p->k_vaxis, 0, 0)] : 0;
    bool     vec = kiln_sk_val(E, p->k_vec, 0, 0) && p->nvcand && l[v][2] >= 2;
    int64_t  unroll = kiln_unroll_steps[kiln_sk_val(E, p->k_unroll, 0, 0)];
    int64_t  par = kiln_sk_val(E, p->k_par, 0, 0);
    /* spatial axes in loop order within a level: split ones, the vector axis last */
    uint32_t sorder[KILN_MAX_DIMS], ns = 0;
    for (uint32_t k = 0; k < nd; k++)
        if (p->k_split[k] != KILN_NONE && k != v)
            sorder[ns++] = k;
    if (p->nvcand)
        sorder[ns++] = v;
    /* packing of arguments read with a stride along the vector axis */
    if (p->nvcand && kiln_sk_val(E, p->k_pack, 0, 0) && l[v][2] >= 2) {
        for (uint32_t q = 0; q < p->npack[v]; q++) {
            uint32_t                  pt = p->pack_t[v][q], d = p->pack_d[v][q];
            const struct kiln_tensor *tt = &g->tensor[pt];
            bool                      done = false;
            for (uint32_t j = 0; j < E->npacked; j++)
                done |= E->packed[j] == pt;
            if (done || E->npacked == KILN_COUNTOF(E->packed) || l[v][2] > tt->shape[d])
                continue;
            E->packed[E->npacked++] = pt;
            const char      *an = kiln_graph_tensor_name(g, pt);
            struct kiln_step st = {.kind = KILN_STEP_PACK,
                                   .stage = kiln_sk_sym(E, an),
                                   .value = d,
                                   .n = 2,
                                   .factors = {l[v][2], 0}};
            KILN_TRY(kiln_sk_push(E, st));
            const char *ps = kiln_sk_derived(E, an, KILN_STEP_PACK);
            char        it[16];
            int64_t     outer0 = (tt->shape[d] + l[v][2] - 1) / l[v][2];
            if (E->sk->priv->cores > 1 && outer0 > 1)
                KILN_TRY(kiln_sk_step1(E, KILN_STEP_PARALLEL, ps, "i0"));
            snprintf(it, sizeof it, "i%u", (unsigned)tt->ndim);
            KILN_TRY(kiln_sk_step1(E, KILN_STEP_VECTORIZE, ps, it));
        }
    }
    const char *P = tn, *X = NULL; /* producer (tiled SSRSRS) and consumer stage */
    char        xnames[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME];
    if (p->mode == KILN_PLAN_TILE_CW) {
        KILN_TRY(kiln_sk_step1(E, KILN_STEP_CACHE_WRITE, tn, NULL));
        P = kiln_sk_derived(E, tn, KILN_STEP_CACHE_WRITE);
        X = tn;
        memcpy(xnames, names, sizeof names);
    } else if (p->mode == KILN_PLAN_TILE_FUSE) {
        X = kiln_graph_tensor_name(g, g->op[p->consumer].out);
        kiln_sketch_axis_names(ctx, g, p->consumer, xnames);
    }
    char want[64][KILN_SKETCH_NAME];
    if (X) {
        /* consumer: S0 S1 S2 S3 over the split axes, unsplit axes outermost */
        struct leaves XL = {.n = 0};
        for (uint32_t k = 0; k < nd; k++)
            memcpy(XL.name[XL.n++], xnames[k], KILN_SKETCH_NAME);
        for (uint32_t s = 0; s < ns; s++)
            KILN_TRY(kiln_sk_emit_split(E, X, &XL, xnames[sorder[s]], 3, l[sorder[s]]));
        uint32_t nw = 0;
        for (uint32_t k = 0; k < nd; k++)
            if (p->k_split[k] == KILN_NONE)
                memcpy(want[nw++], xnames[k], KILN_SKETCH_NAME);
        uint32_t s0 = nw;
        for (uint32_t lv = 0; lv < 4; lv++)
            for (uint32_t s = 0; s < ns; s++)
                snprintf(want[nw++], KILN_SKETCH_NAME, "%.58s.%u", xnames[sorder[s]], lv);
        KILN_TRY(kiln_sk_emit_order(E, X, &XL, want));
        char at[KILN_SKETCH_NAME], parname[KILN_SKETCH_NAME] = "";
        if (par > ns)
            par = ns;
        KILN_TRY(emit_parallel(E, X, &XL, s0, (uint32_t)par, parname));
        /* level 1: after the last S0 loop (the fused parallel loop when it took them all) */
        if (p->level == 1 && par == (int64_t)ns && par > 0)
            snprintf(at, sizeof at, "%s", parname);
        else
            snprintf(at, sizeof at, "%.58s.%u", xnames[sorder[ns - 1]], p->level == 1 ? 0u : 1u);
        if (vec)
            KILN_TRY(kiln_sk_step1(E, KILN_STEP_VECTORIZE, X, XL.name[XL.n - 1]));
        struct kiln_step st = {.kind = KILN_STEP_COMPUTE_AT,
                               .stage = kiln_sk_sym(E, P),
                               .target = kiln_sk_sym(E, X),
                               .iter = kiln_sk_sym(E, at)};
        KILN_TRY(kiln_sk_push(E, st));
    }
    /* producer: S R S R S below the attach point (or S S R S R S alone) */
    uint32_t      nlev = X ? 3 : 4;
    struct leaves PL = {.n = 0};
    for (uint32_t k = 0; k < nd + nr; k++)
        memcpy(PL.name[PL.n++], names[k], KILN_SKETCH_NAME);
    for (uint32_t s = 0; s < ns; s++)
        KILN_TRY(
            kiln_sk_emit_split(E, P, &PL, names[sorder[s]], nlev - 1, &l[sorder[s]][4 - nlev]));
    for (uint32_t r = 0; r < nr; r++)
        if (p->k_split[nd + r] != KILN_NONE)
            KILN_TRY(kiln_sk_emit_split(E, P, &PL, names[nd + r], 1, &rl[r]));
    uint32_t nw = 0;
    for (uint32_t k = 0; k < nd; k++)
        if (p->k_split[k] == KILN_NONE)
            memcpy(want[nw++], names[k], KILN_SKETCH_NAME);
    uint32_t s0 = nw;
    for (uint32_t lv = 0; lv < nlev; lv++) {
        if (lv == nlev - 2 || lv == nlev - 1) {
            uint32_t rp = lv == nlev - 2 ? 0 : 1;
            for (uint32_t r = 0; r < nr; r++) {
                if (p->k_split[nd + r] != KILN_NONE)
                    snprintf(want[nw++], KILN_SKETCH_NAME, "%.58s.%u", names[nd + r], rp);
                else if (rp == 0)
                    memcpy(want[nw++], names[nd + r], KILN_SKETCH_NAME);
            }
        }
        for (uint32_t s = 0; s < ns; s++)
            snprintf(want[nw++], KILN_SKETCH_NAME, "%.58s.%u", names[sorder[s]], lv);
    }
    KILN_TRY(kiln_sk_emit_order(E, P, &PL, want));
    char outer[KILN_SKETCH_NAME];
    snprintf(outer, sizeof outer, "%.58s.0", names[sorder[ns - 1]]);
    if (!X && par) {
        char parname[KILN_SKETCH_NAME];
        if (par > ns)
            par = ns;
        KILN_TRY(emit_parallel(E, P, &PL, s0, (uint32_t)par, parname));
        if (par == (int64_t)ns)
            snprintf(outer, sizeof outer, "%s", parname);
    }
    E->tile_stage[i] = kiln_arena_strdup(ctx, P);
    E->tile_iter[i] = kiln_arena_strdup(ctx, outer);
    if (vec)
        KILN_TRY(kiln_sk_step1(E, KILN_STEP_VECTORIZE, P, PL.name[PL.n - 1]));
    if (unroll) {
        struct kiln_step st = {
            .kind = KILN_STEP_AUTO_UNROLL, .stage = kiln_sk_sym(E, P), .value = unroll};
        KILN_TRY(kiln_sk_push(E, st));
    }
    if (kiln_sk_val(E, p->k_pad, 0, 0))
        KILN_TRY(emit_pad(E, p, P, X ? PL.name[0] : outer));
    return KILN_OK;
}

enum kiln_status
kiln_prog_schedule(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_sketch *sk,
                   const struct kiln_prog *p, struct kiln_schedule *out)
{
    const struct kiln_sketch_priv *pv = sk->priv;
    if (!pv || (pv->nop && pv->nop != g->nop))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "sketch",
                         "sketch '%s' was made for a graph of %u ops, not %u", sk->desc,
                         pv ? pv->nop : 0, g->nop);
    if (!kiln_prog_valid(sk, p))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "sketch",
                         "program has out-of-range knob values for sketch '%s'", sk->desc);
    struct emit E = {.ctx = ctx, .g = g, .sk = sk, .p = p, .out = out};
    E.tile_stage = kiln_arena_alloc(ctx, sizeof(char *) * (pv->nop + 1));
    E.tile_iter = kiln_arena_alloc(ctx, sizeof(char *) * (pv->nop + 1));
    if (!E.tile_stage || !E.tile_iter)
        return ctx->err.status;
    if (sk->gpu)
        return kiln_gpu_prog_schedule(&E);
    for (uint32_t i = 0; i < pv->nop; i++)
        if (pv->op[i].mode == KILN_PLAN_INLINE)
            KILN_TRY(kiln_sk_step1(&E, KILN_STEP_COMPUTE_INLINE,
                                   kiln_graph_tensor_name(g, g->op[i].out), NULL));
    for (uint32_t i = 0; i < pv->nop; i++) {
        const struct kiln_op_plan *op = &pv->op[i];
        switch ((enum kiln_plan_mode)op->mode) {
        case KILN_PLAN_INLINE:
        case KILN_PLAN_CONSUMER:
            break;
        case KILN_PLAN_PLAIN:
            KILN_TRY(emit_inline_plain(&E, i, op));
            break;
        case KILN_PLAN_RFACTOR:
            KILN_TRY(emit_rfactor(&E, i, op));
            break;
        case KILN_PLAN_TILE:
        case KILN_PLAN_TILE_CW:
        case KILN_PLAN_TILE_FUSE:
            KILN_TRY(emit_tile(&E, i, op));
            break;
        case KILN_PLAN_XREDUCE: /* a GPU mode */
            break;
        }
    }
    for (uint32_t i = 0; i < pv->nop; i++) {
        const struct kiln_op_plan *op = &pv->op[i];
        if (op->k_loc == KILN_NONE || !kiln_sk_val(&E, op->k_loc, 0, 0))
            continue;
        if (!E.tile_stage[op->reader] || !E.tile_iter[op->reader])
            return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "sketch", "sketch: reader of %s not tiled",
                             kiln_graph_tensor_name(g, g->op[i].out));
        struct kiln_step st = {.kind = KILN_STEP_COMPUTE_AT,
                               .stage = kiln_sk_sym(&E, kiln_graph_tensor_name(g, g->op[i].out)),
                               .target = kiln_sk_sym(&E, E.tile_stage[op->reader]),
                               .iter = kiln_sk_sym(&E, E.tile_iter[op->reader])};
        KILN_TRY(kiln_sk_push(&E, st));
    }
    return KILN_OK;
}
