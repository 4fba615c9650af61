/* ir/graph.c -- kernel graphs: tensors, compute definitions (ops), statements (calls),
 * arguments and outputs; the verifier; the stable structural hash; and the public API over
 * them (context, dtypes, introspection, parse/print/eval entry points).
 *
 * A graph is built append-only: tensors and ops get dense indices in creation order, and ops
 * must appear in topological order (an op reads only arguments and tensors of earlier ops).
 * The structural hash covers what the graph computes, not what it is called: argument order,
 * shapes, dtypes, output flags and every op's reduction and body (variables are positional,
 * loads name tensors by index), so renaming tensors or index variables keeps the hash. */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- context ---- */

kiln_ctx *
kiln_ctx_new(const struct kiln_ctx_params *params)
{
    kiln_ctx tmp = {0};
    if (params) {
        tmp.alloc = params->alloc;
        tmp.alloc_ud = params->alloc_ud;
    }
    kiln_ctx *ctx = kiln_mem_realloc(&tmp, NULL, 0, sizeof *ctx);
    if (!ctx)
        return NULL;
    *ctx = tmp;
    if (!kiln_expr_init(ctx)) {
        kiln_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

void
kiln_ctx_free(kiln_ctx *ctx)
{
    if (!ctx)
        return;
    kiln_expr_fini(ctx);
    kiln_sym_fini(ctx);
    kiln_arena_rewind(ctx, (struct kiln_arena_mark){NULL, 0});
    kiln_ctx tmp = *ctx;
    kiln_mem_free(&tmp, ctx, sizeof *ctx);
}

/* ---- dtypes ---- */

static const struct {
    const char *name, *alias;
    size_t      size;
} dtypes[KILN_DTYPE_COUNT] = {
    [KILN_DTYPE_F32] = {"f32", "float32", 4},    [KILN_DTYPE_F16] = {"f16", "float16", 2},
    [KILN_DTYPE_BF16] = {"bf16", "bfloat16", 2}, [KILN_DTYPE_F64] = {"f64", "float64", 8},
    [KILN_DTYPE_I8] = {"i8", "int8", 1},         [KILN_DTYPE_I32] = {"i32", "int32", 4},
    [KILN_DTYPE_I64] = {"i64", "int64", 8},      [KILN_DTYPE_BOOL] = {"bool", "bool", 1},
    [KILN_DTYPE_U8] = {"u8", "uint8", 1},        [KILN_DTYPE_U16] = {"u16", "uint16", 2},
    [KILN_DTYPE_U32] = {"u32", "uint32", 4},     [KILN_DTYPE_U64] = {"u64", "uint64", 8},
    [KILN_DTYPE_I16] = {"i16", "int16", 2},
};

const char *
kiln_dtype_name(enum kiln_dtype dt)
{
    return (unsigned)dt < KILN_DTYPE_COUNT ? dtypes[dt].name : "void";
}

size_t
kiln_dtype_size(enum kiln_dtype dt)
{
    return (unsigned)dt < KILN_DTYPE_COUNT ? dtypes[dt].size : 0;
}

enum kiln_dtype
kiln_dtype_parse(const char *name)
{
    for (int i = 0; i < KILN_DTYPE_COUNT; i++)
        if (!strcmp(name, dtypes[i].name) || !strcmp(name, dtypes[i].alias))
            return (enum kiln_dtype)i;
    return KILN_DTYPE_COUNT;
}

/* ---- construction ---- */

struct kiln_graph *
kiln_graph_new(kiln_ctx *ctx)
{
    struct kiln_graph *g = kiln_arena_alloc(ctx, sizeof *g);
    if (g)
        g->ctx = ctx;
    return g;
}

int64_t
kiln_shape_numel(const int64_t *shape, int ndim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

int64_t
kiln_tensor_numel(const struct kiln_tensor *t)
{
    return kiln_shape_numel(t->shape, t->ndim);
}

#define MAX_NUMEL ((int64_t)1 << 40)

/* ---- tensors by name: linear probing over a power-of-two table at most half full ---- */

static uint32_t
byname_hash(uint32_t sym, uint32_t cap)
{
    return (uint32_t)(((uint64_t)sym * 0x9E3779B97F4A7C15ull) >> 40) & (cap - 1);
}

static void
byname_put(uint32_t *tab, uint32_t cap, uint32_t sym, uint32_t id)
{
    uint32_t h = byname_hash(sym, cap);
    while (tab[h])
        h = (h + 1) & (cap - 1);
    tab[h] = id + 1;
}

/* Indexes tensor id (already in g->tensor), growing the table first when needed. */
static bool
byname_add(struct kiln_graph *g, uint32_t id)
{
    if (2 * (uint64_t)g->ntensor > g->capbyname) {
        uint32_t  cap = g->capbyname ? 2 * g->capbyname : 64;
        uint32_t *tab = kiln_arena_alloc(g->ctx, sizeof(uint32_t) * cap); /* zeroed */
        if (!tab)
            return false;
        for (uint32_t i = 0; i < id; i++)
            byname_put(tab, cap, g->tensor[i].name, i);
        g->byname = tab; /* the old table is abandoned to the arena, as vectors are */
        g->capbyname = cap;
    }
    byname_put(g->byname, g->capbyname, g->tensor[id].name, id);
    return true;
}

uint32_t
kiln_graph_add_tensor(struct kiln_graph *g, const char *name, enum kiln_dtype dt, uint32_t ndim,
                      const int64_t *shape, enum kiln_tensor_kind kind)
{
    kiln_ctx *ctx = g->ctx;
    if (!kiln_ok(ctx))
        return KILN_NONE;
    if (!name || !*name) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "tensor needs a name");
        return KILN_NONE;
    }
    if (kiln_graph_find(g, name) != KILN_NONE) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "tensor %s is defined twice", name);
        return KILN_NONE;
    }
    if ((unsigned)dt >= KILN_DTYPE_COUNT) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "tensor %s: unknown dtype %d", name, (int)dt);
        return KILN_NONE;
    }
    if (ndim > KILN_MAX_DIMS) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "tensor %s has %u dimensions; at most %d", name,
                  ndim, KILN_MAX_DIMS);
        return KILN_NONE;
    }
    int64_t numel = 1;
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] <= 0) {
            KILN_FAIL(ctx, KILN_ERR_INVALID, "graph",
                      "tensor %s: dimension %u has extent %lld; extents must be positive", name, i,
                      (long long)shape[i]);
            return KILN_NONE;
        }
        if (kiln_mul_overflows(numel, shape[i], &numel) || numel > MAX_NUMEL) {
            KILN_FAIL(ctx, KILN_ERR_INVALID, "graph",
                      "tensor %s is too large: more than 2^40 elements", name);
            return KILN_NONE;
        }
    }
    struct kiln_tensor t = {.name = kiln_sym_cstr(ctx, name),
                            .dtype = (uint8_t)dt,
                            .kind = (uint8_t)kind,
                            .ndim = (uint8_t)ndim,
                            .op = KILN_NONE};
    for (uint32_t i = 0; i < ndim; i++)
        t.shape[i] = shape[i];
    if (!kiln_ok(ctx))
        return KILN_NONE;
    uint32_t id = g->ntensor;
    if (!KILN_VEC_PUSH(ctx, g->tensor, g->ntensor, g->captensor, t) || !byname_add(g, id))
        return KILN_NONE;
    if (kind != KILN_TENSOR_OP && !KILN_VEC_PUSH(ctx, g->arg, g->narg, g->caparg, id))
        return KILN_NONE;
    return id;
}

