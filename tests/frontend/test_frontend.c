/* tests/frontend/test_frontend.c -- ONNX import (frontend/onnx*.c, frontend/tensor.c).
 *
 * - ONNX's own backend tests (Debian's libonnx-testdata: node, pytorch-converted,
 *   pytorch-operator): every model kiln imports is evaluated with the reference interpreter
 *   on each data set's inputs and must match the expected outputs (rtol 1e-3, atol 1e-7, as
 *   ONNX's runner); a model the import refuses must be refused as unsupported (never as
 *   invalid, never a crash), and the number of imported models must not drop below a floor.
 * - Models built here with the generated protobuf-c code: Gemm with alpha/beta/transA/transB, Pow
 *   by a constant 2 as square,
 *   Clip, legacy broadcasting, symbolic dimensions given by input or by name,
 *   Constant/Shape/Reshape folding, import-time constant folding of a Shape/Slice/Mul/Range
 *   chain, LayerNormalization with its statistics outputs and Split, on random data against a
 *   naive computation; Gather (runtime indices, a constant scalar and run as slices),
 *   comparisons, logic, Where, Cast, CastLike, Expand, Tile and Trilu, Hardmax (both axis
 *   conventions), Shrink, ThresholdedRelu, Mean, Round, Sign, Ceil, Sin, Atanh and Pow with an
 *   int64 exponent, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (reductions,
 *   weights, ignore_index, log_prob), OneHot, EyeLike, DepthToSpace, SpaceToDepth, GatherND
 *   (batch_dims), InstanceNormalization, MeanVarianceNormalization, LRN, ScatterElements,
 *   Resize and Upsample (linear align_corners, nearest, keep_aspect_ratio_policy, antialias)
 *   against naive computations; the error messages of an unsupported op and attribute, a
 *   dynamic shape, a missing input, a cast to a type kiln lacks, a float Mod without fmod, a
 *   bad Hardmax axis; initializers returned as weights; names made valid.
 * - The op table (frontend/onnx.def): sorted, each op's opset rows contiguous from the opset
 *   that introduced the op, the lookup by opset, and the dispatcher's shared checks (attributes
 *   by opset row, a missing or undefined input, an output past the row's).
 * - Strict reading: a missing, repeated, invalid or too new default-domain opset; a value
 *   defined twice (two nodes, a node and a graph input or initializer, one node's outputs, two
 *   inputs or initializers); a Conv kernel_shape that disagrees with the weight.
 * - Corrupt files: every prefix of a model is an error (a cut between whole fields loses
 *   opset_import), random byte flips give an error or a graph, never a crash (ASan run in CI);
 *   messages nested 50,000 deep are refused before protobuf-c recurses, 64 levels are not, and
 *   bytes holding such a nest are data; a TensorProto whose data does not match its dims is an
 *   error. */
#include "../../frontend/onnx_impl.h"
#include "../harness.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TESTDATA "/usr/share/libonnx-testdata/data"

/* ---- building models ---- */

struct mb {
    Onnx__ModelProto                  model;
    Onnx__GraphProto                  graph;
    Onnx__OperatorSetIdProto          opset, *opsets[1];
    Onnx__NodeProto                   node[8], *nodes[8];
    Onnx__AttributeProto              attr[16], *attrs[8][8];
    Onnx__ValueInfoProto              vi[8], *ins[4], *outs[8];
    Onnx__TypeProto                   tp[8];
    Onnx__TypeProto__Tensor           tt[8];
    Onnx__TensorShapeProto            sp[8];
    Onnx__TensorShapeProto__Dimension dim[8][4], *dims[8][4];
    Onnx__TensorProto                 init[8], *inits[8];
    float                             fdata[8][64];
    int64_t                           idata[8][8];
    uint32_t                          nvi, nattr;
};

static void
mb_init(struct mb *b, int64_t opset)
{
    memset(b, 0, sizeof *b);
    b->model = (Onnx__ModelProto)ONNX__MODEL_PROTO__INIT;
    b->graph = (Onnx__GraphProto)ONNX__GRAPH_PROTO__INIT;
    b->opset = (Onnx__OperatorSetIdProto)ONNX__OPERATOR_SET_ID_PROTO__INIT;
    b->opset.has_version = 1;
    b->opset.version = opset;
    b->opsets[0] = &b->opset;
    b->model.has_ir_version = 1;
    b->model.ir_version = 7;
    b->model.n_opset_import = 1;
    b->model.opset_import = b->opsets;
    b->model.graph = &b->graph;
    b->graph.node = b->nodes;
    b->graph.input = b->ins;
    b->graph.output = b->outs;
    b->graph.initializer = b->inits;
}

static Onnx__ValueInfoProto *
mb_vi(struct mb *b, char *name, int ndim, const int64_t *shape)
{
    uint32_t k = b->nvi++;
    b->vi[k] = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
    b->tp[k] = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
    b->tt[k] = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
    b->sp[k] = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
    for (int d = 0; d < ndim; d++) {
        b->dim[k][d] = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
        b->dim[k][d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        b->dim[k][d].dim_value = shape[d];
        b->dims[k][d] = &b->dim[k][d];
    }
    b->sp[k].n_dim = (size_t)ndim;
    b->sp[k].dim = b->dims[k];
    b->tt[k].has_elem_type = 1;
    b->tt[k].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    b->tt[k].shape = &b->sp[k];
    b->tp[k].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    b->tp[k].tensor_type = &b->tt[k];
    b->vi[k].name = name;
    b->vi[k].type = &b->tp[k];
    return &b->vi[k];
}

static void
mb_input(struct mb *b, char *name, int ndim, const int64_t *shape)
{
    b->ins[b->graph.n_input++] = mb_vi(b, name, ndim, shape);
}

static void
mb_output(struct mb *b, char *name)
{
    b->outs[b->graph.n_output++] = mb_vi(b, name, 0, NULL);
}

/* A float initializer (values copied) or, when ivals is given, an int64 one. */
static void
mb_init_tensor(struct mb *b, char *name, int ndim, int64_t *shape, const float *fvals,
               const int64_t *ivals, size_t n)
{
    size_t k = b->graph.n_initializer++;
    b->init[k] = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
    b->init[k].name = name;
    b->init[k].n_dims = (size_t)ndim;
    b->init[k].dims = shape;
    b->init[k].has_data_type = 1;
    if (ivals) {
        memcpy(b->idata[k], ivals, sizeof(int64_t) * n);
        b->init[k].data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
        b->init[k].n_int64_data = n;
        b->init[k].int64_data = b->idata[k];
    } else {
        memcpy(b->fdata[k], fvals, sizeof(float) * n);
        b->init[k].data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
        b->init[k].n_float_data = n;
        b->init[k].float_data = b->fdata[k];
    }
    b->inits[k] = &b->init[k];
}

static Onnx__NodeProto *
mb_node(struct mb *b, char *op, char *name, size_t nin, char **in, char **out)
{
    size_t k = b->graph.n_node++;
    b->node[k] = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
    b->node[k].op_type = op;
    b->node[k].name = name;
    b->node[k].n_input = nin;
    b->node[k].input = in;
    b->node[k].n_output = 1;
    b->node[k].output = out;
    b->node[k].attribute = b->attrs[k];
    b->nodes[k] = &b->node[k];
    return &b->node[k];
}

static void
mb_attr_f(struct mb *b, Onnx__NodeProto *n, char *name, float f)
{
    Onnx__AttributeProto *a = &b->attr[b->nattr++];
    *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
    a->name = name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    a->has_f = 1;
    a->f = f;
    n->attribute[n->n_attribute++] = a;
}

static void
mb_attr_i(struct mb *b, Onnx__NodeProto *n, char *name, int64_t i)
{
    Onnx__AttributeProto *a = &b->attr[b->nattr++];
    *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
    a->name = name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = i;
    n->attribute[n->n_attribute++] = a;
}

/* Packs the model (malloc'ed). */
static uint8_t *
mb_pack(struct mb *b, size_t *len)
{
    *len = onnx__model_proto__get_packed_size(&b->model);
    uint8_t *buf = malloc(*len ? *len : 1);
    if (buf)
        onnx__model_proto__pack(&b->model, buf);
    return buf;
}

/* Imports b; returns the status, the graph and the weights through the pointers. */
static enum kiln_status
mb_import(kiln_ctx *ctx, struct mb *b, struct kiln_graph **g, const double *const **w)
{
    size_t   len;
    uint8_t *buf = mb_pack(b, &len);
    if (!buf)
        return KILN_ERR_NOMEM;
    enum kiln_status st = kiln_graph_import_onnx(ctx, buf, len, "m.onnx", g, w);
    free(buf);
    return st;
}

static const char *
errmsg(kiln_ctx *ctx)
{
    static char buf[1024];
    kiln_error_format(kiln_ctx_error(ctx), buf, sizeof buf);
    return buf;
}

#define CHECK_CONTAINS(hay, needle)                                                \
    do {                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                    \
        if (!strstr(h_, n_))                                                       \
            harness_fail(__FILE__, __LINE__, "message lacks '%s':\n  %s", n_, h_); \
    } while (0)

/* Evaluates g with the interpreter: args from inputs (in order) and weights. */
static bool
eval(kiln_ctx *ctx, struct kiln_graph *g, const double *const *w, const double *const *inputs,
     double **outs)
{
    uint32_t       na = kiln_graph_nargs(g);
    const double **args = calloc(na + 1, sizeof *args);
    if (!args)
        return false;
    for (uint32_t i = 0, k = 0; i < na; i++)
        args[i] = w[i] ? w[i] : inputs[k++];
    enum kiln_status st = kiln_graph_eval(ctx, g, args, outs);
    free(args);
    if (st != KILN_OK)
        harness_fail(__FILE__, __LINE__, "eval: %s", errmsg(ctx));
    return st == KILN_OK;
}

/* ---- hand-built models against naive computations ---- */

static void
test_gemm_random(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    for (uint64_t it = 0; it < opt_iters_or(24); it++) {
        int64_t M = 1 + (int64_t)kiln_rng_below(&r, 4), K = 1 + (int64_t)kiln_rng_below(&r, 5),
                N = 1 + (int64_t)kiln_rng_below(&r, 4);
        bool    ta = kiln_rng_below(&r, 2), tb = kiln_rng_below(&r, 2);
        int     cmode = (int)kiln_rng_below(&r, 3); /* 0 none, 1 [N], 2 [M, N] */
        float   alpha = kiln_rng_below(&r, 2) ? 1.0f : 0.5f + (float)kiln_rng_below(&r, 4);
        float   beta = kiln_rng_below(&r, 2) ? 1.0f : -1.5f;
        int64_t sa[2] = {ta ? K : M, ta ? M : K}, sb[2] = {tb ? N : K, tb ? K : N};
        int64_t sc1[1] = {N}, sc2[2] = {M, N};
        float   B[64], C[64];
        for (int i = 0; i < 64; i++) {
            B[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
            C[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
        }
        struct mb b;
        mb_init(&b, 13);
        char *in[] = {"A", "B", "C"}, *out[] = {"Y"};
        mb_input(&b, "A", 2, sa);
        mb_init_tensor(&b, "B", 2, sb, B, NULL, (size_t)(K * N));
        if (cmode)
            mb_init_tensor(&b, "C", cmode, cmode == 1 ? sc1 : sc2, C, NULL,
                           (size_t)(cmode == 1 ? N : M * N));
        Onnx__NodeProto *n = mb_node(&b, "Gemm", "gemm", cmode ? 3 : 2, in, out);
        mb_attr_f(&b, n, "alpha", alpha);
        mb_attr_f(&b, n, "beta", beta);
        mb_attr_i(&b, n, "transA", ta);
        mb_attr_i(&b, n, "transB", tb);
        mb_output(&b, "Y");
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_graph   *g;
        const double *const *w;
        if (mb_import(ctx, &b, &g, &w) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "import: %s", errmsg(ctx));
            kiln_ctx_free(ctx);
            return;
        }
        double A[64], Y[64];
        for (int64_t i = 0; i < M * K; i++)
            A[i] = 2 * kiln_rng_uniform(&r) - 1;
        const double *ins[] = {A};
        double       *outs[] = {Y};
        if (eval(ctx, g, w, ins, outs)) {
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double s = 0;
                    for (int64_t k = 0; k < K; k++)
                        s += A[ta ? k * M + i : i * K + k] * B[tb ? j * K + k : k * N + j];
                    s *= alpha;
                    if (cmode)
                        s += beta * C[cmode == 1 ? j : i * N + j];
                    CHECK_NEAR(s, Y[i * N + j], 1e-6);
                }
        }
        kiln_ctx_free(ctx);
    }
}

/* ---- reductions: Reduce*, ArgMax / ArgMin, CumSum against naive loops over x[2, 3, 4] ---- */

static void
mb_attr_ints(struct mb *b, Onnx__NodeProto *n, char *name, int64_t *v, size_t nv)
{
    Onnx__AttributeProto *a = &b->attr[b->nattr++];
    *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
    a->name = name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = nv;
    a->ints = v;
    n->attribute[n->n_attribute++] = a;
}

/* Imports b and evaluates it on x (24 values); false (after reporting) when either fails. The
 * output's rank is *rank. */
static bool
run_x24(struct mb *b, const double *x, double *y, uint32_t *rank, const char *what)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g;
    const double *const *w;
    bool                 ok = false;
    if (mb_import(ctx, b, &g, &w) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s: import: %s", what, errmsg(ctx));
    } else {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, kiln_graph_output(g, 0), &ti);
        *rank = ti.ndim;
        const double *ins[] = {x};
        double       *outs[] = {y};
        ok = eval(ctx, g, w, ins, outs);
    }
    kiln_ctx_free(ctx);
    return ok;
}

static const char *const reduce_ops[] = {
    "ReduceSum",  "ReduceMean", "ReduceSumSquare", "ReduceMax",    "ReduceMin",
    "ReduceProd", "ReduceL1",   "ReduceL2",        "ReduceLogSum", "ReduceLogSumExp"};

