// examples/cpp/compile_call.cpp -- a C++ program using an installed libkiln through CMake's
// find_package(kiln): it compiles a small kernel graph from .kg text to a shared object,
// loads it, calls it on its inputs and checks the result against a product computed here.
//
//     cmake -S examples/cpp -B build-example -DCMAKE_PREFIX_PATH=PREFIX
//     cmake --build build-example && ./build-example/compile_call
//
// kiln.h is a C header with C linkage; the handles are held by std::unique_ptr here.
#include <kiln.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace
{

struct CtxFree {
    void operator()(kiln_ctx *c) const
    {
        kiln_ctx_free(c);
    }
};
struct ModuleFree {
    void operator()(kiln_module *m) const
    {
        kiln_module_free(m);
    }
};
using Ctx = std::unique_ptr<kiln_ctx, CtxFree>;
using Module = std::unique_ptr<kiln_module, ModuleFree>;

// Throws with kiln's message when st is not KILN_OK.
void
check(kiln_ctx *ctx, kiln_status st, const char *what)
{
    if (st == KILN_OK)
        return;
    char msg[1024];
    kiln_error_format(kiln_ctx_error(ctx), msg, sizeof msg);
    throw std::runtime_error(std::string(what) + ": " + msg);
}

// A temporary directory removed with everything in it at the end of the scope.
struct TempDir {
    std::string path;
    TempDir()
    {
        const char       *t = std::getenv("TMPDIR");
        std::string       tmpl = std::string(t && *t ? t : "/tmp") + "/kiln-example-XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (!mkdtemp(buf.data()))
            throw std::runtime_error("mkdtemp failed");
        path = buf.data();
    }
    ~TempDir()
    {
        rmdir(path.c_str());
    }
};

constexpr int M = 16, K = 32, N = 8;

// C = A B (f32) as a compute definition, then D = relu(C) from the op library.
const std::string graph = "input  A: f32[" + std::to_string(M) + ", " + std::to_string(K)
                          + "]\n"
                            "input  B: f32["
                          + std::to_string(K) + ", " + std::to_string(N)
                          + "]\n"
                            "C[i, j] += A[i, k] * B[k, j]\n"
                            "D = relu(C)\n"
                            "output D\n";

int
run()
{
    Ctx ctx(kiln_ctx_new(nullptr));
    if (!ctx)
        throw std::runtime_error("kiln_ctx_new failed");
    kiln_graph *g = nullptr; // owned by the context
    check(ctx.get(), kiln_graph_parse(ctx.get(), graph.data(), graph.size(), "mm.kg", &g), "parse");
    TempDir     dir;
    std::string so = dir.path + "/mm.so";
    struct Unlink {
        std::string p;
        ~Unlink()
        {
            unlink(p.c_str());
        }
    } cleanup{so};
    check(ctx.get(), kiln_graph_compile(ctx.get(), g, nullptr, so.c_str(), nullptr), "compile");
    kiln_module *raw = nullptr;
    check(ctx.get(), kiln_module_load(ctx.get(), so.c_str(), &raw), "load");
    Module module(raw);

    std::vector<float> a(M * K), b(K * N), d(M * N, -1.0f), want(M * N);
    for (int i = 0; i < M * K; i++)
        a[i] = static_cast<float>((i * 7) % 11) / 8 - 0.5f;
    for (int i = 0; i < K * N; i++)
        b[i] = static_cast<float>((i * 5) % 13) / 16 - 0.25f;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += static_cast<double>(a[i * K + k]) * b[k * N + j];
            want[i * N + j] = static_cast<float>(s > 0 ? s : 0);
        }
    }
    int64_t   sa[2] = {M, K}, sb[2] = {K, N}, sd[2] = {M, N};
    DLTensor  ta{a.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sa, nullptr, 0};
    DLTensor  tb{b.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sb, nullptr, 0};
    DLTensor  td{d.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sd, nullptr, 0};
    DLTensor *args[3] = {&ta, &tb, &td};
    check(ctx.get(), kiln_module_call(ctx.get(), module.get(), args, 3, nullptr), "call");

    int bad = 0;
    for (int i = 0; i < M * N; i++) {
        if (!(std::fabs(d[i] - want[i]) <= 1e-4f * (1 + std::fabs(want[i])))) {
            if (bad++ < 5)
                std::fprintf(stderr, "compile_call: D[%d] = %g, expected %g\n", i, d[i], want[i]);
        }
    }
    if (bad)
        return 1;
    std::printf("compile_call: ok (%dx%d product with relu matches)\n", M, N);
    return 0;
}

} // namespace

int
main()
{
    try {
        return run();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "compile_call: %s\n", e.what());
        return 1;
    }
}
