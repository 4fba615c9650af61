/* ir/ir.h -- internal: hash-consed expressions, compute definitions (ops), kernel graphs, the
 * op library, the .kg parser and printer, statistics and the reference interpreter.
 *
 * Expressions are small immutable nodes in one array owned by the context, addressed by 32-bit
 * ids and hash-consed: same structure => same id. Variables carry no names: a compute
 * definition's spatial variables are axis 0..ndim-1 and its reduction variables reduce
 * 0..nred-1 (kiln_axis / kiln_rvar); display names live beside the op, so alpha-equivalent
 * definitions share their body node and hash alike. Named variables (kiln_var_named) are for
 * the loop-nest IR. Index arithmetic is int64 (KILN_DTYPE_I64). */
#ifndef KILN_IR_H
#define KILN_IR_H

#include "../util/util.h"

#define KILN_OPF_COMM  1u  /* commutative */
#define KILN_OPF_ARITH 2u  /* arithmetic on ints and floats */
#define KILN_OPF_CMP   4u  /* comparison: operands of one dtype, result bool */
#define KILN_OPF_LOGIC 8u  /* bool operands, bool result */
#define KILN_OPF_MATH  16u /* float-only intrinsic */
#define KILN_OPF_CONST 32u /* literal */

/* What an operation counts as in op-count features and cost heuristics (ops.def's cost). */
enum kiln_op_cost {
    KILN_COST_NONE,   /* leaves, index lists, loads: no operation */
    KILN_COST_ADD,    /* + - */
    KILN_COST_MUL,    /* * */
    KILN_COST_DIV,    /* / // % */
    KILN_COST_MINMAX, /* min max */
    KILN_COST_CMP,    /* comparisons */
    KILN_COST_LOGIC,  /* && || ! */
    KILN_COST_SELECT,
    KILN_COST_CAST,
    KILN_COST_SIMPLE, /* neg, abs */
    KILN_COST_MATH,   /* floor: a float intrinsic, cheap */
    KILN_COST_TRANS,  /* pow, exp, log, sqrt, rsqrt, tanh, erf, sigmoid, sin ... atanh: expensive */
};

enum kiln_op {
#define KILN_OP(name, arity, flags, text, prec, cost) KILN_OP_##name,
#include "ops.def"
#undef KILN_OP
    KILN_OP_COUNT
};

/* The columns of ops.def, indexed by operator. */
extern const char *const kiln_op_name[KILN_OP_COUNT]; /* "ADD", "FLOORDIV", ... */
extern const uint8_t     kiln_op_arity[KILN_OP_COUNT];
extern const uint32_t    kiln_op_flags[KILN_OP_COUNT];
extern const char *const kiln_op_text[KILN_OP_COUNT]; /* .kg spelling: "+", "min"; or NULL */
extern const uint8_t     kiln_op_prec[KILN_OP_COUNT]; /* .kg binding, 1 (||) .. 7 (calls) */
extern const uint8_t     kiln_op_cost[KILN_OP_COUNT]; /* enum kiln_op_cost */

/* How a node takes its operands: what evaluators and rewriters dispatch on. Properties of an
 * operator (arity, flags, spelling, precedence, cost class) are read from the ops.def tables;
 * only files that give each operator its own meaning list operators one by one: ops.def,
 * ir/scalar.h (values), ir/arith.c (intervals, monotonicity), ir/expr.c (the builders'
 * identities), the simplifier's rewrite rules (passes/simplify.c) and the code generators'
 * emission (codegen/). */
enum kiln_op_kind {
    KILN_OPK_NONE,   /* NIL (and out-of-range values): no value */
    KILN_OPK_LEAF,   /* INT, FLOAT, VAR */
    KILN_OPK_LIST,   /* index list cell */
    KILN_OPK_LOAD,   /* kid0: LIST of indices */
    KILN_OPK_SELECT, /* lazy */
    KILN_OPK_CAST,   /* to the node's dtype */
    KILN_OPK_UNARY,  /* one value: kiln_scalar_eval */
    KILN_OPK_BINARY, /* two values of one dtype: kiln_scalar_eval */
};
static inline enum kiln_op_kind
kiln_op_kind(enum kiln_op op)
{
    if (op == KILN_OP_NIL || op >= KILN_OP_COUNT)
        return KILN_OPK_NONE;
    if (op == KILN_OP_LIST || op == KILN_OP_LOAD)
        return op == KILN_OP_LIST ? KILN_OPK_LIST : KILN_OPK_LOAD;
    if (op == KILN_OP_SELECT || op == KILN_OP_CAST)
        return op == KILN_OP_SELECT ? KILN_OPK_SELECT : KILN_OPK_CAST;
    if (kiln_op_arity[op] == 0)
        return KILN_OPK_LEAF;
    return kiln_op_arity[op] == 1 ? KILN_OPK_UNARY : KILN_OPK_BINARY;
}

