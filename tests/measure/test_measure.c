/* tests/measure/test_measure.c -- measurement (tuner/measure.c) and the records database
 * (tuner/db.c).
 *
 * Measurement: a small matrix product measured under valid schedules (results OK, positive
 * times, the repeat count honoured, outputs checked against the reference interpreter) and
 * under an illegal one (LOWER with the reason). Faulty candidates are planted through the
 * real path: hand-written shared objects (bad_module.c, built here with the C compiler) are
 * given as kiln_measure_input.so_path, so the runner process loads and calls them exactly as it
 * does generated code; each fault (wrong element, unwritten element, SIGSEGV, SIGILL, endless
 * loop, exit(3), abort, failed allocation) must come back as its error while the test process
 * and the other candidates of the batch carry on.
 *
 * The cuda target (gpu_*): candidates are programs of the GPU sketches, built into modules of
 * the cuda target (NVRTC) and measured by the runner on the device it opens. Without a GPU
 * (gpu_emulated) the fake driver tests/measure/fake_cuda.c runs their emulation
 * (tests/cuda_emu.h) on CPU threads, so the runner's device path and the modules' own launch
 * code run unchanged; faults planted in emulated modules (a wrong element, unwritten outputs,
 * SIGSEGV, a hung launch, a failed launch, an illegal address) come back as their errors. With
 * a CUDA driver, gpu_device measures GPU programs on the GPU; without one it skips ("no CUDA
 * driver"). */
#include "../../codegen/nvrtc.h"
#include "../../tuner/tuner.h"
#include "../abi/so_build.h"
#include "../cuda_emu.h"
#include "../harness.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

SO_BUILD_LSAN_SUPPRESSIONS

static const char mm_src[] = "input a: f32[5, 7]\n"
                             "weight b: f32[7, 3]\n"
                             "C[i, j] += a[i, k] * b[k, j]\n"
                             "output C\n";

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct env {
    char build[PATH_MAX];
    char tmp[64];
    char log[128];
};

static int
env_init(struct env *e)
{
    if (!so_build_dir(e->build, sizeof e->build)) {
        harness_fail(__FILE__, __LINE__, "cannot find the build directory");
        return 0;
    }
    snprintf(e->tmp, sizeof e->tmp, "/tmp/kiln-test-measure-XXXXXX");
    if (!mkdtemp(e->tmp)) {
        harness_fail(__FILE__, __LINE__, "mkdtemp failed");
        return 0;
    }
    snprintf(e->log, sizeof e->log, "%s/log", e->tmp);
    return 1;
}

static void
env_fini(struct env *e)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", e->tmp);
}

/* Number of entries named kiln-measure-* in dir (measurers' private directories). */
static int
count_measure_dirs(const char *dir)
{
    DIR *d = opendir(dir);
    int  n = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, "kiln-measure-", 13);
    closedir(d);
    return n;
}

static void
quick_opts(struct kiln_measure_opts *o, const struct env *e)
{
    kiln_measure_opts_default(o);
    o->repeat = 3;
    o->min_repeat_ms = 1;
    o->run_timeout_s = 10;
    o->build_timeout_s = 60;
    o->tmp_dir = e->tmp;
}

static struct kiln_measurer *
new_measurer(kiln_ctx *ctx, struct kiln_graph *g, const struct kiln_measure_opts *o)
{
    struct kiln_target    t;
    struct kiln_measurer *m = NULL;
    if (kiln_cg_target_parse(ctx, "llvm", &t) != KILN_OK
        || kiln_measurer_new(ctx, g, &t, o, opt_seed(), &m) != KILN_OK) {
        char msg[1024];
        kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        harness_fail(__FILE__, __LINE__, "kiln_measurer_new: %s", msg);
        return NULL;
    }
    return m;
}

static void
print_result(const char *what, const struct kiln_measure_result *r)
{
    printf("  %-28s %-8s %10.3g s (sd %.2g, %u repeats, build %.2f s, err %.2g) %s\n", what,
           kiln_measure_error_name[r->error], r->time_s, r->stddev_s, r->nrepeat, r->build_s,
           r->max_err, r->msg);
}

static void
check_ok(const struct kiln_measure_result *r, uint32_t repeat)
{
    CHECK_EQ_INT(KILN_MEASURE_OK, r->error);
    CHECK(r->time_s > 0);
    CHECK_EQ_INT(repeat, r->nrepeat);
    for (uint32_t i = 0; i < repeat && i < 16; i++)
        CHECK(r->times[i] > 0);
    CHECK(r->stddev_s >= 0);
    CHECK(r->max_err <= 1e-4);
}

/* ---- valid and illegal schedules ---- */

static const char *const good_scheds[] = {
    NULL,
    "{\"steps\": [{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [2]}]}",
    "{\"steps\": [{\"op\": \"tile\", \"stage\": \"C\", \"iters\": [\"i\", \"j\"], \"factors\": "
    "[2, 2]}, {\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"i.0\"}]}",
    "{\"steps\": [{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"k\", \"factors\": "
    "[2]}, {\"op\": \"unroll\", \"stage\": \"C\", \"iter\": \"k.1\"}]}",
};

static void
test_valid_and_illegal_schedules(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx                *ctx = kiln_ctx_new(NULL);
    struct kiln_graph       *g = PARSE(ctx, mm_src);
    struct kiln_measure_opts o;
    quick_opts(&o, &e);
    o.build_workers = 2;
    struct kiln_measurer *m = g ? new_measurer(ctx, g, &o) : NULL;
    if (m) {
        CHECK_EQ_STR("interpreter", kiln_measurer_reference(m));
        CHECK_EQ_INT(1, count_measure_dirs(e.tmp));
        enum { NG = KILN_COUNTOF(good_scheds) };
        struct kiln_measure_input in[NG + 2];
        for (uint32_t i = 0; i < NG; i++)
            in[i] = (struct kiln_measure_input){good_scheds[i], true, NULL};
        in[NG] = (struct kiln_measure_input){
            "{\"steps\": [{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"nosuch\", "
            "\"factors\": [2]}]}",
            true, NULL};
        in[NG + 1] = (struct kiln_measure_input){"{\"steps\": [", true, NULL};
        struct kiln_measure_result r[NG + 2];
        CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, NG + 2, r));
        for (uint32_t i = 0; i < NG + 2; i++) {
            char what[32];
            snprintf(what, sizeof what, "schedule %u", i);
            print_result(what, &r[i]);
        }
        for (uint32_t i = 0; i < NG; i++) {
            check_ok(&r[i], o.repeat);
            CHECK(r[i].build_s > 0);
        }
        CHECK_EQ_INT(KILN_MEASURE_LOWER, r[NG].error);
        CHECK(strstr(r[NG].msg, "nosuch") != NULL);
        CHECK_EQ_INT(0, r[NG].time_s);
        CHECK_EQ_INT(KILN_MEASURE_LOWER, r[NG + 1].error);
        CHECK(r[NG + 1].msg[0] != 0);
        /* the repeat count is honoured whatever it is */
        o.repeat = 7;
        kiln_measurer_free(m);
        m = new_measurer(ctx, g, &o);
        if (m) {
            CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, 1, r));
            check_ok(&r[0], 7);
        }
        kiln_measurer_free(m);
        CHECK_EQ_INT(0, count_measure_dirs(e.tmp)); /* the private directory is gone */
    }
    kiln_ctx_free(ctx);
    env_fini(&e);
}

/* ---- planted faults ---- */

struct fault {
    int         bad;
    const char *name;
    uint8_t     want;
    const char *msg; /* a substring of the message, or NULL */
};

static const struct fault faults[] = {
    {0, "correct", KILN_MEASURE_OK, NULL},
    {1, "wrong element", KILN_MEASURE_WRONG, "flat index 7"},
    {2, "unwritten element", KILN_MEASURE_WRONG, "never written"},
    {3, "SIGSEGV", KILN_MEASURE_CRASH, NULL},
    {4, "endless loop", KILN_MEASURE_TIMEOUT, "time limit"},
    {5, "exit(3)", KILN_MEASURE_CRASH, "status 3"},
    {6, "abort()", KILN_MEASURE_CRASH, NULL},
    {7, "huge allocation", KILN_MEASURE_RUNTIME, NULL},
    {8, "SIGILL", KILN_MEASURE_CRASH, NULL},
    {9, "0.9 x memory, untouched", KILN_MEASURE_RUNTIME, "allocated"},
    {10, "0.5 s per call", KILN_MEASURE_OK, NULL},        /* fewer repeats, no timeout */
    {11, "prepared call checked", KILN_MEASURE_OK, NULL}, /* kiln_call alone is wrong */
};

static int
build_bad(const struct env *e, int bad, char *so, size_t size)
{
    char cmd[PATH_MAX * 2 + 512];
    snprintf(so, size, "%s/bad%d.so", e->tmp, bad);
    int len =
        snprintf(cmd, sizeof cmd,
                 SO_BUILD_CC " -std=c11 -O1 -shared -fPIC -fopenmp" SO_BUILD_SAN
                             " -Iinclude -DBAD=%d tests/measure/bad_module.c -Wl,--whole-archive "
                             "'%s/libkiln_rt.a' -Wl,--no-whole-archive -o '%s'",
                 bad, e->build, so);
    if (len < 0 || (size_t)len >= sizeof cmd || so_build_run(cmd, e->log) != 0) {
        harness_fail(__FILE__, __LINE__, "building a planted module failed: %s", cmd);
        so_build_dump(e->log);
        return 0;
    }
    return 1;
}

