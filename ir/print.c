/* ir/print.c -- .kg printer (stub until the printer lands). */
#include "ir.h"

enum kiln_status
kiln_ir_print(kiln_ctx *ctx, const struct kiln_graph *g, unsigned flags, struct kiln_buf *out)
{
    (void)g;
    (void)flags;
    (void)out;
    return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "print", "printer not built yet");
}

enum kiln_status
kiln_ir_print_expr(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_opdef *op,
                   kiln_expr e, struct kiln_buf *out)
{
    (void)g;
    (void)op;
    (void)e;
    (void)out;
    return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "print", "printer not built yet");
}
