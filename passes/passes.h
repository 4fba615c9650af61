/* passes/passes.h -- internal: schedules (steps as data), lowering of a graph + schedule to the
 * loop-nest IR, and the passes over loop nests. Every pass entry point states what it
 * requires, provides and invalidates. passes/ never emits target code. */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "../ir/ir.h"

/* ---- arithmetic simplification (passes/simplify.c, simplify_bounds.c, simplify_stmt.c) ---- */

/* Known inclusive range of a variable's values. INT64_MIN / INT64_MAX mean unbounded on that
 * side; a range with min > max is ignored. When a variable is listed twice the last entry wins
 * (so an inner, narrower range can be pushed on top of an outer one). */
struct kiln_var_range {
    kiln_expr var; /* a named variable (axis/reduce variables are accepted too) */
    int64_t   min, max;
};

/* Integer interval of e (an integer or bool expression) given the ranges (variables not listed
 * are unbounded); e is simplified first, so correlated terms cancel. *lo / *hi receive the best
 * bounds known, INT64_MIN / INT64_MAX for an unbounded side. Returns true only when both sides
 * are finite. */
bool kiln_expr_bounds(kiln_ctx *ctx, kiln_expr e, const struct kiln_var_range *r, uint32_t nr,
                      int64_t *lo, int64_t *hi);

/* Simplifies e using the ranges: affine terms collected and ordered canonically, constants
 * folded, floordiv/floormod by positive constants resolved where the ranges allow
 * ((a*c + b) // c -> a when 0 <= b < c, x % c -> x when 0 <= x < c, ...), comparisons decided
 * by bounds, min/max decided by bounds, select/and/or with decided conditions removed.
 * Idempotent: simplify(simplify(e)) == simplify(e) (same id); returns e itself when nothing
 * changes. */
kiln_expr kiln_simplify_expr(kiln_ctx *ctx, kiln_expr e, const struct kiln_var_range *r,
                             uint32_t nr);

/* A simplifier session: kiln_simplify_expr / kiln_expr_bounds for many expressions under one
 * set of ranges, sharing one memo (for passes that simplify a whole function or analyse many
 * conditions). kiln_simplifier_ranges references r (not copied) until the next call and
 * forgets what was simplified under the previous ranges. NULL / nil / false after errors. */
struct kiln_simplifier;
struct kiln_simplifier *kiln_simplifier_new(kiln_ctx *ctx);
void                    kiln_simplifier_free(struct kiln_simplifier *s);
void kiln_simplifier_ranges(struct kiln_simplifier *s, const struct kiln_var_range *r, uint32_t nr);
kiln_expr kiln_simplifier_expr(struct kiln_simplifier *s, kiln_expr e);
bool      kiln_simplifier_bounds(struct kiln_simplifier *s, kiln_expr e, int64_t *lo, int64_t *hi);

/* requires: a verified function (flat or not)
 * provides: every expression simplified under the ranges of its enclosing loops (a loop var v
 *           of `for v in [min, min+extent)` with constant bounds ranges over [min, min+ext-1];
 *           symbolic bounds are bounded through kiln_expr_bounds) and of the `v < K` / `K < v`
 *           / `v == K` conditions of enclosing ifs; if statements with decided conditions
 *           removed; loops of extent 1 replaced by their body with the variable substituted
 *           (except GPU block/thread loops, which are launch dimensions); lets of constants or
 *           variables substituted; loops of extent <= 0, and loops, lets, allocations and ifs
 *           with empty bodies, removed; nested sequences spliced
 * invalidates: nothing (statements are rewritten in place; the body may be replaced) */
enum kiln_status kiln_pass_simplify(struct kiln_func *f);

/* The statement walker of kiln_pass_simplify, for passes that rewrite part of a function
 * (passes/partition.c): simplifies s under the ranges r of its enclosing loops. Returns the
 * replacement (s itself rewritten in place, one of its descendants, or an empty SEQ), or NULL
 * after recording an error. */
struct kiln_stmt *kiln_simplify_stmt(kiln_ctx *ctx, struct kiln_stmt *s,
                                     const struct kiln_var_range *r, uint32_t nr);
/* Whether s is what the simplifier leaves of a removed statement (an empty SEQ). */
bool kiln_stmt_empty(const struct kiln_stmt *s);

/* requires: a verified non-flat function
 * provides: every load and store of a buffer with ndim != 1 rewritten to one flat row-major
 *           index; verify(f, flat=true) holds
 * invalidates: multi-dimensional index information */
enum kiln_status kiln_pass_flatten(struct kiln_func *f);

