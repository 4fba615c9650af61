/* ir/expr.c -- hash-consed expression nodes: interning, builders that type-check, fold
 * constants and canonicalise commutative operands, and generic rewriting (substitution).
 *
 * Nodes live in one array owned by the context (ctx->node), addressed by 32-bit ids; id 0 is
 * nil. Interning hashes the node's bytes (operand *ids*) into chains kept newest-first, so a
 * rollback to a mark pops chain heads in O(1) per node. Each node also carries `shash`, a
 * structural hash computed from content only (operands' shash, never ids), which is stable
 * across contexts, machines and runs: commutative operands are ordered by it, so the canonical
 * form of an expression does not depend on the order nodes were created in. */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const kiln_op_name[KILN_OP_COUNT] = {
#define KILN_OP(name, arity, flags, text, prec, cost) #name,
#include "ops.def"
#undef KILN_OP
};
const uint8_t kiln_op_arity[KILN_OP_COUNT] = {
#define KILN_OP(name, arity, flags, text, prec, cost) arity,
#include "ops.def"
#undef KILN_OP
};
const uint32_t kiln_op_flags[KILN_OP_COUNT] = {
#define KILN_OP(name, arity, flags, text, prec, cost) flags,
#include "ops.def"
#undef KILN_OP
};
const char *const kiln_op_text[KILN_OP_COUNT] = {
#define KILN_OP(name, arity, flags, text, prec, cost) text,
#include "ops.def"
#undef KILN_OP
};
const uint8_t kiln_op_prec[KILN_OP_COUNT] = {
#define KILN_OP(name, arity, flags, text, prec, cost) prec,
#include "ops.def"
#undef KILN_OP
};
const uint8_t kiln_op_cost[KILN_OP_COUNT] = {
#define KILN_OP(name, arity, flags, text, prec, cost) cost,
#include "ops.def"
#undef KILN_OP
};

