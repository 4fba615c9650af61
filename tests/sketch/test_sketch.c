/* tests/sketch/test_sketch.c -- the tuner's search space (tuner/sketch.c, tuner/annotate.c):
 * for a set of task graphs, every sketch's randomly annotated programs must give schedules that
 * lower, compile with the LLVM JIT and compute what the reference interpreter (kiln_ir_eval)
 * computes on random inputs; mutation, crossover and Droplet neighbours keep programs valid;
 * programs round-trip through JSON; the rules find the expected structures (multi-level tiling
 * with cache write for matmul, consumer fusion for matmul+bias+relu, rfactor for row
 * reductions). Programs per sketch: --iters / 50 (default --iters 100); the seed is printed.
 * The gpu_* tests do the same for the GPU sketches of a CUDA target (tuner/sketch_gpu.c): the
 * loop-nest interpreter against the reference, CUDA C within the launch limits, NVRTC and
 * ptxas where the toolkit is found, and the CPU sketches unchanged. */
#include "../../codegen/nvrtc.h"
#include "../../passes/passes.h"
#include "../../passes/state.h"
#include "../../tuner/sketch_priv.h"
#include "../harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double   t_lower, t_jit, t_run; /* seconds spent, printed at the end */
static uint32_t n_checked;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define LONG "t__features_features_12_conv_conv_0_conv_0_0_Conv_output_0_as_an_onnx_export_names_it"
static const char *const graphs[][2] = {
    {"matmul", "input A: f32[12, 20]\nweight B: f32[20, 24]\nC[i, j] += A[i, k] * B[k, j]\n"
               "output C\n"},
    {"matmul_bias_relu", "input A: f32[10, 18]\nweight B: f32[18, 16]\nweight b: f32[16]\n"
                         "C[i, j] += A[i, k] * B[k, j]\nD = add(C, b)\nE = relu(D)\noutput E\n"},
    {"batch_matmul",
     "input A: f32[2, 8, 12]\nweight B: f32[2, 12, 16]\nC = batch_matmul(A, B)\noutput C\n"},
    {"conv3x3", "input x: f32[1, 4, 6, 6]\nweight w: f32[8, 4, 3, 3]\n"
                "y = conv2d(x, w, padding=1)\noutput y\n"},
    {"conv1x1_s2", "input x: f32[2, 8, 8, 8]\nweight w: f32[8, 8, 1, 1]\n"
                   "y = conv2d(x, w, stride=2)\noutput y\n"},
    {"depthwise", "input x: f32[1, 8, 6, 6]\nweight w: f32[8, 1, 3, 3]\n"
                  "y = conv2d(x, w, padding=1, groups=8)\noutput y\n"},
    {"depthwise_nhwc", "input x: f32[1, 6, 6, 16]\nweight w: f32[16, 1, 3, 3]\n"
                       "y = conv2d(x, w, padding=1, groups=16, layout=\"nhwc\")\noutput y\n"},
    {"softmax", "input x: f32[4, 100]\ny = softmax(x, axis=-1)\noutput y\n"},
    {"rowsum", "input x: f32[3, 120]\ns[i] += x[i, k]\noutput s\n"},
    {"elementwise", "input a: f32[6, 50]\ninput b: f32[6, 50]\nc = add(a, b)\nd = exp(c)\n"
                    "e = mul(d, a)\noutput e\n"},
    {"exp_matmul", "input A: f32[10, 12]\nweight B: f32[12, 16]\nE = exp(A)\n"
                   "C = matmul(E, B)\noutput C\n"},
    {"two_anchors", "input x: f32[8, 12]\nweight w1: f32[12, 16]\nweight w2: f32[16, 8]\n"
                    "h = matmul(x, w1)\nr = relu(h)\ny = matmul(r, w2)\noutput y\n"},
    /* ONNX's Clip as imported: bounds are 0-d weights, which must not make the clip a tiled
     * op of its own (the convolution is fused into it) */
    {"conv_clip", "input x: f32[1, 6, 6, 8]\nweight w: f32[16, 8, 1, 1]\nweight b: f32[16]\n"
                  "weight hi: f32[]\nweight lo: f32[]\n"
                  "y = conv2d(x, w, b, layout=\"nhwc\")\nm = minimum(y, hi)\n"
                  "c = maximum(m, lo)\noutput c\n"},
    /* stage names derived from long tensor names ("<name>.local", "<w>.pack", "<s>.rf") were
     * cut at 58 characters, so every program of those sketches failed to apply */
    {"long_names", "input x_" LONG ": f32[1, 8, 6, 6]\nweight w_" LONG ": f32[16, 8, 3, 3]\n"
                   "weight b_" LONG ": f32[16, 1, 1]\n"
                   "y_" LONG " = conv2d(x_" LONG ", w_" LONG ", padding=1)\n"
                   "z_" LONG " = add(y_" LONG ", b_" LONG ")\nr_" LONG " = relu(z_" LONG ")\n"
                   "output r_" LONG "\n"},
    {"long_names_rowsum", "input x_" LONG ": f32[2, 600]\ns_" LONG "[i] += x_" LONG "[i, k]\n"
                          "output s_" LONG "\n"},
    /* plain reductions vectorised along their last output axis, inside the reduction loops
     * (test_plain_reduce_vector): channels-last pooling, a reduction over a middle axis, an
     * odd channel count (no multiple of the lanes), a pooling computed inside its reader */
    {"maxpool_nhwc",
     "input x: f32[1, 9, 9, 16]\n"
     "y = max_pool2d(x, kernel=3, stride=2, padding=1, layout=\"nhwc\")\noutput y\n"},
    {"avgpool_nhwc", "input x: f32[1, 8, 8, 24]\n"
                     "y = avg_pool2d(x, kernel=3, stride=2, padding=1, count_include_pad=0, "
                     "layout=\"nhwc\")\noutput y\n"},
    {"reduce_middle", "input x: f32[3, 10, 24]\ny[i, j] += x[i, k, j]\noutput y\n"},
    {"gap_nhwc",
     "input x: f32[1, 5, 5, 40]\ny = global_avg_pool2d(x, layout=\"nhwc\")\noutput y\n"},
    {"maxpool_odd",
     "input x: f32[1, 7, 7, 37]\n"
     "y = max_pool2d(x, kernel=3, stride=2, padding=1, layout=\"nhwc\")\noutput y\n"},
    {"min_middle_odd", "input x: f32[2, 6, 37]\nweight b: f32[37]\n"
                       "y[i, j] min= x[i, k, j] * b[j]\noutput y\n"},
    {"pool_conv", "input x: f32[1, 8, 8, 16]\nweight w: f32[24, 16, 1, 1]\n"
                  "p = max_pool2d(x, kernel=2, layout=\"nhwc\")\n"
                  "y = conv2d(p, w, layout=\"nhwc\")\noutput y\n"},
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
/* Program p of sketch sk, checked valid, turned into a schedule (its JSON in *st) and lowered;
 * NULL after reporting the step that failed. */
static struct kiln_func *
lower_prog(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_sketch *sk,
           const struct kiln_prog *p, const char *label, const char **st)
{
    struct kiln_schedule s = {0};
    struct kiln_func    *f = NULL;
    *st = NULL;
    if (!kiln_prog_valid(sk, p)) {
        harness_fail(__FILE__, __LINE__, "%s: program not valid", label);
        return NULL;
    }
    if (kiln_prog_schedule(ctx, g, sk, p, &s) != KILN_OK) {
        report(ctx, label, "kiln_prog_schedule", NULL);
        return NULL;
    }
    *st = sched_text(ctx, &s);
    if (kiln_lower(ctx, g, &s, &f) != KILN_OK) {
        report(ctx, label, "kiln_lower", *st);
        return NULL;
    }
    return f;
}

static bool
check_prog(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_target *tg,
           const struct kiln_sketch *sk, const struct kiln_prog *p, const struct ref *R,
           const char *what, bool use_jit)
{
    char label[512];
    snprintf(label, sizeof label, "%s sketch %u [%s]", what, sk->id, sk->desc);
    const char       *st;
    double            t0 = now();
    struct kiln_func *f = lower_prog(ctx, g, sk, p, label, &st);
    if (!f)
        return false;
    n_checked++;
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

/* Of 200 programs sampled per tiled sketch, those that pack pack `yes` (some do) and never
 * `no`: a channels-last depthwise convolution reads its input at the vectorised channel axis
 * as it reads its weights, but packing the input, indexed by every output axis, would copy
 * it in every call with nothing reusing the copy. */
static void
check_packs_only(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_sketch *sk,
                 uint32_t nsk, struct kiln_rng *r, const char *yes, const char *no)
{
    char want[64], bad[64];
    snprintf(want, sizeof want, "\"op\": \"pack\", \"stage\": \"%s\"", yes);
    snprintf(bad, sizeof bad, "\"op\": \"pack\", \"stage\": \"%s\"", no);
    uint32_t packed = 0, wrong = 0, n = 0;
    for (uint32_t s = 0; s < nsk; s++) {
        if (!strstr(sk[s].desc, ":tile"))
            continue;
        for (int it = 0; it < 200; it++, n++) {
            struct kiln_prog     p;
            struct kiln_schedule ps = {0};
            struct kiln_scratch  sc = kiln_scratch_begin(ctx);
            kiln_prog_sample(&sk[s], r, &p);
            bool ok = kiln_prog_schedule(ctx, g, &sk[s], &p, &ps) == KILN_OK;
            CHECK(ok);
            const char *t = ok ? sched_text(ctx, &ps) : "";
            packed += strstr(t, want) != NULL;
            wrong += strstr(t, bad) != NULL;
            kiln_scratch_end(ctx, sc);
        }
    }
    printf("  %u of %u programs pack %s, %u pack %s\n", packed, n, yes, wrong, no);
    CHECK(packed > 0);
    CHECK_EQ_INT(0, wrong);
}

/* Every sketch of every graph: sampled programs, their mutants, crossovers and neighbours
 * lower, compile and match the interpreter; JSON round-trips. */
static void
test_programs(void)
{
    /* --iters N: N / 50 programs per sketch (CI's sanitizer run passes 100, like the default) */
    uint64_t iters = opt_iters_or(100) / 50;
    iters = iters ? iters : 1;
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
                /* prediction's move into the prior: valid, same results */
                q = p;
                if (kiln_prog_in_prior(&sk[s], &r, &q)
                    && !check_prog(ctx, g, &tg, &sk[s], &q, &R, "in prior", false))
                    break;
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
            CHECK(!has_sketch(sk, nsk, "C:plain")); /* two reused tensors */
        }
        /* the pad knob: offered to the tiled sketches of a depthwise convolution with padding
         * (its input is read under a bounds check, and indexed by every output axis), to no
         * other (a full convolution's input is not indexed by the output channels: each
         * channel tile would copy the same window again); a program that pads runs */
        const char *nm = graphs[gi][0];
        bool        guarded = !strcmp(nm, "depthwise") || !strcmp(nm, "depthwise_nhwc");
        for (uint32_t s = 0; s < nsk; s++) {
            uint32_t kp = KILN_NONE, kpack = KILN_NONE;
            for (uint32_t k = 0; k < sk[s].nknob; k++) {
                const char *kn = sk[s].knob[k].name;
                size_t      len = strlen(kn);
                if (len > 4 && !strcmp(kn + len - 4, " pad"))
                    kp = k;
                if (len > 5 && !strcmp(kn + len - 5, " pack"))
                    kpack = k;
            }
            if (strstr(sk[s].desc, ":tile"))
                CHECK_EQ_INT(guarded, kp != KILN_NONE);
            else
                CHECK_EQ_INT(KILN_NONE, kp);
            if (kp == KILN_NONE)
                continue;
            struct kiln_prog p;
            kiln_prog_sample(&sk[s], &r, &p);
            p.v[sk[s].knob[kp].slot] = 1;
            if (kpack != KILN_NONE) /* a packed argument is not padded as well */
                p.v[sk[s].knob[kpack].slot] = 0;
            struct kiln_schedule ps = {0};
            CHECK(kiln_prog_schedule(ctx, g, &sk[s], &p, &ps) == KILN_OK
                  && strstr(sched_text(ctx, &ps), "\"op\": \"pad\""));
            CHECK(check_prog(ctx, g, &tg, &sk[s], &p, &R, "padded", true));
        }
        if (!strcmp(graphs[gi][0], "depthwise")) { /* little reuse: tiled, and plain too */
            CHECK(has_sketch(sk, nsk, "y:tile"));
            CHECK(has_sketch(sk, nsk, "y:plain"));
        }
        if (!strcmp(nm, "depthwise_nhwc")) /* the weights are packed, never the input */
            check_packs_only(ctx, g, sk, nsk, &r, "w", "x");
        if (!strcmp(graphs[gi][0], "matmul_bias_relu")) {
            CHECK(has_sketch(sk, nsk, "C:tile+fuse(E)@1"));
            CHECK(has_sketch(sk, nsk, "D:inline"));
        }
        if (!strcmp(nm, "conv_clip")) { /* y's conv stage is fused into the clip */
            bool fused = false;
            for (uint32_t s = 0; s < nsk; s++)
                fused |= strstr(sk[s].desc, "+fuse(c)") && strstr(sk[s].desc, "c:consumer");
            CHECK(fused);
            CHECK(!has_sketch(sk, nsk, "c:tile"));
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

/* Sets the knob called name (a split's lengths or a choice) of program p. */
static void
set_knob(const struct kiln_sketch *sk, struct kiln_prog *p, const char *name, int64_t a, int64_t b,
         int64_t c)
{
    for (uint32_t i = 0; i < sk->nknob; i++) {
        const struct kiln_knob *k = &sk->knob[i];
        if (strcmp(k->name, name))
            continue;
        int64_t v[3] = {a, b, c};
        for (uint32_t j = 0; j < (k->kind == KILN_KNOB_SPLIT ? k->nparts : 1u); j++)
            p->v[k->slot + j] = v[j];
        return;
    }
    harness_fail(__FILE__, __LINE__, "sketch %s has no knob '%s'", sk->desc, name);
}

struct knob_setting {
    const char *name;
    int64_t     v[3];
};

/* The loop order of stage `stage` after schedule text `sched` ("a b c"), from the schedule state
 * itself (checks the rules' own bookkeeping of reorders, splits and fuses). */
static const char *
leaves_of(kiln_ctx *ctx, const struct kiln_graph *g, const char *sched, const char *stage)
{
    struct kiln_schedule s = {0};
    struct kiln_state    st;
    struct kiln_buf      b = {0};
    if (kiln_sched_from_json(ctx, sched, strlen(sched), &s) != KILN_OK
        || kiln_state_build(ctx, g, &s, &st) != KILN_OK)
        return "(error)";
    for (uint32_t i = 0; i < st.nst; i++) {
        if (strcmp(kiln_sym_str(ctx, st.st[i].name), stage))
            continue;
        for (uint32_t l = 0; l < st.st[i].nleaf; l++)
            kiln_buf_printf(ctx, &b, "%s%s", l ? " " : "",
                            kiln_sym_str(ctx, st.st[i].it[st.st[i].leaf[l]].name));
    }
    return b.data ? b.data : "";
}

/* Program of sketch `desc` of graph `small` with the given knobs; checks that it runs right and
 * returns its schedule for graph `big` (same definitions, larger shapes) as JSON. */
static const char *
bench_prog(kiln_ctx *ctx, const char *small, const char *big, const char *desc,
           const struct knob_setting *set, uint32_t nset, const char *const *order)
{
    struct kiln_target tg;
    struct kiln_hw     hw = {2, 16, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0};
    const char        *out = NULL;
    for (int pass = 0; pass < 2; pass++) {
        struct kiln_graph  *g = PARSE(ctx, pass ? big : small);
        struct kiln_sketch *sk = NULL, *cw = NULL;
        uint32_t            nsk = 0;
        if (!g || kiln_cg_target_parse(ctx, "llvm", &tg) != KILN_OK
            || kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) != KILN_OK) {
            CHECK(false);
            return NULL;
        }
        for (uint32_t s = 0; s < nsk; s++)
            cw = !strcmp(sk[s].desc, desc) ? &sk[s] : cw;
        CHECK(cw != NULL);
        if (!cw)
            return NULL;
        struct kiln_prog p = {.sketch = cw->id};
        for (uint32_t i = 0; i < nset; i++)
            set_knob(cw, &p, set[i].name, set[i].v[0], set[i].v[1], set[i].v[2]);
        struct kiln_schedule s = {0};
        CHECK_EQ_INT(KILN_OK, kiln_prog_schedule(ctx, g, cw, &p, &s));
        out = sched_text(ctx, &s);
        for (uint32_t i = 0; pass == 0 && order[i]; i += 2)
            CHECK_EQ_STR(order[i + 1], leaves_of(ctx, g, out, order[i]));
        if (pass == 0) {
            struct kiln_rng r = kiln_rng_new(opt_seed());
            struct ref      R = {0};
            if (make_ref(ctx, g, &r, &R))
                CHECK(check_prog(ctx, g, &tg, cw, &p, &R, "bench-like", true));
            free_ref(&R);
        }
    }
    return out;
}

/* The hand-written schedules of benchmarks/bench_cpu.c are in the search space: B packed into
 * 32-wide panels and an 8x32 register tile through cache_write with the reduction outermost
 * for matmul; weights packed by 16 output channels and a 14 x 16 (q x k) tile for the 3x3 conv.
 * With KILN_SKETCH_DUMP=DIR the schedules for the benchmark's shapes are written to
 * DIR/matmul.json and DIR/conv.json (for bench_cpu --matmul-schedule / --conv-schedule). */
#define MATMUL_KG                                                                 \
    "input A: f32[%d, %d]\nweight B: f32[%d, %d]\nC[i, j] += A[i, k] * B[k, j]\n" \
    "output C\n"
#define CONV_KG                                                                             \
    "input x: f32[1, %d, %d, %d]\nweight w: f32[%d, %d, 3, 3]\n"                            \
    "y[n, k, h, q] += select(h + rh >= 1 && h + rh <= %d && q + rw >= 1 && q + rw <= %d,\n" \
    "                        x[n, c, h + rh - 1, q + rw - 1], 0.0) * w[k, c, rh, rw]\n"     \
    "    where h < %d, q < %d\noutput y\n"

static void
test_bench_like(void)
{
    kiln_ctx                 *ctx = kiln_ctx_new(NULL);
    char                      small[256], big[256];
    const struct knob_setting mset[] = {
        {"C.i tile", {1, 1, 8}},      {"C.j tile", {1, 1, 32}},   {"C.k tile", {1, 0, 0}},
        {"C vector axis", {1, 0, 0}}, {"C vectorize", {1, 0, 0}}, {"C pack", {1, 0, 0}},
        {"C auto_unroll", {3, 0, 0}}, {"C parallel", {1, 0, 0}},
    };
    snprintf(small, sizeof small, MATMUL_KG, 64, 64, 64, 64);
    snprintf(big, sizeof big, MATMUL_KG, 1024, 1024, 1024, 1024);
    static const char *const morder[] = {"C", "i.0 j.0 i.1 j.1 i.2 j.2 i.3 j.3", "C.local",
                                         "i.0 j.0 k.0 i.1 j.1 k.1 i.2 j.2", NULL};
    const char              *ms =
        bench_prog(ctx, small, big, "C:tile+cache_write@2", mset, KILN_COUNTOF(mset), morder);
    printf("matmul schedule: %s\n", ms ? ms : "(none)");
    CHECK(ms && strstr(ms, "\"pack\"") && strstr(ms, "\"cache_write\"")
          && strstr(ms, "\"compute_at\""));
    const struct knob_setting cset[] = {
        {"y.k tile", {1, 1, 16}},     {"y.h tile", {1, 1, 1}},    {"y.q tile", {1, 1, 14}},
        {"y.c tile", {1, 0, 0}},      {"y.rh tile", {1, 0, 0}},   {"y.rw tile", {1, 0, 0}},
        {"y vector axis", {0, 0, 0}}, {"y vectorize", {1, 0, 0}}, {"y pack", {1, 0, 0}},
        {"y auto_unroll", {3, 0, 0}}, {"y parallel", {1, 0, 0}},
    };
    char csmall[512], cbig[512];
    snprintf(csmall, sizeof csmall, CONV_KG, 16, 14, 14, 32, 16, 14, 14, 14, 14);
    snprintf(cbig, sizeof cbig, CONV_KG, 128, 28, 28, 128, 128, 28, 28, 28, 28);
    static const char *const corder[] = {
        "y", "n h.0 q.0 k.0 h.1 q.1 k.1 h.2 q.2 k.2 h.3 q.3 k.3", "y.local",
        "n h.0 q.0 k.0 rh.0 rw.0 c.0 h.1 q.1 k.1 rh.1 rw.1 c.1 h.2 q.2 k.2", NULL};
    const char *cs =
        bench_prog(ctx, csmall, cbig, "y:tile+cache_write@2", cset, KILN_COUNTOF(cset), corder);
    printf("conv schedule: %s\n", cs ? cs : "(none)");
    CHECK(cs && strstr(cs, "\"pack\"") && strstr(cs, "\"stage\": \"w\""));
    const char *dir = getenv("KILN_SKETCH_DUMP");
    for (int i = 0; dir && i < 2; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.json", dir, i ? "conv" : "matmul");
        FILE *fp = fopen(path, "w");
        CHECK(fp != NULL);
        if (fp) {
            fputs(i ? (cs ? cs : "") : (ms ? ms : ""), fp);
            fclose(fp);
        }
    }
    kiln_ctx_free(ctx);
}

/* The sampling prior (tuner/annotate.c): of the programs drawn for a 256-channel 14x14 conv's
 * tiled sketch, a good share vectorise the packable output-channel axis (and pack the
 * weights), and most keep the innermost tile within the vector registers. Sampling alone,
 * uniform over the knobs, gave 1 in 6 and about a third. Of the vectorised ones, many hold 8
 * to TILE_CAP accumulators in at least as many rows as vectors (shares in test_prior), and
 * nearly all parallel loops have a multiple of the cores or at least 8 per core (83% before
 * the parallel prior, 96% after). 14 has no divisor that is a multiple of 8, so vectorising w
 * would leave lanes idle: the packed k axis is preferred (78%; 45% with the general 40%
 * share). */
/* A vectorised register tile of 8 to TILE_CAP accumulators in at least as many rows as vectors
 * per row (the tile rules of tuner/annotate.c, computed here independently): 12 of AVX2's 16
 * vector registers (8 lanes), 24 of AVX-512's 32. */
#define TILE_CAP(lanes) ((lanes) >= 16 ? 24 : 12)
static bool
tile_full(const struct kiln_sketch *sk, const struct kiln_op_plan *op, const struct kiln_prog *p,
          int lanes, int64_t *regs_out)
{
    uint32_t va = op->vcand[op->k_vaxis == KILN_NONE ? 0 : p->v[sk->knob[op->k_vaxis].slot]];
    bool     vec = p->v[sk->knob[op->k_vec].slot] != 0;
    int64_t  regs = 1, vecs = 1;
    for (uint32_t a = 0; a < op->nvcand; a++) {
        const struct kiln_knob *k = &sk->knob[op->k_split[op->vcand[a]]];
        int64_t                 inner = p->v[k->slot + k->nparts - 1];
        if (vec && op->vcand[a] == va)
            vecs = (inner + lanes - 1) / lanes;
        regs *= vec && op->vcand[a] == va ? vecs : inner;
    }
    *regs_out = regs;
    return vec && regs >= 8 && regs <= TILE_CAP(lanes) && regs / vecs >= vecs;
}

static void
prior_shares(const struct kiln_hw hw, uint32_t full_pct)
{
    kiln_ctx           *ctx = kiln_ctx_new(NULL);
    struct kiln_sketch *sk = NULL;
    uint32_t            nsk = 0;
    struct kiln_rng     r = kiln_rng_new(opt_seed());
    char                kg[512];
    snprintf(kg, sizeof kg, CONV_KG, 256, 14, 14, 256, 256, 14, 14, 14, 14);
    struct kiln_graph *g = PARSE(ctx, kg);
    CHECK(g && kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) == KILN_OK);
    uint32_t tested = 0;
    for (uint32_t s = 0; g && s < nsk; s++) {
        const struct kiln_sketch_priv *pv = sk[s].priv;
        if (!pv || pv->nop != 1 || pv->op[0].mode != KILN_PLAN_TILE_CW)
            continue;
        const struct kiln_op_plan *op = &pv->op[0];
        uint32_t n = 2000, packed = 0, fits = 0, full = 0, nvec = 0, npar = 0, busy = 0;
        uint32_t nmut = 0, kept = 0, npartial = 0, tight = 0, vpartial = 0, vinner = 0;
        for (uint32_t i = 0; i < n; i++) {
            struct kiln_prog p;
            kiln_prog_sample(&sk[s], &r, &p);
            uint32_t va =
                op->vcand[op->k_vaxis == KILN_NONE ? 0 : p.v[sk[s].knob[op->k_vaxis].slot]];
            bool vec = p.v[sk[s].knob[op->k_vec].slot] != 0;
            /* a partial tile (innermost length not dividing the extent) covers the extent with
             * no innermost tile wholly past its end */
            for (uint32_t k = 0; k < sk[s].nknob; k++) {
                const struct kiln_knob *kn = &sk[s].knob[k];
                if (kn->kind != KILN_KNOB_SPLIT || kn->nparts == 0)
                    continue;
                int64_t inner = p.v[kn->slot + kn->nparts - 1], prod = 1;
                for (uint32_t j = 0; j < kn->nparts; j++)
                    prod *= p.v[kn->slot + j];
                if (kn->extent % inner == 0)
                    continue;
                npartial++;
                tight += (kn->extent + prod - 1) / prod * prod - kn->extent < inner;
                /* on the vector axis (fused last into the parallel loop) all its tiles are in
                 * the listed parts: the outermost loop has one iteration */
                if (vec && kn == &sk[s].knob[op->k_split[va]]) {
                    vpartial++;
                    vinner += (kn->extent + prod - 1) / prod == 1;
                }
            }
            packed += va == 1 && op->k_pack != KILN_NONE && p.v[sk[s].knob[op->k_pack].slot] != 0;
            int64_t regs;
            bool    is_full = tile_full(&sk[s], op, &p, hw.vector_lanes, &regs);
            fits += regs <= TILE_CAP(hw.vector_lanes);
            nvec += vec;
            full += is_full;
            /* a mutation of a full tile mostly keeps it full */
            struct kiln_prog q = p;
            int64_t          qregs;
            if (is_full && kiln_prog_mutate(&sk[s], &r, &q)) {
                nmut++;
                kept += tile_full(&sk[s], op, &q, hw.vector_lanes, &qregs)
                        || q.v[sk[s].knob[op->k_vec].slot] == 0;
            }
            /* the parallel loop: the first `par` axes (split ones, the vector axis last) over
             * their outermost tiles */
            int64_t  par = op->k_par == KILN_NONE ? 0 : p.v[sk[s].knob[op->k_par].slot], ext = 1;
            uint32_t order[KILN_MAX_DIMS], no = 0;
            for (uint32_t a = 0; a < op->nvcand; a++)
                if (op->vcand[a] != va)
                    order[no++] = op->vcand[a];
            order[no++] = va;
            for (uint32_t a = 0; a < no && a < par; a++) {
                const struct kiln_knob *k = &sk[s].knob[op->k_split[order[a]]];
                int64_t                 inner = 1;
                for (uint32_t j = 0; j < k->nparts; j++)
                    inner *= p.v[k->slot + j];
                ext *= (k->extent + inner - 1) / inner;
            }
            npar += par > 0;
            busy += par > 0 && ext >= hw.num_cores
                    && (ext % hw.num_cores == 0 || ext >= 8 * hw.num_cores);
        }
        int cap = TILE_CAP(hw.vector_lanes);
        printf("%d lanes, sketch %s: %u of %u programs vectorise the packed k axis, %u fit %d "
               "registers; %u of %u vectorised ones hold 8 to %d in rows >= vectors (%u of %u "
               "mutants of those too); %u of %u parallel ones keep %d cores evenly busy\n",
               hw.vector_lanes, sk[s].desc, packed, n, fits, cap, full, nvec, cap, kept, nmut, busy,
               npar, hw.num_cores);
        printf("  %u of %u partial tiles leave no tile wholly past the end; %u of %u on the "
               "vector axis keep all tiles inside\n",
               tight, npartial, vinner, vpartial);
        CHECK(packed >= n * 6 / 10); /* 14 wide: no tile of w is a multiple of 8 lanes */
        CHECK(fits >= n * 6 / 10);
        CHECK(full >= nvec * full_pct / 100);
        CHECK(busy >= npar * 8 / 10);
        CHECK(kept >= nmut * 85 / 100); /* 83% without the mutation rule, 90-94% with it */
        CHECK(npartial > 0 && tight >= npartial * 9 / 10);
        CHECK(vinner >= vpartial * 8 / 10);
        tested++;
    }
    CHECK(tested > 0);
    kiln_ctx_free(ctx);
}

/* 16 lanes (AVX-512, 24 accumulators): 70% of vectorised draws are full tiles, 51% without
 * fill_tile. 8 lanes (AVX2, 12): 256 channels have vector lengths of 1 or 2 vectors (8, 16)
 * and 14 x 14 rows of 1, 2, 4, 7, 14, ..., so only 2 vectors x 4 rows (or 1 vector x 8 rows
 * when w is vectorised) fit: 41% full (30% when the vector length favoured was the shortest
 * instead of the longest, 17% without fill_tile as well). */
static void
test_prior(void)
{
    /* the register budget the cap comes from, per target */
    const struct {
        const char *target;
        int         lanes, regs;
    } hwt[] = {{"llvm -mtriple=x86_64-linux-gnu -mcpu=znver3", 8, 16},
               {"llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids", 16, 32},
               {"llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids -mattr=-avx512f", 8, 16},
               {"llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", 4, 32}};
    for (size_t i = 0; i < KILN_COUNTOF(hwt); i++) {
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_target t;
        struct kiln_hw     hw;
        if (kiln_cg_target_parse(ctx, hwt[i].target, &t) != KILN_OK) {
            char msg[600];
            kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
            printf("target %s: %s\n", hwt[i].target, msg);
            CHECK(false);
            kiln_ctx_free(ctx);
            continue;
        }
        kiln_hw_from_target(&t, &hw);
        printf("target %s: %d lanes, %d vector registers\n", hwt[i].target, hw.vector_lanes,
               hw.vector_regs);
        CHECK_EQ_INT(hwt[i].lanes, hw.vector_lanes);
        CHECK_EQ_INT(hwt[i].regs, hw.vector_regs);
        kiln_ctx_free(ctx);
    }
    /* the host target carries the host's cache sizes (sysconf, where it knows them); a named
     * CPU keeps the defaults */
    kiln_ctx          *hctx = kiln_ctx_new(NULL);
    struct kiln_target host, named;
    struct kiln_hw     hh, hn;
    CHECK_EQ_INT(KILN_OK, kiln_cg_target_parse(hctx, "llvm", &host));
    CHECK_EQ_INT(KILN_OK,
                 kiln_cg_target_parse(hctx, "llvm -mtriple=x86_64-linux-gnu -mcpu=znver3", &named));
    kiln_hw_from_target(&host, &hh);
    kiln_hw_from_target(&named, &hn);
#ifdef _SC_LEVEL1_DCACHE_SIZE
    long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    printf("host caches: L1 %d, L2 %d bytes (sysconf %ld, %ld)\n", hh.l1_bytes, hh.l2_bytes, l1,
           l2);
    CHECK_EQ_INT(l1 > 0 ? l1 : 48 << 10, hh.l1_bytes);
    CHECK_EQ_INT(l2 > 0 ? l2 : 1280 << 10, hh.l2_bytes);
#endif
    CHECK_EQ_INT(48 << 10, hn.l1_bytes);
    CHECK_EQ_INT(1280 << 10, hn.l2_bytes);
    kiln_ctx_free(hctx);
    prior_shares((struct kiln_hw){2, 16, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0}, 60);
    prior_shares((struct kiln_hw){2, 8, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0}, 35);
}

/* A plain producer read only by a tiled op gets a location knob; computed at the reader's
 * outermost tile (every sketch, with and without parallel outer loops), it still computes the
 * same. */
static void
test_location(void)
{
    kiln_ctx           *ctx = kiln_ctx_new(NULL);
    struct kiln_graph  *g = NULL;
    struct kiln_target  tg;
    struct kiln_hw      hw = {2, 8, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0};
    struct kiln_sketch *sk = NULL;
    uint32_t            nsk = 0;
    struct kiln_rng     r = kiln_rng_new(opt_seed());
    struct ref          R = {0};
    for (size_t gi = 0; gi < KILN_COUNTOF(graphs); gi++)
        if (!strcmp(graphs[gi][0], "exp_matmul"))
            g = PARSE(ctx, graphs[gi][1]);
    CHECK(g && kiln_cg_target_parse(ctx, "llvm", &tg) == KILN_OK
          && kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) == KILN_OK && make_ref(ctx, g, &r, &R));
    for (uint32_t s = 0; g && s < nsk; s++)
        for (int64_t par = 0; par < 3; par++) {
            struct kiln_prog p;
            kiln_prog_sample(&sk[s], &r, &p);
            set_knob(&sk[s], &p, "E location", 1, 0, 0);
            set_knob(&sk[s], &p, "C parallel", par, 0, 0);
            struct kiln_schedule sc = {0};
            CHECK_EQ_INT(KILN_OK, kiln_prog_schedule(ctx, g, &sk[s], &p, &sc));
            CHECK(strstr(sched_text(ctx, &sc), "\"stage\": \"E\", \"target\"") != NULL);
            CHECK(check_prog(ctx, g, &tg, &sk[s], &p, &R, "location", par == 2));
        }
    free_ref(&R);
    kiln_ctx_free(ctx);
}

