/* tuner/features.c -- per-store features of a lowered loop nest, in the spirit of Ansor's
 * (TVM auto_scheduler feature.cc), rewritten for kiln's loop-nest IR.
 *
 * One row of KILN_FEAT_DIM floats per STORE statement, in statement order. The groups (column
 * indices are the F_* constants below; kiln_feat_name names each column):
 *
 *   computation   op counts of the stored value and of every index expression, by kind, times
 *                 the trip count of the enclosing loops (float and integer separately)
 *   annotations   vector / unroll / parallel loops around the store: how many, the product of
 *                 their extents, the extent of the innermost one, and a one-hot position
 *   buffers       the 5 buffers with most bytes accessed: access type, bytes, unique bytes,
 *                 cache lines, unique lines, reuse type / distance / count, innermost stride
 *   intensity     flops / unique bytes as loops are added from the innermost outwards,
 *                 sampled at 10 points of cumulative flops (Ansor's curve)
 *   allocation    size and executions of the temporary the store writes
 *   outer         trip count, loop count, innermost unrolled product (auto-unroll)
 *   extras        enclosing ifs, accumulation, loop levels whose footprint fits in L1 / L2
 *   GPU           for a GPU target (hw->gpu) only, zero otherwise: the launch of the store's
 *                 kernel (grid and block extents, threads per block, blocks, static shared
 *                 memory, per-thread arrays), the store's global-memory bytes per thread
 *                 (with repetition) and per block (unique), shared-memory bytes per thread,
 *                 its per-thread tile, float4/float2 accesses, cross-thread reduction, and the
 *                 stride of its global accesses along threadIdx.x (coalescing); Ansor's GPU
 *                 features are the block and thread extents
 *
 * Access analysis: every index is decomposed into an affine form sum(c_k * loop_k) + c0 by a
 * recursive extractor (ADD/SUB/NEG/MUL by a constant, floordiv/floormod by a positive constant
 * approximated, lets expanded); loops that enter an index in any other way are "irregular"
 * and treated as jumping to a new block each iteration. Touched regions are estimated from
 * coefficients and extents: coefficients in ascending order grow one contiguous run while the
 * next coefficient fits inside it, then multiply the number of disjoint blocks. Counts are
 * scaled by sign(x) * log2(1 + |x|) as Ansor does; one-hot columns stay 0/1.
 *
 * Memory: rows and scratch are malloc'ed (rows are handed to the caller); nothing is interned
 * except by the bound analysis of non-constant loop extents. */
#include "tuner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXLOOP  64 /* loops around one store */
#define NBUF     5  /* buffers described per row */
#define NBUFFEAT 18
#define NAI      10
#define MAXWALK  200000 /* expression nodes visited per store (shared subtrees repeat) */

enum {
    F_FLOAT_MAD,
    F_FLOAT_ADDSUB,
    F_FLOAT_MUL,
    F_FLOAT_DIV,
    F_FLOAT_MINMAX,
    F_FLOAT_CMP,
    F_FLOAT_MATH,
    F_FLOAT_OTHER,
    F_INT_MAD,
    F_INT_ADDSUB,
    F_INT_MUL,
    F_INT_DIVMOD,
    F_INT_MINMAX,
    F_INT_CMP,
    F_INT_OTHER,
    F_BOOL_OP,
    F_SELECT,
    F_CAST,
    F_LOADS,
    F_NCOUNT, /* end of the op counts */
    F_VEC = F_NCOUNT,
    F_UNROLL = F_VEC + 11,
    F_PAR = F_UNROLL + 11,
    F_BUF = F_PAR + 11,
    F_AI = F_BUF + NBUF * NBUFFEAT,
    F_ALLOC_BYTES = F_AI + NAI,
    F_ALLOC_EXECS,
    F_ALLOC_BYTES_X_EXECS,
    F_ALLOC_INNER,
    F_ALLOC_NUM,
    F_OUTER_PROD,
    F_OUTER_NUM,
    F_AUTO_UNROLL,
    F_NUM_IF,
    F_ACCUM,
    F_L1_LEVELS,
    F_L2_LEVELS,
    F_GPU, /* the GPU group: zero for CPU targets */
    F_GPU_GRID,
    F_GPU_BLOCK = F_GPU_GRID + 3,
    F_GPU_THREADS = F_GPU_BLOCK + 3,
    F_GPU_BLOCKS,
    F_GPU_SHARED,
    F_GPU_LOCAL,
    F_GPU_GLOBAL_THREAD,
    F_GPU_GLOBAL_BLOCK,
    F_GPU_SHARED_THREAD,
    F_GPU_TILE,
    F_GPU_VEC,
    F_GPU_XREDUCE,
    F_GPU_TX_STRIDE,
    F_END
};
_Static_assert(F_END == KILN_FEAT_DIM, "feature layout must fill KILN_FEAT_DIM columns");

/* within an annotation group */
enum { A_NUM, A_PROD, A_LEN, A_POS };
/* positions */
enum {
    POS_NONE,
    POS_INNER_SPATIAL,
    POS_MIDDLE_SPATIAL,
    POS_OUTER_SPATIAL,
    POS_INNER_REDUCE,
    POS_MIDDLE_REDUCE,
    POS_OUTER_REDUCE,
    POS_MIXED
};
/* within a buffer group */
enum {
    B_READ,
    B_WRITE,
    B_RW,
    B_BYTES,
    B_UBYTES,
    B_LINES,
    B_ULINES,
    B_REUSE_LOOP,
    B_REUSE_SERIAL,
    B_REUSE_NONE,
    B_DIST_ITER,
    B_DIST_BYTES,
    B_REUSE_COUNT,
    B_BYTES_PER_REUSE,
    B_UBYTES_PER_REUSE,
    B_LINES_PER_REUSE,
    B_ULINES_PER_REUSE,
    B_STRIDE
};

