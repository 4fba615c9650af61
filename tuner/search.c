/* tuner/search.c -- the two searches over a task's programs.
 *
 * Evolutionary search (Ansor): a population sampled from the sketches plus the best measured
 * programs is scored by the cost model; for a few generations, parents are drawn in proportion
 * to their score and mutated (or crossed over with a second parent of the same sketch); the
 * best unmeasured programs seen across generations, with an epsilon share of fresh random ones,
 * are measured. Before the model has data the batch is random.
 *
 * Droplet search (coordinate descent): from the best measured program, every neighbour that
 * differs in one knob by one step is measured; the search moves to the best neighbour when it
 * is faster by a statistically significant margin (one-sided Welch t-test over the repeats,
 * p <= 0.05, and at least 1% faster), and stops when none is.
 *
 * Scoring lowers every candidate and extracts its features inside a scratch scope
 * (kiln_scratch_begin/end), so a long search does not grow the context. */
#include "search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DROPLET_P      0.05
#define REINJECT_SHARE 0.2
#define MUTATE_P       0.85
#define MAX_NEIGHBOURS 256

bool
kiln_space_features(const struct kiln_space *S, const struct kiln_prog *p, struct kiln_feat *out)
{
    kiln_ctx            *ctx = S->ctx;
    struct kiln_scratch  sc = kiln_scratch_begin(ctx);
    struct kiln_schedule s = {0};
    memset(out, 0, sizeof *out);
    bool ok = kiln_prog_schedule(ctx, S->g, &S->sk[p->sketch], p, &s) == KILN_OK
              && kiln_features_lower(ctx, S->g, &s, S->hw, out) == KILN_OK;
    if (!ok)
        kiln_feat_free(out);
    kiln_ctx_error_clear(ctx);
    kiln_scratch_end(ctx, sc);
    return ok;
}

static struct kiln_space
space_of(const struct ttask *T)
{
    return (struct kiln_space){T->ctx, T->t->g, T->hw, T->sk, T->nsk};
}

bool
kiln_ttask_features(struct ttask *T, const struct kiln_prog *p, struct kiln_feat *out)
{
    struct kiln_space S = space_of(T);
    return kiln_space_features(&S, p, out);
}

/* The schedule JSON program p makes, into *js (malloc'ed copy) and/or *h (its hash), and, when
 * feat is not NULL, its features; false when it does not emit (or, with feat, does not lower:
 * *feat is then empty). */
static bool
schedule_of(const struct kiln_space *S, const struct kiln_prog *p, char **js, uint64_t *h,
            struct kiln_feat *feat)
{
    kiln_ctx            *ctx = S->ctx;
    struct kiln_scratch  sc = kiln_scratch_begin(ctx);
    struct kiln_schedule s = {0};
    struct kiln_buf      b = {0};
    if (feat)
        memset(feat, 0, sizeof *feat);
    bool ok = kiln_prog_schedule(ctx, S->g, &S->sk[p->sketch], p, &s) == KILN_OK
              && kiln_sched_to_json(ctx, &s, &b) == KILN_OK;
    if (ok && h)
        *h = kiln_sched_hash(b.data);
    if (ok && js)
        ok = (*js = strdup(b.data)) != NULL;
    if (ok && feat && kiln_features_lower(ctx, S->g, &s, S->hw, feat) != KILN_OK) {
        kiln_feat_free(feat);
        ok = false;
    }
    kiln_ctx_error_clear(ctx);
    kiln_scratch_end(ctx, sc);
    return ok;
}

char *
kiln_ttask_schedule_json(struct ttask *T, const struct kiln_prog *p)
{
    struct kiln_space S = space_of(T);
    char             *js = NULL;
    return schedule_of(&S, p, &js, NULL, NULL) ? js : NULL;
}

uint64_t
kiln_sched_hash(const char *schedule_json)
{
    return kiln_hash_str(KILN_HASH_SEED, schedule_json ? schedule_json : "");
}

