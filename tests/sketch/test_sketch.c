/* tests/sketch/test_sketch.c -- the tuner's search space (tuner/sketch.c, tuner/annotate.c):
 * for a set of task graphs, every sketch's randomly annotated programs must give schedules that
 * lower, compile with the LLVM JIT and compute what the reference interpreter (kiln_ir_eval)
 * computes on random inputs; mutation, crossover and Droplet neighbours keep programs valid;
 * programs round-trip through JSON; the rules find the expected structures (multi-level tiling
 * with cache write for matmul, consumer fusion for matmul+bias+relu, rfactor for row
 * reductions). Programs per sketch: --iters (default 2); the seed is printed. */
#include "../../tuner/sketch_priv.h"
#include "../harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double   t_lower, t_jit, t_run; /* seconds spent, printed at the end */
static uint32_t n_checked;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const graphs[][2] = {
    {"matmul", "input A: f32[24, 40]\nweight B: f32[40, 48]\nC[i, j] += A[i, k] * B[k, j]\n"
               "output C\n"},
    {"matmul_bias_relu", "input A: f32[20, 36]\nweight B: f32[36, 32]\nweight b: f32[32]\n"
                         "C[i, j] += A[i, k] * B[k, j]\nD = add(C, b)\nE = relu(D)\noutput E\n"},
    {"batch_matmul",
     "input A: f32[3, 16, 20]\nweight B: f32[3, 20, 24]\nC = batch_matmul(A, B)\noutput C\n"},
    {"conv3x3", "input x: f32[1, 8, 10, 10]\nweight w: f32[16, 8, 3, 3]\n"
                "y = conv2d(x, w, padding=1)\noutput y\n"},
    {"conv1x1_s2", "input x: f32[2, 8, 12, 12]\nweight w: f32[16, 8, 1, 1]\n"
                   "y = conv2d(x, w, stride=2)\noutput y\n"},
    {"depthwise", "input x: f32[1, 8, 10, 10]\nweight w: f32[8, 1, 3, 3]\n"
                  "y = conv2d(x, w, padding=1, groups=8)\noutput y\n"},
    {"softmax", "input x: f32[4, 200]\ny = softmax(x, axis=-1)\noutput y\n"},
    {"rowsum", "input x: f32[3, 300]\ns[i] += x[i, k]\noutput s\n"},
    {"elementwise", "input a: f32[6, 50]\ninput b: f32[6, 50]\nc = add(a, b)\nd = exp(c)\n"
                    "e = mul(d, a)\noutput e\n"},
    {"two_anchors", "input x: f32[16, 24]\nweight w1: f32[24, 32]\nweight w2: f32[32, 8]\n"
                    "h = matmul(x, w1)\nr = relu(h)\ny = matmul(r, w2)\noutput y\n"},
};

static void
report(kiln_ctx *ctx, const char *what, const char *step, const char *sched)
{
    char msg[1024];
    kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
    harness_fail(__FILE__, __LINE__, "%s: %s failed: %s\nschedule: %s", what, step, msg,
                 sched ? sched : "(none)");
}

/* Random inputs and the interpreter's outputs of one graph. */
struct ref {
    double **val; /* per tensor */
    uint32_t nt;
};

static bool
make_ref(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_rng *r, struct ref *R)
{
    R->nt = g->ntensor;
    R->val = calloc(g->ntensor, sizeof *R->val);
    for (uint32_t t = 0; t < g->ntensor; t++) {
        int64_t n = kiln_tensor_numel(&g->tensor[t]);
        R->val[t] = calloc((size_t)n + 1, sizeof(double));
        if (g->tensor[t].kind != KILN_TENSOR_OP)
            for (int64_t i = 0; i < n; i++)
                R->val[t][i] = (double)(float)(2 * kiln_rng_uniform(r) - 1);
    }
    if (kiln_ir_eval(ctx, g, R->val) != KILN_OK) {
        report(ctx, "reference", "kiln_ir_eval", NULL);
        return false;
    }
    return true;
}

