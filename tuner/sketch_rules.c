/* tuner/sketch_rules.c -- the sketch rules, as Ansor writes them: each a condition on an op
 * (`meets`: apply, apply and skip the rules after it, or pass) and an `apply` that offers the
 * op's options. One table holds every rule; the CPU and GPU rule sets are lists of its rows,
 * differing in which rules they list and in the target-specific ones. The driver, shared by
 * both, tries a set's rules on every op of a task graph and expands the sketches: the
 * cartesian product of the ops' options, consumers decided first, each made by the set's
 * maker (knobs and plan: sketch.c for the CPU, sketch_gpu.c for the GPU). What the conditions
 * read is the analysis of compute definitions (sketch.c, struct ana). tuner/README.md lists
 * the rules. */
#include "sketch_int.h"

#include <string.h>

/* The cross-thread reduction rule applies to an op whose outputs are at most XRED_SPATIAL
 * blocks' worth of threads (one thread per output would leave most of a GPU idle: 16 x 1024
 * threads are 6% of an H100's 270k resident ones). */
#define XRED_SPATIAL 16

static void
offer(struct kiln_sk_options *O, enum kiln_plan_mode mode, uint8_t level, uint8_t rf_inner,
      uint32_t consumer)
{
    if (O->n < KILN_SK_MAX_OPTIONS)
        O->o[O->n++] = (struct kiln_sk_option){
            .mode = (uint8_t)mode, .level = level, .rf_inner = rf_inner, .consumer = consumer};
}

static enum kiln_sk_meet
meet_if(bool cond)
{
    return cond ? KILN_SK_APPLY : KILN_SK_PASS;
}

/* ---- conditions ---- */

/* A reduction that reuses one tensor only, over at most 64 points per output (a depthwise 3x3
 * convolution: its 9 weights), holds few FMAs per load in a register tile, and a tiled nest
 * adds masked edge loads and stores (vmaskmovps, slow on AMD's cores) that plain loops
 * vectorised by LLVM avoid. Such ops also get the plain sketch (parallel outer loops, the
 * default nest inside): on a depthwise 3x3 at 256 x 28^2 it ran at 52 GFLOP/s on 2 Zen 3
 * cores where 300 tiled trials had found 38. */
static bool
little_reuse(const struct ana *A, uint32_t i)
{
    const struct kiln_opdef *op = &A->g->op[i];
    int64_t                  r = 1;
    for (uint32_t k = 0; k < op->nred; k++)
        r *= op->rext[k];
    return op->nred > 0 && r <= 64 && kiln_sk_reused_tensors(A, i) == 1;
}

/* Ansor's NeedsRfactor. */
static bool
needs_rfactor(const struct ana *A, uint32_t i)
{
    const struct kiln_opdef *op = &A->g->op[i];
    double                   space = (double)kiln_tensor_numel(&A->g->tensor[op->out]), red = 1;
    for (uint32_t r = 0; r < op->nred; r++)
        red *= (double)op->rext[r];
    if (op->nred == 0 || red <= 1)
        return false;
    if (A->mlt[i])
        return !(space > red || space > A->hw->num_cores * 16.0);
    /* A lane-wise reduction with a vector of outputs per core is best plain: vectorised along
     * its contiguous last axis, one accumulator per lane, parallel over the rest. Offered,
     * rfactor's sketches won the prediction on a global average pooling 7^2 x 512 NHWC with a
     * split of one (serial over the 49 points, 2.3 us on one Zen 3 core, where plain ran 1.2). */
    if (kiln_sk_lanes_along_last(A, i)
        && space >= (double)A->hw->vector_lanes * (double)A->hw->num_cores)
        return false;
    return red > A->hw->num_cores;
}

/* Whether op i gets the cross-thread reduction sketch: a sum, max or min (of numbers) over more
 * than a warp's iterations whose outputs are few for the device (XRED_SPATIAL). */
static bool
wants_cross_thread(const struct ana *A, uint32_t i)
{
    const struct kiln_opdef  *op = &A->g->op[i];
    const struct kiln_tensor *t = &A->g->tensor[op->out];
    int64_t                   R = 1, S = kiln_tensor_numel(t);
    int64_t                   mt = A->hw->max_threads > 0 ? A->hw->max_threads : 1024;
    if (op->nred == 0 || op->reduce == KILN_REDUCE_NONE || t->dtype == KILN_DTYPE_BOOL)
        return false;
    for (uint32_t r = 0; r < op->nred && R <= ((int64_t)1 << 40); r++)
        R *= op->rext[r];
    return R > KILN_GPU_WARP && S <= XRED_SPATIAL * mt;
}

static enum kiln_sk_meet
meets_inline(const struct ana *A, uint32_t i)
{
    return A->inl[i] ? KILN_SK_APPLY_SKIP_REST : KILN_SK_PASS;
}

static enum kiln_sk_meet
meets_tile_fuse(const struct ana *A, uint32_t i)
{
    return meet_if(A->mlt[i] && A->fuse[i] != KILN_NONE);
}

