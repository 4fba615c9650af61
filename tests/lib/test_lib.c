/* tests/lib/test_lib.c -- the op library: output shapes for attribute combinations, the exact
 * message of every shape and attribute error, and values of small cases computed by hand
 * (skipped while the reference interpreter is unavailable).
 *
 * Cases are written as short specs so a table row reads like the call it tests:
 *   inputs "x:f32[1,3,8,8] w:f32[4,3,3,3]"   (NAME:DTYPE[D0,...], arguments in order)
 *   attrs  "stride=2 padding=[1,1] eq=ij,jk->ik approximate=\"tanh\" eps=1e-3"
 * An attribute value is a list [..], a quoted string, a number with '.', 'e' or "inf" (float),
 * an integer, or else a bare string. The library is called through kiln_lib_call directly, so
 * these tests need neither the parser nor the printer. */
#include "../harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- specs ---- */

struct spec {
    kiln_ctx          *ctx;
    struct kiln_graph *g;
    uint32_t           in[16];
    uint32_t           nin;
    struct kiln_attr   attr[16];
    int64_t            ints[16][KILN_MAX_DIMS * 2];
    char               str[16][64];
    uint32_t           nattr;
};

/* Declares the inputs of spec text `inputs`; returns false (and fails the test) on bad text. */
static bool
declare(struct spec *s, const char *inputs)
{
    const char *p = inputs;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        char        name[32], dt[8];
        const char *colon = strchr(p, ':'), *br = strchr(p, '[');
        if (!colon || !br || colon - p >= 32 || br - colon - 1 >= 8) {
            harness_fail(__FILE__, __LINE__, "bad input spec %s", inputs);
            return false;
        }
        memcpy(name, p, (size_t)(colon - p));
        name[colon - p] = 0;
        memcpy(dt, colon + 1, (size_t)(br - colon - 1));
        dt[br - colon - 1] = 0;
        int64_t  shape[KILN_MAX_DIMS];
        uint32_t n = 0;
        p = br + 1;
        while (*p && *p != ']') {
            char *end;
            shape[n++] = strtoll(p, &end, 10);
            p = *end == ',' ? end + 1 : end;
        }
        p++;
        s->in[s->nin++] =
            kiln_graph_add_tensor(s->g, name, kiln_dtype_parse(dt), n, shape, KILN_TENSOR_INPUT);
    }
    return true;
}

static void
parse_attrs(struct spec *s, const char *attrs)
{
    const char *p = attrs;
    while (p && *p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *eq = strchr(p, '=');
        char        name[32];
        memcpy(name, p, (size_t)(eq - p));
        name[eq - p] = 0;
        struct kiln_attr *a = &s->attr[s->nattr];
        memset(a, 0, sizeof *a);
        a->name = kiln_sym_cstr(s->ctx, name);
        a->line = 1;
        a->col = (uint32_t)(p - attrs) + 1;
        p = eq + 1;
        const char *end = p;
        if (*p == '[') {
            while (*end != ']')
                end++;
            end++;
            a->kind = KILN_ATTR_INTS;
            a->ints = s->ints[s->nattr];
            for (const char *q = p + 1; *q != ']';) {
                if (*q == ',' || *q == ' ') {
                    q++;
                    continue;
                }
                char *e;
                s->ints[s->nattr][a->n++] = strtoll(q, &e, 10);
                q = e;
            }
        } else if (*p == '"') {
            end = strchr(p + 1, '"') + 1;
            a->kind = KILN_ATTR_STRING;
            memcpy(s->str[s->nattr], p + 1, (size_t)(end - p - 2));
            a->s = s->str[s->nattr];
        } else {
            while (*end && *end != ' ')
                end++;
            char tok[64];
            memcpy(tok, p, (size_t)(end - p));
            tok[end - p] = 0;
            char     *e;
            long long iv = strtoll(tok, &e, 10);
            if (*e == 0 && e != tok) {
                a->kind = KILN_ATTR_INT;
                a->i = iv;
            } else {
                double fv = strtod(tok, &e);
                if (*e == 0 && e != tok) {
                    a->kind = KILN_ATTR_FLOAT;
                    a->f = fv;
                } else {
                    a->kind = KILN_ATTR_STRING;
                    memcpy(s->str[s->nattr], tok, strlen(tok) + 1);
                    a->s = s->str[s->nattr];
                }
            }
        }
        s->nattr++;
        p = end;
    }
}

/* Builds "y = op(inputs..., attrs...)" in a fresh graph. Returns the status; *s stays valid
 * until spec_free. */
static enum kiln_status
build(struct spec *s, const char *op, const char *inputs, const char *attrs, uint32_t *out)
{
    memset(s, 0, sizeof *s);
    s->ctx = kiln_ctx_new(NULL);
    s->g = kiln_graph_new(s->ctx);
    *out = KILN_NONE;
    if (!declare(s, inputs))
        return KILN_ERR_INTERNAL;
    parse_attrs(s, attrs);
    return kiln_lib_call(s->g, op, "y", s->nin, s->in, s->nattr, s->attr, 1, 1, out);
}

static void
spec_free(struct spec *s)
{
    kiln_ctx_free(s->ctx);
}

static const char *
shape_of(const struct kiln_graph *g, uint32_t t, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < g->tensor[t].ndim; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "",
                              (long long)g->tensor[t].shape[i]);
    snprintf(buf + n, size - n, "]");
    return buf;
}

/* ---- output shapes ---- */

struct shape_case {
    const char *op, *inputs, *attrs;
    const char *shape; /* of the output */
    int         nops;  /* compute definitions the call creates */
};

