/* ir/lib_linalg.c -- contractions: conv2d, conv2d_transpose, dense, matmul, batch_matmul and
 * einsum.
 *
 * Every contraction is one sum-reduction over the contracted variables; an optional bias is a
 * second, elementwise definition (OUT.conv or OUT.matmul, then OUT = that + bias), because a
 * reduction's body is summed and cannot add a term once. Convolutions use NCHW / KCRS layouts
 * with PyTorch semantics. conv2d reads x at h*stride - pad_top + rh*dilation; the zero padding is
 * a select on the bounds of that index, emitted only for the sides where the index can
 * actually leave the input. conv2d_transpose is written as a gather, not a scatter: output row
 * h receives input row (h + pad_top - rh*dilation) / stride when that is an integer inside the
 * input, so it is one reduction like conv2d (select on divisibility and bounds). Grouped
 * convolutions index the input channel as (k / (K/groups)) * (C/groups) + rc; the builders'
 * folding turns this into plain k for depthwise convolutions. einsum parses the equation
 * NumPy's way (repeated indices, implicit output in label order, '...' broadcasting, size-1
 * broadcasting of labelled dimensions) and names its variables after the labels. */
#include "lib_impl.h"

#include <stdio.h>
#include <string.h>

static const char *const conv_names[] = {"n", "k", "h", "w"};
static const char *const conv_names_nhwc[] = {"n", "h", "w", "k"};

static enum kiln_status
check_bias(struct libcall *c, int64_t k, const char *what)
{
    if (c->nin < 3)
        return KILN_OK;
    const struct kiln_tensor *b = lib_in(c, 2);
    if (b->ndim == 1 && b->shape[0] == k)
        return KILN_OK;
    char s[LIB_SHAPE_BUF];
    return lib_fail(c, "bias %s has shape %s but weight %s has %lld output %s", lib_in_name(c, 2),
                    lib_shape_str(b->shape, b->ndim, s, sizeof s), lib_in_name(c, 1), (long long)k,
                    what);
}

/* The output tensor of a contraction: OUT directly, or OUT.suffix when a bias follows. */
static uint32_t
acc_tensor(struct libcall *c, const char *suffix, enum kiln_dtype dt, uint32_t n,
           const int64_t *shape)
{
    return lib_tensor(c, c->nin > 2 ? suffix : NULL, dt, n, shape);
}

/* OUT = acc + bias[axis bias_axis]. */
static enum kiln_status
add_bias(struct libcall *c, uint32_t acc, uint32_t bias_axis, const char *const *names)
{
    if (c->nin < 3)
        return KILN_OK;
    const struct kiln_tensor *a = &c->g->tensor[acc];
    uint32_t                  t = lib_tensor(c, NULL, (enum kiln_dtype)a->dtype, a->ndim, a->shape);
    if (t == KILN_NONE)
        return c->ctx->err.status;
    kiln_expr ax[KILN_MAX_DIMS];
    lib_axes(c, a->ndim, ax);
    kiln_expr body = kiln_add(c->ctx, lib_load_t(c, acc, ax), lib_load(c, 2, &ax[bias_axis]));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, names);
}

static enum kiln_status
common_checks(struct libcall *c)
{
    KILN_TRY(lib_same_dtype(c));
    return lib_want_float(c, 0);
}

/* ---- conv2d ---- */

