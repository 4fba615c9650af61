/* passes/memplan.c -- memory planning: the intermediates computed at root share one workspace.
 *
 * Lowering gives every root-level intermediate a HEAP buffer whose ALLOC wraps the whole body,
 * so without planning a call holds all of them at once. Here each such buffer gets a live
 * range over the root statements (the items of the body's top-level sequence, below the chain
 * of ALLOCs): from the first statement that touches it to the last one, where a statement
 * touches a buffer when a load or store anywhere inside it (nested stages included) names it.
 * Offsets then come from kiln_memplan_place: greedy by size (largest first, as TFLite's
 * greedy-by-size arena planner and TVM's static storage planner do), each buffer going into
 * the smallest gap between the already placed buffers whose ranges overlap its own (best fit),
 * or above the highest of them. Ranges are inclusive, so a statement that reads A and writes B
 * never sees them share bytes; a buffer written in one statement and read much later (a skip
 * connection) keeps its bytes the whole time in between. */
#include "passes.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct place_item {
    uint32_t id;
    int64_t  bytes; /* rounded up to the alignment */
    uint32_t first, last;
};

static int
by_size(const void *pa, const void *pb)
{
    const struct place_item *a = pa, *b = pb;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

struct placed {
    int64_t off, end;
};

static int
by_offset(const void *pa, const void *pb)
{
    const struct placed *a = pa, *b = pb;
    return a->off < b->off ? -1 : a->off > b->off;
}

/* The pairs of intervals [first[i], last[i]] (i < n, use[i]) that overlap, as adjacency lists:
 * i's neighbours are adj[start[i] .. start[i + 1]). A sweep in order of first with the
 * intervals still open: time and memory grow with n log n plus the pairs, where comparing
 * every pair made planning a chain of 100,000 statements quadratic. Arena-allocated; false on
 * running out of memory (recorded). */
struct endpoint {
    uint32_t first, id;
};
struct pair {
    uint32_t a, b;
};

static int
by_first(const void *pa, const void *pb)
{
    const struct endpoint *a = pa, *b = pb;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static bool
overlap_lists(kiln_ctx *ctx, uint32_t n, const uint32_t *first, const uint32_t *last,
              const bool *use, uint32_t **start_out, uint32_t **adj_out)
{
    struct endpoint *ord = kiln_arena_alloc(ctx, sizeof *ord * (n + 1));
    uint32_t        *open = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));
    uint32_t        *start = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 2));
    if (!ord || !open || !start)
        return false;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (use[i])
            ord[m++] = (struct endpoint){first[i], i};
    qsort(ord, m, sizeof *ord, by_first);
    struct pair *pr = NULL;
    uint32_t     np = 0, cap = 0, nopen = 0;
    for (uint32_t k = 0; k < m; k++) {
        uint32_t b = ord[k].id, keep = 0;
        for (uint32_t q = 0; q < nopen; q++) /* closed intervals leave */
            if (last[open[q]] >= first[b])
                open[keep++] = open[q];
        nopen = keep;
        for (uint32_t q = 0; q < nopen; q++)
            if (!KILN_VEC_PUSH(ctx, pr, np, cap, ((struct pair){open[q], b})))
                return false;
        open[nopen++] = b;
    }
    for (uint32_t e = 0; e < np; e++) {
        start[pr[e].a + 2]++;
        start[pr[e].b + 2]++;
    }
    for (uint32_t i = 0; i < n; i++)
        start[i + 2] += start[i + 1];
    uint32_t *adj = kiln_arena_alloc(ctx, sizeof(uint32_t) * (2 * (size_t)np + 1));
    if (!adj)
        return false;
    for (uint32_t e = 0; e < np; e++) {
        adj[start[pr[e].a + 1]++] = pr[e].b;
        adj[start[pr[e].b + 1]++] = pr[e].a;
    }
    *start_out = start;
    *adj_out = adj;
    return true;
}

