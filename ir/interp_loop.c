/* ir/interp_loop.c -- the loop-nest interpreter: a deliberately simple tree walker over a
 * struct kiln_func, the oracle for the code generator and for the lowering passes.
 *
 * Operators and casts are ir/scalar.h's (the graph interpreter's too); every value is computed
 * in double (floats) or int64 (integers and bool) and integer results
 * are wrapped to their dtype after each operation, which is what generated code does; stores
 * round to the buffer's dtype (f32 buffers hold float-representable doubles, integer buffers
 * integral doubles). Loops of every kind run serially in order, SELECT evaluates only the
 * branch it takes (AND and OR evaluate both operands, as generated code does), and every load and
 * store is bounds-checked: an out-of-range access, a division by zero or an integer read of an
 * element nobody wrote is an error naming the buffer and the index, never a crash. Temporaries
 * (HEAP/STACK buffers) are allocated at their ALLOC statement and filled with NaN, so a read of
 * unwritten memory shows in the result. Named variables live in a small stack of bindings searched
 * from the top; expressions are walked as trees without a memo (the IR's expressions are shallow).
 * Float-to-int casts truncate and saturate to the target range (NaN gives 0), the defined behaviour
 * the LLVM backend emits. */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct binding {
    uint32_t          var; /* expression id of the VAR node */
    union kiln_scalar v;
};

struct interp {
    const struct kiln_func *f;
    kiln_ctx               *ctx;
    bool                    flat;
    double                **mem;   /* per buffer: storage, or NULL while not allocated */
    int64_t                *numel; /* per buffer */
    struct binding         *env;
    uint32_t                nenv, capenv;
    bool                    failed;
};

static const char *
fname(const struct interp *in)
{
    return kiln_sym_str(in->ctx, in->f->name);
}

static const char *
bname(const struct interp *in, uint32_t b)
{
    return kiln_sym_str(in->ctx, in->f->buf[b].name);
}

static void fail(struct interp *in, enum kiln_status st, const char *fmt, ...) KILN_PRINTF(3, 4);

static void
fail(struct interp *in, enum kiln_status st, const char *fmt, ...)
{
    char    msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!in->failed)
        KILN_FAIL(in->ctx, st, "interp", "%s: %s", fname(in), msg);
    in->failed = true;
}

static bool
bind(struct interp *in, kiln_expr var, union kiln_scalar v)
{
    if (in->nenv == in->capenv) {
        uint32_t        ncap = in->capenv ? 2 * in->capenv : 32;
        struct binding *n =
            kiln_mem_realloc(in->ctx, in->env, sizeof(*n) * in->capenv, sizeof(*n) * ncap);
        if (!n) {
            fail(in, KILN_ERR_NOMEM, "out of memory binding a variable");
            return false;
        }
        in->env = n;
        in->capenv = ncap;
    }
    in->env[in->nenv++] = (struct binding){var.id, v};
    return true;
}

static union kiln_scalar eval(struct interp *in, kiln_expr e);

static int64_t
eval_int(struct interp *in, kiln_expr e)
{
    return eval(in, e).i;
}

