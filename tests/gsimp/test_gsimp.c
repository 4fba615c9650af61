/* tests/gsimp/test_gsimp.c -- graph simplification (passes/graph_simplify.c,
 * kiln_graph_simplify).
 *
 * Random .kg graphs (chains of conv2d + batch_norm + relu blocks with random groups, kernels,
 * biases, biases as separate adds; depthwise blocks; dense + bias add + batch_norm; constant
 * subgraphs over weights; dead branches; same-shape reshapes; batch norms that must not be folded
 * because the convolution's output is read elsewhere) with random weights: the simplified graph
 * evaluated by the reference interpreter must equal the original graph evaluated by it (relative
 * 1e-9), and the rewrites must have happened: the exact number of batch norms folded, no statement
 * left that reads only weights, no dead statement, no identity copy. Also: the size rule (a
 * broadcast of small weights to a large tensor is not folded), unknown weights (nothing folded),
 * simplifying twice changes nothing, and errors. kiln_graph_channels_last on every random graph
 * (same outputs again; no transpose of a transpose; idempotent) and on a small residual
 * network (everything channels-last, one transpose in and one out; a lone convolution not).
 * kiln_graph_winograd on random 3x3 convolutions and on variants it must leave alone. */
#include "../harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- text building ---- */

struct text {
    char  *s;
    size_t len, cap;
};

static void put(struct text *t, const char *fmt, ...) KILN_PRINTF(2, 3);

static void
put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = t->cap - t->len;
        va_start(ap, fmt);
        int n = t->s ? vsnprintf(t->s + t->len, room, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        t->cap = t->cap ? t->cap * 2 : 4096;
        char *ns = realloc(t->s, t->cap);
        if (!ns) {
            harness_fail(__FILE__, __LINE__, "out of memory");
            return;
        }
        t->s = ns;
    }
}

/* ---- evaluation of a graph and its simplified form ---- */

/* Values for every argument of g: inputs drawn from r, weights from w (NULL: drawn too). */
static double **
make_args(const struct kiln_graph *g, const double *const *w, struct kiln_rng *r)
{
    double **a = calloc(g->narg + 1, sizeof *a);
    for (uint32_t i = 0; a && i < g->narg; i++) {
        size_t n = (size_t)kiln_tensor_numel(&g->tensor[g->arg[i]]);
        a[i] = malloc(sizeof(double) * n);
        for (size_t k = 0; a[i] && k < n; k++)
            a[i][k] = w && w[i] ? w[i][k] : 2 * kiln_rng_uniform(r) - 1;
    }
    return a;
}

static void
free_args(double **a, uint32_t n)
{
    for (uint32_t i = 0; a && i < n; i++)
        free(a[i]);
    free(a);
}

static double **
eval_outputs(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *args)
{
    double **o = calloc(g->noutput + 1, sizeof *o);
    for (uint32_t i = 0; o && i < g->noutput; i++)
        o[i] = calloc((size_t)kiln_tensor_numel(&g->tensor[g->output[i]]), sizeof(double));
    if (kiln_graph_eval(ctx, g, args, o) != KILN_OK)
        harness_fail(__FILE__, __LINE__, "eval: %s", kiln_ctx_error(ctx)->msg);
    return o;
}

/* Evaluates g (weights w, may be NULL) and s (weights sw) on the same inputs and compares every
 * output; returns the largest relative difference (scaled by the output's largest magnitude). */
static double
compare(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *w,
        const struct kiln_graph *s, const double *const *sw, uint64_t seed)
{
    struct kiln_rng r = kiln_rng_new(seed);
    double        **ga = make_args(g, w, &r);
    double        **sa = calloc(s->narg + 1, sizeof *sa);
    /* the simplified graph's inputs are g's (by name); its weights come from sw */
    for (uint32_t i = 0; sa && i < s->narg; i++) {
        const struct kiln_tensor *t = &s->tensor[s->arg[i]];
        if (t->kind == KILN_TENSOR_WEIGHT && sw && sw[i]) {
            sa[i] = (double *)sw[i];
            continue;
        }
        /* an input, or a weight of unknown value kept as it was: the same values by name */
        uint32_t old = kiln_graph_find(g, kiln_sym_str(ctx, t->name));
        for (uint32_t k = 0; k < g->narg; k++)
            if (g->arg[k] == old)
                sa[i] = ga[k];
        CHECK(sa[i] != NULL);
    }
    double **go = eval_outputs(ctx, g, (const double *const *)ga);
    double **so = eval_outputs(ctx, s, (const double *const *)sa);
    double   worst = 0;
    CHECK_EQ_INT(g->noutput, s->noutput);
    for (uint32_t i = 0; i < g->noutput && i < s->noutput; i++) {
        int64_t n = kiln_tensor_numel(&g->tensor[g->output[i]]);
        CHECK_EQ_INT(n, kiln_tensor_numel(&s->tensor[s->output[i]]));
        double scale = 1e-30;
        for (int64_t k = 0; k < n; k++)
            scale = fmax(scale, fabs(go[i][k]));
        for (int64_t k = 0; k < n; k++)
            worst = fmax(worst, fabs(go[i][k] - so[i][k]) / scale);
    }
    free_args(go, g->noutput);
    free_args(so, s->noutput);
    free_args(ga, g->narg);
    free(sa);
    return worst;
}

static uint32_t
count_kind(kiln_ctx *ctx, const struct kiln_graph *g, const char *kind)
{
    uint32_t n = 0;
    for (uint32_t c = 0; c < g->ncall; c++)
        n += !strcmp(kiln_sym_str(ctx, g->call[c].kind), kind);
    return n;
}

struct reads {
    const struct kiln_graph *g;
    uint32_t                 lo, hi;
    bool                     weights_only, any;
    bool                    *read;
};

