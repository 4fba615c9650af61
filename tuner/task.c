/* tuner/task.c -- partitioning a kernel graph into tuning tasks.
 *
 * Every op is classified by analysing its compute definition: an *anchor* is a reduction with
 * data reuse (some input lacks an output axis of extent > 1 among its indices: matmul,
 * convolution, matrix-vector product); everything else is fusible (elementwise, injective, and
 * reductions without reuse such as row sums). Walking ops in graph order, an anchor opens a
 * new group; a fusible op joins the group of its latest producer unless that would put a
 * reduction after an anchor in the same group; an op whose producers are all arguments opens a
 * group of its own. Groups of fusible ops with no anchor whose tensors are read only by one
 * anchor group are then merged into it (elementwise producers inline into their consumer).
 *
 * Each group becomes a standalone graph: tensors it reads from other groups become inputs,
 * tensors read outside it (or graph outputs) become outputs, names are kept. Two groups with the
 * same structure (structural hash of the subgraph plus the display names of its variables,
 * which schedules refer to) are one task with a higher weight. */
#include "tuner.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- analysis ---- */

struct axes_seen {
    const kiln_ctx *ctx;
    uint64_t        mask; /* output axes that appear in an index */
};

static bool
axes_visit(void *ud, kiln_expr e)
{
    struct axes_seen       *a = ud;
    const struct kiln_node *n = kiln_node_get(a->ctx, e);
    if (n->op == KILN_OP_VAR && kiln_var_kind_of(n->imm) == KILN_VAR_AXIS
        && kiln_var_index(n->imm) < 64)
        a->mask |= 1ull << kiln_var_index(n->imm);
    return true;
}

struct reuse {
    const kiln_ctx           *ctx;
    const struct kiln_tensor *out;
    uint32_t                  lacking; /* loads missing some output axis of extent > 1 */
};

static bool
reuse_visit(void *ud, kiln_expr load)
{
    struct reuse    *r = ud;
    struct axes_seen a = {r->ctx, 0};
    uint32_t         n = kiln_load_nidx(r->ctx, load);
    for (uint32_t i = 0; i < n; i++)
        kiln_expr_visit_nodes(r->ctx, kiln_load_idx(r->ctx, load, i), axes_visit, &a);
    for (uint32_t d = 0; d < r->out->ndim; d++)
        if (r->out->shape[d] > 1 && !(a.mask & (1ull << d))) {
            r->lacking++;
            break;
        }
    return true;
}

/* Ansor's "needs multi-level tiling": a reduction some input of which is reused across an
 * output axis. */
bool kiln_op_has_reuse(const struct kiln_graph *g, uint32_t op);
bool
kiln_op_has_reuse(const struct kiln_graph *g, uint32_t op)
{
    const struct kiln_opdef *d = &g->op[op];
    if (d->reduce == KILN_REDUCE_NONE)
        return false;
    struct reuse r = {g->ctx, &g->tensor[d->out], 0};
    kiln_expr_visit_loads(g->ctx, d->body, reuse_visit, &r);
    return r.lacking >= 1;
}

struct reads {
    const kiln_ctx *ctx;
    uint32_t       *t;
    uint32_t        n, cap;
    kiln_ctx       *actx;
    bool            oom;
};

static bool
reads_visit(void *ud, kiln_expr load)
{
    struct reads *r = ud;
    uint32_t      t = (uint32_t)kiln_node_get(r->ctx, load)->imm;
    for (uint32_t i = 0; i < r->n; i++)
        if (r->t[i] == t)
            return true;
    if (!KILN_VEC_PUSH(r->actx, r->t, r->n, r->cap, t))
        r->oom = true;
    return !r->oom;
}

/* Tensors op reads, in order of first appearance (deterministic). */
static enum kiln_status
op_reads(kiln_ctx *ctx, const struct kiln_graph *g, uint32_t op, uint32_t **out, uint32_t *n)
{
    struct reads r = {.ctx = ctx, .actx = ctx};
    kiln_expr_visit_loads(ctx, g->op[op].body, reads_visit, &r);
    if (r.oom)
        return ctx->err.status;
    *out = r.t;
    *n = r.n;
    return KILN_OK;
}

