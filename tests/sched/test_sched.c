/* tests/sched/test_sched.c -- schedules: JSON form and round trip, and the message of every
 * illegal step (checked on the state, before any lowering). Lowering semantics are checked by
 * tests/lower (against the interpreters). */
#include "../../passes/state.h"
#include "../harness.h"

#include <string.h>

/* A[M,K] x B[K,N] -> C (sum over k), D = C * 2 (output). */
static struct kiln_graph *
matmul_graph(kiln_ctx *ctx, int64_t M, int64_t N, int64_t K)
{
    struct kiln_graph *g = kiln_graph_new(ctx);
    int64_t            sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
    uint32_t           a = kiln_graph_add_tensor(g, "A", KILN_DTYPE_F32, 2, sa, KILN_TENSOR_INPUT);
    uint32_t           b = kiln_graph_add_tensor(g, "B", KILN_DTYPE_F32, 2, sb, KILN_TENSOR_WEIGHT);
    uint32_t           c = kiln_graph_add_tensor(g, "C", KILN_DTYPE_F32, 2, sc, KILN_TENSOR_OP);
    kiln_expr          i = kiln_axis(ctx, 0), j = kiln_axis(ctx, 1), k = kiln_rvar(ctx, 0);
    kiln_expr          ia[2] = {i, k}, ib[2] = {k, j};
    kiln_expr          body = kiln_mul(ctx, kiln_load(ctx, a, KILN_DTYPE_F32, 2, ia),
                                       kiln_load(ctx, b, KILN_DTYPE_F32, 2, ib));
    uint32_t           ax[2] = {kiln_sym_cstr(ctx, "i"), kiln_sym_cstr(ctx, "j")};
    uint32_t           rn[1] = {kiln_sym_cstr(ctx, "k")};
    kiln_graph_begin_call(g, "compute", 0, NULL, 0, NULL, 1, 1);
    kiln_graph_add_op(g, c, KILN_REDUCE_SUM, 1, &K, body, ax, rn);
    kiln_graph_end_call(g, c);
    uint32_t  d = kiln_graph_add_tensor(g, "D", KILN_DTYPE_F32, 2, sc, KILN_TENSOR_OP);
    kiln_expr ic[2] = {i, j};
    kiln_expr db = kiln_mul(ctx, kiln_load(ctx, c, KILN_DTYPE_F32, 2, ic),
                            kiln_float(ctx, 2.0, KILN_DTYPE_F32));
    kiln_graph_begin_call(g, "compute", 0, NULL, 0, NULL, 2, 1);
    kiln_graph_add_op(g, d, KILN_REDUCE_NONE, 0, NULL, db, ax, NULL);
    kiln_graph_end_call(g, d);
    kiln_graph_mark_output(g, d);
    CHECK(kiln_ok(ctx));
    return g;
}

static void
test_json_round_trip(void)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    const char          *text = "{\"steps\": [\n"
                                "  {\"op\": \"cache_write\", \"stage\": \"C\"},\n"
                                "  {\"op\": \"tile\", \"stage\": \"C\", \"iters\": [\"i\", \"j\"], "
                                "\"factors\": [8, 16]},\n"
                                "  {\"op\": \"split\", \"stage\": \"C.local\", \"iter\": \"k\", "
                                "\"factors\": [4, 2]},\n"
                                "  {\"op\": \"reorder\", \"stage\": \"C\", \"order\": [\"j.0\", "
                                "\"i.0\"]},\n"
                                "  {\"op\": \"compute_at\", \"stage\": \"C.local\", \"target\": "
                                "\"C\", \"iter\": \"j.0\"},\n"
                                "  {\"op\": \"auto_unroll\", \"stage\": \"C\", \"max_step\": 64},\n"
                                "  {\"op\": \"cache_read\", \"stage\": \"A\", \"readers\": "
                                "[\"C\"]},\n"
                                "  {\"op\": \"pack\", \"stage\": \"B\", \"dim\": 1, \"factor\": "
                                "16, \"outer\": 0},\n"
                                "  {\"op\": \"compute_inline\", \"stage\": \"D\"}\n"
                                "]}\n";
    struct kiln_schedule s, s2;
    CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, text, strlen(text), &s));
    CHECK_EQ_INT(9, s.nstep);
    struct kiln_buf out = {0}, out2 = {0};
    CHECK_EQ_INT(KILN_OK, kiln_sched_to_json(ctx, &s, &out));
    CHECK_EQ_STR(text, out.data);
    CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, out.data, out.len, &s2));
    CHECK_EQ_INT(KILN_OK, kiln_sched_to_json(ctx, &s2, &out2));
    CHECK_EQ_STR(out.data, out2.data);
    kiln_ctx_free(ctx);
}

static void
json_error(const char *text, const char *want)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_schedule s;
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_sched_from_json(ctx, text, strlen(text), &s));
    CHECK_EQ_STR(want, kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->msg : NULL);
    kiln_ctx_free(ctx);
}

