/* include/kiln.h -- the one public header of libkiln. Everything not declared here is internal.
 *
 * kiln is a tensor compiler. A *kernel graph* is a DAG of tensor operations over named inputs
 * and weights with known shapes; each operation is a compute definition over index variables,
 * optionally reducing (sum, max, min) over reduction variables. Graphs are written in the .kg
 * text format (docs/kg.md) or built through the op library, and evaluated exactly by the
 * reference interpreter (double precision), the oracle every compiled kernel is checked against.
 *
 * Worked example (error handling abbreviated):
 *
 *     kiln_ctx *ctx = kiln_ctx_new(NULL);
 *     struct kiln_graph *g;
 *     const char *src = "input a: f32[4, 8]\n"
 *                       "input b: f32[8, 3]\n"
 *                       "C[i, j] += a[i, k] * b[k, j]\n"
 *                       "output C\n";
 *     if (kiln_graph_parse(ctx, src, strlen(src), "mm.kg", &g) != KILN_OK) {
 *         char msg[512];
 *         kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
 *         fprintf(stderr, "%s\n", msg);       // mm.kg:3:5: error: ...
 *     }
 *     printf("%016llx\n", (unsigned long long)kiln_graph_hash(g));
 *     // Evaluate: one double buffer per argument (inputs and weights, in declaration order)
 *     // and one per output.
 *     double a[32], b[24], c[12];
 *     const double *args[] = {a, b};
 *     double *outs[] = {c};
 *     kiln_graph_eval(ctx, g, args, outs);
 *     kiln_ctx_free(ctx);                     // frees the graph and everything else
 *
 * Conventions: every fallible call returns enum kiln_status and records the first error in the
 * context (kiln_ctx_error); memory the library returns is owned by the context unless a
 * function says otherwise. One context belongs to one thread at a time. */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KILN_BUILD) && defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#define KILN_VERSION    "0.1.0"
#define KILN_MAX_DIMS   8 /* most dimensions a tensor may have */
#define KILN_MAX_REDUCE 8 /* most reduction variables one operation may have */

enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID,     /* caller's fault: bad text, shape, dtype, attribute, schedule step */
    KILN_ERR_UNSUPPORTED, /* a valid request kiln cannot handle (yet) */
    KILN_ERR_NOMEM,       /* an allocation failed */
    KILN_ERR_BACKEND,     /* LLVM, NVRTC, CUDA, XGBoost or the OS refused; their log is in detail */
    KILN_ERR_INTERNAL,    /* kiln's bug: an invariant did not hold */
};

struct kiln_loc {
    const char *file; /* user-facing source name (ctx-owned copy), or NULL */
    uint32_t    line; /* 1-based; 0 = no location */
    uint32_t    col;  /* 1-based column in bytes */
};

struct kiln_error {
    enum kiln_status status;
    struct kiln_loc  loc;
    const char      *pass;   /* "parse", "graph", "interp", ... */
    const char      *where;  /* kiln's source file:line; meaningful for KILN_ERR_INTERNAL */
    const char      *detail; /* full backend log (ctx-owned), or NULL */
    char             msg[512];
};

enum kiln_dtype {
    KILN_DTYPE_F32 = 0,
    KILN_DTYPE_F16,
    KILN_DTYPE_BF16,
    KILN_DTYPE_F64,
    KILN_DTYPE_I8,
    KILN_DTYPE_I32,
    KILN_DTYPE_I64,
    KILN_DTYPE_BOOL,
    KILN_DTYPE_U8, /* appended after bool: the values above are ABI */
    KILN_DTYPE_U16,
    KILN_DTYPE_U32,
    KILN_DTYPE_U64,
    KILN_DTYPE_I16,
    KILN_DTYPE_COUNT
};

typedef struct kiln_ctx kiln_ctx; /* opaque; owns every byte the library allocates */
struct kiln_graph;                /* a kernel graph; owned by its context */

/* Allocator hook (Lua's lua_Alloc): new_size 0 frees p and returns NULL; otherwise returns a
 * block of new_size bytes holding the first min(old_size, new_size) bytes of p, or NULL. */
typedef void *(*kiln_alloc_fn)(void *ud, void *p, size_t old_size, size_t new_size);

struct kiln_ctx_params {
    kiln_alloc_fn alloc; /* NULL = malloc/realloc/free */
    void         *alloc_ud;
};

/* ---- context and errors ---- */
KILN_API kiln_ctx *kiln_ctx_new(const struct kiln_ctx_params *params); /* NULL = defaults */
KILN_API void      kiln_ctx_free(kiln_ctx *ctx);
/* The first error recorded since the last clear, or NULL when healthy. */
KILN_API const struct kiln_error *kiln_ctx_error(const kiln_ctx *ctx);
KILN_API void                     kiln_ctx_error_clear(kiln_ctx *ctx);
/* Formats "file:line:col: error: msg" (location parts omitted when unknown) into buf; returns
 * the length snprintf would have written. */
KILN_API int         kiln_error_format(const struct kiln_error *err, char *buf, size_t size);
KILN_API const char *kiln_status_name(enum kiln_status st);

/* ---- dtypes ---- */
KILN_API const char *kiln_dtype_name(enum kiln_dtype dt); /* "f32", "f16", ... */
KILN_API size_t      kiln_dtype_size(enum kiln_dtype dt); /* bytes per element */
/* Parses a dtype name ("f32", "float32", "i64", ...); returns KILN_DTYPE_COUNT if unknown. */
KILN_API enum kiln_dtype kiln_dtype_parse(const char *name);

/* ---- kernel graphs ---- */
enum kiln_tensor_kind {
    KILN_TENSOR_INPUT,  /* data the caller passes at run time */
    KILN_TENSOR_WEIGHT, /* learned parameters: also passed by the caller, counted as params */
    KILN_TENSOR_OP,     /* produced by an operation of the graph */
};

struct kiln_tensor_info {
    const char           *name;
    enum kiln_dtype       dtype;
    int                   ndim;
    const int64_t        *shape; /* ndim entries */
    enum kiln_tensor_kind kind;
    int                   is_output;
};

/* Summary of one statement of a graph: a library call ("conv2d", possibly expanded into
 * several operations) or a compute definition written directly ("compute"). */
struct kiln_call_info {
    const char *kind;   /* library op name, or "compute" */
    const char *output; /* name of the tensor the statement defines */
    double      flops;  /* arithmetic operations, counted from the compute definitions */
    double      bytes;  /* bytes read from distinct tensors plus bytes written */
    double      params; /* elements of weight tensors the statement reads */
};

/* Parses .kg text. On error returns KILN_ERR_INVALID with the message, line and column in the
 * context's error; *out is set to NULL. filename is used in messages only (may be NULL). */
