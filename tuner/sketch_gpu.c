/* tuner/sketch_gpu.c -- the GPU sketches (tuner/README.md, "GPU sketches"): what the GPU rule
 * set (tuner/sketch_rules.c) offers made into schedules: ops tiled "SSSRRSRS" and bound to
 * blocks and threads (with shared-memory caches of the inputs they reuse, a per-thread cache
 * write, or a fused elementwise consumer), ops fused and bound whole, reductions shared by a
 * block's threads (cross-thread reduction); the knobs each sketch leaves free; and programs
 * to schedules. Every
 * program of a GPU sketch gives a schedule within the launch limits (threads per block, the
 * per-thread tile, shared memory): kiln_gpu_prog_schedule clamps the lengths a program draws. */
#include "sketch_int.h"

#include <stdio.h>
#include <string.h>

#define GPU_MAX_SHARED 4
#define GPU_MAX_LOADS  8
#define GPU_NTHREADS   6 /* thread-count choices of plain ops: 32 .. 1024 */

struct gpu_plan {
    uint8_t  mode; /* enum kiln_plan_mode */
    uint32_t consumer;
    /* knobs, KILN_NONE when absent: spatial axes S1 S2 S3, reduction axes R1 R2 */
    uint32_t k_split[KILN_MAX_DIMS + KILN_MAX_REDUCE];
    uint32_t k_threads, k_unroll;
    uint32_t k_vec; /* tiled ops with an f32 output whose last axis is tiled: vectorise S3 */
    /* KILN_PLAN_TILE: reused inputs that may be copied into shared memory, their loads in the op's
     * definition (for the size of the copy) and their on/off knobs */
    uint32_t  shared_t[GPU_MAX_SHARED], k_shared[GPU_MAX_SHARED];
    kiln_expr loads[GPU_MAX_SHARED][GPU_MAX_LOADS];
    uint8_t   nloads[GPU_MAX_SHARED], nshared;
};

struct kiln_gpu_sketch {
    uint32_t         nop;
    struct gpu_plan *op;
    int              max_threads, shared_bytes, thread_regs;
};

static const char *
mode_name(kiln_ctx *ctx, const struct kiln_graph *g, const struct gpu_plan *p)
{
    switch ((enum kiln_plan_mode)p->mode) {
    case KILN_PLAN_PLAIN:
        return "gpu-plain";
    case KILN_PLAN_INLINE:
        return "gpu-inline";
    case KILN_PLAN_CONSUMER:
        return "gpu-consumer";
    case KILN_PLAN_TILE:
        return "gpu-tile";
    case KILN_PLAN_TILE_CW:
        return "gpu-tile+cache_write";
    case KILN_PLAN_TILE_FUSE:
        return kiln_arena_printf(ctx, "gpu-tile+fuse(%s)",
                                 kiln_graph_tensor_name(g, g->op[p->consumer].out));
    case KILN_PLAN_XREDUCE:
        return "gpu-cross-thread-reduce";
    case KILN_PLAN_RFACTOR: /* a CPU mode */
        break;
    }
    return "?";
}

static void
plan_clear(struct gpu_plan *p)
{
    for (uint32_t k = 0; k < KILN_MAX_DIMS + KILN_MAX_REDUCE; k++)
        p->k_split[k] = KILN_NONE;
    p->k_threads = p->k_unroll = p->k_vec = KILN_NONE;
    p->nshared = 0;
}

/* Inputs op i reuses (an output axis of extent > 1 missing from all their indices), with their
 * loads: the candidates for shared-memory copies. */
static void
shared_candidates(const struct ana *A, uint32_t i, struct gpu_plan *p)
{
    const kiln_ctx *ctx = A->ctx;
    struct loads    L;
    kiln_sk_loads_of(ctx, A->eff[i], &L);
    p->nshared = 0;
    if (L.overflow)
        return;
    for (uint32_t j = 0; j < L.n; j++) {
        uint32_t t = (uint32_t)kiln_node_get(ctx, L.l[j])->imm;
        bool     dup = false;
        for (uint32_t s = 0; s < p->nshared; s++)
            dup |= p->shared_t[s] == t;
        if (dup || p->nshared == GPU_MAX_SHARED || !kiln_sk_misses_an_axis(A, i, &L, t))
            continue;
        uint8_t nl = 0;
        for (uint32_t m = 0; m < L.n; m++)
            if ((uint32_t)kiln_node_get(ctx, L.l[m])->imm == t && nl < GPU_MAX_LOADS)
                p->loads[p->nshared][nl++] = L.l[m];
            else if ((uint32_t)kiln_node_get(ctx, L.l[m])->imm == t)
                nl = GPU_MAX_LOADS + 1;
        if (nl > GPU_MAX_LOADS)
            continue; /* too many reads to bound the copy: never copied */
        p->nloads[p->nshared] = nl;
        p->shared_t[p->nshared++] = t;
    }
}