uint32_t
kiln_graph_find(const struct kiln_graph *g, const char *name)
{
    /* compare interned ids, not strings (interning an unknown name is harmless) */
    uint32_t sym = kiln_sym_cstr(g->ctx, name);
    if (!sym || !g->capbyname)
        return KILN_NONE;
    for (uint32_t h = byname_hash(sym, g->capbyname);; h = (h + 1) & (g->capbyname - 1)) {
        uint32_t t = g->byname[h];
        if (!t)
            return KILN_NONE;
        if (g->tensor[t - 1].name == sym)
            return t - 1;
    }
}

const char *
kiln_graph_tensor_name(const struct kiln_graph *g, uint32_t t)
{
    return t < g->ntensor ? kiln_sym_str(g->ctx, g->tensor[t].name) : "?";
}

static bool
numeric(enum kiln_dtype dt)
{
    return dt != KILN_DTYPE_BOOL && dt < KILN_DTYPE_COUNT;
}

struct load_check {
    const struct kiln_graph *g;
    uint32_t                 limit; /* index of the op being checked: reads only earlier ops */
    uint32_t                 self;
    const char              *bad;
};

static bool
check_load(void *ud, kiln_expr load)
{
    struct load_check      *lc = ud;
    const struct kiln_node *n = kiln_node_get(lc->g->ctx, load);
    uint32_t                t = (uint32_t)n->imm;
    if (t >= lc->g->ntensor) {
        lc->bad = "reads a tensor that does not exist";
        return false;
    }
    const struct kiln_tensor *tt = &lc->g->tensor[t];
    if (t == lc->self) {
        lc->bad = "reads the tensor it defines";
        return false;
    }
    if (tt->kind == KILN_TENSOR_OP && (tt->op == KILN_NONE || tt->op >= lc->limit)) {
        lc->bad = "reads a tensor no earlier op defines";
        return false;
    }
    uint32_t n_idx = kiln_load_nidx(lc->g->ctx, load);
    if (n_idx != tt->ndim && !(tt->ndim == 0 && n_idx == 1)) {
        lc->bad = "indexes a tensor with the wrong number of indices";
        return false;
    }
    if (n->dtype != tt->dtype) {
        lc->bad = "loads a tensor with the wrong dtype";
        return false;
    }
    return true;
}

