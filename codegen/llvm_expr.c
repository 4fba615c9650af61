/* codegen/llvm_expr.c -- expressions to LLVM IR, for scalar code and inside SIMD loops.
 *
 * One emitter serves both: every result is a struct cg_val that is UNIFORM (a scalar), AFFINE
 * (integer base + stride * lane, kept as its scalar lane-0 value) or VARYING (a vector). In
 * scalar code everything is uniform. In a SIMD loop the loop variable starts AFFINE with
 * stride 1 and index arithmetic keeps that form as long as it can (adding uniforms, multiplying
 * by constants, floordiv/floormod by a constant dividing the stride), so a load whose flat
 * index stays affine with stride 1 becomes one vector load at the lane-0 address; anything else
 * is materialised as a vector and computed lane-wise. The operator helpers work on scalars and
 * vectors alike because LLVM's instructions and intrinsics do.
 *
 * Semantics follow ir/scalar.h (what the interpreters compute): float add/sub/mul carry only the
 * `contract` fast-math flag (so a*b+c may become an FMA), min/max propagate NaN
 * (llvm.minimum/maximum), integer floordiv/floormod round toward -inf and never trap (a
 * divisor of 0 gives 0; -1 cannot overflow), float-to-int casts saturate (llvm.fptosi.sat).
 * Unsigned dtypes share the integer types and compare, divide, widen and convert unsigned
 * (icmp ult, udiv, zext, uitofp, llvm.fptoui.sat, llvm.umin/umax).
 * SELECT is lazy: with a uniform condition and a load in a branch it becomes a branch and a
 * phi; with a varying condition each side is evaluated under its own lane mask, which the
 * loads honour. f32 exp, tanh and erf are inline polynomials (exp_f32, tanh_f32, erf_f32: the
 * same code for scalars and vectors, max errors measured against libm by tests/codegen vecmath:
 * exp 0.98 ulp, tanh 1.27, erf 2.23, sigmoid 2.28, the worst seen over seeds); f64 exp is
 * llvm.exp, f64 tanh and erf and sin ... atanh of both call libm (lane by lane in vectors).
 * f32 math runs in f32, and sigmoid is 1/(1+e) for x >= 0 and e/(1+e) below, e = exp(-|x|)
 * (exp_f32 in f32), so that it neither overflows nor flushes a tiny result to 0: equal to the
 * interpreters' value to a few ulps, not bit for bit. */
#include "llvm_cg.h"

#include <stdio.h>
#include <string.h>

LLVMTypeRef
cg_type(struct cg *cg, enum kiln_dtype dt)
{
    switch (dt) {
    case KILN_DTYPE_F32:
    case KILN_DTYPE_F16: /* computed in f32; half / bf16 bits in memory (cg_mem_type) */
    case KILN_DTYPE_BF16:
        return cg->t_f32;
    case KILN_DTYPE_F64:
        return cg->t_f64;
    case KILN_DTYPE_I8:
    case KILN_DTYPE_U8:
        return cg->t_i8;
    case KILN_DTYPE_I16:
    case KILN_DTYPE_U16:
        return LLVMInt16TypeInContext(cg->lc);
    case KILN_DTYPE_I32:
    case KILN_DTYPE_U32:
        return cg->t_i32;
    case KILN_DTYPE_I64:
    case KILN_DTYPE_U64:
        return cg->t_i64;
    case KILN_DTYPE_BOOL:
        return cg->t_i1;
    case KILN_DTYPE_COUNT:
        break;
    }
    cg_fail(cg, KILN_ERR_UNSUPPORTED, "dtype %s is not supported by the LLVM backend yet",
            dt < KILN_DTYPE_COUNT ? kiln_dtype_name(dt) : "void");
    return NULL;
}

LLVMTypeRef
cg_mem_type(struct cg *cg, enum kiln_dtype dt)
{
    if (dt == KILN_DTYPE_F16)
        return LLVMHalfTypeInContext(cg->lc);
    if (dt == KILN_DTYPE_BF16)
        return LLVMInt16TypeInContext(cg->lc);
    return dt == KILN_DTYPE_BOOL ? cg->t_i8 : cg_type(cg, dt);
}

/* ty with the element type of v's type (a vector type when v is a vector). */
static LLVMTypeRef
like(LLVMValueRef v, LLVMTypeRef ty)
{
    LLVMTypeRef vt = LLVMTypeOf(v);
    return LLVMGetTypeKind(vt) == LLVMVectorTypeKind ? LLVMVectorType(ty, LLVMGetVectorSize(vt))
                                                     : ty;
}

static LLVMValueRef iconst(struct cg *cg, LLVMTypeRef ty, int64_t v);