/* Knobs of op i under its mode; false when the sketch runs out of slots. */
static bool
plan_knobs(kiln_ctx *ctx, const struct ana *A, struct kiln_sketch *sk, uint32_t i,
           struct gpu_plan *p)
{
    const struct kiln_graph  *g = A->g;
    const struct kiln_opdef  *op = &g->op[i];
    const struct kiln_tensor *t = &g->tensor[op->out];
    const char               *tn = kiln_graph_tensor_name(g, op->out);
    char                      names[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME];
    char                      kn[200];
    kiln_sketch_axis_names(ctx, g, i, names);
    plan_clear(p);
    switch ((enum kiln_plan_mode)p->mode) {
    case KILN_PLAN_INLINE:
    case KILN_PLAN_CONSUMER:
        return true;
    case KILN_PLAN_XREDUCE:
        snprintf(kn, sizeof kn, "%s gpu reduce threads", tn);
        p->k_threads =
            kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_PARALLEL, 0, 0, GPU_NTHREADS, kn);
        return p->k_threads != KILN_NONE;
    case KILN_PLAN_PLAIN:
        if (t->ndim == 0)
            return true;
        snprintf(kn, sizeof kn, "%s gpu threads", tn);
        p->k_threads =
            kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_PARALLEL, 0, 0, GPU_NTHREADS, kn);
        return p->k_threads != KILN_NONE;
    case KILN_PLAN_TILE:
    case KILN_PLAN_TILE_CW:
    case KILN_PLAN_TILE_FUSE: {
        bool red = false;
        for (uint32_t k = 0; k < t->ndim; k++) {
            if (t->shape[k] <= 1)
                continue;
            snprintf(kn, sizeof kn, "%s.%s gpu tile", tn, names[k]);
            p->k_split[k] =
                kiln_sk_add_knob(ctx, sk, KILN_KNOB_SPLIT, KILN_KNOB_TILE, 3, t->shape[k], 0, kn);
            if (p->k_split[k] == KILN_NONE)
                return false;
        }
        for (uint32_t r = 0; r < op->nred; r++) {
            if (op->rext[r] <= 1)
                continue;
            snprintf(kn, sizeof kn, "%s.%s gpu tile", tn, names[t->ndim + r]);
            p->k_split[t->ndim + r] =
                kiln_sk_add_knob(ctx, sk, KILN_KNOB_SPLIT, KILN_KNOB_TILE, 2, op->rext[r], 0, kn);
            if (p->k_split[t->ndim + r] == KILN_NONE)
                return false;
            red = true;
        }
        snprintf(kn, sizeof kn, "%s auto_unroll", tn);
        p->k_unroll = kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_UNROLL, 0, 0,
                                       KILN_UNROLL_NSTEPS, kn);
        if (p->k_unroll == KILN_NONE)
            return false;
        if (t->dtype == KILN_DTYPE_F32 && t->ndim > 0 && p->k_split[t->ndim - 1] != KILN_NONE) {
            snprintf(kn, sizeof kn, "%s gpu vectorize", tn);
            p->k_vec =
                kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_VECTORIZE, 0, 0, 2, kn);
            if (p->k_vec == KILN_NONE)
                return false;
        }
        if (p->mode != KILN_PLAN_TILE || !red)
            return true;
        shared_candidates(A, i, p);
        for (uint32_t s = 0; s < p->nshared; s++) {
            snprintf(kn, sizeof kn, "%s %s shared", tn, kiln_graph_tensor_name(g, p->shared_t[s]));
            p->k_shared[s] =
                kiln_sk_add_knob(ctx, sk, KILN_KNOB_CHOICE, KILN_KNOB_LOCATION, 0, 0, 2, kn);
            if (p->k_shared[s] == KILN_NONE)
                return false;
        }
        return true;
    }
    case KILN_PLAN_RFACTOR: /* a CPU mode */
        break;
    }
    return false;
}