static bool
note(void *ud, kiln_expr load)
{
    struct reads *r = ud;
    uint32_t      t = (uint32_t)kiln_node_get(r->g->ctx, load)->imm;
    uint32_t      op = r->g->tensor[t].op;
    r->read[t] = true;
    if (op != KILN_NONE && op >= r->lo && op < r->hi)
        return true;
    r->any = true;
    r->weights_only = r->weights_only && r->g->tensor[t].kind == KILN_TENSOR_WEIGHT;
    return true;
}

/* Checks the simplified graph's shape: no statement reading only weights (when all constants
 * are small enough to fold), no statement whose result nothing reads, no identity copy. */
static void
check_simplified(const struct kiln_graph *s, bool constants_folded)
{
    bool *read = calloc(s->ntensor + 1, 1);
    for (uint32_t c = 0; read && c < s->ncall; c++) {
        const struct kiln_call *call = &s->call[c];
        struct reads            r = {s, call->op_begin, call->op_end, true, false, read};
        for (uint32_t o = call->op_begin; o < call->op_end; o++)
            kiln_expr_visit_loads(s->ctx, s->op[o].body, note, &r);
        if (constants_folded && r.any && r.weights_only)
            harness_fail(__FILE__, __LINE__, "statement %s reads only weights",
                         kiln_graph_tensor_name(s, call->out));
        if (call->op_end - call->op_begin == 1) {
            const struct kiln_node *n = kiln_node_get(s->ctx, s->op[call->op_begin].body);
            if (n->op == KILN_OP_LOAD && !s->tensor[call->out].is_output) {
                const struct kiln_tensor *a = &s->tensor[n->imm], *b = &s->tensor[call->out];
                bool                      same = a->ndim == b->ndim;
                for (uint32_t k = 0; same && k < a->ndim; k++)
                    same = a->shape[k] == b->shape[k];
                if (same && !strcmp(kiln_sym_str(s->ctx, call->kind), "reshape"))
                    harness_fail(__FILE__, __LINE__, "identity reshape %s remains",
                                 kiln_graph_tensor_name(s, call->out));
            }
        }
    }
    for (uint32_t c = 0; read && c < s->ncall; c++) {
        uint32_t t = s->call[c].out;
        if (!read[t] && !s->tensor[t].is_output)
            harness_fail(__FILE__, __LINE__, "dead statement %s remains",
                         kiln_graph_tensor_name(s, t));
    }
    free(read);
}

/* ---- random graphs ---- */

struct rg {
    struct text      decl, body;
    struct kiln_rng *r;
    uint32_t         nweight;
    uint32_t         bn_foldable; /* batch norms the simplifier must fold */
    uint32_t         bn_total;
    uint32_t         bias_adds; /* bias adds the simplifier must fold */
};

static uint32_t
pick(struct kiln_rng *r, uint32_t n)
{
    return (uint32_t)kiln_rng_below(r, n);
}

/* Declares weight NAME of shape [c] with a batch norm's four parameters. */
static void
bn_params(struct rg *G, const char *p, int64_t c)
{
    put(&G->decl, "weight %s_g: f32[%lld]\nweight %s_b: f32[%lld]\n", p, (long long)c, p,
        (long long)c);
    put(&G->decl, "weight %s_m: f32[%lld]\nweight %s_v: f32[%lld]\n", p, (long long)c, p,
        (long long)c);
}

/* Appends block i reading tensor h ([n, c, hw, hw]); returns the new channel count; the
 * block's output is named h<i+1>. */
static int64_t
block(struct rg *G, uint32_t i, int64_t n, int64_t c, int64_t hw)
{
    struct kiln_rng *r = G->r;
    uint32_t         kind = pick(r, 5);
    bool             dw = kind == 1;
    int64_t          co = dw ? c : 2 + pick(r, 4), groups = dw ? c : 1;
    int64_t          k = pick(r, 2) ? 3 : 1;
    bool             bias = pick(r, 2);
    if (!dw && pick(r, 3) == 0 && c % 2 == 0 && co % 2 == 0)
        groups = 2;
    put(&G->decl, "weight w%u: f32[%lld, %lld, %lld, %lld]\n", i, (long long)co,
        (long long)(c / groups), (long long)k, (long long)k);
    if (bias)
        put(&G->decl, "weight cb%u: f32[%lld]\n", i, (long long)co);
    char p[16];
    snprintf(p, sizeof p, "bn%u", i);
    bn_params(G, p, co);
    char cb[24] = "";
    if (bias)
        snprintf(cb, sizeof cb, ", cb%u", i);
    bool add_bias = !bias && pick(r, 2); /* a bias as a separate add of a [co, 1, 1] weight */
    put(&G->body, "%s%u = conv2d(h%u, w%u%s, padding=%lld, groups=%lld)\n", add_bias ? "cc" : "c",
        i, i, i, cb, (long long)(k / 2), (long long)groups);
    if (add_bias) {
        put(&G->decl, "weight ab%u: f32[%lld, 1, 1]\n", i, (long long)co);
        put(&G->body, pick(r, 2) ? "c%u = add(cc%u, ab%u)\n" : "c%u = add(ab%u, cc%u)\n", i, i, i);
        G->bias_adds++;
    }
    put(&G->body, "n%u = batch_norm(c%u, %s_g, %s_b, %s_m, %s_v, eps=0.001)\n", i, i, p, p, p, p);
    G->bn_total++;
    const char *last = "n";
    if (kind == 3) { /* the convolution's output is read twice: no folding */
        put(&G->body, "s%u = add(n%u, c%u)\n", i, i, i);
        last = "s";
    } else {
        G->bn_foldable++;
    }
    if (kind == 2) { /* a dead branch reading the convolution: removed before folding */
        put(&G->body, "dead%u = tanh(c%u)\n", i, i);
    }
    if (pick(r, 2)) {
        put(&G->body, "a%u = relu(%s%u)\n", i, last, i);
        last = "a";
    }
    if (kind == 4) { /* a constant chain: (p * q) reshaped to [co, 1, 1], times the block */
        put(&G->decl, "weight sp%u: f32[%lld]\nweight sq%u: f32[%lld]\n", i, (long long)co, i,
            (long long)co);
        put(&G->body, "sc%u = mul(sp%u, sq%u)\n", i, i, i);
        put(&G->body, "sr%u = reshape(sc%u, shape=[%lld, 1, 1])\n", i, i, (long long)co);
        put(&G->body, "m%u = mul(%s%u, sr%u)\n", i, last, i, i);
        last = "m";
    }
    if (pick(r, 3) == 0) { /* a reshape to the same shape */
        put(&G->body, "r%u = reshape(%s%u, shape=[%lld, %lld, %lld, %lld])\n", i, last, i,
            (long long)n, (long long)co, (long long)hw, (long long)hw);
        last = "r";
    }
    put(&G->body, "h%u = add(%s%u, %s%u)\n", i + 1, last, i, last, i);
    return co;
}

