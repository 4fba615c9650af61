/* ir/print.c -- the .kg printer: writes a kernel graph in the canonical text of docs/kg.md.
 *
 * Declarations come in argument order, then one line per statement in graph call order (a
 * library call as `out = op(inputs, attr=value)` with the attributes as given, a hand-written
 * definition as a compute definition), then the outputs. With KILN_PRINT_EXPANDED every op is
 * written as a compute definition, library intermediates included.
 *
 * The text must parse back to the same expression nodes, so the printer mirrors the parser's
 * literal typing (ir/parse.c, build_pair): a literal printed bare takes its dtype from the
 * operand beside it, or i64 / f32 when nothing gives one, so a constant whose dtype would not
 * come back is written as a cast (`f64(0.5)`, `bool(1)`). Constants on both sides of an
 * operator (which the builders could not fold) are always cast. Parentheses are the minimum
 * the precedence table needs; comparisons never chain. `where` clauses appear only for ranges
 * kiln_ir_infer_ranges cannot recover, or for every reduction variable when the order in which
 * they first appear in the printed text would number them differently. Variable names are the
 * display names when they are valid and distinct, else i0, i1, ... and r0, r1, ... */
#include "parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pr {
    kiln_ctx                *ctx;
    const struct kiln_graph *g;
    struct kiln_buf         *out;
    const char              *axn[KILN_MAX_DIMS];
    const char              *rn[KILN_MAX_REDUCE];
    uint32_t                 appear[KILN_MAX_REDUCE], nappear;
    bool                     seen[KILN_MAX_REDUCE];
};

const char *
kiln_ir_fmt_float(double v, char *buf)
{
    if (isnan(v))
        return strcpy(buf, "nan");
    if (isinf(v))
        return strcpy(buf, v > 0 ? "inf" : "-inf");
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    /* below 1e6, write all the digits rather than an exponent (10.0, not 1e+01); more digits
     * than the shortest still read back exactly */
    double mag = fabs(v);
    if (mag >= 1 && mag < 1e6) {
        int digits = 1 + (int)floor(log10(mag));
        snprintf(buf, 32, "%.*g", prec > digits ? prec : digits, v);
    } else if (prec == 17) {
        snprintf(buf, 32, "%.17g", v);
    }
    char *e = strchr(buf, 'e');
    if (e) { /* 1e-05 -> 1e-5, 1e+300 -> 1e300 */
        char *d = e + 1, *s = e + 1;
        if (*s == '+')
            s++;
        else if (*s == '-')
            *d++ = *s++;
        while (*s == '0' && s[1])
            s++;
        memmove(d, s, strlen(s) + 1);
    } else if (!strchr(buf, '.')) {
        strcat(buf, ".0");
    }
    return buf;
}

static bool
puts_(struct pr *w, const char *s)
{
    return kiln_buf_puts(w->ctx, w->out, s);
}

static bool
infix(struct pr *w, const char *op) /* " op " */
{
    return kiln_buf_printf(w->ctx, w->out, " %s ", op);
}

/* ---- names ---- */

static bool
taken(const char *const *names, uint32_t n, const char *s)
{
    for (uint32_t i = 0; i < n; i++)
        if (names[i] && !strcmp(names[i], s))
            return true;
    return false;
}

/* Display names that are valid and distinct are kept; the others get i<k> / r<k>, with a
 * suffix if that is taken. */
static bool
resolve_names(struct pr *w, const struct kiln_opdef *op, uint32_t nax, uint32_t nred)
{
    const char *all[KILN_MAX_DIMS + KILN_MAX_REDUCE] = {0};
    uint32_t    n = nax + nred;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t    s = !op ? 0 : k < nax ? op->axname[k] : op->rname[k - nax];
        const char *name = s ? kiln_sym_str(w->ctx, s) : NULL;
        if (name && kiln_ir_valid_name(name, true) && !taken(all, n, name))
            all[k] = name;
    }
    for (uint32_t k = 0; k < n; k++) {
        for (uint32_t suffix = 0; !all[k]; suffix++) {
            char buf[32];
            if (suffix)
                snprintf(buf, sizeof buf, "%c%u_%u", k < nax ? 'i' : 'r', k < nax ? k : k - nax,
                         suffix);
            else
                snprintf(buf, sizeof buf, "%c%u", k < nax ? 'i' : 'r', k < nax ? k : k - nax);
            if (!taken(all, n, buf) && !(all[k] = kiln_arena_strdup(w->ctx, buf)))
                return false;
        }
    }
    for (uint32_t k = 0; k < KILN_MAX_DIMS; k++)
        w->axn[k] = k < nax ? all[k] : "?";
    for (uint32_t k = 0; k < KILN_MAX_REDUCE; k++)
        w->rn[k] = k < nred ? all[nax + k] : "?";
    return true;
}

