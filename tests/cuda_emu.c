/* tests/cuda_emu.c -- the CUDA C of kiln's emitter as C++ on the CPU (contract in cuda_emu.h). */
#include "cuda_emu.h"

#include "abi/so_build.h"
#include "harness.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char kiln_test_emu_prelude[] =
    "#include <math.h>\n#include <pthread.h>\n#include <stdint.h>\n#include <string.h>\n"
    "#include <atomic>\n"
    "struct kiln_emu_dim { unsigned x, y, z; };\n"
    "static thread_local kiln_emu_dim threadIdx, blockIdx;\n"
    "static pthread_barrier_t *kiln_emu_barrier;\n"
    "#define __global__\n#define __device__\n#define __forceinline__ inline\n"
    "#define __launch_bounds__(n)\n#define __shared__ static\n#define __align__(n) "
    "__attribute__((aligned(n)))\n"
    /* float4 / float2: a copy from memory (a vector load) and an assignment to it (a vector
     * store) are counted, and so are those not aligned to the vector's size */
    "static std::atomic<long> kiln_emu_nvec{0}, kiln_emu_nmis{0};\n"
    "static inline void kiln_emu_vec(const void *p, unsigned n)\n"
    "{ kiln_emu_nvec++; if ((uintptr_t)p % n) kiln_emu_nmis++; }\n"
    "extern \"C\" void kiln_emu_counts(long *nvec, long *nmis)\n"
    "{ *nvec = kiln_emu_nvec; *nmis = kiln_emu_nmis; }\n"
    "struct float4 { float x, y, z, w;\n"
    "  float4(float a, float b, float c, float d) : x(a), y(b), z(c), w(d) {}\n"
    "  float4(const float4 &o) : x(o.x), y(o.y), z(o.z), w(o.w) { kiln_emu_vec(&o, 16); }\n"
    "  float4 &operator=(const float4 &o)\n"
    "  { kiln_emu_vec(this, 16); x = o.x; y = o.y; z = o.z; w = o.w; return *this; } };\n"
    "struct float2 { float x, y;\n"
    "  float2(float a, float b) : x(a), y(b) {}\n"
    "  float2(const float2 &o) : x(o.x), y(o.y) { kiln_emu_vec(&o, 8); }\n"
    "  float2 &operator=(const float2 &o) { kiln_emu_vec(this, 8); x = o.x; y = o.y; return *this; "
    "}\n"
    "};\n"
    "static inline float4 make_float4(float a, float b, float c, float d)\n"
    "{ return float4(a, b, c, d); }\n"
    "static inline float2 make_float2(float a, float b) { return float2(a, b); }\n"
    "static inline void __syncthreads() { pthread_barrier_wait(kiln_emu_barrier); }\n"
    "static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "static inline double __longlong_as_double(long long i)\n"
    "{ double d; memcpy(&d, &i, 8); return d; }\n"
    "extern \"C\" void kiln_emu_set(unsigned bx, unsigned by, unsigned bz, unsigned tx,\n"
    "                               unsigned ty, unsigned tz, pthread_barrier_t *b)\n"
    "{ blockIdx = {bx, by, bz}; threadIdx = {tx, ty, tz}; kiln_emu_barrier = b; }\n";

bool
kiln_test_emu_append(kiln_ctx *ctx, struct kiln_buf *out, const char *ns, const char *src)
{
    static const char head[] = "extern \"C\" __global__ void __launch_bounds__(";
    kiln_buf_printf(ctx, out, "namespace %s {\n%s\n", ns, src);
    for (const char *k = strstr(src, head); k; k = strstr(k + 1, head)) {
        const char *name = strstr(k, ") "), *open = name ? strchr(name + 2, '(') : NULL;
        const char *e = open ? strstr(open, ")\n{") : NULL;
        if (!e)
            return false;
        name += 2;
        kiln_buf_printf(ctx, out, "extern \"C\" void kiln_emu_%.*s(void **a) { %.*s(",
                        (int)(open - name), name, (int)(open - name), name);
        const char *p = open + 1;
        for (uint32_t n = 0; p < e; n++) { /* "T *__restrict__ NAME, " */
            const char *r = strstr(p, " *__restrict__ ");
            const char *comma = strstr(p, ", ");
            if (!r || r > e)
                return false;
            kiln_buf_printf(ctx, out, "%s*(%.*s **)a[%u]", n ? ", " : "", (int)(r - p), p, n);
            p = comma && comma < e ? comma + 2 : e;
        }
        kiln_buf_puts(ctx, out, "); }\n");
    }
    return kiln_buf_puts(ctx, out, "}\n");
}

