/* ir/lib_impl.h -- private to the op library (ir/lib*.c): the call being built, attribute
 * getters, shape and dtype checks, display names and the helpers that emit compute
 * definitions. Nothing outside ir/lib*.c includes this header. */
#ifndef KILN_LIB_IMPL_H
#define KILN_LIB_IMPL_H

#include "ir.h"

/* Marks "no upper bound" in the max_inputs column of lib.def. */
#define KILN_LIB_ANY 1000000

/* The library call being built. Builders validate everything before lib_begin (which opens the
 * statement), so a failed call leaves no statement behind. */
struct libcall {
    struct kiln_graph      *g;
    kiln_ctx               *ctx;
    const char             *op;       /* library op name */
    const char             *out_name; /* name of the tensor the call defines */
    uint32_t                nin;
    const uint32_t         *in; /* input tensors */
    uint32_t                nattr;
    const struct kiln_attr *attr;
    uint32_t                line, col;
    uint32_t                out; /* the defined tensor, set by the builder */
};

/* One builder per table entry. */
#define KILN_LIB(name, lo, hi) enum kiln_status kiln_lib_##name(struct libcall *c);
#include "lib.def"
#undef KILN_LIB

/* ---- errors: "OP: message" at the call's (or the attribute's) location ---- */
enum kiln_status lib_fail(struct libcall *c, const char *fmt, ...) KILN_PRINTF(2, 3);
enum kiln_status lib_fail_attr(struct libcall *c, const struct kiln_attr *a, const char *fmt, ...)
    KILN_PRINTF(3, 4);

/* ---- inputs ---- */
const struct kiln_tensor *lib_in(const struct libcall *c, uint32_t i);
const char               *lib_in_name(const struct libcall *c, uint32_t i);
/* Writes "[2, 3]" (or "[]") into buf; returns buf. */
char *lib_shape_str(const int64_t *shape, uint32_t n, char *buf, size_t size);
#define LIB_SHAPE_BUF 8 * 24 + 4
/* Fails unless input i has rank `rank`: "OP: ROLE NAME must be 4-D LAYOUT, got [..]". */
enum kiln_status lib_want_rank(struct libcall *c, uint32_t i, uint32_t rank, const char *role,
                               const char *layout);
/* Fails unless every input has the dtype of input 0. */
enum kiln_status lib_same_dtype(struct libcall *c);
/* Fails unless input i has a float dtype / a numeric (non-bool) dtype. */
enum kiln_status lib_want_float(struct libcall *c, uint32_t i);
enum kiln_status lib_want_numeric(struct libcall *c, uint32_t i);
/* Normalises a possibly negative axis against rank; fails naming the attribute. With
 * allow_end, axis == rank is valid too (flatten). */
enum kiln_status lib_axis(struct libcall *c, const char *attr, int64_t axis, uint32_t rank,
                          bool allow_end, uint32_t *out);

/* ---- attributes ---- */
/* Fails on an attribute whose name is not in allowed (NULL-terminated). */
enum kiln_status        lib_allow(struct libcall *c, const char *const *allowed);
const struct kiln_attr *lib_attr(const struct libcall *c, const char *name); /* NULL if absent */
enum kiln_status lib_get_int(struct libcall *c, const char *name, int64_t dflt, int64_t *out);
enum kiln_status lib_get_bool(struct libcall *c, const char *name, bool dflt, bool *out);
enum kiln_status lib_get_float(struct libcall *c, const char *name, double dflt, double *out);
enum kiln_status lib_get_string(struct libcall *c, const char *name, const char *dflt,
                                const char **out);
/* An integer broadcast to both spatial dimensions, or a list of 2. */
enum kiln_status lib_get_pair(struct libcall *c, const char *name, int64_t dflt, int64_t out[2]);
/* Spatial padding: an integer, [ph, pw] or (when allow4) [top, left, bottom, right]; out is
 * {top, left, bottom, right}. */
enum kiln_status lib_get_pad(struct libcall *c, const char *name, bool allow4, int64_t out[4]);
/* A list of integers (a single integer counts as a list of one). *given is false when the
 * attribute is absent (then *n is 0). */
enum kiln_status lib_get_list(struct libcall *c, const char *name, const int64_t **v, uint32_t *n,
                              bool *given);
/* Fails unless every v[i] >= min: "OP: stride 0 must be positive" (min 1) or "... must not be
 * negative" (min 0). */
enum kiln_status lib_check_min(struct libcall *c, const char *name, const int64_t *v, uint32_t n,
                               int64_t min);

/* ---- checked shape arithmetic ----
 * Every output extent an op computes from its attributes goes through these: an overflow sets
 * the sticky flag *ovf (and yields 0), and the builder then fails with lib_fail_overflow, so
 * an overflow is an error, never a wrapped extent. */
static inline int64_t
lib_ck_add(bool *ovf, int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) {
        *ovf = true;
        return 0;
    }
    return r;
}
static inline int64_t
lib_ck_sub(bool *ovf, int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) {
        *ovf = true;
        return 0;
    }
    return r;
}
static inline int64_t
lib_ck_mul(bool *ovf, int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) {
        *ovf = true;
        return 0;
    }
    return r;
}
/* Fails "OP: NAME V overflows the output shape", blaming the value of largest magnitude among
 * the given integer attributes in names (NULL-terminated). */
