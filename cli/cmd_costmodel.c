/* cli/cmd_costmodel.c -- `kiln costmodel train DB... -o FILE` trains a cost model on the records
 * of records databases; `kiln costmodel eval FILE DB...` measures how well a model ranks the
 * measured programs of each workload. The work is in tuner/costmodel.c. */
#include "cli.h"

#include "../tuner/tuner.h"

#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln costmodel train DB... -o FILE [--target T] [--seed N] [--holdout P]\n"
    "       kiln costmodel eval FILE DB... [--target T] [--holdout P] [--workloads]\n"
    "\n"
    "train: trains the tuner's cost model (pack-sum gradient-boosted trees) on every record of\n"
    "the records databases whose workload graph they hold (kiln tune stores it): each record's\n"
    "schedule is lowered on the graph and featurised for the record's target, labelled best\n"
    "time of its workload / its time (0 for a failed one), and the model is written to FILE.\n"
    "eval: for each workload with at least two valid measured schedules, how well the model\n"
    "FILE ranks them: the share of pairs it orders right (0.5 is chance), and the time of its\n"
    "top pick (and of the best of its top 5) over the best measured time, against a random\n"
    "pick's (the mean time); --workloads prints every workload's figures.\n"
    "--target T: only records of target T (default: every CPU target). --holdout P: train\n"
    "leaves out P% of the workloads (chosen by a hash of their keys) and eval takes only those,\n"
    "to measure how the model does on workloads it has not seen. The databases are only read.\n";

static int
parse_u64(const char *cmd, const char *opt, const char *v, uint64_t max, uint64_t *out)
{
    char              *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (!*v || *end || v[0] == '-' || x > max)
        return cli_usage_error(cmd, "%s needs a number up to %llu, got '%s'", opt,
                               (unsigned long long)max, v);
    *out = x;
    return 0;
}

int
cmd_costmodel(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("costmodel", "missing 'train' or 'eval'");
    if (cli_is_help(argv[1])) {
        fputs(usage, stdout);
        return 0;
    }
    bool train = !strcmp(argv[1], "train");
    if (!train && strcmp(argv[1], "eval"))
        return cli_usage_error("costmodel", "unknown action '%s' (train or eval)", argv[1]);
    const char                *cmd = train ? "costmodel train" : "costmodel eval";
    const char                *out = NULL, *model = NULL;
    const char               **dbs = calloc((size_t)argc, sizeof *dbs);
    uint32_t                   ndb = 0;
    bool                       list = false;
    struct kiln_costmodel_opts o;
    kiln_costmodel_opts_default(&o);
    if (!dbs) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    int rc = -1;
    for (int i = 2; i < argc && rc < 0; i++) {
        const char *a = argv[i];
        uint64_t    v;
        bool        has_value = i + 1 < argc;
        if (cli_is_help(a)) {
            fputs(usage, stdout);
            rc = 0;
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--target") || !strcmp(a, "--seed")
                    || !strcmp(a, "--holdout"))
                   && !has_value) {
            rc = cli_usage_error(cmd, "%s needs a value", a);
        } else if (train && !strcmp(a, "-o")) {
            out = argv[++i];
        } else if (!strcmp(a, "--target")) {
            o.target = argv[++i];
        } else if (train && !strcmp(a, "--seed")) {
            if ((rc = parse_u64(cmd, a, argv[++i], UINT64_MAX, &o.seed)) == 0)
                rc = -1;
        } else if (!strcmp(a, "--holdout")) {
            if ((rc = parse_u64(cmd, a, argv[++i], 99, &v)) == 0) {
                o.holdout = (uint32_t)v;
                rc = -1;
            }
        } else if (!train && !strcmp(a, "--workloads")) {
            list = true;
        } else if (a[0] == '-' && a[1]) {
            rc = cli_usage_error(cmd, "unknown option %s", a);
        } else if (!train && !model) {
            model = a;
        } else {
            dbs[ndb++] = a;
        }
    }
    if (rc < 0 && train && !out)
        rc = cli_usage_error(cmd, "missing -o FILE");
    if (rc < 0 && !train && !model)
        rc = cli_usage_error(cmd, "missing the model FILE");
    if (rc < 0 && !ndb)
        rc = cli_usage_error(cmd, "missing a records database");
    kiln_ctx *ctx = rc < 0 ? cli_ctx_new() : NULL;
    if (rc < 0 && !ctx) {
        fprintf(stderr, "kiln: out of memory\n");
        rc = 1;
    }
    if (rc >= 0) {
        free(dbs);
        return rc;
    }
    struct kiln_cost_model *m = NULL;
    if (train) {
        struct kiln_costmodel_train_report r;
        rc = kiln_costmodel_train(ctx, dbs, ndb, &o, &m, &r) == KILN_OK
                     && kiln_costmodel_save_file(ctx, m, out) == KILN_OK
                 ? 0
                 : cli_report(ctx);
        if (!rc) {
            printf("trained on %u programs (%u failed, labelled 0; %u rows) of %u workloads%s\n",
                   r.programs, r.errors, r.rows, r.workloads,
                   o.holdout ? " (held-out ones left out)" : "");
            if (r.skipped)
                printf("skipped %u records whose schedule does not lower on its graph\n",
                       r.skipped);
            printf("training loss %.4f (RMSE weighted by throughput), %u rounds\nwrote %s\n",
                   r.loss, r.rounds, out);
        }
    } else {
        struct kiln_costmodel_eval_report r;
        o.held_out = o.holdout > 0;
        rc = kiln_costmodel_load_file(ctx, model, &m) == KILN_OK
                     && kiln_costmodel_eval(ctx, m, dbs, ndb, &o, &r) == KILN_OK
                 ? 0
                 : cli_report(ctx);
        if (!rc && list) {
            printf("%-16s  %-16s  %8s  %8s  %8s  %8s  %8s\n", "workload", "kind", "programs",
                   "pairs ok", "top-1", "top-5", "random");
            for (uint32_t i = 0; i < r.workloads; i++)
                printf("%-16s  %-16s  %8u  %8.3f  %7.2fx  %7.2fx  %7.2fx\n", r.w[i].workload,
                       r.w[i].kind, r.w[i].programs, r.w[i].pair_acc, r.w[i].regret, r.w[i].regret5,
                       r.w[i].random_regret);
        }
        if (!rc)
            printf("%u workloads%s, %u programs: pairwise ranking accuracy %.3f (chance 0.5); "
                   "top-1 pick %.2fx the best time, top-5 %.2fx, random pick %.2fx "
                   "(geometric means)\n",
                   r.workloads, o.holdout ? " (held out)" : "", r.programs, r.pair_acc, r.regret,
                   r.regret5, r.random_regret);
    }
    kiln_cm_free(m);
    kiln_ctx_free(ctx);
    free(dbs);
    return rc;
}
