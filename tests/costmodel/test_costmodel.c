/* tests/costmodel/test_costmodel.c -- workload graphs in the records database (tuner/db.c,
 * schema 2), the shape-free task kind (tuner/task.c), training and evaluating cost models on
 * records (tuner/costmodel.c), and the machine's figures the features read (tuner/features.c).
 *
 * Graphs: tasks of graphs of random shapes are stored, read back and re-parsed (their task key
 * and kind must come out of the text again), exported and imported; a version 1 file made here
 * with SQLite's own API (the oracle for the old schema) reads without graphs read-only and gains
 * the table read-write. Training: two tiny workloads are tuned for real (a few trials each), a
 * model is trained, saved, loaded and evaluated; the counts are checked against SQL queries on
 * the file, the metrics against their definitions' bounds. Bad input (a missing file, a file
 * without graphs, damaged or foreign model files) fails with the file named. */
#include "../../tuner/tuner.h"
#include "../harness.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static bool
tmp_init(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-test-costmodel-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        harness_fail(__FILE__, __LINE__, "mkdtemp failed");
        return false;
    }
    return true;
}

static void
tmp_fini(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove %s\n", tmpdir);
}

static const char *
tmp_file(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

static const char *
err_msg(kiln_ctx *ctx, char *buf, size_t size)
{
    kiln_error_format(kiln_ctx_error(ctx), buf, size);
    return buf;
}

static int64_t
sql_int(const char *path, const char *sql)
{
    sqlite3      *db;
    sqlite3_stmt *s;
    int64_t       v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            v = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
    return v;
}

static int64_t
rnd(struct kiln_rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(kiln_rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* a convolution + bias + relu of random channels and size (stride and padding fixed: they shape
 * the body), channels-last */
static char *
conv_kg(struct kiln_rng *r, int64_t *c_out, int64_t *hw_out)
{
    int64_t c = rnd(r, 2, 9), k = rnd(r, 2, 9), hw = rnd(r, 5, 12);
    char   *s = malloc(1024);
    snprintf(s, 1024,
             "input x: f32[1, %lld, %lld, %lld]\n"
             "weight w: f32[%lld, %lld, 3, 3]\n"
             "weight b: f32[%lld]\n"
             "y = conv2d(x, w, b, stride=2, padding=1, layout=\"nhwc\")\n"
             "z = relu(y)\n"
             "output z\n",
             (long long)hw, (long long)hw, (long long)c, (long long)k, (long long)c, (long long)k);
    if (c_out)
        *c_out = c;
    if (hw_out)
        *hw_out = hw;
    return s;
}

static char *
matmul_kg(struct kiln_rng *r)
{
    int64_t m = rnd(r, 3, 20), k = rnd(r, 3, 20), n = rnd(r, 3, 20);
    char   *s = malloc(256);
    snprintf(s, 256,
             "input a: f32[%lld, %lld]\nweight b: f32[%lld, %lld]\nc = matmul(a, b)\n"
             "output c\n",
             (long long)m, (long long)k, (long long)k, (long long)n);
    return s;
}

/* ---- the kind: shape-free ---- */

static uint64_t
first_task(kiln_ctx *ctx, const char *src, uint64_t *kind)
{
    struct kiln_graph *g = PARSE(ctx, src);
    struct kiln_tasks  t;
    if (!g || kiln_tasks_extract(ctx, g, &t) != KILN_OK || !t.n) {
        harness_fail(__FILE__, __LINE__, "no task in:\n%s", src);
        return 0;
    }
    *kind = t.task[0].kind;
    CHECK(t.task[0].kind == kiln_task_kind(t.task[0].g));
    CHECK(t.task[0].hash == kiln_task_hash(t.task[0].g));
    return t.task[0].hash;
}

static void
test_kind_shape_free(void)
{
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    for (int it = 0; it < 20; it++) {
        int64_t  c1, c2, h1, h2;
        char    *a = conv_kg(&r, &c1, &h1), *b = conv_kg(&r, &c2, &h2);
        char    *m1 = matmul_kg(&r), *m2 = matmul_kg(&r);
        uint64_t ka, kb, km1, km2;
        uint64_t ha = first_task(ctx, a, &ka), hb = first_task(ctx, b, &kb);
        uint64_t hm1 = first_task(ctx, m1, &km1), hm2 = first_task(ctx, m2, &km2);
        CHECK(ka == kb); /* same operator at other shapes */
        CHECK(km1 == km2);
        CHECK(ka != km1); /* another operator */
        if (strcmp(a, b))
            CHECK(ha != hb); /* the workload key does see the shapes */
        if (strcmp(m1, m2))
            CHECK(hm1 != hm2);
        free(a);
        free(b);
        free(m1);
        free(m2);
    }
    /* the same convolution without its relu, or with padding 0 (no bounds checks), is another
     * kind */
    uint64_t k0, k1, k2;
    first_task(ctx,
               "input x: f32[1, 8, 8, 4]\nweight w: f32[6, 4, 3, 3]\nweight b: f32[6]\n"
               "y = conv2d(x, w, b, stride=2, padding=1, layout=\"nhwc\")\nz = relu(y)\n"
               "output z\n",
               &k0);
    first_task(ctx,
               "input x: f32[1, 8, 8, 4]\nweight w: f32[6, 4, 3, 3]\nweight b: f32[6]\n"
               "y = conv2d(x, w, b, stride=2, padding=0, layout=\"nhwc\")\nz = relu(y)\n"
               "output z\n",
               &k1);
    first_task(ctx,
               "input x: f32[1, 8, 8, 4]\nweight w: f32[6, 4, 3, 3]\n"
               "y = conv2d(x, w, stride=2, padding=1, layout=\"nhwc\")\noutput y\n",
               &k2);
    CHECK(k0 != k1);
    CHECK(k0 != k2);
    kiln_ctx_free(ctx);
}

/* ---- graphs in the database ---- */

struct graphs {
    uint32_t n;
    char     key[8][17], kind[8][17], target[8][64];
    char    *text[8];
};

static bool
collect_graph(void *ud, const struct kiln_db_graph *g)
{
    struct graphs *G = ud;
    if (G->n == 8)
        return false;
    snprintf(G->key[G->n], 17, "%s", g->workload);
    snprintf(G->kind[G->n], 17, "%s", g->kind);
    snprintf(G->target[G->n], 64, "%s", g->target);
    G->text[G->n++] = strdup(g->graph);
    return true;
}

static void
graphs_free(struct graphs *G)
{
    for (uint32_t i = 0; i < G->n; i++)
        free(G->text[i]);
    G->n = 0;
}

/* the task of the text: re-extracted, its key and kind printed as stored */
static void
check_text(kiln_ctx *ctx, const char *text, const char *key, const char *kind)
{
    struct kiln_graph *g = PARSE(ctx, text);
    if (!g)
        return;
    char k[17], d[17];
    snprintf(k, sizeof k, "%016llx", (unsigned long long)kiln_task_hash(g));
    snprintf(d, sizeof d, "%016llx", (unsigned long long)kiln_task_kind(g));
    CHECK_EQ_STR(key, k);
    CHECK_EQ_STR(kind, d);
}

struct bad {
    uint32_t n;
    char     why[8][256];
};

static void
bad_line(void *ud, uint32_t line, const char *why)
{
    struct bad *B = ud;
    (void)line;
    if (B->n < 8)
        snprintf(B->why[B->n], 256, "%s", why);
    B->n++;
}

static void
test_db_graphs_roundtrip(void)
{
    if (!tmp_init())
        return;
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    char            path[128], path2[128], jl[128], msg[1024];
    tmp_file(path, sizeof path, "a.db");
    tmp_file(path2, sizeof path2, "b.db");
    tmp_file(jl, sizeof jl, "a.jsonl");
    char              *src = conv_kg(&r, NULL, NULL);
    struct kiln_graph *g = PARSE(ctx, src);
    struct kiln_tasks  t = {0};
    struct kiln_db    *db = NULL;
    if (!g || kiln_tasks_extract(ctx, g, &t) != KILN_OK || kiln_db_open(ctx, path, &db) != KILN_OK)
        harness_fail(__FILE__, __LINE__, "setup: %s", err_msg(ctx, msg, sizeof msg));
    const char *tg = "llvm -mcpu=x86-64-v3";
    for (int twice = 0; db && twice < 2; twice++)
        for (uint32_t i = 0; i < t.n; i++)
            CHECK_EQ_INT(KILN_OK, kiln_db_add_task_graph(db, &t.task[i], tg));
    struct graphs G = {0};
    if (db) {
        CHECK(kiln_db_has_graphs(db));
        CHECK_EQ_INT(KILN_OK, kiln_db_each_graph(db, NULL, collect_graph, &G));
        CHECK_EQ_INT(t.n, G.n); /* stored once each */
        for (uint32_t i = 0; i < G.n && i < t.n; i++) {
            CHECK_EQ_STR(t.task[i].key, G.key[i]);
            CHECK_EQ_STR(tg, G.target[i]);
            check_text(ctx, G.text[i], G.key[i], G.kind[i]);
        }
        struct graphs none = {0};
        CHECK_EQ_INT(KILN_OK, kiln_db_each_graph(db, "llvm -mcpu=other", collect_graph, &none));
        CHECK_EQ_INT(0, none.n);
        /* a record too, so the export has both kinds of line */
        struct kiln_record rec = {.workload = t.task[0].key,
                                  .target = tg,
                                  .schedule = "{\"steps\": []}",
                                  .time_s = 1e-3,
                                  .flops = 1};
        CHECK_EQ_INT(KILN_OK, kiln_db_add(db, &rec));
        FILE *f = fopen(jl, "w");
        CHECK(f && kiln_db_export_jsonl(db, f) == KILN_OK);
        if (f)
            fclose(f);
        kiln_db_close(db);
    }
    /* import into a new file: the same graphs */
    size_t          len = 0;
    char           *text = read_file(jl, &len);
    struct kiln_db *b = NULL;
    uint32_t        added = 0;
    CHECK(text != NULL);
    if (text && kiln_db_open(ctx, path2, &b) == KILN_OK) {
        CHECK_EQ_INT(KILN_OK, kiln_db_import_jsonl(b, jl, text, len, NULL, NULL, &added));
        CHECK_EQ_INT(1, added);
        struct graphs H = {0};
        CHECK_EQ_INT(KILN_OK, kiln_db_each_graph(b, NULL, collect_graph, &H));
        CHECK_EQ_INT(G.n, H.n);
        for (uint32_t i = 0; i < G.n && i < H.n; i++) {
            CHECK_EQ_STR(G.key[i], H.key[i]);
            CHECK_EQ_STR(G.kind[i], H.kind[i]);
            CHECK_EQ_STR(G.text[i], H.text[i]);
        }
        graphs_free(&H);
        /* bad graph lines: each refused with its reason, the good line imported */
        char key[17];
        snprintf(key, sizeof key, "%s", G.n ? G.key[0] : "0000000000000000");
        const char *wrong[][2] = {
            {"{\"graph\": \"input a: f32[4]\\nb[i] = a[i] * 2.0\\noutput b\\n\", \"workload\": "
             "\"0123456789abcdef\", \"target\": \"t\", \"kind\": \"0123456789abcdef\"}",
             "workload key is"},
            {"{\"graph\": \"input a: f32[4]\\nb[i] = \\n\", \"workload\": \"0123456789abcdef\", "
             "\"target\": \"t\", \"kind\": \"0123456789abcdef\"}",
             "does not parse"},
            {"{\"graph\": \"x\", \"workload\": \"0123456789abcdef\", \"target\": \"t\", \"kind\": "
             "\"0123456789abcdef\", \"extra\": 1}",
             "unknown field \"extra\""},
            {"{\"graph\": \"x\", \"workload\": \"0123456789abcdef\", \"target\": \"t\", \"kind\": "
             "\"zz\"}",
             "kind \"zz\""},
            {"{\"graph\": \"x\", \"workload\": \"0123456789abcdef\", \"kind\": "
             "\"0123456789abcdef\"}",
             "missing field \"target\""},
        };
        for (size_t k = 0; k < KILN_COUNTOF(wrong); k++) {
            struct bad B = {0};
            CHECK_EQ_INT(KILN_ERR_INVALID,
                         kiln_db_import_jsonl(b, "bad.jsonl", wrong[k][0], strlen(wrong[k][0]),
                                              bad_line, &B, &added));
            kiln_ctx_error_clear(ctx);
            CHECK_EQ_INT(1, B.n);
            if (!strstr(B.why[0], wrong[k][1]))
                harness_fail(__FILE__, __LINE__, "bad graph line %zu: '%s'", k, B.why[0]);
        }
        CHECK_EQ_INT(G.n, sql_int(path2, "SELECT count(*) FROM graphs"));
        kiln_db_close(b);
    }
    free(text);
    graphs_free(&G);
    free(src);
    kiln_ctx_free(ctx);
    tmp_fini();
}

/* the version 1 schema, as kiln wrote it before graphs */
static const char v1_sql[] =
    "CREATE TABLE kiln_schema(version INTEGER NOT NULL);"
    "CREATE TABLE records(id INTEGER PRIMARY KEY AUTOINCREMENT, workload TEXT NOT NULL, target "
    "TEXT NOT NULL, schedule TEXT NOT NULL, prog TEXT, time_s REAL NOT NULL, stddev_s REAL NOT "
    "NULL, error INTEGER NOT NULL, error_msg TEXT, version TEXT NOT NULL, machine TEXT NOT NULL, "
    "timestamp INTEGER NOT NULL, flops REAL NOT NULL, strategy TEXT NOT NULL);"
    "CREATE INDEX records_task ON records(workload, target, error, time_s);"
    "INSERT INTO kiln_schema VALUES(1); PRAGMA application_id=1802071150;"
    "INSERT INTO records(workload, target, schedule, time_s, stddev_s, error, version, machine, "
    "timestamp, flops, strategy) VALUES('00000000000000aa', 't', '{\"steps\": []}', 0.5, 0, 0, "
    "'0.1', 'm', 1700000000, 1, 'ansor');";

static bool
make_v1(const char *path)
{
    sqlite3 *s;
    bool     ok = sqlite3_open(path, &s) == SQLITE_OK
              && sqlite3_exec(s, v1_sql, NULL, NULL, NULL) == SQLITE_OK;
    sqlite3_close(s);
    return ok;
}

static void
test_db_v1_migration(void)
{
    if (!tmp_init())
        return;
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    char            path[128], msg[1024];
    tmp_file(path, sizeof path, "v1.db");
    CHECK(make_v1(path));
    /* read-only: records, no graphs, nothing written */
    struct kiln_db *db = NULL;
    CHECK_EQ_INT(KILN_OK, kiln_db_open_readonly(ctx, path, &db));
    if (db) {
        CHECK(!kiln_db_has_graphs(db));
        CHECK_EQ_INT(1, kiln_db_count(db, NULL, NULL));
        struct graphs G = {0};
        CHECK_EQ_INT(KILN_OK, kiln_db_each_graph(db, NULL, collect_graph, &G));
        CHECK_EQ_INT(0, G.n);
        kiln_db_close(db);
    }
    CHECK_EQ_INT(1, sql_int(path, "SELECT max(version) FROM kiln_schema"));
    CHECK_EQ_INT(0, sql_int(path, "SELECT count(*) FROM sqlite_master WHERE name='graphs'"));
    /* read-write: the table is added, the records stay */
    char              *src = matmul_kg(&r);
    struct kiln_graph *g = PARSE(ctx, src);
    struct kiln_tasks  t = {0};
    CHECK(g && kiln_tasks_extract(ctx, g, &t) == KILN_OK && t.n == 1);
    db = NULL;
    if (kiln_db_open(ctx, path, &db) != KILN_OK)
        harness_fail(__FILE__, __LINE__, "open: %s", err_msg(ctx, msg, sizeof msg));
    if (db) {
        CHECK(kiln_db_has_graphs(db));
        if (t.n)
            CHECK_EQ_INT(KILN_OK, kiln_db_add_task_graph(db, &t.task[0], "t"));
        CHECK_EQ_INT(1, kiln_db_count(db, NULL, NULL));
        kiln_db_close(db);
    }
    CHECK_EQ_INT(2, sql_int(path, "SELECT max(version) FROM kiln_schema"));
    CHECK_EQ_INT(1, sql_int(path, "SELECT count(*) FROM graphs"));
    /* opened again, both ways */
    for (int ro = 0; ro < 2; ro++) {
        db = NULL;
        CHECK_EQ_INT(KILN_OK,
                     ro ? kiln_db_open_readonly(ctx, path, &db) : kiln_db_open(ctx, path, &db));
        struct graphs G = {0};
        CHECK(db && kiln_db_has_graphs(db));
        CHECK_EQ_INT(KILN_OK, db ? kiln_db_each_graph(db, NULL, collect_graph, &G) : KILN_OK);
        CHECK_EQ_INT(1, G.n);
        if (G.n && t.n) {
            CHECK_EQ_STR(t.task[0].key, G.key[0]);
            check_text(ctx, G.text[0], G.key[0], G.kind[0]);
        }
        graphs_free(&G);
        kiln_db_close(db);
    }
    CHECK_EQ_INT(1, sql_int(path, "SELECT count(*) FROM kiln_schema WHERE version=2"));
    free(src);
    kiln_ctx_free(ctx);
    tmp_fini();
}

/* ---- training and evaluation on measured records ---- */

static void
quick_opts(struct kiln_tune_opts *o, const char *db, uint32_t trials)
{
    kiln_tune_opts_default(o);
    o->db_path = db;
    o->trials = trials;
    o->batch = 8;
    o->population = 64;
    o->generations = 2;
    o->seed = opt_seed();
    o->measure.repeat = 2;
    o->measure.min_repeat_ms = 1;
    o->measure.run_timeout_s = 5;
    o->measure.threads = 1;
}

/* distinct valid schedules per workload, the most of any workload, and the workloads with at
 * least two: what eval must see (computed with SQL, not by the code under test) */
static const char distinct_sql[] =
    "SELECT count(*) FROM (SELECT workload FROM (SELECT workload, schedule FROM records GROUP BY "
    "workload, schedule HAVING max(error)=0 AND min(time_s)>0) GROUP BY workload HAVING "
    "count(*)>=2)";

static void
test_train_eval(void)
{
    if (!tmp_init())
        return;
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    char            db[128], model[128], msg[1024];
    tmp_file(db, sizeof db, "m.db");
    tmp_file(model, sizeof model, "m.kcm");
    char *src[2] = {matmul_kg(&r), conv_kg(&r, NULL, NULL)};
    for (int i = 0; i < 2; i++) {
        struct kiln_graph    *g = PARSE(ctx, src[i]);
        struct kiln_tune_opts o;
        quick_opts(&o, db, 16);
        if (g && kiln_tune(ctx, g, &o) != KILN_OK)
            harness_fail(__FILE__, __LINE__, "tune: %s", err_msg(ctx, msg, sizeof msg));
    }
    int64_t ngraphs = sql_int(db, "SELECT count(*) FROM graphs");
    int64_t nrec = sql_int(db, "SELECT count(*) FROM records WHERE workload IN (SELECT workload "
                               "FROM graphs)");
    int64_t nok = sql_int(db, "SELECT count(*) FROM records WHERE error<>0 AND workload IN "
                              "(SELECT workload FROM graphs)");
    int64_t neval = sql_int(db, distinct_sql);
    printf("  %lld graphs, %lld records (%lld failed), %lld workloads to rank\n",
           (long long)ngraphs, (long long)nrec, (long long)nok, (long long)neval);
    CHECK(ngraphs >= 2); /* every task's graph stored by the tuner */
    const char                        *dbs[1] = {db};
    struct kiln_costmodel_opts         co;
    struct kiln_costmodel_train_report tr;
    struct kiln_cost_model            *m = NULL, *loaded = NULL;
    kiln_costmodel_opts_default(&co);
    co.seed = opt_seed();
    if (kiln_costmodel_train(ctx, dbs, 1, &co, &m, &tr) != KILN_OK)
        harness_fail(__FILE__, __LINE__, "train: %s", err_msg(ctx, msg, sizeof msg));
    if (m) {
        printf("  trained on %u programs of %u workloads: loss %.4f, %u rounds\n", tr.programs,
               tr.workloads, tr.loss, tr.rounds);
        CHECK_EQ_INT(nrec, tr.programs + tr.skipped); /* every record, featurised or skipped */
        CHECK(tr.errors <= nok); /* failed records that lowered are labelled 0 */
        CHECK(tr.loss >= 0 && isfinite(tr.loss));
        CHECK(tr.rounds >= 1);
        CHECK_EQ_INT(KILN_OK, kiln_costmodel_save_file(ctx, m, model));
        CHECK_EQ_INT(KILN_OK, kiln_costmodel_load_file(ctx, model, &loaded));
    }
    if (m && loaded) {
        struct kiln_costmodel_eval_report a, b;
        CHECK_EQ_INT(KILN_OK, kiln_costmodel_eval(ctx, m, dbs, 1, &co, &a));
        CHECK_EQ_INT(KILN_OK, kiln_costmodel_eval(ctx, loaded, dbs, 1, &co, &b));
        CHECK_EQ_INT(neval, a.workloads);
        printf("  eval: %u workloads, pairs %.3f, top-1 %.2fx, top-5 %.2fx, random %.2fx\n",
               a.workloads, a.pair_acc, a.regret, a.regret5, a.random_regret);
        /* the loaded model ranks exactly as the trained one */
        CHECK(a.workloads == b.workloads && a.pair_acc == b.pair_acc && a.regret == b.regret);
        for (uint32_t i = 0; i < a.workloads; i++) {
            const struct kiln_costmodel_eval_one *e = &a.w[i];
            CHECK(e->pair_acc >= 0 && e->pair_acc <= 1);
            CHECK(e->regret >= 1 && e->regret5 >= 1 && e->regret5 <= e->regret);
            CHECK(e->random_regret >= 1);
            char q[256];
            snprintf(q, sizeof q,
                     "SELECT count(*) FROM (SELECT schedule FROM records WHERE workload='%s' "
                     "GROUP BY schedule HAVING max(error)=0 AND min(time_s)>0)",
                     e->workload);
            CHECK_EQ_INT(sql_int(db, q), e->programs);
        }
        /* a holdout splits the workloads: train leaves out exactly what eval takes */
        struct kiln_costmodel_opts h = co;
        h.holdout = 50;
        h.held_out = true;
        uint32_t held = 0;
        for (uint32_t i = 0; i < a.workloads; i++)
            held += kiln_costmodel_held_out(a.w[i].workload, 50);
        struct kiln_costmodel_eval_report c;
        enum kiln_status                  st = kiln_costmodel_eval(ctx, m, dbs, 1, &h, &c);
        CHECK_EQ_INT(held ? KILN_OK : KILN_ERR_INVALID, st);
        kiln_ctx_error_clear(ctx);
        if (st == KILN_OK)
            CHECK_EQ_INT(held, c.workloads);
    }
    kiln_cm_free(m);
    kiln_cm_free(loaded);
    free(src[0]);
    free(src[1]);
    kiln_ctx_free(ctx);
    tmp_fini();
}

/* ---- bad input: errors name the file ---- */

static void
expect_fail(kiln_ctx *ctx, enum kiln_status st, const char *name, const char *what)
{
    char msg[1024];
    if (st == KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s: succeeded", what);
        return;
    }
    err_msg(ctx, msg, sizeof msg);
    printf("  %s: %s\n", what, msg);
    if (!strstr(msg, name))
        harness_fail(__FILE__, __LINE__, "%s: the message does not name %s: %s", what, name, msg);
    kiln_ctx_error_clear(ctx);
}

static void
write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    if (f)
        fclose(f);
}

static void
test_bad_inputs(void)
{
    if (!tmp_init())
        return;
    kiln_ctx                  *ctx = kiln_ctx_new(NULL);
    struct kiln_rng            r = kiln_rng_new(opt_seed());
    char                       v1[128], none[128], empty[128], junk[128], cut[128], foreign[128];
    struct kiln_cost_model    *m = NULL;
    struct kiln_costmodel_opts o;
    struct kiln_costmodel_train_report tr;
    kiln_costmodel_opts_default(&o);
    tmp_file(v1, sizeof v1, "v1.db");
    tmp_file(none, sizeof none, "missing.db");
    tmp_file(empty, sizeof empty, "empty.db");
    CHECK(make_v1(v1));
    const char *d1[1] = {v1}, *d2[1] = {none}, *d3[1] = {empty};
    expect_fail(ctx, kiln_costmodel_train(ctx, d1, 1, &o, &m, &tr), v1, "a v1 database");
    expect_fail(ctx, kiln_costmodel_train(ctx, d2, 1, &o, &m, &tr), none, "a missing database");
    /* a v2 database with graphs but no successful record */
    struct kiln_db    *db = NULL;
    char              *src = matmul_kg(&r);
    struct kiln_graph *g = PARSE(ctx, src);
    struct kiln_tasks  t = {0};
    if (g && kiln_tasks_extract(ctx, g, &t) == KILN_OK
        && kiln_db_open(ctx, empty, &db) == KILN_OK) {
        CHECK_EQ_INT(KILN_OK, kiln_db_add_task_graph(db, &t.task[0], "llvm"));
        kiln_db_close(db);
    }
    expect_fail(ctx, kiln_costmodel_train(ctx, d3, 1, &o, &m, &tr), empty, "no measured program");
    CHECK(m == NULL);
    /* model files: junk, a cut model, another feature count, a directory, a missing file */
    tmp_file(junk, sizeof junk, "junk.kcm");
    tmp_file(cut, sizeof cut, "cut.kcm");
    tmp_file(foreign, sizeof foreign, "foreign.kcm");
    unsigned char bytes[512];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (unsigned char)kiln_rng_next(&r);
    write_bytes(junk, bytes, sizeof bytes);
    expect_fail(ctx, kiln_costmodel_load_file(ctx, junk, &m), junk, "a junk model");
    /* a real model (trained here on made-up labels), then cut short */
    struct kiln_cost_model *real = kiln_cm_new(ctx, 1);
    struct kiln_feat        f[8];
    double                  y[8];
    for (int i = 0; i < 8; i++) {
        f[i].nrow = 2;
        f[i].row = calloc(2 * KILN_FEAT_DIM, sizeof(float));
        for (int k = 0; k < 2 * KILN_FEAT_DIM; k++)
            f[i].row[k] = (float)(kiln_rng_next(&r) % 100);
        y[i] = (double)(kiln_rng_next(&r) % 100) / 100.0;
    }
    struct kiln_buf buf = {0};
    if (real && kiln_cm_train(real, f, y, 8) == KILN_OK && kiln_cm_save(real, &buf) == KILN_OK) {
        write_bytes(cut, buf.data, buf.len / 2);
        expect_fail(ctx, kiln_costmodel_load_file(ctx, cut, &m), cut, "a cut model");
        /* the header says another feature count */
        const char *nl = memchr(buf.data, '\n', buf.len);
        char        head[128];
        int         n = snprintf(head, sizeof head,
                                 "kiln-cost-model 1 feat_dim=%d objective=0 "
                                         "rounds=%u\n",
                                 KILN_FEAT_DIM - 1, kiln_cm_rounds(real));
        FILE       *ff = fopen(foreign, "wb");
        CHECK(ff && nl && fwrite(head, 1, (size_t)n, ff) == (size_t)n);
        if (ff && nl)
            CHECK(fwrite(nl + 1, 1, buf.len - (size_t)(nl + 1 - buf.data), ff) > 0);
        if (ff)
            fclose(ff);
        expect_fail(ctx, kiln_costmodel_load_file(ctx, foreign, &m), foreign,
                    "another feature count");
    } else {
        harness_fail(__FILE__, __LINE__, "training the made-up model failed");
    }
    expect_fail(ctx, kiln_costmodel_load_file(ctx, tmpdir, &m), tmpdir, "a directory");
    expect_fail(ctx, kiln_costmodel_load_file(ctx, none, &m), none, "a missing model");
    CHECK(m == NULL);
    for (int i = 0; i < 8; i++)
        free(f[i].row);
    kiln_cm_free(real);
    free(src);
    kiln_ctx_free(ctx);
    tmp_fini();
}

/* ---- the machine's figures come from the target ---- */

static void
test_features_from_target(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_rng    r = kiln_rng_new(opt_seed());
    struct kiln_target t;
    CHECK_EQ_INT(KILN_OK, kiln_cg_target_parse(ctx, "llvm -mcpu=skylake-avx512", &t));
    struct kiln_hw hw;
    int64_t        l1 = rnd(&r, 8, 128) << 10, l2 = rnd(&r, 256, 4096) << 10;
    t.l1_bytes = l1;
    t.l2_bytes = l2;
    t.num_cores = (int)rnd(&r, 1, 64);
    kiln_hw_from_target(&t, &hw);
    CHECK_EQ_INT(l1, hw.l1_bytes);
    CHECK_EQ_INT(l2, hw.l2_bytes);
    CHECK_EQ_INT(t.num_cores, hw.num_cores);
    CHECK_EQ_INT(16, hw.vector_lanes); /* 512-bit registers */
    CHECK_EQ_INT(32, hw.vector_regs);
    CHECK_EQ_INT(KILN_OK, kiln_cg_target_parse(ctx, "llvm -mcpu=haswell", &t));
    kiln_hw_from_target(&t, &hw);
    CHECK_EQ_INT(8, hw.vector_lanes);
    CHECK_EQ_INT(16, hw.vector_regs);
    /* the same program's rows under two machines: the cache columns follow hw, nothing else */
    char              *src = matmul_kg(&r);
    struct kiln_graph *g = PARSE(ctx, src);
    struct kiln_hw     small = hw, big = hw;
    small.l1_bytes = 64;
    small.l2_bytes = 128;
    big.l1_bytes = 1 << 30;
    big.l2_bytes = 1 << 30;
    struct kiln_sketch *sk = NULL;
    uint32_t            nsk = 0;
    uint32_t            differ = 0, tried = 0;
    if (g && kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) == KILN_OK && nsk)
        for (int it = 0; it < 10; it++) {
            struct kiln_prog     p;
            struct kiln_schedule s = {0};
            kiln_prog_sample(&sk[it % nsk], &r, &p);
            struct kiln_feat a = {0}, b = {0}, c = {0};
            if (kiln_prog_schedule(ctx, g, &sk[it % nsk], &p, &s) != KILN_OK
                || kiln_features_lower(ctx, g, &s, &small, &a) != KILN_OK
                || kiln_features_lower(ctx, g, &s, &big, &b) != KILN_OK
                || kiln_features_lower(ctx, g, &s, &small, &c) != KILN_OK) {
                harness_fail(__FILE__, __LINE__, "featurising a sampled program failed");
                break;
            }
            tried++;
            CHECK(a.nrow == b.nrow && a.nrow == c.nrow);
            if (a.nrow == c.nrow)
                CHECK(!memcmp(a.row, c.row, sizeof(float) * a.nrow * KILN_FEAT_DIM));
            if (a.nrow == b.nrow && memcmp(a.row, b.row, sizeof(float) * a.nrow * KILN_FEAT_DIM))
                differ++;
            kiln_feat_free(&a);
            kiln_feat_free(&b);
            kiln_feat_free(&c);
        }
    printf("  %u of %u programs' rows differ between a tiny and a huge cache\n", differ, tried);
    CHECK(tried > 0 && differ == tried); /* every matrix fits 1 GiB and none fits 64 bytes */
    free(src);
    kiln_ctx_free(ctx);
}

static const struct test tests[] = {
    {"kind_shape_free", test_kind_shape_free}, {"db_graphs_roundtrip", test_db_graphs_roundtrip},
    {"db_v1_migration", test_db_v1_migration}, {"train_eval", test_train_eval},
    {"bad_inputs", test_bad_inputs},           {"features_from_target", test_features_from_target},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
