/* kas/kas.h -- internal: Kernel Architecture Search. Primitives with symbolic shapes, the two
 * solvers (legality, budget), the constructive sampler with its filters and duplicate removal,
 * a small evaluator for output fingerprints, and the emitters (.kg kernel graph, PyTorch module).
 *
 * Sizes are monomials  (num/den) * C^a K^b G^c x0^d x1^e x2^f  over the placeholder's channels
 * C, its output channels K, a design-wide group count G and unknowns x0..x2 that primitives
 * introduce. Every tensor of a design is [N, d0, .., d(r-1)] (non-spatial dims, each a monomial)
 * followed, for a *map*, by the two spatial dims H/down, W/down; a tensor without spatial dims
 * is a *matrix* (or vector). The batch N is never touched by a primitive. One design holds for
 * every placeholder of the network at once: equations are solved symbolically, and the budget
 * solver picks the values of G and of the unknowns left free. */
#ifndef KILN_KAS_H
#define KILN_KAS_H

#include "../ir/ir.h"

enum kas_var {
    KAS_C,
    KAS_K,
    KAS_G,
    KAS_X0,
    KAS_X1,
    KAS_X2,
    KAS_NVAR,
};
#define KAS_MAX_UNKNOWN 3
#define KAS_MAX_RANK    5            /* non-spatial dims of a tensor */
#define KAS_MAX_WDIMS   KAS_MAX_RANK /* dims of a weight: a scale may span every dim (conv: 4) */
#define KAS_MAX_NODES   24           /* primitives of one design, input included */
#define KAS_MAX_PH      16           /* placeholders */
extern const char *const kas_var_name[KAS_NVAR]; /* "C", "K", "G", "x0", ... */

/* A size: num/den * prod var^e[var]; num, den > 0 and coprime. */
struct kas_mono {
    int32_t num, den;
    int8_t  e[KAS_NVAR];
};
struct kas_mono kas_mono_const(int32_t v);
struct kas_mono kas_mono_var(enum kas_var v);
struct kas_mono kas_mono_mul(struct kas_mono a, struct kas_mono b);
struct kas_mono kas_mono_div(struct kas_mono a, struct kas_mono b);
bool            kas_mono_eq(struct kas_mono a, struct kas_mono b);
bool            kas_mono_is_one(struct kas_mono a);
/* Value at vals[var]; false (with *out undefined) when it is not a positive integer or overflows.
 */
bool kas_mono_eval(struct kas_mono m, const int64_t *vals, int64_t *out);
/* "C*x0/G", "3", "K": a Python expression when py (integer division //), else plain. */
void     kas_mono_print(struct kas_mono m, bool py, char *buf, size_t size);
uint64_t kas_mono_hash(uint64_t h, struct kas_mono m);

/* ---- legality solver: symbolic substitution of unknowns ---- */
struct kas_solver {
    uint8_t         nunk; /* unknowns introduced so far */
    bool            solved[KAS_MAX_UNKNOWN];
    struct kas_mono sol[KAS_MAX_UNKNOWN]; /* x_i := sol[i] (no solved unknown inside) */
};
/* Introduces a new unknown; false when all KAS_MAX_UNKNOWN are in use. */
bool            kas_solver_fresh(struct kas_solver *s, enum kas_var *out);
struct kas_mono kas_solver_apply(const struct kas_solver *s, struct kas_mono m);
/* Whether a = b can hold for every placeholder (already equal, or solvable for an unknown). */
bool kas_solver_can_unify(const struct kas_solver *s, struct kas_mono a, struct kas_mono b);
/* Adds the equation a = b: solves it for one unknown (the newest with exponent +-1, or any whose
 * exponent divides the rest) and records the substitution. false when it is unsolvable: no
 * unknown left and a != b for some placeholder (C, K, G are independent symbols). */
bool kas_solver_unify(struct kas_solver *s, struct kas_mono a, struct kas_mono b);

