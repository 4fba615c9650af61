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
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define KILN_DB_APP_ID 0x6b696c6e /* "kiln" */

struct kiln_db {
    kiln_ctx     *ctx;
    sqlite3      *db;
    sqlite3_stmt *insert;
    const char   *path;
    const char   *machine;
    bool          readonly;
    bool          empty;  /* read-only open of an SQLite file without tables: no records */
    bool          graphs; /* the graphs table exists (schema 2; a version 1 file read-only: no) */
};

/* schema version 2: each workload's task graph, so records can be featurised again later */
#define GRAPHS_SQL                                                                            \
    "CREATE TABLE IF NOT EXISTS graphs("                                                      \
    " workload TEXT NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL, graph TEXT NOT NULL," \
    " PRIMARY KEY(workload, target));"

static const char schema_sql[] =
    "CREATE TABLE kiln_schema(version INTEGER NOT NULL);"
    "CREATE TABLE records("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " workload TEXT NOT NULL, target TEXT NOT NULL, schedule TEXT NOT NULL, prog TEXT,"
    " time_s REAL NOT NULL, stddev_s REAL NOT NULL, error INTEGER NOT NULL, error_msg TEXT,"
    " version TEXT NOT NULL, machine TEXT NOT NULL, timestamp INTEGER NOT NULL,"
    " flops REAL NOT NULL, strategy TEXT NOT NULL);"
    "CREATE INDEX records_task ON records(workload, target, error, time_s);" GRAPHS_SQL;

#define RECORD_COLS                                                                            \
    "workload, target, schedule, prog, time_s, stddev_s, error, error_msg, version, machine, " \
    "timestamp, flops, strategy"
/* what read_row reads: the row id, then RECORD_COLS */
#define SELECT_COLS "id, " RECORD_COLS

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

/* Reads the identity: *app the application id, *ntables the number of schema objects. */
static enum kiln_status
read_identity(struct kiln_db *d, int64_t *app, int64_t *ntables)
{
    int rc;
    if (!query_int(d, "PRAGMA application_id", app, &rc)) {
        if (rc == SQLITE_NOTADB)
            return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                             "%s is not a kiln records database (not an SQLite file)", d->path);
        return sql_fail(d, "reading its header");
    }
    if (!query_int(d, "SELECT count(*) FROM sqlite_master", ntables, &rc))
        return sql_fail(d, "reading its tables");
    return KILN_OK;
}

/* Creates the schema in a new file. Several processes may open the same new file at once: the
 * check and the creation are one IMMEDIATE transaction (the busy timeout makes the others wait
 * for it), and whoever comes second finds the schema there. application_id is written in the
 * same transaction, so a file with it set always has the whole schema. */
