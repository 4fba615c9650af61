/* ir/parse.c -- the .kg parser (docs/kg.md): recursive descent over the tokens of ir/lex.c
 * into a small AST, then a sort of the statements by the names they use, then construction of
 * the kernel graph through the graph API, the op library and the expression builders.
 *
 * Phase 1 parses every statement into arena memory. Identifiers are interned as symbols, so a
 * symbol-indexed array maps names to statements and, later, to tensors. Phase 2 checks names in
 * source order (defined twice, undefined, outputs) and orders the statements that compute
 * tensors with kiln_ir_toposort (ir/parse_check.c), which keeps text that is already in
 * dependency order as it is: that makes print . parse a fixed point. Phase 3 adds all
 * declarations first (argument order), then builds each statement in sorted order.
 *
 * Literals have no dtype of their own: a subtree made only of literals takes the dtype of the
 * operand it meets (`x * 2` with x f64 makes 2 an f64 literal); alone it is i64 or f32. The
 * printer (ir/print.c) mirrors these rules exactly. Ranges of variables are inferred on the
 * built expression (kiln_ir_infer_ranges, shared with the printer), and every load outside a
 * select branch is checked statically by interval arithmetic. Operator errors are checked here
 * before the builders run, so messages name the operator as written ('//', not floordiv).
 * Recursion is bounded: expressions deeper than KILN_KG_MAX_DEPTH are refused. Every error
 * carries the line and column of the token it is about. */
#include "parse.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_STMTS ((uint32_t)1 << 20)
#define MAX_NODES ((uint32_t)1 << 21)
#define MAX_VARS  (KILN_MAX_DIMS + KILN_MAX_REDUCE)

enum ast_kind { A_INT, A_FLOAT, A_VAR, A_LOAD, A_UN, A_BIN, A_SELECT, A_CAST };

struct ast {
    uint8_t      kind;    /* enum ast_kind */
    uint8_t      op;      /* enum kiln_op of A_UN, A_BIN */
    uint8_t      dtype;   /* A_CAST: target */
    uint8_t      nkid;    /* operands, or indices of A_LOAD */
    bool         untyped; /* literals only: the dtype comes from the context */
    bool         swapped; /* `a > b` stored as b < a */
    uint16_t     depth;
    uint32_t     line, col;
    uint32_t     ref;  /* A_LOAD: tensor symbol; A_VAR: index in the variable table */
    int64_t      i;    /* A_INT */
    double       f;    /* A_FLOAT */
    const char  *text; /* operator or function as written */
    struct ast **kid;
};

enum stmt_kind { S_DECL, S_CALL, S_DEF, S_OUTPUT };

struct use {
    uint32_t sym, line, col;
};

struct var {
    uint32_t sym;
    uint32_t line, col; /* first occurrence */
    bool     spatial;
    uint32_t order;  /* spatial: axis; reduction: rank of first appearance (UINT32_MAX: none) */
    uint32_t worder; /* 1-based position in the where clause; 0 = not there */
    int64_t  where;  /* explicit extent; 0 = none */
    uint32_t index;  /* final: axis or reduction variable number */
};

struct def {
    struct var  var[MAX_VARS];
    uint32_t    nvar, nax, nred, nwhere;
    uint8_t     reduce; /* enum kiln_reduce */
    uint32_t    rline, rcol;
    const char *rtext; /* "=", "+=", "max=", "min=" */
    struct ast *body;
};

struct stmt {
    uint8_t           kind;  /* enum stmt_kind */
    uint8_t           tkind; /* S_DECL: enum kiln_tensor_kind */
    uint8_t           dtype;
    uint32_t          name, line, col;
    uint32_t          ndim;
    int64_t          *shape;             /* S_DECL */
    uint32_t          op, opline, opcol; /* S_CALL */
    struct kiln_attr *attr;
    uint32_t          nattr, capattr;
    struct use       *use; /* S_CALL: inputs; S_DEF: loads */
    uint32_t          nuse, capuse;
    struct def       *def;
};

struct loadloc {
    uint32_t id, line, col;
};

struct parser {
    kiln_ctx          *ctx;
    struct kiln_lexer  lx;
    const char        *file;
    struct stmt      **stmt;
    uint32_t           nstmt, capstmt;
    struct stmt       *cur; /* definition whose body is being parsed */
    uint32_t           depth, nnodes;
    struct kiln_graph *g;
    uint32_t          *defmap; /* symbol -> statement + 1 */
    uint32_t          *tmap;   /* symbol -> tensor + 1 */
    uint32_t           nmap;
    struct loadloc    *ll; /* where each load of the current definition was written */
    uint32_t           nll, capll;
};

#define TOK (&p->lx.tok)

static void
next(struct parser *p)
{
    kiln_ir_lex_next(&p->lx);
}

static enum kiln_status perr(struct parser *p, uint32_t line, uint32_t col, const char *fmt, ...)
    KILN_PRINTF(4, 5);

static enum kiln_status
perr(struct parser *p, uint32_t line, uint32_t col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_failv(p->ctx, KILN_ERR_INVALID, "parse", KILN_WHERE, fmt, ap);
    va_end(ap);
    kiln_error_set_loc(p->ctx, p->file, line, col);
    return p->ctx->err.status;
}

/* Errors raised by the graph API, the library or the builders get this location. */
static enum kiln_status
locate(struct parser *p, uint32_t line, uint32_t col)
{
    kiln_error_set_loc(p->ctx, p->file, line, col);
    return kiln_ok(p->ctx) ? KILN_OK : p->ctx->err.status;
}

static const char *
desc(struct parser *p, char *buf, size_t size)
{
    return kiln_ir_tok_desc(TOK, buf, size);
}

#define FOUND(p) desc(p, (char[64]){0}, 64)

static const char *
sym(struct parser *p, uint32_t s)
{
    return kiln_sym_str(p->ctx, s);
}

static bool
is_keyword(const struct kiln_token *t)
{
    return kiln_ir_tok_is(t, "input") || kiln_ir_tok_is(t, "weight") || kiln_ir_tok_is(t, "output")
           || kiln_ir_tok_is(t, "where");
}

static bool
is_var_name(const struct kiln_token *t)
{
    return t->kind == KILN_TOK_IDENT && !is_keyword(t) && !kiln_ir_tok_is(t, "inf")
           && !kiln_ir_tok_is(t, "nan");
}

static uint32_t
intern_tok(struct parser *p, const struct kiln_token *t)
{
    return kiln_sym(p->ctx, t->s, t->len);
}

/* ---- expressions: syntax ---- */

static struct ast *
node(struct parser *p, enum ast_kind kind, const struct kiln_token *at, uint32_t nkid,
     struct ast **kid)
{
    if (!kiln_ok(p->ctx))
        return NULL;
    if (++p->nnodes > MAX_NODES) {
        perr(p, at->line, at->col, "file is too large: more than %u expression nodes", MAX_NODES);
        return NULL;
    }
    struct ast *e = kiln_arena_alloc(p->ctx, sizeof *e);
    if (!e)
        return NULL;
    e->kind = (uint8_t)kind;
    e->line = at->line;
    e->col = at->col;
    e->nkid = (uint8_t)nkid;
    e->untyped = kind == A_INT || kind == A_FLOAT;
    uint32_t depth = 0;
    if (nkid) {
        e->kid = kiln_arena_alloc(p->ctx, sizeof(struct ast *) * nkid);
        if (!e->kid)
            return NULL;
        for (uint32_t i = 0; i < nkid; i++) {
            e->kid[i] = kid[i];
            if (kid[i]->depth > depth)
                depth = kid[i]->depth;
        }
    }
    if (depth + 1 > KILN_KG_MAX_DEPTH) {
        perr(p, at->line, at->col, "expression nested too deeply: more than %d levels",
             KILN_KG_MAX_DEPTH);
        return NULL;
    }
    e->depth = (uint16_t)(depth + 1);
    return e;
}

/* An operator node; untyped when every operand is (arithmetic and the functions that keep
 * their operand's dtype only). */
