/* benchmarks/bench_gpu.c -- kiln's CUDA code next to cuBLAS and cuDNN on one GPU, in one run:
 * fp32 matmul 4096^3 against cublasSgemm, and ResNet-18's stride-1 3x3 convolutions (56^2 x 64,
 * 28^2 x 128, 14^2 x 256, 7^2 x 512 channels in and out, batch 1, NCHW) against
 * cudnnConvolutionForward with the fastest algorithm cudnnFindConvolutionForwardAlgorithm
 * finds. Plain fp32 on both sides: cuBLAS in CUBLAS_DEFAULT_MATH (no TF32: that would be
 * CUBLAS_TF32_TENSOR_OP_MATH), cuDNN's convolution in CUDNN_FMA_MATH and only algorithms
 * reported with that math type.
 *
 * kiln's side is compiled for the device's architecture (--target "cuda -arch=sm_XX") with the
 * best records of --db FILE for that target (kiln_graph_compile_tuned; --trials N first tunes
 * into it with kiln_graph_tune), else with the hand-written schedules of gpu_sched.c (kiln's
 * schedule-free default runs each kernel on one GPU thread: minutes per call here). The
 * module is loaded with kiln_module_load and called through the public API as a user would,
 * with device tensors of the public device API: kiln_module_prepare once (weight-derived
 * stages such as packed weights computed into device memory), then kiln_module_call_prepared.
 * Each workload's output is checked against the library's before timing:
 * max |kiln - library| / max |library| must be at most 1e-4.
 *
 * Timing: CUDA events (kiln_cuda_time: the median of --reps calls after a warm-up), rounds of
 * the three timings interleaved, the best round's median kept. A kiln call waits for its
 * kernels before it returns (include/kiln_abi.h), so the library is timed twice: each call
 * followed by a synchronisation as kiln's is (the "ratio", kiln GFLOP/s over the library's),
 * and its calls queued back to back as it is usually used ("ratio vs queued"). The geometric
 * mean of each ratio over the workloads ends the output.
 *
 * Without a GPU it stops at once with "bench_gpu: no CUDA driver (...)" and exit status 1.
 * --kiln-only times kiln's side alone (no library, no output check); --write-kg DIR writes the
 * workloads' graphs for `kiln tune` and exits.
 *
 * usage: bench_gpu [--db FILE] [--trials N] [--only NAME,...] [--reps N] [--rounds R]
 *                  [--kiln-only] [--write-kg DIR] */
#include "gpu_sched.h"
#include "kernel.h"

#include <cublas_v2.h>
#include <cudnn.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct workload {
    const char *name;
    bool        matmul; /* M = N = K = size */
    int         size;
    int         C, H; /* conv3x3: C in = K out channels, H = W */
};

static const struct workload workloads[] = {
    {"matmul4096", true, 4096, 0, 0},  {"conv3x3_56", false, 0, 64, 56},
    {"conv3x3_28", false, 0, 128, 28}, {"conv3x3_14", false, 0, 256, 14},
    {"conv3x3_7", false, 0, 512, 7},
};

struct opts {
    const char *db, *only, *write_kg;
    unsigned    trials;
    int         reps, rounds;
    bool        kiln_only; /* no library: kiln's time alone, unchecked */
};

/* One workload's buffers on the device and both sides' ways to compute it. */
struct run {
    const struct workload       *w;
    kiln_ctx                    *ctx;
    struct kiln_cuda            *cu;
    struct kiln_module          *m;
    struct kiln_prepared        *p;
    uint64_t                     dev[3]; /* input, weight, kiln's output */
    uint64_t                     ref;    /* the library's output */
    uint64_t                     ws;     /* cuDNN's workspace */
    size_t                       ws_bytes, bytes[3];
    DLTensor                     t[3];
    int64_t                      shape[3][4];
    cublasHandle_t               blas;
    cudnnHandle_t                dnn;
    cudnnTensorDescriptor_t      xd, yd;
    cudnnFilterDescriptor_t      wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t    algo;
    int                          lib_status; /* the library's last failure (0: none) */
    bool                         sync;       /* library calls wait for their kernels */
};

