/* include/kiln_abi_impl.h -- internal: the contract between the code kiln generates and
 * kiln's runtime (runtime/), beneath the public ABI of include/kiln_abi.h. A consumer of a
 * generated shared object never needs it: it uses kiln_abi.h alone.
 *
 * Who uses it: the code generators, which lay out `kiln_desc` (codegen/llvm.c builds it in
 * LLVM IR, codegen/cuda_so.c writes it as C that includes this header, compiled at build time
 * with -I include/); the runtime (runtime/abi.c, so_entry.c and cuda_module.c, linked into
 * every generated shared object, and libkiln's loader, runtime/module.c), and the measurement
 * runner (tuner/runner/), which reads a module's descriptor directly. Its layouts and values
 * are the ABI as much as kiln_abi.h's: a change that existing modules would not match needs a
 * new KILN_ABI_VERSION. */
#ifndef KILN_ABI_IMPL_H
#define KILN_ABI_IMPL_H

#include "kiln_abi.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One argument as the generated code expects it. */
struct kiln_abi_arg {
    const char    *name;
    uint8_t        code; /* DLDataTypeCode */
    uint8_t        bits;
    uint16_t       lanes;
    int32_t        ndim;
    const int64_t *shape;
    uint32_t       align; /* bytes the kernel assumes the data pointer is aligned to */
    uint8_t        role;  /* enum kiln_arg_role */
};

/* The kernel proper: data pointers of all arguments in order; returns a kiln_abi_status. */
typedef int32_t (*kiln_kernel_fn)(void *const *data);

/* Phases of kiln_kernel_phased_fn: PREPARE computes the weight-derived buffers into the
 * prepared area, MAIN computes the rest reading them; ALL = both (what kernel does, with a
 * prepared area of its own). */
enum kiln_abi_phase {
    KILN_ABI_PHASE_PREPARE = 1,
    KILN_ABI_PHASE_MAIN = 2,
    KILN_ABI_PHASE_ALL = 3,
};
/* A prepared handle (runtime/abi.c) is one allocation: a header of this many bytes, then a
 * CPU module's prepared area (prepared_bytes). The measurement runner evicts the whole of it. */
#define KILN_ABI_PREPARED_HEAD 64

/* The kernel with its phases: `prepared` is prepared_bytes bytes, 64-byte aligned; for a
 * kDLCUDA module it is a struct kiln_abi_cuda_area naming that much device memory. */
typedef int32_t (*kiln_kernel_phased_fn)(void *const *data, int32_t phase, void *prepared);

/* Emitted by the code generator as a constant global named `kiln_desc` in every module. */
struct kiln_abi_desc {
    int32_t                    abi_version;
    int32_t                    nargs;
    const struct kiln_abi_arg *args;
    kiln_kernel_fn             kernel;
    const char                *metadata; /* JSON above */
    const char                *source;   /* .kg text of the graph */
    int32_t                    device;   /* DLDeviceType the kernel runs on */
    /* NULL (and prepared_bytes 0) when the module has no weight-derived buffer */
    kiln_kernel_phased_fn kernel_phased;
    int64_t               prepared_bytes;
    /* Embedded weights (ABI version 2): NULL when the caller passes every argument, else nargs
     * entries, entry i the data of argument i when it is built into the module (a weight, in
     * its dtype, aligned to at least the argument's align), NULL when the caller passes it.
     * kiln_call takes the arguments whose entry is NULL, in order. */
    const void *const *embedded;
    /* The CPU features the code was built for: the target's LLVM feature string ("+avx2,+fma,
     * -xop,..."); NULL or "" when not known (the cuda target). Every call, and the loaders,
     * refuse a CPU that lacks a checkable one (runtime/abi.c, kiln_abi_cpu_check). */
    const char *cpu_features;
};

/* The cuda target: a module's kernel launches its CUDA kernels through the runtime. The
 * generated code holds one kiln_abi_cuda_module (mutable: `state` is the runtime's, zero at
 * first); its kiln_kernel returns kiln_rt_cuda_call(&module, data) and, when it has
 * weight-derived buffers (prep_bytes > 0), its kiln_kernel_phased returns
 * kiln_rt_cuda_call_phased(&module, data, phase, prepared). Each .so links its own copy of the
 * runtime, so these structs may grow at their ends without changing KILN_ABI_VERSION. */
struct kiln_abi_cuda_kernel {
    const char *name; /* extern "C" __global__ function in ptx */
    uint32_t    grid[3], block[3];
    uint32_t    shared_bytes; /* static shared memory (informational) */
    int32_t     phase;        /* KILN_ABI_PHASE_PREPARE: it computes weight-derived buffers
                               * (kiln_prepare launches it), else KILN_ABI_PHASE_MAIN */
    /* its parameters: the module arguments param[0..nparam) (indices into data), then the
     * workspace and the prepared area; param NULL: every argument in order */
    int32_t        nparam;
    const int32_t *param;
};
struct kiln_abi_cuda_module {
    const char                        *ptx; /* NUL-terminated PTX of all the kernels */
    const struct kiln_abi_cuda_kernel *kernel;
    int32_t                            nkernel, nargs;
    int64_t ws_bytes;   /* device workspace per call: temporaries (codegen/cuda.c) */
    int64_t prep_bytes; /* device area of the weight-derived buffers */
    void   *state;      /* the runtime's: the module loaded per CUDA context */
};
/* A prepared area of a cuda module (the `prepared` of its kiln_kernel_phased): device memory
 * and the CUDA context it was allocated in. kiln_prepare's handle holds one. */
struct kiln_abi_cuda_area {
    uint64_t dptr;    /* CUdeviceptr; 0 = none */
    void    *context; /* CUcontext */
};
/* Launches m's kernels in order on the calling thread's current CUDA context (else device 0's
 * primary context) and the legacy default stream, with data[0..nargs) (device pointers), the
 * workspace and the prepared area as arguments, and waits for them. Returns a kiln_abi_status
 * (KILN_ABI_ERR_RUNTIME with kiln_rt_cuda_error() saying why: no CUDA driver, a failed load or
 * launch; KILN_ABI_ERR_NOMEM when the device memory for the workspace is not there). The
 * weight-derived buffers are computed into an area of the call's own. */
int32_t kiln_rt_cuda_call(struct kiln_abi_cuda_module *m, void *const *data);
/* kiln_rt_cuda_call launching only the kernels of phase (KILN_ABI_PHASE_* bits) with the
 * weight-derived buffers in prepared, which must have been allocated in the context the call
 * runs on (else KILN_ABI_ERR_RUNTIME, saying so). prepared may be NULL for KILN_ABI_PHASE_ALL
 * (an area of the call's own) or when m has no weight-derived buffers. */
int32_t kiln_rt_cuda_call_phased(struct kiln_abi_cuda_module *m, void *const *data, int32_t phase,
                                 const struct kiln_abi_cuda_area *prepared);
/* A prepared area: bytes (> 0) of device memory in the context a call from this thread would
 * run on; KILN_ABI_ERR_RUNTIME or KILN_ABI_ERR_NOMEM with kiln_rt_cuda_error() on failure.
 * kiln_rt_cuda_area_free frees it (in its context) and zeroes *a; NULL or dptr 0 is a no-op. */
int32_t     kiln_rt_cuda_area_new(int64_t bytes, struct kiln_abi_cuda_area *a);
void        kiln_rt_cuda_area_free(struct kiln_abi_cuda_area *a);
const char *kiln_rt_cuda_error(void); /* this thread's last failure of kiln_rt_cuda_*, or "" */

#ifdef __cplusplus
}
#endif
#endif /* KILN_ABI_IMPL_H */
