/* passes/lower.c -- lowering: a graph plus a schedule becomes one loop-nest function.
 *
 * The schedule state (passes/state.c) says, for every stage, its loop order, annotations and
 * where it is computed. Lowering walks root stages in order and emits each as a loop nest over
 * its leaf iterators; the original indices are recovered from the leaves through the split and
 * fuse history, and non-divisible splits get a guard. A reduction's initialisation is placed
 * just outside its outermost reduction loop, over the spatial loops inside that point. A stage
 * computed at another stage's loop is emitted at the top of that loop's body over the *region*
 * its consumer reads during one iteration: bounds come from substituting the inner loop
 * variables by their extremes (for index expressions monotone in them) and simplifying; the
 * region is clamped into the tensor, and an intermediate is stored in a region-sized local
 * buffer that the consumer reads with the region's base subtracted. Inlined stages were already
 * substituted into their readers by the state. */
#include "state.h"

#include <stdio.h>
#include <string.h>

#define LOCAL_STACK_BYTES (64 << 10)
#define MAX_ITEMS         64 /* statements around one loop level: stages computed there, ... */

struct lower {
    kiln_ctx              *ctx;
    struct kiln_state     *s;
    struct kiln_func      *f;
    uint32_t              *buf_of; /* per tensor: function buffer, KILN_NONE until made */
    kiln_expr             *base;   /* per tensor: KILN_MAX_DIMS region bases (nil = none) */
    bool                  *local;  /* per tensor: stored in a region-sized buffer */
    uint8_t               *perm;   /* per tensor, KILN_MAX_DIMS: local dim j holds dim perm[j] */
    struct kiln_var_range *rng;    /* ranges of the loop variables in scope */
    uint32_t               nrng, caprng;
    /* per stage: the stages computed at it (compute_at), in s->order's order, as
     * att[att_start[sid] .. att_start[sid + 1]): each loop looks up its own instead of
     * scanning every stage, which made lowering quadratic in the graph */
    uint32_t *att_start, *att;
};

static enum kiln_status lower_fail(struct lower *L, const char *fmt, ...) KILN_PRINTF(2, 3);

static enum kiln_status
lower_fail(struct lower *L, const char *fmt, ...)
{
    char    msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return KILN_FAIL(L->ctx, KILN_ERR_INVALID, "schedule", "schedule: %s", msg);
}

static const char *
tname(const struct lower *L, uint32_t t)
{
    return kiln_sym_str(L->ctx, L->s->t[t].name);
}

static bool
push_range(struct lower *L, kiln_expr v, int64_t lo, int64_t hi)
{
    struct kiln_var_range r = {v, lo, hi};
    return KILN_VEC_PUSH(L->ctx, L->rng, L->nrng, L->caprng, r);
}

/* ---- buffers ---- */

static uint32_t
make_buffer(struct lower *L, uint32_t t, enum kiln_scope scope, const int64_t *shape)
{
    const struct kiln_stensor *st = &L->s->t[t];
    uint32_t b = kiln_func_add_buffer(L->f, tname(L, t), (enum kiln_dtype)st->dtype, st->ndim,
                                      shape ? shape : st->shape, scope,
                                      t < L->s->g->ntensor ? t : KILN_NONE);
    if (b != KILN_NONE)
        L->buf_of[t] = b;
    return b;
}

struct map_ctx {
    struct lower *L;
};

/* Loads of tensors become loads of their buffers; region-local tensors subtract the base. */
static kiln_expr
map_load(void *ud, kiln_expr load, uint32_t n, const kiln_expr *idx)
{
    struct lower           *L = ud;
    const struct kiln_node *nd = kiln_node_get(L->ctx, load);
    uint32_t                t = (uint32_t)nd->imm;
    if (L->buf_of[t] == KILN_NONE) {
        KILN_FAIL(L->ctx, KILN_ERR_INTERNAL, "lower", "%s is read before it has a buffer",
                  tname(L, t));
        return (kiln_expr){0};
    }
    kiln_expr li[KILN_MAX_DIMS];
    for (uint32_t j = 0; j < n && j < KILN_MAX_DIMS; j++) {
        uint32_t k = L->local[t] ? L->perm[t * KILN_MAX_DIMS + j] : j;
        li[j] = L->local[t] ? kiln_sub(L->ctx, idx[k], L->base[t * KILN_MAX_DIMS + k]) : idx[k];
    }
    return kiln_func_load(L->f, L->buf_of[t], n, li);
}

/* ---- regions of compute_at ---- */

struct region {
    struct lower    *L;
    uint32_t         tensor;
    uint32_t         ndim;
    const kiln_expr *inner; /* variables that range over whole loops */
    const int64_t   *inner_ext;
    uint32_t         ninner;
    kiln_expr        lo[KILN_MAX_DIMS], hi[KILN_MAX_DIMS];
    bool             any, full[KILN_MAX_DIMS];
};

