/* passes/state.c -- applying schedule steps to a graph: the stage state and the legality of
 * every step.
 *
 * The state copies the graph's tensors and makes one stage per op; steps then split, fuse,
 * reorder and annotate a stage's iterators, move stages (inline, root, compute_at) and add
 * stages (cache_write, cache_read, rfactor, pack, pad), rewriting the compute definitions that read
 * them. Every illegal step is reported as `schedule step N (KIND STAGE.ITER): reason` and
 * leaves the error in the context; nothing here emits loops (passes/lower.c does). */
#include "state.h"

#include <stdio.h>
#include <string.h>

#define MAX_VECTOR_LANES 64
#define MAX_UNROLL       1024

struct apply {
    struct kiln_state      *s;
    kiln_ctx               *ctx;
    uint32_t                index; /* step number, for messages */
    const struct kiln_step *step;
};

static enum kiln_status step_fail(struct apply *a, const char *fmt, ...) KILN_PRINTF(2, 3);

static enum kiln_status
step_fail(struct apply *a, const char *fmt, ...)
{
    char    why[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const struct kiln_step *st = a->step;
    kiln_ctx               *ctx = a->ctx;
    const char             *kind = st->kind < KILN_STEP_COUNT ? kiln_step_desc[st->kind].name : "?";
    /* STAGE.ITER when the step's iter is a loop of its stage */
    bool has_iter = st->kind < KILN_STEP_COUNT && kiln_step_desc[st->kind].iter == KILN_REF_LOOP;
    /* a long name (i.1.1.1... after many splits) keeps its ends, so the reason still fits */
    const char *it = has_iter ? kiln_sym_str(ctx, st->iter) : "";
    size_t      n = strlen(it);
    int         head = n > 60 ? 28 : (int)n;
    return KILN_FAIL(ctx, KILN_ERR_INVALID, "schedule", "schedule step %u (%s %s%s%.*s%s%s): %s",
                     a->index, kind, kiln_sym_str(ctx, st->stage), has_iter ? "." : "", head, it,
                     n > 60 ? "..." : "", n > 60 ? it + n - 28 : "", why);
}

/* ---- building ---- */

static uint32_t
add_tensor(struct kiln_state *s, struct kiln_stensor t)
{
    uint32_t id = s->nt;
    if (!KILN_VEC_PUSH(s->ctx, s->t, s->nt, s->capt, t))
        return KILN_NONE;
    return id;
}

static bool
add_iter(kiln_ctx *ctx, struct kiln_stage *st, uint32_t name, int64_t ext, bool reduce,
         uint32_t *id)
{
    struct kiln_iterv it = {.name = name, .extent = ext, .reduce = reduce};
    *id = st->nit;
    return KILN_VEC_PUSH(ctx, st->it, st->nit, st->capit, it);
}

static uint32_t
unique_name(kiln_ctx *ctx, const struct kiln_stage *st, const char *base)
{
    const char *name = base;
    for (int k = 1; k < 100 && name; k++) {
        uint32_t sym = kiln_sym_cstr(ctx, name);
        bool     clash = false;
        for (uint32_t i = 0; i < st->nit; i++)
            clash |= st->it[i].name == sym;
        if (!clash)
            return sym;
        name = kiln_arena_printf(ctx, "%s_%d", base, k);
    }
    return kiln_sym_cstr(ctx, base);
}

/* (Re)creates the root iterators and leaves of a stage from its definition. */
static enum kiln_status
reset_iters(struct kiln_state *s, struct kiln_stage *st, const uint32_t *axname,
            const uint32_t *rname)
{
    kiln_ctx                  *ctx = s->ctx;
    const struct kiln_stensor *t = &s->t[st->tensor];
    st->nit = st->nleaf = st->nrel = 0;
    st->ndim = t->ndim;
    st->transformed = false;
    for (uint32_t k = 0; k < (uint32_t)t->ndim + st->nred; k++) {
        bool     red = k >= t->ndim;
        uint32_t nm = red ? (rname ? rname[k - t->ndim] : 0) : (axname ? axname[k] : 0);
        char     dflt[16];
        snprintf(dflt, sizeof dflt, red ? "r%u" : "i%u", red ? k - t->ndim : k);
        uint32_t sym = unique_name(ctx, st, nm ? kiln_sym_str(ctx, nm) : dflt);
        uint32_t id;
        if (!add_iter(ctx, st, sym, red ? st->rext[k - t->ndim] : t->shape[k], red, &id)
            || !KILN_VEC_PUSH(ctx, st->leaf, st->nleaf, st->capleaf, id))
            return ctx->err.status;
    }
    return KILN_OK;
}

static uint32_t
add_stage(struct kiln_state *s, uint32_t tensor, kiln_expr body, uint8_t reduce, uint8_t nred,
          const int64_t *rext)
{
    struct kiln_stage st = {.name = s->t[tensor].name,
                            .tensor = tensor,
                            .body = body,
                            .reduce = reduce,
                            .nred = nred,
                            .attach = KILN_ATTACH_ROOT,
                            .at_stage = KILN_NONE,
                            .at_iter = KILN_NONE};
    for (int r = 0; r < nred; r++)
        st.rext[r] = rext[r];
    uint32_t id = s->nst;
    if (!KILN_VEC_PUSH(s->ctx, s->st, s->nst, s->capst, st))
        return KILN_NONE;
    s->t[tensor].stage = id;
    return id;
}

static bool
insert_order(struct kiln_state *s, uint32_t pos, uint32_t stage)
{
    if (!kiln_vec_reserve(s->ctx, (void **)&s->order, &s->caporder, sizeof(uint32_t),
                          s->norder + 1))
        return false;
    memmove(&s->order[pos + 1], &s->order[pos], sizeof(uint32_t) * (s->norder - pos));
    s->order[pos] = stage;
    s->norder++;
    return true;
}

static uint32_t
order_pos(const struct kiln_state *s, uint32_t stage)
{
    for (uint32_t i = 0; i < s->norder; i++)
        if (s->order[i] == stage)
            return i;
    return KILN_NONE;
}

/* ---- iterator arithmetic shared with lowering ---- */

void
kiln_state_extents(const struct kiln_stage *st, const int64_t *root_ext, int64_t *ext)
{
    for (uint32_t k = 0; k < st->nit; k++)
        ext[k] = st->it[k].extent;
    for (uint32_t k = 0; k < st->ndim; k++)
        ext[k] = root_ext[k];
    for (uint32_t r = 0; r < st->nrel; r++) {
        const struct kiln_rel *rel = &st->rel[r];
        if (rel->kind == KILN_REL_SPLIT) {
            /* A part longer than what its inner parts leave of the extent is cut to that
             * (a split by [128, 6] of a 6-row region is [1, 6]): its other iterations would
             * all fail the split's guard. Without the cut they stay as guarded loops that
             * partitioning may not reach (a tail piece of a partial tile) and run empty. */
            int64_t inner = 1, E = ext[rel->parent] > 0 ? ext[rel->parent] : 1;
            for (uint32_t j = rel->n; j-- > 1;) {
                int64_t cap = (E + inner - 1) / inner, f = rel->factors[j];
                ext[rel->parts[j]] = f < cap ? f : cap;
                inner *= ext[rel->parts[j]];
            }
            ext[rel->parts[0]] = (ext[rel->parent] + inner - 1) / inner;
        } else {
            int64_t p = 1;
            for (uint32_t j = 0; j < rel->n; j++)
                p *= ext[rel->parts[j]];
            ext[rel->child] = p;
        }
    }
}

void
kiln_state_values(kiln_ctx *ctx, const struct kiln_stage *st, const int64_t *ext, kiln_expr *val)
{
    for (uint32_t r = st->nrel; r-- > 0;) {
        const struct kiln_rel *rel = &st->rel[r];
        if (rel->kind == KILN_REL_SPLIT) {
            kiln_expr v = kiln_idx(ctx, 0);
            for (uint32_t j = 0; j < rel->n; j++)
                v = kiln_add(ctx, kiln_mul(ctx, v, kiln_idx(ctx, ext[rel->parts[j]])),
                             val[rel->parts[j]]);
            val[rel->parent] = v;
        } else {
            kiln_expr v = val[rel->child];
            int64_t   inner = 1;
            for (uint32_t j = rel->n; j-- > 0;) {
                kiln_expr q = kiln_floordiv(ctx, v, kiln_idx(ctx, inner));
                val[rel->parts[j]] =
                    j ? kiln_floormod(ctx, q, kiln_idx(ctx, ext[rel->parts[j]])) : q;
                inner *= ext[rel->parts[j]];
            }
        }
    }
}

uint32_t
kiln_state_guards(kiln_ctx *ctx, const struct kiln_stage *st, const int64_t *ext,
                  const kiln_expr *val, bool spatial_only, kiln_expr *cond)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < st->nrel; r++) {
        const struct kiln_rel *rel = &st->rel[r];
        if (rel->kind != KILN_REL_SPLIT || (spatial_only && st->it[rel->parent].reduce))
            continue;
        int64_t cover = ext[rel->parts[0]];
        for (uint32_t j = 1; j < rel->n; j++)
            cover *= ext[rel->parts[j]];
        if (cover != ext[rel->parent])
            cond[n++] = kiln_lt(ctx, val[rel->parent], kiln_idx(ctx, ext[rel->parent]));
    }
    return n;
}

