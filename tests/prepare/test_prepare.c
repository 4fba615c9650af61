/* tests/prepare/test_prepare.c -- prepared calls (weights packed once): random graphs whose
 * schedules pack weights, weight-derived stages (transposes, scalings, reductions of weights)
 * and stages packing inputs, compiled to shared objects; kiln_call, and kiln_prepare +
 * kiln_call_prepared (twice, and from two threads at once with one handle), must all equal the
 * reference interpreter (kiln_ir_eval) on random inputs; a call_prepared after the inputs
 * change still matches (stages that read an input are never prepared); after the weights
 * change, a new prepare gives the new result. The metadata's prepared_bytes says whether the
 * module prepares anything, checked against what the graph implies. Misuse of the entry points
 * (NULL handle, wrong argument count, a handle of another module) is an error code with a
 * message. */
#include "../../ir/ir.h"
#include "../harness.h"
#include "kiln_abi.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXA 16

struct mod {
    kiln_ctx           *ctx;
    struct kiln_graph  *g;
    struct kiln_module *m;
    uint32_t            nargs;
    int64_t             numel[MAXA];
    uint32_t            tensor[MAXA]; /* graph tensor of argument i */
    int                 role[MAXA];
    float              *buf[MAXA];
    DLTensor            t[MAXA];
    DLTensor           *a[MAXA];
    double            **ref; /* per graph tensor */
    double              scale;
};

static char tmpdir[64];

static bool
tmp_init(void)
{
    if (tmpdir[0])
        return true;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/prepare-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        harness_fail(__FILE__, __LINE__, "mkdtemp failed");
        tmpdir[0] = 0;
        return false;
    }
    return true;
}

static void
fill(struct kiln_rng *r, struct mod *M, int role)
{
    for (uint32_t i = 0; i < M->nargs; i++)
        if (M->role[i] == role)
            for (int64_t e = 0; e < M->numel[i]; e++)
                M->buf[i][e] = (float)(kiln_rng_uniform(r) * 2 - 1);
}

static void
mod_free(struct mod *M)
{
    for (uint32_t i = 0; i < MAXA; i++)
        free(M->buf[i]);
    if (M->ref && M->g)
        for (uint32_t t = 0; t < M->g->ntensor; t++)
            free(M->ref[t]);
    free(M->ref);
    kiln_module_free(M->m);
    kiln_ctx_free(M->ctx);
    memset(M, 0, sizeof *M);
}

/* Parses, compiles under sched (JSON or NULL) into a fresh .so, loads it, allocates arguments. */
static bool
mod_build(struct mod *M, const char *text, const char *sched, const char *name)
{
    memset(M, 0, sizeof *M);
    M->ctx = kiln_ctx_new(NULL);
    M->g = PARSE(M->ctx, text);
    if (!M->g || !tmp_init())
        return false;
    /* a fresh path each time: modules are linked -z nodelete, so dlopen of a path loaded
     * before would return the old module */
    static unsigned serial;
    char            path[128];
    snprintf(path, sizeof path, "%s/%s%u.so", tmpdir, name, serial++);
    struct kiln_compile_options opt = {.schedule_json = sched,
                                       .schedule_len = sched ? strlen(sched) : 0};
    if (kiln_graph_compile(M->ctx, M->g, &opt, path, NULL) != KILN_OK
        || kiln_module_load(M->ctx, path, &M->m) != KILN_OK) {
        char msg[600];
        kiln_error_format(kiln_ctx_error(M->ctx), msg, sizeof msg);
        harness_fail(__FILE__, __LINE__,
                     "compiling failed: %s\n--- graph ---\n%s--- schedule ---\n%s", msg, text,
                     sched ? sched : "");
        unlink(path);
        return false;
    }
    unlink(path);
    M->nargs = kiln_module_nargs(M->m);
    if (M->nargs > MAXA) {
        harness_fail(__FILE__, __LINE__, "too many arguments");
        return false;
    }
    for (uint32_t i = 0; i < M->nargs; i++) {
        struct kiln_module_arg a;
        if (kiln_module_arg(M->m, i, &a) != KILN_OK)
            return false;
        M->tensor[i] = kiln_graph_find(M->g, a.name);
        M->role[i] = (int)a.role;
        M->numel[i] = a.bytes / 4;
        M->buf[i] = aligned_alloc(64, (size_t)(a.bytes + 63) / 64 * 64);
        M->t[i] =
            (DLTensor){M->buf[i], {kDLCPU, 0}, a.ndim, a.dl_dtype, (int64_t *)a.shape, NULL, 0};
        M->a[i] = &M->t[i];
        if (!M->buf[i] || M->tensor[i] == KILN_NONE)
            return false;
    }
    M->ref = calloc(M->g->ntensor, sizeof *M->ref);
    for (uint32_t t = 0; M->ref && t < M->g->ntensor; t++)
        M->ref[t] = calloc((size_t)kiln_tensor_numel(&M->g->tensor[t]) + 1, sizeof(double));
    return M->ref != NULL;
}