uint64_t
kiln_space_hash(const struct kiln_space *S, const struct kiln_prog *p)
{
    uint64_t h;
    /* one that does not emit (a bug the measurement reports) keeps its knob values apart */
    return schedule_of(S, p, NULL, &h, NULL) ? h : ~kiln_prog_hash(&S->sk[p->sketch], p);
}

uint64_t
kiln_ttask_hash(struct ttask *T, const struct kiln_prog *p)
{
    struct kiln_space S = space_of(T);
    return kiln_space_hash(&S, p);
}

/* ---- candidates ---- */

struct pool { /* the best candidates seen, unique by hash */
    struct kiln_evo_cand *c;
    uint32_t              n, cap;
};

static bool
pool_has(const struct pool *P, uint64_t h)
{
    for (uint32_t i = 0; i < P->n; i++)
        if (P->c[i].h == h)
            return true;
    return false;
}

static void
pool_offer(struct pool *P, const struct kiln_evo_cand *c)
{
    if (!P->cap || pool_has(P, c->h))
        return;
    if (P->n < P->cap) {
        P->c[P->n++] = *c;
        return;
    }
    uint32_t worst = 0;
    for (uint32_t i = 1; i < P->n; i++)
        if (P->c[i].score < P->c[worst].score)
            worst = i;
    if (c->score > P->c[worst].score)
        P->c[worst] = *c;
}

static int
cand_cmp_desc(const void *a, const void *b)
{
    const struct kiln_evo_cand *x = a, *y = b;
    if (x->score != y->score)
        return (x->score < y->score) - (x->score > y->score);
    return (x->h > y->h) - (x->h < y->h); /* equal scores: an order that does not depend on
                                           * qsort's */
}

static void
random_prog(const struct kiln_space *S, struct kiln_rng *rng, struct kiln_prog *p)
{
    uint32_t sk = (uint32_t)kiln_rng_below(rng, S->nsk);
    kiln_prog_sample(&S->sk[sk], rng, p);
    p->sketch = sk;
}

/* Scores n candidates with the cost model, and gives each its identity (kiln_space_hash, from
 * the same schedule the features are lowered from); candidates that do not lower score -inf. */
static enum kiln_status
score(const struct kiln_space *S, struct kiln_cost_model *cm, struct kiln_evo_cand *c, uint32_t n)
{
    kiln_ctx         *ctx = S->ctx;
    struct kiln_feat *f = calloc(n ? n : 1, sizeof *f);
    double           *sc = calloc(n ? n : 1, sizeof *sc);
    bool             *ok = calloc(n ? n : 1, sizeof *ok);
    enum kiln_status  st = KILN_OK;
    if (!f || !sc || !ok) {
        st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "tune", "out of memory scoring candidates");
        goto out;
    }
    for (uint32_t i = 0; i < n; i++)
        ok[i] = schedule_of(S, &c[i].p, NULL, &c[i].h, &f[i]);
    st = kiln_cm_predict(cm, f, n, sc);
    for (uint32_t i = 0; i < n; i++)
        c[i].score = ok[i] && st == KILN_OK && isfinite(sc[i]) ? sc[i] : -INFINITY;
out:
    for (uint32_t i = 0; f && i < n; i++)
        kiln_feat_free(&f[i]);
    free(f);
    free(sc);
    free(ok);
    return st;
}

/* Roulette-wheel selection over scores shifted to be positive. */
static uint32_t
select_parent(struct kiln_rng *rng, const struct kiln_evo_cand *c, uint32_t n, double lo,
              double total)
{
    double x = kiln_rng_uniform(rng) * total;
    for (uint32_t i = 0; i < n; i++) {
        if (!isfinite(c[i].score))
            continue;
        x -= c[i].score - lo + 1e-9;
        if (x <= 0)
            return i;
    }
    return (uint32_t)kiln_rng_below(rng, n);
}

