/* tests/kas/test_kas.c -- kernel architecture search: sizes and the legality solver on hand-made
 * systems, the budget solver against brute force, every primitive's shape rule, FLOP and
 * parameter formulas against the emitted kiln graph (kiln_call_stats) and its semantics against
 * the reference interpreter, seeded batches of sampled kernels (legal for every placeholder,
 * inside budget, distinct, reproducible), known designs reachable by the sampler, and
 * duplicates caught by output fingerprints. */
#include "../../kas/kas.h"
#include "../harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool
is_const(struct kas_mono m)
{
    for (int v = 0; v < KAS_NVAR; v++)
        if (m.e[v])
            return false;
    return m.den == 1;
}

static struct kas_spec
spec_of(int n, const struct kas_placeholder *ph, int stride)
{
    struct kas_spec s;
    kas_spec_default(&s);
    s.nph = (uint32_t)n;
    for (int i = 0; i < n; i++)
        s.ph[i] = ph[i];
    s.stride = stride;
    return s;
}

/* ---- sizes and the legality solver ---- */

static void
test_mono(void)
{
    struct kas_mono c = kas_mono_var(KAS_C), g = kas_mono_var(KAS_G);
    struct kas_mono q =
        kas_mono_div(kas_mono_mul(c, kas_mono_const(6)), kas_mono_mul(g, kas_mono_const(4)));
    CHECK_EQ_INT(3, q.num);
    CHECK_EQ_INT(2, q.den);
    int64_t vals[KAS_NVAR] = {[KAS_C] = 8, [KAS_G] = 2}, v = 0;
    CHECK(kas_mono_eval(q, vals, &v));
    CHECK_EQ_INT(6, v);
    vals[KAS_C] = 6; /* 3*6/(2*2) is not an integer */
    CHECK(!kas_mono_eval(q, vals, &v));
    char buf[64];
    kas_mono_print(q, false, buf, sizeof buf);
    CHECK_EQ_STR("3*C/(2*G)", buf);
    kas_mono_print(kas_mono_div(c, g), true, buf, sizeof buf);
    CHECK_EQ_STR("C//G", buf);
    CHECK(kas_mono_is_one(kas_mono_div(c, c)));
}

static void
test_solver_systems(void)
{
    struct kas_mono   C = kas_mono_var(KAS_C), K = kas_mono_var(KAS_K), G = kas_mono_var(KAS_G);
    struct kas_solver s = {0};
    enum kas_var      x0 = KAS_X0, x1 = KAS_X1;
    CHECK(kas_solver_fresh(&s, &x0) && kas_solver_fresh(&s, &x1));
    struct kas_mono X0 = kas_mono_var(x0), X1 = kas_mono_var(x1);
    /* solvable: x0 * G = x1, then x1 = C  =>  x0 = C / G */
    CHECK(kas_solver_unify(&s, kas_mono_mul(X0, G), X1));
    CHECK(kas_solver_unify(&s, X1, C));
    CHECK(kas_mono_eq(kas_mono_div(C, G), kas_solver_apply(&s, X0)));
    CHECK(kas_mono_eq(C, kas_solver_apply(&s, X1)));
    /* now fixed: x0 = K is unsolvable (C / G = K would need one placeholder's C, K) */
    CHECK(!kas_solver_can_unify(&s, X0, K));
    CHECK(!kas_solver_unify(&s, X0, K));
    /* no unknowns: C = K, G = C and 3 = 5 are unsolvable; C = C holds */
    struct kas_solver e = {0};
    CHECK(!kas_solver_unify(&e, C, K));
    CHECK(!kas_solver_unify(&e, G, C));
    CHECK(!kas_solver_unify(&e, kas_mono_const(3), kas_mono_const(5)));
    CHECK(kas_solver_unify(&e, C, C));
    /* x^2 = C has no monomial solution; x^2 = C^2 G^2 does: x = C G */
    struct kas_solver p = {0};
    enum kas_var      y = KAS_X0;
    CHECK(kas_solver_fresh(&p, &y));
    struct kas_mono Y2 = kas_mono_mul(kas_mono_var(y), kas_mono_var(y));
    CHECK(!kas_solver_unify(&p, Y2, C));
    CHECK(kas_solver_unify(&p, Y2, kas_mono_mul(kas_mono_mul(C, C), kas_mono_mul(G, G))));
    CHECK(kas_mono_eq(kas_mono_mul(C, G), kas_solver_apply(&p, kas_mono_var(y))));
    /* a degenerate solution (x = 1) is refused */
    struct kas_solver q = {0};
    CHECK(kas_solver_fresh(&q, &y));
    CHECK(!kas_solver_unify(&q, kas_mono_mul(kas_mono_var(y), C), C));
    /* only KAS_MAX_UNKNOWN unknowns */
    struct kas_solver f = {0};
    for (int i = 0; i < KAS_MAX_UNKNOWN; i++)
        CHECK(kas_solver_fresh(&f, &y));
    CHECK(!kas_solver_fresh(&f, &y));
}

/* fc C -> x0 (group by G), fc back: a design whose sizes mention G and x0 */
static void
build_fc_pair(struct kas_design *d, bool grouped)
{
    kas_design_init(d, true, 1);
    enum kas_var x0 = KAS_X0;
    kas_solver_fresh(&d->sol, &x0);
    struct kas_node n = {.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = kas_mono_var(x0)};
    int             i = kas_design_add(d, n);
    if (grouped) { /* [x0] -> [G, x0/G] -> fc on dim 1 -> ungroup */
        struct kas_node g = {.prim = KAS_GROUP,
                             .nin = 1,
                             .in = {(uint8_t)i},
                             .p.group.dim = 0,
                             .m = kas_mono_var(KAS_G)};
        i = kas_design_add(d, g);
        struct kas_node f = {.prim = KAS_FC,
                             .nin = 1,
                             .in = {(uint8_t)i},
                             .p.fc.dim = 1,
                             .m = kas_mono_div(kas_mono_var(KAS_C), kas_mono_var(KAS_G))};
        i = kas_design_add(d, f);
        struct kas_node u = {.prim = KAS_UNGROUP, .nin = 1, .in = {(uint8_t)i}, .p.ungroup.dim = 0};
        i = kas_design_add(d, u);
    } else {
        struct kas_node f = {
            .prim = KAS_FC, .nin = 1, .in = {(uint8_t)i}, .p.fc.dim = 0, .m = kas_mono_var(KAS_C)};
        i = kas_design_add(d, f);
    }
    CHECK(i == d->nnode - 1);
}