static void
test_json_errors(void)
{
    json_error("{\"steps\": [", "schedule: line 1, column 11 (byte 10): not valid JSON");
    json_error("{}", "schedule must be {\"steps\": [...]} or a list of steps");
    json_error("[{\"op\": \"splat\", \"stage\": \"C\"}]", "schedule step 0: unknown op 'splat'");
    json_error("[42]", "schedule step 0: must be an object");
    json_error("[{\"stage\": \"C\"}]", "schedule step 0: \"op\" must be a string naming the step");
    json_error("[{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factor\": [4]}]",
               "schedule step 0 (split): unknown field \"factor\"");
    json_error("[{\"op\": \"split\", \"iter\": \"i\", \"factors\": [4]}]",
               "schedule step 0: \"stage\" must be a non-empty string");
    json_error("[{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [4.5]}]",
               "schedule step 0: \"factors\" must be an integer");
    json_error("[{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": []}]",
               "schedule step 0 (split): \"factors\" must be a list of 1 to 7 integers");
    json_error("[{\"op\": \"tile\", \"stage\": \"C\", \"iters\": [\"i\", \"j\"], \"factors\": "
               "[4]}]",
               "schedule step 0 (tile): 2 iterators but 1 factors");
    json_error("[{\"op\": \"fuse\", \"stage\": \"C\", \"iters\": \"i\"}]",
               "schedule step 0 (fuse): \"iters\" must be a list of 1 to 8 names");
    json_error("[{\"op\": \"auto_unroll\", \"stage\": \"C\"}]",
               "schedule step 0: \"max_step\" must be an integer");
}

/* Like json_error, with an explicit length (the text may hold NUL bytes). */
static void
json_error_n(const char *text, size_t len, const char *want)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_schedule s;
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_sched_from_json(ctx, text, len, &s));
    CHECK_EQ_STR(want, kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->msg : NULL);
    kiln_ctx_free(ctx);
}

/* Strict JSON: what cJSON alone accepts silently is an error naming the line and column. */
static void
test_json_strict(void)
{
    json_error("{\"steps\": []}\n x",
               "schedule: line 2, column 2 (byte 15): text after the JSON object");
    json_error("[] []", "schedule: line 1, column 4 (byte 3): text after the JSON document");
    json_error("{\"steps\": [],\n \"steps\": []}",
               "schedule: line 2, column 2 (byte 15): field \"steps\" appears twice");
    /* the duplicate in the second step: keys of the first step come before it in the text */
    json_error("{\"steps\": [\n"
               "  {\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"i\"},\n"
               "  {\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"i\", \"iter\": \"j\"}\n"
               "]}",
               "schedule: line 3, column 49 (byte 109): field \"iter\" appears twice");
    /* keys are compared decoded: "o\u0070" is "op" */
    json_error(
        "[{\"op\": \"parallel\", \"o\\u0070\": \"unroll\", \"stage\": \"C\", \"iter\": \"i\"}]",
        "schedule: line 1, column 21 (byte 20): field \"op\" appears twice");
    json_error("[{\"op\": \"parallel\", \"stage\": \"C\\u0000D\", \"iter\": \"i\"}]",
               "schedule: line 1, column 32 (byte 31): a string contains \\u0000");
    json_error("[{\"op\": \"parallel\", \"stage\": \"C\tD\", \"iter\": \"i\"}]",
               "schedule: line 1, column 32 (byte 31): a string contains a raw control character "
               "(escape it)");
    static const char nul[] = "[{\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"i\"}]\0x";
    json_error_n(nul, sizeof nul - 1, "schedule: line 1, column 48 (byte 47): contains a NUL byte");
    static const char nul2[] = "[{\"op\": \"parallel\", \"stage\": \"C\0D\", \"iter\": \"i\"}]";
    json_error_n(nul2, sizeof nul2 - 1,
                 "schedule: line 1, column 32 (byte 31): contains a NUL byte");
    /* no extension keys: a misspelt "steps" beside the real one must not be ignored */
    json_error("{\"steps\": [{\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"i\"}],\n"
               "  \"comment\": \"x\"}",
               "schedule: line 2, column 3 (byte 61): unknown field \"comment\" (the only field is "
               "\"steps\")");

    /* an escaped backslash before u0000 is a backslash and "u0000", which is fine */
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_schedule s;
    const char *ok = "[{\"op\": \"parallel\", \"stage\": \"C\\\\u0000\", \"iter\": \"i\"}]\r\n";
    CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, ok, strlen(ok), &s));
    CHECK_EQ_STR("C\\u0000", kiln_sym_str(ctx, s.step[0].stage));

    /* many keys in one object (n log n) and deep nesting (no recursion here; cJSON's own
     * nesting limit gives "not valid JSON" beyond 1000 levels): errors, no crash */
    struct kiln_buf b = {0};
    CHECK(kiln_buf_puts(ctx, &b, "[{\"op\": \"parallel\""));
    for (int i = 0; i < 20000; i++)
        CHECK(kiln_buf_printf(ctx, &b, ", \"k%d\": %d", i, i));
    CHECK(kiln_buf_puts(ctx, &b, ", \"k7\": 0}]"));
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_sched_from_json(ctx, b.data, b.len, &s));
    CHECK(strstr(kiln_ctx_error(ctx)->msg, "field \"k7\" appears twice") != NULL);
    kiln_ctx_error_clear(ctx);
    for (int depth = 900; depth <= 100000; depth *= 10) {
        struct kiln_buf d = {0};
        for (int i = 0; i < depth; i++)
            CHECK(kiln_buf_puts(ctx, &d, "["));
        for (int i = 0; i < depth; i++)
            CHECK(kiln_buf_puts(ctx, &d, "]"));
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_sched_from_json(ctx, d.data, d.len, &s));
        kiln_ctx_error_clear(ctx);
    }
    kiln_ctx_free(ctx);
}

