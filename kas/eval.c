/* kas/eval.c -- a small double-precision evaluator of designs (batch 1) and the output
 * fingerprint built on it.
 *
 * The sampler runs every candidate here on tiny sizes (C = 8, H = W = 8, G = 2, unknowns 4)
 * with fixed pseudo-random input and weights: two designs whose outputs agree (to about 1e-9
 * relative) compute the same function and the later one is a duplicate, whatever its
 * structure. The weights of a node are drawn from a seed made of the node's local structure
 * (primitive, attributes, weight shape) and its occurrence among nodes of that structure, so
 * designs that differ only in the order of independent steps draw the same weights.
 *
 * Tensors are row-major [d0, .., d(r-1)] followed by [h, w] for maps. The semantics are those
 * of the emitted kiln graph and PyTorch module (kas/emit.c); tests/kas checks all three agree.
 * Like the graph interpreter, a value beyond the f32 range becomes inf after each node, as the
 * emitted graph's f32 tensors hold it (kiln_scalar_held). */
#include "kas.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tens {
    double *v;
    int64_t n;
    int64_t d[KAS_MAX_RANK];
    int     r;
    int64_t h, w; /* 1 x 1 for a matrix */
};

static bool
shape_of(const struct kas_shape *s, const int64_t *vals, int64_t H, int64_t W, struct tens *t)
{
    t->r = s->rank;
    t->n = 1;
    for (int k = 0; k < s->rank; k++) {
        if (!kas_mono_eval(s->d[k], vals, &t->d[k]))
            return false;
        t->n *= t->d[k];
    }
    t->h = s->spatial ? H / s->down : 1;
    t->w = s->spatial ? W / s->down : 1;
    t->n *= t->h * t->w;
    return t->n > 0 && t->n <= ((int64_t)1 << 26);
}

/* outer x d_i x inner split of t at dim i */
static void
split(const struct tens *t, int i, int64_t *outer, int64_t *inner)
{
    *outer = 1;
    *inner = t->h * t->w;
    for (int k = 0; k < i; k++)
        *outer *= t->d[k];
    for (int k = i + 1; k < t->r; k++)
        *inner *= t->d[k];
}

static double
binop(int op, double a, double b)
{
    switch ((enum kas_binop)op) {
    case KAS_ADD:
        return a + b;
    case KAS_SUB:
        return a - b;
    case KAS_MUL:
        return a * b;
    case KAS_MAX:
        return a > b ? a : b;
    case KAS_MIN:
        return a < b ? a : b;
    case KAS_NBINOP:
        break;
    }
    return 0;
}

static double
unop(int op, double x)
{
    switch ((enum kas_unop)op) {
    case KAS_RELU:
        return x > 0 ? x : 0;
    case KAS_GELU:
        return x * 0.5 * (1 + erf(x / sqrt(2.0)));
    case KAS_SIGMOID:
        return 1 / (1 + exp(-x));
    case KAS_TANH:
        return tanh(x);
    case KAS_ABS:
        return fabs(x);
    case KAS_EXP:
        return exp(x);
    case KAS_NEG:
        return -x;
    case KAS_SQRT:
        return sqrt(fabs(x));
    case KAS_SQUARE:
        return x * x;
    case KAS_NUNOP:
        break;
    }
    return 0;
}

static void
default_weights(const struct kas_design *d, int node, int64_t n, double *dst, int occurrence,
                int64_t fan_in)
{
    const struct kas_node *nd = &d->node[node];
    uint64_t               h = kiln_hash_u64(KILN_HASH_SEED, nd->prim);
    h = kiln_hash_u64(h, kas_node_attrs(nd));
    h = kiln_hash_u64(h, (uint64_t)n);
    h = kiln_hash_u64(h, (uint64_t)occurrence);
    struct kiln_rng rng = kiln_rng_new(h);
    double          bound = 1 / sqrt((double)(fan_in > 0 ? fan_in : 1));
    for (int64_t k = 0; k < n; k++)
        dst[k] = (2 * kiln_rng_uniform(&rng) - 1) * bound;
}

/* One node to run: its inputs a (and b), its output o (allocated by the caller), its weights
 * w and their dims (evaluated). */
