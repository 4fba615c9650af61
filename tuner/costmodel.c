/* tuner/costmodel.c -- training a cost model on records databases, and measuring how well a
 * model ranks the measured programs of workloads it may never have seen.
 *
 * Both walk the workload graphs the databases hold (schema 2, tuner/db.c): each graph is parsed
 * back, and each record's schedule is lowered on it and featurised for the record's target
 * (kiln_features_lower with that target's struct kiln_hw), so the model learns from exactly
 * the rows the tuner's search would score. Training labels a record best time of its workload
 * / time (0 for a failed one), as the tuner does (tuner/README.md, "Cost model"). */
#include "tuner.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the data: workloads and their programs ---- */

struct cm_prog {
    struct kiln_feat feat;
    double           time_s; /* 0 for a failed record */
};

struct cm_workload {
    char            key[17], kind[17];
    const char     *target, *graph; /* ctx-owned */
    const char     *db;             /* the first database that holds the graph */
    struct kiln_hw  hw;
    struct cm_prog *p;
    uint32_t        n, cap;
    double          best_s; /* fastest valid record; 0 if none */
};

struct cm_set {
    kiln_ctx                         *ctx;
    const struct kiln_costmodel_opts *o;
    struct cm_workload               *w;
    uint32_t                          n, cap;
    uint32_t           skipped;  /* records whose schedule did not lower on the graph */
    const char        *want;     /* canonical target wanted, or NULL */
    const char        *host_str; /* this machine's canonical target */
    struct kiln_target host;
};

static void
set_free(struct cm_set *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        for (uint32_t k = 0; k < s->w[i].n; k++)
            kiln_feat_free(&s->w[i].p[k].feat);
        free(s->w[i].p);
    }
    free(s->w);
    memset(s, 0, sizeof *s);
}

/* Workload key k is held out by a holdout of pct percent: a hash of the key, so the split is
 * the same for train and eval and does not depend on the order of the databases. */
static bool
held_out(const char *key, uint32_t pct)
{
    return kiln_hash_str(KILN_HASH_SEED, key) % 100 < pct;
}

static bool
wanted(const struct kiln_costmodel_opts *o, const char *key)
{
    if (!o->holdout)
        return true;
    return held_out(key, o->holdout) == o->held_out;
}

struct graph_walk {
    struct cm_set   *s;
    const char      *db;
    uint32_t         found;
    enum kiln_status st;
};

static bool
add_graph(void *ud, const struct kiln_db_graph *g)
{
    struct graph_walk *gw = ud;
    struct cm_set     *s = gw->s;
    kiln_ctx          *ctx = s->ctx;
    if (!strncmp(g->target, "cuda", 4) && !s->want)
        return true; /* a CPU model by default */
    if (!wanted(s->o, g->workload))
        return true;
    gw->found++;
    for (uint32_t i = 0; i < s->n; i++)
        if (!strcmp(s->w[i].key, g->workload) && !strcmp(s->w[i].target, g->target))
            return true; /* the same workload in an earlier database */
    if (s->n == s->cap) {
        uint32_t            cap = s->cap ? 2 * s->cap : 64;
        struct cm_workload *w = realloc(s->w, sizeof *w * cap);
        if (!w) {
            gw->st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "costmodel", "out of memory");
            return false;
        }
        s->w = w;
        s->cap = cap;
    }
    struct cm_workload *w = &s->w[s->n];
    memset(w, 0, sizeof *w);
    snprintf(w->key, sizeof w->key, "%s", g->workload);
    snprintf(w->kind, sizeof w->kind, "%s", g->kind);
    w->target = kiln_arena_strdup(ctx, g->target);
    w->graph = kiln_arena_strdup(ctx, g->graph);
    w->db = gw->db;
    struct kiln_target tgt;
    if (!w->target || !w->graph) {
        gw->st = ctx->err.status;
        return false;
    }
    if (kiln_cg_target_parse(ctx, w->target, &tgt) != KILN_OK) {
        char why[256];
        snprintf(why, sizeof why, "%.200s", kiln_ctx_error(ctx)->msg);
        kiln_ctx_error_clear(ctx);
        gw->st = KILN_FAIL(ctx, KILN_ERR_INVALID, "costmodel",
                           "records database %s: workload %s has a target kiln cannot read: %s",
                           gw->db, w->key, why);
        return false;
    }
    /* a target string does not carry the cache sizes (nor the cores) that a tuner on the host
     * featurised with: records of this machine get its own, as its tuner saw them */
    kiln_hw_from_target(!strcmp(w->target, s->host_str) ? &s->host : &tgt, &w->hw);
    s->n++;
    return true;
}

