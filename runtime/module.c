/* runtime/module.c -- loading a generated shared object into this process (the public
 * kiln_module_* API of include/kiln.h): dlopen it with RTLD_NOW | RTLD_LOCAL, look up the
 * entry points of include/kiln_abi.h and the `kiln_desc` descriptor (include/kiln_abi_impl.h),
 * check the ABI version, and call it through its own kiln_call, turning the ABI status and
 * message into a kiln_status in the context. The arguments it lists are those a caller passes:
 * a module's embedded weights (kiln_abi_impl.h's `embedded`) are listed apart.
 *
 * Choices. A path without a slash is taken relative to the working directory ("./" is
 * prepended), never searched for on LD_LIBRARY_PATH as dlopen would. The ABI version is read
 * through kiln_abi_version() before anything else of the object is trusted: a mismatch means
 * the descriptor's layout may differ. The module struct is allocated with the context's
 * allocator but keeps its own copy of the hook, so a module may outlive the context that loaded
 * it. Argument descriptions point into the loaded object and stay valid until
 * kiln_module_free. Before dlopen maps the file, check_file reads its ELF header and program
 * headers and refuses anything the dynamic loader would map past the end of the file: a
 * truncated object (an interrupted copy or compile) would otherwise be mapped and fault with
 * SIGBUS on first touch instead of failing. Depends on util and libc (libdl). */
#include "../util/util.h"
#include "runtime.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KILN_DL_BOOL 6 /* DLDataTypeCode kDLBool (DLPack >= 0.8) */

typedef const char *(*source_fn)(void);

struct kiln_module {
    void                       *handle;
    kiln_alloc_fn               alloc; /* the loading context's allocator hook (NULL = libc) */
    void                       *alloc_ud;
    const struct kiln_abi_desc *desc;
    kiln_call_fn                call;
    kiln_metadata_fn            metadata;
    source_fn                   source;
    kiln_set_num_threads_fn     set_num_threads;
    kiln_prepare_fn             prepare; /* NULL for modules older than prepared calls */
    kiln_call_prepared_fn       call_prepared;
    kiln_prepared_free_fn       prepared_free;
};

/* The handle of a module without kiln_prepare: its prepared calls are plain calls. */
static const char no_prepare = 0;

/* Looks up a function symbol without the object-to-function-pointer cast ISO C forbids. */
static void *
lookup(void *handle, const char *name)
{
    dlerror();
    return dlsym(handle, name);
}

static enum kiln_status
not_kiln(kiln_ctx *ctx, const char *path, const char *sym)
{
    return KILN_FAIL(ctx, KILN_ERR_INVALID, "module",
                     "%s is not a kiln module: it does not export %s", path, sym);
}

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#elif defined(__riscv)
#define HOST_MACHINE EM_RISCV
#elif defined(__powerpc64__)
#define HOST_MACHINE EM_PPC64
#else
#define HOST_MACHINE EM_NONE /* unknown host: the machine is not checked */
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_DATA ELFDATA2MSB
#else
#define HOST_DATA ELFDATA2LSB
#endif

static enum kiln_status
truncated(kiln_ctx *ctx, const char *path, uint64_t size, const char *what, uint64_t end)
{
    return KILN_FAIL(ctx, KILN_ERR_INVALID, "module",
                     "%s: not a complete kiln module (truncated: the file has %llu bytes, %s "
                     "ends at byte %llu)",
                     path, (unsigned long long)size, what, (unsigned long long)end);
}

/* Whether off + n * entsize <= size, without overflow; *end receives the end (saturated). */
static bool
table_fits(uint64_t off, uint64_t n, uint64_t entsize, uint64_t size, uint64_t *end)
{
    uint64_t bytes;
    if (__builtin_mul_overflow(n, entsize, &bytes) || __builtin_add_overflow(off, bytes, end)) {
        *end = UINT64_MAX;
        return false;
    }
    return *end <= size;
}

/* Checks that path holds a whole 64-bit ELF shared object for this host: its header, its
 * section and program header tables and every PT_LOAD segment's bytes lie within the file. */
