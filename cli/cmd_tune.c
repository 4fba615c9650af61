/* cli/cmd_tune.c -- `kiln tune FILE.kg --trials N --db FILE.db [--target T] [--strategy S] ...`:
 * tunes every task of the graph through the public API (kiln_graph_tune), printing a live
 * progress line; Ctrl-C (SIGINT/SIGTERM/SIGHUP) stops after the measurement in flight, and a later
 * run with the same database continues where it stopped. The per-user records cache
 * (cli/cache.c) is read and written unless switched off; --time bounds the run in time. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln tune FILE.kg [--trials N] [--db FILE.db] [--target T]\n"
    "                 [--strategy ansor+droplet|ansor|droplet] [--droplet-after N]\n"
    "                 [--batch N] [--population N] [--seed S] [--repeat N] [--min-repeat-ms MS]\n"
    "                 [--timeout S] [--threads N] [--flush-cache | --flush-weights]\n"
    "                 [--build-workers N] [--log FILE.jsonl] [--curves DIR] [--quiet]\n"
    "                 [--time DURATION] [--cache PATH | --no-cache]\n"
    "                 [--queue redis://[:PASSWORD@]HOST:PORT/NAME [--jobs-key KEY]\n"
    "                  [--queue-timeout S]]\n"
    "                 [--no-simplify] [--no-channels-last] [--no-winograd] [--dump-after PASS]\n"
    "\n"
    "Searches schedules for every task of the graph (sketch rules, evolutionary search with an\n"
    "XGBoost cost model, then Droplet coordinate descent) and stores every measured program in\n"
    "the records database (default kiln.db). --trials (default 1000) counts the records already\n"
    "in the database, so an interrupted run resumes where it stopped. --time DURATION (90s,\n"
    "10m, 1h or seconds) stops starting rounds when the time is spent, the measurement in\n"
    "flight finishing; with --trials too, whichever comes first; --time alone sets no trial\n"
    "limit. The task scheduler gives each round to the task whose tuning most reduces the\n"
    "estimated latency of the whole model, and a run ends early when every task has\n"
    "converged. --strategy picks the\n"
    "search: Ansor then Droplet after --droplet-after programs of a task (default 300), Ansor\n"
    "alone, or Droplet alone. Candidates are measured in worker processes: --repeat timed\n"
    "repeats (median) of at least --min-repeat-ms each, killed after --timeout seconds,\n"
    "outputs checked against the reference; --flush-weights evicts each candidate's weights\n"
    "(and the buffers prepared from them) from the caches before every timed call, as they are\n"
    "when a whole network runs, --flush-cache evicts everything. --log streams one JSON line\n"
    "per measurement; --curves writes a CSV tuning curve per task and curves.svg, and the\n"
    "whole model's estimated latency against time in model.csv and model.svg. `kiln\n"
    "compile FILE.kg --db FILE.db` then applies the best records. FILE may be an ONNX model:\n"
    "it goes through the graph pipeline first, as `kiln compile` does (--no-simplify: tune it\n"
    "as imported; --no-channels-last, --no-winograd: that pass off; compile it the same way;\n"
    "--dump-after PASS: the graph after PASS in .kg text on stderr).\n"
    "\n"
    "--target: \"llvm [-mcpu=...]\" (default: this machine) or \"cuda [-arch=sm_XX]\n"
    "[-fast-math]\", e.g. --target \"cuda -arch=sm_90\": GPU programs (blocks, threads, shared\n"
    "memory) timed on CUDA device 0 with CUDA events; -arch defaults to the device's. It needs\n"
    "a CUDA driver and device: without them kiln tune fails before it opens the database.\n"
    "Records are stored under the target, so `kiln compile --target cuda --db FILE.db`\n"
    "applies them.\n"
    "\n"
    "--queue URL: candidates are built and measured by `kiln worker`s on other machines\n"
    "(Redis Streams; see `kiln help worker`), the records written here as usual. The jobs go to\n"
    "the stream of the target and this machine's CPU model, or to --jobs-key KEY (what a\n"
    "worker prints); the run fails when no worker answers for --queue-timeout seconds\n"
    "(default 600) or Redis stays unreachable that long.\n"
    "\n"
    "Records cache: every record is also stored in the per-user records cache, which any\n"
    "model's tuning and compiling read: a task already tuned in another model starts from\n"
    "its cached records (copied into --db, not counted in --trials). --cache PATH moves it,\n"
    "--no-cache switches it off; else $KILN_CACHE (\"off\" or empty: none), else\n"
    "$XDG_CACHE_HOME/kiln/records.db, else ~/.cache/kiln/records.db. A cache that cannot be\n"
    "used is one warning; tuning goes on with --db alone.\n";

static volatile int          stop_flag;
static volatile sig_atomic_t stop_signal; /* the signal that stopped the run, for the exit code */

static void
on_signal(int sig)
{
    stop_signal = sig;
    stop_flag = 1;
}

struct prog_ui {
    bool quiet, tty;
};

