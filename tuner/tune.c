/* tuner/tune.c -- the tuning driver: tasks, resuming from the records database, the task
 * scheduler, progress, logs and tuning curves; and applying the best records to a graph.
 *
 * Task scheduler (Ansor's gradient-based allocation): after one warm-up round per task that
 * has nothing measured (a task resumed from the database or the cache has its history), each
 * round goes to the task whose expected reduction of the end-to-end latency estimate
 * (sum over tasks of weight x best time) per trial is largest:
 *     gain_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i)
 * with backward_i the best time's drop per round over the last `window` rounds and forward_i
 * = best_i / trials_i, the optimistic guess that the next trials improve as much as the past
 * ones did on average. Under a time budget the gain is per second instead: divided by the
 * task's wall time per trial in this session. A task converges when CONVERGE_TRIALS of its
 * trials have not made its best 1% faster: under ansor+droplet Droplet then starts from the best
 * (if it has not converged there already), and the task is done once Droplet has converged at
 * its best; under ansor alone it is done at once. A run ends early when every task is done.
 * Under ansor+droplet, a task whose Droplet search has converged goes back to the evolutionary
 * search, and Droplet starts again from any new best it finds; under droplet alone such a task
 * is done.
 *
 * The records cache (opts cache_path): every record stored in the database is stored in the
 * cache too, as it is made. A task whose workload key has records in the cache for the target,
 * that the database does not hold (same schedule, time and timestamp), starts from them: they
 * are copied into the database with strategy "cached:" + theirs, so the database alone makes
 * the same compile, and count as the task's programs (its cost model, population, best and
 * final selection) but not in the trial budget, in this run or a resumed one. A cache that
 * cannot be opened, read or written is one warning naming it, and the run goes on without it.
 *
 * Time budget (opts time_budget_s): no round starts once the time, less the estimated time of
 * the final selections due, is spent; a round is cut to the trials that fit in the time left
 * at the task's pace; the final selections stop at the budget.
 *
 * The cuda target: candidates are timed on the GPU by runner processes (tuner/measure.c), and
 * the search runs over the GPU sketches (tuner/sketch_gpu.c) with GPU features. Before anything
 * is written, a runner is asked for the device: without a CUDA driver or device the session
 * fails up front ("no CUDA driver (...)"), its database untouched; "cuda" without -arch takes
 * the device's architecture (asked of that runner, so this process opens no CUDA context). */
#include "search.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define SCHED_ALPHA  0.2
#define SCHED_WINDOW 3
#define CONFIRM_MAX  4
/* a task has converged when this many of its trials have not made its best CONVERGE_GAIN
 * faster */
#define CONVERGE_TRIALS 128
#define CONVERGE_GAIN   0.01
/* the strategy of a record copied from the records cache: this prefix, then its own */
#define CACHED_PREFIX "cached:"
/* The verdict of a final selection (final_select): the pick, with its robust time */
#define FINAL_PICK "final-pick"
/* A final round whose reference time is above this many times the reference's median is
 * disturbed, and rejected */
#define FINAL_DISTURBED 1.5
/* Finalists this close (relative), or within the reference's spread up to FINAL_NOISE_MAX, are
 * within noise of each other */
#define FINAL_NOISE     0.03
#define FINAL_NOISE_MAX 0.10
/* The least run limit of a candidate: starting its runner and loading its inputs; on the GPU
 * also creating the CUDA context and JIT-compiling the module's PTX (a few hundred ms) */
#define RUN_FLOOR_CPU_S 0.5
#define RUN_FLOOR_GPU_S 5.0

const char *const kiln_strategy_name[3] = {"ansor+droplet", "ansor", "droplet"};

void
kiln_tune_opts_default(struct kiln_tune_opts *o)
{
    memset(o, 0, sizeof *o);
    o->trials = 1000;
    o->droplet_after = 300;
    o->droplet_min_gain = 0.01;
    o->confirm_after = 64;
    o->final_top = 8;
    o->final_rounds = 4;
    o->batch = 16;
    o->population = 256;
    o->generations = 4;
    o->eps_random = 0.05;
    o->seed = 1;
    o->strategy = KILN_STRATEGY_ANSOR_DROPLET;
    kiln_measure_opts_default(&o->measure);
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void warn(const struct tsession *S, const char *fmt, ...) KILN_PRINTF(2, 3);

static void
warn(const struct tsession *S, const char *fmt, ...)
{
    char    msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (S->o->warning)
        S->o->warning(S->o->progress_ud, msg);
    else
        fprintf(stderr, "kiln: warning: %s\n", msg);
}

/* The strategy a record was made by: a record copied from the cache keeps it after the
 * prefix. */
static const char *
strategy_base(const char *s)
{
    if (!s)
        return "";
    return strncmp(s, CACHED_PREFIX, strlen(CACHED_PREFIX)) ? s : s + strlen(CACHED_PREFIX);
}

/* The cache is given up after its first failure (one warning); the context's error, which the
 * failure set, is cleared. */
static void
drop_cache(struct tsession *S, const char *doing)
{
    const struct kiln_error *e = kiln_ctx_error(S->ctx);
    warn(S, "records cache %s: %s: %s; tuning goes on with the records database only",
         S->cache_path, doing, e ? e->msg : "failed");
    kiln_ctx_error_clear(S->ctx);
    kiln_db_close(S->cache);
    S->cache = NULL;
}

/* ---- the measured set of a task ---- */

bool
kiln_ttask_seen(const struct ttask *T, uint64_t h)
{
    if (!T->capseen)
        return false;
    h |= 1; /* 0 marks an empty slot */
    for (uint32_t i = (uint32_t)h & (T->capseen - 1);; i = (i + 1) & (T->capseen - 1)) {
        if (T->seen[i] == h)
            return true;
        if (!T->seen[i])
            return false;
    }
}

static bool
seen_add(struct ttask *T, uint64_t h)
{
    if ((T->nseen + 1) * 2 > T->capseen) {
        uint32_t  ncap = T->capseen ? T->capseen * 2 : 256;
        uint64_t *ns = calloc(ncap, sizeof *ns);
        if (!ns)
            return false;
        for (uint32_t i = 0; i < T->capseen; i++) {
            uint64_t v = T->seen[i];
            if (!v)
                continue;
            uint32_t j = (uint32_t)v & (ncap - 1);
            while (ns[j])
                j = (j + 1) & (ncap - 1);
            ns[j] = v;
        }
        free(T->seen);
        T->seen = ns;
        T->capseen = ncap;
    }
    h |= 1;
    uint32_t j = (uint32_t)h & (T->capseen - 1);
    while (T->seen[j] && T->seen[j] != h)
        j = (j + 1) & (T->capseen - 1);
    if (!T->seen[j]) {
        T->seen[j] = h;
        T->nseen++;
    }
    return true;
}

/* JSON text on one line: newlines and the indentation after them dropped (kiln's JSON has no
 * newline inside strings). */
static void
json_line(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '\n') {
            while (s[1] == ' ')
                s++;
            continue;
        }
        fputc(*s, f);
    }
}

static void
json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Index of the task's program that made this schedule (hash h), or -1. */
static int32_t
find_prog(const struct ttask *T, uint64_t h)
{
    if (!kiln_ttask_seen(T, h))
        return -1;
    for (uint32_t i = 0; i < T->nm; i++)
        if (T->m[i].h == h)
            return (int32_t)i;
    return -1;
}

/* Writes one measurement (time_s: 0 unless it succeeded) to the database, the log and the
 * curve. */
