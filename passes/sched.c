/* passes/sched.c -- schedules as data: the step list, its JSON form, and the step descriptor
 * table (kiln_step_desc) that everything but a step's effect is asked of.
 *
 * A step names its stage and iterators by name (symbols), so a schedule written by hand reads
 * like the graph it applies to, and a schedule stored by the tuner survives re-parsing of the
 * graph in another process. This file only checks the *form* of steps (fields present, types,
 * counts); whether a step makes sense for a graph is checked when it is applied
 * (passes/state.c), where the graph is known. */
#include "passes.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const kiln_bind_name[KILN_BIND_COUNT] = {
    [KILN_BIND_BLOCK_X] = "blockIdx.x",   [KILN_BIND_BLOCK_Y] = "blockIdx.y",
    [KILN_BIND_BLOCK_Z] = "blockIdx.z",   [KILN_BIND_THREAD_X] = "threadIdx.x",
    [KILN_BIND_THREAD_Y] = "threadIdx.y", [KILN_BIND_THREAD_Z] = "threadIdx.z",
};

/* Every step kind: its JSON form, what its fields name, what it adds, the form checked when it
 * is applied. passes/state.c gives each its effect; docs/schedule.md describes both. */
#define ITER    KILN_STEPF_ITER
#define ITERS   KILN_STEPF_ITERS
#define FACTORS KILN_STEPF_FACTORS
#define TARGET  KILN_STEPF_TARGET
#define VALUE   KILN_STEPF_VALUE
#define FACTOR1 KILN_STEPF_FACTOR1
#define THREAD  KILN_STEPF_THREAD
#define SCOPE   KILN_STEPF_SCOPE
#define STAGE   KILN_REF_STAGE
#define TENSOR  KILN_REF_TENSOR
#define LOOP    KILN_REF_LOOP
const struct kiln_step_desc kiln_step_desc[KILN_STEP_COUNT] = {
    [KILN_STEP_SPLIT] = {.name = "split",
                         .fields = ITER | FACTORS,
                         .stage = STAGE,
                         .iter = LOOP,
                         .nmin = 1,
                         .nmax = KILN_STEP_MAXN - 1,
                         .nwhat = "factors"},
    [KILN_STEP_TILE] = {.name = "tile",
                        .fields = ITERS | FACTORS,
                        .iters_key = "iters",
                        .stage = STAGE,
                        .iters = LOOP,
                        .nmin = 1,
                        .nmax = KILN_STEP_MAXN,
                        .nwhat = "iterators"},
    [KILN_STEP_REORDER] =
        {.name = "reorder", .fields = ITERS, .iters_key = "order", .stage = STAGE, .iters = LOOP},
    [KILN_STEP_FUSE] =
        {.name = "fuse", .fields = ITERS, .iters_key = "iters", .stage = STAGE, .iters = LOOP},
    [KILN_STEP_PARALLEL] = {.name = "parallel", .fields = ITER, .stage = STAGE, .iter = LOOP},
    [KILN_STEP_VECTORIZE] = {.name = "vectorize", .fields = ITER, .stage = STAGE, .iter = LOOP},
    [KILN_STEP_UNROLL] = {.name = "unroll", .fields = ITER, .stage = STAGE, .iter = LOOP},
    [KILN_STEP_AUTO_UNROLL] = {.name = "auto_unroll",
                               .fields = VALUE,
                               .value_key = "max_step",
                               .stage = STAGE,
                               .vmin = 0,
                               .vmax = 4096},
    [KILN_STEP_COMPUTE_AT] = {.name = "compute_at",
                              .fields = TARGET | ITER,
                              .stage = STAGE,
                              .iter = KILN_REF_TARGET_LOOP,
                              .target = STAGE},
    [KILN_STEP_COMPUTE_INLINE] = {.name = "compute_inline", .fields = 0, .stage = STAGE},
    [KILN_STEP_COMPUTE_ROOT] = {.name = "compute_root", .fields = 0, .stage = STAGE},
    [KILN_STEP_CACHE_WRITE] = {.name = "cache_write",
                               .fields = 0,
                               .stage = STAGE,
                               .creates = "local"},
    [KILN_STEP_CACHE_READ] = {.name = "cache_read",
                              .fields = ITERS | SCOPE,
                              .iters_key = "readers",
                              .stage = TENSOR,
                              .iters = STAGE,
                              .creates = "cache"},
    [KILN_STEP_RFACTOR] =
        {.name = "rfactor", .fields = ITER, .stage = STAGE, .iter = LOOP, .creates = "rf"},
    [KILN_STEP_PACK] = {.name = "pack",
                        .fields = VALUE | FACTOR1,
                        .value_key = "dim",
                        .stage = TENSOR,
                        .creates = "pack"},
    [KILN_STEP_PAD] = {.name = "pad",
                       .fields = ITERS,
                       .iters_key = "readers",
                       .stage = TENSOR,
                       .iters = STAGE,
                       .creates = "pad"},
    [KILN_STEP_BIND] = {.name = "bind", .fields = ITER | THREAD, .stage = STAGE, .iter = LOOP},
};
#undef ITER
#undef ITERS
#undef FACTORS
#undef TARGET
#undef VALUE
#undef FACTOR1
#undef THREAD
#undef SCOPE
#undef STAGE
#undef TENSOR
#undef LOOP