/* ---- expressions ---- */

static int
prec(const kiln_ctx *ctx, kiln_expr e)
{
    return kiln_op_prec[kiln_node_get(ctx, e)->op];
}

static bool
is_const(const kiln_ctx *ctx, kiln_expr e)
{
    uint8_t op = kiln_node_get(ctx, e)->op;
    return op == KILN_OP_INT || op == KILN_OP_FLOAT;
}

/* Would the parser give a bare literal of c's value c's dtype, in a place that wants `want`? */
static bool
bare_ok(const kiln_ctx *ctx, kiln_expr c, enum kiln_dtype want)
{
    const struct kiln_node *n = kiln_node_get(ctx, c);
    enum kiln_dtype         dt = (enum kiln_dtype)n->dtype;
    if (n->op == KILN_OP_INT)
        return kiln_dtype_is_int(dt)
               && (want == dt || (want == KILN_DTYPE_VOID && dt == KILN_DTYPE_I64));
    return kiln_dtype_is_float(dt)
           && (want == dt || (want == KILN_DTYPE_VOID && dt == KILN_DTYPE_F32));
}

static bool pr_expr(struct pr *w, kiln_expr e, enum kiln_dtype want, uint32_t depth);

static bool
pr_const(struct pr *w, kiln_expr e, enum kiln_dtype want, bool force)
{
    const struct kiln_node *n = kiln_node_get(w->ctx, e);
    bool                    bare = !force && bare_ok(w->ctx, e, want);
    char                    buf[40];
    if (n->op == KILN_OP_INT)
        snprintf(buf, sizeof buf, "%lld", (long long)n->imm);
    else
        kiln_ir_fmt_float(kiln_expr_float_value(w->ctx, e), buf);
    if (bare)
        return puts_(w, buf);
    return kiln_buf_printf(w->ctx, w->out, "%s(%s)", kiln_dtype_name((enum kiln_dtype)n->dtype),
                           buf);
}

static bool
pr_paren(struct pr *w, kiln_expr e, enum kiln_dtype want, bool paren, uint32_t depth)
{
    return (!paren || puts_(w, "(")) && pr_expr(w, e, want, depth) && (!paren || puts_(w, ")"));
}

/* Wants of two operands (mirror of build_pair in ir/parse.c); *force: print both as casts. */
static void
pair_wants(const kiln_ctx *ctx, kiln_expr a, kiln_expr b, enum kiln_dtype both, enum kiln_dtype *wa,
           enum kiln_dtype *wb)
{
    bool ca = is_const(ctx, a), cb = is_const(ctx, b);
    *wa = *wb = KILN_DTYPE_VOID;
    if (ca && !cb)
        *wa = kiln_expr_dtype(ctx, b);
    else if (!ca && cb)
        *wb = kiln_expr_dtype(ctx, a);
    else if (ca && cb)
        *wa = *wb = both;
}

static bool
pr_var(struct pr *w, const struct kiln_node *n)
{
    uint32_t k = kiln_var_index(n->imm);
    switch (kiln_var_kind_of(n->imm)) {
    case KILN_VAR_AXIS:
        return puts_(w, k < KILN_MAX_DIMS ? w->axn[k] : "?");
    case KILN_VAR_REDUCE:
        if (k < KILN_MAX_REDUCE && !w->seen[k]) {
            w->seen[k] = true;
            w->appear[w->nappear++] = k;
        }
        return puts_(w, k < KILN_MAX_REDUCE ? w->rn[k] : "?");
    case KILN_VAR_NAMED:
        return puts_(w, kiln_sym_str(w->ctx, k));
    }
    return false;
}

