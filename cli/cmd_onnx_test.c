/* cli/cmd_onnx_test.c -- `kiln onnx-test DIR...`: ONNX's backend conformance tests, run through
 * kiln's whole pipeline.
 *
 * A test is a directory holding model.onnx and test_data_set_N/{input_K.pb, output_K.pb}
 * (serialized TensorProtos), the layout of ONNX's own backend test data. A DIR argument that
 * holds model.onnx is one test; any other DIR is searched one level down for tests (sorted by
 * name). Each test's model is imported (kiln_graph_import_onnx), compiled to a shared object in a
 * temporary directory with the default schedule, loaded, and called once per data set with the
 * data set's inputs and the model's initializers as weights; every output element must satisfy
 * |got - want| <= atol + rtol |want| (NaN matches NaN; integers and booleans exactly), with
 * ONNX's backend-test defaults rtol 1e-3, atol 1e-7. One line per test: PASS, FAIL with the
 * first problem, or SKIP with the reason -- a test is skipped when its model uses an op,
 * attribute or type kiln does not support (the import's KILN_ERR_UNSUPPORTED message). The last
 * line is `N passed, N failed, N skipped`. Exit status 0 when nothing failed, 1 otherwise, 2 on
 * a usage error. */
#include "cli.h"

#include "../ir/ir.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln onnx-test DIR... [--rtol R] [--atol A] [--target T] [--quiet] [--no-simplify]\n"
    "\n"
    "Runs ONNX backend tests: each DIR holding model.onnx and test_data_set_N/{input_K.pb,\n"
    "output_K.pb} is one test; any other DIR is searched one level down for such tests\n"
    "(e.g. the node/ folder of ONNX's test data). Each model is imported, simplified (as\n"
    "`kiln compile` does; --no-simplify: not), compiled with the\n"
    "default schedule, run on every data set and compared with the expected outputs:\n"
    "|got - want| <= atol + rtol |want| (default rtol 1e-3, atol 1e-7, as ONNX's own runner;\n"
    "integers exactly). Prints PASS, FAIL (with the first mismatch) or SKIP (an op or\n"
    "attribute kiln does not support, with the reason) per test, then\n"
    "`N passed, N failed, N skipped`. Exit status 1 when a test failed.\n"
    "\n"
    "  --rtol R, --atol A  tolerances\n"
    "  --target T          compile for T (default: this machine)\n"
    "  --quiet             print only failures and the summary\n";

struct opts {
    double      rtol, atol;
    const char *target;
    bool        quiet, no_simplify;
    const char *tmpdir;
};

struct counts {
    int pass, fail, skip;
};

static bool
is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool
is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- buffers ---- */

struct buf {
    void    *data;
    int64_t  numel;
    DLTensor t;
};

static bool
dtype_ok(enum kiln_dtype dt)
{
    return dt != KILN_DTYPE_COUNT;
}

static bool
buf_alloc(struct buf *b, const struct kiln_module_arg *a)
{
    memset(b, 0, sizeof *b);
    b->numel = 1;
    for (int d = 0; d < a->ndim; d++)
        b->numel *= a->shape[d];
    size_t align = a->align > 64 ? a->align : 64;
    size_t bytes = ((size_t)a->bytes + align - 1) / align * align;
    if (posix_memalign(&b->data, align, bytes ? bytes : align) != 0)
        return false;
    memset(b->data, 0, bytes);
    b->t = (DLTensor){.data = b->data,
                      .device = {kDLCPU, 0},
                      .ndim = a->ndim,
                      .dtype = a->dl_dtype,
                      .shape = (int64_t *)a->shape};
    return true;
}

/* ---- one test ---- */

#define MAX_BOUND 16

struct test {
    const char         *dir, *name;
    const struct opts  *o;
    char                why[1024]; /* FAIL / SKIP reason */
    kiln_ctx           *ctx;
    struct kiln_module *mod;
    struct buf         *bufs;
    uint32_t            nargs;
    /* graph inputs bound to data set 0's values (read as shapes): input_K.pb index and value */
    uint32_t                 nbound;
    uint32_t                 bound_k[MAX_BOUND];
    struct kiln_onnx_tensor  bound[MAX_BOUND];
    struct kiln_onnx_binding bind[MAX_BOUND];
};

