/* runtime/abi.c -- the checked entry of generated code: kiln_abi_call validates the DLPack
 * tensors a caller passes against the module's descriptor (struct kiln_abi_desc) and then runs
 * the kernel on their data pointers.
 *
 * The checks, in order, stop at the first failure and write one message naming the argument by
 * index and name: the argument count, then per argument a NULL tensor or data or shape, the
 * device, the dtype (code, bits, lanes), the rank and extents, the strides (NULL or compact
 * row-major; a dimension of extent 1 may have any stride, as NumPy and PyTorch give them
 * arbitrary ones), and the alignment of data + byte_offset to the argument's `align`; last,
 * aliasing: an output whose bytes overlap those of any other argument is refused
 * (KILN_ABI_ERR_ALIAS), because generated code assumes its buffers do not alias (it marks
 * them noalias) and may read an input after writing an output. Inputs may overlap each other.
 *
 * This file is linked into every generated shared object (libkiln_rt.a) as well as libkiln, so
 * it depends on nothing but kiln_abi.h, DLPack and libc, and it never allocates: messages are
 * formatted straight into the caller's buffer. */
#include "runtime.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__)
#define RT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RT_PRINTF(f, a)
#endif

#define KILN_DL_BOOL   6  /* DLDataTypeCode kDLBool (DLPack >= 0.8; this header is older) */
#define MAX_PRINT_NDIM 64 /* ranks beyond this are printed as a number only */

static int32_t fail(char *err, size_t errsize, int32_t status, const char *fmt, ...)
    RT_PRINTF(4, 5);