static enum kiln_status
check_file(kiln_ctx *ctx, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "module", "cannot open %s: %s", path,
                         strerror(errno));
    struct stat      sb;
    Elf64_Ehdr       eh;
    enum kiln_status st = KILN_OK;
    if (fstat(fd, &sb) != 0) {
        st =
            KILN_FAIL(ctx, KILN_ERR_INVALID, "module", "cannot open %s: %s", path, strerror(errno));
        goto done;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size >= 4 && pread(fd, &eh, 4, 0) == 4 && memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "module",
                       "cannot load %s: not an ELF shared object (no ELF magic)", path);
        goto done;
    }
    if (size < sizeof eh || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) {
        st = truncated(ctx, path, size, "the ELF header", sizeof eh);
        goto done;
    }
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != HOST_DATA
        || (HOST_MACHINE != EM_NONE && eh.e_machine != HOST_MACHINE)) {
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "module",
                       "cannot load %s: an ELF object for another machine (class %d, data %d, "
                       "machine %d; this host wants class %d, data %d, machine %d)",
                       path, eh.e_ident[EI_CLASS], eh.e_ident[EI_DATA], eh.e_machine, ELFCLASS64,
                       HOST_DATA, HOST_MACHINE);
        goto done;
    }
    if (eh.e_type != ET_DYN || eh.e_phentsize != sizeof(Elf64_Phdr)
        || (eh.e_shnum && eh.e_shentsize != sizeof(Elf64_Shdr))) {
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "module",
                       "cannot load %s: not an ELF shared object (type %d)", path, eh.e_type);
        goto done;
    }
    uint64_t end;
    if (!table_fits(eh.e_phoff, eh.e_phnum, eh.e_phentsize, size, &end)) {
        st = truncated(ctx, path, size, "the program header table", end);
        goto done;
    }
    if (eh.e_shoff && !table_fits(eh.e_shoff, eh.e_shnum, eh.e_shentsize, size, &end)) {
        st = truncated(ctx, path, size, "the section header table", end);
        goto done;
    }
    for (uint16_t i = 0; i < eh.e_phnum && st == KILN_OK; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * sizeof ph))
            != (ssize_t)sizeof ph) {
            st = truncated(ctx, path, size, "the program header table",
                           eh.e_phoff + (uint64_t)(i + 1) * sizeof ph);
            break;
        }
        if (ph.p_type == PT_LOAD && !table_fits(ph.p_offset, 1, ph.p_filesz, size, &end)) {
            char what[48];
            snprintf(what, sizeof what, "loadable segment %u", (unsigned)i);
            st = truncated(ctx, path, size, what, end);
        }
    }
done:
    close(fd);
    return st;
}

enum kiln_status
kiln_module_load(kiln_ctx *ctx, const char *path, struct kiln_module **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!path || !*path || !out)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "module", "kiln_module_load: %s is NULL",
                         !out ? "out" : "path");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "module", "cannot open %s: %s", path,
                         strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "module", "cannot load %s: not a regular file",
                         path);
    enum kiln_status checked = check_file(ctx, path);
    if (checked != KILN_OK)
        return checked;
    const char *open_path = path;
    if (!strchr(path, '/')) {
        open_path = kiln_arena_printf(ctx, "./%s", path);
        if (!open_path)
            return ctx->err.status;
    }

    dlerror();
    void *h = dlopen(open_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "module", "cannot load %s: %s", path,
                         e ? e : "dlopen failed");
    }

    struct {
        const char *name;
        void       *p;
    } sym[] = {{"kiln_abi_version", NULL}, {"kiln_metadata", NULL},        {"kiln_source", NULL},
               {"kiln_call", NULL},        {"kiln_set_num_threads", NULL}, {"kiln_desc", NULL}};
    enum kiln_status st = KILN_OK;
    for (size_t i = 0; i < KILN_COUNTOF(sym) && st == KILN_OK; i++) {
        sym[i].p = lookup(h, sym[i].name);
        if (!sym[i].p)
            st = not_kiln(ctx, path, sym[i].name);
        if (st == KILN_OK && i == 0) {
            kiln_abi_version_fn version;
            memcpy(&version, &sym[0].p, sizeof version);
            int32_t v = version();
            if (v != KILN_ABI_VERSION)
                st = KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "module",
                               "%s was built for kiln ABI version %d; this libkiln supports "
                               "version %d",
                               path, (int)v, KILN_ABI_VERSION);
        }
    }
    const struct kiln_abi_desc *desc = sym[5].p;
    if (st == KILN_OK
        && (desc->abi_version != KILN_ABI_VERSION || desc->nargs < 0
            || (desc->nargs > 0 && !desc->args)))
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "module", "%s has a malformed kiln_desc", path);
    char cpu[256];
    if (st == KILN_OK && kiln_abi_cpu_check(desc->cpu_features, cpu, sizeof cpu) != KILN_ABI_OK)
        st = KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "module", "cannot load %s: %s", path, cpu);
    struct kiln_module *m = NULL;
    if (st == KILN_OK) {
        m = kiln_mem_realloc(ctx, NULL, 0, sizeof *m);
        if (!m)
            st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "module", "loading %s: out of memory", path);
    }
    if (st != KILN_OK) {
        dlclose(h);
        return st;
    }
    memset(m, 0, sizeof *m);
    m->handle = h;
    m->alloc = ctx->alloc;
    m->alloc_ud = ctx->alloc_ud;
    m->desc = desc;
    memcpy(&m->metadata, &sym[1].p, sizeof m->metadata);
    memcpy(&m->source, &sym[2].p, sizeof m->source);
    memcpy(&m->call, &sym[3].p, sizeof m->call);
    memcpy(&m->set_num_threads, &sym[4].p, sizeof m->set_num_threads);
    void *pp = lookup(h, "kiln_prepare"), *pc = lookup(h, "kiln_call_prepared"),
         *pf = lookup(h, "kiln_prepared_free");
    if (pp && pc && pf) {
        memcpy(&m->prepare, &pp, sizeof m->prepare);
        memcpy(&m->call_prepared, &pc, sizeof m->call_prepared);
        memcpy(&m->prepared_free, &pf, sizeof m->prepared_free);
    }
    *out = m;
    return KILN_OK;
}

