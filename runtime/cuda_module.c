/* runtime/cuda_module.c -- launching the kernels of a generated module of the cuda target
 * (kiln_rt_cuda_call, kiln_rt_cuda_call_phased, include/kiln_abi_impl.h) and the device memory of
 * its prepared handles. Linked into libkiln_rt.a (every generated shared object) and libkiln;
 * depends on cuda_drv.c, libc, libdl and pthreads, nothing else of kiln.
 *
 * Context. The calling thread's current CUDA context when it has one (a PyTorch or CUDA
 * runtime caller's), else device 0's primary context, retained once and made current for the
 * call. The module's PTX is loaded once per context (the driver JIT-compiles it for the device)
 * and its functions looked up then; the list of loaded contexts hangs off the module's `state`
 * under one process-wide mutex. Nothing is unloaded: a module's code lives as long as the
 * process, as a CPU module's does (-z nodelete).
 *
 * A call launches the kernels of its phase in order on the legacy default stream and waits for
 * them (cuCtxSynchronize, so a call is finished when it returns, as a CPU call is). It needs a
 * device area for the workspace and, without a prepared handle, the weight-derived buffers:
 * each loaded context keeps one such area, allocated by its first call and taken by every
 * later call that finds it free (calls are finished when they return, so its bytes are free
 * again then); a call that finds it taken (another thread's) allocates one for itself and frees
 * it before returning. So a steady stream of calls makes no cuMemAlloc or cuMemFree, which cost
 * microseconds each and cuMemFree synchronises the device. The kept area lives, like the
 * module's code, as long as the process.
 *
 * Prepared handles (runtime/abi.c) hold a kiln_abi_cuda_area: device memory and the context it
 * belongs to. kiln_prepare runs the KILN_ABI_PHASE_PREPARE kernels into it, kiln_call_prepared
 * the KILN_ABI_PHASE_MAIN ones reading it, and a call in another context is refused: the
 * memory is not that context's to read.
 *
 * Failures leave a message for kiln_rt_cuda_error() in a thread-local buffer: the driver call,
 * its error name and text. */
#include "cuda_drv.h"

#include "kiln_abi_impl.h"

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
    cu_deviceptr   area; /* the kept call area (0 until a call needs one), area_bytes long */
    bool           busy; /* a call is using area */
    int32_t        most; /* the most arguments one kernel takes (its param list, checked) */
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

