/* ir/stmt.c -- the loop-nest IR: functions with buffer tables, statement builders, the
 * verifier (the executable form of docs/ir.md's loop-nest section) and a text printer.
 *
 * Statements are arena-allocated and mutable; expressions are the context's hash-consed
 * nodes, so loop variables are named variables (kiln_var_named) and buffer accesses reuse the
 * LOAD node with the buffer index as immediate. The printer writes fully parenthesised
 * expressions: it is for tests and inspection, not for reading back. */
#include "ir.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *const kiln_loop_kind_name[] = {
    [KILN_LOOP_SERIAL] = "serial",       [KILN_LOOP_PARALLEL] = "parallel",
    [KILN_LOOP_VECTOR] = "vectorized",   [KILN_LOOP_UNROLL] = "unrolled",
    [KILN_LOOP_GPU_BLOCK] = "gpu_block", [KILN_LOOP_GPU_THREAD] = "gpu_thread",
};

struct kiln_func *
kiln_func_new(kiln_ctx *ctx, const char *name)
{
    struct kiln_func *f = kiln_arena_alloc(ctx, sizeof *f);
    if (!f)
        return NULL;
    f->ctx = ctx;
    f->name = kiln_sym_cstr(ctx, name);
    return f;
}

bool
kiln_buffer_bytes(const struct kiln_buffer *b, int64_t *out)
{
    int64_t n = (int64_t)kiln_dtype_size((enum kiln_dtype)b->dtype);
    for (int d = 0; d < b->ndim; d++)
        if (b->shape[d] < 0 || kiln_mul_overflows(n, b->shape[d], &n))
            return false;
    *out = n;
    return true;
}

int64_t
kiln_buffer_numel(const struct kiln_buffer *b)
{
    return kiln_shape_numel(b->shape, b->ndim);
}

uint32_t
kiln_func_add_buffer(struct kiln_func *f, const char *name, enum kiln_dtype dt, uint32_t ndim,
                     const int64_t *shape, enum kiln_scope scope, uint32_t tensor)
{
    kiln_ctx *ctx = f->ctx;
    if (!kiln_ok(ctx))
        return KILN_NONE;
    if (ndim > KILN_MAX_DIMS || (unsigned)dt >= KILN_DTYPE_COUNT) {
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "loop", "buffer %s: bad rank or dtype", name);
        return KILN_NONE;
    }
    struct kiln_buffer b = {.name = kiln_sym_cstr(ctx, name),
                            .dtype = (uint8_t)dt,
                            .scope = (uint8_t)scope,
                            .ndim = (uint8_t)ndim,
                            .tensor = tensor,
                            .align = (uint32_t)kiln_dtype_size(dt),
                            .ws_offset = -1,
                            .prep_offset = -1};
    for (uint32_t i = 0; i < ndim; i++)
        b.shape[i] = shape[i];
    uint32_t id = f->nbuf;
    if (!KILN_VEC_PUSH(ctx, f->buf, f->nbuf, f->capbuf, b))
        return KILN_NONE;
    if (scope == KILN_SCOPE_GLOBAL && !KILN_VEC_PUSH(ctx, f->param, f->nparam, f->capparam, id))
        return KILN_NONE;
    return id;
}

kiln_expr
kiln_index_list(kiln_ctx *ctx, uint32_t n, const kiln_expr *idx)
{
    /* a load node of a dummy buffer builds the list with the same code path; take its kid */
    kiln_expr ld = kiln_load(ctx, 0, KILN_DTYPE_F32, n, idx);
    return ld.id ? (kiln_expr){kiln_node_get(ctx, ld)->kid[0]} : ld;
}

kiln_expr
kiln_func_load(struct kiln_func *f, uint32_t b, uint32_t n, const kiln_expr *idx)
{
    if (b >= f->nbuf) {
        KILN_FAIL(f->ctx, KILN_ERR_INTERNAL, "loop", "load of buffer %u of %u", b, f->nbuf);
        return (kiln_expr){0};
    }
    return kiln_load(f->ctx, b, (enum kiln_dtype)f->buf[b].dtype, n, idx);
}

