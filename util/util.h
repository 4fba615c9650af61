/* util/util.h -- internal: the context, arenas, growable vectors, errors, hashing, strings and
 * the seeded random generator. Every module includes this; it includes only kiln.h and libc. */
#ifndef KILN_UTIL_H
#define KILN_UTIL_H

#include "kiln.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define KILN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define KILN_INTERNAL     __attribute__((visibility("hidden")))
#define KILN_NOINLINE     __attribute__((noinline))
#else
#define KILN_PRINTF(f, a)
#define KILN_INTERNAL
#define KILN_NOINLINE
#endif

#define KILN_STR_(x)    #x
#define KILN_STR(x)     KILN_STR_(x)
#define KILN_COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- arena: chained blocks that never move; mark/rewind frees everything after a mark ---- */
struct kiln_arena_block;
struct kiln_arena {
    struct kiln_arena_block *head; /* newest block first */
    size_t                   used; /* bytes used in head */
};
struct kiln_arena_mark {
    struct kiln_arena_block *head;
    size_t                   used;
};

struct kiln_node; /* ir/ir.h */
struct kiln_sym;  /* interned string, util/str.c */

struct kiln_ctx {
    kiln_alloc_fn     alloc;
    void             *alloc_ud;
    struct kiln_arena arena;
    struct kiln_error err;
    bool              has_err;
    /* hash-consed expression nodes (ir/expr.c); id 0 is the nil node */
    struct kiln_node *node;
    uint32_t          nnode, capnode;
    uint32_t         *bucket; /* heads of hash chains, newest first */
    uint32_t          mask;   /* nbucket - 1 */
    /* interned strings (util/str.c); id 0 is the empty string */
    struct kiln_sym *sym;
    uint32_t         nsym, capsym;
    uint32_t        *symbucket;
    uint32_t         symmask;
    /* compile settings (codegen/driver.c) */
    bool     no_memplan;
    uint32_t tmp_dir;    /* interned directory for temporary files; 0: P_tmpdir */
    uint32_t cg_threads; /* threads compiling a shared object (codegen/llvm_split.c); 0: default */
    uint32_t cg_objects; /* objects the last LLVM shared object was linked from */
};

/* Raw allocation through the context's allocator; NULL on failure (no error recorded). */
void *kiln_mem_realloc(kiln_ctx *ctx, void *p, size_t old_size, size_t new_size);
void  kiln_mem_free(kiln_ctx *ctx, void *p, size_t size);

/* Arena allocation: zeroed, 16-byte aligned, freed with the context or by a rewind.
 * Records KILN_ERR_NOMEM and returns NULL on failure. */
void                  *kiln_arena_alloc(kiln_ctx *ctx, size_t size);
struct kiln_arena_mark kiln_arena_mark(kiln_ctx *ctx);
void                   kiln_arena_rewind(kiln_ctx *ctx, struct kiln_arena_mark m);
char                  *kiln_arena_strdup(kiln_ctx *ctx, const char *s);
char                  *kiln_arena_strndup(kiln_ctx *ctx, const char *s, size_t n);
char                  *kiln_arena_printf(kiln_ctx *ctx, const char *fmt, ...) KILN_PRINTF(2, 3);

/* Growable vector of elements in the arena: ensures room for need elements, doubling.
 * Old storage is abandoned to the arena (freed at rewind / ctx_free). Returns false on OOM. */
bool kiln_vec_reserve(kiln_ctx *ctx, void **data, uint32_t *cap, size_t elem, uint32_t need);
#define KILN_VEC_PUSH(ctx, v, n, cap, x)                                                           \
    (kiln_vec_reserve((ctx), (void **)&(v), &(cap), sizeof(*(v)), (n) + 1) ? ((v)[(n)++] = (x), 1) \
                                                                           : 0)

/* Text buffer in the arena. */
struct kiln_buf {
    char    *data;
    uint32_t len, cap;
};
bool kiln_buf_puts(kiln_ctx *ctx, struct kiln_buf *b, const char *s);
/* n bytes (any bytes, NUL included); the buffer stays NUL-terminated after them. */
bool kiln_buf_put(kiln_ctx *ctx, struct kiln_buf *b, const void *data, size_t n);
bool kiln_buf_printf(kiln_ctx *ctx, struct kiln_buf *b, const char *fmt, ...) KILN_PRINTF(3, 4);

/* ---- errors ---- */
/* Records the first error (later ones are ignored) and returns st. */
enum kiln_status kiln_fail(kiln_ctx *ctx, enum kiln_status st, const char *pass, const char *where,
                           const char *fmt, ...) KILN_PRINTF(5, 6);
