/* ir/lex.c -- the .kg lexer: a pull lexer over a byte buffer of known length, with one token
 * of lookahead. It never reads past the end, accepts NUL bytes only inside comments, and
 * reports the first bad byte as an error with its line and column (1-based, bytes).
 *
 * Newlines end statements, except inside ( ) or [ ] and before a line whose first word is
 * `where` (that line continues a compute definition). A run of newlines, blank lines and
 * comment lines becomes one NL token, found by scanning ahead once, so the lexer stays linear
 * on files full of blank lines. Integers are kept as magnitudes up to 2^63 so that the parser
 * can accept -9223372036854775808; the parser rejects 2^63 without a minus. Floats go through
 * strtod on a bounded copy. After an error the lexer returns KILN_TOK_ERR forever, which the
 * parser treats like end of file; the first error recorded in the context wins. */
#include "parse.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NUMBER_LEN 400

static bool
is_alpha(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool
is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static bool
is_ident(int c)
{
    return is_alpha(c) || is_digit(c) || c == '.';
}

void
kiln_ir_lex_init(struct kiln_lexer *lx, kiln_ctx *ctx, const char *text, size_t len,
                 const char *file)
{
    memset(lx, 0, sizeof *lx);
    lx->ctx = ctx;
    lx->file = file;
    lx->p = text;
    lx->end = text + len;
    lx->line_start = text;
    lx->line = 1;
    kiln_ir_lex_next(lx);
}

static uint32_t
col_of(const struct kiln_lexer *lx, const char *at)
{
    return (uint32_t)(at - lx->line_start) + 1;
}

/* Writes a byte for a message: 'x' when printable, '\xNN' otherwise. */
static const char *
byte_desc(unsigned char c, char *buf, size_t size)
{
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
        snprintf(buf, size, "'%c'", c);
    else
        snprintf(buf, size, "'\\x%02x'", c);
    return buf;
}

static struct kiln_token lex_error(struct kiln_lexer *lx, const char *at, const char *fmt, ...)
    KILN_PRINTF(3, 4);

static struct kiln_token
lex_error(struct kiln_lexer *lx, const char *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_failv(lx->ctx, KILN_ERR_INVALID, "parse", KILN_WHERE, fmt, ap);
    va_end(ap);
    kiln_error_set_loc(lx->ctx, lx->file, lx->line, col_of(lx, at));
    lx->p = lx->end; /* stop */
    return (struct kiln_token){
        .kind = KILN_TOK_ERR, .line = lx->line, .col = col_of(lx, at), .s = at, .len = 0};
}

/* Skips spaces and comments on the current line (not the newline). */
static void
skip_blank(struct kiln_lexer *lx)
{
    while (lx->p < lx->end) {
        char c = *lx->p;
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            lx->p++;
        } else if (c == '#') {
            while (lx->p < lx->end && *lx->p != '\n')
                lx->p++;
        } else if (c == '\n' && lx->depth > 0) {
            lx->p++;
            lx->line++;
            lx->line_start = lx->p;
        } else {
            break;
        }
    }
}

/* At a newline outside brackets: skips every following blank or comment line. Returns true
 * when the next word is `where` (the statement continues). Position and line are updated. */
static bool
skip_newlines(struct kiln_lexer *lx)
{
    while (lx->p < lx->end) {
        char c = *lx->p;
        if (c == '\n') {
            lx->p++;
            lx->line++;
            lx->line_start = lx->p;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            lx->p++;
        } else if (c == '#') {
            while (lx->p < lx->end && *lx->p != '\n')
                lx->p++;
        } else {
            break;
        }
    }
    size_t left = (size_t)(lx->end - lx->p);
    return left >= 5 && !memcmp(lx->p, "where", 5) && (left == 5 || !is_ident(lx->p[5]));
}