/* requires: a verified function
 * provides: loops whose body's conditions (if statements and select conditions that compare
 *           affine functions of the loop variable with loop-invariant bounds) are decided on a
 *           middle sub-range are split into up to three loops, so the middle (hot) loop has no
 *           such condition; vector loops are not split (their lanes stay together) nor GPU
 *           block/thread loops (launch dimensions), but their enclosing loops are
 * invalidates: nothing */
enum kiln_status kiln_pass_partition(struct kiln_func *f);

/* ---- schedules (passes/sched.c) ----
 * A schedule is data: a list of steps naming stages (by tensor name) and iterators (by name).
 * Original iterators carry the op's display names (spatial first, then reduction); a split of
 * `i` into n+1 parts makes `i.0` (outermost) .. `i.n`; a fuse of `a` and `b` makes `a@b`.
 * New stages: cache_write(C) adds `C.local`, cache_read(T) adds `T.cache`, rfactor(C) adds
 * `C.rf`, pack(T) adds `T.pack`. Steps serialise to JSON (docs/schedule.md). */
enum kiln_step_kind {
    KILN_STEP_SPLIT,       /* stage, iter, factors: inner lengths, outer to inner */
    KILN_STEP_TILE,        /* stage, iters[n], factors[n]: split each, outers then inners */
    KILN_STEP_REORDER,     /* stage, iters: new order of (some) leaf iterators */
    KILN_STEP_FUSE,        /* stage, iters: consecutive leaf iterators, outer first */
    KILN_STEP_PARALLEL,    /* stage, iter */
    KILN_STEP_VECTORIZE,   /* stage, iter */
    KILN_STEP_UNROLL,      /* stage, iter */
    KILN_STEP_AUTO_UNROLL, /* stage, value: unroll inner loops while their trip product <= value */
    KILN_STEP_COMPUTE_AT,  /* stage, target, iter (of the target) */
    KILN_STEP_COMPUTE_INLINE, /* stage */
    KILN_STEP_COMPUTE_ROOT,   /* stage */
    KILN_STEP_CACHE_WRITE,    /* stage */
    KILN_STEP_CACHE_READ,     /* stage = tensor read, iters = the reading stages */
    KILN_STEP_RFACTOR,        /* stage, iter: a leaf reduction iterator */
    KILN_STEP_PACK,           /* stage = tensor, value = dim, factors[0] = block, n == 2:
                               * factors[1] = position of the outer part (default: dim) */
    KILN_STEP_PAD,            /* stage = tensor read, iters = the reading stages */
    KILN_STEP_BIND,           /* stage, iter, value = enum kiln_bind */
    KILN_STEP_COUNT
};

/* What a step's field names (struct kiln_step_desc). */
enum kiln_step_ref {
    KILN_REF_NONE,        /* unused */
    KILN_REF_STAGE,       /* a stage ("C", or one a step added: "C.local") */
    KILN_REF_TENSOR,      /* a tensor, stage or argument: the one cache_read, pack, pad copy */
    KILN_REF_LOOP,        /* an iterator of the step's stage */
    KILN_REF_TARGET_LOOP, /* an iterator of the target stage (compute_at) */
};

/* The JSON fields of a step besides "op" and "stage" (struct kiln_step_desc). */
enum kiln_step_field {
    KILN_STEPF_ITER = 1,     /* "iter" */
    KILN_STEPF_ITERS = 2,    /* iters, under the descriptor's iters_key */
    KILN_STEPF_FACTORS = 4,  /* "factors" */
    KILN_STEPF_TARGET = 8,   /* "target" */
    KILN_STEPF_VALUE = 16,   /* value, under the descriptor's value_key */
    KILN_STEPF_FACTOR1 = 32, /* "factor" in factors[0], optional "outer" in factors[1] (pack) */
    KILN_STEPF_THREAD = 64,  /* "thread" (bind): a kiln_bind_name, kept in value */
    KILN_STEPF_SCOPE = 128,  /* optional "scope" (cache_read): "local" or "shared", in value */
};

/* Everything about a step kind but its effect (passes/state.c): asked of this table, which
 * passes/sched.c owns, rather than switched over. */
struct kiln_step_desc {
    const char *name;                       /* "split": its "op" in JSON and its name in messages */
    unsigned    fields;                     /* enum kiln_step_field */
    const char *iters_key;                  /* JSON key of iters: "iters", "order" or "readers" */
    const char *value_key;                  /* JSON key of value: "max_step" or "dim" */
    uint8_t     stage, iter, iters, target; /* enum kiln_step_ref: what each field names */
    const char *creates; /* suffix of the stage it adds ("local": "C.local"), or NULL */
    /* form checked when applied (kiln_step_check): n in [nmin, nmax] (nmax 0: unchecked),
     * counting nwhat; value in [vmin, vmax] (vmin == vmax: unchecked) */
    uint8_t     nmin, nmax;
    const char *nwhat;
    int64_t     vmin, vmax;
};
extern const struct kiln_step_desc kiln_step_desc[KILN_STEP_COUNT];