static bool
pr_load(struct pr *w, kiln_expr e, uint32_t depth)
{
    const struct kiln_node *n = kiln_node_get(w->ctx, e);
    uint32_t                t = (uint32_t)n->imm;
    uint32_t                nidx = kiln_load_nidx(w->ctx, e);
    if (w->g && t < w->g->ntensor) {
        if (!puts_(w, kiln_graph_tensor_name(w->g, t)))
            return false;
        if (w->g->tensor[t].ndim == 0)
            nidx = 0; /* a scalar is loaded with one index, 0, written x[] */
    } else if (!kiln_buf_printf(w->ctx, w->out, "t%u", t)) {
        return false;
    }
    if (!puts_(w, "["))
        return false;
    for (uint32_t i = 0; i < nidx; i++) {
        /* the cast to i64 that kiln_load adds to a narrower index is implied */
        kiln_expr               ix = kiln_load_idx(w->ctx, e, i);
        const struct kiln_node *in = kiln_node_get(w->ctx, ix);
        if (in->op == KILN_OP_CAST && in->dtype == KILN_DTYPE_INDEX
            && kiln_dtype_is_int(kiln_expr_dtype(w->ctx, (kiln_expr){in->kid[0]})))
            ix = (kiln_expr){in->kid[0]};
        if ((i && !puts_(w, ", ")) || !pr_expr(w, ix, KILN_DTYPE_INDEX, depth + 1))
            return false;
    }
    return puts_(w, "]");
}

static bool
pr_expr(struct pr *w, kiln_expr e, enum kiln_dtype want, uint32_t depth)
{
    kiln_ctx *ctx = w->ctx;
    if (depth > 4 * KILN_KG_MAX_DEPTH) {
        KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "print", "expression too deep to print");
        return false;
    }
    struct kiln_node n = *kiln_node_get(ctx, e);
    enum kiln_op     op = (enum kiln_op)n.op;
    kiln_expr        a = {n.kid[0]}, b = {n.kid[1]}, c = {n.kid[2]};
    enum kiln_dtype  wa, wb;
    const char      *text = kiln_op_text[op];
    switch (kiln_op_kind(op)) {
    case KILN_OPK_LEAF:
        if (op == KILN_OP_VAR)
            return pr_var(w, &n);
        return pr_const(w, e, want, false);
    case KILN_OPK_LOAD:
        return pr_load(w, e, depth);
    case KILN_OPK_CAST:
        return kiln_buf_printf(ctx, w->out, "%s(", kiln_dtype_name((enum kiln_dtype)n.dtype))
               && pr_expr(w, a, KILN_DTYPE_VOID, depth + 1) && puts_(w, ")");
    case KILN_OPK_SELECT:
        pair_wants(ctx, b, c, want, &wa, &wb);
        return puts_(w, text) && puts_(w, "(") && pr_expr(w, a, KILN_DTYPE_VOID, depth + 1)
               && puts_(w, ", ") && pr_expr(w, b, wa, depth + 1) && puts_(w, ", ")
               && pr_expr(w, c, wb, depth + 1) && puts_(w, ")");
    case KILN_OPK_UNARY: /* -x and !x; abs(x) and float functions (an integer argument is f32) */
        if (kiln_op_prec[op] == 6)
            return puts_(w, text)
                   && pr_paren(w, a, kiln_op_flags[op] & KILN_OPF_ARITH ? want : KILN_DTYPE_VOID,
                               prec(ctx, a) < 6, depth + 1);
        wa = (kiln_op_flags[op] & KILN_OPF_ARITH) || kiln_dtype_is_float(want) ? want
                                                                               : KILN_DTYPE_F32;
        return puts_(w, text) && puts_(w, "(") && pr_expr(w, a, wa, depth + 1) && puts_(w, ")");
    case KILN_OPK_BINARY:
        break;
    case KILN_OPK_NONE:
    case KILN_OPK_LIST:
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "print", "cannot print a %s node in an expression",
                  kiln_op_name[op]);
        return false;
    }
    bool cmp = kiln_op_flags[op] & (KILN_OPF_CMP | KILN_OPF_LOGIC);
    bool force = is_const(ctx, a) && is_const(ctx, b);
    pair_wants(ctx, a, b, cmp ? KILN_DTYPE_VOID : want, &wa, &wb);
    if (kiln_op_prec[op] == 7) { /* min, max, pow */
        return puts_(w, text) && puts_(w, "(")
               && (force ? pr_const(w, a, wa, true) : pr_expr(w, a, wa, depth + 1))
               && puts_(w, ", ")
               && (force ? pr_const(w, b, wb, true) : pr_expr(w, b, wb, depth + 1))
               && puts_(w, ")");
    }
    int  p = prec(ctx, e), pa = prec(ctx, a), pb = prec(ctx, b);
    bool la = pa < p || (p == 3 && pa == 3), lb = pb <= p;
    if (force)
        return pr_const(w, a, wa, true) && infix(w, text) && pr_const(w, b, wb, true);
    return pr_paren(w, a, wa, la, depth + 1) && infix(w, text) && pr_paren(w, b, wb, lb, depth + 1);
}

