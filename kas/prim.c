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

#include <stddef.h>
#include <string.h>

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
    return nd->p.conv.kind == KAS_CONV_DENSE     ? kas_mono_const(1)
           : nd->p.conv.kind == KAS_CONV_GROUPED ? kas_mono_var(KAS_G)
                                                 : c;
}

/* ---- shape rules ---- */

bool
kas_infer_input(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)nd, (void)A, (void)B, (void)s;
    return false; /* node 0 only */
}

bool
kas_infer_unfold(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                 const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    int axes = nd->p.unfold.axes, k = nd->p.unfold.k, dil = nd->p.unfold.dilation, r = s->rank;
    int nw = (axes & KAS_AXIS_H) + ((axes >> 1) & 1);
    if (!s->spatial || axes < 1 || axes > 3 || r + nw > KAS_MAX_RANK || k < 3 || k % 2 == 0
        || dil < 1)
        return false;
    for (int j = 0; j < nw; j++)
        s->d[r + j] = kas_mono_const(k);
    s->rank = (uint8_t)(r + nw);
    if (axes & KAS_AXIS_H)
        nd->rf_h = rf_add(nd->rf_h, (k - 1) * dil);
    if (axes & KAS_AXIS_W)
        nd->rf_w = rf_add(nd->rf_w, (k - 1) * dil);
    return true;
}

bool
kas_infer_shift(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    int axis = nd->p.shift.axis, off = nd->p.shift.offset;
    if (!s->spatial || axis < 0 || axis > 1 || (off != 1 && off != -1))
        return false;
    if (axis == 0)
        nd->rf_h = rf_add(nd->rf_h, 1);
    else
        nd->rf_w = rf_add(nd->rf_w, 1);
    return true;
}

bool
kas_infer_group(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    int i = nd->p.group.dim, r = s->rank;
    if (i < 0 || i >= r || r + 1 > KAS_MAX_RANK)
        return false;
    struct kas_mono q = kas_mono_div(s->d[i], nd->m);
    if (!maybe_integral(q) || kas_mono_is_one(q))
        return false;
    memmove(&s->d[i + 2], &s->d[i + 1], sizeof(s->d[0]) * (size_t)(r - i - 1));
    s->d[i] = nd->m;
    s->d[i + 1] = q;
    s->rank++;
    return true;
}

bool
kas_infer_ungroup(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                  const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    int i = nd->p.ungroup.dim, r = s->rank;
    if (i < 0 || i + 1 >= r)
        return false;
    s->d[i] = kas_mono_mul(s->d[i], s->d[i + 1]);
    memmove(&s->d[i + 1], &s->d[i + 2], sizeof(s->d[0]) * (size_t)(r - i - 2));
    s->rank--;
    return true;
}

bool
kas_infer_scale(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    return nd->p.scale.mask >= 1 && nd->p.scale.mask < (1 << s->rank);
}

bool
kas_infer_softmax(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                  const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    return nd->p.softmax.dim >= 0 && nd->p.softmax.dim < s->rank;
}

bool
kas_infer_fc(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
             const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    int i = nd->p.fc.dim;
    if (i < 0 || i >= s->rank)
        return false;
    s->d[i] = nd->m;
    return true;
}

bool
kas_infer_conv(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
               const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    int kind = nd->p.conv.kind, kh = nd->p.conv.kh, kw = nd->p.conv.kw;
    if (!s->spatial || s->rank != 1 || kind < 0 || kind > KAS_CONV_DEPTHWISE || kh < 1 || kw < 1
        || kh % 2 == 0 || kw % 2 == 0)
        return false;
    if (kind == KAS_CONV_DEPTHWISE)
        nd->m = s->d[0];
    struct kas_mono g = groups_of(nd, s->d[0]);
    if (kind == KAS_CONV_GROUPED
        && (!maybe_integral(kas_mono_div(s->d[0], g)) || !maybe_integral(kas_mono_div(nd->m, g))))
        return false;
    s->d[0] = nd->m;
    nd->rf_h = rf_add(nd->rf_h, kh - 1);
    nd->rf_w = rf_add(nd->rf_w, kw - 1);
    return true;
}

bool
kas_infer_mix(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
              const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    int i = nd->p.mix.i, j = nd->p.mix.j, r = s->rank;
    if (i < 0 || j <= i || j >= r)
        return false;
    s->d[i] = nd->m;
    memmove(&s->d[j], &s->d[j + 1], sizeof(s->d[0]) * (size_t)(r - j - 1));
    s->rank--;
    return true;
}

