/* benchmarks/kernel.h -- a kiln kernel as a benchmark calls it: compiled to a shared object
 * (with a schedule, or with the best tuning records), loaded with dlopen and called through
 * the generated-code ABI (include/kiln_abi.h) with DLPack tensors, as a user would: weights
 * prepared once, then the prepared call. */
#ifndef KILN_BENCH_KERNEL_H
#define KILN_BENCH_KERNEL_H

#include "kiln.h"
#include "kiln_abi.h"

#define BENCH_MAX_ARGS 4

struct kernel {
    void                   *so;
    kiln_call_fn            call;
    kiln_set_num_threads_fn threads;
    kiln_prepare_fn         prepare; /* NULL in modules without prepared calls */
    kiln_call_prepared_fn   call_prepared;
    void                   *prepared; /* made by the first kernel_run */
    int                     nargs;
    DLTensor                t[BENCH_MAX_ARGS];
    int64_t                 shape[BENCH_MAX_ARGS][4];
};

/* Compiles kg (with schedule sched, or NULL; or, when db is not NULL, with the best records
 * of db) and loads it. Returns 0 on success, prints the error and returns 1 otherwise. */
int  kernel_build(const char *name, const char *kg, const char *sched, const char *db,
                  struct kernel *k);
void kernel_tensor(struct kernel *k, int i, float *data, int ndim, const int64_t *shape);
/* One call; exits on an ABI error. The first call prepares the module (kiln_prepare: its
 * weight-derived buffers, e.g. packed weights, from the weights set then) and every call is
 * kiln_call_prepared, the steady state of a user with fixed weights; set all tensors (and
 * their contents) before the first call. */
void   kernel_run(void *k);
float *bench_randv(size_t n, unsigned seed); /* 64-byte aligned, uniform in [-1, 1) */
double bench_max_rel_err(const float *a, const float *b, size_t n);

#endif