enum kiln_status
kiln_lib_conv2d(struct libcall *c)
{
    static const char *const attrs[] = {"stride", "padding", "dilation", "groups", "layout", NULL};
    struct lib_window        wd;
    struct lib_layout        l;
    int64_t                  groups;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_window(c, &wd, true));
    KILN_TRY(lib_get_int(c, "groups", 1, &groups));
    KILN_TRY(lib_check_min(c, "groups", &groups, 1, 1));
    KILN_TRY(lib_get_layout(c, &l));
    KILN_TRY(lib_want_rank(c, 1, 4, "weight", "[K, C/groups, KH, KW]"));
    const struct kiln_tensor *x = lib_in(c, 0), *w = lib_in(c, 1);
    KILN_TRY(lib_window_same(c, &wd, w->shape[2], w->shape[3]));
    KILN_TRY(common_checks(c));
    int64_t N = x->shape[l.n], C = x->shape[l.c], H = x->shape[l.h], W = x->shape[l.w];
    int64_t K = w->shape[0], KH = w->shape[2], KW = w->shape[3];
    if (C % groups)
        return lib_fail(c, "input %s has %lld channels, not divisible by groups %lld",
                        lib_in_name(c, 0), (long long)C, (long long)groups);
    if (K % groups)
        return lib_fail(c, "weight %s has %lld output channels, not divisible by groups %lld",
                        lib_in_name(c, 1), (long long)K, (long long)groups);
    bool    ovf = false;
    int64_t wc = lib_ck_mul(&ovf, w->shape[1], groups);
    if (ovf)
        return lib_fail_overflow(c, (const char *const[]){"groups", NULL});
    if (wc != C)
        return lib_fail(c, "input %s has %lld channels but weight %s expects %lld (groups %lld)",
                        lib_in_name(c, 0), (long long)C, lib_in_name(c, 1), (long long)wc,
                        (long long)groups);
    KILN_TRY(check_bias(c, K, "channels"));
    int64_t ph = lib_ck_add(&ovf, lib_ck_add(&ovf, H, wd.pad[0]), wd.pad[2]);
    int64_t pw = lib_ck_add(&ovf, lib_ck_add(&ovf, W, wd.pad[1]), wd.pad[3]);
    int64_t eh = lib_ck_add(&ovf, lib_ck_mul(&ovf, wd.dil[0], KH - 1), 1);
    int64_t ew = lib_ck_add(&ovf, lib_ck_mul(&ovf, wd.dil[1], KW - 1), 1);
    if (ovf)
        return lib_fail_overflow(c, lib_window_attrs);
    if (eh > ph || ew > pw)
        return lib_fail(c,
                        "dilated kernel %lldx%lld does not fit input %s of %lldx%lld padded to "
                        "%lldx%lld",
                        (long long)eh, (long long)ew, lib_in_name(c, 0), (long long)H, (long long)W,
                        (long long)ph, (long long)pw);
    int64_t shape[4];
    shape[l.n] = N;
    shape[l.c] = K;
    shape[l.h] = (ph - eh) / wd.stride[0] + 1;
    shape[l.w] = (pw - ew) / wd.stride[1] + 1;

    KILN_TRY(lib_begin(c));
    kiln_ctx          *ctx = c->ctx;
    const char *const *names = l.nhwc ? conv_names_nhwc : conv_names;
    uint32_t           acc = acc_tensor(c, "conv", (enum kiln_dtype)x->dtype, 4, shape);
    if (acc == KILN_NONE)
        return ctx->err.status;
    kiln_expr      ax[4];
    struct lib_red r = {0};
    lib_axes(c, 4, ax);
    int64_t   Cg = C / groups, Kg = K / groups;
    kiln_expr rc = lib_rvar(c, &r, Cg, "rc");
    kiln_expr rh = lib_rvar(c, &r, KH, "rh");
    kiln_expr rw = lib_rvar(c, &r, KW, "rw");
    kiln_expr ic =
        groups == 1
            ? rc
            : kiln_add(ctx,
                       kiln_mul(ctx, kiln_floordiv(ctx, ax[l.c], lib_idx(c, Kg)), lib_idx(c, Cg)),
                       rc);
    kiln_expr cond = kiln_bool(ctx, true);
    kiln_expr ih = lib_window_idx(c, &cond, ax[l.h], rh, H, shape[l.h], KH, wd.stride[0], wd.dil[0],
                                  wd.pad[0]);
    kiln_expr iw = lib_window_idx(c, &cond, ax[l.w], rw, W, shape[l.w], KW, wd.stride[1], wd.dil[1],
                                  wd.pad[1]);
    kiln_expr xi[4], wi[4] = {ax[l.c], rc, rh, rw};
    xi[l.n] = ax[l.n];
    xi[l.c] = ic;
    xi[l.h] = ih;
    xi[l.w] = iw;
    kiln_expr xv =
        kiln_select(ctx, cond, lib_load(c, 0, xi), lib_f(c, 0, (enum kiln_dtype)x->dtype));
    KILN_TRY(lib_define(c, acc, KILN_REDUCE_SUM, &r, kiln_mul(ctx, xv, lib_load(c, 1, wi)), names));
    return add_bias(c, acc, l.c, names);
}