struct kas_run {
    const struct kas_node *nd;
    const struct tens     *a, *b;
    struct tens           *o;
    const double          *w;
    const int64_t         *wdims;
};

bool
kas_run_input(const struct kas_run *r)
{
    (void)r;
    return true;
}

static bool
copy(const struct kas_run *r)
{
    memcpy(r->o->v, r->a->v, sizeof(double) * (size_t)r->a->n);
    return true;
}

bool
kas_run_group(const struct kas_run *r)
{
    return copy(r);
}

bool
kas_run_ungroup(const struct kas_run *r)
{
    return copy(r);
}

bool
kas_run_unfold(const struct kas_run *r)
{
    const struct tens *a = r->a;
    int                axes = r->nd->p.unfold.axes, k = r->nd->p.unfold.k;
    int                dil = r->nd->p.unfold.dilation;
    int64_t            P = a->n / (a->h * a->w), kh = (axes & KAS_AXIS_H) ? k : 1,
            kw = (axes & KAS_AXIS_W) ? k : 1;
    int64_t ph = (axes & KAS_AXIS_H) ? dil * (k - 1) / 2 : 0;
    int64_t pw = (axes & KAS_AXIS_W) ? dil * (k - 1) / 2 : 0;
    double *q = r->o->v;
    for (int64_t p = 0; p < P; p++)
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++)
                for (int64_t y = 0; y < a->h; y++)
                    for (int64_t x = 0; x < a->w; x++) {
                        int64_t sy = y + i * dil - ph, sx = x + j * dil - pw;
                        *q++ = (sy >= 0 && sy < a->h && sx >= 0 && sx < a->w)
                                   ? a->v[(p * a->h + sy) * a->w + sx]
                                   : 0.0;
                    }
    return true;
}

bool
kas_run_shift(const struct kas_run *r)
{
    const struct tens *a = r->a;
    int                axis = r->nd->p.shift.axis, off = r->nd->p.shift.offset;
    int64_t            P = a->n / (a->h * a->w);
    for (int64_t p = 0; p < P; p++)
        for (int64_t y = 0; y < a->h; y++)
            for (int64_t x = 0; x < a->w; x++) {
                int64_t sy = axis == 0 ? (y + off + a->h) % a->h : y;
                int64_t sx = axis == 1 ? (x + off + a->w) % a->w : x;
                r->o->v[(p * a->h + y) * a->w + x] = a->v[(p * a->h + sy) * a->w + sx];
            }
    return true;
}

bool
kas_run_scale(const struct kas_run *r)
{
    const struct tens *a = r->a;
    int64_t            S = a->h * a->w;
    for (int64_t k = 0; k < a->n; k++) {
        int64_t idx = k / S, wi = 0, ws = 1;
        for (int j = a->r - 1; j >= 0; j--) {
            int64_t c = idx % a->d[j];
            idx /= a->d[j];
            if (r->nd->p.scale.mask & (1 << j)) {
                wi += c * ws;
                ws *= a->d[j];
            }
        }
        r->o->v[k] = a->v[k] * r->w[wi];
    }
    return true;
}

bool
kas_run_fc(const struct kas_run *r)
{
    const struct tens *a = r->a;
    int                dim = r->nd->p.fc.dim;
    int64_t            outer, inner;
    split(a, dim, &outer, &inner);
    int64_t di = a->d[dim], m = r->o->d[dim];
    for (int64_t p = 0; p < outer; p++)
        for (int64_t k = 0; k < m; k++)
            for (int64_t q = 0; q < inner; q++) {
                double s = 0;
                for (int64_t c = 0; c < di; c++)
                    s += a->v[(p * di + c) * inner + q] * r->w[k * di + c];
                r->o->v[(p * m + k) * inner + q] = s;
            }
    return true;
}