static enum kiln_status
create_schema(struct kiln_db *d)
{
    KILN_TRY(exec(d, "BEGIN IMMEDIATE"));
    int64_t          app = 0, ntables = 0;
    enum kiln_status st = read_identity(d, &app, &ntables);
    if (st == KILN_OK && app == 0 && ntables == 0) {
        char sql[sizeof schema_sql + 128];
        snprintf(sql, sizeof sql, "%sINSERT INTO kiln_schema VALUES(%d);PRAGMA application_id=%d;",
                 schema_sql, KILN_DB_SCHEMA_VERSION, KILN_DB_APP_ID);
        st = exec(d, sql);
    }
    if (st == KILN_OK)
        st = exec(d, "COMMIT");
    if (st != KILN_OK)
        sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

/* Version 1 -> 2: adds the graphs table. One IMMEDIATE transaction, so of several processes
 * opening the same old file one migrates and the others find it done. */
static enum kiln_status
migrate_v1(struct kiln_db *d)
{
    KILN_TRY(exec(d, "BEGIN IMMEDIATE"));
    enum kiln_status st = exec(d, GRAPHS_SQL "INSERT INTO kiln_schema SELECT 2 WHERE "
                                             "(SELECT max(version) FROM kiln_schema) < 2;");
    if (st == KILN_OK)
        st = exec(d, "COMMIT");
    if (st != KILN_OK) {
        sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
        return st;
    }
    d->graphs = true;
    return KILN_OK;
}

/* Checks the file's identity, creating the schema in a new one (unless read-only). */
static enum kiln_status
check_schema(struct kiln_db *d)
{
    int64_t app = 0, ntables = 0, version = 0;
    int     rc;
    /* one snapshot: between two reads outside a transaction, another process may create the
     * schema, and the file would seem to have tables but no kiln identity */
    KILN_TRY(exec(d, "BEGIN"));
    enum kiln_status st = read_identity(d, &app, &ntables);
    sqlite3_exec(d->db, "COMMIT", NULL, NULL, NULL);
    KILN_TRY(st);
    if (app == 0 && ntables == 0) {
        if (d->readonly) {
            d->empty = true;
            return KILN_OK;
        }
        KILN_TRY(create_schema(d));
        KILN_TRY(read_identity(d, &app, &ntables));
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
    d->graphs = version >= 2;
    if (d->readonly)
        return KILN_OK;
    if (!d->graphs)
        KILN_TRY(migrate_v1(d));
    /* WAL cannot be entered inside a transaction, and a file already in WAL mode stays there.
     * The switch takes an exclusive lock from the shared one it reads with; when another
     * connection holds the write lock (creating the schema), SQLite refuses at once without
     * the busy handler (waiting could deadlock), so this waits in steps, as long as the busy
     * timeout would (6 processes creating one file failed 4 rounds in 10 under load) */
    for (int tries = 0; tries < 200; tries++) {
        int wal = sqlite3_exec(d->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
        if (wal == SQLITE_OK)
            return KILN_OK;
        if ((wal & 0xff) != SQLITE_BUSY && (wal & 0xff) != SQLITE_LOCKED)
            break;
        sqlite3_sleep(50);
    }
    return exec(d, "PRAGMA journal_mode=WAL");
}

void
kiln_db_close(struct kiln_db *d)
{
    if (!d)
        return;
    sqlite3_finalize(d->insert);
    sqlite3_close(d->db);
    kiln_mem_free(d->ctx, d, sizeof *d);
}

static bool
file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Opens path for reading. Where the file can be written it is opened read-write (without
 * creating it; nothing is written but the WAL checkpoint SQLite makes when the last connection
 * closes, which removes the -wal and -shm files), else read-only. A WAL database in a directory the
 * caller cannot write, whose -shm file is missing, cannot be opened by SQLite's normal route (it
 * needs to create that file); without a -wal file there is nothing uncommitted to read, and nobody
 * can be writing (a writer would need the -wal file too), so the file is then opened as immutable.
 */
static int
open_readonly(struct kiln_db *d, const char *path)
{
    int rc = sqlite3_open_v2(
        path, &d->db, access(path, W_OK) == 0 ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK) {
        int64_t app;
        if (query_int(d, "PRAGMA application_id", &app, &rc)
            || ((rc & 0xff) != SQLITE_CANTOPEN && (rc & 0xff) != SQLITE_READONLY))
            return SQLITE_OK;
    }
    char wal[4096];
    snprintf(wal, sizeof wal, "%s-wal", path);
    if (strlen(path) + 5 > sizeof wal || file_exists(wal))
        return rc;
    /* a URI: file:PATH?immutable=1, with the characters URIs reserve escaped */
    struct kiln_buf uri = {0};
    bool            ok = kiln_buf_puts(d->ctx, &uri, "file:");
    for (const char *c = path; ok && *c; c++)
        ok = strchr("%?#", *c) ? kiln_buf_printf(d->ctx, &uri, "%%%02X", (unsigned char)*c)
                               : kiln_buf_printf(d->ctx, &uri, "%c", *c);
    ok = ok && kiln_buf_puts(d->ctx, &uri, "?immutable=1");
    if (!ok)
        return SQLITE_NOMEM;
    sqlite3_close(d->db);
    d->db = NULL;
    return sqlite3_open_v2(uri.data, &d->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
}

static enum kiln_status
db_open(kiln_ctx *ctx, const char *path, bool readonly, struct kiln_db **out)
{
    *out = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (!path || !*path)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "db", "no records database path given");
    if (readonly && !file_exists(path))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "db", "cannot open the records database %s: %s",
                         path, strerror(errno));
    struct kiln_db *d = kiln_mem_realloc(ctx, NULL, 0, sizeof *d);
    if (!d)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "db", "out of memory");
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->readonly = readonly;
    d->path = kiln_arena_strdup(ctx, path);
    d->machine = kiln_machine_desc(ctx);
    if (!d->path || !d->machine) {
        kiln_db_close(d);
        return ctx->err.status;
    }
    int              rc = readonly
                              ? open_readonly(d, path)
                              : sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    enum kiln_status st = KILN_OK;
    if (rc != SQLITE_OK)
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "db", "cannot open the records database %s: %s", path,
                       d->db ? sqlite3_errmsg(d->db) : sqlite3_errstr(rc));
    if (st == KILN_OK) {
        sqlite3_busy_timeout(d->db, 10000); /* tuners sharing a file wait for each other */
        st = check_schema(d);
    }
    if (st == KILN_OK && !readonly)
        st = exec(d, "PRAGMA synchronous=NORMAL");
    if (st == KILN_OK && !readonly
        && sqlite3_prepare_v2(
               d->db, "INSERT INTO records(" RECORD_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)", -1,
               &d->insert, NULL)
               != SQLITE_OK)
        st = sql_fail(d, "preparing statements");
    if (st != KILN_OK) {
        kiln_db_close(d);
        return st;
    }
    *out = d;
    return KILN_OK;
}

enum kiln_status
kiln_db_open(kiln_ctx *ctx, const char *path, struct kiln_db **out)
{
    return db_open(ctx, path, false, out);
}