/* The GPU rule set's maker: the sketch of the options in G->cur. */
enum kiln_status
kiln_sk_gpu_make(struct kiln_sk_gen *G)
{
    kiln_ctx                *ctx = G->ctx;
    const struct kiln_graph *g = G->A->g;
    const struct kiln_hw    *hw = G->A->hw;
    struct kiln_sketch      *sk = &G->out[G->n];
    memset(sk, 0, sizeof *sk);
    sk->priv = kiln_arena_alloc(ctx, sizeof *sk->priv);
    sk->gpu = kiln_arena_alloc(ctx, sizeof *sk->gpu);
    struct gpu_plan *plan = kiln_arena_alloc(ctx, sizeof(struct gpu_plan) * (g->nop + 1));
    if (!sk->priv || !sk->gpu || !plan)
        return ctx->err.status;
    /* annotate.c sees a sketch without op plans: knobs drawn uniformly, no CPU priors */
    *sk->priv = (struct kiln_sketch_priv){.nop = 0, .op = NULL, .lanes = 1, .cores = 1};
    *sk->gpu =
        (struct kiln_gpu_sketch){.nop = g->nop,
                                 .op = plan,
                                 .max_threads = hw->max_threads > 0 ? hw->max_threads : 1024,
                                 .shared_bytes = hw->shared_bytes > 0 ? hw->shared_bytes : 48 << 10,
                                 .thread_regs = hw->thread_regs > 0 ? hw->thread_regs : 64};
    for (uint32_t i = 0; i < g->nop; i++) {
        plan[i].mode = G->cur[i].mode;
        plan[i].consumer = G->cur[i].consumer;
    }
    /* tiled ops take knobs first; one that finds no slots left is computed plain */
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < g->nop; i++) {
            struct gpu_plan *p = &plan[i];
            bool             first = p->mode == KILN_PLAN_TILE || p->mode == KILN_PLAN_TILE_CW
                         || p->mode == KILN_PLAN_TILE_FUSE;
            if (first != (pass == 0))
                continue;
            uint32_t nknob = sk->nknob, nvalues = sk->nvalues;
            if (plan_knobs(ctx, G->A, sk, i, p))
                continue;
            sk->nknob = nknob;
            sk->nvalues = nvalues;
            if (p->mode == KILN_PLAN_TILE_FUSE)
                plan[p->consumer].mode = KILN_PLAN_PLAIN;
            if (p->mode == KILN_PLAN_PLAIN || p->mode == KILN_PLAN_XREDUCE)
                plan_clear(p); /* no thread knob: the default thread count */
            else
                p->mode = KILN_PLAN_PLAIN;
        }
    const char **names = kiln_arena_alloc(ctx, sizeof(char *) * (g->nop + 1));
    if (!names)
        return ctx->err.status;
    for (uint32_t i = 0; i < g->nop; i++)
        names[i] = mode_name(ctx, g, &plan[i]);
    return kiln_sk_name(ctx, g, names, G->out, &G->n);
}

/* ---- programs to schedules ---- */

static enum kiln_status
emit_bind(struct emit *E, const char *stage, const char *iter, enum kiln_bind b)
{
    struct kiln_step st = {.kind = KILN_STEP_BIND,
                           .stage = kiln_sk_sym(E, stage),
                           .iter = kiln_sk_sym(E, iter),
                           .value = b};
    return kiln_sk_push(E, st);
}

/* Fuses the n leaves from position pos into one loop (its name in L afterwards); false in *ok
 * when the fused name would be too long to follow (nothing emitted then). */
static enum kiln_status
emit_fuse(struct emit *E, const char *stage, struct leaves *L, uint32_t pos, uint32_t n, bool *ok)
{
    char fused[4 * KILN_SKETCH_NAME] = "";
    *ok = true;
    if (n <= 1)
        return KILN_OK;
    for (uint32_t j = 0; j < n; j++) {
        if (strlen(fused) + strlen(L->name[pos + j]) + 2 >= sizeof fused)
            break;
        strcat(fused, j ? "@" : "");
        strcat(fused, L->name[pos + j]);
    }
    if (n > KILN_STEP_MAXN || strlen(fused) > KILN_SKETCH_NAME - 6) {
        *ok = false;
        return KILN_OK;
    }
    struct kiln_step st = {.kind = KILN_STEP_FUSE, .stage = kiln_sk_sym(E, stage), .n = (uint8_t)n};
    for (uint32_t j = 0; j < n; j++)
        st.iters[j] = kiln_sk_sym(E, L->name[pos + j]);
    KILN_TRY(kiln_sk_push(E, st));
    snprintf(L->name[pos], KILN_SKETCH_NAME, "%s", fused);
    memmove(&L->name[pos + 1], &L->name[pos + n], sizeof(L->name[0]) * (L->n - pos - n));
    L->n -= n - 1;
    return KILN_OK;
}

/* The n leaves from pos fused and split by `threads`, the outer part bound to blockIdx.x and the
 * inner to threadIdx.x (n == 0: nothing). */
static enum kiln_status
emit_flat_bind(struct emit *E, const char *stage, struct leaves *L, uint32_t pos, uint32_t n,
               int64_t threads)
{
    bool ok;
    if (n == 0)
        return KILN_OK;
    KILN_TRY(emit_fuse(E, stage, L, pos, n, &ok));
    if (!ok)
        return KILN_OK; /* names too long to follow: one thread (correct, slow) */
    char f[KILN_SKETCH_NAME], a[KILN_SKETCH_NAME + 4], b[KILN_SKETCH_NAME + 4];
    snprintf(f, sizeof f, "%s", L->name[pos]);
    KILN_TRY(kiln_sk_emit_split(E, stage, L, f, 1, &threads));
    snprintf(a, sizeof a, "%s.0", f);
    snprintf(b, sizeof b, "%s.1", f);
    KILN_TRY(emit_bind(E, stage, a, KILN_BIND_BLOCK_X));
    return emit_bind(E, stage, b, KILN_BIND_THREAD_X);
}

