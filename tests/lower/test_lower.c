/* tests/lower/test_lower.c -- the property test of code generation: random kernel graphs (from
 * random compute definitions and from the op library) under random legal schedules, lowered,
 * compiled by the LLVM JIT and run, must match the reference interpreter within float32
 * tolerance; guard bytes around every output catch stray writes. Every failure prints the
 * seed, the graph and the schedule so it can be replayed with --seed. */
#include "../../codegen/codegen.h"
#include "../../passes/state.h"
#include "../gen.h"
#include "../harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GUARD       64 /* floats of guard before and after every buffer */
#define GUARD_VALUE 1234.5f

/* ---- running ---- */

static uint64_t step_count[KILN_STEP_COUNT], case_count;

static float *
guarded_alloc(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n + 2 * GUARD) + 64);
    for (int64_t i = 0; i < n + 2 * GUARD; i++)
        p[i] = GUARD_VALUE;
    return p;
}

/* Lowers g under sched, JIT-compiles it, runs it on random inputs and compares every output
 * with the reference interpreter; reports the graph and the schedule on failure. */
static bool
run_and_compare(kiln_ctx *ctx, struct kiln_graph *g, const struct kiln_schedule *schedp,
                struct kiln_rng *rp, uint64_t seed)
{
    struct kiln_schedule sched = *schedp;
    struct kiln_rng      r = *rp;
    bool                 ok = false, verbose = false;
    const char          *why = "";
    struct kiln_func    *f;
    struct kiln_jit     *jit = NULL;
    struct kiln_target   t;
    uint32_t             np = 0;
    float              **buf = NULL;
    double             **ref = NULL;
    if (kiln_lower(ctx, g, &sched, &f) != KILN_OK
        || kiln_cg_target_parse(ctx, "llvm", &t) != KILN_OK) {
        why = "lowering failed";
        goto done;
    }
    uint8_t               role[64] = {0};
    struct kiln_cg_module m = {f, "prop", role, "{}", "", NULL};
    if (kiln_cg_llvm_jit(ctx, &m, &t, &jit) != KILN_OK) {
        why = "jit failed";
        goto done;
    }
    np = f->nparam;
    buf = calloc(np, sizeof *buf);
    ref = calloc(np, sizeof *ref);
    void *data[64];
    for (uint32_t i = 0; i < np; i++) {
        const struct kiln_buffer *b = &f->buf[f->param[i]];
        int64_t                   n = kiln_buffer_numel(b);
        buf[i] = guarded_alloc(n);
        ref[i] = calloc((size_t)n + 1, sizeof(double));
        if (i < g->narg)
            for (int64_t e = 0; e < n; e++)
                ref[i][e] = buf[i][GUARD + e] = (float)(kiln_rng_uniform(&r) * 2 - 1);
        data[i] = buf[i] + GUARD;
    }
    /* reference: every tensor, so the tolerance can follow the largest intermediate value
     * (float32 rounding of a large intermediate survives cancellation downstream) */
    double **all = calloc(g->ntensor, sizeof *all);
    double   scale = 0;
    for (uint32_t ti = 0; ti < g->ntensor; ti++)
        all[ti] = calloc((size_t)kiln_tensor_numel(&g->tensor[ti]) + 1, sizeof(double));
    for (uint32_t i = 0; i < np; i++) {
        uint32_t ti = f->buf[f->param[i]].tensor;
        if (i < g->narg)
            memcpy(all[ti], ref[i], sizeof(double) * (size_t)kiln_tensor_numel(&g->tensor[ti]));
    }
    enum kiln_status est = kiln_ir_eval(ctx, g, all);
    for (uint32_t ti = 0; ti < g->ntensor; ti++) {
        for (int64_t e = 0; est == KILN_OK && e < kiln_tensor_numel(&g->tensor[ti]); e++)
            scale = fmax(scale, fabs(all[ti][e]));
        for (uint32_t i = g->narg; i < np; i++)
            if (f->buf[f->param[i]].tensor == ti)
                memcpy(ref[i], all[ti], sizeof(double) * (size_t)kiln_tensor_numel(&g->tensor[ti]));
        free(all[ti]);
    }
    free(all);
    if (est != KILN_OK) {
        why = "reference interpreter failed";
        goto done;
    }
    int32_t rc = kiln_jit_desc(jit)->kernel(data);
    if (rc) {
        why = "kernel returned an error";
        goto done;
    }
    ok = true;
    for (uint32_t i = 0; i < np && ok; i++) {
        const struct kiln_buffer *b = &f->buf[f->param[i]];
        int64_t                   n = kiln_buffer_numel(b);
        for (int64_t e = 0; e < GUARD && ok; e++)
            if (buf[i][e] != GUARD_VALUE || buf[i][GUARD + n + e] != GUARD_VALUE) {
                ok = false;
                why = "guard bytes were overwritten";
            }
        if (i < g->narg)
            continue;
        for (int64_t e = 0; e < n && ok; e++) {
            double want = ref[i][e], got = buf[i][GUARD + e];
            if (!(fabs(got - want) <= 2e-5 * (1 + scale)) && !(isnan(want) && isnan(got))) {
                ok = false;
                why = "output mismatch";
                fprintf(stderr, "  output %s[%lld]: got %.9g, want %.9g\n",
                        kiln_sym_str(ctx, b->name), (long long)e, got, want);
            }
        }
    }
done:
    if (!ok || verbose) {
        const char     *src = "";
        struct kiln_buf js = {0};
        char            msg[600] = "";
        if (kiln_ctx_error(ctx))
            kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        kiln_ctx_error_clear(ctx);
        kiln_graph_print(ctx, g, KILN_PRINT_EXPANDED, &src);
        kiln_sched_to_json(ctx, &sched, &js);
        if (!ok)
            harness_fail(__FILE__, __LINE__,
                         "case seed %llu: %s %s\n--- graph ---\n%s--- schedule ---\n%s",
                         (unsigned long long)seed, why, msg, src, js.data ? js.data : "");
    }
    for (uint32_t i = 0; i < np; i++) {
        free(buf[i]);
        free(ref[i]);
    }
    free(buf);
    free(ref);
    kiln_jit_free(jit);
    return ok;
}