/* ---- primitives ----
 * Each kind is a row of kas/prims.def and an entry of kas_prims[] (prim.c): its name, inputs,
 * named parameters (a member of union kas_params) and sampling weight, and the functions that
 * give its shape rule, weight and cost (prim.c), its .kg, PyTorch and one-line forms (emit.c),
 * its evaluation (eval.c) and its random proposal (sample.c). Besides those functions a kind is
 * named only where a rule is about that kind: the sampler's redundant pairs and closing steps
 * (sample.c), a grouped conv reading G (sym.c), scales starting at one and unfold's window
 * helper (emit.c, eval.c). */
enum kas_prim {
#define KAS_PRIM(ID, name, nin, weight) KAS_##ID,
#include "prims.def"
#undef KAS_PRIM
    KAS_NPRIM,
};
#define KAS_DIM_SPATIAL 7 /* fold: h and w together */
enum kas_binop { KAS_ADD, KAS_SUB, KAS_MUL, KAS_MAX, KAS_MIN, KAS_NBINOP };
enum kas_fold { KAS_FOLD_SUM, KAS_FOLD_MEAN, KAS_FOLD_MAX, KAS_NFOLD };
enum kas_unop {
    KAS_RELU,
    KAS_GELU,
    KAS_SIGMOID,
    KAS_TANH,
    KAS_ABS,
    KAS_EXP,
    KAS_NEG,
    KAS_SQRT, /* sqrt(|x|): total on every input */
    KAS_SQUARE,
    KAS_NUNOP,
};
enum kas_axes { KAS_AXIS_H = 1, KAS_AXIS_W = 2 }; /* unfold: a mask of the two */
enum kas_conv_kind { KAS_CONV_DENSE, KAS_CONV_GROUPED, KAS_CONV_DEPTHWISE };
enum kas_pool_kind { KAS_POOL_AVG, KAS_POOL_MAX };
extern const char *const kas_binop_name[KAS_NBINOP];
extern const char *const kas_fold_name[KAS_NFOLD];
extern const char *const kas_unop_name[KAS_NUNOP];

/* The parameters of each kind, in node.p.<name>; the enum a field takes is named beside it. A
 * design's other size (fc, conv and mix outputs, the group factor) is node.m. */
union kas_params {
    struct {
        int8_t axes;     /* enum kas_axes mask */
        int8_t k;        /* window 3/5/7, same padding */
        int8_t dilation; /* 1/2/3 */
    } unfold;
    struct {
        int8_t axis;   /* 0 = h, 1 = w */
        int8_t offset; /* +-1, circular */
    } shift;
    struct {
        int8_t dim; /* split into [m, d / m] (a view) */
    } group;
    struct {
        int8_t dim; /* merged with dim + 1 (a view) */
    } ungroup;
    struct {
        int8_t mask; /* dims of the learned scale, broadcast over the rest */
    } scale;
    struct {
        int8_t dim; /* replaced by m through w[m, d] (a 1x1 conv on a rank-1 map) */
    } fc;
    struct {
        int8_t kind; /* enum kas_conv_kind: dense, G groups, depthwise; rank-1 map; m out */
        int8_t kh, kw;
    } conv;
    struct {
        int8_t i, j; /* i < j: contracted into m at i through w[m, d_i, d_j] */
    } mix;
    struct {
        int8_t op; /* enum kas_binop; equal shapes, or a map and a matrix broadcast */
    } binary;
    struct {
        int8_t dim; /* or KAS_DIM_SPATIAL: h and w */
        int8_t op;  /* enum kas_fold */
    } fold;
    struct {
        int8_t op; /* enum kas_unop */
    } unary;
    struct {
        int8_t dim;
    } softmax;
    struct {
        int8_t kind; /* enum kas_pool_kind; rank-1 map, stride 1, same padding */
        int8_t k;    /* window */
    } pool;
    struct {
        int8_t factor; /* keeps every factor-th row and column */
    } downsample;
};

struct kas_shape {
    uint8_t         rank;    /* non-spatial dims */
    bool            spatial; /* a map: h, w follow */
    uint8_t         down;    /* spatial dims are H/down, W/down */
    struct kas_mono d[KAS_MAX_RANK];
};

