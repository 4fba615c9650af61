/* passes/graph_rebuild.h -- private to the graph passes (graph_simplify.c, graph_channels_last.c,
 * graph_winograd.c, graph_rebuild.c): what a graph reads and defines per statement (struct facts)
 * and the machinery that rebuilds a graph into a new one statement by statement (struct
 * rebuild), copying the statements a pass keeps with their loads retargeted. Other files use
 * the include/kiln.h entry points (kiln_graph_simplify, kiln_graph_channels_last,
 * kiln_graph_winograd, kiln_graph_optimize). */
#ifndef KILN_GRAPH_REBUILD_H
#define KILN_GRAPH_REBUILD_H

#include "passes.h"

/* What a graph reads and defines, per statement. */
struct facts {
    kiln_ctx                *ctx;
    const struct kiln_graph *g;
    const double *const     *w;       /* per argument: values, NULL when unknown */
    uint32_t                *argpos;  /* tensor -> argument index, KILN_NONE */
    uint32_t                *defcall; /* tensor -> statement defining it, KILN_NONE */
    uint32_t               **rd;      /* per statement: distinct tensors read from outside it */
    uint32_t                *nrd;
};
/* A graph being rebuilt from the one facts f describe. */
struct rebuild {
    kiln_ctx           *ctx;
    const struct facts *f;
    struct kiln_graph  *ng;
    uint32_t           *map;   /* old tensor -> new tensor, KILN_NONE */
    uint32_t           *alias; /* old tensor -> old tensor read in its place, KILN_NONE */
    const double      **val;   /* old op tensor -> values when it becomes a weight */
    const double      **nw;    /* per argument of ng: values, NULL for inputs and unknowns */
    uint32_t            nnw, capnw;
    uint32_t           *nhwc; /* channels_last: old 4-D tensor -> new tensor holding it NHWC */
};

/* ---- facts (graph_rebuild.c) ---- */
/* Fills f for graph g with weight values w (may be NULL); fails when a definition belongs to
 * no statement. */
enum kiln_status kiln_gr_facts_init(struct facts *f, kiln_ctx *ctx, const struct kiln_graph *g,
                                    const double *const *w);
/* Known values of tensor t when it is a weight argument, else NULL. */
const double *kiln_gr_arg_values(const struct facts *f, uint32_t t);
/* Whether statement c is a library call of this kind. */
bool kiln_gr_call_is(const struct facts *f, uint32_t c, const char *kind);
/* Statement call's attribute of this name, NULL when absent. */
const struct kiln_attr *kiln_gr_find_attr(const struct facts *f, const struct kiln_call *call,
                                          const char *name);

/* ---- rebuilding (graph_rebuild.c) ---- */
/* The old tensor read in place of t (through r->alias), t itself when none. */
uint32_t kiln_gr_resolve(const struct rebuild *r, uint32_t t);
/* Starts r: an empty new graph, every old tensor unmapped. */
enum kiln_status kiln_gr_rebuild_init(struct rebuild *r, const struct facts *f);
/* A name for a new tensor based on base, free in both graphs (or naming old tensor self). */
const char *kiln_gr_fresh_name(struct rebuild *r, const char *base, uint32_t self);
/* Adds an argument to the new graph (an input, or a weight with values v, NULL when unknown). */
uint32_t kiln_gr_add_arg(struct rebuild *r, const char *name, const struct kiln_tensor *like,
                         enum kiln_tensor_kind kind, const double *v);
/* A transpose statement: NCHW tensor t to NHWC (to_nhwc), or NHWC back to NCHW. */
uint32_t kiln_gr_transpose_nhwc(struct rebuild *r, uint32_t t, const char *name, bool to_nhwc);
/* The new tensor holding old tensor t, creating a weight on first use. */
uint32_t kiln_gr_get(struct rebuild *r, uint32_t t);
/* Creates every input of the old graph, in order. */
enum kiln_status kiln_gr_add_inputs(struct rebuild *r);
/* Copies statement c: same kind, attributes and definitions, loads retargeted. */
enum kiln_status kiln_gr_copy_call(struct rebuild *r, uint32_t c);
/* Marks the new tensors of old tensors outs as outputs, then verifies the new graph. */
enum kiln_status kiln_gr_mark_outputs(struct rebuild *r, const uint32_t *outs, uint32_t n);

/* ---- entry points (graph_rebuild.c) ---- */
/* What every entry point does first: clear the results, check the context and the graph. */
enum kiln_status kiln_gr_entry(kiln_ctx *ctx, const struct kiln_graph *g, const char *what,
                               struct kiln_graph **out, const double *const **weights_out);
/* The rewrites of a graph into another: pass over its facts, counting what it changed. */
typedef enum kiln_status (*rewrite_fn)(const struct facts *f, struct rebuild *out,
                                       uint32_t *converted);
/* An entry point of a one-round rewrite (channels-last, Winograd): checks, facts, pass. */
enum kiln_status kiln_gr_rewrite(kiln_ctx *ctx, const struct kiln_graph *g,
                                 const double *const *weights, const char *what, rewrite_fn pass,
                                 struct kiln_graph **out, const double *const **weights_out,
                                 uint32_t *converted);

#endif /* KILN_GRAPH_REBUILD_H */