static struct kiln_stmt *
stmt_new(kiln_ctx *ctx, enum kiln_stmt_kind kind)
{
    struct kiln_stmt *s = kiln_arena_alloc(ctx, sizeof *s);
    if (s)
        s->kind = (uint8_t)kind;
    return s;
}

struct kiln_stmt *
kiln_stmt_for(kiln_ctx *ctx, kiln_expr var, kiln_expr min, kiln_expr extent,
              enum kiln_loop_kind loop, struct kiln_stmt *body)
{
    if (!var.id || !min.id || !extent.id || !body)
        return NULL;
    struct kiln_stmt *s = stmt_new(ctx, KILN_STMT_FOR);
    if (s) {
        s->u.for_.var = var;
        s->u.for_.min = min;
        s->u.for_.extent = extent;
        s->u.for_.loop = (uint8_t)loop;
        s->u.for_.axis = 0; /* a GPU loop's builder sets it */
        s->u.for_.thread_reduce = 0;
        s->u.for_.body = body;
    }
    return s;
}

struct kiln_stmt *
kiln_stmt_store(kiln_ctx *ctx, uint32_t buf, uint32_t n, const kiln_expr *idx, kiln_expr value)
{
    kiln_expr list = kiln_index_list(ctx, n, idx);
    if (!list.id || !value.id)
        return NULL;
    struct kiln_stmt *s = stmt_new(ctx, KILN_STMT_STORE);
    if (s) {
        s->u.store.buf = buf;
        s->u.store.index = list;
        s->u.store.value = value;
    }
    return s;
}

struct kiln_stmt *
kiln_stmt_seq(kiln_ctx *ctx, uint32_t n, struct kiln_stmt *const *item)
{
    for (uint32_t i = 0; i < n; i++)
        if (!item[i])
            return NULL;
    struct kiln_stmt *s = stmt_new(ctx, KILN_STMT_SEQ);
    if (!s)
        return NULL;
    struct kiln_stmt **copy = kiln_arena_alloc(ctx, sizeof(*copy) * (n ? n : 1));
    if (!copy)
        return NULL;
    memcpy(copy, item, sizeof(*copy) * n);
    s->u.seq.item = copy;
    s->u.seq.n = n;
    return s;
}

struct kiln_stmt *
kiln_stmt_if(kiln_ctx *ctx, kiln_expr cond, struct kiln_stmt *then, struct kiln_stmt *els)
{
    if (!cond.id || !then)
        return NULL;
    struct kiln_stmt *s = stmt_new(ctx, KILN_STMT_IF);
    if (s) {
        s->u.if_.cond = cond;
        s->u.if_.then = then;
        s->u.if_.els = els;
    }
    return s;
}

struct kiln_stmt *
kiln_stmt_let(kiln_ctx *ctx, kiln_expr var, kiln_expr value, struct kiln_stmt *body)
{
    if (!var.id || !value.id || !body)
        return NULL;
    struct kiln_stmt *s = stmt_new(ctx, KILN_STMT_LET);
    if (s) {
        s->u.let.var = var;
        s->u.let.value = value;
        s->u.let.body = body;
    }
    return s;
}

struct kiln_stmt *
kiln_stmt_alloc(kiln_ctx *ctx, uint32_t buf, struct kiln_stmt *body)
{
    if (!body)
        return NULL;
    struct kiln_stmt *s = stmt_new(ctx, KILN_STMT_ALLOC);
    if (s) {
        s->u.alloc.buf = buf;
        s->u.alloc.body = body;
    }
    return s;
}

kiln_expr
kiln_fresh_var(kiln_ctx *ctx, const char *base)
{
    if (!base) /* the caller's name failed to allocate: the error is set */
        return (kiln_expr){0};
    size_t size = strlen(base) + 16; /* room for ".%u" */
    char  *name = kiln_arena_alloc(ctx, size);
    if (!name)
        return (kiln_expr){0};
    snprintf(name, size, "%s", base);
    for (uint32_t k = 1; k < 1000000; k++) {
        /* a symbol that exists already may be in use: take the first unused spelling */
        uint32_t before = ctx->nsym;
        uint32_t sym = kiln_sym_cstr(ctx, name);
        if (!sym)
            return (kiln_expr){0};
        if (ctx->nsym != before)
            return kiln_var_named(ctx, sym, KILN_DTYPE_INDEX);
        snprintf(name, size, "%s.%u", base, k);
    }
    KILN_FAIL(ctx, KILN_ERR_INTERNAL, "loop", "no fresh name for %s", base);
    return (kiln_expr){0};
}