enum verdict { PASS, FAIL, SKIP };

static enum verdict fail(struct test *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static enum verdict
fail(struct test *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->why, sizeof t->why, fmt, ap);
    va_end(ap);
    return FAIL;
}

static enum verdict
ctx_verdict(struct test *t)
{
    const struct kiln_error *e = kiln_ctx_error(t->ctx);
    kiln_error_format(e, t->why, sizeof t->why);
    return e && e->status == KILN_ERR_UNSUPPORTED ? SKIP : FAIL;
}

/* Reads and decodes a .pb TensorProto; NULL values on failure (reason in t->why). */
static bool
read_tensor(struct test *t, const char *path, struct kiln_onnx_tensor *out)
{
    size_t len;
    char  *data = cli_read_file(path, &len);
    if (!data) {
        fail(t, "%s: %s", path, strerror(errno));
        return false;
    }
    enum kiln_status st = kiln_onnx_tensor_decode(t->ctx, data, len, path, out);
    free(data);
    if (st != KILN_OK) {
        ctx_verdict(t);
        return false;
    }
    return true;
}

/* ONNX's older bfloat16 node tests store their data as UINT16 tensors of bf16 bits (and
 * expect truncation, not rounding): skipped, as before kiln read UINT16. */
static bool
bf16_as_bits(struct test *t, const char *path, const struct kiln_onnx_tensor *v,
             enum kiln_dtype want)
{
    if (v->dtype != KILN_DTYPE_U16 || want != KILN_DTYPE_BF16)
        return false;
    snprintf(t->why, sizeof t->why, "%.800s: bf16 data stored as UINT16 bits", path);
    return true;
}

static bool
same_shape(const struct kiln_onnx_tensor *v, const struct kiln_module_arg *a)
{
    /* a scalar may be stored as [1] and vice versa: compare element counts and non-1 extents */
    if (kiln_shape_numel(a->shape, (int)a->ndim) != v->numel)
        return false;
    int i = 0, k = 0;
    while (i < v->ndim || k < a->ndim) {
        if (i < v->ndim && v->shape[i] == 1) {
            i++;
        } else if (k < a->ndim && a->shape[k] == 1) {
            k++;
        } else if (i < v->ndim && k < a->ndim && v->shape[i] == a->shape[k]) {
            i++;
            k++;
        } else {
            return false;
        }
    }
    return true;
}

static bool
is_bound(const struct test *t, uint32_t k)
{
    for (uint32_t b = 0; b < t->nbound; b++)
        if (t->bound_k[b] == k)
            return true;
    return false;
}