static bool
region_visit(void *ud, kiln_expr load)
{
    struct region *R = ud;
    kiln_ctx      *ctx = R->L->ctx;
    if ((uint32_t)kiln_node_get(ctx, load)->imm != R->tensor)
        return true;
    for (uint32_t d = 0; d < R->ndim; d++) {
        kiln_expr e = kiln_load_idx(ctx, load, d);
        kiln_expr lov[KILN_MAX_LOOPS], hiv[KILN_MAX_LOOPS];
        bool      ok = R->ninner <= KILN_MAX_LOOPS;
        for (uint32_t i = 0; ok && i < R->ninner; i++) {
            enum kiln_mono m = kiln_expr_monotone(ctx, e, R->inner[i]);
            kiln_expr      z = kiln_idx(ctx, 0), top = kiln_idx(ctx, R->inner_ext[i] - 1);
            ok = m != KILN_MONO_UNKNOWN;
            lov[i] = m == KILN_MONO_DEC ? top : z;
            hiv[i] = m == KILN_MONO_DEC ? z : top;
        }
        if (!ok) {
            R->full[d] = true;
            continue;
        }
        kiln_expr lo = kiln_expr_subst_vars(ctx, e, R->inner, lov, R->ninner);
        kiln_expr hi = kiln_expr_subst_vars(ctx, e, R->inner, hiv, R->ninner);
        R->lo[d] = R->any ? kiln_min(ctx, R->lo[d], lo) : lo;
        R->hi[d] = R->any ? kiln_max(ctx, R->hi[d], hi) : hi;
    }
    R->any = true;
    return kiln_ok(ctx);
}

/* Computes base[d] and ext[d] of the region of tensor t read by `body` when the variables in
 * inner range over their loops; falls back to the whole tensor where bounds are unknown. */
static enum kiln_status
region_of(struct lower *L, uint32_t t, kiln_expr body, const kiln_expr *inner,
          const int64_t *inner_ext, uint32_t ninner, kiln_expr *base, int64_t *ext)
{
    kiln_ctx                  *ctx = L->ctx;
    const struct kiln_stensor *tt = &L->s->t[t];
    struct region              R = {.L = L,
                                    .tensor = t,
                                    .ndim = tt->ndim,
                                    .inner = inner,
                                    .inner_ext = inner_ext,
                                    .ninner = ninner};
    kiln_expr_visit_loads(ctx, body, region_visit, &R);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    for (uint32_t d = 0; d < tt->ndim; d++) {
        int64_t S = tt->shape[d], lo_c, hi_c, e_c;
        if (!R.any || R.full[d]) {
            base[d] = kiln_idx(ctx, 0);
            ext[d] = S;
            continue;
        }
        kiln_expr lo = kiln_simplify_expr(ctx, R.lo[d], L->rng, L->nrng);
        kiln_expr hi = kiln_simplify_expr(ctx, R.hi[d], L->rng, L->nrng);
        kiln_expr span = kiln_simplify_expr(ctx, kiln_sub(ctx, hi, lo), L->rng, L->nrng);
        if (!kiln_expr_is_int(ctx, span, &e_c)) {
            int64_t slo;
            if (!kiln_expr_bounds(ctx, span, L->rng, L->nrng, &slo, &e_c))
                e_c = S - 1;
        }
        int64_t E = e_c + 1 < S ? e_c + 1 : S;
        if (E < 1)
            E = 1;
        bool inside = kiln_expr_bounds(ctx, lo, L->rng, L->nrng, &lo_c, &hi_c) && lo_c >= 0
                      && kiln_expr_bounds(ctx, kiln_add(ctx, lo, kiln_idx(ctx, E - 1)), L->rng,
                                          L->nrng, &lo_c, &hi_c)
                      && hi_c <= S - 1;
        base[d] =
            inside ? lo : kiln_min(ctx, kiln_max(ctx, lo, kiln_idx(ctx, 0)), kiln_idx(ctx, S - E));
        base[d] = kiln_simplify_expr(ctx, base[d], L->rng, L->nrng);
        ext[d] = E;
    }
    return kiln_ok(ctx) ? KILN_OK : ctx->err.status;
}

/* ---- stages ---- */

struct nest {
    struct lower            *L;
    uint32_t                 sid;
    const struct kiln_stage *st;
    int64_t                 *ext;   /* per iterator */
    kiln_expr               *var;   /* per leaf position: loop variable */
    kiln_expr               *val;   /* per iterator: value */
    const kiln_expr         *base;  /* region base per spatial dim, or NULL */
    kiln_expr                sbody; /* body with roots substituted (tensor loads) */
    kiln_expr                gc[KILN_MAX_DIMS], lc[KILN_MAX_DIMS];
    uint32_t                 first_red;
    struct kiln_stmt       **loop; /* per leaf position: its For statement */
};

static enum kiln_status emit_stage(struct lower *L, uint32_t sid, const kiln_expr *base,
                                   const int64_t *root_ext, struct kiln_stmt **out);