/* ---- grouping ---- */

/* Every step below costs time in proportion to the ops and reads it touches: per-group op
 * lists, consumer lists and one tensor map reused across groups. The first version scanned
 * every op for each group and gave each group a map of every tensor, which made a graph of
 * 100,000 independent statements take 24 GB to lower. */
struct part {
    kiln_ctx                *ctx;
    const struct kiln_graph *g;
    uint32_t                *group;      /* per op */
    bool                    *anchor;     /* per op */
    bool                    *has_anchor; /* per group */
    uint32_t                 ngroup;
    uint32_t               **rd; /* per op: tensors read */
    uint32_t                *nrd;
    uint32_t                *head, *tail, *next; /* per group / op: the group's ops, a list */
    uint32_t                *cons, *ncons;       /* per op: the ops reading its output (CSR) */
    bool                    *outside;            /* per tensor: read by an op of another group */
    uint32_t                *map; /* per tensor: its tensor in the subgraph being built */
};

static uint32_t
producer_op(const struct kiln_graph *g, uint32_t t)
{
    return g->tensor[t].kind == KILN_TENSOR_OP ? g->tensor[t].op : KILN_NONE;
}

static void
merge_group(struct part *P, uint32_t from, uint32_t into)
{
    for (uint32_t o = P->head[from]; o != KILN_NONE; o = P->next[o])
        P->group[o] = into;
    if (P->head[from] != KILN_NONE) {
        if (P->head[into] == KILN_NONE)
            P->head[into] = P->head[from];
        else
            P->next[P->tail[into]] = P->head[from];
        P->tail[into] = P->tail[from];
        P->head[from] = P->tail[from] = KILN_NONE;
    }
    P->has_anchor[into] |= P->has_anchor[from];
}

/* The ops reading each op's output, as ranges of P->cons (P->ncons[p] .. P->ncons[p + 1]). */
static enum kiln_status
consumers(struct part *P)
{
    const struct kiln_graph *g = P->g;
    uint32_t                 nop = g->nop, total = 0;
    P->ncons = kiln_arena_alloc(P->ctx, sizeof(uint32_t) * (nop + 2));
    if (!P->ncons)
        return P->ctx->err.status;
    for (uint32_t o = 0; o < nop; o++)
        for (uint32_t i = 0; i < P->nrd[o]; i++) {
            uint32_t p = producer_op(g, P->rd[o][i]);
            if (p != KILN_NONE) {
                P->ncons[p + 2]++;
                total++;
            }
        }
    for (uint32_t p = 0; p < nop; p++)
        P->ncons[p + 2] += P->ncons[p + 1];
    P->cons = kiln_arena_alloc(P->ctx, sizeof(uint32_t) * (total + 1));
    if (!P->cons)
        return P->ctx->err.status;
    for (uint32_t o = 0; o < nop; o++)
        for (uint32_t i = 0; i < P->nrd[o]; i++) {
            uint32_t p = producer_op(g, P->rd[o][i]);
            if (p != KILN_NONE)
                P->cons[P->ncons[p + 1]++] = o;
        }
    return KILN_OK;
}