static enum kiln_status
emit_plain(struct emit *E, uint32_t i, const struct gpu_plan *p)
{
    const struct kiln_graph  *g = E->g;
    const struct kiln_opdef  *op = &g->op[i];
    const struct kiln_tensor *t = &g->tensor[op->out];
    char                      names[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME];
    struct leaves             L = {.n = 0};
    kiln_sketch_axis_names(E->ctx, g, i, names);
    for (uint32_t k = 0; k < (uint32_t)t->ndim + op->nred; k++)
        memcpy(L.name[L.n++], names[k], KILN_SKETCH_NAME);
    int64_t threads = (int64_t)32 << kiln_sk_val(E, p->k_threads, 0, 3);
    if (threads > E->sk->gpu->max_threads)
        threads = E->sk->gpu->max_threads;
    return emit_flat_bind(E, kiln_graph_tensor_name(g, op->out), &L, 0, t->ndim, threads);
}

/* Cross-thread reduction: the reduction loops fused and split by a power-of-two thread count
 * (the knob, at most max_threads, at most the reduction's length rounded up to a power of two),
 * the inner part bound to threadIdx.x: thread t accumulates iterations t, t + T, t + 2T, ...
 * (adjacent threads read adjacent elements), and lowering moves that loop outside the outer
 * part. The spatial loops are fused and bound to blockIdx.x: one block per output. */
static enum kiln_status
emit_xreduce(struct emit *E, uint32_t i, const struct gpu_plan *p)
{
    const struct kiln_graph  *g = E->g;
    const struct kiln_opdef  *op = &g->op[i];
    const struct kiln_tensor *t = &g->tensor[op->out];
    const char               *tn = kiln_graph_tensor_name(g, op->out);
    char                      names[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME];
    char                      a[KILN_SKETCH_NAME + 4], b[KILN_SKETCH_NAME + 4];
    struct leaves             L = {.n = 0};
    bool                      ok;
    int64_t                   R = 1;
    kiln_sketch_axis_names(E->ctx, g, i, names);
    for (uint32_t k = 0; k < (uint32_t)t->ndim + op->nred; k++)
        memcpy(L.name[L.n++], names[k], KILN_SKETCH_NAME);
    for (uint32_t r = 0; r < op->nred && R <= ((int64_t)1 << 40); r++)
        R *= op->rext[r];
    int64_t threads = (int64_t)32 << kiln_sk_val(E, p->k_threads, 0, 2);
    if (threads > E->sk->gpu->max_threads)
        threads = E->sk->gpu->max_threads;
    while (threads > KILN_GPU_WARP && threads / 2 >= R)
        threads /= 2;
    uint32_t nd = t->ndim;
    KILN_TRY(emit_fuse(E, tn, &L, nd, op->nred, &ok));
    if (!ok) /* names too long to follow: computed plain */
        return emit_flat_bind(E, tn, &L, 0, nd, 64);
    char f[KILN_SKETCH_NAME];
    snprintf(f, sizeof f, "%s", L.name[nd]);
    KILN_TRY(kiln_sk_emit_split(E, tn, &L, f, 1, &threads));
    snprintf(a, sizeof a, "%s.1", f);
    KILN_TRY(emit_bind(E, tn, a, KILN_BIND_THREAD_X));
    if (nd == 0)
        return KILN_OK;
    KILN_TRY(emit_fuse(E, tn, &L, 0, nd, &ok));
    if (!ok)
        return KILN_OK; /* the spatial loops serial: correct, slower */
    snprintf(b, sizeof b, "%s", L.name[0]);
    return emit_bind(E, tn, b, KILN_BIND_BLOCK_X);
}

/* ---- the extent of a shared copy ---- */

/* Bytes of shared copy s of plan p for one block: per dimension of the tensor the span its
 * loads cover with the block's spatial tile (sp) and one R0 step (rd), not cut at the tensor's
 * edges (an upper bound of the region lowering allocates); a dimension whose indices are not
 * understood counts whole. */
