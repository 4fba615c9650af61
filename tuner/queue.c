/* tuner/queue.c -- measurement on workers over Redis Streams: the queue URL, the job and reply
 * messages (every field checked on arrival), the connection to Redis (hiredis), and the tuner's
 * side, which sends a batch as jobs and waits for the replies.
 *
 * Streams (NAME from the URL): jobs go to kiln:NAME:jobs:TARGET|CPU, read by the consumer group
 * "workers" of `kiln worker`s (tuner/worker.c); each measurer has its own reply stream
 * kiln:NAME:replies:PRODUCER, deleted when it is freed. A job carries the task graph as .kg text
 * and the seed of its inputs, so the worker computes the same inputs and reference as
 * kiln_measurer_new here would, and its verdict is the local one. tuner/README.md has the long
 * form. */
#include "queue.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifdef KILN_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

static void KILN_PRINTF(3, 4) whyf(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

bool
kiln_queue_available(void)
{
#ifdef KILN_HAVE_HIREDIS
    return true;
#else
    return false;
#endif
}

const char *
kiln_queue_support(void)
{
#ifdef KILN_HAVE_HIREDIS
#define QUEUE_STR2(x) #x
#define QUEUE_STR(x)  QUEUE_STR2(x)
    return "hiredis " QUEUE_STR(HIREDIS_MAJOR) "." QUEUE_STR(HIREDIS_MINOR) " (no TLS)";
#else
    return "none: kiln was built without libhiredis-dev";
#endif
}

/* ---- URL ---- */

static bool
name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'
           || c == '.' || c == '-';
}

enum kiln_status
kiln_queue_url_parse(kiln_ctx *ctx, const char *url, struct kiln_queue_url *u)
{
    memset(u, 0, sizeof *u);
    if (!url)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue", "no queue URL");
    if (!strncmp(url, "rediss://", 9))
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "queue",
                         "queue URL: TLS (rediss://) is not supported by this build's hiredis; "
                         "use redis:// on a trusted network or a tunnel");
    if (strncmp(url, "redis://", 8))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue",
                         "queue URL must look like redis://[:PASSWORD@]HOST:PORT/NAME");
    const char *p = url + 8, *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (!colon)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue",
                             "queue URL: credentials must be [USER]:PASSWORD@ before the host");
        size_t ul = (size_t)(colon - p), pl = (size_t)(at - colon - 1);
        if (ul >= sizeof u->user || pl >= sizeof u->pass || pl == 0)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue",
                             "queue URL: empty or too long user name or password");
        memcpy(u->user, p, ul);
        memcpy(u->pass, colon + 1, pl);
        p = at + 1;
    }
    const char *colon = strchr(p, ':'), *slash = strchr(p, '/');
    if (!colon || !slash || colon > slash || colon == p)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue",
                         "queue URL: expected HOST:PORT/NAME after redis://");
    size_t hl = (size_t)(colon - p);
    if (hl >= sizeof u->host)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue", "queue URL: host name too long");
    memcpy(u->host, p, hl);
    for (size_t i = 0; i < hl; i++)
        if (!name_char(u->host[i]) && u->host[i] != ':')
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue",
                             "queue URL: the host '%s' has a character other than letters, "
                             "digits, '.', '-' and '_'",
                             u->host);
    long port = 0;
    for (const char *c = colon + 1; c < slash; c++) {
        if (*c < '0' || *c > '9' || port > 65535)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue",
                             "queue URL: the port must be a number from 1 to 65535");
        port = port * 10 + (*c - '0');
    }
    if (port < 1 || port > 65535)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue",
                         "queue URL: the port must be a number from 1 to 65535");
    u->port = (int)port;
    const char *name = slash + 1;
    size_t      nl = strlen(name);
    if (nl == 0 || nl >= sizeof u->name)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue",
                         "queue URL: the queue NAME after the port must have 1 to 64 characters");
    for (size_t i = 0; i < nl; i++)
        if (!name_char(name[i]))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue",
                             "queue URL: the queue NAME may only have letters, digits, '.', '-' "
                             "and '_'");
    memcpy(u->name, name, nl);
    return KILN_OK;
}

const char *
kiln_queue_cpu_model(kiln_ctx *ctx)
{
    char  model[256] = "";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (!colon || strncmp(line, "model name", 10))
                continue;
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            snprintf(model, sizeof model, "%.*s", (int)strcspn(v, "\n"), v);
            break;
        }
        fclose(f);
    }
    if (!model[0]) {
        struct utsname un;
        snprintf(model, sizeof model, "%s", uname(&un) == 0 ? un.machine : "unknown CPU");
    }
    return kiln_arena_strdup(ctx, model);
}

const char *
kiln_queue_jobs_key(kiln_ctx *ctx, const char *name, const char *target, const char *cpu)
{
    return kiln_arena_printf(ctx, "kiln:%s:jobs:%s|%s", name, target, cpu);
}

/* ---- fields ---- */