/* A plain op's parallel knob fuses its outermost axes; over the batch axis alone (1 at batch 1)
 * the loop runs on one core. ResNet-18's max pooling drew that. The prior fuses more axes: of
 * the parallel draws, nearly all keep 2 cores evenly busy (uniform: 1 in 4 is the batch axis
 * alone). */
static void
test_plain_parallel(void)
{
    kiln_ctx           *ctx = kiln_ctx_new(NULL);
    struct kiln_hw      hw = {2, 8, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0};
    struct kiln_sketch *sk = NULL;
    uint32_t            nsk = 0, tested = 0;
    struct kiln_rng     r = kiln_rng_new(opt_seed());
    struct kiln_graph  *g = PARSE(ctx, "input x: f32[1, 64, 112, 112]\n"
                                        "y = max_pool2d(x, kernel=3, stride=2, padding=1)\n"
                                        "output y\n");
    CHECK(g && kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) == KILN_OK);
    for (uint32_t s = 0; g && s < nsk; s++) {
        const struct kiln_sketch_priv *pv = sk[s].priv;
        if (!pv || pv->nop != 1 || pv->op[0].mode != KILN_PLAN_PLAIN
            || pv->op[0].k_par == KILN_NONE)
            continue;
        const struct kiln_op_plan *op = &pv->op[0];
        uint32_t                   n = 1000, npar = 0, busy = 0;
        for (uint32_t i = 0; i < n; i++) {
            struct kiln_prog p;
            kiln_prog_sample(&sk[s], &r, &p);
            int64_t par = p.v[sk[s].knob[op->k_par].slot], ext = 1;
            for (int64_t d = 0; d < par && d < 4; d++) /* y is [1, 64, 56, 56] */
                ext *= d == 0 ? 1 : d == 1 ? 64 : 56;
            npar += par > 0;
            busy += par > 0 && ext >= 2 && (ext % 2 == 0 || ext >= 16);
        }
        printf("sketch %s: %u of %u parallel draws keep 2 cores evenly busy\n", sk[s].desc, busy,
               npar);
        CHECK(npar > n / 2 && busy >= npar * 85 / 100);
        tested++;
    }
    CHECK(tested > 0);
    kiln_ctx_free(ctx);
}

