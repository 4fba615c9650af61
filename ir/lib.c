/* ir/lib.c -- the op library (stub until the library lands). */
#include "ir.h"

#include <string.h>

static const char *const names[] = {
#define KILN_LIB(name, lo, hi) #name,
#include "lib.def"
#undef KILN_LIB
};

bool
kiln_lib_exists(const char *op)
{
    for (size_t i = 0; i < KILN_COUNTOF(names); i++)
        if (!strcmp(names[i], op))
            return true;
    return false;
}

uint32_t
kiln_lib_count(void)
{
    return (uint32_t)KILN_COUNTOF(names);
}

const char *
kiln_lib_name(uint32_t i)
{
    return i < KILN_COUNTOF(names) ? names[i] : NULL;
}

enum kiln_status
kiln_lib_call(struct kiln_graph *g, const char *op, const char *out_name, uint32_t nin,
              const uint32_t *in, uint32_t nattr, const struct kiln_attr *attr, uint32_t line,
              uint32_t col, uint32_t *out)
{
    (void)out_name;
    (void)nin;
    (void)in;
    (void)nattr;
    (void)attr;
    (void)line;
    (void)col;
    *out = KILN_NONE;
    return KILN_FAIL(g->ctx, KILN_ERR_UNSUPPORTED, "lib", "%s: library not built yet", op);
}