static void
test_budget_solver(void)
{
    /* params 2 C x0 against 9 C^2: x0 in [0.45 C, 1.35 C] for params in [0.1, 0.3] */
    struct kas_placeholder ph[3] = {{32, 32, 8, 8}, {64, 64, 8, 8}, {96, 96, 4, 4}};
    struct kas_spec        s = spec_of(3, ph, 1);
    s.flops_lo = 0;
    s.flops_hi = 10;
    s.params_lo = 0.1;
    s.params_hi = 0.3;
    struct kas_design d;
    build_fc_pair(&d, false);
    double rf, rp;
    kas_spec_ref_cost(&s, &rf, &rp);
    /* brute force over the candidate values (constants and multiples of C), evaluated here */
    uint32_t        brute = 0, ncand, nrel = 0;
    struct kas_mono cand[64];
    ncand = kas_budget_candidates(&s, &d, KAS_X0, cand, 64);
    CHECK(ncand > 10);
    for (uint32_t k = 0; k < ncand; k++) {
        double p = 0;
        bool   integral = true;
        for (int i = 0; i < 3; i++) {
            double x = (double)cand[k].num / cand[k].den;
            for (int e = 0; e < cand[k].e[KAS_C]; e++)
                x *= (double)ph[i].C;
            integral = integral && x == (double)(int64_t)x && x >= 2;
            p += 2.0 * (double)ph[i].C * x;
        }
        nrel += !is_const(cand[k]);
        brute += integral && p >= 0.1 * rp && p <= 0.3 * rp;
    }
    CHECK(nrel > 0);
    struct kiln_rng rng = kiln_rng_new(opt_seed());
    uint32_t        n = kas_budget_solve(&s, &d, &rng);
    CHECK(n > 0);
    CHECK_EQ_INT(brute, n);
    double f, p, tp = 0;
    for (int i = 0; i < 3; i++) {
        CHECK(kas_design_cost(&d, &ph[i], &f, &p));
        tp += p;
    }
    CHECK(tp >= 0.1 * rp && tp <= 0.3 * rp);
    /* G must divide C/x0 layouts for every placeholder: gcd(48, 80) = 16 allows G in 2..16 */
    struct kas_placeholder ph2[2] = {{48, 48, 8, 8}, {80, 80, 8, 8}};
    struct kas_spec        s2 = spec_of(2, ph2, 1);
    s2.flops_hi = s2.params_hi = 100;
    struct kas_design dg;
    build_fc_pair(&dg, true);
    CHECK(kas_budget_solve(&s2, &dg, &rng) > 0);
    CHECK(is_const(dg.val[KAS_G]) && dg.val[KAS_G].num >= 2 && 16 % dg.val[KAS_G].num == 0);
    for (int i = 0; i < 2; i++)
        CHECK(kas_design_cost(&dg, &ph2[i], &f, &p));
    /* unsatisfiable: C = 50 and 49 share no G; and a range nothing meets */
    struct kas_placeholder ph3[2] = {{50, 50, 8, 8}, {49, 49, 8, 8}};
    struct kas_spec        s3 = spec_of(2, ph3, 1);
    s3.flops_hi = s3.params_hi = 100;
    CHECK_EQ_INT(0, kas_budget_solve(&s3, &dg, &rng));
    s.params_lo = 5;
    s.params_hi = 6;
    CHECK_EQ_INT(0, kas_budget_solve(&s, &d, &rng));
}

/* ---- designs against the kiln graph ---- */

struct wtab {
    double *w[KAS_MAX_NODES];
};

static void
wfn(void *ud, int node, int64_t n, double *dst)
{
    struct wtab *t = ud;
    memcpy(dst, t->w[node], sizeof(double) * (size_t)n);
}

static int64_t stat_prims[KAS_NPRIM];

/* Emits d for ph, checks shapes, per-node FLOPs/params against kiln_call_stats, and the
 * interpreter's output against kas_design_eval on random input and weights. */
