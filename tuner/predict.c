/* tuner/predict.c -- schedules without measuring: each task with no applicable record gets the
 * program the cost model ranks best among those an evolutionary search over its sketches finds
 * (kiln_evolve, tuner/search.c), and kiln_graph_schedule makes the whole-graph schedule from
 * records databases, then predictions, then the serial default schedule. */
#include "tuner.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum kiln_status
kiln_predict_task(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_hw *hw,
                  struct kiln_cost_model *cm, const struct kiln_predict_opts *o,
                  struct kiln_schedule *out, bool *found, uint32_t *ncand)
{
    *found = false;
    if (ncand)
        *ncand = 0;
    struct kiln_sketch *sk;
    uint32_t            nsk;
    KILN_TRY(kiln_sketches_generate(ctx, g, hw, &sk, &nsk));
    if (!nsk)
        return KILN_OK;
    struct kiln_space    sp = {ctx, g, hw, sk, nsk};
    struct kiln_rng      rng = kiln_rng_new(o->seed);
    struct kiln_evo_opts eo = {
        .population = o->population ? o->population : KILN_PREDICT_POPULATION,
        .generations = o->generations ? o->generations : KILN_PREDICT_GENERATIONS,
        .in_prior = true,
    };
    struct kiln_evo_cand best;
    uint32_t             n = 0;
    KILN_TRY(kiln_evolve(&sp, cm, &rng, &eo, &best, 1, &n));
    if (ncand)
        *ncand = eo.population * (eo.generations + 1);
    if (!n)
        return KILN_OK; /* no candidate lowered */
    struct kiln_schedule s = *out;
    if (kiln_prog_schedule(ctx, g, &sk[best.p.sketch], &best.p, &s) != KILN_OK) {
        kiln_ctx_error_clear(ctx); /* it lowered while scored: cannot happen; keep the default */
        return KILN_OK;
    }
    *out = s;
    *found = true;
    return KILN_OK;
}

/* ---- the whole graph ---- */

/* Lowers g under s in a scratch scope; the context's error is cleared. */
static bool
lowers(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_schedule *s)
{
    struct kiln_scratch sc = kiln_scratch_begin(ctx);
    struct kiln_func   *f;
    bool                ok = kiln_lower(ctx, g, s, &f) == KILN_OK;
    kiln_ctx_error_clear(ctx);
    kiln_scratch_end(ctx, sc);
    return ok;
}

static enum kiln_status
sched_append(kiln_ctx *ctx, struct kiln_schedule *to, const struct kiln_schedule *from)
{
    for (uint32_t j = 0; j < from->nstep; j++)
        KILN_TRY(kiln_sched_push(ctx, to, from->step[j]));
    return KILN_OK;
}

/* Candidates a task is given: a task whose flops x weight is an even share of the graph's gets
 * the default population, lighter ones down to half of it (at least 32), the heaviest up to
 * twice it. Candidates cost 0.3-4 ms each (lowering and features; 22 tasks of ResNet-18: 0.5
 * to 2.5 s a task, 13.6 s in all on 2 cores); population 128 over 4 generations took 27.6 s
 * and its module was no faster. */
static void
task_budget(const struct kiln_tasks *tasks, uint32_t i, struct kiln_predict_opts *o)
{
    double total = 0;
    for (uint32_t k = 0; k < tasks->n; k++)
        total += tasks->task[k].flops * tasks->task[k].weight;
    const struct kiln_task *t = &tasks->task[i];
    double                  share = total > 0 ? t->flops * t->weight / total : 1.0 / tasks->n;
    /* an even split gets the default population; the heaviest tasks up to twice it */
    double pop = KILN_PREDICT_POPULATION * (0.5 + 1.5 * fmin(1, share * tasks->n / 2));
    o->population = (uint32_t)fmax(32, fmin(2 * KILN_PREDICT_POPULATION, pop));
    o->generations = KILN_PREDICT_GENERATIONS;
}

