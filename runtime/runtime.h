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

/* Monotonic time in seconds. */
double kiln_rt_now(void);

#endif
