/* codegen/llvm.c -- a flat loop-nest function to an LLVM module: statements, outlined parallel
 * loops, temporaries, and the ABI tables of include/kiln_abi_impl.h.
 *
 * Module layout. `kiln_kernel(void *const *data)` loads the parameters' data pointers and
 * calls `kiln_body(p0, p1, ...)`, an internal always-inline function whose pointer parameters
 * are noalias, aligned and dereferenceable for the whole buffer; when the optimiser inlines
 * it, the noalias facts become scoped alias metadata, which is how the loads of one buffer are
 * known not to alias stores to another. A parallel loop is outlined the same way: a wrapper
 * `int32_t kiln_parallel.N(begin, end, closure)` unpacks a closure struct (the data pointers
 * and the values of the free variables the loop body uses, plus the loop's min) and calls an
 * always-inline body function with noalias pointer parameters; the parent stores the closure
 * in its stack frame and calls kiln_rt_parallel_for. `kiln_desc` (struct kiln_abi_desc) and
 * its argument table are constant globals laid out exactly like the C structs. With
 * weight-derived buffers (prepared calls, see "phases" below) kiln_body also takes a phase and
 * the prepared area, `kiln_kernel_phased(data, phase, prepared)` calls it, and kiln_kernel
 * runs both phases with an area of its own.
 *
 * Status. Generated code returns KILN_ABI_OK or the first nonzero status of a parallel loop
 * or a failed temporary allocation (KILN_ABI_ERR_NOMEM); every error exit first frees the
 * heap temporaries live in that function. Small constant-size STACK temporaries are allocas
 * in the function's entry block (64-byte aligned, so one per thread inside parallel bodies);
 * other temporaries come from kiln_rt_alloc, 64-byte aligned too.
 *
 * Loops are emitted in the plain header/body/latch form and left to LLVM to rotate; unrolled
 * loops repeat the body with the variable bound to min + k; vector loops are llvm_vec.c's.
 * Every error is recorded once in the context (cg_fail) and generation stops. */
#include "llvm_cg.h"

#include "../ir/scalar.h"
#include "../runtime/runtime.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STACK_ALLOCA_MAX 65536 /* bytes: larger STACK buffers go to kiln_rt_alloc */
#define TEMP_ALIGN       64    /* alignment of allocas and kiln_rt_alloc memory */

_Static_assert(KILN_WS_ALIGN % TEMP_ALIGN == 0, "workspace offsets keep temporaries aligned");

enum kiln_status
cg_fail(struct cg *cg, enum kiln_status st, const char *fmt, ...)
{
    char    msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!cg->failed)
        KILN_FAIL(cg->ctx, st, "llvm", "llvm: %s: %s", kiln_sym_str(cg->ctx, cg->f->name), msg);
    cg->failed = true;
    return st;
}

const char *
cg_buf_name(const struct cg *cg, uint32_t b)
{
    return kiln_sym_str(cg->ctx, cg->f->buf[b].name);
}

bool
cg_bind(struct cg *cg, kiln_expr var, struct cg_val v, int64_t mult)
{
    if (cg->nenv == cg->capenv) {
        uint32_t ncap = cg->capenv ? 2 * cg->capenv : 64;
        if (!kiln_vec_reserve(cg->ctx, (void **)&cg->env, &cg->capenv, sizeof *cg->env, ncap)) {
            cg->failed = true;
            return false;
        }
    }
    cg->env[cg->nenv++] = (struct cg_bind){.var = var.id, .val = v, .mult = mult};
    return true;
}

void
cg_unbind(struct cg *cg, uint32_t n)
{
    cg->nenv -= n <= cg->nenv ? n : cg->nenv;
}

const struct cg_bind *
cg_lookup(const struct cg *cg, kiln_expr var)
{
    for (uint32_t i = cg->nenv; i-- > 0;)
        if (cg->env[i].var == var.id)
            return &cg->env[i];
    return NULL;
}

LLVMValueRef
cg_const_i64(struct cg *cg, int64_t v)
{
    return LLVMConstInt(cg->t_i64, (unsigned long long)v, 1);
}

LLVMValueRef
cg_intrinsic(struct cg *cg, const char *name, LLVMTypeRef *types, unsigned ntypes,
             LLVMValueRef *args, unsigned nargs)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    if (!id) {
        cg_fail(cg, KILN_ERR_INTERNAL, "LLVM has no intrinsic %s", name);
        return NULL;
    }
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(cg->mod, id, types, ntypes);
    LLVMTypeRef  fty = LLVMIntrinsicGetType(cg->lc, id, types, ntypes);
    return LLVMBuildCall2(cg->b, fty, fn, args, nargs, "");
}

/* ---- attributes ---- */

static void
enum_attr(struct cg *cg, LLVMValueRef fn, LLVMAttributeIndex at, const char *name, uint64_t val)
{
    unsigned k = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(fn, at, LLVMCreateEnumAttribute(cg->lc, k, val));
}

static void
string_attr(struct cg *cg, LLVMValueRef fn, const char *key, const char *val)
{
    LLVMAddAttributeAtIndex(
        fn, LLVMAttributeFunctionIndex,
        LLVMCreateStringAttribute(cg->lc, key, (unsigned)strlen(key), val, (unsigned)strlen(val)));
}

/* target-cpu, target-features, vector width preferences, nounwind */
static void
fn_attrs(struct cg *cg, LLVMValueRef fn, bool always_inline)
{
    char width[16];
    snprintf(width, sizeof width, "%d", cg->t->vector_bits);
    string_attr(cg, fn, "target-cpu", cg->t->cpu);
    if (cg->t->features[0])
        string_attr(cg, fn, "target-features", cg->t->features);
    string_attr(cg, fn, "prefer-vector-width", width);
    string_attr(cg, fn, "min-legal-vector-width", width);
    enum_attr(cg, fn, LLVMAttributeFunctionIndex, "nounwind", 0);
    if (always_inline)
        enum_attr(cg, fn, LLVMAttributeFunctionIndex, "alwaysinline", 0);
}

static int64_t
buf_bytes(const struct cg *cg, uint32_t b)
{
    int64_t n = 0;
    kiln_buffer_bytes(&cg->f->buf[b], &n); /* checked against overflow before generation */
    return n;
}

/* noalias, aligned, dereferenceable data pointer parameter `at` for buffer b */
static void
ptr_param_attrs(struct cg *cg, LLVMValueRef fn, unsigned at, uint32_t b)
{
    enum_attr(cg, fn, at, "noalias", 0);
    enum_attr(cg, fn, at, "nonnull", 0);
    enum_attr(cg, fn, at, "noundef", 0);
    enum_attr(cg, fn, at, "align", cg->balign[b]);
    enum_attr(cg, fn, at, "dereferenceable", (uint64_t)buf_bytes(cg, b));
}

/* ---- runtime calls ---- */

static LLVMValueRef
runtime_fn(struct cg *cg, const char *name, LLVMTypeRef *fty)
{
    LLVMTypeRef ty;
    if (!strcmp(name, "kiln_rt_parallel_for")) {
        LLVMTypeRef p[3] = {cg->t_i64, cg->t_ptr, cg->t_ptr};
        ty = LLVMFunctionType(cg->t_i32, p, 3, 0);
    } else if (!strcmp(name, "kiln_rt_alloc")) {
        ty = LLVMFunctionType(cg->t_ptr, &cg->t_i64, 1, 0);
    } else {
        ty = LLVMFunctionType(cg->t_void, &cg->t_ptr, 1, 0);
    }
    *fty = ty;
    LLVMValueRef fn = LLVMGetNamedFunction(cg->mod, name);
    if (!fn) {
        fn = LLVMAddFunction(cg->mod, name, ty);
        enum_attr(cg, fn, LLVMAttributeFunctionIndex, "nounwind", 0);
        if (!strcmp(name, "kiln_rt_alloc"))
            enum_attr(cg, fn, LLVMAttributeReturnIndex, "noalias", 0);
    }
    return fn;
}

static LLVMValueRef
call_rt(struct cg *cg, const char *name, LLVMValueRef *args, unsigned n)
{
    LLVMTypeRef  fty;
    LLVMValueRef fn = runtime_fn(cg, name, &fty);
    return LLVMBuildCall2(cg->b, fty, fn, args, n, "");
}

/* if (cond) { free live temporaries; return status; } -- cond is expected false */
static void
error_exit_if(struct cg *cg, LLVMValueRef cond, LLVMValueRef status)
{
    LLVMTypeRef       i1 = cg->t_i1;
    LLVMValueRef      args[2] = {cond, LLVMConstInt(i1, 0, 0)};
    LLVMValueRef      c = cg_intrinsic(cg, "llvm.expect", &i1, 1, args, 2);
    LLVMBasicBlockRef err = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "error");
    LLVMBasicBlockRef ok = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "ok");
    LLVMBuildCondBr(cg->b, c, err, ok);
    LLVMPositionBuilderAtEnd(cg->b, err);
    for (uint32_t i = cg->fn.nheap; i-- > 0;)
        call_rt(cg, "kiln_rt_free", &cg->fn.heap[i], 1);
    LLVMBuildRet(cg->b, status);
    LLVMPositionBuilderAtEnd(cg->b, ok);
}

