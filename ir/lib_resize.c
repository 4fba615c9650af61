/* ir/lib_resize.c -- resize: nearest, N-linear and cubic interpolation of a tensor to a new
 * shape, with ONNX Resize's coordinate transformations.
 *
 * One elementwise compute definition over the output's axes. Each output coordinate o of a
 * resized axis maps to a coordinate x in the input (the coordinate transformation, computed in
 * f64 in the same order of operations as ONNX's reference implementation, so that nearest
 * rounding agrees with it exactly); the interpolation then reads taps around floor(x) with
 * weights that depend on r = x - floor(x) only:
 *
 *     nearest  1 tap:  floor(x), or floor(x) + 1 when nearest_mode says to round up
 *     linear   2 taps: floor(x) + 0, + 1 with weights 1 - r, r
 *     cubic    4 taps: floor(x) - 1 .. + 2 with Keys' weights for coefficient a
 *
 * (the first tap and r computed exactly as the reference finds them, which differs from this
 * only where x lies within rounding of an integer; antialias widens a downscaling axis's
 * filter by 1 / scale)
 *
 * Every tap index is clamped to [0, n-1] (ONNX's reference pads the input with its edge
 * values), so every load is provably in range for the static bounds check. The axes combine
 * as the reference does: a weighted sum over the first resized axis of weighted sums over the
 * next, in f64, cast to the output dtype at the end. An axis whose transformation maps every
 * output coordinate to itself (the same extent, scale 1) is read directly. */
#include "lib_impl.h"

#include <math.h>
#include <string.h>

#define NIL ((kiln_expr){0})

enum rs_mode { RS_NEAREST, RS_LINEAR, RS_CUBIC };
enum rs_coord { CT_HALF, CT_HALF_SYM, CT_PYTORCH, CT_ALIGN, CT_ASYM, CT_TF };
enum rs_round { NR_PREFER_FLOOR, NR_PREFER_CEIL, NR_FLOOR, NR_CEIL };

static const char *const mode_names[] = {"nearest", "linear", "cubic", NULL};
static const char *const coord_names[] = {"half_pixel",
                                          "half_pixel_symmetric",
                                          "pytorch_half_pixel",
                                          "align_corners",
                                          "asymmetric",
                                          "tf_crop_and_resize",
                                          NULL};
static const char *const round_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil", NULL};

/* The most taps one output element may read (4 per cubic axis). */
#define RS_MAX_TAPS 1024
/* The most taps of one axis (an antialiasing downscale widens the filter by 1 / scale). */
#define RS_AXIS_TAPS 64

struct rs_axis {
    int64_t in, out;
    double  scale;  /* output / input coordinate ratio */
    double  ow;     /* scale * in: the output width as ONNX's reference computes it */
    double  r0, r1; /* region of interest (tf_crop_and_resize), fractions of the input */
    bool    ident;  /* every output coordinate maps onto itself */
};

struct rs {
    enum rs_mode   mode;
    enum rs_coord  ct;
    enum rs_round  nr;
    double         a, extrap;
    bool           exclude, antialias;
    uint32_t       rank;
    struct rs_axis ax[KILN_MAX_DIMS];
};

/* Index of s in names (NULL-terminated), or fails naming the attribute and the choices. */
static enum kiln_status
get_choice(struct libcall *c, const char *attr, const char *const *names, uint32_t *out)
{
    const char *s;
    KILN_TRY(lib_get_string(c, attr, names[0], &s));
    for (uint32_t i = 0; names[i]; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return KILN_OK;
        }
    char   buf[200];
    size_t n = 0;
    for (uint32_t i = 0; names[i] && n < sizeof buf; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\"%s\"", i ? ", " : "", names[i]);
    return lib_fail_attr(c, lib_attr(c, attr), "attribute %s is \"%s\"; one of %s", attr, s, buf);
}

/* The input coordinate of output coordinate o along axis a, in C (the same operations as
 * coord_expr builds): used to find the identity axes. */