/* ---- verifier ---- */

struct vstate {
    const struct kiln_func *f;
    bool                    flat;
    kiln_expr               bound[256]; /* variables bound on the current path */
    uint32_t                nbound;
    bool                    nested; /* below the chain of ALLOCs at the top of the body */
    const char             *bad;
    char                    msg[200];
};

static bool
is_bound(const struct vstate *vs, kiln_expr v)
{
    for (uint32_t i = 0; i < vs->nbound; i++)
        if (vs->bound[i].id == v.id)
            return true;
    return false;
}

static bool
check_expr(struct vstate *vs, kiln_expr e)
{
    const kiln_ctx *ctx = vs->f->ctx;
    if (!e.id) {
        snprintf(vs->msg, sizeof vs->msg, "nil expression");
        return false;
    }
    const struct kiln_node *n = &ctx->node[e.id];
    if (n->op == KILN_OP_VAR) {
        if (kiln_var_kind_of(n->imm) != KILN_VAR_NAMED) {
            snprintf(vs->msg, sizeof vs->msg, "axis or reduce variable left in a loop nest");
            return false;
        }
        if (!is_bound(vs, e)) {
            snprintf(vs->msg, sizeof vs->msg, "variable %s is not bound",
                     kiln_sym_str(ctx, kiln_var_index(n->imm)));
            return false;
        }
        return true;
    }
    if (n->op == KILN_OP_LOAD) {
        uint32_t b = (uint32_t)n->imm;
        if (b >= vs->f->nbuf) {
            snprintf(vs->msg, sizeof vs->msg, "load of buffer %u, which does not exist", b);
            return false;
        }
        const struct kiln_buffer *buf = &vs->f->buf[b];
        uint32_t                  want = vs->flat || buf->ndim == 0 ? 1 : buf->ndim;
        if (kiln_load_nidx(ctx, e) != want) {
            snprintf(vs->msg, sizeof vs->msg, "load of %s has %u indices, not %u",
                     kiln_sym_str(ctx, buf->name), kiln_load_nidx(ctx, e), want);
            return false;
        }
        if (n->dtype != buf->dtype) {
            snprintf(vs->msg, sizeof vs->msg, "load of %s has dtype %s, not %s",
                     kiln_sym_str(ctx, buf->name), kiln_dtype_name((enum kiln_dtype)n->dtype),
                     kiln_dtype_name((enum kiln_dtype)buf->dtype));
            return false;
        }
    }
    for (int i = 0; i < kiln_op_arity[n->op]; i++)
        if (n->kid[i] && !check_expr(vs, (kiln_expr){n->kid[i]}))
            return false;
    return true;
}

static bool
bind(struct vstate *vs, kiln_expr v)
{
    const kiln_ctx *ctx = vs->f->ctx;
    if (!v.id || ctx->node[v.id].op != KILN_OP_VAR
        || kiln_var_kind_of(ctx->node[v.id].imm) != KILN_VAR_NAMED) {
        snprintf(vs->msg, sizeof vs->msg, "loop or let binds something that is not a variable");
        return false;
    }
    if (is_bound(vs, v)) {
        snprintf(vs->msg, sizeof vs->msg, "variable %s is bound twice on one path",
                 kiln_sym_str(ctx, kiln_var_index(ctx->node[v.id].imm)));
        return false;
    }
    if (vs->nbound == KILN_COUNTOF(vs->bound)) {
        snprintf(vs->msg, sizeof vs->msg, "loop nest deeper than %zu", KILN_COUNTOF(vs->bound));
        return false;
    }
    vs->bound[vs->nbound++] = v;
    return true;
}

/* The verifier is a statement visitor: the kind callbacks check each statement and bind its
 * variable around its body; vs->msg says what was wrong when the walk fails. */

static enum kiln_walk
fail_if(bool bad)
{
    return bad ? KILN_WALK_FAIL : KILN_WALK_GO;
}