static enum kiln_status
push_prog(struct cm_set *s, struct cm_workload *w, struct kiln_feat *f, double time_s)
{
    if (w->n == w->cap) {
        uint32_t        cap = w->cap ? 2 * w->cap : 64;
        struct cm_prog *p = realloc(w->p, sizeof *p * cap);
        if (!p) {
            kiln_feat_free(f);
            return KILN_FAIL(s->ctx, KILN_ERR_NOMEM, "costmodel", "out of memory");
        }
        w->p = p;
        w->cap = cap;
    }
    w->p[w->n++] = (struct cm_prog){*f, time_s};
    if (time_s > 0 && (w->best_s == 0 || time_s < w->best_s))
        w->best_s = time_s;
    return KILN_OK;
}

struct rec_walk {
    struct cm_set           *s;
    struct cm_workload      *w;
    const struct kiln_graph *g;
    const char              *db;
    enum kiln_status         st;
};

/* One record: its schedule lowered on the workload's graph and featurised. */
static enum kiln_status
add_record(struct rec_walk *rw, const struct kiln_record *r, double time_s)
{
    kiln_ctx            *ctx = rw->s->ctx;
    struct kiln_scratch  sc = kiln_scratch_begin(ctx);
    struct kiln_schedule sched;
    struct kiln_feat     f = {0};
    enum kiln_status     st = kiln_sched_from_json(ctx, r->schedule, strlen(r->schedule), &sched);
    if (st == KILN_OK)
        st = kiln_features_lower(ctx, rw->g, &sched, &rw->w->hw, &f);
    kiln_scratch_end(ctx, sc);
    if (st != KILN_OK || !f.nrow) {
        /* a record that no longer lowers (made by another kiln) teaches nothing */
        kiln_ctx_error_clear(ctx);
        kiln_feat_free(&f);
        rw->s->skipped++;
        return KILN_OK;
    }
    return push_prog(rw->s, rw->w, &f, time_s);
}

static bool
train_record(void *ud, const struct kiln_record *r)
{
    struct rec_walk *rw = ud;
    rw->st = add_record(rw, r, r->error == KILN_MEASURE_OK && r->time_s > 0 ? r->time_s : 0);
    return rw->st == KILN_OK;
}

static bool
eval_record(void *ud, const struct kiln_record *r, const char *bad)
{
    struct rec_walk *rw = ud;
    if (bad) {
        rw->st = KILN_FAIL(rw->s->ctx, KILN_ERR_INVALID, "costmodel", "records database %s: %s",
                           rw->db, bad);
        return false;
    }
    rw->st = add_record(rw, r, r->time_s); /* a valid schedule, with the mean of its times */
    return rw->st == KILN_OK;
}

/* Reads every database: graphs, then each workload's records (every record for training; for
 * evaluation each valid schedule once, with its mean time). */
