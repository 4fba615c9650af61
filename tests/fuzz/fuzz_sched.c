/* tests/fuzz/fuzz_sched.c -- libFuzzer target for schedule JSON (passes/sched.c) and lowering
 * under it.
 *
 * Every input is a schedule for one fixed graph (a padded 3x3 convolution, a bias and a relu,
 * and a matmul reading it: tiled, packed, fused, inlined and reduced stages are all possible),
 * lowered with storage flattening (kiln_graph_lower_print). A schedule kiln refuses must fail
 * with KILN_ERR_INVALID, KILN_ERR_UNSUPPORTED or KILN_ERR_NOMEM and a message; one it accepts
 * must lower. A crash, a hang or another status is a finding (a violation traps). Seeds:
 * tests/fuzz/corpus_sched. Build with -DKILN_FUZZ=ON -DCMAKE_C_COMPILER=clang. */
#include "kiln.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char graph[] = "input x: f32[1, 8, 10, 10]\n"
                            "weight w: f32[16, 8, 3, 3]\n"
                            "weight b: f32[16]\n"
                            "weight m: f32[16, 12]\n"
                            "c = conv2d(x, w, b, padding=1)\n"
                            "r[n, k, h, q] = max(c[n, k, h, q], 0.0)\n"
                            "y[n, h, q, j] += r[n, k, h, q] * m[k, j]\n"
                            "output y\n";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    if (!ctx)
        return 0;
    struct kiln_graph *g = NULL;
    if (kiln_graph_parse(ctx, graph, sizeof graph - 1, "fuzz.kg", &g) != KILN_OK)
        __builtin_trap();
    struct kiln_compile_options opt = {.schedule_json = (const char *)data, .schedule_len = size};
    const char                 *out = NULL;
    enum kiln_status            st = kiln_graph_lower_print(ctx, g, &opt, 1, &out, NULL);
    if (st != KILN_OK) {
        const struct kiln_error *err = kiln_ctx_error(ctx);
        if (!err || !err->msg[0]
            || (st != KILN_ERR_INVALID && st != KILN_ERR_UNSUPPORTED && st != KILN_ERR_NOMEM))
            __builtin_trap();
    } else if (!out) {
        __builtin_trap();
    }
    kiln_ctx_free(ctx);
    return 0;
}