enum kiln_status
kiln_evolve(const struct kiln_space *S, struct kiln_cost_model *cm, struct kiln_rng *rng,
            const struct kiln_evo_opts *o, struct kiln_evo_cand *best, uint32_t cap, uint32_t *n)
{
    uint32_t              popn = o->population ? o->population : 256;
    uint32_t              gens = o->generations;
    struct kiln_evo_cand *pop = calloc(popn, sizeof *pop);
    struct kiln_evo_cand *next = calloc(popn, sizeof *next);
    struct pool           P = {best, 0, cap};
    enum kiln_status      st = KILN_OK;
    *n = 0;
    if (!pop || !next) {
        st = KILN_FAIL(S->ctx, KILN_ERR_NOMEM, "tune", "out of memory in the evolutionary search");
        goto out;
    }
    /* initial population: the programs given, then random samples */
    for (uint32_t i = 0; i < popn; i++) {
        if (i < o->ninit)
            pop[i].p = o->init[i];
        else
            random_prog(S, rng, &pop[i].p);
        if (o->in_prior)
            kiln_prog_in_prior(&S->sk[pop[i].p.sketch], rng, &pop[i].p);
    }
    for (uint32_t gen = 0; gen <= gens; gen++) {
        if ((st = score(S, cm, pop, popn)) != KILN_OK)
            goto out;
        double lo = INFINITY, total = 0;
        for (uint32_t i = 0; i < popn; i++) {
            if (!isfinite(pop[i].score))
                continue;
            lo = fmin(lo, pop[i].score);
            if (!o->exclude || !o->exclude(o->ud, pop[i].h))
                pool_offer(&P, &pop[i]);
        }
        if (gen == gens || !isfinite(lo))
            break;
        for (uint32_t i = 0; i < popn; i++)
            if (isfinite(pop[i].score))
                total += pop[i].score - lo + 1e-9;
        for (uint32_t i = 0; i < popn; i++) {
            const struct kiln_evo_cand *a = &pop[select_parent(rng, pop, popn, lo, total)];
            next[i].p = a->p;
            const struct kiln_sketch *sk = &S->sk[a->p.sketch];
            if (kiln_rng_uniform(rng) < MUTATE_P) {
                kiln_prog_mutate(sk, rng, &next[i].p);
            } else {
                const struct kiln_evo_cand *b = &pop[select_parent(rng, pop, popn, lo, total)];
                if (b->p.sketch == a->p.sketch)
                    kiln_prog_crossover(sk, rng, &a->p, &b->p, &next[i].p);
                else
                    kiln_prog_mutate(sk, rng, &next[i].p);
            }
            if (o->in_prior)
                kiln_prog_in_prior(sk, rng, &next[i].p);
        }
        struct kiln_evo_cand *tmp = pop;
        pop = next;
        next = tmp;
    }
    qsort(P.c, P.n, sizeof *P.c, cand_cmp_desc);
    *n = P.n;
out:
    free(pop);
    free(next);
    return st;
}

static int
tprog_cmp_time(const void *a, const void *b, void *ud)
{
    const struct tprog *m = ud;
    const struct tprog *x = &m[*(const uint32_t *)a], *y = &m[*(const uint32_t *)b];
    return (x->time_s > y->time_s) - (x->time_s < y->time_s);
}

/* Indices of valid measured programs with a program, fastest first (at most max). */
static uint32_t
best_measured(const struct ttask *T, uint32_t *idx, uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < T->nm; i++)
        if (T->m[i].has_prog && T->m[i].error == KILN_MEASURE_OK && T->m[i].time_s > 0)
            idx[n++] = i;
    /* insertion sort: n is at most a few thousand and this runs once per round */
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && tprog_cmp_time(&idx[j], &idx[j - 1], T->m) < 0; j--) {
            uint32_t t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    return n < max ? n : max;
}

#define POOL_OTHERS 4096 /* programs of the other tasks a model trains on, the latest */

/* Appends U's programs from index `from` on: features (shallow: rows stay owned by U) and the
 * label, throughput normalised by U's best (0 for errors). */