static const struct shape_case shape_cases[] = {
    /* conv2d */
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "", "[1, 4, 6, 6]", 1},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=1", "[1, 4, 8, 8]", 1},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "stride=2 padding=1", "[1, 4, 4, 4]", 1},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "dilation=2", "[1, 4, 4, 4]", 1},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "stride=[2,1] padding=[1,2]", "[1, 4, 4, 10]", 1},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=[0,1,2,3]", "[1, 4, 8, 10]", 1},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=\"same\"", "[1, 4, 8, 8]", 1},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,2,2]", "padding=\"same\" dilation=3", "[1, 4, 8, 8]", 1},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=\"valid\"", "[1, 4, 6, 6]", 1},
    {"conv2d", "x:f32[2,3,8,8] w:f32[4,3,3,3] b:f32[4]", "padding=1", "[2, 4, 8, 8]", 2},
    {"conv2d", "x:f32[1,6,8,8] w:f32[6,1,3,3]", "groups=6", "[1, 6, 6, 6]", 1},
    {"conv2d", "x:f32[1,4,8,8] w:f32[6,2,1,1]", "groups=2 stride=3", "[1, 6, 3, 3]", 1},
    {"conv2d", "x:f64[1,1,1,1] w:f64[1,1,1,1]", "", "[1, 1, 1, 1]", 1},
    {"conv2d", "x:f32[1,3,5,5] w:f32[4,3,3,3]", "dilation=3 padding=1", "[1, 4, 1, 1]", 1},
    /* conv2d_transpose */
    {"conv2d_transpose", "x:f32[1,4,5,5] w:f32[4,2,3,3]", "", "[1, 2, 7, 7]", 1},
    {"conv2d_transpose", "x:f32[1,4,5,5] w:f32[4,2,3,3]", "stride=2 padding=1 output_padding=1",
     "[1, 2, 10, 10]", 1},
    {"conv2d_transpose", "x:f32[1,4,5,5] w:f32[4,3,3,3] b:f32[6]", "groups=2", "[1, 6, 7, 7]", 2},
    {"conv2d_transpose", "x:f32[1,4,5,6] w:f32[4,3,3,2]", "dilation=[2,1] padding=[0,1,2,3]",
     "[1, 3, 7, 3]", 1},
    /* dense, matmul, batch_matmul */
    {"dense", "x:f32[2,8] w:f32[3,8]", "", "[2, 3]", 1},
    {"dense", "x:f32[2,5,8] w:f32[3,8] b:f32[3]", "", "[2, 5, 3]", 2},
    {"dense", "x:f32[8] w:f32[3,8]", "", "[3]", 1},
    {"matmul", "a:f32[2,3] b:f32[3,4]", "", "[2, 4]", 1},
    {"matmul", "a:f32[3] b:f32[3]", "", "[]", 1},
    {"matmul", "a:f32[2,3] b:f32[3]", "", "[2]", 1},
    {"matmul", "a:f32[3] b:f32[3,4]", "", "[4]", 1},
    {"matmul", "a:f32[5,1,2,3] b:f32[4,3,6]", "", "[5, 4, 2, 6]", 1},
    {"batch_matmul", "a:f32[2,3,4] b:f32[2,4,5]", "", "[2, 3, 5]", 1},
    {"batch_matmul", "a:f32[2,4,3] b:f32[2,5,4]", "transpose_a=1 transpose_b=1", "[2, 3, 5]", 1},
    {"winograd_input", "x:f32[1,3,8,8]", "padding=1", "[16, 16, 3]", 1},
    {"winograd_input", "x:f32[2,7,9,5]", "layout=\"nhwc\"", "[16, 24, 5]", 1},
    {"winograd_input", "x:f32[1,2,6,6]", "padding=[0,1,2,3]", "[16, 12, 2]", 1},
    {"winograd_output", "m:f32[16,16,4]", "size=[8,8]", "[1, 4, 8, 8]", 1},
    {"winograd_input", "x:f32[1,3,9,8]", "padding=1 tile=4", "[36, 6, 3]", 1},
    {"winograd_output", "m:f32[36,12,4] b:f32[4]", "size=[9,7] tile=4 layout=\"nhwc\"",
     "[2, 9, 7, 4]", 1},
    {"winograd_output", "m:f32[16,24,4] b:f32[4]", "size=[5,7] layout=\"nhwc\"", "[2, 5, 7, 4]", 1},
    /* einsum */
    {"einsum", "a:f32[2,3] b:f32[3,4]", "eq=\"ij,jk->ik\"", "[2, 4]", 1},
    {"einsum", "a:f32[3,3]", "eq=\"ii->i\"", "[3]", 1},
    {"einsum", "a:f32[3,3]", "eq=\"ii\"", "[]", 1},
    {"einsum", "a:f32[2,3]", "eq=\"ji\"", "[3, 2]", 1},
    {"einsum", "a:f32[2,3]", "eq=\"bA\"", "[3, 2]", 1},
    {"einsum", "a:f32[5,2,3] b:f32[3,4]", "eq=\"...ij,...jk->...ik\"", "[5, 2, 4]", 1},
    {"einsum", "a:f32[2,1,3] b:f32[4,3]", "eq=\"...i,...i\"", "[2, 4]", 1},
    {"einsum", "a:f32[2,3] b:f32[1]", "eq=\"ij,j->i\"", "[2]", 1},
    {"einsum", "a:f32[2] b:f32[3] c:f32[4]", "eq=\"i,j,k->ijk\"", "[2, 3, 4]", 1},
    {"einsum", "a:f32[2,2,2,2,1] b:f32[2,2,2,2]", "eq=\"abcde,fghi->\"", "[]", 1},
    /* elementwise */
    {"relu", "x:f32[2,3]", "", "[2, 3]", 1},
    {"gelu", "x:f32[4]", "approximate=\"tanh\"", "[4]", 1},
    {"leaky_relu", "x:f32[4]", "alpha=0.2", "[4]", 1},
    {"leaky_relu", "x:f32[4]", "alpha=1", "[4]", 1},
    {"square", "x:i32[4]", "", "[4]", 1},
    {"exp", "x:f64[]", "", "[]", 1},
    {"add", "a:f32[2,1,3] b:f32[4,1]", "", "[2, 4, 3]", 1},
    {"mul", "a:f32[] b:f32[3]", "", "[3]", 1},
    {"pow", "a:f32[3,1] b:f32[1,3]", "", "[3, 3]", 1},
    /* pooling, unfold */
    {"max_pool2d", "x:f32[1,2,8,8]", "kernel=3 stride=2", "[1, 2, 3, 3]", 1},
    {"max_pool2d", "x:f32[1,2,8,8]", "kernel=3 stride=2 ceil_mode=1", "[1, 2, 4, 4]", 1},
    {"max_pool2d", "x:f32[1,2,8,8]", "kernel=2", "[1, 2, 4, 4]", 1},
    {"max_pool2d", "x:f32[1,2,8,8]", "kernel=3 padding=1 dilation=2", "[1, 2, 2, 2]", 1},
    {"max_pool2d", "x:f32[1,2,5,5]", "kernel=2 stride=2 padding=1 ceil_mode=1", "[1, 2, 3, 3]", 1},
    {"avg_pool2d", "x:f32[1,2,8,8]", "kernel=[2,3]", "[1, 2, 4, 2]", 2},
    {"avg_pool2d", "x:f32[1,2,7,7]", "kernel=3 stride=2 padding=1 count_include_pad=0",
     "[1, 2, 4, 4]", 2},
    {"global_avg_pool2d", "x:f32[2,3,5,7]", "", "[2, 3, 1, 1]", 2},
    {"global_max_pool2d", "x:f32[2,3,5,7]", "", "[2, 3, 1, 1]", 1},
    {"unfold", "x:f32[1,2,5,5]", "kernel=3 padding=1", "[1, 2, 3, 3, 5, 5]", 1},
    {"unfold", "x:f32[1,2,6,5]", "kernel=[2,3] stride=2", "[1, 2, 2, 3, 3, 2]", 1},
    /* normalisation */
    {"softmax", "x:f32[2,5]", "", "[2, 5]", 4},
    {"softmax", "x:f32[2,5,3]", "axis=1", "[2, 5, 3]", 4},
    {"log_softmax", "x:f32[7]", "axis=0", "[7]", 3},
    {"batch_norm", "x:f32[2,3,4,4] g:f32[3] b:f32[3] m:f32[3] v:f32[3]", "eps=1e-3", "[2, 3, 4, 4]",
     1},
    {"batch_norm", "x:f32[2,3] g:f32[3] b:f32[3] m:f32[3] v:f32[3]", "", "[2, 3]", 1},
    {"batch_norm", "x:f32[2,4,4,3] g:f32[3] b:f32[3] m:f32[3] v:f32[3]", "axis=3", "[2, 4, 4, 3]",
     1},
    {"layer_norm", "x:f32[2,3,4] g:f32[4] b:f32[4]", "", "[2, 3, 4]", 3},
    {"layer_norm", "x:f32[2,3,4] g:f32[3,4]", "axis=1 eps=1", "[2, 3, 4]", 3},
    {"layer_norm", "x:f32[2,3,4]", "axis=0", "[2, 3, 4]", 3},
    /* data movement */
    {"reshape", "x:f32[2,3,4]", "shape=[6,-1]", "[6, 4]", 1},
    {"reshape", "x:f32[2,3,4]", "shape=[4,1,6]", "[4, 1, 6]", 1},
    {"reshape", "x:f32[1]", "shape=[]", "[]", 1},
    {"flatten", "x:f32[2,3,4,5]", "", "[2, 60]", 1},
    {"flatten", "x:f32[2,3,4,5]", "axis=0", "[1, 120]", 1},
    {"flatten", "x:f32[2,3,4,5]", "axis=-1", "[24, 5]", 1},
    {"flatten", "x:f32[2,3,4,5]", "axis=4", "[120, 1]", 1},
    {"transpose", "x:f32[2,3,4]", "", "[4, 3, 2]", 1},
    {"transpose", "x:f32[2,3,4]", "perm=[0,-1,1]", "[2, 4, 3]", 1},
    {"concat", "a:f32[2,3] b:f32[2,4] c:f32[2,1]", "axis=1", "[2, 8]", 1},
    {"concat", "a:f32[2,3] b:f32[5,3]", "", "[7, 3]", 1},
    {"concat", "a:i32[2]", "axis=-1", "[2]", 1},
    {"pad", "x:f32[2,3]", "pads=[1,0,2,3]", "[5, 6]", 1},
    {"pad", "x:f32[2,3]", "pads=[1,2] mode=\"edge\"", "[4, 7]", 1},
    {"pad", "x:f32[4,3]", "pads=[-1,1,0,-1] mode=\"reflect\"", "[3, 3]", 1},
    {"pad", "x:f32[2,3]", "pads=1 value=-inf", "[4, 5]", 1},
    {"slice", "x:f32[10,5]", "starts=[1] ends=[8] steps=[3]", "[3, 5]", 1},
    {"slice", "x:f32[10,5]", "starts=[-1,0] ends=[-100,5] steps=[-2,1]", "[5, 5]", 1},
    {"slice", "x:f32[10,5]", "starts=2 ends=1000 axes=-1", "[10, 3]", 1},
    {"slice", "x:f32[10,5]", "starts=[0] ends=[9223372036854775807] steps=[100]", "[1, 5]", 1},
    /* indexing, comparison, logic, casts */
    {"gather", "x:f32[10,4] i:i64[2,3]", "", "[2, 3, 4]", 1},
    {"gather", "x:f32[2,10,4] i:i32[5]", "axis=-2", "[2, 5, 4]", 1},
    {"gather_elements", "x:f32[3,4] i:i8[3,7]", "axis=1", "[3, 7]", 1},
    {"where", "c:bool[2,1,1] a:f32[3,1] b:f32[4]", "", "[2, 3, 4]", 1},
    {"equal", "a:bool[2,3] b:bool[3]", "", "[2, 3]", 1},
    {"logical_not", "a:bool[2,3]", "", "[2, 3]", 1},
    {"cast", "x:f32[2,3]", "dtype=\"i64\"", "[2, 3]", 1},
    {"expand", "x:f32[3,1]", "shape=[2,1,4]", "[2, 3, 4]", 1},
    {"tile", "x:f32[3,1]", "repeats=[2,5]", "[6, 5]", 1},
    {"trilu", "x:f32[2,3,4]", "k=-1 upper=0", "[2, 3, 4]", 1},
    /* reductions over axes */
    {"reduce_sum", "x:f32[2,3,4]", "", "[1, 1, 1]", 1},
    {"reduce_sum", "x:f32[2,3,4]", "keepdims=0", "[]", 1},
    {"reduce_max", "x:f32[2,3,4]", "axes=[-1,0] keepdims=0", "[3]", 1},
    {"reduce_min", "x:i32[2,3,4]", "axes=1", "[2, 1, 4]", 1},
    {"reduce_mean", "x:f32[2,3,4]", "axes=[1,2]", "[2, 1, 1]", 2},
    {"reduce_prod", "x:f32[2,3,4]", "axes=[0,2] keepdims=0", "[3]", 2},
    {"reduce_prod", "x:f32[2,3,4]", "axes=[]", "[2, 3, 4]", 1},
    {"argmax", "x:f32[2,3,4]", "axis=1", "[2, 1, 4]", 2},
    {"argmin", "x:i32[2,3,4]", "axis=-1 keepdims=0 select_last_index=1", "[2, 3]", 2},
    {"cumsum", "x:f32[2,3,4]", "axis=1 exclusive=1 reverse=1", "[2, 3, 4]",
     1}, /* trigonometric, rounding, predicates, mod */
    {"sin", "x:f32[2,3]", "", "[2, 3]", 1},
    {"atanh", "x:f64[4]", "", "[4]", 1},
    {"round", "x:f32[2,3]", "", "[2, 3]", 1},
    {"sign", "x:i8[5]", "", "[5]", 1},
    {"isinf", "x:f32[2,3]", "detect_positive=0", "[2, 3]", 1},
    {"mod", "a:i32[2,1] b:i32[3]", "fmod=1", "[2, 3]", 1},
    {"cumsum", "x:f32[2,3,4]", "axis=1 exclusive=1 reverse=1", "[2, 3, 4]", 1},
    /* scatter */
    {"scatter_elements", "x:f32[3,4] i:i64[2,6] u:f32[2,6]", "axis=1", "[3, 4]", 2},
    {"scatter_elements", "x:i32[3,4] i:i8[5,4] u:i32[5,4]", "reduction=\"add\"", "[3, 4]", 1},
    {"scatter_nd", "x:f32[3,4,5] i:i64[6,2] u:f32[6,5]", "", "[3, 4, 5]", 2},
    {"scatter_nd", "x:f32[3,4] i:i32[2,1] u:f32[2,4]", "reduction=\"min\"", "[3, 4]", 1},
    {"resize", "x:f32[1,3,4,5]", "sizes=[1,3,8,10] mode=\"linear\"", "[1, 3, 8, 10]", 1},
    {"resize", "x:i64[2,3]", "sizes=[4,2] scales=[5,3] scale_den=2", "[4, 2]", 1},
    {"scatter_nd", "x:f32[3,4] i:i32[2,1] u:f32[2,4]", "reduction=\"mul\"", "[3, 4]", 1},
};