/* A field value as a NUL-free string of at most max bytes into buf[size]; false if not. */
static bool
field_str(const char *v, size_t len, char *buf, size_t size)
{
    if (len >= size || memchr(v, 0, len))
        return false;
    memcpy(buf, v, len);
    buf[len] = 0;
    return true;
}

/* A decimal number in [lo, hi], nothing else in the field. */
static bool
field_num(const char *v, size_t len, double lo, double hi, double *out)
{
    char buf[64], *end;
    if (!field_str(v, len, buf, sizeof buf) || !buf[0]
        || strspn(buf, "0123456789+-.eE") != len) /* no spaces, hex, inf or nan */
        return false;
    errno = 0;
    double d = strtod(buf, &end);
    if (*end || errno == ERANGE || !isfinite(d) || d < lo || d > hi)
        return false;
    *out = d;
    return true;
}

static bool
field_u64(const char *v, size_t len, uint64_t *out)
{
    char buf[32], *end;
    if (!field_str(v, len, buf, sizeof buf) || buf[0] < '0' || buf[0] > '9')
        return false;
    errno = 0;
    unsigned long long x = strtoull(buf, &end, 10);
    if (*end || errno == ERANGE)
        return false;
    *out = x;
    return true;
}

enum jf {
    JF_V,
    JF_ID,
    JF_REPLY_TO,
    JF_TARGET,
    JF_GRAPH,
    JF_SCHEDULE,
    JF_CHECK,
    JF_SEED,
    JF_REPEAT,
    JF_WARMUP,
    JF_MIN_REPEAT_MS,
    JF_FLUSH,
    JF_THREADS,
    JF_BUILD_TIMEOUT,
    JF_RUN_TIMEOUT,
    JF_REF_MAX_FLOPS,
    JF_HOPELESS,
    JF_COUNT
};
static const char *const job_field[JF_COUNT] = {
    "v",
    "id",
    "reply_to",
    "target",
    "graph",
    "schedule",
    "check",
    "seed",
    "repeat",
    "warmup",
    "min_repeat_ms",
    "flush",
    "threads",
    "build_timeout_s",
    "run_timeout_s",
    "ref_max_flops",
    "hopeless_s",
};