KILN_API enum kiln_status kiln_graph_parse(kiln_ctx *ctx, const char *text, size_t len,
                                           const char *filename, struct kiln_graph **out);

enum kiln_print_flags {
    KILN_PRINT_EXPANDED = 1, /* print every operation as a compute definition, no library calls */
};
/* Prints g in .kg syntax; *out is ctx-owned and NUL-terminated. parse(print(g)) gives a graph
 * with the same structural hash; print is a fixed point of parse . print. */
KILN_API enum kiln_status kiln_graph_print(kiln_ctx *ctx, const struct kiln_graph *g,
                                           unsigned flags, const char **out);

/* Stable 64-bit structural hash: independent of tensor and variable names, of the machine and
 * of the run; depends on the arguments' order, shapes and dtypes and on every compute
 * definition. */
KILN_API uint64_t kiln_graph_hash(const struct kiln_graph *g);

KILN_API uint32_t kiln_graph_ntensors(const struct kiln_graph *g);
KILN_API void     kiln_graph_tensor(const struct kiln_graph *g, uint32_t i,
                                    struct kiln_tensor_info *out);
/* Arguments are the inputs and weights in declaration order; outputs in declaration order. */
KILN_API uint32_t kiln_graph_nargs(const struct kiln_graph *g);
KILN_API uint32_t kiln_graph_arg(const struct kiln_graph *g, uint32_t i); /* tensor index */
KILN_API uint32_t kiln_graph_noutputs(const struct kiln_graph *g);
KILN_API uint32_t kiln_graph_output(const struct kiln_graph *g, uint32_t i); /* tensor index */
KILN_API uint32_t kiln_graph_nops(const struct kiln_graph *g); /* compute definitions */
KILN_API uint32_t kiln_graph_ncalls(const struct kiln_graph *g);
KILN_API void kiln_graph_call(const struct kiln_graph *g, uint32_t i, struct kiln_call_info *out);

/* Reference interpreter: evaluates g in double precision. args[i] holds the elements of
 * argument i (row-major, kiln_graph_arg order); outs[i] receives output i. Integer and boolean
 * tensors hold their values as doubles. Fails (never crashes) on an out-of-bounds access of a
 * compute definition written by hand, naming the tensor and index. */
KILN_API enum kiln_status kiln_graph_eval(kiln_ctx *ctx, const struct kiln_graph *g,
                                          const double *const *args, double *const *outs);

/* Number of elements of tensor i. */
KILN_API int64_t kiln_graph_tensor_numel(const struct kiln_graph *g, uint32_t i);

/* ---- compilation (codegen/driver.c) ----
 * A graph is lowered under a schedule (JSON, docs/schedule.md; NULL = the default schedule)
 * to a loop nest, then compiled for a target ("llvm" = this machine; "llvm -mcpu=NAME",
 * "llvm -mattr=+avx2,-avx512f", NULL = host). The result is a shared object with the ABI of
 * include/kiln_abi.h (path ending in .so), or an object file (path ending in .o). For the
 * target "cuda [-arch=sm_XX]" (codegen/README.md): CUDA C (path ending in .cu), PTX (.ptx), or
 * a shared object whose kiln_call takes tensors in GPU memory (anything else). */
struct kiln_compile_options {
    const char *target;        /* NULL = host */
    const char *schedule_json; /* NULL = default schedule */
    size_t      schedule_len;  /* bytes of schedule_json */
    const char *name;          /* module name in the metadata; NULL = "kiln_graph" */
};
/* Memory of a compiled module's call, in bytes (the same figures as its metadata JSON,
 * include/kiln_abi.h). */
struct kiln_memory_report {
    int64_t weights, inputs, outputs; /* arguments, by role */
    int64_t workspace;                /* root-level intermediates as compiled (planned or not) */
    int64_t workspace_unplanned;      /* their sum: each intermediate in its own allocation */
    int64_t peak; /* weights + inputs + outputs + workspace + weight-derived (prepared) buffers */
};
/* *report (NULL = not wanted) receives the memory report of the module on success. */
KILN_API enum kiln_status kiln_graph_compile(kiln_ctx *ctx, const struct kiln_graph *g,
                                             const struct kiln_compile_options *opt,
                                             const char *path, struct kiln_memory_report *report);
/* kiln_graph_compile with weights built into the module (embedded weights). weights: NULL =
 * every weight is an argument (kiln_graph_compile); else one entry per graph argument
 * (kiln_graph_arg order, as kiln_onnx_import and kiln_graph_optimize give them): a weight's
 * values, converted to its dtype and built into the module, which then does not take it as
 * an argument (include/kiln_abi.h, "Embedded weights"), or NULL to keep that argument; the
 * entries of inputs are ignored. The cuda target ignores weights (its modules take every
 * weight as an argument). The values are read while compiling only. */
KILN_API enum kiln_status kiln_graph_compile_weights(kiln_ctx *ctx, const struct kiln_graph *g,
                                                     const struct kiln_compile_options *opt,
                                                     const double *const *weights, const char *path,
                                                     struct kiln_memory_report *report);
/* Memory planning (on by default): kiln_graph_compile places the intermediates computed at
 * root in one workspace allocated once per call, intermediates whose live ranges (first to
 * last root loop nest touching them) are disjoint sharing bytes. Off (on = 0) gives each its
 * own allocation for the whole call, for A/B checks. A setting of the context. */
KILN_API void kiln_ctx_set_memplan(kiln_ctx *ctx, int on);
/* The directory compiling puts its temporary files in (a fresh kiln-XXXXXX directory inside it
 * per object: the object file before linking, a cuda module's host C, ptxas's input), removed
 * when done. NULL or "" = the system's (P_tmpdir, /tmp). The library reads no environment
 * variable: a program that honours TMPDIR passes it here, as the kiln command does. A setting
 * of the context; KILN_ERR_NOMEM when the path cannot be stored. */
KILN_API enum kiln_status kiln_ctx_set_tmp_dir(kiln_ctx *ctx, const char *dir);
/* The lowered loop nest as text (flat = after storage flattening), ctx-owned. *report (NULL =
 * not wanted) receives the memory report on success: the module's figures when flat, all zeros
 * when not (memory is planned on the flat loop nest). */
KILN_API enum kiln_status kiln_graph_lower_print(kiln_ctx *ctx, const struct kiln_graph *g,
                                                 const struct kiln_compile_options *opt, int flat,
                                                 const char               **out,
                                                 struct kiln_memory_report *report);