static struct ast *
op_node(struct parser *p, enum ast_kind kind, enum kiln_op op, const struct kiln_token *at,
        const char *text, uint32_t nkid, struct ast **kid)
{
    struct ast *e = node(p, kind, at, nkid, kid);
    if (!e)
        return NULL;
    e->op = (uint8_t)op;
    e->text = text;
    bool keeps = kind == A_UN
                     ? op != KILN_OP_NOT
                     : kind == A_BIN && !(kiln_op_flags[op] & (KILN_OPF_CMP | KILN_OPF_LOGIC));
    e->untyped = keeps;
    for (uint32_t i = 0; i < nkid && keeps; i++)
        e->untyped = e->untyped && kid[i]->untyped;
    return e;
}

static struct ast *parse_expr(struct parser *p);

static struct var *
find_var(struct def *d, uint32_t s)
{
    for (uint32_t i = 0; i < d->nvar; i++)
        if (d->var[i].sym == s)
            return &d->var[i];
    return NULL;
}

static struct var *
new_reduction(struct parser *p, uint32_t s, const struct kiln_token *at)
{
    struct def *d = p->cur->def;
    if (d->nred == KILN_MAX_REDUCE) {
        perr(p, at->line, at->col, "%s has more than %d reduction variables", sym(p, p->cur->name),
             KILN_MAX_REDUCE);
        return NULL;
    }
    struct var *v = &d->var[d->nvar++];
    *v = (struct var){.sym = s, .line = at->line, .col = at->col, .order = UINT32_MAX};
    d->nred++;
    return v;
}

static uint32_t
reduction_rank(const struct def *d)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->nvar; i++)
        n += !d->var[i].spatial && d->var[i].order != UINT32_MAX;
    return n;
}

static struct ast *
parse_var(struct parser *p)
{
    struct kiln_token t = *TOK;
    uint32_t          s = intern_tok(p, &t);
    if (!s)
        return NULL;
    struct def *d = p->cur->def;
    struct var *v = find_var(d, s);
    if (!v && !(v = new_reduction(p, s, &t)))
        return NULL;
    if (!v->spatial && v->order == UINT32_MAX)
        v->order = reduction_rank(d);
    struct ast *e = node(p, A_VAR, &t, 0, NULL);
    if (!e)
        return NULL;
    e->ref = (uint32_t)(v - d->var);
    next(p);
    return e;
}

static struct ast *
parse_load(struct parser *p)
{
    struct kiln_token t = *TOK;
    uint32_t          s = intern_tok(p, &t);
    struct stmt      *st = p->cur;
    if (!s
        || !KILN_VEC_PUSH(p->ctx, st->use, st->nuse, st->capuse, ((struct use){s, t.line, t.col})))
        return NULL;
    next(p); /* name */
    next(p); /* [ */
    struct ast *idx[KILN_MAX_DIMS];
    uint32_t    n = 0;
    if (TOK->kind == KILN_TOK_RBRACK) {
        next(p);
    } else {
        for (;;) {
            if (n == KILN_MAX_DIMS) {
                perr(p, TOK->line, TOK->col, "too many indices for %.*s: at most %d", (int)t.len,
                     t.s, KILN_MAX_DIMS);
                return NULL;
            }
            if (!(idx[n++] = parse_expr(p)))
                return NULL;
            if (TOK->kind == KILN_TOK_COMMA) {
                next(p);
                continue;
            }
            if (TOK->kind == KILN_TOK_RBRACK) {
                next(p);
                break;
            }
            perr(p, TOK->line, TOK->col, "expected ',' or ']' in the indices of %.*s, found %s",
                 (int)t.len, t.s, FOUND(p));
            return NULL;
        }
    }
    struct ast *e = node(p, A_LOAD, &t, n, idx);
    if (e)
        e->ref = s;
    return e;
}

/* The operator a function call names: the operators ops.def spells as calls (min, max, pow,
 * select, abs, the float functions), or -1. */
static int
func_op(const struct kiln_token *t)
{
    for (int op = 0; op < KILN_OP_COUNT; op++)
        if (kiln_op_prec[op] == 7 && kiln_op_text[op] && kiln_ir_tok_is(t, kiln_op_text[op]))
            return op;
    return -1;
}

/* dtype named by an identifier token, or KILN_DTYPE_COUNT */
static enum kiln_dtype
tok_dtype(const struct kiln_token *t)
{
    char buf[16];
    if (t->kind != KILN_TOK_IDENT || t->len >= sizeof buf)
        return KILN_DTYPE_COUNT;
    memcpy(buf, t->s, t->len);
    buf[t->len] = 0;
    return kiln_dtype_parse(buf);
}

static struct ast *
parse_call(struct parser *p)
{
    struct kiln_token t = *TOK;
    enum kiln_dtype   cast = tok_dtype(&t);
    int               f = cast == KILN_DTYPE_COUNT ? func_op(&t) : -1;
    if (f < 0 && cast == KILN_DTYPE_COUNT) {
        char buf[64];
        perr(p, t.line, t.col, "unknown function %s", kiln_ir_tok_desc(&t, buf, sizeof buf));
        return NULL;
    }
    uint32_t    want = f < 0 ? 1 : kiln_op_arity[f];
    const char *name = f < 0 ? kiln_dtype_name(cast) : kiln_op_text[f];
    next(p); /* name */
    next(p); /* ( */
    struct ast *arg[3];
    uint32_t    n = 0;
    if (TOK->kind != KILN_TOK_RPAREN) {
        for (;;) {
            if (n == want) {
                perr(p, TOK->line, TOK->col, "too many arguments to %s: it takes %u", name, want);
                return NULL;
            }
            if (!(arg[n++] = parse_expr(p)))
                return NULL;
            if (TOK->kind == KILN_TOK_COMMA) {
                next(p);
                continue;
            }
            if (TOK->kind == KILN_TOK_RPAREN)
                break;
            perr(p, TOK->line, TOK->col, "expected ',' or ')' in the arguments of %s, found %s",
                 name, FOUND(p));
            return NULL;
        }
    }
    if (n != want) {
        perr(p, TOK->line, TOK->col, "%s takes %u argument%s, got %u", name, want,
             want == 1 ? "" : "s", n);
        return NULL;
    }
    next(p); /* ) */
    if (f < 0) {
        struct ast *e = node(p, A_CAST, &t, 1, arg);
        if (e) {
            e->dtype = (uint8_t)cast;
            e->text = name;
        }
        return e;
    }
    enum ast_kind kind = f == KILN_OP_SELECT ? A_SELECT : kiln_op_arity[f] == 1 ? A_UN : A_BIN;
    return op_node(p, kind, (enum kiln_op)f, &t, name, n, arg);
}

/* A literal; neg applies a preceding minus (so -9223372036854775808 is representable). */
static struct ast *
literal(struct parser *p, bool neg, const struct kiln_token *at)
{
    struct kiln_token t = *TOK;
    struct ast       *e;
    if (t.kind == KILN_TOK_INT) {
        if (!neg && t.mag > (uint64_t)INT64_MAX) {
            perr(p, t.line, t.col, "integer %.*s is too large", (int)t.len, t.s);
            return NULL;
        }
        if (!(e = node(p, A_INT, at, 0, NULL)))
            return NULL;
        e->i = neg ? (int64_t)(0 - t.mag) : (int64_t)t.mag;
    } else {
        if (!(e = node(p, A_FLOAT, at, 0, NULL)))
            return NULL;
        e->f = t.kind == KILN_TOK_FLOAT ? t.f : kiln_ir_tok_is(&t, "inf") ? INFINITY : NAN;
        if (neg)
            e->f = -e->f;
    }
    next(p);
    return e;
}

static bool
at_literal(struct parser *p)
{
    if (TOK->kind == KILN_TOK_INT || TOK->kind == KILN_TOK_FLOAT)
        return true;
    if (!kiln_ir_tok_is(TOK, "inf") && !kiln_ir_tok_is(TOK, "nan"))
        return false;
    enum kiln_tok k = kiln_ir_lex_peek(&p->lx)->kind;
    return k != KILN_TOK_LBRACK && k != KILN_TOK_LPAREN;
}