static void
run_faults(bool interpreter_ref)
{
    struct env e;
    if (!env_init(&e))
        return;
    enum { NF = KILN_COUNTOF(faults) };
    char so[NF][PATH_MAX + 16];
    bool ok = true;
    for (uint32_t i = 0; i < NF && ok; i++)
        ok = build_bad(&e, faults[i].bad, so[i], sizeof so[i]);
    kiln_ctx                *ctx = kiln_ctx_new(NULL);
    struct kiln_graph       *g = ok ? PARSE(ctx, mm_src) : NULL;
    struct kiln_measure_opts o;
    quick_opts(&o, &e);
    o.run_timeout_s = 2;
    if (!interpreter_ref)
        o.ref_max_flops = 0; /* the default schedule compiled is the reference */
    struct kiln_measurer *m = g ? new_measurer(ctx, g, &o) : NULL;
    if (m) {
        CHECK_EQ_STR(interpreter_ref ? "interpreter" : "default schedule",
                     kiln_measurer_reference(m));
        /* every fault, then a valid schedule: the batch carries on after each */
        struct kiln_measure_input  in[NF + 1];
        struct kiln_measure_result r[NF + 1];
        for (uint32_t i = 0; i < NF; i++)
            in[i] = (struct kiln_measure_input){NULL, true, so[i]};
        in[NF] = (struct kiln_measure_input){good_scheds[2], true, NULL};
        double t0 = now();
        CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, NF + 1, r));
        double el = now() - t0;
        printf("  reference: %s; batch of %u took %.2f s\n", kiln_measurer_reference(m), NF + 1,
               el);
        for (uint32_t i = 0; i < NF; i++) {
            print_result(faults[i].name, &r[i]);
            uint8_t want = faults[i].want;
#if defined(SO_BUILD_ASAN)
            /* AddressSanitizer turns a refused huge allocation into a report and an exit */
            if (faults[i].bad == 7 && r[i].error == KILN_MEASURE_CRASH)
                want = KILN_MEASURE_CRASH;
            /* and the runner has no address-space limit there (the shadow needs it) */
            if (faults[i].bad == 9)
                want = r[i].error;
#endif
            if (r[i].error != want)
                harness_fail(__FILE__, __LINE__, "%s: want %s, got %s (%s)", faults[i].name,
                             kiln_measure_error_name[want], kiln_measure_error_name[r[i].error],
                             r[i].msg);
            if (want == KILN_MEASURE_OK && faults[i].bad == 10) {
                /* 2 s timeout: check call, warm-up, one repeat; no time for a second */
                CHECK(r[i].nrepeat >= 1 && r[i].nrepeat < o.repeat);
                CHECK(r[i].time_s >= 0.45 && r[i].time_s < 1);
            } else if (want == KILN_MEASURE_OK) {
                check_ok(&r[i], o.repeat);
            } else
                CHECK_EQ_INT(0, r[i].time_s);
            if (faults[i].msg && want == faults[i].want && !strstr(r[i].msg, faults[i].msg))
                harness_fail(__FILE__, __LINE__, "%s: message '%s' lacks '%s'", faults[i].name,
                             r[i].msg, faults[i].msg);
        }
        print_result("valid schedule after faults", &r[NF]);
        check_ok(&r[NF], o.repeat);
        /* a hopeless candidate (its first call slower than 0.1 s) gets one repeat, no
         * warm-up, even with the time for all of them (10 s); a fast one all its repeats */
        uint32_t slow = 0;
        while (slow < NF && faults[slow].bad != 10)
            slow++;
        if (slow < NF) {
            kiln_measurer_set_hopeless(m, 0.1);
            kiln_measurer_set_run_timeout(m, 10);
            in[0] = (struct kiln_measure_input){NULL, true, so[slow]};
            in[1] = (struct kiln_measure_input){good_scheds[2], true, NULL};
            CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, 2, r));
            print_result("hopeless 0.5 s per call", &r[0]);
            CHECK_EQ_INT(KILN_MEASURE_OK, r[0].error);
            CHECK_EQ_INT(1, r[0].nrepeat);
            CHECK(r[0].time_s >= 0.45 && r[0].time_s < 1);
            check_ok(&r[1], o.repeat);
            kiln_measurer_set_hopeless(m, 0);
            kiln_measurer_set_run_timeout(m, o.run_timeout_s);
        }
        /* the endless loop was killed at its deadline, not much later */
        CHECK(el < o.run_timeout_s + 20);
        /* and the planted objects are still there: the measurer removes only its own files */
        CHECK(access(so[0], R_OK) == 0);
    }
    kiln_measurer_free(m);
    CHECK_EQ_INT(0, count_measure_dirs(e.tmp));
    kiln_ctx_free(ctx);
    env_fini(&e);
}

static void
test_planted_faults(void)
{
    run_faults(true);
}

static void
test_planted_faults_default_schedule_reference(void)
{
    run_faults(false);
}

/* Number of processes whose command line mentions s. */
static int
count_procs_with(const char *s)
{
    DIR *d = opendir("/proc");
    int  n = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], buf[8192];
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            if (buf[i] == 0)
                buf[i] = ' ';
        buf[len] = 0;
        n += strstr(buf, s) != NULL;
    }
    closedir(d);
    return n;
}

/* A tuner killed while a candidate loops forever takes the runner with it. */
static void
test_killed_tuner_leaves_no_worker(void)
{
    struct env e;
    char       so[PATH_MAX + 16];
    if (!env_init(&e))
        return;
    if (!build_bad(&e, 4, so, sizeof so)) {
        env_fini(&e);
        return;
    }
    fflush(NULL);
    pid_t tuner = fork();
    if (tuner == 0) {
        kiln_ctx                *ctx = kiln_ctx_new(NULL);
        struct kiln_graph       *g = PARSE(ctx, mm_src);
        struct kiln_measure_opts o;
        quick_opts(&o, &e);
        o.run_timeout_s = 60;
        struct kiln_measurer      *m = g ? new_measurer(ctx, g, &o) : NULL;
        struct kiln_measure_input  in = {NULL, true, so};
        struct kiln_measure_result r;
        if (m)
            kiln_measure(m, &in, 1, &r);
        _exit(1);
    }
    int seen = 0;
    for (int i = 0; i < 200 && !seen; i++) { /* wait for the runner (up to 10 s) */
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
        seen = count_procs_with(e.tmp) >= 1; /* the runner's command line names e.tmp */
    }
    CHECK(seen);
    kill(tuner, SIGKILL);
    waitpid(tuner, NULL, 0);
    int left = -1;
    for (int i = 0; i < 40 && left != 0; i++) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
        left = count_procs_with(e.tmp);
    }
    CHECK_EQ_INT(0, left);
    env_fini(&e);
}

/* The tuner process has run OpenMP regions (XGBoost does) before it measures: the runner must
 * still run parallel kernels (a forked child of such a process hangs in GNU OpenMP). */
static void
test_parallel_after_openmp_in_parent(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g =
        PARSE(ctx, "input a: f32[64, 32]\nweight b: f32[32, 48]\nC[i, j] += a[i, k] * b[k, j]\n"
                   "output C\n");
    const char *par = "{\"steps\": [{\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"i\"}]}";
    char        so[PATH_MAX];
    snprintf(so, sizeof so, "%s/par.so", e.tmp);
    struct kiln_compile_options co = {NULL, par, strlen(par), "par"};
    struct kiln_module         *mod = NULL;
    if (g && kiln_graph_compile(ctx, g, &co, so, NULL) == KILN_OK
        && kiln_module_load(ctx, so, &mod) == KILN_OK) {
        /* one parallel call in this process */
        float    *buf = calloc(64 * 32 + 32 * 48 + 64 * 48, sizeof *buf);
        int64_t   sa[2] = {64, 32}, sb[2] = {32, 48}, sc[2] = {64, 48};
        DLTensor  ta = {buf, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sa, NULL, 0};
        DLTensor  tb = {buf + 64 * 32, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sb, NULL, 0};
        DLTensor  tc = {buf + 64 * 32 + 32 * 48, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sc, NULL, 0};
        DLTensor *args[3] = {&ta, &tb, &tc};
        kiln_module_set_num_threads(mod, 2);
        CHECK_EQ_INT(KILN_OK, kiln_module_call(ctx, mod, args, 3, NULL));
        free(buf);
        kiln_module_free(mod);
        struct kiln_measure_opts o;
        quick_opts(&o, &e);
        o.threads = 2;
        o.run_timeout_s = 5;
        struct kiln_measurer *m = new_measurer(ctx, g, &o);
        if (m) {
            struct kiln_measure_input  in = {par, true, NULL};
            struct kiln_measure_result r;
            CHECK_EQ_INT(KILN_OK, kiln_measure(m, &in, 1, &r));
            print_result("parallel, 2 threads", &r);
            check_ok(&r, o.repeat);
        }
        kiln_measurer_free(m);
    } else {
        char msg[1024];
        kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        harness_fail(__FILE__, __LINE__, "compiling the parallel module: %s", msg);
    }
    kiln_ctx_free(ctx);
    env_fini(&e);
}