/* The vectorised innermost tile of axis `axis` of a tiled op under p; 0 when that axis is not
 * the vector axis or vectorisation is off. */
static int64_t
k_tile(const struct kiln_sketch *sk, const struct kiln_op_plan *op, const struct kiln_prog *p,
       uint32_t axis)
{
    uint32_t va = op->vcand[op->k_vaxis == KILN_NONE ? 0 : p->v[sk->knob[op->k_vaxis].slot]];
    if (va != axis || !p->v[sk->knob[op->k_vec].slot])
        return 0;
    const struct kiln_knob *kn = &sk->knob[op->k_split[va]];
    return p->v[kn->slot + kn->nparts - 1];
}

/* Grouped convolutions (tuner/annotate.c, group_tile): the analysis finds the group period of
 * the output-channel axis (K / groups, the divisor in the input channel (k / Kg) * Cg + rc; none
 * for a depthwise convolution, whose index folds to k); of the programs whose vector axis is that
 * axis, prediction's prior (kiln_prog_in_prior) keeps every vector tile inside one group and
 * sampling nearly all (90% of draws are moved); sampled and prior programs, channels-last and
 * NCHW, strides 1 and 2, compute the reference's results. 16 lanes: channels per group 4 and 8
 * are below a vector, 16 one, 32 two. */
