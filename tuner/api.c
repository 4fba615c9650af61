/* tuner/api.c -- the public tuning and records API of include/kiln.h over the tuner's internal
 * one: parameter defaults, compiling with the best records, listing/exporting/importing. */
#include "tuner.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum kiln_status
kiln_graph_tune(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_tune_params *p)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_tune_opts o;
    kiln_tune_opts_default(&o);
    o.target = p->target;
    o.db_path = p->db_path;
    if (p->trials)
        o.trials = p->trials;
    if (p->strategy) {
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(p->strategy, kiln_strategy_name[i]))
                k = i;
        if (k < 0)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "tune",
                             "unknown strategy '%s' (ansor+droplet, ansor or droplet)",
                             p->strategy);
        o.strategy = (enum kiln_strategy)k;
    }
    if (p->droplet_after)
        o.droplet_after = p->droplet_after;
    if (p->batch)
        o.batch = p->batch;
    if (p->population)
        o.population = p->population;
    if (p->seed)
        o.seed = p->seed;
    if (p->repeat)
        o.measure.repeat = p->repeat;
    if (p->min_repeat_ms > 0)
        o.measure.min_repeat_ms = p->min_repeat_ms;
    if (p->run_timeout_s > 0)
        o.measure.run_timeout_s = p->run_timeout_s;
    if (p->threads > 0)
        o.measure.threads = p->threads;
    if (p->flush_cache)
        o.measure.flush_cache = true;
    if (p->flush_weights)
        o.measure.flush_weights = true;
    if (p->build_workers)
        o.measure.build_workers = p->build_workers;
    o.log = p->log;
    o.curve_dir = p->curve_dir;
    o.progress = p->progress;
    o.progress_ud = p->progress_ud;
    o.stop = p->stop;
    return kiln_tune(ctx, g, &o);
}

enum kiln_status
kiln_graph_tuned_schedule(kiln_ctx *ctx, const struct kiln_graph *g, const char *db_path,
                          const char *target, const char **json, uint32_t *ntuned, uint32_t *ntasks)
{
    *json = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_target t;
    KILN_TRY(kiln_cg_target_parse(ctx, target ? target : "llvm", &t));
    struct kiln_db *db;
    KILN_TRY(kiln_db_open(ctx, db_path, &db));
    struct kiln_schedule s = {0};
    uint32_t             nt = 0;
    enum kiln_status     st = kiln_tuned_schedule(ctx, g, db, kiln_cg_target_str(ctx, &t), &s, &nt);
    kiln_db_close(db);
    KILN_TRY(st);
    struct kiln_buf b = {0};
    KILN_TRY(kiln_sched_to_json(ctx, &s, &b));
    *json = b.data;
    if (ntuned)
        *ntuned = nt;
    if (ntasks) {
        struct kiln_tasks tasks;
        KILN_TRY(kiln_tasks_extract(ctx, g, &tasks));
        *ntasks = tasks.n;
    }
    return KILN_OK;
}

enum kiln_status
kiln_graph_compile_tuned(kiln_ctx *ctx, const struct kiln_graph *g,
                         const struct kiln_compile_options *opt, const char *db_path,
                         const char *path, uint32_t *ntuned)
{
    struct kiln_compile_options o = {0};
    if (opt)
        o = *opt;
    const char *json;
    KILN_TRY(kiln_graph_tuned_schedule(ctx, g, db_path, o.target, &json, ntuned, NULL));
    o.schedule_json = json;
    o.schedule_len = strlen(json);
    return kiln_graph_compile(ctx, g, &o, path, NULL);
}

/* ---- listing ---- */

struct summary {
    struct kiln_record_summary s;
    char                      *workload, *target, *schedule, *strategy, *machine, *version;
};

struct lister {
    struct summary *s;
    uint32_t        n, cap;
    bool            oom;
};

static char *
dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

