/* frontend/onnx_data.c -- ONNX's data-movement ops (Reshape, Flatten, Identity, Dropout,
 * Transpose, Concat, Pad, Slice, Squeeze, Unsqueeze) and the constants (Constant, Shape). A
 * constant read as a shape, axes, pads or slice bounds is read at import time; Reshape,
 * Identity and (Un)Squeeze of a constant give a constant. One handler per row of
 * frontend/onnx.def; the dispatcher (onnx.c) has checked the attributes and looked the inputs
 * up into m->in[]. */
#include "onnx_impl.h"

#include <stdio.h>
#include <string.h>

/* ---- data movement ---- */

/* Output 0 is x with shape sh[0..n): the same data as a folded constant when fold (x is a
 * constant with the same number of elements and no tensor), else a reshape statement. */
static enum kiln_status
set_reshaped(struct onnx_imp *m, struct onnx_value *x, uint32_t n, const int64_t *sh, bool fold)
{
    if (fold) {
        struct frontend_const c = x->c;
        c.ndim = n;
        memcpy(c.shape, sh, sizeof(int64_t) * n);
        return onnx_set_const(m, 0, &c);
    }
    return onnx_set_output(m, 0, onnx_reshape(m, onnx_out0(m), onnx_tensor(m, x), n, sh));
}

enum kiln_status
onnx_op_reshape(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    int64_t            sh[KILN_MAX_DIMS];
    uint32_t           n;
    if (m->opset < 5) {
        if (!onnx_attr_ints(m, "shape", sh, &n, KILN_MAX_DIMS, NULL))
            return m->ctx->err.status;
    } else {
        if (!onnx_const_ints(m, m->in[1], 1, "shape", sh, &n, KILN_MAX_DIMS))
            return m->ctx->err.status;
    }
    bool allowzero = onnx_attr_int(m, "allowzero", 0) != 0;
    for (uint32_t i = 0; i < n; i++)
        if (sh[i] == 0 && allowzero)
            return UNSUP(m, "allowzero 1 with a 0 in the shape (an empty tensor)");
        else if (sh[i] == 0) {
            if (i >= onnx_vrank(m, x))
                return BAD(m, "shape entry %u is 0 but the input has rank %u", i, onnx_vrank(m, x));
            sh[i] = onnx_vshape(m, x)[i];
        }
    if (x->is_const && x->tensor == KILN_NONE) { /* fold: same data, new shape */
        int64_t numel = 1, unknown = -1;
        for (uint32_t i = 0; i < n; i++) {
            if (sh[i] == -1)
                unknown = i;
            else
                numel *= sh[i];
        }
        if (unknown >= 0 && numel > 0 && x->c.numel % numel == 0)
            sh[unknown] = x->c.numel / numel, numel = x->c.numel;
        return set_reshaped(m, x, n, sh, numel == x->c.numel);
    }
    return set_reshaped(m, x, n, sh, false);
}

enum kiln_status
onnx_op_flatten(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    struct onnx_attrs  as = {0};
    onnx_at_int(m, &as, "axis", onnx_attr_int(m, "axis", 1));
    return onnx_set_output(m, 0, onnx_lib1(m, "flatten", onnx_out0(m), onnx_tensor(m, x), &as));
}

enum kiln_status
onnx_op_identity(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    if (x->is_const && x->tensor == KILN_NONE)
        return onnx_set_const(m, 0, &x->c);
    return onnx_set_output(
        m, 0,
        onnx_reshape(m, onnx_out0(m), onnx_tensor(m, x), onnx_vrank(m, x), onnx_vshape(m, x)));
}

/* Dropout at inference: the identity (the mask output is not supported). */
enum kiln_status
onnx_op_dropout(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    if (m->opset >= 12) {
        struct onnx_value *tm = m->in[2];
        if (tm && (!tm->is_const || tm->c.data[0] != 0))
            return UNSUP(m, "training_mode must be a constant false");
    }
    if (m->node->n_output > 1 && m->node->output[1] && *m->node->output[1]) {
        /* the mask: all true at inference (opset >= 10 types it bool) */
        if (m->opset < 10)
            return UNSUP(m, "the mask output before opset 10 is not supported");
        struct frontend_const c = {.dtype = KILN_DTYPE_BOOL, .ndim = onnx_vrank(m, x)};
        memcpy(c.shape, onnx_vshape(m, x), sizeof(int64_t) * c.ndim);
        c.numel = 1;
        for (uint32_t i = 0; i < c.ndim; i++)
            c.numel *= c.shape[i];
        c.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)c.numel);
        if (!c.data)
            return m->ctx->err.status;
        for (int64_t i = 0; i < c.numel; i++)
            c.data[i] = 1;
        KILN_TRY(onnx_set_const(m, 1, &c));
    }
    return onnx_set_output(
        m, 0,
        onnx_reshape(m, onnx_out0(m), onnx_tensor(m, x), onnx_vrank(m, x), onnx_vshape(m, x)));
}