static void
test_grouped(void)
{
    static const struct {
        int  c, k, groups, hw, stride;
        bool nhwc;
    } cases[] = {
        {16, 16, 16, 6, 1, true}, /* depthwise: Cg = Kg = 1 */
        {32, 32, 8, 6, 1, true},  /* Cg = 4 (ResNeXt-50's first stage) */
        {32, 32, 4, 7, 2, true},  /* Cg = 8, stride 2 */
        {64, 64, 4, 5, 1, true},  /* Cg = 16 (RegNet-X) */
        {64, 64, 2, 5, 1, true},  /* Cg = 32 */
        {16, 32, 4, 6, 1, true},  /* Cg = 4, Kg = 8 */
        {32, 32, 8, 6, 1, false}, /* NCHW */
        {64, 64, 4, 5, 2, false}, {16, 16, 16, 6, 1, false},
    };
    struct kiln_hw hw = {2, 16, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0};
    uint32_t       iters = (uint32_t)opt_iters_or(100);
    for (size_t ci = 0; ci < KILN_COUNTOF(cases); ci++) {
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_target tg;
        struct kiln_rng    r = kiln_rng_new(opt_seed() + ci);
        int     c = cases[ci].c, k = cases[ci].k, gr = cases[ci].groups, h = cases[ci].hw;
        int64_t kg = k / gr, period = kg > 1 ? kg : 0; /* 0: any tile */
        char    text[512], label[128];
        snprintf(label, sizeof label, "%s conv %d->%d groups %d stride %d",
                 cases[ci].nhwc ? "NHWC" : "NCHW", c, k, gr, cases[ci].stride);
        if (cases[ci].nhwc)
            snprintf(text, sizeof text, "input x: f32[1, %d, %d, %d]\n", h, h, c);
        else
            snprintf(text, sizeof text, "input x: f32[1, %d, %d, %d]\n", c, h, h);
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len,
                 "weight w: f32[%d, %d, 3, 3]\nweight b: f32[%d]\n"
                 "y = conv2d(x, w, b, padding=1, stride=%d, groups=%d%s)\nr = relu(y)\n"
                 "output r\n",
                 k, c / gr, k, cases[ci].stride, gr, cases[ci].nhwc ? ", layout=\"nhwc\"" : "");
        struct kiln_graph  *g = PARSE(ctx, text);
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0, conv = KILN_NONE, kaxis = cases[ci].nhwc ? 3 : 1;
        struct ref          R = {0};
        if (!g || kiln_cg_target_parse(ctx, "llvm", &tg) != KILN_OK
            || kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) != KILN_OK
            || !make_ref(ctx, g, &r, &R)) {
            CHECK(false);
            free_ref(&R);
            kiln_ctx_free(ctx);
            continue;
        }
        for (uint32_t i = 0; i < g->nop; i++)
            if (g->op[i].nred)
                conv = i;
        CHECK(conv != KILN_NONE);
        uint32_t ntiled = 0, nk = 0, cross = 0, nprior = 0, prior_cross = 0, nmut = 0,
                 mut_cross = 0;
        for (uint32_t s = 0; s < nsk && conv != KILN_NONE; s++) {
            const struct kiln_op_plan *op = &sk[s].priv->op[conv];
            if (op->mode != KILN_PLAN_TILE && op->mode != KILN_PLAN_TILE_CW
                && op->mode != KILN_PLAN_TILE_FUSE)
                continue;
            ntiled++;
            for (uint32_t a = 0; a < 4; a++)
                CHECK_EQ_INT(a == kaxis ? period : 0, op->gperiod[a]);
            for (uint32_t it = 0; it < iters; it++) {
                struct kiln_prog p, q, m;
                kiln_prog_sample(&sk[s], &r, &p);
                q = p;
                kiln_prog_in_prior(&sk[s], &r, &q);
                m = p;
                bool    mutated = kiln_prog_mutate(&sk[s], &r, &m);
                int64_t tp = k_tile(&sk[s], op, &p, kaxis), tq = k_tile(&sk[s], op, &q, kaxis);
                int64_t tm = k_tile(&sk[s], op, &m, kaxis);
                nk += tp >= 2;
                cross += tp >= 2 && period % tp;
                nprior += tq >= 2;
                prior_cross += tq >= 2 && period % tq;
                if (mutated && tp >= 2 && period % tp == 0) { /* a tile inside a group */
                    nmut += tm >= 2;
                    mut_cross += tm >= 2 && period % tm;
                }
                if (it < 3
                    && (!check_prog(ctx, g, &tg, &sk[s], &p, &R, label, false)
                        || !check_prog(ctx, g, &tg, &sk[s], &q, &R, label, it == 0)))
                    break;
            }
        }
        printf("%s: %u tiled sketches; vector tiles of k crossing groups of %lld: %u of %u "
               "sampled, %u of %u in the prior, %u of %u mutants of ones that did not\n",
               label, ntiled, (long long)kg, cross, nk, prior_cross, nprior, mut_cross, nmut);
        CHECK(ntiled > 0 && nk > 0);
        CHECK(nprior > 0 || !cases[ci].nhwc); /* NCHW: the prior vectorises w */
        CHECK_EQ_INT(0, prior_cross);
        CHECK(cross <= nk * 15 / 100);
        CHECK(mut_cross <= nmut * 15 / 100);
        free_ref(&R);
        kiln_ctx_free(ctx);
    }
}

/* Whether the loop nest text has, inside a loop of reduction iterator `red` of `stage` (or a
 * piece of it that lowering's partitioning or unrolling renamed `red.N`), a vector loop of
 * stage other than an initialisation. */
static bool
vector_inside(const char *text, const char *stage, const char *red)
{
    char head[200], vec[200];
    snprintf(head, sizeof head, "for %s.%s", stage, red);
    snprintf(vec, sizeof vec, "for %s.", stage);
    for (const char *p = strstr(text, head); p; p = strstr(p + 1, head)) {
        char next = p[strlen(head)];
        if (next != ' ' && next != '.')
            continue;
        const char *bol = p;
        while (bol > text && bol[-1] != '\n')
            bol--;
        size_t indent = (size_t)(p - bol);
        for (const char *q = strchr(p, '\n'); q && q[1];) {
            const char *line = q + 1, *e = strchr(line, '\n');
            size_t      len = e ? (size_t)(e - line) : strlen(line), in = strspn(line, " ");
            if (in <= indent)
                break;
            char l[1024];
            snprintf(l, sizeof l, "%.*s", (int)(len < sizeof l - 1 ? len : sizeof l - 1), line);
            if (strstr(l + in, vec) == l + in && strstr(l, "vectorized") && !strstr(l, ".init"))
                return true;
            q = e;
        }
    }
    return false;
}

/* A plain reduction whose last output axis every load reads as its own last index, or not at
 * all (channels-last pooling, global pooling over H and W, a reduction over a middle axis),
 * gets a vector tile of that axis: its programs moved into the prior put the vector part
 * inside the reduction loops (one accumulator per lane), LLVM emits vector loads for it, and
 * they compute what the interpreter does. A reduction over the last input axis (strided lanes:
 * rfactor's) and a channels-last depthwise convolution (weights [c, 1, kh, kw] gathered) get
 * no such knob. Before, every such op ran scalar: an NHWC max pooling 3x3 s2 on 112^2 x 64 at
 * 0.44 GFLOP/s. */