static struct ast *
parse_primary(struct parser *p)
{
    if (at_literal(p))
        return literal(p, false, TOK);
    if (TOK->kind == KILN_TOK_IDENT && !is_keyword(TOK)) {
        enum kiln_tok k = kiln_ir_lex_peek(&p->lx)->kind;
        if (k == KILN_TOK_LPAREN)
            return parse_call(p);
        if (k == KILN_TOK_LBRACK)
            return parse_load(p);
        return parse_var(p);
    }
    if (TOK->kind == KILN_TOK_LPAREN) {
        struct kiln_token open = *TOK;
        next(p);
        struct ast *e = parse_expr(p);
        if (!e)
            return NULL;
        if (TOK->kind != KILN_TOK_RPAREN) {
            perr(p, TOK->line, TOK->col, "expected ')' to close the '(' at %u:%u, found %s",
                 open.line, open.col, FOUND(p));
            return NULL;
        }
        next(p);
        return e;
    }
    perr(p, TOK->line, TOK->col, "expected an expression, found %s", FOUND(p));
    return NULL;
}

static struct ast *
parse_unary(struct parser *p)
{
    if (TOK->kind != KILN_TOK_MINUS && TOK->kind != KILN_TOK_NOT)
        return parse_primary(p);
    if (++p->depth > KILN_KG_MAX_DEPTH) {
        perr(p, TOK->line, TOK->col, "expression nested too deeply: more than %d levels",
             KILN_KG_MAX_DEPTH);
        return NULL;
    }
    struct kiln_token t = *TOK;
    next(p);
    struct ast *e;
    if (t.kind == KILN_TOK_MINUS && at_literal(p)) {
        e = literal(p, true, &t);
    } else {
        struct ast *a = parse_unary(p);
        e = a ? op_node(p, A_UN, t.kind == KILN_TOK_MINUS ? KILN_OP_NEG : KILN_OP_NOT, &t,
                        t.kind == KILN_TOK_MINUS ? "-" : "!", 1, &a)
              : NULL;
    }
    p->depth--;
    return e;
}

/* Binary operator precedence levels, lowest first; 0 = not a binary operator. */
static int
binary_level(enum kiln_tok k, enum kiln_op *op, const char **text)
{
    static const struct {
        enum kiln_tok tok;
        int           level;
        enum kiln_op  op;
        const char   *text;
    } tab[] = {
        {KILN_TOK_OR, 1, KILN_OP_OR, "||"},
        {KILN_TOK_AND, 2, KILN_OP_AND, "&&"},
        {KILN_TOK_LT, 3, KILN_OP_LT, "<"},
        {KILN_TOK_LE, 3, KILN_OP_LE, "<="},
        {KILN_TOK_GT, 3, KILN_OP_LT, ">"},
        {KILN_TOK_GE, 3, KILN_OP_LE, ">="},
        {KILN_TOK_EQ, 3, KILN_OP_EQ, "=="},
        {KILN_TOK_NE, 3, KILN_OP_NE, "!="},
        {KILN_TOK_PLUS, 4, KILN_OP_ADD, "+"},
        {KILN_TOK_MINUS, 4, KILN_OP_SUB, "-"},
        {KILN_TOK_STAR, 5, KILN_OP_MUL, "*"},
        {KILN_TOK_SLASH, 5, KILN_OP_DIV, "/"},
        {KILN_TOK_SLASHSLASH, 5, KILN_OP_FLOORDIV, "//"},
        {KILN_TOK_PERCENT, 5, KILN_OP_FLOORMOD, "%"},
    };
    for (size_t i = 0; i < KILN_COUNTOF(tab); i++) {
        if (tab[i].tok == k) {
            *op = tab[i].op;
            *text = tab[i].text;
            return tab[i].level;
        }
    }
    return 0;
}

/* Precedence climbing: operators of level >= min, left-associative; comparisons don't chain. */
static struct ast *
parse_binary(struct parser *p, int min)
{
    struct ast *lhs = parse_unary(p);
    for (;;) {
        enum kiln_op op;
        const char  *text;
        int          level = lhs ? binary_level(TOK->kind, &op, &text) : 0;
        if (level < min || level == 0)
            return lhs;
        struct kiln_token t = *TOK;
        next(p);
        struct ast *rhs = parse_binary(p, level + 1);
        if (!rhs)
            return NULL;
        bool        swap = t.kind == KILN_TOK_GT || t.kind == KILN_TOK_GE;
        struct ast *kid[2] = {swap ? rhs : lhs, swap ? lhs : rhs};
        if (!(lhs = op_node(p, A_BIN, op, &t, text, 2, kid)))
            return NULL;
        lhs->swapped = swap;
        if (level == 3 && binary_level(TOK->kind, &op, &text) == 3) {
            perr(p, TOK->line, TOK->col,
                 "comparisons do not chain: put parentheses around one of them");
            return NULL;
        }
    }
}

static struct ast *
parse_expr(struct parser *p)
{
    if (++p->depth > KILN_KG_MAX_DEPTH) {
        perr(p, TOK->line, TOK->col, "expression nested too deeply: more than %d levels",
             KILN_KG_MAX_DEPTH);
        return NULL;
    }
    struct ast *e = parse_binary(p, 1);
    p->depth--;
    return kiln_ok(p->ctx) ? e : NULL;
}

/* ---- statements: syntax ---- */

static struct stmt *
new_stmt(struct parser *p, enum stmt_kind kind, const struct kiln_token *name)
{
    if (p->nstmt == MAX_STMTS) {
        perr(p, name->line, name->col, "too many statements: at most %u", MAX_STMTS);
        return NULL;
    }
    struct stmt *s = kiln_arena_alloc(p->ctx, sizeof *s);
    if (!s || !KILN_VEC_PUSH(p->ctx, p->stmt, p->nstmt, p->capstmt, s))
        return NULL;
    s->kind = (uint8_t)kind;
    s->line = name->line;
    s->col = name->col;
    s->name = intern_tok(p, name);
    return kiln_ok(p->ctx) ? s : NULL;
}

/* The tensor name after `input`, `weight` or `output`. */
static bool
expect_name(struct parser *p, const char *after)
{
    if (TOK->kind == KILN_TOK_IDENT && !is_keyword(TOK))
        return true;
    perr(p, TOK->line, TOK->col, "expected a tensor name after '%s', found %s", after, FOUND(p));
    return false;
}

static enum kiln_status
parse_decl(struct parser *p)
{
    enum kiln_tensor_kind kind =
        kiln_ir_tok_is(TOK, "input") ? KILN_TENSOR_INPUT : KILN_TENSOR_WEIGHT;
    const char *kw = kind == KILN_TENSOR_INPUT ? "input" : "weight";
    next(p);
    if (!expect_name(p, kw))
        return p->ctx->err.status;
    struct stmt *s = new_stmt(p, S_DECL, TOK);
    if (!s)
        return p->ctx->err.status;
    s->tkind = (uint8_t)kind;
    const char *name = sym(p, s->name);
    next(p);
    if (TOK->kind != KILN_TOK_COLON)
        return perr(p, TOK->line, TOK->col, "expected ':' after the name %s, found %s", name,
                    FOUND(p));
    next(p);
    if (TOK->kind != KILN_TOK_IDENT)
        return perr(p, TOK->line, TOK->col, "expected a dtype for %s, found %s", name, FOUND(p));
    enum kiln_dtype dt = tok_dtype(TOK);
    if (dt == KILN_DTYPE_COUNT)
        return perr(p, TOK->line, TOK->col, "unknown dtype %s", FOUND(p));
    s->dtype = (uint8_t)dt;
    next(p);
    if (TOK->kind != KILN_TOK_LBRACK)
        return perr(p, TOK->line, TOK->col, "expected '[' after the dtype of %s, found %s", name,
                    FOUND(p));
    next(p);
    if (!(s->shape = kiln_arena_alloc(p->ctx, sizeof(int64_t) * KILN_MAX_DIMS)))
        return p->ctx->err.status;
    if (TOK->kind == KILN_TOK_RBRACK) {
        next(p);
        return KILN_OK;
    }
    for (;;) {
        struct kiln_token at = *TOK;
        bool              neg = TOK->kind == KILN_TOK_MINUS;
        if (neg)
            next(p);
        if (TOK->kind != KILN_TOK_INT)
            return perr(p, TOK->line, TOK->col, "expected an extent in the shape of %s, found %s",
                        name, FOUND(p));
        if (s->ndim == KILN_MAX_DIMS)
            return perr(p, at.line, at.col, "%s has more than %d dimensions", name, KILN_MAX_DIMS);
        if (neg || TOK->mag == 0)
            return perr(p, at.line, at.col,
                        "dimension %u of %s has extent %s%.*s; extents must be positive", s->ndim,
                        name, neg ? "-" : "", (int)TOK->len, TOK->s);
        if (TOK->mag > (uint64_t)INT64_MAX)
            return perr(p, TOK->line, TOK->col, "integer %.*s is too large", (int)TOK->len, TOK->s);
        s->shape[s->ndim++] = (int64_t)TOK->mag;
        next(p);
        if (TOK->kind == KILN_TOK_COMMA) {
            next(p);
            continue;
        }
        if (TOK->kind == KILN_TOK_RBRACK) {
            next(p);
            return KILN_OK;
        }
        return perr(p, TOK->line, TOK->col, "expected ',' or ']' in the shape of %s, found %s",
                    name, FOUND(p));
    }
}