enum kiln_status
onnx_op_transpose(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    int64_t            perm[KILN_MAX_DIMS];
    uint32_t           n;
    bool               has;
    if (!onnx_attr_ints(m, "perm", perm, &n, KILN_MAX_DIMS, &has))
        return m->ctx->err.status;
    int64_t          *p = kiln_arena_alloc(m->ctx, sizeof(int64_t) * KILN_MAX_DIMS);
    struct onnx_attrs as = {0};
    if (!p)
        return m->ctx->err.status;
    memcpy(p, perm, sizeof perm);
    if (has)
        onnx_at_ints(m, &as, "perm", p, n);
    return onnx_set_output(m, 0, onnx_lib1(m, "transpose", onnx_out0(m), onnx_tensor(m, x), &as));
}

enum kiln_status
onnx_op_concat(struct onnx_imp *m)
{
    if (!onnx_attr(m, "axis") && m->opset >= 4)
        return BAD(m, "attribute 'axis' is required");
    uint32_t n = m->nin;
    if (!n)
        return BAD(m, "no inputs");
    uint32_t *in = kiln_arena_alloc(m->ctx, sizeof(uint32_t) * n);
    if (!in)
        return m->ctx->err.status;
    for (uint32_t i = 0; i < n; i++)
        in[i] = onnx_tensor(m, m->in[i]);
    struct onnx_attrs as = {0};
    onnx_at_int(m, &as, "axis", onnx_attr_int(m, "axis", 1));
    return onnx_set_output(m, 0, onnx_lib(m, "concat", onnx_out0(m), n, in, &as));
}

enum kiln_status
onnx_op_pad(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    uint32_t           rank = onnx_vrank(m, x), n;
    int64_t           *pads = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 2 * KILN_MAX_DIMS);
    double             value = 0;
    if (!pads)
        return m->ctx->err.status;
    if (m->opset < 11) {
        if (!onnx_attr_ints(m, m->opset < 2 ? "paddings" : "pads", pads, &n, 2 * KILN_MAX_DIMS,
                            NULL))
            return m->ctx->err.status;
        value = onnx_attr_float(m, "value", 0);
    } else {
        struct onnx_value *p = m->in[1], *v = m->in[2];
        if (!onnx_const_ints(m, p, 1, "pads", pads, &n, 2 * KILN_MAX_DIMS))
            return m->ctx->err.status;
        if (v) {
            if (!v->is_const || v->c.numel != 1)
                return UNSUP(m, "constant_value must be a constant scalar");
            value = v->c.data[0];
        }
        if (m->in[3])
            return UNSUP(m, "input 3 (axes) is not supported");
    }
    if (n != 2 * rank)
        return BAD(m, "pads has %u entries; the input has rank %u", n, rank);
    const char *mode = onnx_attr_str(m, "mode", "constant");
    if (!mode || (strcmp(mode, "constant") && strcmp(mode, "edge") && strcmp(mode, "reflect")))
        return UNSUP(m, "mode '%s' is not supported (constant, edge, reflect)", mode ? mode : "?");
    struct onnx_attrs as = {0};
    onnx_at_ints(m, &as, "pads", pads, n);
    onnx_at_float(m, &as, "value", value);
    onnx_at_str(m, &as, "mode", mode);
    return onnx_set_output(m, 0, onnx_lib1(m, "pad", onnx_out0(m), onnx_tensor(m, x), &as));
}

