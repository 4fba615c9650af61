/* runtime/cuda.c -- the CUDA driver API, loaded with dlopen("libcuda.so.1"): one device and its
 * primary context, PTX modules, launches on the default stream, device memory and event timing
 * (contract in cuda.h).
 *
 * Choices. kiln includes no CUDA header: the handful of types, constants and entry points used
 * here are declared below (CUresult and CUdevice are ints, the handles opaque pointers,
 * CUdeviceptr an unsigned long long). Entry points that cuda.h renames to a versioned symbol are
 * looked up under that name (cuMemAlloc_v2, cuCtxPushCurrent_v2, ...); two that gained a _v2
 * recently (cuDevicePrimaryCtxRelease_v2, cuEventElapsedTime_v2) fall back to the plain name for
 * older drivers. The driver is loaded once per process (pthread_once) and never unloaded; when
 * it is absent the loader's message is kept for "no CUDA driver (...)". The device's primary
 * context (the one the CUDA runtime and PyTorch use too) is retained at open and released at
 * close, and pushed/popped around every call, so nothing depends on which context the calling
 * thread had current. Every driver result is checked and a failure names the call, with the
 * driver's error name and string. Depends on util and libdl. */
#include "cuda.h"

#include "../util/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static struct {
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
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

struct kiln_cuda {
    kiln_alloc_fn alloc; /* the opening context's allocator hook (NULL = libc) */
    void         *alloc_ud;
    cu_device     dev;
    cu_context    context; /* the primary context, retained */
    char          arch[16];
    char          name[256];
};

