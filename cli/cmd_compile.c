/* cli/cmd_compile.c -- `kiln compile FILE.kg|MODEL.onnx -o OUT.so [--schedule S.json | --db
 * FILE.db ...] [--untuned predict|serial] [--cost-model FILE] [--seed N] [--target T]
 * [--print-loops] [--print-flat] [--no-simplify] [--no-memplan] ...`: parses the graph (or
 * imports an ONNX model and runs the graph pipeline on it), reads the schedule (or makes one:
 * the best tuning records, then schedules predicted by the cost model, kiln_graph_schedule),
 * and writes a shared object (or an object file when OUT ends in .o) through the public compile
 * API. An ONNX model's weights are built into the module (CPU targets) unless
 * --external-weights; --save-weights writes them as .npy files. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln compile FILE.kg|MODEL.onnx -o OUT.so [--schedule S.json | --db FILE.db... |\n"
    "                    --no-db] [--cache PATH | --no-cache] [--untuned predict|serial]\n"
    "                    [--cost-model FILE] [--seed N] [--target T] [--name NAME]\n"
    "                    [--print-loops | --print-flat]\n"
    "                    [--external-weights] [--save-weights DIR] [--no-simplify]\n"
    "                    [--no-channels-last]\n"
    "                    [--no-winograd] [--dump-after PASS] [--no-memplan]\n"
    "\n"
    "Lowers the graph under the schedule (default: the default schedule, see docs/schedule.md)\n"
    "and compiles it for the target (default: this machine, \"llvm\"; e.g.\n"
    "\"llvm -mcpu=sapphirerapids\", \"llvm -mattr=+avx2,-avx512f\"). OUT ending in .o gives an\n"
    "object file, anything else a shared object with the ABI of include/kiln_abi.h.\n"
    "--target \"cuda [-arch=sm_XX] [-fast-math]\": OUT.cu is the CUDA C, OUT.ptx the PTX\n"
    "(NVRTC; -fast-math: approximate division and math functions, denormals flushed; off by\n"
    "default), anything else a shared object taking tensors in GPU memory.\n"
    "--print-loops prints the lowered loop nest instead of compiling; --print-flat prints it\n"
    "after storage flattening and simplification.\n"
    "An ONNX model's weights (initializers) are built into the shared object, each in its\n"
    "dtype, so the module takes only the model's inputs (and outputs); the metadata lists\n"
    "them under \"embedded\". --external-weights keeps them as arguments of the module (role\n"
    "\"weight\", passed in every call), for very large models. The cuda target always takes\n"
    "them as arguments (a note on stderr says so). --save-weights DIR writes every weight to\n"
    "DIR/NAME.npy (float64), NAME as in the metadata.\n"
    "Without --schedule, every task takes its best record from the tuning records databases\n"
    "(--db FILE.db, repeatable; default kiln.db when it exists; --no-db ignores it) and the\n"
    "per-user records cache (see kiln tune; --no-cache ignores it); a task without a record\n"
    "gets a schedule predicted by the cost model (--untuned predict, the default: sketches\n"
    "sampled and evolved, ranked by the model, nothing measured; --seed N, default 1, picks\n"
    "the draws), from --cost-model FILE (kiln costmodel) or the model shipped with kiln.\n"
    "--untuned serial keeps the serial default schedule for them (loops in definition order).\n"
    "A model that cannot be read is reported and its tasks keep the serial default. One line\n"
    "on stderr says how many tasks came from records, were predicted, or are serial.\n"
    "An ONNX model goes through the graph pipeline first (kiln_graph_optimize; one line on\n"
    "stderr says what changed): simplify (constants and batch norms folded, dead and identity\n"
    "statements removed), channels-last (its activations go NHWC), winograd (3x3 stride-1\n"
    "convolutions with at least 49 output tiles of 2x2 become Winograd F(2x2, 3x3), F(4x4,\n"
    "3x3) from 56x56). --no-simplify compiles it as imported (no graph pass);\n"
    "--no-channels-last and --no-winograd switch that pass off (tune and compile with the\n"
    "same choice, so the records match the tasks). --dump-after PASS prints the graph after\n"
    "PASS in .kg text on stderr. --save-weights writes the weights of the graph compiled.\n"
    "Intermediates computed at root share one workspace by live range (memory planning);\n"
    "--no-memplan gives each its own allocation (for A/B checks). After compiling, a line on\n"
    "stderr reports the memory of one call: weights, activations planned (and unplanned), peak.\n";

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Writes each weight with known values to DIR/NAME.npy. */
static int
save_weights(const struct kiln_graph *g, const double *const *w, const char *dir)
{
    if (!cli_mkdirs(dir)) {
        fprintf(stderr, "kiln: cannot create %s\n", dir);
        return 1;
    }
    for (uint32_t i = 0; w && i < kiln_graph_nargs(g); i++) {
        if (!w[i])
            continue;
        struct kiln_tensor_info t;
        char                    path[4096], err[256];
        kiln_graph_tensor(g, kiln_graph_arg(g, i), &t);
        snprintf(path, sizeof path, "%s/%s.npy", dir, t.name);
        if (!npy_write_f64(path, t.ndim, t.shape, w[i], err, sizeof err)) {
            fprintf(stderr, "kiln: %s: %s\n", path, err);
            return 1;
        }
    }
    return 0;
}