static const char *
opname(enum kiln_op op)
{
    static _Thread_local char lower[KILN_OP_COUNT]
                                   [16]; /* per thread: predictions print in parallel */
    if (!lower[op][0]) {
        const char *s = kiln_op_name[op];
        size_t      i = 0;
        for (; s[i] && i < 15; i++)
            lower[op][i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
        lower[op][i] = 0;
    }
    return lower[op];
}

static uint64_t
node_key(const struct kiln_node *n)
{
    uint64_t h = kiln_hash_u64(n->op, n->dtype);
    h = kiln_hash_u64(h, ((uint64_t)n->kid[0] << 32) | n->kid[1]);
    h = kiln_hash_u64(h, n->kid[2]);
    return kiln_hash_u64(h, (uint64_t)n->imm);
}

static bool
node_eq(const struct kiln_node *a, const struct kiln_node *b)
{
    return a->op == b->op && a->dtype == b->dtype && a->kid[0] == b->kid[0]
           && a->kid[1] == b->kid[1] && a->kid[2] == b->kid[2] && a->imm == b->imm;
}

static uint64_t
node_shash(const kiln_ctx *ctx, const struct kiln_node *n)
{
    uint64_t h = kiln_hash_u64(KILN_HASH_SEED, ((uint64_t)n->op << 8) | KILN_DTYPE_HASH(n->dtype));
    h = kiln_hash_u64(h, (uint64_t)n->imm);
    for (int i = 0; i < kiln_op_arity[n->op]; i++)
        h = kiln_hash_u64(h, n->kid[i] ? ctx->node[n->kid[i]].shash : 0);
    return h;
}

static bool
rehash(kiln_ctx *ctx, uint32_t nbucket)
{
    uint32_t *b = kiln_mem_realloc(ctx, NULL, 0, sizeof(uint32_t) * nbucket);
    if (!b)
        return false;
    memset(b, 0, sizeof(uint32_t) * nbucket);
    kiln_mem_free(ctx, ctx->bucket, sizeof(uint32_t) * (ctx->mask + 1));
    ctx->bucket = b;
    ctx->mask = nbucket - 1;
    for (uint32_t id = 1; id < ctx->nnode; id++) { /* ascending: newest ends at chain heads */
        uint32_t *h = &b[node_key(&ctx->node[id]) & ctx->mask];
        ctx->node[id].next = *h;
        *h = id;
    }
    return true;
}

bool
kiln_expr_init(kiln_ctx *ctx)
{
    ctx->capnode = 1024;
    ctx->node = kiln_mem_realloc(ctx, NULL, 0, sizeof(struct kiln_node) * ctx->capnode);
    if (!ctx->node)
        return false;
    memset(&ctx->node[0], 0, sizeof ctx->node[0]);
    ctx->node[0].dtype = KILN_DTYPE_VOID;
    ctx->nnode = 1;
    return rehash(ctx, 1024);
}

void
kiln_expr_fini(kiln_ctx *ctx)
{
    kiln_mem_free(ctx, ctx->node, sizeof(struct kiln_node) * ctx->capnode);
    kiln_mem_free(ctx, ctx->bucket, sizeof(uint32_t) * (ctx->mask + 1));
    ctx->node = NULL;
    ctx->bucket = NULL;
}

static kiln_expr
nomem(kiln_ctx *ctx)
{
    KILN_FAIL(ctx, KILN_ERR_NOMEM, "expr", "out of memory interning an expression");
    return (kiln_expr){0};
}

static kiln_expr
intern(kiln_ctx *ctx, struct kiln_node key)
{
    key.pad = 0;
    key.pad2 = 0;
    key.next = 0;
    uint64_t  k = node_key(&key);
    uint32_t *head = &ctx->bucket[k & ctx->mask];

    for (uint32_t id = *head; id; id = ctx->node[id].next)
        if (node_eq(&ctx->node[id], &key))
            return (kiln_expr){id};
    if (ctx->nnode == UINT32_MAX)
        return nomem(ctx);
    if (ctx->nnode == ctx->capnode) {
        uint32_t          ncap = ctx->capnode > UINT32_MAX / 2 ? UINT32_MAX : ctx->capnode * 2;
        struct kiln_node *n =
            kiln_mem_realloc(ctx, ctx->node, sizeof(*n) * ctx->capnode, sizeof(*n) * ncap);
        if (!n)
            return nomem(ctx);
        ctx->node = n;
        ctx->capnode = ncap;
    }
    key.shash = node_shash(ctx, &key);
    uint32_t id = ctx->nnode++;
    key.next = *head;
    ctx->node[id] = key;
    *head = id;
    if (ctx->nnode > 2 * (ctx->mask + 1) && !rehash(ctx, 2 * (ctx->mask + 1)))
        return nomem(ctx);
    return (kiln_expr){id};
}

uint32_t
kiln_expr_mark(const kiln_ctx *ctx)
{
    return ctx->nnode;
}

void
kiln_expr_rollback(kiln_ctx *ctx, uint32_t mark)
{
    while (ctx->nnode > mark && ctx->nnode > 1) {
        uint32_t id = --ctx->nnode;
        ctx->bucket[node_key(&ctx->node[id]) & ctx->mask] = ctx->node[id].next;
    }
}

struct kiln_scratch
kiln_scratch_begin(kiln_ctx *ctx)
{
    return (struct kiln_scratch){kiln_arena_mark(ctx), kiln_expr_mark(ctx), kiln_sym_mark(ctx)};
}

void
kiln_scratch_end(kiln_ctx *ctx, struct kiln_scratch s)
{
    kiln_expr_rollback(ctx, s.expr);
    kiln_sym_rollback(ctx, s.sym);
    kiln_arena_rewind(ctx, s.arena);
}

/* ---- access ---- */

enum kiln_dtype
kiln_expr_dtype(const kiln_ctx *ctx, kiln_expr e)
{
    return (enum kiln_dtype)ctx->node[e.id].dtype;
}

double
kiln_expr_float_value(const kiln_ctx *ctx, kiln_expr e)
{
    double   d;
    uint64_t bits = (uint64_t)ctx->node[e.id].imm;
    memcpy(&d, &bits, sizeof d);
    return d;
}

bool
kiln_expr_is_const(const kiln_ctx *ctx, kiln_expr e, double *v)
{
    const struct kiln_node *n = &ctx->node[e.id];
    if (n->op == KILN_OP_INT) {
        *v = (double)n->imm;
        return true;
    }
    if (n->op == KILN_OP_FLOAT) {
        *v = kiln_expr_float_value(ctx, e);
        return true;
    }
    return false;
}

bool
kiln_expr_is_int(const kiln_ctx *ctx, kiln_expr e, int64_t *v)
{
    if (ctx->node[e.id].op != KILN_OP_INT)
        return false;
    *v = ctx->node[e.id].imm;
    return true;
}

static bool
is_literal(const kiln_ctx *ctx, kiln_expr e)
{
    return ctx->node[e.id].op == KILN_OP_INT || ctx->node[e.id].op == KILN_OP_FLOAT;
}

/* The value of an INT or FLOAT node. */
static union kiln_scalar
const_value(const kiln_ctx *ctx, kiln_expr e)
{
    union kiln_scalar v = {.i = ctx->node[e.id].imm};
    if (ctx->node[e.id].op == KILN_OP_FLOAT)
        v.f = kiln_expr_float_value(ctx, e);
    return v;
}

uint64_t
kiln_expr_hash(const kiln_ctx *ctx, kiln_expr e)
{
    return ctx->node[e.id].shash;
}

uint32_t
kiln_load_nidx(const kiln_ctx *ctx, kiln_expr load)
{
    uint32_t n = 0;
    for (uint32_t l = ctx->node[load.id].kid[0]; l; l = ctx->node[l].kid[1])
        n++;
    return n;
}

kiln_expr
kiln_load_idx(const kiln_ctx *ctx, kiln_expr load, uint32_t i)
{
    uint32_t l = ctx->node[load.id].kid[0];
    while (i-- && l)
        l = ctx->node[l].kid[1];
    return (kiln_expr){l ? ctx->node[l].kid[0] : 0};
}

/* ---- leaves ---- */

static bool
live(kiln_ctx *ctx)
{
    return !ctx->has_err;
}

static kiln_expr
leaf(kiln_ctx *ctx, enum kiln_op op, enum kiln_dtype dt, int64_t imm)
{
    if (!live(ctx))
        return (kiln_expr){0};
    return intern(ctx, (struct kiln_node){.op = (uint8_t)op, .dtype = (uint8_t)dt, .imm = imm});
}

kiln_expr
kiln_int(kiln_ctx *ctx, int64_t v, enum kiln_dtype dt)
{
    if (!kiln_dtype_is_int(dt) && dt != KILN_DTYPE_BOOL) {
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "expr", "int constant of dtype %s", kiln_dtype_name(dt));
        return (kiln_expr){0};
    }
    return leaf(ctx, KILN_OP_INT, dt, kiln_scalar_wrap(v, dt));
}