static bool
check_against_kiln(const struct kas_design *d, const struct kas_placeholder *ph,
                   struct kiln_rng *rng)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = NULL;
    bool               ok = true;
    char               desc[512];
    kas_design_describe(d, desc, sizeof desc);
    if (kas_emit_graph(ctx, d, ph, 1, &g) != KILN_OK) {
        char            msg[600];
        struct kiln_buf b = {0};
        kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        kiln_ctx_error_clear(ctx);
        kas_emit_kg(ctx, d, ph, 1, &b);
        harness_fail(__FILE__, __LINE__, "emit: %s\n%s", msg, b.data ? b.data : "");
        kiln_ctx_free(ctx);
        return false;
    }
    int64_t vals[KAS_NVAR];
    kas_design_vals(d, ph, vals);
    /* shapes: input [1, C, H, W], output [1, K, H/s, W/s] */
    const struct kiln_tensor *x = &g->tensor[g->arg[0]], *y = &g->tensor[g->output[0]];
    int64_t                   K = vals[KAS_K];
    if (x->ndim != 4 || x->shape[1] != ph->C || x->shape[2] != ph->H || y->ndim != 4
        || y->shape[1] != K || y->shape[2] != ph->H / d->stride
        || y->shape[3] != ph->W / d->stride) {
        harness_fail(__FILE__, __LINE__, "shapes of %s wrong", desc);
        ok = false;
    }
    if (g->ncall != (uint32_t)d->nnode - 1) {
        harness_fail(__FILE__, __LINE__, "%u statements for %d nodes", g->ncall, d->nnode - 1);
        ok = false;
    }
    for (int i = 1; ok && i < d->nnode; i++) {
        struct kiln_stats st;
        double            f, p;
        kiln_call_stats(g, (uint32_t)i - 1, &st);
        if (!kas_node_cost(d, i, vals, ph->H, ph->W, &f, &p) || f != st.flops || p != st.params) {
            harness_fail(__FILE__, __LINE__,
                         "node %d (%s) of %s: formula flops %.0f params %.0f, "
                         "kiln %.0f %.0f",
                         i, kas_prims[d->node[i].prim].name, desc, f, p, st.flops, st.params);
            ok = false;
        }
        stat_prims[d->node[i].prim]++;
    }
    /* values */
    uint32_t    na = g->narg;
    double    **args = calloc(na + 1, sizeof *args);
    struct wtab wt = {{0}};
    int64_t     nout = kiln_tensor_numel(y);
    double     *out = malloc(sizeof(double) * (size_t)nout);
    double     *ref = malloc(sizeof(double) * (size_t)nout);
    for (uint32_t a = 0; ok && a < na; a++) {
        const struct kiln_tensor *t = &g->tensor[g->arg[a]];
        int64_t                   n = kiln_tensor_numel(t);
        args[a] = malloc(sizeof(double) * (size_t)n);
        for (int64_t k = 0; k < n; k++) /* f32-representable values */
            args[a][k] = (double)(float)(2 * kiln_rng_uniform(rng) - 1);
        if (a) {
            int node = atoi(kiln_graph_tensor_name(g, g->arg[a]) + 1);
            wt.w[node] = args[a];
        }
    }
    if (ok) {
        double *outs[1] = {out};
        if (kiln_graph_eval(ctx, g, (const double *const *)args, outs) != KILN_OK) {
            char msg[600];
            kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
            harness_fail(__FILE__, __LINE__, "eval of %s: %s", desc, msg);
            ok = false;
        } else if (!kas_design_eval(d, vals, ph->H, ph->W, args[0], wfn, &wt, ref)) {
            harness_fail(__FILE__, __LINE__, "kas eval of %s failed", desc);
            ok = false;
        }
        for (int64_t k = 0; ok && k < nout; k++) {
            double a = out[k], b = ref[k];
            if (!(fabs(a - b) <= 1e-9 * (1 + fabs(b))) && !(isnan(a) && isnan(b))
                && !(isinf(a) && a == b)) {
                harness_fail(__FILE__, __LINE__, "%s: output %lld kiln %.17g kas %.17g", desc,
                             (long long)k, a, b);
                ok = false;
            }
        }
    }
    if (!ok) {
        struct kiln_buf b = {0};
        kas_emit_kg(ctx, d, ph, 1, &b);
        fprintf(stderr, "%s", b.data ? b.data : "");
    }
    for (uint32_t a = 0; a < na; a++)
        free(args[a]);
    free(args);
    free(out);
    free(ref);
    kiln_ctx_free(ctx);
    return ok;
}

/* One design per primitive kind and attribute variant, closed by the sampler's own closing
 * procedure, checked against kiln. */