static kiln_expr
reduce_identity(kiln_ctx *ctx, enum kiln_reduce r, enum kiln_dtype dt)
{
    double inf = 1.0 / 0.0;
    return kiln_const(ctx, r == KILN_REDUCE_MAX ? -inf : r == KILN_REDUCE_MIN ? inf : 0, dt);
}

static kiln_expr
guard_all(kiln_ctx *ctx, const kiln_expr *g, uint32_t n)
{
    kiln_expr c = kiln_bool(ctx, true);
    for (uint32_t i = 0; i < n; i++)
        c = kiln_and(ctx, c, g[i]);
    return c;
}

static struct kiln_stmt *
guarded(kiln_ctx *ctx, kiln_expr cond, struct kiln_stmt *s)
{
    int64_t v;
    if (kiln_expr_is_int(ctx, cond, &v) && v)
        return s;
    return kiln_stmt_if(ctx, cond, s, NULL);
}

static uint32_t
store_buffer(const struct nest *N)
{
    return N->L->buf_of[N->st->tensor];
}

/* Store index of the stage's output from spatial root values. */
static void
out_index(const struct nest *N, const kiln_expr *val, kiln_expr *idx)
{
    kiln_ctx      *ctx = N->L->ctx;
    uint32_t       t = N->st->tensor;
    bool           local = N->L->local[t];
    const uint8_t *perm = &N->L->perm[t * KILN_MAX_DIMS];
    for (uint32_t d = 0; d < N->st->ndim; d++)
        idx[d] = local ? val[perm[d]] : N->base ? kiln_add(ctx, N->base[d], val[d]) : val[d];
}

/* Initialisation of a reduction over the spatial leaves at positions >= from. */
static struct kiln_stmt *
init_nest(struct nest *N, uint32_t from)
{
    struct lower            *L = N->L;
    kiln_ctx                *ctx = L->ctx;
    const struct kiln_stage *st = N->st;
    kiln_expr                val[KILN_MAX_ITERS], idx[KILN_MAX_DIMS], guards[KILN_MAX_ITERS / 2];
    kiln_expr                fresh[KILN_MAX_LOOPS];
    uint32_t                 nfresh = 0, pos[KILN_MAX_LOOPS];
    for (uint32_t k = 0; k < st->nit; k++)
        val[k] = N->val[k];
    for (uint32_t p = 0; p < st->nleaf; p++) {
        uint32_t l = st->leaf[p];
        if (p < from) {
            val[l] = N->var[p];
        } else if (st->it[l].reduce) {
            val[l] = kiln_idx(ctx, 0);
        } else {
            const char *nm = kiln_arena_printf(ctx, "%s.%s.init", tname(L, st->tensor),
                                               kiln_sym_str(ctx, st->it[l].name));
            val[l] = fresh[nfresh] = kiln_fresh_var(ctx, nm);
            pos[nfresh++] = p;
        }
    }
    /* recompute derived values from the leaves */
    for (uint32_t k = 0; k < st->nit; k++) {
        bool is_leaf = false;
        for (uint32_t p = 0; p < st->nleaf; p++)
            is_leaf |= st->leaf[p] == k;
        if (!is_leaf)
            val[k] = (kiln_expr){0};
    }
    kiln_state_values(ctx, st, N->ext, val);
    out_index(N, val, idx);
    uint32_t          ng = kiln_state_guards(ctx, st, N->ext, val, true, guards);
    kiln_expr         id = reduce_identity(ctx, (enum kiln_reduce)st->reduce,
                                           (enum kiln_dtype)L->s->t[st->tensor].dtype);
    struct kiln_stmt *s = kiln_stmt_store(ctx, store_buffer(N), st->ndim, idx, id);
    s = s ? guarded(ctx, guard_all(ctx, guards, ng), s) : NULL;
    for (uint32_t i = nfresh; i-- > 0 && s;) {
        const struct kiln_iterv *it = &st->it[st->leaf[pos[i]]];
        uint8_t                  ann = it->ann;
        if (ann == KILN_LOOP_PARALLEL)
            ann = KILN_LOOP_SERIAL;
        s = kiln_stmt_for(ctx, fresh[i], kiln_idx(ctx, 0), kiln_idx(ctx, N->ext[st->leaf[pos[i]]]),
                          (enum kiln_loop_kind)ann, s);
        if (s) /* a bound loop inside the reduction: each thread initialises its own part */
            s->u.for_.axis = it->axis;
    }
    return s;
}

