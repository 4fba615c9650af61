/* cli/cmd_eval.c -- `kiln eval FILE.kg [--seed S] [--inputs DIR] [--out DIR] [--save-inputs]`:
 * runs the reference interpreter (kiln_graph_eval, double precision) on a graph and prints a
 * checksum of every output.
 *
 * Inputs are either drawn at random or read from DIR/NAME.npy for every argument. Random
 * inputs come from one xoshiro256** stream seeded with S (default 0), argument by argument in
 * declaration order, elements in row-major order: float elements uniform in [-1, 1) rounded to
 * the argument's dtype, integers uniform in [-4, 4] (unsigned ones [0, 8]), booleans 0 or 1 --
 * the same stream and
 * draws as `kiln run`, so both see the same inputs for the same seed. A .npy file must have
 * the argument's shape; any supported .npy dtype is accepted and converted: to a float
 * argument by rounding to its dtype, to an integer or bool argument only when every value is
 * integral and in the dtype's range (bool: 0 or 1).
 *
 * For each output one line: name, dtype and shape, the sum and the L2 norm of the elements and
 * a 64-bit hash of their values (as doubles, -0 hashed as 0 and every NaN alike), so two runs
 * can be compared at a glance. --out DIR writes every output as DIR/NAME.npy in float64
 * (integer and bool outputs hold integral values); --save-inputs also writes the arguments
 * there (integer and bool ones in their own dtype, float ones as float64), so a random run can
 * be replayed with --inputs DIR. */
#include "cli.h"

#include "../ir/ir.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln eval FILE.kg|MODEL.onnx [--seed S] [--inputs DIR] [--out DIR] [--save-inputs]\n"
    "                 [--no-simplify] [--no-channels-last] [--no-winograd]\n"
    "                 [--dump-after PASS] [-v]\n"
    "\n"
    "Evaluates the graph with the reference interpreter (double precision) and prints each\n"
    "output's name, dtype, shape, sum, L2 norm and a 64-bit hash of its values. An ONNX\n"
    "model's weights are its initializers; only its inputs are random or read from --inputs.\n"
    "An ONNX model goes through the graph pipeline first, as `kiln compile` does (its\n"
    "arguments are then the resulting graph's); --no-simplify evaluates it as imported, -v\n"
    "prints what changed.\n"
    "\n"
    "  --seed S       seed of the random inputs (default 0): floats uniform in [-1, 1)\n"
    "                 rounded to their dtype, integers uniform in [-4, 4] (unsigned\n"
    "                 [0, 8]), bools 0 or 1\n"
    "  --inputs DIR   read every argument from DIR/NAME.npy instead (C order; dtypes <f2\n"
    "                 <f4 <f8 |i1 <i4 <i8 |u1 |b1; the shape must match)\n"
    "  --out DIR      write every output to DIR/NAME.npy as float64 (DIR is created)\n"
    "  --save-inputs  with --out: also write the arguments to DIR/NAME.npy\n"
    "  --no-simplify  evaluate an ONNX model as imported (no graph pass)\n"
    "  --no-channels-last, --no-winograd\n"
    "                 switch that graph pass off\n"
    "  --dump-after PASS\n"
    "                 print the graph after PASS (simplify, channels-last, winograd) in .kg\n"
    "                 text on stderr\n"
    "  -v             print the graph pipeline's report on stderr\n";

struct opts {
    const char       *path, *inputs, *out;
    uint64_t          seed;
    bool              save_inputs, verbose;
    struct cli_passes passes;
};

static int
parse_opts(int argc, char **argv, struct opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(usage, stdout);
            return 0;
        }
        int pr = cli_passes_arg("eval", argc, argv, &i, &o->passes);
        if (pr < 0)
            return -pr;
        if (pr)
            continue;
        bool takes = !strcmp(a, "--seed") || !strcmp(a, "--inputs") || !strcmp(a, "--out");
        if (takes && i + 1 >= argc)
            return cli_usage_error("eval", "%s needs a value", a);
        if (!strcmp(a, "--seed")) {
            if (!cli_parse_u64(argv[++i], &o->seed))
                return cli_usage_error("eval", "--seed needs a non-negative integer, not '%s'",
                                       argv[i]);
        } else if (!strcmp(a, "--inputs")) {
            o->inputs = argv[++i];
        } else if (!strcmp(a, "--out")) {
            o->out = argv[++i];
        } else if (!strcmp(a, "--save-inputs")) {
            o->save_inputs = true;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->verbose = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("eval", "unknown option '%s'", a);
        } else if (o->path) {
            return cli_usage_error("eval", "more than one file (%s, %s)", o->path, a);
        } else {
            o->path = a;
        }
    }
    if (!o->path)
        return cli_usage_error("eval", "missing FILE.kg");
    if (o->save_inputs && !o->out)
        return cli_usage_error("eval", "--save-inputs needs --out DIR");
    return -1; /* go on */
}