kiln_expr
kiln_idx(kiln_ctx *ctx, int64_t v)
{
    return leaf(ctx, KILN_OP_INT, KILN_DTYPE_INDEX, v);
}

kiln_expr
kiln_bool(kiln_ctx *ctx, bool v)
{
    return leaf(ctx, KILN_OP_INT, KILN_DTYPE_BOOL, v);
}

kiln_expr
kiln_float(kiln_ctx *ctx, double v, enum kiln_dtype dt)
{
    if (!kiln_dtype_is_float(dt)) {
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "expr", "float constant of dtype %s",
                  kiln_dtype_name(dt));
        return (kiln_expr){0};
    }
    if (v == 0)
        v = 0; /* one zero: -0.0 and 0.0 print and fold alike */
    if (isnan(v))
        v = NAN;
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return leaf(ctx, KILN_OP_FLOAT, dt, (int64_t)bits);
}

kiln_expr
kiln_const(kiln_ctx *ctx, double v, enum kiln_dtype dt)
{
    if (kiln_dtype_is_float(dt))
        return kiln_float(ctx, v, dt);
    if (dt == KILN_DTYPE_BOOL)
        return kiln_bool(ctx, v != 0);
    /* saturated to dt's range: +-inf are the identities of min and max reductions, and
     * INT64_MAX wrapped to i32 would be -1 */
    return kiln_int(ctx, kiln_scalar_to_int(v, dt), dt);
}

/* The literal of dtype dt holding r (an integer or bool r.i, a float r.f). */
static kiln_expr
const_node(kiln_ctx *ctx, union kiln_scalar r, enum kiln_dtype dt)
{
    return kiln_dtype_is_float(dt) ? kiln_float(ctx, r.f, dt) : kiln_int(ctx, r.i, dt);
}

kiln_expr
kiln_axis(kiln_ctx *ctx, uint32_t k)
{
    return leaf(ctx, KILN_OP_VAR, KILN_DTYPE_INDEX, kiln_var_key(KILN_VAR_AXIS, k));
}

kiln_expr
kiln_rvar(kiln_ctx *ctx, uint32_t k)
{
    return leaf(ctx, KILN_OP_VAR, KILN_DTYPE_INDEX, kiln_var_key(KILN_VAR_REDUCE, k));
}

kiln_expr
kiln_var_named(kiln_ctx *ctx, uint32_t sym, enum kiln_dtype dt)
{
    return leaf(ctx, KILN_OP_VAR, dt, kiln_var_key(KILN_VAR_NAMED, sym));
}

