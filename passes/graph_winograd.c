/* passes/graph_winograd.c -- Winograd convolutions (kiln_graph_winograd): rebuilds a graph
 * (graph_rebuild.c) computing each eligible 3x3 convolution as Winograd's F(2x2, 3x3) or
 * F(4x4, 3x3): input transform, batched products with weights transformed at compile time,
 * output transform (ir/lib_wino.c, passes/README.md). */
#include "graph_rebuild.h"

#include <string.h>

/* A convolution is rewritten when its output has at least this many 2x2 tiles (a 14x14 output
 * per image): the transformed weights are 16/9 the size of the kernel and every tile reuses
 * them. At 7x7 (16 tiles, ResNet-18's last stage, 512 channels) the 16 batched products have
 * 16 rows each and stream 16 MB of transformed weights per convolution, where the direct
 * convolution reads 9.4 MB for 2.25x the multiplications. With at least WINO4_MIN_TILES tiles
 * of 4x4 (a 56x56 output) it uses F(4x4, 3x3): 4x fewer multiplications, transformed weights
 * 4x the kernel's size, 2.25 transformed elements per output pixel instead of 4. Tuned for 64
 * trials, a 56x56x64 block (products, output transform, relu, next input transform) took
 * 384 us with 4x4 tiles against 599 us with 2x2; at 28x28x128 (49 tiles of 4x4) 483 against
 * 423, so 2x2 tiles stay there. */
#define WINO_MIN_TILES  49
#define WINO4_MIN_TILES 196

struct wino_conv {
    int64_t pad[4]; /* top, left, bottom, right */
    int64_t oh, ow;
    int64_t m; /* output tile: F(m x m, 3x3) */
    bool    nhwc;
};

static bool
attr_ones(const struct facts *f, const struct kiln_call *call, const char *name)
{
    const struct kiln_attr *a = kiln_gr_find_attr(f, call, name);
    if (!a)
        return true;
    if (a->kind == KILN_ATTR_INT)
        return a->i == 1;
    if (a->kind != KILN_ATTR_INTS)
        return false;
    for (uint32_t i = 0; i < a->n; i++)
        if (a->ints[i] != 1)
            return false;
    return true;
}

/* The convolution's padding as top, left, bottom, right; false for a form not understood. */
static bool
attr_pad(const struct facts *f, const struct kiln_call *call, int64_t pad[4])
{
    const struct kiln_attr *a = kiln_gr_find_attr(f, call, "padding");
    int64_t                 p[4] = {0, 0, 0, 0};
    if (a && a->kind == KILN_ATTR_INT) {
        p[0] = p[1] = p[2] = p[3] = a->i;
    } else if (a && a->kind == KILN_ATTR_INTS && (a->n == 2 || a->n == 4)) {
        for (uint32_t i = 0; i < 4; i++)
            p[i] = a->ints[a->n == 2 ? i % 2 : i];
    } else if (a && a->kind == KILN_ATTR_STRING && !strcmp(a->s, "same")) {
        p[0] = p[1] = p[2] = p[3] = 1; /* a 3x3 kernel at stride 1 */
    } else if (a && !(a->kind == KILN_ATTR_STRING && !strcmp(a->s, "valid"))) {
        return false;
    }
    memcpy(pad, p, sizeof p);
    return true;
}

/* Whether statement c is a conv2d that F(2x2, 3x3) computes: a 3x3 kernel of known values,
 * stride 1, dilation 1, one group, a float dtype, enough tiles. */
static bool
wino_eligible(const struct facts *f, uint32_t c, struct wino_conv *wc)
{
    const struct kiln_graph *g = f->g;
    const struct kiln_call  *call = &g->call[c];
    if (!kiln_gr_call_is(f, c, "conv2d") || call->nin < 2 || !kiln_gr_arg_values(f, call->in[1]))
        return false;
    const struct kiln_tensor *x = &g->tensor[call->in[0]], *w = &g->tensor[call->in[1]];
    const struct kiln_tensor *y = &g->tensor[call->out];
    const struct kiln_attr   *lay = kiln_gr_find_attr(f, call, "layout");
    if (w->ndim != 4 || x->ndim != 4 || w->shape[2] != 3 || w->shape[3] != 3
        || (w->dtype != KILN_DTYPE_F32 && w->dtype != KILN_DTYPE_F64)
        || !attr_ones(f, call, "stride") || !attr_ones(f, call, "dilation")
        || !attr_ones(f, call, "groups") || !attr_pad(f, call, wc->pad)
        || (lay && lay->kind != KILN_ATTR_STRING))
        return false;
    wc->nhwc = lay && !strcmp(lay->s, "nhwc");
    int64_t C = x->shape[wc->nhwc ? 3 : 1], H = x->shape[wc->nhwc ? 1 : 2];
    int64_t W = x->shape[wc->nhwc ? 2 : 3];
    wc->oh = H + wc->pad[0] + wc->pad[2] - 2;
    wc->ow = W + wc->pad[1] + wc->pad[3] - 2;
    if (w->shape[1] != C || y->ndim != 4 || y->shape[wc->nhwc ? 1 : 2] != wc->oh
        || y->shape[wc->nhwc ? 2 : 3] != wc->ow)
        return false;
    wc->m = x->shape[0] * ((wc->oh + 3) / 4) * ((wc->ow + 3) / 4) >= WINO4_MIN_TILES ? 4 : 2;
    return x->shape[0] * ((wc->oh + 1) / 2) * ((wc->ow + 1) / 2) >= WINO_MIN_TILES;
}

/* U[e, c, k] = (G w[k, c] G^T)[e / a, e % a] for F(m x m, 3x3), a = m + 2, in double (ir/lib_wino.c
 * has the matrices). */