/* Applies the JSON steps to the matmul graph and checks the error message. */
static void
step_error(const char *steps, const char *want)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g = matmul_graph(ctx, 64, 48, 32);
    struct kiln_schedule s;
    struct kiln_state    st;
    char                 text[1024];
    snprintf(text, sizeof text, "[%s]", steps);
    CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, text, strlen(text), &s));
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_state_build(ctx, g, &s, &st));
    CHECK_EQ_STR(want, kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->msg : NULL);
    kiln_ctx_free(ctx);
}

static void
test_illegal_steps(void)
{
    step_error("{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"q\", \"factors\": [4]}",
               "schedule step 0 (split C.q): stage C has no iterator q (its loops: i, j, k)");
    step_error("{\"op\": \"split\", \"stage\": \"E\", \"iter\": \"i\", \"factors\": [4]}",
               "schedule step 0 (split E.i): no stage named E");
    step_error("{\"op\": \"split\", \"stage\": \"A\", \"iter\": \"i\", \"factors\": [4]}",
               "schedule step 0 (split A.i): A is an argument of the graph, not a stage");
    step_error("{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [0]}",
               "schedule step 0 (split C.i): factor 0 must be positive");
    step_error("{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [4]},"
               "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [2]}",
               "schedule step 1 (split C.i): iterator i is no longer a loop of C (its loops: "
               "i.0, i.1, j, k)");
    step_error("{\"op\": \"vectorize\", \"stage\": \"C\", \"iter\": \"k\"}",
               "schedule step 0 (vectorize C.k): cannot vectorize reduction iterator k");
    step_error("{\"op\": \"fuse\", \"stage\": \"C\", \"iters\": [\"i\", \"j\"]},"
               "{\"op\": \"vectorize\", \"stage\": \"C\", \"iter\": \"i@j\"}",
               "schedule step 1 (vectorize C.i@j): iterator i@j has extent 3072; at most 64 lanes "
               "can be vectorized (split it first)");
    step_error("{\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"k\"}",
               "schedule step 0 (parallel C.k): iterator k is a reduction: parallel iterations "
               "would race on the accumulator (use rfactor first)");
    step_error("{\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"i\"},"
               "{\"op\": \"unroll\", \"stage\": \"C\", \"iter\": \"i\"}",
               "schedule step 1 (unroll C.i): iterator i is already parallel");
    step_error("{\"op\": \"compute_inline\", \"stage\": \"C\"}",
               "schedule step 0 (compute_inline C): C has a reduction; only elementwise "
               "definitions can be inlined");
    step_error("{\"op\": \"compute_inline\", \"stage\": \"D\"}",
               "schedule step 0 (compute_inline D): D is an output of the graph and must be "
               "stored");
    step_error("{\"op\": \"compute_at\", \"stage\": \"D\", \"target\": \"C\", \"iter\": \"i\"}",
               "schedule step 0 (compute_at D): C does not read D");
    step_error("{\"op\": \"compute_at\", \"stage\": \"C\", \"target\": \"D\", \"iter\": \"q\"}",
               "schedule step 0 (compute_at C): stage D has no iterator q (its loops: i, j)");
    step_error("{\"op\": \"compute_at\", \"stage\": \"C\", \"target\": \"C\", \"iter\": \"i\"}",
               "schedule step 0 (compute_at C): a stage cannot be computed at itself");
    step_error("{\"op\": \"fuse\", \"stage\": \"C\", \"iters\": [\"i\", \"k\"]}",
               "schedule step 0 (fuse C): iterators i and k are not adjacent loops (outer "
               "first)");
    step_error("{\"op\": \"fuse\", \"stage\": \"C\", \"iters\": [\"j\", \"k\"]}",
               "schedule step 0 (fuse C): cannot fuse spatial and reduction iterators (j, k)");
    step_error("{\"op\": \"fuse\", \"stage\": \"C\", \"iters\": [\"j\"]}",
               "schedule step 0 (fuse C): fuse needs at least two iterators");
    step_error("{\"op\": \"reorder\", \"stage\": \"C\", \"order\": [\"j\", \"j\"]}",
               "schedule step 0 (reorder C): iterator j is listed twice");
    step_error("{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [4]},"
               "{\"op\": \"cache_write\", \"stage\": \"C\"}",
               "schedule step 1 (cache_write C): cache_write must come before any other step "
               "on C");
    step_error("{\"op\": \"rfactor\", \"stage\": \"C\", \"iter\": \"j\"}",
               "schedule step 0 (rfactor C.j): iterator j is not a reduction");
    step_error("{\"op\": \"pack\", \"stage\": \"B\", \"dim\": 2, \"factor\": 4}",
               "schedule step 0 (pack B): dimension 2 is out of range for B with 2 dimensions");
    step_error("{\"op\": \"pack\", \"stage\": \"B\", \"dim\": 1, \"factor\": 1}",
               "schedule step 0 (pack B): block 1 must be between 2 and the extent 48");
    step_error("{\"op\": \"pack\", \"stage\": \"B\", \"dim\": 1, \"factor\": 4, \"outer\": 2}",
               "schedule step 0 (pack B): outer position 2 is out of range for B with 2 "
               "dimensions");
    step_error("{\"op\": \"cache_read\", \"stage\": \"A\", \"readers\": [\"D\"]}",
               "schedule step 0 (cache_read A): D does not read A");
    step_error("{\"op\": \"pad\", \"stage\": \"A\", \"readers\": [\"D\"]}",
               "schedule step 0 (pad A): D does not read A");
    step_error("{\"op\": \"pad\", \"stage\": \"A\", \"readers\": [\"C\"]}",
               "schedule step 0 (pad A): no read of A leaves its bounds: nothing to pad");
    step_error("{\"op\": \"auto_unroll\", \"stage\": \"C\", \"max_step\": -1}",
               "schedule step 0 (auto_unroll C): max_step -1 must be in [0, 4096]");
    step_error("{\"op\": \"compute_inline\", \"stage\": \"C.local\"}",
               "schedule step 0 (compute_inline C.local): no stage named C.local");
}

