/* frontend/onnx_impl.h -- private to the ONNX importer (frontend/onnx*.c): the import state, the
 * op table (frontend/onnx.def) and the helpers the op handlers share. Nothing outside
 * frontend/onnx*.c and its test includes this header.
 *
 * A node is imported by its table entry: the dispatcher (onnx.c) finds the entry for the node's
 * op and the model's opset, refuses attributes the entry does not list, looks up the inputs into
 * m->in[] and calls the handler, which maps the node onto kiln's op library. Every error a
 * handler reports names the node, its op and the opset ("node 3 'y' (Conv, opset 13): ..."). */
#ifndef KILN_FRONTEND_ONNX_IMPL_H
#define KILN_FRONTEND_ONNX_IMPL_H

#include "frontend.h"

/* Where an ONNX value comes from: each name is defined once (a second definition is an error
 * naming both). */
enum onnx_origin { ONNX_FROM_INITIALIZER, ONNX_FROM_BINDING, ONNX_FROM_INPUT, ONNX_FROM_NODE };

/* An ONNX value: a kiln tensor, or a constant known at import time that becomes a weight tensor
 * only when a node reads it as data (onnx_tensor). */
struct onnx_value {
    const char           *name;   /* ONNX name (owned by the unpacked model) */
    uint32_t              tensor; /* kiln tensor, or KILN_NONE while only a constant */
    bool                  is_const;
    struct frontend_const c;
    enum onnx_origin      origin;
    uint32_t              nodeno; /* ONNX_FROM_NODE: the node that defines it */
};

struct onnx_imp;
typedef enum kiln_status onnx_handler(struct onnx_imp *m);

/* The newest opset of the default ONNX domain kiln imports: a newer model is unsupported, since
 * an op's semantics may have changed in an opset kiln does not know. Up to 21, the ops of
 * onnx.def changed only as their rows say or by element types and attributes that are refused
 * (AveragePool 19's dilations, Pad 19's 'wrap' mode); no row may start above it (the test
 * checks). */
#define ONNX_OPSET_MAX 21

/* The most elements a constant made at import (ConstantOfShape, Range) may have. */
#define ONNX_CONST_MAX_ELEMS ((int64_t)1 << 24)

/* Marks "no upper bound" in the opset_hi and max_inputs columns of onnx.def. */
#define ONNX_ANY 0x7fff

/* One row of frontend/onnx.def. */
struct onnx_op {
    const char   *name;           /* ONNX op_type, default domain */
    int32_t       opset_lo;       /* the model opsets this row applies to, lo..hi */
    int32_t       opset_hi;       /*   (ONNX_ANY: no upper bound) */
    uint32_t      min_in, max_in; /* inputs; see onnx.def for which are required */
    uint32_t      max_out;        /* outputs the handler can define */
    const char   *attrs;          /* the attributes it reads, space-separated */
    onnx_handler *fn;
    const char   *kop; /* the library op, for a handler shared by several ONNX ops; or NULL */
};

/* The table, sorted by name and then opset (onnx.c). */
const struct onnx_op *onnx_ops(size_t *count);
/* The row for op `name` at model opset `opset`; NULL when kiln has no such op. An opset outside
 * every row of a known op gives *known = true. */
const struct onnx_op *onnx_op_find(const char *name, int64_t opset, bool *known);

struct onnx_imp {
    kiln_ctx                     *ctx;
    struct kiln_graph            *g;
    const char                   *file;
    int64_t                       opset; /* of the default domain */
    const Onnx__GraphProto       *graph; /* the model's (node indices name its nodes) */
    struct onnx_value            *val;
    uint32_t                      nval, capval;
    double                      **wdata; /* per tensor: a weight's values, else NULL */
    uint32_t                      capw;
    const struct kiln_onnx_shape *shapes; /* kiln_onnx_options' */
    uint32_t                      nshapes;
    /* the node being imported */
    const Onnx__NodeProto *node;
    uint32_t               nodeno;
    const struct onnx_op  *op;
    /* its inputs: max_in of them for a fixed-arity row (NULL: an optional one absent), every
     * input the node lists for a variadic row */
    struct onnx_value **in;
    uint32_t            nin;
};

/* One handler per distinct function named in onnx.def. */
#define ONNX_OP(name, lo, hi, min_in, max_in, max_out, attrs, fn, kop) \
    enum kiln_status onnx_op_##fn(struct onnx_imp *m);
#include "onnx.def"
#undef ONNX_OP

/* ---- errors: "node N 'NAME' (OP, opset K): message" ---- */
enum kiln_status onnx_fail(struct onnx_imp *m, enum kiln_status st, const char *fmt, ...)
    KILN_PRINTF(3, 4);
#define UNSUP(m, ...) onnx_fail(m, KILN_ERR_UNSUPPORTED, __VA_ARGS__)
#define BAD(m, ...)   onnx_fail(m, KILN_ERR_INVALID, __VA_ARGS__)
/* The node's name, else its first output's name. */
const char *onnx_node_name(const struct onnx_imp *m);