int64_t
kiln_memplan_place(kiln_ctx *ctx, const struct kiln_live *b, uint32_t n, int64_t align,
                   int64_t *offset)
{
    if (align < 1 || (align & (align - 1))) {
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "memplan",
                  "memplan: alignment %" PRId64 " is not a power of two", align);
        return -1;
    }
    struct kiln_arena_mark m = kiln_arena_mark(ctx);
    struct place_item     *it = kiln_arena_alloc(ctx, sizeof *it * (n + 1));
    struct placed         *nb = kiln_arena_alloc(ctx, sizeof *nb * (n + 1));
    if (!it || !nb)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        int64_t sz = b[i].bytes > 0 ? b[i].bytes : 0;
        if (sz > INT64_MAX / 4) {
            KILN_FAIL(ctx, KILN_ERR_INVALID, "memplan", "memplan: buffer %u is too large", i);
            kiln_arena_rewind(ctx, m);
            return -1;
        }
        it[i] = (struct place_item){i, (sz + align - 1) & ~(align - 1), b[i].first, b[i].last};
        if (it[i].first > it[i].last) /* never touched: live nowhere, any place will do */
            it[i].first = it[i].last = 0;
    }
    qsort(it, n, sizeof *it, by_size);
    /* the placed buffers whose ranges overlap each one's: by position in size order */
    uint32_t *first = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));
    uint32_t *last = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));
    bool     *use = kiln_arena_alloc(ctx, n + 1);
    uint32_t *start = NULL, *adj = NULL;
    if (!first || !last || !use)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        first[i] = it[i].first;
        last[i] = it[i].last;
        use[i] = true;
    }
    if (!overlap_lists(ctx, n, first, last, use, &start, &adj))
        return -1;
    int64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t nn = 0;
        for (uint32_t k = start[i]; k < start[i + 1]; k++) {
            uint32_t j = adj[k];
            if (j < i && it[j].bytes)
                nb[nn++] = (struct placed){offset[it[j].id], offset[it[j].id] + it[j].bytes};
        }
        qsort(nb, nn, sizeof *nb, by_offset);
        int64_t cur = 0, best = -1, best_gap = INT64_MAX;
        for (uint32_t k = 0; k < nn; k++) {
            int64_t gap = nb[k].off - cur;
            if (gap >= it[i].bytes && gap < best_gap) {
                best = cur;
                best_gap = gap;
            }
            if (nb[k].end > cur)
                cur = nb[k].end;
        }
        offset[it[i].id] = best >= 0 ? best : cur;
        if (offset[it[i].id] + it[i].bytes > total)
            total = offset[it[i].id] + it[i].bytes;
    }
    kiln_arena_rewind(ctx, m);
    return total;
}

/* ---- live ranges over the root statements ---- */

struct live_scan {
    const struct kiln_func *f;
    struct kiln_live       *live; /* per buffer */
    uint32_t                item;
};

static void
touch(struct live_scan *L, uint32_t b)
{
    if (b >= L->f->nbuf)
        return;
    struct kiln_live *l = &L->live[b];
    if (l->first > l->last) {
        l->first = l->last = L->item;
        return;
    }
    if (L->item < l->first)
        l->first = L->item;
    if (L->item > l->last)
        l->last = L->item;
}

static bool
scan_load(void *ud, kiln_expr node)
{
    struct live_scan       *L = ud;
    const struct kiln_node *n = kiln_node_get(L->f->ctx, node);
    if (n->op == KILN_OP_LOAD)
        touch(L, (uint32_t)n->imm);
    return true;
}

/* A statement visitor: a store touches its buffer, every expression the buffers it loads. */
static enum kiln_walk
scan_store(struct kiln_stmt_visitor *v, const struct kiln_stmt *s)
{
    touch(v->user, s->u.store.buf);
    return kiln_stmt_visit_children(v, s);
}

static enum kiln_walk
scan_expr(struct kiln_stmt_visitor *v, const struct kiln_stmt *s, enum kiln_stmt_field field,
          kiln_expr e)
{
    struct live_scan *L = v->user;
    (void)s;
    (void)field;
    if (e.id)
        kiln_expr_visit_nodes(L->f->ctx, e, scan_load, L);
    return KILN_WALK_GO;
}

/* The root statements: below the chain of ALLOCs at the top of the body, the items of a
 * sequence (or the one statement). Returns the first statement below the chain. */
static const struct kiln_stmt *
root_items(const struct kiln_func *f, struct kiln_stmt *const **items, uint32_t *n)
{
    const struct kiln_stmt *s = f->body;
    while (s && s->kind == KILN_STMT_ALLOC)
        s = s->u.alloc.body;
    if (s && s->kind == KILN_STMT_SEQ) {
        *items = s->u.seq.item;
        *n = s->u.seq.n;
    } else {
        *items = NULL;
        *n = s ? 1 : 0;
    }
    return s;
}

enum kiln_status
kiln_memplan_live(const struct kiln_func *f, struct kiln_live *live)
{
    struct kiln_stmt *const *items;
    uint32_t                 n;
    const struct kiln_stmt  *top = root_items(f, &items, &n);
    struct live_scan         L = {.f = f, .live = live};
    for (uint32_t b = 0; b < f->nbuf; b++) {
        int64_t bytes;
        if (!kiln_buffer_bytes(&f->buf[b], &bytes))
            return KILN_FAIL(f->ctx, KILN_ERR_INVALID, "memplan", "memplan: buffer %s is too large",
                             kiln_sym_str(f->ctx, f->buf[b].name));
        live[b] = (struct kiln_live){.bytes = bytes, .first = 1, .last = 0};
    }
    struct kiln_stmt_visitor v = {.user = &L, .store = scan_store, .expr = scan_expr};
    for (uint32_t i = 0; i < n; i++) {
        L.item = i;
        kiln_stmt_visit(&v, items ? items[i] : top);
    }
    return kiln_ok(f->ctx) ? KILN_OK : f->ctx->err.status;
}