/* ---- autotuning and records (tuner/) ----
 * kiln_graph_tune partitions the graph into tasks and searches schedules for each (sketch
 * rules, evolutionary search guided by an XGBoost cost model, then Droplet coordinate descent),
 * measuring candidates in worker processes and storing every measurement in a SQLite records
 * database as soon as it is made. A run interrupted (stop flag, Ctrl-C, kill) resumes from the
 * database: `trials` counts the records already there. kiln_graph_compile_tuned compiles with
 * the best record of every task that applies to it (one that does not is skipped). Records are
 * kept per target: tuned with .target = "cuda -arch=sm_90", they apply to compiling for that
 * target.
 *
 *     struct kiln_tune_params p = {.db_path = "mm.db", .trials = 200};
 *     if (kiln_graph_tune(ctx, g, &p) != KILN_OK) ...
 *     if (kiln_graph_compile_tuned(ctx, g, NULL, "mm.db", "mm.so", NULL) != KILN_OK) ...
 */
struct kiln_tune_task_status {
    const char *key;    /* workload key: the task's structural hash, 16 hex digits */
    double      flops;  /* of one occurrence */
    uint32_t    weight; /* occurrences in the graph */
    uint32_t    trials; /* measured programs, errors included */
    uint32_t    errors; /* programs that failed: did not build, crashed, hung, wrong answer */
    double      best_s; /* best time, 0 = nothing valid measured yet */
    const char *phase;  /* "ansor", "droplet", "done" */
    uint32_t    model_programs; /* measured programs (of every task) the task's cost model
                                 * last trained on; 0 = not trained yet: its batches are random */
    uint32_t droplet_rounds;    /* Droplet rounds that measured a whole neighbourhood and then
                                 * moved to a faster neighbour or converged */
};

struct kiln_tune_progress {
    uint32_t                            trials_done, trials_total, ntask;
    const struct kiln_tune_task_status *task;
    double est_latency_s; /* sum over tasks of weight x best time (default schedule if none) */
    double elapsed_s, eta_s;
};

struct kiln_tune_params {      /* zero fields take the defaults given */
    const char *target;        /* NULL = host; "cuda [-arch=sm_XX]": GPU programs timed on CUDA
                                * device 0 (-arch: the device's when left out). Without a CUDA
                                * driver or device: KILN_ERR_UNSUPPORTED "no CUDA driver (...)"
                                * or "no CUDA device (...)", the database untouched */
    const char *db_path;       /* required; created if absent */
    uint32_t    trials;        /* measured programs over all tasks, database included (records
                                * taken from the cache excepted): 1000; with time_budget_s and
                                * no trials, unbounded */
    const char *strategy;      /* "ansor+droplet" (default), "ansor", "droplet" */
    uint32_t    droplet_after; /* programs of a task measured before Droplet starts: 300 */
    uint32_t    batch;         /* programs measured per round: 16 */
    uint32_t    population;    /* evolutionary population: 256 */
    uint64_t    seed;          /* 0 = 1 */
    uint32_t    repeat;        /* timed repeats per program (median): 5 */
    double      min_repeat_ms; /* each repeat lasts at least this: 20 */
    double      run_timeout_s; /* a candidate running longer is killed: 10 */
    int         threads;       /* threads of parallel loops while measuring; 0 = all cores */
    int         flush_cache;   /* nonzero: flush caches before every timed call */
    int         flush_weights; /* nonzero: evict the weights and the buffers prepared from them
                                * from every cache level before every timed call, the inputs
                                * staying warm: how a kernel runs inside a whole network */
    uint32_t    build_workers; /* candidates compiled in parallel: 0 = cores */
    FILE       *log;           /* a JSON line per measurement, or NULL */
    const char *curve_dir;     /* tuning curves (CSV per task, curves.svg; the whole model's
                                * estimated latency vs time: model.csv, model.svg), or NULL */
    const char *cache_path;    /* records cache shared by tuning runs of any model, or NULL:
                                * every record stored in db_path is stored here too, and a task
                                * whose workload key has records here for the target starts from
                                * them (copied into db_path; they do not count in trials). An
                                * unusable cache is one warning and tuning goes on without it */
    double time_budget_s;      /* > 0: no round starts once this many seconds have passed (the
                                * round in flight finishes); with trials, whichever comes first */
    void (*warning)(void *ud, const char *msg); /* called with progress_ud; NULL = stderr */
    void (*progress)(void *ud, const struct kiln_tune_progress *p);
    void         *progress_ud;
    volatile int *stop; /* set nonzero (e.g. from a signal handler) to stop early */
    /* Measurement on `kiln worker`s over Redis Streams (tuner/README.md): the queue,
     * redis://[[USER]:PASSWORD@]HOST:PORT/NAME, or NULL to measure here (the default); the jobs
     * stream (NULL: from the target and this machine's CPU model, as a worker on a machine like
     * this one serves); fail when no worker answers for queue_timeout_s (0: 600). CPU targets
     * only; without Redis support in this build, KILN_ERR_UNSUPPORTED. */
    const char *queue;
    const char *queue_key;
    double      queue_timeout_s;
};
KILN_API enum kiln_status kiln_graph_tune(kiln_ctx *ctx, const struct kiln_graph *g,
                                          const struct kiln_tune_params *params);
/* Compiles g like kiln_graph_compile with, for every task, the schedule of its best record in
 * db_path for the target (opt->schedule_json is ignored). *ntuned (if not NULL) receives the
 * number of tasks that had a record; the others keep the serial default schedule (no cost
 * model is involved: for what `kiln compile` does, predicted schedules for tasks without a
 * record, use kiln_graph_schedule below, then kiln_graph_compile). */
KILN_API enum kiln_status kiln_graph_compile_tuned(kiln_ctx *ctx, const struct kiln_graph *g,
                                                   const struct kiln_compile_options *opt,
                                                   const char *db_path, const char *path,
                                                   uint32_t *ntuned);
/* The tuned whole-graph schedule as JSON (ctx-owned); *ntuned and *ntasks may be NULL. The
 * database is opened read-only (a read-only file is fine) and must exist. */
KILN_API enum kiln_status kiln_graph_tuned_schedule(kiln_ctx *ctx, const struct kiln_graph *g,
                                                    const char *db_path, const char *target,
                                                    const char **json, uint32_t *ntuned,
                                                    uint32_t *ntasks);
/* Which record a task of the graph got. Each task takes its best record that applies (parses
 * and lowers) at every occurrence, trying the next best while one does not, up to 100; when
 * none applies everywhere, the best that applies at some occurrences is used there. */
