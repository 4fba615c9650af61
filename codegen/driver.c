/* codegen/driver.c -- the compile pipeline behind the public API: parse the target and the
 * schedule, lower the graph (passes/), describe the module (metadata JSON, source text,
 * argument roles) and hand it to the LLVM backend, or, for the cuda target, emit CUDA C
 * (codegen/cuda.c) and compile it with NVRTC. Each step's error is already in the
 * context; the driver adds nothing but order, and writes the output to a temporary file
 * beside it that is renamed into place only when complete. */
#include "codegen.h"

#include "../passes/passes.h"
#include "nvrtc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct built {
    struct kiln_target        target;
    struct kiln_cg_module     m;
    struct kiln_memory_report mem; /* of the flat loop nest; zeros for an unflattened one */
};

void
kiln_ctx_set_memplan(kiln_ctx *ctx, int on)
{
    if (ctx)
        ctx->no_memplan = !on;
}

enum kiln_status
kiln_ctx_set_tmp_dir(kiln_ctx *ctx, const char *dir)
{
    if (!ctx)
        return KILN_ERR_INVALID;
    uint32_t id = dir && *dir ? kiln_sym_cstr(ctx, dir) : 0;
    if (dir && *dir && !id)
        return ctx->err.status;
    ctx->tmp_dir = id;
    return KILN_OK;
}

enum kiln_status
kiln_cg_mkdtemp(kiln_ctx *ctx, const char *who, char *dir, size_t size)
{
    const char *base = ctx->tmp_dir ? kiln_sym_str(ctx, ctx->tmp_dir) : P_tmpdir;
    int         n = snprintf(dir, size, "%s/kiln-XXXXXX", base);
    if (n < 0 || (size_t)n >= size)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, who, "%s: the temporary directory %s is too long",
                         who, base);
    if (!mkdtemp(dir))
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, who, "%s: cannot create a directory in %s: %s", who,
                         base, strerror(errno));
    return KILN_OK;
}

static enum kiln_arg_role
role_of(const struct kiln_graph *g, const struct kiln_func *f, uint32_t i)
{
    uint32_t tensor = f->buf[f->param[i]].tensor;
    return i >= g->narg                                   ? KILN_ARG_OUTPUT
           : g->tensor[tensor].kind == KILN_TENSOR_WEIGHT ? KILN_ARG_WEIGHT
                                                          : KILN_ARG_INPUT;
}

/* Plans f's memory (unless the context says not to) and reports it in *out. */
static enum kiln_status
plan_memory(kiln_ctx *ctx, const struct kiln_graph *g, struct kiln_func *f,
            struct kiln_memory_report *out)
{
    int64_t unplanned;
    KILN_TRY(kiln_pass_memplan(f, !ctx->no_memplan, &unplanned));
    KILN_TRY(kiln_func_verify(f, true));
    struct kiln_memory_report r = {.workspace = ctx->no_memplan ? unplanned : f->ws_bytes,
                                   .workspace_unplanned = unplanned};
    for (uint32_t i = 0; i < f->nparam; i++) {
        enum kiln_arg_role role = role_of(g, f, i);
        int64_t            bytes = 0; /* graph tensors have at most 2^40 elements */
        kiln_buffer_bytes(&f->buf[f->param[i]], &bytes);
        *(role == KILN_ARG_INPUT    ? &r.inputs
          : role == KILN_ARG_WEIGHT ? &r.weights
                                    : &r.outputs) += bytes;
    }
    r.peak = r.weights + r.inputs + r.outputs + r.workspace + f->prep_bytes;
    *out = r;
    return KILN_OK;
}

static const char *
role_name(uint8_t r)
{
    return r == KILN_ARG_INPUT ? "input" : r == KILN_ARG_WEIGHT ? "weight" : "output";
}

/* The values to embed per parameter (NULL: an argument), or NULL when nothing is embedded:
 * the weights given values for, on a CPU target. */