static enum kiln_status
collect(kiln_ctx *ctx, const char *const *dbs, uint32_t ndb, const struct kiln_costmodel_opts *o,
        bool eval, struct cm_set *s)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->o = o;
    if (!ndb)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "costmodel", "no records database given");
    KILN_TRY(kiln_cg_target_parse(ctx, "llvm", &s->host));
    if (!(s->host_str = kiln_cg_target_str(ctx, &s->host)))
        return ctx->err.status;
    if (o->target) {
        struct kiln_target tgt;
        KILN_TRY(kiln_cg_target_parse(ctx, o->target, &tgt));
        s->want = kiln_cg_target_str(ctx, &tgt);
        if (!s->want)
            return ctx->err.status;
    }
    uint32_t *first = calloc(ndb + 1, sizeof *first); /* each database's first workload */
    if (!first)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "costmodel", "out of memory");
    enum kiln_status st = KILN_OK;
    for (uint32_t d = 0; d < ndb && st == KILN_OK; d++) {
        struct kiln_db *db = NULL;
        first[d] = s->n;
        if ((st = kiln_db_open_readonly(ctx, dbs[d], &db)) != KILN_OK)
            break;
        struct graph_walk gw = {s, kiln_arena_strdup(ctx, dbs[d]), 0, KILN_OK};
        if (!kiln_db_has_graphs(db))
            st = KILN_FAIL(ctx, KILN_ERR_INVALID, "costmodel",
                           "records database %s has no workload graphs (it was made by a kiln "
                           "before records schema 2, which stored none): tune its workloads "
                           "again with this kiln to record them",
                           dbs[d]);
        if (st == KILN_OK && gw.db)
            st = kiln_db_each_graph(db, s->want, add_graph, &gw);
        if (st == KILN_OK)
            st = gw.st;
        if (st == KILN_OK && !gw.found && !o->holdout)
            st = KILN_FAIL(ctx, KILN_ERR_INVALID, "costmodel",
                           "records database %s has no workload graph%s%s", dbs[d],
                           s->want ? " of target " : " of a CPU target", s->want ? s->want : "");
        kiln_db_close(db);
    }
    /* records: each workload from every database that holds records of it */
    for (uint32_t i = 0; i < s->n && st == KILN_OK; i++) {
        struct cm_workload *w = &s->w[i];
        struct kiln_graph  *g = NULL;
        struct kiln_scratch sc = kiln_scratch_begin(ctx);
        if (kiln_graph_parse(ctx, w->graph, strlen(w->graph), w->db, &g) != KILN_OK) {
            char why[256];
            snprintf(why, sizeof why, "%.200s", kiln_ctx_error(ctx)->msg);
            kiln_ctx_error_clear(ctx);
            st = KILN_FAIL(ctx, KILN_ERR_INVALID, "costmodel",
                           "records database %s: the graph of workload %s does not parse: %s",
                           w->db, w->key, why);
        }
        for (uint32_t d = 0; d < ndb && st == KILN_OK; d++) {
            struct kiln_db *db = NULL;
            if ((st = kiln_db_open_readonly(ctx, dbs[d], &db)) != KILN_OK)
                break;
            struct rec_walk rw = {s, w, g, dbs[d], KILN_OK};
            st = eval ? kiln_db_each_ranked(db, w->key, w->target, eval_record, &rw)
                      : kiln_db_each(db, w->key, w->target, train_record, &rw);
            if (st == KILN_OK)
                st = rw.st;
            kiln_db_close(db);
        }
        kiln_scratch_end(ctx, sc);
    }
    free(first);
    if (st != KILN_OK)
        set_free(s);
    return st;
}

void
kiln_costmodel_opts_default(struct kiln_costmodel_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
}

/* ---- training ---- */

