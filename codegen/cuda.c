/* codegen/cuda.c -- a flat loop-nest function to CUDA C: one `extern "C" __global__` kernel
 * per root statement, launched in order, for NVRTC (codegen/nvrtc.c) to compile.
 *
 * Kernels. Every kernel takes the function's parameters (their element type, `__restrict__`:
 * arguments never overlap, as on the CPU), then `kiln_ws` (the device workspace) and
 * `kiln_prep` (the prepared area). A root statement's GPU_BLOCK loops give its grid, its
 * GPU_THREAD loops its block: the launch extent on an axis is the largest extent of the loops
 * bound to it, and a loop shorter than that runs under a guard. A root statement without GPU
 * loops runs on one thread (grid 1, block 1): correct, for any schedule, and slow.
 *
 * Threads. Code outside every thread loop of a kernel with more than one thread per block is
 * run by all of the block's threads. There, a store to memory the threads share (parameters,
 * workspace, shared buffers) is made by the threads whose index is 0 on every axis the store
 * is not inside a loop of, and `__syncthreads()` follows each statement that holds a thread
 * loop or such a store, so what one statement writes is visible to the next (and to the next
 * iteration of an enclosing serial loop). Conditions there cannot depend on thread indices,
 * so every thread reaches every barrier.
 *
 * Buffers. Planned temporaries (ws_offset) and HEAP temporaries allocated outside every GPU
 * loop live in the workspace (the latter after f->ws_bytes, each 64-byte aligned); prepared
 * buffers in the prepared area. STACK temporaries and HEAP ones allocated inside a thread loop
 * (or in a kernel of one thread) are per-thread arrays; SHARED ones `__shared__` arrays, which
 * must be allocated inside the block loops and outside the thread loops. A thread-private
 * buffer allocated outside the thread loops of a threaded kernel would not be shared by its
 * threads as the loop nest means: KILN_ERR_UNSUPPORTED, as is a HEAP temporary allocated
 * inside a block loop (one per block would be needed).
 *
 * Vector loops of one f32 store become float4 / float2 loads and stores where the accesses
 * are contiguous and provably aligned, else serial loops (the section "vector loops" below).
 *
 * Semantics follow ir/scalar.h as the LLVM backend does (codegen/README.md): i8/i32 + - *
 * wrap (computed unsigned); i64 ones are plain signed C arithmetic, which index arithmetic
 * never overflows (tensors hold fewer than 2^40 elements) and which the compiler can
 * strength-reduce, so i64 tensor data that overflows is undefined here; floordiv/floormod round
 * toward -inf and never trap, float -> int truncates and saturates (NaN -> 0), float min/max
 * propagate NaN, select is lazy, rsqrt is 1/sqrt, sigmoid 1/(1+e) or e/(1+e) with e = exp(-|x|).
 * Index arithmetic is 64-bit. f16/bf16 are not supported yet (nor are they by the LLVM backend). */
#include "codegen.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define CU_LOCAL_MAX  16384 /* bytes of one per-thread array */
#define CU_SHARED_MAX 49152 /* bytes of static shared memory per block */
#define CU_ALIGN      64
#define CU_VLOADS     16 /* distinct vector loads in one vector loop's body */

struct cu {
    kiln_ctx               *ctx;
    const struct kiln_func *f;
    struct kiln_buf        *out;
    bool                    failed;
    /* per buffer: where it lives */
    int64_t *ws_off;     /* byte offset in kiln_ws, or -1 */
    int64_t  ws_base;    /* the workspace's planned and top-level buffers end here */
    int64_t  kernel_end; /* and the current kernel's temporaries here */
    int64_t  ws_end;     /* the largest of those ends */
    uint32_t nkernel;    /* kernels emitted */
    /* per buffer: its parameter index + 1 (0: not a parameter), and the kernel (+1) that last
     * accessed it; the buffers the kernel being emitted accesses */
    uint32_t *param_of, *mark, *used, nused;
    /* the kernel being emitted */
    uint32_t grid[3], block[3];
    uint32_t shared_bytes;
    int      nthread_loops[3]; /* thread loops of each axis enclosing the current point */
    int      depth;            /* indentation */
    uint32_t nvector;          /* float4 / float2 accesses emitted in the kernel */
    /* a vector loop's body, emitted once per lane (vector_loop) */
    int      lane;             /* the lane being emitted, or -1 */
    uint32_t lane_var;         /* the loop variable (expression id) */
    uint32_t nvload;           /* loads read as vectors: kiln_vI, lane L is component L */
    uint32_t vload[CU_VLOADS]; /* their expression ids */
    /* inside a cross-thread reduction loop: stores to xr_buf at xr_index go to the thread's
     * accumulator kiln_accN (N = xr_id), and so do loads of that element */
    bool      xr_on;
    uint32_t  xr_buf, xr_id, xr_count;
    kiln_expr xr_index;
};

static enum kiln_status cu_fail(struct cu *c, enum kiln_status st, const char *fmt, ...)
    KILN_PRINTF(3, 4);

static enum kiln_status
cu_fail(struct cu *c, enum kiln_status st, const char *fmt, ...)
{
    char    msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!c->failed)
        KILN_FAIL(c->ctx, st, "cuda", "cuda: %s: %s", kiln_sym_str(c->ctx, c->f->name), msg);
    c->failed = true;
    return st;
}

#define OUT(...)                                           \
    do {                                                   \
        if (!kiln_buf_printf(c->ctx, c->out, __VA_ARGS__)) \
            c->failed = true;                              \
    } while (0)

static void
indent(struct cu *c)
{
    OUT("%*s", 4 * c->depth, "");
}

/* ---- names ---- */

/* A C identifier for symbol sym: its characters outside [A-Za-z0-9_] become '_', and the
 * symbol id keeps two names that sanitise alike apart. */
static void
ident(struct cu *c, const char *prefix, uint32_t sym)
{
    const char *s = kiln_sym_str(c->ctx, sym);
    OUT("%s", prefix);
    for (; s && *s; s++) {
        char ch = *s;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        OUT("%c", ok ? ch : '_');
    }
    OUT("_%" PRIu32, sym);
}

static void
buf_name(struct cu *c, uint32_t b)
{
    char p[24];
    snprintf(p, sizeof p, "b%" PRIu32 "_", b);
    ident(c, p, c->f->buf[b].name);
}

static int64_t
buf_bytes(const struct kiln_buffer *bf)
{
    return kiln_buffer_numel(bf) * (int64_t)kiln_dtype_size((enum kiln_dtype)bf->dtype);
}

static const char *
ctype(enum kiln_dtype dt) /* in registers */
{
    switch (dt) {
    case KILN_DTYPE_F32:
        return "float";
    case KILN_DTYPE_F64:
        return "double";
    case KILN_DTYPE_I8:
        return "signed char";
    case KILN_DTYPE_I32:
        return "int";
    case KILN_DTYPE_I64:
        return "long long";
    case KILN_DTYPE_BOOL:
        return "bool";
    case KILN_DTYPE_U8:
        return "unsigned char";
    case KILN_DTYPE_U16:
        return "unsigned short";
    case KILN_DTYPE_U32:
        return "unsigned int";
    case KILN_DTYPE_U64:
        return "unsigned long long";
    case KILN_DTYPE_I16:
        return "short";
    case KILN_DTYPE_F16:
    case KILN_DTYPE_BF16:
    case KILN_DTYPE_COUNT:
        break;
    }
    return NULL;
}

static const char *
mtype(enum kiln_dtype dt) /* in memory: bool is a byte */
{
    return dt == KILN_DTYPE_BOOL ? "unsigned char" : ctype(dt);
}

static bool
check_dtype(struct cu *c, enum kiln_dtype dt)
{
    if (ctype(dt))
        return true;
    cu_fail(c, KILN_ERR_UNSUPPORTED, "dtype %s is not supported by the CUDA backend yet",
            dt < KILN_DTYPE_COUNT ? kiln_dtype_name(dt) : "void");
    return false;
}

/* ---- expressions ---- */

static void emit_expr(struct cu *c, kiln_expr e);

static const char *
int_suffix(enum kiln_dtype dt) /* the helper functions' type suffix */
{
    return kiln_dtype_name(dt); /* i8 .. i64, u8 .. u64 */
}

static void
emit_float_const(struct cu *c, double v, enum kiln_dtype dt)
{
    bool f32 = dt == KILN_DTYPE_F32;
    if (isnan(v))
        OUT(f32 ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)");
    else if (isinf(v))
        OUT(f32 ? "__int_as_float(%s)" : "__longlong_as_double(%s)",
            v > 0 ? (f32 ? "0x7f800000" : "0x7ff0000000000000LL")
                  : (f32 ? "(int)0xff800000" : "(long long)0xfff0000000000000ULL"));
    else if (f32)
        OUT("%.9ef", v);
    else
        OUT("%.17e", v);
}

