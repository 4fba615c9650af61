/* ir/lib_index.c -- indexing, comparison, logic and cast library ops: gather, gather_elements,
 * where, equal ... greater_equal, logical_and/or/xor/not, cast, expand, tile and trilu.
 *
 * Each op is one elementwise compute definition over the output's axes. The indexing ops read
 * their data at an index that comes from another tensor; kiln never reads out of bounds, so such
 * an index is made provably in range for the static bounds check: a negative index counts from
 * the end (ONNX, NumPy), and the result is clamped to [0, n-1], so an index outside [-n, n)
 * reads the first or last element instead of failing (ONNX leaves it undefined). The binary ops
 * (where, comparisons, logic) broadcast like NumPy: right-aligned, extent 1 stretches. cast
 * follows ir/scalar.h: float -> integer truncates toward zero and saturates, NaN gives 0,
 * anything -> bool is x != 0. A rank-0 input is read with the single index 0. */
#include "lib_impl.h"

#include <string.h>

static const char *const no_attrs[] = {NULL};

/* Load of input i at idx; a rank-0 input is read at the one index 0. */
static kiln_expr
load(struct libcall *c, uint32_t i, const kiln_expr *idx)
{
    if (lib_in(c, i)->ndim == 0) {
        kiln_expr zero = lib_idx(c, 0);
        return kiln_load(c->ctx, c->in[i], (enum kiln_dtype)lib_in(c, i)->dtype, 1, &zero);
    }
    return lib_load(c, i, idx);
}

/* Output tensor of the call (dtype dt, shape) defined elementwise by body(ax). */
typedef kiln_expr (*body_fn)(struct libcall *c, const kiln_expr *ax, const void *ud);

static enum kiln_status
define(struct libcall *c, enum kiln_dtype dt, uint32_t n, const int64_t *shape, body_fn body,
       const void *ud)
{
    KILN_TRY(lib_begin(c));
    uint32_t t = lib_tensor(c, NULL, dt, n, shape);
    if (t == KILN_NONE)
        return c->ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS];
    lib_axes(c, n, ax);
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body(c, ax, ud), NULL);
}

/* Input 0 read at idx, with idx[axis] replaced by v, an index read from a tensor (any integer
 * dtype) into a dimension of extent n: a negative v counts from the end, and the result is
 * clamped to [0, n-1]. Written
 *     select(0 <= v && v < n, x[v], select(-n <= v && v < 0, x[v + n], x[select(v < 0, 0, n-1)]))
 * (one load runs: select is lazy) so that the bounds check proves every load in range from
 * what the conditions say about v, whatever v's dtype (an i64 load has no interval of its
 * own). */
static kiln_expr
load_at(struct libcall *c, kiln_expr *idx, uint32_t axis, kiln_expr v, int64_t n)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr i = kiln_cast(ctx, KILN_DTYPE_I64, v), zero = lib_idx(c, 0);
    kiln_expr in_pos = kiln_and(ctx, kiln_le(ctx, zero, i), kiln_lt(ctx, i, lib_idx(c, n)));
    kiln_expr in_neg = kiln_and(ctx, kiln_le(ctx, lib_idx(c, -n), i), kiln_lt(ctx, i, zero));
    idx[axis] = i;
    kiln_expr pos = lib_load(c, 0, idx);
    idx[axis] = kiln_add(ctx, i, lib_idx(c, n));
    kiln_expr neg = lib_load(c, 0, idx);
    idx[axis] = kiln_select(ctx, kiln_lt(ctx, i, zero), zero, lib_idx(c, n - 1));
    kiln_expr out = lib_load(c, 0, idx);
    return kiln_select(ctx, in_pos, pos, kiln_select(ctx, in_neg, neg, out));
}

/* Fails unless input i has an integer dtype. */
static enum kiln_status
want_int(struct libcall *c, uint32_t i)
{
    enum kiln_dtype dt = (enum kiln_dtype)lib_in(c, i)->dtype;
    if (kiln_dtype_is_int(dt))
        return KILN_OK;
    return lib_fail(c, "indices %s have dtype %s; an integer dtype (i8, i32, i64) is required",
                    lib_in_name(c, i), kiln_dtype_name(dt));
}