static enum kiln_status
partition(struct part *P)
{
    kiln_ctx                *ctx = P->ctx;
    const struct kiln_graph *g = P->g;
    uint32_t                 nop = g->nop;
    P->group = kiln_arena_alloc(ctx, sizeof(uint32_t) * (nop + 1));
    P->anchor = kiln_arena_alloc(ctx, nop + 1);
    P->has_anchor = kiln_arena_alloc(ctx, nop + 1);
    P->rd = kiln_arena_alloc(ctx, sizeof(uint32_t *) * (nop + 1));
    P->nrd = kiln_arena_alloc(ctx, sizeof(uint32_t) * (nop + 1));
    P->head = kiln_arena_alloc(ctx, sizeof(uint32_t) * (nop + 1));
    P->tail = kiln_arena_alloc(ctx, sizeof(uint32_t) * (nop + 1));
    P->next = kiln_arena_alloc(ctx, sizeof(uint32_t) * (nop + 1));
    if (!P->group || !P->anchor || !P->has_anchor || !P->rd || !P->nrd || !P->head || !P->tail
        || !P->next)
        return ctx->err.status;
    for (uint32_t o = 0; o < nop; o++) {
        KILN_TRY(op_reads(ctx, g, o, &P->rd[o], &P->nrd[o]));
        P->anchor[o] = kiln_op_has_reuse(g, o);
        P->has_anchor[o] = false;
    }
    KILN_TRY(consumers(P));
    for (uint32_t o = 0; o < nop; o++) {
        uint32_t latest = KILN_NONE; /* op producing one of o's inputs, latest in graph order */
        for (uint32_t i = 0; i < P->nrd[o]; i++) {
            uint32_t p = producer_op(g, P->rd[o][i]);
            if (p != KILN_NONE && (latest == KILN_NONE || p > latest))
                latest = p;
        }
        bool join = !P->anchor[o] && latest != KILN_NONE;
        if (join && g->op[o].reduce != KILN_REDUCE_NONE && P->has_anchor[P->group[latest]])
            join = false; /* a reduction after an anchor gets its own task */
        uint32_t grp;
        if (join) {
            grp = P->group[latest];
        } else {
            grp = P->ngroup++;
            P->has_anchor[grp] = P->anchor[o];
            P->head[grp] = KILN_NONE;
        }
        P->group[o] = grp;
        P->next[o] = KILN_NONE;
        if (P->head[grp] == KILN_NONE)
            P->head[grp] = o;
        else
            P->next[P->tail[grp]] = o;
        P->tail[grp] = o;
    }
    /* anchor-free groups read only by one anchor group inline into it (an anchor-free group
     * never grows, so its ops are those it was made with) */
    for (uint32_t grp = 0; grp < P->ngroup; grp++) {
        if (P->has_anchor[grp])
            continue;
        uint32_t reader = KILN_NONE;
        bool     single = true, used = false, is_out = false;
        for (uint32_t p = P->head[grp]; p != KILN_NONE; p = P->next[p]) {
            is_out |= g->tensor[g->op[p].out].is_output;
            for (uint32_t c = P->ncons[p]; c < P->ncons[p + 1] && single; c++) {
                uint32_t o = P->cons[c];
                if (P->group[o] == grp)
                    continue;
                used = true;
                if (reader == KILN_NONE)
                    reader = P->group[o];
                else if (reader != P->group[o])
                    single = false;
            }
        }
        if (used && single && !is_out && P->has_anchor[reader])
            merge_group(P, grp, reader);
    }
    /* what each group must output besides the graph's outputs */
    P->outside = kiln_arena_alloc(ctx, g->ntensor + 1);
    P->map = kiln_arena_alloc(ctx, sizeof(uint32_t) * (g->ntensor + 1));
    if (!P->outside || !P->map)
        return ctx->err.status;
    for (uint32_t t = 0; t < g->ntensor; t++)
        P->map[t] = KILN_NONE;
    for (uint32_t o = 0; o < nop; o++)
        for (uint32_t i = 0; i < P->nrd[o]; i++) {
            uint32_t p = producer_op(g, P->rd[o][i]);
            if (p != KILN_NONE && P->group[p] != P->group[o])
                P->outside[P->rd[o][i]] = true;
        }
    return KILN_OK;
}

/* ---- subgraph extraction ---- */

struct extract {
    kiln_ctx                *ctx;
    const struct kiln_graph *g;
    struct kiln_graph       *sub;
    uint32_t                *map; /* whole-graph tensor -> sub tensor, KILN_NONE (P->map) */
};