enum kiln_status
kiln_costmodel_train(kiln_ctx *ctx, const char *const *dbs, uint32_t ndb,
                     const struct kiln_costmodel_opts *o, struct kiln_cost_model **out,
                     struct kiln_costmodel_train_report *rep)
{
    *out = NULL;
    memset(rep, 0, sizeof *rep);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct cm_set s;
    KILN_TRY(collect(ctx, dbs, ndb, o, false, &s));
    uint32_t n = 0;
    for (uint32_t i = 0; i < s.n; i++)
        if (s.w[i].best_s > 0) {
            n += s.w[i].n;
            rep->workloads++;
        }
    rep->skipped = s.skipped;
    enum kiln_status st = KILN_OK;
    if (!n)
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "costmodel",
                       "no measured program to train on in %s%s: %u workload graph%s, none with "
                       "a successful record",
                       dbs[0], ndb > 1 ? " and the other databases" : "", s.n, s.n == 1 ? "" : "s");
    struct kiln_feat *feats = st == KILN_OK ? malloc(sizeof *feats * n) : NULL;
    double           *y = st == KILN_OK ? malloc(sizeof *y * n) : NULL;
    if (st == KILN_OK && (!feats || !y))
        st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "costmodel", "out of memory");
    uint32_t k = 0;
    for (uint32_t i = 0; i < s.n && st == KILN_OK; i++) {
        const struct cm_workload *w = &s.w[i];
        if (w->best_s <= 0)
            continue; /* nothing to normalise by */
        for (uint32_t j = 0; j < w->n; j++, k++) {
            feats[k] = w->p[j].feat;
            y[k] = w->p[j].time_s > 0 ? w->best_s / w->p[j].time_s : 0;
            rep->errors += w->p[j].time_s <= 0;
            rep->rows += feats[k].nrow;
        }
    }
    rep->programs = n;
    struct kiln_cost_model *m = st == KILN_OK ? kiln_cm_new(ctx, o->seed) : NULL;
    if (st == KILN_OK && !m)
        st = ctx->err.status ? ctx->err.status : KILN_ERR_NOMEM;
    if (st == KILN_OK)
        st = kiln_cm_train(m, feats, y, n);
    double *score = st == KILN_OK ? malloc(sizeof *score * n) : NULL;
    if (st == KILN_OK && !score)
        st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "costmodel", "out of memory");
    if (st == KILN_OK)
        st = kiln_cm_predict(m, feats, n, score);
    if (st == KILN_OK) {
        /* the pack-sum loss the model minimises: RMSE weighted by y */
        double num = 0, den = 0;
        for (uint32_t i = 0; i < n; i++) {
            num += y[i] * (score[i] - y[i]) * (score[i] - y[i]);
            den += y[i];
        }
        rep->loss = den > 0 ? sqrt(num / den) : 0;
        rep->rounds = kiln_cm_rounds(m);
    }
    free(score);
    free(feats);
    free(y);
    set_free(&s);
    if (st != KILN_OK) {
        kiln_cm_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

/* ---- evaluation ---- */

/* Pairwise ranking accuracy (pairs of different times; a tie of scores counts half), the
 * model's top pick and top 5 against the best, and a random pick's expectation (the mean time). */
static void
rank_metrics(const struct cm_workload *w, const double *score, struct kiln_costmodel_eval_one *e)
{
    double   right = 0, sum = 0;
    uint64_t pairs = 0;
    uint32_t top = 0;
    for (uint32_t i = 0; i < w->n; i++) {
        sum += w->p[i].time_s;
        if (score[i] > score[top])
            top = i;
        for (uint32_t j = i + 1; j < w->n; j++) {
            double dt = w->p[j].time_s - w->p[i].time_s;
            if (dt == 0)
                continue;
            pairs++;
            double ds = score[i] - score[j]; /* i faster (dt > 0) should score higher */
            right += ds == 0 ? 0.5 : (ds > 0) == (dt > 0);
        }
    }
    /* the best time among the 5 highest scores */
    double top5 = INFINITY;
    for (uint32_t i = 0; i < w->n; i++) {
        uint32_t above = 0;
        for (uint32_t j = 0; j < w->n; j++)
            above += score[j] > score[i] || (score[j] == score[i] && j < i);
        if (above < 5)
            top5 = fmin(top5, w->p[i].time_s);
    }
    e->programs = w->n;
    e->pair_acc = pairs ? right / (double)pairs : 0.5;
    e->regret = w->p[top].time_s / w->best_s;
    e->regret5 = top5 / w->best_s;
    e->random_regret = sum / w->n / w->best_s;
}

enum kiln_status
kiln_costmodel_eval(kiln_ctx *ctx, struct kiln_cost_model *m, const char *const *dbs, uint32_t ndb,
                    const struct kiln_costmodel_opts *o, struct kiln_costmodel_eval_report *rep)
{
    memset(rep, 0, sizeof *rep);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct cm_set s;
    KILN_TRY(collect(ctx, dbs, ndb, o, true, &s));
    enum kiln_status st = KILN_OK;
    rep->w = kiln_arena_alloc(ctx, sizeof *rep->w * (s.n + 1));
    if (!rep->w)
        st = ctx->err.status;
    double lacc = 0, lreg = 0, lreg5 = 0, lrand = 0;
    for (uint32_t i = 0; i < s.n && st == KILN_OK; i++) {
        const struct cm_workload *w = &s.w[i];
        if (w->n < 2)
            continue; /* nothing to rank */
        struct kiln_feat *feats = malloc(sizeof *feats * w->n);
        double           *score = malloc(sizeof *score * w->n);
        if (!feats || !score)
            st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "costmodel", "out of memory");
        for (uint32_t j = 0; st == KILN_OK && j < w->n; j++)
            feats[j] = w->p[j].feat;
        if (st == KILN_OK)
            st = kiln_cm_predict(m, feats, w->n, score);
        if (st == KILN_OK) {
            struct kiln_costmodel_eval_one *e = &rep->w[rep->workloads++];
            memcpy(e->workload, w->key, sizeof e->workload);
            memcpy(e->kind, w->kind, sizeof e->kind);
            rank_metrics(w, score, e);
            rep->programs += e->programs;
            lacc += e->pair_acc;
            lreg += log(e->regret);
            lreg5 += log(e->regret5);
            lrand += log(e->random_regret);
        }
        free(feats);
        free(score);
    }
    rep->skipped = s.skipped;
    if (st == KILN_OK && !rep->workloads)
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "costmodel",
                       "no workload to evaluate in %s%s: none has two valid measured programs%s",
                       dbs[0], ndb > 1 ? " and the other databases" : "",
                       o->holdout ? " among the held-out ones" : "");
    if (st == KILN_OK) {
        double n = rep->workloads;
        rep->pair_acc = lacc / n;
        rep->regret = exp(lreg / n);
        rep->regret5 = exp(lreg5 / n);
        rep->random_regret = exp(lrand / n);
    }
    set_free(&s);
    return st;
}

