/* cli/cmd_run.c -- `kiln run`: load a generated shared object, call it on seeded random inputs,
 * and optionally check it against the reference interpreter and time it.
 *
 *     kiln run MODULE.so [--check] [--bench] [--seed S] [--threads N] [--repeat R]
 *                        [--min-time SEC]
 *
 * Inputs. Every argument (inputs and weights the module takes) is filled from one xoshiro256**
 * stream seeded
 * with S (default 0), argument by argument, elements in row-major order: floating-point
 * elements uniform in [-1, 1) rounded to the dtype, integers uniform in [-4, 4], booleans 0 or
 * 1 -- the same stream and draws as `kiln eval`, so both see the same inputs for the same seed.
 * The weights built into a module (kiln_module_embedded) are its own: they take no draws, and
 * --check gives the reference interpreter the module's values (read from the module).
 * Buffers are 64-byte aligned (or the argument's alignment when larger) and framed by guard
 * bytes; outputs start as NaN (integers: the byte 0xa5).
 *
 * After the call, run verifies that no guard byte changed and no input was modified, then prints
 * one line per output in `kiln eval`'s format (name, dtype and shape, sum, L2 norm, a hash of
 * the values as doubles), so the two commands' outputs can be compared. --check parses the module's
 * own source (kiln_source), evaluates it with the reference interpreter (doubles) on the same
 * inputs and compares every element: |got - want| <= (atol + rtol * |want|) * s, where (rtol, atol)
 * are (1e-4, 1e-5) for f32, (1e-9, 1e-12) for f64, (1e-2, 1e-3) for f16 and (4e-2, 1e-2) for bf16,
 * integers and booleans must match exactly, and s = max(1, sqrt(F)) with F the graph's FLOPs
 * per output element: the error of a float sum grows with the number of terms it adds, and F
 * is about twice that number for a matrix product or a convolution. NaN matches NaN; an element
 * still holding the NaN it started with is reported as never written. --bench prepares the
 * module (kiln_module_prepare: weight-derived stages such as packed weights, computed once) and
 * calls the prepared call until 0.05 s have passed (warm-up), then R times (default 5) for at
 * least --min-time seconds each (default 0.2), and prints the median time per call with
 * GFLOP/s and GB/s computed from
 * the graph's FLOPs and bytes (the sums of kiln_graph_call), and a memory line: the module's
 * peak per call (metadata "peak_bytes": weights + inputs + outputs + workspace, with the
 * workspace planned and unplanned) and this process's measured maximum resident set size
 * (getrusage; it includes the reference data and guard frames run allocates itself). A second
 * line gives the prepare time and the plain kiln_call's median, timed the same way.
 *
 * Modules of the cuda target (kiln_module_device: kDLCUDA) run on CUDA device 0 through the
 * public device API (include/kiln.h, "CUDA devices"): every buffer -- guard bytes, data, guard
 * bytes -- gets a device copy, uploaded whole after filling; the tensors point into the device
 * copies; after the call the copies are downloaded whole, so the guard, input and output checks
 * above apply unchanged. --bench times each call with CUDA events (kiln_cuda_time, the median of
 * as many calls as fill --min-time) and takes the median of R such repeats; the lines name the
 * device. Without a driver or device: "kiln: error: cannot run M.so (target "cuda ..."): no CUDA
 * driver (libcuda.so.1: ...)", exit status 1, before anything is allocated.
 *
 * Exit status: 0 success, 1 a failed load, device, call, guard or check, 2 a usage error. */
#include "cli.h"

#include "../ir/ir.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define GUARD_BYTE 0xcd
#define FILL_BYTE  0xa5
#define MAX_REPORT 5 /* mismatching elements printed per output */