bool
kas_infer_gram(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
               const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A;
    if (!B || !s->spatial || !B->out.spatial || s->rank != 1 || B->out.rank != 1
        || s->down != B->out.down)
        return false;
    s->spatial = false;
    s->rank = 2;
    s->d[1] = B->out.d[0];
    nd->rf_h = nd->rf_w = RF_CAP;
    return true;
}

bool
kas_infer_apply(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                const struct kas_node *B, struct kas_shape *s)
{
    (void)nd;
    /* M[a, b] times a map [b] or a matrix [b, c] */
    if (!B || s->spatial || s->rank != 2 || B->out.rank != (B->out.spatial ? 1 : 2))
        return false;
    if (!kas_solver_unify(&d->sol, s->d[1], B->out.d[0]))
        return false;
    *s = B->out;
    s->d[0] = kas_solver_apply(&d->sol, A->out.d[0]);
    return true;
}

bool
kas_infer_binary(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                 const struct kas_node *B, struct kas_shape *s)
{
    (void)A;
    int r = s->rank;
    if (!B || nd->p.binary.op < 0 || nd->p.binary.op >= KAS_NBINOP || B->out.rank != r)
        return false;
    if (s->spatial && B->out.spatial && s->down != B->out.down)
        return false;
    for (int k = 0; k < r; k++)
        if (!kas_solver_unify(&d->sol, s->d[k], B->out.d[k]))
            return false;
    if (!s->spatial)
        *s = B->out; /* the map's shape when one side broadcasts */
    for (int k = 0; k < r; k++)
        s->d[k] = kas_solver_apply(&d->sol, s->d[k]);
    return true;
}

bool
kas_infer_fold(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
               const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    int i = nd->p.fold.dim, r = s->rank;
    if (nd->p.fold.op < 0 || nd->p.fold.op >= KAS_NFOLD)
        return false;
    if (i == KAS_DIM_SPATIAL) {
        if (!s->spatial)
            return false;
        s->spatial = false;
        nd->rf_h = nd->rf_w = RF_CAP;
        return true;
    }
    if (i < 0 || i >= r || r < 2)
        return false;
    memmove(&s->d[i], &s->d[i + 1], sizeof(s->d[0]) * (size_t)(r - i - 1));
    s->rank--;
    return true;
}

bool
kas_infer_unary(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B, (void)s;
    return nd->p.unary.op >= 0 && nd->p.unary.op < KAS_NUNOP;
}

bool
kas_infer_pool(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
               const struct kas_node *B, struct kas_shape *s)
{
    (void)d, (void)A, (void)B;
    int kind = nd->p.pool.kind, k = nd->p.pool.k;
    if (!s->spatial || s->rank != 1 || kind < 0 || kind > KAS_POOL_MAX || k < 3 || k % 2 == 0)
        return false;
    nd->rf_h = rf_add(nd->rf_h, k - 1);
    nd->rf_w = rf_add(nd->rf_w, k - 1);
    return true;
}

bool
kas_infer_downsample(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                     const struct kas_node *B, struct kas_shape *s)
{
    (void)A, (void)B;
    int f = nd->p.downsample.factor;
    if (!s->spatial || f != 2 || s->down * f > d->stride)
        return false;
    s->down = (uint8_t)(s->down * f);
    nd->rf_h = rf_add(nd->rf_h, nd->rf_h);
    nd->rf_w = rf_add(nd->rf_w, nd->rf_w);
    return true;
}

bool
kas_node_infer(struct kas_design *d, struct kas_node *nd)
{
    if (nd->prim == KAS_INPUT || nd->prim >= KAS_NPRIM || nd->nin < 1 || nd->in[0] >= d->nnode
        || (nd->nin == 2 && nd->in[1] >= d->nnode))
        return false;
    const struct kas_node *A = &d->node[nd->in[0]];
    const struct kas_node *B = nd->nin == 2 ? &d->node[nd->in[1]] : NULL;
    struct kas_shape       s = A->out;
    nd->rf_h = A->rf_h;
    nd->rf_w = A->rf_w;
    if (B) {
        nd->rf_h = B->rf_h > nd->rf_h ? B->rf_h : nd->rf_h;
        nd->rf_w = B->rf_w > nd->rf_w ? B->rf_w : nd->rf_w;
    }
    if (!kas_prims[nd->prim].infer(d, nd, A, B, &s))
        return false;
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

/* ---- weights ---- */

static int
no_weight(const struct kas_node *n, const struct kas_shape *in, struct kas_mono *w)
{
    (void)n, (void)in, (void)w;
    return 0;
}
#define NO_WEIGHT(name)                                                         \
    int kas_weight_##name(const struct kas_node *n, const struct kas_shape *in, \
                          struct kas_mono *w)                                   \
    {                                                                           \
        return no_weight(n, in, w);                                             \
    }
