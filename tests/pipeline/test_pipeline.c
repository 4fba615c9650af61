/* tests/pipeline/test_pipeline.c -- the graph pipeline (kiln_graph_optimize, passes/pipeline.c).
 *
 * - resnet18: torchvision's ResNet-18 (batch norms kept, as `kiln.nets.export(keep_bn=True)`
 *   writes it; random weights; 1x3x224x224), built here as an ONNX model with the generated
 *   protobuf-c code, is compiled through the public C API alone (kiln_graph_import_onnx,
 *   kiln_graph_optimize, kiln_graph_schedule, kiln_graph_compile) and by `kiln compile` from the
 * same file: the two shared objects must be the same bytes. Every pass changes the network (20
 * batch norms and the classifier's bias add folded, channels-last statements, 10 Winograd
 * convolutions). Skipped when the kiln command is not built.
 * - options: passes switched off leave the graph as it was (all off: g itself), the dump hook
 *   sees each pass that ran, in order, and the names of kiln_graph_pass_name. */
#include "../harness.h"
#include "onnx.pb-c.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef KILN_CLI_PATH
#define KILN_CLI_PATH "build/kiln"
#endif

/* ---- building an ONNX model ---- */

enum { MAX_NODES = 128, MAX_INITS = 160, MAX_ATTRS = 4 };

struct mb {
    Onnx__ModelProto                  model;
    Onnx__GraphProto                  graph;
    Onnx__OperatorSetIdProto          opset, *opsets[1];
    Onnx__NodeProto                   node[MAX_NODES], *nodes[MAX_NODES];
    Onnx__AttributeProto              attr[MAX_NODES][MAX_ATTRS], *attrs[MAX_NODES][MAX_ATTRS];
    char                             *io[MAX_NODES][6]; /* up to 5 inputs, the output last */
    Onnx__TensorProto                 init[MAX_INITS], *inits[MAX_INITS];
    Onnx__ValueInfoProto              vi[2], *ins[1], *outs[1];
    Onnx__TypeProto                   tp[2];
    Onnx__TypeProto__Tensor           tt[2];
    Onnx__TensorShapeProto            sp[2];
    Onnx__TensorShapeProto__Dimension dim[2][4], *dims[2][4];
    int64_t                           ints[MAX_NODES][MAX_ATTRS][4];
    int64_t                           idims[MAX_INITS][4];
    char                              names[MAX_NODES + MAX_INITS][32];
    uint32_t                          nnames;
    uint64_t                          rng;
};

/* base followed by suffix, kept in b. */
static char *
mb_name(struct mb *b, const char *base, const char *suffix)
{
    char *n = b->names[b->nnames++];
    snprintf(n, sizeof b->names[0], "%s%s", base, suffix);
    return n;
}

static float
mb_rand(struct mb *b, float lo, float hi)
{
    b->rng = b->rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((b->rng >> 40) & 0xffffff) / (float)0x1000000;
}

static void
mb_value_info(struct mb *b, int k, char *name, int ndim, const int64_t *shape)
{
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
}

static void
mb_init(struct mb *b)
{
    memset(b, 0, sizeof *b);
    b->rng = 1;
    b->model = (Onnx__ModelProto)ONNX__MODEL_PROTO__INIT;
    b->graph = (Onnx__GraphProto)ONNX__GRAPH_PROTO__INIT;
    b->opset = (Onnx__OperatorSetIdProto)ONNX__OPERATOR_SET_ID_PROTO__INIT;
    b->opset.has_version = 1;
    b->opset.version = 13;
    b->opsets[0] = &b->opset;
    b->model.has_ir_version = 1;
    b->model.ir_version = 7;
    b->model.n_opset_import = 1;
    b->model.opset_import = b->opsets;
    b->model.graph = &b->graph;
    b->graph.node = b->nodes;
    b->graph.initializer = b->inits;
    b->graph.input = b->ins;
    b->graph.output = b->outs;
}

/* A float initializer NAME of the given shape, uniform in [lo, hi). */
static char *
mb_weight(struct mb *b, char *name, int ndim, const int64_t *shape, float lo, float hi)
{
    size_t             k = b->graph.n_initializer++, n = 1;
    Onnx__TensorProto *t = &b->init[k];
    *t = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
    for (int d = 0; d < ndim; d++) {
        b->idims[k][d] = shape[d];
        n *= (size_t)shape[d];
    }
    float *v = malloc(sizeof(float) * n);
    for (size_t i = 0; v && i < n; i++)
        v[i] = mb_rand(b, lo, hi);
    t->name = name;
    t->n_dims = (size_t)ndim;
    t->dims = b->idims[k];
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->n_float_data = v ? n : 0;
    t->float_data = v;
    b->inits[k] = t;
    return name;
}