struct kas_node {
    uint8_t          prim; /* enum kas_prim */
    uint8_t          nin;
    uint8_t          in[2];
    union kas_params p; /* p.<name of the kind> */
    struct kas_mono  m; /* new size (fc, conv, mix out; group factor) */
    struct kas_shape out;
    uint16_t         rf_h, rf_w; /* receptive field (capped) */
    uint16_t         nuse;       /* consumers */
};

/* A design: a DAG of primitives in topological order, node 0 the input [C] map, the last node
 * the output [K] map (spatial down = the placeholder stride). */
struct kas_design {
    uint8_t           nnode;
    struct kas_node   node[KAS_MAX_NODES];
    struct kas_solver sol;
    bool              k_is_c; /* every placeholder has K = C: K is written C */
    uint8_t           stride;
    /* G and the free unknowns, set by the budget solver: each a constant or a monomial in C
     * and K (x0 = C/4: the same ratio at every placeholder); num 0 = unset */
    struct kas_mono val[KAS_NVAR];
    uint64_t        hash;        /* canonical structural hash */
    uint64_t        fingerprint; /* outputs on fixed random inputs (0 = not evaluated) */
};

/* ---- the primitive descriptors (kas_prims[kind]) ---- */
/* A parameter: its name, where it is in union kas_params, and the byte it takes in the packed
 * word kas_node_attrs gives (canonical hash, fingerprint weight seeds: fixed, so hashes stay
 * the same from one version to the next). */
struct kas_param {
    const char *name;
    uint8_t     offset, slot;
};
struct kas_cost;     /* prim.c: a node's sizes at concrete values */
struct kas_kg_emit;  /* emit.c: one statement of the .kg text */
struct kas_py_emit;  /* emit.c: one line of the PyTorch forward */
struct kas_run;      /* eval.c: one node of the evaluator */
struct kas_proposal; /* sample.c: a random node being drawn */
struct kas_prim_desc {
    const char             *name;
    uint8_t                 nin;           /* inputs */
    uint8_t                 sample_weight; /* relative frequency of proposals */
    const struct kas_param *param;         /* ends with a NULL name */
    /* Shape rule: s holds the first input's shape (A, B the inputs; rf already the inputs'
     * largest); updates s, nd->rf_h/w, nd->m and the solver; false when it does not apply. */
    bool (*infer)(struct kas_design *d, struct kas_node *nd, const struct kas_node *A,
                  const struct kas_node *B, struct kas_shape *s);
    /* The learned weight's dims (in: the first input's shape); returns how many, 0 = none. */
    int (*weight)(const struct kas_node *n, const struct kas_shape *in, struct kas_mono *w);
    /* FLOPs of the emitted statement (kiln_call_stats' count); false if a size is not
     * integral. */
    bool (*cost)(const struct kas_cost *c, double *flops);
    void (*emit_kg)(const struct kas_kg_emit *e);
    void (*emit_py)(const struct kas_py_emit *e);
    /* "unfold(hw,3,d1": the label and parameters in a design's one-line description; m is
     * node.m printed. */
    void (*describe)(const struct kas_node *n, const char *m, char *buf, size_t size);
    bool (*run)(const struct kas_run *r); /* false if the sizes do not allow it */
    void (*propose)(struct kas_proposal *p);
};
extern const struct kas_prim_desc kas_prims[KAS_NPRIM];
/* The parameters packed in one word, each at its slot's byte. */
uint64_t kas_node_attrs(const struct kas_node *n);

#define KAS_PRIM(ID, name, nin, weight)                                                        \
    bool kas_infer_##name(struct kas_design *d, struct kas_node *nd, const struct kas_node *A, \
                          const struct kas_node *B, struct kas_shape *s);                      \
    int  kas_weight_##name(const struct kas_node *n, const struct kas_shape *in,               \
                           struct kas_mono *w);                                                \
    bool kas_cost_##name(const struct kas_cost *c, double *flops);                             \
    void kas_emit_kg_##name(const struct kas_kg_emit *e);                                      \
    void kas_emit_py_##name(const struct kas_py_emit *e);                                      \
    void kas_describe_##name(const struct kas_node *n, const char *m, char *buf, size_t size); \
    bool kas_run_##name(const struct kas_run *r);                                              \
    void kas_propose_##name(struct kas_proposal *p);