bool
kiln_queue_job_decode(const char *const *f, const size_t *len, size_t nf, const char *name,
                      struct kiln_queue_job *j, char *why, size_t whysize)
{
    const char *val[JF_COUNT] = {0};
    size_t      vl[JF_COUNT] = {0};
    memset(j, 0, sizeof *j);
    kiln_measure_opts_default(&j->mo);
    if (nf % 2)
        return whyf(why, whysize, "odd number of strings in the job (%zu)", nf), false;
    char later[160] = ""; /* an unknown or repeated field: said once reply_to and id are read */
    for (size_t i = 0; i < nf; i += 2) {
        int k = 0;
        while (k < JF_COUNT
               && !(len[i] == strlen(job_field[k]) && !memcmp(f[i], job_field[k], len[i])))
            k++;
        char fname[40];
        if (k == JF_COUNT) {
            if (!field_str(f[i], len[i], fname, sizeof fname))
                snprintf(fname, sizeof fname, "(%zu bytes)", len[i]);
            if (!later[0])
                snprintf(later, sizeof later, "unknown job field '%s'", fname);
            continue;
        }
        if (val[k] && (k == JF_REPLY_TO || k == JF_ID)) /* whom to answer is ambiguous */
            return whyf(why, whysize, "job field '%s' given twice", job_field[k]), false;
        if (val[k]) {
            if (!later[0])
                snprintf(later, sizeof later, "job field '%s' given twice", job_field[k]);
            continue;
        }
        val[k] = f[i + 1];
        vl[k] = len[i + 1];
    }
    /* reply_to first: a job that can be answered is answered, even with an error */
    char prefix[128];
    snprintf(prefix, sizeof prefix, "kiln:%s:replies:", name);
    if (!val[JF_REPLY_TO])
        return whyf(why, whysize, "job field 'reply_to' missing"), false;
    if (!field_str(val[JF_REPLY_TO], vl[JF_REPLY_TO], j->reply_to, sizeof j->reply_to)
        || strncmp(j->reply_to, prefix, strlen(prefix)) || strlen(j->reply_to) == strlen(prefix)) {
        j->reply_to[0] = 0;
        return whyf(why, whysize,
                    "job field 'reply_to' is not a reply stream of this queue (%s...)", prefix),
               false;
    }
    if (!val[JF_ID] || !field_str(val[JF_ID], vl[JF_ID], j->id, sizeof j->id) || !j->id[0]) {
        j->id[0] = 0;
        return whyf(why, whysize, "job field 'id' missing, empty, too long or has a NUL byte"),
               false;
    }
    if (later[0])
        return whyf(why, whysize, "%s", later), false;
    for (int k = 0; k < JF_COUNT; k++)
        if (!val[k])
            return whyf(why, whysize, "job field '%s' missing", job_field[k]), false;
    char small[256];
    if (!field_str(val[JF_V], vl[JF_V], small, sizeof small) || strcmp(small, KILN_QUEUE_VERSION))
        return whyf(why, whysize, "job version is not " KILN_QUEUE_VERSION), false;
    if (!field_str(val[JF_TARGET], vl[JF_TARGET], j->target, sizeof j->target) || !j->target[0])
        return whyf(why, whysize, "job field 'target' is empty, too long or has a NUL byte"), false;
    if (vl[JF_GRAPH] == 0 || vl[JF_GRAPH] > KILN_QUEUE_MAX_GRAPH
        || memchr(val[JF_GRAPH], 0, vl[JF_GRAPH]))
        return whyf(why, whysize,
                    "job field 'graph' is empty, longer than %u bytes or has a NUL byte",
                    KILN_QUEUE_MAX_GRAPH),
               false;
    j->graph = val[JF_GRAPH];
    j->graph_len = vl[JF_GRAPH];
    if (vl[JF_SCHEDULE] > KILN_QUEUE_MAX_SCHED || memchr(val[JF_SCHEDULE], 0, vl[JF_SCHEDULE]))
        return whyf(why, whysize, "job field 'schedule' is longer than %u bytes or has a NUL byte",
                    KILN_QUEUE_MAX_SCHED),
               false;
    j->schedule = vl[JF_SCHEDULE] ? val[JF_SCHEDULE] : NULL;
    j->schedule_len = vl[JF_SCHEDULE];
    double d;
    struct {
        int     k;
        double  lo, hi;
        double *dst;
    } nums[] = {
        {JF_MIN_REPEAT_MS, 0, 60000, &j->mo.min_repeat_ms},
        {JF_BUILD_TIMEOUT, 1e-3, 3600, &j->mo.build_timeout_s},
        {JF_RUN_TIMEOUT, 1e-3, 3600, &j->mo.run_timeout_s},
        {JF_REF_MAX_FLOPS, 0, 1e13, &j->mo.ref_max_flops},
        {JF_HOPELESS, 0, 3600, &j->hopeless_s},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (!field_num(val[nums[i].k], vl[nums[i].k], nums[i].lo, nums[i].hi, nums[i].dst))
            return whyf(why, whysize, "job field '%s' is not a number from %g to %g",
                        job_field[nums[i].k], nums[i].lo, nums[i].hi),
                   false;
    struct {
        int    k;
        double hi;
    } ints[] = {
        {JF_CHECK, 1}, {JF_REPEAT, 1000}, {JF_WARMUP, 1000}, {JF_FLUSH, 2}, {JF_THREADS, 1024}};
    double iv[5];
    for (size_t i = 0; i < 5; i++)
        if (!field_num(val[ints[i].k], vl[ints[i].k], 0, ints[i].hi, &d) || d != floor(d)
            || (ints[i].k == JF_REPEAT && d < 1))
            return whyf(why, whysize, "job field '%s' is not a whole number from %d to %g",
                        job_field[ints[i].k], ints[i].k == JF_REPEAT, ints[i].hi),
                   false;
        else
            iv[i] = d;
    j->check = iv[0] != 0;
    j->mo.repeat = (uint32_t)iv[1];
    j->mo.warmup = (uint32_t)iv[2];
    j->mo.flush_cache = iv[3] == 1;
    j->mo.flush_weights = iv[3] == 2;
    j->mo.threads = (int)iv[4];
    if (!field_u64(val[JF_SEED], vl[JF_SEED], &j->seed))
        return whyf(why, whysize, "job field 'seed' is not an unsigned 64-bit decimal number"),
               false;
    return true;
}

#ifdef KILN_HAVE_HIREDIS
/* The job fields of one candidate; values formatted into buf. */
static void
job_encode(const char *id, const char *reply_to, const char *target, const char *graph,
           const char *schedule, bool check, uint64_t seed, const struct kiln_measure_opts *o,
           double run_timeout_s, double hopeless_s, const char **argv, size_t *argl,
           char (*buf)[64])
{
    const char *v[JF_COUNT];
    v[JF_V] = KILN_QUEUE_VERSION;
    v[JF_ID] = id;
    v[JF_REPLY_TO] = reply_to;
    v[JF_TARGET] = target;
    v[JF_GRAPH] = graph;
    v[JF_SCHEDULE] = schedule ? schedule : "";
    v[JF_CHECK] = check ? "1" : "0";
    snprintf(buf[0], 64, "%llu", (unsigned long long)seed);
    snprintf(buf[1], 64, "%u", o->repeat);
    snprintf(buf[2], 64, "%u", o->warmup);
    snprintf(buf[3], 64, "%.17g", o->min_repeat_ms);
    snprintf(buf[4], 64, "%d", o->flush_cache ? 1 : o->flush_weights ? 2 : 0);
    snprintf(buf[5], 64, "%d", o->threads);
    snprintf(buf[6], 64, "%.17g", o->build_timeout_s);
    snprintf(buf[7], 64, "%.17g", run_timeout_s);
    snprintf(buf[8], 64, "%.17g", o->ref_max_flops);
    snprintf(buf[9], 64, "%.17g", hopeless_s);
    v[JF_SEED] = buf[0];
    v[JF_REPEAT] = buf[1];
    v[JF_WARMUP] = buf[2];
    v[JF_MIN_REPEAT_MS] = buf[3];
    v[JF_FLUSH] = buf[4];
    v[JF_THREADS] = buf[5];
    v[JF_BUILD_TIMEOUT] = buf[6];
    v[JF_RUN_TIMEOUT] = buf[7];
    v[JF_REF_MAX_FLOPS] = buf[8];
    v[JF_HOPELESS] = buf[9];
    for (int k = 0; k < JF_COUNT; k++) {
        argv[2 * k] = job_field[k];
        argl[2 * k] = strlen(job_field[k]);
        argv[2 * k + 1] = v[k];
        argl[2 * k + 1] = strlen(v[k]);
    }
}
#endif

/* ---- replies ---- */

enum rf {
    RF_V,
    RF_ID,
    RF_WORKER,
    RF_ERROR,
    RF_TIME,
    RF_STDDEV,
    RF_NREPEAT,
    RF_TIMES,
    RF_BUILD,
    RF_RUN,
    RF_MAX_ERR,
    RF_MSG,
    RF_COUNT
};
static const char *const reply_field[RF_COUNT] = {
    "v",       "id",    "worker",  "error", "time_s",  "stddev_s",
    "nrepeat", "times", "build_s", "run_s", "max_err", "msg",
};
_Static_assert(RF_COUNT == KILN_QUEUE_REPLY_FIELDS, "reply fields");

void
kiln_queue_reply_encode(const struct kiln_queue_reply *rep, const char **names, const char **values,
                        char (*buf)[64], char *times, size_t *nf)
{
    const struct kiln_measure_result *r = &rep->r;
    for (int k = 0; k < RF_COUNT; k++)
        names[k] = reply_field[k];
    values[RF_V] = KILN_QUEUE_VERSION;
    values[RF_ID] = rep->id;
    values[RF_WORKER] = rep->worker;
    values[RF_ERROR] = rep->rejected                   ? "rejected"
                       : r->error < KILN_MEASURE_COUNT ? kiln_measure_error_name[r->error]
                                                       : "crash";
    snprintf(buf[0], 64, "%.17g", r->time_s);
    snprintf(buf[1], 64, "%.17g", r->stddev_s);
    snprintf(buf[2], 64, "%u", r->nrepeat);
    snprintf(buf[3], 64, "%.17g", r->build_s);
    snprintf(buf[4], 64, "%.17g", rep->run_s);
    snprintf(buf[5], 64, "%.17g", r->max_err);
    values[RF_TIME] = buf[0];
    values[RF_STDDEV] = buf[1];
    values[RF_NREPEAT] = buf[2];
    values[RF_BUILD] = buf[3];
    values[RF_RUN] = buf[4];
    values[RF_MAX_ERR] = buf[5];
    values[RF_MSG] = r->msg;
    /* the times: up to 16 numbers of %.9g, comma-separated */
    char  *t = times;
    size_t cap = KILN_QUEUE_TIMES_LEN, used = 0;
    t[0] = 0;
    uint32_t nt = r->nrepeat < 16 ? r->nrepeat : 16;
    for (uint32_t i = 0; i < nt && used + 20 < cap; i++)
        used += (size_t)snprintf(t + used, cap - used, "%s%.9g", i ? "," : "", r->times[i]);
    values[RF_TIMES] = t;
    *nf = RF_COUNT;
}

bool
kiln_queue_reply_decode(const char *const *f, const size_t *len, size_t nf,
                        struct kiln_queue_reply *rep, char *why, size_t whysize)
{
    const char *val[RF_COUNT] = {0};
    size_t      vl[RF_COUNT] = {0};
    memset(rep, 0, sizeof *rep);
    if (nf % 2)
        return whyf(why, whysize, "odd number of strings in the reply"), false;
    for (size_t i = 0; i < nf; i += 2) {
        int k = 0;
        while (k < RF_COUNT
               && !(len[i] == strlen(reply_field[k]) && !memcmp(f[i], reply_field[k], len[i])))
            k++;
        if (k == RF_COUNT)
            return whyf(why, whysize, "unknown reply field"), false;
        if (val[k])
            return whyf(why, whysize, "reply field '%s' given twice", reply_field[k]), false;
        val[k] = f[i + 1];
        vl[k] = len[i + 1];
    }
    for (int k = 0; k < RF_COUNT; k++)
        if (!val[k])
            return whyf(why, whysize, "reply field '%s' missing", reply_field[k]), false;
    char                        s[400];
    struct kiln_measure_result *r = &rep->r;
    if (!field_str(val[RF_V], vl[RF_V], s, sizeof s) || strcmp(s, KILN_QUEUE_VERSION))
        return whyf(why, whysize, "reply version is not " KILN_QUEUE_VERSION), false;
    if (!field_str(val[RF_ID], vl[RF_ID], rep->id, sizeof rep->id))
        return whyf(why, whysize, "reply field 'id' too long or has a NUL byte"), false;
    if (!field_str(val[RF_WORKER], vl[RF_WORKER], rep->worker, sizeof rep->worker))
        return whyf(why, whysize, "reply field 'worker' too long or has a NUL byte"), false;
    if (!field_str(val[RF_ERROR], vl[RF_ERROR], s, sizeof s))
        return whyf(why, whysize, "reply field 'error' is not an error name"), false;
    int e = 0;
    while (e < KILN_MEASURE_COUNT && strcmp(s, kiln_measure_error_name[e]))
        e++;
    if (e == KILN_MEASURE_COUNT && strcmp(s, "rejected"))
        return whyf(why, whysize, "reply field 'error' is not an error name"), false;
    rep->rejected = e == KILN_MEASURE_COUNT;
    r->error = rep->rejected ? KILN_MEASURE_CRASH : (uint8_t)e;
    if (memchr(val[RF_MSG], 0, vl[RF_MSG]))
        return whyf(why, whysize, "reply field 'msg' has a NUL byte"), false;
    snprintf(r->msg, sizeof r->msg, "%.*s", (int)(vl[RF_MSG] < 511 ? vl[RF_MSG] : 511),
             val[RF_MSG]);
    double d;
    bool   ok = !rep->rejected && r->error == KILN_MEASURE_OK;
    if (!field_num(val[RF_TIME], vl[RF_TIME], 0, 1e6, &r->time_s) || (ok != (r->time_s > 0)))
        return whyf(why, whysize, "reply field 'time_s' is not a time > 0 for ok, 0 otherwise"),
               false;
    if (!field_num(val[RF_STDDEV], vl[RF_STDDEV], 0, 1e6, &r->stddev_s))
        return whyf(why, whysize, "reply field 'stddev_s' is not a time"), false;
    if (!field_num(val[RF_NREPEAT], vl[RF_NREPEAT], 0, 1e9, &d) || d != floor(d) || (ok && d < 1))
        return whyf(why, whysize, "reply field 'nrepeat' is not a repeat count"), false;
    r->nrepeat = (uint32_t)d;
    if (!field_num(val[RF_BUILD], vl[RF_BUILD], 0, 1e6, &r->build_s)
        || !field_num(val[RF_RUN], vl[RF_RUN], 0, 1e6, &rep->run_s))
        return whyf(why, whysize, "reply field 'build_s' or 'run_s' is not a duration"), false;
    if (vl[RF_MAX_ERR] == 3 && !memcmp(val[RF_MAX_ERR], "inf", 3))
        r->max_err = INFINITY;
    else if (!field_num(val[RF_MAX_ERR], vl[RF_MAX_ERR], 0, HUGE_VAL, &r->max_err))
        return whyf(why, whysize, "reply field 'max_err' is not a non-negative number"), false;
    /* times: comma-separated, min(nrepeat, 16) of them */
    uint32_t    want = r->nrepeat < 16 ? r->nrepeat : 16, got = 0;
    const char *p = val[RF_TIMES], *end = p + vl[RF_TIMES];
    while (p < end) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        size_t      l = c ? (size_t)(c - p) : (size_t)(end - p);
        if (got >= 16 || !field_num(p, l, 0, 1e6, &r->times[got]))
            return whyf(why, whysize, "reply field 'times' is not a list of times"), false;
        got++;
        p += l + (c ? 1 : 0);
        if (c && p == end)
            return whyf(why, whysize, "reply field 'times' is not a list of times"), false;
    }
    if (ok && got != want)
        return whyf(why, whysize, "reply field 'times' has %u times, nrepeat says %u", got, want),
               false;
    return true;
}