struct kiln_cuda_module {
    kiln_alloc_fn     alloc;
    void             *alloc_ud;
    struct kiln_cuda *cu;
    cu_module         mod;
};

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
    for (size_t i = 0; i < KILN_COUNTOF(fn); i++) {
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

/* "CUDA_ERROR_X: text" for r, into buf. */
static const char *
describe(cu_result r, char *buf, size_t size)
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

/* Fails naming call and r; when that is the error recorded, attaches detail (copied). */
static enum kiln_status
cu_fail_detail(kiln_ctx *ctx, const char *where, const char *call, cu_result r, const char *detail)
{
    char             buf[200];
    bool             fresh = !ctx->has_err;
    enum kiln_status st = r == CUDA_ERROR_OUT_OF_MEMORY ? KILN_ERR_NOMEM : KILN_ERR_BACKEND;
    kiln_fail(ctx, st, "cuda", where, "cuda: %s failed: %s", call, describe(r, buf, sizeof buf));
    if (fresh && ctx->has_err && detail && *detail)
        ctx->err.detail = kiln_arena_strdup(ctx, detail);
    return st;
}
#define CU_FAIL(ctx, call, r) cu_fail_detail(ctx, KILN_WHERE, call, r, NULL)

static enum kiln_status
null_arg(kiln_ctx *ctx, const char *fn, const char *arg)
{
    return KILN_FAIL(ctx, KILN_ERR_INVALID, "cuda", "%s: %s is NULL", fn, arg);
}

/* Makes cu's context current for this thread until pop(). */
static enum kiln_status
push(kiln_ctx *ctx, const struct kiln_cuda *cu)
{
    cu_result r = drv.ctx_push(cu->context);
    return r == CUDA_SUCCESS ? KILN_OK : CU_FAIL(ctx, "cuCtxPushCurrent_v2", r);
}

static void
pop(void)
{
    cu_context c;
    drv.ctx_pop(&c);
}

static void
release(kiln_alloc_fn alloc, void *ud, void *p, size_t size)
{
    if (alloc)
        alloc(ud, p, size, 0);
    else
        free(p);
}

enum kiln_status
kiln_cuda_open(kiln_ctx *ctx, int ordinal, struct kiln_cuda **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!out)
        return null_arg(ctx, "kiln_cuda_open", "out");
    pthread_once(&drv_once, load_driver);
    if (!drv.ok)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "cuda", "no CUDA driver (%s)", drv.why);
    char      buf[200];
    cu_result r = drv.init(0);
    if (r == CUDA_ERROR_NO_DEVICE)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "cuda", "no CUDA device (cuInit: %s)",
                         describe(r, buf, sizeof buf));
    if (r == CUDA_ERROR_STUB_LIBRARY)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "cuda",
                         "no CUDA driver (" DRIVER_LIB " is the toolkit's stub: %s)",
                         describe(r, buf, sizeof buf));
    if (r != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuInit", r);
    int count = 0;
    r = drv.device_count(&count);
    if (r == CUDA_ERROR_NO_DEVICE || (r == CUDA_SUCCESS && count <= 0))
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "cuda",
                         "no CUDA device (cuDeviceGetCount found none)");
    if (r != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuDeviceGetCount", r);
    if (ordinal < 0 || ordinal >= count)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "cuda",
                         "CUDA device %d does not exist (this machine has %d, numbered from 0)",
                         ordinal, count);

    cu_device dev;
    int       major = 0, minor = 0;
    char      name[256] = "";
    if ((r = drv.device_get(&dev, ordinal)) != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuDeviceGet", r);
    if ((r = drv.device_name(name, (int)sizeof name - 1, dev)) != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuDeviceGetName", r);
    if ((r = drv.device_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
            != CUDA_SUCCESS
        || (r = drv.device_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
               != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuDeviceGetAttribute", r);
    struct kiln_cuda *cu = kiln_mem_realloc(ctx, NULL, 0, sizeof *cu);
    if (!cu)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "cuda", "opening CUDA device %d: out of memory",
                         ordinal);
    memset(cu, 0, sizeof *cu);
    if ((r = drv.primary_retain(&cu->context, dev)) != CUDA_SUCCESS) {
        kiln_mem_free(ctx, cu, sizeof *cu);
        return CU_FAIL(ctx, "cuDevicePrimaryCtxRetain", r);
    }
    cu->alloc = ctx->alloc;
    cu->alloc_ud = ctx->alloc_ud;
    cu->dev = dev;
    snprintf(cu->arch, sizeof cu->arch, "sm_%d%d", major, minor);
    snprintf(cu->name, sizeof cu->name, "%s", name);
    *out = cu;
    return KILN_OK;
}

void
kiln_cuda_close(struct kiln_cuda *cu)
{
    if (!cu)
        return;
    drv.primary_release(cu->dev);
    release(cu->alloc, cu->alloc_ud, cu, sizeof *cu);
}

const char *
kiln_cuda_arch(const struct kiln_cuda *cu)
{
    return cu ? cu->arch : NULL;
}

const char *
kiln_cuda_name(const struct kiln_cuda *cu)
{
    return cu ? cu->name : NULL;
}

/* ---- modules and launches ---- */

enum kiln_status
kiln_cuda_module_load(kiln_ctx *ctx, struct kiln_cuda *cu, const char *ptx,
                      struct kiln_cuda_module **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!cu || !ptx || !out)
        return null_arg(ctx, "kiln_cuda_module_load", !cu ? "cu" : !ptx ? "ptx" : "out");
    struct kiln_cuda_module *m = kiln_mem_realloc(ctx, NULL, 0, sizeof *m);
    char                    *log = kiln_mem_realloc(ctx, NULL, 0, JIT_LOG);
    if (!m || !log) {
        kiln_mem_free(ctx, m, sizeof *m);
        kiln_mem_free(ctx, log, JIT_LOG);
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "cuda", "loading a CUDA module: out of memory");
    }
    memset(m, 0, sizeof *m);
    log[0] = 0;
    enum kiln_status st = push(ctx, cu);
    if (st == KILN_OK) {
        int       opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
        void     *val[2] = {log, (void *)(uintptr_t)JIT_LOG};
        cu_result r = drv.module_load(&m->mod, ptx, 2, opt, val);
        pop();
        if (r != CUDA_SUCCESS) {
            log[JIT_LOG - 1] = 0;
            st = cu_fail_detail(ctx, KILN_WHERE, "cuModuleLoadDataEx", r, log);
        }
    }
    kiln_mem_free(ctx, log, JIT_LOG);
    if (st != KILN_OK) {
        kiln_mem_free(ctx, m, sizeof *m);
        return st;
    }
    m->alloc = ctx->alloc;
    m->alloc_ud = ctx->alloc_ud;
    m->cu = cu;
    *out = m;
    return KILN_OK;
}

void
kiln_cuda_module_free(struct kiln_cuda_module *m)
{
    if (!m)
        return;
    if (drv.ctx_push(m->cu->context) == CUDA_SUCCESS) {
        drv.module_unload(m->mod);
        pop();
    }
    release(m->alloc, m->alloc_ud, m, sizeof *m);
}

enum kiln_status
kiln_cuda_launch(kiln_ctx *ctx, struct kiln_cuda_module *m, const char *kernel,
                 const uint32_t grid[3], const uint32_t block[3], uint32_t shared_bytes,
                 void **args)
{
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!m || !kernel || !grid || !block)
        return null_arg(ctx, "kiln_cuda_launch",
                        !m        ? "the module"
                        : !kernel ? "kernel"
                        : !grid   ? "grid"
                                  : "block");
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2])
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "cuda",
                         "kiln_cuda_launch: %s: grid (%u, %u, %u) and block (%u, %u, %u) must "
                         "not be 0",
                         kernel, grid[0], grid[1], grid[2], block[0], block[1], block[2]);
    KILN_TRY(push(ctx, m->cu));
    enum kiln_status st = KILN_OK;
    cu_function      f;
    cu_result        r = drv.module_function(&f, m->mod, kernel);
    if (r == CUDA_ERROR_NOT_FOUND)
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "cuda",
                       "cuda: the module has no kernel named \"%.80s\" (cuModuleGetFunction: "
                       "CUDA_ERROR_NOT_FOUND)",
                       kernel);
    else if (r != CUDA_SUCCESS)
        st = CU_FAIL(ctx, "cuModuleGetFunction", r);
    else if ((r = drv.launch(f, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                             shared_bytes, NULL, args, NULL))
             != CUDA_SUCCESS)
        st = CU_FAIL(ctx, "cuLaunchKernel", r);
    pop();
    return st;
}