static enum kiln_status
embedded_of(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_func *f,
            const struct kiln_target *t, const double *const *weights, const double *const **out)
{
    *out = NULL;
    if (!weights || kiln_target_is_cuda(t))
        return KILN_OK;
    const double **w = kiln_arena_alloc(ctx, sizeof *w * (f->nparam + 1));
    if (!w)
        return ctx->err.status;
    bool any = false;
    for (uint32_t i = 0; i < f->nparam; i++) {
        w[i] = NULL;
        if (role_of(g, f, i) != KILN_ARG_WEIGHT || !weights[i])
            continue;
        if (f->buf[f->param[i]].tensor != g->arg[i])
            return KILN_FAIL(ctx, KILN_ERR_INTERNAL, "codegen",
                             "parameter %u is not graph argument %u", i, i);
        w[i] = weights[i];
        any = true;
    }
    *out = any ? w : NULL;
    return KILN_OK;
}

static enum kiln_status
describe(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_func *f,
         const struct kiln_target *t, const struct kiln_memory_report *mr, const char *name,
         const double *const *weights, struct kiln_cg_module *m)
{
    uint8_t             *role = kiln_arena_alloc(ctx, f->nparam + 1);
    const double *const *embed;
    if (!role)
        return ctx->err.status;
    KILN_TRY(embedded_of(ctx, g, f, t, weights, &embed));
    for (uint32_t i = 0; i < f->nparam; i++)
        role[i] = (uint8_t)role_of(g, f, i);
    struct kiln_buf js = {0};
    bool            ok = kiln_buf_printf(
                   ctx, &js,
                   "{\"kiln_version\": \"%s\", \"abi_version\": %d, "
                              "\"name\": \"%s\", \"graph_hash\": \"%016" PRIx64 "\", \"target\": \"%s\", \"args\": [",
                   KILN_VERSION, KILN_ABI_VERSION, name, kiln_graph_hash(g), kiln_cg_target_str(ctx, t));
    /* "args": what a caller passes; "embedded": the weights built in (only when there are) */
    for (int pass = 0; pass < (embed ? 2 : 1); pass++) {
        if (pass)
            ok = ok && kiln_buf_printf(ctx, &js, "], \"embedded\": [");
        bool first = true;
        for (uint32_t i = 0; ok && i < f->nparam; i++) {
            if ((embed && embed[i]) != (pass == 1))
                continue;
            const struct kiln_buffer *b = &f->buf[f->param[i]];
            ok = kiln_buf_printf(ctx, &js, "%s{\"name\": \"%s\", \"dtype\": \"%s\", \"shape\": [",
                                 first ? "" : ", ", kiln_sym_str(ctx, b->name),
                                 kiln_dtype_name((enum kiln_dtype)b->dtype));
            first = false;
            for (int d = 0; ok && d < b->ndim; d++)
                ok = kiln_buf_printf(ctx, &js, "%s%" PRId64, d ? ", " : "", b->shape[d]);
            ok = ok
                 && kiln_buf_printf(ctx, &js, "], \"role\": \"%s\", \"align\": %u}",
                                    role_name(role[i]), b->align);
        }
    }
    ok = ok
         && kiln_buf_printf(ctx, &js,
                            "], \"weights_bytes\": %" PRId64 ", \"inputs_bytes\": %" PRId64
                            ", \"outputs_bytes\": %" PRId64 ", \"workspace_bytes\": %" PRId64
                            ", \"workspace_unplanned_bytes\": %" PRId64 ", \"peak_bytes\": %" PRId64
                            ", \"prepared_bytes\": %" PRId64 "}",
                            mr->weights, mr->inputs, mr->outputs, mr->workspace,
                            mr->workspace_unplanned, mr->peak, f->prep_bytes);
    if (!ok)
        return ctx->err.status;
    const char *src;
    KILN_TRY(kiln_graph_print(ctx, g, 0, &src));
    m->f = f;
    m->name = name;
    m->role = role;
    m->embed = embed;
    m->metadata = js.data;
    m->source = src;
    return KILN_OK;
}

static enum kiln_status
build(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_compile_options *opt, bool flat,
      struct built *b, struct kiln_func **fout)
{
    struct kiln_schedule sched = {0};
    struct kiln_func    *f;
    memset(b, 0, sizeof *b);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    KILN_TRY(kiln_cg_target_parse(ctx, opt && opt->target ? opt->target : "llvm", &b->target));
    if (opt && opt->schedule_json)
        KILN_TRY(kiln_sched_from_json(ctx, opt->schedule_json, opt->schedule_len, &sched));
    if (flat)
        KILN_TRY(kiln_lower(ctx, g, &sched, &f));
    else
        KILN_TRY(kiln_lower_unflat(ctx, g, &sched, &f));
    if (flat)
        KILN_TRY(plan_memory(ctx, g, f, &b->mem));
    if (kiln_target_is_cuda(&b->target)) /* the metadata states it, kiln_call checks it */
        kiln_cg_cuda_align_params(f);
    *fout = f;
    return KILN_OK;
}

