/* tests/parse/test_parse.c -- the .kg parser and printer.
 *
 * Golden printer tests (tests/golden/print/NAME.kg -> NAME.out), malformed inputs with their
 * exact diagnostics (tests/errors/NAME.kg -> NAME.err), generated hostile inputs (garbage,
 * NUL bytes, huge files, deep nesting), a round-trip property test over random graphs written
 * as text, a mutation test over the golden inputs, and allocation-failure injection. Set
 * UPDATE_GOLDEN=1 to rewrite .out and .err files from the current output (review the diff).
 * Files whose first line contains `needs: lib` use the op library; when it fails to parse a
 * call they fail, never skip. The round-trip property for every text that parses: print is a fixed
 * point of parse . print, and the reparsed graph (in a fresh context) has the same structural hash,
 * for both plain and expanded printing. */
#include "../harness.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

static bool
update_golden(void)
{
    const char *u = getenv("UPDATE_GOLDEN");
    return u && *u && strcmp(u, "0");
}

static bool
write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(text, 1, strlen(text), f) == strlen(text);
    return fclose(f) == 0 && ok;
}

/* The op library parses a call (probed once). It is part of the library: a file that needs it
 * fails the test when it does not. */
static bool
lib_available(void)
{
    static int known = -1;
    if (known < 0) {
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        const char        *t = "input x: f32[4]\ny = relu(x)\n";
        known = kiln_graph_parse(ctx, t, strlen(t), "probe.kg", &g) == KILN_OK;
        kiln_ctx_free(ctx);
    }
    return known == 1;
}

static bool
needs_lib(const char *text)
{
    const char *nl = strchr(text, '\n');
    char        first[256];
    size_t      n = nl ? (size_t)(nl - text) : strlen(text);
    snprintf(first, sizeof first, "%.*s", (int)(n < 255 ? n : 255), text);
    return strstr(first, "needs: lib") != NULL;
}

static int
cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted file names in dir ending in ext (malloc'ed; free with free_names). */
static char **
list_dir(const char *dir, const char *ext, size_t *n)
{
    DIR *d = opendir(dir);
    *n = 0;
    if (!d)
        return NULL;
    size_t         cap = 16;
    char         **v = malloc(cap * sizeof *v);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), el = strlen(ext);
        if (l <= el || strcmp(e->d_name + l - el, ext))
            continue;
        if (*n == cap)
            v = realloc(v, (cap *= 2) * sizeof *v);
        v[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(v, *n, sizeof *v, cmp_names);
    return v;
}

static void
free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static char *
error_text(kiln_ctx *ctx)
{
    static char msg[800];
    kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
    return msg;
}

/* Parses text; when it parses, checks the round-trip properties. Returns 1 when it parsed and
 * the properties hold, 0 when it did not parse (*status set), -1 after reporting a failure. */
static int
check_roundtrip(const char *text, size_t len, const char *what, enum kiln_status *status)
{
    kiln_ctx          *c1 = kiln_ctx_new(NULL);
    struct kiln_graph *g1 = NULL;
    enum kiln_status   st = kiln_graph_parse(c1, text, len, "t.kg", &g1);
    int                result = 1;
    if (status)
        *status = st;
    if (st != KILN_OK) {
        const struct kiln_error *err = kiln_ctx_error(c1);
        if (st != KILN_ERR_INVALID && st != KILN_ERR_NOMEM && st != KILN_ERR_UNSUPPORTED) {
            harness_fail(__FILE__, __LINE__, "%s: parse gave status %s: %s", what,
                         kiln_status_name(st), error_text(c1));
            result = -1;
        } else if (st == KILN_ERR_INVALID && (!err || !err->loc.line || !err->loc.col)) {
            harness_fail(__FILE__, __LINE__, "%s: error without a location: %s", what,
                         error_text(c1));
            result = -1;
        } else {
            result = 0;
        }
        kiln_ctx_free(c1);
        return result;
    }
    uint64_t h1 = kiln_graph_hash(g1);
    for (unsigned flags = 0; flags <= KILN_PRINT_EXPANDED && result == 1; flags++) {
        const char *p1 = NULL, *p2 = NULL;
        if (kiln_graph_print(c1, g1, flags, &p1) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "%s: print failed: %s\n--- text ---\n%.*s", what,
                         error_text(c1), (int)len, text);
            result = -1;
            break;
        }
        kiln_ctx          *c2 = kiln_ctx_new(NULL);
        struct kiln_graph *g2 = NULL;
        if (kiln_graph_parse(c2, p1, strlen(p1), "printed.kg", &g2) != KILN_OK) {
            harness_fail(__FILE__, __LINE__,
                         "%s: printed text does not parse (flags %u): %s\n--- text ---\n%.*s\n"
                         "--- printed ---\n%s",
                         what, flags, error_text(c2), (int)len, text, p1);
            result = -1;
        } else if (kiln_graph_hash(g2) != h1) {
            harness_fail(__FILE__, __LINE__,
                         "%s: hash changed after print and parse (flags %u)\n--- text ---\n%.*s\n"
                         "--- printed ---\n%s",
                         what, flags, (int)len, text, p1);
            result = -1;
        } else if (kiln_graph_print(c2, g2, flags, &p2) != KILN_OK || strcmp(p1, p2)) {
            harness_fail(__FILE__, __LINE__,
                         "%s: print is not a fixed point (flags %u)\n--- first ---\n%s\n"
                         "--- second ---\n%s",
                         what, flags, p1, p2 ? p2 : error_text(c2));
            result = -1;
        }
        kiln_ctx_free(c2);
    }
    kiln_ctx_free(c1);
    return result;
}

