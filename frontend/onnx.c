/* frontend/onnx.c -- ONNX ModelProto to a kernel graph (kiln_graph_import_onnx).
 *
 * The model is unpacked by the protobuf-c code generated from Debian's onnx.proto, once
 * nesting_ok has checked, without recursion, that its messages nest at most ONNX_MAX_DEPTH
 * levels (protobuf-c recurses). The default domain's opset must be imported, once, and be one
 * kiln knows (model_opset). Then:
 *   1. graph inputs that are not initializers become kiln inputs, in order (their shapes must be
 *      static); initializers are decoded into constants;
 *   2. nodes are imported in order, each by the handler its row of the op table names
 *      (frontend/onnx.def, handlers in onnx_elem.c, onnx_nn.c, onnx_data.c), which maps it onto
 *      kiln's op library (kiln_lib_call) -- a node may become several library calls (Gemm:
 *      transpose, matmul, scale, add). The dispatcher here does what every op shares: the row
 *      for the op and opset, the attribute check, the input lookup, the output checks (a name
 *      defined before is an error, as ONNX defines each value once);
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
#include "onnx_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- errors ---- */

static const char *
node_name(const Onnx__NodeProto *n)
{
    if (n->name && *n->name)
        return n->name;
    if (n->n_output && n->output[0] && *n->output[0])
        return n->output[0];
    return "";
}

const char *
onnx_node_name(const struct onnx_imp *m)
{
    return node_name(m->node);
}

enum kiln_status
onnx_fail(struct onnx_imp *m, enum kiln_status st, const char *fmt, ...)
{
    char    msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    KILN_FAIL(m->ctx, st, "onnx", "node %u '%s' (%s, opset %lld): %s", m->nodeno, onnx_node_name(m),
              m->node->op_type ? m->node->op_type : "?", (long long)m->opset, msg);
    kiln_error_set_loc(m->ctx, m->file, 0, 0);
    return st;
}

