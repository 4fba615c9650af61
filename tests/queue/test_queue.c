/* tests/queue/test_queue.c -- the messages of measurement on workers (tuner/queue.c), without
 * Redis: queue URLs (valid forms, every kind of error, the password never in a message), jobs
 * (the documented fields decoded, each field missing, repeated or out of range rejected, random
 * bytes never accepted out of range) and replies (encode then decode gives the result back;
 * every field garbled is rejected, naming it). The end-to-end test with redis-server is
 * tests/cli/redis_queue.sh. */
#include "../../tuner/queue.h"
#include "../harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void
test_url(void)
{
    kiln_ctx             *ctx = kiln_ctx_new(NULL);
    struct kiln_queue_url u;
    CHECK(kiln_queue_url_parse(ctx, "redis://127.0.0.1:6379/lab", &u) == KILN_OK);
    CHECK_EQ_STR("127.0.0.1", u.host);
    CHECK_EQ_INT(6379, u.port);
    CHECK_EQ_STR("lab", u.name);
    CHECK_EQ_STR("", u.pass);
    CHECK(kiln_queue_url_parse(ctx, "redis://:s3cr:et@tuner-1.lan:1/a.b-c_d", &u) == KILN_OK);
    CHECK_EQ_STR("s3cr:et", u.pass);
    CHECK_EQ_STR("", u.user);
    CHECK_EQ_STR("tuner-1.lan", u.host);
    CHECK_EQ_INT(1, u.port);
    CHECK(kiln_queue_url_parse(ctx, "redis://bob:pw@h:65535/n", &u) == KILN_OK);
    CHECK_EQ_STR("bob", u.user);
    CHECK_EQ_STR("pw", u.pass);
    CHECK_EQ_INT(65535, u.port);
    static const struct {
        const char      *url, *says;
        enum kiln_status st;
    } bad[] = {
        {"http://h:1/n", "redis://", KILN_ERR_INVALID},
        {"rediss://:secretpw@h:1/n", "TLS", KILN_ERR_UNSUPPORTED},
        {"redis://h/n", "HOST:PORT/NAME", KILN_ERR_INVALID},
        {"redis://h:1", "HOST:PORT/NAME", KILN_ERR_INVALID},
        {"redis://:1/n", "HOST:PORT/NAME", KILN_ERR_INVALID},
        {"redis://h:0/n", "port", KILN_ERR_INVALID},
        {"redis://h:65536/n", "port", KILN_ERR_INVALID},
        {"redis://h:99999999999999999999/n", "port", KILN_ERR_INVALID},
        {"redis://h:-1/n", "port", KILN_ERR_INVALID},
        {"redis://h:1x/n", "port", KILN_ERR_INVALID},
        {"redis://h:1/", "NAME", KILN_ERR_INVALID},
        {"redis://h:1/a/b", "NAME", KILN_ERR_INVALID},
        {"redis://h:1/a b", "NAME", KILN_ERR_INVALID},
        {"redis://h:1/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "NAME",
         KILN_ERR_INVALID},
        {"redis://secretpw@h:1/n", "PASSWORD", KILN_ERR_INVALID},
        {"redis://:@h:1/n", "password", KILN_ERR_INVALID},
        {"redis://:secretpw@h$x:1/n", "host", KILN_ERR_INVALID},
    };
    for (size_t i = 0; i < KILN_COUNTOF(bad); i++) {
        kiln_ctx_error_clear(ctx);
        enum kiln_status         st = kiln_queue_url_parse(ctx, bad[i].url, &u);
        const struct kiln_error *e = kiln_ctx_error(ctx);
        if (st != bad[i].st || !e || !strstr(e->msg, bad[i].says) || strstr(e->msg, "secretpw"))
            harness_fail(__FILE__, __LINE__, "%s: status %d, message '%s'", bad[i].url, st,
                         e ? e->msg : "(none)");
    }
    kiln_ctx_free(ctx);
}

/* ---- jobs ---- */