/* The reference outputs for the current inputs and weights. */
static bool
mod_reference(struct mod *M)
{
    for (uint32_t i = 0; i < M->nargs; i++)
        if (M->role[i] != KILN_ARG_OUTPUT)
            for (int64_t e = 0; e < M->numel[i]; e++)
                M->ref[M->tensor[i]][e] = M->buf[i][e];
    if (kiln_ir_eval(M->ctx, M->g, M->ref) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "reference interpreter failed");
        return false;
    }
    M->scale = 0;
    for (uint32_t t = 0; t < M->g->ntensor; t++)
        for (int64_t e = 0; e < kiln_tensor_numel(&M->g->tensor[t]); e++)
            M->scale = fmax(M->scale, fabs(M->ref[t][e]));
    return true;
}

static void
clear_outputs(struct mod *M, float **out)
{
    for (uint32_t i = 0; i < M->nargs; i++)
        if (M->role[i] == KILN_ARG_OUTPUT)
            for (int64_t e = 0; e < M->numel[i]; e++)
                out[i][e] = NAN;
}

/* Compares outputs (out[i], the data of output i) with the reference. */
static bool
same(const struct mod *M, float *const *out, const char *what, const char *text, const char *sched)
{
    for (uint32_t i = 0; i < M->nargs; i++) {
        if (M->role[i] != KILN_ARG_OUTPUT)
            continue;
        for (int64_t e = 0; e < M->numel[i]; e++) {
            double want = M->ref[M->tensor[i]][e], got = out[i][e];
            if (!(fabs(got - want) <= 1e-4 * (1 + M->scale))) {
                harness_fail(__FILE__, __LINE__,
                             "%s: output %s[%lld] = %.9g, want %.9g\n--- graph ---\n%s"
                             "--- schedule ---\n%s",
                             what, kiln_graph_tensor_name(M->g, M->tensor[i]), (long long)e, got,
                             want, text, sched ? sched : "");
                return false;
            }
        }
    }
    return true;
}

struct worker {
    struct mod                 *M;
    const struct kiln_prepared *p;
    float                      *out[MAXA];
    DLTensor                    t[MAXA];
    DLTensor                   *a[MAXA];
    enum kiln_status            st;
};

static void *
worker_run(void *ud)
{
    struct worker *W = ud;
    kiln_ctx      *ctx = kiln_ctx_new(NULL);
    W->st = kiln_module_call_prepared(ctx, W->M->m, W->p, W->a, (int32_t)W->M->nargs, NULL);
    kiln_ctx_free(ctx);
    return NULL;
}

/* Two threads call_prepared with one handle at once, each with its own outputs. */
static bool
two_threads(struct mod *M, const struct kiln_prepared *p, const char *text, const char *sched)
{
    struct worker W[2];
    pthread_t     th[2];
    bool          ok = true;
    for (int w = 0; w < 2; w++) {
        W[w].M = M;
        W[w].p = p;
        for (uint32_t i = 0; i < M->nargs; i++) {
            W[w].t[i] = M->t[i];
            W[w].out[i] = M->buf[i];
            if (M->role[i] == KILN_ARG_OUTPUT) {
                W[w].out[i] = aligned_alloc(64, (size_t)(M->numel[i] * 4 + 63) / 64 * 64);
                W[w].t[i].data = W[w].out[i];
            }
            W[w].a[i] = &W[w].t[i];
        }
        clear_outputs(M, W[w].out);
    }
    for (int w = 0; w < 2; w++)
        if (pthread_create(&th[w], NULL, worker_run, &W[w]) != 0) {
            harness_fail(__FILE__, __LINE__, "pthread_create failed");
            return false;
        }
    for (int w = 0; w < 2; w++)
        pthread_join(th[w], NULL);
    for (int w = 0; w < 2; w++) {
        CHECK_EQ_INT(KILN_OK, W[w].st);
        ok = ok && W[w].st == KILN_OK && same(M, W[w].out, "two threads", text, sched);
        for (uint32_t i = 0; i < M->nargs; i++)
            if (M->role[i] == KILN_ARG_OUTPUT)
                free(W[w].out[i]);
    }
    return ok;
}

