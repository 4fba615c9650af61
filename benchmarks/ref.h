/* benchmarks/ref.h -- the libraries a user would pick instead of kiln, timed the same way:
 * OpenBLAS (cblas_sgemm) and oneDNN (matmul and convolution in their best layouts, weights and
 * inputs reordered ahead of time, outside the timed region). Every timer returns the median of
 * `reps` calls after warm-up, in seconds, or a negative number when the library refused. */
#ifndef KILN_BENCH_REF_H
#define KILN_BENCH_REF_H

#include <stdint.h>

double bench_now(void);
/* Median seconds of `reps` calls of fn(ud) after `warm` warm-up calls. */
double bench_median(void (*fn)(void *), void *ud, int warm, int reps);
void   bench_set_threads(int n); /* OpenMP (kiln, oneDNN) and OpenBLAS */

/* C[M,N] = A[M,K] B[K,N], row-major. */
double ref_blas_sgemm(int M, int N, int K, const float *A, const float *B, float *C, int reps);
double ref_dnnl_matmul(int M, int N, int K, const float *A, const float *B, float *C, int reps);
/* NCHW input, OIHW weights, NCHW output (converted from oneDNN's chosen layout after timing),
 * stride/pad symmetric, groups. */
double ref_dnnl_conv(int N, int C, int H, int W, int K, int R, int S, int stride, int pad,
                     int groups, const float *x, const float *w, float *y, int reps);

#endif