static const char *
msg(const kiln_ctx *ctx)
{
    const struct kiln_error *e = kiln_ctx_error(ctx);
    return e ? e->msg : "unknown error";
}

static bool
selected(const struct opts *o, const char *name)
{
    if (!o->only)
        return true;
    size_t n = strlen(name);
    for (const char *p = o->only; (p = strstr(p, name)); p += n)
        if ((p == o->only || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return true;
    return false;
}

static void
graph_text(const struct workload *w, char *buf, size_t size)
{
    if (w->matmul)
        gpu_matmul_kg(buf, size, w->size, w->size, w->size);
    else
        gpu_conv3x3_kg(buf, size, w->C, w->C, w->H, w->H);
}

static double
flops_of(const struct workload *w)
{
    if (w->matmul)
        return 2.0 * w->size * (double)w->size * w->size;
    return 2.0 * w->C * (double)w->C * 9 * w->H * w->H;
}

/* ---- the library's side ---- */

static enum kiln_status
lib_call(kiln_ctx *ctx, void *ud)
{
    struct run  *r = ud;
    const float  one = 1.0f, zero = 0.0f;
    const float *x = (const float *)(uintptr_t)r->dev[0], *wt = (const float *)(uintptr_t)r->dev[1];
    float       *y = (float *)(uintptr_t)r->ref;
    if (r->w->matmul) { /* row-major C = A B is column-major C^T = B^T A^T */
        int n = r->w->size;
        r->lib_status = (int)cublasSgemm(r->blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, wt, n, x,
                                         n, &zero, y, n);
    } else {
        r->lib_status =
            (int)cudnnConvolutionForward(r->dnn, &one, r->xd, x, r->wd, wt, r->cd, r->algo,
                                         (void *)(uintptr_t)r->ws, r->ws_bytes, &zero, r->yd, y);
    }
    if (r->lib_status != 0)
        return KILN_ERR_BACKEND;
    return r->sync ? kiln_cuda_sync(ctx, r->cu) : KILN_OK;
}

static const char *
lib_name(const struct workload *w)
{
    return w->matmul ? "cuBLAS" : "cuDNN";
}

static const char *
algo_name(cudnnConvolutionFwdAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
        return "implicit_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
        return "implicit_precomp_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
        return "gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
        return "direct";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
        return "fft";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
        return "fft_tiling";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
        return "winograd";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
        return "winograd_nonfused";
    default:
        return "?";
    }
}

/* cuDNN's descriptors and its fastest plain-fp32 algorithm for r's convolution. */
static bool
lib_setup_conv(struct run *r)
{
    const struct workload *w = r->w;
    cudnnStatus_t          s;
    if ((s = cudnnCreateTensorDescriptor(&r->xd)) || (s = cudnnCreateTensorDescriptor(&r->yd))
        || (s = cudnnCreateFilterDescriptor(&r->wd))
        || (s = cudnnCreateConvolutionDescriptor(&r->cd))
        || (s = cudnnSetTensor4dDescriptor(r->xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, w->C,
                                           w->H, w->H))
        || (s = cudnnSetTensor4dDescriptor(r->yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, w->C,
                                           w->H, w->H))
        || (s = cudnnSetFilter4dDescriptor(r->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, w->C, w->C,
                                           3, 3))
        || (s = cudnnSetConvolution2dDescriptor(r->cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT))
        || (s = cudnnSetConvolutionMathType(r->cd, CUDNN_FMA_MATH))) {
        fprintf(stderr, "bench_gpu: %s: cuDNN descriptors: %s\n", w->name, cudnnGetErrorString(s));
        return false;
    }
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int                           n = 0;
    s = cudnnFindConvolutionForwardAlgorithm(r->dnn, r->xd, r->wd, r->cd, r->yd,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf);
    if (s) {
        fprintf(stderr, "bench_gpu: %s: cudnnFindConvolutionForwardAlgorithm: %s\n", w->name,
                cudnnGetErrorString(s));
        return false;
    }
    for (int i = 0; i < n; i++) /* fastest first */
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH) {
            r->algo = perf[i].algo;
            r->ws_bytes = perf[i].memory;
            if (r->ws_bytes && kiln_cuda_alloc(r->ctx, r->cu, r->ws_bytes, &r->ws) != KILN_OK) {
                fprintf(stderr, "bench_gpu: %s: cuDNN's workspace: %s\n", w->name, msg(r->ctx));
                return false;
            }
            return true;
        }
    fprintf(stderr, "bench_gpu: %s: cuDNN found no algorithm in CUDNN_FMA_MATH\n", w->name);
    return false;
}