static bool
check_case(uint64_t seed)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_rng    r = kiln_rng_new(seed);
    struct kiln_graph *g = kiln_test_gen_graph(ctx, &r);
    bool               ok = false;
    if (!g) {
        harness_fail(__FILE__, __LINE__, "case %llu: graph generation failed: %s",
                     (unsigned long long)seed, kiln_ctx_error(ctx)->msg);
    } else {
        struct kiln_schedule sched;
        kiln_test_gen_schedule(ctx, g, &r, &sched);
        for (uint32_t i = 0; i < sched.nstep; i++)
            step_count[sched.step[i].kind]++;
        case_count++;
        if (getenv("KILN_CASE")) { /* replaying: show the case before running it */
            const char     *src = "";
            struct kiln_buf js = {0};
            kiln_graph_print(ctx, g, KILN_PRINT_EXPANDED, &src);
            kiln_sched_to_json(ctx, &sched, &js);
            fprintf(stderr, "--- graph ---\n%s--- schedule ---\n%s", src, js.data ? js.data : "");
        }
        ok = run_and_compare(ctx, g, &sched, &r, seed);
    }
    kiln_ctx_free(ctx);
    return ok;
}

/* Every library op, compiled with the default schedule, against the interpreter. */
static void
test_library_ops_default_schedule(void)
{
    bool seen[128] = {false};
    for (size_t i = 0; i < kiln_test_nop_cases; i++) {
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g = PARSE(ctx, kiln_test_op_cases[i]);
        if (g) {
            for (uint32_t c = 0; c < g->ncall; c++)
                for (uint32_t k = 0; k < kiln_lib_count() && k < 128; k++)
                    seen[k] |= !strcmp(kiln_sym_str(ctx, g->call[c].kind), kiln_lib_name(k));
            struct kiln_rng      r = kiln_rng_new(opt_seed() + i);
            struct kiln_schedule none = {0};
            if (!run_and_compare(ctx, g, &none, &r, opt_seed() + i))
                fprintf(stderr, "  in op case %zu:\n%s", i, kiln_test_op_cases[i]);
        }
        kiln_ctx_free(ctx);
    }
    for (uint32_t k = 0; k < kiln_lib_count() && k < 128; k++)
        if (!seen[k])
            harness_fail(__FILE__, __LINE__, "library op %s has no default-schedule case",
                         kiln_lib_name(k));
}

/* Every library op whose input can be padded (windows over padding: convolutions, pooling,
 * unfold; not conv2d_transpose, whose checks are on the index before its division), with the
 * input padded for all its readers, alone and with each reader's last spatial loop moved
 * innermost and vectorised, against the interpreter. */