enum kiln_status
kiln_pass_memplan(struct kiln_func *f, bool plan, int64_t *unplanned)
{
    kiln_ctx *ctx = f->ctx;
    if (unplanned)
        *unplanned = 0;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_arena_mark m = kiln_arena_mark(ctx);
    struct kiln_live      *live = kiln_arena_alloc(ctx, sizeof *live * (f->nbuf + 1));
    struct kiln_live      *cand = kiln_arena_alloc(ctx, sizeof *cand * (f->nbuf + 1));
    uint32_t              *id = kiln_arena_alloc(ctx, sizeof *id * (f->nbuf + 1));
    int64_t               *off = kiln_arena_alloc(ctx, sizeof *off * (f->nbuf + 1));
    if (!live || !cand || !id || !off)
        return ctx->err.status;
    enum kiln_status st = kiln_memplan_live(f, live);
    uint32_t         n = 0;
    int64_t          sum = 0;
    for (const struct kiln_stmt *s = f->body; st == KILN_OK && s && s->kind == KILN_STMT_ALLOC;
         s = s->u.alloc.body) {
        uint32_t b = s->u.alloc.buf;
        if (b >= f->nbuf || f->buf[b].scope != KILN_SCOPE_HEAP || f->buf[b].ws_offset >= 0
            || f->buf[b].prep_offset >= 0) /* weight-derived: in the prepared area */
            continue;
        cand[n] = live[b];
        id[n++] = b;
        int64_t r = (live[b].bytes + KILN_WS_ALIGN - 1) / KILN_WS_ALIGN * KILN_WS_ALIGN;
        sum = sum > INT64_MAX - r ? INT64_MAX : sum + r;
    }
    if (unplanned)
        *unplanned = sum;
    if (st == KILN_OK && plan && n) {
        int64_t total = kiln_memplan_place(ctx, cand, n, KILN_WS_ALIGN, off);
        if (total < 0) {
            st = ctx->err.status;
        } else {
            for (uint32_t i = 0; i < n; i++)
                f->buf[id[i]].ws_offset = off[i];
            f->ws_bytes = total;
        }
    }
    kiln_arena_rewind(ctx, m);
    if (st == KILN_OK && plan && n)
        st = kiln_memplan_check(f);
    return st;
}

enum kiln_status
kiln_memplan_check(const struct kiln_func *f)
{
    kiln_ctx              *ctx = f->ctx;
    struct kiln_arena_mark m = kiln_arena_mark(ctx);
    struct kiln_live      *live = kiln_arena_alloc(ctx, sizeof *live * (f->nbuf + 1));
    if (!live)
        return ctx->err.status;
    enum kiln_status st = kiln_memplan_live(f, live);
    uint32_t        *first = kiln_arena_alloc(ctx, sizeof(uint32_t) * (f->nbuf + 1));
    uint32_t        *last = kiln_arena_alloc(ctx, sizeof(uint32_t) * (f->nbuf + 1));
    bool            *use = kiln_arena_alloc(ctx, f->nbuf + 1);
    uint32_t        *start = NULL, *adj = NULL;
    if (st == KILN_OK && (!first || !last || !use))
        st = ctx->err.status;
    for (uint32_t b = 0; st == KILN_OK && b < f->nbuf; b++) {
        first[b] = live[b].first;
        last[b] = live[b].last;
        use[b] = f->buf[b].ws_offset >= 0 && live[b].first <= live[b].last;
    }
    if (st == KILN_OK && !overlap_lists(ctx, f->nbuf, first, last, use, &start, &adj))
        st = ctx->err.status;
    for (uint32_t a = 0; st == KILN_OK && a < f->nbuf; a++) {
        const struct kiln_buffer *ba = &f->buf[a];
        for (uint32_t k = start[a]; use[a] && st == KILN_OK && k < start[a + 1]; k++) {
            uint32_t                  b = adj[k];
            const struct kiln_buffer *bb = &f->buf[b];
            if (b <= a)
                continue;
            if (ba->ws_offset < bb->ws_offset + live[b].bytes
                && bb->ws_offset < ba->ws_offset + live[a].bytes)
                st = KILN_FAIL(ctx, KILN_ERR_INTERNAL, "memplan",
                               "memplan: %s and %s are live together (root statements %u-%u and "
                               "%u-%u) but share workspace bytes",
                               kiln_sym_str(ctx, ba->name), kiln_sym_str(ctx, bb->name),
                               live[a].first, live[a].last, live[b].first, live[b].last);
        }
    }
    kiln_arena_rewind(ctx, m);
    return st;
}
