/* codegen/llvm_split.c -- a shared object's module optimised and compiled on several threads.
 *
 * LLVM optimises and compiles a module on one thread, and a whole network's module (hundreds of
 * root statements in kiln_body.partN functions, llvm.c) took most of a compile. The parts are
 * independent functions called in order by kiln_body, so they are dealt out over several
 * modules: each function belongs to a unit (a part, with the outlined parallel bodies and
 * other functions only it uses, or unit 0: kiln_kernel, kiln_body, the tables and whatever
 * several units share); units go to up to KILN_CG_MAX_OBJECTS modules by size (instructions
 * before optimisation), the largest first to the least loaded, and the threads take modules,
 * largest first, as they become free (a part's instructions foretell its time only roughly:
 * two modules of equal size took 3.4 and 14 s). The module is written as bitcode once; every other
 * module is read back from it in an LLVM context of its own, and keeps only its functions'
 * bodies (the others become declarations) and no global's initializer (module 0 defines
 * them). What one module uses of another's (a part called by kiln_body, a string of the
 * tables) gets hidden external linkage instead of internal, so the objects link into one
 * shared object and export nothing new. Each module is optimised with the same O3 pipeline
 * and written to its own object with its own target machine. */
#include "llvm_cg.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/BitWriter.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint32_t
kiln_cg_threads(void)
{
    const char *env = getenv("OMP_NUM_THREADS");
    char       *end = NULL;
    long        n = env ? strtol(env, &end, 10) : 0;
    if (!env || end == env || n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return (uint32_t)(n < 1 ? 1 : n > 64 ? 64 : n);
}

struct split {
    LLVMValueRef *fn; /* defined functions, in module order */
    uint32_t      nfn;
    int32_t      *unit;   /* per function: its unit; -1 while unknown */
    uint32_t      nunit;  /* 1 + parts */
    uint64_t     *cost;   /* per unit: instructions */
    uint32_t     *module; /* per unit: the module it goes to */
    uint32_t      nmod;
    uint64_t      load[KILN_CG_MAX_OBJECTS]; /* per module: instructions */
};

static int64_t
fn_index(const struct split *S, LLVMValueRef f)
{
    for (uint32_t i = 0; i < S->nfn; i++)
        if (S->fn[i] == f)
            return i;
    return -1;
}

/* The function an instruction user is in, or NULL for any other user (a constant). */
static LLVMValueRef
user_fn(LLVMValueRef user)
{
    if (!LLVMIsAInstruction(user))
        return NULL;
    LLVMBasicBlockRef bb = LLVMGetInstructionParent(user);
    return bb ? LLVMGetBasicBlockParent(bb) : NULL;
}

static bool
has_prefix(LLVMValueRef v, const char *prefix)
{
    size_t      len = 0;
    const char *name = LLVMGetValueName2(v, &len);
    size_t      n = strlen(prefix);
    return len >= n && !strncmp(name, prefix, n);
}

/* Units: parts are their own; a function used only from one unit's functions joins it;
 * anything used by a constant or by several units is unit 0. */
static void
find_units(struct split *S)
{
    for (uint32_t i = 0; i < S->nfn; i++)
        S->unit[i] = has_prefix(S->fn[i], "kiln_body.part") ? (int32_t)S->nunit++ : -1;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < S->nfn; i++) {
            if (S->unit[i] >= 0)
                continue;
            int32_t u = -2; /* no user yet */
            bool    pending = false;
            for (LLVMUseRef use = LLVMGetFirstUse(S->fn[i]); use && u != 0;
                 use = LLVMGetNextUse(use)) {
                LLVMValueRef uf = user_fn(LLVMGetUser(use));
                int64_t      j = uf ? fn_index(S, uf) : -1;
                int32_t      uj = j >= 0 ? S->unit[j] : 0;
                if (uj < 0)
                    pending = true;
                else if (u == -2 || u == uj)
                    u = uj;
                else
                    u = 0;
            }
            if (u == 0 || (!pending && u == -2)) {
                S->unit[i] = 0;
                changed = true;
            } else if (!pending) {
                S->unit[i] = u;
                changed = true;
            }
        }
    }
    for (uint32_t i = 0; i < S->nfn; i++)
        if (S->unit[i] < 0)
            S->unit[i] = 0; /* only in a cycle of unknowns */
}

static uint32_t
fn_module(const struct split *S, LLVMValueRef f)
{
    int64_t i = fn_index(S, f);
    return i >= 0 ? S->module[S->unit[i]] : 0;
}