#ifdef KILN_HAVE_HIREDIS

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the connection ---- */

struct kiln_redis {
    struct kiln_queue_url u;
    redisContext         *c;
};

struct kiln_redis *
kiln_redis_new(const struct kiln_queue_url *u)
{
    struct kiln_redis *r = calloc(1, sizeof *r);
    if (r)
        r->u = *u;
    return r;
}

static void
redis_drop(struct kiln_redis *r)
{
    if (r->c)
        redisFree(r->c);
    r->c = NULL;
}

void
kiln_redis_free(struct kiln_redis *r)
{
    if (!r)
        return;
    redis_drop(r);
    free(r);
}

void
kiln_redis_reply_free(void *reply)
{
    if (reply)
        freeReplyObject(reply);
}

bool
kiln_redis_connect(struct kiln_redis *r, char *why, size_t whysize)
{
    if (r->c)
        return true;
    struct timeval tv = {5, 0};
    r->c = redisConnectWithTimeout(r->u.host, r->u.port, tv);
    if (!r->c || r->c->err) {
        whyf(why, whysize, "cannot connect to Redis at %s:%d: %s", r->u.host, r->u.port,
             r->c ? r->c->errstr : "out of memory");
        redis_drop(r);
        return false;
    }
    struct timeval cmd_tv = {10, 0}; /* above every BLOCK this file asks for */
    redisSetTimeout(r->c, cmd_tv);
    redisEnableKeepAlive(r->c);
    if (r->u.pass[0]) {
        const char *argv[3] = {"AUTH", r->u.user, r->u.pass};
        int         argc = r->u.user[0] ? 3 : 2;
        if (!r->u.user[0])
            argv[1] = r->u.pass;
        redisReply *rep = redisCommandArgv(r->c, argc, argv, NULL);
        if (!rep || rep->type == REDIS_REPLY_ERROR) {
            whyf(why, whysize, "Redis at %s:%d refused the password: %s", r->u.host, r->u.port,
                 rep ? rep->str : r->c->errstr);
            if (rep)
                freeReplyObject(rep);
            redis_drop(r);
            return false;
        }
        freeReplyObject(rep);
    }
    return true;
}