/* ---- lookups ---- */

static uint32_t
find_stage(const struct kiln_state *s, uint32_t name)
{
    for (uint32_t i = 0; i < s->nst; i++)
        if (s->st[i].name == name && s->st[i].attach != KILN_ATTACH_INLINE)
            return i;
    for (uint32_t i = 0; i < s->nst; i++)
        if (s->st[i].name == name)
            return i;
    return KILN_NONE;
}

static uint32_t
find_tensor(const struct kiln_state *s, uint32_t name)
{
    for (uint32_t i = 0; i < s->nt; i++)
        if (s->t[i].name == name)
            return i;
    return KILN_NONE;
}

static enum kiln_status
get_stage(struct apply *a, uint32_t name, struct kiln_stage **out)
{
    uint32_t id = find_stage(a->s, name);
    if (id == KILN_NONE) {
        uint32_t t = find_tensor(a->s, name);
        if (t != KILN_NONE)
            return step_fail(a, "%s is an argument of the graph, not a stage",
                             kiln_sym_str(a->ctx, name));
        return step_fail(a, "no stage named %s", kiln_sym_str(a->ctx, name));
    }
    *out = &a->s->st[id];
    return KILN_OK;
}

static uint32_t
leaf_pos(const struct kiln_stage *st, uint32_t name)
{
    for (uint32_t i = 0; i < st->nleaf; i++)
        if (st->it[st->leaf[i]].name == name)
            return i;
    return KILN_NONE;
}

static enum kiln_status
get_leaf(struct apply *a, struct kiln_stage *st, uint32_t name, uint32_t *pos)
{
    *pos = leaf_pos(st, name);
    if (*pos != KILN_NONE)
        return KILN_OK;
    char list[200] = "";
    for (uint32_t i = 0; i < st->nleaf && strlen(list) < 150; i++) {
        strcat(list, i ? ", " : "");
        strncat(list, kiln_sym_str(a->ctx, st->it[st->leaf[i]].name), 40);
    }
    for (uint32_t i = 0; i < st->nit; i++)
        if (st->it[i].name == name)
            return step_fail(a, "iterator %s is no longer a loop of %s (its loops: %s)",
                             kiln_sym_str(a->ctx, name), kiln_sym_str(a->ctx, st->name), list);
    return step_fail(a, "stage %s has no iterator %s (its loops: %s)",
                     kiln_sym_str(a->ctx, st->name), kiln_sym_str(a->ctx, name), list);
}

struct reads_ctx {
    const kiln_ctx *ctx;
    uint32_t        tensor;
    bool            found;
};

static bool
reads_visit(void *ud, kiln_expr load)
{
    struct reads_ctx *r = ud;
    if ((uint32_t)kiln_node_get(r->ctx, load)->imm == r->tensor) {
        r->found = true;
        return false;
    }
    return true;
}

static bool
stage_reads(const struct kiln_state *s, const struct kiln_stage *st, uint32_t tensor)
{
    struct reads_ctx r = {s->ctx, tensor, false};
    kiln_expr_visit_loads(s->ctx, st->body, reads_visit, &r);
    return r.found;
}

/* ---- loop structure steps ---- */

static bool
is_gpu(uint8_t ann)
{
    return ann == KILN_LOOP_GPU_BLOCK || ann == KILN_LOOP_GPU_THREAD;
}

/* An iterator's annotation as a schedule names it: `parallel`, ..., or the GPU index it is
 * bound to (`blockIdx.x`). */
static const char *
ann_name(const struct kiln_iterv *it)
{
    if (is_gpu(it->ann))
        return kiln_bind_name[(it->ann == KILN_LOOP_GPU_THREAD ? KILN_BIND_THREAD_X : 0)
                              + it->axis % 3];
    return kiln_loop_kind_name[it->ann];
}

static enum kiln_status
already_annotated(struct apply *a, const struct kiln_iterv *it)
{
    return step_fail(a, "iterator %s is already %s%s", kiln_sym_str(a->ctx, it->name),
                     is_gpu(it->ann) ? "bound to " : "", ann_name(it));
}