/* Flat element index of a load or store with index list `list` of buffer b; -1 on error. */
static int64_t
element(struct interp *in, uint32_t b, uint32_t list, const char *what)
{
    const kiln_ctx           *ctx = in->ctx;
    const struct kiln_buffer *buf = &in->f->buf[b];
    int64_t                   idx[KILN_MAX_DIMS + 1];
    uint32_t                  n = 0;
    for (uint32_t l = list; l; l = ctx->node[l].kid[1]) {
        if (n == KILN_MAX_DIMS + 1) {
            fail(in, KILN_ERR_INVALID, "%s of %s has too many indices", what, bname(in, b));
            return -1;
        }
        idx[n++] = eval_int(in, (kiln_expr){ctx->node[l].kid[0]});
        if (in->failed)
            return -1;
    }
    if (!in->mem[b]) {
        fail(in, KILN_ERR_INVALID, "%s of %s outside its allocation", what, bname(in, b));
        return -1;
    }
    if (in->flat || buf->ndim <= 1) {
        if (n != 1) {
            fail(in, KILN_ERR_INVALID, "%s of %s has %u indices, not 1", what, bname(in, b), n);
            return -1;
        }
        if (idx[0] < 0 || idx[0] >= in->numel[b]) {
            fail(in, KILN_ERR_INVALID, "%s of %s[%lld] out of bounds (%lld elements)", what,
                 bname(in, b), (long long)idx[0], (long long)in->numel[b]);
            return -1;
        }
        return idx[0];
    }
    if (n != buf->ndim) {
        fail(in, KILN_ERR_INVALID, "%s of %s has %u indices, not %u", what, bname(in, b), n,
             (unsigned)buf->ndim);
        return -1;
    }
    int64_t flat = 0;
    for (uint32_t d = 0; d < n; d++) {
        if (idx[d] < 0 || idx[d] >= buf->shape[d]) {
            char   text[200];
            size_t len = 0;
            for (uint32_t k = 0; k < n && len < sizeof text; k++)
                len += (size_t)snprintf(text + len, sizeof text - len, "%s%lld", k ? ", " : "",
                                        (long long)idx[k]);
            fail(in, KILN_ERR_INVALID, "%s of %s[%s] out of bounds: index %u is not in [0, %lld)",
                 what, bname(in, b), text, d, (long long)buf->shape[d]);
            return -1;
        }
        flat = flat * buf->shape[d] + idx[d];
    }
    return flat;
}

static union kiln_scalar
eval_load(struct interp *in, kiln_expr e)
{
    const struct kiln_node n = in->ctx->node[e.id];
    uint32_t               b = (uint32_t)n.imm;
    union kiln_scalar      r = {.i = 0};
    if (b >= in->f->nbuf) {
        fail(in, KILN_ERR_INVALID, "load of buffer %u, which does not exist", b);
        return r;
    }
    int64_t k = element(in, b, n.kid[0], "load");
    if (k < 0)
        return r;
    double v = in->mem[b][k];
    if (kiln_dtype_is_float((enum kiln_dtype)n.dtype)) {
        r.f = v;
        return r;
    }
    if (isnan(v)) {
        fail(in, KILN_ERR_INVALID, "load of %s[%lld]: element was never written", bname(in, b),
             (long long)k);
        return r;
    }
    r.i = kiln_scalar_double_int(v, (enum kiln_dtype)n.dtype);
    return r;
}

static union kiln_scalar
eval_op(struct interp *in, enum kiln_op op, enum kiln_dtype dt, kiln_expr ea, kiln_expr eb)
{
    union kiln_scalar r = {.i = 0}, a, b = {.i = 0};
    enum kiln_dtype   odt = kiln_expr_dtype(in->ctx, ea);
    a = eval(in, ea);
    if (eb.id)
        b = eval(in, eb);
    if (in->failed)
        return r;
    if (kiln_scalar_eval(op, odt, dt, a, b, &r))
        return r;
    if (op == KILN_OP_FLOORDIV || op == KILN_OP_FLOORMOD)
        fail(in, KILN_ERR_INVALID, "%s by zero", op == KILN_OP_FLOORDIV ? "floordiv" : "floormod");
    else
        fail(in, KILN_ERR_INVALID, "%s of %s", kiln_op_name[op], kiln_dtype_name(odt));
    return r;
}

/* Values of f32 (the dtype generated code computes in) are rounded after a cast and when
 * stored; so are f16 and bf16 (computed in f32, rounded by casts and stores); f64 is exact. */
static double
round_f32(double v, enum kiln_dtype dt)
{
    return dt != KILN_DTYPE_F64 ? kiln_scalar_round(v, dt) : v;
}

static union kiln_scalar
eval_cast(struct interp *in, enum kiln_dtype to, kiln_expr ea)
{
    enum kiln_dtype   from = kiln_expr_dtype(in->ctx, ea);
    union kiln_scalar a = eval(in, ea), r = {.i = 0};
    if (in->failed)
        return r;
    r = kiln_scalar_cast(from, to, a);
    if (kiln_dtype_is_float(to))
        r.f = round_f32(r.f, to);
    return r;
}

