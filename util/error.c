/* util/error.c -- first-error-wins recording of kiln_error in the context, formatting, and
 * status names. Recording never allocates: the message lives in a fixed array. */
#include "util.h"

#include <stdio.h>
#include <string.h>

enum kiln_status
kiln_failv(kiln_ctx *ctx, enum kiln_status st, const char *pass, const char *where, const char *fmt,
           va_list ap)
{
    if (!ctx || ctx->has_err)
        return st;
    ctx->has_err = true;
    memset(&ctx->err, 0, sizeof ctx->err);
    ctx->err.status = st;
    ctx->err.pass = pass;
    ctx->err.where = where;
    vsnprintf(ctx->err.msg, sizeof ctx->err.msg, fmt, ap);
    return st;
}

enum kiln_status
kiln_fail(kiln_ctx *ctx, enum kiln_status st, const char *pass, const char *where, const char *fmt,
          ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_failv(ctx, st, pass, where, fmt, ap);
    va_end(ap);
    return st;
}

void
kiln_error_set_loc(kiln_ctx *ctx, const char *file, uint32_t line, uint32_t col)
{
    if (!ctx->has_err || ctx->err.loc.line)
        return;
    if (!ctx->err.loc.file)
        ctx->err.loc.file = file;
    ctx->err.loc.line = line;
    ctx->err.loc.col = col;
}

bool
kiln_ok(const kiln_ctx *ctx)
{
    return !ctx->has_err;
}

const struct kiln_error *
kiln_ctx_error(const kiln_ctx *ctx)
{
    return ctx && ctx->has_err ? &ctx->err : NULL;
}

void
kiln_ctx_error_clear(kiln_ctx *ctx)
{
    ctx->has_err = false;
    memset(&ctx->err, 0, sizeof ctx->err);
}

int
kiln_error_format(const struct kiln_error *err, char *buf, size_t size)
{
    if (!err)
        return snprintf(buf, size, "no error");
    const char *file = err->loc.file ? err->loc.file : "";
    if (err->loc.line)
        return snprintf(buf, size, "%s%s%u:%u: error: %s", file, *file ? ":" : "", err->loc.line,
                        err->loc.col, err->msg);
    if (*file)
        return snprintf(buf, size, "%s: error: %s", file, err->msg);
    if (err->status == KILN_ERR_INTERNAL && err->where)
        return snprintf(buf, size, "error: %s (internal, at %s)", err->msg, err->where);
    return snprintf(buf, size, "error: %s", err->msg);
}

const char *
kiln_status_name(enum kiln_status st)
{
    switch (st) {
    case KILN_OK:
        return "ok";
    case KILN_ERR_INVALID:
        return "invalid";
    case KILN_ERR_UNSUPPORTED:
        return "unsupported";
    case KILN_ERR_NOMEM:
        return "out of memory";
    case KILN_ERR_BACKEND:
        return "backend";
    case KILN_ERR_INTERNAL:
        return "internal";
    }
    return "unknown";
}