static void
lib_teardown(struct run *r)
{
    if (r->xd)
        cudnnDestroyTensorDescriptor(r->xd);
    if (r->yd)
        cudnnDestroyTensorDescriptor(r->yd);
    if (r->wd)
        cudnnDestroyFilterDescriptor(r->wd);
    if (r->cd)
        cudnnDestroyConvolutionDescriptor(r->cd);
    kiln_cuda_free(r->cu, r->ws);
}

/* ---- kiln's side ---- */

static enum kiln_status
kiln_prepared_call(kiln_ctx *ctx, void *ud)
{
    struct run *r = ud;
    DLTensor   *args[3] = {&r->t[0], &r->t[1], &r->t[2]};
    return kiln_module_call_prepared(ctx, r->m, r->p, args, 3, NULL);
}

/* Compiles w for target into a module (tuned from o->db, else the hand-written schedule). */
static bool
kiln_build(struct run *r, const struct opts *o, const char *target, char *how, size_t howsize)
{
    char               text[2048], path[512];
    struct kiln_graph *g = NULL;
    graph_text(r->w, text, sizeof text);
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/kiln_bench_gpu_%s_%d.so", tmp && *tmp ? tmp : "/tmp",
             r->w->name, (int)getpid());
    if (kiln_graph_parse(r->ctx, text, strlen(text), r->w->name, &g) != KILN_OK) {
        fprintf(stderr, "bench_gpu: %s: %s\n", r->w->name, msg(r->ctx));
        return false;
    }
    if (o->db && o->trials > 0) {
        struct kiln_tune_params tp = {.target = target, .db_path = o->db, .trials = o->trials};
        if (kiln_graph_tune(r->ctx, g, &tp) != KILN_OK) {
            fprintf(stderr, "bench_gpu: %s: tuning into %s: %s\n", r->w->name, o->db, msg(r->ctx));
            return false;
        }
    }
    /* with --db: its best records, unless it has none for this graph and target: then the
     * hand-written schedule (the schedule-free default would run one GPU thread per kernel) */
    const char *sched = r->w->matmul ? gpu_matmul_schedule : gpu_conv3x3_schedule, *json = NULL;
    uint32_t    ntuned = 0, ntasks = 0;
    if (o->db
        && kiln_graph_tuned_schedule(r->ctx, g, o->db, target, &json, &ntuned, &ntasks)
               != KILN_OK) {
        fprintf(stderr, "bench_gpu: %s: reading %s: %s\n", r->w->name, o->db, msg(r->ctx));
        return false;
    }
    bool                        tuned = o->db && ntuned > 0;
    struct kiln_compile_options opt = {.target = target,
                                       .schedule_json = tuned ? NULL : sched,
                                       .schedule_len = tuned ? 0 : strlen(sched),
                                       .name = r->w->name};
    enum kiln_status st = tuned ? kiln_graph_compile_tuned(r->ctx, g, &opt, o->db, path, &ntuned)
                                : kiln_graph_compile(r->ctx, g, &opt, path, NULL);
    if (st == KILN_OK)
        st = kiln_module_load(r->ctx, path, &r->m);
    unlink(path);
    if (st != KILN_OK) {
        fprintf(stderr, "bench_gpu: %s: compiling for %s: %s\n", r->w->name, target, msg(r->ctx));
        const struct kiln_error *e = kiln_ctx_error(r->ctx);
        if (e && e->detail)
            fprintf(stderr, "%s\n", e->detail);
        return false;
    }
    if (tuned)
        snprintf(how, howsize, "%u of %u task%s tuned from %s", ntuned, ntasks,
                 ntasks == 1 ? "" : "s", o->db);
    else if (o->db)
        snprintf(how, howsize, "no record in %s: hand-written schedule", o->db);
    else
        snprintf(how, howsize, "hand-written schedule");
    return true;
}