enum kiln_status
kiln_db_open_readonly(kiln_ctx *ctx, const char *path, struct kiln_db **out)
{
    return db_open(ctx, path, true, out);
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
    if (d->readonly)
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db", "records database %s: opened read-only",
                         d->path);
    if (!r->workload || !r->target || !r->schedule)
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                         "records database %s: a record needs a workload, a target and a schedule",
                         d->path);
    if (!isfinite(r->time_s) || !isfinite(r->stddev_s) || !isfinite(r->flops))
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                         "records database %s: a record has a non-finite number", d->path);
    if (r->error >= KILN_MEASURE_COUNT)
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                         "records database %s: a record has error code %u", d->path, r->error);
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

/* ---- reading rows: every column is checked, since the file may be damaged or hand-made ---- */

/* A text column: NULL is allowed only when nullable; a blob or a number is not text, and a
 * text with a NUL byte inside would be read cut short. */
static bool
col_text(sqlite3_stmt *s, int i, bool nullable, const char **out)
{
    int type = sqlite3_column_type(s, i);
    *out = NULL;
    if (type == SQLITE_NULL)
        return nullable;
    if (type != SQLITE_TEXT)
        return false;
    const char *t = (const char *)sqlite3_column_text(s, i);
    if (!t || strlen(t) != (size_t)sqlite3_column_bytes(s, i))
        return false;
    *out = t;
    return true;
}

static bool
col_num(sqlite3_stmt *s, int i, double *out)
{
    int type = sqlite3_column_type(s, i);
    *out = sqlite3_column_double(s, i);
    return (type == SQLITE_FLOAT || type == SQLITE_INTEGER) && isfinite(*out) && *out >= 0;
}

static const char *const col_name[] = {"id",      "workload",  "target", "schedule",  "prog",
                                       "time_s",  "stddev_s",  "error",  "error_msg", "version",
                                       "machine", "timestamp", "flops",  "strategy"};

/* Reads a row of SELECT_COLS (from column base on) into r; on a malformed column returns false
 * with *bad naming it (a static string). Strings are valid until the statement steps. */
static bool
read_row(sqlite3_stmt *s, struct kiln_record *r, const char **bad)
{
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(s, 0);
    int k = -1;
    if (sqlite3_column_type(s, 0) != SQLITE_INTEGER)
        k = 0;
    else if (!col_text(s, 1, false, &r->workload))
        k = 1;
    else if (!col_text(s, 2, false, &r->target))
        k = 2;
    else if (!col_text(s, 3, false, &r->schedule))
        k = 3;
    else if (!col_text(s, 4, true, &r->prog))
        k = 4;
    else if (!col_num(s, 5, &r->time_s))
        k = 5;
    else if (!col_num(s, 6, &r->stddev_s))
        k = 6;
    else if (sqlite3_column_type(s, 7) != SQLITE_INTEGER)
        k = 7;
    else if (!col_text(s, 8, true, &r->error_msg))
        k = 8;
    else if (!col_text(s, 9, false, &r->version))
        k = 9;
    else if (!col_text(s, 10, false, &r->machine))
        k = 10;
    else if (sqlite3_column_type(s, 11) != SQLITE_INTEGER)
        k = 11;
    else if (!col_num(s, 12, &r->flops))
        k = 12;
    else if (!col_text(s, 13, false, &r->strategy))
        k = 13;
    if (k >= 0) {
        *bad = col_name[k];
        return false;
    }
    /* an error kind this version does not know (a newer kiln's) reads as a runtime error */
    int64_t e = sqlite3_column_int64(s, 7);
    r->error = (uint8_t)(e >= 0 && e < KILN_MEASURE_COUNT ? e : KILN_MEASURE_RUNTIME);
    r->timestamp = sqlite3_column_int64(s, 11);
    return true;
}

static enum kiln_status
bad_row(struct kiln_db *d, int64_t id, const char *col)
{
    return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                     "records database %s: row %lld is damaged: column %s is missing or of the "
                     "wrong type",
                     d->path, (long long)id, col);
}

static char *
dup_or_null(kiln_ctx *ctx, const char *s)
{
    return s ? kiln_arena_strdup(ctx, s) : NULL;
}

/* a schedule's time is the mean of its measurements, and one that ever failed is out; the
 * schedule of the newest final selection's verdict (strategy 'final-pick': the pick, with its
 * robust time, which is not a measurement) ranks first with that time, then those of older
 * verdicts; then the schedules a final selection re-measured rank before those it did not (one
 * measured once may be a lucky time the final rounds never tested), in a database the records
 * cache's were copied into as well (tuner/tune.c) */