/* Units to modules: unit 0 to module 0, the others largest first to the least loaded. */
static void
deal_units(struct split *S, uint32_t nmod)
{
    uint64_t *load = S->load;
    for (uint32_t i = 0; i < S->nfn; i++) {
        uint64_t n = 0;
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(S->fn[i]); bb;
             bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in))
                n++;
        S->cost[S->unit[i]] += n;
    }
    S->nmod = nmod;
    S->module[0] = 0;
    load[0] = S->cost[0];
    bool *done = calloc(S->nunit, sizeof *done);
    for (uint32_t k = 1; done && k < S->nunit; k++) {
        uint32_t big = 0;
        for (uint32_t u = 1; u < S->nunit; u++)
            if (!done[u] && (!big || S->cost[u] > S->cost[big]))
                big = u;
        uint32_t least = 0;
        for (uint32_t m = 1; m < nmod; m++)
            if (load[m] < load[least])
                least = m;
        S->module[big] = least;
        load[least] += S->cost[big];
        done[big] = true;
    }
    if (!done)
        for (uint32_t u = 0; u < S->nunit; u++)
            S->module[u] = u % nmod;
    free(done);
}

/* Hidden external linkage for what another module uses (or a constant, which may be
 * anywhere). */
static void
export_shared(const struct split *S, LLVMModuleRef mod)
{
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
        if (LLVMIsDeclaration(f))
            continue;
        uint32_t m = fn_module(S, f);
        bool     shared = false;
        for (LLVMUseRef use = LLVMGetFirstUse(f); use && !shared; use = LLVMGetNextUse(use)) {
            LLVMValueRef uf = user_fn(LLVMGetUser(use));
            shared = !uf || fn_module(S, uf) != m;
        }
        LLVMLinkage l = LLVMGetLinkage(f);
        if (shared && (l == LLVMInternalLinkage || l == LLVMPrivateLinkage)) {
            LLVMSetLinkage(f, LLVMExternalLinkage);
            LLVMSetVisibility(f, LLVMHiddenVisibility);
        }
    }
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g)) {
        bool shared = false;
        for (LLVMUseRef use = LLVMGetFirstUse(g); use && !shared; use = LLVMGetNextUse(use)) {
            LLVMValueRef uf = user_fn(LLVMGetUser(use));
            shared = !uf || fn_module(S, uf) != 0;
        }
        LLVMLinkage l = LLVMGetLinkage(g);
        if (shared && (l == LLVMInternalLinkage || l == LLVMPrivateLinkage)) {
            LLVMSetLinkage(g, LLVMExternalLinkage);
            LLVMSetVisibility(g, LLVMHiddenVisibility);
            LLVMSetUnnamedAddress(g, LLVMNoUnnamedAddr);
        }
    }
}

/* Keeps module k's part of a copy: other functions become declarations, and in modules other
 * than 0 every global too. The copy's functions are in the original's order. */
static bool
keep_module(const struct split *S, LLVMModuleRef mod, uint32_t k)
{
    if (k != 0)
        for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g)) {
            if (LLVMIsDeclaration(g))
                continue;
            LLVMSetInitializer(g, NULL);
            LLVMSetLinkage(g, LLVMExternalLinkage);
            LLVMSetVisibility(g, LLVMHiddenVisibility);
        }
    LLVMValueRef *drop = calloc(S->nfn ? S->nfn : 1, sizeof *drop);
    uint32_t      ndrop = 0, i = 0;
    if (!drop)
        return false;
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
        if (LLVMIsDeclaration(f))
            continue;
        if (i >= S->nfn) {
            free(drop);
            return false;
        }
        if (S->module[S->unit[i++]] != k)
            drop[ndrop++] = f;
    }
    for (uint32_t j = 0; j < ndrop; j++) {
        LLVMValueRef f = drop[j];
        size_t       len = 0;
        const char  *nm = LLVMGetValueName2(f, &len);
        char        *name = strndup(nm, len);
        LLVMValueRef decl = LLVMAddFunction(mod, "", LLVMGlobalGetValueType(f));
        if (!name) {
            free(drop);
            return false;
        }
        LLVMReplaceAllUsesWith(f, decl);
        LLVMDeleteFunction(f);
        LLVMSetValueName2(decl, name, len);
        LLVMSetVisibility(decl, LLVMHiddenVisibility);
        free(name);
    }
    free(drop);
    return true;
}