static enum kiln_status
emit(struct tsession *S, struct ttask *T, const struct kiln_prog *p, const char *schedule_json,
     const struct kiln_measure_result *r, double time_s, const char *strategy, bool store)
{
    kiln_ctx   *ctx = T->ctx;
    const char *prog_json = NULL;
    if (p && store) {
        struct kiln_buf b = {0};
        if (kiln_prog_to_json(ctx, &T->sk[p->sketch], p, &b) == KILN_OK)
            prog_json = b.data;
        kiln_ctx_error_clear(ctx);
    }
    if (store) {
        struct kiln_record rec = {.workload = T->t->key,
                                  .target = T->target,
                                  .schedule = schedule_json,
                                  .prog = prog_json,
                                  .time_s = time_s,
                                  .stddev_s = r->stddev_s,
                                  .error = r->error,
                                  .error_msg = r->error != KILN_MEASURE_OK ? r->msg : NULL,
                                  .version = KILN_VERSION,
                                  .machine = S->machine ? S->machine : kiln_machine_desc(ctx),
                                  .timestamp = (int64_t)time(NULL),
                                  .flops = T->t->flops,
                                  .strategy = strategy};
        KILN_TRY(kiln_db_add(S->db, &rec));
        S->trials_done++;
        if (S->cache && kiln_db_add(S->cache, &rec) != KILN_OK)
            drop_cache(S, "writing a record");
    }
    double best = T->best >= 0 ? T->m[T->best].time_s : 0;
    if (store && S->o->log) {
        FILE *f = S->o->log;
        fprintf(f, "{\"task\": \"%s\", \"trial\": %u, \"strategy\": \"%s\", \"time_s\": %.9g, ",
                T->t->key, T->trials, strategy, time_s);
        fprintf(f, "\"gflops\": %.4g, \"best_s\": %.9g, \"build_s\": %.3f, \"repeats\": %u, ",
                time_s > 0 ? T->t->flops / time_s * 1e-9 : 0, best, r->build_s, r->nrepeat);
        fprintf(f, "\"at_s\": %.3f, \"error\": \"%s\", \"msg\": ", now_s() - S->t0,
                kiln_measure_error_name[r->error]);
        json_str(f, r->error != KILN_MEASURE_OK ? r->msg : "");
        fputs(", \"schedule\": ", f);
        json_line(f, schedule_json ? schedule_json : "null");
        fputs("}\n", f);
        fflush(f);
    }
    if (T->curve) {
        fprintf(T->curve, "%u,%.9g,%.9g,%s,%s\n", T->trials, time_s, best, strategy,
                kiln_measure_error_name[r->error]);
        fflush(T->curve);
    }
    return KILN_OK;
}

/* Another measurement of program i: its time becomes the mean of its measurements (the
 * spread the larger of theirs), a failure takes it out; the best is found again. */
static enum kiln_status
merge(struct tsession *S, struct ttask *T, int32_t i, const char *schedule_json,
      const struct kiln_measure_result *r, const char *strategy, bool store)
{
    struct tprog *q = &T->m[i];
    S->nrecorded++;
    T->trials++;
    if (r->error != KILN_MEASURE_OK || !(r->time_s > 0)) {
        T->errors++;
        if (q->error == KILN_MEASURE_OK)
            q->error = r->error != KILN_MEASURE_OK ? r->error : KILN_MEASURE_RUNTIME;
        q->time_s = 0;
    } else if (q->error == KILN_MEASURE_OK) {
        q->time_s = (q->time_s * q->nmeas + r->time_s) / (q->nmeas + 1);
        q->min_s = q->min_s > 0 ? fmin(q->min_s, r->time_s) : r->time_s;
        q->stddev_s = fmax(q->stddev_s, r->stddev_s);
        q->nrepeat += r->nrepeat;
    }
    q->nmeas++;
    T->best = -1;
    for (uint32_t k = 0; k < T->nm; k++)
        if (T->m[k].error == KILN_MEASURE_OK && T->m[k].time_s > 0
            && (T->best < 0 || T->m[k].time_s < T->m[T->best].time_s))
            T->best = (int32_t)k;
    return emit(S, T, q->has_prog ? &q->p : NULL, schedule_json, r,
                r->error == KILN_MEASURE_OK ? r->time_s : 0, strategy, store);
}

enum kiln_status
kiln_ttask_record(struct tsession *S, struct ttask *T, const struct kiln_prog *p,
                  const char *schedule_json, const struct kiln_measure_result *r,
                  const char *strategy, bool store)
{
    kiln_ctx *ctx = T->ctx;
    uint64_t  h = kiln_sched_hash(schedule_json);
    T->finalized = !strcmp(strategy_base(strategy), "final");
    int32_t i = find_prog(T, h);
    if (i >= 0)
        return merge(S, T, i, schedule_json, r, strategy, store);
    if (T->nm == T->capm) {
        uint32_t      ncap = T->capm ? T->capm * 2 : 64;
        struct tprog *nm = realloc(T->m, sizeof *nm * ncap);
        if (!nm)
            return KILN_FAIL(ctx, KILN_ERR_NOMEM, "tune", "out of memory");
        T->m = nm;
        T->capm = ncap;
    }
    struct tprog *q = &T->m[T->nm++];
    memset(q, 0, sizeof *q);
    S->nrecorded++;
    q->time_s = r->error == KILN_MEASURE_OK ? r->time_s : 0;
    q->min_s = q->time_s;
    q->stddev_s = r->stddev_s;
    q->nrepeat = r->nrepeat;
    q->nmeas = 1;
    q->error = r->error;
    q->h = h;
    if (!seen_add(T, h))
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "tune", "out of memory");
    if (p) {
        q->p = *p;
        q->has_prog = true;
        /* the cost model trains on the features of every measured or resumed program */
        kiln_ttask_features(T, p, &q->feat);
    } else if (schedule_json && strcmp(strategy ? strategy : "", "planted")) {
        /* kept to re-measure it by (a planted module's text does not describe what ran) */
        if (!(q->sched = strdup(schedule_json)))
            return KILN_FAIL(ctx, KILN_ERR_NOMEM, "tune", "out of memory");
    }
    T->trials++;
    if (q->error != KILN_MEASURE_OK)
        T->errors++;
    else if (q->time_s > 0 && (T->best < 0 || q->time_s < T->m[T->best].time_s))
        T->best = (int32_t)(T->nm - 1);
    return emit(S, T, p, schedule_json, r, q->time_s, strategy, store);
}

/* ---- resuming ---- */

struct resume {
    struct tsession *S;
    struct ttask    *T;
    enum kiln_status st;
    uint64_t        *keys; /* rec_key of every record of the task in the database (malloc'ed) */
    uint32_t         nkeys, capkeys;
};

/* What tells two records apart (kiln_db_import_jsonl's duplicate test): the schedule, the time
 * and the timestamp; a record copied from the cache keeps all three. */
static uint64_t
rec_key(const struct kiln_record *r)
{
    uint64_t t;
    memcpy(&t, &r->time_s, sizeof t);
    uint64_t h = kiln_sched_hash(r->schedule) ^ (t * 0x9e3779b97f4a7c15ull);
    return h ^ ((uint64_t)r->timestamp * 0xc2b2ae3d27d4eb4full);
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Whether the database holds the record of key k (R->keys sorted). */
static bool
key_known(const struct resume *R, uint64_t k)
{
    return R->nkeys && bsearch(&k, R->keys, R->nkeys, sizeof k, cmp_u64);
}

/* Adds the record to the task, as measured before (nothing is written). */
static bool
take_record(struct resume *R, const struct kiln_record *rec, const char *strategy)
{
    struct ttask *T = R->T;
    if (!strcmp(strategy_base(strategy), FINAL_PICK)) {
        /* a final selection's verdict, not a measurement (no trial): its program takes the
         * verdict's time and is the task's best, as kiln_db_best ranks it */
        int32_t i = find_prog(T, kiln_sched_hash(rec->schedule));
        if (i >= 0 && rec->error == KILN_MEASURE_OK && rec->time_s > 0
            && T->m[i].error == KILN_MEASURE_OK) {
            T->m[i].time_s = rec->time_s;
            T->best = i;
        }
        return true;
    }
    struct kiln_prog           p;
    bool                       has = false;
    struct kiln_measure_result r = {
        .error = rec->error, .time_s = rec->time_s, .stddev_s = rec->stddev_s, .nrepeat = 3};
    if (rec->prog && kiln_prog_from_json(T->ctx, T->sk, T->nsk, rec->prog, &p) == KILN_OK)
        has = true;
    kiln_ctx_error_clear(T->ctx);
    if (!strcmp(strategy_base(strategy), "default") && rec->error == KILN_MEASURE_OK)
        T->default_s = rec->time_s;
    if (strategy != strategy_base(strategy))
        T->cached++;
    R->st = kiln_ttask_record(R->S, T, has ? &p : NULL, rec->schedule, &r, strategy, false);
    return R->st == KILN_OK;
}

static bool
resume_one(void *ud, const struct kiln_record *rec)
{
    struct resume *R = ud;
    if (R->nkeys == R->capkeys) {
        uint32_t  ncap = R->capkeys ? R->capkeys * 2 : 64;
        uint64_t *nk = realloc(R->keys, sizeof *nk * ncap);
        if (!nk) {
            R->st = KILN_FAIL(R->T->ctx, KILN_ERR_NOMEM, "tune", "out of memory");
            return false;
        }
        R->keys = nk;
        R->capkeys = ncap;
    }
    R->keys[R->nkeys++] = rec_key(rec);
    return take_record(R, rec, rec->strategy ? rec->strategy : "");
}

/* A record of the cache: one the database lacks is copied into it, then taken as resumed. */
static bool
cache_one(void *ud, const struct kiln_record *rec)
{
    struct resume *R = ud;
    if (key_known(R, rec_key(rec)))
        return true;
    char strategy[128];
    snprintf(strategy, sizeof strategy, "%s%.100s", CACHED_PREFIX, strategy_base(rec->strategy));
    struct kiln_record copy = *rec;
    copy.strategy = strategy;
    if ((R->st = kiln_db_add(R->S->db, &copy)) != KILN_OK)
        return false;
    return take_record(R, rec, strategy);
}

/* ---- the session ---- */

static enum kiln_status
ensure_measurer(struct tsession *S, struct ttask *T, const struct kiln_target *tgt)
{
    if (T->meas)
        return KILN_OK;
    return kiln_measurer_new(T->ctx, T->t->g, tgt, &S->o->measure, S->o->seed + T->index, &T->meas);
}

static void
update_status(struct ttask *T)
{
    T->status.key = T->t->key;
    T->status.flops = T->t->flops;
    T->status.weight = T->t->weight;
    T->status.trials = T->trials;
    T->status.errors = T->errors;
    T->status.best_s = T->best >= 0 ? T->m[T->best].time_s : 0;
    T->status.model_programs = T->model_n;
    T->status.droplet_rounds = T->droplet_rounds;
    T->status.phase = T->phase == TPHASE_ANSOR     ? "ansor"
                      : T->phase == TPHASE_DROPLET ? "droplet"
                                                   : "done";
}

static double
task_best(const struct ttask *T)
{
    if (T->best >= 0)
        return T->m[T->best].time_s;
    return T->default_s;
}

static void
push_hist(struct ttask *T)
{
    if (T->nhist == T->caphist) {
        uint32_t ncap = T->caphist ? T->caphist * 2 : 64;
        double  *nh = realloc(T->hist, sizeof *nh * ncap);
        if (!nh)
            return; /* the scheduler then sees a shorter history */
        T->hist = nh;
        T->caphist = ncap;
    }
    T->hist[T->nhist++] = task_best(T);
}

/* Seconds a trial of task T takes in this session (its rounds' wall time, or the session's
 * mean before it had one); 0 when nothing was measured yet. */
static double
secs_per_trial(const struct tsession *S, const struct ttask *T)
{
    if (T->spent_n)
        return T->spent_s / T->spent_n;
    double   s = 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < S->ntasks; i++) {
        s += S->tasks[i].spent_s;
        n += S->tasks[i].spent_n;
    }
    return n ? s / n : 0;
}