static Onnx__NodeProto *
mb_node(struct mb *b, char *op, char *out, int nin, char *const *in)
{
    size_t           k = b->graph.n_node++;
    Onnx__NodeProto *n = &b->node[k];
    *n = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
    memcpy(b->io[k], in, sizeof(char *) * (size_t)nin);
    b->io[k][5] = out;
    n->op_type = op;
    n->name = out;
    n->n_input = (size_t)nin;
    n->input = b->io[k];
    n->n_output = 1;
    n->output = &b->io[k][5];
    n->attribute = b->attrs[k];
    b->nodes[k] = n;
    return n;
}

static Onnx__AttributeProto *
mb_attr(struct mb *b, Onnx__NodeProto *n, char *name)
{
    size_t                k = (size_t)(n - b->node), j = n->n_attribute++;
    Onnx__AttributeProto *a = &b->attr[k][j];
    *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
    a->name = name;
    a->has_type = 1;
    b->attrs[k][j] = a;
    return a;
}

static void
mb_ints(struct mb *b, Onnx__NodeProto *n, char *name, int count, int64_t v0, int64_t v1)
{
    size_t                k = (size_t)(n - b->node), j = n->n_attribute;
    Onnx__AttributeProto *a = mb_attr(b, n, name);
    int64_t              *v = b->ints[k][j];
    for (int i = 0; i < count; i++)
        v[i] = i % 2 ? v1 : v0;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = (size_t)count;
    a->ints = v;
}

static void
mb_int(struct mb *b, Onnx__NodeProto *n, char *name, int64_t i)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name);
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = i;
}

/* conv (no bias) + BatchNormalization, then Relu when relu; returns the output's name. */
static char *
conv_bn(struct mb *b, const char *name, char *x, int64_t cin, int64_t cout, int64_t k,
        int64_t stride, bool relu)
{
    int64_t          wshape[4] = {cout, cin, k, k}, c[1] = {cout};
    char            *w = mb_weight(b, mb_name(b, name, ".weight"), 4, wshape, -0.1f, 0.1f);
    char            *y = mb_name(b, name, "");
    Onnx__NodeProto *n = mb_node(b, "Conv", y, 2, (char *[]){x, w});
    mb_ints(b, n, "kernel_shape", 2, k, k);
    mb_ints(b, n, "strides", 2, stride, stride);
    mb_ints(b, n, "pads", 4, k / 2, k / 2);
    char *g = mb_weight(b, mb_name(b, name, ".bn.gamma"), 1, c, 0.5f, 1.5f);
    char *be = mb_weight(b, mb_name(b, name, ".bn.beta"), 1, c, -0.5f, 0.5f);
    char *m = mb_weight(b, mb_name(b, name, ".bn.mean"), 1, c, -0.5f, 0.5f);
    char *v = mb_weight(b, mb_name(b, name, ".bn.var"), 1, c, 0.5f, 1.5f);
    char *bn = mb_name(b, name, "_bn");
    mb_node(b, "BatchNormalization", bn, 5, (char *[]){y, g, be, m, v});
    if (!relu)
        return bn;
    char *r = mb_name(b, name, "_relu");
    mb_node(b, "Relu", r, 1, (char *[]){bn});
    return r;
}

/* torchvision's BasicBlock. */
static char *
basic_block(struct mb *b, const char *name, char *x, int64_t cin, int64_t cout, int64_t stride)
{
    char  n1[24], n2[24], nd[24];
    char *skip = x;
    snprintf(n1, sizeof n1, "%s_conv1", name);
    snprintf(n2, sizeof n2, "%s_conv2", name);
    snprintf(nd, sizeof nd, "%s_down", name);
    char *y = conv_bn(b, n1, x, cin, cout, 3, stride, true);
    y = conv_bn(b, n2, y, cout, cout, 3, 1, false);
    if (stride != 1 || cin != cout)
        skip = conv_bn(b, nd, x, cin, cout, 1, stride, false);
    char *a = mb_name(b, name, "_add"), *r = mb_name(b, name, "_out");
    mb_node(b, "Add", a, 2, (char *[]){y, skip});
    mb_node(b, "Relu", r, 1, (char *[]){a});
    return r;
}

