/* ir/parse.h -- internal to the .kg text format: the lexer (ir/lex.c), the parser (ir/parse.c),
 * its static checks (ir/parse_check.c) and the printer (ir/print.c). The grammar is docs/kg.md. */
#ifndef KILN_PARSE_H
#define KILN_PARSE_H

#include "ir.h"

#define KILN_KG_MAX_BYTES ((size_t)64 << 20) /* larger files are refused */
#define KILN_KG_MAX_DEPTH 512                /* expression nesting limit (parser and printer) */

enum kiln_tok {
    KILN_TOK_EOF,
    KILN_TOK_ERR, /* a lexical error was recorded; behaves like end of file */
    KILN_TOK_NL,  /* end of a statement (one token for a run of blank lines) */
    KILN_TOK_IDENT,
    KILN_TOK_INT,
    KILN_TOK_FLOAT,
    KILN_TOK_STRING,
    KILN_TOK_LPAREN,
    KILN_TOK_RPAREN,
    KILN_TOK_LBRACK,
    KILN_TOK_RBRACK,
    KILN_TOK_COMMA,
    KILN_TOK_COLON,
    KILN_TOK_ASSIGN, /* = */
    KILN_TOK_PLUSEQ, /* += */
    KILN_TOK_PLUS,
    KILN_TOK_MINUS,
    KILN_TOK_STAR,
    KILN_TOK_SLASH,
    KILN_TOK_SLASHSLASH,
    KILN_TOK_PERCENT,
    KILN_TOK_LT,
    KILN_TOK_LE,
    KILN_TOK_GT,
    KILN_TOK_GE,
    KILN_TOK_EQ,
    KILN_TOK_NE,
    KILN_TOK_AND,
    KILN_TOK_OR,
    KILN_TOK_NOT,
};

struct kiln_token {
    enum kiln_tok kind;
    uint32_t      line, col; /* 1-based; col in bytes */
    const char   *s;         /* the token's text in the source (not NUL-terminated) */
    size_t        len;
    uint64_t      mag; /* INT: magnitude, at most 2^63 (2^63 is legal only after '-') */
    double        f;   /* FLOAT */
    const char   *str; /* STRING: the value, escapes resolved, NUL-terminated (arena) */
};

struct kiln_lexer {
    kiln_ctx         *ctx;
    const char       *file; /* for error locations */
    const char       *p, *end;
    const char       *line_start;
    uint32_t          line;
    int32_t           depth; /* open ( and [: newlines inside them are spaces */
    struct kiln_token tok;   /* current token */
    struct kiln_token ahead; /* lookahead, valid when has_ahead */
    bool              has_ahead;
};

void kiln_ir_lex_init(struct kiln_lexer *lx, kiln_ctx *ctx, const char *text, size_t len,
                      const char *file);
void kiln_ir_lex_next(struct kiln_lexer *lx);                     /* advances lx->tok */
const struct kiln_token *kiln_ir_lex_peek(struct kiln_lexer *lx); /* the token after tok */
/* Describes a token for "found ..." in messages: 'name', '+=', end of line, ... */
const char *kiln_ir_tok_desc(const struct kiln_token *t, char *buf, size_t size);
bool        kiln_ir_tok_is(const struct kiln_token *t, const char *word); /* IDENT word */
/* A name the printer may write: an identifier that is not a keyword; variables also may not
 * be the literals inf and nan. */
bool kiln_ir_valid_name(const char *s, bool variable);

/* Range inference, shared by the parser and the printer so that the printer writes `where`
 * exactly when the parser could not recover a range. Variables 0..nax-1 are the axes,
 * nax..nax+nred-1 the reduction variables. */
struct kiln_ir_range {
    int64_t   ext;         /* extent of the first direct position; 0 = none */
    uint32_t  tensor, dim; /* that position */
    kiln_expr load;        /* the load holding it */
    bool      conflict;    /* a later direct position disagrees: */
    int64_t   ext2;
    uint32_t  tensor2, dim2;
    kiln_expr load2; /* the load holding the disagreeing position */
};
void kiln_ir_infer_ranges(const struct kiln_graph *g, kiln_expr body, uint32_t nax, uint32_t nred,
                          struct kiln_ir_range *out);

/* The first load of body whose index dim may leave [0, extent) when every variable k ranges
 * over [0, ext[k]) (axes first, then reductions), inside a branch of select as far as the
 * select's condition does not bound it (comparisons of the index, or of a part of it, with
 * constants); the interval is [lo, hi] when known. Returns false when every load is in
 * bounds. */
struct kiln_ir_oob {
    kiln_expr load;
    uint32_t  dim;
    bool      known;
    int64_t   lo, hi;
};
bool kiln_ir_find_oob(const struct kiln_graph *g, kiln_expr body, const int64_t *ext, uint32_t nax,
                      struct kiln_ir_oob *out);

/* Stable topological order of n nodes, node i depending on dep[start[i] .. start[i+1]): the
 * earliest ready node always goes next, so an order that is already topological is kept.
 * Returns true with order[0..n) filled. On a cycle returns false with the cycle in
 * cycle[0..*ncycle) (each node depends on the next, the last on the first); on running out of
 * memory returns false with *ncycle 0 and the error recorded. Scratch memory is arena memory. */
bool kiln_ir_toposort(kiln_ctx *ctx, uint32_t n, const uint32_t *start, const uint32_t *dep,
                      uint32_t *order, uint32_t *cycle, uint32_t *ncycle);

/* Shortest decimal text that reads back as v ("1.5", "1e-05", "inf", "-inf", "nan"); always
 * lexes as a float. buf needs 32 bytes. */
const char *kiln_ir_fmt_float(double v, char *buf);

#endif /* KILN_PARSE_H */