static union kiln_scalar
eval(struct interp *in, kiln_expr e)
{
    union kiln_scalar      r = {.i = 0};
    const struct kiln_node n = in->ctx->node[e.id];
    if (in->failed)
        return r;
    switch (kiln_op_kind((enum kiln_op)n.op)) {
    case KILN_OPK_LEAF:
        if (n.op == KILN_OP_INT) {
            r.i = n.imm;
            return r;
        }
        if (n.op == KILN_OP_FLOAT) {
            r.f = kiln_expr_float_value(in->ctx, e);
            return r;
        }
        for (uint32_t i = in->nenv; i-- > 0;)
            if (in->env[i].var == e.id)
                return in->env[i].v;
        if (kiln_var_kind_of(n.imm) == KILN_VAR_NAMED)
            fail(in, KILN_ERR_INVALID, "variable %s is not bound",
                 kiln_sym_str(in->ctx, kiln_var_index(n.imm)));
        else
            fail(in, KILN_ERR_INVALID, "axis or reduce variable left in a loop nest");
        return r;
    case KILN_OPK_LOAD:
        return eval_load(in, e);
    case KILN_OPK_SELECT: {
        int64_t c = eval_int(in, (kiln_expr){n.kid[0]});
        if (in->failed)
            return r;
        return eval(in, (kiln_expr){c ? n.kid[1] : n.kid[2]});
    }
    case KILN_OPK_CAST:
        return eval_cast(in, (enum kiln_dtype)n.dtype, (kiln_expr){n.kid[0]});
    case KILN_OPK_UNARY:
    case KILN_OPK_BINARY:
        return eval_op(in, (enum kiln_op)n.op, (enum kiln_dtype)n.dtype, (kiln_expr){n.kid[0]},
                       (kiln_expr){n.kid[1]}); /* nil for unary operators */
    case KILN_OPK_NONE:
    case KILN_OPK_LIST:
        break;
    }
    fail(in, KILN_ERR_INVALID, "cannot evaluate a %s node",
         n.op < KILN_OP_COUNT ? kiln_op_name[n.op] : "?");
    return r;
}

static double
to_storage(union kiln_scalar v, enum kiln_dtype dt)
{
    if (kiln_dtype_is_float(dt))
        return round_f32(v.f, dt);
    return kiln_scalar_int_double(kiln_scalar_wrap(v.i, dt), dt);
}

static void exec(struct interp *in, const struct kiln_stmt *s);