/* A random graph; *foldable receives the number of batch norms that must be folded. */
static char *
random_graph(struct kiln_rng *r, uint32_t *foldable, uint32_t *total, uint32_t *adds)
{
    struct rg G = {{0}, {0}, r, 0, 0, 0, 0};
    int64_t   n = 1 + pick(r, 2), c = 1 + pick(r, 4), hw = 3 + pick(r, 4);
    uint32_t  nblock = 1 + pick(r, 3);
    put(&G.decl, "input h0: f32[%lld, %lld, %lld, %lld]\n", (long long)n, (long long)c,
        (long long)hw, (long long)hw);
    for (uint32_t i = 0; i < nblock; i++)
        c = block(&G, i, n, c, hw);
    put(&G.body, "output h%u\n", nblock);
    if (pick(r, 2)) { /* dense + batch norm, the batch norm an output */
        int64_t kk = 2 + pick(r, 5), m = 2 + pick(r, 5);
        put(&G.decl, "input z: f32[%lld, %lld]\nweight wd: f32[%lld, %lld]\n", (long long)n,
            (long long)kk, (long long)m, (long long)kk);
        uint32_t bias = pick(r, 3); /* none, dense's own, a separate add (ONNX Gemm) */
        bool     bn = pick(r, 3) != 0;
        if (bias)
            put(&G.decl, "weight bd: f32[%lld]\n", (long long)m);
        put(&G.body, "dz = dense(z, wd%s)\n", bias == 1 ? ", bd" : "");
        const char *y = "dz";
        if (bias == 2) {
            put(&G.body, "dza = add(dz, bd)\n");
            y = "dza";
            G.bias_adds++;
        }
        if (bn) {
            bn_params(&G, "bnd", m);
            put(&G.body, "nz = batch_norm(%s, bnd_g, bnd_b, bnd_m, bnd_v)\n", y);
            y = "nz";
            G.bn_total++;
            G.bn_foldable++;
        }
        put(&G.body, "output %s\n", y);
    }
    *foldable = G.bn_foldable;
    *total = G.bn_total;
    *adds = G.bias_adds;
    put(&G.decl, "%.*s", (int)G.body.len, G.body.s ? G.body.s : "");
    free(G.body.s);
    return G.decl.s;
}

/* Random weight values; batch-norm variances (names ending in _v) in [0.5, 1.5]. */
static const double **
random_weights(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_rng *r)
{
    const double **w = kiln_arena_alloc(ctx, sizeof(double *) * (g->narg + 1));
    for (uint32_t i = 0; w && i < g->narg; i++) {
        const struct kiln_tensor *t = &g->tensor[g->arg[i]];
        if (t->kind != KILN_TENSOR_WEIGHT)
            continue;
        const char *name = kiln_sym_str(ctx, t->name);
        size_t      len = strlen(name), n = (size_t)kiln_tensor_numel(t);
        bool        var = len > 2 && !strcmp(name + len - 2, "_v");
        double     *v = kiln_arena_alloc(ctx, sizeof(double) * n);
        for (size_t k = 0; v && k < n; k++)
            v[k] = var ? 0.5 + kiln_rng_uniform(r) : 2 * kiln_rng_uniform(r) - 1;
        w[i] = v;
    }
    return w;
}

/* The defining statement of tensor t, or KILN_NONE. */
static uint32_t
def_call(const struct kiln_graph *g, uint32_t t)
{
    for (uint32_t c = 0; c < g->ncall; c++)
        if (g->call[c].out == t)
            return c;
    return KILN_NONE;
}

static bool
has_attr(kiln_ctx *ctx, const struct kiln_call *c, const char *name, const char *value)
{
    for (uint32_t i = 0; i < c->nattr; i++)
        if (!strcmp(kiln_sym_str(ctx, c->attr[i].name), name) && c->attr[i].s
            && !strcmp(c->attr[i].s, value))
            return true;
    return false;
}

/* kiln_graph_channels_last on simplified graph s (of original g): the same outputs as g, no
 * transpose of a transpose (a tensor goes channels-last once and back once), no more window
 * ops with layout="nhwc" than statements converted, and a second run changes nothing. Returns
 * the number of statements converted, the result in *out (NULL when the pass failed). */