/* The weights to build into the module (those with values), or NULL, with a line on stderr
 * saying what happens to them. */
static const double *const *
embedded_weights(const struct kiln_graph *g, const double *const *w, const char *target,
                 const char *out)
{
    uint32_t n = 0;
    double   bytes = 0;
    for (uint32_t i = 0; w && i < kiln_graph_nargs(g); i++) {
        struct kiln_tensor_info t;
        kiln_graph_tensor(g, kiln_graph_arg(g, i), &t);
        if (!w[i] || t.kind != KILN_TENSOR_WEIGHT)
            continue;
        double numel = 1;
        for (int d = 0; d < t.ndim; d++)
            numel *= (double)t.shape[d];
        bytes += numel * (double)kiln_dtype_size(t.dtype);
        n++;
    }
    if (!n)
        return NULL;
    if (target && !strncmp(target, "cuda", 4)) {
        fprintf(stderr,
                "kiln compile: note: the cuda target does not embed weights: %s takes the %u "
                "weights as arguments (--save-weights DIR writes them)\n",
                out, n);
        return NULL;
    }
    fprintf(stderr,
            "kiln compile: %u weights (%.1f MB) built into %s; it takes only the inputs "
            "(--external-weights keeps them as arguments)\n",
            n, bytes * 1e-6, out);
    return w;
}