/* The task scheduler: index of the task to tune next, or -1 when all are done. Under a time
 * budget the gain is per second of the task's trials, not per trial. */
static int32_t
pick_task(const struct tsession *S, struct ttask *T, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) /* warm-up: one round each */
        if (T[i].phase != TPHASE_DONE && T[i].nhist == 0)
            return (int32_t)i;
    int32_t best = -1;
    double  bg = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (T[i].phase == TPHASE_DONE)
            continue;
        double cur = task_best(&T[i]);
        double back = 0, fwd = 0;
        if (T[i].nhist > SCHED_WINDOW && cur > 0)
            back = (T[i].hist[T[i].nhist - 1 - SCHED_WINDOW] - cur) / SCHED_WINDOW;
        if (T[i].trials)
            fwd = cur / T[i].trials;
        if (!(cur > 0))
            fwd = 1e9; /* nothing valid yet: explore it */
        double g = T[i].t->weight * (SCHED_ALPHA * back + (1 - SCHED_ALPHA) * fwd);
        double spt = S->o->time_budget_s > 0 ? secs_per_trial(S, &T[i]) : 0;
        if (spt > 0)
            g /= spt;
        if (g > bg) {
            bg = g;
            best = (int32_t)i;
        }
    }
    return best;
}

/* After a round of T: whether its best has gained CONVERGE_GAIN within its last
 * CONVERGE_TRIALS trials; if not, it has converged (see the top of the file). */
static void
check_converged(const struct tsession *S, struct ttask *T)
{
    double cur = task_best(T);
    if (cur > 0 && (!(T->conv_ref > 0) || cur < T->conv_ref * (1 - CONVERGE_GAIN))) {
        T->conv_ref = cur;
        T->conv_trials = T->trials;
        T->stalled = false;
        return;
    }
    if (T->phase != TPHASE_ANSOR || T->trials - T->conv_trials < CONVERGE_TRIALS)
        return;
    if (S->o->strategy == KILN_STRATEGY_ANSOR_DROPLET && T->best >= 0
        && T->best != T->converged_best)
        T->stalled = true; /* Droplet from the best first (droplet_due) */
    else
        T->phase = TPHASE_DONE;
}

static void
report(struct tsession *S, struct ttask *T, uint32_t n, uint32_t done_at_start)
{
    if (!S->o->progress)
        return;
    struct kiln_tune_task_status *st = calloc(n + 1, sizeof *st);
    if (!st)
        return;
    double est = 0;
    for (uint32_t i = 0; i < n; i++) {
        update_status(&T[i]);
        st[i] = T[i].status;
        est += T[i].t->weight * task_best(&T[i]);
    }
    uint32_t total = S->o->trials;
    uint32_t done = 0;
    for (uint32_t i = 0; i < n; i++)
        done += T[i].trials - T[i].cached;
    double   elapsed = now_s() - S->t0, eta = 0;
    uint32_t now_done = S->trials_done > done_at_start ? S->trials_done - done_at_start : 0;
    if (now_done && done < total)
        eta = elapsed / now_done * (total - done);
    if (S->o->time_budget_s > 0 && (total == UINT32_MAX || eta > S->o->time_budget_s - elapsed))
        eta = fmax(0, S->o->time_budget_s - elapsed);
    struct kiln_tune_progress p = {done, total, n, st, est, elapsed, eta};
    S->o->progress(S->o->progress_ud, &p);
    free(st);
}

/* One curve of a plot: n points (x[i], y[i]), x ascending. */
struct series {
    char          label[64];
    const double *x, *y;
    uint32_t      n;
};

/* A line plot of the series into path (an SVG file): both axes from 0 to the largest value
 * (y: 1 at least when yunit_max), tick labels at both ends. Failing to write is not an error
 * of the run: the records are what matters. */
static void
write_svg(const char *path, const char *xlabel, const char *ylabel, const struct series *s,
          uint32_t ns, bool yunit_max)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    const int W = 720, H = 420, L = 60, B = 40;
    double    xmax = 0, ymax = yunit_max ? 1 : 0;
    for (uint32_t i = 0; i < ns; i++)
        for (uint32_t k = 0; k < s[i].n; k++) {
            xmax = fmax(xmax, s[i].x[k]);
            ymax = fmax(ymax, s[i].y[k]);
        }
    xmax = xmax > 0 ? xmax : 1;
    ymax = ymax > 0 ? ymax : 1;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
            "fill=\"white\"/>\n",
            W, H);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L, H - B,
            W - 10, H - B);
    fprintf(f, "<line x1=\"%d\" y1=\"10\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L, L, H - B);
    fprintf(f, "<text x=\"%d\" y=\"%d\">%s (max %.4g)</text>\n", W / 2 - 60, H - 8, xlabel, xmax);
    fprintf(f, "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\">%s</text>\n", H / 2 + 60,
            H / 2 + 60, ylabel);
    const char *col[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
    for (uint32_t i = 0; i < ns; i++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                col[i % 6]);
        for (uint32_t k = 0; k < s[i].n; k++)
            fprintf(f, "%.1f,%.1f ", L + (W - L - 10) * s[i].x[k] / xmax,
                    10 + (H - B - 10) * (1 - s[i].y[k] / ymax));
        fprintf(f, "\"/>\n<text x=\"%d\" y=\"%u\" fill=\"%s\">%s</text>\n", W - 220, 24 + 16 * i,
                col[i % 6], s[i].label);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\">0</text><text x=\"%d\" y=\"%d\">%.3g</text>\n</svg>\n",
            L - 28, H - B, L - 28, 16, ymax);
    fclose(f);
}