static void
free_ref(struct ref *R)
{
    for (uint32_t t = 0; t < R->nt; t++)
        free(R->val[t]);
    free(R->val);
}

static const char *
sched_text(kiln_ctx *ctx, const struct kiln_schedule *s)
{
    struct kiln_buf b = {0};
    if (kiln_sched_to_json(ctx, s, &b) != KILN_OK)
        return "(unprintable)";
    return b.data;
}

/* Lowers, compiles and runs program p of sketch sk; compares every output with the reference. */
static bool check_interp(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_func *f,
                         const struct ref *R, const char *label, const char *st);

/* use_jit false: the lowered loop nest runs in the loop-nest interpreter instead (cheap; the
 * JIT is exercised by the sampled programs). */
static bool
check_prog(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_target *tg,
           const struct kiln_sketch *sk, const struct kiln_prog *p, const struct ref *R,
           const char *what, bool use_jit)
{
    struct kiln_schedule s = {0};
    struct kiln_func    *f = NULL;
    char                 label[512];
    snprintf(label, sizeof label, "%s sketch %u [%s]", what, sk->id, sk->desc);
    if (!kiln_prog_valid(sk, p)) {
        harness_fail(__FILE__, __LINE__, "%s: program not valid", label);
        return false;
    }
    if (kiln_prog_schedule(ctx, g, sk, p, &s) != KILN_OK) {
        report(ctx, label, "kiln_prog_schedule", NULL);
        return false;
    }
    const char *st = sched_text(ctx, &s);
    double      t0 = now();
    n_checked++;
    if (kiln_lower(ctx, g, &s, &f) != KILN_OK) {
        report(ctx, label, "kiln_lower", st);
        return false;
    }
    double t1 = now();
    t_lower += t1 - t0;
    if (!use_jit) {
        bool ok = check_interp(ctx, g, f, R, label, st);
        t_run += now() - t1;
        return ok;
    }
    struct kiln_cg_module m = {.f = f, .name = "sketch", .metadata = "{}", .source = ""};
    struct kiln_jit      *j = NULL;
    if (kiln_cg_llvm_jit(ctx, &m, tg, &j) != KILN_OK) {
        report(ctx, label, "kiln_cg_llvm_jit", st);
        return false;
    }
    double t2 = now();
    t_jit += t2 - t1;
    uint32_t np = f->nparam;
    void   **data = calloc(np + 1, sizeof *data);
    bool     ok = true;
    for (uint32_t q = 0; q < np; q++) {
        const struct kiln_buffer *b = &f->buf[f->param[q]];
        int64_t                   n = kiln_tensor_numel(&g->tensor[b->tensor]);
        float                    *x = aligned_alloc(64, ((size_t)n * 4 + 127) / 64 * 64);
        for (int64_t i = 0; i < n; i++)
            x[i] = g->tensor[b->tensor].kind == KILN_TENSOR_OP ? NAN : (float)R->val[b->tensor][i];
        data[q] = x;
    }
    int32_t rc = kiln_jit_desc(j)->kernel(data);
    if (rc != 0) {
        harness_fail(__FILE__, __LINE__, "%s: kernel returned %d\nschedule: %s", label, rc, st);
        ok = false;
    }
    for (uint32_t q = 0; ok && q < np; q++) {
        const struct kiln_buffer *b = &f->buf[f->param[q]];
        if (g->tensor[b->tensor].kind != KILN_TENSOR_OP)
            continue;
        const float *x = data[q];
        int64_t      n = kiln_tensor_numel(&g->tensor[b->tensor]);
        for (int64_t i = 0; i < n && ok; i++) {
            double want = R->val[b->tensor][i];
            if (!(fabs(want - x[i]) <= 1e-4 * (1 + fabs(want)))) {
                harness_fail(__FILE__, __LINE__,
                             "%s: %s[%lld]: interpreter %.9g, jit %.9g\n"
                             "schedule: %s",
                             label, kiln_sym_str(ctx, b->name), (long long)i, want, (double)x[i],
                             st);
                ok = false;
            }
        }
    }
    t_run += now() - t2;
    for (uint32_t q = 0; q < np; q++)
        free(data[q]);
    free(data);
    kiln_jit_free(j);
    return ok;
}

