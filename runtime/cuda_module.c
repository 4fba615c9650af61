/* runtime/cuda_module.c -- launching the kernels of a generated module of the cuda target
 * (kiln_rt_cuda_call, include/kiln_abi.h). Linked into libkiln_rt.a (every generated shared
 * object) and libkiln; depends on cuda_drv.c, libc, libdl and pthreads, nothing else of kiln.
 *
 * Context. The calling thread's current CUDA context when it has one (a PyTorch or CUDA
 * runtime caller's), else device 0's primary context, retained once and made current for the
 * call. The module's PTX is loaded once per context (the driver JIT-compiles it for the device)
 * and its functions looked up then; the list of loaded contexts hangs off the module's `state`
 * under one process-wide mutex. Nothing is unloaded: a module's code lives as long as the
 * process, as a CPU module's does (-z nodelete).
 *
 * A call allocates the workspace and prepared area (one cuMemAlloc), launches the kernels in
 * order on the legacy default stream, waits for them (cuCtxSynchronize, so a call is finished
 * when it returns, as a CPU call is) and frees the area. Failures leave a message for
 * kiln_rt_cuda_error() in a thread-local buffer: the driver call, its error name and text. */
#include "cuda_drv.h"

#include "kiln_abi.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AREA_ALIGN 256 /* the prepared area's offset in the device allocation */

static _Thread_local char last_error[512];

const char *
kiln_rt_cuda_error(void)
{
    return last_error;
}

