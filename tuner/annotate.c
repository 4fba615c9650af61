/* tuner/annotate.c -- programs of a sketch: random annotation (sampling knob values), validity,
 * mutation, crossover, Droplet neighbours, hashing and JSON. */
#include "sketch_priv.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Divisors of n in increasing order (at most max of them). */
static uint32_t
divisors(int64_t n, int64_t *out, uint32_t max)
{
    uint32_t lo = 0, hi = 0;
    int64_t  big[256];
    for (int64_t d = 1; d * d <= n && lo < max && hi < KILN_COUNTOF(big); d++)
        if (n % d == 0) {
            out[lo++] = d;
            if (d != n / d)
                big[hi++] = n / d;
        }
    while (hi > 0 && lo < max)
        out[lo++] = big[--hi];
    return lo;
}

static int64_t
pick(struct kiln_rng *r, const int64_t *v, uint32_t n)
{
    return v[kiln_rng_below(r, n)];
}

/* Share of split draws that need not divide the extent: a partial innermost tile (a 6-row
 * register tile of a 1024-row matmul, 3 vectors of a 56-wide row). Loop partitioning takes the
 * guard of the partial tile out of the hot loop nest, so such tiles cost little; their
 * innermost length is kept small (2..8, or 1..4 vectors). Draws of any length at 15% once
 * gave a young cost model 62-lane vector tiles that took LLVM 20 s each to compile. */
#define NONDIVISOR_P 0.08

/* nparts inner lengths (outer to inner) of an extent: usually a factorisation (the product
 * divides the extent), the innermost at most KILN_MAX_INNER and, for a vector axis, preferring
 * multiples of the vector lanes; else a small innermost length that need not divide it (a
 * multiple of the lanes on a vector axis), the outer ones a factorisation of what it leaves. */
static void
sample_split(struct kiln_rng *r, int64_t extent, uint32_t nparts, int lanes, bool vec, int64_t *out)
{
    int64_t rem = extent, d[512], f[512];
    bool    partial = kiln_rng_uniform(r) < NONDIVISOR_P && extent > 2;
    if (partial) {
        int64_t inner;
        if (vec && lanes > 1 && extent >= lanes) {
            int64_t nv = extent / lanes < 4 ? extent / lanes : 4;
            inner = lanes * (1 + (int64_t)kiln_rng_below(r, (uint64_t)nv));
        } else {
            int64_t top = extent < 8 ? extent : 8;
            inner = 2 + (int64_t)kiln_rng_below(r, (uint64_t)(top - 1));
        }
        out[nparts - 1] = inner;
        rem = (extent + inner - 1) / inner; /* tiles, the last one partial */
        nparts--;
    }
    for (uint32_t j = nparts; j-- > 0;) {
        uint32_t nd = divisors(rem, d, KILN_COUNTOF(d)), nf = 0;
        if (j + 1 == nparts && !partial) {
            for (uint32_t i = 0; i < nd; i++)
                if (d[i] <= KILN_MAX_INNER && (!vec || d[i] % lanes == 0))
                    f[nf++] = d[i];
            if (nf == 0 || !vec || kiln_rng_uniform(r) < 0.3) {
                nf = 0;
                for (uint32_t i = 0; i < nd; i++)
                    if (d[i] <= KILN_MAX_INNER)
                        f[nf++] = d[i];
            }
        } else {
            memcpy(f, d, sizeof(int64_t) * nd);
            nf = nd;
        }
        out[j] = nf ? pick(r, f, nf) : 1;
        rem /= out[j];
    }
    /* The vector axis comes last in a tiled op's fused parallel loop, where a partial tile's
     * guard is periodic in the fused index (f % 43 == 42), which partitioning cannot take out:
     * it stays on every vector operation. Its tiles are all kept in the listed parts, so the
     * guard is a step in an inner loop: a 1024-column matmul tile of 24 split [1, 1, 24] (43
     * outermost tiles) timed out in 78 of 115 trials, [43, 1, 24] runs. */
    if (partial && vec && nparts > 0)
        out[0] *= rem;
}

/* Product of a split knob's parts in v (the elements one outermost iteration covers). */
static int64_t
split_product(const struct kiln_knob *k, const int64_t *v)
{
    int64_t prod = 1;
    for (uint32_t j = 0; j < k->nparts; j++)
        prod *= v[j];
    return prod;
}

/* Every part at least 1, the innermost at most KILN_MAX_INNER, and no part longer than the
 * extent needs given the parts inside it (the cut lowering would make, see
 * kiln_state_extents): [11, 6, 1] of 64 (11 tiles of 6, the last one partial) is one, [12, 6]
 * is not (its 12th tile would be wholly past the end). */
static bool
split_ok(const struct kiln_knob *k, const int64_t *v)
{
    int64_t inner = 1;
    for (uint32_t j = k->nparts; j-- > 0;)
        if (v[j] < 1 || v[j] > (k->extent + inner - 1) / inner
            || kiln_mul_overflows(inner, v[j], &inner))
            return false;
    return k->nparts == 0 || v[k->nparts - 1] <= KILN_MAX_INNER;
}

bool
kiln_prog_valid(const struct kiln_sketch *sk, const struct kiln_prog *p)
{
    for (uint32_t i = 0; i < sk->nknob; i++) {
        const struct kiln_knob *k = &sk->knob[i];
        const int64_t          *v = &p->v[k->slot];
        if (k->kind == KILN_KNOB_SPLIT ? !split_ok(k, v) : (v[0] < 0 || v[0] >= k->nchoice))
            return false;
    }
    return true;
}

/* Which split knobs belong to the vector axis under p's choices. */
static void
vector_knobs(const struct kiln_sketch *sk, const struct kiln_prog *p, bool *vec)
{
    const struct kiln_sketch_priv *pv = sk->priv;
    memset(vec, 0, sizeof(bool) * KILN_MAX_KNOBS);
    for (uint32_t i = 0; pv && i < pv->nop; i++) {
        const struct kiln_op_plan *op = &pv->op[i];
        uint32_t                   k = KILN_NONE;
        if (op->nvcand)
            k = op->k_split[op->vcand[op->k_vaxis == KILN_NONE ? 0
                                                               : p->v[sk->knob[op->k_vaxis].slot]]];
        else if (op->mode == KILN_PLAN_PLAIN || (op->mode == KILN_PLAN_RFACTOR && op->rf_inner))
            for (uint32_t a = 0; a < KILN_MAX_DIMS + KILN_MAX_REDUCE; a++)
                if (op->k_split[a] != KILN_NONE)
                    k = op->k_split[a];
        if (k != KILN_NONE && k < KILN_MAX_KNOBS)
            vec[k] = true;
    }
}

