/* cli/cmd_worker.c -- `kiln worker --queue redis://[:PASSWORD@]HOST:PORT/NAME [--target T]
 * [--jobs-key KEY] [--claim-after S] [--max-jobs N]`: measures the candidates `kiln tune
 * --queue` sends (kiln_worker_serve, tuner/worker.c) until SIGINT or SIGTERM. */
#include "cli.h"

#include "../tuner/queue.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln worker --queue redis://[[USER]:PASSWORD@]HOST:PORT/NAME [--target T]\n"
    "                   [--jobs-key KEY] [--claim-after S] [--max-jobs N]\n"
    "\n"
    "Builds and measures the candidates that `kiln tune --queue URL` sends through Redis\n"
    "Streams, each the way local tuning does (a build process, then a fresh runner process,\n"
    "with the job's timeouts; the inputs and the reference come from the task graph and the\n"
    "seed in the job), and sends back times, errors and durations; the tuner writes the\n"
    "records. A worker serves the stream of its target (--target, default this machine) and\n"
    "CPU model, which it prints on start; --jobs-key KEY serves another one. Jobs that a dead\n"
    "worker left pending longer than --claim-after seconds (default 300: more than any job\n"
    "takes) are claimed; one handed out more than twice is answered as a crash. Malformed\n"
    "jobs are answered with an error. Stops on SIGINT or SIGTERM after the job in flight, or\n"
    "after --max-jobs jobs. Redis unreachable: retried, with a message on stderr.\n"
    "TLS (rediss://) is not supported by this build's hiredis; a password is (AUTH).\n";

static volatile int stop_flag;

static void
on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

int
cmd_worker(int argc, char **argv)
{
    struct kiln_worker_opts o = {0};
    o.claim_after_s = 300;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(usage, stdout);
            printf("\nRedis support: %s\n", kiln_queue_support());
            return 0;
        }
        bool valued = !strcmp(a, "--queue") || !strcmp(a, "--target") || !strcmp(a, "--jobs-key")
                      || !strcmp(a, "--claim-after") || !strcmp(a, "--max-jobs");
        if (!valued)
            return cli_usage_error("worker", "unknown option %s", a);
        if (i + 1 >= argc)
            return cli_usage_error("worker", "%s needs a value", a);
        const char *v = argv[++i];
        char       *end;
        if (!strcmp(a, "--queue")) {
            o.url = v;
        } else if (!strcmp(a, "--target")) {
            o.target = v;
        } else if (!strcmp(a, "--jobs-key")) {
            o.jobs_key = v;
        } else if (!strcmp(a, "--claim-after")) {
            o.claim_after_s = strtod(v, &end);
            if (!*v || *end || !(o.claim_after_s > 0) || o.claim_after_s > 86400)
                return cli_usage_error("worker",
                                       "--claim-after needs seconds from 0 to 86400, "
                                       "got '%s'",
                                       v);
        } else {
            uint64_t n;
            if (!cli_parse_u64(v, &n) || n == 0 || n > UINT32_MAX)
                return cli_usage_error("worker", "--max-jobs needs a positive integer, got '%s'",
                                       v);
            o.max_jobs = (uint32_t)n;
        }
    }
    if (!o.url)
        return cli_usage_error("worker", "missing --queue URL");
    kiln_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    o.stop = &stop_flag;
    int rc = kiln_worker_serve(ctx, &o) == KILN_OK ? 0 : cli_report(ctx);
    kiln_ctx_free(ctx);
    return rc;
}
