/* ir/lib_wino.c -- the two data transforms of Winograd's minimal filtering F(2x2, 3x3) (Lavin
 * and Gray, 2016): winograd_input and winograd_output.
 *
 * A 3x3 convolution with stride 1 computes each 2x2 block of output pixels ("tile") from the
 * 4x4 block of input pixels under it. With the matrices
 *
 *     B^T = [1  0 -1  0]    G = [1    0    0  ]    A^T = [1 1  1  0]
 *           [0  1  1  0]        [1/2  1/2  1/2]          [0 1 -1 -1]
 *           [0 -1  1  0]        [1/2 -1/2  1/2]
 *           [0  1  0 -1]        [0    0    1  ]
 *
 * a tile is Y = A^T [ (G g G^T) . (B^T d B) ] A, with d the input block and g the kernel: the
 * 16 element-wise products of one tile and one channel pair become, over the channels, 16
 * independent matrix products (one per element e = 4*xi + nu of the 4x4 transformed tile):
 *
 *     V[e, t, c] = (B^T d_{t,c} B)[xi, nu]            winograd_input
 *     U[e, c, k] = (G g_{k,c} G^T)[xi, nu]            the weights, transformed once
 *     M[e, t, k] = sum_c V[e, t, c] U[e, c, k]        batch_matmul(V, U)
 *     y[.., k]   = (A^T M_{t,k} A)[i, j] (+ bias[k])  winograd_output
 *
 * which is 16 multiplications per tile and channel pair instead of 36 (2.25x fewer). Each row
 * of B^T has two non-zeros, so (B^T d)[xi] = d[p(xi)] + s(xi) d[q(xi)] with p = (0, 1, 2, 1),
 * q = (2, 2, 1, 3), s = (-1, 1, -1, -1); winograd_input writes V[e] as those four loads
 * (two per direction) rather than as a 16-term sum with zero coefficients. Each row of A^T has
 * three: (A^T m)[0] = m1 + (m0 + m2), (A^T m)[1] = m1 - (m2 + m3). passes/graph_simplify.c's
 * kiln_graph_winograd rewrites convolutions into these statements. */
#include "lib_impl.h"

#include <string.h>

#define WINO_E 16 /* elements of a transformed 4x4 tile */

/* Tiles along an output dimension of extent o: 2 pixels each, the last maybe partial. */
static int64_t
wino_tiles(int64_t o)
{
    return (o + 1) / 2;
}

static enum kiln_status
wino_layout(struct libcall *c, bool *nhwc)
{
    const char *s;
    KILN_TRY(lib_get_string(c, "layout", "nchw", &s));
    if (strcmp(s, "nchw") && strcmp(s, "nhwc"))
        return lib_fail_attr(c, lib_attr(c, "layout"),
                             "layout must be \"nchw\" or \"nhwc\", got \"%s\"", s);
    *nhwc = !strcmp(s, "nhwc");
    return KILN_OK;
}

/* p(xi) = min(xi, 4 - xi), q(xi): 2, 2, 1, 3 */
static kiln_expr
wino_p(struct libcall *c, kiln_expr xi)
{
    return kiln_min(c->ctx, xi, kiln_sub(c->ctx, lib_idx(c, 4), xi));
}

static kiln_expr
wino_q(struct libcall *c, kiln_expr xi)
{
    kiln_ctx *ctx = c->ctx;
    return kiln_select(ctx, kiln_lt(ctx, xi, lib_idx(c, 2)), lib_idx(c, 2),
                       kiln_select(ctx, kiln_binary(ctx, KILN_OP_EQ, xi, lib_idx(c, 2)),
                                   lib_idx(c, 1), lib_idx(c, 3)));
}