struct kiln_tuned_task {
    const char *key;         /* workload key */
    uint32_t    occurrences; /* of the task in the graph */
    int         tuned;       /* a record applied at every occurrence */
    int64_t     record;      /* row id of the record applied; 0 = none: the default schedule */
    double      time_s;      /* its schedule's (mean) time */
    uint32_t    skipped;     /* better-ranked records that did not apply */
    const char *skip_why;    /* why the first of them did not ("record 12: ..."), or NULL */
};
/* kiln_graph_tuned_schedule, with what each task got: *tasks (ctx-owned) has *ntasks entries
 * in task order. */
KILN_API enum kiln_status kiln_graph_tuned_tasks(kiln_ctx *ctx, const struct kiln_graph *g,
                                                 const char *db_path, const char *target,
                                                 const char                   **json,
                                                 const struct kiln_tuned_task **tasks,
                                                 uint32_t                      *ntasks);

/* ---- schedules without tuning (tuner/predict.c) ----
 * The schedule `kiln compile` uses: every task of the graph takes its best record from the
 * records databases (db_paths, each opened read-only and required to exist; a task takes the
 * fastest record that applies at every occurrence across them, the first database's on equal
 * times); a task with no record gets a predicted schedule: its sketches' programs are sampled
 * and evolved, ranked by a trained cost model only (nothing is measured, a few seconds per
 * task), and the best-ranked one is used; KILN_UNTUNED_SERIAL instead leaves such tasks the
 * serial default schedule (loops in definition order, the one kiln_graph_compile uses without
 * a schedule). The result is deterministic for a given seed. A cost model that is missing,
 * damaged or of another feature count never fails the call: the untuned tasks keep the
 * serial default, and report->warning (one line naming the file, or the shipped model) says
 * why.
 *
 *     const char *db[] = {"resnet18.db"};
 *     struct kiln_schedule_params p = {.db_paths = db, .ndb = 1};
 *     struct kiln_schedule_report r;
 *     const char *js;
 *     if (kiln_graph_schedule(ctx, g, &p, &js, &r) != KILN_OK) ...
 *     if (r.warning) fprintf(stderr, "%s\n", r.warning);
 *     struct kiln_compile_options o = {.schedule_json = js, .schedule_len = strlen(js)};
 *     kiln_graph_compile(ctx, g, &o, "net.so", NULL);
 */
enum kiln_untuned {
    KILN_UNTUNED_PREDICT, /* ranked by the cost model (default) */
    KILN_UNTUNED_SERIAL,  /* the serial default schedule */
};
struct kiln_schedule_params {
    const char        *target;   /* NULL = host */
    const char *const *db_paths; /* records databases, read in order */
    uint32_t           ndb;
    int                untuned;    /* enum kiln_untuned */
    const char        *cost_model; /* a model file (kiln costmodel); NULL = the one shipped in
                                    * the library */
    uint64_t seed;                 /* 0 = 1 */
};
struct kiln_schedule_report {
    uint32_t    ntasks;                  /* tasks of the graph (identical subgraphs are one task) */
    uint32_t    from_records;            /* tasks whose record applied at every occurrence */
    uint32_t    predicted;               /* tasks given a predicted schedule */
    uint32_t    serial;                  /* the rest: serial default (or a record where it fits) */
    const char *model;                   /* the model used (its file, "the shipped cost model"), or
                                          * "none" (ctx-owned) */
    const char *warning;                 /* NULL, or why the model could not be used: one line
                                          * (ctx-owned) */
    const struct kiln_tuned_task *tasks; /* ntasks entries in task order: which record each
                                          * task got (record 0: predicted or serial; ctx-owned) */
};
/* *json (ctx-owned) receives the whole-graph schedule JSON; report may be NULL. */
KILN_API enum kiln_status kiln_graph_schedule(kiln_ctx *ctx, const struct kiln_graph *g,
                                              const struct kiln_schedule_params *params,
                                              const char                       **json,
                                              struct kiln_schedule_report       *report);

/* One workload/target pair of a records database: its best valid record and counts. */
struct kiln_record_summary {
    const char *workload, *target;
    uint32_t    records, errors;
    double      best_s, flops; /* best_s 0 when no record is valid */
    const char *schedule;      /* of the best record */
    const char *strategy, *machine, *version;
    int64_t     timestamp;
};
/* Calls fn for every workload/target pair (strings valid during the call). The database is
 * opened read-only and must exist; a damaged row is an error naming the file and the row. */
KILN_API enum kiln_status
kiln_records_list(kiln_ctx *ctx, const char                                       *db_path,
                  void (*fn)(void *ud, const struct kiln_record_summary *s), void *ud);
/* Writes every record as one JSON object per line. The file is written whole to a temporary
 * file in its directory and renamed into place, so an error leaves it as it was; jsonl_path
 * may not be the database itself (by device and inode: another name or a link is caught) nor
 * any other SQLite file. */
KILN_API enum kiln_status kiln_records_export(kiln_ctx *ctx, const char *db_path,
                                              const char *jsonl_path);
/* Adds the records of a JSON-lines file (records already present are skipped), in one
 * transaction, in time linear in its lines. Every line is checked (tuner/README.md); a bad one
 * is not imported and bad(ud, line, why) is called for it (bad may be NULL). The good lines are
 * imported in any case; if any line was bad the call returns KILN_ERR_INVALID, the error
 * located at jsonl_path and the first bad line. *added (may be NULL) counts the records
 * added. */
KILN_API enum kiln_status kiln_records_import(kiln_ctx *ctx, const char *db_path,
                                              const char *jsonl_path, uint32_t *added,
                                              void (*bad)(void *ud, uint32_t line, const char *why),
                                              void *ud);

/* ---- kernel architecture search (kas/, kas/README.md) ----
 * Samples new kernels that can replace a convolution at every placeholder given (one design
 * legal for all of them), sized by an exact solver into a FLOPs/parameter budget relative to
 * the replaced convolutions, without duplicates. Each kernel comes as a PyTorch module source
 * (class Kernel(C, K), valid for every placeholder) and as one .kg kernel graph per
 * placeholder, in memory and, with out_dir, as files. Same parameters and seed, same kernels.
 * This is what `kiln sample` does; the search loop (training) is Python's kiln.search.
 *
 *     struct kiln_kas_placeholder ph = {.c = 64, .k = 64, .h = 32, .w = 32};
 *     struct kiln_kas_params p;
 *     kiln_kas_params_default(&p);
 *     p.placeholders = &ph;
 *     p.nplaceholders = 1;
 *     p.seed = 1;
 *     struct kiln_kas_sampler *s;
 *     struct kiln_kas_kernel k;
 *     if (kiln_kas_sampler_new(ctx, &p, &s) != KILN_OK) ...
 *     while (n-- && kiln_kas_sampler_next(s, &k) == KILN_OK)
 *         printf("%016llx %s\n%s", (unsigned long long)k.hash, k.design, k.kg[0]);
 *     kiln_kas_sampler_free(s);                 // before kiln_ctx_free(ctx)
 */