/* ---- conv2d_transpose ---- */

/* Input row for output row o and kernel tap r: (o + pad_lo - r*dil) / stride when divisible
 * and inside [0, in). */
static kiln_expr
transposed_idx(struct libcall *c, kiln_expr *cond, kiln_expr o, kiln_expr r, int64_t in,
               int64_t out, int64_t k, int64_t stride, int64_t dil, int64_t pad_lo)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr t =
        kiln_sub(ctx, kiln_add(ctx, o, lib_idx(c, pad_lo)), kiln_mul(ctx, r, lib_idx(c, dil)));
    int64_t lo = pad_lo - (k - 1) * dil, hi = out - 1 + pad_lo;
    *cond = lib_bound(c, *cond, t, lo<0, hi>(in - 1) * stride, (in - 1) * stride + 1);
    if (stride == 1)
        return t;
    *cond = lib_and(
        c, *cond,
        kiln_binary(ctx, KILN_OP_EQ, kiln_floormod(ctx, t, lib_idx(c, stride)), lib_idx(c, 0)));
    return kiln_floordiv(ctx, t, lib_idx(c, stride));
}

enum kiln_status
kiln_lib_conv2d_transpose(struct libcall *c)
{
    static const char *const attrs[] = {"stride",   "padding", "output_padding",
                                        "dilation", "groups",  NULL};
    struct lib_window        wd;
    int64_t                  groups, opad[2];
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_window(c, &wd, false));
    KILN_TRY(lib_get_pair(c, "output_padding", 0, opad));
    KILN_TRY(lib_check_min(c, "output_padding", opad, 2, 0));
    KILN_TRY(lib_get_int(c, "groups", 1, &groups));
    KILN_TRY(lib_check_min(c, "groups", &groups, 1, 1));
    for (int d = 0; d < 2; d++)
        if (opad[d] >= wd.stride[d] && opad[d] >= wd.dil[d])
            return lib_fail_attr(c, lib_attr(c, "output_padding"),
                                 "output_padding %lld must be smaller than stride %lld or "
                                 "dilation %lld",
                                 (long long)opad[d], (long long)wd.stride[d], (long long)wd.dil[d]);
    KILN_TRY(lib_want_rank(c, 0, 4, "input", "[N, C, H, W]"));
    KILN_TRY(lib_want_rank(c, 1, 4, "weight", "[C, K/groups, KH, KW]"));
    const struct kiln_tensor *x = lib_in(c, 0), *w = lib_in(c, 1);
    KILN_TRY(common_checks(c));
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t Kg = w->shape[1], KH = w->shape[2], KW = w->shape[3];
    if (C % groups)
        return lib_fail(c, "input %s has %lld channels, not divisible by groups %lld",
                        lib_in_name(c, 0), (long long)C, (long long)groups);
    if (w->shape[0] != C)
        return lib_fail(c, "input %s has %lld channels but weight %s expects %lld",
                        lib_in_name(c, 0), (long long)C, lib_in_name(c, 1), (long long)w->shape[0]);
    bool    ovf = false;
    int64_t K = lib_ck_mul(&ovf, Kg, groups);
    if (ovf)
        return lib_fail_overflow(c, (const char *const[]){"groups", NULL});
    KILN_TRY(check_bias(c, K, "channels"));
    int64_t o[2], in[2] = {H, W}, k[2] = {KH, KW};
    for (int d = 0; d < 2; d++) {
        /* (in - 1) * stride - pad_lo - pad_hi + dil * (k - 1) + output_padding + 1 */
        int64_t e = lib_ck_mul(&ovf, in[d] - 1, wd.stride[d]);
        e = lib_ck_sub(&ovf, lib_ck_sub(&ovf, e, wd.pad[d]), wd.pad[d + 2]);
        e = lib_ck_add(&ovf, e, lib_ck_mul(&ovf, wd.dil[d], k[d] - 1));
        o[d] = lib_ck_add(&ovf, lib_ck_add(&ovf, e, opad[d]), 1);
    }
    if (ovf)
        return lib_fail_overflow(
            c, (const char *const[]){"padding", "stride", "dilation", "output_padding", NULL});
    int64_t oh = o[0], ow = o[1];
    if (oh < 1 || ow < 1)
        return lib_fail(c, "padding leaves an empty output (%lldx%lld) for input %s of %lldx%lld",
                        (long long)oh, (long long)ow, lib_in_name(c, 0), (long long)H,
                        (long long)W);
    int64_t shape[4] = {N, K, oh, ow};

    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    uint32_t  acc = acc_tensor(c, "conv", (enum kiln_dtype)x->dtype, 4, shape);
    if (acc == KILN_NONE)
        return ctx->err.status;
    kiln_expr      ax[4];
    struct lib_red r = {0};
    lib_axes(c, 4, ax);
    int64_t   Cg = C / groups;
    kiln_expr rc = lib_rvar(c, &r, Cg, "rc");
    kiln_expr rh = lib_rvar(c, &r, KH, "rh");
    kiln_expr rw = lib_rvar(c, &r, KW, "rw");
    kiln_expr ic = rc, wk = ax[1];
    if (groups > 1) {
        ic = kiln_add(ctx, kiln_mul(ctx, kiln_floordiv(ctx, ax[1], lib_idx(c, Kg)), lib_idx(c, Cg)),
                      rc);
        wk = kiln_floormod(ctx, ax[1], lib_idx(c, Kg));
    }
    kiln_expr cond = kiln_bool(ctx, true);
    kiln_expr ih =
        transposed_idx(c, &cond, ax[2], rh, H, oh, KH, wd.stride[0], wd.dil[0], wd.pad[0]);
    kiln_expr iw =
        transposed_idx(c, &cond, ax[3], rw, W, ow, KW, wd.stride[1], wd.dil[1], wd.pad[1]);
    kiln_expr xi[4] = {ax[0], ic, ih, iw}, wi[4] = {ic, wk, rh, rw};
    kiln_expr xv =
        kiln_select(ctx, cond, lib_load(c, 0, xi), lib_f(c, 0, (enum kiln_dtype)x->dtype));
    KILN_TRY(
        lib_define(c, acc, KILN_REDUCE_SUM, &r, kiln_mul(ctx, xv, lib_load(c, 1, wi)), conv_names));
    return add_bias(c, acc, 1, conv_names);
}

