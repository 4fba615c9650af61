/* benchmarks/bench_cpu.c -- kiln's generated code next to OpenBLAS and oneDNN, in one run:
 * fp32 matmul 1024^3 and a ResNet-18 3x3 convolution (C=K=128, 28x28, batch 1, pad 1), at 1 and
 * 2 threads, with hand-written schedules (register tiles through cache_write, packed weights,
 * vectorised and unrolled inner loops, parallel outer loops). kiln's kernels are compiled to
 * shared objects and called through the public ABI (include/kiln_abi.h), exactly as a user
 * would. Each result is checked against OpenBLAS/oneDNN's output before it is timed; times
 * are medians, rounds of the three libraries are interleaved so machine noise hits all alike,
 * and the ratio printed is kiln's GFLOP/s over the reference's.
 *
 * usage: bench_cpu [--reps N] [--rounds R] [--only matmul|conv] [--matmul-schedule S.json]
 *                  [--conv-schedule S.json]   (try other schedules against the same references) */
#include "kernel.h"
#include "ref.h"

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double
min3(double a, double b, double c)
{
    return fmin(a, fmin(b, c));
}

/* ---- matmul ---- */

static const char matmul_kg[] = "input A: f32[1024, 1024]\n"
                                "weight B: f32[1024, 1024]\n"
                                "C[i, j] += A[i, k] * B[k, j]\n"
                                "output C\n";

/* B packed into panels of `cols` (panel-major); a rows x cols register tile through cache_write;
 * panels outermost so one B panel stays in L2 while A streams by. With AVX-512, 8 x 32 (16 zmm
 * accumulators); with AVX2's 16 ymm registers, 4 x 16 (8 accumulators: 8 x 16 and 4 x 32 spill,
 * 38-40 GFLOP/s against 68 on Zen 3). */
static const char matmul_sched_fmt[] =
    "{\"steps\": [\n"
    " {\"op\": \"pack\", \"stage\": \"B\", \"dim\": 1, \"factor\": %d, \"outer\": 0},\n"
    " {\"op\": \"parallel\", \"stage\": \"B.pack\", \"iter\": \"i0\"},\n"
    " {\"op\": \"vectorize\", \"stage\": \"B.pack\", \"iter\": \"i2\"},\n"
    " {\"op\": \"cache_write\", \"stage\": \"C\"},\n"
    " {\"op\": \"tile\", \"stage\": \"C\", \"iters\": [\"i\", \"j\"], \"factors\": [%d, %d]},\n"
    " {\"op\": \"reorder\", \"stage\": \"C\", \"order\": [\"j.0\", \"i.0\"]},\n"
    " {\"op\": \"parallel\", \"stage\": \"C\", \"iter\": \"j.0\"},\n"
    " {\"op\": \"vectorize\", \"stage\": \"C\", \"iter\": \"j.1\"},\n"
    " {\"op\": \"compute_at\", \"stage\": \"C.local\", \"target\": \"C\", \"iter\": \"i.0\"},\n"
    " {\"op\": \"reorder\", \"stage\": \"C.local\", \"order\": [\"k\", \"i\", \"j\"]},\n"
    " {\"op\": \"unroll\", \"stage\": \"C.local\", \"iter\": \"i\"},\n"
    " {\"op\": \"vectorize\", \"stage\": \"C.local\", \"iter\": \"j\"}\n"
    "]}\n";

/* Whether the host has AVX-512 (32 registers of 16 floats): the schedules' register tiles are
 * sized for it or for AVX2 (16 of 8). The narrow tiles also suit NEON (32 of 4: 4 x 16 holds
 * 16 accumulators). */