static void
emit_leaf(struct cu *c, kiln_expr e, const struct kiln_node *n)
{
    enum kiln_dtype dt = (enum kiln_dtype)n->dtype;
    if (n->op == KILN_OP_INT) {
        if (dt == KILN_DTYPE_BOOL)
            OUT(n->imm ? "true" : "false");
        else if (n->imm == INT64_MIN)
            OUT("(-9223372036854775807LL - 1)");
        else if (dt == KILN_DTYPE_I64)
            OUT("%" PRId64 "LL", n->imm);
        else
            OUT("((%s)%" PRId64 ")", ctype(dt), n->imm);
    } else if (n->op == KILN_OP_FLOAT) {
        emit_float_const(c, kiln_expr_float_value(c->ctx, e), dt);
    } else if (kiln_var_kind_of(n->imm) == KILN_VAR_NAMED) {
        if (c->lane > 0 && e.id == c->lane_var)
            OUT("(");
        ident(c, "v_", kiln_var_index(n->imm));
        if (c->lane > 0 && e.id == c->lane_var)
            OUT(" + %d)", c->lane);
    } else {
        cu_fail(c, KILN_ERR_INTERNAL, "an axis or reduction variable is left in the loop nest");
    }
}

static void
emit_load(struct cu *c, kiln_expr e, const struct kiln_node *n)
{
    uint32_t b = (uint32_t)n->imm;
    if (b >= c->f->nbuf || !n->kid[0]) {
        cu_fail(c, KILN_ERR_INTERNAL, "load of an unknown buffer");
        return;
    }
    if (c->xr_on && b == c->xr_buf) {
        if (n->kid[0] == c->xr_index.id)
            OUT("kiln_acc%" PRIu32, c->xr_id);
        else
            cu_fail(c, KILN_ERR_UNSUPPORTED,
                    "a cross-thread reduction reads its output at another element than the one "
                    "it accumulates");
        return;
    }
    for (uint32_t i = 0; c->lane >= 0 && i < c->nvload; i++)
        if (c->vload[i] == e.id) { /* a lane of a vector load */
            OUT("kiln_v%" PRIu32 ".%c", i, "xyzw"[c->lane]);
            return;
        }
    const struct kiln_node *l = kiln_node_get(c->ctx, (kiln_expr){n->kid[0]});
    bool                    isbool = c->f->buf[b].dtype == KILN_DTYPE_BOOL;
    OUT(isbool ? "(" : "");
    buf_name(c, b);
    OUT("[");
    emit_expr(c, (kiln_expr){l->kid[0]});
    OUT(isbool ? "] != 0)" : "]");
}

static void
emit_cast(struct cu *c, enum kiln_dtype to, kiln_expr a)
{
    enum kiln_dtype from = kiln_expr_dtype(c->ctx, a);
    if (!check_dtype(c, from))
        return;
    if (to == KILN_DTYPE_BOOL) { /* != 0; NaN is true */
        OUT("(");
        emit_expr(c, a);
        OUT(" != 0)");
    } else if (kiln_dtype_is_int(to) && kiln_dtype_is_float(from)) {
        OUT("kiln_f2%s((double)(", int_suffix(to));
        emit_expr(c, a);
        OUT("))");
    } else {
        OUT("((%s)(", ctype(to));
        emit_expr(c, a);
        OUT("))");
    }
}

static const char *
math_name(enum kiln_op op, bool f32)
{
    switch (op) {
    case KILN_OP_FLOOR:
        return f32 ? "floorf" : "floor";
    case KILN_OP_EXP:
        return f32 ? "expf" : "exp";
    case KILN_OP_LOG:
        return f32 ? "logf" : "log";
    case KILN_OP_SQRT:
        return f32 ? "sqrtf" : "sqrt";
    case KILN_OP_TANH:
        return f32 ? "tanhf" : "tanh";
    case KILN_OP_ERF:
        return f32 ? "erff" : "erf";
    case KILN_OP_SIN:
        return f32 ? "sinf" : "sin";
    case KILN_OP_COS:
        return f32 ? "cosf" : "cos";
    case KILN_OP_TAN:
        return f32 ? "tanf" : "tan";
    case KILN_OP_ASIN:
        return f32 ? "asinf" : "asin";
    case KILN_OP_ACOS:
        return f32 ? "acosf" : "acos";
    case KILN_OP_ATAN:
        return f32 ? "atanf" : "atan";
    case KILN_OP_SINH:
        return f32 ? "sinhf" : "sinh";
    case KILN_OP_COSH:
        return f32 ? "coshf" : "cosh";
    case KILN_OP_ASINH:
        return f32 ? "asinhf" : "asinh";
    case KILN_OP_ACOSH:
        return f32 ? "acoshf" : "acosh";
    case KILN_OP_ATANH:
        return f32 ? "atanhf" : "atanh";
    case KILN_OP_ABS:
        return f32 ? "fabsf" : "fabs";
    case KILN_OP_POW:
        return f32 ? "powf" : "pow";
    case KILN_OP_FMOD:
        return f32 ? "fmodf" : "fmod";
    default:
        return NULL;
    }
}

static void
emit_unary(struct cu *c, enum kiln_op op, enum kiln_dtype dt, kiln_expr a)
{
    bool        fl = kiln_dtype_is_float(dt), f32 = dt == KILN_DTYPE_F32;
    const char *one = f32 ? "1.0f" : "1.0";
    if (op == KILN_OP_NOT) {
        OUT("(!");
        emit_expr(c, a);
        OUT(")");
    } else if (op == KILN_OP_NEG) {
        if (fl) {
            OUT("(-");
            emit_expr(c, a);
            OUT(")");
        } else {
            OUT("((%s)(0ULL - (unsigned long long)(", ctype(dt));
            emit_expr(c, a);
            OUT(")))");
        }
    } else if (op == KILN_OP_ABS && !fl) {
        OUT("kiln_abs_%s(", int_suffix(dt));
        emit_expr(c, a);
        OUT(")");
    } else if (op == KILN_OP_RSQRT) {
        OUT("(%s / %s(", one, f32 ? "sqrtf" : "sqrt");
        emit_expr(c, a);
        OUT("))");
    } else if (op == KILN_OP_SIGMOID) {
        OUT("%s(", f32 ? "kiln_sigmoidf" : "kiln_sigmoid");
        emit_expr(c, a);
        OUT(")");
    } else if (fl && math_name(op, f32)) {
        OUT("%s(", math_name(op, f32));
        emit_expr(c, a);
        OUT(")");
    } else {
        cu_fail(c, KILN_ERR_UNSUPPORTED, "operator %s on %s", kiln_op_name[op],
                kiln_dtype_name(dt));
    }
}

static void
emit_binary(struct cu *c, enum kiln_op op, enum kiln_dtype dt, kiln_expr a, kiln_expr b)
{
    bool        fl = kiln_dtype_is_float(dt), f32 = dt == KILN_DTYPE_F32;
    const char *infix = NULL, *fn = NULL;
    switch (op) {
    case KILN_OP_ADD:
    case KILN_OP_SUB:
    case KILN_OP_MUL:
        if (!fl && dt != KILN_DTYPE_I64) { /* wrap: unsigned arithmetic, then the width */
            OUT("((%s)((unsigned long long)(", ctype(dt));
            emit_expr(c, a);
            OUT(") %s (unsigned long long)(", op == KILN_OP_ADD   ? "+"
                                              : op == KILN_OP_SUB ? "-"
                                                                  : "*");
            emit_expr(c, b);
            OUT(")))");
            return;
        }
        infix = op == KILN_OP_ADD ? "+" : op == KILN_OP_SUB ? "-" : "*";
        break;
    case KILN_OP_DIV:
        infix = "/";
        break;
    case KILN_OP_FLOORDIV:
    case KILN_OP_FLOORMOD:
        if (fl)
            break;
        OUT("kiln_%s_%s(", op == KILN_OP_FLOORDIV ? "floordiv" : "floormod", int_suffix(dt));
        emit_expr(c, a);
        OUT(", ");
        emit_expr(c, b);
        OUT(")");
        return;
    case KILN_OP_MIN:
    case KILN_OP_MAX:
        fn = op == KILN_OP_MIN ? (fl ? (f32 ? "kiln_fminf" : "kiln_fmin") : "kiln_min")
                               : (fl ? (f32 ? "kiln_fmaxf" : "kiln_fmax") : "kiln_max");
        break;
    case KILN_OP_POW:
    case KILN_OP_FMOD:
        fn = fl ? math_name(op, f32) : NULL;
        break;
    case KILN_OP_EQ:
        infix = "==";
        break;
    case KILN_OP_NE:
        infix = "!=";
        break;
    case KILN_OP_LT:
        infix = "<";
        break;
    case KILN_OP_LE:
        infix = "<=";
        break;
    case KILN_OP_AND:
        infix = "&&";
        break;
    case KILN_OP_OR:
        infix = "||";
        break;
    default:
        break;
    }
    if (fn) {
        OUT("%s(", fn);
        emit_expr(c, a);
        OUT(", ");
        emit_expr(c, b);
        OUT(")");
    } else if (infix && (fl || op != KILN_OP_DIV)) {
        OUT("(");
        emit_expr(c, a);
        OUT(" %s ", infix);
        emit_expr(c, b);
        OUT(")");
    } else {
        cu_fail(c, KILN_ERR_UNSUPPORTED, "operator %s on %s", kiln_op_name[op],
                kiln_dtype_name(dt));
    }
}