static void
test_plain_reduce_vector(void)
{
    static const struct {
        const char *graph, *stage; /* the reduction's tensor */
        bool        vec;           /* gets the vector tile */
        bool        one_op;        /* the graph's only op: its IR is all the reduction's */
    } cases[] = {
        {"maxpool_nhwc", "y", true, true},     {"avgpool_nhwc", "y.sum", true, false},
        {"reduce_middle", "y", true, true},    {"gap_nhwc", "y.sum", true, false},
        {"maxpool_odd", "y", true, true},      {"min_middle_odd", "y", true, true},
        {"pool_conv", "p", true, false},       {"rowsum", "s", false, false},
        {"depthwise_nhwc", "y", false, false},
    };
    for (size_t ci = 0; ci < KILN_COUNTOF(cases); ci++) {
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g = NULL;
        for (size_t gi = 0; gi < KILN_COUNTOF(graphs); gi++)
            if (!strcmp(graphs[gi][0], cases[ci].graph))
                g = PARSE(ctx, graphs[gi][1]);
        struct kiln_target  tg;
        struct kiln_hw      hw;
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0, op = KILN_NONE, checked = 0;
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed(), cases[ci].graph));
        struct ref          R = {0};
        if (!g || kiln_cg_target_parse(ctx, "llvm", &tg) != KILN_OK) {
            CHECK(false);
            kiln_ctx_free(ctx);
            continue;
        }
        kiln_hw_from_target(&tg, &hw);
        hw.num_cores = 2;
        for (uint32_t i = 0; i < g->nop; i++)
            if (!strcmp(kiln_graph_tensor_name(g, g->op[i].out), cases[ci].stage))
                op = i;
        CHECK(op != KILN_NONE && g->op[op].nred > 0);
        CHECK(kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) == KILN_OK
              && make_ref(ctx, g, &r, &R));
        /* the schedule: the last axis split, its inner part moved behind the reduction loops
         * ("reorder" ["rh", "rw", "c.1"]) and vectorised */
        char     names[KILN_MAX_DIMS + KILN_MAX_REDUCE][KILN_SKETCH_NAME], plain[96];
        char     order[512] = "", vecstep[256] = "";
        uint32_t nd = 0;
        if (op != KILN_NONE) {
            kiln_sketch_axis_names(ctx, g, op, names);
            nd = g->tensor[g->op[op].out].ndim;
            snprintf(plain, sizeof plain, "%s:plain", cases[ci].stage);
            snprintf(order, sizeof order, "\"op\": \"reorder\", \"stage\": \"%s\", \"order\": [",
                     cases[ci].stage);
            for (uint32_t k = 0; k < g->op[op].nred; k++)
                snprintf(order + strlen(order), sizeof order - strlen(order), "\"%s\", ",
                         names[nd + k]);
            snprintf(order + strlen(order), sizeof order - strlen(order), "\"%s.1\"]",
                     names[nd - 1]);
            snprintf(vecstep, sizeof vecstep,
                     "\"op\": \"vectorize\", \"stage\": \"%s\", \"iter\": \"%s.1\"",
                     cases[ci].stage, names[nd - 1]);
        }
        for (uint32_t s = 0; op != KILN_NONE && s < nsk; s++) {
            const struct kiln_op_plan *pl = &sk[s].priv->op[op];
            if (!strstr(sk[s].desc, plain) || pl->mode != KILN_PLAN_PLAIN)
                continue;
            CHECK_EQ_INT(cases[ci].vec, pl->k_vec != KILN_NONE);
            for (int it = 0; cases[ci].vec && it < 12; it++) {
                struct kiln_prog p;
                kiln_prog_sample(&sk[s], &r, &p);
                kiln_prog_in_prior(&sk[s], &r, &p);
                CHECK_EQ_INT(1, p.v[sk[s].knob[pl->k_vec].slot]);
                const char       *st = NULL;
                struct kiln_func *f = lower_prog(ctx, g, &sk[s], &p, cases[ci].graph, &st);
                struct kiln_buf   text = {0};
                if (!f || kiln_func_print(f, &text) != KILN_OK) {
                    CHECK(false);
                    break;
                }
                bool inside = false;
                for (uint32_t k = 0; k < g->op[op].nred; k++)
                    inside |= vector_inside(text.data, cases[ci].stage, names[nd + k]);
                if (!strstr(st, order) || !strstr(st, vecstep) || !inside) {
                    harness_fail(__FILE__, __LINE__,
                                 "%s: want %s and %s, and a vector loop of %s inside its reduction "
                                 "loops\nschedule: %s\n%s",
                                 cases[ci].graph, order, vecstep, cases[ci].stage, st, text.data);
                    break;
                }
                if (cases[ci].one_op && it == 0) {
                    struct kiln_cg_module m = {.f = f, .name = "t", .metadata = "{}", .source = ""};
                    const char           *ir = NULL;
                    CHECK(kiln_cg_llvm_ir(ctx, &m, &tg, &ir) == KILN_OK);
                    CHECK(ir && has_line_with(ir, "x float>", "load"));
                }
                if (!check_prog(ctx, g, &tg, &sk[s], &p, &R, cases[ci].graph, it < 3))
                    break;
                checked++;
            }
        }
        printf("%s: %u vectorised programs of %s's plain sketches checked\n", cases[ci].graph,
               checked, cases[ci].stage);
        CHECK(!cases[ci].vec || checked > 0);
        free_ref(&R);
        kiln_ctx_free(ctx);
    }
}

/* The outermost loop of every root loop nest in s (under its allocations): counts the nests,
 * and those whose first loop is parallel with an extent that keeps `cores` cores evenly busy
 * (a multiple of them, or at least 8 per core). */
static void
root_nests(const struct kiln_func *f, const struct kiln_stmt *s, int cores, uint32_t *n,
           uint32_t *busy)
{
    while (s && (s->kind == KILN_STMT_ALLOC || s->kind == KILN_STMT_LET))
        s = s->kind == KILN_STMT_ALLOC ? s->u.alloc.body : s->u.let.body;
    if (!s)
        return;
    if (s->kind == KILN_STMT_SEQ) {
        for (uint32_t i = 0; i < s->u.seq.n; i++)
            root_nests(f, s->u.seq.item[i], cores, n, busy);
        return;
    }
    if (s->kind != KILN_STMT_FOR)
        return;
    int64_t ext = 0;
    ++*n;
    kiln_expr e = kiln_simplify_expr(f->ctx, s->u.for_.extent, NULL, 0);
    if (s->u.for_.loop == KILN_LOOP_PARALLEL && kiln_expr_is_int(f->ctx, e, &ext) && ext >= cores
        && (ext % cores == 0 || ext >= 8 * cores))
        ++*busy;
}

/* Prediction's prior (kiln_prog_in_prior) on 2 cores: every loop nest of ops with work for
 * several cores starts with a parallel loop that keeps both busy, for tiled ops (a matmul) and
 * for each stage of a softmax: its rfactor partials and their combine included (a BERT-base
 * matmul and four of a softmax's five stages were predicted serial, so 2 threads ran them on
 * one core). The programs compute what the reference computes. */
static void
test_prior_parallel(void)
{
    static const char *const cases[] = {
        "input x: f32[12, 32, 128]\ny = softmax(x, axis=-1)\noutput y\n",
        "input A: f32[64, 96]\nweight B: f32[96, 128]\nC[i, j] += A[i, k] * B[k, j]\noutput C\n",
    };
    for (size_t c = 0; c < KILN_COUNTOF(cases); c++) {
        kiln_ctx           *ctx = kiln_ctx_new(NULL);
        struct kiln_hw      hw = {2, 8, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0};
        struct kiln_target  tg;
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0;
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed(), cases[c]));
        struct kiln_graph  *g = PARSE(ctx, cases[c]);
        struct ref          R = {0};
        CHECK(g && kiln_cg_target_parse(ctx, "llvm", &tg) == KILN_OK
              && kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) == KILN_OK && nsk > 0
              && make_ref(ctx, g, &r, &R));
        for (uint32_t s = 0; g && s < nsk; s++) {
            uint32_t nests = 0, busy = 0;
            for (int it = 0; it < 8; it++) {
                struct kiln_prog p;
                kiln_prog_sample(&sk[s], &r, &p);
                kiln_prog_in_prior(&sk[s], &r, &p);
                const char       *st;
                struct kiln_func *f = lower_prog(ctx, g, &sk[s], &p, "prior_parallel", &st);
                if (!f)
                    break;
                /* counted before partitioning, which splits a partial tile's remainder off an
                 * outer parallel loop as a piece of a few iterations */
                struct kiln_schedule sc = {0};
                struct kiln_func    *fu = NULL;
                if (kiln_prog_schedule(ctx, g, &sk[s], &p, &sc) != KILN_OK
                    || kiln_lower_unflat(ctx, g, &sc, &fu) != KILN_OK) {
                    report(ctx, "prior_parallel", "kiln_lower_unflat", st);
                    break;
                }
                uint32_t n0 = nests, b0 = busy;
                root_nests(fu, fu->body, 2, &nests, &busy);
                if (busy - b0 != nests - n0)
                    printf("  not all parallel (%u of %u): %s\n", busy - b0, nests - n0, st);
                if (it == 0)
                    CHECK(check_prog(ctx, g, &tg, &sk[s], &p, &R, "prior_parallel", false));
            }
            printf("case %zu sketch %s: %u of %u root loop nests parallel on 2 cores\n", c,
                   sk[s].desc, busy, nests);
            CHECK(nests > 0 && busy == nests);
        }
        free_ref(&R);
        kiln_ctx_free(ctx);
    }
}

/* Prediction's prior on a vector axis whose extent is no multiple of the lanes (58 channels,
 * 2 x 29, as ShuffleNetV2 has; 8 lanes): every tiled program's innermost tile of its vector
 * axis is at least a vector long, the last tile partial where it must be (most
 * factorisations of 58 left one or two elements: scalar code at 2.4 GFLOP/s); the programs
 * compute what the reference computes. */
static void
test_prior_vector_tail(void)
{
    static const char *const cases[] = {
        "input x: f32[1, 6, 6, 24]\nweight w: f32[58, 24, 1, 1]\n"
        "y = conv2d(x, w, layout=\"nhwc\")\noutput y\n",
        "input A: f32[24, 40]\nweight B: f32[40, 58]\nC[i, j] += A[i, k] * B[k, j]\noutput C\n",
    };
    for (size_t c = 0; c < KILN_COUNTOF(cases); c++) {
        kiln_ctx           *ctx = kiln_ctx_new(NULL);
        struct kiln_hw      hw = {2, 8, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0};
        struct kiln_target  tg;
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0, checked = 0;
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed(), cases[c]));
        struct kiln_graph  *g = PARSE(ctx, cases[c]);
        struct ref          R = {0};
        CHECK(g && kiln_cg_target_parse(ctx, "llvm", &tg) == KILN_OK
              && kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) == KILN_OK && nsk > 0
              && make_ref(ctx, g, &r, &R));
        for (uint32_t s = 0; g && s < nsk; s++) {
            int lanes = sk[s].priv->lanes;
            for (uint32_t o = 0; o < sk[s].priv->nop; o++) {
                const struct kiln_op_plan *pl = &sk[s].priv->op[o];
                if (pl->k_vaxis == KILN_NONE || !pl->nvcand
                    || pl->k_split[pl->vcand[pl->nvcand - 1]] == KILN_NONE)
                    continue;
                const struct kiln_knob *k = &sk[s].knob[pl->k_split[pl->vcand[pl->nvcand - 1]]];
                if (k->extent < lanes || k->extent % lanes == 0)
                    continue;
                for (int it = 0; it < 16; it++) {
                    struct kiln_prog p;
                    kiln_prog_sample(&sk[s], &r, &p);
                    kiln_prog_in_prior(&sk[s], &r, &p);
                    CHECK(kiln_prog_valid(&sk[s], &p));
                    int64_t inner = p.v[k->slot + k->nparts - 1];
                    if (inner < lanes)
                        harness_fail(__FILE__, __LINE__,
                                     "%s: vector axis of extent %lld, innermost tile %lld < %d",
                                     sk[s].desc, (long long)k->extent, (long long)inner, lanes);
                    if (it < 2 && !check_prog(ctx, g, &tg, &sk[s], &p, &R, "vector_tail", false))
                        break;
                    checked++;
                }
            }
        }
        printf("case %zu: %u programs with a vector axis of a partial last tile checked\n", c,
               checked);
        CHECK(checked > 0);
        free_ref(&R);
        kiln_ctx_free(ctx);
    }
}