bool
kiln_step_check(const struct kiln_step *st, char *why, size_t size)
{
    const struct kiln_step_desc *d = &kiln_step_desc[st->kind];
    if (d->nmax && (st->n < d->nmin || st->n > d->nmax)) {
        snprintf(why, size, "%s needs %u to %u %s", d->name, (unsigned)d->nmin, (unsigned)d->nmax,
                 d->nwhat);
        return false;
    }
    if (d->vmin != d->vmax && (st->value < d->vmin || st->value > d->vmax)) {
        snprintf(why, size, "%s %lld must be in [%lld, %lld]", d->value_key, (long long)st->value,
                 (long long)d->vmin, (long long)d->vmax);
        return false;
    }
    return true;
}

enum kiln_status
kiln_sched_push(kiln_ctx *ctx, struct kiln_schedule *s, struct kiln_step st)
{
    if (!KILN_VEC_PUSH(ctx, s->step, s->nstep, s->capstep, st))
        return ctx->err.status;
    return KILN_OK;
}

/* ---- strict JSON (shared with the records import, tuner/db.c) ---- */

/* One pass over the raw text: no NUL byte, no raw control character inside a string, no
 * \u0000 escape (cJSON would cut the string there, so the value would not be what the text
 * says). Returns the reason, with the byte offset in *at, or NULL. With nth != SIZE_MAX it
 * only looks for the nth key (0-based, in document order) and puts its offset in *at. */
