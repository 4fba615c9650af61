/* tuner/db.c -- the tuning-records database: SQLite, one row per measured program.
 *
 * Crash safety: every kiln_db_add is its own transaction, committed before it returns, in WAL
 * journal mode with synchronous=NORMAL. A killed process (Ctrl-C, OOM killer, a timeout of the
 * caller) loses nothing committed: WAL commits are durable against process death at NORMAL;
 * only an operating-system crash or power loss can drop the last few commits, and never
 * corrupts the file. FULL would add an fsync per record for that case only.
 *
 * Identity: PRAGMA application_id is 0x6b696c6e ("kiln") and the table kiln_schema holds the
 * schema version, so a foreign SQLite file, a file that is not SQLite, and a newer schema are
 * told apart before anything is written. Schema and JSON-lines format: tuner/README.md. */
#include "tuner.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define KILN_DB_APP_ID 0x6b696c6e /* "kiln" */

struct kiln_db {
    kiln_ctx     *ctx;
    sqlite3      *db;
    sqlite3_stmt *insert, *exists;
    const char   *path;
    const char   *machine;
};

static const char schema_sql[] =
    "CREATE TABLE kiln_schema(version INTEGER NOT NULL);"
    "CREATE TABLE records("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " workload TEXT NOT NULL, target TEXT NOT NULL, schedule TEXT NOT NULL, prog TEXT,"
    " time_s REAL NOT NULL, stddev_s REAL NOT NULL, error INTEGER NOT NULL, error_msg TEXT,"
    " version TEXT NOT NULL, machine TEXT NOT NULL, timestamp INTEGER NOT NULL,"
    " flops REAL NOT NULL, strategy TEXT NOT NULL);"
    "CREATE INDEX records_task ON records(workload, target, error, time_s);";

#define RECORD_COLS                                                                            \
    "workload, target, schedule, prog, time_s, stddev_s, error, error_msg, version, machine, " \
    "timestamp, flops, strategy"

static enum kiln_status
sql_fail(struct kiln_db *d, const char *what)
{
    return KILN_FAIL(d->ctx, KILN_ERR_BACKEND, "db", "records database %s: %s: %s", d->path, what,
                     sqlite3_errmsg(d->db));
}

static enum kiln_status
exec(struct kiln_db *d, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(d->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        enum kiln_status st = KILN_FAIL(d->ctx, KILN_ERR_BACKEND, "db", "records database %s: %s",
                                        d->path, err ? err : sqlite3_errmsg(d->db));
        sqlite3_free(err);
        return st;
    }
    return KILN_OK;
}

/* One integer from a query; false (no error recorded) if it fails. */
static bool
query_int(struct kiln_db *d, const char *sql, int64_t *out, int *rc)
{
    sqlite3_stmt *s;
    *rc = sqlite3_prepare_v2(d->db, sql, -1, &s, NULL);
    if (*rc != SQLITE_OK)
        return false;
    *rc = sqlite3_step(s);
    bool ok = *rc == SQLITE_ROW;
    if (ok)
        *out = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return ok;
}

const char *
kiln_machine_desc(kiln_ctx *ctx)
{
    struct utsname u;
    char           model[256] = "unknown CPU";
    if (uname(&u) != 0)
        snprintf(u.machine, sizeof u.machine, "unknown");
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
            size_t n = strcspn(v, "\n");
            snprintf(model, sizeof model, "%.*s", (int)n, v);
            break;
        }
        fclose(f);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return kiln_arena_printf(ctx, "%s %s %ld cores", u.machine, model, cores > 0 ? cores : 1);
}