void *
kiln_redis_cmd(struct kiln_redis *r, int argc, const char **argv, const size_t *len, char *why,
               size_t whysize)
{
    if (!kiln_redis_connect(r, why, whysize))
        return NULL;
    redisReply *rep = redisCommandArgv(r->c, argc, argv, len);
    if (!rep) {
        whyf(why, whysize, "lost the connection to Redis at %s:%d (%s)", r->u.host, r->u.port,
             r->c->errstr[0] ? r->c->errstr : "no reply");
        redis_drop(r);
    }
    return rep;
}

/* ---- the tuner's side ---- */

#define QUEUE_EID_LEN 48 /* a stream entry id, "1795761037602-0" */

struct kiln_queue_producer {
    kiln_ctx                *ctx;
    struct kiln_redis       *r;
    struct kiln_measure_opts o;
    const char              *graph, *target, *jobs_key;
    uint64_t                 seed, seq;
    char                     id[96]; /* producer id, prefix of job ids */
    char                     reply_to[256];
    char                     last[64]; /* last reply entry read */
    double                   timeout_s;
};

enum kiln_status
kiln_queue_producer_new(kiln_ctx *ctx, const struct kiln_graph *g, const char *target,
                        const struct kiln_measure_opts *o, uint64_t seed,
                        struct kiln_queue_producer **out)
{
    *out = NULL;
    struct kiln_queue_url u;
    KILN_TRY(kiln_queue_url_parse(ctx, o->queue, &u));
    if (!strncmp(target, "cuda", 4))
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "queue",
                         "measuring on workers (--queue) supports CPU targets only, not '%s'",
                         target);
    if (o->queue_timeout_s <= 0 || !isfinite(o->queue_timeout_s))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "queue", "the queue timeout must be positive");
    struct kiln_queue_producer *p = kiln_arena_alloc(ctx, sizeof *p);
    if (!p)
        return KILN_ERR_NOMEM;
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->o = *o;
    p->seed = seed;
    p->target = target;
    p->timeout_s = o->queue_timeout_s;
    KILN_TRY(kiln_graph_print(ctx, g, 0, &p->graph));
    p->jobs_key = o->queue_key
                      ? kiln_arena_strdup(ctx, o->queue_key)
                      : kiln_queue_jobs_key(ctx, u.name, target, kiln_queue_cpu_model(ctx));
    if (!p->jobs_key)
        return ctx->err.status;
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (!name_char(*c))
            *c = '_';
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(p->id, sizeof p->id, "%.40s-%ld-%llx", host, (long)getpid(),
             (unsigned long long)((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20)
                                  ^ (uint64_t)(uintptr_t)p));
    snprintf(p->reply_to, sizeof p->reply_to, "kiln:%s:replies:%s", u.name, p->id);
    snprintf(p->last, sizeof p->last, "0-0");
    p->r = kiln_redis_new(&u);
    if (!p->r)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "queue", "out of memory");
    *out = p;
    return KILN_OK;
}