static void
test_reductions(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t         sx[3] = {2, 3, 4};
    for (uint64_t it = 0; it < opt_iters_or(60); it++) {
        int      kind = (int)kiln_rng_below(&r, KILN_COUNTOF(reduce_ops));
        int64_t  opset = kiln_rng_below(&r, 2) ? 13 : 18;
        bool     input = opset >= (kind == 0 ? 13 : 18); /* axes as an input */
        int64_t  axes[3], sa[1];
        size_t   na = 0;
        bool     red[3];
        int      keep = (int)kiln_rng_below(&r, 2);
        double   x[24], y[24], acc[24];
        uint32_t rank;
        for (int a = 0; a < 3; a++)
            if (kiln_rng_below(&r, 2))
                axes[na++] = kiln_rng_below(&r, 2) ? a : a - 3;
        for (int a = 0; a < 3; a++) {
            bool hit = !na;
            for (size_t i = 0; i < na; i++)
                hit |= (axes[i] + 3) % 3 == a;
            red[a] = hit;
        }
        for (int i = 0; i < 24; i++) /* f32 values, away from 0 for the logs and products */
            x[i] = (double)(float)((0.5 + kiln_rng_uniform(&r))
                                   * (kind == 8               ? 1
                                      : kiln_rng_below(&r, 2) ? 1
                                                              : -1));
        struct mb b;
        mb_init(&b, opset);
        char *in[] = {"x", "axes"}, *out[] = {"y"};
        mb_input(&b, "x", 3, sx);
        if (input && na) {
            sa[0] = (int64_t)na;
            mb_init_tensor(&b, "axes", 1, sa, NULL, axes, na);
        }
        Onnx__NodeProto *n =
            mb_node(&b, (char *)reduce_ops[kind], "red", input && na ? 2 : 1, in, out);
        if (!input && na)
            mb_attr_ints(&b, n, "axes", axes, na);
        mb_attr_i(&b, n, "keepdims", keep);
        mb_output(&b, "y");
        /* naive: the output's linear index is the same with or without keepdims */
        int64_t cnt = 1;
        for (int a = 0; a < 3; a++)
            cnt *= red[a] ? sx[a] : 1;
        double mx[24];
        for (int o = 0; o < 24; o++) {
            acc[o] = kind == 3 ? -INFINITY : kind == 4 ? INFINITY : kind == 5 ? 1 : 0;
            mx[o] = -INFINITY;
        }
        for (int i = 0; i < 24; i++) {
            int c[3] = {i / 12, i / 4 % 3, i % 4}, o = 0;
            for (int a = 0; a < 3; a++)
                if (!red[a])
                    o = o * (int)sx[a] + c[a];
            mx[o] = fmax(mx[o], x[i]);
        }
        for (int i = 0; i < 24; i++) {
            int c[3] = {i / 12, i / 4 % 3, i % 4}, o = 0;
            for (int a = 0; a < 3; a++)
                if (!red[a])
                    o = o * (int)sx[a] + c[a];
            double v = x[i];
            switch (kind) {
            case 0:
            case 1:
            case 8:
                acc[o] += v;
                break;
            case 2:
            case 7:
                acc[o] += v * v;
                break;
            case 3:
                acc[o] = fmax(acc[o], v);
                break;
            case 4:
                acc[o] = fmin(acc[o], v);
                break;
            case 5:
                acc[o] *= v;
                break;
            case 6:
                acc[o] += fabs(v);
                break;
            default:
                acc[o] += exp(v - mx[o]);
                break;
            }
        }
        char what[128];
        snprintf(what, sizeof what, "%s opset %lld, %zu axes, keepdims %d", reduce_ops[kind],
                 (long long)opset, na, keep);
        if (!run_x24(&b, x, y, &rank, what))
            continue;
        int nred = 0;
        for (int a = 0; a < 3; a++)
            nred += red[a];
        if (rank != (keep ? 3u : 3u - (uint32_t)nred))
            harness_fail(__FILE__, __LINE__, "%s: rank %u", what, rank);
        for (int o = 0; o < 24 / cnt; o++) {
            double want = acc[o];
            if (kind == 1)
                want /= (double)cnt;
            else if (kind == 7)
                want = sqrt(want);
            else if (kind == 8)
                want = log(want);
            else if (kind == 9)
                want = log(want) + mx[o];
            if (fabs(want - y[o]) > 1e-9 * fmax(1, fabs(want)))
                harness_fail(__FILE__, __LINE__, "%s: element %d is %.17g, want %.17g", what, o,
                             y[o], want);
        }
    }
}

static void
test_argmax_cumsum(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t         sx[3] = {2, 3, 4}, s1[1] = {1};
    for (uint64_t it = 0; it < opt_iters_or(40); it++) {
        double   x[24], y[24];
        uint32_t rank;
        int      axis = (int)kiln_rng_below(&r, 3), keep = (int)kiln_rng_below(&r, 2);
        int      last = (int)kiln_rng_below(&r, 2), is_max = (int)kiln_rng_below(&r, 2);
        int64_t  aval = kiln_rng_below(&r, 2) ? axis : axis - 3;
        for (int i = 0; i < 24; i++) /* three values: many ties */
            x[i] = (double)kiln_rng_below(&r, 3) - 1;
        char     *in[] = {"x", "axis"}, *out[] = {"y"}, what[128];
        bool      cum = kiln_rng_below(&r, 2);
        struct mb b;
        if (!cum) {
            mb_init(&b, 13);
            mb_input(&b, "x", 3, sx);
            Onnx__NodeProto *n = mb_node(&b, is_max ? "ArgMax" : "ArgMin", "arg", 1, in, out);
            mb_attr_i(&b, n, "axis", aval);
            mb_attr_i(&b, n, "keepdims", keep);
            mb_attr_i(&b, n, "select_last_index", last);
            mb_output(&b, "y");
            snprintf(what, sizeof what, "%s axis %lld keepdims %d select_last_index %d",
                     is_max ? "ArgMax" : "ArgMin", (long long)aval, keep, last);
            if (!run_x24(&b, x, y, &rank, what))
                continue;
            CHECK_EQ_INT(keep ? 3 : 2, rank);
            for (int i = 0, o = 0; i < 24; i++) {
                int c[3] = {i / 12, i / 4 % 3, i % 4};
                if (c[axis])
                    continue;
                int64_t best = 0, st = axis == 0 ? 12 : axis == 1 ? 4 : 1;
                for (int64_t j = 1; j < sx[axis]; j++) {
                    double v = x[i + j * st], bv = x[i + best * st];
                    if (is_max ? (v > bv || (last && v == bv)) : (v < bv || (last && v == bv)))
                        best = j;
                }
                if (y[o] != (double)best)
                    harness_fail(__FILE__, __LINE__, "%s: output %d is %g, want %lld", what, o,
                                 y[o], (long long)best);
                o++;
            }
        } else {
            int excl = (int)kiln_rng_below(&r, 2), rev = (int)kiln_rng_below(&r, 2);
            mb_init(&b, 14);
            mb_input(&b, "x", 3, sx);
            mb_init_tensor(&b, "axis", 0, s1, NULL, &aval, 1);
            Onnx__NodeProto *n = mb_node(&b, "CumSum", "cum", 2, in, out);
            mb_attr_i(&b, n, "exclusive", excl);
            mb_attr_i(&b, n, "reverse", rev);
            mb_output(&b, "y");
            snprintf(what, sizeof what, "CumSum axis %lld exclusive %d reverse %d", (long long)aval,
                     excl, rev);
            if (!run_x24(&b, x, y, &rank, what))
                continue;
            for (int i = 0; i < 24; i++) {
                int     c[3] = {i / 12, i / 4 % 3, i % 4};
                int64_t st = axis == 0 ? 12 : axis == 1 ? 4 : 1, base = i - c[axis] * st;
                double  want = 0;
                for (int64_t j = 0; j < sx[axis]; j++)
                    if (rev ? (excl ? j > c[axis] : j >= c[axis])
                            : (excl ? j < c[axis] : j <= c[axis]))
                        want += x[base + j * st];
                if (y[i] != want)
                    harness_fail(__FILE__, __LINE__, "%s: element %d is %g, want %g", what, i, y[i],
                                 want);
            }
        }
    }
}

/* What the reductions refuse, and how they say it. */
static void
test_reduction_errors(void)
{
    int64_t sx[3] = {2, 3, 4}, s1[1] = {1};
    char   *in1[] = {"x"}, *in2[] = {"x", "axis"}, *out[] = {"y"};
    struct {
        const char *op;
        int64_t     opset;
        int         attr; /* 0 none, 1 axis=5, 2 noop_with_empty_axes=1 */
        bool        axis_input, dynamic;
        const char *want[2];
    } cases[] = {
        {"ArgMax",
         13,
         1,
         false,
         false,
         {"node 0 'red' (ArgMax, opset 13)", "axis 5 is out of range for rank 3"}},
        {"ReduceL2",
         18,
         2,
         false,
         false,
         {"node 0 'red' (ReduceL2, opset 18)", "noop_with_empty_axes"}},
        {"CumSum",
         14,
         0,
         true,
         true,
         {"node 0 'red' (CumSum, opset 14)", "dynamic shape: input 1 (axis, 'axis')"}},
        {"ArgMin",
         11,
         3,
         false,
         false,
         {"node 0 'red' (ArgMin, opset 11)", "attribute 'select_last_index' is not supported"}},
    };
    for (size_t k = 0; k < KILN_COUNTOF(cases); k++) {
        struct mb b;
        int64_t   av = 5;
        mb_init(&b, cases[k].opset);
        mb_input(&b, "x", 3, sx);
        if (cases[k].dynamic)
            mb_input(&b, "axis", 0, s1);
        else if (cases[k].axis_input)
            mb_init_tensor(&b, "axis", 0, s1, NULL, &av, 1);
        Onnx__NodeProto *n = mb_node(&b, (char *)cases[k].op, "red", cases[k].axis_input ? 2 : 1,
                                     cases[k].axis_input ? in2 : in1, out);
        if (cases[k].attr == 1)
            mb_attr_i(&b, n, "axis", 5);
        else if (cases[k].attr == 2)
            mb_attr_i(&b, n, "noop_with_empty_axes", 1);
        else if (cases[k].attr == 3)
            mb_attr_i(&b, n, "select_last_index", 1);
        mb_output(&b, "y");
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_graph   *g;
        const double *const *w;
        if (mb_import(ctx, &b, &g, &w) == KILN_OK) {
            harness_fail(__FILE__, __LINE__, "%s: imported, want an error", cases[k].op);
        } else {
            CHECK_CONTAINS(errmsg(ctx), cases[k].want[0]);
            CHECK_CONTAINS(errmsg(ctx), cases[k].want[1]);
        }
        kiln_ctx_free(ctx);
    }
}

/* Elementwise ops built from several library ops (Hardmax, Shrink, ThresholdedRelu, Mean) and
 * the new unary ones, on x of shape [2, 3, 4] with random values (some halves and ties),
 * against naive computations. */
static void
test_elementwise(void)
{
    struct kiln_rng    r = kiln_rng_new(opt_seed());
    int64_t            sx[3] = {2, 3, 4};
    static char *const ops[] = {"Hardmax", "Shrink", "ThresholdedRelu", "Mean", "Round", "Sign",
                                "Ceil",    "Sin",    "Atanh",           "Pow"};
    for (uint64_t it = 0; it < opt_iters_or(60); it++) {
        double x[24], y[24];
        float  cf[24];
        for (int i = 0; i < 24; i++) {
            x[i] = (double)(float)(kiln_rng_uniform(&r) * 4 - 2);
            if (kiln_rng_below(&r, 3) == 0) /* halves: ties for Hardmax, Round, Sign */
                x[i] = (double)((int)kiln_rng_below(&r, 9) - 4) / 2;
            cf[i] = (float)(kiln_rng_uniform(&r) * 2 - 1);
        }
        char     *op = ops[kiln_rng_below(&r, KILN_COUNTOF(ops))];
        char     *in[] = {"x", "c"}, *out[] = {"y"}, what[128];
        int64_t   opset = kiln_rng_below(&r, 2) ? 13 : 11, axis = 0;
        float     fa = (float)(kiln_rng_uniform(&r) * 2 - 1), fb = (float)kiln_rng_uniform(&r);
        struct mb b;
        bool      mean = !strcmp(op, "Mean"), pw = !strcmp(op, "Pow");
        int64_t   s4[1] = {4}, e4[4]; /* Pow: an int64 exponent, broadcast along the last axis */
        for (int i = 0; i < 4; i++)
            e4[i] = (int64_t)kiln_rng_below(&r, 6) - 2;
        mb_init(&b, opset);
        mb_input(&b, "x", 3, sx);
        if (mean)
            mb_init_tensor(&b, "c", 3, sx, cf, NULL, 24);
        else if (pw)
            mb_init_tensor(&b, "c", 1, s4, NULL, e4, 4);
        Onnx__NodeProto *n = mb_node(&b, op, "e", mean || pw ? 2 : 1, in, out);
        if (!strcmp(op, "Hardmax")) {
            axis = (int64_t)kiln_rng_below(&r, 6) - 3;
            mb_attr_i(&b, n, "axis", axis);
        } else if (!strcmp(op, "Shrink")) {
            mb_attr_f(&b, n, "bias", fa);
            mb_attr_f(&b, n, "lambd", fb);
        } else if (!strcmp(op, "ThresholdedRelu")) {
            mb_attr_f(&b, n, "alpha", fa);
        } else if (!strcmp(op, "Atanh")) {
            for (int i = 0; i < 24; i++)
                x[i] = (double)(float)(x[i] / 2.5);
        }
        mb_output(&b, "y");
        snprintf(what, sizeof what, "%s (opset %lld, axis %lld, %g, %g)", op, (long long)opset,
                 (long long)axis, fa, fb);
        uint32_t rank;
        if (!run_x24(&b, x, y, &rank, what))
            continue;
        CHECK_EQ_INT(3, rank);
        double want[24];
        for (int i = 0; i < 24; i++) {
            double v = x[i];
            if (!strcmp(op, "Shrink"))
                want[i] = v < -(double)fb ? v + fa : v > fb ? v - fa : 0;
            else if (!strcmp(op, "ThresholdedRelu"))
                want[i] = v > fa ? v : 0;
            else if (mean)
                want[i] = (float)((float)v + cf[i]) / 2;
            else if (!strcmp(op, "Round"))
                want[i] = nearbyint(v); /* the default rounding mode: half to even */
            else if (!strcmp(op, "Sign"))
                want[i] = v < 0 ? -1 : v > 0 ? 1 : 0;
            else if (!strcmp(op, "Ceil"))
                want[i] = ceil(v);
            else if (!strcmp(op, "Sin"))
                want[i] = sin(v);
            else if (!strcmp(op, "Atanh"))
                want[i] = atanh(v);
            else if (pw) /* the base's dtype: f32 */
                want[i] = (float)pow(v, (double)e4[i % 4]);
            else
                want[i] = 0;
        }
        if (!strcmp(op, "Hardmax")) {
            /* opset 13: along axis; before, over the flattened dimensions from axis */
            int64_t a = axis < 0 ? axis + 3 : axis, inner = 1, len = 1;
            for (int64_t d = a + 1; d < 3; d++)
                inner *= sx[d];
            if (opset < 13) {
                len = inner * sx[a];
                inner = 1;
            } else {
                len = sx[a];
            }
            for (int i = 0; i < 24; i++) {
                int64_t base = i / (len * inner) * len * inner + i % inner, best = base;
                for (int64_t j = 1; j < len; j++)
                    if (x[base + j * inner] > x[best])
                        best = base + j * inner;
                want[i] = i == best;
            }
        }
        for (int i = 0; i < 24; i++)
            if (!(fabs(y[i] - want[i]) <= 1e-6 * (1 + fabs(want[i])) || y[i] == want[i]))
                harness_fail(__FILE__, __LINE__, "%s: element %d is %.9g, want %.9g (x = %.9g)",
                             what, i, y[i], want[i], x[i]);
    }
}

/* What the elementwise ops refuse, and how they say it. */
static void
test_elementwise_errors(void)
{
    int64_t sx[3] = {2, 3, 4};
    char   *in1[] = {"x"}, *in2[] = {"x", "x"}, *out[] = {"y"};
    struct {
        char       *op;
        int         attr; /* 0 none, 1 fmod=0, 2 axis=3, 3 fmod=2 */
        const char *want[2];
    } cases[] = {
        {"Mod", 1, {"node 0 'e' (Mod, opset 13)", "fmod must be 1 for float inputs (f32)"}},
        {"Mod", 3, {"node 0 'e' (Mod, opset 13)", "fmod 2 must be 0 or 1"}},
        {"Hardmax", 2, {"node 0 'e' (Hardmax, opset 13)", "axis 3 is out of range for rank 3"}},
    };
    for (size_t k = 0; k < KILN_COUNTOF(cases); k++) {
        struct mb b;
        mb_init(&b, 13);
        mb_input(&b, "x", 3, sx);
        bool             bin = !strcmp(cases[k].op, "Mod");
        Onnx__NodeProto *n = mb_node(&b, cases[k].op, "e", bin ? 2 : 1, bin ? in2 : in1, out);
        if (cases[k].attr == 1 || cases[k].attr == 3)
            mb_attr_i(&b, n, "fmod", cases[k].attr == 1 ? 0 : 2);
        else if (cases[k].attr == 2)
            mb_attr_i(&b, n, "axis", 3);
        mb_output(&b, "y");
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_graph   *g;
        const double *const *w;
        if (mb_import(ctx, &b, &g, &w) == KILN_OK) {
            harness_fail(__FILE__, __LINE__, "%s: imported, want an error", cases[k].op);
        } else {
            CHECK_CONTAINS(errmsg(ctx), cases[k].want[0]);
            CHECK_CONTAINS(errmsg(ctx), cases[k].want[1]);
        }
        kiln_ctx_free(ctx);
    }
}

