/* runtime/runtime.h -- internal: the functions generated code calls, and the ABI entry that
 * checks DLPack arguments. Everything here is compiled into libkiln (for the in-process JIT)
 * and into libkiln_rt.a, the small PIC archive linked into every generated shared object.
 * Depends only on include/kiln_abi_impl.h (the contract with generated code), libc and OpenMP. */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include "kiln_abi_impl.h"

#include <stddef.h>
#include <stdint.h>

/* Body of an outlined parallel loop: runs iterations [begin, end); returns a kiln_abi_status
 * (nonzero stops the loop and is returned by kiln_rt_parallel_for). */
typedef int32_t (*kiln_rt_body_fn)(int64_t begin, int64_t end, void *closure);

/* Runs body over [0, n) split into contiguous chunks, one per thread (OpenMP static schedule).
 * Returns 0, or the first nonzero status a chunk returned (KILN_ABI_ERR_RUNTIME for a NULL
 * body). Calls made inside a parallel region run serially in the calling thread, as one chunk. */
int32_t kiln_rt_parallel_for(int64_t n, kiln_rt_body_fn body, void *closure);
void    kiln_rt_set_num_threads(int32_t n); /* 0 or negative = all cores */
int32_t kiln_rt_num_threads(void);

/* 64-byte aligned scratch memory for generated code; NULL on failure and for bytes <= 0. */
void *kiln_rt_alloc(int64_t bytes);
void  kiln_rt_free(void *p);

/* Checks args against d (count, NULL, device, dtype, shape, strides, alignment, and outputs
 * overlapping any other argument: KILN_ABI_ERR_ALIAS), then runs the kernel on the data
 * pointers (data + byte_offset). Returns the first failure with a message naming the argument,
 * e.g. "argument 1 (b) has shape [128, 33], expected [128, 32]"; err may be NULL. Never
 * crashes on misuse it can see; never allocates unless nargs > 64. runtime/README.md lists every
 * message. */
int32_t kiln_abi_call(const struct kiln_abi_desc *d, DLTensor *const *args, int32_t nargs,
                      char *err, size_t errsize);
/* kiln_prepare / kiln_call_prepared / kiln_prepared_free of include/kiln_abi.h over d. */
int32_t kiln_abi_prepare(const struct kiln_abi_desc *d, DLTensor *const *args, int32_t nargs,
                         void **prepared, char *err, size_t errsize);
int32_t kiln_abi_call_prepared(const struct kiln_abi_desc *d, const void *prepared,
                               DLTensor *const *args, int32_t nargs, char *err, size_t errsize);
void    kiln_abi_prepared_free(void *prepared);

/* 0 when this CPU has every checkable feature of the LLVM feature string `features` ("+avx2,
 * +fma,-xop,..."; NULL or "" checks nothing), else KILN_ABI_ERR_CPU with err naming the ones
 * it lacks. x86 only (cpuid and XCR0; the table in abi.c); elsewhere always 0. Every checked
 * call runs it on its descriptor's cpu_features (once per module); the loaders run it at load.
 * The kiln_cpu_check of kiln_abi.h. */
int32_t kiln_abi_cpu_check(const char *features, char *err, size_t errsize);
/* Arguments a caller passes to d's kiln_call: d->nargs less the embedded weights. */
int32_t kiln_abi_ncall(const struct kiln_abi_desc *d);
/* The state of a module whose kiln_call prepares its weight-derived buffers once (every weight
 * embedded): zero-initialised, one per module (runtime/so_entry.c). */
struct kiln_abi_lazy {
    _Atomic(void *) prepared; /* the handle, set once by the first successful call */
};
/* kiln_abi_call, except that a CPU module whose weights are all embedded and which has
 * weight-derived buffers prepares them at the first call (once, thread-safe) into lazy and
 * runs only the main phase from then on. kiln_abi_lazy_free releases the handle. */
int32_t kiln_abi_call_lazy(const struct kiln_abi_desc *d, struct kiln_abi_lazy *lazy,
                           DLTensor *const *args, int32_t nargs, char *err, size_t errsize);
void    kiln_abi_lazy_free(struct kiln_abi_lazy *lazy);
/* The embedded weights of d: returns their number; for 0 <= i < that number and t non-NULL,
 * fills *t with weight i (in argument order) as a compact CPU tensor pointing at the module's
 * read-only copy, and *name (when non-NULL) with its name. The kiln_embedded of kiln_abi.h. */
int32_t kiln_abi_embedded(const struct kiln_abi_desc *d, int32_t i, DLTensor *t, const char **name);

/* Monotonic time in seconds. */
double kiln_rt_now(void);

#endif
