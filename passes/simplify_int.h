/* passes/simplify_int.h -- private to the simplifier (simplify_bounds.c, simplify.c): its
 * state, the memo tables, the scratch pool, and small integer helpers. Other files,
 * simplify_stmt.c included, use the passes.h API (kiln_simplify_expr, kiln_expr_bounds,
 * struct kiln_simplifier). */
#ifndef KILN_SIMPLIFY_INT_H
#define KILN_SIMPLIFY_INT_H

#include "passes.h"

/* scratch pool: bump allocation in blocks, released LIFO (simplify_bounds.c) */
struct pblock;
struct pool {
    kiln_ctx      *ctx;
    struct pblock *head;
};
struct pmark {
    struct pblock *head;
    size_t         used;
};

/* memo table keyed by node id; entries are valid for one generation (environment) */
struct slot {
    uint32_t key, gen;
    int64_t  a, b;
};
struct table {
    struct slot *s;
    uint32_t     cap, used, live, gen;
};

struct simp {
    kiln_ctx                    *ctx;
    const struct kiln_var_range *r;
    uint32_t                     nr;
    struct table                 sm; /* node -> simplified node */
    struct table                 bm; /* node -> interval */
    struct pool                  pool;
    bool                         oom;
};

/* intervals (struct kiln_ival, ir/arith.h): lo == INT64_MIN is -inf, hi == INT64_MAX is +inf */
#define NINF INT64_MIN
#define PINF INT64_MAX

/* ---- simplify_bounds.c (simplify.c has no cross-file functions) ---- */
void             kiln_simp_init(struct simp *S, kiln_ctx *ctx);
void             kiln_simp_env(struct simp *S, const struct kiln_var_range *r, uint32_t nr);
void             kiln_simp_fini(struct simp *S);
void             kiln_simp_oom(struct simp *S);             /* records KILN_ERR_NOMEM once */
void            *kiln_simp_alloc(struct simp *S, size_t n); /* scratch; NULL after kiln_simp_oom */
struct pmark     kiln_simp_mark(const struct simp *S);
void             kiln_simp_release(struct simp *S, struct pmark m);
bool             kiln_simp_memo_get(const struct simp *S, kiln_expr e, kiln_expr *out);
bool             kiln_simp_memo_put(struct simp *S, kiln_expr e, kiln_expr out); /* false: OOM */
struct kiln_ival kiln_simp_bound(struct simp *S, kiln_expr e); /* kiln_ival_bound, memoised */

/* ---- small helpers ---- */
static inline bool
live(const struct simp *S)
{
    return !S->oom && kiln_ok(S->ctx);
}

static inline enum kiln_op
op_of(const struct simp *S, kiln_expr e)
{
    return (enum kiln_op)S->ctx->node[e.id].op;
}

static inline kiln_expr
kid(const struct simp *S, kiln_expr e, int i)
{
    return (kiln_expr){S->ctx->node[e.id].kid[i]};
}

static inline bool
is_intlike(enum kiln_dtype dt)
{
    /* u64 is left out: its bit patterns order unsigned, unlike the rules' int64 arithmetic */
    return (kiln_dtype_is_int(dt) && dt != KILN_DTYPE_U64) || dt == KILN_DTYPE_BOOL;
}

static inline bool
mul_ok(int64_t a, int64_t b, int64_t *r)
{
    return !kiln_mul_overflows(a, b, r);
}

static inline bool
add_ok(int64_t a, int64_t b, int64_t *r)
{
    return !kiln_add_overflows(a, b, r);
}

#endif