static void
test_primitives_against_kiln(void)
{
    struct kas_placeholder ph = {8, 12, 6, 6};
    struct kas_spec        s = spec_of(1, &ph, 2);
    struct kiln_rng        rng = kiln_rng_new(opt_seed());
    memset(stat_prims, 0, sizeof stat_prims);
    struct kas_node script[][3] = {
        {{.prim = KAS_UNFOLD,
          .nin = 1,
          .p.unfold.axes = 3,
          .p.unfold.k = 3,
          .p.unfold.dilation = 1}},
        {{.prim = KAS_UNFOLD,
          .nin = 1,
          .p.unfold.axes = 1,
          .p.unfold.k = 5,
          .p.unfold.dilation = 2}},
        {{.prim = KAS_UNFOLD,
          .nin = 1,
          .p.unfold.axes = 2,
          .p.unfold.k = 7,
          .p.unfold.dilation = 3}},
        {{.prim = KAS_SHIFT, .nin = 1, .p.shift.axis = 0, .p.shift.offset = 1},
         {.prim = KAS_SHIFT, .nin = 1, .in = {1}, .p.shift.axis = 1, .p.shift.offset = -1}},
        {{.prim = KAS_GROUP, .nin = 1, .p.group.dim = 0, .m = kas_mono_var(KAS_G)},
         {.prim = KAS_SCALE, .nin = 1, .in = {1}, .p.scale.mask = 2},
         {.prim = KAS_UNGROUP, .nin = 1, .in = {2}, .p.ungroup.dim = 0}},
        {{.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = kas_mono_var(KAS_X0)}},
        {{.prim = KAS_GROUP, .nin = 1, .p.group.dim = 0, .m = kas_mono_var(KAS_G)},
         {.prim = KAS_UNFOLD,
          .nin = 1,
          .in = {1},
          .p.unfold.axes = 2,
          .p.unfold.k = 3,
          .p.unfold.dilation = 1},
         {.prim = KAS_SCALE, .nin = 1, .in = {2}, .p.scale.mask = 5}},
        {{.prim = KAS_CONV,
          .nin = 1,
          .p.conv.kind = 0,
          .p.conv.kh = 3,
          .p.conv.kw = 3,
          .m = kas_mono_var(KAS_K)}},
        {{.prim = KAS_CONV,
          .nin = 1,
          .p.conv.kind = 1,
          .p.conv.kh = 1,
          .p.conv.kw = 5,
          .m = kas_mono_var(KAS_K)}},
        {{.prim = KAS_CONV, .nin = 1, .p.conv.kind = 2, .p.conv.kh = 5, .p.conv.kw = 1}},
        {{.prim = KAS_UNFOLD,
          .nin = 1,
          .p.unfold.axes = 3,
          .p.unfold.k = 3,
          .p.unfold.dilation = 1},
         {.prim = KAS_MIX,
          .nin = 1,
          .in = {1},
          .p.mix.i = 0,
          .p.mix.j = 2,
          .m = kas_mono_var(KAS_X0)}},
        {{.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = kas_mono_var(KAS_X0)},
         {.prim = KAS_GRAM, .nin = 2, .in = {1, 0}},
         {.prim = KAS_APPLY, .nin = 2, .in = {2, 0}}},
        {{.prim = KAS_GRAM, .nin = 2, .in = {0, 0}},
         {.prim = KAS_APPLY, .nin = 2, .in = {1, 1}},
         {.prim = KAS_SOFTMAX, .nin = 1, .in = {2}, .p.softmax.dim = 0}},
        {{.prim = KAS_UNARY, .nin = 1, .p.unary.op = KAS_TANH},
         {.prim = KAS_BINARY, .nin = 2, .in = {1, 0}, .p.binary.op = KAS_SUB}},
        {{.prim = KAS_FOLD, .nin = 1, .p.fold.dim = KAS_DIM_SPATIAL, .p.fold.op = KAS_FOLD_MEAN},
         {.prim = KAS_UNARY, .nin = 1, .in = {1}, .p.unary.op = KAS_SIGMOID},
         {.prim = KAS_BINARY, .nin = 2, .in = {0, 2}, .p.binary.op = KAS_MUL}},
        {{.prim = KAS_UNFOLD,
          .nin = 1,
          .p.unfold.axes = 1,
          .p.unfold.k = 3,
          .p.unfold.dilation = 1},
         {.prim = KAS_SOFTMAX, .nin = 1, .in = {1}, .p.softmax.dim = 1},
         {.prim = KAS_FOLD, .nin = 1, .in = {2}, .p.fold.dim = 1, .p.fold.op = KAS_FOLD_MAX}},
        {{.prim = KAS_POOL, .nin = 1, .p.pool.kind = 0, .p.pool.k = 3},
         {.prim = KAS_POOL, .nin = 1, .in = {1}, .p.pool.kind = 1, .p.pool.k = 5}},
        {{.prim = KAS_DOWNSAMPLE, .nin = 1, .p.downsample.factor = 2}},
        {{.prim = KAS_UNFOLD,
          .nin = 1,
          .p.unfold.axes = 3,
          .p.unfold.k = 3,
          .p.unfold.dilation = 1},
         {.prim = KAS_FOLD, .nin = 1, .in = {1}, .p.fold.dim = 1, .p.fold.op = KAS_FOLD_MEAN},
         {.prim = KAS_FOLD, .nin = 1, .in = {2}, .p.fold.dim = 1, .p.fold.op = KAS_FOLD_SUM}},

        /* a scale over all five dims of a twice-unfolded tensor: a weight of rank 5 */
        {{.prim = KAS_UNFOLD,
          .nin = 1,
          .p.unfold.axes = 3,
          .p.unfold.k = 3,
          .p.unfold.dilation = 3},
         {.prim = KAS_UNFOLD,
          .nin = 1,
          .in = {1},
          .p.unfold.axes = 3,
          .p.unfold.k = 3,
          .p.unfold.dilation = 1},
         {.prim = KAS_SCALE, .nin = 1, .in = {2}, .p.scale.mask = 31}},
    };
    int nscript = (int)KILN_COUNTOF(script);
    for (int c = 0; c < nscript; c++) {
        int n = 0;
        while (n < 3 && script[c][n].prim)
            n++;
        struct kas_design d;
        if (!kas_grow_script(&s, script[c], n, &d)) {
            harness_fail(__FILE__, __LINE__, "script %d refused", c);
            continue;
        }
        s.flops_hi = s.params_hi = 1e9; /* any size */
        s.flops_lo = s.params_lo = 0;
        if (!kas_budget_solve(&s, &d, NULL)) {
            char desc[512];
            kas_design_describe(&d, desc, sizeof desc);
            harness_fail(__FILE__, __LINE__, "script %d: no sizes for %s", c, desc);
            continue;
        }
        check_against_kiln(&d, &ph, &rng);
    }
    /* every unary op and binary op */
    for (int u = 0; u < KAS_NUNOP + KAS_NBINOP; u++) {
        struct kas_node sc[2] = {
            {.prim = KAS_CONV, .nin = 1, .p.conv.kind = 2, .p.conv.kh = 3, .p.conv.kw = 3}};
        if (u < KAS_NUNOP)
            sc[1] =
                (struct kas_node){.prim = KAS_UNARY, .nin = 1, .in = {1}, .p.unary.op = (int8_t)u};
        else
            sc[1] = (struct kas_node){
                .prim = KAS_BINARY, .nin = 2, .in = {1, 0}, .p.binary.op = (int8_t)(u - KAS_NUNOP)};
        struct kas_design d;
        CHECK(kas_grow_script(&s, sc, 2, &d));
        CHECK(kas_budget_solve(&s, &d, NULL) > 0);
        check_against_kiln(&d, &ph, &rng);
    }
    for (int p = 1; p < KAS_NPRIM; p++)
        if (!stat_prims[p])
            harness_fail(__FILE__, __LINE__, "primitive %s not covered", kas_prims[p].name);
}

static const struct kas_placeholder net[3] = {{16, 16, 8, 8}, {32, 32, 4, 4}, {48, 48, 6, 6}};

/* A seeded batch: every kernel legal for every placeholder (the kiln graph builds with the
 * right shapes), inside the budget by kiln's own counts, distinct, matching the interpreter. */