static double
coord_c(const struct rs *s, const struct rs_axis *a, int64_t o)
{
    double x = (double)o;
    switch (s->ct) {
    case CT_HALF:
        return (x + 0.5) / a->scale - 0.5;
    case CT_HALF_SYM: {
        double adj = (double)a->out / a->ow, center = (double)a->in / 2;
        return (center * (1 - adj) + (x + 0.5) / a->scale) - 0.5;
    }
    case CT_PYTORCH:
        return a->ow == 1 ? -0.5 : (x + 0.5) / a->scale - 0.5;
    case CT_ALIGN:
        return a->ow == 1 ? 0.0 : (double)(o * (a->in - 1)) / (a->ow - 1);
    case CT_ASYM:
        return x / a->scale;
    case CT_TF:
        return (a->ow == 1 ? (a->r1 - a->r0) * (double)(a->in - 1) / 2
                           : x * (a->r1 - a->r0) * (double)(a->in - 1) / (a->ow - 1))
               + a->r0 * (double)(a->in - 1);
    }
    return x;
}

static kiln_expr
f64(struct libcall *c, double v)
{
    return lib_f(c, v, KILN_DTYPE_F64);
}

/* coord_c as an f64 expression of the output axis o. */
static kiln_expr
coord_expr(struct libcall *c, const struct rs *s, const struct rs_axis *a, kiln_expr o)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr x = kiln_cast(ctx, KILN_DTYPE_F64, o);
    kiln_expr half =
        kiln_sub(ctx, kiln_div(ctx, kiln_add(ctx, x, f64(c, 0.5)), f64(c, a->scale)), f64(c, 0.5));
    switch (s->ct) {
    case CT_HALF:
        return half;
    case CT_HALF_SYM: {
        double    adj = (double)a->out / a->ow, center = (double)a->in / 2;
        kiln_expr q = kiln_div(ctx, kiln_add(ctx, x, f64(c, 0.5)), f64(c, a->scale));
        return kiln_sub(ctx, kiln_add(ctx, f64(c, center * (1 - adj)), q), f64(c, 0.5));
    }
    case CT_PYTORCH:
        return a->ow == 1 ? f64(c, -0.5) : half;
    case CT_ALIGN:
        if (a->ow == 1)
            return f64(c, 0);
        return kiln_div(ctx,
                        kiln_cast(ctx, KILN_DTYPE_F64, kiln_mul(ctx, o, lib_idx(c, a->in - 1))),
                        f64(c, a->ow - 1));
    case CT_ASYM:
        return kiln_div(ctx, x, f64(c, a->scale));
    case CT_TF: {
        kiln_expr t;
        if (a->ow == 1)
            t = f64(c, (a->r1 - a->r0) * (double)(a->in - 1) / 2);
        else
            t = kiln_div(
                ctx,
                kiln_mul(ctx, kiln_mul(ctx, x, f64(c, a->r1 - a->r0)), f64(c, (double)(a->in - 1))),
                f64(c, a->ow - 1));
        return kiln_add(ctx, t, f64(c, a->r0 * (double)(a->in - 1)));
    }
    }
    return x;
}

/* Keys' cubic weight of tap k (0..3, at floor(x) - 1 + k) for r = x - floor(x), written as
 * ONNX's reference writes it. */
static kiln_expr
cubic_w(struct libcall *c, double a, kiln_expr r, uint32_t k)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr one = f64(c, 1), t = k < 2 ? r : kiln_sub(ctx, one, r);
    if (k == 0 || k == 3) { /* ((a(t+1) - 5a)(t+1) + 8a)(t+1) - 4a */
        kiln_expr t1 = kiln_add(ctx, t, one);
        kiln_expr e = kiln_sub(ctx, kiln_mul(ctx, f64(c, a), t1), f64(c, 5 * a));
        e = kiln_add(ctx, kiln_mul(ctx, e, t1), f64(c, 8 * a));
        return kiln_sub(ctx, kiln_mul(ctx, e, t1), f64(c, 4 * a));
    }
    /* ((a+2)t - (a+3)) t t + 1 */
    kiln_expr e = kiln_sub(ctx, kiln_mul(ctx, f64(c, a + 2), t), f64(c, a + 3));
    return kiln_add(ctx, kiln_mul(ctx, kiln_mul(ctx, e, t), t), one);
}