/* A library error gets the node's context in front of it. */
static enum kiln_status
node_context(struct onnx_imp *m)
{
    if (kiln_ok(m->ctx) || !m->node)
        return kiln_ok(m->ctx) ? KILN_OK : m->ctx->err.status;
    struct kiln_error *e = &m->ctx->err;
    if (strncmp(e->msg, "node ", 5)) {
        char msg[sizeof e->msg + 400];
        snprintf(msg, sizeof msg, "node %u '%s' (%s, opset %lld): %s", m->nodeno, onnx_node_name(m),
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
kname(struct onnx_imp *m, const char *onnx)
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

static struct onnx_value *
find_value(struct onnx_imp *m, const char *name)
{
    for (uint32_t i = m->nval; i-- > 0;)
        if (!strcmp(m->val[i].name, name))
            return &m->val[i];
    return NULL;
}

static struct onnx_value *
new_value(struct onnx_imp *m, const char *name)
{
    struct onnx_value v = {.name = name, .tensor = KILN_NONE};
    if (!KILN_VEC_PUSH(m->ctx, m->val, m->nval, m->capval, v))
        return NULL;
    return &m->val[m->nval - 1];
}

static bool
record_weight(struct onnx_imp *m, uint32_t t, double *data)
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
uint32_t
onnx_weight(struct onnx_imp *m, const char *onnx_name, const struct frontend_const *c)
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
uint32_t
onnx_tensor(struct onnx_imp *m, struct onnx_value *v)
{
    if (v->tensor == KILN_NONE && v->is_const)
        v->tensor = onnx_weight(m, v->name, &v->c);
    return v->tensor;
}

/* Integer values of a constant input (a shape, axes, pads, slice bounds). */
bool
onnx_const_ints(struct onnx_imp *m, struct onnx_value *v, uint32_t i, const char *what,
                int64_t *out, uint32_t *n, uint32_t cap)
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
    for (int64_t k = 0; k < v->c.numel; k++) {
        double d = v->c.data[k]; /* a double: anything outside int64 (or NaN) has no cast */
        if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || d != floor(d)) {
            BAD(m, "input %u (%s): value %lld is %g, not an integer of int64's range", i, what,
                (long long)k, d);
            return false;
        }
        out[k] = (int64_t)d;
    }
    *n = (uint32_t)v->c.numel;
    return true;
}

/* ---- attributes ---- */

const Onnx__AttributeProto *
onnx_attr(const struct onnx_imp *m, const char *name)
{
    for (size_t i = 0; i < m->node->n_attribute; i++)
        if (m->node->attribute[i]->name && !strcmp(m->node->attribute[i]->name, name))
            return m->node->attribute[i];
    return NULL;
}

int64_t
onnx_attr_int(const struct onnx_imp *m, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = onnx_attr(m, name);
    return a && a->has_i ? a->i : dflt;
}

double
onnx_attr_float(const struct onnx_imp *m, const char *name, double dflt)
{
    const Onnx__AttributeProto *a = onnx_attr(m, name);
    return a && a->has_f ? a->f : dflt;
}

/* A string attribute as a NUL-terminated arena copy, or dflt. */
const char *
onnx_attr_str(struct onnx_imp *m, const char *name, const char *dflt)
{
    const Onnx__AttributeProto *a = onnx_attr(m, name);
    if (!a || !a->has_s)
        return dflt;
    return kiln_arena_strndup(m->ctx, (const char *)a->s.data, a->s.len);
}

/* An ints attribute: count in *n, values in out (cap entries); false on error. Absent: *n = 0
 * and *present = false. */
bool
onnx_attr_ints(struct onnx_imp *m, const char *name, int64_t *out, uint32_t *n, uint32_t cap,
               bool *present)
{
    const Onnx__AttributeProto *a = onnx_attr(m, name);
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

void
onnx_at_int(struct onnx_imp *m, struct onnx_attrs *as, const char *name, int64_t v)
{
    as->a[as->n++] =
        (struct kiln_attr){.name = kiln_sym_cstr(m->ctx, name), .kind = KILN_ATTR_INT, .i = v};
}
void
onnx_at_ints(struct onnx_imp *m, struct onnx_attrs *as, const char *name, const int64_t *v,
             uint32_t n)
{
    as->a[as->n++] = (struct kiln_attr){
        .name = kiln_sym_cstr(m->ctx, name), .kind = KILN_ATTR_INTS, .n = n, .ints = v};
}
void
onnx_at_float(struct onnx_imp *m, struct onnx_attrs *as, const char *name, double v)
{
    as->a[as->n++] =
        (struct kiln_attr){.name = kiln_sym_cstr(m->ctx, name), .kind = KILN_ATTR_FLOAT, .f = v};
}
void
onnx_at_str(struct onnx_imp *m, struct onnx_attrs *as, const char *name, const char *s)
{
    as->a[as->n++] =
        (struct kiln_attr){.name = kiln_sym_cstr(m->ctx, name), .kind = KILN_ATTR_STRING, .s = s};
}

/* One library call writing a tensor named after `base` (an ONNX name); returns the tensor. */
uint32_t
onnx_lib(struct onnx_imp *m, const char *op, const char *base, uint32_t nin, const uint32_t *in,
         const struct onnx_attrs *as)
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

uint32_t
onnx_lib1(struct onnx_imp *m, const char *op, const char *base, uint32_t x,
          const struct onnx_attrs *as)
{
    return onnx_lib(m, op, base, 1, &x, as);
}

uint32_t
onnx_lib2(struct onnx_imp *m, const char *op, const char *base, uint32_t a, uint32_t b)
{
    uint32_t in[2] = {a, b};
    return onnx_lib(m, op, base, 2, in, NULL);
}

/* reshape x to shape (rank may be 0). */
uint32_t
onnx_reshape(struct onnx_imp *m, const char *base, uint32_t x, uint32_t rank, const int64_t *shape)
{
    struct onnx_attrs as = {0};
    int64_t          *s = kiln_arena_alloc(m->ctx, sizeof(int64_t) * (rank ? rank : 1));
    if (!s)
        return KILN_NONE;
    if (rank)
        memcpy(s, shape, sizeof(int64_t) * rank);
    onnx_at_ints(m, &as, "shape", s, rank);
    return onnx_lib1(m, "reshape", base, x, &as);
}

/* A scalar (shape [1]) weight holding v. */
uint32_t
onnx_scalar(struct onnx_imp *m, const char *base, double v, enum kiln_dtype dt)
{
    struct frontend_const c = {.dtype = dt, .ndim = 1, .shape = {1}, .numel = 1};
    c.data = kiln_arena_alloc(m->ctx, sizeof(double));
    if (!c.data)
        return KILN_NONE;
    c.data[0] = v;
    return onnx_weight(m, base, &c);
}

char *
onnx_suffixed(struct onnx_imp *m, const char *base, const char *suffix)
{
    return kiln_arena_printf(m->ctx, "%s_%s", base, suffix);
}

/* Binds output i of the node to tensor t. */
enum kiln_status
onnx_set_output(struct onnx_imp *m, uint32_t i, uint32_t t)
{
    if (t == KILN_NONE)
        return node_context(m);
    const Onnx__NodeProto *n = m->node;
    if (i >= n->n_output || !n->output[i] || !*n->output[i])
        return KILN_OK;
    struct onnx_value *v = new_value(m, n->output[i]);
    if (!v)
        return m->ctx->err.status;
    v->tensor = t;
    v->origin = ONNX_FROM_NODE;
    v->nodeno = m->nodeno;
    return KILN_OK;
}

enum kiln_status
onnx_set_const(struct onnx_imp *m, uint32_t i, const struct frontend_const *c)
{
    const Onnx__NodeProto *n = m->node;
    if (i >= n->n_output || !n->output[i] || !*n->output[i])
        return KILN_OK;
    struct onnx_value *v = new_value(m, n->output[i]);
    if (!v)
        return m->ctx->err.status;
    v->is_const = true;
    v->c = *c;
    v->origin = ONNX_FROM_NODE;
    v->nodeno = m->nodeno;
    return KILN_OK;
}

/* Output 0's name: the base of every tensor a node creates. */
const char *
onnx_out0(const struct onnx_imp *m)
{
    const Onnx__NodeProto *n = m->node;
    return n->n_output && n->output[0] && *n->output[0] ? n->output[0] : "out";
}

/* Only output 0 may be used (others must be absent or empty). */
bool
onnx_single_output(struct onnx_imp *m)
{
    for (size_t i = 1; i < m->node->n_output; i++)
        if (m->node->output[i] && *m->node->output[i]) {
            UNSUP(m, "output %zu ('%s') is not supported; only the first output", i,
                  m->node->output[i]);
            return false;
        }
    return true;
}

/* ---- the op table and the dispatcher ---- */

static const struct onnx_op ops[] = {
#define ONNX_OP(name, lo, hi, min_in, max_in, max_out, attrs, fn, kop) \
    {#name, lo, hi, min_in, max_in, max_out, attrs, onnx_op_##fn, kop},
#include "onnx.def"
#undef ONNX_OP
};

const struct onnx_op *
onnx_ops(size_t *count)
{
    *count = KILN_COUNTOF(ops);
    return ops;
}

const struct onnx_op *
onnx_op_find(const char *name, int64_t opset, bool *known)
{
    size_t lo = 0, hi = KILN_COUNTOF(ops); /* binary search: the first row not before name */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ops[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *known = lo < KILN_COUNTOF(ops) && !strcmp(ops[lo].name, name);
    if (opset < 1)
        opset = 1; /* a model that names opset 0 reads as opset 1 */
    for (size_t i = lo; i < KILN_COUNTOF(ops) && !strcmp(ops[i].name, name); i++)
        if (opset >= ops[i].opset_lo && (ops[i].opset_hi == ONNX_ANY || opset <= ops[i].opset_hi))
            return &ops[i];
    return NULL;
}

/* Whether name is a word of the space-separated list. */
static bool
listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list + strspn(list, " "); *p; p += strspn(p, " ")) {
        size_t k = strcspn(p, " ");
        if (k == n && n && !memcmp(p, name, n))
            return true;
        p += k;
    }
    return false;
}

/* Each value is defined once: an output of the node that another node, a graph input or an
 * initializer already defines (or that the node lists twice) is an error naming both. */
static enum kiln_status
check_outputs(struct onnx_imp *m)
{
    const Onnx__NodeProto *n = m->node;
    for (size_t k = 0; k < n->n_output; k++) {
        const char *o = n->output[k];
        if (!o || !*o)
            continue;
        for (size_t j = 0; j < k; j++)
            if (n->output[j] && !strcmp(n->output[j], o))
                return BAD(m, "outputs %zu and %zu are both '%s'", j, k, o);
        const struct onnx_value *v = find_value(m, o);
        if (!v)
            continue;
        switch (v->origin) {
        case ONNX_FROM_NODE: {
            const Onnx__NodeProto *p = m->graph->node[v->nodeno];
            return BAD(m, "output %zu '%s' is already defined by node %u '%s' (%s)", k, o,
                       v->nodeno, node_name(p), p->op_type ? p->op_type : "?");
        }
        case ONNX_FROM_INPUT:
            return BAD(m, "output %zu '%s' is already a graph input", k, o);
        case ONNX_FROM_BINDING:
            return BAD(m, "output %zu '%s' is already a graph input (bound to a value)", k, o);
        case ONNX_FROM_INITIALIZER:
            return BAD(m, "output %zu '%s' is already an initializer", k, o);
        }
    }
    return KILN_OK;
}

/* ---- constant folding at import ---- */

/* A node whose inputs are all import-time constants is computed at import: its handler builds
 * the node's library calls into a scratch graph whose weights are those constants, the
 * reference interpreter evaluates it, and the outputs become constants too. So shape
 * computations (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ConstantOfShape / Range /
 * Expand chains) reach the ops that need their values as constants, whatever ops they are
 * made of: any op kiln imports folds the same way, with the interpreter's semantics, which the
 * compiled code shares. The inputs and each output hold at most FOLD_MAX_ELEMS elements;
 * a node past that is imported as it is (its constant inputs become weights). */
enum { FOLD_MAX_ELEMS = 1 << 20 };

static bool
foldable(struct onnx_value *const *in, uint32_t nin)
{
    int64_t  n = 0;
    uint32_t nconst = 0;
    for (uint32_t i = 0; i < nin; i++) {
        if (!in[i])
            continue;
        if (!in[i]->is_const)
            return false;
        n += in[i]->c.numel;
        nconst++;
    }
    return nconst > 0 && n <= FOLD_MAX_ELEMS;
}

/* Runs the handler on constant copies of the inputs, into a scratch graph, and evaluates it.
 * *folded is false (nothing changed) when an output would be larger than FOLD_MAX_ELEMS. */
static enum kiln_status
fold_node(struct onnx_imp *m, bool *folded)
{
    kiln_ctx *ctx = m->ctx;
    *folded = false;
    struct onnx_value **in = kiln_arena_alloc(ctx, sizeof *in * (m->nin ? m->nin : 1)),
                      **orig = m->in;
    struct onnx_value *copy = kiln_arena_alloc(ctx, sizeof *copy * (m->nin ? m->nin : 1));
    struct kiln_graph *g = m->g, *sg = kiln_graph_new(ctx);
    if (!in || !copy || !sg)
        return ctx->err.status;
    for (uint32_t i = 0; i < m->nin; i++) {
        in[i] = NULL;
        if (orig[i]) {
            copy[i] = *orig[i];
            copy[i].tensor = KILN_NONE; /* a weight of the scratch graph when read as data */
            in[i] = &copy[i];
        }
    }
    double **wdata = m->wdata;
    uint32_t capw = m->capw, nval = m->nval;
    m->g = sg;
    m->wdata = NULL;
    m->capw = 0;
    m->in = in;
    enum kiln_status st = m->op->fn(m);
    double         **sw = m->wdata;
    uint32_t         scapw = m->capw;
    m->g = g;
    m->wdata = wdata;
    m->capw = capw;
    m->in = orig;
    if (st != KILN_OK)
        return st;
    /* the outputs the handler bound to scratch tensors */
    uint32_t nout = 0, *outs = kiln_arena_alloc(ctx, sizeof *outs * (m->nval - nval + 1));
    if (!outs)
        return ctx->err.status;
    for (uint32_t k = nval; k < m->nval; k++) {
        uint32_t t = m->val[k].tensor;
        if (t == KILN_NONE)
            continue;
        if (kiln_tensor_numel(&sg->tensor[t]) > FOLD_MAX_ELEMS) {
            m->nval = nval; /* undo: the node is imported as it is */
            return KILN_OK;
        }
        outs[nout++] = t;
        KILN_TRY(kiln_graph_mark_output(sg, t));
    }
    *folded = true;
    if (!nout)
        return KILN_OK;
    KILN_TRY(kiln_graph_verify(sg));
    const double **args = kiln_arena_alloc(ctx, sizeof *args * (sg->narg ? sg->narg : 1));
    double       **vals = kiln_arena_alloc(ctx, sizeof *vals * nout);
    if (!args || !vals)
        return ctx->err.status;
    for (uint32_t a = 0; a < sg->narg; a++) {
        args[a] = sg->arg[a] < scapw ? sw[sg->arg[a]] : NULL;
        if (!args[a]) /* every argument of the scratch graph is a constant input */
            return BAD(m, "constant folding: argument %u has no value", a);
    }
    for (uint32_t i = 0; i < nout; i++)
        if (!(vals[i] = kiln_arena_alloc(
                  ctx, sizeof(double) * (size_t)kiln_tensor_numel(&sg->tensor[outs[i]]))))
            return ctx->err.status;
    KILN_TRY(kiln_graph_eval(ctx, sg, args, vals));
    for (uint32_t k = nval, i = 0; k < m->nval; k++) {
        struct onnx_value *v = &m->val[k];
        if (v->tensor == KILN_NONE)
            continue;
        const struct kiln_tensor *t = &sg->tensor[v->tensor];
        v->is_const = true;
        v->c = (struct frontend_const){.dtype = (enum kiln_dtype)t->dtype,
                                       .ndim = t->ndim,
                                       .numel = kiln_tensor_numel(t),
                                       .data = vals[i++]};
        memcpy(v->c.shape, t->shape, sizeof(int64_t) * t->ndim);
        v->tensor = KILN_NONE;
    }
    return KILN_OK;
}

/* Imports m->node by its row of the table: what every handler shares is done here -- the
 * attributes checked against the row, the inputs looked up into m->in[] (onnx.def says which
 * are required), and after the handler, every output it was to define. */
static enum kiln_status
import_node(struct onnx_imp *m)
{
    const Onnx__NodeProto *n = m->node;
    const char            *name = n->op_type ? n->op_type : "";
    bool                   known;
    const struct onnx_op  *op = onnx_op_find(name, m->opset, &known);
    if (!op)
        return known ? UNSUP(m, "op %s is not supported at this opset", name)
                     : UNSUP(m, "op %s is not supported", name);
    for (size_t i = 0; i < n->n_attribute; i++) {
        const char *a = n->attribute[i]->name ? n->attribute[i]->name : "";
        if (!listed(op->attrs, a))
            return UNSUP(m, "attribute '%s' is not supported", a);
    }
    uint32_t nin = op->max_in;
    if (op->max_in == ONNX_ANY)
        nin = n->n_input > op->min_in ? (uint32_t)n->n_input : op->min_in;
    struct onnx_value **in = kiln_arena_alloc(m->ctx, sizeof *in * (nin ? nin : 1));
    if (!in)
        return m->ctx->err.status;
    for (uint32_t i = 0; i < nin; i++) {
        bool present = i < n->n_input && n->input[i] && *n->input[i];
        in[i] = present ? find_value(m, n->input[i]) : NULL;
        if (i >= op->min_in && op->max_in != ONNX_ANY)
            continue; /* optional: NULL when absent (or not defined) */
        if (!present)
            return BAD(m, "input %u is missing", i);
        if (!in[i])
            return BAD(m, "input %u '%s' is not defined before the node", i, n->input[i]);
    }
    KILN_TRY(check_outputs(m));
    m->op = op;
    m->in = in;
    m->nin = nin;
    bool folded = false;
    if (foldable(in, nin))
        KILN_TRY(fold_node(m, &folded));
    if (!folded)
        KILN_TRY(op->fn(m));
    for (size_t k = 0; k < n->n_output; k++) {
        const char *o = n->output[k];
        if (o && *o && (k >= op->max_out || !find_value(m, o)))
            return UNSUP(m, "output %zu ('%s') is not supported", k, o);
    }
    return KILN_OK;
}

/* ---- the model ---- */

/* The index of the given shape named `name`, else KILN_NONE. */
static uint32_t
given_shape(const struct onnx_imp *m, const char *name)
{
    for (uint32_t i = 0; i < m->nshapes; i++)
        if (m->shapes[i].name && !strcmp(m->shapes[i].name, name))
            return i;
    return KILN_NONE;
}

/* How the graph's inputs use `name`: 1 an input's name, 2 a symbolic dimension, 0 neither. */
static int
shape_name_kind(const Onnx__GraphProto *gp, const char *name)
{
    int kind = 0;
    for (size_t k = 0; k < gp->n_input && kind != 1; k++) {
        const Onnx__ValueInfoProto *vi = gp->input[k];
        if (vi->name && !strcmp(vi->name, name))
            kind = 1;
        const Onnx__TypeProto *tp = vi->type;
        if (kind || !tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type
            || !tp->tensor_type->shape)
            continue;
        const Onnx__TensorShapeProto *sp = tp->tensor_type->shape;
        for (size_t d = 0; d < sp->n_dim; d++)
            if (sp->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                && sp->dim[d]->dim_param && !strcmp(sp->dim[d]->dim_param, name))
                kind = 2;
    }
    return kind;
}

/* Checks the given shapes before the import reads them. */
static enum kiln_status
check_shapes(struct onnx_imp *m)
{
    if (!m->nshapes)
        return KILN_OK;
    if (!m->shapes)
        return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx", "%u shapes given but no array",
                         m->nshapes);
    for (uint32_t i = 0; i < m->nshapes; i++) {
        const struct kiln_onnx_shape *s = &m->shapes[i];
        const char                   *nm = s->name ? s->name : "";
        if (!*nm)
            return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx", "a given shape has no name");
        if (s->ndim > KILN_MAX_DIMS || (s->ndim && !s->shape))
            return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                             "the shape given for '%s' has %u dimensions; at most %d", nm, s->ndim,
                             KILN_MAX_DIMS);
        for (uint32_t d = 0; d < s->ndim; d++)
            if (s->shape[d] < 1 || s->shape[d] > ((int64_t)1 << 40))
                return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                                 "the shape given for '%s' has extent %lld in dimension %u; "
                                 "extents are 1 to 2^40",
                                 nm, (long long)s->shape[d], d);
        for (uint32_t j = 0; j < i; j++)
            if (m->shapes[j].name && !strcmp(m->shapes[j].name, nm))
                return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                                 "a shape is given twice for '%s'", nm);
        int kind = shape_name_kind(m->graph, nm);
        if (!kind)
            return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                             "a shape is given for '%s', but no graph input and no symbolic "
                             "dimension of one has this name",
                             nm);
        if (kind == 2 && s->ndim != 1)
            return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                             "'%s' is a symbolic dimension: give one extent, not %u", nm, s->ndim);
    }
    return KILN_OK;
}