#define PICK_SQL "strategy IN ('final-pick', 'cached:final-pick')"
static const char ranked_sql[] =
    "SELECT " SELECT_COLS ", COALESCE((SELECT time_s FROM records WHERE id=pid), mt) FROM records "
    "JOIN (SELECT MIN(id) AS fid, AVG(CASE WHEN " PICK_SQL " THEN NULL ELSE time_s END) AS mt, "
    "MAX(strategy IN ('final', 'cached:final') OR " PICK_SQL ") AS fin, "
    "MAX(CASE WHEN " PICK_SQL " THEN id END) AS pid FROM records "
    "WHERE workload=?1 AND target=?2 GROUP BY schedule "
    "HAVING MAX(error)=0 AND MIN(time_s)>0) ON id=fid "
    "ORDER BY pid IS NULL, pid DESC, fin DESC, mt, fid";

enum kiln_status
kiln_db_each_ranked(struct kiln_db *d, const char *workload, const char *target,
                    bool (*fn)(void *ud, const struct kiln_record *r, const char *bad), void *ud)
{
    if (!d || !workload || !target || !fn)
        return KILN_ERR_INVALID;
    if (d->empty)
        return KILN_OK;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, ranked_sql, -1, &s, NULL) != SQLITE_OK)
        return sql_fail(d, "ranking records");
    bind_text(s, 1, workload);
    bind_text(s, 2, target);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct kiln_record r;
        const char        *col = NULL;
        char               why[160] = "";
        if (!read_row(s, &r, &col))
            snprintf(why, sizeof why, "row %lld is damaged (column %s)", (long long)r.id, col);
        else
            r.time_s = sqlite3_column_double(s, 14);
        if (!fn(ud, &r, col ? why : NULL)) {
            rc = SQLITE_DONE;
            break;
        }
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? KILN_OK : sql_fail(d, "ranking records");
}

struct best_state {
    struct kiln_db     *d;
    struct kiln_record *out;
    bool                found;
};

static bool
best_one(void *ud, const struct kiln_record *r, const char *bad)
{
    struct best_state *b = ud;
    kiln_ctx          *ctx = b->d->ctx;
    if (bad) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "db", "records database %s: %s", b->d->path, bad);
        return false;
    }
    *b->out = *r;
    b->out->workload = dup_or_null(ctx, r->workload);
    b->out->target = dup_or_null(ctx, r->target);
    b->out->schedule = dup_or_null(ctx, r->schedule);
    b->out->prog = dup_or_null(ctx, r->prog);
    b->out->error_msg = dup_or_null(ctx, r->error_msg);
    b->out->version = dup_or_null(ctx, r->version);
    b->out->machine = dup_or_null(ctx, r->machine);
    b->out->strategy = dup_or_null(ctx, r->strategy);
    b->found = kiln_ok(ctx);
    return false;
}

bool
kiln_db_best(struct kiln_db *d, const char *workload, const char *target, struct kiln_record *out)
{
    if (!d || !workload || !target || !out)
        return false;
    struct best_state b = {d, out, false};
    return kiln_db_each_ranked(d, workload, target, best_one, &b) == KILN_OK && b.found;
}

enum kiln_status
kiln_db_each(struct kiln_db *d, const char *workload, const char *target,
             bool (*fn)(void *ud, const struct kiln_record *r), void *ud)
{
    if (!d || !fn)
        return KILN_ERR_INVALID;
    if (d->empty)
        return KILN_OK;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT " SELECT_COLS " FROM records WHERE (?1 IS NULL OR workload=?1) "
                           "AND (?2 IS NULL OR target=?2) ORDER BY id",
                           -1, &s, NULL)
        != SQLITE_OK)
        return sql_fail(d, "reading records");
    bind_text(s, 1, workload);
    bind_text(s, 2, target);
    int              rc;
    enum kiln_status st = KILN_OK;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct kiln_record r;
        const char        *col;
        if (!read_row(s, &r, &col)) {
            st = bad_row(d, r.id, col);
            break;
        }
        if (!fn(ud, &r))
            break;
    }
    sqlite3_finalize(s);
    if (st == KILN_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
        st = sql_fail(d, "reading records");
    return st;
}

enum kiln_status
kiln_db_each_task(struct kiln_db *d, bool (*fn)(void *ud, const struct kiln_db_task *t), void *ud)
{
    if (!d || !fn)
        return KILN_ERR_INVALID;
    if (d->empty)
        return KILN_OK;
    sqlite3_stmt *s;
    /* flops is a bare column next to MIN(id): SQLite takes it from the first record */
    if (sqlite3_prepare_v2(d->db,
                           "SELECT workload, target, flops, MIN(id), count(*), "
                           "sum(error<>0) FROM records GROUP BY workload, target ORDER BY MIN(id)",
                           -1, &s, NULL)
        != SQLITE_OK)
        return sql_fail(d, "listing records");
    int              rc;
    enum kiln_status st = KILN_OK;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct kiln_db_task t = {0};
        int64_t             id = sqlite3_column_int64(s, 3);
        const char         *col = NULL;
        if (!col_text(s, 0, false, &t.workload))
            col = "workload";
        else if (!col_text(s, 1, false, &t.target))
            col = "target";
        else if (!col_num(s, 2, &t.flops))
            col = "flops";
        if (col) {
            st = bad_row(d, id, col);
            break;
        }
        t.records = (uint32_t)sqlite3_column_int64(s, 4);
        t.errors = (uint32_t)sqlite3_column_int64(s, 5);
        if (!fn(ud, &t))
            break;
    }
    sqlite3_finalize(s);
    if (st == KILN_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
        st = sql_fail(d, "listing records");
    return st;
}