/* A child statement that must be there. */
static enum kiln_walk
check_kid(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct vstate *vs = v->user;
    if (!s) {
        snprintf(vs->msg, sizeof vs->msg, "missing statement");
        return KILN_WALK_FAIL;
    }
    return kiln_stmt_visit(v, s);
}

/* An ALLOC's checks, from pre: with no ALLOC callback the visitor walks a chain of ALLOCs in a
 * loop (a check_alloc recursing into the body overflowed the stack at about 60,000 root
 * temporaries). */
static enum kiln_walk
check_alloc(struct vstate *vs, const struct kiln_stmt *s)
{
    const kiln_ctx *ctx = vs->f->ctx;
    if (s->u.alloc.buf >= vs->f->nbuf || vs->f->buf[s->u.alloc.buf].scope == KILN_SCOPE_GLOBAL) {
        snprintf(vs->msg, sizeof vs->msg, "allocation of a missing or global buffer");
        return KILN_WALK_FAIL;
    }
    if ((vs->f->buf[s->u.alloc.buf].ws_offset >= 0 || vs->f->buf[s->u.alloc.buf].prep_offset >= 0)
        && vs->nested) {
        snprintf(vs->msg, sizeof vs->msg, "%s buffer %s is allocated inside a loop, if or sequence",
                 vs->f->buf[s->u.alloc.buf].ws_offset >= 0 ? "workspace" : "prepared",
                 kiln_sym_str(ctx, vs->f->buf[s->u.alloc.buf].name));
        return KILN_WALK_FAIL;
    }
    if (!s->u.alloc.body) {
        snprintf(vs->msg, sizeof vs->msg, "missing statement");
        return KILN_WALK_FAIL;
    }
    return KILN_WALK_GO;
}

static enum kiln_walk
check_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct vstate *vs = v->user;
    if (s->kind > KILN_STMT_ALLOC) {
        snprintf(vs->msg, sizeof vs->msg, "unknown statement kind %d", s->kind);
        return KILN_WALK_FAIL;
    }
    if (s->kind == KILN_STMT_ALLOC)
        return check_alloc(vs, s);
    vs->nested = true; /* the chain never resumes below another statement */
    return KILN_WALK_GO;
}

static enum kiln_walk
check_for(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct vstate  *vs = v->user;
    const kiln_ctx *ctx = vs->f->ctx;
    if (!check_expr(vs, s->u.for_.min) || !check_expr(vs, s->u.for_.extent))
        return KILN_WALK_FAIL;
    if (s->u.for_.loop > KILN_LOOP_GPU_THREAD) {
        snprintf(vs->msg, sizeof vs->msg, "unknown loop kind %d", s->u.for_.loop);
        return KILN_WALK_FAIL;
    }
    bool    gpu = s->u.for_.loop == KILN_LOOP_GPU_BLOCK || s->u.for_.loop == KILN_LOOP_GPU_THREAD;
    int64_t ext;
    bool    cext = kiln_expr_is_int(ctx, s->u.for_.extent, &ext);
    if ((s->u.for_.loop == KILN_LOOP_VECTOR || s->u.for_.loop == KILN_LOOP_UNROLL)
        && (!cext || ext <= 0)) {
        snprintf(vs->msg, sizeof vs->msg, "%s loop needs a constant positive extent",
                 kiln_loop_kind_name[s->u.for_.loop]);
        return KILN_WALK_FAIL;
    }
    if (!bind(vs, s->u.for_.var))
        return KILN_WALK_FAIL;
    if (gpu ? s->u.for_.axis > 2 : s->u.for_.axis != 0) {
        snprintf(vs->msg, sizeof vs->msg, "%s loop %s has axis %d%s",
                 kiln_loop_kind_name[s->u.for_.loop],
                 kiln_sym_str(ctx, kiln_var_index(ctx->node[s->u.for_.var.id].imm)), s->u.for_.axis,
                 gpu ? ", not 0, 1 or 2 (x, y, z)"
                     : "; only GPU block and thread loops have an axis");
        return KILN_WALK_FAIL;
    }
    if (s->u.for_.thread_reduce
        && (s->u.for_.loop != KILN_LOOP_GPU_THREAD || s->u.for_.axis != 0)) {
        snprintf(vs->msg, sizeof vs->msg,
                 "%s loop %s is marked a cross-thread reduction; only gpu_thread.x loops can "
                 "be",
                 kiln_loop_kind_name[s->u.for_.loop],
                 kiln_sym_str(ctx, kiln_var_index(ctx->node[s->u.for_.var.id].imm)));
        return KILN_WALK_FAIL;
    }
    enum kiln_walk r = check_kid(v, s->u.for_.body);
    vs->nbound--;
    return r;
}