LLVMValueRef
cg_to_register(struct cg *cg, LLVMValueRef v, enum kiln_dtype dt)
{
    if (dt == KILN_DTYPE_BOOL)
        return LLVMBuildICmp(cg->b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
    if (dt == KILN_DTYPE_F16)
        return LLVMBuildFPExt(cg->b, v, like(v, cg->t_f32), "");
    if (dt == KILN_DTYPE_BF16) { /* the top half of an f32 */
        LLVMValueRef w = LLVMBuildZExt(cg->b, v, like(v, cg->t_i32), "");
        w = LLVMBuildShl(cg->b, w, iconst(cg, LLVMTypeOf(w), 16), "");
        return LLVMBuildBitCast(cg->b, w, like(v, cg->t_f32), "");
    }
    return v;
}

LLVMValueRef
cg_to_memory(struct cg *cg, LLVMValueRef v, enum kiln_dtype dt)
{
    LLVMBuilderRef bl = cg->b;
    if (dt == KILN_DTYPE_BOOL)
        return LLVMBuildZExt(bl, v, like(v, cg->t_i8), "");
    if (dt == KILN_DTYPE_F16)
        return LLVMBuildFPTrunc(bl, v, like(v, LLVMHalfTypeInContext(cg->lc)), "");
    if (dt == KILN_DTYPE_BF16) { /* round to nearest even, as kiln_scalar_round; NaN stays NaN */
        LLVMTypeRef  it = like(v, cg->t_i32);
        LLVMValueRef u = LLVMBuildBitCast(bl, v, it, "");
        LLVMValueRef odd =
            LLVMBuildAnd(bl, LLVMBuildLShr(bl, u, iconst(cg, it, 16), ""), iconst(cg, it, 1), "");
        LLVMValueRef r = LLVMBuildAdd(bl, u, LLVMBuildAdd(bl, odd, iconst(cg, it, 0x7fff), ""), "");
        r = LLVMBuildLShr(bl, r, iconst(cg, it, 16), "");
        LLVMValueRef nan = LLVMBuildFCmp(bl, LLVMRealUNO, v, v, "");
        LLVMValueRef q =
            LLVMBuildOr(bl, LLVMBuildLShr(bl, u, iconst(cg, it, 16), ""), iconst(cg, it, 0x40), "");
        r = LLVMBuildSelect(bl, nan, q, r, "");
        return LLVMBuildTrunc(bl, r, like(v, LLVMInt16TypeInContext(cg->lc)), "");
    }
    return v;
}

static struct cg_val
uniform(LLVMValueRef v)
{
    return (struct cg_val){.v = v, .kind = CG_UNIFORM};
}

static struct cg_val
varying(LLVMValueRef v)
{
    return (struct cg_val){.v = v, .kind = v ? CG_VARYING : CG_UNIFORM};
}

static struct cg_val
affine(LLVMValueRef base, int64_t stride)
{
    if (!stride)
        return uniform(base);
    return (struct cg_val){.v = base, .kind = CG_AFFINE, .stride = stride};
}

static const struct cg_val bad = {0};

LLVMValueRef
cg_splat(struct cg *cg, unsigned n, LLVMValueRef s)
{
    LLVMTypeRef  vt = LLVMVectorType(LLVMTypeOf(s), n);
    LLVMValueRef one =
        LLVMBuildInsertElement(cg->b, LLVMGetPoison(vt), s, LLVMConstInt(cg->t_i32, 0, 0), "");
    return LLVMBuildShuffleVector(cg->b, one, LLVMGetPoison(vt),
                                  LLVMConstNull(LLVMVectorType(cg->t_i32, n)), "");
}

/* A constant of (scalar or vector) integer type ty. */
static LLVMValueRef
iconst(struct cg *cg, LLVMTypeRef ty, int64_t v)
{
    if (LLVMGetTypeKind(ty) != LLVMVectorTypeKind)
        return LLVMConstInt(ty, (unsigned long long)v, 1);
    LLVMValueRef s = LLVMConstInt(LLVMGetElementType(ty), (unsigned long long)v, 1);
    return cg_splat(cg, LLVMGetVectorSize(ty), s);
}

static LLVMValueRef
fconst(LLVMTypeRef ty, double v, struct cg *cg)
{
    if (LLVMGetTypeKind(ty) != LLVMVectorTypeKind)
        return LLVMConstReal(ty, v);
    return cg_splat(cg, LLVMGetVectorSize(ty), LLVMConstReal(LLVMGetElementType(ty), v));
}

LLVMValueRef
cg_vector(struct cg *cg, struct cg_val v, enum kiln_dtype dt)
{
    if (!v.v)
        return NULL;
    switch ((enum cg_kind)v.kind) {
    case CG_VARYING:
        return v.v;
    case CG_UNIFORM:
        return cg_splat(cg, cg->lanes, v.v);
    case CG_AFFINE: {
        LLVMTypeRef  ty = cg_type(cg, dt);
        LLVMValueRef step[256];
        uint32_t     n = cg->lanes <= 256 ? cg->lanes : 256;
        for (uint32_t k = 0; k < n; k++)
            step[k] = LLVMConstInt(ty, (unsigned long long)((uint64_t)v.stride * k), 1);
        LLVMValueRef base = cg_splat(cg, cg->lanes, v.v);
        return LLVMBuildAdd(cg->b, base, LLVMConstVector(step, n), "");
    }
    }
    return NULL;
}

/* ---- analyses on the IR ---- */

int64_t
cg_pow2(int64_t v)
{
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    if (!u)
        return (int64_t)1 << 20;
    u &= ~u + 1; /* lowest set bit */
    return u > ((uint64_t)1 << 20) ? (int64_t)1 << 20 : (int64_t)u;
}

static int64_t
cap(int64_t m)
{
    return m > ((int64_t)1 << 20) ? (int64_t)1 << 20 : m;
}

int64_t
cg_mult(const struct cg *cg, kiln_expr e)
{
    const struct kiln_node *n = &cg->ctx->node[e.id];
    kiln_expr               a = {n->kid[0]}, b = {n->kid[1]};
    int64_t                 c;
    switch ((enum kiln_op)n->op) {
    case KILN_OP_INT:
        return cg_pow2(n->imm);
    case KILN_OP_VAR: {
        const struct cg_bind *bd = cg_lookup(cg, e);
        return bd ? bd->mult : 1;
    }
    case KILN_OP_ADD:
    case KILN_OP_SUB:
    case KILN_OP_MIN:
    case KILN_OP_MAX: {
        int64_t x = cg_mult(cg, a), y = cg_mult(cg, b);
        return x < y ? x : y;
    }
    case KILN_OP_SELECT: {
        int64_t x = cg_mult(cg, b), y = cg_mult(cg, (kiln_expr){n->kid[2]});
        return x < y ? x : y;
    }
    case KILN_OP_MUL:
        return cap(cg_mult(cg, a) * cg_mult(cg, b));
    case KILN_OP_NEG:
    case KILN_OP_ABS:
        return cg_mult(cg, a);
    case KILN_OP_CAST:
        return kiln_dtype_is_float((enum kiln_dtype)n->dtype) || n->dtype == KILN_DTYPE_BOOL
                       || kiln_dtype_is_float(kiln_expr_dtype(cg->ctx, a))
                   ? 1
                   : cg_mult(cg, a);
    case KILN_OP_FLOORMOD:
        if (kiln_expr_is_int(cg->ctx, b, &c) && c > 0 && cg_pow2(c) == c) {
            int64_t x = cg_mult(cg, a);
            return x < c ? x : c;
        }
        return 1;
    case KILN_OP_FLOORDIV:
        if (kiln_expr_is_int(cg->ctx, b, &c) && c > 0 && cg_pow2(c) == c) {
            int64_t x = cg_mult(cg, a);
            return x > c ? x / c : 1;
        }
        return 1;
    case KILN_OP_NIL:
    case KILN_OP_FLOAT:
    case KILN_OP_LIST:
    case KILN_OP_LOAD:
    case KILN_OP_DIV:
    case KILN_OP_POW:
    case KILN_OP_FMOD:
    case KILN_OP_EQ:
    case KILN_OP_NE:
    case KILN_OP_LT:
    case KILN_OP_LE:
    case KILN_OP_AND:
    case KILN_OP_OR:
    case KILN_OP_NOT:
    case KILN_OP_FLOOR:
    case KILN_OP_EXP:
    case KILN_OP_LOG:
    case KILN_OP_SQRT:
    case KILN_OP_RSQRT:
    case KILN_OP_TANH:
    case KILN_OP_ERF:
    case KILN_OP_SIGMOID:
    case KILN_OP_SIN:
    case KILN_OP_COS:
    case KILN_OP_TAN:
    case KILN_OP_ASIN:
    case KILN_OP_ACOS:
    case KILN_OP_ATAN:
    case KILN_OP_SINH:
    case KILN_OP_COSH:
    case KILN_OP_ASINH:
    case KILN_OP_ACOSH:
    case KILN_OP_ATANH:
    case KILN_OP_COUNT:
        break;
    }
    return 1;
}

bool
cg_has_load(const struct cg *cg, kiln_expr e)
{
    const struct kiln_node *n = &cg->ctx->node[e.id];
    if (n->op == KILN_OP_LOAD)
        return true;
    for (int i = 0; i < kiln_op_arity[n->op]; i++)
        if (n->kid[i] && cg_has_load(cg, (kiln_expr){n->kid[i]}))
            return true;
    return false;
}

/* ---- memory ---- */

LLVMValueRef
cg_elem_ptr(struct cg *cg, uint32_t b, LLVMValueRef idx, bool inbounds)
{
    if (!cg->fn.bufptr[b]) {
        cg_fail(cg, KILN_ERR_INVALID, "buffer %s is used outside its allocation",
                cg_buf_name(cg, b));
        return NULL;
    }
    LLVMTypeRef ty = cg_mem_type(cg, (enum kiln_dtype)cg->f->buf[b].dtype);
    if (!ty)
        return NULL;
    if (!inbounds)
        return LLVMBuildGEP2(cg->b, ty, cg->fn.bufptr[b], &idx, 1, "");
    return LLVMBuildInBoundsGEP2(cg->b, ty, cg->fn.bufptr[b], &idx, 1, "");
}

unsigned
cg_align(const struct cg *cg, uint32_t b, int64_t mult)
{
    int64_t es = (int64_t)kiln_dtype_size((enum kiln_dtype)cg->f->buf[b].dtype);
    int64_t a = cg->balign[b];
    int64_t want = cap(es * mult);
    int64_t r = a < want ? a : want;
    return (unsigned)(r < es ? es : r);
}

LLVMValueRef
cg_any_active(struct cg *cg)
{
    if (!cg->mask)
        return LLVMConstInt(cg->t_i1, 1, 0);
    LLVMTypeRef ty = LLVMTypeOf(cg->mask);
    return cg_intrinsic(cg, "llvm.vector.reduce.or", &ty, 1, &cg->mask, 1);
}

static struct cg_val
scalar_load(struct cg *cg, kiln_expr load, LLVMValueRef idx)
{
    const struct kiln_node *n = &cg->ctx->node[load.id];
    uint32_t                b = (uint32_t)n->imm;
    enum kiln_dtype         dt = (enum kiln_dtype)cg->f->buf[b].dtype;
    LLVMValueRef            p = cg_elem_ptr(cg, b, idx, true);
    if (!p)
        return bad;
    LLVMValueRef v = LLVMBuildLoad2(cg->b, cg_mem_type(cg, dt), p, "");
    LLVMSetAlignment(v, cg_align(cg, b, cg_mult(cg, kiln_load_idx(cg->ctx, load, 0))));
    return uniform(cg_to_register(cg, v, dt));
}

/* ---- operators on scalars or vectors ---- */

static LLVMValueRef
contract(LLVMValueRef v)
{
    if (v && LLVMIsAInstruction(v) && LLVMCanValueUseFastMathFlags(v))
        LLVMSetFastMathFlags(v, LLVMFastMathAllowContract);
    return v;
}

static LLVMValueRef
call1(struct cg *cg, const char *name, LLVMValueRef a)
{
    LLVMTypeRef ty = LLVMTypeOf(a);
    return cg_intrinsic(cg, name, &ty, 1, &a, 1);
}

static LLVMValueRef
call2(struct cg *cg, const char *name, LLVMValueRef a, LLVMValueRef b)
{
    LLVMTypeRef  ty = LLVMTypeOf(a);
    LLVMValueRef args[2] = {a, b};
    return cg_intrinsic(cg, name, &ty, 1, args, 2);
}

/* A libm function of one float argument (tanhf, erf, ...), applied lane by lane to vectors. */
static LLVMValueRef
libm(struct cg *cg, const char *fname, LLVMValueRef a)
{
    LLVMTypeRef ty = LLVMTypeOf(a);
    bool        vec = LLVMGetTypeKind(ty) == LLVMVectorTypeKind;
    LLVMTypeRef st = vec ? LLVMGetElementType(ty) : ty;
    char        name[32];
    snprintf(name, sizeof name, "%s%s", fname, st == cg->t_f32 ? "f" : "");
    LLVMTypeRef  fty = LLVMFunctionType(st, &st, 1, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(cg->mod, name);
    if (!fn) {
        fn = LLVMAddFunction(cg->mod, name, fty);
        static const char *const attrs[] = {"nounwind", "willreturn", "memory"};
        for (size_t i = 0; i < KILN_COUNTOF(attrs); i++) {
            unsigned k = LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i]));
            LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                    LLVMCreateEnumAttribute(cg->lc, k, 0));
        }
    }
    if (!vec)
        return LLVMBuildCall2(cg->b, fty, fn, &a, 1, "");
    LLVMValueRef r = LLVMGetPoison(ty);
    for (unsigned k = 0; k < LLVMGetVectorSize(ty); k++) {
        LLVMValueRef lane = LLVMConstInt(cg->t_i32, k, 0);
        LLVMValueRef x = LLVMBuildExtractElement(cg->b, a, lane, "");
        LLVMValueRef y = LLVMBuildCall2(cg->b, fty, fn, &x, 1, "");
        r = LLVMBuildInsertElement(cg->b, r, y, lane, "");
    }
    return r;
}

