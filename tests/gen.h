/* tests/gen.h -- test inputs shared by the code-generation tests (tests/gen.c): random kernel
 * graphs and random legal schedules (the lowering property test's, replayable from a seed),
 * and one small graph per library op. */
#ifndef KILN_TEST_GEN_H
#define KILN_TEST_GEN_H

#include "../passes/state.h"

#include <stddef.h>

/* A random graph: random compute definitions (reductions, matmuls, stencils, elementwise)
 * and library calls; NULL with the context's error on failure. */
struct kiln_graph *kiln_test_gen_graph(kiln_ctx *ctx, struct kiln_rng *r);
/* A random schedule of up to 11 legal steps for g (each step checked by lowering), maybe with
 * an argument padded for one of its readers. */
void kiln_test_gen_schedule(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_rng *r,
                            struct kiln_schedule *s);
/* Whether stage c reads tensor t through bounds checks a `pad` step accepts. */
bool kiln_test_pads(kiln_ctx *ctx, const struct kiln_state *st, const struct kiln_stage *c,
                    uint32_t t);
/* A schedule running g on a GPU: each stage at root, its spatial loops fused, split by 64 (or
 * fewer when shorter), the outer part bound to blockIdx.x and the inner to threadIdx.x; false
 * with the context's error when it cannot be built. */
bool kiln_test_gpu_schedule(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_schedule *out);
/* One .kg text per library op (test_lower checks every op has one). */
extern const char *const kiln_test_op_cases[];
extern const size_t      kiln_test_nop_cases;

/* A small hand-written CUDA kernel `k(float *y, const float *x, int n)` for 256-thread blocks. */
extern const char kiln_test_cuda_kernel[];

/* A 40 x 24 x 36 matmul and a schedule computing it with shared-memory tiles (bind, cache_read
 * "scope": "shared"): 3 x 3 blocks of 16 x 16 threads. */
extern const char kiln_test_shared_matmul_kg[], kiln_test_shared_matmul[];

/* Cross-thread reductions: a graph and a schedule binding a reduction loop to threadIdx.x
 * (tests/lower runs them in the loop-nest interpreter, tests/cuda emits and emulates them). */
struct kiln_test_xred {
    const char *what, *kg, *json;
};
extern const struct kiln_test_xred kiln_test_xred_cases[];
extern const size_t                kiln_test_nxred_cases;

#endif