static struct kiln_stmt *
main_store(struct nest *N)
{
    struct lower            *L = N->L;
    kiln_ctx                *ctx = L->ctx;
    const struct kiln_stage *st = N->st;
    kiln_expr                idx[KILN_MAX_DIMS], guards[KILN_MAX_ITERS / 2];
    kiln_expr                v = kiln_expr_map_loads(ctx, N->sbody, map_load, L);
    out_index(N, N->val, idx);
    if (st->reduce != KILN_REDUCE_NONE) {
        kiln_expr    acc = kiln_func_load(L->f, store_buffer(N), st->ndim, idx);
        enum kiln_op op = st->reduce == KILN_REDUCE_SUM   ? KILN_OP_ADD
                          : st->reduce == KILN_REDUCE_MAX ? KILN_OP_MAX
                                                          : KILN_OP_MIN;
        v = kiln_binary(ctx, op, acc, v);
    }
    uint32_t          ng = kiln_state_guards(ctx, st, N->ext, N->val, false, guards);
    struct kiln_stmt *s = kiln_stmt_store(ctx, store_buffer(N), st->ndim, idx, v);
    return s ? guarded(ctx, guard_all(ctx, guards, ng), s) : NULL;
}

/* Layout of a region-local buffer: dimensions ordered by how deep their loops sit in the
 * stage (the dimension of the innermost loop last), so a vectorised inner loop walks the
 * buffer contiguously and an unrolled tile becomes registers. */
static void
local_layout(const struct kiln_stage *a, uint8_t *perm)
{
    uint64_t roots[512]; /* bit d: iterator derives from spatial root d */
    int32_t  key[KILN_MAX_DIMS];
    uint32_t nit = a->nit < 512 ? a->nit : 512;
    for (uint32_t k = 0; k < nit; k++)
        roots[k] = k < a->ndim ? (uint64_t)1 << k : 0;
    for (uint32_t r = 0; r < a->nrel; r++) {
        const struct kiln_rel *rel = &a->rel[r];
        if (rel->kind == KILN_REL_SPLIT) {
            for (uint32_t j = 0; j < rel->n; j++)
                if (rel->parts[j] < nit && rel->parent < nit)
                    roots[rel->parts[j]] |= roots[rel->parent];
        } else if (rel->child < nit) {
            for (uint32_t j = 0; j < rel->n; j++)
                if (rel->parts[j] < nit)
                    roots[rel->child] |= roots[rel->parts[j]];
        }
    }
    for (uint32_t d = 0; d < a->ndim; d++) {
        key[d] = -1;
        perm[d] = (uint8_t)d;
        for (uint32_t p = 0; p < a->nleaf; p++)
            if (a->leaf[p] < nit && (roots[a->leaf[p]] >> d & 1))
                key[d] = (int32_t)p;
    }
    for (uint32_t i = 1; i < a->ndim; i++) /* stable insertion sort by key */
        for (uint32_t j = i; j > 0 && key[perm[j - 1]] > key[perm[j]]; j--) {
            uint8_t tmp = perm[j];
            perm[j] = perm[j - 1];
            perm[j - 1] = tmp;
        }
}

/* Stages computed at leaf position p of N's stage, emitted with their allocations around
 * `rest`. */
static enum kiln_status
attach_at(struct nest *N, uint32_t p, struct kiln_stmt **items, uint32_t *nitems, uint32_t *allocs,
          uint32_t *nallocs)
{
    struct lower      *L = N->L;
    struct kiln_state *s = L->s;
    uint32_t           leaf = N->st->leaf[p];
    kiln_expr          inner[KILN_MAX_LOOPS];
    int64_t            inner_ext[KILN_MAX_LOOPS];
    uint32_t           ninner = 0;
    for (uint32_t q = p + 1; q < N->st->nleaf && ninner < KILN_MAX_LOOPS; q++) {
        inner[ninner] = N->var[q];
        inner_ext[ninner++] = N->ext[N->st->leaf[q]];
    }
    for (uint32_t k = L->att_start[N->sid]; k < L->att_start[N->sid + 1]; k++) {
        uint32_t                 aid = L->att[k];
        const struct kiln_stage *a = &s->st[aid];
        if (a->at_iter != leaf)
            continue;
        if (*nitems + 2 >= MAX_ITEMS) /* room for the init nest and the rest */
            return KILN_FAIL(L->ctx, KILN_ERR_INVALID, "schedule",
                             "schedule: more than %d stages computed at %s.%s", MAX_ITEMS - 2,
                             tname(L, N->st->tensor), kiln_sym_str(L->ctx, N->st->it[leaf].name));
        uint32_t  t = a->tensor;
        kiln_expr base[KILN_MAX_DIMS];
        int64_t   ext[KILN_MAX_DIMS];
        KILN_TRY(region_of(L, t, N->sbody, inner, inner_ext, ninner, base, ext));
        for (uint32_t d = 0; d < a->ndim; d++)
            L->base[t * KILN_MAX_DIMS + d] = base[d];
        if (!s->t[t].is_output) {
            int64_t  bytes = (int64_t)kiln_dtype_size((enum kiln_dtype)s->t[t].dtype);
            int64_t  pext[KILN_MAX_DIMS];
            uint8_t *perm = &L->perm[t * KILN_MAX_DIMS];
            local_layout(a, perm);
            for (uint32_t d = 0; d < a->ndim; d++) {
                bytes *= ext[d];
                pext[d] = ext[perm[d]];
            }
            uint32_t b = make_buffer(L, t,
                                     s->t[t].shared               ? KILN_SCOPE_SHARED
                                     : bytes <= LOCAL_STACK_BYTES ? KILN_SCOPE_STACK
                                                                  : KILN_SCOPE_HEAP,
                                     pext);
            if (b == KILN_NONE)
                return L->ctx->err.status;
            L->local[t] = true;
            allocs[(*nallocs)++] = b;
        }
        struct kiln_stmt *sub;
        KILN_TRY(emit_stage(L, aid, base, ext, &sub));
        items[(*nitems)++] = sub;
    }
    return KILN_OK;
}