/* ---- gather, gather_elements ---- */

struct gather {
    uint32_t axis, r, q; /* data rank r, indices rank q */
};

static kiln_expr
gather_body(struct libcall *c, const kiln_expr *ax, const void *ud)
{
    const struct gather *g = ud;
    kiln_expr            idx[KILN_MAX_DIMS];
    for (uint32_t d = 0; d < g->axis; d++)
        idx[d] = ax[d];
    for (uint32_t d = g->axis + 1; d < g->r; d++)
        idx[d] = ax[d - 1 + g->q];
    kiln_expr v = load(c, 1, ax + g->axis);
    return load_at(c, idx, g->axis, v, lib_in(c, 0)->shape[g->axis]);
}

enum kiln_status
kiln_lib_gather(struct libcall *c)
{
    static const char *const attrs[] = {"axis", NULL};
    int64_t                  axis_attr;
    struct gather            g;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "axis", 0, &axis_attr));
    const struct kiln_tensor *x = lib_in(c, 0), *ix = lib_in(c, 1);
    if (x->ndim == 0)
        return lib_fail(c, "input %s is a scalar; it needs at least 1 dimension",
                        lib_in_name(c, 0));
    KILN_TRY(lib_axis(c, "axis", axis_attr, x->ndim, false, &g.axis));
    KILN_TRY(want_int(c, 1));
    g.r = x->ndim;
    g.q = ix->ndim;
    uint32_t n = g.r - 1 + g.q;
    if (n > KILN_MAX_DIMS)
        return lib_fail(c, "the output would have %u dimensions; at most %d", n, KILN_MAX_DIMS);
    int64_t shape[KILN_MAX_DIMS];
    for (uint32_t d = 0; d < n; d++)
        shape[d] = d < g.axis         ? x->shape[d]
                   : d < g.axis + g.q ? ix->shape[d - g.axis]
                                      : x->shape[d + 1 - g.q];
    return define(c, (enum kiln_dtype)x->dtype, n, shape, gather_body, &g);
}

static kiln_expr
gather_elements_body(struct libcall *c, const kiln_expr *ax, const void *ud)
{
    const uint32_t *axis = ud;
    kiln_expr       idx[KILN_MAX_DIMS];
    memcpy(idx, ax, sizeof(kiln_expr) * lib_in(c, 0)->ndim);
    return load_at(c, idx, *axis, lib_load(c, 1, ax), lib_in(c, 0)->shape[*axis]);
}

enum kiln_status
kiln_lib_gather_elements(struct libcall *c)
{
    static const char *const attrs[] = {"axis", NULL};
    int64_t                  axis_attr;
    uint32_t                 axis;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_int(c, "axis", 0, &axis_attr));
    const struct kiln_tensor *x = lib_in(c, 0), *ix = lib_in(c, 1);
    if (x->ndim == 0)
        return lib_fail(c, "input %s is a scalar; it needs at least 1 dimension",
                        lib_in_name(c, 0));
    KILN_TRY(lib_axis(c, "axis", axis_attr, x->ndim, false, &axis));
    KILN_TRY(want_int(c, 1));
    char sx[LIB_SHAPE_BUF], si[LIB_SHAPE_BUF];
    lib_shape_str(x->shape, x->ndim, sx, sizeof sx);
    lib_shape_str(ix->shape, ix->ndim, si, sizeof si);
    if (ix->ndim != x->ndim)
        return lib_fail(c, "indices %s %s must have the rank of input %s %s", lib_in_name(c, 1), si,
                        lib_in_name(c, 0), sx);
    for (uint32_t d = 0; d < x->ndim; d++)
        if (d != axis && ix->shape[d] > x->shape[d])
            return lib_fail(c, "indices %s %s exceed input %s %s in dimension %u",
                            lib_in_name(c, 1), si, lib_in_name(c, 0), sx, d);
    return define(c, (enum kiln_dtype)x->dtype, ix->ndim, ix->shape, gather_elements_body, &axis);
}