struct kiln_kas_placeholder {
    int64_t c, k, h, w; /* input channels, output channels, input height and width */
};
/* FLOPs and parameters are summed over the placeholders, relative to the replaced convolutions;
 * defaults in parentheses (kiln_kas_params_default). */
struct kiln_kas_params {
    const struct kiln_kas_placeholder *placeholders; /* 1..16 (the caller's array) */
    uint32_t                           nplaceholders;
    uint64_t                           seed;
    int                                stride;    /* of the replaced layer: 1 or 2 (1) */
    int                                ref_k;     /* its window: 1, 3, 5 or 7 (3) */
    double                             flops_lo;  /* (0.05) */
    double                             flops_hi;  /* (1) */
    double                             params_lo; /* (0) */
    double                             params_hi; /* (1) */
    int                                max_ops;   /* primitives grown before closing (8) */
    int                                min_rf;    /* receptive field in h and w (3) */
    int         no_fingerprint; /* nonzero: no duplicate removal by output fingerprint (0) */
    uint32_t    max_tries;      /* designs grown per new kernel before giving up (100000) */
    int64_t     batch;          /* batch of the .kg graphs (1) */
    const char *out_dir;        /* NULL, or an existing directory: every kernel is also written
                                 * as out_dir/kNNNN.py and out_dir/kNNNN_pJ.kg (J = 1, 2, ...) */
};
/* One sampled kernel. The strings belong to the sampler: valid until its next call of
 * kiln_kas_sampler_next or kiln_kas_sampler_free. */
struct kiln_kas_kernel {
    uint64_t           index;   /* 1, 2, ...: position in the sampler's sequence (the NNNN) */
    uint64_t           hash;    /* canonical structural hash */
    double             flops;   /* summed over the placeholders, relative to the convolutions */
    double             params;  /* likewise */
    uint32_t           ops;     /* primitives */
    const char        *design;  /* one line: "1=unfold(hw,3,d1,@0) 2=fc(0,x0,@1) ..." */
    const char        *values;  /* the free sizes the budget solver chose: "x0=C/4 G=8", or "" */
    const char        *py;      /* PyTorch source of class Kernel(nn.Module) */
    const char *const *kg;      /* .kg text per placeholder, in the order given */
    const char        *py_path; /* with out_dir: the files written; else NULL */
    const char *const *kg_paths;
};
struct kiln_kas_stats {
    uint64_t attempts;    /* designs grown */
    uint64_t illegal;     /* closing failed */
    uint64_t filtered;    /* no weight, receptive field too small, redundant pair */
    uint64_t over_budget; /* no size assignment inside the budget */
    uint64_t dup_hash;    /* duplicates by canonical hash */
    uint64_t dup_fp;      /* duplicates by output fingerprint */
    uint64_t accepted;    /* kernels returned */
    double   seconds;     /* spent sampling (emission and files excluded) */
};
struct kiln_kas_sampler;

/* Fills p with the defaults given above (no placeholders, seed 0, no out_dir). */
KILN_API void kiln_kas_params_default(struct kiln_kas_params *p);
/* Checks p (KILN_ERR_INVALID: placeholder sizes, H and W divisible by the stride, ranges,
 * windows) and starts a sampler in ctx's allocator; free it before ctx. */
KILN_API enum kiln_status kiln_kas_sampler_new(kiln_ctx *ctx, const struct kiln_kas_params *p,
                                               struct kiln_kas_sampler **out);
/* The next new kernel into *out. KILN_ERR_UNSUPPORTED when max_tries designs in a row gave
 * none (the budget or the placeholders leave too little room); KILN_ERR_BACKEND when a file
 * cannot be written. */
KILN_API enum kiln_status kiln_kas_sampler_next(struct kiln_kas_sampler *s,
                                                struct kiln_kas_kernel  *out);
KILN_API void kiln_kas_sampler_stats(const struct kiln_kas_sampler *s, struct kiln_kas_stats *out);
KILN_API void kiln_kas_sampler_free(struct kiln_kas_sampler *s);

/* ---- ONNX import (frontend/, frontend/README.md) ----
 * Imports an ONNX model (the bytes of a .onnx file) as a kernel graph. The graph's inputs are
 * the model's graph inputs that are not initializers, in order, with their ONNX element types
 * and static shapes; its outputs are the model's graph outputs, in order. Initializers and
 * Constant values that ops read as data become weights (arguments after the inputs, in the
 * order they are first read); integer tensors used as shapes, axes, pads or slice bounds are
 * read at import time and must be constants. Names are kept where they are valid kiln names;
 * other characters (including '.') become '_'. *weights (when not NULL) receives
 * kiln_graph_nargs(g) pointers, ctx-owned: argument i's values as doubles (row-major) for a
 * weight, NULL for an input. An op, attribute or value kiln does not handle is
 * KILN_ERR_UNSUPPORTED, a malformed or truncated model KILN_ERR_INVALID; messages name the node,
 * its op and the model's opset ("node 3 'conv1' (Conv, opset 13): ..."). filename is used in
 * messages only (may be NULL). */
KILN_API enum kiln_status kiln_graph_import_onnx(kiln_ctx *ctx, const void *data, size_t len,
                                                 const char *filename, struct kiln_graph **out,
                                                 const double *const **weights);

/* One ONNX TensorProto (the input_K.pb / output_K.pb files of ONNX's backend tests). */
struct kiln_onnx_tensor {
    const char     *name; /* "" when the file names none */
    enum kiln_dtype dtype;
    int             ndim;
    int64_t         shape[KILN_MAX_DIMS];
    int64_t         numel;
    const double   *values; /* numel values, row-major, ctx-owned */
};
/* Decodes a serialized TensorProto; errors as kiln_graph_import_onnx. */
KILN_API enum kiln_status kiln_onnx_tensor_decode(kiln_ctx *ctx, const void *data, size_t len,
                                                  const char              *filename,
                                                  struct kiln_onnx_tensor *out);

/* kiln_graph_import_onnx with graph inputs bound to constant values: a bound input is not an
 * argument of the graph; the importer reads it as it reads an initializer. This specializes a
 * model whose shapes, axes, pads or slice bounds come from runtime inputs (the layout of many of
 * ONNX's node tests) to given values. A binding naming no graph input is KILN_ERR_INVALID. */
struct kiln_onnx_binding {
    const char                    *name; /* the graph input's ONNX name */
    const struct kiln_onnx_tensor *value;
};
KILN_API enum kiln_status kiln_graph_import_onnx_bound(kiln_ctx *ctx, const void *data, size_t len,
                                                       const char                     *filename,
                                                       const struct kiln_onnx_binding *bind,
                                                       uint32_t nbind, struct kiln_graph **out,
                                                       const double *const **weights);

