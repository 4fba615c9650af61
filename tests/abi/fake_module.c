/* tests/abi/fake_module.c -- a hand-written stand-in for generated code: the constant
 * `kiln_desc` of a 5x7 by 7x3 matrix product with a parallel kernel, exactly what the code
 * generator emits, so that runtime/so_entry.c, the runtime in libkiln_rt.a and the module
 * loader can be tested without LLVM. The tests compile it into a shared object with
 *
 *     cc -shared -fPIC -fopenmp -Iinclude fake_module.c \
 *        -Wl,--whole-archive libkiln_rt.a -Wl,--no-whole-archive -o fake.so
 *
 * FAKE_ABI_VERSION (default KILN_ABI_VERSION) builds a module of another ABI version. The
 * kernel returns KILN_ABI_ERR_NOMEM when a[0] is -1234, to test error propagation. FAKE_BUG
 * plants a bug for `kiln run --check` to find: 1 a wrong element, 2 an element never written,
 * 3 a write past the end of C, 4 a write into the input a. */
#include "../../runtime/runtime.h"

#ifndef FAKE_BUG
#define FAKE_BUG 0
#endif
#ifndef FAKE_ABI_VERSION
#define FAKE_ABI_VERSION KILN_ABI_VERSION
#endif

enum { M = 5, K = 7, N = 3 };

static const int64_t shape_a[2] = {M, K}, shape_b[2] = {K, N}, shape_c[2] = {M, N};

static const struct kiln_abi_arg args[3] = {
    {"a", kDLFloat, 32, 1, 2, shape_a, 4, 0},
    {"b", kDLFloat, 32, 1, 2, shape_b, 4, 1},
    {"C", kDLFloat, 32, 1, 2, shape_c, 16, 2},
};

static int32_t
rows(int64_t begin, int64_t end, void *closure)
{
    void *const *data = closure;
    const float *a = data[0], *b = data[1];
    float       *c = data[2];
    for (int64_t i = begin; i < end; i++) {
        for (int64_t j = 0; j < N; j++) {
            if (FAKE_BUG == 2 && i == M - 1 && j == N - 1)
                continue;
            float s = 0;
            for (int64_t k = 0; k < K; k++)
                s += a[i * K + k] * b[k * N + j];
            c[i * N + j] = s;
        }
    }
    return 0;
}

static int32_t
kernel(void *const *data)
{
    float *a = data[0], *c = data[2];
    if (a[0] == -1234.0f)
        return KILN_ABI_ERR_NOMEM;
    int32_t st = kiln_rt_parallel_for(M, rows, (void *)data);
    if (FAKE_BUG == 1)
        c[7] += 0.5f;
    else if (FAKE_BUG == 3)
        c[M * N] = 1;
    else if (FAKE_BUG == 4)
        a[3] = 0;
    return st;
}

/* The declaration gives the definition default visibility in a -fvisibility=hidden build too. */
extern const struct kiln_abi_desc kiln_desc __attribute__((visibility("default")));
const struct kiln_abi_desc        kiln_desc = {
           FAKE_ABI_VERSION,
           3,
           args,
           kernel,
           "{\"kiln_version\": \"0.1.0\", \"abi_version\": 2, \"name\": \"fake_mm\", \"graph_hash\": "
                  "\"0000000000000000\", \"target\": \"c\", \"args\": [{\"name\": \"a\", \"dtype\": \"f32\", "
                  "\"shape\": [5, 7], \"role\": \"input\", \"align\": 4}, {\"name\": \"b\", \"dtype\": "
                  "\"f32\", \"shape\": [7, 3], \"role\": \"weight\", \"align\": 4}, {\"name\": \"C\", "
                  "\"dtype\": \"f32\", \"shape\": [5, 3], \"role\": \"output\", \"align\": 16}]}",
           "input a: f32[5, 7]\nweight b: f32[7, 3]\nC[i, j] += a[i, k] * b[k, j]\noutput C\n",
           kDLCPU,
           NULL,
           0,
           NULL,
           NULL,
};