static void
exec_alloc(struct interp *in, const struct kiln_stmt *s)
{
    uint32_t b = s->u.alloc.buf;
    if (b >= in->f->nbuf || in->f->buf[b].scope == KILN_SCOPE_GLOBAL) {
        fail(in, KILN_ERR_INVALID, "allocation of a missing or global buffer %u", b);
        return;
    }
    if (in->mem[b]) {
        fail(in, KILN_ERR_INVALID, "buffer %s allocated twice", bname(in, b));
        return;
    }
    int64_t n = in->numel[b];
    if (n > (int64_t)(SIZE_MAX / sizeof(double) / 2)) {
        fail(in, KILN_ERR_NOMEM, "buffer %s has %lld elements", bname(in, b), (long long)n);
        return;
    }
    size_t  bytes = sizeof(double) * (size_t)(n ? n : 1);
    double *p = kiln_mem_realloc(in->ctx, NULL, 0, bytes);
    if (!p) {
        fail(in, KILN_ERR_NOMEM, "out of memory allocating %s (%zu bytes)", bname(in, b), bytes);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = NAN;
    in->mem[b] = p;
    exec(in, s->u.alloc.body);
    kiln_mem_free(in->ctx, p, bytes);
    in->mem[b] = NULL;
}

/* Not a statement visitor (ir/visit.c): every kind is executed its own way, a loop's body
 * many times over, so there is no default recursion to inherit. */
static void
exec(struct interp *in, const struct kiln_stmt *s)
{
    if (in->failed)
        return;
    if (!s) {
        fail(in, KILN_ERR_INVALID, "missing statement");
        return;
    }
    switch ((enum kiln_stmt_kind)s->kind) {
    case KILN_STMT_FOR: {
        /* every kind runs serially, GPU block/thread loops too: their iterations are
         * independent by construction (a bind step refuses reductions), so in order is as
         * good as any order */
        int64_t lo = eval_int(in, s->u.for_.min), ext = eval_int(in, s->u.for_.extent);
        for (int64_t k = 0; k < ext && !in->failed; k++) {
            if (!bind(in, s->u.for_.var, (union kiln_scalar){.i = lo + k}))
                return;
            exec(in, s->u.for_.body);
            in->nenv--;
        }
        return;
    }
    case KILN_STMT_STORE: {
        uint32_t b = s->u.store.buf;
        if (b >= in->f->nbuf) {
            fail(in, KILN_ERR_INVALID, "store to buffer %u, which does not exist", b);
            return;
        }
        int64_t k = element(in, b, s->u.store.index.id, "store");
        if (k < 0)
            return;
        union kiln_scalar v = eval(in, s->u.store.value);
        if (!in->failed)
            in->mem[b][k] = to_storage(v, (enum kiln_dtype)in->f->buf[b].dtype);
        return;
    }
    case KILN_STMT_SEQ:
        for (uint32_t i = 0; i < s->u.seq.n && !in->failed; i++)
            exec(in, s->u.seq.item[i]);
        return;
    case KILN_STMT_IF: {
        int64_t c = eval_int(in, s->u.if_.cond);
        if (in->failed)
            return;
        if (c)
            exec(in, s->u.if_.then);
        else if (s->u.if_.els)
            exec(in, s->u.if_.els);
        return;
    }
    case KILN_STMT_LET: {
        union kiln_scalar v = eval(in, s->u.let.value);
        if (in->failed || !bind(in, s->u.let.var, v))
            return;
        exec(in, s->u.let.body);
        in->nenv--;
        return;
    }
    case KILN_STMT_ALLOC:
        exec_alloc(in, s);
        return;
    }
    fail(in, KILN_ERR_INVALID, "unknown statement kind %d", s->kind);
}

enum kiln_status
kiln_func_eval(const struct kiln_func *f, bool flat, double *const *bufs)
{
    kiln_ctx *ctx = f->ctx;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct interp in = {.f = f, .ctx = ctx, .flat = flat};
    size_t        nb = f->nbuf ? f->nbuf : 1;
    in.mem = kiln_mem_realloc(ctx, NULL, 0, sizeof(*in.mem) * nb);
    in.numel = kiln_mem_realloc(ctx, NULL, 0, sizeof(*in.numel) * nb);
    if (!in.mem || !in.numel) {
        fail(&in, KILN_ERR_NOMEM, "out of memory");
    } else {
        memset(in.mem, 0, sizeof(*in.mem) * nb);
        for (uint32_t b = 0; b < f->nbuf; b++) {
            int64_t n = 1;
            for (int d = 0; d < f->buf[b].ndim; d++)
                if (kiln_mul_overflows(n, f->buf[b].shape[d], &n))
                    fail(&in, KILN_ERR_INVALID, "buffer %s has too many elements", bname(&in, b));
            in.numel[b] = n;
        }
        for (uint32_t i = 0; i < f->nparam && !in.failed; i++) {
            if (!bufs || !bufs[i])
                fail(&in, KILN_ERR_INVALID, "no storage for parameter %u (%s)", i,
                     bname(&in, f->param[i]));
            else
                in.mem[f->param[i]] = bufs[i];
        }
        exec(&in, f->body);
    }
    kiln_mem_free(ctx, in.mem, sizeof(*in.mem) * nb);
    kiln_mem_free(ctx, in.numel, sizeof(*in.numel) * nb);
    kiln_mem_free(ctx, in.env, sizeof(*in.env) * in.capenv);
    return in.failed ? ctx->err.status : KILN_OK;
}