static void
test_sampled_batch(void)
{
    struct kas_spec s = spec_of(3, net, 1);
    s.flops_lo = 0.05;
    s.flops_hi = 0.8;
    s.params_hi = 0.8;
    uint64_t            n = opt_iters_or(2000);
    kiln_ctx           *sctx = kiln_ctx_new(NULL);
    struct kas_sampler *sm = kas_sampler_new(sctx, &s, opt_seed());
    struct kiln_rng     rng = kiln_rng_new(opt_seed() + 1);
    double              rf, rp;
    kas_spec_ref_cost(&s, &rf, &rp);
    memset(stat_prims, 0, sizeof stat_prims);
    uint64_t *seen = calloc(n, sizeof *seen), got = 0, failed = 0;
    for (uint64_t i = 0; i < n && failed < 5; i++) {
        struct kas_design d;
        if (!kas_sampler_next(sm, &d, 1000)) {
            harness_fail(__FILE__, __LINE__, "sampler stalled after %llu", (unsigned long long)i);
            break;
        }
        for (uint64_t j = 0; j < got; j++)
            if (seen[j] == d.hash) {
                harness_fail(__FILE__, __LINE__, "hash repeated");
                failed++;
            }
        seen[got++] = d.hash;
        CHECK(kas_design_filter(&s, &d));
        CHECK(kas_design_rf(&d) >= s.min_rf);
        for (int k = 0; k + 1 < d.nnode; k++) /* no dead branches: everything feeds y */
            CHECK(d.node[k].nuse > 0);
        CHECK(d.node[d.nnode - 1].nuse == 0);
        double tf = 0, tp = 0;
        for (uint32_t p = 0; p < s.nph; p++) {
            /* kiln's own counts of the emitted graph, summed */
            kiln_ctx          *ctx = kiln_ctx_new(NULL);
            struct kiln_graph *g;
            if (kas_emit_graph(ctx, &d, &s.ph[p], 1, &g) != KILN_OK) {
                char msg[600];
                kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
                harness_fail(__FILE__, __LINE__, "kernel %llu placeholder %u: %s",
                             (unsigned long long)i, p, msg);
                failed++;
                kiln_ctx_free(ctx);
                continue;
            }
            for (uint32_t c = 0; c < g->ncall; c++) {
                struct kiln_stats st;
                kiln_call_stats(g, c, &st);
                tf += st.flops;
                tp += st.params;
            }
            const struct kiln_tensor *y = &g->tensor[g->output[0]];
            CHECK(y->shape[1] == s.ph[p].K && y->shape[2] == s.ph[p].H && y->shape[3] == s.ph[p].W);
            kiln_ctx_free(ctx);
        }
        if (!(tf >= s.flops_lo * rf * (1 - 1e-12) && tf <= s.flops_hi * rf * (1 + 1e-12)
              && tp <= s.params_hi * rp * (1 + 1e-12))) {
            harness_fail(__FILE__, __LINE__, "kernel %llu out of budget: flops %.3f params %.3f",
                         (unsigned long long)i, tf / rf, tp / rp);
            failed++;
        }
        if (i % 10 == 0) /* semantics and per-primitive counts on a sample */
            failed += !check_against_kiln(&d, &s.ph[i % s.nph], &rng);
    }
    const struct kas_stats *st = kas_sampler_stats(sm);
    printf("  %llu kernels from %llu grown: %llu illegal, %llu filtered, %llu over budget, "
           "%llu duplicate hashes, %llu duplicate fingerprints\n",
           (unsigned long long)st->accepted, (unsigned long long)st->attempts,
           (unsigned long long)st->illegal, (unsigned long long)st->filtered,
           (unsigned long long)st->over_budget, (unsigned long long)st->dup_hash,
           (unsigned long long)st->dup_fp);
    /* growth is constructive: closing (almost) never fails */
    CHECK(st->illegal * 100 <= st->attempts);
    free(seen);
    kas_sampler_free(sm);
    kiln_ctx_free(sctx);
}

static void
test_reproducible(void)
{
    struct kas_spec     s = spec_of(3, net, 1);
    kiln_ctx           *sctx = kiln_ctx_new(NULL);
    struct kas_sampler *a = kas_sampler_new(sctx, &s, opt_seed()),
                       *b = kas_sampler_new(sctx, &s, opt_seed());
    struct kas_sampler *c = kas_sampler_new(sctx, &s, opt_seed() + 1);
    int                 same_c = 0;
    for (int i = 0; i < 50; i++) {
        struct kas_design da, db, dc;
        CHECK(kas_sampler_next(a, &da, 1000) && kas_sampler_next(b, &db, 1000));
        CHECK(kas_sampler_next(c, &dc, 1000));
        CHECK(da.hash == db.hash && da.fingerprint == db.fingerprint);
        for (int v = 0; v < KAS_NVAR; v++)
            CHECK(kas_mono_eq(da.val[v], db.val[v]));
        same_c += da.hash == dc.hash;
    }
    CHECK(same_c < 50);
    kas_sampler_free(a);
    kas_sampler_free(b);
    kas_sampler_free(c);
    kiln_ctx_free(sctx);
}

/* A large minimum receptive field is met by construction: nothing is filtered afterwards. */
static void
test_receptive_field(void)
{
    struct kas_placeholder ph[2] = {{8, 16, 8, 8}, {24, 8, 4, 4}};
    struct kas_spec        s = spec_of(2, ph, 2);
    s.min_rf = 13;
    s.max_ops = 10;
    s.flops_hi = s.params_hi = 100;
    kiln_ctx           *sctx = kiln_ctx_new(NULL);
    struct kas_sampler *sm = kas_sampler_new(sctx, &s, opt_seed());
    struct kiln_rng     rng = kiln_rng_new(opt_seed());
    uint64_t            n = opt_iters_or(2000) / 10 + 5;
    for (uint64_t i = 0; i < n; i++) {
        struct kas_design d;
        if (!kas_sampler_next(sm, &d, 1000)) {
            harness_fail(__FILE__, __LINE__, "sampler stalled");
            break;
        }
        CHECK(kas_design_rf(&d) >= 13);
        if (i % 10 == 0)
            check_against_kiln(&d, &ph[i / 10 % 2], &rng);
    }
    CHECK_EQ_INT(0, kas_sampler_stats(sm)->filtered);
    kas_sampler_free(sm);
    kiln_ctx_free(sctx);
}

/* ---- known designs are in the space ---- */

