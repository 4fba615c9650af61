/* kas/sample.c -- the constructive sampler: grows designs primitive by primitive, keeping
 * every partial design legal and able to reach the output shape, closes it, and filters
 * and deduplicates the result.
 *
 * Growth. A design's *frontier* is its nodes no other node reads. Each step proposes a random
 * primitive on a frontier node (sometimes on any node: a fork), applies its shape rule and
 * equations on a copy, and keeps it only when the shape distance of the new frontier still fits
 * in the steps left. The shape distance is exactly the number of steps the closing procedure
 * takes: per frontier tensor, one fold per non-spatial dim beyond the first, one downsample if
 * its spatial size is above the output's, one fc if its channel size cannot be unified with
 * the output's K; one binary merge per extra frontier tensor; one depthwise 3x3 convolution if
 * the design holds no weight or its receptive field is below the minimum. So growth never
 * enters a dead end and every node feeds the output (no dead branches). Redundant pairs
 * (relu(relu x), abs(neg x), shift(+1) after shift(-1), ungroup after group, softmax twice, ...)
 * are never proposed.
 *
 * Deduplication. The canonical hash hashes every node from its primitive, attributes, symbolic
 * output sizes and its inputs' hashes (sorted for commutative binary operations). The output
 * fingerprint (kas/eval.c) catches designs that differ in structure but compute the same
 * function. Both are kept in open-addressing sets for the sampler's lifetime. */
#include "kas.h"

#include <stdlib.h>
#include <string.h>

#define INF_DIST 1000

static struct kas_mono
target_of(const struct kas_design *d)
{
    return kas_mono_var(d->k_is_c ? KAS_C : KAS_K);
}

static bool
has_weight(const struct kas_design *d)
{
    struct kas_mono w[KAS_MAX_WDIMS];
    for (int i = 1; i < d->nnode; i++)
        if (kas_node_weight(d, i, w))
            return true;
    return false;
}

int
kas_design_rf(const struct kas_design *d)
{
    int h = 0, w = 0;
    for (int i = 0; i < d->nnode; i++)
        if (!d->node[i].nuse) {
            h = d->node[i].rf_h > h ? d->node[i].rf_h : h;
            w = d->node[i].rf_w > w ? d->node[i].rf_w : w;
        }
    return h < w ? h : w;
}

/* Depthwise convolutions the closing procedure adds for a missing weight or receptive field
 * (a k x k window adds k - 1, k <= 7). */
static int
rf_convs(const struct kas_spec *s, const struct kas_design *d)
{
    int rf = kas_design_rf(d);
    if (rf >= s->min_rf)
        return has_weight(d) ? 0 : 1;
    return (s->min_rf - rf + 5) / 6;
}

/* Steps the closing procedure needs (INF_DIST if it cannot close). */
static int
shape_dist(const struct kas_spec *s, const struct kas_design *d)
{
    int             total = 0, nlive = 0, nmaps = 0;
    struct kas_mono tgt = target_of(d);
    for (int i = 0; i < d->nnode; i++) {
        const struct kas_node *n = &d->node[i];
        if (n->nuse)
            continue;
        nlive++;
        if (n->out.spatial) {
            nmaps++;
            if (n->out.down > s->stride)
                return INF_DIST;
            total += n->out.down < s->stride;
        }
        total += n->out.rank - 1;
        total += !kas_solver_can_unify(&d->sol, n->out.d[0], tgt);
    }
    if (!nmaps) /* the input is read again, brought to the output's shape and merged */
        total += 1 + (s->stride > 1) + !kas_solver_can_unify(&d->sol, kas_mono_var(KAS_C), tgt);
    total += nlive - 1;
    return total + rf_convs(s, d);
}

