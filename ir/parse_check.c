/* ir/parse_check.c -- static analysis behind the .kg parser and printer: range inference for
 * the variables of a compute definition, and the static bounds check of loads by interval
 * arithmetic.
 *
 * Both work on built expressions, not on the syntax tree, so the parser and the printer see
 * exactly the same thing: a variable gets the extent of every tensor dimension it indexes
 * directly (`A[i, k]`), and the printer writes `where` exactly when this inference would not
 * give the range back. The bounds check walks the body as a tree, so a load shared between a
 * guarded and an unguarded place is checked; bodies built by the parser are trees in size (the
 * builders never duplicate), so the walk is linear in the text. Intervals are kiln_ival_exact's
 * (ir/arith.c): exact for + - * and for // and % by constants, conservative elsewhere, and
 * narrowed inside a branch of select by what its condition says about the index (below);
 * anything that may overflow int64 is unknown, and an unknown index is reported, in a branch of
 * select as anywhere else: a load the compiled code may execute out of range is an error,
 * never garbage or a fault. The statement sort is here too: Kahn's algorithm with a min-heap,
 * so text in dependency order keeps its order. */
#include "parse.h"

#include <string.h>

struct infer {
    const struct kiln_graph *g;
    uint32_t                 nax, nred;
    struct kiln_ir_range    *out;
};

static bool
infer_load(void *ud, kiln_expr load)
{
    struct infer   *in = ud;
    const kiln_ctx *ctx = in->g->ctx;
    uint32_t        t = (uint32_t)kiln_node_get(ctx, load)->imm;
    if (t >= in->g->ntensor)
        return true;
    const struct kiln_tensor *tt = &in->g->tensor[t];
    for (uint32_t d = 0; d < tt->ndim; d++) {
        const struct kiln_node *n = kiln_node_get(ctx, kiln_load_idx(ctx, load, d));
        if (n->op != KILN_OP_VAR)
            continue;
        enum kiln_var_kind kind = kiln_var_kind_of(n->imm);
        uint32_t           k = kiln_var_index(n->imm);
        if (kind == KILN_VAR_REDUCE && k < in->nred)
            k += in->nax;
        else if (kind != KILN_VAR_AXIS || k >= in->nax)
            continue;
        struct kiln_ir_range *r = &in->out[k];
        if (!r->ext) {
            r->ext = tt->shape[d];
            r->tensor = t;
            r->dim = d;
            r->load = load;
        } else if (r->ext != tt->shape[d] && !r->conflict) {
            r->conflict = true;
            r->ext2 = tt->shape[d];
            r->tensor2 = t;
            r->dim2 = d;
            r->load2 = load;
        }
    }
    return true;
}

void
kiln_ir_infer_ranges(const struct kiln_graph *g, kiln_expr body, uint32_t nax, uint32_t nred,
                     struct kiln_ir_range *out)
{
    struct infer in = {g, nax, nred, out};
    memset(out, 0, sizeof(*out) * (nax + nred));
    kiln_expr_visit_loads(g->ctx, body, infer_load, &in);
}

/* What the conditions of the enclosing selects say about index expressions: in the first branch
 * of select(c, a, b) c holds, in the second !c does, and each comparison of an expression with
 * a constant in such a condition (through && in the first branch, || in the second, and !)
 * bounds that expression -- the same node wherever it occurs, as expressions are hash-consed.
 * Padding reads x[h + kh - 1] under 0 <= h + kh - 1 && h + kh - 1 < H this way. A stack: a
 * branch pushes its facts and pops them when done. */
#define OOB_MAX_FACTS 256

struct oob_fact {
    uint32_t         id;
    struct kiln_ival iv;
};

/* Exact intervals (kiln_ival_exact, ir/arith.c) with axis k ranging over [0, ext[k]) and
 * reduction variable k over [0, ext[nax + k]), narrowed by the facts; named variables have
 * none. */
struct oob_env {
    struct kiln_ival_exact_env env;
    const int64_t             *ext;
    uint32_t                   nax, depth;
    struct oob_fact           *fact;
    uint32_t                   nfact;
};

static void
oob_narrow(const struct oob_env *o, kiln_expr e, struct kiln_ival *iv)
{
    for (uint32_t i = 0; i < o->nfact; i++)
        if (o->fact[i].id == e.id) {
            if (o->fact[i].iv.lo > iv->lo)
                iv->lo = o->fact[i].iv.lo;
            if (o->fact[i].iv.hi < iv->hi)
                iv->hi = o->fact[i].iv.hi;
        }
}