struct vars_used {
    const kiln_ctx *ctx;
    uint32_t        max_axis, max_red;
    bool            named;
};

static bool
note_var(void *ud, kiln_expr e)
{
    struct vars_used       *v = ud;
    const struct kiln_node *nd = kiln_node_get(v->ctx, e);
    if (nd->op != KILN_OP_VAR)
        return true;
    uint32_t k = kiln_var_index(nd->imm) + 1;
    switch (kiln_var_kind_of(nd->imm)) {
    case KILN_VAR_AXIS:
        v->max_axis = k > v->max_axis ? k : v->max_axis;
        break;
    case KILN_VAR_REDUCE:
        v->max_red = k > v->max_red ? k : v->max_red;
        break;
    case KILN_VAR_NAMED:
        v->named = true;
        break;
    }
    return true;
}

/* Largest variable index of each kind used in e (for verifying ops). */
static void
var_range(const kiln_ctx *ctx, kiln_expr e, uint32_t *max_axis, uint32_t *max_red, bool *named)
{
    struct vars_used v = {ctx, 0, 0, false};
    kiln_expr_visit_nodes(ctx, e, note_var, &v);
    *max_axis = v.max_axis;
    *max_red = v.max_red;
    *named = v.named;
}

enum kiln_status
kiln_graph_add_op(struct kiln_graph *g, uint32_t out, enum kiln_reduce reduce, uint32_t nred,
                  const int64_t *rext, kiln_expr body, const uint32_t *axname,
                  const uint32_t *rname)
{
    kiln_ctx *ctx = g->ctx;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (!body.id)
        return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "graph", "op body is nil");
    if (out >= g->ntensor || g->tensor[out].kind != KILN_TENSOR_OP)
        return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "graph", "op output %u is not an op tensor", out);
    struct kiln_tensor *t = &g->tensor[out];
    const char         *name = kiln_sym_str(ctx, t->name);
    if (t->op != KILN_NONE)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "tensor %s is defined twice", name);
    if (nred > KILN_MAX_REDUCE)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "%s: %u reduction variables; at most %d",
                         name, nred, KILN_MAX_REDUCE);
    if ((reduce == KILN_REDUCE_NONE) != (nred == 0))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph",
                         "%s: a reduction needs reduction variables and only a reduction may "
                         "have them",
                         name);
    enum kiln_dtype bdt = kiln_expr_dtype(ctx, body);
    if (bdt != t->dtype)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "%s: body has dtype %s but %s is %s", name,
                         kiln_dtype_name(bdt), name, kiln_dtype_name(t->dtype));
    if (reduce != KILN_REDUCE_NONE && !numeric(bdt))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "%s: cannot reduce %s values", name,
                         kiln_dtype_name(bdt));
    int64_t points = kiln_tensor_numel(t);
    for (uint32_t r = 0; r < nred; r++) {
        if (rext[r] <= 0)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph",
                             "%s: reduction variable %u has extent %lld; must be positive", name, r,
                             (long long)rext[r]);
        if (kiln_mul_overflows(points, rext[r], &points) || points > ((int64_t)1 << 50))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph",
                             "%s: iteration space is too large (more than 2^50 points)", name);
    }
    uint32_t max_axis = 0, max_red = 0;
    bool     named = false;
    var_range(ctx, body, &max_axis, &max_red, &named);
    if (named || max_axis > t->ndim || max_red > nred)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph",
                         "%s: body uses a variable the definition does not bind", name);
    struct load_check lc = {g, g->nop, out, NULL};
    kiln_expr_visit_loads(ctx, body, check_load, &lc);
    if (lc.bad)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "%s: body %s", name, lc.bad);

    struct kiln_opdef op = {.out = out,
                            .reduce = (uint8_t)reduce,
                            .nred = (uint8_t)nred,
                            .body = body,
                            .call = g->ncall ? g->ncall - 1 : 0};
    for (uint32_t r = 0; r < nred; r++) {
        op.rext[r] = rext[r];
        op.rname[r] = rname ? rname[r] : 0;
    }
    for (uint32_t i = 0; i < t->ndim; i++)
        op.axname[i] = axname ? axname[i] : 0;
    uint32_t id = g->nop;
    if (!KILN_VEC_PUSH(ctx, g->op, g->nop, g->capop, op))
        return ctx->err.status;
    g->tensor[out].op = id;
    return KILN_OK;
}