/* ---- broadcasting maps: where, comparisons, logic ---- */

/* The broadcast shape of every input, or an error naming the first pair that does not
 * broadcast. */
static enum kiln_status
bcast_all(struct libcall *c, int64_t *shape, uint32_t *n)
{
    const struct kiln_tensor *x = lib_in(c, 0);
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    *n = x->ndim;
    for (uint32_t i = 1; i < c->nin; i++) {
        const struct kiln_tensor *t = lib_in(c, i);
        int64_t                   out[KILN_MAX_DIMS];
        uint32_t                  nout;
        if (!lib_bcast_shape(shape, *n, t->shape, t->ndim, out, &nout)) {
            char sa[LIB_SHAPE_BUF], sb[LIB_SHAPE_BUF];
            return lib_fail(c, "shapes %s and %s of %s do not broadcast",
                            lib_shape_str(shape, *n, sa, sizeof sa),
                            lib_shape_str(t->shape, t->ndim, sb, sizeof sb), lib_in_name(c, i));
        }
        memcpy(shape, out, sizeof(int64_t) * nout);
        *n = nout;
    }
    return KILN_OK;
}

struct bmap {
    enum kiln_op op; /* the operator on the loaded operands (KILN_OP_SELECT for where) */
    bool         swap;
    uint32_t     n;
    int64_t      shape[KILN_MAX_DIMS];
};

static kiln_expr
bmap_body(struct libcall *c, const kiln_expr *ax, const void *ud)
{
    const struct bmap *b = ud;
    kiln_expr          v[3];
    for (uint32_t i = 0; i < c->nin; i++) {
        const struct kiln_tensor *t = lib_in(c, i);
        kiln_expr                 idx[KILN_MAX_DIMS];
        lib_bcast_idx(c, t->shape, t->ndim, b->shape, b->n, ax, idx);
        v[i] = load(c, i, idx);
    }
    if (b->op == KILN_OP_SELECT)
        return kiln_select(c->ctx, v[0], v[1], v[2]);
    if (c->nin == 1)
        return kiln_unary(c->ctx, b->op, v[0]);
    return b->swap ? kiln_binary(c->ctx, b->op, v[1], v[0])
                   : kiln_binary(c->ctx, b->op, v[0], v[1]);
}

enum operands { ANY_DTYPE, NUMERIC, BOOLEAN };

static enum kiln_status
bmap(struct libcall *c, enum kiln_op op, bool swap, enum operands kind)
{
    struct bmap b = {.op = op, .swap = swap};
    KILN_TRY(lib_allow(c, no_attrs));
    KILN_TRY(lib_same_dtype(c));
    enum kiln_dtype dt = (enum kiln_dtype)lib_in(c, 0)->dtype;
    if (kind == NUMERIC)
        KILN_TRY(lib_want_numeric(c, 0));
    if (kind == BOOLEAN && dt != KILN_DTYPE_BOOL)
        return lib_fail(c, "input %s has dtype %s; bool is required", lib_in_name(c, 0),
                        kiln_dtype_name(dt));
    KILN_TRY(bcast_all(c, b.shape, &b.n));
    return define(c, KILN_DTYPE_BOOL, b.n, b.shape, bmap_body, &b);
}

enum kiln_status
kiln_lib_where(struct libcall *c)
{
    struct bmap b = {.op = KILN_OP_SELECT};
    KILN_TRY(lib_allow(c, no_attrs));
    enum kiln_dtype dc = (enum kiln_dtype)lib_in(c, 0)->dtype;
    enum kiln_dtype da = (enum kiln_dtype)lib_in(c, 1)->dtype;
    enum kiln_dtype db = (enum kiln_dtype)lib_in(c, 2)->dtype;
    if (dc != KILN_DTYPE_BOOL)
        return lib_fail(c, "condition %s has dtype %s; bool is required", lib_in_name(c, 0),
                        kiln_dtype_name(dc));
    if (da != db)
        return lib_fail(c, "dtypes of %s (%s) and %s (%s) differ", lib_in_name(c, 1),
                        kiln_dtype_name(da), lib_in_name(c, 2), kiln_dtype_name(db));
    KILN_TRY(bcast_all(c, b.shape, &b.n));
    return define(c, da, b.n, b.shape, bmap_body, &b);
}

