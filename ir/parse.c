/* ir/parse.c -- .kg parser (stub until the parser lands). */
#include "ir.h"

enum kiln_status
kiln_ir_parse(kiln_ctx *ctx, const char *text, size_t len, const char *file,
              struct kiln_graph **out)
{
    (void)text;
    (void)len;
    (void)file;
    *out = NULL;
    return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "parse", "parser not built yet");
}