/* dtype of LIST nodes and of the nil node: no value */
#define KILN_DTYPE_VOID  KILN_DTYPE_COUNT
#define KILN_DTYPE_INDEX KILN_DTYPE_I64
/* The dtype structural hashes mix in: VOID as 8, its value before u8 .. i16 were appended, so
 * hashes (and the records keyed by them) stay as they were; VOID and u8 never share an op. */
#define KILN_DTYPE_HASH(dt) ((dt) == KILN_DTYPE_VOID ? 8u : (unsigned)(dt))

typedef struct {
    uint32_t id;
} kiln_expr; /* 0 = nil, returned after an error (sticky) */

struct kiln_node {   /* immutable once interned */
    uint8_t  op;     /* enum kiln_op */
    uint8_t  dtype;  /* enum kiln_dtype, or KILN_DTYPE_VOID */
    uint16_t pad;    /* always 0: nodes are hashed and compared as bytes */
    uint32_t next;   /* hash chain, newest first */
    uint32_t kid[3]; /* operand ids */
    uint32_t pad2;   /* always 0 */
    int64_t  imm;    /* INT value, FLOAT bits, VAR key, LOAD tensor */
    uint64_t shash;  /* stable structural hash (content only, not ids) */
};

enum kiln_var_kind {
    KILN_VAR_AXIS,   /* spatial variable k of the enclosing compute definition */
    KILN_VAR_REDUCE, /* reduction variable k of the enclosing compute definition */
    KILN_VAR_NAMED,  /* free variable named by a symbol (loop-nest IR) */
};
static inline int64_t
kiln_var_key(enum kiln_var_kind kind, uint32_t index)
{
    return (int64_t)(((uint64_t)kind << 32) | index);
}
static inline enum kiln_var_kind
kiln_var_kind_of(int64_t key)
{
    return (enum kiln_var_kind)((uint64_t)key >> 32);
}
static inline uint32_t
kiln_var_index(int64_t key)
{
    return (uint32_t)((uint64_t)key & 0xffffffffu);
}

/* ---- scalar semantics (ir/scalar.h, ir/scalar.c) ---- */
#include "scalar.h"

/* ---- arithmetic analysis: intervals, affine forms, strides (ir/arith.h, ir/arith.c) ---- */
#include "arith.h"

/* ---- expression builders (ir/expr.c): sticky nil on error or nil operand ---- */
/* Builders fold constants, drop identities (x+0, x*1, int x*0, min/max/select of constants),
 * put constants second and order other commutative operands by structural hash. Binary
 * operators need operands of one dtype (comparisons give bool); errors name the operator. */
kiln_expr kiln_int(kiln_ctx *ctx, int64_t v, enum kiln_dtype dt); /* int or bool dtype */
kiln_expr kiln_idx(kiln_ctx *ctx, int64_t v);                     /* I64 constant */
kiln_expr kiln_float(kiln_ctx *ctx, double v, enum kiln_dtype dt);
kiln_expr kiln_bool(kiln_ctx *ctx, bool v);
kiln_expr kiln_axis(kiln_ctx *ctx, uint32_t k);
kiln_expr kiln_rvar(kiln_ctx *ctx, uint32_t k);
kiln_expr kiln_var_named(kiln_ctx *ctx, uint32_t sym, enum kiln_dtype dt);
kiln_expr kiln_binary(kiln_ctx *ctx, enum kiln_op op, kiln_expr a, kiln_expr b);
kiln_expr kiln_unary(kiln_ctx *ctx, enum kiln_op op, kiln_expr a);
kiln_expr kiln_select(kiln_ctx *ctx, kiln_expr c, kiln_expr a, kiln_expr b);
kiln_expr kiln_cast(kiln_ctx *ctx, enum kiln_dtype dt, kiln_expr a);
/* Load of tensor `tensor` (graph tensor index) with element dtype dt at n I64 indices. */
kiln_expr kiln_load(kiln_ctx *ctx, uint32_t tensor, enum kiln_dtype dt, uint32_t n,
                    const kiln_expr *idx);
/* A constant of dtype dt holding v (int types truncate and saturate to the dtype's range), for
 * building identities. */
kiln_expr kiln_const(kiln_ctx *ctx, double v, enum kiln_dtype dt);