static int64_t
prepared_bytes(const struct mod *M)
{
    const char *s = strstr(kiln_module_metadata(M->m), "\"prepared_bytes\": ");
    return s ? strtoll(s + strlen("\"prepared_bytes\": "), NULL, 10) : -1;
}

/* The whole protocol on one graph and schedule; expect_prep: whether anything is prepared
 * (-1: either). */
static bool
check_case(const char *text, const char *sched, int expect_prep, uint64_t seed)
{
    struct mod      M;
    struct kiln_rng r = kiln_rng_new(seed);
    bool            ok = mod_build(&M, text, sched, "case");
    if (ok && expect_prep >= 0 && (prepared_bytes(&M) > 0) != (expect_prep > 0)) {
        harness_fail(__FILE__, __LINE__, "prepared_bytes %lld, expected %s\n%s--- schedule ---\n%s",
                     (long long)prepared_bytes(&M), expect_prep ? "> 0" : "0", text,
                     sched ? sched : "");
        ok = false;
    }
    fill(&r, &M, KILN_ARG_INPUT);
    fill(&r, &M, KILN_ARG_WEIGHT);
    ok = ok && mod_reference(&M);
    /* the plain call */
    clear_outputs(&M, M.buf);
    ok = ok && kiln_module_call(M.ctx, M.m, M.a, (int32_t)M.nargs, NULL) == KILN_OK
         && same(&M, M.buf, "kiln_call", text, sched);
    /* prepare, then two prepared calls */
    struct kiln_prepared *p = NULL, *p2 = NULL;
    ok = ok && kiln_module_prepare(M.ctx, M.m, M.a, (int32_t)M.nargs, &p, NULL) == KILN_OK;
    for (int k = 0; k < 2 && ok; k++) {
        clear_outputs(&M, M.buf);
        ok = kiln_module_call_prepared(M.ctx, M.m, p, M.a, (int32_t)M.nargs, NULL) == KILN_OK
             && same(&M, M.buf, k ? "second prepared call" : "prepared call", text, sched);
    }
    ok = ok && two_threads(&M, p, text, sched);
    /* new inputs, same weights: the same handle */
    fill(&r, &M, KILN_ARG_INPUT);
    ok = ok && mod_reference(&M);
    clear_outputs(&M, M.buf);
    ok = ok && kiln_module_call_prepared(M.ctx, M.m, p, M.a, (int32_t)M.nargs, NULL) == KILN_OK
         && same(&M, M.buf, "prepared call after new inputs", text, sched);
    /* new weights: prepare again */
    fill(&r, &M, KILN_ARG_WEIGHT);
    ok = ok && mod_reference(&M);
    ok = ok && kiln_module_prepare(M.ctx, M.m, M.a, (int32_t)M.nargs, &p2, NULL) == KILN_OK;
    clear_outputs(&M, M.buf);
    ok = ok && kiln_module_call_prepared(M.ctx, M.m, p2, M.a, (int32_t)M.nargs, NULL) == KILN_OK
         && same(&M, M.buf, "prepared call after new weights and a new prepare", text, sched);
    if (!ok && kiln_ctx_error(M.ctx) && kiln_ctx_error(M.ctx)->status != KILN_OK) {
        char msg[600];
        kiln_error_format(kiln_ctx_error(M.ctx), msg, sizeof msg);
        harness_fail(__FILE__, __LINE__, "%s", msg);
    }
    kiln_module_prepared_free(M.m, p);
    kiln_module_prepared_free(M.m, p2);
    mod_free(&M);
    return ok;
}