/* The schedule state of a 64 x 48 (K 30) matmul under the schedule steps `text`. */
static void
matmul_state(kiln_ctx *ctx, const char *text, struct kiln_state *st)
{
    struct kiln_graph   *g = matmul_graph(ctx, 64, 48, 30);
    struct kiln_schedule s;
    CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, text, strlen(text), &s));
    CHECK_EQ_INT(KILN_OK, kiln_state_build(ctx, g, &s, st));
}

static void
test_state_shapes(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    const char       *text = "[{\"op\": \"cache_write\", \"stage\": \"C\"},"
                             "{\"op\": \"split\", \"stage\": \"C.local\", \"iter\": \"k\", "
                             "\"factors\": [4]},"
                             "{\"op\": \"fuse\", \"stage\": \"C\", \"iters\": [\"i\", \"j\"]},"
                             "{\"op\": \"rfactor\", \"stage\": \"C.local\", \"iter\": \"k.1\"},"
                             "{\"op\": \"pack\", \"stage\": \"B\", \"dim\": 1, \"factor\": "
                             "5}]";
    struct kiln_state st = {0};
    matmul_state(ctx, text, &st);
    /* order: B.pack, C.local.rf, C.local, C, D */
    CHECK_EQ_INT(5, st.norder);
    const char *want[5] = {"B.pack", "C.local.rf", "C.local", "C", "D"};
    for (uint32_t i = 0; i < 5 && i < st.norder; i++)
        CHECK_EQ_STR(want[i], kiln_sym_str(ctx, st.st[st.order[i]].name));
    const struct kiln_stage *c = &st.st[st.order[3]];
    CHECK_EQ_INT(1, c->nleaf);
    CHECK_EQ_STR("i@j", kiln_sym_str(ctx, c->it[c->leaf[0]].name));
    CHECK_EQ_INT(64 * 48, c->it[c->leaf[0]].extent);
    const struct kiln_stage *rf = &st.st[st.order[1]];
    CHECK_EQ_INT(3, st.t[rf->tensor].ndim);
    CHECK_EQ_INT(4, st.t[rf->tensor].shape[2]);
    CHECK_EQ_INT(1, rf->nred);
    CHECK_EQ_INT(8, rf->rext[0]); /* ceil(30 / 4) */
    const struct kiln_stage *pk = &st.st[st.order[0]];
    CHECK_EQ_INT(3, st.t[pk->tensor].ndim);
    CHECK_EQ_INT(10, st.t[pk->tensor].shape[1]);
    CHECK_EQ_INT(5, st.t[pk->tensor].shape[2]);
    kiln_ctx_free(ctx);
}

/* Extent of iterator `name` of stage st under root extents root. */
static int64_t
extent_of(kiln_ctx *ctx, const struct kiln_stage *st, const int64_t *root, const char *name)
{
    int64_t ext[512];
    CHECK(st->nit <= 512);
    kiln_state_extents(st, root, ext);
    for (uint32_t k = 0; k < st->nit; k++)
        if (!strcmp(kiln_sym_str(ctx, st->it[k].name), name))
            return ext[k];
    return -1;
}

/* A split part longer than the extent needs is cut, innermost first: C.local split by
 * [16, 6] over a 6-row region runs as [1, 6]; over all 64 rows as [11, 6] (11 tiles of 6, the
 * last partial) under one outer iteration. */
static void
test_split_extents(void)
{
    kiln_ctx         *ctx = kiln_ctx_new(NULL);
    const char       *text = "[{\"op\": \"cache_write\", \"stage\": \"C\"},"
                             "{\"op\": \"split\", \"stage\": \"C.local\", \"iter\": \"i\", "
                             "\"factors\": [16, 6]},"
                             "{\"op\": \"split\", \"stage\": \"C.local\", \"iter\": \"j\", "
                             "\"factors\": [2, 16]}]";
    struct kiln_state st = {0};
    matmul_state(ctx, text, &st);
    const struct kiln_stage *c = NULL;
    for (uint32_t i = 0; i < st.norder; i++)
        if (!strcmp(kiln_sym_str(ctx, st.st[st.order[i]].name), "C.local"))
            c = &st.st[st.order[i]];
    CHECK(c != NULL);
    if (c) {
        int64_t region[2] = {6, 16}, whole[2] = {64, 48};
        CHECK_EQ_INT(1, extent_of(ctx, c, region, "i.0"));
        CHECK_EQ_INT(1, extent_of(ctx, c, region, "i.1"));
        CHECK_EQ_INT(6, extent_of(ctx, c, region, "i.2"));
        CHECK_EQ_INT(1, extent_of(ctx, c, region, "j.1"));
        CHECK_EQ_INT(16, extent_of(ctx, c, region, "j.2"));
        CHECK_EQ_INT(1, extent_of(ctx, c, whole, "i.0"));
        CHECK_EQ_INT(11, extent_of(ctx, c, whole, "i.1"));
        CHECK_EQ_INT(6, extent_of(ctx, c, whole, "i.2"));
        CHECK_EQ_INT(2, extent_of(ctx, c, whole, "j.0"));
        CHECK_EQ_INT(2, extent_of(ctx, c, whole, "j.1"));
    }
    kiln_ctx_free(ctx);
}

