/* tuner/runner/main.c -- kiln_measure_runner: loads one generated shared object, calls it once
 * on the job's inputs (the call whose outputs are checked), then times it, and reports on its
 * standard output (protocol: runner.h). It is started by tuner/measure.c with fork + exec, one
 * process per candidate, and may be killed at any moment: it owns no file and leaves nothing
 * behind. Standalone: libc, libdl, pthreads and OpenMP, and runtime/cuda_drv.c for the CUDA
 * driver (no libkiln).
 *
 * Before the first call, the OpenMP team the kernel's parallel loops will use is started and
 * run until a parallel region costs little (warm_team): the objects link the same OpenMP
 * runtime, so the kernel then finds its threads running. A fresh process's first regions
 * create the threads, and the scheduler may queue a new thread behind the one that waits for
 * it, so a region can take a whole scheduler tick (4 ms) until the thread moves to a free
 * core: on 2 cores, the first two calls of a 9 us kernel took 2 to 10 ms.
 *
 * What is called: the module's prepared call (include/kiln_abi.h): kiln_prepare once on the
 * job's arguments (untimed), then kiln_call_prepared for the checked call and every timed one,
 * so weight-derived stages (a schedule's packed weights) are not part of the measured latency,
 * as for a user with fixed weights. Modules without kiln_prepare are timed with kiln_call.
 *
 * Timing: WARMUP untimed calls, then REPEAT repeats; each repeat calls the kernel until
 * MIN_REPEAT_MS milliseconds have passed (at least once) and records the mean time per call.
 * With FLUSH 1, a buffer twice the size of the last-level cache is written before every call and
 * only the call itself is timed; MIN_REPEAT_MS then counts wall time, flushes included. FLUSH 2
 * evicts only the weights (arguments of role weight) and the prepared handle's buffers from every
 * cache level (clflush) before every call: inside a whole network a kernel's weights were last
 * read a whole call earlier, while its input was written just before it (TVM measures the same
 * way). Where clflush does not exist, FLUSH 2 falls back to FLUSH 1. The reply
 * holds the median and the standard deviation of the repeats. BUDGET_MS (80% of the run timeout)
 * bounds the warm-up and the repeats: a kernel too slow for all of them within it gets fewer (at
 * least one), not a timeout. The process's address space is limited to 3/4 of the physical memory
 * (except under sanitizers, and for modules of the cuda target, whose driver reserves address
 * space of the device's size). Modules of the cuda target are measured by cuda.c. */
#include "runner_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define RUNNER_CLFLUSH 1
#endif

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static void *g_prepared; /* from kiln_prepare, or NULL: plain kiln_call */

int32_t
runner_invoke(const struct runner *r, DLTensor *const *args, char *err, size_t errsize)
{
    return g_prepared ? r->call_prepared(g_prepared, args, (int32_t)r->h.nt, err, errsize)
                      : r->call(args, (int32_t)r->h.nt, err, errsize);
}

void
runner_prepare(const struct runner *r, DLTensor *const *args)
{
    char err[512] = "";
    if (!r->prepare) /* weight-derived buffers once, as a user with fixed weights has them */
        return;
    int32_t ps = r->prepare(args, (int32_t)r->h.nt, &g_prepared, err, sizeof err);
    if (ps != KILN_ABI_OK) {
        runner_reply.abi_status = ps;
        runner_fail(KILN_RUNNER_CALL, "%s", err[0] ? err : "kiln_prepare failed");
    }
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RUNNER_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RUNNER_SANITIZED 1
#endif

struct kiln_runner_reply runner_reply;
static int               out_fd = 1;

void
runner_put(const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(out_fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(4);
        c += w;
        n -= (size_t)w;
    }
}

void
runner_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(runner_reply.msg, sizeof runner_reply.msg, fmt, ap);
    va_end(ap);
    runner_reply.status = status;
    runner_reply.out_bytes = 0;
    runner_put(&runner_reply, sizeof runner_reply);
    _exit(0);
}

double
runner_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Evicts [p, p + n) from every cache level. */
static void
evict(const void *p, size_t n)
{
#if defined(RUNNER_CLFLUSH)
    const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63), *end = (const char *)p + n;
    for (; c < end; c += 64)
        _mm_clflush(c);
#else
    (void)p, (void)n;