static inline kiln_expr
kiln_add(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_ADD, a, b);
}
static inline kiln_expr
kiln_sub(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_SUB, a, b);
}
static inline kiln_expr
kiln_mul(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_MUL, a, b);
}
static inline kiln_expr
kiln_div(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_DIV, a, b);
}
static inline kiln_expr
kiln_floordiv(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_FLOORDIV, a, b);
}
static inline kiln_expr
kiln_floormod(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_FLOORMOD, a, b);
}
static inline kiln_expr
kiln_min(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_MIN, a, b);
}
static inline kiln_expr
kiln_max(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_MAX, a, b);
}
static inline kiln_expr
kiln_lt(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_LT, a, b);
}
static inline kiln_expr
kiln_le(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_LE, a, b);
}
static inline kiln_expr
kiln_and(kiln_ctx *c, kiln_expr a, kiln_expr b)
{
    return kiln_binary(c, KILN_OP_AND, a, b);
}

/* ---- expression access ---- */
static inline const struct kiln_node *
kiln_node_get(const kiln_ctx *ctx, kiln_expr e)
{
    return &ctx->node[e.id]; /* valid until the next interning call */
}
enum kiln_dtype kiln_expr_dtype(const kiln_ctx *ctx, kiln_expr e);
bool            kiln_expr_is_const(const kiln_ctx *ctx, kiln_expr e, double *v);
bool            kiln_expr_is_int(const kiln_ctx *ctx, kiln_expr e, int64_t *v);
double          kiln_expr_float_value(const kiln_ctx *ctx, kiln_expr e); /* FLOAT node */
uint64_t        kiln_expr_hash(const kiln_ctx *ctx, kiln_expr e);        /* structural */
uint32_t        kiln_load_nidx(const kiln_ctx *ctx, kiln_expr load);
kiln_expr       kiln_load_idx(const kiln_ctx *ctx, kiln_expr load, uint32_t i);
/* Replaces axis k by ax[k] (k < nax) and reduce variable k by rv[k] (k < nrv); other
 * variables stay. Returns e itself when nothing changes. */
kiln_expr kiln_expr_subst(kiln_ctx *ctx, kiln_expr e, const kiln_expr *ax, uint32_t nax,
                          const kiln_expr *rv, uint32_t nrv);
/* Replaces each variable node vars[i] by vals[i] (named variables of the loop-nest IR). */
kiln_expr kiln_expr_subst_vars(kiln_ctx *ctx, kiln_expr e, const kiln_expr *vars,
                               const kiln_expr *vals, uint32_t n);
/* Node e with its operands replaced by k[0..arity) through the builders, so that folding,
 * identities and canonical operand order apply (the same node when nothing changes); a leaf
 * is returned as it is. */
kiln_expr kiln_expr_rebuild(kiln_ctx *ctx, kiln_expr e, const kiln_expr *k);
/* Replaces every load of tensor `from` by a load of tensor `to` (same indices). */
kiln_expr kiln_expr_retarget(kiln_ctx *ctx, kiln_expr e, uint32_t from, uint32_t to);
/* Rewrites every load in e bottom-up: fn receives the original load node and its indices
 * after rewriting (n of them) and returns the replacement (nil = error recorded). */
typedef kiln_expr (*kiln_load_map_fn)(void *ud, kiln_expr load, uint32_t n, const kiln_expr *idx);
kiln_expr kiln_expr_map_loads(kiln_ctx *ctx, kiln_expr e, kiln_load_map_fn fn, void *ud);
/* Rewrites e top-down: fn sees each node before its operands. When it returns true, *out
 * replaces the node (its operands are not visited; nil = an error fn recorded); otherwise the
 * operands are rewritten and the node rebuilt. */
typedef bool (*kiln_node_replace_fn)(void *ud, kiln_expr node, kiln_expr *out);
kiln_expr kiln_expr_replace(kiln_ctx *ctx, kiln_expr e, kiln_node_replace_fn fn, void *ud);
/* Calls fn on every LOAD node reachable from e (each distinct node once per call is not
 * guaranteed: shared subtrees are visited once per occurrence). Stops when fn returns false. */
bool kiln_expr_visit_loads(const kiln_ctx *ctx, kiln_expr e, bool (*fn)(void *ud, kiln_expr load),
                           void *ud);
/* Calls fn once on every distinct node reachable from e (a DAG walk); stops when fn returns
 * false. */
bool kiln_expr_visit_nodes(const kiln_ctx *ctx, kiln_expr e, bool (*fn)(void *ud, kiln_expr node),
                           void *ud);
/* Marks everything interned after the returned mark for removal by kiln_expr_rollback. */
uint32_t kiln_expr_mark(const kiln_ctx *ctx);
void     kiln_expr_rollback(kiln_ctx *ctx, uint32_t mark);
/* A scratch scope: everything allocated in the arena and interned (expressions, symbols)
 * after kiln_scratch_begin is released by kiln_scratch_end (the error state is kept). The tuner
 * lowers thousands of candidates inside such scopes, so the context does not grow; nothing made
 * inside may be used after the end. Here rather than in util/, which knows nothing of
 * expressions. */
