/* frontend/onnx.c -- ONNX ModelProto to a kernel graph (kiln_graph_import_onnx).
 *
 * The model is unpacked by the protobuf-c code generated from Debian's onnx.proto. Then:
 *   1. graph inputs that are not initializers become kiln inputs, in order (their shapes must be
 *      static); initializers are decoded into constants;
 *   2. nodes are imported in order, each by a handler that maps it onto kiln's op library
 *      (kiln_lib_call) -- a node may become several library calls (Gemm: transpose, matmul,
 *      scale, add);
 *   3. graph outputs are marked, in order (a copy is added where an output is an argument or
 *      is listed twice).
 * Constants (initializers, Constant nodes, Shape of a static shape) stay values of the import
 * until a node reads them as data: only then do they become weight tensors, so integer tensors
 * read as shapes, axes, pads or slice bounds never reach the graph. A shape-like input that is
 * not a constant is an "unsupported: dynamic shape" error naming the node.
 *
 * Names: kiln names must match [A-Za-z_][A-Za-z0-9_]*; every character outside that set
 * (including '.') becomes '_', a leading digit gets a "t_" prefix, and a clash gets a numeric
 * suffix. No imported name contains '.', so none clashes with the library's intermediates
 * (OUT.sum, ...).
 *
 * Errors: an op, attribute or attribute value kiln does not handle is KILN_ERR_UNSUPPORTED, a
 * malformed model KILN_ERR_INVALID; both worded "node 'NAME' (OP, opset N): what". */
#include "frontend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct value {
    const char           *name;   /* ONNX name (owned by the unpacked model) */
    uint32_t              tensor; /* kiln tensor, or KILN_NONE while only a constant */
    bool                  is_const;
    struct frontend_const c;
};

struct imp {
    kiln_ctx              *ctx;
    struct kiln_graph     *g;
    const char            *file;
    int64_t                opset; /* of the default domain */
    struct value          *val;
    uint32_t               nval, capval;
    double               **wdata; /* per tensor: a weight's values, else NULL */
    uint32_t               capw;
    const Onnx__NodeProto *node; /* being imported */
    uint32_t               nodeno;
};

/* ---- errors ---- */

static enum kiln_status node_fail(struct imp *m, enum kiln_status st, const char *fmt, ...)
    KILN_PRINTF(3, 4);

static const char *
node_name(const struct imp *m)
{
    const Onnx__NodeProto *n = m->node;
    if (n->name && *n->name)
        return n->name;
    if (n->n_output && n->output[0] && *n->output[0])
        return n->output[0];
    return "";
}

static enum kiln_status
node_fail(struct imp *m, enum kiln_status st, const char *fmt, ...)
{
    char    msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    KILN_FAIL(m->ctx, st, "onnx", "node %u '%s' (%s, opset %lld): %s", m->nodeno, node_name(m),
              m->node->op_type ? m->node->op_type : "?", (long long)m->opset, msg);
    kiln_error_set_loc(m->ctx, m->file, 0, 0);
    return st;
}

#define UNSUP(m, ...) node_fail(m, KILN_ERR_UNSUPPORTED, __VA_ARGS__)
#define BAD(m, ...)   node_fail(m, KILN_ERR_INVALID, __VA_ARGS__)

/* A library error gets the node's context in front of it. */
static enum kiln_status
node_context(struct imp *m)
{
    if (kiln_ok(m->ctx) || !m->node)
        return kiln_ok(m->ctx) ? KILN_OK : m->ctx->err.status;
    struct kiln_error *e = &m->ctx->err;
    if (strncmp(e->msg, "node ", 5)) {
        char msg[sizeof e->msg + 400];
        snprintf(msg, sizeof msg, "node %u '%s' (%s, opset %lld): %s", m->nodeno, node_name(m),
                 m->node->op_type ? m->node->op_type : "?", (long long)m->opset, e->msg);
        memcpy(e->msg, msg, sizeof e->msg - 1);
        e->msg[sizeof e->msg - 1] = 0;
    }
    e->loc.line = e->loc.col = 0;
    if (!e->loc.file)
        kiln_error_set_loc(m->ctx, m->file, 0, 0);
    return e->status;
}

/* ---- names and values ---- */

static const char *
kname(struct imp *m, const char *onnx)
{
    size_t n = strlen(onnx);
    char  *s = kiln_arena_alloc(m->ctx, n + 24);
    if (!s)
        return NULL;
    size_t k = 0, cap = n + 24;
    if (!n
        || !((onnx[0] >= 'a' && onnx[0] <= 'z') || (onnx[0] >= 'A' && onnx[0] <= 'Z')
             || onnx[0] == '_')) {
        memcpy(s, "t_", 2);
        k = 2;
    }
    for (size_t i = 0; i < n; i++) {
        char c = onnx[i];
        bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        s[k++] = ok ? c : '_';
    }
    s[k] = 0;
    static const char *const reserved[] = {"input", "weight", "output", "where", "inf", "nan"};
    for (size_t i = 0; i < KILN_COUNTOF(reserved); i++)
        if (!strcmp(s, reserved[i])) {
            memmove(s + 2, s, k + 1);
            memcpy(s, "t_", 2);
            k += 2;
        }
    if (kiln_graph_find(m->g, s) == KILN_NONE)
        return s;
    for (unsigned i = 1;; i++) {
        snprintf(s + k, cap - k, "_%u", i);
        if (kiln_graph_find(m->g, s) == KILN_NONE)
            return s;
    }
}

static struct value *
find_value(struct imp *m, const char *name)
{
    for (uint32_t i = m->nval; i-- > 0;)
        if (!strcmp(m->val[i].name, name))
            return &m->val[i];
    return NULL;
}

static struct value *
new_value(struct imp *m, const char *name)
{
    struct value v = {.name = name, .tensor = KILN_NONE};
    if (!KILN_VEC_PUSH(m->ctx, m->val, m->nval, m->capval, v))
        return NULL;
    return &m->val[m->nval - 1];
}

static const struct kiln_tensor *
T(const struct imp *m, uint32_t t)
{
    return &m->g->tensor[t];
}

/* Rank, shape and dtype of a value, constant or not. */
static uint32_t
vrank(const struct imp *m, const struct value *v)
{
    return v->tensor != KILN_NONE ? T(m, v->tensor)->ndim : v->c.ndim;
}
static const int64_t *
vshape(const struct imp *m, const struct value *v)
{
    return v->tensor != KILN_NONE ? T(m, v->tensor)->shape : v->c.shape;
}
static enum kiln_dtype
vdtype(const struct imp *m, const struct value *v)
{
    return v->tensor != KILN_NONE ? (enum kiln_dtype)T(m, v->tensor)->dtype : v->c.dtype;
}

static bool
record_weight(struct imp *m, uint32_t t, double *data)
{
    if (t >= m->capw) {
        uint32_t cap = m->capw ? m->capw : 64;
        while (cap <= t)
            cap *= 2;
        double **nw = kiln_arena_alloc(m->ctx, sizeof(double *) * cap);
        if (!nw)
            return false;
        if (m->capw)
            memcpy(nw, m->wdata, sizeof(double *) * m->capw);
        m->wdata = nw;
        m->capw = cap;
    }
    m->wdata[t] = data;
    return true;
}

/* A new weight tensor holding constant c. */
static uint32_t
weight(struct imp *m, const char *onnx_name, const struct frontend_const *c)
{
    const char *nm = kname(m, onnx_name);
    if (!nm)
        return KILN_NONE;
    uint32_t t = kiln_graph_add_tensor(m->g, nm, c->dtype, c->ndim, c->shape, KILN_TENSOR_WEIGHT);
    if (t == KILN_NONE || !record_weight(m, t, c->data))
        return KILN_NONE;
    return t;
}

/* The kiln tensor of v, turning a constant into a weight the first time it is read as data. */
static uint32_t
tensor_of(struct imp *m, struct value *v)
{
    if (v->tensor == KILN_NONE && v->is_const)
        v->tensor = weight(m, v->name, &v->c);
    return v->tensor;
}

/* Input i of the current node: NULL when absent or empty (an optional input left out). */
static struct value *
opt_input(struct imp *m, uint32_t i)
{
    const Onnx__NodeProto *n = m->node;
    if (i >= n->n_input || !n->input[i] || !*n->input[i])
        return NULL;
    return find_value(m, n->input[i]);
}

static struct value *
input(struct imp *m, uint32_t i)
{
    const Onnx__NodeProto *n = m->node;
    if (i >= n->n_input || !n->input[i] || !*n->input[i]) {
        BAD(m, "input %u is missing", i);
        return NULL;
    }
    struct value *v = find_value(m, n->input[i]);
    if (!v)
        BAD(m, "input %u '%s' is not defined before the node", i, n->input[i]);
    return v;
}

/* Integer values of a constant input (a shape, axes, pads, slice bounds). */
static bool
const_ints(struct imp *m, struct value *v, uint32_t i, const char *what, int64_t *out, uint32_t *n,
           uint32_t cap)
{
    if (!v->is_const) {
        UNSUP(m,
              "dynamic shape: input %u (%s, '%s') must be a constant initializer or Constant "
              "output",
              i, what, v->name);
        return false;
    }
    if (v->c.numel > cap) {
        UNSUP(m, "input %u (%s) has %lld values; at most %u", i, what, (long long)v->c.numel, cap);
        return false;
    }
    for (int64_t k = 0; k < v->c.numel; k++)
        out[k] = (int64_t)v->c.data[k];
    *n = (uint32_t)v->c.numel;
    return true;
}

/* ---- attributes ---- */

static const Onnx__AttributeProto *
attr(const struct imp *m, const char *name)
{
    for (size_t i = 0; i < m->node->n_attribute; i++)
        if (m->node->attribute[i]->name && !strcmp(m->node->attribute[i]->name, name))
            return m->node->attribute[i];
    return NULL;
}

