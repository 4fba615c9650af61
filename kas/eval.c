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
 * of the emitted kiln graph and PyTorch module (kas/emit.c); tests/kas checks all three agree. */
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
    h = kiln_hash_u64(h, (uint64_t)(uint8_t)nd->a | (uint64_t)(uint8_t)nd->b << 8
                             | (uint64_t)(uint8_t)nd->c << 16);
    h = kiln_hash_u64(h, (uint64_t)n);
    h = kiln_hash_u64(h, (uint64_t)occurrence);
    struct kiln_rng rng = kiln_rng_new(h);
    double          bound = 1 / sqrt((double)(fan_in > 0 ? fan_in : 1));
    for (int64_t k = 0; k < n; k++)
        dst[k] = (2 * kiln_rng_uniform(&rng) - 1) * bound;
}

/* Runs one node: in[] inputs, o output (allocated by the caller), w weights. */
static void
run_node(const struct kas_node *nd, const struct tens *a, const struct tens *b, struct tens *o,
         const double *w)
{
    int64_t outer, inner, di;
    switch ((enum kas_prim)nd->prim) {
    case KAS_INPUT:
    case KAS_NPRIM:
        break;
    case KAS_GROUP:
    case KAS_UNGROUP:
        memcpy(o->v, a->v, sizeof(double) * (size_t)a->n);
        break;
    case KAS_UNFOLD: {
        int64_t P = a->n / (a->h * a->w), kh = (nd->a & 1) ? nd->b : 1,
                kw = (nd->a & 2) ? nd->b : 1;
        int64_t ph = (nd->a & 1) ? nd->c * (nd->b - 1) / 2 : 0;
        int64_t pw = (nd->a & 2) ? nd->c * (nd->b - 1) / 2 : 0;
        double *q = o->v;
        for (int64_t p = 0; p < P; p++)
            for (int64_t i = 0; i < kh; i++)
                for (int64_t j = 0; j < kw; j++)
                    for (int64_t y = 0; y < a->h; y++)
                        for (int64_t x = 0; x < a->w; x++) {
                            int64_t sy = y + i * nd->c - ph, sx = x + j * nd->c - pw;
                            *q++ = (sy >= 0 && sy < a->h && sx >= 0 && sx < a->w)
                                       ? a->v[(p * a->h + sy) * a->w + sx]
                                       : 0.0;
                        }
        break;
    }
    case KAS_SHIFT: {
        int64_t P = a->n / (a->h * a->w);
        for (int64_t p = 0; p < P; p++)
            for (int64_t y = 0; y < a->h; y++)
                for (int64_t x = 0; x < a->w; x++) {
                    int64_t sy = nd->a == 0 ? (y + nd->b + a->h) % a->h : y;
                    int64_t sx = nd->a == 1 ? (x + nd->b + a->w) % a->w : x;
                    o->v[(p * a->h + y) * a->w + x] = a->v[(p * a->h + sy) * a->w + sx];
                }
        break;
    }
    case KAS_SCALE: {
        int64_t S = a->h * a->w;
        for (int64_t k = 0; k < a->n; k++) {
            int64_t idx = k / S, wi = 0, ws = 1;
            for (int j = a->r - 1; j >= 0; j--) {
                int64_t c = idx % a->d[j];
                idx /= a->d[j];
                if (nd->a & (1 << j)) {
                    wi += c * ws;
                    ws *= a->d[j];
                }
            }
            o->v[k] = a->v[k] * w[wi];
        }
        break;
    }
    case KAS_FC: {
        split(a, nd->a, &outer, &inner);
        di = a->d[nd->a];
        int64_t m = o->d[nd->a];
        for (int64_t p = 0; p < outer; p++)
            for (int64_t k = 0; k < m; k++)
                for (int64_t q = 0; q < inner; q++) {
                    double s = 0;
                    for (int64_t c = 0; c < di; c++)
                        s += a->v[(p * di + c) * inner + q] * w[k * di + c];
                    o->v[(p * m + k) * inner + q] = s;
                }
        break;
    }
    case KAS_CONV: /* run_conv: needs the group count */
        break;
    case KAS_MIX: {
        int64_t di2 = a->d[nd->a], dj = a->d[nd->b], m = o->d[nd->a];
        int64_t o1 = 1, mid = 1, in2 = a->h * a->w;
        for (int k = 0; k < nd->a; k++)
            o1 *= a->d[k];
        for (int k = nd->a + 1; k < nd->b; k++)
            mid *= a->d[k];
        for (int k = nd->b + 1; k < a->r; k++)
            in2 *= a->d[k];
        for (int64_t p = 0; p < o1; p++)
            for (int64_t k = 0; k < m; k++)
                for (int64_t md = 0; md < mid; md++)
                    for (int64_t q = 0; q < in2; q++) {
                        double s = 0;
                        for (int64_t c = 0; c < di2; c++)
                            for (int64_t j = 0; j < dj; j++)
                                s += a->v[(((p * di2 + c) * mid + md) * dj + j) * in2 + q]
                                     * w[(k * di2 + c) * dj + j];
                        o->v[((p * m + k) * mid + md) * in2 + q] = s;
                    }
        break;
    }
    case KAS_GRAM: {
        int64_t A = a->d[0], B = b->d[0], S = a->h * a->w;
        for (int64_t i = 0; i < A; i++)
            for (int64_t j = 0; j < B; j++) {
                double s = 0;
                for (int64_t q = 0; q < S; q++)
                    s += a->v[i * S + q] * b->v[j * S + q];
                o->v[i * B + j] = s;
            }
        break;
    }
    case KAS_APPLY: {
        int64_t A = a->d[0], B = a->d[1], S = b->n / B; /* h*w of a map, c of a matrix */
        for (int64_t i = 0; i < A; i++)
            for (int64_t q = 0; q < S; q++) {
                double s = 0;
                for (int64_t j = 0; j < B; j++)
                    s += a->v[i * B + j] * b->v[j * S + q];
                o->v[i * S + q] = s;
            }
        break;
    }
    case KAS_BINARY: {
        int64_t S = o->h * o->w;
        bool    ba = a->n != o->n, bb = b->n != o->n; /* broadcast over h, w */
        for (int64_t k = 0; k < o->n; k++)
            o->v[k] = binop(nd->a, a->v[ba ? k / S : k], b->v[bb ? k / S : k]);
        break;
    }
    case KAS_FOLD: {
        if (nd->a == KAS_DIM_SPATIAL) {
            outer = a->n / (a->h * a->w);
            inner = 1;
            di = a->h * a->w;
        } else {
            split(a, nd->a, &outer, &inner);
            di = a->d[nd->a];
        }
        bool sp = nd->a == KAS_DIM_SPATIAL;
        for (int64_t p = 0; p < outer; p++)
            for (int64_t q = 0; q < inner; q++) {
                double s = nd->b == KAS_FOLD_MAX ? -INFINITY : 0;
                for (int64_t c = 0; c < di; c++) {
                    double v = sp ? a->v[p * di + c] : a->v[(p * di + c) * inner + q];
                    if (nd->b == KAS_FOLD_MAX)
                        s = v > s ? v : s;
                    else
                        s += nd->b == KAS_FOLD_MEAN ? v / (double)di : v;
                }
                o->v[p * inner + q] = s;
            }
        break;
    }
    case KAS_UNARY:
        for (int64_t k = 0; k < a->n; k++)
            o->v[k] = unop(nd->a, a->v[k]);
        break;
    case KAS_SOFTMAX:
        split(a, nd->a, &outer, &inner);
        di = a->d[nd->a];
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
                    o->v[(p * di + c) * inner + q] = exp(a->v[(p * di + c) * inner + q] - mx) / s;
            }
        break;
    case KAS_POOL: {
        int64_t C = a->d[0], k = nd->b, pd = k / 2;
        for (int64_t c = 0; c < C; c++)
            for (int64_t y = 0; y < a->h; y++)
                for (int64_t x = 0; x < a->w; x++) {
                    double s = nd->a == 0 ? 0 : -INFINITY;
                    for (int64_t i = 0; i < k; i++)
                        for (int64_t j = 0; j < k; j++) {
                            int64_t sy = y + i - pd, sx = x + j - pd;
                            if (sy < 0 || sy >= a->h || sx < 0 || sx >= a->w)
                                continue;
                            double v = a->v[(c * a->h + sy) * a->w + sx];
                            s = nd->a == 0 ? s + v : (v > s ? v : s);
                        }
                    o->v[(c * a->h + y) * a->w + x] = nd->a == 0 ? s / (double)(k * k) : s;
                }
        break;
    }
    case KAS_DOWNSAMPLE: {
        int64_t P = a->n / (a->h * a->w), f = nd->b;
        for (int64_t p = 0; p < P; p++)
            for (int64_t y = 0; y < o->h; y++)
                for (int64_t x = 0; x < o->w; x++)
                    o->v[(p * o->h + y) * o->w + x] = a->v[(p * a->h + y * f) * a->w + x * f];
        break;
    }
    }
}