enum kiln_status
kiln_ir_print_expr(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_opdef *op,
                   kiln_expr e, struct kiln_buf *out)
{
    struct pr w = {.ctx = ctx, .g = g, .out = out};
    if (!resolve_names(&w, op, KILN_MAX_DIMS, KILN_MAX_REDUCE)
        || !pr_expr(&w, e, KILN_DTYPE_VOID, 0))
        return kiln_ok(ctx) ? KILN_ERR_INTERNAL : ctx->err.status;
    return KILN_OK;
}

/* ---- statements ---- */

static bool
pr_def(struct pr *w, const struct kiln_opdef *op)
{
    kiln_ctx                 *ctx = w->ctx;
    const struct kiln_graph  *g = w->g;
    const struct kiln_tensor *t = &g->tensor[op->out];
    uint32_t                  nax = t->ndim, nred = op->nred;
    static const char *const  rtext[] = {"=", "+=", "max=", "min="};
    if (!resolve_names(w, op, nax, nred))
        return false;
    w->nappear = 0;
    memset(w->seen, 0, sizeof w->seen);
    if (!puts_(w, kiln_graph_tensor_name(g, op->out)) || !puts_(w, "["))
        return false;
    for (uint32_t k = 0; k < nax; k++)
        if ((k && !puts_(w, ", ")) || !puts_(w, w->axn[k]))
            return false;
    if (!kiln_buf_printf(ctx, w->out, "] %s ", rtext[op->reduce & 3])
        || !pr_expr(w, op->body, KILN_DTYPE_VOID, 0))
        return false;

    /* where: ranges inference misses, and the reduction order if appearance would change it */
    struct kiln_ir_range r[KILN_MAX_DIMS + KILN_MAX_REDUCE];
    bool                 need[KILN_MAX_DIMS + KILN_MAX_REDUCE];
    int64_t              ext[KILN_MAX_DIMS + KILN_MAX_REDUCE];
    kiln_ir_infer_ranges(g, op->body, nax, nred, r);
    for (uint32_t k = 0; k < nax + nred; k++) {
        ext[k] = k < nax ? t->shape[k] : op->rext[k - nax];
        need[k] = r[k].conflict || r[k].ext != ext[k];
    }
    uint32_t order[KILN_MAX_REDUCE], n = 0;
    for (uint32_t k = 0; k < nred; k++)
        if (need[nax + k])
            order[n++] = k;
    for (uint32_t i = 0; i < w->nappear && n < nred; i++)
        if (!need[nax + w->appear[i]])
            order[n++] = w->appear[i];
    bool renumbered = n != nred;
    for (uint32_t k = 0; k < n; k++)
        renumbered |= order[k] != k;
    for (uint32_t k = 0; k < nred && renumbered; k++)
        need[nax + k] = true;
    const char *sep = " where ";
    for (uint32_t k = 0; k < nax + nred; k++) {
        if (!need[k])
            continue;
        if (!kiln_buf_printf(ctx, w->out, "%s%s < %lld", sep, k < nax ? w->axn[k] : w->rn[k - nax],
                             (long long)ext[k]))
            return false;
        sep = ", ";
    }
    return puts_(w, "\n");
}