enum kiln_status
kiln_graph_begin_call(struct kiln_graph *g, const char *kind, uint32_t nin, const uint32_t *in,
                      uint32_t nattr, const struct kiln_attr *attr, uint32_t line, uint32_t col)
{
    kiln_ctx *ctx = g->ctx;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_call c = {.kind = kiln_sym_cstr(ctx, kind),
                          .out = KILN_NONE,
                          .op_begin = g->nop,
                          .op_end = g->nop,
                          .nin = nin,
                          .nattr = nattr,
                          .line = line,
                          .col = col};
    if (nin) {
        uint32_t *cin = kiln_arena_alloc(ctx, sizeof(uint32_t) * nin);
        if (!cin)
            return ctx->err.status;
        memcpy(cin, in, sizeof(uint32_t) * nin);
        c.in = cin;
    }
    if (nattr) {
        struct kiln_attr *ca = kiln_arena_alloc(ctx, sizeof(struct kiln_attr) * nattr);
        if (!ca)
            return ctx->err.status;
        for (uint32_t i = 0; i < nattr; i++) {
            ca[i] = attr[i];
            if (attr[i].kind == KILN_ATTR_INTS && attr[i].n) {
                int64_t *v = kiln_arena_alloc(ctx, sizeof(int64_t) * attr[i].n);
                if (!v)
                    return ctx->err.status;
                memcpy(v, attr[i].ints, sizeof(int64_t) * attr[i].n);
                ca[i].ints = v;
            }
            if (attr[i].kind == KILN_ATTR_STRING && attr[i].s) {
                ca[i].s = kiln_arena_strdup(ctx, attr[i].s);
                if (!ca[i].s)
                    return ctx->err.status;
            }
        }
        c.attr = ca;
    }
    if (!KILN_VEC_PUSH(ctx, g->call, g->ncall, g->capcall, c))
        return ctx->err.status;
    return KILN_OK;
}

enum kiln_status
kiln_graph_end_call(struct kiln_graph *g, uint32_t out)
{
    kiln_ctx *ctx = g->ctx;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    KILN_ENSURE(ctx, g->ncall > 0 && out < g->ntensor);
    struct kiln_call *c = &g->call[g->ncall - 1];
    c->out = out;
    c->op_end = g->nop;
    if (!g->tensor[out].line) {
        g->tensor[out].line = c->line;
        g->tensor[out].col = c->col;
    }
    return KILN_OK;
}

enum kiln_status
kiln_graph_mark_output(struct kiln_graph *g, uint32_t t)
{
    kiln_ctx *ctx = g->ctx;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    KILN_ENSURE(ctx, t < g->ntensor);
    if (g->tensor[t].is_output)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "%s is declared an output twice",
                         kiln_graph_tensor_name(g, t));
    if (g->tensor[t].kind != KILN_TENSOR_OP)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph",
                         "%s is an argument; outputs must be computed by an op",
                         kiln_graph_tensor_name(g, t));
    g->tensor[t].is_output = 1;
    if (!KILN_VEC_PUSH(ctx, g->output, g->noutput, g->capoutput, t))
        return ctx->err.status;
    return KILN_OK;
}