/* curves.svg: every task's curve (best time relative to its first valid time vs trials). */
static void
write_plot(const char *dir, struct ttask *T, uint32_t n)
{
    char           path[4096];
    struct series *s = calloc(n + 1, sizeof *s);
    double        *xy = NULL;
    uint32_t       total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += T[i].nm;
    if (!s || !(xy = malloc(sizeof *xy * 2 * (total + 1)))) {
        free(s);
        return;
    }
    double *at = xy;
    for (uint32_t i = 0; i < n; i++) {
        double first = 0, best = INFINITY;
        snprintf(s[i].label, sizeof s[i].label, "task %s (x%u)", T[i].t->key, T[i].t->weight);
        s[i].x = at;
        s[i].y = at + T[i].nm;
        for (uint32_t k = 0; k < T[i].nm; k++) {
            double t = T[i].m[k].error == KILN_MEASURE_OK ? T[i].m[k].time_s : 0;
            if (t > 0 && first == 0)
                first = t;
            if (t > 0)
                best = fmin(best, t);
            if (first > 0) {
                at[s[i].n] = k + 1;
                at[T[i].nm + s[i].n++] = best / first;
            }
        }
        at += 2 * T[i].nm;
    }
    snprintf(path, sizeof path, "%s/curves.svg", dir);
    write_svg(path, "trials", "best time / first time", s, n, true);
    free(xy);
    free(s);
}

/* ---- the whole model's tuning curve ---- */

static bool
same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev
           && sa.st_ino == sb.st_ino;
}

static enum kiln_status
model_curve_open(struct tsession *S)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.csv", S->o->curve_dir);
    if (!(S->model_csv = fopen(path, "w")))
        return KILN_FAIL(S->ctx, KILN_ERR_INVALID, "tune", "cannot write %s: %s", path,
                         strerror(errno));
    fprintf(S->model_csv, "elapsed_s,trials,latency_s\n");
    fflush(S->model_csv);
    return KILN_OK;
}

/* A point of the whole model's curve: the estimated latency, sum over tasks of weight x the
 * least best time the task has had so far (its default schedule's time before it has another),
 * once every task has a time. Least so far, as Ansor's curves are: the mean of a re-measured
 * best may rise, and the curve does not. trials: this run's. */
static void
model_point(struct tsession *S, uint32_t done_at_start)
{
    double lat = 0;
    for (uint32_t i = 0; i < S->ntasks; i++) {
        struct ttask *T = &S->tasks[i];
        double        b = task_best(T);
        if (b > 0 && (!(T->curve_best > 0) || b < T->curve_best))
            T->curve_best = b;
        if (!(T->curve_best > 0))
            return;
        lat += T->t->weight * T->curve_best;
    }
    if (!S->model_csv || !S->ntasks)
        return;
    double el = now_s() - S->t0;
    fprintf(S->model_csv, "%.3f,%u,%.9g\n", el, S->trials_done - done_at_start, lat);
    fflush(S->model_csv);
    if (S->nmodel == S->capmodel) {
        uint32_t ncap = S->capmodel ? S->capmodel * 2 : 64;
        double  *nt = realloc(S->model_t, sizeof *nt * ncap);
        if (nt)
            S->model_t = nt;
        double *nl = realloc(S->model_lat, sizeof *nl * ncap);
        if (nl)
            S->model_lat = nl;
        if (!nt || !nl)
            return; /* the SVG then ends here; the CSV goes on */
        S->capmodel = ncap;
    }
    S->model_t[S->nmodel] = el / 60;
    S->model_lat[S->nmodel++] = lat * 1e3;
}

/* model.svg: the estimated latency (ms) vs minutes. */
static void
write_model_plot(const struct tsession *S)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.svg", S->o->curve_dir);
    struct series s = {"estimated latency of the whole model", S->model_t, S->model_lat, S->nmodel};
    write_svg(path, "minutes", "latency (ms)", &s, 1, false);
}

/* After a round (or a final selection) of T: its time and trials for its pace, its history
 * for the scheduler, the progress report and the model's curve. */
static void
end_round(struct tsession *S, struct ttask *T, double t0, uint32_t trials0, uint32_t done_at_start)
{
    T->spent_s += now_s() - t0;
    T->spent_n += S->trials_done - trials0;
    push_hist(T);
    report(S, S->tasks, S->ntasks, done_at_start);
    model_point(S, done_at_start);
}

static void
free_tasks(struct ttask *T, uint32_t n)
{
    for (uint32_t i = 0; T && i < n; i++) {
        for (uint32_t k = 0; k < T[i].nm; k++) {
            kiln_feat_free(&T[i].m[k].feat);
            free(T[i].m[k].sched);
        }
        free(T[i].m);
        free(T[i].hist);
        free(T[i].seen);
        kiln_measurer_free(T[i].meas);
        kiln_cm_free(T[i].cm);
        if (T[i].curve)
            fclose(T[i].curve);
        if (T[i].rank_curve)
            fclose(T[i].rank_curve);
    }
    free(T);
}

static enum kiln_status
setup_task(struct tsession *S, struct ttask *T, struct kiln_task *task, uint32_t index,
           const struct kiln_hw *hw)
{
    kiln_ctx *ctx = S->ctx;
    T->t = task;
    T->index = index;
    T->ctx = ctx;
    T->hw = hw;
    T->target = S->target;
    T->best = -1;
    T->center_m = -1;
    T->converged_best = -1;
    T->phase = S->o->strategy == KILN_STRATEGY_DROPLET ? TPHASE_DROPLET : TPHASE_ANSOR;
    T->rng = kiln_rng_new(S->o->seed * 0x9e3779b97f4a7c15ull + task->hash);
    KILN_TRY(kiln_sketches_generate(ctx, task->g, hw, &T->sk, &T->nsk));
    if (!T->nsk)
        return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "tune", "task %s has no sketch", task->key);
    T->cm = kiln_cm_new(ctx, S->o->seed + index);
    if (!T->cm)
        return ctx->err.status ? ctx->err.status : KILN_ERR_NOMEM;
    struct resume    R = {.S = S, .T = T, .st = KILN_OK};
    enum kiln_status st = kiln_db_each(S->db, task->key, S->target, resume_one, &R);
    if (st == KILN_OK)
        st = R.st;
    if (st == KILN_OK && S->cache) {
        if (R.nkeys) /* qsort and bsearch take no NULL array, even of 0 elements */
            qsort(R.keys, R.nkeys, sizeof *R.keys, cmp_u64);
        if (kiln_db_each(S->cache, task->key, S->target, cache_one, &R) != KILN_OK
            && R.st == KILN_OK)
            drop_cache(S, "reading records");
        st = R.st;
    }
    free(R.keys);
    KILN_TRY(st);
    KILN_TRY(kiln_db_add_task_graph(S->db, task, S->target)); /* to featurise records later */
    if (T->trials)
        push_hist(T); /* its history: no warm-up round */
    if (S->o->curve_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/task%u_%s.csv", S->o->curve_dir, index, task->key);
        T->curve = fopen(path, "w");
        if (!T->curve)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "tune", "cannot write %s: %s", path,
                             strerror(errno));
        fprintf(T->curve, "trial,time_s,best_s,strategy,error\n");
        snprintf(path, sizeof path, "%s/rank%u_%s.csv", S->o->curve_dir, index, task->key);
        if (!(T->rank_curve = fopen(path, "w")))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "tune", "cannot write %s: %s", path,
                             strerror(errno));
        fprintf(T->rank_curve, "trial,programs,spearman\n");
        for (uint32_t k = 0; k < T->nm; k++) { /* the resumed history first */
            double best = INFINITY;
            for (uint32_t j = 0; j <= k; j++)
                if (T->m[j].error == KILN_MEASURE_OK && T->m[j].time_s > 0)
                    best = fmin(best, T->m[j].time_s);
            fprintf(T->curve, "%u,%.9g,%.9g,resumed,%s\n", k + 1, T->m[k].time_s,
                    isfinite(best) ? best : 0, kiln_measure_error_name[T->m[k].error]);
        }
    }
    return KILN_OK;
}

/* Measures a schedule given as text (no program) and records it under strategy. */
static enum kiln_status
measure_schedule(struct tsession *S, struct ttask *T, const char *json, const char *strategy,
                 struct kiln_measure_result *r)
{
    struct kiln_measure_input in = {.schedule_json = json, .check = true};
    KILN_TRY(kiln_measure(T->meas, &in, 1, r));
    return kiln_ttask_record(S, T, NULL, json, r, strategy, true);
}

/* ---- final selection ---- */

/* A program that ran and can be measured again (it has a program, or a schedule's text). */
static bool
remeasurable(const struct tprog *q)
{
    return q->error == KILN_MEASURE_OK && q->time_s > 0 && (q->has_prog || q->sched);
}