static void
test_shapes(void)
{
    for (size_t i = 0; i < KILN_COUNTOF(shape_cases); i++) {
        const struct shape_case *sc = &shape_cases[i];
        struct spec              s;
        uint32_t                 out;
        enum kiln_status         st = build(&s, sc->op, sc->inputs, sc->attrs, &out);
        if (st != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "%s(%s; %s): %s", sc->op, sc->inputs, sc->attrs,
                         kiln_ctx_error(s.ctx) ? kiln_ctx_error(s.ctx)->msg : "?");
        } else {
            char buf[128];
            if (strcmp(shape_of(s.g, out, buf, sizeof buf), sc->shape))
                harness_fail(__FILE__, __LINE__, "%s(%s; %s): shape %s, want %s", sc->op,
                             sc->inputs, sc->attrs, buf, sc->shape);
            if ((int)s.g->nop != sc->nops)
                harness_fail(__FILE__, __LINE__, "%s(%s; %s): %u ops, want %d", sc->op, sc->inputs,
                             sc->attrs, s.g->nop, sc->nops);
            CHECK_EQ_INT(1, s.g->ncall);
            CHECK_EQ_INT(out, s.g->call[0].out);
            CHECK_EQ_INT(s.nattr, s.g->call[0].nattr); /* no defaults added */
            CHECK(kiln_graph_mark_output(s.g, out) == KILN_OK);
            CHECK(kiln_graph_verify(s.g) == KILN_OK);
        }
        spec_free(&s);
    }
}

/* Random valid attributes: the checked shape functions give the extents of the plain formulas
 * (PyTorch's), and an input too small for its window is still the usual error. */
static int64_t
rnd(struct kiln_rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)kiln_rng_below(r, (uint64_t)(hi - lo + 1));
}

static void
shape_random_one(struct kiln_rng *r)
{
    int64_t     H = rnd(r, 1, 12), W = rnd(r, 1, 12), k[2] = {rnd(r, 1, 4), rnd(r, 1, 4)};
    int64_t     st[2] = {rnd(r, 1, 3), rnd(r, 1, 3)}, dl[2] = {rnd(r, 1, 3), rnd(r, 1, 3)};
    int64_t     pd[4] = {rnd(r, 0, 3), rnd(r, 0, 3), rnd(r, 0, 3), rnd(r, 0, 3)}, in[2] = {H, W};
    int         op = (int)kiln_rng_below(r, 4);
    char        inputs[128], attrs[256], want[128];
    int64_t     o[2];
    bool        valid = true;
    const char *name = op == 0   ? "conv2d"
                       : op == 1 ? "conv2d_transpose"
                       : op == 2 ? "unfold"
                                 : "max_pool2d";
    if (op == 3) /* pooling pads symmetrically, at most half the kernel */
        for (int d = 0; d < 2; d++)
            pd[d] = pd[d + 2] = pd[d] % (k[d] / 2 + 1);
    int64_t opad[2] = {rnd(r, 0, 2), rnd(r, 0, 2)};
    for (int d = 0; d < 2; d++) {
        int64_t padded = in[d] + pd[d] + pd[d + 2], span = dl[d] * (k[d] - 1) + 1;
        if (op == 1) {
            opad[d] = opad[d] % (st[d] > dl[d] ? st[d] : dl[d]);
            o[d] = (in[d] - 1) * st[d] - pd[d] - pd[d + 2] + span + opad[d];
            valid &= o[d] >= 1;
        } else {
            o[d] = padded >= span ? (padded - span) / st[d] + 1 : 0;
            valid &= padded >= span;
        }
    }
    char pads[96];
    if (op == 3) /* pooling takes [ph, pw] */
        snprintf(pads, sizeof pads, "padding=[%lld,%lld]", (long long)pd[0], (long long)pd[1]);
    else
        snprintf(pads, sizeof pads, "padding=[%lld,%lld,%lld,%lld]", (long long)pd[0],
                 (long long)pd[1], (long long)pd[2], (long long)pd[3]);
    int n = snprintf(attrs, sizeof attrs, "stride=[%lld,%lld] dilation=[%lld,%lld] %s",
                     (long long)st[0], (long long)st[1], (long long)dl[0], (long long)dl[1], pads);
    if (op >= 2)
        snprintf(attrs + n, sizeof attrs - (size_t)n, " kernel=[%lld,%lld]", (long long)k[0],
                 (long long)k[1]);
    else if (op == 1)
        snprintf(attrs + n, sizeof attrs - (size_t)n, " output_padding=[%lld,%lld]",
                 (long long)opad[0], (long long)opad[1]);
    if (op == 0)
        snprintf(inputs, sizeof inputs, "x:f32[1,2,%lld,%lld] w:f32[3,2,%lld,%lld]", (long long)H,
                 (long long)W, (long long)k[0], (long long)k[1]);
    else if (op == 1)
        snprintf(inputs, sizeof inputs, "x:f32[1,2,%lld,%lld] w:f32[2,3,%lld,%lld]", (long long)H,
                 (long long)W, (long long)k[0], (long long)k[1]);
    else
        snprintf(inputs, sizeof inputs, "x:f32[1,2,%lld,%lld]", (long long)H, (long long)W);
    if (op == 2)
        snprintf(want, sizeof want, "[1, 2, %lld, %lld, %lld, %lld]", (long long)k[0],
                 (long long)k[1], (long long)o[0], (long long)o[1]);
    else
        snprintf(want, sizeof want, "[1, %d, %lld, %lld]", op < 2 ? 3 : 2, (long long)o[0],
                 (long long)o[1]);
    struct spec      s;
    uint32_t         out;
    enum kiln_status st_ = build(&s, name, inputs, attrs, &out);
    if (valid && st_ != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s(%s; %s): %s, want %s", name, inputs, attrs,
                     kiln_ctx_error(s.ctx) ? kiln_ctx_error(s.ctx)->msg : "?", want);
    } else if (!valid && st_ != KILN_ERR_INVALID) {
        harness_fail(__FILE__, __LINE__, "%s(%s; %s): accepted, want an error", name, inputs,
                     attrs);
    } else if (valid) {
        char buf[128];
        if (strcmp(shape_of(s.g, out, buf, sizeof buf), want))
            harness_fail(__FILE__, __LINE__, "%s(%s; %s): shape %s, want %s", name, inputs, attrs,
                         buf, want);
    }
    spec_free(&s);
}

static void
test_shapes_random(void)
{
    uint64_t        seed = opt_seed();
    struct kiln_rng r = kiln_rng_new(seed);
    printf("     seed %llu\n", (unsigned long long)seed);
    for (uint64_t i = 0; i < opt_iters_or(2000); i++)
        shape_random_one(&r);
}

/* Printing a library call and parsing it back calls the library again with the recorded
 * attributes; printing it expanded writes the compute definitions, which the parser's static
 * bounds check must accept (every load that can leave its tensor is guarded). Both must give
 * the graph's hash back. */
static void
test_round_trip(void)
{
    for (size_t i = 0; i < KILN_COUNTOF(shape_cases); i++) {
        const struct shape_case *sc = &shape_cases[i];
        struct spec              s;
        uint32_t                 out;
        if (build(&s, sc->op, sc->inputs, sc->attrs, &out) != KILN_OK
            || kiln_graph_mark_output(s.g, out) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "%s(%s; %s): build failed", sc->op, sc->inputs,
                         sc->attrs);
            spec_free(&s);
            continue;
        }
        uint64_t h = kiln_graph_hash(s.g);
        for (unsigned flags = 0; flags <= KILN_PRINT_EXPANDED; flags += KILN_PRINT_EXPANDED) {
            const char      *text;
            enum kiln_status st = kiln_graph_print(s.ctx, s.g, flags, &text);
            if (st == KILN_ERR_UNSUPPORTED) {
                harness_skip("the printer is not available");
                spec_free(&s);
                return;
            }
            if (st != KILN_OK) {
                harness_fail(__FILE__, __LINE__, "%s: print: %s", sc->op,
                             kiln_ctx_error(s.ctx)->msg);
                break;
            }
            kiln_ctx          *ctx2 = kiln_ctx_new(NULL);
            struct kiln_graph *g2;
            if (kiln_graph_parse(ctx2, text, strlen(text), "rt.kg", &g2) != KILN_OK) {
                char msg[700];
                kiln_error_format(kiln_ctx_error(ctx2), msg, sizeof msg);
                harness_fail(__FILE__, __LINE__, "%s(%s; %s): reparse: %s\n%s", sc->op, sc->inputs,
                             sc->attrs, msg, text);
            } else if (kiln_graph_hash(g2) != h) {
                harness_fail(__FILE__, __LINE__,
                             "%s(%s; %s): hash changed after %s round trip:\n%s", sc->op,
                             sc->inputs, sc->attrs, flags ? "expanded" : "plain", text);
            }
            kiln_ctx_free(ctx2);
        }
        spec_free(&s);
    }
}

/* ---- error messages ---- */

struct error_case {
    const char *op, *inputs, *attrs;
    const char *msg;
};

