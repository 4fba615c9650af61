/* cli/cmd_records.c -- `kiln records FILE.db [--export OUT.jsonl] [--import IN.jsonl]`: lists the
 * best record of every workload/target pair of a records database, or moves records between
 * databases as JSON lines. */
#include "cli.h"

#include <string.h>

static const char usage[] =
    "usage: kiln records FILE.db [--export OUT.jsonl | --import IN.jsonl] [--schedules]\n"
    "\n"
    "Lists every workload (task key) and target of the records database with its number of\n"
    "records, errors, best time and GFLOP/s, and the strategy that found it (--schedules also\n"
    "prints the best schedule). The database is only read, so a read-only one can be listed.\n"
    "--export writes every record as a JSON line (to a temporary file renamed into place; it\n"
    "refuses to write onto the database or any other SQLite file). --import adds the records\n"
    "of a JSON-lines file, skipping those already present; every line is checked, and a bad\n"
    "one is reported as FILE:LINE and not imported while the good ones are: the exit status\n"
    "is then 1.\n";

/* Bad lines reported one by one, up to this many; then a count. */
#define MAX_BAD_REPORTED 20

struct bad_lines {
    const char *file;
    uint32_t    n;
};

static void
bad_line(void *ud, uint32_t line, const char *why)
{
    struct bad_lines *B = ud;
    if (B->n++ < MAX_BAD_REPORTED)
        fprintf(stderr, "kiln: %s:%u: bad record, not imported: %s\n", B->file, line, why);
}

struct lst {
    bool     schedules;
    uint32_t n;
};

static void
print_one(void *ud, const struct kiln_record_summary *s)
{
    struct lst *L = ud;
    if (!L->n++)
        printf("%-16s  %7s  %6s  %12s  %10s  %-14s  %s\n", "workload", "records", "errors", "best",
               "GFLOP/s", "found by", "target");
    char best[32] = "-";
    if (s->best_s > 0)
        snprintf(best, sizeof best, "%.2f us", s->best_s * 1e6);
    /* the target's feature list is long: the listing shows it up to -mattr */
    const char *attr = strstr(s->target, " -mattr=");
    int         tlen = attr ? (int)(attr - s->target) : (int)strlen(s->target);
    printf("%-16s  %7u  %6u  %12s  %10.1f  %-14s  %.*s%s\n", s->workload, s->records, s->errors,
           best, s->best_s > 0 ? s->flops / s->best_s * 1e-9 : 0.0,
           s->best_s > 0 ? s->strategy : "-", tlen, s->target, attr ? " ..." : "");
    if (L->schedules && s->best_s > 0)
        printf("  %s\n", s->schedule);
}

int
cmd_records(int argc, char **argv)
{
    const char *db = NULL, *exp = NULL, *imp = NULL;
    bool        schedules = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(usage, stdout);
            return 0;
        }
        if ((!strcmp(a, "--export") || !strcmp(a, "--import")) && i + 1 >= argc)
            return cli_usage_error("records", "%s needs a file", a);
        if (!strcmp(a, "--export"))
            exp = argv[++i];
        else if (!strcmp(a, "--import"))
            imp = argv[++i];
        else if (!strcmp(a, "--schedules"))
            schedules = true;
        else if (a[0] == '-' && a[1])
            return cli_usage_error("records", "unknown option %s", a);
        else if (!db)
            db = a;
        else
            return cli_usage_error("records", "more than one database (%s, %s)", db, a);
    }
    if (!db)
        return cli_usage_error("records", "missing FILE.db");
    if (exp && imp)
        return cli_usage_error("records", "--export and --import are exclusive");
    kiln_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    int rc = 0;
    if (exp) {
        rc = kiln_records_export(ctx, db, exp) == KILN_OK ? 0 : cli_report(ctx);
    } else if (imp) {
        uint32_t         added = 0;
        struct bad_lines B = {imp, 0};
        rc = kiln_records_import(ctx, db, imp, &added, bad_line, &B) == KILN_OK ? 0 : 1;
        if (B.n > MAX_BAD_REPORTED)
            fprintf(stderr, "kiln: %s: %u more bad lines\n", imp, B.n - MAX_BAD_REPORTED);
        if (rc && !B.n)
            cli_report(ctx);
        else if (B.n)
            fprintf(stderr, "kiln: %s: %u bad line%s not imported\n", imp, B.n,
                    B.n == 1 ? "" : "s");
        if (!rc || B.n)
            printf("imported %u records into %s\n", added, db);
    } else {
        struct lst L = {schedules, 0};
        rc = kiln_records_list(ctx, db, print_one, &L) == KILN_OK ? 0 : cli_report(ctx);
        if (!rc && !L.n)
            printf("%s: no records\n", db);
    }
    kiln_ctx_free(ctx);
    return rc;
}