/* s(xi): 1 for row 1, else -1 */
static kiln_expr
wino_s(struct libcall *c, kiln_expr xi, enum kiln_dtype dt)
{
    return kiln_select(c->ctx, kiln_binary(c->ctx, KILN_OP_EQ, xi, lib_idx(c, 1)), lib_f(c, 1, dt),
                       lib_f(c, -1, dt));
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

enum kiln_status
kiln_lib_winograd_input(struct libcall *c)
{
    static const char *const attrs[] = {"padding", "layout", NULL};
    struct wino_in           w;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_pad(c, "padding", true, w.pad));
    KILN_TRY(lib_check_min(c, "padding", w.pad, 4, 0));
    KILN_TRY(wino_layout(c, &w.nhwc));
    KILN_TRY(lib_want_rank(c, 0, 4, "input", w.nhwc ? "[N, H, W, C]" : "[N, C, H, W]"));
    KILN_TRY(lib_want_float(c, 0));
    const struct kiln_tensor *x = lib_in(c, 0);
    enum kiln_dtype           dt = (enum kiln_dtype)x->dtype;
    int64_t                   N = x->shape[0], C = x->shape[w.nhwc ? 3 : 1];
    w.H = x->shape[w.nhwc ? 1 : 2];
    w.W = x->shape[w.nhwc ? 2 : 3];
    int64_t oh = w.H + w.pad[0] + w.pad[2] - 2, ow = w.W + w.pad[1] + w.pad[3] - 2;
    if (oh < 1 || ow < 1)
        return lib_fail(c,
                        "input %s of %lldx%lld padded to %lldx%lld is smaller than the 3x3 kernel",
                        lib_in_name(c, 0), (long long)w.H, (long long)w.W, (long long)(oh + 2),
                        (long long)(ow + 2));
    int64_t th = wino_tiles(oh), tw = wino_tiles(ow);
    int64_t shape[3] = {WINO_E, N * th * tw, C};

    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    uint32_t  t = lib_tensor(c, NULL, dt, 3, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    static const char *const names[] = {"e", "t", "c"};
    kiln_expr                ax[3];
    lib_axes(c, 3, ax);
    kiln_expr xi = kiln_floordiv(ctx, ax[0], lib_idx(c, 4));
    kiln_expr nu = kiln_floormod(ctx, ax[0], lib_idx(c, 4));
    kiln_expr tile_row = kiln_floordiv(ctx, ax[1], lib_idx(c, tw));
    w.n = kiln_floordiv(ctx, tile_row, lib_idx(c, th));
    w.c = ax[2];
    w.row0 =
        kiln_sub(ctx, kiln_mul(ctx, kiln_floormod(ctx, tile_row, lib_idx(c, th)), lib_idx(c, 2)),
                 lib_idx(c, w.pad[0]));
    w.col0 = kiln_sub(ctx, kiln_mul(ctx, kiln_floormod(ctx, ax[1], lib_idx(c, tw)), lib_idx(c, 2)),
                      lib_idx(c, w.pad[1]));
    kiln_expr pr = wino_p(c, xi), qr = wino_q(c, xi), pc = wino_p(c, nu), qc = wino_q(c, nu);
    kiln_expr sr = wino_s(c, xi, dt), sc = wino_s(c, nu, dt);
    /* (B^T d B)[xi, nu] = row p: d[p, pc] + sc d[p, qc]; plus sr times row q's */
    kiln_expr rp =
        kiln_add(ctx, wino_d(c, &w, pr, pc, dt), kiln_mul(ctx, sc, wino_d(c, &w, pr, qc, dt)));
    kiln_expr rq =
        kiln_add(ctx, wino_d(c, &w, qr, pc, dt), kiln_mul(ctx, sc, wino_d(c, &w, qr, qc, dt)));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, kiln_add(ctx, rp, kiln_mul(ctx, sr, rq)),
                      names);
}

/* (A^T m)[i] over the 4 values m(0..3): m1 + (m0 + m2) for i = 0, m1 - (m2 + m3) for i = 1. */
static kiln_expr
wino_out_row(struct libcall *c, kiln_expr i, const kiln_expr m[4])
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr first = kiln_binary(ctx, KILN_OP_EQ, i, lib_idx(c, 0));
    return kiln_select(ctx, first, kiln_add(ctx, m[1], kiln_add(ctx, m[0], m[2])),
                       kiln_sub(ctx, m[1], kiln_add(ctx, m[2], m[3])));
}