static enum kiln_walk
check_let(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct vstate *vs = v->user;
    if (!check_expr(vs, s->u.let.value) || !bind(vs, s->u.let.var))
        return KILN_WALK_FAIL;
    enum kiln_walk r = check_kid(v, s->u.let.body);
    vs->nbound--;
    return r;
}

static enum kiln_walk
check_store(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct vstate  *vs = v->user;
    const kiln_ctx *ctx = vs->f->ctx;
    uint32_t        b = s->u.store.buf;
    if (b >= vs->f->nbuf) {
        snprintf(vs->msg, sizeof vs->msg, "store to buffer %u, which does not exist", b);
        return KILN_WALK_FAIL;
    }
    const struct kiln_buffer *buf = &vs->f->buf[b];
    uint32_t                  n = 0;
    for (uint32_t l = s->u.store.index.id; l; l = ctx->node[l].kid[1]) {
        if (!check_expr(vs, (kiln_expr){ctx->node[l].kid[0]}))
            return KILN_WALK_FAIL;
        n++;
    }
    uint32_t want = vs->flat || buf->ndim == 0 ? 1 : buf->ndim;
    if (n != want) {
        snprintf(vs->msg, sizeof vs->msg, "store to %s has %u indices, not %u",
                 kiln_sym_str(ctx, buf->name), n, want);
        return KILN_WALK_FAIL;
    }
    if (!check_expr(vs, s->u.store.value))
        return KILN_WALK_FAIL;
    if (kiln_expr_dtype(ctx, s->u.store.value) != buf->dtype) {
        snprintf(vs->msg, sizeof vs->msg, "store of a %s value to %s buffer %s",
                 kiln_dtype_name(kiln_expr_dtype(ctx, s->u.store.value)),
                 kiln_dtype_name((enum kiln_dtype)buf->dtype), kiln_sym_str(ctx, buf->name));
        return KILN_WALK_FAIL;
    }
    return KILN_WALK_GO;
}

static enum kiln_walk
check_seq(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    for (uint32_t i = 0; i < s->u.seq.n; i++)
        if (check_kid(v, s->u.seq.item[i]) == KILN_WALK_FAIL)
            return KILN_WALK_FAIL;
    return KILN_WALK_GO;
}

static enum kiln_walk
check_if(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct vstate *vs = v->user;
    if (!check_expr(vs, s->u.if_.cond))
        return KILN_WALK_FAIL;
    if (kiln_expr_dtype(vs->f->ctx, s->u.if_.cond) != KILN_DTYPE_BOOL) {
        snprintf(vs->msg, sizeof vs->msg, "if condition is not bool");
        return KILN_WALK_FAIL;
    }
    return fail_if(check_kid(v, s->u.if_.then) == KILN_WALK_FAIL
                   || (s->u.if_.els && check_kid(v, s->u.if_.els) == KILN_WALK_FAIL));
}