/* ---- dense ---- */

enum kiln_status
kiln_lib_dense(struct libcall *c)
{
    static const char *const no_attrs[] = {NULL};
    KILN_TRY(lib_allow(c, no_attrs));
    const struct kiln_tensor *x = lib_in(c, 0), *w = lib_in(c, 1);
    if (x->ndim < 1)
        return lib_fail(c, "input %s must have at least 1 dimension [..., K], got []",
                        lib_in_name(c, 0));
    KILN_TRY(lib_want_rank(c, 1, 2, "weight", "[M, K]"));
    KILN_TRY(common_checks(c));
    int64_t K = x->shape[x->ndim - 1], M = w->shape[0];
    if (w->shape[1] != K)
        return lib_fail(c, "input %s has %lld features but weight %s expects %lld",
                        lib_in_name(c, 0), (long long)K, lib_in_name(c, 1), (long long)w->shape[1]);
    KILN_TRY(check_bias(c, M, "features"));
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    shape[x->ndim - 1] = M;

    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    uint32_t  n = x->ndim;
    uint32_t  acc = acc_tensor(c, "matmul", (enum kiln_dtype)x->dtype, n, shape);
    if (acc == KILN_NONE)
        return ctx->err.status;
    const char    *names[KILN_MAX_DIMS];
    kiln_expr      ax[KILN_MAX_DIMS], xi[KILN_MAX_DIMS];
    struct lib_red r = {0};
    lib_generic_names(n - 1, names, "jk");
    names[n - 1] = "j";
    lib_axes(c, n, ax);
    kiln_expr k = lib_rvar(c, &r, K, "k");
    memcpy(xi, ax, sizeof(kiln_expr) * n);
    xi[n - 1] = k;
    kiln_expr wi[2] = {ax[n - 1], k};
    KILN_TRY(lib_define(c, acc, KILN_REDUCE_SUM, &r,
                        kiln_mul(ctx, lib_load(c, 0, xi), lib_load(c, 1, wi)), names));
    return add_bias(c, acc, n - 1, names);
}