static enum kiln_status
graph_input(struct onnx_imp *m, const Onnx__ValueInfoProto *vi)
{
    kiln_ctx   *ctx = m->ctx;
    const char *nm = vi->name ? vi->name : "";
    if (!*nm)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "a graph input has no name");
    const struct onnx_value *prev = find_value(m, nm);
    if (prev && prev->origin == ONNX_FROM_INPUT)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "graph input '%s' is listed twice", nm);
    if (prev)
        return KILN_OK; /* an initializer listed as an input (IR version < 4), or bound: a weight */
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
    int64_t  sh[KILN_MAX_DIMS];
    uint32_t whole = given_shape(m, nm);
    if (whole != KILN_NONE && m->shapes[whole].ndim != tt->shape->n_dim)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx",
                         "the shape given for graph input '%s' has %u dimensions; the input has "
                         "%zu",
                         nm, m->shapes[whole].ndim, tt->shape->n_dim);
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        bool        fixed = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        const char *param = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                                    && d->dim_param && *d->dim_param
                                ? d->dim_param
                                : NULL;
        if (whole != KILN_NONE) {
            int64_t e = m->shapes[whole].shape[i];
            if (fixed && d->dim_value != e)
                return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx",
                                 "the shape given for graph input '%s' has extent %lld in "
                                 "dimension %zu; the model fixes it to %lld",
                                 nm, (long long)e, i, (long long)d->dim_value);
            sh[i] = e;
            continue;
        }
        uint32_t ps = !fixed && param ? given_shape(m, param) : KILN_NONE;
        if (ps != KILN_NONE) {
            if (m->shapes[ps].ndim != 1) /* also an input's name: give that input's shape */
                return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx",
                                 "'%s' is a symbolic dimension: give one extent, not %u", param,
                                 m->shapes[ps].ndim);
            sh[i] = m->shapes[ps].shape[0];
            continue;
        }
        if (!fixed)
            return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                             "dynamic shape: graph input '%s' dimension %zu is '%s', not a number "
                             "(give the input's shape, or the dimension's value by its name)",
                             nm, i, param ? param : "unknown");
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
    struct onnx_value *v = t != KILN_NONE ? new_value(m, nm) : NULL;
    if (!v)
        return ctx->err.status;
    v->tensor = t;
    v->origin = ONNX_FROM_INPUT;
    return KILN_OK;
}

