/* ir/parse_check.c -- static analysis behind the .kg parser and printer: range inference for
 * the variables of a compute definition, and the static bounds check of loads by interval
 * arithmetic.
 *
 * Both work on built expressions, not on the syntax tree, so the parser and the printer see
 * exactly the same thing: a variable gets the extent of every tensor dimension it indexes
 * directly (`A[i, k]`), and the printer writes `where` exactly when this inference would not
 * give the range back. The bounds check walks the body as a tree, so a load shared between a
 * guarded and an unguarded place is checked; bodies built by the parser are trees in size (the
 * builders never duplicate), so the walk is linear in the text. Intervals are exact for
 * + - * and for // and % by constants, conservative elsewhere; anything that may overflow
 * int64 is unknown, and an unknown index outside select is reported. The statement sort is
 * here too: Kahn's algorithm with a min-heap, so text in dependency order keeps its order. */
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

struct ival {
    int64_t lo, hi;
    bool    known;
};

static const struct ival unknown = {INT64_MIN, INT64_MAX, false};

static struct ival
span(int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t lo = a, hi = a;
    int64_t v[3] = {b, c, d};
    for (int i = 0; i < 3; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    return (struct ival){lo, hi, true};
}

/* Interval of an integer expression over the variables' ranges [0, ext). */
static struct ival
ival_of(const kiln_ctx *ctx, kiln_expr e, const int64_t *ext, uint32_t nax, uint32_t depth)
{
    const struct kiln_node *n = kiln_node_get(ctx, e);
    if (depth > 4 * KILN_KG_MAX_DEPTH)
        return unknown;
    struct ival a = unknown, b = unknown;
    if (kiln_op_arity[n->op] >= 1 && n->op != KILN_OP_LOAD && n->op != KILN_OP_SELECT)
        a = ival_of(ctx, (kiln_expr){n->kid[0]}, ext, nax, depth + 1);
    if (kiln_op_arity[n->op] == 2 && n->op != KILN_OP_LIST)
        b = ival_of(ctx, (kiln_expr){n->kid[1]}, ext, nax, depth + 1);
    int64_t x, y, z, w;
    switch ((enum kiln_op)n->op) {
    case KILN_OP_INT:
        return (struct ival){n->imm, n->imm, true};
    case KILN_OP_VAR: {
        uint32_t k = kiln_var_index(n->imm);
        switch (kiln_var_kind_of(n->imm)) {
        case KILN_VAR_AXIS:
            return (struct ival){0, ext[k] - 1, true};
        case KILN_VAR_REDUCE:
            return (struct ival){0, ext[nax + k] - 1, true};
        default:
            return unknown;
        }
    }
    case KILN_OP_CAST: {
        enum kiln_dtype from = kiln_expr_dtype(ctx, (kiln_expr){n->kid[0]});
        if (!a.known || !(kiln_dtype_is_int(from) || from == KILN_DTYPE_BOOL))
            return unknown;
        if (n->dtype == KILN_DTYPE_I8 && (a.lo < INT8_MIN || a.hi > INT8_MAX))
            return unknown;
        if (n->dtype == KILN_DTYPE_I32 && (a.lo < INT32_MIN || a.hi > INT32_MAX))
            return unknown;
        return a;
    }
    case KILN_OP_LOAD: { /* an element holds its dtype's range; i64 is unknown */
        struct ival r = {0, 0, true};
        if (n->dtype == KILN_DTYPE_I64
            || !kiln_dtype_range((enum kiln_dtype)n->dtype, &r.lo, &r.hi))
            return unknown;
        return r;
    }
    case KILN_OP_EQ:
    case KILN_OP_NE:
    case KILN_OP_LT:
    case KILN_OP_LE:
    case KILN_OP_AND:
    case KILN_OP_OR:
    case KILN_OP_NOT:
        return (struct ival){0, 1, true};
    case KILN_OP_SELECT:
        a = ival_of(ctx, (kiln_expr){n->kid[1]}, ext, nax, depth + 1);
        b = ival_of(ctx, (kiln_expr){n->kid[2]}, ext, nax, depth + 1);
        if (!a.known || !b.known)
            return unknown;
        return (struct ival){a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi, true};
    default:
        break;
    }
    if (!a.known || (kiln_op_arity[n->op] == 2 && !b.known))
        return unknown;
    switch ((enum kiln_op)n->op) {
    case KILN_OP_ADD:
        if (kiln_add_overflows(a.lo, b.lo, &x) || kiln_add_overflows(a.hi, b.hi, &y))
            return unknown;
        return (struct ival){x, y, true};
    case KILN_OP_SUB:
        if (b.lo == INT64_MIN || b.hi == INT64_MIN || kiln_add_overflows(a.lo, -b.hi, &x)
            || kiln_add_overflows(a.hi, -b.lo, &y))
            return unknown;
        return (struct ival){x, y, true};
    case KILN_OP_MUL:
        if (kiln_mul_overflows(a.lo, b.lo, &x) || kiln_mul_overflows(a.lo, b.hi, &y)
            || kiln_mul_overflows(a.hi, b.lo, &z) || kiln_mul_overflows(a.hi, b.hi, &w))
            return unknown;
        return span(x, y, z, w);
    case KILN_OP_FLOORDIV:
        if (b.lo <= 0 && b.hi >= 0)
            return unknown;
        if ((a.lo == INT64_MIN || a.hi == INT64_MIN) && (b.lo == -1 || b.hi == -1))
            return unknown;
        return span(kiln_scalar_floordiv(a.lo, b.lo), kiln_scalar_floordiv(a.lo, b.hi),
                    kiln_scalar_floordiv(a.hi, b.lo), kiln_scalar_floordiv(a.hi, b.hi));
    case KILN_OP_FLOORMOD:
        if (b.lo > 0)
            return a.lo >= 0 && a.hi < b.lo ? a : (struct ival){0, b.hi - 1, true};
        if (b.hi < 0)
            return (struct ival){b.lo + 1, 0, true};
        return unknown;
    case KILN_OP_MIN:
        return (struct ival){a.lo < b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi, true};
    case KILN_OP_MAX:
        return (struct ival){a.lo > b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi, true};
    case KILN_OP_NEG:
        if (a.lo == INT64_MIN)
            return unknown;
        return (struct ival){-a.hi, -a.lo, true};
    case KILN_OP_ABS:
        if (a.lo == INT64_MIN)
            return unknown;
        if (a.lo >= 0)
            return a;
        if (a.hi <= 0)
            return (struct ival){-a.hi, -a.lo, true};
        return (struct ival){0, -a.lo > a.hi ? -a.lo : a.hi, true};
    default:
        return unknown;
    }
}

static bool
find_oob(const struct kiln_graph *g, kiln_expr e, const int64_t *ext, uint32_t nax, bool guarded,
         uint32_t depth, struct kiln_ir_oob *out)
{
    const kiln_ctx  *ctx = g->ctx;
    struct kiln_node n = *kiln_node_get(ctx, e);
    if (depth > 4 * KILN_KG_MAX_DEPTH)
        return false;
    if (n.op == KILN_OP_LOAD && !guarded && (uint64_t)n.imm < g->ntensor) {
        const struct kiln_tensor *tt = &g->tensor[n.imm];
        for (uint32_t d = 0; d < tt->ndim; d++) {
            struct ival iv = ival_of(ctx, kiln_load_idx(ctx, e, d), ext, nax, 0);
            if (iv.known && iv.lo >= 0 && iv.hi < tt->shape[d])
                continue;
            *out = (struct kiln_ir_oob){e, d, iv.known, iv.lo, iv.hi};
            return true;
        }
    }
    for (int i = 0; i < kiln_op_arity[n.op]; i++) {
        bool gi = guarded || (n.op == KILN_OP_SELECT && i > 0);
        if (n.kid[i] && find_oob(g, (kiln_expr){n.kid[i]}, ext, nax, gi, depth + 1, out))
            return true;
    }
    return false;
}

bool
kiln_ir_find_oob(const struct kiln_graph *g, kiln_expr body, const int64_t *ext, uint32_t nax,
                 struct kiln_ir_oob *out)
{
    return find_oob(g, body, ext, nax, false, 0, out);
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
