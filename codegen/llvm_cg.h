/* codegen/llvm_cg.h -- internal to the LLVM backend (codegen/target.c, llvm.c, llvm_expr.c,
 * llvm_vec.c, llvm_emit.c): the state of one module being generated, and the functions the
 * files share. Nothing outside codegen/ includes it; the backend's contract is codegen.h. */
#ifndef KILN_LLVM_CG_H
#define KILN_LLVM_CG_H

#include "codegen.h"

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/TargetMachine.h>

/* ---- target.c ---- */
/* Initialises LLVM's targets once per process (thread-safe). */
void kiln_cg_llvm_init(void);
/* A target machine for t (PIC, aggressive optimisation); NULL with the error recorded. */
LLVMTargetMachineRef kiln_cg_target_machine(kiln_ctx *ctx, const struct kiln_target *t);
/* Copies an LLVM message into the ctx's error detail (and disposes it) after a failure. */
void kiln_cg_set_detail(kiln_ctx *ctx, char *llvm_msg);
/* The same for an LLVMErrorRef (consumed). */
void kiln_cg_set_error_detail(kiln_ctx *ctx, LLVMErrorRef err);

/* ---- a value during code generation ----
 * In scalar code every value is UNIFORM (one scalar). Inside a SIMD (vector) loop of `lanes`
 * lanes, a value is UNIFORM (the same in every lane, kept scalar), AFFINE (an integer
 * base + stride * lane; base is the scalar lane-0 value) or VARYING (a <lanes x T> vector). */
enum cg_kind {
    CG_UNIFORM,
    CG_AFFINE,
    CG_VARYING,
};

struct cg_val {
    LLVMValueRef v;      /* scalar (UNIFORM, AFFINE base) or vector (VARYING); NULL = error */
    uint8_t      kind;   /* enum cg_kind */
    int64_t      stride; /* AFFINE */
};

struct cg_bind {
    uint32_t      var; /* expression id of the VAR node */
    struct cg_val val;
    int64_t       mult; /* the (lane-0) value is a known multiple of this power of two */
};

/* The LLVM function being filled. */
struct cg_fn {
    LLVMValueRef      fn;
    LLVMBasicBlockRef entry;  /* holds the allocas, then branches on */
    LLVMValueRef     *bufptr; /* per buffer: its data pointer here, or NULL */
    LLVMValueRef     *heap;   /* live kiln_rt_alloc results, freed on an error exit */
    uint32_t          nheap, capheap;
    LLVMValueRef      ws;    /* the workspace (kiln_body only), or NULL */
    LLVMValueRef      prep;  /* the prepared area (kiln_body with prepared buffers), or NULL */
    LLVMValueRef      phase; /* i32 KILN_ABI_PHASE_* bits (with prep) */
};

/* A view of a planned (workspace or prepared) buffer: the pointer its ALLOC bound. */
struct cg_view {
    LLVMValueRef p; /* NULL = empty slot */
    uint32_t     b;
};

struct cg {
    kiln_ctx                    *ctx;
    const struct kiln_func      *f;
    const struct kiln_target    *t;
    const struct kiln_cg_module *m;
    LLVMContextRef               lc;
    LLVMModuleRef                mod;
    LLVMBuilderRef               b;
    LLVMTypeRef                  t_i1, t_i8, t_i32, t_i64, t_f32, t_f64, t_ptr, t_void;
    struct cg_fn                 fn;
    uint32_t                    *balign; /* per buffer: alignment of its data pointer (bytes) */
    struct cg_bind              *env;
    uint32_t                     nenv, capenv;
    uint32_t                     lanes; /* 0 = scalar code, else inside a SIMD loop */
    LLVMValueRef                 mask;  /* <lanes x i1> of active lanes; NULL = all */
    uint32_t                     nparallel;
    const struct kiln_stmt      *root; /* the root statements (below the ALLOC chain) */
    struct cg_view              *vtab; /* views of planned buffers by pointer (open addressing) */
    uint32_t                     vcap, nview;
    LLVMMetadataRef             *scope; /* per buffer: its scope in the root statement, or NULL */
    uint32_t                    *scope_used; /* the buffers with a scope there */
    uint32_t                     nroot;      /* root statements tagged so far */
    bool                        *top; /* per buffer: allocated in the ALLOC chain above root */
    uint32_t                    *part_mark; /* per buffer: the part (+1) that last used it */
    uint32_t                    *part_used; /* the buffers the current part uses */
    uint32_t                     npart_used;
    bool                         in_phase; /* emitting the root statement itself (emit_phased) */
    bool                         failed;
};

/* ---- llvm.c: statements, functions, the module ---- */
/* Builds the module for m in lc (verified, then, with optimise, optimised with O3 for t's
 * target machine tm). */
enum kiln_status kiln_cg_llvm_build(kiln_ctx *ctx, const struct kiln_cg_module *m,
                                    const struct kiln_target *t, LLVMContextRef lc,
                                    LLVMTargetMachineRef tm, bool optimise, LLVMModuleRef *out);
/* The O3 pipeline on mod for tm; the module is kept either way. kiln_cg_llvm_o3 touches no
 * kiln context (for other threads) and returns LLVM's error, or NULL. */