static kiln_expr
remap_load(void *ud, kiln_expr load, uint32_t n, const kiln_expr *idx)
{
    struct extract *E = ud;
    uint32_t        t = (uint32_t)kiln_node_get(E->ctx, load)->imm;
    return kiln_load(E->ctx, E->map[t], (enum kiln_dtype)E->g->tensor[t].dtype, n, idx);
}

static enum kiln_status
add_like(struct extract *E, uint32_t t, enum kiln_tensor_kind kind)
{
    const struct kiln_tensor *src = &E->g->tensor[t];
    uint32_t                  id = kiln_graph_add_tensor(E->sub, kiln_sym_str(E->ctx, src->name),
                                                         (enum kiln_dtype)src->dtype, src->ndim, src->shape, kind);
    if (id == KILN_NONE)
        return E->ctx->err.status;
    E->map[t] = id;
    return KILN_OK;
}

/* Builds the subgraph of the ops of group grp (ops[0..nops) in graph order); *tensors gets the
 * whole graph's tensor of each subgraph tensor. P->map is all KILN_NONE before and after. */
static enum kiln_status
extract_group(struct part *P, struct extract *E, const uint32_t *ops, uint32_t nops,
              uint32_t **tensors)
{
    kiln_ctx                *ctx = P->ctx;
    const struct kiln_graph *g = P->g;
    uint32_t                 grp = P->group[ops[0]];
    /* arguments: every tensor read that the group does not produce, in first-read order */
    for (uint32_t k = 0; k < nops; k++) {
        uint32_t o = ops[k];
        for (uint32_t i = 0; i < P->nrd[o]; i++) {
            uint32_t t = P->rd[o][i];
            uint32_t p = producer_op(g, t);
            if (E->map[t] != KILN_NONE || (p != KILN_NONE && P->group[p] == grp))
                continue;
            enum kiln_tensor_kind kind =
                g->tensor[t].kind == KILN_TENSOR_WEIGHT ? KILN_TENSOR_WEIGHT : KILN_TENSOR_INPUT;
            KILN_TRY(add_like(E, t, kind));
        }
    }
    for (uint32_t k = 0; k < nops; k++) {
        const struct kiln_opdef *d = &g->op[ops[k]];
        KILN_TRY(add_like(E, d->out, KILN_TENSOR_OP));
        kiln_expr body = kiln_expr_map_loads(ctx, d->body, remap_load, E);
        if (!body.id)
            return ctx->err.status;
        KILN_TRY(kiln_graph_begin_call(E->sub, "compute", 0, NULL, 0, NULL, g->tensor[d->out].line,
                                       g->tensor[d->out].col));
        KILN_TRY(kiln_graph_add_op(E->sub, E->map[d->out], (enum kiln_reduce)d->reduce, d->nred,
                                   d->rext, body, d->axname, d->rname));
        KILN_TRY(kiln_graph_end_call(E->sub, E->map[d->out]));
    }
    /* outputs: graph outputs, and tensors read by ops of other groups */
    for (uint32_t k = 0; k < nops; k++) {
        uint32_t t = g->op[ops[k]].out;
        if (g->tensor[t].is_output || P->outside[t])
            KILN_TRY(kiln_graph_mark_output(E->sub, E->map[t]));
    }
    KILN_TRY(kiln_graph_verify(E->sub));
    uint32_t *inv = kiln_arena_alloc(ctx, sizeof(uint32_t) * (E->sub->ntensor + 1));
    if (!inv)
        return ctx->err.status;
    /* the subgraph's tensors are those add_like mapped: tensors the ops read, and their
     * outputs */
    for (uint32_t k = 0; k < nops; k++) {
        uint32_t o = ops[k];
        for (uint32_t i = 0; i < P->nrd[o]; i++)
            inv[E->map[P->rd[o][i]]] = P->rd[o][i];
        inv[E->map[g->op[o].out]] = g->op[o].out;
    }
    *tensors = inv;
    return KILN_OK;
}