NO_WEIGHT(input)
NO_WEIGHT(unfold)
NO_WEIGHT(shift)
NO_WEIGHT(group)
NO_WEIGHT(ungroup)
NO_WEIGHT(gram)
NO_WEIGHT(apply)
NO_WEIGHT(binary)
NO_WEIGHT(fold)
NO_WEIGHT(unary)
NO_WEIGHT(softmax)
NO_WEIGHT(pool)
NO_WEIGHT(downsample)

int
kas_weight_scale(const struct kas_node *n, const struct kas_shape *in, struct kas_mono *w)
{
    int nw = 0;
    for (int k = 0; k < in->rank; k++)
        if (n->p.scale.mask & (1 << k))
            w[nw++] = in->d[k];
    return nw;
}

int
kas_weight_fc(const struct kas_node *n, const struct kas_shape *in, struct kas_mono *w)
{
    w[0] = n->m;
    w[1] = in->d[n->p.fc.dim];
    return 2;
}

int
kas_weight_conv(const struct kas_node *n, const struct kas_shape *in, struct kas_mono *w)
{
    w[0] = n->m;
    w[1] = kas_mono_div(in->d[0], groups_of(n, in->d[0]));
    w[2] = kas_mono_const(n->p.conv.kh);
    w[3] = kas_mono_const(n->p.conv.kw);
    return 4;
}

int
kas_weight_mix(const struct kas_node *n, const struct kas_shape *in, struct kas_mono *w)
{
    w[0] = n->m;
    w[1] = in->d[n->p.mix.i];
    w[2] = in->d[n->p.mix.j];
    return 3;
}

