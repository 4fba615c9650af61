/* frontend/onnx_resize.c -- ONNX's Resize (opsets 10 to 19) and Upsample (7, 9), onto the
 * library op resize (ir/lib_resize.c).
 *
 * roi, scales and sizes must be constants at import time. ONNX's float scales and roi become
 * the library's exact fractions (numerators over a common power-of-two denominator), so the
 * interpolation sees the very doubles ONNX's reference computes with. The output extent of a
 * scaled axis is floor(in * scale), as the reference computes it. Resize 10 and Upsample are
 * asymmetric; their nearest mode is defined (by ONNX's reference) for integer scales only,
 * where it repeats each element: a fractional nearest scale is refused. antialias (opset 18)
 * goes to the library op (a downscaling linear or cubic axis reads a filter widened by
 * 1 / scale). One handler per row of frontend/onnx.def. */
#include "onnx_impl.h"

#include <math.h>
#include <string.h>

/* Floats of constant input i (or of an attribute), as doubles: a runtime input is a
 * dynamic-shape error. *n = 0 for an empty tensor (an absent input, as ONNX writes it). */
static bool
const_floats(struct onnx_imp *m, struct onnx_value *v, uint32_t i, const char *what, double *out,
             uint32_t *n, uint32_t cap)
{
    if (!v->is_const) {
        UNSUP(m,
              "dynamic shape: input %u (%s, '%s') must be a constant initializer or Constant "
              "output",
              i, what, v->name);
        return false;
    }
    if (v->c.numel > cap) {
        BAD(m, "input %u (%s) has %lld values; at most %u", i, what, (long long)v->c.numel, cap);
        return false;
    }
    for (int64_t k = 0; k < v->c.numel; k++)
        out[k] = v->c.data[k];
    *n = (uint32_t)v->c.numel;
    return true;
}

/* v[0..n) as exact fractions num[k] / *den over a common power-of-two denominator: false when
 * one is not finite or they need more than 62 bits. */
static bool
fractions(const double *v, uint32_t n, int64_t *num, int64_t *den)
{
    for (int k = 0; k <= 62; k++) {
        double d = ldexp(1, k);
        bool   ok = true;
        for (uint32_t i = 0; i < n && ok; i++) {
            double t = v[i] * d;
            ok = isfinite(t) && fabs(t) < 0x1p62 && t == floor(t);
        }
        if (ok) {
            for (uint32_t i = 0; i < n; i++)
                num[i] = (int64_t)(v[i] * d);
            *den = (int64_t)d;
            return true;
        }
    }
    return false;
}

/* What a Resize or Upsample node asks for, per dimension of x. */
struct rs_node {
    uint32_t    rank;
    const char *mode, *ct, *nr;
    int64_t     sizes[KILN_MAX_DIMS];
    bool        has_scales; /* else each scale is sizes / in */
    double      scales[KILN_MAX_DIMS];
    int64_t     snum[KILN_MAX_DIMS], sden; /* the scales as exact fractions */
    bool        has_roi;
    double      roi[2 * KILN_MAX_DIMS];
};