/* DIR/NAME.npy, malloc'ed. */
static char *
npy_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 6;
    char  *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s.npy", dir, name);
    return p;
}

static bool
int_range(enum kiln_dtype dt, double *lo, double *hi)
{
    switch (dt) {
    case KILN_DTYPE_I8:
        *lo = -128, *hi = 127;
        return true;
    case KILN_DTYPE_I32:
        *lo = -2147483648.0, *hi = 2147483647.0;
        return true;
    case KILN_DTYPE_I64: /* the doubles strictly inside +-2^63 */
        *lo = -9223372036854775808.0, *hi = 9223372036854774784.0;
        return true;
    case KILN_DTYPE_BOOL:
        *lo = 0, *hi = 1;
        return true;
    case KILN_DTYPE_I16:
        *lo = -32768, *hi = 32767;
        return true;
    case KILN_DTYPE_U8:
        *lo = 0, *hi = 255;
        return true;
    case KILN_DTYPE_U16:
        *lo = 0, *hi = 65535;
        return true;
    case KILN_DTYPE_U32:
        *lo = 0, *hi = 4294967295.0;
        return true;
    case KILN_DTYPE_U64: /* the doubles below 2^64 */
        *lo = 0, *hi = 18446744073709549568.0;
        return true;
    case KILN_DTYPE_F32:
    case KILN_DTYPE_F16:
    case KILN_DTYPE_BF16:
    case KILN_DTYPE_F64:
    case KILN_DTYPE_COUNT:
        break;
    }
    return false;
}

/* Checks that array a (read from path) fits argument t and converts it into vals; prints the
 * problem otherwise. */
static bool
convert_arg(const char *path, const struct npy_array *a, const struct kiln_tensor_info *t,
            double *vals, int64_t numel)
{
    char have[256], want[256];
    bool same = a->ndim == t->ndim;
    for (int d = 0; same && d < a->ndim; d++)
        same = a->shape[d] == t->shape[d];
    if (!same) {
        fprintf(stderr, "kiln: %s: shape %s does not match argument %s: %s%s\n", path,
                cli_shape(have, sizeof have, a->ndim, a->shape), t->name, kiln_dtype_name(t->dtype),
                cli_shape(want, sizeof want, t->ndim, t->shape));
        return false;
    }
    double lo, hi;
    bool   is_int = int_range(t->dtype, &lo, &hi);
    for (int64_t i = 0; i < numel; i++) {
        double v = a->data[i];
        if (is_int && !(v == trunc(v) && v >= lo && v <= hi)) {
            fprintf(stderr, "kiln: %s: element %lld is %.17g, which argument %s (%s) cannot hold\n",
                    path, (long long)i, v, t->name, kiln_dtype_name(t->dtype));
            return false;
        }
        vals[i] = is_int ? v : kiln_scalar_round(v, t->dtype);
    }
    return true;
}

/* Reads argument t from DIR/NAME.npy into vals (numel doubles); prints the error. */
static bool
read_arg(const char *dir, const struct kiln_tensor_info *t, double *vals, int64_t numel)
{
    char            *path = npy_path(dir, t->name);
    char             err[300];
    struct npy_array a;
    bool             ok = false;
    if (!path) {
        fprintf(stderr, "kiln: out of memory\n");
        return false;
    }
    if (!npy_read(path, &a, err, sizeof err))
        fprintf(stderr, "kiln: %s: %s\n", path, err);
    else
        ok = convert_arg(path, &a, t, vals, numel);
    free(a.data);
    free(path);
    return ok;
}

static void
fill_random(struct kiln_rng *r, enum kiln_dtype dt, double *vals, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++) {
        if (kiln_dtype_is_float(dt))
            vals[i] = kiln_scalar_round(2 * kiln_rng_uniform(r) - 1, dt);
        else if (dt == KILN_DTYPE_BOOL)
            vals[i] = (double)kiln_rng_below(r, 2);
        else /* unsigned dtypes: [0, 8] */
            vals[i] = (double)kiln_rng_below(r, 9) - (kiln_dtype_is_unsigned(dt) ? 0 : 4);
    }
}

static bool
write_npy(const char *dir, const struct kiln_tensor_info *t, const double *vals, enum kiln_dtype dt)
{
    char *path = npy_path(dir, t->name);
    char  err[300];
    if (!path) {
        fprintf(stderr, "kiln: out of memory\n");
        return false;
    }
    bool ok = npy_write(path, t->ndim, t->shape, vals, dt, err, sizeof err);
    if (!ok)
        fprintf(stderr, "kiln: %s: %s\n", path, err);
    free(path);
    return ok;
}