static void
test_library_ops_padded(void)
{
    uint32_t padded = 0;
    for (size_t i = 0; i < kiln_test_nop_cases; i++) {
        for (int vec = 0; vec < 2; vec++) {
            kiln_ctx            *ctx = kiln_ctx_new(NULL);
            struct kiln_graph   *g = PARSE(ctx, kiln_test_op_cases[i]);
            struct kiln_schedule s = {0}, none = {0};
            struct kiln_state    st;
            if (!g || kiln_state_build(ctx, g, &none, &st) != KILN_OK) {
                kiln_ctx_free(ctx);
                continue;
            }
            uint32_t         x = g->arg[0];
            struct kiln_step pad = {.kind = KILN_STEP_PAD, .stage = g->tensor[x].name};
            for (uint32_t k = 0; k < st.norder && pad.n < KILN_STEP_MAXN; k++) {
                const struct kiln_stage *c = &st.st[st.order[k]];
                if (kiln_test_pads(ctx, &st, c, x))
                    pad.iters[pad.n++] = c->name;
            }
            kiln_sched_push(ctx, &s, pad);
            if (!pad.n || kiln_state_build(ctx, g, &s, &st) != KILN_OK) {
                kiln_ctx_free(ctx); /* not paddable: the step's error says why */
                continue;
            }
            for (uint32_t j = 0; j < pad.n && vec; j++) {
                const struct kiln_stage *c = NULL;
                for (uint32_t k = 0; k < st.nst; k++)
                    if (st.st[k].name == pad.iters[j])
                        c = &st.st[k];
                struct kiln_step ro = {.kind = KILN_STEP_REORDER, .stage = c->name};
                for (uint32_t r = 0; r < c->nred && ro.n + 1 < KILN_STEP_MAXN; r++)
                    ro.iters[ro.n++] = c->it[c->ndim + r].name;
                ro.iters[ro.n++] = c->it[c->ndim - 1].name;
                struct kiln_step v = {
                    .kind = KILN_STEP_VECTORIZE, .stage = c->name, .iter = c->it[c->ndim - 1].name};
                if (ro.n > 1)
                    kiln_sched_push(ctx, &s, ro);
                kiln_sched_push(ctx, &s, v);
            }
            padded += !vec;
            struct kiln_rng r = kiln_rng_new(opt_seed() + i);
            if (!run_and_compare(ctx, g, &s, &r, opt_seed() + i))
                fprintf(stderr, "  in op case %zu, padded:\n%s", i, kiln_test_op_cases[i]);
            kiln_ctx_free(ctx);
        }
    }
    printf("  %u op cases padded\n", padded);
    CHECK(padded >= 5);
}

/* Regression: this generated case vectorises 22 lanes over a packed tensor read with stride
 * 3, a gather of an odd width; LLVM's padding of it produced an x86 gather whose destination
 * was its index register (SIGILL). (Tied to the generator: if the generator changes, pick the
 * new case with KILN_TRACE.) */
static void
test_odd_width_gather(void)
{
    CHECK(check_case(1795400438185668ull));
}

static void
test_random_graphs_and_schedules(void)
{
    uint64_t n = opt_iters_or(1000), failures = 0;
    if (getenv("KILN_CASE")) { /* replay one case printed by KILN_TRACE */
        check_case(strtoull(getenv("KILN_CASE"), NULL, 0));
        return;
    }
    for (uint64_t i = 0; i < n && failures < 5; i++) {
        if (getenv("KILN_TRACE")) /* a case that crashes the process is named before it runs */
            fprintf(stderr, "case %llu\n", (unsigned long long)(opt_seed() * 1000003u + i));
        failures += !check_case(opt_seed() * 1000003u + i);
    }
    printf("  %llu cases; steps in the schedules:", (unsigned long long)case_count);
    for (int k = 0; k < KILN_STEP_COUNT; k++)
        printf(" %s %llu", kiln_step_desc[k].name, (unsigned long long)step_count[k]);
    printf("\n");
}

/* ---- GPU bindings: the LLVM backend refuses GPU loops, so bound schedules are checked with
 * the loop-nest interpreter, which runs them serially ---- */

/* Runs f (lowered from g) in the loop-nest interpreter and g in the reference interpreter on
 * the same random inputs and compares every output. */