static const char *const feat_names[KILN_FEAT_DIM] = {
    "float_mad",
    "float_addsub",
    "float_mul",
    "float_div",
    "float_minmax",
    "float_cmp",
    "float_math",
    "float_other",
    "int_mad",
    "int_addsub",
    "int_mul",
    "int_divmod",
    "int_minmax",
    "int_cmp",
    "int_other",
    "bool_op",
    "select",
    "cast",
    "loads",
    "vec_num",
    "vec_prod",
    "vec_len",
    "vec_pos_none",
    "vec_pos_inner_spatial",
    "vec_pos_middle_spatial",
    "vec_pos_outer_spatial",
    "vec_pos_inner_reduce",
    "vec_pos_middle_reduce",
    "vec_pos_outer_reduce",
    "vec_pos_mixed",
    "unroll_num",
    "unroll_prod",
    "unroll_len",
    "unroll_pos_none",
    "unroll_pos_inner_spatial",
    "unroll_pos_middle_spatial",
    "unroll_pos_outer_spatial",
    "unroll_pos_inner_reduce",
    "unroll_pos_middle_reduce",
    "unroll_pos_outer_reduce",
    "unroll_pos_mixed",
    "par_num",
    "par_prod",
    "par_len",
    "par_pos_none",
    "par_pos_inner_spatial",
    "par_pos_middle_spatial",
    "par_pos_outer_spatial",
    "par_pos_inner_reduce",
    "par_pos_middle_reduce",
    "par_pos_outer_reduce",
    "par_pos_mixed",
    "b0_read",
    "b0_write",
    "b0_readwrite",
    "b0_bytes",
    "b0_unique_bytes",
    "b0_lines",
    "b0_unique_lines",
    "b0_reuse_loop",
    "b0_reuse_serial",
    "b0_reuse_none",
    "b0_reuse_dist_iter",
    "b0_reuse_dist_bytes",
    "b0_reuse_count",
    "b0_bytes_per_reuse",
    "b0_unique_bytes_per_reuse",
    "b0_lines_per_reuse",
    "b0_unique_lines_per_reuse",
    "b0_stride",
    "b1_read",
    "b1_write",
    "b1_readwrite",
    "b1_bytes",
    "b1_unique_bytes",
    "b1_lines",
    "b1_unique_lines",
    "b1_reuse_loop",
    "b1_reuse_serial",
    "b1_reuse_none",
    "b1_reuse_dist_iter",
    "b1_reuse_dist_bytes",
    "b1_reuse_count",
    "b1_bytes_per_reuse",
    "b1_unique_bytes_per_reuse",
    "b1_lines_per_reuse",
    "b1_unique_lines_per_reuse",
    "b1_stride",
    "b2_read",
    "b2_write",
    "b2_readwrite",
    "b2_bytes",
    "b2_unique_bytes",
    "b2_lines",
    "b2_unique_lines",
    "b2_reuse_loop",
    "b2_reuse_serial",
    "b2_reuse_none",
    "b2_reuse_dist_iter",
    "b2_reuse_dist_bytes",
    "b2_reuse_count",
    "b2_bytes_per_reuse",
    "b2_unique_bytes_per_reuse",
    "b2_lines_per_reuse",
    "b2_unique_lines_per_reuse",
    "b2_stride",
    "b3_read",
    "b3_write",
    "b3_readwrite",
    "b3_bytes",
    "b3_unique_bytes",
    "b3_lines",
    "b3_unique_lines",
    "b3_reuse_loop",
    "b3_reuse_serial",
    "b3_reuse_none",
    "b3_reuse_dist_iter",
    "b3_reuse_dist_bytes",
    "b3_reuse_count",
    "b3_bytes_per_reuse",
    "b3_unique_bytes_per_reuse",
    "b3_lines_per_reuse",
    "b3_unique_lines_per_reuse",
    "b3_stride",
    "b4_read",
    "b4_write",
    "b4_readwrite",
    "b4_bytes",
    "b4_unique_bytes",
    "b4_lines",
    "b4_unique_lines",
    "b4_reuse_loop",
    "b4_reuse_serial",
    "b4_reuse_none",
    "b4_reuse_dist_iter",
    "b4_reuse_dist_bytes",
    "b4_reuse_count",
    "b4_bytes_per_reuse",
    "b4_unique_bytes_per_reuse",
    "b4_lines_per_reuse",
    "b4_unique_lines_per_reuse",
    "b4_stride",
    "ai_0",
    "ai_1",
    "ai_2",
    "ai_3",
    "ai_4",
    "ai_5",
    "ai_6",
    "ai_7",
    "ai_8",
    "ai_9",
    "alloc_bytes",
    "alloc_execs",
    "alloc_bytes_x_execs",
    "alloc_inner_prod",
    "alloc_num",
    "outer_prod",
    "outer_num",
    "auto_unroll",
    "num_if",
    "accumulate",
    "l1_levels",
    "l2_levels",
    "gpu",
    "gpu_grid_x",
    "gpu_grid_y",
    "gpu_grid_z",
    "gpu_block_x",
    "gpu_block_y",
    "gpu_block_z",
    "gpu_threads_per_block",
    "gpu_blocks",
    "gpu_shared_bytes",
    "gpu_local_bytes",
    "gpu_global_bytes_per_thread",
    "gpu_global_unique_bytes_per_block",
    "gpu_shared_bytes_per_thread",
    "gpu_thread_tile",
    "gpu_vector_accesses",
    "gpu_cross_thread_reduce",
    "gpu_threadidx_x_stride",
};

const char *
kiln_feat_name(uint32_t i)
{
    return i < KILN_FEAT_DIM ? feat_names[i] : NULL;
}

/* Columns that are one-hot (left unscaled). */
static bool
is_onehot(uint32_t i)
{
    if (i >= F_VEC && i < F_BUF)
        return (i - F_VEC) % 11 >= A_POS;
    if (i >= F_BUF && i < F_AI) {
        uint32_t k = (i - F_BUF) % NBUFFEAT;
        return k <= B_RW || (k >= B_REUSE_LOOP && k <= B_REUSE_NONE);
    }
    return i == F_ACCUM || i == F_GPU || i == F_GPU_XREDUCE;
}

/* ---- extraction state ---- */

struct loop {
    uint32_t var; /* expression id of the loop variable */
    double   ext; /* trip count (an upper bound when not constant) */
    int64_t  min; /* constant lower bound, or 0 */
    uint8_t  kind;
    uint8_t  axis; /* GPU loops: 0 = x, 1 = y, 2 = z */
    bool     xr;   /* a cross-thread reduction */
};

/* Where a buffer lives on the GPU: global memory (parameters, the workspace), a block's shared
 * memory, or a thread's own array (codegen/cuda.c's placement). */
enum { MEM_GLOBAL, MEM_SHARED, MEM_LOCAL };

/* The launch of the kernel being walked (one per root statement, as codegen/cuda.c makes
 * them): extents per axis, static shared bytes per block, bytes of per-thread arrays. */
struct kernel {
    double grid[3], block[3], shared, local, xr_elem;
};

struct let {
    uint32_t  var;
    kiln_expr value;
};

struct alloc {
    uint32_t buf;
    uint32_t depth; /* loops around the allocation */
};

/* affine form of an index in the loop variables */
struct lin {
    double   c[MAXLOOP];
    double   c0;
    uint64_t dep;    /* loops whose variable occurs in the index */
    uint64_t nonlin; /* loops that occur other than affinely */
};

struct access {
    uint32_t   buf;
    uint32_t   index; /* flat index expression id (or LIST id for multi-index accesses) */
    uint32_t   mult;  /* occurrences in the statement */
    bool       rd, wr;
    struct lin lin;
};

struct bufstat { /* one buffer's accesses in one statement */
    uint32_t buf;
    bool     rd, wr;
    uint32_t nacc;   /* occurrences */
    double   bytes;  /* accessed, with repetition */
    double   lines;  /* cache lines accessed, with repetition */
    double  *ubytes; /* [nloop + 1]: unique bytes under loop level k (all loops at k = 0) */
    double  *ulines; /* [nloop + 1] */
    double   stride; /* elements per iteration of the innermost loop that moves it */
    int      reuse;  /* 0 loop, 1 serial, 2 none */
    double   dist_iter, dist_bytes, reuse_ct;
};

struct fx {
    kiln_ctx               *ctx;
    const struct kiln_func *f;
    double                  line, l1, l2;
    struct loop             loop[MAXLOOP];
    uint32_t                nloop;
    struct let             *let;
    uint32_t                nlet, caplet;
    struct alloc           *alloc;
    uint32_t                nalloc, capalloc;
    uint32_t                nif;
    /* GPU targets: where each buffer lives, and the current kernel */
    bool          gpu;
    uint8_t      *mem;
    struct kernel kern;
    /* per store */
    double         cnt[F_NCOUNT];
    struct access *acc;
    uint32_t       nacc, capacc;
    uint32_t       walked;
    /* output */
    float   *rows;
    uint32_t nrow, caprow;
};