#include "prims.def"
#undef KAS_PRIM

/* Applies the shape rule of `nd` (prim, attributes, inputs already set) to d's nodes; false if
 * the primitive does not apply to its inputs (it then leaves d unchanged except the solver when
 * it returns false from an equation: callers work on a copy). */
bool kas_node_infer(struct kas_design *d, struct kas_node *nd);
/* Appends a node (shape inferred, solver updated, substitution applied to every node);
 * returns its index or -1 when illegal. */
int  kas_design_add(struct kas_design *d, struct kas_node nd);
void kas_design_init(struct kas_design *d, bool k_is_c, int stride);
/* Substitutes the solver's solutions into every size of d. */
void kas_design_resolve(struct kas_design *d);
/* Weight tensor of node i, if any: rank and dims (at most KAS_MAX_WDIMS). */
int kas_node_weight(const struct kas_design *d, int i, struct kas_mono *dims);

/* Concrete values of every variable for one placeholder (C, K from it; G, unknowns from d). */
struct kas_placeholder {
    int64_t C, K, H, W;
};
void kas_design_vals(const struct kas_design *d, const struct kas_placeholder *ph, int64_t *vals);
/* FLOPs and parameters of node i (the counts kiln_call_stats gives the emitted statement),
 * at concrete vals and spatial size h x w of the input; false if a size is not integral. */
bool kas_node_cost(const struct kas_design *d, int i, const int64_t *vals, int64_t H, int64_t W,
                   double *flops, double *params);
bool kas_design_cost(const struct kas_design *d, const struct kas_placeholder *ph, double *flops,
                     double *params);

/* ---- sampling ---- */
struct kas_spec {
    uint32_t               nph;
    struct kas_placeholder ph[KAS_MAX_PH];
    int                    stride;               /* 1 or 2: the replaced layer's stride */
    int                    ref_k;                /* the replaced convolution's window (3) */
    double                 flops_lo, flops_hi;   /* relative to the replaced layers, summed */
    double                 params_lo, params_hi; /* likewise */
    int                    max_ops; /* primitives per kernel (soft; the closing steps may add) */
    int                    min_rf;  /* minimum receptive field in h and w (3 for a 3x3 conv) */
    bool                   no_fingerprint; /* skip output-fingerprint duplicate removal */
};
void kas_spec_default(struct kas_spec *s);
/* Checks the spec (sizes positive, H, W divisible by the stride, ranges ordered); errors into ctx.
 */
enum kiln_status kas_spec_check(kiln_ctx *ctx, const struct kas_spec *s);
/* The replaced layer's cost: dense ref_k x ref_k convolution C -> K, stride s, summed. */
void kas_spec_ref_cost(const struct kas_spec *s, double *flops, double *params);

/* Budget solver: enumerates every assignment of G and of the free unknowns over the candidate
 * values (kas_budget_candidates), keeps those that make every size of every placeholder a positive
 * integer and put the summed FLOPs and parameters inside the spec's ranges, and picks one of them
 * uniformly with rng (NULL: the first). Returns the number of feasible assignments (0: none; d->val
 * unset). */
uint32_t kas_budget_solve(const struct kas_spec *s, struct kas_design *d, struct kiln_rng *rng);
/* The values the budget solver tries for free variable v (G: constants dividing every C and K;
 * unknowns: constants 2..512 and C or K times 1/8..4); returns how many (<= cap) went to out. */
uint32_t kas_budget_candidates(const struct kas_spec *s, const struct kas_design *d, enum kas_var v,
                               struct kas_mono *out, uint32_t cap);
/* "x0=C/4 G=8": the free variables' values (empty when there are none). */
void kas_design_values(const struct kas_design *d, bool py, char *buf, size_t size);

