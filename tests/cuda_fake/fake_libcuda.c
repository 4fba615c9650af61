/* tests/cuda_fake/fake_libcuda.c -- a stand-in for the CUDA driver (built as libcuda.so.1 in
 * the build directory's fake_cuda/), so that the host side of kiln's GPU runtime -- devices,
 * contexts, device memory, module loading, which kernels a call launches with which pointers,
 * prepared areas, event timing -- runs and is checked on machines without a GPU. Kernels are
 * not run: a launch is checked and written to a log.
 *
 * It implements the entry points runtime/cuda_drv.c loads, with the driver's rules where kiln
 * could break them: calls that need a context fail without a current one; device memory is host
 * memory, 256-byte aligned, and a copy, a free or a launch's pointer argument outside a live
 * allocation is an error (CUDA_ERROR_INVALID_VALUE); a function launched in another context
 * than its module's is CUDA_ERROR_INVALID_CONTEXT. One device, "kiln fake CUDA device", sm_80.
 * Time is a counter: every launch takes 1 ms, so event timings are exact.
 *
 * Tests inspect it through the kiln_fake_cuda_* functions (dlsym on the loaded library): the
 * log, one line per launch ("launch NAME(a1+0, a2+0, 0, a4+0)": pointer arguments as the
 * allocation's number, counted from 1 in allocation order, and the offset into it) and per
 * allocation ("alloc a4 1024") and free ("free a4"); the number of live allocations; and a way
 * to make the next calls of one entry point fail. */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int                CUresult;
typedef int                CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0,
    ERR_INVALID_VALUE = 1,
    ERR_OUT_OF_MEMORY = 2,
    ERR_NOT_INITIALIZED = 3,
    ERR_INVALID_DEVICE = 101,
    ERR_INVALID_PTX = 218,
    ERR_INVALID_CONTEXT = 201,
    ERR_INVALID_HANDLE = 400,
    ERR_NOT_FOUND = 500,
    ERR_LAUNCH_FAILED = 719,
};

#define EXPORT     __attribute__((visibility("default")))
#define MAX_ALLOC  4096
#define MAX_STACK  16
#define MAX_PARAMS 256
#define LOG_BYTES  (1 << 20)

/* The entry points (prototypes for -Wmissing-prototypes; the driver's names and types). */
EXPORT CUresult cuInit(unsigned flags);
EXPORT CUresult cuDeviceGetCount(int *n);
EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal);
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice dev);
EXPORT CUresult cuDevicePrimaryCtxRetain(void **c, CUdevice dev);
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
EXPORT CUresult cuCtxPushCurrent_v2(void *c);
EXPORT CUresult cuCtxPopCurrent_v2(void **c);
EXPORT CUresult cuCtxSynchronize(void);
EXPORT CUresult cuCtxGetCurrent(void **c);
EXPORT CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned nopt, int *opt,
                                   void **val);
EXPORT CUresult cuModuleUnload(void *m);
EXPORT CUresult cuModuleGetFunction(void **f, void *m, const char *name);
EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, void *stream, void **args,
                               void **extra);
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
EXPORT CUresult cuMemFree_v2(CUdeviceptr p);
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);
EXPORT CUresult cuEventCreate(void **e, unsigned flags);
EXPORT CUresult cuEventRecord(void *e, void *stream);
EXPORT CUresult cuEventSynchronize(void *e);
EXPORT CUresult cuEventElapsedTime_v2(float *ms, void *start, void *end);
EXPORT CUresult cuEventDestroy_v2(void *e);
EXPORT CUresult cuGetErrorName(CUresult r, const char **s);
EXPORT CUresult cuGetErrorString(CUresult r, const char **s);
EXPORT CUresult cuGetExportTable(const void **table, const void *id);
/* For tests. */
EXPORT const char *kiln_fake_cuda_log(void);
EXPORT void        kiln_fake_cuda_log_clear(void);
EXPORT int         kiln_fake_cuda_live(void);
EXPORT void        kiln_fake_cuda_fail(const char *entry, int after, CUresult r);

struct alloc {
    unsigned char *p;
    size_t         bytes;
    int            id; /* 1, 2, ... in allocation order; 0: free slot */
};

struct module {
    void *context;
    char *ptx;
};

struct function {
    struct module *mod;
    char           name[128];
    int            nparams;
};