static int64_t
round_area(int64_t bytes)
{
    return (bytes + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN;
}

/* The context a call from this thread runs on (*c): its current one, else device 0's primary
 * context, then made current (*pushed: leave() pops it). */
static int32_t
enter(const struct kiln_cu_driver **dout, cu_context *c, bool *pushed)
{
    const struct kiln_cu_driver *d = kiln_cu_drv();
    *pushed = false;
    *c = NULL;
    if (!d->ok)
        return fail(KILN_ABI_ERR_RUNTIME, "no CUDA driver (%s)", d->why);
    pthread_once(&init_once, init_driver);
    if (init_result != CUDA_SUCCESS)
        return cu_fail("cuInit", init_result);
    cu_result r = d->ctx_get_current(c);
    if (r != CUDA_SUCCESS)
        return cu_fail("cuCtxGetCurrent", r);
    if (!*c) {
        pthread_mutex_lock(&lock);
        cu_device   dev;
        const char *call = "cuDeviceGet";
        r = primary ? CUDA_SUCCESS : d->device_get(&dev, 0);
        if (r == CUDA_SUCCESS && !primary) {
            call = "cuDevicePrimaryCtxRetain";
            r = d->primary_retain(&primary, dev);
        }
        *c = primary;
        pthread_mutex_unlock(&lock);
        if (r != CUDA_SUCCESS)
            return cu_fail(call, r);
        r = d->ctx_push(*c);
        if (r != CUDA_SUCCESS)
            return cu_fail("cuCtxPushCurrent_v2", r);
        *pushed = true;
    }
    *dout = d;
    return KILN_ABI_OK;
}

static void
leave(const struct kiln_cu_driver *d, bool pushed)
{
    if (pushed) {
        cu_context popped;
        d->ctx_pop(&popped);
    }
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
    int32_t most = 0; /* each kernel's parameter list, checked once here */
    for (int32_t k = 0; k < m->nkernel; k++) {
        const struct kiln_abi_cuda_kernel *kn = &m->kernel[k];
        int32_t                            n = kn->param ? kn->nparam : m->nargs;
        if (n < 0 || n > m->nargs)
            return fail(KILN_ABI_ERR_RUNTIME, "kernel %s: %d parameters of %d arguments", kn->name,
                        (int)n, (int)m->nargs);
        for (int32_t i = 0; kn->param && i < n; i++)
            if (kn->param[i] < 0 || kn->param[i] >= m->nargs)
                return fail(KILN_ABI_ERR_RUNTIME, "kernel %s: argument %d of %d", kn->name,
                            (int)kn->param[i], (int)m->nargs);
        most = n > most ? n : most;
    }
    struct loaded *l = calloc(1, sizeof *l + sizeof(cu_function) * (size_t)m->nkernel);
    if (!l)
        return fail(KILN_ABI_ERR_NOMEM, "cannot allocate the module table");
    l->most = most;
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

/* The device area of a call needing `need` bytes: l's kept one when free (allocated at the
 * first need, at its full size: workspace and weight-derived buffers), else one of the call's
 * own. c is current. */
static int32_t
take_area(const struct kiln_cu_driver *d, const struct kiln_abi_cuda_module *m, struct loaded *l,
          int64_t need, cu_deviceptr *area)
{
    int64_t   full = round_area(m->ws_bytes) + m->prep_bytes;
    cu_result r = CUDA_SUCCESS;
    *area = 0;
    pthread_mutex_lock(&lock);
    if (!l->busy) {
        if (!l->area)
            r = d->mem_alloc(&l->area, (size_t)full);
        if (r == CUDA_SUCCESS) {
            l->busy = true;
            *area = l->area;
        }
    }
    pthread_mutex_unlock(&lock);
    if (r != CUDA_SUCCESS)
        return cu_fail("cuMemAlloc_v2", r);
    if (!*area && (r = d->mem_alloc(area, (size_t)need)) != CUDA_SUCCESS)
        return cu_fail("cuMemAlloc_v2", r);
    return KILN_ABI_OK;
}

static void
give_area(const struct kiln_cu_driver *d, struct loaded *l, cu_deviceptr area)
{
    if (!area)
        return;
    pthread_mutex_lock(&lock);
    bool kept = area == l->area;
    if (kept)
        l->busy = false;
    pthread_mutex_unlock(&lock);
    if (!kept)
        d->mem_free(area);
}

/* Launches the kernels of phase with the workspace at ws and the prepared area at prep. Each
 * kernel takes the arguments it accesses (its param list), then ws and prep. */
static int32_t
launch(const struct kiln_cu_driver *d, const struct kiln_abi_cuda_module *m, const struct loaded *l,
       void *const *data, cu_deviceptr ws, cu_deviceptr prep, int32_t phase)
{
    int32_t most = l->most; /* the parameter lists were checked when the module was loaded */
    enum { SMALL = 64 };
    void *small[SMALL + 2], **params = small;
    if (most > SMALL && !(params = malloc(sizeof *params * ((size_t)most + 2))))
        return fail(KILN_ABI_ERR_RUNTIME, "out of memory for %d kernel parameters", (int)most);
    int32_t st = KILN_ABI_OK;
    for (int32_t k = 0; k < m->nkernel && st == KILN_ABI_OK; k++) {
        const struct kiln_abi_cuda_kernel *kn = &m->kernel[k];
        if (!(kn->phase & phase))
            continue;
        int32_t n = kn->param ? kn->nparam : m->nargs;
        for (int32_t i = 0; i < n; i++) /* the kernel parameter is the pointer itself */
            params[i] = (void *)&data[kn->param ? kn->param[i] : i];
        params[n] = &ws;
        params[n + 1] = &prep;
        cu_result r = d->launch(l->fn[k], kn->grid[0], kn->grid[1], kn->grid[2], kn->block[0],
                                kn->block[1], kn->block[2], 0, NULL, params, NULL);
        if (r != CUDA_SUCCESS) {
            char buf[200];
            st = fail(KILN_ABI_ERR_RUNTIME, "cuLaunchKernel of %s failed: %s", kn->name,
                      kiln_cu_describe(r, buf, sizeof buf));
        }
    }
    if (params != small)
        free(params);
    if (st != KILN_ABI_OK)
        return st;
    cu_result r = d->ctx_sync();
    return r == CUDA_SUCCESS ? KILN_ABI_OK : cu_fail("cuCtxSynchronize", r);
}

int32_t
kiln_rt_cuda_call_phased(struct kiln_abi_cuda_module *m, void *const *data, int32_t phase,
                         const struct kiln_abi_cuda_area *prepared)
{
    last_error[0] = 0;
    if (!m || (m->nargs > 0 && !data))
        return fail(KILN_ABI_ERR_NULL, "no module or no data pointers");
    if (phase < KILN_ABI_PHASE_PREPARE || phase > KILN_ABI_PHASE_ALL)
        return fail(KILN_ABI_ERR_RUNTIME, "phase %d: expected 1 (prepare), 2 (main) or 3 (all)",
                    (int)phase);
    bool own = !prepared || !prepared->dptr; /* the weight-derived buffers in the call's area */
    if (own && phase != KILN_ABI_PHASE_ALL && m->prep_bytes > 0)
        return fail(KILN_ABI_ERR_NULL, "phase %d needs the prepared area of kiln_prepare",
                    (int)phase);
    const struct kiln_cu_driver *d = NULL;
    cu_context                   c;
    bool                         pushed;
    int32_t                      st = enter(&d, &c, &pushed);
    if (st != KILN_ABI_OK)
        return st;
    if (!own && prepared->context != c)
        st = fail(KILN_ABI_ERR_RUNTIME,
                  "the prepared handle was made in another CUDA context than the one this call "
                  "runs on (the thread's current context, else device 0's primary context); "
                  "prepare in the context the calls use");
    struct loaded *l = NULL;
    if (st == KILN_ABI_OK) {
        pthread_mutex_lock(&lock);
        st = get_loaded(d, m, c, &l);
        pthread_mutex_unlock(&lock);
    }
    cu_deviceptr area = 0;
    int64_t      ws = round_area(m->ws_bytes), need = ws + (own ? m->prep_bytes : 0);
    if (st == KILN_ABI_OK && need > 0)
        st = take_area(d, m, l, need, &area);
    if (st == KILN_ABI_OK)
        st = launch(d, m, l, data, area, own ? area + (cu_deviceptr)ws : prepared->dptr, phase);
    if (l)
        give_area(d, l, area);
    leave(d, pushed);
    return st;
}

int32_t
kiln_rt_cuda_call(struct kiln_abi_cuda_module *m, void *const *data)
{
    return kiln_rt_cuda_call_phased(m, data, KILN_ABI_PHASE_ALL, NULL);
}

int32_t
kiln_rt_cuda_area_new(int64_t bytes, struct kiln_abi_cuda_area *a)
{
    last_error[0] = 0;
    if (!a)
        return fail(KILN_ABI_ERR_NULL, "no area to fill");
    a->dptr = 0;
    a->context = NULL;
    if (bytes <= 0)
        return fail(KILN_ABI_ERR_RUNTIME, "a prepared area of %lld bytes", (long long)bytes);
    const struct kiln_cu_driver *d = NULL;
    cu_context                   c;
    bool                         pushed;
    int32_t                      st = enter(&d, &c, &pushed);
    if (st != KILN_ABI_OK)
        return st;
    cu_deviceptr p = 0;
    cu_result    r = d->mem_alloc(&p, (size_t)bytes);
    if (r == CUDA_SUCCESS) {
        a->dptr = p;
        a->context = c;
    } else {
        char call[80];
        snprintf(call, sizeof call, "cuMemAlloc_v2 of %lld bytes", (long long)bytes);
        st = cu_fail(call, r);
    }
    leave(d, pushed);
    return st;
}

void
kiln_rt_cuda_area_free(struct kiln_abi_cuda_area *a)
{
    if (!a || !a->dptr)
        return;
    const struct kiln_cu_driver *d = kiln_cu_drv();
    if (d->ok && d->ctx_push(a->context) == CUDA_SUCCESS) {
        cu_context popped;
        d->mem_free(a->dptr);
        d->ctx_pop(&popped);
    }
    a->dptr = 0;
    a->context = NULL;
}