/* Shape -> Constant -> Reshape folding, Clip from constant inputs, legacy axis broadcasting. */
static void
test_folding_clip_legacy(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t         sx[3] = {2, 3, 4}, sb[1] = {3}, s1[1] = {1}, s2[1] = {2};
    float           lo = -0.25f, hi = 0.5f, bias[3];
    for (int i = 0; i < 3; i++)
        bias[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
    /* opset 13: y = Clip(Reshape(x, [6, -1]), lo, hi) */
    struct mb b;
    mb_init(&b, 13);
    char *n0i[] = {"x"}, *n0o[] = {"shp"}, *n1i[] = {"x", "newshape"}, *n1o[] = {"r"},
         *n2i[] = {"r", "lo", "hi"}, *n2o[] = {"y"};
    int64_t ns[2] = {6, -1};
    mb_input(&b, "x", 3, sx);
    mb_init_tensor(&b, "newshape", 1, s2, NULL, ns, 2);
    mb_init_tensor(&b, "lo", 0, s1, &lo, NULL, 1);
    mb_init_tensor(&b, "hi", 0, s1, &hi, NULL, 1);
    mb_node(&b, "Shape", "shape", 1, n0i, n0o); /* unused: folded away */
    mb_node(&b, "Reshape", "reshape", 2, n1i, n1o);
    mb_node(&b, "Clip", "clip", 3, n2i, n2o);
    mb_output(&b, "y");
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g;
    const double *const *w;
    double               x[24], y[24];
    for (int i = 0; i < 24; i++)
        x[i] = 2 * kiln_rng_uniform(&r) - 1;
    const double *ins[] = {x};
    double       *outs[] = {y};
    if (mb_import(ctx, &b, &g, &w) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "import: %s", errmsg(ctx));
    } else {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, kiln_graph_output(g, 0), &ti);
        CHECK_EQ_INT(2, ti.ndim);
        CHECK_EQ_INT(6, ti.shape[0]);
        CHECK_EQ_INT(4, ti.shape[1]);
        /* the shape tensor is read at import time: no int64 argument */
        for (uint32_t i = 0; i < kiln_graph_nargs(g); i++) {
            kiln_graph_tensor(g, kiln_graph_arg(g, i), &ti);
            CHECK(ti.dtype == KILN_DTYPE_F32);
        }
        if (eval(ctx, g, w, ins, outs))
            for (int i = 0; i < 24; i++)
                CHECK_NEAR(fmin(fmax(x[i], lo), hi), y[i], 1e-12);
    }
    kiln_ctx_free(ctx);

    /* opset 6: Add(x, bias, broadcast=1, axis=1) adds bias along dimension 1 */
    mb_init(&b, 6);
    char *ai[] = {"x", "bias"}, *ao[] = {"y"};
    mb_input(&b, "x", 3, sx);
    mb_init_tensor(&b, "bias", 1, sb, bias, NULL, 3);
    Onnx__NodeProto *n = mb_node(&b, "Add", "add", 2, ai, ao);
    mb_attr_i(&b, n, "broadcast", 1);
    mb_attr_i(&b, n, "axis", 1);
    mb_output(&b, "y");
    ctx = kiln_ctx_new(NULL);
    if (mb_import(ctx, &b, &g, &w) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "import: %s", errmsg(ctx));
    } else if (eval(ctx, g, w, ins, outs)) {
        for (int i = 0; i < 24; i++)
            CHECK_NEAR(x[i] + bias[(i / 4) % 3], y[i], 1e-7);
        CHECK(w[1] != NULL && w[1][2] == (double)bias[2]); /* the initializer as a weight */
    }
    kiln_ctx_free(ctx);
}

/* Import-time folding: y = Reshape(x, Shape(x)[1:3] * [2, 1]) + Reshape(Range(0, 24, 1), [6,
 * 4]); every node but the Reshape of x and the Add has constant inputs, so the shape reaches
 * Reshape as a constant and the range becomes one f32 weight. */
static void
test_fold_shapes(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t         sx[3] = {2, 3, 4}, s1[1] = {1}, s2[1] = {2};
    int64_t         st[1] = {1}, en[1] = {3}, mul[2] = {2, 1}, rs[2] = {6, 4};
    float           f0 = 0, f24 = 24, f1 = 1;
    struct mb       b;
    mb_init(&b, 13);
    char *n0i[] = {"x"}, *n0o[] = {"shp"}, *n1i[] = {"shp", "st", "en"}, *n1o[] = {"hw"},
         *n2i[] = {"hw", "mul"}, *n2o[] = {"ns"}, *n3i[] = {"x", "ns"}, *n3o[] = {"xr"},
         *n4i[] = {"start", "limit", "delta"}, *n4o[] = {"ramp"}, *n5i[] = {"ramp", "rs"},
         *n5o[] = {"ramp2"}, *n6i[] = {"xr", "ramp2"}, *n6o[] = {"y"};
    mb_input(&b, "x", 3, sx);
    mb_init_tensor(&b, "st", 1, s1, NULL, st, 1);
    mb_init_tensor(&b, "en", 1, s1, NULL, en, 1);
    mb_init_tensor(&b, "mul", 1, s2, NULL, mul, 2);
    mb_init_tensor(&b, "rs", 1, s2, NULL, rs, 2);
    mb_init_tensor(&b, "start", 0, s1, &f0, NULL, 1);
    mb_init_tensor(&b, "limit", 0, s1, &f24, NULL, 1);
    mb_init_tensor(&b, "delta", 0, s1, &f1, NULL, 1);
    mb_node(&b, "Shape", "shape", 1, n0i, n0o);
    mb_node(&b, "Slice", "slice", 3, n1i, n1o);
    mb_node(&b, "Mul", "mul", 2, n2i, n2o);
    mb_node(&b, "Reshape", "reshape", 2, n3i, n3o);
    mb_node(&b, "Range", "range", 3, n4i, n4o);
    mb_node(&b, "Reshape", "reshape_ramp", 2, n5i, n5o);
    mb_node(&b, "Add", "add", 2, n6i, n6o);
    mb_output(&b, "y");
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g;
    const double *const *w;
    double               x[24], y[24];
    for (int i = 0; i < 24; i++)
        x[i] = 2 * kiln_rng_uniform(&r) - 1;
    const double *ins[] = {x};
    double       *outs[] = {y};
    if (mb_import(ctx, &b, &g, &w) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "import: %s", errmsg(ctx));
    } else {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, kiln_graph_output(g, 0), &ti);
        CHECK_EQ_INT(2, ti.ndim);
        CHECK_EQ_INT(6, ti.shape[0]);
        CHECK_EQ_INT(4, ti.shape[1]);
        CHECK_EQ_INT(2, kiln_graph_nargs(g)); /* x and the folded ramp */
        kiln_graph_tensor(g, kiln_graph_arg(g, 1), &ti);
        CHECK(ti.dtype == KILN_DTYPE_F32 && ti.ndim == 2 && ti.shape[0] == 6);
        if (eval(ctx, g, w, ins, outs))
            for (int i = 0; i < 24; i++)
                CHECK_NEAR(x[i] + i, y[i], 1e-12);
    }
    kiln_ctx_free(ctx);
}

/* LayerNormalization (with its Mean and InvStdDev outputs) and Split against naive loops. */
static void
test_layer_norm_split(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t         sx[3] = {2, 3, 4}, s4[1] = {4}, s2[1] = {2}, sp[2] = {1, 3};
    float           gam[4], bet[4];
    for (int i = 0; i < 4; i++) {
        gam[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
        bet[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
    }
    struct mb b;
    mb_init(&b, 17);
    char *n0i[] = {"x", "gamma", "beta"}, *n0o[] = {"y", "mean", "istd"}, *n1i[] = {"x", "sp"},
         *n1o[] = {"a", "c"};
    mb_input(&b, "x", 3, sx);
    mb_init_tensor(&b, "gamma", 1, s4, gam, NULL, 4);
    mb_init_tensor(&b, "beta", 1, s4, bet, NULL, 4);
    mb_init_tensor(&b, "sp", 1, s2, NULL, sp, 2);
    Onnx__NodeProto *ln = mb_node(&b, "LayerNormalization", "ln", 3, n0i, n0o);
    ln->n_output = 3;
    mb_attr_f(&b, ln, "epsilon", 0.01f);
    Onnx__NodeProto *sn = mb_node(&b, "Split", "split", 2, n1i, n1o);
    sn->n_output = 2;
    mb_attr_i(&b, sn, "axis", 2);
    mb_output(&b, "y");
    mb_output(&b, "mean");
    mb_output(&b, "istd");
    mb_output(&b, "a");
    mb_output(&b, "c");
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g;
    const double *const *w;
    double               x[24], y[24], mean[6], istd[6], a[6], c[18];
    for (int i = 0; i < 24; i++)
        x[i] = 4 * kiln_rng_uniform(&r) - 2;
    const double *ins[] = {x};
    double       *outs[] = {y, mean, istd, a, c};
    if (mb_import(ctx, &b, &g, &w) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "import: %s", errmsg(ctx));
    } else if (eval(ctx, g, w, ins, outs)) {
        for (int row = 0; row < 6; row++) {
            double m = 0, v = 0;
            for (int k = 0; k < 4; k++)
                m += x[row * 4 + k] / 4;
            for (int k = 0; k < 4; k++)
                v += (x[row * 4 + k] - m) * (x[row * 4 + k] - m) / 4;
            double is = 1 / sqrt(v + (double)0.01f);
            CHECK_NEAR(m, mean[row], 1e-9);
            CHECK_NEAR(is, istd[row], 1e-6);
            for (int k = 0; k < 4; k++) {
                CHECK_NEAR((x[row * 4 + k] - m) * is * gam[k] + bet[k], y[row * 4 + k], 1e-6);
                if (k == 0)
                    CHECK_NEAR(x[row * 4], a[row], 0);
                else
                    CHECK_NEAR(x[row * 4 + k], c[row * 3 + k - 1], 0);
            }
        }
    }
    kiln_ctx_free(ctx);
}

/* Symbolic dimensions: kiln_graph_import_onnx_opts with an input's whole shape or a named
 * dimension's extent, and the errors for a missing, unknown or contradicting one. */
static enum kiln_status
import_shaped(kiln_ctx *ctx, struct mb *b, const struct kiln_onnx_shape *sh, uint32_t n,
              int64_t *d0, int64_t *d1)
{
    size_t                   len;
    uint8_t                 *buf = mb_pack(b, &len);
    struct kiln_graph       *g = NULL;
    const double *const     *w;
    struct kiln_onnx_options o = {.shapes = sh, .nshapes = n};
    if (!buf)
        return KILN_ERR_NOMEM;
    enum kiln_status st = kiln_graph_import_onnx_opts(ctx, buf, len, "m.onnx", &o, &g, &w);
    free(buf);
    if (st == KILN_OK) {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, kiln_graph_arg(g, 0), &ti);
        *d0 = ti.shape[0];
        *d1 = ti.shape[1];
    }
    return st;
}

static void
test_input_shapes(void)
{
    struct mb b;
    int64_t   sx[2] = {1, 3}, two = 2, s43[2] = {4, 3}, s45[2] = {4, 5}, s12[2] = {1, 2}, d0, d1;
    char     *in[] = {"x"}, *out[] = {"y"};
    mb_init(&b, 13);
    mb_input(&b, "x", 2, sx);
    b.dim[0][0].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
    b.dim[0][0].dim_param = "batch";
    mb_node(&b, "Relu", "r", 1, in, out);
    mb_output(&b, "y");
    struct {
        struct kiln_onnx_shape sh;
        enum kiln_status       st;
        int64_t                d0;
        const char            *msg;
    } cases[] = {
        {{"batch", 1, &two}, KILN_OK, 2, NULL},
        {{"x", 2, s43}, KILN_OK, 4, NULL},
        {{NULL, 0, NULL}, KILN_ERR_UNSUPPORTED, 0, "graph input 'x' dimension 0 is 'batch'"},
        {{"x", 2, s45}, KILN_ERR_INVALID, 0, "the model fixes it to 3"},
        {{"x", 1, &two}, KILN_ERR_INVALID, 0, "has 1 dimensions; the input has 2"},
        {{"nope", 1, &two}, KILN_ERR_INVALID, 0, "no graph input and no symbolic dimension"},
        {{"batch", 2, s12}, KILN_ERR_INVALID, 0, "'batch' is a symbolic dimension"},
        {{"batch", 1, s12}, KILN_OK, 1, NULL},
    };
    for (size_t i = 0; i < KILN_COUNTOF(cases); i++) {
        kiln_ctx        *ctx = kiln_ctx_new(NULL);
        enum kiln_status st =
            import_shaped(ctx, &b, &cases[i].sh, cases[i].sh.name ? 1 : 0, &d0, &d1);
        CHECK_EQ_INT(cases[i].st, st);
        if (st == KILN_OK && cases[i].st == KILN_OK) {
            CHECK_EQ_INT(cases[i].d0, d0);
            CHECK_EQ_INT(3, d1);
        } else if (cases[i].msg) {
            CHECK_CONTAINS(errmsg(ctx), cases[i].msg);
        }
        kiln_ctx_free(ctx);
    }
}

/* Pow with a constant exponent 2 imports as square: the same values, no pow call and no
 * weight for the exponent. */
static void
test_pow_square(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t         sx[2] = {3, 4}, s1[1] = {1};
    float           two = 2;
    struct mb       b;
    mb_init(&b, 13);
    char *in[] = {"x", "two"}, *out[] = {"y"};
    mb_input(&b, "x", 2, sx);
    mb_init_tensor(&b, "two", 0, s1, &two, NULL, 1);
    mb_node(&b, "Pow", "pow", 2, in, out);
    mb_output(&b, "y");
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g;
    const double *const *w;
    double               x[12], y[12];
    for (int i = 0; i < 12; i++)
        x[i] = 6 * kiln_rng_uniform(&r) - 3;
    const double *ins[] = {x};
    double       *outs[] = {y};
    if (mb_import(ctx, &b, &g, &w) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "import: %s", errmsg(ctx));
    } else {
        struct kiln_call_info ci;
        CHECK_EQ_INT(1, kiln_graph_ncalls(g));
        kiln_graph_call(g, 0, &ci);
        CHECK(!strcmp(ci.kind, "square"));
        CHECK_EQ_INT(1, kiln_graph_nargs(g)); /* x only */
        if (eval(ctx, g, w, ins, outs))
            for (int i = 0; i < 12; i++)
                CHECK_NEAR(x[i] * x[i], y[i], 0);
    }
    kiln_ctx_free(ctx);
}

static void
test_names(void)
{
    struct mb b;
    int64_t   s[2] = {2, 2};
    mb_init(&b, 13);
    char *in[] = {"layer1.0/x:0", "1"}, *out[] = {"output"};
    mb_input(&b, "layer1.0/x:0", 2, s);
    mb_input(&b, "1", 2, s);
    mb_node(&b, "Add", "", 2, in, out);
    mb_output(&b, "output");
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g;
    if (mb_import(ctx, &b, &g, NULL) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "import: %s", errmsg(ctx));
    } else {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, kiln_graph_arg(g, 0), &ti);
        CHECK_EQ_STR("layer1_0_x_0", ti.name);
        kiln_graph_tensor(g, kiln_graph_arg(g, 1), &ti);
        CHECK_EQ_STR("t_1", ti.name);
        kiln_graph_tensor(g, kiln_graph_output(g, 0), &ti);
        CHECK_EQ_STR("t_output", ti.name);
        /* the graph prints and parses back (the text embedded in compiled modules) */
        const char        *text;
        struct kiln_graph *g2;
        CHECK(kiln_graph_print(ctx, g, 0, &text) == KILN_OK);
        CHECK(kiln_graph_parse(ctx, text, strlen(text), "printed", &g2) == KILN_OK);
        CHECK(kiln_graph_hash(g) == kiln_graph_hash(g2));
    }
    kiln_ctx_free(ctx);
}

/* ---- error messages ---- */