/* Checks the file's identity and creates the schema in a new one. */
static enum kiln_status
check_schema(struct kiln_db *d)
{
    int64_t app = 0, ntables = 0, version = 0;
    int     rc;
    if (!query_int(d, "PRAGMA application_id", &app, &rc)) {
        if (rc == SQLITE_NOTADB)
            return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                             "%s is not a kiln records database (not an SQLite file)", d->path);
        return sql_fail(d, "reading its header");
    }
    if (!query_int(d, "SELECT count(*) FROM sqlite_master", &ntables, &rc))
        return sql_fail(d, "reading its tables");
    if (app == 0 && ntables == 0) {
        KILN_TRY(exec(d, "PRAGMA journal_mode=WAL"));
        char sql[sizeof schema_sql + 128];
        snprintf(sql, sizeof sql, "BEGIN IMMEDIATE;%sINSERT INTO kiln_schema VALUES(%d);COMMIT;",
                 schema_sql, KILN_DB_SCHEMA_VERSION);
        enum kiln_status st = exec(d, sql);
        if (st != KILN_OK) {
            sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
            return st;
        }
        /* application_id last: a file with it set always has the whole schema */
        snprintf(sql, sizeof sql, "PRAGMA application_id=%d", KILN_DB_APP_ID);
        return exec(d, sql);
    }
    if (app != KILN_DB_APP_ID)
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                         "%s is an SQLite database but not a kiln records database", d->path);
    if (!query_int(d, "SELECT max(version) FROM kiln_schema", &version, &rc))
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                         "%s is a damaged kiln records database (no schema version)", d->path);
    if (version > KILN_DB_SCHEMA_VERSION)
        return KILN_FAIL(d->ctx, KILN_ERR_UNSUPPORTED, "db",
                         "%s has records schema version %lld; this kiln (%s) reads version %d: "
                         "use a newer kiln",
                         d->path, (long long)version, KILN_VERSION, KILN_DB_SCHEMA_VERSION);
    return exec(d, "PRAGMA journal_mode=WAL");
}

void
kiln_db_close(struct kiln_db *d)
{
    if (!d)
        return;
    sqlite3_finalize(d->insert);
    sqlite3_finalize(d->exists);
    sqlite3_close(d->db);
    kiln_mem_free(d->ctx, d, sizeof *d);
}

enum kiln_status
kiln_db_open(kiln_ctx *ctx, const char *path, struct kiln_db **out)
{
    *out = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (!path || !*path)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "db", "no records database path given");
    struct kiln_db *d = kiln_mem_realloc(ctx, NULL, 0, sizeof *d);
    if (!d)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "db", "out of memory");
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->path = kiln_arena_strdup(ctx, path);
    d->machine = kiln_machine_desc(ctx);
    if (!d->path || !d->machine) {
        kiln_db_close(d);
        return ctx->err.status;
    }
    int rc = sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    enum kiln_status st = KILN_OK;
    if (rc != SQLITE_OK)
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "db", "cannot open the records database %s: %s", path,
                       d->db ? sqlite3_errmsg(d->db) : sqlite3_errstr(rc));
    if (st == KILN_OK) {
        sqlite3_busy_timeout(d->db, 10000); /* tuners sharing a file wait for each other */
        st = check_schema(d);
    }
    if (st == KILN_OK)
        st = exec(d, "PRAGMA synchronous=NORMAL");
    if (st == KILN_OK
        && (sqlite3_prepare_v2(
                d->db, "INSERT INTO records(" RECORD_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)", -1,
                &d->insert, NULL)
                != SQLITE_OK
            || sqlite3_prepare_v2(d->db,
                                  "SELECT 1 FROM records WHERE workload=? AND target=? AND "
                                  "schedule=? AND time_s=? AND timestamp=? LIMIT 1",
                                  -1, &d->exists, NULL)
                   != SQLITE_OK))
        st = sql_fail(d, "preparing statements");
    if (st != KILN_OK) {
        kiln_db_close(d);
        return st;
    }
    *out = d;
    return KILN_OK;
}

static void
bind_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(s, i);
}

enum kiln_status
kiln_db_add(struct kiln_db *d, const struct kiln_record *r)
{
    if (!d || !r)
        return KILN_ERR_INVALID;
    if (!r->workload || !r->target || !r->schedule)
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                         "a record needs a workload, a target and a schedule");
    if (!isfinite(r->time_s) || !isfinite(r->stddev_s) || !isfinite(r->flops))
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db", "a record has a non-finite number");
    if (r->error >= KILN_MEASURE_COUNT)
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db", "a record has error code %u", r->error);
    sqlite3_stmt *s = d->insert;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    bind_text(s, 1, r->workload);
    bind_text(s, 2, r->target);
    bind_text(s, 3, r->schedule);
    bind_text(s, 4, r->prog);
    sqlite3_bind_double(s, 5, r->time_s);
    sqlite3_bind_double(s, 6, r->stddev_s);
    sqlite3_bind_int(s, 7, r->error);
    bind_text(s, 8, r->error_msg);
    bind_text(s, 9, r->version ? r->version : KILN_VERSION);
    bind_text(s, 10, r->machine ? r->machine : d->machine);
    sqlite3_bind_int64(s, 11, r->timestamp ? r->timestamp : (int64_t)time(NULL));
    sqlite3_bind_double(s, 12, r->flops);
    bind_text(s, 13, r->strategy ? r->strategy : "");
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE)
        return sql_fail(d, "adding a record");
    return KILN_OK;
}

