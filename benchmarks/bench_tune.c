/* benchmarks/bench_tune.c -- kiln's autotuner against the libraries a user would pick instead,
 * in one run: each workload is tuned by kiln (records kept in a database, so a second run
 * resumes instead of starting over), compiled with its best records, checked against the
 * reference library's output and timed next to oneDNN (its best layout, weights reordered
 * ahead of time) and, for matmul, OpenBLAS, at 1 and 2 threads, batch 1, fp32.
 *
 * Workloads: matmul 1024^3 and 2048^3; ResNet-18's 3x3 convolutions at 56^2 (64 ch), 28^2
 * (128), 14^2 (256), 7^2 (512); its 1x1 stride-2 projection (128 -> 256, 28^2 -> 14^2); a
 * depthwise 3x3 (C=256, 28^2). It prints the geometric mean of kiln/oneDNN time ratios.
 *
 * With --compare it also tunes every workload twice more in separate databases, Ansor alone
 * for the full budget and Ansor+Droplet with Droplet starting after --droplet-after trials,
 * and prints each one's best time: the tuning-efficiency comparison Droplet search is about.
 * --compare-only runs that comparison alone (no tuning into --db, no timing against oneDNN).
 *
 * Each workload's tuning prints one line with its wall time ("NAME  tuning: ..."), and
 * --write-kg DIR writes each workload's graph to DIR/NAME.kg: what bench_metaschedule.py needs
 * to compile the same graph with the records of --db and time it next to TVM's kernel.
 *
 * usage: bench_tune [--trials N] [--db FILE] [--only NAME] [--reps N] [--rounds R]
 *                   [--compare | --compare-only] [--droplet-after N] [--threads-tune N]
 *                   [--layout nhwc|nchw] [--write-kg DIR] */
#include "kernel.h"
#include "ref.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct workload {
    const char *name;
    int         matmul; /* M = N = K = size */
    int         size;
    int         C, H, K, R, stride, pad, groups; /* convolution */
};

static const struct workload workloads[] = {
    {"matmul1024", 1, 1024, 0, 0, 0, 0, 0, 0, 0},
    {"matmul2048", 1, 2048, 0, 0, 0, 0, 0, 0, 0},
    {"conv3x3_56", 0, 0, 64, 56, 64, 3, 1, 1, 1},
    {"conv3x3_28", 0, 0, 128, 28, 128, 3, 1, 1, 1},
    {"conv3x3_14", 0, 0, 256, 14, 256, 3, 1, 1, 1},
    {"conv3x3_7", 0, 0, 512, 7, 512, 3, 1, 1, 1},
    {"conv1x1_s2", 0, 0, 128, 28, 256, 1, 2, 0, 1},
    {"depthwise3x3", 0, 0, 256, 28, 256, 3, 1, 1, 256},
};

static int
out_size(const struct workload *w)
{
    return (w->H + 2 * w->pad - w->R) / w->stride + 1;
}

/* One input coordinate of a window: "h * S + r - P", terms left out where they are 0. */
static void
window_idx(char *buf, size_t n, const char *o, const char *r, const struct workload *w)
{
    char s[32] = "", rr[32] = "", p[32] = "";
    if (w->stride > 1)
        snprintf(s, sizeof s, " * %d", w->stride);
    if (w->R > 1)
        snprintf(rr, sizeof rr, " + %s", r);
    if (w->pad)
        snprintf(p, sizeof p, " - %d", w->pad);
    snprintf(buf, n, "%s%s%s%s", o, s, rr, p);
}

/* The (ungrouped) convolution with channels-last activations (x [1, H, W, C], y [1, OH, OW,
 * K]; weights KCRS as oneDNN is given them), written as a compute definition: the zero padding
 * is a select on the window's bounds, as the library's NCHW conv2d writes it. */
static void
graph_text_nhwc(const struct workload *w, char *buf, size_t n)
{
    char hi[64], vi[64], cond[320] = "", xv[640];
    window_idx(hi, sizeof hi, "h", "r", w);
    window_idx(vi, sizeof vi, "v", "q", w);
    if (w->pad)
        snprintf(cond, sizeof cond, "%s >= 0 && %s < %d && %s >= 0 && %s < %d", hi, hi, w->H, vi,
                 vi, w->H);
    if (cond[0])
        snprintf(xv, sizeof xv, "select(%s, x[n, %s, %s, c], 0.0)", cond, hi, vi);
    else
        snprintf(xv, sizeof xv, "x[n, %s, %s, c]", hi, vi);
    int oh = out_size(w);
    snprintf(buf, n,
             "input x: f32[1, %d, %d, %d]\nweight w: f32[%d, %d, %d, %d]\n"
             "y[n, h, v, k] += %s * w[k, c, %s, %s] where h < %d, v < %d\noutput y\n",
             w->H, w->H, w->C, w->K, w->C, w->R, w->R, xv, w->R > 1 ? "r" : "0",
             w->R > 1 ? "q" : "0", oh, oh);
}