#define NJF 17
static const char *const jf_names[NJF] = {
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

struct fields {
    const char *f[2 * NJF + 4];
    size_t      len[2 * NJF + 4];
    size_t      n;
};

static void
job_valid(struct fields *fs, const char **vals)
{
    static const char *const dflt[NJF] = {
        "1",
        "tuner:7",
        "kiln:lab:replies:tuner",
        "llvm",
        "input a: f32[4]\ny = relu(a)\noutput y",
        "",
        "1",
        "18446744073709551615",
        "5",
        "2",
        "20",
        "2",
        "8",
        "30",
        "0.5",
        "1e8",
        "0.001",
    };
    fs->n = 0;
    for (int k = 0; k < NJF; k++) {
        const char *v = vals && vals[k] ? vals[k] : dflt[k];
        fs->f[fs->n] = jf_names[k];
        fs->len[fs->n++] = strlen(jf_names[k]);
        fs->f[fs->n] = v;
        fs->len[fs->n++] = strlen(v);
    }
}

static void
test_job_decode(void)
{
    struct fields         fs;
    struct kiln_queue_job j;
    char                  why[512];
    job_valid(&fs, NULL);
    CHECK(kiln_queue_job_decode(fs.f, fs.len, fs.n, "lab", &j, why, sizeof why));
    CHECK_EQ_STR("tuner:7", j.id);
    CHECK_EQ_STR("kiln:lab:replies:tuner", j.reply_to);
    CHECK_EQ_STR("llvm", j.target);
    CHECK(j.graph_len == strlen("input a: f32[4]\ny = relu(a)\noutput y"));
    CHECK(j.schedule == NULL);
    CHECK(j.check);
    CHECK(j.seed == UINT64_MAX);
    CHECK_EQ_INT(5, j.mo.repeat);
    CHECK_EQ_INT(2, j.mo.warmup);
    CHECK(j.mo.min_repeat_ms == 20);
    CHECK(j.mo.flush_weights && !j.mo.flush_cache);
    CHECK_EQ_INT(8, j.mo.threads);
    CHECK(j.mo.build_timeout_s == 30 && j.mo.run_timeout_s == 0.5);
    CHECK(j.mo.ref_max_flops == 1e8 && j.hopeless_s == 0.001);
    CHECK(j.mo.queue == NULL); /* a worker measures locally */
    /* the queue's name decides which reply streams are allowed */
    CHECK(!kiln_queue_job_decode(fs.f, fs.len, fs.n, "other", &j, why, sizeof why));
    CHECK(strstr(why, "reply_to") && !j.reply_to[0]);

    /* each field missing: rejected naming it; reply_to and id still known after the first two */
    for (int k = 0; k < NJF; k++) {
        struct fields m;
        job_valid(&fs, NULL);
        m.n = 0;
        for (size_t i = 0; i < fs.n; i += 2)
            if (i / 2 != (size_t)k) {
                m.f[m.n] = fs.f[i];
                m.len[m.n++] = fs.len[i];
                m.f[m.n] = fs.f[i + 1];
                m.len[m.n++] = fs.len[i + 1];
            }
        bool ok = kiln_queue_job_decode(m.f, m.len, m.n, "lab", &j, why, sizeof why);
        if (k == 5) { /* schedule may not be left out either */
            CHECK(!ok);
            continue;
        }
        if (ok || !strstr(why, jf_names[k]))
            harness_fail(__FILE__, __LINE__, "field %s left out: %s", jf_names[k],
                         ok ? "accepted" : why);
        if (k >= 3)
            CHECK(!strcmp(j.id, "tuner:7") && j.reply_to[0]);
    }
    /* bad values */
    static const struct {
        int         k;
        const char *v;
    } bad[] = {
        {0, "2"},
        {1, ""},
        {2, "kiln:lab:replies:"},
        {2, "kiln:lab:jobs:x"},
        {3, ""},
        {4, ""},
        {6, "2"},
        {6, "yes"},
        {7, "-1"},
        {7, "1.5"},
        {7, "18446744073709551616"},
        {7, " 1"},
        {8, "0"},
        {8, "1001"},
        {8, "99999999999999999999999"},
        {8, "2.5"},
        {9, "-1"},
        {10, "nan"},
        {10, "inf"},
        {10, "1e400"},
        {11, "3"},
        {12, "-4"},
        {12, "100000"},
        {13, "0"},
        {14, "0"},
        {14, "1e9"},
        {14, "0x10"},
        {15, "-1"},
        {16, "-0.5"},
        {16, "1,5"},
        {13, ""},
    };
    for (size_t i = 0; i < KILN_COUNTOF(bad); i++) {
        const char *vals[NJF] = {0};
        vals[bad[i].k] = bad[i].v;
        job_valid(&fs, vals);
        bool ok = kiln_queue_job_decode(fs.f, fs.len, fs.n, "lab", &j, why, sizeof why);
        if (ok || (bad[i].k != 0 && !strstr(why, jf_names[bad[i].k])))
            harness_fail(__FILE__, __LINE__, "%s = '%s': %s", jf_names[bad[i].k], bad[i].v,
                         ok ? "accepted" : why);
    }
    /* a NUL byte inside the graph, an unknown and a repeated field */
    job_valid(&fs, NULL);
    fs.len[9] = 8; /* "input a:" plus ... */
    fs.f[9] = "input\0a:";
    CHECK(!kiln_queue_job_decode(fs.f, fs.len, fs.n, "lab", &j, why, sizeof why));
    CHECK(strstr(why, "graph") && strstr(why, "NUL"));
    job_valid(&fs, NULL);
    fs.f[fs.n] = "bogus";
    fs.len[fs.n++] = 5;
    fs.f[fs.n] = "1";
    fs.len[fs.n++] = 1;
    CHECK(!kiln_queue_job_decode(fs.f, fs.len, fs.n, "lab", &j, why, sizeof why));
    CHECK(strstr(why, "unknown job field 'bogus'") && !strcmp(j.id, "tuner:7"));
    job_valid(&fs, NULL);
    fs.f[fs.n] = "seed";
    fs.len[fs.n++] = 4;
    fs.f[fs.n] = "1";
    fs.len[fs.n++] = 1;
    CHECK(!kiln_queue_job_decode(fs.f, fs.len, fs.n, "lab", &j, why, sizeof why));
    CHECK(strstr(why, "'seed' given twice"));
    job_valid(&fs, NULL);
    CHECK(!kiln_queue_job_decode(fs.f, fs.len, fs.n - 1, "lab", &j, why, sizeof why));
    CHECK(strstr(why, "odd number"));
}

/* Random values in random fields: never out of the documented ranges when accepted. */
static void
test_job_random(void)
{
    struct kiln_rng          rng = kiln_rng_new(opt_seed());
    static const char *const pool[] = {
        "0",
        "1",
        "2",
        "-1",
        "1e8",
        "1e400",
        "nan",
        "",
        "x",
        "0.5",
        "1000",
        "1001",
        "3600",
        "3601",
        "18446744073709551615",
        "kiln:lab:replies:z",
        "llvm",
        "7",
        "+1",
        " 2",
        "1e-4",
    };
    uint64_t iters = opt_iters_or(20000), accepted = 0;
    for (uint64_t it = 0; it < iters; it++) {
        const char *vals[NJF] = {0};
        uint32_t    nmut = 1 + (uint32_t)kiln_rng_below(&rng, 3);
        for (uint32_t m = 0; m < nmut; m++)
            vals[kiln_rng_below(&rng, NJF)] = pool[kiln_rng_below(&rng, KILN_COUNTOF(pool))];
        struct fields         fs;
        struct kiln_queue_job j;
        char                  why[512];
        job_valid(&fs, vals);
        if (!kiln_queue_job_decode(fs.f, fs.len, fs.n, "lab", &j, why, sizeof why)) {
            CHECK(why[0]);
            continue;
        }
        accepted++;
        CHECK(j.mo.repeat >= 1 && j.mo.repeat <= 1000 && j.mo.warmup <= 1000);
        CHECK(j.mo.min_repeat_ms >= 0 && j.mo.min_repeat_ms <= 60000);
        CHECK(j.mo.build_timeout_s > 0 && j.mo.build_timeout_s <= 3600);
        CHECK(j.mo.run_timeout_s > 0 && j.mo.run_timeout_s <= 3600);
        CHECK(j.hopeless_s >= 0 && j.hopeless_s <= 3600 && isfinite(j.mo.ref_max_flops));
        CHECK(j.mo.threads >= 0 && j.mo.threads <= 1024 && j.id[0] && j.target[0]);
        CHECK(!strncmp(j.reply_to, "kiln:lab:replies:", 17) && strlen(j.reply_to) > 17);
    }
    CHECK(accepted > 0 && accepted < iters);
}

/* ---- replies ---- */

static bool
decode_encoded(const struct kiln_queue_reply *in, struct kiln_queue_reply *out, int garble,
               const char *with, char *why, size_t whysize)
{
    const char *names[KILN_QUEUE_REPLY_FIELDS], *values[KILN_QUEUE_REPLY_FIELDS];
    char        buf[6][64], times[KILN_QUEUE_TIMES_LEN];
    size_t      nf;
    kiln_queue_reply_encode(in, names, values, buf, times, &nf);
    const char *f[2 * KILN_QUEUE_REPLY_FIELDS];
    size_t      len[2 * KILN_QUEUE_REPLY_FIELDS], n = 0;
    for (size_t i = 0; i < nf; i++) {
        if ((int)i == garble && !with)
            continue; /* left out */
        f[n] = names[i];
        len[n++] = strlen(names[i]);
        f[n] = (int)i == garble ? with : values[i];
        len[n] = strlen(f[n]);
        n++;
    }
    return kiln_queue_reply_decode(f, len, n, out, why, whysize);
}

static void
test_reply_roundtrip(void)
{
    struct kiln_rng rng = kiln_rng_new(opt_seed());
    uint64_t        iters = opt_iters_or(2000);
    for (uint64_t it = 0; it < iters; it++) {
        struct kiln_queue_reply a, b;
        memset(&a, 0, sizeof a);
        snprintf(a.id, sizeof a.id, "p-%llu:%llu", (unsigned long long)it,
                 (unsigned long long)kiln_rng_below(&rng, 1000));
        snprintf(a.worker, sizeof a.worker, "host-%u", (unsigned)kiln_rng_below(&rng, 99));
        a.rejected = kiln_rng_below(&rng, 8) == 0;
        a.r.error =
            a.rejected ? KILN_MEASURE_CRASH : (uint8_t)kiln_rng_below(&rng, KILN_MEASURE_COUNT);
        bool ok = !a.rejected && a.r.error == KILN_MEASURE_OK;
        a.r.nrepeat = ok ? 1 + (uint32_t)kiln_rng_below(&rng, 40) : 0;
        for (uint32_t i = 0; i < a.r.nrepeat && i < 16; i++)
            a.r.times[i] = 1e-6 + kiln_rng_uniform(&rng);
        a.r.time_s = ok ? a.r.times[0] : 0;
        a.r.stddev_s = ok ? kiln_rng_uniform(&rng) * 1e-3 : 0;
        a.r.build_s = kiln_rng_uniform(&rng) * 10;
        a.run_s = kiln_rng_uniform(&rng) * 10;
        a.r.max_err = kiln_rng_below(&rng, 4) == 0 ? INFINITY : kiln_rng_uniform(&rng);
        snprintf(a.r.msg, sizeof a.r.msg, "%s, message %llu", ok ? "" : "failed",
                 (unsigned long long)it);
        char why[512];
        if (!decode_encoded(&a, &b, -1, NULL, why, sizeof why)) {
            harness_fail(__FILE__, __LINE__, "round trip %llu: %s", (unsigned long long)it, why);
            continue;
        }
        CHECK_EQ_STR(a.id, b.id);
        CHECK_EQ_STR(a.worker, b.worker);
        CHECK_EQ_STR(a.r.msg, b.r.msg);
        CHECK(a.rejected == b.rejected && a.r.error == b.r.error && a.r.nrepeat == b.r.nrepeat);
        CHECK(a.r.time_s == b.r.time_s && a.r.stddev_s == b.r.stddev_s);
        CHECK(a.r.build_s == b.r.build_s && a.run_s == b.run_s && a.r.max_err == b.r.max_err);
        for (uint32_t i = 0; i < a.r.nrepeat && i < 16; i++)
            CHECK(fabs(a.r.times[i] - b.r.times[i]) <= 1e-8 * a.r.times[i]);
    }
}

static void
test_reply_malformed(void)
{
    struct kiln_queue_reply a, b;
    memset(&a, 0, sizeof a);
    snprintf(a.id, sizeof a.id, "p:1");
    snprintf(a.worker, sizeof a.worker, "w");
    a.r.error = KILN_MEASURE_OK;
    a.r.time_s = a.r.times[0] = a.r.times[1] = 2e-3;
    a.r.nrepeat = 2;
    char why[512];
    CHECK(decode_encoded(&a, &b, -1, NULL, why, sizeof why));
    static const char *const names[KILN_QUEUE_REPLY_FIELDS] = {
        "v",       "id",    "worker",  "error", "time_s",  "stddev_s",
        "nrepeat", "times", "build_s", "run_s", "max_err", "msg",
    };
    static const struct {
        int         k;
        const char *v; /* NULL: left out */
    } bad[] = {
        {0, "2"},    {3, "fine"}, {3, ""},   {4, "0"},     {4, "-1e-3"}, {4, "nan"}, {4, "inf"},
        {4, "1e7"},  {5, "-1"},   {5, "x"},  {6, "0"},     {6, "1.5"},   {6, "3"},   {7, "1"},
        {7, "1,x"},  {7, "1,"},   {7, ",1"}, {7, "1,2,3"}, {8, "-1"},    {9, "nan"}, {10, "-1"},
        {10, "nan"}, {0, NULL},   {1, NULL}, {2, NULL},    {3, NULL},    {4, NULL},  {5, NULL},
        {6, NULL},   {7, NULL},   {8, NULL}, {9, NULL},    {10, NULL},   {11, NULL},
    };
    for (size_t i = 0; i < KILN_COUNTOF(bad); i++) {
        bool ok = decode_encoded(&a, &b, bad[i].k, bad[i].v, why, sizeof why);
        if (ok || !strstr(why, bad[i].k == 0 && bad[i].v ? "version" : names[bad[i].k]))
            harness_fail(__FILE__, __LINE__, "%s = %s: %s", names[bad[i].k],
                         bad[i].v ? bad[i].v : "(left out)", ok ? "accepted" : why);
    }
    /* an error result with a time is not a measurement */
    a.r.error = KILN_MEASURE_WRONG;
    CHECK(!decode_encoded(&a, &b, -1, NULL, why, sizeof why));
    CHECK(strstr(why, "time_s"));
    a.r.time_s = 0;
    CHECK(decode_encoded(&a, &b, -1, NULL, why, sizeof why));
    CHECK(b.r.error == KILN_MEASURE_WRONG && b.r.time_s == 0);
    /* rejected replies */
    a.rejected = true;
    CHECK(decode_encoded(&a, &b, -1, NULL, why, sizeof why));
    CHECK(b.rejected);
}

static const struct test tests[] = {
    {"url", test_url},
    {"job_decode", test_job_decode},
    {"job_random", test_job_random},
    {"reply_roundtrip", test_reply_roundtrip},
    {"reply_malformed", test_reply_malformed},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