enum kiln_status
kiln_func_verify(const struct kiln_func *f, bool flat)
{
    struct vstate vs = {.f = f, .flat = flat};
    if (!kiln_ok(f->ctx))
        return f->ctx->err.status;
    for (uint32_t b = 0; b < f->nbuf; b++) {
        const struct kiln_buffer *bf = &f->buf[b];
        int64_t                   bytes = (int64_t)kiln_dtype_size((enum kiln_dtype)bf->dtype);
        if (bf->ws_offset < 0 && bf->prep_offset < 0)
            continue;
        for (int d = 0; d < bf->ndim; d++)
            if (bf->shape[d] < 0 || kiln_mul_overflows(bytes, bf->shape[d], &bytes))
                bytes = INT64_MAX;
        if (bf->prep_offset >= 0) {
            if (bf->scope != KILN_SCOPE_HEAP || bf->ws_offset >= 0
                || bf->prep_offset % KILN_WS_ALIGN || bytes > f->prep_bytes - bf->prep_offset)
                return KILN_FAIL(f->ctx, KILN_ERR_INTERNAL, "verify",
                                 "%s: prepared buffer %s (%" PRId64 " bytes at offset %" PRId64
                                 ") is not a %d-byte aligned heap buffer inside the %" PRId64
                                 "-byte prepared area",
                                 kiln_sym_str(f->ctx, f->name), kiln_sym_str(f->ctx, bf->name),
                                 bytes, bf->prep_offset, KILN_WS_ALIGN, f->prep_bytes);
            continue;
        }
        if (bf->scope != KILN_SCOPE_HEAP || bf->ws_offset % KILN_WS_ALIGN
            || bytes > f->ws_bytes - bf->ws_offset)
            return KILN_FAIL(f->ctx, KILN_ERR_INTERNAL, "verify",
                             "%s: workspace buffer %s (%" PRId64 " bytes at offset %" PRId64
                             ") is not a %d-byte aligned heap buffer inside the %" PRId64
                             "-byte workspace",
                             kiln_sym_str(f->ctx, f->name), kiln_sym_str(f->ctx, bf->name), bytes,
                             bf->ws_offset, KILN_WS_ALIGN, f->ws_bytes);
    }
    struct kiln_stmt_visitor v = {.user = &vs,
                                  .pre = check_pre,
                                  .for_ = check_for,
                                  .store = check_store,
                                  .seq = check_seq,
                                  .if_ = check_if,
                                  .let = check_let};
    if (check_kid(&v, f->body) != KILN_WALK_GO)
        return KILN_FAIL(f->ctx, KILN_ERR_INTERNAL, "verify", "%s: %s",
                         kiln_sym_str(f->ctx, f->name), vs.msg);
    return KILN_OK;
}

/* ---- printer ---- */