/* The taps of a linear or cubic axis: their count, and in *first the offset of the first from
 * floor(x). With antialias, a downscaling axis (scale s < 1) stretches the filter by 1 / s as
 * ONNX's reference does: linear taps from floor(-1/s) + 1, cubic from floor(-2/s) + 1, as many
 * on either side of x. */
static uint32_t
axis_ntaps(const struct rs *s, const struct rs_axis *a, int64_t *first)
{
    if (!s->antialias || a->scale >= 1) {
        *first = s->mode == RS_LINEAR ? 0 : -1;
        return s->mode == RS_LINEAR ? 2 : 4;
    }
    double start = floor((s->mode == RS_LINEAR ? -1 : -2) / a->scale) + 1;
    if (start < 1 - RS_AXIS_TAPS / 2) {
        *first = 0;
        return RS_AXIS_TAPS + 1; /* too many: refused */
    }
    *first = (int64_t)start;
    return (uint32_t)(2 - 2 * *first);
}

/* The antialiasing weight (before normalisation) of the tap at floor(x) + off, for
 * r = x - floor(x): the linear or cubic kernel at (off - r) * min(scale, 1). */
static kiln_expr
aa_w(struct libcall *c, const struct rs *s, const struct rs_axis *a, kiln_expr r, int64_t off)
{
    kiln_ctx *ctx = c->ctx;
    double    sc = a->scale < 1 ? a->scale : 1, A = s->a;
    kiln_expr t = kiln_mul(ctx, kiln_sub(ctx, f64(c, (double)off), r), f64(c, sc));
    kiln_expr x = kiln_unary(ctx, KILN_OP_ABS, t);
    if (s->mode == RS_LINEAR) /* clip(1 - |t|, 0, 1) */
        return kiln_max(ctx, kiln_min(ctx, kiln_sub(ctx, f64(c, 1), x), f64(c, 1)), f64(c, 0));
    kiln_expr x2 = kiln_mul(ctx, x, x), x3 = kiln_mul(ctx, x, x2);
    kiln_expr p1 = kiln_add(
        ctx, kiln_sub(ctx, kiln_mul(ctx, f64(c, A + 2), x3), kiln_mul(ctx, f64(c, A + 3), x2)),
        f64(c, 1));
    kiln_expr p2 = kiln_sub(
        ctx,
        kiln_add(ctx, kiln_sub(ctx, kiln_mul(ctx, f64(c, A), x3), kiln_mul(ctx, f64(c, 5 * A), x2)),
                 kiln_mul(ctx, f64(c, 8 * A), x)),
        f64(c, 4 * A));
    return kiln_select(ctx, kiln_le(ctx, x, f64(c, 1)), p1,
                       kiln_select(ctx, kiln_lt(ctx, x, f64(c, 2)), p2, f64(c, 0)));
}

/* The taps of one axis: indices (clamped) and weights (f64; nil for nearest). */
struct rs_taps {
    uint32_t  n;
    kiln_expr idx[RS_AXIS_TAPS], w[RS_AXIS_TAPS];
};