static bool
check_interp(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_func *f, const struct ref *R,
             const char *label, const char *st)
{
    uint32_t np = f->nparam;
    double **bufs = calloc(np + 1, sizeof *bufs);
    bool     ok = true;
    for (uint32_t q = 0; q < np; q++) {
        uint32_t t = f->buf[f->param[q]].tensor;
        int64_t  n = kiln_tensor_numel(&g->tensor[t]);
        bufs[q] = calloc((size_t)n + 1, sizeof(double));
        if (g->tensor[t].kind != KILN_TENSOR_OP)
            memcpy(bufs[q], R->val[t], sizeof(double) * (size_t)n);
    }
    if (kiln_func_eval(f, true, bufs) != KILN_OK) {
        report(ctx, label, "kiln_func_eval", st);
        ok = false;
    }
    for (uint32_t q = 0; ok && q < np; q++) {
        uint32_t t = f->buf[f->param[q]].tensor;
        int64_t  n = kiln_tensor_numel(&g->tensor[t]);
        for (int64_t i = 0; i < n && ok && g->tensor[t].kind == KILN_TENSOR_OP; i++)
            if (!(fabs(R->val[t][i] - bufs[q][i]) <= 1e-4 * (1 + fabs(R->val[t][i])))) {
                harness_fail(__FILE__, __LINE__,
                             "%s: %s[%lld]: reference %.9g, lowered loop nest %.9g\nschedule: %s",
                             label, kiln_sym_str(ctx, f->buf[f->param[q]].name), (long long)i,
                             R->val[t][i], bufs[q][i], st);
                ok = false;
            }
    }
    for (uint32_t q = 0; q < np; q++)
        free(bufs[q]);
    free(bufs);
    return ok;
}

static bool
has_sketch(const struct kiln_sketch *sk, uint32_t n, const char *frag)
{
    for (uint32_t i = 0; i < n; i++)
        if (strstr(sk[i].desc, frag))
            return true;
    return false;
}

/* Every sketch of every graph: sampled programs, their mutants, crossovers and neighbours
 * lower, compile and match the interpreter; JSON round-trips. */