static void
emit_expr(struct cu *c, kiln_expr e)
{
    if (c->failed)
        return;
    if (c->out->len > (64u << 20)) {
        cu_fail(c, KILN_ERR_UNSUPPORTED, "the CUDA source exceeds 64 MiB");
        return;
    }
    struct kiln_node n = *kiln_node_get(c->ctx, e);
    enum kiln_dtype  dt = (enum kiln_dtype)n.dtype;
    if (n.op != KILN_OP_LIST && !check_dtype(c, dt))
        return;
    switch (kiln_op_kind((enum kiln_op)n.op)) {
    case KILN_OPK_LEAF:
        emit_leaf(c, e, &n);
        return;
    case KILN_OPK_LOAD:
        emit_load(c, e, &n);
        return;
    case KILN_OPK_SELECT:
        OUT("(");
        emit_expr(c, (kiln_expr){n.kid[0]});
        OUT(" ? ");
        emit_expr(c, (kiln_expr){n.kid[1]});
        OUT(" : ");
        emit_expr(c, (kiln_expr){n.kid[2]});
        OUT(")");
        return;
    case KILN_OPK_CAST:
        emit_cast(c, dt, (kiln_expr){n.kid[0]});
        return;
    case KILN_OPK_UNARY:
        emit_unary(c, (enum kiln_op)n.op, dt, (kiln_expr){n.kid[0]});
        return;
    case KILN_OPK_BINARY:
        /* comparisons and logic: the operands' dtype decides */
        emit_binary(c, (enum kiln_op)n.op, kiln_expr_dtype(c->ctx, (kiln_expr){n.kid[0]}),
                    (kiln_expr){n.kid[0]}, (kiln_expr){n.kid[1]});
        return;
    case KILN_OPK_NONE:
    case KILN_OPK_LIST:
        break;
    }
    cu_fail(c, KILN_ERR_INTERNAL, "unexpected expression node %s",
            n.op < KILN_OP_COUNT ? kiln_op_name[n.op] : "?");
}

/* ---- questions about a statement tree ---- */

struct ask {
    const struct cu    *c;
    enum kiln_loop_kind k;
    bool (*is)(const struct ask *q, const struct kiln_stmt *s);
};

static enum kiln_walk
ask_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    const struct ask *q = v->user;
    return q->is(q, s) ? KILN_WALK_STOP : KILN_WALK_GO;
}

/* Whether q->is holds for s or any statement in it: a statement visitor that stops at the
 * first. */
static bool
any(const struct ask *q, const struct kiln_stmt *s)
{
    struct kiln_stmt_visitor v = {.user = (void *)q, .pre = ask_pre};
    return kiln_stmt_visit(&v, s) == KILN_WALK_STOP;
}

static bool
shared_buffer(const struct cu *c, uint32_t b) /* memory every thread sees */
{
    uint8_t sc = c->f->buf[b].scope;
    return sc == KILN_SCOPE_GLOBAL || sc == KILN_SCOPE_SHARED || c->ws_off[b] >= 0
           || c->f->buf[b].prep_offset >= 0;
}

static bool
is_gpu_loop(const struct ask *q, const struct kiln_stmt *s) /* of kind q->k; SERIAL: any */
{
    uint8_t l = s->kind == KILN_STMT_FOR ? s->u.for_.loop : KILN_LOOP_SERIAL;
    return (l == KILN_LOOP_GPU_BLOCK || l == KILN_LOOP_GPU_THREAD)
           && (q->k == KILN_LOOP_SERIAL || l == q->k);
}

static bool
is_sync_point(const struct ask *q, const struct kiln_stmt *s) /* a thread loop, a shared store */
{
    return (s->kind == KILN_STMT_FOR && s->u.for_.loop == KILN_LOOP_GPU_THREAD)
           || (s->kind == KILN_STMT_STORE && shared_buffer(q->c, s->u.store.buf));
}

static bool
is_prepared_store(const struct ask *q, const struct kiln_stmt *s)
{
    return s->kind == KILN_STMT_STORE && q->c->f->buf[s->u.store.buf].prep_offset >= 0;
}

/* A store a call sees: to a parameter or to a planned buffer (one computed at root, live across
 * root statements); not to the kernel's own temporaries. */
static bool
is_call_store(const struct ask *q, const struct kiln_stmt *s)
{
    const struct kiln_buffer *bf =
        s->kind == KILN_STMT_STORE ? &q->c->f->buf[s->u.store.buf] : NULL;
    return bf && bf->prep_offset < 0 && (bf->scope == KILN_SCOPE_GLOBAL || bf->ws_offset >= 0);
}

static bool
has_gpu_loop(const struct cu *c, const struct kiln_stmt *s, enum kiln_loop_kind k)
{
    return any(&(struct ask){c, k, is_gpu_loop}, s);
}

/* ---- launch dimensions ---- */

static const char *const axis_name = "xyz";

struct dims_walk {
    struct cu *c;
    int       *nb, *nt; /* loops bound to each block / thread axis around the statement */
};

/* A statement visitor: each GPU loop widens the launch and counts as bound to its axis in
 * its body. */
static enum kiln_walk
dims_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct dims_walk *w = v->user;
    struct cu        *c = w->c;
    int              *nb = w->nb, *nt = w->nt;
    if (s->kind != KILN_STMT_FOR)
        return KILN_WALK_GO;
    uint8_t loop = s->u.for_.loop, ax = s->u.for_.axis;
    bool    gb = loop == KILN_LOOP_GPU_BLOCK, gt = loop == KILN_LOOP_GPU_THREAD;
    if (!gb && !gt)
        return KILN_WALK_GO;
    int64_t ext;
    if (ax > 2) {
        cu_fail(c, KILN_ERR_INVALID, "GPU loop axis %u", ax);
        return KILN_WALK_FAIL;
    }
    if (!kiln_expr_is_int(c->ctx, s->u.for_.extent, &ext) || ext < 1) {
        cu_fail(c, KILN_ERR_UNSUPPORTED, "loop %s bound to %s.%c has no constant extent",
                kiln_sym_str(c->ctx, kiln_var_index(kiln_node_get(c->ctx, s->u.for_.var)->imm)),
                gb ? "blockIdx" : "threadIdx", axis_name[ax]);
        return KILN_WALK_FAIL;
    }
    int *cnt = gb ? nb : nt;
    if (cnt[ax]) {
        cu_fail(c, KILN_ERR_INVALID, "two nested loops are bound to %s.%c",
                gb ? "blockIdx" : "threadIdx", axis_name[ax]);
        return KILN_WALK_FAIL;
    }
    uint32_t *dim = gb ? c->grid : c->block;
    int64_t   lim = gb ? (ax ? 65535 : 2147483647) : (ax == 2 ? 64 : 1024);
    if (ext > lim) {
        cu_fail(c, KILN_ERR_UNSUPPORTED, "%s.%c extent %" PRId64 " exceeds %" PRId64,
                gb ? "blockIdx" : "threadIdx", axis_name[ax], ext, lim);
        return KILN_WALK_FAIL;
    }
    if ((uint32_t)ext > dim[ax])
        dim[ax] = (uint32_t)ext;
    cnt[ax]++;
    return KILN_WALK_GO;
}

static enum kiln_walk
dims_post(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct dims_walk *w = v->user;
    if (s->kind == KILN_STMT_FOR && s->u.for_.loop == KILN_LOOP_GPU_BLOCK)
        w->nb[s->u.for_.axis]--;
    if (s->kind == KILN_STMT_FOR && s->u.for_.loop == KILN_LOOP_GPU_THREAD)
        w->nt[s->u.for_.axis]--;
    return KILN_WALK_GO;
}

