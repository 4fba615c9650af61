/* codegen/nvrtc.h -- internal: CUDA C to PTX with NVRTC, and checking PTX with the toolkit's
 * ptxas. Nothing CUDA is linked at build time: libnvrtc is loaded with dlopen on first use (and
 * kept for the life of the process), ptxas is run as a program. Both are optional: without them
 * these calls fail with KILN_ERR_UNSUPPORTED and the CPU parts of kiln are unaffected.
 *
 * Where they are looked for: /usr/local/cuda (lib64/libnvrtc.so, bin/ptxas), then the library path
 * ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2") or PATH ("ptxas"). */
#ifndef KILN_NVRTC_H
#define KILN_NVRTC_H

#include "../util/util.h"

/* Compiles the CUDA C translation unit src, named name (e.g. "kiln_kernel.cu", the name in
 * NVRTC's messages), to PTX for arch ("sm_80", "sm_90", "sm_90a": compiled for the virtual
 * architecture compute_XX, so the PTX says ".target sm_XX"), with -default-device and, when
 * fast_math, --use_fast_math. *ptx is NUL-terminated and ctx-owned. Errors: KILN_ERR_INVALID
 * for a NULL argument or a malformed arch; KILN_ERR_UNSUPPORTED "no NVRTC (why)" when libnvrtc
 * cannot be loaded, or when this NVRTC cannot compile for arch; KILN_ERR_BACKEND "NVRTC:
 * compiling NAME for ARCH failed" with NVRTC's program log in the error's detail. */
enum kiln_status kiln_nvrtc_ptx(kiln_ctx *ctx, const char *src, const char *name, const char *arch,
                                bool fast_math, const char **ptx);
/* True when libnvrtc can be loaded (loads it on the first call). */
bool kiln_nvrtc_available(void);
/* NVRTC's version as major * 1000 + minor * 10 (13000 for 13.0); 0 when it cannot be loaded. */
int kiln_nvrtc_version(void);

/* Assembles ptx with ptxas for arch ("sm_80") into a scratch file in a private temporary
 * directory (kiln_ctx_set_tmp_dir's, else the system's), and discards the result. KILN_OK when
 * ptxas accepts it; KILN_ERR_BACKEND with ptxas's output in the error's detail when it refuses;
 * KILN_ERR_INVALID for a malformed arch; KILN_ERR_UNSUPPORTED "no ptxas (...)" when none is found.
 */
enum kiln_status kiln_ptxas_check(kiln_ctx *ctx, const char *ptx, const char *arch);

#endif