static bool
oob_var(void *ud, kiln_expr v, struct kiln_ival *out)
{
    const struct oob_env   *o = ud;
    const struct kiln_node *n = kiln_node_get(o->env.ctx, v);
    uint32_t                k = kiln_var_index(n->imm);
    switch (kiln_var_kind_of(n->imm)) {
    case KILN_VAR_AXIS:
        *out = (struct kiln_ival){0, o->ext[k] - 1};
        return true;
    case KILN_VAR_REDUCE:
        *out = (struct kiln_ival){0, o->ext[o->nax + k] - 1};
        return true;
    default:
        return false;
    }
}

static bool
oob_sub(void *ud, kiln_expr e, struct kiln_ival *out)
{
    struct oob_env *o = ud;
    if (o->depth > 4 * KILN_KG_MAX_DEPTH)
        return false;
    o->depth++;
    bool known = kiln_ival_exact(&o->env, e, out);
    o->depth--;
    if (!known) /* a value without an interval (a load: a gather's index) bounded by a guard */
        *out = KILN_IVAL_FULL;
    oob_narrow(o, e, out);
    return known || (out->lo > INT64_MIN && out->hi < INT64_MAX);
}

static bool
int_const(const kiln_ctx *ctx, kiln_expr e, int64_t *v)
{
    const struct kiln_node *n = kiln_node_get(ctx, e);
    if (n->op != KILN_OP_INT)
        return false;
    *v = n->imm;
    return true;
}

static void
push_fact(struct oob_env *o, kiln_expr e, int64_t lo, int64_t hi)
{
    if (o->nfact < OOB_MAX_FACTS) /* past that, fewer facts: a load may be reported, never missed */
        o->fact[o->nfact++] = (struct oob_fact){e.id, {lo, hi}};
}

/* Pushes what `cond` (holds = true) or `!cond` (holds = false) says about expressions. */
static void
push_facts(struct oob_env *o, kiln_expr cond, bool holds, uint32_t depth)
{
    const kiln_ctx         *ctx = o->env.ctx;
    const struct kiln_node *n = kiln_node_get(ctx, cond);
    kiln_expr               a = {n->kid[0]}, b = {n->kid[1]};
    int64_t                 k;
    if (depth > KILN_KG_MAX_DEPTH)
        return;
    switch (n->op) {
    case KILN_OP_NOT:
        push_facts(o, a, !holds, depth + 1);
        return;
    case KILN_OP_AND:
    case KILN_OP_OR:
        if ((n->op == KILN_OP_AND) == holds) { /* both sides hold (or both fail) */
            push_facts(o, a, holds, depth + 1);
            push_facts(o, b, holds, depth + 1);
        }
        return;
    case KILN_OP_EQ:
        if (holds && int_const(ctx, b, &k))
            push_fact(o, a, k, k);
        else if (holds && int_const(ctx, a, &k))
            push_fact(o, b, k, k);
        return;
    case KILN_OP_LT:
    case KILN_OP_LE: {
        /* lo <= hi - strict: a < b or a <= b when it holds, b <= a or b < a when it fails */
        int64_t   strict = (n->op == KILN_OP_LT) == holds;
        kiln_expr lo = holds ? a : b, hi = holds ? b : a;
        if (int_const(ctx, hi, &k) && k >= INT64_MIN + strict)
            push_fact(o, lo, INT64_MIN, k - strict);
        else if (int_const(ctx, lo, &k) && k <= INT64_MAX - strict)
            push_fact(o, hi, k + strict, INT64_MAX);
        return;
    }
    default:
        return;
    }
}

static bool
find_oob(const struct kiln_graph *g, kiln_expr e, struct oob_env *o, uint32_t depth,
         struct kiln_ir_oob *out)
{
    const kiln_ctx  *ctx = g->ctx;
    struct kiln_node n = *kiln_node_get(ctx, e);
    if (depth > 4 * KILN_KG_MAX_DEPTH)
        return false;
    if (n.op == KILN_OP_LOAD && (uint64_t)n.imm < g->ntensor) {
        const struct kiln_tensor *tt = &g->tensor[n.imm];
        for (uint32_t d = 0; d < tt->ndim; d++) {
            struct kiln_ival iv = {INT64_MIN, INT64_MAX};
            bool             known = oob_sub(o, kiln_load_idx(ctx, e, d), &iv);
            if (known && iv.lo >= 0 && iv.hi < tt->shape[d])
                continue;
            if (!known)
                iv = (struct kiln_ival){INT64_MIN, INT64_MAX};
            *out = (struct kiln_ir_oob){e, d, known, iv.lo, iv.hi};
            return true;
        }
    }
    for (int i = 0; i < kiln_op_arity[n.op]; i++) {
        if (!n.kid[i])
            continue;
        uint32_t mark = o->nfact;
        if (n.op == KILN_OP_SELECT && i > 0)
            push_facts(o, (kiln_expr){n.kid[0]}, i == 1, 0);
        bool found = find_oob(g, (kiln_expr){n.kid[i]}, o, depth + 1, out);
        o->nfact = mark;
        if (found)
            return true;
    }
    return false;
}