/* ---- folding helpers ---- */

static kiln_expr
mk(kiln_ctx *ctx, enum kiln_op op, enum kiln_dtype dt, kiln_expr a, kiln_expr b, kiln_expr c)
{
    return intern(ctx, (struct kiln_node){
                           .op = (uint8_t)op, .dtype = (uint8_t)dt, .kid = {a.id, b.id, c.id}});
}

static kiln_expr type_error(kiln_ctx *ctx, enum kiln_op op, const char *fmt, ...) KILN_PRINTF(3, 4);

static kiln_expr
type_error(kiln_ctx *ctx, enum kiln_op op, const char *fmt, ...)
{
    char    msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    KILN_FAIL(ctx, KILN_ERR_INVALID, "expr", "%s: %s", opname(op), msg);
    return (kiln_expr){0};
}

#define DT(x) kiln_dtype_name(x)

static bool
is_zero(const kiln_ctx *ctx, kiln_expr e)
{
    double v;
    return kiln_expr_is_const(ctx, e, &v) && v == 0;
}

static bool
is_one(const kiln_ctx *ctx, kiln_expr e)
{
    double v;
    return kiln_expr_is_const(ctx, e, &v) && v == 1;
}

kiln_expr
kiln_binary(kiln_ctx *ctx, enum kiln_op op, kiln_expr a, kiln_expr b)
{
    if (!live(ctx) || !a.id || !b.id)
        return (kiln_expr){0};
    uint32_t        fl = kiln_op_flags[op];
    enum kiln_dtype da = kiln_expr_dtype(ctx, a), db = kiln_expr_dtype(ctx, b);

    if (kiln_op_arity[op] != 2 || op == KILN_OP_LIST) {
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "expr", "%s is not a binary operator", opname(op));
        return (kiln_expr){0};
    }
    if (da != db)
        return type_error(ctx, op, "operand types %s and %s differ", DT(da), DT(db));
    if (da == KILN_DTYPE_VOID)
        return type_error(ctx, op, "operands have no value (%s, %s)", DT(da), DT(db));
    if ((fl & KILN_OPF_LOGIC) && da != KILN_DTYPE_BOOL)
        return type_error(ctx, op, "needs bool operands, not %s", DT(da));
    if ((fl & KILN_OPF_ARITH) && da == KILN_DTYPE_BOOL)
        return type_error(ctx, op, "needs numeric operands, not %s", DT(da));
    if ((op == KILN_OP_DIV || op == KILN_OP_POW || op == KILN_OP_FMOD) && !kiln_dtype_is_float(da))
        return type_error(ctx, op, "needs float operands, not %s (use floordiv for integers)",
                          DT(da));
    if ((op == KILN_OP_FLOORDIV || op == KILN_OP_FLOORMOD) && !kiln_dtype_is_int(da))
        return type_error(ctx, op, "needs integer operands, not %s", DT(da));
    enum kiln_dtype rt = (fl & KILN_OPF_CMP) ? KILN_DTYPE_BOOL : da;

    /* constants */
    const struct kiln_node *na = &ctx->node[a.id], *nb = &ctx->node[b.id];
    bool                    ca = na->op == KILN_OP_INT || na->op == KILN_OP_FLOAT;
    bool                    cb = nb->op == KILN_OP_INT || nb->op == KILN_OP_FLOAT;
    if (ca && cb) {
        union kiln_scalar r;
        if (na->op == KILN_OP_INT && (op == KILN_OP_FLOORDIV || op == KILN_OP_FLOORMOD)
            && nb->imm == 0) {
            KILN_FAIL(ctx, KILN_ERR_INVALID, "expr", "%s: division by zero", opname(op));
            return (kiln_expr){0};
        }
        /* INT64_MIN // -1 overflows: left unfolded, as written (the interpreters wrap it) */
        bool overflow = na->op == KILN_OP_INT && na->imm == INT64_MIN && nb->imm == -1
                        && (op == KILN_OP_FLOORDIV || op == KILN_OP_FLOORMOD);
        if (!overflow && kiln_scalar_eval(op, da, rt, const_value(ctx, a), const_value(ctx, b), &r))
            return const_node(ctx, r, rt);
    }
    /* canonical order: constants second, otherwise by structural hash */
    if (fl & KILN_OPF_COMM) {
        bool swap = ca && !cb;
        if (!swap && ca == cb) {
            uint64_t ha = na->shash, hb = nb->shash;
            swap = ha > hb || (ha == hb && a.id > b.id);
        }
        if (swap) {
            kiln_expr t = a;
            a = b;
            b = t;
            na = &ctx->node[a.id];
            nb = &ctx->node[b.id];
            bool tc = ca;
            ca = cb;
            cb = tc;
        }
    }
    /* identities (b is the constant when there is one) */
    bool fa = kiln_dtype_is_float(da);
    switch (op) {
    case KILN_OP_ADD:
        if (is_zero(ctx, b))
            return a;
        break;
    case KILN_OP_SUB:
        if (is_zero(ctx, b))
            return a;
        if (!fa && a.id == b.id)
            return kiln_int(ctx, 0, da);
        break;
    case KILN_OP_MUL:
        if (is_one(ctx, b))
            return a;
        if (!fa && is_zero(ctx, b))
            return b;
        break;
    case KILN_OP_DIV:
        if (is_one(ctx, b))
            return a;
        break;
    case KILN_OP_FLOORDIV:
        if (is_one(ctx, b))
            return a;
        if (is_zero(ctx, b)) {
            KILN_FAIL(ctx, KILN_ERR_INVALID, "expr", "floordiv: division by zero");
            return (kiln_expr){0};
        }
        break;
    case KILN_OP_FLOORMOD:
        if (is_one(ctx, b))
            return kiln_int(ctx, 0, da);
        if (is_zero(ctx, b)) {
            KILN_FAIL(ctx, KILN_ERR_INVALID, "expr", "floormod: division by zero");
            return (kiln_expr){0};
        }
        break;
    case KILN_OP_MIN:
    case KILN_OP_MAX:
        if (a.id == b.id)
            return a;
        break;
    case KILN_OP_AND:
        if (cb)
            return nb->imm ? a : b;
        if (a.id == b.id)
            return a;
        break;
    case KILN_OP_OR:
        if (cb)
            return nb->imm ? b : a;
        if (a.id == b.id)
            return a;
        break;
    case KILN_OP_EQ:
    case KILN_OP_LE:
        if (!fa && a.id == b.id)
            return kiln_bool(ctx, true);
        break;
    case KILN_OP_NE:
    case KILN_OP_LT:
        if (!fa && a.id == b.id)
            return kiln_bool(ctx, false);
        break;
    default:
        break;
    }
    return mk(ctx, op, rt, a, b, (kiln_expr){0});
}

