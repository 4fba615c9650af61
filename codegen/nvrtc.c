/* codegen/nvrtc.c -- CUDA C to PTX with NVRTC, loaded with dlopen, and the PTX check with the
 * toolkit's ptxas, run with posix_spawn.
 *
 * kiln includes neither nvrtc.h nor any CUDA header: the few types and entry points it uses are
 * declared below (nvrtcResult is an int, nvrtcProgram an opaque pointer; the signatures are
 * those of NVRTC 11.2 to 13). libnvrtc is loaded once per process (pthread_once) from the first
 * place that has it: /usr/local/cuda/lib64, then the library path (the loader's: LD_LIBRARY_PATH,
 * the system's directories) under its development and versioned names; the handle is never closed.
 * When it cannot be loaded, the reason (the loader's message for a library that exists but does not
 * load, else the list of places tried) is kept for the "no NVRTC (...)" message.
 *
 * ptxas is looked for on every call, in /usr/local/cuda/bin, then on PATH (the library reads
 * no environment variables of its own). It assembles the PTX from a file in a private
 * temporary directory; its output becomes the error detail when it refuses. */
#include "nvrtc.h"

#include "codegen.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CUDA_PREFIX "/usr/local/cuda"

typedef int   nvrtc_result;  /* nvrtcResult */
typedef void *nvrtc_program; /* nvrtcProgram */

enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_COMPILATION = 6,
};

static struct {
    bool ok;
    int  version; /* major * 1000 + minor * 10 */
    char why[400];
    nvrtc_result (*version_of)(int *major, int *minor);
    nvrtc_result (*create)(nvrtc_program *prog, const char *src, const char *name, int nheaders,
                           const char *const *headers, const char *const *include_names);
    nvrtc_result (*destroy)(nvrtc_program *prog);
    nvrtc_result (*compile)(nvrtc_program prog, int nopt, const char *const *opt);
    nvrtc_result (*log_size)(nvrtc_program prog, size_t *size);
    nvrtc_result (*log)(nvrtc_program prog, char *log);
    nvrtc_result (*ptx_size)(nvrtc_program prog, size_t *size);
    nvrtc_result (*ptx)(nvrtc_program prog, char *ptx);
    const char *(*error_string)(nvrtc_result r);
    nvrtc_result (*num_archs)(int *n); /* optional (NVRTC >= 11.2) */
    nvrtc_result (*archs)(int *archs);
} nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

/* Looks up a function symbol into *slot (a function pointer) without the object-to-function
 * pointer cast ISO C forbids. */
static bool
sym(void *h, const char *name, void *slot)
{
    void *p = dlsym(h, name);
    if (p)
        memcpy(slot, &p, sizeof p);
    return p != NULL;
}

static void
load_nvrtc(void)
{
    static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                        "libnvrtc.so.11.2"};
    const char              *cand[1 + KILN_COUNTOF(names)];
    size_t                   n = 0;
    cand[n++] = CUDA_PREFIX "/lib64/libnvrtc.so";
    for (size_t i = 0; i < KILN_COUNTOF(names); i++)
        cand[n++] = names[i];

    void *h = NULL;
    char  loader_msg[300] = "";
    for (size_t i = 0; i < n && !h; i++) {
        dlerror();
        h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
        /* a library that exists but does not load says more than the ones that do not exist */
        if (!h && !loader_msg[0] && strchr(cand[i], '/') && access(cand[i], F_OK) == 0) {
            const char *e = dlerror();
            snprintf(loader_msg, sizeof loader_msg, "%s", e ? e : cand[i]);
        }
    }
    if (!h) {
        if (loader_msg[0]) {
            snprintf(nv.why, sizeof nv.why, "%s", loader_msg);
        } else {
            size_t len = (size_t)snprintf(nv.why, sizeof nv.why, "libnvrtc not found; tried");
            for (size_t i = 0; i < n && len < sizeof nv.why; i++)
                len += (size_t)snprintf(nv.why + len, sizeof nv.why - len, "%s %s", i ? "," : "",
                                        cand[i]);
        }
        return;
    }
    struct {
        const char *name;
        void       *slot;
    } fn[] = {
        {"nvrtcVersion", &nv.version_of},          {"nvrtcCreateProgram", &nv.create},
        {"nvrtcDestroyProgram", &nv.destroy},      {"nvrtcCompileProgram", &nv.compile},
        {"nvrtcGetProgramLogSize", &nv.log_size},  {"nvrtcGetProgramLog", &nv.log},
        {"nvrtcGetPTXSize", &nv.ptx_size},         {"nvrtcGetPTX", &nv.ptx},
        {"nvrtcGetErrorString", &nv.error_string},
    };
    for (size_t i = 0; i < KILN_COUNTOF(fn); i++)
        if (!sym(h, fn[i].name, fn[i].slot)) {
            snprintf(nv.why, sizeof nv.why, "libnvrtc lacks %s", fn[i].name);
            dlclose(h);
            return;
        }
    if (!sym(h, "nvrtcGetNumSupportedArchs", &nv.num_archs)
        || !sym(h, "nvrtcGetSupportedArchs", &nv.archs))
        nv.num_archs = NULL;
    int major = 0, minor = 0;
    if (nv.version_of(&major, &minor) != NVRTC_SUCCESS) {
        snprintf(nv.why, sizeof nv.why, "nvrtcVersion failed");
        dlclose(h);
        return;
    }
    nv.version = major * 1000 + minor * 10;
    nv.ok = true;
}

