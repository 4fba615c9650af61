/* kas/prim.c -- the primitives: shape rules (symbolic), weights, receptive fields, and FLOP and
 * parameter counts as functions of the variables.
 *
 * The counts follow ir/stats.c's rule for the statement kas/emit.c writes for the primitive
 * (float arithmetic nodes per output point, plus one combine per reduction point), so the
 * budget the solver enforces is the budget kiln measures on the emitted graph (tests/kas checks
 * each primitive against kiln_call_stats). With n the output's elements, n_in the input's:
 *
 *   unfold, shift, group, ungroup, downsample     0
 *   scale                                          n                  params d_i
 *   fc (d_i -> m)                                  2 n d_i            params m d_i
 *   conv (kh x kw, g groups, C' -> m)              2 n (C'/g) kh kw   params m (C'/g) kh kw
 *                                                  (n when (C'/g) kh kw = 1)
 *   mix (d_i, d_j -> m)                            2 n d_i d_j        params m d_i d_j
 *   gram A[a] B[b] over h w                        2 a b h w
 *   apply M[a, b] V[b]                             2 n b
 *   binary                                         n
 *   fold sum / max                                 n_in;  mean 2 n_in
 *   unary                                          u n  (u: relu 1, gelu 5, sigmoid 1, tanh 1,
 *                                                        abs 1, exp 1, neg 1, sqrt 2, square 1)
 *   softmax                                        5 n
 *   pool avg k                                     (k^2 + 1) n;  max k^2 n */
#include "kas.h"

#include <string.h>

const char *const kas_prim_name[KAS_NPRIM] = {
    "input", "unfold", "shift",  "group", "ungroup", "scale",   "fc",   "conv",      "mix",
    "gram",  "apply",  "binary", "fold",  "unary",   "softmax", "pool", "downsample"};
const char *const kas_binop_name[KAS_NBINOP] = {"add", "sub", "mul", "maximum", "minimum"};
const char *const kas_fold_name[KAS_NFOLD] = {"sum", "mean", "max"};
const char *const kas_unop_name[KAS_NUNOP] = {"relu", "gelu", "sigmoid", "tanh",  "abs",
                                              "exp",  "neg",  "sqrt",    "square"};
static const int  unop_flops[KAS_NUNOP] = {1, 5, 1, 1, 1, 1, 1, 2, 1};

#define RF_CAP 255

void
kas_design_init(struct kas_design *d, bool k_is_c, int stride)
{
    memset(d, 0, sizeof *d);
    d->k_is_c = k_is_c;
    d->stride = (uint8_t)stride;
    struct kas_node *x = &d->node[0];
    x->prim = KAS_INPUT;
    x->out.rank = 1;
    x->out.spatial = true;
    x->out.down = 1;
    x->out.d[0] = kas_mono_var(KAS_C);
    x->rf_h = x->rf_w = 1;
    d->nnode = 1;
}

void
kas_design_resolve(struct kas_design *d)
{
    for (int i = 0; i < d->nnode; i++) {
        struct kas_node *n = &d->node[i];
        n->m = kas_solver_apply(&d->sol, n->m);
        for (int k = 0; k < n->out.rank; k++)
            n->out.d[k] = kas_solver_apply(&d->sol, n->out.d[k]);
    }
}

/* A quotient that can be a positive integer for some choice of G and unknowns: no fraction,
 * and a negative exponent only where a positive exponent of C, K or an unknown can absorb it. */
static bool
maybe_integral(struct kas_mono q)
{
    if (q.den != 1)
        return false;
    bool neg = false, pos = false;
    for (int v = 0; v < KAS_NVAR; v++) {
        if (q.e[v] < 0 && (v == KAS_C || v == KAS_K))
            return false;
        neg = neg || q.e[v] < 0;
        pos = pos || (q.e[v] > 0 && v != KAS_G);
    }
    return !neg || pos;
}

static uint16_t
rf_add(uint16_t a, int b)
{
    int r = a + b;
    return (uint16_t)(r > RF_CAP ? RF_CAP : r);
}

static struct kas_mono
groups_of(const struct kas_node *nd, struct kas_mono c)
{
    return nd->a == 0 ? kas_mono_const(1) : nd->a == 1 ? kas_mono_var(KAS_G) : c;
}

