/* benchmarks/gpu_sched.c -- bench_gpu's workloads and hand-written GPU schedules (gpu_sched.h).
 *
 * Both schedules have the shape the tuner's GPU tiling sketch gives (tuner/sketch_gpu.c,
 * "SSSRRSRS"): the output tiled, the outer tile loops bound to blocks, an outer part of the
 * reduction next, then the thread loops, the rest of the reduction and each thread's few
 * outputs; a reused operand's tile for one step of the outer reduction copied into shared
 * memory at that loop, filled by the block's threads together (codegen/README.md puts the
 * barriers). Outputs accumulate in place; the innermost loops are unrolled so that the
 * compiler keeps them in registers within a step. They are a reasonable start, not tuned:
 * tuning records (bench_gpu --db) are what kiln is meant to be measured with. */
#include "gpu_sched.h"

#include <stdio.h>

void
gpu_matmul_kg(char *buf, size_t size, int M, int N, int K)
{
    snprintf(buf, size,
             "input A: f32[%d, %d]\nweight B: f32[%d, %d]\nC[i, j] += A[i, k] * B[k, j]\n"
             "output C\n",
             M, K, K, N);
}

const char gpu_matmul_schedule[] =
    "{\"steps\": [\n"
    " {\"op\": \"cache_read\", \"stage\": \"A\", \"readers\": [\"C\"], \"scope\": \"shared\"},\n"
    " {\"op\": \"cache_read\", \"stage\": \"B\", \"readers\": [\"C\"], \"scope\": \"shared\"},\n"
    " {\"op\": \"split\", \"stage\": \"C\", \"iter\": \"i\", \"factors\": [16, 4]},\n"
    " {\"op\": \"split\", \"stage\": \"C\", \"iter\": \"j\", \"factors\": [16, 4]},\n"
    " {\"op\": \"split\", \"stage\": \"C\", \"iter\": \"k\", \"factors\": [8]},\n"
    " {\"op\": \"reorder\", \"stage\": \"C\", \"order\": [\"i.0\", \"j.0\", \"k.0\", \"i.1\", "
    "\"j.1\", \"k.1\", \"i.2\", \"j.2\"]},\n"
    " {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.0\", \"thread\": \"blockIdx.y\"},\n"
    " {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.0\", \"thread\": \"blockIdx.x\"},\n"
    " {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"i.1\", \"thread\": \"threadIdx.y\"},\n"
    " {\"op\": \"bind\", \"stage\": \"C\", \"iter\": \"j.1\", \"thread\": \"threadIdx.x\"},\n"
    " {\"op\": \"unroll\", \"stage\": \"C\", \"iter\": \"k.1\"},\n"
    " {\"op\": \"unroll\", \"stage\": \"C\", \"iter\": \"i.2\"},\n"
    " {\"op\": \"unroll\", \"stage\": \"C\", \"iter\": \"j.2\"},\n"
    " {\"op\": \"compute_at\", \"stage\": \"A.cache\", \"target\": \"C\", \"iter\": \"k.0\"},\n"
    " {\"op\": \"compute_at\", \"stage\": \"B.cache\", \"target\": \"C\", \"iter\": \"k.0\"},\n"
    " {\"op\": \"fuse\", \"stage\": \"A.cache\", \"iters\": [\"i0\", \"i1\"]},\n"
    " {\"op\": \"split\", \"stage\": \"A.cache\", \"iter\": \"i0@i1\", \"factors\": [16, 16]},\n"
    " {\"op\": \"bind\", \"stage\": \"A.cache\", \"iter\": \"i0@i1.1\", \"thread\": "
    "\"threadIdx.y\"},\n"
    " {\"op\": \"bind\", \"stage\": \"A.cache\", \"iter\": \"i0@i1.2\", \"thread\": "
    "\"threadIdx.x\"},\n"
    " {\"op\": \"fuse\", \"stage\": \"B.cache\", \"iters\": [\"i0\", \"i1\"]},\n"
    " {\"op\": \"split\", \"stage\": \"B.cache\", \"iter\": \"i0@i1\", \"factors\": [16, 16]},\n"
    " {\"op\": \"bind\", \"stage\": \"B.cache\", \"iter\": \"i0@i1.1\", \"thread\": "
    "\"threadIdx.y\"},\n"
    " {\"op\": \"bind\", \"stage\": \"B.cache\", \"iter\": \"i0@i1.2\", \"thread\": "
    "\"threadIdx.x\"}\n"
    "]}\n";