/* ---- random graphs ----
 * input x: [R, C], weights w: [C, C] and v: [C]; weight-side ops (reading only weights and
 * earlier weight-side tensors) and input-side ops (an earlier input-side tensor with a
 * weight-side one); the schedule packs a weight-side tensor or the input, inlines a
 * weight-side op, parallelises the last op. */

struct gen {
    struct kiln_buf  text, sched;
    struct kiln_rng *r;
    kiln_ctx        *ctx;
    char             wname[8][16]; /* weight-side 2-D tensors */
    bool             wderived[8], wout[8], winline_ok[8], wread[8];
    uint32_t         nw;
    int              expect;
};

static bool
gen_case(struct gen *G, uint32_t R, uint32_t C)
{
    kiln_ctx *ctx = G->ctx;
    bool      ok = kiln_buf_printf(ctx, &G->text,
                                   "input x: f32[%u, %u]\nweight w: f32[%u, %u]\nweight v: f32[%u]\n", R,
                                   C, C, C, C);
    snprintf(G->wname[0], 16, "w");
    G->wderived[0] = true;
    G->nw = 1;
    uint32_t nwop = (uint32_t)kiln_rng_below(G->r, 4), naop = 1 + (uint32_t)kiln_rng_below(G->r, 3);
    bool     any_derived = false;
    for (uint32_t k = 0; k < nwop && ok; k++) {
        uint32_t a = (uint32_t)kiln_rng_below(G->r, G->nw),
                 kind = (uint32_t)kiln_rng_below(G->r, 3);
        uint32_t b = kind == 2 ? (uint32_t)kiln_rng_below(G->r, G->nw) : a;
        G->wread[a] = G->wread[b] = true;
        char *nm = G->wname[G->nw];
        snprintf(nm, 16, "u%u", k);
        bool out = kiln_rng_below(G->r, 5) == 0;
        if (kind == 0)
            ok = kiln_buf_printf(ctx, &G->text, "%s[i, j] = tanh(%s[j, i]) * 0.5\n", nm,
                                 G->wname[a]);
        else if (kind == 1)
            ok = kiln_buf_printf(ctx, &G->text, "%s[i, j] = %s[i, j] * v[j] + v[i]\n", nm,
                                 G->wname[a]);
        else
            ok = kiln_buf_printf(ctx, &G->text, "%s[i, j] += %s[i, k] * %s[k, j] * 0.25\n", nm,
                                 G->wname[a], G->wname[b]);
        if (out)
            ok = ok && kiln_buf_printf(ctx, &G->text, "output %s\n", nm);
        G->wout[G->nw] = out;
        /* weight-derived: no output, and reads only weight-derived tensors (and v) */
        G->wderived[G->nw] = !out && G->wderived[a] && G->wderived[b];
        G->winline_ok[G->nw] = !out && kind != 2;
        G->nw++;
    }
    char prev[16] = "x";
    for (uint32_t k = 0; k < naop && ok; k++) {
        uint32_t a = k == 0 ? G->nw - 1 : (uint32_t)kiln_rng_below(G->r, G->nw);
        G->wread[a] = true;
        char nm[16];
        snprintf(nm, sizeof nm, "h%u", k);
        if (kiln_rng_below(G->r, 2))
            ok = kiln_buf_printf(ctx, &G->text, "%s[i, j] += %s[i, k] * %s[k, j] * 0.25\n", nm,
                                 prev, G->wname[a]);
        else
            ok = kiln_buf_printf(ctx, &G->text, "%s[i, j] = tanh(%s[i, j]) + v[j] * %s[j, i]\n", nm,
                                 prev, G->wname[a]);
        snprintf(prev, sizeof prev, "%s", nm);
    }
    ok = ok && kiln_buf_printf(ctx, &G->text, "output %s\n", prev);
    /* schedule */
    ok = ok && kiln_buf_puts(ctx, &G->sched, "{\"steps\": [");
    const char *sep = "";
    uint32_t    packed = KILN_NONE, inl = KILN_NONE;
    uint32_t    choice = (uint32_t)kiln_rng_below(G->r, 4);
    if (ok && choice < 2) { /* pack a weight-side tensor that something reads */
        packed = (uint32_t)kiln_rng_below(G->r, G->nw);
        while (!G->wread[packed])
            packed = (packed + 1) % G->nw;
        ok = kiln_buf_printf(ctx, &G->sched,
                             "{\"op\": \"pack\", \"stage\": \"%s\", \"dim\": 1, \"factor\": %u, "
                             "\"outer\": 0}",
                             G->wname[packed], kiln_rng_below(G->r, 2) ? 4u : 8u);
        sep = ", ";
    } else if (ok && choice == 2) { /* pack the input: never prepared */
        ok = kiln_buf_printf(ctx, &G->sched,
                             "{\"op\": \"pack\", \"stage\": \"x\", \"dim\": 1, \"factor\": 4}");
        sep = ", ";
    }
    if (ok && G->nw > 1 && kiln_rng_below(G->r, 3) == 0) {
        uint32_t c = 1 + (uint32_t)kiln_rng_below(G->r, G->nw - 1);
        if (G->winline_ok[c] && c != packed) {
            inl = c;
            ok =
                kiln_buf_printf(ctx, &G->sched, "%s{\"op\": \"compute_inline\", \"stage\": \"%s\"}",
                                sep, G->wname[c]);
            sep = ", ";
        }
    }
    if (ok && kiln_rng_below(G->r, 2))
        ok = kiln_buf_printf(ctx, &G->sched,
                             "%s{\"op\": \"parallel\", \"stage\": \"%s\", \"iter\": \"i\"}", sep,
                             prev);
    ok = ok && kiln_buf_puts(ctx, &G->sched, "]}");
    for (uint32_t k = 1; k < G->nw; k++)
        any_derived |= G->wderived[k] && k != inl;
    if (packed != KILN_NONE && G->wderived[packed])
        any_derived = true;
    G->expect = any_derived ? 1 : 0;
    return ok;
}

