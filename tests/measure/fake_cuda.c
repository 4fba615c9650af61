/* tests/measure/fake_cuda.c -- a stand-in for the CUDA driver, built as libcuda.so.1 in the build
 * directory's fake_cuda/, which tests put first on LD_LIBRARY_PATH of the processes they start
 * (tests/cuda_emu.h, kiln_test_emu_use_fake_driver). It serves the entry points
 * runtime/cuda_drv.c looks up, so that the measurement runner (tuner/runner/cuda.c) and a
 * module of the cuda target (runtime/cuda_module.c) run unchanged on a machine without a GPU:
 *
 *   - one device, "sm_80", its primary context a token; contexts are a per-thread stack;
 *   - device memory is host memory (256-byte aligned), copies are memcpy;
 *   - a module is loaded from its PTX's address: the shared object holding that text (dladdr)
 *     is the module X.so, and its emulation X.so.emu (tests/cuda_emu.h) provides the kernels;
 *   - a launch runs the emulated kernel: blocks one after another, a block's threads at once
 *     as threads (a barrier for __syncthreads), so launches are synchronous; a float4/float2
 *     access not aligned to its size leaves CUDA_ERROR_MISALIGNED_ADDRESS, as on a GPU;
 *   - events are readings of the monotonic clock.
 * An emulation exporting kiln_emu_fault fails as it says (cuda_emu.h: wrong, skip, crash, hang,
 * launch, fault, slow). KILN_FAKE_CUDA=nodevice in the environment makes cuInit report no device.
 * Test code: it reads the environment and aborts nothing, but makes no effort beyond what the
 * tests need. */
#include "../../runtime/cuda_drv.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum {
    ERR_INVALID_VALUE = 1,
    ERR_NOT_INITIALIZED = 3,
    ERR_INVALID_IMAGE = 200,
    ERR_INVALID_CONTEXT = 201,
    ERR_INVALID_HANDLE = 400,
    ERR_ILLEGAL_ADDRESS = 700,
    ERR_OUT_OF_RESOURCES = 701,
    ERR_MISALIGNED = 716,
};

