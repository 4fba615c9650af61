/* tuner/sketch_int.h -- internal to tuner/sketch.c and tuner/sketch_gpu.c: the analysis of
 * compute definitions the sketch rules share, and the helpers that write schedule steps. The
 * CPU rules live in sketch.c, the GPU rules in sketch_gpu.c. */
#ifndef KILN_TUNER_SKETCH_INT_H
#define KILN_TUNER_SKETCH_INT_H

#include "sketch_priv.h"

/* ---- analysis (sketch.c) ---- */

/* The loads of an expression (at most 64; overflow set beyond). */
struct loads {
    const kiln_ctx *ctx;
    kiln_expr       l[64];
    uint32_t        n;
    bool            overflow;
};
void kiln_sk_loads_of(const kiln_ctx *ctx, kiln_expr e, struct loads *L);

/* What the rules know about each op of a task graph. */
struct ana {
    kiln_ctx                *ctx;
    const struct kiln_graph *g;
    const struct kiln_hw    *hw;
    kiln_expr               *eff;     /* per op: body with inlined producers substituted */
    bool                    *inl;     /* per op: strictly inlineable (inlined in every sketch) */
    uint32_t                *nreader; /* per op: non-inlined ops reading its tensor */
    uint32_t                *reader;  /* per op: the last such reader */
    bool                    *mlt;     /* per op: needs multi-level tiling */
    uint32_t (*padt)[4];              /* per tiled op: arguments it may read padded */
    uint8_t *npad;
};
enum kiln_status kiln_sk_analyse(kiln_ctx *ctx, const struct kiln_graph *g,
                                 const struct kiln_hw *hw, struct ana *A);
/* Some output axis of op i of extent > 1 is absent from every index of op i's loads (L) of
 * tensor t: op i reuses t. */
bool kiln_sk_misses_an_axis(const struct ana *A, uint32_t i, const struct loads *L, uint32_t t);
/* The one elementwise consumer op i may be computed at, or KILN_NONE. */
uint32_t kiln_sk_fusible_consumer(const struct ana *A, uint32_t i);
/* Appends a knob to sk; KILN_NONE when the sketch has no slots left. */
uint32_t kiln_sk_add_knob(kiln_ctx *ctx, struct kiln_sketch *sk, enum kiln_knob_kind kind,
                          enum kiln_knob_role role, uint32_t nparts, int64_t extent,
                          uint32_t nchoice, const char *name);

/* ---- writing schedule steps (sketch.c) ---- */

/* The loops of one stage, outermost first, as the steps written so far left them. */
struct leaves {
    char     name[64][KILN_SKETCH_NAME];
    uint32_t n;
};

struct emit {
    kiln_ctx                 *ctx;
    const struct kiln_graph  *g;
    const struct kiln_sketch *sk;
    const struct kiln_prog   *p;
    struct kiln_schedule     *out;
    uint32_t                  packed[16];
    uint32_t                  npacked;
    uint32_t                  padded[16];
    uint32_t                  npadded;
    const char              **tile_stage, **tile_iter; /* per tiled op: its outermost tile */
    bool gpu_no_shared, gpu_shared_used; /* GPU: shared copies forbidden / made (sketch_gpu.c) */
};

uint32_t         kiln_sk_sym(struct emit *E, const char *s);
const char      *kiln_sk_derived(struct emit *E, const char *base, const char *suffix);
enum kiln_status kiln_sk_push(struct emit *E, struct kiln_step st);
enum kiln_status kiln_sk_step1(struct emit *E, enum kiln_step_kind kind, const char *stage,
                               const char *iter);
/* Splits leaf `iter` of stage into nf + 1 parts (iter.0 .. iter.nf). */
enum kiln_status kiln_sk_emit_split(struct emit *E, const char *stage, struct leaves *L,
                                    const char *iter, uint32_t nf, const int64_t *f);
/* Reorders the leaves into `want` (a permutation of them). */
enum kiln_status kiln_sk_emit_order(struct emit *E, const char *stage, struct leaves *L,
                                    char want[][KILN_SKETCH_NAME]);
/* Value `part` of knob `knob` in E's program; dflt when the knob is KILN_NONE. */
int64_t kiln_sk_val(const struct emit *E, uint32_t knob, uint32_t part, int64_t dflt);

/* ---- the GPU rules (sketch_gpu.c) ---- */

/* Sketches of g by the GPU rules (tuner/README.md, "GPU sketches"). */
enum kiln_status kiln_gpu_sketches_generate(kiln_ctx *ctx, const struct kiln_graph *g,
                                            const struct kiln_hw *hw, struct kiln_sketch **out,
                                            uint32_t *n);
/* The schedule of a program of a GPU sketch (sk->gpu set). */
enum kiln_status kiln_gpu_prog_schedule(struct emit *E);

/* Describes the sketch being built, out[*n], as "T0:mode0 T1:mode1 ..." (mode[i] per op) and
 * keeps it (*n grows) unless a sketch of out[0..*n) has that description already: an option
 * degraded into one the list holds. */
enum kiln_status kiln_sk_name(kiln_ctx *ctx, const struct kiln_graph *g, const char *const *mode,
                              struct kiln_sketch *out, uint32_t *n);

#endif