static enum verdict
run_set(struct test *t, const char *set, uint32_t ninputs, const double *const *weights)
{
    char path[4200];
    for (uint32_t b = 0; b < t->nbound; b++) { /* bound inputs must not change between sets */
        struct kiln_onnx_tensor v;
        snprintf(path, sizeof path, "%s/input_%u.pb", set, t->bound_k[b]);
        if (!read_tensor(t, path, &v))
            return FAIL;
        if (v.numel != t->bound[b].numel
            || memcmp(v.values, t->bound[b].values, sizeof(double) * (size_t)v.numel)) {
            snprintf(
                t->why, sizeof t->why,
                "%.800s: bound input %.100s differs from test_data_set_0's (kiln compiles for one "
                "value)",
                path, t->bind[b].name);
            return SKIP;
        }
    }
    for (uint32_t i = 0, k = 0; i < t->nargs; i++) {
        struct kiln_module_arg a;
        kiln_module_arg(t->mod, i, &a);
        if (a.role == KILN_ARG_OUTPUT)
            continue;
        const double *vals = NULL;
        if (a.role == KILN_ARG_INPUT) {
            struct kiln_onnx_tensor v;
            while (is_bound(t, k))
                k++;
            snprintf(path, sizeof path, "%s/input_%u.pb", set, k++);
            if (!read_tensor(t, path, &v))
                return FAIL;
            if (bf16_as_bits(t, path, &v, a.dtype))
                return SKIP;
            if (v.dtype != a.dtype || !same_shape(&v, &a)) {
                char s1[256], s2[256];
                return fail(t, "%s: %s%s does not match input %s: %s%s", path,
                            kiln_dtype_name(v.dtype), cli_shape(s1, sizeof s1, v.ndim, v.shape),
                            a.name, kiln_dtype_name(a.dtype),
                            cli_shape(s2, sizeof s2, a.ndim, a.shape));
            }
            vals = v.values;
        } else {
            vals = weights[i];
            if (!vals)
                return fail(t, "weight %s has no values", a.name);
        }
        for (int64_t e = 0; e < t->bufs[i].numel; e++)
            kiln_scalar_store(a.dtype, t->bufs[i].data, e, vals[e]);
    }
    (void)ninputs;
    DLTensor **args = calloc(t->nargs, sizeof *args);
    if (!args)
        return fail(t, "out of memory");
    for (uint32_t i = 0; i < t->nargs; i++)
        args[i] = &t->bufs[i].t;
    enum kiln_status st = kiln_module_call(t->ctx, t->mod, args, (int32_t)t->nargs, NULL);
    free(args);
    if (st != KILN_OK)
        return ctx_verdict(t);
    for (uint32_t i = 0, k = 0; i < t->nargs; i++) {
        struct kiln_module_arg a;
        kiln_module_arg(t->mod, i, &a);
        if (a.role != KILN_ARG_OUTPUT)
            continue;
        struct kiln_onnx_tensor want;
        snprintf(path, sizeof path, "%s/output_%u.pb", set, k++);
        if (!read_tensor(t, path, &want))
            return FAIL;
        if (bf16_as_bits(t, path, &want, a.dtype))
            return SKIP;
        if (!same_shape(&want, &a)) {
            char s1[256], s2[256];
            return fail(t, "output %s has shape %s, expected %s", a.name,
                        cli_shape(s1, sizeof s1, a.ndim, a.shape),
                        cli_shape(s2, sizeof s2, want.ndim, want.shape));
        }
        bool   exact = !kiln_dtype_is_float(a.dtype);
        double maxerr = 0;
        int    bad = 0;
        char   first[300] = "";
        for (int64_t e = 0; e < want.numel; e++) {
            double g = kiln_scalar_load(a.dtype, t->bufs[i].data, e), w = want.values[e];
            bool   ok =
                exact ? g == w
                        : (isnan(w) ? isnan(g)
                                    : (g == w || fabs(g - w) <= t->o->atol + t->o->rtol * fabs(w)));
            if (!isnan(g) && !isnan(w) && fabs(g - w) > maxerr)
                maxerr = fabs(g - w);
            if (!ok && !bad++)
                snprintf(first, sizeof first, "element %lld: got %.9g, want %.9g", (long long)e, g,
                         w);
        }
        if (bad)
            return fail(t, "%s: output %s: %d of %lld elements differ (max |error| %.3g); %s", set,
                        a.name, bad, (long long)want.numel, maxerr, first);
    }
    return PASS;
}

/* The model reads a runtime input as a shape: bind every named int64, int32 (CumSum's axis) or
 * scalar input of test_data_set_0 to its value (ONNX's node tests pass shapes, axes and pads as
 * inputs). False when there is nothing to bind. */
static bool
bind_shape_inputs(struct test *t)
{
    char path[4200];
    t->nbound = 0;
    for (uint32_t k = 0; t->nbound < MAX_BOUND; k++) {
        snprintf(path, sizeof path, "%s/test_data_set_0/input_%u.pb", t->dir, k);
        if (!is_file(path))
            break;
        struct kiln_onnx_tensor v;
        size_t                  len;
        char                   *data = cli_read_file(path, &len);
        if (!data)
            break;
        enum kiln_status st = kiln_onnx_tensor_decode(t->ctx, data, len, path, &v);
        free(data);
        if (st != KILN_OK)
            break;
        /* shapes, axes and pads are int64 in ONNX (CumSum's axis int32); Range's bounds are
         * scalars of any type; Resize's scales and roi short float vectors */
        bool fvec = v.ndim == 1 && v.numel <= 2 * KILN_MAX_DIMS
                    && (v.dtype == KILN_DTYPE_F32 || v.dtype == KILN_DTYPE_F64);
        if ((v.dtype == KILN_DTYPE_I64 || v.dtype == KILN_DTYPE_I32 || v.numel == 1 || fvec)
            && v.name[0]) {
            t->bound_k[t->nbound] = k;
            t->bound[t->nbound] = v;
            t->bind[t->nbound] = (struct kiln_onnx_binding){v.name, &t->bound[t->nbound]};
            t->nbound++;
        }
    }
    return t->nbound > 0;
}

