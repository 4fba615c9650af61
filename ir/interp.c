/* ir/interp.c -- the reference interpreter of kernel graphs: evaluates every compute definition
 * of a graph, in op order, in double precision. It is the oracle every compiled kernel is
 * checked against, so it knows nothing about library ops or code generation: it reads only the
 * compute definitions (output shape, reduction kind and extents, body expression).
 *
 * Each op's body is compiled once into a flat program for a small stack machine and then run
 * once per iteration point (output point x reduction point). The body is a hash-consed DAG, so
 * a node with several parents is compiled once as a subroutine: CALL pushes its cached value
 * when it was already computed at this point (a per-point stamp) and runs it otherwise, so work
 * and program size stay linear in the number of distinct nodes. SELECT compiles to a
 * conditional jump: only the chosen branch runs, so a guarded out-of-range load never executes.
 * AND and OR evaluate both operands (only select is lazy). Jumps go forward only and each
 * subroutine runs at most once per point, so the value stack never holds more entries than the
 * program has instructions.
 *
 * Semantics (operators and casts are ir/scalar.h's, shared with the loop-nest interpreter and
 * the builders' folding). Floats (f16, bf16, f32, f64) are computed in double with no rounding
 * to their dtype, except that a value an f32 tensor stores beyond the f32 range becomes +-inf,
 * as in compiled code (so a correct f32 overflow checks against this oracle). Integers (i8, i32,
 * i64) and bool are computed in int64 and wrapped to the node's dtype after every operation, on
 * cast and on store (as generated code does; for + - * this equals wrapping once at the end).
 * floordiv/floormod round toward -inf; a zero divisor is an error. Comparisons give 0/1; min and
 * max propagate NaN. Casts: float -> int truncates toward zero and saturates to the target's range
 * (NaN gives 0), like LLVM's fptosi.sat; int -> int wraps; any -> bool is `!= 0`. Integer and bool
 * tensors hold integral doubles; a load converts with the same truncating cast. Reductions start
 * from 0 (sum), -inf (max) or +inf (min) and combine in the order of the reduction points
 * (row-major). Every load is bounds-checked against the tensor's shape; a violation is
 * KILN_ERR_INVALID naming the op's output, the tensor, the index and the shape. */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum code {
    C_CONST,     /* push imm */
    C_AXIS,      /* push spatial index a */
    C_RVAR,      /* push reduction index a */
    C_LOAD,      /* pop a indices, push element of tensor imm.i (dt = the load's dtype) */
    C_UNARY,     /* op on the top value; dt = result dtype */
    C_BINARY,    /* op on the two top values; odt = operand dtype, dt = result dtype */
    C_BINARY_K,  /* op on the top value and the constant imm */
    C_BINARY_AX, /* op on the top value and spatial index a */
    C_BINARY_RV, /* op on the top value and reduction index a */
    C_CAST,      /* odt -> dt */
    C_JZ,        /* pop a bool; jump to a when it is 0 */
    C_JMP,       /* jump to a */
    C_CALL,      /* value of subroutine slot a: cached at this point, or run it */
    C_RET,       /* cache the top value in slot a, return to the caller */
    C_END,       /* the body's value is on top */
};

struct insn {
    uint8_t           code; /* enum code */
    uint8_t           op;   /* enum kiln_op (C_UNARY, C_BINARY) */
    uint8_t           dt;   /* result dtype */
    uint8_t           odt;  /* operand dtype */
    uint32_t          a;
    union kiln_scalar imm;
};

/* One op's compiled body plus its run-time state. */
struct prog {
    struct insn *code;
    uint32_t     n, cap;
    uint32_t    *pending; /* nodes whose subroutine is still to be emitted */
    uint32_t     npending, cappending;
    uint32_t    *entry; /* per slot (1-based): first instruction of its subroutine */
    uint32_t     nslot, capentry;
    /* run time */
    union kiln_scalar *stack;
    uint32_t          *rstack; /* return addresses */
    union kiln_scalar *cache;  /* per slot */
    uint64_t          *stamp;  /* per slot: point number the cached value belongs to */
    uint64_t           point;
};