void
kiln_queue_producer_free(struct kiln_queue_producer *p)
{
    if (!p)
        return;
    if (p->r && p->r->c) { /* the reply stream: replies still coming are for nobody */
        const char *argv[2] = {"DEL", p->reply_to};
        char        why[16];
        kiln_redis_reply_free(kiln_redis_cmd(p->r, 2, argv, NULL, why, sizeof why));
    }
    kiln_redis_free(p->r);
    p->r = NULL;
}

/* Waits until Redis answers (messages on stderr while it does not) or the deadline passes. */
static enum kiln_status
producer_connect(struct kiln_queue_producer *p, double deadline, const char *first_why)
{
    char   why[512];
    double delay = 0.5;
    snprintf(why, sizeof why, "%s", first_why ? first_why : "");
    for (;;) {
        if (!first_why && kiln_redis_connect(p->r, why, sizeof why))
            return KILN_OK;
        first_why = NULL;
        double left = deadline - now_s();
        if (p->o.queue_stop && *p->o.queue_stop)
            return KILN_FAIL(p->ctx, KILN_ERR_BACKEND, "queue",
                             "%s; stopped while waiting for Redis", why);
        if (left <= 0)
            return KILN_FAIL(p->ctx, KILN_ERR_BACKEND, "queue",
                             "%s; gave up after %g s without an answer (the queue timeout)", why,
                             p->timeout_s);
        fprintf(stderr, "kiln: %s; retrying for up to %.0f s more\n", why, left);
        struct timespec sl = {(time_t)delay, (long)((delay - floor(delay)) * 1e9)};
        nanosleep(&sl, NULL);
        delay = fmin(2 * delay, 5);
    }
}