enum kiln_status
onnx_op_slice(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    int64_t           *v = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 4 * KILN_MAX_DIMS);
    if (!v)
        return m->ctx->err.status;
    int64_t *st = v, *en = v + KILN_MAX_DIMS, *ax = v + 2 * KILN_MAX_DIMS,
            *sp = v + 3 * KILN_MAX_DIMS;
    uint32_t ns, ne, na = 0, nsp = 0;
    bool     has_axes = false;
    if (m->opset < 10) {
        if (!onnx_attr_ints(m, "starts", st, &ns, KILN_MAX_DIMS, NULL)
            || !onnx_attr_ints(m, "ends", en, &ne, KILN_MAX_DIMS, NULL)
            || !onnx_attr_ints(m, "axes", ax, &na, KILN_MAX_DIMS, &has_axes))
            return m->ctx->err.status;
    } else {
        struct onnx_value *s = m->in[1], *e = m->in[2], *a = m->in[3], *p = m->in[4];
        if (!onnx_const_ints(m, s, 1, "starts", st, &ns, KILN_MAX_DIMS)
            || !onnx_const_ints(m, e, 2, "ends", en, &ne, KILN_MAX_DIMS)
            || (a && !onnx_const_ints(m, a, 3, "axes", ax, &na, KILN_MAX_DIMS))
            || (p && !onnx_const_ints(m, p, 4, "steps", sp, &nsp, KILN_MAX_DIMS)))
            return m->ctx->err.status;
        has_axes = a != NULL;
    }
    uint32_t rank = onnx_vrank(m, x);
    if (ne != ns || (has_axes && na != ns) || (nsp && nsp != ns))
        return BAD(m, "starts, ends, axes and steps differ in length");
    if (!has_axes)
        for (uint32_t i = 0; i < ns; i++)
            ax[i] = i;
    for (uint32_t i = 0; i < ns; i++) {
        int64_t a = onnx_norm_axis(ax[i], rank);
        if (a < 0 || a >= (int64_t)rank)
            return BAD(m, "axis %lld is out of range", (long long)ax[i]);
        int64_t dim = onnx_vshape(m, x)[a], step = nsp ? sp[i] : 1;
        if (step == 0)
            return BAD(m, "step 0");
        /* clamp the sentinels (INT64_MAX, INT64_MIN) the exporters use */
        for (int k = 0; k < 2; k++) {
            int64_t *b = k ? &en[i] : &st[i];
            if (*b > dim)
                *b = dim;
            if (*b < -dim - 1)
                *b = -dim - 1;
        }
        ax[i] = a;
        if (!nsp)
            sp[i] = 1;
        /* ONNX's clamping, to refuse an empty result here (kiln has no empty tensors) */
        int64_t b0 = st[i] < 0 ? st[i] + dim : st[i], b1 = en[i] < 0 ? en[i] + dim : en[i];
        bool    empty;
        if (step > 0) {
            b0 = b0 < 0 ? 0 : b0 > dim ? dim : b0;
            b1 = b1 < 0 ? 0 : b1 > dim ? dim : b1;
            empty = b1 <= b0;
        } else {
            b0 = b0 < 0 ? 0 : b0 > dim - 1 ? dim - 1 : b0;
            b1 = b1 < -1 ? -1 : b1 > dim - 1 ? dim - 1 : b1;
            empty = b1 >= b0;
        }
        if (empty)
            return UNSUP(m, "the slice of axis %lld is empty; kiln has no empty tensors",
                         (long long)a);
    }
    struct onnx_attrs as = {0};
    onnx_at_ints(m, &as, "starts", st, ns);
    onnx_at_ints(m, &as, "ends", en, ns);
    onnx_at_ints(m, &as, "axes", ax, ns);
    onnx_at_ints(m, &as, "steps", sp, ns);
    return onnx_set_output(m, 0, onnx_lib1(m, "slice", onnx_out0(m), onnx_tensor(m, x), &as));
}

/* Squeeze (unsqueeze false) and Unsqueeze: a reshape; axes from the attribute (opset < 13) or
 * a constant input. */