/* extract_group, then P->map cleared of what it set. */
static enum kiln_status
extract(struct part *P, const uint32_t *ops, uint32_t nops, struct kiln_graph **out,
        uint32_t **tensors)
{
    kiln_ctx      *ctx = P->ctx;
    struct extract E = {ctx, P->g, kiln_graph_new(ctx), P->map};
    if (!E.sub)
        return ctx->err.status;
    E.sub->file = P->g->file;
    enum kiln_status st = extract_group(P, &E, ops, nops, tensors);
    for (uint32_t k = 0; k < nops; k++) {
        uint32_t o = ops[k];
        for (uint32_t i = 0; i < P->nrd[o]; i++)
            P->map[P->rd[o][i]] = KILN_NONE;
        P->map[P->g->op[o].out] = KILN_NONE;
    }
    if (st == KILN_OK)
        *out = E.sub;
    return st;
}

/* Structural hash plus the variable display names (schedules name iterators by them). */
uint64_t
kiln_task_hash(const struct kiln_graph *sub)
{
    uint64_t h = kiln_graph_hash(sub);
    for (uint32_t o = 0; o < sub->nop; o++) {
        const struct kiln_opdef *d = &sub->op[o];
        for (uint32_t k = 0; k < sub->tensor[d->out].ndim; k++)
            h = kiln_hash_str(h, kiln_sym_str(sub->ctx, d->axname[k]));
        for (uint32_t k = 0; k < d->nred; k++)
            h = kiln_hash_str(h, kiln_sym_str(sub->ctx, d->rname[k]));
    }
    return h;
}

/* A tensor as the kind sees it: dtype, role and rank, not its shape or its index (the order in
 * which a task's tensors are numbered follows operand orders that depend on the extents). */
static uint64_t
tensor_kind(const struct kiln_graph *g, uint32_t t)
{
    const struct kiln_tensor *tt = &g->tensor[t];
    return kiln_hash_u64(KILN_HASH_SEED, ((uint64_t)tt->dtype << 24) | ((uint64_t)tt->kind << 16)
                                             | ((uint64_t)tt->ndim << 8) | tt->is_output);
}

/* An expression's structure with the values of its literals left out: extents, strides, paddings
 * and constants are all literals in a body. A select's condition is left out too: a padded
 * window's bounds checks are there, and which of them the simplifier can drop depends on the
 * extents (a stride-2 window over an even width never crosses its right edge). A load names
 * its tensor by tensor_kind. The operands of a commutative op are combined in an order of their
 * own hashes, since the builders order them by a hash that sees the values. */
static uint64_t
expr_kind(const struct kiln_graph *g, kiln_expr e)
{
    const struct kiln_node *n = kiln_node_get(g->ctx, e);
    uint64_t                imm = (uint64_t)n->imm;
    if (n->op == KILN_OP_INT || n->op == KILN_OP_FLOAT)
        imm = 0;
    else if (n->op == KILN_OP_LOAD)
        imm = n->imm >= 0 && (uint64_t)n->imm < g->ntensor ? tensor_kind(g, (uint32_t)n->imm) : 0;
    uint64_t h = kiln_hash_u64(KILN_HASH_SEED, ((uint64_t)n->op << 8) | KILN_DTYPE_HASH(n->dtype));
    h = kiln_hash_u64(h, imm);
    uint32_t kid[3] = {n->kid[0], n->kid[1], n->kid[2]}; /* n moves when nodes are interned */
    bool     comm = kiln_op_flags[n->op] & KILN_OPF_COMM, sel = n->op == KILN_OP_SELECT;
    uint64_t k[3];
    for (int i = 0; i < 3; i++)
        k[i] = kid[i] && !(sel && i == 0) ? expr_kind(g, (kiln_expr){kid[i]}) : 0;
    if (comm && k[0] > k[1]) {
        uint64_t t = k[0];
        k[0] = k[1];
        k[1] = t;
    }
    for (int i = 0; i < 3; i++)
        h = kiln_hash_u64(h, k[i]);
    return h;
}

