/* ir/lib_wino.c -- the two data transforms of Winograd's minimal filtering F(m x m, 3x3) for
 * output tiles of m = 2 or 4 pixels (Lavin and Gray, 2016): winograd_input and winograd_output.
 *
 * A 3x3 convolution with stride 1 computes each m x m block of output pixels ("tile") from the
 * a x a block of input pixels under it, a = m + 2. With the matrices of F(2x2, 3x3)
 *
 *     B^T = [1  0 -1  0]    G = [1    0    0  ]    A^T = [1 1  1  0]
 *           [0  1  1  0]        [1/2  1/2  1/2]          [0 1 -1 -1]
 *           [0 -1  1  0]        [1/2 -1/2  1/2]
 *           [0  1  0 -1]        [0    0    1  ]
 *
 * and of F(4x4, 3x3)
 *
 *     B^T = [4  0 -5  0  1  0]   G = [ 1/4     0     0 ]   A^T = [1 1  1 1  1 0]
 *           [0 -4 -4  1  1  0]       [-1/6  -1/6  -1/6 ]         [0 1 -1 2 -2 0]
 *           [0  4 -4 -1  1  0]       [-1/6   1/6  -1/6 ]         [0 1  1 4  4 0]
 *           [0 -2 -1  2  1  0]       [ 1/24  1/12  1/6 ]         [0 1 -1 8 -8 1]
 *           [0  2 -1 -2  1  0]       [ 1/24 -1/12  1/6 ]
 *           [0  4  0 -5  0  1]       [ 0     0     1   ]
 *
 * a tile is Y = A^T [ (G g G^T) . (B^T d B) ] A, with d the input block and g the kernel: the
 * a^2 element-wise products of one tile and one channel pair become, over the channels, a^2
 * independent matrix products (one per element e = a*xi + nu of the transformed tile):
 *
 *     V[e, t, c] = (B^T d_{t,c} B)[xi, nu]            winograd_input
 *     U[e, c, k] = (G g_{k,c} G^T)[xi, nu]            the weights, transformed once
 *     M[e, t, k] = sum_c V[e, t, c] U[e, c, k]        batch_matmul(V, U)
 *     y[.., k]   = (A^T M_{t,k} A)[i, j] (+ bias[k])  winograd_output
 *
 * which is a^2 multiplications per tile and channel pair instead of 9 m^2: 2.25x fewer for
 * m = 2, 4x for m = 4. A row of B^T has few non-zeros, so winograd_input writes
 * (B^T d B)[xi, nu] as sum_r B^T[xi, p_r(xi)] sum_s B^T[nu, p_s(nu)] d[p_r(xi), p_s(nu)] over
 * the non-zeros only (2 per row for m = 2, at most 4 for m = 4), the positions and coefficients
 * being small tables indexed by xi: 4 loads per element for m = 2, at most 16 for m = 4, never
 * a 16- or 36-term sum with zero coefficients. Rows of A^T are written by hand: for m = 2,
 * (A^T v)[0] = v1 + (v0 + v2), (A^T v)[1] = v1 - (v2 + v3); for m = 4, with the sums (i even)
 * or differences (i odd) p = v1 +- v2 and q = v3 +- v4, (A^T v)[i] = p + 2^i q, plus v0 for
 * i = 0 and v5 for i = 3. passes/graph_simplify.c's kiln_graph_winograd rewrites convolutions
 * into these statements and computes U. */
#include "lib_impl.h"

#include <string.h>

/* The non-zeros of B^T's rows: positions and coefficients of up to 4 terms per row (a
 * coefficient 0 ends the row). */
struct wino_rows {
    int    alpha, nterm;
    double pos[6][4]; /* small integers */
    double coef[6][4];
};

static const struct wino_rows wino_bt2 = {
    4, 2, {{0, 2}, {1, 2}, {2, 1}, {1, 3}}, {{1, -1}, {1, 1}, {1, -1}, {1, -1}}};
static const struct wino_rows wino_bt4 = {
    6,
    4,
    {{0, 2, 4, 0}, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 3, 5, 0}},
    {{4, -5, 1, 0}, {-4, -4, 1, 1}, {4, -4, -1, 1}, {-2, -1, 2, 1}, {2, -1, -2, 1}, {4, -5, 1, 0}}};

/* Tiles along an output dimension of extent o: m pixels each, the last maybe partial. */
static int64_t
wino_tiles(int64_t o, int64_t m)
{
    return o / m + (o % m != 0); /* ceil(o / m) without overflow */
}