static enum kiln_status
squeeze(struct onnx_imp *m, bool unsqueeze)
{
    struct onnx_value *x = m->in[0];
    int64_t            ax[KILN_MAX_DIMS];
    uint32_t           na = 0;
    bool               has = false;
    if (m->opset < 13) {
        if (!onnx_attr_ints(m, "axes", ax, &na, KILN_MAX_DIMS, &has))
            return m->ctx->err.status;
    } else {
        struct onnx_value *a = m->in[1];
        if (a && !onnx_const_ints(m, a, 1, "axes", ax, &na, KILN_MAX_DIMS))
            return m->ctx->err.status;
        has = a != NULL;
    }
    uint32_t       rank = onnx_vrank(m, x), orank = unsqueeze ? rank + na : rank;
    const int64_t *s = onnx_vshape(m, x);
    bool           sel[KILN_MAX_DIMS + 8] = {0};
    if (unsqueeze && !has)
        return BAD(m, "axes are required");
    if (orank > KILN_MAX_DIMS)
        return UNSUP(m, "the result would have %u dimensions; at most %d", orank, KILN_MAX_DIMS);
    for (uint32_t i = 0; i < na; i++) {
        int64_t a = onnx_norm_axis(ax[i], orank);
        if (a < 0 || a >= (int64_t)orank || sel[a])
            return BAD(m, "axis %lld is out of range or repeated", (long long)ax[i]);
        if (!unsqueeze && s[a] != 1)
            return BAD(m, "axis %lld has extent %lld, not 1", (long long)ax[i], (long long)s[a]);
        sel[a] = true;
    }
    int64_t  sh[KILN_MAX_DIMS];
    uint32_t n = 0;
    for (uint32_t i = 0, k = 0; i < orank; i++) {
        if (unsqueeze)
            sh[n++] = sel[i] ? 1 : s[k++];
        else if (has ? !sel[i] : s[i] != 1)
            sh[n++] = s[i];
    }
    return set_reshaped(m, x, n, sh, x->is_const && x->tensor == KILN_NONE);
}

enum kiln_status
onnx_op_squeeze(struct onnx_imp *m)
{
    return squeeze(m, false);
}

enum kiln_status
onnx_op_unsqueeze(struct onnx_imp *m)
{
    return squeeze(m, true);
}

/* ---- constants ---- */

enum kiln_status
onnx_op_constant(struct onnx_imp *m)
{
    if (m->node->n_attribute != 1)
        return BAD(m, "exactly one value attribute is required");
    const Onnx__AttributeProto *a = m->node->attribute[0];
    struct frontend_const       c = {0};
    const char                 *nm = a->name;
    if (!strcmp(nm, "value")) {
        if (!a->t)
            return BAD(m, "attribute 'value' holds no tensor");
        char what[300];
        snprintf(what, sizeof what, "node %u '%s' (Constant, opset %lld): value", m->nodeno,
                 onnx_node_name(m), (long long)m->opset);
        if (frontend_tensor_decode(m->ctx, a->t, what, &c) != KILN_OK)
            return m->ctx->err.status;
    } else {
        bool   is_list = !strcmp(nm, "value_floats") || !strcmp(nm, "value_ints");
        bool   is_float = !strcmp(nm, "value_float") || !strcmp(nm, "value_floats");
        size_t cnt = is_list ? (is_float ? a->n_floats : a->n_ints) : 1;
        if (!cnt)
            return UNSUP(m, "empty tensors are not supported");
        c.dtype = is_float ? KILN_DTYPE_F32 : KILN_DTYPE_I64;
        c.ndim = is_list ? 1 : 0;
        c.shape[0] = (int64_t)cnt;
        c.numel = (int64_t)cnt;
        c.data = kiln_arena_alloc(m->ctx, sizeof(double) * cnt);
        if (!c.data)
            return m->ctx->err.status;
        for (size_t i = 0; i < cnt; i++)
            c.data[i] = is_list ? (is_float ? a->floats[i] : (double)a->ints[i])
                                : (is_float ? a->f : (double)a->i);
    }
    return onnx_set_const(m, 0, &c);
}

/* Shape of a tensor whose shape is static: an int64 constant. */
enum kiln_status
onnx_op_shape(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    int64_t            r = onnx_vrank(m, x), st = onnx_attr_int(m, "start", 0),
            en = onnx_attr_int(m, "end", r);
    st = st < 0 ? st + r : st;
    en = en < 0 ? en + r : en;
    st = st < 0 ? 0 : st > r ? r : st;
    en = en < 0 ? 0 : en > r ? r : en;
    if (en <= st)
        return UNSUP(m, "an empty shape is not supported");
    struct frontend_const c = {
        .dtype = KILN_DTYPE_I64, .ndim = 1, .shape = {en - st}, .numel = en - st};
    c.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)c.numel);
    if (!c.data)
        return m->ctx->err.status;
    for (int64_t i = st; i < en; i++)
        c.data[i - st] = (double)onnx_vshape(m, x)[i];
    return onnx_set_const(m, 0, &c);
}

