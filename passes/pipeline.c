/* passes/pipeline.c -- the graph pipeline (kiln_graph_optimize): the graph passes a model goes
 * through before it is compiled, in order. The table below *is* the pipeline; a pass is added
 * by adding a line to it, a name to the names and an enumerator to enum kiln_graph_pass
 * (include/kiln.h). Each pass checks the graph it is given (kiln_graph_verify) and verifies the
 * graph it builds, so the graphs between passes are verified. */
#include "passes.h"

/* One pass: g and its weights in, the new graph and weights out, what it did into rep. */
typedef enum kiln_status (*graph_pass_fn)(kiln_ctx *ctx, const struct kiln_graph *g,
                                          const double *const *w, struct kiln_graph **out,
                                          const double *const        **w_out,
                                          struct kiln_optimize_report *rep);

static enum kiln_status
simplify(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *w, struct kiln_graph **out,
         const double *const **w_out, struct kiln_optimize_report *rep)
{
    return kiln_graph_simplify(ctx, g, w, out, w_out, &rep->simplify);
}

static enum kiln_status
channels_last(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *w,
              struct kiln_graph **out, const double *const **w_out,
              struct kiln_optimize_report *rep)
{
    KILN_TRY(kiln_graph_channels_last(ctx, g, w, out, w_out, &rep->channels_last));
    rep->transposes_added = (*out)->ncall - g->ncall;
    return KILN_OK;
}

static enum kiln_status
winograd(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *w, struct kiln_graph **out,
         const double *const **w_out, struct kiln_optimize_report *rep)
{
    return kiln_graph_winograd(ctx, g, w, out, w_out, &rep->winograd);
}

static const struct {
    enum kiln_graph_pass pass;
    graph_pass_fn        run;
} pipeline[] = {
    {KILN_GRAPH_PASS_SIMPLIFY, simplify},           /* fold first: fewer statements to move */
    {KILN_GRAPH_PASS_CHANNELS_LAST, channels_last}, /* layouts settled before Winograd reads them */
    {KILN_GRAPH_PASS_WINOGRAD, winograd},           /* keeps each convolution's layout */
};

static const char *const pass_name[KILN_GRAPH_PASS_COUNT] = {
    [KILN_GRAPH_PASS_SIMPLIFY] = "simplify",
    [KILN_GRAPH_PASS_CHANNELS_LAST] = "channels-last",
    [KILN_GRAPH_PASS_WINOGRAD] = "winograd",
};

const char *
kiln_graph_pass_name(enum kiln_graph_pass pass)
{
    return (unsigned)pass < KILN_GRAPH_PASS_COUNT ? pass_name[pass] : NULL;
}

enum kiln_status
kiln_graph_optimize(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *weights,
                    const struct kiln_optimize_options *options, struct kiln_graph **out,
                    const double *const **weights_out, struct kiln_optimize_report *report)
{
    static const struct kiln_optimize_options all = {0};
    const struct kiln_optimize_options       *opt = options ? options : &all;
    struct kiln_optimize_report               rep = {0};
    *out = NULL;
    if (weights_out)
        *weights_out = NULL;
    if (report)
        *report = rep;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    /* the result of a pass is the next one's input; g itself when every pass is off */
    struct kiln_graph   *cur = (struct kiln_graph *)g;
    const double *const *w = weights;
    for (size_t i = 0; i < sizeof pipeline / sizeof pipeline[0]; i++) {
        struct kiln_graph   *next;
        const double *const *nw;
        if (opt->skip & (1u << pipeline[i].pass))
            continue;
        KILN_TRY(pipeline[i].run(ctx, cur, w, &next, &nw, &rep));
        rep.ran[pipeline[i].pass] = 1;
        cur = next;
        w = nw;
        if (opt->dump) {
            opt->dump(opt->user, pipeline[i].pass, cur);
            if (!kiln_ok(ctx)) /* the hook failed (kiln_graph_print ran out of memory) */
                return ctx->err.status;
        }
    }
    *out = cur;
    if (weights_out)
        *weights_out = w;
    if (report)
        *report = rep;
    return KILN_OK;
}
