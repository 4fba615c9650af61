/* kas/api.c -- the public kernel-search API (include/kiln.h, kiln_kas_*): a sampler that
 * returns each new kernel with its costs, its description and its emitted texts (.py, one .kg
 * per placeholder), and writes them to a directory when asked. `kiln sample` and the Python
 * package (kiln.sample) are its callers. */
#include "kas.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct kiln_kas_sampler {
    kiln_ctx           *ctx;
    struct kas_sampler *sm;
    struct kas_spec     spec;
    uint32_t            max_tries;
    int64_t             batch;
    const char         *out_dir; /* a copy in ctx's arena, or NULL */
    uint64_t            count;   /* kernels returned */
    double              seconds; /* in kas_sampler_next */
    char               *text;    /* every string of the last kernel, NUL-separated */
    size_t              text_cap, text_len;
    const char         *kg[KAS_MAX_PH], *kg_path[KAS_MAX_PH];
};

void
kiln_kas_params_default(struct kiln_kas_params *p)
{
    struct kas_spec s;
    kas_spec_default(&s);
    memset(p, 0, sizeof *p);
    p->stride = s.stride;
    p->ref_k = s.ref_k;
    p->flops_lo = s.flops_lo;
    p->flops_hi = s.flops_hi;
    p->params_lo = s.params_lo;
    p->params_hi = s.params_hi;
    p->max_ops = s.max_ops;
    p->min_rf = s.min_rf;
    p->max_tries = 100000;
    p->batch = 1;
}

enum kiln_status
kiln_kas_sampler_new(kiln_ctx *ctx, const struct kiln_kas_params *p, struct kiln_kas_sampler **out)
{
    *out = NULL;
    if (!p->placeholders || !p->nplaceholders || p->nplaceholders > KAS_MAX_PH)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas", "give 1 to %d placeholders, got %u",
                         KAS_MAX_PH, p->nplaceholders);
    if (!p->max_tries || p->batch < 1)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "kas", "max_tries and batch must be positive");
    struct kas_spec s;
    kas_spec_default(&s);
    s.nph = p->nplaceholders;
    for (uint32_t j = 0; j < s.nph; j++) {
        const struct kiln_kas_placeholder *ph = &p->placeholders[j];
        s.ph[j] = (struct kas_placeholder){ph->c, ph->k, ph->h, ph->w};
    }
    s.stride = p->stride;
    s.ref_k = p->ref_k;
    s.flops_lo = p->flops_lo;
    s.flops_hi = p->flops_hi;
    s.params_lo = p->params_lo;
    s.params_hi = p->params_hi;
    s.max_ops = p->max_ops;
    s.min_rf = p->min_rf;
    s.no_fingerprint = p->no_fingerprint != 0;
    KILN_TRY(kas_spec_check(ctx, &s));
    struct kiln_kas_sampler *k = kiln_mem_realloc(ctx, NULL, 0, sizeof *k);
    if (!k)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "kas", "out of memory for the sampler");
    memset(k, 0, sizeof *k);
    k->ctx = ctx;
    k->spec = s;
    k->max_tries = p->max_tries;
    k->batch = p->batch;
    if (p->out_dir && !(k->out_dir = kiln_arena_strdup(ctx, p->out_dir))) {
        kiln_mem_free(ctx, k, sizeof *k);
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "kas", "out of memory");
    }
    if (!(k->sm = kas_sampler_new(ctx, &s, p->seed))) {
        kiln_mem_free(ctx, k, sizeof *k);
        return kiln_ctx_error(ctx)->status;
    }
    *out = k;
    return KILN_OK;
}

void
kiln_kas_sampler_free(struct kiln_kas_sampler *k)
{
    if (!k)
        return;
    kiln_ctx *ctx = k->ctx;
    kas_sampler_free(k->sm);
    kiln_mem_free(ctx, k->text, k->text_cap);
    kiln_mem_free(ctx, k, sizeof *k);
}

void
kiln_kas_sampler_stats(const struct kiln_kas_sampler *k, struct kiln_kas_stats *out)
{
    const struct kas_stats *st = kas_sampler_stats(k->sm);
    *out = (struct kiln_kas_stats){
        .attempts = st->attempts,
        .illegal = st->illegal,
        .filtered = st->filtered,
        .over_budget = st->over_budget,
        .dup_hash = st->dup_hash,
        .dup_fp = st->dup_fp,
        .accepted = st->accepted,
        .seconds = k->seconds,
    };
}

static double
now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Appends s (n bytes) and a NUL to the sampler's text; returns its offset, or -1 on OOM (the
 * error recorded in ctx). */
