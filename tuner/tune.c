/* tuner/tune.c -- the tuning driver: tasks, resuming from the records database, the task
 * scheduler, progress, logs and tuning curves; and applying the best records to a graph.
 *
 * Task scheduler (Ansor's gradient-based allocation): after one warm-up round per task, each
 * round goes to the task whose expected reduction of the end-to-end latency estimate
 * (sum over tasks of weight x best time) per trial is largest:
 *     gain_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i)
 * with backward_i the best time's drop per round over the last `window` rounds and forward_i
 * = best_i / trials_i, the optimistic guess that the next trials improve as much as the past
 * ones did on average. Under ansor+droplet, a task whose Droplet search has converged goes
 * back to the evolutionary search, and Droplet starts again from any new best it finds; under
 * droplet alone such a task is done.
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
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define SCHED_ALPHA  0.2
#define SCHED_WINDOW 3
#define CONFIRM_MAX  4
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
    }
    double best = T->best >= 0 ? T->m[T->best].time_s : 0;
    if (store && S->o->log) {
        FILE *f = S->o->log;
        fprintf(f, "{\"task\": \"%s\", \"trial\": %u, \"strategy\": \"%s\", \"time_s\": %.9g, ",
                T->t->key, T->trials, strategy, time_s);
        fprintf(f, "\"gflops\": %.4g, \"best_s\": %.9g, \"error\": \"%s\", \"msg\": ",
                time_s > 0 ? T->t->flops / time_s * 1e-9 : 0, best,
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
    T->finalized = strategy && !strcmp(strategy, "final");
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
};

static bool
resume_one(void *ud, const struct kiln_record *rec)
{
    struct resume             *R = ud;
    struct ttask              *T = R->T;
    struct kiln_prog           p;
    bool                       has = false;
    struct kiln_measure_result r = {
        .error = rec->error, .time_s = rec->time_s, .stddev_s = rec->stddev_s, .nrepeat = 3};
    if (rec->prog && kiln_prog_from_json(T->ctx, T->sk, T->nsk, rec->prog, &p) == KILN_OK)
        has = true;
    kiln_ctx_error_clear(T->ctx);
    if (rec->strategy && !strcmp(rec->strategy, "default") && rec->error == KILN_MEASURE_OK)
        T->default_s = rec->time_s;
    R->st = kiln_ttask_record(R->S, T, has ? &p : NULL, rec->schedule, &r,
                              rec->strategy ? rec->strategy : "", false);
    return R->st == KILN_OK;
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

/* The task scheduler: index of the task to tune next, or -1 when all are done. */
static int32_t
pick_task(struct ttask *T, uint32_t n)
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
        if (g > bg) {
            bg = g;
            best = (int32_t)i;
        }
    }
    return best;
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
        done += T[i].trials;
    double   elapsed = now_s() - S->t0, eta = 0;
    uint32_t now_done = S->trials_done > done_at_start ? S->trials_done - done_at_start : 0;
    if (now_done && done < total)
        eta = elapsed / now_done * (total - done);
    struct kiln_tune_progress p = {done, total, n, st, est, elapsed, eta};
    S->o->progress(S->o->progress_ud, &p);
    free(st);
}

