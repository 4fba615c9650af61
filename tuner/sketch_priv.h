/* tuner/sketch_priv.h -- private to tuner/sketch*.c and tuner/annotate.c: what a sketch decided
 * for every op of its task graph, and where each op's knobs are. */
#ifndef KILN_TUNER_SKETCH_PRIV_H
#define KILN_TUNER_SKETCH_PRIV_H

#include "tuner.h"

#define KILN_MAX_SKETCHES  32 /* per task graph */
#define KILN_SKETCH_NAME   64 /* longest iterator name the rules handle */
#define KILN_UNROLL_NSTEPS 4
#define KILN_MAX_INNER     64                               /* longest innermost tile */
extern const int64_t kiln_unroll_steps[KILN_UNROLL_NSTEPS]; /* 0, 16, 64, 512 */

/* What a sketch does with an op: the options the sketch rules offer (tuner/sketch_rules.c).
 * The GPU rules use the same modes, each scheduled the GPU's way (tuner/sketch_gpu.c). */
enum kiln_plan_mode {
    KILN_PLAN_PLAIN,     /* at root: parallel outer loops, vectorised inner split (GPU: spatial
                          * loops fused, split by a thread count, bound to blocks and threads) */
    KILN_PLAN_INLINE,    /* compute_inline */
    KILN_PLAN_CONSUMER,  /* tiled by its producer's TILE_FUSE */
    KILN_PLAN_TILE,      /* multi-level tiling SSRSRS, alone (GPU: SSSRRSRS, S0 blocks, R0,
                          * S2 threads, S1 R1 R2 S3, shared copies of reused inputs) */
    KILN_PLAN_TILE_CW,   /* SSRSRS on T.local computed at a tile of T (cache write; GPU: T bound
                          * S0/S2, T.local computed at T's thread loop) */
    KILN_PLAN_TILE_FUSE, /* SSRSRS on T computed at a tile of its elementwise consumer (GPU: the
                          * consumer bound S0/S2, T computed at its thread loop) */
    KILN_PLAN_RFACTOR,   /* CPU: reductions fused, split, rfactored */
    KILN_PLAN_XREDUCE,   /* GPU: cross-thread reduction: spatial loops fused on blocks, the
                          * (fused) reduction split and its inner part bound to threadIdx.x */
};

struct kiln_op_plan {
    uint8_t  mode;     /* enum kiln_plan_mode */
    uint8_t  level;    /* TILE_CW / TILE_FUSE: attached after spatial level 1 (S0) or 2 (S1) */
    uint8_t  rf_inner; /* RFACTOR: the inner part becomes T.rf's extra (vector) axis */
    uint32_t consumer; /* TILE_FUSE: the consumer op */
    /* knob indices, KILN_NONE when absent */
    uint32_t k_split[KILN_MAX_DIMS + KILN_MAX_REDUCE]; /* per root axis (spatial, reduction) */
    uint32_t k_vaxis, k_vec, k_unroll, k_par, k_pack;
    uint32_t k_pad;                /* TILE modes: 1 pads the arguments in padt (the pad step) */
    uint32_t k_loc;                /* PLAIN: 0 at root, 1 at the outer tile of its tiled reader */
    uint32_t reader;               /* PLAIN with k_loc: the tiled op reading it */
    uint8_t  vcand[KILN_MAX_DIMS]; /* spatial axes that may be the vector axis */
    uint8_t  nvcand;
    /* per spatial axis: some load reads floordiv(axis, q) (a grouped convolution's input
     * channel, (k / K_per_group) * C_per_group + rc): its vector tile should divide gperiod,
     * the gcd of those q, so that the quotient is one value for all lanes; 0 when none */
    int64_t gperiod[KILN_MAX_DIMS];
    /* per spatial axis: arguments (tensor, dimension) packed when it is the vector axis */
    uint32_t pack_t[KILN_MAX_DIMS][4];
    uint8_t  pack_d[KILN_MAX_DIMS][4];
    uint8_t  npack[KILN_MAX_DIMS];
    /* arguments read under a bounds-checking select that the pad step accepts */
    uint32_t padt[4];
    uint8_t  npad;
    /* PLAIN, RFACTOR: the output's extents, outermost first (the parallel knob fuses a prefix) */
    int64_t shape[KILN_MAX_DIMS];
    uint8_t ndim;
    int64_t work; /* PLAIN, RFACTOR: output elements times the reduction's extent */
};

struct kiln_sketch_priv {
    uint32_t             nop; /* 0: the default schedule */
    struct kiln_op_plan *op;
    int                  lanes, cores;
    int                  vregs; /* architectural vector registers (struct kiln_hw) */
};

/* The iterator names passes/state.c gives op `op`'s root loops (spatial, then reduction). */
void kiln_sketch_axis_names(kiln_ctx *ctx, const struct kiln_graph *g, uint32_t op,
                            char names[][KILN_SKETCH_NAME]);

#endif