/* Every attribute of the node must be one of the NULL-terminated names. */
static bool
known_attrs(struct imp *m, ...)
{
    for (size_t i = 0; i < m->node->n_attribute; i++) {
        const char *a = m->node->attribute[i]->name ? m->node->attribute[i]->name : "";
        va_list     ap;
        va_start(ap, m);
        bool found = false;
        for (const char *s; !found && (s = va_arg(ap, const char *));)
            found = !strcmp(s, a);
        va_end(ap);
        if (!found) {
            UNSUP(m, "attribute '%s' is not supported", a);
            return false;
        }
    }
    return true;
}

static int64_t
attr_int(const struct imp *m, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = attr(m, name);
    return a && a->has_i ? a->i : dflt;
}

static double
attr_float(const struct imp *m, const char *name, double dflt)
{
    const Onnx__AttributeProto *a = attr(m, name);
    return a && a->has_f ? a->f : dflt;
}

/* A string attribute as a NUL-terminated arena copy, or dflt. */
static const char *
attr_str(struct imp *m, const char *name, const char *dflt)
{
    const Onnx__AttributeProto *a = attr(m, name);
    if (!a || !a->has_s)
        return dflt;
    return kiln_arena_strndup(m->ctx, (const char *)a->s.data, a->s.len);
}

/* An ints attribute: count in *n, values in out (cap entries); false on error. Absent: *n = 0
 * and *present = false. */
static bool
attr_ints(struct imp *m, const char *name, int64_t *out, uint32_t *n, uint32_t cap, bool *present)
{
    const Onnx__AttributeProto *a = attr(m, name);
    *n = 0;
    if (present)
        *present = a != NULL;
    if (!a)
        return true;
    if (a->n_ints > cap) {
        UNSUP(m, "attribute '%s' has %zu values; at most %u are supported", name, a->n_ints, cap);
        return false;
    }
    for (size_t i = 0; i < a->n_ints; i++)
        out[i] = a->ints[i];
    *n = (uint32_t)a->n_ints;
    return true;
}

/* ---- library calls ---- */

struct attrs {
    struct kiln_attr a[8];
    uint32_t         n;
};

static void
at_int(struct imp *m, struct attrs *as, const char *name, int64_t v)
{
    as->a[as->n++] =
        (struct kiln_attr){.name = kiln_sym_cstr(m->ctx, name), .kind = KILN_ATTR_INT, .i = v};
}
static void
at_ints(struct imp *m, struct attrs *as, const char *name, const int64_t *v, uint32_t n)
{
    as->a[as->n++] = (struct kiln_attr){
        .name = kiln_sym_cstr(m->ctx, name), .kind = KILN_ATTR_INTS, .n = n, .ints = v};
}
static void
at_float(struct imp *m, struct attrs *as, const char *name, double v)
{
    as->a[as->n++] =
        (struct kiln_attr){.name = kiln_sym_cstr(m->ctx, name), .kind = KILN_ATTR_FLOAT, .f = v};
}
static void
at_str(struct imp *m, struct attrs *as, const char *name, const char *s)
{
    as->a[as->n++] =
        (struct kiln_attr){.name = kiln_sym_cstr(m->ctx, name), .kind = KILN_ATTR_STRING, .s = s};
}

/* One library call writing a tensor named after `base` (an ONNX name); returns the tensor. */
static uint32_t
lib(struct imp *m, const char *op, const char *base, uint32_t nin, const uint32_t *in,
    const struct attrs *as)
{
    for (uint32_t i = 0; i < nin; i++)
        if (in[i] == KILN_NONE)
            return KILN_NONE;
    const char *nm = kname(m, base);
    uint32_t    out = KILN_NONE;
    if (!nm
        || kiln_lib_call(m->g, op, nm, nin, in, as ? as->n : 0, as ? as->a : NULL, 0, 0, &out)
               != KILN_OK) {
        node_context(m);
        return KILN_NONE;
    }
    return out;
}

static uint32_t
lib1(struct imp *m, const char *op, const char *base, uint32_t x, const struct attrs *as)
{
    return lib(m, op, base, 1, &x, as);
}

static uint32_t
lib2(struct imp *m, const char *op, const char *base, uint32_t a, uint32_t b)
{
    uint32_t in[2] = {a, b};
    return lib(m, op, base, 2, in, NULL);
}

/* reshape x to shape (rank may be 0). */
static uint32_t
reshape(struct imp *m, const char *base, uint32_t x, uint32_t rank, const int64_t *shape)
{
    struct attrs as = {0};
    int64_t     *s = kiln_arena_alloc(m->ctx, sizeof(int64_t) * (rank ? rank : 1));
    if (!s)
        return KILN_NONE;
    if (rank)
        memcpy(s, shape, sizeof(int64_t) * rank);
    at_ints(m, &as, "shape", s, rank);
    return lib1(m, "reshape", base, x, &as);
}

/* A scalar (shape [1]) weight holding v. */
static uint32_t
scalar(struct imp *m, const char *base, double v, enum kiln_dtype dt)
{
    struct frontend_const c = {.dtype = dt, .ndim = 1, .shape = {1}, .numel = 1};
    c.data = kiln_arena_alloc(m->ctx, sizeof(double));
    if (!c.data)
        return KILN_NONE;
    c.data[0] = v;
    return weight(m, base, &c);
}

static char *
suffixed(struct imp *m, const char *base, const char *suffix)
{
    return kiln_arena_printf(m->ctx, "%s_%s", base, suffix);
}

/* Binds output i of the node to tensor t. */
static enum kiln_status
set_output(struct imp *m, uint32_t i, uint32_t t)
{
    if (t == KILN_NONE)
        return node_context(m);
    const Onnx__NodeProto *n = m->node;
    if (i >= n->n_output || !n->output[i] || !*n->output[i])
        return KILN_OK;
    struct value *v = new_value(m, n->output[i]);
    if (!v)
        return m->ctx->err.status;
    v->tensor = t;
    return KILN_OK;
}

static enum kiln_status
set_const_output(struct imp *m, uint32_t i, const struct frontend_const *c)
{
    const Onnx__NodeProto *n = m->node;
    if (i >= n->n_output || !n->output[i] || !*n->output[i])
        return KILN_OK;
    struct value *v = new_value(m, n->output[i]);
    if (!v)
        return m->ctx->err.status;
    v->is_const = true;
    v->c = *c;
    return KILN_OK;
}

/* Output 0's name: the base of every tensor a node creates. */
static const char *
out0(const struct imp *m)
{
    const Onnx__NodeProto *n = m->node;
    return n->n_output && n->output[0] && *n->output[0] ? n->output[0] : "out";
}

/* Only output 0 may be used (others must be absent or empty). */
static bool
single_output(struct imp *m)
{
    for (size_t i = 1; i < m->node->n_output; i++)
        if (m->node->output[i] && *m->node->output[i]) {
            UNSUP(m, "output %zu ('%s') is not supported; only the first output", i,
                  m->node->output[i]);
            return false;
        }
    return true;
}

static int64_t
norm_axis(int64_t axis, uint32_t rank)
{
    return axis < 0 ? axis + (int64_t)rank : axis;
}

/* ---- elementwise ---- */