/* ---- f32 exp and tanh as inline polynomials (vector code stays vector code) ---- */

static bool
is_f32(struct cg *cg, LLVMTypeRef ty)
{
    return (LLVMGetTypeKind(ty) == LLVMVectorTypeKind ? LLVMGetElementType(ty) : ty) == cg->t_f32;
}

static LLVMValueRef
fmul(struct cg *cg, LLVMValueRef a, LLVMValueRef b)
{
    return contract(LLVMBuildFMul(cg->b, a, b, ""));
}

static LLVMValueRef
fadd(struct cg *cg, LLVMValueRef a, LLVMValueRef b)
{
    return contract(LLVMBuildFAdd(cg->b, a, b, ""));
}

/* c[0] + c[1] z + ... + c[n-1] z^(n-1) by Horner's rule (each step may become an FMA). */
static LLVMValueRef
horner(struct cg *cg, LLVMValueRef z, const double *c, size_t n)
{
    LLVMTypeRef  ty = LLVMTypeOf(z);
    LLVMValueRef p = fconst(ty, c[n - 1], cg);
    for (size_t i = n - 1; i-- > 0;)
        p = fadd(cg, fmul(cg, p, z), fconst(ty, c[i], cg));
    return p;
}

/* exp(x) in f32 (Cephes' method): n = round(x log2 e), r = x - n ln 2 with ln 2 split in a
 * part whose product with n is exact and the rest, e^r = 1 + r + r^2 P(r) on |r| <= ln2/2
 * (minimax coefficients from Moshier, "Methods and Programs for Mathematical Functions"), and
 * the scaling by 2^n as two exact multiplications by 2^(n/2) (so subnormal results round once
 * and 2^128 overflows to inf). x is clamped to [-104, 89] first (beyond it the result is 0 or
 * inf anyway); NaN gives NaN. in_range: the caller knows x is a number in [-104, 89] (no clamp,
 * no NaN test). Max error measured by tests/codegen vecmath. */