/* value of an attribute: integer, float, string or list of integers */
static enum kiln_status
parse_attr_value(struct parser *p, struct kiln_attr *a)
{
    const char *name = sym(p, a->name);
    bool        neg = TOK->kind == KILN_TOK_MINUS;
    if (neg)
        next(p);
    if (TOK->kind == KILN_TOK_INT) {
        if (!neg && TOK->mag > (uint64_t)INT64_MAX)
            return perr(p, TOK->line, TOK->col, "integer %.*s is too large", (int)TOK->len, TOK->s);
        a->kind = KILN_ATTR_INT;
        a->i = neg ? (int64_t)(0 - TOK->mag) : (int64_t)TOK->mag;
    } else if (TOK->kind == KILN_TOK_FLOAT || kiln_ir_tok_is(TOK, "inf")
               || kiln_ir_tok_is(TOK, "nan")) {
        a->kind = KILN_ATTR_FLOAT;
        a->f = TOK->kind == KILN_TOK_FLOAT ? TOK->f : kiln_ir_tok_is(TOK, "inf") ? INFINITY : NAN;
        if (neg)
            a->f = -a->f;
    } else if (!neg && TOK->kind == KILN_TOK_STRING) {
        a->kind = KILN_ATTR_STRING;
        a->s = TOK->str;
    } else if (!neg && TOK->kind == KILN_TOK_LBRACK) {
        int64_t *v = NULL;
        uint32_t n = 0, cap = 0;
        next(p);
        while (TOK->kind != KILN_TOK_RBRACK) {
            bool m = TOK->kind == KILN_TOK_MINUS;
            if (m)
                next(p);
            if (TOK->kind != KILN_TOK_INT || (!m && TOK->mag > (uint64_t)INT64_MAX))
                return perr(p, TOK->line, TOK->col,
                            "list attribute %s must hold integers, found %s", name, FOUND(p));
            int64_t x = m ? (int64_t)(0 - TOK->mag) : (int64_t)TOK->mag;
            if (!KILN_VEC_PUSH(p->ctx, v, n, cap, x))
                return p->ctx->err.status;
            next(p);
            if (TOK->kind == KILN_TOK_COMMA) {
                next(p);
                continue;
            }
            if (TOK->kind != KILN_TOK_RBRACK)
                return perr(p, TOK->line, TOK->col, "expected ',' or ']' in the list %s, found %s",
                            name, FOUND(p));
        }
        a->kind = KILN_ATTR_INTS;
        a->n = n;
        a->ints = v;
    } else {
        return perr(p, TOK->line, TOK->col, "bad value for attribute %s: found %s", name, FOUND(p));
    }
    next(p);
    return KILN_OK;
}

/* NAME = OP(args...), after NAME */
static enum kiln_status
parse_libcall(struct parser *p, struct stmt *s)
{
    const char *name = sym(p, s->name);
    s->kind = S_CALL;
    next(p); /* = */
    /* the keyword `where` also names a library op: where(cond, a, b) */
    bool where_op =
        kiln_ir_tok_is(TOK, "where") && kiln_ir_lex_peek(&p->lx)->kind == KILN_TOK_LPAREN;
    if (TOK->kind != KILN_TOK_IDENT || (is_keyword(TOK) && !where_op))
        return perr(p, TOK->line, TOK->col, "expected an op name after '%s =', found %s", name,
                    FOUND(p));
    struct kiln_token optok = *TOK;
    s->op = intern_tok(p, &optok);
    s->opline = optok.line;
    s->opcol = optok.col;
    const char *op = sym(p, s->op);
    next(p);
    if (TOK->kind != KILN_TOK_LPAREN)
        return perr(p, TOK->line, TOK->col, "expected '(' after %s, found %s", op, FOUND(p));
    if (!kiln_lib_exists(op))
        return perr(p, optok.line, optok.col, "unknown op '%s'", op);
    next(p);
    if (TOK->kind == KILN_TOK_RPAREN) {
        next(p);
        return KILN_OK;
    }
    for (;;) {
        if (TOK->kind == KILN_TOK_IDENT && kiln_ir_lex_peek(&p->lx)->kind == KILN_TOK_ASSIGN) {
            struct kiln_attr a = {.name = intern_tok(p, TOK), .line = TOK->line, .col = TOK->col};
            for (uint32_t i = 0; i < s->nattr; i++)
                if (s->attr[i].name == a.name)
                    return perr(p, a.line, a.col, "attribute %s is given twice", sym(p, a.name));
            next(p);
            next(p);
            KILN_TRY(parse_attr_value(p, &a));
            if (!KILN_VEC_PUSH(p->ctx, s->attr, s->nattr, s->capattr, a))
                return p->ctx->err.status;
        } else if (TOK->kind == KILN_TOK_IDENT && !is_keyword(TOK)) {
            if (s->nattr)
                return perr(p, TOK->line, TOK->col, "positional argument %s after attributes",
                            FOUND(p));
            struct use u = {intern_tok(p, TOK), TOK->line, TOK->col};
            if (!u.sym || !KILN_VEC_PUSH(p->ctx, s->use, s->nuse, s->capuse, u))
                return p->ctx->err.status;
            next(p);
        } else {
            return perr(p, TOK->line, TOK->col,
                        "expected a tensor name or NAME=VALUE in the call of %s, found %s", op,
                        FOUND(p));
        }
        if (TOK->kind == KILN_TOK_COMMA) {
            next(p);
            continue;
        }
        if (TOK->kind == KILN_TOK_RPAREN) {
            next(p);
            return KILN_OK;
        }
        return perr(p, TOK->line, TOK->col, "expected ',' or ')' in the call of %s, found %s", op,
                    FOUND(p));
    }
}

static enum kiln_status
parse_where(struct parser *p, struct stmt *s)
{
    struct def *d = s->def;
    next(p); /* where */
    for (;;) {
        if (!is_var_name(TOK))
            return perr(p, TOK->line, TOK->col, "expected a variable name after 'where', found %s",
                        FOUND(p));
        struct kiln_token vt = *TOK;
        uint32_t          vs = intern_tok(p, &vt);
        next(p);
        if (TOK->kind != KILN_TOK_LT)
            return perr(p, TOK->line, TOK->col,
                        "expected '<' after %.*s in the where clause, found %s", (int)vt.len, vt.s,
                        FOUND(p));
        next(p);
        bool              neg = TOK->kind == KILN_TOK_MINUS;
        struct kiln_token at = *TOK;
        if (neg)
            next(p);
        if (TOK->kind != KILN_TOK_INT)
            return perr(p, TOK->line, TOK->col, "expected an integer range for %.*s, found %s",
                        (int)vt.len, vt.s, FOUND(p));
        if (neg || TOK->mag == 0)
            return perr(p, at.line, at.col, "range of %.*s must be positive, not %s%.*s",
                        (int)vt.len, vt.s, neg ? "-" : "", (int)TOK->len, TOK->s);
        if (TOK->mag > (uint64_t)INT64_MAX)
            return perr(p, TOK->line, TOK->col, "integer %.*s is too large", (int)TOK->len, TOK->s);
        struct var *v = find_var(d, vs);
        if (!v && !(v = new_reduction(p, vs, &vt)))
            return p->ctx->err.status;
        if (v->where)
            return perr(p, vt.line, vt.col, "variable %.*s has two ranges in the where clause",
                        (int)vt.len, vt.s);
        v->where = (int64_t)TOK->mag;
        v->worder = ++d->nwhere;
        next(p);
        if (TOK->kind != KILN_TOK_COMMA)
            return KILN_OK;
        next(p);
    }
}

