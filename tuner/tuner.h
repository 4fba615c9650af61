/* tuner/tuner.h -- internal: kiln's autotuner. Given a kernel graph and a target it finds fast
 * schedules, Ansor-style, then refines them with Droplet search:
 *
 *   graph --tasks--> tasks --sketch rules--> sketches --random annotation--> programs
 *   programs --features--> cost model (XGBoost) --evolutionary search--> candidates
 *   candidates --measure (worker processes)--> records (SQLite) --retrain--> ...
 *   best program --Droplet coordinate descent--> best schedule per task
 *
 * A *program* is a sketch plus values for its knobs (tile lengths, unroll step, parallel
 * granularity, compute location, ...); kiln_prog_schedule turns it into an ordinary schedule
 * (passes/passes.h), which is what is compiled and what the records database stores. The
 * tuner knows no op by name: every rule is decided by analysing compute definitions.
 *
 * Sections below are owned by the file named in their heading. */
#ifndef KILN_TUNER_H
#define KILN_TUNER_H

#include "../codegen/codegen.h"
#include "../passes/passes.h"

#include <stdio.h>

/* ---- tasks (tuner/task.c) ----
 * A task is a standalone subgraph: one anchor op with data reuse (a reduction that reads the
 * same data from several output points: matmul, convolution, ...) plus the elementwise ops
 * fused into it, or a group of ops with no anchor. Tensors it reads from outside become its
 * inputs (weights stay weights); tensor names are kept, so a task's schedule applies to the
 * whole graph unchanged. Identical tasks (same structure and shapes, names aside) are
 * deduplicated: one task, weight = number of occurrences. */
struct kiln_task {
    struct kiln_graph *g;        /* the subgraph (ctx-owned) */
    uint64_t           hash;     /* kiln_task_hash */
    uint64_t           kind;     /* kiln_task_kind */
    char               key[17];  /* hash as 16 hex digits: the workload key with the target */
    double             flops;    /* of one occurrence */
    uint32_t           weight;   /* occurrences in the whole graph */
    uint32_t           ninst;    /* == weight */
    uint32_t         **inst_ops; /* per occurrence: the whole graph's op ids, in task op order */
    uint32_t **inst_tensors;     /* per occurrence: the whole graph's tensor for each task tensor */
};

struct kiln_tasks {
    struct kiln_task *task;
    uint32_t          n;
};

enum kiln_status kiln_tasks_extract(kiln_ctx *ctx, const struct kiln_graph *g,
                                    struct kiln_tasks *out);
/* A task graph's workload hash: the structural hash (kiln_graph_hash: tensor names excluded)
 * plus the display names of its variables, which schedules name iterators by. */
uint64_t kiln_task_hash(const struct kiln_graph *sub);
/* Its shape-free kind: the same with every extent and literal value left out (tensor ranks,
 * dtypes, reduction kinds and the bodies' structure stay), so the same operator at other shapes,
 * strides or paddings that keep the body's form has the same kind. */
uint64_t kiln_task_kind(const struct kiln_graph *sub);
/* Ansor's "needs multi-level tiling": op is a reduction and some input lacks an output axis of
 * extent > 1 among its indices (so it is reused across that axis). */
bool kiln_op_has_reuse(const struct kiln_graph *g, uint32_t op);
/* The schedule of task occurrence `inst` for the whole graph: s with every stage name of the
 * task (and the stages derived from it: "C.local", "B.pack", ...) renamed to the occurrence's
 * tensor names. Occurrence 0 keeps the names. */
enum kiln_status kiln_task_rename(kiln_ctx *ctx, const struct kiln_graph *whole,
                                  const struct kiln_task *t, uint32_t inst,
                                  const struct kiln_schedule *s, struct kiln_schedule *out);

/* ---- search space: sketches and programs (tuner/sketch.c) ---- */
#define KILN_MAX_KNOBS  48
#define KILN_MAX_VALUES 128 /* int64 slots of one program */
#define KILN_SPLIT_MAX  6   /* parts of one multi-level split */

enum kiln_knob_kind {
    KILN_KNOB_SPLIT,  /* nparts inner lengths (outer to inner) of an iterator of `extent`;
                       * their product is <= extent (a non-divisor is legal: guarded) */
    KILN_KNOB_CHOICE, /* one of nchoice options (unroll step, parallel depth, location, ...) */
};

enum kiln_knob_role { /* what a knob means: mutation weights and Droplet neighbours use it */
                      KILN_KNOB_TILE,
                      KILN_KNOB_UNROLL,
                      KILN_KNOB_PARALLEL,
                      KILN_KNOB_VECTORIZE,
                      KILN_KNOB_LOCATION,
                      KILN_KNOB_LAYOUT,
                      KILN_KNOB_OTHER,
};

struct kiln_knob {
    uint8_t     kind;   /* enum kiln_knob_kind */
    uint8_t     role;   /* enum kiln_knob_role */
    uint8_t     nparts; /* SPLIT: number of lengths */
    uint32_t    slot;   /* first value slot in kiln_prog.v */
    int64_t     extent; /* SPLIT: the iterator's extent */
    uint32_t    nchoice;
    const char *name; /* "C.i tile", "C auto_unroll", ... (ctx-owned) */
};

struct kiln_sketch_priv; /* the rules' private description (tuner/sketch.c) */
struct kiln_gpu_sketch;  /* the GPU rules' private description (tuner/sketch_gpu.c) */

