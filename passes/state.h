/* passes/state.h -- private to passes/: the schedule state that steps are applied to and that
 * lowering reads. A stage computes one tensor; its iterators form a history (root iterators,
 * then the parts that splits and fuses create) and a current loop order (the leaves). */
#ifndef KILN_PASSES_STATE_H
#define KILN_PASSES_STATE_H

#include "passes.h"

enum kiln_attach {
    KILN_ATTACH_ROOT,
    KILN_ATTACH_INLINE,
    KILN_ATTACH_AT,
};

/* Limits on one stage, checked when a split or fuse would pass them, so that a schedule of
 * hundreds of chained splits is an error naming the step, not a loop nest that lowering, the
 * simplifier and the code generators walk recursively (and size fixed arrays by). Generous:
 * every root iterator (KILN_MAX_DIMS spatial + KILN_MAX_REDUCE reduction) split once into the
 * most parts one split makes (KILN_STEP_MAXN) is 128 loops; the sketches' multi-level tiling
 * makes at most 4 parts of a spatial and 2 of a reduction iterator (48 loops). */
#define KILN_MAX_LOOPS 128 /* loops of one stage's nest (its leaves) */
#define KILN_MAX_ITERS 512 /* iterators of one stage, those splits and fuses replaced included */
/* loops around a statement when lowering, those of the stages it is computed at included (a
 * chain of compute_at): lowering checks it (passes/lower.c) */
#define KILN_MAX_NEST 256

struct kiln_iterv {
    uint32_t name;   /* symbol */
    int64_t  extent; /* over the stage's full domain */
    uint8_t  reduce; /* a reduction iterator */
    uint8_t  ann;    /* enum kiln_loop_kind */
    uint8_t  axis;   /* GPU_BLOCK / GPU_THREAD annotations (bind): 0 = x, 1 = y, 2 = z */
};

enum kiln_rel_kind {
    KILN_REL_SPLIT, /* parent -> parts[0..n) outer to inner; factors[1..n) inner extents */
    KILN_REL_FUSE,  /* parts[0..n) outer to inner -> child */
};

struct kiln_rel {
    uint8_t  kind, n;
    uint32_t parent, child;
    uint32_t parts[KILN_STEP_MAXN];
    int64_t  factors[KILN_STEP_MAXN];
};

struct kiln_stage {
    uint32_t           name;   /* symbol: the tensor's name */
    uint32_t           tensor; /* index into state tensors */
    kiln_expr          body;
    uint8_t            reduce, nred, ndim;
    int64_t            rext[KILN_MAX_REDUCE];
    struct kiln_iterv *it; /* 0..ndim-1 spatial roots, ndim..ndim+nred-1 reduction roots */
    uint32_t           nit, capit;
    uint32_t          *leaf; /* current loop order, outer to inner */
    uint32_t           nleaf, capleaf;
    struct kiln_rel   *rel;
    uint32_t           nrel, caprel;
    uint8_t            attach; /* enum kiln_attach */
    uint32_t           at_stage, at_iter;
    int64_t            auto_unroll; /* 0 = none */
    bool               transformed;
};

struct kiln_stensor {
    uint32_t name;
    uint8_t  dtype, kind, ndim, is_output;
    uint8_t  shared; /* a cache_read copy in GPU shared memory ("scope": "shared") */
    int64_t  shape[KILN_MAX_DIMS];
    uint32_t stage; /* producing stage, KILN_NONE for arguments */
};

struct kiln_state {
    kiln_ctx                *ctx;
    const struct kiln_graph *g;
    struct kiln_stensor     *t;
    uint32_t                 nt, capt;
    struct kiln_stage       *st;
    uint32_t                 nst, capst;
    uint32_t                *order; /* stage ids in execution order */
    uint32_t                 norder, caporder;
};

/* Builds the initial state of g (one root stage per op) and applies every step of s; the
 * first illegal step gives KILN_ERR_INVALID naming the step and the reason. */
enum kiln_status kiln_state_build(kiln_ctx *ctx, const struct kiln_graph *g,
                                  const struct kiln_schedule *s, struct kiln_state *out);

/* Extents of every iterator of st when its spatial roots span root_ext[0..ndim) (the stage's
 * shape, or a compute_at region) and its reduction roots their full extents. */
void kiln_state_extents(const struct kiln_stage *st, const int64_t *root_ext, int64_t *ext);
/* Values of every iterator from the values of the leaves (val[leaf] set by the caller), using
 * the extents computed by kiln_state_extents. */
void kiln_state_values(kiln_ctx *ctx, const struct kiln_stage *st, const int64_t *ext,
                       kiln_expr *val);
/* Conditions under which the iteration is inside the domain (non-divisible splits): appends to
 * cond (at most KILN_STEP_MAXN * nrel entries). spatial_only skips reduction iterators. */
uint32_t kiln_state_guards(kiln_ctx *ctx, const struct kiln_stage *st, const int64_t *ext,
                           const kiln_expr *val, bool spatial_only, kiln_expr *cond);

#endif