/* The library call for r. */
static enum kiln_status
emit(struct onnx_imp *m, const struct rs_node *r)
{
    struct onnx_attrs as = {0};
    int64_t          *v = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 5 * KILN_MAX_DIMS);
    if (!v)
        return m->ctx->err.status;
    int64_t *sizes = v, *scales = v + KILN_MAX_DIMS, *roi = v + 2 * KILN_MAX_DIMS, rden;
    memcpy(sizes, r->sizes, sizeof(int64_t) * r->rank);
    onnx_at_ints(m, &as, "sizes", sizes, r->rank);
    if (r->has_scales) {
        memcpy(scales, r->snum, sizeof(int64_t) * r->rank);
        onnx_at_ints(m, &as, "scales", scales, r->rank);
        onnx_at_int(m, &as, "scale_den", r->sden);
    }
    onnx_at_str(m, &as, "mode", r->mode);
    onnx_at_str(m, &as, "coordinate_transformation_mode", r->ct);
    if (!strcmp(r->mode, "nearest"))
        onnx_at_str(m, &as, "nearest_mode", r->nr);
    if (strcmp(r->mode, "nearest") && onnx_attr_int(m, "antialias", 0))
        onnx_at_int(m, &as, "antialias", 1);
    if (!strcmp(r->mode, "cubic")) {
        onnx_at_float(m, &as, "cubic_coeff_a", onnx_attr_float(m, "cubic_coeff_a", -0.75));
        onnx_at_int(m, &as, "exclude_outside", onnx_attr_int(m, "exclude_outside", 0) != 0);
    }
    if (!strcmp(r->ct, "tf_crop_and_resize")) {
        if (r->has_roi) {
            if (!fractions(r->roi, 2 * r->rank, roi, &rden))
                return UNSUP(m, "roi values are too small or too large to be read exactly");
            onnx_at_ints(m, &as, "roi", roi, 2 * r->rank);
            onnx_at_int(m, &as, "roi_den", rden);
        }
        onnx_at_float(m, &as, "extrapolation_value", onnx_attr_float(m, "extrapolation_value", 0));
    }
    return onnx_set_output(m, 0,
                           onnx_lib1(m, "resize", onnx_out0(m), onnx_tensor(m, m->in[0]), &as));
}

/* Output extents floor(in * scale) (ONNX's reference computes them so) for r's scales. */
static enum kiln_status
scaled_sizes(struct onnx_imp *m, struct rs_node *r)
{
    const int64_t *shape = onnx_vshape(m, m->in[0]);
    for (uint32_t d = 0; d < r->rank; d++) {
        double s = r->scales[d], o = s * (double)shape[d];
        if (!(s > 0) || !isfinite(s))
            return BAD(m, "scales entry %u is %g; scales must be positive", d, s);
        if (!(o < 0x1p62))
            return BAD(m, "scales entry %u (%g) makes the output too large", d, s);
        r->sizes[d] = (int64_t)floor(o);
        if (r->sizes[d] == 0)
            return UNSUP(m, "scales entry %u (%g) gives an empty output: kiln has no empty tensors",
                         d, s);
    }
    if (!fractions(r->scales, r->rank, r->snum, &r->sden))
        return UNSUP(m, "scales are too small or too large to be read exactly");
    r->has_scales = true;
    return KILN_OK;
}

/* Resize 10 and Upsample: asymmetric, nearest (integer scales only) or linear. */
static enum kiln_status
legacy(struct onnx_imp *m, struct rs_node *r, const double *scales, uint32_t n)
{
    r->mode = onnx_attr_str(m, "mode", "nearest");
    if (!r->mode)
        return m->ctx->err.status;
    if (!strcmp(r->mode, "bilinear"))
        r->mode = "linear";
    if (strcmp(r->mode, "nearest") && strcmp(r->mode, "linear"))
        return BAD(m, "mode is \"%s\"; \"nearest\" or \"linear\"", r->mode);
    if (n != r->rank)
        return BAD(m, "scales has %u entries; the input has rank %u", n, r->rank);
    for (uint32_t d = 0; d < n; d++) {
        r->scales[d] = scales[d];
        if (!strcmp(r->mode, "nearest") && scales[d] != floor(scales[d]))
            return UNSUP(m,
                         "nearest with the fractional scale %g (entry %u): ONNX defines this op's "
                         "nearest rounding for integer scales only",
                         scales[d], d);
    }
    r->ct = "asymmetric";
    r->nr = "floor";
    KILN_TRY(scaled_sizes(m, r));
    return emit(m, r);
}

