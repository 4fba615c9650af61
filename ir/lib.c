/* ir/lib.c -- the op library's entry point and the helpers every builder shares.
 *
 * The library is one X-macro table (ir/lib.def): name and input count of each op, with a
 * builder kiln_lib_NAME in one of ir/lib_*.c (linear algebra, elementwise, nn, data movement).
 * kiln_lib_call checks what is generic (the op exists, the input count, no attribute given
 * twice) and hands the call to the builder, which then (1) names its allowed attributes
 * (lib_allow), (2) reads and validates them, (3) checks shapes and dtypes, and only then
 * (4) opens the statement (lib_begin) and appends compute definitions. Validation comes first so
 * a rejected call leaves no statement behind and reports the first problem a reader would see.
 *
 * Builders emit plain compute definitions: loads indexed by affine index expressions, with
 * every load that may fall outside its tensor (padding, concat, pad) inside a select on its
 * bounds condition; reductions drop extent-1 variables (lib_rvar) so a 1x1 kernel has no kernel
 * loops. The attributes recorded on the statement are exactly those given (the printer writes
 * them back); defaults live in the builders and in ir/README.md. Display names of variables
 * avoid the names of the graph's tensors, so `y[n, k, h, w] += x[...] * w[...]` never reads
 * ambiguously (a variable that would be called w becomes w2). */
#include "lib_impl.h"

#include <stdio.h>
#include <string.h>

struct entry {
    const char *name;
    uint32_t    lo, hi;
    enum kiln_status (*build)(struct libcall *c);
};

static const struct entry table[] = {
#define KILN_LIB(name, lo, hi) {#name, lo, hi, kiln_lib_##name},
#include "lib.def"
#undef KILN_LIB
};

bool
kiln_lib_exists(const char *op)
{
    for (size_t i = 0; i < KILN_COUNTOF(table); i++)
        if (!strcmp(table[i].name, op))
            return true;
    return false;
}

uint32_t
kiln_lib_count(void)
{
    return (uint32_t)KILN_COUNTOF(table);
}

const char *
kiln_lib_name(uint32_t i)
{
    return i < KILN_COUNTOF(table) ? table[i].name : NULL;
}

/* ---- errors ---- */

static enum kiln_status failv(struct libcall *c, uint32_t line, uint32_t col, const char *fmt,
                              va_list ap) KILN_PRINTF(4, 0);

static enum kiln_status
failv(struct libcall *c, uint32_t line, uint32_t col, const char *fmt, va_list ap)
{
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    enum kiln_status st = KILN_FAIL(c->ctx, KILN_ERR_INVALID, "lib", "%s: %s", c->op, msg);
    if (line)
        kiln_error_set_loc(c->ctx, c->g->file, line, col);
    return st;
}

enum kiln_status
lib_fail(struct libcall *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum kiln_status st = failv(c, c->line, c->col, fmt, ap);
    va_end(ap);
    return st;
}

enum kiln_status
lib_fail_attr(struct libcall *c, const struct kiln_attr *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    uint32_t         line = a && a->line ? a->line : c->line;
    uint32_t         col = a && a->line ? a->col : c->col;
    enum kiln_status st = failv(c, line, col, fmt, ap);
    va_end(ap);
    return st;
}

static uint64_t
magnitude(int64_t v)
{
    return v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
}

enum kiln_status
lib_fail_overflow(struct libcall *c, const char *const *names)
{
    const struct kiln_attr *worst = NULL;
    const char             *wname = NULL;
    int64_t                 wv = 0;
    for (; *names; names++) {
        const struct kiln_attr *a = lib_attr(c, *names);
        if (!a || (a->kind != KILN_ATTR_INT && a->kind != KILN_ATTR_INTS))
            continue;
        uint32_t       n = a->kind == KILN_ATTR_INT ? 1 : a->n;
        const int64_t *v = a->kind == KILN_ATTR_INT ? &a->i : a->ints;
        for (uint32_t i = 0; i < n; i++)
            if (!worst || magnitude(v[i]) > magnitude(wv)) {
                worst = a;
                wname = *names;
                wv = v[i];
            }
    }
    if (!worst)
        return lib_fail(c, "the output shape overflows 64-bit integers");
    return lib_fail_attr(c, worst, "%s %lld overflows the output shape", wname, (long long)wv);
}