/* ---- one workload ---- */

struct result {
    double t_kiln, t_sync, t_queued, err; /* seconds per call; max relative error */
};

/* Sets up, checks and times r's workload; false after printing why it failed. */
static bool
run_workload(struct run *r, const struct opts *o, const char *target, struct result *res)
{
    const struct workload *w = r->w;
    char                   how[600];
    *res = (struct result){INFINITY, INFINITY, INFINITY, 0};
    if (!kiln_build(r, o, target, how, sizeof how))
        return false;
    int64_t n = w->size;
    if (w->matmul) {
        int64_t s[3][2] = {{n, n}, {n, n}, {n, n}};
        for (int i = 0; i < 3; i++)
            memcpy(r->shape[i], s[i], sizeof s[i]);
    } else {
        int64_t s[3][4] = {{1, w->C, w->H, w->H}, {w->C, w->C, 3, 3}, {1, w->C, w->H, w->H}};
        for (int i = 0; i < 3; i++)
            memcpy(r->shape[i], s[i], sizeof s[i]);
    }
    float *host[3] = {NULL, NULL, NULL}, *ref = NULL;
    bool   ok = true;
    for (int i = 0; i < 3 && ok; i++) {
        size_t numel = 1;
        for (int d = 0; d < (w->matmul ? 2 : 4); d++)
            numel *= (size_t)r->shape[i][d];
        r->bytes[i] = numel * sizeof(float);
        host[i] = bench_randv(numel, 11u + (unsigned)i);
        ok = host[i] && kiln_cuda_alloc(r->ctx, r->cu, r->bytes[i], &r->dev[i]) == KILN_OK
             && kiln_cuda_upload(r->ctx, r->cu, r->dev[i], host[i], r->bytes[i]) == KILN_OK;
        r->t[i] = (DLTensor){(void *)(uintptr_t)r->dev[i],
                             {kDLCUDA, 0},
                             w->matmul ? 2 : 4,
                             {kDLFloat, 32, 1},
                             r->shape[i],
                             NULL,
                             0};
    }
    ref = ok ? malloc(r->bytes[2]) : NULL;
    ok = ok && ref && kiln_cuda_alloc(r->ctx, r->cu, r->bytes[2], &r->ref) == KILN_OK;
    if (!ok)
        fprintf(stderr, "bench_gpu: %s: device buffers: %s\n", w->name, msg(r->ctx));
    DLTensor *args[3] = {&r->t[0], &r->t[1], &r->t[2]};
    if (ok && kiln_module_prepare(r->ctx, r->m, args, 3, &r->p, NULL) != KILN_OK) {
        fprintf(stderr, "bench_gpu: %s: kiln_module_prepare: %s\n", w->name, msg(r->ctx));
        ok = false;
    }
    if (ok && !w->matmul && !o->kiln_only)
        ok = lib_setup_conv(r);
    /* both once, then the check */
    r->sync = true;
    if (ok
        && (kiln_prepared_call(r->ctx, r) != KILN_OK
            || (!o->kiln_only && lib_call(r->ctx, r) != KILN_OK))) {
        if (r->lib_status)
            fprintf(stderr, "bench_gpu: %s: %s failed with status %d\n", w->name, lib_name(w),
                    r->lib_status);
        else
            fprintf(stderr, "bench_gpu: %s: %s\n", w->name, msg(r->ctx));
        ok = false;
    }
    ok = ok && kiln_cuda_download(r->ctx, r->cu, host[2], r->dev[2], r->bytes[2]) == KILN_OK
         && kiln_cuda_download(r->ctx, r->cu, ref, r->ref, r->bytes[2]) == KILN_OK;
    if (ok && !o->kiln_only) {
        res->err = bench_max_rel_err(host[2], ref, r->bytes[2] / sizeof(float));
        if (!(res->err <= 1e-4)) {
            fprintf(stderr,
                    "bench_gpu: %s: kiln's output differs from %s's: max rel err %.3g > 1e-4\n",
                    w->name, lib_name(w), res->err);
            ok = false;
        }
    }
    for (int round = 0; ok && round < o->rounds; round++) {
        double ms[3];
        r->sync = true;
        ms[1] = ms[2] = INFINITY;
        ok = kiln_cuda_time(r->ctx, r->cu, kiln_prepared_call, r, o->reps, &ms[0]) == KILN_OK
             && (o->kiln_only
                 || kiln_cuda_time(r->ctx, r->cu, lib_call, r, o->reps, &ms[1]) == KILN_OK);
        r->sync = false;
        ok = ok
             && (o->kiln_only
                 || kiln_cuda_time(r->ctx, r->cu, lib_call, r, o->reps, &ms[2]) == KILN_OK);
        if (!ok)
            fprintf(stderr, "bench_gpu: %s: timing: %s\n", w->name,
                    r->lib_status ? "the library failed" : msg(r->ctx));
        res->t_kiln = fmin(res->t_kiln, ms[0] * 1e-3);
        res->t_sync = fmin(res->t_sync, ms[1] * 1e-3);
        res->t_queued = fmin(res->t_queued, ms[2] * 1e-3);
    }
    if (ok && o->kiln_only) {
        printf("%-11s kiln %8.1f GFLOP/s  [kiln: %s]\n", w->name, flops_of(w) * 1e-9 / res->t_kiln,
               how);
        fflush(stdout);
    } else if (ok) {
        double f = flops_of(w) * 1e-9;
        char   extra[64] = "";
        if (!w->matmul)
            snprintf(extra, sizeof extra, ", algo %s", algo_name(r->algo));
        printf("%-11s kiln %8.1f GFLOP/s  %-6s %8.1f (queued %8.1f)  ratio %.2f (vs queued %.2f)  "
               "max rel err %.1e  [kiln: %s%s]\n",
               w->name, f / res->t_kiln, lib_name(w), f / res->t_sync, f / res->t_queued,
               res->t_sync / res->t_kiln, res->t_queued / res->t_kiln, res->err, how, extra);
        fflush(stdout);
    }
    for (int i = 0; i < 3; i++) {
        kiln_cuda_free(r->cu, r->dev[i]);
        free(host[i]);
    }
    kiln_cuda_free(r->cu, r->ref);
    free(ref);
    lib_teardown(r);
    kiln_module_prepared_free(r->m, r->p);
    kiln_module_free(r->m);
    return ok;
}