/* Builds overlapping the timings, cache flushing, and a build past its deadline. */
static void
test_overlap_flush_build_timeout(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx                *ctx = kiln_ctx_new(NULL);
    struct kiln_graph       *g = PARSE(ctx, mm_src);
    struct kiln_measure_opts o;
    quick_opts(&o, &e);
    o.overlap = true;
    o.build_workers = 2;
    struct kiln_measurer *m = g ? new_measurer(ctx, g, &o) : NULL;
    if (m) {
        enum { N = 6 };
        struct kiln_measure_input  in[N];
        struct kiln_measure_result r[N];
        for (uint32_t i = 0; i < N; i++)
            in[i] = (struct kiln_measure_input){good_scheds[i % 3], true, NULL};
        CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, N, r));
        for (uint32_t i = 0; i < N; i++)
            check_ok(&r[i], o.repeat);
        kiln_measurer_free(m);
        /* cache flushing before every call */
        o.flush_cache = true;
        m = new_measurer(ctx, g, &o);
        if (m) {
            CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, 2, r));
            for (uint32_t i = 0; i < 2; i++) {
                print_result("flushing caches", &r[i]);
                check_ok(&r[i], o.repeat);
            }
        }
        kiln_measurer_free(m);
        /* the weights and prepared buffers alone evicted before every call */
        o.flush_cache = false;
        o.flush_weights = true;
        m = new_measurer(ctx, g, &o);
        if (m) {
            /* one with a packed weight: its prepared handle is evicted too */
            in[1].schedule_json = "{\"steps\": [{\"op\": \"pack\", \"stage\": \"b\", \"dim\": 1, "
                                  "\"factor\": 3, \"outer\": 0}]}";
            CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, N, r));
            for (uint32_t i = 0; i < N; i++) {
                print_result("evicting weights", &r[i]);
                check_ok(&r[i], o.repeat);
            }
        }
        kiln_measurer_free(m);
        o.flush_weights = false;
        o.build_timeout_s = 1e-3;
        m = new_measurer(ctx, g, &o);
        if (m) {
            CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, 2, r));
            for (uint32_t i = 0; i < 2; i++) {
                print_result("build past its deadline", &r[i]);
                CHECK_EQ_INT(KILN_MEASURE_TIMEOUT, r[i].error);
                CHECK(strstr(r[i].msg, "build") != NULL);
            }
        }
        kiln_measurer_free(m);
        CHECK_EQ_INT(0, count_measure_dirs(e.tmp));
    }
    kiln_ctx_free(ctx);
    env_fini(&e);
}

/* ---- the cuda target ---- */

#define GPU_TARGET "cuda -arch=sm_80"
#define GPU_MAXP   6

/* The schedule JSON (ctx-owned) of a program of each GPU sketch of g drawn from seed, at most
 * max; returns how many. */
static uint32_t
gpu_programs(kiln_ctx *ctx, const struct kiln_graph *g, uint64_t seed, const char **js,
             uint32_t max)
{
    struct kiln_target  t;
    struct kiln_hw      hw;
    struct kiln_sketch *sk;
    uint32_t            nsk = 0, n = 0;
    struct kiln_rng     r = kiln_rng_new(seed);
    if (kiln_cg_target_parse(ctx, GPU_TARGET, &t) != KILN_OK)
        return 0;
    kiln_hw_from_target(&t, &hw);
    if (kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) != KILN_OK)
        return 0;
    for (uint32_t s = 0; s < nsk && n < max; s++) {
        struct kiln_prog     p;
        struct kiln_schedule sc = {0};
        struct kiln_buf      b = {0};
        kiln_prog_sample(&sk[s], &r, &p);
        p.sketch = s;
        if (kiln_prog_schedule(ctx, g, &sk[s], &p, &sc) == KILN_OK
            && kiln_sched_to_json(ctx, &sc, &b) == KILN_OK) {
            printf("  program of GPU sketch %u [%s]\n", s, sk[s].desc);
            js[n++] = b.data;
        } else {
            harness_fail(__FILE__, __LINE__, "GPU sketch %u: %s", s, kiln_ctx_error(ctx)->msg);
        }
    }
    return n;
}

static struct kiln_measurer *
gpu_measurer(kiln_ctx *ctx, struct kiln_graph *g, const struct kiln_measure_opts *o)
{
    struct kiln_target    t;
    struct kiln_measurer *m = NULL;
    if (kiln_cg_target_parse(ctx, GPU_TARGET, &t) != KILN_OK
        || kiln_measurer_new(ctx, g, &t, o, opt_seed(), &m) != KILN_OK) {
        char msg[1024];
        kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        harness_fail(__FILE__, __LINE__, "kiln_measurer_new (cuda): %s", msg);
        return NULL;
    }
    return m;
}

static bool
have_nvrtc(void)
{
    if (kiln_nvrtc_available())
        return true;
    harness_skip("no NVRTC: modules of the cuda target cannot be built here");
    return false;
}

struct gpu_fault {
    const char *fault; /* tests/cuda_emu.h */
    uint8_t     want;
    const char *msg; /* a substring of the message, or NULL */
};

static const struct gpu_fault gpu_faults[] = {
    {"wrong", KILN_MEASURE_WRONG, "at flat index 0"},
    {"skip", KILN_MEASURE_WRONG, "never written"},
    {"crash", KILN_MEASURE_CRASH, NULL},
    {"hang", KILN_MEASURE_TIMEOUT, "time limit"},
    {"launch", KILN_MEASURE_RUNTIME, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {"fault", KILN_MEASURE_RUNTIME, "CUDA_ERROR_ILLEGAL_ADDRESS"},
};

/* Without a GPU: the probe finds the fake driver's device (and reports none when it has none);
 * the default schedule and a program of every GPU sketch of the matmul are built by NVRTC,
 * run emulated by the runner through the fake driver and checked against the reference
 * interpreter; planted faulty modules are each their error while the batch carries on; with
 * the default schedule as the reference, it is compiled for the host CPU. */
static void
test_gpu_emulated(void)
{
    if (!have_nvrtc())
        return;
    struct env e;
    if (!kiln_test_emu_use_fake_driver(true)) {
        harness_fail(__FILE__, __LINE__, "the fake CUDA driver is not built");
        return;
    }
    if (!env_init(&e))
        return;
    kiln_ctx                  *ctx = kiln_ctx_new(NULL);
    struct kiln_graph         *g = PARSE(ctx, mm_src);
    struct kiln_measure_device dev;
    CHECK_EQ_INT(KILN_OK, kiln_measure_cuda_device(ctx, NULL, &dev));
    printf("  device: %s, %s\n", dev.arch, dev.name);
    CHECK_EQ_STR("sm_80", dev.arch);
    CHECK(strstr(dev.name, "emulated") != NULL);
    setenv("KILN_FAKE_CUDA", "nodevice", 1);
    CHECK_EQ_INT(KILN_ERR_UNSUPPORTED, kiln_measure_cuda_device(ctx, NULL, &dev));
    printf("  without a device: %s\n", kiln_ctx_error(ctx)->msg);
    CHECK(!strncmp(kiln_ctx_error(ctx)->msg, "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE", 44));
    unsetenv("KILN_FAKE_CUDA");
    kiln_ctx_error_clear(ctx);

    struct kiln_measure_opts o;
    quick_opts(&o, &e);
    o.run_timeout_s = 5;
    o.build_workers = 2;
    o.build_hook = kiln_test_emu_hook;
    enum { NF = KILN_COUNTOF(gpu_faults) };
    const char                *js[GPU_MAXP];
    char                       so[NF][PATH_MAX + 16];
    struct kiln_measure_input  in[1 + GPU_MAXP + NF + 1];
    struct kiln_measure_result r[1 + GPU_MAXP + NF + 1];
    uint32_t                   np = g ? gpu_programs(ctx, g, opt_seed(), js, GPU_MAXP) : 0;
    struct kiln_measurer      *m = np ? gpu_measurer(ctx, g, &o) : NULL;
    CHECK(np >= 2);
    bool planted = m != NULL;
    for (uint32_t i = 0; i < NF && planted; i++) {
        struct kiln_compile_options co = {GPU_TARGET, js[0], strlen(js[0]), "kiln_candidate"};
        snprintf(so[i], sizeof so[i], "%s/%s.so", e.tmp, gpu_faults[i].fault);
        planted = kiln_graph_compile(ctx, g, &co, so[i], NULL) == KILN_OK
                  && kiln_test_emu_module(ctx, g, &co, so[i], gpu_faults[i].fault) == KILN_OK;
        if (!planted)
            harness_fail(__FILE__, __LINE__, "planting %s: %s", gpu_faults[i].fault,
                         kiln_ctx_error(ctx)->msg);
    }
    if (planted) {
        CHECK_EQ_STR("interpreter", kiln_measurer_reference(m));
        uint32_t n = 0;
        in[n++] = (struct kiln_measure_input){NULL, true, NULL}; /* one thread per kernel */
        for (uint32_t i = 0; i < np; i++)
            in[n++] = (struct kiln_measure_input){js[i], true, NULL};
        for (uint32_t i = 0; i < NF; i++)
            in[n++] = (struct kiln_measure_input){NULL, true, so[i]};
        in[n++] = (struct kiln_measure_input){js[np - 1], true, NULL};
        double t0 = now();
        CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, n, r));
        printf("  batch of %u took %.1f s\n", n, now() - t0);
        for (uint32_t i = 0; i <= np; i++) {
            print_result(i ? "GPU program" : "default schedule", &r[i]);
            check_ok(&r[i], o.repeat);
        }
        for (uint32_t i = 0; i < NF; i++) {
            const struct kiln_measure_result *q = &r[1 + np + i];
            print_result(gpu_faults[i].fault, q);
            if (q->error != gpu_faults[i].want)
                harness_fail(__FILE__, __LINE__, "%s: want %s, got %s (%s)", gpu_faults[i].fault,
                             kiln_measure_error_name[gpu_faults[i].want],
                             kiln_measure_error_name[q->error], q->msg);
            else if (gpu_faults[i].msg && !strstr(q->msg, gpu_faults[i].msg))
                harness_fail(__FILE__, __LINE__, "%s: message '%s' lacks '%s'", gpu_faults[i].fault,
                             q->msg, gpu_faults[i].msg);
            CHECK_EQ_INT(0, q->time_s);
        }
        print_result("GPU program after faults", &r[n - 1]);
        check_ok(&r[n - 1], o.repeat);
    }
    kiln_measurer_free(m);
    /* the default schedule as the reference: built for the host, and run there */
    o.ref_max_flops = 0;
    m = planted ? gpu_measurer(ctx, g, &o) : NULL;
    if (m) {
        CHECK_EQ_STR("default schedule (host CPU)", kiln_measurer_reference(m));
        in[0] = (struct kiln_measure_input){js[0], true, NULL};
        CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, 1, r));
        print_result("GPU program, CPU reference", &r[0]);
        check_ok(&r[0], o.repeat);
    }
    kiln_measurer_free(m);
    CHECK_EQ_INT(0, count_measure_dirs(e.tmp));
    kiln_ctx_free(ctx);
    env_fini(&e);
    kiln_test_emu_use_fake_driver(false);
}