static enum verdict
run_test(struct test *t, unsigned idx)
{
    char   path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/model.onnx", t->dir);
    char *data = cli_read_file(path, &len);
    if (!data)
        return fail(t, "%s: %s", path, strerror(errno));
    struct kiln_graph   *g = NULL;
    const double *const *weights = NULL;
    enum kiln_status     st = kiln_graph_import_onnx(t->ctx, data, len, path, &g, &weights);
    if (st == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(t->ctx)->msg, "dynamic shape: input")) {
        enum verdict v = ctx_verdict(t);
        kiln_ctx_error_clear(t->ctx);
        if (!bind_shape_inputs(t)) {
            free(data);
            return v;
        }
        kiln_ctx_error_clear(t->ctx);
        st =
            kiln_graph_import_onnx_bound(t->ctx, data, len, path, t->bind, t->nbound, &g, &weights);
    }
    free(data);
    if (st == KILN_OK && !t->o->no_simplify) {
        /* simplification only, as the command documents (cli/README.md, kiln onnx-test) */
        struct kiln_optimize_options opt = {
            (1u << KILN_GRAPH_PASS_CHANNELS_LAST) | (1u << KILN_GRAPH_PASS_WINOGRAD), NULL, NULL};
        struct kiln_graph *s;
        if ((st = kiln_graph_optimize(t->ctx, g, weights, &opt, &s, &weights, NULL)) == KILN_OK)
            g = s;
    }
    if (st != KILN_OK)
        return ctx_verdict(t);
    uint32_t ninputs = 0;
    for (uint32_t i = 0; i < kiln_graph_nargs(g); i++) {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, kiln_graph_arg(g, i), &ti);
        ninputs += ti.kind == KILN_TENSOR_INPUT;
        if (!dtype_ok(ti.dtype)) {
            snprintf(t->why, sizeof t->why,
                     "argument %s has dtype %s, which the runner does not "
                     "handle",
                     ti.name, kiln_dtype_name(ti.dtype));
            return SKIP;
        }
    }
    for (uint32_t i = 0; i < kiln_graph_noutputs(g); i++) {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, kiln_graph_output(g, i), &ti);
        if (!dtype_ok(ti.dtype)) {
            snprintf(t->why, sizeof t->why,
                     "output %s has dtype %s, which the runner does not "
                     "handle",
                     ti.name, kiln_dtype_name(ti.dtype));
            return SKIP;
        }
    }
    char so[4096];
    snprintf(so, sizeof so, "%s/t%u.so", t->o->tmpdir, idx);
    struct kiln_compile_options co = {.target = t->o->target, .name = t->name};
    if (kiln_graph_compile(t->ctx, g, &co, so, NULL) != KILN_OK)
        return ctx_verdict(t);
    st = kiln_module_load(t->ctx, so, &t->mod);
    unlink(so);
    if (st != KILN_OK)
        return ctx_verdict(t);
    t->nargs = kiln_module_nargs(t->mod);
    t->bufs = calloc(t->nargs ? t->nargs : 1, sizeof *t->bufs);
    if (!t->bufs)
        return fail(t, "out of memory");
    for (uint32_t i = 0; i < t->nargs; i++) {
        struct kiln_module_arg a;
        kiln_module_arg(t->mod, i, &a);
        if (!buf_alloc(&t->bufs[i], &a))
            return fail(t, "out of memory for %s", a.name);
    }
    int nsets = 0;
    for (int s = 0;; s++) {
        char set[4096];
        snprintf(set, sizeof set, "%s/test_data_set_%d", t->dir, s);
        if (!is_dir(set))
            break;
        enum verdict v = run_set(t, set, ninputs, weights);
        if (v != PASS)
            return v;
        nsets++;
    }
    if (!nsets)
        return fail(t, "no test_data_set_0 in %s", t->dir);
    return PASS;
}