static void
print_summary(const struct kiln_tensor_info *t, const double *v, int64_t numel)
{
    double   sum = 0, sq = 0;
    uint64_t h = KILN_HASH_SEED;
    for (int64_t i = 0; i < numel; i++) {
        double x = v[i];
        sum += x;
        sq += x * x;
        if (x == 0)
            x = 0; /* -0 hashes as 0 */
        if (isnan(x))
            x = NAN;
        uint64_t bits;
        memcpy(&bits, &x, sizeof bits);
        h = kiln_hash_u64(h, bits);
    }
    char shape[256];
    printf("%s  %s%s  sum=%.12g  l2=%.12g  hash=%016llx\n", t->name, kiln_dtype_name(t->dtype),
           cli_shape(shape, sizeof shape, t->ndim, t->shape), sum, sqrt(sq), (unsigned long long)h);
}

static int
run(const struct opts *o, kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
    double **argv_, double **outv)
{
    uint32_t        na = kiln_graph_nargs(g), no = kiln_graph_noutputs(g);
    struct kiln_rng r = kiln_rng_new(o->seed);
    for (uint32_t i = 0; i < na; i++) {
        struct kiln_tensor_info t;
        uint32_t                ti = kiln_graph_arg(g, i);
        int64_t                 n = kiln_graph_tensor_numel(g, ti);
        kiln_graph_tensor(g, ti, &t);
        argv_[i] = malloc(sizeof(double) * (size_t)(n ? n : 1));
        if (!argv_[i]) {
            fprintf(stderr, "kiln: out of memory for argument %s\n", t.name);
            return 1;
        }
        if (weights && weights[i])
            memcpy(argv_[i], weights[i], sizeof(double) * (size_t)n); /* an ONNX initializer */
        else if (!o->inputs)
            fill_random(&r, t.dtype, argv_[i], n);
        else if (!read_arg(o->inputs, &t, argv_[i], n))
            return 1;
    }
    for (uint32_t i = 0; i < no; i++) {
        int64_t n = kiln_graph_tensor_numel(g, kiln_graph_output(g, i));
        outv[i] = malloc(sizeof(double) * (size_t)(n ? n : 1));
        if (!outv[i]) {
            fprintf(stderr, "kiln: out of memory for the outputs\n");
            return 1;
        }
    }
    if (kiln_graph_eval(ctx, g, (const double *const *)argv_, outv) != KILN_OK)
        return cli_report(ctx);

    if (o->inputs)
        printf("inputs: %s/NAME.npy\n", o->inputs);
    else
        printf("inputs: random, seed %llu\n", (unsigned long long)o->seed);
    for (uint32_t i = 0; i < no; i++) {
        struct kiln_tensor_info t;
        uint32_t                ti = kiln_graph_output(g, i);
        kiln_graph_tensor(g, ti, &t);
        print_summary(&t, outv[i], kiln_graph_tensor_numel(g, ti));
    }
    if (!o->out)
        return 0;
    if (!cli_mkdirs(o->out)) {
        fprintf(stderr, "kiln: cannot create %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    for (uint32_t i = 0; i < no; i++) {
        struct kiln_tensor_info t;
        kiln_graph_tensor(g, kiln_graph_output(g, i), &t);
        if (!write_npy(o->out, &t, outv[i], KILN_DTYPE_F64))
            return 1;
    }
    for (uint32_t i = 0; o->save_inputs && i < na; i++) {
        struct kiln_tensor_info t;
        kiln_graph_tensor(g, kiln_graph_arg(g, i), &t);
        /* integers in their own dtype (exact beyond 2^53), floats as float64 */
        if (!write_npy(o->out, &t, argv_[i],
                       kiln_dtype_is_float(t.dtype) ? KILN_DTYPE_F64 : t.dtype))
            return 1;
    }
    return 0;
}

int
cmd_eval(int argc, char **argv)
{
    struct opts o = {.passes = {.dump_after = -1}};
    int         rc = parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;
    kiln_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    const double *const *weights = NULL;
    struct kiln_graph   *g = cli_load_model(ctx, o.path, &o.passes, &weights);
    if (g && !cli_optimize(ctx, "eval", o.path, &o.passes, &g, &weights, o.verbose))
        g = NULL;
    if (!g) {
        kiln_ctx_free(ctx);
        return 1;
    }
    uint32_t na = kiln_graph_nargs(g), no = kiln_graph_noutputs(g);
    double **args = calloc(na + 1, sizeof *args), **outs = calloc(no + 1, sizeof *outs);
    rc = 1;
    if (!args || !outs)
        fprintf(stderr, "kiln: out of memory\n");
    else
        rc = run(&o, ctx, g, weights, args, outs);
    for (uint32_t i = 0; args && i < na; i++)
        free(args[i]);
    for (uint32_t i = 0; outs && i < no; i++)
        free(outs[i]);
    free(args);
    free(outs);
    kiln_ctx_free(ctx);
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "kiln: error writing the output\n");
        rc = 1;
    }
    return rc;
}