/* Shapes for a model with symbolic dimensions ('batch', 'sequence'): `name` is a graph input's
 * ONNX name, and shape[0..ndim) its whole shape (its fixed dimensions must agree); or the name
 * of a symbolic dimension (dim_param), with ndim 1 and shape[0] its extent in every input that
 * uses it. A name that is neither, a rank that differs or an extent below 1 is
 * KILN_ERR_INVALID; a symbolic dimension left without a value is KILN_ERR_UNSUPPORTED naming
 * the input, the dimension and its name. */
struct kiln_onnx_shape {
    const char    *name;
    uint32_t       ndim;
    const int64_t *shape;
};
struct kiln_onnx_options {
    const struct kiln_onnx_binding *bind; /* as kiln_graph_import_onnx_bound; may be NULL */
    uint32_t                        nbind;
    const struct kiln_onnx_shape   *shapes; /* may be NULL */
    uint32_t                        nshapes;
};
/* kiln_graph_import_onnx with bindings and shapes; opt may be NULL. */
KILN_API enum kiln_status kiln_graph_import_onnx_opts(kiln_ctx *ctx, const void *data, size_t len,
                                                      const char                     *filename,
                                                      const struct kiln_onnx_options *opt,
                                                      struct kiln_graph             **out,
                                                      const double *const           **weights);

/* ---- graph simplification (passes/graph_*.c, passes/README.md) ----
 * Rewrites a graph whose weights have known values (an imported ONNX model) into a new graph
 * computing the same outputs from the same inputs:
 *   - constant folding: statements that read only weights are computed at compile time (by the
 *     reference interpreter, in double) and their results become weights, unless the result
 *     would be larger than max(1024 elements, the weights it is computed from);
 *   - an add of a per-channel weight after a bias-free conv2d or dense becomes its bias, and a
 *     batch_norm after a conv2d (any groups) or a 2-D dense (with such an add or not) that
 *     nothing else reads becomes that conv2d / dense with scaled weights and a bias;
 *   - statements that copy a tensor unchanged (a reshape to the same shape) are removed, and so
 *     are statements whose results reach no output;
 *   - weights no statement reads any more are dropped.
 * weights: one pointer per argument of g (kiln_graph_import_onnx's), NULL for inputs and for
 * weights of unknown value (which are then never folded); weights itself may be NULL. The result
 * *out has all of g's inputs first, in order, then its weights in first-read order;
 * *weights_out (may be NULL) receives one pointer per argument of *out, ctx-owned. g is not
 * changed. */
struct kiln_simplify_report {
    uint32_t batch_norms_folded; /* batch_norm statements folded into a conv2d or dense */
    uint32_t bias_adds_folded; /* adds of a per-channel weight folded into a conv2d or dense bias */
    uint32_t constants_folded; /* tensors computed at compile time that became weights */
    uint32_t calls_folded;     /* statements evaluated at compile time and removed */
    uint32_t dead_removed;     /* statements whose results reached no output */
    uint32_t identities_removed;        /* statements copying a tensor unchanged */
    uint32_t calls_before, calls_after; /* statements (library calls, compute definitions) */
    uint32_t ops_before, ops_after;     /* compute definitions */
    uint32_t weights_before, weights_after;
    double   weight_bytes_before, weight_bytes_after; /* at the weights' dtypes */
};
KILN_API enum kiln_status kiln_graph_simplify(kiln_ctx *ctx, const struct kiln_graph *g,
                                              const double *const *weights, struct kiln_graph **out,
                                              const double *const        **weights_out,
                                              struct kiln_simplify_report *report);

/* Makes convolutions and pooling compute on channels-last (NHWC) activations (layout="nhwc"),
 * and the statements between them too: elementwise ops, concat, slice, batch_norm and
 * reductions (their axes renumbered) and channel shuffles; the graph's inputs, outputs and
 * weights keep their layouts (transposes are added where an NCHW tensor meets a channels-last
 * statement, and back). A connected group with a single convolution or pooling stays NCHW.
 * *converted: the statements changed. Weights as kiln_graph_simplify. */
KILN_API enum kiln_status kiln_graph_channels_last(kiln_ctx *ctx, const struct kiln_graph *g,
                                                   const double *const  *weights,
                                                   struct kiln_graph   **out,
                                                   const double *const **weights_out,
                                                   uint32_t             *converted);

/* Rewrites each 3x3 convolution with stride 1, dilation 1, one group, a float dtype and known
 * weights, whose output has at least 49 tiles of 2x2 pixels (14x14 per image), as Winograd's
 * F(2x2, 3x3), or F(4x4, 3x3) from 196 tiles of 4x4 (56x56): winograd_input, batch_matmul with
 * weights transformed at compile time (a new weight NAME_wino of [16, C, K] or [36, C, K]),
 * winograd_output (ir/README.md). 2.25x or 4x fewer multiplications;
 * results differ from the direct convolution by rounding only. *converted: the convolutions
 * rewritten. Weights as kiln_graph_simplify. */
KILN_API enum kiln_status kiln_graph_winograd(kiln_ctx *ctx, const struct kiln_graph *g,
                                              const double *const *weights, struct kiln_graph **out,
                                              const double *const **weights_out,
                                              uint32_t             *converted);

/* ---- the graph pipeline (passes/pipeline.c, passes/README.md) ----
 * kiln_graph_optimize runs the graph passes above on a graph with known weight values, in this
 * order, each on the result of the one before:
 *   1. "simplify"       kiln_graph_simplify (constants, bias adds and batch norms folded, dead
 *                       and identity statements removed)
 *   2. "channels-last"  kiln_graph_channels_last (convolutions, pooling and the elementwise
 *                       statements between them on NHWC activations)
 *   3. "winograd"       kiln_graph_winograd (3x3 stride-1 convolutions as Winograd F(m x m, 3x3))
 * This is what `kiln compile`, `tune`, `inspect` and `eval` do to an ONNX model before
 * compiling it, and what the Python package does; a program that imports a model
 * (kiln_graph_import_onnx) calls it between the import and kiln_graph_compile to get the same
 * module. The command leaves a .kg file as written (its weights have no values, and its author
 * chose its layout); a library user decides the same way, by calling this function or not.
 * options may be NULL: every pass runs. The result, its weights (one pointer per argument,
 * ctx-owned; weights_out may be NULL) and the report are as each pass's; g is not changed, and
 * with every pass switched off *out is g itself. */