static const char *
json_scan(const char *text, size_t len, size_t nth, size_t *at)
{
    size_t nkey = 0;
    for (size_t i = 0; i < len; i++) {
        if (!text[i]) {
            *at = i;
            return "contains a NUL byte";
        }
        if (text[i] != '"')
            continue;
        size_t start = i++;
        for (; i < len && text[i] != '"'; i++) {
            unsigned char c = (unsigned char)text[i];
            *at = i;
            if (!c)
                return "contains a NUL byte";
            if (c < 0x20)
                return "a string contains a raw control character (escape it)";
            if (c != '\\')
                continue;
            if (i + 6 <= len && text[i + 1] == 'u' && !memcmp(text + i + 2, "0000", 4))
                return "a string contains \\u0000";
            i++; /* the escaped character */
        }
        size_t j = i + 1;
        while (j < len && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r'))
            j++;
        if (j < len && text[j] == ':' && nkey++ == nth) {
            *at = start;
            return NULL;
        }
    }
    return NULL;
}

struct member {
    const cJSON *c;
    uint32_t     pos;
};

static int
cmp_member(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    int                  c = strcmp(x->c->string, y->c->string);
    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* The member of object o whose key an earlier member already has, the first such in document
 * order, or NULL. Sorting the members by (key, position) keeps this n log n in the members. */
static const cJSON *
first_dup(kiln_ctx *ctx, const cJSON *o, bool *nomem)
{
    uint32_t n = 0;
    for (const cJSON *c = o->child; c; c = c->next)
        n++;
    if (n < 2)
        return NULL;
    struct member *v = kiln_mem_realloc(ctx, NULL, 0, n * sizeof *v);
    if (!v) {
        *nomem = true;
        return NULL;
    }
    uint32_t k = 0;
    for (const cJSON *c = o->child; c; c = c->next, k++)
        v[k] = (struct member){c, k};
    qsort(v, n, sizeof *v, cmp_member);
    /* in a run of equal keys the second member is the run's first duplicate */
    const struct member *dup = NULL;
    for (uint32_t i = 1; i < n; i++)
        if (!strcmp(v[i - 1].c->string, v[i].c->string) && (!dup || v[i].pos < dup->pos))
            dup = &v[i];
    const cJSON *r = dup ? dup->c : NULL;
    kiln_mem_free(ctx, v, n * sizeof *v);
    return r;
}

/* A depth-first walk of the tree in document order with an explicit stack (cJSON limits the
 * nesting to CJSON_NESTING_LIMIT levels, but the walk does not rely on it). Stops at member
 * target or, with target NULL, at the first member whose key an earlier member of its object
 * has; returns that member (NULL if none) with the number of keys before it in *nkey, which
 * json_scan turns into its place in the text. Records KILN_ERR_NOMEM on failure. */
static const cJSON *
json_walk(kiln_ctx *ctx, const cJSON *root, const cJSON *target, size_t *nkey)
{
    struct level {
        const cJSON *next, *dup; /* the next member to visit, the object's first duplicate */
    };
    struct level *stack = NULL;
    uint32_t      depth = 0, cap = 0;
    bool          nomem = false;
    *nkey = 0;
    for (const cJSON *c = root, *next = NULL; c && !nomem; c = next) {
        if (c->child) {
            struct level l = {c->child,
                              !target && cJSON_IsObject(c) ? first_dup(ctx, c, &nomem) : NULL};
            if (!nomem && depth == cap) {
                uint32_t      ncap = cap ? 2 * cap : 16;
                struct level *ns =
                    kiln_mem_realloc(ctx, stack, cap * sizeof *stack, ncap * sizeof *stack);
                nomem = !ns;
                stack = ns ? ns : stack;
                cap = ns ? ncap : cap;
            }
            if (!nomem)
                stack[depth++] = l;
        }
        next = NULL;
        while (depth && !nomem) {
            struct level *top = &stack[depth - 1];
            if (!top->next) {
                depth--;
                continue;
            }
            next = top->next;
            top->next = next->next;
            if (next == target || next == top->dup) {
                kiln_mem_free(ctx, stack, cap * sizeof *stack);
                return next;
            }
            *nkey += next->string != NULL; /* a member of an object */
            break;
        }
    }
    kiln_mem_free(ctx, stack, cap * sizeof *stack);
    if (nomem)
        KILN_FAIL(ctx, KILN_ERR_NOMEM, "json", "out of memory checking JSON keys");
    return NULL;
}

cJSON *
kiln_json_parse_strict(kiln_ctx *ctx, const char *text, size_t len, size_t *at, char *why,
                       size_t nwhy)
{
    *at = 0;
    const char *raw = json_scan(text, len, SIZE_MAX, at);
    if (raw) {
        snprintf(why, nwhy, "%s", raw);
        return NULL;
    }
    const char *end = NULL;
    cJSON      *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        *at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        snprintf(why, nwhy, "not valid JSON");
        return NULL;
    }
    for (const char *c = end; c < text + len; c++)
        if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') {
            *at = (size_t)(c - text);
            snprintf(why, nwhy, "text after the JSON %s",
                     cJSON_IsObject(root) ? "object" : "document");
            cJSON_Delete(root);
            return NULL;
        }
    size_t       nkey = 0;
    bool         was_ok = kiln_ok(ctx);
    const cJSON *dup = json_walk(ctx, root, NULL, &nkey);
    if (was_ok && !kiln_ok(ctx)) {
        snprintf(why, nwhy, "out of memory");
        cJSON_Delete(root);
        return NULL;
    }
    if (dup) {
        json_scan(text, len, nkey, at);
        snprintf(why, nwhy, "field \"%.60s\" appears twice", dup->string);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

size_t
kiln_json_key_at(kiln_ctx *ctx, const char *text, size_t len, const cJSON *root,
                 const cJSON *member)
{
    size_t nkey = 0, at = 0;
    if (json_walk(ctx, root, member, &nkey) == member)
        json_scan(text, len, nkey, &at);
    return at;
}

void
kiln_text_linecol(const char *text, size_t len, size_t at, uint32_t *line, uint32_t *col)
{
    uint32_t l = 1, c = 1;
    for (size_t i = 0; i < at && i < len; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static enum kiln_status
bad(kiln_ctx *ctx, uint32_t i, const char *what)
{
    return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule", "schedule step %u: %s", i, what);
}

static enum kiln_status
get_name(kiln_ctx *ctx, uint32_t i, const cJSON *o, const char *key, uint32_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                         "schedule step %u: \"%s\" must be a non-empty string", i, key);
    *out = kiln_sym_cstr(ctx, v->valuestring);
    return kiln_ok(ctx) ? KILN_OK : ctx->err.status;
}

static enum kiln_status
get_int(kiln_ctx *ctx, uint32_t i, const cJSON *v, const char *key, int64_t *out)
{
    double d = cJSON_IsNumber(v) ? v->valuedouble : 0.5;
    if (!cJSON_IsNumber(v) || d != (double)(int64_t)d || d > 9.0e15 || d < -9.0e15)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                         "schedule step %u: \"%s\" must be an integer", i, key);
    *out = (int64_t)d;
    return KILN_OK;
}

/* "thread" of a bind step (stage and iter already read) into st->value. */
static enum kiln_status
get_thread(kiln_ctx *ctx, uint32_t i, const cJSON *o, struct kiln_step *st)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "thread");
    const char  *stage = kiln_sym_str(ctx, st->stage), *iter = kiln_sym_str(ctx, st->iter);
    if (!cJSON_IsString(v))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                         "schedule step %u (bind %s.%s): \"thread\" must be a string: "
                         "blockIdx.x/y/z or threadIdx.x/y/z",
                         i, stage, iter);
    for (int t = 0; t < KILN_BIND_COUNT; t++)
        if (!strcmp(v->valuestring, kiln_bind_name[t])) {
            st->value = t;
            return KILN_OK;
        }
    return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                     "schedule step %u (bind %s.%s): unknown thread \"%s\" (expected "
                     "blockIdx.x/y/z or threadIdx.x/y/z)",
                     i, stage, iter, v->valuestring);
}