/* ---- predicting tasks on several threads ----
 * Contexts are not shared between threads, so each predicting thread has its own: its own
 * context, the task graphs parsed from their text there (kiln_graph_print, as records and the
 * distributed workers carry them), and its own copy of the model (kiln_cm_save, kiln_cm_load).
 * Each task is predicted in a fresh context, so what a task gets depends neither on the thread
 * nor on the tasks predicted before it; results are schedule JSON, parsed back in the caller's
 * context in task order. The single-threaded case runs the same code on the calling thread. */

struct pjob {
    const char              *graph; /* the task graph's text (caller's context) */
    struct kiln_predict_opts po;
    char                    *json; /* malloc'ed: the prediction; NULL: none lowered */
    enum kiln_status         st;   /* KILN_OK, or the failure below */
    struct kiln_error        err;  /* the failure's error (detail dropped) */
};

struct ppool {
    const struct kiln_hw   *hw;
    const char             *model; /* kiln_cm_save'd bytes, or NULL: use cm */
    size_t                  model_len;
    struct kiln_cost_model *cm; /* the caller's, when model is NULL (calling thread only) */
    struct kiln_ctx_params  cp;
    struct pjob            *job;
    uint32_t                njob;
    atomic_uint             next;
};

/* One task with model cm (whose context is mctx), in a context of its own: the JSON of its
 * prediction into j. */
static void
predict_job(const struct ppool *P, kiln_ctx *mctx, struct kiln_cost_model *cm, struct pjob *j)
{
    kiln_ctx            *tctx = kiln_ctx_new(&P->cp);
    struct kiln_graph   *tg = NULL;
    struct kiln_schedule ts = {0};
    struct kiln_buf      b = {0};
    bool                 found = false;
    enum kiln_status     st = KILN_ERR_NOMEM;
    if (tctx)
        st = kiln_graph_parse(tctx, j->graph, strlen(j->graph), "task", &tg);
    if (st == KILN_OK)
        st = kiln_predict_task(tctx, tg, P->hw, cm, &j->po, &ts, &found, NULL);
    if (st == KILN_OK && found && (st = kiln_sched_to_json(tctx, &ts, &b)) == KILN_OK
        && !(j->json = strdup(b.data)))
        st = KILN_ERR_NOMEM;
    j->st = st;
    if (st != KILN_OK) {
        const struct kiln_error *e = tctx ? kiln_ctx_error(tctx) : NULL;
        if (!e)
            e = kiln_ctx_error(mctx); /* the model's */
        if (e)
            j->err = *e;
        else
            snprintf(j->err.msg, sizeof j->err.msg, "out of memory predicting a task");
        j->err.status = st;
        j->err.detail = NULL;
    }
    kiln_ctx_free(tctx);
}

/* A predicting thread: its own copy of the model (in a context of its own), then jobs until
 * none is left, each in a fresh context: a context that predicted other tasks before could
 * pick differently (what a scratch scope leaves behind is not all rolled back), and the
 * result must not depend on which thread took which task. */
static void *
ppool_worker(void *arg)
{
    struct ppool           *P = arg;
    kiln_ctx               *mctx = kiln_ctx_new(&P->cp);
    struct kiln_cost_model *cm = NULL;
    enum kiln_status        st = KILN_ERR_NOMEM;
    if (mctx && P->model && (cm = kiln_cm_new(mctx, 0)) != NULL)
        st = kiln_cm_load(cm, P->model, P->model_len, "the cost model");
    else if (mctx && !P->model)
        st = KILN_OK; /* the caller's model, on the calling thread */
    for (uint32_t i; (i = atomic_fetch_add(&P->next, 1)) < P->njob;) {
        struct pjob *j = &P->job[i];
        if (st == KILN_OK) {
            predict_job(P, mctx, cm ? cm : P->cm, j);
            continue;
        }
        j->st = st;
        j->err.status = st;
        const struct kiln_error *e = mctx ? kiln_ctx_error(mctx) : NULL;
        snprintf(j->err.msg, sizeof j->err.msg, "%s",
                 e ? e->msg : "out of memory starting a predicting thread");
        j->err.pass = "schedule";
    }
    kiln_cm_free(cm);
    kiln_ctx_free(mctx);
    return NULL;
}