/* A sketch: the structure shared by a family of schedules (which stages are inlined, tiled,
 * cached, fused where), with its knobs left free. */
struct kiln_sketch {
    uint32_t                 id;   /* index in its task's list */
    const char              *desc; /* rules applied, human-readable; stable across runs */
    struct kiln_knob         knob[KILN_MAX_KNOBS];
    uint32_t                 nknob, nvalues;
    struct kiln_sketch_priv *priv;
    struct kiln_gpu_sketch  *gpu; /* GPU sketches only (kiln_hw.gpu); NULL for CPU ones */
};

/* A concrete program. */
struct kiln_prog {
    uint32_t sketch;
    int64_t  v[KILN_MAX_VALUES];
};

/* Tuning-relevant facts about the target (from struct kiln_target). */
struct kiln_hw {
    int num_cores;
    int vector_lanes; /* f32 lanes of the widest vector register */
    int cache_line;   /* bytes */
    int l1_bytes, l2_bytes;
    int vector_regs;   /* architectural vector registers: 16 on AVX2, 32 on AVX-512 and NEON
                        * (0: derived from vector_lanes) */
    bool gpu;          /* a CUDA target: kiln_sketches_generate uses the GPU rules */
    int  max_threads;  /* GPU: threads per block, at most (1024) */
    int  shared_bytes; /* GPU: static shared memory per block, at most (48 KiB) */
    int  max_grid_yz;  /* GPU: grid extent on y and z, at most (65535) */
    int  thread_regs;  /* GPU: f32 accumulators one thread's tile may hold (64) */
};
void kiln_hw_from_target(const struct kiln_target *t, struct kiln_hw *hw);

/* Generates the sketches of task graph g by the CPU sketch rules (always-inline, multi-level
 * tiling "SSRSRS", tiling with consumer fusion, cache write, rfactor, skip), or for a GPU hw
 * (hw->gpu) by the GPU rules (tuner/sketch_rules.c; always-inline, multi-level tiling
 * "SSSRRSRS" bound to blocks and threads, shared-memory caches, cache write, consumer fusion,
 * fused-and-bound elementwise ops, cross-thread reductions). *out is ctx-owned. Never fails for a
 * verified graph (at worst one sketch: the default schedule). */
enum kiln_status kiln_sketches_generate(kiln_ctx *ctx, const struct kiln_graph *g,
                                        const struct kiln_hw *hw, struct kiln_sketch **out,
                                        uint32_t *n);
/* Random annotation: a program of sketch sk with every knob drawn at random (tile lengths from
 * the factorisations of the extents, ...). */
void kiln_prog_sample(const struct kiln_sketch *sk, struct kiln_rng *rng, struct kiln_prog *out);
/* The schedule of a program (appended to *out). Every program of a sketch must lower and
 * compile: a failure here is a bug of the rules, reported as KILN_ERR_INTERNAL. A GPU program
 * with shared-memory copies is lowered and emitted as CUDA C here first (in a scratch scope),
 * and made without the copies when its kernel's shared memory is over the limit. */
enum kiln_status kiln_prog_schedule(kiln_ctx *ctx, const struct kiln_graph *g,
                                    const struct kiln_sketch *sk, const struct kiln_prog *p,
                                    struct kiln_schedule *out);
/* Mutation: changes one knob chosen by role weight (tile 0.90, location 0.05, unroll 0.04,
 * parallel 0.01, renormalised over the knobs the sketch has). Returns false if nothing could
 * change. */
bool kiln_prog_mutate(const struct kiln_sketch *sk, struct kiln_rng *rng, struct kiln_prog *p);
/* Moves p into the region of the space where the sampling prior puts nearly all its draws, for
 * prediction, whose cost model must rank programs it was never trained near:
 *  - a tiled op whose output's innermost (contiguous) axis is at least a vector long takes it
 *    as its vector axis, vectorised, its innermost tile a multiple of the lanes: another axis
 *    stores the output with a stride, lane by lane (AVX2 has no scatter; AVX-512's costs about
 *    an element a cycle). A batched matmul [12,128,128]x[12,128,64] was predicted vectorised
 *    along its rows at 1.4 GFLOP/s where tuning finds 106; then along its columns, but one
 *    lane wide;
 *  - an elementwise op and a reduction's rfactor are vectorised (a softmax's exp was predicted
 *    scalar), and a plain op of at least 32K element-steps runs parallel;
 *  - the register-tile cap and the balanced parallel loops of kiln_prog_sample, always.
 * The programs it leaves out can win only in rare layouts (a short last axis is left free).
 * True if p changed. The tuner measures, and keeps the whole space. */
bool kiln_prog_in_prior(const struct kiln_sketch *sk, struct kiln_rng *rng, struct kiln_prog *p);
/* Crossover of two programs of one sketch: each knob from a or b at random. */
void kiln_prog_crossover(const struct kiln_sketch *sk, struct kiln_rng *rng,
                         const struct kiln_prog *a, const struct kiln_prog *b,
                         struct kiln_prog *out);
/* Droplet neighbours: programs that differ from p in exactly one knob, moved to the next legal
 * value up or down (a tile length to the next divisor, the next unroll step, ...). Writes at
 * most max; returns the number written. */
uint32_t kiln_prog_neighbours(const struct kiln_sketch *sk, const struct kiln_prog *p,
                              struct kiln_prog *out, uint32_t max);