static LLVMValueRef
entry_alloca(struct cg *cg, LLVMTypeRef ty, unsigned align)
{
    LLVMBuilderRef ab = LLVMCreateBuilderInContext(cg->lc);
    LLVMPositionBuilderBefore(ab, LLVMGetBasicBlockTerminator(cg->fn.entry));
    LLVMValueRef a = LLVMBuildAlloca(ab, ty, "");
    LLVMSetAlignment(a, align);
    LLVMDisposeBuilder(ab);
    return a;
}

/* Starts filling fn with the per-buffer pointer array bufptr (all NULL; NULL = a new one): an
 * entry block for allocas that branches to the first code block. */
static bool
begin_fn_with(struct cg *cg, LLVMValueRef fn, LLVMValueRef *bufptr)
{
    memset(&cg->fn, 0, sizeof cg->fn);
    cg->fn.fn = fn;
    cg->fn.bufptr =
        bufptr ? bufptr : kiln_arena_alloc(cg->ctx, sizeof(LLVMValueRef) * (cg->f->nbuf + 1));
    if (!cg->fn.bufptr) {
        cg->failed = true;
        return false;
    }
    cg->fn.entry = LLVMAppendBasicBlockInContext(cg->lc, fn, "entry");
    LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(cg->lc, fn, "start");
    LLVMPositionBuilderAtEnd(cg->b, cg->fn.entry);
    LLVMBuildBr(cg->b, start);
    LLVMPositionBuilderAtEnd(cg->b, start);
    return true;
}

static bool
begin_fn(struct cg *cg, LLVMValueRef fn)
{
    return begin_fn_with(cg, fn, NULL);
}

/* ---- loops ---- */

void
cg_emit_serial_loop(struct cg *cg, kiln_expr var, LLVMValueRef lo, LLVMValueRef ext, int64_t mult,
                    const struct kiln_stmt *body)
{
    if (cg->failed || !lo || !ext)
        return;
    LLVMValueRef      hi = LLVMBuildNSWAdd(cg->b, lo, ext, "");
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(cg->b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "loop");
    LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "exit");
    LLVMBuildBr(cg->b, head);
    LLVMPositionBuilderAtEnd(cg->b, head);
    LLVMValueRef iv = LLVMBuildPhi(cg->b, cg->t_i64, "");
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, iv, hi, ""), bb, exit);
    LLVMPositionBuilderAtEnd(cg->b, bb);
    if (cg_bind(cg, var, (struct cg_val){.v = iv, .kind = CG_UNIFORM}, mult)) {
        cg_emit_stmt(cg, body);
        cg_unbind(cg, 1);
    }
    if (cg->failed)
        return;
    LLVMValueRef      next = LLVMBuildNSWAdd(cg->b, iv, cg_const_i64(cg, 1), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(cg->b);
    LLVMBuildBr(cg->b, head);
    LLVMValueRef      vals[2] = {lo, next};
    LLVMBasicBlockRef from[2] = {pre, latch};
    LLVMAddIncoming(iv, vals, from, 2);
    LLVMPositionBuilderAtEnd(cg->b, exit);
}

static void
emit_unrolled(struct cg *cg, const struct kiln_stmt *s)
{
    int64_t ext, cmin;
    if (!kiln_expr_is_int(cg->ctx, s->u.for_.extent, &ext) || ext <= 0) {
        cg_fail(cg, KILN_ERR_INVALID, "unrolled loop needs a constant positive extent");
        return;
    }
    LLVMValueRef lo = cg_emit_scalar(cg, s->u.for_.min);
    bool         cm = kiln_expr_is_int(cg->ctx, s->u.for_.min, &cmin);
    int64_t      mmin = cg_mult(cg, s->u.for_.min);
    for (int64_t k = 0; k < ext && lo && !cg->failed; k++) {
        LLVMValueRef v = LLVMBuildAdd(cg->b, lo, cg_const_i64(cg, k), "");
        int64_t      mk = cg_pow2(k);
        int64_t      mult = cm ? cg_pow2(cmin + k) : (mk < mmin ? mk : mmin);
        if (!cg_bind(cg, s->u.for_.var, (struct cg_val){.v = v, .kind = CG_UNIFORM}, mult))
            return;
        cg_emit_stmt(cg, s->u.for_.body);
        cg_unbind(cg, 1);
    }
}

/* ---- parallel loops ---- */

struct capture {
    uint32_t var[256]; /* free variables of the body (expression ids) */
    uint32_t nvar;
    uint32_t bound[256];
    uint32_t nbound;
    bool    *used;  /* per buffer: loaded or stored */
    bool    *local; /* per buffer: allocated inside */
    bool     overflow;
};

static void
capture_expr(const struct cg *cg, struct capture *c, kiln_expr e)
{
    const struct kiln_node *n = &cg->ctx->node[e.id];
    if (n->op == KILN_OP_VAR) {
        for (uint32_t i = 0; i < c->nbound; i++)
            if (c->bound[i] == e.id)
                return;
        for (uint32_t i = 0; i < c->nvar; i++)
            if (c->var[i] == e.id)
                return;
        if (c->nvar == KILN_COUNTOF(c->var))
            c->overflow = true;
        else
            c->var[c->nvar++] = e.id;
        return;
    }
    if (n->op == KILN_OP_LOAD && (uint32_t)n->imm < cg->f->nbuf)
        c->used[n->imm] = true;
    for (int i = 0; i < kiln_op_arity[n->op]; i++)
        if (n->kid[i])
            capture_expr(cg, c, (kiln_expr){n->kid[i]});
}

/* What a loop body captures: a statement visitor whose expressions are scanned in the
 * scope around them, with for and let variables bound in their bodies. */
struct capture_walk {
    const struct cg *cg;
    struct capture  *c;
};

static enum kiln_walk
capture_field(struct kiln_stmt_visitor *v, const struct kiln_stmt *s, enum kiln_stmt_field field,
              kiln_expr e)
{
    struct capture_walk *w = v->user;
    (void)s;
    (void)field;
    capture_expr(w->cg, w->c, e);
    return KILN_WALK_GO;
}

static enum kiln_walk
capture_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct capture_walk *w = v->user;
    if (s->kind == KILN_STMT_STORE && s->u.store.buf < w->cg->f->nbuf)
        w->c->used[s->u.store.buf] = true;
    if (s->kind == KILN_STMT_ALLOC && s->u.alloc.buf < w->cg->f->nbuf)
        w->c->local[s->u.alloc.buf] = true;
    return KILN_WALK_GO;
}

/* A for or let: its expressions, then its body with its variable bound. */
static enum kiln_walk
capture_binder(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct capture_walk *w = v->user;
    struct capture      *c = w->c;
    bool                 loop = s->kind == KILN_STMT_FOR;
    if (loop) {
        capture_expr(w->cg, c, s->u.for_.min);
        capture_expr(w->cg, c, s->u.for_.extent);
    } else {
        capture_expr(w->cg, c, s->u.let.value);
    }
    if (c->nbound == KILN_COUNTOF(c->bound)) {
        c->overflow = true;
        return KILN_WALK_GO;
    }
    c->bound[c->nbound++] = (loop ? s->u.for_.var : s->u.let.var).id;
    kiln_stmt_visit(v, loop ? s->u.for_.body : s->u.let.body);
    c->nbound--;
    return KILN_WALK_GO;
}

static void
capture_stmt(const struct cg *cg, struct capture *c, const struct kiln_stmt *s)
{
    struct capture_walk      w = {cg, c};
    struct kiln_stmt_visitor v = {.user = &w,
                                  .pre = capture_pre,
                                  .expr = capture_field,
                                  .for_ = capture_binder,
                                  .let = capture_binder};
    kiln_stmt_visit(&v, s);
}

/* Fills the always-inline body of an outlined loop: params are the captured buffers' data
 * pointers, the captured variables, then lo, begin, end. */
static void
fill_parallel_body(struct cg *cg, LLVMValueRef impl, const struct kiln_stmt *s,
                   const struct capture *c, const uint32_t *bufs, uint32_t nb, const int64_t *mults)
{
    if (!begin_fn(cg, impl))
        return;
    unsigned p = 0;
    for (uint32_t i = 0; i < nb; i++)
        cg->fn.bufptr[bufs[i]] = LLVMGetParam(impl, p++);
    for (uint32_t i = 0; i < c->nvar; i++)
        if (!cg_bind(cg, (kiln_expr){c->var[i]},
                     (struct cg_val){.v = LLVMGetParam(impl, p++), .kind = CG_UNIFORM}, mults[i]))
            return;
    LLVMValueRef lo = LLVMGetParam(impl, p), begin = LLVMGetParam(impl, p + 1),
                 end = LLVMGetParam(impl, p + 2);
    cg_emit_serial_loop(cg, s->u.for_.var, LLVMBuildNSWAdd(cg->b, lo, begin, ""),
                        LLVMBuildNSWSub(cg->b, end, begin, ""), 1, s->u.for_.body);
    if (!cg->failed)
        LLVMBuildRet(cg->b, LLVMConstInt(cg->t_i32, 0, 0));
}