struct kiln_scratch {
    struct kiln_arena_mark arena;
    uint32_t               expr, sym;
};
struct kiln_scratch kiln_scratch_begin(kiln_ctx *ctx);
void                kiln_scratch_end(kiln_ctx *ctx, struct kiln_scratch s);

/* ctx setup of the expression table (called by kiln_ctx_new / kiln_ctx_free) */
bool kiln_expr_init(kiln_ctx *ctx);
void kiln_expr_fini(kiln_ctx *ctx);

/* ---- kernel graphs (ir/graph.c) ---- */
enum kiln_reduce {
    KILN_REDUCE_NONE,
    KILN_REDUCE_SUM,
    KILN_REDUCE_MAX,
    KILN_REDUCE_MIN,
};

#define KILN_NONE UINT32_MAX

struct kiln_tensor {
    uint32_t name;  /* symbol */
    uint8_t  dtype; /* enum kiln_dtype */
    uint8_t  kind;  /* enum kiln_tensor_kind */
    uint8_t  ndim;
    uint8_t  is_output;
    int64_t  shape[KILN_MAX_DIMS];
    uint32_t op;        /* defining op when kind == KILN_TENSOR_OP, else KILN_NONE */
    uint32_t line, col; /* where it was declared or defined; 0 if built by API */
};

/* A compute definition: for every point ax of the output's shape,
 *   out[ax] = body(ax)                                  (reduce == NONE)
 *   out[ax] = reduce_{r in [0,rext)} body(ax, r)         (reduce = SUM, MAX, MIN; identity
 *                                                         0, -inf, +inf for an empty range) */
struct kiln_opdef {
    uint32_t  out;                   /* tensor defined */
    uint8_t   reduce;                /* enum kiln_reduce */
    uint8_t   nred;                  /* reduction variables */
    int64_t   rext[KILN_MAX_REDUCE]; /* extent of each reduction variable */
    kiln_expr body;
    uint32_t  call;                  /* statement that created it */
    uint32_t  axname[KILN_MAX_DIMS]; /* display names (symbols; 0 = default) */
    uint32_t  rname[KILN_MAX_REDUCE];
};

enum kiln_attr_kind {
    KILN_ATTR_INT,
    KILN_ATTR_FLOAT,
    KILN_ATTR_INTS,
    KILN_ATTR_STRING,
};

struct kiln_attr {
    uint32_t       name; /* symbol */
    uint8_t        kind; /* enum kiln_attr_kind */
    uint32_t       n;    /* INTS: count */
    int64_t        i;
    double         f;
    const int64_t *ints; /* INTS */
    const char    *s;    /* STRING */
    uint32_t       line, col;
};

/* One statement: a library call or a hand-written compute definition ("compute"). */
struct kiln_call {
    uint32_t                kind;             /* symbol: library op name or "compute" */
    uint32_t                out;              /* tensor defined */
    uint32_t                op_begin, op_end; /* ops it created: [begin, end) */
    uint32_t                nin;
    const uint32_t         *in; /* input tensors (library calls) */
    uint32_t                nattr;
    const struct kiln_attr *attr;
    uint32_t                line, col;
};

struct kiln_graph {
    kiln_ctx           *ctx;
    const char         *file; /* source name for messages, or NULL */
    struct kiln_tensor *tensor;
    uint32_t            ntensor, captensor;
    struct kiln_opdef  *op;
    uint32_t            nop, capop;
    struct kiln_call   *call;
    uint32_t            ncall, capcall;
    uint32_t           *arg; /* inputs and weights in declaration order */
    uint32_t            narg, caparg;
    uint32_t           *output;
    uint32_t            noutput, capoutput;
    uint32_t           *byname; /* open addressing by name symbol: tensor id + 1, 0 = empty */
    uint32_t            capbyname;
};

struct kiln_graph *kiln_graph_new(kiln_ctx *ctx); /* NULL on OOM (error recorded) */
/* Adds a tensor; inputs and weights also become arguments. Fails on a duplicate name, a bad
 * dtype, more than KILN_MAX_DIMS dimensions, a non-positive extent or more than 2^40 elements.
 * Returns the tensor index, or KILN_NONE. */
uint32_t kiln_graph_add_tensor(struct kiln_graph *g, const char *name, enum kiln_dtype dt,
                               uint32_t ndim, const int64_t *shape, enum kiln_tensor_kind kind);
/* KILN_NONE if absent; constant time (a hash of the tensors by name, kept by add_tensor) */
uint32_t    kiln_graph_find(const struct kiln_graph *g, const char *name);
const char *kiln_graph_tensor_name(const struct kiln_graph *g, uint32_t t);
/* Appends a compute definition of tensor out (kind KILN_TENSOR_OP, not yet defined). The body
 * dtype must equal the tensor's; reductions need a numeric dtype. names may be NULL. */