/* ---- the entry point ---- */

static enum kiln_status
check_count(struct libcall *c, const struct entry *e)
{
    if (c->nin >= e->lo && c->nin <= e->hi)
        return KILN_OK;
    const char *s = e->lo == 1 ? "" : "s";
    if (e->hi == KILN_LIB_ANY)
        return lib_fail(c, "expects at least %u input%s, got %u", e->lo, s, c->nin);
    if (e->lo == e->hi)
        return lib_fail(c, "expects %u input%s, got %u", e->lo, s, c->nin);
    if (e->hi == e->lo + 1)
        return lib_fail(c, "expects %u or %u inputs, got %u", e->lo, e->hi, c->nin);
    return lib_fail(c, "expects %u to %u inputs, got %u", e->lo, e->hi, c->nin);
}

enum kiln_status
kiln_lib_call(struct kiln_graph *g, const char *op, const char *out_name, uint32_t nin,
              const uint32_t *in, uint32_t nattr, const struct kiln_attr *attr, uint32_t line,
              uint32_t col, uint32_t *out)
{
    kiln_ctx *ctx = g->ctx;
    *out = KILN_NONE;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct libcall      c = {.g = g,
                             .ctx = ctx,
                             .op = op,
                             .out_name = out_name,
                             .nin = nin,
                             .in = in,
                             .nattr = nattr,
                             .attr = attr,
                             .line = line,
                             .col = col,
                             .out = KILN_NONE};
    const struct entry *e = NULL;
    for (size_t i = 0; i < KILN_COUNTOF(table) && !e; i++)
        if (!strcmp(table[i].name, op))
            e = &table[i];
    if (!e) {
        enum kiln_status st = KILN_FAIL(ctx, KILN_ERR_INVALID, "lib", "unknown op '%s'", op);
        if (line)
            kiln_error_set_loc(ctx, g->file, line, col);
        return st;
    }
    for (uint32_t i = 0; i < nin; i++)
        KILN_ENSURE(ctx, in[i] < g->ntensor);
    KILN_TRY(check_count(&c, e));
    for (uint32_t i = 0; i < nattr; i++)
        for (uint32_t j = 0; j < i; j++)
            if (attr[i].name == attr[j].name)
                return lib_fail_attr(&c, &attr[i], "attribute %s is given twice",
                                     kiln_sym_str(ctx, attr[i].name));
    KILN_TRY(e->build(&c));
    KILN_ENSURE(ctx, c.out != KILN_NONE);
    KILN_TRY(kiln_graph_end_call(g, c.out));
    *out = c.out;
    return KILN_OK;
}

/* ---- inputs, shapes, dtypes ---- */

const struct kiln_tensor *
lib_in(const struct libcall *c, uint32_t i)
{
    return &c->g->tensor[c->in[i]];
}

const char *
lib_in_name(const struct libcall *c, uint32_t i)
{
    return kiln_graph_tensor_name(c->g, c->in[i]);
}