/* ---- memory ---- */

enum kiln_status
kiln_cuda_alloc(kiln_ctx *ctx, struct kiln_cuda *cu, size_t bytes, uint64_t *dptr)
{
    if (dptr)
        *dptr = 0;
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!cu || !dptr)
        return null_arg(ctx, "kiln_cuda_alloc", !cu ? "cu" : "dptr");
    if (bytes == 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "cuda", "kiln_cuda_alloc: 0 bytes requested");
    KILN_TRY(push(ctx, cu));
    cu_deviceptr     p = 0;
    cu_result        r = drv.mem_alloc(&p, bytes);
    enum kiln_status st = KILN_OK;
    pop();
    if (r != CUDA_SUCCESS) {
        char call[64];
        snprintf(call, sizeof call, "cuMemAlloc_v2 of %zu bytes", bytes);
        st = CU_FAIL(ctx, call, r);
    } else {
        *dptr = p;
    }
    return st;
}

void
kiln_cuda_free(struct kiln_cuda *cu, uint64_t dptr)
{
    if (!cu || !dptr)
        return;
    if (drv.ctx_push(cu->context) == CUDA_SUCCESS) {
        drv.mem_free(dptr);
        pop();
    }
}

enum kiln_status
kiln_cuda_upload(kiln_ctx *ctx, struct kiln_cuda *cu, uint64_t dst, const void *src, size_t bytes)
{
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!cu || (!src && bytes))
        return null_arg(ctx, "kiln_cuda_upload", !cu ? "cu" : "src");
    if (!bytes)
        return KILN_OK;
    KILN_TRY(push(ctx, cu));
    cu_result r = drv.htod(dst, src, bytes);
    pop();
    return r == CUDA_SUCCESS ? KILN_OK : CU_FAIL(ctx, "cuMemcpyHtoD_v2", r);
}