enum kiln_status kiln_failv(kiln_ctx *ctx, enum kiln_status st, const char *pass, const char *where,
                            const char *fmt, va_list ap) KILN_PRINTF(5, 0);
/* Sets the location of the recorded error if it has none yet. */
void kiln_error_set_loc(kiln_ctx *ctx, const char *file, uint32_t line, uint32_t col);
bool kiln_ok(const kiln_ctx *ctx); /* no error recorded */

#define KILN_WHERE                    __FILE__ ":" KILN_STR(__LINE__)
#define KILN_FAIL(ctx, st, pass, ...) kiln_fail(ctx, st, pass, KILN_WHERE, __VA_ARGS__)
#define KILN_TRY(expr)                 \
    do {                               \
        enum kiln_status st_ = (expr); \
        if (st_ != KILN_OK)            \
            return st_;                \
    } while (0)
#define KILN_ENSURE(ctx, cond)                                                                   \
    do {                                                                                         \
        if (!(cond))                                                                             \
            return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "internal", "invariant failed: %s", #cond); \
    } while (0)

/* ---- strings: interned symbols, stable across runs in content (ids depend on order) ---- */
uint32_t    kiln_sym(kiln_ctx *ctx, const char *s, size_t len); /* 0 on OOM (error recorded) */
uint32_t    kiln_sym_cstr(kiln_ctx *ctx, const char *s);
const char *kiln_sym_str(const kiln_ctx *ctx, uint32_t id);
void        kiln_sym_fini(kiln_ctx *ctx); /* frees the tables (kiln_ctx_free) */
/* Forgets every symbol interned after the mark (the tuner's per-candidate scratch work: fresh
 * loop-variable names would otherwise accumulate). Nothing may still name those symbols. */
uint32_t kiln_sym_mark(const kiln_ctx *ctx);
void     kiln_sym_rollback(kiln_ctx *ctx, uint32_t mark);

/* ---- hashing: stable, machine-independent 64-bit ---- */
uint64_t kiln_hash_bytes(uint64_t h, const void *p, size_t n); /* FNV-1a then mixed */
uint64_t kiln_hash_u64(uint64_t h, uint64_t x);
uint64_t kiln_hash_str(uint64_t h, const char *s);
uint64_t kiln_mix64(uint64_t x);             /* splitmix64 finaliser */
#define KILN_HASH_SEED 0x6b696c6e2d763031ull /* "kiln-v01" */

/* ---- seeded random numbers (xoshiro256**), identical on every machine ---- */
struct kiln_rng {
    uint64_t s[4];
};
struct kiln_rng kiln_rng_new(uint64_t seed);
uint64_t        kiln_rng_next(struct kiln_rng *r);
uint64_t        kiln_rng_below(struct kiln_rng *r, uint64_t n); /* uniform in [0, n), n > 0 */
double          kiln_rng_uniform(struct kiln_rng *r);           /* uniform in [0, 1) */
double          kiln_rng_normal(struct kiln_rng *r);            /* standard normal */

/* ---- checked 64-bit arithmetic for sizes ---- */
bool kiln_mul_overflows(int64_t a, int64_t b, int64_t *out);
bool kiln_add_overflows(int64_t a, int64_t b, int64_t *out);
/* gcd of |a| and |b|; 0 when both are 0 or it is not representable (2^63) */
int64_t kiln_gcd64(int64_t a, int64_t b);

/* ---- the files kiln uses at run time (install.c): installed ones, else the build tree's ---- */
enum kiln_install_file {
    KILN_INSTALL_RUNNER,  /* the measurement runner: LIBDIR/kiln/kiln_measure_runner */
    KILN_INSTALL_RT_LIB,  /* what generated shared objects link: LIBDIR/kiln/libkiln_rt.a */
    KILN_INSTALL_INCLUDE, /* the directory of kiln_abi.h and kiln_abi_impl.h: INCLUDEDIR */
};
/* Writes f's path to out[size]: under the install prefix when the binary holding this code
 * (libkiln.so, or the program that links libkiln.a) lies in PREFIX/LIBDIR or PREFIX/BINDIR of
 * an installed kiln (PREFIX/LIBDIR/kiln exists), else build_path (the build tree's, compiled in
 * by the caller). Fails (KILN_ERR_BACKEND, no crash) naming the path looked for when the file
 * is not there. */
enum kiln_status kiln_install_path(kiln_ctx *ctx, enum kiln_install_file f, const char *build_path,
                                   char *out, size_t size);

#endif /* KILN_UTIL_H */