static void
summary_set_best(struct summary *e, const struct kiln_record *r)
{
    free(e->schedule);
    free(e->strategy);
    free(e->machine);
    free(e->version);
    e->schedule = dup_or_empty(r->schedule);
    e->strategy = dup_or_empty(r->strategy);
    e->machine = dup_or_empty(r->machine);
    e->version = dup_or_empty(r->version);
    e->s.best_s = r->time_s;
    e->s.timestamp = r->timestamp;
}

static bool
list_one(void *ud, const struct kiln_record *r)
{
    struct lister  *L = ud;
    struct summary *e = NULL;
    for (uint32_t i = 0; i < L->n && !e; i++)
        if (!strcmp(L->s[i].workload, r->workload) && !strcmp(L->s[i].target, r->target))
            e = &L->s[i];
    if (!e) {
        if (L->n == L->cap) {
            uint32_t        ncap = L->cap ? L->cap * 2 : 16;
            struct summary *ns = realloc(L->s, sizeof *ns * ncap);
            if (!ns) {
                L->oom = true;
                return false;
            }
            L->s = ns;
            L->cap = ncap;
        }
        e = &L->s[L->n++];
        memset(e, 0, sizeof *e);
        e->workload = dup_or_empty(r->workload);
        e->target = dup_or_empty(r->target);
        e->s.flops = r->flops;
    }
    e->s.records++;
    if (r->error != KILN_MEASURE_OK)
        e->s.errors++;
    return true;
}

enum kiln_status
kiln_records_list(kiln_ctx *ctx, const char                                       *db_path,
                  void (*fn)(void *ud, const struct kiln_record_summary *s), void *ud)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_db *db;
    KILN_TRY(kiln_db_open(ctx, db_path, &db));
    struct lister    L = {0};
    enum kiln_status st = kiln_db_each(db, NULL, NULL, list_one, &L);
    if (st == KILN_OK && L.oom)
        st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "records", "out of memory listing records");
    for (uint32_t i = 0; i < L.n; i++) {
        struct summary    *e = &L.s[i];
        struct kiln_record best;
        /* the best as kiln compile picks it: re-measured schedules by their mean time */
        if (st == KILN_OK && kiln_db_best(db, e->workload, e->target, &best))
            summary_set_best(e, &best);
        else if (st == KILN_OK && !kiln_ok(ctx))
            st = ctx->err.status;
    }
    kiln_db_close(db);
    for (uint32_t i = 0; i < L.n; i++) {
        struct summary *e = &L.s[i];
        e->s.workload = e->workload;
        e->s.target = e->target;
        e->s.schedule = e->schedule;
        e->s.strategy = e->strategy;
        e->s.machine = e->machine;
        e->s.version = e->version;
        if (st == KILN_OK)
            fn(ud, &e->s);
        free(e->workload);
        free(e->target);
        free(e->schedule);
        free(e->strategy);
        free(e->machine);
        free(e->version);
    }
    free(L.s);
    return st;
}

enum kiln_status
kiln_records_export(kiln_ctx *ctx, const char *db_path, const char *jsonl_path)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    FILE *f = fopen(jsonl_path, "w");
    if (!f)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "cannot write %s: %s", jsonl_path,
                         strerror(errno));
    struct kiln_db  *db;
    enum kiln_status st = kiln_db_open(ctx, db_path, &db);
    if (st == KILN_OK) {
        st = kiln_db_export_jsonl(db, f);
        kiln_db_close(db);
    }
    if (fclose(f) && st == KILN_OK)
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "cannot write %s: %s", jsonl_path,
                       strerror(errno));
    return st;
}

enum kiln_status
kiln_records_import(kiln_ctx *ctx, const char *db_path, const char *jsonl_path, uint32_t *added)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    FILE *f = fopen(jsonl_path, "rb");
    if (!f)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "cannot read %s: %s", jsonl_path,
                         strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char  *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "records", "out of memory reading %s", jsonl_path);
    buf[n] = 0;
    struct kiln_db  *db;
    enum kiln_status st = kiln_db_open(ctx, db_path, &db);
    if (st == KILN_OK) {
        st = kiln_db_import_jsonl(db, buf, n, added);
        kiln_db_close(db);
    }
    free(buf);
    return st;
}