static bool
grow(void **p, uint32_t *cap, size_t elem, uint32_t need)
{
    if (need <= *cap)
        return true;
    uint32_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, elem * n);
    if (!q)
        return false;
    *p = q;
    *cap = n;
    return true;
}

static enum kiln_status
oom(struct fx *X)
{
    return KILN_FAIL(X->ctx, KILN_ERR_NOMEM, "features", "out of memory extracting features");
}

static const struct kiln_node *
node(const struct fx *X, uint32_t id)
{
    return &X->ctx->node[id];
}

static bool
is_float_dt(uint8_t dt)
{
    return dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F16 || dt == KILN_DTYPE_BF16
           || dt == KILN_DTYPE_F64;
}

static int
loop_of(const struct fx *X, uint32_t var)
{
    for (uint32_t k = X->nloop; k-- > 0;)
        if (X->loop[k].var == var)
            return (int)k;
    return -1;
}

static const struct let *
let_of(const struct fx *X, uint32_t var)
{
    for (uint32_t k = X->nlet; k-- > 0;)
        if (X->let[k].var == var)
            return &X->let[k];
    return NULL;
}

/* ---- affine decomposition ---- */

static void
lin_scale(struct lin *a, double s)
{
    for (uint32_t k = 0; k < MAXLOOP; k++)
        a->c[k] *= s;
    a->c0 *= s;
}

static void
lin_add(struct lin *a, const struct lin *b, double sign)
{
    for (uint32_t k = 0; k < MAXLOOP; k++)
        a->c[k] += sign * b->c[k];
    a->c0 += sign * b->c0;
    a->dep |= b->dep;
    a->nonlin |= b->nonlin;
}

/* Makes a depend irregularly on every loop in deps. */
static void
lin_irregular(struct lin *a, uint64_t deps)
{
    memset(a, 0, sizeof *a);
    a->dep = a->nonlin = deps;
}

static void lin_of(struct fx *X, uint32_t e, struct lin *out, int depth);

static uint64_t
deps_of(struct fx *X, uint32_t e, int depth)
{
    struct lin l;
    lin_of(X, e, &l, depth);
    return l.dep;
}

static void
lin_of(struct fx *X, uint32_t e, struct lin *out, int depth)
{
    memset(out, 0, sizeof *out);
    if (e == 0 || depth > 64)
        return;
    const struct kiln_node *n = node(X, e);
    uint32_t                a = n->kid[0], b = n->kid[1], c = n->kid[2];
    int64_t                 imm = n->imm;
    struct lin              lb;
    switch ((enum kiln_op)n->op) {
    case KILN_OP_INT:
        out->c0 = (double)imm;
        return;
    case KILN_OP_VAR: {
        int k = loop_of(X, e);
        if (k >= 0) {
            out->c[k] = 1;
            out->dep = 1ull << k;
            return;
        }
        const struct let *l = let_of(X, e);
        if (l)
            lin_of(X, l->value.id, out, depth + 1);
        return; /* a free variable: a constant offset */
    }
    case KILN_OP_ADD:
    case KILN_OP_SUB:
        lin_of(X, a, out, depth + 1);
        lin_of(X, b, &lb, depth + 1);
        lin_add(out, &lb, n->op == KILN_OP_ADD ? 1 : -1);
        return;
    case KILN_OP_NEG:
        lin_of(X, a, out, depth + 1);
        lin_scale(out, -1);
        return;
    case KILN_OP_CAST:
        lin_of(X, a, out, depth + 1);
        return;
    case KILN_OP_MUL:
        lin_of(X, a, out, depth + 1);
        lin_of(X, b, &lb, depth + 1);
        if (!lb.dep) {
            lin_scale(out, lb.c0);
        } else if (!out->dep) {
            double s = out->c0;
            *out = lb;
            lin_scale(out, s);
        } else {
            lin_irregular(out, out->dep | lb.dep);
        }
        return;
    case KILN_OP_FLOORDIV:
    case KILN_OP_FLOORMOD:
        lin_of(X, a, out, depth + 1);
        lin_of(X, b, &lb, depth + 1);
        if (lb.dep || lb.c0 <= 0) {
            lin_irregular(out, out->dep | lb.dep);
        } else if (n->op == KILN_OP_FLOORDIV) {
            lin_scale(out, 1 / lb.c0);
            out->c0 = floor(out->c0);
        } else {
            /* terms whose coefficient is a multiple of the divisor vanish */
            for (uint32_t k = 0; k < MAXLOOP; k++)
                if (out->c[k] != 0 && fmod(out->c[k], lb.c0) == 0) {
                    out->c[k] = 0;
                    out->dep &= ~(1ull << k);
                }
            out->c0 = fmod(out->c0, lb.c0);
        }
        return;
    case KILN_OP_MIN:
    case KILN_OP_MAX:
        /* clamps against a constant keep the other side's form */
        lin_of(X, a, out, depth + 1);
        lin_of(X, b, &lb, depth + 1);
        if (!lb.dep)
            return;
        if (!out->dep) {
            *out = lb;
            return;
        }
        lin_irregular(out, out->dep | lb.dep);
        return;
    case KILN_OP_LOAD:
    case KILN_OP_LIST:
    case KILN_OP_SELECT:
    case KILN_OP_DIV:
    case KILN_OP_POW:
    case KILN_OP_FMOD:
    case KILN_OP_EQ:
    case KILN_OP_NE:
    case KILN_OP_LT:
    case KILN_OP_LE:
    case KILN_OP_AND:
    case KILN_OP_OR:
    case KILN_OP_NOT:
    case KILN_OP_ABS:
    case KILN_OP_FLOOR:
    case KILN_OP_EXP:
    case KILN_OP_LOG:
    case KILN_OP_SQRT:
    case KILN_OP_RSQRT:
    case KILN_OP_TANH:
    case KILN_OP_ERF:
    case KILN_OP_SIN:
    case KILN_OP_COS:
    case KILN_OP_TAN:
    case KILN_OP_ASIN:
    case KILN_OP_ACOS:
    case KILN_OP_ATAN:
    case KILN_OP_SINH:
    case KILN_OP_COSH:
    case KILN_OP_ASINH:
    case KILN_OP_ACOSH:
    case KILN_OP_ATANH:
    case KILN_OP_SIGMOID: {
        uint64_t d = 0;
        for (uint32_t i = 0; i < 3; i++) {
            uint32_t k = i == 0 ? a : i == 1 ? b : c;
            if (k && i < kiln_op_arity[n->op])
                d |= deps_of(X, k, depth + 1);
        }
        lin_irregular(out, d);
        return;
    }
    case KILN_OP_NIL:
    case KILN_OP_FLOAT:
    case KILN_OP_COUNT:
        return;
    }
}

/* The affine form of an access of buffer `buf` through its index LIST: one flat index, or one
 * index per dimension combined row-major. */
static void
access_lin(struct fx *X, uint32_t buf, uint32_t list, struct lin *out)
{
    const struct kiln_buffer *B = &X->f->buf[buf];
    uint32_t                  n = 0;
    for (uint32_t l = list; l; l = node(X, l)->kid[1])
        n++;
    memset(out, 0, sizeof *out);
    if (n <= 1) {
        if (list)
            lin_of(X, node(X, list)->kid[0], out, 0);
        return;
    }
    /* row-major: collect the indices, then walk from the last dimension (stride 1) */
    double     stride = 1;
    struct lin li;
    uint32_t   ids[KILN_MAX_DIMS + 1];
    uint32_t   m = 0;
    for (uint32_t l = list; l && m <= KILN_MAX_DIMS; l = node(X, l)->kid[1])
        ids[m++] = node(X, l)->kid[0];
    for (uint32_t d = m; d-- > 0;) {
        lin_of(X, ids[d], &li, 0);
        lin_scale(&li, stride);
        lin_add(out, &li, 1);
        if (d < B->ndim)
            stride *= (double)B->shape[d];
    }
}