enum kiln_status kiln_graph_add_op(struct kiln_graph *g, uint32_t out, enum kiln_reduce reduce,
                                   uint32_t nred, const int64_t *rext, kiln_expr body,
                                   const uint32_t *axname, const uint32_t *rname);
/* Opens a statement: ops added until kiln_graph_end_call belong to it. */
enum kiln_status kiln_graph_begin_call(struct kiln_graph *g, const char *kind, uint32_t nin,
                                       const uint32_t *in, uint32_t nattr,
                                       const struct kiln_attr *attr, uint32_t line, uint32_t col);
enum kiln_status kiln_graph_end_call(struct kiln_graph *g, uint32_t out);
enum kiln_status kiln_graph_mark_output(struct kiln_graph *g, uint32_t t);
/* Marks every op-defined tensor no op reads as an output (used when the text names none). */
enum kiln_status kiln_graph_default_outputs(struct kiln_graph *g);
/* Checks the invariants: every op tensor defined once, ops in topological order, loads in
 * bounds of rank, dtypes consistent, at least one output. */
enum kiln_status kiln_graph_verify(const struct kiln_graph *g);
/* The product of the first ndim extents of shape (unchecked: verified shapes do not overflow);
 * kiln_tensor_numel and kiln_buffer_numel count elements with it. */
int64_t kiln_shape_numel(const int64_t *shape, int ndim);
int64_t kiln_tensor_numel(const struct kiln_tensor *t);

/* ---- op library (ir/lib.c): one X-macro table, ir/lib.def ---- */
/* Builds the library op `op` reading tensors in[0..nin) with attributes attr, defining a new
 * tensor named out_name; returns its index in *out. Every error names the op and the problem
 * ("conv2d: input x has 64 channels but weight w expects 32 (groups 1)"). */
enum kiln_status kiln_lib_call(struct kiln_graph *g, const char *op, const char *out_name,
                               uint32_t nin, const uint32_t *in, uint32_t nattr,
                               const struct kiln_attr *attr, uint32_t line, uint32_t col,
                               uint32_t *out);
bool             kiln_lib_exists(const char *op);
uint32_t         kiln_lib_count(void);
const char      *kiln_lib_name(uint32_t i);

/* ---- text format (ir/parse.c, ir/print.c) ---- */
enum kiln_status kiln_ir_parse(kiln_ctx *ctx, const char *text, size_t len, const char *file,
                               struct kiln_graph **out);
enum kiln_status kiln_ir_print(kiln_ctx *ctx, const struct kiln_graph *g, unsigned flags,
                               struct kiln_buf *out);
/* Prints one expression of op `op` of g (variables by display name). */
enum kiln_status kiln_ir_print_expr(kiln_ctx *ctx, const struct kiln_graph *g,
                                    const struct kiln_opdef *op, kiln_expr e, struct kiln_buf *out);

/* ---- statistics (ir/stats.c) ---- */
struct kiln_stats {
    double flops;  /* float arithmetic per output point x points, reduction combines included */
    double bytes;  /* distinct tensors read (whole) + tensor written, in bytes */
    double params; /* elements of weight tensors read */
};
void kiln_op_stats(const struct kiln_graph *g, uint32_t op, struct kiln_stats *out);
void kiln_call_stats(const struct kiln_graph *g, uint32_t call, struct kiln_stats *out);

/* ---- reference interpreter (ir/interp.c) ---- */
/* vals[t] must point at numel(t) doubles for every tensor t: arguments filled by the caller,
 * op tensors written in op order. */
enum kiln_status kiln_ir_eval(kiln_ctx *ctx, const struct kiln_graph *g, double *const *vals);

/* ---- loop-nest IR (ir/stmt.c) ----
 * Statements form a tree in the arena, not interned: loops have identity and passes rebuild
 * them locally. Expressions are shared with the graph IR; loads and stores in a function name
 * buffers by index in the function's buffer table (LOAD.imm = buffer). Loops are half-open:
 * `for v in [min, min + extent)`. Before storage flattening, stores and loads carry one index
 * per buffer dimension; after it, one flat (row-major) element index. */
enum kiln_loop_kind {
    KILN_LOOP_SERIAL,
    KILN_LOOP_PARALLEL, /* iterations may run on different threads */
    KILN_LOOP_VECTOR,   /* iterations are SIMD lanes; extent constant */
    KILN_LOOP_UNROLL,   /* fully unrolled; extent constant */
    KILN_LOOP_GPU_BLOCK,
    KILN_LOOP_GPU_THREAD,
};
extern const char *const kiln_loop_kind_name[];