static void
emit_parallel(struct cg *cg, const struct kiln_stmt *s)
{
    if (cg->lanes) {
        cg_fail(cg, KILN_ERR_INTERNAL, "parallel loop inside a vector loop");
        return;
    }
    LLVMValueRef lo = cg_emit_scalar(cg, s->u.for_.min);
    LLVMValueRef ext = lo ? cg_emit_scalar(cg, s->u.for_.extent) : NULL;
    if (!ext)
        return;
    struct capture c = {.nvar = 0};
    c.used = kiln_arena_alloc(cg->ctx, 2 * (cg->f->nbuf + 1));
    uint32_t *bufs = kiln_arena_alloc(cg->ctx, sizeof(uint32_t) * (cg->f->nbuf + 1));
    if (!c.used || !bufs) {
        cg->failed = true;
        return;
    }
    c.local = c.used + cg->f->nbuf + 1;
    c.bound[c.nbound++] = s->u.for_.var.id;
    capture_stmt(cg, &c, s->u.for_.body);
    if (c.overflow) {
        cg_fail(cg, KILN_ERR_UNSUPPORTED, "parallel loop body uses more than 256 variables");
        return;
    }
    /* closure: data pointers, variable values, min */
    uint32_t      nb = 0, nf = 0;
    LLVMTypeRef  *fty = kiln_arena_alloc(cg->ctx, sizeof(LLVMTypeRef) * (cg->f->nbuf + c.nvar + 1));
    LLVMValueRef *fval =
        kiln_arena_alloc(cg->ctx, sizeof(LLVMValueRef) * (cg->f->nbuf + c.nvar + 1));
    int64_t *mults = kiln_arena_alloc(cg->ctx, sizeof(int64_t) * (c.nvar + 1));
    if (!fty || !fval || !mults) {
        cg->failed = true;
        return;
    }
    for (uint32_t b = 0; b < cg->f->nbuf; b++) {
        if (!c.used[b] || c.local[b])
            continue;
        if (!cg->fn.bufptr[b]) {
            cg_fail(cg, KILN_ERR_INVALID, "buffer %s is used outside its allocation",
                    cg_buf_name(cg, b));
            return;
        }
        bufs[nb++] = b;
        fty[nf] = cg->t_ptr;
        fval[nf++] = cg->fn.bufptr[b];
    }
    for (uint32_t i = 0; i < c.nvar; i++) {
        const struct cg_bind *bd = cg_lookup(cg, (kiln_expr){c.var[i]});
        if (!bd || bd->val.kind != CG_UNIFORM) {
            const struct kiln_node *n = &cg->ctx->node[c.var[i]];
            cg_fail(cg, KILN_ERR_INVALID, "variable %s is not bound",
                    kiln_sym_str(cg->ctx, kiln_var_index(n->imm)));
            return;
        }
        fty[nf] = LLVMTypeOf(bd->val.v);
        fval[nf++] = bd->val.v;
        mults[i] = bd->mult;
    }
    fty[nf] = cg->t_i64;
    fval[nf++] = lo;
    LLVMTypeRef  sty = LLVMStructTypeInContext(cg->lc, fty, nf, 0);
    LLVMValueRef clo = entry_alloca(cg, sty, 8);
    for (uint32_t i = 0; i < nf; i++)
        LLVMBuildStore(cg->b, fval[i], LLVMBuildStructGEP2(cg->b, sty, clo, i, ""));

    /* the outlined functions */
    /* named after its loop variable (the stage and the axes it runs over), so that profilers
     * (perf) say which stage a sample belongs to */
    char name[160];
    snprintf(name, sizeof name, "kiln_parallel.%u.%s", cg->nparallel++,
             kiln_sym_str(cg->ctx, kiln_var_index(cg->ctx->node[s->u.for_.var.id].imm)));
    LLVMTypeRef  wp[3] = {cg->t_i64, cg->t_i64, cg->t_ptr};
    LLVMValueRef wrap = LLVMAddFunction(cg->mod, name, LLVMFunctionType(cg->t_i32, wp, 3, 0));
    LLVMSetLinkage(wrap, LLVMInternalLinkage);
    fn_attrs(cg, wrap, false);
    LLVMTypeRef *ip = kiln_arena_alloc(cg->ctx, sizeof(LLVMTypeRef) * (nf + 2));
    if (!ip) {
        cg->failed = true;
        return;
    }
    memcpy(ip, fty, sizeof(LLVMTypeRef) * nf);
    ip[nf] = cg->t_i64;
    ip[nf + 1] = cg->t_i64;
    snprintf(name + strlen(name), sizeof name - strlen(name), ".body");
    LLVMTypeRef  ity = LLVMFunctionType(cg->t_i32, ip, nf + 2, 0);
    LLVMValueRef impl = LLVMAddFunction(cg->mod, name, ity);
    LLVMSetLinkage(impl, LLVMInternalLinkage);
    fn_attrs(cg, impl, true);
    for (uint32_t i = 0; i < nb; i++)
        ptr_param_attrs(cg, impl, i + 1, bufs[i]);

    /* fill them, saving the parent's state */
    struct cg_fn      parent = cg->fn;
    LLVMBasicBlockRef at = LLVMGetInsertBlock(cg->b);
    struct cg_bind   *env = cg->env;
    uint32_t          nenv = cg->nenv, capenv = cg->capenv;
    cg->env = NULL;
    cg->nenv = cg->capenv = 0;
    if (begin_fn(cg, wrap)) {
        LLVMValueRef *args = kiln_arena_alloc(cg->ctx, sizeof(LLVMValueRef) * (nf + 2));
        if (!args) {
            cg->failed = true;
        } else {
            LLVMValueRef cp = LLVMGetParam(wrap, 2);
            for (uint32_t i = 0; i < nf; i++)
                args[i] =
                    LLVMBuildLoad2(cg->b, fty[i], LLVMBuildStructGEP2(cg->b, sty, cp, i, ""), "");
            args[nf] = LLVMGetParam(wrap, 0);
            args[nf + 1] = LLVMGetParam(wrap, 1);
            LLVMBuildRet(cg->b, LLVMBuildCall2(cg->b, ity, impl, args, nf + 2, ""));
        }
    }
    if (!cg->failed)
        fill_parallel_body(cg, impl, s, &c, bufs, nb, mults);
    cg->fn = parent;
    cg->env = env;
    cg->nenv = nenv;
    cg->capenv = capenv;
    LLVMPositionBuilderAtEnd(cg->b, at);
    if (cg->failed)
        return;
    /* if (ext > 0) { st = kiln_rt_parallel_for(ext, wrap, closure); if (st) return st; } */
    LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "par.run");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "par.done");
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntSGT, ext, cg_const_i64(cg, 0), ""), run,
                    done);
    LLVMPositionBuilderAtEnd(cg->b, run);
    LLVMValueRef args[3] = {ext, wrap, clo};
    LLVMValueRef st = call_rt(cg, "kiln_rt_parallel_for", args, 3);
    error_exit_if(cg, LLVMBuildICmp(cg->b, LLVMIntNE, st, LLVMConstInt(cg->t_i32, 0, 0), ""), st);
    LLVMBuildBr(cg->b, done);
    LLVMPositionBuilderAtEnd(cg->b, done);
}

/* ---- alias scopes of workspace views ----
 *
 * Views of the workspace are GEPs of one allocation, so LLVM knows nothing that separates
 * them. Within one root statement, though, every buffer it touches is live and buffers live
 * together have disjoint bytes (passes/memplan.c): each root statement k gets its own scope
 * domain, the accesses of planned buffer b in it the scope (k, b) and a noalias list of the
 * scopes (k, c) of the other planned buffers it accesses. Statements never share a domain, so
 * nothing is claimed between accesses of different statements, where bytes are reused (an
 * access with no scope in a domain is not separated by that domain). */