bool
kas_run_conv(const struct kas_run *r)
{
    const struct tens *a = r->a;
    struct tens       *o = r->o;
    int64_t            cg = r->wdims[1]; /* the weight's dim 1 is C'/groups */
    if (cg <= 0 || a->d[0] % cg != 0)
        return false;
    int64_t g = a->d[0] / cg;
    if (o->d[0] % g != 0)
        return false;
    int64_t C = a->d[0], M = o->d[0], kh = r->nd->p.conv.kh, kw = r->nd->p.conv.kw, mg = M / g;
    cg = C / g;
    for (int64_t m = 0; m < M; m++)
        for (int64_t y = 0; y < a->h; y++)
            for (int64_t x = 0; x < a->w; x++) {
                double s = 0;
                for (int64_t c = 0; c < cg; c++)
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++) {
                            int64_t sy = y + i - kh / 2, sx = x + j - kw / 2;
                            if (sy < 0 || sy >= a->h || sx < 0 || sx >= a->w)
                                continue;
                            s += a->v[((m / mg * cg + c) * a->h + sy) * a->w + sx]
                                 * r->w[((m * cg + c) * kh + i) * kw + j];
                        }
                o->v[(m * a->h + y) * a->w + x] = s;
            }
    return true;
}

bool
kas_run_mix(const struct kas_run *r)
{
    const struct tens *a = r->a;
    int                mi = r->nd->p.mix.i, mj = r->nd->p.mix.j;
    int64_t            di2 = a->d[mi], dj = a->d[mj], m = r->o->d[mi];
    int64_t            o1 = 1, mid = 1, in2 = a->h * a->w;
    for (int k = 0; k < mi; k++)
        o1 *= a->d[k];
    for (int k = mi + 1; k < mj; k++)
        mid *= a->d[k];
    for (int k = mj + 1; k < a->r; k++)
        in2 *= a->d[k];
    for (int64_t p = 0; p < o1; p++)
        for (int64_t k = 0; k < m; k++)
            for (int64_t md = 0; md < mid; md++)
                for (int64_t q = 0; q < in2; q++) {
                    double s = 0;
                    for (int64_t c = 0; c < di2; c++)
                        for (int64_t j = 0; j < dj; j++)
                            s += a->v[(((p * di2 + c) * mid + md) * dj + j) * in2 + q]
                                 * r->w[(k * di2 + c) * dj + j];
                    r->o->v[((p * m + k) * mid + md) * in2 + q] = s;
                }
    return true;
}

bool
kas_run_gram(const struct kas_run *r)
{
    const struct tens *a = r->a, *b = r->b;
    int64_t            A = a->d[0], B = b->d[0], S = a->h * a->w;
    for (int64_t i = 0; i < A; i++)
        for (int64_t j = 0; j < B; j++) {
            double s = 0;
            for (int64_t q = 0; q < S; q++)
                s += a->v[i * S + q] * b->v[j * S + q];
            r->o->v[i * B + j] = s;
        }
    return true;
}

bool
kas_run_apply(const struct kas_run *r)
{
    const struct tens *a = r->a, *b = r->b;
    int64_t            A = a->d[0], B = a->d[1], S = b->n / B; /* h*w of a map, c of a matrix */
    for (int64_t i = 0; i < A; i++)
        for (int64_t q = 0; q < S; q++) {
            double s = 0;
            for (int64_t j = 0; j < B; j++)
                s += a->v[i * B + j] * b->v[j * S + q];
            r->o->v[i * S + q] = s;
        }
    return true;
}

bool
kas_run_binary(const struct kas_run *r)
{
    const struct tens *a = r->a, *b = r->b;
    struct tens       *o = r->o;
    int64_t            S = o->h * o->w;
    bool               ba = a->n != o->n, bb = b->n != o->n; /* broadcast over h, w */
    for (int64_t k = 0; k < o->n; k++)
        o->v[k] = binop(r->nd->p.binary.op, a->v[ba ? k / S : k], b->v[bb ? k / S : k]);
    return true;
}

bool
kas_run_fold(const struct kas_run *r)
{
    const struct tens *a = r->a;
    int                dim = r->nd->p.fold.dim, op = r->nd->p.fold.op;
    int64_t            outer, inner, di;
    if (dim == KAS_DIM_SPATIAL) {
        outer = a->n / (a->h * a->w);
        inner = 1;
        di = a->h * a->w;
    } else {
        split(a, dim, &outer, &inner);
        di = a->d[dim];
    }
    bool sp = dim == KAS_DIM_SPATIAL;
    for (int64_t p = 0; p < outer; p++)
        for (int64_t q = 0; q < inner; q++) {
            double s = op == KAS_FOLD_MAX ? -INFINITY : 0;
            for (int64_t c = 0; c < di; c++) {
                double v = sp ? a->v[p * di + c] : a->v[(p * di + c) * inner + q];
                if (op == KAS_FOLD_MAX)
                    s = v > s ? v : s;
                else
                    s += op == KAS_FOLD_MEAN ? v / (double)di : v;
            }
            r->o->v[p * inner + q] = s;
        }
    return true;
}