/* ResNet-18 on 1x3xSxS, packed (malloc'ed). */
static uint8_t *
resnet18(int64_t size, size_t *len)
{
    struct mb *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    mb_init(b);
    int64_t xs[4] = {1, 3, size, size}, ys[2] = {1, 1000};
    mb_value_info(b, 0, "x", 4, xs);
    mb_value_info(b, 1, "y", 2, ys);
    b->ins[0] = &b->vi[0];
    b->outs[0] = &b->vi[1];
    b->graph.n_input = b->graph.n_output = 1;
    b->graph.name = "resnet18";
    char            *y = conv_bn(b, "conv1", "x", 3, 64, 7, 2, true);
    Onnx__NodeProto *n = mb_node(b, "MaxPool", "pool", 1, (char *[]){y});
    mb_ints(b, n, "kernel_shape", 2, 3, 3);
    mb_ints(b, n, "strides", 2, 2, 2);
    mb_ints(b, n, "pads", 4, 1, 1);
    y = "pool";
    static const int64_t width[4] = {64, 128, 256, 512};
    int64_t              cin = 64;
    for (int s = 0; s < 4; s++)
        for (int k = 0; k < 2; k++) {
            char name[16];
            snprintf(name, sizeof name, "l%d_%d", s + 1, k);
            y = basic_block(b, name, y, cin, width[s], s > 0 && k == 0 ? 2 : 1);
            cin = width[s];
        }
    mb_node(b, "GlobalAveragePool", "gap", 1, (char *[]){y});
    n = mb_node(b, "Flatten", "flat", 1, (char *[]){"gap"});
    mb_int(b, n, "axis", 1);
    int64_t fw[2] = {1000, 512}, fb[1] = {1000};
    char   *w = mb_weight(b, "fc.weight", 2, fw, -0.05f, 0.05f);
    char   *bias = mb_weight(b, "fc.bias", 1, fb, -0.1f, 0.1f);
    n = mb_node(b, "Gemm", "y", 3, (char *[]){"flat", w, bias});
    mb_int(b, n, "transB", 1);
    *len = onnx__model_proto__get_packed_size(&b->model);
    uint8_t *buf = malloc(*len);
    if (buf)
        onnx__model_proto__pack(&b->model, buf);
    for (size_t i = 0; i < b->graph.n_initializer; i++)
        free(b->init[i].float_data);
    free(b);
    return buf;
}

/* ---- tests ---- */

static bool
write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static const char *
errmsg(kiln_ctx *ctx)
{
    static char buf[1024];
    kiln_error_format(kiln_ctx_error(ctx), buf, sizeof buf);
    return buf;
}

