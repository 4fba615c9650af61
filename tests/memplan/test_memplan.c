/* tests/memplan/test_memplan.c -- memory planning (passes/memplan.c): the planner's offsets on
 * random live ranges against the pairwise oracle (buffers live together never share a byte),
 * and random graphs of elementwise ops and reductions -- chains, diamonds, skip connections
 * read long after they are written, several outputs, stages computed inside others, parallel
 * loops -- lowered, planned, JIT-compiled and run, whose outputs must match the reference
 * interpreter (a wrong reuse overwrites a value still to be read). Also: the verifier's and
 * the checker's refusals, and the memory report and metadata of a compiled module. */
#include "../../codegen/codegen.h"
#include "../../passes/passes.h"
#include "../harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the planner alone ---- */

static void
test_place_random(void)
{
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    struct kiln_rng r = kiln_rng_new(opt_seed());
    uint64_t        iters = opt_iters_or(400);
    for (uint64_t it = 0; it < iters && !harness_failures; it++) {
        uint32_t         n = 1 + (uint32_t)kiln_rng_below(&r, 60);
        uint32_t         T = 1 + (uint32_t)kiln_rng_below(&r, 30);
        struct kiln_live b[64];
        int64_t          off[64], sum = 0, align = (int64_t)1 << kiln_rng_below(&r, 8);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t a = (uint32_t)kiln_rng_below(&r, T), c = (uint32_t)kiln_rng_below(&r, T);
            b[i] =
                (struct kiln_live){(int64_t)kiln_rng_below(&r, 5000), a < c ? a : c, a < c ? c : a};
            if (kiln_rng_below(&r, 10) == 0) /* never touched */
                b[i].first = b[i].last + 1;
            sum += (b[i].bytes + align - 1) / align * align;
        }
        int64_t total = kiln_memplan_place(ctx, b, n, align, off);
        CHECK(total >= 0 && total <= sum);
        int64_t need = 0; /* a lower bound: the bytes live at the busiest statement */
        for (uint32_t t = 0; t < T; t++) {
            int64_t live = 0;
            for (uint32_t i = 0; i < n; i++)
                if (b[i].first <= t && t <= b[i].last)
                    live += b[i].bytes;
            need = live > need ? live : need;
        }
        CHECK(total >= need);
        for (uint32_t i = 0; i < n; i++) {
            CHECK(off[i] >= 0 && off[i] % align == 0 && off[i] + b[i].bytes <= total);
            for (uint32_t j = i + 1; j < n; j++) {
                bool live = b[i].first <= b[i].last && b[j].first <= b[j].last
                            && b[i].first <= b[j].last && b[j].first <= b[i].last;
                if (live && off[i] < off[j] + b[j].bytes && off[j] < off[i] + b[i].bytes)
                    harness_fail(__FILE__, __LINE__,
                                 "iteration %llu: buffers %u [%u, %u] at %lld (+%lld) and %u "
                                 "[%u, %u] at %lld (+%lld) are live together and overlap",
                                 (unsigned long long)it, i, b[i].first, b[i].last,
                                 (long long)off[i], (long long)b[i].bytes, j, b[j].first, b[j].last,
                                 (long long)off[j], (long long)b[j].bytes);
            }
        }
    }
    kiln_ctx_free(ctx);
}

static void
test_place_chain(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    for (uint32_t n = 1; n <= 20; n++) {
        struct kiln_live b[20];
        int64_t          off[20];
        for (uint32_t i = 0; i < n; i++) /* buffer i: written by statement i, read by i + 1 */
            b[i] = (struct kiln_live){1000, i, i + 1};
        CHECK_EQ_INT(n == 1 ? 1024 : 2048, kiln_memplan_place(ctx, b, n, 64, off));
    }
    /* a skip connection held across the chain costs one more buffer */
    struct kiln_live b[10];
    int64_t          off[10];
    for (uint32_t i = 0; i < 10; i++)
        b[i] = (struct kiln_live){256, i, i + 1};
    b[0].last = 9;
    CHECK_EQ_INT(768, kiln_memplan_place(ctx, b, 10, 64, off));
    CHECK_EQ_INT(-1, kiln_memplan_place(ctx, b, 10, 48, off)); /* not a power of two */
    CHECK(kiln_ctx_error(ctx) != NULL);
    kiln_ctx_free(ctx);
}