/* Threads predicting at once: `asked`, else kiln_cg_threads() (OMP_NUM_THREADS, else the online
 * CPUs); at most njob. */
static uint32_t
predict_threads(uint32_t asked, uint32_t njob)
{
    uint32_t n = asked ? asked : kiln_cg_threads();
    if (n > 64)
        n = 64;
    return n < njob ? n : (njob ? njob : 1);
}

/* Predicts the njob jobs on up to `threads` threads (0: predict_threads' default). A model that
 * cannot be copied (untrained) or a caller's allocator (which may not be thread-safe) keeps it to
 * the calling thread. Fails only for the pool itself (memory, threads); each job's own failure
 * is in the job. */
static enum kiln_status
predict_jobs(kiln_ctx *ctx, const struct kiln_hw *hw, struct kiln_cost_model *cm, struct pjob *job,
             uint32_t njob, uint32_t threads)
{
    if (!njob)
        return KILN_OK;
    struct ppool P = {.hw = hw, .cm = cm, .job = job, .njob = njob};
    P.cp.alloc = ctx->alloc;
    P.cp.alloc_ud = ctx->alloc_ud;
    atomic_init(&P.next, 0);
    struct kiln_buf mb = {0};
    uint32_t        nt = predict_threads(threads, njob);
    if (kiln_cm_save(cm, &mb) == KILN_OK) {
        P.model = mb.data;
        P.model_len = mb.len;
    } else {
        kiln_ctx_error_clear(ctx);
        nt = 1;
    }
    if (ctx->alloc)
        nt = 1;
    pthread_t *tid = nt > 1 ? calloc(nt - 1, sizeof *tid) : NULL;
    uint32_t   started = 0;
    for (; tid && started < nt - 1; started++)
        if (pthread_create(&tid[started], NULL, ppool_worker, &P) != 0)
            break; /* fewer threads: the calling thread and the started ones do the rest */
    ppool_worker(&P);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    free(tid);
    return KILN_OK;
}

/* Whether any database holds a record of task t for target tstr. */
static bool
any_record(void *ud, const struct kiln_record *r, const char *bad)
{
    (void)r;
    (void)bad;
    *(bool *)ud = true;
    return false;
}

/* The job of task i: its text and budget. */
static enum kiln_status
job_of(kiln_ctx *ctx, const struct kiln_tasks *tasks, uint32_t i, uint64_t seed, struct pjob *j)
{
    memset(j, 0, sizeof *j);
    KILN_TRY(kiln_graph_print(ctx, tasks->task[i].g, 0, &j->graph));
    task_budget(tasks, i, &j->po);
    j->po.seed = seed * 0x9e3779b97f4a7c15ull + tasks->task[i].hash;
    return KILN_OK;
}

/* Tasks [i, e), all without a record, with their predictions at once: *ok when the whole
 * graph lowers with every one of them, and then *out has them (renamed onto every occurrence)
 * and *npred counts them. Not tried (*ok false) when one of them failed. */
static enum kiln_status
batch(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_tasks *tasks, uint32_t i,
      uint32_t e, const struct pjob *job, const uint32_t *jix, struct kiln_schedule *out, bool *ok,
      uint32_t *npred)
{
    *ok = false;
    *npred = 0;
    for (uint32_t k = i; k < e; k++)
        if (job[jix[k]].st != KILN_OK)
            return KILN_OK;
    struct kiln_schedule all = {0};
    KILN_TRY(sched_append(ctx, &all, out));
    for (uint32_t k = i; k < e; k++) {
        const struct pjob *j = &job[jix[k]];
        if (!j->json)
            continue;
        struct kiln_schedule ts = {0};
        KILN_TRY(kiln_sched_from_json(ctx, j->json, strlen(j->json), &ts));
        for (uint32_t o = 0; o < tasks->task[k].ninst; o++) {
            struct kiln_schedule r = {0};
            KILN_TRY(kiln_task_rename(ctx, g, &tasks->task[k], o, &ts, &r));
            KILN_TRY(sched_append(ctx, &all, &r));
        }
        ++*npred;
    }
    if ((*ok = lowers(ctx, g, &all)))
        *out = all;
    return KILN_OK;
}

