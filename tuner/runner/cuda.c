/* tuner/runner/cuda.c -- the runner's path for modules of the cuda target (their descriptor's
 * device is kDLCUDA), and the device probe (`kiln_measure_runner --cuda-probe`).
 *
 * The runner process owns the CUDA context: it loads the driver (runtime/cuda_drv.c:
 * libcuda.so.1 through dlopen), initialises it, retains device 0's primary context and makes
 * it current on its only thread. The module's kiln_call (kiln_rt_cuda_call, in the module's own
 * copy of the runtime, which dlopens the same libcuda.so.1) finds that context current and
 * launches on it. A driver fault, a crash or a hung kernel ends this process only; the tuner
 * records it and carries on. The context goes with the process.
 *
 * Measuring: every tensor gets a device buffer; the arguments are uploaded and the outputs
 * filled with NaN (float dtypes) or the byte 0xa5, as on the CPU. kiln_prepare once (untimed),
 * then the checked call, whose outputs are downloaded; a second untimed call (the first one also
 * loaded the module's PTX, which the driver JIT-compiles) estimates what a call costs; WARMUP
 * calls more; then REPEAT repeats, each timed by two CUDA events on the default stream around as
 * many calls as MIN_REPEAT_MS of wall time holds (at least one): a repeat's time per call is the
 * events' elapsed time over its calls. A kiln_call of a cuda module waits for its kernels, so
 * what is timed is the call as the module's user sees it (workspace allocation, launches, the
 * kernels, the wait). The budget and the hopeless rule are the CPU path's. Any failing call,
 * and any failing copy (a kernel's fault surfaces at the next synchronising call), is a
 * KILN_RUNNER_CALL reply with the driver's message. FLUSH and THREADS do not apply. */
#include "runner_int.h"

#include "../../runtime/cuda_drv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct kiln_cu_driver *drv;

static _Noreturn void
cu_fail(int status, const char *what, cu_result r)
{
    char buf[200];
    runner_fail(status, "%s failed: %s", what, kiln_cu_describe(r, buf, sizeof buf));
}

/* Loads the driver, opens device 0 into *dev and makes its primary context current. No driver
 * or no device is a KILN_RUNNER_NODEV reply (the messages of runtime/cuda.c's kiln_cuda_open). */
static void
open_device(cu_device *dev)
{
    char buf[200];
    drv = kiln_cu_drv();
    if (!drv->ok)
        runner_fail(KILN_RUNNER_NODEV, "no CUDA driver (%s)", drv->why);
    cu_result r = drv->init(0);
    if (r == CUDA_ERROR_NO_DEVICE)
        runner_fail(KILN_RUNNER_NODEV, "no CUDA device (cuInit: %s)",
                    kiln_cu_describe(r, buf, sizeof buf));
    if (r == CUDA_ERROR_STUB_LIBRARY)
        runner_fail(KILN_RUNNER_NODEV, "no CUDA driver (" DRIVER_LIB " is the toolkit's stub: %s)",
                    kiln_cu_describe(r, buf, sizeof buf));
    if (r != CUDA_SUCCESS)
        cu_fail(KILN_RUNNER_SETUP, "cuInit", r);
    int n = 0;
    r = drv->device_count(&n);
    if (r == CUDA_ERROR_NO_DEVICE || (r == CUDA_SUCCESS && n <= 0))
        runner_fail(KILN_RUNNER_NODEV, "no CUDA device (cuDeviceGetCount found none)");
    if (r != CUDA_SUCCESS)
        cu_fail(KILN_RUNNER_SETUP, "cuDeviceGetCount", r);
    cu_context c;
    if ((r = drv->device_get(dev, 0)) != CUDA_SUCCESS)
        cu_fail(KILN_RUNNER_SETUP, "cuDeviceGet", r);
    if ((r = drv->primary_retain(&c, *dev)) != CUDA_SUCCESS)
        cu_fail(KILN_RUNNER_SETUP, "cuDevicePrimaryCtxRetain", r);
    if ((r = drv->ctx_push(c)) != CUDA_SUCCESS)
        cu_fail(KILN_RUNNER_SETUP, "cuCtxPushCurrent_v2", r);
}