enum kiln_scope {
    KILN_SCOPE_GLOBAL, /* argument or output of the function: the caller owns it */
    KILN_SCOPE_HEAP,   /* temporary whose lifetime is the function call */
    KILN_SCOPE_STACK,  /* temporary local to the enclosing allocation statement */
    KILN_SCOPE_SHARED, /* GPU shared memory */
};

struct kiln_buffer {
    uint32_t name;  /* symbol */
    uint8_t  dtype; /* enum kiln_dtype */
    uint8_t  scope; /* enum kiln_scope */
    uint8_t  ndim;
    int64_t  shape[KILN_MAX_DIMS];
    uint32_t tensor; /* graph tensor it holds, or KILN_NONE */
    uint32_t align;  /* bytes the data pointer is known to be aligned to (>= element size) */
    /* HEAP buffers placed by memory planning (kiln_pass_memplan): byte offset of the data in
     * the function's workspace (a multiple of KILN_WS_ALIGN); -1 = allocated on its own. Such
     * a buffer's ALLOC wraps the function body, but it is live only from the first to the
     * last root statement touching it: buffers whose live ranges are disjoint may share
     * bytes. */
    int64_t ws_offset;
    /* Weight-derived buffers (computed only from weights, passes/lower.c): byte offset in the
     * function's prepared area (a multiple of KILN_WS_ALIGN, never shared with another
     * buffer), which the generated module computes once per kiln_prepare instead of once per
     * call; -1 = not weight-derived. Never also in the workspace. */
    int64_t prep_offset;
};

#define KILN_WS_ALIGN 64 /* alignment of the workspace and of every offset in it */

/* The bytes of buffer b (its dtype's size times its extents) in *out; false, *out unchanged,
 * when an extent is negative or the product overflows int64. */
bool kiln_buffer_bytes(const struct kiln_buffer *b, int64_t *out);
/* Elements of buffer b (the product of its extents; unchecked, as kiln_tensor_numel). */
int64_t kiln_buffer_numel(const struct kiln_buffer *b);

enum kiln_stmt_kind {
    KILN_STMT_FOR,
    KILN_STMT_STORE,
    KILN_STMT_SEQ,
    KILN_STMT_IF,
    KILN_STMT_LET,
    KILN_STMT_ALLOC,
};

struct kiln_stmt {
    uint8_t kind; /* enum kiln_stmt_kind */
    union {
        struct {
            kiln_expr         var; /* a named variable (kiln_var_named), i64 */
            kiln_expr         min, extent;
            uint8_t           loop; /* enum kiln_loop_kind */
            uint8_t           axis; /* GPU_BLOCK / GPU_THREAD: 0 = x, 1 = y, 2 = z; 0 otherwise */
            struct kiln_stmt *body;
            /* A cross-thread reduction (a reduction iterator bound to threadIdx.x): only on a
             * GPU_THREAD loop of axis 0. Its iterations run serially as any loop's in the
             * interpreter; the CUDA backend gives each thread a private accumulator for the
             * stores in the body (all to one element, `B[i] = B[i] op v`, op + max or min)
             * and combines them across the block before one thread stores (codegen/README.md).
             * 0 on every other loop. */
            uint8_t thread_reduce;
        } for_;
        struct {
            uint32_t  buf;
            kiln_expr index; /* LIST of indices */
            kiln_expr value;
        } store;
        struct {
            struct kiln_stmt **item;
            uint32_t           n;
        } seq;
        struct {
            kiln_expr         cond;
            struct kiln_stmt *then, *els; /* els may be NULL */
        } if_;
        struct {
            kiln_expr         var; /* named variable bound to value in body */
            kiln_expr         value;
            struct kiln_stmt *body;
        } let;
        struct {
            uint32_t          buf; /* a HEAP/STACK/SHARED buffer, live inside body */
            struct kiln_stmt *body;
        } alloc;
    } u;
};

struct kiln_func {
    kiln_ctx           *ctx;
    uint32_t            name; /* symbol */
    struct kiln_buffer *buf;
    uint32_t            nbuf, capbuf;
    uint32_t           *param; /* GLOBAL buffers in call order */
    uint32_t            nparam, capparam;
    struct kiln_stmt   *body;
    int64_t             ws_bytes;   /* workspace allocated once per call (0 = none) */
    int64_t             prep_bytes; /* prepared area of weight-derived buffers (0 = none) */
};

struct kiln_func *kiln_func_new(kiln_ctx *ctx, const char *name);
/* Adds a buffer; GLOBAL buffers also become parameters. Returns its index or KILN_NONE. */
uint32_t  kiln_func_add_buffer(struct kiln_func *f, const char *name, enum kiln_dtype dt,
                               uint32_t ndim, const int64_t *shape, enum kiln_scope scope,
                               uint32_t tensor);
