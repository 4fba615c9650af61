/* codegen/llvm_vec.c -- SIMD code for KILN_LOOP_VECTOR loops: the loop's L iterations become
 * the L lanes of vectors, its body is emitted once.
 *
 * The loop variable is bound as AFFINE(min, 1) (see llvm_expr.c), so memory accesses come out
 * in the cheapest form their flat index allows: a lane-invariant index is a scalar access (and
 * a scalar value is broadcast when a vector needs it); stride 1 is one vector load or store
 * whose alignment is what can be proven from the buffer's alignment and the known power-of-two
 * divisor of the lane-0 index, falling back to the element's alignment; anything else is a
 * gather or scatter. Conditions that differ between lanes (if statements, select) do not
 * branch: they narrow the lane mask, and every load and store under a mask is masked, so a
 * lane that must not touch memory does not (a scalar access under a mask runs only when some
 * lane is active). Masked-off lanes of a load read as zero, never poison, so no later
 * operation (a division, say) can turn them into undefined behaviour.
 *
 * Before emitting SIMD code the body is checked; a body this scheme cannot express with the
 * serial loop's meaning -- a nested parallel or vector loop, an allocation, a loop whose bounds
 * differ between lanes, a store of lane-dependent values to one lane-invariant element (a
 * reduction across lanes), more than 256 lanes -- is emitted as a plain serial loop instead,
 * which is always correct. The scheduler is responsible for only vectorising loops whose
 * iterations are independent; a vector loop runs its statements for all lanes at once. */
#include "llvm_cg.h"

#include <string.h>

#define MAX_LANES 256

struct simd_check {
    const struct cg *cg;
    uint32_t         var[256]; /* lane-dependent variables (expression ids) */
    uint32_t         nvar;
};

static bool
lane_dependent(const struct simd_check *sc, kiln_expr e)
{
    const struct kiln_node *n = &sc->cg->ctx->node[e.id];
    if (n->op == KILN_OP_VAR) {
        for (uint32_t i = 0; i < sc->nvar; i++)
            if (sc->var[i] == e.id)
                return true;
        return false;
    }
    for (int i = 0; i < kiln_op_arity[n->op]; i++)
        if (n->kid[i] && lane_dependent(sc, (kiln_expr){n->kid[i]}))
            return true;
    return false;
}

/* Whether a body can run as SIMD lanes: a statement visitor that stops at the first
 * statement that cannot (a loop of another kind or with lane-dependent bounds, an
 * allocation, a store of a lane-dependent value to a lane-independent element). */
static enum kiln_walk
simd_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct simd_check *sc = v->user;
    const kiln_ctx    *ctx = sc->cg->ctx;
    switch ((enum kiln_stmt_kind)s->kind) {
    case KILN_STMT_FOR:
        if (s->u.for_.loop != KILN_LOOP_SERIAL && s->u.for_.loop != KILN_LOOP_UNROLL)
            return KILN_WALK_STOP;
        if (lane_dependent(sc, s->u.for_.min) || lane_dependent(sc, s->u.for_.extent))
            return KILN_WALK_STOP;
        return KILN_WALK_GO;
    case KILN_STMT_STORE: {
        kiln_expr idx = {ctx->node[s->u.store.index.id].kid[0]};
        return lane_dependent(sc, idx) || !lane_dependent(sc, s->u.store.value) ? KILN_WALK_SKIP
                                                                                : KILN_WALK_STOP;
    }
    case KILN_STMT_ALLOC:
        return KILN_WALK_STOP;
    case KILN_STMT_SEQ:
    case KILN_STMT_IF:
    case KILN_STMT_LET:
        return KILN_WALK_GO;
    }
    return KILN_WALK_STOP;
}

/* A let of a lane-dependent value makes its variable lane-dependent in its body. */
static enum kiln_walk
simd_let(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct simd_check *sc = v->user;
    bool               dep = lane_dependent(sc, s->u.let.value);
    if (dep) {
        if (sc->nvar == KILN_COUNTOF(sc->var))
            return KILN_WALK_STOP;
        sc->var[sc->nvar++] = s->u.let.var.id;
    }
    enum kiln_walk r = kiln_stmt_visit(v, s->u.let.body);
    if (dep)
        sc->nvar--;
    return r;
}

static bool
simd_ok(struct simd_check *sc, const struct kiln_stmt *s)
{
    struct kiln_stmt_visitor v = {.user = sc, .pre = simd_pre, .let = simd_let};
    return kiln_stmt_visit(&v, s) == KILN_WALK_GO;
}