static int32_t
fail(char *err, size_t errsize, int32_t status, const char *fmt, ...)
{
    if (err && errsize > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsize, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* Appends s to buf (capacity cap, length *len), truncating with "..." when full. */
static void
put(char *buf, size_t cap, size_t *len, const char *s)
{
    size_t n = strlen(s);
    if (*len + n + 4 >= cap) {
        if (*len + 4 < cap) {
            memcpy(buf + *len, "...", 4);
            *len += 3;
        }
        *len = cap; /* full: ignore the rest */
        return;
    }
    memcpy(buf + *len, s, n + 1);
    *len += n;
}

/* "[4, 8]" for v[0..n) into buf. */
static const char *
ints_str(char *buf, size_t cap, const int64_t *v, int32_t n)
{
    size_t len = 0;
    buf[0] = 0;
    put(buf, cap, &len, "[");
    for (int32_t i = 0; i < n && len < cap; i++) {
        char num[32];
        snprintf(num, sizeof num, "%s%" PRId64, i ? ", " : "", v[i]);
        put(buf, cap, &len, num);
    }
    put(buf, cap, &len, "]");
    return buf;
}

static const char *
device_name(int32_t type)
{
    switch (type) {
    case kDLCPU:
        return "cpu";
    case kDLCUDA:
        return "cuda";
    case kDLCUDAHost:
        return "cuda_host";
    case kDLOpenCL:
        return "opencl";
    case kDLVulkan:
        return "vulkan";
    case kDLMetal:
        return "metal";
    case kDLVPI:
        return "vpi";
    case kDLROCM:
        return "rocm";
    case kDLROCMHost:
        return "rocm_host";
    case kDLExtDev:
        return "ext_dev";
    case kDLCUDAManaged:
        return "cuda_managed";
    case 14:
        return "oneapi";
    case 15:
        return "webgpu";
    case 16:
        return "hexagon";
    default:
        return NULL;
    }
}

/* "f32", "i64", "bool", "bf16", "f32x4", "code 9 bits 32" */
static const char *
dtype_str(char *buf, size_t cap, unsigned code, unsigned bits, unsigned lanes)
{
    const char *prefix = NULL;
    switch (code) {
    case kDLInt:
        prefix = "i";
        break;
    case kDLUInt:
        prefix = "u";
        break;
    case kDLFloat:
        prefix = "f";
        break;
    case kDLBfloat:
        prefix = "bf";
        break;
    case kDLComplex:
        prefix = "c";
        break;
    case kDLOpaqueHandle:
        prefix = "handle";
        break;
    default:
        break;
    }
    int n;
    if (code == KILN_DL_BOOL && bits == 8)
        n = snprintf(buf, cap, "bool");
    else if (code == KILN_DL_BOOL)
        n = snprintf(buf, cap, "bool%u", bits);
    else if (prefix)
        n = snprintf(buf, cap, "%s%u", prefix, bits);
    else
        n = snprintf(buf, cap, "code %u bits %u", code, bits);
    if (lanes != 1 && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, "x%u", lanes);
    return buf;
}

/* Bytes of argument a (its declared shape); 0 if it does not fit. */
static uint64_t
arg_bytes(const struct kiln_abi_arg *a)
{
    uint64_t n = (uint64_t)((a->bits + 7u) / 8u) * (a->lanes ? a->lanes : 1u);
    for (int32_t d = 0; d < a->ndim; d++) {
        uint64_t e = a->shape[d] > 0 ? (uint64_t)a->shape[d] : 0;
        if (e && n > UINT64_MAX / e)
            return 0;
        n *= e;
    }
    return n;
}

static const char *
arg_name(const struct kiln_abi_arg *a)
{
    return a->name ? a->name : "?";
}

int32_t
kiln_abi_ncall(const struct kiln_abi_desc *d)
{
    int32_t n = d->nargs;
    for (int32_t i = 0; d->embedded && i < d->nargs; i++)
        n -= d->embedded[i] != NULL;
    return n;
}

/* The descriptor's index of the caller's argument i (< kiln_abi_ncall(d)): the i-th argument
 * that is not embedded. */
static int32_t
slot_of(const struct kiln_abi_desc *d, int32_t i)
{
    if (!d->embedded)
        return i;
    for (int32_t k = 0; k < d->nargs; k++)
        if (!d->embedded[k] && i-- == 0)
            return k;
    return d->nargs - 1; /* not reached for i < kiln_abi_ncall(d) */
}

/* Checks one tensor t, the caller's argument i, against argument slot of d; 0 or a status
 * with the message in err. */
static int32_t
check_arg(const struct kiln_abi_desc *d, int32_t i, int32_t slot, const DLTensor *t, char *err,
          size_t errsize)
{
    const struct kiln_abi_arg *a = &d->args[slot];
    const char                *name = arg_name(a);
    char                       b1[256], b2[256];

    if (!t)
        return fail(err, errsize, KILN_ABI_ERR_NULL, "argument %d (%s) is NULL", i, name);
    if (!t->data)
        return fail(err, errsize, KILN_ABI_ERR_NULL, "argument %d (%s) has NULL data", i, name);
    if ((int32_t)t->device.device_type != d->device) {
        const char *have = device_name((int32_t)t->device.device_type);
        const char *want = device_name(d->device);
        if (have)
            snprintf(b1, sizeof b1, "%s:%d", have, (int)t->device.device_id);
        else
            snprintf(b1, sizeof b1, "type %d:%d", (int)t->device.device_type,
                     (int)t->device.device_id);
        return fail(err, errsize, KILN_ABI_ERR_DEVICE,
                    "argument %d (%s) is on device %s; this code runs on %s", i, name, b1,
                    want ? want : "an unknown device");
    }
    if (t->dtype.code != a->code || t->dtype.bits != a->bits || t->dtype.lanes != a->lanes)
        return fail(err, errsize, KILN_ABI_ERR_DTYPE, "argument %d (%s) has dtype %s, expected %s",
                    i, name, dtype_str(b1, sizeof b1, t->dtype.code, t->dtype.bits, t->dtype.lanes),
                    dtype_str(b2, sizeof b2, a->code, a->bits, a->lanes));
    if (t->ndim != a->ndim) {
        if (t->shape && t->ndim > 0 && t->ndim <= MAX_PRINT_NDIM)
            return fail(err, errsize, KILN_ABI_ERR_SHAPE,
                        "argument %d (%s) has shape %s, expected %s", i, name,
                        ints_str(b1, sizeof b1, t->shape, t->ndim),
                        ints_str(b2, sizeof b2, a->shape, a->ndim));
        return fail(err, errsize, KILN_ABI_ERR_SHAPE,
                    "argument %d (%s) has rank %d, expected %d (shape %s)", i, name, (int)t->ndim,
                    (int)a->ndim, ints_str(b2, sizeof b2, a->shape, a->ndim));
    }
    if (a->ndim > 0 && !t->shape)
        return fail(err, errsize, KILN_ABI_ERR_NULL, "argument %d (%s) has NULL shape", i, name);
    for (int32_t k = 0; k < a->ndim; k++) {
        if (t->shape[k] != a->shape[k])
            return fail(err, errsize, KILN_ABI_ERR_SHAPE,
                        "argument %d (%s) has shape %s, expected %s", i, name,
                        ints_str(b1, sizeof b1, t->shape, t->ndim),
                        ints_str(b2, sizeof b2, a->shape, a->ndim));
    }
    if (t->strides) {
        int64_t want = 1;
        for (int32_t k = a->ndim - 1; k >= 0; k--) {
            if (a->shape[k] != 1 && t->strides[k] != want) {
                int64_t compact[MAX_PRINT_NDIM];
                int64_t s = 1;
                for (int32_t j = a->ndim - 1; j >= 0; j--) {
                    compact[j] = s;
                    s *= a->shape[j];
                }
                return fail(err, errsize, KILN_ABI_ERR_STRIDE,
                            "argument %d (%s) has strides %s, expected NULL or the compact "
                            "row-major strides %s",
                            i, name, ints_str(b1, sizeof b1, t->strides, t->ndim),
                            ints_str(b2, sizeof b2, compact, a->ndim));
            }
            want *= a->shape[k];
        }
    }
    uintptr_t p = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    uint32_t  align = a->align ? a->align : 1;
    if (p % align != 0)
        return fail(err, errsize, KILN_ABI_ERR_ALIGN,
                    "argument %d (%s) has data + byte_offset = %#" PRIxPTR
                    ", not aligned to %u bytes",
                    i, name, p, (unsigned)align);
    return KILN_ABI_OK;
}

static const char *
status_text(int32_t st)
{
    switch (st) {
    case KILN_ABI_ERR_NOMEM:
        return "a temporary buffer could not be allocated";
    case KILN_ABI_ERR_RUNTIME:
        return "the thread pool or the device failed";
    default:
        return "unexpected status";
    }
}

/* ---- CPU features ----
 * The features a module was built for are its target's LLVM feature string. The x86 ones that
 * change which instructions the code may contain are looked up with cpuid, and the AVX and
 * AVX-512 ones also need the OS to save their registers (XCR0); a "+" feature of the table
 * that the CPU lacks refuses the call. Features outside the table (and every feature on other
 * architectures) are not checked. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

enum { R_EAX, R_EBX, R_ECX, R_EDX };
enum { OS_NONE, OS_AVX, OS_AVX512 };
struct cpu_feature {
    const char *name;
    uint32_t    leaf, sub;
    uint8_t     reg, bit, os;
};
static const struct cpu_feature cpu_features[] = {
    {"sse3", 1, 0, R_ECX, 0, OS_NONE},
    {"pclmul", 1, 0, R_ECX, 1, OS_NONE},
    {"ssse3", 1, 0, R_ECX, 9, OS_NONE},
    {"fma", 1, 0, R_ECX, 12, OS_AVX},
    {"cx16", 1, 0, R_ECX, 13, OS_NONE},
    {"sse4.1", 1, 0, R_ECX, 19, OS_NONE},
    {"sse4.2", 1, 0, R_ECX, 20, OS_NONE},
    {"movbe", 1, 0, R_ECX, 22, OS_NONE},
    {"popcnt", 1, 0, R_ECX, 23, OS_NONE},
    {"aes", 1, 0, R_ECX, 25, OS_NONE},
    {"avx", 1, 0, R_ECX, 28, OS_AVX},
    {"f16c", 1, 0, R_ECX, 29, OS_AVX},
    {"sse", 1, 0, R_EDX, 25, OS_NONE},
    {"sse2", 1, 0, R_EDX, 26, OS_NONE},
    {"bmi", 7, 0, R_EBX, 3, OS_NONE},
    {"avx2", 7, 0, R_EBX, 5, OS_AVX},
    {"bmi2", 7, 0, R_EBX, 8, OS_NONE},
    {"avx512f", 7, 0, R_EBX, 16, OS_AVX512},
    {"avx512dq", 7, 0, R_EBX, 17, OS_AVX512},
    {"adx", 7, 0, R_EBX, 19, OS_NONE},
    {"avx512ifma", 7, 0, R_EBX, 21, OS_AVX512},
    {"avx512cd", 7, 0, R_EBX, 28, OS_AVX512},
    {"sha", 7, 0, R_EBX, 29, OS_NONE},
    {"avx512bw", 7, 0, R_EBX, 30, OS_AVX512},
    {"avx512vl", 7, 0, R_EBX, 31, OS_AVX512},
    {"avx512vbmi", 7, 0, R_ECX, 1, OS_AVX512},
    {"avx512vbmi2", 7, 0, R_ECX, 6, OS_AVX512},
    {"gfni", 7, 0, R_ECX, 8, OS_NONE},
    {"vaes", 7, 0, R_ECX, 9, OS_AVX},
    {"vpclmulqdq", 7, 0, R_ECX, 10, OS_AVX},
    {"avx512vnni", 7, 0, R_ECX, 11, OS_AVX512},
    {"avx512bitalg", 7, 0, R_ECX, 12, OS_AVX512},
    {"avx512vpopcntdq", 7, 0, R_ECX, 14, OS_AVX512},
    {"avx512vp2intersect", 7, 0, R_EDX, 8, OS_AVX512},
    {"avx512fp16", 7, 0, R_EDX, 23, OS_AVX512},
    {"avxvnni", 7, 1, R_EAX, 4, OS_AVX},
    {"avx512bf16", 7, 1, R_EAX, 5, OS_AVX512},
    {"lzcnt", 0x80000001u, 0, R_ECX, 5, OS_NONE},
    {"sse4a", 0x80000001u, 0, R_ECX, 6, OS_NONE},
    {"fma4", 0x80000001u, 0, R_ECX, 16, OS_AVX},
};

/* Whether this CPU (and its OS) has feature f. */
static bool
cpu_has(const struct cpu_feature *f)
{
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid_count(f->leaf, f->sub, &r[R_EAX], &r[R_EBX], &r[R_ECX], &r[R_EDX]))
        return false;
    if (!(r[f->reg] >> f->bit & 1))
        return false;
    if (f->os == OS_NONE)
        return true;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) /* OSXSAVE: xgetbv works */
        return false;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    uint32_t need = f->os == OS_AVX ? 0x6u : 0xe6u; /* XMM+YMM; and opmask, ZMM hi256, hi16 */
    return (lo & need) == need;
}