kiln_expr
kiln_unary(kiln_ctx *ctx, enum kiln_op op, kiln_expr a)
{
    if (!live(ctx) || !a.id)
        return (kiln_expr){0};
    enum kiln_dtype dt = kiln_expr_dtype(ctx, a);
    uint32_t        fl = kiln_op_flags[op];
    if (kiln_op_arity[op] != 1 || op == KILN_OP_CAST || op == KILN_OP_LOAD) {
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "expr", "%s is not a unary operator", opname(op));
        return (kiln_expr){0};
    }
    if ((fl & KILN_OPF_LOGIC) && dt != KILN_DTYPE_BOOL)
        return type_error(ctx, op, "needs a bool operand, not %s", DT(dt));
    if ((fl & KILN_OPF_ARITH) && (dt == KILN_DTYPE_BOOL || dt == KILN_DTYPE_VOID))
        return type_error(ctx, op, "needs a numeric operand, not %s", DT(dt));
    if ((fl & KILN_OPF_MATH) && !kiln_dtype_is_float(dt))
        return type_error(ctx, op, "needs a float operand, not %s", DT(dt));

    const struct kiln_node *n = &ctx->node[a.id];
    union kiln_scalar       r;
    if (is_literal(ctx, a)
        && kiln_scalar_eval(op, dt, dt, const_value(ctx, a), const_value(ctx, a), &r))
        return const_node(ctx, r, dt);
    if ((op == KILN_OP_NOT || op == KILN_OP_NEG) && n->op == op)
        return (kiln_expr){n->kid[0]};
    return mk(ctx, op, dt, a, (kiln_expr){0}, (kiln_expr){0});
}