static int64_t
keep(struct kiln_kas_sampler *k, const char *s, size_t n)
{
    if (k->text_len + n + 1 > k->text_cap) {
        size_t cap = k->text_cap ? k->text_cap : 4096;
        while (cap < k->text_len + n + 1)
            cap *= 2;
        char *t = kiln_mem_realloc(k->ctx, k->text, k->text_cap, cap);
        if (!t) {
            KILN_FAIL(k->ctx, KILN_ERR_NOMEM, "kas", "out of memory for the kernel's texts");
            return -1;
        }
        k->text = t;
        k->text_cap = cap;
    }
    int64_t at = (int64_t)k->text_len;
    memcpy(k->text + k->text_len, s, n);
    k->text[k->text_len + n] = 0;
    k->text_len += n + 1;
    return at;
}

static enum kiln_status
write_text(kiln_ctx *ctx, const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    bool  ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "kas", "cannot write %s: %s", path,
                         strerror(errno));
    return KILN_OK;
}

/* Emits the kernel's texts (and files) into k->text; offsets into off[]: design, values, py,
 * py path, then kg and kg path per placeholder. */
static enum kiln_status
emit(struct kiln_kas_sampler *k, const struct kas_design *d, uint64_t index, int64_t *off)
{
    kiln_ctx              *ctx = k->ctx;
    const struct kas_spec *s = &k->spec;
    char                   line[1024], path[4096];
    int                    n = 0;
    kas_design_describe(d, line, sizeof line);
    off[n++] = keep(k, line, strlen(line));
    kas_design_values(d, false, line, sizeof line);
    off[n++] = keep(k, line, strlen(line));
    struct kiln_arena_mark mark = kiln_arena_mark(ctx); /* the texts are copied, then freed */
    struct kiln_buf        b = {0};
    enum kiln_status       st = kas_emit_py(ctx, d, "Kernel", &b);
    if (st == KILN_OK)
        off[n++] = keep(k, b.data, b.len);
    if (st == KILN_OK && k->out_dir) {
        snprintf(path, sizeof path, "%s/k%04llu.py", k->out_dir, (unsigned long long)index);
        st = write_text(ctx, path, b.data, b.len);
        off[n++] = keep(k, path, strlen(path));
    } else {
        off[n++] = -1;
    }
    for (uint32_t j = 0; j < s->nph && st == KILN_OK; j++) {
        struct kiln_buf kb = {0};
        st = kas_emit_kg(ctx, d, &s->ph[j], k->batch, &kb);
        if (st != KILN_OK)
            break;
        off[n++] = keep(k, kb.data, kb.len);
        if (k->out_dir) {
            snprintf(path, sizeof path, "%s/k%04llu_p%u.kg", k->out_dir, (unsigned long long)index,
                     j + 1);
            st = write_text(ctx, path, kb.data, kb.len);
            off[n++] = keep(k, path, strlen(path));
        } else {
            off[n++] = -1;
        }
    }
    kiln_arena_rewind(ctx, mark);
    if (st != KILN_OK)
        return st;
    return kiln_ok(ctx) ? KILN_OK : kiln_ctx_error(ctx)->status;
}

enum kiln_status
kiln_kas_sampler_next(struct kiln_kas_sampler *k, struct kiln_kas_kernel *out)
{
    kiln_ctx              *ctx = k->ctx;
    const struct kas_spec *s = &k->spec;
    struct kas_design      d;
    memset(out, 0, sizeof *out);
    double t0 = now();
    bool   ok = kas_sampler_next(k->sm, &d, k->max_tries);
    k->seconds += now() - t0;
    if (!ok)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "kas",
                         "no further kernel after %llu (%llu designs grown without a new one "
                         "inside the budget): the budget or the placeholders leave too little "
                         "room (try wider flops/params ranges)",
                         (unsigned long long)k->count, (unsigned long long)k->max_tries);
    uint64_t index = ++k->count;
    double   rf, rp, f = 0, p = 0;
    kas_spec_ref_cost(s, &rf, &rp);
    for (uint32_t j = 0; j < s->nph; j++) {
        double fj, pj;
        kas_design_cost(&d, &s->ph[j], &fj, &pj);
        f += fj;
        p += pj;
    }
    int64_t off[4 + 2 * KAS_MAX_PH];
    k->text_len = 0;
    KILN_TRY(emit(k, &d, index, off)); /* every text kept: only the paths may be -1 */
    const char *t = k->text;
    for (uint32_t j = 0; j < s->nph; j++) {
        k->kg[j] = t + off[4 + 2 * j];
        k->kg_path[j] = off[5 + 2 * j] < 0 ? NULL : t + off[5 + 2 * j];
    }
    *out = (struct kiln_kas_kernel){
        .index = index,
        .hash = d.hash,
        .flops = f / rf,
        .params = p / rp,
        .ops = (uint32_t)(d.nnode - 1),
        .design = t + off[0],
        .values = t + off[1],
        .py = t + off[2],
        .kg = k->kg,
        .py_path = off[3] < 0 ? NULL : t + off[3],
        .kg_paths = k->out_dir ? k->kg_path : NULL,
    };
    return KILN_OK;
}