static enum kiln_status
graph_output(struct onnx_imp *m, const Onnx__ValueInfoProto *vi)
{
    const char        *nm = vi->name ? vi->name : "";
    struct onnx_value *v = find_value(m, nm);
    if (!v)
        return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                         "graph output '%s' is not produced by any node", nm);
    uint32_t t = onnx_tensor(m, v);
    if (t == KILN_NONE)
        return m->ctx->err.status;
    const struct kiln_tensor *tt = &m->g->tensor[t];
    if (tt->kind != KILN_TENSOR_OP || tt->is_output) {
        struct kiln_attr a = {.name = kiln_sym_cstr(m->ctx, "shape"),
                              .kind = KILN_ATTR_INTS,
                              .n = tt->ndim,
                              .ints = tt->shape};
        const char      *kn = kname(m, onnx_suffixed(m, nm, "out"));
        uint32_t         c = KILN_NONE;
        if (!kn || kiln_lib_call(m->g, "reshape", kn, 1, &t, 1, &a, 0, 0, &c) != KILN_OK)
            return m->ctx->err.status;
        t = c;
    }
    return kiln_graph_mark_output(m->g, t);
}

/* Binds graph inputs to constant values (kiln_graph_import_onnx_bound). */
static enum kiln_status
bind_inputs(struct onnx_imp *m, const Onnx__GraphProto *gp, const struct kiln_onnx_binding *bind,
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
        struct onnx_value *val = new_value(m, nm);
        if (!val)
            return m->ctx->err.status;
        val->is_const = true;
        val->origin = ONNX_FROM_BINDING;
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

static bool
default_domain(const char *domain)
{
    return !domain || !*domain || !strcmp(domain, "ai.onnx");
}

/* m->opset: the model's opset of the default domain. opset_import is written after the graph,
 * so a file cut between the two is still valid protobuf: a model without it is an error (ONNX
 * has required it since IR version 3), unless no node is in the default domain. */
static enum kiln_status
model_opset(struct onnx_imp *m, const Onnx__ModelProto *mp)
{
    const Onnx__OperatorSetIdProto *found = NULL;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
        if (!default_domain(o->domain))
            continue;
        if (found)
            return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                             "opset_import names the default ONNX domain twice");
        found = o;
    }
    m->opset = 1;
    if (!found) {
        bool used = !mp->n_opset_import;
        for (size_t i = 0; mp->graph && i < mp->graph->n_node; i++)
            used = used || default_domain(mp->graph->node[i]->domain);
        if (used)
            return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                             "no opset_import for the default ONNX domain; the file may be "
                             "truncated");
        return KILN_OK; /* every node is in another domain: refused as such */
    }
    if (!found->has_version || found->version < 1)
        return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "onnx",
                         "opset_import of the default ONNX domain has no valid version (%lld)",
                         found->has_version ? (long long)found->version : 0LL);
    if (found->version > ONNX_OPSET_MAX)
        return KILN_FAIL(m->ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "the model's opset is %lld; kiln knows ONNX opsets up to %d",
                         (long long)found->version, ONNX_OPSET_MAX);
    m->opset = found->version;
    return KILN_OK;
}