/* Everything one evaluation needs. refs and slot are indexed by node id (zeroed again after
 * each op through the touched list). */
struct interp {
    kiln_ctx                *ctx;
    const struct kiln_graph *g;
    double *const           *vals;
    const struct kiln_opdef *op;
    uint32_t                *refs; /* parent edges within the current body */
    uint32_t                *slot; /* subroutine slot of a shared node, 0 = inline */
    uint32_t                *touched;
    uint32_t                 ntouched, captouched;
    int64_t                  ax[KILN_MAX_DIMS];
    int64_t                  rv[KILN_MAX_REDUCE];
};

static const char *
out_name(const struct interp *in)
{
    return kiln_graph_tensor_name(in->g, in->op->out);
}

/* Records an error about the current op, located at the statement that defined it. */
static enum kiln_status fail(struct interp *in, enum kiln_status st, const char *fmt, ...)
    KILN_PRINTF(3, 4);

static enum kiln_status
fail(struct interp *in, enum kiln_status st, const char *fmt, ...)
{
    char    msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    KILN_FAIL(in->ctx, st, "interp", "%s: %s", out_name(in), msg);
    const struct kiln_tensor *t = &in->g->tensor[in->op->out];
    if (t->line)
        kiln_error_set_loc(in->ctx, in->g->file, t->line, t->col);
    return st;
}