bool
kas_node_infer(struct kas_design *d, struct kas_node *nd)
{
    if (nd->nin < 1 || nd->in[0] >= d->nnode || (nd->nin == 2 && nd->in[1] >= d->nnode))
        return false;
    const struct kas_node *A = &d->node[nd->in[0]];
    const struct kas_node *B = nd->nin == 2 ? &d->node[nd->in[1]] : NULL;
    struct kas_shape       s = A->out;
    int                    r = s.rank, i = nd->a;
    nd->rf_h = A->rf_h;
    nd->rf_w = A->rf_w;
    if (B) {
        nd->rf_h = B->rf_h > nd->rf_h ? B->rf_h : nd->rf_h;
        nd->rf_w = B->rf_w > nd->rf_w ? B->rf_w : nd->rf_w;
    }
    switch ((enum kas_prim)nd->prim) {
    case KAS_INPUT:
    case KAS_NPRIM:
        return false;
    case KAS_UNFOLD: {
        int nw = (nd->a & 1) + ((nd->a >> 1) & 1);
        if (!s.spatial || nd->a < 1 || nd->a > 3 || r + nw > KAS_MAX_RANK || nd->b < 3
            || nd->b % 2 == 0 || nd->c < 1)
            return false;
        for (int k = 0; k < nw; k++)
            s.d[r + k] = kas_mono_const(nd->b);
        s.rank = (uint8_t)(r + nw);
        if (nd->a & 1)
            nd->rf_h = rf_add(nd->rf_h, (nd->b - 1) * nd->c);
        if (nd->a & 2)
            nd->rf_w = rf_add(nd->rf_w, (nd->b - 1) * nd->c);
        break;
    }
    case KAS_SHIFT:
        if (!s.spatial || nd->a < 0 || nd->a > 1 || (nd->b != 1 && nd->b != -1))
            return false;
        if (nd->a == 0)
            nd->rf_h = rf_add(nd->rf_h, 1);
        else
            nd->rf_w = rf_add(nd->rf_w, 1);
        break;
    case KAS_GROUP: {
        if (i < 0 || i >= r || r + 1 > KAS_MAX_RANK)
            return false;
        struct kas_mono q = kas_mono_div(s.d[i], nd->m);
        if (!maybe_integral(q) || kas_mono_is_one(q))
            return false;
        memmove(&s.d[i + 2], &s.d[i + 1], sizeof(s.d[0]) * (size_t)(r - i - 1));
        s.d[i] = nd->m;
        s.d[i + 1] = q;
        s.rank++;
        break;
    }
    case KAS_UNGROUP:
        if (i < 0 || i + 1 >= r)
            return false;
        s.d[i] = kas_mono_mul(s.d[i], s.d[i + 1]);
        memmove(&s.d[i + 1], &s.d[i + 2], sizeof(s.d[0]) * (size_t)(r - i - 2));
        s.rank--;
        break;
    case KAS_SCALE:
        if (nd->a < 1 || nd->a >= (1 << r))
            return false;
        break;
    case KAS_SOFTMAX:
        if (i < 0 || i >= r)
            return false;
        break;
    case KAS_FC:
        if (i < 0 || i >= r)
            return false;
        s.d[i] = nd->m;
        break;
    case KAS_CONV: {
        if (!s.spatial || r != 1 || nd->a < 0 || nd->a > 2 || nd->b < 1 || nd->c < 1
            || nd->b % 2 == 0 || nd->c % 2 == 0)
            return false;
        if (nd->a == 2)
            nd->m = s.d[0];
        struct kas_mono g = groups_of(nd, s.d[0]);
        if (nd->a == 1
            && (!maybe_integral(kas_mono_div(s.d[0], g))
                || !maybe_integral(kas_mono_div(nd->m, g))))
            return false;
        s.d[0] = nd->m;
        nd->rf_h = rf_add(nd->rf_h, nd->b - 1);
        nd->rf_w = rf_add(nd->rf_w, nd->c - 1);
        break;
    }
    case KAS_MIX: {
        int j = nd->b;
        if (i < 0 || j <= i || j >= r)
            return false;
        s.d[i] = nd->m;
        memmove(&s.d[j], &s.d[j + 1], sizeof(s.d[0]) * (size_t)(r - j - 1));
        s.rank--;
        break;
    }
    case KAS_GRAM:
        if (!B || !s.spatial || !B->out.spatial || r != 1 || B->out.rank != 1
            || s.down != B->out.down)
            return false;
        s.spatial = false;
        s.rank = 2;
        s.d[1] = B->out.d[0];
        nd->rf_h = nd->rf_w = RF_CAP;
        break;
    case KAS_APPLY: /* M[a, b] times a map [b] or a matrix [b, c] */
        if (!B || s.spatial || r != 2 || B->out.rank != (B->out.spatial ? 1 : 2))
            return false;
        if (!kas_solver_unify(&d->sol, s.d[1], B->out.d[0]))
            return false;
        s = B->out;
        s.d[0] = kas_solver_apply(&d->sol, A->out.d[0]);
        break;
    case KAS_BINARY: {
        if (!B || nd->a < 0 || nd->a >= KAS_NBINOP || B->out.rank != r)
            return false;
        if (s.spatial && B->out.spatial && s.down != B->out.down)
            return false;
        for (int k = 0; k < r; k++)
            if (!kas_solver_unify(&d->sol, s.d[k], B->out.d[k]))
                return false;
        if (!s.spatial)
            s = B->out; /* the map's shape when one side broadcasts */
        for (int k = 0; k < r; k++)
            s.d[k] = kas_solver_apply(&d->sol, s.d[k]);
        break;
    }
    case KAS_FOLD:
        if (nd->b < 0 || nd->b >= KAS_NFOLD)
            return false;
        if (i == KAS_DIM_SPATIAL) {
            if (!s.spatial)
                return false;
            s.spatial = false;
            nd->rf_h = nd->rf_w = RF_CAP;
            break;
        }
        if (i < 0 || i >= r || r < 2)
            return false;
        memmove(&s.d[i], &s.d[i + 1], sizeof(s.d[0]) * (size_t)(r - i - 1));
        s.rank--;
        break;
    case KAS_UNARY:
        if (nd->a < 0 || nd->a >= KAS_NUNOP)
            return false;
        break;
    case KAS_POOL:
        if (!s.spatial || r != 1 || nd->a < 0 || nd->a > 1 || nd->b < 3 || nd->b % 2 == 0)
            return false;
        nd->rf_h = rf_add(nd->rf_h, nd->b - 1);
        nd->rf_w = rf_add(nd->rf_w, nd->b - 1);
        break;
    case KAS_DOWNSAMPLE:
        if (!s.spatial || nd->b != 2 || s.down * nd->b > d->stride)
            return false;
        s.down = (uint8_t)(s.down * nd->b);
        nd->rf_h = rf_add(nd->rf_h, nd->rf_h);
        nd->rf_w = rf_add(nd->rf_w, nd->rf_w);
        break;
    }
    nd->out = s;
    return true;
}