static double
shared_bytes(const struct emit *E, const struct gpu_plan *p, uint32_t s, const int64_t *sp,
             const int64_t *rd)
{
    const struct kiln_tensor *t = &E->g->tensor[p->shared_t[s]];
    double                    bytes = (double)kiln_dtype_size((enum kiln_dtype)t->dtype);
    struct kiln_var_range     R[KILN_MAX_DIMS + KILN_MAX_REDUCE];
    uint32_t                  nr = 0;
    for (uint32_t k = 0; k < KILN_MAX_DIMS; k++)
        R[nr++] = (struct kiln_var_range){kiln_axis(E->ctx, k), 0, sp[k] - 1};
    for (uint32_t r = 0; r < KILN_MAX_REDUCE; r++)
        R[nr++] = (struct kiln_var_range){kiln_rvar(E->ctx, r), 0, rd[r] - 1};
    for (uint32_t d = 0; d < t->ndim; d++) {
        int64_t lo = 0, hi = -1;
        bool    known = true;
        for (uint32_t m = 0; m < p->nloads[s] && known; m++) {
            int64_t   l, h;
            kiln_expr ix = kiln_load_idx(E->ctx, p->loads[s][m], d);
            known = kiln_expr_bounds(E->ctx, ix, R, nr, &l, &h);
            lo = m == 0 || l < lo ? l : lo;
            hi = m == 0 || h > hi ? h : hi;
        }
        bytes *= known ? (double)(hi - lo + 1) : (double)t->shape[d];
    }
    return bytes;
}

/* Divides the largest of the lengths at v[0], v[stride], ... (n of them) by its smallest
 * prime factor; false when all are 1. */
static bool
shrink_largest(int64_t *v, uint32_t n, uint32_t stride)
{
    uint32_t best = KILN_NONE;
    for (uint32_t j = 0; j < n; j++)
        if (v[j * stride] > 1 && (best == KILN_NONE || v[j * stride] > v[best * stride]))
            best = j;
    if (best == KILN_NONE)
        return false;
    int64_t x = v[best * stride], f = x;
    for (int64_t d = 2; d * d <= x; d++)
        if (x % d == 0) {
            f = d;
            break;
        }
    v[best * stride] = x / f;
    return true;
}

static enum kiln_bind
thread_axis(uint32_t a)
{
    return a == 0 ? KILN_BIND_THREAD_X : a == 1 ? KILN_BIND_THREAD_Y : KILN_BIND_THREAD_Z;
}

/* The loops of shared copy stage cn fused and split by the block's thread extents tf[0..n)
 * (outer to inner: z, y, x), those parts bound to the same thread axes as the tiled stage's
 * S2 loops: the block's threads fill the copy together. */
static enum kiln_status
emit_fill(struct emit *E, const char *cn, struct leaves *L, const int64_t *tf, uint32_t n)
{
    bool ok;
    KILN_TRY(emit_fuse(E, cn, L, 0, L->n, &ok));
    if (!ok)
        return KILN_FAIL(E->ctx, KILN_ERR_INTERNAL, "sketch", "sketch: loop names of %s too long",
                         cn);
    char f[KILN_SKETCH_NAME], part[KILN_SKETCH_NAME + 8];
    snprintf(f, sizeof f, "%s", L->name[0]);
    KILN_TRY(kiln_sk_emit_split(E, cn, L, f, n, tf));
    for (uint32_t q = 0; q < n; q++) {
        snprintf(part, sizeof part, "%s.%u", f, q + 1);
        KILN_TRY(emit_bind(E, cn, part, thread_axis(n - 1 - q)));
    }
    return KILN_OK;
}

/* The ns S0 loops at positions pos.. of L fused into one loop bound to blockIdx.x (loops
 * outside a stage computed inside them may be fused: lowering bounds a region by the loops
 * inside the stage's loop only, and takes a fused loop's parts there whole). */
static enum kiln_status
emit_blocks(struct emit *E, const char *stage, struct leaves *L, uint32_t pos, uint32_t ns)
{
    bool ok;
    KILN_TRY(emit_fuse(E, stage, L, pos, ns, &ok));
    if (!ok)
        return KILN_FAIL(E->ctx, KILN_ERR_INTERNAL, "sketch", "sketch: loop names of %s too long",
                         stage);
    return emit_bind(E, stage, L->name[pos], KILN_BIND_BLOCK_X);
}