static enum kiln_status
do_split(struct apply *a, struct kiln_stage *st, uint32_t iname, uint32_t n, const int64_t *factors,
         uint32_t *first_part)
{
    kiln_ctx *ctx = a->ctx;
    uint32_t  pos;
    KILN_TRY(get_leaf(a, st, iname, &pos));
    uint32_t parent = st->leaf[pos];
    if (st->it[parent].ann != KILN_LOOP_SERIAL)
        return step_fail(a, "iterator %s is already annotated %s; split it before annotating",
                         kiln_sym_str(ctx, iname), ann_name(&st->it[parent]));
    int64_t inner = 1;
    for (uint32_t j = 0; j < n; j++) {
        if (factors[j] <= 0)
            return step_fail(a, "factor %lld must be positive", (long long)factors[j]);
        if (kiln_mul_overflows(inner, factors[j], &inner) || inner > ((int64_t)1 << 40))
            return step_fail(a, "factors multiply to more than 2^40");
    }
    if (st->nleaf + n > KILN_MAX_LOOPS)
        return step_fail(a, "the stage would have %u loops, more than %d", st->nleaf + n,
                         KILN_MAX_LOOPS);
    if (st->nit + n + 1 > KILN_MAX_ITERS)
        return step_fail(a,
                         "the stage would have %u iterators, more than %d (splits and fuses "
                         "included)",
                         st->nit + n + 1, KILN_MAX_ITERS);
    struct kiln_rel rel = {.kind = KILN_REL_SPLIT, .n = (uint8_t)(n + 1), .parent = parent};
    int64_t         ext = st->it[parent].extent;
    for (uint32_t j = 0; j <= n; j++) {
        const char *name = kiln_arena_printf(ctx, "%s.%u", kiln_sym_str(ctx, iname), j);
        if (!name)
            return ctx->err.status;
        int64_t e = j ? factors[j - 1] : (ext + inner - 1) / inner;
        if (!add_iter(ctx, st, unique_name(ctx, st, name), e, st->it[parent].reduce, &rel.parts[j]))
            return ctx->err.status;
        rel.factors[j] = j ? factors[j - 1] : 0;
    }
    if (!KILN_VEC_PUSH(ctx, st->rel, st->nrel, st->caprel, rel))
        return ctx->err.status;
    if (!kiln_vec_reserve(ctx, (void **)&st->leaf, &st->capleaf, sizeof(uint32_t), st->nleaf + n))
        return ctx->err.status;
    memmove(&st->leaf[pos + n + 1], &st->leaf[pos + 1], sizeof(uint32_t) * (st->nleaf - pos - 1));
    for (uint32_t j = 0; j <= n; j++)
        st->leaf[pos + j] = rel.parts[j];
    st->nleaf += n;
    st->transformed = true;
    if (first_part)
        *first_part = rel.parts[0];
    return KILN_OK;
}

/* Puts the leaves named in names (n of them) into the positions they occupy, in that order. */
static enum kiln_status
do_reorder(struct apply *a, struct kiln_stage *st, uint32_t n, const uint32_t *names)
{
    uint32_t pos[KILN_STEP_MAXN * 2], ids[KILN_STEP_MAXN * 2];
    for (uint32_t j = 0; j < n; j++) {
        KILN_TRY(get_leaf(a, st, names[j], &pos[j]));
        for (uint32_t k = 0; k < j; k++)
            if (pos[k] == pos[j])
                return step_fail(a, "iterator %s is listed twice", kiln_sym_str(a->ctx, names[j]));
        ids[j] = st->leaf[pos[j]];
    }
    /* sort the positions; assign the listed iterators to them in order */
    for (uint32_t j = 1; j < n; j++)
        for (uint32_t k = j; k > 0 && pos[k - 1] > pos[k]; k--) {
            uint32_t t = pos[k];
            pos[k] = pos[k - 1];
            pos[k - 1] = t;
        }
    for (uint32_t j = 0; j < n; j++)
        st->leaf[pos[j]] = ids[j];
    st->transformed = true;
    return KILN_OK;
}

static enum kiln_status
do_fuse(struct apply *a, struct kiln_stage *st, uint32_t n, const uint32_t *names)
{
    kiln_ctx *ctx = a->ctx;
    uint32_t  pos0 = 0;
    char      name[256] = "";
    int64_t   ext = 1;
    if (n < 2)
        return step_fail(a, "fuse needs at least two iterators");
    if (st->nit + 1 > KILN_MAX_ITERS)
        return step_fail(a,
                         "the stage would have %u iterators, more than %d (splits and fuses "
                         "included)",
                         st->nit + 1, KILN_MAX_ITERS);
    struct kiln_rel rel = {.kind = KILN_REL_FUSE, .n = (uint8_t)n};
    for (uint32_t j = 0; j < n; j++) {
        uint32_t pos;
        KILN_TRY(get_leaf(a, st, names[j], &pos));
        if (j == 0)
            pos0 = pos;
        else if (pos != pos0 + j)
            return step_fail(a, "iterators %s and %s are not adjacent loops (outer first)",
                             kiln_sym_str(ctx, names[j - 1]), kiln_sym_str(ctx, names[j]));
        const struct kiln_iterv *it = &st->it[st->leaf[pos]];
        if (it->reduce != st->it[st->leaf[pos0]].reduce)
            return step_fail(a, "cannot fuse spatial and reduction iterators (%s, %s)",
                             kiln_sym_str(ctx, names[0]), kiln_sym_str(ctx, names[j]));
        if (it->ann != KILN_LOOP_SERIAL)
            return step_fail(a, "iterator %s is already annotated %s", kiln_sym_str(ctx, names[j]),
                             ann_name(it));
        rel.parts[j] = st->leaf[pos];
        if (kiln_mul_overflows(ext, it->extent, &ext))
            return step_fail(a, "fused extent overflows");
        if (strlen(name) + strlen(kiln_sym_str(ctx, names[j])) + 2 < sizeof name) {
            strcat(name, j ? "@" : "");
            strcat(name, kiln_sym_str(ctx, names[j]));
        }
    }
    if (!add_iter(ctx, st, unique_name(ctx, st, name), ext, st->it[rel.parts[0]].reduce, &rel.child)
        || !KILN_VEC_PUSH(ctx, st->rel, st->nrel, st->caprel, rel))
        return ctx->err.status;
    st->leaf[pos0] = rel.child;
    memmove(&st->leaf[pos0 + 1], &st->leaf[pos0 + n], sizeof(uint32_t) * (st->nleaf - pos0 - n));
    st->nleaf -= n - 1;
    st->transformed = true;
    return KILN_OK;
}