#endif
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void
runner_finish(double *times, long n, const unsigned char *first, uint64_t out_total)
{
    runner_reply.nrepeat = (uint32_t)n;
    for (long r = 0; r < n && r < KILN_RUNNER_MAX_TIMES; r++)
        runner_reply.times[r] = times[r];
    if (n > 0) {
        double mean = 0, var = 0;
        for (long r = 0; r < n; r++)
            mean += times[r];
        mean /= (double)n;
        for (long r = 0; r < n; r++)
            var += (times[r] - mean) * (times[r] - mean);
        runner_reply.stddev_s = n > 1 ? sqrt(var / (double)(n - 1)) : 0;
        qsort(times, (size_t)n, sizeof *times, cmp_double);
        runner_reply.median_s = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
    }
    runner_reply.status = KILN_RUNNER_OK;
    runner_reply.out_bytes = out_total;
    runner_put(&runner_reply, sizeof runner_reply);
    runner_put(first, (size_t)out_total);
    /* _exit: no atexit handlers, no leak check of buffers the OS takes back anyway */
    _exit(0);
}

static long
arg_long(const char *s)
{
    char *end;
    long  v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < 0)
        runner_fail(KILN_RUNNER_SETUP, "bad runner argument '%s'", s);
    return v;
}

static unsigned char *
read_job(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        runner_fail(KILN_RUNNER_SETUP, "cannot open the job file %s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0)
        runner_fail(KILN_RUNNER_SETUP, "cannot seek in %s", path);
    long n = ftell(f);
    rewind(f);
    unsigned char *p = n > 0 ? malloc((size_t)n) : NULL;
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n)
        runner_fail(KILN_RUNNER_SETUP, "cannot read the job file %s", path);
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* Starts the OpenMP team of `threads` (0: OpenMP's default) and runs empty regions until three
 * in a row take under 50 us, for at most 50 ms (the file's comment says why). */
static void
warm_team(long threads)
{
    int n = threads > 0 ? (int)threads : omp_get_max_threads();
    if (n <= 1)
        return;
    double     t0 = runner_now();
    int        fast = 0;
    atomic_int sink = 0;
    while (fast < 3 && runner_now() - t0 < 0.05) {
        double t = runner_now();
#pragma omp parallel num_threads(n)
        atomic_fetch_add(&sink, 1);
        fast = runner_now() - t < 50e-6 ? fast + 1 : 0;
    }
}

/* A module of the CPU: host buffers, checked call, timing (the file's comment). */
static _Noreturn void
run_cpu(const struct runner *R, long repeat, long warmup)
{
    const struct kiln_runner_job *jh = &R->h;
    const struct kiln_abi_desc   *desc = R->desc;
    DLTensor                     *t = calloc(jh->nt, sizeof *t);
    DLTensor                    **args = calloc(jh->nt, sizeof *args);
    if (!t || !args)
        runner_fail(KILN_RUNNER_SETUP, "out of memory");
    size_t   off = sizeof *jh + 8 * (size_t)jh->nt;
    uint64_t out_total = 0;
    for (uint32_t i = 0; i < jh->nt; i++) {
        const struct kiln_abi_arg *a = &desc->args[i];
        size_t                     align = a->align > 64 ? a->align : 64;
        size_t                     size = ((size_t)R->bytes[i] + align - 1) / align * align;
        void                      *p = aligned_alloc(align, size ? size : align);
        if (!p)
            runner_fail(KILN_RUNNER_SETUP, "cannot allocate %lld bytes", (long long)R->bytes[i]);
        if (i < jh->nin) {
            if (off + (size_t)R->bytes[i] > R->jlen)
                runner_fail(KILN_RUNNER_SETUP, "the job file is truncated");
            memcpy(p, R->job + off, (size_t)R->bytes[i]);
            off += (size_t)R->bytes[i];
        } else {
            /* NaN in every float element (0xff bytes are a NaN of any width); 0xa5 else */
            memset(p, a->code == kDLFloat || a->code == kDLBfloat ? 0xff : 0xa5,
                   (size_t)R->bytes[i]);
            out_total += (uint64_t)R->bytes[i];
        }
        t[i] = (DLTensor){
            p, {kDLCPU, 0}, a->ndim, {a->code, a->bits, a->lanes}, (int64_t *)a->shape, NULL, 0};
        args[i] = &t[i];
    }

    char err[512] = "";
    runner_prepare(R, args);
    warm_team(R->threads);
    double  t_first = runner_now();
    int32_t st = runner_invoke(R, args, err, sizeof err);
    double  est = runner_now() - t_first; /* what one more call is expected to cost */
    if (st != KILN_ABI_OK) {
        runner_reply.abi_status = st;
        runner_fail(KILN_RUNNER_CALL, "%s", err[0] ? err : "kiln_call failed");
    }
    /* What is checked is the first call's outputs: keep them before timing overwrites them. */
    unsigned char *first = malloc(out_total ? (size_t)out_total : 1);
    if (!first)
        runner_fail(KILN_RUNNER_SETUP, "out of memory");
    size_t o = 0;
    for (uint32_t i = jh->nin; i < jh->nt; i++) {
        memcpy(first + o, t[i].data, (size_t)R->bytes[i]);
        o += (size_t)R->bytes[i];
    }

    long flush = R->flush;
#if !defined(RUNNER_CLFLUSH)
    if (flush == 2)
        flush = 1;
#endif
    /* FLUSH 2: what to evict, the weights and the prepared handle (include/kiln_abi.h) */
    const void **ev = NULL;
    size_t      *evn = NULL, nev = 0;
    if (flush == 2) {
        ev = calloc(jh->nin + 1, sizeof *ev);
        evn = calloc(jh->nin + 1, sizeof *evn);
        if (!ev || !evn)
            runner_fail(KILN_RUNNER_SETUP, "out of memory");
        for (uint32_t i = 0; i < jh->nin; i++)
            if (desc->args[i].role == KILN_ARG_WEIGHT && R->bytes[i] > 0) {
                ev[nev] = t[i].data;
                evn[nev++] = (size_t)R->bytes[i];
            }
        if (g_prepared && desc->kernel_phased && desc->prepared_bytes > 0) {
            ev[nev] = g_prepared;
            evn[nev++] = KILN_ABI_PREPARED_HEAD + (size_t)desc->prepared_bytes;
        }
    }
    /* Cache flushing buffer: twice the last-level cache (at least 8 MiB). */
    unsigned char *fbuf = NULL;
    size_t         fsize = 0;
    if (flush == 1) {
        long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (llc <= 0)
            llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
        fsize = 2 * (size_t)(llc > 0 ? llc : (16 << 20));
        if (fsize < (8u << 20))
            fsize = 8u << 20;
        fbuf = malloc(fsize);
        if (!fbuf)
            runner_fail(KILN_RUNNER_SETUP, "cannot allocate the cache flushing buffer");
    }
    if (R->hopeless > 0 && est > R->hopeless && runner_now() + est < R->soft_end) {
        /* a first call may have waited on a page fault or a preempted thread: one sample
         * decides nothing, so a second call must look hopeless too */
        double t1 = runner_now();
        runner_invoke(R, args, NULL, 0);
        est = fmin(est, runner_now() - t1);
    }
    if (R->hopeless > 0 && est > R->hopeless)
        warmup = 0, repeat = 1;
    for (long w = 0; w < warmup && runner_now() + est < R->soft_end; w++)
        runner_invoke(R, args, NULL, 0);
    double *times = calloc((size_t)repeat + 1, sizeof *times);
    if (!times)
        runner_fail(KILN_RUNNER_SETUP, "out of memory");
    volatile unsigned char sink = 0;
    long                   done = 0;
    for (long r = 0; r < repeat; r++) {
        double spent = 0, goal = (double)R->min_ms * 1e-3;
        if (r > 0 && runner_now() + (goal > est ? goal : est) > R->soft_end)
            break; /* a slow kernel: fewer repeats rather than a timeout */
        uint32_t calls = 0;
        if (flush == 2) {
            double wall0 = runner_now(); /* as below: calls timed, evictions in the wall time */
            do {
                for (size_t e = 0; e < nev; e++)
                    evict(ev[e], evn[e]);
#if defined(RUNNER_CLFLUSH)
                _mm_mfence();
#endif
                double t0 = runner_now();
                runner_invoke(R, args, NULL, 0);
                spent += runner_now() - t0;
                calls++;
            } while (runner_now() - wall0 < goal);
        } else if (fbuf) {
            /* only the calls are timed; the repeat ends after goal of wall time, flushes
             * included (a tiny kernel would otherwise need thousands of flushes) */
            double wall0 = runner_now();
            do {
                memset(fbuf, (int)(calls + (uint32_t)r), fsize);
                sink = fbuf[fsize / 2];
                double t0 = runner_now();
                runner_invoke(R, args, NULL, 0);
                spent += runner_now() - t0;
                calls++;
            } while (runner_now() - wall0 < goal);
        } else {
            double t0 = runner_now();
            do {
                runner_invoke(R, args, NULL, 0);
                calls++;
                spent = runner_now() - t0;
            } while (spent < goal);
        }
        times[r] = spent / calls;
        est = times[r];
        done = r + 1;
        runner_reply.ncalls = calls;
    }
    (void)sink;
    runner_finish(times, done, first, out_total);
}

int
main(int argc, char **argv)
{
    memcpy(runner_reply.magic, KILN_RUNNER_REPLY_MAGIC, 8);
    /* The reply goes to the original stdout; whatever the kernel prints goes to stderr. */
    out_fd = dup(1);
    if (out_fd < 0 || dup2(2, 1) < 0)
        return 3;
    struct runner R = {.start = runner_now()};
    if (argc == 2 && !strcmp(argv[1], "--cuda-probe"))
        runner_cuda_probe();
    if (argc != 9 && argc != 10)
        runner_fail(KILN_RUNNER_SETUP,
                    "usage: kiln_measure_runner JOB SO REPEAT WARMUP MIN_REPEAT_MS "
                    "FLUSH THREADS BUDGET_MS [HOPELESS_US] | --cuda-probe");
    R.repeat = arg_long(argv[3]);
    R.warmup = arg_long(argv[4]);
    R.min_ms = arg_long(argv[5]);
    R.flush = arg_long(argv[6]);
    R.threads = arg_long(argv[7]);
    /* past this, no further warm-up call or repeat is started (one repeat always is) */
    R.soft_end = R.start + 1e-3 * (double)arg_long(argv[8]);
    /* a first call slower than this cannot make the best: one repeat, no warm-up */
    R.hopeless = argc == 10 ? 1e-6 * (double)arg_long(argv[9]) : 0;

    size_t         jlen;
    unsigned char *job = read_job(argv[1], &jlen);
    if (jlen < sizeof R.h)
        runner_fail(KILN_RUNNER_SETUP, "the job file is truncated");
    memcpy(&R.h, job, sizeof R.h);
    if (memcmp(R.h.magic, KILN_RUNNER_JOB_MAGIC, 8) || R.h.nt == 0 || R.h.nt > 4096
        || R.h.nin > R.h.nt || jlen < sizeof R.h + 8 * (size_t)R.h.nt)
        runner_fail(KILN_RUNNER_SETUP, "the job file is not a kiln measurement job");
    int64_t *bytes = malloc(8 * (size_t)R.h.nt);
    if (!bytes)
        runner_fail(KILN_RUNNER_SETUP, "out of memory");
    memcpy(bytes, job + sizeof R.h, 8 * (size_t)R.h.nt);
    R.job = job;
    R.jlen = jlen;
    R.bytes = bytes;

    void *so = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!so)
        runner_fail(KILN_RUNNER_LOAD, "dlopen: %s", dlerror());
    const struct kiln_abi_desc *desc = dlsym(so, "kiln_desc");
    kiln_call_fn                call = (kiln_call_fn)dlsym(so, "kiln_call");
    kiln_set_num_threads_fn     set_threads =
        (kiln_set_num_threads_fn)dlsym(so, "kiln_set_num_threads");
    if (!desc || !call)
        runner_fail(KILN_RUNNER_LOAD, "%s is not a kiln module (no kiln_desc or kiln_call)",
                    argv[2]);
    if (desc->nargs != (int32_t)R.h.nt)
        runner_fail(KILN_RUNNER_LOAD, "the module takes %d tensors, the task has %u", desc->nargs,
                    R.h.nt);
    for (uint32_t i = 0; i < R.h.nt; i++) {
        const struct kiln_abi_arg *a = &desc->args[i];
        int64_t                    numel = 1;
        for (int32_t d = 0; d < a->ndim; d++)
            numel *= a->shape[d];
        int64_t want = numel * ((a->bits * a->lanes + 7) / 8);
        if (want != bytes[i])
            runner_fail(KILN_RUNNER_LOAD, "argument %u (%s) has %lld bytes, the task's has %lld", i,
                        a->name ? a->name : "?", (long long)want, (long long)bytes[i]);
    }
    R.desc = desc;
    R.call = call;
    /* the prepared call, where the module has one (modules older than it: kiln_call) */
    R.call_prepared = (kiln_call_prepared_fn)dlsym(so, "kiln_call_prepared");
    R.prepare = R.call_prepared ? (kiln_prepare_fn)dlsym(so, "kiln_prepare") : NULL;
    if (desc->device == kDLCUDA)
        runner_cuda(&R);

#if !defined(RUNNER_SANITIZED)
    /* A candidate that allocates more than 3/4 of the memory gets NULL (its kernel then
     * returns KILN_ABI_ERR_NOMEM) instead of pushing the machine into swap or the OOM killer.
     * Not under sanitizers: they reserve terabytes of address space for their shadow. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) {
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = (rlim_t)pages / 4 * 3 * (rlim_t)page;
        setrlimit(RLIMIT_AS, &rl);
    }
#endif
    if (set_threads)
        set_threads((int32_t)R.threads);
    run_cpu(&R, R.repeat, R.warmup);
}