static void
test_graphs_random(void)
{
    uint64_t        seed = opt_seed();
    struct kiln_rng r = kiln_rng_new(seed);
    uint64_t        iters = opt_iters_or(20);
    for (uint64_t it = 0; it < iters; it++) {
        kiln_ctx  *ctx = kiln_ctx_new(NULL);
        struct gen G = {.r = &r, .ctx = ctx};
        uint32_t   C = kiln_rng_below(&r, 2) ? 8 : 16, R = C;
        uint64_t   s = kiln_rng_next(&r);
        bool       ok = gen_case(&G, R, C) && check_case(G.text.data, G.sched.data, G.expect, s);
        if (!ok)
            fprintf(stderr, "  case %llu (seed %llu) failed\n", (unsigned long long)it,
                    (unsigned long long)seed);
        kiln_ctx_free(ctx);
        if (!ok)
            return;
    }
}

/* A 3x3 convolution whose weight is packed [K/8, C, 3, 3, 8] (the tuner's conv layout). */
static void
test_conv_pack(void)
{
    const char *text = "input x: f32[1, 8, 10, 10]\nweight W: f32[16, 8, 3, 3]\n"
                       "y[n, k, h, w] += x[n, c, h + r, w + s] * W[k, c, r, s] where h < 8, w < 8\n"
                       "output y\n";
    const char *sched = "{\"steps\": [{\"op\": \"pack\", \"stage\": \"W\", \"dim\": 0, "
                        "\"factor\": 8, \"outer\": 0}, "
                        "{\"op\": \"parallel\", \"stage\": \"y\", \"iter\": \"k\"}]}";
    CHECK(check_case(text, sched, 1, opt_seed()));
    /* the default schedule (which may pack on its own) */
    CHECK(check_case(text, NULL, -1, opt_seed() + 1));
}

/* The schedule the tuner's sketch gives a ResNet-style 3x3 convolution (tests/sketch
 * test_bench_like, KILN_SKETCH_DUMP): the weight packed by 16 output channels in a parallel,
 * vectorised stage of its own, a cached and tiled output. */