static uint32_t
append_task(const struct ttask *U, uint32_t from, struct kiln_feat *f, double *y, uint32_t n)
{
    double best = INFINITY;
    for (uint32_t i = 0; i < U->nm; i++)
        if (U->m[i].feat.nrow && U->m[i].error == KILN_MEASURE_OK && U->m[i].time_s > 0)
            best = fmin(best, U->m[i].time_s);
    for (uint32_t i = from; i < U->nm; i++) {
        if (!U->m[i].feat.nrow)
            continue;
        f[n] = U->m[i].feat;
        y[n] = U->m[i].error == KILN_MEASURE_OK && U->m[i].time_s > 0 && isfinite(best)
                   ? best / U->m[i].time_s
                   : 0;
        n++;
    }
    return n;
}

/* The task's model learns from every measured program of the session, as Ansor's does: the
 * features describe loop nests, not tasks, and labels normalised by each task's best time
 * rank programs within a task. A task with few measurements of its own (all of them at the
 * start of a whole-network tuning run, at tens of trials per task) so gets a useful model
 * from the first round. Its own programs all count; the other tasks' latest POOL_OTHERS. */
static enum kiln_status
train(struct tsession *S, struct ttask *T)
{
    uint32_t cap = T->nm + 1, n = 0, others = 0;
    for (uint32_t u = 0; u < S->ntasks; u++)
        if (&S->tasks[u] != T)
            others += S->tasks[u].nm;
    cap += others < POOL_OTHERS ? others : POOL_OTHERS;
    struct kiln_feat *f = calloc(cap, sizeof *f);
    double           *y = calloc(cap, sizeof *y);
    enum kiln_status  st = KILN_OK;
    if (!f || !y) {
        free(f);
        free(y);
        return KILN_FAIL(T->ctx, KILN_ERR_NOMEM, "tune", "out of memory training the model");
    }
    n = append_task(T, 0, f, y, n);
    uint32_t left = POOL_OTHERS;
    for (uint32_t u = S->ntasks; u-- > 0 && left > 0;) {
        const struct ttask *U = &S->tasks[u];
        if (U == T || !U->nm)
            continue;
        uint32_t take = U->nm < left ? U->nm : left;
        n = append_task(U, U->nm - take, f, y, n);
        left -= take;
    }
    if (n >= 8 && (st = kiln_cm_train(T->cm, f, y, n)) == KILN_OK)
        T->model_n = n;
    if (st == KILN_OK)
        T->trained_at = S->nrecorded;
    free(f);
    free(y);
    return st;
}

static bool
batch_has(const uint64_t *bh, uint32_t nb, uint64_t h)
{
    for (uint32_t i = 0; i < nb; i++)
        if (bh[i] == h)
            return true;
    return false;
}

static bool
measured(void *ud, uint64_t h)
{
    return kiln_ttask_seen(ud, h);
}

/* Average ranks (1-based, ties sharing their mean rank) of v[0..n) into rk. */
static void
ranks(const double *v, uint32_t n, double *rk)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t less = 0, same = 0;
        for (uint32_t j = 0; j < n; j++) {
            less += v[j] < v[i];
            same += v[j] == v[i];
        }
        rk[i] = less + 0.5 * (same + 1);
    }
}

double
kiln_spearman(const double *x, const double *y, uint32_t n)
{
    double *rx = malloc(sizeof *rx * (n ? 2 * n : 1)), *ry = rx + n;
    if (!rx || n < 2) {
        free(rx);
        return 0;
    }
    ranks(x, n, rx);
    ranks(y, n, ry);
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (uint32_t i = 0; i < n; i++) {
        mx += rx[i] / n;
        my += ry[i] / n;
    }
    for (uint32_t i = 0; i < n; i++) {
        sxy += (rx[i] - mx) * (ry[i] - my);
        sxx += (rx[i] - mx) * (rx[i] - mx);
        syy += (ry[i] - my) * (ry[i] - my);
    }
    free(rx);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0;
}

/* The model's accuracy on the round's batch (T->m[from..nm), measured just now, with the model
 * that chose them): Spearman's rank correlation of its scores against the measured throughput
 * (1 / time; a failure 0), one row of the task's rank curve. */