static uint32_t
view_slot(LLVMValueRef p, uint32_t cap)
{
    return (uint32_t)(((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) >> 40) & (cap - 1);
}

/* Records p as a view of buffer b (a hash by pointer: a scan of every buffer per access made
 * code generation quadratic in the graph). */
static void
set_view(struct cg *cg, uint32_t b, LLVMValueRef p)
{
    if (2 * (cg->nview + 1) > cg->vcap) {
        uint32_t        cap = cg->vcap ? 2 * cg->vcap : 64;
        struct cg_view *tab = kiln_arena_alloc(cg->ctx, sizeof *tab * cap); /* zeroed */
        if (!tab) {
            cg->failed = true;
            return;
        }
        for (uint32_t i = 0; i < cg->vcap; i++)
            if (cg->vtab[i].p) {
                uint32_t h = view_slot(cg->vtab[i].p, cap);
                while (tab[h].p)
                    h = (h + 1) & (cap - 1);
                tab[h] = cg->vtab[i];
            }
        cg->vtab = tab;
        cg->vcap = cap;
    }
    uint32_t h = view_slot(p, cg->vcap);
    while (cg->vtab[h].p && cg->vtab[h].p != p)
        h = (h + 1) & (cg->vcap - 1);
    cg->nview += !cg->vtab[h].p;
    cg->vtab[h] = (struct cg_view){p, b};
}

/* The planned buffer whose view p is derived from by GEPs, or KILN_NONE. */
static uint32_t
view_of(const struct cg *cg, LLVMValueRef p)
{
    for (int depth = 0; p && cg->vcap && depth < 8; depth++) {
        for (uint32_t h = view_slot(p, cg->vcap); cg->vtab[h].p; h = (h + 1) & (cg->vcap - 1))
            if (cg->vtab[h].p == p)
                return cg->vtab[h].b;
        if (!LLVMIsAGetElementPtrInst(p))
            return KILN_NONE;
        p = LLVMGetOperand(p, 0);
    }
    return KILN_NONE;
}

/* The planned buffer an instruction accesses: loads, stores, masked/gather/scatter calls. */
static uint32_t
access_of(const struct cg *cg, LLVMValueRef inst)
{
    if (LLVMIsALoadInst(inst))
        return view_of(cg, LLVMGetOperand(inst, 0));
    if (LLVMIsAStoreInst(inst))
        return view_of(cg, LLVMGetOperand(inst, 1));
    if (LLVMIsACallInst(inst) && LLVMIsAIntrinsicInst(inst)) {
        int n = LLVMGetNumArgOperands(inst);
        for (int i = 0; i < n; i++) {
            uint32_t b = view_of(cg, LLVMGetOperand(inst, (unsigned)i));
            if (b != KILN_NONE)
                return b;
        }
    }
    return KILN_NONE;
}

/* Where kiln_body stood before a root statement: the insertion block and its last
 * instruction, and the function's last block (blocks are only ever appended). */
struct mark {
    LLVMBasicBlockRef bb, lastbb;
    LLVMValueRef      last;
};

/* Calls fn on every instruction emitted in kiln_body since m: the rest of m.bb, then every
 * block appended after m.lastbb. */
static void
each_inst_since(struct cg *cg, struct mark m, void (*fn)(struct cg *, LLVMValueRef, void *),
                void *ud)
{
    LLVMValueRef i = m.last ? LLVMGetNextInstruction(m.last) : LLVMGetFirstInstruction(m.bb);
    for (; i; i = LLVMGetNextInstruction(i))
        fn(cg, i, ud);
    for (LLVMBasicBlockRef bb = LLVMGetNextBasicBlock(m.lastbb); bb; bb = LLVMGetNextBasicBlock(bb))
        for (i = bb == m.bb ? NULL : LLVMGetFirstInstruction(bb); i; i = LLVMGetNextInstruction(i))
            fn(cg, i, ud);
}

struct scopes {
    LLVMMetadataRef  domain; /* this statement's */
    LLVMMetadataRef *scope;  /* per buffer: its scope in this statement, or NULL */
    uint32_t        *used;   /* planned buffers accessed */
    uint32_t         nused;
    unsigned         k_scope, k_noalias;
};

static void
collect_access(struct cg *cg, LLVMValueRef inst, void *ud)
{
    struct scopes *S = ud;
    uint32_t       b = access_of(cg, inst);
    if (b == KILN_NONE || S->scope[b])
        return;
    char nm[64]; /* statement, buffer index (unique even when the name is cut), name */
    snprintf(nm, sizeof nm, "kiln.ws.%u.%u.%s", cg->nroot, b, cg_buf_name(cg, b));
    LLVMMetadataRef ops[2] = {LLVMMDStringInContext2(cg->lc, nm, strlen(nm)), S->domain};
    S->scope[b] = LLVMMDNodeInContext2(cg->lc, ops, 2);
    S->used[S->nused++] = b;
}

static void
tag_access(struct cg *cg, LLVMValueRef inst, void *ud)
{
    struct scopes *S = ud;
    uint32_t       b = access_of(cg, inst);
    if (b == KILN_NONE || !S->scope[b])
        return;
    LLVMMetadataRef other[256];
    uint32_t        n = 0;
    for (uint32_t i = 0; i < S->nused && n < KILN_COUNTOF(other); i++)
        if (S->used[i] != b)
            other[n++] = S->scope[S->used[i]];
    LLVMSetMetadata(inst, S->k_scope,
                    LLVMMetadataAsValue(cg->lc, LLVMMDNodeInContext2(cg->lc, &S->scope[b], 1)));
    if (n)
        LLVMSetMetadata(inst, S->k_noalias,
                        LLVMMetadataAsValue(cg->lc, LLVMMDNodeInContext2(cg->lc, other, n)));
}

/* Emits one root statement of kiln_body, then scopes its accesses of planned buffers. */
static void
emit_root(struct cg *cg, const struct kiln_stmt *s)
{
    LLVMBasicBlockRef bb = LLVMGetInsertBlock(cg->b);
    struct mark       m = {bb, LLVMGetLastBasicBlock(cg->fn.fn), LLVMGetLastInstruction(bb)};
    cg_emit_stmt(cg, s);
    if (cg->failed)
        return;
    char nm[32];
    snprintf(nm, sizeof nm, "kiln.ws.%u", cg->nroot);
    LLVMMetadataRef dom_id = LLVMMDStringInContext2(cg->lc, nm, strlen(nm));
    /* the per-buffer arrays are cg's, cleared after use: one pair per root statement made
     * memory quadratic in the graph (20,000 statements took 7 GB) */
    struct scopes S = {.domain = LLVMMDNodeInContext2(cg->lc, &dom_id, 1),
                       .scope = cg->scope,
                       .used = cg->scope_used,
                       .k_scope = LLVMGetMDKindIDInContext(cg->lc, "alias.scope", 11),
                       .k_noalias = LLVMGetMDKindIDInContext(cg->lc, "noalias", 7)};
    each_inst_since(cg, m, collect_access, &S);
    if (S.nused > 1) /* one buffer alone needs no scope */
        each_inst_since(cg, m, tag_access, &S);
    for (uint32_t i = 0; i < S.nused; i++)
        S.scope[S.used[i]] = NULL;
    cg->nroot++;
}

/* ---- phases ----
 *
 * With prepared buffers, kiln_body takes a phase (KILN_ABI_PHASE_* bits) and runs a root
 * statement only when its phase bit is set: a statement storing to prepared buffers (and to
 * temporaries of its own) is part of KILN_ABI_PHASE_PREPARE, every other one of
 * KILN_ABI_PHASE_MAIN. Lowering computes a prepared buffer in root statements of its own, so
 * a statement storing to both is an internal error. */

struct writes {
    const struct cg *cg;
    bool             prep, other;
};

/* A statement visitor: the buffers a root statement stores to. */
static enum kiln_walk
root_store(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct writes            *W = v->user;
    const struct kiln_buffer *bf = &W->cg->f->buf[s->u.store.buf];
    if (bf->prep_offset >= 0)
        W->prep = true;
    else if (bf->scope == KILN_SCOPE_GLOBAL || bf->ws_offset >= 0 || W->cg->top[s->u.store.buf])
        W->other = true;
    return KILN_WALK_GO; /* else a temporary allocated inside the statement */
}

static void
root_writes(struct writes *W, const struct kiln_stmt *s)
{
    struct kiln_stmt_visitor v = {.user = W, .store = root_store};
    kiln_stmt_visit(&v, s);
}

static void
emit_phased(struct cg *cg, const struct kiln_stmt *s)
{
    if (!cg->fn.prep) {
        emit_root(cg, s);
        return;
    }
    struct writes W = {.cg = cg};
    root_writes(&W, s);
    if (W.prep && W.other) {
        cg_fail(cg, KILN_ERR_INTERNAL,
                "a root statement writes both prepared and per-call buffers");
        return;
    }
    unsigned     bit = W.prep ? KILN_ABI_PHASE_PREPARE : KILN_ABI_PHASE_MAIN;
    LLVMValueRef on = LLVMBuildICmp(
        cg->b, LLVMIntNE, LLVMBuildAnd(cg->b, cg->fn.phase, LLVMConstInt(cg->t_i32, bit, 0), ""),
        LLVMConstInt(cg->t_i32, 0, 0), "");
    LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "phase");
    LLVMBasicBlockRef skip = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "endphase");
    LLVMBuildCondBr(cg->b, on, run, skip);
    LLVMPositionBuilderAtEnd(cg->b, run);
    emit_root(cg, s);
    if (cg->failed)
        return;
    LLVMBuildBr(cg->b, skip);
    LLVMMoveBasicBlockAfter(skip, LLVMGetInsertBlock(cg->b));
    LLVMPositionBuilderAtEnd(cg->b, skip);
}

/* ---- parts ----
 *
 * LLVM's optimiser is superlinear in the size of one function (dominator trees, SCEV's guard
 * search, the vectoriser's register pressure), and kiln_body inlined into kiln_kernel holds
 * every loop nest of the graph: a chain of 1,000 statements took 4.6 s and 2,000 took 26 s.
 * So when the root has more than PART_ROOTS statements, every PART_ROOTS of them go into a
 * function of their own, `kiln_body.partN(params...[, workspace][, phase, prepared])`, never
 * inlined, called in order by kiln_body, whose status it checks. A part takes only the graph
 * parameters its statements use and rebuilds the views of only the planned buffers they use
 * from its own workspace (and prepared area) parameter; it cannot reach a
 * root temporary of another kind (a heap or stack allocation of kiln_body's: memory planning
 * off), so such functions stay whole. Graphs of up to PART_ROOTS root statements (every tuned
 * kernel) are emitted exactly as before. */
#define PART_ROOTS 32

/* Whether every buffer of the ALLOC chain above the root (if any: a graph with no temporaries
 * has no workspace and is split too) lives in the workspace or in the prepared area, so that
 * a part can rebuild its pointer. */
static bool
parts_possible(const struct cg *cg, const struct kiln_stmt *s)
{
    if (s != cg->root || s->kind != KILN_STMT_SEQ || s->u.seq.n <= PART_ROOTS)
        return false;
    for (uint32_t b = 0; b < cg->f->nbuf; b++)
        if (cg->top[b] && cg->f->buf[b].ws_offset < 0 && cg->f->buf[b].prep_offset < 0)
            return false;
    return true;
}

/* The buffers root statements [first, end) of s load or store, in cg->part_used. Each part
 * takes and rebuilds only these: passing every parameter and rebuilding every planned view in
 * every part made code generation quadratic in the graph (a fan of 10,000 outputs ran LLVM's
 * scheduler over 3 million argument stores and did not finish in 10 minutes). */
