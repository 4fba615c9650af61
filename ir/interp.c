/* ir/interp.c -- reference interpreter (stub). */
#include "ir.h"

enum kiln_status
kiln_ir_eval(kiln_ctx *ctx, const struct kiln_graph *g, double *const *vals)
{
    (void)g;
    (void)vals;
    return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "interp", "interpreter not built yet");
}