/* The attributes both transforms share: layout and tile (m). */
static enum kiln_status
wino_attrs(struct libcall *c, bool *nhwc, int64_t *m)
{
    const char *s;
    KILN_TRY(lib_get_string(c, "layout", "nchw", &s));
    if (strcmp(s, "nchw") && strcmp(s, "nhwc"))
        return lib_fail_attr(c, lib_attr(c, "layout"),
                             "layout must be \"nchw\" or \"nhwc\", got \"%s\"", s);
    *nhwc = !strcmp(s, "nhwc");
    KILN_TRY(lib_get_int(c, "tile", 2, m));
    if (*m != 2 && *m != 4)
        return lib_fail_attr(c, lib_attr(c, "tile"), "tile must be 2 or 4, got %lld",
                             (long long)*m);
    return KILN_OK;
}

/* v[xi] for a table v of n rows (stride apart) indexed by xi, as constants of dtype dt: a select
 * chain, or the constant when all rows agree (select(c, a, a) folds to a). */
static kiln_expr
wino_tab(struct libcall *c, kiln_expr xi, int n, const double *v, int stride, enum kiln_dtype dt)
{
    kiln_expr r = lib_f(c, v[(n - 1) * stride], dt);
    for (int k = n - 2; k >= 0; k--)
        r = kiln_select(c->ctx, kiln_binary(c->ctx, KILN_OP_EQ, xi, lib_idx(c, k)),
                        lib_f(c, v[k * stride], dt), r);
    return r;
}

struct wino_in {
    int64_t   H, W, pad[4];
    bool      nhwc;
    kiln_expr n, c, row0, col0; /* the tile's batch, channel and top-left input pixel */
};

/* d[a, b] of the tile: x at (row0 + a, col0 + b), zero outside the input. */
static kiln_expr
wino_d(struct libcall *c, const struct wino_in *w, kiln_expr a, kiln_expr b, enum kiln_dtype dt)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr ih = kiln_add(ctx, w->row0, a), iw = kiln_add(ctx, w->col0, b);
    kiln_expr cond = kiln_bool(ctx, true);
    cond = lib_bound(c, cond, ih, true, true, w->H);
    cond = lib_bound(c, cond, iw, true, true, w->W);
    kiln_expr xi[4];
    if (w->nhwc) {
        xi[0] = w->n, xi[1] = ih, xi[2] = iw, xi[3] = w->c;
    } else {
        xi[0] = w->n, xi[1] = w->c, xi[2] = ih, xi[3] = iw;
    }
    return kiln_select(ctx, cond, lib_load(c, 0, xi), lib_f(c, 0, dt));
}

/* Term r of row xi of B^T: its coefficient times f, or 0 where the row has no term r. */
static kiln_expr
wino_term(struct libcall *c, const struct wino_rows *B, int r, kiln_expr xi, kiln_expr f,
          enum kiln_dtype dt)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr t = kiln_mul(ctx, wino_tab(c, xi, B->alpha, &B->coef[0][r], 4, dt), f);
    kiln_expr used = kiln_bool(ctx, true);
    for (int k = 0; k < B->alpha; k++)
        if (B->coef[k][r] == 0)
            used = kiln_and(ctx, used, kiln_binary(ctx, KILN_OP_NE, xi, lib_idx(c, k)));
    return kiln_select(ctx, used, t, lib_f(c, 0, dt));
}

