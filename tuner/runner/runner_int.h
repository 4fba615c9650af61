/* tuner/runner/runner_int.h -- internal to kiln_measure_runner: what main.c (the job, the module,
 * CPU modules) shares with cuda.c (modules of the cuda target, the device probe). */
#ifndef KILN_RUNNER_INT_H
#define KILN_RUNNER_INT_H

#include "runner.h"

#include "kiln_abi_impl.h"

#include <stddef.h>
#include <stdint.h>

/* The job and the module, as main() read and loaded them. */
struct runner {
    const unsigned char        *job; /* the job file: header, sizes, the arguments' bytes */
    size_t                      jlen;
    struct kiln_runner_job      h;
    const int64_t              *bytes; /* per tensor */
    const struct kiln_abi_desc *desc;
    kiln_call_fn                call;
    kiln_call_prepared_fn       call_prepared; /* NULL: no prepared calls */
    kiln_prepare_fn             prepare;       /* NULL unless call_prepared */
    long                        repeat, warmup, min_ms, flush, threads;
    double                      start;    /* when the runner started (s) */
    double                      soft_end; /* no warm-up call or repeat is started past this */
    double                      hopeless; /* a first call slower than this: one repeat (s) */
};

extern struct kiln_runner_reply runner_reply;

/* Writes to the tuner's pipe (_exit(4) when it is gone). */
void runner_put(const void *p, size_t n);
/* Sends a reply without outputs and exits. */
_Noreturn void runner_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double         runner_now(void);
/* The statistics of the repeat times times[0..n) (per call) into the reply, then the reply and
 * the first call's outputs (out_total bytes); exits. */
_Noreturn void runner_finish(double *times, long n, const unsigned char *first, uint64_t out_total);

/* kiln_prepare on args when the module has prepared calls (a failure is a KILN_RUNNER_CALL
 * reply); then runner_invoke makes the prepared call, else kiln_call. */
void    runner_prepare(const struct runner *r, DLTensor *const *args);
int32_t runner_invoke(const struct runner *r, DLTensor *const *args, char *err, size_t errsize);

/* A module of the cuda target: measured on device 0 (tuner/runner/cuda.c). */
_Noreturn void runner_cuda(const struct runner *r);
/* `kiln_measure_runner --cuda-probe`: opens device 0 and replies OK with "sm_XY NAME" in msg, or
 * KILN_RUNNER_NODEV with "no CUDA driver (...)" / "no CUDA device (...)". */
_Noreturn void runner_cuda_probe(void);

#endif