/* Collects the launch extents of the GPU loops in s into c->grid / c->block; nested loops
 * bound to one axis are an error. */
static void
launch_dims(struct cu *c, const struct kiln_stmt *s, int nb[3], int nt[3])
{
    struct dims_walk         w = {c, nb, nt};
    struct kiln_stmt_visitor v = {.user = &w, .pre = dims_pre, .post = dims_post};
    if (!c->failed)
        kiln_stmt_visit(&v, s);
}

static bool
threaded(const struct cu *c) /* the current kernel has more than one thread per block */
{
    return (uint64_t)c->block[0] * c->block[1] * c->block[2] > 1;
}

static bool
in_threads(const struct cu *c) /* inside a thread loop on some axis */
{
    return c->nthread_loops[0] || c->nthread_loops[1] || c->nthread_loops[2];
}

/* ---- statements ---- */

static void emit_stmt(struct cu *c, const struct kiln_stmt *s);

static void
emit_var(struct cu *c, kiln_expr var)
{
    const struct kiln_node *n = kiln_node_get(c->ctx, var);
    ident(c, "v_", kiln_var_index(n->imm));
}

/* Before a store to buffer b: `if (...) ` when one thread stores on each axis the store is
 * not inside a thread loop of (memory the threads share, outside their loops). */
static void
store_guard(struct cu *c, uint32_t b)
{
    bool guard = false;
    if (shared_buffer(c, b) && threaded(c))
        for (int a = 0; a < 3; a++)
            guard |= c->block[a] > 1 && !c->nthread_loops[a];
    if (!guard)
        return;
    OUT("if (");
    const char *sep = "";
    for (int a = 0; a < 3; a++)
        if (c->block[a] > 1 && !c->nthread_loops[a]) {
            OUT("%sthreadIdx.%c == 0", sep, axis_name[a]);
            sep = " && ";
        }
    OUT(") ");
}

/* ---- vector loops: float4 / float2 loads and stores ----
 * A vector loop whose body is one f32 store is emitted in steps of W = 4 lanes (extent a
 * multiple of 4) or W = 2 (extent 2). The store, and each f32 load in the stored value, whose
 * flat index is `base + v` (v the loop variable, coefficient exactly 1) and provably a
 * multiple of W at the step's first lane, in a buffer aligned to 4 W bytes, is one float4 /
 * float2 access; the value is computed once per lane with v replaced by v + lane (loads not
 * provably aligned and contiguous stay scalar, per lane). What is proven: the pow2 divisor of
 * the index (constants, sums, products; v counts as a multiple of min(divisor of the loop's
 * min, W)) times 4 bytes, and the buffer's alignment: parameters their `align`
 * (KILN_CUDA_ARG_ALIGN where the driver compiles), workspace and prepared buffers 64 (the
 * device allocation is 256-aligned and their offsets multiples of 64), shared and per-thread
 * arrays 16 (declared `__align__(16)`). Everything else -- another body, another dtype, a load
 * of the stored buffer at another index (a lane could read what another wrote) -- is the
 * serial loop. Reading all lanes before storing them is the loop's meaning because the
 * scheduler vectorises only loops whose iterations are independent (docs/schedule.md). */

/* The largest power of two, up to 64, known to divide index expression e; var counts as a
 * multiple of vdiv. */
static int64_t
pow2_div(const struct cu *c, uint32_t e, uint32_t var, int64_t vdiv)
{
    if (e == var)
        return vdiv;
    const struct kiln_node *n = kiln_node_get(c->ctx, (kiln_expr){e});
    int64_t                 p = 1, a, b;
    switch ((enum kiln_op)n->op) {
    case KILN_OP_INT:
        while (p < 64 && n->imm % (2 * p) == 0)
            p *= 2;
        return p;
    case KILN_OP_ADD:
    case KILN_OP_SUB:
        if (n->dtype != KILN_DTYPE_I64)
            return 1;
        a = pow2_div(c, n->kid[0], var, vdiv);
        b = pow2_div(c, n->kid[1], var, vdiv);
        return a < b ? a : b;
    case KILN_OP_MUL:
        if (n->dtype != KILN_DTYPE_I64)
            return 1;
        p = pow2_div(c, n->kid[0], var, vdiv) * pow2_div(c, n->kid[1], var, vdiv);
        return p < 64 ? p : 64;
    default:
        return 1;
    }
}

static int64_t
buf_align(const struct cu *c, uint32_t b) /* bytes buffer b's data is known aligned to */
{
    const struct kiln_buffer *bf = &c->f->buf[b];
    if (c->ws_off[b] >= 0 || bf->prep_offset >= 0)
        return CU_ALIGN;
    return bf->scope == KILN_SCOPE_GLOBAL ? (int64_t)bf->align : 16;
}

/* Whether an access of buffer b at flat index idx can be one W-wide vector access in the
 * vector loop of variable var whose first lane is a multiple of vdiv. */
static bool
vec_access(const struct cu *c, uint32_t b, uint32_t idx, uint32_t var, int64_t vdiv, int w)
{
    int64_t k;
    return c->f->buf[b].dtype == KILN_DTYPE_F32
           && kiln_affine_stride(c->ctx, (kiln_expr){idx}, (kiln_expr){var}, 1 << 20, &k) && k == 1
           && pow2_div(c, idx, var, vdiv) % w == 0 && buf_align(c, b) % (4 * w) == 0;
}

static uint32_t
load_index(const struct cu *c, const struct kiln_node *n) /* a LOAD's flat index */
{
    return n->kid[0] ? kiln_node_get(c->ctx, (kiln_expr){n->kid[0]})->kid[0] : 0;
}

/* Collects the vector loads of value e into c->vload; false when a load of the stored buffer
 * sb reads another index than the store's (sidx): then the loop stays serial. */
static bool
vec_loads(struct cu *c, uint32_t e, uint32_t sb, uint32_t sidx, uint32_t var, int64_t vdiv, int w)
{
    if (!e)
        return true;
    const struct kiln_node *n = kiln_node_get(c->ctx, (kiln_expr){e});
    enum kiln_op_kind       kind = kiln_op_kind((enum kiln_op)n->op);
    if (kind == KILN_OPK_LEAF)
        return true;
    if (kind == KILN_OPK_LOAD) {
        uint32_t b = (uint32_t)n->imm, idx = load_index(c, n);
        if (b >= c->f->nbuf || !idx || (b == sb && idx != sidx))
            return false;
        bool seen = false;
        for (uint32_t i = 0; i < c->nvload; i++)
            seen |= c->vload[i] == e;
        if (!seen && c->nvload < CU_VLOADS
            && kiln_expr_uses(c->ctx, (kiln_expr){idx}, (kiln_expr){var})
            && vec_access(c, b, idx, var, vdiv, w))
            c->vload[c->nvload++] = e;
        return vec_loads(c, idx, sb, sidx, var, vdiv, w);
    }
    for (int k = 0; k < 3; k++)
        if (!vec_loads(c, n->kid[k], sb, sidx, var, vdiv, w))
            return false;
    return true;
}

/* The vector width of loop s (4 or 2) with its loads collected, or 0: a serial loop. */
static int
vec_plan(struct cu *c, const struct kiln_stmt *s)
{
    const struct kiln_stmt *st = s->u.for_.body;
    int64_t                 ext;
    c->nvload = 0;
    if (!kiln_expr_is_int(c->ctx, s->u.for_.extent, &ext) || !st || st->kind != KILN_STMT_STORE)
        return 0;
    int w = ext == 2 ? 2 : ext >= 4 && ext % 4 == 0 ? 4 : 0;
    if (!w || st->u.store.buf >= c->f->nbuf)
        return 0;
    uint32_t var = s->u.for_.var.id, sb = st->u.store.buf;
    uint32_t sidx = kiln_node_get(c->ctx, st->u.store.index)->kid[0];
    int64_t  vdiv = pow2_div(c, s->u.for_.min.id, 0, 1);
    vdiv = vdiv < w ? vdiv : w;
    if (!sidx || !vec_access(c, sb, sidx, var, vdiv, w)
        || !vec_loads(c, st->u.store.value.id, sb, sidx, var, vdiv, w)) {
        c->nvload = 0;
        return 0;
    }
    return w;
}