int
kas_design_add(struct kas_design *d, struct kas_node nd)
{
    if (d->nnode >= KAS_MAX_NODES)
        return -1;
    nd.nuse = 0;
    if (!kas_node_infer(d, &nd))
        return -1;
    int i = d->nnode++;
    d->node[i] = nd;
    for (int k = 0; k < nd.nin; k++)
        d->node[nd.in[k]].nuse++;
    kas_design_resolve(d);
    return i;
}

int
kas_node_weight(const struct kas_design *d, int i, struct kas_mono *w)
{
    const struct kas_node  *n = &d->node[i];
    const struct kas_shape *in = &d->node[n->in[0]].out;
    switch ((enum kas_prim)n->prim) {
    case KAS_SCALE: {
        int nw = 0;
        for (int k = 0; k < in->rank; k++)
            if (n->a & (1 << k))
                w[nw++] = in->d[k];
        return nw;
    }
    case KAS_FC:
        w[0] = n->m;
        w[1] = in->d[n->a];
        return 2;
    case KAS_CONV:
        w[0] = n->m;
        w[1] = kas_mono_div(in->d[0], groups_of(n, in->d[0]));
        w[2] = kas_mono_const(n->b);
        w[3] = kas_mono_const(n->c);
        return 4;
    case KAS_MIX:
        w[0] = n->m;
        w[1] = in->d[n->a];
        w[2] = in->d[n->b];
        return 3;
    case KAS_INPUT:
    case KAS_UNFOLD:
    case KAS_SHIFT:
    case KAS_GROUP:
    case KAS_UNGROUP:
    case KAS_GRAM:
    case KAS_APPLY:
    case KAS_BINARY:
    case KAS_FOLD:
    case KAS_UNARY:
    case KAS_SOFTMAX:
    case KAS_POOL:
    case KAS_DOWNSAMPLE:
    case KAS_NPRIM:
        return 0;
    }
    return 0;
}