static enum kiln_status
rank_round(struct ttask *T, uint32_t from)
{
    uint32_t          n = T->nm - from, k = 0;
    struct kiln_feat *f = calloc(n, sizeof *f);
    double           *score = calloc(n, sizeof *score), *thr = calloc(n, sizeof *thr);
    enum kiln_status  st = KILN_OK;
    if (!f || !score || !thr) {
        st = KILN_FAIL(T->ctx, KILN_ERR_NOMEM, "tune", "out of memory");
        goto out;
    }
    for (uint32_t i = from; i < T->nm; i++) {
        const struct tprog *q = &T->m[i];
        if (!q->feat.nrow)
            continue;
        f[k] = q->feat;
        thr[k++] = q->error == KILN_MEASURE_OK && q->time_s > 0 ? 1 / q->time_s : 0;
    }
    if (k < 2 || (st = kiln_cm_predict(T->cm, f, k, score)) != KILN_OK)
        goto out;
    T->rank_rho = kiln_spearman(score, thr, k);
    T->rank_rounds++;
    fprintf(T->rank_curve, "%u,%u,%.4f\n", T->trials, k, T->rank_rho);
    fflush(T->rank_curve);
out:
    free(f);
    free(score);
    free(thr);
    return st;
}

enum kiln_status
kiln_search_ansor_round(struct tsession *S, struct ttask *T, uint32_t n, uint32_t *done)
{
    const struct kiln_tune_opts *o = S->o;
    kiln_ctx                    *ctx = T->ctx;
    uint32_t                     popn = o->population ? o->population : 256;
    struct kiln_prog            *batch = calloc(n + 1, sizeof *batch);
    uint64_t                    *bh = calloc(n + 1, sizeof *bh);
    uint32_t                    *idx = calloc(T->nm + 1, sizeof *idx);
    struct kiln_prog            *init = calloc(popn, sizeof *init);
    struct kiln_evo_cand        *pool = calloc(n * 2 + 1, sizeof *pool);
    uint32_t                     nb = 0, npool = 0;
    enum kiln_status             st = KILN_OK;
    *done = 0;
    if (!batch || !bh || !idx || !init || !pool) {
        st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "tune", "out of memory in the evolutionary search");
        goto out;
    }
    if (S->nrecorded > T->trained_at || !kiln_cm_trained(T->cm))
        if ((st = train(S, T)) != KILN_OK)
            goto out;
    uint32_t neps = (uint32_t)ceil(n * (o->eps_random > 0 ? o->eps_random : 0));
    if (kiln_cm_trained(T->cm)) {
        /* initial population: the best measured, then random samples */
        uint32_t np = best_measured(T, idx, (uint32_t)(popn * REINJECT_SHARE));
        for (uint32_t i = 0; i < np; i++)
            init[i] = T->m[idx[i]].p;
        struct kiln_space    sp = space_of(T);
        struct kiln_evo_opts eo = {.population = popn,
                                   .generations = o->generations ? o->generations : 4,
                                   .init = init,
                                   .ninit = np,
                                   .exclude = measured,
                                   .ud = T};
        if ((st = kiln_evolve(&sp, T->cm, &T->rng, &eo, pool, n * 2, &npool)) != KILN_OK)
            goto out;
        for (uint32_t i = 0; i < npool && nb + neps < n; i++) {
            if (batch_has(bh, nb, pool[i].h))
                continue;
            batch[nb] = pool[i].p;
            bh[nb++] = pool[i].h;
        }
    }
    /* fill up with random programs (all of the batch before the model has data); at least
     * 1024 tries however small the batch: with 64 per program, the last round of a budget
     * (one program) found only programs measured before in a small space and ended the task
     * as exhausted a trial early */
    uint32_t          max_tries = 64 * (n > 16 ? n : 16);
    struct kiln_space sp = space_of(T);
    for (uint32_t tries = 0; nb < n && tries < max_tries; tries++) {
        struct kiln_prog p;
        random_prog(&sp, &T->rng, &p);
        uint64_t h = kiln_ttask_hash(T, &p);
        if (kiln_ttask_seen(T, h) || batch_has(bh, nb, h))
            continue;
        batch[nb] = p;
        bh[nb++] = h;
    }
    uint32_t nm0 = T->nm;
    bool     model = kiln_cm_trained(T->cm);
    st = kiln_search_measure(S, T, batch, nb, "ansor", done);
    if (st == KILN_OK && model && T->rank_curve && T->nm > nm0)
        st = rank_round(T, nm0);
