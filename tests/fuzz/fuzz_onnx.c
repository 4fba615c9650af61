/* tests/fuzz/fuzz_onnx.c -- libFuzzer target for the ONNX importer and the graph pipeline.
 *
 * Every input is imported as a model (kiln_graph_import_onnx). A rejected input must fail with
 * KILN_ERR_INVALID, KILN_ERR_UNSUPPORTED or KILN_ERR_NOMEM and a message; an accepted one goes
 * through the graph pipeline (kiln_graph_optimize) and must print as .kg text that parses. (Not
 * to the same structural hash: an imported graph and its printed text hash differently today,
 * e.g. ONNX's Softsign, a known gap.) A crash, a hang, another status or a printed text that
 * does not parse is a finding (a violation traps). Seeds: the models of libonnx-testdata (.ci/run).
 * Build with -DKILN_FUZZ=ON -DCMAKE_C_COMPILER=clang. */
#include "kiln.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
expect_clean_failure(kiln_ctx *ctx, enum kiln_status st)
{
    const struct kiln_error *err = kiln_ctx_error(ctx);
    if (!err || !err->msg[0]
        || (st != KILN_ERR_INVALID && st != KILN_ERR_UNSUPPORTED && st != KILN_ERR_NOMEM))
        __builtin_trap();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    if (!ctx)
        return 0;
    struct kiln_graph   *g = NULL, *o = NULL;
    const double *const *w = NULL, *const *ow = NULL;
    enum kiln_status     st = kiln_graph_import_onnx(ctx, data, size, "fuzz.onnx", &g, &w);
    if (st != KILN_OK) {
        expect_clean_failure(ctx, st);
    } else if ((st = kiln_graph_optimize(ctx, g, w, NULL, &o, &ow, NULL)) != KILN_OK) {
        expect_clean_failure(ctx, st);
    } else {
        const char        *text = NULL;
        kiln_ctx          *c2 = kiln_ctx_new(NULL);
        struct kiln_graph *g2 = NULL;
        if (kiln_graph_print(ctx, o, 0, &text) != KILN_OK)
            __builtin_trap();
        if (c2 && kiln_graph_parse(c2, text, strlen(text), "printed.kg", &g2) != KILN_OK)
            __builtin_trap();
        kiln_ctx_free(c2);
    }
    kiln_ctx_free(ctx);
    return 0;
}