enum kiln_status
onnx_op_upsample(struct onnx_imp *m)
{
    struct rs_node r = {.rank = onnx_vrank(m, m->in[0])};
    double         s[KILN_MAX_DIMS];
    uint32_t       n = 0;
    if (m->opset < 9) {
        const Onnx__AttributeProto *a = onnx_attr(m, "scales");
        if (!a)
            return BAD(m, "attribute scales is required");
        if (a->n_floats > KILN_MAX_DIMS)
            return BAD(m, "scales has %zu entries; the input has rank %u", a->n_floats, r.rank);
        for (size_t i = 0; i < a->n_floats; i++)
            s[i] = a->floats[i];
        n = (uint32_t)a->n_floats;
    } else if (!m->in[1] || !const_floats(m, m->in[1], 1, "scales", s, &n, KILN_MAX_DIMS)) {
        return m->in[1] ? m->ctx->err.status : BAD(m, "input 1 (scales) is required");
    }
    return legacy(m, &r, s, n);
}

/* The per-axis values of input i (n entries for the axes ax[0..na)) spread over every
 * dimension: out[ax[k]] = v[k]; the other dimensions keep dflt[d]. */
static void
spread(const double *v, const uint32_t *ax, uint32_t na, uint32_t rank, double *out,
       const double *dflt)
{
    for (uint32_t d = 0; d < rank; d++)
        out[d] = dflt[d];
    for (uint32_t k = 0; k < na; k++)
        out[ax[k]] = v[k];
}