static const struct error_case error_cases[] = {
    /* generic */
    {"conv3d", "x:f32[1]", "", "unknown op 'conv3d'"},
    {"conv2d", "x:f32[1,3,8,8]", "", "conv2d: expects 2 or 3 inputs, got 1"},
    {"relu", "x:f32[2] z:f32[2]", "", "relu: expects 1 input, got 2"},
    {"einsum", "", "eq=\"i\"", "einsum: expects at least 1 input, got 0"},
    {"batch_norm", "x:f32[2,3] g:f32[3] b:f32[3]", "", "batch_norm: expects 5 inputs, got 3"},
    {"layer_norm", "x:f32[2,3] g:f32[3] b:f32[3] c:f32[3]", "",
     "layer_norm: expects 1 to 3 inputs, got 4"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "strid=1", "conv2d: unknown attribute 'strid'"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "stride=1 stride=2",
     "conv2d: attribute stride is given twice"},
    {"relu", "x:f32[2]", "alpha=1", "relu: unknown attribute 'alpha'"},
    /* conv2d */
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "stride=\"a\"",
     "conv2d: attribute stride must be an integer or a list of 2 integers"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "stride=[1,2,3]",
     "conv2d: attribute stride must be an integer or a list of 2 integers"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "stride=0", "conv2d: stride 0 must be positive"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "dilation=[1,-2]",
     "conv2d: dilation -2 must be positive"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=-1",
     "conv2d: padding -1 must not be negative"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=[1,2,3]",
     "conv2d: attribute padding must be an integer or a list of 2 or 4 integers"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=1.5",
     "conv2d: attribute padding must be an integer, a list of 2 or 4 integers, \"same\" or "
     "\"valid\""},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=\"full\"",
     "conv2d: padding must be \"same\" or \"valid\", got \"full\""},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=\"same\" stride=2",
     "conv2d: padding \"same\" needs stride 1"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "groups=0", "conv2d: groups 0 must be positive"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "groups=[1,1]",
     "conv2d: attribute groups must be an integer"},
    {"conv2d", "x:f32[1,64,8,8] w:f32[4,32,3,3]", "",
     "conv2d: input x has 64 channels but weight w expects 32 (groups 1)"},
    {"conv2d", "x:f32[1,64,8,8] w:f32[4,16,3,3]", "groups=2",
     "conv2d: input x has 64 channels but weight w expects 32 (groups 2)"},
    {"conv2d", "x:f32[1,6,8,8] w:f32[4,2,3,3]", "groups=4",
     "conv2d: input x has 6 channels, not divisible by groups 4"},
    {"conv2d", "x:f32[1,8,8,8] w:f32[6,2,3,3]", "groups=4",
     "conv2d: weight w has 6 output channels, not divisible by groups 4"},
    {"conv2d", "x:f32[1,3,8] w:f32[4,3,3,3]", "",
     "conv2d: input x must be 4-D [N, C, H, W], got [1, 3, 8]"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3]", "",
     "conv2d: weight w must be 4-D [K, C/groups, KH, KW], got [4, 3, 3]"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3] b:f32[3]", "",
     "conv2d: bias b has shape [3] but weight w has 4 output channels"},
    {"conv2d", "x:f32[1,3,8,8] w:f64[4,3,3,3]", "", "conv2d: dtypes of x (f32) and w (f64) differ"},
    {"conv2d", "x:i32[1,3,8,8] w:i32[4,3,3,3]", "",
     "conv2d: input x has dtype i32; a float dtype is required"},
    {"conv2d", "x:f32[1,3,3,3] w:f32[4,3,5,5]", "",
     "conv2d: dilated kernel 5x5 does not fit input x of 3x3 padded to 3x3"},
    /* conv2d_transpose */
    {"conv2d_transpose", "x:f32[1,4,5,5] w:f32[4,2,3,3]", "stride=2 output_padding=2",
     "conv2d_transpose: output_padding 2 must be smaller than stride 2 or dilation 1"},
    {"conv2d_transpose", "x:f32[1,4,5,5] w:f32[3,2,3,3]", "",
     "conv2d_transpose: input x has 4 channels but weight w expects 3"},
    {"conv2d_transpose", "x:f32[1,1,1,1] w:f32[1,1,1,1]", "padding=1",
     "conv2d_transpose: padding leaves an empty output (-1x-1) for input x of 1x1"},
    {"conv2d_transpose", "x:f32[1,6,5,5] w:f32[6,2,3,3]", "groups=4",
     "conv2d_transpose: input x has 6 channels, not divisible by groups 4"},
    {"conv2d_transpose", "x:f32[1,4,5,5] w:f32[4,2,3,3] b:f32[2]", "groups=2",
     "conv2d_transpose: bias b has shape [2] but weight w has 4 output channels"},
    /* dense, matmul, batch_matmul */
    {"dense", "x:f32[2,64] w:f32[4,32]", "",
     "dense: input x has 64 features but weight w expects 32"},
    {"dense", "x:f32[2,2] w:f32[4,3,2]", "", "dense: weight w must be 2-D [M, K], got [4, 3, 2]"},
    {"dense", "x:f32[2,8] w:f32[4,8] b:f32[5]", "",
     "dense: bias b has shape [5] but weight w has 4 output features"},
    {"dense", "x:f32[] w:f32[4,8]", "",
     "dense: input x must have at least 1 dimension [..., K], got []"},
    {"matmul", "a:f32[2,3] b:f32[4,5]", "",
     "matmul: inner dimensions of a [2, 3] and b [4, 5] differ (3 vs 4)"},
    {"matmul", "a:f32[2,2,3] b:f32[3,3,4]", "",
     "matmul: batch dimensions [2] of a and [3] of b do not broadcast"},
    {"matmul", "a:f32[] b:f32[3]", "",
     "matmul: input a is a scalar; matmul needs at least 1 dimension"},
    {"batch_matmul", "a:f32[2,3,4] b:f32[3,4,5]", "",
     "batch_matmul: batch sizes of a (2) and b (3) differ"},
    {"batch_matmul", "a:f32[2,3,3] b:f32[2,4,5]", "",
     "batch_matmul: a has inner dimension 3 but b has 4"},
    {"batch_matmul", "a:f32[2,3,4] b:f32[2,4,5]", "transpose_a=2",
     "batch_matmul: attribute transpose_a must be 0 or 1"},
    {"winograd_input", "x:f32[1,3,2,2]", "",
     "winograd_input: input x of 2x2 padded to 2x2 is smaller than the 3x3 kernel"},
    {"winograd_input", "x:f32[1,3,8,8]", "layout=\"chwn\"",
     "winograd_input: layout must be \"nchw\" or \"nhwc\", got \"chwn\""},
    {"winograd_input", "x:f32[3,8,8]", "",
     "winograd_input: input x must be 4-D [N, C, H, W], got [3, 8, 8]"},
    {"winograd_output", "m:f32[16,16,4]", "",
     "winograd_output: missing attribute size (the output's [H, W])"},
    {"winograd_input", "x:f32[1,3,8,8]", "tile=3", "winograd_input: tile must be 2 or 4, got 3"},
    {"winograd_output", "m:f32[16,4,4]", "size=[8,8] tile=4",
     "winograd_output: input m has shape [16, 4, 4]; a 8x8 output needs [36, N*4, K] (2x2 tiles "
     "of 4x4 per image)"},
    {"winograd_output", "m:f32[16,10,4]", "size=[8,8]",
     "winograd_output: input m has shape [16, 10, 4]; a 8x8 output needs [16, N*16, K] (4x4 tiles "
     "of 2x2 per image)"},
    {"winograd_output", "m:f32[16,16,4] b:f32[3]", "size=8",
     "winograd_output: bias b has shape [3] but input m has 4 channels"},
    {"batch_matmul", "a:f32[2,3] b:f32[2,3,5]", "",
     "batch_matmul: input a must be 3-D [B, M, K], got [2, 3]"},
    /* einsum */
    {"einsum", "a:f32[2,3]", "", "einsum: missing attribute eq"},
    {"einsum", "a:f32[2,3]", "eq=5", "einsum: attribute eq must be a string"},
    {"einsum", "a:f32[2,3]", "eq=\"ij,jk\"",
     "einsum: equation has 2 operands but 1 input is given"},
    {"einsum", "a:f32[2,3,4]", "eq=\"ij->i\"",
     "einsum: operand 0 has 2 indices but input a has rank 3"},
    {"einsum", "a:f32[2,3]", "eq=\"i1->i\"", "einsum: invalid character '1' in equation"},
    {"einsum", "a:f32[2,3]", "eq=\"ij->ii\"", "einsum: index i appears twice in the output"},
    {"einsum", "a:f32[2,3]", "eq=\"ij->z\"", "einsum: output index z does not appear in any input"},
    {"einsum", "a:f32[2,3] b:f32[4,5]", "eq=\"ij,jk->ik\"",
     "einsum: index j has size 3 in input a but 4 in input b"},
    {"einsum", "a:f32[2,3]", "eq=\"ii->i\"", "einsum: index i has sizes 2 and 3 in input a"},
    {"einsum", "a:f32[5,2,3]", "eq=\"...ij->ij\"",
     "einsum: the inputs have 1 dimension under '...' but the output has no '...'"},
    {"einsum", "a:f32[5,2,3]", "eq=\"..i.j->ij\"", "einsum: '.' in equation must be part of '...'"},
    {"einsum", "a:f32[5,2,3]", "eq=\"...i...->i\"", "einsum: operand 0 has more than one '...'"},
    {"einsum", "a:f32[2,3] b:f32[4,3]", "eq=\"...i,...i\"",
     "einsum: dimensions under '...' of input b do not broadcast (4 vs 2)"},
    {"einsum", "a:f32[2]", "eq=\"abcdefghi->a\"", "einsum: operand 0 has more than 8 indices"},
    {"einsum", "a:f32[2,2,2,2,2] b:f32[2,2,2,2]", "eq=\"abcde,fghi->abcdefghi\"",
     "einsum: the output has more than 8 indices"},
    {"einsum", "a:f32[2,2,2,2,2,2,2,2] b:f32[2]", "eq=\"...a,b->...ab\"",
     "einsum: the output has more than 8 dimensions"},
    {"einsum", "a:f32[2,2,2,2,2,2,2,2] b:f32[2]", "eq=\"...a,b\"",
     "einsum: the output has more than 8 dimensions"},
    {"einsum", "a:f32[2,2,2,2,2] b:f32[2,2,2,2,2]", "eq=\"abcde,fghij->\"",
     "einsum: 10 summed indices; at most 8"},
    /* elementwise */
    {"add", "a:f32[2,3] b:f32[4]", "", "add: shapes [2, 3] of a and [4] of b do not broadcast"},
    {"add", "a:f32[2,3] b:f64[3]", "", "add: dtypes of a (f32) and b (f64) differ"},
    {"add", "a:bool[2] b:bool[2]", "", "add: input a has dtype bool; a numeric dtype is required"},
    {"div", "a:bool[2] b:bool[2]", "", "div: input a has dtype bool; a float dtype is required"},
    {"exp", "x:i64[2]", "", "exp: input x has dtype i64; a float dtype is required"},
    {"gelu", "x:f32[2]", "approximate=\"fast\"",
     "gelu: attribute approximate must be \"none\" or \"tanh\", got \"fast\""},
    {"gelu", "x:f32[2]", "approximate=1", "gelu: attribute approximate must be a string"},
    {"leaky_relu", "x:f32[2]", "alpha=[1]", "leaky_relu: attribute alpha must be a number"},
    /* pooling, unfold */
    {"max_pool2d", "x:f32[1,2,8,8]", "", "max_pool2d: missing attribute kernel"},
    {"max_pool2d", "x:f32[1,2,8,8]", "kernel=3 padding=2",
     "max_pool2d: padding 2 must be at most half the kernel size 3"},
    {"max_pool2d", "x:f32[1,2,8,8]", "kernel=3 padding=[1,1,1,1]",
     "max_pool2d: attribute padding must be an integer or a list of 2 integers"},
    {"max_pool2d", "x:f32[1,1,2,2]", "kernel=3",
     "max_pool2d: input x of 2x2 is too small for kernel 3x3 (padding 0x0, dilation 1x1)"},
    {"max_pool2d", "x:f32[1,2,8,8]", "kernel=3 ceil_mode=\"yes\"",
     "max_pool2d: attribute ceil_mode must be 0 or 1"},
    {"max_pool2d", "x:f32[2,8,8]", "kernel=2",
     "max_pool2d: input x must be 4-D [N, C, H, W], got [2, 8, 8]"},
    {"avg_pool2d", "x:f32[1,2,8,8]", "kernel=2 dilation=2",
     "avg_pool2d: unknown attribute 'dilation'"},
    {"avg_pool2d", "x:f32[1,2,8,8]", "kernel=2 count_include_pad=2",
     "avg_pool2d: attribute count_include_pad must be 0 or 1"},
    {"avg_pool2d", "x:f32[1,2,8,8]", "kernel=0", "avg_pool2d: kernel 0 must be positive"},
    {"global_avg_pool2d", "x:f32[2,3]", "",
     "global_avg_pool2d: input x must be 4-D [N, C, H, W], got [2, 3]"},
    {"unfold", "x:f32[1,2,8,8]", "stride=2", "unfold: missing attribute kernel"},
    {"unfold", "x:f32[1,2,2,8]", "kernel=3",
     "unfold: dilated kernel 3x3 does not fit input x of 2x8 padded to 2x8"},
    /* normalisation */
    {"softmax", "x:f32[2,3]", "axis=2", "softmax: axis 2 is out of range for input x of rank 2"},
    {"softmax", "x:f32[2,3]", "axis=-3", "softmax: axis -3 is out of range for input x of rank 2"},
    {"softmax", "x:f32[]", "", "softmax: input x is a scalar; it needs at least 1 dimension"},
    {"log_softmax", "x:f32[2,3]", "axis=1.0", "log_softmax: attribute axis must be an integer"},
    {"batch_norm", "x:f32[2,4,3,3] g:f32[4] b:f32[4] m:f32[3] v:f32[4]", "",
     "batch_norm: mean m has shape [3] but input x has 4 channels"},
    {"batch_norm", "x:f32[2,3,3,4] g:f32[4] b:f32[4] m:f32[3] v:f32[4]", "axis=3",
     "batch_norm: mean m has shape [3] but input x has 4 channels along its axis"},
    {"batch_norm", "x:f32[2,3] g:f32[3] b:f32[3] m:f32[3] v:f32[3]", "axis=2",
     "batch_norm: axis 2 is out of range for input x of rank 2"},
    {"batch_norm", "x:f32[2,4,3,3] g:f32[4] b:f32[4] m:f32[4] v:f32[4]", "eps=-1",
     "batch_norm: eps -1 must not be negative"},
    {"batch_norm", "x:f32[4] g:f32[4] b:f32[4] m:f32[4] v:f32[4]", "",
     "batch_norm: input x must have at least 2 dimensions [N, C, ...], got [4]"},
    {"layer_norm", "x:f32[2,3,4] g:f32[4]", "axis=1",
     "layer_norm: gamma g has shape [4] but the normalised shape of x is [3, 4]"},
    {"layer_norm", "x:f32[2,3,4] g:f32[4] b:f32[3]", "",
     "layer_norm: beta b has shape [3] but the normalised shape of x is [4]"},
    /* data movement */
    {"reshape", "x:f32[2,3]", "shape=[4,2]",
     "reshape: cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)"},
    {"reshape", "x:f32[2,3]", "shape=[4,-1]",
     "reshape: cannot reshape [2, 3] (6 elements) to [4, -1]"},
    {"reshape", "x:f32[2,3]", "shape=[-1,-1]", "reshape: shape [-1, -1] has more than one -1"},
    {"reshape", "x:f32[2,3]", "shape=[0,6]", "reshape: shape entry 0 must be positive or -1"},
    {"reshape", "x:f32[2,3]", "", "reshape: missing attribute shape"},
    {"reshape", "x:f32[1]", "shape=[1,1,1,1,1,1,1,1,1]",
     "reshape: shape [1, 1, 1, 1, 1, 1, 1, 1, 1] has more than 8 dimensions"},
    {"reshape", "x:f32[2,3]", "shape=\"6\"", "reshape: attribute shape must be a list of integers"},
    {"flatten", "x:f32[2,3]", "axis=3", "flatten: axis 3 is out of range for input x of rank 2"},
    {"transpose", "x:f32[2,3]", "perm=[0,0]",
     "transpose: perm [0, 0] is not a permutation of 0..1"},
    {"transpose", "x:f32[2,3,4]", "perm=[1,0]",
     "transpose: perm [1, 0] has 2 entries but input x has rank 3"},
    {"concat", "a:f32[2,3] b:f32[3,4]", "",
     "concat: shapes [2, 3] of a and [3, 4] of b differ outside axis 0"},
    {"concat", "a:f32[2,3] b:f32[2,3,1]", "axis=1",
     "concat: shapes [2, 3] of a and [2, 3, 1] of b differ outside axis 1"},
    {"concat", "a:f32[2,3] b:i32[2,3]", "", "concat: dtypes of a (f32) and b (i32) differ"},
    {"pad", "x:f32[2,3]", "pads=[1,1,1]",
     "pad: pads [1, 1, 1] has 3 entries; input x of rank 2 needs 4 (or 2)"},
    {"pad", "x:f32[2,3]", "pads=[0,-2,0,-1]", "pad: pads leave dimension 1 of x with extent 0"},
    {"pad", "x:f32[2,3]", "pads=1 mode=\"wrap\"",
     "pad: mode must be \"constant\", \"edge\" or \"reflect\", got \"wrap\""},
    {"pad", "x:f32[3,3]", "pads=[3,0,0,0] mode=\"reflect\"",
     "pad: reflect padding 3 of dimension 0 must be less than its extent 3"},
    {"pad", "x:f32[3,3]", "", "pad: missing attribute pads"},
    {"pad", "x:f32[3,3]", "pads=1 value=\"zero\"", "pad: attribute value must be a number"},
    {"slice", "x:f32[4,5]", "starts=[0] ends=[2] steps=[0]", "slice: steps must not be zero"},
    {"slice", "x:f32[4,5]", "starts=[3] ends=[2] axes=[1]",
     "slice: dimension 1 of x would be empty (start 3, end 2, step 1)"},
    {"slice", "x:f32[4,5]", "starts=[0,0] ends=[1]", "slice: starts has 2 entries but ends has 1"},
    {"slice", "x:f32[4,5]", "starts=[0,0] ends=[1,1] axes=[1,-1]",
     "slice: axis 1 appears twice in axes"},
    {"slice", "x:f32[4,5]", "starts=[0]", "slice: missing attribute ends"},
    {"slice", "x:f32[4,5]", "starts=[0,0,0] ends=[1,1,1]",
     "slice: starts has 3 entries but input x has rank 2"},
    {"slice", "x:f32[4,5]", "starts=[0] ends=[1] axes=[2]",
     "slice: axis 2 is out of range for input x of rank 2"},
    /* attributes are checked before shapes */
    {"conv2d", "x:f32[1,3,8] w:f32[4,3,3,3]", "stride=0", "conv2d: stride 0 must be positive"},
    {"conv2d_transpose", "x:f32[1,3] w:f32[4,3,3,3]", "groups=-1",
     "conv2d_transpose: groups -1 must be positive"},
    /* overflow of an output extent is an error naming the attribute, never a wrapped value */
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=9223372036854775807",
     "conv2d: padding 9223372036854775807 overflows the output shape"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=[0,9223372036854775807,0,1]",
     "conv2d: padding 9223372036854775807 overflows the output shape"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "dilation=9223372036854775807",
     "conv2d: dilation 9223372036854775807 overflows the output shape"},
    {"conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "padding=\"same\" dilation=9223372036854775807",
     "conv2d: dilation 9223372036854775807 overflows the output shape"},
    {"conv2d_transpose", "x:f32[1,3,8,8] w:f32[3,4,3,3]", "stride=9223372036854775807",
     "conv2d_transpose: stride 9223372036854775807 overflows the output shape"},
    {"conv2d_transpose", "x:f32[1,3,8,8] w:f32[3,4,3,3]", "dilation=9223372036854775807",
     "conv2d_transpose: dilation 9223372036854775807 overflows the output shape"},
    {"max_pool2d", "x:f32[1,3,8,8]", "kernel=3 dilation=9223372036854775807",
     "max_pool2d: dilation 9223372036854775807 overflows the output shape"},
    {"max_pool2d", "x:f32[1,3,8,8]", "kernel=9223372036854775807 padding=4611686018427387903",
     "max_pool2d: kernel 9223372036854775807 overflows the output shape"},
    {"avg_pool2d", "x:f32[1,3,8,8]", "kernel=9223372036854775807 padding=4611686018427387903",
     "avg_pool2d: kernel 9223372036854775807 overflows the output shape"},
    {"unfold", "x:f32[1,3,8,8]", "kernel=2 padding=9223372036854775807",
     "unfold: padding 9223372036854775807 overflows the output shape"},
    {"unfold", "x:f32[1,3,8,8]", "kernel=9223372036854775807 dilation=2",
     "unfold: kernel 9223372036854775807 overflows the output shape"},
    {"pad", "x:f32[2,3]", "pads=9223372036854775807",
     "pad: pads 9223372036854775807 overflows the output shape"},
    {"pad", "x:f32[2,3]", "pads=[0,1,9223372036854775807,0]",
     "pad: pads 9223372036854775807 overflows the output shape"},
    {"winograd_input", "x:f32[1,3,8,8]", "padding=9223372036854775807",
     "winograd_input: padding 9223372036854775807 overflows the output shape"},
    {"winograd_output", "m:f32[16,4,2]", "size=9223372036854775807",
     "winograd_output: size 9223372036854775807 overflows the output shape"},
    {"reshape", "x:f32[2,3]", "shape=[9223372036854775807,9223372036854775807]",
     "reshape: cannot reshape [2, 3] (6 elements) to [9223372036854775807, 9223372036854775807]"},
    {"reshape", "x:f32[2,3]", "shape=[-1,9223372036854775807]",
     "reshape: cannot reshape [2, 3] (6 elements) to [-1, 9223372036854775807]"},
    /* indexing, comparison, logic, casts */
    {"gather", "x:f32[4,5] i:f32[3]", "",
     "gather: indices i have dtype f32; an integer dtype (i8, i32, i64) is required"},
    {"gather", "x:f32[4,5] i:i64[3]", "axis=2",
     "gather: axis 2 is out of range for input x of rank 2"},
    {"gather", "x:f32[2,2,2,2,2,2,2,2] i:i64[2,2]", "",
     "gather: the output would have 9 dimensions; at most 8"},
    {"gather", "x:f32[4,5] i:i64[3]", "dim=1", "gather: unknown attribute 'dim'"},
    {"gather_elements", "x:f32[4,5] i:i32[4]", "",
     "gather_elements: indices i [4] must have the rank of input x [4, 5]"},
    {"gather_elements", "x:f32[4,5] i:i32[2,6]", "axis=0",
     "gather_elements: indices i [2, 6] exceed input x [4, 5] in dimension 1"},
    {"gather_elements", "x:f32[4,5] i:bool[4,5]", "",
     "gather_elements: indices i have dtype bool; an integer dtype (i8, i32, i64) is required"},
    {"where", "c:f32[3] a:f32[3] b:f32[3]", "",
     "where: condition c has dtype f32; bool is required"},
    {"where", "c:bool[3] a:f32[3] b:f64[3]", "", "where: dtypes of a (f32) and b (f64) differ"},
    {"where", "c:bool[2,3] a:f32[3] b:f32[4]", "",
     "where: shapes [2, 3] and [4] of b do not broadcast"},
    {"equal", "a:i64[3] b:i32[3]", "", "equal: dtypes of a (i64) and b (i32) differ"},
    {"less", "a:bool[3] b:bool[3]", "",
     "less: input a has dtype bool; a numeric dtype is required"},
    {"greater_equal", "a:f32[2,3] b:f32[2]", "",
     "greater_equal: shapes [2, 3] and [2] of b do not broadcast"},
    {"logical_and", "a:i32[3] b:i32[3]", "",
     "logical_and: input a has dtype i32; bool is required"},
    {"logical_not", "a:f32[3]", "", "logical_not: input a has dtype f32; bool is required"},
    {"cast", "x:f32[3]", "", "cast: missing attribute dtype"},
    {"cast", "x:f32[3]", "dtype=\"c64\"", "cast: unknown dtype \"c64\""},
    {"cast", "x:f32[3]", "dtype=1", "cast: attribute dtype must be a string"},
    {"expand", "x:f32[3]", "", "expand: missing attribute shape"},
    {"expand", "x:f32[3]", "shape=[2,4]", "expand: shape [2, 4] and [3] of x do not broadcast"},
    {"expand", "x:f32[3]", "shape=[0,3]", "expand: shape 0 must be positive"},
    {"tile", "x:f32[2,3]", "repeats=[2]", "tile: repeats [2] has 1 entries but input x has rank 2"},
    {"tile", "x:f32[2,3]", "repeats=[2,0]", "tile: repeats 0 must be positive"},
    {"tile", "x:f32[2,3]", "repeats=[4611686018427387904,1]",
     "tile: repeats 4611686018427387904 overflows the output shape"},
    {"trilu", "x:f32[3]", "", "trilu: input x [3] needs at least 2 dimensions"},
    {"trilu", "x:f32[3,3]", "upper=2", "trilu: attribute upper must be 0 or 1"},
    /* reductions over axes */
    {"reduce_sum", "x:f32[2,3]", "axes=[1,-1]", "reduce_sum: axis -1 is listed twice"},
    {"reduce_max", "x:f32[2,3]", "axes=[2]",
     "reduce_max: axis 2 is out of range for input x of rank 2"},
    {"reduce_min", "x:bool[2,3]", "",
     "reduce_min: input x has dtype bool; a numeric dtype is required"},
    {"reduce_mean", "x:i32[2,3]", "",
     "reduce_mean: input x has dtype i32; a float dtype is required"},
    {"reduce_prod", "x:f32[2,300]", "axes=1",
     "reduce_prod: axis 1 of input x has 300 elements; at most 256 are supported (the product is "
     "written out)"},
    {"reduce_sum", "x:f32[2,3]", "axis=1", "reduce_sum: unknown attribute 'axis'"},
    {"reduce_sum", "x:f32[2,3]", "keepdims=\"no\"",
     "reduce_sum: attribute keepdims must be 0 or 1"},
    {"argmax", "x:f32[]", "", "argmax: input x is a scalar; it needs at least 1 dimension"},
    {"argmin", "x:f32[2,3]", "axis=-3", "argmin: axis -3 is out of range for input x of rank 2"},
    {"argmax", "x:bool[2,3]", "", "argmax: input x has dtype bool; a numeric dtype is required"},
    {"cumsum", "x:f32[]", "", "cumsum: input x is a scalar; it needs at least 1 dimension"},
    {"cumsum", "x:f32[4]", "axis=1", "cumsum: axis 1 is out of range for input x of rank 1"},
    {"cumsum", "x:f32[4] y:f32[4]", "", "cumsum: expects 1 input, got 2"},
    {"cos", "x:i32[4]", "", "cos: input x has dtype i32; a float dtype is required"},
    {"round", "x:i64[4]", "", "round: input x has dtype i64; a float dtype is required"},
    {"sign", "x:bool[4]", "", "sign: input x has dtype bool; a numeric dtype is required"},
    {"isnan", "x:f32[4] y:f32[4]", "", "isnan: expects 1 input, got 2"},
    {"isinf", "x:f32[4]", "detect_negative=2",
     "isinf: attribute detect_negative must be 0 or 1, got 2"},
    {"mod", "a:i32[4] b:i32[4]", "fmod=-1", "mod: attribute fmod must be 0 or 1, got -1"},
    {"mod", "a:bool[4] b:bool[4]", "fmod=1",
     "mod: input a has dtype bool; a numeric dtype is required"},
    {"mod", "a:i32[4] b:i64[4]", "", "mod: dtypes of a (i32) and b (i64) differ"},
    {"mod", "a:i32[3] b:i32[4]", "", "mod: shapes [3] of a and [4] of b do not broadcast"},
    /* scatter */
    {"scatter_elements", "x:f32[3,4] i:i64[2,4] u:f32[2,4]", "reduction=\"prod\"",
     "scatter_elements: reduction \"prod\" is not one of none, add, mul, max, min"},
    {"scatter_elements", "x:f32[3,4] i:i64[300,4] u:f32[300,4]", "reduction=\"mul\"",
     "scatter_elements: reduction \"mul\" with 300 updates along axis 0; at most 256 are "
     "supported (the product is written out)"},
    {"scatter_elements", "x:f32[3,4] i:f32[2,4] u:f32[2,4]", "",
     "scatter_elements: indices i have dtype f32; an integer dtype (i8, i32, i64) is required"},
    {"scatter_elements", "x:f32[3,4] i:i64[2,4] u:f32[2,3]", "",
     "scatter_elements: updates u [2, 3] must have the shape of indices i [2, 4]"},
    {"scatter_elements", "x:f32[3,4] i:i64[2,5] u:f32[2,5]", "axis=0",
     "scatter_elements: indices i [2, 5] exceed input x [3, 4] in dimension 1"},
    {"scatter_elements", "x:f32[3,4] i:i64[2,4] u:i32[2,4]", "",
     "scatter_elements: updates u have dtype i32; input x has f32"},
    {"scatter_elements", "x:bool[3,4] i:i64[2,4] u:bool[2,4]", "reduction=\"max\"",
     "scatter_elements: input x has dtype bool; a numeric dtype is required"},
    {"scatter_elements", "x:f32[3,4] i:i64[2,4,1] u:f32[2,4,1]", "",
     "scatter_elements: indices i [2, 4, 1] must have the rank of input x [3, 4]"},
    {"scatter_nd", "x:f32[3,4] i:i64[2,3] u:f32[2]", "",
     "scatter_nd: indices i [2, 3] must be [Q, k] with k at most the rank of input x [3, 4]"},
    {"scatter_nd", "x:f32[3,4] i:i64[2,1] u:f32[2,3]", "",
     "scatter_nd: updates u [2, 3] must be [Q] + input x [3, 4]'s dimensions from k = 1"},
    /* interpolation */
    {"resize", "x:f32[2,3]", "", "resize: attribute sizes (the output shape) is required"},
    {"resize", "x:f32[2,3]", "sizes=[4]",
     "resize: attribute sizes has 1 entries; input x has 2 dimensions"},
    {"resize", "x:f32[2,3]", "sizes=[4,0]", "resize: sizes 0 must be positive"},
    {"resize", "x:f32[2,3]", "sizes=[4,6] scales=[2,0]", "resize: scales 0 must be positive"},
    {"resize", "x:f32[2,3]", "sizes=[4,6] scales=[2,2] scale_den=0",
     "resize: scale_den 0 must be positive"},
    {"resize", "x:f32[2,3]", "sizes=[4,6] mode=\"area\"",
     "resize: attribute mode is \"area\"; one of \"nearest\", \"linear\", \"cubic\""},
    {"resize", "x:i32[2,3]", "sizes=[4,6] mode=\"linear\"",
     "resize: input x has dtype i32; a float dtype is required"},
    {"resize", "x:f32[2,3]", "sizes=[4,6] roi=[0,0,1,1]",
     "resize: attribute roi applies only to coordinate_transformation_mode \"tf_crop_and_resize\""},
    {"resize", "x:f32[2,3]",
     "sizes=[4,6] coordinate_transformation_mode=\"tf_crop_and_resize\" roi=[0,1]",
     "resize: attribute roi has 2 entries; input x has 2 dimensions, so 4 (starts, then ends)"},
    {"resize", "x:f32[2,3]", "sizes=[4,6] exclude_outside=2",
     "resize: attribute exclude_outside must be 0 or 1"},
    {"resize", "x:f32[]", "sizes=[]", "resize: input x is a scalar; it needs at least 1 dimension"},
    {"resize", "x:f32[2,3]", "sizes=[4,6] antialias=2",
     "resize: attribute antialias must be 0 or 1"},
    {"resize", "x:f32[200]", "sizes=[2] mode=\"linear\" antialias=1",
     "resize: antialiasing linear interpolation at scale 0.01 reads more than 64 taps along axis "
     "0"},
    {"resize", "x:f32[2,2,2,2,2,2]", "sizes=[3,3,3,3,3,3] mode=\"cubic\"",
     "resize: cubic interpolation over 6 axes reads more than 1024 taps per output"},
    {"scatter_nd", "x:f32[3,4] i:i64[2,1] u:f32[2,4]", "reduction=\"div\"",
     "scatter_nd: reduction \"div\" is not one of none, add, mul, max, min"},
    {"scatter_nd", "x:f32[3,4] i:i64[257,1] u:f32[257,4]", "reduction=\"mul\"",
     "scatter_nd: reduction \"mul\" with 257 index rows; at most 256 are supported (the product "
     "is written out)"},
};

