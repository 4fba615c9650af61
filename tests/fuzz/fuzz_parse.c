/* tests/fuzz/fuzz_parse.c -- libFuzzer target for the .kg parser and printer.
 *
 * Every input is parsed with its exact length (no NUL terminator: the parser must not read
 * past len). A rejected input must fail with KILN_ERR_INVALID (or KILN_ERR_NOMEM) and carry a
 * line and column. An accepted input must round-trip: its printed text, plain and expanded,
 * parses in a fresh context to a graph with the same structural hash and prints identically
 * again. Any violation traps, so libFuzzer keeps the input as a crash. Build with
 * -DKILN_FUZZ=ON -DCMAKE_C_COMPILER=clang; seed corpus in tests/fuzz/corpus. */
#include "kiln.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
roundtrip(kiln_ctx *ctx, const struct kiln_graph *g, unsigned flags)
{
    const char *p1 = NULL, *p2 = NULL;
    if (kiln_graph_print(ctx, g, flags, &p1) != KILN_OK)
        __builtin_trap();
    kiln_ctx          *c2 = kiln_ctx_new(NULL);
    struct kiln_graph *g2 = NULL;
    if (!c2)
        return;
    if (kiln_graph_parse(c2, p1, strlen(p1), "printed.kg", &g2) != KILN_OK)
        __builtin_trap();
    if (kiln_graph_hash(g2) != kiln_graph_hash(g))
        __builtin_trap();
    if (kiln_graph_print(c2, g2, flags, &p2) != KILN_OK || strcmp(p1, p2) != 0)
        __builtin_trap();
    kiln_ctx_free(c2);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    if (!ctx)
        return 0;
    struct kiln_graph *g = NULL;
    enum kiln_status   st = kiln_graph_parse(ctx, (const char *)data, size, "fuzz.kg", &g);
    if (st == KILN_OK) {
        roundtrip(ctx, g, 0);
        roundtrip(ctx, g, KILN_PRINT_EXPANDED);
    } else {
        const struct kiln_error *err = kiln_ctx_error(ctx);
        if (!err || (st != KILN_ERR_INVALID && st != KILN_ERR_NOMEM))
            __builtin_trap();
        if (st == KILN_ERR_INVALID && (!err->loc.line || !err->loc.col))
            __builtin_trap();
    }
    kiln_ctx_free(ctx);
    return 0;
}