/* Prediction's prior on a dense or matmul of one or a few rows with a weight operand (the
 * batch-1 classifier every CNN ends in): in every tiled sketch, its programs vectorise the
 * output axis in tiles of at least a vector and pack the weight into blocks of it, so no
 * vector load reads the weight with a stride (unpacked, a dense's W[N, K] is gathered: 0.46 to
 * 2.9 ms for 1000 x 1024 where the packed program ran in 0.047); the programs compute what the
 * reference computes. N need not be a multiple of the lanes. Every row is in the register
 * tile and N has no middle tile level; with one row, the vector tile is the whole axis or at
 * least half of KILN_MAX_INNER. */
static void
test_prior_gemv(void)
{
    static const char *const cases[] = {
        "input x: f32[1, 96]\nweight W: f32[40, 96]\nweight b: f32[40]\ny = dense(x, W, b)\n"
        "output y\n",
        "input x: f32[1, 72]\nweight W: f32[50, 72]\ny = dense(x, W)\nr = relu(y)\noutput r\n",
        "input x: f32[1, 64]\nweight W: f32[64, 36]\ny[i, j] += x[i, k] * W[k, j]\noutput y\n",
        "input x: f32[1, 40]\nweight W: f32[100, 40]\ny = dense(x, W)\noutput y\n",
        "input x: f32[1, 40]\nweight W: f32[97, 40]\ny = dense(x, W)\noutput y\n",
        "input x: f32[3, 64]\nweight W: f32[24, 64]\nweight b: f32[24]\ny = dense(x, W, b)\n"
        "output y\n",
    };
    static const int lanes_of[] = {8, 16};
    for (size_t c = 0; c < KILN_COUNTOF(cases) * KILN_COUNTOF(lanes_of); c++) {
        const char         *text = cases[c / KILN_COUNTOF(lanes_of)];
        int                 lanes = lanes_of[c % KILN_COUNTOF(lanes_of)];
        kiln_ctx           *ctx = kiln_ctx_new(NULL);
        struct kiln_hw      hw = {2, lanes, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0};
        struct kiln_target  tg;
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0, ntiled = 0, checked = 0, packed = 0, sampled_packed = 0;
        uint32_t            dense = KILN_NONE;
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed() + (uint64_t)lanes, text));
        struct kiln_graph  *g = PARSE(ctx, text);
        struct ref          R = {0};
        CHECK(g && kiln_cg_target_parse(ctx, "llvm", &tg) == KILN_OK
              && kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) == KILN_OK && nsk > 0
              && make_ref(ctx, g, &r, &R));
        for (uint32_t i = 0; g && i < g->nop; i++)
            if (g->op[i].nred)
                dense = i;
        CHECK(dense != KILN_NONE);
        for (uint32_t s = 0; dense != KILN_NONE && s < nsk; s++) {
            const struct kiln_op_plan *op = &sk[s].priv->op[dense];
            if (op->mode != KILN_PLAN_TILE && op->mode != KILN_PLAN_TILE_CW
                && op->mode != KILN_PLAN_TILE_FUSE)
                continue;
            ntiled++;
            uint32_t jaxis = g->tensor[g->op[dense].out].ndim - 1u;
            CHECK(op->nvcand > 0 && op->vcand[op->nvcand - 1] == jaxis);
            CHECK(op->k_pack != KILN_NONE);
            if (!op->nvcand || op->vcand[op->nvcand - 1] != jaxis || op->k_pack == KILN_NONE)
                continue;
            const struct kiln_knob *kj = &sk[s].knob[op->k_split[jaxis]];
            for (int it = 0; it < 40; it++) {
                struct kiln_prog     p, q;
                struct kiln_schedule sp = {0}, sq = {0};
                struct kiln_scratch  sc = kiln_scratch_begin(ctx);
                kiln_prog_sample(&sk[s], &r, &p);
                q = p;
                kiln_prog_in_prior(&sk[s], &r, &q);
                CHECK(kiln_prog_valid(&sk[s], &q));
                CHECK(kiln_prog_schedule(ctx, g, &sk[s], &p, &sp) == KILN_OK);
                CHECK(kiln_prog_schedule(ctx, g, &sk[s], &q, &sq) == KILN_OK);
                const char *tp = sched_text(ctx, &sp), *tq = sched_text(ctx, &sq);
                bool        pk = strstr(tq, "\"op\": \"pack\", \"stage\": \"W\"") != NULL;
                int64_t     inner = q.v[kj->slot + kj->nparts - 1];
                bool        vec = q.v[sk[s].knob[op->k_vec].slot] == 1;
                bool        vaxis =
                    op->k_vaxis == KILN_NONE || q.v[sk[s].knob[op->k_vaxis].slot] == op->nvcand - 1;
                /* few rows: every row in the register tile, no middle level of N; one row:
                 * the whole axis or a long tile */
                bool rows_in = true;
                for (uint32_t a = 0; a + 1 < op->nvcand; a++) {
                    const struct kiln_knob *ki = &sk[s].knob[op->k_split[op->vcand[a]]];
                    rows_in &= q.v[ki->slot + ki->nparts - 1] == ki->extent;
                }
                bool one_row = op->k_vaxis == KILN_NONE;
                if (!rows_in || q.v[kj->slot + 1] != 1
                    || (one_row
                        && 2 * inner < (kj->extent < KILN_MAX_INNER ? kj->extent : KILN_MAX_INNER)))
                    harness_fail(__FILE__, __LINE__,
                                 "lanes %d %s: rows in the register tile %d, split of N [%lld, "
                                 "%lld, %lld]",
                                 lanes, sk[s].desc, rows_in, (long long)q.v[kj->slot],
                                 (long long)q.v[kj->slot + 1], (long long)inner);
                sampled_packed += strstr(tp, "\"op\": \"pack\", \"stage\": \"W\"") != NULL;
                packed += pk;
                if (!pk || !vec || !vaxis || inner < lanes)
                    harness_fail(__FILE__, __LINE__,
                                 "lanes %d %s: prior program packs W %d, vectorised %d along j "
                                 "%d, innermost tile %lld\nschedule: %s",
                                 lanes, sk[s].desc, pk, vec, vaxis, (long long)inner, tq);
                kiln_scratch_end(ctx, sc);
                if (it < 2 && !check_prog(ctx, g, &tg, &sk[s], &q, &R, "prior_gemv", checked == 0))
                    break;
                checked += it < 2;
            }
        }
        printf("case %zu, %d lanes: %u tiled sketches, %u prior programs pack W (%u sampled "
               "ones), %u checked against the reference\n",
               c / KILN_COUNTOF(lanes_of), lanes, ntiled, packed, sampled_packed, checked);
        CHECK(ntiled > 0 && checked > 0);
        free_ref(&R);
        kiln_ctx_free(ctx);
    }
}

/* The example networks (whole graphs, larger than tasks): every sketch's sampled programs and
 * a neighbour of each lower (not run: the shapes are too large for the interpreter). */
static void
test_examples_lower(void)
{
    static const char *const files[] = {"examples/attention.kg", "examples/resnet_block.kg",
                                        "examples/depthwise_separable.kg",
                                        "examples/canvas_kernel.kg", "examples/matmul.kg"};
    uint64_t iters = opt_iters_or(100) / 100; /* a program and a neighbour per sketch */
    for (size_t fi = 0; fi < KILN_COUNTOF(files); fi++) {
        size_t len = 0;
        char  *text = read_file(files[fi], &len);
        if (!text) {
            harness_fail(__FILE__, __LINE__, "cannot read %s", files[fi]);
            continue;
        }
        kiln_ctx           *ctx = kiln_ctx_new(NULL);
        struct kiln_graph  *g = PARSE(ctx, text);
        struct kiln_hw      hw = {4, 16, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0};
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0, nlow = 0;
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed(), files[fi]));
        free(text);
        if (!g || kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) != KILN_OK) {
            report(ctx, files[fi], "kiln_sketches_generate", NULL);
            kiln_ctx_free(ctx);
            continue;
        }
        for (uint32_t s = 0; s < nsk; s++)
            for (uint64_t it = 0; it < (iters ? iters : 1); it++) {
                struct kiln_prog p, nb[64];
                kiln_prog_sample(&sk[s], &r, &p);
                uint32_t nn = kiln_prog_neighbours(&sk[s], &p, nb, 64);
                if (nn) { /* one neighbour, at random */
                    nb[0] = nb[kiln_rng_below(&r, nn)];
                    nn = 1;
                }
                for (uint32_t k = 0; k <= nn; k++) {
                    struct kiln_schedule    sc = {0};
                    struct kiln_func       *f = NULL;
                    const struct kiln_prog *q = k < nn ? &nb[k] : &p;
                    if (kiln_prog_schedule(ctx, g, &sk[s], q, &sc) != KILN_OK) {
                        report(ctx, files[fi], "kiln_prog_schedule", sk[s].desc);
                        break;
                    }
                    if (kiln_lower(ctx, g, &sc, &f) != KILN_OK) {
                        report(ctx, files[fi], "kiln_lower", sched_text(ctx, &sc));
                        break;
                    }
                    nlow++;
                }
            }
        printf("%s: %u sketches, %u schedules lowered; first: %s\n", files[fi], nsk, nlow,
               sk[0].desc);
        kiln_ctx_free(ctx);
    }
}