static enum kiln_status
step_from_json(kiln_ctx *ctx, uint32_t i, const cJSON *o, struct kiln_step *st)
{
    memset(st, 0, sizeof *st);
    if (!cJSON_IsObject(o))
        return bad(ctx, i, "must be an object");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "op");
    if (!cJSON_IsString(op))
        return bad(ctx, i, "\"op\" must be a string naming the step");
    int kind = -1;
    for (int k = 0; k < KILN_STEP_COUNT; k++)
        if (!strcmp(op->valuestring, kiln_step_desc[k].name))
            kind = k;
    if (kind < 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule", "schedule step %u: unknown op '%s'", i,
                         op->valuestring);
    st->kind = (uint8_t)kind;
    const struct kiln_step_desc *d = &kiln_step_desc[kind];
    unsigned                     f = d->fields;
    /* reject unknown keys: a typo must not silently change the schedule */
    for (const cJSON *c = o->child; c; c = c->next) {
        const char *k = c->string;
        bool        known = !strcmp(k, "op") || !strcmp(k, "stage")
                     || ((f & KILN_STEPF_ITER) && !strcmp(k, "iter"))
                     || ((f & KILN_STEPF_ITERS) && !strcmp(k, d->iters_key))
                     || ((f & KILN_STEPF_FACTORS) && !strcmp(k, "factors"))
                     || ((f & KILN_STEPF_TARGET) && !strcmp(k, "target"))
                     || ((f & KILN_STEPF_VALUE) && !strcmp(k, d->value_key))
                     || ((f & KILN_STEPF_FACTOR1) && (!strcmp(k, "factor") || !strcmp(k, "outer")))
                     || ((f & KILN_STEPF_THREAD) && !strcmp(k, "thread"))
                     || ((f & KILN_STEPF_SCOPE) && !strcmp(k, "scope"));
        if (!known)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                             "schedule step %u (%s): unknown field \"%s\"", i,
                             kiln_step_desc[kind].name, k);
    }
    KILN_TRY(get_name(ctx, i, o, "stage", &st->stage));
    if (f & KILN_STEPF_ITER)
        KILN_TRY(get_name(ctx, i, o, "iter", &st->iter));
    if (f & KILN_STEPF_TARGET)
        KILN_TRY(get_name(ctx, i, o, "target", &st->target));
    if (f & KILN_STEPF_ITERS) {
        const char  *key = d->iters_key;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
        int          n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
        if (n < 1 || n > KILN_STEP_MAXN)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                             "schedule step %u (%s): \"%s\" must be a list of 1 to %d names", i,
                             kiln_step_desc[kind].name, key, KILN_STEP_MAXN);
        for (int j = 0; j < n; j++) {
            const cJSON *v = cJSON_GetArrayItem(a, j);
            if (!cJSON_IsString(v) || !v->valuestring[0])
                return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                                 "schedule step %u (%s): \"%s\" must hold names", i,
                                 kiln_step_desc[kind].name, key);
            st->iters[j] = kiln_sym_cstr(ctx, v->valuestring);
        }
        st->n = (uint8_t)n;
    }
    if (f & KILN_STEPF_FACTORS) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "factors");
        int          n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
        if (n < 1 || n > KILN_STEP_MAXN - 1)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                             "schedule step %u (%s): \"factors\" must be a list of 1 to %d "
                             "integers",
                             i, kiln_step_desc[kind].name, KILN_STEP_MAXN - 1);
        if ((f & KILN_STEPF_ITERS) && n != st->n) /* one factor per iterator (tile) */
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                             "schedule step %u (%s): %d iterators but %d factors", i, d->name,
                             st->n, n);
        for (int j = 0; j < n; j++)
            KILN_TRY(get_int(ctx, i, cJSON_GetArrayItem(a, j), "factors", &st->factors[j]));
        if (!(f & KILN_STEPF_ITERS)) /* n counts the factors (split) */
            st->n = (uint8_t)n;
    }
    if (f & KILN_STEPF_VALUE)
        KILN_TRY(get_int(ctx, i, cJSON_GetObjectItemCaseSensitive(o, d->value_key), d->value_key,
                         &st->value));
    if (f & KILN_STEPF_FACTOR1) {
        KILN_TRY(get_int(ctx, i, cJSON_GetObjectItemCaseSensitive(o, "factor"), "factor",
                         &st->factors[0]));
        st->n = 1;
        const cJSON *outer = cJSON_GetObjectItemCaseSensitive(o, "outer");
        if (outer) {
            KILN_TRY(get_int(ctx, i, outer, "outer", &st->factors[1]));
            st->n = 2;
        }
    }
    if (f & KILN_STEPF_THREAD)
        KILN_TRY(get_thread(ctx, i, o, st));
    const cJSON *scope =
        (f & KILN_STEPF_SCOPE) ? cJSON_GetObjectItemCaseSensitive(o, "scope") : NULL;
    if (scope) {
        const char *v = cJSON_IsString(scope) ? scope->valuestring : "";
        if (strcmp(v, "local") && strcmp(v, "shared"))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                             "schedule step %u (%s %s): \"scope\" must be \"local\" or "
                             "\"shared\"",
                             i, kiln_step_desc[kind].name, kiln_sym_str(ctx, st->stage));
        st->value = strcmp(v, "shared") ? KILN_CACHE_LOCAL : KILN_CACHE_SHARED;
    }
    return KILN_OK;
}