static void
fmt_time(char *buf, size_t n, double s)
{
    if (s >= 3600)
        snprintf(buf, n, "%d:%02d:%02d", (int)(s / 3600), (int)fmod(s / 60, 60), (int)fmod(s, 60));
    else
        snprintf(buf, n, "%d:%02d", (int)(s / 60), (int)fmod(s, 60));
}

static void
progress(void *ud, const struct kiln_tune_progress *p)
{
    struct prog_ui *ui = ud;
    if (ui->quiet)
        return;
    char el[32], eta[32], lat[64];
    fmt_time(el, sizeof el, p->elapsed_s);
    fmt_time(eta, sizeof eta, p->eta_s);
    if (p->est_latency_s >= 1e-3)
        snprintf(lat, sizeof lat, "%.3f ms", p->est_latency_s * 1e3);
    else
        snprintf(lat, sizeof lat, "%.1f us", p->est_latency_s * 1e6);
    if (p->trials_total == UINT32_MAX) /* --time alone */
        fprintf(stderr, "%strials %u  latency %s  elapsed %s  left %s  |",
                ui->tty ? "\r\033[K" : "", p->trials_done, lat, el, eta);
    else
        fprintf(stderr, "%strials %u/%u  latency %s  elapsed %s  ETA %s  |",
                ui->tty ? "\r\033[K" : "", p->trials_done, p->trials_total, lat, el, eta);
    for (uint32_t i = 0; i < p->ntask && i < 8; i++) {
        const struct kiln_tune_task_status *t = &p->task[i];
        fprintf(stderr, " t%u %.1f GFLOP/s %s", i,
                t->best_s > 0 ? t->flops / t->best_s * 1e-9 : 0.0, t->phase);
    }
    if (p->ntask > 8)
        fprintf(stderr, " ... (%u tasks)", p->ntask);
    fputs(ui->tty ? "" : "\n", stderr);
    fflush(stderr);
}

/* The library's warnings (an unusable records cache), one line each. */
static void
warning(void *ud, const char *msg)
{
    struct prog_ui *ui = ud;
    fprintf(stderr, "%skiln tune: warning: %s\n", ui->tty && !ui->quiet ? "\r\033[K" : "", msg);
}

/* A duration: seconds, or a number followed by s, m or h (90s, 10m, 1.5h); positive. */
static bool
duration(const char *v, double *out)
{
    char *end;
    if (!((v[0] >= '0' && v[0] <= '9') || v[0] == '.')) /* no sign, space, inf or nan */
        return false;
    *out = strtod(v, &end);
    if (end == v || (end[0] && end[1]))
        return false;
    if (*end == 'm')
        *out *= 60;
    else if (*end == 'h')
        *out *= 3600;
    else if (*end && *end != 's')
        return false;
    return *out > 0 && *out < 1e9;
}

static bool
num(const char *cmd, const char *opt, const char *v, uint64_t *out)
{
    if (!cli_parse_u64(v, out)) {
        cli_usage_error(cmd, "%s needs a non-negative integer, got '%s'", opt, v);
        return false;
    }
    return true;
}

static bool
real(const char *cmd, const char *opt, const char *v, double *out)
{
    char *end;
    *out = strtod(v, &end);
    if (!*v || *end || !(*out > 0) || !isfinite(*out)) {
        cli_usage_error(cmd, "%s needs a positive number, got '%s'", opt, v);
        return false;
    }
    return true;
}

