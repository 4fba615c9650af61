/* ir/stats.c -- FLOPs, bytes moved and parameters of ops and statements, counted generically
 * from the compute definitions (no table per library op), so hand-written definitions, library
 * calls and sampled kernels are measured by one rule:
 *
 *   points = numel(output) x product of the reduction extents
 *   flops  = (distinct float arithmetic/math nodes of the body) x points
 *            + points when the op reduces a float dtype (one combine per reduction point)
 *   bytes  = sum over the distinct tensors the body loads of their whole size in bytes
 *            + the size of the output
 *   params = elements of the distinct weight tensors the body loads
 *
 * A node counts as a FLOP when its dtype is a float dtype and its operator is arithmetic or a
 * math intrinsic (add, sub, mul, div, min, max, neg, abs, pow, exp, log, sqrt, rsqrt, tanh,
 * erf, sigmoid, floor). Comparisons, select, casts, loads and integer index arithmetic are
 * free. Each distinct (hash-consed) node counts once per point, also when it sits in an
 * untaken select branch: these are static counts, not a trace.
 *
 * A statement (call) sums the FLOPs of its ops; its bytes are the distinct tensors its ops
 * read that none of its own ops produce (what the statement reads from outside) plus its output
 * tensor, and its params are the distinct weights its ops read. Temporaries inside an expanded
 * library call (softmax's row max and sum, say) are not counted as traffic. */
#include "ir.h"

#include <string.h>

/* A small open-addressing set of node ids (ids are never 0). */
struct idset {
    kiln_ctx *ctx;
    uint32_t *key;
    uint32_t  cap, n;
    bool      oom;
};

static bool
set_add(struct idset *s, uint32_t id) /* true when id was not in the set */
{
    if (2 * (s->n + 1) > s->cap) {
        uint32_t  ncap = s->cap ? 2 * s->cap : 64;
        uint32_t *nk = kiln_mem_realloc(s->ctx, NULL, 0, sizeof(uint32_t) * ncap);
        if (!nk) {
            s->oom = true;
            return false;
        }
        memset(nk, 0, sizeof(uint32_t) * ncap);
        for (uint32_t i = 0; i < s->cap; i++) {
            if (!s->key[i])
                continue;
            uint32_t j = (uint32_t)kiln_mix64(s->key[i]) & (ncap - 1);
            while (nk[j])
                j = (j + 1) & (ncap - 1);
            nk[j] = s->key[i];
        }
        kiln_mem_free(s->ctx, s->key, sizeof(uint32_t) * s->cap);
        s->key = nk;
        s->cap = ncap;
    }
    uint32_t i = (uint32_t)kiln_mix64(id) & (s->cap - 1);
    for (; s->key[i]; i = (i + 1) & (s->cap - 1))
        if (s->key[i] == id)
            return false;
    s->key[i] = id;
    s->n++;
    return true;
}

static bool
set_has(const struct idset *s, uint32_t id)
{
    if (!s->cap)
        return false;
    for (uint32_t i = (uint32_t)kiln_mix64(id) & (s->cap - 1); s->key[i];
         i = (i + 1) & (s->cap - 1))
        if (s->key[i] == id)
            return true;
    return false;
}

static void
set_free(struct idset *s)
{
    kiln_mem_free(s->ctx, s->key, sizeof(uint32_t) * s->cap);
    s->key = NULL;
    s->cap = s->n = 0;
}

/* Walks the DAG below id once per distinct node: counts float FLOP nodes and collects the
 * tensors loaded (in read, as tensor + 1: a set of what is read, so that an op costs its
 * own size and not the graph's). */