#define KILN_TILE_MIN 8 /* accumulators that keep the FMA units busy: latency 4 x 2 ports */

/* Accumulators an innermost tile may hold without spilling: three quarters of the vector
 * registers, the rest holding the streamed operand's vectors and a broadcast (12 of AVX2's 16:
 * a 4 x 16 matmul tile of 8 ran at 68 GFLOP/s on Zen 3 where 8 x 16 and 4 x 32, 16 each, spilled
 * and ran at 38-40; 24 of AVX-512's 32). */
static int64_t
tile_cap(const struct kiln_sketch *sk)
{
    return sk->priv && sk->priv->vregs > 0 ? sk->priv->vregs * 3 / 4 : 12;
}

static bool
tiled(const struct kiln_op_plan *op)
{
    return op->nvcand > 0
           && (op->mode == KILN_PLAN_TILE || op->mode == KILN_PLAN_TILE_CW
               || op->mode == KILN_PLAN_TILE_FUSE);
}

/* Vector registers the innermost tile of a tiled op holds as accumulators: the product of the
 * innermost spatial lengths, counted in vectors along the vector axis. */
static int64_t
tile_registers(const struct kiln_sketch *sk, const struct kiln_op_plan *op, int lanes,
               const bool *vec, const struct kiln_prog *p)
{
    int64_t regs = 1;
    for (uint32_t a = 0; a < op->nvcand; a++) {
        uint32_t k = op->k_split[op->vcand[a]];
        if (k == KILN_NONE)
            continue;
        int64_t inner = p->v[sk->knob[k].slot + sk->knob[k].nparts - 1];
        regs *= vec[k] ? (inner + lanes - 1) / lanes : inner;
    }
    return regs;
}

/* Whether op's register tile is vectorised but too small: fewer than KILN_TILE_MIN
 * accumulators or fewer rows than vectors per row (see fill_tile). */
static bool
starved(const struct kiln_sketch *sk, const struct kiln_op_plan *op, int lanes, const bool *vec,
        const struct kiln_prog *p)
{
    if (!tiled(op))
        return false;
    uint32_t vk =
        op->k_split[op->vcand[op->k_vaxis == KILN_NONE ? 0 : p->v[sk->knob[op->k_vaxis].slot]]];
    if (vk == KILN_NONE || !vec[vk])
        return false;
    const struct kiln_knob *kv = &sk->knob[vk];
    int64_t                 nvec = (p->v[kv->slot + kv->nparts - 1] + lanes - 1) / lanes;
    int64_t                 regs = tile_registers(sk, op, lanes, vec, p);
    nvec = nvec < 1 ? 1 : nvec;
    return regs < KILN_TILE_MIN || regs / nvec < nvec;
}

/* A vectorised tile of fewer than KILN_TILE_MIN accumulators leaves the FMA units waiting on
 * their own latency, and each of its rows (the other axes' lengths) beyond the first reuses
 * the vector operand's loads: a 2-row x 4-vector matmul tile streams four vectors of B per 8
 * FMAs, from L2 once B's block outgrows L1, where a 4 x 4 one streams four per 16. So tiles
 * with too few accumulators or fewer rows than vectors grow along the other axes, in random
 * order, each innermost part to a divisor of the extent that keeps the tile within
 * tile_cap(sk) (the outer parts shrink to what still divides the rest). */