static void
test_programs(void)
{
    uint64_t iters = opt_iters_or(2);
    for (size_t gi = 0; gi < KILN_COUNTOF(graphs); gi++) {
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g = PARSE(ctx, graphs[gi][1]);
        struct kiln_target tg;
        struct kiln_hw     hw;
        if (!g || kiln_cg_target_parse(ctx, "llvm", &tg) != KILN_OK) {
            kiln_ctx_free(ctx);
            CHECK(false);
            continue;
        }
        kiln_hw_from_target(&tg, &hw);
        hw.num_cores = hw.num_cores < 2 ? 2 : hw.num_cores; /* exercise parallel knobs */
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed(), graphs[gi][0]));
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0;
        struct ref          R = {0};
        if (kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) != KILN_OK) {
            report(ctx, graphs[gi][0], "kiln_sketches_generate", NULL);
            kiln_ctx_free(ctx);
            continue;
        }
        CHECK(nsk >= 1);
        printf("%s: %u sketches\n", graphs[gi][0], nsk);
        for (uint32_t s = 0; s < nsk; s++)
            printf("  %u: %s (%u knobs)\n", s, sk[s].desc, sk[s].nknob);
        if (!make_ref(ctx, g, &r, &R)) {
            free_ref(&R);
            kiln_ctx_free(ctx);
            continue;
        }
        for (uint32_t s = 0; s < nsk; s++) {
            struct kiln_prog prev;
            for (uint64_t it = 0; it < iters; it++) {
                struct kiln_prog p, q, nb[64];
                kiln_prog_sample(&sk[s], &r, &p);
                CHECK_EQ_INT(s, p.sketch);
                if (!check_prog(ctx, g, &tg, &sk[s], &p, &R, graphs[gi][0], it == 0))
                    break;
                /* JSON round trip */
                struct kiln_buf js = {0};
                CHECK_EQ_INT(KILN_OK, kiln_prog_to_json(ctx, &sk[s], &p, &js));
                CHECK_EQ_INT(KILN_OK, kiln_prog_from_json(ctx, sk, nsk, js.data, &q));
                CHECK_EQ_INT(p.sketch, q.sketch);
                CHECK(!memcmp(p.v, q.v, sizeof(int64_t) * sk[s].nvalues));
                CHECK_EQ_INT(kiln_prog_hash(&sk[s], &p), kiln_prog_hash(&sk[s], &q));
                /* mutation */
                q = p;
                if (kiln_prog_mutate(&sk[s], &r, &q)) {
                    CHECK(memcmp(p.v, q.v, sizeof(int64_t) * sk[s].nvalues) != 0);
                    if (!check_prog(ctx, g, &tg, &sk[s], &q, &R, "mutant", false))
                        break;
                }
                /* crossover with the previous sample */
                if (it > 0) {
                    kiln_prog_crossover(&sk[s], &r, &p, &prev, &q);
                    if (!check_prog(ctx, g, &tg, &sk[s], &q, &R, "crossover", false))
                        break;
                }
                prev = p;
                /* neighbours: all valid, each differs from p; one of them runs */
                uint32_t nn = kiln_prog_neighbours(&sk[s], &p, nb, 64);
                for (uint32_t k = 0; k < nn; k++) {
                    CHECK(kiln_prog_valid(&sk[s], &nb[k]));
                    CHECK(memcmp(p.v, nb[k].v, sizeof(int64_t) * sk[s].nvalues) != 0);
                }
                if (nn
                    && !check_prog(ctx, g, &tg, &sk[s], &nb[kiln_rng_below(&r, nn)], &R,
                                   "neighbour", false))
                    break;
            }
        }
        if (!strcmp(graphs[gi][0], "matmul")) {
            CHECK(has_sketch(sk, nsk, "C:tile+cache_write@1"));
            CHECK(has_sketch(sk, nsk, "C:tile+cache_write@2"));
            CHECK(has_sketch(sk, nsk, "C:tile"));
        }
        if (!strcmp(graphs[gi][0], "matmul_bias_relu")) {
            CHECK(has_sketch(sk, nsk, "C:tile+fuse(E)@1"));
            CHECK(has_sketch(sk, nsk, "D:inline"));
        }
        if (!strcmp(graphs[gi][0], "rowsum"))
            CHECK(has_sketch(sk, nsk, "s:rfactor-inner"));
        if (!strcmp(graphs[gi][0], "elementwise"))
            CHECK(has_sketch(sk, nsk, "c:inline") && nsk == 1);
        free_ref(&R);
        kiln_ctx_free(ctx);
    }
    printf("%u programs checked: lowering %.2f s, JIT %.2f s, run and compare %.2f s\n", n_checked,
           t_lower, t_jit, t_run);
}

/* The matmul knob values of the hand-written benchmark schedule (B in 32-wide panels, an 8x32
 * register tile through cache_write, reduction outermost in the local stage) are reachable. */