enum kiln_status
kiln_cuda_download(kiln_ctx *ctx, struct kiln_cuda *cu, void *dst, uint64_t src, size_t bytes)
{
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!cu || (!dst && bytes))
        return null_arg(ctx, "kiln_cuda_download", !cu ? "cu" : "dst");
    if (!bytes)
        return KILN_OK;
    KILN_TRY(push(ctx, cu));
    cu_result r = drv.dtoh(dst, src, bytes);
    pop();
    return r == CUDA_SUCCESS ? KILN_OK : CU_FAIL(ctx, "cuMemcpyDtoH_v2", r);
}

enum kiln_status
kiln_cuda_sync(kiln_ctx *ctx, struct kiln_cuda *cu)
{
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!cu)
        return null_arg(ctx, "kiln_cuda_sync", "cu");
    KILN_TRY(push(ctx, cu));
    cu_result r = drv.ctx_sync();
    pop();
    return r == CUDA_SUCCESS ? KILN_OK : CU_FAIL(ctx, "cuCtxSynchronize", r);
}

/* ---- timing ---- */

static int
cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Records ev[0], then fn and ev[i + 1] for each rep, waits for the last event and reads the
 * times between consecutive events into t. cu's context is current. */
static enum kiln_status
time_reps(kiln_ctx *ctx, kiln_cuda_work_fn fn, void *ud, int reps, cu_event *ev, float *t)
{
    cu_result r;
    for (int i = 0; i <= reps; i++)
        if ((r = drv.event_create(&ev[i], CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
            return CU_FAIL(ctx, "cuEventCreate", r);
    if ((r = drv.event_record(ev[0], NULL)) != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuEventRecord", r);
    for (int i = 0; i < reps; i++) {
        KILN_TRY(fn(ctx, ud));
        if ((r = drv.event_record(ev[i + 1], NULL)) != CUDA_SUCCESS)
            return CU_FAIL(ctx, "cuEventRecord", r);
    }
    if ((r = drv.event_sync(ev[reps])) != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuEventSynchronize", r);
    for (int i = 0; i < reps; i++)
        if ((r = drv.event_elapsed(&t[i], ev[i], ev[i + 1])) != CUDA_SUCCESS)
            return CU_FAIL(ctx, "cuEventElapsedTime", r);
    return KILN_OK;
}

enum kiln_status
kiln_cuda_time(kiln_ctx *ctx, struct kiln_cuda *cu, kiln_cuda_work_fn fn, void *ud, int reps,
               double *ms)
{
    if (ms)
        *ms = 0;
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!cu || !fn || !ms)
        return null_arg(ctx, "kiln_cuda_time", !cu ? "cu" : !fn ? "fn" : "ms");
    if (reps <= 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "cuda",
                         "kiln_cuda_time: reps must be positive, got %d", reps);
    size_t    nev = (size_t)reps + 1;
    cu_event *ev = kiln_mem_realloc(ctx, NULL, 0, nev * sizeof *ev);
    float    *t = kiln_mem_realloc(ctx, NULL, 0, (size_t)reps * sizeof *t);
    if (!ev || !t) {
        kiln_mem_free(ctx, ev, nev * sizeof *ev);
        kiln_mem_free(ctx, t, (size_t)reps * sizeof *t);
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "cuda", "kiln_cuda_time: out of memory");
    }
    memset(ev, 0, nev * sizeof *ev);
    enum kiln_status st = push(ctx, cu);
    if (st == KILN_OK) {
        st = fn(ctx, ud); /* warm-up: lazy module loading, caches */
        if (st == KILN_OK)
            st = time_reps(ctx, fn, ud, reps, ev, t);
        for (size_t i = 0; i < nev; i++)
            if (ev[i])
                drv.event_destroy(ev[i]);
        pop();
    }
    if (st == KILN_OK) {
        qsort(t, (size_t)reps, sizeof *t, cmp_float);
        *ms = reps % 2 ? t[reps / 2] : 0.5 * ((double)t[reps / 2 - 1] + t[reps / 2]);
    }
    kiln_mem_free(ctx, ev, nev * sizeof *ev);
    kiln_mem_free(ctx, t, (size_t)reps * sizeof *t);
    return st;
}
