/* runtime/parallel.c -- what generated code calls at run time: the parallel-for over OpenMP,
 * the thread count, aligned scratch memory and a monotonic clock.
 *
 * kiln_rt_parallel_for splits [0, n) into one contiguous chunk per thread (the first n % T
 * threads get one extra iteration, as OpenMP's static schedule does) and calls the outlined
 * body once per chunk, so a body sees each iteration exactly once and can hoist work out of its
 * own loop. The first nonzero status a body returns wins (a compare-and-swap from 0); the other
 * threads finish their chunk. A call made while already inside a parallel region (a parallel
 * loop nested in another, or a kernel called from the caller's own OpenMP team) runs serially
 * in the calling thread: nested teams would oversubscribe the cores.
 *
 * The thread count is this copy of the runtime's own setting, passed as num_threads to each
 * region, never omp_set_num_threads: that would change the caller's OpenMP (PyTorch's, say).
 * Each generated shared object links its own copy of this file, hence its own setting.
 *
 * Linked into generated shared objects (libkiln_rt.a) and libkiln; depends on libc and OpenMP
 * only. */
#include "runtime.h"

#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define ALLOC_ALIGN 64

static atomic_int num_threads; /* 0 = OpenMP's default (all cores unless OMP_NUM_THREADS) */

void
kiln_rt_set_num_threads(int32_t n)
{
    atomic_store(&num_threads, n > 0 ? n : 0);
}

int32_t
kiln_rt_num_threads(void)
{
    int n = atomic_load(&num_threads);
    if (n > 0)
        return n;
    n = omp_get_max_threads();
    return n > 0 ? n : 1;
}

int32_t
kiln_rt_parallel_for(int64_t n, kiln_rt_body_fn body, void *closure)
{
    if (!body)
        return KILN_ABI_ERR_RUNTIME;
    if (n <= 0)
        return KILN_ABI_OK;
    int64_t want = kiln_rt_num_threads();
    if (want > n)
        want = n;
    if (want <= 1 || omp_in_parallel())
        return body(0, n, closure);

    atomic_int status = 0;
#pragma omp parallel num_threads((int)want)
    {
        int64_t nt = omp_get_num_threads();
        int64_t t = omp_get_thread_num();
        int64_t q = n / nt, r = n % nt;
        int64_t begin = t * q + (t < r ? t : r);
        int64_t end = begin + q + (t < r ? 1 : 0);
        if (begin < end) {
            int32_t st = body(begin, end, closure);
            if (st != 0) {
                int expected = 0;
                atomic_compare_exchange_strong(&status, &expected, st);
            }
        }
    }
    return atomic_load(&status);
}

void *
kiln_rt_alloc(int64_t bytes)
{
    if (bytes <= 0 || bytes > INT64_MAX - (ALLOC_ALIGN - 1))
        return NULL;
    uint64_t rounded = ((uint64_t)bytes + (ALLOC_ALIGN - 1)) & ~(uint64_t)(ALLOC_ALIGN - 1);
    if (rounded > (uint64_t)PTRDIFF_MAX)
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, ALLOC_ALIGN, (size_t)rounded) != 0)
        return NULL;
    return p;
}

void
kiln_rt_free(void *p)
{
    free(p);
}

double
kiln_rt_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