static int32_t fail(int32_t status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int32_t
fail(int32_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

static int32_t
cu_fail(const char *call, cu_result r)
{
    char buf[200];
    return fail(r == CUDA_ERROR_OUT_OF_MEMORY ? KILN_ABI_ERR_NOMEM : KILN_ABI_ERR_RUNTIME,
                "%s failed: %s", call, kiln_cu_describe(r, buf, sizeof buf));
}

/* The module as loaded into one context. */
struct loaded {
    struct loaded *next;
    cu_context     context;
    cu_module      mod;
    cu_function    fn[]; /* one per kernel */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t  init_once = PTHREAD_ONCE_INIT;
static cu_result       init_result;
static cu_context      primary; /* device 0's, retained on first need */

static void
init_driver(void)
{
    init_result = kiln_cu_drv()->init(0);
}

/* m loaded into context c (under lock), loading it on first use. */
static int32_t
get_loaded(const struct kiln_cu_driver *d, struct kiln_abi_cuda_module *m, cu_context c,
           struct loaded **out)
{
    for (struct loaded *l = m->state; l; l = l->next)
        if (l->context == c) {
            *out = l;
            return KILN_ABI_OK;
        }
    struct loaded *l = calloc(1, sizeof *l + sizeof(cu_function) * (size_t)m->nkernel);
    if (!l)
        return fail(KILN_ABI_ERR_NOMEM, "cannot allocate the module table");
    char      log[4096] = "";
    int       opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void     *val[2] = {log, (void *)(size_t)sizeof log};
    cu_result r = d->module_load(&l->mod, m->ptx, 2, opt, val);
    if (r != CUDA_SUCCESS) {
        char buf[200];
        free(l);
        log[sizeof log - 1] = 0;
        return fail(KILN_ABI_ERR_RUNTIME, "cuModuleLoadDataEx failed: %s%s%.300s",
                    kiln_cu_describe(r, buf, sizeof buf), log[0] ? ": " : "", log);
    }
    for (int32_t k = 0; k < m->nkernel; k++) {
        r = d->module_function(&l->fn[k], l->mod, m->kernel[k].name);
        if (r != CUDA_SUCCESS) {
            d->module_unload(l->mod);
            free(l);
            return cu_fail("cuModuleGetFunction", r);
        }
    }
    l->context = c;
    l->next = m->state;
    m->state = l;
    *out = l;
    return KILN_ABI_OK;
}

/* Launches the kernels with the workspace at area (device memory). */
static int32_t
launch(const struct kiln_cu_driver *d, const struct kiln_abi_cuda_module *m, const struct loaded *l,
       void *const *data, cu_deviceptr area)
{
    enum { MAX_ARGS = 256 };
    if (m->nargs + 2 > MAX_ARGS)
        return fail(KILN_ABI_ERR_RUNTIME, "%d arguments: at most %d", (int)m->nargs, MAX_ARGS - 2);
    cu_deviceptr ws = area,
                 prep = area
                        + (cu_deviceptr)((m->ws_bytes + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN);
    void *params[MAX_ARGS];
    for (int32_t i = 0; i < m->nargs; i++)
        params[i] = (void *)&data[i]; /* the kernel parameter is the pointer itself */
    params[m->nargs] = &ws;
    params[m->nargs + 1] = &prep;
    for (int32_t k = 0; k < m->nkernel; k++) {
        const struct kiln_abi_cuda_kernel *kn = &m->kernel[k];
        cu_result r = d->launch(l->fn[k], kn->grid[0], kn->grid[1], kn->grid[2], kn->block[0],
                                kn->block[1], kn->block[2], 0, NULL, params, NULL);
        if (r != CUDA_SUCCESS) {
            char buf[200];
            return fail(KILN_ABI_ERR_RUNTIME, "cuLaunchKernel of %s failed: %s", kn->name,
                        kiln_cu_describe(r, buf, sizeof buf));
        }
    }
    cu_result r = d->ctx_sync();
    return r == CUDA_SUCCESS ? KILN_ABI_OK : cu_fail("cuCtxSynchronize", r);
}

int32_t
kiln_rt_cuda_call(struct kiln_abi_cuda_module *m, void *const *data)
{
    last_error[0] = 0;
    if (!m || (m->nargs > 0 && !data))
        return fail(KILN_ABI_ERR_NULL, "no module or no data pointers");
    const struct kiln_cu_driver *d = kiln_cu_drv();
    if (!d->ok)
        return fail(KILN_ABI_ERR_RUNTIME, "no CUDA driver (%s)", d->why);
    pthread_once(&init_once, init_driver);
    if (init_result != CUDA_SUCCESS)
        return cu_fail("cuInit", init_result);
    cu_context c = NULL;
    cu_result  r = d->ctx_get_current(&c);
    if (r != CUDA_SUCCESS)
        return cu_fail("cuCtxGetCurrent", r);
    bool pushed = !c; /* no current context: device 0's primary one, current for the call */
    if (pushed) {
        pthread_mutex_lock(&lock);
        cu_device   dev;
        const char *call = "cuDeviceGet";
        r = primary ? CUDA_SUCCESS : d->device_get(&dev, 0);
        if (r == CUDA_SUCCESS && !primary) {
            call = "cuDevicePrimaryCtxRetain";
            r = d->primary_retain(&primary, dev);
        }
        c = primary;
        pthread_mutex_unlock(&lock);
        if (r != CUDA_SUCCESS)
            return cu_fail(call, r);
        r = d->ctx_push(c);
        if (r != CUDA_SUCCESS)
            return cu_fail("cuCtxPushCurrent_v2", r);
    }
    struct loaded *l = NULL;
    pthread_mutex_lock(&lock);
    int32_t st = get_loaded(d, m, c, &l);
    pthread_mutex_unlock(&lock);
    cu_deviceptr area = 0;
    int64_t      bytes = (m->ws_bytes + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN + m->prep_bytes;
    if (st == KILN_ABI_OK && bytes > 0) {
        r = d->mem_alloc(&area, (size_t)bytes);
        if (r != CUDA_SUCCESS)
            st = cu_fail("cuMemAlloc_v2", r);
    }
    if (st == KILN_ABI_OK)
        st = launch(d, m, l, data, area);
    if (area)
        d->mem_free(area);
    if (pushed) {
        cu_context popped;
        d->ctx_pop(&popped);
    }
    return st;
}
