/* codegen/codegen.h -- internal: targets and the code generators. A code generator takes a
 * lowered, flattened loop-nest function (struct kiln_func with flat indices, verified) plus the
 * module's metadata and emits native code: an object file, a shared object (linked with
 * libkiln_rt.a), or in-process JIT code. Generators never search or measure. */
#ifndef KILN_CODEGEN_H
#define KILN_CODEGEN_H

#include "../ir/ir.h"
#include "kiln_abi_impl.h"

#include <string.h>

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
    bool fast_math;          /* cuda: NVRTC's --use_fast_math ("-fast-math") */
};

enum kiln_status kiln_cg_target_parse(kiln_ctx *ctx, const char *spec, struct kiln_target *t);
/* "cuda [-arch=sm_XX] [-fast-math]" parses too: kind "cuda", the architecture in cpu (the
 * first device's when not named, sm_80 without one), fast_math; nothing else is set. */
/* kiln_cg_target_parse, except that a cuda target without -arch gets cuda_arch (when not NULL)
 * and no device is opened to ask for one (the tuner's: its runner processes own the device). */
enum kiln_status kiln_cg_target_parse_arch(kiln_ctx *ctx, const char *spec, const char *cuda_arch,
                                           struct kiln_target *t);
static inline bool
kiln_target_is_cuda(const struct kiln_target *t)
{
    return t && !strcmp(t->kind, "cuda");
}
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
    const uint8_t          *role;     /* per parameter: enum kiln_arg_role */
    const char             *metadata; /* JSON (include/kiln_abi.h) */
    const char             *source;   /* .kg text */
    /* NULL, or per parameter the values of a weight built into the module (converted to its
     * dtype when emitted; the descriptor's `embedded`), NULL for one the caller passes */
    const double *const *embed;
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

#define KILN_DL_BOOL 6 /* DLDataTypeCode kDLBool (DLPack >= 0.8) */

/* The DLPack type code and bits of a kiln dtype (the ABI's argument table). */
static inline void
kiln_cg_dl_type(enum kiln_dtype dt, uint8_t *code, uint8_t *bits)
{
    *bits = (uint8_t)(8 * kiln_dtype_size(dt));
    switch (dt) {
    case KILN_DTYPE_F32:
    case KILN_DTYPE_F16:
    case KILN_DTYPE_F64:
        *code = kDLFloat;
        return;
    case KILN_DTYPE_BF16:
        *code = kDLBfloat;
        return;
    case KILN_DTYPE_I8:
    case KILN_DTYPE_I16:
    case KILN_DTYPE_I32:
    case KILN_DTYPE_I64:
    case KILN_DTYPE_COUNT:
        *code = kDLInt;
        return;
    case KILN_DTYPE_U8:
    case KILN_DTYPE_U16:
    case KILN_DTYPE_U32:
    case KILN_DTYPE_U64:
        *code = kDLUInt;
        return;
    case KILN_DTYPE_BOOL:
        *code = KILN_DL_BOOL;
        return;
    }
    *code = kDLInt;
}

/* Threads compile-time work runs on when nothing says otherwise (the LLVM backend's parts,
 * the tuner's predictions): OMP_NUM_THREADS when it is a positive number (what the compiled
 * modules run on), else the online CPUs; 1 to 64. */
uint32_t kiln_cg_threads(void);

/* Runs argv (searching PATH when argv[0] has no slash), collecting its stdout and stderr into
 * *log (arena, at most about 1 MiB); returns its exit status (128 + signal when killed) or -1
 * when it could not be run (errno set). The C compiler and ptxas run through it. */
int kiln_cg_run(kiln_ctx *ctx, char *const *argv, struct kiln_buf *log);

/* Builds the shared object path from input (an object file or a C file) with the C compiler
 * that built kiln (KILN_CC -shared OPTS ... libkiln_rt.a, OpenMP, -ldl -lpthread -lm); who
 * names the backend in errors, which carry the compiler's output as detail. */
/* Creates a fresh directory <tmp>/kiln-XXXXXX (tmp: kiln_ctx_set_tmp_dir, else P_tmpdir) into
 * dir (size bytes); the caller removes it. Errors name who ("llvm: cannot create ..."). */
enum kiln_status kiln_cg_mkdtemp(kiln_ctx *ctx, const char *who, char *dir, size_t size);
enum kiln_status kiln_cg_cc_shared(kiln_ctx *ctx, const char *who, const char *const *opts,
                                   int nopt, const char *input, const char *path);

/* ---- CUDA C (codegen/cuda.c) ----
 * One `extern "C" __global__` kernel per root statement of f, to be launched in order with
 * the same arguments: f's parameters (device pointers, in f->param order), then the device
 * workspace (ws_bytes) and the prepared area (prep_bytes). Kernels that compute prepared
 * (weight-derived) buffers are marked, as the CPU module's PREPARE phase. */
struct kiln_cuda_kernel {
    const char *name; /* "NAME_kI" */
    uint32_t    grid[3], block[3];
    uint32_t    shared_bytes; /* static __shared__ memory */
    uint32_t    nvector;      /* float4 / float2 loads and stores in its code */
    bool        prepare;      /* stores prepared buffers: run once per kiln_prepare */
    /* its parameters: the module arguments it accesses (indices into f->param, ascending),
     * then the workspace and the prepared area */
    uint32_t *param, nparam;
};
struct kiln_cuda_source {
    const char              *text; /* the CUDA C translation unit, ctx-owned */
    struct kiln_cuda_kernel *kernel;
    uint32_t                 nkernel;
    int64_t                  ws_bytes;   /* f->ws_bytes, then other temporaries at root */
    int64_t                  prep_bytes; /* f->prep_bytes */
};
/* f: flat and verified. name: symbol-safe, prefixes the kernels' names. Errors name the
 * function and what CUDA cannot express (KILN_ERR_UNSUPPORTED: f16/bf16, a thread-private
 * buffer its threads would have to share, launch dimensions over the hardware's limits). */
enum kiln_status kiln_cg_cuda_source(kiln_ctx *ctx, const struct kiln_func *f, const char *name,
                                     struct kiln_cuda_source *out);
/* The argument alignment the cuda target's modules require, in bytes (cudaMalloc gives 256):
 * kiln_cg_cuda_align_params raises every parameter's align to it, so the metadata states it,
 * kiln_call checks it and cuda.c may use float4 accesses on parameters. */
#define KILN_CUDA_ARG_ALIGN 16
void kiln_cg_cuda_align_params(struct kiln_func *f);
/* A shared object of the cuda target at path (codegen/cuda_so.c): m's kernels compiled by NVRTC
 * for t's architecture, launched by kiln_call through the CUDA driver on device pointers. */
enum kiln_status kiln_cg_cuda_shared(kiln_ctx *ctx, const struct kiln_cg_module *m,
                                     const struct kiln_target *t, const char *path);

#endif