static bool
redundant(const struct kas_design *d, const struct kas_node *nd)
{
    const struct kas_node *p = &d->node[nd->in[0]];
    if (nd->prim == KAS_UNARY && p->prim == KAS_UNARY) {
        int c = nd->p.unary.op, q = p->p.unary.op;
        if (c == q && (c == KAS_RELU || c == KAS_ABS || c == KAS_NEG))
            return true;
        if ((c == KAS_ABS || c == KAS_SQRT || c == KAS_SQUARE) && (q == KAS_ABS || q == KAS_NEG))
            return true;
        if ((c == KAS_ABS && q == KAS_RELU) || (c == KAS_RELU && q == KAS_ABS))
            return true;
        if ((c == KAS_RELU || c == KAS_ABS)
            && (q == KAS_EXP || q == KAS_SIGMOID || q == KAS_SQUARE || q == KAS_SQRT))
            return true;
    }
    if (nd->prim == p->prim && nd->prim == KAS_SOFTMAX && nd->p.softmax.dim == p->p.softmax.dim)
        return true;
    if (nd->prim == p->prim && nd->prim == KAS_SCALE && nd->p.scale.mask == p->p.scale.mask)
        return true;
    if (nd->prim == KAS_SHIFT && p->prim == KAS_SHIFT && nd->p.shift.axis == p->p.shift.axis
        && nd->p.shift.offset == -p->p.shift.offset)
        return true;
    if (nd->prim == KAS_UNGROUP && p->prim == KAS_GROUP && nd->p.ungroup.dim == p->p.group.dim)
        return true;
    if (nd->prim == KAS_GROUP && p->prim == KAS_UNGROUP && nd->p.group.dim == p->p.ungroup.dim)
        return true;
    if (nd->prim == KAS_BINARY && nd->in[0] == nd->in[1])
        return true;
    return false;
}

/* Applies nd to a copy of d; keeps it when legal, not redundant and within the steps left. */
static bool
try_step(const struct kas_spec *s, struct kas_design *d, struct kas_node nd, int left)
{
    if (redundant(d, &nd))
        return false;
    struct kas_design c = *d;
    for (int v = KAS_X0; v < KAS_NVAR; v++) { /* a script may name a new unknown */
        enum kas_var fresh;
        if (nd.m.e[v] && v - KAS_X0 >= c.sol.nunk
            && (v - KAS_X0 != c.sol.nunk || !kas_solver_fresh(&c.sol, &fresh)))
            return false;
    }
    if (kas_design_add(&c, nd) < 0)
        return false;
    if (shape_dist(s, &c) > left - 1)
        return false;
    *d = c;
    return true;
}

static int
pick_live(const struct kas_design *d, struct kiln_rng *rng, bool any)
{
    int live[KAS_MAX_NODES], n = 0;
    for (int i = 0; i < d->nnode; i++)
        if (any || !d->node[i].nuse)
            live[n++] = i;
    return n ? live[kiln_rng_below(rng, (uint64_t)n)] : 0;
}

/* A new size for fc, conv and mix outputs. */
static struct kas_mono
pick_size(struct kas_design *c, struct kiln_rng *rng)
{
    switch (kiln_rng_below(rng, 5)) {
    case 0:
        return target_of(c);
    case 1:
        return kas_mono_var(KAS_C);
    case 2:
    case 3:
        if (c->sol.nunk < KAS_MAX_UNKNOWN)
            return kas_mono_var((enum kas_var)(KAS_X0 + c->sol.nunk));
        break;
    default:
        break;
    }
    for (int i = c->sol.nunk - 1; i >= 0; i--)
        if (!c->sol.solved[i])
            return kas_mono_var((enum kas_var)(KAS_X0 + i));
    return target_of(c);
}

static const int win[] = {3, 5, 7};

/* A node being drawn: its kind, nin and first input already chosen (in: that input's shape,
 * rank at least 1); the propose function of the kind draws the rest. The order of the draws
 * is part of the sampler's output for a seed. */
struct kas_proposal {
    const struct kas_spec  *s;
    struct kas_design      *d;
    struct kiln_rng        *rng;
    struct kas_node        *nd;
    const struct kas_shape *in;
    int                     rank;
};

void
kas_propose_input(struct kas_proposal *p)
{
    (void)p;
}