/* ---- op counting and access collection ---- */

static enum kiln_status add_access(struct fx *X, uint32_t buf, uint32_t list, bool wr);

static void
count_op(struct fx *X, int fcol, int icol, uint8_t dt)
{
    if (is_float_dt(dt)) {
        if (fcol >= 0)
            X->cnt[fcol] += 1;
    } else if (icol >= 0) {
        X->cnt[icol] += 1;
    }
}

static bool
is_mul(const struct fx *X, uint32_t e)
{
    return e && node(X, e)->op == KILN_OP_MUL;
}

static enum kiln_status
count(struct fx *X, uint32_t e, int depth)
{
    if (e == 0 || depth > 256 || ++X->walked > MAXWALK)
        return KILN_OK;
    const struct kiln_node *n = node(X, e);
    uint32_t                a = n->kid[0], b = n->kid[1], c = n->kid[2];
    uint8_t                 dt = n->dtype, op = n->op;
    int64_t                 imm = n->imm;
    if (op >= KILN_OP_COUNT)
        return KILN_OK;
    if (op == KILN_OP_VAR) {
        const struct let *l = let_of(X, e);
        return l ? count(X, l->value.id, depth + 1) : KILN_OK;
    }
    if (op == KILN_OP_LOAD) {
        X->cnt[F_LOADS] += 1;
        if (imm >= 0 && (uint64_t)imm < X->f->nbuf)
            KILN_TRY(add_access(X, (uint32_t)imm, a, false));
    }
    switch ((enum kiln_op_cost)kiln_op_cost[op]) { /* ops.def's cost class */
    case KILN_COST_NONE:
        break;
    case KILN_COST_ADD:
        /* a product feeding a sum is a multiply-add, however the sum is associated (the
         * simplifier orders terms by structural hash, which depends on variable names) */
        count_op(X, F_FLOAT_ADDSUB, F_INT_ADDSUB, dt);
        if (is_mul(X, a))
            count_op(X, F_FLOAT_MAD, F_INT_MAD, dt);
        if (is_mul(X, b))
            count_op(X, F_FLOAT_MAD, F_INT_MAD, dt);
        break;
    case KILN_COST_MUL:
        count_op(X, F_FLOAT_MUL, F_INT_MUL, dt);
        break;
    case KILN_COST_DIV:
        count_op(X, F_FLOAT_DIV, F_INT_DIVMOD, dt);
        break;
    case KILN_COST_MINMAX:
        count_op(X, F_FLOAT_MINMAX, F_INT_MINMAX, dt);
        break;
    case KILN_COST_CMP:
        count_op(X, F_FLOAT_CMP, F_INT_CMP, node(X, a)->dtype);
        break;
    case KILN_COST_LOGIC:
        X->cnt[F_BOOL_OP] += 1;
        break;
    case KILN_COST_SELECT:
        X->cnt[F_SELECT] += 1;
        break;
    case KILN_COST_CAST:
        X->cnt[F_CAST] += 1;
        break;
    case KILN_COST_SIMPLE:
        count_op(X, F_FLOAT_OTHER, F_INT_OTHER, dt);
        break;
    case KILN_COST_MATH:
    case KILN_COST_TRANS:
        count_op(X, F_FLOAT_MATH, F_INT_OTHER, dt);
        break;
    }
    uint32_t ar = kiln_op_arity[op];
    if (ar > 0)
        KILN_TRY(count(X, a, depth + 1));
    if (ar > 1)
        KILN_TRY(count(X, b, depth + 1));
    if (ar > 2)
        KILN_TRY(count(X, c, depth + 1));
    return KILN_OK;
}

static enum kiln_status
add_access(struct fx *X, uint32_t buf, uint32_t list, bool wr)
{
    for (uint32_t i = 0; i < X->nacc; i++) {
        struct access *A = &X->acc[i];
        if (A->buf == buf && A->index == list) {
            A->mult++;
            A->rd |= !wr;
            A->wr |= wr;
            return KILN_OK;
        }
    }
    if (!grow((void **)&X->acc, &X->capacc, sizeof *X->acc, X->nacc + 1))
        return oom(X);
    struct access *A = &X->acc[X->nacc++];
    A->buf = buf;
    A->index = list;
    A->mult = 1;
    A->rd = !wr;
    A->wr = wr;
    access_lin(X, buf, list, &A->lin);
    return KILN_OK;
}

/* ---- regions ---- */

struct item {
    double c, e;
};

static int
item_cmp(const void *pa, const void *pb)
{
    const struct item *a = pa, *b = pb;
    return a->c < b->c ? -1 : a->c > b->c ? 1 : 0;
}

static double
buf_elems(const struct kiln_buffer *B)
{
    double n = 1;
    for (uint32_t d = 0; d < B->ndim; d++)
        n *= (double)B->shape[d];
    return n;
}

/* Unique elements and cache lines one access touches over loops [k, nloop); lo/hi: its
 * index range with outer loops at 0 (valid when *regular). */
static void
footprint(const struct fx *X, const struct access *A, uint32_t k, double eb, double *uel,
          double *uln, double *lo, double *hi, bool *regular)
{
    struct item it[MAXLOOP];
    uint32_t    n = 0;
    double      blocks = 1, run = 1, span = 1;
    *regular = true;
    *lo = *hi = A->lin.c0;
    for (uint32_t j = k; j < X->nloop; j++) {
        double e = X->loop[j].ext;
        if (e <= 1)
            continue;
        if (A->lin.nonlin >> j & 1) {
            blocks *= e;
            *regular = false;
        } else if (A->lin.c[j] != 0) {
            double c = fabs(A->lin.c[j]);
            it[n++] = (struct item){c, e};
            if (A->lin.c[j] < 0)
                *lo += A->lin.c[j] * (e - 1);
            else
                *hi += A->lin.c[j] * (e - 1);
        }
    }
    qsort(it, n, sizeof *it, item_cmp);
    bool contiguous = blocks == 1;
    for (uint32_t i = 0; i < n; i++) {
        span += it[i].c * (it[i].e - 1);
        if (contiguous && it[i].c <= run) {
            run += it[i].c * (it[i].e - 1);
        } else {
            contiguous = false;
            blocks *= it[i].e;
        }
    }
    double lines_per_run = ceil(run * eb / X->line);
    double u = run * blocks, l = blocks * lines_per_run;
    if (*regular) {
        u = fmin(u, span);
        l = fmin(l, ceil(span * eb / X->line));
    }
    double total = buf_elems(&X->f->buf[A->buf]);
    *uel = fmax(1, fmin(u, total));
    *uln = fmax(1, fmin(l, ceil(total * eb / X->line)));
}

/* Cache lines the access reads or writes over the whole nest, with repetition: iterations of
 * the innermost loops that do not move the address share a line, and a stride smaller than a
 * line shares it with the next iterations. */