static void
axis_taps(struct libcall *c, const struct rs *s, const struct rs_axis *a, kiln_expr o, kiln_expr x,
          struct rs_taps *tp)
{
    kiln_ctx *ctx = c->ctx;
    kiln_expr zero = lib_idx(c, 0), last = lib_idx(c, a->in - 1);
    if (a->ident) {
        tp->n = 1;
        tp->idx[0] = o;
        tp->w[0] = NIL;
        return;
    }
    /* As ONNX's reference: the n taps are the n nearest indices to x + n/2 in the input padded
     * by n/2 (ties to the lower), so the first is ceil(x + n/2) - n (the sum rounded in f64);
     * the weights read ratio = x - floor(x), or 1 where x is an integer. */
    int64_t   first;
    uint32_t  n = s->mode == RS_NEAREST ? 2 : axis_ntaps(s, a, &first);
    kiln_expr xp = kiln_add(ctx, x, f64(c, (double)(n / 2)));
    kiln_expr cl = kiln_unary(ctx, KILN_OP_NEG,
                              kiln_unary(ctx, KILN_OP_FLOOR, kiln_unary(ctx, KILN_OP_NEG, xp)));
    kiln_expr base = kiln_sub(ctx, kiln_cast(ctx, KILN_DTYPE_I64, cl), lib_idx(c, (int64_t)n));
    kiln_expr rr = kiln_sub(ctx, x, kiln_unary(ctx, KILN_OP_FLOOR, x));
    kiln_expr whole = kiln_binary(ctx, KILN_OP_EQ, rr, f64(c, 0));
    kiln_expr r = kiln_select(ctx, whole, f64(c, 1), rr);
    if (s->mode == RS_NEAREST) { /* the lower or the upper of the two taps */
        kiln_expr up;
        switch (s->nr) {
        case NR_PREFER_FLOOR:
            up = kiln_lt(ctx, f64(c, 0.5), r);
            break;
        case NR_PREFER_CEIL:
            up = kiln_le(ctx, f64(c, 0.5), r);
            break;
        case NR_FLOOR:
            up = whole;
            break;
        default:
            up = kiln_bool(ctx, true);
            break;
        }
        kiln_expr i = kiln_add(ctx, base, kiln_select(ctx, up, lib_idx(c, 1), zero));
        tp->n = 1;
        tp->idx[0] = kiln_min(ctx, kiln_max(ctx, i, zero), last);
        tp->w[0] = NIL;
        return;
    }
    tp->n = n;
    bool      aa = s->antialias && a->scale < 1;
    kiln_expr sum = NIL;
    for (uint32_t k = 0; k < tp->n; k++) {
        kiln_expr i = kiln_add(ctx, base, lib_idx(c, (int64_t)k));
        tp->idx[k] = kiln_min(ctx, kiln_max(ctx, i, zero), last);
        if (aa)
            tp->w[k] = aa_w(c, s, a, r, first + (int64_t)k);
        else
            tp->w[k] = s->mode == RS_CUBIC ? cubic_w(c, s->a, r, k)
                       : k == 0            ? kiln_sub(ctx, f64(c, 1), r)
                                           : r;
        if (s->exclude) { /* taps outside the input weigh 0; the rest are renormalised */
            kiln_expr inside =
                kiln_and(ctx, kiln_le(ctx, zero, i), kiln_lt(ctx, i, lib_idx(c, a->in)));
            tp->w[k] = kiln_select(ctx, inside, tp->w[k], f64(c, 0));
        }
        if (aa || s->exclude)
            sum = k ? kiln_add(ctx, sum, tp->w[k]) : tp->w[k];
    }
    if (aa || s->exclude)
        for (uint32_t k = 0; k < tp->n; k++)
            tp->w[k] = kiln_div(ctx, tp->w[k], sum);
}

/* The weighted sum over axes d.. of the input read at idx (entries before d fixed). */
static kiln_expr
interp(struct libcall *c, const struct rs *s, const struct rs_taps *tp, uint32_t d, kiln_expr *idx)
{
    kiln_ctx *ctx = c->ctx;
    if (d == s->rank) {
        kiln_expr v = lib_load(c, 0, idx);
        return s->mode == RS_NEAREST ? v : kiln_cast(ctx, KILN_DTYPE_F64, v);
    }
    if (tp[d].n == 1) {
        idx[d] = tp[d].idx[0];
        return interp(c, s, tp, d + 1, idx);
    }
    kiln_expr sum = NIL;
    for (uint32_t k = 0; k < tp[d].n; k++) {
        idx[d] = tp[d].idx[k];
        kiln_expr t = kiln_mul(ctx, tp[d].w[k], interp(c, s, tp, d + 1, idx));
        sum = k ? kiln_add(ctx, sum, t) : t;
    }
    return sum;
}

