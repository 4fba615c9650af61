/* util/mem.c -- the context's allocator, the arena (chained blocks that never move, with
 * mark/rewind), arena vectors and text buffers. Arena memory is zeroed and 16-byte aligned.
 * Blocks are at least 64 KiB; a larger request gets a block of its own. */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_arena_block {
    struct kiln_arena_block *prev;
    size_t                   size; /* usable bytes in data */
    _Alignas(16) unsigned char data[];
};

#define BLOCK_MIN ((size_t)64 << 10)

void *
kiln_mem_realloc(kiln_ctx *ctx, void *p, size_t old_size, size_t new_size)
{
    if (ctx->alloc)
        return ctx->alloc(ctx->alloc_ud, p, old_size, new_size);
    if (new_size == 0) {
        free(p);
        return NULL;
    }
    return realloc(p, new_size);
}

void
kiln_mem_free(kiln_ctx *ctx, void *p, size_t size)
{
    if (p)
        kiln_mem_realloc(ctx, p, size, 0);
}

void *
kiln_arena_alloc(kiln_ctx *ctx, size_t size)
{
    struct kiln_arena *a = &ctx->arena;
    size_t             need = (size + 15) & ~(size_t)15;

    if (need < size) {
        KILN_FAIL(ctx, KILN_ERR_NOMEM, "arena", "allocation of %zu bytes overflows", size);
        return NULL;
    }
    if (!a->head || a->head->size - a->used < need) {
        size_t                   bsize = need > BLOCK_MIN ? need : BLOCK_MIN;
        struct kiln_arena_block *b =
            kiln_mem_realloc(ctx, NULL, 0, sizeof(struct kiln_arena_block) + bsize);
        if (!b) {
            KILN_FAIL(ctx, KILN_ERR_NOMEM, "arena", "out of memory allocating %zu bytes", size);
            return NULL;
        }
        b->prev = a->head;
        b->size = bsize;
        a->head = b;
        a->used = 0;
    }
    void *p = a->head->data + a->used;
    a->used += need;
    memset(p, 0, need);
    return p;
}

struct kiln_arena_mark
kiln_arena_mark(kiln_ctx *ctx)
{
    return (struct kiln_arena_mark){ctx->arena.head, ctx->arena.used};
}

void
kiln_arena_rewind(kiln_ctx *ctx, struct kiln_arena_mark m)
{
    struct kiln_arena *a = &ctx->arena;

    while (a->head && a->head != m.head) {
        struct kiln_arena_block *b = a->head;
        a->head = b->prev;
        kiln_mem_free(ctx, b, sizeof(*b) + b->size);
    }
    a->used = a->head ? m.used : 0;
}

char *
kiln_arena_strndup(kiln_ctx *ctx, const char *s, size_t n)
{
    char *p = kiln_arena_alloc(ctx, n + 1);
    if (p)
        memcpy(p, s, n);
    return p;
}

char *
kiln_arena_strdup(kiln_ctx *ctx, const char *s)
{
    return kiln_arena_strndup(ctx, s, strlen(s));
}

char *
kiln_arena_printf(kiln_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *p = kiln_arena_alloc(ctx, (size_t)n + 1);
    if (!p)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

bool
kiln_vec_reserve(kiln_ctx *ctx, void **data, uint32_t *cap, size_t elem, uint32_t need)
{
    if (need <= *cap)
        return true;
    uint64_t ncap = *cap ? (uint64_t)*cap * 2 : 8;
    while (ncap < need)
        ncap *= 2;
    if (ncap > UINT32_MAX || ncap * elem > (uint64_t)SIZE_MAX / 2) {
        KILN_FAIL(ctx, KILN_ERR_NOMEM, "arena", "vector of %llu elements is too large",
                  (unsigned long long)ncap);
        return false;
    }
    void *p = kiln_arena_alloc(ctx, (size_t)ncap * elem);
    if (!p)
        return false;
    if (*cap)
        memcpy(p, *data, (size_t)*cap * elem);
    *data = p;
    *cap = (uint32_t)ncap;
    return true;
}

bool
kiln_buf_put(kiln_ctx *ctx, struct kiln_buf *b, const void *data, size_t n)
{
    if (n > UINT32_MAX - 2 - b->len) {
        KILN_FAIL(ctx, KILN_ERR_NOMEM, "arena", "text buffer too large");
        return false;
    }
    if (!kiln_vec_reserve(ctx, (void **)&b->data, &b->cap, 1, b->len + (uint32_t)n + 1))
        return false;
    memcpy(b->data + b->len, data, n);
    b->len += (uint32_t)n;
    b->data[b->len] = 0;
    return true;
}

bool
kiln_buf_puts(kiln_ctx *ctx, struct kiln_buf *b, const char *s)
{
    return kiln_buf_put(ctx, b, s, strlen(s));
}

bool
kiln_buf_printf(kiln_ctx *ctx, struct kiln_buf *b, const char *fmt, ...)
{
    char    small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return false;
    if ((size_t)n < sizeof small)
        return kiln_buf_puts(ctx, b, small);
    char *big = kiln_arena_alloc(ctx, (size_t)n + 1);
    if (!big)
        return false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return kiln_buf_puts(ctx, b, big);
}