enum kiln_status
kiln_lib_winograd_input(struct libcall *c)
{
    static const char *const attrs[] = {"padding", "layout", "tile", NULL};
    struct wino_in           w;
    int64_t                  m;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_pad(c, "padding", true, w.pad));
    KILN_TRY(lib_check_min(c, "padding", w.pad, 4, 0));
    KILN_TRY(wino_attrs(c, &w.nhwc, &m));
    KILN_TRY(lib_want_rank(c, 0, 4, "input", w.nhwc ? "[N, H, W, C]" : "[N, C, H, W]"));
    KILN_TRY(lib_want_float(c, 0));
    const struct kiln_tensor *x = lib_in(c, 0);
    const struct wino_rows   *B = m == 2 ? &wino_bt2 : &wino_bt4;
    enum kiln_dtype           dt = (enum kiln_dtype)x->dtype;
    int64_t                   N = x->shape[0], C = x->shape[w.nhwc ? 3 : 1], a = B->alpha;
    w.H = x->shape[w.nhwc ? 1 : 2];
    w.W = x->shape[w.nhwc ? 2 : 3];
    bool    ovf = false;
    int64_t oh = lib_ck_add(&ovf, lib_ck_add(&ovf, w.H, w.pad[0]), w.pad[2]) - 2;
    int64_t ow = lib_ck_add(&ovf, lib_ck_add(&ovf, w.W, w.pad[1]), w.pad[3]) - 2;
    if (ovf)
        return lib_fail_overflow(c, (const char *const[]){"padding", NULL});
    if (oh < 1 || ow < 1)
        return lib_fail(c,
                        "input %s of %lldx%lld padded to %lldx%lld is smaller than the 3x3 kernel",
                        lib_in_name(c, 0), (long long)w.H, (long long)w.W, (long long)(oh + 2),
                        (long long)(ow + 2));
    int64_t th = wino_tiles(oh, m), tw = wino_tiles(ow, m);
    int64_t shape[3] = {a * a, lib_ck_mul(&ovf, lib_ck_mul(&ovf, N, th), tw), C};
    if (ovf)
        return lib_fail_overflow(c, (const char *const[]){"padding", NULL});

    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    uint32_t  t = lib_tensor(c, NULL, dt, 3, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    static const char *const names[] = {"e", "t", "c"};
    kiln_expr                ax[3];
    lib_axes(c, 3, ax);
    kiln_expr xi = kiln_floordiv(ctx, ax[0], lib_idx(c, a));
    kiln_expr nu = kiln_floormod(ctx, ax[0], lib_idx(c, a));
    kiln_expr tile_row = kiln_floordiv(ctx, ax[1], lib_idx(c, tw));
    w.n = kiln_floordiv(ctx, tile_row, lib_idx(c, th));
    w.c = ax[2];
    w.row0 =
        kiln_sub(ctx, kiln_mul(ctx, kiln_floormod(ctx, tile_row, lib_idx(c, th)), lib_idx(c, m)),
                 lib_idx(c, w.pad[0]));
    w.col0 = kiln_sub(ctx, kiln_mul(ctx, kiln_floormod(ctx, ax[1], lib_idx(c, tw)), lib_idx(c, m)),
                      lib_idx(c, w.pad[1]));
    /* sum over the row's terms r of coef_r(xi) * (sum over the column's terms s of
     * coef_s(nu) * d[pos_r(xi), pos_s(nu)]) */
    kiln_expr body = {0};
    for (int r = 0; r < B->nterm; r++) {
        kiln_expr pr = wino_tab(c, xi, B->alpha, &B->pos[0][r], 4, KILN_DTYPE_I64), inner = {0};
        for (int s = 0; s < B->nterm; s++) {
            kiln_expr ps = wino_tab(c, nu, B->alpha, &B->pos[0][s], 4, KILN_DTYPE_I64);
            kiln_expr term = wino_term(c, B, s, nu, wino_d(c, &w, pr, ps, dt), dt);
            inner = s ? kiln_add(ctx, inner, term) : term;
        }
        kiln_expr term = wino_term(c, B, r, xi, inner, dt);
        body = r ? kiln_add(ctx, body, term) : term;
    }
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, names);
}

/* (A^T v)[i] over the a values v(0..a-1) (the header's hand-written rows). */
static kiln_expr
wino_out_row(struct libcall *c, int64_t m, kiln_expr i, const kiln_expr *v, enum kiln_dtype dt)
{
    kiln_ctx *ctx = c->ctx;
    if (m == 2) {
        kiln_expr first = kiln_binary(ctx, KILN_OP_EQ, i, lib_idx(c, 0));
        return kiln_select(ctx, first, kiln_add(ctx, v[1], kiln_add(ctx, v[0], v[2])),
                           kiln_sub(ctx, v[1], kiln_add(ctx, v[2], v[3])));
    }
    static const double pow2[4] = {1, 2, 4, 8};
    kiln_expr           even =
        kiln_binary(ctx, KILN_OP_EQ, kiln_floormod(ctx, i, lib_idx(c, 2)), lib_idx(c, 0));
    kiln_expr p = kiln_select(ctx, even, kiln_add(ctx, v[1], v[2]), kiln_sub(ctx, v[1], v[2]));
    kiln_expr q = kiln_select(ctx, even, kiln_add(ctx, v[3], v[4]), kiln_sub(ctx, v[3], v[4]));
    kiln_expr r = kiln_add(ctx, p, kiln_mul(ctx, wino_tab(c, i, 4, pow2, 1, dt), q));
    kiln_expr extra = kiln_select(
        ctx, kiln_binary(ctx, KILN_OP_EQ, i, lib_idx(c, 0)), v[0],
        kiln_select(ctx, kiln_binary(ctx, KILN_OP_EQ, i, lib_idx(c, 3)), v[5], lib_f(c, 0, dt)));
    return kiln_add(ctx, r, extra);
}