/* Parses text expecting an error; returns the formatted message (static buffer). */
static const char *
parse_error(const char *text, size_t len, const char *file, enum kiln_status *st)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = NULL;
    *st = kiln_graph_parse(ctx, text, len, file, &g);
    const char *msg = *st == KILN_OK ? "(parsed)" : error_text(ctx);
    kiln_ctx_free(ctx);
    return msg;
}

#define CHECK_ERROR(text, want)                                        \
    do {                                                               \
        enum kiln_status st_;                                          \
        const char      *t_ = (text);                                  \
        CHECK_EQ_STR(want, parse_error(t_, strlen(t_), "e.kg", &st_)); \
        CHECK_EQ_INT(KILN_ERR_INVALID, st_);                           \
    } while (0)

/* ---- basic parsing ---- */

static void
test_matmul(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = PARSE(ctx, "input a: f32[4, 8]\n"
                                      "input b: f32[8, 3]\n"
                                      "C[i, j] += a[i, k] * b[k, j]\n"
                                      "output C\n");
    if (g) {
        CHECK_EQ_INT(3, kiln_graph_ntensors(g));
        CHECK_EQ_INT(2, kiln_graph_nargs(g));
        CHECK_EQ_INT(1, kiln_graph_nops(g));
        CHECK_EQ_INT(1, kiln_graph_ncalls(g));
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, 2, &ti);
        CHECK_EQ_STR("C", ti.name);
        CHECK_EQ_INT(2, ti.ndim);
        CHECK_EQ_INT(4, ti.shape[0]);
        CHECK_EQ_INT(3, ti.shape[1]);
        CHECK(ti.is_output);
        const struct kiln_opdef *op = &g->op[0];
        CHECK_EQ_INT(KILN_REDUCE_SUM, op->reduce);
        CHECK_EQ_INT(1, op->nred);
        CHECK_EQ_INT(8, op->rext[0]);
        CHECK_EQ_STR("k", kiln_sym_str(ctx, op->rname[0]));
        CHECK_EQ_STR("i", kiln_sym_str(ctx, op->axname[0]));
        const char *text;
        CHECK(kiln_graph_print(ctx, g, 0, &text) == KILN_OK);
        CHECK_EQ_STR("input a: f32[4, 8]\ninput b: f32[8, 3]\n\n"
                     "C[i, j] += a[i, k] * b[k, j]\n\noutput C\n",
                     text);
        struct kiln_call_info ci;
        kiln_graph_call(g, 0, &ci);
        CHECK_EQ_STR("compute", ci.kind);
        CHECK_EQ_STR("C", ci.output);
    }
    kiln_ctx_free(ctx);
}

/* The same graph written in a different statement order hashes alike. */
static void
test_order_independent(void)
{
    kiln_ctx          *c1 = kiln_ctx_new(NULL), *c2 = kiln_ctx_new(NULL);
    struct kiln_graph *g1 = PARSE(c1, "input x: f32[4]\n"
                                      "y[i] = x[i] * 2\n"
                                      "z[i] = y[i] + x[i]\n"
                                      "output z\n");
    struct kiln_graph *g2 = PARSE(c2, "output z\n"
                                      "z[i] = y[i] + x[i]\n"
                                      "y[i] = x[i] * 2\n"
                                      "input x: f32[4]\n");
    if (g1 && g2)
        CHECK_EQ_INT(kiln_graph_hash(g1), kiln_graph_hash(g2));
    kiln_ctx_free(c1);
    kiln_ctx_free(c2);
}

/* Exact printing of expression forms, including literals that need casts. */
static void
test_print_forms(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"y[i] = (x[i] + 1) * 2", "y[i] = (x[i] + 1.0) * 2.0"},
        {"y[i] = x[i] - (x[i] - 1.5)", "y[i] = x[i] - (x[i] - 1.5)"},
        {"y[i] = (x[i] - x[i]) - 1.5", "y[i] = x[i] - x[i] - 1.5"},
        {"y[i] = -(x[i] * 3)", "y[i] = -(x[i] * 3.0)"},
        {"y[i] = select(x[i] > 0, x[i], 0)", "y[i] = select(0.0 < x[i], x[i], 0.0)"},
        {"y[i] = select(!(i >= 2) && i != 0 || i == 3, 1.0, 2.0) where i < 4",
         "y[i] = select(!(2 <= i) && i != 0 || i == 3, 1.0, 2.0) where i < 4"},
        {"y[i] = f64(x[i]) * 0.1", "y[i] = f64(x[i]) * 0.1"},
        {"y[i] = select(i < 2, f64(x[i]), 0.5)", "y[i] = select(i < 2, f64(x[i]), 0.5)"},
        {"y[i] = f64(x[i]) where i < 3", "y[i] = f64(x[i]) where i < 3"},
        {"y[i] = f64(0.25) + f64(x[i])", "y[i] = f64(x[i]) + 0.25"},
        {"y[i] = i < 2 where i < 3", "y[i] = i < 2 where i < 3"},
        {"y[] = f64(1.5)", "y[] = f64(1.5)"},
        {"y[] = 1.5", "y[] = 1.5"},
        {"y[] = 7", "y[] = 7"},
        {"y[] = i32(7)", "y[] = i32(7)"},
        {"y[] = 1 < 2", "y[] = bool(1)"},
        {"y[] = -9223372036854775808 // -1", "y[] = i64(-9223372036854775808) // i64(-1)"},
        {"y[i] = x[i] * -inf + nan", "y[i] = x[i] * -inf + nan"},
        {"y[i] = pow(x[i], 2) + exp(-x[i])", "y[i] = pow(x[i], 2.0) + exp(-x[i])"},
        {"y[i] = f32(i // 2 % 3) / 1e-5 + x[i]", "y[i] = f32(i // 2 % 3) / 1e-5 + x[i]"},
        {"y[i] = x[min(i + 1, 3)] where i < 6", "y[i] = x[min(i + 1, 3)] where i < 6"},
        {"y[i] max= x[k] where i < 2", "y[i] max= x[k] where i < 2"},
        {"y[j, i] = x[i] + f32(j) where j < 3", "y[j, i] = f32(j) + x[i] where j < 3"},
        {"y[i] += x[k] * f32(r) where r < 5, i < 1", "y[i] += x[k] * f32(r) where i < 1, r < 5"},
        {"y[i] += f32(r) * x[k] where i < 1, r < 5", "y[i] += x[k] * f32(r) where i < 1, r < 5"},
    };
    for (size_t i = 0; i < KILN_COUNTOF(cases); i++) {
        char text[512];
        snprintf(text, sizeof text, "input x: f32[4]\n%s\n", cases[i].in);
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g = PARSE(ctx, text);
        const char        *out = NULL;
        if (g && kiln_graph_print(ctx, g, 0, &out) == KILN_OK) {
            char want[600];
            snprintf(want, sizeof want, "input x: f32[4]\n\n%s\n\noutput y\n", cases[i].out);
            CHECK_EQ_STR(want, out);
        }
        kiln_ctx_free(ctx);
        CHECK_EQ_INT(1, check_roundtrip(text, strlen(text), cases[i].in, NULL));
    }
}