static LLVMValueRef
exp_f32(struct cg *cg, LLVMValueRef x, bool in_range)
{
    static const double P[] = {5.0000001201E-1, 1.6666665459E-1, 4.1665795894E-2,
                               8.3334519073E-3, 1.3981999507E-3, 1.9875691500E-4};
    LLVMBuilderRef      bl = cg->b;
    LLVMTypeRef         ty = LLVMTypeOf(x), ity = like(x, cg->t_i32);
    LLVMValueRef        xc = x; /* x > -104 ? x : -104 ...: one maxps / minps, NaN to -104 */
    if (!in_range) {
        LLVMValueRef lo = fconst(ty, -104, cg), hi = fconst(ty, 89, cg);
        xc = LLVMBuildSelect(bl, LLVMBuildFCmp(bl, LLVMRealOGT, x, lo, ""), x, lo, "");
        xc = LLVMBuildSelect(bl, LLVMBuildFCmp(bl, LLVMRealOLT, xc, hi, ""), xc, hi, "");
    }
    /* round to nearest by adding and subtracting 1.5 * 2^23 (|x log2 e| < 2^22) */
    LLVMValueRef magic = fconst(ty, 12582912.0, cg);
    LLVMValueRef n = LLVMBuildFSub(
        bl, fadd(cg, fmul(cg, xc, fconst(ty, 1.44269504088896341, cg)), magic), magic, "");
    LLVMValueRef r = fadd(cg, fmul(cg, n, fconst(ty, -0.693359375, cg)), xc);
    r = fadd(cg, fmul(cg, n, fconst(ty, 2.12194440E-4, cg)), r);
    LLVMValueRef y =
        fadd(cg, fadd(cg, fmul(cg, horner(cg, r, P, KILN_COUNTOF(P)), fmul(cg, r, r)), r),
             fconst(ty, 1, cg));
    LLVMValueRef ni = LLVMBuildFPToSI(bl, n, ity, "");
    LLVMValueRef n1 = LLVMBuildAShr(bl, ni, iconst(cg, ity, 1), "");
    LLVMValueRef n2 = LLVMBuildSub(bl, ni, n1, "");
    LLVMValueRef s1 = LLVMBuildBitCast(
        bl,
        LLVMBuildShl(bl, LLVMBuildAdd(bl, n1, iconst(cg, ity, 127), ""), iconst(cg, ity, 23), ""),
        ty, "");
    LLVMValueRef s2 = LLVMBuildBitCast(
        bl,
        LLVMBuildShl(bl, LLVMBuildAdd(bl, n2, iconst(cg, ity, 127), ""), iconst(cg, ity, 23), ""),
        ty, "");
    y = LLVMBuildFMul(bl, LLVMBuildFMul(bl, y, s1, ""), s2, "");
    return in_range ? y : LLVMBuildSelect(bl, LLVMBuildFCmp(bl, LLVMRealUNO, x, x, ""), x, y, "");
}

/* tanh(x) in f32: x + x^3 P(x^2) for |x| < 0.625 (odd minimax polynomial, Moshier's tanhf),
 * else sign(x) (1 - 2 / (e^(2|x|) + 1)) with exp_f32; both evaluated, one selected per lane.
 * NaN gives NaN. Max error measured by tests/codegen vecmath. */
static LLVMValueRef
tanh_f32(struct cg *cg, LLVMValueRef x)
{
    static const double P[] = {-3.33332819422E-1, 1.33314422036E-1, -5.37397155531E-2,
                               2.06390887954E-2, -5.70498872745E-3};
    LLVMBuilderRef      bl = cg->b;
    LLVMTypeRef         ty = LLVMTypeOf(x);
    LLVMValueRef        ax = call1(cg, "llvm.fabs", x), s = fmul(cg, x, x);
    LLVMValueRef small = fadd(cg, fmul(cg, fmul(cg, x, s), horner(cg, s, P, KILN_COUNTOF(P))), x);
    LLVMValueRef e = exp_f32(cg, LLVMBuildFMul(bl, ax, fconst(ty, 2, cg), ""), false);
    LLVMValueRef big = LLVMBuildFSub(
        bl, fconst(ty, 1, cg),
        LLVMBuildFDiv(bl, fconst(ty, 2, cg), LLVMBuildFAdd(bl, e, fconst(ty, 1, cg), ""), ""), "");
    big = call2(cg, "llvm.copysign", big, x);
    LLVMValueRef y = LLVMBuildSelect(
        bl, LLVMBuildFCmp(bl, LLVMRealOLT, ax, fconst(ty, 0.625, cg), ""), small, big, "");
    return LLVMBuildSelect(bl, LLVMBuildFCmp(bl, LLVMRealUNO, x, x, ""), x, y, "");
}

/* erf(x) in f32: x P(x^2) for |x| < 1, else sign(x) (1 - e^(-x^2) R(|x|)) with |x| clamped to 4
 * (where 1 - erf rounds to 0 in f32) and R(x) = erfc(x) e^(x^2), smooth on [1, 4], as a
 * polynomial in t = (x - 2.5) / 1.5. P (degree 7 in x^2) and R (degree 11) are the Chebyshev
 * interpolants of erf(sqrt z)/sqrt z on [0, 1] and of R on [1, 4] (at 200 nodes, truncated:
 * near minimax), converted to monomials. Both sides evaluated, one selected per lane; NaN
 * gives NaN. Max error measured by tests/codegen vecmath. */
static LLVMValueRef
erf_f32(struct cg *cg, LLVMValueRef x)
{
    static const double P[] = {1.12837917,    -0.376126385,   0.112837826,    -0.0268654383,
                               0.00522105341, -0.00084843965, 0.000112682536, -9.67359036e-06};
    static const double R[] = {0.210806358,    -0.111521005,    0.0561109584,   -0.0270057253,
                               0.0124840357,   -0.00556733291,  0.0024258851,   -0.00101711777,
                               0.000367868672, -0.000143948598, 9.64045152e-05, -3.69287235e-05};
    LLVMBuilderRef      bl = cg->b;
    LLVMTypeRef         ty = LLVMTypeOf(x);
    LLVMValueRef        ax = call1(cg, "llvm.fabs", x);
    LLVMValueRef        small = fmul(cg, x, horner(cg, fmul(cg, x, x), P, KILN_COUNTOF(P)));
    /* c = min(|x|, 4), and 4 for NaN: exp's argument is a number in [-16, 0] */
    LLVMValueRef four = fconst(ty, 4, cg);
    LLVMValueRef c =
        LLVMBuildSelect(bl, LLVMBuildFCmp(bl, LLVMRealOLT, ax, four, ""), ax, four, "");
    LLVMValueRef t =
        fmul(cg, LLVMBuildFSub(bl, c, fconst(ty, 2.5, cg), ""), fconst(ty, 1 / 1.5, cg));
    LLVMValueRef e = exp_f32(cg, LLVMBuildFNeg(bl, fmul(cg, c, c), ""), true);
    LLVMValueRef big =
        LLVMBuildFSub(bl, fconst(ty, 1, cg), fmul(cg, e, horner(cg, t, R, KILN_COUNTOF(R))), "");
    big = call2(cg, "llvm.copysign", big, x);
    LLVMValueRef y = LLVMBuildSelect(bl, LLVMBuildFCmp(bl, LLVMRealOLT, ax, fconst(ty, 1, cg), ""),
                                     small, big, "");
    return LLVMBuildSelect(bl, LLVMBuildFCmp(bl, LLVMRealUNO, x, x, ""), x, y, "");
}

