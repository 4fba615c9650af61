/* tuner/api.c -- the public tuning and records API of include/kiln.h over the tuner's internal
 * one: parameter defaults, compiling with the best records, listing/exporting/importing. */
#include "tuner.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    else if (p->time_budget_s > 0)
        o.trials = UINT32_MAX; /* the time budget alone bounds the run */
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
    o.measure.queue = p->queue;
    o.measure.queue_key = p->queue_key;
    o.measure.queue_stop = p->stop;
    if (!(p->queue_timeout_s >= 0) || !isfinite(p->queue_timeout_s))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "tune",
                         "queue timeout %g s is not a finite "
                         "non-negative number",
                         p->queue_timeout_s);
    if (p->queue_timeout_s > 0)
        o.measure.queue_timeout_s = p->queue_timeout_s;
    o.log = p->log;
    o.curve_dir = p->curve_dir;
    o.cache_path = p->cache_path;
    if (!(p->time_budget_s >= 0) || !isfinite(p->time_budget_s))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "tune",
                         "time budget %g s is not a finite "
                         "non-negative number",
                         p->time_budget_s);
    o.time_budget_s = p->time_budget_s;
    o.warning = p->warning;
    o.progress = p->progress;
    o.progress_ud = p->progress_ud;
    o.stop = p->stop;
    return kiln_tune(ctx, g, &o);
}

enum kiln_status
kiln_graph_tuned_tasks(kiln_ctx *ctx, const struct kiln_graph *g, const char *db_path,
                       const char *target, const char **json, const struct kiln_tuned_task **tasks,
                       uint32_t *ntasks)
{
    *json = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_target t;
    KILN_TRY(kiln_cg_target_parse(ctx, target ? target : "llvm", &t));
    struct kiln_db *db;
    KILN_TRY(kiln_db_open_readonly(ctx, db_path, &db));
    struct kiln_schedule    s = {0};
    uint32_t                nt = 0, n = 0;
    struct kiln_tuned_task *info = NULL;
    enum kiln_status        st =
        kiln_tuned_schedule_tasks(ctx, g, db, kiln_cg_target_str(ctx, &t), &s, &nt, &info, &n);
    kiln_db_close(db);
    KILN_TRY(st);
    struct kiln_buf b = {0};
    KILN_TRY(kiln_sched_to_json(ctx, &s, &b));
    *json = b.data;
    if (tasks)
        *tasks = info;
    if (ntasks)
        *ntasks = n;
    return KILN_OK;
}