/* ---- matmul (NumPy) ---- */

enum kiln_status
kiln_lib_matmul(struct libcall *c)
{
    static const char *const no_attrs[] = {NULL};
    KILN_TRY(lib_allow(c, no_attrs));
    const struct kiln_tensor *a = lib_in(c, 0), *b = lib_in(c, 1);
    for (uint32_t i = 0; i < 2; i++)
        if (lib_in(c, i)->ndim < 1)
            return lib_fail(c, "input %s is a scalar; matmul needs at least 1 dimension",
                            lib_in_name(c, i));
    KILN_TRY(common_checks(c));
    uint32_t na = a->ndim, nb = b->ndim;
    int64_t  ka = a->shape[na - 1], kb = nb == 1 ? b->shape[0] : b->shape[nb - 2];
    char     sa[LIB_SHAPE_BUF], sb[LIB_SHAPE_BUF];
    if (ka != kb)
        return lib_fail(c, "inner dimensions of %s %s and %s %s differ (%lld vs %lld)",
                        lib_in_name(c, 0), lib_shape_str(a->shape, na, sa, sizeof sa),
                        lib_in_name(c, 1), lib_shape_str(b->shape, nb, sb, sizeof sb),
                        (long long)ka, (long long)kb);
    uint32_t bat_a = na >= 2 ? na - 2 : 0, bat_b = nb >= 2 ? nb - 2 : 0, nbat;
    int64_t  shape[KILN_MAX_DIMS + 2];
    if (!lib_bcast_shape(a->shape, bat_a, b->shape, bat_b, shape, &nbat))
        return lib_fail(c, "batch dimensions %s of %s and %s of %s do not broadcast",
                        lib_shape_str(a->shape, bat_a, sa, sizeof sa), lib_in_name(c, 0),
                        lib_shape_str(b->shape, bat_b, sb, sizeof sb), lib_in_name(c, 1));
    uint32_t n = nbat;
    if (na >= 2)
        shape[n++] = a->shape[na - 2];
    if (nb >= 2)
        shape[n++] = b->shape[nb - 1];

    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    uint32_t  t = lib_tensor(c, NULL, (enum kiln_dtype)a->dtype, n, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    const char    *names[KILN_MAX_DIMS];
    kiln_expr      ax[KILN_MAX_DIMS], ia[KILN_MAX_DIMS], ib[KILN_MAX_DIMS];
    struct lib_red r = {0};
    lib_generic_names(nbat, names, "ijk");
    lib_axes(c, n, ax);
    kiln_expr k = lib_rvar(c, &r, ka, "k");
    lib_bcast_idx(c, a->shape, bat_a, shape, nbat, ax, ia);
    lib_bcast_idx(c, b->shape, bat_b, shape, nbat, ax, ib);
    uint32_t o = nbat;
    if (na >= 2) {
        names[o] = "i";
        ia[bat_a] = ax[o++];
    }
    ia[na - 1] = k;
    ib[bat_b] = k;
    if (nb >= 2) {
        names[o] = "j";
        ib[bat_b + 1] = ax[o++];
    }
    return lib_define(c, t, KILN_REDUCE_SUM, &r,
                      kiln_mul(ctx, lib_load(c, 0, ia), lib_load(c, 1, ib)), names);
}

/* ---- batch_matmul ---- */

enum kiln_status
kiln_lib_batch_matmul(struct libcall *c)
{
    static const char *const attrs[] = {"transpose_a", "transpose_b", NULL};
    bool                     ta, tb;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_bool(c, "transpose_a", false, &ta));
    KILN_TRY(lib_get_bool(c, "transpose_b", false, &tb));
    KILN_TRY(lib_want_rank(c, 0, 3, "input", ta ? "[B, K, M]" : "[B, M, K]"));
    KILN_TRY(lib_want_rank(c, 1, 3, "input", tb ? "[B, N, K]" : "[B, K, N]"));
    KILN_TRY(common_checks(c));
    const struct kiln_tensor *a = lib_in(c, 0), *b = lib_in(c, 1);
    if (a->shape[0] != b->shape[0])
        return lib_fail(c, "batch sizes of %s (%lld) and %s (%lld) differ", lib_in_name(c, 0),
                        (long long)a->shape[0], lib_in_name(c, 1), (long long)b->shape[0]);
    int64_t M = a->shape[ta ? 2 : 1], ka = a->shape[ta ? 1 : 2];
    int64_t N = b->shape[tb ? 1 : 2], kb = b->shape[tb ? 2 : 1];
    if (ka != kb)
        return lib_fail(c, "%s has inner dimension %lld but %s has %lld", lib_in_name(c, 0),
                        (long long)ka, lib_in_name(c, 1), (long long)kb);
    int64_t shape[3] = {a->shape[0], M, N};

    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    uint32_t  t = lib_tensor(c, NULL, (enum kiln_dtype)a->dtype, 3, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    static const char *const names[] = {"n", "i", "j"};
    kiln_expr                ax[3];
    struct lib_red           r = {0};
    lib_axes(c, 3, ax);
    kiln_expr k = lib_rvar(c, &r, ka, "k");
    kiln_expr ia[3] = {ax[0], ta ? k : ax[1], ta ? ax[1] : k};
    kiln_expr ib[3] = {ax[0], tb ? ax[2] : k, tb ? k : ax[2]};
    return lib_define(c, t, KILN_REDUCE_SUM, &r,
                      kiln_mul(ctx, lib_load(c, 0, ia), lib_load(c, 1, ib)), names);
}

/* ---- einsum ---- */

#define NLETTER  52 /* a-z, A-Z */
#define NLABEL   (NLETTER + KILN_MAX_DIMS)
#define ELL_BASE NLETTER /* labels of the dimensions under '...', right-aligned */

static int
letter_label(char ch)
{
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a';
    if (ch >= 'A' && ch <= 'Z')
        return 26 + (ch - 'A');
    return -1;
}

/* One term of the equation: its labels, with ELL (-2) standing for '...'. */
#define ELL -2
struct term {
    int      lab[KILN_MAX_DIMS + 1];
    uint32_t n;
    bool     has_ell;
};

/* Parses the letters and '...' of one term (spaces ignored) from s[0..len). */
static enum kiln_status
parse_term(struct libcall *c, const char *s, size_t len, const char *what, struct term *t)
{
    const struct kiln_attr *ea = lib_attr(c, "eq");
    uint32_t                nlet = 0;
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ')
            continue;
        int l = letter_label(s[i]);
        if (s[i] == '.') {
            if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
                return lib_fail_attr(c, ea, "'.' in equation must be part of '...'");
            if (t->has_ell)
                return lib_fail_attr(c, ea, "%s has more than one '...'", what);
            t->has_ell = true;
            l = ELL;
            i += 2;
        } else if (l < 0) {
            return lib_fail_attr(c, ea, "invalid character '%c' in equation", s[i]);
        }
        if (l != ELL && nlet++ == KILN_MAX_DIMS)
            return lib_fail_attr(c, ea, "%s has more than %d indices", what, KILN_MAX_DIMS);
        t->lab[t->n++] = l;
    }
    return KILN_OK;
}