int
cmd_tune(int argc, char **argv)
{
    struct kiln_tune_params p = {0};
    struct prog_ui          ui = {false, isatty(2) != 0};
    struct cli_passes       passes = {.dump_after = -1};
    struct cli_cache_opt    cache = {0};
    const char             *in = NULL, *log_path = NULL;
    p.db_path = "kiln.db";
    static const char *const valued[] = {
        "--trials",  "--db",         "--target",        "--strategy",     "--droplet-after",
        "--batch",   "--population", "--seed",          "--repeat",       "--min-repeat-ms",
        "--timeout", "--threads",    "--build-workers", "--log",          "--curves",
        "--time",    "--queue",      "--jobs-key",      "--queue-timeout"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t    v = 0;
        double      d = 0;
        if (cli_is_help(a)) {
            fputs(usage, stdout);
            return 0;
        }
        int pr = cli_passes_arg("tune", argc, argv, &i, &passes);
        if (pr < 0)
            return -pr;
        if (pr)
            continue;
        if ((pr = cli_cache_arg("tune", argc, argv, &i, &cache)) < 0)
            return -pr;
        if (pr)
            continue;
        bool needs = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            needs |= !strcmp(a, valued[k]);
        if (needs && i + 1 >= argc)
            return cli_usage_error("tune", "%s needs a value", a);
        const char *val = needs ? argv[++i] : NULL;
        if (!strcmp(a, "--trials")) {
            if (!num("tune", a, val, &v) || !v || v > UINT32_MAX)
                return v ? 2 : cli_usage_error("tune", "--trials must be at least 1");
            p.trials = (uint32_t)v;
        } else if (!strcmp(a, "--db")) {
            p.db_path = val;
        } else if (!strcmp(a, "--target")) {
            p.target = val;
        } else if (!strcmp(a, "--strategy")) {
            if (strcmp(val, "ansor+droplet") && strcmp(val, "ansor") && strcmp(val, "droplet"))
                return cli_usage_error("tune",
                                       "unknown strategy '%s' (ansor+droplet, ansor, "
                                       "droplet)",
                                       val);
            p.strategy = val;
        } else if (!strcmp(a, "--droplet-after")) {
            if (!num("tune", a, val, &v) || v > UINT32_MAX)
                return 2;
            p.droplet_after = v ? (uint32_t)v : 1;
        } else if (!strcmp(a, "--batch") || !strcmp(a, "--population") || !strcmp(a, "--repeat")
                   || !strcmp(a, "--threads") || !strcmp(a, "--build-workers")) {
            if (!num("tune", a, val, &v) || !v || v > 1u << 20)
                return v ? 2 : cli_usage_error("tune", "%s must be at least 1", a);
            if (!strcmp(a, "--batch"))
                p.batch = (uint32_t)v;
            else if (!strcmp(a, "--population"))
                p.population = (uint32_t)v;
            else if (!strcmp(a, "--repeat"))
                p.repeat = (uint32_t)v;
            else if (!strcmp(a, "--threads"))
                p.threads = (int)v;
            else
                p.build_workers = (uint32_t)v;
        } else if (!strcmp(a, "--seed")) {
            if (!num("tune", a, val, &v))
                return 2;
            p.seed = v;
        } else if (!strcmp(a, "--min-repeat-ms")) {
            if (!real("tune", a, val, &d))
                return 2;
            p.min_repeat_ms = d;
        } else if (!strcmp(a, "--timeout")) {
            if (!real("tune", a, val, &d))
                return 2;
            p.run_timeout_s = d;
        } else if (!strcmp(a, "--time")) {
            if (!duration(val, &p.time_budget_s))
                return cli_usage_error("tune",
                                       "--time needs a duration such as 90s, 10m, 1h or plain "
                                       "seconds, got '%s'",
                                       val);
        } else if (!strcmp(a, "--log")) {
            log_path = val;
        } else if (!strcmp(a, "--curves")) {
            p.curve_dir = val;
        } else if (!strcmp(a, "--flush-cache")) {
            p.flush_cache = 1;
        } else if (!strcmp(a, "--flush-weights")) {
            p.flush_weights = 1;
        } else if (!strcmp(a, "--queue")) {
            p.queue = val;
        } else if (!strcmp(a, "--jobs-key")) {
            p.queue_key = val;
        } else if (!strcmp(a, "--queue-timeout")) {
            if (!real("tune", a, val, &d))
                return 2;
            p.queue_timeout_s = d;
        } else if (!strcmp(a, "--quiet")) {
            ui.quiet = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("tune", "unknown option %s", a);
        } else if (!in) {
            in = a;
        } else {
            return cli_usage_error("tune", "more than one input file (%s, %s)", in, a);
        }
    }
    if (!in)
        return cli_usage_error("tune", "missing FILE.kg");
    if (p.flush_cache && p.flush_weights)
        return cli_usage_error("tune", "--flush-cache and --flush-weights exclude each other");
    kiln_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    const double *const *weights = NULL;
    struct kiln_graph   *g = cli_load_model(ctx, in, &passes, &weights);
    if (g && !cli_optimize(ctx, "tune", in, &passes, &g, &weights, !ui.quiet))
        g = NULL;
    if (!g) {
        kiln_ctx_free(ctx);
        return 1;
    }
    FILE *log = NULL;
    if (log_path && !(log = fopen(log_path, "a"))) {
        fprintf(stderr, "kiln: cannot write %s\n", log_path);
        kiln_ctx_free(ctx);
        return 1;
    }
    p.log = log;
    p.progress = progress;
    p.progress_ud = &ui;
    p.warning = warning;
    p.cache_path = cli_records_cache(&cache);
    if (p.cache_path && !cli_records_cache_mkdir(p.cache_path)) {
        fprintf(stderr,
                "kiln tune: warning: records cache %s: cannot create its directory: %s; "
                "tuning goes on with the records database only\n",
                p.cache_path, strerror(errno));
        p.cache_path = NULL;
    }
    p.stop = &stop_flag;
    /* SIGHUP too: a closed terminal must not kill the run mid-measurement, leaving its
     * temporary directories behind */
    struct sigaction sa = {0}, old_int, old_term, old_hup;
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    int rc = kiln_graph_tune(ctx, g, &p) == KILN_OK ? 0 : 1;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    if (!ui.quiet && ui.tty)
        fputc('\n', stderr);
    if (rc)
        cli_report(ctx);
    else if (stop_flag)
        fprintf(stderr, "kiln tune: stopped; every finished measurement is in %s\n", p.db_path);
    if (log)
        fclose(log);
    kiln_ctx_free(ctx);
    return rc ? rc : stop_flag ? 128 + (stop_signal == SIGHUP ? SIGHUP : SIGINT) : 0;
}