void
kiln_module_free(struct kiln_module *m)
{
    if (!m)
        return;
    dlclose(m->handle);
    if (m->alloc)
        m->alloc(m->alloc_ud, m, sizeof *m, 0);
    else
        free(m);
}

const char *
kiln_module_metadata(const struct kiln_module *m)
{
    const char *s = m ? m->metadata() : NULL;
    return s ? s : "{}";
}

const char *
kiln_module_source(const struct kiln_module *m)
{
    const char *s = m ? m->source() : NULL;
    return s ? s : "";
}

uint32_t
kiln_module_nargs(const struct kiln_module *m)
{
    return m ? (uint32_t)kiln_abi_ncall(m->desc) : 0;
}

uint32_t
kiln_module_nembedded(const struct kiln_module *m)
{
    return m ? (uint32_t)(m->desc->nargs - kiln_abi_ncall(m->desc)) : 0;
}

static enum kiln_dtype
dtype_of(const struct kiln_abi_arg *a)
{
    if (a->lanes != 1)
        return KILN_DTYPE_COUNT;
    switch (a->code) {
    case kDLFloat:
        return a->bits == 32   ? KILN_DTYPE_F32
               : a->bits == 16 ? KILN_DTYPE_F16
               : a->bits == 64 ? KILN_DTYPE_F64
                               : KILN_DTYPE_COUNT;
    case kDLBfloat:
        return a->bits == 16 ? KILN_DTYPE_BF16 : KILN_DTYPE_COUNT;
    case kDLInt:
        return a->bits == 8    ? KILN_DTYPE_I8
               : a->bits == 16 ? KILN_DTYPE_I16
               : a->bits == 32 ? KILN_DTYPE_I32
               : a->bits == 64 ? KILN_DTYPE_I64
                               : KILN_DTYPE_COUNT;
    case kDLUInt:
        return a->bits == 8    ? KILN_DTYPE_U8
               : a->bits == 16 ? KILN_DTYPE_U16
               : a->bits == 32 ? KILN_DTYPE_U32
               : a->bits == 64 ? KILN_DTYPE_U64
                               : KILN_DTYPE_COUNT;
    case KILN_DL_BOOL:
        return a->bits == 8 ? KILN_DTYPE_BOOL : KILN_DTYPE_COUNT;
    default:
        return KILN_DTYPE_COUNT;
    }
}

/* The descriptor's index of the i-th argument whose embedded-ness is `embedded`; -1: none. */
static int32_t
slot(const struct kiln_abi_desc *d, uint32_t i, bool embedded)
{
    for (int32_t k = 0; k < d->nargs; k++)
        if ((d->embedded && d->embedded[k]) == embedded && i-- == 0)
            return k;
    return -1;
}

static void
describe_arg(const struct kiln_abi_arg *a, struct kiln_module_arg *out)
{
    memset(out, 0, sizeof *out);
    out->name = a->name ? a->name : "";
    out->dtype = dtype_of(a);
    out->dl_dtype.code = a->code;
    out->dl_dtype.bits = a->bits;
    out->dl_dtype.lanes = a->lanes;
    out->ndim = a->ndim;
    out->shape = a->shape;
    out->role = a->role == KILN_ARG_OUTPUT   ? KILN_ARG_OUTPUT
                : a->role == KILN_ARG_WEIGHT ? KILN_ARG_WEIGHT
                                             : KILN_ARG_INPUT;
    out->align = a->align;
    int64_t bytes = (int64_t)((a->bits + 7) / 8) * (a->lanes ? a->lanes : 1);
    for (int32_t d = 0; d < a->ndim; d++)
        bytes *= a->shape[d];
    out->bytes = bytes;
}