static void
part_buffers(struct cg *cg, const struct kiln_stmt *s, uint32_t first, uint32_t end)
{
    uint32_t stamp = first / PART_ROOTS + 1;
    cg->npart_used = 0;
    for (uint32_t k = first; k < end; k++)
        cg->npart_used = kiln_stmt_buffers(cg->ctx, s->u.seq.item[k], cg->f->nbuf, cg->part_mark,
                                           stamp, cg->part_used, cg->npart_used);
}

static void
emit_parts(struct cg *cg, const struct kiln_stmt *s)
{
    const struct kiln_func *f = cg->f;
    bool                    phased = cg->fn.prep != NULL;
    uint32_t                np = f->nparam + 1 + (phased ? 2 : 0);
    LLVMTypeRef            *pt = kiln_arena_alloc(cg->ctx, sizeof(LLVMTypeRef) * np);
    LLVMValueRef           *args = kiln_arena_alloc(cg->ctx, sizeof(LLVMValueRef) * np);
    uint32_t               *param_of = kiln_arena_alloc(cg->ctx, sizeof(uint32_t) * (f->nbuf + 1));
    uint32_t               *pbuf = kiln_arena_alloc(cg->ctx, sizeof(uint32_t) * (f->nparam + 1));
    /* one pointer array for every part (its entries are cleared after each): one per part
     * made memory quadratic in the graph */
    LLVMValueRef *bufptr = kiln_arena_alloc(cg->ctx, sizeof(LLVMValueRef) * (f->nbuf + 1));
    cg->part_mark = kiln_arena_alloc(cg->ctx, sizeof(uint32_t) * (f->nbuf + 1));
    cg->part_used = kiln_arena_alloc(cg->ctx, sizeof(uint32_t) * (f->nbuf + 1));
    if (!pt || !args || !param_of || !pbuf || !bufptr || !cg->part_mark || !cg->part_used) {
        cg->failed = true;
        return;
    }
    for (uint32_t i = 0; i < f->nparam; i++)
        if (f->param[i] < f->nbuf)
            param_of[f->param[i]] = i + 1;
    struct cg_fn body = cg->fn;
    for (uint32_t first = 0; first < s->u.seq.n && !cg->failed; first += PART_ROOTS) {
        uint32_t end = s->u.seq.n - first > PART_ROOTS ? first + PART_ROOTS : s->u.seq.n;
        part_buffers(cg, s, first, end);
        /* its parameters: the graph parameters it uses (in parameter order), the workspace
         * (if any), then the phase and the prepared area */
        uint32_t n = kiln_used_params(param_of, cg->part_used, cg->npart_used, pbuf);
        for (uint32_t i = 0; i < n; i++) {
            pt[i] = cg->t_ptr;
            args[i] = body.bufptr[f->param[pbuf[i]]];
        }
        uint32_t na = n;
        if (body.ws) {
            pt[na] = cg->t_ptr;
            args[na++] = body.ws;
        }
        if (phased) {
            pt[na] = cg->t_i32;
            args[na++] = body.phase;
            pt[na] = cg->t_ptr;
            args[na++] = body.prep;
        }
        LLVMTypeRef ty = LLVMFunctionType(cg->t_i32, pt, na, 0);
        char        name[48];
        snprintf(name, sizeof name, "kiln_body.part%u", first / PART_ROOTS);
        LLVMValueRef fn = LLVMAddFunction(cg->mod, name, ty);
        LLVMSetLinkage(fn, LLVMInternalLinkage);
        fn_attrs(cg, fn, false);
        enum_attr(cg, fn, LLVMAttributeFunctionIndex, "noinline", 0);
        for (uint32_t i = 0; i < n; i++)
            ptr_param_attrs(cg, fn, i + 1, f->param[pbuf[i]]);
        unsigned at = n + 1; /* the workspace */
        if (body.ws) {
            enum_attr(cg, fn, at, "noalias", 0);
            enum_attr(cg, fn, at, "nonnull", 0);
            enum_attr(cg, fn, at, "align", KILN_WS_ALIGN);
            enum_attr(cg, fn, at, "dereferenceable", (uint64_t)f->ws_bytes);
            at++;
        }
        if (phased) {
            at++; /* the prepared area, after the phase */
            enum_attr(cg, fn, at, "noalias", 0);
            enum_attr(cg, fn, at, "nonnull", 0);
            enum_attr(cg, fn, at, "align", KILN_WS_ALIGN);
            enum_attr(cg, fn, at, "dereferenceable", (uint64_t)f->prep_bytes);
        }
        LLVMBasicBlockRef resume = LLVMGetInsertBlock(cg->b);
        if (!begin_fn_with(cg, fn, bufptr))
            return;
        for (uint32_t i = 0; i < n; i++)
            cg->fn.bufptr[f->param[pbuf[i]]] = LLVMGetParam(fn, i);
        uint32_t p = n;
        if (body.ws)
            cg->fn.ws = LLVMGetParam(fn, p++);
        if (phased) {
            cg->fn.phase = LLVMGetParam(fn, p);
            cg->fn.prep = LLVMGetParam(fn, p + 1);
        }
        for (uint32_t i = 0; i < cg->npart_used; i++) {
            uint32_t b = cg->part_used[i];
            if (!cg->top[b])
                continue;
            const struct kiln_buffer *bf = &f->buf[b];
            bool                      ws = bf->ws_offset >= 0;
            LLVMValueRef              off = cg_const_i64(cg, ws ? bf->ws_offset : bf->prep_offset);
            cg->fn.bufptr[b] =
                LLVMBuildInBoundsGEP2(cg->b, cg->t_i8, ws ? cg->fn.ws : cg->fn.prep, &off, 1, "");
            set_view(cg, b, cg->fn.bufptr[b]);
        }
        for (uint32_t k = first; k < end && !cg->failed; k++)
            emit_phased(cg, s->u.seq.item[k]);
        if (cg->failed)
            return;
        LLVMBuildRet(cg->b, LLVMConstInt(cg->t_i32, 0, 0));
        for (uint32_t i = 0; i < cg->npart_used; i++)
            bufptr[cg->part_used[i]] = NULL;
        cg->fn = body;
        LLVMPositionBuilderAtEnd(cg->b, resume);
        LLVMValueRef st = LLVMBuildCall2(cg->b, ty, fn, args, na, "");
        error_exit_if(cg, LLVMBuildICmp(cg->b, LLVMIntNE, st, LLVMConstInt(cg->t_i32, 0, 0), ""),
                      st);
    }
}

/* ---- other statements ---- */

/* Binds the data pointer of ALLOC s's buffer in the function being filled; a heap allocation
 * is returned in *heap (else NULL), to be freed by alloc_leave. */
static bool
alloc_enter(struct cg *cg, const struct kiln_stmt *s, LLVMValueRef *heap)
{
    *heap = NULL;
    uint32_t b = s->u.alloc.buf;
    if (b >= cg->f->nbuf) {
        cg_fail(cg, KILN_ERR_INVALID, "allocation of buffer %u, which does not exist", b);
        return false;
    }
    const struct kiln_buffer *bf = &cg->f->buf[b];
    LLVMTypeRef               mt = cg_mem_type(cg, (enum kiln_dtype)bf->dtype);
    int64_t                   bytes = buf_bytes(cg, b);
    if (!mt)
        return false;
    if (cg->fn.bufptr[b]) {
        cg_fail(cg, KILN_ERR_INVALID, "buffer %s is allocated twice", cg_buf_name(cg, b));
        return false;
    }
    if (bf->prep_offset >= 0) { /* a view of the prepared area, which the caller owns */
        if (!cg->fn.prep) {
            cg_fail(cg, KILN_ERR_INVALID, "prepared buffer %s outside kiln_body",
                    cg_buf_name(cg, b));
            return false;
        }
        LLVMValueRef off = cg_const_i64(cg, bf->prep_offset);
        cg->fn.bufptr[b] = LLVMBuildInBoundsGEP2(cg->b, cg->t_i8, cg->fn.prep, &off, 1, "");
        set_view(cg, b, cg->fn.bufptr[b]);
        return !cg->failed;
    }
    if (bf->ws_offset >= 0) { /* a view of the workspace: nothing to allocate or free */
        if (!cg->fn.ws) {
            cg_fail(cg, KILN_ERR_INVALID, "workspace buffer %s outside the workspace",
                    cg_buf_name(cg, b));
            return false;
        }
        LLVMValueRef off = cg_const_i64(cg, bf->ws_offset);
        cg->fn.bufptr[b] = LLVMBuildInBoundsGEP2(cg->b, cg->t_i8, cg->fn.ws, &off, 1, "");
        set_view(cg, b, cg->fn.bufptr[b]);
        return !cg->failed;
    }
    if (bf->scope == KILN_SCOPE_STACK && bytes <= STACK_ALLOCA_MAX) {
        int64_t n = bytes / (int64_t)kiln_dtype_size((enum kiln_dtype)bf->dtype);
        cg->fn.bufptr[b] = entry_alloca(cg, LLVMArrayType2(mt, (uint64_t)(n ? n : 1)), TEMP_ALIGN);
        return !cg->failed;
    }
    LLVMValueRef sz = cg_const_i64(cg, bytes ? bytes : 1);
    LLVMValueRef p = call_rt(cg, "kiln_rt_alloc", &sz, 1);
    error_exit_if(cg, LLVMBuildIsNull(cg->b, p, ""),
                  LLVMConstInt(cg->t_i32, KILN_ABI_ERR_NOMEM, 0));
    if (!kiln_vec_reserve(cg->ctx, (void **)&cg->fn.heap, &cg->fn.capheap, sizeof *cg->fn.heap,
                          cg->fn.nheap + 1)) {
        cg->failed = true;
        return false;
    }
    cg->fn.heap[cg->fn.nheap++] = p;
    cg->fn.bufptr[b] = p;
    *heap = p;
    return !cg->failed;
}