static enum kiln_status
do_annotate(struct apply *a, struct kiln_stage *st, enum kiln_loop_kind kind)
{
    kiln_ctx *ctx = a->ctx;
    uint32_t  pos;
    KILN_TRY(get_leaf(a, st, a->step->iter, &pos));
    struct kiln_iterv *it = &st->it[st->leaf[pos]];
    const char        *nm = kiln_sym_str(ctx, it->name);
    if (it->ann != KILN_LOOP_SERIAL)
        return already_annotated(a, it);
    if (kind == KILN_LOOP_PARALLEL && it->reduce)
        return step_fail(a,
                         "iterator %s is a reduction: parallel iterations would race on "
                         "the accumulator (use rfactor first)",
                         nm);
    if (kind == KILN_LOOP_VECTOR && it->reduce)
        return step_fail(a, "cannot vectorize reduction iterator %s", nm);
    /* extents of a stage computed at another are those of its region: checked when lowering */
    bool sized = st->attach == KILN_ATTACH_ROOT;
    if (kind == KILN_LOOP_VECTOR && sized && it->extent > MAX_VECTOR_LANES)
        return step_fail(a,
                         "iterator %s has extent %lld; at most %d lanes can be vectorized "
                         "(split it first)",
                         nm, (long long)it->extent, MAX_VECTOR_LANES);
    if (kind == KILN_LOOP_UNROLL && sized && it->extent > MAX_UNROLL)
        return step_fail(a, "iterator %s has extent %lld; at most %d iterations are unrolled", nm,
                         (long long)it->extent, MAX_UNROLL);
    it->ann = (uint8_t)kind;
    st->transformed = true;
    return KILN_OK;
}

/* bind: the loop becomes a GPU block or thread loop along one axis; a stage binds each GPU
 * index at most once. A spatial loop's iterations are independent; a reduction loop may be
 * bound to threadIdx.x only (a cross-thread reduction: each thread accumulates its share, the
 * block combines the shares), and then it is the stage's only thread loop, so that all of a
 * block's threads take part in every one of its reductions. */
static enum kiln_status
do_bind(struct apply *a, struct kiln_stage *st)
{
    kiln_ctx *ctx = a->ctx;
    int64_t   tag = a->step->value;
    uint32_t  pos;
    if (tag < 0 || tag >= KILN_BIND_COUNT)
        return step_fail(a, "thread %lld is not a GPU index (blockIdx.x/y/z or threadIdx.x/y/z)",
                         (long long)tag);
    KILN_TRY(get_leaf(a, st, a->step->iter, &pos));
    struct kiln_iterv *it = &st->it[st->leaf[pos]];
    const char        *nm = kiln_sym_str(ctx, it->name);
    uint8_t kind = tag >= KILN_BIND_THREAD_X ? KILN_LOOP_GPU_THREAD : KILN_LOOP_GPU_BLOCK;
    uint8_t axis = (uint8_t)(tag % 3);
    if (it->ann != KILN_LOOP_SERIAL)
        return already_annotated(a, it);
    if (it->reduce && tag != KILN_BIND_THREAD_X)
        return step_fail(a,
                         "iterator %s is a reduction: only threadIdx.x can be bound to a "
                         "reduction (a cross-thread reduction); %s would race on the "
                         "accumulator (use rfactor first)",
                         nm, kiln_bind_name[tag]);
    for (uint32_t k = 0; k < st->nit; k++)
        if (st->it[k].ann == kind && st->it[k].axis == axis)
            return step_fail(a, "%s is already bound to iterator %s of %s", kiln_bind_name[tag],
                             kiln_sym_str(ctx, st->it[k].name), kiln_sym_str(ctx, st->name));
    for (uint32_t k = 0; kind == KILN_LOOP_GPU_THREAD && k < st->nit; k++) {
        const struct kiln_iterv *o = &st->it[k];
        if (o->ann != KILN_LOOP_GPU_THREAD || !(o->reduce || it->reduce))
            continue;
        const struct kiln_iterv *r = o->reduce ? o : it;
        return step_fail(a,
                         "reduction iterator %s of %s is bound to threadIdx.x (a cross-thread "
                         "reduction), so %s cannot also be bound to %s: the reduction must be "
                         "the stage's only thread loop",
                         kiln_sym_str(ctx, r->name), kiln_sym_str(ctx, st->name),
                         kiln_sym_str(ctx, (r == o ? it : o)->name),
                         r == o ? kiln_bind_name[tag]
                                : kiln_bind_name[KILN_BIND_THREAD_X + o->axis % 3]);
    }
    it->ann = kind;
    it->axis = axis;
    st->transformed = true;
    return KILN_OK;
}

static enum kiln_status
do_tile(struct apply *a, struct kiln_stage *st)
{
    const struct kiln_step *sp = a->step;
    uint32_t                outer[KILN_STEP_MAXN * 2], n = sp->n;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t first;
        KILN_TRY(do_split(a, st, sp->iters[j], 1, &sp->factors[j], &first));
        outer[j] = st->it[first].name;
        outer[n + j] = st->it[first + 1].name;
    }
    return do_reorder(a, st, 2 * n, outer);
}

/* ---- compute location ---- */

static uint32_t
stage_id(const struct kiln_state *s, const struct kiln_stage *st)
{
    return (uint32_t)(st - s->st);
}

/* Stages (not inlined) whose bodies read tensor t. */
static uint32_t
readers(const struct kiln_state *s, uint32_t t, uint32_t *out, uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->nst; i++)
        if (s->st[i].attach != KILN_ATTACH_INLINE && stage_reads(s, &s->st[i], t) && n < max)
            out[n++] = i;
    return n;
}

struct inline_ctx {
    kiln_ctx                *ctx;
    uint32_t                 tensor;
    const struct kiln_stage *src;
};

static kiln_expr
inline_load(void *ud, kiln_expr load, uint32_t n, const kiln_expr *idx)
{
    struct inline_ctx      *ic = ud;
    const struct kiln_node *nd = kiln_node_get(ic->ctx, load);
    if ((uint32_t)nd->imm != ic->tensor)
        return kiln_load(ic->ctx, (uint32_t)nd->imm, (enum kiln_dtype)nd->dtype, n, idx);
    return kiln_expr_subst(ic->ctx, ic->src->body, idx, n, NULL, 0);
}

static enum kiln_status
do_inline(struct apply *a, struct kiln_stage *st)
{
    struct kiln_state *s = a->s;
    kiln_ctx          *ctx = a->ctx;
    const char        *nm = kiln_sym_str(ctx, st->name);
    if (st->nred)
        return step_fail(a, "%s has a reduction; only elementwise definitions can be inlined", nm);
    if (s->t[st->tensor].is_output)
        return step_fail(a, "%s is an output of the graph and must be stored", nm);
    for (uint32_t i = 0; i < s->nst; i++)
        if (s->st[i].attach == KILN_ATTACH_AT && s->st[i].at_stage == stage_id(s, st))
            return step_fail(a, "stage %s is computed at %s; move it first",
                             kiln_sym_str(ctx, s->st[i].name), nm);
    struct inline_ctx ic = {ctx, st->tensor, st};
    for (uint32_t i = 0; i < s->nst; i++) {
        struct kiln_stage *c = &s->st[i];
        if (c == st || c->attach == KILN_ATTACH_INLINE || !stage_reads(s, c, st->tensor))
            continue;
        c->body = kiln_expr_map_loads(ctx, c->body, inline_load, &ic);
        if (!c->body.id)
            return ctx->err.status;
    }
    st->attach = KILN_ATTACH_INLINE;
    return KILN_OK;
}