/* The task's fastest remeasurable programs, fastest first: up to max indices into T->m. */
static uint32_t
final_pick(const struct ttask *T, uint32_t max, int32_t *idx)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < T->nm; i++) {
        const struct tprog *q = &T->m[i];
        if (!remeasurable(q))
            continue;
        uint32_t j = n < max ? n++ : max;
        for (; j > 0 && T->m[idx[j - 1]].time_s > q->time_s; j--)
            if (j < max)
                idx[j] = idx[j - 1];
        if (j < max)
            idx[j] = (int32_t)i;
    }
    return n;
}

static bool
final_due(const struct tsession *S, const struct ttask *T)
{
    return S->o->final_top && S->o->final_rounds && T->trials >= S->o->confirm_after
           && !T->finalized && T->best >= 0;
}

/* Trials the final selections due will take: kept out of the search's budget. */
static uint32_t
final_reserve(const struct tsession *S)
{
    uint32_t r = 0;
    for (uint32_t i = 0; i < S->ntasks; i++) {
        const struct ttask *T = &S->tasks[i];
        if (!final_due(S, T))
            continue;
        uint32_t ok = 0;
        for (uint32_t k = 0; k < T->nm && ok < S->o->final_top; k++)
            ok += remeasurable(&T->m[k]);
        r += (ok ? ok + 1 : 0) * S->o->final_rounds; /* the reference once more per round */
    }
    return r;
}

/* Trials left in the budget. */
static uint32_t
budget_left(const struct tsession *S)
{
    return S->trials_done < S->o->trials ? S->o->trials - S->trials_done : 0;
}

/* Trials left to the search and the confirmations: the budget less the final selections'. */
static uint32_t
search_left(const struct tsession *S)
{
    uint32_t left = budget_left(S), r = final_reserve(S);
    return left > r ? left - r : 0;
}

/* Seconds left in the time budget (INFINITY without one). */
static double
time_left(const struct tsession *S)
{
    return S->o->time_budget_s > 0 ? S->o->time_budget_s - (now_s() - S->t0) : INFINITY;
}

/* Seconds left to the search: the time budget less the final selections' estimated time. */
static double
search_time_left(const struct tsession *S)
{
    double left = time_left(S);
    if (!isfinite(left))
        return left;
    for (uint32_t i = 0; i < S->ntasks; i++) {
        const struct ttask *T = &S->tasks[i];
        if (!final_due(S, T))
            continue;
        uint32_t ok = 0;
        for (uint32_t k = 0; k < T->nm && ok < S->o->final_top; k++)
            ok += remeasurable(&T->m[k]);
        left -= (ok ? ok + 1 : 0) * S->o->final_rounds * secs_per_trial(S, T);
    }
    return left;
}

/* A new best is measured once more before it is trusted, and its time becomes the mean of the
 * two: the lowest of hundreds of noisy times is biased low (a matmul's best, 185 GFLOP/s as
 * its tuning run timed it, ran at 137-162 when timed again), and a program whose fast time
 * was luck should not become the best, nor Droplet's centre. When the mean puts another
 * program first, that one is re-measured in turn, up to CONFIRM_MAX per round. Only from
 * confirm_after trials of the task on: a whole network's tasks get a few dozen trials each,
 * where a re-measurement per new best would take a tenth of the budget. */
static enum kiln_status
confirm_best(struct tsession *S, struct ttask *T)
{
    for (int k = 0; k < CONFIRM_MAX; k++) {
        if (T->best < 0 || T->trials < S->o->confirm_after || !search_left(S)
            || (S->o->stop && *S->o->stop))
            return KILN_OK;
        const struct tprog *b = &T->m[T->best];
        if (b->nmeas >= 2 || (!b->has_prog && !b->sched))
            return KILN_OK;
        if (b->has_prog) {
            struct kiln_prog p = b->p;
            uint32_t         done = 0;
            KILN_TRY(kiln_search_measure(S, T, &p, 1, "confirm", &done));
            if (!done)
                return KILN_OK;
            continue;
        }
        /* the default schedule, or an imported one (merging keeps the string where it is) */
        struct kiln_measure_result r;
        KILN_TRY(measure_schedule(S, T, b->sched, "confirm", &r));
    }
    return KILN_OK;
}

/* ansor+droplet: Droplet starts once droplet_after programs are measured (or the task has
 * stalled before that), and again whenever the evolutionary search has found a new best since
 * Droplet last converged. */
static bool
droplet_due(const struct kiln_tune_opts *o, const struct ttask *T)
{
    return o->strategy == KILN_STRATEGY_ANSOR_DROPLET && T->phase == TPHASE_ANSOR
           && (T->trials >= o->droplet_after || T->stalled) && T->best >= 0
           && T->best != T->converged_best;
}

/* The default schedule is every task's first trial: the baseline tuning must beat. */
static enum kiln_status
measure_default(struct tsession *S, struct ttask *T)
{
    struct kiln_measure_result r;
    /* on the GPU the default loop nest is one thread per kernel: it gets the floor's limit */
    if (S->gpu)
        kiln_measurer_set_run_timeout(T->meas, fmin(S->o->measure.run_timeout_s, RUN_FLOOR_GPU_S));
    KILN_TRY(measure_schedule(S, T, "{\"steps\": []}", "default", &r));
    if (r.error == KILN_MEASURE_OK)
        T->default_s = r.time_s;
    for (uint32_t i = 0; T->index == 0 && i < S->o->nplant; i++) {
        struct kiln_measure_input pin = {.check = true, .so_path = S->o->plant[i]};
        char                      js[600];
        snprintf(js, sizeof js, "{\"steps\": [], \"planted\": \"%.500s\"}", S->o->plant[i]);
        KILN_TRY(kiln_measure(T->meas, &pin, 1, &r));
        KILN_TRY(kiln_ttask_record(S, T, NULL, js, &r, "planted", true));
    }
    return KILN_OK;
}

/* ---- the final selection's verdict ---- */

/* A value of a sorted array: its median (the mean of the middle two for an even count). */
static double
median_sorted(const double *v, uint32_t n)
{
    return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The outermost parallel loops of a loop nest: *n counts them, and *balanced becomes false
 * when one's extent is neither a multiple of threads nor at least 4 x threads (or is not a
 * constant). */
static void
par_walk(kiln_ctx *ctx, const struct kiln_stmt *s, int threads, uint32_t *n, bool *balanced)
{
    if (!s)
        return;
    switch (s->kind) {
    case KILN_STMT_FOR:
        if (s->u.for_.loop == KILN_LOOP_PARALLEL) {
            double e = 0;
            (*n)++;
            if (!kiln_expr_is_const(ctx, s->u.for_.extent, &e)
                || !(e >= 4.0 * threads || (e >= threads && fmod(e, threads) == 0)))
                *balanced = false;
            return;
        }
        par_walk(ctx, s->u.for_.body, threads, n, balanced);
        return;
    case KILN_STMT_SEQ:
        for (uint32_t i = 0; i < s->u.seq.n; i++)
            par_walk(ctx, s->u.seq.item[i], threads, n, balanced);
        return;
    case KILN_STMT_IF:
        par_walk(ctx, s->u.if_.then, threads, n, balanced);
        par_walk(ctx, s->u.if_.els, threads, n, balanced);
        return;
    case KILN_STMT_LET:
        par_walk(ctx, s->u.let.body, threads, n, balanced);
        return;
    case KILN_STMT_ALLOC:
        par_walk(ctx, s->u.alloc.body, threads, n, balanced);
        return;
    default:
        return;
    }
}

/* Whether schedule json of T's graph balances the cores: it has a parallel loop, and every
 * outermost one has a multiple of the threads, or at least 4 x the threads, iterations (a
 * conv whose parallel loop had two iterations on two threads doubled its time whenever
 * either core was busy). False when it does not lower, and on the GPU. */
static bool
balanced_par(const struct tsession *S, struct ttask *T, const char *json)
{
    if (S->gpu || !json)
        return false;
    kiln_ctx            *ctx = T->ctx;
    int                  threads = S->o->measure.threads > 0 ? S->o->measure.threads
                                   : T->hw->num_cores > 0    ? T->hw->num_cores
                                                             : 1;
    struct kiln_scratch  sc = kiln_scratch_begin(ctx);
    struct kiln_schedule sched = {0};
    struct kiln_func    *f = NULL;
    uint32_t             n = 0;
    bool                 ok = true;
    if (kiln_sched_from_json(ctx, json, strlen(json), &sched) == KILN_OK
        && kiln_lower(ctx, T->t->g, &sched, &f) == KILN_OK)
        par_walk(ctx, f->body, threads, &n, &ok);
    kiln_ctx_error_clear(ctx);
    kiln_scratch_end(ctx, sc);
    return n && ok;
}