/* With a CUDA driver and device: the default schedule and a program of every GPU sketch of the
 * matmul measured on the GPU, timed by CUDA events and checked against the reference
 * interpreter. Skips without a driver or device. */
static void
test_gpu_device(void)
{
    if (!have_nvrtc())
        return;
    kiln_test_emu_use_fake_driver(false);
    kiln_ctx                  *ctx = kiln_ctx_new(NULL);
    struct kiln_measure_device dev;
    if (kiln_measure_cuda_device(ctx, NULL, &dev) != KILN_OK) {
        char why[600];
        snprintf(why, sizeof why, "%s", kiln_ctx_error(ctx)->msg);
        kiln_ctx_free(ctx);
        harness_skip(why); /* "no CUDA driver (...)" or "no CUDA device (...)" */
        return;
    }
    printf("  device: %s, %s\n", dev.arch, dev.name);
    struct env e;
    if (!env_init(&e)) {
        kiln_ctx_free(ctx);
        return;
    }
    struct kiln_graph       *g = PARSE(ctx, mm_src);
    struct kiln_measure_opts o;
    quick_opts(&o, &e);
    const char                *js[GPU_MAXP];
    uint32_t                   np = g ? gpu_programs(ctx, g, opt_seed(), js, GPU_MAXP) : 0;
    struct kiln_measurer      *m = np ? gpu_measurer(ctx, g, &o) : NULL;
    struct kiln_measure_input  in[1 + GPU_MAXP];
    struct kiln_measure_result r[1 + GPU_MAXP];
    if (m) {
        in[0] = (struct kiln_measure_input){NULL, true, NULL};
        for (uint32_t i = 0; i < np; i++)
            in[1 + i] = (struct kiln_measure_input){js[i], true, NULL};
        CHECK_EQ_INT(KILN_OK, kiln_measure(m, in, 1 + np, r));
        for (uint32_t i = 0; i <= np; i++) {
            print_result(i ? "GPU program" : "default schedule", &r[i]);
            check_ok(&r[i], o.repeat);
        }
    }
    kiln_measurer_free(m);
    kiln_ctx_free(ctx);
    env_fini(&e);
}

static void
test_bad_options(void)
{
    kiln_ctx                *ctx = kiln_ctx_new(NULL);
    struct kiln_graph       *g = PARSE(ctx, mm_src);
    struct kiln_target       t;
    struct kiln_measure_opts o;
    struct kiln_measurer    *m = NULL;
    kiln_measure_opts_default(&o);
    o.runner = "/nonexistent/kiln_measure_runner";
    CHECK_EQ_INT(KILN_OK, kiln_cg_target_parse(ctx, "llvm", &t));
    CHECK(kiln_measurer_new(ctx, g, &t, &o, 1, &m) != KILN_OK);
    CHECK(m == NULL);
    CHECK(kiln_ctx_error(ctx) && strstr(kiln_ctx_error(ctx)->msg, "nonexistent"));
    kiln_ctx_error_clear(ctx);
    kiln_measure_opts_default(&o);
    o.repeat = 0;
    CHECK(kiln_measurer_new(ctx, g, &t, &o, 1, &m) == KILN_ERR_INVALID);
    kiln_ctx_free(ctx);
}

/* ---- records database ---- */

static char *
rand_str(kiln_ctx *ctx, struct kiln_rng *r, const char *prefix)
{
    /* quotes, backslashes, newlines and UTF-8 travel through SQLite and JSON unchanged */
    static const char *const bits[] = {"a", "\"", "\\", "\n", "\xc3\xa9", "{", " ", "x9"};
    char                     buf[128];
    int                      n = snprintf(buf, sizeof buf, "%s", prefix);
    for (uint64_t i = kiln_rng_below(r, 6); i > 0 && n < 100; i--)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s", bits[kiln_rng_below(r, 8)]);
    return kiln_arena_strdup(ctx, buf);
}

static struct kiln_record
rand_record(kiln_ctx *ctx, struct kiln_rng *r, const char *workload, const char *target)
{
    struct kiln_record rec = {0};
    rec.workload = workload;
    rec.target = target;
    rec.schedule = kiln_arena_printf(ctx,
                                     "{\"steps\": [{\"op\": \"parallel\", \"stage\": \"s%llu\", "
                                     "\"iter\": \"i\"}]}",
                                     (unsigned long long)kiln_rng_next(r) % 1000000000);
    rec.prog = kiln_rng_below(r, 3) ? rand_str(ctx, r, "prog") : NULL;
    rec.error = (uint8_t)(kiln_rng_below(r, 3) ? KILN_MEASURE_OK
                                               : 1 + kiln_rng_below(r, KILN_MEASURE_COUNT - 1));
    rec.time_s = rec.error ? 0 : 1e-6 + kiln_rng_uniform(r) * 1e-2;
    rec.stddev_s = rec.time_s * kiln_rng_uniform(r) * 0.1;
    rec.error_msg = rec.error ? rand_str(ctx, r, "msg") : NULL;
    rec.version = KILN_VERSION;
    rec.machine = rand_str(ctx, r, "machine");
    rec.timestamp = 1700000000 + (int64_t)kiln_rng_below(r, 100000000);
    rec.flops = (double)(1 + kiln_rng_below(r, 1u << 30)) * 3;
    rec.strategy = kiln_rng_below(r, 2) ? "ansor" : "droplet";
    return rec;
}

static bool
str_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static bool
record_same(const struct kiln_record *a, const struct kiln_record *b)
{
    return str_same(a->workload, b->workload) && str_same(a->target, b->target)
           && str_same(a->schedule, b->schedule) && str_same(a->prog, b->prog)
           && a->time_s == b->time_s && a->stddev_s == b->stddev_s && a->error == b->error
           && str_same(a->error_msg, b->error_msg) && str_same(a->version, b->version)
           && str_same(a->machine, b->machine) && a->timestamp == b->timestamp
           && a->flops == b->flops && str_same(a->strategy, b->strategy);
}

struct collect {
    kiln_ctx           *ctx;
    struct kiln_record *rec;
    uint32_t            n, cap, stop_after;
};

static bool
collect_one(void *ud, const struct kiln_record *r)
{
    struct collect    *c = ud;
    struct kiln_record copy = *r;
    const char       **f[] = {&copy.workload,  &copy.target,  &copy.schedule, &copy.prog,
                              &copy.error_msg, &copy.version, &copy.machine,  &copy.strategy};
    for (size_t i = 0; i < KILN_COUNTOF(f); i++)
        if (*f[i])
            *f[i] = kiln_arena_strdup(c->ctx, *f[i]);
    KILN_VEC_PUSH(c->ctx, c->rec, c->n, c->cap, copy);
    return c->stop_after == 0 || c->n < c->stop_after;
}

static const char *
db_error(kiln_ctx *ctx, char *buf, size_t size)
{
    kiln_error_format(kiln_ctx_error(ctx), buf, size);
    return buf;
}

static struct kiln_db *
open_db(kiln_ctx *ctx, const char *path)
{
    struct kiln_db *db = NULL;
    char            msg[1024];
    if (kiln_db_open(ctx, path, &db) != KILN_OK)
        harness_fail(__FILE__, __LINE__, "kiln_db_open(%s): %s", path,
                     db_error(ctx, msg, sizeof msg));
    return db;
}