static uint32_t
check_channels_last(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *w,
                    const struct kiln_graph *s, const double *const *sw, uint64_t seed,
                    struct kiln_graph **out)
{
    struct kiln_graph   *l = NULL, *l2 = NULL;
    const double *const *lw = NULL;
    const double *const *lw2 = NULL;
    uint32_t             n = 0, n2 = 0;
    *out = NULL;
    if (kiln_graph_channels_last(ctx, s, sw, &l, &lw, &n) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "channels_last: %s", kiln_ctx_error(ctx)->msg);
        return 0;
    }
    *out = l;
    double err = compare(ctx, g, w, l, lw, seed);
    if (!(err <= 1e-9))
        harness_fail(__FILE__, __LINE__, "channels-last outputs differ by %g", err);
    uint32_t nhwc = 0;
    for (uint32_t c = 0; c < l->ncall; c++) {
        const struct kiln_call *call = &l->call[c];
        nhwc += has_attr(ctx, call, "layout", "nhwc");
        if (strcmp(kiln_sym_str(ctx, call->kind), "transpose"))
            continue;
        uint32_t d = def_call(l, call->in[0]);
        CHECK(d == KILN_NONE || strcmp(kiln_sym_str(ctx, l->call[d].kind), "transpose"));
    }
    CHECK(n >= nhwc);
    CHECK(l->ncall >= s->ncall); /* statements are converted or copied, transposes added */
    if (kiln_graph_channels_last(ctx, l, lw, &l2, &lw2, &n2) == KILN_OK) {
        CHECK_EQ_INT(0, n2);
        CHECK_EQ_INT(l->ncall, l2->ncall);
    } else {
        harness_fail(__FILE__, __LINE__, "channels_last twice: %s", kiln_ctx_error(ctx)->msg);
    }
    return n;
}

static bool
random_case(uint64_t seed)
{
    struct kiln_rng    r = kiln_rng_new(seed);
    uint32_t           foldable = 0, total = 0, adds = 0;
    char              *text = random_graph(&r, &foldable, &total, &adds);
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    int                before = harness_failures;
    struct kiln_graph *g = PARSE(ctx, text);
    if (g) {
        const double *const        *w = random_weights(ctx, g, &r);
        struct kiln_graph          *s = NULL;
        const double *const        *sw = NULL;
        struct kiln_simplify_report rep;
        if (kiln_graph_simplify(ctx, g, w, &s, &sw, &rep) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "simplify: %s", kiln_ctx_error(ctx)->msg);
        } else {
            double err = compare(ctx, g, w, s, sw, seed + 1);
            if (!(err <= 1e-9))
                harness_fail(__FILE__, __LINE__, "outputs differ by %g", err);
            CHECK_EQ_INT(foldable, rep.batch_norms_folded);
            CHECK_EQ_INT(adds, rep.bias_adds_folded);
            CHECK_EQ_INT(total - foldable, count_kind(ctx, s, "batch_norm"));
            CHECK(rep.calls_after + foldable <= rep.calls_before);
            CHECK(rep.weight_bytes_after <= rep.weight_bytes_before);
            check_simplified(s, true);
            struct kiln_graph *l;
            check_channels_last(ctx, g, w, s, sw, seed + 2, &l);
            /* a second run finds nothing left to do */
            struct kiln_graph          *s2;
            const double *const        *sw2;
            struct kiln_simplify_report rep2;
            if (kiln_graph_simplify(ctx, s, sw, &s2, &sw2, &rep2) == KILN_OK) {
                CHECK_EQ_INT(0, rep2.batch_norms_folded + rep2.bias_adds_folded
                                    + rep2.constants_folded + rep2.calls_folded + rep2.dead_removed
                                    + rep2.identities_removed);
                CHECK_EQ_INT(rep.calls_after, rep2.calls_after);
                if (kiln_graph_hash(s) != kiln_graph_hash(s2)) {
                    const char *p1 = NULL, *p2 = NULL;
                    kiln_graph_print(ctx, s, 0, &p1);
                    kiln_graph_print(ctx, s2, 0, &p2);
                    harness_fail(__FILE__, __LINE__, "simplifying twice changed the graph:\n%s\n%s",
                                 p1 ? p1 : "", p2 ? p2 : "");
                }
            } else {
                harness_fail(__FILE__, __LINE__, "simplify twice: %s", kiln_ctx_error(ctx)->msg);
            }
        }
    }
    bool ok = harness_failures == before;
    if (!ok)
        fprintf(stderr, "seed %llu, graph:\n%s\n", (unsigned long long)seed, text);
    kiln_ctx_free(ctx);
    free(text);
    return ok;
}

static void
test_random(void)
{
    uint64_t n = opt_iters_or(60);
    for (uint64_t k = 0; k < n; k++)
        if (!random_case(opt_seed() * 1000003u + k))
            return;
}

/* ---- targeted cases ---- */

/* Simplifies text with random weights, checks equal outputs; returns the simplified graph. */
static struct kiln_graph *
simplify_text(kiln_ctx *ctx, const char *text, bool known, struct kiln_simplify_report *rep,
              const double *const **sw)
{
    struct kiln_rng    r = kiln_rng_new(opt_seed() + 7);
    struct kiln_graph *g = PARSE(ctx, text), *s = NULL;
    if (!g)
        return NULL;
    const double *const *w = known ? random_weights(ctx, g, &r) : NULL;
    if (kiln_graph_simplify(ctx, g, w, &s, sw, rep) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "simplify: %s", kiln_ctx_error(ctx)->msg);
        return NULL;
    }
    double err = compare(ctx, g, w, s, *sw, opt_seed() + 8);
    if (!(err <= 1e-9))
        harness_fail(__FILE__, __LINE__, "outputs differ by %g", err);
    return s;
}