enum kiln_status lib_fail_overflow(struct libcall *c, const char *const *names);

/* ---- building ---- */
/* Opens the statement (after all validation). */
enum kiln_status lib_begin(struct libcall *c);
/* Adds an op tensor named OUT (suffix NULL) or OUT.suffix; KILN_NONE on error. */
uint32_t lib_tensor(struct libcall *c, const char *suffix, enum kiln_dtype dt, uint32_t ndim,
                    const int64_t *shape);

/* Reduction variables of one definition. Extent-1 variables are not created: lib_rvar gives
 * the constant 0 for them, so a 1x1 kernel has no kernel loops. */
struct lib_red {
    uint32_t    n;
    int64_t     ext[KILN_MAX_REDUCE];
    const char *name[KILN_MAX_REDUCE];
};
kiln_expr lib_rvar(struct libcall *c, struct lib_red *r, int64_t ext, const char *name);

/* Appends the definition of tensor t: reduce over r (NULL or no variables: elementwise), with
 * display names axname[0..ndim) (NULL entries get generic names). Names that collide with a
 * tensor of the graph or with each other get a numeric suffix. */
enum kiln_status lib_define(struct libcall *c, uint32_t t, enum kiln_reduce reduce,
                            const struct lib_red *r, kiln_expr body, const char *const *axname);

/* Generic display names for n axes (i, j, k, l, m, p, q, s), skipping the one-letter names
 * in `avoid` (may be NULL). */
void lib_generic_names(uint32_t n, const char **out, const char *avoid);

/* Load of input i at idx (its rank entries). */
kiln_expr lib_load(struct libcall *c, uint32_t i, const kiln_expr *idx);
/* Load of tensor t (any tensor of the graph) at idx. */
kiln_expr lib_load_t(struct libcall *c, uint32_t t, const kiln_expr *idx);
/* cond && term; a constant-true cond is dropped. */
kiln_expr lib_and(struct libcall *c, kiln_expr cond, kiln_expr term);
/* cond && (lo <= e when need_lo) && (e < hi when need_hi). */
kiln_expr lib_bound(struct libcall *c, kiln_expr cond, kiln_expr e, bool need_lo, bool need_hi,
                    int64_t hi);
/* Axes 0..n-1 of the definition being built. */
void lib_axes(struct libcall *c, uint32_t n, kiln_expr *ax);
/* NumPy broadcasting: index of an input of shape ishape (rank in) read at output axes ax
 * (output shape oshape, rank on >= in): size-1 dimensions read index 0. */
void lib_bcast_idx(struct libcall *c, const int64_t *ishape, uint32_t in, const int64_t *oshape,
                   uint32_t on, const kiln_expr *ax, kiln_expr *idx);
/* Broadcast shape of a and b (right aligned); false when they do not broadcast. */
bool lib_bcast_shape(const int64_t *a, uint32_t na, const int64_t *b, uint32_t nb, int64_t *out,
                     uint32_t *nout);

static inline kiln_expr
lib_idx(struct libcall *c, int64_t v)
{
    return kiln_idx(c->ctx, v);
}
static inline kiln_expr
lib_f(struct libcall *c, double v, enum kiln_dtype dt)
{
    return kiln_const(c->ctx, v, dt);
}

/* ---- convolution windows (conv2d, conv2d_transpose, unfold) ---- */
/* Spatial geometry of one convolution-like op. */
struct lib_window {
    int64_t stride[2], dil[2], pad[4]; /* pad: top, left, bottom, right */
    bool    same;                      /* padding="same": pads set by lib_window_same */
};
/* Reads stride, padding and dilation (validated). With allow_same, padding may also be
 * "same" (stride 1; the pads then depend on the kernel: lib_window_same) or "valid" (conv2d). */
enum kiln_status lib_get_window(struct libcall *c, struct lib_window *wd, bool allow_same);
/* The layout of input 0, a 4-D activation (attribute `layout`, "nchw" by default or "nhwc"):
 * the positions of its batch, channel and two spatial dimensions; fails unless it is 4-D. */
struct lib_layout {
    uint32_t n, c, h, w;
    bool     nhwc;
};
enum kiln_status lib_get_layout(struct libcall *c, struct lib_layout *l);
/* Sets the pads of padding="same" for a kernel of kh x kw; fails when they overflow. */
enum kiln_status lib_window_same(struct libcall *c, struct lib_window *wd, int64_t kh, int64_t kw);
/* The attributes a window's extents depend on, for lib_fail_overflow. */
extern const char *const lib_window_attrs[];
/* Input index o*stride - pad_lo + r*dil for output axis o (extent out) and kernel variable r
 * (extent k) over an input dimension of extent in; ANDs the bounds it needs into *cond. */
kiln_expr lib_window_idx(struct libcall *c, kiln_expr *cond, kiln_expr o, kiln_expr r, int64_t in,
                         int64_t out, int64_t k, int64_t stride, int64_t dil, int64_t pad_lo);

#endif /* KILN_LIB_IMPL_H */