static void
test_db_add_best_each_count(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    char            path[128];
    snprintf(path, sizeof path, "%s/records.db", e.tmp);
    struct kiln_db    *db = open_db(ctx, path);
    const char        *wl[2] = {"00000000000000aa", "00000000000000bb"}, *tg = "llvm -mcpu=x";
    struct kiln_record want[40];
    uint32_t           nw[2] = {0, 0};
    const struct kiln_record *best = NULL;
    for (uint32_t i = 0; db && i < 40; i++) {
        want[i] = rand_record(ctx, &r, wl[i % 2], tg);
        if (i == 5) { /* an error and a wrong answer with tiny times: never the best */
            want[i].error = KILN_MEASURE_WRONG;
            want[i].time_s = 1e-12;
        }
        if (i == 7) {
            want[i].error = KILN_MEASURE_CRASH;
            want[i].time_s = 1e-12;
        }
        CHECK_EQ_INT(KILN_OK, kiln_db_add(db, &want[i]));
        nw[i % 2]++;
        if (i % 2 == 1 && want[i].error == KILN_MEASURE_OK && want[i].time_s > 0
            && (!best || want[i].time_s < best->time_s))
            best = &want[i];
    }
    if (db) {
        CHECK_EQ_INT(40, kiln_db_count(db, NULL, NULL));
        CHECK_EQ_INT(nw[0], kiln_db_count(db, wl[0], NULL));
        CHECK_EQ_INT(nw[1], kiln_db_count(db, wl[1], tg));
        CHECK_EQ_INT(0, kiln_db_count(db, wl[1], "llvm -mcpu=other"));
        struct kiln_record got;
        CHECK(!kiln_db_best(db, "ffffffffffffffff", tg, &got));
        CHECK(kiln_db_best(db, wl[1], tg, &got) == (best != NULL));
        if (best)
            CHECK(record_same(best, &got));
        struct collect c = {ctx, NULL, 0, 0, 0};
        CHECK_EQ_INT(KILN_OK, kiln_db_each(db, wl[0], tg, collect_one, &c));
        CHECK_EQ_INT(nw[0], c.n);
        for (uint32_t i = 0; i < c.n; i++) /* insertion order, every field */
            CHECK(record_same(&want[2 * i], &c.rec[i]));
        struct collect stop = {ctx, NULL, 0, 0, 3};
        CHECK_EQ_INT(KILN_OK, kiln_db_each(db, NULL, NULL, collect_one, &stop));
        CHECK_EQ_INT(3, stop.n);
        /* defaults filled in on add; a record without a schedule is refused */
        struct kiln_record minimal = {.workload = "m", .target = "t", .schedule = "{}"};
        CHECK_EQ_INT(KILN_OK, kiln_db_add(db, &minimal));
        struct collect mc = {ctx, NULL, 0, 0, 0};
        CHECK_EQ_INT(KILN_OK, kiln_db_each(db, "m", "t", collect_one, &mc));
        CHECK_EQ_INT(1, mc.n);
        if (mc.n == 1) {
            CHECK_EQ_STR(KILN_VERSION, mc.rec[0].version);
            CHECK_EQ_STR(kiln_machine_desc(ctx), mc.rec[0].machine);
            CHECK(mc.rec[0].timestamp > 1600000000);
            CHECK(mc.rec[0].prog == NULL);
        }
        minimal.schedule = NULL;
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_db_add(db, &minimal));
        kiln_ctx_error_clear(ctx);
        printf("  machine: %s\n", kiln_machine_desc(ctx));
        /* reopening keeps everything */
        kiln_db_close(db);
        db = open_db(ctx, path);
        CHECK_EQ_INT(41, db ? kiln_db_count(db, NULL, NULL) : 0);
        struct collect again = {ctx, NULL, 0, 0, 0};
        CHECK_EQ_INT(KILN_OK, db ? kiln_db_each(db, wl[0], tg, collect_one, &again) : KILN_OK);
        CHECK_EQ_INT(nw[0], again.n);
        for (uint32_t i = 0; i < again.n && i < c.n; i++)
            CHECK(record_same(&c.rec[i], &again.rec[i]));
    }
    kiln_db_close(db);
    kiln_ctx_free(ctx);
    env_fini(&e);
}

/* A schedule measured several times (the tuner re-measures each new best) counts with the
 * mean of its times, one that failed any measurement is never the best, and in every other
 * workload some records are a final selection's, whose schedules rank first: random schedules
 * with one to three measurements each, against the ranking computed here. */
static void
test_db_best_mean(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    char            path[128];
    snprintf(path, sizeof path, "%s/mean.db", e.tmp);
    struct kiln_db *db = open_db(ctx, path);
    for (int trial = 0; db && trial < 20; trial++) {
        char wl[32];
        snprintf(wl, sizeof wl, "%016x", trial);
        enum { NS = 12 };
        double   sum[NS] = {0};
        uint32_t n[NS] = {0};
        bool     failed[NS] = {false}, fin[NS] = {false};
        /* one lucky time: the lowest single measurement, whose schedule's mean is not best */
        uint32_t lucky = kiln_rng_below(&r, NS);
        for (uint32_t k = 0; k < 3 * NS; k++) {
            uint32_t           i = k < NS ? k : kiln_rng_below(&r, NS);
            struct kiln_record rec = rand_record(ctx, &r, wl, "llvm");
            rec.schedule = kiln_arena_printf(ctx, "{\"steps\": [%u]}", i);
            rec.error = kiln_rng_below(&r, 10) ? KILN_MEASURE_OK : KILN_MEASURE_WRONG;
            rec.time_s = rec.error ? 0 : 1e-3 * (1 + kiln_rng_uniform(&r));
            if (i == lucky || k == 3 * NS - 1) { /* the last one re-measures it */
                i = lucky;
                rec.schedule = kiln_arena_printf(ctx, "{\"steps\": [%u]}", i);
                rec.error = KILN_MEASURE_OK;
                rec.time_s = n[i] ? 0.1 : 1e-4;
            } else if (trial % 2 && !kiln_rng_below(&r, 4)) {
                rec.strategy = "final";
            }
            CHECK_EQ_INT(KILN_OK, kiln_db_add(db, &rec));
            failed[i] |= rec.error != KILN_MEASURE_OK;
            fin[i] |= !strcmp(rec.strategy, "final");
            sum[i] += rec.time_s;
            n[i]++;
        }
        int    want = -1;
        double want_t = 0;
        bool   any_fin = false;
        for (int i = 0; i < NS; i++)
            any_fin |= fin[i] && !failed[i];
        for (int i = 0; i < NS; i++)
            if (!failed[i] && (fin[i] || !any_fin) && (want < 0 || sum[i] / n[i] < want_t)) {
                want = i;
                want_t = sum[i] / n[i];
            }
        struct kiln_record got;
        bool               found = kiln_db_best(db, wl, "llvm", &got);
        CHECK(found == (want >= 0));
        if (found && want >= 0) {
            char s[64];
            snprintf(s, sizeof s, "{\"steps\": [%d]}", want);
            CHECK_EQ_STR(s, got.schedule);
            CHECK_NEAR(want_t, got.time_s, 1e-12);
            CHECK(want != (int)lucky);
        }
    }
    kiln_db_close(db);
    kiln_ctx_free(ctx);
    env_fini(&e);
}

/* A writer killed mid-way loses nothing it committed, and the file stays usable. */
static void
test_db_killed_writer(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    char path[128];
    snprintf(path, sizeof path, "%s/killed.db", e.tmp);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    uint32_t        kill_at = 10 + (uint32_t)kiln_rng_below(&r, 40);
    int             fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        kiln_ctx       *ctx = kiln_ctx_new(NULL);
        struct kiln_db *db = NULL;
        if (kiln_db_open(ctx, path, &db) != KILN_OK)
            _exit(2);
        struct kiln_rng cr = kiln_rng_new(opt_seed());
        for (uint32_t i = 0;; i++) {
            if (i == kill_at)
                raise(SIGKILL); /* mid-way: the connection is open, the WAL not checkpointed */
            struct kiln_record rec = rand_record(ctx, &cr, "k", "t");
            if (kiln_db_add(db, &rec) != KILN_OK)
                _exit(3);
            uint32_t done = i + 1;
            if (write(fds[1], &done, sizeof done) != sizeof done)
                _exit(4);
        }
    }
    close(fds[1]);
    uint32_t committed = 0, v;
    while (read(fds[0], &v, sizeof v) == sizeof v)
        committed = v;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK_EQ_INT(kill_at, committed);
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_db *db = open_db(ctx, path);
    if (db) {
        CHECK_EQ_INT(committed, kiln_db_count(db, "k", "t"));
        struct kiln_rng cr = kiln_rng_new(opt_seed());
        struct collect  c = {ctx, NULL, 0, 0, 0};
        CHECK_EQ_INT(KILN_OK, kiln_db_each(db, "k", "t", collect_one, &c));
        for (uint32_t i = 0; i < c.n; i++) {
            struct kiln_record want = rand_record(ctx, &cr, "k", "t");
            CHECK(record_same(&want, &c.rec[i]));
        }
        struct kiln_record more = rand_record(ctx, &r, "k", "t");
        CHECK_EQ_INT(KILN_OK, kiln_db_add(db, &more));
        CHECK_EQ_INT(committed + 1, kiln_db_count(db, "k", "t"));
    }
    printf("  writer killed after %u committed records; all found\n", committed);
    kiln_db_close(db);
    kiln_ctx_free(ctx);
    env_fini(&e);
}

struct bad_seen {
    uint32_t n, line[2];
    char     why[256];
};

static void
note_bad(void *ud, uint32_t line, const char *why)
{
    struct bad_seen *b = ud;
    if (b->n < 2)
        b->line[b->n] = line;
    if (!b->n++)
        snprintf(b->why, sizeof b->why, "%s", why);
}