uint32_t
kiln_db_count(struct kiln_db *d, const char *workload, const char *target)
{
    if (!d || d->empty)
        return 0;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT count(*) FROM records WHERE (?1 IS NULL OR workload=?1) AND "
                           "(?2 IS NULL OR target=?2)",
                           -1, &s, NULL)
        != SQLITE_OK) {
        sql_fail(d, "counting records");
        return 0;
    }
    bind_text(s, 1, workload);
    bind_text(s, 2, target);
    uint32_t n = 0;
    if (sqlite3_step(s) == SQLITE_ROW)
        n = (uint32_t)sqlite3_column_int64(s, 0);
    else
        sql_fail(d, "counting records");
    sqlite3_finalize(s);
    return n;
}

/* ---- workload graphs (schema 2) ---- */

static bool
is_key(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return false;
    return n == 16;
}

/* Checks a graph row: keys of 16 hex digits, a target, and .kg text that parses to a task graph
 * with that workload key and kind. False with the reason in why. */
static bool
check_graph(kiln_ctx *ctx, const struct kiln_db_graph *g, char *why, size_t nwhy)
{
    why[0] = 0;
    if (!is_key(g->workload))
        snprintf(why, nwhy, "workload \"%.40s\" is not a task key (16 hex digits)", g->workload);
    else if (!*g->target)
        snprintf(why, nwhy, "empty target");
    else if (!is_key(g->kind))
        snprintf(why, nwhy, "kind \"%.40s\" is not a task key (16 hex digits)", g->kind);
    if (why[0])
        return false;
    struct kiln_scratch sc = kiln_scratch_begin(ctx);
    struct kiln_graph  *parsed = NULL;
    if (kiln_graph_parse(ctx, g->graph, strlen(g->graph), "graph", &parsed) != KILN_OK) {
        snprintf(why, nwhy, "the graph does not parse: %.200s", kiln_ctx_error(ctx)->msg);
        kiln_ctx_error_clear(ctx);
    } else {
        char key[17], kind[17];
        snprintf(key, sizeof key, "%016" PRIx64, kiln_task_hash(parsed));
        snprintf(kind, sizeof kind, "%016" PRIx64, kiln_task_kind(parsed));
        if (strcmp(key, g->workload))
            snprintf(why, nwhy, "the graph's workload key is %s, not %s", key, g->workload);
        else if (strcmp(kind, g->kind))
            snprintf(why, nwhy, "the graph's kind is %s, not %s", kind, g->kind);
    }
    kiln_scratch_end(ctx, sc);
    return !why[0];
}

static enum kiln_status
graph_insert(struct kiln_db *d, const struct kiln_db_graph *g)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "INSERT OR IGNORE INTO graphs(workload, target, kind, graph) "
                           "VALUES(?,?,?,?)",
                           -1, &s, NULL)
        != SQLITE_OK)
        return sql_fail(d, "adding a graph");
    bind_text(s, 1, g->workload);
    bind_text(s, 2, g->target);
    bind_text(s, 3, g->kind);
    bind_text(s, 4, g->graph);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? KILN_OK : sql_fail(d, "adding a graph");
}

static enum kiln_status
writable(struct kiln_db *d)
{
    if (d->readonly)
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db", "records database %s: opened read-only",
                         d->path);
    return KILN_OK;
}

enum kiln_status
kiln_db_add_graph(struct kiln_db *d, const struct kiln_db_graph *g)
{
    if (!d || !g || !g->workload || !g->target || !g->kind || !g->graph)
        return KILN_ERR_INVALID;
    KILN_TRY(writable(d));
    char why[300];
    if (!check_graph(d->ctx, g, why, sizeof why))
        return KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db", "records database %s: graph of %s: %s",
                         d->path, g->workload, why);
    return graph_insert(d, g);
}

bool
kiln_db_has_graphs(const struct kiln_db *d)
{
    return d && d->graphs && !d->empty;
}