static enum kiln_sk_meet
meets_tile_cw_cpu(const struct ana *A, uint32_t i)
{
    return meet_if(A->mlt[i] && A->fuse[i] == KILN_NONE);
}

static enum kiln_sk_meet
meets_tile(const struct ana *A, uint32_t i)
{
    return meet_if(A->mlt[i]);
}

static enum kiln_sk_meet
meets_little_reuse(const struct ana *A, uint32_t i)
{
    return meet_if(A->mlt[i] && little_reuse(A, i));
}

static enum kiln_sk_meet
meets_skip(const struct ana *A, uint32_t i)
{
    return meet_if(!A->mlt[i]);
}

static enum kiln_sk_meet
meets_rfactor(const struct ana *A, uint32_t i)
{
    return meet_if(needs_rfactor(A, i));
}

static enum kiln_sk_meet
meets_cross_thread(const struct ana *A, uint32_t i)
{
    return meet_if(wants_cross_thread(A, i));
}

/* ---- options ---- */

static void
apply_inline(const struct ana *A, uint32_t i, struct kiln_sk_options *O)
{
    (void)A, (void)i;
    offer(O, KILN_PLAN_INLINE, 0, 0, KILN_NONE);
}

static void
apply_plain(const struct ana *A, uint32_t i, struct kiln_sk_options *O)
{
    (void)A, (void)i;
    offer(O, KILN_PLAN_PLAIN, 0, 0, KILN_NONE);
}

static void
apply_tile(const struct ana *A, uint32_t i, struct kiln_sk_options *O)
{
    (void)A, (void)i;
    offer(O, KILN_PLAN_TILE, 0, 0, KILN_NONE);
}

/* CPU: computed at the consumer's last S0 loop (@1) or S1 loop (@2) */
static void
apply_tile_fuse_cpu(const struct ana *A, uint32_t i, struct kiln_sk_options *O)
{
    for (uint8_t lv = 1; lv <= 2; lv++)
        offer(O, KILN_PLAN_TILE_FUSE, lv, 0, A->fuse[i]);
}

static void
apply_tile_cw_cpu(const struct ana *A, uint32_t i, struct kiln_sk_options *O)
{
    (void)A, (void)i;
    for (uint8_t lv = 1; lv <= 2; lv++)
        offer(O, KILN_PLAN_TILE_CW, lv, 0, KILN_NONE);
}

static void
apply_rfactor(const struct ana *A, uint32_t i, struct kiln_sk_options *O)
{
    (void)A, (void)i;
    offer(O, KILN_PLAN_RFACTOR, 0, 1, KILN_NONE); /* inner first */
    offer(O, KILN_PLAN_RFACTOR, 0, 0, KILN_NONE);
}

/* GPU: computed at the consumer's thread loop */
static void
apply_tile_fuse_gpu(const struct ana *A, uint32_t i, struct kiln_sk_options *O)
{
    offer(O, KILN_PLAN_TILE_FUSE, 0, 0, A->fuse[i]);
}

static void
apply_tile_cw_gpu(const struct ana *A, uint32_t i, struct kiln_sk_options *O)
{
    (void)A, (void)i;
    offer(O, KILN_PLAN_TILE_CW, 0, 0, KILN_NONE);
}

static void
apply_cross_thread(const struct ana *A, uint32_t i, struct kiln_sk_options *O)
{
    (void)A, (void)i;
    offer(O, KILN_PLAN_XREDUCE, 0, 0, KILN_NONE);
}

/* ---- the table and the rule sets ---- */

enum rule_id {
    RULE_INLINE,
    RULE_TILE_FUSE,
    RULE_TILE_CW,
    RULE_TILE,
    RULE_LITTLE_REUSE,
    RULE_SKIP,
    RULE_RFACTOR,
    RULE_GPU_TILE_FUSE,
    RULE_GPU_TILE_CW,
    RULE_GPU_TILE_SHARED,
    RULE_GPU_CROSS_THREAD,
};

/* The order of a set is the order of an op's options, so of the sketches: a new rule goes where
 * it keeps the existing sketches' numbers (after the others, as the cross-thread rule). */
static const struct kiln_sk_rule rules[] = {
    [RULE_INLINE] = {"always inline", meets_inline, apply_inline},
    [RULE_TILE_FUSE] = {"multi-level tiling + consumer fusion", meets_tile_fuse,
                        apply_tile_fuse_cpu},
    [RULE_TILE_CW] = {"multi-level tiling + cache write", meets_tile_cw_cpu, apply_tile_cw_cpu},
    [RULE_TILE] = {"multi-level tiling", meets_tile, apply_tile},
    [RULE_LITTLE_REUSE] = {"little reuse", meets_little_reuse, apply_plain},
    [RULE_SKIP] = {"skip", meets_skip, apply_plain},
    [RULE_RFACTOR] = {"rfactor", meets_rfactor, apply_rfactor},
    [RULE_GPU_TILE_FUSE] = {"gpu multi-level tiling + consumer fusion", meets_tile_fuse,
                            apply_tile_fuse_gpu},
    [RULE_GPU_TILE_CW] = {"gpu multi-level tiling + cache write", meets_tile, apply_tile_cw_gpu},
    [RULE_GPU_TILE_SHARED] = {"gpu multi-level tiling + shared memory", meets_tile, apply_tile},
    [RULE_GPU_CROSS_THREAD] = {"gpu cross-thread reduction", meets_cross_thread,
                               apply_cross_thread},
};