static void
test_errors(void)
{
    for (size_t i = 0; i < KILN_COUNTOF(error_cases); i++) {
        const struct error_case *ec = &error_cases[i];
        struct spec              s;
        uint32_t                 out;
        enum kiln_status         st = build(&s, ec->op, ec->inputs, ec->attrs, &out);
        if (st != KILN_ERR_INVALID || !kiln_ctx_error(s.ctx)) {
            harness_fail(__FILE__, __LINE__, "%s(%s; %s): status %s, want an error: %s", ec->op,
                         ec->inputs, ec->attrs, kiln_status_name(st), ec->msg);
        } else {
            CHECK_EQ_STR(ec->msg, kiln_ctx_error(s.ctx)->msg);
            CHECK_EQ_INT(KILN_NONE, out);
            CHECK_EQ_INT(0, s.g->ncall); /* validation happens before the statement opens */
            CHECK_EQ_INT(0, s.g->nop);
        }
        spec_free(&s);
    }
}

/* Errors carry the location of the offending attribute, or of the call. */
static void
test_error_locations(void)
{
    struct spec s;
    uint32_t    out;
    build(&s, "conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3]", "groups=1 stride=0", &out);
    CHECK_EQ_INT(1, kiln_ctx_error(s.ctx)->loc.line);
    CHECK_EQ_INT(10, kiln_ctx_error(s.ctx)->loc.col); /* the stride attribute */
    spec_free(&s);
    build(&s, "conv2d", "x:f32[1,5,8,8] w:f32[4,3,3,3]", "", &out);
    CHECK_EQ_INT(1, kiln_ctx_error(s.ctx)->loc.line);
    CHECK_EQ_INT(1, kiln_ctx_error(s.ctx)->loc.col); /* the call */
    spec_free(&s);
    /* the output name may not clash with an input */
    memset(&s, 0, sizeof s);
    s.ctx = kiln_ctx_new(NULL);
    s.g = kiln_graph_new(s.ctx);
    declare(&s, "y:f32[2]");
    CHECK_EQ_INT(KILN_ERR_INVALID, kiln_lib_call(s.g, "relu", "y", 1, s.in, 0, NULL, 1, 1, &out));
    CHECK_EQ_STR("tensor y is defined twice", kiln_ctx_error(s.ctx)->msg);
    spec_free(&s);
}