static void
test_bench_like(void)
{
    kiln_ctx           *ctx = kiln_ctx_new(NULL);
    struct kiln_graph  *g = PARSE(ctx, "input A: f32[64, 64]\nweight B: f32[64, 64]\n"
                                        "C[i, j] += A[i, k] * B[k, j]\noutput C\n");
    struct kiln_target  tg;
    struct kiln_hw      hw;
    struct kiln_sketch *sk = NULL;
    uint32_t            nsk = 0;
    CHECK(g && kiln_cg_target_parse(ctx, "llvm", &tg) == KILN_OK);
    if (!g) {
        kiln_ctx_free(ctx);
        return;
    }
    kiln_hw_from_target(&tg, &hw);
    hw.num_cores = 2;
    hw.vector_lanes = 16;
    CHECK_EQ_INT(KILN_OK, kiln_sketches_generate(ctx, g, &hw, &sk, &nsk));
    const struct kiln_sketch *cw = NULL;
    for (uint32_t s = 0; s < nsk; s++)
        if (!strcmp(sk[s].desc, "C:tile+cache_write@2"))
            cw = &sk[s];
    CHECK(cw != NULL);
    if (!cw) {
        kiln_ctx_free(ctx);
        return;
    }
    struct kiln_prog           p = {.sketch = cw->id};
    const struct kiln_op_plan *op = &cw->priv->op[0];
    int64_t *vi = &p.v[cw->knob[op->k_split[0]].slot], *vj = &p.v[cw->knob[op->k_split[1]].slot];
    vi[0] = 1, vi[1] = 1, vi[2] = 8;        /* i: 8 rows per register tile */
    vj[0] = 1, vj[1] = 1, vj[2] = 32;       /* j: 32 columns (two 16-lane vectors) */
    p.v[cw->knob[op->k_split[2]].slot] = 1; /* k: whole reduction outermost */
    p.v[cw->knob[op->k_vaxis].slot] = 1;    /* j is the vector axis */
    p.v[cw->knob[op->k_vec].slot] = 1;
    p.v[cw->knob[op->k_pack].slot] = 1;
    p.v[cw->knob[op->k_unroll].slot] = 3; /* 512 */
    p.v[cw->knob[op->k_par].slot] = 1;
    struct kiln_schedule s = {0};
    CHECK_EQ_INT(KILN_OK, kiln_prog_schedule(ctx, g, cw, &p, &s));
    const char *txt = sched_text(ctx, &s);
    printf("bench-like schedule: %s\n", txt);
    CHECK(strstr(txt, "\"pack\"") && strstr(txt, "\"cache_write\"")
          && strstr(txt, "\"compute_at\""));
    struct kiln_rng r = kiln_rng_new(opt_seed());
    struct ref      R = {0};
    if (make_ref(ctx, g, &r, &R))
        CHECK(check_prog(ctx, g, &tg, cw, &p, &R, "bench-like", true));
    free_ref(&R);
    kiln_ctx_free(ctx);
}

/* Bad program JSON gives clear errors, never a crash. */
static void
test_json_errors(void)
{
    kiln_ctx           *ctx = kiln_ctx_new(NULL);
    struct kiln_graph  *g = PARSE(ctx, graphs[0][1]);
    struct kiln_hw      hw = {2, 8, 64, 48 << 10, 1280 << 10};
    struct kiln_sketch *sk = NULL;
    uint32_t            nsk = 0;
    struct kiln_prog    p;
    CHECK(g && kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) == KILN_OK);
    const char *bad[] = {"",
                         "[1]",
                         "{\"sketch\": 3, \"v\": []}",
                         "{\"sketch\": \"nope\", \"v\": []}",
                         "{\"sketch\": \"C:tile\", \"v\": [1]}",
                         "{\"sketch\": \"C:tile\"}"};
    for (size_t i = 0; g && i < KILN_COUNTOF(bad); i++) {
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_prog_from_json(ctx, sk, nsk, bad[i], &p));
    }
    kiln_ctx_free(ctx);
}

int
main(int argc, char **argv)
{
    static const struct test tests[] = {
        {"programs", test_programs},
        {"bench_like", test_bench_like},
        {"json_errors", test_json_errors},
    };
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