/* Whether this CPU has feature f: the table's answers, asked of cpuid once per process (cpuid
 * traps to the hypervisor in a virtual machine, microseconds each). */
static bool
host_has(const struct cpu_feature *f)
{
    enum { NFEAT = sizeof cpu_features / sizeof cpu_features[0] };
    _Static_assert(NFEAT < 64, "one bit per feature, and bit 63 marks the mask as known");
    static _Atomic uint64_t known;
    uint64_t                m = atomic_load(&known);
    if (!m) {
        m = UINT64_C(1) << 63;
        for (size_t i = 0; i < NFEAT; i++)
            if (cpu_has(&cpu_features[i]))
                m |= UINT64_C(1) << i;
        atomic_store(&known, m);
    }
    return m >> (f - cpu_features) & 1;
}

static const struct cpu_feature *
cpu_feature(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof cpu_features / sizeof cpu_features[0]; i++)
        if (strlen(cpu_features[i].name) == len && !memcmp(cpu_features[i].name, name, len))
            return &cpu_features[i];
    return NULL;
}
#endif

int32_t
kiln_abi_cpu_check(const char *features, char *err, size_t errsize)
{
    if (err && errsize > 0)
        err[0] = 0;
#if defined(__x86_64__) || defined(__i386__)
    char   missing[160];
    size_t len = 0;
    missing[0] = 0;
    for (const char *p = features ? features : ""; *p;) {
        size_t                    n = strcspn(p, ",");
        const struct cpu_feature *f = n > 1 && p[0] == '+' ? cpu_feature(p + 1, n - 1) : NULL;
        if (f && !host_has(f)) {
            if (len)
                put(missing, sizeof missing, &len, ", ");
            put(missing, sizeof missing, &len, f->name);
        }
        p += n + (p[n] == ',');
    }
    if (len)
        return fail(err, errsize, KILN_ABI_ERR_CPU,
                    "this module was built for CPU features this CPU lacks: %s (compile it "
                    "again on this machine, or for a target without them)",
                    missing);
#else
    (void)features;
#endif
    return KILN_ABI_OK;
}