static void
test_db_export_import(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    char            p1[128], p2[128], jl[128];
    snprintf(p1, sizeof p1, "%s/a.db", e.tmp);
    snprintf(p2, sizeof p2, "%s/b.db", e.tmp);
    snprintf(jl, sizeof jl, "%s/a.jsonl", e.tmp);
    struct kiln_db *a = open_db(ctx, p1), *b = open_db(ctx, p2);
    if (a && b) {
        for (uint32_t i = 0; i < 30; i++) {
            struct kiln_record rec =
                rand_record(ctx, &r, i % 3 ? "00000000000000a1" : "00000000000000a2", "t");
            CHECK_EQ_INT(KILN_OK, kiln_db_add(a, &rec));
        }
        FILE *f = fopen(jl, "w");
        CHECK(f != NULL);
        if (f) {
            CHECK_EQ_INT(KILN_OK, kiln_db_export_jsonl(a, f));
            fclose(f);
        }
        size_t   len = 0;
        char    *text = read_file(jl, &len);
        uint32_t added = 0, lines = 0;
        CHECK(text != NULL);
        for (size_t i = 0; text && i < len; i++)
            lines += text[i] == '\n';
        CHECK_EQ_INT(30, lines);
        CHECK_EQ_INT(KILN_OK, kiln_db_import_jsonl(b, jl, text, len, NULL, NULL, &added));
        CHECK_EQ_INT(30, added);
        struct collect ca = {ctx, NULL, 0, 0, 0}, cb = {ctx, NULL, 0, 0, 0};
        CHECK_EQ_INT(KILN_OK, kiln_db_each(a, NULL, NULL, collect_one, &ca));
        CHECK_EQ_INT(KILN_OK, kiln_db_each(b, NULL, NULL, collect_one, &cb));
        CHECK_EQ_INT(ca.n, cb.n);
        for (uint32_t i = 0; i < ca.n && i < cb.n; i++)
            if (!record_same(&ca.rec[i], &cb.rec[i]))
                harness_fail(__FILE__, __LINE__, "record %u differs after export + import", i);
        /* importing again adds nothing: every line is a duplicate */
        CHECK_EQ_INT(KILN_OK, kiln_db_import_jsonl(b, jl, text, len, NULL, NULL, &added));
        CHECK_EQ_INT(0, added);
        CHECK_EQ_INT(30, kiln_db_count(b, NULL, NULL));
        /* a bad line is reported by its line and not imported; the good lines are */
#define GOOD_FIELDS                                                                            \
    "\"workload\": \"0123456789abcdef\", \"target\": \"t\", \"schedule\": \"{\\\"steps\\\": "  \
    "[]}\", "                                                                                  \
    "\"prog\": null, \"time_s\": 1, \"stddev_s\": 0, \"error\": \"ok\", \"error_msg\": null, " \
    "\"version\": \"0.1.0\", \"machine\": \"m\", \"timestamp\": 1700000000, \"flops\": 1, "    \
    "\"strategy\": \"s\"}"
#define GOOD_LINE "{" GOOD_FIELDS
        static const char *const bad[] = {
            "{\"workload\": 1}",
            "not json",
            "[1, 2]",
            "{\"workload\": \"0123456789abcdef\", \"target\": \"t\", \"schedule\": \"{}\", "
            "\"prog\": null, "
            "\"time_s\": 1, \"stddev_s\": 0, \"error\": \"exploded\", \"error_msg\": null, "
            "\"version\": \"0.1.0\", \"machine\": \"m\", \"timestamp\": 1700000000, \"flops\": 1, "
            "\"strategy\": \"s\"}",
            /* strict JSON: trailing text, a key twice, a NUL, an unknown key */
            GOOD_LINE " x",
            GOOD_LINE "{}",
            "{\"workload\": \"0123456789abcdef\", " GOOD_FIELDS,
            "{\"strategy\": \"de\\u0000fault\", " GOOD_FIELDS,
            "{\"tme_s\": 1, " GOOD_FIELDS,
            /* values: a zero time without an error, a negative one, an empty or malformed
             * workload, an empty target, a schedule that does not parse, null, infinity */
            "{\"time_s\": 0, \"workload\": \"0123456789abcdef\", \"target\": \"t\", \"schedule\": "
            "\"{}\", \"stddev_s\": 0, \"error\": \"ok\", \"version\": \"0.1.0\", \"machine\": "
            "\"m\", "
            "\"timestamp\": 1700000000, \"flops\": 1, \"strategy\": \"s\"}",
            "{\"time_s\": -1, \"workload\": \"0123456789abcdef\", \"target\": \"t\", \"schedule\": "
            "\"{}\", \"stddev_s\": 0, \"error\": \"crash\", \"version\": \"0.1.0\", \"machine\": "
            "\"m\", "
            "\"timestamp\": 1700000000, \"flops\": 1, \"strategy\": \"s\"}",
            "{\"workload\": \"\", \"target\": \"t\", \"schedule\": \"{}\", \"time_s\": 1, "
            "\"stddev_s\": 0, \"error\": \"ok\", \"version\": \"0.1.0\", \"machine\": \"m\", "
            "\"timestamp\": 1700000000, \"flops\": 1, \"strategy\": \"s\"}",
            "{\"workload\": \"w1\", \"target\": \"t\", \"schedule\": \"{}\", \"time_s\": 1, "
            "\"stddev_s\": 0, \"error\": \"ok\", \"version\": \"0.1.0\", \"machine\": \"m\", "
            "\"timestamp\": 1700000000, \"flops\": 1, \"strategy\": \"s\"}",
            "{\"target\": \"\", \"workload\": \"0123456789abcdef\", \"schedule\": \"{}\", "
            "\"time_s\": "
            "1, \"stddev_s\": 0, \"error\": \"ok\", \"version\": \"0.1.0\", \"machine\": \"m\", "
            "\"timestamp\": 1700000000, \"flops\": 1, \"strategy\": \"s\"}",
            "{\"schedule\": \"{\\\"steps\\\": [{\\\"op\\\": \\\"frob\\\"}]}\", \"workload\": "
            "\"0123456789abcdef\", \"target\": \"t\", \"time_s\": 1, \"stddev_s\": 0, \"error\": "
            "\"ok\", \"version\": \"0.1.0\", \"machine\": \"m\", \"timestamp\": 1700000000, "
            "\"flops\": 1, \"strategy\": \"s\"}",
            "{\"machine\": null, \"workload\": \"0123456789abcdef\", \"target\": \"t\", "
            "\"schedule\": \"{}\", \"time_s\": 1, \"stddev_s\": 0, \"error\": \"ok\", \"version\": "
            "\"0.1.0\", \"flops\": 1, \"timestamp\": 1700000000, \"strategy\": \"s\"}",
            "{\"flops\": 1e999, \"workload\": \"0123456789abcdef\", \"target\": \"t\", "
            "\"schedule\": \"{}\", \"time_s\": 1, \"stddev_s\": 0, \"error\": \"ok\", \"version\": "
            "\"0.1.0\", \"machine\": \"m\", \"timestamp\": 1700000000, \"strategy\": \"s\"}",
        };
        const char *why[] = {"\"workload\" is not a string",
                             "not a JSON object",
                             "not a JSON object",
                             "unknown error kind \"exploded\"",
                             "text after the JSON object",
                             "text after the JSON object",
                             "field \"workload\" appears twice",
                             "contains \\u0000",
                             "unknown field \"tme_s\"",
                             "time_s 0 is not positive",
                             "time_s -1 is not zero or positive",
                             "is not a task key",
                             "\"w1\" is not a task key",
                             "empty target",
                             "unknown op 'frob'",
                             "field \"machine\" is null",
                             "flops inf is negative or not finite"};
        CHECK_EQ_INT(KILN_COUNTOF(bad), KILN_COUNTOF(why));
        uint32_t have = 30;
        for (size_t k = 0; k < KILN_COUNTOF(bad); k++) {
            struct kiln_buf buf = {0};
            char            msg[1024];
            /* line 1: a new valid record, line 2: blank, line 3: the bad one */
            struct kiln_record rec = rand_record(ctx, &r, "00000000000000e1", "t");
            CHECK_EQ_INT(KILN_OK, kiln_db_add(a, &rec));
            FILE *g = fopen(jl, "w");
            if (g) {
                kiln_db_export_jsonl(a, g);
                fclose(g);
            }
            free(text);
            text = read_file(jl, &len);
            /* keep only the last (new) line */
            size_t start = len >= 2 ? len - 2 : 0;
            while (start > 0 && text[start - 1] != '\n')
                start--;
            kiln_buf_printf(ctx, &buf, "%.*s\n\r\n%s\n", (int)(len - start), text + start, bad[k]);
            kiln_buf_printf(ctx, &buf, "%s\n", bad[k]); /* line 5: bad too */
            kiln_ctx_error_clear(ctx);
            struct bad_seen seen = {0};
            CHECK_EQ_INT(KILN_ERR_INVALID,
                         kiln_db_import_jsonl(b, jl, buf.data, buf.len, note_bad, &seen, &added));
            CHECK_EQ_INT(1, added); /* the good line is in */
            have++;
            db_error(ctx, msg, sizeof msg);
            if (!strstr(msg, "line 4:") || !strstr(msg, why[k]) || !strstr(msg, "2 bad lines")
                || !strstr(msg, jl))
                harness_fail(__FILE__, __LINE__, "bad line %zu: message '%s'", k, msg);
            CHECK_EQ_INT(4, kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->loc.line : 0);
            CHECK_EQ_INT(2, seen.n);
            CHECK_EQ_INT(4, seen.line[0]);
            CHECK_EQ_INT(5, seen.line[1]);
            if (!strstr(seen.why, why[k]))
                harness_fail(__FILE__, __LINE__, "bad line %zu: reported as '%s'", k, seen.why);
            CHECK_EQ_INT(have, kiln_db_count(b, NULL, NULL));
            kiln_ctx_error_clear(ctx);
        }
        free(text);
    }
    kiln_db_close(a);
    kiln_db_close(b);
    kiln_ctx_free(ctx);
    env_fini(&e);
}