struct job {
    const struct split  *S;
    uint32_t             k;
    LLVMMemoryBufferRef  bc; /* the module's bitcode (modules other than 0) */
    LLVMContextRef       lc;
    LLVMModuleRef        mod;
    LLVMTargetMachineRef tm;
    const char          *path;
    char                *msg; /* malloc'ed: what failed, or NULL */
    char                *detail;
};

static void
job_fail(struct job *J, const char *msg, char *llvm_msg)
{
    J->msg = strdup(msg);
    if (llvm_msg) {
        J->detail = strdup(llvm_msg);
        LLVMDisposeMessage(llvm_msg);
    }
}

static void *
run_job(void *arg)
{
    struct job *J = arg;
    char       *msg = NULL;
    if (!J->mod) {
        J->lc = LLVMContextCreate();
        if (LLVMParseBitcodeInContext2(J->lc, J->bc, &J->mod)) {
            J->mod = NULL;
            job_fail(J, "cannot read the module's bitcode back", NULL);
            return NULL;
        }
    }
    if (!keep_module(J->S, J->mod, J->k)) {
        job_fail(J, "cannot split the module (out of memory, or its copy differs)", NULL);
        return NULL;
    }
    if (LLVMVerifyModule(J->mod, LLVMReturnStatusAction, &msg)) {
        job_fail(J, "a split module does not verify", msg);
        return NULL;
    }
    if (msg)
        LLVMDisposeMessage(msg);
    msg = NULL;
    LLVMErrorRef err = kiln_cg_llvm_o3(J->mod, J->tm);
    if (err) {
        job_fail(J, "the optimisation pipeline failed", LLVMGetErrorMessage(err));
        return NULL;
    }
    if (LLVMTargetMachineEmitToFile(J->tm, J->mod, (char *)J->path, LLVMObjectFile, &msg))
        job_fail(J, "cannot write an object file", msg);
    else if (msg)
        LLVMDisposeMessage(msg);
    if (J->k != 0) { /* a copy: its memory back at once */
        LLVMDisposeModule(J->mod);
        LLVMContextDispose(J->lc);
        J->mod = NULL;
        J->lc = NULL;
    }
    return NULL;
}

struct queue {
    struct job *J;
    uint32_t    order[KILN_CG_MAX_OBJECTS]; /* modules, largest first */
    uint32_t    n;
    atomic_uint next;
};

/* A compiling thread: modules until none is left. */
static void *
run_queue(void *arg)
{
    struct queue *Q = arg;
    for (uint32_t i; (i = atomic_fetch_add(&Q->next, 1)) < Q->n;)
        run_job(&Q->J[Q->order[i]]);
    return NULL;
}

/* One object from the whole module, on this thread. */
static enum kiln_status
one_object(kiln_ctx *ctx, LLVMContextRef lc, LLVMModuleRef mod, LLVMTargetMachineRef tm,
           const char *path)
{
    enum kiln_status st = kiln_cg_llvm_optimise(ctx, mod, tm);
    char            *err = NULL;
    if (st == KILN_OK && LLVMTargetMachineEmitToFile(tm, mod, (char *)path, LLVMObjectFile, &err)) {
        KILN_FAIL(ctx, KILN_ERR_BACKEND, "llvm", "llvm: cannot write object file %s", path);
        kiln_cg_set_detail(ctx, err);
        st = KILN_ERR_BACKEND;
    } else if (err) {
        LLVMDisposeMessage(err);
    }
    LLVMDisposeModule(mod);
    LLVMContextDispose(lc);
    return st;
}