/* kiln_abi_cpu_check of d's features, once per descriptor: 0 or the status with err. A module
 * has one descriptor, so the verdict is kept in one slot per process and descriptor. */
static int32_t
check_cpu(const struct kiln_abi_desc *d, char *err, size_t errsize)
{
    static _Atomic(const struct kiln_abi_desc *) ok_desc;
    if (!d->cpu_features || !d->cpu_features[0] || atomic_load(&ok_desc) == d)
        return KILN_ABI_OK;
    int32_t st = kiln_abi_cpu_check(d->cpu_features, err, errsize);
    if (st == KILN_ABI_OK)
        atomic_store(&ok_desc, d);
    return st;
}

/* Checks the arguments of a call (all of kiln_abi_call's checks); 0 or a status with err. */
static int32_t
check_call(const struct kiln_abi_desc *d, DLTensor *const *args, int32_t nargs, char *err,
           size_t errsize)
{
    if (err && errsize > 0)
        err[0] = 0;
    if (!d)
        return fail(err, errsize, KILN_ABI_ERR_NULL, "no module descriptor");
    if (d->abi_version != KILN_ABI_VERSION)
        return fail(err, errsize, KILN_ABI_ERR_RUNTIME,
                    "module built for kiln ABI version %d; this runtime implements version %d",
                    (int)d->abi_version, KILN_ABI_VERSION);
    int32_t cpu = check_cpu(d, err, errsize);
    if (cpu != KILN_ABI_OK)
        return cpu;
    int32_t want = kiln_abi_ncall(d);
    if (nargs != want || (nargs > 0 && !args)) {
        char   names[160]; /* leaves room in a 256-byte err buffer */
        size_t len = 0;
        names[0] = 0;
        for (int32_t i = 0; i < want && len < sizeof names; i++) {
            if (i)
                put(names, sizeof names, &len, ", ");
            put(names, sizeof names, &len, arg_name(&d->args[slot_of(d, i)]));
        }
        if (nargs == want)
            return fail(err, errsize, KILN_ABI_ERR_NULL,
                        "the argument array is NULL; expected %d arguments (%s)", (int)want, names);
        return fail(err, errsize, KILN_ABI_ERR_NARGS, "expected %d argument%s (%s), got %d%s",
                    (int)want, want == 1 ? "" : "s", names, (int)nargs,
                    d->embedded ? " (the module's weights are built in: pass the inputs and "
                                  "outputs only)"
                                : "");
    }
    for (int32_t i = 0; i < nargs; i++) {
        int32_t st = check_arg(d, i, slot_of(d, i), args[i], err, errsize);
        if (st != KILN_ABI_OK)
            return st;
    }
    for (int32_t i = 0; i < nargs; i++) {
        const struct kiln_abi_arg *ai = &d->args[slot_of(d, i)];
        if (ai->role != KILN_ARG_OUTPUT)
            continue;
        uintptr_t lo = (uintptr_t)args[i]->data + (uintptr_t)args[i]->byte_offset;
        uintptr_t hi = lo + (uintptr_t)arg_bytes(ai);
        for (int32_t j = 0; j < nargs; j++) {
            if (j == i)
                continue;
            const struct kiln_abi_arg *aj = &d->args[slot_of(d, j)];
            uintptr_t lo2 = (uintptr_t)args[j]->data + (uintptr_t)args[j]->byte_offset;
            uintptr_t hi2 = lo2 + (uintptr_t)arg_bytes(aj);
            if (lo < hi2 && lo2 < hi)
                return fail(err, errsize, KILN_ABI_ERR_ALIAS,
                            "argument %d (%s) is an output and overlaps argument %d (%s)", (int)i,
                            arg_name(ai), (int)j, arg_name(aj));
        }
    }
    return KILN_ABI_OK;
}