void
cg_emit_vector_loop(struct cg *cg, const struct kiln_stmt *s)
{
    int64_t lanes;
    if (!kiln_expr_is_int(cg->ctx, s->u.for_.extent, &lanes) || lanes <= 0) {
        cg_fail(cg, KILN_ERR_INVALID, "vector loop needs a constant positive extent");
        return;
    }
    LLVMValueRef lo = cg_emit_scalar(cg, s->u.for_.min);
    if (!lo)
        return;
    int64_t           mult = cg_mult(cg, s->u.for_.min);
    struct simd_check sc = {.cg = cg, .var = {s->u.for_.var.id}, .nvar = 1};
    if (cg->lanes || lanes == 1 || lanes > MAX_LANES || !simd_ok(&sc, s->u.for_.body)) {
        cg_emit_serial_loop(cg, s->u.for_.var, lo, cg_const_i64(cg, lanes), lanes == 1 ? mult : 1,
                            s->u.for_.body);
        return;
    }
    /* Chunks: a lane count above the native width that is not a power of two is emitted as
     * power-of-two chunks, widest first (28 = 16 + 8 + 4, 14 = 8 + 4 + 2), the body once per
     * chunk. LLVM splits a <28 x float> into registers itself, but a splat into it becomes an
     * element-by-element insert sequence that is hoisted out of the loop and spilled: one stack
     * reload per broadcast use. The iterations are independent (the scheduler vectorises only
     * such loops), so running the chunks one after another keeps the loop's meaning. */
    int64_t native = kiln_target_f32_lanes(cg->t);
    bool    split = lanes > native && (lanes & (lanes - 1)) != 0;
    for (int64_t off = 0; off < lanes && !cg->failed;) {
        int64_t w = lanes;
        if (split)
            for (w = 1; 2 * w <= lanes - off;)
                w *= 2;
        LLVMValueRef at = off ? LLVMBuildAdd(cg->b, lo, cg_const_i64(cg, off), "") : lo;
        int64_t      m = off ? kiln_gcd64(mult, off) : mult;
        if (w == 1) {
            cg_emit_serial_loop(cg, s->u.for_.var, at, cg_const_i64(cg, 1), m, s->u.for_.body);
        } else {
            uint32_t     saved_lanes = cg->lanes;
            LLVMValueRef saved_mask = cg->mask;
            cg->lanes = (uint32_t)w;
            cg->mask = NULL;
            if (cg_bind(cg, s->u.for_.var, (struct cg_val){.v = at, .kind = CG_AFFINE, .stride = 1},
                        m)) {
                cg_emit_stmt(cg, s->u.for_.body);
                cg_unbind(cg, 1);
            }
            cg->lanes = saved_lanes;
            cg->mask = saved_mask;
        }
        off += w;
    }
}

static LLVMValueRef
all_lanes(struct cg *cg)
{
    return cg->mask ? cg->mask : cg_splat(cg, cg->lanes, LLVMConstInt(cg->t_i1, 1, 0));
}

/* Under a mask, branches into a block that runs only when some lane is active and returns the
 * join block (*from: the block that skips); without a mask returns NULL and does nothing. */
static LLVMBasicBlockRef
begin_any(struct cg *cg, LLVMBasicBlockRef *from)
{
    *from = NULL;
    if (!cg->mask)
        return NULL;
    LLVMValueRef      any = cg_any_active(cg);
    LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "lanes.any");
    LLVMBasicBlockRef end = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "lanes.end");
    *from = LLVMGetInsertBlock(cg->b);
    LLVMBuildCondBr(cg->b, any, yes, end);
    LLVMPositionBuilderAtEnd(cg->b, yes);
    return end;
}

/* <lanes x ptr> of buffer b at index vector iv (inbounds only when all lanes are active) */
/* Lanes [off, off + w) of vector v. */
static LLVMValueRef
lanes_of(struct cg *cg, LLVMValueRef v, unsigned off, unsigned w)
{
    LLVMValueRef idx[256];
    for (unsigned i = 0; i < w; i++)
        idx[i] = LLVMConstInt(cg->t_i32, off + i, 0);
    return LLVMBuildShuffleVector(cg->b, v, LLVMGetUndef(LLVMTypeOf(v)), LLVMConstVector(idx, w),
                                  "");
}

/* A gather of any lane count as gathers of power-of-two widths (at most 16 lanes), joined by
 * shuffles. LLVM pads odd widths with all-zero index lanes, and its x86 lowering can then give
 * a gather the same register as destination and index, which faults (#UD); chunks of legal
 * widths never need padding. Pass-through lanes are undefined (the caller zeroes masked lanes). */