/* One SVG with every task's curve (best time relative to its first valid time vs trials). */
static void
write_plot(const char *dir, struct ttask *T, uint32_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/curves.svg", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    const int W = 720, H = 420, L = 60, B = 40;
    uint32_t  maxt = 1;
    for (uint32_t i = 0; i < n; i++)
        maxt = T[i].nm > maxt ? T[i].nm : maxt;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
            "fill=\"white\"/>\n",
            W, H);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L, H - B,
            W - 10, H - B);
    fprintf(f, "<line x1=\"%d\" y1=\"10\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L, L, H - B);
    fprintf(f, "<text x=\"%d\" y=\"%d\">trials (max %u)</text>\n", W / 2 - 40, H - 8, maxt);
    fprintf(f,
            "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\">best time / first time"
            "</text>\n",
            H / 2 + 40, H / 2 + 40);
    const char *col[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
    for (uint32_t i = 0; i < n; i++) {
        double first = 0, best = INFINITY;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                col[i % 6]);
        for (uint32_t k = 0; k < T[i].nm; k++) {
            double t = T[i].m[k].error == KILN_MEASURE_OK ? T[i].m[k].time_s : 0;
            if (t > 0 && first == 0)
                first = t;
            if (t > 0)
                best = fmin(best, t);
            if (first > 0)
                fprintf(f, "%.1f,%.1f ", L + (double)(W - L - 10) * (k + 1) / maxt,
                        10 + (double)(H - B - 10) * (1 - best / first));
        }
        fprintf(f, "\"/>\n<text x=\"%d\" y=\"%u\" fill=\"%s\">task %s (x%u)</text>\n", W - 220,
                24 + 16 * i, col[i % 6], T[i].t->key, T[i].t->weight);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\">1.0</text><text x=\"%d\" y=\"%d\">0.0</text>\n</svg>\n",
            L - 28, H - B, L - 28, 16);
    fclose(f);
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
    struct resume R = {S, T, KILN_OK};
    KILN_TRY(kiln_db_each(S->db, task->key, S->target, resume_one, &R));
    KILN_TRY(R.st);
    KILN_TRY(kiln_db_add_task_graph(S->db, task, S->target)); /* to featurise records later */
    if (S->o->curve_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/task%u_%s.csv", S->o->curve_dir, index, task->key);
        T->curve = fopen(path, "w");
        if (!T->curve)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "tune", "cannot write %s: %s", path,
                             strerror(errno));
        fprintf(T->curve, "trial,time_s,best_s,strategy,error\n");
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
        r += ok * S->o->final_rounds;
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

/* ansor+droplet: Droplet starts once droplet_after programs are measured, and again whenever
 * the evolutionary search has found a new best since Droplet last converged. */
static bool
droplet_due(const struct kiln_tune_opts *o, const struct ttask *T)
{
    return o->strategy == KILN_STRATEGY_ANSOR_DROPLET && T->phase == TPHASE_ANSOR
           && T->trials >= o->droplet_after && T->best >= 0 && T->best != T->converged_best;
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

/* The end of a task's tuning: its final_top fastest programs are measured final_rounds times
 * more, round by round (each round measures every one of them once, so that a slow spell of
 * the machine falls on all of them alike), and each one's time becomes the mean of all its
 * measurements. The search's best is the lowest of hundreds of noisy times and so biased low:
 * a conv 1x1 best timed at 84.5 and 87.6 us by the tuner ran at 95-163 us when the same
 * measurer timed it twelve times more, and at 128 us in the benchmark. */
static enum kiln_status
final_select(struct tsession *S, struct ttask *T)
{
    enum { MAXTOP = 64 };
    int32_t          idx[MAXTOP];
    struct kiln_prog progs[MAXTOP];
    uint32_t         n = final_pick(T, S->o->final_top < MAXTOP ? S->o->final_top : MAXTOP, idx);
    for (uint32_t r = 0; r < S->o->final_rounds; r++) {
        uint32_t np = 0, done = 0;
        for (uint32_t k = 0; k < n; k++)
            if (T->m[idx[k]].has_prog && T->m[idx[k]].error == KILN_MEASURE_OK)
                progs[np++] = T->m[idx[k]].p;
        if (np > budget_left(S))
            np = budget_left(S);
        if (np)
            KILN_TRY(kiln_search_measure(S, T, progs, np, "final", &done));
        for (uint32_t k = 0; k < n; k++) {
            const struct tprog *q = &T->m[idx[k]];
            if (q->has_prog || q->error != KILN_MEASURE_OK || !budget_left(S)
                || (S->o->stop && *S->o->stop))
                continue;
            struct kiln_measure_result res;
            KILN_TRY(measure_schedule(S, T, q->sched, "final", &res));
        }
        if (!budget_left(S) || (S->o->stop && *S->o->stop))
            break;
    }
    /* the pick, as kiln_db_best makes it: the fastest of these by the mean of all its times */
    int32_t pick = -1;
    for (uint32_t k = 0; k < n; k++)
        if (T->m[idx[k]].error == KILN_MEASURE_OK && T->m[idx[k]].time_s > 0
            && (pick < 0 || T->m[idx[k]].time_s < T->m[pick].time_s))
            pick = idx[k];
    if (pick >= 0)
        T->best = pick;
    return KILN_OK;
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
    struct ttask    *T = calloc(tasks.n + 1, sizeof *T);
    enum kiln_status st = T ? KILN_OK : KILN_FAIL(ctx, KILN_ERR_NOMEM, "tune", "out of memory");
    uint32_t         nt = 0;
    S.tasks = T;
    for (uint32_t i = 0; st == KILN_OK && i < tasks.n; i++, nt++, S.ntasks = nt)
        st = setup_task(&S, &T[i], &tasks.task[i], i, &hw);
    uint32_t done_at_start = 0;
    for (uint32_t i = 0; i < nt; i++)
        done_at_start += T[i].trials;
    S.trials_done = done_at_start;
    uint32_t start = done_at_start;
    report(&S, T, nt, start);
    uint32_t left;
    while (st == KILN_OK && (left = search_left(&S)) && !(o->stop && *o->stop)) {
        int32_t i = pick_task(T, nt);
        if (i < 0)
            break; /* every task converged */
        struct ttask *t = &T[i];
        if ((st = ensure_measurer(&S, t, &tgt)) != KILN_OK)
            break;
        uint32_t n = o->batch ? o->batch : 16, done = 0;
        n = n < left ? n : left;
        if (t->default_s == 0 && t->trials == 0) {
            st = measure_default(&S, t);
            n = n > 1 ? n - 1 : 0;
            if (st != KILN_OK || !n) {
                push_hist(t);
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
        push_hist(t);
        report(&S, T, nt, start);
    }
    for (uint32_t i = 0; i < nt && st == KILN_OK && !(o->stop && *o->stop); i++)
        if (final_due(&S, &T[i]) && (st = ensure_measurer(&S, &T[i], &tgt)) == KILN_OK) {
            st = final_select(&S, &T[i]);
            push_hist(&T[i]);
            report(&S, T, nt, start);
        }
    report(&S, T, nt, start);
    if (o->curve_dir)
        write_plot(o->curve_dir, T, nt);
    free_tasks(T, nt);
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
        struct kiln_task *t = &tasks.task[i];
        ti[i].key = t->key;
        ti[i].occurrences = t->ninst;
        struct apply A = {.ctx = ctx, .g = g, .t = t, .base = out, .info = &ti[i]};
        KILN_TRY(kiln_db_each_ranked(db, t->key, target, apply_one, &A));
        KILN_TRY(A.st);
        if (ti[i].tuned) {
            *out = A.full;
            (*ntuned)++;
        } else if (A.partial_id) {
            /* no record fits every occurrence: the best that fits some is kept for those, the
             * others keep the default schedule */
            *out = A.partial;
            ti[i].record = A.partial_id;
            ti[i].time_s = A.partial_time;
        }
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