/* An error at byte at of the schedule's text, as line and column (1-based, columns in bytes). */
static enum kiln_status
sched_fail_at(kiln_ctx *ctx, const char *text, size_t len, size_t at, const char *why)
{
    uint32_t line, col;
    kiln_text_linecol(text, len, at, &line, &col);
    return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                     "schedule: line %u, column %u (byte %zu): %s", line, col, at, why);
}

enum kiln_status
kiln_sched_from_json(kiln_ctx *ctx, const char *text, size_t len, struct kiln_schedule *out)
{
    memset(out, 0, sizeof *out);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    size_t at;
    char   why[128];
    cJSON *root = kiln_json_parse_strict(ctx, text, len, &at, why, sizeof why);
    if (!root)
        return kiln_ok(ctx) ? sched_fail_at(ctx, text, len, at, why) : ctx->err.status;
    /* the top level is a list of steps or an object holding only "steps" */
    if (cJSON_IsObject(root))
        for (const cJSON *c = root->child; c; c = c->next)
            if (strcmp(c->string, "steps")) {
                snprintf(why, sizeof why, "unknown field \"%.60s\" (the only field is \"steps\")",
                         c->string);
                at = kiln_json_key_at(ctx, text, len, root, c);
                cJSON_Delete(root);
                return sched_fail_at(ctx, text, len, at, why);
            }
    enum kiln_status st = KILN_OK;
    const cJSON     *steps =
        cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "steps") : root;
    if (!cJSON_IsArray(steps)) {
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                       "schedule must be {\"steps\": [...]} or a list of steps");
    } else {
        uint32_t i = 0;
        for (const cJSON *o = steps->child; o && st == KILN_OK; o = o->next, i++) {
            struct kiln_step s;
            st = step_from_json(ctx, i, o, &s);
            if (st == KILN_OK)
                st = kiln_sched_push(ctx, out, s);
        }
    }
    cJSON_Delete(root);
    return st;
}