void
kas_propose_unfold(struct kas_proposal *p)
{
    struct kiln_rng *rng = p->rng;
    p->nd->p.unfold.axes = (int8_t)(1 + kiln_rng_below(rng, 3));
    p->nd->p.unfold.k = (int8_t)win[kiln_rng_below(rng, 4) == 0 ? 1 + kiln_rng_below(rng, 2) : 0];
    p->nd->p.unfold.dilation =
        (int8_t)(kiln_rng_below(rng, 4) == 0 ? 2 + kiln_rng_below(rng, 2) : 1);
}

void
kas_propose_shift(struct kas_proposal *p)
{
    p->nd->p.shift.axis = (int8_t)kiln_rng_below(p->rng, 2);
    p->nd->p.shift.offset = kiln_rng_below(p->rng, 2) ? 1 : -1;
}

void
kas_propose_group(struct kas_proposal *p)
{
    p->nd->p.group.dim = (int8_t)kiln_rng_below(p->rng, (uint64_t)p->rank);
    p->nd->m = kas_mono_var(KAS_G);
}

void
kas_propose_scale(struct kas_proposal *p) /* one dim, or any non-empty set of dims */
{
    struct kiln_rng *rng = p->rng;
    int              rank = p->rank;
    p->nd->p.scale.mask = (int8_t)(rank == 1 || kiln_rng_below(rng, 2)
                                       ? 1 << kiln_rng_below(rng, (uint64_t)rank)
                                       : 1 + (int)kiln_rng_below(rng, (uint64_t)((1 << rank) - 1)));
}

void
kas_propose_ungroup(struct kas_proposal *p)
{
    p->nd->p.ungroup.dim = (int8_t)kiln_rng_below(p->rng, (uint64_t)p->rank);
}

void
kas_propose_softmax(struct kas_proposal *p)
{
    p->nd->p.softmax.dim = (int8_t)kiln_rng_below(p->rng, (uint64_t)p->rank);
}

void
kas_propose_fc(struct kas_proposal *p)
{
    p->nd->p.fc.dim = (int8_t)kiln_rng_below(p->rng, (uint64_t)p->rank);
    p->nd->m = pick_size(p->d, p->rng);
}

void
kas_propose_conv(struct kas_proposal *p)
{
    static const int8_t kk[][2] = {{3, 3}, {3, 3}, {1, 3}, {3, 1}, {5, 5}, {1, 5}, {5, 1}, {1, 1}};
    struct kiln_rng    *rng = p->rng;
    struct kas_node    *nd = p->nd;
    int                 k = (int)kiln_rng_below(rng, KILN_COUNTOF(kk));
    nd->p.conv.kh = kk[k][0];
    nd->p.conv.kw = kk[k][1];
    nd->p.conv.kind = (int8_t)kiln_rng_below(rng, 3);
    nd->m = nd->p.conv.kind == KAS_CONV_GROUPED && kiln_rng_below(rng, 2) ? p->in->d[0]
                                                                          : pick_size(p->d, rng);
}

void
kas_propose_mix(struct kas_proposal *p)
{
    struct kiln_rng *rng = p->rng;
    struct kas_node *nd = p->nd;
    int              rank = p->rank;
    nd->p.mix.i = (int8_t)kiln_rng_below(rng, (uint64_t)rank);
    nd->p.mix.j =
        (int8_t)(nd->p.mix.i + 1
                 + (int)kiln_rng_below(
                     rng, (uint64_t)(rank - nd->p.mix.i > 1 ? rank - nd->p.mix.i - 1 : 1)));
    nd->m = pick_size(p->d, rng);
}

/* The second input of a binary kind: a frontier node, or (one in two) any node. */
static void
second_input(struct kas_proposal *p)
{
    p->nd->in[1] = (uint8_t)pick_live(p->d, p->rng, kiln_rng_below(p->rng, 2) == 0);
}

void
kas_propose_gram(struct kas_proposal *p)
{
    second_input(p);
}

