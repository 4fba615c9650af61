/* tuner/sketch_int.h -- internal to tuner/sketch.c, sketch_gpu.c and sketch_rules.c: the
 * analysis of compute definitions the sketch rules share, the rules and rule sets, and the
 * helpers that write schedule steps. The rules and the driver that applies them live in
 * sketch_rules.c; the CPU sketches' knobs and schedules in sketch.c, the GPU ones in
 * sketch_gpu.c. */
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
    uint32_t                *fuse;    /* per tiled op: the one elementwise consumer it may be
                                       * computed at, else KILN_NONE */
    uint32_t (*padt)[4];              /* per tiled op: arguments it may read padded */
    uint8_t *npad;
};
enum kiln_status kiln_sk_analyse(kiln_ctx *ctx, const struct kiln_graph *g,
                                 const struct kiln_hw *hw, struct ana *A);
/* Some output axis of op i of extent > 1 is absent from every index of op i's loads (L) of
 * tensor t: op i reuses t. */
bool kiln_sk_misses_an_axis(const struct ana *A, uint32_t i, const struct loads *L, uint32_t t);
/* Op i is a reduction whose last output axis (extent > 1) every load reads as its own last
 * index or not at all: computed plain, each vector lane keeps its own accumulator. */
bool kiln_sk_lanes_along_last(const struct ana *A, uint32_t i);
/* The number of tensors op i reuses (kiln_sk_misses_an_axis), those of one element aside. */
uint32_t kiln_sk_reused_tensors(const struct ana *A, uint32_t i);
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

uint32_t kiln_sk_sym(struct emit *E, const char *s);
/* The stage a step of kind `kind` adds for stage or tensor `base` ("C.local"). */
const char      *kiln_sk_derived(struct emit *E, const char *base, enum kiln_step_kind kind);
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

/* ---- the rules (sketch_rules.c) ---- */

/* What a rule's condition says of an op (Ansor's MeetCondition). */
enum kiln_sk_meet {
    KILN_SK_PASS,            /* the rule does not apply */
    KILN_SK_APPLY,           /* apply it, then try the rules after it */
    KILN_SK_APPLY_SKIP_REST, /* apply it and no rule after it */
};

/* One way a sketch may compute an op: what a rule offers. */
struct kiln_sk_option {
    uint8_t  mode;     /* enum kiln_plan_mode */
    uint8_t  level;    /* CPU TILE_CW / TILE_FUSE: attached after spatial level 1 (S0) or 2 */
    uint8_t  rf_inner; /* RFACTOR: the inner part becomes T.rf's extra axis */
    uint32_t consumer; /* TILE_FUSE: the consumer op; KILN_NONE otherwise */
};

#define KILN_SK_MAX_OPTIONS 8 /* per op, all the rules of a set together */

struct kiln_sk_options {
    struct kiln_sk_option o[KILN_SK_MAX_OPTIONS];
    uint32_t              n;
};

struct kiln_sk_rule {
    const char *name;
    enum kiln_sk_meet (*meets)(const struct ana *A, uint32_t i);
    /* Appends the options the rule offers op i (in the order the sketches take them). */
    void (*apply)(const struct ana *A, uint32_t i, struct kiln_sk_options *O);
};

/* The sketches being generated: per op its options, the one chosen for the sketch being
 * built, and the sketches so far. */
struct kiln_sk_gen {
    kiln_ctx               *ctx;
    const struct ana       *A;
    struct kiln_sk_options *opts; /* per op */
    struct kiln_sk_option  *cur;  /* per op: chosen */
    struct kiln_sketch     *out;
    uint32_t                n, cap;
};

/* A rule set: the rules tried on every op, in order, and how a sketch of the options they
 * chose is made. */
struct kiln_sk_ruleset {
    const struct kiln_sk_rule *const *rule;
    uint32_t                          nrule;
    /* The sketch of the options in G->cur (knobs, plan, desc) as G->out[G->n], kept (G->n
     * grows) unless a sketch of that desc is there already. */
    enum kiln_status (*make)(struct kiln_sk_gen *G);
};
extern const struct kiln_sk_ruleset kiln_sk_cpu_rules, kiln_sk_gpu_rules;

/* The makers of the two rule sets (sketch.c, sketch_gpu.c). */
enum kiln_status kiln_sk_cpu_make(struct kiln_sk_gen *G);
enum kiln_status kiln_sk_gpu_make(struct kiln_sk_gen *G);

/* A cross-thread reduction is offered for reductions longer than a warp. */
#define KILN_GPU_WARP 32

/* ---- the GPU programs (sketch_gpu.c) ---- */

/* The schedule of a program of a GPU sketch (sk->gpu set). */
enum kiln_status kiln_gpu_prog_schedule(struct emit *E);

/* Describes the sketch being built, out[*n], as "T0:mode0 T1:mode1 ..." (mode[i] per op) and
 * keeps it (*n grows) unless a sketch of out[0..*n) has that description already: an option
 * degraded into one the list holds. */
enum kiln_status kiln_sk_name(kiln_ctx *ctx, const struct kiln_graph *g, const char *const *mode,
                              struct kiln_sketch *out, uint32_t *n);

#endif