void
gpu_conv3x3_kg(char *buf, size_t size, int C, int K, int H, int W)
{
    snprintf(buf, size,
             "input x: f32[1, %d, %d, %d]\nweight w: f32[%d, %d, 3, 3]\n"
             "y[n, k, h, q] += select(h + rh >= 1 && h + rh <= %d && q + rw >= 1 && q + rw <= "
             "%d,\n"
             "                        x[n, c, h + rh - 1, q + rw - 1], 0.0) * w[k, c, rh, rw]\n"
             "    where h < %d, q < %d\n"
             "output y\n",
             C, H, W, K, C, H, W, H, W);
}

const char gpu_conv3x3_schedule[] =
    "{\"steps\": [\n"
    " {\"op\": \"cache_read\", \"stage\": \"w\", \"readers\": [\"y\"], \"scope\": \"shared\"},\n"
    " {\"op\": \"split\", \"stage\": \"y\", \"iter\": \"k\", \"factors\": [8, 4]},\n"
    " {\"op\": \"split\", \"stage\": \"y\", \"iter\": \"h\", \"factors\": [4]},\n"
    " {\"op\": \"split\", \"stage\": \"y\", \"iter\": \"q\", \"factors\": [7]},\n"
    " {\"op\": \"split\", \"stage\": \"y\", \"iter\": \"c\", \"factors\": [8]},\n"
    /* n k.0 k.1 k.2 h.0 h.1 q.0 q.1 rh rw c.0 c.1 -> n k.0 h.0 q.0 c.0 k.1 h.1 q.1 c.1 rh rw k.2
     * (a reorder names at most 8 loops) */
    " {\"op\": \"reorder\", \"stage\": \"y\", \"order\": [\"h.0\", \"q.0\", \"c.0\", "
    "\"k.1\", \"h.1\", \"q.1\", \"c.1\", \"k.2\"]},\n"
    " {\"op\": \"reorder\", \"stage\": \"y\", \"order\": [\"c.1\", \"rh\", \"rw\"]},\n"
    " {\"op\": \"fuse\", \"stage\": \"y\", \"iters\": [\"n\", \"k.0\"]},\n"
    " {\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"n@k.0\", \"thread\": \"blockIdx.y\"},\n"
    " {\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"h.0\", \"thread\": \"blockIdx.x\"},\n"
    " {\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"q.0\", \"thread\": \"blockIdx.z\"},\n"
    " {\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"k.1\", \"thread\": \"threadIdx.z\"},\n"
    " {\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"h.1\", \"thread\": \"threadIdx.y\"},\n"
    " {\"op\": \"bind\", \"stage\": \"y\", \"iter\": \"q.1\", \"thread\": \"threadIdx.x\"},\n"
    " {\"op\": \"unroll\", \"stage\": \"y\", \"iter\": \"rh\"},\n"
    " {\"op\": \"unroll\", \"stage\": \"y\", \"iter\": \"rw\"},\n"
    " {\"op\": \"unroll\", \"stage\": \"y\", \"iter\": \"k.2\"},\n"
    " {\"op\": \"compute_at\", \"stage\": \"w.cache\", \"target\": \"y\", \"iter\": \"c.0\"},\n"
    " {\"op\": \"fuse\", \"stage\": \"w.cache\", \"iters\": [\"i0\", \"i1\", \"i2\", \"i3\"]},\n"
    " {\"op\": \"split\", \"stage\": \"w.cache\", \"iter\": \"i0@i1@i2@i3\", \"factors\": [8, 4, "
    "7]},\n"
    " {\"op\": \"bind\", \"stage\": \"w.cache\", \"iter\": \"i0@i1@i2@i3.1\", \"thread\": "
    "\"threadIdx.z\"},\n"
    " {\"op\": \"bind\", \"stage\": \"w.cache\", \"iter\": \"i0@i1@i2@i3.2\", \"thread\": "
    "\"threadIdx.y\"},\n"
    " {\"op\": \"bind\", \"stage\": \"w.cache\", \"iter\": \"i0@i1@i2@i3.3\", \"thread\": "
    "\"threadIdx.x\"}\n"
    "]}\n";