/* Bad program JSON gives clear errors, never a crash. */
static void
test_json_errors(void)
{
    kiln_ctx           *ctx = kiln_ctx_new(NULL);
    struct kiln_graph  *g = PARSE(ctx, graphs[0][1]);
    struct kiln_hw      hw = {2, 8, 64, 48 << 10, 1280 << 10, 0, false, 0, 0, 0, 0};
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
    /* out-of-range values of the right count: a zero tile length, a huge number, a choice
     * past its options */
    const struct kiln_sketch *t = NULL;
    for (uint32_t i = 0; i < nsk; i++)
        t = !strcmp(sk[i].desc, "C:tile") ? &sk[i] : t;
    CHECK(t != NULL);
    for (int which = 0; t && which < 3; which++) {
        struct kiln_rng r = kiln_rng_new(opt_seed());
        struct kiln_buf b = {0};
        kiln_prog_sample(t, &r, &p);
        const struct kiln_knob *last = &t->knob[t->nknob - 1];
        kiln_buf_puts(ctx, &b, "{\"sketch\": \"C:tile\", \"v\": [");
        for (uint32_t v = 0; v < t->nvalues; v++) {
            const char *num = NULL;
            if (v == 0 && which == 0)
                num = "0";
            if (v == 0 && which == 1)
                num = "1e300";
            if (v == last->slot && which == 2)
                num = "99";
            if (num)
                kiln_buf_printf(ctx, &b, "%s%s", v ? ", " : "", num);
            else
                kiln_buf_printf(ctx, &b, "%s%lld", v ? ", " : "", (long long)p.v[v]);
        }
        kiln_buf_puts(ctx, &b, "]}");
        kiln_ctx_error_clear(ctx);
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_prog_from_json(ctx, sk, nsk, b.data, &p));
    }
    kiln_ctx_free(ctx);
}

/* ---- GPU sketches (tuner/sketch_gpu.c) ---- */

/* Launch facts of a lowered GPU program: the most threads of a block, whether a thread loop
 * and a block loop were made, the most static shared memory of a kernel. */
struct gpu_launch {
    uint32_t threads, shared;
    bool     block, thread;
};

static uint32_t n_ptx; /* GPU programs compiled by NVRTC and ptxas */

static void
gpu_launch_of(const struct kiln_cuda_source *src, struct gpu_launch *L)
{
    *L = (struct gpu_launch){0};
    for (uint32_t k = 0; k < src->nkernel; k++) {
        const struct kiln_cuda_kernel *kk = &src->kernel[k];
        uint32_t                       th = kk->block[0] * kk->block[1] * kk->block[2];
        L->threads = th > L->threads ? th : L->threads;
        L->shared = kk->shared_bytes > L->shared ? kk->shared_bytes : L->shared;
        L->block |= kk->grid[0] * kk->grid[1] * kk->grid[2] > 1;
        L->thread |= th > 1;
    }
}

/* Lowers program p of GPU sketch sk, checks the loop nest against the reference (when R),
 * emits CUDA C, and compiles it with NVRTC and has ptxas accept it for sm_80 when ptx is 1,
 * or 2 and the program uses shared memory. */
static bool
check_gpu_prog(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_sketch *sk,
               const struct kiln_prog *p, const struct ref *R, const char *what, int ptx,
               struct gpu_launch *L)
{
    struct kiln_cuda_source src;
    char                    label[512];
    snprintf(label, sizeof label, "%s GPU sketch %u [%s]", what, sk->id, sk->desc);
    const char       *st;
    struct kiln_func *f = lower_prog(ctx, g, sk, p, label, &st);
    if (!f)
        return false;
    if (R && !check_interp(ctx, g, f, R, label, st))
        return false;
    if (kiln_cg_cuda_source(ctx, f, "gpu_sketch", &src) != KILN_OK) {
        report(ctx, label, "kiln_cg_cuda_source", st);
        return false;
    }
    gpu_launch_of(&src, L);
    if (L->threads > 1024 || L->shared > 48 * 1024) {
        harness_fail(__FILE__, __LINE__, "%s: %u threads, %u shared bytes\nschedule: %s", label,
                     L->threads, L->shared, st);
        return false;
    }
    if (ptx == 1 || (ptx == 2 && L->shared > 0)) {
        const char *text = NULL;
        n_ptx++;
        if (kiln_nvrtc_ptx(ctx, src.text, "gpu_sketch.cu", "sm_80", false, &text) != KILN_OK) {
            report(ctx, label, "kiln_nvrtc_ptx", st);
            return false;
        }
        if (kiln_ptxas_check(ctx, text, "sm_80") != KILN_OK) {
            report(ctx, label, "kiln_ptxas_check", st);
            return false;
        }
    }
    return true;
}

/* Every graph of graphs[] on a CUDA target: the GPU sketches' sampled programs (20 per sketch,
 * --iters / 5) and their mutants lower, compute what the reference interpreter computes in the
 * loop-nest interpreter, and become CUDA C within the launch limits; with NVRTC, the first
 * program of each sketch compiles to PTX that ptxas accepts. Tiled sketches bind blocks and
 * threads, and some programs use shared memory. */
static void
test_gpu_programs(void)
{
    uint64_t iters = opt_iters_or(100) / 5;
    bool     nvrtc = kiln_nvrtc_available();
    uint32_t total = 0, total_shared = 0;
    iters = iters ? iters : 1;
    if (!nvrtc)
        printf("no NVRTC: CUDA C is emitted but not compiled\n");
    for (size_t gi = 0; gi < KILN_COUNTOF(graphs); gi++) {
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g = PARSE(ctx, graphs[gi][1]);
        struct kiln_target tg;
        struct kiln_hw     hw;
        if (!g || kiln_cg_target_parse(ctx, "cuda -arch=sm_80", &tg) != KILN_OK) {
            kiln_ctx_free(ctx);
            CHECK(false);
            continue;
        }
        kiln_hw_from_target(&tg, &hw);
        CHECK(hw.gpu);
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed(), graphs[gi][0]));
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0, nprog = 0, nshared = 0, ntiled_bound = 0, ntiled = 0;
        struct ref          R = {0};
        if (kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) != KILN_OK) {
            report(ctx, graphs[gi][0], "kiln_sketches_generate (GPU)", NULL);
            kiln_ctx_free(ctx);
            continue;
        }
        CHECK(nsk >= 1);
        if (!make_ref(ctx, g, &r, &R)) {
            free_ref(&R);
            kiln_ctx_free(ctx);
            continue;
        }
        for (uint32_t s = 0; s < nsk; s++) {
            bool tiled = strstr(sk[s].desc, "gpu-tile") != NULL, ok = true;
            ntiled += tiled;
            bool bound = false, shared_ptx = false;
            for (uint64_t it = 0; it < iters && ok; it++) {
                struct kiln_prog  p, q;
                struct gpu_launch L;
                kiln_prog_sample(&sk[s], &r, &p);
                int ptx = !nvrtc ? 0 : it == 0 ? 1 : shared_ptx ? 0 : 2;
                ok = check_gpu_prog(ctx, g, &sk[s], &p, &R, graphs[gi][0], ptx, &L);
                shared_ptx |= ptx && L.shared > 0;
                nprog += ok;
                nshared += ok && L.shared > 0;
                bound |= ok && L.block && L.thread;
                /* a mutant and a crossover stay valid GPU programs */
                q = p;
                if (ok && kiln_prog_mutate(&sk[s], &r, &q)) {
                    ok = check_gpu_prog(ctx, g, &sk[s], &q, &R, graphs[gi][0], 0, &L);
                    nprog += ok;
                    nshared += ok && L.shared > 0;
                }
                /* JSON round trip */
                struct kiln_buf js = {0};
                CHECK_EQ_INT(KILN_OK, kiln_prog_to_json(ctx, &sk[s], &p, &js));
                CHECK_EQ_INT(KILN_OK, kiln_prog_from_json(ctx, sk, nsk, js.data, &q));
                CHECK(!memcmp(p.v, q.v, sizeof p.v));
            }
            ntiled_bound += tiled && bound;
        }
        printf("%s: %u GPU sketches (%u tiled), %u programs checked, %u with shared memory\n",
               graphs[gi][0], nsk, ntiled, nprog, nshared);
        for (uint32_t s = 0; s < nsk; s++)
            printf("  %u: %s (%u knobs)\n", s, sk[s].desc, sk[s].nknob);
        /* ops with data reuse are tiled and bound to blocks and threads */
        if (!strcmp(graphs[gi][0], "matmul") || !strcmp(graphs[gi][0], "conv3x3")) {
            CHECK(ntiled >= 2);
            CHECK_EQ_INT(ntiled, ntiled_bound);
            CHECK(has_sketch(sk, nsk, "gpu-tile+cache_write"));
            CHECK(nshared > 0);
        }
        if (!strcmp(graphs[gi][0], "matmul_bias_relu"))
            CHECK(has_sketch(sk, nsk, "gpu-tile+fuse(E)"));
        if (!strcmp(graphs[gi][0], "elementwise") || !strcmp(graphs[gi][0], "softmax"))
            CHECK_EQ_INT(0, ntiled);
        total += nprog;
        total_shared += nshared;
        free_ref(&R);
        kiln_ctx_free(ctx);
    }
    printf("GPU sketches: %u programs checked, %u with shared memory, %u compiled by NVRTC and "
           "accepted by ptxas (each sketch's first, and its first with shared memory)\n",
           total, total_shared, n_ptx);
    CHECK(total_shared > 0);
}

/* Large shapes: the clamps keep every sampled program within 1024 threads per block and 48 KiB
 * of shared memory (CUDA C emitted, not run). */
static void
test_gpu_limits(void)
{
    static const char *const big[] = {
        "input A: f32[1024, 512]\nweight B: f32[512, 2048]\nC = matmul(A, B)\noutput C\n",
        "input x: f32[1, 256, 56, 56]\nweight w: f32[256, 256, 3, 3]\n"
        "y = conv2d(x, w, padding=1)\noutput y\n",
    };
    uint32_t n = 0, nshared = 0, maxthreads = 0, maxshared = 0;
    for (size_t gi = 0; gi < KILN_COUNTOF(big); gi++) {
        kiln_ctx           *ctx = kiln_ctx_new(NULL);
        struct kiln_graph  *g = PARSE(ctx, big[gi]);
        struct kiln_target  tg;
        struct kiln_hw      hw;
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0;
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed(), big[gi]));
        if (!g || kiln_cg_target_parse(ctx, "cuda -arch=sm_80", &tg) != KILN_OK) {
            kiln_ctx_free(ctx);
            CHECK(false);
            continue;
        }
        kiln_hw_from_target(&tg, &hw);
        if (kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) != KILN_OK) {
            report(ctx, "big", "kiln_sketches_generate (GPU)", NULL);
            kiln_ctx_free(ctx);
            continue;
        }
        for (uint32_t s = 0; s < nsk; s++)
            for (int it = 0; it < 40; it++) {
                struct kiln_prog    p;
                struct gpu_launch   L;
                struct kiln_scratch sc = kiln_scratch_begin(ctx);
                kiln_prog_sample(&sk[s], &r, &p);
                bool ok = check_gpu_prog(ctx, g, &sk[s], &p, NULL, "big", 0, &L);
                kiln_scratch_end(ctx, sc);
                kiln_ctx_error_clear(ctx);
                if (!ok)
                    break;
                n++;
                nshared += L.shared > 0;
                maxthreads = L.threads > maxthreads ? L.threads : maxthreads;
                maxshared = L.shared > maxshared ? L.shared : maxshared;
            }
        kiln_ctx_free(ctx);
    }
    printf("large shapes: %u programs, %u with shared memory; at most %u threads per block, "
           "%u shared bytes\n",
           n, nshared, maxthreads, maxshared);
    CHECK(n > 0);
}