/* ---- values ---- */
static inline uint32_t
onnx_vrank(const struct onnx_imp *m, const struct onnx_value *v)
{
    return v->tensor != KILN_NONE ? m->g->tensor[v->tensor].ndim : v->c.ndim;
}
static inline const int64_t *
onnx_vshape(const struct onnx_imp *m, const struct onnx_value *v)
{
    return v->tensor != KILN_NONE ? m->g->tensor[v->tensor].shape : v->c.shape;
}
static inline enum kiln_dtype
onnx_vdtype(const struct onnx_imp *m, const struct onnx_value *v)
{
    return v->tensor != KILN_NONE ? (enum kiln_dtype)m->g->tensor[v->tensor].dtype : v->c.dtype;
}
static inline bool
onnx_is_float(enum kiln_dtype dt)
{
    return dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64 || dt == KILN_DTYPE_F16
           || dt == KILN_DTYPE_BF16;
}
static inline int64_t
onnx_norm_axis(int64_t axis, uint32_t rank)
{
    return axis < 0 ? axis + (int64_t)rank : axis;
}
/* The kiln tensor of v, turning a constant into a weight the first time it is read as data. */
uint32_t onnx_tensor(struct onnx_imp *m, struct onnx_value *v);
/* A new weight tensor named after onnx_name, holding constant c. */
uint32_t onnx_weight(struct onnx_imp *m, const char *onnx_name, const struct frontend_const *c);
/* A scalar (shape [1]) weight holding v. */
uint32_t onnx_scalar(struct onnx_imp *m, const char *base, double v, enum kiln_dtype dt);
/* Integer values of constant input i (a shape, axes, pads, slice bounds); a runtime input is an
 * "unsupported: dynamic shape" error. */
bool onnx_const_ints(struct onnx_imp *m, struct onnx_value *v, uint32_t i, const char *what,
                     int64_t *out, uint32_t *n, uint32_t cap);

/* ---- attributes of the node ---- */
const Onnx__AttributeProto *onnx_attr(const struct onnx_imp *m, const char *name); /* or NULL */
int64_t                     onnx_attr_int(const struct onnx_imp *m, const char *name, int64_t dflt);
double onnx_attr_float(const struct onnx_imp *m, const char *name, double dflt);
/* A string attribute as a NUL-terminated arena copy, or dflt (NULL when out of memory). */
const char *onnx_attr_str(struct onnx_imp *m, const char *name, const char *dflt);
/* An ints attribute: count in *n, values in out (cap entries); false on error. Absent: *n = 0
 * and *present = false. */
bool onnx_attr_ints(struct onnx_imp *m, const char *name, int64_t *out, uint32_t *n, uint32_t cap,
                    bool *present);

/* ---- library calls ---- */
struct onnx_attrs {
    struct kiln_attr a[12];
    uint32_t         n;
};
void onnx_at_int(struct onnx_imp *m, struct onnx_attrs *as, const char *name, int64_t v);
void onnx_at_ints(struct onnx_imp *m, struct onnx_attrs *as, const char *name, const int64_t *v,
                  uint32_t n);
void onnx_at_float(struct onnx_imp *m, struct onnx_attrs *as, const char *name, double v);
void onnx_at_str(struct onnx_imp *m, struct onnx_attrs *as, const char *name, const char *s);
/* One library call writing a tensor named after `base` (an ONNX name); returns the tensor, or
 * KILN_NONE after an error (an input KILN_NONE passes the error on). */
uint32_t onnx_lib(struct onnx_imp *m, const char *op, const char *base, uint32_t nin,
                  const uint32_t *in, const struct onnx_attrs *as);
uint32_t onnx_lib1(struct onnx_imp *m, const char *op, const char *base, uint32_t x,
                   const struct onnx_attrs *as);
uint32_t onnx_lib2(struct onnx_imp *m, const char *op, const char *base, uint32_t a, uint32_t b);
/* reshape x to shape (rank may be 0). */
uint32_t onnx_reshape(struct onnx_imp *m, const char *base, uint32_t x, uint32_t rank,
                      const int64_t *shape);
/* "BASE_SUFFIX", an arena string: the name of an intermediate tensor. */
char *onnx_suffixed(struct onnx_imp *m, const char *base, const char *suffix);

/* ---- outputs ---- */
/* Output 0's name: the base of every tensor a node creates. */
const char *onnx_out0(const struct onnx_imp *m);
/* Binds output i of the node to tensor t (KILN_NONE: the error already set). */
enum kiln_status onnx_set_output(struct onnx_imp *m, uint32_t i, uint32_t t);
/* Binds output i to a constant: it stays a value of the import until read as data. */
enum kiln_status onnx_set_const(struct onnx_imp *m, uint32_t i, const struct frontend_const *c);
/* Only output 0 may be used (others must be absent or empty). */
bool onnx_single_output(struct onnx_imp *m);

#endif /* KILN_FRONTEND_ONNX_IMPL_H */
