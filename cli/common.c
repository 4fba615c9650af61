/* cli/common.c -- helpers the subcommands share: reading and parsing a .kg file, running the
 * graph pipeline on an ONNX model (and parsing its options), reporting errors in the command's
 * format (`kiln: file:line:col: error: msg`), parsing numbers, human-readable FLOP/byte/count
 * formatting, JSON string quoting, rounding doubles to narrower float dtypes (round to nearest
 * even, as a cast in C would for f32) and creating directories. Only the public API of libkiln is
 * used here. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

kiln_ctx *
cli_ctx_new(void)
{
    kiln_ctx   *ctx = kiln_ctx_new(NULL);
    const char *tmp = getenv("TMPDIR");
    if (ctx && tmp && *tmp && kiln_ctx_set_tmp_dir(ctx, tmp) != KILN_OK) {
        kiln_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

int
cli_report(kiln_ctx *ctx)
{
    char                     msg[1024];
    const struct kiln_error *e = kiln_ctx_error(ctx);
    kiln_error_format(e, msg, sizeof msg);
    fprintf(stderr, "kiln: %s\n", msg);
    if (e && e->detail)
        fprintf(stderr, "%s\n", e->detail);
    return 1;
}

int
cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kiln %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'kiln help %s'.\n", cmd);
    return 2;
}

bool
cli_is_help(const char *a)
{
    return !strcmp(a, "-h") || !strcmp(a, "--help");
}

char *
cli_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char  *buf = malloc(cap);
    int    err = buf ? 0 : ENOMEM;
    while (buf) {
        errno = 0;
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) {
            err = ferror(f) ? (errno ? errno : EIO) : 0;
            break;
        }
        if (n + 1 == cap) {
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                err = ENOMEM;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (err) {
        free(buf);
        errno = err;
        return NULL;
    }
    if (buf) {
        buf[n] = 0;
        *len = n;
    }
    return buf;
}

bool
cli_is_onnx(const char *path)
{
    size_t n = strlen(path);
    return n >= 5 && !strcmp(path + n - 5, ".onnx");
}

enum kiln_status
cli_import(kiln_ctx *ctx, const char *text, size_t len, const char *path,
           const struct cli_passes *p, struct kiln_graph **g, const double *const **weights)
{
    if (!cli_is_onnx(path))
        return kiln_graph_parse(ctx, text, len, path, g);
    struct kiln_onnx_options o = {.shapes = p ? p->shapes : NULL, .nshapes = p ? p->nshapes : 0};
    return kiln_graph_import_onnx_opts(ctx, text, len, path, &o, g, weights);
}

struct kiln_graph *
cli_load_model(kiln_ctx *ctx, const char *path, const struct cli_passes *p,
               const double *const **weights)
{
    if (weights)
        *weights = NULL;
    size_t len = 0;
    char  *text = cli_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "kiln: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    struct kiln_graph *g = NULL;
    enum kiln_status   st = cli_import(ctx, text, len, path, p, &g, weights);
    if (st != KILN_OK) {
        cli_report(ctx);
        g = NULL;
    }
    free(text);
    return g;
}

int
cli_passes_arg(const char *cmd, int argc, char **argv, int *i, struct cli_passes *p)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--no-simplify")) {
        p->skip = (1u << KILN_GRAPH_PASS_COUNT) - 1;
        return 1;
    }
    for (int k = 0; k < KILN_GRAPH_PASS_COUNT; k++) {
        const char *name = kiln_graph_pass_name((enum kiln_graph_pass)k);
        if (!strncmp(a, "--no-", 5) && !strcmp(a + 5, name)) {
            p->skip |= 1u << k;
            return 1;
        }
    }
    if (!strcmp(a, "--input-shape")) {
        if (*i + 1 >= argc)
            return -cli_usage_error(cmd, "--input-shape needs NAME=SHAPE (e.g. input_ids=1x128)");
        const char *v = argv[++*i], *eq = strchr(v, '=');
        if (!eq || eq == v || !eq[1])
            return -cli_usage_error(cmd,
                                    "--input-shape '%s': expected NAME=SHAPE, e.g. "
                                    "input_ids=1x128 or batch=1",
                                    v);
        if (p->nshapes >= CLI_MAX_SHAPES)
            return -cli_usage_error(cmd, "at most %d --input-shape options", CLI_MAX_SHAPES);
        struct kiln_onnx_shape *s = &p->shapes[p->nshapes];
        int64_t                *ext = p->extents[p->nshapes];
        uint32_t                n = 0;
        for (const char *q = eq + 1;;) {
            char        num[24];
            const char *x = strchr(q, 'x');
            size_t      k = x ? (size_t)(x - q) : strlen(q);
            uint64_t    e;
            if (k == 0 || k >= sizeof num || n >= KILN_MAX_DIMS)
                return -cli_usage_error(cmd,
                                        "--input-shape '%s': a shape is 1 to %d extents "
                                        "joined by 'x'",
                                        v, KILN_MAX_DIMS);
            memcpy(num, q, k);
            num[k] = 0;
            if (!cli_parse_u64(num, &e) || e < 1 || e > ((uint64_t)1 << 40))
                return -cli_usage_error(cmd,
                                        "--input-shape '%s': extent '%s' is not an integer "
                                        "from 1 to 2^40",
                                        v, num);
            ext[n++] = (int64_t)e;
            if (!x)
                break;
            q = x + 1;
        }
        char *name = p->names[p->nshapes];
        if ((size_t)(eq - v) >= sizeof p->names[0])
            return -cli_usage_error(cmd, "--input-shape: the name is longer than %zu bytes",
                                    sizeof p->names[0] - 1);
        memcpy(name, v, (size_t)(eq - v));
        name[eq - v] = 0;
        *s = (struct kiln_onnx_shape){name, n, ext};
        p->nshapes++;
        return 1;
    }
    if (strcmp(a, "--dump-after"))
        return 0;
    if (*i + 1 >= argc)
        return -cli_usage_error(cmd, "--dump-after needs a pass name");
    const char *want = argv[++*i];
    for (int k = 0; k < KILN_GRAPH_PASS_COUNT; k++)
        if (!strcmp(want, kiln_graph_pass_name((enum kiln_graph_pass)k))) {
            p->dump_after = k;
            return 1;
        }
    char names[128] = "";
    for (int k = 0; k < KILN_GRAPH_PASS_COUNT; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
                 kiln_graph_pass_name((enum kiln_graph_pass)k));
    return -cli_usage_error(cmd, "--dump-after: unknown pass '%s' (passes: %s)", want, names);
}

struct dump {
    kiln_ctx   *ctx;
    const char *cmd;
    int         pass;
};

/* The dump hook of kiln_graph_optimize: the graph after the pass asked for, on stderr. */
static void
dump_graph(void *user, enum kiln_graph_pass pass, const struct kiln_graph *g)
{
    const struct dump *d = user;
    const char        *text;
    if ((int)pass != d->pass || kiln_graph_print(d->ctx, g, 0, &text) != KILN_OK)
        return;
    fprintf(stderr, "# kiln %s: graph after %s\n%s", d->cmd, kiln_graph_pass_name(pass), text);
}