static LLVMValueRef
gather_chunks(struct cg *cg, LLVMTypeRef vt, LLVMValueRef ptrs, LLVMValueRef mask, unsigned align)
{
    unsigned     n = LLVMGetVectorSize(vt);
    LLVMTypeRef  et = LLVMGetElementType(vt);
    LLVMValueRef out = LLVMGetUndef(vt);
    if (n > 256)
        return NULL;
    for (unsigned off = 0; off < n;) {
        unsigned w = 16;
        while (w > n - off)
            w /= 2;
        LLVMTypeRef  cvt = LLVMVectorType(et, w);
        LLVMValueRef cp = w == n ? ptrs : lanes_of(cg, ptrs, off, w);
        LLVMValueRef cm = w == n ? mask : lanes_of(cg, mask, off, w);
        LLVMTypeRef  ov[2] = {cvt, LLVMTypeOf(cp)};
        LLVMValueRef args[4] = {cp, LLVMConstInt(cg->t_i32, align, 0), cm, LLVMGetUndef(cvt)};
        LLVMValueRef g = cg_intrinsic(cg, "llvm.masked.gather", ov, 2, args, 4);
        if (!g)
            return NULL;
        if (w == n)
            return g;
        /* widen g to n lanes, then take lanes [off, off + w) from it */
        LLVMValueRef wide[256], pick[256];
        for (unsigned i = 0; i < n; i++) {
            bool in = i >= off && i < off + w;
            wide[i] = in ? LLVMConstInt(cg->t_i32, i - off, 0) : LLVMGetUndef(cg->t_i32);
            pick[i] = LLVMConstInt(cg->t_i32, in ? n + i : i, 0);
        }
        LLVMValueRef gw =
            LLVMBuildShuffleVector(cg->b, g, LLVMGetUndef(cvt), LLVMConstVector(wide, n), "");
        out = LLVMBuildShuffleVector(cg->b, out, gw, LLVMConstVector(pick, n), "");
        off += w;
    }
    return out;
}

static LLVMValueRef
gep_vector(struct cg *cg, LLVMTypeRef mt, uint32_t b, LLVMValueRef iv)
{
    if (cg->mask)
        return LLVMBuildGEP2(cg->b, mt, cg->fn.bufptr[b], &iv, 1, "");
    return LLVMBuildInBoundsGEP2(cg->b, mt, cg->fn.bufptr[b], &iv, 1, "");
}

struct cg_val
cg_emit_vector_load(struct cg *cg, kiln_expr load, struct cg_val idx)
{
    const struct kiln_node *n = &cg->ctx->node[load.id];
    uint32_t                b = (uint32_t)n->imm;
    enum kiln_dtype         dt = (enum kiln_dtype)cg->f->buf[b].dtype;
    LLVMTypeRef             mt = cg_mem_type(cg, dt);
    kiln_expr               ie = kiln_load_idx(cg->ctx, load, 0);
    struct cg_val           bad = {0};
    if (!mt)
        return bad;
    LLVMTypeRef  vt = LLVMVectorType(mt, cg->lanes);
    LLVMValueRef v;
    if (idx.kind == CG_UNIFORM) {
        LLVMBasicBlockRef from, end = begin_any(cg, &from);
        LLVMValueRef      p = cg_elem_ptr(cg, b, idx.v, true);
        if (!p)
            return bad;
        v = LLVMBuildLoad2(cg->b, mt, p, "");
        LLVMSetAlignment(v, cg_align(cg, b, cg_mult(cg, ie)));
        if (end) {
            LLVMBasicBlockRef at = LLVMGetInsertBlock(cg->b);
            LLVMBuildBr(cg->b, end);
            LLVMPositionBuilderAtEnd(cg->b, end);
            LLVMValueRef      phi = LLVMBuildPhi(cg->b, mt, "");
            LLVMValueRef      vals[2] = {v, LLVMConstNull(mt)};
            LLVMBasicBlockRef bbs[2] = {at, from};
            LLVMAddIncoming(phi, vals, bbs, 2);
            v = phi;
        }
        return (struct cg_val){.v = cg_to_register(cg, v, dt), .kind = CG_UNIFORM};
    }
    if (idx.kind == CG_AFFINE && idx.stride == 1) {
        LLVMValueRef p = cg_elem_ptr(cg, b, idx.v, !cg->mask);
        if (!p)
            return bad;
        unsigned align = cg_align(cg, b, cg_mult(cg, ie));
        if (!cg->mask) {
            v = LLVMBuildLoad2(cg->b, vt, p, "");
            LLVMSetAlignment(v, align);
        } else {
            LLVMTypeRef  ov[2] = {vt, cg->t_ptr};
            LLVMValueRef args[4] = {p, LLVMConstInt(cg->t_i32, align, 0), cg->mask,
                                    LLVMConstNull(vt)};
            v = cg_intrinsic(cg, "llvm.masked.load", ov, 2, args, 4);
        }
    } else {
        if (!cg->fn.bufptr[b]) {
            cg_fail(cg, KILN_ERR_INVALID, "buffer %s is used outside its allocation",
                    cg_buf_name(cg, b));
            return bad;
        }
        LLVMValueRef iv = cg_vector(cg, idx, KILN_DTYPE_I64);
        LLVMValueRef ptrs = gep_vector(cg, mt, b, iv);
        LLVMTypeRef  ov[2] = {vt, LLVMTypeOf(ptrs)};
        (void)ov;
        v = gather_chunks(cg, vt, ptrs, all_lanes(cg), cg_align(cg, b, 1));
        if (v && cg->mask)
            v = LLVMBuildSelect(cg->b, cg->mask, v, LLVMConstNull(vt), "");
    }
    if (v)
        v = cg_to_register(cg, v, dt);
    return (struct cg_val){.v = v, .kind = v ? CG_VARYING : CG_UNIFORM};
}