bool
kiln_costmodel_held_out(const char *workload, uint32_t pct)
{
    return pct && held_out(workload, pct);
}

/* ---- model files ---- */

enum kiln_status
kiln_costmodel_save_file(kiln_ctx *ctx, const struct kiln_cost_model *m, const char *path)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_buf buf = {0};
    KILN_TRY(kiln_cm_save(m, &buf));
    /* a temporary file in the same directory, renamed into place: a reader never sees half a
     * model, and a failed write leaves the old one */
    char *tmp = kiln_arena_printf(ctx, "%s.XXXXXX", path);
    if (!tmp)
        return ctx->err.status;
    int fd = mkstemp(tmp);
    if (fd < 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "costmodel", "cannot write %s: %s", path,
                         strerror(errno));
    (void)fchmod(fd, 0644); /* mkstemp makes it 0600; a model is no secret */
    FILE *f = fdopen(fd, "wb");
    bool  ok = f && fwrite(buf.data, 1, buf.len, f) == buf.len;
    int   err = errno;
    if (f ? fclose(f) != 0 : close(fd) != 0)
        ok = false;
    if (ok && rename(tmp, path) != 0) {
        err = errno;
        ok = false;
    }
    if (!ok) {
        unlink(tmp);
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "costmodel", "cannot write %s: %s", path,
                         strerror(err ? err : EIO));
    }
    return KILN_OK;
}

enum kiln_status
kiln_costmodel_load_file(kiln_ctx *ctx, const char *path, struct kiln_cost_model **out)
{
    *out = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_cost_model *m = kiln_cm_new(ctx, 1);
    if (!m)
        return ctx->err.status ? ctx->err.status : KILN_ERR_NOMEM;
    enum kiln_status st = kiln_cm_load_file(m, path);
    if (st != KILN_OK) {
        kiln_cm_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}
