/* kas/sym.c -- symbolic sizes (monomials), the legality solver (substitution of unknowns) and
 * the budget solver (exact enumeration of the free variables' values).
 *
 * Legality. Every equation a = b between two sizes is a monomial identity a/b = 1. C, K and G
 * are independent symbols (C and K differ between placeholders, G is chosen later), so a/b = 1
 * holds for every placeholder only if it is solved for an unknown: a/b = x^e * rest gives
 * x = rest^(-1/e), which is a monomial when every exponent of rest is divisible by e (always
 * for e = +-1). The solution is substituted into every size and into earlier solutions, so
 * sizes never mention a solved unknown; equations are solved one by one as they appear
 * (Gaussian elimination over the integers in log space).
 *
 * Budget. After legality the only free symbols are G and the unknowns no equation fixed. Every
 * FLOP and parameter count is a sum of monomials in them (linear in log space term by term), so
 * the feasible set is found exactly by enumerating the candidate values (powers of two and
 * three times powers of two up to 512, G in 2..32 dividing every C and K): each assignment is
 * checked for integrality of every size of every placeholder and for the summed costs against
 * the ranges, and one feasible assignment is drawn uniformly. No design is sampled and
 * rejected for a random size choice: a design is dropped only when no assignment exists. */
#include "kas.h"

#include <stdio.h>
#include <string.h>

const char *const kas_var_name[KAS_NVAR] = {"C", "K", "G", "x0", "x1", "x2"};

static struct kas_mono
reduce(int64_t num, int64_t den, const int8_t *e)
{
    struct kas_mono m;
    memset(&m, 0, sizeof m);
    int64_t g = kiln_gcd64(num, den);
    if (g > 1) {
        num /= g;
        den /= g;
    }
    if (num > INT32_MAX || den > INT32_MAX) { /* cannot happen for sizes kiln handles */
        num = INT32_MAX;
        den = 1;
    }
    m.num = (int32_t)num;
    m.den = (int32_t)den;
    memcpy(m.e, e, sizeof m.e);
    return m;
}

struct kas_mono
kas_mono_const(int32_t v)
{
    int8_t e[KAS_NVAR] = {0};
    return reduce(v, 1, e);
}

struct kas_mono
kas_mono_var(enum kas_var v)
{
    int8_t e[KAS_NVAR] = {0};
    e[v] = 1;
    return reduce(1, 1, e);
}

struct kas_mono
kas_mono_mul(struct kas_mono a, struct kas_mono b)
{
    int8_t e[KAS_NVAR];
    for (int i = 0; i < KAS_NVAR; i++)
        e[i] = (int8_t)(a.e[i] + b.e[i]);
    return reduce((int64_t)a.num * b.num, (int64_t)a.den * b.den, e);
}

struct kas_mono
kas_mono_div(struct kas_mono a, struct kas_mono b)
{
    int8_t e[KAS_NVAR];
    for (int i = 0; i < KAS_NVAR; i++)
        e[i] = (int8_t)(a.e[i] - b.e[i]);
    return reduce((int64_t)a.num * b.den, (int64_t)a.den * b.num, e);
}

static struct kas_mono
mono_pow(struct kas_mono a, int p)
{
    struct kas_mono r = kas_mono_const(1);
    struct kas_mono b = p < 0 ? kas_mono_div(kas_mono_const(1), a) : a;
    for (int i = 0; i < (p < 0 ? -p : p); i++)
        r = kas_mono_mul(r, b);
    return r;
}

bool
kas_mono_eq(struct kas_mono a, struct kas_mono b)
{
    return a.num == b.num && a.den == b.den && !memcmp(a.e, b.e, sizeof a.e);
}

bool
kas_mono_is_one(struct kas_mono a)
{
    return kas_mono_eq(a, kas_mono_const(1));
}

static inline bool
mul_overflows(int64_t a, int64_t b, int64_t *out)
{
#if defined(__GNUC__)
    return __builtin_mul_overflow(a, b, out);
#else
    return kiln_mul_overflows(a, b, out);
#endif
}