uint64_t
kiln_task_kind(const struct kiln_graph *sub)
{
    /* tensors, arguments and outputs as multisets (sums): their numbering is not structure */
    uint64_t all = 0, args = 0, outs = 0;
    for (uint32_t t = 0; t < sub->ntensor; t++)
        all += tensor_kind(sub, t);
    for (uint32_t i = 0; i < sub->narg; i++)
        args += tensor_kind(sub, sub->arg[i]);
    for (uint32_t i = 0; i < sub->noutput; i++)
        outs += tensor_kind(sub, sub->output[i]);
    uint64_t h = kiln_hash_u64(KILN_HASH_SEED, sub->ntensor);
    h = kiln_hash_u64(kiln_hash_u64(kiln_hash_u64(h, all), args), outs);
    for (uint32_t o = 0; o < sub->nop; o++) {
        const struct kiln_opdef *d = &sub->op[o];
        h = kiln_hash_u64(h, tensor_kind(sub, d->out));
        h = kiln_hash_u64(h, ((uint64_t)d->reduce << 8) | d->nred);
        h = kiln_hash_u64(h, expr_kind(sub, d->body));
        for (uint32_t k = 0; k < sub->tensor[d->out].ndim; k++)
            h = kiln_hash_str(h, kiln_sym_str(sub->ctx, d->axname[k]));
        for (uint32_t k = 0; k < d->nred; k++)
            h = kiln_hash_str(h, kiln_sym_str(sub->ctx, d->rname[k]));
    }
    return h;
}

enum kiln_status
kiln_tasks_extract(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_tasks *out)
{
    memset(out, 0, sizeof *out);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct part P = {.ctx = ctx, .g = g};
    KILN_TRY(partition(&P));
    /* each group's ops in graph order: a counting sort by group */
    uint32_t *start = kiln_arena_alloc(ctx, sizeof(uint32_t) * (P.ngroup + 2));
    uint32_t *ops = kiln_arena_alloc(ctx, sizeof(uint32_t) * (g->nop + 1));
    /* tasks by hash: open addressing, task index + 1, at most half full */
    uint32_t nslot = 16;
    while (nslot < 2 * P.ngroup + 2)
        nslot *= 2;
    uint32_t *slot = kiln_arena_alloc(ctx, sizeof(uint32_t) * nslot);
    uint32_t *cap = kiln_arena_alloc(ctx, sizeof(uint32_t) * (P.ngroup + 1));
    out->task = kiln_arena_alloc(ctx, sizeof(struct kiln_task) * (P.ngroup + 1));
    if (!start || !ops || !slot || !cap || !out->task)
        return ctx->err.status;
    for (uint32_t o = 0; o < g->nop; o++)
        start[P.group[o] + 2]++;
    for (uint32_t grp = 0; grp < P.ngroup; grp++)
        start[grp + 2] += start[grp + 1];
    for (uint32_t o = 0; o < g->nop; o++)
        ops[start[P.group[o] + 1]++] = o;
    for (uint32_t grp = 0; grp < P.ngroup; grp++) {
        uint32_t nops = start[grp + 1] - start[grp];
        if (!nops)
            continue; /* merged away */
        const uint32_t    *gops = ops + start[grp];
        struct kiln_graph *sub = NULL;
        uint32_t          *tens = NULL;
        KILN_TRY(extract(&P, gops, nops, &sub, &tens));
        uint64_t  h = kiln_task_hash(sub);
        uint32_t *inst = kiln_arena_alloc(ctx, sizeof(uint32_t) * nops);
        if (!inst)
            return ctx->err.status;
        memcpy(inst, gops, sizeof(uint32_t) * nops);
        struct kiln_task *t = NULL;
        uint32_t          i = (uint32_t)h & (nslot - 1);
        for (; slot[i]; i = (i + 1) & (nslot - 1))
            if (out->task[slot[i] - 1].hash == h && out->task[slot[i] - 1].g->nop == nops) {
                t = &out->task[slot[i] - 1];
                break;
            }
        if (!t) {
            slot[i] = out->n + 1;
            cap[out->n] = 0;
            t = &out->task[out->n++];
            memset(t, 0, sizeof *t);
            t->g = sub;
            t->hash = h;
            t->kind = kiln_task_kind(sub);
            snprintf(t->key, sizeof t->key, "%016" PRIx64, h);
            for (uint32_t o = 0; o < sub->nop; o++) {
                struct kiln_stats st;
                kiln_op_stats(sub, o, &st);
                t->flops += st.flops;
            }
        }
        uint32_t *c = &cap[t - out->task];
        if (t->ninst == *c) { /* doubled, so that n occurrences cost O(n) */
            uint32_t   nc = *c ? 2 * *c : 4;
            uint32_t **ni = kiln_arena_alloc(ctx, sizeof(uint32_t *) * nc);
            uint32_t **nt = kiln_arena_alloc(ctx, sizeof(uint32_t *) * nc);
            if (!ni || !nt)
                return ctx->err.status;
            if (t->ninst) {
                memcpy(ni, t->inst_ops, sizeof(uint32_t *) * t->ninst);
                memcpy(nt, t->inst_tensors, sizeof(uint32_t *) * t->ninst);
            }
            t->inst_ops = ni;
            t->inst_tensors = nt;
            *c = nc;
        }
        t->inst_ops[t->ninst] = inst;
        t->inst_tensors[t->ninst++] = tens;
        t->weight = t->ninst;
    }
    return KILN_OK;
}