static enum kiln_status
emit_tile(struct emit *E, uint32_t i, const struct gpu_plan *p)
{
    kiln_ctx                     *ctx = E->ctx;
    const struct kiln_graph      *g = E->g;
    const struct kiln_gpu_sketch *gs = E->sk->gpu;
    const struct kiln_opdef      *op = &g->op[i];
    const struct kiln_tensor     *t = &g->tensor[op->out];
    const char                   *tn = kiln_graph_tensor_name(g, op->out);
    char                          names[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME];
    kiln_sketch_axis_names(ctx, g, i, names);
    uint32_t nd = t->ndim, nr = op->nred;
    /* l[k] = S1 S2 S3 of spatial axis k; rl[r] = R1 R2; unsplit axes: all 1 */
    int64_t  l[KILN_MAX_DIMS][3], rl[KILN_MAX_REDUCE][2];
    uint32_t sax[KILN_MAX_DIMS], ns = 0, rax[KILN_MAX_REDUCE], nrs = 0;
    for (uint32_t k = 0; k < nd; k++) {
        for (uint32_t j = 0; j < 3; j++)
            l[k][j] = kiln_sk_val(E, p->k_split[k], j, 1);
        if (p->k_split[k] != KILN_NONE)
            sax[ns++] = k;
    }
    for (uint32_t r = 0; r < nr; r++) {
        for (uint32_t j = 0; j < 2; j++)
            rl[r][j] = kiln_sk_val(E, p->k_split[nd + r], j, 1);
        if (p->k_split[nd + r] != KILN_NONE)
            rax[nrs++] = r;
    }
    /* the launch limits: threads per block (S2) and the per-thread tile (S1 x S3), shrunk
     * from the longest length down (the outer S0 part takes what they give up) */
    for (;;) {
        int64_t thr = 1;
        for (uint32_t k = 0; k < nd; k++)
            thr *= l[k][1];
        if (thr <= gs->max_threads || !shrink_largest(&l[0][1], nd, 3))
            break;
    }
    for (;;) {
        int64_t tile = 1;
        for (uint32_t k = 0; k < nd; k++)
            tile *= l[k][0] * l[k][2];
        if (tile <= gs->thread_regs)
            break;
        bool s1 = shrink_largest(&l[0][0], nd, 3), s3 = shrink_largest(&l[0][2], nd, 3);
        if (!s1 && !s3)
            break;
    }
    /* KILN_PLAN_TILE binds its S2 loops to threadIdx.x, y, z (the outermost of three on z, at most
     * 64 threads) */
    for (uint32_t s = 0; p->mode == KILN_PLAN_TILE && s + 3 < ns; s++)
        l[sax[s]][1] = 1; /* a fourth S2 loop and beyond: one thread, left unbound */
    while (p->mode == KILN_PLAN_TILE && ns >= 3 && l[sax[ns - 3]][1] > 64)
        shrink_largest(&l[sax[ns - 3]][1], 1, 1);
    int64_t unroll = kiln_unroll_steps[kiln_sk_val(E, p->k_unroll, 0, 0)];
    /* shared copies (KILN_PLAN_TILE): on when the knob says so and all fit the budget together */
    bool   share[GPU_MAX_SHARED] = {false};
    double total = 0;
    if (p->mode == KILN_PLAN_TILE && !E->gpu_no_shared) {
        int64_t sp[KILN_MAX_DIMS] = {0}, rd[KILN_MAX_REDUCE] = {0}; /* [0, -1]: ignored */
        for (uint32_t k = 0; k < nd; k++)
            sp[k] = l[k][0] * l[k][1] * l[k][2];
        for (uint32_t r = 0; r < nr; r++)
            rd[r] = rl[r][0] * rl[r][1];
        for (uint32_t s = 0; s < p->nshared; s++) {
            if (!kiln_sk_val(E, p->k_shared[s], 0, 0))
                continue;
            double b = shared_bytes(E, p, s, sp, rd);
            if (total + b <= gs->shared_bytes) {
                share[s] = E->gpu_shared_used = true;
                total += b;
            }
        }
    }
    for (uint32_t s = 0; s < p->nshared; s++)
        if (share[s]) {
            struct kiln_step st = {.kind = KILN_STEP_CACHE_READ,
                                   .stage =
                                       kiln_sk_sym(E, kiln_graph_tensor_name(g, p->shared_t[s])),
                                   .n = 1,
                                   .iters = {kiln_sk_sym(E, tn)},
                                   .value = KILN_CACHE_SHARED};
            KILN_TRY(kiln_sk_push(E, st));
        }
    const char *P = tn, *X = NULL; /* the tiled stage and the bound stage it is computed at */
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
    char want[64][KILN_SKETCH_NAME], XL_last[KILN_SKETCH_NAME] = "";
    if (X) {
        /* the bound stage: [unsplit S0 fused: blockIdx.x] [S2 fused: threadIdx.x] S1 S3, each
         * axis split S0 S2 S1 S3 (outer to inner), so that a thread's S1 x S3 elements are one
         * box: lowering sizes the per-thread buffer of the stage computed at the thread loop by
         * the box its elements span (an S1 level outside S2 would stride them by S2 x S3) */
        struct leaves XL = {.n = 0};
        for (uint32_t k = 0; k < nd; k++)
            memcpy(XL.name[XL.n++], xnames[k], KILN_SKETCH_NAME);
        for (uint32_t s = 0; s < ns; s++) {
            int64_t f[3] = {l[sax[s]][1], l[sax[s]][0], l[sax[s]][2]}; /* S2 S1 S3 */
            KILN_TRY(kiln_sk_emit_split(E, X, &XL, xnames[sax[s]], 3, f));
        }
        uint32_t nw = 0;
        for (uint32_t k = 0; k < nd; k++)
            if (p->k_split[k] == KILN_NONE)
                memcpy(want[nw++], xnames[k], KILN_SKETCH_NAME);
        for (uint32_t j = 0; j < 4; j++)
            for (uint32_t s = 0; s < ns; s++)
                snprintf(want[nw++], KILN_SKETCH_NAME, "%.58s.%u", xnames[sax[s]], j);
        KILN_TRY(kiln_sk_emit_order(E, X, &XL, want));
        uint32_t th = nd - ns + 1;
        bool     ok;
        KILN_TRY(emit_blocks(E, X, &XL, nd - ns, ns));
        KILN_TRY(emit_fuse(E, X, &XL, th, ns, &ok));
        if (!ok)
            return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "sketch", "sketch: loop names of %s too long",
                             X);
        KILN_TRY(emit_bind(E, X, XL.name[th], KILN_BIND_THREAD_X));
        snprintf(XL_last, sizeof XL_last, "%s", XL.name[XL.n - 1]);
        struct kiln_step st = {.kind = KILN_STEP_COMPUTE_AT,
                               .stage = kiln_sk_sym(E, P),
                               .target = kiln_sk_sym(E, X),
                               .iter = kiln_sk_sym(E, XL.name[th])};
        KILN_TRY(kiln_sk_push(E, st));
    }
    /* the tiled stage: alone [S0: blockIdx.x] R0 [S2: threadIdx.x] S1 R1 R2 S3;
     * at the thread loop: R0 R1 S1 R2 S3 (S1 and S3 the per-thread tile) */
    struct leaves PL = {.n = 0};
    for (uint32_t k = 0; k < nd + nr; k++)
        memcpy(PL.name[PL.n++], names[k], KILN_SKETCH_NAME);
    for (uint32_t s = 0; s < ns; s++) {
        if (X)
            KILN_TRY(kiln_sk_emit_split(E, P, &PL, names[sax[s]], 1, &l[sax[s]][2]));
        else
            KILN_TRY(kiln_sk_emit_split(E, P, &PL, names[sax[s]], 3, l[sax[s]]));
    }
    for (uint32_t r = 0; r < nrs; r++)
        KILN_TRY(kiln_sk_emit_split(E, P, &PL, names[nd + rax[r]], 2, rl[rax[r]]));
    uint32_t nw = 0;
    for (uint32_t k = 0; k < nd; k++)
        if (p->k_split[k] == KILN_NONE)
            memcpy(want[nw++], names[k], KILN_SKETCH_NAME);