/* ---- random graphs, compiled and run ---- */

struct gen {
    struct kiln_buf  text, sched;
    struct kiln_rng *r;
    kiln_ctx        *ctx;
    uint32_t         n;        /* tensors t1..tn; t0 is the input x */
    uint8_t          ndim[40]; /* 1 or 2 */
    uint32_t         readers[40];
    uint32_t         reader[40]; /* the last reader */
    bool             reduce[40];
    bool             out[40];
};

static void
tname(char *s, uint32_t t)
{
    if (t == 0)
        snprintf(s, 16, "x");
    else
        snprintf(s, 16, "t%u", t);
}

static uint32_t
pick_src(struct gen *G, uint32_t k)
{
    /* half the time the newest tensor (chains), else any earlier one (diamonds, skips) */
    return kiln_rng_below(G->r, 2) ? k - 1 : (uint32_t)kiln_rng_below(G->r, k);
}

static void
use(struct gen *G, uint32_t src, uint32_t k)
{
    G->readers[src]++;
    G->reader[src] = k;
}

/* A 2-D load of tensor a at [i, j] (1-D tensors broadcast along j). */
static void
load2(const struct gen *G, uint32_t a, char *s, size_t n)
{
    char nm[16];
    tname(nm, a);
    snprintf(s, n, G->ndim[a] == 2 ? "%s[i, j]" : "%s[i]", nm);
}