enum kiln_status
kiln_db_add_task_graph(struct kiln_db *d, const struct kiln_task *t, const char *target)
{
    if (!d || !t || !target)
        return KILN_ERR_INVALID;
    KILN_TRY(writable(d));
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM graphs WHERE workload=? AND target=?", -1, &s,
                           NULL)
        != SQLITE_OK)
        return sql_fail(d, "looking up a graph");
    bind_text(s, 1, t->key);
    bind_text(s, 2, target);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc == SQLITE_ROW)
        return KILN_OK; /* stored once */
    if (rc != SQLITE_DONE)
        return sql_fail(d, "looking up a graph");
    kiln_ctx           *ctx = d->ctx;
    struct kiln_scratch sc = kiln_scratch_begin(ctx);
    const char         *text = NULL;
    enum kiln_status    st = kiln_graph_print(ctx, t->g, 0, &text);
    char                kind[17], why[300];
    snprintf(kind, sizeof kind, "%016" PRIx64, t->kind);
    struct kiln_db_graph g = {t->key, target, kind, text};
    /* a graph whose text does not give the task back is of no use later: not stored */
    if (st == KILN_OK && check_graph(ctx, &g, why, sizeof why))
        st = graph_insert(d, &g);
    kiln_scratch_end(ctx, sc);
    return st;
}

enum kiln_status
kiln_db_each_graph(struct kiln_db *d, const char                             *target,
                   bool (*fn)(void *ud, const struct kiln_db_graph *g), void *ud)
{
    if (!d || !fn)
        return KILN_ERR_INVALID;
    if (!kiln_db_has_graphs(d))
        return KILN_OK;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT workload, target, kind, graph, rowid FROM graphs "
                           "WHERE ?1 IS NULL OR target=?1 ORDER BY rowid",
                           -1, &s, NULL)
        != SQLITE_OK)
        return sql_fail(d, "reading graphs");
    bind_text(s, 1, target);
    int              rc;
    enum kiln_status st = KILN_OK;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct kiln_db_graph g;
        const char          *col = NULL;
        if (!col_text(s, 0, false, &g.workload))
            col = "workload";
        else if (!col_text(s, 1, false, &g.target))
            col = "target";
        else if (!col_text(s, 2, false, &g.kind))
            col = "kind";
        else if (!col_text(s, 3, false, &g.graph))
            col = "graph";
        if (col) {
            st = KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                           "records database %s: graph row %lld is damaged: column %s is missing "
                           "or of the wrong type",
                           d->path, (long long)sqlite3_column_int64(s, 4), col);
            break;
        }
        if (!fn(ud, &g))
            break;
    }
    sqlite3_finalize(s);
    if (st == KILN_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
        st = sql_fail(d, "reading graphs");
    return st;
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

static bool write_line(struct export_state *e, cJSON *o, bool ok);

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
    return write_line(e, o, ok);
}