/* ---- the table ---- */

static void
test_table(void)
{
    CHECK(kiln_lib_count() >= 40);
    CHECK(kiln_lib_exists("conv2d"));
    CHECK(kiln_lib_exists("relu"));
    CHECK(!kiln_lib_exists("conv3d"));
    CHECK(kiln_lib_name(kiln_lib_count()) == NULL);
    for (uint32_t i = 0; i < kiln_lib_count(); i++)
        CHECK(kiln_lib_exists(kiln_lib_name(i)));
}

/* ---- structure of the definitions ---- */

/* Display names avoid tensor names, the bias is a second op, extent-1 kernels have no
 * reduction variables, and padding guards appear only where needed. */
static void
test_structure(void)
{
    struct spec s;
    uint32_t    out;
    CHECK_EQ_INT(KILN_OK,
                 build(&s, "conv2d", "x:f32[1,3,8,8] w:f32[4,3,3,3] b:f32[4]", "padding=1", &out));
    CHECK_EQ_INT(2, s.g->nop);
    CHECK_EQ_STR("y.conv", kiln_graph_tensor_name(s.g, s.g->op[0].out));
    CHECK_EQ_STR("n", kiln_sym_str(s.ctx, s.g->op[0].axname[0]));
    CHECK_EQ_STR("w2", kiln_sym_str(s.ctx, s.g->op[0].axname[3])); /* w is the weight */
    CHECK_EQ_STR("rc", kiln_sym_str(s.ctx, s.g->op[0].rname[0]));
    CHECK_EQ_INT(KILN_REDUCE_SUM, s.g->op[0].reduce);
    CHECK_EQ_INT(3, s.g->op[0].nred);
    CHECK_EQ_INT(KILN_REDUCE_NONE, s.g->op[1].reduce);
    spec_free(&s);

    /* 1x1 depthwise: no reduction at all */
    CHECK_EQ_INT(KILN_OK, build(&s, "conv2d", "x:f32[1,3,8,8] k:f32[3,1,1,1]", "groups=3", &out));
    CHECK_EQ_INT(KILN_REDUCE_NONE, s.g->op[0].reduce);
    spec_free(&s);

    /* no padding: no select in the body */
    CHECK_EQ_INT(KILN_OK, build(&s, "conv2d", "x:f32[1,3,8,8] k:f32[4,3,3,3]", "", &out));
    CHECK(kiln_node_get(s.ctx, s.g->op[0].body)->op == KILN_OP_MUL);
    spec_free(&s);

    /* softmax intermediates */
    CHECK_EQ_INT(KILN_OK, build(&s, "softmax", "x:f32[2,5]", "", &out));
    CHECK_EQ_STR("y.max", kiln_graph_tensor_name(s.g, s.g->op[0].out));
    CHECK_EQ_STR("y.exp", kiln_graph_tensor_name(s.g, s.g->op[1].out));
    CHECK_EQ_STR("y.sum", kiln_graph_tensor_name(s.g, s.g->op[2].out));
    CHECK_EQ_STR("y", kiln_graph_tensor_name(s.g, s.g->op[3].out));
    CHECK_EQ_INT(KILN_REDUCE_MAX, s.g->op[0].reduce);
    CHECK_EQ_INT(1, s.g->tensor[s.g->op[0].out].ndim);
    CHECK_EQ_STR("j", kiln_sym_str(s.ctx, s.g->op[0].rname[0]));
    spec_free(&s);

    /* einsum names variables after the labels */
    CHECK_EQ_INT(KILN_OK, build(&s, "einsum", "a:f32[2,3] b:f32[3,4]", "eq=\"ij,jk->ik\"", &out));
    CHECK_EQ_STR("i", kiln_sym_str(s.ctx, s.g->op[0].axname[0]));
    CHECK_EQ_STR("k", kiln_sym_str(s.ctx, s.g->op[0].axname[1]));
    CHECK_EQ_STR("j", kiln_sym_str(s.ctx, s.g->op[0].rname[0]));
    spec_free(&s);

    /* same computation, same hash: einsum matmul and matmul */
    struct spec s2;
    uint32_t    out2;
    build(&s, "einsum", "a:f32[2,3] b:f32[3,4]", "eq=\"ij,jk->ik\"", &out);
    build(&s2, "matmul", "a:f32[2,3] b:f32[3,4]", "", &out2);
    kiln_graph_mark_output(s.g, out);
    kiln_graph_mark_output(s2.g, out2);
    CHECK_EQ_INT(kiln_graph_hash(s.g), kiln_graph_hash(s2.g));
    spec_free(&s);
    spec_free(&s2);
}