enum kiln_status
kiln_cg_llvm_split_objects(kiln_ctx *ctx, const struct kiln_target *t, LLVMContextRef lc,
                           LLVMModuleRef mod, LLVMTargetMachineRef tm, uint32_t threads,
                           const char *dir, char (*obj)[600], uint32_t *nobj)
{
    struct split S = {0};
    *nobj = 1;
    snprintf(obj[0], 600, "%s/kernel0.o", dir);
    uint32_t want = threads ? threads : kiln_cg_threads();
    if (want > KILN_CG_MAX_OBJECTS)
        want = KILN_CG_MAX_OBJECTS;
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
        S.nfn += !LLVMIsDeclaration(f);
    if (want < 2)
        return one_object(ctx, lc, mod, tm, obj[0]);
    S.fn = calloc(S.nfn + 1, sizeof *S.fn);
    S.unit = calloc(S.nfn + 1, sizeof *S.unit);
    S.cost = calloc(S.nfn + 2, sizeof *S.cost);
    S.module = calloc(S.nfn + 2, sizeof *S.module);
    if (!S.fn || !S.unit || !S.cost || !S.module) {
        free(S.fn);
        free(S.unit);
        free(S.cost);
        free(S.module);
        return one_object(ctx, lc, mod, tm, obj[0]);
    }
    uint32_t n = 0;
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
        if (!LLVMIsDeclaration(f))
            S.fn[n++] = f;
    S.nunit = 1;
    find_units(&S);
    /* more modules than threads (up to one per part), taken largest first by whichever thread
     * is free: instructions before optimisation foretell its time only roughly */
    uint32_t nmod = S.nunit - 1 < KILN_CG_MAX_OBJECTS ? S.nunit - 1 : KILN_CG_MAX_OBJECTS;
    if (nmod < 2) {
        free(S.fn);
        free(S.unit);
        free(S.cost);
        free(S.module);
        return one_object(ctx, lc, mod, tm, obj[0]);
    }
    deal_units(&S, nmod);
    export_shared(&S, mod);
    struct job       J[KILN_CG_MAX_OBJECTS] = {0};
    pthread_t        tid[KILN_CG_MAX_OBJECTS];
    bool             started[KILN_CG_MAX_OBJECTS] = {0};
    enum kiln_status st = KILN_OK;
    /* the other modules keep no initializer: written without them (a network's weights are
     * most of the module), then put back */
    uint32_t ng = 0;
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g))
        ng++;
    LLVMValueRef *init = calloc(ng + 1, sizeof *init);
    uint32_t      gi = 0;
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod); init && g; g = LLVMGetNextGlobal(g), gi++)
        if ((init[gi] = LLVMGetInitializer(g)) != NULL)
            LLVMSetInitializer(g, LLVMConstNull(LLVMTypeOf(init[gi])));
    LLVMMemoryBufferRef bc = LLVMWriteBitcodeToMemoryBuffer(mod);
    gi = 0;
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod); init && g; g = LLVMGetNextGlobal(g), gi++)
        if (init[gi])
            LLVMSetInitializer(g, init[gi]);
    free(init);
    if (!bc)
        st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "llvm", "llvm: cannot write the module's bitcode");
    for (uint32_t k = 0; k < nmod; k++) {
        snprintf(obj[k], 600, "%s/kernel%u.o", dir, k);
        J[k] = (struct job){.S = &S, .k = k, .bc = bc, .path = obj[k]};
        if (k == 0) {
            J[k].lc = lc;
            J[k].mod = mod;
            J[k].tm = tm;
        } else if (st == KILN_OK && !(J[k].tm = kiln_cg_target_machine(ctx, t))) {
            st = ctx->err.status;
        }
    }
    struct queue Q = {.J = J, .n = nmod};
    atomic_init(&Q.next, 0);
    for (uint32_t k = 0; k < nmod; k++)
        Q.order[k] = k;
    for (uint32_t a = 1; a < nmod; a++) /* largest first; equal loads in module order */
        for (uint32_t b = a; b > 0 && S.load[Q.order[b]] > S.load[Q.order[b - 1]]; b--) {
            uint32_t x = Q.order[b];
            Q.order[b] = Q.order[b - 1];
            Q.order[b - 1] = x;
        }
    uint32_t nthread = want < nmod ? want : nmod;
    for (uint32_t k = 1; st == KILN_OK && k < nthread; k++)
        started[k] = pthread_create(&tid[k], NULL, run_queue, &Q) == 0;
    if (st == KILN_OK)
        run_queue(&Q); /* and the rest, should a thread not start */
    for (uint32_t k = 1; k < nthread; k++)
        if (started[k])
            pthread_join(tid[k], NULL);
    for (uint32_t k = 0; k < nmod; k++) {
        if (st == KILN_OK && J[k].msg) {
            st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "llvm", "llvm: module %u of %u: %s", k, nmod,
                           J[k].msg);
            if (J[k].detail)
                ctx->err.detail = kiln_arena_strdup(ctx, J[k].detail);
        }
        free(J[k].msg);
        free(J[k].detail);
        if (k == 0)
            continue;
        if (J[k].mod)
            LLVMDisposeModule(J[k].mod);
        if (J[k].lc)
            LLVMContextDispose(J[k].lc);
        if (J[k].tm)
            LLVMDisposeTargetMachine(J[k].tm);
    }
    LLVMDisposeModule(mod);
    LLVMContextDispose(lc);
    if (bc)
        LLVMDisposeMemoryBuffer(bc);
    free(S.fn);
    free(S.unit);
    free(S.cost);
    free(S.module);
    *nobj = nmod;
    return st;
}