static void
check_known(const char *name, const struct kas_spec *s, const struct kas_node *script, int n,
            const struct kas_design *hand, struct kiln_rng *rng)
{
    struct kas_design d, h = *hand;
    if (!kas_grow_script(s, script, n, &d)) {
        harness_fail(__FILE__, __LINE__, "%s: the sampler refuses a step", name);
        return;
    }
    if (kas_design_hash(&d) != kas_design_hash(&h)) {
        char a[512], b[512];
        kas_design_describe(&d, a, sizeof a);
        kas_design_describe(&h, b, sizeof b);
        harness_fail(__FILE__, __LINE__, "%s: sampler %s\n  hand %s", name, a, b);
        return;
    }
    CHECK(kas_design_filter(s, &d));
    if (!kas_budget_solve(s, &d, rng)) {
        harness_fail(__FILE__, __LINE__, "%s: outside the budget", name);
        return;
    }
    for (uint32_t p = 0; p < s->nph; p++)
        check_against_kiln(&d, &s->ph[p], rng);
}

static void
test_known_designs(void)
{
    struct kas_placeholder ph[2] = {{32, 64, 8, 8}, {64, 128, 4, 4}};
    struct kas_spec        s = spec_of(2, ph, 1);
    s.flops_lo = 0;
    s.flops_hi = s.params_hi = 1.0;
    struct kiln_rng   rng = kiln_rng_new(opt_seed());
    struct kas_mono   K = kas_mono_var(KAS_K), X0 = kas_mono_var(KAS_X0);
    struct kas_design h;
    enum kas_var      x0 = KAS_X0;

    /* depthwise-separable: depthwise 3x3, then 1x1 C -> K */
    struct kas_node dws[] = {
        {.prim = KAS_CONV, .nin = 1, .p.conv.kind = 2, .p.conv.kh = 3, .p.conv.kw = 3},
        {.prim = KAS_FC, .nin = 1, .in = {1}, .p.fc.dim = 0, .m = K}};
    kas_design_init(&h, false, 1);
    kas_design_add(&h, dws[0]);
    kas_design_add(&h, dws[1]);
    check_known("depthwise-separable", &s, dws, 2, &h, &rng);

    /* grouped: 3x3 convolution with G groups, C -> K */
    struct kas_node grp[] = {
        {.prim = KAS_CONV, .nin = 1, .p.conv.kind = 1, .p.conv.kh = 3, .p.conv.kw = 3, .m = K}};
    kas_design_init(&h, false, 1);
    kas_design_add(&h, grp[0]);
    check_known("grouped", &s, grp, 1, &h, &rng);

    /* bottleneck: 1x1 C -> x0, relu, 3x3 x0 -> x0, relu, 1x1 x0 -> K */
    struct kas_node bot[] = {{.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = X0},
                             {.prim = KAS_UNARY, .nin = 1, .in = {1}, .p.unary.op = KAS_RELU},
                             {.prim = KAS_CONV,
                              .nin = 1,
                              .in = {2},
                              .p.conv.kind = 0,
                              .p.conv.kh = 3,
                              .p.conv.kw = 3,
                              .m = X0},
                             {.prim = KAS_UNARY, .nin = 1, .in = {3}, .p.unary.op = KAS_RELU},
                             {.prim = KAS_FC, .nin = 1, .in = {4}, .p.fc.dim = 0, .m = K}};
    kas_design_init(&h, false, 1);
    kas_solver_fresh(&h.sol, &x0);
    for (int i = 0; i < 5; i++)
        kas_design_add(&h, bot[i]);
    check_known("bottleneck", &s, bot, 5, &h, &rng);

    /* attention-like, data x data: q = fc(x), k = fc(x), v = 3x3 unfold-mixed x;
     * A = softmax(gram(q, k)) over the key axis, y = apply(A, v) */
    struct kas_node att2[] = {
        {.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = X0},                   /* 1 q [x0] */
        {.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = kas_mono_var(KAS_X1)}, /* 2 k [x1] */
        {.prim = KAS_GRAM, .nin = 2, .in = {1, 2}},                           /* 3 [x0, x1] */
        {.prim = KAS_SOFTMAX, .nin = 1, .in = {3}, .p.softmax.dim = 1},       /* 4 */
        {.prim = KAS_CONV,
         .nin = 1,
         .p.conv.kind = 0,
         .p.conv.kh = 3,
         .p.conv.kw = 3,
         .m = kas_mono_var(KAS_X2)},                                  /* 5 v */
        {.prim = KAS_APPLY, .nin = 2, .in = {4, 5}},                  /* 6 [x0] (x2 = x1) */
        {.prim = KAS_FC, .nin = 1, .in = {6}, .p.fc.dim = 0, .m = K}, /* 7 [K] */
    };
    kas_design_init(&h, false, 1);
    for (int i = 0; i < 3; i++)
        kas_solver_fresh(&h.sol, &x0);
    for (int i = 0; i < 7; i++)
        CHECK(kas_design_add(&h, att2[i]) == i + 1);
    check_known("attention-like", &s, att2, 7, &h, &rng);

    /* and random growth reaches the small designs on its own (depthwise-separable, grouped,
     * and the bottleneck without its relus) */
    struct kas_spec s1 = s;
    s1.max_ops = 3;
    struct kas_design want[3];
    kas_design_init(&want[0], false, 1);
    kas_design_add(&want[0], dws[0]);
    kas_design_add(&want[0], dws[1]);
    kas_design_init(&want[1], false, 1);
    kas_design_add(&want[1], grp[0]);
    struct kas_node bot3[] = {{.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = X0},
                              {.prim = KAS_CONV,
                               .nin = 1,
                               .in = {1},
                               .p.conv.kind = 0,
                               .p.conv.kh = 3,
                               .p.conv.kw = 3,
                               .m = X0},
                              {.prim = KAS_FC, .nin = 1, .in = {2}, .p.fc.dim = 0, .m = K}};
    kas_design_init(&want[2], false, 1);
    kas_solver_fresh(&want[2].sol, &x0);
    for (int i = 0; i < 3; i++)
        kas_design_add(&want[2], bot3[i]);
    static const char *const wname[3] = {"depthwise-separable", "grouped", "bottleneck"};
    for (int k = 0; k < 3; k++) {
        uint64_t        wh = kas_design_hash(&want[k]), found = 0;
        struct kiln_rng r2 = kiln_rng_new(opt_seed() + (uint64_t)k);
        for (uint64_t tries = 0; tries < 500000 && !found; tries++) {
            struct kas_design d;
            if (kas_grow(&s1, &r2, &d) && kas_design_hash(&d) == wh)
                found = tries + 1;
        }
        printf("  %s found by random growth after %llu designs\n", wname[k],
               (unsigned long long)found);
        if (!found)
            harness_fail(__FILE__, __LINE__, "%s not found by random growth", wname[k]);
    }
}