char *
lib_shape_str(const int64_t *shape, uint32_t n, char *buf, size_t size)
{
    size_t len = 0;
    len += (size_t)snprintf(buf, size, "[");
    for (uint32_t i = 0; i < n && len < size; i++)
        len +=
            (size_t)snprintf(buf + len, size - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
    return buf;
}

enum kiln_status
lib_want_rank(struct libcall *c, uint32_t i, uint32_t rank, const char *role, const char *layout)
{
    const struct kiln_tensor *t = lib_in(c, i);
    if (t->ndim == rank)
        return KILN_OK;
    char s[LIB_SHAPE_BUF];
    return lib_fail(c, "%s %s must be %u-D %s, got %s", role, lib_in_name(c, i), rank, layout,
                    lib_shape_str(t->shape, t->ndim, s, sizeof s));
}

enum kiln_status
lib_same_dtype(struct libcall *c)
{
    enum kiln_dtype dt = (enum kiln_dtype)lib_in(c, 0)->dtype;
    for (uint32_t i = 1; i < c->nin; i++) {
        enum kiln_dtype di = (enum kiln_dtype)lib_in(c, i)->dtype;
        if (di != dt)
            return lib_fail(c, "dtypes of %s (%s) and %s (%s) differ", lib_in_name(c, 0),
                            kiln_dtype_name(dt), lib_in_name(c, i), kiln_dtype_name(di));
    }
    return KILN_OK;
}

enum kiln_status
lib_want_float(struct libcall *c, uint32_t i)
{
    enum kiln_dtype dt = (enum kiln_dtype)lib_in(c, i)->dtype;
    if (kiln_dtype_is_float(dt))
        return KILN_OK;
    return lib_fail(c, "input %s has dtype %s; a float dtype is required", lib_in_name(c, i),
                    kiln_dtype_name(dt));
}

enum kiln_status
lib_want_numeric(struct libcall *c, uint32_t i)
{
    enum kiln_dtype dt = (enum kiln_dtype)lib_in(c, i)->dtype;
    if (dt != KILN_DTYPE_BOOL)
        return KILN_OK;
    return lib_fail(c, "input %s has dtype %s; a numeric dtype is required", lib_in_name(c, i),
                    kiln_dtype_name(dt));
}

enum kiln_status
lib_axis(struct libcall *c, const char *attr, int64_t axis, uint32_t rank, bool allow_end,
         uint32_t *out)
{
    int64_t hi = (int64_t)rank + (allow_end ? 1 : 0);
    int64_t a = axis < 0 ? axis + (int64_t)rank : axis;
    if (a < 0 || a >= hi)
        return lib_fail_attr(c, lib_attr(c, attr),
                             "axis %lld is out of range for input %s of rank %u", (long long)axis,
                             lib_in_name(c, 0), rank);
    *out = (uint32_t)a;
    return KILN_OK;
}

/* ---- attributes ---- */

const struct kiln_attr *
lib_attr(const struct libcall *c, const char *name)
{
    for (uint32_t i = 0; i < c->nattr; i++)
        if (!strcmp(kiln_sym_str(c->ctx, c->attr[i].name), name))
            return &c->attr[i];
    return NULL;
}

enum kiln_status
lib_allow(struct libcall *c, const char *const *allowed)
{
    for (uint32_t i = 0; i < c->nattr; i++) {
        const char *name = kiln_sym_str(c->ctx, c->attr[i].name);
        bool        ok = false;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = !strcmp(*a, name);
        if (!ok)
            return lib_fail_attr(c, &c->attr[i], "unknown attribute '%s'", name);
    }
    return KILN_OK;
}

enum kiln_status
lib_get_int(struct libcall *c, const char *name, int64_t dflt, int64_t *out)
{
    const struct kiln_attr *a = lib_attr(c, name);
    *out = dflt;
    if (!a)
        return KILN_OK;
    if (a->kind != KILN_ATTR_INT)
        return lib_fail_attr(c, a, "attribute %s must be an integer", name);
    *out = a->i;
    return KILN_OK;
}

enum kiln_status
lib_get_bool(struct libcall *c, const char *name, bool dflt, bool *out)
{
    const struct kiln_attr *a = lib_attr(c, name);
    *out = dflt;
    if (!a)
        return KILN_OK;
    if (a->kind != KILN_ATTR_INT || (a->i != 0 && a->i != 1))
        return lib_fail_attr(c, a, "attribute %s must be 0 or 1", name);
    *out = a->i != 0;
    return KILN_OK;
}

enum kiln_status
lib_get_float(struct libcall *c, const char *name, double dflt, double *out)
{
    const struct kiln_attr *a = lib_attr(c, name);
    *out = dflt;
    if (!a)
        return KILN_OK;
    if (a->kind == KILN_ATTR_FLOAT)
        *out = a->f;
    else if (a->kind == KILN_ATTR_INT)
        *out = (double)a->i;
    else
        return lib_fail_attr(c, a, "attribute %s must be a number", name);
    return KILN_OK;
}

enum kiln_status
lib_get_string(struct libcall *c, const char *name, const char *dflt, const char **out)
{
    const struct kiln_attr *a = lib_attr(c, name);
    *out = dflt;
    if (!a)
        return KILN_OK;
    if (a->kind != KILN_ATTR_STRING || !a->s)
        return lib_fail_attr(c, a, "attribute %s must be a string", name);
    *out = a->s;
    return KILN_OK;
}

enum kiln_status
lib_get_pair(struct libcall *c, const char *name, int64_t dflt, int64_t out[2])
{
    const struct kiln_attr *a = lib_attr(c, name);
    out[0] = out[1] = dflt;
    if (!a)
        return KILN_OK;
    if (a->kind == KILN_ATTR_INT) {
        out[0] = out[1] = a->i;
    } else if (a->kind == KILN_ATTR_INTS && a->n == 2) {
        out[0] = a->ints[0];
        out[1] = a->ints[1];
    } else {
        return lib_fail_attr(c, a, "attribute %s must be an integer or a list of 2 integers", name);
    }
    return KILN_OK;
}

enum kiln_status
lib_get_pad(struct libcall *c, const char *name, bool allow4, int64_t out[4])
{
    const struct kiln_attr *a = lib_attr(c, name);
    out[0] = out[1] = out[2] = out[3] = 0;
    if (!a)
        return KILN_OK;
    if (a->kind == KILN_ATTR_INT) {
        out[0] = out[1] = out[2] = out[3] = a->i;
    } else if (a->kind == KILN_ATTR_INTS && a->n == 2) {
        out[0] = out[2] = a->ints[0];
        out[1] = out[3] = a->ints[1];
    } else if (a->kind == KILN_ATTR_INTS && a->n == 4 && allow4) {
        for (int i = 0; i < 4; i++)
            out[i] = a->ints[i];
    } else if (allow4) {
        return lib_fail_attr(c, a, "attribute %s must be an integer or a list of 2 or 4 integers",
                             name);
    } else {
        return lib_fail_attr(c, a, "attribute %s must be an integer or a list of 2 integers", name);
    }
    return KILN_OK;
}

enum kiln_status
lib_get_list(struct libcall *c, const char *name, const int64_t **v, uint32_t *n, bool *given)
{
    const struct kiln_attr *a = lib_attr(c, name);
    *v = NULL;
    *n = 0;
    *given = a != NULL;
    if (!a)
        return KILN_OK;
    if (a->kind == KILN_ATTR_INT) {
        *v = &a->i;
        *n = 1;
    } else if (a->kind == KILN_ATTR_INTS) {
        *v = a->ints;
        *n = a->n;
    } else {
        return lib_fail_attr(c, a, "attribute %s must be a list of integers", name);
    }
    return KILN_OK;
}

enum kiln_status
lib_check_min(struct libcall *c, const char *name, const int64_t *v, uint32_t n, int64_t min)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] < min)
            return lib_fail_attr(c, lib_attr(c, name), "%s %lld must %s", name, (long long)v[i],
                                 min == 1 ? "be positive" : "not be negative");
    return KILN_OK;
}