/* Stores the final selection's verdict on program q of T: a record of its schedule with
 * strategy FINAL_PICK and the robust time, which kiln_db_best ranks first (it is not a
 * measurement: no trial). The log gets it with why, in "msg". */
static enum kiln_status
store_verdict(struct tsession *S, struct ttask *T, const struct tprog *q, const char *json,
              double time_s, double spread_s, const char *why)
{
    kiln_ctx   *ctx = T->ctx;
    const char *prog_json = NULL;
    if (q->has_prog) {
        struct kiln_buf b = {0};
        if (kiln_prog_to_json(ctx, &T->sk[q->p.sketch], &q->p, &b) == KILN_OK)
            prog_json = b.data;
        kiln_ctx_error_clear(ctx);
    }
    struct kiln_record rec = {.workload = T->t->key,
                              .target = T->target,
                              .schedule = json,
                              .prog = prog_json,
                              .time_s = time_s,
                              .stddev_s = spread_s,
                              .error = KILN_MEASURE_OK,
                              .version = KILN_VERSION,
                              .machine = S->machine ? S->machine : kiln_machine_desc(ctx),
                              .timestamp = (int64_t)time(NULL),
                              .flops = T->t->flops,
                              .strategy = FINAL_PICK};
    KILN_TRY(kiln_db_add(S->db, &rec));
    if (S->cache && kiln_db_add(S->cache, &rec) != KILN_OK)
        drop_cache(S, "writing a record");
    if (S->o->log) {
        FILE *f = S->o->log;
        fprintf(f, "{\"task\": \"%s\", \"trial\": %u, \"strategy\": \"%s\", \"time_s\": %.9g, ",
                T->t->key, T->trials, FINAL_PICK, time_s);
        fprintf(f, "\"gflops\": %.4g, \"best_s\": %.9g, \"error\": \"ok\", \"msg\": ",
                T->t->flops / time_s * 1e-9, time_s);
        json_str(f, why);
        fputs(", \"schedule\": ", f);
        json_line(f, json);
        fputs("}\n", f);
        fflush(f);
    }
    return KILN_OK;
}

/* The end of a task's tuning: its final_top fastest programs (the finalists) are measured
 * final_rounds times more, round by round: each round measures every finalist once, so that a
 * slow spell of the machine falls on all of them alike, and the reference (the fastest
 * finalist) once more at its end. The search's best is the lowest of hundreds of noisy times
 * and so biased low: a conv 1x1 best timed at 84.5 and 87.6 us by the tuner ran at 95-163 us
 * when the same measurer timed it twelve times more, and at 128 us in the benchmark. And a
 * mean is not robust: a matmul timed at 7.25 ms was re-measured at 17-28 ms under load, and
 * the mean stored 17.1 ms as the best.
 *
 * The verdict (tuner/README.md): a round is disturbed, and rejected, when either of its
 * reference times is above FINAL_DISTURBED x the median of all the reference's times in the
 * selection (when that rejects every round, the rounds whose larger reference time is least
 * are kept); a finalist's time is the median of its times in the rounds kept. The pick is
 * the fastest finalist, unless its parallel loops do not balance the cores and a finalist
 * that does is within noise of it (FINAL_NOISE, or the reference's own spread over the rounds
 * kept, up to FINAL_NOISE_MAX). The verdict is stored as a FINAL_PICK record, and a pick
 * slower than the search's best single time by more than noise is a warning saying why. */
static enum kiln_status
final_select(struct tsession *S, struct ttask *T)
{
    enum { MAXTOP = 64, MAXROUND = 64 };
    int32_t          idx[MAXTOP];
    uint32_t         n = final_pick(T, S->o->final_top < MAXTOP ? S->o->final_top : MAXTOP, idx);
    uint32_t         R = S->o->final_rounds < MAXROUND ? S->o->final_rounds : MAXROUND;
    char            *js[MAXTOP] = {0};
    double          *t = calloc((size_t)MAXTOP * MAXROUND, sizeof *t); /* t[k * MAXROUND + r] */
    double           ref0[MAXROUND] = {0}, ref1[MAXROUND] = {0};
    uint32_t         rounds = 0;
    enum kiln_status st = KILN_OK;
    kiln_ctx        *ctx = T->ctx;
    if (!t)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "tune", "out of memory");
    /* the search's best single time, before the final rounds add theirs */
    int32_t single = -1;
    for (uint32_t i = 0; i < T->nm; i++)
        if (T->m[i].error == KILN_MEASURE_OK && T->m[i].min_s > 0
            && (single < 0 || T->m[i].min_s < T->m[single].min_s))
            single = (int32_t)i;
    double   single_s = single >= 0 ? T->m[single].min_s : 0;
    uint32_t nf = 0;
    for (uint32_t k = 0; k < n; k++) {
        const struct tprog *q = &T->m[idx[k]];
        js[nf] = q->has_prog ? kiln_ttask_schedule_json(T, &q->p) : strdup(q->sched);
        if (js[nf]) /* (else out of memory, or a program that no longer emits: left out) */
            idx[nf++] = idx[k];
    }
    n = nf;
    /* round r: the reference (finalist 0), every other finalist, the reference again */
    for (uint32_t r = 0; r < R && n && st == KILN_OK; r++) {
        struct kiln_measure_input  in[MAXTOP + 1];
        struct kiln_measure_result res[MAXTOP + 1];
        if (budget_left(S) < n + 1 || (S->o->stop && *S->o->stop) || time_left(S) <= 0)
            break;
        for (uint32_t k = 0; k <= n; k++)
            in[k] = (struct kiln_measure_input){.schedule_json = js[k < n ? k : 0], .check = true};
        if ((st = kiln_measure(T->meas, in, n + 1, res)) != KILN_OK)
            break;
        for (uint32_t k = 0; k <= n && st == KILN_OK; k++) {
            uint32_t f = k < n ? k : 0;
            if (S->o->final_hook)
                S->o->final_hook(S->o->final_hook_ud, r, k, k == 0 || k == n, js[f], &res[k]);
            double v = res[k].error == KILN_MEASURE_OK ? res[k].time_s : 0;
            if (k == 0)
                ref0[r] = v;
            else if (k == n)
                ref1[r] = v;
            /* the reference's time in the round: the mean of its two */
            t[f * MAXROUND + r] = k < n ? v : t[r] > 0 && v > 0 ? 0.5 * (t[r] + v) : 0;
            struct kiln_prog p = T->m[idx[f]].p;
            st = kiln_ttask_record(S, T, T->m[idx[f]].has_prog ? &p : NULL, js[f], &res[k], "final",
                                   true);
        }
        if (st == KILN_OK)
            rounds++;
    }
    /* disturbed rounds */
    bool     keep[MAXROUND];
    double   rt[2 * MAXROUND], refmax[MAXROUND];
    uint32_t nrt = 0, nkept = 0;
    char     rejected[256] = "";
    for (uint32_t r = 0; r < rounds; r++) {
        refmax[r] = ref0[r] > 0 && ref1[r] > 0 ? fmax(ref0[r], ref1[r]) : 0;
        if (refmax[r] > 0) {
            rt[nrt++] = ref0[r];
            rt[nrt++] = ref1[r];
        }
    }
    qsort(rt, nrt, sizeof *rt, cmp_double);
    double ref_med = median_sorted(rt, nrt), least = INFINITY;
    for (uint32_t r = 0; r < rounds; r++) {
        keep[r] = !(refmax[r] > FINAL_DISTURBED * ref_med);
        nkept += keep[r];
        if (refmax[r] > 0)
            least = fmin(least, refmax[r]);
    }
    for (uint32_t r = 0; r < rounds && !nkept; r++)
        nkept += keep[r] = !(refmax[r] > least);
    for (uint32_t r = 0; r < rounds; r++)
        if (!keep[r]) {
            size_t len = strlen(rejected);
            snprintf(rejected + len, sizeof rejected - len, "%s%u", len ? ", " : "", r + 1);
        }
    /* each finalist's median over the rounds kept; the reference's spread over them */
    double   med[MAXTOP], spread = 0;
    uint32_t nk[MAXTOP];
    for (uint32_t k = 0; k < n; k++) {
        double   v[MAXROUND];
        uint32_t m = 0;
        bool     failed = T->m[idx[k]].error != KILN_MEASURE_OK;
        for (uint32_t r = 0; r < rounds; r++) {
            double x = t[k * MAXROUND + r];
            failed |= !(x > 0);
            if (keep[r] && x > 0)
                v[m++] = x;
        }
        qsort(v, m, sizeof *v, cmp_double);
        med[k] = failed ? 0 : median_sorted(v, m);
        nk[k] = m;
        if (k == 0 && m && med[0] > 0)
            spread = (v[m - 1] - v[0]) / med[0];
    }
    double  noise = fmin(fmax(FINAL_NOISE, spread), FINAL_NOISE_MAX);
    int32_t fast = -1, pick = -1;
    for (uint32_t k = 0; k < n; k++)
        if (med[k] > 0 && (fast < 0 || med[k] < med[fast]))
            fast = (int32_t)k;
    char why[512] = "";
    if (fast >= 0) {
        pick = fast;
        if (!balanced_par(S, T, js[fast]))
            for (uint32_t k = 0; k < n; k++)
                if ((int32_t)k != fast && med[k] > 0 && med[k] <= med[fast] * (1 + noise)
                    && (pick == fast || med[k] < med[pick]) && balanced_par(S, T, js[k]))
                    pick = (int32_t)k;
        size_t len = (size_t)snprintf(
            why, sizeof why,
            "median of %u of %u final rounds (rounds rejected: %s; reference "
            "median %.4g us, limit %.2fx)",
            nk[pick], rounds, *rejected ? rejected : "none", ref_med * 1e6, FINAL_DISTURBED);
        if (pick != fast && len < sizeof why)
            len += (size_t)snprintf(why + len, sizeof why - len,
                                    "; its parallel loops balance the cores, and the fastest "
                                    "finalist's (%.4g us) do not and are within %.1f%%",
                                    med[fast] * 1e6, noise * 100);
        struct tprog *q = &T->m[idx[pick]];
        if (single >= 0 && med[pick] > single_s * (1 + noise) && len < sizeof why) {
            const char *what = "it was not a finalist";
            char        buf[160];
            for (uint32_t k = 0; k < n; k++)
                if (idx[k] == single) {
                    snprintf(buf, sizeof buf, "its final rounds' median was %.4g us", med[k] * 1e6);
                    what = med[k] > 0 ? buf : "it failed in the final rounds";
                }
            if (single == idx[pick])
                what = "that time was its lowest, and the final rounds measured it slower";
            len += (size_t)snprintf(why + len, sizeof why - len,
                                    "; slower than the %.4g us program %016llx timed once in "
                                    "the search: %s",
                                    single_s * 1e6, (unsigned long long)T->m[single].h, what);
            warn(S,
                 "task %s: the final pick, program %016llx at %.4g us (%s), is slower than a "
                 "program measured earlier",
                 T->t->key, (unsigned long long)q->h, med[pick] * 1e6, why);
        }
        double sd = 0;
        for (uint32_t r = 0; r < rounds; r++) {
            double x = t[(uint32_t)pick * MAXROUND + r];
            if (keep[r] && x > 0)
                sd += (x - med[pick]) * (x - med[pick]);
        }
        sd = nk[pick] > 1 ? sqrt(sd / (nk[pick] - 1)) : 0;
        q->time_s = med[pick];
        T->best = idx[pick];
        st = store_verdict(S, T, q, js[pick], med[pick], sd, why);
    }
    for (uint32_t k = 0; k < MAXTOP; k++)
        free(js[k]);
    free(t);
    return st;
}