static enum kiln_status
do_compute_at(struct apply *a, struct kiln_stage *st)
{
    struct kiln_state *s = a->s;
    kiln_ctx          *ctx = a->ctx;
    struct kiln_stage *tgt;
    KILN_TRY(get_stage(a, a->step->target, &tgt));
    const char *nm = kiln_sym_str(ctx, st->name), *tn = kiln_sym_str(ctx, tgt->name);
    if (st->attach == KILN_ATTACH_INLINE)
        return step_fail(a, "%s was inlined", nm);
    if (tgt == st)
        return step_fail(a, "a stage cannot be computed at itself");
    if (tgt->attach == KILN_ATTACH_INLINE)
        return step_fail(a, "target %s was inlined", tn);
    uint32_t rd[4];
    uint32_t nr = readers(s, st->tensor, rd, 4);
    if (nr == 0 || !stage_reads(s, tgt, st->tensor))
        return step_fail(a, "%s does not read %s", tn, nm);
    if (nr > 1)
        return step_fail(a,
                         "%s is read by %u stages; only a tensor with one reader can be "
                         "computed at it",
                         nm, nr);
    /* no cycles: the target must not be (transitively) attached inside this stage */
    for (uint32_t t = stage_id(s, tgt), hops = 0; t != KILN_NONE && hops <= s->nst; hops++) {
        if (t == stage_id(s, st))
            return step_fail(a, "%s is computed inside %s; attaching would make a cycle", tn, nm);
        t = s->st[t].attach == KILN_ATTACH_AT ? s->st[t].at_stage : KILN_NONE;
    }
    uint32_t pos;
    KILN_TRY(get_leaf(a, tgt, a->step->iter, &pos));
    st->attach = KILN_ATTACH_AT;
    st->at_stage = stage_id(s, tgt);
    st->at_iter = tgt->leaf[pos];
    return KILN_OK;
}

/* ---- new stages ---- */

static kiln_expr
identity_axes_load(kiln_ctx *ctx, uint32_t tensor, enum kiln_dtype dt, uint32_t ndim)
{
    kiln_expr ax[KILN_MAX_DIMS];
    for (uint32_t k = 0; k < ndim; k++)
        ax[k] = kiln_axis(ctx, k);
    return kiln_load(ctx, tensor, dt, ndim, ax);
}

/* Display names of a stage's current root iterators. */
static void
root_names(const struct kiln_stage *st, uint32_t *axname, uint32_t *rname)
{
    for (uint32_t k = 0; k < st->ndim; k++)
        axname[k] = st->it[k].name;
    for (uint32_t r = 0; r < st->nred; r++)
        rname[r] = st->it[st->ndim + r].name;
}

static uint32_t
derived_tensor(struct apply *a, uint32_t from, uint32_t ndim, const int64_t *shape)
{
    kiln_ctx           *ctx = a->ctx;
    struct kiln_stensor t = a->s->t[from];
    const char         *name = kiln_arena_printf(ctx, "%s.%s", kiln_sym_str(ctx, t.name),
                                                 kiln_step_desc[a->step->kind].creates);
    if (!name)
        return KILN_NONE;
    t.name = kiln_sym_cstr(ctx, name);
    if (find_tensor(a->s, t.name) != KILN_NONE) {
        step_fail(a, "%s already exists", name);
        return KILN_NONE;
    }
    t.kind = KILN_TENSOR_OP;
    t.is_output = 0;
    t.shared = 0;
    t.ndim = (uint8_t)ndim;
    for (uint32_t k = 0; k < ndim; k++)
        t.shape[k] = shape[k];
    t.stage = KILN_NONE;
    return add_tensor(a->s, t);
}

static enum kiln_status
do_cache_write(struct apply *a, struct kiln_stage *st)
{
    struct kiln_state *s = a->s;
    kiln_ctx          *ctx = a->ctx;
    if (st->transformed || st->attach != KILN_ATTACH_ROOT)
        return step_fail(a, "cache_write must come before any other step on %s",
                         kiln_sym_str(ctx, st->name));
    uint32_t sid = stage_id(s, st);
    uint32_t axname[KILN_MAX_DIMS], rname[KILN_MAX_REDUCE];
    root_names(st, axname, rname);
    struct kiln_stensor ot = s->t[st->tensor];
    uint32_t            lt = derived_tensor(a, st->tensor, ot.ndim, ot.shape);
    if (lt == KILN_NONE)
        return ctx->err.status;
    uint32_t l = add_stage(s, lt, st->body, st->reduce, st->nred, st->rext);
    if (l == KILN_NONE)
        return ctx->err.status;
    st = &s->st[sid]; /* the stage array may have moved */
    KILN_TRY(reset_iters(s, &s->st[l], axname, rname));
    st->body = identity_axes_load(ctx, lt, (enum kiln_dtype)ot.dtype, ot.ndim);
    st->reduce = KILN_REDUCE_NONE;
    st->nred = 0;
    KILN_TRY(reset_iters(s, st, axname, NULL));
    if (!insert_order(s, order_pos(s, sid), l))
        return ctx->err.status;
    return KILN_OK;
}

struct retarget_ctx {
    kiln_ctx *ctx;
    uint32_t  from, to;
    uint32_t  dim;                 /* pack: dimension split */
    int64_t   block;               /* pack: block size, 0 = plain retarget */
    uint32_t  perm[KILN_MAX_DIMS]; /* pack: source dimension of each packed dimension */
};

static kiln_expr
retarget_load(void *ud, kiln_expr load, uint32_t n, const kiln_expr *idx)
{
    struct retarget_ctx    *rc = ud;
    const struct kiln_node *nd = kiln_node_get(rc->ctx, load);
    uint32_t                t = (uint32_t)nd->imm;
    enum kiln_dtype         dt = (enum kiln_dtype)nd->dtype;
    if (t != rc->from)
        return kiln_load(rc->ctx, t, dt, n, idx);
    if (!rc->block)
        return kiln_load(rc->ctx, rc->to, dt, n, idx);
    kiln_expr nidx[KILN_MAX_DIMS];
    kiln_expr b = kiln_idx(rc->ctx, rc->block);
    for (uint32_t k = 0; k < n; k++)
        nidx[k] =
            rc->perm[k] == rc->dim ? kiln_floordiv(rc->ctx, idx[rc->dim], b) : idx[rc->perm[k]];
    nidx[n] = kiln_floormod(rc->ctx, idx[rc->dim], b);
    return kiln_load(rc->ctx, rc->to, dt, n + 1, nidx);
}