int
cmd_compile(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *sched_path = NULL, *target = NULL, *name = NULL,
               *wdir = NULL, *cost_model = NULL;
    const char          *db[CLI_MAX_DB + 2]; /* --db files, then kiln.db or the cache */
    uint32_t             ndb = 0;
    int                  print = 0, no_db = 0, no_memplan = 0, untuned = KILN_UNTUNED_PREDICT;
    int                  external = 0;
    uint64_t             seed = 1;
    struct cli_passes    passes = {.dump_after = -1};
    struct cli_cache_opt cache = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 0;
        }
        if ((!strcmp(a, "-o") || !strcmp(a, "--schedule") || !strcmp(a, "--target")
             || !strcmp(a, "--name") || !strcmp(a, "--save-weights") || !strcmp(a, "--db")
             || !strcmp(a, "--untuned") || !strcmp(a, "--cost-model") || !strcmp(a, "--seed"))
            && i + 1 >= argc) {
            fprintf(stderr, "kiln compile: %s needs a value\n%s", a, usage);
            return 2;
        }
        int pr = cli_passes_arg("compile", argc, argv, &i, &passes);
        if (pr < 0)
            return -pr;
        if (pr)
            continue;
        if ((pr = cli_cache_arg("compile", argc, argv, &i, &cache)) < 0)
            return -pr;
        if (pr)
            continue;
        if (!strcmp(a, "-o"))
            out = argv[++i];
        else if (!strcmp(a, "--schedule"))
            sched_path = argv[++i];
        else if (!strcmp(a, "--target"))
            target = argv[++i];
        else if (!strcmp(a, "--name"))
            name = argv[++i];
        else if (!strcmp(a, "--db")) {
            if (ndb == CLI_MAX_DB) {
                fprintf(stderr, "kiln compile: at most %d --db files\n", CLI_MAX_DB);
                return 2;
            }
            db[ndb++] = argv[++i];
        } else if (!strcmp(a, "--cost-model"))
            cost_model = argv[++i];
        else if (!strcmp(a, "--untuned")) {
            const char *v = argv[++i];
            if (strcmp(v, "predict") && strcmp(v, "serial")) {
                fprintf(stderr, "kiln compile: --untuned is predict or serial, not '%s'\n%s", v,
                        usage);
                return 2;
            }
            untuned = strcmp(v, "serial") ? KILN_UNTUNED_PREDICT : KILN_UNTUNED_SERIAL;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_u64(argv[++i], &seed)) {
                fprintf(stderr, "kiln compile: --seed needs a non-negative integer, not '%s'\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--no-db"))
            no_db = 1;
        else if (!strcmp(a, "--no-memplan"))
            no_memplan = 1;
        else if (!strcmp(a, "--external-weights"))
            external = 1;
        else if (!strcmp(a, "--save-weights"))
            wdir = argv[++i];
        else if (!strcmp(a, "--print-loops"))
            print = 1;
        else if (!strcmp(a, "--print-flat"))
            print = 2;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kiln compile: unknown option %s\n%s", a, usage);
            return 2;
        } else if (!in)
            in = a;
        else {
            fprintf(stderr, "kiln compile: more than one input file (%s, %s)\n%s", in, a, usage);
            return 2;
        }
    }
    if (!in || (!out && !print)) {
        fprintf(stderr, "kiln compile: %s\n%s", in ? "missing -o OUT" : "missing FILE.kg", usage);
        return 2;
    }
    if (sched_path && ndb) {
        fprintf(stderr, "kiln compile: --schedule and --db are exclusive\n%s", usage);
        return 2;
    }
    if (no_db)
        ndb = 0;
    if (!ndb && !sched_path && !no_db && access("kiln.db", R_OK) == 0) {
        db[ndb++] = "kiln.db";
        fprintf(stderr, "kiln compile: using the records in ./kiln.db (--no-db ignores them)\n");
    }
    const char *cache_path = cli_records_cache(&cache);
    if (!sched_path && cache_path && access(cache_path, R_OK) == 0)
        db[ndb++] = cache_path;
    size_t len, slen = 0;
    char  *text = cli_read_file(in, &len);
    if (!text) {
        fprintf(stderr, "kiln: cannot read %s\n", in);
        return 1;
    }
    char *sched = NULL;
    if (sched_path && !(sched = cli_read_file(sched_path, &slen))) {
        fprintf(stderr, "kiln: cannot read schedule %s\n", sched_path);
        free(text);
        return 1;
    }
    kiln_ctx                   *ctx = cli_ctx_new();
    struct kiln_graph          *g;
    int                         rc = 0;
    struct kiln_compile_options opt = {target, sched, slen, name};
    struct kiln_schedule_params sp = {target, db, ndb, untuned, cost_model, seed};
    struct kiln_schedule_report srep = {0};
    double                      sched_t0 = 0, sched_s = 0;
    const char                 *loops;
    const double *const        *weights = NULL;
    struct kiln_memory_report   mr = {0};
    if (ctx)
        kiln_ctx_set_memplan(ctx, !no_memplan);
    if (!ctx) {
        fprintf(stderr, "kiln: out of memory\n");
        rc = 1;
    } else if (cli_import(ctx, text, len, in, &passes, &g, &weights) != KILN_OK) {
        rc = cli_report(ctx);
    } else if (!cli_optimize(ctx, "compile", in, &passes, &g, &weights, true)) {
        rc = 1;
    } else if (wdir && (rc = save_weights(g, weights, wdir)) != 0) {
    } else if (!sched_path && (sched_t0 = now_s()) > 0
               && kiln_graph_schedule(ctx, g, &sp, &opt.schedule_json, &srep) != KILN_OK) {
        rc = cli_report(ctx);
    } else {
        sched_s = sched_path ? 0 : now_s() - sched_t0;
        if (srep.warning)
            fprintf(stderr, "kiln compile: warning: %s\n", srep.warning);
        for (uint32_t i = 0; !sched_path && i < srep.ntasks; i++) {
            const struct kiln_tuned_task *t = &srep.tasks[i];
            if (!t->skipped)
                continue;
            fprintf(stderr, "kiln compile: task %s: %u better record%s skipped (%s); ", t->key,
                    t->skipped, t->skipped == 1 ? "" : "s", t->skip_why);
            if (t->record)
                fprintf(stderr, "using record %lld (%.2f us)%s\n", (long long)t->record,
                        t->time_s * 1e6, t->tuned ? "" : " where it fits");
            else
                fprintf(stderr, "none fits\n");
        }
        if (!sched_path)
            opt.schedule_len = strlen(opt.schedule_json);
        const double *const *embed =
            external || print ? NULL : embedded_weights(g, weights, target, out);
        if (print) {
            if (kiln_graph_lower_print(ctx, g, &opt, print == 2, &loops, NULL) != KILN_OK)
                rc = cli_report(ctx);
            else
                fputs(loops, stdout);
        } else if (kiln_graph_compile_weights(ctx, g, &opt, embed, out, &mr) != KILN_OK) {
            if (sched_path && kiln_ctx_error(ctx)
                && !strncmp(kiln_ctx_error(ctx)->msg, "schedule", 8)) {
                fprintf(stderr, "kiln: %s: %s\n", sched_path, kiln_ctx_error(ctx)->msg);
                rc = 1;
            } else {
                rc = cli_report(ctx);
            }
        }
    }
    if (!rc && !sched_path && !print) {
        fprintf(stderr, "kiln compile: %u of %u tasks tuned (", srep.from_records, srep.ntasks);
        for (uint32_t i = 0; i < ndb; i++)
            fprintf(stderr, "%s%s", i ? ", " : "records from ", db[i]);
        fprintf(stderr, "%s), %u predicted (cost model: %s), %u serial default; %.1f s\n",
                ndb ? "" : "no records", srep.predicted, srep.model, srep.serial, sched_s);
    }
    if (!rc && !print) {
        char act[96];
        if (no_memplan)
            snprintf(act, sizeof act, "%.1f MB unplanned (--no-memplan)",
                     (double)mr.workspace * 1e-6);
        else
            snprintf(act, sizeof act, "%.1f MB planned (%.1f MB unplanned)",
                     (double)mr.workspace * 1e-6, (double)mr.workspace_unplanned * 1e-6);
        fprintf(stderr,
                "memory: weights %.1f MB, inputs %.1f MB, outputs %.1f MB, activations %s, "
                "peak %.1f MB\n",
                (double)mr.weights * 1e-6, (double)mr.inputs * 1e-6, (double)mr.outputs * 1e-6, act,
                (double)mr.peak * 1e-6);
    }
    kiln_ctx_free(ctx);
    free(sched);
    free(text);
    return rc;
}