enum kiln_status
kiln_graph_tuned_schedule(kiln_ctx *ctx, const struct kiln_graph *g, const char *db_path,
                          const char *target, const char **json, uint32_t *ntuned, uint32_t *ntasks)
{
    const struct kiln_tuned_task *info;
    uint32_t                      n = 0, nt = 0;
    KILN_TRY(kiln_graph_tuned_tasks(ctx, g, db_path, target, json, &info, &n));
    for (uint32_t i = 0; i < n; i++)
        nt += info[i].tuned != 0;
    if (ntuned)
        *ntuned = nt;
    if (ntasks)
        *ntasks = n;
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
list_one(void *ud, const struct kiln_db_task *t)
{
    struct lister *L = ud;
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
    struct summary *e = &L->s[L->n++];
    memset(e, 0, sizeof *e);
    e->workload = dup_or_empty(t->workload);
    e->target = dup_or_empty(t->target);
    e->s.flops = t->flops;
    e->s.records = t->records;
    e->s.errors = t->errors;
    return true;
}

enum kiln_status
kiln_records_list(kiln_ctx *ctx, const char                                       *db_path,
                  void (*fn)(void *ud, const struct kiln_record_summary *s), void *ud)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_db *db;
    KILN_TRY(kiln_db_open_readonly(ctx, db_path, &db));
    struct lister    L = {0};
    enum kiln_status st = kiln_db_each_task(db, list_one, &L);
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
        if (st == KILN_OK && !L.oom && e->workload && e->target)
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

/* ---- export and import: never onto the database ---- */

static bool
same_file(const struct stat *a, const char *path)
{
    struct stat b;
    return stat(path, &b) == 0 && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

/* Whether path (which exists: *sb) is the database db_path or one of its journal files. */
static bool
is_database(kiln_ctx *ctx, const char *db_path, const struct stat *sb)
{
    if (same_file(sb, db_path))
        return true;
    static const char *const suffix[] = {"-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        const char *p = kiln_arena_printf(ctx, "%s%s", db_path, suffix[i]);
        if (p && same_file(sb, p))
            return true;
    }
    return false;
}

static bool
is_sqlite_file(const char *path)
{
    char  head[16];
    FILE *f = fopen(path, "rb");
    bool  yes = f && fread(head, 1, sizeof head, f) == sizeof head
               && !memcmp(head, "SQLite format 3", sizeof head);
    if (f)
        fclose(f);
    return yes;
}

/* Creates a new file next to path (same directory, so a rename is atomic) with the mode a new
 * file gets (0666 less the umask). */
static int
create_temp(const char *path, char *tmp, size_t size)
{
    static unsigned counter;
    const char     *slash = strrchr(path, '/');
    int             dirlen = slash ? (int)(slash - path + 1) : 0;
    for (int tries = 0; tries < 100; tries++) {
        unsigned c = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        if ((size_t)snprintf(tmp, size, "%.*s.%s.%ld.%u.tmp", dirlen, path,
                             slash ? slash + 1 : path, (long)getpid(), c)
            >= size)
            return -1;
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

enum kiln_status
kiln_records_export(kiln_ctx *ctx, const char *db_path, const char *jsonl_path)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (!jsonl_path || !*jsonl_path)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "no file to export to");
    struct kiln_db *db;
    KILN_TRY(kiln_db_open_readonly(ctx, db_path, &db));
    struct stat sb;
    bool        exists = stat(jsonl_path, &sb) == 0;
    if (exists && is_database(ctx, db_path, &sb)) {
        kiln_db_close(db);
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "records",
                         "refusing to export %s onto itself: %s is the database", db_path,
                         jsonl_path);
    }
    if (exists && S_ISREG(sb.st_mode) && is_sqlite_file(jsonl_path)) {
        kiln_db_close(db);
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "records",
                         "refusing to overwrite %s: it is an SQLite database, and an export is "
                         "JSON lines",
                         jsonl_path);
    }
    /* a regular file (or a new one) is replaced whole by a rename; a link is followed, so the
     * file it points to is replaced and the link kept; a device or a pipe is written to */
    const char *dest = jsonl_path;
    char       *real = NULL;
    if (exists && S_ISREG(sb.st_mode) && (real = realpath(jsonl_path, NULL)) != NULL)
        dest = real;
    bool  direct = exists && !S_ISREG(sb.st_mode);
    char  tmp[4096];
    int   fd = direct ? open(dest, O_WRONLY | O_CLOEXEC) : create_temp(dest, tmp, sizeof tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    enum kiln_status st = KILN_OK;
    if (!f) {
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "cannot write %s: %s", jsonl_path,
                       strerror(errno));
        if (fd >= 0)
            close(fd);
    } else {
        st = kiln_db_export_jsonl(db, f);
        if (st == KILN_OK && !direct && fsync(fileno(f)) != 0)
            st = KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "cannot write %s: %s", jsonl_path,
                           strerror(errno));
        if (fclose(f) && st == KILN_OK)
            st = KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "cannot write %s: %s", jsonl_path,
                           strerror(errno));
    }
    kiln_db_close(db);
    if (!direct && fd >= 0) {
        if (st == KILN_OK && rename(tmp, dest) != 0)
            st = KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "cannot write %s: %s", jsonl_path,
                           strerror(errno));
        if (st != KILN_OK)
            unlink(tmp);
    }
    free(real);
    return st;
}

/* An import's input is read whole: a larger file (or an endless one, /dev/zero) is refused. */
#define KILN_IMPORT_MAX_BYTES ((size_t)1 << 30)

enum kiln_status
kiln_records_import(kiln_ctx *ctx, const char *db_path, const char *jsonl_path, uint32_t *added,
                    void (*bad)(void *ud, uint32_t line, const char *why), void *ud)
{
    if (added)
        *added = 0;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    FILE *f = fopen(jsonl_path, "rb");
    if (!f)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "cannot read %s: %s", jsonl_path,
                         strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && is_database(ctx, db_path, &sb)) {
        fclose(f);
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "records",
                         "refusing to import %s into itself: %s is the database", db_path,
                         jsonl_path);
    }
    size_t cap = 1 << 16, n = 0;
    char  *buf = malloc(cap);
    bool   big = false;
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
        if (n + 1 >= cap) {
            if (cap >= KILN_IMPORT_MAX_BYTES) {
                big = true;
                break;
            }
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    bool rerr = ferror(f) != 0;
    fclose(f);
    if (!buf)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "records", "out of memory reading %s", jsonl_path);
    if (big || rerr) {
        free(buf);
        return big ? KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "%s is larger than 1 GiB",
                               jsonl_path)
                   : KILN_FAIL(ctx, KILN_ERR_INVALID, "records", "cannot read %s", jsonl_path);
    }
    buf[n] = 0;
    struct kiln_db  *db;
    enum kiln_status st = kiln_db_open(ctx, db_path, &db);
    if (st == KILN_OK) {
        st = kiln_db_import_jsonl(db, jsonl_path, buf, n, bad, ud, added);
        kiln_db_close(db);
    }
    free(buf);
    return st;
}