static bool
interp_matches(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_func *f, uint64_t seed,
               const char *label)
{
    struct kiln_rng r = kiln_rng_new(seed);
    double        **all = calloc(g->ntensor, sizeof *all);
    double        **bufs = calloc(f->nparam + 1, sizeof *bufs);
    double          scale = 0;
    bool            ok = true;
    for (uint32_t t = 0; t < g->ntensor; t++) {
        int64_t n = kiln_tensor_numel(&g->tensor[t]);
        all[t] = calloc((size_t)n + 1, sizeof(double));
        if (g->tensor[t].kind != KILN_TENSOR_OP)
            for (int64_t e = 0; e < n; e++)
                all[t][e] = (double)(float)(kiln_rng_uniform(&r) * 2 - 1);
    }
    if (kiln_ir_eval(ctx, g, all) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s: reference interpreter: %s", label,
                     kiln_ctx_error(ctx)->msg);
        ok = false;
    }
    for (uint32_t t = 0; t < g->ntensor && ok; t++)
        for (int64_t e = 0; e < kiln_tensor_numel(&g->tensor[t]); e++)
            scale = fmax(scale, fabs(all[t][e]));
    for (uint32_t p = 0; p < f->nparam && ok; p++) {
        uint32_t t = f->buf[f->param[p]].tensor;
        int64_t  n = kiln_tensor_numel(&g->tensor[t]);
        bufs[p] = calloc((size_t)n + 1, sizeof(double));
        if (g->tensor[t].kind != KILN_TENSOR_OP)
            memcpy(bufs[p], all[t], sizeof(double) * (size_t)n);
    }
    if (ok && kiln_func_eval(f, true, bufs) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s: loop-nest interpreter: %s", label,
                     kiln_ctx_error(ctx)->msg);
        ok = false;
    }
    for (uint32_t p = 0; p < f->nparam && ok; p++) {
        uint32_t t = f->buf[f->param[p]].tensor;
        if (g->tensor[t].kind != KILN_TENSOR_OP)
            continue;
        for (int64_t e = 0; e < kiln_tensor_numel(&g->tensor[t]) && ok; e++)
            if (!(fabs(bufs[p][e] - all[t][e]) <= 2e-5 * (1 + scale))) {
                harness_fail(__FILE__, __LINE__,
                             "%s (seed %llu): %s[%lld]: reference %.9g, loop nest %.9g", label,
                             (unsigned long long)seed, kiln_sym_str(ctx, g->tensor[t].name),
                             (long long)e, all[t][e], bufs[p][e]);
                ok = false;
            }
    }
    for (uint32_t t = 0; t < g->ntensor; t++)
        free(all[t]);
    for (uint32_t p = 0; p < f->nparam; p++)
        free(bufs[p]);
    free(all);
    free(bufs);
    return ok;
}

/* Lowers the graph src under the JSON schedule steps, checks that the printed loop nest has
 * every string of want (loop headers), and compares the loop-nest interpreter with the
 * reference interpreter. Returns the function (NULL on failure). */
static struct kiln_func *
lower_bound(kiln_ctx *ctx, const char *label, const char *src, const char *steps,
            const char *const *want, size_t nwant)
{
    struct kiln_graph   *g = PARSE(ctx, src);
    struct kiln_schedule s;
    struct kiln_func    *f = NULL;
    struct kiln_buf      out = {0};
    if (!g)
        return NULL;
    if (kiln_sched_from_json(ctx, steps, strlen(steps), &s) != KILN_OK
        || kiln_lower(ctx, g, &s, &f) != KILN_OK || kiln_func_print(f, &out) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s: %s", label, kiln_ctx_error(ctx)->msg);
        return NULL;
    }
    for (size_t i = 0; i < nwant; i++)
        if (!strstr(out.data, want[i]))
            harness_fail(__FILE__, __LINE__, "%s: no line '%s' in the loop nest:\n%s", label,
                         want[i], out.data);
    return interp_matches(ctx, g, f, opt_seed(), label) ? f : NULL;
}

struct find_loop {
    enum kiln_loop_kind     kind;
    const struct kiln_stmt *found;
};

static enum kiln_walk
find_loop_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct find_loop *F = v->user;
    if (s->kind != KILN_STMT_FOR || s->u.for_.loop != (uint8_t)F->kind)
        return KILN_WALK_GO;
    F->found = s;
    return KILN_WALK_STOP;
}

/* The first loop of kind `kind` in s (pre-order), or NULL. */
static struct kiln_stmt *
find_loop(struct kiln_stmt *s, enum kiln_loop_kind kind)
{
    struct find_loop         F = {kind, NULL};
    struct kiln_stmt_visitor v = {.user = &F, .pre = find_loop_pre};
    kiln_stmt_visit(&v, s);
    return (struct kiln_stmt *)F.found;
}