static bool
put_expr(const struct kiln_func *f, struct kiln_buf *out, kiln_expr e)
{
    kiln_ctx               *ctx = f->ctx;
    const struct kiln_node *n = &ctx->node[e.id];
    switch (kiln_op_kind((enum kiln_op)n->op)) {
    case KILN_OPK_NONE:
        return kiln_buf_puts(ctx, out, n->op == KILN_OP_NIL ? "nil" : "?");
    case KILN_OPK_LEAF:
        if (n->op == KILN_OP_INT && n->dtype == KILN_DTYPE_BOOL)
            return kiln_buf_puts(ctx, out, n->imm ? "true" : "false");
        if (n->op == KILN_OP_INT)
            return kiln_buf_printf(ctx, out, "%" PRId64, n->imm);
        if (n->op == KILN_OP_FLOAT)
            return kiln_buf_printf(ctx, out, "%.9g", kiln_expr_float_value(ctx, e));
        if (kiln_var_kind_of(n->imm) == KILN_VAR_NAMED)
            return kiln_buf_puts(ctx, out, kiln_sym_str(ctx, kiln_var_index(n->imm)));
        return kiln_buf_printf(ctx, out, "%s%u",
                               kiln_var_kind_of(n->imm) == KILN_VAR_AXIS ? "ax" : "rv",
                               kiln_var_index(n->imm));
    case KILN_OPK_LIST:
        for (uint32_t l = e.id; l; l = ctx->node[l].kid[1]) {
            if (!put_expr(f, out, (kiln_expr){ctx->node[l].kid[0]}))
                return false;
            if (ctx->node[l].kid[1] && !kiln_buf_puts(ctx, out, ", "))
                return false;
        }
        return true;
    case KILN_OPK_LOAD: {
        uint32_t    b = (uint32_t)n->imm;
        const char *name = b < f->nbuf ? kiln_sym_str(ctx, f->buf[b].name) : "?";
        return kiln_buf_printf(ctx, out, "%s[", name)
               && put_expr(f, out, (kiln_expr){ctx->node[e.id].kid[0]})
               && kiln_buf_puts(ctx, out, "]");
    }
    case KILN_OPK_CAST:
        return kiln_buf_printf(ctx, out, "%s(", kiln_dtype_name((enum kiln_dtype)n->dtype))
               && put_expr(f, out, (kiln_expr){n->kid[0]}) && kiln_buf_puts(ctx, out, ")");
    case KILN_OPK_SELECT:
    case KILN_OPK_UNARY:
    case KILN_OPK_BINARY:
        break;
    }
    if (kiln_op_prec[n->op] <= 5) { /* infix: (a + b) */
        kiln_expr a = {n->kid[0]}, b = {n->kid[1]};
        return kiln_buf_puts(ctx, out, "(") && put_expr(f, out, a)
               && kiln_buf_printf(ctx, out, " %s ", kiln_op_text[n->op]) && put_expr(f, out, b)
               && kiln_buf_puts(ctx, out, ")");
    }
    /* everything else as a call of its lower-case name: neg(x), min(a, b), select(c, a, b) */
    char name[16];
    snprintf(name, sizeof name, "%s", kiln_op_name[n->op]);
    for (char *p = name; *p; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    if (!kiln_buf_printf(ctx, out, "%s(", name))
        return false;
    kiln_expr kid[3] = {{n->kid[0]}, {n->kid[1]}, {n->kid[2]}};
    for (int i = 0; i < kiln_op_arity[n->op]; i++)
        if ((i && !kiln_buf_puts(ctx, out, ", ")) || !put_expr(f, out, kid[i]))
            return false;
    return kiln_buf_puts(ctx, out, ")");
}

static bool
indent(kiln_ctx *ctx, struct kiln_buf *out, int depth)
{
    for (int i = 0; i < depth; i++)
        if (!kiln_buf_puts(ctx, out, "  "))
            return false;
    return true;
}

/* The end of a loop's header: ")" then its kind unless serial, with the axis of a GPU loop
 * (`gpu_block.x`, `gpu_thread.y`), then ":". */
static bool
put_loop_kind(kiln_ctx *ctx, struct kiln_buf *out, const struct kiln_stmt *s)
{
    uint8_t k = s->u.for_.loop;
    bool    gpu = k == KILN_LOOP_GPU_BLOCK || k == KILN_LOOP_GPU_THREAD;
    if (k == KILN_LOOP_SERIAL)
        return kiln_buf_puts(ctx, out, "):\n");
    if (k > KILN_LOOP_GPU_THREAD)
        return kiln_buf_printf(ctx, out, ") kind%d:\n", k);
    if (gpu && s->u.for_.axis <= 2)
        return kiln_buf_printf(ctx, out, ") %s.%c%s:\n", kiln_loop_kind_name[k],
                               "xyz"[s->u.for_.axis], s -> u.for_.thread_reduce ? " reduce" : "");
    if (gpu)
        return kiln_buf_printf(ctx, out, ") %s.%d:\n", kiln_loop_kind_name[k], s->u.for_.axis);
    return kiln_buf_printf(ctx, out, ") %s:\n", kiln_loop_kind_name[k]);
}

/* Not a statement visitor (ir/visit.c): each kind prints its own lines at its own depth, the
 * else branch between two bodies, so nothing of the default recursion would be used. */
static bool
put_stmt(const struct kiln_func *f, struct kiln_buf *out, const struct kiln_stmt *s, int depth)
{
    kiln_ctx *ctx = f->ctx;
    if (!s)
        return indent(ctx, out, depth) && kiln_buf_puts(ctx, out, "<null>\n");
    switch ((enum kiln_stmt_kind)s->kind) {
    case KILN_STMT_FOR:
        return indent(ctx, out, depth) && kiln_buf_puts(ctx, out, "for ")
               && put_expr(f, out, s->u.for_.var) && kiln_buf_puts(ctx, out, " in [")
               && put_expr(f, out, s->u.for_.min) && kiln_buf_puts(ctx, out, ", +")
               && put_expr(f, out, s->u.for_.extent) && put_loop_kind(ctx, out, s)
               && put_stmt(f, out, s->u.for_.body, depth + 1);
    case KILN_STMT_STORE: {
        uint32_t b = s->u.store.buf;
        return indent(ctx, out, depth)
               && kiln_buf_printf(ctx, out, "%s[",
                                  b < f->nbuf ? kiln_sym_str(ctx, f->buf[b].name) : "?")
               && put_expr(f, out, s->u.store.index) && kiln_buf_puts(ctx, out, "] = ")
               && put_expr(f, out, s->u.store.value) && kiln_buf_puts(ctx, out, "\n");
    }
    case KILN_STMT_SEQ:
        for (uint32_t i = 0; i < s->u.seq.n; i++)
            if (!put_stmt(f, out, s->u.seq.item[i], depth))
                return false;
        return true;
    case KILN_STMT_IF:
        if (!indent(ctx, out, depth) || !kiln_buf_puts(ctx, out, "if ")
            || !put_expr(f, out, s->u.if_.cond) || !kiln_buf_puts(ctx, out, ":\n")
            || !put_stmt(f, out, s->u.if_.then, depth + 1))
            return false;
        if (!s->u.if_.els)
            return true;
        return indent(ctx, out, depth) && kiln_buf_puts(ctx, out, "else:\n")
               && put_stmt(f, out, s->u.if_.els, depth + 1);
    case KILN_STMT_LET:
        return indent(ctx, out, depth) && kiln_buf_puts(ctx, out, "let ")
               && put_expr(f, out, s->u.let.var) && kiln_buf_puts(ctx, out, " = ")
               && put_expr(f, out, s->u.let.value) && kiln_buf_puts(ctx, out, "\n")
               && put_stmt(f, out, s->u.let.body, depth);
    case KILN_STMT_ALLOC: {
        const struct kiln_buffer *b = &f->buf[s->u.alloc.buf];
        static const char *const  scope[] = {"global", "heap", "stack", "shared"};
        if (!indent(ctx, out, depth)
            || !kiln_buf_printf(ctx, out, "alloc %s: %s%s%s[", kiln_sym_str(ctx, b->name),
                                scope[b->scope], b->scope ? " " : "",
                                kiln_dtype_name((enum kiln_dtype)b->dtype)))
            return false;
        for (int i = 0; i < b->ndim; i++)
            if (!kiln_buf_printf(ctx, out, "%s%" PRId64, i ? ", " : "", b->shape[i]))
                return false;
        if (b->ws_offset >= 0
            && !kiln_buf_printf(ctx, out, "] at workspace + %" PRId64 "\n", b->ws_offset))
            return false;
        if (b->prep_offset >= 0
            && !kiln_buf_printf(ctx, out, "] at prepared + %" PRId64 "\n", b->prep_offset))
            return false;
        return (b->ws_offset >= 0 || b->prep_offset >= 0 || kiln_buf_puts(ctx, out, "]\n"))
               && put_stmt(f, out, s->u.alloc.body, depth);
    }
    }
    return false;
}

enum kiln_status
kiln_func_print(const struct kiln_func *f, struct kiln_buf *out)
{
    kiln_ctx *ctx = f->ctx;
    if (!kiln_buf_printf(ctx, out, "func %s(", kiln_sym_str(ctx, f->name)))
        return ctx->err.status;
    for (uint32_t i = 0; i < f->nparam; i++) {
        const struct kiln_buffer *b = &f->buf[f->param[i]];
        if (!kiln_buf_printf(ctx, out, "%s%s: %s[", i ? ", " : "", kiln_sym_str(ctx, b->name),
                             kiln_dtype_name((enum kiln_dtype)b->dtype)))
            return ctx->err.status;
        for (int d = 0; d < b->ndim; d++)
            if (!kiln_buf_printf(ctx, out, "%s%" PRId64, d ? ", " : "", b->shape[d]))
                return ctx->err.status;
        if (!kiln_buf_puts(ctx, out, "]"))
            return ctx->err.status;
    }
    if (!kiln_buf_puts(ctx, out, "):\n")
        || (f->ws_bytes
            && !kiln_buf_printf(ctx, out, "  workspace %" PRId64 " bytes\n", f->ws_bytes))
        || (f->prep_bytes
            && !kiln_buf_printf(ctx, out, "  prepared %" PRId64 " bytes\n", f->prep_bytes))
        || !put_stmt(f, out, f->body, 1))
        return kiln_ok(ctx) ? KILN_FAIL(ctx, KILN_ERR_INTERNAL, "print", "bad statement")
                            : ctx->err.status;
    return KILN_OK;
}
