/* tests/harness.c -- see harness.h. */
#include "harness.h"

#include "../passes/passes.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int                harness_failures;
static uint64_t    seed, iters;
static bool        seed_given, iters_given, iters_from_env, skipped;
static const char *current;

uint64_t
opt_seed(void)
{
    return seed;
}

uint64_t
opt_iters(void)
{
    return iters;
}

/* --iters N is exact; KILN_ITERS (the sanitizer run's) only ever lowers a test's default */
uint64_t
opt_iters_or(uint64_t dflt)
{
    if (iters_from_env)
        return iters < dflt ? iters : dflt;
    return iters_given ? iters : dflt;
}

void
harness_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: [%s] ", file, line, current ? current : "?");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (seed %llu)\n", (unsigned long long)seed);
    harness_failures++;
    if (getenv("KILN_ABORT_ON_FAIL"))
        abort();
}

void
harness_skip(const char *why)
{
    printf("skip: [%s] %s\n", current ? current : "?", why);
    skipped = true;
}

char *
read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char  *buf = malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        if (r == 0)
            break;
        n += r;
    }
    fclose(f);
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

struct kiln_graph *
parse_or_fail(kiln_ctx *ctx, const char *text, const char *file, int line)
{
    struct kiln_graph *g = NULL;
    if (kiln_graph_parse(ctx, text, strlen(text), "test.kg", &g) != KILN_OK) {
        char msg[700];
        kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
        harness_fail(file, line, "parse failed: %s\n--- text ---\n%s", msg, text);
        return NULL;
    }
    return g;
}

int
harness_main(int argc, char **argv, const struct test *tests, size_t ntests)
{
    const char *filter = NULL;
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash must not swallow the seed line */
    seed = (uint64_t)time(NULL);
    iters = 100;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
            seed_given = true;
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = strtoull(argv[++i], NULL, 0);
            iters_given = true;
        } else if (!strcmp(argv[i], "--list")) {
            for (size_t t = 0; t < ntests; t++)
                printf("%s\n", tests[t].name);
            return 0;
        } else if (argv[i][0] != '-') {
            filter = argv[i];
        } else {
            fprintf(stderr, "usage: %s [--seed S] [--iters N] [--list] [FILTER]\n", argv[0]);
            return 2;
        }
    }
    if (!seed_given && getenv("KILN_SEED"))
        seed = strtoull(getenv("KILN_SEED"), NULL, 0);
    if (!iters_given && getenv("KILN_ITERS")) { /* CI's sanitizer run asks for fewer cases */
        iters = strtoull(getenv("KILN_ITERS"), NULL, 0);
        iters_given = iters_from_env = true;
    }
    printf("seed %llu (replay with --seed %llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    size_t run = 0, nskipped = 0, failed_tests = 0;
    for (size_t t = 0; t < ntests; t++) {
        if (filter && !strstr(tests[t].name, filter))
            continue;
        current = tests[t].name;
        fprintf(stderr, "run  %s\n", tests[t].name);
        int before = harness_failures;
        skipped = false;
        tests[t].fn();
        run++;
        if (harness_failures != before) {
            failed_tests++;
            printf("FAIL %s\n", tests[t].name);
        } else if (skipped) {
            nskipped++;
        } else {
            printf("ok   %s\n", tests[t].name);
        }
    }
    current = NULL;
    printf("%zu passed, %zu failed, %zu skipped\n", run - failed_tests - nskipped, failed_tests,
           nskipped);
    if (failed_tests)
        return 1;
    return run && nskipped == run ? 77 : 0;
}

double
harness_schedule_error(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_schedule *s,
                       uint64_t rng_seed)
{
    struct kiln_func *f;
    if (kiln_lower(ctx, g, s, &f) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "lower: %s", kiln_ctx_error(ctx)->msg);
        return INFINITY;
    }
    struct kiln_rng rng = kiln_rng_new(rng_seed);
    double        **vals = calloc(g->ntensor, sizeof *vals);
    double        **bufs = calloc(f->nparam, sizeof *bufs);
    for (uint32_t t = 0; t < g->ntensor; t++) {
        int64_t n = kiln_tensor_numel(&g->tensor[t]);
        vals[t] = calloc((size_t)n, sizeof(double));
        if (g->tensor[t].kind != KILN_TENSOR_OP)
            for (int64_t i = 0; i < n; i++)
                vals[t][i] = (double)(float)(kiln_rng_uniform(&rng) * 2 - 1);
    }
    CHECK_EQ_INT(KILN_OK, kiln_ir_eval(ctx, g, vals));
    for (uint32_t p = 0; p < f->nparam; p++) {
        const struct kiln_buffer *b = &f->buf[f->param[p]];
        int64_t                   n = kiln_tensor_numel(&g->tensor[b->tensor]);
        bufs[p] = calloc((size_t)n, sizeof(double));
        if (g->tensor[b->tensor].kind != KILN_TENSOR_OP)
            memcpy(bufs[p], vals[b->tensor], sizeof(double) * (size_t)n);
    }
    CHECK_EQ_INT(KILN_OK, kiln_func_eval(f, true, bufs));
    double err = 0;
    for (uint32_t p = 0; p < f->nparam; p++) {
        const struct kiln_buffer *b = &f->buf[f->param[p]];
        if (g->tensor[b->tensor].kind != KILN_TENSOR_OP)
            continue;
        int64_t n = kiln_tensor_numel(&g->tensor[b->tensor]);
        double  scale = 1e-30;
        for (int64_t i = 0; i < n; i++)
            scale = fmax(scale, fabs(vals[b->tensor][i]));
        for (int64_t i = 0; i < n; i++)
            err = fmax(err, fabs(bufs[p][i] - vals[b->tensor][i]) / scale);
    }
    for (uint32_t t = 0; t < g->ntensor; t++)
        free(vals[t]);
    for (uint32_t p = 0; p < f->nparam; p++)
        free(bufs[p]);
    free(vals);
    free(bufs);
    return err;
}

bool
has_line_with(const char *text, const char *s1, const char *s2)
{
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t      len = e ? (size_t)(e - p) : strlen(p);
        char        line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1),
                 p);
        if (strstr(line, s1) && strstr(line, s2))
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}