void
kas_propose_apply(struct kas_proposal *p)
{
    const struct kas_design *d = p->d;
    struct kas_node         *nd = p->nd;
    second_input(p);
    if (!d->node[nd->in[0]].out.spatial && d->node[nd->in[1]].out.spatial)
        return;
    for (int i = d->nnode - 1; i >= 0; i--) /* look for a matrix anywhere */
        if (!d->node[i].out.spatial && d->node[i].out.rank == 2) {
            nd->in[0] = (uint8_t)i;
            break;
        }
}

static int8_t
pick_binop(struct kiln_rng *rng)
{
    return (int8_t)(kiln_rng_below(rng, 2) ? KAS_ADD : kiln_rng_below(rng, KAS_NBINOP));
}

void
kas_propose_binary(struct kas_proposal *p)
{
    second_input(p);
    p->nd->p.binary.op = pick_binop(p->rng);
}

void
kas_propose_fold(struct kas_proposal *p)
{
    struct kiln_rng *rng = p->rng;
    p->nd->p.fold.dim =
        (int8_t)(kiln_rng_below(rng, 6) == 0 ? KAS_DIM_SPATIAL
                                             : (int)kiln_rng_below(rng, (uint64_t)p->rank));
    p->nd->p.fold.op = (int8_t)kiln_rng_below(rng, KAS_NFOLD);
}

void
kas_propose_unary(struct kas_proposal *p)
{
    struct kiln_rng *rng = p->rng;
    p->nd->p.unary.op =
        (int8_t)(kiln_rng_below(rng, 3) ? kiln_rng_below(rng, 4) : kiln_rng_below(rng, KAS_NUNOP));
}

void
kas_propose_pool(struct kas_proposal *p)
{
    p->nd->p.pool.kind = (int8_t)kiln_rng_below(p->rng, 2);
    p->nd->p.pool.k = 3;
}

void
kas_propose_downsample(struct kas_proposal *p)
{
    p->nd->p.downsample.factor = 2;
}

/* A random proposal (not yet checked). */
static struct kas_node
propose(const struct kas_spec *s, struct kas_design *d, struct kiln_rng *rng)
{
    int total = 0, r;
    for (int p = 1; p < KAS_NPRIM; p++)
        total += kas_prims[p].sample_weight;
    r = (int)kiln_rng_below(rng, (uint64_t)total);
    int p = 1;
    while (r >= kas_prims[p].sample_weight)
        r -= kas_prims[p++].sample_weight;
    struct kas_node nd;
    memset(&nd, 0, sizeof nd);
    nd.prim = (uint8_t)p;
    nd.nin = kas_prims[p].nin;
    nd.in[0] = (uint8_t)pick_live(d, rng, kiln_rng_below(rng, 8) == 0);
    const struct kas_shape *in = &d->node[nd.in[0]].out;
    struct kas_proposal     pr = {s, d, rng, &nd, in, in->rank ? in->rank : 1};
    kas_prims[p].propose(&pr);
    return nd;
}

/* Closes d: reduces every frontier tensor to [target] (+ spatial at the output size), merges
 * them, and adds a depthwise 3x3 convolution if weights or receptive field are missing. */