uint64_t kiln_prog_hash(const struct kiln_sketch *sk, const struct kiln_prog *p);
/* Every knob value of p in range for sk: tile lengths >= 1 with product <= extent and the
 * innermost <= 64, choices < nchoice. Programs made by the functions above always are. */
bool kiln_prog_valid(const struct kiln_sketch *sk, const struct kiln_prog *p);
/* {"sketch": "<desc>", "v": [..]} -- sketches are named by desc so records survive reorderings. */
enum kiln_status kiln_prog_to_json(kiln_ctx *ctx, const struct kiln_sketch *sk,
                                   const struct kiln_prog *p, struct kiln_buf *out);
enum kiln_status kiln_prog_from_json(kiln_ctx *ctx, const struct kiln_sketch *sk, uint32_t nsk,
                                     const char *json, struct kiln_prog *out);

/* ---- features (tuner/features.c) ----
 * Per-store features of a lowered, flattened loop nest in the spirit of Ansor's: arithmetic
 * counts by kind, vectorisation/unroll/parallel annotations, per-buffer memory access features
 * (bytes, unique bytes, reuse distance, strides, lines touched), allocation and outer-loop
 * features. One row of KILN_FEAT_DIM floats per store statement. */
#define KILN_FEAT_DIM 182 /* 164 for every target, then 18 for GPU targets (0 on CPUs) */

struct kiln_feat {
    float   *row; /* nrow * KILN_FEAT_DIM, malloc'ed */
    uint32_t nrow;
};
enum kiln_status kiln_features_extract(kiln_ctx *ctx, const struct kiln_func *f,
                                       const struct kiln_hw *hw, struct kiln_feat *out);
void             kiln_feat_free(struct kiln_feat *f);
/* Lowers g under s (kiln_lower) and extracts the features of the result inside a scratch
 * scope, so scoring thousands of candidates does not grow the context. A schedule that does not
 * lower returns kiln_lower's error (recorded in ctx) and an empty *out. */
enum kiln_status kiln_features_lower(kiln_ctx *ctx, const struct kiln_graph *g,
                                     const struct kiln_schedule *s, const struct kiln_hw *hw,
                                     struct kiln_feat *out);
const char      *kiln_feat_name(uint32_t i); /* for dumps and tests */

/* ---- cost model (tuner/xgb.c) ----
 * Gradient-boosted trees (XGBoost C API) over the per-store rows; a program's score is the sum
 * over its rows (Ansor's pack-sum), trained on normalised throughput (best time of the task /
 * time; 0 for errors). The alternative objective ranks mean-pooled program rows pairwise. */
enum kiln_cm_objective {
    KILN_CM_PACK_SUM, /* per-row regression, program = sum of rows, loss weighted by y */
    KILN_CM_RANK,     /* one row per program (mean of its rows), XGBoost rank:pairwise */
};
struct kiln_cm_params {
    uint8_t  objective;      /* enum kiln_cm_objective; default KILN_CM_PACK_SUM */
    uint32_t max_rounds;     /* boosting rounds at most; default 300 */
    uint32_t patience;       /* stop after this many rounds without a better training
                              * loss (pack-sum only); default 30 */
    int    max_depth;        /* default 4 */
    int    max_bin;          /* histogram bins per feature; default 64 */
    double eta;              /* default 0.2 */
    double gamma;            /* default 0 */
    double min_child_weight; /* default 0 */
    int    nthread;          /* XGBoost threads; default 1 */
};
void kiln_cm_params_default(struct kiln_cm_params *p);

struct kiln_cost_model;
/* NULL on OOM (error recorded). Parameters: the defaults. */
struct kiln_cost_model *kiln_cm_new(kiln_ctx *ctx, uint64_t seed);
void                    kiln_cm_free(struct kiln_cost_model *m);
/* Takes effect at the next training; KILN_ERR_INVALID for out-of-range values. */
enum kiln_status kiln_cm_set_params(struct kiln_cost_model *m, const struct kiln_cm_params *p);
/* Retrains from scratch on n programs (feats[i], throughput y[i] in [0, 1]). n == 0, a
 * non-finite or negative y, or no feature row at all are KILN_ERR_INVALID; XGBoost's errors
 * are KILN_ERR_BACKEND. On failure the previous model stays. Deterministic for a given seed,
 * data and nthread. */
enum kiln_status kiln_cm_train(struct kiln_cost_model *m, const struct kiln_feat *feats,
                               const double *y, uint32_t n);
/* Predicted scores (higher = faster); before any training: all 0; a program without rows
 * scores 0. n == 0 does nothing. */
enum kiln_status kiln_cm_predict(struct kiln_cost_model *m, const struct kiln_feat *feats,
                                 uint32_t n, double *score);
bool             kiln_cm_trained(const struct kiln_cost_model *m);
/* Boosting rounds the last training kept (after early stopping); 0 before training. */
uint32_t kiln_cm_rounds(const struct kiln_cost_model *m);
/* Model files: a header line "kiln-cost-model 1 feat_dim=N objective=O rounds=R bytes=B
 * hash=H\n", then the trees prediction uses in XGBoost's UBJSON (B bytes, kiln_hash_bytes H).
 * kiln_cm_save appends a trained model's file to *out (KILN_ERR_INVALID when untrained).
 * kiln_cm_load replaces m's model with the one in data (`what` names it in errors: a path, "the
 * shipped cost model"); a file that is not a model, is damaged, or was trained on another feature
 * count (KILN_FEAT_DIM) is KILN_ERR_INVALID and leaves m as it was. Files larger than
 * KILN_CM_MAX_BYTES are refused. */