static void
test_size_rule(void)
{
    /* outer sum of two 64-element weights: 4096 elements > max(1024, 128): stays; the reshape
     * of p (64 elements) is folded */
    kiln_ctx                   *ctx = kiln_ctx_new(NULL);
    struct kiln_simplify_report rep;
    const double *const        *sw;
    struct kiln_graph          *s = simplify_text(ctx,
                                                  "input x: f32[64, 64]\n"
                                                           "weight p: f32[64]\nweight q: f32[64]\n"
                                                           "pc = reshape(p, shape=[64, 1])\n"
                                                           "o = add(pc, q)\n"
                                                           "y = mul(x, o)\noutput y\n",
                                                  true, &rep, &sw);
    if (s) {
        CHECK_EQ_INT(1, rep.constants_folded);
        CHECK_EQ_INT(1, rep.calls_folded);
        CHECK_EQ_INT(1, count_kind(ctx, s, "add"));
        CHECK_EQ_INT(0, count_kind(ctx, s, "reshape"));
        CHECK_EQ_INT(2, rep.weights_after);
        CHECK(rep.weight_bytes_after <= rep.weight_bytes_before);
    }
    /* small enough: the whole constant chain becomes one weight */
    s = simplify_text(ctx,
                      "input x: f32[8, 8]\nweight p: f32[8]\nweight q: f32[8]\n"
                      "pc = reshape(p, shape=[8, 1])\no = add(pc, q)\nt = transpose(o)\n"
                      "y = mul(x, t)\noutput y\n",
                      true, &rep, &sw);
    if (s) {
        CHECK_EQ_INT(1, rep.constants_folded);
        CHECK_EQ_INT(3, rep.calls_folded);
        CHECK_EQ_INT(1, s->ncall);
        CHECK_EQ_INT(1, rep.weights_after);
    }
    kiln_ctx_free(ctx);
}

static void
test_unknown_weights(void)
{
    /* without weight values nothing is folded; dead statements and identities still go, and
     * the unread weight is dropped */
    kiln_ctx                   *ctx = kiln_ctx_new(NULL);
    struct kiln_simplify_report rep;
    const double *const        *sw;
    struct kiln_graph          *s = simplify_text(ctx,
                                                  "input x: f32[1, 2, 4, 4]\n"
                                                           "weight w: f32[3, 2, 1, 1]\n"
                                                           "weight g: f32[3]\nweight b: f32[3]\n"
                                                           "weight m: f32[3]\nweight v: f32[3]\n"
                                                           "weight unused: f32[5]\n"
                                                           "c = conv2d(x, w)\n"
                                                           "n = batch_norm(c, g, b, m, v)\n"
                                                           "d = neg(unused)\n"
                                                           "r = reshape(n, shape=[1, 3, 4, 4])\n"
                                                           "y = relu(r)\noutput y\n",
                                                  false, &rep, &sw);
    if (s) {
        CHECK_EQ_INT(0, rep.batch_norms_folded);
        CHECK_EQ_INT(0, rep.constants_folded);
        CHECK_EQ_INT(1, rep.dead_removed);
        CHECK_EQ_INT(1, rep.identities_removed);
        CHECK_EQ_INT(3, s->ncall);
        CHECK_EQ_INT(5, rep.weights_after);
        CHECK_EQ_INT(6, rep.weights_before);
        for (uint32_t i = 0; i < s->narg; i++)
            CHECK(sw[i] == NULL);
        check_simplified(s, false);
    }
    kiln_ctx_free(ctx);
}

static void
test_depthwise_names(void)
{
    /* depthwise conv + bn; the folded weights get fresh names that do not clash with w_bn */
    kiln_ctx                   *ctx = kiln_ctx_new(NULL);
    struct kiln_simplify_report rep;
    const double *const        *sw;
    struct kiln_graph          *s = simplify_text(ctx,
                                                  "input x: f32[2, 4, 5, 5]\n"
                                                           "weight w: f32[4, 1, 3, 3]\n"
                                                           "weight w_bn: f32[5]\n"
                                                           "weight g: f32[4]\nweight b: f32[4]\n"
                                                           "weight m: f32[4]\nweight v: f32[4]\n"
                                                           "c = conv2d(x, w, padding=1, groups=4)\n"
                                                           "n = batch_norm(c, g, b, m, v, eps=1)\n"
                                                           "y = add(n, w_bn)\n"
                                                           "output y\n",
                                                  true, &rep, &sw);
    if (s) {
        CHECK_EQ_INT(1, rep.batch_norms_folded);
        CHECK_EQ_INT(0, count_kind(ctx, s, "batch_norm"));
        CHECK_EQ_INT(1, count_kind(ctx, s, "conv2d"));
        CHECK(kiln_graph_find(s, "w_bn_1") != KILN_NONE);
        CHECK(kiln_graph_find(s, "w") == KILN_NONE); /* the unscaled weight is dropped */
    }
    kiln_ctx_free(ctx);
}

/* A statement whose body folds to a constant (i - i of integers loads nothing) still reads its
 * inputs: it is not taken for a constant to evaluate without them. */
static void
test_folded_body(void)
{
    kiln_ctx                   *ctx = kiln_ctx_new(NULL);
    struct kiln_simplify_report rep;
    const double *const        *sw;
    struct kiln_graph          *s = simplify_text(ctx,
                                                  "input x: f32[2, 3]\n"
                                                           "w[i, j] = x[i, j] * 4.0\n"
                                                           "t = cast(w, dtype=\"i64\")\n"
                                                           "z = sub(t, t)\n"
                                                           "y = add(z, t)\n"
                                                           "output y\n",
                                                  true, &rep, &sw);
    if (s)
        CHECK_EQ_INT(0, rep.constants_folded);
    kiln_ctx_free(ctx);
}