/* Runs the checked arguments through d->kernel (prepared == NULL) or d->kernel_phased. */
static int32_t
run(const struct kiln_abi_desc *d, DLTensor *const *args, int32_t nargs, int32_t phase,
    void *prepared, char *err, size_t errsize)
{
    enum { MAX_STACK_ARGS = 64 };
    void  *stack[MAX_STACK_ARGS] = {0}; /* zeroed: GCC cannot see nargs entries get set */
    void **data = stack;
    (void)nargs;
    if (d->nargs > MAX_STACK_ARGS) {
        data = kiln_rt_alloc((int64_t)sizeof(void *) * d->nargs);
        if (!data)
            return fail(err, errsize, KILN_ABI_ERR_NOMEM,
                        "cannot allocate the table of %d data pointers", (int)d->nargs);
    }
    for (int32_t k = 0, i = 0; k < d->nargs; k++) { /* embedded weights in their places */
        if (d->embedded && d->embedded[k]) {
            data[k] = (void *)d->embedded[k];
        } else {
            data[k] = (void *)((uintptr_t)args[i]->data + (uintptr_t)args[i]->byte_offset);
            i++;
        }
    }
    bool    has = prepared ? d->kernel_phased != NULL : d->kernel != NULL;
    int32_t st = !has       ? KILN_ABI_ERR_RUNTIME
                 : prepared ? d->kernel_phased(data, phase, prepared)
                            : d->kernel(data);
    if (data != stack)
        kiln_rt_free((void *)data);
    if (st != KILN_ABI_OK && has && d->device == kDLCUDA && kiln_rt_cuda_error()[0])
        return fail(err, errsize, st, "the kernel failed: %s (status %d)", kiln_rt_cuda_error(),
                    (int)st);
    if (st != KILN_ABI_OK)
        return fail(err, errsize, st, "%s: %s (status %d)", has ? "the kernel failed" : "no kernel",
                    has ? status_text(st) : "the descriptor has no kernel", (int)st);
    return KILN_ABI_OK;
}