static const char *
col_text(sqlite3_stmt *s, int i)
{
    return (const char *)sqlite3_column_text(s, i);
}

static void
read_row(sqlite3_stmt *s, struct kiln_record *r)
{
    r->workload = col_text(s, 0);
    r->target = col_text(s, 1);
    r->schedule = col_text(s, 2);
    r->prog = col_text(s, 3);
    r->time_s = sqlite3_column_double(s, 4);
    r->stddev_s = sqlite3_column_double(s, 5);
    int e = sqlite3_column_int(s, 6);
    r->error = (uint8_t)(e >= 0 && e < KILN_MEASURE_COUNT ? e : KILN_MEASURE_RUNTIME);
    r->error_msg = col_text(s, 7);
    r->version = col_text(s, 8);
    r->machine = col_text(s, 9);
    r->timestamp = sqlite3_column_int64(s, 10);
    r->flops = sqlite3_column_double(s, 11);
    r->strategy = col_text(s, 12);
}

static char *
dup_or_null(kiln_ctx *ctx, const char *s)
{
    return s ? kiln_arena_strdup(ctx, s) : NULL;
}

bool
kiln_db_best(struct kiln_db *d, const char *workload, const char *target, struct kiln_record *out)
{
    if (!d || !workload || !target || !out)
        return false;
    sqlite3_stmt *s;
    /* a schedule's time is the mean of its measurements, and one that ever failed is out; the
     * schedules a final selection re-measured rank before those it did not (one measured once
     * may be a lucky time the final rounds never tested) */
    if (sqlite3_prepare_v2(d->db,
                           "SELECT " RECORD_COLS ", mt FROM records JOIN (SELECT MIN(id) AS fid, "
                           "AVG(time_s) AS mt, MAX(strategy='final') AS fin FROM records "
                           "WHERE workload=?1 AND target=?2 GROUP BY schedule "
                           "HAVING MAX(error)=0 AND MIN(time_s)>0) ON id=fid "
                           "ORDER BY fin DESC, mt, fid LIMIT 1",
                           -1, &s, NULL)
        != SQLITE_OK) {
        sql_fail(d, "finding the best record");
        return false;
    }
    bind_text(s, 1, workload);
    bind_text(s, 2, target);
    bool found = sqlite3_step(s) == SQLITE_ROW;
    if (found) {
        struct kiln_record r;
        read_row(s, &r);
        r.time_s = sqlite3_column_double(s, 13);
        kiln_ctx *ctx = d->ctx;
        *out = r;
        out->workload = dup_or_null(ctx, r.workload);
        out->target = dup_or_null(ctx, r.target);
        out->schedule = dup_or_null(ctx, r.schedule);
        out->prog = dup_or_null(ctx, r.prog);
        out->error_msg = dup_or_null(ctx, r.error_msg);
        out->version = dup_or_null(ctx, r.version);
        out->machine = dup_or_null(ctx, r.machine);
        out->strategy = dup_or_null(ctx, r.strategy);
        found = kiln_ok(ctx);
    }
    sqlite3_finalize(s);
    return found;
}

enum kiln_status
kiln_db_each(struct kiln_db *d, const char *workload, const char *target,
             bool (*fn)(void *ud, const struct kiln_record *r), void *ud)
{
    if (!d || !fn)
        return KILN_ERR_INVALID;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT " RECORD_COLS " FROM records WHERE (?1 IS NULL OR workload=?1) "
                           "AND (?2 IS NULL OR target=?2) ORDER BY id",
                           -1, &s, NULL)
        != SQLITE_OK)
        return sql_fail(d, "reading records");
    bind_text(s, 1, workload);
    bind_text(s, 2, target);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct kiln_record r;
        read_row(s, &r);
        if (!fn(ud, &r)) {
            rc = SQLITE_DONE;
            break;
        }
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? KILN_OK : sql_fail(d, "reading records");
}