bool
kiln_ir_find_oob(const struct kiln_graph *g, kiln_expr body, const int64_t *ext, uint32_t nax,
                 struct kiln_ir_oob *out)
{
    struct oob_fact fact[OOB_MAX_FACTS];
    struct oob_env  o = {{g->ctx, oob_var, oob_sub, NULL}, ext, nax, 0, fact, 0};
    o.env.ud = &o;
    return find_oob(g, body, &o, 0, out);
}

/* ---- statement order ---- */

bool
kiln_ir_toposort(kiln_ctx *ctx, uint32_t n, const uint32_t *start, const uint32_t *dep,
                 uint32_t *order, uint32_t *cycle, uint32_t *ncycle)
{
    *ncycle = 0;
    uint32_t *indeg = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));
    uint32_t *rstart = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 2));
    uint32_t *radj = kiln_arena_alloc(ctx, sizeof(uint32_t) * (start[n] + 1));
    uint32_t *heap = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));
    bool     *done = kiln_arena_alloc(ctx, n + 1);
    if (!indeg || !rstart || !radj || !heap || !done)
        return false;
    /* reverse edges: the nodes waiting for each node */
    for (uint32_t i = 0; i < n; i++) {
        indeg[i] = start[i + 1] - start[i];
        for (uint32_t e = start[i]; e < start[i + 1]; e++)
            rstart[dep[e] + 1]++;
    }
    for (uint32_t i = 0; i < n; i++)
        rstart[i + 1] += rstart[i];
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t e = start[i]; e < start[i + 1]; e++)
            radj[rstart[dep[e]]++] = i;
    for (uint32_t i = n; i > 0; i--) /* shift back: rstart[i] = first waiter of node i */
        rstart[i] = rstart[i - 1];
    rstart[0] = 0;
    /* Kahn's algorithm with a min-heap of ready nodes */
    uint32_t nheap = 0, nout = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!indeg[i])
            heap[nheap++] = i; /* ascending: already a heap */
    while (nheap) {
        uint32_t top = heap[0];
        heap[0] = heap[--nheap];
        for (uint32_t k = 0;;) { /* sift down */
            uint32_t l = 2 * k + 1, m = k;
            if (l < nheap && heap[l] < heap[m])
                m = l;
            if (l + 1 < nheap && heap[l + 1] < heap[m])
                m = l + 1;
            if (m == k)
                break;
            uint32_t t = heap[k];
            heap[k] = heap[m];
            heap[m] = t;
            k = m;
        }
        order[nout++] = top;
        done[top] = true;
        for (uint32_t e = rstart[top]; e < rstart[top + 1]; e++) {
            uint32_t d = radj[e];
            if (--indeg[d])
                continue;
            uint32_t k = nheap++; /* sift up */
            heap[k] = d;
            while (k && heap[(k - 1) / 2] > heap[k]) {
                uint32_t t = heap[k];
                heap[k] = heap[(k - 1) / 2];
                heap[(k - 1) / 2] = t;
                k = (k - 1) / 2;
            }
        }
    }
    if (nout == n)
        return true;
    /* Every unfinished node waits for an unfinished node: follow those from the earliest
     * unfinished node until one repeats; the stretch from its first visit is a cycle. */
    uint32_t *step = indeg; /* reused: visit number, 0 = not visited */
    memset(step, 0, sizeof(uint32_t) * n);
    uint32_t s = 0, npath = 0;
    while (done[s])
        s++;
    while (!step[s]) {
        step[s] = ++npath;
        heap[npath - 1] = s; /* the path */
        for (uint32_t e = start[s]; e < start[s + 1]; e++) {
            if (!done[dep[e]]) {
                s = dep[e];
                break;
            }
        }
    }
    for (uint32_t k = step[s] - 1; k < npath; k++)
        cycle[(*ncycle)++] = heap[k];
    return false;
}