/* floordiv (mod = false) or floormod of integers; c: the divisor when it is a constant. */
static LLVMValueRef
floor_divmod(struct cg *cg, bool mod, LLVMValueRef a, LLVMValueRef b, const int64_t *c)
{
    LLVMBuilderRef bl = cg->b;
    LLVMTypeRef    ty = LLVMTypeOf(a);
    LLVMValueRef   zero = LLVMConstNull(ty);
    if (c && *c == -1)
        return mod ? zero : LLVMBuildNeg(bl, a, "");
    if (c && *c > 0 && cg_pow2(*c) == *c) {
        int k = 0;
        while (((int64_t)1 << k) < *c)
            k++;
        return mod ? LLVMBuildAnd(bl, a, iconst(cg, ty, *c - 1), "")
                   : LLVMBuildAShr(bl, a, iconst(cg, ty, k), "");
    }
    LLVMValueRef sb = b, bz = NULL, bm1 = NULL;
    if (!c) { /* a zero or -1 divisor would trap: divide by 1 and fix the result up */
        bz = LLVMBuildICmp(bl, LLVMIntEQ, b, zero, "");
        bm1 = LLVMBuildICmp(bl, LLVMIntEQ, b, iconst(cg, ty, -1), "");
        sb = LLVMBuildSelect(bl, LLVMBuildOr(bl, bz, bm1, ""), iconst(cg, ty, 1), b, "");
    }
    LLVMValueRef q = LLVMBuildSDiv(bl, a, sb, "");
    LLVMValueRef r = LLVMBuildSRem(bl, a, sb, "");
    /* truncation rounded toward zero: step down when the remainder and divisor differ in sign */
    LLVMValueRef adj =
        LLVMBuildAnd(bl, LLVMBuildICmp(bl, LLVMIntNE, r, zero, ""),
                     LLVMBuildICmp(bl, LLVMIntSLT, LLVMBuildXor(bl, r, sb, ""), zero, ""), "");
    if (mod)
        return LLVMBuildSelect(bl, adj, LLVMBuildAdd(bl, r, sb, ""), r, "");
    q = LLVMBuildSelect(bl, adj, LLVMBuildSub(bl, q, iconst(cg, ty, 1), ""), q, "");
    if (!c) {
        q = LLVMBuildSelect(bl, bz, zero, q, "");
        q = LLVMBuildSelect(bl, bm1, LLVMBuildNeg(bl, a, ""), q, "");
    }
    return q;
}

/* floordiv or floormod of unsigned integers: udiv/urem, a divisor of 0 gives 0. */
static LLVMValueRef
udivmod(struct cg *cg, bool mod, LLVMValueRef a, LLVMValueRef b)
{
    LLVMBuilderRef bl = cg->b;
    LLVMValueRef   zero = LLVMConstNull(LLVMTypeOf(a));
    LLVMValueRef   bz = LLVMBuildICmp(bl, LLVMIntEQ, b, zero, "");
    LLVMValueRef   sb = LLVMBuildSelect(bl, bz, iconst(cg, LLVMTypeOf(a), 1), b, "");
    LLVMValueRef   r = mod ? LLVMBuildURem(bl, a, sb, "") : LLVMBuildUDiv(bl, a, sb, "");
    return LLVMBuildSelect(bl, bz, zero, r, "");
}

/* Binary operator op on operands of dtype dt (scalars or vectors of one shape). */
static LLVMValueRef
op_binary(struct cg *cg, enum kiln_op op, enum kiln_dtype dt, LLVMValueRef a, LLVMValueRef b,
          const int64_t *cdiv)
{
    LLVMBuilderRef bl = cg->b;
    bool           fl = kiln_dtype_is_float(dt), bo = dt == KILN_DTYPE_BOOL;
    bool           un = kiln_dtype_is_unsigned(dt);
    if (un && (op == KILN_OP_FLOORDIV || op == KILN_OP_FLOORMOD))
        return udivmod(cg, op == KILN_OP_FLOORMOD, a, b);
    switch (op) {
    case KILN_OP_ADD:
        return fl ? contract(LLVMBuildFAdd(bl, a, b, "")) : LLVMBuildAdd(bl, a, b, "");
    case KILN_OP_SUB:
        return fl ? contract(LLVMBuildFSub(bl, a, b, "")) : LLVMBuildSub(bl, a, b, "");
    case KILN_OP_MUL:
        return fl ? contract(LLVMBuildFMul(bl, a, b, "")) : LLVMBuildMul(bl, a, b, "");
    case KILN_OP_DIV:
        return LLVMBuildFDiv(bl, a, b, "");
    case KILN_OP_FLOORDIV:
        return floor_divmod(cg, false, a, b, cdiv);
    case KILN_OP_FLOORMOD:
        return floor_divmod(cg, true, a, b, cdiv);
    case KILN_OP_MIN:
        return call2(cg, fl ? "llvm.minimum" : un ? "llvm.umin" : "llvm.smin", a, b);
    case KILN_OP_MAX:
        return call2(cg, fl ? "llvm.maximum" : un ? "llvm.umax" : "llvm.smax", a, b);
    case KILN_OP_POW:
        return call2(cg, "llvm.pow", a, b);
    case KILN_OP_FMOD:
        return LLVMBuildFRem(bl, a, b, "");
    case KILN_OP_EQ:
        return fl ? LLVMBuildFCmp(bl, LLVMRealOEQ, a, b, "")
                  : LLVMBuildICmp(bl, LLVMIntEQ, a, b, "");
    case KILN_OP_NE:
        return fl ? LLVMBuildFCmp(bl, LLVMRealUNE, a, b, "")
                  : LLVMBuildICmp(bl, LLVMIntNE, a, b, "");
    case KILN_OP_LT:
        return fl         ? LLVMBuildFCmp(bl, LLVMRealOLT, a, b, "")
               : bo || un ? LLVMBuildICmp(bl, LLVMIntULT, a, b, "")
                          : LLVMBuildICmp(bl, LLVMIntSLT, a, b, "");
    case KILN_OP_LE:
        return fl         ? LLVMBuildFCmp(bl, LLVMRealOLE, a, b, "")
               : bo || un ? LLVMBuildICmp(bl, LLVMIntULE, a, b, "")
                          : LLVMBuildICmp(bl, LLVMIntSLE, a, b, "");
    case KILN_OP_AND:
        return LLVMBuildAnd(bl, a, b, "");
    case KILN_OP_OR:
        return LLVMBuildOr(bl, a, b, "");
    default:
        break;
    }
    cg_fail(cg, KILN_ERR_INTERNAL, "%s is not a binary operator", kiln_op_name[op]);
    return NULL;
}