static const struct kiln_sk_rule *const cpu_rules[] = {
    &rules[RULE_INLINE],       &rules[RULE_TILE_FUSE], &rules[RULE_TILE_CW], &rules[RULE_TILE],
    &rules[RULE_LITTLE_REUSE], &rules[RULE_SKIP],      &rules[RULE_RFACTOR],
};

static const struct kiln_sk_rule *const gpu_rules[] = {
    &rules[RULE_INLINE],          &rules[RULE_GPU_TILE_FUSE], &rules[RULE_GPU_TILE_CW],
    &rules[RULE_GPU_TILE_SHARED], &rules[RULE_SKIP],          &rules[RULE_GPU_CROSS_THREAD],
};

const struct kiln_sk_ruleset kiln_sk_cpu_rules = {cpu_rules, KILN_COUNTOF(cpu_rules),
                                                  kiln_sk_cpu_make};
const struct kiln_sk_ruleset kiln_sk_gpu_rules = {gpu_rules, KILN_COUNTOF(gpu_rules),
                                                  kiln_sk_gpu_make};

/* ---- the driver ---- */

/* Cartesian product of the per-op options, ops in reverse order (consumers first, as Ansor
 * applies its rules), capped at G->cap sketches. An op fused into its consumer takes the
 * consumer (then computed CONSUMER) only while the consumer is computed plain. */
static enum kiln_status
enumerate(struct kiln_sk_gen *G, const struct kiln_sk_ruleset *rs, uint32_t k)
{
    if (!kiln_ok(G->ctx))
        return G->ctx->err.status;
    if (G->n == G->cap)
        return KILN_OK;
    if (k == 0)
        return rs->make(G);
    uint32_t i = k - 1;
    for (uint32_t o = 0; o < G->opts[i].n; o++) {
        struct kiln_sk_option opt = G->opts[i].o[o];
        if (opt.mode == KILN_PLAN_TILE_FUSE) {
            if (G->cur[opt.consumer].mode != KILN_PLAN_PLAIN)
                continue;
            G->cur[opt.consumer].mode = KILN_PLAN_CONSUMER;
        }
        G->cur[i] = opt;
        KILN_TRY(enumerate(G, rs, k - 1));
        if (opt.mode == KILN_PLAN_TILE_FUSE)
            G->cur[opt.consumer].mode = KILN_PLAN_PLAIN;
    }
    return KILN_OK;
}

enum kiln_status
kiln_sketches_generate(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_hw *hw,
                       struct kiln_sketch **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    KILN_TRY(kiln_graph_verify(g));
    const struct kiln_sk_ruleset *rs = hw->gpu ? &kiln_sk_gpu_rules : &kiln_sk_cpu_rules;
    struct ana                    A;
    KILN_TRY(kiln_sk_analyse(ctx, g, hw, &A));
    struct kiln_sk_gen G = {.ctx = ctx, .A = &A, .cap = KILN_MAX_SKETCHES};
    G.opts = kiln_arena_alloc(ctx, sizeof(*G.opts) * (g->nop + 1));
    G.cur = kiln_arena_alloc(ctx, sizeof(*G.cur) * (g->nop + 1));
    G.out = kiln_arena_alloc(ctx, sizeof(struct kiln_sketch) * (G.cap + 1));
    if (!G.opts || !G.cur || !G.out)
        return ctx->err.status;
    for (uint32_t i = 0; i < g->nop; i++) {
        G.opts[i].n = 0;
        G.cur[i] = (struct kiln_sk_option){.mode = KILN_PLAN_PLAIN, .consumer = KILN_NONE};
        for (uint32_t r = 0; r < rs->nrule; r++) {
            enum kiln_sk_meet m = rs->rule[r]->meets(&A, i);
            if (m == KILN_SK_PASS)
                continue;
            rs->rule[r]->apply(&A, i, &G.opts[i]);
            if (m == KILN_SK_APPLY_SKIP_REST)
                break;
        }
    }
    KILN_TRY(enumerate(&G, rs, g->nop));
    if (G.n == 0) { /* no ops, or nothing fitted: the default schedule */
        struct kiln_sketch *sk = &G.out[0];
        memset(sk, 0, sizeof *sk);
        sk->desc = "default";
        sk->priv = kiln_arena_alloc(ctx, sizeof *sk->priv);
        if (!sk->priv)
            return ctx->err.status;
        *sk->priv = (struct kiln_sketch_priv){.nop = 0};
        G.n = 1;
    }
    *out = G.out;
    *n = G.n;
    return KILN_OK;
}