struct kas_stats {
    uint64_t attempts; /* designs grown */
    uint64_t illegal;  /* closing failed (legality) */
    uint64_t filtered; /* filters: no weights, receptive field */
    uint64_t over_budget;
    uint64_t dup_hash; /* duplicates by canonical hash */
    uint64_t dup_fp;   /* duplicates by output fingerprint */
    uint64_t accepted;
};

struct kas_sampler; /* sampler state: spec, rng, seen hashes; in ctx's allocator */
/* NULL on OOM (error recorded); the sampler uses ctx's allocator and must be freed (with
 * kas_sampler_free) before ctx. */
struct kas_sampler *kas_sampler_new(kiln_ctx *ctx, const struct kas_spec *s, uint64_t seed);
void                kas_sampler_free(struct kas_sampler *sm);
/* Grows designs until one is legal, inside budget, filtered and new; false after max_tries. */
bool kas_sampler_next(struct kas_sampler *sm, struct kas_design *out, uint32_t max_tries);
const struct kas_stats *kas_sampler_stats(const struct kas_sampler *sm);
/* Grows one design (legal, closed) without budget, filters or duplicate checks; false when
 * closing failed. Used by the sampler and by reachability tests. */
bool kas_grow(const struct kas_spec *s, struct kiln_rng *rng, struct kas_design *out);
/* Replays a fixed list of steps (nodes with prim, inputs, attributes, m) through the sampler's
 * own checks (legality, shape distance, redundant pairs), then closes like kas_grow: shows a
 * design is in the sampler's space. false when a step is refused or closing fails. */
bool kas_grow_script(const struct kas_spec *s, const struct kas_node *script, int n,
                     struct kas_design *out);
/* Canonical structural hash (commutative inputs ordered), set into d->hash and returned. */
uint64_t kas_design_hash(struct kas_design *d);
/* Filters: holds a learned weight, receptive field >= min_rf, no redundant pair. */
bool kas_design_filter(const struct kas_spec *s, const struct kas_design *d);
/* The receptive field a design reaches (min of h and w, capped at 255). */
int kas_design_rf(const struct kas_design *d);

/* ---- evaluation (kas/eval.c): the small double-precision evaluator used for fingerprints ---- */
/* Evaluates d at vals with spatial size H x W (batch 1): x holds C*H*W values; weights come from
 * wfn(ud, node, count, dst) (NULL: fixed pseudo-random from the node's local structure). out
 * receives numel(output) values (caller-sized: K*H/s*W/s). false if a size is not integral or
 * memory runs out. */
typedef void (*kas_weight_fn)(void *ud, int node, int64_t n, double *dst);
bool kas_design_eval(const struct kas_design *d, const int64_t *vals, int64_t H, int64_t W,
                     const double *x, kas_weight_fn wfn, void *ud, double *out);
/* Output fingerprint on fixed inputs at tiny sizes (0 when no tiny size is integral). */
uint64_t kas_design_fingerprint(const struct kas_design *d);

/* ---- emitters (kas/emit.c) ---- */
/* The design as .kg text for one placeholder (batch n), weights named w<i> after their node. */
enum kiln_status kas_emit_kg(kiln_ctx *ctx, const struct kas_design *d,
                             const struct kas_placeholder *ph, int64_t batch, struct kiln_buf *out);
/* The same, parsed into a kernel graph. */
enum kiln_status kas_emit_graph(kiln_ctx *ctx, const struct kas_design *d,
                                const struct kas_placeholder *ph, int64_t batch,
                                struct kiln_graph **out);
/* A PyTorch nn.Module class `name` (constructor KernelName(C, K)), one parameter per weight node
 * named like the .kg weights, initialised like nn.Conv2d (uniform +-1/sqrt(fan_in)). */
enum kiln_status kas_emit_py(kiln_ctx *ctx, const struct kas_design *d, const char *name,
                             struct kiln_buf *out);
/* One line describing the design ("unfold(hw,3,d1) -> fc(0->x0) -> ...") */
void kas_design_describe(const struct kas_design *d, char *buf, size_t size);

#endif /* KILN_KAS_H */
