/* runtime/cuda_drv.h -- internal: the CUDA driver API's entry points, loaded with
 * dlopen("libcuda.so.1") once per process, for runtime/cuda.c (kiln's GPU runtime) and for
 * runtime/cuda_module.c (linked into generated modules of the cuda target, libkiln_rt.a). It
 * depends on nothing of kiln's (no kiln_ctx): libc, libdl and pthreads.
 *
 * kiln includes no CUDA header: the few types, constants and entry points used are declared
 * here (CUresult and CUdevice are ints, handles opaque pointers, CUdeviceptr an unsigned long
 * long). Entry points that cuda.h renames to a versioned symbol are looked up under that name
 * (cuMemAlloc_v2, cuCtxPushCurrent_v2, ...); two that gained a _v2 recently
 * (cuDevicePrimaryCtxRelease_v2, cuEventElapsedTime_v2) fall back to the plain name. */
#ifndef KILN_CUDA_DRV_H
#define KILN_CUDA_DRV_H

#include <stdbool.h>
#include <stddef.h>

typedef int                cu_result; /* CUresult */
typedef int                cu_device; /* CUdevice */
typedef void              *cu_context;
typedef void              *cu_module;
typedef void              *cu_function;
typedef void              *cu_event;
typedef void              *cu_stream;
typedef unsigned long long cu_deviceptr;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_NOT_FOUND = 500,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    CU_EVENT_DEFAULT = 0,
};

#define DRIVER_LIB "libcuda.so.1"
#define JIT_LOG    (64u << 10) /* bytes of the module loader's error log */

struct kiln_cu_driver {
    bool ok;
    char why[300];
    cu_result (*init)(unsigned flags);
    cu_result (*device_count)(int *n);
    cu_result (*device_get)(cu_device *dev, int ordinal);
    cu_result (*device_name)(char *name, int len, cu_device dev);
    cu_result (*device_attribute)(int *v, int attr, cu_device dev);
    cu_result (*primary_retain)(cu_context *c, cu_device dev);
    cu_result (*primary_release)(cu_device dev);
    cu_result (*ctx_push)(cu_context c);
    cu_result (*ctx_pop)(cu_context *c);
    cu_result (*ctx_sync)(void);
    cu_result (*ctx_get_current)(cu_context *c);
    cu_result (*module_load)(cu_module *m, const void *image, unsigned nopt, int *opt, void **val);
    cu_result (*module_unload)(cu_module m);
    cu_result (*module_function)(cu_function *f, cu_module m, const char *name);
    cu_result (*launch)(cu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, cu_stream s, void **args,
                        void **extra);
    cu_result (*mem_alloc)(cu_deviceptr *p, size_t bytes);
    cu_result (*mem_free)(cu_deviceptr p);
    cu_result (*htod)(cu_deviceptr dst, const void *src, size_t bytes);
    cu_result (*dtoh)(void *dst, cu_deviceptr src, size_t bytes);
    cu_result (*event_create)(cu_event *e, unsigned flags);
    cu_result (*event_record)(cu_event e, cu_stream s);
    cu_result (*event_sync)(cu_event e);
    cu_result (*event_elapsed)(float *ms, cu_event start, cu_event end);
    cu_result (*event_destroy)(cu_event e);
    cu_result (*error_name)(cu_result r, const char **s);
    cu_result (*error_string)(cu_result r, const char **s);
};

/* The driver's table, loaded on first use (thread-safe) and never unloaded; ok false (and why
 * the loader's message, for "no CUDA driver (...)") when it could not be loaded. */
const struct kiln_cu_driver *kiln_cu_drv(void);
/* "CUDA_ERROR_X: text" for r, into buf (the driver must be loaded). */
const char *kiln_cu_describe(cu_result r, char *buf, size_t size);

#endif