enum kiln_status
kiln_lib_equal(struct libcall *c)
{
    return bmap(c, KILN_OP_EQ, false, ANY_DTYPE);
}

enum kiln_status
kiln_lib_less(struct libcall *c)
{
    return bmap(c, KILN_OP_LT, false, NUMERIC);
}

enum kiln_status
kiln_lib_less_equal(struct libcall *c)
{
    return bmap(c, KILN_OP_LE, false, NUMERIC);
}

enum kiln_status
kiln_lib_greater(struct libcall *c)
{
    return bmap(c, KILN_OP_LT, true, NUMERIC);
}

enum kiln_status
kiln_lib_greater_equal(struct libcall *c)
{
    return bmap(c, KILN_OP_LE, true, NUMERIC);
}

enum kiln_status
kiln_lib_logical_and(struct libcall *c)
{
    return bmap(c, KILN_OP_AND, false, BOOLEAN);
}

enum kiln_status
kiln_lib_logical_or(struct libcall *c)
{
    return bmap(c, KILN_OP_OR, false, BOOLEAN);
}

enum kiln_status
kiln_lib_logical_xor(struct libcall *c)
{
    return bmap(c, KILN_OP_NE, false, BOOLEAN);
}

enum kiln_status
kiln_lib_logical_not(struct libcall *c)
{
    return bmap(c, KILN_OP_NOT, false, BOOLEAN);
}

/* ---- cast ---- */

static kiln_expr
cast_body(struct libcall *c, const kiln_expr *ax, const void *ud)
{
    const enum kiln_dtype *dt = ud;
    return kiln_cast(c->ctx, *dt, load(c, 0, ax));
}

enum kiln_status
kiln_lib_cast(struct libcall *c)
{
    static const char *const attrs[] = {"dtype", NULL};
    const char              *name;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_string(c, "dtype", NULL, &name));
    if (!name)
        return lib_fail(c, "missing attribute dtype");
    enum kiln_dtype dt = kiln_dtype_parse(name);
    if (dt == KILN_DTYPE_COUNT)
        return lib_fail_attr(c, lib_attr(c, "dtype"), "unknown dtype \"%s\"", name);
    const struct kiln_tensor *x = lib_in(c, 0);
    return define(c, dt, x->ndim, x->shape, cast_body, &dt);
}

/* ---- expand, tile ---- */

struct bcast1 {
    uint32_t n;
    int64_t  shape[KILN_MAX_DIMS];
    bool     tile;
};

static kiln_expr
bcast1_body(struct libcall *c, const kiln_expr *ax, const void *ud)
{
    const struct bcast1      *b = ud;
    const struct kiln_tensor *x = lib_in(c, 0);
    kiln_expr                 idx[KILN_MAX_DIMS];
    if (!b->tile) {
        lib_bcast_idx(c, x->shape, x->ndim, b->shape, b->n, ax, idx);
    } else {
        for (uint32_t d = 0; d < x->ndim; d++)
            idx[d] = b->shape[d] == x->shape[d] ? ax[d]
                     : x->shape[d] == 1         ? lib_idx(c, 0)
                                        : kiln_floormod(c->ctx, ax[d], lib_idx(c, x->shape[d]));
    }
    return load(c, 0, idx);
}