/* ---- values (reference interpreter) ---- */

/* Builds the call, fills input i with data[i] and evaluates; returns false (after skipping or
 * failing) when that is not possible. out receives numel(y) values. */
static bool
run(const char *op, const char *inputs, const char *attrs, const double *const *data, double *outv,
    size_t nout)
{
    struct spec s;
    uint32_t    out;
    bool        ok = false;
    if (build(&s, op, inputs, attrs, &out) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s(%s; %s): %s", op, inputs, attrs,
                     kiln_ctx_error(s.ctx)->msg);
    } else if ((size_t)kiln_tensor_numel(&s.g->tensor[out]) != nout) {
        harness_fail(__FILE__, __LINE__, "%s: %lld output elements, want %zu", op,
                     (long long)kiln_tensor_numel(&s.g->tensor[out]), nout);
    } else {
        kiln_graph_mark_output(s.g, out);
        double          *outs[1] = {outv};
        enum kiln_status st = kiln_graph_eval(s.ctx, s.g, data, outs);
        if (st == KILN_ERR_UNSUPPORTED)
            harness_skip("the reference interpreter is not available");
        else if (st != KILN_OK)
            harness_fail(__FILE__, __LINE__, "%s: eval: %s", op, kiln_ctx_error(s.ctx)->msg);
        else
            ok = true;
    }
    spec_free(&s);
    return ok;
}

#define EXPECT(op, inputs, attrs, data, ...)                                                       \
    do {                                                                                           \
        const double want_[] = {__VA_ARGS__};                                                      \
        double       got_[KILN_COUNTOF(want_)];                                                    \
        if (run(op, inputs, attrs, data, got_, KILN_COUNTOF(want_)))                               \
            for (size_t i_ = 0; i_ < KILN_COUNTOF(want_); i_++)                                    \
                if (!(fabs(want_[i_] - got_[i_]) <= 1e-12 * (1 + fabs(want_[i_]))))                \
                    harness_fail(__FILE__, __LINE__, "%s(%s; %s)[%zu]: want %.17g, got %.17g", op, \
                                 inputs, attrs, i_, want_[i_], got_[i_]);                          \
    } while (0)