void
cg_emit_vector_store(struct cg *cg, const struct kiln_stmt *s)
{
    uint32_t        b = s->u.store.buf;
    enum kiln_dtype dt = (enum kiln_dtype)cg->f->buf[b].dtype;
    LLVMTypeRef     mt = cg_mem_type(cg, dt);
    kiln_expr       ie = {cg->ctx->node[s->u.store.index.id].kid[0]};
    struct cg_val   idx = cg_emit_index(cg, ie);
    struct cg_val   val = idx.v ? cg_emit(cg, s->u.store.value) : (struct cg_val){0};
    if (!mt || !idx.v || !val.v)
        return;
    if (idx.kind == CG_UNIFORM) {
        if (val.kind != CG_UNIFORM) {
            cg_fail(cg, KILN_ERR_INTERNAL, "vector store of lane values to one element of %s",
                    cg_buf_name(cg, b));
            return;
        }
        LLVMBasicBlockRef from, end = begin_any(cg, &from);
        LLVMValueRef      p = cg_elem_ptr(cg, b, idx.v, true);
        if (!p)
            return;
        LLVMValueRef v = cg_to_memory(cg, val.v, dt);
        LLVMSetAlignment(LLVMBuildStore(cg->b, v, p), cg_align(cg, b, cg_mult(cg, ie)));
        if (end) {
            LLVMBuildBr(cg->b, end);
            LLVMPositionBuilderAtEnd(cg->b, end);
        }
        return;
    }
    LLVMTypeRef  vt = LLVMVectorType(mt, cg->lanes);
    LLVMValueRef v = cg_vector(cg, val, dt);
    if (!v)
        return;
    v = cg_to_memory(cg, v, dt);
    if (idx.kind == CG_AFFINE && idx.stride == 1) {
        LLVMValueRef p = cg_elem_ptr(cg, b, idx.v, !cg->mask);
        if (!p)
            return;
        unsigned align = cg_align(cg, b, cg_mult(cg, ie));
        if (!cg->mask) {
            LLVMSetAlignment(LLVMBuildStore(cg->b, v, p), align);
        } else {
            LLVMTypeRef  ov[2] = {vt, cg->t_ptr};
            LLVMValueRef args[4] = {v, p, LLVMConstInt(cg->t_i32, align, 0), cg->mask};
            cg_intrinsic(cg, "llvm.masked.store", ov, 2, args, 4);
        }
        return;
    }
    if (!cg->fn.bufptr[b]) {
        cg_fail(cg, KILN_ERR_INVALID, "buffer %s is used outside its allocation",
                cg_buf_name(cg, b));
        return;
    }
    LLVMValueRef iv = cg_vector(cg, idx, KILN_DTYPE_I64);
    LLVMValueRef ptrs = gep_vector(cg, mt, b, iv);
    LLVMTypeRef  ov[2] = {vt, LLVMTypeOf(ptrs)};
    LLVMValueRef args[4] = {v, ptrs, LLVMConstInt(cg->t_i32, cg_align(cg, b, 1), 0), all_lanes(cg)};
    cg_intrinsic(cg, "llvm.masked.scatter", ov, 2, args, 4);
}