struct event {
    double ms;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int             initialized;
static int             primary_obj; /* the primary context is this object's address */
static int             primary_refs;
static struct alloc    allocs[MAX_ALLOC];
static int             nallocs; /* allocations ever made: the last one's id */
static char            logbuf[LOG_BYTES];
static size_t          loglen;
static double          clock_ms; /* 1 ms per launch */
static char            fail_entry[64];
static int             fail_after;
static CUresult        fail_result;

static _Thread_local void *stack[MAX_STACK];
static _Thread_local int   depth;

static void logf_locked(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
logf_locked(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (loglen < LOG_BYTES) {
        int n = vsnprintf(logbuf + loglen, LOG_BYTES - loglen, fmt, ap);
        if (n > 0)
            loglen += (size_t)n < LOG_BYTES - loglen ? (size_t)n : LOG_BYTES - loglen - 1;
    }
    va_end(ap);
}

/* Whether entry should fail now (kiln_fake_cuda_fail): its error, else OK. Under lock. */
static CUresult
injected(const char *entry)
{
    if (!fail_entry[0] || strcmp(entry, fail_entry) != 0)
        return OK;
    if (fail_after > 0) {
        fail_after--;
        return OK;
    }
    return fail_result;
}

static void *
current(void)
{
    return depth > 0 ? stack[depth - 1] : NULL;
}

/* The live allocation holding [p, p + bytes), or NULL. Under lock. */
static struct alloc *
find(CUdeviceptr p, size_t bytes)
{
    for (int i = 0; i < MAX_ALLOC; i++) {
        struct alloc *a = &allocs[i];
        uintptr_t     lo = (uintptr_t)a->p;
        if (a->id && p >= lo && p - lo <= a->bytes && bytes <= a->bytes - (p - lo))
            return a;
    }
    return NULL;
}

CUresult
cuInit(unsigned flags)
{
    (void)flags;
    pthread_mutex_lock(&lock);
    CUresult r = injected("cuInit");
    if (r == OK)
        initialized = 1;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult
cuDeviceGetCount(int *n)
{
    if (!initialized)
        return ERR_NOT_INITIALIZED;
    *n = 1;
    return OK;
}

CUresult
cuDeviceGet(CUdevice *dev, int ordinal)
{
    if (!initialized)
        return ERR_NOT_INITIALIZED;
    if (ordinal != 0)
        return ERR_INVALID_DEVICE;
    *dev = 0;
    return OK;
}

CUresult
cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (dev != 0 || len <= 0)
        return ERR_INVALID_VALUE;
    snprintf(name, (size_t)len, "kiln fake CUDA device");
    return OK;
}

CUresult
cuDeviceGetAttribute(int *v, int attr, CUdevice dev)
{
    if (dev != 0)
        return ERR_INVALID_DEVICE;
    *v = attr == 75 ? 8 : 0; /* compute capability 8.0 */
    return OK;
}

CUresult
cuDevicePrimaryCtxRetain(void **c, CUdevice dev)
{
    if (!initialized)
        return ERR_NOT_INITIALIZED;
    if (dev != 0)
        return ERR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    primary_refs++;
    pthread_mutex_unlock(&lock);
    *c = &primary_obj;
    return OK;
}

CUresult
cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    if (dev != 0)
        return ERR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    CUresult r = primary_refs > 0 ? OK : ERR_INVALID_CONTEXT;
    if (r == OK)
        primary_refs--;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult
cuCtxPushCurrent_v2(void *c)
{
    if (!c || depth == MAX_STACK)
        return ERR_INVALID_VALUE;
    stack[depth++] = c;
    return OK;
}

CUresult
cuCtxPopCurrent_v2(void **c)
{
    if (depth == 0)
        return ERR_INVALID_CONTEXT;
    void *top = stack[--depth];
    if (c)
        *c = top;
    return OK;
}

CUresult
cuCtxGetCurrent(void **c)
{
    if (!initialized)
        return ERR_NOT_INITIALIZED;
    *c = current();
    return OK;
}

CUresult
cuCtxSynchronize(void)
{
    return current() ? OK : ERR_INVALID_CONTEXT;
}

CUresult
cuModuleLoadDataEx(void **m, const void *image, unsigned nopt, int *opt, void **val)
{
    if (!current())
        return ERR_INVALID_CONTEXT;
    const char *ptx = image;
    if (!ptx || !strstr(ptx, ".entry ")) {
        for (unsigned i = 0; i + 1 < nopt; i++) /* the log buffer, then its size */
            if (opt[i] == 5 && opt[i + 1] == 6 && val[i])
                snprintf(val[i], (size_t)(uintptr_t)val[i + 1], "fake: the image has no .entry");
        return ERR_INVALID_PTX;
    }
    struct module *mod = calloc(1, sizeof *mod);
    if (!mod || !(mod->ptx = strdup(ptx))) {
        free(mod);
        return ERR_OUT_OF_MEMORY;
    }
    mod->context = current();
    *m = mod;
    return OK;
}

CUresult
cuModuleUnload(void *m)
{
    struct module *mod = m;
    if (!mod)
        return ERR_INVALID_HANDLE;
    free(mod->ptx);
    free(mod);
    return OK;
}

/* The kernel's parameters: the ".param" entries of ".entry NAME(...)". */
CUresult
cuModuleGetFunction(void **f, void *m, const char *name)
{
    struct module *mod = m;
    char           head[160];
    if (!mod || !name)
        return ERR_INVALID_VALUE;
    snprintf(head, sizeof head, ".entry %s(", name);
    const char *p = strstr(mod->ptx, head);
    if (!p)
        return ERR_NOT_FOUND;
    const char      *end = strchr(p, ')');
    struct function *fn = calloc(1, sizeof *fn);
    if (!fn || !end) {
        free(fn);
        return !fn ? ERR_OUT_OF_MEMORY : ERR_INVALID_PTX;
    }
    for (const char *q = p; (q = strstr(q, ".param")) && q < end; q++)
        fn->nparams++;
    fn->mod = mod;
    snprintf(fn->name, sizeof fn->name, "%s", name);
    *f = fn; /* freed with the process: kiln never unloads a module's functions */
    return OK;
}

CUresult
cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
               unsigned bz, unsigned shared, void *stream, void **args, void **extra)
{
    struct function *fn = f;
    (void)shared;
    (void)stream;
    (void)extra;
    if (!fn || !args || !gx || !gy || !gz || !bx || !by || !bz)
        return ERR_INVALID_VALUE;
    if (current() != fn->mod->context)
        return ERR_INVALID_CONTEXT;
    if (fn->nparams > MAX_PARAMS)
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = injected("cuLaunchKernel");
    char     line[4096];
    size_t   n = (size_t)snprintf(line, sizeof line, "launch %s(", fn->name);
    for (int i = 0; r == OK && i < fn->nparams && n < sizeof line; i++) {
        CUdeviceptr p;
        memcpy(&p, args[i], sizeof p); /* every kiln kernel parameter is a pointer */
        const struct alloc *a = p ? find(p, 0) : NULL;
        if (p && !a)
            r = ERR_INVALID_VALUE;
        else if (a)
            n += (size_t)snprintf(line + n, sizeof line - n, "%sa%d+%llu", i ? ", " : "", a->id,
                                  (unsigned long long)(p - (uintptr_t)a->p));
        else
            n += (size_t)snprintf(line + n, sizeof line - n, "%s0", i ? ", " : "");
    }
    if (r == OK) {
        logf_locked("%s)\n", line);
        clock_ms += 1.0;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult
cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
    if (!current())
        return ERR_INVALID_CONTEXT;
    if (!p || bytes == 0)
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = injected("cuMemAlloc_v2");
    int      slot = -1;
    for (int i = 0; r == OK && i < MAX_ALLOC && slot < 0; i++)
        if (!allocs[i].id)
            slot = i;
    unsigned char *mem =
        r == OK && slot >= 0 ? aligned_alloc(256, (bytes + 255) / 256 * 256) : NULL;
    if (r == OK && !mem)
        r = ERR_OUT_OF_MEMORY;
    if (r == OK) {
        allocs[slot] = (struct alloc){mem, bytes, ++nallocs};
        *p = (CUdeviceptr)(uintptr_t)mem;
        logf_locked("alloc a%d %zu\n", nallocs, bytes);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult
cuMemFree_v2(CUdeviceptr p)
{
    pthread_mutex_lock(&lock);
    CUresult r = ERR_INVALID_VALUE;
    for (int i = 0; i < MAX_ALLOC; i++)
        if (allocs[i].id && (uintptr_t)allocs[i].p == p) {
            logf_locked("free a%d\n", allocs[i].id);
            free(allocs[i].p);
            allocs[i] = (struct alloc){NULL, 0, 0};
            r = OK;
            break;
        }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult
cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes)
{
    if (!current())
        return ERR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult r = find(dst, bytes) && src ? OK : ERR_INVALID_VALUE;
    if (r == OK)
        memcpy((void *)(uintptr_t)dst, src, bytes);
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult
cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
{
    if (!current())
        return ERR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult r = find(src, bytes) && dst ? OK : ERR_INVALID_VALUE;
    if (r == OK)
        memcpy(dst, (const void *)(uintptr_t)src, bytes);
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult
cuEventCreate(void **e, unsigned flags)
{
    (void)flags;
    if (!current())
        return ERR_INVALID_CONTEXT;
    struct event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return ERR_OUT_OF_MEMORY;
    *e = ev;
    return OK;
}

CUresult
cuEventRecord(void *e, void *stream)
{
    (void)stream;
    if (!e || !current())
        return !e ? ERR_INVALID_HANDLE : ERR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    ((struct event *)e)->ms = clock_ms;
    pthread_mutex_unlock(&lock);
    return OK;
}

CUresult
cuEventSynchronize(void *e)
{
    return e ? OK : ERR_INVALID_HANDLE;
}

CUresult
cuEventElapsedTime_v2(float *ms, void *start, void *end)
{
    if (!start || !end)
        return ERR_INVALID_HANDLE;
    *ms = (float)(((struct event *)end)->ms - ((struct event *)start)->ms);
    return OK;
}

CUresult
cuEventDestroy_v2(void *e)
{
    free(e);
    return OK;
}

static const char *
error_name(CUresult r)
{
    switch (r) {
    case OK:
        return "CUDA_SUCCESS";
    case ERR_INVALID_VALUE:
        return "CUDA_ERROR_INVALID_VALUE";
    case ERR_OUT_OF_MEMORY:
        return "CUDA_ERROR_OUT_OF_MEMORY";
    case ERR_NOT_INITIALIZED:
        return "CUDA_ERROR_NOT_INITIALIZED";
    case ERR_INVALID_DEVICE:
        return "CUDA_ERROR_INVALID_DEVICE";
    case ERR_INVALID_PTX:
        return "CUDA_ERROR_INVALID_PTX";
    case ERR_INVALID_CONTEXT:
        return "CUDA_ERROR_INVALID_CONTEXT";
    case ERR_INVALID_HANDLE:
        return "CUDA_ERROR_INVALID_HANDLE";
    case ERR_NOT_FOUND:
        return "CUDA_ERROR_NOT_FOUND";
    case ERR_LAUNCH_FAILED:
        return "CUDA_ERROR_LAUNCH_FAILED";
    default:
        return NULL;
    }
}

CUresult
cuGetErrorName(CUresult r, const char **s)
{
    *s = error_name(r);
    return *s ? OK : ERR_INVALID_VALUE;
}

CUresult
cuGetErrorString(CUresult r, const char **s)
{
    *s = error_name(r) ? "fake driver error" : NULL;
    if (r == ERR_OUT_OF_MEMORY)
        *s = "out of memory";
    return *s ? OK : ERR_INVALID_VALUE;
}

/* NVRTC loads libcuda.so.1 too and asks it for private tables: there are none here (it crashes
 * when the entry point is missing, and compiles without the tables). */
CUresult
cuGetExportTable(const void **table, const void *id)
{
    (void)id;
    if (table)
        *table = NULL;
    return ERR_NOT_FOUND;
}

const char *
kiln_fake_cuda_log(void)
{
    return logbuf;
}

void
kiln_fake_cuda_log_clear(void)
{
    pthread_mutex_lock(&lock);
    loglen = 0;
    logbuf[0] = 0;
    pthread_mutex_unlock(&lock);
}

int
kiln_fake_cuda_live(void)
{
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOC; i++)
        n += allocs[i].id != 0;
    pthread_mutex_unlock(&lock);
    return n;
}

/* The calls of entry after the next `after` ones fail with r; entry NULL stops that. */
void
kiln_fake_cuda_fail(const char *entry, int after, CUresult r)
{
    pthread_mutex_lock(&lock);
    snprintf(fail_entry, sizeof fail_entry, "%s", entry ? entry : "");
    fail_after = after;
    fail_result = r;
    pthread_mutex_unlock(&lock);
}