enum kiln_status
kiln_lib_winograd_output(struct libcall *c)
{
    static const char *const attrs[] = {"size", "layout", NULL};
    int64_t                  size[2];
    bool                     nhwc;
    KILN_TRY(lib_allow(c, attrs));
    if (!lib_attr(c, "size"))
        return lib_fail(c, "missing attribute size (the output's [H, W])");
    KILN_TRY(lib_get_pair(c, "size", 1, size));
    KILN_TRY(lib_check_min(c, "size", size, 2, 1));
    KILN_TRY(wino_layout(c, &nhwc));
    KILN_TRY(lib_want_rank(c, 0, 3, "input", "[16, T, K]"));
    KILN_TRY(lib_same_dtype(c));
    KILN_TRY(lib_want_float(c, 0));
    const struct kiln_tensor *m = lib_in(c, 0);
    int64_t                   th = wino_tiles(size[0]), tw = wino_tiles(size[1]), K = m->shape[2];
    char                      s[LIB_SHAPE_BUF];
    if (m->shape[0] != WINO_E || m->shape[1] % (th * tw))
        return lib_fail(
            c,
            "input %s has shape %s; a %lldx%lld output needs [16, N*%lld, K] (%lldx%lld "
            "tiles of 2x2 per image)",
            lib_in_name(c, 0), lib_shape_str(m->shape, 3, s, sizeof s), (long long)size[0],
            (long long)size[1], (long long)(th * tw), (long long)th, (long long)tw);
    if (c->nin > 1) {
        const struct kiln_tensor *b = lib_in(c, 1);
        if (b->ndim != 1 || b->shape[0] != K)
            return lib_fail(c, "bias %s has shape %s but input %s has %lld channels",
                            lib_in_name(c, 1), lib_shape_str(b->shape, b->ndim, s, sizeof s),
                            lib_in_name(c, 0), (long long)K);
    }
    int64_t N = m->shape[1] / (th * tw);
    int64_t shape[4] = {N, nhwc ? size[0] : K, nhwc ? size[1] : size[0], nhwc ? K : size[1]};

    KILN_TRY(lib_begin(c));
    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)m->dtype;
    uint32_t        t = lib_tensor(c, NULL, dt, 4, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    static const char *const names_nchw[] = {"n", "k", "h", "w"};
    static const char *const names_nhwc[] = {"n", "h", "w", "k"};
    kiln_expr                ax[4];
    lib_axes(c, 4, ax);
    kiln_expr h = ax[nhwc ? 1 : 2], wv = ax[nhwc ? 2 : 3], k = ax[nhwc ? 3 : 1];
    kiln_expr two = lib_idx(c, 2);
    kiln_expr tile = kiln_add(
        ctx,
        kiln_mul(ctx,
                 kiln_add(ctx, kiln_mul(ctx, ax[0], lib_idx(c, th)), kiln_floordiv(ctx, h, two)),
                 lib_idx(c, tw)),
        kiln_floordiv(ctx, wv, two));
    kiln_expr i = kiln_floormod(ctx, h, two), j = kiln_floormod(ctx, wv, two);
    kiln_expr row[4];
    for (int xi = 0; xi < 4; xi++) {
        kiln_expr mv[4];
        for (int nu = 0; nu < 4; nu++) {
            kiln_expr idx[3] = {lib_idx(c, 4 * xi + nu), tile, k};
            mv[nu] = lib_load(c, 0, idx);
        }
        row[xi] = wino_out_row(c, j, mv);
    }
    kiln_expr body = wino_out_row(c, i, row);
    if (c->nin > 1)
        body = kiln_add(ctx, body, lib_load(c, 1, &k));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, nhwc ? names_nhwc : names_nchw);
}