static void
test_errors(void)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL), *other = kiln_ctx_new(NULL);
    struct kiln_graph   *g = PARSE(ctx, "input x: f32[2]\ny = neg(x)\noutput y\n"), *s;
    const double *const *sw;
    if (g) {
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_graph_simplify(other, g, NULL, &s, &sw, NULL));
        CHECK(s == NULL);
        CHECK(strstr(kiln_ctx_error(other)->msg, "another context") != NULL);
        kiln_ctx_error_clear(other);
        uint32_t n = 1;
        CHECK_EQ_INT(KILN_ERR_INVALID, kiln_graph_channels_last(other, g, NULL, &s, &sw, &n));
        CHECK(s == NULL && n == 0);
        CHECK(strstr(kiln_ctx_error(other)->msg, "another context") != NULL);
        /* an output that is an identity copy stays (outputs must be computed) */
        struct kiln_graph *h = PARSE(ctx, "input x: f32[2]\ny = reshape(x, shape=[2])\noutput y\n");
        if (h && kiln_graph_simplify(ctx, h, NULL, &s, &sw, NULL) == KILN_OK)
            CHECK_EQ_INT(1, s->ncall);
    }
    kiln_ctx_free(other);
    kiln_ctx_free(ctx);
}

/* text, simplified, is left as it is by kiln_graph_channels_last. */
static void
expect_nchw(kiln_ctx *ctx, const char *text)
{
    struct kiln_simplify_report rep;
    const double *const        *sw = NULL;
    struct kiln_graph          *s = simplify_text(ctx, text, true, &rep, &sw), *l;
    const double *const        *lw;
    uint32_t                    n = 1;
    if (!s)
        return;
    if (kiln_graph_channels_last(ctx, s, sw, &l, &lw, &n) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "channels_last: %s", kiln_ctx_error(ctx)->msg);
        return;
    }
    CHECK_EQ_INT(0, n);
    CHECK_EQ_INT(s->ncall, l->ncall);
}

/* A residual network's shape: every convolution, pooling and elementwise statement goes
 * channels-last, with one transpose in (the input) and one back (before the flatten); so does
 * a MobileNetV2-like block, depthwise convolution included; a lone convolution stays NCHW. */
static void
test_channels_last(void)
{
    kiln_ctx                   *ctx = kiln_ctx_new(NULL);
    struct kiln_simplify_report rep;
    const double *const        *sw = NULL;
    struct kiln_graph          *s = simplify_text(ctx,
                                                  "input x: f32[1, 3, 9, 9]\n"
                                                           "weight w1: f32[8, 3, 3, 3]\nweight w2: f32[8, 8, 1, 1]\n"
                                                           "weight w3: f32[8, 4, 3, 3]\nweight d: f32[5, 8]\n"
                                                           "weight six: f32[]\nweight zero: f32[]\n"
                                                           "c1 = conv2d(x, w1, stride=2, padding=1)\n"
                                                           "a1 = relu(c1)\n"
                                                           "p1 = max_pool2d(a1, kernel=3, stride=1, padding=1)\n"
                                                           "c2 = conv2d(p1, w2)\n"
                                                           "mx = maximum(c2, zero)\n"
                                                           "m2 = minimum(mx, six)\n"
                                                           "c3 = conv2d(m2, w3, padding=1, groups=2)\n"
                                                           "r = add(c3, p1)\n"
                                                           "g = global_avg_pool2d(r)\n"
                                                           "f = flatten(g)\n"
                                                           "y = dense(f, d)\noutput y\n",
                                                  true, &rep, &sw);
    if (s) {
        /* simplify_text compared s with the original; check_channels_last compares again */
        struct kiln_rng      r = kiln_rng_new(opt_seed() + 11);
        const double *const *w = random_weights(ctx, s, &r);
        struct kiln_graph   *l;
        uint32_t             n = check_channels_last(ctx, s, w, s, w, opt_seed() + 12, &l);
        /* c1 a1 p1 c2 max min c3 r g; the window ops among them with layout="nhwc" */
        CHECK_EQ_INT(9, n);
        if (l) {
            uint32_t nhwc = 0;
            for (uint32_t c = 0; c < l->ncall; c++)
                nhwc += has_attr(ctx, &l->call[c], "layout", "nhwc");
            CHECK_EQ_INT(5, nhwc);
            CHECK_EQ_INT(2, count_kind(ctx, l, "transpose"));
            CHECK_EQ_INT(s->ncall + 2, l->ncall);
        }
    }
    /* a MobileNetV2-like block (pointwise, depthwise, pointwise, residual add) goes
     * channels-last as a whole, depthwise convolution included */
    s = simplify_text(
        ctx,
        "input x: f32[1, 4, 6, 6]\nweight w1: f32[4, 4, 1, 1]\n"
        "weight w2: f32[4, 1, 3, 3]\nweight w3: f32[4, 4, 1, 1]\n"
        "c1 = conv2d(x, w1)\na1 = relu(c1)\nc2 = conv2d(a1, w2, padding=1, groups=4)\n"
        "c3 = conv2d(c2, w3)\ny = add(c3, c1)\noutput y\n",
        true, &rep, &sw);
    if (s) {
        struct kiln_rng      r = kiln_rng_new(opt_seed() + 13);
        const double *const *w = random_weights(ctx, s, &r);
        struct kiln_graph   *l;
        CHECK_EQ_INT(5, check_channels_last(ctx, s, w, s, w, opt_seed() + 14, &l));
        if (l) {
            uint32_t nhwc = 0;
            for (uint32_t c = 0; c < l->ncall; c++)
                nhwc += has_attr(ctx, &l->call[c], "layout", "nhwc");
            CHECK_EQ_INT(3, nhwc);
            CHECK_EQ_INT(2, count_kind(ctx, l, "transpose"));
        }
    }
    expect_nchw(ctx, "input x: f32[1, 4, 6, 6]\nweight w: f32[4, 4, 3, 3]\n"
                     "c = conv2d(x, w, padding=1)\ny = relu(c)\noutput y\n");
    kiln_ctx_free(ctx);
}