static enum kiln_status
emit_level(struct nest *N, uint32_t p, struct kiln_stmt **out)
{
    struct lower            *L = N->L;
    kiln_ctx                *ctx = L->ctx;
    struct kiln_stmt        *items[MAX_ITEMS];
    uint32_t                 nitems = 0, allocs[MAX_ITEMS], nallocs = 0;
    const struct kiln_stage *st = N->st;
    if (p == st->nleaf) {
        *out = main_store(N);
        return *out ? KILN_OK : ctx->err.status;
    }
    uint32_t leaf = st->leaf[p];
    /* each level is a frame here and in every later walk of the statement tree */
    if (L->nrng >= KILN_MAX_NEST)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                         "schedule: loop nest deeper than %d loops at %s.%s (stages computed at "
                         "loops of stages computed at loops ...)",
                         KILN_MAX_NEST, tname(L, st->tensor), kiln_sym_str(ctx, st->it[leaf].name));
    if (!push_range(L, N->var[p], 0, N->ext[leaf] - 1))
        return ctx->err.status;
    KILN_TRY(attach_at(N, p, items, &nitems, allocs, &nallocs));
    if (st->reduce != KILN_REDUCE_NONE && p + 1 == N->first_red)
        items[nitems++] = init_nest(N, p + 1);
    struct kiln_stmt *rest;
    KILN_TRY(emit_level(N, p + 1, &rest));
    items[nitems++] = rest;
    L->nrng--;
    struct kiln_stmt *body = nitems == 1 ? items[0] : kiln_stmt_seq(ctx, nitems, items);
    for (uint32_t i = nallocs; i-- > 0 && body;)
        body = kiln_stmt_alloc(ctx, allocs[i], body);
    uint8_t ann = st->it[leaf].ann;
    if (ann == KILN_LOOP_VECTOR && (p + 1 != st->nleaf || nallocs || nitems > 1))
        return lower_fail(L,
                          "vectorized loop %s of %s must be the innermost loop of its stage "
                          "with nothing computed inside it",
                          kiln_sym_str(ctx, st->it[leaf].name), tname(L, st->tensor));
    if ((ann == KILN_LOOP_VECTOR && N->ext[leaf] > 64)
        || (ann == KILN_LOOP_UNROLL && N->ext[leaf] > 1024))
        return lower_fail(L, "%s loop %s of %s has %lld iterations; at most %d",
                          kiln_loop_kind_name[ann], kiln_sym_str(ctx, st->it[leaf].name),
                          tname(L, st->tensor), (long long)N->ext[leaf],
                          ann == KILN_LOOP_VECTOR ? 64 : 1024);
    *out = kiln_stmt_for(ctx, N->var[p], kiln_idx(ctx, 0), kiln_idx(ctx, N->ext[leaf]),
                         (enum kiln_loop_kind)ann, body);
    if (*out) {
        (*out)->u.for_.axis = st->it[leaf].axis; /* GPU loops (bind); 0 for the others */
        (*out)->u.for_.thread_reduce = st->it[leaf].reduce && ann == KILN_LOOP_GPU_THREAD;
    }
    N->loop[p] = *out;
    return *out ? KILN_OK : ctx->err.status;
}

/* Marks inner loops unrolled while the product of their trip counts stays within max. */
static void
auto_unroll(struct nest *N)
{
    int64_t prod = 1;
    for (uint32_t p = N->st->nleaf; p-- > 0;) {
        struct kiln_stmt *loop = N->loop[p];
        int64_t           e = N->ext[N->st->leaf[p]];
        if (!loop || kiln_mul_overflows(prod, e, &prod) || prod > N->st->auto_unroll)
            return;
        if (loop->u.for_.loop == KILN_LOOP_SERIAL)
            loop->u.for_.loop = KILN_LOOP_UNROLL;
    }
}

/* A stage with a reduction iterator bound to threadIdx.x (a cross-thread reduction,
 * docs/schedule.md): its spatial loops must all be outside its reduction loops, and nothing
 * may be computed at its reduction loops. The bound loop is then emitted as the outermost
 * reduction loop (each thread runs the other reduction loops over its share; the order of the
 * reduction loops changes only the order of the combination), through a copy of the stage
 * with that leaf order in *st. */