static bool
pr_string(struct pr *w, const char *s)
{
    if (!puts_(w, "\""))
        return false;
    for (const char *p = s ? s : ""; *p; p++) {
        char c[3] = {*p, 0, 0};
        if (*p == '"' || *p == '\\') {
            c[0] = '\\';
            c[1] = *p;
        }
        if (!puts_(w, c))
            return false;
    }
    return puts_(w, "\"");
}

static bool
pr_call(struct pr *w, const struct kiln_call *c)
{
    kiln_ctx *ctx = w->ctx;
    if (!kiln_buf_printf(ctx, w->out, "%s = %s(", kiln_graph_tensor_name(w->g, c->out),
                         kiln_sym_str(ctx, c->kind)))
        return false;
    for (uint32_t i = 0; i < c->nin; i++)
        if ((i && !puts_(w, ", ")) || !puts_(w, kiln_graph_tensor_name(w->g, c->in[i])))
            return false;
    for (uint32_t i = 0; i < c->nattr; i++) {
        const struct kiln_attr *a = &c->attr[i];
        char                    buf[40];
        if (!kiln_buf_printf(ctx, w->out, "%s%s=", i || c->nin ? ", " : "",
                             kiln_sym_str(ctx, a->name)))
            return false;
        bool ok = true;
        switch ((enum kiln_attr_kind)a->kind) {
        case KILN_ATTR_INT:
            ok = kiln_buf_printf(ctx, w->out, "%lld", (long long)a->i);
            break;
        case KILN_ATTR_FLOAT:
            ok = puts_(w, kiln_ir_fmt_float(a->f, buf));
            break;
        case KILN_ATTR_STRING:
            ok = pr_string(w, a->s);
            break;
        case KILN_ATTR_INTS:
            ok = puts_(w, "[");
            for (uint32_t k = 0; k < a->n && ok; k++)
                ok = kiln_buf_printf(ctx, w->out, "%s%lld", k ? ", " : "", (long long)a->ints[k]);
            ok = ok && puts_(w, "]");
            break;
        }
        if (!ok)
            return false;
    }
    return puts_(w, ")\n");
}

enum kiln_status
kiln_ir_print(kiln_ctx *ctx, const struct kiln_graph *g, unsigned flags, struct kiln_buf *out)
{
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct pr w = {.ctx = ctx, .g = g, .out = out};
    bool      ok = true;
    for (uint32_t i = 0; i < g->narg && ok; i++) {
        const struct kiln_tensor *t = &g->tensor[g->arg[i]];
        ok = kiln_buf_printf(
            ctx, out, "%s %s: %s[", t->kind == KILN_TENSOR_WEIGHT ? "weight" : "input",
            kiln_sym_str(ctx, t->name), kiln_dtype_name((enum kiln_dtype)t->dtype));
        for (uint32_t d = 0; d < t->ndim && ok; d++)
            ok = kiln_buf_printf(ctx, out, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        ok = ok && puts_(&w, "]\n");
    }
    if (ok && g->narg && (g->nop || g->ncall))
        ok = puts_(&w, "\n");
    if (flags & KILN_PRINT_EXPANDED) {
        for (uint32_t i = 0; i < g->nop && ok; i++)
            ok = pr_def(&w, &g->op[i]);
    } else {
        uint32_t compute = kiln_sym_cstr(ctx, "compute");
        for (uint32_t i = 0; i < g->ncall && ok; i++) {
            const struct kiln_call *c = &g->call[i];
            if (c->kind != compute) {
                ok = pr_call(&w, c);
            } else if (c->op_end != c->op_begin + 1 || c->op_begin >= g->nop) {
                KILN_FAIL(ctx, KILN_ERR_INTERNAL, "print",
                          "compute statement %u defines %u ops, not one", i,
                          c->op_end - c->op_begin);
                ok = false;
            } else {
                ok = pr_def(&w, &g->op[c->op_begin]);
            }
        }
    }
    if (ok && g->noutput && (g->nop || g->narg))
        ok = puts_(&w, "\n");
    for (uint32_t i = 0; i < g->noutput && ok; i++)
        ok = kiln_buf_printf(ctx, out, "output %s\n", kiln_graph_tensor_name(g, g->output[i]));
    if (!ok)
        return kiln_ok(ctx) ? KILN_ERR_INTERNAL : ctx->err.status;
    return KILN_OK;
}
