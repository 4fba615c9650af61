/* frontend/onnx_index.c -- ONNX's indexing, comparison, logic and cast ops: Gather,
 * GatherElements, Where, Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor, Not,
 * Cast, CastLike, Expand, Tile and Trilu, onto the library ops of ir/lib_index.c. Expand's shape,
 * Tile's repeats and Trilu's k are inputs that must be constants at import time. A Gather whose
 * indices are a constant scalar or a constant run of consecutive indices becomes a slice (and a
 * reshape), not a data-dependent load. One handler per row of frontend/onnx.def; the dispatcher
 * (onnx.c) has checked the attributes and looked the inputs up into m->in[]. */
#include "onnx_impl.h"

#include <string.h>

/* ---- Gather, GatherElements ---- */

/* Gather with constant indices v[0..n) (already in [0, extent)) that are consecutive: a slice
 * along axis, reshaped to the gather's output shape when the indices are not 1-D. */
static enum kiln_status
gather_slice(struct onnx_imp *m, uint32_t axis, const int64_t *v, int64_t n)
{
    struct onnx_value *x = m->in[0], *ind = m->in[1];
    uint32_t           r = onnx_vrank(m, x), q = onnx_vrank(m, ind);
    const char        *o = onnx_out0(m);
    int64_t           *b = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 4);
    if (!b)
        return m->ctx->err.status;
    b[0] = v[0];
    b[1] = v[0] + n;
    b[2] = axis;
    b[3] = 1;
    struct onnx_attrs as = {0};
    onnx_at_ints(m, &as, "starts", &b[0], 1);
    onnx_at_ints(m, &as, "ends", &b[1], 1);
    onnx_at_ints(m, &as, "axes", &b[2], 1);
    onnx_at_ints(m, &as, "steps", &b[3], 1);
    if (q == 1)
        return onnx_set_output(m, 0, onnx_lib1(m, "slice", o, onnx_tensor(m, x), &as));
    uint32_t t = onnx_lib1(m, "slice", onnx_suffixed(m, o, "slice"), onnx_tensor(m, x), &as);
    int64_t  sh[KILN_MAX_DIMS];
    uint32_t k = 0;
    for (uint32_t d = 0; d < r; d++) {
        if (d != axis) {
            sh[k++] = onnx_vshape(m, x)[d];
            continue;
        }
        for (uint32_t e = 0; e < q; e++)
            sh[k++] = onnx_vshape(m, ind)[e];
    }
    return onnx_set_output(m, 0, onnx_reshape(m, o, t, k, sh));
}

enum kiln_status
onnx_op_gather(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0], *ind = m->in[1];
    uint32_t           r = onnx_vrank(m, x), q = onnx_vrank(m, ind);
    int64_t            axis = onnx_attr_int(m, "axis", 0), a = onnx_norm_axis(axis, r);
    if (r == 0)
        return BAD(m, "input 0 ('%s') is a scalar", x->name);
    if (a < 0 || a >= (int64_t)r)
        return BAD(m, "axis %lld is out of range for rank %u", (long long)axis, r);
    if (r - 1 + q > KILN_MAX_DIMS)
        return UNSUP(m, "the result would have %u dimensions; at most %d", r - 1 + q,
                     KILN_MAX_DIMS);
    if (ind->is_const && ind->tensor == KILN_NONE) {
        int64_t  n = ind->c.numel, ext = onnx_vshape(m, x)[a];
        int64_t *v = kiln_arena_alloc(m->ctx, sizeof(int64_t) * (size_t)n);
        uint32_t nv;
        if (!v || !onnx_const_ints(m, ind, 1, "indices", v, &nv, (uint32_t)n))
            return m->ctx->err.status;
        bool run = true;
        for (int64_t k = 0; k < n; k++) {
            if (v[k] < -ext || v[k] >= ext)
                return BAD(m, "index %lld is out of range for axis %lld of extent %lld",
                           (long long)v[k], (long long)a, (long long)ext);
            v[k] = v[k] < 0 ? v[k] + ext : v[k];
            run = run && v[k] == v[0] + k;
        }
        if (run)
            return gather_slice(m, (uint32_t)a, v, n);
    }
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "axis", a);
    uint32_t in[2] = {onnx_tensor(m, x), onnx_tensor(m, ind)};
    return onnx_set_output(m, 0, onnx_lib(m, "gather", onnx_out0(m), 2, in, &as));
}

enum kiln_status
onnx_op_gather_elements(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0], *ind = m->in[1];
    struct onnx_attrs  as = {0};
    onnx_at_int(m, &as, "axis", onnx_attr_int(m, "axis", 0));
    uint32_t in[2] = {onnx_tensor(m, x), onnx_tensor(m, ind)};
    return onnx_set_output(m, 0, onnx_lib(m, "gather_elements", onnx_out0(m), 2, in, &as));
}

/* ---- Where, comparisons, logic ---- */

enum kiln_status
onnx_op_where(struct onnx_imp *m)
{
    uint32_t in[3];
    for (uint32_t i = 0; i < 3; i++)
        in[i] = onnx_tensor(m, m->in[i]);
    return onnx_set_output(m, 0, onnx_lib(m, "where", onnx_out0(m), 3, in, NULL));
}

/* Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor, Not: the library op of the
 * row on one or two inputs. Before opset 7, `broadcast` 0 needs equal shapes and the legacy
 * `axis` alignment is unsupported. */