bool
kas_mono_eval(struct kas_mono m, const int64_t *vals, int64_t *out)
{
    int64_t n = m.num, dn = m.den;
    for (int v = 0; v < KAS_NVAR; v++) {
        int e = m.e[v];
        if (!e)
            continue;
        if (vals[v] <= 0)
            return false;
        int64_t *acc = e > 0 ? &n : &dn;
        for (int k = 0; k < (e > 0 ? e : -e); k++)
            if (mul_overflows(*acc, vals[v], acc))
                return false;
    }
    if (n % dn)
        return false;
    *out = n / dn;
    return *out > 0;
}

void
kas_mono_print(struct kas_mono m, bool py, char *buf, size_t size)
{
    char   num[128] = "", den[128] = "";
    size_t nl = 0, dl = 0;
    if (m.num != 1)
        nl += (size_t)snprintf(num + nl, sizeof num - nl, "%d", m.num);
    if (m.den != 1)
        dl += (size_t)snprintf(den + dl, sizeof den - dl, "%d", m.den);
    for (int v = 0; v < KAS_NVAR; v++) {
        int e = m.e[v];
        for (int k = 0; k < (e > 0 ? e : -e); k++) {
            char   *p = e > 0 ? num : den;
            size_t *l = e > 0 ? &nl : &dl;
            if (*l + 8 < sizeof num)
                *l += (size_t)snprintf(p + *l, sizeof num - *l, "%s%s", *l ? "*" : "",
                                       kas_var_name[v]);
        }
    }
    if (!nl)
        snprintf(num, sizeof num, "1");
    if (!dl)
        snprintf(buf, size, "%s", num);
    else if (strchr(den, '*'))
        snprintf(buf, size, "%s%s(%s)", num, py ? "//" : "/", den);
    else
        snprintf(buf, size, "%s%s%s", num, py ? "//" : "/", den);
}

uint64_t
kas_mono_hash(uint64_t h, struct kas_mono m)
{
    h = kiln_hash_u64(h, ((uint64_t)(uint32_t)m.num << 32) | (uint32_t)m.den);
    return kiln_hash_bytes(h, m.e, sizeof m.e);
}

/* ---- legality solver ---- */

bool
kas_solver_fresh(struct kas_solver *s, enum kas_var *out)
{
    if (s->nunk >= KAS_MAX_UNKNOWN)
        return false;
    *out = (enum kas_var)(KAS_X0 + s->nunk++);
    return true;
}

struct kas_mono
kas_solver_apply(const struct kas_solver *s, struct kas_mono m)
{
    for (int i = 0; i < s->nunk; i++) {
        int e = m.e[KAS_X0 + i];
        if (!e || !s->solved[i])
            continue;
        m.e[KAS_X0 + i] = 0;
        m = kas_mono_mul(m, mono_pow(s->sol[i], e));
    }
    return m;
}

/* Finds the unknown to solve r = 1 for: returns its index or -1; *sol receives its value. */
static int
solve_for(const struct kas_solver *s, struct kas_mono r, struct kas_mono *sol)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int i = s->nunk - 1; i >= 0; i--) {
            int e = r.e[KAS_X0 + i];
            if (!e || s->solved[i] || (pass == 0 && e != 1 && e != -1))
                continue;
            struct kas_mono rest = r;
            rest.e[KAS_X0 + i] = 0;
            /* x^e * rest = 1  =>  x = rest^(-1/e) */
            if (e != 1 && e != -1) {
                if (rest.num != 1 || rest.den != 1)
                    continue;
                bool ok = true;
                for (int v = 0; v < KAS_NVAR; v++)
                    ok = ok && rest.e[v] % e == 0;
                if (!ok)
                    continue;
                for (int v = 0; v < KAS_NVAR; v++)
                    rest.e[v] = (int8_t)(rest.e[v] / e);
                *sol = kas_mono_div(kas_mono_const(1), rest);
            } else {
                *sol = e == 1 ? kas_mono_div(kas_mono_const(1), rest) : rest;
            }
            if (kas_mono_is_one(*sol) || sol->num < sol->den) /* degenerate: x = 1 or x < 1 */
                continue;
            return i;
        }
    }
    return -1;
}

bool
kas_solver_can_unify(const struct kas_solver *s, struct kas_mono a, struct kas_mono b)
{
    struct kas_mono r = kas_mono_div(kas_solver_apply(s, a), kas_solver_apply(s, b)), sol;
    return kas_mono_is_one(r) || solve_for(s, r, &sol) >= 0;
}