static double
access_lines(const struct fx *X, const struct access *A, double trip, double eb)
{
    double still = 1;
    for (uint32_t j = X->nloop; j-- > 0;) {
        bool moves = (A->lin.nonlin >> j & 1) || A->lin.c[j] != 0;
        if (!moves) {
            still *= fmax(1, X->loop[j].ext);
            continue;
        }
        double frac = (A->lin.nonlin >> j & 1) ? 1 : fmin(1, fabs(A->lin.c[j]) * eb / X->line);
        return trip / still * frac;
    }
    return 1; /* the address never moves: one line */
}

/* ---- one row ---- */

static double
slog(double x)
{
    if (!isfinite(x))
        x = x > 0 ? 1e300 : x < 0 ? -1e300 : 0;
    return x < 0 ? -log2(1 - x) : log2(1 + x);
}

/* Annotation features of loops of the given kinds. spatial[k]: loop k indexes the store. */
static void
annot(const struct fx *X, const bool *spatial, uint8_t kind_a, uint8_t kind_b, float *g)
{
    double   num = 0, prod = 1, len = 0;
    int      pos = POS_NONE;
    uint32_t d = X->nloop;
    for (uint32_t k = 0; k < d; k++) {
        uint8_t kk = X->loop[k].kind;
        if (kk != kind_a && kk != kind_b)
            continue;
        num++;
        prod *= X->loop[k].ext;
        len = X->loop[k].ext; /* the innermost wins */
        int where = k + 1 == d ? 0 : k == 0 ? 2 : 1;
        int p = (spatial[k] ? POS_INNER_SPATIAL : POS_INNER_REDUCE) + where;
        pos = pos == POS_NONE || pos == p ? p : POS_MIXED;
    }
    g[A_NUM] = (float)slog(num);
    g[A_PROD] = (float)slog(num ? prod : 0);
    g[A_LEN] = (float)slog(len);
    g[A_POS + pos] = 1;
}

static int
bufstat_cmp(const void *pa, const void *pb)
{
    const struct bufstat *a = pa, *b = pb;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    if (a->lines != b->lines)
        return a->lines > b->lines ? -1 : 1;
    return a->buf < b->buf ? -1 : a->buf > b->buf ? 1 : 0;
}

/* The GPU group of a store's row (the F_GPU_* columns). */
static void
gpu_row(const struct fx *X, const struct kiln_stmt *s, const struct bufstat *bs, uint32_t nb,
        float *row)
{
    const struct kernel *K = &X->kern;
    uint32_t             d = X->nloop, kb = 0, kt = 0; /* levels inside the block, thread loops */
    int                  tx = -1;                      /* the innermost threadIdx.x loop */
    bool                 xr = false;
    for (uint32_t k = 0; k < d; k++) {
        const struct loop *L = &X->loop[k];
        if (L->kind == KILN_LOOP_GPU_BLOCK)
            kb = kt = k + 1;
        if (L->kind == KILN_LOOP_GPU_THREAD) {
            kt = k + 1;
            tx = L->axis == 0 ? (int)k : tx;
        }
        xr |= L->xr;
    }
    double threads = K->block[0] * K->block[1] * K->block[2];
    double blocks = K->grid[0] * K->grid[1] * K->grid[2];
    double gbytes = 0, gblock = 0, sbytes = 0, stride = 0;
    for (uint32_t b = 0; b < nb; b++) {
        uint8_t m = X->mem[bs[b].buf];
        if (m == MEM_GLOBAL) {
            gbytes += bs[b].bytes;
            gblock += bs[b].ubytes[kb];
        } else if (m == MEM_SHARED) {
            sbytes += bs[b].bytes;
        }
    }
    /* coalescing: the largest step of a global access as threadIdx.x moves (-1: irregular) */
    for (uint32_t i = 0; tx >= 0 && i < X->nacc && stride >= 0; i++) {
        const struct access *A = &X->acc[i];
        if (X->mem[A->buf] != MEM_GLOBAL)
            continue;
        stride = A->lin.nonlin >> tx & 1 ? -1 : fmax(stride, fabs(A->lin.c[tx]));
    }
    /* the thread's tile: the store's own loops inside the GPU loops that move it */
    double tile = 1;
    for (uint32_t k = kt; k < d; k++)
        if (X->acc[0].lin.dep >> k & 1)
            tile *= X->loop[k].ext;
    /* float4 / float2 accesses: an f32 store in a vector loop of 2 or 4k lanes, its accesses
     * contiguous in the loop (codegen/cuda.c also wants them provably aligned) */
    double nvec = 0;
    if (d > 0 && X->loop[d - 1].kind == KILN_LOOP_VECTOR
        && X->f->buf[s->u.store.buf].dtype == KILN_DTYPE_F32) {
        double e = X->loop[d - 1].ext;
        for (uint32_t i = 0; (e == 2 || fmod(e, 4) == 0) && i < X->nacc; i++)
            if (!(X->acc[i].lin.nonlin >> (d - 1) & 1) && X->acc[i].lin.c[d - 1] == 1)
                nvec += X->acc[i].mult;
    }
    double all = fmax(1, threads * blocks);
    row[F_GPU] = 1;
    for (int a = 0; a < 3; a++) {
        row[F_GPU_GRID + a] = (float)slog(K->grid[a]);
        row[F_GPU_BLOCK + a] = (float)slog(K->block[a]);
    }
    row[F_GPU_THREADS] = (float)slog(threads);
    row[F_GPU_BLOCKS] = (float)slog(blocks);
    row[F_GPU_SHARED] = (float)slog(K->shared);
    row[F_GPU_LOCAL] = (float)slog(K->local);
    row[F_GPU_GLOBAL_THREAD] = (float)slog(gbytes / all);
    row[F_GPU_GLOBAL_BLOCK] = (float)slog(gblock);
    row[F_GPU_SHARED_THREAD] = (float)slog(sbytes / all);
    row[F_GPU_TILE] = (float)slog(tile);
    row[F_GPU_VEC] = (float)slog(nvec);
    row[F_GPU_XREDUCE] = xr ? 1 : 0;
    row[F_GPU_TX_STRIDE] = (float)slog(stride);
}