static void
expect_error(struct mb *b, enum kiln_status want, const char *const *parts, int nparts, int line)
{
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g = (struct kiln_graph *)1;
    const double *const *w = (const double *const *)1;
    enum kiln_status     st = mb_import(ctx, b, &g, &w);
    if (st != want)
        harness_fail(__FILE__, line, "status %s, want %s (%s)", kiln_status_name(st),
                     kiln_status_name(want), errmsg(ctx));
    if (g != NULL || w != NULL)
        harness_fail(__FILE__, line, "graph or weights set on error");
    for (int i = 0; i < nparts; i++)
        if (!strstr(errmsg(ctx), parts[i]))
            harness_fail(__FILE__, line, "message lacks '%s':\n  %s", parts[i], errmsg(ctx));
    kiln_ctx_free(ctx);
}

static void
test_errors(void)
{
    struct mb b;
    int64_t   s[4] = {1, 2, 3, 3}, s1[1] = {2};
    char     *in1[] = {"x"}, *in2[] = {"x", "shape"}, *out[] = {"y"};

    mb_init(&b, 13);
    mb_input(&b, "x", 4, s);
    mb_node(&b, "Frobnicate", "frob1", 1, in1, out);
    mb_output(&b, "y");
    const char *p1[] = {"m.onnx: error: ", "node 0 'frob1' (Frobnicate, opset 13)",
                        "op Frobnicate is not supported"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p1, 3, __LINE__);

    mb_init(&b, 11);
    mb_input(&b, "x", 4, s);
    Onnx__NodeProto *n = mb_node(&b, "Relu", "r", 1, in1, out);
    mb_attr_i(&b, n, "frobs", 3);
    mb_output(&b, "y");
    const char *p2[] = {"node 0 'r' (Relu, opset 11)", "attribute 'frobs' is not supported"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p2, 2, __LINE__);

    mb_init(&b, 13); /* the shape is a runtime input */
    mb_input(&b, "x", 4, s);
    mb_input(&b, "shape", 1, s1);
    mb_node(&b, "Reshape", "resh", 2, in2, out);
    mb_output(&b, "y");
    const char *p3[] = {"node 0 'resh' (Reshape, opset 13)", "dynamic shape", "'shape'"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p3, 3, __LINE__);
    { /* the same model with the shape input bound: a [3, 6] reshape; a wrong name is an error */
        double                   sv[2] = {3, -1};
        struct kiln_onnx_tensor  v = {.name = "shape",
                                      .dtype = KILN_DTYPE_I64,
                                      .ndim = 1,
                                      .shape = {2},
                                      .numel = 2,
                                      .values = sv};
        struct kiln_onnx_binding bind = {"shape", &v}, wrong = {"nosuch", &v};
        size_t                   len;
        uint8_t                 *buf = mb_pack(&b, &len);
        kiln_ctx                *ctx = kiln_ctx_new(NULL);
        struct kiln_graph       *g;
        const double *const     *w;
        if (kiln_graph_import_onnx_bound(ctx, buf, len, "m.onnx", &bind, 1, &g, &w) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "bound import: %s", errmsg(ctx));
        } else {
            struct kiln_tensor_info ti;
            CHECK_EQ_INT(1, kiln_graph_nargs(g)); /* x only */
            kiln_graph_tensor(g, kiln_graph_output(g, 0), &ti);
            CHECK_EQ_INT(2, ti.ndim);
            CHECK_EQ_INT(3, ti.shape[0]);
            CHECK_EQ_INT(6, ti.shape[1]);
        }
        kiln_ctx_free(ctx);
        ctx = kiln_ctx_new(NULL);
        CHECK(kiln_graph_import_onnx_bound(ctx, buf, len, "m.onnx", &wrong, 1, &g, &w)
              == KILN_ERR_INVALID);
        CHECK_CONTAINS(errmsg(ctx), "binding 'nosuch'");
        kiln_ctx_free(ctx);
        free(buf);
    }

    mb_init(&b, 13); /* an input nobody defines */
    mb_input(&b, "x", 4, s);
    char *in3[] = {"x", "nowhere"};
    mb_node(&b, "Add", "add", 2, in3, out);
    mb_output(&b, "y");
    const char *p4[] = {"node 0 'add' (Add, opset 13)", "input 1 'nowhere' is not defined"};
    expect_error(&b, KILN_ERR_INVALID, p4, 2, __LINE__);

    mb_init(&b, 13); /* a library error gets the node's context */
    int64_t sw[4] = {4, 5, 3, 3};
    float   wv[64] = {0};
    char   *in4[] = {"x", "w"};
    mb_input(&b, "x", 4, s);
    mb_init_tensor(&b, "w", 4, sw, wv, NULL, 0);
    b.init[0].n_float_data = 0;
    mb_node(&b, "Conv", "conv", 2, in4, out);
    mb_output(&b, "y");
    const char *p5[] = {"initializer 'w'", "dims give 180 elements but the data holds 0"};
    expect_error(&b, KILN_ERR_INVALID, p5, 2, __LINE__);
    (void)wv;

    mb_init(&b, 13);
    int64_t sw2[4] = {4, 5, 1, 1};
    float   w2[20] = {0};
    mb_input(&b, "x", 4, s);
    mb_init_tensor(&b, "w", 4, sw2, w2, NULL, 20);
    mb_node(&b, "Conv", "conv", 2, in4, out);
    mb_output(&b, "y");
    const char *p6[] = {"node 0 'conv' (Conv, opset 13)", "conv2d: input x has 2 channels"};
    expect_error(&b, KILN_ERR_INVALID, p6, 2, __LINE__);

    mb_init(&b, 13); /* symbolic batch dimension */
    mb_input(&b, "x", 4, s);
    b.dim[0][0].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
    b.dim[0][0].dim_param = "batch";
    mb_node(&b, "Relu", "r", 1, in1, out);
    mb_output(&b, "y");
    const char *p7[] = {"dynamic shape: graph input 'x' dimension 0 is 'batch'"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p7, 1, __LINE__);
}

/* The table: sorted by name, each op's rows cover opsets from its first without gaps or overlaps,
 * and the lookup picks the row of the model's opset. */
static void
test_table(void)
{
    size_t                n;
    const struct onnx_op *t = onnx_ops(&n);
    CHECK(n > 0);
    for (size_t i = 0; i < n; i++) {
        bool first = i == 0 || strcmp(t[i - 1].name, t[i].name) != 0;
        if (i > 0 && strcmp(t[i - 1].name, t[i].name) > 0)
            harness_fail(__FILE__, __LINE__, "onnx.def: %s after %s (not sorted)", t[i].name,
                         t[i - 1].name);
        if (first && t[i].opset_lo < 1) /* the opset ONNX introduced the op in */
            harness_fail(__FILE__, __LINE__, "onnx.def: %s starts at opset %d", t[i].name,
                         (int)t[i].opset_lo);
        if (!first && (t[i - 1].opset_hi == ONNX_ANY || t[i].opset_lo != t[i - 1].opset_hi + 1))
            harness_fail(__FILE__, __LINE__, "onnx.def: %s rows leave a gap or overlap at %d",
                         t[i].name, (int)t[i].opset_lo);
        if (t[i].opset_lo > ONNX_OPSET_MAX)
            harness_fail(__FILE__, __LINE__, "onnx.def: %s starts at opset %d, past %d", t[i].name,
                         (int)t[i].opset_lo, ONNX_OPSET_MAX);
        if (t[i].opset_lo > t[i].opset_hi || t[i].min_in > t[i].max_in || t[i].max_out < 1
            || !t[i].fn || !t[i].attrs)
            harness_fail(__FILE__, __LINE__, "onnx.def: bad row for %s", t[i].name);
    }
    bool                  known;
    const struct onnx_op *r = onnx_op_find("Reshape", 4, &known);
    CHECK(r && known && r->opset_lo == 1 && r->max_in == 1);
    r = onnx_op_find("Reshape", 5, &known);
    CHECK(r && r->opset_lo == 5 && r->min_in == 2);
    r = onnx_op_find("Range", 10, &known); /* before the op existed */
    CHECK(!r && known);
    r = onnx_op_find("Reshape", 0, &known); /* opset 0 reads as 1 */
    CHECK(r && r->opset_lo == 1);
    r = onnx_op_find("Abs", 40000, &known);
    CHECK(r && strcmp(r->kop, "abs") == 0);
    r = onnx_op_find("Unsqueeze", 13, &known);
    CHECK(r && r->opset_lo == 13);
    CHECK(onnx_op_find("Frobnicate", 13, &known) == NULL && !known);
    CHECK(onnx_op_find("", 13, &known) == NULL && !known);
    CHECK(onnx_op_find("abs", 13, &known) == NULL && !known); /* op types are case-sensitive */
}

/* What the dispatcher checks for every op, before and after the handler. */
static void
test_dispatch_errors(void)
{
    struct mb b;
    int64_t   s[2] = {2, 3};
    char     *in1[] = {"x"}, *in2[] = {"x", "x"}, *out[] = {"y"}, *out2[] = {"y", "z"};

    mb_init(&b, 6); /* legacy broadcasting attributes: read before opset 7, refused from it */
    mb_input(&b, "x", 2, s);
    Onnx__NodeProto *n = mb_node(&b, "Add", "add", 2, in2, out);
    mb_attr_i(&b, n, "broadcast", 1);
    mb_output(&b, "y");
    {
        size_t               len;
        uint8_t             *buf = mb_pack(&b, &len);
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_graph   *g;
        const double *const *w;
        CHECK(buf && kiln_graph_import_onnx(ctx, buf, len, "m.onnx", &g, &w) == KILN_OK);
        kiln_ctx_free(ctx);
        free(buf);
    }
    b.opset.version = 7;
    const char *p1[] = {"node 0 'add' (Add, opset 7)", "attribute 'broadcast' is not supported"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p1, 2, __LINE__);

    mb_init(&b, 13); /* a required input left out */
    mb_input(&b, "x", 2, s);
    mb_node(&b, "Add", "add", 1, in1, out);
    mb_output(&b, "y");
    const char *p2[] = {"node 0 'add' (Add, opset 13)", "input 1 is missing"};
    expect_error(&b, KILN_ERR_INVALID, p2, 2, __LINE__);

    mb_init(&b, 13); /* an output the handler does not define */
    mb_input(&b, "x", 2, s);
    n = mb_node(&b, "Relu", "r", 1, in1, out2);
    n->n_output = 2;
    mb_output(&b, "y");
    const char *p3[] = {"node 0 'r' (Relu, opset 13)", "output 1 ('z') is not supported"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p3, 2, __LINE__);

    mb_init(&b, 11); /* Elu has no gamma (Selu has) */
    mb_input(&b, "x", 2, s);
    n = mb_node(&b, "Elu", "e", 1, in1, out);
    mb_attr_f(&b, n, "gamma", 2);
    mb_output(&b, "y");
    const char *p4[] = {"node 0 'e' (Elu, opset 11)", "attribute 'gamma' is not supported"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p4, 2, __LINE__);
}

/* What ONNX requires of a model as a whole: an opset_import of the default domain that kiln
 * knows, each value defined once, attributes that agree with the weights. */