static void
fill_tile(const struct kiln_sketch *sk, const struct kiln_op_plan *op, struct kiln_rng *rng,
          int lanes, const bool *vec, uint32_t vk, struct kiln_prog *p)
{
    uint32_t order[KILN_MAX_DIMS], n = 0;
    for (uint32_t a = 0; a < op->nvcand && n < KILN_COUNTOF(order); a++)
        if (op->k_split[op->vcand[a]] != KILN_NONE && op->k_split[op->vcand[a]] != vk)
            order[n++] = op->k_split[op->vcand[a]];
    for (uint32_t i = n; i > 1; i--) { /* shuffle */
        uint32_t j = (uint32_t)kiln_rng_below(rng, i), t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    const struct kiln_knob *kv = &sk->knob[vk];
    int64_t nvec = (p->v[kv->slot + kv->nparts - 1] + lanes - 1) / lanes; /* vectors per row */
    nvec = nvec < 1 ? 1 : nvec;
    for (uint32_t i = 0; i < n && starved(sk, op, lanes, vec, p); i++) {
        int64_t                 regs = tile_registers(sk, op, lanes, vec, p);
        const struct kiln_knob *k = &sk->knob[order[i]];
        int64_t                *v = &p->v[k->slot];
        int64_t                 d[512], reach[64], fit = 0;
        uint32_t                nreach = 0;
        if (k->nparts == 0)
            continue;
        int64_t  rest = regs / v[k->nparts - 1]; /* the tile without this axis */
        uint32_t nd = divisors(k->extent, d, KILN_COUNTOF(d));
        for (uint32_t j = 0; j < nd; j++) {
            if (d[j] > KILN_MAX_INNER || rest * d[j] > tile_cap(sk))
                continue;
            fit = d[j];
            if (rest * d[j] >= KILN_TILE_MIN && rest * d[j] / nvec >= nvec
                && nreach < KILN_COUNTOF(reach))
                reach[nreach++] = d[j];
        }
        if (!nreach && fit <= v[k->nparts - 1])
            continue;
        v[k->nparts - 1] = nreach ? pick(rng, reach, nreach) : fit;
        /* the outer parts keep what still divides the rest of the extent */
        int64_t rem = k->extent / v[k->nparts - 1];
        for (uint32_t j = k->nparts - 1; j-- > 0;) {
            v[j] = kiln_gcd64(v[j], rem);
            rem /= v[j];
        }
    }
}

/* The split knob of op's vector axis under p when that axis is grouped (op->gperiod: a load
 * reads floordiv(axis, q)) and vectorised, else KILN_NONE; *q gets the period. */
static uint32_t
grouped_vector_knob(const struct kiln_sketch *sk, const struct kiln_op_plan *op, const bool *vec,
                    const struct kiln_prog *p, int64_t *q)
{
    if (!tiled(op))
        return KILN_NONE;
    uint32_t va = op->vcand[op->k_vaxis == KILN_NONE ? 0 : p->v[sk->knob[op->k_vaxis].slot]];
    uint32_t k = op->k_split[va];
    *q = op->gperiod[va];
    return *q > 1 && k != KILN_NONE && vec[k] ? k : KILN_NONE;
}

/* Whether op's vector tile crosses a group: its length does not divide the period. */
static bool
crosses_groups(const struct kiln_sketch *sk, const struct kiln_op_plan *op, const bool *vec,
               const struct kiln_prog *p)
{
    int64_t  q;
    uint32_t k = grouped_vector_knob(sk, op, vec, p, &q);
    return k != KILN_NONE && q % p->v[sk->knob[k].slot + sk->knob[k].nparts - 1] != 0;
}

/* A vector tile of a grouped axis (a grouped convolution's output channels k, its input read
 * at channel (k / Kg) * Cg + rc) that crosses a group boundary reads a different input element
 * per group of lanes: a gather (scalarised where gathers are slow), where a tile inside one
 * group reads one element and broadcasts it. Tiles start at multiples of their length, so a
 * length dividing the group's period keeps every tile inside a group. Such a tile shrinks to
 * the longest divisor of the period not above its length, a multiple of the lanes when there
 * is one (Kg = 32 on 16 lanes: 32 or 16; Kg = 4: a 4-lane vector), and the outer parts keep
 * what still divides the tiles it leaves. */
static void
group_tile(const struct kiln_sketch *sk, const struct kiln_op_plan *op, int lanes, const bool *vec,
           struct kiln_prog *p)
{
    int64_t  q;
    uint32_t kn = grouped_vector_knob(sk, op, vec, p, &q);
    if (kn == KILN_NONE || !crosses_groups(sk, op, vec, p))
        return;
    const struct kiln_knob *k = &sk->knob[kn];
    int64_t                *v = &p->v[k->slot], d[512], best = 1, best_lanes = 0;
    uint32_t                nd = divisors(q, d, KILN_COUNTOF(d)), last = k->nparts - 1;
    for (uint32_t j = 0; j < nd; j++) {
        if (d[j] > v[last] || d[j] > KILN_MAX_INNER)
            continue;
        best = d[j];
        if (d[j] % lanes == 0)
            best_lanes = d[j];
    }
    v[last] = best_lanes ? best_lanes : best;
    int64_t rem = (k->extent + v[last] - 1) / v[last]; /* tiles; the last partial when q does not
                                                        * divide the extent */
    for (uint32_t j = last; j-- > 0;) {
        v[j] = kiln_gcd64(v[j], rem);
        rem /= v[j];
    }
}

/* The innermost tile of a multi-level tiling is meant to live in registers (16 vector registers
 * on AVX2, 32 on AVX-512 and NEON): a tile of more than tile_cap(sk) accumulators spills, so such
 * draws are redrawn most of the time (not always: the space stays the same, only its prior
 * changes). The vector axis's length is kept to what leaves room for rows (see below). */
static void
register_tile(const struct kiln_sketch *sk, const struct kiln_op_plan *op, struct kiln_rng *rng,
              int lanes, const bool *vec, bool strict, struct kiln_prog *p)
{
    if (!tiled(op))
        return;
    uint32_t vk =
        op->k_split[op->vcand[op->k_vaxis == KILN_NONE ? 0 : p->v[sk->knob[op->k_vaxis].slot]]];
    if (!strict && vk != KILN_NONE && vec[vk] && kiln_rng_uniform(rng) < 0.6) {
        /* one to four vectors' worth of lanes dividing what the outer parts leave, at most
         * as many vectors as rows can follow within the cap (vectors^2 <= tile_cap: 3 on
         * AVX2, 4 on AVX-512), the largest half of the time: a tile of R rows x V vectors
         * loads R + V operands per R x V FMAs, so 2 x 4 loads 0.75 per FMA where 1 x 8 loads
         * 1.1 (16 of 256 channels on AVX2; a 4 w x 16 channel conv tile ran at 1.15x oneDNN
         * where 8 channels x 4 h x 2 w ran at 0.8x) */
        const struct kiln_knob *k = &sk->knob[vk];
        int64_t                *v = &p->v[k->slot];
        int64_t                 outer = 1, d[512], c[64], maxvec = 1;
        while ((maxvec + 1) * (maxvec + 1) <= tile_cap(sk) && maxvec < 4)
            maxvec++;
        uint32_t nc = 0;
        for (uint32_t j = 0; j + 1 < k->nparts; j++)
            outer *= v[j];
        uint32_t nd = k->extent % outer == 0 ? divisors(k->extent / outer, d, KILN_COUNTOF(d)) : 0;
        for (uint32_t j = 0; j < nd && nc < KILN_COUNTOF(c); j++)
            if (d[j] >= lanes && d[j] <= maxvec * lanes && d[j] <= KILN_MAX_INNER)
                c[nc++] = d[j];
        if (nc)
            v[k->nparts - 1] = kiln_rng_uniform(rng) < 0.5 ? c[nc - 1] : pick(rng, c, nc);
    }
    int64_t q;
    if (grouped_vector_knob(sk, op, vec, p, &q) != KILN_NONE
        && (strict || kiln_rng_uniform(rng) < 0.9)) /* no draw for other ops: their programs stay */
        group_tile(sk, op, lanes, vec, p);
    if (!strict && kiln_rng_uniform(rng) < 0.1)
        return;
    for (int tries = 0; tries < 16 && tile_registers(sk, op, lanes, vec, p) > tile_cap(sk);
         tries++) {
        uint32_t a = op->vcand[kiln_rng_below(rng, op->nvcand)], k = op->k_split[a];
        if (k == KILN_NONE || k == vk)
            continue;
        sample_split(rng, sk->knob[k].extent, sk->knob[k].nparts, lanes, false,
                     &p->v[sk->knob[k].slot]);
    }
    /* still too large: the other axes' innermost parts move out one by one */
    for (uint32_t a = 0; a < op->nvcand && tile_registers(sk, op, lanes, vec, p) > tile_cap(sk);
         a++) {
        uint32_t k = op->k_split[op->vcand[a]];
        if (k == KILN_NONE || k == vk)
            continue;
        const struct kiln_knob *kn = &sk->knob[k];
        int64_t                *v = &p->v[kn->slot];
        if (kn->nparts >= 2) { /* a partial tile's parts may cover more than the extent */
            v[kn->nparts - 2] *= v[kn->nparts - 1];
            if (v[kn->nparts - 2] > kn->extent)
                v[kn->nparts - 2] = kn->extent;
            v[kn->nparts - 1] = 1;
        }
    }
    if (!strict && vk != KILN_NONE && vec[vk] && kiln_rng_uniform(rng) < 0.7)
        fill_tile(sk, op, rng, lanes, vec, vk, p);
}

/* Iterations of the parallel loop of a tiled op: its `par` first spatial axes in the order the
 * sketch fuses them (split axes, the vector axis last), each over its outermost tile. */
static int64_t
parallel_extent(const struct kiln_sketch *sk, const struct kiln_prog *p, const uint32_t *order,
                uint32_t n, int64_t par)
{
    int64_t ext = 1;
    for (uint32_t i = 0; i < n && i < (uint64_t)par; i++) {
        const struct kiln_knob *k = &sk->knob[order[i]];
        int64_t                 inner = split_product(k, &p->v[k->slot]);
        ext *= (k->extent + inner - 1) / inner;
    }
    return ext;
}

/* Whether a parallel loop of `ext` iterations keeps `cores` cores evenly busy: a multiple of
 * them, or enough that the last uneven share is small (7 iterations on 2 cores run as 4). */
static bool
balanced(int64_t ext, int cores)
{
    return ext >= cores && (ext % cores == 0 || ext >= 8 * (int64_t)cores);
}

/* A parallel loop of fewer iterations than cores leaves cores idle (a matmul tiled as one
 * outermost row block ran on one of two cores), and an uneven count leaves some idle at the
 * end. Such draws fuse more outer loops into the parallel one and, if that is not enough, move
 * factors of the middle tile levels out to the outermost (never the innermost, register
 * tile), most of the time. */
static void
parallel_prior(const struct kiln_sketch *sk, const struct kiln_op_plan *op, struct kiln_rng *rng,
               bool strict, struct kiln_prog *p)
{
    int cores = sk->priv->cores;
    if (!tiled(op) || op->k_par == KILN_NONE || cores < 2
        || (!strict && kiln_rng_uniform(rng) < 0.1))
        return;
    uint32_t va = op->vcand[op->k_vaxis == KILN_NONE ? 0 : p->v[sk->knob[op->k_vaxis].slot]];
    uint32_t order[KILN_MAX_DIMS], n = 0;
    for (uint32_t a = 0; a < op->nvcand; a++)
        if (op->vcand[a] != va && op->k_split[op->vcand[a]] != KILN_NONE)
            order[n++] = op->k_split[op->vcand[a]];
    if (op->k_split[va] != KILN_NONE)
        order[n++] = op->k_split[va];
    const struct kiln_knob *kp = &sk->knob[op->k_par];
    int64_t                *par = &p->v[kp->slot];
    if (*par == 0 || n == 0)
        return; /* serial by choice */
    while (!balanced(parallel_extent(sk, p, order, n, *par), cores) && *par < (int64_t)n
           && *par + 1 < kp->nchoice)
        ++*par;
    for (int tries = 0; tries < 32 && !balanced(parallel_extent(sk, p, order, n, *par), cores);
         tries++) {
        uint32_t                i = (uint32_t)kiln_rng_below(rng, (uint64_t)(*par < n ? *par : n));
        const struct kiln_knob *k = &sk->knob[order[i]];
        int64_t                *v = &p->v[k->slot];
        if (k->extent % split_product(k, v) != 0)
            continue; /* a partial tile keeps its tiles where sample_split put them */
        for (uint32_t j = 0; j + 1 < k->nparts; j++) /* the first middle part with a factor */
            if (v[j] > 1) {
                int64_t f = 2;
                while (v[j] % f)
                    f++;
                v[j] /= f;
                break;
            }
    }
}

/* A plain or rfactor op's parallel loop fuses its `par` outermost axes (the last one over its
 * vector tiles when it is split). Over the batch axis alone that is one iteration at batch 1:
 * ResNet-18's max pooling drew it and ran on one core, at 3 GFLOP/s. Such draws fuse more axes
 * until the loop keeps the cores evenly busy, most of the time. */
static void
plain_parallel_prior(const struct kiln_sketch *sk, const struct kiln_op_plan *op,
                     struct kiln_rng *rng, bool strict, struct kiln_prog *p)
{
    int cores = sk->priv->cores;
    if ((op->mode != KILN_PLAN_PLAIN && op->mode != KILN_PLAN_RFACTOR) || op->k_par == KILN_NONE
        || cores < 2 || op->ndim == 0 || (!strict && kiln_rng_uniform(rng) < 0.1))
        return;
    const struct kiln_knob *kp = &sk->knob[op->k_par];
    int64_t                *par = &p->v[kp->slot];
    if (*par == 0 || (op->k_loc != KILN_NONE && p->v[sk->knob[op->k_loc].slot] != 0))
        return; /* serial by choice, or computed inside its reader's tile */
    for (;;) {
        int64_t ext = 1;
        for (uint32_t d = 0; d < (uint32_t)*par && d < op->ndim; d++) {
            int64_t  e = op->shape[d];
            uint32_t ks = op->k_split[d];
            if (ks != KILN_NONE && op->k_vec != KILN_NONE && p->v[sk->knob[op->k_vec].slot]) {
                int64_t f = p->v[sk->knob[ks].slot];
                e = f >= 2 ? (e + f - 1) / f : e;
            }
            ext *= e;
        }
        if (balanced(ext, cores) || *par >= op->ndim || *par + 1 >= kp->nchoice)
            return;
        ++*par;
    }
}

void
kiln_prog_sample(const struct kiln_sketch *sk, struct kiln_rng *rng, struct kiln_prog *out)
{
    memset(out, 0, sizeof *out);
    out->sketch = sk->id;
    int  lanes = sk->priv && sk->priv->lanes > 0 ? sk->priv->lanes : 4;
    bool vec[KILN_MAX_KNOBS];
    for (uint32_t i = 0; i < sk->nknob; i++) {
        const struct kiln_knob *k = &sk->knob[i];
        if (k->kind != KILN_KNOB_CHOICE)
            continue;
        /* vectorising is nearly always right: on with probability 0.9 */
        if (k->role == KILN_KNOB_VECTORIZE && k->nchoice == 2)
            out->v[k->slot] = kiln_rng_uniform(rng) < 0.9;
        else
            out->v[k->slot] = (int64_t)kiln_rng_below(rng, k->nchoice ? k->nchoice : 1);
    }
    /* Vector axis: an axis along which a reused argument can be packed (the weights' output
     * channels of a convolution, the columns of a matmul's right operand) makes the innermost
     * tile a broadcast-FMA micro-kernel over contiguous data: 40% of the time, and packed;
     * the last spatial axis (contiguous in the output) 30%; otherwise the uniform draw. When
     * the last spatial axis has no tile length that is a multiple of the lanes or at least
     * three vectors long (14 wide on 8 lanes), vectorising it leaves lanes idle: then 75%
     * packed, 10% the last axis. A 28-wide row on 8 lanes is emitted as 16 + 8 + 4 lane chunks
     * (codegen/llvm_vec.c), which wastes none. */
    for (uint32_t i = 0; sk->priv && i < sk->priv->nop; i++) {
        const struct kiln_op_plan *op = &sk->priv->op[i];
        if (op->k_vaxis == KILN_NONE)
            continue;
        uint32_t packable[KILN_MAX_DIMS], np = 0;
        for (uint32_t c = 0; c < op->nvcand; c++)
            if (op->npack[op->vcand[c]] > 0)
                packable[np++] = c;
        uint32_t kl = op->k_split[op->vcand[op->nvcand - 1]];
        bool     lane_tile = kl == KILN_NONE;
        int64_t  d[512];
        uint32_t nd = kl == KILN_NONE ? 0 : divisors(sk->knob[kl].extent, d, KILN_COUNTOF(d));
        for (uint32_t j = 0; j < nd; j++)
            lane_tile |= d[j] <= KILN_MAX_INNER && (d[j] % lanes == 0 || d[j] >= 3 * lanes);
        double u = kiln_rng_uniform(rng), p_pack = lane_tile ? 0.4 : 0.75;
        if (np && u < p_pack) {
            out->v[sk->knob[op->k_vaxis].slot] = packable[kiln_rng_below(rng, np)];
            if (op->k_pack != KILN_NONE)
                out->v[sk->knob[op->k_pack].slot] = 1;
        } else if (u < p_pack + (lane_tile ? 0.3 : 0.1))
            out->v[sk->knob[op->k_vaxis].slot] = op->nvcand - 1;
    }
    vector_knobs(sk, out, vec);
    for (uint32_t i = 0; i < sk->nknob; i++) {
        const struct kiln_knob *k = &sk->knob[i];
        if (k->kind == KILN_KNOB_SPLIT)
            sample_split(rng, k->extent, k->nparts, lanes, vec[i], &out->v[k->slot]);
    }
    for (uint32_t i = 0; sk->priv && i < sk->priv->nop; i++) {
        register_tile(sk, &sk->priv->op[i], rng, lanes, vec, false, out);
        parallel_prior(sk, &sk->priv->op[i], rng, false, out);
        plain_parallel_prior(sk, &sk->priv->op[i], rng, false, out);
    }
}

#define PAR_WORK 32768

/* A tiled op's work in multiply-add steps: the product of its split axes' extents (spatial and
 * reduction). */
static int64_t
tiled_work(const struct kiln_sketch *sk, const struct kiln_op_plan *op)
{
    int64_t w = 1;
    for (uint32_t d = 0; d < KILN_MAX_DIMS + KILN_MAX_REDUCE; d++)
        if (op->k_split[d] != KILN_NONE && w < INT64_MAX / (sk->knob[op->k_split[d]].extent + 1))
            w *= sk->knob[op->k_split[d]].extent;
    return w;
}

/* The vector axis's split l of a tiled op with no other axis longer than 1 (a batch-1 dense),
 * or with `rows` (at most KILN_FEW_ROWS) in its other axes, all in the register tile: one row
 * of accumulators per row, and nothing reuses the weight it streams beyond them, so no tile
 * level above the registers pays. A tile of one vector is one chain of dependent FMAs (a 1000 x
 * 1024 dense ran at 0.075 ms, its FMA latency); a middle level of 21 vectors kept its accumulators
 * in memory (0.25 ms for 1000 x 1280, where a 25-wide register tile ran 0.059). So the innermost
 * tile is the longest the registers and KILN_MAX_INNER allow, the whole axis when it fits, else the
 * longest divisor of the extent at least half that long (64 of 1024; 50 of 1000 on 16 lanes: 16 +
 * 16 + 16 + 2 lanes), the tiles then outermost, where the parallel loop takes them; else that
 * longest tile, the last one partial, with the tiles in the listed part (as sample_split keeps
 * them). The middle part is 1. */
static void
one_row_tile(const struct kiln_sketch *sk, const struct kiln_knob *k, int lanes, int64_t rows,
             int64_t *l)
{
    int64_t  n = k->extent, cap = tile_cap(sk) / rows * lanes, d[512], t = 0;
    uint32_t last = k->nparts - 1;
    if (cap > KILN_MAX_INNER)
        cap = KILN_MAX_INNER / lanes * lanes;
    if (cap < lanes)
        cap = lanes;
    uint32_t nd = n <= cap ? 0 : divisors(n, d, KILN_COUNTOF(d));
    for (uint32_t j = 0; j < nd; j++)
        if (d[j] <= cap && 2 * d[j] >= cap)
            t = d[j];
    if (n <= cap)
        t = n;
    for (uint32_t j = 0; j < last; j++)
        l[j] = 1;
    if (t) {
        l[last] = t;
        return;
    }
    l[last] = cap;
    l[0] = (n + cap - 1) / cap;
}

#define KILN_FEW_ROWS 8

/* A tiled op whose vector axis (the last) packs an argument (a dense's weight) and whose other axes
 * hold at most KILN_FEW_ROWS points (a dense of batch 2 to 8): those axes wholly in the register
 * tile, their other parts 1, and the vector axis split as one_row_tile does within the registers
 * the rows leave. Drawn freely, batch 8 x 1024 -> 1000 ran 0.17 to 0.72 ms over five seeds,
 * batch 2 0.11 to 0.17 (batch 1 with its rule: 0.047). False when it does not apply. */
static bool
few_rows(const struct kiln_sketch *sk, const struct kiln_op_plan *op, int lanes,
         struct kiln_prog *p)
{
    uint32_t v = op->vcand[op->nvcand - 1];
    int64_t  rows = 1;
    if (!op->npack[v] || op->k_split[v] == KILN_NONE)
        return false;
    for (uint32_t a = 0; a + 1 < op->nvcand; a++)
        if (op->k_split[op->vcand[a]] != KILN_NONE)
            rows *= sk->knob[op->k_split[op->vcand[a]]].extent;
    if (rows > KILN_FEW_ROWS || rows > tile_cap(sk))
        return false;
    for (uint32_t a = 0; a + 1 < op->nvcand; a++) {
        uint32_t ks = op->k_split[op->vcand[a]];
        if (ks == KILN_NONE)
            continue;
        const struct kiln_knob *k = &sk->knob[ks];
        for (uint32_t j = 0; j + 1 < k->nparts; j++)
            p->v[k->slot + j] = 1;
        p->v[k->slot + k->nparts - 1] = k->extent;
    }
    one_row_tile(sk, &sk->knob[op->k_split[v]], lanes, rows, &p->v[sk->knob[op->k_split[v]].slot]);
    return true;
}

bool
kiln_prog_in_prior(const struct kiln_sketch *sk, struct kiln_rng *rng, struct kiln_prog *p)
{
    int              lanes = sk->priv && sk->priv->lanes > 0 ? sk->priv->lanes : 4;
    struct kiln_prog before = *p;
    for (uint32_t i = 0; sk->priv && i < sk->priv->nop; i++) {
        const struct kiln_op_plan *op = &sk->priv->op[i];
        if (op->mode == KILN_PLAN_PLAIN && op->k_vec != KILN_NONE && op->ndim
            && op->shape[op->ndim - 1] >= lanes) {
            /* an elementwise op, or a reduction with one accumulator per lane (an NHWC pooling):
             * vectorised along its last axis, a vector at a time or more; an extent that is no
             * multiple of the lanes (37 channels) whole when it fits one innermost tile (32 + 4
             * + 1 lanes, no masks), else in vector-long tiles, the last one partial */
            const struct kiln_knob *k = &sk->knob[op->k_split[op->ndim - 1]];
            int64_t                *on = &p->v[sk->knob[op->k_vec].slot], *l = &p->v[k->slot];
            *on = 1;
            if (*l < lanes)
                *l = k->extent % lanes == 0 || k->extent > KILN_MAX_INNER ? lanes : k->extent;
            continue;
        }
        if (op->mode == KILN_PLAN_RFACTOR && op->k_vec != KILN_NONE) {
            p->v[sk->knob[op->k_vec].slot] = 1;
            continue;
        }
        /* A tiled op of one axis longer than 1 has no vector axis knob: a batch-1 dense or
         * matmul (y[1, N] = x[1, K] W), whose weight it does not reuse, but whose vector tile
         * reads the weight with a stride of K unless it is packed (gathers: 0.46 ms for a
         * 1000 x 1024 dense where the packed program ran 0.047). Such an op, when it can pack
         * the weight, is vectorised along its axis and packs it, as below; the copy is made
         * once, at prepare time. */
        if (!op->nvcand || (op->k_vaxis == KILN_NONE && !op->npack[op->vcand[0]]))
            continue;
        uint32_t kl = op->k_split[op->vcand[op->nvcand - 1]];
        if (kl == KILN_NONE || sk->knob[kl].extent < lanes)
            continue;
        if (op->k_vaxis != KILN_NONE)
            p->v[sk->knob[op->k_vaxis].slot] = op->nvcand - 1;
        if (op->k_vec != KILN_NONE)
            p->v[sk->knob[op->k_vec].slot] = 1;
        /* arguments read with a stride along it packed, as the sampler's packed draws are */
        if (op->k_pack != KILN_NONE && op->npack[op->vcand[op->nvcand - 1]])
            p->v[sk->knob[op->k_pack].slot] = 1;
        /* the innermost tile of the vector axis at least a vector long */
        const struct kiln_knob *k = &sk->knob[kl];
        int64_t                *l = &p->v[k->slot];
        uint32_t                last = k->nparts - 1;
        if (op->k_vaxis == KILN_NONE) {
            one_row_tile(sk, k, lanes, 1, l);
            continue;
        }
        if (few_rows(sk, op, lanes, p))
            continue;
        if (l[last] < lanes && k->extent % lanes == 0) {
            /* move factors from the outer parts in (the product, so the tile, stays); when
             * that cannot make a multiple of the lanes of at most KILN_MAX_INNER, one vector */
            for (uint32_t j = 0; j < last && l[last] % lanes; j++) {
                while (l[j] > 1 && l[last] % lanes) {
                    int64_t f = 2;
                    while (l[j] % f)
                        f++;
                    l[j] /= f;
                    l[last] *= f;
                }
            }
            if (l[last] % lanes || l[last] > KILN_MAX_INNER) {
                for (uint32_t j = 0; j < last; j++)
                    l[j] = 1;
                l[last] = lanes;
            }
        } else if (l[last] < lanes) {
            /* an extent that is no multiple of the lanes (ShuffleNet's 58 and 116 channels,
             * 2 x 29 and 4 x 29) has few factorisations, and most have an innermost tile of
             * one or two elements: scalar code (a 1x1 convolution of 58 channels was predicted
             * so and ran at 2.4 GFLOP/s). One vector instead, in tiles of which the last is
             * partial, all kept in the outermost part (as sample_split does) */
            for (uint32_t j = 1; j < last; j++)
                l[j] = 1;
            l[0] = (k->extent + lanes - 1) / lanes;
            l[last] = lanes;
        }
    }
    /* then the sampling priors, without their escapes: register tiles within the registers,
     * parallel loops that keep the cores evenly busy */
    /* an op with work for several cores runs parallel: a fork and join costs a few
     * microseconds, 32K element-steps tens of them (a softmax of [12,128,128] was predicted
     * serial in four of its five stages, and ran slower on 2 threads than on 1; BERT-base's
     * [128,768]x[768,3072] matmul was predicted serial, so 2 threads ran it on one core) */
    for (uint32_t i = 0; sk->priv && i < sk->priv->nop && sk->priv->cores > 1; i++) {
        const struct kiln_op_plan *op = &sk->priv->op[i];
        if (op->k_par == KILN_NONE || p->v[sk->knob[op->k_par].slot] != 0)
            continue;
        if ((op->mode == KILN_PLAN_PLAIN || op->mode == KILN_PLAN_RFACTOR) && op->work >= PAR_WORK
            && (op->k_loc == KILN_NONE || p->v[sk->knob[op->k_loc].slot] == 0))
            p->v[sk->knob[op->k_par].slot] = 1;
        else if (tiled(op) && tiled_work(sk, op) >= PAR_WORK)
            p->v[sk->knob[op->k_par].slot] = 1;
    }
    bool vec[KILN_MAX_KNOBS];
    vector_knobs(sk, p, vec);
    for (uint32_t i = 0; sk->priv && i < sk->priv->nop; i++) {
        register_tile(sk, &sk->priv->op[i], rng, lanes, vec, true, p);
        parallel_prior(sk, &sk->priv->op[i], rng, true, p);
        plain_parallel_prior(sk, &sk->priv->op[i], rng, true, p);
    }
    return memcmp(before.v, p->v, sizeof(int64_t) * sk->nvalues) != 0;
}

static const double role_weight[] = {
    [KILN_KNOB_TILE] = 0.90,      [KILN_KNOB_UNROLL] = 0.04,   [KILN_KNOB_PARALLEL] = 0.01,
    [KILN_KNOB_VECTORIZE] = 0.02, [KILN_KNOB_LOCATION] = 0.05, [KILN_KNOB_LAYOUT] = 0.02,
    [KILN_KNOB_OTHER] = 0.01,
};

/* Moves a factor between two parts of a factorisation (outer part included). */
static bool
mutate_split(const struct kiln_knob *k, struct kiln_rng *r, int lanes, bool vec, int64_t *v)
{
    int64_t len[KILN_SPLIT_MAX + 1], prod = split_product(k, v);
    if (k->extent % prod != 0) {
        int64_t old[KILN_SPLIT_MAX];
        memcpy(old, v, sizeof(int64_t) * k->nparts);
        sample_split(r, k->extent, k->nparts, lanes, vec, v);
        return memcmp(old, v, sizeof(int64_t) * k->nparts) != 0;
    }
    len[0] = k->extent / prod;
    for (uint32_t j = 0; j < k->nparts; j++)
        len[j + 1] = v[j];
    uint32_t n = k->nparts + 1u;
    for (int tries = 0; tries < 16; tries++) {
        uint32_t src = (uint32_t)kiln_rng_below(r, n), dst = (uint32_t)kiln_rng_below(r, n);
        if (src == dst || len[src] == 1)
            continue;
        int64_t  d[512];
        uint32_t nd = divisors(len[src], d, KILN_COUNTOF(d));
        if (nd < 2)
            continue;
        int64_t f = d[1 + kiln_rng_below(r, nd - 1)];
        if (dst == n - 1 && len[dst] * f > KILN_MAX_INNER)
            continue;
        len[src] /= f;
        len[dst] *= f;
        for (uint32_t j = 0; j < k->nparts; j++)
            v[j] = len[j + 1];
        return true;
    }
    return false;
}

bool
kiln_prog_mutate(const struct kiln_sketch *sk, struct kiln_rng *rng, struct kiln_prog *p)
{
    int    lanes = sk->priv && sk->priv->lanes > 0 ? sk->priv->lanes : 4;
    double total = 0;
    bool   present[KILN_KNOB_OTHER + 1] = {false};
    for (uint32_t i = 0; i < sk->nknob; i++)
        if (sk->knob[i].kind == KILN_KNOB_SPLIT || sk->knob[i].nchoice > 1)
            present[sk->knob[i].role] = true;
    for (uint32_t r = 0; r <= KILN_KNOB_OTHER; r++)
        total += present[r] ? role_weight[r] : 0;
    if (total <= 0)
        return false;
    for (int tries = 0; tries < 8; tries++) {
        double   u = kiln_rng_uniform(rng) * total;
        uint32_t role = 0;
        for (role = 0; role < KILN_KNOB_OTHER; role++) {
            if (present[role] && u < role_weight[role])
                break;
            u -= present[role] ? role_weight[role] : 0;
        }
        uint32_t cand[KILN_MAX_KNOBS], nc = 0;
        for (uint32_t i = 0; i < sk->nknob; i++)
            if (sk->knob[i].role == role
                && (sk->knob[i].kind == KILN_KNOB_SPLIT || sk->knob[i].nchoice > 1))
                cand[nc++] = i;
        if (nc == 0)
            continue;
        const struct kiln_knob *k = &sk->knob[cand[kiln_rng_below(rng, nc)]];
        int64_t                *v = &p->v[k->slot];
        if (k->kind == KILN_KNOB_CHOICE) {
            int64_t nv = (int64_t)kiln_rng_below(rng, k->nchoice - 1);
            v[0] = nv >= v[0] ? nv + 1 : nv;
            return true;
        }
        bool vec[KILN_MAX_KNOBS];
        vector_knobs(sk, p, vec);
        int64_t old[KILN_SPLIT_MAX];
        memcpy(old, v, sizeof(int64_t) * k->nparts);
        bool was_starved = false, was_crossing = false;
        for (uint32_t i = 0; sk->priv && i < sk->priv->nop; i++) {
            was_starved |= starved(sk, &sk->priv->op[i], lanes, vec, p);
            was_crossing |= crosses_groups(sk, &sk->priv->op[i], vec, p);
        }
        if (!mutate_split(k, rng, lanes, vec[k - sk->knob], v))
            continue;
        /* the prior of kiln_prog_sample: a move that makes a register tile spill, starves
         * one that was not (fill_tile's rules) or makes a vector tile cross groups
         * (group_tile) is mostly undone */
        bool spills = false, starves = false;
        for (uint32_t i = 0; sk->priv && i < sk->priv->nop; i++) {
            spills |= tiled(&sk->priv->op[i])
                      && tile_registers(sk, &sk->priv->op[i], lanes, vec, p) > tile_cap(sk);
            starves |= !was_starved && starved(sk, &sk->priv->op[i], lanes, vec, p);
            starves |= !was_crossing && crosses_groups(sk, &sk->priv->op[i], vec, p);
        }
        if (!(spills || starves) || kiln_rng_uniform(rng) < 0.2)
            return true;
        memcpy(v, old, sizeof(int64_t) * k->nparts);
    }
    return false;
}

void
kiln_prog_crossover(const struct kiln_sketch *sk, struct kiln_rng *rng, const struct kiln_prog *a,
                    const struct kiln_prog *b, struct kiln_prog *out)
{
    *out = *a;
    for (uint32_t i = 0; i < sk->nknob; i++) {
        const struct kiln_knob *k = &sk->knob[i];
        uint32_t                w = k->kind == KILN_KNOB_SPLIT ? k->nparts : 1;
        if (kiln_rng_below(rng, 2))
            memcpy(&out->v[k->slot], &b->v[k->slot], sizeof(int64_t) * w);
    }
}

static int64_t
next_divisor(int64_t n, int64_t cur, int dir)
{
    if (dir > 0) {
        for (int64_t d = cur + 1; d <= n; d++)
            if (n % d == 0)
                return d;
        return 0;
    }
    for (int64_t d = cur - 1; d >= 1; d--)
        if (n % d == 0)
            return d;
    return 0;
}

static bool
emit_neighbour(const struct kiln_sketch *sk, const struct kiln_prog *p, struct kiln_prog *out,
               uint32_t max, uint32_t *n, const struct kiln_prog *q)
{
    if (*n >= max)
        return false;
    if (!kiln_prog_valid(sk, q))
        return true;
    for (uint32_t i = 0; i < *n; i++)
        if (!memcmp(out[i].v, q->v, sizeof(int64_t) * sk->nvalues))
            return true;
    if (!memcmp(p->v, q->v, sizeof(int64_t) * sk->nvalues))
        return true;
    out[(*n)++] = *q;
    return true;
}

uint32_t
kiln_prog_neighbours(const struct kiln_sketch *sk, const struct kiln_prog *p, struct kiln_prog *out,
                     uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < sk->nknob; i++) {
        const struct kiln_knob *k = &sk->knob[i];
        if (k->kind == KILN_KNOB_CHOICE) {
            for (int dir = -1; dir <= 1; dir += 2) {
                struct kiln_prog q = *p;
                q.v[k->slot] += dir;
                if (!emit_neighbour(sk, p, out, max, &n, &q))
                    return n;
            }
            continue;
        }
        for (uint32_t j = 0; j < k->nparts; j++)
            for (int dir = -1; dir <= 1; dir += 2) {
                struct kiln_prog q = *p;
                int64_t         *v = &q.v[k->slot];
                int64_t          nv = next_divisor(k->extent, v[j], dir);
                if (nv == 0)
                    continue;
                v[j] = nv;
                /* keep the product within the extent: shrink the other parts, outermost
                 * first, to their next smaller divisors */
                for (uint32_t o = 0; o < k->nparts && !split_ok(k, v); o++) {
                    while (o != j && v[o] > 1 && !split_ok(k, v))
                        v[o] = next_divisor(k->extent, v[o], -1);
                }
                if (!emit_neighbour(sk, p, out, max, &n, &q))
                    return n;
            }
    }
    return n;
}