bool
kiln_nvrtc_available(void)
{
    pthread_once(&nv_once, load_nvrtc);
    return nv.ok;
}

int
kiln_nvrtc_version(void)
{
    return kiln_nvrtc_available() ? nv.version : 0;
}

/* "sm_" then a compute capability of 2 or 3 digits (no leading 0), optionally one of the
 * suffixes 'a' (architecture-specific) or 'f' (family): sm_80, sm_90a, sm_100f. *num = 80. */
static bool
parse_arch(const char *arch, int *num)
{
    if (strncmp(arch, "sm_", 3) != 0)
        return false;
    const char *p = arch + 3;
    int         digits = 0, v = 0;
    while (p[digits] >= '0' && p[digits] <= '9' && digits < 4) {
        v = v * 10 + (p[digits] - '0');
        digits++;
    }
    if (digits < 2 || digits > 3 || p[0] == '0')
        return false;
    p += digits;
    if (*p == 'a' || *p == 'f')
        p++;
    *num = v;
    return *p == 0;
}

static enum kiln_status
bad_arch(kiln_ctx *ctx, const char *who, const char *arch)
{
    return KILN_FAIL(ctx, KILN_ERR_INVALID, "nvrtc",
                     "%s: malformed GPU architecture \"%.40s\" (expected sm_ and the compute "
                     "capability, e.g. sm_80 or sm_90a)",
                     who, arch);
}

/* Fails with st and msg, and when that is the error recorded, attaches detail (ctx-owned). */
static enum kiln_status fail_with_detail(kiln_ctx *ctx, enum kiln_status st, const char *where,
                                         const char *detail, const char *fmt, ...)
    KILN_PRINTF(5, 6);
static enum kiln_status
fail_with_detail(kiln_ctx *ctx, enum kiln_status st, const char *where, const char *detail,
                 const char *fmt, ...)
{
    bool    fresh = !ctx->has_err;
    va_list ap;
    va_start(ap, fmt);
    kiln_failv(ctx, st, "nvrtc", where, fmt, ap);
    va_end(ap);
    if (fresh && ctx->has_err && detail && *detail)
        ctx->err.detail = detail;
    return st;
}

/* The program log (ctx-owned), or NULL when there is none. */
static const char *
program_log(kiln_ctx *ctx, nvrtc_program prog)
{
    size_t n = 0;
    if (nv.log_size(prog, &n) != NVRTC_SUCCESS || n <= 1)
        return NULL;
    char *log = kiln_arena_alloc(ctx, n + 1);
    if (!log || nv.log(prog, log) != NVRTC_SUCCESS)
        return NULL;
    log[n] = 0;
    return log;
}

static enum kiln_status
nvrtc_fail(kiln_ctx *ctx, const char *call, nvrtc_result r, const char *log)
{
    const char *what = nv.error_string ? nv.error_string(r) : NULL;
    return fail_with_detail(ctx, r == NVRTC_ERROR_OUT_OF_MEMORY ? KILN_ERR_NOMEM : KILN_ERR_BACKEND,
                            KILN_WHERE, log, "NVRTC: %s failed: %s (%d)", call,
                            what ? what : "unknown error", r);
}

/* KILN_ERR_UNSUPPORTED when this NVRTC lists the architectures it supports and num is not one. */
static enum kiln_status
check_supported(kiln_ctx *ctx, const char *arch, int num)
{
    int n = 0;
    if (!nv.num_archs || nv.num_archs(&n) != NVRTC_SUCCESS || n <= 0 || n > 256)
        return KILN_OK;
    int list[256];
    if (nv.archs(list) != NVRTC_SUCCESS)
        return KILN_OK;
    for (int i = 0; i < n; i++)
        if (list[i] == num)
            return KILN_OK;
    return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "nvrtc",
                     "NVRTC %d.%d cannot compile for %s (it supports sm_%d to sm_%d)",
                     nv.version / 1000, nv.version % 1000 / 10, arch, list[0], list[n - 1]);
}