kiln_expr
kiln_select(kiln_ctx *ctx, kiln_expr c, kiln_expr a, kiln_expr b)
{
    if (!live(ctx) || !c.id || !a.id || !b.id)
        return (kiln_expr){0};
    if (kiln_expr_dtype(ctx, c) != KILN_DTYPE_BOOL)
        return type_error(ctx, KILN_OP_SELECT, "condition must be bool, not %s",
                          DT(kiln_expr_dtype(ctx, c)));
    if (kiln_expr_dtype(ctx, a) != kiln_expr_dtype(ctx, b))
        return type_error(ctx, KILN_OP_SELECT, "branch types %s and %s differ",
                          DT(kiln_expr_dtype(ctx, a)), DT(kiln_expr_dtype(ctx, b)));
    int64_t v;
    if (kiln_expr_is_int(ctx, c, &v))
        return v ? a : b;
    if (a.id == b.id)
        return a;
    return mk(ctx, KILN_OP_SELECT, kiln_expr_dtype(ctx, a), c, a, b);
}

kiln_expr
kiln_cast(kiln_ctx *ctx, enum kiln_dtype dt, kiln_expr a)
{
    if (!live(ctx) || !a.id)
        return (kiln_expr){0};
    enum kiln_dtype from = kiln_expr_dtype(ctx, a);
    if (dt >= KILN_DTYPE_COUNT || from == KILN_DTYPE_VOID)
        return type_error(ctx, KILN_OP_CAST, "cannot cast %s to %s", DT(from), DT(dt));
    if (from == dt)
        return a;
    if (is_literal(ctx, a))
        return const_node(ctx, kiln_scalar_cast(from, dt, const_value(ctx, a)), dt);
    return mk(ctx, KILN_OP_CAST, dt, a, (kiln_expr){0}, (kiln_expr){0});
}

kiln_expr
kiln_load(kiln_ctx *ctx, uint32_t tensor, enum kiln_dtype dt, uint32_t n, const kiln_expr *idx)
{
    if (!live(ctx))
        return (kiln_expr){0};
    kiln_expr list = {0};
    for (uint32_t i = n; i-- > 0;) {
        if (!idx[i].id)
            return (kiln_expr){0};
        if (!kiln_dtype_is_int(kiln_expr_dtype(ctx, idx[i]))) {
            KILN_FAIL(ctx, KILN_ERR_INVALID, "expr", "load: index %u has dtype %s, not an integer",
                      i, kiln_dtype_name(kiln_expr_dtype(ctx, idx[i])));
            return (kiln_expr){0};
        }
        kiln_expr ix = kiln_cast(ctx, KILN_DTYPE_INDEX, idx[i]);
        list = mk(ctx, KILN_OP_LIST, KILN_DTYPE_VOID, ix, list, (kiln_expr){0});
    }
    if (n == 0) /* a scalar load still needs a non-nil index list: one 0 index */
        list = mk(ctx, KILN_OP_LIST, KILN_DTYPE_VOID, kiln_idx(ctx, 0), (kiln_expr){0},
                  (kiln_expr){0});
    if (!list.id)
        return (kiln_expr){0};
    return intern(
        ctx, (struct kiln_node){
                 .op = KILN_OP_LOAD, .dtype = (uint8_t)dt, .kid = {list.id, 0, 0}, .imm = tensor});
}

/* ---- generic rewriting with a memo (expressions are DAGs: never recurse without one) ---- */

struct memo {
    uint32_t *key, *val;
    uint32_t  cap, n;
    kiln_ctx *ctx;
    bool      oom;
};

static bool
memo_get(struct memo *m, uint32_t k, uint32_t *v)
{
    if (!m->cap)
        return false;
    for (uint32_t i = kiln_mix64(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->key[i] == k) {
            *v = m->val[i];
            return true;
        }
        if (m->key[i] == 0)
            return false;
    }
}

static void
memo_put(struct memo *m, uint32_t k, uint32_t v)
{
    if (2 * (m->n + 1) > m->cap) {
        uint32_t  ncap = m->cap ? m->cap * 2 : 64;
        uint32_t *nk = kiln_mem_realloc(m->ctx, NULL, 0, sizeof(uint32_t) * ncap * 2);
        if (!nk) {
            m->oom = true;
            return;
        }
        memset(nk, 0, sizeof(uint32_t) * ncap * 2);
        uint32_t *nv = nk + ncap;
        for (uint32_t i = 0; i < m->cap; i++) {
            if (!m->key[i])
                continue;
            uint32_t j = kiln_mix64(m->key[i]) & (ncap - 1);
            while (nk[j])
                j = (j + 1) & (ncap - 1);
            nk[j] = m->key[i];
            nv[j] = m->val[i];
        }
        kiln_mem_free(m->ctx, m->key, sizeof(uint32_t) * m->cap * 2);
        m->key = nk;
        m->val = nv;
        m->cap = ncap;
    }
    uint32_t i = kiln_mix64(k) & (m->cap - 1);
    while (m->key[i] && m->key[i] != k)
        i = (i + 1) & (m->cap - 1);
    if (!m->key[i])
        m->n++;
    m->key[i] = k;
    m->val[i] = v;
}