bool
cli_optimize(kiln_ctx *ctx, const char *cmd, const char *path, const struct cli_passes *p,
             struct kiln_graph **g, const double *const **weights, bool report)
{
    if (!cli_is_onnx(path) || p->skip == (1u << KILN_GRAPH_PASS_COUNT) - 1)
        return true;
    struct dump                  d = {ctx, cmd, p->dump_after};
    struct kiln_optimize_options opt = {p->skip, p->dump_after >= 0 ? dump_graph : NULL, &d};
    struct kiln_optimize_report  rep;
    if (kiln_graph_optimize(ctx, *g, *weights, &opt, g, weights, &rep) != KILN_OK) {
        cli_report(ctx);
        return false;
    }
    if (report) {
        /* one line; a pass switched off counts nothing ("simplify: off", its numbers would
         * describe no graph) */
        const struct kiln_simplify_report *r = &rep.simplify;
        char                               b1[32], b2[32];
        uint32_t                           ncl = rep.channels_last, nt = rep.transposes_added;
        uint32_t                           nwino = rep.winograd;
        fprintf(stderr, "kiln %s: ", cmd);
        if (rep.ran[KILN_GRAPH_PASS_SIMPLIFY])
            fprintf(stderr,
                    "simplify: folded %u batch norm%s, %u bias add%s and %u constant%s (%u "
                    "statement%s), removed %u dead and %u identity statement%s; statements %u -> "
                    "%u (definitions %u -> %u), weights %s -> %s",
                    r->batch_norms_folded, r->batch_norms_folded == 1 ? "" : "s",
                    r->bias_adds_folded, r->bias_adds_folded == 1 ? "" : "s", r->constants_folded,
                    r->constants_folded == 1 ? "" : "s", r->calls_folded,
                    r->calls_folded == 1 ? "" : "s", r->dead_removed, r->identities_removed,
                    r->dead_removed + r->identities_removed == 1 ? "" : "s", r->calls_before,
                    r->calls_after, r->ops_before, r->ops_after,
                    cli_bytes(b1, sizeof b1, r->weight_bytes_before),
                    cli_bytes(b2, sizeof b2, r->weight_bytes_after));
        else
            fputs("simplify: off", stderr);
        fprintf(stderr,
                "; channels-last: %u statement%s, %u transpose%s added; winograd: %u "
                "convolution%s\n",
                ncl, ncl == 1 ? "" : "s", nt, nt == 1 ? "" : "s", nwino, nwino == 1 ? "" : "s");
    }
    return true;
}