/* Number of transposes in g whose input has this rank. */
static uint32_t
count_transposes(kiln_ctx *ctx, const struct kiln_graph *g, uint32_t rank)
{
    uint32_t n = 0;
    for (uint32_t c = 0; c < g->ncall; c++)
        n += !strcmp(kiln_sym_str(ctx, g->call[c].kind), "transpose")
             && g->tensor[g->call[c].in[0]].ndim == rank;
    return n;
}

/* Simplifies text, runs channels-last on it with fresh random weights (check_channels_last:
 * the same outputs, nothing left for a second run); returns the statements converted. */
static uint32_t
channels_last_text(kiln_ctx *ctx, const char *text, uint64_t seed, struct kiln_graph **l)
{
    struct kiln_simplify_report rep;
    const double *const        *sw = NULL;
    struct kiln_graph          *s = simplify_text(ctx, text, true, &rep, &sw);
    *l = NULL;
    if (!s)
        return 0;
    struct kiln_rng      r = kiln_rng_new(seed);
    const double *const *w = random_weights(ctx, s, &r);
    return check_channels_last(ctx, s, w, s, w, seed + 1, l);
}

/* The statements between convolutions go channels-last with their axes renumbered: an
 * Inception-like concat (axis -3), a batch norm after it (axis written out), slices of the
 * channels (axes given, and the default first axes), a channel shuffle (reshape, transpose,
 * reshape: one 5-D transpose of the channel groups), reductions keeping 4 dimensions or
 * reading the same either way (over H and W; over C); a reduction over H alone keeps NCHW and
 * reads its input transposed back. A shuffle whose steps are read elsewhere is left alone. */
static void
test_channels_last_ops(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *l;
    uint32_t           n = channels_last_text(
                  ctx,
                  "input x: f32[1, 4, 8, 8]\nweight wa: f32[4, 4, 1, 1]\nweight wb: f32[4, 4, 3, 3]\n"
                            "weight wc: f32[8, 4, 1, 1]\nweight gm: f32[16]\nweight bt: f32[16]\n"
                            "weight mu: f32[16]\nweight lv: f32[16]\nweight wd: f32[6, 8, 1, 1]\n"
                            "a = conv2d(x, wa)\nb = conv2d(x, wb, padding=1)\n"
                            "p = max_pool2d(x, kernel=3, stride=1, padding=1)\nc = conv2d(p, wc)\n"
                            "cat = concat(a, b, c, axis=-3)\nvar = exp(lv)\n"
                            "nb = batch_norm(cat, gm, bt, mu, var)\nr = relu(nb)\n"
                            "s1 = slice(r, starts=[8], ends=[16], axes=[1])\n"
                            "s2 = slice(r, starts=[0, 0], ends=[1, 8])\n"
                            "sh1 = reshape(s1, shape=[1, 2, 4, 8, 8])\n"
                            "sh2 = transpose(sh1, perm=[0, 2, 1, 3, 4])\n"
                            "sh3 = reshape(sh2, shape=[1, 8, 8, 8])\nm = add(sh3, s2)\nd = conv2d(m, wd)\n"
                            "y1 = reduce_mean(d, axes=[2, 3], keepdims=0)\n"
                            "y2 = reduce_max(d, axes=[1], keepdims=1)\n"
                            "y3 = reduce_sum(d, axes=[2], keepdims=0)\noutput y1\noutput y2\noutput y3\n",
                  opt_seed() + 21, &l);
    /* a b p c cat nb r s1 s2 sh1 sh2 sh3 m d y1 y2; not y3 */
    CHECK_EQ_INT(16, n);
    if (l) {
        /* x in; d back for y3, y2 back as an output; the shuffle's own 5-D transpose */
        CHECK_EQ_INT(3, count_transposes(ctx, l, 4));
        CHECK_EQ_INT(1, count_transposes(ctx, l, 5));
        for (uint32_t c = 0; c < l->ncall; c++) {
            const struct kiln_call *call = &l->call[c];
            if (!strcmp(kiln_sym_str(ctx, call->kind), "concat"))
                CHECK_EQ_INT(3, call->attr[0].i); /* the channels, NHWC */
        }
    }
    /* the shuffle's transpose is also an output: the shuffle stays NCHW, its input transposed
     * back; the convolutions before it stay channels-last */
    n = channels_last_text(
        ctx,
        "input x: f32[1, 4, 6, 6]\nweight wa: f32[4, 4, 1, 1]\nweight wb: f32[4, 4, 1, 1]\n"
        "a = conv2d(x, wa)\nb = conv2d(a, wb)\nsh1 = reshape(b, shape=[1, 2, 2, 6, 6])\n"
        "sh2 = transpose(sh1, perm=[0, 2, 1, 3, 4])\nsh3 = reshape(sh2, shape=[1, 4, 6, 6])\n"
        "output sh2\noutput sh3\n",
        opt_seed() + 23, &l);
    CHECK_EQ_INT(2, n);
    if (l)
        CHECK_EQ_INT(2, count_transposes(ctx, l, 4));
    kiln_ctx_free(ctx);
}

/* ---- Winograd convolutions (kiln_graph_winograd) ---- */

/* One random convolution followed by a relu: 3x3 stride 1 (padding an int, a pair or four
 * sides, NCHW or NHWC, with or without a bias, batch 1 or 2, odd and even output sizes, a
 * quarter of them around 56x56 where F(4x4, 3x3) takes over from 196 tiles), or a
 * variant the pass must leave alone (stride 2, dilation 2, two groups, a 1x1 kernel, weights of
 * unknown value). Rewritten exactly when it has at least 49 output tiles of 2x2, with 4x4 tiles
 * exactly when it has 196 of those; same outputs as the
 * direct convolution (the interpreter computes both in double), nothing left to rewrite after. */