/* Ends ALLOC s's scope: unbinds its buffer and frees a heap allocation. */
static void
alloc_leave(struct cg *cg, const struct kiln_stmt *s, LLVMValueRef heap)
{
    cg->fn.bufptr[s->u.alloc.buf] = NULL;
    if (!heap)
        return;
    cg->fn.nheap--;
    if (!cg->failed)
        call_rt(cg, "kiln_rt_free", &heap, 1);
}

/* An ALLOC and the ALLOCs directly nested in it, in a loop: lowering wraps the function body
 * in one ALLOC per root temporary, and recursing along that chain overflowed the stack at
 * about 60,000 statements. */
static void
emit_alloc(struct cg *cg, const struct kiln_stmt *s)
{
    uint32_t n = 0;
    for (const struct kiln_stmt *a = s; a && a->kind == KILN_STMT_ALLOC; a = a->u.alloc.body)
        n++;
    const struct kiln_stmt **chain = kiln_arena_alloc(cg->ctx, sizeof *chain * n);
    LLVMValueRef            *heap = kiln_arena_alloc(cg->ctx, sizeof *heap * n);
    if (!chain || !heap) {
        cg->failed = true;
        return;
    }
    uint32_t k = 0;
    for (const struct kiln_stmt *a = s; k < n; a = a->u.alloc.body) {
        chain[k] = a;
        if (!alloc_enter(cg, a, &heap[k]))
            return;
        k++;
    }
    cg_emit_stmt(cg, chain[n - 1]->u.alloc.body);
    while (k-- > 0)
        alloc_leave(cg, chain[k], heap[k]);
}

static void
emit_store(struct cg *cg, const struct kiln_stmt *s)
{
    uint32_t  b = s->u.store.buf;
    kiln_expr ie = {cg->ctx->node[s->u.store.index.id].kid[0]};
    if (b >= cg->f->nbuf || !ie.id || cg->ctx->node[s->u.store.index.id].kid[1]) {
        cg_fail(cg, KILN_ERR_INVALID, "store needs one flat index of an existing buffer");
        return;
    }
    if (cg->lanes) {
        cg_emit_vector_store(cg, s);
        return;
    }
    enum kiln_dtype dt = (enum kiln_dtype)cg->f->buf[b].dtype;
    struct cg_val   iv = cg_emit_index(cg, ie);
    LLVMValueRef    idx = iv.v && iv.kind == CG_UNIFORM ? iv.v : NULL;
    LLVMValueRef    v = idx ? cg_emit_scalar(cg, s->u.store.value) : NULL;
    LLVMValueRef    p = v ? cg_elem_ptr(cg, b, idx, true) : NULL;
    if (!p)
        return;
    v = cg_to_memory(cg, v, dt); /* bool, f16, bf16 */
    LLVMSetAlignment(LLVMBuildStore(cg->b, v, p), cg_align(cg, b, cg_mult(cg, ie)));
}

static void
emit_if(struct cg *cg, const struct kiln_stmt *s)
{
    struct cg_val c = cg_emit(cg, s->u.if_.cond);
    if (!c.v)
        return;
    if (c.kind != CG_UNIFORM) { /* lanes disagree: narrow the mask for each side */
        LLVMValueRef cv = cg_vector(cg, c, KILN_DTYPE_BOOL), saved = cg->mask;
        cg->mask = saved ? LLVMBuildAnd(cg->b, saved, cv, "") : cv;
        cg_emit_stmt(cg, s->u.if_.then);
        if (s->u.if_.els && !cg->failed) {
            LLVMValueRef nc = LLVMBuildNot(cg->b, cv, "");
            cg->mask = saved ? LLVMBuildAnd(cg->b, saved, nc, "") : nc;
            cg_emit_stmt(cg, s->u.if_.els);
        }
        cg->mask = saved;
        return;
    }
    LLVMBasicBlockRef bt = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "then");
    LLVMBasicBlockRef be =
        s->u.if_.els ? LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "else") : NULL;
    LLVMBasicBlockRef end = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "endif");
    LLVMBuildCondBr(cg->b, c.v, bt, be ? be : end);
    LLVMPositionBuilderAtEnd(cg->b, bt);
    cg_emit_stmt(cg, s->u.if_.then);
    if (cg->failed)
        return;
    LLVMBuildBr(cg->b, end);
    if (be) {
        LLVMPositionBuilderAtEnd(cg->b, be);
        cg_emit_stmt(cg, s->u.if_.els);
        if (cg->failed)
            return;
        LLVMBuildBr(cg->b, end);
    }
    LLVMPositionBuilderAtEnd(cg->b, end);
}

/* Not a statement visitor (ir/visit.c): every kind emits its own code, loops and lets around
 * bodies they emit themselves, so there is no default recursion to inherit. */
void
cg_emit_stmt(struct cg *cg, const struct kiln_stmt *s)
{
    if (cg->failed)
        return;
    if (!s) {
        cg_fail(cg, KILN_ERR_INVALID, "missing statement");
        return;
    }
    if (s == cg->root && cg->fn.prep && s->kind != KILN_STMT_SEQ && !cg->in_phase) {
        cg->in_phase = true; /* a root of one statement is phased as a whole */
        emit_phased(cg, s);
        cg->in_phase = false;
        return;
    }
    switch ((enum kiln_stmt_kind)s->kind) {
    case KILN_STMT_FOR:
        switch ((enum kiln_loop_kind)s->u.for_.loop) {
        case KILN_LOOP_SERIAL: {
            int64_t      one;
            LLVMValueRef lo = cg_emit_scalar(cg, s->u.for_.min);
            LLVMValueRef ext = lo ? cg_emit_scalar(cg, s->u.for_.extent) : NULL;
            bool         single = kiln_expr_is_int(cg->ctx, s->u.for_.extent, &one) && one == 1;
            cg_emit_serial_loop(cg, s->u.for_.var, lo, ext, single ? cg_mult(cg, s->u.for_.min) : 1,
                                s->u.for_.body);
            return;
        }
        case KILN_LOOP_UNROLL:
            emit_unrolled(cg, s);
            return;
        case KILN_LOOP_PARALLEL:
            emit_parallel(cg, s);
            return;
        case KILN_LOOP_VECTOR:
            cg_emit_vector_loop(cg, s);
            return;
        case KILN_LOOP_GPU_BLOCK:
        case KILN_LOOP_GPU_THREAD:
            cg_fail(cg, KILN_ERR_UNSUPPORTED, "%s loops need a GPU target",
                    kiln_loop_kind_name[s->u.for_.loop]);
            return;
        }
        cg_fail(cg, KILN_ERR_INVALID, "unknown loop kind %d", s->u.for_.loop);
        return;
    case KILN_STMT_STORE:
        emit_store(cg, s);
        return;
    case KILN_STMT_SEQ:
        if (parts_possible(cg, s)) {
            emit_parts(cg, s);
            return;
        }
        if (s == cg->root && (cg->fn.ws || cg->fn.prep)) {
            for (uint32_t i = 0; i < s->u.seq.n && !cg->failed; i++)
                emit_phased(cg, s->u.seq.item[i]);
            return;
        }
        for (uint32_t i = 0; i < s->u.seq.n && !cg->failed; i++)
            cg_emit_stmt(cg, s->u.seq.item[i]);
        return;
    case KILN_STMT_IF:
        emit_if(cg, s);
        return;
    case KILN_STMT_LET: {
        struct cg_val v = cg_emit(cg, s->u.let.value);
        if (!v.v || !cg_bind(cg, s->u.let.var, v, cg_mult(cg, s->u.let.value)))
            return;
        cg_emit_stmt(cg, s->u.let.body);
        cg_unbind(cg, 1);
        return;
    }
    case KILN_STMT_ALLOC:
        emit_alloc(cg, s);
        return;
    }
    cg_fail(cg, KILN_ERR_INVALID, "unknown statement kind %d", s->kind);
}

/* ---- the ABI tables ---- */

static LLVMValueRef
const_string(struct cg *cg, const char *s)
{
    size_t       n = strlen(s);
    LLVMValueRef init = LLVMConstStringInContext2(cg->lc, s, n, 0);
    LLVMValueRef g = LLVMAddGlobal(cg->mod, LLVMTypeOf(init), "kiln.str");
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
    LLVMSetAlignment(g, 1);
    return g;
}

/* An embedded weight: param i's values converted to its dtype once, into a temporary buffer
 * that LLVM copies into a constant byte array (the only copy kept while compiling), aligned
 * to at least 64 bytes. */