static const char usage[] =
    "usage: kiln run MODULE.so [--check] [--bench] [--seed S] [--threads N] [--repeat R]\n"
    "                          [--min-time SEC]\n"
    "\n"
    "Loads a shared object written by `kiln compile`, calls it on seeded random inputs (the\n"
    "same as `kiln eval`'s: floats uniform in [-1, 1), integers in [-4, 4], unsigned ones in\n"
    "[0, 8]) and prints each\n"
    "output's sum, L2 norm and hash as `kiln eval` does. Weights built into the module\n"
    "(`kiln compile MODEL.onnx` embeds them) keep their values; --check reads them from it.\n"
    "\n"
    "A module compiled with --target cuda runs on CUDA device 0 (inputs uploaded, outputs\n"
    "downloaded); --bench then times it with CUDA events.\n"
    "\n"
    "  --check         compare every output element with the reference interpreter run on\n"
    "                  the module's own source: |got - want| <= (atol + rtol |want|) * s,\n"
    "                  f32: rtol 1e-4, atol 1e-5 (f64 1e-9/1e-12, f16 1e-2/1e-3, bf16\n"
    "                  4e-2/1e-2; integers exact), s = max(1, sqrt(FLOPs per output element));\n"
    "                  also fails if an output element was never written, a byte outside an\n"
    "                  output was written, or an input was modified; exit status 1 on failure\n"
    "  --bench         time the call: median over R repeats of at least SEC seconds each;\n"
    "                  prints time per call, GFLOP/s and GB/s of the prepared call (weights\n"
    "                  prepared once, kiln_prepare), then the prepare time and the time of\n"
    "                  the plain kiln_call, which recomputes weight-derived stages each call\n"
    "  --seed S        seed of the input generator (default 0)\n"
    "  --threads N     threads for parallel loops (default: all cores)\n"
    "  --repeat R      timed repeats for --bench (default 5)\n"
    "  --min-time SEC  minimum seconds per repeat (default 0.2)\n";

struct buffer {
    struct kiln_module_arg info;
    int64_t                numel;
    size_t                 guard; /* bytes before and after the data */
    unsigned char         *base;  /* allocation: guard | data | guard */
    unsigned char         *data;
    unsigned char         *saved; /* inputs: a copy of the data, to detect writes */
    double                *vals;  /* inputs: the values as doubles; outputs: the reference */
    size_t                 total; /* bytes of base */
    uint64_t               dev;   /* cuda modules: the device copy of base (0: none) */
    DLTensor               t;
};

struct opts {
    const char *path;
    int         check, bench;
    uint64_t    seed;
    int32_t     threads;
    int         repeat;
    double      min_time;
};

static void
tolerance(enum kiln_dtype dt, double *rtol, double *atol)
{
    *rtol = *atol = 0;
    if (dt == KILN_DTYPE_F32)
        *rtol = 1e-4, *atol = 1e-5;
    else if (dt == KILN_DTYPE_F64)
        *rtol = 1e-9, *atol = 1e-12;
    else if (dt == KILN_DTYPE_F16)
        *rtol = 1e-2, *atol = 1e-3;
    else if (dt == KILN_DTYPE_BF16)
        *rtol = 4e-2, *atol = 1e-2;
}

/* ---- helpers ---- */

static const char *
index_str(char *buf, size_t size, const struct kiln_module_arg *a, int64_t flat)
{
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int d = a->ndim - 1; d >= 0 && d < KILN_MAX_DIMS; d--) {
        idx[d] = flat % a->shape[d];
        flat /= a->shape[d];
    }
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < a->ndim && d < KILN_MAX_DIMS && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%" PRId64, d ? ", " : "", idx[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int
parse_opts(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->repeat = 5;
    o->min_time = 0.2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--check")) {
            o->check = 1;
        } else if (!strcmp(a, "--bench")) {
            o->bench = 1;
        } else if (!strcmp(a, "--seed") || !strcmp(a, "--threads") || !strcmp(a, "--repeat")
                   || !strcmp(a, "--min-time")) {
            if (i + 1 >= argc)
                return cli_usage_error("run", "%s needs a value", a);
            const char *v = argv[++i];
            uint64_t    n = 0;
            int         ok;
            if (!strcmp(a, "--min-time")) {
                char *end = NULL;
                errno = 0;
                o->min_time = strtod(v, &end);
                ok = !errno && end != v && !*end && o->min_time >= 0 && o->min_time <= 3600;
            } else if (!strcmp(a, "--seed")) {
                ok = cli_parse_u64(v, &o->seed);
            } else if (!strcmp(a, "--threads")) {
                ok = cli_parse_u64(v, &n) && n <= 4096;
                o->threads = (int32_t)n;
            } else {
                ok = cli_parse_u64(v, &n) && n >= 1 && n <= 100000;
                o->repeat = (int)n;
            }
            if (!ok)
                return cli_usage_error("run", "bad value '%s' for %s", v, a);
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("run", "unknown option '%s'", a);
        } else if (o->path) {
            return cli_usage_error("run", "more than one module given ('%s', '%s')", o->path, a);
        } else {
            o->path = a;
        }
    }
    if (!o->path)
        return cli_usage_error("run", "no module given");
    return -1; /* go on */
}