static enum kiln_status
import_model(struct onnx_imp *m, const Onnx__ModelProto *mp, const struct kiln_onnx_binding *bind,
             uint32_t nbind)
{
    kiln_ctx *ctx = m->ctx;
    KILN_TRY(model_opset(m, mp));
    const Onnx__GraphProto *gp = mp->graph;
    if (!gp)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "the model has no graph");
    m->graph = gp;
    if (gp->n_sparse_initializer)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "sparse initializers are not supported");
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        const char              *nm = t->name ? t->name : "";
        char                     what[300];
        snprintf(what, sizeof what, "initializer '%s'", nm);
        if (find_value(m, nm))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "initializer '%s' is listed twice", nm);
        struct onnx_value *v = new_value(m, nm);
        if (!v || frontend_tensor_decode(ctx, t, what, &v->c) != KILN_OK)
            return ctx->err.status;
        v->is_const = true;
        v->origin = ONNX_FROM_INITIALIZER;
    }
    KILN_TRY(bind_inputs(m, gp, bind, nbind));
    KILN_TRY(check_shapes(m));
    for (size_t i = 0; i < gp->n_input; i++)
        KILN_TRY(graph_input(m, gp->input[i]));
    for (size_t i = 0; i < gp->n_node; i++) {
        m->node = gp->node[i];
        m->nodeno = (uint32_t)i;
        if (!default_domain(m->node->domain))
            return UNSUP(m, "domain '%s' is not supported", m->node->domain);
        if (import_node(m) != KILN_OK)
            return node_context(m);
    }
    m->node = NULL;
    m->op = NULL;
    m->in = NULL;
    m->nin = 0;
    if (!gp->n_output)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "the graph has no outputs");
    for (size_t i = 0; i < gp->n_output; i++)
        KILN_TRY(graph_output(m, gp->output[i]));
    return kiln_graph_verify(m->g);
}