void
kas_design_vals(const struct kas_design *d, const struct kas_placeholder *ph, int64_t *vals)
{
    memset(vals, 0, sizeof(int64_t) * KAS_NVAR);
    vals[KAS_C] = ph->C;
    vals[KAS_K] = d->k_is_c ? ph->C : ph->K;
    for (int v = KAS_G; v < KAS_NVAR; v++) /* values are monomials in C and K only */
        if (d->val[v].num && !kas_mono_eval(d->val[v], vals, &vals[v]))
            vals[v] = 0;
}

/* Elements of a shape at vals; false when a size is not a positive integer. */
static bool
numel(const struct kas_shape *s, const int64_t *vals, int64_t H, int64_t W, double *out)
{
    double n = 1;
    for (int k = 0; k < s->rank; k++) {
        int64_t v;
        if (!kas_mono_eval(s->d[k], vals, &v) || v < 2) /* size-1 dims are degenerate */
            return false;
        n *= (double)v;
    }
    if (s->spatial)
        n *= (double)(H / s->down) * (double)(W / s->down);
    *out = n;
    return true;
}

bool
kas_node_cost(const struct kas_design *d, int i, const int64_t *vals, int64_t H, int64_t W,
              double *flops, double *params)
{
    const struct kas_node *n = &d->node[i];
    double                 no, ni = 0;
    *flops = *params = 0;
    if (!numel(&n->out, vals, H, W, &no))
        return false;
    const struct kas_shape *in = n->nin ? &d->node[n->in[0]].out : NULL;
    if (in && !numel(in, vals, H, W, &ni))
        return false;
    struct kas_mono wd[KAS_MAX_WDIMS];
    int             nw = kas_node_weight(d, i, wd);
    double          wn = 1;
    for (int k = 0; k < nw; k++) {
        int64_t v;
        if (!kas_mono_eval(wd[k], vals, &v))
            return false;
        wn *= (double)v;
    }
    if (nw)
        *params = wn;
    int64_t v1 = 1, v2 = 1;
    switch ((enum kas_prim)n->prim) {
    case KAS_INPUT:
    case KAS_UNFOLD:
    case KAS_SHIFT:
    case KAS_GROUP:
    case KAS_UNGROUP:
    case KAS_DOWNSAMPLE:
    case KAS_NPRIM:
        break;
    case KAS_SCALE:
    case KAS_BINARY:
        *flops = no;
        break;
    case KAS_FC:
    case KAS_MIX:
    case KAS_CONV: {
        int64_t m; /* the reduction extent is the weight's size over its output dim */
        if (!kas_mono_eval(n->m, vals, &m))
            return false;
        double red = wn / (double)m;
        if (n->prim == KAS_CONV) {
            int64_t c;
            if (!kas_mono_eval(in->d[0], vals, &c) || !kas_mono_eval(wd[1], vals, &v1) || c % v1
                || m % (c / v1))
                return false;
        }
        *flops = (n->prim == KAS_CONV && red == 1) ? no : 2 * no * red;
        break;
    }
    case KAS_GRAM: {
        const struct kas_shape *b = &d->node[n->in[1]].out;
        if (!kas_mono_eval(in->d[0], vals, &v1) || !kas_mono_eval(b->d[0], vals, &v2))
            return false;
        *flops = 2 * (double)v1 * (double)v2 * (double)(H / in->down) * (double)(W / in->down);
        break;
    }
    case KAS_APPLY:
        if (!kas_mono_eval(in->d[1], vals, &v1))
            return false;
        *flops = 2 * no * (double)v1;
        break;
    case KAS_FOLD:
        *flops = (n->b == KAS_FOLD_MEAN ? 2 : 1) * ni;
        break;
    case KAS_UNARY:
        *flops = unop_flops[n->a] * no;
        break;
    case KAS_SOFTMAX:
        *flops = 5 * no;
        break;
    case KAS_POOL:
        *flops = (n->a == 0 ? n->b * n->b + 1 : n->b * n->b) * no;
        break;
    }
    if (n->nin == 2 && !numel(&d->node[n->in[1]].out, vals, H, W, &ni))
        return false;
    return true;
}

bool
kas_design_cost(const struct kas_design *d, const struct kas_placeholder *ph, double *flops,
                double *params)
{
    int64_t vals[KAS_NVAR];
    kas_design_vals(d, ph, vals);
    *flops = *params = 0;
    for (int i = 1; i < d->nnode; i++) {
        double f, p;
        if (!kas_node_cost(d, i, vals, ph->H, ph->W, &f, &p))
            return false;
        *flops += f;
        *params += p;
    }
    return true;
}