static void
test_conv_tuner_schedule(void)
{
    const char *text =
        "input x: f32[1, 16, 14, 14]\nweight w: f32[32, 16, 3, 3]\n"
        "y[n, k, h, q] += select(h + rh >= 1 && h + rh <= 14 && q + rw >= 1 && q + rw <= 14,\n"
        "                        x[n, c, h + rh - 1, q + rw - 1], 0.0) * w[k, c, rh, rw]\n"
        "    where h < 14, q < 14\noutput y\n";
    const char *sched =
        "{\"steps\": ["
        "{\"op\": \"pack\", \"stage\": \"w\", \"dim\": 0, \"factor\": 16, \"outer\": 0}, "
        "{\"op\": \"parallel\", \"stage\": \"w.pack\", \"iter\": \"i0\"}, "
        "{\"op\": \"vectorize\", \"stage\": \"w.pack\", \"iter\": \"i4\"}, "
        "{\"op\": \"cache_write\", \"stage\": \"y\"}, "
        "{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"h\", \"factors\": [1, 1, 1]}, "
        "{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"q\", \"factors\": [1, 1, 14]}, "
        "{\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [1, 1, 16]}, "
        "{\"op\": \"reorder\", \"stage\": \"y\", \"order\": [\"q.2\", \"q.0\", \"k.0\", \"h.1\", "
        "\"k.1\", \"k.2\", \"q.3\", \"k.3\"]}, "
        "{\"op\": \"reorder\", \"stage\": \"y\", \"order\": [\"h.0\", \"q.1\", \"q.2\", \"h.3\"]}, "
        "{\"op\": \"parallel\", \"stage\": \"y\", \"iter\": \"h.0\"}, "
        "{\"op\": \"vectorize\", \"stage\": \"y\", \"iter\": \"k.3\"}, "
        "{\"op\": \"compute_at\", \"stage\": \"y.local\", \"target\": \"y\", \"iter\": \"k.1\"}, "
        "{\"op\": \"split\", \"stage\": \"y.local\", \"iter\": \"h\", \"factors\": [1, 1]}, "
        "{\"op\": \"split\", \"stage\": \"y.local\", \"iter\": \"q\", \"factors\": [1, 14]}, "
        "{\"op\": \"split\", \"stage\": \"y.local\", \"iter\": \"k\", \"factors\": [1, 16]}, "
        "{\"op\": \"split\", \"stage\": \"y.local\", \"iter\": \"rh\", \"factors\": [1]}, "
        "{\"op\": \"split\", \"stage\": \"y.local\", \"iter\": \"rw\", \"factors\": [1]}, "
        "{\"op\": \"split\", \"stage\": \"y.local\", \"iter\": \"c\", \"factors\": [1]}, "
        "{\"op\": \"reorder\", \"stage\": \"y.local\", \"order\": [\"q.2\", \"q.0\", \"k.0\", "
        "\"rw.0\", \"h.1\", \"k.1\", \"c.1\", \"k.2\"]}, "
        "{\"op\": \"reorder\", \"stage\": \"y.local\", \"order\": [\"h.0\", \"rh.0\", \"c.0\", "
        "\"rh.1\", \"rw.1\", \"h.2\", \"q.2\"]}, "
        "{\"op\": \"vectorize\", \"stage\": \"y.local\", \"iter\": \"k.2\"}, "
        "{\"op\": \"auto_unroll\", \"stage\": \"y.local\", \"max_step\": 512}"
        "]}";
    CHECK(check_case(text, sched, 1, opt_seed()));
}

/* More root statements than one LLVM function takes (codegen/llvm.c's parts): the packed
 * convolution, then a chain of 40 elementwise statements, so the prepare phase, the parallel
 * convolution and the planned intermediates are spread over several functions. */
static void
test_many_roots(void)
{
    char  *text = NULL;
    size_t len = 0;
    FILE  *f = open_memstream(&text, &len);
    fputs("input x: f32[1, 8, 10, 10]\nweight W: f32[16, 8, 3, 3]\n"
          "y[n, k, h, w] += x[n, c, h + r, w + s] * W[k, c, r, s] where h < 8, w < 8\n",
          f);
    const char *prev = "y";
    char        name[16];
    for (int i = 0; i < 40; i++) {
        fprintf(f, "z%d[n, k, h, w] = %s[n, k, h, w] * 0.5 + %d.0\n", i, prev, i % 3);
        snprintf(name, sizeof name, "z%d", i);
        prev = name;
    }
    fprintf(f, "output %s\noutput y\n", prev);
    fclose(f);
    const char *sched = "{\"steps\": [{\"op\": \"pack\", \"stage\": \"W\", \"dim\": 0, "
                        "\"factor\": 8, \"outer\": 0}, "
                        "{\"op\": \"parallel\", \"stage\": \"y\", \"iter\": \"k\"}]}";
    CHECK(check_case(text, sched, 1, opt_seed()));
    free(text);
}

