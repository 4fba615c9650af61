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
 * and the other candidates of the batch carry on. */
#include "../../tuner/tuner.h"
#include "../abi/so_build.h"
#include "../harness.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
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
#endif
            if (r[i].error != want)
                harness_fail(__FILE__, __LINE__, "%s: want %s, got %s (%s)", faults[i].name,
                             kiln_measure_error_name[want], kiln_measure_error_name[r[i].error],
                             r[i].msg);
            if (want == KILN_MEASURE_OK)
                check_ok(&r[i], o.repeat);
            else
                CHECK_EQ_INT(0, r[i].time_s);
            if (faults[i].msg && !strstr(r[i].msg, faults[i].msg))
                harness_fail(__FILE__, __LINE__, "%s: message '%s' lacks '%s'", faults[i].name,
                             r[i].msg, faults[i].msg);
        }
        print_result("valid schedule after faults", &r[NF]);
        check_ok(&r[NF], o.repeat);
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
    if (g && kiln_graph_compile(ctx, g, &co, so) == KILN_OK
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

static const struct test tests[] = {
    {"valid_and_illegal_schedules", test_valid_and_illegal_schedules},
    {"planted_faults", test_planted_faults},
    {"planted_faults_default_schedule_reference", test_planted_faults_default_schedule_reference},
    {"parallel_after_openmp_in_parent", test_parallel_after_openmp_in_parent},
    {"bad_options", test_bad_options},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