static bool
gen_graph(struct gen *G, uint32_t R, uint32_t C)
{
    kiln_ctx                *ctx = G->ctx;
    static const char *const bin[] = {"+", "-", "*"};
    bool                     ok =
        kiln_buf_printf(ctx, &G->text, "input x: f32[%u, %u]\nweight w: f32[%u, %u]\n", R, C, C, C);
    G->ndim[0] = 2;
    for (uint32_t k = 1; k < G->n && ok; k++) {
        uint32_t a = pick_src(G, k), b = pick_src(G, k), kind = (uint32_t)kiln_rng_below(G->r, 6);
        char     la[40], lb[40], na[16];
        load2(G, a, la, sizeof la);
        load2(G, b, lb, sizeof lb);
        tname(na, a);
        G->ndim[k] = 2;
        use(G, a, k);
        switch (kind) {
        case 0: /* unary */
            G->ndim[k] = G->ndim[a];
            ok = kiln_buf_printf(ctx, &G->text,
                                 G->ndim[a] == 2 ? "t%u[i, j] = tanh(%s)\n" : "t%u[i] = tanh(%s)\n",
                                 k, la);
            break;
        case 1:
        case 2: /* binary */
            use(G, b, k);
            G->ndim[k] = G->ndim[a] == 1 && G->ndim[b] == 1 ? 1 : 2;
            ok = kiln_buf_printf(ctx, &G->text, "t%u[%s] = tanh(%s %s %s)\n", k,
                                 G->ndim[k] == 2 ? "i, j" : "i", la, bin[kiln_rng_below(G->r, 3)],
                                 lb);
            break;
        case 3: /* maximum of two, keeping a skip connection alive */
            use(G, b, k);
            G->ndim[k] = G->ndim[a] == 1 && G->ndim[b] == 1 ? 1 : 2;
            ok = kiln_buf_printf(ctx, &G->text, "t%u[%s] = max(%s, %s) * 0.5\n", k,
                                 G->ndim[k] == 2 ? "i, j" : "i", la, lb);
            break;
        case 4: /* matrix product with the weight */
            G->reduce[k] = true;
            if (G->ndim[a] == 2)
                ok = kiln_buf_printf(ctx, &G->text, "t%u[i, j] += %s[i, k] * w[k, j] * 0.25\n", k,
                                     na);
            else
                ok = kiln_buf_printf(ctx, &G->text, "t%u[i, j] += %s[i] * w[k, j] * 0.25\n", k, na);
            break;
        default: /* row reduction */
            G->reduce[k] = true;
            G->ndim[k] = 1;
            if (G->ndim[a] == 2)
                ok = kiln_buf_printf(ctx, &G->text, "t%u[i] %s %s[i, j] * 0.5\n", k,
                                     kiln_rng_below(G->r, 2) ? "+=" : "max=", na);
            else
                ok = kiln_buf_printf(ctx, &G->text, "t%u[i] = %s[i] * 0.5\n", k, na);
            G->reduce[k] = G->ndim[a] == 2;
            break;
        }
    }
    G->out[G->n - 1] = true;
    for (uint32_t k = 1; k + 1 < G->n; k++)
        G->out[k] = kiln_rng_below(G->r, 8) == 0;
    for (uint32_t k = 1; k < G->n && ok; k++)
        if (G->out[k])
            ok = kiln_buf_printf(ctx, &G->text, "output t%u\n", k);
    /* schedule: maybe one stage computed inside its only reader, maybe a parallel loop */
    ok = ok && kiln_buf_puts(ctx, &G->sched, "{\"steps\": [");
    uint32_t at = 0;
    if (ok && kiln_rng_below(G->r, 2)) {
        for (uint32_t k = 1; k < G->n; k++) {
            uint32_t c = 1 + (uint32_t)kiln_rng_below(G->r, G->n - 1);
            if (!G->out[c] && G->readers[c] == 1 && G->ndim[G->reader[c]] == 2) {
                at = c;
                ok = kiln_buf_printf(ctx, &G->sched,
                                     "{\"op\": \"compute_at\", \"stage\": \"t%u\", \"target\": "
                                     "\"t%u\", \"iter\": \"i\"}",
                                     c, G->reader[c]);
                break;
            }
        }
    }
    if (ok && kiln_rng_below(G->r, 2)) {
        uint32_t p = 1 + (uint32_t)kiln_rng_below(G->r, G->n - 1);
        if (p != at)
            ok = kiln_buf_printf(ctx, &G->sched,
                                 "%s{\"op\": \"parallel\", \"stage\": \"t%u\", \"iter\": \"i\"}",
                                 at ? ", " : "", p);
    }
    return ok && kiln_buf_puts(ctx, &G->sched, "]}");
}

/* Lowers text under sched, plans (or not), JIT-compiles, runs on random inputs and compares
 * every output with the reference interpreter. *ws and *unplanned receive the workspace sizes. */