/* y[h] = sum over r of (guarded) x[h + r - 1], x of 6: each read hangs one element over each
 * edge. `guard` 0: no select; 1: a select checking the low edge only; 2: both edges. */
static struct kiln_graph *
stencil_graph(kiln_ctx *ctx, int guard)
{
    struct kiln_graph *g = kiln_graph_new(ctx);
    int64_t            sx[1] = {6}, r = 3;
    uint32_t           x = kiln_graph_add_tensor(g, "x", KILN_DTYPE_F32, 1, sx, KILN_TENSOR_INPUT);
    uint32_t           y = kiln_graph_add_tensor(g, "y", KILN_DTYPE_F32, 1, sx, KILN_TENSOR_OP);
    kiln_expr          ix =
        kiln_sub(ctx, kiln_add(ctx, kiln_axis(ctx, 0), kiln_rvar(ctx, 0)), kiln_idx(ctx, 1));
    kiln_expr body = kiln_load(ctx, x, KILN_DTYPE_F32, 1, &ix);
    kiln_expr cond = kiln_le(ctx, kiln_idx(ctx, 0), ix);
    if (guard == 2)
        cond = kiln_and(ctx, cond, kiln_lt(ctx, ix, kiln_idx(ctx, 6)));
    if (guard)
        body = kiln_select(ctx, cond, body, kiln_float(ctx, 0, KILN_DTYPE_F32));
    kiln_graph_begin_call(g, "compute", 0, NULL, 0, NULL, 1, 1);
    kiln_graph_add_op(g, y, KILN_REDUCE_SUM, 1, &r, body, NULL, NULL);
    kiln_graph_end_call(g, y);
    kiln_graph_mark_output(g, y);
    CHECK(kiln_ok(ctx));
    return g;
}

static void
pad_error(struct kiln_graph *g, kiln_ctx *ctx, const char *want)
{
    const char          *text = "[{\"op\": \"pad\", \"stage\": \"x\", \"readers\": [\"y\"]}]";
    struct kiln_schedule s;
    struct kiln_state    st;
    CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, text, strlen(text), &s));
    CHECK_EQ_INT(want ? KILN_ERR_INVALID : KILN_OK, kiln_state_build(ctx, g, &s, &st));
    if (want)
        CHECK_EQ_STR(want, kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->msg : NULL);
    else
        CHECK_EQ_INT(8, st.t[st.st[st.order[0]].tensor].shape[0]);
}

/* pad: the padded shape, and reads it cannot make safe (tests/lower checks the values) */
static void
test_pad(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    pad_error(stencil_graph(ctx, 2), ctx, NULL);
    kiln_ctx_free(ctx);
    ctx = kiln_ctx_new(NULL);
    pad_error(stencil_graph(ctx, 1), ctx,
              "schedule step 0 (pad x): y reads x: a select guarding a read does not check the "
              "bounds it can leave");
    kiln_ctx_free(ctx);
    ctx = kiln_ctx_new(NULL);
    pad_error(stencil_graph(ctx, 0), ctx,
              "schedule step 0 (pad x): no read of x is guarded by a select on its bounds");
    kiln_ctx_free(ctx);
    /* a grouped, dilated convolution padded [1, 2]: x of 5 x 6 becomes 7 x 10 */
    ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g = PARSE(ctx, "input x: f32[1, 4, 5, 6]\nweight w: f32[4, 1, 3, 3]\n"
                                          "y = conv2d(x, w, padding=[1, 2], dilation=2, groups=4)\n");
    const char          *text = "[{\"op\": \"pad\", \"stage\": \"x\", \"readers\": [\"y\"]}]";
    struct kiln_schedule s;
    struct kiln_state    st;
    CHECK(g != NULL);
    CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, text, strlen(text), &s));
    CHECK_EQ_INT(KILN_OK, kiln_state_build(ctx, g, &s, &st));
    const struct kiln_stensor *pt = &st.t[st.st[st.order[0]].tensor];
    CHECK_EQ_STR("x.pad", kiln_sym_str(ctx, pt->name));
    CHECK_EQ_INT(1, pt->shape[0]);
    CHECK_EQ_INT(4, pt->shape[1]);
    CHECK_EQ_INT(7, pt->shape[2]);
    CHECK_EQ_INT(10, pt->shape[3]);
    kiln_ctx_free(ctx);
    /* a convolution (padding reads 0) and a max pooling (-inf) of one input: one padded copy
     * cannot serve both; an inlined reader; a tensor that does not exist */
    static const struct {
        const char *steps, *want;
    } bad[] = {
        {"[{\"op\": \"pad\", \"stage\": \"x\", \"readers\": [\"y\", \"p\"]}]",
         "schedule step 0 (pad x): p reads x: the reads leaving the bounds are not all filled "
         "with one constant"},
        {"[{\"op\": \"compute_inline\", \"stage\": \"r\"}, {\"op\": \"pad\", \"stage\": "
         "\"x\", \"readers\": [\"r\"]}]",
         "schedule step 1 (pad x): reader r was inlined"},
        {"[{\"op\": \"pad\", \"stage\": \"q\", \"readers\": [\"y\"]}]",
         "schedule step 0 (pad q): no tensor named q"},
    };
    for (size_t i = 0; i < KILN_COUNTOF(bad); i++) {
        ctx = kiln_ctx_new(NULL);
        g = PARSE(ctx, "input x: f32[1, 2, 6, 6]\nweight w: f32[2, 1, 3, 3]\n"
                       "y = conv2d(x, w, padding=1, groups=2)\n"
                       "p = max_pool2d(x, kernel=3, stride=1, padding=1)\nr = relu(x)\n"
                       "z = neg(r)\noutput y\noutput p\noutput z\n");
        CHECK(g != NULL);
        CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, bad[i].steps, strlen(bad[i].steps), &s));
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_state_build(ctx, g, &s, &st));
        CHECK_EQ_STR(bad[i].want, kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->msg : NULL);
        kiln_ctx_free(ctx);
    }
}

