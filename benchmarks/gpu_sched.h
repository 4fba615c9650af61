/* benchmarks/gpu_sched.h -- bench_gpu's workloads as kernel graphs, and the hand-written GPU
 * schedules it compiles them with when no records database is given. Shared with
 * tests/cuda/test_cuda.c, which runs the same schedules at small, non-dividing sizes on CPU
 * threads against the reference interpreter (a schedule that computes wrong results would
 * otherwise only show on a GPU). Sizes are free: every split is guarded where it does not
 * divide. */
#ifndef KILN_BENCH_GPU_SCHED_H
#define KILN_BENCH_GPU_SCHED_H

#include <stddef.h>

/* C[M, N] = A[M, K] * B[K, N] (A input, B weight), row-major: "input A ... output C". */
void gpu_matmul_kg(char *buf, size_t size, int M, int N, int K);
/* Tiles of 64 x 64 outputs per block of 16 x 16 threads, 4 x 4 per thread; A's and B's tiles
 * along 8 of k copied into shared memory by the block's threads. */
extern const char gpu_matmul_schedule[];

/* A 3x3 convolution, stride 1, zero padding 1, batch 1, NCHW: x [1, C, H, W] (input), w [K, C,
 * 3, 3] (weight), y [1, K, H, W], written as one compute definition with the padding as a
 * select (as benchmarks/bench_cpu.c's). */
void gpu_conv3x3_kg(char *buf, size_t size, int C, int K, int H, int W);
/* Blocks of 32 output channels x 4 rows x 7 columns, one thread per (8 channels, row,
 * column) computing 4 channels; w's tile for 8 input channels copied into shared memory. */
extern const char gpu_conv3x3_schedule[];

#endif