static LLVMValueRef
op_unary(struct cg *cg, enum kiln_op op, enum kiln_dtype dt, LLVMValueRef a)
{
    LLVMBuilderRef bl = cg->b;
    LLVMTypeRef    ty = LLVMTypeOf(a);
    switch (op) {
    case KILN_OP_NOT:
        return LLVMBuildNot(bl, a, "");
    case KILN_OP_NEG:
        return kiln_dtype_is_float(dt) ? LLVMBuildFNeg(bl, a, "") : LLVMBuildNeg(bl, a, "");
    case KILN_OP_ABS:
        if (kiln_dtype_is_float(dt))
            return call1(cg, "llvm.fabs", a);
        if (kiln_dtype_is_unsigned(dt))
            return a;
        return call2(cg, "llvm.abs", a, LLVMConstInt(cg->t_i1, 0, 0));
    case KILN_OP_FLOOR:
        return call1(cg, "llvm.floor", a);
    case KILN_OP_EXP:
        return is_f32(cg, ty) ? exp_f32(cg, a, false) : call1(cg, "llvm.exp", a);
    case KILN_OP_LOG:
        return call1(cg, "llvm.log", a);
    case KILN_OP_SQRT:
        return call1(cg, "llvm.sqrt", a);
    case KILN_OP_RSQRT:
        return LLVMBuildFDiv(bl, fconst(ty, 1.0, cg), call1(cg, "llvm.sqrt", a), "");
    case KILN_OP_TANH:
        return is_f32(cg, ty) ? tanh_f32(cg, a) : libm(cg, "tanh", a);
    case KILN_OP_ERF:
        return is_f32(cg, ty) ? erf_f32(cg, a) : libm(cg, "erf", a);
    case KILN_OP_SIN:
        return libm(cg, "sin", a);
    case KILN_OP_COS:
        return libm(cg, "cos", a);
    case KILN_OP_TAN:
        return libm(cg, "tan", a);
    case KILN_OP_ASIN:
        return libm(cg, "asin", a);
    case KILN_OP_ACOS:
        return libm(cg, "acos", a);
    case KILN_OP_ATAN:
        return libm(cg, "atan", a);
    case KILN_OP_SINH:
        return libm(cg, "sinh", a);
    case KILN_OP_COSH:
        return libm(cg, "cosh", a);
    case KILN_OP_ASINH:
        return libm(cg, "asinh", a);
    case KILN_OP_ACOSH:
        return libm(cg, "acosh", a);
    case KILN_OP_ATANH:
        return libm(cg, "atanh", a);
    case KILN_OP_SIGMOID: {
        /* e = exp(-|x|) never overflows: 1/(1+e) for x >= 0, e/(1+e) below, so that sigmoid of
         * a large negative x is its (subnormal) value, not 1/(1+inf) = 0 */
        LLVMValueRef na = LLVMBuildFNeg(bl, call1(cg, "llvm.fabs", a), "");
        LLVMValueRef e = is_f32(cg, ty) ? exp_f32(cg, na, false) : call1(cg, "llvm.exp", na);
        LLVMValueRef s = LLVMBuildFDiv(bl, fconst(ty, 1.0, cg),
                                       LLVMBuildFAdd(bl, fconst(ty, 1.0, cg), e, ""), "");
        return LLVMBuildSelect(bl, LLVMBuildFCmp(bl, LLVMRealOGE, a, LLVMConstNull(ty), ""), s,
                               LLVMBuildFMul(bl, e, s, ""), "");
    }
    default:
        break;
    }
    cg_fail(cg, KILN_ERR_INTERNAL, "%s is not a unary operator", kiln_op_name[op]);
    return NULL;
}

static LLVMValueRef
op_cast(struct cg *cg, enum kiln_dtype from, enum kiln_dtype to, LLVMValueRef v)
{
    LLVMBuilderRef bl = cg->b;
    LLVMTypeRef    tt = cg_type(cg, to), vt = LLVMTypeOf(v);
    if (!tt)
        return NULL;
    if (to == KILN_DTYPE_F16 || to == KILN_DTYPE_BF16) { /* to f32, rounded to the dtype */
        LLVMValueRef f = op_cast(cg, from, KILN_DTYPE_F32, v);
        return f ? cg_to_register(cg, cg_to_memory(cg, f, to), to) : NULL;
    }
    if (LLVMGetTypeKind(vt) == LLVMVectorTypeKind)
        tt = LLVMVectorType(tt, LLVMGetVectorSize(vt));
    bool ff = kiln_dtype_is_float(from), tf = kiln_dtype_is_float(to);
    if (to == KILN_DTYPE_BOOL)
        return ff ? LLVMBuildFCmp(bl, LLVMRealUNE, v, LLVMConstNull(vt), "")
                  : LLVMBuildICmp(bl, LLVMIntNE, v, LLVMConstNull(vt), "");
    if (from == KILN_DTYPE_BOOL)
        return tf ? LLVMBuildUIToFP(bl, v, tt, "") : LLVMBuildZExt(bl, v, tt, "");
    if (ff && tf)
        return LLVMBuildFPCast(bl, v, tt, "");
    if (ff) {
        LLVMTypeRef ov[2] = {tt, vt};
        return cg_intrinsic(cg, kiln_dtype_is_unsigned(to) ? "llvm.fptoui.sat" : "llvm.fptosi.sat",
                            ov, 2, &v, 1);
    }
    bool un = kiln_dtype_is_unsigned(from);
    if (tf)
        return un ? LLVMBuildUIToFP(bl, v, tt, "") : LLVMBuildSIToFP(bl, v, tt, "");
    return LLVMBuildIntCast2(bl, v, tt, !un, "");
}

/* ---- the emitter ---- */