int32_t
kiln_abi_call(const struct kiln_abi_desc *d, DLTensor *const *args, int32_t nargs, char *err,
              size_t errsize)
{
    int32_t st = check_call(d, args, nargs, err, errsize);
    return st != KILN_ABI_OK ? st : run(d, args, nargs, KILN_ABI_PHASE_ALL, NULL, err, errsize);
}

/* ---- prepared calls ----
 *
 * A handle is one kiln_rt_alloc: this header, padded to 64 bytes, then the prepared area of
 * d->prepared_bytes bytes (64-byte aligned, as the kernel assumes). A module without
 * weight-derived buffers gets a header alone (area NULL), and its prepared calls are plain
 * calls. The header names the descriptor, so a handle of another module is refused. A module
 * of the cuda target (device kDLCUDA) gets a header alone too: its area is device memory
 * (runtime/cuda_module.c), named by the header's `cuda`, which is what its kernel_phased is
 * given as `area`. The measurement runner (tuner/runner/main.c) relies on this layout to evict
 * a CPU module's handle from the caches. */

#define PREPARED_MAGIC UINT64_C(0x6b696c6e70726570) /* "kilnprep" */
#define PREPARED_HEAD  KILN_ABI_PREPARED_HEAD

struct prepared {
    uint64_t                    magic;
    const struct kiln_abi_desc *desc;
    void                       *area; /* kernel_phased's `prepared`; NULL: plain calls */
    struct kiln_abi_cuda_area   cuda; /* the device memory of a cuda module's area */
};
_Static_assert(sizeof(struct prepared) <= PREPARED_HEAD, "the handle's header outgrew its room");