static void
test_strict(void)
{
    struct mb b;
    int64_t   s[4] = {1, 2, 3, 3}, sw[4] = {4, 2, 1, 1};
    float     wv[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char     *in1[] = {"x"}, *iny[] = {"y"}, *inw[] = {"x", "w"}, *out[] = {"y"}, *outx[] = {"x"},
         *outw[] = {"w"}, *out2[] = {"y", "y"};

    /* opsets: the newest kiln knows imports, a newer one, 0 and a second entry are refused */
    mb_init(&b, ONNX_OPSET_MAX);
    mb_input(&b, "x", 4, s);
    mb_node(&b, "Relu", "r", 1, in1, out);
    mb_output(&b, "y");
    {
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_graph   *g;
        const double *const *w;
        if (mb_import(ctx, &b, &g, &w) != KILN_OK)
            harness_fail(__FILE__, __LINE__, "opset %d: %s", ONNX_OPSET_MAX, errmsg(ctx));
        kiln_ctx_free(ctx);
    }
    b.opset.version = 1000000;
    const char *p1[] = {"m.onnx: error: ", "opset is 1000000", "kiln knows ONNX opsets up to"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p1, 3, __LINE__);
    b.opset.version = ONNX_OPSET_MAX + 1;
    expect_error(&b, KILN_ERR_UNSUPPORTED, p1 + 2, 1, __LINE__);
    b.opset.version = 0;
    const char *p2[] = {"m.onnx: error: ", "no valid version (0)"};
    expect_error(&b, KILN_ERR_INVALID, p2, 2, __LINE__);
    b.opset.version = 13;
    Onnx__OperatorSetIdProto o2 = ONNX__OPERATOR_SET_ID_PROTO__INIT, *two[2] = {&b.opset, &o2};
    o2.domain = "ai.onnx";
    o2.has_version = 1;
    o2.version = 11;
    b.model.opset_import = two;
    b.model.n_opset_import = 2;
    const char *p3[] = {"m.onnx: error: ", "names the default ONNX domain twice"};
    expect_error(&b, KILN_ERR_INVALID, p3, 2, __LINE__);
    b.model.n_opset_import = 0; /* none at all */
    const char *p4[] = {"m.onnx: error: ",
                        "no opset_import for the default ONNX domain; the file may be truncated"};
    expect_error(&b, KILN_ERR_INVALID, p4, 2, __LINE__);
    o2.domain = "com.example"; /* only another domain's: the node's domain is what is refused */
    b.model.opset_import = two + 1;
    b.model.n_opset_import = 1;
    expect_error(&b, KILN_ERR_INVALID, p4, 2, __LINE__);
    b.node[0].domain = "com.example";
    const char *p5[] = {"node 0 'r'", "domain 'com.example' is not supported"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p5, 2, __LINE__);

    /* a value defined twice: by two nodes, by a node and a graph input or an initializer, twice
     * in one node's outputs; two graph inputs or initializers of one name */
    mb_init(&b, 13);
    mb_input(&b, "x", 4, s);
    mb_node(&b, "Relu", "first", 1, in1, out);
    mb_node(&b, "Sigmoid", "second", 1, in1, out);
    mb_output(&b, "y");
    const char *p6[] = {"m.onnx: error: ", "node 1 'second' (Sigmoid, opset 13)",
                        "output 0 'y' is already defined by node 0 'first' (Relu)"};
    expect_error(&b, KILN_ERR_INVALID, p6, 3, __LINE__);
    mb_init(&b, 13);
    mb_input(&b, "x", 4, s);
    mb_node(&b, "Relu", "r", 1, in1, out);
    mb_node(&b, "Neg", "n", 1, iny, outx);
    mb_output(&b, "y");
    const char *p7[] = {"node 1 'n' (Neg, opset 13)", "output 0 'x' is already a graph input"};
    expect_error(&b, KILN_ERR_INVALID, p7, 2, __LINE__);
    mb_init(&b, 13);
    mb_input(&b, "x", 4, s);
    mb_init_tensor(&b, "w", 4, sw, wv, NULL, 8);
    mb_node(&b, "Conv", "conv", 2, inw, out);
    mb_node(&b, "Relu", "r", 1, iny, outw);
    mb_output(&b, "y");
    const char *p8[] = {"node 1 'r' (Relu, opset 13)", "output 0 'w' is already an initializer"};
    expect_error(&b, KILN_ERR_INVALID, p8, 2, __LINE__);
    mb_init(&b, 13);
    mb_input(&b, "x", 4, s);
    mb_node(&b, "Dropout", "d", 1, in1, out2)->n_output = 2;
    mb_output(&b, "y");
    const char *p9[] = {"node 0 'd' (Dropout, opset 13)", "outputs 0 and 1 are both 'y'"};
    expect_error(&b, KILN_ERR_INVALID, p9, 2, __LINE__);
    mb_init(&b, 13);
    mb_input(&b, "x", 4, s);
    mb_input(&b, "x", 4, s);
    mb_node(&b, "Relu", "r", 1, in1, out);
    mb_output(&b, "y");
    const char *p10[] = {"m.onnx: error: ", "graph input 'x' is listed twice"};
    expect_error(&b, KILN_ERR_INVALID, p10, 2, __LINE__);
    mb_init(&b, 13);
    mb_input(&b, "x", 4, s);
    mb_init_tensor(&b, "w", 4, sw, wv, NULL, 8);
    mb_init_tensor(&b, "w", 4, sw, wv, NULL, 8);
    mb_node(&b, "Conv", "conv", 2, inw, out);
    mb_output(&b, "y");
    const char *p11[] = {"m.onnx: error: ", "initializer 'w' is listed twice"};
    expect_error(&b, KILN_ERR_INVALID, p11, 2, __LINE__);

    /* kernel_shape must agree with the weight: [1, 1] imports, [3, 3] and [1, 2] do not */
    int64_t ks[2] = {1, 1};
    mb_init(&b, 13);
    mb_input(&b, "x", 4, s);
    mb_init_tensor(&b, "w", 4, sw, wv, NULL, 8);
    Onnx__NodeProto *n = mb_node(&b, "Conv", "conv", 2, inw, out);
    mb_attr_i(&b, n, "group", 1);
    Onnx__AttributeProto *k = &b.attr[b.nattr++];
    *k = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
    k->name = "kernel_shape";
    k->has_type = 1;
    k->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    k->n_ints = 2;
    k->ints = ks;
    n->attribute[n->n_attribute++] = k;
    mb_output(&b, "y");
    {
        kiln_ctx            *ctx = kiln_ctx_new(NULL);
        struct kiln_graph   *g;
        const double *const *w;
        if (mb_import(ctx, &b, &g, &w) != KILN_OK)
            harness_fail(__FILE__, __LINE__, "kernel_shape [1, 1]: %s", errmsg(ctx));
        kiln_ctx_free(ctx);
    }
    ks[0] = ks[1] = 3;
    const char *p12[] = {"m.onnx: error: ", "node 0 'conv' (Conv, opset 13)",
                         "attribute 'kernel_shape' is [3, 3] but the weight's spatial shape",
                         "is [1, 1]"};
    expect_error(&b, KILN_ERR_INVALID, p12, 4, __LINE__);
    ks[0] = 1;
    ks[1] = 2;
    b.node[0].op_type = "ConvTranspose";
    const char *p13[] = {"node 0 'conv' (ConvTranspose, opset 13)", "is [1, 2] but"};
    expect_error(&b, KILN_ERR_INVALID, p13, 2, __LINE__);
}

/* Prepends a length-delimited field holding buf[*at..end) to it, writing backwards. */
static void
wrap_field(uint8_t *buf, size_t *at, size_t end, uint32_t field)
{
    uint8_t  v[16];
    size_t   n = 0;
    uint64_t len = end - *at;
    v[n++] = (uint8_t)(field << 3 | 2); /* fields below 16: a one-byte key */
    do {
        v[n++] = (uint8_t)((len & 0x7f) | (len > 0x7f ? 0x80 : 0));
        len >>= 7;
    } while (len);
    while (n)
        buf[--*at] = v[--n]; /* the key, then the length's bytes, least significant first */
}

/* A ModelProto whose message fields nest `levels` deep along `path` (field numbers, the last
 * repeated), with `payload` innermost; a malloc'ed buffer of *len bytes. */
static uint8_t *
nested_model(size_t levels, const uint32_t *path, size_t npath, size_t nrep, const char *payload,
             size_t *len)
{
    size_t   cap = 16 * levels + strlen(payload) + 16, at = cap;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return NULL;
    at -= strlen(payload);
    memcpy(buf + at, payload, strlen(payload));
    for (size_t l = levels; l-- > 0;) {
        uint32_t f = l < npath - nrep ? path[l] : path[npath - nrep + (l - (npath - nrep)) % nrep];
        wrap_field(buf, &at, cap, f);
    }
    *len = cap - at;
    memmove(buf, buf + at, *len);
    return buf;
}

/* protobuf-c unpacks nested messages by recursion: a small file nesting 50,000 messages would
 * overflow the stack. The importer refuses more than 64 levels before protobuf-c reads it, by
 * the schema's message fields only: bytes holding such a nest are data. */
static void
test_nesting(void)
{
    /* ModelProto.graph, then GraphProto.node, NodeProto.attribute, AttributeProto.g, ... */
    static const uint32_t graphs[] = {7, 1, 5, 6};
    /* ModelProto.graph, GraphProto.input, ValueInfoProto.type, then TypeProto.sequence_type,
     * Sequence.elem_type, ... */
    static const uint32_t types[] = {7, 11, 2, 4, 1};
    struct {
        const uint32_t *path;
        size_t          npath, nrep, levels;
        bool            deep;
    } cases[] = {
        {graphs, 4, 3, 50000, true}, {types, 5, 2, 50000, true}, {graphs, 4, 3, 65, true},
        {graphs, 4, 3, 64, false},   {types, 5, 2, 64, false},
    };
    for (size_t c = 0; c < KILN_COUNTOF(cases); c++) {
        size_t   len;
        uint8_t *buf =
            nested_model(cases[c].levels, cases[c].path, cases[c].npath, cases[c].nrep, "", &len);
        CHECK(buf != NULL);
        if (!buf)
            continue;
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        enum kiln_status   st = kiln_graph_import_onnx(ctx, buf, len, "deep.onnx", &g, NULL);
        bool refused = st != KILN_OK && strstr(errmsg(ctx), "nested deeper than 64 messages");
        if (refused != cases[c].deep)
            harness_fail(__FILE__, __LINE__, "case %zu (%zu levels): %s", c, cases[c].levels,
                         st == KILN_OK ? "imported" : errmsg(ctx));
        if (cases[c].deep) {
            CHECK(st == KILN_ERR_UNSUPPORTED);
            CHECK_CONTAINS(errmsg(ctx), "deep.onnx: error: ");
        }
        kiln_ctx_free(ctx);
        free(buf);
    }
    /* the same nest as an initializer's raw_data (GraphProto.initializer, TensorProto.raw_data)
     * is not descended into: the model is refused for something else */
    size_t   nlen;
    uint8_t *nest = nested_model(50000, graphs + 1, 3, 3, "", &nlen);
    uint8_t *buf = nest ? malloc(nlen + 64) : NULL;
    if (buf) {
        size_t end = nlen + 64, at = end - nlen;
        memcpy(buf + at, nest, nlen);
        wrap_field(buf, &at, end, 9); /* TensorProto.raw_data */
        wrap_field(buf, &at, end, 5); /* GraphProto.initializer */
        wrap_field(buf, &at, end, 7); /* ModelProto.graph */
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        CHECK(kiln_graph_import_onnx(ctx, buf + at, end - at, "data.onnx", &g, NULL) != KILN_OK);
        CHECK(!strstr(errmsg(ctx), "nested deeper"));
        kiln_ctx_free(ctx);
    }
    free(buf);
    free(nest);
}

/* Every prefix of a packed model is an error (a cut between whole fields loses opset_import),
 * and random byte changes give an error or a graph, no crash. */
static void
test_corrupt(void)
{
    struct mb b;
    int64_t   s[4] = {1, 2, 3, 3}, sw[4] = {4, 2, 1, 1};
    float     wv[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char     *in[] = {"x", "w"}, *out[] = {"y"};
    mb_init(&b, 13);
    mb_input(&b, "x", 4, s);
    mb_init_tensor(&b, "w", 4, sw, wv, NULL, 8);
    Onnx__NodeProto *n = mb_node(&b, "Conv", "conv", 2, in, out);
    mb_attr_i(&b, n, "group", 1);
    mb_output(&b, "y");
    size_t   len;
    uint8_t *buf = mb_pack(&b, &len);
    CHECK(buf != NULL);
    if (!buf)
        return;
    /* opset_import (field 8) is written after the graph (7): a file cut between them is valid
     * protobuf, and must not read as opset 1 */
    b.model.n_opset_import = 0;
    size_t at_graph = onnx__model_proto__get_packed_size(&b.model);
    b.model.n_opset_import = 1;
    CHECK(at_graph < len);
    for (size_t cut = 0; cut < len; cut++) {
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        enum kiln_status   st = kiln_graph_import_onnx(ctx, buf, cut, "cut.onnx", &g, NULL);
        if (st != KILN_ERR_INVALID)
            harness_fail(__FILE__, __LINE__, "cut at %zu of %zu: %s", cut, len,
                         st == KILN_OK ? "imported" : errmsg(ctx));
        CHECK_CONTAINS(errmsg(ctx), "cut.onnx: error: ");
        if (cut == at_graph || cut == 0)
            CHECK_CONTAINS(errmsg(ctx), "no opset_import for the default ONNX domain; the file "
                                        "may be truncated");
        else if (cut > at_graph) /* inside the opset_import field */
            CHECK_CONTAINS(errmsg(ctx), "malformed or truncated");
        kiln_ctx_free(ctx);
    }
    struct kiln_rng r = kiln_rng_new(opt_seed());
    uint8_t        *copy = malloc(len);
    for (uint64_t it = 0; copy && it < opt_iters_or(300); it++) {
        memcpy(copy, buf, len);
        for (int k = 0; k < 1 + (int)kiln_rng_below(&r, 4); k++)
            copy[kiln_rng_below(&r, len)] = (uint8_t)kiln_rng_below(&r, 256);
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        enum kiln_status   st = kiln_graph_import_onnx(ctx, copy, len, "flip.onnx", &g, NULL);
        CHECK(st == KILN_OK || kiln_ctx_error(ctx) != NULL);
        kiln_ctx_free(ctx);
    }
    free(copy);
    /* not protobuf at all */
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g;
    const char        *text = "input x: f32[4]\ny = relu(x)\n";
    CHECK(kiln_graph_import_onnx(ctx, text, strlen(text), "text.onnx", &g, NULL)
          == KILN_ERR_INVALID);
    CHECK_CONTAINS(errmsg(ctx), "text.onnx: error: ");
    kiln_ctx_free(ctx);
    /* a TensorProto whose raw data is one byte short */
    Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT;
    int64_t           dims[1] = {2};
    uint8_t           raw[7] = {0};
    t.n_dims = 1;
    t.dims = dims;
    t.has_data_type = 1;
    t.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t.has_raw_data = 1;
    t.raw_data.len = 7;
    t.raw_data.data = raw;
    size_t   tl = onnx__tensor_proto__get_packed_size(&t);
    uint8_t *tb = malloc(tl);
    if (tb) {
        onnx__tensor_proto__pack(&t, tb);
        struct kiln_onnx_tensor dec;
        ctx = kiln_ctx_new(NULL);
        CHECK(kiln_onnx_tensor_decode(ctx, tb, tl, "t.pb", &dec) == KILN_ERR_INVALID);
        CHECK_CONTAINS(errmsg(ctx), "dims give 2 elements");
        kiln_ctx_free(ctx);
        free(tb);
    }
    free(buf);
}

/* ---- ONNX's backend tests through the reference interpreter ---- */

static bool
is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool
decode_file(kiln_ctx *ctx, const char *path, struct kiln_onnx_tensor *t)
{
    size_t len;
    char  *data = read_file(path, &len);
    if (!data)
        return false;
    bool ok = kiln_onnx_tensor_decode(ctx, data, len, path, t) == KILN_OK;
    free(data);
    return ok;
}

/* ONNX's older bfloat16 tests store their data as UINT16 bits (and expect truncation): skipped
 * like a refused import, as `kiln onnx-test` does. */
static bool
bf16_as_bits(const struct kiln_graph *g, uint32_t t, const struct kiln_onnx_tensor *v)
{
    struct kiln_tensor_info info;
    kiln_graph_tensor(g, t, &info);
    return v->dtype == KILN_DTYPE_U16 && info.dtype == KILN_DTYPE_BF16;
}

/* A data file kiln cannot read as unsupported (a type kiln lacks): the test is skipped like a
 * refused import. */
static bool
data_unsupported(kiln_ctx *ctx)
{
    return kiln_ctx_error(ctx) && kiln_ctx_error(ctx)->status == KILN_ERR_UNSUPPORTED;
}

/* 1 passed, 0 skipped (import refused as unsupported, or data of a type kiln lacks), 2
 * imported but too big to evaluate within the budget (1 MFLOP when KILN_ITERS is below 1000,
 * as under the sanitizers), -1 failed. */
static int
backend_test(const char *dir)
{
    char   path[2200];
    size_t len;
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    char *data = read_file(path, &len);
    if (!data)
        return 0;
    kiln_ctx            *ctx = kiln_ctx_new(NULL);
    struct kiln_graph   *g;
    const double *const *w;
    enum kiln_status     st = kiln_graph_import_onnx(ctx, data, len, path, &g, &w);
    free(data);
    int rc = 1;
    if (st == KILN_ERR_UNSUPPORTED) {
        kiln_ctx_free(ctx);
        return 0;
    }
    if (st != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s: %s", dir, errmsg(ctx));
        kiln_ctx_free(ctx);
        return -1;
    }
    /* the interpreter is slow (and slower under the sanitizers): big models are only imported
     * here; `kiln onnx-test` runs them compiled */
    double flops = 0;
    for (uint32_t i = 0; i < kiln_graph_ncalls(g); i++) {
        struct kiln_call_info ci;
        kiln_graph_call(g, i, &ci);
        flops += ci.flops;
    }
    if (flops > (opt_iters_or(1000) >= 1000 ? 2e8 : 1e6)) {
        kiln_ctx_free(ctx);
        return 2;
    }
    uint32_t       na = kiln_graph_nargs(g), no = kiln_graph_noutputs(g);
    double       **outs = calloc(no, sizeof *outs);
    const double **ins = calloc(na + 1, sizeof *ins);
    for (int set = 0; rc == 1 && outs && ins; set++) {
        char sdir[2100];
        snprintf(sdir, sizeof sdir, "%s/test_data_set_%d", dir, set);
        if (!is_dir(sdir))
            break;
        uint32_t k = 0;
        for (uint32_t i = 0; i < na; i++) {
            if (w[i])
                continue;
            struct kiln_onnx_tensor t;
            snprintf(path, sizeof path, "%s/input_%u.pb", sdir, k);
            bool ok = decode_file(ctx, path, &t);
            if (ok && bf16_as_bits(g, kiln_graph_arg(g, i), &t)) {
                rc = 0;
                break;
            }
            if (!ok || t.numel != kiln_graph_tensor_numel(g, kiln_graph_arg(g, i))) {
                rc = data_unsupported(ctx) ? 0 : -1;
                if (rc)
                    harness_fail(__FILE__, __LINE__, "%s: bad input", path);
                break;
            }
            ins[k++] = t.values;
        }
        for (uint32_t i = 0; rc == 1 && i < no; i++) {
            outs[i] =
                calloc((size_t)kiln_graph_tensor_numel(g, kiln_graph_output(g, i)), sizeof(double));
            if (!outs[i])
                rc = -1;
        }
        if (rc == 1 && !eval(ctx, g, w, ins, outs))
            rc = -1;
        for (uint32_t i = 0; rc == 1 && i < no; i++) {
            struct kiln_onnx_tensor want;
            snprintf(path, sizeof path, "%s/output_%u.pb", sdir, i);
            bool ok = decode_file(ctx, path, &want);
            if (ok && bf16_as_bits(g, kiln_graph_output(g, i), &want)) {
                rc = 0;
                break;
            }
            if (!ok || want.numel != kiln_graph_tensor_numel(g, kiln_graph_output(g, i))) {
                rc = data_unsupported(ctx) ? 0 : -1;
                if (rc)
                    harness_fail(__FILE__, __LINE__, "%s: bad output", path);
                break;
            }
            for (int64_t e = 0; e < want.numel; e++) {
                double got = outs[i][e], v = want.values[e];
                if (isnan(v) ? !isnan(got)
                             : !(got == v || fabs(got - v) <= 1e-7 + 1e-3 * fabs(v))) {
                    harness_fail(__FILE__, __LINE__,
                                 "%s: output %u element %lld: got %.9g, want %.9g", sdir, i,
                                 (long long)e, got, v);
                    rc = -1;
                    break;
                }
            }
        }
        for (uint32_t i = 0; i < no; i++) {
            free(outs[i]);
            outs[i] = NULL;
        }
    }
    free(outs);
    free(ins);
    kiln_ctx_free(ctx);
    return rc;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
backend_suite(const char *suite, int floor)
{
    char root[512];
    snprintf(root, sizeof root, "%s/%s", TESTDATA, suite);
    DIR *d = opendir(root);
    if (!d) {
        harness_skip("Debian's libonnx-testdata is not installed");
        return;
    }
    char  *names[2048];
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 2048;)
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int passed = 0, skipped = 0, failed = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        int rc = backend_test(dir);
        passed += rc == 1;
        big += rc == 2;
        skipped += rc == 0;
        failed += rc < 0;
        free(names[i]);
    }
    printf("  %s: %d imported and matched, %d imported (too big to evaluate here), %d refused as "
           "unsupported, %d failed\n",
           suite, passed, big, skipped, failed);
    CHECK_EQ_INT(0, failed);
    if (passed + big < floor)
        harness_fail(__FILE__, __LINE__, "%s: only %d tests imported; at least %d expected", suite,
                     passed, floor);
}

static void
test_backend_node(void)
{
    backend_suite("node", 615);
}

static void
test_backend_pytorch_converted(void)
{
    backend_suite("pytorch-converted", 69);
}

static void
test_backend_pytorch_operator(void)
{
    backend_suite("pytorch-operator", 35);
}

/* ---- indexing, comparison, logic, casts (onnx_index.c) ---- */

/* Whether g has a statement of library op `kind`. */
static bool
has_call(kiln_ctx *ctx, const struct kiln_graph *g, const char *kind)
{
    for (uint32_t c = 0; c < g->ncall; c++)
        if (!strcmp(kiln_sym_str(ctx, g->call[c].kind), kind))
            return true;
    return false;
}

/* Imports b and evaluates it on ins; false (failure reported) when either fails. */
static bool
import_eval(kiln_ctx *ctx, struct mb *b, const double *const *ins, double **outs,
            struct kiln_graph **g)
{
    const double *const *w;
    if (mb_import(ctx, b, g, &w) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "import: %s", errmsg(ctx));
        return false;
    }
    return eval(ctx, *g, w, ins, outs);
}