/* ---- buffers ---- */

/* Allocates b for argument info: host memory, and with cu a device copy the tensor points
 * into. 0 on failure (with cu, the error is in ctx). */
static int
alloc_buffer(kiln_ctx *ctx, struct kiln_cuda *cu, struct buffer *b,
             const struct kiln_module_arg *info)
{
    memset(b, 0, sizeof *b);
    b->info = *info;
    b->numel = 1;
    for (int d = 0; d < info->ndim; d++)
        b->numel *= info->shape[d];
    size_t align = info->align > 64 ? info->align : 64;
    b->guard = align;
    size_t bytes = (size_t)info->bytes;
    size_t total = (bytes + 2 * b->guard + align - 1) / align * align;
    void  *p = NULL;
    if (posix_memalign(&p, align, total) != 0)
        return 0;
    b->base = p;
    b->total = total;
    b->data = b->base + b->guard;
    memset(b->base, GUARD_BYTE, total);
    b->vals = malloc(sizeof(double) * (size_t)(b->numel ? b->numel : 1));
    if (!b->vals)
        return 0;
    b->t.data = b->data;
    b->t.device = (DLDevice){kDLCPU, 0};
    if (cu) { /* cudaMalloc-aligned (256), so data is aligned as the host copy's */
        if (kiln_cuda_alloc(ctx, cu, total, &b->dev) != KILN_OK)
            return 0;
        b->t.data = (void *)(uintptr_t)(b->dev + b->guard);
        b->t.device = (DLDevice){kDLCUDA, 0};
    }
    b->t.ndim = info->ndim;
    b->t.dtype = info->dl_dtype;
    b->t.shape = (int64_t *)info->shape;
    b->t.strides = NULL;
    b->t.byte_offset = 0;
    return 1;
}

/* b for embedded weight i of m: its values read from the module's own copy (no allocation of
 * the tensor, never passed to the call); *pos receives its place among the module's tensors.
 * 0 on failure. */
static int
embedded_buffer(struct kiln_module *m, uint32_t i, struct buffer *b, uint32_t *pos)
{
    const void *data = NULL;
    memset(b, 0, sizeof *b);
    if (kiln_module_embedded(m, i, &b->info, &data, pos) != KILN_OK || !data)
        return 0;
    b->numel = 1;
    for (int d = 0; d < b->info.ndim; d++)
        b->numel *= b->info.shape[d];
    b->vals = malloc(sizeof(double) * (size_t)(b->numel ? b->numel : 1));
    if (!b->vals)
        return 0;
    b->data = (unsigned char *)data;
    for (int64_t k = 0; k < b->numel; k++)
        b->vals[k] = kiln_scalar_load(b->info.dtype, data, k);
    return 1;
}

static void
free_buffer(struct kiln_cuda *cu, struct buffer *b)
{
    kiln_cuda_free(cu, b->dev);
    free(b->base);
    free(b->saved);
    free(b->vals);
}