out:
    free(batch);
    free(bh);
    free(idx);
    free(init);
    free(pool);
    return st;
}

/* ---- Droplet ---- */

/* Regularised incomplete beta function I_x(a, b) by its continued fraction (Lentz). */
static double
betacf(double a, double b, double x)
{
    const double tiny = 1e-300;
    double       c = 1, d = 1 - (a + b) * x / (a + 1);
    d = fabs(d) < tiny ? tiny : d;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 200; m++) {
        double m2 = 2.0 * m, aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
        d = 1 + aa * d;
        d = fabs(d) < tiny ? tiny : d;
        c = 1 + aa / c;
        c = fabs(c) < tiny ? tiny : c;
        d = 1 / d;
        h *= d * c;
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
        d = 1 + aa * d;
        d = fabs(d) < tiny ? tiny : d;
        c = 1 + aa / c;
        c = fabs(c) < tiny ? tiny : c;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-12)
            break;
    }
    return h;
}

static double
ibeta(double a, double b, double x)
{
    if (x <= 0)
        return 0;
    if (x >= 1)
        return 1;
    double lbt = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log(1 - x);
    if (x < (a + 1) / (a + b + 2))
        return exp(lbt) * betacf(a, b, x) / a;
    return 1 - exp(lbt) * betacf(b, a, 1 - x) / b;
}

double
kiln_welch_p(double ma, double sa, uint32_t na, double mb, double sb, uint32_t nb)
{
    if (na < 2 || nb < 2) /* no spread known: require the minimum gain only */
        return ma < mb ? 0 : 1;
    double va = sa * sa / na, vb = sb * sb / nb;
    if (va + vb <= 0)
        return ma < mb ? 0 : 1;
    double t = (mb - ma) / sqrt(va + vb);
    double df = (va + vb) * (va + vb) / (va * va / (na - 1) + vb * vb / (nb - 1));
    double tail = 0.5 * ibeta(df / 2, 0.5, df / (df + t * t)); /* P(T > |t|) */
    return t > 0 ? tail : 1 - tail;
}

/* Droplet's starting point: the fastest valid program of the task's sketches. That is the
 * task's best unless the default schedule (or an imported one, which has no knobs to move)
 * is faster than every program sampled so far; Droplet then starts from the best sampled
 * program rather than handing the round back to random sampling. -1 = none yet. */
static int32_t
best_program(const struct ttask *T)
{
    int32_t b = -1;
    for (uint32_t k = 0; k < T->nm; k++)
        if (T->m[k].has_prog && T->m[k].error == KILN_MEASURE_OK && T->m[k].time_s > 0
            && (b < 0 || T->m[k].time_s < T->m[b].time_s))
            b = (int32_t)k;
    return b;
}

