/* tests/cuda_emu.h -- running the CUDA C of kiln's emitter (codegen/cuda.c) on the CPU, for tests
 * on machines without a GPU.
 *
 * The kernels are compiled as C++ with a stand-in for CUDA (kiln_test_emu_prelude: blockIdx and
 * threadIdx thread-local, __shared__ a static the threads of a block share, __syncthreads a
 * pthread barrier, float4/float2 accesses counted, and so are those not aligned to their size)
 * into a shared object that exports, for each kernel NAME, `extern "C" void
 * kiln_emu_NAME(void **params)`, params[i] pointing at the value of the kernel's parameter i
 * (the CUDA driver's convention for cuLaunchKernel), and `kiln_emu_set(bx, by, bz, tx, ty, tz,
 * barrier)`, which a launcher calls in each thread before running it, blocks one after another
 * and a block's threads at once as real threads. test_cuda launches such kernels itself;
 * tests/measure/fake_cuda.c, a stand-in for the CUDA driver built as libcuda.so.1, launches
 * the emulation of a whole module of the cuda target (kiln_test_emu_module), so that the
 * measurement runner and the module's own launch code run unchanged. Test code only (it uses
 * system() and the environment). */
#ifndef KILN_TESTS_CUDA_EMU_H
#define KILN_TESTS_CUDA_EMU_H

#include "../include/kiln.h"
#include "../util/util.h"

#include <stdbool.h>

extern const char kiln_test_emu_prelude[];

/* Appends CUDA C src (kiln_cg_cuda_source's text) inside namespace ns, then the kiln_emu_NAME
 * entry point of each of its kernels; false when a kernel's head is not understood. */
bool kiln_test_emu_append(kiln_ctx *ctx, struct kiln_buf *out, const char *ns, const char *src);
/* Compiles C++ text into the shared object so_path with the system's C++ compiler (output to
 * stderr); false on failure. */
bool kiln_test_emu_compile(const char *text, const char *so_path);

/* The emulation of the module of the cuda target that kiln_graph_compile(ctx, g, co, so_path, NULL)
 * made: its CUDA C (compiled again the same way, so the same kernels, parameters and
 * workspace) as a shared object SO_PATH.emu, which tests/measure/fake_cuda.c loads for the
 * module. fault, for tests of failing candidates: NULL, or what the fake driver makes of the
 * module: "wrong" (the first output element downloaded is off by 1), "skip" (kernels never
 * run: outputs unwritten), "crash" (SIGSEGV in a launch), "hang" (a launch never returns),
 * "launch" (launches fail: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), "fault" (a launch leaves
 * CUDA_ERROR_ILLEGAL_ADDRESS, reported at the next synchronisation), "slow" (each launch takes
 * 100 ms more, its results right). */
enum kiln_status kiln_test_emu_module(kiln_ctx *ctx, const struct kiln_graph *g,
                                      const struct kiln_compile_options *co, const char *so_path,
                                      const char *fault);
/* A kiln_measure_opts.build_hook: the emulation of every module of the cuda target built (no
 * fault); builds for other targets (the host's reference) are left alone. */
enum kiln_status kiln_test_emu_hook(void *ud, kiln_ctx *ctx, const struct kiln_graph *g,
                                    const struct kiln_compile_options *co, const char *so_path);
/* on: puts the fake driver's directory (fake_cuda_emu/ beside the test binary) first on
 * LD_LIBRARY_PATH, for the processes started from now on (this process's own dlopen keeps the
 * path it started with); false, with the reason printed, when it is not built. off: the
 * LD_LIBRARY_PATH of before the first call again. */
bool kiln_test_emu_use_fake_driver(bool on);

#endif