/* XADDs the job of candidate i, its entry id into eid; false (why) when the connection
 * failed. */
static bool
send_job(struct kiln_queue_producer *p, const struct kiln_measure_input *in, uint64_t seq,
         double run_timeout_s, double hopeless_s, char *eid, char *why, size_t whysize,
         enum kiln_status *fatal)
{
    const char *argv[3 + 2 * JF_COUNT];
    size_t      argl[3 + 2 * JF_COUNT];
    char        buf[10][64], id[128];
    snprintf(id, sizeof id, "%s:%llu", p->id, (unsigned long long)seq);
    argv[0] = "XADD";
    argv[1] = p->jobs_key;
    argv[2] = "*";
    argl[0] = 4;
    argl[1] = strlen(p->jobs_key);
    argl[2] = 1;
    job_encode(id, p->reply_to, p->target, p->graph, in->schedule_json, in->check, p->seed, &p->o,
               run_timeout_s, hopeless_s, argv + 3, argl + 3, buf);
    redisReply *rep = kiln_redis_cmd(p->r, 3 + 2 * JF_COUNT, argv, argl, why, whysize);
    if (!rep)
        return false;
    if (rep->type == REDIS_REPLY_ERROR)
        *fatal = KILN_FAIL(p->ctx, KILN_ERR_BACKEND, "queue", "Redis refused a job (XADD %s): %s",
                           p->jobs_key, rep->str);
    else if (rep->type == REDIS_REPLY_STRING && rep->len < QUEUE_EID_LEN)
        memcpy(eid, rep->str, rep->len + 1);
    freeReplyObject(rep);
    return true;
}

/* After a failed batch: its unanswered jobs are taken off the stream (best effort), so no
 * worker measures them for nobody. */
static void
withdraw_jobs(struct kiln_queue_producer *p, const bool *done, char (*eid)[QUEUE_EID_LEN],
              uint32_t n)
{
    const char **argv = calloc(n + 2, sizeof *argv);
    char         why[512];
    int          argc = 2;
    if (!argv || !p->r)
        goto out;
    argv[0] = "XDEL";
    argv[1] = p->jobs_key;
    for (uint32_t i = 0; i < n; i++)
        if (!done[i] && eid[i][0])
            argv[argc++] = eid[i];
    if (argc > 2 && kiln_redis_connect(p->r, why, sizeof why))
        kiln_redis_reply_free(kiln_redis_cmd(p->r, argc, argv, NULL, why, sizeof why));
out:
    free(argv);
}

/* The field strings of an entry [id, [f, v, ...]]; false if it has not that shape. */
static bool
entry_fields(const redisReply *e, const char **id, const char **f, size_t *fl, size_t max,
             size_t *nf)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
        || e->element[0]->type != REDIS_REPLY_STRING)
        return false;
    *id = e->element[0]->str;
    const redisReply *fs = e->element[1];
    *nf = 0;
    if (fs->type == REDIS_REPLY_NIL)
        return true;
    if (fs->type != REDIS_REPLY_ARRAY || fs->elements > max)
        return false;
    for (size_t i = 0; i < fs->elements; i++) {
        if (fs->element[i]->type != REDIS_REPLY_STRING)
            return false;
        f[i] = fs->element[i]->str;
        fl[i] = fs->element[i]->len;
    }
    *nf = fs->elements;
    return true;
}