bool
kas_run_unary(const struct kas_run *r)
{
    for (int64_t k = 0; k < r->a->n; k++)
        r->o->v[k] = unop(r->nd->p.unary.op, r->a->v[k]);
    return true;
}

bool
kas_run_softmax(const struct kas_run *r)
{
    const struct tens *a = r->a;
    int                dim = r->nd->p.softmax.dim;
    int64_t            outer, inner, di;
    split(a, dim, &outer, &inner);
    di = a->d[dim];
    for (int64_t p = 0; p < outer; p++)
        for (int64_t q = 0; q < inner; q++) {
            double mx = -INFINITY, s = 0;
            for (int64_t c = 0; c < di; c++) {
                double v = a->v[(p * di + c) * inner + q];
                mx = v > mx ? v : mx;
            }
            for (int64_t c = 0; c < di; c++)
                s += exp(a->v[(p * di + c) * inner + q] - mx);
            for (int64_t c = 0; c < di; c++)
                r->o->v[(p * di + c) * inner + q] = exp(a->v[(p * di + c) * inner + q] - mx) / s;
        }
    return true;
}

bool
kas_run_pool(const struct kas_run *r)
{
    const struct tens *a = r->a;
    bool               avg = r->nd->p.pool.kind == KAS_POOL_AVG;
    int64_t            C = a->d[0], k = r->nd->p.pool.k, pd = k / 2;
    for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < a->h; y++)
            for (int64_t x = 0; x < a->w; x++) {
                double s = avg ? 0 : -INFINITY;
                for (int64_t i = 0; i < k; i++)
                    for (int64_t j = 0; j < k; j++) {
                        int64_t sy = y + i - pd, sx = x + j - pd;
                        if (sy < 0 || sy >= a->h || sx < 0 || sx >= a->w)
                            continue;
                        double v = a->v[(c * a->h + sy) * a->w + sx];
                        s = avg ? s + v : (v > s ? v : s);
                    }
                r->o->v[(c * a->h + y) * a->w + x] = avg ? s / (double)(k * k) : s;
            }
    return true;
}

bool
kas_run_downsample(const struct kas_run *r)
{
    const struct tens *a = r->a;
    struct tens       *o = r->o;
    int64_t            P = a->n / (a->h * a->w), f = r->nd->p.downsample.factor;
    for (int64_t p = 0; p < P; p++)
        for (int64_t y = 0; y < o->h; y++)
            for (int64_t x = 0; x < o->w; x++)
                o->v[(p * o->h + y) * o->w + x] = a->v[(p * a->h + y * f) * a->w + x * f];
    return true;
}