uint64_t
kiln_prog_hash(const struct kiln_sketch *sk, const struct kiln_prog *p)
{
    uint64_t h = kiln_hash_str(KILN_HASH_SEED, sk->desc);
    for (uint32_t i = 0; i < sk->nvalues; i++)
        h = kiln_hash_u64(h, (uint64_t)p->v[i]);
    return h;
}

enum kiln_status
kiln_prog_to_json(kiln_ctx *ctx, const struct kiln_sketch *sk, const struct kiln_prog *p,
                  struct kiln_buf *out)
{
    if (!kiln_buf_puts(ctx, out, "{\"sketch\": "))
        return ctx->err.status;
    cJSON *s = cJSON_CreateString(sk->desc);
    char  *txt = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    if (!txt)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "sketch", "out of memory printing a program");
    bool ok = kiln_buf_puts(ctx, out, txt) && kiln_buf_puts(ctx, out, ", \"v\": [");
    free(txt);
    for (uint32_t i = 0; ok && i < sk->nvalues; i++)
        ok = kiln_buf_printf(ctx, out, "%s%lld", i ? ", " : "", (long long)p->v[i]);
    ok = ok && kiln_buf_puts(ctx, out, "]}");
    return ok ? KILN_OK : ctx->err.status;
}

enum kiln_status
kiln_prog_from_json(kiln_ctx *ctx, const struct kiln_sketch *sk, uint32_t nsk, const char *json,
                    struct kiln_prog *out)
{
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_Parse(json ? json : "");
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return KILN_FAIL(
            ctx, KILN_ERR_INVALID, "sketch",
            "program JSON: not a JSON object (expected {\"sketch\": ..., \"v\": [...]})");
    }
    const cJSON     *s = cJSON_GetObjectItemCaseSensitive(root, "sketch");
    const cJSON     *v = cJSON_GetObjectItemCaseSensitive(root, "v");
    enum kiln_status st = KILN_OK;
    uint32_t         id = KILN_NONE;
    if (!cJSON_IsString(s)) {
        st =
            KILN_FAIL(ctx, KILN_ERR_INVALID, "sketch", "program JSON: \"sketch\" must be a string");
        goto done;
    }
    for (uint32_t i = 0; i < nsk && id == KILN_NONE; i++)
        if (!strcmp(sk[i].desc, s->valuestring))
            id = i;
    if (id == KILN_NONE) {
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "sketch",
                       "program JSON: no sketch \"%s\" among the %u of this task", s->valuestring,
                       nsk);
        goto done;
    }
    if (!cJSON_IsArray(v) || (uint32_t)cJSON_GetArraySize(v) != sk[id].nvalues) {
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "sketch",
                       "program JSON: \"v\" must be an array of %u integers for sketch \"%s\"",
                       sk[id].nvalues, sk[id].desc);
        goto done;
    }
    out->sketch = id;
    uint32_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || !(fabs(e->valuedouble) < 9e15)
            || e->valuedouble != (double)(int64_t)e->valuedouble) {
            st = KILN_FAIL(ctx, KILN_ERR_INVALID, "sketch", "program JSON: v[%u] is not an integer",
                           i);
            goto done;
        }
        out->v[i] = (int64_t)e->valuedouble;
    }
    if (!kiln_prog_valid(&sk[id], out))
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "sketch",
                       "program JSON: knob values out of range for sketch \"%s\"", sk[id].desc);
done:
    cJSON_Delete(root);
    return st;
}