static enum kiln_status
imp_unary(struct imp *m, const char *op)
{
    if (!known_attrs(m, NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    return set_output(m, 0, lib1(m, op, out0(m), tensor_of(m, x), NULL));
}

static enum kiln_status
imp_binary(struct imp *m, const char *op)
{
    if (m->opset < 7) {
        if (!known_attrs(m, "broadcast", "axis", "consumed_inputs", NULL))
            return m->ctx->err.status;
    } else if (!known_attrs(m, NULL)) {
        return m->ctx->err.status;
    }
    struct value *a = input(m, 0), *b = a ? input(m, 1) : NULL;
    if (!b)
        return m->ctx->err.status;
    uint32_t ta = tensor_of(m, a), tb = tensor_of(m, b);
    uint32_t ra = vrank(m, a), rb = vrank(m, b);
    if (m->opset < 7 && !attr_int(m, "broadcast", 0)) {
        if (ra != rb || memcmp(vshape(m, a), vshape(m, b), sizeof(int64_t) * ra))
            return BAD(m, "inputs differ in shape and broadcast is 0");
    } else if (m->opset < 7 && attr(m, "axis")) {
        /* legacy broadcasting: b's dimensions line up with a's from `axis` on */
        int64_t ax = norm_axis(attr_int(m, "axis", 0), ra);
        if (ax < 0 || ax + rb > ra)
            return BAD(m, "axis %lld does not fit shapes of rank %u and %u",
                       (long long)attr_int(m, "axis", 0), ra, rb);
        int64_t  sh[KILN_MAX_DIMS];
        uint32_t n = (uint32_t)(ra - ax);
        for (uint32_t i = 0; i < n; i++)
            sh[i] = i < rb ? vshape(m, b)[i] : 1;
        tb = reshape(m, suffixed(m, out0(m), "b"), tb, n, sh);
    }
    enum kiln_dtype da = vdtype(m, a), db = vdtype(m, b);
    bool            fa = da == KILN_DTYPE_F32 || da == KILN_DTYPE_F64 || da == KILN_DTYPE_F16
              || da == KILN_DTYPE_BF16;
    if (da != db)
        return UNSUP(m, "inputs of different dtypes (%s, %s) are not supported",
                     kiln_dtype_name(da), kiln_dtype_name(db));
    if ((!strcmp(op, "div") || !strcmp(op, "pow")) && !fa)
        return UNSUP(m, "%s on integers (%s) is not supported", op, kiln_dtype_name(da));
    return set_output(m, 0, lib2(m, op, out0(m), ta, tb));
}

static enum kiln_status
imp_leaky_relu(struct imp *m)
{
    if (!known_attrs(m, "alpha", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    struct attrs as = {0};
    at_float(m, &as, "alpha", attr_float(m, "alpha", 0.01));
    return set_output(m, 0, lib1(m, "leaky_relu", out0(m), tensor_of(m, x), &as));
}

static enum kiln_status
imp_gelu(struct imp *m)
{
    if (!known_attrs(m, "approximate", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    const char *ap = attr_str(m, "approximate", "none");
    if (!ap || (strcmp(ap, "none") && strcmp(ap, "tanh")))
        return UNSUP(m, "approximate '%s' is not supported (none, tanh)", ap ? ap : "?");
    struct attrs as = {0};
    at_str(m, &as, "approximate", ap);
    return set_output(m, 0, lib1(m, "gelu", out0(m), tensor_of(m, x), &as));
}

/* Clip: max(min(x, hi), lo) with bounds from attributes (opset < 11) or inputs (constants are
 * folded into scalar weights, runtime inputs are read as rank-0 tensors). */
static enum kiln_status
imp_clip(struct imp *m)
{
    if (!known_attrs(m, m->opset < 11 ? "min" : NULL, "max", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    enum kiln_dtype dt = vdtype(m, x);
    uint32_t        bound[2] = {KILN_NONE, KILN_NONE}; /* lo, hi */
    const char     *o = out0(m);
    if (m->opset < 11) {
        if (attr(m, "min"))
            bound[0] = scalar(m, suffixed(m, o, "min"), attr_float(m, "min", 0), dt);
        if (attr(m, "max"))
            bound[1] = scalar(m, suffixed(m, o, "max"), attr_float(m, "max", 0), dt);
    } else {
        for (uint32_t i = 0; i < 2; i++) {
            struct value *b = opt_input(m, i + 1);
            if (!b)
                continue;
            if (vrank(m, b) > 1 || (vrank(m, b) == 1 && vshape(m, b)[0] != 1))
                return BAD(m, "input %u ('%s') must be a scalar", i + 1, b->name);
            bound[i] = tensor_of(m, b);
        }
    }
    uint32_t t = tensor_of(m, x);
    if (bound[1] != KILN_NONE)
        t = lib2(m, "minimum", bound[0] != KILN_NONE ? suffixed(m, o, "hi") : o, t, bound[1]);
    if (bound[0] != KILN_NONE)
        t = lib2(m, "maximum", o, t, bound[0]);
    if (bound[0] == KILN_NONE && bound[1] == KILN_NONE)
        t = reshape(m, o, t, vrank(m, x), vshape(m, x));
    return set_output(m, 0, t);
}

/* PRelu: max(x, 0) + slope * min(x, 0), slope broadcast against x. */
static enum kiln_status
imp_prelu(struct imp *m)
{
    if (!known_attrs(m, m->opset < 7 ? "consumed_inputs" : NULL, NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0), *sl = x ? input(m, 1) : NULL;
    if (!sl)
        return m->ctx->err.status;
    const char *o = out0(m);
    uint32_t    tx = tensor_of(m, x), ts = tensor_of(m, sl);
    if (m->opset < 7 && vrank(m, sl) == 1 && vrank(m, x) >= 2 && vshape(m, sl)[0] > 1
        && vrank(m, x) > 2) { /* legacy: a per-channel slope [C] against [N, C, ...] */
        int64_t sh[KILN_MAX_DIMS];
        sh[0] = vshape(m, sl)[0];
        for (uint32_t i = 1; i + 2 < vrank(m, x) + 1; i++)
            sh[i] = 1;
        ts = reshape(m, suffixed(m, o, "slope"), ts, vrank(m, x) - 1, sh);
    }
    uint32_t zero = scalar(m, suffixed(m, o, "zero"), 0, vdtype(m, x));
    uint32_t pos = lib2(m, "maximum", suffixed(m, o, "pos"), tx, zero);
    uint32_t neg = lib2(m, "minimum", suffixed(m, o, "neg"), tx, zero);
    uint32_t sc = lib2(m, "mul", suffixed(m, o, "scaled"), neg, ts);
    return set_output(m, 0, lib2(m, "add", o, pos, sc));
}

/* Activations written as chains of library ops with scalar constants:
 *   HardSigmoid  max(min(alpha x + beta, 1), 0)       HardSwish  x HardSigmoid(x; 1/6, 1/2)
 *   Softplus     log(exp(x) + 1)                      Softsign   x / (|x| + 1)
 *   Elu          max(x, 0) + alpha (exp(min(x, 0)) - 1)
 *   Selu         gamma (max(x, 0) + alpha (exp(min(x, 0)) - 1))
 *   Celu         max(x, 0) + min(alpha (exp(x / alpha) - 1), 0) */
static enum kiln_status
imp_activation(struct imp *m, const char *op)
{
    bool hs = !strcmp(op, "HardSigmoid"), elu = !strcmp(op, "Elu"), selu = !strcmp(op, "Selu"),
         celu = !strcmp(op, "Celu");
    if (!known_attrs(m, hs || elu || selu || celu ? "alpha" : NULL, hs ? "beta" : "gamma", NULL))
        return m->ctx->err.status;
    if (!selu && attr(m, "gamma"))
        return UNSUP(m, "attribute 'gamma' is not supported");
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    enum kiln_dtype dt = vdtype(m, x);
    if (dt != KILN_DTYPE_F32 && dt != KILN_DTYPE_F64 && dt != KILN_DTYPE_F16
        && dt != KILN_DTYPE_BF16)
        return UNSUP(m, "%s of %s is not supported (float dtypes only)", op, kiln_dtype_name(dt));
    const char *o = out0(m);
    uint32_t    t = tensor_of(m, x), y;
#define K(v)    scalar(m, suffixed(m, o, "k"), (v), dt)
#define STEP(s) suffixed(m, o, s)
    if (hs || !strcmp(op, "HardSwish")) {
        double alpha = hs ? attr_float(m, "alpha", 0.2) : 1.0 / 6,
               beta = hs ? attr_float(m, "beta", 0.5) : 0.5;
        uint32_t a = lib2(m, "mul", STEP("ax"), t, K(alpha));
        a = lib2(m, "add", STEP("axb"), a, K(beta));
        a = lib2(m, "minimum", STEP("min1"), a, K(1));
        y = lib2(m, "maximum", hs ? o : STEP("hsig"), a, K(0));
        if (!hs)
            y = lib2(m, "mul", o, t, y);
    } else if (!strcmp(op, "Softplus")) {
        y = lib1(m, "exp", STEP("exp"), t, NULL);
        y = lib2(m, "add", STEP("exp1"), y, K(1));
        y = lib1(m, "log", o, y, NULL);
    } else if (!strcmp(op, "Softsign")) {
        y = lib1(m, "abs", STEP("abs"), t, NULL);
        y = lib2(m, "add", STEP("abs1"), y, K(1));
        y = lib2(m, "div", o, t, y);
    } else if (celu) {
        double   alpha = attr_float(m, "alpha", 1);
        uint32_t e = lib2(m, "mul", STEP("xa"), t, K(1 / alpha));
        e = lib1(m, "exp", STEP("exp"), e, NULL);
        e = lib2(m, "sub", STEP("exp1"), e, K(1));
        e = lib2(m, "mul", STEP("neg"), e, K(alpha));
        e = lib2(m, "minimum", STEP("negmin"), e, K(0));
        y = lib2(m, "add", o, lib2(m, "maximum", STEP("pos"), t, K(0)), e);
    } else { /* Elu, Selu */
        double   alpha = attr_float(m, "alpha", elu ? 1.0 : 1.67326319217681884765625);
        double   gamma = attr_float(m, "gamma", 1.05070102214813232421875);
        uint32_t e = lib2(m, "minimum", STEP("min0"), t, K(0));
        e = lib1(m, "exp", STEP("exp"), e, NULL);
        e = lib2(m, "sub", STEP("exp1"), e, K(1));
        e = lib2(m, "mul", STEP("neg"), e, K(alpha));
        y = lib2(m, "add", elu ? o : STEP("sum"), lib2(m, "maximum", STEP("pos"), t, K(0)), e);
        if (selu)
            y = lib2(m, "mul", o, y, K(gamma));
    }
#undef K
#undef STEP
    return set_output(m, 0, y);
}

/* Sum, Max, Min: a chain of the binary op over 1 or more inputs. */
static enum kiln_status
imp_variadic(struct imp *m, const char *op)
{
    if (!known_attrs(m, NULL))
        return m->ctx->err.status;
    struct value *a = input(m, 0);
    if (!a)
        return m->ctx->err.status;
    uint32_t t = tensor_of(m, a);
    if (m->node->n_input == 1)
        return set_output(m, 0, reshape(m, out0(m), t, vrank(m, a), vshape(m, a)));
    for (size_t i = 1; i < m->node->n_input; i++) {
        struct value *b = input(m, (uint32_t)i);
        if (!b)
            return m->ctx->err.status;
        const char *nm = i + 1 == m->node->n_input ? out0(m) : suffixed(m, out0(m), "part");
        t = lib2(m, op, nm, t, tensor_of(m, b));
    }
    return set_output(m, 0, t);
}

/* ---- linear algebra ---- */

static enum kiln_status
imp_matmul(struct imp *m)
{
    if (!known_attrs(m, NULL))
        return m->ctx->err.status;
    struct value *a = input(m, 0), *b = a ? input(m, 1) : NULL;
    if (!b)
        return m->ctx->err.status;
    return set_output(m, 0, lib2(m, "matmul", out0(m), tensor_of(m, a), tensor_of(m, b)));
}

static enum kiln_status
imp_gemm(struct imp *m)
{
    if (!known_attrs(m, "alpha", "beta", "transA", "transB", m->opset < 7 ? "broadcast" : NULL,
                     NULL))
        return m->ctx->err.status;
    struct value *a = input(m, 0), *b = a ? input(m, 1) : NULL, *c = opt_input(m, 2);
    if (!b)
        return m->ctx->err.status;
    if (vrank(m, a) != 2 || vrank(m, b) != 2)
        return BAD(m, "A and B must be 2-D (ranks %u and %u)", vrank(m, a), vrank(m, b));
    double          alpha = attr_float(m, "alpha", 1), beta = attr_float(m, "beta", 1);
    enum kiln_dtype dt = vdtype(m, a);
    uint32_t        ta = tensor_of(m, a), tb = tensor_of(m, b), t;
    struct attrs    as = {0};
    if (attr_int(m, "transA", 0))
        ta = lib1(m, "transpose", suffixed(m, out0(m), "At"), ta, &as);
    bool tb_ = attr_int(m, "transB", 0) != 0;
    bool last = alpha == 1 && (!c || beta == 0);
    if (tb_) {
        /* x . w^T without materialising the transpose */
        t = lib2(m, "dense", last ? out0(m) : suffixed(m, out0(m), "mm"), ta, tb);
    } else {
        t = lib2(m, "matmul", last ? out0(m) : suffixed(m, out0(m), "mm"), ta, tb);
    }
    if (alpha != 1)
        t = lib2(m, "mul", c && beta != 0 ? suffixed(m, out0(m), "scaled") : out0(m), t,
                 scalar(m, suffixed(m, out0(m), "alpha"), alpha, dt));
    if (c && beta != 0) {
        uint32_t tc;
        if (beta != 1 && c->is_const) {
            struct frontend_const k = c->c;
            k.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)k.numel);
            if (!k.data)
                return m->ctx->err.status;
            for (int64_t i = 0; i < k.numel; i++)
                k.data[i] = c->c.data[i] * beta;
            tc = weight(m, suffixed(m, c->name, "beta"), &k);
        } else {
            tc = tensor_of(m, c);
            if (beta != 1)
                tc = lib2(m, "mul", suffixed(m, out0(m), "C"), tc,
                          scalar(m, suffixed(m, out0(m), "beta"), beta, dt));
        }
        t = lib2(m, "add", out0(m), t, tc);
    }
    return set_output(m, 0, t);
}

static enum kiln_status
imp_einsum(struct imp *m)
{
    if (!known_attrs(m, "equation", NULL))
        return m->ctx->err.status;
    const char *eq = attr_str(m, "equation", NULL);
    if (!eq)
        return BAD(m, "attribute 'equation' is required");
    char *e = kiln_arena_strdup(m->ctx, eq), *w = e;
    if (!e)
        return m->ctx->err.status;
    for (const char *p = eq; *p; p++)
        if (*p != ' ')
            *w++ = *p;
    *w = 0;
    uint32_t in[16];
    if (m->node->n_input == 0 || m->node->n_input > 16)
        return UNSUP(m, "%zu inputs; 1 to 16 are supported", m->node->n_input);
    for (size_t i = 0; i < m->node->n_input; i++) {
        struct value *v = input(m, (uint32_t)i);
        if (!v)
            return m->ctx->err.status;
        in[i] = tensor_of(m, v);
    }
    struct attrs as = {0};
    at_str(m, &as, "eq", e);
    return set_output(m, 0, lib(m, "einsum", out0(m), (uint32_t)m->node->n_input, in, &as));
}

/* ReduceSum, ReduceMean, ReduceSumSquare: an einsum over the kept labels ("abcd->ab"), a
 * multiplication by 1/n for the mean, a reshape for keepdims. */
static enum kiln_status
imp_reduce(struct imp *m, int kind) /* 0 sum, 1 mean, 2 sum of squares */
{
    bool axes_input = (kind == 0 && m->opset >= 13) || m->opset >= 18;
    if (!known_attrs(m, "keepdims", axes_input ? "noop_with_empty_axes" : "axes", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    uint32_t r = vrank(m, x), na = 0;
    int64_t  ax[KILN_MAX_DIMS];
    if (axes_input) {
        struct value *a = opt_input(m, 1);
        if (a && !const_ints(m, a, 1, "axes", ax, &na, KILN_MAX_DIMS))
            return m->ctx->err.status;
        if (!na && attr_int(m, "noop_with_empty_axes", 0))
            return set_output(m, 0, reshape(m, out0(m), tensor_of(m, x), r, vshape(m, x)));
    } else if (!attr_ints(m, "axes", ax, &na, KILN_MAX_DIMS, NULL)) {
        return m->ctx->err.status;
    }
    bool red[KILN_MAX_DIMS] = {0};
    for (uint32_t i = 0; i < na; i++) {
        int64_t a = norm_axis(ax[i], r);
        if (a < 0 || a >= (int64_t)r)
            return BAD(m, "axis %lld is out of range for rank %u", (long long)ax[i], r);
        red[a] = true;
    }
    if (!r)
        return UNSUP(m, "reducing a scalar is not supported");
    char    eq[3 * KILN_MAX_DIMS + 8], *p = eq;
    int64_t n = 1;
    for (int pass = 0; pass < (kind == 2 ? 2 : 1); pass++) {
        if (pass)
            *p++ = ',';
        for (uint32_t i = 0; i < r; i++)
            *p++ = (char)('a' + i);
    }
    *p++ = '-';
    *p++ = '>';
    uint32_t nout = 0;
    for (uint32_t i = 0; i < r; i++) {
        if (na && !red[i]) {
            *p++ = (char)('a' + i);
            nout++;
        } else {
            n *= vshape(m, x)[i];
        }
    }
    *p = 0;
    enum kiln_dtype dt = vdtype(m, x);
    bool            isf = dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64 || dt == KILN_DTYPE_F16
               || dt == KILN_DTYPE_BF16;
    if (kind == 1 && !isf)
        return UNSUP(m, "the mean of integers is not supported");
    bool        kd = attr_int(m, "keepdims", 1) != 0;
    const char *o = out0(m);
    uint32_t    tx = tensor_of(m, x);
    if (nout == 0) {
        /* every axis: reduce [1, numel] to [1], then reshape to [1, ..., 1] */
        if (!kd)
            return UNSUP(m, "reducing every axis without keepdims (a rank-0 result) is not "
                            "supported");
        int64_t flat[2] = {1, n};
        tx = reshape(m, suffixed(m, o, "flat"), tx, 2, flat);
        snprintf(eq, sizeof eq, kind == 2 ? "ab,ab->a" : "ab->a");
    }
    uint32_t     in[2] = {tx, tx};
    struct attrs as = {0};
    at_str(m, &as, "eq", kiln_arena_strdup(m->ctx, eq));
    bool     last = kind != 1 && !kd;
    uint32_t t = lib(m, "einsum", last ? o : suffixed(m, o, "sum"), kind == 2 ? 2 : 1, in, &as);
    if (kind == 1)
        t = lib2(m, "mul", kd ? suffixed(m, o, "mean") : o, t,
                 scalar(m, suffixed(m, o, "inv_n"), 1.0 / (double)n, dt));
    if (kd) {
        int64_t sh[KILN_MAX_DIMS];
        for (uint32_t i = 0; i < r; i++)
            sh[i] = na && !red[i] ? vshape(m, x)[i] : 1;
        t = reshape(m, o, t, r, sh);
    }
    return set_output(m, 0, t);
}

/* ---- convolution and pooling ---- */

struct window {
    uint32_t nsp;              /* spatial dimensions: 1 or 2 */
    int64_t  k[2], s[2], d[2]; /* kernel, strides, dilations */
    int64_t  pads[4];          /* top, left, bottom, right (ONNX begin..., end...) */
    int64_t  opad[2];          /* ConvTranspose output_padding */
};

/* Reads kernel_shape (or kshape when given), strides, dilations, pads, auto_pad for nsp spatial
 * dimensions of input extents in[]; fills w with 2-D values (1-D padded with a unit height). */
static bool
read_window(struct imp *m, uint32_t nsp, const int64_t *in, const int64_t *kshape, bool transpose,
            struct window *w)
{
    int64_t  k[2] = {1, 1}, s[2] = {1, 1}, d[2] = {1, 1}, p[4] = {0}, op[2] = {0};
    uint32_t nk, ns, nd, np, nop;
    bool     hk;
    if (!attr_ints(m, "kernel_shape", k, &nk, 2, &hk) || !attr_ints(m, "strides", s, &ns, 2, NULL)
        || !attr_ints(m, "dilations", d, &nd, 2, NULL) || !attr_ints(m, "pads", p, &np, 4, NULL)
        || !attr_ints(m, "output_padding", op, &nop, 2, NULL))
        return false;
    if (!hk) {
        if (!kshape) {
            BAD(m, "attribute 'kernel_shape' is required");
            return false;
        }
        for (uint32_t i = 0; i < nsp; i++)
            k[i] = kshape[i];
        nk = nsp;
    }
    if (nk != nsp || (ns && ns != nsp) || (nd && nd != nsp) || (np && np != 2 * nsp)
        || (nop && nop != nsp)) {
        BAD(m, "kernel_shape, strides, dilations, pads must have %u, %u, %u, %u entries", nsp, nsp,
            nsp, 2 * nsp);
        return false;
    }
    if (!ns)
        s[0] = s[1] = 1;
    if (!nd)
        d[0] = d[1] = 1;
    for (uint32_t i = 0; i < nsp; i++)
        if (k[i] < 1 || s[i] < 1 || d[i] < 1) {
            BAD(m, "kernel_shape, strides and dilations must be positive");
            return false;
        }
    const char *ap = attr_str(m, "auto_pad", "NOTSET");
    if (!ap)
        return false;
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
        for (uint32_t i = 0; i < nsp; i++) {
            int64_t total;
            if (transpose) {
                int64_t outn = in[i] * s[i];
                total = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * d[i] + 1 - outn;
            } else {
                int64_t outn = (in[i] + s[i] - 1) / s[i];
                total = (outn - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in[i];
            }
            if (total < 0)
                total = 0;
            int64_t small = total / 2, big = total - small;
            bool    upper = !strcmp(ap, "SAME_UPPER");
            p[i] = upper ? small : big;
            p[i + nsp] = upper ? big : small;
        }
    } else if (!strcmp(ap, "VALID")) {
        memset(p, 0, sizeof p);
    } else if (strcmp(ap, "NOTSET")) {
        UNSUP(m, "auto_pad '%s' is not supported", ap);
        return false;
    }
    int64_t  os[4];
    uint32_t nos;
    bool     has_os;
    if (!attr_ints(m, "output_shape", os, &nos, 4, &has_os))
        return false;
    if (has_os) {
        /* ConvTranspose: the pads that give this output shape (ONNX's formula) */
        if (nos == nsp + 2)
            memmove(os, os + 2, sizeof(int64_t) * nsp);
        else if (nos != nsp) {
            BAD(m, "output_shape has %u entries; %u expected", nos, nsp);
            return false;
        }
        bool upper = !strcmp(ap, "SAME_UPPER");
        for (uint32_t i = 0; i < nsp; i++) {
            int64_t total = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * d[i] + 1 - os[i];
            if (total < 0) {
                op[i] -= total;
                total = 0;
            }
            p[i] = upper ? total / 2 : total - total / 2;
            p[i + nsp] = upper ? total - total / 2 : total / 2;
        }
    }
    memset(w, 0, sizeof *w);
    w->nsp = nsp;
    /* 2-D view: a 1-D window is [1, k] */
    uint32_t o = nsp == 1 ? 1 : 0;
    w->k[0] = w->s[0] = w->d[0] = 1;
    for (uint32_t i = 0; i < nsp; i++) {
        w->k[o + i] = k[i];
        w->s[o + i] = s[i];
        w->d[o + i] = d[i];
        w->opad[o + i] = op[i];
        w->pads[o + i] = p[i];
        w->pads[2 + o + i] = p[nsp + i];
    }
    return true;
}

/* x as 4-D: a 3-D [N, C, L] input becomes [N, C, 1, L]. */
static uint32_t
as_4d(struct imp *m, uint32_t x, const char *base)
{
    if (x == KILN_NONE || T(m, x)->ndim == 4)
        return x;
    const int64_t *s = T(m, x)->shape;
    int64_t        sh[4] = {s[0], s[1], 1, s[2]};
    return reshape(m, base, x, 4, sh);
}

static uint32_t
from_4d(struct imp *m, uint32_t y, uint32_t rank, const char *base)
{
    if (y == KILN_NONE || rank == 4)
        return y;
    const int64_t *s = T(m, y)->shape;
    int64_t        sh[3] = {s[0], s[1], s[3]};
    return reshape(m, base, y, 3, sh);
}

static bool
spatial_rank(struct imp *m, const struct value *x)
{
    uint32_t r = vrank(m, x);
    if (r == 3 || r == 4)
        return true;
    UNSUP(m, "input has rank %u: only 1-D and 2-D (rank 3 and 4) windows are supported", r);
    return false;
}

static enum kiln_status
imp_conv(struct imp *m, bool transpose)
{
    if (!known_attrs(m, "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                     transpose ? "output_padding" : NULL, "output_shape", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0), *w = x ? input(m, 1) : NULL, *b = opt_input(m, 2);
    if (!w || !spatial_rank(m, x))
        return m->ctx->err.status;
    uint32_t rank = vrank(m, x), nsp = rank - 2;
    if (vrank(m, w) != rank)
        return BAD(m, "weight has rank %u, input rank %u", vrank(m, w), rank);
    struct window win;
    if (!read_window(m, nsp, vshape(m, x) + 2, vshape(m, w) + 2, transpose, &win))
        return m->ctx->err.status;
    const char *o = out0(m);
    uint32_t    in[3] = {as_4d(m, tensor_of(m, x), suffixed(m, o, "x4")),
                         as_4d(m, tensor_of(m, w), suffixed(m, o, "w4")),
                      b ? tensor_of(m, b) : KILN_NONE};
    int64_t    *pads = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 10);
    if (!pads)
        return m->ctx->err.status;
    memcpy(pads, win.pads, sizeof(int64_t) * 4);
    memcpy(pads + 4, win.s, sizeof(int64_t) * 2);
    memcpy(pads + 6, win.d, sizeof(int64_t) * 2);
    memcpy(pads + 8, win.opad, sizeof(int64_t) * 2);
    struct attrs as = {0};
    at_ints(m, &as, "padding", pads, 4);
    at_ints(m, &as, "stride", pads + 4, 2);
    at_ints(m, &as, "dilation", pads + 6, 2);
    at_int(m, &as, "groups", attr_int(m, "group", 1));
    if (transpose)
        at_ints(m, &as, "output_padding", pads + 8, 2);
    uint32_t y = lib(m, transpose ? "conv2d_transpose" : "conv2d",
                     rank == 4 ? o : suffixed(m, o, "y4"), b ? 3 : 2, in, &as);
    return set_output(m, 0, from_4d(m, y, rank, o));
}

static enum kiln_status
imp_pool(struct imp *m, bool is_max)
{
    if (!known_attrs(m, "auto_pad", "ceil_mode", "kernel_shape", "pads", "strides",
                     is_max ? "dilations" : "count_include_pad", is_max ? "storage_order" : NULL,
                     NULL))
        return m->ctx->err.status;
    if (!single_output(m))
        return m->ctx->err.status;
    if (attr_int(m, "storage_order", 0))
        return UNSUP(m, "storage_order 1 is not supported");
    struct value *x = input(m, 0);
    if (!x || !spatial_rank(m, x))
        return m->ctx->err.status;
    uint32_t      rank = vrank(m, x);
    struct window w;
    if (!read_window(m, rank - 2, vshape(m, x) + 2, NULL, false, &w))
        return m->ctx->err.status;
    const char *o = out0(m);
    uint32_t    t = as_4d(m, tensor_of(m, x), suffixed(m, o, "x4"));
    bool        ceil_mode = attr_int(m, "ceil_mode", 0) != 0;
    bool        cip = attr_int(m, "count_include_pad", 0) != 0;
    bool        sym = w.pads[0] == w.pads[2] && w.pads[1] == w.pads[3] && 2 * w.pads[0] <= w.k[0]
               && 2 * w.pads[1] <= w.k[1];
    bool     any_pad = w.pads[0] || w.pads[1] || w.pads[2] || w.pads[3];
    int64_t *v = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 16);
    if (!v)
        return m->ctx->err.status;
    struct attrs as = {0};
    if (any_pad && !sym) {
        /* explicit padding: -max for max pooling (never selected), zeros for averages that
         * count padding; averages that do not count it cannot be padded this way */
        if (!is_max && !cip)
            return UNSUP(m, "asymmetric pads with count_include_pad 0");
        if (ceil_mode)
            return UNSUP(m, "asymmetric pads with ceil_mode 1");
        int64_t *pd = v + 8;
        pd[0] = pd[1] = pd[4] = pd[5] = 0;
        pd[2] = w.pads[0];
        pd[3] = w.pads[1];
        pd[6] = w.pads[2];
        pd[7] = w.pads[3];
        at_ints(m, &as, "pads", pd, 8);
        if (is_max)
            at_float(m, &as, "value", -3.4028234663852886e38);
        t = lib1(m, "pad", suffixed(m, o, "pad"), t, &as);
        memset(&as, 0, sizeof as);
        memset(w.pads, 0, sizeof w.pads);
    }
    memcpy(v, w.k, sizeof(int64_t) * 2);
    memcpy(v + 2, w.s, sizeof(int64_t) * 2);
    v[4] = w.pads[0];
    v[5] = w.pads[1];
    memcpy(v + 6, w.d, sizeof(int64_t) * 2);
    at_ints(m, &as, "kernel", v, 2);
    at_ints(m, &as, "stride", v + 2, 2);
    at_ints(m, &as, "padding", v + 4, 2);
    at_int(m, &as, "ceil_mode", ceil_mode);
    if (is_max)
        at_ints(m, &as, "dilation", v + 6, 2);
    else
        at_int(m, &as, "count_include_pad", cip);
    uint32_t y =
        lib1(m, is_max ? "max_pool2d" : "avg_pool2d", rank == 4 ? o : suffixed(m, o, "y4"), t, &as);
    return set_output(m, 0, from_4d(m, y, rank, o));
}

static enum kiln_status
imp_global_pool(struct imp *m, bool is_max)
{
    if (!known_attrs(m, NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x || !spatial_rank(m, x))
        return m->ctx->err.status;
    uint32_t    rank = vrank(m, x);
    const char *o = out0(m);
    uint32_t    t = as_4d(m, tensor_of(m, x), suffixed(m, o, "x4"));
    uint32_t    y = lib1(m, is_max ? "global_max_pool2d" : "global_avg_pool2d",
                      rank == 4 ? o : suffixed(m, o, "y4"), t, NULL);
    return set_output(m, 0, from_4d(m, y, rank, o));
}

/* ---- normalisation ---- */

static enum kiln_status
imp_batch_norm(struct imp *m)
{
    if (!known_attrs(m, "epsilon", "momentum", "spatial", "training_mode", "is_test",
                     "consumed_inputs", NULL))
        return m->ctx->err.status;
    if (attr_int(m, "training_mode", 0))
        return UNSUP(m, "training_mode 1 is not supported (inference only)");
    if (attr_int(m, "spatial", 1) != 1)
        return UNSUP(m, "spatial 0 is not supported");
    if (!single_output(m))
        return m->ctx->err.status;
    uint32_t in[5];
    for (uint32_t i = 0; i < 5; i++) {
        struct value *v = input(m, i);
        if (!v)
            return m->ctx->err.status;
        in[i] = tensor_of(m, v);
    }
    struct attrs as = {0};
    at_float(m, &as, "eps", attr_float(m, "epsilon", 1e-5));
    return set_output(m, 0, lib(m, "batch_norm", out0(m), 5, in, &as));
}

static enum kiln_status
imp_softmax(struct imp *m, const char *op)
{
    if (!known_attrs(m, "axis", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    uint32_t rank = vrank(m, x);
    int64_t  axis = norm_axis(attr_int(m, "axis", m->opset < 13 ? 1 : -1), rank);
    if (axis < 0 || axis >= (int64_t)(rank ? rank : 1))
        return BAD(m, "axis %lld is out of range for rank %u", (long long)attr_int(m, "axis", 0),
                   rank);
    uint32_t     t = tensor_of(m, x);
    struct attrs as = {0};
    if (m->opset < 13 && axis + 1 < (int64_t)rank) {
        /* before opset 13: softmax over the flattened dimensions axis.. */
        int64_t inner = 1;
        for (uint32_t i = (uint32_t)axis; i < rank; i++)
            inner *= vshape(m, x)[i];
        int64_t sh[KILN_MAX_DIMS];
        memcpy(sh, vshape(m, x), sizeof(int64_t) * (size_t)axis);
        sh[axis] = inner;
        t = reshape(m, suffixed(m, out0(m), "flat"), t, (uint32_t)axis + 1, sh);
        at_int(m, &as, "axis", axis);
        t = lib1(m, op, suffixed(m, out0(m), "sm"), t, &as);
        return set_output(m, 0, reshape(m, out0(m), t, rank, vshape(m, x)));
    }
    at_int(m, &as, "axis", axis);
    return set_output(m, 0, lib1(m, op, out0(m), t, &as));
}

/* ---- data movement ---- */

static enum kiln_status
imp_reshape(struct imp *m)
{
    if (!known_attrs(m, "allowzero", m->opset < 5 ? "shape" : NULL, NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    int64_t  sh[KILN_MAX_DIMS];
    uint32_t n;
    if (m->opset < 5) {
        if (!attr_ints(m, "shape", sh, &n, KILN_MAX_DIMS, NULL))
            return m->ctx->err.status;
    } else {
        struct value *s = input(m, 1);
        if (!s || !const_ints(m, s, 1, "shape", sh, &n, KILN_MAX_DIMS))
            return m->ctx->err.status;
    }
    bool allowzero = attr_int(m, "allowzero", 0) != 0;
    for (uint32_t i = 0; i < n; i++)
        if (sh[i] == 0 && allowzero)
            return UNSUP(m, "allowzero 1 with a 0 in the shape (an empty tensor)");
        else if (sh[i] == 0) {
            if (i >= vrank(m, x))
                return BAD(m, "shape entry %u is 0 but the input has rank %u", i, vrank(m, x));
            sh[i] = vshape(m, x)[i];
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
        if (numel == x->c.numel) {
            struct frontend_const c = x->c;
            c.ndim = n;
            memcpy(c.shape, sh, sizeof(int64_t) * n);
            return set_const_output(m, 0, &c);
        }
    }
    return set_output(m, 0, reshape(m, out0(m), tensor_of(m, x), n, sh));
}

static enum kiln_status
imp_flatten(struct imp *m)
{
    if (!known_attrs(m, "axis", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    struct attrs as = {0};
    at_int(m, &as, "axis", attr_int(m, "axis", 1));
    return set_output(m, 0, lib1(m, "flatten", out0(m), tensor_of(m, x), &as));
}

static enum kiln_status
imp_identity(struct imp *m)
{
    if (!known_attrs(m, NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    if (x->is_const && x->tensor == KILN_NONE)
        return set_const_output(m, 0, &x->c);
    return set_output(m, 0, reshape(m, out0(m), tensor_of(m, x), vrank(m, x), vshape(m, x)));
}

/* Dropout at inference: the identity (the mask output is not supported). */
static enum kiln_status
imp_dropout(struct imp *m)
{
    if (!known_attrs(m, "ratio", "seed", "is_test", NULL))
        return m->ctx->err.status;
    if (m->opset >= 12) {
        struct value *tm = opt_input(m, 2);
        if (tm && (!tm->is_const || tm->c.data[0] != 0))
            return UNSUP(m, "training_mode must be a constant false");
    }
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    if (m->node->n_output > 1 && m->node->output[1] && *m->node->output[1]) {
        /* the mask: all true at inference (opset >= 10 types it bool) */
        if (m->opset < 10)
            return UNSUP(m, "the mask output before opset 10 is not supported");
        struct frontend_const c = {.dtype = KILN_DTYPE_BOOL, .ndim = vrank(m, x)};
        memcpy(c.shape, vshape(m, x), sizeof(int64_t) * c.ndim);
        c.numel = 1;
        for (uint32_t i = 0; i < c.ndim; i++)
            c.numel *= c.shape[i];
        c.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)c.numel);
        if (!c.data)
            return m->ctx->err.status;
        for (int64_t i = 0; i < c.numel; i++)
            c.data[i] = 1;
        KILN_TRY(set_const_output(m, 1, &c));
    }
    return set_output(m, 0, reshape(m, out0(m), tensor_of(m, x), vrank(m, x), vshape(m, x)));
}

static enum kiln_status
imp_transpose(struct imp *m)
{
    if (!known_attrs(m, "perm", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    int64_t  perm[KILN_MAX_DIMS];
    uint32_t n;
    bool     has;
    if (!attr_ints(m, "perm", perm, &n, KILN_MAX_DIMS, &has))
        return m->ctx->err.status;
    int64_t     *p = kiln_arena_alloc(m->ctx, sizeof(int64_t) * KILN_MAX_DIMS);
    struct attrs as = {0};
    if (!p)
        return m->ctx->err.status;
    memcpy(p, perm, sizeof perm);
    if (has)
        at_ints(m, &as, "perm", p, n);
    return set_output(m, 0, lib1(m, "transpose", out0(m), tensor_of(m, x), &as));
}

static enum kiln_status
imp_concat(struct imp *m)
{
    if (!known_attrs(m, "axis", NULL))
        return m->ctx->err.status;
    if (!attr(m, "axis") && m->opset >= 4)
        return BAD(m, "attribute 'axis' is required");
    size_t n = m->node->n_input;
    if (!n)
        return BAD(m, "no inputs");
    uint32_t *in = kiln_arena_alloc(m->ctx, sizeof(uint32_t) * n);
    if (!in)
        return m->ctx->err.status;
    for (size_t i = 0; i < n; i++) {
        struct value *v = input(m, (uint32_t)i);
        if (!v)
            return m->ctx->err.status;
        in[i] = tensor_of(m, v);
    }
    struct attrs as = {0};
    at_int(m, &as, "axis", attr_int(m, "axis", 1));
    return set_output(m, 0, lib(m, "concat", out0(m), (uint32_t)n, in, &as));
}

static enum kiln_status
imp_pad(struct imp *m)
{
    if (!known_attrs(m, "mode", m->opset < 11 ? "pads" : NULL, m->opset < 11 ? "value" : NULL,
                     m->opset < 2 ? "paddings" : NULL, NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    uint32_t rank = vrank(m, x), n;
    int64_t *pads = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 2 * KILN_MAX_DIMS);
    double   value = 0;
    if (!pads)
        return m->ctx->err.status;
    if (m->opset < 11) {
        if (!attr_ints(m, m->opset < 2 ? "paddings" : "pads", pads, &n, 2 * KILN_MAX_DIMS, NULL))
            return m->ctx->err.status;
        value = attr_float(m, "value", 0);
    } else {
        struct value *p = input(m, 1), *v = opt_input(m, 2);
        if (!p || !const_ints(m, p, 1, "pads", pads, &n, 2 * KILN_MAX_DIMS))
            return m->ctx->err.status;
        if (v) {
            if (!v->is_const || v->c.numel != 1)
                return UNSUP(m, "constant_value must be a constant scalar");
            value = v->c.data[0];
        }
        if (opt_input(m, 3))
            return UNSUP(m, "input 3 (axes) is not supported");
    }
    if (n != 2 * rank)
        return BAD(m, "pads has %u entries; the input has rank %u", n, rank);
    const char *mode = attr_str(m, "mode", "constant");
    if (!mode || (strcmp(mode, "constant") && strcmp(mode, "edge") && strcmp(mode, "reflect")))
        return UNSUP(m, "mode '%s' is not supported (constant, edge, reflect)", mode ? mode : "?");
    struct attrs as = {0};
    at_ints(m, &as, "pads", pads, n);
    at_float(m, &as, "value", value);
    at_str(m, &as, "mode", mode);
    return set_output(m, 0, lib1(m, "pad", out0(m), tensor_of(m, x), &as));
}

static enum kiln_status
imp_slice(struct imp *m)
{
    if (!known_attrs(m, m->opset < 10 ? "starts" : NULL, "ends", "axes", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    int64_t *v = kiln_arena_alloc(m->ctx, sizeof(int64_t) * 4 * KILN_MAX_DIMS);
    if (!v)
        return m->ctx->err.status;
    int64_t *st = v, *en = v + KILN_MAX_DIMS, *ax = v + 2 * KILN_MAX_DIMS,
            *sp = v + 3 * KILN_MAX_DIMS;
    uint32_t ns, ne, na = 0, nsp = 0;
    bool     has_axes = false;
    if (m->opset < 10) {
        if (!attr_ints(m, "starts", st, &ns, KILN_MAX_DIMS, NULL)
            || !attr_ints(m, "ends", en, &ne, KILN_MAX_DIMS, NULL)
            || !attr_ints(m, "axes", ax, &na, KILN_MAX_DIMS, &has_axes))
            return m->ctx->err.status;
    } else {
        struct value *s = input(m, 1), *e = s ? input(m, 2) : NULL, *a = opt_input(m, 3),
                     *p = opt_input(m, 4);
        if (!e || !const_ints(m, s, 1, "starts", st, &ns, KILN_MAX_DIMS)
            || !const_ints(m, e, 2, "ends", en, &ne, KILN_MAX_DIMS)
            || (a && !const_ints(m, a, 3, "axes", ax, &na, KILN_MAX_DIMS))
            || (p && !const_ints(m, p, 4, "steps", sp, &nsp, KILN_MAX_DIMS)))
            return m->ctx->err.status;
        has_axes = a != NULL;
    }
    uint32_t rank = vrank(m, x);
    if (ne != ns || (has_axes && na != ns) || (nsp && nsp != ns))
        return BAD(m, "starts, ends, axes and steps differ in length");
    if (!has_axes)
        for (uint32_t i = 0; i < ns; i++)
            ax[i] = i;
    for (uint32_t i = 0; i < ns; i++) {
        int64_t a = norm_axis(ax[i], rank);
        if (a < 0 || a >= (int64_t)rank)
            return BAD(m, "axis %lld is out of range", (long long)ax[i]);
        int64_t dim = vshape(m, x)[a], step = nsp ? sp[i] : 1;
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
    struct attrs as = {0};
    at_ints(m, &as, "starts", st, ns);
    at_ints(m, &as, "ends", en, ns);
    at_ints(m, &as, "axes", ax, ns);
    at_ints(m, &as, "steps", sp, ns);
    return set_output(m, 0, lib1(m, "slice", out0(m), tensor_of(m, x), &as));
}

/* Squeeze (unsqueeze false) and Unsqueeze: a reshape; axes from the attribute (opset < 13) or
 * a constant input. */
static enum kiln_status
imp_squeeze(struct imp *m, bool unsqueeze)
{
    if (!known_attrs(m, m->opset < 13 ? "axes" : NULL, NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    int64_t  ax[KILN_MAX_DIMS];
    uint32_t na = 0;
    bool     has = false;
    if (m->opset < 13) {
        if (!attr_ints(m, "axes", ax, &na, KILN_MAX_DIMS, &has))
            return m->ctx->err.status;
    } else {
        struct value *a = opt_input(m, 1);
        if (a && !const_ints(m, a, 1, "axes", ax, &na, KILN_MAX_DIMS))
            return m->ctx->err.status;
        has = a != NULL;
    }
    uint32_t       rank = vrank(m, x), orank = unsqueeze ? rank + na : rank;
    const int64_t *s = vshape(m, x);
    bool           sel[KILN_MAX_DIMS + 8] = {0};
    if (unsqueeze && !has)
        return BAD(m, "axes are required");
    if (orank > KILN_MAX_DIMS)
        return UNSUP(m, "the result would have %u dimensions; at most %d", orank, KILN_MAX_DIMS);
    for (uint32_t i = 0; i < na; i++) {
        int64_t a = norm_axis(ax[i], orank);
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
    if (x->is_const && x->tensor == KILN_NONE) {
        struct frontend_const c = x->c;
        c.ndim = n;
        memcpy(c.shape, sh, sizeof(int64_t) * n);
        return set_const_output(m, 0, &c);
    }
    return set_output(m, 0, reshape(m, out0(m), tensor_of(m, x), n, sh));
}

/* ---- constants ---- */

static enum kiln_status
imp_constant(struct imp *m)
{
    if (!known_attrs(m, "value", "value_float", "value_floats", "value_int", "value_ints", NULL))
        return m->ctx->err.status;
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
                 node_name(m), (long long)m->opset);
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
    return set_const_output(m, 0, &c);
}

/* Shape of a tensor whose shape is static: an int64 constant. */
static enum kiln_status
imp_shape(struct imp *m)
{
    if (!known_attrs(m, "start", "end", NULL))
        return m->ctx->err.status;
    struct value *x = input(m, 0);
    if (!x)
        return m->ctx->err.status;
    int64_t r = vrank(m, x), st = attr_int(m, "start", 0), en = attr_int(m, "end", r);
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
        c.data[i - st] = (double)vshape(m, x)[i];
    return set_const_output(m, 0, &c);
}

/* ---- dispatch ---- */

static enum kiln_status
import_node(struct imp *m)
{
    const char *op = m->node->op_type ? m->node->op_type : "";
    static const struct {
        const char *onnx, *kiln;
    } unary[] = {{"Relu", "relu"}, {"Sigmoid", "sigmoid"}, {"Tanh", "tanh"}, {"Abs", "abs"},
                 {"Neg", "neg"},   {"Exp", "exp"},         {"Log", "log"},   {"Sqrt", "sqrt"},
                 {"Erf", "erf"},   {"Floor", "floor"}},
      binary[] = {{"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}, {"Pow", "pow"}},
      variadic[] = {{"Sum", "add"}, {"Max", "maximum"}, {"Min", "minimum"}};
    for (size_t i = 0; i < KILN_COUNTOF(unary); i++)
        if (!strcmp(op, unary[i].onnx))
            return imp_unary(m, unary[i].kiln);
    for (size_t i = 0; i < KILN_COUNTOF(binary); i++)
        if (!strcmp(op, binary[i].onnx))
            return imp_binary(m, binary[i].kiln);
    for (size_t i = 0; i < KILN_COUNTOF(variadic); i++)
        if (!strcmp(op, variadic[i].onnx))
            return imp_variadic(m, variadic[i].kiln);
    if (!strcmp(op, "LeakyRelu"))
        return imp_leaky_relu(m);
    if (!strcmp(op, "Gelu"))
        return imp_gelu(m);
    if (!strcmp(op, "Clip"))
        return imp_clip(m);
    if (!strcmp(op, "PRelu"))
        return imp_prelu(m);
    static const char *const activations[] = {"HardSigmoid", "HardSwish", "Softplus", "Softsign",
                                              "Elu",         "Selu",      "Celu"};
    for (size_t i = 0; i < KILN_COUNTOF(activations); i++)
        if (!strcmp(op, activations[i]))
            return imp_activation(m, op);
    if (!strcmp(op, "ReduceSum"))
        return imp_reduce(m, 0);
    if (!strcmp(op, "ReduceMean"))
        return imp_reduce(m, 1);
    if (!strcmp(op, "ReduceSumSquare"))
        return imp_reduce(m, 2);
    if (!strcmp(op, "MatMul"))
        return imp_matmul(m);
    if (!strcmp(op, "Gemm"))
        return imp_gemm(m);
    if (!strcmp(op, "Einsum"))
        return imp_einsum(m);
    if (!strcmp(op, "Conv"))
        return imp_conv(m, false);
    if (!strcmp(op, "ConvTranspose"))
        return imp_conv(m, true);
    if (!strcmp(op, "MaxPool"))
        return imp_pool(m, true);
    if (!strcmp(op, "AveragePool"))
        return imp_pool(m, false);
    if (!strcmp(op, "GlobalAveragePool"))
        return imp_global_pool(m, false);
    if (!strcmp(op, "GlobalMaxPool"))
        return imp_global_pool(m, true);
    if (!strcmp(op, "BatchNormalization"))
        return imp_batch_norm(m);
    if (!strcmp(op, "Softmax"))
        return imp_softmax(m, "softmax");
    if (!strcmp(op, "LogSoftmax"))
        return imp_softmax(m, "log_softmax");
    if (!strcmp(op, "Reshape"))
        return imp_reshape(m);
    if (!strcmp(op, "Flatten"))
        return imp_flatten(m);
    if (!strcmp(op, "Transpose"))
        return imp_transpose(m);
    if (!strcmp(op, "Concat"))
        return imp_concat(m);
    if (!strcmp(op, "Pad"))
        return imp_pad(m);
    if (!strcmp(op, "Slice"))
        return imp_slice(m);
    if (!strcmp(op, "Squeeze"))
        return imp_squeeze(m, false);
    if (!strcmp(op, "Unsqueeze"))
        return imp_squeeze(m, true);
    if (!strcmp(op, "Identity"))
        return imp_identity(m);
    if (!strcmp(op, "Dropout"))
        return imp_dropout(m);
    if (!strcmp(op, "Constant"))
        return imp_constant(m);
    if (!strcmp(op, "Shape"))
        return imp_shape(m);
    return UNSUP(m, "op %s is not supported", op);
}

/* ---- the model ---- */

static enum kiln_status
graph_input(struct imp *m, const Onnx__ValueInfoProto *vi)
{
    kiln_ctx   *ctx = m->ctx;
    const char *nm = vi->name ? vi->name : "";
    if (!*nm)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "a graph input has no name");
    if (find_value(m, nm))
        return KILN_OK; /* an initializer listed as an input (IR version < 4): a weight */
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "graph input '%s' is not a tensor (sequences, maps and optionals are "
                         "not supported)",
                         nm);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    enum kiln_dtype                dt = frontend_onnx_dtype(tt->has_elem_type ? tt->elem_type : 0);
    if (dt == KILN_DTYPE_COUNT)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "graph input '%s' has element type %s, which kiln has no dtype for", nm,
                         frontend_onnx_type_name(tt->has_elem_type ? tt->elem_type : 0));
    if (!tt->shape)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "dynamic shape: graph input '%s' has no shape", nm);
    if (tt->shape->n_dim > KILN_MAX_DIMS)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "graph input '%s' has %zu dimensions; at most %d", nm, tt->shape->n_dim,
                         KILN_MAX_DIMS);
    int64_t sh[KILN_MAX_DIMS];
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        if (d->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                             "dynamic shape: graph input '%s' dimension %zu is '%s', not a number",
                             nm, i,
                             d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                                     && d->dim_param
                                 ? d->dim_param
                                 : "unknown");
        if (d->dim_value <= 0)
            return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                             "graph input '%s' dimension %zu has extent %lld; kiln needs positive "
                             "extents",
                             nm, i, (long long)d->dim_value);
        sh[i] = d->dim_value;
    }
    const char *kn = kname(m, nm);
    uint32_t    t =
        kn ? kiln_graph_add_tensor(m->g, kn, dt, (uint32_t)tt->shape->n_dim, sh, KILN_TENSOR_INPUT)
              : KILN_NONE;
    struct value *v = t != KILN_NONE ? new_value(m, nm) : NULL;
    if (!v)
        return ctx->err.status;
    v->tensor = t;
    return KILN_OK;
}

static enum kiln_status
graph_output(struct imp *m, const Onnx__ValueInfoProto *vi)
{
    const char   *nm = vi->name ? vi->name : "";
    struct value *v = find_value(m, nm);
    if (!v)
        return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                         "graph output '%s' is not produced by any node", nm);
    uint32_t t = tensor_of(m, v);
    if (t == KILN_NONE)
        return m->ctx->err.status;
    if (T(m, t)->kind != KILN_TENSOR_OP || T(m, t)->is_output) {
        struct kiln_attr a = {.name = kiln_sym_cstr(m->ctx, "shape"),
                              .kind = KILN_ATTR_INTS,
                              .n = T(m, t)->ndim,
                              .ints = T(m, t)->shape};
        const char      *kn = kname(m, suffixed(m, nm, "out"));
        uint32_t         c = KILN_NONE;
        if (!kn || kiln_lib_call(m->g, "reshape", kn, 1, &t, 1, &a, 0, 0, &c) != KILN_OK)
            return m->ctx->err.status;
        t = c;
    }
    return kiln_graph_mark_output(m->g, t);
}

/* Binds graph inputs to constant values (kiln_graph_import_onnx_bound). */
static enum kiln_status
bind_inputs(struct imp *m, const Onnx__GraphProto *gp, const struct kiln_onnx_binding *bind,
            uint32_t nbind)
{
    for (uint32_t i = 0; i < nbind; i++) {
        const char                    *nm = bind[i].name ? bind[i].name : "";
        const struct kiln_onnx_tensor *v = bind[i].value;
        bool                           found = false;
        for (size_t k = 0; k < gp->n_input && !found; k++)
            found = gp->input[k]->name && !strcmp(gp->input[k]->name, nm);
        if (!found || find_value(m, nm))
            return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                             "binding '%s': no graph input (that is not an initializer) has "
                             "this name",
                             nm);
        if (!v || v->ndim < 0 || v->ndim > KILN_MAX_DIMS || v->numel < 1 || !v->values)
            return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx", "binding '%s': no value", nm);
        struct value *val = new_value(m, nm);
        if (!val)
            return m->ctx->err.status;
        val->is_const = true;
        val->c.dtype = v->dtype;
        val->c.ndim = (uint32_t)v->ndim;
        memcpy(val->c.shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
        val->c.numel = v->numel;
        val->c.data = kiln_arena_alloc(m->ctx, sizeof(double) * (size_t)v->numel);
        if (!val->c.data)
            return m->ctx->err.status;
        memcpy(val->c.data, v->values, sizeof(double) * (size_t)v->numel);
    }
    return KILN_OK;
}

static enum kiln_status
import_model(struct imp *m, const Onnx__ModelProto *mp, const struct kiln_onnx_binding *bind,
             uint32_t nbind)
{
    kiln_ctx *ctx = m->ctx;
    m->opset = -1;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
        if (!o->domain || !*o->domain || !strcmp(o->domain, "ai.onnx"))
            m->opset = o->has_version ? o->version : 1;
    }
    if (m->opset < 0)
        m->opset = 1; /* IR version 1 models name no opset */
    const Onnx__GraphProto *gp = mp->graph;
    if (!gp)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "the model has no graph");
    if (gp->n_sparse_initializer)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "sparse initializers are not supported");
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        const char              *nm = t->name ? t->name : "";
        char                     what[300];
        snprintf(what, sizeof what, "initializer '%s'", nm);
        struct value *v = new_value(m, nm);
        if (!v || frontend_tensor_decode(ctx, t, what, &v->c) != KILN_OK)
            return ctx->err.status;
        v->is_const = true;
    }
    KILN_TRY(bind_inputs(m, gp, bind, nbind));
    for (size_t i = 0; i < gp->n_input; i++)
        KILN_TRY(graph_input(m, gp->input[i]));
    for (size_t i = 0; i < gp->n_node; i++) {
        m->node = gp->node[i];
        m->nodeno = (uint32_t)i;
        const char *dom = m->node->domain ? m->node->domain : "";
        if (*dom && strcmp(dom, "ai.onnx"))
            return UNSUP(m, "domain '%s' is not supported", dom);
        if (import_node(m) != KILN_OK)
            return node_context(m);
        for (size_t k = 0; k < m->node->n_output; k++) {
            const char *o = m->node->output[k];
            if (o && *o && !find_value(m, o))
                return UNSUP(m, "output %zu ('%s') is not supported", k, o);
        }
    }
    m->node = NULL;
    if (!gp->n_output)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "the graph has no outputs");
    for (size_t i = 0; i < gp->n_output; i++)
        KILN_TRY(graph_output(m, gp->output[i]));
    return kiln_graph_verify(m->g);
}

/* protobuf-c allocates through the context's allocator; a 16-byte header keeps the size its
 * free needs. */
static void *
pb_alloc(void *ud, size_t size)
{
    if (size > SIZE_MAX - 16)
        return NULL;
    size_t *p = kiln_mem_realloc(ud, NULL, 0, size + 16);
    if (!p)
        return NULL;
    p[0] = size + 16;
    return (char *)p + 16;
}

static void
pb_free(void *ud, void *ptr)
{
    if (!ptr)
        return;
    size_t *p = (size_t *)(void *)((char *)ptr - 16);
    kiln_mem_free(ud, p, p[0]);
}

KILN_API enum kiln_status
kiln_graph_import_onnx(kiln_ctx *ctx, const void *data, size_t len, const char *filename,
                       struct kiln_graph **out, const double *const **weights)
{
    return kiln_graph_import_onnx_bound(ctx, data, len, filename, NULL, 0, out, weights);
}

KILN_API enum kiln_status
kiln_graph_import_onnx_bound(kiln_ctx *ctx, const void *data, size_t len, const char *filename,
                             const struct kiln_onnx_binding *bind, uint32_t nbind,
                             struct kiln_graph **out, const double *const **weights)
{
    *out = NULL;
    if (weights)
        *weights = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    const char *file = filename ? kiln_arena_strdup(ctx, filename) : NULL;
    if (filename && !file)
        return ctx->err.status;
    ProtobufCAllocator pa = {pb_alloc, pb_free, ctx};
    Onnx__ModelProto  *mp = onnx__model_proto__unpack(&pa, len, data);
    if (!mp) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx",
                  "not a valid ONNX model (the protobuf data is malformed or truncated)");
        kiln_error_set_loc(ctx, file, 0, 0);
        return KILN_ERR_INVALID;
    }
    struct imp m = {.ctx = ctx, .file = file};
    m.g = kiln_graph_new(ctx);
    enum kiln_status st = m.g ? KILN_OK : ctx->err.status;
    if (st == KILN_OK) {
        m.g->file = file;
        st = import_model(&m, mp, bind, nbind);
    }
    if (st == KILN_OK && weights) {
        uint32_t       na = m.g->narg;
        const double **w = kiln_arena_alloc(ctx, sizeof(double *) * (na ? na : 1));
        if (!w) {
            st = ctx->err.status;
        } else {
            for (uint32_t i = 0; i < na; i++) {
                uint32_t t = m.g->arg[i];
                w[i] = t < m.capw ? m.wdata[t] : NULL;
            }
            *weights = w;
        }
    }
    onnx__model_proto__free_unpacked(mp, &pa);
    if (st != KILN_OK) {
        if (ctx->err.loc.file == NULL)
            kiln_error_set_loc(ctx, file, 0, 0);
        if (weights)
            *weights = NULL;
        return st;
    }
    *out = m.g;
    return KILN_OK;
}

KILN_API enum kiln_status
kiln_onnx_tensor_decode(kiln_ctx *ctx, const void *data, size_t len, const char *filename,
                        struct kiln_onnx_tensor *out)
{
    memset(out, 0, sizeof *out);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    const char        *file = filename ? kiln_arena_strdup(ctx, filename) : NULL;
    ProtobufCAllocator pa = {pb_alloc, pb_free, ctx};
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(&pa, len, data);
    if (!t) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx",
                  "not a valid ONNX TensorProto (the protobuf data is malformed or truncated)");
        kiln_error_set_loc(ctx, file, 0, 0);
        return KILN_ERR_INVALID;
    }
    struct frontend_const c;
    enum kiln_status      st =
        frontend_tensor_decode(ctx, t, t->name && *t->name ? t->name : "tensor", &c);
    if (st == KILN_OK) {
        out->name = kiln_arena_strdup(ctx, t->name ? t->name : "");
        out->dtype = c.dtype;
        out->ndim = (int)c.ndim;
        memcpy(out->shape, c.shape, sizeof c.shape);
        out->numel = c.numel;
        out->values = c.data;
        st = out->name ? KILN_OK : ctx->err.status;
    } else {
        kiln_error_set_loc(ctx, file, 0, 0);
    }
    onnx__tensor_proto__free_unpacked(t, &pa);
    return st;
}