int32_t
kiln_abi_prepare(const struct kiln_abi_desc *d, DLTensor *const *args, int32_t nargs,
                 void **prepared, char *err, size_t errsize)
{
    if (prepared)
        *prepared = NULL;
    int32_t st = check_call(d, args, nargs, err, errsize);
    if (st != KILN_ABI_OK)
        return st;
    if (!prepared)
        return fail(err, errsize, KILN_ABI_ERR_NULL,
                    "kiln_prepare: the pointer to store the prepared handle in is NULL");
    int64_t bytes = d->kernel_phased && d->prepared_bytes > 0 ? d->prepared_bytes : 0;
    bool    cuda = d->device == kDLCUDA;
    if (bytes > INT64_MAX - PREPARED_HEAD)
        return fail(err, errsize, KILN_ABI_ERR_NOMEM, "kiln_prepare: %lld bytes is too large",
                    (long long)bytes);
    struct prepared *h = kiln_rt_alloc(PREPARED_HEAD + (cuda ? 0 : bytes));
    if (!h)
        return fail(err, errsize, KILN_ABI_ERR_NOMEM,
                    "kiln_prepare: cannot allocate %lld bytes for the weight-derived buffers",
                    (long long)bytes);
    h->magic = PREPARED_MAGIC;
    h->desc = d;
    h->area = bytes && !cuda ? (char *)h + PREPARED_HEAD : NULL;
    h->cuda = (struct kiln_abi_cuda_area){0, NULL};
    if (bytes && cuda) {
        st = kiln_rt_cuda_area_new(bytes, &h->cuda);
        if (st != KILN_ABI_OK) {
            kiln_rt_free(h);
            return fail(err, errsize, st, "kiln_prepare: %s (status %d)", kiln_rt_cuda_error(),
                        (int)st);
        }
        h->area = &h->cuda;
    }
    if (h->area) {
        st = run(d, args, nargs, KILN_ABI_PHASE_PREPARE, h->area, err, errsize);
        if (st != KILN_ABI_OK) {
            kiln_abi_prepared_free(h);
            return st;
        }
    }
    *prepared = h;
    return KILN_ABI_OK;
}

int32_t
kiln_abi_call_prepared(const struct kiln_abi_desc *d, const void *prepared, DLTensor *const *args,
                       int32_t nargs, char *err, size_t errsize)
{
    const struct prepared *h = prepared;
    if (err && errsize > 0)
        err[0] = 0;
    if (!h)
        return fail(err, errsize, KILN_ABI_ERR_NULL,
                    "kiln_call_prepared: the prepared handle is NULL (call kiln_prepare first)");
    if (h->magic != PREPARED_MAGIC || h->desc != d)
        return fail(err, errsize, KILN_ABI_ERR_RUNTIME,
                    "kiln_call_prepared: the handle was not made by this module's kiln_prepare");
    int32_t st = check_call(d, args, nargs, err, errsize);
    if (st != KILN_ABI_OK)
        return st;
    return run(d, args, nargs, h->area ? KILN_ABI_PHASE_MAIN : KILN_ABI_PHASE_ALL, h->area, err,
               errsize);
}