static double *
wino_weights(kiln_ctx *ctx, const double *w, int64_t K, int64_t C, int64_t m)
{
    static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    static const double G4[6][3] = {{1.0 / 4, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}};
    const double(*G)[3] = m == 2 ? G2 : G4;
    int     a = (int)m + 2;
    double *u = kiln_arena_alloc(ctx, sizeof(double) * (size_t)(a * a * C * K));
    if (!u)
        return NULL;
    for (int64_t k = 0; k < K; k++)
        for (int64_t c = 0; c < C; c++) {
            const double *g = w + (k * C + c) * 9;
            double        t[6][3]; /* G g */
            for (int i = 0; i < a; i++)
                for (int s = 0; s < 3; s++)
                    t[i][s] = G[i][0] * g[s] + G[i][1] * g[3 + s] + G[i][2] * g[6 + s];
            for (int i = 0; i < a; i++)
                for (int j = 0; j < a; j++)
                    u[((i * a + j) * C + c) * K + k] =
                        t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2];
        }
    return u;
}

/* Emits conv2d statement c as winograd_input, batch_matmul with the transformed weights, and
 * winograd_output (with the bias), the last defining the convolution's output under its name. */
static enum kiln_status
emit_winograd(struct rebuild *r, uint32_t c, const struct wino_conv *wc)
{
    kiln_ctx                 *ctx = r->ctx;
    const struct kiln_graph  *g = r->f->g;
    const struct kiln_call   *call = &g->call[c];
    const struct kiln_tensor *wt = &g->tensor[call->in[1]];
    const char               *yname = kiln_sym_str(ctx, g->tensor[call->out].name);
    const char               *wname = kiln_sym_str(ctx, wt->name);
    int64_t                   K = wt->shape[0], C = wt->shape[1];
    uint32_t                  x = kiln_gr_get(r, call->in[0]), b = KILN_NONE;
    if (x == KILN_NONE || (call->nin == 3 && (b = kiln_gr_get(r, call->in[2])) == KILN_NONE))
        return ctx->err.status;
    const double      *u = wino_weights(ctx, kiln_gr_arg_values(r->f, call->in[1]), K, C, wc->m);
    int64_t            a = wc->m + 2;
    struct kiln_tensor ut = {.dtype = wt->dtype, .ndim = 3, .shape = {a * a, C, K}};
    const char *uname = kiln_gr_fresh_name(r, kiln_arena_printf(ctx, "%s_wino", wname), KILN_NONE);
    uint32_t    ua;
    if (!u || !uname || (ua = kiln_gr_add_arg(r, uname, &ut, KILN_TENSOR_WEIGHT, u)) == KILN_NONE)
        return ctx->err.status;
    int64_t          size[2] = {wc->oh, wc->ow};
    struct kiln_attr lay = {.name = kiln_sym(ctx, "layout", 6),
                            .kind = KILN_ATTR_STRING,
                            .s = wc->nhwc ? "nhwc" : "nchw",
                            .line = call->line,
                            .col = call->col};
    struct kiln_attr tile = {.name = kiln_sym(ctx, "tile", 4),
                             .kind = KILN_ATTR_INT,
                             .i = wc->m,
                             .line = call->line,
                             .col = call->col};
    struct kiln_attr in_attr[3] = {{.name = kiln_sym(ctx, "padding", 7),
                                    .kind = KILN_ATTR_INTS,
                                    .n = 4,
                                    .ints = wc->pad,
                                    .line = call->line,
                                    .col = call->col},
                                   lay,
                                   tile};
    struct kiln_attr out_attr[3] = {{.name = kiln_sym(ctx, "size", 4),
                                     .kind = KILN_ATTR_INTS,
                                     .n = 2,
                                     .ints = size,
                                     .line = call->line,
                                     .col = call->col},
                                    lay,
                                    tile};
    const char *vname = kiln_gr_fresh_name(r, kiln_arena_printf(ctx, "%s_wi", yname), KILN_NONE);
    const char *mname = kiln_gr_fresh_name(r, kiln_arena_printf(ctx, "%s_wm", yname), KILN_NONE);
    const char *oname = kiln_gr_fresh_name(r, yname, call->out);
    uint32_t    v, m;
    if (!vname || !mname || !oname)
        return ctx->err.status;
    KILN_TRY(kiln_lib_call(r->ng, "winograd_input", vname, 1, &x, 3, in_attr, call->line, call->col,
                           &v));
    uint32_t mm[2] = {v, ua};
    KILN_TRY(
        kiln_lib_call(r->ng, "batch_matmul", mname, 2, mm, 0, NULL, call->line, call->col, &m));
    uint32_t oin[2] = {m, b};
    return kiln_lib_call(r->ng, "winograd_output", oname, b == KILN_NONE ? 1 : 2, oin, 3, out_attr,
                         call->line, call->col, &r->map[call->out]);
}

static enum kiln_status
winograd(const struct facts *f, struct rebuild *out, uint32_t *converted)
{
    const struct kiln_graph *g = f->g;
    KILN_TRY(kiln_gr_rebuild_init(out, f));
    KILN_TRY(kiln_gr_add_inputs(out));
    for (uint32_t c = 0; c < g->ncall; c++) {
        struct wino_conv wc;
        if (wino_eligible(f, c, &wc)) {
            KILN_TRY(emit_winograd(out, c, &wc));
            (*converted)++;
        } else {
            KILN_TRY(kiln_gr_copy_call(out, c));
        }
    }
    return kiln_gr_mark_outputs(out, g->output, g->noutput);
}

enum kiln_status
kiln_graph_winograd(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
                    struct kiln_graph **out, const double *const **weights_out, uint32_t *converted)
{
    return kiln_gr_rewrite(ctx, g, weights, "winograd", winograd, out, weights_out, converted);
}