struct reads {
    bool           *read;
    const kiln_ctx *ctx;
};

static bool
mark_read(void *ud, kiln_expr load)
{
    struct reads *r = ud;
    r->read[kiln_node_get(r->ctx, load)->imm] = true;
    return true;
}

enum kiln_status
kiln_graph_default_outputs(struct kiln_graph *g)
{
    kiln_ctx *ctx = g->ctx;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    bool *read = kiln_arena_alloc(ctx, g->ntensor + 1);
    if (!read)
        return ctx->err.status;
    struct reads r = {read, ctx};
    for (uint32_t i = 0; i < g->nop; i++)
        kiln_expr_visit_loads(ctx, g->op[i].body, mark_read, &r);
    for (uint32_t t = 0; t < g->ntensor; t++)
        if (g->tensor[t].kind == KILN_TENSOR_OP && g->tensor[t].op != KILN_NONE && !read[t]
            && !g->tensor[t].is_output)
            KILN_TRY(kiln_graph_mark_output(g, t));
    return KILN_OK;
}

enum kiln_status
kiln_graph_verify(const struct kiln_graph *g)
{
    kiln_ctx *ctx = g->ctx;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    for (uint32_t t = 0; t < g->ntensor; t++) {
        const struct kiln_tensor *tt = &g->tensor[t];
        if (tt->kind == KILN_TENSOR_OP && tt->op == KILN_NONE)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "tensor %s is never defined",
                             kiln_graph_tensor_name(g, t));
        if (tt->kind == KILN_TENSOR_OP && (tt->op >= g->nop || g->op[tt->op].out != t))
            return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "graph", "tensor %s: bad op link",
                             kiln_graph_tensor_name(g, t));
    }
    for (uint32_t i = 0; i < g->nop; i++) {
        struct load_check lc = {g, i, g->op[i].out, NULL};
        kiln_expr_visit_loads(ctx, g->op[i].body, check_load, &lc);
        if (lc.bad)
            return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "graph", "op %s: body %s",
                             kiln_graph_tensor_name(g, g->op[i].out), lc.bad);
    }
    if (g->noutput == 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "graph", "the graph has no output");
    return KILN_OK;
}

/* ---- structural hash ---- */

uint64_t
kiln_graph_hash(const struct kiln_graph *g)
{
    uint64_t h = KILN_HASH_SEED;
    h = kiln_hash_u64(h, g->ntensor);
    for (uint32_t t = 0; t < g->ntensor; t++) {
        const struct kiln_tensor *tt = &g->tensor[t];
        h = kiln_hash_u64(h, ((uint64_t)tt->dtype << 24) | ((uint64_t)tt->kind << 16)
                                 | ((uint64_t)tt->ndim << 8) | tt->is_output);
        for (int i = 0; i < tt->ndim; i++)
            h = kiln_hash_u64(h, (uint64_t)tt->shape[i]);
    }
    for (uint32_t i = 0; i < g->narg; i++)
        h = kiln_hash_u64(h, g->arg[i]);
    for (uint32_t i = 0; i < g->noutput; i++)
        h = kiln_hash_u64(h, g->output[i]);
    for (uint32_t i = 0; i < g->nop; i++) {
        const struct kiln_opdef *op = &g->op[i];
        h = kiln_hash_u64(h, op->out);
        h = kiln_hash_u64(h, ((uint64_t)op->reduce << 8) | op->nred);
        for (int r = 0; r < op->nred; r++)
            h = kiln_hash_u64(h, (uint64_t)op->rext[r]);
        h = kiln_hash_u64(h, kiln_expr_hash(g->ctx, op->body));
    }
    return h;
}

/* ---- public introspection ---- */

uint32_t
kiln_graph_ntensors(const struct kiln_graph *g)
{
    return g->ntensor;
}