void
kiln_abi_prepared_free(void *prepared)
{
    struct prepared *h = prepared;
    if (!h)
        return;
    h->magic = 0; /* a stale handle read before the memory is reused is refused */
    kiln_rt_cuda_area_free(&h->cuda);
    kiln_rt_free(h);
}

/* ---- modules with embedded weights ----
 *
 * When every weight of a CPU module is built into it, nothing a caller passes can change the
 * weight-derived buffers, so its kiln_call prepares them once, at the first call, into a
 * handle kept in the module's lazy state, and runs the main phase from then on. Two threads
 * making the first call at once: one prepares under the lock, the other waits for it; a failed
 * preparation is not kept, the next call tries again. */

static pthread_mutex_t lazy_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether d's kiln_call prepares once: CPU, weight-derived buffers, every weight embedded. */
static bool
prepares_once(const struct kiln_abi_desc *d)
{
    if (!d || !d->embedded || !d->kernel_phased || d->prepared_bytes <= 0 || d->device != kDLCPU)
        return false;
    for (int32_t k = 0; k < d->nargs; k++)
        if (d->args[k].role == KILN_ARG_WEIGHT && !d->embedded[k])
            return false;
    return true;
}

int32_t
kiln_abi_call_lazy(const struct kiln_abi_desc *d, struct kiln_abi_lazy *lazy, DLTensor *const *args,
                   int32_t nargs, char *err, size_t errsize)
{
    if (!lazy || !prepares_once(d))
        return kiln_abi_call(d, args, nargs, err, errsize);
    int32_t st = check_call(d, args, nargs, err, errsize);
    if (st != KILN_ABI_OK)
        return st;
    struct prepared *h = atomic_load_explicit(&lazy->prepared, memory_order_acquire);
    if (!h) {
        pthread_mutex_lock(&lazy_lock);
        h = atomic_load_explicit(&lazy->prepared, memory_order_relaxed);
        if (!h) {
            void *p = NULL;
            st = kiln_abi_prepare(d, args, nargs, &p, err, errsize);
            h = p;
            if (st == KILN_ABI_OK)
                atomic_store_explicit(&lazy->prepared, h, memory_order_release);
        }
        pthread_mutex_unlock(&lazy_lock);
        if (st != KILN_ABI_OK)
            return st;
    }
    return run(d, args, nargs, KILN_ABI_PHASE_MAIN, h->area, err, errsize);
}

void
kiln_abi_lazy_free(struct kiln_abi_lazy *lazy)
{
    if (!lazy)
        return;
    kiln_abi_prepared_free(atomic_exchange(&lazy->prepared, NULL));
}

int32_t
kiln_abi_embedded(const struct kiln_abi_desc *d, int32_t i, DLTensor *t, const char **name)
{
    int32_t n = d ? d->nargs - kiln_abi_ncall(d) : 0;
    if (i < 0 || i >= n || !t)
        return n;
    for (int32_t k = 0; k < d->nargs; k++) {
        if (!d->embedded[k] || i-- != 0)
            continue;
        const struct kiln_abi_arg *a = &d->args[k];
        memset(t, 0, sizeof *t);
        t->data = (void *)d->embedded[k];
        t->device.device_type = kDLCPU;
        t->ndim = a->ndim;
        t->dtype.code = a->code;
        t->dtype.bits = a->bits;
        t->dtype.lanes = a->lanes;
        t->shape = (int64_t *)a->shape;
        if (name)
            *name = arg_name(a);
        break;
    }
    return n;
}