/* Structurally different, functionally equal designs share a fingerprint; others do not. */
static void
test_fingerprint_duplicates(void)
{
    struct kas_placeholder ph = {16, 16, 8, 8};
    struct kas_spec        s = spec_of(1, &ph, 1);
    /* fold the two window dims in either order / after merging them: the same sum */
    struct kas_node a[] = {
        {.prim = KAS_UNFOLD, .nin = 1, .p.unfold.axes = 3, .p.unfold.k = 3, .p.unfold.dilation = 1},
        {.prim = KAS_FOLD, .nin = 1, .in = {1}, .p.fold.dim = 2, .p.fold.op = KAS_FOLD_SUM},
        {.prim = KAS_FOLD, .nin = 1, .in = {2}, .p.fold.dim = 1, .p.fold.op = KAS_FOLD_SUM},
        {.prim = KAS_FC, .nin = 1, .in = {3}, .p.fc.dim = 0, .m = kas_mono_var(KAS_C)}};
    struct kas_node b[] = {
        {.prim = KAS_UNFOLD, .nin = 1, .p.unfold.axes = 3, .p.unfold.k = 3, .p.unfold.dilation = 1},
        {.prim = KAS_UNGROUP, .nin = 1, .in = {1}, .p.ungroup.dim = 1},
        {.prim = KAS_FOLD, .nin = 1, .in = {2}, .p.fold.dim = 1, .p.fold.op = KAS_FOLD_SUM},
        {.prim = KAS_FC, .nin = 1, .in = {3}, .p.fc.dim = 0, .m = kas_mono_var(KAS_C)}};
    struct kas_node c[] = {
        {.prim = KAS_UNFOLD, .nin = 1, .p.unfold.axes = 3, .p.unfold.k = 3, .p.unfold.dilation = 1},
        {.prim = KAS_UNGROUP, .nin = 1, .in = {1}, .p.ungroup.dim = 1},
        {.prim = KAS_FOLD, .nin = 1, .in = {2}, .p.fold.dim = 1, .p.fold.op = KAS_FOLD_MAX},
        {.prim = KAS_FC, .nin = 1, .in = {3}, .p.fc.dim = 0, .m = kas_mono_var(KAS_C)}};
    struct kas_design da, db, dc;
    CHECK(kas_grow_script(&s, a, 4, &da) && kas_grow_script(&s, b, 4, &db)
          && kas_grow_script(&s, c, 4, &dc));
    CHECK(kas_design_hash(&da) != kas_design_hash(&db));
    uint64_t fa = kas_design_fingerprint(&da), fb = kas_design_fingerprint(&db);
    uint64_t fc = kas_design_fingerprint(&dc);
    CHECK(fa != 0 && fa == fb);
    CHECK(fc != 0 && fc != fa);
}

/* The canonical hash does not depend on the order branches were grown in nor on the names
 * of the unknowns; it does depend on the structure. */
static void
test_canonical_hash(void)
{
    struct kas_placeholder ph = {16, 24, 8, 8};
    struct kas_spec        s = spec_of(1, &ph, 1);
    struct kas_mono X0 = kas_mono_var(KAS_X0), X1 = kas_mono_var(KAS_X1), X2 = kas_mono_var(KAS_X2);
    /* y = softmax(gram(q, k)) applied to v, q, k, v fc's of x; the query is grown first in a,
     * second in b, so the size left free is x1 in a and x0 in b */
    struct kas_node a[] = {{.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = X0},
                           {.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = X1},
                           {.prim = KAS_GRAM, .nin = 2, .in = {1, 2}},
                           {.prim = KAS_SOFTMAX, .nin = 1, .in = {3}, .p.softmax.dim = 1},
                           {.prim = KAS_FC, .nin = 1, .p.fc.dim = 0, .m = X2},
                           {.prim = KAS_APPLY, .nin = 2, .in = {4, 5}}};
    struct kas_node b[6], c[6];
    memcpy(b, a, sizeof a);
    b[2].in[0] = 2;
    b[2].in[1] = 1;
    memcpy(c, a, sizeof a);
    c[3].p.softmax.dim = 0; /* softmax over the other axis: a different design */
    struct kas_design da, db, dc;
    CHECK(kas_grow_script(&s, a, 6, &da) && kas_grow_script(&s, b, 6, &db)
          && kas_grow_script(&s, c, 6, &dc));
    CHECK(!kas_mono_eq(da.node[3].out.d[1], db.node[3].out.d[1]));
    CHECK_EQ_INT(kas_design_hash(&da), kas_design_hash(&db));
    CHECK(kas_design_hash(&da) != kas_design_hash(&dc));
}

static void
test_spec_errors(void)
{
    kiln_ctx              *ctx = kiln_ctx_new(NULL);
    struct kas_placeholder ph = {16, 16, 7, 8};
    struct kas_spec        s = spec_of(1, &ph, 2);
    CHECK(kas_spec_check(ctx, &s) == KILN_ERR_INVALID);
    CHECK(strstr(kiln_ctx_error(ctx)->msg, "divisible by stride 2") != NULL);
    kiln_ctx_error_clear(ctx);
    s.stride = 1;
    s.flops_lo = 2;
    s.flops_hi = 1;
    CHECK(kas_spec_check(ctx, &s) == KILN_ERR_INVALID);
    kiln_ctx_error_clear(ctx);
    s.flops_lo = 0;
    CHECK(kas_spec_check(ctx, &s) == KILN_OK);
    s.nph = 0;
    CHECK(kas_spec_check(ctx, &s) == KILN_ERR_INVALID);
    kiln_ctx_free(ctx);
}