/* Numbers the reduction variables: those of the where clause first, in its order, then the
 * others in order of first appearance; checks the reduction operator against them. */
static enum kiln_status
finish_def(struct parser *p, struct stmt *s)
{
    struct def *d = s->def;
    uint32_t    k = 0;
    for (uint32_t w = 1; w <= d->nwhere; w++)
        for (uint32_t i = 0; i < d->nvar; i++)
            if (!d->var[i].spatial && d->var[i].worder == w)
                d->var[i].index = k++;
    for (uint32_t r = 0; r < d->nred; r++)
        for (uint32_t i = 0; i < d->nvar; i++)
            if (!d->var[i].spatial && !d->var[i].worder && d->var[i].order == r)
                d->var[i].index = k++;
    if (d->reduce == KILN_REDUCE_NONE && d->nred) {
        const struct var *v = NULL;
        for (uint32_t i = 0; i < d->nvar && !v; i++)
            if (!d->var[i].spatial)
                v = &d->var[i];
        return perr(p, v->line, v->col,
                    "variable %s is not on the left side, so %s needs '+=', 'max=' or 'min='",
                    sym(p, v->sym), sym(p, s->name));
    }
    if (d->reduce != KILN_REDUCE_NONE && !d->nred)
        return perr(p, d->rline, d->rcol,
                    "'%s' needs a reduction variable, but every variable of %s is on the left side",
                    d->rtext, sym(p, s->name));
    return KILN_OK;
}

/* NAME[V, ...] op EXPR [where ...], after NAME */
static enum kiln_status
parse_def(struct parser *p, struct stmt *s)
{
    const char *name = sym(p, s->name);
    s->kind = S_DEF;
    if (!(s->def = kiln_arena_alloc(p->ctx, sizeof *s->def)))
        return p->ctx->err.status;
    struct def *d = s->def;
    next(p); /* [ */
    while (TOK->kind != KILN_TOK_RBRACK) {
        if (!is_var_name(TOK))
            return perr(p, TOK->line, TOK->col,
                        "expected a variable name on the left of %s, found %s", name, FOUND(p));
        uint32_t vs = intern_tok(p, TOK);
        if (find_var(d, vs))
            return perr(p, TOK->line, TOK->col, "variable %s appears twice on the left of %s",
                        sym(p, vs), name);
        if (d->nax == KILN_MAX_DIMS)
            return perr(p, TOK->line, TOK->col, "%s has more than %d dimensions", name,
                        KILN_MAX_DIMS);
        d->var[d->nvar++] = (struct var){.sym = vs,
                                         .line = TOK->line,
                                         .col = TOK->col,
                                         .spatial = true,
                                         .order = d->nax,
                                         .index = d->nax};
        d->nax++;
        next(p);
        if (TOK->kind == KILN_TOK_COMMA) {
            next(p);
            continue;
        }
        if (TOK->kind != KILN_TOK_RBRACK)
            return perr(p, TOK->line, TOK->col,
                        "expected ',' or ']' after the variables of %s, found %s", name, FOUND(p));
    }
    next(p); /* ] */
    d->rline = TOK->line;
    d->rcol = TOK->col;
    if (TOK->kind == KILN_TOK_ASSIGN) {
        d->reduce = KILN_REDUCE_NONE;
        d->rtext = "=";
        next(p);
    } else if (TOK->kind == KILN_TOK_PLUSEQ) {
        d->reduce = KILN_REDUCE_SUM;
        d->rtext = "+=";
        next(p);
    } else if ((kiln_ir_tok_is(TOK, "max") || kiln_ir_tok_is(TOK, "min"))
               && kiln_ir_lex_peek(&p->lx)->kind == KILN_TOK_ASSIGN) {
        bool max = kiln_ir_tok_is(TOK, "max");
        d->reduce = max ? KILN_REDUCE_MAX : KILN_REDUCE_MIN;
        d->rtext = max ? "max=" : "min=";
        next(p);
        next(p);
    } else {
        return perr(p, TOK->line, TOK->col,
                    "expected '=', '+=', 'max=' or 'min=' after %s[...], found %s", name, FOUND(p));
    }
    p->cur = s; /* for the variables of the body and of the where clause */
    d->body = parse_expr(p);
    if (!d->body)
        return p->ctx->err.status;
    if (kiln_ir_tok_is(TOK, "where"))
        KILN_TRY(parse_where(p, s));
    p->cur = NULL;
    return finish_def(p, s);
}

static enum kiln_status
parse_statement(struct parser *p)
{
    if (TOK->kind != KILN_TOK_IDENT)
        return perr(p, TOK->line, TOK->col, "expected a statement, found %s", FOUND(p));
    if (kiln_ir_tok_is(TOK, "input") || kiln_ir_tok_is(TOK, "weight"))
        return parse_decl(p);
    if (kiln_ir_tok_is(TOK, "output")) {
        next(p);
        if (!expect_name(p, "output"))
            return p->ctx->err.status;
        if (!new_stmt(p, S_OUTPUT, TOK))
            return p->ctx->err.status;
        next(p);
        return KILN_OK;
    }
    if (kiln_ir_tok_is(TOK, "where"))
        return perr(p, TOK->line, TOK->col, "'where' must follow a compute definition");
    struct kiln_token name = *TOK;
    struct stmt      *s = new_stmt(p, S_DEF, &name);
    if (!s)
        return p->ctx->err.status;
    next(p);
    if (TOK->kind == KILN_TOK_LBRACK)
        return parse_def(p, s);
    if (TOK->kind == KILN_TOK_ASSIGN)
        return parse_libcall(p, s);
    return perr(p, TOK->line, TOK->col, "expected '=' or '[' after %.*s, found %s", (int)name.len,
                name.s, FOUND(p));
}

static enum kiln_status
parse_all(struct parser *p)
{
    for (;;) {
        while (TOK->kind == KILN_TOK_NL)
            next(p);
        if (TOK->kind == KILN_TOK_EOF || TOK->kind == KILN_TOK_ERR)
            break;
        KILN_TRY(parse_statement(p));
        if (kiln_ir_tok_is(TOK, "where"))
            return perr(p, TOK->line, TOK->col, "'where' must follow a compute definition");
        if (TOK->kind != KILN_TOK_NL && TOK->kind != KILN_TOK_EOF && TOK->kind != KILN_TOK_ERR)
            return perr(p, TOK->line, TOK->col, "expected end of line, found %s", FOUND(p));
    }
    if (!kiln_ok(p->ctx))
        return p->ctx->err.status;
    bool computes = false;
    for (uint32_t i = 0; i < p->nstmt; i++)
        computes |= p->stmt[i]->kind == S_CALL || p->stmt[i]->kind == S_DEF;
    if (!p->nstmt)
        return perr(p, TOK->line, TOK->col, "empty graph: no statements");
    if (!computes)
        return perr(p, TOK->line, TOK->col,
                    "graph computes nothing: no library call or compute definition");
    return KILN_OK;
}

/* ---- names and order ---- */