static struct kiln_token
lex_number(struct kiln_lexer *lx)
{
    const char *s = lx->p, *q = lx->p;
    bool        is_float = false;
    while (q < lx->end && is_digit(*q))
        q++;
    if (q < lx->end && *q == '.') {
        is_float = true;
        q++;
        while (q < lx->end && is_digit(*q))
            q++;
    }
    if (q < lx->end && (*q == 'e' || *q == 'E')) {
        const char *e = q + 1;
        if (e < lx->end && (*e == '+' || *e == '-'))
            e++;
        if (e < lx->end && is_digit(*e)) {
            is_float = true;
            q = e;
            while (q < lx->end && is_digit(*q))
                q++;
        }
    }
    if (q < lx->end && is_ident(*q)) { /* 12abc, 1.5.3, 1e */
        while (q < lx->end && is_ident(*q) && q - s < 40)
            q++;
        return lex_error(lx, s, "malformed number '%.*s'", (int)(q - s), s);
    }
    struct kiln_token t = {.line = lx->line, .col = col_of(lx, s), .s = s, .len = (size_t)(q - s)};
    if (t.len > MAX_NUMBER_LEN)
        return lex_error(lx, s, "number '%.20s...' is too long", s);
    if (!is_float) {
        uint64_t v = 0;
        for (const char *d = s; d < q; d++) {
            uint64_t digit = (uint64_t)(*d - '0');
            if (v > (((uint64_t)1 << 63) - digit) / 10)
                return lex_error(lx, s, "integer %.*s is too large", (int)t.len, s);
            v = v * 10 + digit;
        }
        t.kind = KILN_TOK_INT;
        t.mag = v;
    } else {
        char buf[MAX_NUMBER_LEN + 1];
        memcpy(buf, s, t.len);
        buf[t.len] = 0;
        errno = 0;
        double v = strtod(buf, NULL);
        if (isinf(v))
            return lex_error(lx, s, "float %s is out of range", buf);
        t.kind = KILN_TOK_FLOAT;
        t.f = v;
    }
    lx->p = q;
    return t;
}

static struct kiln_token
lex_string(struct kiln_lexer *lx)
{
    const char *s = lx->p;
    size_t      n = 0;
    char        bb[16];
    /* first pass: validate and measure */
    const char *q = s + 1;
    for (;;) {
        if (q >= lx->end || *q == '\n')
            return lex_error(lx, s, "unterminated string");
        unsigned char c = (unsigned char)*q;
        if (c == '"')
            break;
        if (c == '\\') {
            if (q + 1 < lx->end && (q[1] == '"' || q[1] == '\\')) {
                q += 2;
                n++;
                continue;
            }
            if (q + 1 >= lx->end || q[1] == '\n')
                return lex_error(lx, s, "unterminated string");
            lx->p = q; /* column of the backslash */
            return lex_error(lx, q, "invalid escape '\\%c' in string: only \\\" and \\\\",
                             (unsigned char)q[1] >= 0x20 && (unsigned char)q[1] < 0x7f ? q[1]
                                                                                       : '?');
        }
        if (c < 0x20 || c == 0x7f)
            return lex_error(lx, q, "invalid character %s in string", byte_desc(c, bb, sizeof bb));
        q++;
        n++;
    }
    char *v = kiln_arena_alloc(lx->ctx, n + 1);
    if (!v) {
        lx->p = lx->end;
        return (struct kiln_token){.kind = KILN_TOK_ERR, .line = lx->line, .col = col_of(lx, s)};
    }
    size_t k = 0;
    for (const char *r = s + 1; r < q; r++) {
        if (*r == '\\')
            r++;
        v[k++] = *r;
    }
    struct kiln_token t = {.kind = KILN_TOK_STRING,
                           .line = lx->line,
                           .col = col_of(lx, s),
                           .s = s,
                           .len = (size_t)(q + 1 - s),
                           .str = v};
    lx->p = q + 1;
    return t;
}