static void
graph_text(const struct workload *w, bool nhwc, char *buf, size_t n)
{
    if (!w->matmul && nhwc && w->groups == 1) {
        graph_text_nhwc(w, buf, n);
        return;
    }
    /* a channels-last depthwise convolution: the library's, as kiln_graph_channels_last
     * writes it in a network */
    const char *layout = nhwc ? ", layout=\"nhwc\"" : "";
    if (w->matmul) {
        snprintf(buf, n,
                 "input A: f32[%d, %d]\nweight B: f32[%d, %d]\nC[i, j] += A[i, k] * B[k, j]\n"
                 "output C\n",
                 w->size, w->size, w->size, w->size);
        return;
    }
    snprintf(buf, n,
             "input x: f32[1, %d, %d, %d]\nweight w: f32[%d, %d, %d, %d]\n"
             "y = conv2d(x, w, stride=%d, padding=%d, groups=%d%s)\noutput y\n",
             nhwc ? w->H : w->C, w->H, nhwc ? w->C : w->H, w->K, w->C / w->groups, w->R, w->R,
             w->stride, w->pad, w->groups, layout);
}

static double
flops_of(const struct workload *w)
{
    if (w->matmul)
        return 2.0 * w->size * (double)w->size * w->size;
    int oh = out_size(w);
    return 2.0 * w->K * (double)(w->C / w->groups) * w->R * w->R * oh * oh;
}

struct opts {
    uint32_t    trials, droplet_after;
    const char *db;
    const char *write_kg; /* directory for NAME.kg, or NULL */
    int         reps, rounds, threads_tune;
    bool        compare, compare_only;
    bool        nhwc; /* kiln's convolutions take and give channels-last activations */
};

/* dst[h, w, c] = src[c, h, w] (to 1) or the converse */
static void
transpose_chw(const float *src, float *dst, int C, int HW, bool to_hwc)
{
    for (int c = 0; c < C; c++)
        for (int i = 0; i < HW; i++) {
            if (to_hwc)
                dst[(size_t)i * C + c] = src[(size_t)c * HW + i];
            else
                dst[(size_t)c * HW + i] = src[(size_t)i * C + c];
        }
}

/* from the last progress report of the tuning in flight: trials done, best time */
static uint32_t last_trials;
static double   last_best_s;

static void
progress(void *ud, const struct kiln_tune_progress *p)
{
    const char *name = ud;
    last_trials = p->trials_done;
    last_best_s = p->ntask ? p->task[0].best_s : 0;
    if (p->trials_done % 50 && p->trials_done != p->trials_total)
        return;
    fprintf(stderr, "  [%s] trials %u/%u best %.1f us  elapsed %.0f s\n", name, p->trials_done,
            p->trials_total, p->ntask ? p->task[0].best_s * 1e6 : 0, p->elapsed_s);
}

static int
tune(const struct workload *w, const char *kg, const char *db, uint32_t trials,
     const char *strategy, uint32_t droplet_after, int threads)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g;
    if (kiln_graph_parse(ctx, kg, strlen(kg), w->name, &g) != KILN_OK) {
        kiln_ctx_free(ctx);
        return 1;
    }
    struct kiln_tune_params p = {.db_path = db,
                                 .trials = trials,
                                 .strategy = strategy,
                                 .droplet_after = droplet_after,
                                 .threads = threads,
                                 .build_workers = 1,
                                 .progress = progress,
                                 .progress_ud = (void *)w->name};
    int                     rc = kiln_graph_tune(ctx, g, &p) != KILN_OK;
    if (rc) {
        char msg[1024];
        kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        fprintf(stderr, "bench_tune: %s: %s\n", w->name, msg);
    }
    kiln_ctx_free(ctx);
    return rc;
}

struct best {
    double   best_s;
    uint32_t n;
};

static void
best_of(void *ud, const struct kiln_record_summary *s)
{
    struct best *b = ud;
    if (s->best_s > 0 && (b->best_s == 0 || s->best_s < b->best_s))
        b->best_s = s->best_s;
    b->n += s->records;
}

static double
db_best(const char *db)
{
    kiln_ctx   *ctx = kiln_ctx_new(NULL);
    struct best b = {0, 0};
    kiln_records_list(ctx, db, best_of, &b);
    kiln_ctx_free(ctx);
    return b.best_s;
}