/* C[i, j] += A[i, k] * B[k, j] with i and j split (partial tiles) and bound to blocks and
 * threads, k serial inside; then with k outside the thread loops, so the initialisation of C
 * gets thread loops of its own; then accumulating in C.local computed at the thread loops.
 * The verifier refuses a bad axis; the CPU backend refuses the GPU loops. */
static void
test_bind_matmul(void)
{
    static const char *const src = "input A: f32[20, 13]\ninput B: f32[13, 24]\nC = matmul(A, B)\n";
    static const char *const steps =
        "[{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [8]},"
        "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"j\", \"factors\": [8]},"
        "{\"op\": \"reorder\", \"stage\": \"C\", \"order\": [\"i.0\", \"j.0\", \"i.1\", "
        "\"j.1\"]},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.0\", \"thread\": \"blockIdx.x\"},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.0\", \"thread\": \"blockIdx.y\"},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.1\", \"thread\": "
        "\"threadIdx.x\"},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.1\", \"thread\": "
        "\"threadIdx.y\"}%s]";
    static const char *const want[] = {
        "for C.i.0 in [0, +3) gpu_block.x:\n",
        "for C.j.0 in [0, +3) gpu_block.y:\n",
        "for C.i.1 in [0, +8) gpu_thread.x:\n",
        "for C.j.1 in [0, +8) gpu_thread.y:\n",
        "for C.k in [0, +13):\n",
    };
    char text[2048];
    snprintf(text, sizeof text, steps, "");
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    struct kiln_func *f = lower_bound(ctx, "bound matmul", src, text, want, KILN_COUNTOF(want));
    if (f) {
        /* the verifier checks the axis: 0..2 on GPU loops, 0 on the others */
        struct kiln_stmt *th = find_loop(f->body, KILN_LOOP_GPU_THREAD);
        struct kiln_stmt *se = find_loop(f->body, KILN_LOOP_SERIAL);
        CHECK(th && se);
        if (th && se) {
            th->u.for_.axis = 3;
            CHECK_EQ_INT(KILN_ERR_INTERNAL, kiln_func_verify(f, true));
            CHECK(kiln_ctx_error(ctx)
                  && strstr(kiln_ctx_error(ctx)->msg,
                            "gpu_thread loop C.i.1 has axis 3, not 0, 1 or 2 (x, y, z)"));
            kiln_ctx_error_clear(ctx);
            th->u.for_.axis = 0;
            se->u.for_.axis = 1;
            CHECK_EQ_INT(KILN_ERR_INTERNAL, kiln_func_verify(f, true));
            CHECK(kiln_ctx_error(ctx)
                  && strstr(kiln_ctx_error(ctx)->msg,
                            "serial loop C.k has axis 1; only GPU block and thread loops have "
                            "an axis"));
            kiln_ctx_error_clear(ctx);
            se->u.for_.axis = 0;
            CHECK_EQ_INT(KILN_OK, kiln_func_verify(f, true));
        }
        struct kiln_target    t;
        struct kiln_jit      *jit = NULL;
        struct kiln_cg_module m = {.f = f};
        CHECK_EQ_INT(KILN_OK, kiln_cg_target_parse(ctx, "llvm", &t));
        CHECK_EQ_INT(KILN_ERR_UNSUPPORTED, kiln_cg_llvm_jit(ctx, &m, &t, &jit));
        CHECK(jit == NULL);
        kiln_ctx_error_clear(ctx);
    }
    kiln_ctx_free(ctx);

    static const char *const want_init[] = {
        "for C.k in [0, +13):\n",
        "for C.i.1.init in [0, +8) gpu_thread.x:\n",
        "for C.j.1.init in [0, +8) gpu_thread.y:\n",
        "for C.i.1 in [0, +8) gpu_thread.x:\n",
        "for C.j.1 in [0, +8) gpu_thread.y:\n",
    };
    snprintf(text, sizeof text, steps,
             ",{\"op\": \"reorder\", \"stage\": \"C\", \"order\": [\"k\", \"i.1\", "
             "\"j.1\"]}");
    ctx = kiln_ctx_new(NULL);
    lower_bound(ctx, "bound matmul, reduction outside the threads", src, text, want_init,
                KILN_COUNTOF(want_init));
    kiln_ctx_free(ctx);

    /* the usual GPU form: each thread accumulates its element in C.local, computed at the
     * innermost thread loop of C */
    static const char *const local =
        "[{\"op\": \"cache_write\", \"stage\": \"C\"},"
        "{\"op\": \"tile\", \"stage\": \"C\", \"iters\": [\"i\", \"j\"], \"factors\": [8, 8]},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.0\", \"thread\": \"blockIdx.x\"},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.0\", \"thread\": \"blockIdx.y\"},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.1\", \"thread\": "
        "\"threadIdx.x\"},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.1\", \"thread\": "
        "\"threadIdx.y\"},"
        "{\"op\": \"compute_at\", \"stage\": \"C.local\", \"target\": \"C\", \"iter\": "
        "\"j.1\"}]";
    static const char *const want_local[] = {
        "for C.i.0 in [0, +3) gpu_block.x:\n",  "for C.j.0 in [0, +3) gpu_block.y:\n",
        "for C.i.1 in [0, +8) gpu_thread.x:\n", "for C.j.1 in [0, +8) gpu_thread.y:\n",
        "alloc C.local: stack f32[1, 1]\n",     "for C.local.k in [0, +13):\n",
    };
    ctx = kiln_ctx_new(NULL);
    lower_bound(ctx, "bound matmul, C.local at the threads", src, local, want_local,
                KILN_COUNTOF(want_local));
    kiln_ctx_free(ctx);
}