/* ---- main ---- */

static int
usage(void)
{
    fprintf(stderr, "usage: bench_gpu [--db FILE] [--trials N] [--only NAME,...] [--reps N] "
                    "[--rounds R] [--kiln-only] [--write-kg DIR]\n"
                    "workloads: matmul4096 conv3x3_56 conv3x3_28 conv3x3_14 conv3x3_7\n");
    return 2;
}

static bool
parse_int(const char *s, int lo, int hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* Writes every selected workload's graph to DIR/NAME.kg (for `kiln tune`). */
static int
write_graphs(const struct opts *o)
{
    if (mkdir(o->write_kg, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_gpu: cannot create %s: %s\n", o->write_kg, strerror(errno));
        return 1;
    }
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++) {
        if (!selected(o, workloads[i].name))
            continue;
        char text[2048], path[1024];
        graph_text(&workloads[i], text, sizeof text);
        snprintf(path, sizeof path, "%s/%s.kg", o->write_kg, workloads[i].name);
        FILE *f = fopen(path, "w");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "bench_gpu: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
        printf("%s\n", path);
    }
    return 0;
}

int
main(int argc, char **argv)
{
    struct opts o = {.reps = 30, .rounds = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int         n;
        if (!strcmp(a, "--kiln-only")) {
            o.kiln_only = true;
            continue;
        }
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--db"))
            o.db = v;
        else if (!strcmp(a, "--only"))
            o.only = v;
        else if (!strcmp(a, "--write-kg"))
            o.write_kg = v;
        else if (!strcmp(a, "--trials") && parse_int(v, 0, 1000000, &n))
            o.trials = (unsigned)n;
        else if (!strcmp(a, "--reps") && parse_int(v, 1, 100000, &n))
            o.reps = n;
        else if (!strcmp(a, "--rounds") && parse_int(v, 1, 1000, &n))
            o.rounds = n;
        else
            return usage();
    }
    if (o.trials && !o.db) {
        fprintf(stderr, "bench_gpu: --trials needs --db FILE to tune into\n");
        return 2;
    }
    size_t nsel = 0;
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++)
        nsel += selected(&o, workloads[i].name);
    if (!nsel) {
        fprintf(stderr, "bench_gpu: --only %s names no workload\n", o.only);
        return usage();
    }
    if (o.write_kg)
        return write_graphs(&o);

    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_cuda *cu = NULL;
    if (!ctx || kiln_cuda_open(ctx, 0, &cu) != KILN_OK) {
        fprintf(stderr, "bench_gpu: %s\n", ctx ? msg(ctx) : "out of memory");
        kiln_ctx_free(ctx);
        return 1;
    }
    cublasHandle_t blas = NULL;
    cudnnHandle_t  dnn = NULL;
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    cudnnStatus_t  ds = CUDNN_STATUS_SUCCESS;
    if (!o.kiln_only) {
        bs = cublasCreate(&blas);
        if (bs == CUBLAS_STATUS_SUCCESS)
            bs = cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH);
        ds = cudnnCreate(&dnn);
    }
    if (bs != CUBLAS_STATUS_SUCCESS || ds != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "bench_gpu: %s\n",
                bs != CUBLAS_STATUS_SUCCESS ? "cublasCreate or cublasSetMathMode failed"
                                            : cudnnGetErrorString(ds));
        kiln_cuda_close(cu);
        kiln_ctx_free(ctx);
        return 1;
    }
    char target[64];
    snprintf(target, sizeof target, "cuda -arch=%s", kiln_cuda_arch(cu));
    char libs[96] = "libraries not timed (--kiln-only)";
    if (!o.kiln_only) {
        int blas_version = 0;
        cublasGetVersion(blas, &blas_version);
        snprintf(libs, sizeof libs, "cuBLAS %d, cuDNN %zu", blas_version, cudnnGetVersion());
    }
    printf("device: %s (%s); kiln %s, target \"%s\", %s; %s; fp32, no TF32; median of %d "
           "calls (CUDA events), best of %d round%s\n",
           kiln_cuda_name(cu), kiln_cuda_arch(cu), KILN_VERSION, target,
           o.db ? "tuned records" : "hand-written schedules", libs, o.reps, o.rounds,
           o.rounds == 1 ? "" : "s");
    fflush(stdout);

    int    rc = 0, nratio = 0;
    double log_sync = 0, log_queued = 0;
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++) {
        if (!selected(&o, workloads[i].name))
            continue;
        struct run    r = {.w = &workloads[i], .ctx = ctx, .cu = cu, .blas = blas, .dnn = dnn};
        struct result res;
        if (!run_workload(&r, &o, target, &res)) {
            rc = 1;
            kiln_ctx_error_clear(ctx);
            continue;
        }
        if (!o.kiln_only) {
            log_sync += log(res.t_sync / res.t_kiln);
            log_queued += log(res.t_queued / res.t_kiln);
            nratio++;
        }
    }
    if (nratio)
        printf("geometric mean of kiln/library over %d workload%s: %.2f (library calls "
               "synchronised, as kiln's are), %.2f (library calls queued)\n",
               nratio, nratio == 1 ? "" : "s", exp(log_sync / nratio), exp(log_queued / nratio));
    if (dnn)
        cudnnDestroy(dnn);
    if (blas)
        cublasDestroy(blas);
    kiln_cuda_close(cu);
    kiln_ctx_free(ctx);
    return rc;
}