/* `for (long long v = MIN, v_end = v + (EXTENT); v < v_end; v += step) {` for loop s. */
static void
for_head(struct cu *c, const struct kiln_stmt *s, int step)
{
    indent(c);
    OUT("for (long long ");
    emit_var(c, s->u.for_.var);
    OUT(" = ");
    emit_expr(c, s->u.for_.min);
    OUT(", ");
    emit_var(c, s->u.for_.var);
    OUT("_end = ");
    emit_var(c, s->u.for_.var);
    OUT(" + (");
    emit_expr(c, s->u.for_.extent);
    OUT("); ");
    emit_var(c, s->u.for_.var);
    OUT(" < ");
    emit_var(c, s->u.for_.var);
    OUT("_end; ");
    if (step == 1) {
        OUT("++");
        emit_var(c, s->u.for_.var);
    } else {
        emit_var(c, s->u.for_.var);
        OUT(" += %d", step);
    }
    OUT(") {\n");
}

/* Loop s in steps of w lanes (vec_plan): the vector loads, then one vector store of the value
 * computed per lane. */
static void
vector_loop(struct cu *c, const struct kiln_stmt *s, int w)
{
    const struct kiln_stmt *st = s->u.for_.body;
    const char             *vt = w == 4 ? "float4" : "float2";
    indent(c);
    OUT("#pragma unroll\n");
    for_head(c, s, w);
    c->depth++;
    for (uint32_t i = 0; i < c->nvload; i++) {
        const struct kiln_node *n = kiln_node_get(c->ctx, (kiln_expr){c->vload[i]});
        indent(c);
        OUT("const %s kiln_v%" PRIu32 " = *(const %s *)&", vt, i, vt);
        buf_name(c, (uint32_t)n->imm);
        OUT("[");
        emit_expr(c, (kiln_expr){load_index(c, n)});
        OUT("];\n");
    }
    indent(c);
    store_guard(c, st->u.store.buf);
    OUT("*(%s *)&", vt);
    buf_name(c, st->u.store.buf);
    OUT("[");
    emit_expr(c, (kiln_expr){kiln_node_get(c->ctx, st->u.store.index)->kid[0]});
    OUT("] = make_%s(", vt);
    c->lane_var = s->u.for_.var.id;
    for (int l = 0; l < w; l++) {
        c->lane = l;
        OUT(l ? ", " : "");
        emit_expr(c, st->u.store.value);
    }
    c->lane = -1;
    OUT(");\n");
    c->nvector += c->nvload + 1;
    c->nvload = 0;
    c->depth--;
    indent(c);
    OUT("}\n");
}

/* ---- cross-thread reductions ---- */

struct xr_scan {
    uint32_t     buf;
    kiln_expr    index;
    enum kiln_op op;
    bool         any;
};

struct xr_walk {
    struct cu      *c;
    struct xr_scan *X;
    const char     *loop;
};

static enum kiln_walk
xr_alloc(struct kiln_stmt_visitor *vis, const struct kiln_stmt *s)
{
    struct xr_walk *w = vis->user;
    (void)s;
    cu_fail(w->c, KILN_ERR_UNSUPPORTED,
            "cross-thread reduction loop %s allocates a buffer: nothing can be computed "
            "inside it",
            w->loop);
    return KILN_WALK_FAIL;
}

static enum kiln_walk
xr_store(struct kiln_stmt_visitor *vis, const struct kiln_stmt *s)
{
    struct xr_walk         *w = vis->user;
    struct cu              *c = w->c;
    struct xr_scan         *X = w->X;
    const char             *loop = w->loop;
    const struct kiln_node *v = kiln_node_get(c->ctx, s->u.store.value);
    enum kiln_op            op = (enum kiln_op)v->op;
    bool                    ok = op == KILN_OP_ADD || op == KILN_OP_MAX || op == KILN_OP_MIN;
    bool                    found = false;
    for (int k = 0; ok && k < 2; k++) {
        const struct kiln_node *a = kiln_node_get(c->ctx, (kiln_expr){v->kid[k]});
        found |= a->op == KILN_OP_LOAD && (uint32_t)a->imm == s->u.store.buf
                 && a->kid[0] == s->u.store.index.id;
    }
    if (!ok || !found
        || (X->any
            && (X->buf != s->u.store.buf || X->index.id != s->u.store.index.id || X->op != op))) {
        cu_fail(c, KILN_ERR_UNSUPPORTED,
                "cross-thread reduction loop %s: every store in it must accumulate into one "
                "element with one of + max min (B[i] = B[i] op v)",
                loop);
        return KILN_WALK_FAIL;
    }
    *X = (struct xr_scan){.buf = s->u.store.buf, .index = s->u.store.index, .op = op, .any = true};
    return KILN_WALK_GO;
}

/* Checks that every store in s is `B[I] = op(B[I], v)` for one buffer B, element I and op
 * (+, max or min), and finds them: a statement visitor that fails at an allocation or at a
 * store of any other form. */
static bool
xr_scan(struct cu *c, const struct kiln_stmt *s, struct xr_scan *X, const char *loop)
{
    struct xr_walk           w = {c, X, loop};
    struct kiln_stmt_visitor v = {.user = &w, .store = xr_store, .alloc = xr_alloc};
    return kiln_stmt_visit(&v, s) == KILN_WALK_GO;
}

/* "op(a, b)" in the semantics of emit_binary, for C operands a and b of dtype dt. */
static void
emit_combine(struct cu *c, enum kiln_op op, enum kiln_dtype dt, const char *a, const char *b)
{
    bool fl = kiln_dtype_is_float(dt), f32 = dt == KILN_DTYPE_F32;
    if (op == KILN_OP_ADD && (fl || dt == KILN_DTYPE_I64))
        OUT("(%s + %s)", a, b);
    else if (op == KILN_OP_ADD)
        OUT("((%s)((unsigned long long)(%s) + (unsigned long long)(%s)))", ctype(dt), a, b);
    else
        OUT("%s(%s, %s)",
            op == KILN_OP_MIN ? (fl ? (f32 ? "kiln_fminf" : "kiln_fmin") : "kiln_min")
                              : (fl ? (f32 ? "kiln_fmaxf" : "kiln_fmax") : "kiln_max"),
            a, b);
}

/* A cross-thread reduction loop (thread_reduce, bound to threadIdx.x): each thread of the
 * block accumulates its iterations' values in a register, starting from the identity; the
 * block then combines the registers in a shared-memory tree (log2 steps, a barrier after
 * each) and thread 0 combines the total into the element, once. Every thread reaches every
 * barrier: the loop sits outside thread loops, threads past its extent contribute the
 * identity. */