/* ---- the depth check ---- */

/* protobuf-c unpacks a nested message by recursion, so a file of a few kilobytes that nests
 * thousands of messages (AttributeProto.g inside NodeProto inside GraphProto..., or
 * TypeProto.sequence_type...) would overflow the stack. Before protobuf-c sees the bytes,
 * nesting_ok walks their wire format without recursion -- an explicit stack of the enclosing
 * messages -- and descends only into the fields the generated descriptors type as messages, so
 * string and bytes fields (raw tensor data) are skipped whatever they hold. It reads only the
 * framing (tags, varints, lengths), never a field's value. Deeper than ONNX_MAX_DEPTH is
 * unsupported; malformed framing is the same error protobuf-c gives. */
enum { ONNX_MAX_DEPTH = 64 };

static bool
wire_varint(const uint8_t *p, size_t end, size_t *i, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 64 && *i < end; shift += 7) {
        uint8_t c = p[(*i)++];
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return true;
    }
    return false; /* cut off, or longer than 10 bytes */
}

/* 1: fine; 0: malformed framing; -1: nested deeper than ONNX_MAX_DEPTH. */
static int
nesting_ok(const uint8_t *p, size_t len, const ProtobufCMessageDescriptor *top)
{
    struct {
        const ProtobufCMessageDescriptor *d;
        size_t                            end;
    } st[ONNX_MAX_DEPTH + 1];
    size_t depth = 0, i = 0;
    st[0].d = top;
    st[0].end = len;
    for (;;) {
        while (i == st[depth].end) {
            if (!depth)
                return 1;
            depth--;
        }
        size_t   end = st[depth].end;
        uint64_t key, v;
        if (!wire_varint(p, end, &i, &key) || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
            return 0;
        switch (key & 7) {
        case PROTOBUF_C_WIRE_TYPE_VARINT:
            if (!wire_varint(p, end, &i, &v))
                return 0;
            break;
        case PROTOBUF_C_WIRE_TYPE_64BIT:
            if (end - i < 8)
                return 0;
            i += 8;
            break;
        case PROTOBUF_C_WIRE_TYPE_32BIT:
            if (end - i < 4)
                return 0;
            i += 4;
            break;
        case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED: {
            if (!wire_varint(p, end, &i, &v) || v > end - i)
                return 0;
            const ProtobufCFieldDescriptor *f =
                protobuf_c_message_descriptor_get_field(st[depth].d, (unsigned)(key >> 3));
            if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE) {
                i += (size_t)v; /* a string, bytes, a packed array or an unknown field */
                break;
            }
            if (depth == ONNX_MAX_DEPTH)
                return -1;
            depth++;
            st[depth].d = f->descriptor;
            st[depth].end = i + (size_t)v;
            break;
        }
        default: /* groups (3, 4) and the undefined wire types */
            return 0;
        }
    }
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
    return kiln_graph_import_onnx_opts(ctx, data, len, filename, NULL, out, weights);
}