enum kiln_status
onnx_op_resize(struct onnx_imp *m)
{
    struct rs_node r = {.rank = onnx_vrank(m, m->in[0])};
    const int64_t *shape = onnx_vshape(m, m->in[0]);
    if (m->opset < 11) {
        double   s[KILN_MAX_DIMS];
        uint32_t n;
        if (!const_floats(m, m->in[1], 1, "scales", s, &n, KILN_MAX_DIMS))
            return m->ctx->err.status;
        return legacy(m, &r, s, n);
    }
    r.mode = onnx_attr_str(m, "mode", "nearest");
    r.ct = onnx_attr_str(m, "coordinate_transformation_mode", "half_pixel");
    r.nr = onnx_attr_str(m, "nearest_mode", "round_prefer_floor");
    const char *keep = onnx_attr_str(m, "keep_aspect_ratio_policy", "stretch");
    if (!r.mode || !r.ct || !r.nr || !keep)
        return m->ctx->err.status;
    if (!strcmp(r.ct, "tf_half_pixel_for_nn"))
        return UNSUP(m, "coordinate_transformation_mode \"tf_half_pixel_for_nn\" (removed from "
                        "ONNX at opset 13) is not supported");
    if (!strcmp(r.ct, "half_pixel_symmetric") && m->opset < 19)
        return BAD(m, "coordinate_transformation_mode \"half_pixel_symmetric\" needs opset 19");
    if (r.rank == 0)
        return BAD(m, "input 0 is a scalar; Resize needs at least 1 dimension");

    /* axes (opset 18): the dimensions scales, sizes and roi speak of */
    uint32_t ax[KILN_MAX_DIMS], na = r.rank;
    int64_t  axv[KILN_MAX_DIMS];
    bool     has_axes = false;
    if (!onnx_attr_ints(m, "axes", axv, &na, KILN_MAX_DIMS, &has_axes))
        return m->ctx->err.status;
    if (!has_axes) {
        na = r.rank;
        for (uint32_t d = 0; d < r.rank; d++)
            ax[d] = d;
    }
    for (uint32_t k = 0; has_axes && k < na; k++) {
        int64_t a = onnx_norm_axis(axv[k], r.rank);
        if (a < 0 || a >= (int64_t)r.rank)
            return BAD(m, "axes entry %u is %lld; the input has rank %u", k, (long long)axv[k],
                       r.rank);
        for (uint32_t j = 0; j < k; j++)
            if (ax[j] == (uint32_t)a)
                return BAD(m, "axes names dimension %lld twice", (long long)a);
        ax[k] = (uint32_t)a;
    }

    double   ones[2 * KILN_MAX_DIMS], ins[KILN_MAX_DIMS], v[2 * KILN_MAX_DIMS];
    uint32_t n = 0;
    for (uint32_t d = 0; d < r.rank; d++) {
        ones[d] = 1;
        ins[d] = (double)shape[d];
    }
    /* roi: starts, then ends, of the axes */
    if (m->in[1] && !strcmp(r.ct, "tf_crop_and_resize")) {
        if (!const_floats(m, m->in[1], 1, "roi", v, &n, 2 * KILN_MAX_DIMS))
            return m->ctx->err.status;
        if (n && n != 2 * na)
            return BAD(m, "roi has %u entries; %u axes need %u", n, na, 2 * na);
        if (n) {
            double zeros[KILN_MAX_DIMS] = {0};
            spread(v, ax, na, r.rank, r.roi, zeros);
            spread(v + na, ax, na, r.rank, r.roi + r.rank, ones);
            r.has_roi = true;
        }
    }
    uint32_t ns = 0, nz = 0;
    double   sc[KILN_MAX_DIMS], sz[KILN_MAX_DIMS];
    if (m->in[2] && !const_floats(m, m->in[2], 2, "scales", sc, &ns, KILN_MAX_DIMS))
        return m->ctx->err.status;
    if (m->in[3] && !const_floats(m, m->in[3], 3, "sizes", sz, &nz, KILN_MAX_DIMS))
        return m->ctx->err.status;
    if ((ns == 0) == (nz == 0))
        return BAD(m, "exactly one of scales and sizes must be given (got %s)",
                   ns ? "both" : "neither");
    if ((ns ? ns : nz) != na)
        return BAD(m, "%s has %u entries; %u axes need %u", ns ? "scales" : "sizes", ns ? ns : nz,
                   na, na);
    if (ns) {
        spread(sc, ax, na, r.rank, r.scales, ones);
        KILN_TRY(scaled_sizes(m, &r));
    } else {
        double full[KILN_MAX_DIMS];
        spread(sz, ax, na, r.rank, full, ins);
        for (uint32_t d = 0; d < r.rank; d++) {
            if (full[d] < 1 || full[d] != floor(full[d]) || full[d] >= 0x1p62)
                return full[d] == 0
                           ? UNSUP(m, "sizes entry %u is 0: kiln has no empty tensors", d)
                           : BAD(m, "sizes entry %u is %g; a positive integer", d, full[d]);
            r.sizes[d] = (int64_t)full[d];
        }
        if (strcmp(keep, "stretch")) { /* one scale for the axes: the smallest or largest */
            bool larger = !strcmp(keep, "not_smaller");
            if (!larger && strcmp(keep, "not_larger"))
                return BAD(m,
                           "keep_aspect_ratio_policy is \"%s\"; \"stretch\", \"not_larger\" or "
                           "\"not_smaller\"",
                           keep);
            uint32_t best = ax[0];
            for (uint32_t k = 1; k < na; k++) {
                double a = full[ax[k]] / ins[ax[k]], b = full[best] / ins[best];
                if (larger ? a > b : a < b)
                    best = ax[k];
            }
            /* every axis gets the scale sizes[best] / in[best], and the extent
             * round(scale * in) (halves up) */
            double s = full[best] / ins[best];
            for (uint32_t k = 0; k < na; k++) {
                r.sizes[ax[k]] = (int64_t)floor(s * ins[ax[k]] + 0.5);
                if (r.sizes[ax[k]] < 1)
                    return UNSUP(m, "keep_aspect_ratio_policy gives dimension %u extent 0", ax[k]);
            }
            /* the scale as an exact fraction: sizes[best] / in[best] (1 = in / in) */
            r.has_scales = true;
            r.sden = shape[best];
            for (uint32_t d = 0; d < r.rank; d++) {
                r.snum[d] = shape[best];
                r.scales[d] = 1;
            }
            for (uint32_t k = 0; k < na; k++) {
                r.snum[ax[k]] = (int64_t)full[best];
                r.scales[ax[k]] = s;
            }
        }
    }
    return emit(m, &r);
}