static void
test_db_bad_files(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    char            path[128], msg[1024], cmd[512];
    struct kiln_db *db = NULL;
    /* garbage: a clean error, and the file is left as it was */
    snprintf(path, sizeof path, "%s/garbage.db", e.tmp);
    FILE *f = fopen(path, "w");
    for (int i = 0; f && i < 4096; i++)
        fputc((i * 7919) & 0xff, f);
    if (f)
        fclose(f);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_db_open(ctx, path, &db));
    CHECK(db == NULL);
    db_error(ctx, msg, sizeof msg);
    printf("  %s\n", msg);
    CHECK(strstr(msg, "not a kiln records database") != NULL);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size == 4096);
    kiln_ctx_error_clear(ctx);
    /* another application's SQLite file */
    snprintf(path, sizeof path, "%s/other.db", e.tmp);
    snprintf(cmd, sizeof cmd, "%s/b.db", e.tmp);
    struct kiln_db *k = open_db(ctx, cmd); /* a kiln database, for the newer-schema case */
    kiln_db_close(k);
    {
        sqlite3 *s;
        CHECK(sqlite3_open(path, &s) == SQLITE_OK);
        CHECK(sqlite3_exec(s, "CREATE TABLE t(x); INSERT INTO t VALUES(1);", 0, 0, 0) == SQLITE_OK);
        sqlite3_close(s);
    }
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_db_open(ctx, path, &db));
    db_error(ctx, msg, sizeof msg);
    printf("  %s\n", msg);
    CHECK(strstr(msg, "SQLite database but not a kiln") != NULL);
    kiln_ctx_error_clear(ctx);
    /* a newer schema */
    {
        sqlite3 *s;
        CHECK(sqlite3_open(cmd, &s) == SQLITE_OK);
        CHECK(sqlite3_exec(s, "INSERT INTO kiln_schema VALUES(99);", 0, 0, 0) == SQLITE_OK);
        sqlite3_close(s);
    }
    CHECK_EQ_INT(KILN_ERR_UNSUPPORTED, kiln_db_open(ctx, cmd, &db));
    db_error(ctx, msg, sizeof msg);
    printf("  %s\n", msg);
    CHECK(strstr(msg, "version 99") != NULL);
    kiln_ctx_error_clear(ctx);
    /* a directory, and a path in a missing directory */
    CHECK(kiln_db_open(ctx, e.tmp, &db) != KILN_OK);
    kiln_ctx_error_clear(ctx);
    snprintf(path, sizeof path, "%s/no/such/dir.db", e.tmp);
    CHECK(kiln_db_open(ctx, path, &db) != KILN_OK);
    db_error(ctx, msg, sizeof msg);
    printf("  %s\n", msg);
    kiln_ctx_free(ctx);
    env_fini(&e);
}

/* Fills a new database at path with n random records of one workload. */
static void
fill_db(kiln_ctx *ctx, struct kiln_rng *r, const char *path, uint32_t n)
{
    struct kiln_db *db = open_db(ctx, path);
    for (uint32_t i = 0; db && i < n; i++) {
        struct kiln_record rec = rand_record(ctx, r, "00000000000000c1", "t");
        CHECK_EQ_INT(KILN_OK, kiln_db_add(db, &rec));
    }
    kiln_db_close(db);
}

static uint32_t
count_in(const char *path)
{
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_db *db = NULL;
    uint32_t n = kiln_db_open_readonly(ctx, path, &db) == KILN_OK ? kiln_db_count(db, NULL, NULL)
                                                                  : UINT32_MAX;
    kiln_db_close(db);
    kiln_ctx_free(ctx);
    return n;
}

/* Export never writes onto its database, under any name (the same path, ./ and a symbolic
 * link: compared by device and inode), nor onto another SQLite file; a failed export leaves
 * the file it would have replaced as it was. */
static void
test_db_export_onto_itself(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    char            db[128], other[128], link[128], dot[160], out[128], msg[1024];
    snprintf(db, sizeof db, "%s/t.db", e.tmp);
    snprintf(other, sizeof other, "%s/o.db", e.tmp);
    snprintf(link, sizeof link, "%s/link.jsonl", e.tmp);
    snprintf(dot, sizeof dot, "%s/./t.db", e.tmp);
    snprintf(out, sizeof out, "%s/out.jsonl", e.tmp);
    fill_db(ctx, &r, db, 50);
    fill_db(ctx, &r, other, 3);
    CHECK(symlink("t.db", link) == 0);
    const char *onto[] = {db, dot, link};
    for (size_t i = 0; i < KILN_COUNTOF(onto); i++) {
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_records_export(ctx, db, onto[i]));
        db_error(ctx, msg, sizeof msg);
        if (!strstr(msg, "onto itself"))
            harness_fail(__FILE__, __LINE__, "export onto %s: '%s'", onto[i], msg);
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(50, count_in(db));
    }
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_records_export(ctx, db, other));
    db_error(ctx, msg, sizeof msg);
    printf("  %s\n", msg);
    CHECK(strstr(msg, "is an SQLite database") != NULL);
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(3, count_in(other));
    /* a good export replaces the file whole, leaving no temporary file */
    FILE *f = fopen(out, "w");
    if (f) {
        fputs("old\n", f);
        fclose(f);
    }
    CHECK_EQ_INT(KILN_OK, kiln_records_export(ctx, db, out));
    size_t len = 0;
    char  *text = read_file(out, &len);
    size_t lines = 0;
    for (size_t i = 0; text && i < len; i++)
        lines += text[i] == '\n';
    CHECK_EQ_INT(50, lines);
    free(text);
    DIR *dir = opendir(e.tmp);
    for (struct dirent *de; dir && (de = readdir(dir));)
        if (strstr(de->d_name, ".tmp"))
            harness_fail(__FILE__, __LINE__, "temporary file %s left", de->d_name);
    if (dir)
        closedir(dir);
    /* an export that cannot be written changes nothing */
    snprintf(out, sizeof out, "%s/no/such/dir.jsonl", e.tmp);
    CHECK(kiln_records_export(ctx, db, out) != KILN_OK);
    kiln_ctx_error_clear(ctx);
    kiln_ctx_free(ctx);
    env_fini(&e);
}

/* 20,000 lines import in one linear pass (the time is printed, not asserted); the second
 * import finds every line present. */
static void
test_db_import_linear(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    char      db[128];
    enum { N = 20000 };
    snprintf(db, sizeof db, "%s/big.db", e.tmp);
    struct kiln_buf b = {0};
    for (uint32_t i = 0; i < N; i++)
        kiln_buf_printf(
            ctx, &b,
            "{\"workload\": \"%016x\", \"target\": \"llvm\", \"schedule\": "
            "\"{\\\"steps\\\": [{\\\"op\\\": \\\"parallel\\\", \\\"stage\\\": "
            "\\\"s%u\\\", \\\"iter\\\": \\\"i\\\"}]}\", \"time_s\": %.17g, \"stddev_s\": "
            "0, \"error\": \"ok\", \"version\": \"0.1.0\", \"machine\": \"m\", "
            "\"timestamp\": %u, \"flops\": 1000, \"strategy\": \"ansor\"}\n",
            i % 7, i, 1e-3 + i * 1e-9, 1700000000 + i / 50);
    struct kiln_db *d = open_db(ctx, db);
    uint32_t        added = 0;
    double          t0 = now();
    CHECK_EQ_INT(KILN_OK, kiln_db_import_jsonl(d, "big.jsonl", b.data, b.len, NULL, NULL, &added));
    double t1 = now();
    CHECK_EQ_INT(N, added);
    CHECK_EQ_INT(N, kiln_db_count(d, NULL, NULL));
    CHECK_EQ_INT(KILN_OK, kiln_db_import_jsonl(d, "big.jsonl", b.data, b.len, NULL, NULL, &added));
    double t2 = now();
    CHECK_EQ_INT(0, added);
    CHECK_EQ_INT(N, kiln_db_count(d, NULL, NULL));
    printf("  %u lines: imported in %.2f s, found present in %.2f s\n", N, t1 - t0, t2 - t1);
    kiln_db_close(d);
    kiln_ctx_free(ctx);
    env_fini(&e);
}

static void
list_nothing(void *ud, const struct kiln_record_summary *s)
{
    (void)s;
    (*(uint32_t *)ud)++;
}

static bool
count_each(void *ud, const struct kiln_record *r)
{
    (void)r;
    (*(uint32_t *)ud)++;
    return true;
}

/* A hand-made file with the kiln identity but NULLs, blobs and wrong types where the schema
 * says NOT NULL: every read is an error naming the file and the row, never a crash. */