#define KILN_CM_MAX_BYTES (64 << 20)
enum kiln_status kiln_cm_save(const struct kiln_cost_model *m, struct kiln_buf *out);
enum kiln_status kiln_cm_load(struct kiln_cost_model *m, const void *data, size_t len,
                              const char *what);
enum kiln_status kiln_cm_load_file(struct kiln_cost_model *m, const char *path);
/* The model compiled into the library (tuner/model/cpu.kcm at build time); NULL, *len = 0 when
 * the build had none. */
const unsigned char *kiln_cm_shipped(size_t *len);

/* ---- evolutionary search by the cost model (tuner/search.c) ----
 * Shared by the tuner's rounds (which measure what it finds) and by prediction (tuner/predict.c,
 * which measures nothing). The space of one task graph: */
struct kiln_space {
    kiln_ctx                 *ctx;
    const struct kiln_graph  *g;
    const struct kiln_hw     *hw;
    const struct kiln_sketch *sk;
    uint32_t                  nsk;
};
struct kiln_evo_cand {
    struct kiln_prog p;
    uint64_t         h;     /* kiln_space_hash: a program's identity is the schedule it makes */
    double           score; /* the cost model's; -inf: it does not lower */
};
struct kiln_evo_opts {
    uint32_t                population;    /* 0 = 256 */
    uint32_t                generations;   /* scored generations after the first (0: sampling) */
    const struct kiln_prog *init;          /* the first ninit programs of the initial population */
    uint32_t                ninit;         /* (at most population); the rest random samples */
    bool (*exclude)(void *ud, uint64_t h); /* true: not offered (measured already); NULL: none */
    void *ud;
    bool  in_prior; /* every candidate moved by kiln_prog_in_prior (prediction) */
};
/* Ansor's evolutionary search: the population is scored by cm (every candidate lowered and its
 * features extracted inside a scratch scope); for `generations` generations parents are drawn
 * in proportion to their score and mutated (p 0.85) or crossed over with a parent of the same
 * sketch. best[0..cap) receives the best distinct candidates seen in any generation (by
 * schedule), best first (equal scores by hash), *n of them. Deterministic for a given rng
 * state and model. */
enum kiln_status kiln_evolve(const struct kiln_space *S, struct kiln_cost_model *cm,
                             struct kiln_rng *rng, const struct kiln_evo_opts *o,
                             struct kiln_evo_cand *best, uint32_t cap, uint32_t *n);
/* Features of program p (rows malloc'ed); false, with *out empty, when it does not lower. */
bool kiln_space_features(const struct kiln_space *S, const struct kiln_prog *p,
                         struct kiln_feat *out);
/* The hash of the schedule JSON p makes (kiln_sched_hash, tuner/search.h). */
uint64_t kiln_space_hash(const struct kiln_space *S, const struct kiln_prog *p);

/* ---- prediction (tuner/predict.c) ----
 * A task's schedule chosen by the cost model alone: nothing is measured. */
struct kiln_predict_opts {
    uint32_t population;  /* 0 = KILN_PREDICT_POPULATION */
    uint32_t generations; /* 0 = KILN_PREDICT_GENERATIONS */
    uint64_t seed;
};
#define KILN_PREDICT_POPULATION  128
#define KILN_PREDICT_GENERATIONS 1
/* Builds the sketches of task graph g, evolves programs (kiln_evolve) ranked by the trained
 * model cm, and appends the best-scored program's schedule to *out (names of g). *found = false,
 * *out untouched, when no candidate lowered. Deterministic for a given seed, g and model.
 * *ncand (may be NULL) receives the number of candidates scored. */
enum kiln_status kiln_predict_task(kiln_ctx *ctx, const struct kiln_graph *g,
                                   const struct kiln_hw *hw, struct kiln_cost_model *cm,
                                   const struct kiln_predict_opts *o, struct kiln_schedule *out,
                                   bool *found, uint32_t *ncand);

/* ---- training and evaluating cost models on records (tuner/costmodel.c) ----
 * Both read the workload graphs of records databases (schema 2), lower every record's schedule
 * on its graph and featurise it for the record's target (struct kiln_hw from the target string,
 * not this machine). Databases are opened read-only; a workload in several databases is one
 * workload with all their records. */
struct kiln_costmodel_opts {
    const char *target;   /* only records of this target (canonicalised); NULL: every CPU one */
    uint32_t    holdout;  /* percent of workloads held out (by a hash of the key); 0: none */
    bool        held_out; /* take the held-out workloads (eval) instead of the others (train) */
    uint64_t    seed;     /* the model's (train); default 1 */
};
void kiln_costmodel_opts_default(struct kiln_costmodel_opts *o);
/* Whether workload key is among the pct% held out (pct 0: never). */
bool kiln_costmodel_held_out(const char *workload, uint32_t pct);

struct kiln_costmodel_train_report {
    uint32_t workloads, programs, rows;
    uint32_t errors;  /* failed records among the programs (labelled 0) */
    uint32_t skipped; /* records whose schedule does not lower on its graph */
    uint32_t rounds;  /* boosting rounds kept */
    double   loss;    /* training loss: RMSE of the summed score against y, weighted by y */
};
/* Trains a pack-sum model on every record of every workload with a graph and a successful
 * record: y = best time of the workload / time, 0 for a failed record. *out is the model (free
 * with kiln_cm_free). Errors name the file: one that is not a records database, one without
 * graphs, nothing to train on. */
