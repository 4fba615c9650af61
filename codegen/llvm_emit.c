/* codegen/llvm_emit.c -- what the LLVM backend produces from a module: an object file, a
 * shared object, textual IR, or code in this process through ORC's LLJIT.
 *
 * Each entry point builds and optimises a fresh module (llvm.c) in its own LLVM context and
 * disposes of everything LLVM allocated before returning; LLVM's messages are copied into the
 * context's error detail. The shared object is the object file linked by the C compiler that
 * built kiln (KILN_CC) with libkiln_rt.a (the ABI entry points and the runtime: an installed
 * kiln's, else the build tree's KILN_RT_LIB; util/install.c) and OpenMP, run with posix_spawn
 * in a private temporary directory; its output becomes the error detail when it fails. The JIT
 * resolves libm and libc symbols from the process and binds kiln_rt_* to this process's runtime as
 * absolute symbols (the runtime's symbols have hidden visibility, so a process-wide lookup would
 * not find them). */
#include "llvm_cg.h"

#include "../runtime/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#ifndef KILN_RT_LIB
#define KILN_RT_LIB "libkiln_rt.a"
#endif
#ifndef KILN_CC
#define KILN_CC "cc"
#endif
#ifndef KILN_OPENMP_FLAGS
#define KILN_OPENMP_FLAGS "-fopenmp"
#endif

/* Builds m for t into a new context; on success the caller disposes *mod, *lc and *tm. */
static enum kiln_status
build(kiln_ctx *ctx, const struct kiln_cg_module *m, const struct kiln_target *t, bool optimise,
      LLVMContextRef *lc, LLVMTargetMachineRef *tm, LLVMModuleRef *mod)
{
    *lc = NULL;
    *mod = NULL;
    *tm = kiln_cg_target_machine(ctx, t);
    if (!*tm)
        return ctx->err.status;
    *lc = LLVMContextCreate();
    enum kiln_status st = kiln_cg_llvm_build(ctx, m, t, *lc, *tm, optimise, mod);
    if (st != KILN_OK) {
        LLVMContextDispose(*lc);
        LLVMDisposeTargetMachine(*tm);
        *lc = NULL;
        *tm = NULL;
    }
    return st;
}

static void
dispose(LLVMContextRef lc, LLVMTargetMachineRef tm, LLVMModuleRef mod)
{
    LLVMDisposeModule(mod);
    LLVMContextDispose(lc);
    LLVMDisposeTargetMachine(tm);
}

static enum kiln_status
emit_object(kiln_ctx *ctx, LLVMTargetMachineRef tm, LLVMModuleRef mod, const char *path)
{
    char *err = NULL;
    if (LLVMTargetMachineEmitToFile(tm, mod, path, LLVMObjectFile, &err)) {
        KILN_FAIL(ctx, KILN_ERR_BACKEND, "llvm", "llvm: cannot write object file %s", path);
        kiln_cg_set_detail(ctx, err);
        return KILN_ERR_BACKEND;
    }
    if (err)
        LLVMDisposeMessage(err);
    return KILN_OK;
}

enum kiln_status
kiln_cg_llvm_object(kiln_ctx *ctx, const struct kiln_cg_module *m, const struct kiln_target *t,
                    const char *path)
{
    LLVMContextRef       lc;
    LLVMTargetMachineRef tm;
    LLVMModuleRef        mod;
    KILN_TRY(build(ctx, m, t, true, &lc, &tm, &mod));
    enum kiln_status st = emit_object(ctx, tm, mod, path);
    dispose(lc, tm, mod);
    return st;
}

enum kiln_status
kiln_cg_llvm_ir(kiln_ctx *ctx, const struct kiln_cg_module *m, const struct kiln_target *t,
                const char **out)
{
    LLVMContextRef       lc;
    LLVMTargetMachineRef tm;
    LLVMModuleRef        mod;
    *out = NULL;
    KILN_TRY(build(ctx, m, t, true, &lc, &tm, &mod));
    char *text = LLVMPrintModuleToString(mod);
    *out = kiln_arena_strdup(ctx, text);
    LLVMDisposeMessage(text);
    dispose(lc, tm, mod);
    return *out ? KILN_OK : ctx->err.status;
}

/* ---- shared objects ---- */