static bool
close_design(const struct kas_spec *s, struct kas_design *d, struct kiln_rng *rng)
{
    struct kas_mono tgt = target_of(d);
    int             live[KAS_MAX_NODES], nlive = 0;
    bool            map = false;
    for (int i = 0; i < d->nnode; i++)
        if (!d->node[i].nuse) {
            live[nlive++] = i;
            map = map || d->node[i].out.spatial;
        }
    if (!map)
        live[nlive++] = 0;
    int ready[KAS_MAX_NODES], nready = 0;
    for (int k = 0; k < nlive; k++) {
        int cur = live[k];
        while (d->node[cur].out.rank > 1) {
            struct kas_node f = {.prim = KAS_FOLD, .nin = 1};
            f.in[0] = (uint8_t)cur;
            f.p.fold.dim = (int8_t)(d->node[cur].out.rank - 1);
            f.p.fold.op = (int8_t)kiln_rng_below(rng, KAS_NFOLD);
            if ((cur = kas_design_add(d, f)) < 0)
                return false;
        }
        if (d->node[cur].out.spatial && d->node[cur].out.down < s->stride) {
            struct kas_node f = {.prim = KAS_DOWNSAMPLE, .nin = 1, .p.downsample.factor = 2};
            f.in[0] = (uint8_t)cur;
            if ((cur = kas_design_add(d, f)) < 0)
                return false;
        }
        if (!kas_solver_can_unify(&d->sol, d->node[cur].out.d[0], tgt)) {
            struct kas_node f = {.prim = KAS_FC, .nin = 1, .m = tgt};
            f.in[0] = (uint8_t)cur;
            if ((cur = kas_design_add(d, f)) < 0)
                return false;
        }
        if (!kas_solver_unify(&d->sol, d->node[cur].out.d[0], tgt))
            return false;
        kas_design_resolve(d);
        ready[nready++] = cur;
    }
    /* maps first, so the accumulator is a map */
    int acc = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < nready; k++) {
            if (d->node[ready[k]].out.spatial != (pass == 0))
                continue;
            if (acc < 0) {
                acc = ready[k];
                continue;
            }
            struct kas_node b = {.prim = KAS_BINARY, .nin = 2};
            b.in[0] = (uint8_t)acc;
            b.in[1] = (uint8_t)ready[k];
            b.p.binary.op = pick_binop(rng);
            if ((acc = kas_design_add(d, b)) < 0)
                return false;
        }
    if (acc < 0 || !d->node[acc].out.spatial)
        return false;
    while (!has_weight(d) || kas_design_rf(d) < s->min_rf) {
        int need = s->min_rf - kas_design_rf(d), k = need < 2 ? 3 : need + 1 + (need % 2);
        struct kas_node c = {.prim = KAS_CONV, .nin = 1, .p.conv.kind = KAS_CONV_DEPTHWISE};
        c.p.conv.kh = c.p.conv.kw = (int8_t)(k > 7 ? 7 : k);
        c.in[0] = (uint8_t)acc;
        if ((acc = kas_design_add(d, c)) < 0)
            return false;
    }
    return acc == d->nnode - 1 && d->node[acc].out.rank == 1 && d->node[acc].out.down == s->stride
           && kas_mono_eq(d->node[acc].out.d[0], tgt);
}

static bool
k_is_c(const struct kas_spec *s)
{
    for (uint32_t p = 0; p < s->nph; p++)
        if (s->ph[p].K != s->ph[p].C)
            return false;
    return true;
}

bool
kas_grow(const struct kas_spec *s, struct kiln_rng *rng, struct kas_design *d)
{
    kas_design_init(d, k_is_c(s), s->stride);
    int len = 1 + (int)kiln_rng_below(rng, (uint64_t)s->max_ops);
    for (int step = 0; step < len; step++) {
        int  left = len - (d->nnode - 1);
        bool done = false;
        if (left <= 0 || (left <= shape_dist(s, d) && kiln_rng_below(rng, 2)))
            break;
        for (int t = 0; t < 32 && !done; t++)
            done = try_step(s, d, propose(s, d, rng), left);
        if (!done)
            break;
    }
    return close_design(s, d, rng);
}

bool
kas_grow_script(const struct kas_spec *s, const struct kas_node *script, int n,
                struct kas_design *d)
{
    struct kiln_rng rng = kiln_rng_new(0);
    kas_design_init(d, k_is_c(s), s->stride);
    for (int i = 0; i < n; i++)
        if (!try_step(s, d, script[i], n - i + KAS_MAX_NODES))
            return false;
    return close_design(s, d, &rng);
}

/* A size with its unknowns renamed by perm (perm[u]: canonical index), or with every unknown
 * erased when perm is NULL (their total degree kept). */