/* ---- convolution windows ---- */

/* Index into an input dimension of extent `in`, for output axis o (extent `out`) and kernel
 * variable r (extent `k`): o*stride - pad + r*dil, and the bounds it needs. */
kiln_expr
lib_window_idx(struct libcall *c, kiln_expr *cond, kiln_expr o, kiln_expr r, int64_t in,
               int64_t out, int64_t k, int64_t stride, int64_t dil, int64_t pad_lo)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr e =
        kiln_add(ctx, kiln_mul(ctx, o, lib_idx(c, stride)), kiln_mul(ctx, r, lib_idx(c, dil)));
    e = kiln_sub(ctx, e, lib_idx(c, pad_lo));
    int64_t hi = (out - 1) * stride - pad_lo + (k - 1) * dil;
    *cond = lib_bound(c, *cond, e, pad_lo > 0, hi > in - 1, in);
    return e;
}

/* Reads the stride/padding/dilation attributes shared by conv2d, conv2d_transpose and unfold.
 * padding may also be "same" or "valid" when kernel (KH, KW) is given (conv2d). */
enum kiln_status
lib_get_window(struct libcall *c, struct lib_window *wd, bool allow_same)
{
    const struct kiln_attr *pa = lib_attr(c, "padding");
    wd->same = false;
    KILN_TRY(lib_get_pair(c, "stride", 1, wd->stride));
    KILN_TRY(lib_check_min(c, "stride", wd->stride, 2, 1));
    KILN_TRY(lib_get_pair(c, "dilation", 1, wd->dil));
    KILN_TRY(lib_check_min(c, "dilation", wd->dil, 2, 1));
    if (allow_same && pa && pa->kind == KILN_ATTR_STRING) {
        memset(wd->pad, 0, sizeof wd->pad);
        if (!strcmp(pa->s, "valid"))
            return KILN_OK;
        if (strcmp(pa->s, "same"))
            return lib_fail_attr(c, pa, "padding must be \"same\" or \"valid\", got \"%s\"", pa->s);
        if (wd->stride[0] != 1 || wd->stride[1] != 1)
            return lib_fail_attr(c, pa, "padding \"same\" needs stride 1");
        wd->same = true;
        return KILN_OK;
    }
    if (allow_same && pa && pa->kind != KILN_ATTR_INT && pa->kind != KILN_ATTR_INTS)
        return lib_fail_attr(c, pa,
                             "attribute padding must be an integer, a list of 2 or 4 integers, "
                             "\"same\" or \"valid\"");
    KILN_TRY(lib_get_pad(c, "padding", true, wd->pad));
    return lib_check_min(c, "padding", wd->pad, 4, 0);
}

