/* tuner/worker.c -- `kiln worker`: serves the jobs of one stream (its target and CPU model)
 * through the consumer group "workers", measuring each with the local measurer (tuner/
 * measure.c: build workers and a fresh runner process per candidate, the same timeouts), then
 * XADDs the reply to the job's reply stream, XACKs and XDELs the job. Every few seconds it
 * claims (XAUTOCLAIM) jobs pending longer than claim_after_s with a worker that died; a job
 * already delivered KILN_QUEUE_MAX_DELIVERIES times is answered as a CRASH, not measured again.
 * A malformed job gets a "rejected" reply when it names a reply stream, and is dropped (with a
 * line on stderr) when it does not; the worker goes on either way.
 *
 * Measurers are cached by (graph, seed, settings): the inputs and the reference of a task are
 * computed once per worker. */
#include "queue.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef KILN_HAVE_HIREDIS
#include <hiredis/hiredis.h>

#define CACHE_SIZE    4
#define MAX_ELEMENTS  (1ll << 28) /* elements of all tensors of a job's graph */
#define CLAIM_EVERY_S 2.0

struct centry {
    kiln_ctx             *ctx;
    struct kiln_measurer *m;
    char                 *key; /* settings line + graph text */
    size_t                keylen;
    uint64_t              used;
};

struct worker {
    kiln_ctx                      *ctx;
    const struct kiln_worker_opts *o;
    struct kiln_redis             *r;
    struct kiln_queue_url          u;
    const char                    *target_spec, *target, *key;
    char                           consumer[128];
    struct centry                  cache[CACHE_SIZE];
    uint64_t                       clock;
};

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void
pause_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

static bool
stopped(const struct worker *w)
{
    return w->o->stop && *w->o->stop;
}

static void
centry_free(struct centry *e)
{
    if (e->m)
        kiln_measurer_free(e->m);
    if (e->ctx)
        kiln_ctx_free(e->ctx);
    free(e->key);
    memset(e, 0, sizeof *e);
}

/* The measurer of the job's graph, seed and settings: cached, or made (parse, inputs,
 * reference). NULL with why (the job is rejected) when it cannot be. */
static struct kiln_measurer *
measurer_for(struct worker *w, const struct kiln_queue_job *j, char *why, size_t whysize)
{
    char   head[512];
    int    hl = snprintf(head, sizeof head, "%llu|%u|%u|%.17g|%d|%d|%d|%.17g|%.17g\n",
                         (unsigned long long)j->seed, j->mo.repeat, j->mo.warmup, j->mo.min_repeat_ms,
                         j->mo.flush_cache, j->mo.flush_weights, j->mo.threads, j->mo.build_timeout_s,
                         j->mo.ref_max_flops);
    size_t keylen = (size_t)hl + j->graph_len;
    for (int i = 0; i < CACHE_SIZE; i++) {
        struct centry *e = &w->cache[i];
        if (e->m && e->keylen == keylen && !memcmp(e->key, head, (size_t)hl)
            && !memcmp(e->key + hl, j->graph, j->graph_len)) {
            e->used = ++w->clock;
            return e->m;
        }
    }
    struct centry *e = &w->cache[0];
    for (int i = 1; i < CACHE_SIZE; i++)
        if (w->cache[i].used < e->used)
            e = &w->cache[i];
    centry_free(e);
    e->key = malloc(keylen);
    e->ctx = kiln_ctx_new(NULL);
    if (!e->key || !e->ctx) {
        snprintf(why, whysize, "out of memory");
        centry_free(e);
        return NULL;
    }
    memcpy(e->key, head, (size_t)hl);
    memcpy(e->key + hl, j->graph, j->graph_len);
    e->keylen = keylen;
    struct kiln_graph *g;
    struct kiln_target t;
    if (kiln_graph_parse(e->ctx, j->graph, j->graph_len, "job graph", &g) != KILN_OK)
        goto fail;
    int64_t elems = 0;
    for (uint32_t i = 0; i < kiln_graph_ntensors(g); i++) {
        int64_t ne = kiln_graph_tensor_numel(g, i);
        if (ne < 0 || ne > MAX_ELEMENTS || (elems += ne) > MAX_ELEMENTS) {
            snprintf(why, whysize, "the job's graph has more than %lld tensor elements",
                     (long long)MAX_ELEMENTS);
            centry_free(e);
            return NULL;
        }
    }
    if (kiln_cg_target_parse(e->ctx, w->target_spec, &t) != KILN_OK)
        goto fail;
    if (kiln_measurer_new(e->ctx, g, &t, &j->mo, j->seed, &e->m) != KILN_OK)
        goto fail;
    e->used = ++w->clock;
    return e->m;
fail:
    kiln_error_format(kiln_ctx_error(e->ctx), why, whysize);
    centry_free(e);
    return NULL;
}