static struct kas_mono
rename_unknowns(struct kas_mono m, const int *perm)
{
    struct kas_mono r = m;
    int             deg = 0;
    for (int u = 0; u < KAS_MAX_UNKNOWN; u++) {
        deg += m.e[KAS_X0 + u];
        r.e[KAS_X0 + u] = 0;
    }
    for (int u = 0; u < KAS_MAX_UNKNOWN; u++)
        if (perm && m.e[KAS_X0 + u])
            r.e[KAS_X0 + perm[u]] = m.e[KAS_X0 + u];
    if (!perm)
        r.e[KAS_X0] = (int8_t)deg;
    return r;
}

/* Merkle hashes of the nodes: primitive, attributes, sizes, inputs (commutative ones ordered). */
static void
node_hashes(const struct kas_design *d, const int *perm, uint64_t *h)
{
    for (int i = 0; i < d->nnode; i++) {
        const struct kas_node *n = &d->node[i];
        uint64_t               x = kiln_hash_u64(KILN_HASH_SEED, n->prim);
        x = kiln_hash_u64(x, kas_node_attrs(n) | (uint64_t)n->out.down << 24
                                 | (uint64_t)n->out.spatial << 32);
        x = kas_mono_hash(x, rename_unknowns(n->m, perm));
        for (int k = 0; k < n->out.rank; k++)
            x = kas_mono_hash(x, rename_unknowns(n->out.d[k], perm));
        uint64_t a = n->nin > 0 ? h[n->in[0]] : 0, b = n->nin > 1 ? h[n->in[1]] : 0;
        if (n->prim == KAS_BINARY && n->p.binary.op != KAS_SUB && a > b) {
            uint64_t t = a;
            a = b;
            b = t;
        }
        h[i] = kiln_hash_u64(kiln_hash_u64(x, a), b);
    }
}

/* Labels unknowns in the order a walk from the output meets them, inputs visited in the order
 * of their unknown-blind hashes, so the labels do not depend on the order of growth. */
static void
label_unknowns(const struct kas_design *d, const uint64_t *blind, int i, bool *seen, int *perm,
               int *next)
{
    if (seen[i])
        return;
    seen[i] = true;
    const struct kas_node *n = &d->node[i];
    for (int k = -1; k < n->out.rank; k++) {
        struct kas_mono m = k < 0 ? n->m : n->out.d[k];
        for (int u = 0; u < KAS_MAX_UNKNOWN; u++)
            if (m.e[KAS_X0 + u] && perm[u] < 0)
                perm[u] = (*next)++;
    }
    int first = 0;
    if (n->nin == 2 && n->prim == KAS_BINARY && n->p.binary.op != KAS_SUB
        && blind[n->in[1]] < blind[n->in[0]])
        first = 1;
    for (int k = 0; k < n->nin; k++)
        label_unknowns(d, blind, n->in[(k + first) % n->nin], seen, perm, next);
}

uint64_t
kas_design_hash(struct kas_design *d)
{
    uint64_t blind[KAS_MAX_NODES], h[KAS_MAX_NODES];
    bool     seen[KAS_MAX_NODES] = {0};
    int      perm[KAS_MAX_UNKNOWN], next = 0;
    for (int u = 0; u < KAS_MAX_UNKNOWN; u++)
        perm[u] = -1;
    node_hashes(d, NULL, blind);
    label_unknowns(d, blind, d->nnode - 1, seen, perm, &next);
    for (int u = 0; u < KAS_MAX_UNKNOWN; u++)
        if (perm[u] < 0)
            perm[u] = next++;
    node_hashes(d, perm, h);
    d->hash = kiln_hash_u64(h[d->nnode - 1], (uint64_t)d->k_is_c | (uint64_t)d->stride << 1);
    return d->hash;
}

static bool
redundant_pairs_absent(const struct kas_design *d)
{
    for (int i = 1; i < d->nnode; i++)
        if (redundant(d, &d->node[i]))
            return false;
    return true;
}

bool
kas_design_filter(const struct kas_spec *s, const struct kas_design *d)
{
    return has_weight(d) && kas_design_rf(d) >= s->min_rf && redundant_pairs_absent(d);
}