/* Reads the attributes into s and the output shape into shape. */
static enum kiln_status
get_params(struct libcall *c, struct rs *s, int64_t *shape)
{
    const struct kiln_tensor *x = lib_in(c, 0);
    const int64_t            *sizes, *scales, *roi;
    uint32_t                  nsizes, nscales, nroi, u;
    bool                      given_sizes, given_scales, given_roi;
    int64_t                   scale_den, roi_den, exclude, antialias;
    KILN_TRY(get_choice(c, "mode", mode_names, &u));
    s->mode = (enum rs_mode)u;
    KILN_TRY(get_choice(c, "coordinate_transformation_mode", coord_names, &u));
    s->ct = (enum rs_coord)u;
    KILN_TRY(get_choice(c, "nearest_mode", round_names, &u));
    s->nr = (enum rs_round)u;
    KILN_TRY(lib_get_float(c, "cubic_coeff_a", -0.75, &s->a));
    KILN_TRY(lib_get_float(c, "extrapolation_value", 0, &s->extrap));
    KILN_TRY(lib_get_int(c, "exclude_outside", 0, &exclude));
    if (exclude != 0 && exclude != 1)
        return lib_fail_attr(c, lib_attr(c, "exclude_outside"),
                             "attribute exclude_outside must be 0 or 1");
    s->exclude = exclude == 1 && s->mode != RS_NEAREST;
    KILN_TRY(lib_get_int(c, "antialias", 0, &antialias));
    if (antialias != 0 && antialias != 1)
        return lib_fail_attr(c, lib_attr(c, "antialias"), "attribute antialias must be 0 or 1");
    s->antialias = antialias == 1 && s->mode != RS_NEAREST;
    KILN_TRY(lib_get_list(c, "sizes", &sizes, &nsizes, &given_sizes));
    KILN_TRY(lib_get_list(c, "scales", &scales, &nscales, &given_scales));
    KILN_TRY(lib_get_list(c, "roi", &roi, &nroi, &given_roi));
    KILN_TRY(lib_get_int(c, "scale_den", 1, &scale_den));
    KILN_TRY(lib_get_int(c, "roi_den", 1, &roi_den));
    if (x->ndim == 0)
        return lib_fail(c, "input %s is a scalar; it needs at least 1 dimension",
                        lib_in_name(c, 0));
    if (s->mode != RS_NEAREST)
        KILN_TRY(lib_want_float(c, 0));
    if (!given_sizes)
        return lib_fail(c, "attribute sizes (the output shape) is required");
    if (nsizes != x->ndim)
        return lib_fail_attr(c, lib_attr(c, "sizes"),
                             "attribute sizes has %u entries; input %s has %u dimensions", nsizes,
                             lib_in_name(c, 0), x->ndim);
    KILN_TRY(lib_check_min(c, "sizes", sizes, nsizes, 1));
    if (given_scales && nscales != x->ndim)
        return lib_fail_attr(c, lib_attr(c, "scales"),
                             "attribute scales has %u entries; input %s has %u dimensions", nscales,
                             lib_in_name(c, 0), x->ndim);
    KILN_TRY(lib_check_min(c, "scales", scales, nscales, 1));
    KILN_TRY(lib_check_min(c, "scale_den", &scale_den, 1, 1));
    KILN_TRY(lib_check_min(c, "roi_den", &roi_den, 1, 1));
    if (given_roi && nroi != 2 * x->ndim)
        return lib_fail_attr(c, lib_attr(c, "roi"),
                             "attribute roi has %u entries; input %s has %u dimensions, so %u "
                             "(starts, then ends)",
                             nroi, lib_in_name(c, 0), x->ndim, 2 * x->ndim);
    if (given_roi && s->ct != CT_TF)
        return lib_fail_attr(
            c, lib_attr(c, "roi"),
            "attribute roi applies only to coordinate_transformation_mode \"tf_crop_and_resize\"");
    uint32_t taps = 1;
    s->rank = x->ndim;
    for (uint32_t d = 0; d < x->ndim; d++) {
        struct rs_axis *a = &s->ax[d];
        a->in = x->shape[d];
        a->out = shape[d] = sizes[d];
        a->scale =
            given_scales ? (double)scales[d] / (double)scale_den : (double)a->out / (double)a->in;
        a->ow = a->scale * (double)a->in;
        a->r0 = given_roi ? (double)roi[d] / (double)roi_den : 0;
        a->r1 = given_roi ? (double)roi[x->ndim + d] / (double)roi_den : 1;
        a->ident = a->in == a->out;
        for (int64_t o = 0; a->ident && o < a->out; o++)
            a->ident = coord_c(s, a, o) == (double)o;
        int64_t first;
        if (!a->ident && s->mode != RS_NEAREST)
            taps *= axis_ntaps(s, a, &first);
        if (!a->ident && s->mode != RS_NEAREST && axis_ntaps(s, a, &first) > RS_AXIS_TAPS)
            return lib_fail(c,
                            "antialiasing %s interpolation at scale %g reads more than %d taps "
                            "along axis %u",
                            mode_names[s->mode], a->scale, RS_AXIS_TAPS, d);
        if (taps > RS_MAX_TAPS)
            return lib_fail(c, "%s interpolation over %u axes reads more than %d taps per output",
                            mode_names[s->mode], d + 1, RS_MAX_TAPS);
    }
    return KILN_OK;
}