static bool
winograd_case(uint64_t seed)
{
    struct kiln_rng r = kiln_rng_new(seed);
    struct text     t = {0};
    int64_t         n = 1 + pick(&r, 2), c = 1 + pick(&r, 4), k = 1 + pick(&r, 4);
    bool            big = pick(&r, 4) == 0; /* around 56x56: F(4x4, 3x3) from 196 tiles of 4x4 */
    int64_t         h = big ? 52 + pick(&r, 9) : 9 + pick(&r, 10);
    int64_t         w = big ? 52 + pick(&r, 9) : 9 + pick(&r, 10), pad[4];
    bool            nhwc = pick(&r, 2), bias = pick(&r, 2), known = pick(&r, 8) != 0;
    uint32_t        variant = pick(&r, 8), form = pick(&r, 3); /* variants 0..3 are eligible */
    for (int i = 0; i < 4; i++)
        pad[i] = form == 0 ? 1 : pick(&r, 3);
    if (form == 1)
        pad[2] = pad[0], pad[3] = pad[1];
    put(&t, "input x: f32[%lld, %lld, %lld, %lld]\n", (long long)n, (long long)(nhwc ? h : c),
        (long long)(nhwc ? w : h), (long long)(nhwc ? c : w));
    int64_t ks = variant == 7 ? 1 : 3, groups = variant == 6 && c % 2 == 0 && k % 2 == 0 ? 2 : 1;
    put(&t, "weight wt: f32[%lld, %lld, %lld, %lld]\n", (long long)k, (long long)(c / groups),
        (long long)ks, (long long)ks);
    if (bias)
        put(&t, "weight b: f32[%lld]\n", (long long)k);
    put(&t, "c = conv2d(x, wt%s", bias ? ", b" : "");
    if (form == 0)
        put(&t, ", padding=1");
    else if (form == 1)
        put(&t, ", padding=[%lld, %lld]", (long long)pad[0], (long long)pad[1]);
    else
        put(&t, ", padding=[%lld, %lld, %lld, %lld]", (long long)pad[0], (long long)pad[1],
            (long long)pad[2], (long long)pad[3]);
    if (variant == 4)
        put(&t, ", stride=2");
    if (variant == 5)
        put(&t, ", dilation=2");
    if (groups == 2)
        put(&t, ", groups=2");
    put(&t, "%s)\ny = relu(c)\noutput y\n", nhwc ? ", layout=\"nhwc\"" : "");
    int64_t  oh = h + pad[0] + pad[2] - 2, ow = w + pad[1] + pad[3] - 2;
    bool     direct = variant >= 4 && (variant != 6 || groups == 2);
    uint32_t want = !direct && known && n * ((oh + 1) / 2) * ((ow + 1) / 2) >= 49;
    uint32_t want4 = want && n * ((oh + 3) / 4) * ((ow + 3) / 4) >= 196;

    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    int                before = harness_failures;
    struct kiln_graph *g = PARSE(ctx, t.s), *l = NULL, *l2 = NULL;
    if (g) {
        const double *const *wv = known ? random_weights(ctx, g, &r) : NULL;
        const double *const *lw = NULL, *const *lw2 = NULL;
        uint32_t             got = 7, again = 7;
        if (kiln_graph_winograd(ctx, g, wv, &l, &lw, &got) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "winograd: %s", kiln_ctx_error(ctx)->msg);
        } else {
            CHECK_EQ_INT(want, got);
            CHECK_EQ_INT(want, count_kind(ctx, l, "winograd_input"));
            CHECK_EQ_INT(want, count_kind(ctx, l, "batch_matmul"));
            CHECK_EQ_INT(want, count_kind(ctx, l, "winograd_output"));
            CHECK_EQ_INT(!want, count_kind(ctx, l, "conv2d"));
            uint32_t tile4 = 0;
            for (uint32_t i = 0; i < l->ncall; i++)
                for (uint32_t a = 0; a < l->call[i].nattr; a++)
                    tile4 += !strcmp(kiln_sym_str(ctx, l->call[i].attr[a].name), "tile")
                             && l->call[i].attr[a].i == 4;
            CHECK_EQ_INT(2 * want4, tile4); /* winograd_input and winograd_output */
            double err = compare(ctx, g, wv, l, lw, seed + 1);
            if (!(err <= 1e-9))
                harness_fail(__FILE__, __LINE__, "winograd outputs differ by %g", err);
            if (kiln_graph_winograd(ctx, l, lw, &l2, &lw2, &again) == KILN_OK)
                CHECK_EQ_INT(0, again);
            else
                harness_fail(__FILE__, __LINE__, "winograd twice: %s", kiln_ctx_error(ctx)->msg);
        }
    }
    bool ok = harness_failures == before;
    if (!ok)
        fprintf(stderr, "seed %llu, graph:\n%s\n", (unsigned long long)seed, t.s);
    kiln_ctx_free(ctx);
    free(t.s);
    return ok;
}

static void
test_winograd(void)
{
    uint64_t n = opt_iters_or(60);
    for (uint64_t k = 0; k < n; k++)
        if (!winograd_case(opt_seed() * 1000003u + k))
            return;
}

static const struct test tests[] = {
    {"random", test_random},
    {"size_rule", test_size_rule},
    {"unknown_weights", test_unknown_weights},
    {"depthwise_names", test_depthwise_names},
    {"folded_body", test_folded_body},
    {"errors", test_errors},
    {"channels_last", test_channels_last},
    {"channels_last_ops", test_channels_last_ops},
    {"winograd", test_winograd},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