/* ---- the sampler ---- */

/* Open-addressing sets of 64-bit keys in the context's allocator. */
struct hset {
    uint64_t *key;
    uint32_t  cap, n;
};

static bool
hset_add(kiln_ctx *ctx, struct hset *s, uint64_t k) /* true when new; k != 0 */
{
    if (2 * (s->n + 1) > s->cap) {
        uint32_t  ncap = s->cap ? 2 * s->cap : 1024;
        uint64_t *nk = kiln_mem_realloc(ctx, NULL, 0, sizeof *nk * ncap);
        if (!nk) { /* cannot remember it: count it as new rather than fail the sample */
            KILN_FAIL(ctx, KILN_ERR_NOMEM, "kas", "out of memory for the duplicate sets");
            return true;
        }
        memset(nk, 0, sizeof *nk * ncap);
        for (uint32_t i = 0; i < s->cap; i++)
            if (s->key[i]) {
                uint32_t j = (uint32_t)kiln_mix64(s->key[i]) & (ncap - 1);
                while (nk[j])
                    j = (j + 1) & (ncap - 1);
                nk[j] = s->key[i];
            }
        kiln_mem_free(ctx, s->key, sizeof *s->key * s->cap);
        s->key = nk;
        s->cap = ncap;
    }
    uint32_t i = (uint32_t)kiln_mix64(k) & (s->cap - 1);
    for (; s->key[i]; i = (i + 1) & (s->cap - 1))
        if (s->key[i] == k)
            return false;
    s->key[i] = k;
    s->n++;
    return true;
}

struct kas_sampler {
    kiln_ctx        *ctx;
    struct kas_spec  spec;
    struct kiln_rng  rng;
    struct kas_stats st;
    struct hset      hashes, fps;
};

struct kas_sampler *
kas_sampler_new(kiln_ctx *ctx, const struct kas_spec *s, uint64_t seed)
{
    struct kas_sampler *sm = kiln_mem_realloc(ctx, NULL, 0, sizeof *sm);
    if (!sm) {
        KILN_FAIL(ctx, KILN_ERR_NOMEM, "kas", "out of memory for the sampler");
        return NULL;
    }
    memset(sm, 0, sizeof *sm);
    sm->ctx = ctx;
    sm->spec = *s;
    sm->rng = kiln_rng_new(seed);
    return sm;
}

void
kas_sampler_free(struct kas_sampler *sm)
{
    if (!sm)
        return;
    kiln_ctx *ctx = sm->ctx;
    kiln_mem_free(ctx, sm->hashes.key, sizeof *sm->hashes.key * sm->hashes.cap);
    kiln_mem_free(ctx, sm->fps.key, sizeof *sm->fps.key * sm->fps.cap);
    kiln_mem_free(ctx, sm, sizeof *sm);
}

const struct kas_stats *
kas_sampler_stats(const struct kas_sampler *sm)
{
    return &sm->st;
}

bool
kas_sampler_next(struct kas_sampler *sm, struct kas_design *out, uint32_t max_tries)
{
    for (uint32_t t = 0; t < max_tries; t++) {
        sm->st.attempts++;
        if (!kas_grow(&sm->spec, &sm->rng, out)) {
            sm->st.illegal++;
            continue;
        }
        if (!kas_design_filter(&sm->spec, out)) {
            sm->st.filtered++;
            continue;
        }
        if (!hset_add(sm->ctx, &sm->hashes, kas_design_hash(out) | 1)) {
            sm->st.dup_hash++;
            continue;
        }
        if (!kas_budget_solve(&sm->spec, out, &sm->rng)) {
            sm->st.over_budget++;
            continue;
        }
        out->fingerprint = sm->spec.no_fingerprint ? 0 : kas_design_fingerprint(out);
        if (out->fingerprint && !hset_add(sm->ctx, &sm->fps, out->fingerprint)) {
            sm->st.dup_fp++;
            continue;
        }
        sm->st.accepted++;
        return true;
    }
    return false;
}