/* The tasks in order: records, else the prediction (job[jix[i]], or predicted here when records
 * exist but none applied), else the serial default. */
static enum kiln_status
schedule_tasks(kiln_ctx *ctx, const struct kiln_graph *g, const char *tstr,
               const struct kiln_hw *hw, const struct kiln_tasks *tasks, struct kiln_db *const *db,
               uint32_t ndb, struct kiln_cost_model *cm, uint64_t seed, struct pjob *job,
               const uint32_t *jix, struct kiln_schedule *out, struct kiln_schedule_report *rep,
               struct kiln_tuned_task *ti)
{
    uint32_t one_by_one = 0; /* tasks before it go one by one: their batch did not lower */
    for (uint32_t i = 0; i < tasks->n; i++) {
        const struct kiln_task *t = &tasks->task[i];
        /* a run of tasks without a record is first tried at once: one lowering of the whole
         * graph instead of one per task (DenseNet-121: 125, 45 s); when it does not lower,
         * they go one by one as below */
        uint32_t e = i;
        while (i >= one_by_one && e < tasks->n && jix[e] != KILN_NONE)
            e++;
        if (e > i + 1) {
            bool     ok;
            uint32_t npred;
            KILN_TRY(batch(ctx, g, tasks, i, e, job, jix, out, &ok, &npred));
            if (ok) {
                for (uint32_t k = i; k < e; k++) {
                    memset(&ti[k], 0, sizeof ti[k]);
                    ti[k].key = tasks->task[k].key;
                    ti[k].occurrences = tasks->task[k].ninst;
                }
                rep->predicted += npred;
                rep->serial += e - i - npred;
                i = e - 1;
                continue;
            }
            one_by_one = e;
        }
        /* records: the fastest that applies everywhere across the databases (the first
         * database's on equal times), else the first that applies somewhere */
        struct kiln_schedule best = *out, part = *out;
        bool                 has_part = false;
        memset(&ti[i], 0, sizeof ti[i]);
        ti[i].key = t->key;
        ti[i].occurrences = t->ninst;
        for (uint32_t d = 0; d < ndb; d++) {
            struct kiln_tuned_task one;
            struct kiln_schedule   s;
            KILN_TRY(kiln_tuned_task_apply(ctx, g, db[d], tstr, t, out, &s, &one));
            if (one.tuned && (!ti[i].tuned || one.time_s < ti[i].time_s)) {
                ti[i] = one;
                best = s;
            } else if (!one.tuned && one.record && !has_part && !ti[i].tuned) {
                ti[i] = one;
                part = s;
                has_part = true;
            } else if (!ti[i].record && one.skipped) {
                ti[i].skipped = one.skipped;
                ti[i].skip_why = one.skip_why;
            }
        }
        if (ti[i].tuned) {
            *out = best;
            rep->from_records++;
            continue;
        }
        if (has_part)
            *out = part; /* the occurrences it does not fit keep the default schedule */
        if (!cm || has_part) {
            rep->serial++;
            continue;
        }
        /* predicted: renamed onto every occurrence; the whole graph must still lower */
        struct pjob here, *j = jix[i] != KILN_NONE ? &job[jix[i]] : &here;
        if (j == &here) { /* its records all failed to apply */
            struct kiln_scratch sc = kiln_scratch_begin(ctx);
            enum kiln_status    st = job_of(ctx, tasks, i, seed, &here);
            if (st == KILN_OK)
                st = predict_jobs(ctx, hw, cm, &here, 1, 1);
            kiln_scratch_end(ctx, sc);
            KILN_TRY(st);
        }
        struct kiln_schedule ts = {0}, all;
        enum kiln_status     st = j->st;
        bool                 found = j->json != NULL;
        if (st != KILN_OK)
            st = KILN_FAIL(ctx, st, j->err.pass ? j->err.pass : "schedule", "%s",
                           j->err.msg[0] ? j->err.msg : "the prediction failed");
        else if (found)
            st = kiln_sched_from_json(ctx, j->json, strlen(j->json), &ts);
        if (j == &here)
            free(here.json);
        KILN_TRY(st);
        if (!found) {
            rep->serial++;
            continue;
        }
        all = (struct kiln_schedule){0};
        KILN_TRY(sched_append(ctx, &all, out));
        for (uint32_t k = 0; k < t->ninst; k++) {
            struct kiln_schedule r = {0};
            KILN_TRY(kiln_task_rename(ctx, g, t, k, &ts, &r));
            KILN_TRY(sched_append(ctx, &all, &r));
        }
        if (lowers(ctx, g, &all)) {
            *out = all;
            rep->predicted++;
        } else {
            rep->serial++;
        }
    }
    return KILN_OK;
}