enum kiln_status kiln_costmodel_train(kiln_ctx *ctx, const char *const *dbs, uint32_t ndb,
                                      const struct kiln_costmodel_opts   *o,
                                      struct kiln_cost_model            **out,
                                      struct kiln_costmodel_train_report *rep);

struct kiln_costmodel_eval_one {
    char     workload[17], kind[17];
    uint32_t programs;      /* valid schedules (mean time of each) */
    double   pair_acc;      /* pairs of different times the model orders right (ties: 1/2) */
    double   regret;        /* time of the model's top pick / best time (1 = it found the best) */
    double   regret5;       /* best time of the model's top 5 / best time */
    double   random_regret; /* a random pick's expected time / best time */
};
struct kiln_costmodel_eval_report {
    uint32_t                        workloads, programs, skipped;
    double                          pair_acc;                       /* mean over workloads */
    double                          regret, regret5, random_regret; /* geometric means */
    struct kiln_costmodel_eval_one *w;                              /* per workload (ctx-owned) */
};
/* How well m ranks the measured programs of each workload (at least two valid schedules) of
 * the databases. */
enum kiln_status kiln_costmodel_eval(kiln_ctx *ctx, struct kiln_cost_model *m,
                                     const char *const *dbs, uint32_t ndb,
                                     const struct kiln_costmodel_opts  *o,
                                     struct kiln_costmodel_eval_report *rep);

/* Writes m (kiln_cm_save) to path through a temporary file renamed into place; errors name the
 * file. */
enum kiln_status kiln_costmodel_save_file(kiln_ctx *ctx, const struct kiln_cost_model *m,
                                          const char *path);
/* A new model loaded from path (kiln_cm_load_file: a file that is not a model, of another
 * feature count or damaged is KILN_ERR_INVALID naming it); free with kiln_cm_free. */
enum kiln_status kiln_costmodel_load_file(kiln_ctx *ctx, const char *path,
                                          struct kiln_cost_model **out);

/* ---- measurement (tuner/measure.c) ----
 * Builds and runs candidates in worker processes so a candidate that crashes, hangs or computes
 * a wrong answer is recorded as an error and never harms the tuner. Build workers are forked
 * (lower + compile to a shared object in a private temporary directory); every run is a fresh
 * kiln_measure_runner process (fork + exec, tuner/runner/), one at a time. tuner/README.md
 * describes the process model, the timeouts and the correctness check. */
enum kiln_measure_error {
    KILN_MEASURE_OK,
    KILN_MEASURE_LOWER,   /* the schedule did not lower (message says why) */
    KILN_MEASURE_COMPILE, /* code generation failed */
    KILN_MEASURE_CRASH,   /* the worker died by a signal (or exited without a result) */
    KILN_MEASURE_TIMEOUT, /* build or run exceeded its time limit */
    KILN_MEASURE_WRONG,   /* outputs differ from the reference, or were not all written */
    KILN_MEASURE_RUNTIME, /* the kernel returned an error, or the object did not load */
    KILN_MEASURE_COUNT
};
extern const char *const kiln_measure_error_name[KILN_MEASURE_COUNT]; /* "ok", "lower", ... */

struct kiln_measure_opts {
    uint32_t repeat;        /* timed repeats (median taken), default 5 */
    double   min_repeat_ms; /* each repeat runs the kernel enough times to last this, default 20 */
    uint32_t warmup;        /* untimed calls first, default 1 */
    bool     flush_cache;   /* write a large buffer before every call (only the call is timed) */
    bool     flush_weights; /* evict weights and prepared buffers before every call (clflush;
                             * inputs stay warm); flush_cache wins when both are set */
    double   build_timeout_s, run_timeout_s; /* defaults 30, 10; run = one candidate's whole run */
    int      threads;                        /* threads of parallel loops; 0 = target cores */
    uint32_t build_workers; /* processes compiling in parallel; 0 = number of cores */
    bool     overlap;       /* keep building while a candidate is timed: faster, but the builds
                             * share the cores with the timing; default true only above 2 cores */
    double ref_max_flops;   /* reference interpreter up to this many flops (default 1e8),
                             * else the default schedule compiled is the reference */
    const char *runner;     /* kiln_measure_runner executable; NULL = the one built with kiln */
    const char *tmp_dir;    /* where the private temporary directory goes; NULL = "/tmp" */
    /* For tests: called in the build worker after each build (of a candidate, or of the default
     * schedule as the reference: co->target says for which target) to so_path with the options
     * co; a failure makes it a COMPILE error. (tests/cuda_emu.h builds an emulation of a module
     * of the cuda target next to it this way, to run it without a GPU.) NULL: none. */
    enum kiln_status (*build_hook)(void *ud, kiln_ctx *ctx, const struct kiln_graph *g,
                                   const struct kiln_compile_options *co, const char *so_path);
    void *build_hook_ud;

    /* Measurement on workers (tuner/queue.h): redis://[[USER]:PASSWORD@]HOST:PORT/NAME sends
     * every candidate as a job to `kiln worker`s; NULL = measured here. */
    const char   *queue;
    const char   *queue_key;       /* jobs stream; NULL = from the target and this machine's CPU */
    double        queue_timeout_s; /* fail when no worker answers for this long: default 600 */
    volatile int *queue_stop;      /* nonzero: stop waiting for workers (an error); may be NULL */
};
void kiln_measure_opts_default(struct kiln_measure_opts *o);