/* Rewrites the loads of `from` in every stage but `skip`, then orders stage `added` right
 * before its first reader (or after the producer of from, whichever is later). */
static enum kiln_status
redirect(struct apply *a, struct retarget_ctx *rc, uint32_t skip, uint32_t added,
         const uint32_t *only, uint32_t nonly)
{
    struct kiln_state *s = a->s;
    uint32_t           first = s->norder;
    for (uint32_t i = 0; i < s->norder; i++) {
        struct kiln_stage *c = &s->st[s->order[i]];
        bool               chosen = !only;
        for (uint32_t j = 0; j < nonly; j++)
            chosen |= s->order[i] == only[j];
        if (s->order[i] == skip || !chosen || c->attach == KILN_ATTACH_INLINE
            || !stage_reads(s, c, rc->from))
            continue;
        c->body = kiln_expr_map_loads(a->ctx, c->body, retarget_load, rc);
        if (!c->body.id)
            return a->ctx->err.status;
        if (i < first)
            first = i;
    }
    if (first == s->norder)
        return step_fail(a, "no stage reads %s", kiln_sym_str(a->ctx, s->t[rc->from].name));
    if (!insert_order(s, first, added))
        return a->ctx->err.status;
    return KILN_OK;
}

/* The tensor a step names (cache_read, pack, pad). */
static enum kiln_status
step_tensor(struct apply *a, uint32_t *t)
{
    *t = find_tensor(a->s, a->step->stage);
    if (*t == KILN_NONE)
        return step_fail(a, "no tensor named %s", kiln_sym_str(a->ctx, a->step->stage));
    return KILN_OK;
}

/* The stages a step lists as readers of tensor t (cache_read, pad), each one reading it. */
static enum kiln_status
step_readers(struct apply *a, uint32_t t, uint32_t *out)
{
    for (uint32_t j = 0; j < a->step->n; j++) {
        struct kiln_stage *r;
        KILN_TRY(get_stage(a, a->step->iters[j], &r));
        if (!stage_reads(a->s, r, t))
            return step_fail(a, "%s does not read %s", kiln_sym_str(a->ctx, r->name),
                             kiln_sym_str(a->ctx, a->s->t[t].name));
        out[j] = stage_id(a->s, r);
    }
    return KILN_OK;
}

static enum kiln_status
do_cache_read(struct apply *a)
{
    struct kiln_state *s = a->s;
    kiln_ctx          *ctx = a->ctx;
    uint32_t           t, only[KILN_STEP_MAXN];
    KILN_TRY(step_tensor(a, &t));
    KILN_TRY(step_readers(a, t, only));
    struct kiln_stensor src = s->t[t];
    uint32_t            ct = derived_tensor(a, t, src.ndim, src.shape);
    if (ct == KILN_NONE)
        return ctx->err.status;
    s->t[ct].shared = a->step->value == KILN_CACHE_SHARED;
    uint32_t c = add_stage(s, ct, identity_axes_load(ctx, t, (enum kiln_dtype)src.dtype, src.ndim),
                           KILN_REDUCE_NONE, 0, NULL);
    if (c == KILN_NONE)
        return ctx->err.status;
    KILN_TRY(reset_iters(s, &s->st[c], NULL, NULL));
    struct retarget_ctx rc = {ctx, t, ct, 0, 0, {0}};
    return redirect(a, &rc, c, c, only, a->step->n);
}

static enum kiln_status
do_pack(struct apply *a)
{
    struct kiln_state *s = a->s;
    kiln_ctx          *ctx = a->ctx;
    uint32_t           t;
    KILN_TRY(step_tensor(a, &t));
    struct kiln_stensor src = s->t[t];
    int64_t             d = a->step->value, f = a->step->factors[0];
    int64_t             at = a->step->n > 1 ? a->step->factors[1] : d;
    if (d < 0 || d >= src.ndim)
        return step_fail(a, "dimension %lld is out of range for %s with %d dimensions",
                         (long long)d, kiln_sym_str(ctx, src.name), src.ndim);
    if (f < 2 || f > src.shape[d])
        return step_fail(a, "block %lld must be between 2 and the extent %lld", (long long)f,
                         (long long)src.shape[d]);
    if (at < 0 || at >= src.ndim)
        return step_fail(a, "outer position %lld is out of range for %s with %d dimensions",
                         (long long)at, kiln_sym_str(ctx, src.name), src.ndim);
    if (src.ndim == KILN_MAX_DIMS)
        return step_fail(a, "%s already has %d dimensions", kiln_sym_str(ctx, src.name),
                         KILN_MAX_DIMS);
    /* packed dims: src's dims without d, with the outer part of d inserted at position at,
     * then the block of d innermost. perm[k] = source dim held by packed dim k (d for both) */
    uint32_t perm[KILN_MAX_DIMS], n = 0;
    for (uint32_t k = 0; k < src.ndim; k++)
        if (k != (uint32_t)d)
            perm[n++] = k;
    memmove(&perm[at + 1], &perm[at], sizeof(uint32_t) * (size_t)(n - (uint32_t)at));
    perm[at] = (uint32_t)d;
    int64_t shape[KILN_MAX_DIMS];
    for (uint32_t k = 0; k < src.ndim; k++)
        shape[k] = perm[k] == (uint32_t)d ? (src.shape[d] + f - 1) / f : src.shape[perm[k]];
    shape[src.ndim] = f;
    uint32_t pt = derived_tensor(a, t, (uint32_t)src.ndim + 1, shape);
    if (pt == KILN_NONE)
        return ctx->err.status;
    /* pack[.., o, .., i] = src[.., o*f + i, ..] (zero past the end) */
    kiln_expr idx[KILN_MAX_DIMS];
    for (uint32_t k = 0; k < src.ndim; k++)
        idx[perm[k]] = kiln_axis(ctx, k);
    idx[d] = kiln_add(ctx, kiln_mul(ctx, kiln_axis(ctx, (uint32_t)at), kiln_idx(ctx, f)),
                      kiln_axis(ctx, src.ndim));
    kiln_expr body = kiln_load(ctx, t, (enum kiln_dtype)src.dtype, src.ndim, idx);
    if (src.shape[d] % f)
        body = kiln_select(ctx, kiln_lt(ctx, idx[d], kiln_idx(ctx, src.shape[d])), body,
                           kiln_const(ctx, 0, (enum kiln_dtype)src.dtype));
    uint32_t p = add_stage(s, pt, body, KILN_REDUCE_NONE, 0, NULL);
    if (p == KILN_NONE)
        return ctx->err.status;
    KILN_TRY(reset_iters(s, &s->st[p], NULL, NULL));
    struct retarget_ctx rc = {ctx, t, pt, (uint32_t)d, f, {0}};
    for (uint32_t k = 0; k < src.ndim; k++)
        rc.perm[k] = perm[k];
    return redirect(a, &rc, p, p, NULL, 0);
}