kiln_expr kiln_index_list(kiln_ctx *ctx, uint32_t n, const kiln_expr *idx); /* LIST builder */
struct kiln_stmt *kiln_stmt_for(kiln_ctx *ctx, kiln_expr var, kiln_expr min, kiln_expr extent,
                                enum kiln_loop_kind loop, struct kiln_stmt *body);
struct kiln_stmt *kiln_stmt_store(kiln_ctx *ctx, uint32_t buf, uint32_t n, const kiln_expr *idx,
                                  kiln_expr value);
struct kiln_stmt *kiln_stmt_seq(kiln_ctx *ctx, uint32_t n, struct kiln_stmt *const *item);
struct kiln_stmt *kiln_stmt_if(kiln_ctx *ctx, kiln_expr cond, struct kiln_stmt *then,
                               struct kiln_stmt *els);
struct kiln_stmt *kiln_stmt_let(kiln_ctx *ctx, kiln_expr var, kiln_expr value,
                                struct kiln_stmt *body);
struct kiln_stmt *kiln_stmt_alloc(kiln_ctx *ctx, uint32_t buf, struct kiln_stmt *body);
/* Load of buffer b of f at n indices (dtype from the buffer). */
kiln_expr kiln_func_load(struct kiln_func *f, uint32_t b, uint32_t n, const kiln_expr *idx);
/* A fresh named i64 variable "base", "base.1", ... unique within the context. */
kiln_expr kiln_fresh_var(kiln_ctx *ctx, const char *base);

/* Checks: loop kinds are known, GPU block/thread loops have axis 0..2 and other loops 0;
 * every variable is bound by an enclosing for/let (and bound once on any path), loads
 * and stores name existing buffers with as many indices as the buffer has dimensions (or one
 * flat index when flat), stored values have the buffer's dtype, conditions are bool, vector
 * and unroll loops have constant positive extents, no axis/reduce variables remain; a buffer
 * with a workspace offset is HEAP, aligned, inside ws_bytes, and allocated only in the chain
 * of ALLOC statements at the top of the body (outside every loop, if and sequence). Whether
 * the planned ranges are disjoint is kiln_memplan_check's (passes/) to say. */
enum kiln_status kiln_func_verify(const struct kiln_func *f, bool flat);
/* Prints the loop nest as indented text (for tests, golden files and `kiln inspect`). */
enum kiln_status kiln_func_print(const struct kiln_func *f, struct kiln_buf *out);

/* ---- walking a loop nest (ir/visit.c) ----
 * A visitor and a mutator that recurse by default, so a pass overrides only the statement
 * kinds it cares about (Halide's IRVisitor / IRMutator as structs of optional function
 * pointers). The expressions a statement holds are offered to one callback, `expr`, with the
 * field they sit in; a for's and a let's variable is a binding, not a use, and is not offered.
 * Recursion depth is the statement nesting depth (a sequence's items are visited in a loop;
 * nested loops, ifs, lets and allocs each add a level), never the number of statements. */
enum kiln_stmt_field {
    KILN_STMT_FIELD_FOR_MIN,
    KILN_STMT_FIELD_FOR_EXTENT,
    KILN_STMT_FIELD_STORE_INDEX, /* the LIST of indices, as one expression */
    KILN_STMT_FIELD_STORE_VALUE,
    KILN_STMT_FIELD_IF_COND,
    KILN_STMT_FIELD_LET_VALUE,
};

enum kiln_walk {
    KILN_WALK_GO,   /* carry on */
    KILN_WALK_SKIP, /* from pre: leave this statement's kind callback, expressions and
                       children out (post still runs); elsewhere the same as GO */
    KILN_WALK_STOP, /* end the whole walk now: found what was looked for */
    KILN_WALK_FAIL, /* end the whole walk now with an error the callback recorded */
};

/* Every callback is optional. For each statement s, kiln_stmt_visit calls pre(s); then the
 * callback of s's kind if set, else kiln_stmt_visit_children (s's expressions in field
 * order, each to expr, then its statements in order: for/let/alloc body, if then and else,
 * sequence items); then post(s). A kind callback that wants the default for its children
 * calls kiln_stmt_visit_children, or kiln_stmt_visit on the children it picks (to bind a
 * variable around the body, say). STOP and FAIL end the walk at once (no more callbacks, no
 * post) and are what kiln_stmt_visit returns; otherwise it returns GO. A NULL statement is
 * visited as nothing (an absent else; kiln_func_verify reports missing ones). */