static double
now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int
write_kg(const struct workload *w, const char *dir, const char *kg)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.kg", dir, w->name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "bench_tune: --write-kg: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    bool ok = fputs(kg, f) >= 0;
    if (fclose(f) || !ok) {
        fprintf(stderr, "bench_tune: --write-kg: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

/* The tuning-efficiency comparison: Ansor alone for --trials trials and Ansor+Droplet for
 * --droplet-after trials (Droplet from half of them), each into its own database. */
static int
compare(const struct workload *w, const struct opts *o, const char *kg, double flop)
{
    char da[512], dd[512];
    int  rc = 0;
    snprintf(da, sizeof da, "%s.ansor.db", o->db);
    snprintf(dd, sizeof dd, "%s.droplet.db", o->db);
    rc |= tune(w, kg, da, o->trials, "ansor", 0, o->threads_tune);
    rc |= tune(w, kg, dd, o->droplet_after, "ansor+droplet", o->droplet_after / 2, o->threads_tune);
    double ta = db_best(da), td = db_best(dd);
    printf("%-13s tuning efficiency: Ansor alone after %u trials %.1f GFLOP/s; "
           "Ansor+Droplet after %u trials %.1f GFLOP/s (%.2fx)\n",
           w->name, o->trials, ta > 0 ? flop / ta * 1e-9 : 0, o->droplet_after,
           td > 0 ? flop / td * 1e-9 : 0, ta > 0 && td > 0 ? ta / td : 0);
    fflush(stdout);
    return rc;
}

static int
run(const struct workload *w, const struct opts *o, double *ratio_dnnl)
{
    char kg[4096];
    bool nhwc = o->nhwc;
    graph_text(w, nhwc, kg, sizeof kg);
    if (o->write_kg && write_kg(w, o->write_kg, kg))
        return 1;
    if (o->compare_only)
        return compare(w, o, kg, flops_of(w));
    double t0 = now_s();
    last_trials = 0;
    last_best_s = 0;
    if (tune(w, kg, o->db, o->trials, NULL, o->droplet_after, o->threads_tune))
        return 1;
    /* records of this workload already in --db count towards --trials, so a resumed run
     * measures (and takes) less: "trials" counts them */
    printf("%-13s tuning: %.1f s wall, %d threads, %u trials, best measured %.1f us\n", w->name,
           now_s() - t0, o->threads_tune, last_trials, last_best_s * 1e6);
    fflush(stdout);
    struct kernel k;
    if (kernel_build(w->name, kg, NULL, o->db, &k))
        return 1;
    double flop = flops_of(w);
    int    rc = 0;
    if (w->matmul) {
        int           n = w->size;
        const int64_t sh[2] = {n, n};
        float        *A = bench_randv((size_t)n * n, 1), *B = bench_randv((size_t)n * n, 2);
        float        *C = bench_randv((size_t)n * n, 3), *R = bench_randv((size_t)n * n, 4);
        kernel_tensor(&k, 0, A, 2, sh);
        kernel_tensor(&k, 1, B, 2, sh);
        kernel_tensor(&k, 2, C, 2, sh);
        for (int th = 1; th <= 2; th++) {
            bench_set_threads(th);
            k.threads(th);
            kernel_run(&k);
            ref_blas_sgemm(n, n, n, A, B, R, 1);
            double err = bench_max_rel_err(C, R, (size_t)n * n);
            double tk = 1e9, tb = 1e9, td = 1e9;
            for (int r = 0; r < o->rounds; r++) {
                tk = fmin(tk, bench_median(kernel_run, &k, 1, o->reps));
                tb = fmin(tb, ref_blas_sgemm(n, n, n, A, B, R, o->reps));
                td = fmin(td, ref_dnnl_matmul(n, n, n, A, B, R, o->reps));
            }
            printf("%-13s threads %d  kiln %7.1f GFLOP/s  oneDNN %7.1f  OpenBLAS %7.1f  "
                   "kiln/oneDNN %.2f  kiln/OpenBLAS %.2f  (err %.1e)\n",
                   w->name, th, flop / tk * 1e-9, flop / td * 1e-9, flop / tb * 1e-9, td / tk,
                   tb / tk, err);
            ratio_dnnl[th - 1] = tk / td;
            rc |= err > 1e-4;
        }
        free(A), free(B), free(C), free(R);
    } else {
        int           oh = out_size(w);
        const int64_t sx[4] = {1, w->C, w->H, w->H}, sw[4] = {w->K, w->C / w->groups, w->R, w->R},
                      sy[4] = {1, w->K, oh, oh}, sxl[4] = {1, w->H, w->H, w->C},
                      syl[4] = {1, oh, oh, w->K};
        size_t nx = (size_t)w->C * w->H * w->H,
               nw = (size_t)w->K * (w->C / w->groups) * w->R * w->R, ny = (size_t)w->K * oh * oh;
        float *x = bench_randv(nx, 5), *wt = bench_randv(nw, 6), *y = bench_randv(ny, 7),
              *r = bench_randv(ny, 8), *xl = bench_randv(nx, 9), *yl = bench_randv(ny, 10);
        /* channels-last: the input is reordered before timing, as oneDNN's is into its layout */
        transpose_chw(x, xl, w->C, w->H * w->H, true);
        kernel_tensor(&k, 0, nhwc ? xl : x, 4, nhwc ? sxl : sx);
        kernel_tensor(&k, 1, wt, 4, sw);
        kernel_tensor(&k, 2, nhwc ? yl : y, 4, nhwc ? syl : sy);
        for (int th = 1; th <= 2; th++) {
            bench_set_threads(th);
            k.threads(th);
            kernel_run(&k);
            if (nhwc)
                transpose_chw(yl, y, w->K, oh * oh, false);
            ref_dnnl_conv(1, w->C, w->H, w->H, w->K, w->R, w->R, w->stride, w->pad, w->groups, x,
                          wt, r, 1);
            double err = bench_max_rel_err(y, r, ny);
            double tk = 1e9, td = 1e9;
            for (int i = 0; i < o->rounds; i++) {
                tk = fmin(tk, bench_median(kernel_run, &k, 2, o->reps));
                td = fmin(td, ref_dnnl_conv(1, w->C, w->H, w->H, w->K, w->R, w->R, w->stride,
                                            w->pad, w->groups, x, wt, r, o->reps));
            }
            printf("%-13s threads %d  kiln %7.1f GFLOP/s  oneDNN %7.1f  kiln/oneDNN %.2f  "
                   "(err %.1e)\n",
                   w->name, th, flop / tk * 1e-9, flop / td * 1e-9, td / tk, err);
            ratio_dnnl[th - 1] = tk / td;
            rc |= err > 1e-4;
        }
        free(x), free(wt), free(y), free(r), free(xl), free(yl);
    }
    if (o->compare)
        rc |= compare(w, o, kg, flop);
    dlclose(k.so);
    fflush(stdout);
    return rc;
}

int
main(int argc, char **argv)
{
    struct opts o = {1000, 300, "bench_tune.db", NULL, 15, 3, 2, false, false, true};
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool        v = i + 1 < argc;
        if (!strcmp(a, "--trials") && v)
            o.trials = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(a, "--droplet-after") && v)
            o.droplet_after = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(a, "--db") && v)
            o.db = argv[++i];
        else if (!strcmp(a, "--only") && v)
            only = argv[++i];
        else if (!strcmp(a, "--reps") && v)
            o.reps = atoi(argv[++i]);
        else if (!strcmp(a, "--rounds") && v)
            o.rounds = atoi(argv[++i]);
        else if (!strcmp(a, "--threads-tune") && v)
            o.threads_tune = atoi(argv[++i]);
        else if (!strcmp(a, "--write-kg") && v)
            o.write_kg = argv[++i];
        else if (!strcmp(a, "--layout") && v && !strcmp(argv[i + 1], "nchw"))
            o.nhwc = false, i++;
        else if (!strcmp(a, "--layout") && v && !strcmp(argv[i + 1], "nhwc"))
            o.nhwc = true, i++;
        else if (!strcmp(a, "--compare"))
            o.compare = true;
        else if (!strcmp(a, "--compare-only"))
            o.compare = o.compare_only = true;
        else {
            fprintf(stderr, "usage: bench_tune [--trials N] [--db FILE] [--only NAME[,NAME]] "
                            "[--reps N] [--rounds R] [--compare | --compare-only] "
                            "[--droplet-after N] [--threads-tune N] [--layout nhwc|nchw] "
                            "[--write-kg DIR]\n");
            return 2;
        }
    }
    if (!o.trials || o.reps < 1 || o.rounds < 1 || o.threads_tune < 1)
        return 2;
    printf("kiln's convolutions: %s activations, KCRS weights (packed by the schedule when it "
           "chooses); oneDNN: the layouts it chooses, reordered before timing\n",
           o.nhwc ? "channels-last (NHWC)" : "NCHW");
    double   logsum[2] = {0, 0};
    uint32_t n = 0;
    int      rc = 0;
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++) {
        const struct workload *w = &workloads[i];
        if (only && !strstr(only, w->name))
            continue;
        double r[2] = {1, 1};
        if (run(w, &o, r)) {
            rc = 1;
            continue;
        }
        if (o.compare_only)
            continue;
        logsum[0] += log(r[0]);
        logsum[1] += log(r[1]);
        n++;
    }
    if (n)
        printf("geometric mean time ratio kiln/oneDNN over %u workloads: %.2f (1 thread), %.2f "
               "(2 threads)  (goal <= 1.0)\n",
               n, exp(logsum[0] / n), exp(logsum[1] / n));
    return rc;
}