static enum kiln_status
emit_row(struct fx *X, const struct kiln_stmt *s)
{
    uint32_t d = X->nloop, nb = 0;
    double   trip = 1;
    for (uint32_t k = 0; k < d; k++)
        trip *= X->loop[k].ext;

    /* op counts and accesses of this statement */
    memset(X->cnt, 0, sizeof X->cnt);
    X->nacc = 0;
    X->walked = 0;
    KILN_TRY(add_access(X, s->u.store.buf, s->u.store.index.id, true));
    KILN_TRY(count(X, s->u.store.value.id, 0));
    KILN_TRY(count(X, s->u.store.index.id, 0));

    /* per-buffer statistics */
    struct bufstat  *bs = calloc(X->nacc + 1, sizeof *bs);
    double          *level = calloc((size_t)(X->nacc + 2) * (d + 1) * 2, sizeof(double));
    double          *tot = calloc(d + 2, sizeof(double)); /* all buffers' unique bytes per level */
    float           *row = NULL;
    enum kiln_status st = KILN_OK;
    if (!bs || !level || !tot) {
        st = oom(X);
        goto out;
    }
    for (uint32_t i = 0; i < X->nacc; i++) {
        uint32_t b = 0;
        while (b < nb && bs[b].buf != X->acc[i].buf)
            b++;
        if (b == nb) {
            bs[nb].buf = X->acc[i].buf;
            bs[nb].ubytes = level + (size_t)nb * (d + 1) * 2;
            bs[nb].ulines = bs[nb].ubytes + d + 1;
            nb++;
        }
    }
    bool accumulate = false;
    for (uint32_t b = 0; b < nb; b++) {
        struct bufstat           *S = &bs[b];
        const struct kiln_buffer *B = &X->f->buf[S->buf];
        double                    eb = (double)kiln_dtype_size((enum kiln_dtype)B->dtype);
        double                    total = buf_elems(B);
        for (uint32_t k = 0; k <= d; k++) {
            double ue = 0, ul = 0, lo = INFINITY, hi = -INFINITY;
            bool   all_regular = true;
            for (uint32_t i = 0; i < X->nacc; i++) {
                const struct access *A = &X->acc[i];
                if (A->buf != S->buf)
                    continue;
                double e1, l1, alo, ahi;
                bool   reg;
                footprint(X, A, k, eb, &e1, &l1, &alo, &ahi, &reg);
                ue += e1;
                ul += l1;
                lo = fmin(lo, alo);
                hi = fmax(hi, ahi);
                all_regular &= reg;
            }
            if (all_regular && hi >= lo) {
                ue = fmin(ue, hi - lo + 1);
                ul = fmin(ul, ceil((hi - lo + 1) * eb / X->line) + 1);
            }
            S->ubytes[k] = fmin(ue, total) * eb;
            S->ulines[k] = fmax(1, fmin(ul, ceil(total * eb / X->line)));
            tot[k] += S->ubytes[k];
        }
        double stride_at = -1;
        for (uint32_t i = 0; i < X->nacc; i++) {
            const struct access *A = &X->acc[i];
            if (A->buf != S->buf)
                continue;
            S->rd |= A->rd;
            S->wr |= A->wr;
            S->nacc += A->mult;
            S->bytes += A->mult * trip * eb;
            S->lines += A->mult * access_lines(X, A, trip, eb);
            /* innermost loop that moves any access of the buffer */
            for (uint32_t j = d; j-- > 0 && (double)j > stride_at;) {
                if (X->loop[j].ext <= 1)
                    continue;
                if (A->lin.nonlin >> j & 1) {
                    stride_at = j;
                    S->stride = -1; /* irregular */
                    break;
                }
                if (A->lin.c[j] != 0) {
                    stride_at = j;
                    S->stride = fabs(A->lin.c[j]);
                    break;
                }
            }
        }
        if (S->rd && S->buf == s->u.store.buf)
            accumulate = true;
    }
    /* reuse: the innermost loop no access of the buffer depends on */
    for (uint32_t b = 0; b < nb; b++) {
        struct bufstat *S = &bs[b];
        S->reuse = 2;
        for (uint32_t j = d; j-- > 0;) {
            if (X->loop[j].ext <= 1)
                continue;
            bool used = false;
            for (uint32_t i = 0; i < X->nacc && !used; i++)
                used = X->acc[i].buf == S->buf && (X->acc[i].lin.dep >> j & 1);
            if (used)
                continue;
            S->reuse = 0;
            S->reuse_ct = X->loop[j].ext;
            S->dist_iter = 1;
            for (uint32_t i = j + 1; i < d; i++)
                S->dist_iter *= X->loop[i].ext;
            S->dist_bytes = tot[j + 1];
            break;
        }
        if (S->reuse == 2 && S->nacc > 1) {
            S->reuse = 1;
            S->reuse_ct = S->nacc - 1;
            S->dist_iter = 1;
            S->dist_bytes = tot[d];
        }
    }
    qsort(bs, nb, sizeof *bs, bufstat_cmp);

    if (!grow((void **)&X->rows, &X->caprow, sizeof(float) * KILN_FEAT_DIM, X->nrow + 1)) {
        st = oom(X);
        goto out;
    }
    row = X->rows + (size_t)X->nrow * KILN_FEAT_DIM;
    memset(row, 0, sizeof(float) * KILN_FEAT_DIM);

    /* computation */
    for (uint32_t i = 0; i < F_NCOUNT; i++)
        row[i] = (float)slog(X->cnt[i] * trip);

    /* annotations; a loop is spatial for this store when it moves the stored address */
    bool spatial[MAXLOOP];
    for (uint32_t k = 0; k < d; k++)
        spatial[k] = X->acc[0].lin.dep >> k & 1; /* acc[0] is the store */
    annot(X, spatial, KILN_LOOP_VECTOR, KILN_LOOP_VECTOR, row + F_VEC);
    annot(X, spatial, KILN_LOOP_UNROLL, KILN_LOOP_UNROLL, row + F_UNROLL);
    annot(X, spatial, KILN_LOOP_PARALLEL, KILN_LOOP_GPU_BLOCK, row + F_PAR);

    /* buffers */
    for (uint32_t b = 0; b < nb && b < NBUF; b++) {
        const struct bufstat *S = &bs[b];
        float                *g = row + F_BUF + b * NBUFFEAT;
        double                ct = fmax(1, S->reuse_ct);
        g[S->rd && S->wr ? B_RW : S->wr ? B_WRITE : B_READ] = 1;
        g[B_BYTES] = (float)slog(S->bytes);
        g[B_UBYTES] = (float)slog(S->ubytes[0]);
        g[B_LINES] = (float)slog(S->lines);
        g[B_ULINES] = (float)slog(S->ulines[0]);
        g[B_REUSE_LOOP + S->reuse] = 1;
        g[B_DIST_ITER] = (float)slog(S->dist_iter);
        g[B_DIST_BYTES] = (float)slog(S->dist_bytes);
        g[B_REUSE_COUNT] = (float)slog(S->reuse_ct);
        g[B_BYTES_PER_REUSE] = (float)slog(S->bytes / ct);
        g[B_UBYTES_PER_REUSE] = (float)slog(S->ubytes[0] / ct);
        g[B_LINES_PER_REUSE] = (float)slog(S->lines / ct);
        g[B_ULINES_PER_REUSE] = (float)slog(S->ulines[0] / ct);
        g[B_STRIDE] = (float)slog(S->stride);
    }

    /* arithmetic intensity curve: levels from the innermost loop outwards */
    double flops = 0;
    for (uint32_t i = F_FLOAT_ADDSUB; i <= F_FLOAT_OTHER; i++)
        flops += X->cnt[i];
    if (flops > 0) {
        double   cflops[MAXLOOP + 1], ai[MAXLOOP + 1];
        uint32_t np = 0;
        double   fl = flops;
        if (d == 0) {
            cflops[np] = fl;
            ai[np++] = fl / fmax(1, tot[0]);
        }
        for (uint32_t k = d; k-- > 0;) {
            fl *= X->loop[k].ext;
            cflops[np] = fl;
            ai[np++] = fl / fmax(1, tot[k]);
        }
        for (uint32_t i = 0; i < NAI; i++) {
            double   cur = cflops[np - 1] * (i + 1) / NAI, v;
            uint32_t p = 0;
            while (p + 1 < np && cflops[p] < cur)
                p++;
            if (p == 0 || cflops[p] <= cflops[p - 1])
                v = ai[p];
            else
                v = ai[p - 1]
                    + (cur - cflops[p - 1]) / (cflops[p] - cflops[p - 1]) * (ai[p] - ai[p - 1]);
            row[F_AI + i] = (float)slog(v);
        }
    }

    /* allocation of the stored buffer */
    for (uint32_t i = X->nalloc; i-- > 0;) {
        if (X->alloc[i].buf != s->u.store.buf)
            continue;
        const struct kiln_buffer *B = &X->f->buf[s->u.store.buf];
        double bytes = buf_elems(B) * (double)kiln_dtype_size((enum kiln_dtype)B->dtype);
        double execs = 1;
        for (uint32_t k = 0; k < X->alloc[i].depth; k++)
            execs *= X->loop[k].ext;
        row[F_ALLOC_BYTES] = (float)slog(bytes);
        row[F_ALLOC_EXECS] = (float)slog(execs);
        row[F_ALLOC_BYTES_X_EXECS] = (float)slog(bytes * execs);
        row[F_ALLOC_INNER] = (float)slog(trip / execs);
        break;
    }
    row[F_ALLOC_NUM] = (float)slog(X->nalloc);

    /* outer scope */
    double unrolled = 1;
    for (uint32_t k = d; k-- > 0;) {
        if (X->loop[k].kind == KILN_LOOP_VECTOR && unrolled == 1)
            continue; /* vector lanes inside the unrolled body */
        if (X->loop[k].kind != KILN_LOOP_UNROLL)
            break;
        unrolled *= X->loop[k].ext;
    }
    row[F_OUTER_PROD] = (float)slog(trip);
    row[F_OUTER_NUM] = (float)slog(d);
    row[F_AUTO_UNROLL] = (float)slog(unrolled > 1 ? unrolled : 0);

    /* extras */
    uint32_t in_l1 = 0, in_l2 = 0;
    for (uint32_t k = d; k-- > 0;) {
        in_l1 += tot[k] <= X->l1;
        in_l2 += tot[k] <= X->l2;
    }
    row[F_NUM_IF] = (float)slog(X->nif);
    row[F_ACCUM] = accumulate ? 1 : 0;
    row[F_L1_LEVELS] = (float)slog(in_l1);
    row[F_L2_LEVELS] = (float)slog(in_l2);
    if (X->gpu)
        gpu_row(X, s, bs, nb, row);
    for (uint32_t i = 0; i < KILN_FEAT_DIM; i++)
        if (!isfinite(row[i]) || (!is_onehot(i) && fabsf(row[i]) > 2048))
            row[i] = 0;
    X->nrow++;
out:
    free(bs);
    free(level);
    free(tot);
    return st;
}