enum kiln_status
kiln_lib_expand(struct libcall *c)
{
    static const char *const attrs[] = {"shape", NULL};
    const int64_t           *v;
    uint32_t                 n;
    bool                     given;
    struct bcast1            b = {.tile = false};
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_list(c, "shape", &v, &n, &given));
    if (!given)
        return lib_fail(c, "missing attribute shape");
    const struct kiln_attr   *a = lib_attr(c, "shape");
    const struct kiln_tensor *x = lib_in(c, 0);
    char                      sx[LIB_SHAPE_BUF], sv[LIB_SHAPE_BUF];
    if (n > KILN_MAX_DIMS)
        return lib_fail_attr(c, a, "shape %s has more than %d dimensions",
                             lib_shape_str(v, n, sv, sizeof sv), KILN_MAX_DIMS);
    KILN_TRY(lib_check_min(c, "shape", v, n, 1));
    if (!lib_bcast_shape(x->shape, x->ndim, v, n, b.shape, &b.n))
        return lib_fail_attr(c, a, "shape %s and %s of %s do not broadcast",
                             lib_shape_str(v, n, sv, sizeof sv),
                             lib_shape_str(x->shape, x->ndim, sx, sizeof sx), lib_in_name(c, 0));
    return define(c, (enum kiln_dtype)x->dtype, b.n, b.shape, bcast1_body, &b);
}

enum kiln_status
kiln_lib_tile(struct libcall *c)
{
    static const char *const attrs[] = {"repeats", NULL};
    const int64_t           *v;
    uint32_t                 n;
    bool                     given, ovf = false;
    struct bcast1            b = {.tile = true};
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_list(c, "repeats", &v, &n, &given));
    if (!given)
        return lib_fail(c, "missing attribute repeats");
    const struct kiln_tensor *x = lib_in(c, 0);
    char                      sv[LIB_SHAPE_BUF];
    if (n != x->ndim)
        return lib_fail_attr(c, lib_attr(c, "repeats"),
                             "repeats %s has %u entries but input %s has rank %u",
                             lib_shape_str(v, n, sv, sizeof sv), n, lib_in_name(c, 0), x->ndim);
    KILN_TRY(lib_check_min(c, "repeats", v, n, 1));
    for (uint32_t d = 0; d < n; d++)
        b.shape[d] = lib_ck_mul(&ovf, x->shape[d], v[d]);
    if (ovf)
        return lib_fail_overflow(c, (const char *const[]){"repeats", NULL});
    b.n = n;
    return define(c, (enum kiln_dtype)x->dtype, b.n, b.shape, bcast1_body, &b);
}

/* ---- trilu ---- */

struct trilu {
    bool    upper;
    int64_t k;
};

static kiln_expr
trilu_body(struct libcall *c, const kiln_expr *ax, const void *ud)
{
    const struct trilu       *t = ud;
    const struct kiln_tensor *x = lib_in(c, 0);
    kiln_ctx                 *ctx = c->ctx;
    kiln_expr                 i = ax[x->ndim - 2], j = ax[x->ndim - 1];
    /* upper keeps j - i >= k, lower keeps j - i <= k */
    kiln_expr ik = kiln_add(ctx, i, lib_idx(c, t->k));
    kiln_expr keep = t->upper ? kiln_le(ctx, ik, j) : kiln_le(ctx, j, ik);
    return kiln_select(ctx, keep, lib_load(c, 0, ax), lib_f(c, 0, (enum kiln_dtype)x->dtype));
}

enum kiln_status
kiln_lib_trilu(struct libcall *c)
{
    static const char *const attrs[] = {"upper", "k", NULL};
    struct trilu             t;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_bool(c, "upper", true, &t.upper));
    KILN_TRY(lib_get_int(c, "k", 0, &t.k));
    const struct kiln_tensor *x = lib_in(c, 0);
    if (x->ndim < 2) {
        char s[LIB_SHAPE_BUF];
        return lib_fail(c, "input %s %s needs at least 2 dimensions", lib_in_name(c, 0),
                        lib_shape_str(x->shape, x->ndim, s, sizeof s));
    }
    /* beyond [-rows, cols] every k keeps (or drops) the same elements: clamped, i + k cannot
     * overflow */
    int64_t rows = x->shape[x->ndim - 2], cols = x->shape[x->ndim - 1];
    t.k = t.k < -rows ? -rows : t.k > cols ? cols : t.k;
    return define(c, (enum kiln_dtype)x->dtype, x->ndim, x->shape, trilu_body, &t);
}