static LLVMValueRef
embedded_data(struct cg *cg, uint32_t i)
{
    uint32_t                  b = cg->f->param[i];
    const struct kiln_buffer *bf = &cg->f->buf[b];
    int64_t                   bytes = 0, numel = 1;
    if (!kiln_buffer_bytes(bf, &bytes) || bytes <= 0) {
        cg_fail(cg, KILN_ERR_UNSUPPORTED, "weight %s is too large to embed", cg_buf_name(cg, b));
        return NULL;
    }
    for (int d = 0; d < bf->ndim; d++)
        numel *= bf->shape[d];
    unsigned char *data = malloc((size_t)bytes);
    if (!data) {
        cg_fail(cg, KILN_ERR_NOMEM, "cannot convert weight %s (%lld bytes) to embed it",
                cg_buf_name(cg, b), (long long)bytes);
        return NULL;
    }
    memset(data, 0, (size_t)bytes);
    for (int64_t k = 0; k < numel; k++)
        kiln_scalar_store((enum kiln_dtype)bf->dtype, data, k, cg->m->embed[i][k]);
    LLVMValueRef init = LLVMConstStringInContext2(cg->lc, (const char *)data, (size_t)bytes, 1);
    free(data);
    LLVMValueRef g = LLVMAddGlobal(cg->mod, LLVMTypeOf(init), "kiln.weight");
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    LLVMSetAlignment(g, cg->balign[b] > 64 ? cg->balign[b] : 64);
    return g;
}

/* struct kiln_abi_arg[] and struct kiln_abi_desc kiln_desc, laid out as in kiln_abi_impl.h */
static void
emit_tables(struct cg *cg, LLVMValueRef kernel, LLVMValueRef phased)
{
    const struct kiln_func *f = cg->f;
    LLVMTypeRef   af[8] = {cg->t_ptr, cg->t_i8,  cg->t_i8,  LLVMInt16TypeInContext(cg->lc),
                           cg->t_i32, cg->t_ptr, cg->t_i32, cg->t_i8};
    LLVMTypeRef   arg_ty = LLVMStructTypeInContext(cg->lc, af, 8, 0);
    LLVMValueRef *args = kiln_arena_alloc(cg->ctx, sizeof(LLVMValueRef) * (f->nparam + 1));
    if (!args) {
        cg->failed = true;
        return;
    }
    for (uint32_t i = 0; i < f->nparam; i++) {
        uint32_t                  b = f->param[i];
        const struct kiln_buffer *bf = &f->buf[b];
        uint8_t                   code, bits;
        kiln_cg_dl_type((enum kiln_dtype)bf->dtype, &code, &bits);
        LLVMValueRef shape = LLVMConstNull(cg->t_ptr);
        if (bf->ndim) {
            LLVMValueRef dims[KILN_MAX_DIMS];
            for (int d = 0; d < bf->ndim; d++)
                dims[d] = cg_const_i64(cg, bf->shape[d]);
            LLVMValueRef init = LLVMConstArray2(cg->t_i64, dims, bf->ndim);
            shape = LLVMAddGlobal(cg->mod, LLVMTypeOf(init), "kiln.shape");
            LLVMSetInitializer(shape, init);
            LLVMSetGlobalConstant(shape, 1);
            LLVMSetLinkage(shape, LLVMPrivateLinkage);
            LLVMSetAlignment(shape, 8);
        }
        LLVMValueRef fields[8] = {
            const_string(cg, cg_buf_name(cg, b)),
            LLVMConstInt(cg->t_i8, code, 0),
            LLVMConstInt(cg->t_i8, bits, 0),
            LLVMConstInt(LLVMInt16TypeInContext(cg->lc), 1, 0),
            LLVMConstInt(cg->t_i32, bf->ndim, 0),
            shape,
            LLVMConstInt(cg->t_i32, cg->balign[b], 0),
            LLVMConstInt(cg->t_i8, cg->m->role ? cg->m->role[i] : 0, 0),
        };
        args[i] = LLVMConstNamedStruct(arg_ty, fields, 8);
    }
    LLVMValueRef table = LLVMConstNull(cg->t_ptr);
    if (f->nparam) {
        LLVMValueRef init = LLVMConstArray2(arg_ty, args, f->nparam);
        table = LLVMAddGlobal(cg->mod, LLVMTypeOf(init), "kiln.args");
        LLVMSetInitializer(table, init);
        LLVMSetGlobalConstant(table, 1);
        LLVMSetLinkage(table, LLVMPrivateLinkage);
        LLVMSetAlignment(table, 8);
    }
    LLVMValueRef embedded = LLVMConstNull(cg->t_ptr);
    if (cg->m->embed) { /* const void *embedded[nargs]: NULL for what the caller passes */
        for (uint32_t i = 0; i < f->nparam; i++) {
            args[i] = cg->m->embed[i] ? embedded_data(cg, i) : LLVMConstNull(cg->t_ptr);
            if (!args[i])
                return;
        }
        LLVMValueRef init = LLVMConstArray2(cg->t_ptr, args, f->nparam);
        embedded = LLVMAddGlobal(cg->mod, LLVMTypeOf(init), "kiln.embedded");
        LLVMSetInitializer(embedded, init);
        LLVMSetGlobalConstant(embedded, 1);
        LLVMSetLinkage(embedded, LLVMPrivateLinkage);
        LLVMSetAlignment(embedded, 8);
    }
    LLVMTypeRef  df[11] = {cg->t_i32, cg->t_i32, cg->t_ptr, cg->t_ptr, cg->t_ptr, cg->t_ptr,
                           cg->t_i32, cg->t_ptr, cg->t_i64, cg->t_ptr, cg->t_ptr};
    LLVMTypeRef  desc_ty = LLVMStructTypeInContext(cg->lc, df, 11, 0);
    LLVMValueRef fields[11] = {
        LLVMConstInt(cg->t_i32, KILN_ABI_VERSION, 0),
        LLVMConstInt(cg->t_i32, f->nparam, 0),
        table,
        kernel,
        const_string(cg, cg->m->metadata ? cg->m->metadata : "{}"),
        const_string(cg, cg->m->source ? cg->m->source : ""),
        LLVMConstInt(cg->t_i32, kDLCPU, 0),
        phased ? phased : LLVMConstNull(cg->t_ptr),
        cg_const_i64(cg, phased ? f->prep_bytes : 0),
        embedded,
        const_string(cg, cg->t->features), /* the calls refuse a CPU without them */
    };
    LLVMValueRef desc = LLVMAddGlobal(cg->mod, desc_ty, "kiln_desc");
    LLVMSetInitializer(desc, LLVMConstNamedStruct(desc_ty, fields, 11));
    LLVMSetGlobalConstant(desc, 1);
    LLVMSetLinkage(desc, LLVMExternalLinkage);
    LLVMSetVisibility(desc, LLVMDefaultVisibility);
    LLVMSetAlignment(desc, 8);
}

/* ---- the module ---- */