/* Whether target spec names the cuda target (its first word), decided without parsing it:
 * parsing "cuda" without -arch opens the device in this process to ask its architecture. */
static bool
spec_is_cuda(const char *spec)
{
    spec += strspn(spec, " \t\n");
    return !strncmp(spec, "cuda", 4) && (!spec[4] || strchr(" \t\n", spec[4]));
}

/* The session's target: spec parsed, and for the cuda target the device candidates are timed
 * on (a runner's probe; none is an error). *machine: the device, for the records (NULL on the
 * CPU: the host's description). */
static enum kiln_status
session_target(kiln_ctx *ctx, const struct kiln_tune_opts *o, struct kiln_target *tgt,
               const char **machine)
{
    const char *spec = o->target ? o->target : "llvm";
    *machine = NULL;
    if (!spec_is_cuda(spec))
        return kiln_cg_target_parse(ctx, spec, tgt);
    /* the options first (parsing asks no device: the runner's probe does) */
    bool has_arch = strstr(spec, "-arch=") != NULL;
    KILN_TRY(kiln_cg_target_parse_arch(ctx, spec, "sm_80", tgt));
    struct kiln_measure_device dev;
    KILN_TRY(kiln_measure_cuda_device(ctx, &o->measure, &dev));
    if (!has_arch)
        KILN_TRY(kiln_cg_target_parse_arch(ctx, spec, dev.arch, tgt));
    if (atoi(tgt->cpu + 3) > atoi(dev.arch + 3))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "tune",
                         "target '%s': %s is newer than the device's %s (%s), which cannot load "
                         "its PTX (use -arch=%s, or leave -arch out)",
                         spec, tgt->cpu, dev.arch, dev.name, dev.arch);
    *machine = kiln_arena_printf(ctx, "%s (%s)", dev.name, dev.arch);
    return *machine ? KILN_OK : ctx->err.status;
}

enum kiln_status
kiln_tune(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_tune_opts *o)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (!o->db_path)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "tune", "no records database given");
    struct kiln_target tgt;
    struct kiln_hw     hw;
    const char        *machine;
    KILN_TRY(session_target(ctx, o, &tgt, &machine));
    if (o->curve_dir && mkdir(o->curve_dir, 0777) && errno != EEXIST)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "tune", "cannot create %s: %s", o->curve_dir,
                         strerror(errno));
    kiln_hw_from_target(&tgt, &hw);
    struct kiln_tasks tasks;
    KILN_TRY(kiln_tasks_extract(ctx, g, &tasks));
    struct tsession S = {.ctx = ctx,
                         .o = o,
                         .target = kiln_cg_target_str(ctx, &tgt),
                         .machine = machine,
                         .gpu = hw.gpu,
                         .t0 = now_s()};
    KILN_TRY(kiln_db_open(ctx, o->db_path, &S.db));
    if (o->cache_path && *o->cache_path && !same_file(o->db_path, o->cache_path)) {
        S.cache_path = o->cache_path;
        if (kiln_db_open(ctx, o->cache_path, &S.cache) != KILN_OK)
            drop_cache(&S, "cannot use it");
    }
    struct ttask    *T = calloc(tasks.n + 1, sizeof *T);
    enum kiln_status st = T ? KILN_OK : KILN_FAIL(ctx, KILN_ERR_NOMEM, "tune", "out of memory");
    uint32_t         nt = 0;
    S.tasks = T;
    for (uint32_t i = 0; st == KILN_OK && i < tasks.n; i++, nt++, S.ntasks = nt)
        st = setup_task(&S, &T[i], &tasks.task[i], i, &hw);
    uint32_t done_at_start = 0;
    for (uint32_t i = 0; i < nt; i++)
        done_at_start += T[i].trials - T[i].cached;
    S.trials_done = done_at_start;
    uint32_t start = done_at_start;
    if (st == KILN_OK && o->curve_dir)
        st = model_curve_open(&S);
    report(&S, T, nt, start);
    model_point(&S, start);
    uint32_t left;
    while (st == KILN_OK && (left = search_left(&S)) && !(o->stop && *o->stop)
           && search_time_left(&S) > 0) {
        int32_t i = pick_task(&S, T, nt);
        if (i < 0)
            break; /* every task converged */
        struct ttask *t = &T[i];
        if ((st = ensure_measurer(&S, t, &tgt)) != KILN_OK)
            break;
        uint32_t n = o->batch ? o->batch : 16, done = 0, trials0 = S.trials_done;
        double   t0 = now_s(), spt = secs_per_trial(&S, t);
        n = n < left ? n : left;
        if (spt > 0 && isfinite(search_time_left(&S))) {
            /* as many trials as fit in the time left at the task's pace */
            double fit = ceil(search_time_left(&S) / spt);
            n = fit < n ? (uint32_t)fmax(fit, 1) : n;
        }
        if (t->default_s == 0 && t->trials == 0) {
            st = measure_default(&S, t);
            n = n > 1 ? n - 1 : 0;
            if (isfinite(search_time_left(&S))) {
                /* the task's first round had only the session's pace, which a task much slower
                 * to build or run than the others exceeds many times over: its default
                 * program's build and measurement is the better guess of its pace */
                double pace = fmax(spt, now_s() - t0), left_s = search_time_left(&S);
                double fit = left_s > 0 ? ceil(left_s / pace) : 0;
                n = fit < n ? (uint32_t)fit : n;
            }
            if (st != KILN_OK || !n) {
                end_round(&S, t, t0, trials0, start);
                continue;
            }
        }
        /* a candidate about 10x slower than the best is hopeless: its check call, warm-up and
         * first repeat alone would take 30x the best time, so stop it there (not below 0.5 s,
         * which covers starting the runner and loading the inputs: with a floor of 1 s, 81 of
         * 300 matmul 1024^3 trials timed out, a quarter of that task's tuning time) */
        double best = task_best(t), limit = o->measure.run_timeout_s;
        if (best > 0)
            limit = fmin(limit, fmax(S.gpu ? RUN_FLOOR_GPU_S : RUN_FLOOR_CPU_S, 30 * best));
        kiln_measurer_set_run_timeout(t->meas, limit);
        /* and one 4x slower on its first call gets a single repeat: most sampled programs
         * are, and their warm-up and repeats were most of the tuning time (not below 5 ms:
         * a first call may include starting the thread pool, and a repeat lasts at least
         * min_repeat_ms anyway) */
        kiln_measurer_set_hopeless(t->meas, best > 0 ? fmax(4 * best, 5e-3) : 0);
        if (droplet_due(o, t))
            t->phase = TPHASE_DROPLET;
        enum tphase phase = t->phase;
        int32_t     center = t->center_m;
        if (t->phase == TPHASE_DROPLET)
            st = kiln_search_droplet_round(&S, t, n, &done);
        else
            st = kiln_search_ansor_round(&S, t, n, &done);
        if (st == KILN_OK && done == 0 && t->phase == phase && t->center_m == center) {
            /* the space is exhausted: nothing new to measure, and Droplet neither moved nor
             * converged (a move or a convergence on programs measured before is progress) */
            t->phase = TPHASE_DONE;
        }
        if (st == KILN_OK)
            st = confirm_best(&S, t);
        end_round(&S, t, t0, trials0, start);
        check_converged(&S, t);
    }
    for (uint32_t i = 0; i < nt && st == KILN_OK && !(o->stop && *o->stop) && time_left(&S) > 0;
         i++)
        if (final_due(&S, &T[i]) && (st = ensure_measurer(&S, &T[i], &tgt)) == KILN_OK) {
            double   t0 = now_s();
            uint32_t trials0 = S.trials_done;
            st = final_select(&S, &T[i]);
            end_round(&S, &T[i], t0, trials0, start);
        }
    report(&S, T, nt, start);
    if (o->curve_dir) {
        write_plot(o->curve_dir, T, nt);
        write_model_plot(&S);
    }
    if (S.model_csv)
        fclose(S.model_csv);
    free(S.model_t);
    free(S.model_lat);
    free_tasks(T, nt);
    kiln_db_close(S.cache);
    kiln_db_close(S.db);
    return st;
}