bool
cli_parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

const char *
cli_shape(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && len < size; i++)
        len +=
            (size_t)snprintf(buf + len, size - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
    return buf;
}

/* v scaled by the largest power of base not above it, with one decimal. */
static const char *
scaled(char *buf, size_t size, double v, double base, const char *const *unit, int nunit)
{
    int u = 0;
    while (u + 1 < nunit && fabs(v) >= base) {
        v /= base;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%.0f %s", v, unit[0]);
    else
        snprintf(buf, size, "%.1f %s", v, unit[u]);
    return buf;
}

const char *
cli_flops(char *buf, size_t size, double flops)
{
    static const char *const unit[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
    return scaled(buf, size, flops, 1000, unit, 6);
}

const char *
cli_bytes(char *buf, size_t size, double bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    return scaled(buf, size, bytes, 1024, unit, 6);
}

const char *
cli_count(char *buf, size_t size, double n)
{
    char   digits[64];
    size_t nd = (size_t)snprintf(digits, sizeof digits, "%.0f", n), len = 0;
    for (size_t i = 0; i < nd && len + 2 < size; i++) {
        if (i && digits[i - 1] != '-' && (nd - i) % 3 == 0)
            buf[len++] = ',';
        buf[len++] = digits[i];
    }
    buf[len] = 0;
    return buf;
}

void
cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

bool
cli_mkdirs(const char *path)
{
    return cli_mkdirs_mode(path, 0777);
}

bool
cli_mkdirs_mode(const char *path, unsigned mode)
{
    size_t n = strlen(path);
    char  *p = malloc(n + 1);
    if (!p) {
        errno = ENOMEM;
        return false;
    }
    memcpy(p, path, n + 1);
    bool ok = true;
    for (size_t i = 1; i <= n && ok; i++) {
        if (p[i] != '/' && p[i] != 0)
            continue;
        char c = p[i];
        p[i] = 0;
        struct stat st;
        if (mkdir(p, (mode_t)mode) != 0
            && !(errno == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode))) {
            if (errno == EEXIST)
                errno = ENOTDIR;
            ok = false;
        }
        p[i] = c;
    }
    free(p);
    return ok;
}