static int
fill_input(struct buffer *b, struct kiln_rng *r)
{
    for (int64_t i = 0; i < b->numel; i++) {
        double v;
        if (kiln_dtype_is_float(b->info.dtype))
            v = 2 * kiln_rng_uniform(r) - 1; /* rounded by the store */
        else if (b->info.dtype == KILN_DTYPE_BOOL)
            v = (double)kiln_rng_below(r, 2);
        else /* unsigned dtypes: [0, 8], as kiln eval */
            v = (double)kiln_rng_below(r, 9) - (kiln_dtype_is_unsigned(b->info.dtype) ? 0 : 4);
        b->vals[i] = kiln_scalar_store(b->info.dtype, b->data, i, v);
    }
    b->saved = malloc((size_t)b->info.bytes ? (size_t)b->info.bytes : 1);
    if (!b->saved)
        return 0;
    memcpy(b->saved, b->data, (size_t)b->info.bytes);
    return 1;
}

static void
fill_output(struct buffer *b)
{
    if (kiln_dtype_is_float(b->info.dtype)) {
        for (int64_t i = 0; i < b->numel; i++)
            kiln_scalar_store(b->info.dtype, b->data, i, NAN);
    } else {
        memset(b->data, FILL_BYTE, (size_t)b->info.bytes);
    }
}

/* 0 if the guard bytes around b are intact (an embedded weight has none). */
static int
guards_broken(const struct buffer *b)
{
    for (size_t i = 0; b->base && i < b->guard; i++) {
        if (b->base[i] != GUARD_BYTE || b->data[b->info.bytes + (int64_t)i] != GUARD_BYTE)
            return 1;
    }
    return 0;
}

/* ---- check ---- */

static int
check_output(const struct buffer *b, double scale)
{
    double rtol, atol;
    tolerance(b->info.dtype, &rtol, &atol);
    double  max_abs = 0, max_rel = 0;
    int64_t bad = 0, unwritten = 0;
    char    idx[128];
    for (int64_t i = 0; i < b->numel; i++) {
        double got = kiln_scalar_load(b->info.dtype, b->data, i), want = b->vals[i];
        if (isnan(want) && isnan(got))
            continue;
        double err = fabs(got - want);
        int    ok = got == want || err <= (atol + rtol * fabs(want)) * scale;
        if (isnan(err) || isinf(want) || isinf(got))
            ok = got == want;
        if (!isnan(err) && !isinf(err)) {
            if (err > max_abs)
                max_abs = err;
            if (want != 0 && err / fabs(want) > max_rel)
                max_rel = err / fabs(want);
        }
        if (ok)
            continue;
        int never = kiln_dtype_is_float(b->info.dtype) ? isnan(got) && !isnan(want) : 0;
        unwritten += never;
        if (bad++ < MAX_REPORT)
            printf("  %s%s: got %.9g, want %.9g%s\n", b->info.name,
                   index_str(idx, sizeof idx, &b->info, i), got, want,
                   never ? " (never written)" : "");
    }
    printf("check %s: max abs err %.3g, max rel err %.3g (rtol %g, atol %g, scale %.3g): %s\n",
           b->info.name, max_abs, max_rel, rtol, atol, scale, bad ? "FAIL" : "PASS");
    if (bad)
        printf("  %" PRId64 " of %" PRId64 " elements differ%s", bad, b->numel,
               unwritten ? "" : "\n");
    if (bad && unwritten)
        printf(", %" PRId64 " never written\n", unwritten);
    return bad == 0;
}

/* Parses the module's source and checks it describes the module's arguments. */
static struct kiln_graph *
module_graph(kiln_ctx *ctx, struct kiln_module *m, const struct buffer *bufs, uint32_t n)
{
    const char        *src = kiln_module_source(m);
    struct kiln_graph *g = NULL;
    if (kiln_graph_parse(ctx, src, strlen(src), "<module source>", &g) != KILN_OK) {
        cli_report(ctx);
        return NULL;
    }
    uint32_t na = kiln_graph_nargs(g), no = kiln_graph_noutputs(g);
    if (na + no != n) {
        fprintf(stderr,
                "kiln: the module's source has %u arguments and %u outputs; the "
                "module takes %u tensors\n",
                na, no, n);
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, i < na ? kiln_graph_arg(g, i) : kiln_graph_output(g, i - na), &ti);
        int same = ti.dtype == bufs[i].info.dtype && ti.ndim == bufs[i].info.ndim;
        for (int d = 0; same && d < ti.ndim; d++)
            same = ti.shape[d] == bufs[i].info.shape[d];
        if (!same) {
            fprintf(stderr, "kiln: the module's source does not match argument %u (%s)\n", i,
                    bufs[i].info.name);
            return NULL;
        }
    }
    return g;
}

