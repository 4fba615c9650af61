/* tuner/predict.c -- schedules without measuring: each task with no applicable record gets the
 * program the cost model ranks best among those an evolutionary search over its sketches finds
 * (kiln_evolve, tuner/search.c), and kiln_graph_schedule makes the whole-graph schedule from
 * records databases, then predictions, then the serial default schedule. */
#include "tuner.h"

#include <math.h>
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

enum kiln_status
kiln_schedule_graph(kiln_ctx *ctx, const struct kiln_graph *g, const char *target,
                    struct kiln_db *const *db, uint32_t ndb, struct kiln_cost_model *cm,
                    uint64_t seed, struct kiln_schedule *out, struct kiln_schedule_report *rep,
                    struct kiln_tuned_task **info)
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
    struct kiln_tuned_task *ti = kiln_arena_alloc(ctx, sizeof *ti * (tasks.n ? tasks.n : 1));
    if (!ti)
        return ctx->err.status;
    rep->ntasks = tasks.n;
    for (uint32_t i = 0; i < tasks.n; i++) {
        struct kiln_task *t = &tasks.task[i];
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
        struct kiln_predict_opts po;
        task_budget(&tasks, i, &po);
        po.seed = seed * 0x9e3779b97f4a7c15ull + t->hash;
        struct kiln_schedule ts = {0}, all = *out;
        bool                 found = false;
        KILN_TRY(kiln_predict_task(ctx, t->g, &hw, cm, &po, &ts, &found, NULL));
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
    if (info)
        *info = ti;
    return KILN_OK;
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
        st = kiln_schedule_graph(ctx, g, p.target, db, p.ndb, cm, p.seed ? p.seed : 1, &s, &r,
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