static enum kiln_status
thread_reduce_order(struct lower *L, uint32_t sid, const struct kiln_stage **st)
{
    kiln_ctx                *ctx = L->ctx;
    const struct kiln_stage *s0 = *st;
    uint32_t                 bound = KILN_NONE, first_red = KILN_NONE;
    for (uint32_t p = 0; p < s0->nleaf; p++) {
        const struct kiln_iterv *it = &s0->it[s0->leaf[p]];
        if (it->reduce && first_red == KILN_NONE)
            first_red = p;
        if (it->reduce && it->ann == KILN_LOOP_GPU_THREAD)
            bound = p;
    }
    if (bound == KILN_NONE)
        return KILN_OK;
    const char *rn = kiln_sym_str(ctx, s0->it[s0->leaf[bound]].name);
    for (uint32_t p = first_red; p < s0->nleaf; p++)
        if (!s0->it[s0->leaf[p]].reduce)
            return lower_fail(L,
                              "%s binds its reduction loop %s to threadIdx.x (a cross-thread "
                              "reduction), so its spatial loops must all be outside its "
                              "reduction loops, but %s is inside (reorder it out)",
                              tname(L, s0->tensor), rn,
                              kiln_sym_str(ctx, s0->it[s0->leaf[p]].name));
    for (uint32_t i = 0; i < L->s->nst; i++) {
        const struct kiln_stage *a = &L->s->st[i];
        if (a->attach == KILN_ATTACH_AT && a->at_stage == sid && a->at_iter < s0->nit
            && s0->it[a->at_iter].reduce)
            return lower_fail(L,
                              "%s is computed at the reduction loop %s of %s, whose reduction "
                              "is bound to threadIdx.x (a cross-thread reduction): compute it "
                              "at a spatial loop",
                              tname(L, a->tensor), kiln_sym_str(ctx, s0->it[a->at_iter].name),
                              tname(L, s0->tensor));
    }
    struct kiln_stage *cp = kiln_arena_alloc(ctx, sizeof *cp);
    uint32_t          *leaf = kiln_arena_alloc(ctx, sizeof(uint32_t) * (s0->nleaf + 1));
    if (!cp || !leaf)
        return ctx->err.status;
    *cp = *s0;
    memcpy(leaf, s0->leaf, sizeof(uint32_t) * s0->nleaf);
    memmove(&leaf[first_red + 1], &leaf[first_red], sizeof(uint32_t) * (bound - first_red));
    leaf[first_red] = s0->leaf[bound];
    cp->leaf = leaf;
    *st = cp;
    return KILN_OK;
}

static enum kiln_status
emit_stage(struct lower *L, uint32_t sid, const kiln_expr *base, const int64_t *root_ext,
           struct kiln_stmt **out)
{
    kiln_ctx                  *ctx = L->ctx;
    const struct kiln_stage   *st = &L->s->st[sid];
    const struct kiln_stensor *t = &L->s->t[st->tensor];
    struct kiln_arena_mark     m = kiln_arena_mark(ctx);
    (void)m; /* loop statements live on; scratch below is small */
    int64_t           *ext = kiln_arena_alloc(ctx, sizeof(int64_t) * (st->nit + 1));
    kiln_expr         *val = kiln_arena_alloc(ctx, sizeof(kiln_expr) * (st->nit + 1));
    kiln_expr         *var = kiln_arena_alloc(ctx, sizeof(kiln_expr) * (st->nleaf + 1));
    struct kiln_stmt **loop = kiln_arena_alloc(ctx, sizeof(*loop) * (st->nleaf + 1));
    if (!ext || !val || !var || !loop)
        return ctx->err.status;
    kiln_state_extents(st, root_ext ? root_ext : t->shape, ext);
    KILN_TRY(thread_reduce_order(L, sid, &st));
    struct nest N = {.L = L,
                     .sid = sid,
                     .st = st,
                     .ext = ext,
                     .var = var,
                     .val = val,
                     .base = base,
                     .loop = loop,
                     .first_red = st->nleaf};
    for (uint32_t p = 0; p < st->nleaf; p++) {
        const char *nm = kiln_arena_printf(ctx, "%s.%s", tname(L, st->tensor),
                                           kiln_sym_str(ctx, st->it[st->leaf[p]].name));
        var[p] = val[st->leaf[p]] = kiln_fresh_var(ctx, nm);
        if (st->it[st->leaf[p]].reduce && N.first_red == st->nleaf)
            N.first_red = p;
    }
    kiln_state_values(ctx, st, ext, val);
    kiln_expr ax[KILN_MAX_DIMS], rv[KILN_MAX_REDUCE];
    for (uint32_t d = 0; d < st->ndim; d++)
        ax[d] = base ? kiln_add(ctx, base[d], val[d]) : val[d];
    for (uint32_t r = 0; r < st->nred; r++)
        rv[r] = val[st->ndim + r];
    N.sbody = kiln_expr_subst(ctx, st->body, ax, st->ndim, rv, st->nred);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_stmt *nest;
    KILN_TRY(emit_level(&N, 0, &nest));
    if (st->auto_unroll > 1)
        auto_unroll(&N);
    if (st->reduce != KILN_REDUCE_NONE && N.first_red == 0) {
        struct kiln_stmt *two[2] = {init_nest(&N, 0), nest};
        nest = kiln_stmt_seq(ctx, 2, two);
    }
    *out = nest;
    return nest ? KILN_OK : ctx->err.status;
}