static void
one(const char *dir, const struct opts *o, struct counts *c, unsigned idx)
{
    const char *name = strrchr(dir, '/');
    name = name && name[1] ? name + 1 : dir;
    struct test     t = {.dir = dir, .name = name, .o = o};
    enum verdict    v;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    t.ctx = cli_ctx_new();
    v = t.ctx ? run_test(&t, idx) : fail(&t, "out of memory");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    char   note[512] = ""; /* the bound inputs' names live in the context */
    for (uint32_t b = 0, len = 0; b < t.nbound && len < sizeof note; b++)
        len +=
            (uint32_t)snprintf(note + len, sizeof note - len, "%s%s",
                               b ? ", " : "; bound to test_data_set_0's values: ", t.bind[b].name);
    for (uint32_t i = 0; t.bufs && i < t.nargs; i++)
        free(t.bufs[i].data);
    free(t.bufs);
    kiln_module_free(t.mod);
    kiln_ctx_free(t.ctx);
    switch (v) {
    case PASS:
        c->pass++;
        if (!o->quiet) {
            printf("PASS %s (%.2f s%s)\n", name, secs, note);
        }
        break;
    case FAIL:
        c->fail++;
        printf("FAIL %s: %s\n", name, t.why);
        break;
    case SKIP:
        c->skip++;
        if (!o->quiet)
            printf("SKIP %s: %s\n", name, t.why);
        break;
    }
    fflush(stdout);
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs DIR as a test, or every test one level below it. */
static int
walk(const char *dir, const struct opts *o, struct counts *c, unsigned *idx)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    if (is_file(path)) {
        one(dir, o, c, (*idx)++);
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "kiln: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int    rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s/model.onnx", dir, e->d_name);
        if (!is_file(path))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) {
                rc = 1;
                break;
            }
            names = nn;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            rc = 1;
            break;
        }
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (rc)
        fprintf(stderr, "kiln: out of memory\n");
    if (!rc && !n) {
        fprintf(stderr, "kiln: %s: no model.onnx there or in its subdirectories\n", dir);
        rc = 1;
    }
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            one(names[i], o, c, (*idx)++);
        free(names[i]);
    }
    free(names);
    return rc;
}

static bool
parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= 0) || !isfinite(v))
        return false;
    *out = v;
    return true;
}

int
cmd_onnx_test(int argc, char **argv)
{
    struct opts o = {.rtol = 1e-3, .atol = 1e-7};
    int         ndirs = 0;
    char      **dirs = calloc((size_t)argc, sizeof *dirs);
    if (!dirs) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(usage, stdout);
            free(dirs);
            return 0;
        }
        if ((!strcmp(a, "--rtol") || !strcmp(a, "--atol") || !strcmp(a, "--target"))
            && i + 1 >= argc) {
            free(dirs);
            return cli_usage_error("onnx-test", "%s needs a value", a);
        }
        if (!strcmp(a, "--rtol") || !strcmp(a, "--atol")) {
            if (!parse_double(argv[i + 1], a[2] == 'r' ? &o.rtol : &o.atol)) {
                free(dirs);
                return cli_usage_error("onnx-test", "%s needs a non-negative number, not '%s'", a,
                                       argv[i + 1]);
            }
            i++;
        } else if (!strcmp(a, "--target")) {
            o.target = argv[++i];
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o.quiet = true;
        } else if (!strcmp(a, "--no-simplify")) {
            o.no_simplify = true;
        } else if (a[0] == '-' && a[1]) {
            free(dirs);
            return cli_usage_error("onnx-test", "unknown option '%s'", a);
        } else {
            dirs[ndirs++] = argv[i];
        }
    }
    if (!ndirs) {
        free(dirs);
        return cli_usage_error("onnx-test", "missing DIR");
    }
    const char *base = getenv("TMPDIR");
    char        tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/kiln-onnx-test.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpl)) {
        fprintf(stderr, "kiln: cannot create a temporary directory %s: %s\n", tmpl,
                strerror(errno));
        free(dirs);
        return 1;
    }
    o.tmpdir = tmpl;
    struct counts c = {0};
    unsigned      idx = 0;
    int           rc = 0;
    for (int i = 0; i < ndirs; i++)
        rc |= walk(dirs[i], &o, &c, &idx);
    rmdir(tmpl);
    free(dirs);
    printf("%d passed, %d failed, %d skipped\n", c.pass, c.fail, c.skip);
    return rc || c.fail ? 1 : 0;
}