static int
run_check(kiln_ctx *ctx, const struct kiln_graph *g, struct buffer *bufs, uint32_t n)
{
    uint32_t       na = kiln_graph_nargs(g);
    const double **in = calloc(na + 1, sizeof *in);
    double       **out = calloc(n - na + 1, sizeof *out);
    double         flops = 0, out_elems = 0;
    int            ok = in && out;
    for (uint32_t i = 0; ok && i < n; i++) {
        if (i < na)
            in[i] = bufs[i].vals;
        else
            out[i - na] = bufs[i].vals;
    }
    if (ok && kiln_graph_eval(ctx, g, in, out) != KILN_OK) {
        cli_report(ctx);
        ok = 0;
    }
    for (uint32_t c = 0; c < kiln_graph_ncalls(g); c++) {
        struct kiln_call_info ci;
        kiln_graph_call(g, c, &ci);
        flops += ci.flops;
    }
    for (uint32_t i = na; i < n; i++)
        out_elems += (double)bufs[i].numel;
    double per = out_elems > 0 ? flops / out_elems : 0;
    double scale = per > 1 ? sqrt(per) : 1;
    int    pass = ok;
    for (uint32_t i = na; ok && i < n; i++)
        pass &= check_output(&bufs[i], scale);
    free(in);
    free(out);
    return pass;
}