enum kiln_status
kiln_queue_measure(struct kiln_queue_producer *p, const struct kiln_measure_input *in, uint32_t n,
                   struct kiln_measure_result *results, double run_timeout_s, double hopeless_s)
{
    kiln_ctx *ctx = p->ctx;
    if (n == 0)
        return KILN_OK;
    bool *done = calloc(n, sizeof *done);
    char(*eid)[QUEUE_EID_LEN] = calloc(n, sizeof *eid);
    if (!done || !eid) {
        free(done);
        free(eid);
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "queue", "out of memory");
    }
    uint64_t         base = p->seq;
    uint32_t         left = n, dropped = 0;
    enum kiln_status st = KILN_OK;
    char             why[512];
    double           deadline = now_s() + p->timeout_s;
    bool             need_send = true;
    p->seq += n;
    for (uint32_t i = 0; i < n; i++) {
        memset(&results[i], 0, sizeof results[i]);
        if (in[i].so_path) { /* a test's planted object exists on this machine only */
            results[i].error = KILN_MEASURE_RUNTIME;
            snprintf(results[i].msg, sizeof results[i].msg,
                     "a planted shared object is not sent to workers");
            done[i] = true;
            left--;
        }
    }
    while (left > 0 && st == KILN_OK) {
        if (need_send) { /* the batch, or after a lost connection all still unanswered */
            bool sent = true;
            for (uint32_t i = 0; i < n && sent && st == KILN_OK; i++)
                if (!done[i])
                    sent = send_job(p, &in[i], base + i, run_timeout_s, hopeless_s, eid[i], why,
                                    sizeof why, &st);
            if (st != KILN_OK)
                break;
            if (!sent) {
                st = producer_connect(p, deadline, why);
                continue;
            }
            need_send = false;
        }
        const char *argv[] = {"XREAD", "COUNT",   "64",        "BLOCK",
                              "1000",  "STREAMS", p->reply_to, p->last};
        redisReply *rep = kiln_redis_cmd(p->r, 8, argv, NULL, why, sizeof why);
        if (!rep) {
            st = producer_connect(p, deadline, why);
            need_send = true;
            continue;
        }
        if (rep->type == REDIS_REPLY_ERROR) {
            st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "queue", "Redis refused XREAD on %s: %s",
                           p->reply_to, rep->str);
            freeReplyObject(rep);
            break;
        }
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1
            && rep->element[0]->type == REDIS_REPLY_ARRAY && rep->element[0]->elements == 2
            && rep->element[0]->element[1]->type == REDIS_REPLY_ARRAY) {
            const redisReply *es = rep->element[0]->element[1];
            for (size_t k = 0; k < es->elements && st == KILN_OK; k++) {
                const char             *rid, *f[2 * KILN_QUEUE_REPLY_FIELDS + 2];
                size_t                  fl[2 * KILN_QUEUE_REPLY_FIELDS + 2], nf;
                struct kiln_queue_reply r;
                if (!entry_fields(es->element[k], &rid, f, fl, 2 * KILN_QUEUE_REPLY_FIELDS + 2,
                                  &nf)) {
                    st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "queue",
                                   "malformed entry in the reply stream %s", p->reply_to);
                    break;
                }
                snprintf(p->last, sizeof p->last, "%s", rid);
                if (!kiln_queue_reply_decode(f, fl, nf, &r, why, sizeof why)) {
                    st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "queue", "malformed reply %s: %s", rid,
                                   why);
                    break;
                }
                /* ours: "<producer id>:<seq>" with seq in this batch and not answered yet */
                size_t   pl = strlen(p->id);
                uint64_t seq;
                if (strncmp(r.id, p->id, pl) || r.id[pl] != ':'
                    || !field_u64(r.id + pl + 1, strlen(r.id + pl + 1), &seq) || seq < base
                    || seq - base >= n || done[seq - base]) {
                    dropped++; /* an earlier batch's, or a second answer */
                    continue;
                }
                if (r.rejected) {
                    st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "queue",
                                   "worker %s rejected a job of this tuner: %s", r.worker, r.r.msg);
                    break;
                }
                r.r.msg[sizeof r.r.msg - 1] = 0;
                results[seq - base] = r.r;
                done[seq - base] = true;
                left--;
                deadline = now_s() + p->timeout_s;
            }
        }
        freeReplyObject(rep);
        if (st == KILN_OK && left > 0 && p->o.queue_stop && *p->o.queue_stop)
            st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "queue",
                           "stopped while waiting for workers; the %u unanswered jobs of this "
                           "batch are not recorded (its other results neither)",
                           left);
        if (st == KILN_OK && left > 0 && now_s() > deadline)
            st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "queue",
                           "no worker answered for %g s (%u of %u jobs of this batch unanswered); "
                           "is a `kiln worker` serving the stream '%s'?",
                           p->timeout_s, left, n, p->jobs_key);
    }
    (void)dropped;
    if (st != KILN_OK)
        withdraw_jobs(p, done, eid, n);
    free(done);
    free(eid);
    return st;
}

#else /* !KILN_HAVE_HIREDIS */

struct kiln_queue_producer {
    int unused;
};

struct kiln_redis *
kiln_redis_new(const struct kiln_queue_url *u)
{
    (void)u;
    return NULL;
}
void
kiln_redis_free(struct kiln_redis *r)
{
    (void)r;
}
bool
kiln_redis_connect(struct kiln_redis *r, char *why, size_t whysize)
{
    (void)r;
    whyf(why, whysize, "kiln was built without Redis support (libhiredis-dev)");
    return false;
}
void *
kiln_redis_cmd(struct kiln_redis *r, int argc, const char **argv, const size_t *len, char *why,
               size_t whysize)
{
    (void)argc, (void)argv, (void)len;
    kiln_redis_connect(r, why, whysize);
    return NULL;
}
void
kiln_redis_reply_free(void *reply)
{
    (void)reply;
}

enum kiln_status
kiln_queue_producer_new(kiln_ctx *ctx, const struct kiln_graph *g, const char *target,
                        const struct kiln_measure_opts *o, uint64_t seed,
                        struct kiln_queue_producer **out)
{
    (void)g, (void)target, (void)o, (void)seed;
    *out = NULL;
    return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "queue",
                     "--queue needs Redis support, and this kiln was built without it "
                     "(install libhiredis-dev and rebuild)");
}
void
kiln_queue_producer_free(struct kiln_queue_producer *p)
{
    (void)p;
}
enum kiln_status
kiln_queue_measure(struct kiln_queue_producer *p, const struct kiln_measure_input *in, uint32_t n,
                   struct kiln_measure_result *results, double run_timeout_s, double hopeless_s)
{
    (void)p, (void)in, (void)n, (void)results, (void)run_timeout_s, (void)hopeless_s;
    return KILN_ERR_UNSUPPORTED;
}

#endif