static void
memo_free(struct memo *m)
{
    kiln_mem_free(m->ctx, m->key, sizeof(uint32_t) * m->cap * 2);
}

kiln_expr
kiln_expr_rebuild(kiln_ctx *ctx, kiln_expr e, const kiln_expr *k)
{
    const struct kiln_node n = ctx->node[e.id];
    enum kiln_op           op = (enum kiln_op)n.op;
    switch (kiln_op_kind(op)) {
    case KILN_OPK_NONE:
    case KILN_OPK_LEAF:
        return e;
    case KILN_OPK_LIST:
        return mk(ctx, KILN_OP_LIST, KILN_DTYPE_VOID, k[0], k[1], (kiln_expr){0});
    case KILN_OPK_LOAD:
        return intern(
            ctx, (struct kiln_node){
                     .op = KILN_OP_LOAD, .dtype = n.dtype, .kid = {k[0].id, 0, 0}, .imm = n.imm});
    case KILN_OPK_SELECT:
        return kiln_select(ctx, k[0], k[1], k[2]);
    case KILN_OPK_CAST:
        return kiln_cast(ctx, (enum kiln_dtype)n.dtype, k[0]);
    case KILN_OPK_UNARY:
        return kiln_unary(ctx, op, k[0]);
    case KILN_OPK_BINARY:
        return kiln_binary(ctx, op, k[0], k[1]);
    }
    return (kiln_expr){0};
}

struct rewriter {
    struct memo memo;
    /* returns a replacement id for leaf/any node, or 0 to recurse */
    uint32_t (*leaf)(struct rewriter *rw, const struct kiln_node *n);
    const kiln_expr     *ax, *rv;
    const kiln_expr     *vars, *vals; /* named variables to replace, and their values */
    uint32_t             nvars;
    uint32_t             nax, nrv, from, to;
    bool                 retarget; /* replace loads of tensor `from` by loads of `to` */
    kiln_load_map_fn     map;      /* replace every load by map(ud, load, new indices) */
    void                *map_ud;
    kiln_node_replace_fn replace; /* may replace a node before its operands are visited */
    void                *replace_ud;
};

static uint32_t
no_leaf(struct rewriter *rw, const struct kiln_node *n)
{
    (void)rw;
    (void)n;
    return 0;
}

static kiln_expr
rewrite(kiln_ctx *ctx, struct rewriter *rw, kiln_expr e)
{
    uint32_t done;
    if (!e.id || !live(ctx))
        return e;
    if (memo_get(&rw->memo, e.id, &done))
        return (kiln_expr){done};
    kiln_expr by = {0};
    if (rw->replace && rw->replace(rw->replace_ud, e, &by)) {
        if (by.id)
            memo_put(&rw->memo, e.id, by.id);
        return by;
    }
    struct kiln_node n = ctx->node[e.id];
    uint32_t         rep = rw->leaf(rw, &n);
    for (uint32_t i = 0; i < rw->nvars && !rep; i++)
        if (rw->vars[i].id == e.id)
            rep = rw->vals[i].id;
    kiln_expr out = e;
    if (rep) {
        out = (kiln_expr){rep};
    } else if (kiln_op_arity[n.op] > 0) {
        kiln_expr k[3] = {{0}, {0}, {0}};
        bool      changed = false;
        for (int i = 0; i < kiln_op_arity[n.op]; i++) {
            k[i] = rewrite(ctx, rw, (kiln_expr){n.kid[i]});
            changed |= k[i].id != n.kid[i];
        }
        if (rw->map && n.op == KILN_OP_LOAD) {
            kiln_expr idx[KILN_MAX_DIMS + 1];
            uint32_t  ni = 0;
            for (uint32_t l = k[0].id; l && ni <= KILN_MAX_DIMS; l = ctx->node[l].kid[1])
                idx[ni++] = (kiln_expr){ctx->node[l].kid[0]};
            out = rw->map(rw->map_ud, e, ni, idx);
        } else if (rw->retarget && n.op == KILN_OP_LOAD && n.imm == (int64_t)rw->from)
            out = intern(ctx, (struct kiln_node){.op = KILN_OP_LOAD,
                                                 .dtype = n.dtype,
                                                 .kid = {k[0].id, 0, 0},
                                                 .imm = rw->to});
        else if (changed)
            out = kiln_expr_rebuild(ctx, e, k);
    }
    memo_put(&rw->memo, e.id, out.id);
    return out;
}