/* T.pad: T widened by how far the readers' windows hang over its edges, holding their fill
 * value there; the readers read it at shifted indices without the bounds checks (passes/pad.c). */
static enum kiln_status
do_pad(struct apply *a)
{
    struct kiln_state *s = a->s;
    kiln_ctx          *ctx = a->ctx;
    uint32_t           t, rd[KILN_STEP_MAXN];
    KILN_TRY(step_tensor(a, &t));
    KILN_TRY(step_readers(a, t, rd));
    struct kiln_stensor src = s->t[t];
    struct kiln_pad     pad;
    memset(&pad, 0, sizeof pad);
    const char *why;
    for (uint32_t j = 0; j < a->step->n; j++) {
        struct kiln_stage *r = &s->st[rd[j]];
        if (r->attach == KILN_ATTACH_INLINE)
            return step_fail(a, "reader %s was inlined", kiln_sym_str(ctx, r->name));
        KILN_TRY(kiln_pad_scan(ctx, r->body, t, src.shape, src.ndim, s->t[r->tensor].shape, r->ndim,
                               r->rext, r->nred, &pad, &why));
        if (why)
            return step_fail(a, "%s reads %s: %s", kiln_sym_str(ctx, r->name),
                             kiln_sym_str(ctx, src.name), why);
    }
    int64_t   shape[KILN_MAX_DIMS];
    kiln_expr idx[KILN_MAX_DIMS], cond = kiln_bool(ctx, true);
    bool      any = false;
    for (uint32_t d = 0; d < src.ndim; d++) {
        kiln_expr ax = kiln_axis(ctx, d);
        shape[d] = src.shape[d] + pad.lo[d] + pad.hi[d];
        idx[d] = kiln_sub(ctx, ax, kiln_idx(ctx, pad.lo[d]));
        if (pad.lo[d])
            cond = kiln_and(ctx, cond, kiln_le(ctx, kiln_idx(ctx, pad.lo[d]), ax));
        if (pad.hi[d])
            cond = kiln_and(ctx, cond, kiln_lt(ctx, ax, kiln_idx(ctx, pad.lo[d] + src.shape[d])));
        any |= pad.lo[d] || pad.hi[d];
    }
    if (!any)
        return step_fail(a, "no read of %s leaves its bounds: nothing to pad",
                         kiln_sym_str(ctx, src.name));
    if (!pad.fill.id)
        return step_fail(a, "no read of %s is guarded by a select on its bounds",
                         kiln_sym_str(ctx, src.name));
    uint32_t pt = derived_tensor(a, t, src.ndim, shape);
    if (pt == KILN_NONE)
        return ctx->err.status;
    kiln_expr body = kiln_select(
        ctx, cond, kiln_load(ctx, t, (enum kiln_dtype)src.dtype, src.ndim, idx), pad.fill);
    uint32_t p = add_stage(s, pt, body, KILN_REDUCE_NONE, 0, NULL);
    if (p == KILN_NONE)
        return ctx->err.status;
    KILN_TRY(reset_iters(s, &s->st[p], NULL, NULL));
    uint32_t first = s->norder;
    for (uint32_t j = 0; j < a->step->n; j++) {
        struct kiln_stage *r = &s->st[rd[j]];
        kiln_expr          nb =
            kiln_pad_rewrite(ctx, r->body, t, pt, src.shape, src.ndim, s->t[r->tensor].shape,
                             r->ndim, r->rext, r->nred, &pad, &why);
        if (why)
            return step_fail(a, "%s reads %s: %s", kiln_sym_str(ctx, r->name),
                             kiln_sym_str(ctx, src.name), why);
        if (!nb.id)
            return ctx->err.status;
        r->body = nb;
        uint32_t pos = order_pos(s, rd[j]);
        if (pos < first)
            first = pos;
    }
    if (!insert_order(s, first, p))
        return ctx->err.status;
    return KILN_OK;
}

static kiln_expr
reduce_identity(kiln_ctx *ctx, enum kiln_reduce r, enum kiln_dtype dt)
{
    double inf = 1.0 / 0.0;
    return kiln_const(ctx, r == KILN_REDUCE_MAX ? -inf : r == KILN_REDUCE_MIN ? inf : 0, dt);
}