static bool
wide_host(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

static char *
read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char  *buf = calloc(1, 1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    (void)n;
    fclose(f);
    return buf;
}

static const char *matmul_override, *conv_override;

static int
bench_matmul(int reps, int rounds)
{
    const int     n = 1024;
    const int64_t sh[2] = {n, n};
    float        *A = bench_randv((size_t)n * n, 1), *B = bench_randv((size_t)n * n, 2);
    float        *C = bench_randv((size_t)n * n, 3), *R = bench_randv((size_t)n * n, 4);
    struct kernel k = {0};
    char          sched[2048];
    snprintf(sched, sizeof sched, matmul_sched_fmt, wide_host() ? 32 : 16, wide_host() ? 8 : 4,
             wide_host() ? 32 : 16);
    if (kernel_build("matmul", matmul_kg, matmul_override ? matmul_override : sched, NULL, &k))
        return 1;
    kernel_tensor(&k, 0, A, 2, sh);
    kernel_tensor(&k, 1, B, 2, sh);
    kernel_tensor(&k, 2, C, 2, sh);
    double flop = 2.0 * n * n * n;
    for (int th = 1; th <= 2; th++) {
        bench_set_threads(th);
        k.threads(th);
        kernel_run(&k);
        ref_blas_sgemm(n, n, n, A, B, R, 1);
        double err = bench_max_rel_err(C, R, (size_t)n * n);
        double tk = 1e9, tb = 1e9, td = 1e9;
        for (int r = 0; r < rounds; r++) {
            tk = fmin(tk, bench_median(kernel_run, &k, 1, reps));
            tb = fmin(tb, ref_blas_sgemm(n, n, n, A, B, R, reps));
            td = fmin(td, ref_dnnl_matmul(n, n, n, A, B, R, reps));
        }
        printf("matmul 1024^3   threads %d  kiln %7.1f GFLOP/s  OpenBLAS %7.1f  oneDNN %7.1f  "
               "kiln/OpenBLAS %.2f  kiln/oneDNN %.2f  (max rel err %.1e)\n",
               th, flop / tk / 1e9, flop / tb / 1e9, flop / td / 1e9, tb / tk, td / tk, err);
        if (err > 1e-4)
            return 1;
    }
    (void)min3;
    return 0;
}

/* ---- convolution ---- */

static const char conv_kg[] =
    "input x: f32[1, 128, 28, 28]\n"
    "weight w: f32[128, 128, 3, 3]\n"
    "y[n, k, h, q] += select(h + rh >= 1 && h + rh <= 28 && q + rw >= 1 && q + rw <= 28,\n"
    "                        x[n, c, h + rh - 1, q + rw - 1], 0.0) * w[k, c, rh, rw]\n"
    "    where h < 28, q < 28\n"
    "output y\n";

/* Weights packed by 16 output channels, a q x 16 (w x k) register tile per row strip: 14 x 16
 * (14 zmm accumulators) with AVX-512, 4 x 16 (8 ymm) with AVX2, where 7 x 16 spills and runs at
 * half the speed. */
static const char conv_sched_fmt[] =
    "{\"steps\": [\n"
    " {\"op\": \"pack\", \"stage\": \"w\", \"dim\": 0, \"factor\": 16},\n"
    " {\"op\": \"cache_write\", \"stage\": \"y\"},\n"
    " {\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [16]},\n"
    " {\"op\": \"split\", \"stage\": \"y\", \"iter\": \"q\", \"factors\": [%d]},\n"
    " {\"op\": \"reorder\", \"stage\": \"y\", \"order\": [\"n\", \"k.0\", \"h\", \"q.0\", "
    "\"q.1\", \"k.1\"]},\n"
    " {\"op\": \"parallel\", \"stage\": \"y\", \"iter\": \"k.0\"},\n"
    " {\"op\": \"compute_at\", \"stage\": \"y.local\", \"target\": \"y\", \"iter\": \"q.0\"},\n"
    " {\"op\": \"reorder\", \"stage\": \"y.local\", \"order\": [\"n\", \"c\", \"rh\", \"rw\", "
    "\"h\", \"q\", \"k\"]},\n"
    " {\"op\": \"unroll\", \"stage\": \"y.local\", \"iter\": \"q\"},\n"
    " {\"op\": \"vectorize\", \"stage\": \"y.local\", \"iter\": \"k\"}\n"
    "]}\n";

static int
bench_conv(int reps, int rounds)
{
    const int64_t sx[4] = {1, 128, 28, 28}, sw[4] = {128, 128, 3, 3};
    size_t        nx = 128 * 28 * 28, nw = 128 * 128 * 9;
    float        *x = bench_randv(nx, 5), *w = bench_randv(nw, 6), *y = bench_randv(nx, 7),
          *r = bench_randv(nx, 8);
    struct kernel k = {0};
    char          sched[2048];
    snprintf(sched, sizeof sched, conv_sched_fmt, wide_host() ? 14 : 4);
    if (kernel_build("conv", conv_kg, conv_override ? conv_override : sched, NULL, &k))
        return 1;
    kernel_tensor(&k, 0, x, 4, sx);
    kernel_tensor(&k, 1, w, 4, sw);
    kernel_tensor(&k, 2, y, 4, sx);
    double flop = 2.0 * 128 * 128 * 9 * 28 * 28;
    for (int th = 1; th <= 2; th++) {
        bench_set_threads(th);
        k.threads(th);
        kernel_run(&k);
        ref_dnnl_conv(1, 128, 28, 28, 128, 3, 3, 1, 1, 1, x, w, r, 1);
        double err = bench_max_rel_err(y, r, nx);
        double tk = 1e9, td = 1e9;
        for (int i = 0; i < rounds; i++) {
            tk = fmin(tk, bench_median(kernel_run, &k, 2, reps));
            td = fmin(td, ref_dnnl_conv(1, 128, 28, 28, 128, 3, 3, 1, 1, 1, x, w, r, reps));
        }
        printf("conv3x3 128x28  threads %d  kiln %7.1f GFLOP/s  oneDNN %7.1f  kiln/oneDNN %.2f  "
               "(max rel err %.1e)\n",
               th, flop / tk / 1e9, flop / td / 1e9, td / tk, err);
        if (err > 1e-4)
            return 1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    int         reps = 15, rounds = 3;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--matmul-schedule") && i + 1 < argc)
            matmul_override = read_text(argv[++i]);
        else if (!strcmp(argv[i], "--conv-schedule") && i + 1 < argc)
            conv_override = read_text(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_cpu [--reps N] [--rounds R] [--only matmul|conv] "
                            "[--matmul-schedule S.json] [--conv-schedule S.json]\n");
            return 2;
        }
    }
    if (reps < 1 || rounds < 1)
        return 2;
    int rc = 0;
    if (!only || !strcmp(only, "matmul"))
        rc |= bench_matmul(reps, rounds);
    if (!only || !strcmp(only, "conv"))
        rc |= bench_conv(reps, rounds);
    return rc;
}