enum kiln_graph_pass {
    KILN_GRAPH_PASS_SIMPLIFY,
    KILN_GRAPH_PASS_CHANNELS_LAST,
    KILN_GRAPH_PASS_WINOGRAD,
    KILN_GRAPH_PASS_COUNT
};
/* The pass's name as above ("simplify", "channels-last", "winograd"), NULL out of range. */
KILN_API const char *kiln_graph_pass_name(enum kiln_graph_pass pass);

struct kiln_optimize_options {
    unsigned skip; /* passes switched off: bits (1u << KILN_GRAPH_PASS_x); 0 runs them all */
    /* Called after each pass that ran, with its result (for printing: kiln_graph_print); may
     * be NULL. */
    void (*dump)(void *user, enum kiln_graph_pass pass, const struct kiln_graph *g);
    void *user;
};
struct kiln_optimize_report {
    int                         ran[KILN_GRAPH_PASS_COUNT]; /* 1 for each pass that ran */
    struct kiln_simplify_report simplify;                   /* all zero when it did not run */
    uint32_t                    channels_last;    /* statements converted to channels-last */
    uint32_t                    transposes_added; /* transposes channels-last added at the edges */
    uint32_t                    winograd;         /* convolutions rewritten as Winograd */
};
KILN_API enum kiln_status
kiln_graph_optimize(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
                    const struct kiln_optimize_options *options, struct kiln_graph **out,
                    const double *const **weights_out, struct kiln_optimize_report *report);

/* ---- loading and calling generated code (runtime/module.c) ----
 * A module is a shared object written by kiln_graph_compile, loaded into this process. Its
 * arguments are the graph's arguments (inputs and weights, declaration order; less the weights
 * built into the module, see kiln_module_embedded) followed by its outputs, passed as DLPack
 * tensors (include/kiln_abi.h states the rules: the module's device (kiln_module_device: CPU, or
 * CUDA memory for the cuda target), declared dtype and shape, compact row-major, aligned). Programs
 * that only call generated code need not link libkiln at all: dlopen the object and use kiln_abi.h;
 * this API adds kiln's error handling.
 *
 *     struct kiln_module *m;
 *     if (kiln_module_load(ctx, "mm.so", &m) != KILN_OK) ...  // message in kiln_ctx_error(ctx)
 *     DLTensor *args[3] = {&a, &b, &c};                      // a, b inputs; c output
 *     if (kiln_module_call(ctx, m, args, 3, NULL) != KILN_OK) ...
 *     struct kiln_prepared *p;                               // weights packed once:
 *     if (kiln_module_prepare(ctx, m, args, 3, &p, NULL) != KILN_OK) ...
 *     if (kiln_module_call_prepared(ctx, m, p, args, 3, NULL) != KILN_OK) ...  // many times
 *     kiln_module_prepared_free(m, p);
 *     kiln_module_free(m);
 */