void
runner_cuda_probe(void)
{
    cu_device dev;
    int       major = 0, minor = 0;
    char      name[256] = "";
    cu_result r;
    open_device(&dev);
    if ((r = drv->device_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
            != CUDA_SUCCESS
        || (r = drv->device_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
               != CUDA_SUCCESS)
        cu_fail(KILN_RUNNER_SETUP, "cuDeviceGetAttribute", r);
    if ((r = drv->device_name(name, (int)sizeof name - 1, dev)) != CUDA_SUCCESS)
        cu_fail(KILN_RUNNER_SETUP, "cuDeviceGetName", r);
    snprintf(runner_reply.msg, sizeof runner_reply.msg, "sm_%d%d %s", major, minor, name);
    runner_finish(NULL, 0, NULL, 0);
}

/* One call; a failure ends the run with the module's message. */
static void
call(const struct runner *R, DLTensor *const *args, const char *which)
{
    char    err[512] = "";
    int32_t st = runner_invoke(R, args, err, sizeof err);
    if (st != KILN_ABI_OK) {
        runner_reply.abi_status = st;
        runner_fail(KILN_RUNNER_CALL, "%s%s", which, err[0] ? err : "kiln_call failed");
    }
}

void
runner_cuda(const struct runner *R)
{
    const struct kiln_runner_job *jh = &R->h;
    cu_device                     dev;
    cu_result                     r;
    open_device(&dev);
    DLTensor      *t = calloc(jh->nt, sizeof *t);
    DLTensor     **args = calloc(jh->nt, sizeof *args);
    cu_deviceptr  *dptr = calloc(jh->nt, sizeof *dptr);
    size_t         off = sizeof *jh + 8 * (size_t)jh->nt, fillcap = 0;
    unsigned char *fill = NULL;
    uint64_t       out_total = 0;
    if (!t || !args || !dptr)
        runner_fail(KILN_RUNNER_SETUP, "out of memory");
    for (uint32_t i = 0; i < jh->nt; i++) {
        const struct kiln_abi_arg *a = &R->desc->args[i];
        size_t                     n = (size_t)R->bytes[i];
        if ((r = drv->mem_alloc(&dptr[i], n ? n : 256)) != CUDA_SUCCESS) {
            char what[80];
            snprintf(what, sizeof what, "cuMemAlloc_v2 of %zu bytes", n);
            cu_fail(KILN_RUNNER_SETUP, what, r);
        }
        const void *src = R->job + off;
        if (i < jh->nin) {
            if (off + n > R->jlen)
                runner_fail(KILN_RUNNER_SETUP, "the job file is truncated");
            off += n;
        } else {
            /* NaN in every float element (0xff bytes are a NaN of any width); 0xa5 else */
            if (n > fillcap) {
                free(fill);
                if (!(fill = malloc(fillcap = n)))
                    runner_fail(KILN_RUNNER_SETUP, "out of memory");
            }
            memset(fill, a->code == kDLFloat || a->code == kDLBfloat ? 0xff : 0xa5, n);
            src = fill;
            out_total += n;
        }
        if (n && (r = drv->htod(dptr[i], src, n)) != CUDA_SUCCESS)
            cu_fail(KILN_RUNNER_SETUP, "cuMemcpyHtoD_v2", r);
        t[i] = (DLTensor){
            (void *)(uintptr_t)dptr[i], {kDLCUDA, 0}, a->ndim, {a->code, a->bits, a->lanes},
            (int64_t *)a->shape,        NULL,         0};
        args[i] = &t[i];
    }
    free(fill);

    runner_prepare(R, args);
    call(R, args, "");
    /* what is checked is the first call's outputs */
    unsigned char *first = malloc(out_total ? (size_t)out_total : 1);
    if (!first)
        runner_fail(KILN_RUNNER_SETUP, "out of memory");
    size_t o = 0;
    for (uint32_t i = jh->nin; i < jh->nt; i++) {
        size_t n = (size_t)R->bytes[i];
        if (n && (r = drv->dtoh(first + o, dptr[i], n)) != CUDA_SUCCESS)
            cu_fail(KILN_RUNNER_CALL, "cuMemcpyDtoH_v2 of the outputs", r);
        o += n;
    }
    double t0 = runner_now();
    call(R, args, "the second call: ");
    double est = runner_now() - t0; /* what one more call is expected to cost */
    long   warmup = R->warmup, repeat = R->repeat;
    if (R->hopeless > 0 && est > R->hopeless)
        warmup = 0, repeat = 1;
    for (long w = 0; w < warmup && runner_now() + est < R->soft_end; w++)
        call(R, args, "a warm-up call: ");

    cu_event ev[2];
    double  *times = calloc((size_t)repeat + 1, sizeof *times);
    long     done = 0;
    if (!times)
        runner_fail(KILN_RUNNER_SETUP, "out of memory");
    for (int k = 0; k < 2; k++)
        if ((r = drv->event_create(&ev[k], CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
            cu_fail(KILN_RUNNER_SETUP, "cuEventCreate", r);
    for (long rep = 0; rep < repeat; rep++) {
        double goal = (double)R->min_ms * 1e-3;
        if (rep > 0 && runner_now() + (goal > est ? goal : est) > R->soft_end)
            break; /* a slow kernel: fewer repeats rather than a timeout */
        uint32_t calls = 0;
        float    ms = 0;
        if ((r = drv->event_record(ev[0], NULL)) != CUDA_SUCCESS)
            cu_fail(KILN_RUNNER_CALL, "cuEventRecord", r);
        double w0 = runner_now();
        do {
            call(R, args, "a timed call: ");
            calls++;
        } while (runner_now() - w0 < goal);
        double wall = runner_now() - w0;
        if ((r = drv->event_record(ev[1], NULL)) != CUDA_SUCCESS)
            cu_fail(KILN_RUNNER_CALL, "cuEventRecord", r);
        if ((r = drv->event_sync(ev[1])) != CUDA_SUCCESS)
            cu_fail(KILN_RUNNER_CALL, "cuEventSynchronize", r);
        if ((r = drv->event_elapsed(&ms, ev[0], ev[1])) != CUDA_SUCCESS)
            cu_fail(KILN_RUNNER_CALL, "cuEventElapsedTime", r);
        times[rep] = (double)ms * 1e-3 / calls;
        est = wall / calls;
        done = rep + 1;
        runner_reply.ncalls = calls;
    }
    runner_finish(times, done, first, out_total);
}