/* ---- statement walk ---- */

static double
extent_of(struct fx *X, kiln_expr ext)
{
    int64_t v;
    if (kiln_expr_is_int(X->ctx, ext, &v))
        return v > 0 ? (double)v : 0;
    struct kiln_var_range r[MAXLOOP];
    for (uint32_t k = 0; k < X->nloop; k++)
        r[k] = (struct kiln_var_range){(kiln_expr){X->loop[k].var}, X->loop[k].min,
                                       X->loop[k].min + (int64_t)fmax(0, fmin(X->loop[k].ext, 1e15))
                                           - 1};
    int64_t lo, hi;
    if (kiln_expr_bounds(X->ctx, ext, r, X->nloop, &lo, &hi) && hi > 0)
        return (double)hi;
    return 1;
}

/* The rows of the stores in s: a statement visitor that keeps the stacks of loops, ifs, lets
 * and allocations around the statement it is at (pushed in pre, popped in post). */
struct fx_walk {
    struct fx       *X;
    enum kiln_status st;
};

static enum kiln_walk
walk_fail(struct fx_walk *w, enum kiln_status st)
{
    w->st = st;
    return st == KILN_OK ? KILN_WALK_GO : KILN_WALK_FAIL;
}

static enum kiln_walk
walk_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct fx_walk *w = v->user;
    struct fx      *X = w->X;
    switch ((enum kiln_stmt_kind)s->kind) {
    case KILN_STMT_FOR: {
        if (X->nloop == MAXLOOP)
            return walk_fail(w, KILN_FAIL(X->ctx, KILN_ERR_UNSUPPORTED, "features",
                                          "loop nest deeper than %d loops", MAXLOOP));
        int64_t mn = 0;
        kiln_expr_is_int(X->ctx, s->u.for_.min, &mn);
        double ext = extent_of(X, s->u.for_.extent);
        X->loop[X->nloop++] = (struct loop){s->u.for_.var.id,
                                            ext,
                                            mn,
                                            s->u.for_.loop,
                                            s->u.for_.axis,
                                            s->u.for_.thread_reduce != 0};
        return KILN_WALK_GO;
    }
    case KILN_STMT_STORE:
        if (s->u.store.buf >= X->f->nbuf)
            return walk_fail(w, KILN_FAIL(X->ctx, KILN_ERR_INVALID, "features",
                                          "store to buffer %u, but the function has %u buffers",
                                          s->u.store.buf, X->f->nbuf));
        return walk_fail(w, emit_row(X, s));
    case KILN_STMT_SEQ:
        return KILN_WALK_GO;
    case KILN_STMT_IF:
        X->nif++;
        return KILN_WALK_GO;
    case KILN_STMT_LET:
        if (!grow((void **)&X->let, &X->caplet, sizeof *X->let, X->nlet + 1))
            return walk_fail(w, oom(X));
        X->let[X->nlet++] = (struct let){s->u.let.var.id, s->u.let.value};
        return KILN_WALK_GO;
    case KILN_STMT_ALLOC:
        if (!grow((void **)&X->alloc, &X->capalloc, sizeof *X->alloc, X->nalloc + 1))
            return walk_fail(w, oom(X));
        X->alloc[X->nalloc++] = (struct alloc){s->u.alloc.buf, X->nloop};
        return KILN_WALK_GO;
    }
    return walk_fail(
        w, KILN_FAIL(X->ctx, KILN_ERR_INTERNAL, "features", "unknown statement kind %d", s->kind));
}

static enum kiln_walk
walk_post(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct fx *X = ((struct fx_walk *)v->user)->X;
    X->nloop -= s->kind == KILN_STMT_FOR;
    X->nif -= s->kind == KILN_STMT_IF;
    X->nlet -= s->kind == KILN_STMT_LET;
    X->nalloc -= s->kind == KILN_STMT_ALLOC;
    return KILN_WALK_GO;
}

static enum kiln_status
walk(struct fx *X, const struct kiln_stmt *s)
{
    struct fx_walk           w = {X, KILN_OK};
    struct kiln_stmt_visitor v = {.user = &w, .pre = walk_pre, .post = walk_post};
    kiln_stmt_visit(&v, s);
    return w.st;
}

/* ---- GPU kernels ---- */

/* Where each buffer allocated in s lives (X->mem; parameters stay global): a statement
 * visitor counting the GPU loops around the statement it is at. */
struct gpu_walk {
    struct fx *X;
    uint32_t   in_gpu; /* GPU loops around */
};

static bool
is_gpu_loop(const struct kiln_stmt *s)
{
    return s->kind == KILN_STMT_FOR
           && (s->u.for_.loop == KILN_LOOP_GPU_BLOCK || s->u.for_.loop == KILN_LOOP_GPU_THREAD);
}

static enum kiln_walk
places_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    struct gpu_walk *w = v->user;
    struct fx       *X = w->X;
    w->in_gpu += is_gpu_loop(s);
    if (s->kind == KILN_STMT_ALLOC && s->u.alloc.buf < X->f->nbuf) {
        uint32_t b = s->u.alloc.buf;
        uint8_t  sc = X->f->buf[b].scope;
        X->mem[b] = sc == KILN_SCOPE_SHARED                                          ? MEM_SHARED
                    : sc == KILN_SCOPE_STACK || (w->in_gpu && sc == KILN_SCOPE_HEAP) ? MEM_LOCAL
                                                                                     : MEM_GLOBAL;
    }
    return KILN_WALK_GO;
}