/* Reads a whole file into a malloc'ed string (NULL if it cannot). */
static char *
read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char  *t = NULL;
    size_t n = 0, cap = 0, got;
    char   chunk[4096];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (n + got + 1 > cap) {
            cap = 2 * (n + got + 1);
            char *nt = realloc(t, cap);
            if (!nt) {
                free(t);
                fclose(f);
                return NULL;
            }
            t = nt;
        }
        memcpy(t + n, chunk, got);
        n += got;
    }
    fclose(f);
    if (t)
        t[n] = 0;
    return t;
}

/* The public API gives what the internal sampler and emitters give for the same spec and seed,
 * and writes the same texts to its directory; its errors. */
static void
test_public_api(void)
{
    kiln_ctx                   *ctx = kiln_ctx_new(NULL);
    struct kiln_kas_placeholder ph[2] = {{8, 12, 8, 8}, {16, 24, 4, 4}};
    struct kiln_kas_params      p;
    kiln_kas_params_default(&p);
    p.placeholders = ph;
    p.nplaceholders = 2;
    p.seed = 4;
    p.flops_lo = 0.1;
    p.flops_hi = 0.8;
    char dir[] = "/tmp/kiln_test_kas_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    p.out_dir = dir;
    struct kiln_kas_sampler *api;
    CHECK(kiln_kas_sampler_new(ctx, &p, &api) == KILN_OK);

    struct kas_spec s;
    kas_spec_default(&s);
    s.nph = 2;
    for (int j = 0; j < 2; j++)
        s.ph[j] = (struct kas_placeholder){ph[j].c, ph[j].k, ph[j].h, ph[j].w};
    s.flops_lo = 0.1;
    s.flops_hi = 0.8;
    struct kas_sampler *sm = kas_sampler_new(ctx, &s, 4);
    double              rf, rp;
    kas_spec_ref_cost(&s, &rf, &rp);
    for (uint64_t n = 1; n <= 6; n++) {
        struct kiln_kas_kernel k;
        struct kas_design      d;
        CHECK(kiln_kas_sampler_next(api, &k) == KILN_OK);
        CHECK(kas_sampler_next(sm, &d, 100000));
        CHECK_EQ_INT(k.index, n);
        CHECK_EQ_INT(k.hash, d.hash);
        CHECK_EQ_INT(k.ops, d.nnode - 1);
        double f = 0, pr = 0;
        for (int j = 0; j < 2; j++) {
            double fj, pj;
            kas_design_cost(&d, &s.ph[j], &fj, &pj);
            f += fj;
            pr += pj;
        }
        CHECK(k.flops == f / rf && k.params == pr / rp);
        char line[1024];
        kas_design_describe(&d, line, sizeof line);
        CHECK(!strcmp(k.design, line));
        kas_design_values(&d, false, line, sizeof line);
        CHECK(!strcmp(k.values, line));
        struct kiln_buf b = {0};
        CHECK(kas_emit_py(ctx, &d, "Kernel", &b) == KILN_OK);
        CHECK(!strcmp(k.py, b.data));
        char *file = read_all(k.py_path);
        CHECK(file && !strcmp(file, b.data));
        free(file);
        remove(k.py_path);
        for (int j = 0; j < 2; j++) {
            struct kiln_buf kb = {0};
            CHECK(kas_emit_kg(ctx, &d, &s.ph[j], 1, &kb) == KILN_OK);
            CHECK(!strcmp(k.kg[j], kb.data));
            file = read_all(k.kg_paths[j]);
            CHECK(file && !strcmp(file, kb.data));
            free(file);
            remove(k.kg_paths[j]);
        }
    }
    struct kiln_kas_stats st;
    kiln_kas_sampler_stats(api, &st);
    CHECK_EQ_INT(st.accepted, 6);
    CHECK_EQ_INT(st.attempts, kas_sampler_stats(sm)->attempts);
    kas_sampler_free(sm);
    kiln_kas_sampler_free(api);
    remove(dir);

    /* refused parameters, and a budget nothing fits */
    p.out_dir = NULL;
    p.stride = 3;
    CHECK(kiln_kas_sampler_new(ctx, &p, &api) == KILN_ERR_INVALID && api == NULL);
    kiln_ctx_error_clear(ctx);
    p.stride = 1;
    p.nplaceholders = 0;
    CHECK(kiln_kas_sampler_new(ctx, &p, &api) == KILN_ERR_INVALID);
    kiln_ctx_error_clear(ctx);
    p.nplaceholders = 1;
    p.flops_lo = 0;
    p.flops_hi = 1e-6;
    p.max_tries = 200;
    CHECK(kiln_kas_sampler_new(ctx, &p, &api) == KILN_OK);
    struct kiln_kas_kernel k;
    CHECK(kiln_kas_sampler_next(api, &k) == KILN_ERR_UNSUPPORTED);
    CHECK(strstr(kiln_ctx_error(ctx)->msg, "no further kernel after 0") != NULL);
    kiln_kas_sampler_free(api);
    kiln_ctx_free(ctx);
}

static const struct test tests[] = {
    {"mono", test_mono},
    {"solver_systems", test_solver_systems},
    {"budget_solver", test_budget_solver},
    {"primitives_against_kiln", test_primitives_against_kiln},
    {"sampled_batch", test_sampled_batch},
    {"reproducible", test_reproducible},
    {"receptive_field", test_receptive_field},
    {"known_designs", test_known_designs},
    {"fingerprint_duplicates", test_fingerprint_duplicates},
    {"canonical_hash", test_canonical_hash},
    {"spec_errors", test_spec_errors},
    {"public_api", test_public_api},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