enum kiln_status
lib_get_layout(struct libcall *c, struct lib_layout *l)
{
    const char *s;
    KILN_TRY(lib_get_string(c, "layout", "nchw", &s));
    bool nhwc = !strcmp(s, "nhwc");
    if (!nhwc && strcmp(s, "nchw"))
        return lib_fail_attr(c, lib_attr(c, "layout"),
                             "layout must be \"nchw\" or \"nhwc\", got \"%s\"", s);
    *l = nhwc ? (struct lib_layout){0, 3, 1, 2, true} : (struct lib_layout){0, 1, 2, 3, false};
    return lib_want_rank(c, 0, 4, "input", nhwc ? "[N, H, W, C]" : "[N, C, H, W]");
}

const char *const lib_window_attrs[] = {"padding", "stride", "dilation", "kernel", NULL};

enum kiln_status
lib_window_same(struct libcall *c, struct lib_window *wd, int64_t kh, int64_t kw)
{
    if (!wd->same)
        return KILN_OK;
    int64_t k[2] = {kh, kw};
    bool    ovf = false;
    for (int d = 0; d < 2; d++) {
        int64_t total = lib_ck_mul(&ovf, wd->dil[d], k[d] - 1); /* PyTorch: odd one at the end */
        wd->pad[d] = total / 2;
        wd->pad[d + 2] = total - total / 2;
    }
    return ovf ? lib_fail_overflow(c, lib_window_attrs) : KILN_OK;
}

/* ---- building ---- */

enum kiln_status
lib_begin(struct libcall *c)
{
    return kiln_graph_begin_call(c->g, c->op, c->nin, c->in, c->nattr, c->attr, c->line, c->col);
}

uint32_t
lib_tensor(struct libcall *c, const char *suffix, enum kiln_dtype dt, uint32_t ndim,
           const int64_t *shape)
{
    const char *name =
        suffix ? kiln_arena_printf(c->ctx, "%s.%s", c->out_name, suffix) : c->out_name;
    if (!name)
        return KILN_NONE;
    uint32_t t = kiln_graph_add_tensor(c->g, name, dt, ndim, shape, KILN_TENSOR_OP);
    if (t != KILN_NONE && !suffix)
        c->out = t;
    return t;
}

kiln_expr
lib_rvar(struct libcall *c, struct lib_red *r, int64_t ext, const char *name)
{
    if (ext == 1)
        return kiln_idx(c->ctx, 0);
    if (r->n == KILN_MAX_REDUCE) {
        lib_fail(c, "more than %d reduction variables", KILN_MAX_REDUCE);
        return (kiln_expr){0};
    }
    r->ext[r->n] = ext;
    r->name[r->n] = name;
    return kiln_rvar(c->ctx, r->n++);
}

/* A display name: `want`, or want2, want3, ... when that names a tensor of the graph or a
 * variable named earlier in the same definition. */
static uint32_t
unique_sym(struct libcall *c, const char *want, const uint32_t *taken, uint32_t ntaken)
{
    char buf[64];
    for (int k = 1; k < 1000; k++) {
        if (k == 1)
            snprintf(buf, sizeof buf, "%s", want);
        else
            snprintf(buf, sizeof buf, "%s%d", want, k);
        if (kiln_graph_find(c->g, buf) != KILN_NONE)
            continue;
        uint32_t s = kiln_sym_cstr(c->ctx, buf);
        bool     dup = false;
        for (uint32_t i = 0; i < ntaken && !dup; i++)
            dup = taken[i] == s;
        if (!dup)
            return s;
    }
    return 0;
}

