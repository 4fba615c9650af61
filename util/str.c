/* util/str.c -- interned strings (symbols). Ids are dense and depend on interning order; never
 * hash ids where a result must be stable: hash the string. Symbol storage is arena memory, the
 * tables are owned by the context and freed with it. */
#include "util.h"

#include <string.h>

struct kiln_sym {
    const char *s;
    uint32_t    len;
    uint32_t    next; /* chain, 0 ends */
    uint64_t    hash;
};

static bool
sym_grow(kiln_ctx *ctx)
{
    uint32_t         ncap = ctx->capsym ? ctx->capsym * 2 : 256;
    struct kiln_sym *s =
        kiln_mem_realloc(ctx, ctx->sym, sizeof(*s) * ctx->capsym, sizeof(*s) * ncap);
    if (!s)
        return false;
    ctx->sym = s;
    uint32_t *b = kiln_mem_realloc(ctx, NULL, 0, sizeof(uint32_t) * ncap);
    if (!b)
        return false;
    kiln_mem_free(ctx, ctx->symbucket, sizeof(uint32_t) * (ctx->symmask + 1));
    memset(b, 0, sizeof(uint32_t) * ncap);
    ctx->capsym = ncap;
    ctx->symbucket = b;
    ctx->symmask = ncap - 1;
    for (uint32_t i = 1; i < ctx->nsym; i++) {
        uint32_t *h = &b[ctx->sym[i].hash & ctx->symmask];
        ctx->sym[i].next = *h;
        *h = i;
    }
    return true;
}

uint32_t
kiln_sym(kiln_ctx *ctx, const char *s, size_t len)
{
    if (len == 0)
        return 0;
    uint64_t h = kiln_hash_bytes(0, s, len);
    if (ctx->capsym) {
        for (uint32_t i = ctx->symbucket[h & ctx->symmask]; i; i = ctx->sym[i].next)
            if (ctx->sym[i].hash == h && ctx->sym[i].len == len && !memcmp(ctx->sym[i].s, s, len))
                return i;
    }
    if (ctx->nsym + 1 >= ctx->capsym) {
        if (!sym_grow(ctx)) {
            KILN_FAIL(ctx, KILN_ERR_NOMEM, "symbols", "out of memory interning a string");
            return 0;
        }
        if (ctx->nsym == 0)
            ctx->nsym = 1; /* id 0 is the empty string */
    }
    /* text lives outside the arena: symbols outlast any arena rewind (the tuner's per-candidate
     * mark/rewind must not free names the table still points at) */
    char *copy = kiln_mem_realloc(ctx, NULL, 0, len + 1);
    if (!copy) {
        KILN_FAIL(ctx, KILN_ERR_NOMEM, "symbols", "out of memory interning a string");
        return 0;
    }
    memcpy(copy, s, len);
    copy[len] = 0;
    uint32_t  id = ctx->nsym++;
    uint32_t *head = &ctx->symbucket[h & ctx->symmask];
    ctx->sym[id] = (struct kiln_sym){copy, (uint32_t)len, *head, h};
    *head = id;
    return id;
}

uint32_t
kiln_sym_cstr(kiln_ctx *ctx, const char *s)
{
    return kiln_sym(ctx, s, strlen(s));
}

const char *
kiln_sym_str(const kiln_ctx *ctx, uint32_t id)
{
    return id && id < ctx->nsym ? ctx->sym[id].s : "";
}

uint32_t
kiln_sym_mark(const kiln_ctx *ctx)
{
    return ctx->nsym;
}

void
kiln_sym_rollback(kiln_ctx *ctx, uint32_t mark)
{
    /* chains are newest first, so the newest symbol is always at the head of its bucket */
    while (mark >= 1 && ctx->nsym > mark) {
        uint32_t         id = --ctx->nsym;
        struct kiln_sym *y = &ctx->sym[id];
        ctx->symbucket[y->hash & ctx->symmask] = y->next;
        kiln_mem_free(ctx, (void *)y->s, y->len + 1);
    }
}

void
kiln_sym_fini(kiln_ctx *ctx)
{
    for (uint32_t i = 1; i < ctx->nsym; i++)
        kiln_mem_free(ctx, (void *)ctx->sym[i].s, ctx->sym[i].len + 1);
    kiln_mem_free(ctx, ctx->sym, sizeof(struct kiln_sym) * ctx->capsym);
    kiln_mem_free(ctx, ctx->symbucket, sizeof(uint32_t) * (ctx->symmask + 1));
}