enum kiln_status
kiln_schedule_graph(kiln_ctx *ctx, const struct kiln_graph *g, const char *target,
                    struct kiln_db *const *db, uint32_t ndb, struct kiln_cost_model *cm,
                    uint64_t seed, uint32_t threads, struct kiln_schedule *out,
                    struct kiln_schedule_report *rep, struct kiln_tuned_task **info)
{
    memset(out, 0, sizeof *out);
    rep->ntasks = rep->from_records = rep->predicted = rep->serial = 0;
    struct kiln_target tgt;
    KILN_TRY(kiln_cg_target_parse(ctx, target ? target : "llvm", &tgt));
    const char    *tstr = kiln_cg_target_str(ctx, &tgt);
    struct kiln_hw hw;
    kiln_hw_from_target(&tgt, &hw);
    struct kiln_tasks tasks;
    KILN_TRY(kiln_tasks_extract(ctx, g, &tasks));
    uint32_t                n = tasks.n ? tasks.n : 1;
    struct kiln_tuned_task *ti = kiln_arena_alloc(ctx, sizeof *ti * n);
    uint32_t               *jix = kiln_arena_alloc(ctx, sizeof *jix * n);
    if (!ti || !jix)
        return ctx->err.status;
    rep->ntasks = tasks.n;
    /* the tasks no database has a record of are predicted first, all at once on several
     * threads; the walk in task order below then takes their results */
    struct pjob *job = calloc(n, sizeof *job);
    uint32_t     njob = 0;
    if (!job)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "schedule", "out of memory");
    struct kiln_scratch sc = kiln_scratch_begin(ctx);
    enum kiln_status    st = KILN_OK;
    for (uint32_t i = 0; i < tasks.n && st == KILN_OK; i++) {
        bool rec = false;
        jix[i] = KILN_NONE;
        for (uint32_t d = 0; d < ndb && st == KILN_OK && !rec; d++)
            st = kiln_db_each_ranked(db[d], tasks.task[i].key, tstr, any_record, &rec);
        if (st == KILN_OK && cm && !rec
            && (st = job_of(ctx, &tasks, i, seed, &job[njob])) == KILN_OK)
            jix[i] = njob++;
    }
    if (st == KILN_OK)
        st = predict_jobs(ctx, &hw, cm, job, njob, threads);
    kiln_scratch_end(ctx, sc); /* the texts and the model's copy */
    if (st == KILN_OK)
        st = schedule_tasks(ctx, g, tstr, &hw, &tasks, db, ndb, cm, seed, job, jix, out, rep, ti);
    for (uint32_t i = 0; i < njob; i++)
        free(job[i].json);
    free(job);
    if (st == KILN_OK && info)
        *info = ti;
    return st;
}