/* ---- applying records ---- */

/* Records of a task tried before it keeps the default schedule: a database full of records
 * that do not fit costs a bounded number of lowerings. */
#define KILN_TUNED_MAX_TRIES 100

/* Lowers g under s; on failure *why (ctx-owned) says why. The context's error is cleared. */
static bool
lowers(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_schedule *s, const char **why)
{
    struct kiln_scratch sc = kiln_scratch_begin(ctx);
    struct kiln_func   *f;
    bool                ok = kiln_lower(ctx, g, s, &f) == KILN_OK;
    char                msg[sizeof ctx->err.msg] = "";
    if (!ok)
        snprintf(msg, sizeof msg, "%s", kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->msg : "");
    kiln_ctx_error_clear(ctx);
    kiln_scratch_end(ctx, sc);
    if (!ok && why)
        *why = kiln_arena_strdup(ctx, msg);
    return ok;
}

/* Applying one task's records, best first, to the schedule built so far. */
struct apply {
    kiln_ctx                   *ctx;
    const struct kiln_graph    *g;
    const struct kiln_task     *t;
    const struct kiln_schedule *base;    /* the other tasks' steps so far */
    struct kiln_schedule        full;    /* base + the first record applying to every occurrence */
    struct kiln_schedule        partial; /* base + the first applying to some occurrences */
    struct kiln_tuned_task     *info;
    int64_t                     partial_id;
    double                      partial_time;
    uint32_t                    tries;
    enum kiln_status            st;
};

static void
skip(struct apply *A, const struct kiln_record *r, const char *why)
{
    if (!A->info->skipped++)
        A->info->skip_why = kiln_arena_printf(A->ctx, "record %lld: %s", (long long)r->id, why);
}

static bool
apply_one(void *ud, const struct kiln_record *r, const char *bad)
{
    struct apply *A = ud;
    kiln_ctx     *ctx = A->ctx;
    if (A->tries++ >= KILN_TUNED_MAX_TRIES)
        return false;
    if (bad) {
        skip(A, r, bad);
        return true;
    }
    struct kiln_schedule s = {0};
    if (kiln_sched_from_json(ctx, r->schedule, strlen(r->schedule), &s) != KILN_OK) {
        /* a record this version cannot read */
        const char *why = kiln_arena_printf(ctx, "%s", kiln_ctx_error(ctx)->msg);
        kiln_ctx_error_clear(ctx);
        skip(A, r, why);
        return true;
    }
    struct kiln_schedule cur = {0};
    for (uint32_t j = 0; j < A->base->nstep && A->st == KILN_OK; j++)
        A->st = kiln_sched_push(ctx, &cur, A->base->step[j]);
    uint32_t    applied = 0;
    const char *why = NULL;
    for (uint32_t k = 0; k < A->t->ninst && A->st == KILN_OK; k++) {
        struct kiln_schedule trial = {0};
        for (uint32_t j = 0; j < cur.nstep && A->st == KILN_OK; j++)
            A->st = kiln_sched_push(ctx, &trial, cur.step[j]);
        if (A->st == KILN_OK)
            A->st = kiln_task_rename(ctx, A->g, A->t, k, &s, &trial);
        if (A->st == KILN_OK && lowers(ctx, A->g, &trial, why ? NULL : &why)) {
            cur = trial;
            applied++;
        }
    }
    if (A->st != KILN_OK)
        return false;
    if (applied == A->t->ninst) {
        A->full = cur;
        A->info->tuned = 1;
        A->info->record = r->id;
        A->info->time_s = r->time_s;
        return false;
    }
    if (applied && !A->partial_id) {
        A->partial = cur;
        A->partial_id = r->id;
        A->partial_time = r->time_s;
    }
    skip(A, r,
         kiln_arena_printf(ctx, "does not fit %u of %u occurrences: %s", A->t->ninst - applied,
                           A->t->ninst, why ? why : ""));
    return true;
}

enum kiln_status
kiln_tuned_task_apply(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_db *db,
                      const char *target, const struct kiln_task *t,
                      const struct kiln_schedule *base, struct kiln_schedule *out,
                      struct kiln_tuned_task *info)
{
    memset(info, 0, sizeof *info);
    info->key = t->key;
    info->occurrences = t->ninst;
    struct apply A = {.ctx = ctx, .g = g, .t = t, .base = base, .info = info};
    KILN_TRY(kiln_db_each_ranked(db, t->key, target, apply_one, &A));
    KILN_TRY(A.st);
    if (info->tuned) {
        *out = A.full;
    } else if (A.partial_id) {
        /* no record fits every occurrence: the best that fits some is kept for those, the
         * others keep the default schedule */
        *out = A.partial;
        info->record = A.partial_id;
        info->time_s = A.partial_time;
    } else if (out != base) {
        *out = *base;
    }
    return KILN_OK;
}

enum kiln_status
kiln_tuned_schedule_tasks(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_db *db,
                          const char *target, struct kiln_schedule *out, uint32_t *ntuned,
                          struct kiln_tuned_task **info, uint32_t *ntasks)
{
    *ntuned = 0;
    memset(out, 0, sizeof *out);
    struct kiln_tasks tasks;
    KILN_TRY(kiln_tasks_extract(ctx, g, &tasks));
    struct kiln_tuned_task *ti = kiln_arena_alloc(ctx, sizeof *ti * (tasks.n ? tasks.n : 1));
    if (!ti)
        return ctx->err.status;
    for (uint32_t i = 0; i < tasks.n; i++) {
        KILN_TRY(kiln_tuned_task_apply(ctx, g, db, target, &tasks.task[i], out, out, &ti[i]));
        *ntuned += ti[i].tuned != 0;
    }
    if (info)
        *info = ti;
    if (ntasks)
        *ntasks = tasks.n;
    return KILN_OK;
}

enum kiln_status
kiln_tuned_schedule(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_db *db,
                    const char *target, struct kiln_schedule *out, uint32_t *ntuned)
{
    return kiln_tuned_schedule_tasks(ctx, g, db, target, out, ntuned, NULL, NULL);
}