bool
kiln_test_emu_compile(const char *text, const char *so_path)
{
    char cpp[PATH_MAX + 8], cmd[2 * PATH_MAX + 128];
    snprintf(cpp, sizeof cpp, "%s.cpp", so_path);
    FILE *fp = fopen(cpp, "w");
    if (!fp)
        return false;
    bool ok = fputs(text, fp) >= 0;
    ok &= fclose(fp) == 0;
    snprintf(cmd, sizeof cmd, "c++ -std=c++17 -O1 -shared -fPIC -w -o '%s' '%s' -lpthread", so_path,
             cpp);
    ok = ok && system(cmd) == 0;
    unlink(cpp);
    return ok;
}

enum kiln_status
kiln_test_emu_module(kiln_ctx *ctx, const struct kiln_graph *g,
                     const struct kiln_compile_options *co, const char *so_path, const char *fault)
{
    char cu[PATH_MAX + 8], emu[PATH_MAX + 8];
    snprintf(cu, sizeof cu, "%s.emu.cu", so_path);
    snprintf(emu, sizeof emu, "%s.emu", so_path);
    KILN_TRY(kiln_graph_compile(ctx, g, co, cu, NULL));
    char *src = read_file(cu, NULL);
    unlink(cu);
    if (!src)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "test", "cannot read %s", cu);
    struct kiln_buf text = {0};
    bool            ok = kiln_buf_puts(ctx, &text, kiln_test_emu_prelude)
              && kiln_test_emu_append(ctx, &text, "kiln_module", src);
    free(src);
    if (ok && fault)
        ok = kiln_buf_printf(ctx, &text, "extern \"C\" const char kiln_emu_fault[] = \"%s\";\n",
                             fault);
    if (!ok)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "test", "cannot make the C++ of %s", so_path);
    if (!kiln_test_emu_compile(text.data, emu))
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "test", "c++ could not build %s", emu);
    return KILN_OK;
}

enum kiln_status
kiln_test_emu_hook(void *ud, kiln_ctx *ctx, const struct kiln_graph *g,
                   const struct kiln_compile_options *co, const char *so_path)
{
    (void)ud;
    if (!co->target || strncmp(co->target, "cuda", 4)) /* the reference's build for the host */
        return KILN_OK;
    return kiln_test_emu_module(ctx, g, co, so_path, NULL);
}

bool
kiln_test_emu_use_fake_driver(bool on)
{
    static char *orig; /* LD_LIBRARY_PATH before the first call, or NULL */
    static bool  saved;
    char         dir[PATH_MAX], lib[PATH_MAX + 32];
    if (!saved) {
        const char *o = getenv("LD_LIBRARY_PATH");
        orig = o ? strdup(o) : NULL;
        saved = true;
    }
    if (!on)
        return orig ? setenv("LD_LIBRARY_PATH", orig, 1) == 0 : unsetenv("LD_LIBRARY_PATH") == 0;
    if (!so_build_dir(dir, sizeof dir - 16)) {
        printf("cannot find the build directory\n");
        return false;
    }
    strcat(dir, "/fake_cuda_emu");
    snprintf(lib, sizeof lib, "%s/libcuda.so.1", dir);
    if (access(lib, R_OK) != 0) {
        printf("no fake CUDA driver: %s: %s\n", lib, strerror(errno));
        return false;
    }
    size_t n = strlen(dir) + (orig ? strlen(orig) : 0) + 2;
    char  *path = malloc(n);
    if (!path)
        return false;
    snprintf(path, n, "%s%s%s", dir, orig && *orig ? ":" : "", orig && *orig ? orig : "");
    bool ok = setenv("LD_LIBRARY_PATH", path, 1) == 0;
    free(path);
    return ok;
}