enum kiln_status
kiln_search_droplet_round(struct tsession *S, struct ttask *T, uint32_t n, uint32_t *done)
{
    *done = 0;
    if (T->center_m < 0) {
        int32_t from = best_program(T);
        if (from < 0) {
            /* nothing to start from yet: a random batch */
            return kiln_search_ansor_round(S, T, n, done);
        }
        T->center_m = from;
        T->center = T->m[from].p;
    }
    struct kiln_prog *nb = calloc(MAX_NEIGHBOURS, sizeof *nb);
    uint64_t         *nh = calloc(MAX_NEIGHBOURS, sizeof *nh);
    struct kiln_prog *todo = calloc(MAX_NEIGHBOURS, sizeof *todo);
    if (!nb || !nh || !todo) {
        free(nb);
        free(nh);
        free(todo);
        return KILN_FAIL(T->ctx, KILN_ERR_NOMEM, "tune", "out of memory in Droplet search");
    }
    const struct kiln_sketch *sk = &T->sk[T->center.sketch];
    uint32_t                  cnt = kiln_prog_neighbours(sk, &T->center, nb, MAX_NEIGHBOURS);
    uint32_t                  k = 0, left = 0;
    for (uint32_t i = 0; i < cnt; i++) {
        nh[i] = kiln_ttask_hash(T, &nb[i]);
        bool dup = kiln_ttask_seen(T, nh[i]);
        for (uint32_t j = 0; j < i && !dup; j++)
            dup = nh[j] == nh[i];
        if (dup)
            continue;
        if (k < n)
            todo[k++] = nb[i];
        else
            left++;
    }
    enum kiln_status st = k ? kiln_search_measure(S, T, todo, k, "droplet", done) : KILN_OK;
    free(todo);
    if (st != KILN_OK || left || (S->o->stop && *S->o->stop)) {
        free(nb);
        free(nh);
        return st; /* more neighbours of this point to measure next round */
    }
    T->droplet_rounds++;
    /* every neighbour of the centre is measured: move to the best if significantly better */
    const struct tprog *c = &T->m[T->center_m];
    int32_t             move = -1;
    for (uint32_t i = 0; i < T->nm; i++) {
        const struct tprog *q = &T->m[i];
        if (q->error != KILN_MEASURE_OK || !q->has_prog || q->p.sketch != T->center.sketch
            || q->time_s <= 0 || q->time_s >= c->time_s * (1 - S->o->droplet_min_gain))
            continue;
        bool is_nb = false;
        for (uint32_t j = 0; j < cnt && !is_nb; j++)
            is_nb = nh[j] == q->h;
        if (!is_nb)
            continue;
        if (kiln_welch_p(q->time_s, q->stddev_s, q->nrepeat, c->time_s, c->stddev_s, c->nrepeat)
            > DROPLET_P)
            continue;
        if (move < 0 || q->time_s < T->m[move].time_s)
            move = (int32_t)i;
    }
    free(nb);
    free(nh);
    if (move < 0) {
        T->converged_best = T->best;
        T->center_m = -1;
        T->phase = S->o->strategy == KILN_STRATEGY_ANSOR_DROPLET ? TPHASE_ANSOR : TPHASE_DONE;
        return KILN_OK;
    }
    T->center_m = move;
    T->center = T->m[move].p;
    return KILN_OK;
}

enum kiln_status
kiln_search_measure(struct tsession *S, struct ttask *T, const struct kiln_prog *progs, uint32_t n,
                    const char *strategy, uint32_t *done)
{
    /* on workers (--queue) up to 64 programs go out at once, for as many workers */
    uint32_t cap = S->o->measure.queue ? 64 : 16;
    uint32_t chunk = S->o->measure.queue           ? cap
                     : S->o->measure.build_workers ? S->o->measure.build_workers
                                                   : 2;
    *done = 0;
    for (uint32_t i0 = 0; i0 < n; i0 += chunk) {
        uint32_t                   m = n - i0 < chunk ? n - i0 : chunk;
        struct kiln_measure_input  in[64];
        struct kiln_measure_result res[64];
        char                      *js[64] = {0};
        if (m > cap)
            m = cap;
        if (S->o->stop && *S->o->stop)
            return KILN_OK;
        for (uint32_t k = 0; k < m; k++) {
            if (!(js[k] = kiln_ttask_schedule_json(T, &progs[i0 + k])))
                js[k] = strdup("{\"steps\": []}");
            /* check the first programs of each sketch and every program that may be a new best
             * (the measurer checks every candidate it is asked to: cheap next to timing) */
            in[k] = (struct kiln_measure_input){.schedule_json = js[k], .check = true};
        }
        enum kiln_status st = kiln_measure(T->meas, in, m, res);
        for (uint32_t k = 0; k < m && st == KILN_OK; k++) {
            st = kiln_ttask_record(S, T, &progs[i0 + k], js[k], &res[k], strategy, true);
            if (st == KILN_OK)
                (*done)++;
        }
        for (uint32_t k = 0; k < m; k++)
            free(js[k]);
        if (st != KILN_OK)
            return st;
    }
    return KILN_OK;
}