enum kiln_status
kiln_module_arg(const struct kiln_module *m, uint32_t i, struct kiln_module_arg *out)
{
    int32_t k = m && out ? slot(m->desc, i, false) : -1;
    if (k < 0)
        return KILN_ERR_INVALID;
    describe_arg(&m->desc->args[k], out);
    return KILN_OK;
}

enum kiln_status
kiln_module_embedded(const struct kiln_module *m, uint32_t i, struct kiln_module_arg *out,
                     const void **data, uint32_t *position)
{
    int32_t k = m && out ? slot(m->desc, i, true) : -1;
    if (k < 0)
        return KILN_ERR_INVALID;
    describe_arg(&m->desc->args[k], out);
    if (data)
        *data = m->desc->embedded[k];
    if (position)
        *position = (uint32_t)k;
    return KILN_OK;
}

int32_t
kiln_module_device(const struct kiln_module *m)
{
    return m ? m->desc->device : 0;
}

void
kiln_module_set_num_threads(struct kiln_module *m, int32_t n)
{
    if (m)
        m->set_num_threads(n < 0 ? 0 : n);
}

static enum kiln_status
status_of(int32_t abi)
{
    switch (abi) {
    case KILN_ABI_ERR_NOMEM:
        return KILN_ERR_NOMEM;
    case KILN_ABI_ERR_RUNTIME:
        return KILN_ERR_BACKEND;
    default:
        return KILN_ERR_INVALID;
    }
}

enum kiln_status
kiln_module_call(kiln_ctx *ctx, struct kiln_module *m, DLTensor *const *args, int32_t nargs,
                 int32_t *abi_status)
{
    if (abi_status)
        *abi_status = KILN_ABI_OK;
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!m)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "run", "kiln_module_call: module is NULL");
    char    err[sizeof ctx->err.msg];
    int32_t rc = m->call(args, nargs, err, sizeof err);
    if (abi_status)
        *abi_status = rc;
    if (rc == KILN_ABI_OK)
        return KILN_OK;
    return KILN_FAIL(ctx, status_of(rc), "run", "%s", err[0] ? err : "kiln_call failed");
}

enum kiln_status
kiln_module_prepare(kiln_ctx *ctx, struct kiln_module *m, DLTensor *const *args, int32_t nargs,
                    struct kiln_prepared **out, int32_t *abi_status)
{
    if (abi_status)
        *abi_status = KILN_ABI_OK;
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!m || !out)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "run", "kiln_module_prepare: %s is NULL",
                         !m ? "module" : "out");
    char    err[sizeof ctx->err.msg];
    int32_t rc;
    void   *p = NULL;
    if (m->prepare) {
        rc = m->prepare(args, nargs, &p, err, sizeof err);
    } else { /* an older module: check the arguments with a plain call */
        rc = m->call(args, nargs, err, sizeof err);
        p = (void *)&no_prepare;
    }
    if (abi_status)
        *abi_status = rc;
    if (rc != KILN_ABI_OK)
        return KILN_FAIL(ctx, status_of(rc), "run", "%s", err[0] ? err : "kiln_prepare failed");
    *out = p;
    return KILN_OK;
}

enum kiln_status
kiln_module_call_prepared(kiln_ctx *ctx, struct kiln_module *m, const struct kiln_prepared *p,
                          DLTensor *const *args, int32_t nargs, int32_t *abi_status)
{
    if (abi_status)
        *abi_status = KILN_ABI_OK;
    if (!ctx)
        return KILN_ERR_INVALID;
    if (!m || !p)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "run", "kiln_module_call_prepared: %s is NULL",
                         !m ? "module" : "the prepared handle");
    char    err[sizeof ctx->err.msg];
    int32_t rc = (const void *)p == (const void *)&no_prepare || !m->call_prepared
                     ? m->call(args, nargs, err, sizeof err)
                     : m->call_prepared(p, args, nargs, err, sizeof err);
    if (abi_status)
        *abi_status = rc;
    if (rc == KILN_ABI_OK)
        return KILN_OK;
    return KILN_FAIL(ctx, status_of(rc), "run", "%s", err[0] ? err : "kiln_call_prepared failed");
}

void
kiln_module_prepared_free(struct kiln_module *m, struct kiln_prepared *p)
{
    if (m && p && (void *)p != (const void *)&no_prepare && m->prepared_free)
        m->prepared_free(p);
}