bool
kas_solver_unify(struct kas_solver *s, struct kas_mono a, struct kas_mono b)
{
    struct kas_mono r = kas_mono_div(kas_solver_apply(s, a), kas_solver_apply(s, b)), sol;
    if (kas_mono_is_one(r))
        return true;
    int i = solve_for(s, r, &sol);
    if (i < 0)
        return false;
    s->solved[i] = true;
    s->sol[i] = sol;
    for (int j = 0; j < s->nunk; j++)
        if (j != i && s->solved[j])
            s->sol[j] = kas_solver_apply(s, s->sol[j]);
    return true;
}

/* ---- budget solver ---- */

static const int32_t unk_cand[] = {2, 4, 8, 16, 32, 64, 128, 256, 512};
static const int32_t g_cand[] = {2, 4, 8, 16, 32};
#define MAX_CAND 40

uint32_t
kas_budget_candidates(const struct kas_spec *s, const struct kas_design *d, enum kas_var v,
                      struct kas_mono *out, uint32_t cap)
{
    uint32_t n = 0;
    if (v == KAS_G) {
        int64_t gmax = 0; /* G must divide every C and K */
        for (uint32_t p = 0; p < s->nph; p++)
            gmax = kiln_gcd64(gmax, kiln_gcd64(s->ph[p].C, s->ph[p].K));
        for (size_t k = 0; k < KILN_COUNTOF(g_cand) && n < cap; k++)
            if (gmax % g_cand[k] == 0)
                out[n++] = kas_mono_const(g_cand[k]);
        return n;
    }
    if (v < KAS_X0)
        return 0;
    for (size_t k = 0; k < KILN_COUNTOF(unk_cand) && n < cap; k++)
        out[n++] = kas_mono_const(unk_cand[k]);
    /* relative sizes: C (or K) times 1/8, 1/4, 1/2, 1, 2, 4 */
    for (int base = KAS_C; base <= (d->k_is_c ? KAS_C : KAS_K); base++)
        for (int e = -3; e <= 2 && n < cap; e++) {
            struct kas_mono m = kas_mono_var((enum kas_var)base);
            out[n++] = e < 0 ? kas_mono_div(m, kas_mono_const(1 << -e))
                             : kas_mono_mul(m, kas_mono_const(1 << e));
        }
    return n;
}

void
kas_design_values(const struct kas_design *d, bool py, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (int v = KAS_G; v < KAS_NVAR && len < size; v++)
        if (d->val[v].num) {
            char m[64];
            kas_mono_print(d->val[v], py, m, sizeof m);
            len += (size_t)snprintf(buf + len, size - len, "%s%s=%s", len ? " " : "",
                                    kas_var_name[v], m);
        }
}

void
kas_spec_ref_cost(const struct kas_spec *s, double *flops, double *params)
{
    *flops = *params = 0;
    for (uint32_t p = 0; p < s->nph; p++) {
        const struct kas_placeholder *ph = &s->ph[p];
        double oh = (double)(ph->H / s->stride), ow = (double)(ph->W / s->stride);
        double w = (double)ph->C * (double)ph->K * s->ref_k * s->ref_k;
        *params += w;
        *flops += 2 * w * oh * ow;
    }
}

static bool
uses_var(const struct kas_design *d, int v)
{
    for (int i = 0; i < d->nnode; i++) {
        const struct kas_node *n = &d->node[i];
        if (n->m.e[v] || (v == KAS_G && n->prim == KAS_CONV && n->p.conv.kind == KAS_CONV_GROUPED))
            return true;
        for (int k = 0; k < n->out.rank; k++)
            if (n->out.d[k].e[v])
                return true;
    }
    return false;
}

/* Depth-first enumeration of the free variables' values, pruned by integrality checks at the
 * level where a size's last free variable gets its value. */