static struct cg_val
emit_binary(struct cg *cg, kiln_expr e)
{
    const struct kiln_node n = cg->ctx->node[e.id];
    enum kiln_op           op = (enum kiln_op)n.op;
    kiln_expr              ea = {n.kid[0]}, eb = {n.kid[1]};
    enum kiln_dtype        dt = kiln_expr_dtype(cg->ctx, ea);
    int64_t                c;
    bool                   cb = kiln_expr_is_int(cg->ctx, eb, &c);
    struct cg_val          a = cg_emit(cg, ea);
    struct cg_val          b = a.v ? cg_emit(cg, eb) : bad;
    if (!a.v || !b.v)
        return bad;
    if (a.kind == CG_UNIFORM && b.kind == CG_UNIFORM)
        return uniform(op_binary(cg, op, dt, a.v, b.v, cb ? &c : NULL));
    if (a.kind != CG_VARYING && b.kind != CG_VARYING && !kiln_dtype_is_float(dt)
        && dt != KILN_DTYPE_BOOL && !kiln_dtype_is_unsigned(dt)) {
        int64_t sa = a.kind == CG_AFFINE ? a.stride : 0, sb = b.kind == CG_AFFINE ? b.stride : 0;
        switch (op) {
        case KILN_OP_ADD:
            return affine(LLVMBuildAdd(cg->b, a.v, b.v, ""),
                          (int64_t)((uint64_t)sa + (uint64_t)sb));
        case KILN_OP_SUB:
            return affine(LLVMBuildSub(cg->b, a.v, b.v, ""),
                          (int64_t)((uint64_t)sa - (uint64_t)sb));
        case KILN_OP_MUL: {
            int64_t ca;
            if (cb && b.kind == CG_UNIFORM)
                return affine(LLVMBuildMul(cg->b, a.v, b.v, ""),
                              (int64_t)((uint64_t)sa * (uint64_t)c));
            if (kiln_expr_is_int(cg->ctx, ea, &ca) && a.kind == CG_UNIFORM)
                return affine(LLVMBuildMul(cg->b, a.v, b.v, ""),
                              (int64_t)((uint64_t)sb * (uint64_t)ca));
            break;
        }
        case KILN_OP_FLOORDIV:
            if (cb && c > 0 && b.kind == CG_UNIFORM && sa % c == 0)
                return affine(floor_divmod(cg, false, a.v, b.v, &c), sa / c);
            break;
        case KILN_OP_FLOORMOD:
            if (cb && c > 0 && b.kind == CG_UNIFORM && sa % c == 0)
                return uniform(floor_divmod(cg, true, a.v, b.v, &c));
            break;
        default:
            break;
        }
    }
    LLVMValueRef va = cg_vector(cg, a, dt), vb = cg_vector(cg, b, dt);
    return varying(op_binary(cg, op, dt, va, vb, cb ? &c : NULL));
}

static LLVMValueRef
materialise_like(struct cg *cg, struct cg_val v, bool vec, enum kiln_dtype dt)
{
    return vec ? cg_vector(cg, v, dt) : v.v;
}

static struct cg_val
emit_select(struct cg *cg, kiln_expr e)
{
    const struct kiln_node n = cg->ctx->node[e.id];
    kiln_expr              ec = {n.kid[0]}, ea = {n.kid[1]}, eb = {n.kid[2]};
    enum kiln_dtype        dt = (enum kiln_dtype)n.dtype;
    struct cg_val          c = cg_emit(cg, ec);
    if (!c.v)
        return bad;
    if (c.kind != CG_UNIFORM) { /* lanes choose: each side runs under its own mask */
        LLVMValueRef cv = cg_vector(cg, c, KILN_DTYPE_BOOL), saved = cg->mask;
        LLVMValueRef ma = saved ? LLVMBuildAnd(cg->b, saved, cv, "") : cv;
        LLVMValueRef nc = LLVMBuildNot(cg->b, cv, "");
        LLVMValueRef mb = saved ? LLVMBuildAnd(cg->b, saved, nc, "") : nc;
        cg->mask = ma;
        struct cg_val a = cg_emit(cg, ea);
        cg->mask = mb;
        struct cg_val b = a.v ? cg_emit(cg, eb) : bad;
        cg->mask = saved;
        if (!a.v || !b.v)
            return bad;
        return varying(LLVMBuildSelect(cg->b, cv, cg_vector(cg, a, dt), cg_vector(cg, b, dt), ""));
    }
    if (!cg_has_load(cg, ea) && !cg_has_load(cg, eb)) { /* both sides are safe to compute */
        struct cg_val a = cg_emit(cg, ea);
        struct cg_val b = a.v ? cg_emit(cg, eb) : bad;
        if (!a.v || !b.v)
            return bad;
        bool         vec = a.kind != CG_UNIFORM || b.kind != CG_UNIFORM;
        LLVMValueRef r = LLVMBuildSelect(cg->b, c.v, materialise_like(cg, a, vec, dt),
                                         materialise_like(cg, b, vec, dt), "");
        return vec ? varying(r) : uniform(r);
    }
    LLVMBasicBlockRef bt = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "sel.then");
    LLVMBasicBlockRef bf = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "sel.else");
    LLVMBasicBlockRef bm = LLVMAppendBasicBlockInContext(cg->lc, cg->fn.fn, "sel.end");
    LLVMBuildCondBr(cg->b, c.v, bt, bf);
    LLVMPositionBuilderAtEnd(cg->b, bt);
    struct cg_val     a = cg_emit(cg, ea);
    LLVMBasicBlockRef at = LLVMGetInsertBlock(cg->b);
    LLVMPositionBuilderAtEnd(cg->b, bf);
    struct cg_val     b = a.v ? cg_emit(cg, eb) : bad;
    LLVMBasicBlockRef af = LLVMGetInsertBlock(cg->b);
    if (!a.v || !b.v)
        return bad;
    bool vec = a.kind != CG_UNIFORM || b.kind != CG_UNIFORM;
    LLVMPositionBuilderAtEnd(cg->b, at);
    LLVMValueRef va = materialise_like(cg, a, vec, dt);
    LLVMBuildBr(cg->b, bm);
    LLVMPositionBuilderAtEnd(cg->b, af);
    LLVMValueRef vb = materialise_like(cg, b, vec, dt);
    LLVMBuildBr(cg->b, bm);
    LLVMPositionBuilderAtEnd(cg->b, bm);
    LLVMValueRef      phi = LLVMBuildPhi(cg->b, LLVMTypeOf(va), "");
    LLVMValueRef      vals[2] = {va, vb};
    LLVMBasicBlockRef from[2] = {at, af};
    LLVMAddIncoming(phi, vals, from, 2);
    return vec ? varying(phi) : uniform(phi);
}

/* ---- flat indices as sums of terms ----
 * An index like ((io*6 + ii)*512 + jo*32 + jv*16 + ji) is emitted as the sum of its
 * non-constant terms in a fixed order (io*3072 + jo*32 + ...) plus one constant (the unrolled
 * ii, jv and every literal): accesses that differ only in unrolled variables then share one
 * address value and differ by constant offsets, which LLVM's alias analysis can separate
 * (it cannot see through `x | y` of two variables, what instcombine makes of the original
 * form with power-of-two extents). The terms are kiln_affine's (ir/arith.c); an index whose
 * coefficients would overflow int64 is emitted as written. */

struct term {
    uint32_t atom; /* expression id */
    int64_t  coef;
};

struct terms {
    const struct cg *cg;
    struct term      t[24];
    uint32_t         n;
    int64_t          c;
};

static int64_t
wrapmul(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a * (uint64_t)b);
}

static bool
const_value(const struct cg *cg, kiln_expr e, int64_t *v)
{
    if (kiln_expr_is_int(cg->ctx, e, v))
        return true;
    const struct kiln_node *n = &cg->ctx->node[e.id];
    if (n->op != KILN_OP_VAR)
        return false;
    const struct cg_bind *bd = cg_lookup(cg, e);
    if (!bd || bd->val.kind != CG_UNIFORM || !bd->val.v || !LLVMIsAConstantInt(bd->val.v))
        return false;
    *v = LLVMConstIntGetSExtValue(bd->val.v);
    return true;
}

