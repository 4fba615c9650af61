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

struct kiln_cuda; /* one device, its primary context retained */

/* Opens device ordinal. Errors: KILN_ERR_UNSUPPORTED "no CUDA driver (libcuda.so.1: ...)" when
 * the driver library is absent, "no CUDA device (...)" when cuInit or cuDeviceGetCount finds
 * none; KILN_ERR_INVALID for an ordinal out of range; KILN_ERR_BACKEND naming the failed driver
 * call and its error name and string otherwise. */
enum kiln_status kiln_cuda_open(kiln_ctx *ctx, int ordinal, struct kiln_cuda **out);
void             kiln_cuda_close(struct kiln_cuda *cu);      /* NULL is a no-op */
const char      *kiln_cuda_arch(const struct kiln_cuda *cu); /* "sm_90" */
const char      *kiln_cuda_name(const struct kiln_cuda *cu); /* "NVIDIA H100 80GB HBM3" */

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

/* Device memory: *dptr is a device address (CUdeviceptr). The driver's out-of-memory error is
 * KILN_ERR_NOMEM. kiln_cuda_free ignores 0. Copies are synchronous. */
enum kiln_status kiln_cuda_alloc(kiln_ctx *ctx, struct kiln_cuda *cu, size_t bytes, uint64_t *dptr);
void             kiln_cuda_free(struct kiln_cuda *cu, uint64_t dptr);
enum kiln_status kiln_cuda_upload(kiln_ctx *ctx, struct kiln_cuda *cu, uint64_t dst,
                                  const void *src, size_t bytes);
enum kiln_status kiln_cuda_download(kiln_ctx *ctx, struct kiln_cuda *cu, void *dst, uint64_t src,
                                    size_t bytes);
/* Waits for all work on the device's context (cuCtxSynchronize). */
enum kiln_status kiln_cuda_sync(kiln_ctx *ctx, struct kiln_cuda *cu);

/* Work to time: queues work on the default stream (e.g. one kiln_cuda_launch). */
typedef enum kiln_status (*kiln_cuda_work_fn)(kiln_ctx *ctx, void *ud);
/* Times reps calls of fn(ctx, ud) after one untimed warm-up call: an event is recorded before
 * the first timed call and after each, the device is synchronised once at the end, and *ms is
 * the median of the times between consecutive events, in milliseconds. The first failing fn
 * stops it and its status is returned. reps must be positive. */
enum kiln_status kiln_cuda_time(kiln_ctx *ctx, struct kiln_cuda *cu, kiln_cuda_work_fn fn, void *ud,
                                int reps, double *ms);

#endif