static bool
ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcmp(s + n - k, suffix);
}

/* The cuda target: CUDA C (PATH.cu), PTX compiled by NVRTC (PATH.ptx), or a shared object;
 * written to tmp, named after path. */
static enum kiln_status
compile_cuda(kiln_ctx *ctx, const struct built *b, const struct kiln_func *f, const char *name,
             const char *path, const char *tmp)
{
    struct kiln_cuda_source src;
    const char             *text;
    if (!ends_with(path, ".cu") && !ends_with(path, ".ptx"))
        return kiln_cg_cuda_shared(ctx, &b->m, &b->target, tmp);
    KILN_TRY(kiln_cg_cuda_source(ctx, f, name, &src));
    text = src.text;
    if (ends_with(path, ".ptx"))
        KILN_TRY(kiln_nvrtc_ptx(ctx, src.text, "kiln_kernel.cu", b->target.cpu, b->target.fast_math,
                                &text));
    FILE *fp = fopen(tmp, "w");
    if (!fp)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "cuda", "cannot write %s: %s", path,
                         strerror(errno));
    bool ok = fputs(text, fp) >= 0;
    ok &= fclose(fp) == 0;
    return ok ? KILN_OK
              : KILN_FAIL(ctx, KILN_ERR_BACKEND, "cuda", "writing %s failed: %s", path,
                          strerror(errno));
}

enum kiln_status
kiln_graph_compile(kiln_ctx *ctx, const struct kiln_graph *g,
                   const struct kiln_compile_options *opt, const char *path,
                   struct kiln_memory_report *report)
{
    return kiln_graph_compile_weights(ctx, g, opt, NULL, path, report);
}

enum kiln_status
kiln_graph_compile_weights(kiln_ctx *ctx, const struct kiln_graph *g,
                           const struct kiln_compile_options *opt, const double *const *weights,
                           const char *path, struct kiln_memory_report *report)
{
    struct built      b;
    struct kiln_func *f;
    enum kiln_status  st;
    KILN_TRY(build(ctx, g, opt, true, &b, &f));
    KILN_TRY(describe(ctx, g, f, &b.target, &b.mem, opt && opt->name ? opt->name : "kiln_graph",
                      weights, &b.m));
    /* Written to a temporary file in the same directory and renamed into place: an
     * interrupted or failed compile never leaves a truncated module at path (which a loader
     * would map), and a module being loaded from path is never rewritten under it. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const char *tmp = kiln_arena_printf(ctx, "%s.tmp-%ld-%lx%lx", path, (long)getpid(),
                                        (unsigned long)now.tv_sec, (unsigned long)now.tv_nsec);
    if (!tmp)
        return ctx->err.status;
    size_t n = strlen(path);
    if (kiln_target_is_cuda(&b.target))
        st = compile_cuda(ctx, &b, f, b.m.name, path, tmp);
    else if (n > 2 && !strcmp(path + n - 2, ".o"))
        st = kiln_cg_llvm_object(ctx, &b.m, &b.target, tmp);
    else
        st = kiln_cg_llvm_shared(ctx, &b.m, &b.target, tmp);
    if (st == KILN_OK && rename(tmp, path) != 0)
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "codegen", "cannot write %s: %s", path,
                       strerror(errno));
    if (st != KILN_OK) {
        unlink(tmp);
        return st;
    }
    if (report)
        *report = b.mem;
    return KILN_OK;
}

enum kiln_status
kiln_graph_lower_print(kiln_ctx *ctx, const struct kiln_graph *g,
                       const struct kiln_compile_options *opt, int flat, const char **out,
                       struct kiln_memory_report *report)
{
    struct built      b;
    struct kiln_func *f;
    struct kiln_buf   text = {0};
    *out = NULL;
    KILN_TRY(build(ctx, g, opt, flat != 0, &b, &f));
    KILN_TRY(kiln_func_print(f, &text));
    *out = text.data;
    if (report)
        *report = b.mem;
    return KILN_OK;
}