static enum kiln_status
check_names(struct parser *p)
{
    p->nmap = p->ctx->nsym + 1;
    p->defmap = kiln_arena_alloc(p->ctx, sizeof(uint32_t) * p->nmap);
    p->tmap = kiln_arena_alloc(p->ctx, sizeof(uint32_t) * p->nmap);
    uint32_t *outmap = kiln_arena_alloc(p->ctx, sizeof(uint32_t) * p->nmap);
    if (!p->defmap || !p->tmap || !outmap)
        return p->ctx->err.status;
    for (uint32_t i = 0; i < p->nstmt; i++) {
        struct stmt *s = p->stmt[i];
        if (s->kind == S_OUTPUT)
            continue;
        if (p->defmap[s->name]) {
            const struct stmt *first = p->stmt[p->defmap[s->name] - 1];
            return perr(p, s->line, s->col, "tensor %s is defined twice (first at %u:%u)",
                        sym(p, s->name), first->line, first->col);
        }
        p->defmap[s->name] = i + 1;
    }
    for (uint32_t i = 0; i < p->nstmt; i++) {
        struct stmt *s = p->stmt[i];
        for (uint32_t u = 0; u < s->nuse; u++)
            if (!p->defmap[s->use[u].sym])
                return perr(p, s->use[u].line, s->use[u].col, "undefined tensor %s",
                            sym(p, s->use[u].sym));
        if (s->kind != S_OUTPUT)
            continue;
        uint32_t d = p->defmap[s->name];
        if (!d)
            return perr(p, s->line, s->col, "undefined tensor %s", sym(p, s->name));
        const struct stmt *ds = p->stmt[d - 1];
        if (ds->kind == S_DECL)
            return perr(p, s->line, s->col, "cannot output %s: it is %s, not computed",
                        sym(p, s->name), ds->tkind == KILN_TENSOR_INPUT ? "an input" : "a weight");
        if (outmap[s->name]) {
            const struct stmt *first = p->stmt[outmap[s->name] - 1];
            return perr(p, s->line, s->col, "%s is already an output (at %u:%u)", sym(p, s->name),
                        first->line, first->col);
        }
        outmap[s->name] = i + 1;
    }
    return KILN_OK;
}

/* Orders the computing statements by their dependencies (kiln_ir_toposort keeps the written
 * order where it can); reports a cycle at its first statement. */
static enum kiln_status
sort_statements(struct parser *p, uint32_t **order, uint32_t *norder)
{
    kiln_ctx *ctx = p->ctx;
    uint32_t  n = 0, nedge = 0;
    for (uint32_t i = 0; i < p->nstmt; i++) {
        if (p->stmt[i]->kind == S_CALL || p->stmt[i]->kind == S_DEF) {
            n++;
            nedge += p->stmt[i]->nuse;
        }
    }
    uint32_t *node = kiln_arena_alloc(ctx, sizeof(uint32_t) * (p->nstmt + 1)); /* stmt->node */
    uint32_t *stmt = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));        /* node->stmt */
    uint32_t *start = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));
    uint32_t *dep = kiln_arena_alloc(ctx, sizeof(uint32_t) * (nedge + 1));
    uint32_t *out = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1));
    uint32_t *cycle = kiln_arena_alloc(ctx, sizeof(uint32_t) * (n + 1)), ncycle = 0;
    if (!node || !stmt || !start || !dep || !out || !cycle)
        return ctx->err.status;
    for (uint32_t i = 0, k = 0; i < p->nstmt; i++) {
        bool computes = p->stmt[i]->kind == S_CALL || p->stmt[i]->kind == S_DEF;
        node[i] = computes ? k : KILN_NONE;
        if (computes)
            stmt[k++] = i;
    }
    uint32_t e = 0;
    for (uint32_t k = 0; k < n; k++) {
        const struct stmt *st = p->stmt[stmt[k]];
        start[k] = e;
        for (uint32_t u = 0; u < st->nuse; u++) {
            uint32_t d = node[p->defmap[st->use[u].sym] - 1];
            if (d != KILN_NONE)
                dep[e++] = d;
        }
    }
    start[n] = e;
    if (!kiln_ir_toposort(ctx, n, start, dep, out, cycle, &ncycle)) {
        if (!ncycle)
            return ctx->err.status;
        struct kiln_buf b = {0};
        for (uint32_t k = 0; k < ncycle && b.len < 300; k++)
            kiln_buf_printf(ctx, &b, "%s -> ", sym(p, p->stmt[stmt[cycle[k]]]->name));
        kiln_buf_printf(ctx, &b, "%s", b.len < 300 ? sym(p, p->stmt[stmt[cycle[0]]]->name) : "...");
        if (!kiln_ok(ctx))
            return ctx->err.status;
        const struct stmt *first = p->stmt[stmt[cycle[0]]];
        return perr(p, first->line, first->col, "cycle: %s", b.data);
    }
    for (uint32_t k = 0; k < n; k++)
        out[k] = stmt[out[k]];
    *order = out;
    *norder = n;
    return KILN_OK;
}

/* ---- building expressions ---- */

static kiln_expr
fail_at(struct parser *p, const struct ast *e)
{
    locate(p, e->line, e->col);
    return (kiln_expr){0};
}

static kiln_expr fail_msg(struct parser *p, const struct ast *e, const char *fmt, ...)
    KILN_PRINTF(3, 4);

static kiln_expr
fail_msg(struct parser *p, const struct ast *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_failv(p->ctx, KILN_ERR_INVALID, "parse", KILN_WHERE, fmt, ap);
    va_end(ap);
    return fail_at(p, e);
}

static kiln_expr
lit_int(struct parser *p, const struct ast *e, enum kiln_dtype want)
{
    if (kiln_dtype_is_float(want))
        return kiln_float(p->ctx, (double)e->i, want);
    if (!kiln_dtype_is_int(want))
        want = KILN_DTYPE_I64;
    int64_t lo, hi; /* u64: literals up to INT64_MAX */
    kiln_dtype_range(want, &lo, &hi);
    if (want == KILN_DTYPE_U64)
        lo = 0;
    if (e->i < lo || e->i > hi) {
        perr(p, e->line, e->col, "integer %lld does not fit in %s", (long long)e->i,
             kiln_dtype_name(want));
        return (kiln_expr){0};
    }
    return kiln_int(p->ctx, e->i, want);
}

static kiln_expr build(struct parser *p, const struct ast *e, enum kiln_dtype want);

/* Operands of a binary operator or of select's branches: an untyped operand takes the dtype
 * of a typed one; two untyped operands take `both`. Mirrored by ir/print.c. */
static bool
build_pair(struct parser *p, const struct ast *a, const struct ast *b, enum kiln_dtype both,
           kiln_expr *x, kiln_expr *y)
{
    kiln_ctx *ctx = p->ctx;
    if (a->untyped && !b->untyped) {
        *y = build(p, b, KILN_DTYPE_VOID);
        *x = y->id ? build(p, a, kiln_expr_dtype(ctx, *y)) : (kiln_expr){0};
    } else if (!a->untyped && b->untyped) {
        *x = build(p, a, KILN_DTYPE_VOID);
        *y = x->id ? build(p, b, kiln_expr_dtype(ctx, *x)) : (kiln_expr){0};
    } else {
        enum kiln_dtype w = a->untyped ? both : KILN_DTYPE_VOID;
        *x = build(p, a, w);
        *y = x->id ? build(p, b, w) : (kiln_expr){0};
    }
    return x->id && y->id;
}

static kiln_expr
build_load(struct parser *p, const struct ast *e)
{
    kiln_ctx *ctx = p->ctx;
    uint32_t  t = e->ref < p->nmap && p->tmap[e->ref] ? p->tmap[e->ref] - 1 : KILN_NONE;
    if (t == KILN_NONE) { /* cannot happen after check_names and the sort */
        KILN_FAIL(ctx, KILN_ERR_INTERNAL, "parse", "load of %s before its definition",
                  sym(p, e->ref));
        return fail_at(p, e);
    }
    const struct kiln_tensor *tt = &p->g->tensor[t];
    if (e->nkid != tt->ndim) {
        perr(p, e->line, e->col, "%s has %u dimension%s but is indexed with %u", sym(p, e->ref),
             tt->ndim, tt->ndim == 1 ? "" : "s", e->nkid);
        return (kiln_expr){0};
    }
    kiln_expr idx[KILN_MAX_DIMS];
    for (uint32_t i = 0; i < e->nkid; i++) {
        if (!(idx[i] = build(p, e->kid[i], KILN_DTYPE_INDEX)).id)
            return (kiln_expr){0};
        enum kiln_dtype dt = kiln_expr_dtype(ctx, idx[i]);
        if (!kiln_dtype_is_int(dt)) {
            perr(p, e->kid[i]->line, e->kid[i]->col, "index %u of %s has dtype %s, not an integer",
                 i, sym(p, e->ref), kiln_dtype_name(dt));
            return (kiln_expr){0};
        }
    }
    kiln_expr r = kiln_load(ctx, t, (enum kiln_dtype)tt->dtype, e->nkid, idx);
    if (!r.id)
        return fail_at(p, e);
    if (!KILN_VEC_PUSH(ctx, p->ll, p->nll, p->capll, ((struct loadloc){r.id, e->line, e->col})))
        return (kiln_expr){0};
    return r;
}