static void
run_conv(const struct kas_node *nd, const struct tens *a, struct tens *o, const double *w,
         int64_t g)
{
    int64_t C = a->d[0], M = o->d[0], kh = nd->b, kw = nd->c, cg = C / g, mg = M / g;
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
                                 * w[((m * cg + c) * kh + i) * kw + j];
                        }
                o->v[(m * a->h + y) * a->w + x] = s;
            }
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
        int             nw = kas_node_weight(d, i, wd);
        int64_t         wn = 1, fan = 1;
        for (int k = 0; k < nw && ok; k++) {
            int64_t v;
            ok = kas_mono_eval(wd[k], vals, &v);
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
                    occ += o->prim == nd->prim && o->a == nd->a && o->b == nd->b && o->c == nd->c;
                }
                default_weights(d, i, wn, wbuf[i], occ, fan);
            }
        }
        const struct tens *b = nd->nin == 2 ? &t[nd->in[1]] : NULL;
        if (nd->prim == KAS_CONV) {
            int64_t cg, g; /* the weight's dim 1 is C'/groups */
            ok = kas_mono_eval(wd[1], vals, &cg) && cg > 0 && t[nd->in[0]].d[0] % cg == 0;
            if (!ok)
                break;
            g = t[nd->in[0]].d[0] / cg;
            ok = t[i].d[0] % g == 0;
            if (ok)
                run_conv(nd, &t[nd->in[0]], &t[i], wbuf[i], g);
        } else {
            run_node(nd, &t[nd->in[0]], b, &t[i], wbuf[i]);
        }
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