static void
walk(const kiln_ctx *ctx, uint32_t id, struct idset *seen, double *nflop, struct idset *read)
{
    if (!id || !set_add(seen, id))
        return;
    const struct kiln_node *n = &ctx->node[id];
    uint32_t                fl = kiln_op_flags[n->op];
    if ((fl & (KILN_OPF_ARITH | KILN_OPF_MATH)) && kiln_dtype_is_float((enum kiln_dtype)n->dtype))
        *nflop += 1;
    if (n->op == KILN_OP_LOAD)
        set_add(read, (uint32_t)n->imm + 1);
    for (int k = 0; k < kiln_op_arity[n->op]; k++)
        walk(ctx, n->kid[k], seen, nflop, read);
}

static double
tensor_bytes(const struct kiln_tensor *t)
{
    return (double)kiln_tensor_numel(t) * (double)kiln_dtype_size((enum kiln_dtype)t->dtype);
}

/* FLOPs of ops [begin, end), adding the tensors they read to read. */
static double
ops_flops(const struct kiln_graph *g, uint32_t begin, uint32_t end, struct idset *read)
{
    double flops = 0;
    for (uint32_t i = begin; i < end; i++) {
        const struct kiln_opdef  *op = &g->op[i];
        const struct kiln_tensor *t = &g->tensor[op->out];
        struct idset              seen = {.ctx = g->ctx};
        double                    nflop = 0, points = (double)kiln_tensor_numel(t);
        walk(g->ctx, op->body.id, &seen, &nflop, read);
        if (seen.oom)
            KILN_FAIL(g->ctx, KILN_ERR_NOMEM, "stats", "out of memory counting %s",
                      kiln_graph_tensor_name(g, op->out));
        set_free(&seen);
        for (uint32_t r = 0; r < op->nred; r++)
            points *= (double)op->rext[r];
        if (op->reduce != KILN_REDUCE_NONE && kiln_dtype_is_float((enum kiln_dtype)t->dtype))
            nflop += 1;
        flops += nflop * points;
    }
    return flops;
}

/* Bytes and params of the tensors in read (skipping those in skip, if given). */
static void
reads_bytes(const struct kiln_graph *g, const struct idset *read, const struct idset *skip,
            struct kiln_stats *out)
{
    for (uint32_t i = 0; i < read->cap; i++) {
        uint32_t t = read->key[i] - 1;
        if (!read->key[i] || t >= g->ntensor || (skip && set_has(skip, t + 1)))
            continue;
        out->bytes += tensor_bytes(&g->tensor[t]);
        if (g->tensor[t].kind == KILN_TENSOR_WEIGHT)
            out->params += (double)kiln_tensor_numel(&g->tensor[t]);
    }
}

void
kiln_op_stats(const struct kiln_graph *g, uint32_t op, struct kiln_stats *out)
{
    memset(out, 0, sizeof *out);
    if (op >= g->nop)
        return;
    struct idset read = {.ctx = g->ctx};
    out->flops = ops_flops(g, op, op + 1, &read);
    if (read.oom)
        KILN_FAIL(g->ctx, KILN_ERR_NOMEM, "stats", "out of memory");
    reads_bytes(g, &read, NULL, out);
    out->bytes += tensor_bytes(&g->tensor[g->op[op].out]);
    set_free(&read);
}

void
kiln_call_stats(const struct kiln_graph *g, uint32_t call, struct kiln_stats *out)
{
    memset(out, 0, sizeof *out);
    if (call >= g->ncall)
        return;
    const struct kiln_call *c = &g->call[call];
    struct idset            read = {.ctx = g->ctx}, internal = {.ctx = g->ctx};
    for (uint32_t i = c->op_begin; i < c->op_end && i < g->nop; i++)
        set_add(&internal, g->op[i].out + 1); /* produced by an op of this call */
    out->flops = ops_flops(g, c->op_begin, c->op_end < g->nop ? c->op_end : g->nop, &read);
    if (read.oom || internal.oom)
        KILN_FAIL(g->ctx, KILN_ERR_NOMEM, "stats", "out of memory");
    reads_bytes(g, &read, &internal, out);
    if (c->out < g->ntensor)
        out->bytes += tensor_bytes(&g->tensor[c->out]);
    set_free(&read);
    set_free(&internal);
}