static enum kiln_walk
places_post(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    ((struct gpu_walk *)v->user)->in_gpu -= is_gpu_loop(s);
    return KILN_WALK_GO;
}

static void
gpu_places(struct fx *X, const struct kiln_stmt *s)
{
    struct gpu_walk          w = {X, 0};
    struct kiln_stmt_visitor v = {.user = &w, .pre = places_pre, .post = places_post};
    kiln_stmt_visit(&v, s);
}

static double
buf_bytes(const struct fx *X, uint32_t b)
{
    const struct kiln_buffer *B = &X->f->buf[b];
    return buf_elems(B) * (double)kiln_dtype_size((enum kiln_dtype)B->dtype);
}

struct kernel_walk {
    const struct fx *X;
    struct kernel   *K;
};

/* A statement visitor: each GPU loop widens the launch, a cross-thread reduction adds its
 * accumulator, an allocation its shared or per-thread bytes. */
static enum kiln_walk
kernel_pre(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    const struct fx *X = ((struct kernel_walk *)v->user)->X;
    struct kernel   *K = ((struct kernel_walk *)v->user)->K;
    if (s->kind == KILN_STMT_FOR) {
        uint8_t loop = s->u.for_.loop, ax = s->u.for_.axis < 3 ? s->u.for_.axis : 0;
        int64_t ext = 1;
        if (loop == KILN_LOOP_GPU_BLOCK || loop == KILN_LOOP_GPU_THREAD) {
            kiln_expr_is_int(X->ctx, s->u.for_.extent, &ext);
            double *dim = loop == KILN_LOOP_GPU_BLOCK ? K->grid : K->block;
            dim[ax] = fmax(dim[ax], (double)ext);
        }
        if (s->u.for_.thread_reduce) {
            const struct kiln_stmt *b = s->u.for_.body;
            while (b && b->kind != KILN_STMT_STORE) /* the accumulated element's type */
                b = b->kind == KILN_STMT_FOR                 ? b->u.for_.body
                    : b->kind == KILN_STMT_LET               ? b->u.let.body
                    : b->kind == KILN_STMT_ALLOC             ? b->u.alloc.body
                    : b->kind == KILN_STMT_IF                ? b->u.if_.then
                    : b->kind == KILN_STMT_SEQ && b->u.seq.n ? b->u.seq.item[0]
                                                             : NULL;
            K->xr_elem +=
                b && b->u.store.buf < X->f->nbuf
                    ? (double)kiln_dtype_size((enum kiln_dtype)X->f->buf[b->u.store.buf].dtype)
                    : 4;
        }
    }
    if (s->kind == KILN_STMT_ALLOC) {
        uint32_t b = s->u.alloc.buf;
        if (b < X->f->nbuf && X->mem[b] == MEM_SHARED)
            K->shared += buf_bytes(X, b);
        else if (b < X->f->nbuf && X->mem[b] == MEM_LOCAL)
            K->local += buf_bytes(X, b);
    }
    return KILN_WALK_GO;
}

/* The launch of kernel s into K (grid and block extents per axis: the longest loop bound to
 * the axis; its shared arrays; its per-thread arrays). */
static void
gpu_kernel_of(const struct fx *X, const struct kiln_stmt *s, struct kernel *K)
{
    struct kernel_walk       w = {X, K};
    struct kiln_stmt_visitor v = {.user = &w, .pre = kernel_pre};
    kiln_stmt_visit(&v, s);
}

/* The function's root on a GPU: the allocations around the whole body, then one kernel per
 * statement of the root sequence (or the root statement alone), as codegen/cuda.c launches
 * them; each kernel's launch is known before its stores are walked. */
static enum kiln_status
walk_gpu_root(struct fx *X, const struct kiln_stmt *s)
{
    uint32_t nalloc = X->nalloc;
    for (; s && s->kind == KILN_STMT_ALLOC; s = s->u.alloc.body) { /* the chain on top */
        if (!grow((void **)&X->alloc, &X->capalloc, sizeof *X->alloc, X->nalloc + 1))
            return oom(X);
        X->alloc[X->nalloc++] = (struct alloc){s->u.alloc.buf, X->nloop};
    }
    uint32_t n = s && s->kind == KILN_STMT_SEQ ? s->u.seq.n : 1;
    for (uint32_t i = 0; s && i < n; i++) {
        const struct kiln_stmt *k = s->kind == KILN_STMT_SEQ ? s->u.seq.item[i] : s;
        memset(&X->kern, 0, sizeof X->kern);
        gpu_kernel_of(X, k, &X->kern);
        for (int a = 0; a < 3; a++) {
            X->kern.grid[a] = fmax(1, X->kern.grid[a]);
            X->kern.block[a] = fmax(1, X->kern.block[a]);
        }
        /* a cross-thread reduction combines in a shared array of one element per thread */
        X->kern.shared += X->kern.xr_elem * X->kern.block[0] * X->kern.block[1] * X->kern.block[2];
        KILN_TRY(walk(X, k));
    }
    X->nalloc = nalloc;
    return KILN_OK;
}

enum kiln_status
kiln_features_extract(kiln_ctx *ctx, const struct kiln_func *f, const struct kiln_hw *hw,
                      struct kiln_feat *out)
{
    if (!out)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "features", "no output given");
    out->row = NULL;
    out->nrow = 0;
    if (!f)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "features", "no function given");
    struct fx *X = calloc(1, sizeof *X);
    if (!X)
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "features", "out of memory extracting features");
    X->ctx = ctx;
    X->f = f;
    X->line = hw && hw->cache_line > 0 ? hw->cache_line : 64;
    X->l1 = hw && hw->l1_bytes > 0 ? hw->l1_bytes : 32 * 1024;
    X->l2 = hw && hw->l2_bytes > 0 ? hw->l2_bytes : 1024 * 1024;
    X->gpu = hw && hw->gpu;
    enum kiln_status st = KILN_OK;
    if (X->gpu) {
        X->mem = calloc(f->nbuf + 1, 1); /* MEM_GLOBAL: parameters, and the workspace */
        if (!X->mem)
            st = oom(X);
        else
            gpu_places(X, f->body);
    }
    if (st == KILN_OK)
        st = X->gpu ? walk_gpu_root(X, f->body) : walk(X, f->body);
    free(X->mem);
    free(X->let);
    free(X->alloc);
    free(X->acc);
    if (st == KILN_OK) {
        out->row = X->rows;
        out->nrow = X->nrow;
    } else {
        free(X->rows);
    }
    free(X);
    return st;
}

void
kiln_feat_free(struct kiln_feat *f)
{
    if (!f)
        return;
    free(f->row);
    f->row = NULL;
    f->nrow = 0;
}

enum kiln_status
kiln_features_lower(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_schedule *s,
                    const struct kiln_hw *hw, struct kiln_feat *out)
{
    if (!out)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "features", "no output given");
    out->row = NULL;
    out->nrow = 0;
    struct kiln_scratch sc = kiln_scratch_begin(ctx);
    struct kiln_func   *f;
    enum kiln_status    st = kiln_lower(ctx, g, s, &f);
    if (st == KILN_OK)
        st = kiln_features_extract(ctx, f, hw, out);
    kiln_scratch_end(ctx, sc);
    return st;
}