/* ---- weight-derived stages ----
 *
 * A tensor is weight-derived when it is a weight, or no output and computed by a stage whose
 * body reads only weight-derived tensors (inlined stages are already substituted into their
 * readers, so their loads count where they are read; stages computed inside another stage
 * are tensors of their own and count through the loads of that stage). A root stage is
 * prepared when its tensor is weight-derived and so is every stage computed inside it: the
 * generated module then computes it once in kiln_prepare, not in every call, and its buffer
 * lives in the prepared area (prep_offset) instead of the per-call workspace. */

struct derived_visit {
    const struct kiln_state *s;
    const bool              *derived;
    bool                     all;
};

static bool
derived_load(void *ud, kiln_expr load)
{
    struct derived_visit *V = ud;
    uint32_t              t = (uint32_t)kiln_node_get(V->s->ctx, load)->imm;
    V->all &= t < V->s->nt && V->derived[t];
    return V->all;
}

/* derived[t] for every tensor of the state (least fixpoint, so cycles cannot count). */
static void
weight_derived(const struct kiln_state *s, bool *derived)
{
    for (uint32_t t = 0; t < s->nt; t++)
        derived[t] = s->t[t].kind == KILN_TENSOR_WEIGHT && !s->t[t].is_output;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < s->nst; i++) {
            const struct kiln_stage *st = &s->st[i];
            uint32_t                 t = st->tensor;
            if (t >= s->nt || derived[t] || s->t[t].is_output || s->t[t].kind != KILN_TENSOR_OP)
                continue;
            struct derived_visit V = {.s = s, .derived = derived, .all = true};
            kiln_expr_visit_loads(s->ctx, st->body, derived_load, &V);
            if (V.all) {
                derived[t] = true;
                changed = true;
            }
        }
    }
}

/* Whether every stage computed inside stage sid (at any depth) is weight-derived. */
static bool
attached_derived(const struct lower *L, const bool *derived, uint32_t sid, uint32_t depth)
{
    const struct kiln_state *s = L->s;
    if (depth > s->nst)
        return false;
    for (uint32_t k = L->att_start[sid]; k < L->att_start[sid + 1]; k++) {
        const struct kiln_stage *a = &s->st[L->att[k]];
        if (a->tensor >= s->nt || !derived[a->tensor]
            || !attached_derived(L, derived, L->att[k], depth + 1))
            return false;
    }
    return true;
}

/* L->att_start and L->att from the stages' compute_at. */
static enum kiln_status
index_attached(struct lower *L)
{
    const struct kiln_state *s = L->s;
    L->att_start = kiln_arena_alloc(L->ctx, sizeof(uint32_t) * (s->nst + 2));
    L->att = kiln_arena_alloc(L->ctx, sizeof(uint32_t) * (s->norder + 1));
    if (!L->att_start || !L->att)
        return L->ctx->err.status;
    for (uint32_t i = 0; i < s->norder; i++) {
        const struct kiln_stage *a = &s->st[s->order[i]];
        if (a->attach == KILN_ATTACH_AT && a->at_stage < s->nst)
            L->att_start[a->at_stage + 2]++;
    }
    for (uint32_t sid = 0; sid < s->nst; sid++)
        L->att_start[sid + 2] += L->att_start[sid + 1];
    for (uint32_t i = 0; i < s->norder; i++) {
        const struct kiln_stage *a = &s->st[s->order[i]];
        if (a->attach == KILN_ATTACH_AT && a->at_stage < s->nst)
            L->att[L->att_start[a->at_stage + 1]++] = s->order[i];
    }
    return KILN_OK;
}