static bool
run_case(const char *text, const char *sched_json, bool plan, uint64_t seed, int64_t *ws,
         int64_t *unplanned)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g = PARSE(ctx, text);
    struct kiln_schedule sched = {0};
    struct kiln_func    *f = NULL;
    struct kiln_jit     *jit = NULL;
    struct kiln_target   t;
    struct kiln_rng      r = kiln_rng_new(seed);
    const char          *why = NULL;
    float               *buf[64] = {0};
    double             **all = NULL;
    if (!g) {
        kiln_ctx_free(ctx);
        return false;
    }
    if ((sched_json && kiln_sched_from_json(ctx, sched_json, strlen(sched_json), &sched) != KILN_OK)
        || kiln_lower(ctx, g, &sched, &f) != KILN_OK
        || kiln_pass_memplan(f, plan, unplanned) != KILN_OK || kiln_func_verify(f, true) != KILN_OK
        || kiln_memplan_check(f) != KILN_OK)
        why = "lowering or planning failed";
    uint8_t               role[64] = {0};
    struct kiln_cg_module m = {f, "memplan", role, "{}", "", NULL};
    if (!why
        && (kiln_cg_target_parse(ctx, "llvm", &t) != KILN_OK
            || kiln_cg_llvm_jit(ctx, &m, &t, &jit) != KILN_OK))
        why = "jit failed";
    if (!why && f->nparam > 64)
        why = "too many parameters";
    *ws = f ? f->ws_bytes : 0;
    all = calloc(g->ntensor, sizeof *all);
    for (uint32_t ti = 0; ti < g->ntensor; ti++)
        all[ti] = calloc((size_t)kiln_tensor_numel(&g->tensor[ti]) + 1, sizeof(double));
    void  *data[64];
    double scale = 0;
    for (uint32_t i = 0; !why && i < f->nparam; i++) {
        const struct kiln_buffer *b = &f->buf[f->param[i]];
        int64_t                   n = kiln_buffer_numel(b);
        buf[i] = aligned_alloc(64, (size_t)(n * 4 + 63) / 64 * 64);
        for (int64_t e = 0; e < n; e++)
            buf[i][e] = i < g->narg ? (float)(kiln_rng_uniform(&r) * 2 - 1) : NAN;
        if (i < g->narg)
            for (int64_t e = 0; e < n; e++)
                all[b->tensor][e] = buf[i][e];
        data[i] = buf[i];
    }
    if (!why && kiln_ir_eval(ctx, g, all) != KILN_OK)
        why = "reference interpreter failed";
    for (uint32_t ti = 0; !why && ti < g->ntensor; ti++)
        for (int64_t e = 0; e < kiln_tensor_numel(&g->tensor[ti]); e++)
            scale = fmax(scale, fabs(all[ti][e]));
    if (!why && kiln_jit_desc(jit)->kernel(data) != 0)
        why = "kernel returned an error";
    for (uint32_t i = g->narg; !why && i < f->nparam; i++) {
        const struct kiln_buffer *b = &f->buf[f->param[i]];
        for (int64_t e = 0; e < kiln_buffer_numel(b) && !why; e++) {
            double want = all[b->tensor][e], got = buf[i][e];
            if (!(fabs(got - want) <= 2e-5 * (1 + scale))) {
                fprintf(stderr, "  output %s[%lld]: got %.9g, want %.9g\n",
                        kiln_sym_str(ctx, b->name), (long long)e, got, want);
                why = "output mismatch";
            }
        }
    }
    if (why) {
        char            msg[600] = "";
        struct kiln_buf loops = {0};
        if (kiln_ctx_error(ctx))
            kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        kiln_ctx_error_clear(ctx);
        if (f)
            kiln_func_print(f, &loops);
        harness_fail(__FILE__, __LINE__,
                     "seed %llu: %s %s\n--- graph ---\n%s--- schedule ---\n%s\n--- loops ---\n%s",
                     (unsigned long long)seed, why, msg, text, sched_json ? sched_json : "",
                     loops.data ? loops.data : "");
    }
    for (uint32_t i = 0; i < 64; i++)
        free(buf[i]);
    for (uint32_t ti = 0; ti < g->ntensor; ti++)
        free(all[ti]);
    free(all);
    kiln_jit_free(jit);
    kiln_ctx_free(ctx);
    return !why;
}

static void
test_graphs_random(void)
{
    uint64_t        seed = opt_seed();
    struct kiln_rng r = kiln_rng_new(seed);
    uint64_t        iters = opt_iters_or(60), shared = 0;
    for (uint64_t it = 0; it < iters && !harness_failures; it++) {
        kiln_ctx  *ctx = kiln_ctx_new(NULL);
        struct gen G = {.r = &r, .ctx = ctx, .n = 3 + (uint32_t)kiln_rng_below(&r, 20)};
        uint32_t R = 2 + (uint32_t)kiln_rng_below(&r, 5), C = 3 + (uint32_t)kiln_rng_below(&r, 30);
        uint64_t cs = kiln_rng_below(&r, UINT64_MAX);
        if (!gen_graph(&G, R, C)) {
            harness_fail(__FILE__, __LINE__, "graph generation failed");
            kiln_ctx_free(ctx);
            break;
        }
        int64_t ws = 0, unplanned = 0;
        if (run_case(G.text.data, G.sched.data, true, cs, &ws, &unplanned)) {
            CHECK(ws <= unplanned);
            shared += ws < unplanned;
        }
        kiln_ctx_free(ctx);
    }
    if (iters >= 20)
        CHECK(shared > 0); /* planning did share memory somewhere */
}