/* A biased, strided, padded conv2d: y.conv's fused n@k on blocks x, its fused h@w split (a
 * partial tile) over blocks y and threads x; the bias stage y fused whole and split over
 * blocks and threads (the same GPU indices: another stage) */
static void
test_bind_conv2d(void)
{
    static const char *const src = "input x: f32[2, 3, 7, 6]\nweight wt: f32[4, 3, 3, 3]\n"
                                   "weight b: f32[4]\ny = conv2d(x, wt, b, stride=2, padding=1)\n";
    static const char *const steps =
        "[{\"op\": \"fuse\", \"stage\": \"y.conv\", \"iters\": [\"n\", \"k\"]},"
        "{\"op\": \"fuse\", \"stage\": \"y.conv\", \"iters\": [\"h\", \"w\"]},"
        "{\"op\": \"split\", \"stage\": \"y.conv\", \"iter\": \"h@w\", \"factors\": [5]},"
        "{\"op\": \"bind\", \"stage\": \"y.conv\", \"iter\": \"n@k\", \"thread\": "
        "\"blockIdx.x\"},"
        "{\"op\": \"bind\", \"stage\": \"y.conv\", \"iter\": \"h@w.0\", \"thread\": "
        "\"blockIdx.y\"},"
        "{\"op\": \"bind\", \"stage\": \"y.conv\", \"iter\": \"h@w.1\", \"thread\": "
        "\"threadIdx.x\"},"
        "{\"op\": \"fuse\", \"stage\": \"y\", \"iters\": [\"n\", \"k\", \"h\", \"w\"]},"
        "{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"n@k@h@w\", \"factors\": [40]},"
        "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"n@k@h@w.0\", \"thread\": "
        "\"blockIdx.x\"},"
        "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"n@k@h@w.1\", \"thread\": "
        "\"threadIdx.x\"}]";
    static const char *const want[] = {
        "for y.conv.n@k in [0, +8) gpu_block.x:\n",    "for y.conv.h@w.0 in [0, +3) gpu_block.y:\n",
        "for y.conv.h@w.1 in [0, +5) gpu_thread.x:\n", "for y.n@k@h@w.0 in [0, +3) gpu_block.x:\n",
        "for y.n@k@h@w.1 in [0, +40) gpu_thread.x:\n",
    };
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    lower_bound(ctx, "bound conv2d", src, steps, want, KILN_COUNTOF(want));
    kiln_ctx_free(ctx);
}

/* An elementwise op: a loop of one iteration bound to blocks stays a loop (a launch
 * dimension); threads y outside a serial loop outside threads x. (With a partial tile the
 * serial loop would be partitioned, its thread loop copied into each piece.) */
/* The classic GPU matmul: 16 x 16 tiles of A and B copied into shared memory (cache_read
 * "scope": "shared") at each step of the reduction's outer loop, each copy filled by the
 * block's threads together, then every thread accumulating its C element from the tiles;
 * partial tiles on every axis. A shared copy computed at root is an error. */
