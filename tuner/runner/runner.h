/* tuner/runner/runner.h -- internal: the protocol between tuner/measure.c and the measurement
 * runner, a small standalone program (tuner/runner/main.c, no libkiln) that loads one
 * generated shared object, calls it once on given inputs, times it and reports.
 *
 * Why a separate program: the runner is started with fork + exec, never with a bare fork. GNU
 * OpenMP keeps its thread pool across fork() without the threads, so a forked child of a
 * process that has run any OpenMP region (XGBoost training does) hangs in its first parallel
 * loop. A fresh program has a fresh OpenMP.
 *
 *     kiln_measure_runner JOB SO REPEAT WARMUP MIN_REPEAT_MS FLUSH THREADS BUDGET_MS [HOPELESS_US]
 *     kiln_measure_runner --cuda-probe
 *
 * FLUSH: 0 none, 1 every cache (a large buffer written before each call), 2 the weights and
 * the prepared buffers alone (clflush before each call).
 *
 * JOB is a file written once per measurer: struct kiln_runner_job, then nt int64 byte sizes
 * (the graph's arguments then its outputs, kiln_call order), then the arguments' bytes
 * back to back. The runner writes one struct kiln_runner_reply to its standard output,
 * followed (status OK) by the outputs' bytes of its first call, made on output buffers filled
 * with NaN (float dtypes) or the byte 0xa5 (other dtypes). Its own standard output is moved off
 * fd 1 first, so a kernel that prints cannot corrupt the reply.
 *
 * A module of the cuda target (its descriptor's device is kDLCUDA) is measured on CUDA device 0,
 * which the runner process opens itself (libcuda.so.1, dlopen'ed): the tuner never creates a
 * CUDA context, so a driver fault or a hung kernel ends the runner only. --cuda-probe opens
 * the device and replies OK with "sm_XY NAME" in msg, or KILN_RUNNER_NODEV saying why not. */
#ifndef KILN_RUNNER_H
#define KILN_RUNNER_H

#include <stdint.h>

#define KILN_RUNNER_JOB_MAGIC   "KILNJOB1"
#define KILN_RUNNER_REPLY_MAGIC "KILNRUN1"
#define KILN_RUNNER_MAX_TIMES   16

struct kiln_runner_job {
    char     magic[8];
    uint32_t nt;  /* tensors: arguments then outputs */
    uint32_t nin; /* of which arguments (inputs and weights) */
};

enum kiln_runner_status {
    KILN_RUNNER_OK = 0,
    KILN_RUNNER_SETUP, /* the job, the object or memory: not the candidate's fault alone */
    KILN_RUNNER_LOAD,  /* dlopen / not a kiln module / arguments differ from the job */
    KILN_RUNNER_CALL,  /* kiln_call returned an error (abi_status, msg) */
    KILN_RUNNER_NODEV, /* no CUDA driver or no CUDA device (msg says which) */
};

struct kiln_runner_reply {
    char     magic[8];
    int32_t  status;                       /* enum kiln_runner_status */
    int32_t  abi_status;                   /* kiln_call's status when status == CALL */
    uint32_t nrepeat;                      /* timed repeats made */
    uint32_t ncalls;                       /* kernel calls per repeat (last repeat) */
    double   median_s, stddev_s;           /* per call */
    double   times[KILN_RUNNER_MAX_TIMES]; /* per call, first repeats */
    uint64_t out_bytes;                    /* bytes that follow */
    char     msg[512];
};

#endif