/* The GPU index a bind step gives a loop ("thread" in JSON): blockIdx.x/y/z make a
 * KILN_LOOP_GPU_BLOCK loop, threadIdx.x/y/z a KILN_LOOP_GPU_THREAD loop, with axis tag % 3. */
enum kiln_bind {
    KILN_BIND_BLOCK_X,
    KILN_BIND_BLOCK_Y,
    KILN_BIND_BLOCK_Z,
    KILN_BIND_THREAD_X,
    KILN_BIND_THREAD_Y,
    KILN_BIND_THREAD_Z,
    KILN_BIND_COUNT
};
extern const char *const kiln_bind_name[KILN_BIND_COUNT]; /* "blockIdx.x" .. "threadIdx.z" */

/* Where a cache_read copy lives ("scope" in JSON, kept in the step's value): "local" (the
 * default: a temporary of the loop nest) or "shared" (GPU shared memory, one copy per block:
 * compute it at a loop inside the block loops; its loops bound to threads fill it together). */
enum kiln_cache_scope {
    KILN_CACHE_LOCAL,
    KILN_CACHE_SHARED,
};

#define KILN_STEP_MAXN 8

struct kiln_step {
    uint8_t  kind;                  /* enum kiln_step_kind */
    uint8_t  n;                     /* entries used in iters / factors */
    uint32_t stage;                 /* symbol */
    uint32_t iter;                  /* symbol */
    uint32_t target;                /* symbol (compute_at) */
    uint32_t iters[KILN_STEP_MAXN]; /* symbols */
    int64_t  factors[KILN_STEP_MAXN];
    int64_t  value;
};

struct kiln_schedule {
    struct kiln_step *step;
    uint32_t          nstep, capstep;
};

enum kiln_status kiln_sched_push(kiln_ctx *ctx, struct kiln_schedule *s, struct kiln_step st);
/* The form of a step its descriptor checks when it is applied (its count of iterators or
 * factors, its value's range): false with the reason in why when it is wrong. */
bool kiln_step_check(const struct kiln_step *st, char *why, size_t size);
/* JSON: {"steps": [{"op": "split", "stage": "C", "iter": "i", "factors": [8, 4]}, ...]}.
 * Strict (kiln_json_parse_strict; no top-level field but "steps"): errors in the text name
 * its line, column and byte; errors in a step name the step index and the bad field. */
enum kiln_status kiln_sched_from_json(kiln_ctx *ctx, const char *text, size_t len,
                                      struct kiln_schedule *out);
enum kiln_status kiln_sched_to_json(kiln_ctx *ctx, const struct kiln_schedule *s,
                                    struct kiln_buf *out);
/* Strict JSON, shared by schedules and the records import (tuner/db.c): one document, then
 * only whitespace; no NUL byte, raw control character in a string or \u0000 escape; no key
 * twice in any object. Returns the tree (cJSON_Delete it), or NULL with the reason in why and
 * its byte offset in *at (KILN_ERR_NOMEM is also recorded in ctx). Linear in the text, n log n
 * in an object's keys; no recursion of its own. */
struct cJSON;
struct cJSON *kiln_json_parse_strict(kiln_ctx *ctx, const char *text, size_t len, size_t *at,
                                     char *why, size_t nwhy);
/* The byte offset of member's key in the text root was parsed from (0 if not found). */
size_t kiln_json_key_at(kiln_ctx *ctx, const char *text, size_t len, const struct cJSON *root,
                        const struct cJSON *member);
/* The line and column (1-based; columns count bytes) of byte offset at in text. */
void kiln_text_linecol(const char *text, size_t len, size_t at, uint32_t *line, uint32_t *col);

/* ---- padded copies (passes/pad.c) ---- */
/* How far a definition's reads of a tensor hang over its edges, per dimension. */
struct kiln_pad {
    int64_t   lo[KILN_MAX_DIMS], hi[KILN_MAX_DIMS];
    kiln_expr fill; /* the value read outside the bounds */
};
/* Widens pad to cover every read of tensor t (shape[ndim]) in body, a compute definition whose
 * axes range over [0, ax_ext[k]) (k < nax) and reduction variables over [0, rext[r]), and sets
 * pad->fill (when nil) to the false arm of a select guarding a read that leaves the bounds.
 * *why says why t cannot be padded (an index the loops do not bound), else NULL. */