#define SPATIAL(lev)                  \
    for (uint32_t s = 0; s < ns; s++) \
    snprintf(want[nw++], KILN_SKETCH_NAME, "%.58s.%u", names[sax[s]], (unsigned)(lev))
#define REDUCE(lev)                    \
    for (uint32_t r = 0; r < nrs; r++) \
    snprintf(want[nw++], KILN_SKETCH_NAME, "%.58s.%u", names[nd + rax[r]], (unsigned)(lev))
    if (!X)
        SPATIAL(0);
    for (uint32_t r = 0; r < nr; r++) /* unsplit reductions at the R0 level */
        if (p->k_split[nd + r] == KILN_NONE)
            memcpy(want[nw++], names[nd + r], KILN_SKETCH_NAME);
    REDUCE(0);
    if (!X) {
        SPATIAL(2);
        SPATIAL(1);
        REDUCE(1);
        REDUCE(2);
        SPATIAL(3);
    } else {
        REDUCE(1);
        SPATIAL(0);
        REDUCE(2);
        SPATIAL(1);
    }
#undef SPATIAL
#undef REDUCE
    KILN_TRY(kiln_sk_emit_order(E, P, &PL, want));
    if (!X) {
        KILN_TRY(emit_blocks(E, P, &PL, nd - ns, ns));
        /* after the block loop: the R0 level (nr loops), then the S2 loops */
        uint32_t r0 = nd - ns + nr, th = r0 + 1;
        /* the S2 loops bound to threadIdx.x, y, z (innermost on x), not fused: a shared copy
         * computed at R0 then covers the block's tile, where lowering would take the parts of
         * a fused thread loop inside it whole */
        for (uint32_t s = ns > 3 ? ns - 3 : 0; s < ns; s++)
            KILN_TRY(emit_bind(E, P, PL.name[th + s], thread_axis(ns - 1 - s)));
        /* shared copies at the innermost R0 loop, filled by the block's threads together */
        for (uint32_t s = 0; s < p->nshared; s++) {
            if (!share[s])
                continue;
            const char *cn =
                kiln_sk_derived(E, kiln_graph_tensor_name(g, p->shared_t[s]), KILN_STEP_CACHE_READ);
            struct kiln_step st = {.kind = KILN_STEP_COMPUTE_AT,
                                   .stage = kiln_sk_sym(E, cn),
                                   .target = kiln_sk_sym(E, P),
                                   .iter = kiln_sk_sym(E, PL.name[r0])};
            KILN_TRY(kiln_sk_push(E, st));
            struct leaves CL = {.n = 0};
            for (uint32_t d = 0; d < g->tensor[p->shared_t[s]].ndim; d++)
                snprintf(CL.name[CL.n++], KILN_SKETCH_NAME, "i%u", d);
            int64_t  tf[3];
            uint32_t nt = ns > 3 ? 3 : ns;
            for (uint32_t q = 0; q < nt; q++)
                tf[q] = l[sax[ns - nt + q]][1];
            KILN_TRY(emit_fill(E, cn, &CL, tf, nt));
        }
    }
    /* the vector knob: the innermost per-thread loop, the last spatial axis's S3 part, and with
     * a bound stage X its innermost loop too (the same axis and length), vectorised when that
     * length is 2 or a multiple of 4: codegen/cuda.c makes such a loop float2 / float4
     * accesses where they are contiguous and provably aligned, the rest of it scalar per lane,
     * and the whole loop the serial one when its body is not a single f32 store */
    int64_t vlen = ns > 0 && sax[ns - 1] == nd - 1 ? l[nd - 1][2] : 0;
    if (kiln_sk_val(E, p->k_vec, 0, 0) && (vlen == 2 || (vlen >= 4 && vlen % 4 == 0))) {
        if (X)
            KILN_TRY(kiln_sk_step1(E, KILN_STEP_VECTORIZE, X, XL_last));
        KILN_TRY(kiln_sk_step1(E, KILN_STEP_VECTORIZE, P, PL.name[PL.n - 1]));
    }
    if (unroll) {
        struct kiln_step st = {
            .kind = KILN_STEP_AUTO_UNROLL, .stage = kiln_sk_sym(E, P), .value = unroll};
        KILN_TRY(kiln_sk_push(E, st));
    }
    return KILN_OK;
}

