/* runtime/cuda.h -- internal: one CUDA device through the driver API (libcuda.so.1, loaded with
 * dlopen on first use; nothing CUDA is linked at build time): PTX modules, kernel launches on
 * the default stream, device memory, copies, synchronisation and event timing.
 *
 * Every call makes the device's primary context current for its duration (push/pop), so a
 * struct kiln_cuda may be used from any thread; calls on one device from several threads at once
 * are serialised by the driver. Launches and the work they queue are asynchronous: a kernel's
 * faults surface at the next synchronising call (download, sync, timing). Modules and device
 * memory must be freed before their device is closed. Depends on util/ and libdl only. */
#ifndef KILN_RUNTIME_CUDA_H
#define KILN_RUNTIME_CUDA_H

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

/* struct kiln_cuda (one device, its primary context retained) and the device, memory, copy,
 * synchronisation and timing functions are public: include/kiln.h, "CUDA devices". */

/* A module loaded from NUL-terminated PTX (cuModuleLoadDataEx); a JIT failure is
 * KILN_ERR_BACKEND with the driver's error log in the error's detail. */
struct kiln_cuda_module;
enum kiln_status kiln_cuda_module_load(kiln_ctx *ctx, struct kiln_cuda *cu, const char *ptx,
                                       struct kiln_cuda_module **out);
void             kiln_cuda_module_free(struct kiln_cuda_module *m); /* NULL is a no-op */
/* Launches the module's kernel (its extern "C" name) on the default stream; args[i] points at
 * the value of the kernel's parameter i (a uint64_t device pointer, an int, ...). Does not wait.
 * A kernel the module lacks, or a zero grid or block dimension, is KILN_ERR_INVALID. */
enum kiln_status kiln_cuda_launch(kiln_ctx *ctx, struct kiln_cuda_module *m, const char *kernel,
                                  const uint32_t grid[3], const uint32_t block[3],
                                  uint32_t shared_bytes, void **args);

#endif