static struct kiln_token
lex_one(struct kiln_lexer *lx)
{
    for (;;) {
        skip_blank(lx);
        if (lx->p >= lx->end || !kiln_ok(lx->ctx)) {
            if (!kiln_ok(lx->ctx))
                lx->p = lx->end;
            return (struct kiln_token){.kind = kiln_ok(lx->ctx) ? KILN_TOK_EOF : KILN_TOK_ERR,
                                       .line = lx->line,
                                       .col = col_of(lx, lx->p),
                                       .s = lx->p};
        }
        if (*lx->p != '\n')
            break;
        /* newline at depth 0 */
        struct kiln_token nl = {
            .kind = KILN_TOK_NL, .line = lx->line, .col = col_of(lx, lx->p), .s = lx->p, .len = 1};
        if (!skip_newlines(lx))
            return nl;
        /* a `where` line continues the statement: lex on */
    }
    const char       *s = lx->p;
    unsigned char     c = (unsigned char)*s;
    struct kiln_token t = {.line = lx->line, .col = col_of(lx, s), .s = s, .len = 1};
    char              next = s + 1 < lx->end ? s[1] : 0;

    if (is_alpha(c)) {
        const char *q = s + 1;
        while (q < lx->end && is_ident(*q))
            q++;
        t.kind = KILN_TOK_IDENT;
        t.len = (size_t)(q - s);
        lx->p = q;
        return t;
    }
    if (is_digit(c) || (c == '.' && next >= '0' && next <= '9'))
        return lex_number(lx);
    if (c == '"')
        return lex_string(lx);
    switch (c) {
    case '(':
        t.kind = KILN_TOK_LPAREN;
        lx->depth++;
        break;
    case '[':
        t.kind = KILN_TOK_LBRACK;
        lx->depth++;
        break;
    case ')':
        t.kind = KILN_TOK_RPAREN;
        lx->depth -= lx->depth > 0;
        break;
    case ']':
        t.kind = KILN_TOK_RBRACK;
        lx->depth -= lx->depth > 0;
        break;
    case ',':
        t.kind = KILN_TOK_COMMA;
        break;
    case ':':
        t.kind = KILN_TOK_COLON;
        break;
    case '=':
        t.kind = next == '=' ? KILN_TOK_EQ : KILN_TOK_ASSIGN;
        break;
    case '+':
        t.kind = next == '=' ? KILN_TOK_PLUSEQ : KILN_TOK_PLUS;
        break;
    case '-':
        t.kind = KILN_TOK_MINUS;
        break;
    case '*':
        t.kind = KILN_TOK_STAR;
        break;
    case '/':
        t.kind = next == '/' ? KILN_TOK_SLASHSLASH : KILN_TOK_SLASH;
        break;
    case '%':
        t.kind = KILN_TOK_PERCENT;
        break;
    case '<':
        t.kind = next == '=' ? KILN_TOK_LE : KILN_TOK_LT;
        break;
    case '>':
        t.kind = next == '=' ? KILN_TOK_GE : KILN_TOK_GT;
        break;
    case '!':
        t.kind = next == '=' ? KILN_TOK_NE : KILN_TOK_NOT;
        break;
    case '&':
        if (next != '&')
            return lex_error(lx, s, "unexpected character '&': did you mean '&&'");
        t.kind = KILN_TOK_AND;
        break;
    case '|':
        if (next != '|')
            return lex_error(lx, s, "unexpected character '|': did you mean '||'");
        t.kind = KILN_TOK_OR;
        break;
    default: {
        char bb[16];
        return lex_error(lx, s, "unexpected character %s", byte_desc(c, bb, sizeof bb));
    }
    }
    switch (t.kind) {
    case KILN_TOK_EQ:
    case KILN_TOK_PLUSEQ:
    case KILN_TOK_SLASHSLASH:
    case KILN_TOK_LE:
    case KILN_TOK_GE:
    case KILN_TOK_NE:
    case KILN_TOK_AND:
    case KILN_TOK_OR:
        t.len = 2;
        break;
    default:
        break;
    }
    lx->p = s + t.len;
    return t;
}

void
kiln_ir_lex_next(struct kiln_lexer *lx)
{
    if (lx->has_ahead) {
        lx->tok = lx->ahead;
        lx->has_ahead = false;
        return;
    }
    lx->tok = lex_one(lx);
}

const struct kiln_token *
kiln_ir_lex_peek(struct kiln_lexer *lx)
{
    if (!lx->has_ahead) {
        lx->ahead = lex_one(lx);
        lx->has_ahead = true;
    }
    return &lx->ahead;
}

bool
kiln_ir_tok_is(const struct kiln_token *t, const char *word)
{
    size_t n = strlen(word);
    return t->kind == KILN_TOK_IDENT && t->len == n && !memcmp(t->s, word, n);
}

const char *
kiln_ir_tok_desc(const struct kiln_token *t, char *buf, size_t size)
{
    switch (t->kind) {
    case KILN_TOK_EOF:
    case KILN_TOK_ERR:
        snprintf(buf, size, "end of file");
        break;
    case KILN_TOK_NL:
        snprintf(buf, size, "end of line");
        break;
    case KILN_TOK_STRING:
        snprintf(buf, size, "a string");
        break;
    default:
        if (t->len > 40)
            snprintf(buf, size, "'%.37s...'", t->s);
        else
            snprintf(buf, size, "'%.*s'", (int)t->len, t->s);
        break;
    }
    return buf;
}

bool
kiln_ir_valid_name(const char *s, bool variable)
{
    static const char *const reserved[] = {"input", "weight", "output", "where"};
    if (!s || !is_alpha((unsigned char)s[0]))
        return false;
    for (const char *p = s + 1; *p; p++)
        if (!is_ident((unsigned char)*p))
            return false;
    for (size_t i = 0; i < KILN_COUNTOF(reserved); i++)
        if (!strcmp(s, reserved[i]))
            return false;
    return !variable || (strcmp(s, "inf") && strcmp(s, "nan"));
}
