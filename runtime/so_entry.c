/* runtime/so_entry.c -- the exported functions of a generated shared object (include/
 * kiln_abi.h): version, metadata, source, the checked call, the prepared calls (prepare,
 * call_prepared, prepared_free), the thread count and the embedded weights, all implemented
 * over `kiln_desc`, the
 * constant descriptor (include/kiln_abi_impl.h) the code generator emits into the same shared
 * object.
 *
 * Linked only into generated shared objects, never into libkiln (which has no kiln_desc). The
 * archive is built with hidden visibility, so each entry point is marked default visibility
 * explicitly; everything else of the runtime stays private to the object, and two generated
 * objects loaded into one process never see each other's runtime. Depends on libc only. */
#include "runtime.h"

#define KILN_EXPORT __attribute__((visibility("default")))

extern const struct kiln_abi_desc kiln_desc;

KILN_EXPORT int32_t     kiln_abi_version(void);
KILN_EXPORT const char *kiln_metadata(void);
KILN_EXPORT const char *kiln_source(void);
KILN_EXPORT int32_t     kiln_call(DLTensor *const *args, int32_t nargs, char *err, size_t errsize);
KILN_EXPORT void        kiln_set_num_threads(int32_t n);
KILN_EXPORT int32_t kiln_prepare(DLTensor *const *args, int32_t nargs, void **prepared, char *err,
                                 size_t errsize);
KILN_EXPORT int32_t kiln_call_prepared(const void *prepared, DLTensor *const *args, int32_t nargs,
                                       char *err, size_t errsize);
KILN_EXPORT void    kiln_prepared_free(void *prepared);
KILN_EXPORT int32_t kiln_cpu_check(char *err, size_t errsize);
KILN_EXPORT int32_t kiln_embedded(int32_t i, DLTensor *t, const char **name);

/* The weight-derived buffers of a module with embedded weights, prepared by the first
 * kiln_call (runtime/abi.c) and freed when the object is unloaded. */
static struct kiln_abi_lazy lazy;

__attribute__((destructor)) static void
unload(void)
{
    kiln_abi_lazy_free(&lazy);
}

int32_t
kiln_abi_version(void)
{
    return kiln_desc.abi_version;
}

const char *
kiln_metadata(void)
{
    return kiln_desc.metadata ? kiln_desc.metadata : "{}";
}

const char *
kiln_source(void)
{
    return kiln_desc.source ? kiln_desc.source : "";
}

int32_t
kiln_call(DLTensor *const *args, int32_t nargs, char *err, size_t errsize)
{
    return kiln_abi_call_lazy(&kiln_desc, &lazy, args, nargs, err, errsize);
}

void
kiln_set_num_threads(int32_t n)
{
    kiln_rt_set_num_threads(n);
}

int32_t
kiln_prepare(DLTensor *const *args, int32_t nargs, void **prepared, char *err, size_t errsize)
{
    return kiln_abi_prepare(&kiln_desc, args, nargs, prepared, err, errsize);
}

int32_t
kiln_call_prepared(const void *prepared, DLTensor *const *args, int32_t nargs, char *err,
                   size_t errsize)
{
    return kiln_abi_call_prepared(&kiln_desc, prepared, args, nargs, err, errsize);
}

void
kiln_prepared_free(void *prepared)
{
    kiln_abi_prepared_free(prepared);
}

int32_t
kiln_embedded(int32_t i, DLTensor *t, const char **name)
{
    return kiln_abi_embedded(&kiln_desc, i, t, name);
}

int32_t
kiln_cpu_check(char *err, size_t errsize)
{
    return kiln_abi_cpu_check(kiln_desc.cpu_features, err, errsize);
}