static kiln_expr
build_binary(struct parser *p, const struct ast *e, enum kiln_dtype want)
{
    kiln_ctx    *ctx = p->ctx;
    enum kiln_op op = (enum kiln_op)e->op;
    bool         cmp = kiln_op_flags[op] & (KILN_OPF_CMP | KILN_OPF_LOGIC);
    kiln_expr    a, b;
    if (!build_pair(p, e->kid[0], e->kid[1], cmp ? KILN_DTYPE_VOID : want, &a, &b))
        return (kiln_expr){0};
    enum kiln_dtype da = kiln_expr_dtype(ctx, a), db = kiln_expr_dtype(ctx, b);
    if (da != db) {
        perr(p, e->line, e->col, "mixed dtypes in '%s': %s and %s", e->text,
             kiln_dtype_name(e->swapped ? db : da), kiln_dtype_name(e->swapped ? da : db));
        return (kiln_expr){0};
    }
    const char *dn = kiln_dtype_name(da);
    if (op == KILN_OP_DIV && kiln_dtype_is_int(da))
        return fail_msg(p, e, "'/' divides floats, not %s: use '//' for integer division", dn);
    if ((op == KILN_OP_FLOORDIV || op == KILN_OP_FLOORMOD) && !kiln_dtype_is_int(da))
        return fail_msg(p, e, "'%s' needs integer operands, not %s", e->text, dn);
    if ((op == KILN_OP_FLOORDIV || op == KILN_OP_FLOORMOD)
        && kiln_node_get(ctx, b)->op == KILN_OP_INT && kiln_node_get(ctx, b)->imm == 0)
        return fail_msg(p, e, "division by zero in '%s'", e->text);
    if ((kiln_op_flags[op] & KILN_OPF_LOGIC) && da != KILN_DTYPE_BOOL)
        return fail_msg(p, e, "'%s' needs bool operands, not %s", e->text, dn);
    if ((kiln_op_flags[op] & KILN_OPF_ARITH) && da == KILN_DTYPE_BOOL)
        return fail_msg(p, e, "'%s' needs numeric operands, not bool", e->text);
    if ((op == KILN_OP_POW || op == KILN_OP_FMOD) && !kiln_dtype_is_float(da))
        return fail_msg(p, e, "%s needs float operands, not %s", e->text, dn);
    kiln_expr r = kiln_binary(ctx, op, a, b);
    return r.id ? r : fail_at(p, e);
}

static kiln_expr
build(struct parser *p, const struct ast *e, enum kiln_dtype want)
{
    kiln_ctx *ctx = p->ctx;
    kiln_expr r = {0}, a, b;
    if (!kiln_ok(ctx))
        return r;
    switch ((enum ast_kind)e->kind) {
    case A_INT:
        return lit_int(p, e, want);
    case A_FLOAT:
        r = kiln_float(ctx, e->f, kiln_dtype_is_float(want) ? want : KILN_DTYPE_F32);
        break;
    case A_VAR: {
        const struct var *v = &p->cur->def->var[e->ref];
        r = v->spatial ? kiln_axis(ctx, v->index) : kiln_rvar(ctx, v->index);
        break;
    }
    case A_LOAD:
        return build_load(p, e);
    case A_CAST:
        if (!(a = build(p, e->kid[0], KILN_DTYPE_VOID)).id)
            return a;
        r = kiln_cast(ctx, (enum kiln_dtype)e->dtype, a);
        break;
    case A_UN: {
        enum kiln_op    op = (enum kiln_op)e->op;
        enum kiln_dtype w = op == KILN_OP_NOT                        ? KILN_DTYPE_VOID
                            : op == KILN_OP_NEG || op == KILN_OP_ABS ? want
                            : kiln_dtype_is_float(want)              ? want
                                                                     : KILN_DTYPE_F32;
        if (!(a = build(p, e->kid[0], w)).id)
            return a;
        enum kiln_dtype da = kiln_expr_dtype(ctx, a);
        if (op == KILN_OP_NOT && da != KILN_DTYPE_BOOL)
            return fail_msg(p, e, "'!' needs a bool operand, not %s", kiln_dtype_name(da));
        if ((kiln_op_flags[op] & KILN_OPF_ARITH) && da == KILN_DTYPE_BOOL)
            return fail_msg(p, e, "'%s' needs a numeric operand, not bool", e->text);
        if ((kiln_op_flags[op] & KILN_OPF_MATH) && !kiln_dtype_is_float(da))
            return fail_msg(p, e, "%s needs a float operand, not %s", e->text, kiln_dtype_name(da));
        r = kiln_unary(ctx, op, a);
        break;
    }
    case A_BIN:
        return build_binary(p, e, want);
    case A_SELECT: {
        kiln_expr c = build(p, e->kid[0], KILN_DTYPE_VOID);
        if (!c.id || !build_pair(p, e->kid[1], e->kid[2], want, &a, &b))
            return (kiln_expr){0};
        if (kiln_expr_dtype(ctx, a) != kiln_expr_dtype(ctx, b)) {
            perr(p, e->line, e->col, "mixed dtypes in select: %s and %s",
                 kiln_dtype_name(kiln_expr_dtype(ctx, a)),
                 kiln_dtype_name(kiln_expr_dtype(ctx, b)));
            return (kiln_expr){0};
        }
        r = kiln_select(ctx, c, a, b);
        break;
    }
    }
    return r.id ? r : fail_at(p, e);
}

static const struct loadloc *
find_loadloc(const struct parser *p, uint32_t id)
{
    for (uint32_t i = 0; i < p->nll; i++)
        if (p->ll[i].id == id)
            return &p->ll[i];
    return NULL;
}

/* Every load must stay inside its tensor; in a branch of select, under what the condition says
 * about its indices (kiln_ir_find_oob). */
static enum kiln_status
check_bounds(struct parser *p, const struct stmt *s, const struct kiln_opdef *names, kiln_expr body,
             const int64_t *ext)
{
    kiln_ctx          *ctx = p->ctx;
    struct kiln_ir_oob oob;
    if (!kiln_ir_find_oob(p->g, body, ext, s->def->nax, &oob))
        return kiln_ok(ctx) ? KILN_OK : ctx->err.status;
    const struct kiln_tensor *tt = &p->g->tensor[kiln_node_get(ctx, oob.load)->imm];
    const struct loadloc     *at = find_loadloc(p, oob.load.id);
    struct kiln_buf           text = {0};
    kiln_expr                 ix = kiln_load_idx(ctx, oob.load, oob.dim);
    const struct kiln_node   *in = kiln_node_get(ctx, ix);
    if (in->op == KILN_OP_CAST && kiln_dtype_is_int(kiln_expr_dtype(ctx, (kiln_expr){in->kid[0]})))
        ix = (kiln_expr){in->kid[0]}; /* the cast kiln_load adds to a narrower index */
    KILN_TRY(kiln_ir_print_expr(ctx, p->g, names, ix, &text));
    const char *name = kiln_sym_str(ctx, tt->name);
    uint32_t    line = at ? at->line : s->line, col = at ? at->col : s->col;
    if (!oob.known)
        return perr(p, line, col,
                    "index %s of %s (dimension %u) has no static bound: clamp it with min/max or "
                    "guard the load with select(0 <= index && index < extent, ...)",
                    text.data, name, oob.dim);
    return perr(p, line, col,
                "index %s of %s (dimension %u) ranges over [%lld, %lld], outside [0, %lld]",
                text.data, name, oob.dim, (long long)oob.lo, (long long)oob.hi,
                (long long)(tt->shape[oob.dim] - 1));
}