struct kiln_measure_input {
    const char *schedule_json; /* for the task graph of the batch (NULL = default schedule) */
    bool        check;         /* compare the outputs with the reference */
    const char *so_path;       /* NULL; else a shared object built elsewhere for this graph, run
                                * instead of building schedule_json (tests plant faulty ones) */
};

struct kiln_measure_result {
    uint8_t  error;    /* enum kiln_measure_error */
    double   time_s;   /* median of the repeats; 0 on error */
    double   stddev_s; /* of the repeats */
    uint32_t nrepeat;
    double   times[16]; /* the repeats (first 16) */
    double   build_s;   /* wall time spent building */
    double   max_err;   /* checked: max |out - ref| / max |ref| (0 when not checked) */
    char     msg[512];  /* error message */
};

/* A measurer for one task graph: holds the reference outputs (the reference interpreter's, or
 * for graphs too large for it the default schedule's, computed once) and the inputs. */
struct kiln_measurer;
enum kiln_status kiln_measurer_new(kiln_ctx *ctx, const struct kiln_graph *g,
                                   const struct kiln_target *t, const struct kiln_measure_opts *o,
                                   uint64_t seed, struct kiln_measurer **out);
void             kiln_measurer_free(struct kiln_measurer *m);
/* Changes the run timeout of later measurements (the tuner tightens it to a multiple of the
 * best time found, so hopeless candidates cost little). */
void kiln_measurer_set_run_timeout(struct kiln_measurer *m, double seconds);
/* A candidate whose first (checked) call and a second call both take longer than `seconds`
 * cannot become the best: it gets one timed repeat and no warm-up, and its time is recorded as
 * usual. 0: off. */
void kiln_measurer_set_hopeless(struct kiln_measurer *m, double seconds);
/* The CUDA device candidates of the cuda target are measured on (device 0), as a runner
 * process finds it: kiln_measure_cuda_device starts one (`--cuda-probe`, so the calling process
 * creates no CUDA context) and fails with KILN_ERR_UNSUPPORTED "no CUDA driver (...)" or "no
 * CUDA device (...)" when there is none, KILN_ERR_BACKEND for other failures. o: the runner
 * (o->runner; NULL o: the default one). */
struct kiln_measure_device {
    char arch[16];  /* "sm_90" */
    char name[256]; /* "NVIDIA H100 80GB HBM3" */
};
enum kiln_status kiln_measure_cuda_device(kiln_ctx *ctx, const struct kiln_measure_opts *o,
                                          struct kiln_measure_device *dev);
/* "interpreter", "default schedule", or "default schedule (host CPU)" (the cuda target's):
 * where the reference outputs came from. */
const char *kiln_measurer_reference(const struct kiln_measurer *m);
/* Measures n candidates; results[i] for in[i]. Fails only on resource errors of the tuner
 * itself (fork, temp files); every candidate's failure is in its result. */
enum kiln_status kiln_measure(struct kiln_measurer *m, const struct kiln_measure_input *in,
                              uint32_t n, struct kiln_measure_result *results);

/* ---- records database (tuner/db.c) ----
 * SQLite: one row per measured program, committed as soon as it is measured (WAL journal,
 * synchronous NORMAL: a killed tuner loses at most the record in flight). The schema and the
 * JSON-lines format are described in tuner/README.md. */
#define KILN_DB_SCHEMA_VERSION 2 /* 2: the graphs table */

struct kiln_record {
    int64_t     id;       /* row id (read only; ignored on add) */
    const char *workload; /* task key */
    const char *target;   /* canonical target string */
    const char *schedule; /* schedule JSON (passes/sched.c) */
    const char *prog;     /* program JSON (kiln_prog_to_json), may be NULL */
    double      time_s;   /* 0 on error */
    double      stddev_s;
    uint8_t     error;     /* enum kiln_measure_error */
    const char *error_msg; /* may be NULL */
    const char *version;   /* kiln version; NULL on add = KILN_VERSION */
    const char *machine;   /* machine description; NULL on add = kiln_machine_desc() */
    int64_t     timestamp; /* unix seconds; 0 on add = now */
    double      flops;     /* of the task */
    const char *strategy;  /* "ansor", "droplet", "default", ...; NULL on add = "" */
};
struct kiln_db;
/* Opens (creating if missing) a records database. Errors: a file that is not SQLite or is an
 * SQLite database of something else (KILN_ERR_INVALID, the file is left untouched), a schema
 * newer than KILN_DB_SCHEMA_VERSION (KILN_ERR_UNSUPPORTED), SQLite's own (KILN_ERR_BACKEND).
 * Several processes may create the same new file at once. Every error names the file. */
enum kiln_status kiln_db_open(kiln_ctx *ctx, const char *path, struct kiln_db **out);
/* Opens an existing database for reading only (a read-only file or directory is fine; nothing
 * is created or written). An SQLite file without tables reads as empty. */
enum kiln_status kiln_db_open_readonly(kiln_ctx *ctx, const char *path, struct kiln_db **out);
void             kiln_db_close(struct kiln_db *db); /* NULL is fine */
/* Appends r (committed before returning); workload, target and schedule are required. */
enum kiln_status kiln_db_add(struct kiln_db *db, const struct kiln_record *r);
/* Reading checks every column of every row it reads: a NULL where the schema has NOT NULL, a
 * blob or number for a text, a text with a NUL byte, a negative or non-finite number is an
 * error (KILN_ERR_INVALID) naming the file, the row id and the column. */