enum kiln_status
kiln_lib_winograd_output(struct libcall *c)
{
    static const char *const attrs[] = {"size", "layout", "tile", NULL};
    int64_t                  size[2], m;
    bool                     nhwc;
    KILN_TRY(lib_allow(c, attrs));
    if (!lib_attr(c, "size"))
        return lib_fail(c, "missing attribute size (the output's [H, W])");
    KILN_TRY(lib_get_pair(c, "size", 1, size));
    KILN_TRY(lib_check_min(c, "size", size, 2, 1));
    KILN_TRY(wino_attrs(c, &nhwc, &m));
    int64_t a = m + 2;
    KILN_TRY(lib_want_rank(c, 0, 3, "input", m == 2 ? "[16, T, K]" : "[36, T, K]"));
    KILN_TRY(lib_same_dtype(c));
    KILN_TRY(lib_want_float(c, 0));
    const struct kiln_tensor *mt = lib_in(c, 0);
    int64_t th = wino_tiles(size[0], m), tw = wino_tiles(size[1], m), K = mt->shape[2];
    bool    ovf = false;
    lib_ck_mul(&ovf, th, tw);
    if (ovf)
        return lib_fail_overflow(c, (const char *const[]){"size", NULL});
    char s[LIB_SHAPE_BUF];
    if (mt->shape[0] != a * a || mt->shape[1] % (th * tw))
        return lib_fail(c,
                        "input %s has shape %s; a %lldx%lld output needs [%lld, N*%lld, K] "
                        "(%lldx%lld tiles of %lldx%lld per image)",
                        lib_in_name(c, 0), lib_shape_str(mt->shape, 3, s, sizeof s),
                        (long long)size[0], (long long)size[1], (long long)(a * a),
                        (long long)(th * tw), (long long)th, (long long)tw, (long long)m,
                        (long long)m);
    if (c->nin > 1) {
        const struct kiln_tensor *b = lib_in(c, 1);
        if (b->ndim != 1 || b->shape[0] != K)
            return lib_fail(c, "bias %s has shape %s but input %s has %lld channels",
                            lib_in_name(c, 1), lib_shape_str(b->shape, b->ndim, s, sizeof s),
                            lib_in_name(c, 0), (long long)K);
    }
    int64_t N = mt->shape[1] / (th * tw);
    int64_t shape[4] = {N, nhwc ? size[0] : K, nhwc ? size[1] : size[0], nhwc ? K : size[1]};

    KILN_TRY(lib_begin(c));
    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)mt->dtype;
    uint32_t        t = lib_tensor(c, NULL, dt, 4, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    static const char *const names_nchw[] = {"n", "k", "h", "w"};
    static const char *const names_nhwc[] = {"n", "h", "w", "k"};
    kiln_expr                ax[4];
    lib_axes(c, 4, ax);
    kiln_expr h = ax[nhwc ? 1 : 2], wv = ax[nhwc ? 2 : 3], k = ax[nhwc ? 3 : 1];
    kiln_expr mm = lib_idx(c, m);
    kiln_expr tile = kiln_add(
        ctx,
        kiln_mul(ctx,
                 kiln_add(ctx, kiln_mul(ctx, ax[0], lib_idx(c, th)), kiln_floordiv(ctx, h, mm)),
                 lib_idx(c, tw)),
        kiln_floordiv(ctx, wv, mm));
    kiln_expr i = kiln_floormod(ctx, h, mm), j = kiln_floormod(ctx, wv, mm);
    kiln_expr row[6];
    for (int xi = 0; xi < a; xi++) {
        kiln_expr mv[6];
        for (int nu = 0; nu < a; nu++) {
            kiln_expr idx[3] = {lib_idx(c, a * xi + nu), tile, k};
            mv[nu] = lib_load(c, 0, idx);
        }
        row[xi] = wino_out_row(c, m, j, mv, dt);
    }
    kiln_expr body = wino_out_row(c, m, i, row, dt);
    if (c->nin > 1)
        body = kiln_add(ctx, body, lib_load(c, 1, &k));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, nhwc ? names_nhwc : names_nchw);
}