/* The packed tensor depends on an input: not prepared, and right when the input changes. */
static void
test_input_pack(void)
{
    const char *text = "input x: f32[8, 16]\nweight w: f32[16, 16]\n"
                       "y[i, j] += x[i, k] * w[k, j]\noutput y\n";
    const char *sched = "{\"steps\": [{\"op\": \"pack\", \"stage\": \"x\", \"dim\": 1, "
                        "\"factor\": 4}]}";
    CHECK(check_case(text, sched, 0, opt_seed()));
}

/* NULL handles, wrong argument counts, a handle of another module: error codes with
 * messages, through libkiln and through the raw entry points. */
static void
test_misuse(void)
{
    const char *text = "input x: f32[8, 16]\nweight w: f32[16, 16]\n"
                       "y[i, j] += x[i, k] * w[k, j]\noutput y\n";
    const char *sched = "{\"steps\": [{\"op\": \"pack\", \"stage\": \"w\", \"dim\": 1, "
                        "\"factor\": 4, \"outer\": 0}]}";
    struct mod  M, N;
    if (!mod_build(&M, text, sched, "misuse")) {
        mod_free(&M);
        return;
    }
    if (!mod_build(&N, text, NULL, "other")) {
        mod_free(&M);
        mod_free(&N);
        return;
    }
    CHECK(prepared_bytes(&M) > 0);
    struct kiln_prepared *p = NULL, *q = NULL;
    int32_t               abi = 0;
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_prepare(M.ctx, M.m, M.a, 2, &p, &abi));
    CHECK_EQ_INT(KILN_ABI_ERR_NARGS, abi);
    CHECK(p == NULL && strstr(kiln_ctx_error(M.ctx)->msg, "expected 3 arguments"));
    kiln_ctx_error_clear(M.ctx);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_prepare(M.ctx, M.m, M.a, 3, NULL, NULL));
    kiln_ctx_error_clear(M.ctx);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_call_prepared(M.ctx, M.m, NULL, M.a, 3, NULL));
    CHECK(strstr(kiln_ctx_error(M.ctx)->msg, "NULL"));
    CHECK_EQ_INT(KILN_OK, kiln_module_prepare(M.ctx, M.m, M.a, 3, &p, NULL));
    CHECK_EQ_INT(KILN_OK, kiln_module_prepare(N.ctx, N.m, N.a, 3, &q, NULL));
    CHECK(p != NULL && q != NULL);
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_call_prepared(M.ctx, M.m, p, M.a, 4, &abi));
    CHECK_EQ_INT(KILN_ABI_ERR_NARGS, abi);
    /* a handle of the other module */
    kiln_ctx_error_clear(M.ctx);
    CHECK(kiln_module_call_prepared(M.ctx, M.m, q, M.a, 3, &abi) != KILN_OK);
    CHECK(strstr(kiln_ctx_error(M.ctx)->msg, "not made by this module"));
    CHECK(kiln_module_call_prepared(N.ctx, N.m, p, N.a, 3, &abi) != KILN_OK);
    /* a wrong dtype is refused by call_prepared like by kiln_call */
    DLTensor bad = M.t[0];
    bad.dtype.bits = 64;
    DLTensor *ba[3] = {&bad, M.a[1], M.a[2]};
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_module_call_prepared(M.ctx, M.m, p, ba, 3, &abi));
    CHECK_EQ_INT(KILN_ABI_ERR_DTYPE, abi);
    kiln_module_prepared_free(M.m, NULL);
    kiln_module_prepared_free(M.m, p);
    kiln_module_prepared_free(N.m, q);
    mod_free(&M);
    mod_free(&N);
}

static const struct test tests[] = {
    {"graphs_random", test_graphs_random},
    {"conv_pack", test_conv_pack},
    {"conv_tuner_schedule", test_conv_tuner_schedule},
    {"input_pack", test_input_pack},
    {"many_roots", test_many_roots},
    {"misuse", test_misuse},
};

int
main(int argc, char **argv)
{
    int rc = harness_main(argc, argv, tests, KILN_COUNTOF(tests));
    if (tmpdir[0])
        rmdir(tmpdir);
    return rc;
}