static void
emit_functions(struct cg *cg)
{
    const struct kiln_func *f = cg->f;
    bool                    phased = f->prep_bytes > 0;
    uint32_t                nbody = f->nparam + (phased ? 2 : 0);
    LLVMTypeRef            *pt = kiln_arena_alloc(cg->ctx, sizeof(LLVMTypeRef) * (nbody + 1));
    LLVMValueRef           *args = kiln_arena_alloc(cg->ctx, sizeof(LLVMValueRef) * (nbody + 1));
    if (!pt || !args) {
        cg->failed = true;
        return;
    }
    for (uint32_t i = 0; i < f->nparam; i++)
        pt[i] = cg->t_ptr;
    if (phased) { /* kiln_body(params..., i32 phase, ptr prepared) */
        pt[f->nparam] = cg->t_i32;
        pt[f->nparam + 1] = cg->t_ptr;
    }
    LLVMTypeRef  body_ty = LLVMFunctionType(cg->t_i32, pt, nbody, 0);
    LLVMValueRef body = LLVMAddFunction(cg->mod, "kiln_body", body_ty);
    LLVMSetLinkage(body, LLVMInternalLinkage);
    fn_attrs(cg, body, true);
    for (uint32_t i = 0; i < f->nparam; i++)
        ptr_param_attrs(cg, body, i + 1, f->param[i]);
    if (phased) {
        unsigned at = f->nparam + 2;
        enum_attr(cg, body, at, "noalias", 0);
        enum_attr(cg, body, at, "nonnull", 0);
        enum_attr(cg, body, at, "align", KILN_WS_ALIGN);
        enum_attr(cg, body, at, "dereferenceable", (uint64_t)f->prep_bytes);
    }

    /* kiln_kernel(data), or with prepared buffers kiln_kernel_phased(data, phase, prepared)
     * (never inlined, so the body exists once) and kiln_kernel(data) = allocate a prepared
     * area, run both phases, free it */
    LLVMTypeRef  ph_pt[3] = {cg->t_ptr, cg->t_i32, cg->t_ptr};
    LLVMTypeRef  ph_ty = LLVMFunctionType(cg->t_i32, ph_pt, 3, 0);
    LLVMValueRef kernel =
        LLVMAddFunction(cg->mod, "kiln_kernel", LLVMFunctionType(cg->t_i32, &cg->t_ptr, 1, 0));
    LLVMValueRef entry = phased ? LLVMAddFunction(cg->mod, "kiln_kernel_phased", ph_ty) : kernel;
    LLVMSetLinkage(kernel, LLVMInternalLinkage);
    fn_attrs(cg, kernel, false);
    if (phased) {
        LLVMSetLinkage(entry, LLVMInternalLinkage);
        fn_attrs(cg, entry, false);
        enum_attr(cg, entry, LLVMAttributeFunctionIndex, "noinline", 0);
        if (!begin_fn(cg, kernel))
            return;
        LLVMValueRef sz = cg_const_i64(cg, f->prep_bytes);
        LLVMValueRef p = call_rt(cg, "kiln_rt_alloc", &sz, 1);
        error_exit_if(cg, LLVMBuildIsNull(cg->b, p, ""),
                      LLVMConstInt(cg->t_i32, KILN_ABI_ERR_NOMEM, 0));
        LLVMValueRef a[3] = {LLVMGetParam(kernel, 0),
                             LLVMConstInt(cg->t_i32, KILN_ABI_PHASE_ALL, 0), p};
        LLVMValueRef st = LLVMBuildCall2(cg->b, ph_ty, entry, a, 3, "");
        call_rt(cg, "kiln_rt_free", &p, 1);
        LLVMBuildRet(cg->b, st);
    }
    if (!begin_fn(cg, entry))
        return;
    for (uint32_t i = 0; i < f->nparam; i++) {
        LLVMValueRef k = cg_const_i64(cg, i);
        LLVMValueRef slot =
            LLVMBuildInBoundsGEP2(cg->b, cg->t_ptr, LLVMGetParam(entry, 0), &k, 1, "");
        args[i] = LLVMBuildLoad2(cg->b, cg->t_ptr, slot, "");
        LLVMSetAlignment(args[i], 8);
    }
    if (phased) {
        args[f->nparam] = LLVMGetParam(entry, 1);
        args[f->nparam + 1] = LLVMGetParam(entry, 2);
    }
    LLVMBuildRet(cg->b, LLVMBuildCall2(cg->b, body_ty, body, args, nbody, ""));

    if (!begin_fn(cg, body))
        return;
    for (uint32_t i = 0; i < f->nparam; i++)
        cg->fn.bufptr[f->param[i]] = LLVMGetParam(body, i);
    if (phased) {
        cg->fn.phase = LLVMGetParam(body, f->nparam);
        cg->fn.prep = LLVMGetParam(body, f->nparam + 1);
    }
    cg->root = f->body;
    cg->top = kiln_arena_alloc(cg->ctx, sizeof(bool) * (f->nbuf + 1));
    if (!cg->top) {
        cg->failed = true;
        return;
    }
    while (cg->root && cg->root->kind == KILN_STMT_ALLOC) {
        if (cg->root->u.alloc.buf < f->nbuf)
            cg->top[cg->root->u.alloc.buf] = true;
        cg->root = cg->root->u.alloc.body;
    }
    cg->scope = kiln_arena_alloc(cg->ctx, sizeof(LLVMMetadataRef) * (f->nbuf + 1));
    cg->scope_used = kiln_arena_alloc(cg->ctx, sizeof(uint32_t) * (f->nbuf + 1));
    if (!cg->scope || !cg->scope_used) {
        cg->failed = true;
        return;
    }
    if (f->ws_bytes > 0) { /* one allocation per call for every planned temporary */
        LLVMValueRef sz = cg_const_i64(cg, f->ws_bytes);
        LLVMValueRef ws = call_rt(cg, "kiln_rt_alloc", &sz, 1);
        error_exit_if(cg, LLVMBuildIsNull(cg->b, ws, ""),
                      LLVMConstInt(cg->t_i32, KILN_ABI_ERR_NOMEM, 0));
        if (!kiln_vec_reserve(cg->ctx, (void **)&cg->fn.heap, &cg->fn.capheap, sizeof *cg->fn.heap,
                              1)) {
            cg->failed = true;
            return;
        }
        cg->fn.heap[cg->fn.nheap++] = ws;
        cg->fn.ws = ws;
    }
    cg_emit_stmt(cg, f->body);
    if (!cg->failed && cg->fn.ws)
        call_rt(cg, "kiln_rt_free", &cg->fn.ws, 1);
    if (!cg->failed)
        LLVMBuildRet(cg->b, LLVMConstInt(cg->t_i32, 0, 0));
    if (!cg->failed)
        emit_tables(cg, kernel, phased ? entry : NULL);
}

/* Checks what the generator relies on; computes each buffer's pointer alignment. */
static enum kiln_status
check_func(struct cg *cg)
{
    const struct kiln_func *f = cg->f;
    KILN_TRY(kiln_func_verify(f, true));
    cg->balign = kiln_arena_alloc(cg->ctx, sizeof(uint32_t) * (f->nbuf + 1));
    if (!cg->balign)
        return cg->ctx->err.status;
    for (uint32_t b = 0; b < f->nbuf; b++) {
        const struct kiln_buffer *bf = &f->buf[b];
        enum kiln_dtype           dt = (enum kiln_dtype)bf->dtype;
        if (dt >= KILN_DTYPE_COUNT)
            return cg_fail(cg, KILN_ERR_UNSUPPORTED,
                           "buffer %s: dtype %s is not supported by the LLVM backend yet",
                           cg_buf_name(cg, b), dt < KILN_DTYPE_COUNT ? kiln_dtype_name(dt) : "?");
        if (bf->scope == KILN_SCOPE_SHARED)
            return cg_fail(cg, KILN_ERR_UNSUPPORTED, "buffer %s: shared memory needs a GPU target",
                           cg_buf_name(cg, b));
        int64_t n = (int64_t)kiln_dtype_size(dt);
        for (int d = 0; d < bf->ndim; d++)
            if (bf->shape[d] < 0 || kiln_mul_overflows(n, bf->shape[d], &n)
                || n > ((int64_t)1 << 50))
                return cg_fail(cg, KILN_ERR_INVALID, "buffer %s is too large", cg_buf_name(cg, b));
        int64_t es = (int64_t)kiln_dtype_size(dt);
        int64_t a = bf->scope == KILN_SCOPE_GLOBAL ? (int64_t)bf->align : TEMP_ALIGN;
        a = cg_pow2(a > 0 ? a : 1); /* the largest power of two it guarantees */
        cg->balign[b] = (uint32_t)(a < es ? es : a > 4096 ? 4096 : a);
    }
    return KILN_OK;
}

LLVMErrorRef
kiln_cg_llvm_o3(LLVMModuleRef mod, LLVMTargetMachineRef tm)
{
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMPassBuilderOptionsSetLoopInterleaving(po, 1);
    LLVMPassBuilderOptionsSetLoopUnrolling(po, 1);
    LLVMErrorRef err = LLVMRunPasses(mod, "default<O3>", tm, po);
    LLVMDisposePassBuilderOptions(po);
    return err;
}

enum kiln_status
kiln_cg_llvm_optimise(kiln_ctx *ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm)
{
    LLVMErrorRef err = kiln_cg_llvm_o3(mod, tm);
    if (err) {
        KILN_FAIL(ctx, KILN_ERR_BACKEND, "llvm", "llvm: the optimisation pipeline failed");
        kiln_cg_set_error_detail(ctx, err);
        return KILN_ERR_BACKEND;
    }
    return KILN_OK;
}

enum kiln_status
kiln_cg_llvm_build(kiln_ctx *ctx, const struct kiln_cg_module *m, const struct kiln_target *t,
                   LLVMContextRef lc, LLVMTargetMachineRef tm, bool optimise, LLVMModuleRef *out)
{
    *out = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (!m || !m->f || !t)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "llvm", "llvm: no function to compile");
    struct cg cg = {.ctx = ctx, .f = m->f, .t = t, .m = m, .lc = lc};
    KILN_TRY(check_func(&cg));
    const char *name = m->name ? m->name : kiln_sym_str(ctx, m->f->name);
    cg.mod = LLVMModuleCreateWithNameInContext(name, lc);
    cg.b = LLVMCreateBuilderInContext(lc);
    cg.t_i1 = LLVMInt1TypeInContext(lc);
    cg.t_i8 = LLVMInt8TypeInContext(lc);
    cg.t_i32 = LLVMInt32TypeInContext(lc);
    cg.t_i64 = LLVMInt64TypeInContext(lc);
    cg.t_f32 = LLVMFloatTypeInContext(lc);
    cg.t_f64 = LLVMDoubleTypeInContext(lc);
    cg.t_ptr = LLVMPointerTypeInContext(lc, 0);
    cg.t_void = LLVMVoidTypeInContext(lc);
    LLVMSetTarget(cg.mod, t->triple);
    LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
    char             *layout = LLVMCopyStringRepOfTargetData(td);
    LLVMSetDataLayout(cg.mod, layout);
    LLVMDisposeMessage(layout);
    LLVMDisposeTargetData(td);

    emit_functions(&cg);
    LLVMDisposeBuilder(cg.b);
    if (cg.failed || !kiln_ok(ctx)) {
        LLVMDisposeModule(cg.mod);
        return kiln_ok(ctx) ? KILN_FAIL(ctx, KILN_ERR_NOMEM, "llvm", "llvm: out of memory")
                            : ctx->err.status;
    }
    char *msg = NULL;
    if (LLVMVerifyModule(cg.mod, LLVMReturnStatusAction, &msg)) {
        KILN_FAIL(ctx, KILN_ERR_BACKEND, "llvm", "llvm: %s: generated module does not verify",
                  kiln_sym_str(ctx, m->f->name));
        kiln_cg_set_detail(ctx, msg);
        LLVMDisposeModule(cg.mod);
        return KILN_ERR_BACKEND;
    }
    if (msg)
        LLVMDisposeMessage(msg);
    if (optimise && kiln_cg_llvm_optimise(ctx, cg.mod, tm) != KILN_OK) {
        LLVMDisposeModule(cg.mod);
        return KILN_ERR_BACKEND;
    }
    *out = cg.mod;
    return KILN_OK;
}