#define MAX_CHECKS 64
struct bsearch {
    const struct kas_spec *s;
    struct kas_design     *d;
    struct kiln_rng       *rng;
    int                    fv[KAS_NVAR], nfv;
    struct kas_mono        cand[KAS_NVAR][MAX_CAND];
    int                    ncand[KAS_NVAR];
    struct kas_mono        check[MAX_CHECKS];
    int                    level[MAX_CHECKS], ncheck;
    bool                   dep[KAS_MAX_NODES];
    double                 rf, rp, f0, p0;
    uint32_t               nfeas;
    struct kas_mono        best[KAS_NVAR];
};

static void
add_check(struct bsearch *b, struct kas_mono m)
{
    for (int k = 0; k < b->ncheck; k++)
        if (kas_mono_eq(b->check[k], m))
            return;
    int lvl = -1;
    for (int k = 0; k < b->nfv; k++)
        if (m.e[b->fv[k]])
            lvl = k;
    if (b->ncheck < MAX_CHECKS) { /* more sizes than that: the leaf's cost check still holds */
        b->level[b->ncheck] = lvl;
        b->check[b->ncheck++] = m;
    }
}

static bool
node_depends(const struct kas_design *d, int i, const int *fv, int nfv)
{
    const struct kas_node *n = &d->node[i];
    for (int k = 0; k < nfv; k++) {
        int v = fv[k];
        if (n->m.e[v] || (v == KAS_G && n->prim == KAS_CONV && n->p.conv.kind == KAS_CONV_GROUPED))
            return true;
        for (int j = 0; j <= n->nin; j++) {
            const struct kas_shape *sh = j < n->nin ? &d->node[n->in[j]].out : &n->out;
            for (int r = 0; r < sh->rank; r++)
                if (sh->d[r].e[v])
                    return true;
        }
    }
    return false;
}

static bool
level_ok(const struct bsearch *b, int lvl)
{
    for (uint32_t p = 0; p < b->s->nph; p++) {
        int64_t vals[KAS_NVAR], v;
        kas_design_vals(b->d, &b->s->ph[p], vals);
        for (int k = 0; k < b->ncheck; k++)
            if (b->level[k] == lvl && (!kas_mono_eval(b->check[k], vals, &v) || v < 1))
                return false;
    }
    return true;
}

static void
leaf(struct bsearch *b)
{
    const struct kas_spec *s = b->s;
    double                 f = b->f0, pr = b->p0;
    for (uint32_t p = 0; p < s->nph; p++) {
        int64_t vals[KAS_NVAR];
        kas_design_vals(b->d, &s->ph[p], vals);
        for (int i = 1; i < b->d->nnode; i++) {
            double nf, np;
            if (!b->dep[i])
                continue;
            if (!kas_node_cost(b->d, i, vals, s->ph[p].H, s->ph[p].W, &nf, &np))
                return;
            f += nf;
            pr += np;
        }
        if (f > s->flops_hi * b->rf || pr > s->params_hi * b->rp) /* costs only grow */
            return;
    }
    if (f >= s->flops_lo * b->rf && f <= s->flops_hi * b->rf && pr >= s->params_lo * b->rp
        && pr <= s->params_hi * b->rp) {
        b->nfeas++;
        if (b->nfeas == 1 || (b->rng && kiln_rng_below(b->rng, b->nfeas) == 0))
            memcpy(b->best, b->d->val, sizeof b->best);
    }
}

static void
search(struct bsearch *b, int lvl)
{
    if (lvl == b->nfv) {
        leaf(b);
        return;
    }
    for (int c = 0; c < b->ncand[lvl]; c++) {
        b->d->val[b->fv[lvl]] = b->cand[lvl][c];
        if (level_ok(b, lvl))
            search(b, lvl + 1);
    }
}