static char
label_char(int l)
{
    return (char)(l < 26 ? 'a' + l : 'A' + (l - 26));
}

enum kiln_status
kiln_lib_einsum(struct libcall *c)
{
    static const char *const attrs[] = {"eq", NULL};
    const char              *eq;
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(lib_get_string(c, "eq", NULL, &eq));
    if (!eq)
        return lib_fail(c, "missing attribute eq");
    const struct kiln_attr *ea = lib_attr(c, "eq");
    KILN_TRY(lib_same_dtype(c));
    KILN_TRY(lib_want_numeric(c, 0));

    /* split "lhs->rhs" and the lhs at commas */
    const char *arrow = strstr(eq, "->");
    size_t      lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    uint32_t    nterm = 1;
    for (size_t i = 0; i < lhs_len; i++)
        nterm += eq[i] == ',';
    if (nterm != c->nin)
        return lib_fail_attr(c, ea, "equation has %u operand%s but %u input%s given", nterm,
                             nterm == 1 ? "" : "s", c->nin, c->nin == 1 ? " is" : "s are");
    struct term *in = kiln_arena_alloc(c->ctx, sizeof(struct term) * c->nin);
    if (!in)
        return c->ctx->err.status;
    int64_t  size[NLABEL];
    uint32_t count[NLABEL] = {0}, owner[NLABEL] = {0};
    bool     sized[NLABEL] = {0};
    uint32_t nell = 0; /* dimensions under '...' after broadcasting */
    int64_t  ell_size[KILN_MAX_DIMS];
    for (uint32_t k = 0; k < KILN_MAX_DIMS; k++)
        ell_size[k] = 1;
    const char *p = eq;
    for (uint32_t o = 0; o < c->nin; o++) {
        const char *e = p;
        while (e < eq + lhs_len && *e != ',')
            e++;
        char what[32];
        snprintf(what, sizeof what, "operand %u", o);
        KILN_TRY(parse_term(c, p, (size_t)(e - p), what, &in[o]));
        p = e + 1;
        const struct kiln_tensor *t = lib_in(c, o);
        uint32_t                  nlet = in[o].n - (in[o].has_ell ? 1 : 0);
        if (in[o].has_ell ? t->ndim < nlet : t->ndim != nlet)
            return lib_fail_attr(c, ea, "operand %u has %u indices but input %s has rank %u", o,
                                 nlet, lib_in_name(c, o), t->ndim);
        /* expand '...' into this operand's broadcast labels */
        uint32_t my_ell = t->ndim - nlet;
        if (my_ell > nell)
            nell = my_ell;
        struct term x = {.n = 0, .has_ell = in[o].has_ell};
        for (uint32_t i = 0; i < in[o].n; i++) {
            if (in[o].lab[i] != ELL) {
                x.lab[x.n++] = in[o].lab[i];
                continue;
            }
            for (uint32_t k = 0; k < my_ell; k++)
                x.lab[x.n++] = ELL_BASE + (int)(KILN_MAX_DIMS - my_ell + k);
        }
        in[o] = x;
        for (uint32_t d = 0; d < t->ndim; d++) {
            int     l = in[o].lab[d];
            int64_t ext = t->shape[d];
            count[l]++;
            if (l >= ELL_BASE) {
                int64_t *es = &ell_size[l - ELL_BASE];
                if (*es != 1 && ext != 1 && *es != ext)
                    return lib_fail(c,
                                    "dimensions under '...' of input %s do not broadcast "
                                    "(%lld vs %lld)",
                                    lib_in_name(c, o), (long long)ext, (long long)*es);
                if (ext != 1)
                    *es = ext;
                continue;
            }
            for (uint32_t d2 = 0; d2 < d; d2++)
                if (in[o].lab[d2] == l && t->shape[d2] != ext)
                    return lib_fail(c, "index %c has sizes %lld and %lld in input %s",
                                    label_char(l), (long long)t->shape[d2], (long long)ext,
                                    lib_in_name(c, o));
            if (!sized[l] || size[l] == 1) {
                size[l] = ext;
                sized[l] = true;
                owner[l] = o;
            } else if (ext != 1 && ext != size[l]) {
                return lib_fail(c, "index %c has size %lld in input %s but %lld in input %s",
                                label_char(l), (long long)size[l], lib_in_name(c, owner[l]),
                                (long long)ext, lib_in_name(c, o));
            }
        }
    }
    for (uint32_t k = 0; k < KILN_MAX_DIMS; k++) {
        size[ELL_BASE + k] = ell_size[k];
        sized[ELL_BASE + k] = k >= KILN_MAX_DIMS - nell;
    }

    /* output labels */
    int      olab[KILN_MAX_DIMS];
    uint32_t nout = 0;
    bool     in_out[NLABEL] = {0};
    if (arrow) {
        struct term rt;
        KILN_TRY(parse_term(c, arrow + 2, strlen(arrow + 2), "the output", &rt));
        for (uint32_t i = 0; i < rt.n; i++) {
            int l = rt.lab[i];
            if (l == ELL) {
                if (nout + nell > KILN_MAX_DIMS)
                    return lib_fail_attr(c, ea, "the output has more than %d dimensions",
                                         KILN_MAX_DIMS);
                for (uint32_t k = KILN_MAX_DIMS - nell; k < KILN_MAX_DIMS; k++)
                    olab[nout++] = ELL_BASE + (int)k;
                continue;
            }
            if (in_out[l])
                return lib_fail_attr(c, ea, "index %c appears twice in the output", label_char(l));
            if (!sized[l])
                return lib_fail_attr(c, ea, "output index %c does not appear in any input",
                                     label_char(l));
            if (nout == KILN_MAX_DIMS)
                return lib_fail_attr(c, ea, "the output has more than %d dimensions",
                                     KILN_MAX_DIMS);
            olab[nout++] = l;
            in_out[l] = true;
        }
        if (!rt.has_ell && nell)
            return lib_fail_attr(c, ea,
                                 "the inputs have %u dimension%s under '...' but the output has "
                                 "no '...'",
                                 nell, nell == 1 ? "" : "s");
    } else {
        for (uint32_t k = KILN_MAX_DIMS - nell; k < KILN_MAX_DIMS; k++)
            olab[nout++] = ELL_BASE + (int)k;
        for (int l = 26; l < NLETTER + 26; l++) { /* upper case sorts first, as in NumPy */
            int ll = l % NLETTER;
            if (count[ll] == 1) {
                if (nout == KILN_MAX_DIMS)
                    return lib_fail_attr(c, ea, "the output has more than %d dimensions",
                                         KILN_MAX_DIMS);
                olab[nout++] = ll;
            }
        }
    }
    for (uint32_t i = 0; i < nout; i++)
        in_out[olab[i]] = true;
    uint32_t nsum = 0; /* summed labels of size > 1 (size-1 ones need no variable) */
    for (int l = 0; l < NLABEL; l++)
        nsum += sized[l] && !in_out[l] && size[l] > 1;
    if (nsum > KILN_MAX_REDUCE)
        return lib_fail_attr(c, ea, "%u summed indices; at most %d", nsum, KILN_MAX_REDUCE);

    /* variables: output labels are axes, the others are summed */
    KILN_TRY(lib_begin(c));
    kiln_ctx *ctx = c->ctx;
    int64_t   shape[KILN_MAX_DIMS];
    for (uint32_t i = 0; i < nout; i++)
        shape[i] = size[olab[i]];
    uint32_t t = lib_tensor(c, NULL, (enum kiln_dtype)lib_in(c, 0)->dtype, nout, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    kiln_expr      var[NLABEL];
    char           lname[NLABEL][4];
    const char    *names[KILN_MAX_DIMS];
    struct lib_red r = {0};
    for (int l = 0; l < NLABEL; l++) {
        if (l < NLETTER)
            snprintf(lname[l], sizeof lname[l], "%c", label_char(l));
        else
            snprintf(lname[l], sizeof lname[l], "e%d", l - ELL_BASE - (int)(KILN_MAX_DIMS - nell));
    }
    for (uint32_t i = 0; i < nout; i++) {
        var[olab[i]] = kiln_axis(ctx, i);
        names[i] = lname[olab[i]];
    }
    for (uint32_t o = 0; o < c->nin; o++)
        for (uint32_t d = 0; d < in[o].n; d++) {
            int l = in[o].lab[d];
            if (!in_out[l]) {
                in_out[l] = true; /* now bound */
                var[l] = lib_rvar(c, &r, size[l], lname[l]);
            }
        }
    kiln_expr body = {0};
    for (uint32_t o = 0; o < c->nin; o++) {
        const struct kiln_tensor *ti = lib_in(c, o);
        kiln_expr                 idx[KILN_MAX_DIMS];
        for (uint32_t d = 0; d < in[o].n; d++) {
            int l = in[o].lab[d];
            idx[d] = ti->shape[d] == 1 && size[l] != 1 ? lib_idx(c, 0) : var[l];
        }
        kiln_expr v = lib_load(c, o, idx);
        body = o ? kiln_mul(ctx, body, v) : v;
    }
    return lib_define(c, t, KILN_REDUCE_SUM, &r, body, names);
}