/* XADDs the reply, retrying the connection until it works or the worker is stopped (false);
 * a reply Redis refuses is said on stderr and dropped (true: the job is done with). */
static bool
send_reply(struct worker *w, const char *reply_to, const struct kiln_queue_reply *rep)
{
    const char *names[KILN_QUEUE_REPLY_FIELDS], *values[KILN_QUEUE_REPLY_FIELDS];
    char        buf[6][64], times[KILN_QUEUE_TIMES_LEN], why[512];
    size_t      nf;
    kiln_queue_reply_encode(rep, names, values, buf, times, &nf);
    const char *argv[6 + 2 * KILN_QUEUE_REPLY_FIELDS] = {"XADD", reply_to, "MAXLEN",
                                                         "~",    "100000", "*"};
    int         argc = 6;
    for (size_t i = 0; i < nf; i++) {
        argv[argc++] = names[i];
        argv[argc++] = values[i];
    }
    for (double delay = 0.5;; delay = fmin(2 * delay, 5)) {
        redisReply *r = kiln_redis_cmd(w->r, argc, argv, NULL, why, sizeof why);
        if (r) {
            if (r->type == REDIS_REPLY_ERROR)
                fprintf(stderr, "kiln worker: Redis refused the reply to %s (dropped): %s\n",
                        reply_to, r->str);
            freeReplyObject(r);
            /* a reply stream nobody reads any more goes away by itself */
            const char *ex[3] = {"EXPIRE", reply_to, "86400"};
            kiln_redis_reply_free(kiln_redis_cmd(w->r, 3, ex, NULL, why, sizeof why));
            return true;
        }
        if (stopped(w))
            return false;
        fprintf(stderr, "kiln worker: %s; retrying\n", why);
        pause_s(delay);
    }
}

/* XACK and XDEL of the job entry (best effort: an entry left pending is claimed later). */
static void
finish_entry(struct worker *w, const char *eid)
{
    char        why[512];
    const char *ack[4] = {"XACK", w->key, KILN_QUEUE_GROUP, eid};
    const char *del[3] = {"XDEL", w->key, eid};
    kiln_redis_reply_free(kiln_redis_cmd(w->r, 4, ack, NULL, why, sizeof why));
    kiln_redis_reply_free(kiln_redis_cmd(w->r, 3, del, NULL, why, sizeof why));
}