/* ---- bench ---- */

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* An integer field of the module's metadata JSON, or -1 when absent (older modules). */
static int64_t
meta_int(const struct kiln_module *m, const char *key)
{
    const char *js = kiln_module_metadata(m);
    char        pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = js ? strstr(js, pat) : NULL;
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* One call: the prepared call with p, else kiln_call. */
static enum kiln_status
bench_call(kiln_ctx *ctx, struct kiln_module *m, const struct kiln_prepared *p, DLTensor **args,
           uint32_t n)
{
    return p ? kiln_module_call_prepared(ctx, m, p, args, (int32_t)n, NULL)
             : kiln_module_call(ctx, m, args, (int32_t)n, NULL);
}

/* Warm-up, then o->repeat timed repeats into t (sorted); 0 after reporting an error. */
static int
bench_time(kiln_ctx *ctx, struct kiln_module *m, const struct kiln_prepared *p, DLTensor **args,
           uint32_t n, const struct opts *o, double *t)
{
    double start = now();
    do {
        if (bench_call(ctx, m, p, args, n) != KILN_OK) {
            cli_report(ctx);
            return 0;
        }
    } while (now() - start < 0.05);
    for (int r = 0; r < o->repeat; r++) {
        int64_t iters = 0;
        double  t0 = now(), el;
        do {
            bench_call(ctx, m, p, args, n);
            iters++;
            el = now() - t0;
        } while (el < o->min_time);
        t[r] = el / (double)iters;
    }
    qsort(t, (size_t)o->repeat, sizeof *t, cmp_double);
    return 1;
}

struct cuda_work {
    struct kiln_module         *m;
    const struct kiln_prepared *p;
    DLTensor                  **args;
    uint32_t                    n;
};

static enum kiln_status
cuda_call(kiln_ctx *ctx, void *ud)
{
    struct cuda_work *w = ud;
    return bench_call(ctx, w->m, w->p, w->args, w->n);
}

/* bench_time on a CUDA device: warm-up, then o->repeat repeats, each the median time of k
 * calls measured with CUDA events (kiln_cuda_time), k calls lasting about o->min_time. */
static int
bench_time_cuda(kiln_ctx *ctx, struct kiln_cuda *cu, struct kiln_module *m,
                const struct kiln_prepared *p, DLTensor **args, uint32_t n, const struct opts *o,
                double *t, int *calls)
{
    struct cuda_work w = {m, p, args, n};
    int64_t          warm = 0;
    double           start = now(), el;
    do {
        if (bench_call(ctx, m, p, args, n) != KILN_OK) {
            cli_report(ctx);
            return 0;
        }
        warm++;
        el = now() - start;
    } while (el < 0.05);
    double per = el / (double)warm, k = per > 0 ? ceil(o->min_time / per) : 1;
    *calls = k < 1 ? 1 : k > 100000 ? 100000 : (int)k;
    for (int r = 0; r < o->repeat; r++) {
        double ms = 0;
        if (kiln_cuda_time(ctx, cu, cuda_call, &w, *calls, &ms) != KILN_OK) {
            cli_report(ctx);
            return 0;
        }
        t[r] = ms * 1e-3;
    }
    qsort(t, (size_t)o->repeat, sizeof *t, cmp_double);
    return 1;
}

static double
median(const double *t, int n)
{
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static int
run_bench(kiln_ctx *ctx, struct kiln_cuda *cu, struct kiln_module *m, const struct kiln_graph *g,
          DLTensor **args, uint32_t n, const struct opts *o)
{
    double *t = calloc((size_t)o->repeat, sizeof *t);
    double *tp = calloc((size_t)o->repeat, sizeof *tp);
    if (!t || !tp) {
        free(t);
        free(tp);
        return 0;
    }
    /* the prepared call (weight-derived stages once, as with fixed weights), then kiln_call */
    struct kiln_prepared *p = NULL;
    double                t_prep = now();
    int                   ok = kiln_module_prepare(ctx, m, args, (int32_t)n, &p, NULL) == KILN_OK;
    t_prep = now() - t_prep;
    if (!ok)
        cli_report(ctx);
    int calls = 0, calls_plain = 0;
    if (cu)
        ok = ok && bench_time_cuda(ctx, cu, m, p, args, n, o, tp, &calls)
             && bench_time_cuda(ctx, cu, m, NULL, args, n, o, t, &calls_plain);
    else
        ok = ok && bench_time(ctx, m, p, args, n, o, tp) && bench_time(ctx, m, NULL, args, n, o, t);
    kiln_module_prepared_free(m, p);
    if (!ok) {
        free(t);
        free(tp);
        return 0;
    }
    double med = median(tp, o->repeat), med_call = median(t, o->repeat);
    double flops = 0, bytes = 0;
    for (uint32_t c = 0; g && c < kiln_graph_ncalls(g); c++) {
        struct kiln_call_info ci;
        kiln_graph_call(g, c, &ci);
        flops += ci.flops;
        bytes += ci.bytes;
    }
    char where[400];
    if (cu)
        snprintf(where, sizeof where, "device: %s (%s), CUDA events, median of %d calls each",
                 kiln_cuda_name(cu), kiln_cuda_arch(cu), calls);
    else if (o->threads)
        snprintf(where, sizeof where, "threads: %d", (int)o->threads);
    else
        snprintf(where, sizeof where, "threads: all cores");
    printf("bench: %.6g ms per call (median of %d, min %.6g ms, max %.6g ms; %s)\n", med * 1e3,
           o->repeat, tp[0] * 1e3, tp[o->repeat - 1] * 1e3, where);
    int64_t prep_bytes = meta_int(m, "prepared_bytes");
    printf("bench: prepare %.6g ms once (%.4g MB of weight-derived buffers); kiln_call, which "
           "recomputes them in every call: %.6g ms per call (median of %d)\n",
           t_prep * 1e3, prep_bytes > 0 ? (double)prep_bytes * 1e-6 : 0.0, med_call * 1e3,
           o->repeat);
    if (g)
        printf("bench: %.4g GFLOP/s, %.4g GB/s (%.6g GFLOP, %.6g MB per call)\n",
               flops / med * 1e-9, bytes / med * 1e-9, flops * 1e-9, bytes * 1e-6);
    int64_t       peak = meta_int(m, "peak_bytes"), ws = meta_int(m, "workspace_bytes");
    int64_t       unplanned = meta_int(m, "workspace_unplanned_bytes");
    struct rusage ru;
    double        rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1e-3 : -1;
    if (peak >= 0)
        printf("bench: memory %.4g MB peak per call%s (workspace %.4g MB, %.4g MB unplanned); "
               "max RSS %.4g MB\n",
               (double)peak * 1e-6, cu ? " on the device" : "", (double)ws * 1e-6,
               (double)unplanned * 1e-6, rss);
    else
        printf("bench: memory: max RSS %.4g MB (module metadata has no peak_bytes)\n", rss);
    free(t);
    free(tp);
    return 1;
}

/* ---- the command ---- */

/* The module's metadata "target" into buf ("?" when absent). */
static const char *
meta_target(const struct kiln_module *m, char *buf, size_t size)
{
    const char *js = kiln_module_metadata(m), *p = js ? strstr(js, "\"target\": \"") : NULL;
    size_t      len = 0;
    if (p) {
        p += strlen("\"target\": \"");
        while (p[len] && p[len] != '"' && len + 1 < size)
            len++;
    }
    snprintf(buf, size, "%.*s", (int)len, p && len ? p : "?");
    return buf;
}

/* Opens the CUDA device a cuda module runs on (device 0); 0 after reporting why not. */
static int
open_device(kiln_ctx *ctx, const struct kiln_module *m, const char *path, struct kiln_cuda **cu)
{
    char target[128];
    meta_target(m, target, sizeof target);
    if (kiln_module_device(m) != kDLCUDA) {
        fprintf(stderr,
                "kiln: error: cannot run %s (target \"%s\"): it runs on DLPack device type %d; "
                "kiln run provides CPU and CUDA memory only\n",
                path, target, (int)kiln_module_device(m));
        return 0;
    }
    if (kiln_cuda_open(ctx, 0, cu) == KILN_OK)
        return 1;
    const struct kiln_error *e = kiln_ctx_error(ctx);
    fprintf(stderr, "kiln: error: cannot run %s (target \"%s\"): %s\n", path, target,
            e ? e->msg : "cannot open CUDA device 0");
    return 0;
}

int
cmd_run(int argc, char **argv)
{
    struct opts o;
    int         rc = parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;

    kiln_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    struct kiln_module *m = NULL;
    if (kiln_module_load(ctx, o.path, &m) != KILN_OK) {
        cli_report(ctx);
        kiln_ctx_free(ctx);
        return 1;
    }
    if (o.threads)
        kiln_module_set_num_threads(m, o.threads);
    struct kiln_cuda *cu = NULL;
    if (kiln_module_device(m) != kDLCPU && !open_device(ctx, m, o.path, &cu)) {
        kiln_module_free(m);
        kiln_ctx_free(ctx);
        return 1;
    }

    /* bufs: every tensor of the graph in its order (the module's source), the embedded
     * weights at their places; args: the n tensors the call takes */
    uint32_t       n = kiln_module_nargs(m), ne = kiln_module_nembedded(m), nt = n + ne;
    struct buffer *bufs = calloc(nt + 1, sizeof *bufs);
    DLTensor     **args = calloc(n + 1, sizeof *args);
    unsigned char *is_embedded = calloc(nt + 1, 1);
    rc = bufs && args && is_embedded ? 0 : 1;
    for (uint32_t i = 0; rc == 0 && i < ne; i++) {
        uint32_t      pos = 0;
        struct buffer b;
        if (!embedded_buffer(m, i, &b, &pos) || pos >= nt || is_embedded[pos]) {
            fprintf(stderr, "kiln: cannot read embedded weight %u of the module\n", i);
            free(b.vals);
            rc = 1;
        } else {
            bufs[pos] = b;
            is_embedded[pos] = 1;
        }
    }
    struct kiln_rng r = kiln_rng_new(o.seed);
    for (uint32_t i = 0, k = 0; rc == 0 && i < n; i++, k++) {
        while (is_embedded[k])
            k++;
        struct kiln_module_arg info;
        kiln_module_arg(m, i, &info);
        if (info.dtype == KILN_DTYPE_COUNT) {
            fprintf(stderr, "kiln: argument %u (%s) has a dtype kiln run cannot fill\n", i,
                    info.name);
            rc = 1;
        } else if (!alloc_buffer(ctx, cu, &bufs[k], &info)
                   || (info.role != KILN_ARG_OUTPUT && !fill_input(&bufs[k], &r))) {
            if (kiln_ctx_error(ctx))
                cli_report(ctx);
            else
                fprintf(stderr, "kiln: out of memory for argument %u (%s)\n", i, info.name);
            rc = 1;
        } else {
            if (info.role == KILN_ARG_OUTPUT)
                fill_output(&bufs[k]);
            args[i] = &bufs[k].t;
        }
    }
    for (uint32_t i = 0; cu && rc == 0 && i < nt; i++) /* guards, inputs, NaN outputs */
        if (bufs[i].dev
            && kiln_cuda_upload(ctx, cu, bufs[i].dev, bufs[i].base, bufs[i].total) != KILN_OK)
            rc = cli_report(ctx);
    struct kiln_graph *g = NULL;
    if (rc == 0 && (o.check || o.bench)) {
        g = module_graph(ctx, m, bufs, nt);
        if (!g && o.check)
            rc = 1;
        kiln_ctx_error_clear(ctx);
    }
    if (rc == 0 && kiln_module_call(ctx, m, args, (int32_t)n, NULL) != KILN_OK) {
        cli_report(ctx);
        rc = 1;
    }
    for (uint32_t i = 0; cu && rc == 0 && i < nt; i++)
        if (bufs[i].dev
            && kiln_cuda_download(ctx, cu, bufs[i].base, bufs[i].dev, bufs[i].total) != KILN_OK)
            rc = cli_report(ctx);
    for (uint32_t i = 0; rc == 0 && i < nt; i++) {
        struct buffer *b = &bufs[i];
        if (guards_broken(b)) {
            printf("FAIL: bytes around argument %u (%s) were written\n", i, b->info.name);
            rc = 1;
        }
        if (b->saved && memcmp(b->saved, b->data, (size_t)b->info.bytes)) {
            printf("FAIL: input %u (%s) was modified\n", i, b->info.name);
            rc = 1;
        }
    }
    if (rc == 0)
        printf("inputs: random, seed %llu%s\n", (unsigned long long)o.seed,
               ne ? " (weights: the module's own)" : "");
    for (uint32_t i = 0; rc == 0 && i < nt; i++) {
        struct buffer *b = &bufs[i];
        if (b->info.role != KILN_ARG_OUTPUT)
            continue;
        double   sum = 0, sq = 0;
        uint64_t h = KILN_HASH_SEED;
        for (int64_t k = 0; k < b->numel; k++) {
            double v = kiln_scalar_load(b->info.dtype, b->data, k);
            sum += v;
            sq += v * v;
            if (v == 0)
                v = 0; /* as kiln eval: -0 hashes as 0, every NaN alike */
            if (isnan(v))
                v = NAN;
            uint64_t bits;
            memcpy(&bits, &v, sizeof bits);
            h = kiln_hash_u64(h, bits);
        }
        char shape[256];
        printf("%s  %s%s  sum=%.12g  l2=%.12g  hash=%016llx\n", b->info.name,
               kiln_dtype_name(b->info.dtype),
               cli_shape(shape, sizeof shape, b->info.ndim, b->info.shape), sum, sqrt(sq),
               (unsigned long long)h);
    }
    if (rc == 0 && o.check) {
        int pass = run_check(ctx, g, bufs, nt);
        printf("%s\n", pass ? "PASS" : "FAIL");
        rc = pass ? 0 : 1;
    }
    if (rc == 0 && o.bench && !run_bench(ctx, cu, m, g, args, n, &o))
        rc = 1;

    for (uint32_t i = 0; bufs && i < nt; i++) {
        if (is_embedded && is_embedded[i])
            free(bufs[i].vals); /* its data is the module's */
        else
            free_buffer(cu, &bufs[i]);
    }
    free(is_embedded);
    free(bufs);
    free(args);
    kiln_cuda_close(cu);
    kiln_module_free(m);
    kiln_ctx_free(ctx);
    return rc;
}