/* bind: the JSON form with every GPU index, its errors, and the annotations it leaves on the
 * state (tests/lower checks the loops and values) */
static void
test_bind(void)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    const char          *text = "{\"steps\": [\n"
                                "  {\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", "
                                "\"factors\": [8, 2]},\n"
                                "  {\"op\": \"split\", \"stage\": \"C\", \"iter\": \"j\", "
                                "\"factors\": [4, 2]},\n"
                                "  {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.0\", "
                                "\"thread\": \"blockIdx.x\"},\n"
                                "  {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.0\", "
                                "\"thread\": \"blockIdx.y\"},\n"
                                "  {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.1\", "
                                "\"thread\": \"blockIdx.z\"},\n"
                                "  {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.1\", "
                                "\"thread\": \"threadIdx.x\"},\n"
                                "  {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.2\", "
                                "\"thread\": \"threadIdx.y\"},\n"
                                "  {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.2\", "
                                "\"thread\": \"threadIdx.z\"},\n"
                                "  {\"op\": \"bind\", \"stage\": \"D\", \"iter\": \"i\", "
                                "\"thread\": \"blockIdx.x\"}\n"
                                "]}\n";
    struct kiln_schedule s, s2;
    CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, text, strlen(text), &s));
    CHECK_EQ_INT(9, s.nstep);
    for (uint32_t k = 2; k < 8 && k < s.nstep; k++) {
        CHECK_EQ_INT(KILN_STEP_BIND, s.step[k].kind);
        CHECK_EQ_INT(k - 2, s.step[k].value);
    }
    struct kiln_buf out = {0}, out2 = {0};
    CHECK_EQ_INT(KILN_OK, kiln_sched_to_json(ctx, &s, &out));
    CHECK_EQ_STR(text, out.data);
    CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, out.data, out.len, &s2));
    CHECK_EQ_INT(KILN_OK, kiln_sched_to_json(ctx, &s2, &out2));
    CHECK_EQ_STR(out.data, out2.data);
    /* a step built in C with a value that names no GPU index is refused, not printed */
    struct kiln_schedule bad = {0};
    struct kiln_step     st = {.kind = KILN_STEP_BIND,
                               .stage = kiln_sym_cstr(ctx, "C"),
                               .iter = kiln_sym_cstr(ctx, "i"),
                               .value = KILN_BIND_COUNT};
    struct kiln_buf      out3 = {0};
    CHECK_EQ_INT(KILN_OK, kiln_sched_push(ctx, &bad, st));
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_sched_to_json(ctx, &bad, &out3));
    CHECK_EQ_STR("schedule step 0 (bind C.i): thread 6 is not a GPU index",
                 kiln_ctx_error(ctx) ? kiln_ctx_error(ctx)->msg : NULL);
    kiln_ctx_error_clear(ctx);
    /* the state: annotations and axes; one GPU index per stage, so D may reuse blockIdx.x */
    struct kiln_state state = {0};
    matmul_state(ctx, text, &state);
    static const struct {
        const char *iter;
        uint8_t     ann, axis;
    } want[] = {
        {"i.0", KILN_LOOP_GPU_BLOCK, 0},  {"j.0", KILN_LOOP_GPU_BLOCK, 1},
        {"i.1", KILN_LOOP_GPU_BLOCK, 2},  {"j.1", KILN_LOOP_GPU_THREAD, 0},
        {"i.2", KILN_LOOP_GPU_THREAD, 1}, {"j.2", KILN_LOOP_GPU_THREAD, 2},
        {"k", KILN_LOOP_SERIAL, 0},
    };
    const struct kiln_stage *c = &state.st[state.order[0]];
    CHECK_EQ_STR("C", kiln_sym_str(ctx, c->name));
    for (size_t w = 0; w < KILN_COUNTOF(want); w++) {
        bool found = false;
        for (uint32_t p = 0; p < c->nleaf; p++) {
            const struct kiln_iterv *it = &c->it[c->leaf[p]];
            if (strcmp(kiln_sym_str(ctx, it->name), want[w].iter))
                continue;
            found = true;
            CHECK_EQ_INT(want[w].ann, it->ann);
            CHECK_EQ_INT(want[w].axis, it->axis);
        }
        CHECK(found);
    }
    const struct kiln_stage *d = &state.st[state.order[1]];
    CHECK_EQ_INT(KILN_LOOP_GPU_BLOCK, d->it[d->leaf[0]].ann);
    CHECK_EQ_INT(0, d->it[d->leaf[0]].axis);
    kiln_ctx_free(ctx);

    /* JSON errors */
    json_error("[{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [8]},"
               "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"j\", \"factors\": [8]},"
               "{\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"j.0\"},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.0\", \"thread\": "
               "\"blockIdx.w\"}]",
               "schedule step 3 (bind C.i.0): unknown thread \"blockIdx.w\" (expected "
               "blockIdx.x/y/z or threadIdx.x/y/z)");
    json_error("[{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": "
               "\"threadidx.x\"}]",
               "schedule step 0 (bind C.i): unknown thread \"threadidx.x\" (expected "
               "blockIdx.x/y/z or threadIdx.x/y/z)");
    json_error("[{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\"}]",
               "schedule step 0 (bind C.i): \"thread\" must be a string: blockIdx.x/y/z or "
               "threadIdx.x/y/z");
    json_error("[{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": 0}]",
               "schedule step 0 (bind C.i): \"thread\" must be a string: blockIdx.x/y/z or "
               "threadIdx.x/y/z");
    json_error("[{\"op\": \"bind\", \"stage\": \"C\", \"thread\": \"blockIdx.x\"}]",
               "schedule step 0: \"iter\" must be a non-empty string");
    json_error("[{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": "
               "\"blockIdx.x\", \"axis\": 0}]",
               "schedule step 0 (bind): unknown field \"axis\"");
    json_error("[{\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": "
               "\"blockIdx.x\"}]",
               "schedule step 0 (parallel): unknown field \"thread\"");

    /* cache_read's "scope": "shared" round-trips (and "local", the default, prints as nothing) */
    ctx = kiln_ctx_new(NULL);
    {
        const char *sh = "[{\"op\": \"cache_read\", \"stage\": \"A\", \"readers\": [\"C\"], "
                         "\"scope\": \"shared\"}, {\"op\": \"cache_read\", \"stage\": \"B\", "
                         "\"readers\": [\"C\"], \"scope\": \"local\"}]";
        struct kiln_schedule sc;
        struct kiln_buf      js = {0};
        CHECK_EQ_INT(KILN_OK, kiln_sched_from_json(ctx, sh, strlen(sh), &sc));
        CHECK(sc.nstep == 2 && sc.step[0].value == KILN_CACHE_SHARED
              && sc.step[1].value == KILN_CACHE_LOCAL);
        CHECK_EQ_INT(KILN_OK, kiln_sched_to_json(ctx, &sc, &js));
        CHECK(js.data && strstr(js.data, "\"readers\": [\"C\"], \"scope\": \"shared\"}")
              && !strstr(js.data, "\"local\""));
    }
    kiln_ctx_free(ctx);
    json_error("[{\"op\": \"cache_read\", \"stage\": \"A\", \"readers\": [\"C\"], \"scope\": "
               "\"global\"}]",
               "schedule step 0 (cache_read A): \"scope\" must be \"local\" or \"shared\"");
    json_error("[{\"op\": \"cache_write\", \"stage\": \"C\", \"scope\": \"shared\"}]",
               "schedule step 0 (cache_write): unknown field \"scope\"");

    /* illegal binds */
    /* a reduction binds to threadIdx.x only (a cross-thread reduction), as the only thread
     * loop of its stage */
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"k\", \"thread\": "
               "\"blockIdx.x\"}",
               "schedule step 0 (bind C.k): iterator k is a reduction: only threadIdx.x can be "
               "bound to a reduction (a cross-thread reduction); blockIdx.x would race on the "
               "accumulator (use rfactor first)");
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"k\", \"thread\": "
               "\"threadIdx.y\"}",
               "schedule step 0 (bind C.k): iterator k is a reduction: only threadIdx.x can be "
               "bound to a reduction (a cross-thread reduction); threadIdx.y would race on the "
               "accumulator (use rfactor first)");
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"k\", \"thread\": "
               "\"threadIdx.x\"},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": "
               "\"threadIdx.y\"}",
               "schedule step 1 (bind C.i): reduction iterator k of C is bound to threadIdx.x (a "
               "cross-thread reduction), so i cannot also be bound to threadIdx.y: the reduction "
               "must be the stage's only thread loop");
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j\", \"thread\": "
               "\"threadIdx.z\"},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"k\", \"thread\": "
               "\"threadIdx.x\"}",
               "schedule step 1 (bind C.k): reduction iterator k of C is bound to threadIdx.x (a "
               "cross-thread reduction), so j cannot also be bound to threadIdx.z: the reduction "
               "must be the stage's only thread loop");
    step_error("{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"k\", \"factors\": [8]},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"k.1\", \"thread\": "
               "\"threadIdx.x\"},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"k.0\", \"thread\": "
               "\"threadIdx.x\"}",
               "schedule step 2 (bind C.k.0): threadIdx.x is already bound to iterator k.1 of C");
    step_error(
        "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"k\", \"factors\": [8]},"
        "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"k.1\", \"thread\": "
        "\"threadIdx.x\"},"
        "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"k.1\", \"factors\": [2]}",
        "schedule step 2 (split C.k.1): iterator k.1 is already annotated threadIdx.x; split "
        "it before annotating");
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": "
               "\"blockIdx.x\"},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": "
               "\"threadIdx.x\"}",
               "schedule step 1 (bind C.i): iterator i is already bound to blockIdx.x");
    step_error("{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [8]},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.0\", \"thread\": "
               "\"threadIdx.x\"},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.1\", \"thread\": "
               "\"threadIdx.x\"}",
               "schedule step 2 (bind C.i.1): threadIdx.x is already bound to iterator i.0 of C");
    step_error("{\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"j\"},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j\", \"thread\": "
               "\"blockIdx.y\"}",
               "schedule step 1 (bind C.j): iterator j is already parallel");
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j\", \"thread\": "
               "\"blockIdx.y\"},"
               "{\"op\": \"vectorize\", \"stage\": \"C\", \"iter\": \"j\"}",
               "schedule step 1 (vectorize C.j): iterator j is already bound to blockIdx.y");
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j\", \"thread\": "
               "\"threadIdx.z\"},"
               "{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"j\", \"factors\": [4]}",
               "schedule step 1 (split C.j): iterator j is already annotated threadIdx.z; split it "
               "before annotating");
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": "
               "\"blockIdx.x\"},"
               "{\"op\": \"fuse\", \"stage\": \"C\", \"iters\": [\"i\", \"j\"]}",
               "schedule step 1 (fuse C): iterator i is already annotated blockIdx.x");
    step_error("{\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [8]},"
               "{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": "
               "\"blockIdx.x\"}",
               "schedule step 1 (bind C.i): iterator i is no longer a loop of C (its loops: i.0, "
               "i.1, j, k)");
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"q\", \"thread\": "
               "\"blockIdx.x\"}",
               "schedule step 0 (bind C.q): stage C has no iterator q (its loops: i, j, k)");
    step_error("{\"op\": \"bind\", \"stage\": \"A\", \"iter\": \"i\", \"thread\": "
               "\"blockIdx.x\"}",
               "schedule step 0 (bind A.i): A is an argument of the graph, not a stage");
    step_error("{\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i\", \"thread\": "
               "\"blockIdx.x\"},"
               "{\"op\": \"rfactor\", \"stage\": \"C\", \"iter\": \"k\"}",
               "schedule step 1 (rfactor C.k): rfactor needs untransformed spatial iterators on "
               "C");
}