static void
emit_thread_reduce(struct cu *c, const struct kiln_stmt *s)
{
    const char *loop =
        kiln_sym_str(c->ctx, kiln_var_index(kiln_node_get(c->ctx, s->u.for_.var)->imm));
    struct xr_scan X = {0};
    int64_t        ext = 0;
    if (in_threads(c) || c->xr_on) {
        cu_fail(c, KILN_ERR_UNSUPPORTED, "cross-thread reduction loop %s is inside a thread loop",
                loop);
        return;
    }
    if (c->block[1] > 1 || c->block[2] > 1) {
        cu_fail(c, KILN_ERR_UNSUPPORTED,
                "cross-thread reduction loop %s needs a block of threads along x only, not "
                "%u x %u x %u",
                loop, c->block[0], c->block[1], c->block[2]);
        return;
    }
    if (!xr_scan(c, s->u.for_.body, &X, loop))
        return;
    if (!X.any) {
        cu_fail(c, KILN_ERR_UNSUPPORTED, "cross-thread reduction loop %s stores nothing", loop);
        return;
    }
    enum kiln_dtype dt = (enum kiln_dtype)c->f->buf[X.buf].dtype;
    if (!check_dtype(c, dt) || dt == KILN_DTYPE_BOOL) {
        if (!c->failed)
            cu_fail(c, KILN_ERR_UNSUPPORTED, "cross-thread reduction of bool");
        return;
    }
    uint32_t nt = c->block[0], id = ++c->xr_count, p2 = 1;
    while (p2 < nt)
        p2 <<= 1;
    int64_t bytes = (int64_t)nt * (int64_t)kiln_dtype_size(dt);
    if (c->shared_bytes + bytes > CU_SHARED_MAX) {
        cu_fail(c, KILN_ERR_UNSUPPORTED, "shared buffers of %" PRId64 " bytes exceed %d",
                c->shared_bytes + bytes, CU_SHARED_MAX);
        return;
    }
    c->shared_bytes += (uint32_t)bytes;
    kiln_expr identity = kiln_const(c->ctx,
                                    X.op == KILN_OP_MAX   ? -(double)INFINITY
                                    : X.op == KILN_OP_MIN ? (double)INFINITY
                                                          : 0,
                                    dt);
    kiln_expr_is_int(c->ctx, s->u.for_.extent, &ext);
    char acc[32], red[32], lhs[64], rhs[64];
    snprintf(acc, sizeof acc, "kiln_acc%" PRIu32, id);
    snprintf(red, sizeof red, "kiln_red%" PRIu32, id);
    indent(c);
    OUT("{\n");
    c->depth++;
    indent(c);
    OUT("%s %s = ", ctype(dt), acc);
    emit_expr(c, identity);
    OUT(";\n");
    indent(c);
    OUT("{\n");
    c->depth++;
    indent(c);
    OUT("const long long ");
    emit_var(c, s->u.for_.var);
    OUT(" = (");
    emit_expr(c, s->u.for_.min);
    OUT(") + (long long)threadIdx.x;\n");
    indent(c);
    OUT("if (threadIdx.x < %" PRId64 "u) {\n", ext);
    c->depth++;
    c->nthread_loops[0]++;
    c->xr_on = true;
    c->xr_buf = X.buf;
    c->xr_index = X.index;
    c->xr_id = id;
    emit_stmt(c, s->u.for_.body);
    c->xr_on = false;
    c->nthread_loops[0]--;
    c->depth--;
    indent(c);
    OUT("}\n");
    c->depth--;
    indent(c);
    OUT("}\n");
    /* the block's combine */
    indent(c);
    OUT("__shared__ %s %s[%" PRIu32 "];\n", ctype(dt), red, nt);
    indent(c);
    OUT("%s[threadIdx.x] = %s;\n", red, acc);
    indent(c);
    OUT("__syncthreads();\n");
    indent(c);
    OUT("for (unsigned kiln_s = %" PRIu32 "u; kiln_s > 0; kiln_s >>= 1) {\n", p2 / 2);
    c->depth++;
    indent(c);
    OUT("if (threadIdx.x < kiln_s && threadIdx.x + kiln_s < %" PRIu32 "u)\n", nt);
    indent(c);
    OUT("    %s[threadIdx.x] = ", red);
    snprintf(lhs, sizeof lhs, "%s[threadIdx.x]", red);
    snprintf(rhs, sizeof rhs, "%s[threadIdx.x + kiln_s]", red);
    emit_combine(c, X.op, dt, lhs, rhs);
    OUT(";\n");
    indent(c);
    OUT("__syncthreads();\n");
    c->depth--;
    indent(c);
    OUT("}\n");
    /* one thread combines the total into the element (it holds the initial value) */
    const struct kiln_node *l = kiln_node_get(c->ctx, X.index);
    indent(c);
    OUT("if (threadIdx.x == 0) ");
    buf_name(c, X.buf);
    OUT("[");
    emit_expr(c, (kiln_expr){l->kid[0]});
    OUT("] = ");
    char elem[48];
    snprintf(elem, sizeof elem, "%s[0]", red);
    {
        /* op(B[I], red[0]): B[I] printed through a scratch buffer */
        struct kiln_buf  tmp = {0};
        struct kiln_buf *keep = c->out;
        c->out = &tmp;
        buf_name(c, X.buf);
        OUT("[");
        emit_expr(c, (kiln_expr){l->kid[0]});
        OUT("]");
        c->out = keep;
        emit_combine(c, X.op, dt, tmp.data ? tmp.data : "", elem);
    }
    OUT(";\n");
    c->depth--;
    indent(c);
    OUT("}\n");
}

static void
emit_for(struct cu *c, const struct kiln_stmt *s)
{
    uint8_t loop = s->u.for_.loop, ax = s->u.for_.axis;
    if (s->u.for_.thread_reduce) {
        emit_thread_reduce(c, s);
        return;
    }
    if (loop == KILN_LOOP_GPU_BLOCK || loop == KILN_LOOP_GPU_THREAD) {
        bool     gb = loop == KILN_LOOP_GPU_BLOCK;
        int64_t  ext = 0;
        uint32_t dim = gb ? c->grid[ax] : c->block[ax];
        kiln_expr_is_int(c->ctx, s->u.for_.extent, &ext);
        indent(c);
        OUT("{\n");
        c->depth++;
        indent(c);
        OUT("const long long ");
        emit_var(c, s->u.for_.var);
        OUT(" = (");
        emit_expr(c, s->u.for_.min);
        OUT(") + (long long)%s.%c;\n", gb ? "blockIdx" : "threadIdx", axis_name[ax]);
        bool guard = ext < (int64_t)dim;
        if (guard) {
            indent(c);
            OUT("if (%s.%c < %" PRId64 "u) {\n", gb ? "blockIdx" : "threadIdx", axis_name[ax], ext);
            c->depth++;
        }
        if (!gb)
            c->nthread_loops[ax]++;
        emit_stmt(c, s->u.for_.body);
        if (!gb)
            c->nthread_loops[ax]--;
        if (guard) {
            c->depth--;
            indent(c);
            OUT("}\n");
        }
        c->depth--;
        indent(c);
        OUT("}\n");
        return;
    }
    if (loop == KILN_LOOP_VECTOR && c->lane < 0 && !c->xr_on) {
        int w = vec_plan(c, s);
        if (w) {
            vector_loop(c, s, w);
            return;
        }
    }
    if (loop == KILN_LOOP_UNROLL || loop == KILN_LOOP_VECTOR) {
        indent(c);
        OUT("#pragma unroll\n");
    }
    /* serial, parallel (a CPU annotation: its iterations are independent, so serial is
     * correct), vector and unrolled loops */
    for_head(c, s, 1);
    c->depth++;
    emit_stmt(c, s->u.for_.body);
    c->depth--;
    indent(c);
    OUT("}\n");
}

static void
emit_store(struct cu *c, const struct kiln_stmt *s)
{
    uint32_t b = s->u.store.buf;
    if (b >= c->f->nbuf) {
        cu_fail(c, KILN_ERR_INTERNAL, "store to an unknown buffer");
        return;
    }
    const struct kiln_buffer *bf = &c->f->buf[b];
    if (c->xr_on) { /* checked by xr_scan: the accumulated element */
        indent(c);
        OUT("kiln_acc%" PRIu32 " = ", c->xr_id);
        emit_expr(c, s->u.store.value);
        OUT(";\n");
        return;
    }
    indent(c);
    store_guard(c, b);
    const struct kiln_node *l = kiln_node_get(c->ctx, s->u.store.index);
    buf_name(c, b);
    OUT("[");
    emit_expr(c, (kiln_expr){l->kid[0]});
    OUT("] = ");
    if (bf->dtype == KILN_DTYPE_BOOL) {
        OUT("(unsigned char)(");
        emit_expr(c, s->u.store.value);
        OUT(")");
    } else {
        emit_expr(c, s->u.store.value);
    }
    OUT(";\n");
}

/* The declaration of a temporary at its ALLOC statement: a `__shared__` array, or a
 * per-thread one; buffers placed in the workspace or the prepared area declare nothing. */
static void
emit_alloc(struct cu *c, const struct kiln_stmt *s)
{
    uint32_t                  b = s->u.alloc.buf;
    const struct kiln_buffer *bf = &c->f->buf[b];
    const char               *nm = kiln_sym_str(c->ctx, bf->name);
    if (c->ws_off[b] >= 0 || bf->prep_offset >= 0) {
        emit_stmt(c, s->u.alloc.body);
        return;
    }
    if (!check_dtype(c, (enum kiln_dtype)bf->dtype))
        return;
    int64_t bytes = buf_bytes(bf);
    if (bf->scope == KILN_SCOPE_SHARED) {
        if (in_threads(c)) {
            cu_fail(c, KILN_ERR_INVALID, "shared buffer %s is allocated inside a thread loop", nm);
            return;
        }
        if (has_gpu_loop(c, s->u.alloc.body, KILN_LOOP_GPU_BLOCK)) {
            cu_fail(c, KILN_ERR_UNSUPPORTED,
                    "shared buffer %s is allocated outside a block loop: each block has its own",
                    nm);
            return;
        }
        if (c->shared_bytes + bytes > CU_SHARED_MAX) {
            cu_fail(c, KILN_ERR_UNSUPPORTED, "shared buffers of %" PRId64 " bytes exceed %d",
                    c->shared_bytes + bytes, CU_SHARED_MAX);
            return;
        }
        c->shared_bytes += (uint32_t)bytes;
    } else if (has_gpu_loop(c, s->u.alloc.body, KILN_LOOP_SERIAL)) {
        cu_fail(c, KILN_ERR_UNSUPPORTED,
                "%s buffer %s is allocated outside GPU loops that use it: each thread would have "
                "its own; only shared buffers are shared by threads",
                bf->scope == KILN_SCOPE_HEAP ? "heap" : "stack", nm);
        return;
    } else if (bytes > CU_LOCAL_MAX) {
        cu_fail(c, KILN_ERR_UNSUPPORTED, "per-thread buffer %s of %" PRId64 " bytes exceeds %d", nm,
                bytes, CU_LOCAL_MAX);
        return;
    }
    indent(c);
    OUT("{\n");
    c->depth++;
    indent(c);
    OUT("%s__align__(16) %s ", bf->scope == KILN_SCOPE_SHARED ? "__shared__ " : "",
        mtype((enum kiln_dtype)bf->dtype));
    buf_name(c, b);
    OUT("[%" PRId64 "];\n", kiln_buffer_numel(bf));
    emit_stmt(c, s->u.alloc.body);
    c->depth--;
    indent(c);
    OUT("}\n");
}