KILN_API enum kiln_status
kiln_graph_import_onnx_bound(kiln_ctx *ctx, const void *data, size_t len, const char *filename,
                             const struct kiln_onnx_binding *bind, uint32_t nbind,
                             struct kiln_graph **out, const double *const **weights)
{
    struct kiln_onnx_options o = {.bind = bind, .nbind = nbind};
    return kiln_graph_import_onnx_opts(ctx, data, len, filename, &o, out, weights);
}

KILN_API enum kiln_status
kiln_graph_import_onnx_opts(kiln_ctx *ctx, const void *data, size_t len, const char *filename,
                            const struct kiln_onnx_options *opt, struct kiln_graph **out,
                            const double *const **weights)
{
    const struct kiln_onnx_options none = {0};
    if (!opt)
        opt = &none;
    *out = NULL;
    if (weights)
        *weights = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    const char *file = filename ? kiln_arena_strdup(ctx, filename) : NULL;
    if (filename && !file)
        return ctx->err.status;
    int nest = nesting_ok(data, len, &onnx__model_proto__descriptor);
    if (nest < 0) {
        KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx", "ONNX model nested deeper than %d messages",
                  ONNX_MAX_DEPTH);
        kiln_error_set_loc(ctx, file, 0, 0);
        return KILN_ERR_UNSUPPORTED;
    }
    ProtobufCAllocator pa = {pb_alloc, pb_free, ctx};
    Onnx__ModelProto  *mp = nest ? onnx__model_proto__unpack(&pa, len, data) : NULL;
    if (!mp) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx",
                  "not a valid ONNX model (the protobuf data is malformed or truncated)");
        kiln_error_set_loc(ctx, file, 0, 0);
        return KILN_ERR_INVALID;
    }
    struct onnx_imp m = {.ctx = ctx, .file = file, .shapes = opt->shapes, .nshapes = opt->nshapes};
    m.g = kiln_graph_new(ctx);
    enum kiln_status st = m.g ? KILN_OK : ctx->err.status;
    if (st == KILN_OK) {
        m.g->file = file;
        st = import_model(&m, mp, opt->bind, opt->nbind);
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