int
kas_node_weight(const struct kas_design *d, int i, struct kas_mono *w)
{
    const struct kas_node *n = &d->node[i];
    return kas_prims[n->prim].weight(n, &d->node[n->in[0]].out, w);
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

/* A node's sizes at concrete values, for the cost functions. */
struct kas_cost {
    const struct kas_design *d;
    const struct kas_node   *n;
    const struct kas_shape  *in; /* first input */
    const int64_t           *vals;
    int64_t                  H, W;
    double                   no, ni, wn; /* elements of the output, the input, the weight */
    const struct kas_mono   *wd;         /* the weight's dims */
};

static bool
zero_flops(const struct kas_cost *c, double *flops)
{
    (void)c, (void)flops;
    return true;
}
#define ZERO_FLOPS(name)                                          \
    bool kas_cost_##name(const struct kas_cost *c, double *flops) \
    {                                                             \
        return zero_flops(c, flops);                              \
    }
ZERO_FLOPS(input)
ZERO_FLOPS(unfold)
ZERO_FLOPS(shift)
ZERO_FLOPS(group)
ZERO_FLOPS(ungroup)
ZERO_FLOPS(downsample)

bool
kas_cost_scale(const struct kas_cost *c, double *flops)
{
    *flops = c->no;
    return true;
}

bool
kas_cost_binary(const struct kas_cost *c, double *flops)
{
    *flops = c->no;
    return true;
}

/* fc, mix, conv: the reduction extent is the weight's size over its output dim */
static bool
contraction(const struct kas_cost *c, bool conv, double *flops)
{
    int64_t m, v1;
    if (!kas_mono_eval(c->n->m, c->vals, &m))
        return false;
    double red = c->wn / (double)m;
    if (conv) {
        int64_t ch;
        if (!kas_mono_eval(c->in->d[0], c->vals, &ch) || !kas_mono_eval(c->wd[1], c->vals, &v1)
            || ch % v1 || m % (ch / v1))
            return false;
    }
    *flops = (conv && red == 1) ? c->no : 2 * c->no * red;
    return true;
}

bool
kas_cost_fc(const struct kas_cost *c, double *flops)
{
    return contraction(c, false, flops);
}

bool
kas_cost_mix(const struct kas_cost *c, double *flops)
{
    return contraction(c, false, flops);
}

bool
kas_cost_conv(const struct kas_cost *c, double *flops)
{
    return contraction(c, true, flops);
}

bool
kas_cost_gram(const struct kas_cost *c, double *flops)
{
    const struct kas_shape *b = &c->d->node[c->n->in[1]].out;
    int64_t                 v1, v2;
    if (!kas_mono_eval(c->in->d[0], c->vals, &v1) || !kas_mono_eval(b->d[0], c->vals, &v2))
        return false;
    *flops =
        2 * (double)v1 * (double)v2 * (double)(c->H / c->in->down) * (double)(c->W / c->in->down);
    return true;
}

bool
kas_cost_apply(const struct kas_cost *c, double *flops)
{
    int64_t v1;
    if (!kas_mono_eval(c->in->d[1], c->vals, &v1))
        return false;
    *flops = 2 * c->no * (double)v1;
    return true;
}

bool
kas_cost_fold(const struct kas_cost *c, double *flops)
{
    *flops = (c->n->p.fold.op == KAS_FOLD_MEAN ? 2 : 1) * c->ni;
    return true;
}

bool
kas_cost_unary(const struct kas_cost *c, double *flops)
{
    *flops = unop_flops[c->n->p.unary.op] * c->no;
    return true;
}

bool
kas_cost_softmax(const struct kas_cost *c, double *flops)
{
    *flops = 5 * c->no;
    return true;
}

bool
kas_cost_pool(const struct kas_cost *c, double *flops)
{
    int k = c->n->p.pool.k;
    *flops = (c->n->p.pool.kind == KAS_POOL_AVG ? k * k + 1 : k * k) * c->no;
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
    struct kas_cost c = {d, n, in, vals, H, W, no, ni, wn, wd};
    if (!kas_prims[n->prim].cost(&c, flops))
        return false;
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

/* ---- the descriptors ---- */

#define PARAM(kind, field, slot)                                      \
    {                                                                 \
#field, (uint8_t)offsetof(union kas_params, kind.field), slot \
    }
#define END        \
    {              \
        NULL, 0, 0 \
    }
static const struct kas_param params_input[] = {END};
static const struct kas_param params_unfold[] = {PARAM(unfold, axes, 0), PARAM(unfold, k, 1),
                                                 PARAM(unfold, dilation, 2), END};
static const struct kas_param params_shift[] = {PARAM(shift, axis, 0), PARAM(shift, offset, 1),
                                                END};
static const struct kas_param params_group[] = {PARAM(group, dim, 0), END};
static const struct kas_param params_ungroup[] = {PARAM(ungroup, dim, 0), END};
static const struct kas_param params_scale[] = {PARAM(scale, mask, 0), END};
static const struct kas_param params_fc[] = {PARAM(fc, dim, 0), END};
static const struct kas_param params_conv[] = {PARAM(conv, kind, 0), PARAM(conv, kh, 1),
                                               PARAM(conv, kw, 2), END};
static const struct kas_param params_mix[] = {PARAM(mix, i, 0), PARAM(mix, j, 1), END};
static const struct kas_param params_gram[] = {END};
static const struct kas_param params_apply[] = {END};
static const struct kas_param params_binary[] = {PARAM(binary, op, 0), END};
static const struct kas_param params_fold[] = {PARAM(fold, dim, 0), PARAM(fold, op, 1), END};
static const struct kas_param params_unary[] = {PARAM(unary, op, 0), END};
static const struct kas_param params_softmax[] = {PARAM(softmax, dim, 0), END};
static const struct kas_param params_pool[] = {PARAM(pool, kind, 0), PARAM(pool, k, 1), END};
static const struct kas_param params_downsample[] = {PARAM(downsample, factor, 1), END};

const struct kas_prim_desc kas_prims[KAS_NPRIM] = {
#define KAS_PRIM(ID, nm, inputs, often)          \
    [KAS_##ID] = {.name = #nm,                   \
                  .nin = inputs,                 \
                  .sample_weight = often,        \
                  .param = params_##nm,          \
                  .infer = kas_infer_##nm,       \
                  .weight = kas_weight_##nm,     \
                  .cost = kas_cost_##nm,         \
                  .emit_kg = kas_emit_kg_##nm,   \
                  .emit_py = kas_emit_py_##nm,   \
                  .describe = kas_describe_##nm, \
                  .run = kas_run_##nm,           \
                  .propose = kas_propose_##nm},
#include "prims.def"
#undef KAS_PRIM
};

uint64_t
kas_node_attrs(const struct kas_node *n)
{
    const int8_t *raw = (const int8_t *)&n->p;
    uint64_t      w = 0;
    for (const struct kas_param *p = kas_prims[n->prim].param; p->name; p++)
        w |= (uint64_t)(uint8_t)raw[p->offset] << (8 * p->slot);
    return w;
}