static enum kiln_status
emit_all(struct emit *E)
{
    const struct kiln_gpu_sketch *gs = E->sk->gpu;
    const struct kiln_graph      *g = E->g;
    for (uint32_t i = 0; i < gs->nop; i++)
        if (gs->op[i].mode == KILN_PLAN_INLINE)
            KILN_TRY(kiln_sk_step1(E, KILN_STEP_COMPUTE_INLINE,
                                   kiln_graph_tensor_name(g, g->op[i].out), NULL));
    for (uint32_t i = 0; i < gs->nop; i++) {
        const struct gpu_plan *p = &gs->op[i];
        switch ((enum kiln_plan_mode)p->mode) {
        case KILN_PLAN_INLINE:
        case KILN_PLAN_CONSUMER:
            break;
        case KILN_PLAN_PLAIN:
            KILN_TRY(emit_plain(E, i, p));
            break;
        case KILN_PLAN_XREDUCE:
            KILN_TRY(emit_xreduce(E, i, p));
            break;
        case KILN_PLAN_TILE:
        case KILN_PLAN_TILE_CW:
        case KILN_PLAN_TILE_FUSE:
            KILN_TRY(emit_tile(E, i, p));
            break;
        case KILN_PLAN_RFACTOR: /* a CPU mode */
            break;
        }
    }
    return KILN_OK;
}

/* A program with shared copies is lowered and emitted as CUDA C (inside a scratch scope) before
 * it is returned: the estimate of a copy's size is the copy's, but passes may duplicate it
 * (partitioning a loop around it at a convolution's padding made three copies of one), and the
 * kernel's shared memory must stay within the budget. A program that does not fit is made
 * again without shared copies. */
enum kiln_status
kiln_gpu_prog_schedule(struct emit *E)
{
    kiln_ctx                *ctx = E->ctx;
    const struct kiln_graph *g = E->g;
    uint32_t                 start = E->out->nstep;
    if (E->sk->gpu->nop != g->nop)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "sketch",
                         "sketch '%s' was made for a graph of %u ops, not %u", E->sk->desc,
                         E->sk->gpu->nop, g->nop);
    E->gpu_no_shared = E->gpu_shared_used = false;
    KILN_TRY(emit_all(E));
    if (!E->gpu_shared_used)
        return KILN_OK;
    struct kiln_scratch     sc = kiln_scratch_begin(ctx);
    struct kiln_func       *f = NULL;
    struct kiln_cuda_source src;
    bool                    ok = kiln_lower(ctx, g, E->out, &f) == KILN_OK
              && kiln_cg_cuda_source(ctx, f, "kiln_check", &src) == KILN_OK;
    kiln_scratch_end(ctx, sc);
    if (ok)
        return KILN_OK;
    kiln_ctx_error_clear(ctx);
    E->out->nstep = start;
    E->gpu_no_shared = true;
    return emit_all(E);
}