/* Not a statement visitor (ir/visit.c): every kind emits its own code and decides where its
 * children go, so there is no default recursion to inherit. */
static void
emit_stmt(struct cu *c, const struct kiln_stmt *s)
{
    if (c->failed)
        return;
    if (!s) {
        cu_fail(c, KILN_ERR_INVALID, "missing statement");
        return;
    }
    switch ((enum kiln_stmt_kind)s->kind) {
    case KILN_STMT_FOR:
        emit_for(c, s);
        break;
    case KILN_STMT_STORE:
        emit_store(c, s);
        break;
    case KILN_STMT_SEQ:
        for (uint32_t i = 0; i < s->u.seq.n && !c->failed; i++)
            emit_stmt(c, s->u.seq.item[i]);
        return; /* each item synchronised itself */
    case KILN_STMT_IF:
        indent(c);
        OUT("if (");
        emit_expr(c, s->u.if_.cond);
        OUT(") {\n");
        c->depth++;
        emit_stmt(c, s->u.if_.then);
        c->depth--;
        if (s->u.if_.els) {
            indent(c);
            OUT("} else {\n");
            c->depth++;
            emit_stmt(c, s->u.if_.els);
            c->depth--;
        }
        indent(c);
        OUT("}\n");
        return; /* its branches synchronised themselves */
    case KILN_STMT_LET: {
        enum kiln_dtype dt = kiln_expr_dtype(c->ctx, s->u.let.value);
        if (!check_dtype(c, dt))
            return;
        indent(c);
        OUT("{\n");
        c->depth++;
        indent(c);
        OUT("const %s ", ctype(dt));
        emit_var(c, s->u.let.var);
        OUT(" = ");
        emit_expr(c, s->u.let.value);
        OUT(";\n");
        emit_stmt(c, s->u.let.body);
        c->depth--;
        indent(c);
        OUT("}\n");
        return;
    }
    case KILN_STMT_ALLOC:
        emit_alloc(c, s);
        return;
    }
    /* a thread loop, or a store the other threads may read, outside every thread loop */
    if (threaded(c) && !in_threads(c)
        && any(&(struct ask){c, KILN_LOOP_SERIAL, is_sync_point}, s)) {
        indent(c);
        OUT("__syncthreads();\n");
    }
}

/* ---- the module ---- */

/* Every parameter aligned to KILN_CUDA_ARG_ALIGN bytes (the cuda target's ABI promise). */
void
kiln_cg_cuda_align_params(struct kiln_func *f)
{
    for (uint32_t i = 0; i < f->nparam; i++)
        if (f->buf[f->param[i]].align < KILN_CUDA_ARG_ALIGN)
            f->buf[f->param[i]].align = KILN_CUDA_ARG_ALIGN;
}

static const char prelude[] =
    "/* generated by kiln: CUDA C for NVRTC */\n"
    "#define KILN_DEV static __device__ __forceinline__\n"
    "KILN_DEV float kiln_fminf(float a, float b) { return a != a || b != b ? "
    "__int_as_float(0x7fc00000) : fminf(a, b); }\n"
    "KILN_DEV float kiln_fmaxf(float a, float b) { return a != a || b != b ? "
    "__int_as_float(0x7fc00000) : fmaxf(a, b); }\n"
    "KILN_DEV double kiln_fmin(double a, double b) { return a != a || b != b ? "
    "__longlong_as_double(0x7ff8000000000000LL) : fmin(a, b); }\n"
    "KILN_DEV double kiln_fmax(double a, double b) { return a != a || b != b ? "
    "__longlong_as_double(0x7ff8000000000000LL) : fmax(a, b); }\n"
    "KILN_DEV float kiln_sigmoidf(float x) { float e = expf(-fabsf(x)), s = 1.0f / (1.0f + e); "
    "return x >= 0.0f ? s : e * s; }\n"
    "KILN_DEV double kiln_sigmoid(double x) { double e = exp(-fabs(x)), s = 1.0 / (1.0 + e); "
    "return x >= 0.0 ? s : e * s; }\n"
    "template <typename T> KILN_DEV T kiln_min(T a, T b) { return a < b ? a : b; }\n"
    "template <typename T> KILN_DEV T kiln_max(T a, T b) { return a < b ? b : a; }\n"
    "#define KILN_INT(S, T, LO, HI) \\\n"
    "KILN_DEV T kiln_floordiv_##S(T a, T b) { \\\n"
    "    if (b == 0) return 0; \\\n"
    "    if (b == -1) return (T)(0ULL - (unsigned long long)a); \\\n"
    "    T q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q; } \\\n"
    "KILN_DEV T kiln_floormod_##S(T a, T b) { \\\n"
    "    if (b == 0 || b == -1) return 0; \\\n"
    "    T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r; } \\\n"
    "KILN_DEV T kiln_abs_##S(T a) { return a < 0 ? (T)(0ULL - (unsigned long long)a) : a; } \\\n"
    "KILN_DEV T kiln_f2##S(double v) { \\\n"
    "    if (v != v) return 0; if (v <= (double)(LO)) return (T)(LO); \\\n"
    "    if (v >= (double)(HI)) return (T)(HI); return (T)v; }\n"
    "KILN_INT(i8, signed char, -128, 127)\n"
    "KILN_INT(i32, int, -2147483647 - 1, 2147483647)\n"
    "KILN_INT(i64, long long, -9223372036854775807LL - 1, 9223372036854775807LL)\n"
    "KILN_INT(i16, short, -32768, 32767)\n"
    "#define KILN_UINT(S, T, HI) \\\n"
    "KILN_DEV T kiln_floordiv_##S(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); } \\\n"
    "KILN_DEV T kiln_floormod_##S(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); } \\\n"
    "KILN_DEV T kiln_abs_##S(T a) { return a; } \\\n"
    "KILN_DEV T kiln_f2##S(double v) { \\\n"
    "    if (v != v || v <= 0) return 0; \\\n"
    "    if (v >= (double)(HI)) return (T)(HI); return (T)v; }\n"
    "KILN_UINT(u8, unsigned char, 255)\n"
    "KILN_UINT(u16, unsigned short, 65535)\n"
    "KILN_UINT(u32, unsigned int, 4294967295U)\n"
    "KILN_UINT(u64, unsigned long long, 18446744073709551615ULL)\n\n";

/* The parameter list shared by every kernel. */
/* The kernel's parameters: the module arguments it accesses (*param, indices in parameter order,
 * *nparam of them), then the workspace and the prepared area. Passing every argument to every
 * kernel made each launch carry the whole module's pointers (MobileNetV2's 264 exceeded the
 * runtime's launch buffer) and the kernels' text quadratic in the graph. */
static bool
emit_params(struct cu *c, uint32_t **param, uint32_t *nparam)
{
    const struct kiln_func *f = c->f;
    uint32_t               *p = kiln_arena_alloc(c->ctx, sizeof(uint32_t) * (c->nused + 1));
    if (!p)
        return false;
    uint32_t n = kiln_used_params(c->param_of, c->used, c->nused, p);
    OUT("(");
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = f->param[p[i]];
        OUT("%s *__restrict__ ", mtype((enum kiln_dtype)f->buf[b].dtype));
        buf_name(c, b);
        OUT(", ");
    }
    OUT("char *__restrict__ kiln_ws, char *__restrict__ kiln_prep)");
    *param = p;
    *nparam = n;
    return true;
}

/* Views of the workspace and prepared area for every buffer placed there that the kernel
 * accesses. */
static void
emit_views(struct cu *c)
{
    const struct kiln_func *f = c->f;
    for (uint32_t i = 0; i < c->nused; i++) {
        uint32_t b = c->used[i];
        int64_t  off = c->ws_off[b] >= 0 ? c->ws_off[b] : f->buf[b].prep_offset;
        if (off < 0)
            continue;
        indent(c);
        OUT("%s *__restrict__ ", mtype((enum kiln_dtype)f->buf[b].dtype));
        buf_name(c, b);
        OUT(" = (%s *)(%s + %" PRId64 ");\n", mtype((enum kiln_dtype)f->buf[b].dtype),
            c->ws_off[b] >= 0 ? "kiln_ws" : "kiln_prep", off);
    }
    OUT("    (void)kiln_ws;\n    (void)kiln_prep;\n");
}