/* Gather along axis 1 of x[3, 5] with runtime int64 indices (negative ones count from the end),
 * a constant scalar index and a constant run (both slices, no data-dependent load), and
 * constant indices that are not a run (a gather of a weight). */
static void
test_onnx_gather(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    for (uint64_t it = 0; it < opt_iters_or(8); it++) {
        int64_t sx[2] = {3, 5}, si[2] = {2, 2}, s0[1] = {1}, s3[1] = {3}, s2[1] = {2};
        int64_t scalar = (int64_t)kiln_rng_below(&r, 10) - 5, run0 = (int64_t)kiln_rng_below(&r, 3);
        int64_t run[3] = {run0, run0 + 1, run0 + 2}, holes[2] = {4, 1};
        double  x[15], idx[4], y0[12], y1[3], y2[9], y3[6];
        for (int i = 0; i < 15; i++)
            x[i] = 2 * kiln_rng_uniform(&r) - 1;
        for (int i = 0; i < 4; i++)
            idx[i] = (double)kiln_rng_below(&r, 10) - 5; /* [-5, 4] */
        struct mb b;
        mb_init(&b, 13);
        char *i0[] = {"x", "i"}, *o0[] = {"y0"}, *i1[] = {"x", "k"}, *o1[] = {"y1"},
             *i2[] = {"x", "run"}, *o2[] = {"y2"}, *i3[] = {"x", "holes"}, *o3[] = {"y3"};
        mb_input(&b, "x", 2, sx);
        mb_input(&b, "i", 2, si);
        b.tt[b.nvi - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
        mb_init_tensor(&b, "k", 0, s0, NULL, &scalar, 1);
        mb_init_tensor(&b, "run", 1, s3, NULL, run, 3);
        mb_init_tensor(&b, "holes", 1, s2, NULL, holes, 2);
        Onnx__NodeProto *n[4] = {
            mb_node(&b, "Gather", "g0", 2, i0, o0), mb_node(&b, "Gather", "g1", 2, i1, o1),
            mb_node(&b, "Gather", "g2", 2, i2, o2), mb_node(&b, "Gather", "g3", 2, i3, o3)};
        for (int k = 0; k < 4; k++)
            mb_attr_i(&b, n[k], "axis", k == 1 ? -1 : 1);
        mb_output(&b, "y0");
        mb_output(&b, "y1");
        mb_output(&b, "y2");
        mb_output(&b, "y3");
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        const double      *ins[] = {x, idx};
        double            *outs[] = {y0, y1, y2, y3};
        if (import_eval(ctx, &b, ins, outs, &g)) {
            int64_t k = scalar < 0 ? scalar + 5 : scalar;
            for (int a = 0; a < 3; a++) {
                for (int j = 0; j < 4; j++) {
                    int64_t v = (int64_t)idx[j];
                    CHECK_NEAR(x[a * 5 + (v < 0 ? v + 5 : v)], y0[a * 4 + j], 0);
                }
                CHECK_NEAR(x[a * 5 + k], y1[a], 0);
                for (int j = 0; j < 3; j++)
                    CHECK_NEAR(x[a * 5 + run[j]], y2[a * 3 + j], 0);
                for (int j = 0; j < 2; j++)
                    CHECK_NEAR(x[a * 5 + holes[j]], y3[a * 2 + j], 0);
            }
            struct kiln_tensor_info ti;
            kiln_graph_tensor(g, kiln_graph_output(g, 1), &ti);
            CHECK_EQ_INT(1, ti.ndim); /* the scalar index removed the axis */
            CHECK_EQ_INT(3, ti.shape[0]);
            CHECK(has_call(ctx, g, "slice"));
            CHECK(has_call(ctx, g, "gather"));
            /* two gathers (runtime indices, holes); the scalar and the run are slices */
            uint32_t ngather = 0;
            for (uint32_t c = 0; c < g->ncall; c++)
                ngather += !strcmp(kiln_sym_str(ctx, g->call[c].kind), "gather");
            CHECK_EQ_INT(2, ngather);
        }
        kiln_ctx_free(ctx);
    }
    /* a constant index out of range is an error */
    struct mb b;
    int64_t   sx[2] = {3, 5}, s0[1] = {1}, bad = 5;
    char     *in[] = {"x", "k"}, *out[] = {"y"};
    mb_init(&b, 13);
    mb_input(&b, "x", 2, sx);
    mb_init_tensor(&b, "k", 0, s0, NULL, &bad, 1);
    mb_attr_i(&b, mb_node(&b, "Gather", "g", 2, in, out), "axis", 1);
    mb_output(&b, "y");
    const char *p[] = {"node 0 'g' (Gather, opset 13)", "index 5 is out of range for axis 1"};
    expect_error(&b, KILN_ERR_INVALID, p, 2, __LINE__);
}

/* c = Less(x, y); Where(c, x, y) (the minimum); Cast(x * 4 to INT64) back to FLOAT (truncation
 * toward zero); Not(Equal(c, Greater(y, x))) and Xor, And, Or of the masks; CastLike. */
static void
test_onnx_compare_logic_cast(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    for (uint64_t it = 0; it < opt_iters_or(8); it++) {
        int64_t sx[2] = {2, 3}, sy[1] = {3}, s1[1] = {1};
        float   four = 4;
        double  x[6], y[3], w[6], t[6], e[6], a[6], o[6], xo[6], cl[6];
        for (int i = 0; i < 6; i++)
            x[i] = (double)(float)(2 * kiln_rng_uniform(&r) - 1);
        for (int i = 0; i < 3; i++) /* sometimes equal to x, so ties happen */
            y[i] = kiln_rng_below(&r, 3) ? (double)(float)(2 * kiln_rng_uniform(&r) - 1) : x[i];
        struct mb b;
        mb_init(&b, 19);
        char *i_lt[] = {"x", "y"}, *o_lt[] = {"c"}, *i_w[] = {"c", "x", "y"}, *o_w[] = {"w"},
             *i_m[] = {"x", "four"}, *o_m[] = {"x4"}, *i_c1[] = {"x4"}, *o_c1[] = {"xi"},
             *i_c2[] = {"xi"}, *o_c2[] = {"t"}, *i_gt[] = {"y", "x"}, *o_gt[] = {"gt"},
             *i_eq[] = {"c", "gt"}, *o_eq[] = {"eq"}, *i_not[] = {"eq"}, *o_not[] = {"e"};
        char *i_and[] = {"c", "e"}, *o_and[] = {"a"}, *i_or[] = {"c", "gt"}, *o_or[] = {"o"},
             *i_xor[] = {"c", "gt"}, *o_xor[] = {"xo"}, *i_cl[] = {"c", "x"}, *o_cl[] = {"cl"};
        mb_input(&b, "x", 2, sx);
        mb_input(&b, "y", 1, sy);
        mb_init_tensor(&b, "four", 0, s1, &four, NULL, 1);
        mb_node(&b, "Less", "lt", 2, i_lt, o_lt);
        mb_node(&b, "Where", "where", 3, i_w, o_w);
        mb_node(&b, "Mul", "mul", 2, i_m, o_m);
        mb_attr_i(&b, mb_node(&b, "Cast", "toint", 1, i_c1, o_c1), "to",
                  ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
        mb_attr_i(&b, mb_node(&b, "Cast", "tofloat", 1, i_c2, o_c2), "to",
                  ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
        mb_node(&b, "Greater", "gt", 2, i_gt, o_gt);
        /* the model has 8 node slots: the logic ops go into a second model below */
        mb_output(&b, "w");
        mb_output(&b, "t");
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        const double      *ins[] = {x, y};
        double            *outs[] = {w, t};
        if (import_eval(ctx, &b, ins, outs, &g)) {
            for (int i = 0; i < 6; i++) {
                CHECK_NEAR(x[i] < y[i % 3] ? x[i] : y[i % 3], w[i], 0);
                CHECK_NEAR(trunc((double)((float)x[i] * 4.0f)), t[i], 0);
            }
            CHECK(has_call(ctx, g, "cast"));
            CHECK(has_call(ctx, g, "where"));
        }
        kiln_ctx_free(ctx);

        mb_init(&b, 15);
        mb_input(&b, "x", 2, sx);
        mb_input(&b, "y", 1, sy);
        mb_node(&b, "Less", "lt", 2, i_lt, o_lt);
        mb_node(&b, "Greater", "gt", 2, i_gt, o_gt);
        mb_node(&b, "Equal", "eq", 2, i_eq, o_eq);
        mb_node(&b, "Not", "not", 1, i_not, o_not);
        mb_node(&b, "And", "and", 2, i_and, o_and);
        mb_node(&b, "Or", "or", 2, i_or, o_or);
        mb_node(&b, "Xor", "xor", 2, i_xor, o_xor);
        mb_node(&b, "CastLike", "cl", 2, i_cl, o_cl);
        mb_output(&b, "a");
        mb_output(&b, "o");
        mb_output(&b, "xo");
        mb_output(&b, "cl");
        ctx = kiln_ctx_new(NULL);
        double *outs2[] = {a, o, xo, cl};
        if (import_eval(ctx, &b, ins, outs2, &g))
            for (int i = 0; i < 6; i++) {
                bool c = x[i]<y[i % 3], gt = y[i % 3]> x[i], ee = !(c == gt);
                CHECK_EQ_INT(c && ee, (int)a[i]);
                CHECK_EQ_INT(c || gt, (int)o[i]);
                CHECK_EQ_INT(c != gt, (int)xo[i]);
                CHECK_EQ_INT(c, (int)cl[i]);
                (void)e;
            }
        kiln_ctx_free(ctx);
    }
}

/* Expand, Tile and Trilu with constant shape, repeats and k; a runtime shape, a cast to a type
 * kiln lacks and a non-default saturate are unsupported, naming what. */
static void
test_onnx_expand_tile_trilu(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t         sx[2] = {3, 1}, s2[1] = {2}, s3[1] = {3}, s0[1] = {1};
    int64_t         shape[3] = {2, 1, 4}, reps[2] = {2, 3}, k = (int64_t)kiln_rng_below(&r, 5) - 2;
    double          x[3], ye[24], yt[18], yl[3];
    for (int i = 0; i < 3; i++)
        x[i] = 2 * kiln_rng_uniform(&r) - 1;
    struct mb b;
    mb_init(&b, 14);
    char *ie[] = {"x", "shape"}, *oe[] = {"ye"}, *it[] = {"x", "reps"}, *ot[] = {"yt"},
         *il[] = {"x", "k"}, *ol[] = {"yl"};
    mb_input(&b, "x", 2, sx);
    mb_init_tensor(&b, "shape", 1, s3, NULL, shape, 3);
    mb_init_tensor(&b, "reps", 1, s2, NULL, reps, 2);
    mb_init_tensor(&b, "k", 0, s0, NULL, &k, 1);
    mb_node(&b, "Expand", "expand", 2, ie, oe);
    mb_node(&b, "Tile", "tile", 2, it, ot);
    mb_attr_i(&b, mb_node(&b, "Trilu", "trilu", 2, il, ol), "upper", 0);
    mb_output(&b, "ye");
    mb_output(&b, "yt");
    mb_output(&b, "yl");
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g;
    const double      *ins[] = {x};
    double            *outs[] = {ye, yt, yl};
    if (import_eval(ctx, &b, ins, outs, &g)) {
        for (int i = 0; i < 24; i++) /* [2, 3, 4]: x[i1, 0] */
            CHECK_NEAR(x[(i / 4) % 3], ye[i], 0);
        for (int i = 0; i < 18; i++) /* [6, 3]: x[i0 % 3, 0] */
            CHECK_NEAR(x[(i / 3) % 3], yt[i], 0);
        for (int i = 0; i < 3; i++) /* lower: keeps column 0 of row i when 0 - i <= k */
            CHECK_NEAR(-i <= k ? x[i] : 0.0, yl[i], 0);
    }
    kiln_ctx_free(ctx);

    char *in1[] = {"x"}, *out[] = {"y"};
    mb_init(&b, 13); /* Expand's shape is a runtime input */
    mb_input(&b, "x", 2, sx);
    mb_input(&b, "shape", 1, s3);
    b.tt[b.nvi - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    mb_node(&b, "Expand", "ex", 2, ie, out);
    mb_output(&b, "y");
    const char *p1[] = {"node 0 'ex' (Expand, opset 13)", "dynamic shape", "'shape'"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p1, 3, __LINE__);

    mb_init(&b, 13);
    mb_input(&b, "x", 2, sx);
    mb_attr_i(&b, mb_node(&b, "Cast", "c", 1, in1, out), "to",
              ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64);
    mb_output(&b, "y");
    const char *p2[] = {"node 0 'c' (Cast, opset 13)", "cast to COMPLEX64 is not supported"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p2, 2, __LINE__);

    mb_init(&b, 19);
    mb_input(&b, "x", 2, sx);
    Onnx__NodeProto *n = mb_node(&b, "Cast", "c", 1, in1, out);
    mb_attr_i(&b, n, "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
    mb_attr_i(&b, n, "saturate", 0);
    mb_output(&b, "y");
    const char *p3[] = {"node 0 'c' (Cast, opset 19)", "saturate 0 is not supported"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p3, 2, __LINE__);
}

/* ---- losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss ---- */

static void
mb_attr_s(struct mb *b, Onnx__NodeProto *n, char *name, char *str)
{
    Onnx__AttributeProto *a = &b->attr[b->nattr++];
    *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
    a->name = name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    a->has_s = 1;
    a->s.len = strlen(str);
    a->s.data = (uint8_t *)str;
    n->attribute[n->n_attribute++] = a;
}

/* The naive loss of sample (n, d) of lp[2, 3, 4] at target v: -lp[n, v, d] * w[v] (w NULL: 1),
 * 0 when v is the ignore_index ii (has_ii); a target outside [0, 3) without ignore_index reads
 * the element the gathers clamp it to (negative ones counting from the end). Adds the weight
 * applied to *wsum. */
static double
naive_nll(const double *lp, const double *w, int64_t v, int n, int d, bool has_ii, int64_t ii,
          double *wsum)
{
    if (has_ii && v == ii)
        return 0;
    v = v < 0 ? v + 3 : v;
    v = v < 0 ? 0 : v > 2 ? 2 : v;
    double wt = w ? w[v] : 1;
    *wsum += wt;
    return -lp[(n * 3 + v) * 4 + d] * wt;
}

/* x[2, 3, 4] (N, C, d1), targets t[2, 4] with an ignore_index of -1 or 1 on about a quarter of
 * them, weights w[3]: NegativeLogLikelihoodLoss none / mean (weighted, ignoring) and sum (no
 * weight, no ignore_index), SoftmaxCrossEntropyLoss mean with weights and its log_prob output,
 * and mean without weights (the count of targets not ignored divides), against a naive
 * computation; a bad reduction, a target of the wrong shape and a float target are errors. */
static void
test_onnx_losses(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t         sx[3] = {2, 3, 4}, st[2] = {2, 4}, sw[1] = {3};
    for (uint64_t it = 0; it < opt_iters_or(8); it++) {
        int64_t ii = kiln_rng_below(&r, 2) ? -1 : 1;
        double  x[24], t[8], n0[8], n1, n2, s0, lp[24], s1;
        float   wf[3];
        double  w[3];
        for (int i = 0; i < 24; i++)
            x[i] = 4 * kiln_rng_uniform(&r) - 2;
        for (int i = 0; i < 8; i++)
            t[i] = kiln_rng_below(&r, 4) ? (double)kiln_rng_below(&r, 3) : (double)ii;
        for (int i = 0; i < 3; i++)
            w[i] = wf[i] = (float)(0.25 + kiln_rng_uniform(&r));
        struct mb b;
        mb_init(&b, 13);
        char *ixtw[] = {"x", "t", "w"}, *o0[] = {"n0"}, *o1[] = {"n1"}, *o2[] = {"n2"},
             *o3[] = {"s0", "lp"}, *o4[] = {"s1"};
        mb_input(&b, "x", 3, sx);
        mb_input(&b, "t", 2, st);
        b.tt[b.nvi - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
        mb_init_tensor(&b, "w", 1, sw, wf, NULL, 3);
        Onnx__NodeProto *nn0 = mb_node(&b, "NegativeLogLikelihoodLoss", "nll0", 3, ixtw, o0);
        mb_attr_s(&b, nn0, "reduction", "none");
        mb_attr_i(&b, nn0, "ignore_index", ii);
        Onnx__NodeProto *nn1 = mb_node(&b, "NegativeLogLikelihoodLoss", "nll1", 3, ixtw, o1);
        mb_attr_i(&b, nn1, "ignore_index", ii);
        mb_attr_s(&b, mb_node(&b, "NegativeLogLikelihoodLoss", "nll2", 2, ixtw, o2), "reduction",
                  "sum");
        Onnx__NodeProto *ns0 = mb_node(&b, "SoftmaxCrossEntropyLoss", "sce0", 3, ixtw, o3);
        ns0->n_output = 2;
        mb_attr_i(&b, ns0, "ignore_index", ii);
        mb_attr_i(&b, mb_node(&b, "SoftmaxCrossEntropyLoss", "sce1", 2, ixtw, o4), "ignore_index",
                  ii);
        mb_output(&b, "n0");
        mb_output(&b, "n1");
        mb_output(&b, "n2");
        mb_output(&b, "s0");
        mb_output(&b, "lp");
        mb_output(&b, "s1");
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        const double      *ins[] = {x, t};
        double            *outs[] = {n0, &n1, &n2, &s0, lp, &s1};
        if (import_eval(ctx, &b, ins, outs, &g)) {
            double lsm[24]; /* log_softmax over the class axis */
            for (int n = 0; n < 2; n++)
                for (int d = 0; d < 4; d++) {
                    double mx = -INFINITY, sum = 0;
                    for (int c = 0; c < 3; c++)
                        mx = fmax(mx, x[(n * 3 + c) * 4 + d]);
                    for (int c = 0; c < 3; c++)
                        sum += exp(x[(n * 3 + c) * 4 + d] - mx);
                    for (int c = 0; c < 3; c++)
                        lsm[(n * 3 + c) * 4 + d] = x[(n * 3 + c) * 4 + d] - mx - log(sum);
                }
            double sum1 = 0, w1 = 0, sum2 = 0, w2 = 0, sum3 = 0, w3 = 0, sum4 = 0, w4 = 0, w0 = 0;
            for (int n = 0; n < 2; n++)
                for (int d = 0; d < 4; d++) {
                    int64_t v = (int64_t)t[n * 4 + d];
                    CHECK_NEAR(naive_nll(x, w, v, n, d, true, ii, &w0), n0[n * 4 + d], 1e-12);
                    sum1 += naive_nll(x, w, v, n, d, true, ii, &w1);
                    sum2 += naive_nll(x, NULL, v, n, d, false, 0, &w2);
                    sum3 += naive_nll(lsm, w, v, n, d, true, ii, &w3);
                    sum4 += naive_nll(lsm, NULL, v, n, d, true, ii, &w4);
                }
            /* every target ignored (1 draw in ~65,000): the mean is 0 / 0, NaN in ONNX's
             * definition and in kiln's (seed 1795779214 drew it) */
            const double sums[3] = {sum1, sum3, sum4}, ws[3] = {w1, w3, w4}, got[3] = {n1, s0, s1};
            for (int k = 0; k < 3; k++) {
                if (ws[k] == 0)
                    CHECK(isnan(got[k]));
                else
                    CHECK_NEAR(sums[k] / ws[k], got[k], 1e-9 * (1 + fabs(got[k])));
            }
            CHECK_NEAR(sum2, n2, 1e-9 * (1 + fabs(n2)));
            for (int i = 0; i < 24; i++)
                CHECK_NEAR(lsm[i], lp[i], 1e-9);
            struct kiln_tensor_info ti;
            kiln_graph_tensor(g, kiln_graph_output(g, 1), &ti);
            CHECK_EQ_INT(0, ti.ndim); /* a reduced loss is a scalar */
            CHECK(has_call(ctx, g, "gather_elements"));
            CHECK(has_call(ctx, g, "log_softmax"));
        }
        kiln_ctx_free(ctx);
    }

    char     *ixt[] = {"x", "t"}, *out[] = {"y"};
    struct mb b;
    mb_init(&b, 13);
    mb_input(&b, "x", 3, sx);
    mb_input(&b, "t", 2, st);
    b.tt[b.nvi - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    mb_attr_s(&b, mb_node(&b, "NegativeLogLikelihoodLoss", "l", 2, ixt, out), "reduction", "max");
    mb_output(&b, "y");
    const char *p1[] = {"node 0 'l' (NegativeLogLikelihoodLoss, opset 13)",
                        "reduction 'max' is not one of none, sum, mean"};
    expect_error(&b, KILN_ERR_INVALID, p1, 2, __LINE__);

    int64_t bad[2] = {2, 3};
    mb_init(&b, 13);
    mb_input(&b, "x", 3, sx);
    mb_input(&b, "t", 2, bad);
    b.tt[b.nvi - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    mb_node(&b, "SoftmaxCrossEntropyLoss", "l", 2, ixt, out);
    mb_output(&b, "y");
    const char *p2[] = {"node 0 'l' (SoftmaxCrossEntropyLoss, opset 13)",
                        "input 1 ('t') must have input 0's shape without dimension 1"};
    expect_error(&b, KILN_ERR_INVALID, p2, 2, __LINE__);

    mb_init(&b, 13);
    mb_input(&b, "x", 3, sx);
    mb_input(&b, "t", 2, st);
    mb_node(&b, "NegativeLogLikelihoodLoss", "l", 2, ixt, out);
    mb_output(&b, "y");
    const char *p3[] = {"input 1 ('t') is f32; the targets must be int32 or int64"};
    expect_error(&b, KILN_ERR_INVALID, p3, 1, __LINE__);
}

/* OneHot (runtime indices, some negative or out of range, constant depth and values, axis 1),
 * EyeLike (k 1, a constant), DepthToSpace (DCR and CRD) and SpaceToDepth on x[1, 8, 2, 3]
 * against naive loops. */
static void
test_onnx_onehot_blocks(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t si[2] = {2, 3}, s0[1] = {1}, s2[1] = {2}, sx[4] = {1, 8, 2, 3}, sy[4] = {1, 2, 4, 6};
    int64_t depth = 4;
    float   vals[2] = {-1, 5};
    double  ind[6], oh[24], ey[6], dcr[48], crd[48], x[48], y[48], std[48];
    for (int i = 0; i < 6; i++)
        ind[i] = (double)kiln_rng_below(&r, 10) - 5; /* [-5, 4]: -5 and 4 are off rows */
    for (int i = 0; i < 48; i++)
        x[i] = 2 * kiln_rng_uniform(&r) - 1;
    for (int i = 0; i < 48; i++)
        y[i] = 2 * kiln_rng_uniform(&r) - 1;
    struct mb b;
    mb_init(&b, 13);
    char *i_oh[] = {"i", "depth", "vals"}, *o_oh[] = {"oh"}, *i_ey[] = {"i"}, *o_ey[] = {"ey"},
         *i_x[] = {"x"}, *o_dcr[] = {"dcr"}, *o_crd[] = {"crd"}, *i_y[] = {"y"}, *o_std[] = {"std"};
    mb_input(&b, "i", 2, si);
    b.tt[b.nvi - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    mb_input(&b, "x", 4, sx);
    mb_input(&b, "y", 4, sy);
    mb_init_tensor(&b, "depth", 0, s0, NULL, &depth, 1);
    mb_init_tensor(&b, "vals", 1, s2, vals, NULL, 2);
    mb_attr_i(&b, mb_node(&b, "OneHot", "oh", 3, i_oh, o_oh), "axis", 1);
    Onnx__NodeProto *ne = mb_node(&b, "EyeLike", "ey", 1, i_ey, o_ey);
    mb_attr_i(&b, ne, "k", 1);
    mb_attr_i(&b, ne, "dtype", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    mb_attr_i(&b, mb_node(&b, "DepthToSpace", "dcr", 1, i_x, o_dcr), "blocksize", 2);
    Onnx__NodeProto *nc = mb_node(&b, "DepthToSpace", "crd", 1, i_x, o_crd);
    mb_attr_i(&b, nc, "blocksize", 2);
    mb_attr_s(&b, nc, "mode", "CRD");
    mb_attr_i(&b, mb_node(&b, "SpaceToDepth", "std", 1, i_y, o_std), "blocksize", 2);
    mb_output(&b, "oh");
    mb_output(&b, "ey");
    mb_output(&b, "dcr");
    mb_output(&b, "crd");
    mb_output(&b, "std");
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g;
    const double      *ins[] = {ind, x, y};
    double            *outs[] = {oh, ey, dcr, crd, std};
    if (import_eval(ctx, &b, ins, outs, &g)) {
        for (int a = 0; a < 2; a++) /* oh[a, k, c] */
            for (int k = 0; k < 4; k++)
                for (int c = 0; c < 3; c++) {
                    int64_t v = (int64_t)ind[a * 3 + c];
                    v = v < 0 ? v + 4 : v;
                    CHECK_NEAR(v == k ? 5.0 : -1.0, oh[(a * 4 + k) * 3 + c], 0);
                }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                CHECK_NEAR(j - i == 1 ? 1.0 : 0.0, ey[i * 3 + j], 0);
        /* DepthToSpace: out[0, c, h*2+bh, w*2+bw] = x[0, (bh*2+bw)*2+c] (DCR), x[c*4+bh*2+bw]
         * (CRD); SpaceToDepth the inverse of DCR */
        for (int c = 0; c < 2; c++)
            for (int h = 0; h < 4; h++)
                for (int w = 0; w < 6; w++) {
                    int bh = h % 2, bw = w % 2, o = (c * 4 + h) * 6 + w;
                    int xd = (((bh * 2 + bw) * 2 + c) * 2 + h / 2) * 3 + w / 2;
                    int xc = ((c * 4 + bh * 2 + bw) * 2 + h / 2) * 3 + w / 2;
                    CHECK_NEAR(x[xd], dcr[o], 0);
                    CHECK_NEAR(x[xc], crd[o], 0);
                    CHECK_NEAR(y[o], std[xd], 0);
                }
    }
    kiln_ctx_free(ctx);

    char *in1[] = {"x"}, *out[] = {"z"};
    mb_init(&b, 13);
    mb_input(&b, "x", 4, sy);
    mb_attr_i(&b, mb_node(&b, "DepthToSpace", "d", 1, in1, out), "blocksize", 2);
    mb_output(&b, "z");
    const char *p1[] = {"node 0 'd' (DepthToSpace, opset 13)",
                        "the channels (2) are not a multiple of blocksize² (4)"};
    expect_error(&b, KILN_ERR_INVALID, p1, 2, __LINE__);
}

/* GatherND with batch_dims 1 and negative indices; InstanceNormalization, MeanVarianceNormalization
 * (axes 2, 3) and LRN (size 3) on x[2, 3, 2, 2], against naive loops. */
static void
test_onnx_gather_nd_norms(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    for (uint64_t it = 0; it < opt_iters_or(4); it++) {
        int64_t sd[3] = {2, 3, 4}, si[3] = {2, 2, 2}, sx[4] = {2, 3, 2, 2}, sc[1] = {3};
        int64_t axes[2] = {2, 3};
        double  d[24], ind[8], gnd[4], x[24], inn[24], mvn[24], lrn[24];
        float   scale[3], bias[3];
        for (int i = 0; i < 24; i++) {
            d[i] = 2 * kiln_rng_uniform(&r) - 1;
            x[i] = 2 * kiln_rng_uniform(&r) - 1;
        }
        for (int i = 0; i < 8; i++) /* [batch, row, (j, k)]: j in [-3, 2], k in [-4, 3] */
            ind[i] = i % 2 ? (double)kiln_rng_below(&r, 8) - 4 : (double)kiln_rng_below(&r, 6) - 3;
        for (int i = 0; i < 3; i++) {
            scale[i] = (float)(2 * kiln_rng_uniform(&r));
            bias[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
        }
        struct mb b;
        mb_init(&b, 13);
        char *i_g[] = {"d", "i"}, *o_g[] = {"gnd"}, *i_in[] = {"x", "scale", "bias"},
             *o_in[] = {"inn"}, *i_x[] = {"x"}, *o_mvn[] = {"mvn"}, *o_lrn[] = {"lrn"};
        mb_input(&b, "d", 3, sd);
        mb_input(&b, "i", 3, si);
        b.tt[b.nvi - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
        mb_input(&b, "x", 4, sx);
        mb_init_tensor(&b, "scale", 1, sc, scale, NULL, 3);
        mb_init_tensor(&b, "bias", 1, sc, bias, NULL, 3);
        mb_attr_i(&b, mb_node(&b, "GatherND", "gnd", 2, i_g, o_g), "batch_dims", 1);
        mb_attr_f(&b, mb_node(&b, "InstanceNormalization", "inn", 3, i_in, o_in), "epsilon", 0.01f);
        Onnx__NodeProto      *nm = mb_node(&b, "MeanVarianceNormalization", "mvn", 1, i_x, o_mvn);
        Onnx__AttributeProto *a = &b.attr[b.nattr++];
        *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
        a->name = "axes";
        a->has_type = 1;
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        a->n_ints = 2;
        a->ints = axes;
        nm->attribute[nm->n_attribute++] = a;
        Onnx__NodeProto *nl = mb_node(&b, "LRN", "lrn", 1, i_x, o_lrn);
        mb_attr_i(&b, nl, "size", 3);
        mb_attr_f(&b, nl, "alpha", 0.5f);
        mb_output(&b, "gnd");
        mb_output(&b, "inn");
        mb_output(&b, "mvn");
        mb_output(&b, "lrn");
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        const double      *ins[] = {d, ind, x};
        double            *outs[] = {gnd, inn, mvn, lrn};
        if (import_eval(ctx, &b, ins, outs, &g)) {
            for (int n = 0; n < 2; n++)
                for (int k = 0; k < 2; k++) {
                    int64_t j0 = (int64_t)ind[(n * 2 + k) * 2],
                            j1 = (int64_t)ind[(n * 2 + k) * 2 + 1];
                    j0 = j0 < 0 ? j0 + 3 : j0;
                    j1 = j1 < 0 ? j1 + 4 : j1;
                    CHECK_NEAR(d[(n * 3 + j0) * 4 + j1], gnd[n * 2 + k], 0);
                }
            for (int n = 0; n < 2; n++)
                for (int c = 0; c < 3; c++) {
                    const double *p = x + (n * 3 + c) * 4;
                    double        mean = (p[0] + p[1] + p[2] + p[3]) / 4, var = 0;
                    for (int i = 0; i < 4; i++)
                        var += (p[i] - mean) * (p[i] - mean) / 4;
                    for (int i = 0; i < 4; i++) {
                        int o = (n * 3 + c) * 4 + i;
                        CHECK_NEAR((p[i] - mean) / sqrt(var + (double)0.01f) * scale[c] + bias[c],
                                   inn[o], 1e-9);
                        CHECK_NEAR((p[i] - mean) / (sqrt(var) + 1e-9), mvn[o], 1e-6);
                        double sum = 0;
                        for (int cc = c - 1; cc <= c + 1; cc++)
                            if (cc >= 0 && cc < 3)
                                sum += x[(n * 3 + cc) * 4 + i] * x[(n * 3 + cc) * 4 + i];
                        CHECK_NEAR(p[i] / pow(1 + (double)0.5f / 3 * sum, 0.75), lrn[o], 1e-9);
                    }
                }
        }
        kiln_ctx_free(ctx);
    }
}

/* ScatterElements on x[3, 4] along axis 1 with runtime int64 indices (duplicates, negative and
 * out-of-range ones): reduction none (the last update wins) and add, against a naive loop in
 * ONNX's order; ScatterND of whole rows with a duplicate; an unknown reduction is an error. */
static void
test_onnx_scatter(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    for (uint64_t it = 0; it < opt_iters_or(8); it++) {
        int64_t sx[2] = {3, 4}, si[2] = {2, 5};
        double  x[12], ind[10], u[10], y0[12], y1[12], w0[12], w1[12];
        for (int i = 0; i < 12; i++)
            x[i] = w0[i] = w1[i] = 2 * kiln_rng_uniform(&r) - 1;
        for (int i = 0; i < 10; i++) {
            ind[i] = (double)kiln_rng_below(&r, 12) - 6; /* [-6, 5]: some out of [-4, 4) */
            u[i] = 2 * kiln_rng_uniform(&r) - 1;
        }
        for (int a = 0; a < 2; a++)
            for (int j = 0; j < 5; j++) {
                int64_t v = (int64_t)ind[a * 5 + j];
                if (v < -4 || v >= 4)
                    continue;
                v = v < 0 ? v + 4 : v;
                w0[a * 4 + v] = u[a * 5 + j];
                w1[a * 4 + v] += u[a * 5 + j];
            }
        struct mb b;
        mb_init(&b, 18);
        char *in[] = {"x", "i", "u"}, *o0[] = {"y0"}, *o1[] = {"y1"};
        mb_input(&b, "x", 2, sx);
        mb_input(&b, "i", 2, si);
        b.tt[b.nvi - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
        mb_input(&b, "u", 2, si);
        mb_attr_i(&b, mb_node(&b, "ScatterElements", "s0", 3, in, o0), "axis", -1);
        Onnx__NodeProto *n1 = mb_node(&b, "ScatterElements", "s1", 3, in, o1);
        mb_attr_i(&b, n1, "axis", 1);
        mb_attr_s(&b, n1, "reduction", "add");
        /* ScatterND: rows -2 and 1 (both row 1: the second wins) and 0 of x */
        int64_t s31[2] = {3, 1}, s34[2] = {3, 4}, rows[3] = {-2, 1, 0};
        float   u2[12];
        for (int i = 0; i < 12; i++)
            u2[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
        char *in2[] = {"x", "rows", "u2"}, *o2[] = {"y2"};
        mb_init_tensor(&b, "rows", 2, s31, NULL, rows, 3);
        mb_init_tensor(&b, "u2", 2, s34, u2, NULL, 12);
        mb_node(&b, "ScatterND", "s2", 3, in2, o2);
        mb_output(&b, "y0");
        mb_output(&b, "y1");
        mb_output(&b, "y2");
        kiln_ctx          *ctx = kiln_ctx_new(NULL);
        struct kiln_graph *g;
        const double      *ins[] = {x, ind, u};
        double             y2[12];
        double            *outs[] = {y0, y1, y2};
        if (import_eval(ctx, &b, ins, outs, &g)) {
            for (int i = 0; i < 12; i++) {
                CHECK_NEAR(w0[i], y0[i], 0);
                CHECK_NEAR(w1[i], y1[i], 1e-12);
                CHECK_NEAR(i < 4   ? (double)u2[8 + i]
                           : i < 8 ? (double)u2[4 + i - 4]
                                   : x[i],
                           y2[i], 0);
            }
            CHECK(has_call(ctx, g, "scatter_elements"));
            CHECK(has_call(ctx, g, "scatter_nd"));
        }
        kiln_ctx_free(ctx);
    }
    struct mb b;
    int64_t   sx[2] = {3, 4};
    char     *in[] = {"x", "i", "x"}, *out[] = {"y"};
    mb_init(&b, 16);
    mb_input(&b, "x", 2, sx);
    mb_input(&b, "i", 2, sx);
    b.tt[b.nvi - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    mb_attr_s(&b, mb_node(&b, "ScatterElements", "s", 3, in, out), "reduction", "prod");
    mb_output(&b, "y");
    const char *p[] = {"node 0 's' (ScatterElements, opset 16)",
                       "reduction 'prod' is not one of none, add, mul, max, min"};
    expect_error(&b, KILN_ERR_INVALID, p, 2, __LINE__);
}

/* Linear align_corners interpolation of a[0..n) at output o of m: a naive 1-D oracle. */
static double
lerp_ac(const double *a, int64_t stride, int64_t n, int64_t o, int64_t m)
{
    double  x = m == 1 ? 0 : (double)o * (double)(n - 1) / (double)(m - 1);
    int64_t i0 = (int64_t)floor(x), i1 = i0 + 1 < n ? i0 + 1 : n - 1;
    return (1 - (x - (double)i0)) * a[i0 * stride] + (x - (double)i0) * a[i1 * stride];
}

/* Resize 13 (constant float scales, bilinear align_corners) and 11 (sizes, nearest asymmetric
 * floor), Upsample 9 (nearest, integer scales) and Resize 18's keep_aspect_ratio_policy with
 * axes, on random x[1, 1, 3, 4] against naive loops, and an antialiasing downscale; a runtime
 * scale, both scales and sizes and a fractional legacy nearest scale are refused, naming what. */
static void
test_onnx_resize(void)
{
    struct kiln_rng r = kiln_rng_new(opt_seed());
    int64_t         sx[4] = {1, 1, 3, 4}, s4[1] = {4}, s2[1] = {2};
    double          x[12], yl[36], yn[48], yu[72], t[24];
    for (int i = 0; i < 12; i++)
        x[i] = (float)(2 * kiln_rng_uniform(&r) - 1);
    float     scl[4] = {1, 1, 2, 1.5f}, ups[4] = {1, 1, 2, 3};
    int64_t   sizes[4] = {1, 1, 6, 8}, ks[2] = {8, 8}, axes[2] = {2, 3};
    struct mb b;
    mb_init(&b, 13);
    char *il[] = {"x", "", "scl"}, *ol[] = {"yl"}, *in_[] = {"x", "", "", "sizes"}, *on[] = {"yn"},
         *iu[] = {"x", "ups"}, *ou[] = {"yu"};
    mb_input(&b, "x", 4, sx);
    mb_init_tensor(&b, "scl", 1, s4, scl, NULL, 4);
    mb_init_tensor(&b, "sizes", 1, s4, NULL, sizes, 4);
    Onnx__NodeProto *n = mb_node(&b, "Resize", "rl", 3, il, ol);
    mb_attr_s(&b, n, "mode", "linear");
    mb_attr_s(&b, n, "coordinate_transformation_mode", "align_corners");
    n = mb_node(&b, "Resize", "rn", 4, in_, on);
    mb_attr_s(&b, n, "coordinate_transformation_mode", "asymmetric");
    mb_attr_s(&b, n, "nearest_mode", "floor");
    mb_output(&b, "yl");
    mb_output(&b, "yn");
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g;
    const double      *ins[] = {x};
    double            *outs[] = {yl, yn};
    if (import_eval(ctx, &b, ins, outs, &g)) {
        for (int i = 0; i < 3; i++) /* along w first: t[3, 6] */
            for (int j = 0; j < 6; j++)
                t[i * 6 + j] = lerp_ac(x + 4 * i, 1, 4, j, 6);
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++)
                CHECK_NEAR(lerp_ac(t + j, 6, 3, i, 6), yl[i * 6 + j], 1e-6);
        for (int i = 0; i < 6; i++) /* out = 2 * in: x[i / 2, j / 2] */
            for (int j = 0; j < 8; j++)
                CHECK_NEAR(x[(i / 2) * 4 + j / 2], yn[i * 8 + j], 0);
    }
    kiln_ctx_free(ctx);

    mb_init(&b, 9);
    mb_input(&b, "x", 4, sx);
    mb_init_tensor(&b, "ups", 1, s4, ups, NULL, 4);
    mb_node(&b, "Upsample", "up", 2, iu, ou);
    mb_output(&b, "yu");
    ctx = kiln_ctx_new(NULL);
    double *uo[] = {yu};
    if (import_eval(ctx, &b, ins, uo, &g))
        for (int i = 0; i < 6; i++) /* [6, 12]: x[i / 2, j / 3] */
            for (int j = 0; j < 12; j++)
                CHECK_NEAR(x[(i / 2) * 4 + j / 3], yu[i * 12 + j], 0);
    kiln_ctx_free(ctx);

    /* keep_aspect_ratio_policy not_larger over axes [2, 3]: scale min(8/3, 8/4) = 2 */
    mb_init(&b, 18);
    char *ik[] = {"x", "", "", "ks"};
    mb_input(&b, "x", 4, sx);
    mb_init_tensor(&b, "ks", 1, s2, NULL, ks, 2);
    n = mb_node(&b, "Resize", "rk", 4, ik, on);
    mb_attr_s(&b, n, "keep_aspect_ratio_policy", "not_larger");
    mb_attr_s(&b, n, "coordinate_transformation_mode", "asymmetric");
    mb_attr_ints(&b, n, "axes", axes, 2);
    mb_output(&b, "yn");
    ctx = kiln_ctx_new(NULL);
    double *ko[] = {yn};
    if (import_eval(ctx, &b, ins, ko, &g)) {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, kiln_graph_output(g, 0), &ti);
        CHECK(ti.ndim == 4 && ti.shape[2] == 6 && ti.shape[3] == 8);
        for (int i = 0; i < 48; i++) /* round_prefer_floor of i / 2 (halves down) */
            CHECK_NEAR(x[((i / 8) / 2) * 4 + (i % 8) / 2], yn[i], 0);
    }
    kiln_ctx_free(ctx);

    mb_init(&b, 13); /* scales a runtime input */
    mb_input(&b, "x", 4, sx);
    mb_input(&b, "scl", 1, s4);
    mb_node(&b, "Resize", "r", 3, il, ol);
    mb_output(&b, "yl");
    const char *p1[] = {"node 0 'r' (Resize, opset 13)", "dynamic shape", "'scl'"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p1, 3, __LINE__);

    mb_init(&b, 13);
    char *ib[] = {"x", "", "scl", "sizes"};
    mb_input(&b, "x", 4, sx);
    mb_init_tensor(&b, "scl", 1, s4, scl, NULL, 4);
    mb_init_tensor(&b, "sizes", 1, s4, NULL, sizes, 4);
    mb_node(&b, "Resize", "r", 4, ib, ol);
    mb_output(&b, "yl");
    const char *p2[] = {"(Resize, opset 13)", "exactly one of scales and sizes", "both"};
    expect_error(&b, KILN_ERR_INVALID, p2, 3, __LINE__);

    /* antialias on a downscale: x[.., 3, 4] at 0.5 is [.., 1, 2], each a weighted mean of
     * the taps around it, so within the input's range */
    float down[4] = {1, 1, 0.5f, 0.5f};
    mb_init(&b, 18);
    mb_input(&b, "x", 4, sx);
    mb_init_tensor(&b, "scl", 1, s4, down, NULL, 4);
    n = mb_node(&b, "Resize", "r", 3, il, ol);
    mb_attr_s(&b, n, "mode", "linear");
    mb_attr_i(&b, n, "antialias", 1);
    mb_output(&b, "yl");
    ctx = kiln_ctx_new(NULL);
    if (import_eval(ctx, &b, ins, outs, &g)) {
        struct kiln_tensor_info ti;
        kiln_graph_tensor(g, kiln_graph_output(g, 0), &ti);
        CHECK(ti.ndim == 4 && ti.shape[2] == 1 && ti.shape[3] == 2);
        double lo = x[0], hi = x[0];
        for (int i = 1; i < 12; i++) {
            lo = fmin(lo, x[i]);
            hi = fmax(hi, x[i]);
        }
        for (int i = 0; i < 2; i++)
            CHECK(yl[i] >= lo - 1e-6 && yl[i] <= hi + 1e-6);
    }
    kiln_ctx_free(ctx);

    float frac[4] = {1, 1, 1.5f, 2};
    mb_init(&b, 9);
    mb_input(&b, "x", 4, sx);
    mb_init_tensor(&b, "ups", 1, s4, frac, NULL, 4);
    mb_node(&b, "Upsample", "u", 2, iu, ou);
    mb_output(&b, "yu");
    const char *p4[] = {"(Upsample, opset 9)", "fractional scale 1.5", "integer scales only"};
    expect_error(&b, KILN_ERR_UNSUPPORTED, p4, 3, __LINE__);
}

static const struct test tests[] = {
    {"gemm_random", test_gemm_random},
    {"folding_clip_legacy", test_folding_clip_legacy},
    {"fold_shapes", test_fold_shapes},
    {"layer_norm_split", test_layer_norm_split},
    {"input_shapes", test_input_shapes},
    {"pow_square", test_pow_square},
    {"onnx_resize", test_onnx_resize},
    {"onnx_gather", test_onnx_gather},
    {"onnx_compare_logic_cast", test_onnx_compare_logic_cast},
    {"onnx_expand_tile_trilu", test_onnx_expand_tile_trilu},
    {"names", test_names},
    {"errors", test_errors},
    {"table", test_table},
    {"dispatch_errors", test_dispatch_errors},
    {"strict", test_strict},
    {"nesting", test_nesting},
    {"corrupt", test_corrupt},
    {"backend_node", test_backend_node},
    {"backend_pytorch_converted", test_backend_pytorch_converted},
    {"backend_pytorch_operator", test_backend_pytorch_operator},
    {"reductions", test_reductions},
    {"argmax_cumsum", test_argmax_cumsum},
    {"reduction_errors", test_reduction_errors},
    {"elementwise", test_elementwise},
    {"elementwise_errors", test_elementwise_errors},
    {"onnx_losses", test_onnx_losses},
    {"onnx_onehot_blocks", test_onnx_onehot_blocks},
    {"onnx_gather_nd_norms", test_onnx_gather_nd_norms},
    {"onnx_scatter", test_onnx_scatter},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