void
lib_generic_names(uint32_t n, const char **out, const char *avoid)
{
    static const char *const pool[] = {"i", "j", "k", "l", "m", "p", "q", "s",
                                       "t", "u", "v", "a", "b", "d", "e", "f"};
    uint32_t                 k = 0;
    for (size_t i = 0; i < KILN_COUNTOF(pool) && k < n; i++)
        if (!avoid || !strchr(avoid, pool[i][0]))
            out[k++] = pool[i];
    while (k < n)
        out[k++] = "i";
}

enum kiln_status
lib_define(struct libcall *c, uint32_t t, enum kiln_reduce reduce, const struct lib_red *r,
           kiln_expr body, const char *const *axname)
{
    kiln_ctx *ctx = c->ctx;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    KILN_ENSURE(ctx, t < c->g->ntensor);
    uint32_t    ndim = c->g->tensor[t].ndim;
    uint32_t    nred = r ? r->n : 0;
    uint32_t    taken[KILN_MAX_DIMS + KILN_MAX_REDUCE], ntaken = 0;
    uint32_t    ax[KILN_MAX_DIMS] = {0}, rn[KILN_MAX_REDUCE] = {0};
    const char *gen[KILN_MAX_DIMS];
    char        avoid[KILN_MAX_REDUCE + 1] = {0};
    for (uint32_t i = 0; i < nred; i++)
        avoid[i] = r->name[i][1] ? ' ' : r->name[i][0];
    lib_generic_names(ndim, gen, avoid);
    for (uint32_t i = 0; i < nred; i++) {
        rn[i] = unique_sym(c, r->name[i], taken, ntaken);
        taken[ntaken++] = rn[i];
    }
    for (uint32_t i = 0; i < ndim; i++) {
        ax[i] = unique_sym(c, axname && axname[i] ? axname[i] : gen[i], taken, ntaken);
        taken[ntaken++] = ax[i];
    }
    if (!kiln_ok(ctx))
        return ctx->err.status;
    return kiln_graph_add_op(c->g, t, nred ? reduce : KILN_REDUCE_NONE, nred, r ? r->ext : NULL,
                             body, ax, rn);
}

kiln_expr
lib_load_t(struct libcall *c, uint32_t t, const kiln_expr *idx)
{
    const struct kiln_tensor *tt = &c->g->tensor[t];
    return kiln_load(c->ctx, t, (enum kiln_dtype)tt->dtype, tt->ndim, idx);
}

kiln_expr
lib_load(struct libcall *c, uint32_t i, const kiln_expr *idx)
{
    return lib_load_t(c, c->in[i], idx);
}

kiln_expr
lib_and(struct libcall *c, kiln_expr cond, kiln_expr term)
{
    int64_t v;
    if (kiln_expr_is_int(c->ctx, cond, &v) && v)
        return term;
    return kiln_and(c->ctx, cond, term);
}

kiln_expr
lib_bound(struct libcall *c, kiln_expr cond, kiln_expr e, bool need_lo, bool need_hi, int64_t hi)
{
    kiln_ctx *ctx = c->ctx;
    if (need_lo)
        cond = lib_and(c, cond, kiln_le(ctx, kiln_idx(ctx, 0), e));
    if (need_hi)
        cond = lib_and(c, cond, kiln_lt(ctx, e, kiln_idx(ctx, hi)));
    return cond;
}

void
lib_axes(struct libcall *c, uint32_t n, kiln_expr *ax)
{
    for (uint32_t i = 0; i < n; i++)
        ax[i] = kiln_axis(c->ctx, i);
}

void
lib_bcast_idx(struct libcall *c, const int64_t *ishape, uint32_t in, const int64_t *oshape,
              uint32_t on, const kiln_expr *ax, kiln_expr *idx)
{
    uint32_t off = on - in;
    for (uint32_t d = 0; d < in; d++)
        idx[d] = ishape[d] == 1 && oshape[d + off] != 1 ? kiln_idx(c->ctx, 0) : ax[d + off];
}

bool
lib_bcast_shape(const int64_t *a, uint32_t na, const int64_t *b, uint32_t nb, int64_t *out,
                uint32_t *nout)
{
    uint32_t n = na > nb ? na : nb;
    for (uint32_t i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1)
            return false;
        out[i] = da == 1 ? db : da;
    }
    *nout = n;
    return true;
}
