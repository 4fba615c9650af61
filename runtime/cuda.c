/* runtime/cuda.c -- the CUDA driver API, loaded with dlopen("libcuda.so.1"): one device and its
 * primary context, PTX modules, launches on the default stream, device memory and event timing
 * (contract in cuda.h).
 *
 * The driver's entry points are cuda_drv.c's (loaded with dlopen once per process; when
 * it is absent the loader's message is kept for "no CUDA driver (...)"). The device's primary
 * context (the one the CUDA runtime and PyTorch use too) is retained at open and released at
 * close, and pushed/popped around every call, so nothing depends on which context the calling
 * thread had current. Every driver result is checked and a failure names the call, with the
 * driver's error name and string. Depends on util and libdl. */
#include "cuda.h"
#include "cuda_drv.h"

#include "../util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Fails naming call and r; when that is the error recorded, attaches detail (copied). */
static enum kiln_status
cu_fail_detail(kiln_ctx *ctx, const char *where, const char *call, cu_result r, const char *detail)
{
    char             buf[200];
    bool             fresh = !ctx->has_err;
    enum kiln_status st = r == CUDA_ERROR_OUT_OF_MEMORY ? KILN_ERR_NOMEM : KILN_ERR_BACKEND;
    kiln_fail(ctx, st, "cuda", where, "cuda: %s failed: %s", call,
              kiln_cu_describe(r, buf, sizeof buf));
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
    cu_result r = kiln_cu_drv()->ctx_push(cu->context);
    return r == CUDA_SUCCESS ? KILN_OK : CU_FAIL(ctx, "cuCtxPushCurrent_v2", r);
}

static void
pop(void)
{
    cu_context c;
    kiln_cu_drv()->ctx_pop(&c);
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
    if (!kiln_cu_drv()->ok)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "cuda", "no CUDA driver (%s)",
                         kiln_cu_drv()->why);
    char      buf[200];
    cu_result r = kiln_cu_drv()->init(0);
    if (r == CUDA_ERROR_NO_DEVICE)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "cuda", "no CUDA device (cuInit: %s)",
                         kiln_cu_describe(r, buf, sizeof buf));
    if (r == CUDA_ERROR_STUB_LIBRARY)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "cuda",
                         "no CUDA driver (" DRIVER_LIB " is the toolkit's stub: %s)",
                         kiln_cu_describe(r, buf, sizeof buf));
    if (r != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuInit", r);
    int count = 0;
    r = kiln_cu_drv()->device_count(&count);
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
    if ((r = kiln_cu_drv()->device_get(&dev, ordinal)) != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuDeviceGet", r);
    if ((r = kiln_cu_drv()->device_name(name, (int)sizeof name - 1, dev)) != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuDeviceGetName", r);
    if ((r = kiln_cu_drv()->device_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                             dev))
            != CUDA_SUCCESS
        || (r = kiln_cu_drv()->device_attribute(&minor,
                                                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
               != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuDeviceGetAttribute", r);
    struct kiln_cuda *cu = kiln_mem_realloc(ctx, NULL, 0, sizeof *cu);
    if (!cu)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "cuda", "opening CUDA device %d: out of memory",
                         ordinal);
    memset(cu, 0, sizeof *cu);
    if ((r = kiln_cu_drv()->primary_retain(&cu->context, dev)) != CUDA_SUCCESS) {
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
    kiln_cu_drv()->primary_release(cu->dev);
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
        cu_result r = kiln_cu_drv()->module_load(&m->mod, ptx, 2, opt, val);
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
    if (kiln_cu_drv()->ctx_push(m->cu->context) == CUDA_SUCCESS) {
        kiln_cu_drv()->module_unload(m->mod);
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
    cu_result        r = kiln_cu_drv()->module_function(&f, m->mod, kernel);
    if (r == CUDA_ERROR_NOT_FOUND)
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "cuda",
                       "cuda: the module has no kernel named \"%.80s\" (cuModuleGetFunction: "
                       "CUDA_ERROR_NOT_FOUND)",
                       kernel);
    else if (r != CUDA_SUCCESS)
        st = CU_FAIL(ctx, "cuModuleGetFunction", r);
    else if ((r = kiln_cu_drv()->launch(f, grid[0], grid[1], grid[2], block[0], block[1], block[2],
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
    cu_result        r = kiln_cu_drv()->mem_alloc(&p, bytes);
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
    if (kiln_cu_drv()->ctx_push(cu->context) == CUDA_SUCCESS) {
        kiln_cu_drv()->mem_free(dptr);
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
    cu_result r = kiln_cu_drv()->htod(dst, src, bytes);
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
    cu_result r = kiln_cu_drv()->dtoh(dst, src, bytes);
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
    cu_result r = kiln_cu_drv()->ctx_sync();
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
        if ((r = kiln_cu_drv()->event_create(&ev[i], CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
            return CU_FAIL(ctx, "cuEventCreate", r);
    if ((r = kiln_cu_drv()->event_record(ev[0], NULL)) != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuEventRecord", r);
    for (int i = 0; i < reps; i++) {
        KILN_TRY(fn(ctx, ud));
        if ((r = kiln_cu_drv()->event_record(ev[i + 1], NULL)) != CUDA_SUCCESS)
            return CU_FAIL(ctx, "cuEventRecord", r);
    }
    if ((r = kiln_cu_drv()->event_sync(ev[reps])) != CUDA_SUCCESS)
        return CU_FAIL(ctx, "cuEventSynchronize", r);
    for (int i = 0; i < reps; i++)
        if ((r = kiln_cu_drv()->event_elapsed(&t[i], ev[i], ev[i + 1])) != CUDA_SUCCESS)
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
                kiln_cu_drv()->event_destroy(ev[i]);
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