static void
test_db_damaged_rows(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    char      db[128], out[128], msg[1024];
    snprintf(out, sizeof out, "%s/out.jsonl", e.tmp);
    static const char *const damage[] = {
        "UPDATE records SET workload=NULL WHERE id=2",
        "UPDATE records SET target=NULL WHERE id=2",
        "UPDATE records SET schedule=NULL WHERE id=2",
        "UPDATE records SET strategy=NULL WHERE id=2",
        "UPDATE records SET machine=x'00ff' WHERE id=2",
        "UPDATE records SET version=NULL WHERE id=2",
        "UPDATE records SET time_s='fast' WHERE id=2",
        "UPDATE records SET error=NULL WHERE id=2",
        "UPDATE records SET timestamp=NULL WHERE id=2",
        "UPDATE records SET flops=NULL WHERE id=2",
        "UPDATE records SET schedule='a'||char(0)||'b' WHERE id=2",
    };
    for (size_t k = 0; k < KILN_COUNTOF(damage); k++) {
        snprintf(db, sizeof db, "%s/d%zu.db", e.tmp, k);
        struct kiln_db    *d = open_db(ctx, db);
        struct kiln_record rec = {.workload = "00000000000000d1",
                                  .target = "t",
                                  .schedule = "{\"steps\": []}",
                                  .time_s = 1e-3,
                                  .flops = 1,
                                  .strategy = "x"};
        for (int i = 0; d && i < 3; i++) {
            rec.time_s = i == 1 ? 1e-4 : 1e-3; /* row 2 is the best: listing reads it whole */
            rec.schedule = kiln_arena_printf(ctx, "{\"steps\": [], \"n\": %d}", i);
            CHECK_EQ_INT(KILN_OK, kiln_db_add(d, &rec));
        }
        kiln_db_close(d);
        /* a table like records but without the NOT NULL constraints */
        sqlite3 *s;
        CHECK(sqlite3_open(db, &s) == SQLITE_OK);
        char sql[1024];
        snprintf(sql, sizeof sql,
                 "CREATE TABLE r2(id INTEGER PRIMARY KEY AUTOINCREMENT, workload, target, "
                 "schedule, prog, time_s, stddev_s, error, error_msg, version, machine, "
                 "timestamp, flops, strategy); INSERT INTO r2 SELECT * FROM records; DROP TABLE "
                 "records; ALTER TABLE r2 RENAME TO records; %s;",
                 damage[k]);
        CHECK(sqlite3_exec(s, sql, 0, 0, 0) == SQLITE_OK);
        sqlite3_close(s);
        /* listing reads the columns it shows: an error, or (where the damage makes row 2 an
         * invalid record, so not the best) a listing without it */
        uint32_t n = 0;
        if (kiln_records_list(ctx, db, list_nothing, &n) != KILN_OK) {
            db_error(ctx, msg, sizeof msg);
            if (!strstr(msg, db) || !strstr(msg, "row 2"))
                harness_fail(__FILE__, __LINE__, "%s: listing says '%s'", damage[k], msg);
            if (k == 0)
                printf("  %s\n", msg);
        }
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_records_export(ctx, db, out));
        db_error(ctx, msg, sizeof msg);
        if (!strstr(msg, db) || !strstr(msg, "row 2"))
            harness_fail(__FILE__, __LINE__, "%s: export says '%s'", damage[k], msg);
        kiln_ctx_error_clear(ctx);
        d = NULL;
        CHECK_EQ_INT(KILN_OK, kiln_db_open_readonly(ctx, db, &d));
        n = 0;
        CHECK(kiln_db_each(d, NULL, NULL, count_each, &n) != KILN_OK);
        CHECK_EQ_INT(1, n); /* row 1 is fine, row 2 stops the walk */
        kiln_ctx_error_clear(ctx);
        kiln_db_close(d);
    }
    kiln_ctx_free(ctx);
    env_fini(&e);
}

/* Processes creating and writing the same new database at once all succeed, and every record
 * is there: several rounds, each on a fresh file. */
static void
test_db_concurrent_create(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    enum { ROUNDS = 10, PROCS = 6, EACH = 5 };
    uint32_t failed = 0;
    for (int round = 0; round < ROUNDS; round++) {
        char db[128];
        snprintf(db, sizeof db, "%s/c%d.db", e.tmp, round);
        pid_t pid[PROCS];
        fflush(NULL);
        for (int p = 0; p < PROCS; p++) {
            pid[p] = fork();
            if (pid[p] == 0) {
                kiln_ctx       *ctx = kiln_ctx_new(NULL);
                struct kiln_db *d = NULL;
                if (kiln_db_open(ctx, db, &d) != KILN_OK) {
                    char msg[1024];
                    fprintf(stderr, "  process %d: %s\n", p, db_error(ctx, msg, sizeof msg));
                    _exit(1);
                }
                struct kiln_rng r = kiln_rng_new(opt_seed() + (uint64_t)p);
                for (int i = 0; i < EACH; i++) {
                    struct kiln_record rec = rand_record(ctx, &r, "00000000000000cc", "t");
                    if (kiln_db_add(d, &rec) != KILN_OK)
                        _exit(2);
                }
                kiln_db_close(d);
                kiln_ctx_free(ctx);
                _exit(0);
            }
        }
        for (int p = 0; p < PROCS; p++) {
            int status = 0;
            if (pid[p] > 0)
                waitpid(pid[p], &status, 0);
            failed += pid[p] <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        }
        CHECK_EQ_INT(PROCS * EACH, count_in(db));
    }
    CHECK_EQ_INT(0, failed);
    printf("  %d rounds of %d processes creating one database: %u failed\n", ROUNDS, PROCS, failed);
    env_fini(&e);
}

/* A database in a read-only directory, itself read-only, is listed and exported by a user who
 * cannot write there (the test drops to user nobody when it runs as root), and a missing one
 * is an error naming it, not a new file. */
static void
test_db_readonly(void)
{
    struct env e;
    if (!env_init(&e))
        return;
    char dir[128], db[160], outdir[128], out[160];
    snprintf(dir, sizeof dir, "%s/ro", e.tmp);
    snprintf(db, sizeof db, "%s/t.db", dir);
    snprintf(outdir, sizeof outdir, "%s/out", e.tmp);
    snprintf(out, sizeof out, "%s/t.jsonl", outdir);
    CHECK(mkdir(dir, 0755) == 0 && mkdir(outdir, 0777) == 0);
    CHECK(chmod(outdir, 0777) == 0 && chmod(e.tmp, 0755) == 0);
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    fill_db(ctx, &r, db, 7);
    kiln_ctx_free(ctx);
    CHECK(chmod(db, 0444) == 0 && chmod(dir, 0555) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(10);
        kiln_ctx *c = kiln_ctx_new(NULL);
        uint32_t  n = 0;
        char      msg[1024];
        int       rc = 0;
        if (kiln_records_list(c, db, list_nothing, &n) != KILN_OK || n != 1) {
            fprintf(stderr, "  list: %s\n", db_error(c, msg, sizeof msg));
            rc = 1;
        }
        kiln_ctx_error_clear(c);
        if (!rc && kiln_records_export(c, db, out) != KILN_OK) {
            fprintf(stderr, "  export: %s\n", db_error(c, msg, sizeof msg));
            rc = 2;
        }
        kiln_ctx_error_clear(c);
        /* writing is refused (the file cannot be written), and says which file */
        struct kiln_db *d = NULL;
        if (!rc && kiln_db_open(c, db, &d) == KILN_OK && access(db, W_OK) != 0) {
            struct kiln_record rec = rand_record(c, &r, "00000000000000c1", "t");
            if (kiln_db_add(d, &rec) == KILN_OK)
                rc = 3;
        }
        kiln_db_close(d);
        kiln_ctx_free(c);
        _exit(rc);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK_EQ_INT(0, WEXITSTATUS(status));
    size_t len = 0;
    char  *text = read_file(out, &len);
    size_t lines = 0;
    for (size_t i = 0; text && i < len; i++)
        lines += text[i] == '\n';
    CHECK_EQ_INT(7, lines);
    free(text);
    /* a database that does not exist is not created by reading it */
    char missing[160], msg[1024];
    snprintf(missing, sizeof missing, "%s/missing.db", outdir);
    ctx = kiln_ctx_new(NULL);
    uint32_t n = 0;
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_records_list(ctx, missing, list_nothing, &n));
    db_error(ctx, msg, sizeof msg);
    CHECK(strstr(msg, missing) != NULL);
    CHECK(access(missing, F_OK) != 0);
    kiln_ctx_free(ctx);
    chmod(dir, 0755);
    env_fini(&e);
}

static const struct test tests[] = {
    {"valid_and_illegal_schedules", test_valid_and_illegal_schedules},
    {"planted_faults", test_planted_faults},
    {"planted_faults_default_schedule_reference", test_planted_faults_default_schedule_reference},
    {"parallel_after_openmp_in_parent", test_parallel_after_openmp_in_parent},
    {"overlap_flush_build_timeout", test_overlap_flush_build_timeout},
    {"killed_tuner_leaves_no_worker", test_killed_tuner_leaves_no_worker},
    {"bad_options", test_bad_options},
    {"gpu_emulated", test_gpu_emulated},
    {"gpu_device", test_gpu_device},
    {"db_add_best_each_count", test_db_add_best_each_count},
    {"db_best_mean", test_db_best_mean},
    {"db_killed_writer", test_db_killed_writer},
    {"db_export_import", test_db_export_import},
    {"db_bad_files", test_db_bad_files},
    {"db_export_onto_itself", test_db_export_onto_itself},
    {"db_import_linear", test_db_import_linear},
    {"db_damaged_rows", test_db_damaged_rows},
    {"db_concurrent_create", test_db_concurrent_create},
    {"db_readonly", test_db_readonly},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