/* The model params ask for: a file, or the one compiled into the library. On failure *why says
 * what went wrong (ctx-owned) and NULL is returned. */
static struct kiln_cost_model *
model_load(kiln_ctx *ctx, const struct kiln_schedule_params *p, const char **what, const char **why)
{
    *what = p->cost_model ? p->cost_model : "the shipped cost model";
    *why = NULL;
    struct kiln_cost_model *cm = kiln_cm_new(ctx, p->seed);
    if (!cm) {
        *why = "out of memory";
        kiln_ctx_error_clear(ctx);
        return NULL;
    }
    enum kiln_status st;
    if (p->cost_model) {
        st = kiln_cm_load_file(cm, p->cost_model);
    } else {
        size_t               len = 0;
        const unsigned char *data = kiln_cm_shipped(&len);
        st = data ? kiln_cm_load(cm, data, len, *what) : KILN_ERR_UNSUPPORTED;
        if (!data)
            *why = "this build of kiln has none";
    }
    if (st == KILN_OK && !kiln_cm_trained(cm)) {
        st = KILN_ERR_INVALID;
        *why = "it holds no trained model";
    }
    if (st != KILN_OK) {
        if (!*why) {
            /* its first line, without the file's name the warning gives anyway */
            const char *msg = kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->msg : "";
            size_t      wl = strlen(*what);
            if (!strncmp(msg, *what, wl) && !strncmp(msg + wl, ": ", 2))
                msg += wl + 2;
            *why = kiln_arena_printf(ctx, "%.*s", (int)strcspn(msg, "\n"), msg);
        }
        kiln_ctx_error_clear(ctx);
        kiln_cm_free(cm);
        return NULL;
    }
    return cm;
}

enum kiln_status
kiln_graph_schedule(kiln_ctx *ctx, const struct kiln_graph *g,
                    const struct kiln_schedule_params *params, const char **json,
                    struct kiln_schedule_report *report)
{
    struct kiln_schedule_params p = {0};
    struct kiln_schedule_report r = {0};
    if (params)
        p = *params;
    *json = NULL;
    if (report)
        memset(report, 0, sizeof *report);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (p.untuned != KILN_UNTUNED_PREDICT && p.untuned != KILN_UNTUNED_SERIAL)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                         "untuned must be KILN_UNTUNED_PREDICT or KILN_UNTUNED_SERIAL, not %d",
                         p.untuned);
    if (p.ndb && !p.db_paths)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule", "%u databases but no paths", p.ndb);
    struct kiln_db **db = calloc(p.ndb ? p.ndb : 1, sizeof *db);
    if (!db)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "schedule", "out of memory");
    enum kiln_status st = KILN_OK;
    for (uint32_t i = 0; i < p.ndb && st == KILN_OK; i++)
        st = kiln_db_open_readonly(ctx, p.db_paths[i], &db[i]);
    struct kiln_cost_model *cm = NULL;
    r.model = "none";
    if (st == KILN_OK && p.untuned == KILN_UNTUNED_PREDICT) {
        const char *what, *why;
        if ((cm = model_load(ctx, &p, &what, &why)) != NULL)
            r.model = what;
        else
            r.warning = kiln_arena_printf(ctx,
                                          "cannot use %s (%s): tasks without a record keep the "
                                          "serial default schedule",
                                          what, why);
    }
    struct kiln_schedule    s;
    struct kiln_tuned_task *info = NULL;
    if (st == KILN_OK)
        st = kiln_schedule_graph(ctx, g, p.target, db, p.ndb, cm, p.seed ? p.seed : 1, 0, &s, &r,
                                 &info);
    r.tasks = info;
    kiln_cm_free(cm);
    for (uint32_t i = 0; i < p.ndb; i++)
        kiln_db_close(db[i]);
    free(db);
    struct kiln_buf b = {0};
    if (st == KILN_OK && (st = kiln_sched_to_json(ctx, &s, &b)) == KILN_OK)
        *json = b.data;
    if (report)
        *report = r;
    return st;
}