/* Serves one entry [id, [fields]]; deliveries: how often Redis has handed it out. */
static void
serve_entry(struct worker *w, const redisReply *e, long long deliveries)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
        || e->element[0]->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "kiln worker: an entry of %s is not [id, fields]; skipped\n", w->key);
        return;
    }
    const char       *eid = e->element[0]->str;
    const redisReply *fs = e->element[1];
    size_t            nf = fs->type == REDIS_REPLY_ARRAY ? fs->elements : 0;
    const char      **f = calloc(nf + 1, sizeof *f);
    size_t           *fl = calloc(nf + 1, sizeof *fl);
    if (!f || !fl) {
        free(f);
        free(fl);
        return; /* stays pending: claimed again later */
    }
    bool shape = fs->type == REDIS_REPLY_ARRAY;
    for (size_t i = 0; i < nf; i++) {
        shape &= fs->element[i]->type == REDIS_REPLY_STRING;
        f[i] = fs->element[i]->str;
        fl[i] = fs->element[i]->len;
    }
    struct kiln_queue_job   j;
    struct kiln_queue_reply rep;
    char                    why[512];
    memset(&j, 0, sizeof j);
    memset(&rep, 0, sizeof rep);
    snprintf(rep.worker, sizeof rep.worker, "%s", w->consumer);
    bool valid = shape && kiln_queue_job_decode(f, fl, nf, w->u.name, &j, why, sizeof why);
    if (!shape) {
        snprintf(why, sizeof why, "the job's fields are not strings");
        j.reply_to[0] = 0;
    }
    snprintf(rep.id, sizeof rep.id, "%s", j.id);
    if (valid && strcmp(j.target, w->target)) {
        snprintf(why, sizeof why, "the job is for target '%.150s', this worker measures '%.150s'",
                 j.target, w->target);
        valid = false;
    }
    double t0 = now_s();
    if (!valid) {
        rep.rejected = true;
        snprintf(rep.r.msg, sizeof rep.r.msg, "invalid job: %.480s", why);
    } else if (deliveries > KILN_QUEUE_MAX_DELIVERIES) {
        rep.r.error = KILN_MEASURE_CRASH;
        snprintf(rep.r.msg, sizeof rep.r.msg,
                 "handed out %lld times: the workers measuring it before died (killed by this "
                 "candidate, or otherwise); not measured again",
                 deliveries);
    } else {
        struct kiln_measurer *m = measurer_for(w, &j, why, sizeof why);
        if (!m) {
            rep.rejected = true;
            snprintf(rep.r.msg, sizeof rep.r.msg, "%.500s", why);
        } else {
            char *js = NULL;
            if (j.schedule && !(js = strndup(j.schedule, j.schedule_len))) {
                free(f);
                free(fl);
                return; /* out of memory: stays pending */
            }
            struct kiln_measure_input in = {js, j.check, NULL};
            kiln_measurer_set_run_timeout(m, j.mo.run_timeout_s);
            kiln_measurer_set_hopeless(m, j.hopeless_s);
            enum kiln_status st = kiln_measure(m, &in, 1, &rep.r);
            free(js);
            if (st != KILN_OK) { /* the worker's own failure (fork, files): not the job's */
                fprintf(stderr, "kiln worker: measuring job %s failed here; left pending\n", j.id);
                for (int i = 0; i < CACHE_SIZE; i++)
                    if (w->cache[i].m == m)
                        centry_free(&w->cache[i]);
                free(f);
                free(fl);
                return;
            }
        }
    }
    rep.run_s = fmax(0, now_s() - t0 - rep.r.build_s);
    if (j.reply_to[0] && rep.id[0]) {
        if (!send_reply(w, j.reply_to, &rep)) {
            free(f);
            free(fl);
            return; /* stopped: stays pending */
        }
    }
    if (!j.reply_to[0] || !rep.id[0])
        fprintf(stderr, "kiln worker: dropped entry %s (no reply stream or id to answer): %s\n",
                eid, rep.r.msg);
    else if (rep.rejected)
        fprintf(stderr, "kiln worker: rejected job %s: %s\n", rep.id, rep.r.msg);
    else
        fprintf(stderr, "kiln worker: job %s: %s %.6g s (build %.2f s, run %.2f s)\n", rep.id,
                kiln_measure_error_name[rep.r.error], rep.r.time_s, rep.r.build_s, rep.run_s);
    finish_entry(w, eid);
    free(f);
    free(fl);
}

/* How often the entry has been handed out (XPENDING); 1 when Redis does not say. */
static long long
deliveries_of(struct worker *w, const char *eid)
{
    char        why[512];
    const char *argv[6] = {"XPENDING", w->key, KILN_QUEUE_GROUP, eid, eid, "1"};
    redisReply *r = kiln_redis_cmd(w->r, 6, argv, NULL, why, sizeof why);
    long long   n = 1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1
        && r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 4
        && r->element[0]->element[3]->type == REDIS_REPLY_INTEGER)
        n = r->element[0]->element[3]->integer;
    kiln_redis_reply_free(r);
    return n;
}

/* Creates the group (and the stream); an existing group is fine. False when the connection
 * failed. */
static bool
ensure_group(struct worker *w, char *why, size_t whysize)
{
    const char *argv[6] = {"XGROUP", "CREATE", w->key, KILN_QUEUE_GROUP, "0", "MKSTREAM"};
    redisReply *r = kiln_redis_cmd(w->r, 6, argv, NULL, why, whysize);
    if (!r)
        return false;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9))
        fprintf(stderr, "kiln worker: XGROUP CREATE: %s\n", r->str);
    freeReplyObject(r);
    return true;
}