bool
kas_design_eval(const struct kas_design *d, const int64_t *vals, int64_t H, int64_t W,
                const double *x, kas_weight_fn wfn, void *ud, double *out)
{
    struct tens t[KAS_MAX_NODES];
    double     *wbuf[KAS_MAX_NODES] = {0};
    bool        ok = true;
    memset(t, 0, sizeof t);
    for (int i = 0; ok && i < d->nnode; i++) {
        const struct kas_node *nd = &d->node[i];
        ok = shape_of(&nd->out, vals, H, W, &t[i]);
        if (!ok)
            break;
        t[i].v = malloc(sizeof(double) * (size_t)t[i].n);
        if (!t[i].v) {
            ok = false;
            break;
        }
        if (i == 0) {
            memcpy(t[0].v, x, sizeof(double) * (size_t)t[0].n);
            continue;
        }
        struct kas_mono wd[KAS_MAX_WDIMS];
        int64_t         wdims[KAS_MAX_WDIMS] = {0};
        int             nw = kas_node_weight(d, i, wd);
        int64_t         wn = 1, fan = 1;
        for (int k = 0; k < nw && ok; k++) {
            int64_t v;
            ok = kas_mono_eval(wd[k], vals, &v);
            wdims[k] = v;
            wn *= v;
            if (k)
                fan *= v;
        }
        if (!ok)
            break;
        if (nd->prim == KAS_SCALE)
            fan = 1;
        if (nw) {
            wbuf[i] = malloc(sizeof(double) * (size_t)wn);
            if (!wbuf[i]) {
                ok = false;
                break;
            }
            if (wfn) {
                wfn(ud, i, wn, wbuf[i]);
            } else {
                int occ = 0;
                for (int j = 1; j < i; j++) {
                    const struct kas_node *o = &d->node[j];
                    occ += o->prim == nd->prim && kas_node_attrs(o) == kas_node_attrs(nd);
                }
                default_weights(d, i, wn, wbuf[i], occ, fan);
            }
        }
        const struct kas_run r = {nd,    &t[nd->in[0]], nd->nin == 2 ? &t[nd->in[1]] : NULL,
                                  &t[i], wbuf[i],       wdims};
        ok = kas_prims[nd->prim].run(&r);
        for (int64_t k = 0; ok && k < t[i].n; k++) /* an f32 tensor in the emitted graph */
            t[i].v[k] = kiln_scalar_held(t[i].v[k], KILN_DTYPE_F32);
    }
    if (ok)
        memcpy(out, t[d->nnode - 1].v, sizeof(double) * (size_t)t[d->nnode - 1].n);
    for (int i = 0; i < d->nnode; i++) {
        free(t[i].v);
        free(wbuf[i]);
    }
    return ok;
}

static uint64_t
quantize(uint64_t h, double v)
{
    if (!isfinite(v))
        return kiln_hash_u64(h, isnan(v) ? 1 : v > 0 ? 2 : 3);
    int    e;
    double m = frexp(v, &e);
    return kiln_hash_u64(kiln_hash_u64(h, (uint64_t)llround(m * 1073741824.0)), (uint64_t)e);
}

uint64_t
kas_design_fingerprint(const struct kas_design *d)
{
    static const int64_t trial[3][4] = {{8, 2, 4, 12}, {16, 4, 8, 24}, {12, 2, 6, 24}};
    /* big enough for every tap of the design's windows to land inside for some pixel:
     * half its local receptive field plus two, at least 8 */
    int reach = 1;
    for (int i = 0; i < d->nnode; i++) {
        const struct kas_node *n = &d->node[i];
        if (n->rf_h < 255 && n->rf_h > reach)
            reach = n->rf_h;
        if (n->rf_w < 255 && n->rf_w > reach)
            reach = n->rf_w;
    }
    int64_t spatial = (reach - 1) / 2 + 2;
    spatial = spatial < 8 ? 8 : spatial > 24 ? 24 : spatial + (spatial & 1);
    for (int tr = 0; tr < 3; tr++) {
        int64_t vals[KAS_NVAR];
        vals[KAS_C] = trial[tr][0];
        vals[KAS_K] = d->k_is_c ? trial[tr][0] : trial[tr][3];
        vals[KAS_G] = trial[tr][1];
        for (int u = KAS_X0; u < KAS_NVAR; u++)
            vals[u] = trial[tr][2];
        int64_t H = spatial, W = spatial, n = vals[KAS_C] * H * W;
        int64_t no = vals[KAS_K] * (H / d->stride) * (W / d->stride);
        double *x = malloc(sizeof(double) * (size_t)(n + no));
        if (!x)
            return 0;
        struct kiln_rng rng = kiln_rng_new(0x6b6173u);
        for (int64_t k = 0; k < n; k++)
            x[k] = 2 * kiln_rng_uniform(&rng) - 1;
        double *y = x + n;
        if (!kas_design_eval(d, vals, H, W, x, NULL, NULL, y)) {
            free(x);
            continue;
        }
        double s1 = 0, s2 = 0;
        for (int64_t k = 0; k < no; k++) {
            double r = 2 * kiln_rng_uniform(&rng) - 1;
            s1 += r * y[k];
            s2 += y[k] * y[k];
        }
        free(x);
        uint64_t h = quantize(quantize(KILN_HASH_SEED, s1), s2);
        return h ? h : 1;
    }
    return 0;
}