/* The valid schedules of workload/target, best first: a schedule measured more than once (the
 * tuner re-measures each new best: strategy "confirm") counts with the mean of its times, in
 * r->time_s, and is out if any of its measurements failed; schedules a final selection
 * measured (strategy "final") rank before all others, and before them the schedules of final
 * selections' verdicts (strategy "final-pick": not a measurement), the newest first, with the
 * verdict's time in r->time_s; r is the schedule's first record. A
 * damaged row comes with bad set (why; r->id is its row) instead of failing the walk. fn
 * returns false to stop; strings are valid during the call only. */
enum kiln_status
kiln_db_each_ranked(struct kiln_db *db, const char *workload, const char *target,
                    bool (*fn)(void *ud, const struct kiln_record *r, const char *bad), void *ud);
/* The first of kiln_db_each_ranked; false if none (or the row is damaged: ctx error set).
 * Strings ctx-owned. */
bool kiln_db_best(struct kiln_db *db, const char *workload, const char *target,
                  struct kiln_record *out);
/* Every record of workload/target in insertion order (errors included; NULL = any workload /
 * any target); fn returns false to stop. Strings are valid during the call only. */
enum kiln_status kiln_db_each(struct kiln_db *db, const char *workload, const char *target,
                              bool (*fn)(void *ud, const struct kiln_record *r), void *ud);
/* One workload/target pair: its records, errors, and the flops of its first record. */
struct kiln_db_task {
    const char *workload, *target;
    uint32_t    records, errors;
    double      flops;
};
/* Every workload/target pair, in the order of their first records (one query). */
enum kiln_status kiln_db_each_task(struct kiln_db *db,
                                   bool (*fn)(void *ud, const struct kiln_db_task *t), void *ud);
/* workload == NULL / target == NULL: all. */
uint32_t kiln_db_count(struct kiln_db *db, const char *workload, const char *target);
/* Workload graphs (schema 2): each workload's task graph as .kg text (kiln_graph_print), keyed
 * by workload and target, with its shape-free kind (kiln_task_kind), as 16 hex digits. */
struct kiln_db_graph {
    const char *workload, *target, *kind, *graph;
};
/* Stores task t's graph for target unless one is stored; a graph whose text does not parse back
 * to the task's workload key and kind is not stored (nothing could use it). */
enum kiln_status kiln_db_add_task_graph(struct kiln_db *db, const struct kiln_task *t,
                                        const char *target);
/* Stores g unless a graph of its workload/target is stored. It is checked as an import is: keys
 * of 16 hex digits, a target, text that parses to a graph of that workload key and kind
 * (KILN_ERR_INVALID naming the file otherwise). */
enum kiln_status kiln_db_add_graph(struct kiln_db *db, const struct kiln_db_graph *g);
/* False for a version 1 file opened read-only (it has no graphs table) and an empty one. */
bool kiln_db_has_graphs(const struct kiln_db *db);
/* Every stored graph of target (NULL = any), in the order they were stored; a damaged row is
 * KILN_ERR_INVALID naming the file. Strings are valid during the call only. */
enum kiln_status kiln_db_each_graph(struct kiln_db *db, const char *target,
                                    bool (*fn)(void *ud, const struct kiln_db_graph *g), void *ud);
/* One JSON object per line: the graph lines, then the records in insertion order (format:
 * tuner/README.md). */
enum kiln_status kiln_db_export_jsonl(struct kiln_db *db, FILE *out);
/* Imports the lines of text (read from file, for messages) in one transaction, in time linear in
 * the lines; graph lines are checked as kiln_db_add_graph checks them; lines already present (same
 * workload, target, schedule, time, timestamp) are skipped. Every line is checked (strict JSON: no
 * trailing text, duplicate or unknown key, NUL or \u0000; the fields' types; a task key; a known
 * error kind; finite non-negative numbers, a positive time for a record without error; a schedule
 * that parses). A bad line is not imported, bad(ud, line, why) is called for it (bad may be NULL),
 * and the good lines are imported nonetheless: the call then returns KILN_ERR_INVALID naming the
 * first bad line (the error's location is file:line). *added (may be NULL) receives the number of
 * records added. A database error rolls everything back. */
enum kiln_status kiln_db_import_jsonl(struct kiln_db *db, const char *file, const char *text,
                                      size_t len,
                                      void (*bad)(void *ud, uint32_t line, const char *why),
                                      void *ud, uint32_t *added);
/* The machine description stored with records ("x86_64 Intel(R) Xeon(R) ... 2 cores":
 * uname's machine, /proc/cpuinfo's model name, online cores), ctx-owned. */
const char *kiln_machine_desc(kiln_ctx *ctx);

/* ---- tuning (tuner/search.c: evolutionary and Droplet search; tuner/tune.c: the driver and
 * the task scheduler) ---- */
enum kiln_strategy {
    KILN_STRATEGY_ANSOR_DROPLET, /* evolutionary search, then Droplet from the best (default) */
    KILN_STRATEGY_ANSOR,         /* evolutionary search only */
    KILN_STRATEGY_DROPLET,       /* Droplet from the best of a few random programs */
};
extern const char *const kiln_strategy_name[3]; /* "ansor+droplet", "ansor", "droplet" */