static enum kiln_status
serve(struct worker *w)
{
    char     why[512];
    char     claim_ms[32];
    double   last_claim = 0, delay = 0.5;
    uint32_t served = 0;
    bool     connected = false;
    snprintf(claim_ms, sizeof claim_ms, "%.0f", w->o->claim_after_s * 1e3);
    while (!stopped(w) && !(w->o->max_jobs && served >= w->o->max_jobs)) {
        if (!connected) {
            if (!kiln_redis_connect(w->r, why, sizeof why) || !ensure_group(w, why, sizeof why)) {
                fprintf(stderr, "kiln worker: %s; retrying\n", why);
                pause_s(delay);
                delay = fmin(2 * delay, 5);
                continue;
            }
            connected = true;
            delay = 0.5;
            fprintf(stderr, "kiln worker: serving '%s' at %s:%d as %s\n", w->key, w->u.host,
                    w->u.port, w->consumer);
        }
        redisReply *r = NULL;
        bool        claimed = false;
        if (now_s() - last_claim >= CLAIM_EVERY_S) {
            last_claim = now_s();
            const char *argv[8] = {"XAUTOCLAIM", w->key, KILN_QUEUE_GROUP, w->consumer,
                                   claim_ms,     "0-0",  "COUNT",          "1"};
            r = kiln_redis_cmd(w->r, 8, argv, NULL, why, sizeof why);
            claimed = true;
        } else {
            const char *argv[10] = {"XREADGROUP", "GROUP", KILN_QUEUE_GROUP, w->consumer, "COUNT",
                                    "1",          "BLOCK", "1000",           "STREAMS",   w->key};
            const char *all[11];
            memcpy(all, argv, sizeof argv);
            all[10] = ">";
            r = kiln_redis_cmd(w->r, 11, all, NULL, why, sizeof why);
        }
        if (!r) {
            fprintf(stderr, "kiln worker: %s\n", why);
            connected = false;
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            /* NOGROUP: Redis restarted without its data; anything else: say it and wait */
            fprintf(stderr, "kiln worker: Redis: %s\n", r->str);
            freeReplyObject(r);
            connected = false;
            pause_s(1);
            continue;
        }
        const redisReply *entries = NULL;
        if (claimed && r->type == REDIS_REPLY_ARRAY && r->elements >= 2)
            entries = r->element[1];
        else if (!claimed && r->type == REDIS_REPLY_ARRAY && r->elements == 1
                 && r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2)
            entries = r->element[0]->element[1];
        if (entries && entries->type == REDIS_REPLY_ARRAY) {
            for (size_t i = 0; i < entries->elements; i++) {
                const redisReply *e = entries->element[i];
                long long         d = 1;
                if (claimed && e->type == REDIS_REPLY_ARRAY && e->elements == 2
                    && e->element[0]->type == REDIS_REPLY_STRING) {
                    d = deliveries_of(w, e->element[0]->str);
                    fprintf(stderr, "kiln worker: claimed %s (handed out %lld times)\n",
                            e->element[0]->str, d);
                }
                serve_entry(w, e, d);
                served++;
            }
        }
        freeReplyObject(r);
    }
    return KILN_OK;
}

enum kiln_status
kiln_worker_serve(kiln_ctx *ctx, const struct kiln_worker_opts *o)
{
    struct worker w;
    memset(&w, 0, sizeof w);
    w.ctx = ctx;
    w.o = o;
    KILN_TRY(kiln_queue_url_parse(ctx, o->url, &w.u));
    if (!(o->claim_after_s > 0) || o->claim_after_s > 86400)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "worker",
                         "the claim timeout must be a number of seconds from 0 to 86400");
    struct kiln_target t;
    w.target_spec = o->target ? o->target : "llvm";
    KILN_TRY(kiln_cg_target_parse(ctx, w.target_spec, &t));
    if (kiln_target_is_cuda(&t))
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "worker",
                         "workers measure CPU targets only, not '%s'", w.target_spec);
    w.target = kiln_cg_target_str(ctx, &t);
    if (!w.target)
        return ctx->err.status;
    w.key = o->jobs_key ? o->jobs_key
                        : kiln_queue_jobs_key(ctx, w.u.name, w.target, kiln_queue_cpu_model(ctx));
    if (!w.key)
        return ctx->err.status;
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    snprintf(w.consumer, sizeof w.consumer, "%s-%ld", host, (long)getpid());
    w.r = kiln_redis_new(&w.u);
    if (!w.r)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "worker", "out of memory");
    enum kiln_status st = serve(&w);
    for (int i = 0; i < CACHE_SIZE; i++)
        centry_free(&w.cache[i]);
    kiln_redis_free(w.r);
    return st;
}

#else /* !KILN_HAVE_HIREDIS */

enum kiln_status
kiln_worker_serve(kiln_ctx *ctx, const struct kiln_worker_opts *o)
{
    (void)o;
    return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "worker",
                     "kiln worker needs Redis support, and this kiln was built without it "
                     "(install libhiredis-dev and rebuild)");
}

#endif