struct kiln_stmt_visitor {
    void *user;
    enum kiln_walk (*pre)(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
    enum kiln_walk (*post)(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
    enum kiln_walk (*expr)(struct kiln_stmt_visitor *v, const struct kiln_stmt *s,
                           enum kiln_stmt_field field, kiln_expr e);
    enum kiln_walk (*for_)(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
    enum kiln_walk (*store)(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
    enum kiln_walk (*seq)(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
    enum kiln_walk (*if_)(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
    enum kiln_walk (*let)(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
    enum kiln_walk (*alloc)(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
};
enum kiln_walk kiln_stmt_visit(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
enum kiln_walk kiln_stmt_visit_children(struct kiln_stmt_visitor *v, const struct kiln_stmt *s);
/* The buffers s loads or stores, each once: a buffer b < nbuf whose mark[b] is not stamp is
 * marked with it and appended at used[n]; returns the new count. mark and used hold nbuf
 * entries; a caller walking several statements with one stamp collects their union. */
uint32_t kiln_stmt_buffers(const kiln_ctx *ctx, const struct kiln_stmt *s, uint32_t nbuf,
                           uint32_t *mark, uint32_t stamp, uint32_t *used, uint32_t n);
/* The parameters among the buffers used[0..n) (param_of[b]: b's parameter index + 1, 0 for
 * other buffers), as parameter indices in ascending order into out (room for n); returns how
 * many. */
uint32_t kiln_used_params(const uint32_t *param_of, const uint32_t *used, uint32_t n,
                          uint32_t *out);

/* The mutator returns the statement to put in s's place: s itself when nothing in it
 * changed, else a new node (arena-allocated) that shares every unchanged child, so unchanged
 * subtrees stay pointer-equal and the input tree is never written. kiln_stmt_mutate(m, s)
 * calls the callback of s's kind if set (it returns the replacement, any statement, built as
 * it likes), else kiln_stmt_mutate_children (expr on each expression, the mutator on each
 * child statement, a rebuilt node if any of them changed); then post, if set, on the result.
 * expr returns the replacement expression. NULL (or a nil expression) is an error, recorded
 * in m->ctx by the callback that returned it; the mutator itself records "missing statement"
 * for an absent required child, and fails at once when m->ctx is already in error (a caller
 * reports a NULL that comes back with m->ctx healthy). A callback that sets m->stop ends the
 * walk: every statement not reached yet is kept as it is, changes made so far are kept. With
 * m->copy, every node is rebuilt, changed or not: a deep copy whose nodes a pass may then
 * write. pass names the pass in error messages. */
struct kiln_stmt_mutator {
    kiln_ctx   *ctx;
    void       *user;
    const char *pass; /* NULL = "mutate" */
    bool        stop;
    bool        copy;
    kiln_expr (*expr)(struct kiln_stmt_mutator *m, const struct kiln_stmt *s,
                      enum kiln_stmt_field field, kiln_expr e);
    struct kiln_stmt *(*post)(struct kiln_stmt_mutator *m, struct kiln_stmt *s);
    struct kiln_stmt *(*for_)(struct kiln_stmt_mutator *m, struct kiln_stmt *s);
    struct kiln_stmt *(*store)(struct kiln_stmt_mutator *m, struct kiln_stmt *s);
    struct kiln_stmt *(*seq)(struct kiln_stmt_mutator *m, struct kiln_stmt *s);
    struct kiln_stmt *(*if_)(struct kiln_stmt_mutator *m, struct kiln_stmt *s);
    struct kiln_stmt *(*let)(struct kiln_stmt_mutator *m, struct kiln_stmt *s);
    struct kiln_stmt *(*alloc)(struct kiln_stmt_mutator *m, struct kiln_stmt *s);
};
struct kiln_stmt *kiln_stmt_mutate(struct kiln_stmt_mutator *m, struct kiln_stmt *s);
struct kiln_stmt *kiln_stmt_mutate_children(struct kiln_stmt_mutator *m, struct kiln_stmt *s);

/* ---- loop-nest interpreter (ir/interp_loop.c) ----
 * Evaluates f (flat: one flat index per access, else one per dimension) in double precision,
 * the oracle for code generators and lowering passes. bufs[i] is the storage of parameter i
 * (f->param[i], the kernel ABI's order; this is buffer i when the GLOBAL buffers were added
 * first), one double per element; integer and bool elements hold integral values. HEAP/STACK
 * buffers are allocated at their ALLOC statement and filled with NaN. Loops of every kind run
 * serially; SELECT is lazy (AND/OR are not: both operands are evaluated); integers wrap to
 * their dtype after each operation; float->int casts truncate and saturate (NaN -> 0); stores
 * round to the buffer's dtype (f32). Out-of-bounds accesses, division by zero and integer reads of
 * unwritten elements return KILN_ERR_INVALID naming the buffer and index; never crashes. */
enum kiln_status kiln_func_eval(const struct kiln_func *f, bool flat, double *const *bufs);

#endif /* KILN_IR_H */