static bool
put_names(kiln_ctx *ctx, struct kiln_buf *b, const char *key, const uint32_t *names, uint32_t n)
{
    if (!kiln_buf_printf(ctx, b, ", \"%s\": [", key))
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (!kiln_buf_printf(ctx, b, "%s\"%s\"", i ? ", " : "", kiln_sym_str(ctx, names[i])))
            return false;
    return kiln_buf_puts(ctx, b, "]");
}

enum kiln_status
kiln_sched_to_json(kiln_ctx *ctx, const struct kiln_schedule *s, struct kiln_buf *out)
{
    if (!kiln_buf_puts(ctx, out, "{\"steps\": ["))
        return ctx->err.status;
    for (uint32_t i = 0; i < s->nstep; i++) {
        const struct kiln_step      *st = &s->step[i];
        const struct kiln_step_desc *d = &kiln_step_desc[st->kind];
        unsigned                     f = d->fields;
        bool                         ok =
            kiln_buf_printf(ctx, out, "%s\n  {\"op\": \"%s\", \"stage\": \"%s\"", i ? "," : "",
                            kiln_step_desc[st->kind].name, kiln_sym_str(ctx, st->stage));
        if (ok && (f & KILN_STEPF_TARGET))
            ok = kiln_buf_printf(ctx, out, ", \"target\": \"%s\"", kiln_sym_str(ctx, st->target));
        if (ok && (f & KILN_STEPF_ITER))
            ok = kiln_buf_printf(ctx, out, ", \"iter\": \"%s\"", kiln_sym_str(ctx, st->iter));
        if (ok && (f & KILN_STEPF_ITERS))
            ok = put_names(ctx, out, d->iters_key, st->iters, st->n);
        if (ok && (f & KILN_STEPF_FACTORS)) {
            ok = kiln_buf_puts(ctx, out, ", \"factors\": [");
            for (uint32_t j = 0; ok && j < st->n; j++)
                ok = kiln_buf_printf(ctx, out, "%s%lld", j ? ", " : "", (long long)st->factors[j]);
            ok = ok && kiln_buf_puts(ctx, out, "]");
        }
        if (ok && (f & KILN_STEPF_VALUE))
            ok = kiln_buf_printf(ctx, out, ", \"%s\": %lld", d->value_key, (long long)st->value);
        if (ok && (f & KILN_STEPF_FACTOR1))
            ok = kiln_buf_printf(ctx, out, ", \"factor\": %lld", (long long)st->factors[0]);
        if (ok && (f & KILN_STEPF_FACTOR1) && st->n > 1)
            ok = kiln_buf_printf(ctx, out, ", \"outer\": %lld", (long long)st->factors[1]);
        if (ok && (f & KILN_STEPF_THREAD) && (st->value < 0 || st->value >= KILN_BIND_COUNT))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule",
                             "schedule step %u (bind %s.%s): thread %lld is not a GPU index", i,
                             kiln_sym_str(ctx, st->stage), kiln_sym_str(ctx, st->iter),
                             (long long)st->value);
        if (ok && (f & KILN_STEPF_THREAD))
            ok = kiln_buf_printf(ctx, out, ", \"thread\": \"%s\"", kiln_bind_name[st->value]);
        if (ok && (f & KILN_STEPF_SCOPE) && st->value == KILN_CACHE_SHARED)
            ok = kiln_buf_puts(ctx, out, ", \"scope\": \"shared\"");
        if (!ok || !kiln_buf_puts(ctx, out, "}"))
            return ctx->err.status;
    }
    if (!kiln_buf_puts(ctx, out, "\n]}\n"))
        return ctx->err.status;
    return KILN_OK;
}