enum kiln_status kiln_pad_scan(kiln_ctx *ctx, kiln_expr body, uint32_t t, const int64_t *shape,
                               uint32_t ndim, const int64_t *ax_ext, uint32_t nax,
                               const int64_t *rext, uint32_t nred, struct kiln_pad *pad,
                               const char **why);
/* body with every read of t replaced by a read of tpad (t's shape widened by pad) at indices
 * shifted by pad->lo, and the bounds checks of t in the selects guarding reads that can leave
 * t's bounds removed. Nil with *why set when a read can leave the bounds unguarded, its select
 * does not check the bounds it leaves, or its fill value is not pad->fill (a constant). */
kiln_expr kiln_pad_rewrite(kiln_ctx *ctx, kiln_expr body, uint32_t t, uint32_t tpad,
                           const int64_t *shape, uint32_t ndim, const int64_t *ax_ext, uint32_t nax,
                           const int64_t *rext, uint32_t nred, const struct kiln_pad *pad,
                           const char **why);

/* ---- lowering (passes/lower.c) ---- */
/* requires: a verified graph; a schedule (may be empty: the default schedule)
 * provides: a verified, simplified, flattened loop-nest function whose parameters are the
 *           graph's arguments then its outputs, computing the graph; or KILN_ERR_INVALID
 *           naming the first illegal step and the reason
 * invalidates: nothing (the graph is not modified) */
enum kiln_status kiln_lower(kiln_ctx *ctx, const struct kiln_graph *g,
                            const struct kiln_schedule *s, struct kiln_func **out);
/* Same, stopping before flattening/simplification (for tests and inspection). */
enum kiln_status kiln_lower_unflat(kiln_ctx *ctx, const struct kiln_graph *g,
                                   const struct kiln_schedule *s, struct kiln_func **out);

/* ---- graph simplification (passes/graph_simplify.c; shared rebuild machinery in
 * passes/graph_rebuild.h) ----
 * kiln_graph_simplify (include/kiln.h) is the entry point.
 * requires: a verified graph whose definitions all belong to statements; weight values (or
 *           NULL: nothing is known, only identities and dead statements go)
 * provides: a new verified graph with the same inputs and outputs computing the same values:
 *           constants folded, batch norms folded into conv2d / dense, identity copies and dead
 *           statements removed, unread weights dropped; new weight values
 * invalidates: nothing (g is not modified; the result has its own tensor indices) */
/* ---- the graph pipeline (passes/pipeline.c) ----
 * kiln_graph_optimize (include/kiln.h) is the entry point: kiln_graph_simplify,
 * kiln_graph_channels_last, kiln_graph_winograd, in that order, from one table.
 * requires: what each pass requires (a verified graph; weight values or NULL)
 * provides: each pass's result, verified; the passes that ran and their counts
 * invalidates: nothing (g is not modified) */
/* ---- memory planning (passes/memplan.c) ---- */
/* One buffer to place: its size and its live range over the root statements, inclusive
 * (first > last: never touched). */
struct kiln_live {
    int64_t  bytes;
    uint32_t first, last;
};
/* Places n buffers in one arena: offset[i] (a multiple of align, a power of two) such that
 * two buffers whose live ranges overlap share no byte. Greedy by size: largest first (ties:
 * earlier first use, then index), each into the smallest gap left by the placed buffers whose
 * ranges overlap its own that fits it, else above the highest of them. Returns the arena size
 * (at most the sum of the rounded sizes), or -1 with an error recorded. */
int64_t kiln_memplan_place(kiln_ctx *ctx, const struct kiln_live *b, uint32_t n, int64_t align,
                           int64_t *offset);
/* live[b] for every buffer b of f: its size, and the first and last root statement (item of
 * the sequence below the chain of ALLOCs at the top of the body) loading or storing it
 * anywhere inside. */
enum kiln_status kiln_memplan_live(const struct kiln_func *f, struct kiln_live *live);
/* requires: a verified function (flat or not)
 * provides: with plan, every HEAP buffer allocated in the ALLOC chain at the top of the body
 *           (the intermediates lowering computes at root) gets a ws_offset in one workspace of
 *           f->ws_bytes bytes, shared between buffers whose live ranges are disjoint
 *           (kiln_memplan_check holds); without, nothing changes. *unplanned (may be NULL)
 *           receives the sum of those buffers' sizes, each rounded up to KILN_WS_ALIGN.
 * invalidates: the ALLOC scopes of planned buffers no longer bound their lifetimes: passes
 *           that move statements across root statements must run before this one */
enum kiln_status kiln_pass_memplan(struct kiln_func *f, bool plan, int64_t *unplanned);
/* KILN_ERR_INTERNAL naming the two buffers when workspace buffers with overlapping live
 * ranges share a byte. */
enum kiln_status kiln_memplan_check(const struct kiln_func *f);

#endif