static bool
term_const(void *ud, kiln_expr e, int64_t *v)
{
    const struct terms *ts = ud;
    return const_value(ts->cg, e, v);
}

/* Adds scale * atom to ts, merging equal atoms; false when ts is full or a coefficient
 * overflows. */
static bool
term_add(void *ud, kiln_expr e, int64_t scale)
{
    struct terms *ts = ud;
    for (uint32_t i = 0; i < ts->n; i++)
        if (ts->t[i].atom == e.id)
            return !kiln_add_overflows(ts->t[i].coef, scale, &ts->t[i].coef);
    if (ts->n == KILN_COUNTOF(ts->t))
        return false;
    ts->t[ts->n++] = (struct term){e.id, scale};
    return true;
}

struct cg_val
cg_emit_index(struct cg *cg, kiln_expr e)
{
    struct terms          ts = {.cg = cg};
    struct kiln_affine_fn fn = {term_const, term_add, &ts};
    if (kiln_expr_dtype(cg->ctx, e) != KILN_DTYPE_I64 || !kiln_affine(cg->ctx, e, 1, &ts.c, &fn))
        return cg_emit(cg, e);
    for (uint32_t i = 1; i < ts.n; i++) /* a fixed order: by expression id */
        for (uint32_t j = i; j > 0 && ts.t[j - 1].atom > ts.t[j].atom; j--) {
            struct term x = ts.t[j];
            ts.t[j] = ts.t[j - 1];
            ts.t[j - 1] = x;
        }
    LLVMValueRef sum = NULL;
    int64_t      stride = 0;
    for (uint32_t i = 0; i < ts.n; i++) {
        if (!ts.t[i].coef)
            continue;
        struct cg_val v = cg_emit(cg, (kiln_expr){ts.t[i].atom});
        if (!v.v)
            return v;
        if (v.kind == CG_VARYING)
            return cg_emit(cg, e);
        if (v.kind == CG_AFFINE)
            stride = (int64_t)((uint64_t)stride + (uint64_t)wrapmul(ts.t[i].coef, v.stride));
        if (LLVMIsAConstantInt(v.v)) {
            ts.c = (int64_t)((uint64_t)ts.c
                             + (uint64_t)wrapmul(ts.t[i].coef, LLVMConstIntGetSExtValue(v.v)));
            continue;
        }
        LLVMValueRef term =
            ts.t[i].coef == 1 ? v.v : LLVMBuildMul(cg->b, v.v, cg_const_i64(cg, ts.t[i].coef), "");
        sum = sum ? LLVMBuildAdd(cg->b, sum, term, "") : term;
    }
    if (!sum)
        sum = cg_const_i64(cg, ts.c);
    else if (ts.c)
        sum = LLVMBuildAdd(cg->b, sum, cg_const_i64(cg, ts.c), "");
    return affine(sum, stride);
}

/* INT, FLOAT, VAR */
static struct cg_val
emit_leaf(struct cg *cg, kiln_expr e)
{
    const struct kiln_node n = cg->ctx->node[e.id];
    enum kiln_dtype        dt = (enum kiln_dtype)n.dtype;
    if (n.op == KILN_OP_INT || n.op == KILN_OP_FLOAT) {
        LLVMTypeRef ty = cg_type(cg, dt);
        if (!ty)
            return bad;
        if (n.op == KILN_OP_INT)
            return uniform(LLVMConstInt(ty, (unsigned long long)n.imm, 1));
        return uniform(LLVMConstReal(ty, kiln_expr_float_value(cg->ctx, e)));
    }
    const struct cg_bind *bd = cg_lookup(cg, e);
    if (bd)
        return bd->val;
    cg_fail(cg, KILN_ERR_INVALID, "variable %s is not bound",
            kiln_var_kind_of(n.imm) == KILN_VAR_NAMED ? kiln_sym_str(cg->ctx, kiln_var_index(n.imm))
                                                      : "(axis or reduce)");
    return bad;
}

struct cg_val
cg_emit(struct cg *cg, kiln_expr e)
{
    if (cg->failed)
        return bad;
    const struct kiln_node n = cg->ctx->node[e.id];
    enum kiln_dtype        dt = (enum kiln_dtype)n.dtype;
    switch (kiln_op_kind((enum kiln_op)n.op)) {
    case KILN_OPK_LEAF:
        return emit_leaf(cg, e);
    case KILN_OPK_LOAD: {
        kiln_expr idx = kiln_load_idx(cg->ctx, e, 0);
        if (!idx.id || kiln_load_nidx(cg->ctx, e) != 1 || (uint32_t)n.imm >= cg->f->nbuf) {
            cg_fail(cg, KILN_ERR_INVALID, "load needs one flat index of an existing buffer");
            return bad;
        }
        struct cg_val iv = cg_emit_index(cg, idx);
        if (!iv.v)
            return bad;
        if (cg->lanes)
            return cg_emit_vector_load(cg, e, iv);
        return scalar_load(cg, e, iv.v);
    }
    case KILN_OPK_SELECT:
        return emit_select(cg, e);
    case KILN_OPK_CAST: {
        kiln_expr       ea = {n.kid[0]};
        enum kiln_dtype from = kiln_expr_dtype(cg->ctx, ea);
        struct cg_val   a = cg_emit(cg, ea);
        if (!a.v)
            return bad;
        if (a.kind == CG_UNIFORM)
            return uniform(op_cast(cg, from, dt, a.v));
        return varying(op_cast(cg, from, dt, cg_vector(cg, a, from)));
    }
    case KILN_OPK_BINARY:
        return emit_binary(cg, e);
    case KILN_OPK_UNARY: {
        struct cg_val a = cg_emit(cg, (kiln_expr){n.kid[0]});
        if (!a.v)
            return bad;
        if (a.kind == CG_UNIFORM)
            return uniform(op_unary(cg, (enum kiln_op)n.op, dt, a.v));
        if (a.kind == CG_AFFINE && n.op == KILN_OP_NEG)
            return affine(LLVMBuildNeg(cg->b, a.v, ""), (int64_t)(0 - (uint64_t)a.stride));
        return varying(op_unary(cg, (enum kiln_op)n.op, dt, cg_vector(cg, a, dt)));
    }
    case KILN_OPK_NONE:
    case KILN_OPK_LIST:
        break;
    }
    cg_fail(cg, KILN_ERR_INTERNAL, "cannot generate code for a %s node",
            n.op < KILN_OP_COUNT ? kiln_op_name[n.op] : "?");
    return bad;
}

LLVMValueRef
cg_emit_scalar(struct cg *cg, kiln_expr e)
{
    struct cg_val v = cg_emit(cg, e);
    if (v.v && v.kind != CG_UNIFORM) {
        cg_fail(cg, KILN_ERR_INTERNAL, "expected a lane-invariant value in a vector loop");
        return NULL;
    }
    return v.v;
}