static enum kiln_status
do_rfactor(struct apply *a, struct kiln_stage *st)
{
    struct kiln_state *s = a->s;
    kiln_ctx          *ctx = a->ctx;
    uint32_t           sid = stage_id(s, st), pos;
    KILN_TRY(get_leaf(a, st, a->step->iter, &pos));
    uint32_t rf = st->leaf[pos];
    if (!st->it[rf].reduce)
        return step_fail(a, "iterator %s is not a reduction", kiln_sym_str(ctx, st->it[rf].name));
    if (st->attach != KILN_ATTACH_ROOT)
        return step_fail(a, "rfactor needs a stage computed at root");
    for (uint32_t k = 0; k < st->nit; k++)
        if (!st->it[k].reduce && (k >= st->ndim || st->it[k].ann != KILN_LOOP_SERIAL))
            return step_fail(a, "rfactor needs untransformed spatial iterators on %s",
                             kiln_sym_str(ctx, st->name));
    struct kiln_stensor ot = s->t[st->tensor];
    if (ot.ndim == KILN_MAX_DIMS)
        return step_fail(a, "%s already has %d dimensions", kiln_sym_str(ctx, ot.name),
                         KILN_MAX_DIMS);
    /* C.rf[axes..., f] = reduce over the other reduction leaves of body */
    kiln_expr val[512];
    int64_t   ext[512], root_ext[KILN_MAX_DIMS] = {0};
    if (st->nit > KILN_COUNTOF(val))
        return step_fail(a, "too many iterators");
    for (uint32_t k = 0; k < st->ndim; k++)
        root_ext[k] = ot.shape[k];
    kiln_state_extents(st, root_ext, ext);
    int64_t  rext[KILN_MAX_REDUCE];
    uint32_t rname[KILN_MAX_REDUCE], axname[KILN_MAX_DIMS + 1], nr = 0;
    for (uint32_t k = 0; k < st->nit; k++)
        val[k] = (kiln_expr){0};
    for (uint32_t k = 0; k < st->ndim; k++) {
        val[k] = kiln_axis(ctx, k);
        axname[k] = st->it[k].name;
    }
    val[rf] = kiln_axis(ctx, st->ndim);
    axname[st->ndim] = st->it[rf].name;
    for (uint32_t i = 0; i < st->nleaf; i++) {
        uint32_t l = st->leaf[i];
        if (!st->it[l].reduce || l == rf)
            continue;
        if (nr == KILN_MAX_REDUCE)
            return step_fail(a, "too many reduction loops");
        val[l] = kiln_rvar(ctx, nr);
        rext[nr] = ext[l];
        rname[nr++] = st->it[l].name;
    }
    kiln_state_values(ctx, st, ext, val);
    kiln_expr rv[KILN_MAX_REDUCE], guard[KILN_STEP_MAXN * 32];
    for (uint32_t r = 0; r < st->nred; r++)
        rv[r] = val[st->ndim + r];
    kiln_expr body = kiln_expr_subst(ctx, st->body, val, st->ndim, rv, st->nred);
    uint32_t  ng = kiln_state_guards(ctx, st, ext, val, false, guard);
    kiln_expr cond = kiln_bool(ctx, true);
    for (uint32_t j = 0; j < ng; j++)
        cond = kiln_and(ctx, cond, guard[j]);
    body =
        kiln_select(ctx, cond, body,
                    reduce_identity(ctx, (enum kiln_reduce)st->reduce, (enum kiln_dtype)ot.dtype));
    int64_t shape[KILN_MAX_DIMS];
    for (uint32_t k = 0; k < ot.ndim; k++)
        shape[k] = ot.shape[k];
    shape[ot.ndim] = ext[rf];
    uint32_t rt = derived_tensor(a, st->tensor, (uint32_t)ot.ndim + 1, shape);
    if (rt == KILN_NONE || !body.id)
        return ctx->err.status;
    enum kiln_reduce red = (enum kiln_reduce)st->reduce;
    uint32_t r = add_stage(s, rt, body, nr ? (uint8_t)red : KILN_REDUCE_NONE, (uint8_t)nr, rext);
    if (r == KILN_NONE)
        return ctx->err.status;
    st = &s->st[sid];
    KILN_TRY(reset_iters(s, &s->st[r], axname, rname));
    /* C[axes] = reduce_f C.rf[axes..., f] */
    kiln_expr idx[KILN_MAX_DIMS];
    for (uint32_t k = 0; k < ot.ndim; k++)
        idx[k] = kiln_axis(ctx, k);
    idx[ot.ndim] = kiln_rvar(ctx, 0);
    st->body = kiln_load(ctx, rt, (enum kiln_dtype)ot.dtype, (uint32_t)ot.ndim + 1, idx);
    st->nred = 1;
    st->rext[0] = ext[rf];
    uint32_t cr[1] = {axname[ot.ndim]};
    KILN_TRY(reset_iters(s, st, axname, cr));
    if (!insert_order(s, order_pos(s, sid), r))
        return ctx->err.status;
    return KILN_OK;
}

/* ---- driver ---- */

static enum kiln_status
apply_step(struct apply *a)
{
    const struct kiln_step *sp = a->step;
    struct kiln_stage      *st = NULL;
    if (sp->kind >= KILN_STEP_COUNT)
        return step_fail(a, "unknown step kind %d", sp->kind);
    if (kiln_step_desc[sp->kind].stage == KILN_REF_STAGE) /* else a tensor: found by the step */
        KILN_TRY(get_stage(a, sp->stage, &st));
    if (st && st->attach == KILN_ATTACH_INLINE)
        return step_fail(a, "%s was inlined", kiln_sym_str(a->ctx, st->name));
    char why[200];
    if (!kiln_step_check(sp, why, sizeof why))
        return step_fail(a, "%s", why);
    /* the effect of each kind (a switch: -Wswitch names this place when a kind is added) */
    switch ((enum kiln_step_kind)sp->kind) {
    case KILN_STEP_SPLIT:
        return do_split(a, st, sp->iter, sp->n, sp->factors, NULL);
    case KILN_STEP_TILE:
        return do_tile(a, st);
    case KILN_STEP_REORDER:
        return do_reorder(a, st, sp->n, sp->iters);
    case KILN_STEP_FUSE:
        return do_fuse(a, st, sp->n, sp->iters);
    case KILN_STEP_PARALLEL:
        return do_annotate(a, st, KILN_LOOP_PARALLEL);
    case KILN_STEP_VECTORIZE:
        return do_annotate(a, st, KILN_LOOP_VECTOR);
    case KILN_STEP_UNROLL:
        return do_annotate(a, st, KILN_LOOP_UNROLL);
    case KILN_STEP_AUTO_UNROLL:
        st->auto_unroll = sp->value;
        return KILN_OK;
    case KILN_STEP_COMPUTE_AT:
        return do_compute_at(a, st);
    case KILN_STEP_COMPUTE_INLINE:
        return do_inline(a, st);
    case KILN_STEP_COMPUTE_ROOT:
        st->attach = KILN_ATTACH_ROOT;
        st->at_stage = st->at_iter = KILN_NONE;
        return KILN_OK;
    case KILN_STEP_CACHE_WRITE:
        return do_cache_write(a, st);
    case KILN_STEP_CACHE_READ:
        return do_cache_read(a);
    case KILN_STEP_RFACTOR:
        return do_rfactor(a, st);
    case KILN_STEP_PACK:
        return do_pack(a);
    case KILN_STEP_PAD:
        return do_pad(a);
    case KILN_STEP_BIND:
        return do_bind(a, st);
    case KILN_STEP_COUNT:
        break;
    }
    return step_fail(a, "unknown step kind %d", sp->kind);
}

enum kiln_status
kiln_state_build(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_schedule *sched,
                 struct kiln_state *s)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->g = g;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    for (uint32_t i = 0; i < g->ntensor; i++) {
        const struct kiln_tensor *gt = &g->tensor[i];
        struct kiln_stensor       t = {.name = gt->name,
                                       .dtype = gt->dtype,
                                       .kind = gt->kind,
                                       .ndim = gt->ndim,
                                       .is_output = gt->is_output,
                                       .stage = KILN_NONE};
        memcpy(t.shape, gt->shape, sizeof t.shape);
        if (add_tensor(s, t) == KILN_NONE)
            return ctx->err.status;
    }
    for (uint32_t i = 0; i < g->nop; i++) {
        const struct kiln_opdef *op = &g->op[i];
        uint32_t id = add_stage(s, op->out, op->body, op->reduce, op->nred, op->rext);
        if (id == KILN_NONE || !KILN_VEC_PUSH(ctx, s->order, s->norder, s->caporder, id))
            return ctx->err.status;
        KILN_TRY(reset_iters(s, &s->st[id], op->axname, op->rname));
    }
    for (uint32_t i = 0; sched && i < sched->nstep; i++) {
        struct apply a = {s, ctx, i, &sched->step[i]};
        KILN_TRY(apply_step(&a));
    }
    return KILN_OK;
}