static enum kiln_status
lower_state(struct lower *L)
{
    kiln_ctx                *ctx = L->ctx;
    struct kiln_state       *s = L->s;
    const struct kiln_graph *g = s->g;
    KILN_TRY(index_attached(L));
    for (uint32_t i = 0; i < g->narg; i++)
        if (make_buffer(L, g->arg[i], KILN_SCOPE_GLOBAL, NULL) == KILN_NONE)
            return ctx->err.status;
    for (uint32_t i = 0; i < g->noutput; i++)
        if (make_buffer(L, g->output[i], KILN_SCOPE_GLOBAL, NULL) == KILN_NONE)
            return ctx->err.status;
    struct kiln_stmt **items = kiln_arena_alloc(ctx, sizeof(*items) * (s->norder + 1));
    uint32_t          *heap = kiln_arena_alloc(ctx, sizeof(uint32_t) * (s->nt + 1));
    uint32_t           nitems = 0, nheap = 0;
    bool              *derived = kiln_arena_alloc(ctx, sizeof(bool) * (s->nt + 1));
    if (!items || !heap || !derived)
        return ctx->err.status;
    weight_derived(s, derived);
    for (uint32_t i = 0; i < s->norder; i++) {
        const struct kiln_stage *st = &s->st[s->order[i]];
        if (st->attach != KILN_ATTACH_ROOT)
            continue;
        if (L->buf_of[st->tensor] == KILN_NONE) {
            if (s->t[st->tensor].shared)
                return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                                 "schedule: %s is in shared memory (cache_read \"scope\": "
                                 "\"shared\"): compute it at a loop of its reader inside the "
                                 "block loops (compute_at)",
                                 kiln_sym_str(ctx, s->t[st->tensor].name));
            uint32_t b = make_buffer(L, st->tensor, KILN_SCOPE_HEAP, NULL);
            if (b == KILN_NONE)
                return ctx->err.status;
            heap[nheap++] = b;
            if (derived[st->tensor] && attached_derived(L, derived, s->order[i], 0)) {
                struct kiln_buffer *bf = &L->f->buf[b];
                int64_t             bytes;
                if (!kiln_buffer_bytes(bf, &bytes))
                    return lower_fail(L, "%s is too large", tname(L, st->tensor));
                bytes = (bytes + KILN_WS_ALIGN - 1) / KILN_WS_ALIGN * KILN_WS_ALIGN;
                bf->prep_offset = L->f->prep_bytes;
                if (kiln_add_overflows(L->f->prep_bytes, bytes, &L->f->prep_bytes))
                    return lower_fail(L, "the weight-derived buffers are too large");
            }
        }
        KILN_TRY(emit_stage(L, s->order[i], NULL, NULL, &items[nitems]));
        nitems++;
    }
    struct kiln_stmt *body = nitems == 1 ? items[0] : kiln_stmt_seq(ctx, nitems, items);
    for (uint32_t i = nheap; i-- > 0 && body;)
        body = kiln_stmt_alloc(ctx, heap[i], body);
    if (!body)
        return kiln_ok(ctx) ? KILN_FAIL(ctx, KILN_ERR_INTERNAL, "lower", "empty function")
                            : ctx->err.status;
    L->f->body = body;
    /* every stage computed somewhere must have been emitted */
    for (uint32_t i = 0; i < s->nst; i++) {
        const struct kiln_stage *st = &s->st[i];
        if (st->attach == KILN_ATTACH_AT && L->buf_of[st->tensor] == KILN_NONE)
            return lower_fail(L, "%s is computed at %s, which is never computed",
                              tname(L, st->tensor), tname(L, s->st[st->at_stage].tensor));
    }
    return KILN_OK;
}

enum kiln_status
kiln_lower_unflat(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_schedule *sched,
                  struct kiln_func **out)
{
    struct kiln_state s;
    *out = NULL;
    KILN_TRY(kiln_graph_verify(g));
    KILN_TRY(kiln_state_build(ctx, g, sched, &s));
    struct lower L = {.ctx = ctx, .s = &s};
    L.f = kiln_func_new(ctx, "kiln_kernel");
    L.buf_of = kiln_arena_alloc(ctx, sizeof(uint32_t) * (s.nt + 1));
    L.base = kiln_arena_alloc(ctx, sizeof(kiln_expr) * KILN_MAX_DIMS * (s.nt + 1));
    L.local = kiln_arena_alloc(ctx, sizeof(bool) * (s.nt + 1));
    L.perm = kiln_arena_alloc(ctx, KILN_MAX_DIMS * (s.nt + 1));
    if (!L.f || !L.buf_of || !L.base || !L.local || !L.perm)
        return ctx->err.status;
    for (uint32_t t = 0; t < s.nt; t++)
        L.buf_of[t] = KILN_NONE;
    KILN_TRY(lower_state(&L));
    KILN_TRY(kiln_func_verify(L.f, false));
    *out = L.f;
    return KILN_OK;
}

enum kiln_status
kiln_lower(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_schedule *sched,
           struct kiln_func **out)
{
    struct kiln_func *f;
    *out = NULL;
    KILN_TRY(kiln_lower_unflat(ctx, g, sched, &f));
    KILN_TRY(kiln_pass_simplify(f));
    KILN_TRY(kiln_func_verify(f, false));
    KILN_TRY(kiln_pass_flatten(f));
    KILN_TRY(kiln_func_verify(f, true));
    KILN_TRY(kiln_pass_partition(f));
    KILN_TRY(kiln_pass_simplify(f));
    KILN_TRY(kiln_func_verify(f, true));
    *out = f;
    return KILN_OK;
}