enum kiln_status
onnx_op_compare(struct onnx_imp *m)
{
    uint32_t n = m->op->max_in;
    if (n == 2 && m->opset < 7) {
        struct onnx_value *a = m->in[0], *b = m->in[1];
        uint32_t           ra = onnx_vrank(m, a), rb = onnx_vrank(m, b);
        if (onnx_attr(m, "axis"))
            return UNSUP(m, "legacy broadcasting along 'axis' is not supported");
        if (!onnx_attr_int(m, "broadcast", 0)
            && (ra != rb || memcmp(onnx_vshape(m, a), onnx_vshape(m, b), sizeof(int64_t) * ra)))
            return BAD(m, "inputs differ in shape and broadcast is 0");
    }
    uint32_t in[2] = {onnx_tensor(m, m->in[0]), n == 2 ? onnx_tensor(m, m->in[1]) : KILN_NONE};
    return onnx_set_output(m, 0, onnx_lib(m, m->op->kop, onnx_out0(m), n, in, NULL));
}

/* ---- Cast, CastLike ---- */

/* x cast to dt: a copy when the dtypes agree. */
static enum kiln_status
cast_to(struct onnx_imp *m, struct onnx_value *x, enum kiln_dtype dt)
{
    /* saturate (opset 19) only concerns float8 targets, which kiln lacks: only its default */
    if (onnx_attr(m, "saturate") && onnx_attr_int(m, "saturate", 1) != 1)
        return UNSUP(m, "saturate %lld is not supported (only the default 1)",
                     (long long)onnx_attr_int(m, "saturate", 1));
    uint32_t t = onnx_tensor(m, x);
    if (onnx_vdtype(m, x) == dt)
        return onnx_set_output(
            m, 0, onnx_reshape(m, onnx_out0(m), t, onnx_vrank(m, x), onnx_vshape(m, x)));
    struct onnx_attrs as = {0};
    onnx_at_str(m, &as, "dtype", kiln_dtype_name(dt));
    return onnx_set_output(m, 0, onnx_lib1(m, "cast", onnx_out0(m), t, &as));
}

enum kiln_status
onnx_op_cast(struct onnx_imp *m)
{
    if (m->opset < 6)
        return UNSUP(m, "Cast before opset 6 ('to' as a string) is not supported");
    const Onnx__AttributeProto *to = onnx_attr(m, "to");
    if (!to || !to->has_i)
        return BAD(m, "attribute 'to' is required");
    if (to->i < INT32_MIN || to->i > INT32_MAX)
        return BAD(m, "attribute 'to' %lld is not an element type", (long long)to->i);
    enum kiln_dtype dt = frontend_onnx_dtype((int32_t)to->i);
    if (dt == KILN_DTYPE_COUNT)
        return UNSUP(m, "cast to %s is not supported (kiln has no such dtype)",
                     frontend_onnx_type_name((int32_t)to->i));
    return cast_to(m, m->in[0], dt);
}

enum kiln_status
onnx_op_cast_like(struct onnx_imp *m)
{
    return cast_to(m, m->in[0], onnx_vdtype(m, m->in[1]));
}

/* ---- Expand, Tile, Trilu ---- */

enum kiln_status
onnx_op_expand(struct onnx_imp *m)
{
    int64_t *sh = kiln_arena_alloc(m->ctx, sizeof(int64_t) * KILN_MAX_DIMS);
    uint32_t n;
    if (!sh || !onnx_const_ints(m, m->in[1], 1, "shape", sh, &n, KILN_MAX_DIMS))
        return m->ctx->err.status;
    for (uint32_t i = 0; i < n; i++)
        if (sh[i] == 0)
            return UNSUP(m, "shape entry %u is 0: kiln has no empty tensors", i);
        else if (sh[i] < 0)
            return BAD(m, "shape entry %u is %lld", i, (long long)sh[i]);
    struct onnx_attrs as = {0};
    onnx_at_ints(m, &as, "shape", sh, n);
    return onnx_set_output(m, 0,
                           onnx_lib1(m, "expand", onnx_out0(m), onnx_tensor(m, m->in[0]), &as));
}

enum kiln_status
onnx_op_tile(struct onnx_imp *m)
{
    if (m->opset < 6)
        return UNSUP(m, "Tile before opset 6 (inputs tiles and axis) is not supported");
    int64_t *rep = kiln_arena_alloc(m->ctx, sizeof(int64_t) * KILN_MAX_DIMS);
    uint32_t n;
    if (!rep || !onnx_const_ints(m, m->in[1], 1, "repeats", rep, &n, KILN_MAX_DIMS))
        return m->ctx->err.status;
    if (n != onnx_vrank(m, m->in[0]))
        return BAD(m, "repeats has %u entries; the input has rank %u", n, onnx_vrank(m, m->in[0]));
    for (uint32_t i = 0; i < n; i++)
        if (rep[i] == 0)
            return UNSUP(m, "repeats entry %u is 0: kiln has no empty tensors", i);
        else if (rep[i] < 0)
            return BAD(m, "repeats entry %u is %lld", i, (long long)rep[i]);
    struct onnx_attrs as = {0};
    onnx_at_ints(m, &as, "repeats", rep, n);
    return onnx_set_output(m, 0, onnx_lib1(m, "tile", onnx_out0(m), onnx_tensor(m, m->in[0]), &as));
}

enum kiln_status
onnx_op_trilu(struct onnx_imp *m)
{
    int64_t  k = 0;
    uint32_t n = 1;
    if (m->in[1] && !onnx_const_ints(m, m->in[1], 1, "k", &k, &n, 1))
        return m->ctx->err.status;
    if (n != 1)
        return BAD(m, "k must be a scalar");
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "upper", onnx_attr_int(m, "upper", 1) != 0);
    onnx_at_int(m, &as, "k", k);
    return onnx_set_output(m, 0,
                           onnx_lib1(m, "trilu", onnx_out0(m), onnx_tensor(m, m->in[0]), &as));
}