/* A constant of dtype dt and shape [shape..ndim), its data allocated (unset). */
static enum kiln_status
new_const(struct onnx_imp *m, enum kiln_dtype dt, uint32_t ndim, const int64_t *shape,
          struct frontend_const *c)
{
    *c = (struct frontend_const){.dtype = dt, .ndim = ndim, .numel = 1};
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return UNSUP(m, "dimension %u of the output is %lld; kiln has no empty tensors", i,
                         (long long)shape[i]);
        if (c->numel > ONNX_CONST_MAX_ELEMS / shape[i])
            return UNSUP(m, "the output has more than %lld elements",
                         (long long)ONNX_CONST_MAX_ELEMS);
        c->shape[i] = shape[i];
        c->numel *= shape[i];
    }
    c->data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)c->numel);
    return c->data ? KILN_OK : m->ctx->err.status;
}

/* ConstantOfShape: a constant of the (constant) shape filled with `value` (default f32 0). */
enum kiln_status
onnx_op_constant_of_shape(struct onnx_imp *m)
{
    int64_t  shape[KILN_MAX_DIMS];
    uint32_t n;
    if (!onnx_const_ints(m, m->in[0], 0, "shape", shape, &n, KILN_MAX_DIMS))
        return m->ctx->err.status;
    struct frontend_const       v = {.dtype = KILN_DTYPE_F32, .numel = 1};
    double                      zero = 0;
    const Onnx__AttributeProto *a = onnx_attr(m, "value");
    v.data = &zero;
    if (a) {
        if (!a->t)
            return BAD(m, "attribute 'value' holds no tensor");
        char what[300];
        snprintf(what, sizeof what, "node %u '%s' (ConstantOfShape, opset %lld): value", m->nodeno,
                 onnx_node_name(m), (long long)m->opset);
        if (frontend_tensor_decode(m->ctx, a->t, what, &v) != KILN_OK)
            return m->ctx->err.status;
        if (v.numel != 1)
            return BAD(m, "attribute 'value' has %lld elements; it must have one",
                       (long long)v.numel);
    }
    struct frontend_const c;
    KILN_TRY(new_const(m, v.dtype, n, shape, &c));
    for (int64_t i = 0; i < c.numel; i++)
        c.data[i] = v.data[0];
    return onnx_set_const(m, 0, &c);
}

/* Range: start, limit and delta are constant scalars; the output is a constant of
 * max(ceil((limit - start) / delta), 0) elements start + i·delta, in start's dtype. */
enum kiln_status
onnx_op_range(struct onnx_imp *m)
{
    static const char *const what[] = {"start", "limit", "delta"};
    double                   v[3];
    enum kiln_dtype          dt = onnx_vdtype(m, m->in[0]);
    for (uint32_t i = 0; i < 3; i++) {
        struct onnx_value *p = m->in[i];
        if (!p->is_const)
            return UNSUP(m,
                         "dynamic shape: input %u (%s, '%s') must be a constant initializer or "
                         "Constant output",
                         i, what[i], p->name);
        if (p->c.numel != 1)
            return BAD(m, "input %u (%s) has %lld elements; it must be a scalar", i, what[i],
                       (long long)p->c.numel);
        if (onnx_vdtype(m, p) != dt)
            return BAD(m, "input %u (%s) has another dtype than start", i, what[i]);
        v[i] = p->c.data[0];
    }
    if (v[2] == 0 || !isfinite(v[0]) || !isfinite(v[1]) || !isfinite(v[2]))
        return BAD(m, "delta must be finite and nonzero, start and limit finite");
    double n = ceil((v[1] - v[0]) / v[2]);
    if (!(n >= 1))
        return UNSUP(m, "the range is empty; kiln has no empty tensors");
    if (n > (double)ONNX_CONST_MAX_ELEMS)
        return UNSUP(m, "the range has more than %lld elements", (long long)ONNX_CONST_MAX_ELEMS);
    int64_t               len = (int64_t)n;
    struct frontend_const c;
    KILN_TRY(new_const(m, dt, 1, &len, &c));
    for (int64_t i = 0; i < len; i++) /* integers: exact; floats: rounded to dt when stored */
        c.data[i] = v[0] + (double)i * v[2];
    return onnx_set_const(m, 0, &c);
}