static void
place(struct cu *c, uint32_t b)
{
    const struct kiln_buffer *bf = &c->f->buf[b];
    int64_t                   bytes = buf_bytes(bf);
    c->ws_off[b] = c->kernel_end;
    c->kernel_end += (bytes + CU_ALIGN - 1) / CU_ALIGN * CU_ALIGN;
    if (c->kernel_end > c->ws_end)
        c->ws_end = c->kernel_end;
}

struct temps_walk {
    struct cu *c;
    uint32_t   in_gpu; /* GPU loops around the statement */
    bool       single; /* the kernel has no GPU loop (one thread) */
};

static bool
gpu_for(const struct kiln_stmt *s)
{
    return s->kind == KILN_STMT_FOR
           && (s->u.for_.loop == KILN_LOOP_GPU_BLOCK || s->u.for_.loop == KILN_LOOP_GPU_THREAD);
}

static enum kiln_walk
temps_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct temps_walk *w = v->user;
    struct cu         *c = w->c;
    bool               in_gpu = w->in_gpu, single = w->single;
    w->in_gpu += gpu_for(s);
    if (s->kind != KILN_STMT_ALLOC)
        return KILN_WALK_GO;
    uint32_t                  b = s->u.alloc.buf;
    const struct kiln_buffer *bf = &c->f->buf[b];
    int64_t                   bytes = buf_bytes(bf);
    if (c->ws_off[b] < 0 && bf->prep_offset < 0 && !in_gpu
        && (bf->scope == KILN_SCOPE_HEAP
            || (single && bf->scope == KILN_SCOPE_STACK && bytes > CU_LOCAL_MAX)))
        place(c, b);
    return KILN_WALK_GO;
}

static enum kiln_walk
temps_post(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    ((struct temps_walk *)v->user)->in_gpu -= gpu_for(s);
    return KILN_WALK_GO;
}

/* Places the temporaries of one root statement that live in the workspace: HEAP buffers
 * allocated outside every GPU loop, and, in a kernel without GPU loops (one thread), STACK
 * buffers too large for a per-thread array. Kernels run one after another, so each kernel's
 * temporaries start at the same offset. A statement visitor counting the GPU loops around. */
static void
place_temps(struct cu *c, const struct kiln_stmt *s, bool single)
{
    struct temps_walk        w = {c, 0, single};
    struct kiln_stmt_visitor v = {.user = &w, .pre = temps_pre, .post = temps_post};
    kiln_stmt_visit(&v, s);
}

struct kiln_vec_kernels {
    struct kiln_cuda_kernel *k;
    uint32_t                 n, cap;
};

static enum kiln_status
emit_kernel(struct cu *c, const struct kiln_stmt *s, const char *name, struct kiln_vec_kernels *v)
{
    int nb[3] = {0}, nt[3] = {0};
    for (int a = 0; a < 3; a++)
        c->grid[a] = c->block[a] = 1;
    c->shared_bytes = 0;
    c->nvector = 0;
    c->kernel_end = c->ws_base;
    place_temps(c, s, !has_gpu_loop(c, s, KILN_LOOP_SERIAL));
    launch_dims(c, s, nb, nt);
    if (c->failed)
        return c->ctx->err.status;
    uint64_t threads = (uint64_t)c->block[0] * c->block[1] * c->block[2];
    if (threads > 1024)
        return cu_fail(c, KILN_ERR_UNSUPPORTED, "%u x %u x %u threads per block exceed 1024",
                       c->block[0], c->block[1], c->block[2]);
    char kn[160];
    snprintf(kn, sizeof kn, "%.120s_k%" PRIu32, name, c->nkernel);
    for (char *p = kn; *p; p++) /* a C identifier, whatever the module's name */
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            *p = '_';
    if (kn[0] >= '0' && kn[0] <= '9')
        kn[0] = '_';
    OUT("extern \"C\" __global__ void __launch_bounds__(%" PRIu64 ") %s", threads, kn);
    c->nused = kiln_stmt_buffers(c->ctx, s, c->f->nbuf, c->mark, c->nkernel + 1, c->used, 0);
    uint32_t *param, nparam;
    if (!emit_params(c, &param, &nparam))
        return c->ctx->err.status;
    OUT("\n{\n");
    c->depth = 1;
    emit_views(c);
    emit_stmt(c, s);
    OUT("}\n\n");
    if (c->failed)
        return c->ctx->err.status;
    if (!kiln_vec_reserve(c->ctx, (void **)&v->k, &v->cap, sizeof *v->k, v->n + 1))
        return c->ctx->err.status;
    /* kiln_prepare launches the kernels storing prepared buffers, kiln_call_prepared the others:
     * lowering computes a prepared buffer in root statements of its own (as llvm.c checks) */
    bool prepare = any(&(struct ask){c, KILN_LOOP_SERIAL, is_prepared_store}, s);
    if (prepare && any(&(struct ask){c, KILN_LOOP_SERIAL, is_call_store}, s))
        return cu_fail(c, KILN_ERR_INTERNAL, "kernel %s writes both prepared and per-call buffers",
                       kn);
    struct kiln_cuda_kernel *k = &v->k[v->n++];
    *k = (struct kiln_cuda_kernel){.name = kiln_arena_strdup(c->ctx, kn),
                                   .shared_bytes = c->shared_bytes,
                                   .nvector = c->nvector,
                                   .prepare = prepare,
                                   .param = param,
                                   .nparam = nparam};
    memcpy(k->grid, c->grid, sizeof k->grid);
    memcpy(k->block, c->block, sizeof k->block);
    c->nkernel++;
    return k->name ? KILN_OK : c->ctx->err.status;
}

enum kiln_status
kiln_cg_cuda_source(kiln_ctx *ctx, const struct kiln_func *f, const char *name,
                    struct kiln_cuda_source *out)
{
    memset(out, 0, sizeof *out);
    KILN_TRY(kiln_func_verify(f, true));
    struct kiln_buf text = {0};
    struct cu       c = {.ctx = ctx, .f = f, .out = &text, .lane = -1};
    c.ws_off = kiln_arena_alloc(ctx, sizeof(int64_t) * (f->nbuf + 1));
    c.param_of = kiln_arena_alloc(ctx, sizeof(uint32_t) * (f->nbuf + 1));
    c.mark = kiln_arena_alloc(ctx, sizeof(uint32_t) * (f->nbuf + 1));
    c.used = kiln_arena_alloc(ctx, sizeof(uint32_t) * (f->nbuf + 1));
    if (!c.ws_off || !c.param_of || !c.mark || !c.used)
        return ctx->err.status;
    memset(c.param_of, 0, sizeof(uint32_t) * (f->nbuf + 1));
    memset(c.mark, 0, sizeof(uint32_t) * (f->nbuf + 1));
    for (uint32_t i = 0; i < f->nparam; i++)
        if (f->param[i] < f->nbuf)
            c.param_of[f->param[i]] = i + 1;
    for (uint32_t b = 0; b < f->nbuf; b++)
        c.ws_off[b] = f->buf[b].ws_offset;
    c.kernel_end = c.ws_end = (f->ws_bytes + CU_ALIGN - 1) / CU_ALIGN * CU_ALIGN;
    const struct kiln_stmt *root = f->body;
    while (root && root->kind == KILN_STMT_ALLOC) { /* live for the whole call */
        uint32_t b = root->u.alloc.buf;
        if (b < f->nbuf && c.ws_off[b] < 0 && f->buf[b].prep_offset < 0)
            place(&c, b);
        root = root->u.alloc.body;
    }
    c.ws_base = c.ws_end;
    for (uint32_t i = 0; i < f->nparam; i++)
        if (!check_dtype(&c, (enum kiln_dtype)f->buf[f->param[i]].dtype))
            return ctx->err.status;
    if (!kiln_buf_puts(ctx, &text, prelude))
        return ctx->err.status;
    struct kiln_vec_kernels v = {0};
    if (root && root->kind == KILN_STMT_SEQ) {
        for (uint32_t i = 0; i < root->u.seq.n; i++)
            KILN_TRY(emit_kernel(&c, root->u.seq.item[i], name, &v));
    } else if (root) {
        KILN_TRY(emit_kernel(&c, root, name, &v));
    }
    if (c.failed)
        return ctx->err.status;
    out->text = text.data;
    out->kernel = v.k;
    out->nkernel = v.n;
    out->ws_bytes = c.ws_end;
    out->prep_bytes = f->prep_bytes;
    return KILN_OK;
}