enum kiln_status
kiln_nvrtc_ptx(kiln_ctx *ctx, const char *src, const char *name, const char *arch, bool fast_math,
               const char **ptx)
{
    if (ptx)
        *ptx = NULL;
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!src || !name || !arch || !ptx)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "nvrtc", "kiln_nvrtc_ptx: %s is NULL",
                         !src    ? "src"
                         : !name ? "name"
                         : !arch ? "arch"
                                 : "ptx");
    int num;
    if (!parse_arch(arch, &num))
        return bad_arch(ctx, "NVRTC", arch);
    if (!kiln_nvrtc_available())
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "nvrtc", "no NVRTC (%s)", nv.why);
    KILN_TRY(check_supported(ctx, arch, num));

    nvrtc_program prog = NULL;
    nvrtc_result  r = nv.create(&prog, src, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(ctx, "nvrtcCreateProgram", r, NULL);
    char gpu_arch[64];
    snprintf(gpu_arch, sizeof gpu_arch, "--gpu-architecture=compute_%s", arch + 3);
    const char *const opt[] = {gpu_arch, "-default-device", "--use_fast_math"};
    enum kiln_status  st = KILN_OK;
    r = nv.compile(prog, fast_math ? 3 : 2, opt);
    if (r == NVRTC_ERROR_COMPILATION) {
        st = fail_with_detail(ctx, KILN_ERR_BACKEND, KILN_WHERE, program_log(ctx, prog),
                              "NVRTC: compiling %.80s for %s failed", name, arch);
    } else if (r != NVRTC_SUCCESS) {
        st = nvrtc_fail(ctx, "nvrtcCompileProgram", r, program_log(ctx, prog));
    } else {
        size_t n = 0;
        char  *text = NULL;
        r = nv.ptx_size(prog, &n);
        if (r != NVRTC_SUCCESS)
            st = nvrtc_fail(ctx, "nvrtcGetPTXSize", r, NULL);
        else if (!(text = kiln_arena_alloc(ctx, n + 1)))
            st = KILN_ERR_NOMEM;
        else if ((r = nv.ptx(prog, text)) != NVRTC_SUCCESS)
            st = nvrtc_fail(ctx, "nvrtcGetPTX", r, NULL);
        if (st == KILN_OK) {
            text[n] = 0;
            *ptx = text;
        }
    }
    nv.destroy(&prog);
    return st;
}

/* ---- ptxas ---- */

/* The ptxas to run: the first executable one under a CUDA prefix, else "ptxas" (PATH). */
static const char *
find_ptxas(void)
{
    if (access(CUDA_PREFIX "/bin/ptxas", X_OK) == 0)
        return CUDA_PREFIX "/bin/ptxas";
    return "ptxas";
}

static bool
write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    size_t len = strlen(text), done = 0;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            close(fd);
            errno = e;
            return false;
        }
        done += (size_t)n;
    }
    return close(fd) == 0;
}

enum kiln_status
kiln_ptxas_check(kiln_ctx *ctx, const char *ptx, const char *arch)
{
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!ptx || !arch)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "nvrtc", "kiln_ptxas_check: %s is NULL",
                         !ptx ? "ptx" : "arch");
    int num;
    if (!parse_arch(arch, &num))
        return bad_arch(ctx, "ptxas", arch);
    const char *ptxas = find_ptxas();

    char dir[512], in[600], out[600], archopt[64];
    KILN_TRY(kiln_cg_mkdtemp(ctx, "ptxas", dir, sizeof dir));
    snprintf(in, sizeof in, "%s/kernel.ptx", dir);
    snprintf(out, sizeof out, "%s/kernel.cubin", dir);
    snprintf(archopt, sizeof archopt, "-arch=%s", arch);
    enum kiln_status st = KILN_OK;
    if (!write_file(in, ptx)) {
        st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "nvrtc", "ptxas: cannot write %s: %s", in,
                       strerror(errno));
    } else {
        char *const     argv[] = {(char *)ptxas, archopt, (char *)"-o", out, in, NULL};
        struct kiln_buf log = {0};
        int             rc = kiln_cg_run(ctx, argv, &log);
        if (rc < 0 && errno == ENOENT && !strchr(ptxas, '/'))
            st = KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "nvrtc",
                           "no ptxas (not in " CUDA_PREFIX "/bin or on PATH)");
        else if (rc < 0)
            st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "nvrtc", "ptxas: cannot run %s: %s", ptxas,
                           strerror(errno));
        else if (rc != 0)
            st = fail_with_detail(ctx, KILN_ERR_BACKEND, KILN_WHERE, log.data,
                                  "ptxas: assembling PTX for %s failed (%s exited with status %d)",
                                  arch, ptxas, rc);
    }
    unlink(out);
    unlink(in);
    rmdir(dir);
    return st;
}