void
kiln_graph_tensor(const struct kiln_graph *g, uint32_t i, struct kiln_tensor_info *out)
{
    memset(out, 0, sizeof *out);
    if (i >= g->ntensor)
        return;
    const struct kiln_tensor *t = &g->tensor[i];
    out->name = kiln_sym_str(g->ctx, t->name);
    out->dtype = (enum kiln_dtype)t->dtype;
    out->ndim = t->ndim;
    out->shape = t->shape;
    out->kind = (enum kiln_tensor_kind)t->kind;
    out->is_output = t->is_output;
}

int64_t
kiln_graph_tensor_numel(const struct kiln_graph *g, uint32_t i)
{
    return i < g->ntensor ? kiln_tensor_numel(&g->tensor[i]) : 0;
}

uint32_t
kiln_graph_nargs(const struct kiln_graph *g)
{
    return g->narg;
}

uint32_t
kiln_graph_arg(const struct kiln_graph *g, uint32_t i)
{
    return i < g->narg ? g->arg[i] : KILN_NONE;
}

uint32_t
kiln_graph_noutputs(const struct kiln_graph *g)
{
    return g->noutput;
}

uint32_t
kiln_graph_output(const struct kiln_graph *g, uint32_t i)
{
    return i < g->noutput ? g->output[i] : KILN_NONE;
}

uint32_t
kiln_graph_nops(const struct kiln_graph *g)
{
    return g->nop;
}

uint32_t
kiln_graph_ncalls(const struct kiln_graph *g)
{
    return g->ncall;
}

void
kiln_graph_call(const struct kiln_graph *g, uint32_t i, struct kiln_call_info *out)
{
    memset(out, 0, sizeof *out);
    if (i >= g->ncall)
        return;
    const struct kiln_call *c = &g->call[i];
    struct kiln_stats       st;
    kiln_call_stats(g, i, &st);
    out->kind = kiln_sym_str(g->ctx, c->kind);
    out->output = kiln_graph_tensor_name(g, c->out);
    out->flops = st.flops;
    out->bytes = st.bytes;
    out->params = st.params;
}

/* ---- public entry points over the internal modules ---- */

enum kiln_status
kiln_graph_parse(kiln_ctx *ctx, const char *text, size_t len, const char *filename,
                 struct kiln_graph **out)
{
    *out = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    return kiln_ir_parse(ctx, text, len, filename, out);
}

enum kiln_status
kiln_graph_print(kiln_ctx *ctx, const struct kiln_graph *g, unsigned flags, const char **out)
{
    struct kiln_buf b = {0};
    *out = NULL;
    KILN_TRY(kiln_ir_print(ctx, g, flags, &b));
    if (!b.data && !kiln_buf_puts(ctx, &b, ""))
        return ctx->err.status;
    *out = b.data;
    return KILN_OK;
}

enum kiln_status
kiln_graph_eval(kiln_ctx *ctx, const struct kiln_graph *g, const double *const *args,
                double *const *outs)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_arena_mark m = kiln_arena_mark(ctx);
    double               **vals = kiln_arena_alloc(ctx, sizeof(double *) * (g->ntensor + 1));
    if (!vals)
        return ctx->err.status;
    for (uint32_t i = 0; i < g->narg; i++)
        vals[g->arg[i]] = (double *)args[i];
    for (uint32_t i = 0; i < g->noutput; i++)
        vals[g->output[i]] = outs[i];
    for (uint32_t t = 0; t < g->ntensor; t++) {
        if (vals[t])
            continue;
        size_t n = (size_t)kiln_tensor_numel(&g->tensor[t]);
        vals[t] = kiln_mem_realloc(ctx, NULL, 0, n * sizeof(double));
        if (!vals[t]) {
            KILN_FAIL(ctx, KILN_ERR_NOMEM, "interp", "out of memory for tensor %s",
                      kiln_graph_tensor_name(g, t));
            break;
        }
    }
    enum kiln_status st = kiln_ok(ctx) ? kiln_ir_eval(ctx, g, vals) : ctx->err.status;
    for (uint32_t t = 0; t < g->ntensor; t++) {
        bool owned = g->tensor[t].kind == KILN_TENSOR_OP && !g->tensor[t].is_output;
        if (owned && vals[t])
            kiln_mem_free(ctx, vals[t], (size_t)kiln_tensor_numel(&g->tensor[t]) * sizeof(double));
    }
    kiln_arena_rewind(ctx, m);
    return st;
}