/* struct kiln_tune_task_status and struct kiln_tune_progress: include/kiln.h */

struct kiln_tune_opts {
    const char *target;     /* NULL = host */
    const char *db_path;    /* records database (created if absent) */
    uint32_t    trials;     /* measured programs over all tasks, records in the
                             * database included (a resumed run continues) */
    uint32_t droplet_after; /* programs of a task measured before Droplet: 300 */
    /* Droplet moves to a neighbour only if it is at least this share faster than the centre
     * (and significantly so): 0.01. 1 = never moves, so each Droplet phase measures one
     * neighbourhood and converges (tests use it to make the phases independent of timing). */
    double   droplet_min_gain;
    uint32_t confirm_after; /* re-measure new bests from this trial on: 64 */
    uint32_t final_top;     /* final selection: the task's fastest programs, 8 */
    uint32_t final_rounds;  /* each re-measured this many times, interleaved, with a reference
                             * at both ends of each round: 4 (tuner/README.md) */
    uint32_t                 batch;       /* programs measured per round: 16 */
    uint32_t                 population;  /* evolutionary population: 256 */
    uint32_t                 generations; /* per round: 4 */
    double                   eps_random;  /* share of random programs per batch: 0.05 */
    uint64_t                 seed;
    enum kiln_strategy       strategy;
    struct kiln_measure_opts measure;
    FILE                    *log;           /* a JSON line per measurement, or NULL */
    const char              *curve_dir;     /* per-task and whole-model tuning curves, or NULL */
    const char              *cache_path;    /* records cache (kiln_tune_params), or NULL */
    double                   time_budget_s; /* > 0: no round starts after this many seconds */
    void (*warning)(void *ud, const char *msg); /* called with progress_ud; NULL = stderr */
    void (*progress)(void *ud, const struct kiln_tune_progress *p);
    void         *progress_ud;
    volatile int *stop; /* nonzero: stop after the measurement in flight */
    /* For tests: shared objects measured, as if the search had produced them, right after the
     * default schedule of the first task (they must implement that task's graph). */
    const char *const *plant;
    uint32_t           nplant;
    /* For tests: called with final_hook_ud on every measurement of a final selection, before
     * it is recorded, with the round, the position in the round (0 and the last one are the
     * reference), the schedule and its result, which it may change: tests plant load spikes
     * and disturbed rounds with it, so what they check does not depend on the machine's
     * timing. NULL: none. */
    void (*final_hook)(void *ud, uint32_t round, uint32_t pos, bool reference,
                       const char *schedule_json, struct kiln_measure_result *r);
    void *final_hook_ud;
};
void kiln_tune_opts_default(struct kiln_tune_opts *o);

/* Tunes every task of g, recording each measurement in the database as soon as it is made. */
enum kiln_status kiln_tune(kiln_ctx *ctx, const struct kiln_graph *g,
                           const struct kiln_tune_opts *o);
/* The whole-graph schedule made of the records of every task of g for target: each task takes
 * its best record (kiln_db_each_ranked order) that applies (parses and lowers) at every
 * occurrence, trying at most 100; when none does, the best that applies at some occurrences is
 * used there; tasks without a record keep the default schedule. *ntuned = tasks whose record
 * applied everywhere. *info (may be NULL; ctx-owned, *ntasks entries, in task order) says which
 * record each task got and why better ones were skipped. */
enum kiln_status kiln_tuned_schedule_tasks(kiln_ctx *ctx, const struct kiln_graph *g,
                                           struct kiln_db *db, const char *target,
                                           struct kiln_schedule *out, uint32_t *ntuned,
                                           struct kiln_tuned_task **info, uint32_t *ntasks);
/* One task of kiln_tuned_schedule_tasks: *out = base plus the steps of t's best applicable
 * record of db at its occurrences (base itself when none applies; out may be base). *info says
 * which record (info->record 0: none). */
enum kiln_status kiln_tuned_task_apply(kiln_ctx *ctx, const struct kiln_graph *g,
                                       struct kiln_db *db, const char *target,
                                       const struct kiln_task *t, const struct kiln_schedule *base,
                                       struct kiln_schedule *out, struct kiln_tuned_task *info);
enum kiln_status kiln_tuned_schedule(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_db *db,
                                     const char *target, struct kiln_schedule *out,
                                     uint32_t *ntuned);

/* The whole-graph schedule of kiln_graph_schedule (tuner/predict.c) from open databases and a
 * loaded model: each task takes the fastest record applying at every occurrence across db[0..ndb)
 * (the first database's on equal times), else the first record applying at some occurrences
 * (the others keep the default schedule); a task with no record is predicted with cm (NULL:
 * none is) when the prediction lowers at every occurrence, else keeps the serial default. *rep
 * counts them (its model and warning untouched). *info (may be NULL, ctx-owned, rep->ntasks
 * entries) says which record each task got. The tasks no database has a record of are predicted
 * on `threads` threads at once (0: OMP_NUM_THREADS when set, else the online CPUs), each in a
 * context of its own: the result does not depend on the count. */
enum kiln_status kiln_schedule_graph(kiln_ctx *ctx, const struct kiln_graph *g, const char *target,
                                     struct kiln_db *const *db, uint32_t ndb,
                                     struct kiln_cost_model *cm, uint64_t seed, uint32_t threads,
                                     struct kiln_schedule *out, struct kiln_schedule_report *rep,
                                     struct kiln_tuned_task **info);

#endif /* KILN_TUNER_H */