enum kiln_status kiln_cg_llvm_optimise(kiln_ctx *ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm);
LLVMErrorRef     kiln_cg_llvm_o3(LLVMModuleRef mod, LLVMTargetMachineRef tm);
/* ---- llvm_split.c: one module as several objects, compiled at once ----
 * Compiles the verified, unoptimised module mod of context lc (both consumed: disposed) into
 * object files <dir>/kernelK.o, K < *nobj (obj[K]): the parts of kiln_body (kiln_body.partN,
 * each with the outlined functions only it uses) are dealt out by size over up to
 * KILN_CG_MAX_OBJECTS modules, each optimised with O3 and compiled in an LLVM context of its
 * own by one of `threads` threads (0: kiln_cg_threads()). Fewer than two parts, or one thread,
 * give one object, compiled as before. tm stays the caller's. */
#define KILN_CG_MAX_OBJECTS 8 /* kiln_cg_cc_shared takes the first object and 7 more */
enum kiln_status kiln_cg_llvm_split_objects(kiln_ctx *ctx, const struct kiln_target *t,
                                            LLVMContextRef lc, LLVMModuleRef mod,
                                            LLVMTargetMachineRef tm, uint32_t threads,
                                            const char *dir, char (*obj)[600], uint32_t *nobj);
/* Records an error (first wins) and marks the generation failed; returns st. */
enum kiln_status cg_fail(struct cg *cg, enum kiln_status st, const char *fmt, ...)
    KILN_PRINTF(3, 4);
const char           *cg_buf_name(const struct cg *cg, uint32_t b);
bool                  cg_bind(struct cg *cg, kiln_expr var, struct cg_val v, int64_t mult);
void                  cg_unbind(struct cg *cg, uint32_t n); /* drops the n newest bindings */
const struct cg_bind *cg_lookup(const struct cg *cg, kiln_expr var);
void                  cg_emit_stmt(struct cg *cg, const struct kiln_stmt *s);
/* A serial loop over [lo, lo+ext) whose body is emitted by cg_emit_stmt with var bound to the
 * (uniform) induction variable; works in scalar and SIMD code. */
void         cg_emit_serial_loop(struct cg *cg, kiln_expr var, LLVMValueRef lo, LLVMValueRef ext,
                                 int64_t mult, const struct kiln_stmt *body);
LLVMValueRef cg_const_i64(struct cg *cg, int64_t v);
/* Calls an intrinsic overloaded on types[0..n). */
LLVMValueRef cg_intrinsic(struct cg *cg, const char *name, LLVMTypeRef *types, unsigned ntypes,
                          LLVMValueRef *args, unsigned nargs);

/* ---- llvm_expr.c: expressions (scalar and SIMD) ---- */
LLVMTypeRef cg_type(struct cg *cg, enum kiln_dtype dt);     /* register type (bool = i1) */
LLVMTypeRef cg_mem_type(struct cg *cg, enum kiln_dtype dt); /* in memory (bool = i8) */
/* A loaded value (scalar or vector) of dt into its register type and back: bool i8 <-> i1,
 * f16 half <-> f32, bf16 i16 bits <-> f32 (rounded to nearest even). */
LLVMValueRef  cg_to_register(struct cg *cg, LLVMValueRef v, enum kiln_dtype dt);
LLVMValueRef  cg_to_memory(struct cg *cg, LLVMValueRef v, enum kiln_dtype dt);
struct cg_val cg_emit(struct cg *cg, kiln_expr e);
/* A flat i64 index: like cg_emit, but as a sum of terms in a fixed order plus a constant. */
struct cg_val cg_emit_index(struct cg *cg, kiln_expr e);
/* e as a scalar: emits it and fails (internal error) if it is not uniform. */
LLVMValueRef cg_emit_scalar(struct cg *cg, kiln_expr e);
/* v as a <lanes x T> vector (broadcast or materialised affine). */
LLVMValueRef cg_vector(struct cg *cg, struct cg_val v, enum kiln_dtype dt);
LLVMValueRef cg_splat(struct cg *cg, unsigned n, LLVMValueRef scalar);
/* Largest power of two dividing v, capped at 2^20 (0 gives the cap). */
int64_t cg_pow2(int64_t v);
/* Known power-of-two divisor of e's (lane-0) value, capped at 2^20. */
int64_t cg_mult(const struct cg *cg, kiln_expr e);
bool    cg_has_load(const struct cg *cg, kiln_expr e);
/* Element pointer of buffer b at a scalar i64 index; inbounds only when every access through
 * it is in bounds (not for masked vector accesses, whose lane-0 address may lie outside). */
LLVMValueRef cg_elem_ptr(struct cg *cg, uint32_t b, LLVMValueRef idx, bool inbounds);
/* Alignment (bytes) provable for an access of buffer b at an index that is a multiple of
 * mult. */
unsigned cg_align(const struct cg *cg, uint32_t b, int64_t mult);
/* i1: whether any lane of the current mask is active (true when there is no mask). */
LLVMValueRef cg_any_active(struct cg *cg);

/* ---- llvm_vec.c: SIMD loops ---- */
void cg_emit_vector_loop(struct cg *cg, const struct kiln_stmt *s);
/* A store in SIMD code (masked, vector, scatter or uniform). */
void cg_emit_vector_store(struct cg *cg, const struct kiln_stmt *s);
/* A load in SIMD code at index value idx (masked, vector, gather or uniform). */
struct cg_val cg_emit_vector_load(struct cg *cg, kiln_expr load, struct cg_val idx);

#endif