/* Size: the element count, an int64 scalar. */
enum kiln_status
onnx_op_size(struct onnx_imp *m)
{
    struct frontend_const c;
    KILN_TRY(new_const(m, KILN_DTYPE_I64, 0, NULL, &c));
    c.data[0] = (double)kiln_shape_numel(onnx_vshape(m, m->in[0]), (int)onnx_vrank(m, m->in[0]));
    return onnx_set_const(m, 0, &c);
}

/* Split: one slice per output along axis. The sizes come from the `split` attribute (opset <
 * 13) or the constant second input (opset 1 and >= 13), else from `num_outputs` (opset 18: parts
 * of ceil(dim / n), the last smaller), else equal parts, one per output. */
enum kiln_status
onnx_op_split(struct onnx_imp *m)
{
    struct onnx_value *x = m->in[0];
    uint32_t           rank = onnx_vrank(m, x), nout = (uint32_t)m->node->n_output;
    int64_t            axis = onnx_norm_axis(onnx_attr_int(m, "axis", 0), rank);
    if (axis < 0 || axis >= (int64_t)rank)
        return BAD(m, "axis %lld is out of range for rank %u",
                   (long long)onnx_attr_int(m, "axis", 0), rank);
    int64_t  dim = onnx_vshape(m, x)[axis];
    int64_t *len = kiln_arena_alloc(m->ctx, sizeof(int64_t) * (nout ? nout : 1));
    uint32_t n = 0;
    bool     given = false;
    if (!len)
        return m->ctx->err.status;
    if (m->nin > 1 && m->in[1]) {
        if (!onnx_const_ints(m, m->in[1], 1, "split", len, &n, nout))
            return m->ctx->err.status;
        given = true;
    } else if (onnx_attr(m, "split")) {
        bool present;
        if (!onnx_attr_ints(m, "split", len, &n, nout, &present))
            return m->ctx->err.status;
        given = true;
    }
    if (given && n != nout)
        return BAD(m, "split has %u sizes for %u outputs", n, nout);
    if (!given) {
        int64_t parts = onnx_attr_int(m, "num_outputs", (int64_t)nout);
        if (parts != (int64_t)nout || !nout)
            return BAD(m, "num_outputs is %lld but the node has %u outputs", (long long)parts,
                       nout);
        bool    uneven = onnx_attr(m, "num_outputs") != NULL;
        int64_t each = uneven ? (dim + parts - 1) / parts : dim / parts;
        if (!uneven && dim % parts)
            return BAD(m, "dimension %lld of axis %lld does not split into %u equal parts",
                       (long long)dim, (long long)axis, nout);
        for (uint32_t i = 0; i < nout; i++)
            len[i] = i + 1 < nout ? each : dim - each * (int64_t)(nout - 1);
    }
    int64_t off = 0;
    for (uint32_t i = 0; i < nout; i++) {
        if (len[i] < 0 || len[i] > dim - off)
            return BAD(m, "the split sizes do not add up to dimension %lld of axis %lld",
                       (long long)dim, (long long)axis);
        off += len[i];
    }
    if (off != dim)
        return BAD(m, "the split sizes add up to %lld, not to dimension %lld of axis %lld",
                   (long long)off, (long long)dim, (long long)axis);
    uint32_t t = onnx_tensor(m, x);
    off = 0;
    for (uint32_t i = 0; i < nout; i++) {
        const char *o = m->node->output[i];
        int64_t     st = off, en = off + len[i];
        off = en;
        if (!o || !*o)
            continue;
        if (!len[i])
            return UNSUP(m, "output %u is empty; kiln has no empty tensors", i);
        struct onnx_attrs as = {0};
        onnx_at_ints(m, &as, "starts", &st, 1);
        onnx_at_ints(m, &as, "ends", &en, 1);
        onnx_at_ints(m, &as, "axes", &axis, 1);
        KILN_TRY(onnx_set_output(m, i, onnx_lib1(m, "slice", o, t, &as)));
    }
    return KILN_OK;
}