#ifdef __cplusplus
} /* kiln_abi.h (with DLPack's header) outside the extern "C" block: it includes standard headers */
#endif
#include "kiln_abi.h" /* DLTensor, enum kiln_abi_status, enum kiln_arg_role */
#ifdef __cplusplus
extern "C" {
#endif

struct kiln_module; /* a loaded shared object; owned by the caller, freed by kiln_module_free */

struct kiln_module_arg {
    const char        *name;
    enum kiln_dtype    dtype;    /* KILN_DTYPE_COUNT for a dtype kiln does not name */
    DLDataType         dl_dtype; /* what the DLTensor's dtype must be */
    int                ndim;
    const int64_t     *shape; /* ndim extents; valid until kiln_module_free */
    enum kiln_arg_role role;
    uint32_t           align; /* bytes data + byte_offset must be aligned to */
    int64_t            bytes; /* size of the whole tensor */
};

/* Loads the shared object at path (a path without '/' is relative to the working directory)
 * with dlopen(RTLD_NOW | RTLD_LOCAL). Errors: a missing or unreadable file (KILN_ERR_INVALID),
 * an object dlopen refuses (KILN_ERR_BACKEND, with dlerror's text), an
 * object that is not a kiln module (KILN_ERR_INVALID, naming the missing symbol), an ABI
 * version other than KILN_ABI_VERSION (KILN_ERR_UNSUPPORTED). *out is NULL on error. The module
 * uses the context's allocator but does not refer to the context afterwards: it may outlive it. */
KILN_API enum kiln_status kiln_module_load(kiln_ctx *ctx, const char *path,
                                           struct kiln_module **out);
KILN_API void             kiln_module_free(struct kiln_module *m); /* NULL is fine */
/* The module's metadata JSON (include/kiln_abi.h) and its graph as .kg text; both owned by
 * the module. */
KILN_API const char *kiln_module_metadata(const struct kiln_module *m);
KILN_API const char *kiln_module_source(const struct kiln_module *m);
/* Arguments, outputs last; kiln_module_arg fails with KILN_ERR_INVALID (nothing recorded) for
 * i >= kiln_module_nargs(m). */
KILN_API uint32_t         kiln_module_nargs(const struct kiln_module *m);
KILN_API enum kiln_status kiln_module_arg(const struct kiln_module *m, uint32_t i,
                                          struct kiln_module_arg *out);
/* Embedded weights: a module compiled with its weights built in (kiln_graph_compile_weights;
 * the default of `kiln compile` for an ONNX model on the CPU) does not take them as
 * arguments, so kiln_module_nargs and kiln_module_arg leave them out. kiln_module_nembedded
 * counts them; kiln_module_embedded describes the i-th (role KILN_ARG_WEIGHT), with *data (if
 * not NULL) the module's read-only copy of its values (valid until kiln_module_free) and
 * *position (if not NULL) its index among all the graph's arguments and outputs (the order of
 * the module's source, kiln_module_source). KILN_ERR_INVALID (nothing recorded) for i out of
 * range. */
KILN_API uint32_t         kiln_module_nembedded(const struct kiln_module *m);
KILN_API enum kiln_status kiln_module_embedded(const struct kiln_module *m, uint32_t i,
                                               struct kiln_module_arg *out, const void **data,
                                               uint32_t *position);
/* Threads the module's parallel loops use; 0 = all cores (OpenMP's default). Per module: each
 * shared object has its own runtime, and the process's OpenMP setting is left alone. */
KILN_API void kiln_module_set_num_threads(struct kiln_module *m, int32_t n);
/* The device the module's code runs on, a DLDeviceType: kDLCPU for the llvm target, kDLCUDA for
 * the cuda target (whose kiln_call takes tensors in device memory: "CUDA devices" below).
 * Read from the module's descriptor; 0 for a NULL module. */
KILN_API int32_t kiln_module_device(const struct kiln_module *m);
/* Checks args against the module's arguments and runs it through its exported kiln_call
 * (callable from several threads at once, each with its own context and outputs). A refused
 * call records KILN_ERR_INVALID with the ABI's message ("argument 1 (b) has dtype f64,
 * expected f32"); a failed temporary allocation or thread pool in the kernel records
 * KILN_ERR_NOMEM / KILN_ERR_BACKEND. *abi_status (if not NULL) receives the enum
 * kiln_abi_status kiln_call returned. */
KILN_API enum kiln_status kiln_module_call(kiln_ctx *ctx, struct kiln_module *m,
                                           DLTensor *const *args, int32_t nargs,
                                           int32_t *abi_status);

/* Prepared calls (include/kiln_abi.h, "Prepared calls"): kiln_module_prepare computes the
 * module's weight-derived buffers (e.g. weights packed into a blocked layout) once, from the
 * weights in args (the same array as kiln_module_call; inputs and outputs are checked but not
 * read); kiln_module_call_prepared then runs the call without recomputing them, with the same
 * results as kiln_module_call as long as the weights' contents have not changed since the
 * prepare (prepare again after changing them). *out is a new handle (also for a module with
 * nothing to prepare, or one built before prepared calls existed, whose prepared calls are
 * plain calls), NULL on error. Several threads may call kiln_module_call_prepared with one
 * handle at once. A NULL handle, or one of another module, is refused (KILN_ERR_INVALID).
 * Free each handle with kiln_module_prepared_free before kiln_module_free of its module. */
struct kiln_prepared;
KILN_API enum kiln_status kiln_module_prepare(kiln_ctx *ctx, struct kiln_module *m,
                                              DLTensor *const *args, int32_t nargs,
                                              struct kiln_prepared **out, int32_t *abi_status);
KILN_API enum kiln_status kiln_module_call_prepared(kiln_ctx *ctx, struct kiln_module *m,
                                                    const struct kiln_prepared *p,
                                                    DLTensor *const *args, int32_t nargs,
                                                    int32_t *abi_status);
KILN_API void             kiln_module_prepared_free(struct kiln_module *m, struct kiln_prepared *p);

/* ---- CUDA devices (runtime/cuda.c) ----
 * What a program needs to run a module of the cuda target without a CUDA runtime of its own
 * (`kiln run`, benchmarks/bench_gpu.c): a device, device memory, copies and timing with CUDA
 * events. The driver (libcuda.so.1) is loaded with dlopen on first use and nothing CUDA is
 * linked: on a machine without it, kiln_cuda_open fails with KILN_ERR_UNSUPPORTED "no CUDA
 * driver (libcuda.so.1: ...)" and nothing crashes. Device memory is named by its address (a
 * CUdeviceptr): a tensor in it is a DLTensor with data (void *)(uintptr_t)dptr and device
 * {kDLCUDA, ordinal}.
 *
 * Every function makes the device's primary context current for its duration (the context the
 * CUDA runtime and PyTorch use), so a struct kiln_cuda may be used from any thread. A module's
 * kiln_call runs on the calling thread's current context, else on device 0's primary context:
 * called inside kiln_cuda_time's work function it runs on the timed device's.
 *
 *     struct kiln_cuda *cu;
 *     if (kiln_cuda_open(ctx, 0, &cu) != KILN_OK) ...     // "no CUDA driver (...)"
 *     uint64_t d;
 *     kiln_cuda_alloc(ctx, cu, bytes, &d);
 *     kiln_cuda_upload(ctx, cu, d, host, bytes);
 *     DLTensor a = {(void *)(uintptr_t)d, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
 *     ...  kiln_module_call(ctx, m, args, n, NULL)  ...
 *     kiln_cuda_download(ctx, cu, host, d, bytes);
 *     kiln_cuda_free(cu, d);
 *     kiln_cuda_close(cu);
 */
struct kiln_cuda; /* one device, its primary context retained */

/* Opens device ordinal. Errors: KILN_ERR_UNSUPPORTED "no CUDA driver (libcuda.so.1: ...)" when
 * the driver library is absent, "no CUDA device (...)" when cuInit or cuDeviceGetCount finds
 * none; KILN_ERR_INVALID for an ordinal out of range; KILN_ERR_BACKEND naming the failed driver
 * call and its error name and string otherwise. Close it after freeing its memory. */
KILN_API enum kiln_status kiln_cuda_open(kiln_ctx *ctx, int ordinal, struct kiln_cuda **out);
KILN_API void             kiln_cuda_close(struct kiln_cuda *cu);      /* NULL is a no-op */
KILN_API const char      *kiln_cuda_arch(const struct kiln_cuda *cu); /* "sm_90" */
KILN_API const char      *kiln_cuda_name(const struct kiln_cuda *cu); /* "NVIDIA H100 ..." */

/* Device memory: *dptr is a device address, at least 256-byte aligned. The driver's
 * out-of-memory error is KILN_ERR_NOMEM; 0 bytes is KILN_ERR_INVALID. kiln_cuda_free ignores 0.
 * Copies are synchronous (they wait for the work queued before them). */
KILN_API enum kiln_status kiln_cuda_alloc(kiln_ctx *ctx, struct kiln_cuda *cu, size_t bytes,
                                          uint64_t *dptr);
KILN_API void             kiln_cuda_free(struct kiln_cuda *cu, uint64_t dptr);
KILN_API enum kiln_status kiln_cuda_upload(kiln_ctx *ctx, struct kiln_cuda *cu, uint64_t dst,
                                           const void *src, size_t bytes);
KILN_API enum kiln_status kiln_cuda_download(kiln_ctx *ctx, struct kiln_cuda *cu, void *dst,
                                             uint64_t src, size_t bytes);
/* Waits for all work on the device's context (cuCtxSynchronize). */
KILN_API enum kiln_status kiln_cuda_sync(kiln_ctx *ctx, struct kiln_cuda *cu);

/* Work to time: queues work on the legacy default stream (a module's kiln_call, a library
 * call), with the device's context current. */
typedef enum kiln_status (*kiln_cuda_work_fn)(kiln_ctx *ctx, void *ud);
/* Times reps calls of fn(ctx, ud) after one untimed warm-up call: an event is recorded before
 * the first timed call and after each, the device is synchronised once at the end, and *ms is
 * the median of the times between consecutive events, in milliseconds. The first failing fn
 * stops it and its status is returned. reps must be positive. */
KILN_API enum kiln_status kiln_cuda_time(kiln_ctx *ctx, struct kiln_cuda *cu, kiln_cuda_work_fn fn,
                                         void *ud, int reps, double *ms);

#ifdef __cplusplus
}
#endif
#endif /* KILN_H */