uint32_t
kas_budget_solve(const struct kas_spec *s, struct kas_design *d, struct kiln_rng *rng)
{
    static const struct bsearch zero;
    struct bsearch              b = zero;
    int                         fv[KAS_NVAR], nfv = 0;
    b.s = s;
    b.d = d;
    b.rng = rng;
    memset(d->val, 0, sizeof d->val);
    for (int v = KAS_G; v < KAS_NVAR; v++) {
        if (v >= KAS_X0 && (v - KAS_X0 >= d->sol.nunk || d->sol.solved[v - KAS_X0]))
            continue;
        if (!uses_var(d, v))
            continue;
        fv[nfv] = v;
        b.ncand[nfv] = (int)kas_budget_candidates(s, d, (enum kas_var)v, b.cand[nfv], MAX_CAND);
        if (!b.ncand[nfv])
            return 0;
        nfv++;
    }
    b.nfv = nfv;
    memcpy(b.fv, fv, sizeof fv);
    kas_spec_ref_cost(s, &b.rf, &b.rp);
    /* sizes to check for integrality, each at the level of its last free variable */
    for (int i = 0; i < d->nnode; i++) {
        const struct kas_node *n = &d->node[i];
        struct kas_mono        w[KAS_MAX_WDIMS];
        int                    nw = kas_node_weight(d, i, w);
        for (int k = 0; k < n->out.rank; k++)
            add_check(&b, n->out.d[k]);
        for (int k = 0; k < nw; k++)
            add_check(&b, w[k]);
        if (n->prim == KAS_CONV && n->p.conv.kind == KAS_CONV_GROUPED)
            add_check(&b, kas_mono_div(n->m, kas_mono_var(KAS_G)));
    }
    /* nodes whose cost does not depend on a free variable are counted once */
    for (int i = 1; i < d->nnode; i++) {
        b.dep[i] = node_depends(d, i, fv, nfv);
        if (b.dep[i])
            continue;
        for (uint32_t p = 0; p < s->nph; p++) {
            int64_t vals[KAS_NVAR];
            double  f, pr;
            kas_design_vals(d, &s->ph[p], vals);
            if (!kas_node_cost(d, i, vals, s->ph[p].H, s->ph[p].W, &f, &pr))
                return 0;
            b.f0 += f;
            b.p0 += pr;
        }
    }
    if (!level_ok(&b, -1))
        return 0;
    search(&b, 0);
    if (b.nfeas)
        memcpy(d->val, b.best, sizeof b.best);
    return b.nfeas;
}

void
kas_spec_default(struct kas_spec *s)
{
    memset(s, 0, sizeof *s);
    s->stride = 1;
    s->ref_k = 3;
    s->flops_lo = 0.05;
    s->flops_hi = 1.0;
    s->params_lo = 0.0;
    s->params_hi = 1.0;
    s->max_ops = 8;
    s->min_rf = 3;
}

enum kiln_status
kas_spec_check(kiln_ctx *ctx, const struct kas_spec *s)
{
    if (!s->nph || s->nph > KAS_MAX_PH)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas", "need 1 to %d placeholders, got %u",
                         KAS_MAX_PH, s->nph);
    if (s->stride != 1 && s->stride != 2)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas", "stride must be 1 or 2, got %d", s->stride);
    for (uint32_t p = 0; p < s->nph; p++) {
        const struct kas_placeholder *ph = &s->ph[p];
        if (ph->C < 2 || ph->K < 2 || ph->H <= 0 || ph->W <= 0 || ph->C > 65536 || ph->K > 65536
            || ph->H > 4096 || ph->W > 4096)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas",
                             "placeholder %u: sizes C=%lld K=%lld H=%lld W=%lld out of range (C, K "
                             "in 2..65536, H, W in 1..4096)",
                             p + 1, (long long)ph->C, (long long)ph->K, (long long)ph->H,
                             (long long)ph->W);
        if (ph->H % s->stride || ph->W % s->stride)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas",
                             "placeholder %u: H=%lld and W=%lld must be divisible by stride %d",
                             p + 1, (long long)ph->H, (long long)ph->W, s->stride);
    }
    if (!(s->flops_lo >= 0 && s->flops_lo <= s->flops_hi && s->params_lo >= 0
          && s->params_lo <= s->params_hi))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas",
                         "budget ranges must satisfy 0 <= lo <= hi (flops %g..%g, params %g..%g)",
                         s->flops_lo, s->flops_hi, s->params_lo, s->params_hi);
    if (s->max_ops < 1 || s->max_ops > KAS_MAX_NODES - 8)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas", "max ops must be in 1..%d, got %d",
                         KAS_MAX_NODES - 8, s->max_ops);
    if (s->min_rf < 1 || s->min_rf > 15)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas", "min receptive field must be in 1..15");
    if (s->ref_k < 1 || s->ref_k > 7 || s->ref_k % 2 == 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas", "reference window must be 1, 3, 5 or 7");
    return KILN_OK;
}
