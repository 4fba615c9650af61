/* tests/harness.h -- the in-house test harness: a named test table per binary, CHECK macros
 * that print the failing expression, a name filter, --seed and --iters for property tests.
 * Exit code: 0 all passed, 1 a failure, 77 everything skipped. The seed is printed first so a
 * failing run can be replayed with --seed. */
#ifndef KILN_HARNESS_H
#define KILN_HARNESS_H

#include "../ir/ir.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct test {
    const char *name;
    void (*fn)(void);
};

int      harness_main(int argc, char **argv, const struct test *tests, size_t ntests);
uint64_t opt_seed(void);              /* --seed S (default: time-based, printed) */
uint64_t opt_iters(void);             /* --iters N (default given by the test) */
uint64_t opt_iters_or(uint64_t dflt); /* --iters N, else min(dflt, KILN_ITERS), else dflt */
void     harness_fail(const char *file, int line, const char *fmt, ...) KILN_PRINTF(3, 4);
void     harness_skip(const char *why);
/* Reads a whole file into a malloc'ed NUL-terminated buffer; NULL if unreadable. */
char *read_file(const char *path, size_t *len);
/* Whether some line of text contains both s1 and s2 (lines cut at 1023 bytes). */
bool has_line_with(const char *text, const char *s1, const char *s2);
/* Parses text or fails the test with the formatted error; returns NULL on failure. */
struct kiln_graph *parse_or_fail(kiln_ctx *ctx, const char *text, const char *file, int line);
/* Max relative error of g lowered under s (kiln_lower, then the loop-nest interpreter) against
 * the reference interpreter (kiln_ir_eval) on random inputs drawn from rng_seed; lowering failures
 * are reported (harness_fail) and give INFINITY. */
struct kiln_schedule;
double harness_schedule_error(kiln_ctx *ctx, const struct kiln_graph *g,
                              const struct kiln_schedule *s, uint64_t rng_seed);
#define PARSE(ctx, text) parse_or_fail(ctx, text, __FILE__, __LINE__)
extern int harness_failures;

#define CHECK(cond)                                                      \
    do {                                                                 \
        if (!(cond))                                                     \
            harness_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond); \
    } while (0)
#define CHECK_EQ_INT(want, got)                                                                \
    do {                                                                                       \
        long long w_ = (long long)(want), g_ = (long long)(got);                               \
        if (w_ != g_)                                                                          \
            harness_fail(__FILE__, __LINE__, "%s == %s: want %lld, got %lld", #want, #got, w_, \
                         g_);                                                                  \
    } while (0)
#define CHECK_EQ_STR(want, got)                                                                \
    do {                                                                                       \
        const char *w_ = (want), *g_ = (got);                                                  \
        if (!w_ || !g_ || strcmp(w_, g_))                                                      \
            harness_fail(__FILE__, __LINE__, "%s == %s:\n  want: %s\n  got:  %s", #want, #got, \
                         w_ ? w_ : "(null)", g_ ? g_ : "(null)");                              \
    } while (0)
#define CHECK_NEAR(want, got, tol)                                                              \
    do {                                                                                        \
        double w_ = (want), g_ = (got);                                                         \
        if (!(fabs(w_ - g_) <= (tol) * (1 + fabs(w_))))                                         \
            harness_fail(__FILE__, __LINE__, "%s ~ %s: want %.17g, got %.17g", #want, #got, w_, \
                         g_);                                                                   \
    } while (0)

#endif