/* Reduction variables numbered by the where clause first, then by appearance. */
static void
test_reduction_order(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = PARSE(ctx, "input x: f32[3, 5]\n"
                                      "y[] += x[a, b] where b < 5\n");
    if (g) {
        CHECK_EQ_STR("b", kiln_sym_str(ctx, g->op[0].rname[0]));
        CHECK_EQ_STR("a", kiln_sym_str(ctx, g->op[0].rname[1]));
        CHECK_EQ_INT(5, g->op[0].rext[0]);
        CHECK_EQ_INT(3, g->op[0].rext[1]);
        const char *out;
        CHECK(kiln_graph_print(ctx, g, 0, &out) == KILN_OK);
        CHECK(out && strstr(out, "y[] += x[a, b] where b < 5, a < 3\n"));
    }
    kiln_ctx_free(ctx);
}

/* ---- golden printer tests ---- */

static void
test_golden_print(void)
{
    const char *dir = "tests/golden/print";
    size_t      n;
    char      **names = list_dir(dir, ".kg", &n);
    CHECK(n >= 10);
    for (size_t i = 0; i < n; i++) {
        char path[512], outpath[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(outpath, sizeof outpath, "%.*s.out", (int)(strlen(path) - 3), path);
        size_t len;
        char  *text = read_file(path, &len);
        if (!text) {
            harness_fail(__FILE__, __LINE__, "cannot read %s", path);
            continue;
        }
        if (needs_lib(text) && !lib_available()) {
            harness_fail(__FILE__, __LINE__, "%s: the op library does not parse relu", path);
            free(text);
            continue;
        }
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g = NULL;
        const char        *out = NULL;
        if (kiln_graph_parse(ctx, text, len, names[i], &g) != KILN_OK
            || kiln_graph_print(ctx, g, 0, &out) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "%s: %s", path, error_text(ctx));
        } else if (update_golden()) {
            CHECK(write_file(outpath, out));
        } else {
            char *want = read_file(outpath, NULL);
            if (!want)
                harness_fail(__FILE__, __LINE__, "%s missing (run with UPDATE_GOLDEN=1)", outpath);
            else if (strcmp(want, out))
                harness_fail(__FILE__, __LINE__, "%s:\n--- want ---\n%s--- got ---\n%s", outpath,
                             want, out);
            free(want);
        }
        kiln_ctx_free(ctx);
        CHECK_EQ_INT(1, check_roundtrip(text, len, path, NULL));
        free(text);
    }
    free_names(names, n);
}

/* ---- malformed inputs ---- */

