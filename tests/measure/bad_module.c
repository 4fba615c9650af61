/* tests/measure/bad_module.c -- a hand-written module for the 5x7 by 7x3 matrix product of
 * tests/measure/test_measure.c (a input, b weight, C output), with a fault planted by BAD, so
 * the measurement's real path (runner process, dlopen, kiln_call, check) meets every way a
 * candidate can fail: 0 none, 1 one wrong element, 2 an element never written, 3 SIGSEGV,
 * 4 an endless loop, 5 exit(3), 6 abort(), 7 a failed huge allocation (KILN_ABI_ERR_NOMEM),
 * 8 SIGILL, 9 an allocation of 9/10 of the physical memory, never touched (the runner's
 * address-space limit makes it fail: KILN_ABI_ERR_NOMEM), 10 correct but 0.5 s per call, 11 a
 * prepared module (kiln_prepare copies b into its prepared area) whose prepared call is correct
 * but whose plain kiln_call gets one element wrong: the measurement must check (and time) the
 * prepared call. Built by the test with
 *
 *     cc -shared -fPIC -fopenmp -Iinclude -DBAD=n bad_module.c \
 *        -Wl,--whole-archive libkiln_rt.a -Wl,--no-whole-archive -o bad.so */
#include "../../runtime/runtime.h"

#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifndef BAD
#define BAD 0
#endif

enum { M = 5, K = 7, N = 3 };

static const int64_t shape_a[2] = {M, K}, shape_b[2] = {K, N}, shape_c[2] = {M, N};

static const struct kiln_abi_arg args[3] = {
    {"a", kDLFloat, 32, 1, 2, shape_a, 4, 0},
    {"b", kDLFloat, 32, 1, 2, shape_b, 4, 1},
    {"C", kDLFloat, 32, 1, 2, shape_c, 4, 2},
};

static volatile int forever = 1;

static int32_t
kernel(void *const *data)
{
    const float *a = data[0], *b = data[1];
    float       *c = data[2];
    if (BAD == 3)
        raise(SIGSEGV);
    if (BAD == 8)
        raise(SIGILL);
    if (BAD == 4)
        while (forever)
            ;
    if (BAD == 5)
        exit(3);
    if (BAD == 10) {
        struct timespec ts = {0, 500000000};
        nanosleep(&ts, NULL);
    }
    if (BAD == 6)
        abort();
    if (BAD == 7 || BAD == 9) {
        int64_t big = (int64_t)1 << 50;
        if (BAD == 9)
            big = (int64_t)sysconf(_SC_PHYS_PAGES) / 10 * 9 * (int64_t)sysconf(_SC_PAGESIZE);
        void *p = kiln_rt_alloc(big);
        if (!p)
            return KILN_ABI_ERR_NOMEM;
        kiln_rt_free(p);
    }
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            if (BAD == 2 && i == M - 1 && j == N - 1)
                continue;
            float s = 0;
            for (int64_t k = 0; k < K; k++)
                s += a[i * K + k] * b[k * N + j];
            c[i * N + j] = s;
        }
    }
    if (BAD == 1 || BAD == 11)
        c[7] += 0.5f;
    return KILN_ABI_OK;
}

/* BAD 11: PREPARE copies the weight into the prepared area, MAIN computes from the copy. */
static int32_t
kernel_phased(void *const *data, int32_t phase, void *prepared)
{
    const float *a = data[0];
    float       *pb = prepared, *c = data[2];
    if (phase & KILN_ABI_PHASE_PREPARE)
        for (int64_t e = 0; e < K * N; e++)
            pb[e] = ((const float *)data[1])[e];
    if (phase & KILN_ABI_PHASE_MAIN)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += a[i * K + k] * pb[k * N + j];
                c[i * N + j] = s;
            }
    return KILN_ABI_OK;
}

extern const struct kiln_abi_desc kiln_desc __attribute__((visibility("default")));
const struct kiln_abi_desc        kiln_desc = {
           KILN_ABI_VERSION,
           3,
           args,
           kernel,
           "{\"kiln_version\": \"0.1.0\", \"abi_version\": 2, \"name\": \"bad_mm\", \"graph_hash\": "
                  "\"0000000000000000\", \"target\": \"c\", \"args\": []}",
           "input a: f32[5, 7]\nweight b: f32[7, 3]\nC[i, j] += a[i, k] * b[k, j]\noutput C\n",
           kDLCPU,
    BAD == 11 ? kernel_phased : NULL,
    BAD == 11 ? (int64_t)sizeof(float) * K *N : 0,
           NULL,
           NULL,
};