static void
test_bind_shared(void)
{
    const char *const src = kiln_test_shared_matmul_kg, *const steps = kiln_test_shared_matmul;
    static const char *const want[] = {
        "for C.i.0 in [0, +3) gpu_block.y:\n",        "alloc A.cache: shared f32[16, 16]\n",
        "alloc B.cache: shared f32[16, 16]\n",        "for A.cache.i0 in [0, +16) gpu_thread.y:\n",
        "for B.cache.i1 in [0, +16) gpu_thread.x:\n", "for C.j.1 in [0, +16) gpu_thread.x:\n",
    };
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    lower_bound(ctx, "shared-memory matmul", src, steps, want, KILN_COUNTOF(want));
    kiln_ctx_free(ctx);

    ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g = PARSE(ctx, src);
    struct kiln_schedule s;
    struct kiln_func    *f;
    const char          *root = "[{\"op\": \"cache_read\", \"stage\": \"A\", \"readers\": "
                                "[\"C\"], \"scope\": \"shared\"}]";
    if (g && kiln_sched_from_json(ctx, root, strlen(root), &s) == KILN_OK) {
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_lower(ctx, g, &s, &f));
        CHECK(strstr(kiln_ctx_error(ctx)->msg, "A.cache is in shared memory") != NULL);
    }
    kiln_ctx_free(ctx);
}

static void
test_bind_elementwise(void)
{
    static const char *const src = "input x: f32[1, 5, 8]\ny = gelu(x)\n";
    static const char *const steps =
        "[{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [4]},"
        "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"i\", \"thread\": \"blockIdx.z\"},"
        "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"j\", \"thread\": "
        "\"threadIdx.y\"},"
        "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"k.1\", \"thread\": "
        "\"threadIdx.x\"}]";
    static const char *const want[] = {
        "for y.i in [0, +1) gpu_block.z:\n",
        "for y.j in [0, +5) gpu_thread.y:\n",
        "for y.k.0 in [0, +2):\n",
        "for y.k.1 in [0, +4) gpu_thread.x:\n",
    };
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    lower_bound(ctx, "bound gelu", src, steps, want, KILN_COUNTOF(want));
    kiln_ctx_free(ctx);
}

/* Cross-thread reductions (a reduction loop bound to threadIdx.x): every case of tests/gen.c
 * lowers to a loop marked `reduce`, moved to the outermost reduction position, and the
 * loop-nest interpreter (which runs it serially) matches the reference (sums, max, min).
 * Lowering refuses a spatial loop inside the reduction loops and a stage computed at one of
 * them; the verifier refuses the mark on any other loop. */
static void
test_bind_reduction(void)
{
    for (size_t i = 0; i < kiln_test_nxred_cases; i++) {
        const struct kiln_test_xred *x = &kiln_test_xred_cases[i];
        static const char *const     want[] = {" gpu_thread.x reduce:\n"};
        kiln_ctx                    *ctx = kiln_ctx_new(NULL);
        struct kiln_func *f = lower_bound(ctx, x->what, x->kg, x->json, want, KILN_COUNTOF(want));
        struct kiln_stmt *t = f ? find_loop(f->body, KILN_LOOP_GPU_THREAD) : NULL;
        CHECK(t && t->u.for_.thread_reduce && t->u.for_.axis == 0);
        if (i == 0 && t) { /* k.1 went outside k.0; a serial loop marked reduce is refused */
            struct kiln_buf out = {0};
            CHECK_EQ_INT(KILN_OK, kiln_func_print(f, &out));
            const char *a = strstr(out.data, "for y.k.1 in [0, +64) gpu_thread.x reduce:\n");
            const char *b = strstr(out.data, "for y.k.0 in");
            CHECK(a && b && a < b);
            struct kiln_stmt *ser = find_loop(t->u.for_.body, KILN_LOOP_SERIAL);
            CHECK(ser != NULL);
            if (ser) {
                ser->u.for_.thread_reduce = 1;
                CHECK_EQ_INT(KILN_ERR_INTERNAL, kiln_func_verify(f, true));
                CHECK(strstr(kiln_ctx_error(ctx)->msg,
                             "serial loop y.k.0 is marked a cross-thread reduction; only "
                             "gpu_thread.x loops can be")
                      != NULL);
                ser->u.for_.thread_reduce = 0;
            }
        }
        kiln_ctx_free(ctx);
    }
    static const struct {
        const char *kg, *json, *msg;
    } bad[] = {
        {"input x: f32[300]\nweight W: f32[10, 300]\ny[n] += W[n, k] * x[k]\noutput y\n",
         "[{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [64]},"
         "{\"op\": \"reorder\", \"stage\": \"y\", \"order\": [\"k.0\", \"n\"]},"
         "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"k.1\", \"thread\": "
         "\"threadIdx.x\"}]",
         "schedule: y binds its reduction loop k.1 to threadIdx.x (a cross-thread reduction), so "
         "its spatial loops must all be outside its reduction loops, but n is inside (reorder it "
         "out)"},
        {"input x: f32[300]\nweight W: f32[10, 300]\ny[n] += W[n, k] * x[k]\noutput y\n",
         "[{\"op\": \"cache_read\", \"stage\": \"x\", \"readers\": [\"y\"]},"
         "{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [64]},"
         "{\"op\": \"compute_at\", \"stage\": \"x.cache\", \"target\": \"y\", "
         "\"iter\": \"k.0\"},"
         "{\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"k.1\", \"thread\": "
         "\"threadIdx.x\"}]",
         "schedule: x.cache is computed at the reduction loop k.0 of y, whose reduction is bound "
         "to threadIdx.x (a cross-thread reduction): compute it at a spatial loop"},
    };
    for (size_t i = 0; i < KILN_COUNTOF(bad); i++) {
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_graph   *g = PARSE(ctx, bad[i].kg);
        struct kiln_schedule s;
        struct kiln_func    *f;
        CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, bad[i].json, strlen(bad[i].json), &s));
        if (g) {
            CHECK_EQ_INT(KILN_ERR_INVALID, kiln_lower(ctx, g, &s, &f));
            CHECK_EQ_STR(bad[i].msg, kiln_ctx_error(ctx)->msg);
        }
        kiln_ctx_free(ctx);
    }
}