static bool
write_line(struct export_state *e, cJSON *o, bool ok)
{
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

/* a graph line: {"graph": .kg text, "workload", "target", "kind"} */
static bool
export_graph(void *ud, const struct kiln_db_graph *g)
{
    cJSON *o = cJSON_CreateObject();
    bool   ok = o != NULL;
    ok = ok && cJSON_AddStringToObject(o, "graph", g->graph);
    ok = ok && cJSON_AddStringToObject(o, "workload", g->workload);
    ok = ok && cJSON_AddStringToObject(o, "target", g->target);
    ok = ok && cJSON_AddStringToObject(o, "kind", g->kind);
    return write_line(ud, o, ok);
}

enum kiln_status
kiln_db_export_jsonl(struct kiln_db *d, FILE *out)
{
    if (!d || !out)
        return KILN_ERR_INVALID;
    struct export_state e = {d, out, KILN_OK};
    KILN_TRY(kiln_db_each_graph(d, NULL, export_graph, &e));
    KILN_TRY(e.st);
    KILN_TRY(kiln_db_each(d, NULL, NULL, export_one, &e));
    if (e.st == KILN_OK && fflush(out) != 0)
        return KILN_FAIL(d->ctx, KILN_ERR_BACKEND, "db", "writing exported records: %s",
                         strerror(errno));
    return e.st;
}

/* ---- import: every line is checked before it is added ---- */

enum {
    F_WORKLOAD,
    F_TARGET,
    F_SCHEDULE,
    F_PROG,
    F_TIME,
    F_STDDEV,
    F_ERROR,
    F_ERROR_MSG,
    F_VERSION,
    F_MACHINE,
    F_TIMESTAMP,
    F_FLOPS,
    F_STRATEGY,
    F_COUNT
};
static const char *const field_name[F_COUNT] = {
    "workload",  "target",  "schedule", "prog",      "time_s", "stddev_s", "error",
    "error_msg", "version", "machine",  "timestamp", "flops",  "strategy"};
/* prog and error_msg may be null or left out */
#define F_NULLABLE ((1u << F_PROG) | (1u << F_ERROR_MSG))
#define F_NUMBER   ((1u << F_TIME) | (1u << F_STDDEV) | (1u << F_TIMESTAMP) | (1u << F_FLOPS))

/* A graph line's fields into *g (strings point into o); false with the reason in why. */
static bool
parse_graph_line(struct kiln_db *d, const cJSON *o, struct kiln_db_graph *g, char *why, size_t nwhy)
{
    static const char *const name[4] = {"graph", "workload", "target", "kind"};
    const char             **field[4] = {&g->graph, &g->workload, &g->target, &g->kind};
    memset(g, 0, sizeof *g);
    for (const cJSON *v = o->child; v; v = v->next) {
        int k = 0;
        while (k < 4 && strcmp(v->string, name[k]))
            k++;
        if (k == 4) {
            snprintf(why, nwhy, "unknown field \"%.60s\" in a graph line", v->string);
            return false;
        }
        if (!cJSON_IsString(v)) {
            snprintf(why, nwhy, "field \"%s\" is not a string", name[k]);
            return false;
        }
        *field[k] = v->valuestring;
    }
    for (int k = 0; k < 4; k++)
        if (!*field[k]) {
            snprintf(why, nwhy, "missing field \"%s\" in a graph line", name[k]);
            return false;
        }
    return check_graph(d->ctx, g, why, nwhy);
}

/* Parses and checks one line into r, or a graph line into *g (*is_graph set; strings point
 * into *json, which the caller deletes). On a bad line returns false with the reason in why. */
static bool
parse_line(struct kiln_db *d, const char *text, size_t len, cJSON **json, struct kiln_record *r,
           struct kiln_db_graph *g, bool *is_graph, char *why, size_t nwhy)
{
    memset(r, 0, sizeof *r);
    *is_graph = false;
    /* strict JSON (passes/sched.c): nothing after the object, no key twice, no NUL byte or
     * \u0000 (cJSON would cut the string there, and the record would not be what the line
     * says) */
    size_t at;
    char   msg[128];
    cJSON *o = *json = kiln_json_parse_strict(d->ctx, text, len, &at, msg, sizeof msg);
    if (!o) {
        snprintf(why, nwhy, "%s (column %zu)",
                 strcmp(msg, "not valid JSON") ? msg : "not a JSON object", at + 1);
        return false;
    }
    if (!cJSON_IsObject(o)) {
        snprintf(why, nwhy, "not a JSON object");
        return false;
    }
    if (cJSON_GetObjectItemCaseSensitive(o, "graph")) {
        *is_graph = true;
        return parse_graph_line(d, o, g, why, nwhy);
    }
    const cJSON *f[F_COUNT] = {0};
    for (const cJSON *v = o->child; v; v = v->next) {
        int k = 0;
        while (k < F_COUNT && strcmp(v->string, field_name[k]))
            k++;
        if (k == F_COUNT) {
            snprintf(why, nwhy, "unknown field \"%.60s\"", v->string);
            return false;
        }
        f[k] = v; /* each once: kiln_json_parse_strict rejects a key twice */
    }
    const char **str[F_COUNT] = {
        [F_WORKLOAD] = &r->workload, [F_TARGET] = &r->target,       [F_SCHEDULE] = &r->schedule,
        [F_PROG] = &r->prog,         [F_ERROR_MSG] = &r->error_msg, [F_VERSION] = &r->version,
        [F_MACHINE] = &r->machine,   [F_STRATEGY] = &r->strategy};
    const char *err = NULL;
    double      num[F_COUNT] = {0};
    for (int k = 0; k < F_COUNT; k++) {
        bool nullable = F_NULLABLE >> k & 1, number = F_NUMBER >> k & 1;
        if (!f[k] || cJSON_IsNull(f[k])) {
            if (nullable)
                continue;
            snprintf(why, nwhy, f[k] ? "field \"%s\" is null" : "missing field \"%s\"",
                     field_name[k]);
            return false;
        }
        if (number ? !cJSON_IsNumber(f[k]) : !cJSON_IsString(f[k])) {
            snprintf(why, nwhy, "field \"%s\" is not a %s", field_name[k],
                     number ? "number" : "string");
            return false;
        }
        if (number)
            num[k] = f[k]->valuedouble;
        else if (k == F_ERROR)
            err = f[k]->valuestring;
        else
            *str[k] = f[k]->valuestring;
    }
    r->error = KILN_MEASURE_COUNT;
    for (uint8_t e = 0; e < KILN_MEASURE_COUNT; e++)
        if (!strcmp(err, kiln_measure_error_name[e]))
            r->error = e;
    r->time_s = num[F_TIME];
    r->stddev_s = num[F_STDDEV];
    r->flops = num[F_FLOPS];
    double ts = num[F_TIMESTAMP];
    if (!is_key(r->workload))
        snprintf(why, nwhy, "workload \"%.40s\" is not a task key (16 hex digits)", r->workload);
    else if (!*r->target)
        snprintf(why, nwhy, "empty target");
    else if (r->error == KILN_MEASURE_COUNT)
        snprintf(why, nwhy, "unknown error kind \"%.40s\"", err);
    else if (!isfinite(r->time_s) || r->time_s < 0
             || (r->error == KILN_MEASURE_OK && !(r->time_s > 0)))
        snprintf(why, nwhy, "time_s %g is not %s", r->time_s,
                 r->error == KILN_MEASURE_OK ? "positive (and the record has no error)"
                                             : "zero or positive");
    else if (!isfinite(r->stddev_s) || r->stddev_s < 0)
        snprintf(why, nwhy, "stddev_s %g is negative or not finite", r->stddev_s);
    else if (!isfinite(r->flops) || r->flops < 0)
        snprintf(why, nwhy, "flops %g is negative or not finite", r->flops);
    else if (!(ts >= 1 && ts <= 9e15) || ts != (double)(int64_t)ts)
        snprintf(why, nwhy, "timestamp is not a positive integer");
    else
        why[0] = 0;
    if (why[0])
        return false;
    r->timestamp = (int64_t)ts;
    /* the schedule must parse, strictly (whether it fits the task is known only when it is
     * applied) */
    kiln_ctx            *ctx = d->ctx;
    struct kiln_scratch  sc = kiln_scratch_begin(ctx);
    struct kiln_schedule sched;
    if (kiln_sched_from_json(ctx, r->schedule, strlen(r->schedule), &sched) != KILN_OK) {
        snprintf(why, nwhy, "%.200s", kiln_ctx_error(ctx)->msg);
        kiln_ctx_error_clear(ctx);
    }
    kiln_scratch_end(ctx, sc);
    return !why[0];
}

enum kiln_status
kiln_db_import_jsonl(struct kiln_db *d, const char *file, const char *text, size_t len,
                     void (*bad)(void *ud, uint32_t line, const char *why), void *ud,
                     uint32_t *added)
{
    uint32_t n = 0, nbad = 0, first_bad = 0;
    char     first_why[256] = "";
    if (added)
        *added = 0;
    if (!d || (!text && len))
        return KILN_ERR_INVALID;
    if (!kiln_ok(d->ctx))
        return d->ctx->err.status;
    if (!file)
        file = "records";
    /* duplicates are found through an index on the fields that tell records apart, so each
     * line costs one lookup (an older file gets the index here, once) */
    KILN_TRY(exec(d, "BEGIN IMMEDIATE"));
    enum kiln_status st = exec(d, "CREATE INDEX IF NOT EXISTS records_dedup ON "
                                  "records(workload, target, timestamp, time_s)");
    sqlite3_stmt    *exists = NULL;
    if (st == KILN_OK
        && sqlite3_prepare_v2(d->db,
                              "SELECT 1 FROM records INDEXED BY records_dedup WHERE workload=? "
                              "AND target=? AND timestamp=? AND time_s=? AND schedule=? LIMIT 1",
                              -1, &exists, NULL)
               != SQLITE_OK)
        st = sql_fail(d, "preparing the import");
    uint32_t line = 0;
    for (size_t i = 0; i < len && st == KILN_OK;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t      end = nl ? (size_t)(nl - text) : len;
        line++;
        size_t e = end, b = i;
        while (e > i && (text[e - 1] == '\r' || text[e - 1] == ' ' || text[e - 1] == '\t'))
            e--;
        while (b < e && (text[b] == ' ' || text[b] == '\t'))
            b++;
        i = end + 1;
        if (b == e)
            continue; /* a blank line */
        cJSON               *json = NULL;
        struct kiln_record   r;
        struct kiln_db_graph g;
        bool                 is_graph;
        char                 why[256];
        if (!parse_line(d, text + b, e - b, &json, &r, &g, &is_graph, why, sizeof why)) {
            cJSON_Delete(json);
            if (!nbad++) {
                first_bad = line;
                snprintf(first_why, sizeof first_why, "%s", why);
            }
            if (bad)
                bad(ud, line, why);
            continue;
        }
        if (is_graph) {
            st = graph_insert(d, &g); /* a graph already stored stays */
            cJSON_Delete(json);
            continue;
        }
        sqlite3_reset(exists);
        bind_text(exists, 1, r.workload);
        bind_text(exists, 2, r.target);
        sqlite3_bind_int64(exists, 3, r.timestamp);
        sqlite3_bind_double(exists, 4, r.time_s);
        bind_text(exists, 5, r.schedule);
        int rc = sqlite3_step(exists);
        sqlite3_reset(exists);
        if (rc == SQLITE_DONE) {
            st = kiln_db_add(d, &r);
            n += st == KILN_OK;
        } else if (rc != SQLITE_ROW) {
            st = sql_fail(d, "looking for duplicates");
        }
        cJSON_Delete(json);
    }
    sqlite3_finalize(exists);
    if (st == KILN_OK)
        st = exec(d, "COMMIT");
    if (st != KILN_OK) {
        sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
        return st;
    }
    if (added)
        *added = n;
    if (nbad) {
        const char *f = kiln_arena_strdup(d->ctx, file);
        st = KILN_FAIL(d->ctx, KILN_ERR_INVALID, "db",
                       "%u bad line%s not imported (first: line %u: %s); %u records imported", nbad,
                       nbad == 1 ? "" : "s", first_bad, first_why, n);
        kiln_error_set_loc(d->ctx, f, first_bad, 1);
    }
    return st;
}