static const struct {
    int         code;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {ERR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {ERR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {ERR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {ERR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {ERR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {ERR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {ERR_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {ERR_MISALIGNED, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
};

typedef void (*emu_set_fn)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           pthread_barrier_t *);
typedef void (*emu_counts_fn)(long *, long *);
typedef void (*emu_kernel_fn)(void **);

struct module {
    void         *h;
    emu_set_fn    set;
    emu_counts_fn counts;
    const char   *fault; /* NULL or the emulation's kiln_emu_fault */
};

struct function {
    struct module *m;
    emu_kernel_fn  fn;
};

static int                 initialised;
static int                 primary_token;
static cu_result           sticky;       /* a fault: every later call that syncs returns it */
static int                 corrupt_next; /* "wrong": the next download is off by 1 */
static __thread cu_context stack[16];
static __thread int        depth;

/* Every entry point, declared for -Wmissing-prototypes. */
EXPORT cu_result cuInit(unsigned flags);
EXPORT cu_result cuDeviceGetCount(int *n);
EXPORT cu_result cuDeviceGet(cu_device *dev, int ordinal);
EXPORT cu_result cuDeviceGetName(char *name, int len, cu_device dev);
EXPORT cu_result cuDeviceGetAttribute(int *v, int attr, cu_device dev);
EXPORT cu_result cuDevicePrimaryCtxRetain(cu_context *c, cu_device dev);
EXPORT cu_result cuDevicePrimaryCtxRelease_v2(cu_device dev);
EXPORT cu_result cuCtxPushCurrent_v2(cu_context c);
EXPORT cu_result cuCtxPopCurrent_v2(cu_context *c);
EXPORT cu_result cuCtxSynchronize(void);
EXPORT cu_result cuCtxGetCurrent(cu_context *c);
EXPORT cu_result cuModuleLoadDataEx(cu_module *m, const void *image, unsigned nopt, int *opt,
                                    void **val);
EXPORT cu_result cuModuleUnload(cu_module m);
EXPORT cu_result cuModuleGetFunction(cu_function *f, cu_module m, const char *name);
EXPORT cu_result cuLaunchKernel(cu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned shared, cu_stream s, void **args,
                                void **extra);
EXPORT cu_result cuMemAlloc_v2(cu_deviceptr *p, size_t bytes);
EXPORT cu_result cuMemFree_v2(cu_deviceptr p);
EXPORT cu_result cuMemcpyHtoD_v2(cu_deviceptr dst, const void *src, size_t bytes);
EXPORT cu_result cuMemcpyDtoH_v2(void *dst, cu_deviceptr src, size_t bytes);
EXPORT cu_result cuEventCreate(cu_event *e, unsigned flags);
EXPORT cu_result cuEventRecord(cu_event e, cu_stream s);
EXPORT cu_result cuEventSynchronize(cu_event e);
EXPORT cu_result cuEventElapsedTime_v2(float *ms, cu_event start, cu_event end);
EXPORT cu_result cuEventDestroy_v2(cu_event e);
EXPORT cu_result cuGetErrorName(cu_result r, const char **s);
EXPORT cu_result cuGetErrorString(cu_result r, const char **s);
EXPORT cu_result cuGetExportTable(const void **table, const void *id);

cu_result
cuInit(unsigned flags)
{
    const char *mode = getenv("KILN_FAKE_CUDA");
    (void)flags;
    if (mode && !strcmp(mode, "nodevice"))
        return CUDA_ERROR_NO_DEVICE;
    initialised = 1;
    return CUDA_SUCCESS;
}

cu_result
cuDeviceGetCount(int *n)
{
    *n = initialised;
    return initialised ? CUDA_SUCCESS : ERR_NOT_INITIALIZED;
}

cu_result
cuDeviceGet(cu_device *dev, int ordinal)
{
    *dev = 0;
    return !initialised ? ERR_NOT_INITIALIZED : ordinal == 0 ? CUDA_SUCCESS : ERR_INVALID_VALUE;
}

cu_result
cuDeviceGetName(char *name, int len, cu_device dev)
{
    (void)dev;
    snprintf(name, (size_t)len, "kiln emulated GPU (tests/measure/fake_cuda.c)");
    return CUDA_SUCCESS;
}

cu_result
cuDeviceGetAttribute(int *v, int attr, cu_device dev)
{
    (void)dev;
    if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        *v = 8;
    else if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        *v = 0;
    else
        return ERR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

cu_result
cuDevicePrimaryCtxRetain(cu_context *c, cu_device dev)
{
    (void)dev;
    *c = &primary_token;
    return initialised ? CUDA_SUCCESS : ERR_NOT_INITIALIZED;
}

cu_result
cuDevicePrimaryCtxRelease_v2(cu_device dev)
{
    (void)dev;
    return CUDA_SUCCESS;
}

cu_result
cuCtxPushCurrent_v2(cu_context c)
{
    if (c != &primary_token || depth == 16)
        return ERR_INVALID_CONTEXT;
    stack[depth++] = c;
    return CUDA_SUCCESS;
}

cu_result
cuCtxPopCurrent_v2(cu_context *c)
{
    if (!depth)
        return ERR_INVALID_CONTEXT;
    *c = stack[--depth];
    return CUDA_SUCCESS;
}

cu_result
cuCtxGetCurrent(cu_context *c)
{
    *c = depth ? stack[depth - 1] : NULL;
    return initialised ? CUDA_SUCCESS : ERR_NOT_INITIALIZED;
}

cu_result
cuCtxSynchronize(void)
{
    return depth ? sticky : ERR_INVALID_CONTEXT;
}

cu_result
cuModuleLoadDataEx(cu_module *out, const void *image, unsigned nopt, int *opt, void **val)
{
    char     *log = NULL, path[4096];
    size_t    logsize = 0;
    Dl_info   info;
    cu_result r = ERR_INVALID_IMAGE;
    for (unsigned i = 0; i < nopt; i++) {
        if (opt[i] == CU_JIT_ERROR_LOG_BUFFER)
            log = val[i];
        else if (opt[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            logsize = (size_t)(uintptr_t)val[i];
    }
    if (!depth)
        return ERR_INVALID_CONTEXT;
    if (!dladdr(image, &info) || !info.dli_fname) {
        if (log && logsize)
            snprintf(log, logsize, "fake driver: the PTX is not in a loaded shared object");
        return r;
    }
    snprintf(path, sizeof path, "%s.emu", info.dli_fname);
    struct module *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (m->h) {
        void *set = dlsym(m->h, "kiln_emu_set"), *counts = dlsym(m->h, "kiln_emu_counts");
        memcpy(&m->set, &set, sizeof set);
        memcpy(&m->counts, &counts, sizeof counts);
        m->fault = dlsym(m->h, "kiln_emu_fault");
    }
    if (!m->h || !m->set || !m->counts) {
        if (log && logsize)
            snprintf(log, logsize, "fake driver: no emulation %s: %s", path,
                     m->h ? "no kiln_emu_set" : dlerror());
        free(m);
        return r;
    }
    *out = m;
    return CUDA_SUCCESS;
}

cu_result
cuModuleUnload(cu_module m)
{
    free(m); /* the emulation stays loaded: its kernels may still be referenced */
    return CUDA_SUCCESS;
}

cu_result
cuModuleGetFunction(cu_function *f, cu_module mod, const char *name)
{
    struct module *m = mod;
    char           sym[300];
    snprintf(sym, sizeof sym, "kiln_emu_%s", name);
    void *p = m ? dlsym(m->h, sym) : NULL;
    if (!p)
        return CUDA_ERROR_NOT_FOUND;
    struct function *fn = calloc(1, sizeof *fn);
    if (!fn)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fn->m = m;
    memcpy(&fn->fn, &p, sizeof p);
    *f = fn;
    return CUDA_SUCCESS;
}

struct thread {
    const struct function *f;
    void                 **args;
    unsigned               b[3], t[3];
    pthread_barrier_t     *barrier;
};

static void *
thread_main(void *ud)
{
    struct thread *t = ud;
    t->f->m->set(t->b[0], t->b[1], t->b[2], t->t[0], t->t[1], t->t[2], t->barrier);
    t->f->fn(t->args);
    return NULL;
}

/* Every block of the grid, one after another, its threads at once. */
static cu_result
run(const struct function *f, const unsigned g[3], const unsigned b[3], void **args)
{
    unsigned          nt = b[0] * b[1] * b[2];
    struct thread    *th = calloc(nt, sizeof *th);
    pthread_t        *tid = calloc(nt, sizeof *tid);
    pthread_attr_t    attr;
    pthread_barrier_t bar;
    cu_result         r = CUDA_SUCCESS;
    if (!th || !tid || pthread_barrier_init(&bar, NULL, nt) != 0) {
        free(th);
        free(tid);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    for (unsigned bz = 0; bz < g[2] && !r; bz++)
        for (unsigned by = 0; by < g[1] && !r; by++)
            for (unsigned bx = 0; bx < g[0] && !r; bx++) {
                unsigned started = 0;
                for (unsigned i = 0; i < nt; i++) {
                    th[i] = (struct thread){f,
                                            args,
                                            {bx, by, bz},
                                            {i % b[0], i / b[0] % b[1], i / (b[0] * b[1])},
                                            &bar};
                    if (nt == 1)
                        thread_main(&th[i]);
                    else if (pthread_create(&tid[i], &attr, thread_main, &th[i]) == 0)
                        started++;
                }
                if (nt > 1 && started != nt) { /* the others wait at a barrier forever */
                    fprintf(stderr, "fake driver: only %u of %u threads started\n", started, nt);
                    _exit(5);
                }
                for (unsigned i = 0; nt > 1 && i < started; i++)
                    pthread_join(tid[i], NULL);
            }
    pthread_attr_destroy(&attr);
    pthread_barrier_destroy(&bar);
    free(th);
    free(tid);
    return r;
}

cu_result
cuLaunchKernel(cu_function fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
               unsigned bz, unsigned shared, cu_stream s, void **args, void **extra)
{
    const struct function *f = fn;
    const unsigned         g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
    const char            *fault = f ? f->m->fault : NULL;
    (void)shared;
    (void)s;
    (void)extra;
    if (!depth)
        return ERR_INVALID_CONTEXT;
    if (!f)
        return ERR_INVALID_HANDLE;
    if (sticky)
        return sticky;
    if (!gx || !gy || !gz || !bx || !by || !bz || (uint64_t)bx * by * bz > 1024)
        return ERR_INVALID_VALUE;
    if (fault && !strcmp(fault, "launch"))
        return ERR_OUT_OF_RESOURCES;
    if (fault && !strcmp(fault, "crash"))
        raise(SIGSEGV);
    while (fault && !strcmp(fault, "hang"))
        pause();
    if (fault && !strcmp(fault, "skip"))
        return CUDA_SUCCESS;
    if (fault && !strcmp(fault, "slow"))
        usleep(100000);
    long v0, m0, v1, m1;
    f->m->counts(&v0, &m0);
    cu_result r = run(f, g, b, args);
    f->m->counts(&v1, &m1);
    if (m1 != m0)
        sticky = ERR_MISALIGNED;
    if (fault && !strcmp(fault, "fault"))
        sticky = ERR_ILLEGAL_ADDRESS;
    if (fault && !strcmp(fault, "wrong"))
        corrupt_next = 1;
    return r;
}

cu_result
cuMemAlloc_v2(cu_deviceptr *p, size_t bytes)
{
    if (!depth)
        return ERR_INVALID_CONTEXT;
    if (!bytes)
        return ERR_INVALID_VALUE;
    void *q = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!q)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (cu_deviceptr)(uintptr_t)q;
    return CUDA_SUCCESS;
}

cu_result
cuMemFree_v2(cu_deviceptr p)
{
    free((void *)(uintptr_t)p);
    return CUDA_SUCCESS;
}

cu_result
cuMemcpyHtoD_v2(cu_deviceptr dst, const void *src, size_t bytes)
{
    if (sticky)
        return sticky;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return CUDA_SUCCESS;
}

cu_result
cuMemcpyDtoH_v2(void *dst, cu_deviceptr src, size_t bytes)
{
    if (sticky)
        return sticky;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    if (corrupt_next && bytes >= sizeof(float)) {
        float v;
        memcpy(&v, dst, sizeof v);
        v += 1;
        memcpy(dst, &v, sizeof v);
        corrupt_next = 0;
    }
    return CUDA_SUCCESS;
}

cu_result
cuEventCreate(cu_event *e, unsigned flags)
{
    (void)flags;
    *e = calloc(1, sizeof(double));
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

cu_result
cuEventRecord(cu_event e, cu_stream s)
{
    struct timespec ts;
    (void)s;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double *)e = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return sticky;
}

cu_result
cuEventSynchronize(cu_event e)
{
    (void)e;
    return sticky;
}

cu_result
cuEventElapsedTime_v2(float *ms, cu_event start, cu_event end)
{
    *ms = (float)((*(double *)end - *(double *)start) * 1e3);
    return sticky;
}

cu_result
cuEventDestroy_v2(cu_event e)
{
    free(e);
    return CUDA_SUCCESS;
}

cu_result
cuGetErrorName(cu_result r, const char **s)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == r) {
            *s = errors[i].name;
            return CUDA_SUCCESS;
        }
    return ERR_INVALID_VALUE;
}

cu_result
cuGetErrorString(cu_result r, const char **s)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == r) {
            *s = errors[i].text;
            return CUDA_SUCCESS;
        }
    return ERR_INVALID_VALUE;
}

/* NVRTC loads libcuda.so.1 too and asks it for private tables: there are none here (without the
 * entry point NVRTC crashes in a process that compiles with this driver loaded, as
 * test_cuda_rt lib_ops does; it compiles without the tables) */
cu_result
cuGetExportTable(const void **table, const void *id)
{
    (void)id;
    if (table)
        *table = NULL;
    return CUDA_ERROR_NOT_FOUND;
}