uint32_t
kiln_db_count(struct kiln_db *d, const char *workload, const char *target)
{
    if (!d)
        return 0;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT count(*) FROM records WHERE (?1 IS NULL OR workload=?1) AND "
                           "(?2 IS NULL OR target=?2)",
                           -1, &s, NULL)
        != SQLITE_OK)
        return 0;
    bind_text(s, 1, workload);
    bind_text(s, 2, target);
    uint32_t n = sqlite3_step(s) == SQLITE_ROW ? (uint32_t)sqlite3_column_int64(s, 0) : 0;
    sqlite3_finalize(s);
    return n;
}

/* ---- JSON lines ---- */

struct export_state {
    struct kiln_db  *d;
    FILE            *out;
    enum kiln_status st;
};

static cJSON *
str_or_null(const char *s)
{
    return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

/* cJSON prints doubles with 15 digits when they compare equal within an epsilon, which is not
 * exact: every double is written with 17 significant digits (round-trips through strtod). */
static bool
add_num(cJSON *o, const char *key, double v)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    return cJSON_AddRawToObject(o, key, buf) != NULL;
}

static bool
export_one(void *ud, const struct kiln_record *r)
{
    struct export_state *e = ud;
    cJSON               *o = cJSON_CreateObject();
    bool                 ok = o != NULL;
    ok = ok && cJSON_AddItemToObject(o, "workload", str_or_null(r->workload));
    ok = ok && cJSON_AddItemToObject(o, "target", str_or_null(r->target));
    ok = ok && cJSON_AddItemToObject(o, "schedule", str_or_null(r->schedule));
    ok = ok && cJSON_AddItemToObject(o, "prog", str_or_null(r->prog));
    ok = ok && add_num(o, "time_s", r->time_s);
    ok = ok && add_num(o, "stddev_s", r->stddev_s);
    ok = ok && cJSON_AddStringToObject(o, "error", kiln_measure_error_name[r->error]);
    ok = ok && cJSON_AddItemToObject(o, "error_msg", str_or_null(r->error_msg));
    ok = ok && cJSON_AddItemToObject(o, "version", str_or_null(r->version));
    ok = ok && cJSON_AddItemToObject(o, "machine", str_or_null(r->machine));
    ok = ok && add_num(o, "timestamp", (double)r->timestamp);
    ok = ok && add_num(o, "flops", r->flops);
    ok = ok && cJSON_AddItemToObject(o, "strategy", str_or_null(r->strategy));
    char *line = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!line) {
        e->st = KILN_FAIL(e->d->ctx, KILN_ERR_NOMEM, "db", "out of memory exporting records");
        return false;
    }
    if (fputs(line, e->out) == EOF || fputc('\n', e->out) == EOF) {
        e->st = KILN_FAIL(e->d->ctx, KILN_ERR_BACKEND, "db", "writing exported records: %s",
                          strerror(errno));
        free(line);
        return false;
    }
    free(line);
    return true;
}

enum kiln_status
kiln_db_export_jsonl(struct kiln_db *d, FILE *out)
{
    if (!d || !out)
        return KILN_ERR_INVALID;
    struct export_state e = {d, out, KILN_OK};
    KILN_TRY(kiln_db_each(d, NULL, NULL, export_one, &e));
    if (e.st == KILN_OK && fflush(out) != 0)
        return KILN_FAIL(d->ctx, KILN_ERR_BACKEND, "db", "writing exported records: %s",
                         strerror(errno));
    return e.st;
}

static enum kiln_status KILN_PRINTF(3, 4)
    line_fail(struct kiln_db *d, uint32_t line, const char *fmt, ...)
{
    char    what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    enum kiln_status st =
        KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db", "records line %u: %s", line, what);
    kiln_error_set_loc(d->ctx, NULL, line, 1);
    return st;
}

/* Field of a record line: a string (or null when nullable). */
static enum kiln_status
get_str(struct kiln_db *d, uint32_t line, const cJSON *o, const char *key, bool nullable,
        const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = NULL;
    if (v && cJSON_IsString(v)) {
        *out = v->valuestring;
        return KILN_OK;
    }
    if (nullable && (!v || cJSON_IsNull(v)))
        return KILN_OK;
    return line_fail(d, line, v ? "field \"%s\" is not a string" : "missing field \"%s\"", key);
}

static enum kiln_status
get_num(struct kiln_db *d, uint32_t line, const cJSON *o, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || !cJSON_IsNumber(v))
        return line_fail(d, line, v ? "field \"%s\" is not a number" : "missing field \"%s\"", key);
    *out = v->valuedouble;
    return KILN_OK;
}