/* A chain of n splits of y's outer loop by [1]: i -> i.0 i.1, i.0 -> i.0.0 i.0.1, ... */
static char *
split_chain(kiln_ctx *ctx, uint32_t n)
{
    struct kiln_buf b = {0}, it = {0};
    bool            ok = kiln_buf_puts(ctx, &b, "{\"steps\": [") && kiln_buf_puts(ctx, &it, "i");
    for (uint32_t k = 0; ok && k < n; k++) {
        ok = kiln_buf_printf(ctx, &b,
                             "%s\n{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"%s\", "
                             "\"factors\": [1]}",
                             k ? "," : "", it.data)
             && kiln_buf_puts(ctx, &it, ".0");
    }
    ok = ok && kiln_buf_puts(ctx, &b, "\n]}\n");
    CHECK(ok);
    return ok ? b.data : NULL;
}

/* Hundreds of chained splits made a loop nest that lowering and every later walk recursed
 * through, and overran fixed arrays sized for 64 loops: now a stage has at most
 * KILN_MAX_LOOPS loops, an error naming the step; just below the limit it lowers and runs. */
static void
test_deep_schedules(void)
{
    static const char *const src = "input x: f32[4, 6]\ny = gelu(x)\n";
    for (uint32_t n = 120; n <= 300; n += 180) {
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_graph   *g = PARSE(ctx, src);
        const char          *js = split_chain(ctx, n);
        struct kiln_schedule s;
        struct kiln_func    *f = NULL;
        if (g && js) {
            CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, js, strlen(js), &s));
            enum kiln_status st = kiln_lower(ctx, g, &s, &f);
            if (n < KILN_MAX_LOOPS) {
                CHECK_EQ_INT(KILN_OK, st);
                if (st == KILN_OK)
                    CHECK(interp_matches(ctx, g, f, opt_seed(), "120 chained splits"));
            } else {
                /* y has loops i and j: split 126 would make the 129th */
                CHECK_EQ_INT(KILN_ERR_INVALID, st);
                const char *msg = kiln_ctx_error(ctx)->msg;
                CHECK(strstr(msg, "schedule step 126 (split y.i.0.0.0") == msg);
                CHECK(strstr(msg, "): the stage would have 129 loops, more than 128") != NULL);
            }
        }
        kiln_ctx_free(ctx);
    }
}

static const struct test tests[] = {
    {"deep_schedules", test_deep_schedules},
    {"library_ops_default_schedule", test_library_ops_default_schedule},
    {"library_ops_padded", test_library_ops_padded},
    {"odd_width_gather", test_odd_width_gather},
    {"random_graphs_and_schedules", test_random_graphs_and_schedules},
    {"bind_matmul", test_bind_matmul},
    {"bind_conv2d", test_bind_conv2d},
    {"bind_elementwise", test_bind_elementwise},
    {"bind_shared", test_bind_shared},
    {"bind_reduction", test_bind_reduction},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