/* A ResNet-like block chain: every block's input is read again after three more stages. */
static void
test_skip_connections(void)
{
    struct kiln_buf b = {0};
    kiln_ctx       *ctx = kiln_ctx_new(NULL);
    bool            ok =
        kiln_buf_puts(ctx, &b, "input x: f32[8, 64]\nweight w: f32[64, 64]\nh0[i, j] = x[i, j]\n");
    for (int k = 0; k < 6 && ok; k++)
        ok = kiln_buf_printf(ctx, &b,
                             "c%d[i, j] += h%d[i, k] * w[k, j] * 0.125\n"
                             "r%d[i, j] = max(c%d[i, j], 0.0)\n"
                             "d%d[i, j] = tanh(r%d[i, j])\n"
                             "h%d[i, j] = d%d[i, j] + h%d[i, j]\n",
                             k, k, k, k, k, k, k + 1, k, k);
    ok = ok && kiln_buf_puts(ctx, &b, "output h6\n");
    CHECK(ok);
    int64_t ws = 0, unplanned = 0, ws_off = 0, unplanned_off = 0;
    CHECK(run_case(b.data, NULL, true, opt_seed(), &ws, &unplanned));
    CHECK(run_case(b.data, NULL, false, opt_seed(), &ws_off, &unplanned_off));
    /* 24 intermediates of 2 KiB; at most three live at once (the skip, the stage's input and
     * its output) */
    CHECK_EQ_INT(24 * 2048, unplanned);
    CHECK_EQ_INT(unplanned, unplanned_off);
    CHECK_EQ_INT(0, ws_off);
    CHECK(ws <= 3 * 2048);
    kiln_ctx_free(ctx);
}

/* ---- refusals ---- */