static void
test_resnet18(void)
{
    if (access(KILN_CLI_PATH, X_OK) != 0) {
        harness_skip("the kiln command (" KILN_CLI_PATH ") is not built");
        return;
    }
    const char *tmp = getenv("TMPDIR");
    char        dir[512], model[600], api[600], cli[600], cmd[2400];
    snprintf(dir, sizeof dir, "%s/kiln-pipeline-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        harness_fail(__FILE__, __LINE__, "cannot create a directory in %s", dir);
        return;
    }
    snprintf(model, sizeof model, "%s/resnet18.onnx", dir);
    snprintf(api, sizeof api, "%s/api.so", dir);
    snprintf(cli, sizeof cli, "%s/cli.so", dir);
    size_t   len = 0;
    uint8_t *bytes = resnet18(224, &len);
    CHECK(bytes && write_bytes(model, bytes, len));

    /* the C API alone: import, the graph pipeline, the schedule kiln compile makes (no
     * records; serial for untuned tasks on both sides: test_predict covers prediction, and
     * predicting 20 tasks twice under the sanitizers took minutes), compile */
    kiln_ctx                   *ctx = kiln_ctx_new(NULL);
    struct kiln_graph          *g = NULL, *o = NULL;
    const double *const        *w = NULL;
    const double *const        *ow = NULL;
    struct kiln_optimize_report rep;
    struct kiln_compile_options copt = {0};
    if (tmp && *tmp)
        CHECK(kiln_ctx_set_tmp_dir(ctx, tmp) == KILN_OK);
    struct kiln_schedule_params sp = {.untuned = KILN_UNTUNED_SERIAL};
    const char                 *js = NULL;
    enum kiln_status            st = kiln_graph_import_onnx(ctx, bytes, len, model, &g, &w);
    if (st == KILN_OK)
        st = kiln_graph_optimize(ctx, g, w, NULL, &o, &ow, &rep);
    if (st == KILN_OK)
        st = kiln_graph_schedule(ctx, o, &sp, &js, NULL);
    if (st == KILN_OK) {
        copt.schedule_json = js;
        copt.schedule_len = strlen(js);
        st = kiln_graph_compile_weights(ctx, o, &copt, ow, api, NULL); /* embedded, as the CLI */
    }
    if (st != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "C API: %s", errmsg(ctx));
    } else {
        for (int p = 0; p < KILN_GRAPH_PASS_COUNT; p++)
            CHECK_EQ_INT(1, rep.ran[p]);
        CHECK_EQ_INT(20, rep.simplify.batch_norms_folded);
        CHECK_EQ_INT(1, rep.simplify.bias_adds_folded);
        CHECK(rep.channels_last > 0);
        CHECK_EQ_INT(2, rep.transposes_added);
        CHECK_EQ_INT(10, rep.winograd);
    }
    kiln_ctx_free(ctx);
    free(bytes);

    /* the command, from the same file (no tuning records, no records cache) */
    snprintf(cmd, sizeof cmd, "'%s' compile '%s' -o '%s' --no-db --untuned serial 2>'%s/err'",
             KILN_CLI_PATH, model, cli, dir);
    if (system(cmd) != 0) {
        char path[600];
        snprintf(path, sizeof path, "%s/err", dir);
        char *err = read_file(path, NULL);
        harness_fail(__FILE__, __LINE__, "kiln compile failed: %s", err ? err : "");
        free(err);
    } else {
        size_t na = 0, nc = 0;
        char  *a = read_file(api, &na), *c = read_file(cli, &nc);
        CHECK(a && c);
        if (a && c && (na != nc || memcmp(a, c, na)))
            harness_fail(__FILE__, __LINE__,
                         "the C API's module (%zu bytes) differs from kiln compile's (%zu bytes)",
                         na, nc);
        free(a);
        free(c);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

struct seen {
    int                  n;
    enum kiln_graph_pass pass[8];
};

static void
note_pass(void *user, enum kiln_graph_pass pass, const struct kiln_graph *g)
{
    struct seen *s = user;
    if (s->n < 8 && g)
        s->pass[s->n++] = pass;
}

static void
test_options(void)
{
    CHECK_EQ_STR("simplify", kiln_graph_pass_name(KILN_GRAPH_PASS_SIMPLIFY));
    CHECK_EQ_STR("channels-last", kiln_graph_pass_name(KILN_GRAPH_PASS_CHANNELS_LAST));
    CHECK_EQ_STR("winograd", kiln_graph_pass_name(KILN_GRAPH_PASS_WINOGRAD));
    CHECK(kiln_graph_pass_name(KILN_GRAPH_PASS_COUNT) == NULL);

    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = PARSE(ctx, "input x: f32[1, 4, 16, 16]\n"
                                      "weight w: f32[4, 4, 3, 3]\n"
                                      "y = conv2d(x, w, padding=1)\n"
                                      "r = relu(y)\n"
                                      "z = max_pool2d(r, kernel=2, stride=2)\n"
                                      "output z\n");
    if (!g) {
        kiln_ctx_free(ctx);
        return;
    }
    /* every pass off: g itself, no hook call */
    struct seen                  s = {0};
    struct kiln_optimize_options off = {(1u << KILN_GRAPH_PASS_COUNT) - 1, note_pass, &s};
    struct kiln_graph           *o = NULL;
    struct kiln_optimize_report  rep;
    CHECK(kiln_graph_optimize(ctx, g, NULL, &off, &o, NULL, &rep) == KILN_OK);
    CHECK(o == g);
    CHECK_EQ_INT(0, s.n);
    CHECK_EQ_INT(0, rep.ran[KILN_GRAPH_PASS_SIMPLIFY]);
    /* all on: the hook sees the passes in order; the weights have no values, so no Winograd */
    struct kiln_optimize_options all = {0, note_pass, &s};
    CHECK(kiln_graph_optimize(ctx, g, NULL, &all, &o, NULL, &rep) == KILN_OK);
    CHECK_EQ_INT(3, s.n);
    for (int i = 0; i < s.n && i < 3; i++)
        CHECK_EQ_INT(i, s.pass[i]);
    CHECK_EQ_INT(3, rep.channels_last); /* conv2d, relu, max_pool2d */
    CHECK_EQ_INT(2, rep.transposes_added);
    CHECK_EQ_INT(0, rep.winograd);
    CHECK(kiln_graph_hash(o) != kiln_graph_hash(g));
    /* channels-last off: the same graph as simplify alone */
    struct kiln_graph           *s1 = NULL;
    struct kiln_optimize_options nocl = {1u << KILN_GRAPH_PASS_CHANNELS_LAST, NULL, NULL};
    CHECK(kiln_graph_optimize(ctx, g, NULL, &nocl, &o, NULL, &rep) == KILN_OK);
    CHECK(kiln_graph_simplify(ctx, g, NULL, &s1, NULL, NULL) == KILN_OK);
    CHECK(o && s1 && kiln_graph_hash(o) == kiln_graph_hash(s1));
    CHECK_EQ_INT(0, rep.ran[KILN_GRAPH_PASS_CHANNELS_LAST]);
    kiln_ctx_free(ctx);
}

static const struct test tests[] = {
    {"options", test_options},
    {"resnet18", test_resnet18},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