/* The step descriptor table (passes/sched.c): every kind is named, once; the keys it names are
 * there; the form it checks when a step is applied gives these messages (a step built in C can
 * have a count that JSON parsing would refuse); a step that adds a stage adds the one it
 * says. */
static void
test_step_table(void)
{
    for (int k = 0; k < KILN_STEP_COUNT; k++) {
        const struct kiln_step_desc *d = &kiln_step_desc[k];
        CHECK(d->name && d->name[0]);
        for (int j = 0; j < k; j++)
            CHECK(strcmp(d->name, kiln_step_desc[j].name));
        CHECK(!(d->fields & KILN_STEPF_ITERS) || d->iters_key);
        CHECK(!(d->fields & KILN_STEPF_VALUE) || d->value_key);
        CHECK(d->stage == KILN_REF_STAGE || d->stage == KILN_REF_TENSOR);
        CHECK(!(d->fields & KILN_STEPF_ITER) == (d->iter == KILN_REF_NONE));
        CHECK(!(d->fields & KILN_STEPF_ITERS) == (d->iters == KILN_REF_NONE));
        CHECK(!(d->fields & KILN_STEPF_TARGET) == (d->target == KILN_REF_NONE));
        CHECK(!d->nmax || d->nwhat);
    }
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = matmul_graph(ctx, 64, 48, 30);
    struct kiln_step   bad[] = {
          {.kind = KILN_STEP_SPLIT,
           .stage = kiln_sym_cstr(ctx, "C"),
           .iter = kiln_sym_cstr(ctx, "i")},
          {.kind = KILN_STEP_TILE, .stage = kiln_sym_cstr(ctx, "C")},
          {.kind = KILN_STEP_AUTO_UNROLL, .stage = kiln_sym_cstr(ctx, "C"), .value = 4097},
    };
    const char *want[] = {"schedule step 0 (split C.i): split needs 1 to 7 factors",
                          "schedule step 0 (tile C): tile needs 1 to 8 iterators",
                          "schedule step 0 (auto_unroll C): max_step 4097 must be in [0, 4096]"};
    for (size_t i = 0; i < KILN_COUNTOF(bad); i++) {
        struct kiln_schedule s = {&bad[i], 1, 1};
        struct kiln_state    st;
        CHECK(kiln_state_build(ctx, g, &s, &st) == KILN_ERR_INVALID);
        CHECK_EQ_STR(want[i], kiln_ctx_error(ctx)->msg);
        kiln_ctx_error_clear(ctx);
    }
    struct kiln_step added[] = {
        {.kind = KILN_STEP_CACHE_WRITE, .stage = kiln_sym_cstr(ctx, "C")},
        {.kind = KILN_STEP_CACHE_READ,
         .stage = kiln_sym_cstr(ctx, "A"),
         .n = 1,
         .iters = {kiln_sym_cstr(ctx, "C")}},
        {.kind = KILN_STEP_PACK,
         .stage = kiln_sym_cstr(ctx, "B"),
         .value = 1,
         .n = 1,
         .factors = {4}},
    };
    for (size_t i = 0; i < KILN_COUNTOF(added); i++) {
        struct kiln_schedule s = {&added[i], 1, 1};
        struct kiln_state    st;
        CHECK(kiln_state_build(ctx, g, &s, &st) == KILN_OK);
        const char *name = kiln_arena_printf(ctx, "%s.%s", kiln_sym_str(ctx, added[i].stage),
                                             kiln_step_desc[added[i].kind].creates);
        bool        found = false;
        for (uint32_t t = 0; t < st.nt; t++)
            found |= st.t[t].name == kiln_sym_cstr(ctx, name);
        CHECK(found);
    }
    kiln_ctx_free(ctx);
}

static const struct test tests[] = {
    {"json_round_trip", test_json_round_trip},
    {"json_errors", test_json_errors},
    {"json_strict", test_json_strict},
    {"illegal_steps", test_illegal_steps},
    {"state_shapes", test_state_shapes},
    {"split_extents", test_split_extents},
    {"pad", test_pad},
    {"bind", test_bind},
    {"step_table", test_step_table},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