static void
test_error_files(void)
{
    const char *dir = "tests/errors";
    size_t      n, checked = 0, nolib = 0;
    char      **names = list_dir(dir, ".kg", &n);
    for (size_t i = 0; i < n; i++) {
        char path[512], errpath[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(errpath, sizeof errpath, "%.*s.err", (int)(strlen(path) - 3), path);
        size_t len;
        char  *text = read_file(path, &len);
        if (!text) {
            harness_fail(__FILE__, __LINE__, "cannot read %s", path);
            continue;
        }
        if (needs_lib(text) && !lib_available()) {
            harness_fail(__FILE__, __LINE__, "%s: the op library does not parse relu", path);
            nolib++;
            free(text);
            continue;
        }
        enum kiln_status st;
        const char      *got = parse_error(text, len, names[i], &st);
        if (update_golden()) {
            char line[900];
            snprintf(line, sizeof line, "%s\n", got);
            CHECK(write_file(errpath, line));
        } else {
            char *want = read_file(errpath, NULL);
            if (!want) {
                harness_fail(__FILE__, __LINE__, "%s missing (run with UPDATE_GOLDEN=1)", errpath);
            } else {
                size_t wl = strlen(want);
                while (wl && (want[wl - 1] == '\n' || want[wl - 1] == '\r'))
                    want[--wl] = 0;
                if (strcmp(want, got))
                    harness_fail(__FILE__, __LINE__, "%s:\n  want: %s\n  got:  %s", path, want,
                                 got);
            }
            free(want);
        }
        if (st != KILN_ERR_INVALID)
            harness_fail(__FILE__, __LINE__, "%s: status %s, not invalid", path,
                         kiln_status_name(st));
        checked++;
        free(text);
    }
    printf("     %zu error files checked, %zu not (the op library failed)\n", checked, nolib);
    CHECK(checked + nolib >= 45);
    free_names(names, n);
}

/* Inputs that are easier to make than to ship. */
static void
test_error_generated(void)
{
    enum kiln_status st;
    /* NUL bytes and binary garbage */
    static const char nul[] = "input x: f32[4]\ny[i] = x[i]\0\n";
    CHECK_EQ_STR("e.kg:2:12: error: unexpected character '\\x00'",
                 parse_error(nul, sizeof nul - 1, "e.kg", &st));
    struct kiln_rng r = kiln_rng_new(opt_seed());
    char            garbage[256];
    for (int rep = 0; rep < 200; rep++) {
        size_t n = (size_t)kiln_rng_below(&r, sizeof garbage);
        for (size_t i = 0; i < n; i++)
            garbage[i] = (char)kiln_rng_below(&r, 256);
        check_roundtrip(garbage, n, "garbage", NULL); /* anything but a crash */
    }
    /* a line of absurd length, and a file over the size limit */
    size_t big = ((size_t)64 << 20) + 1;
    char  *text = malloc(big + 16);
    memset(text, ' ', big);
    memcpy(text + (big - 1) - 20, "input x: f32[4] @", 17);
    CHECK_EQ_STR("e.kg:1:1: error: file is too large: 67108865 bytes, at most 67108864",
                 parse_error(text, big, "e.kg", &st));
    size_t long_len = (size_t)8 << 20;
    memcpy(text + long_len - 20, "input x: f32[4] @", 17);
    char want[128];
    snprintf(want, sizeof want, "e.kg:1:%zu: error: unexpected character '@'", long_len - 3);
    CHECK_EQ_STR(want, parse_error(text, long_len, "e.kg", &st));
    /* deep nesting, both by parentheses and by long operator chains */
    size_t k = 0;
    k += (size_t)sprintf(text + k, "input x: f32[]\ny[] = ");
    for (int i = 0; i < 2000; i++)
        text[k++] = '(';
    k += (size_t)sprintf(text + k, "x[]");
    for (int i = 0; i < 2000; i++)
        text[k++] = ')';
    text[k++] = '\n';
    CHECK(strstr(parse_error(text, k, "e.kg", &st), "expression nested too deeply"));
    k = (size_t)sprintf(text, "input x: f32[]\ny[] = x[]");
    for (int i = 0; i < 100000; i++)
        k += (size_t)sprintf(text + k, " + x[]");
    CHECK(strstr(parse_error(text, k, "e.kg", &st), "expression nested too deeply"));
    k = (size_t)sprintf(text, "input x: f32[]\ny[] = ");
    for (int i = 0; i < 100000; i++)
        text[k++] = '-';
    k += (size_t)sprintf(text + k, "x[]\n");
    CHECK(strstr(parse_error(text, k, "e.kg", &st), "expression nested too deeply"));
    /* many statements: a long chain is sorted without recursion */
    k = (size_t)sprintf(text, "input t0: f32[2]\n");
    for (int i = 2000; i >= 1; i--)
        k += (size_t)sprintf(text + k, "t%d[i] = t%d[i] + 1\n", i, i - 1);
    enum kiln_status rst;
    CHECK_EQ_INT(1, check_roundtrip(text, k, "chain", &rst));
    free(text);
    /* text that is NULL or empty */
    CHECK_EQ_STR("e.kg:1:1: error: empty graph: no statements", parse_error("", 0, "e.kg", &st));
    CHECK_EQ_INT(KILN_ERR_INVALID, st);
    /* no file name: the location has no file part */
    CHECK_EQ_STR("1:1: error: empty graph: no statements", parse_error("", 0, NULL, &st));
}

/* ---- random graphs as text ---- */

struct sbuf {
    char  *p;
    size_t n, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) KILN_PRINTF(2, 3);

static void
sb_printf(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->n + (size_t)n + 1 > b->cap) {
        b->cap = (b->n + (size_t)n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

struct gtensor {
    char            name[16];
    enum kiln_dtype dt;
    int             ndim;
    int64_t         shape[4];
};

struct gvar {
    char    name[8];
    int64_t ext;
    bool    direct, used;
};

struct gen {
    struct kiln_rng r;
    struct gtensor  t[12];
    int             nt;
    struct gvar     v[8];
    int             nv;
    bool            all_where; /* write a where for every variable */
    struct sbuf    *guards;    /* the select being written: bounds of its guarded indices */
};

static uint64_t
below(struct gen *g, uint64_t n)
{
    return kiln_rng_below(&g->r, n);
}

/* An index expression in [0, e); a bare variable (a direct position) only at depth 0. */
static void
gen_index(struct gen *g, struct sbuf *b, int64_t e, int depth)
{
    int tries = 0;
    for (;;) {
        struct gvar *v = &g->v[below(g, (uint64_t)g->nv)];
        switch (below(g, 6)) {
        case 0:
        case 1:
            if ((v->ext != e || depth) && tries++ < 8)
                continue;
            if (v->ext != e || depth)
                break;
            v->direct = v->used = true;
            sb_printf(b, "%s", v->name);
            return;
        case 2:
            v->used = true;
            sb_printf(b, "min(%s, %lld)", v->name, (long long)(e - 1));
            return;
        case 3:
            v->used = true;
            sb_printf(b, "(%s + %d) %% %lld", v->name, 1 + (int)below(g, 3), (long long)e);
            return;
        case 4:
            if (depth < 2) {
                sb_printf(b, "max(");
                gen_index(g, b, e, depth + 1);
                sb_printf(b, " - 1, 0)");
                return;
            }
            break;
        default:
            break;
        }
        sb_printf(b, "%lld", (long long)below(g, (uint64_t)e));
        return;
    }
}

/* Any integer expression (indices of guarded loads, conditions, casts). */
static void
gen_int(struct gen *g, struct sbuf *b)
{
    struct gvar *v = &g->v[below(g, (uint64_t)g->nv)];
    v->used = true;
    switch (below(g, 4)) {
    case 0:
        sb_printf(b, "%s + 1", v->name);
        break;
    case 1:
        sb_printf(b, "%s - %d", v->name, 1 + (int)below(g, 2));
        break;
    case 2:
        sb_printf(b, "%s * 2", v->name);
        break;
    default:
        sb_printf(b, "(%s + 2) // 2", v->name);
        break;
    }
}

static void gen_value(struct gen *g, struct sbuf *b, enum kiln_dtype dt, int depth, bool typed,
                      bool guarded);

static bool
is_fl(enum kiln_dtype dt)
{
    return dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64;
}

static void
gen_load(struct gen *g, struct sbuf *b, const struct gtensor *t, bool guarded)
{
    sb_printf(b, "%s[", t->name);
    for (int d = 0; d < t->ndim; d++) {
        if (d)
            sb_printf(b, ", ");
        if (guarded && g->guards && below(g, 2)) {
            /* any index, bounded by the select's condition */
            struct sbuf e = {0};
            gen_int(g, &e);
            sb_printf(b, "%s", e.p);
            sb_printf(g->guards, " && 0 <= %s && %s < %lld", e.p, e.p, (long long)t->shape[d]);
            free(e.p);
        } else
            gen_index(g, b, t->shape[d], 0);
    }
    sb_printf(b, "]");
}

static void
gen_cond(struct gen *g, struct sbuf *b, int depth)
{
    static const char *const cmp[] = {"<", "<=", ">", ">=", "==", "!="};
    switch (below(g, depth < 2 ? 5 : 2)) {
    case 0:
        gen_int(g, b);
        sb_printf(b, " %s %d", cmp[below(g, 6)], (int)below(g, 4));
        break;
    case 1:
        sb_printf(b, "(");
        gen_value(g, b, KILN_DTYPE_F32, depth + 1, true, false);
        sb_printf(b, ") %s 0.5", cmp[below(g, 6)]);
        break;
    case 2:
        sb_printf(b, "!(");
        gen_cond(g, b, depth + 1);
        sb_printf(b, ")");
        break;
    default:
        sb_printf(b, "(");
        gen_cond(g, b, depth + 1);
        sb_printf(b, ") %s (", below(g, 2) ? "&&" : "||");
        gen_cond(g, b, depth + 1);
        sb_printf(b, ")");
        break;
    }
}

static void
gen_literal(struct gen *g, struct sbuf *b, enum kiln_dtype dt)
{
    static const char *const fl[] = {"0.5", "-1.25", "2", "3.0", "1e-3", "-7", "1e10", "0.1"};
    static const char *const in[] = {"0", "1", "-3", "7", "2", "100"};
    if (is_fl(dt))
        sb_printf(b, "%s", fl[below(g, KILN_COUNTOF(fl))]);
    else
        sb_printf(b, "%s", in[below(g, KILN_COUNTOF(in))]);
}

static void
gen_value(struct gen *g, struct sbuf *b, enum kiln_dtype dt, int depth, bool typed, bool guarded)
{
    const char *dn = kiln_dtype_name(dt);
    int         nt = 0, pick[12];
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].dt == dt)
            pick[nt++] = i;
    uint64_t choice = depth >= 3 ? below(g, 3) : below(g, 10);
    if (choice == 1 && !typed) {
        gen_literal(g, b, dt);
        return;
    }
    if (choice <= 1) {
        if (nt) {
            gen_load(g, b, &g->t[pick[below(g, (uint64_t)nt)]], guarded);
        } else {
            sb_printf(b, "%s(", dn);
            gen_int(g, b);
            sb_printf(b, ")");
        }
        return;
    }
    if (choice == 2) { /* a cast from another dtype */
        const struct gtensor *t = &g->t[below(g, (uint64_t)g->nt)];
        sb_printf(b, "%s(", dn);
        if (t->dt == dt || below(g, 3) == 0)
            gen_int(g, b);
        else
            gen_load(g, b, t, guarded);
        sb_printf(b, ")");
        return;
    }
    bool left_typed = below(g, 2);
    switch (choice) {
    case 3:
    case 4: {
        static const char *const fops[] = {"+", "-", "*", "/"};
        static const char *const iops[] = {"+", "-", "*"};
        const char              *op = is_fl(dt) ? fops[below(g, 4)] : iops[below(g, 3)];
        sb_printf(b, "(");
        gen_value(g, b, dt, depth + 1, typed && left_typed, guarded);
        sb_printf(b, " %s ", op);
        gen_value(g, b, dt, depth + 1, typed && !left_typed, guarded);
        sb_printf(b, ")");
        return;
    }
    case 5:
        if (!is_fl(dt)) {
            sb_printf(b, "(");
            gen_value(g, b, dt, depth + 1, typed, guarded);
            sb_printf(b, " %s %d)", below(g, 2) ? "//" : "%", 2 + (int)below(g, 3));
            return;
        }
        sb_printf(b, "%s(",
                  (const char *[]){"exp", "sqrt", "tanh", "abs", "sigmoid", "erf", "floor", "log",
                                   "rsqrt"}[below(g, 9)]);
        gen_value(g, b, dt, depth + 1, typed, guarded);
        sb_printf(b, ")");
        return;
    case 6:
        sb_printf(b, "%s(", below(g, 2) ? "min" : "max");
        gen_value(g, b, dt, depth + 1, typed && left_typed, guarded);
        sb_printf(b, ", ");
        gen_value(g, b, dt, depth + 1, typed && !left_typed, guarded);
        sb_printf(b, ")");
        return;
    case 7:
        sb_printf(b, "-");
        if (below(g, 2)) {
            sb_printf(b, "(");
            gen_value(g, b, dt, depth + 1, typed, guarded);
            sb_printf(b, ")");
        } else if (nt) {
            gen_load(g, b, &g->t[pick[below(g, (uint64_t)nt)]], guarded);
        } else {
            sb_printf(b, "%s(", dn);
            gen_int(g, b);
            sb_printf(b, ")");
        }
        return;
    default: {
        /* select(c && the bounds of the first branch's guarded indices, a, b) */
        struct sbuf a = {0}, guards = {0}, *outer = g->guards;
        const char *sep = below(g, 4) ? " " : "\n        ";
        g->guards = &guards;
        sb_printf(&guards, "%s", "");
        gen_value(g, &a, dt, depth + 1, left_typed, true);
        g->guards = outer;
        sb_printf(b, "select(%s", guards.n ? "(" : "");
        gen_cond(g, b, depth);
        sb_printf(b, "%s%s,%s%s, ", guards.n ? ")" : "", guards.p, sep, a.p);
        gen_value(g, b, dt, depth + 1, !left_typed, false);
        sb_printf(b, ")");
        free(a.p);
        free(guards.p);
        return;
    }
    }
}

static void
gen_shape(struct gen *g, int ndim, int64_t *shape)
{
    for (int d = 0; d < ndim; d++)
        shape[d] = 1 + (int64_t)below(g, 5);
}

/* One random graph as text: declarations, compute definitions reading earlier tensors, in
 * shuffled order, some outputs. */
static char *
gen_graph(uint64_t seed, bool all_where)
{
    struct gen                   g = {.r = kiln_rng_new(seed), .all_where = all_where};
    static const enum kiln_dtype dts[] = {KILN_DTYPE_F32, KILN_DTYPE_F32, KILN_DTYPE_F64,
                                          KILN_DTYPE_I32};
    char                        *stmt[16];
    int                          nstmt = 0;
    int                          nin = 1 + (int)below(&g, 3);
    for (int i = 0; i < nin; i++) {
        struct gtensor *t = &g.t[g.nt++];
        snprintf(t->name, sizeof t->name, "%c%d", below(&g, 2) ? 'x' : 'w', i);
        t->dt = dts[below(&g, 4)];
        t->ndim = (int)below(&g, 4);
        gen_shape(&g, t->ndim, t->shape);
        struct sbuf b = {0};
        sb_printf(&b, "%s %s: %s[", t->name[0] == 'x' ? "input" : "weight", t->name,
                  kiln_dtype_name(t->dt));
        for (int d = 0; d < t->ndim; d++)
            sb_printf(&b, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        sb_printf(&b, "]");
        stmt[nstmt++] = b.p;
    }
    int ndef = 1 + (int)below(&g, 4);
    int first_def = g.nt;
    for (int k = 0; k < ndef; k++) {
        struct sbuf     b = {0};
        enum kiln_dtype dt = below(&g, 2) ? g.t[below(&g, (uint64_t)g.nt)].dt : dts[below(&g, 4)];
        int             nax = (int)below(&g, 4), nred = below(&g, 2) ? (int)below(&g, 3) : 0;
        static const char *const names[] = {"i", "j", "h", "w", "k", "r", "c", "n.2"};
        g.nv = nax + nred;
        for (int v = 0; v < g.nv; v++) {
            snprintf(g.v[v].name, sizeof g.v[v].name, "%s", names[v]);
            g.v[v].ext = 1 + (int64_t)below(&g, 5);
            g.v[v].direct = g.v[v].used = false;
        }
        if (!g.nv) { /* a scalar definition still needs a variable for index expressions */
            g.nv = 1;
            nred = 1;
            snprintf(g.v[0].name, sizeof g.v[0].name, "k");
            g.v[0].ext = 1 + (int64_t)below(&g, 4);
            g.v[0].direct = g.v[0].used = false;
        }
        char name[16];
        snprintf(name, sizeof name, "t%d", k);
        sb_printf(&b, "%s[", name);
        for (int v = 0; v < nax; v++)
            sb_printf(&b, "%s%s", v ? ", " : "", g.v[v].name);
        static const char *const red[] = {"+=", "max=", "min="};
        sb_printf(&b, "] %s ", nred ? red[below(&g, 3)] : "=");
        gen_value(&g, &b, dt, 0, true, false);
        const char *sep = below(&g, 4) ? " where " : "\n  where ";
        for (int v = 0; v < g.nv; v++) {
            bool reduction_unseen = v >= nax && !g.v[v].used;
            if (g.all_where || !g.v[v].direct || reduction_unseen || below(&g, 8) == 0) {
                sb_printf(&b, "%s%s < %lld", sep, g.v[v].name, (long long)g.v[v].ext);
                sep = ", ";
            }
        }
        if (below(&g, 5) == 0)
            sb_printf(&b, "  # a comment");
        stmt[nstmt++] = b.p;
        struct gtensor *t = &g.t[g.nt++];
        snprintf(t->name, sizeof t->name, "%s", name);
        t->dt = dt; /* the body's dtype is dt: every operand was generated typed as dt */
        t->ndim = nax;
        for (int v = 0; v < nax && v < 4; v++)
            t->shape[v] = g.v[v].ext;
        if (nax > 3) /* keep the tensor table within 3 dims for loads */
            g.nt--;
    }
    for (int k = first_def; k < g.nt && nstmt < 16; k++)
        if (below(&g, 3) == 0) {
            struct sbuf b = {0};
            sb_printf(&b, "output %s", g.t[k].name);
            stmt[nstmt++] = b.p;
        }
    for (int i = nstmt - 1; i > 0; i--) { /* shuffle */
        int   j = (int)below(&g, (uint64_t)i + 1);
        char *t = stmt[i];
        stmt[i] = stmt[j];
        stmt[j] = t;
    }
    struct sbuf out = {0};
    sb_printf(&out, "# random graph, seed %llu\n", (unsigned long long)seed);
    for (int i = 0; i < nstmt; i++) {
        sb_printf(&out, "%s%s\n", below(&g, 6) ? "" : "\n", stmt[i]);
        free(stmt[i]);
    }
    return out.p;
}

static void
test_roundtrip_random(void)
{
    uint64_t base = opt_seed(), n = opt_iters_or(500), parsed = 0, retried = 0, rejected = 0;
    int      failures0 = harness_failures;
    for (uint64_t it = 0; it < n && harness_failures < failures0 + 5; it++) {
        uint64_t         seed = base * 1000003u + it;
        char            *text = gen_graph(seed, false);
        enum kiln_status st;
        char             what[64];
        snprintf(what, sizeof what, "random graph (seed %llu)", (unsigned long long)seed);
        if (getenv("KILN_DUMP"))
            printf("%s\n", text);
        int r = check_roundtrip(text, strlen(text), what, &st);
        if (r == 0) {
            /* folding may drop the load that gave a variable its range: retry with every
             * range written out */
            if (getenv("KILN_DUMP")) {
                enum kiln_status st2;
                printf("retry: %s\n%s\n", parse_error(text, strlen(text), "r.kg", &st2), text);
            }
            free(text);
            text = gen_graph(seed, true);
            retried++;
            r = check_roundtrip(text, strlen(text), what, &st);
        }
        if (r == 0) {
            kiln_ctx          *ctx = kiln_ctx_new(NULL);
            struct kiln_graph *gr;
            kiln_graph_parse(ctx, text, strlen(text), "random.kg", &gr);
            const char *msg = error_text(ctx);
            /* select(c, a, a) folds to an unguarded a, whose index may really leave the
             * tensor: a correct rejection of what the generator wrote */
            if (strstr(msg, ", outside [0, ") || strstr(msg, "has no static bound"))
                rejected++;
            else
                harness_fail(__FILE__, __LINE__, "%s does not parse: %s\n--- text ---\n%s", what,
                             msg, text);
            kiln_ctx_free(ctx);
        }
        parsed += r == 1;
        free(text);
    }
    printf("     %llu random graphs round-tripped (%llu needed all ranges written, %llu rejected "
           "for a folded guard)\n",
           (unsigned long long)parsed, (unsigned long long)retried, (unsigned long long)rejected);
    CHECK(retried * 5 <= n);
    CHECK(rejected * 20 <= n);
}

/* ---- mutations of valid inputs: never crash; anything that parses round-trips ---- */

static void
test_mutations(void)
{
    size_t                   n;
    char                   **names = list_dir("tests/golden/print", ".kg", &n);
    struct kiln_rng          r = kiln_rng_new(opt_seed() ^ 0x5eed);
    uint64_t                 iters = opt_iters_or(500), parsed = 0;
    static const char *const snippets[] = {"(",  ")",       "[",
                                           "]",  ",",       "=",
                                           "+=", "max=",    " where ",
                                           "\n", "#",       "-",
                                           "//", "1e308",   "9223372036854775808",
                                           "x",  "y",       "i",
                                           "k",  "select(", "f64(",
                                           "\"", "\\",      "\0",
                                           "0",  "output ", "input z: f32[2]\n"};
    int                      failures0 = harness_failures;
    for (uint64_t it = 0; it < iters && n && harness_failures < failures0 + 5; it++) {
        char   path[512];
        size_t len;
        snprintf(path, sizeof path, "tests/golden/print/%s", names[kiln_rng_below(&r, n)]);
        char *text = read_file(path, &len);
        if (!text)
            continue;
        size_t cap = len + 256;
        char  *m = malloc(cap);
        memcpy(m, text, len);
        size_t ml = len;
        for (int k = 1 + (int)kiln_rng_below(&r, 4); k > 0; k--) {
            size_t at = ml ? (size_t)kiln_rng_below(&r, ml) : 0;
            switch (kiln_rng_below(&r, 4)) {
            case 0: /* flip a byte */
                if (ml)
                    m[at] = (char)kiln_rng_below(&r, 256);
                break;
            case 1: /* delete a span */
                if (ml) {
                    size_t span = 1 + (size_t)kiln_rng_below(&r, 8);
                    if (at + span > ml)
                        span = ml - at;
                    memmove(m + at, m + at + span, ml - at - span);
                    ml -= span;
                }
                break;
            case 2: { /* insert a snippet */
                const char *s = snippets[kiln_rng_below(&r, KILN_COUNTOF(snippets))];
                size_t      sl = *s ? strlen(s) : 1;
                if (ml + sl <= cap) {
                    memmove(m + at + sl, m + at, ml - at);
                    memcpy(m + at, s, sl);
                    ml += sl;
                }
                break;
            }
            default: /* truncate */
                ml = at;
                break;
            }
        }
        parsed += check_roundtrip(m, ml, path, NULL) == 1;
        free(m);
        free(text);
    }
    printf("     %llu of %llu mutated inputs still parsed and round-tripped\n",
           (unsigned long long)parsed, (unsigned long long)iters);
    free_names(names, n);
}

/* ---- allocation failures ---- */

struct failing {
    long left; /* allocations before the first failure; < 0 = never fail */
};

static void *
failing_alloc(void *ud, void *p, size_t old_size, size_t new_size)
{
    struct failing *f = ud;
    (void)old_size;
    if (new_size == 0) {
        free(p);
        return NULL;
    }
    if (f->left == 0)
        return NULL;
    if (f->left > 0)
        f->left--;
    return realloc(p, new_size);
}

static void
test_alloc_failures(void)
{
    const char *text = "input x: f32[4, 8]\nweight w: f32[8]\n"
                       "y[i] += x[i, k] * w[k]  # comment\n"
                       "z[i] = select(y[i] > 0, y[i], 0.1 * y[i]) where i < 4\n"
                       "output z\n";
    bool        reached_ok = false;
    for (long n = 0; n < 4000 && !reached_ok; n++) {
        struct failing         f = {-1};
        struct kiln_ctx_params params = {failing_alloc, &f};
        kiln_ctx              *ctx = kiln_ctx_new(&params);
        if (!ctx)
            continue;
        f.left = n;
        struct kiln_graph *g = NULL;
        enum kiln_status   st = kiln_graph_parse(ctx, text, strlen(text), "f.kg", &g);
        if (st == KILN_OK) {
            const char *out;
            st = kiln_graph_print(ctx, g, 0, &out);
            reached_ok = st == KILN_OK;
        }
        if (st != KILN_OK && st != KILN_ERR_NOMEM)
            harness_fail(__FILE__, __LINE__, "failing allocation %ld: status %s: %s", n,
                         kiln_status_name(st), error_text(ctx));
        kiln_ctx_free(ctx);
    }
    CHECK(reached_ok);
}

/* ---- the op library ---- */

static void
test_library_calls(void)
{
    if (!lib_available()) {
        harness_fail(__FILE__, __LINE__, "the op library does not parse relu");
        return;
    }
    static const char *const texts[] = {
        ("input x: f32[1, 3, 8, 8]\nweight w: f32[4, 3, 3, 3]\n"
         "y = conv2d(x, w, stride=1, padding=1)\nz = relu(y)\noutput z\n"),
        "input x: f32[1, 4, 9, 9]\nweight w: f32[4, 1, 3, 3]\nweight b: f32[4]\n"
        "y = conv2d(x, w, b, stride=2, padding=[1, 0], dilation=1, groups=4)\n",
        "input x: f32[1, 4, 5, 5]\nweight w: f32[4, 2, 3, 3]\n"
        "y = conv2d_transpose(x, w, stride=2, padding=1, output_padding=1)\n",
        "input x: f32[2, 5]\ny = softmax(x, axis=1)\noutput y\n",
        "input x: f32[2, 5]\ny = log_softmax(x, axis=-1)\n",
        "input a: f32[4, 8]\ninput b: f32[8, 3]\nc = matmul(a, b)\nd[i, j] = c[i, j] * 2\n",
        "input a: f32[2, 4, 8]\ninput b: f32[2, 8, 3]\nc = batch_matmul(a, b)\n",
        "input x: f32[2, 8]\nweight w: f32[3, 8]\nweight b: f32[3]\ny = dense(x, w, b)\n",
        "input a: f32[3]\ninput b: f32[2, 3]\nc = add(a, b)\nd = sub(c, a)\ne = mul(d, b)\n"
        "f = div(e, b)\ng = maximum(f, a)\nh = minimum(g, a)\nk = pow(h, b)\n",
        "input x: f32[6]\na = neg(x)\nb = abs(a)\nc = exp(b)\nd = log(c)\ne = sqrt(d)\n"
        "f = rsqrt(e)\ng = square(f)\nh = tanh(g)\nk = sigmoid(h)\nl = erf(k)\nm = floor(l)\n",
        "input x: f32[6]\na = leaky_relu(x, alpha=0.2)\nb = gelu(a)\nc = silu(b)\n"
        "d = gelu(c, approximate=\"tanh\")\n",
        "input x: f32[1, 2, 8, 8]\na = max_pool2d(x, kernel=2, stride=2)\n"
        "b = avg_pool2d(x, kernel=[3, 3], stride=1, padding=1)\nc = global_avg_pool2d(x)\n"
        "d = global_max_pool2d(x)\ne = unfold(x, kernel=2, stride=2)\n",
        "input x: f32[2, 4, 3, 3]\nweight g: f32[4]\nweight b: f32[4]\nweight m: f32[4]\n"
        "weight v: f32[4]\ny = batch_norm(x, g, b, m, v, eps=1e-5)\n",
        "input x: f32[2, 6]\nweight g: f32[6]\nweight b: f32[6]\ny = layer_norm(x, g, b, "
        "axis=-1)\n",
        "input x: f32[2, 3, 4]\na = reshape(x, shape=[6, 4])\nb = flatten(x, axis=1)\n"
        "c = transpose(x, perm=[2, 0, 1])\nd = concat(x, x, axis=1)\n"
        "e = pad(x, pads=[0, 1, 1, 0, 1, 1], value=0.5)\n"
        "f = slice(x, starts=[1], ends=[3], axes=[1])\n",
        "input a: f32[2, 3]\ninput b: f32[3, 4]\nc = einsum(a, b, eq=\"ij,jk->ik\")\n",
    };
    for (size_t i = 0; i < KILN_COUNTOF(texts); i++) {
        enum kiln_status st;
        int              r = check_roundtrip(texts[i], strlen(texts[i]), texts[i], &st);
        if (r == 0) {
            enum kiln_status st2;
            harness_fail(__FILE__, __LINE__, "%s",
                         parse_error(texts[i], strlen(texts[i]), "lib.kg", &st2));
        }
    }
}

static const struct test tests[] = {
    {"matmul", test_matmul},
    {"order_independent", test_order_independent},
    {"print_forms", test_print_forms},
    {"reduction_order", test_reduction_order},
    {"golden_print", test_golden_print},
    {"error_files", test_error_files},
    {"error_generated", test_error_generated},
    {"roundtrip_random", test_roundtrip_random},
    {"mutations", test_mutations},
    {"alloc_failures", test_alloc_failures},
    {"library_calls", test_library_calls},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