enum kiln_status
kiln_lib_resize(struct libcall *c)
{
    static const char *const attrs[] = {"sizes",
                                        "scales",
                                        "scale_den",
                                        "mode",
                                        "coordinate_transformation_mode",
                                        "nearest_mode",
                                        "cubic_coeff_a",
                                        "exclude_outside",
                                        "roi",
                                        "roi_den",
                                        "extrapolation_value",
                                        "antialias",
                                        NULL};
    struct rs                s;
    int64_t                  shape[KILN_MAX_DIMS];
    KILN_TRY(lib_allow(c, attrs));
    KILN_TRY(get_params(c, &s, shape));
    KILN_TRY(lib_begin(c));
    kiln_ctx       *ctx = c->ctx;
    enum kiln_dtype dt = (enum kiln_dtype)lib_in(c, 0)->dtype;
    uint32_t        t = lib_tensor(c, NULL, dt, s.rank, shape);
    if (t == KILN_NONE)
        return ctx->err.status;
    kiln_expr      ax[KILN_MAX_DIMS], idx[KILN_MAX_DIMS];
    struct rs_taps tp[KILN_MAX_DIMS];
    kiln_expr      inside = NIL;
    lib_axes(c, s.rank, ax);
    for (uint32_t d = 0; d < s.rank; d++) {
        const struct rs_axis *a = &s.ax[d];
        kiln_expr             x = a->ident ? NIL : coord_expr(c, &s, a, ax[d]);
        axis_taps(c, &s, a, ax[d], x, &tp[d]);
        if (s.ct == CT_TF && !a->ident) /* outside the input: extrapolation_value */
        {
            kiln_expr in = kiln_and(ctx, kiln_le(ctx, f64(c, 0), x),
                                    kiln_le(ctx, x, f64(c, (double)(a->in - 1))));
            inside = inside.id ? kiln_and(ctx, inside, in) : in;
        }
    }
    kiln_expr body = interp(c, &s, tp, 0, idx);
    if (s.mode != RS_NEAREST && dt != KILN_DTYPE_F64)
        body = kiln_cast(ctx, dt, body);
    if (inside.id)
        body = kiln_select(ctx, inside, body, lib_f(c, s.extrap, dt));
    return lib_define(c, t, KILN_REDUCE_NONE, NULL, body, NULL);
}