static void
test_refusals(void)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g = PARSE(ctx, "input x: f32[4, 16]\n"
                                          "a[i, j] = x[i, j] * 2.0\n"
                                          "b[i, j] = a[i, j] + 1.0\n"
                                          "y[i, j] = b[i, j] + a[i, j]\n");
    struct kiln_schedule sched = {0};
    struct kiln_func    *f;
    int64_t              unplanned;
    CHECK(g && kiln_lower(ctx, g, &sched, &f) == KILN_OK);
    if (harness_failures) {
        kiln_ctx_free(ctx);
        return;
    }
    CHECK(kiln_pass_memplan(f, true, &unplanned) == KILN_OK);
    CHECK_EQ_INT(2 * 256, unplanned);
    CHECK_EQ_INT(2 * 256, f->ws_bytes); /* a and b are live together */
    uint32_t a = KILN_NONE, bb = KILN_NONE;
    for (uint32_t i = 0; i < f->nbuf; i++) {
        const char *nm = kiln_sym_str(ctx, f->buf[i].name);
        if (!strcmp(nm, "a"))
            a = i;
        if (!strcmp(nm, "b"))
            bb = i;
    }
    CHECK(a != KILN_NONE && bb != KILN_NONE);
    if (harness_failures) {
        kiln_ctx_free(ctx);
        return;
    }
    struct kiln_buf text = {0};
    CHECK(kiln_func_print(f, &text) == KILN_OK && strstr(text.data, "workspace 512 bytes")
          && strstr(text.data, "at workspace + "));
    /* the checker catches a shared byte between buffers live together */
    int64_t keep = f->buf[bb].ws_offset;
    f->buf[bb].ws_offset = f->buf[a].ws_offset;
    CHECK(kiln_memplan_check(f) == KILN_ERR_INTERNAL);
    CHECK(strstr(kiln_ctx_error(ctx)->msg, "share workspace bytes") != NULL);
    kiln_ctx_error_clear(ctx);
    /* the verifier: misaligned, outside the workspace */
    f->buf[bb].ws_offset = keep + 4;
    CHECK(kiln_func_verify(f, true) == KILN_ERR_INTERNAL);
    kiln_ctx_error_clear(ctx);
    f->buf[bb].ws_offset = f->ws_bytes;
    CHECK(kiln_func_verify(f, true) == KILN_ERR_INTERNAL);
    kiln_ctx_error_clear(ctx);
    f->buf[bb].ws_offset = keep;
    CHECK(kiln_func_verify(f, true) == KILN_OK);
    /* ... and a workspace buffer allocated below the top of the body */
    struct kiln_stmt *s = f->body;
    while (s->kind == KILN_STMT_ALLOC && s->u.alloc.body->kind == KILN_STMT_ALLOC)
        s = s->u.alloc.body;
    struct kiln_stmt *inner = s->u.alloc.body;
    uint32_t          last = s->u.alloc.buf;
    CHECK(inner->kind == KILN_STMT_SEQ && inner->u.seq.n > 0);
    struct kiln_stmt *item0 = inner->u.seq.item[0];
    int64_t           shape1 = 1; /* an unused stand-in: the chain now misses `last` */
    uint32_t          spare =
        kiln_func_add_buffer(f, "spare", KILN_DTYPE_F32, 1, &shape1, KILN_SCOPE_HEAP, KILN_NONE);
    CHECK(spare != KILN_NONE);
    s->u.alloc.buf = spare;
    inner->u.seq.item[0] = kiln_stmt_alloc(ctx, last, item0);
    CHECK(kiln_func_verify(f, true) != KILN_OK);
    CHECK(strstr(kiln_ctx_error(ctx)->msg, "workspace buffer") != NULL);
    kiln_ctx_free(ctx);
}

/* ---- the memory report and the metadata of a compiled module ---- */

static void
test_report(void)
{
    kiln_ctx                 *ctx = kiln_ctx_new(NULL);
    struct kiln_graph        *g = PARSE(ctx, "input x: f32[16, 32]\nweight w: f32[32, 32]\n"
                                                    "a[i, j] += x[i, k] * w[k, j]\n"
                                                    "b[i, j] = tanh(a[i, j])\n"
                                                    "c[i, j] += b[i, k] * w[k, j]\n"
                                                    "y[i, j] = tanh(c[i, j]) + x[i, j]\n");
    const char               *loops;
    struct kiln_memory_report mr;
    CHECK(g && kiln_graph_lower_print(ctx, g, NULL, 1, &loops, &mr) == KILN_OK);
    CHECK_EQ_INT(4096, mr.weights);
    CHECK_EQ_INT(2048, mr.inputs);
    CHECK_EQ_INT(2048, mr.outputs);
    CHECK_EQ_INT(3 * 2048, mr.workspace_unplanned);
    CHECK_EQ_INT(2 * 2048, mr.workspace);
    CHECK_EQ_INT(4096 + 2048 + 2048 + 2 * 2048, mr.peak);
    kiln_ctx_set_memplan(ctx, 0);
    CHECK(kiln_graph_lower_print(ctx, g, NULL, 1, &loops, &mr) == KILN_OK);
    CHECK_EQ_INT(3 * 2048, mr.workspace);
    CHECK(strstr(loops, "workspace") == NULL);
    /* memory is planned on the flat loop nest: the unflattened one reports zeros */
    CHECK(kiln_graph_lower_print(ctx, g, NULL, 0, &loops, &mr) == KILN_OK);
    CHECK_EQ_INT(0, mr.peak);
    CHECK_EQ_INT(0, mr.workspace);
    /* a shared object's metadata carries the same figures, and it computes the same */
    kiln_ctx_set_memplan(ctx, 1);
    char dir[64] = "/tmp/memplan-XXXXXX", path[96];
    if (!mkdtemp(dir)) {
        harness_fail(__FILE__, __LINE__, "mkdtemp failed");
        kiln_ctx_free(ctx);
        return;
    }
    snprintf(path, sizeof path, "%s/report.so", dir);
    struct kiln_module       *m = NULL;
    struct kiln_memory_report cmr;
    CHECK(kiln_graph_compile(ctx, g, NULL, path, &cmr) == KILN_OK);
    CHECK_EQ_INT(2 * 2048, cmr.workspace); /* the compile reports what the lowering did */
    CHECK_EQ_INT(3 * 2048, cmr.workspace_unplanned);
    CHECK_EQ_INT(4096 + 2048 + 2048 + 2 * 2048, cmr.peak);
    CHECK(kiln_module_load(ctx, path, &m) == KILN_OK);
    if (m) {
        const char *js = kiln_module_metadata(m);
        CHECK(strstr(js, "\"workspace_bytes\": 4096") && strstr(js, "\"weights_bytes\": 4096")
              && strstr(js, "\"workspace_unplanned_bytes\": 6144")
              && strstr(js, "\"inputs_bytes\": 2048") && strstr(js, "\"outputs_bytes\": 2048")
              && strstr(js, "\"peak_bytes\": 12288"));
    }
    kiln_module_free(m);
    unlink(path);
    rmdir(dir);
    kiln_ctx_free(ctx);
}

