/* codegen/codegen.h -- internal: targets and the code generators. A code generator takes a
 * lowered, flattened loop-nest function (struct kiln_func with flat indices, verified) plus the
 * module's metadata and emits native code: an object file, a shared object (linked with
 * libkiln_rt.a), or in-process JIT code. Generators never search or measure. */
#ifndef KILN_CODEGEN_H
#define KILN_CODEGEN_H

#include "../ir/ir.h"
#include "kiln_abi.h"

/* A CPU target: "llvm" (the host), "llvm -mcpu=sapphirerapids", "llvm -mattr=+avx2,-avx512f",
 * "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4". Unknown options or CPUs are errors. */
struct kiln_target {
    char kind[16]; /* "llvm" (later "cuda") */
    char triple[64];
    char cpu[64];
    char features[1024]; /* LLVM feature string: "+avx2,+fma,..." */
    int  vector_bits;    /* widest vector register used: 128, 256 or 512 */
    int  num_cores;
    long l1_bytes, l2_bytes; /* data caches per core, the host's (sysconf); 0 = not known */
};

enum kiln_status kiln_cg_target_parse(kiln_ctx *ctx, const char *spec, struct kiln_target *t);
/* f32 lanes of t's widest vector register (4 when unknown). */
static inline int
kiln_target_f32_lanes(const struct kiln_target *t)
{
    return t && t->vector_bits >= 64 ? t->vector_bits / 32 : 4;
}
/* The canonical string of t ("llvm -mtriple=... -mcpu=... -mattr=..."), ctx-owned. */
const char *kiln_cg_target_str(kiln_ctx *ctx, const struct kiln_target *t);

/* What one generated module holds. f's parameters are the graph's arguments then outputs. */
struct kiln_cg_module {
    const struct kiln_func *f;
    const char             *name;     /* symbol-safe */
    const uint8_t          *role;     /* per parameter: 0 input, 1 weight, 2 output */
    const char             *metadata; /* JSON (include/kiln_abi.h) */
    const char             *source;   /* .kg text */
};

enum kiln_status kiln_cg_llvm_object(kiln_ctx *ctx, const struct kiln_cg_module *m,
                                     const struct kiln_target *t, const char *path);
/* Emits an object and links it with libkiln_rt.a and OpenMP into a shared object at path. */
enum kiln_status kiln_cg_llvm_shared(kiln_ctx *ctx, const struct kiln_cg_module *m,
                                     const struct kiln_target *t, const char *path);
/* Textual LLVM IR of the module after optimisation (ctx-owned), for tests and --emit-llvm. */
enum kiln_status kiln_cg_llvm_ir(kiln_ctx *ctx, const struct kiln_cg_module *m,
                                 const struct kiln_target *t, const char **out);

/* In-process JIT (LLVM ORC). The handle owns the compiled code; free it with kiln_jit_free. */
struct kiln_jit;
enum kiln_status            kiln_cg_llvm_jit(kiln_ctx *ctx, const struct kiln_cg_module *m,
                                             const struct kiln_target *t, struct kiln_jit **out);
const struct kiln_abi_desc *kiln_jit_desc(const struct kiln_jit *j);
void                        kiln_jit_free(struct kiln_jit *j);

#endif