int
kiln_cg_run(kiln_ctx *ctx, char *const *argv, struct kiln_buf *log)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    posix_spawn_file_actions_addclose(&fa, fd[1]);
    pid_t pid;
    int   rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd[1]);
    if (rc != 0) {
        close(fd[0]);
        errno = rc;
        return -1;
    }
    char    chunk[4096];
    ssize_t n;
    while ((n = read(fd[0], chunk, sizeof chunk - 1)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        chunk[n] = 0;
        if (log->len < (1u << 20))
            kiln_buf_puts(ctx, log, chunk);
    }
    close(fd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status)
                             : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

enum kiln_status
kiln_cg_cc_shared(kiln_ctx *ctx, const char *who, const char *const *opts, int nopt,
                  const char *input, const char *path)
{
    /* KILN_CC -shared OPTS -o path input --whole-archive KILN_RT_LIB <openmp flags> -lm */
    char  flags[512], rt[PATH_MAX];
    char *argv[40];
    int   argc = 0;
    KILN_TRY(kiln_install_path(ctx, KILN_INSTALL_RT_LIB, KILN_RT_LIB, rt, sizeof rt));
    snprintf(flags, sizeof flags, "%s", KILN_OPENMP_FLAGS);
    argv[argc++] = (char *)KILN_CC;
    argv[argc++] = (char *)"-shared";
    for (int i = 0; i < nopt && i < 8; i++)
        argv[argc++] = (char *)opts[i];
    argv[argc++] = (char *)"-o";
    argv[argc++] = (char *)path;
    argv[argc++] = (char *)input;
    argv[argc++] = (char *)"-Wl,--whole-archive"; /* the exported entry points are unused */
    argv[argc++] = rt;
    argv[argc++] = (char *)"-Wl,--no-whole-archive";
    /* never unmapped by dlclose: libomp's worker threads may outlive the last caller */
    argv[argc++] = (char *)"-Wl,-z,nodelete";
    char *save = NULL;
    for (char *p = strtok_r(flags, " ;", &save); p && argc < 34; p = strtok_r(NULL, " ;", &save))
        argv[argc++] = p;
    argv[argc++] = (char *)"-ldl"; /* the CUDA driver of a cuda module's runtime */
    argv[argc++] = (char *)"-lpthread";
    argv[argc++] = (char *)"-lm";
    argv[argc] = NULL;
    struct kiln_buf log = {0};
    int             rc = kiln_cg_run(ctx, argv, &log);
    if (rc == 0)
        return KILN_OK;
    if (rc < 0)
        KILN_FAIL(ctx, KILN_ERR_BACKEND, who, "%s: cannot run %s: %s", who, KILN_CC,
                  strerror(errno));
    else
        KILN_FAIL(ctx, KILN_ERR_BACKEND, who, "%s: building %s failed (%s exited with status %d)",
                  who, path, KILN_CC, rc);
    if (!ctx->err.detail && log.data)
        ctx->err.detail = log.data;
    return KILN_ERR_BACKEND;
}

enum kiln_status
kiln_cg_llvm_shared(kiln_ctx *ctx, const struct kiln_cg_module *m, const struct kiln_target *t,
                    const char *path)
{
    LLVMContextRef       lc;
    LLVMTargetMachineRef tm;
    LLVMModuleRef        mod;
    KILN_TRY(build(ctx, m, t, false, &lc, &tm, &mod));
    char dir[512], obj[KILN_CG_MAX_OBJECTS][600];
    if (kiln_cg_mkdtemp(ctx, "llvm", dir, sizeof dir) != KILN_OK) {
        dispose(lc, tm, mod);
        return ctx->err.status;
    }
    /* optimised and compiled in parts at once (llvm_split.c); mod and lc are consumed */
    uint32_t         nobj = 0;
    enum kiln_status st =
        kiln_cg_llvm_split_objects(ctx, t, lc, mod, tm, ctx->cg_threads, dir, obj, &nobj);
    LLVMDisposeTargetMachine(tm);
    ctx->cg_objects = nobj;
    if (st == KILN_OK) {
        const char *more[KILN_CG_MAX_OBJECTS];
        for (uint32_t i = 1; i < nobj; i++)
            more[i - 1] = obj[i];
        st = kiln_cg_cc_shared(ctx, "llvm", more, (int)nobj - 1, obj[0], path);
    }
    for (uint32_t i = 0; i < nobj; i++)
        unlink(obj[i]);
    rmdir(dir);
    return st;
}

/* ---- JIT ---- */

struct kiln_jit {
    LLVMOrcLLJITRef             jit;
    const struct kiln_abi_desc *desc;
};

static enum kiln_status
orc_fail(kiln_ctx *ctx, LLVMErrorRef err, const char *what)
{
    char *msg = LLVMGetErrorMessage(err);
    KILN_FAIL(ctx, KILN_ERR_BACKEND, "llvm", "llvm: JIT: %s: %.300s", what, msg);
    if (ctx->has_err && !ctx->err.detail)
        ctx->err.detail = kiln_arena_strdup(ctx, msg);
    LLVMDisposeErrorMessage(msg);
    return KILN_ERR_BACKEND;
}

/* Defines the runtime functions generated code calls as absolute symbols in jd. */
static LLVMErrorRef
define_runtime(LLVMOrcLLJITRef jit, LLVMOrcJITDylibRef jd)
{
    struct {
        const char *name;
        uintptr_t   addr;
    } rt[] = {
        {"kiln_rt_parallel_for", (uintptr_t)&kiln_rt_parallel_for},
        {"kiln_rt_alloc", (uintptr_t)&kiln_rt_alloc},
        {"kiln_rt_free", (uintptr_t)&kiln_rt_free},
    };
    LLVMOrcCSymbolMapPair sym[KILN_COUNTOF(rt)];
    for (size_t i = 0; i < KILN_COUNTOF(rt); i++) {
        sym[i].Name = LLVMOrcLLJITMangleAndIntern(jit, rt[i].name);
        sym[i].Sym.Address = (LLVMOrcExecutorAddress)rt[i].addr;
        sym[i].Sym.Flags.GenericFlags =
            LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
        sym[i].Sym.Flags.TargetFlags = 0;
    }
    LLVMOrcMaterializationUnitRef mu = LLVMOrcAbsoluteSymbols(sym, KILN_COUNTOF(rt));
    LLVMErrorRef                  err = LLVMOrcJITDylibDefine(jd, mu);
    if (err)
        LLVMOrcDisposeMaterializationUnit(mu);
    return err;
}

enum kiln_status
kiln_cg_llvm_jit(kiln_ctx *ctx, const struct kiln_cg_module *m, const struct kiln_target *t,
                 struct kiln_jit **out)
{
    *out = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    LLVMTargetMachineRef tm = kiln_cg_target_machine(ctx, t);
    if (!tm)
        return ctx->err.status;
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
    LLVMModuleRef               mod;
    enum kiln_status            st =
        kiln_cg_llvm_build(ctx, m, t, LLVMOrcThreadSafeContextGetContext(tsc), tm, true, &mod);
    if (st != KILN_OK) {
        LLVMOrcDisposeThreadSafeContext(tsc);
        LLVMDisposeTargetMachine(tm);
        return st;
    }
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
    LLVMOrcDisposeThreadSafeContext(tsc);

    LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
        jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm)); /* takes tm */
    LLVMOrcLLJITRef jit;
    LLVMErrorRef    err = LLVMOrcCreateLLJIT(&jit, jb); /* takes jb */
    if (err) {
        LLVMOrcDisposeThreadSafeModule(tsm);
        return orc_fail(ctx, err, "cannot create the JIT");
    }
    LLVMOrcJITDylibRef            jd = LLVMOrcLLJITGetMainJITDylib(jit);
    LLVMOrcDefinitionGeneratorRef gen;
    const char                   *what = "cannot search the process for symbols";
    err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
        &gen, LLVMOrcLLJITGetGlobalPrefix(jit), NULL, NULL);
    if (!err) {
        LLVMOrcJITDylibAddGenerator(jd, gen);
        what = "cannot define the runtime functions";
        err = define_runtime(jit, jd);
    }
    if (!err) {
        what = "cannot add the module";
        err = LLVMOrcLLJITAddLLVMIRModule(jit, jd, tsm);
        tsm = NULL;
    }
    LLVMOrcExecutorAddress addr = 0;
    if (!err) {
        what = "cannot find kiln_desc";
        err = LLVMOrcLLJITLookup(jit, &addr, "kiln_desc");
    }
    struct kiln_jit *j = NULL;
    if (!err) {
        j = malloc(sizeof *j);
        if (!j)
            st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "llvm", "llvm: out of memory");
    } else {
        st = orc_fail(ctx, err, what);
    }
    if (tsm)
        LLVMOrcDisposeThreadSafeModule(tsm);
    if (!j) {
        LLVMConsumeError(LLVMOrcDisposeLLJIT(jit));
        return st;
    }
    j->jit = jit;
    j->desc = (const struct kiln_abi_desc *)(uintptr_t)addr;
    *out = j;
    return KILN_OK;
}

const struct kiln_abi_desc *
kiln_jit_desc(const struct kiln_jit *j)
{
    return j ? j->desc : NULL;
}

void
kiln_jit_free(struct kiln_jit *j)
{
    if (!j)
        return;
    LLVMConsumeError(LLVMOrcDisposeLLJIT(j->jit));
    free(j);
}