/* Accesses of workspace views carry alias scopes of their root statement only. */
static void
test_alias_scopes(void)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g = PARSE(ctx, "input x: f32[64]\n"
                                          "a[i] = x[i] * 2.0\n"
                                          "b[i] = a[i] + 1.0\n"
                                          "c[i] = b[i] * a[i]\n"
                                          "y[i] = c[i] + 1.0\n");
    struct kiln_schedule sched = {0};
    struct kiln_func    *f = NULL;
    struct kiln_target   t;
    const char          *ir = NULL;
    int64_t              unplanned;
    uint8_t              role[4] = {0, 2};
    CHECK(g && kiln_lower(ctx, g, &sched, &f) == KILN_OK
          && kiln_pass_memplan(f, true, &unplanned) == KILN_OK);
    struct kiln_cg_module m = {f, "scopes", role, "{}", "", NULL};
    CHECK(kiln_cg_target_parse(ctx, "llvm", &t) == KILN_OK
          && kiln_cg_llvm_ir(ctx, &m, &t, &ir) == KILN_OK);
    /* statement 1 (b) touches a and b, statement 2 (c) a, b and c: scopes of those only */
    char want[4][48] = {"", "", "", ""};
    for (uint32_t i = 0; i < f->nbuf; i++) {
        const char *nm = kiln_sym_str(ctx, f->buf[i].name);
        if (!strcmp(nm, "b")) {
            snprintf(want[0], sizeof want[0], "!\"kiln.ws.1.%u.b\"", i);
            snprintf(want[1], sizeof want[1], "!\"kiln.ws.0.%u.b\"", i);
        } else if (!strcmp(nm, "c")) {
            snprintf(want[2], sizeof want[2], "!\"kiln.ws.2.%u.c\"", i);
            snprintf(want[3], sizeof want[3], "!\"kiln.ws.1.%u.c\"", i);
        }
    }
    CHECK(ir && strstr(ir, "!noalias") && strstr(ir, want[0]) && !strstr(ir, want[1])
          && strstr(ir, want[2]) && !strstr(ir, want[3]));
    kiln_ctx_free(ctx);
}

static const struct test tests[] = {
    {"alias_scopes", test_alias_scopes},
    {"place_random", test_place_random},
    {"place_chain", test_place_chain},
    {"graphs_random", test_graphs_random},
    {"skip_connections", test_skip_connections},
    {"refusals", test_refusals},
    {"report", test_report},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