static void
test_values_conv(void)
{
    static const double x9[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    static const double ones[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    static const double w4[] = {1, 2, 3, 4};
    const double       *xw[] = {x9, ones};
    /* 2x2 window sums of the 3x3 ramp */
    EXPECT("conv2d", "x:f64[1,1,3,3] w:f64[1,1,2,2]", "", xw, 12, 16, 24, 28);
    /* padding 1, stride 2: corners of the padded input see one, two or four elements */
    EXPECT("conv2d", "x:f64[1,1,3,3] w:f64[1,1,2,2]", "padding=1 stride=2", xw, 1, 5, 11, 28);
    /* asymmetric padding [top, left, bottom, right] = [0, 0, 1, 1] */
    EXPECT("conv2d", "x:f64[1,1,3,3] w:f64[1,1,2,2]", "padding=[0,0,1,1] stride=2", xw, 12, 9, 15,
           9);
    /* weights matter: [[1,2],[3,4]] over the top-left window 1 2 / 4 5 = 1+4+12+20 */
    const double *xw4[] = {x9, w4};
    EXPECT("conv2d", "x:f64[1,1,3,3] w:f64[1,1,2,2]", "stride=2", xw4, 37);
    /* dilation 2 over the corners 1, 3, 7, 9 */
    EXPECT("conv2d", "x:f64[1,1,3,3] w:f64[1,1,2,2]", "dilation=2", xw4, 1 + 6 + 21 + 36);
    /* bias */
    static const double b1[] = {0.5};
    const double       *xwb[] = {x9, ones, b1};
    EXPECT("conv2d", "x:f64[1,1,3,3] w:f64[1,1,2,2] b:f64[1]", "stride=2", xwb, 12.5);
    /* depthwise over two channels with per-channel scale */
    static const double x2[] = {1, 2, 3, 4, 10, 20, 30, 40};
    static const double s2[] = {2, -1};
    const double       *xs[] = {x2, s2};
    EXPECT("conv2d", "x:f64[1,2,2,2] w:f64[2,1,1,1]", "groups=2", xs, 2, 4, 6, 8, -10, -20, -30,
           -40);
    /* transposed: 1x1 input scattered by a 2x2 kernel with stride 2 */
    static const double one[] = {3};
    const double       *tw[] = {one, w4};
    EXPECT("conv2d_transpose", "x:f64[1,1,1,1] w:f64[1,1,2,2]", "", tw, 3, 6, 9, 12);
    /* stride 2 over a 1x2 input: the two kernel copies do not overlap */
    static const double x12[] = {1, 10};
    static const double k12[] = {1, 2};
    const double       *tw2[] = {x12, k12};
    EXPECT("conv2d_transpose", "x:f64[1,1,1,2] w:f64[1,1,1,2]", "stride=2", tw2, 1, 2, 10, 20);
    /* stride 1: overlapping copies add */
    EXPECT("conv2d_transpose", "x:f64[1,1,1,2] w:f64[1,1,1,2]", "", tw2, 1, 12, 20);
    /* padding crops, output_padding extends at the end with zeros here */
    EXPECT("conv2d_transpose", "x:f64[1,1,1,2] w:f64[1,1,1,2]",
           "stride=2 padding=[0,1] output_padding=[0,1]", tw2, 2, 10, 20);
}

static void
test_values_linalg(void)
{
    static const double a6[] = {1, 2, 3, 4, 5, 6};
    static const double b6[] = {1, 0, 0, 1, 1, 1};
    const double       *ab[] = {a6, b6};
    /* [2,3] x [3,2] */
    EXPECT("matmul", "a:f64[2,3] b:f64[3,2]", "", ab, 4, 5, 10, 11);
    /* dot product of 1-D vectors */
    EXPECT("matmul", "a:f64[6] b:f64[6]", "", ab, 1 + 4 + 5 + 6);
    /* dense = x w^T: rows of b6 as [2,3] weights: (1,0,0), (1,1,1) */
    EXPECT("dense", "a:f64[2,3] b:f64[2,3]", "", ab, 1, 6, 4, 15);
    EXPECT("einsum", "a:f64[2,3] b:f64[2,3]", "eq=\"ij,ij->\"", ab, 1 + 4 + 5 + 6);
    static const double m9[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const double       *m[] = {m9};
    EXPECT("einsum", "a:f64[3,3]", "eq=\"ii\"", m, 15);
    EXPECT("einsum", "a:f64[3,3]", "eq=\"ii->i\"", m, 1, 5, 9);
    EXPECT("einsum", "a:f64[3,3]", "eq=\"ij->j\"", m, 12, 15, 18);
    EXPECT("batch_matmul", "a:f64[1,2,3] b:f64[1,2,3]", "transpose_b=1", ab, 1, 6, 4, 15);
}

static void
test_values_nn(void)
{
    static const double x16[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    const double       *x[] = {x16};
    EXPECT("max_pool2d", "x:f64[1,1,4,4]", "kernel=2", x, 6, 8, 14, 16);
    /* ceil_mode adds a partial window at the end */
    EXPECT("max_pool2d", "x:f64[1,1,4,4]", "kernel=3 stride=2 ceil_mode=1", x, 11, 12, 15, 16);
    /* padding reads -inf: corners of the padded input see only x[0,0] etc. */
    EXPECT("max_pool2d", "x:f64[1,1,4,4]", "kernel=3 stride=3 padding=1", x, 6, 8, 14, 16);
    EXPECT("avg_pool2d", "x:f64[1,1,4,4]", "kernel=2", x, 3.5, 5.5, 11.5, 13.5);
    /* count_include_pad: the corner window covers 1 2 / 5 6 among 9 cells */
    EXPECT("avg_pool2d", "x:f64[1,1,4,4]", "kernel=3 stride=3 padding=1", x, 14.0 / 9,
           (3 + 4 + 7 + 8) / 9.0, (9 + 10 + 13 + 14) / 9.0, (11 + 12 + 15 + 16) / 9.0);
    EXPECT("avg_pool2d", "x:f64[1,1,4,4]", "kernel=3 stride=3 padding=1 count_include_pad=0", x,
           14.0 / 4, 22.0 / 4, 46.0 / 4, 54.0 / 4);
    /* ceil_mode window past the padded end divides by what remains (6 of 9 cells) */
    EXPECT("avg_pool2d", "x:f64[1,1,4,4]", "kernel=3 stride=2 ceil_mode=1", x,
           (1 + 2 + 3 + 5 + 6 + 7 + 9 + 10 + 11) / 9.0, (3 + 4 + 7 + 8 + 11 + 12) / 6.0,
           (9 + 10 + 11 + 13 + 14 + 15) / 6.0, (11 + 12 + 15 + 16) / 4.0);
    EXPECT("global_avg_pool2d", "x:f64[1,1,4,4]", "", x, 8.5);
    EXPECT("global_max_pool2d", "x:f64[1,1,4,4]", "", x, 16);
    /* unfold of the top-left 2x2 with stride 2: kernel position (kh, kw) over 2x2 outputs */
    EXPECT("unfold", "x:f64[1,1,4,4]", "kernel=2 stride=2", x, 1, 3, 9, 11, 2, 4, 10, 12, 5, 7, 13,
           15, 6, 8, 14, 16);
    EXPECT("unfold", "x:f64[1,1,4,4]", "kernel=[1,2] stride=3 padding=[0,1]", x, 0, 3, 0, 15, 1, 4,
           13, 16);

    static const double v3[] = {1, 2, 3};
    const double       *v[] = {v3};
    double              z = exp(1) + exp(2) + exp(3);
    EXPECT("softmax", "x:f64[3]", "", v, exp(1) / z, exp(2) / z, exp(3) / z);
    EXPECT("log_softmax", "x:f64[3]", "", v, 1 - log(z), 2 - log(z), 3 - log(z));
    /* softmax over axis 0 of a [3,1] column */
    EXPECT("softmax", "x:f64[3,1]", "axis=0", v, exp(1) / z, exp(2) / z, exp(3) / z);
    /* large inputs do not overflow */
    static const double big[] = {1000, 1000};
    const double       *bg[] = {big};
    EXPECT("softmax", "x:f64[2]", "", bg, 0.5, 0.5);

    /* batch_norm: (x - mean) / sqrt(var + eps) * gamma + beta, per channel */
    static const double xb[] = {1, 2, 3, 4};
    static const double g[] = {2, 1}, b[] = {0, 1}, mu[] = {1, 0}, var[] = {4, 1};
    const double       *bn[] = {xb, g, b, mu, var};
    EXPECT("batch_norm", "x:f64[2,2] g:f64[2] b:f64[2] m:f64[2] v:f64[2]", "eps=0", bn, 0, 3, 2, 5);
    /* the same along axis 0 (axis=-2): x's rows are the channels */
    EXPECT("batch_norm", "x:f64[2,2] g:f64[2] b:f64[2] m:f64[2] v:f64[2]", "eps=0 axis=-2", bn, 0,
           1, 4, 5);
    /* layer_norm over [1, 2, 3]: mean 2, variance 2/3 */
    double s = 1 / sqrt(2.0 / 3 + 1e-5);
    EXPECT("layer_norm", "x:f64[3]", "", v, -s, 0, s);
    static const double gl[] = {1, 2, 3}, bl[] = {1, 1, 1};
    const double       *ln[] = {v3, gl, bl};
    EXPECT("layer_norm", "x:f64[3] g:f64[3] b:f64[3]", "eps=0", ln, 1 - sqrt(1.5), 1,
           1 + 3 * sqrt(1.5));
}

static void
test_values_elem(void)
{
    static const double v4[] = {-2, -0.5, 0, 1.5};
    const double       *v[] = {v4};
    EXPECT("relu", "x:f64[4]", "", v, 0, 0, 0, 1.5);
    EXPECT("leaky_relu", "x:f64[4]", "alpha=0.1", v, -0.2, -0.05, 0, 1.5);
    EXPECT("abs", "x:f64[4]", "", v, 2, 0.5, 0, 1.5);
    EXPECT("square", "x:f64[4]", "", v, 4, 0.25, 0, 2.25);
    EXPECT("floor", "x:f64[4]", "", v, -2, -1, 0, 1);
    EXPECT("ceil", "x:f64[4]", "", v, -2, -0.0, 0, 2);
    EXPECT("round", "x:f64[4]", "", v, -2, -0.0, 0, 2);
    EXPECT("sign", "x:f64[4]", "", v, -1, -1, 0, 1);
    EXPECT("sin", "x:f64[4]", "", v, sin(-2), sin(-0.5), 0, sin(1.5));
    EXPECT("atan", "x:f64[4]", "", v, atan(-2), atan(-0.5), 0, atan(1.5));
    EXPECT("neg", "x:f64[4]", "", v, 2, 0.5, 0, -1.5);
    EXPECT("gelu", "x:f64[4]", "", v, -2 * 0.5 * (1 + erf(-2 / sqrt(2))),
           -0.5 * 0.5 * (1 + erf(-0.5 / sqrt(2))), 0, 1.5 * 0.5 * (1 + erf(1.5 / sqrt(2))));
    EXPECT("silu", "x:f64[4]", "", v, -2 / (1 + exp(2)), -0.5 / (1 + exp(0.5)), 0,
           1.5 / (1 + exp(-1.5)));
    static const double col[] = {1, 2}, row[] = {10, 20, 30};
    const double       *cr[] = {col, row};
    EXPECT("add", "a:f64[2,1] b:f64[3]", "", cr, 11, 21, 31, 12, 22, 32);
    EXPECT("sub", "a:f64[2,1] b:f64[3]", "", cr, -9, -19, -29, -8, -18, -28);
    EXPECT("maximum", "a:f64[2,1] b:f64[1]", "", cr, 10, 10);
    EXPECT("pow", "a:f64[2,1] b:f64[1,1]", "", cr, 1, 1024);
}

static void
test_values_tensor(void)
{
    static const double x6[] = {0, 1, 2, 3, 4, 5};
    const double       *x[] = {x6};
    EXPECT("transpose", "x:f64[2,3]", "", x, 0, 3, 1, 4, 2, 5);
    EXPECT("reshape", "x:f64[2,3]", "shape=[3,2]", x, 0, 1, 2, 3, 4, 5);
    EXPECT("reshape", "x:f64[2,3]", "shape=[3,1,2]", x, 0, 1, 2, 3, 4, 5);
    EXPECT("flatten", "x:f64[2,3]", "axis=0", x, 0, 1, 2, 3, 4, 5);
    EXPECT("slice", "x:f64[2,3]", "starts=[-1] ends=[-1000] axes=[1] steps=[-2]", x, 2, 0, 5, 3);
    EXPECT("slice", "x:f64[6]", "starts=[1] ends=[6] steps=[2]", x, 1, 3, 5);
    EXPECT("pad", "x:f64[2,3]", "pads=[0,1,0,1] value=-1", x, -1, 0, 1, 2, -1, -1, 3, 4, 5, -1);
    EXPECT("pad", "x:f64[6]", "pads=[2,2] mode=\"reflect\"", x, 2, 1, 0, 1, 2, 3, 4, 5, 4, 3);
    EXPECT("pad", "x:f64[6]", "pads=[2,1] mode=\"edge\"", x, 0, 0, 0, 1, 2, 3, 4, 5, 5);
    EXPECT("pad", "x:f64[6]", "pads=[-2,-3]", x, 2);
    static const double a[] = {1, 2}, b[] = {3, 4, 5, 6};
    const double       *ab[] = {a, b};
    EXPECT("concat", "a:f64[2,1] b:f64[2,2]", "axis=1", ab, 1, 3, 4, 2, 5, 6);
    EXPECT("concat", "a:f64[2] b:f64[4]", "", ab, 1, 2, 3, 4, 5, 6);
}

static const struct test tests[] = {
    {"table", test_table},
    {"shapes", test_shapes},
    {"shapes_random", test_shapes_random},
    {"round_trip", test_round_trip},
    {"errors", test_errors},
    {"error_locations", test_error_locations},
    {"structure", test_structure},
    {"values_conv", test_values_conv},
    {"values_linalg", test_values_linalg},
    {"values_nn", test_values_nn},
    {"values_elem", test_values_elem},
    {"values_tensor", test_values_tensor},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