/* ---- building statements ---- */

/* Two direct positions of v disagree: name them in source order, at the later one. */
static enum kiln_status
conflict(struct parser *p, const struct var *v, const struct kiln_ir_range *r)
{
    const struct loadloc *a = find_loadloc(p, r->load.id), *b = find_loadloc(p, r->load2.id);
    int64_t               ea = r->ext, eb = r->ext2;
    uint32_t              ta = r->tensor, tb = r->tensor2, da = r->dim, db = r->dim2;
    if (a && b && (a->line > b->line || (a->line == b->line && a->col > b->col))) {
        const struct loadloc *t = a;
        a = b;
        b = t;
        ea = r->ext2;
        eb = r->ext;
        ta = r->tensor2;
        tb = r->tensor;
        da = r->dim2;
        db = r->dim;
    }
    return perr(p, b ? b->line : v->line, b ? b->col : v->col,
                "conflicting ranges for %s: %lld from %s dimension %u, %lld from %s dimension %u",
                sym(p, v->sym), (long long)ea, kiln_graph_tensor_name(p->g, ta), da, (long long)eb,
                kiln_graph_tensor_name(p->g, tb), db);
}

static enum kiln_status
build_def(struct parser *p, struct stmt *s)
{
    kiln_ctx   *ctx = p->ctx;
    struct def *d = s->def;
    const char *name = sym(p, s->name);
    p->cur = s;
    p->nll = 0;
    kiln_expr body = build(p, d->body, KILN_DTYPE_VOID);
    if (!body.id) {
        if (kiln_ok(ctx))
            KILN_FAIL(ctx, KILN_ERR_INTERNAL, "parse", "%s: no expression built", name);
        return locate(p, s->line, s->col);
    }

    struct kiln_ir_range r[MAX_VARS];
    int64_t              ext[MAX_VARS];
    struct kiln_opdef    names = {.reduce = d->reduce, .nred = (uint8_t)d->nred};
    kiln_ir_infer_ranges(p->g, body, d->nax, d->nred, r);
    for (uint32_t i = 0; i < d->nvar; i++) {
        const struct var *v = &d->var[i];
        uint32_t          k = v->spatial ? v->index : d->nax + v->index;
        if (v->spatial)
            names.axname[v->index] = v->sym;
        else
            names.rname[v->index] = v->sym;
        if (v->where) {
            ext[k] = v->where;
            continue;
        }
        if (r[k].conflict)
            return conflict(p, v, &r[k]);
        if (!r[k].ext)
            return perr(p, v->line, v->col, "variable %s has no range: write 'where %s < N'",
                        sym(p, v->sym), sym(p, v->sym));
        ext[k] = r[k].ext;
    }
    KILN_TRY(check_bounds(p, s, &names, body, ext));

    /* the tensors read, once each, for the statement's summary */
    uint32_t *in = kiln_arena_alloc(ctx, sizeof(uint32_t) * (s->nuse + 1)), nin = 0;
    if (!in)
        return ctx->err.status;
    for (uint32_t u = 0; u < s->nuse; u++) {
        uint32_t t = p->tmap[s->use[u].sym] - 1, j = 0;
        while (j < nin && in[j] != t)
            j++;
        if (j == nin)
            in[nin++] = t;
    }
    KILN_TRY(kiln_graph_begin_call(p->g, "compute", nin, in, 0, NULL, s->line, s->col));
    uint32_t t =
        kiln_graph_add_tensor(p->g, name, kiln_expr_dtype(ctx, body), d->nax, ext, KILN_TENSOR_OP);
    if (t == KILN_NONE)
        return locate(p, s->line, s->col);
    if (kiln_graph_add_op(p->g, t, (enum kiln_reduce)d->reduce, d->nred, ext + d->nax, body,
                          names.axname, names.rname)
            != KILN_OK
        || kiln_graph_end_call(p->g, t) != KILN_OK)
        return locate(p, s->line, s->col);
    p->tmap[s->name] = t + 1;
    p->cur = NULL;
    return KILN_OK;
}

static enum kiln_status
build_call(struct parser *p, struct stmt *s)
{
    uint32_t *in = kiln_arena_alloc(p->ctx, sizeof(uint32_t) * (s->nuse + 1));
    if (!in)
        return p->ctx->err.status;
    for (uint32_t u = 0; u < s->nuse; u++)
        in[u] = p->tmap[s->use[u].sym] - 1;
    uint32_t         out = KILN_NONE;
    enum kiln_status st = kiln_lib_call(p->g, sym(p, s->op), sym(p, s->name), s->nuse, in, s->nattr,
                                        s->attr, s->opline, s->opcol, &out);
    if (st != KILN_OK || !kiln_ok(p->ctx)) {
        if (kiln_ok(p->ctx))
            KILN_FAIL(p->ctx, KILN_ERR_INTERNAL, "parse", "%s failed without an error",
                      sym(p, s->op));
        return locate(p, s->opline, s->opcol) == KILN_OK ? st : p->ctx->err.status;
    }
    if (out >= p->g->ntensor) {
        KILN_FAIL(p->ctx, KILN_ERR_INTERNAL, "parse", "%s returned no tensor", sym(p, s->op));
        return locate(p, s->opline, s->opcol);
    }
    p->tmap[s->name] = out + 1;
    return KILN_OK;
}

static enum kiln_status
build_graph(struct parser *p, const uint32_t *order, uint32_t norder)
{
    kiln_ctx *ctx = p->ctx;
    if (!(p->g = kiln_graph_new(ctx)))
        return ctx->err.status;
    p->g->file = p->file;
    for (uint32_t i = 0; i < p->nstmt; i++) {
        const struct stmt *s = p->stmt[i];
        if (s->kind != S_DECL)
            continue;
        uint32_t t = kiln_graph_add_tensor(p->g, sym(p, s->name), (enum kiln_dtype)s->dtype,
                                           s->ndim, s->shape, (enum kiln_tensor_kind)s->tkind);
        if (t == KILN_NONE)
            return locate(p, s->line, s->col);
        p->g->tensor[t].line = s->line;
        p->g->tensor[t].col = s->col;
        p->tmap[s->name] = t + 1;
    }
    for (uint32_t i = 0; i < norder; i++) {
        struct stmt *s = p->stmt[order[i]];
        KILN_TRY(s->kind == S_DEF ? build_def(p, s) : build_call(p, s));
    }
    bool any = false;
    for (uint32_t i = 0; i < p->nstmt; i++) {
        const struct stmt *s = p->stmt[i];
        if (s->kind != S_OUTPUT)
            continue;
        any = true;
        if (kiln_graph_mark_output(p->g, p->tmap[s->name] - 1) != KILN_OK)
            return locate(p, s->line, s->col);
    }
    if (!any && kiln_graph_default_outputs(p->g) != KILN_OK)
        return locate(p, 1, 1);
    if (kiln_graph_verify(p->g) != KILN_OK)
        return locate(p, 1, 1);
    return KILN_OK;
}

enum kiln_status
kiln_ir_parse(kiln_ctx *ctx, const char *text, size_t len, const char *file,
              struct kiln_graph **out)
{
    *out = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct parser p = {.ctx = ctx};
    if (file && !(p.file = kiln_arena_strdup(ctx, file)))
        return ctx->err.status;
    if (!text && len)
        return perr(&p, 1, 1, "no text to parse: NULL with length %zu", len);
    if (len > KILN_KG_MAX_BYTES)
        return perr(&p, 1, 1, "file is too large: %zu bytes, at most %zu", len, KILN_KG_MAX_BYTES);
    kiln_ir_lex_init(&p.lx, ctx, text ? text : "", len, p.file);
    KILN_TRY(parse_all(&p));
    KILN_TRY(check_names(&p));
    uint32_t *order = NULL, norder = 0;
    KILN_TRY(sort_statements(&p, &order, &norder));
    KILN_TRY(build_graph(&p, order, norder));
    *out = p.g;
    return KILN_OK;
}
