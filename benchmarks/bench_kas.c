/* benchmarks/bench_kas.c -- throughput of kiln's kernel sampler (kas/), in legal, distinct,
 * in-budget kernels per second on one thread, for the 3x3 convolutions of ResNet-18 (C = K =
 * 64, 128, 256, 512 at 56, 28, 14, 7), one design valid for all four placeholders at once. Every
 * counted kernel went through the whole pipeline: constructive growth with shape-distance
 * pruning, the legality solver, the filters (weights, receptive field >= 3, no redundant
 * pairs), the canonical-hash and output-fingerprint duplicate checks and the exact budget
 * solver (FLOPs 5%..100% and parameters <= 100% of the convolutions). Canvas, the reference
 * point, reports about 1.9 legal kernels per second per thread in its released code.
 *
 * usage: bench_kas [--seconds S] [--seed N] [--max-ops N] [--no-fingerprint] */
#include "../kas/kas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double
now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int
main(int argc, char **argv)
{
    double          seconds = 5;
    uint64_t        seed = 1;
    struct kas_spec s;
    kas_spec_default(&s);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--max-ops") && i + 1 < argc)
            s.max_ops = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-fingerprint"))
            s.no_fingerprint = true;
        else {
            fprintf(stderr,
                    "usage: bench_kas [--seconds S] [--seed N] [--max-ops N] [--no-fingerprint]\n");
            return 2;
        }
    }
    static const struct kas_placeholder r18[] = {
        {64, 64, 56, 56}, {128, 128, 28, 28}, {256, 256, 14, 14}, {512, 512, 7, 7}};
    s.nph = 4;
    memcpy(s.ph, r18, sizeof r18);
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    if (!ctx || kas_spec_check(ctx, &s) != KILN_OK) {
        fprintf(stderr, "bench_kas: bad settings\n");
        kiln_ctx_free(ctx);
        return 2;
    }
    struct kas_sampler *sm = kas_sampler_new(ctx, &s, seed);
    if (!sm) {
        kiln_ctx_free(ctx);
        return 1;
    }
    struct kas_design d;
    uint64_t          n = 0;
    double            t0 = now(), t = t0;
    while (t - t0 < seconds) {
        for (int k = 0; k < 64; k++)
            n += kas_sampler_next(sm, &d, 100000);
        t = now();
    }
    const struct kas_stats *st = kas_sampler_stats(sm);
    printf("kas sampler  ResNet-18 3x3 placeholders (4), max %d ops, fingerprints %s, seed %llu\n",
           s.max_ops, s.no_fingerprint ? "off" : "on", (unsigned long long)seed);
    printf("  %llu kernels in %.2f s: %.0f kernels/s/thread  (Canvas: 1.9; ratio %.0fx)\n",
           (unsigned long long)n, t - t0, (double)n / (t - t0), (double)n / (t - t0) / 1.9);
    printf("  grown %llu: %llu illegal at closing, %llu filtered, %llu duplicate hashes, "
           "%llu over budget, %llu duplicate fingerprints\n",
           (unsigned long long)st->attempts, (unsigned long long)st->illegal,
           (unsigned long long)st->filtered, (unsigned long long)st->dup_hash,
           (unsigned long long)st->over_budget, (unsigned long long)st->dup_fp);
    kas_sampler_free(sm);
    kiln_ctx_free(ctx);
    return 0;
}