static enum kiln_status
import_line(struct kiln_db *d, uint32_t line, const char *text, size_t len, uint32_t *added)
{
    cJSON *o = cJSON_ParseWithLength(text, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return line_fail(d, line, "%s", "not a JSON object");
    }
    struct kiln_record r = {0};
    double             ts = 0;
    const char        *err = NULL;
    enum kiln_status   st = KILN_OK;
    if (st == KILN_OK)
        st = get_str(d, line, o, "workload", false, &r.workload);
    if (st == KILN_OK)
        st = get_str(d, line, o, "target", false, &r.target);
    if (st == KILN_OK)
        st = get_str(d, line, o, "schedule", false, &r.schedule);
    if (st == KILN_OK)
        st = get_str(d, line, o, "prog", true, &r.prog);
    if (st == KILN_OK)
        st = get_num(d, line, o, "time_s", &r.time_s);
    if (st == KILN_OK)
        st = get_num(d, line, o, "stddev_s", &r.stddev_s);
    if (st == KILN_OK)
        st = get_str(d, line, o, "error", false, &err);
    if (st == KILN_OK)
        st = get_str(d, line, o, "error_msg", true, &r.error_msg);
    if (st == KILN_OK)
        st = get_str(d, line, o, "version", false, &r.version);
    if (st == KILN_OK)
        st = get_str(d, line, o, "machine", false, &r.machine);
    if (st == KILN_OK)
        st = get_num(d, line, o, "timestamp", &ts);
    if (st == KILN_OK)
        st = get_num(d, line, o, "flops", &r.flops);
    if (st == KILN_OK)
        st = get_str(d, line, o, "strategy", false, &r.strategy);
    if (st == KILN_OK) {
        r.error = KILN_MEASURE_COUNT;
        for (uint8_t e = 0; e < KILN_MEASURE_COUNT; e++)
            if (!strcmp(err, kiln_measure_error_name[e]))
                r.error = e;
        if (r.error == KILN_MEASURE_COUNT)
            st = line_fail(d, line, "unknown error kind \"%s\"", err);
    }
    if (st == KILN_OK && (ts < 1 || ts > 9e15 || ts != (double)(int64_t)ts))
        st = line_fail(d, line, "%s", "timestamp is not a positive integer");
    if (st == KILN_OK && (!(r.time_s >= 0) || !(r.stddev_s >= 0)))
        st = line_fail(d, line, "%s", "negative time");
    if (st == KILN_OK) {
        r.timestamp = (int64_t)ts;
        sqlite3_stmt *s = d->exists;
        sqlite3_reset(s);
        bind_text(s, 1, r.workload);
        bind_text(s, 2, r.target);
        bind_text(s, 3, r.schedule);
        sqlite3_bind_double(s, 4, r.time_s);
        sqlite3_bind_int64(s, 5, r.timestamp);
        int rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc == SQLITE_DONE) {
            st = kiln_db_add(d, &r);
            *added += st == KILN_OK;
        } else if (rc != SQLITE_ROW) {
            st = sql_fail(d, "looking for duplicates");
        }
    }
    cJSON_Delete(o);
    return st;
}

enum kiln_status
kiln_db_import_jsonl(struct kiln_db *d, const char *text, size_t len, uint32_t *added)
{
    uint32_t n = 0;
    if (added)
        *added = 0;
    if (!d || (!text && len))
        return KILN_ERR_INVALID;
    KILN_TRY(exec(d, "BEGIN IMMEDIATE"));
    enum kiln_status st = KILN_OK;
    uint32_t         line = 0;
    for (size_t i = 0; i < len && st == KILN_OK;) {
        size_t end = i;
        while (end < len && text[end] != '\n')
            end++;
        line++;
        size_t e = end;
        while (e > i && (text[e - 1] == '\r' || text[e - 1] == ' ' || text[e - 1] == '\t'))
            e--;
        size_t b = i;
        while (b < e && (text[b] == ' ' || text[b] == '\t'))
            b++;
        if (b < e)
            st = import_line(d, line, text + b, e - b, &n);
        i = end + 1;
    }
    if (st == KILN_OK)
        st = exec(d, "COMMIT");
    if (st != KILN_OK) {
        sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
        n = 0;
    }
    if (added)
        *added = n;
    return st;
}