/* ---- renaming a task's schedule for one occurrence ---- */

/* The occurrence's name for stage `name` of the task: a task tensor's name maps to the
 * occurrence's tensor; a derived stage ("C.local", "B.pack") maps its longest matching
 * tensor prefix (inputs included: "B.pack"). Names that are not the task's stay. */
static uint32_t
rename_one(kiln_ctx *ctx, const uint32_t *from, const uint32_t *to, uint32_t n, uint32_t name)
{
    const char *s = kiln_sym_str(ctx, name);
    size_t      best = 0;
    uint32_t    bi = KILN_NONE;
    for (uint32_t i = 0; i < n; i++) {
        const char *f = kiln_sym_str(ctx, from[i]);
        size_t      fl = strlen(f);
        if (fl > best && !strncmp(s, f, fl) && (s[fl] == 0 || s[fl] == '.')) {
            best = fl;
            bi = i;
        }
    }
    if (bi == KILN_NONE)
        return name;
    if (from[bi] == to[bi])
        return name;
    const char *buf = kiln_arena_printf(ctx, "%s%s", kiln_sym_str(ctx, to[bi]), s + best);
    return buf ? kiln_sym_cstr(ctx, buf) : name;
}

enum kiln_status
kiln_task_rename(kiln_ctx *ctx, const struct kiln_graph *whole, const struct kiln_task *t,
                 uint32_t inst, const struct kiln_schedule *s, struct kiln_schedule *out)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    KILN_ENSURE(ctx, inst < t->ninst);
    uint32_t  n = t->g->ntensor;
    uint32_t *from = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));
    uint32_t *to = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));
    if (!from || !to)
        return ctx->err.status;
    for (uint32_t i = 0; i < n; i++) {
        from[i] = t->g->tensor[i].name;
        to[i] = whole->tensor[t->inst_tensors[inst][i]].name;
    }
    for (uint32_t i = 0; i < s->nstep; i++) {
        struct kiln_step             st = s->step[i];
        const struct kiln_step_desc *d =
            st.kind < KILN_STEP_COUNT ? &kiln_step_desc[st.kind] : NULL;
        st.stage = rename_one(ctx, from, to, n, st.stage); /* a stage or a tensor */
        if (d && d->target == KILN_REF_STAGE)
            st.target = rename_one(ctx, from, to, n, st.target);
        if (d && d->iters == KILN_REF_STAGE)
            for (uint32_t k = 0; k < st.n; k++)
                st.iters[k] = rename_one(ctx, from, to, n, st.iters[k]);
        KILN_TRY(kiln_sched_push(ctx, out, st));
    }
    return KILN_OK;
}