static uint32_t
subst_leaf(struct rewriter *rw, const struct kiln_node *n)
{
    if (n->op != KILN_OP_VAR)
        return 0;

    enum kiln_var_kind kind = kiln_var_kind_of(n->imm);
    uint32_t           i = kiln_var_index(n->imm);
    if (kind == KILN_VAR_AXIS && i < rw->nax && rw->ax[i].id)
        return rw->ax[i].id;
    if (kind == KILN_VAR_REDUCE && i < rw->nrv && rw->rv[i].id)
        return rw->rv[i].id;
    return 0;
}

static kiln_expr
run_rewriter(kiln_ctx *ctx, struct rewriter *rw, kiln_expr e)
{
    rw->memo.ctx = ctx;
    kiln_expr out = rewrite(ctx, rw, e);
    bool      oom = rw->memo.oom;
    memo_free(&rw->memo);
    if (oom)
        return nomem(ctx);
    return live(ctx) ? out : (kiln_expr){0};
}

kiln_expr
kiln_expr_subst(kiln_ctx *ctx, kiln_expr e, const kiln_expr *ax, uint32_t nax, const kiln_expr *rv,
                uint32_t nrv)
{
    struct rewriter rw = {.leaf = subst_leaf, .ax = ax, .nax = nax, .rv = rv, .nrv = nrv};
    return run_rewriter(ctx, &rw, e);
}

kiln_expr
kiln_expr_subst_vars(kiln_ctx *ctx, kiln_expr e, const kiln_expr *vars, const kiln_expr *vals,
                     uint32_t n)
{
    struct rewriter rw = {.leaf = no_leaf, .vars = vars, .vals = vals, .nvars = n};
    return run_rewriter(ctx, &rw, e);
}

kiln_expr
kiln_expr_retarget(kiln_ctx *ctx, kiln_expr e, uint32_t from, uint32_t to)
{
    struct rewriter rw = {.leaf = no_leaf, .retarget = true, .from = from, .to = to};
    return run_rewriter(ctx, &rw, e);
}

kiln_expr
kiln_expr_map_loads(kiln_ctx *ctx, kiln_expr e, kiln_load_map_fn fn, void *ud)
{
    struct rewriter rw = {.leaf = no_leaf, .map = fn, .map_ud = ud};
    return run_rewriter(ctx, &rw, e);
}

kiln_expr
kiln_expr_replace(kiln_ctx *ctx, kiln_expr e, kiln_node_replace_fn fn, void *ud)
{
    struct rewriter rw = {.leaf = no_leaf, .replace = fn, .replace_ud = ud};
    return run_rewriter(ctx, &rw, e);
}

static bool
visit(const kiln_ctx *ctx, kiln_expr e, bool (*fn)(void *, kiln_expr), void *ud, struct memo *seen,
      bool all)
{
    uint32_t dummy;
    if (!e.id || memo_get(seen, e.id, &dummy))
        return true;
    memo_put(seen, e.id, 1);
    /* fn may intern nodes (lowering's region analysis does), moving the node table: keep no
     * pointer into it across the call */
    uint8_t op = ctx->node[e.id].op;
    if ((all || op == KILN_OP_LOAD) && !fn(ud, e))
        return false;
    for (int i = 0; i < kiln_op_arity[op]; i++)
        if (!visit(ctx, (kiln_expr){ctx->node[e.id].kid[i]}, fn, ud, seen, all))
            return false;
    return true;
}

bool
kiln_expr_visit_nodes(const kiln_ctx *ctx, kiln_expr e, bool (*fn)(void *ud, kiln_expr node),
                      void *ud)
{
    struct memo seen = {.ctx = (kiln_ctx *)ctx};
    bool        r = visit(ctx, e, fn, ud, &seen, true);
    memo_free(&seen);
    return r;
}

bool
kiln_expr_visit_loads(const kiln_ctx *ctx, kiln_expr e, bool (*fn)(void *ud, kiln_expr load),
                      void *ud)
{
    struct memo seen = {.ctx = (kiln_ctx *)ctx};
    bool        r = visit(ctx, e, fn, ud, &seen, false);
    memo_free(&seen);
    return r;
}
