/* runtime/cuda_drv.c -- the CUDA driver API loaded with dlopen (cuda_drv.h). */
#include "cuda_drv.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct kiln_cu_driver drv;
static pthread_once_t        drv_once = PTHREAD_ONCE_INIT;

static void
load_driver(void)
{
    dlerror();
    void *h = dlopen(DRIVER_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (!e)
            e = "dlopen failed";
        snprintf(drv.why, sizeof drv.why, "%s%s",
                 strncmp(e, DRIVER_LIB, strlen(DRIVER_LIB)) == 0 ? "" : DRIVER_LIB ": ", e);
        return;
    }
    struct {
        const char *name, *alt; /* alt: the name in drivers older than name */
        void       *slot;
    } fn[] = {
        {"cuInit", NULL, &drv.init},
        {"cuDeviceGetCount", NULL, &drv.device_count},
        {"cuDeviceGet", NULL, &drv.device_get},
        {"cuDeviceGetName", NULL, &drv.device_name},
        {"cuDeviceGetAttribute", NULL, &drv.device_attribute},
        {"cuDevicePrimaryCtxRetain", NULL, &drv.primary_retain},
        {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", &drv.primary_release},
        {"cuCtxPushCurrent_v2", NULL, &drv.ctx_push},
        {"cuCtxPopCurrent_v2", NULL, &drv.ctx_pop},
        {"cuCtxSynchronize", NULL, &drv.ctx_sync},
        {"cuCtxGetCurrent", NULL, &drv.ctx_get_current},
        {"cuModuleLoadDataEx", NULL, &drv.module_load},
        {"cuModuleUnload", NULL, &drv.module_unload},
        {"cuModuleGetFunction", NULL, &drv.module_function},
        {"cuLaunchKernel", NULL, &drv.launch},
        {"cuMemAlloc_v2", NULL, &drv.mem_alloc},
        {"cuMemFree_v2", NULL, &drv.mem_free},
        {"cuMemcpyHtoD_v2", NULL, &drv.htod},
        {"cuMemcpyDtoH_v2", NULL, &drv.dtoh},
        {"cuEventCreate", NULL, &drv.event_create},
        {"cuEventRecord", NULL, &drv.event_record},
        {"cuEventSynchronize", NULL, &drv.event_sync},
        {"cuEventElapsedTime_v2", "cuEventElapsedTime", &drv.event_elapsed},
        {"cuEventDestroy_v2", NULL, &drv.event_destroy},
        {"cuGetErrorName", NULL, &drv.error_name},
        {"cuGetErrorString", NULL, &drv.error_string},
    };
    for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) {
        void *p = dlsym(h, fn[i].name);
        if (!p && fn[i].alt)
            p = dlsym(h, fn[i].alt);
        if (!p) {
            snprintf(drv.why, sizeof drv.why, DRIVER_LIB " lacks %s", fn[i].name);
            dlclose(h);
            return;
        }
        memcpy(fn[i].slot, &p, sizeof p); /* no object-to-function pointer cast */
    }
    drv.ok = true;
}

const struct kiln_cu_driver *
kiln_cu_drv(void)
{
    pthread_once(&drv_once, load_driver);
    return &drv;
}

/* "CUDA_ERROR_X: text" for r, into buf. */
const char *
kiln_cu_describe(cu_result r, char *buf, size_t size)
{
    const char *name = NULL, *str = NULL;
    if (drv.error_name(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (drv.error_string(r, &str) != CUDA_SUCCESS)
        str = NULL;
    if (name)
        snprintf(buf, size, "%s: %s", name, str ? str : "no description");
    else
        snprintf(buf, size, "CUDA error %d", r);
    return buf;
}