/* "a, b, c" into buf. */
static void
join(char *buf, size_t size, const int64_t *v, uint32_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (uint32_t k = 0; k < n && len < size; k++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", k ? ", " : "", (long long)v[k]);
}

/* ---- compilation ---- */

static bool
emit(struct interp *in, struct prog *p, struct insn ins)
{
    return KILN_VEC_PUSH(in->ctx, p->code, p->n, p->cap, ins);
}

static void
touch(struct interp *in, uint32_t id)
{
    if (!in->refs[id] && !in->slot[id])
        KILN_VEC_PUSH(in->ctx, in->touched, in->ntouched, in->captouched, id);
}

/* Counts parent edges of every node reachable from e. Index lists are looked through: a LOAD
 * is the parent of its index expressions. */
static void
count_refs(struct interp *in, uint32_t id)
{
    const kiln_ctx *ctx = in->ctx;
    bool            first = in->refs[id] == 0;
    touch(in, id);
    in->refs[id]++;
    if (!first)
        return;
    const struct kiln_node *n = &ctx->node[id];
    if (n->op == KILN_OP_LOAD) {
        for (uint32_t l = n->kid[0]; l; l = ctx->node[l].kid[1])
            count_refs(in, ctx->node[l].kid[0]);
        return;
    }
    for (int k = 0; k < kiln_op_arity[n->op]; k++)
        if (n->kid[k])
            count_refs(in, n->kid[k]);
}

static bool compile_node(struct interp *in, struct prog *p, uint32_t id);

/* Emits code that pushes the value of node id: a CALL when the node is shared. */
static bool
compile(struct interp *in, struct prog *p, uint32_t id)
{
    const struct kiln_node *n = &in->ctx->node[id];
    bool leaf = n->op == KILN_OP_INT || n->op == KILN_OP_FLOAT || n->op == KILN_OP_VAR;
    if (in->refs[id] <= 1 || leaf)
        return compile_node(in, p, id);
    if (!in->slot[id]) {
        touch(in, id);
        in->slot[id] = ++p->nslot;
        if (!KILN_VEC_PUSH(in->ctx, p->pending, p->npending, p->cappending, id))
            return false;
    }
    return emit(in, p, (struct insn){.code = C_CALL, .a = in->slot[id]});
}

static bool
compile_load(struct interp *in, struct prog *p, const struct kiln_node *n)
{
    const kiln_ctx *ctx = in->ctx;
    uint32_t        t = (uint32_t)n->imm, nidx = 0;
    if (n->imm < 0 || t >= in->g->ntensor) {
        fail(in, KILN_ERR_INTERNAL, "load of tensor %lld, which does not exist", (long long)n->imm);
        return false;
    }
    const char *name = kiln_graph_tensor_name(in->g, t);
    for (uint32_t l = n->kid[0]; l; l = ctx->node[l].kid[1], nidx++) {
        uint32_t        ix = ctx->node[l].kid[0];
        enum kiln_dtype dt = (enum kiln_dtype)ctx->node[ix].dtype;
        if (kiln_dtype_is_float(dt) || dt == KILN_DTYPE_BOOL || dt == KILN_DTYPE_VOID) {
            fail(in, KILN_ERR_INTERNAL, "index %u of a load of %s is not an integer", nidx, name);
            return false;
        }
        if (!compile(in, p, ix))
            return false;
    }
    const struct kiln_tensor *tt = &in->g->tensor[t];
    if (nidx != tt->ndim && !(tt->ndim == 0 && nidx == 1)) {
        fail(in, KILN_ERR_INTERNAL, "load of %s has %u indices but %s has %u dimensions", name,
             nidx, name, (unsigned)tt->ndim);
        return false;
    }
    return emit(in, p,
                (struct insn){.code = C_LOAD, .dt = n->dtype, .a = nidx, .imm.i = (int64_t)t});
}

/* Checks that variable node n is bound by the current op; gives its index and the code that
 * pushes it (C_AXIS or C_RVAR). */
static bool
bound_var(struct interp *in, const struct kiln_node *n, uint32_t *k, uint8_t *code)
{
    *k = kiln_var_index(n->imm);
    switch (kiln_var_kind_of(n->imm)) {
    case KILN_VAR_AXIS:
        *code = C_AXIS;
        if (*k < in->g->tensor[in->op->out].ndim)
            return true;
        break;
    case KILN_VAR_REDUCE:
        *code = C_RVAR;
        if (*k < in->op->nred)
            return true;
        break;
    case KILN_VAR_NAMED:
        break;
    }
    fail(in, KILN_ERR_INTERNAL, "body uses a variable the definition does not bind");
    return false;
}

static bool
compile_node(struct interp *in, struct prog *p, uint32_t id)
{
    const kiln_ctx         *ctx = in->ctx;
    const struct kiln_node *n = &ctx->node[id];
    struct insn             ins = {.op = n->op, .dt = n->dtype};
    switch (kiln_op_kind((enum kiln_op)n->op)) {
    case KILN_OPK_LEAF:
        if (n->op == KILN_OP_VAR)
            return bound_var(in, n, &ins.a, &ins.code) && emit(in, p, ins);
        ins.code = C_CONST;
        if (n->op == KILN_OP_INT)
            ins.imm.i = n->imm;
        else
            ins.imm.f = kiln_expr_float_value(ctx, (kiln_expr){id});
        return emit(in, p, ins);
    case KILN_OPK_LOAD:
        return compile_load(in, p, n);
    case KILN_OPK_SELECT: {
        uint32_t c = n->kid[0], a = n->kid[1], b = n->kid[2];
        if (!compile(in, p, c))
            return false;
        uint32_t jz = p->n;
        if (!emit(in, p, (struct insn){.code = C_JZ}) || !compile(in, p, a))
            return false;
        uint32_t jmp = p->n;
        if (!emit(in, p, (struct insn){.code = C_JMP}))
            return false;
        p->code[jz].a = p->n;
        if (!compile(in, p, b))
            return false;
        p->code[jmp].a = p->n;
        return true;
    }
    case KILN_OPK_CAST:
    case KILN_OPK_UNARY:
        ins.code = n->op == KILN_OP_CAST ? C_CAST : C_UNARY;
        ins.odt = ctx->node[n->kid[0]].dtype;
        return compile(in, p, n->kid[0]) && emit(in, p, ins);
    case KILN_OPK_BINARY: {
        uint32_t                a = n->kid[0], b = n->kid[1];
        const struct kiln_node *nb = &ctx->node[b];
        ins.code = C_BINARY;
        ins.odt = ctx->node[a].dtype;
        if (!compile(in, p, a))
            return false;
        /* a constant or variable second operand is read by the instruction itself: fewer
         * dispatches per point, same semantics */
        if (nb->op == KILN_OP_INT || nb->op == KILN_OP_FLOAT) {
            ins.code = C_BINARY_K;
            if (nb->op == KILN_OP_INT)
                ins.imm.i = nb->imm;
            else
                ins.imm.f = kiln_expr_float_value(ctx, (kiln_expr){b});
            return emit(in, p, ins);
        }
        if (nb->op == KILN_OP_VAR) {
            uint8_t push;
            if (!bound_var(in, nb, &ins.a, &push))
                return false;
            ins.code = push == C_AXIS ? C_BINARY_AX : C_BINARY_RV;
            return emit(in, p, ins);
        }
        return compile(in, p, b) && emit(in, p, ins);
    }
    case KILN_OPK_NONE:
    case KILN_OPK_LIST:
        break;
    }
    fail(in, KILN_ERR_INTERNAL, "cannot evaluate a %s node",
         n->op < KILN_OP_COUNT ? kiln_op_name[n->op] : "?");
    return false;
}

/* Compiles the current op's body: main code, END, then one subroutine per shared node. */
static bool
compile_body(struct interp *in, struct prog *p)
{
    uint32_t body = in->op->body.id;
    count_refs(in, body);
    if (!kiln_ok(in->ctx) || !compile_node(in, p, body)
        || !emit(in, p, (struct insn){.code = C_END}))
        return false;
    for (uint32_t i = 0; i < p->npending; i++) { /* pending grows while we emit */
        uint32_t id = p->pending[i], s = in->slot[id];
        if (!kiln_vec_reserve(in->ctx, (void **)&p->entry, &p->capentry, sizeof(uint32_t), s + 1))
            return false;
        p->entry[s] = p->n;
        if (!compile_node(in, p, id) || !emit(in, p, (struct insn){.code = C_RET, .a = s}))
            return false;
    }
    size_t ns = (size_t)p->nslot + 1;
    p->stack = kiln_arena_alloc(in->ctx, sizeof(union kiln_scalar) * ((size_t)p->n + 1));
    p->rstack = kiln_arena_alloc(in->ctx, sizeof(uint32_t) * ns);
    p->cache = kiln_arena_alloc(in->ctx, sizeof(union kiln_scalar) * ns);
    p->stamp = kiln_arena_alloc(in->ctx, sizeof(uint64_t) * ns);
    return p->stack && p->rstack && p->cache && p->stamp;
}

/* ---- execution ---- */

/* Loads tensor t at the n indices idx[]; false after recording an out-of-bounds error. */
static bool
load(struct interp *in, uint32_t t, enum kiln_dtype dt, const union kiln_scalar *idx, uint32_t n,
     union kiln_scalar *out)
{
    const struct kiln_tensor *tt = &in->g->tensor[t];
    int64_t                   flat = 0;
    bool                      ok = true;
    if (tt->ndim == 0) {
        ok = idx[0].i == 0;
    } else {
        for (uint32_t d = 0; d < n; d++) {
            if (idx[d].i < 0 || idx[d].i >= tt->shape[d])
                ok = false;
            flat = flat * tt->shape[d] + idx[d].i;
        }
    }
    if (!ok) {
        int64_t ix[KILN_MAX_DIMS + 1];
        char    itext[200], stext[200];
        for (uint32_t d = 0; d < n; d++)
            ix[d] = idx[d].i;
        join(itext, sizeof itext, ix, n);
        join(stext, sizeof stext, tt->shape, tt->ndim);
        fail(in, KILN_ERR_INVALID, "index [%s] of %s is out of bounds for shape [%s]", itext,
             kiln_graph_tensor_name(in->g, t), stext);
        return false;
    }
    double v = in->vals[t][flat];
    if (kiln_dtype_is_float(dt))
        out->f = v;
    else
        out->i = kiln_scalar_double_int(v, dt);
    return true;
}

static void
fail_div0(struct interp *in, enum kiln_op op)
{
    char text[200];
    join(text, sizeof text, in->ax, in->g->tensor[in->op->out].ndim);
    fail(in, KILN_ERR_INVALID, "%s by zero at [%s]",
         op == KILN_OP_FLOORDIV ? "floordiv" : "floormod", text);
}

/* Runs the program at the current point (in->ax, in->rv); false after recording an error.
 * Not inlined: compiled inside kiln_ir_eval, the dispatch loop's code depended on everything
 * else in that function and ran up to a third slower after unrelated edits. */
static KILN_NOINLINE bool
run(struct interp *in, struct prog *p, union kiln_scalar *result)
{
    union kiln_scalar *st = p->stack;
    uint32_t           sp = 0, rsp = 0, pc = 0;
    uint64_t           point = ++p->point;
    const struct insn *code = p->code;
    for (;;) {
        const struct insn *i = &code[pc++];
        switch ((enum code)i->code) {
        case C_CONST:
            st[sp++] = i->imm;
            break;
        case C_AXIS:
            st[sp++].i = in->ax[i->a];
            break;
        case C_RVAR:
            st[sp++].i = in->rv[i->a];
            break;
        case C_LOAD:
            sp -= i->a;
            if (!load(in, (uint32_t)i->imm.i, (enum kiln_dtype)i->dt, &st[sp], i->a, &st[sp]))
                return false;
            sp++;
            break;
        case C_UNARY:
        case C_BINARY:
        case C_BINARY_K:
        case C_BINARY_AX:
        case C_BINARY_RV: {
            union kiln_scalar b = {.i = 1}; /* unary: not read */
            if (i->code == C_BINARY)
                b = st[--sp];
            else if (i->code == C_BINARY_K)
                b = i->imm;
            else if (i->code != C_UNARY)
                b.i = i->code == C_BINARY_AX ? in->ax[i->a] : in->rv[i->a];
            if ((i->op == KILN_OP_FLOORDIV || i->op == KILN_OP_FLOORMOD) && b.i == 0) {
                fail_div0(in, (enum kiln_op)i->op);
                return false;
            }
            /* one call site, so that it is inlined here; compile_node emits only operators the
             * builders type-checked, so it cannot fail */
            (void)kiln_scalar_eval((enum kiln_op)i->op, (enum kiln_dtype)i->odt,
                                   (enum kiln_dtype)i->dt, st[sp - 1], b, &st[sp - 1]);
            break;
        }
        case C_CAST:
            st[sp - 1] =
                kiln_scalar_cast((enum kiln_dtype)i->odt, (enum kiln_dtype)i->dt, st[sp - 1]);
            break;
        case C_JZ:
            if (!st[--sp].i)
                pc = i->a;
            break;
        case C_JMP:
            pc = i->a;
            break;
        case C_CALL:
            if (p->stamp[i->a] == point) {
                st[sp++] = p->cache[i->a];
            } else {
                p->rstack[rsp++] = pc;
                pc = p->entry[i->a];
            }
            break;
        case C_RET:
            p->cache[i->a] = st[sp - 1];
            p->stamp[i->a] = point;
            pc = p->rstack[--rsp];
            break;
        case C_END:
            *result = st[sp - 1];
            return true;
        }
    }
}

/* Advances a row-major odometer; false when it wraps around to all zeros. */
static bool
next_point(int64_t *idx, const int64_t *ext, uint32_t n)
{
    for (uint32_t d = n; d-- > 0;) {
        if (++idx[d] < ext[d])
            return true;
        idx[d] = 0;
    }
    return false;
}

static union kiln_scalar
identity(enum kiln_reduce r, enum kiln_dtype dt)
{
    bool              fl = kiln_dtype_is_float(dt);
    union kiln_scalar v = {.i = 0};
    if (r == KILN_REDUCE_MAX) { /* integers: the least value of dt (u64: 0) */
        if (fl)
            v.f = -INFINITY;
        else
            v.i = kiln_scalar_to_int(-INFINITY, dt);
    } else if (r == KILN_REDUCE_MIN) {
        if (fl)
            v.f = INFINITY;
        else
            v.i = kiln_scalar_to_int(INFINITY, dt);
    } else if (fl) {
        v.f = 0;
    }
    return v;
}

static void
combine(enum kiln_reduce r, enum kiln_dtype dt, union kiln_scalar *acc, union kiln_scalar v)
{
    bool fl = kiln_dtype_is_float(dt);
    switch (r) {
    case KILN_REDUCE_SUM:
        if (fl)
            acc->f += v.f;
        else
            acc->i = kiln_scalar_wrap((int64_t)((uint64_t)acc->i + (uint64_t)v.i), dt);
        break;
    case KILN_REDUCE_MAX:
        if (fl)
            acc->f = kiln_scalar_fmax(acc->f, v.f);
        else
            kiln_scalar_eval(KILN_OP_MAX, dt, dt, *acc, v, acc);
        break;
    case KILN_REDUCE_MIN:
        if (fl)
            acc->f = kiln_scalar_fmin(acc->f, v.f);
        else
            kiln_scalar_eval(KILN_OP_MIN, dt, dt, *acc, v, acc);
        break;
    case KILN_REDUCE_NONE:
        *acc = v;
        break;
    }
}

static enum kiln_status
eval_op(struct interp *in, uint32_t opi)
{
    const struct kiln_opdef  *op = &in->g->op[opi];
    const struct kiln_tensor *t = &in->g->tensor[op->out];
    enum kiln_dtype           dt = (enum kiln_dtype)t->dtype;
    enum kiln_reduce          red = (enum kiln_reduce)op->reduce;
    struct kiln_arena_mark    m = kiln_arena_mark(in->ctx);
    struct prog               p = {0};
    in->op = op;
    bool ok = compile_body(in, &p) && kiln_ok(in->ctx);
    for (uint32_t i = 0; i < in->ntouched; i++)
        in->refs[in->touched[i]] = in->slot[in->touched[i]] = 0;
    in->ntouched = 0;
    if (ok && (red != KILN_REDUCE_NONE) != (op->nred != 0)) {
        fail(in, KILN_ERR_INTERNAL, "reduction kind and reduction variables disagree");
        ok = false;
    }

    double *out = in->vals[op->out];
    int64_t flat = 0;
    memset(in->ax, 0, sizeof in->ax);
    while (ok) {
        union kiln_scalar acc = identity(red, dt), v;
        memset(in->rv, 0, sizeof in->rv);
        do {
            if (!run(in, &p, &v)) {
                ok = false;
                break;
            }
            combine(red, dt, &acc, v);
        } while (red != KILN_REDUCE_NONE && next_point(in->rv, op->rext, op->nred));
        if (!ok)
            break;
        out[flat++] = kiln_dtype_is_float(dt)
                          ? kiln_scalar_held(acc.f, dt)
                          : kiln_scalar_int_double(kiln_scalar_wrap(acc.i, dt), dt);
        if (!next_point(in->ax, t->shape, t->ndim))
            break;
    }
    kiln_arena_rewind(in->ctx, m); /* frees the program and the touched list */
    in->touched = NULL;
    in->captouched = 0;
    return ok ? KILN_OK : in->ctx->err.status;
}

enum kiln_status
kiln_ir_eval(kiln_ctx *ctx, const struct kiln_graph *g, double *const *vals)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    for (uint32_t t = 0; t < g->ntensor; t++)
        if (!vals[t])
            return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "interp", "no storage for tensor %s",
                             kiln_graph_tensor_name(g, t));
    struct kiln_arena_mark m = kiln_arena_mark(ctx);
    struct interp          in = {.ctx = ctx, .g = g, .vals = vals};
    in.refs = kiln_arena_alloc(ctx, sizeof(uint32_t) * ctx->nnode);
    in.slot = kiln_arena_alloc(ctx, sizeof(uint32_t) * ctx->nnode);
    enum kiln_status st = in.refs && in.slot ? KILN_OK : ctx->err.status;
    for (uint32_t i = 0; i < g->nop && st == KILN_OK; i++)
        st = eval_op(&in, i);
    kiln_arena_rewind(ctx, m);
    return st;
}