/* Droplet over GPU programs: every neighbour (one knob one step away, kiln_prog_neighbours) of
 * sampled programs of the large matmul's and convolution's GPU sketches is a valid program
 * whose CUDA C stays within 1024 threads per block and 48 KiB of shared memory (the clamps of
 * kiln_gpu_prog_schedule apply to whatever a neighbour moves), and most centres have
 * neighbours that make another schedule (Droplet has somewhere to go). */
static void
test_gpu_neighbours(void)
{
    static const char *const big[] = {
        "input A: f32[1024, 512]\nweight B: f32[512, 2048]\nC = matmul(A, B)\noutput C\n",
        "input x: f32[1, 256, 56, 56]\nweight w: f32[256, 256, 3, 3]\n"
        "y = conv2d(x, w, padding=1)\noutput y\n",
    };
    static const int per_sketch[] = {3, 1};
    uint32_t         n = 0, ncentre = 0, moving = 0, maxthreads = 0, maxshared = 0;
    for (size_t gi = 0; gi < KILN_COUNTOF(big); gi++) {
        kiln_ctx           *ctx = kiln_ctx_new(NULL);
        struct kiln_graph  *g = PARSE(ctx, big[gi]);
        struct kiln_target  tg;
        struct kiln_hw      hw;
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0;
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed(), big[gi]));
        struct kiln_prog   *nb = calloc(256, sizeof *nb);
        if (!g || !nb || kiln_cg_target_parse(ctx, "cuda -arch=sm_80", &tg) != KILN_OK) {
            free(nb);
            kiln_ctx_free(ctx);
            CHECK(false);
            continue;
        }
        kiln_hw_from_target(&tg, &hw);
        CHECK_EQ_INT(KILN_OK, kiln_sketches_generate(ctx, g, &hw, &sk, &nsk));
        for (uint32_t s = 0; s < nsk; s++)
            for (int it = 0; it < per_sketch[gi]; it++) {
                struct kiln_prog p;
                kiln_prog_sample(&sk[s], &r, &p);
                p.sketch = s;
                uint32_t cnt = kiln_prog_neighbours(&sk[s], &p, nb, 256);
                bool     ok = true, moves = false;
                char    *centre = NULL;
                {
                    struct kiln_scratch  sc = kiln_scratch_begin(ctx);
                    struct kiln_schedule sch = {0};
                    struct kiln_buf      b = {0};
                    if (kiln_prog_schedule(ctx, g, &sk[s], &p, &sch) == KILN_OK
                        && kiln_sched_to_json(ctx, &sch, &b) == KILN_OK)
                        centre = strdup(b.data);
                    kiln_scratch_end(ctx, sc);
                }
                for (uint32_t k = 0; k < cnt && ok && centre; k++) {
                    struct gpu_launch    L;
                    struct kiln_scratch  sc = kiln_scratch_begin(ctx);
                    struct kiln_schedule sch = {0};
                    struct kiln_buf      b = {0};
                    ok = check_gpu_prog(ctx, g, &sk[s], &nb[k], NULL, "neighbour", 0, &L);
                    if (ok && kiln_prog_schedule(ctx, g, &sk[s], &nb[k], &sch) == KILN_OK
                        && kiln_sched_to_json(ctx, &sch, &b) == KILN_OK)
                        moves |= strcmp(b.data, centre) != 0;
                    kiln_scratch_end(ctx, sc);
                    kiln_ctx_error_clear(ctx);
                    n += ok;
                    maxthreads = L.threads > maxthreads ? L.threads : maxthreads;
                    maxshared = L.shared > maxshared ? L.shared : maxshared;
                }
                CHECK(centre != NULL);
                free(centre);
                ncentre++;
                moving += moves;
            }
        free(nb);
        kiln_ctx_free(ctx);
    }
    printf("Droplet on large GPU programs: %u centres (%u with a neighbour making another "
           "schedule), %u neighbours checked; at most %u threads per block, %u shared bytes\n",
           ncentre, moving, n, maxthreads, maxshared);
    CHECK(n > 0);
    CHECK(moving * 4 >= ncentre * 3);
}

static enum kiln_walk
stop_at_thread_reduce(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    (void)v;
    return s->kind == KILN_STMT_FOR && s->u.for_.thread_reduce ? KILN_WALK_STOP : KILN_WALK_GO;
}

/* Whether s holds a cross-thread reduction loop. */
static bool
has_thread_reduce(const struct kiln_stmt *s)
{
    struct kiln_stmt_visitor v = {.pre = stop_at_thread_reduce};
    return kiln_stmt_visit(&v, s) == KILN_WALK_STOP;
}

/* The cross-thread reduction sketch (tuner/README.md): offered for a dense layer at batch 1
 * (a GEMV), a global average pool and a max over long rows, whose 40 sampled programs (and
 * their mutants) bind a reduction loop to threadIdx.x, keep within the launch limits and match
 * the reference in the loop-nest interpreter; not offered for a large matmul, a large
 * convolution, a short reduction or an elementwise op, whose sketches are as before. */
static void
test_gpu_cross_thread(void)
{
    static const struct {
        const char *name, *kg;
        bool        want;
    } cases[] = {
        {"gemv", "input x: f32[1, 500]\nweight W: f32[300, 500]\ny = dense(x, W)\noutput y\n",
         true},
        {"global_pool", "input x: f32[1, 64, 7, 7]\ny = global_avg_pool2d(x)\noutput y\n", true},
        {"row_max", "input x: f32[6, 1000]\ny[i] max= x[i, k]\noutput y\n", true},
        {"matmul",
         "input A: f32[1024, 512]\nweight B: f32[512, 2048]\nC = matmul(A, B)\noutput C\n", false},
        {"conv",
         "input x: f32[1, 64, 56, 56]\nweight w: f32[64, 64, 3, 3]\n"
         "y = conv2d(x, w, padding=1)\noutput y\n",
         false},
        {"short", "input x: f32[6, 32]\ny[i] += x[i, k]\noutput y\n", false},
        {"elementwise", "input a: f32[6, 50]\ny = exp(a)\noutput y\n", false},
    };
    for (size_t gi = 0; gi < KILN_COUNTOF(cases); gi++) {
        kiln_ctx           *ctx = kiln_ctx_new(NULL);
        struct kiln_graph  *g = PARSE(ctx, cases[gi].kg);
        struct kiln_target  tg;
        struct kiln_hw      hw;
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0, nprog = 0, xs = KILN_NONE;
        struct kiln_rng     r = kiln_rng_new(kiln_hash_str(opt_seed(), cases[gi].name));
        struct ref          R = {0};
        if (!g || kiln_cg_target_parse(ctx, "cuda -arch=sm_80", &tg) != KILN_OK) {
            kiln_ctx_free(ctx);
            CHECK(false);
            continue;
        }
        kiln_hw_from_target(&tg, &hw);
        if (kiln_sketches_generate(ctx, g, &hw, &sk, &nsk) != KILN_OK) {
            report(ctx, cases[gi].name, "kiln_sketches_generate (GPU)", NULL);
            kiln_ctx_free(ctx);
            continue;
        }
        for (uint32_t s = 0; s < nsk; s++)
            if (strstr(sk[s].desc, "gpu-cross-thread-reduce"))
                xs = xs == KILN_NONE ? s : xs;
        printf("%s: %u GPU sketches:", cases[gi].name, nsk);
        for (uint32_t s = 0; s < nsk; s++)
            printf(" [%s]", sk[s].desc);
        printf("\n");
        CHECK_EQ_INT(cases[gi].want, xs != KILN_NONE);
        if (xs != KILN_NONE && make_ref(ctx, g, &r, &R)) {
            for (int it = 0; it < 40; it++) {
                struct kiln_prog  p, q;
                struct gpu_launch L;
                const char       *st;
                kiln_prog_sample(&sk[xs], &r, &p);
                struct kiln_func *f = lower_prog(ctx, g, &sk[xs], &p, cases[gi].name, &st);
                CHECK(f && has_thread_reduce(f->body));
                bool ok = check_gpu_prog(ctx, g, &sk[xs], &p, &R, cases[gi].name, it == 0, &L);
                CHECK(ok && L.thread && L.shared > 0);
                nprog += ok;
                q = p;
                if (ok && kiln_prog_mutate(&sk[xs], &r, &q))
                    nprog += check_gpu_prog(ctx, g, &sk[xs], &q, &R, cases[gi].name, 0, &L);
            }
            printf("  %u programs of [%s] matched the reference\n", nprog, sk[xs].desc);
            CHECK(nprog >= 40);
        }
        free_ref(&R);
        kiln_ctx_free(ctx);
    }
}

/* The CPU rules are unchanged by the GPU ones: a CPU target gives the sketches it always gave
 * (these lists were printed before tuner/sketch_gpu.c existed), and a CUDA target sets hw.gpu. */
static void
test_gpu_cpu_unchanged(void)
{
    static const char *const want[][8] = {
        {"matmul", "C:tile+cache_write@1", "C:tile+cache_write@2", "C:tile"},
        {"matmul_bias_relu", "C:tile+fuse(E)@1 D:inline E:consumer",
         "C:tile+fuse(E)@2 D:inline E:consumer", "C:tile D:inline E:plain"},
    };
    for (size_t w = 0; w < KILN_COUNTOF(want); w++) {
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        const char        *text = NULL;
        struct kiln_target tg;
        struct kiln_hw     hw;
        for (size_t gi = 0; gi < KILN_COUNTOF(graphs); gi++)
            if (!strcmp(graphs[gi][0], want[w][0]))
                text = graphs[gi][1];
        struct kiln_graph *g = text ? PARSE(ctx, text) : NULL;
        if (!g || kiln_cg_target_parse(ctx, "llvm", &tg) != KILN_OK) {
            kiln_ctx_free(ctx);
            CHECK(false);
            continue;
        }
        kiln_hw_from_target(&tg, &hw);
        CHECK(!hw.gpu);
        hw.num_cores = 2;
        struct kiln_sketch *sk = NULL;
        uint32_t            nsk = 0, nwant = 0;
        CHECK_EQ_INT(KILN_OK, kiln_sketches_generate(ctx, g, &hw, &sk, &nsk));
        while (nwant + 1 < 8 && want[w][nwant + 1])
            nwant++;
        CHECK_EQ_INT(nwant, nsk);
        for (uint32_t s = 0; s < nsk && s < nwant; s++) {
            CHECK_EQ_STR(want[w][s + 1], sk[s].desc);
            CHECK(sk[s].gpu == NULL);
        }
        kiln_ctx_free(ctx);
    }
}

int
main(int argc, char **argv)
{
    static const struct test tests[] = {
        {"programs", test_programs},
        {"bench_like", test_bench_like},
        {"location", test_location},
        {"examples_lower", test_examples_lower},
        {"json_errors", test_json_errors},
        {"prior", test_prior},
        {"grouped", test_grouped},
        {"plain_parallel", test_plain_parallel},
        {"plain_reduce_vector", test_plain_reduce_vector},
        {"prior_parallel", test_prior_parallel},
        {"prior_vector_tail", test_prior_vector_tail},
        {"prior_gemv", test_prior_gemv},
        {"gpu_programs", test_gpu_programs},
        {"gpu_limits", test_gpu_limits},
        {"gpu_neighbours", test_gpu_neighbours},
        {"gpu_cpu_unchanged", test_gpu_cpu_unchanged},
        {"gpu_cross_thread", test_gpu_cross_thread},
    };
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
