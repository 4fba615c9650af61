/* codegen/target.c -- CPU targets for the LLVM backend: parsing "llvm -mcpu=... -mattr=...
 * -mtriple=...", the canonical target string, LLVM's one-time initialisation and target
 * machines.
 *
 * The host target is LLVM's view of this machine: LLVMGetHostCPUName and the full
 * LLVMGetHostCPUFeatures list (which records what the machine lacks as well as what it has, so
 * a virtual machine missing a feature its CPU model implies is described correctly). -mcpu
 * names another CPU, whose features LLVM derives from the name; -mattr adds or removes
 * features on top: each item replaces any earlier mention of the same feature and goes to the
 * end of the list, because LLVM applies the list left to right and a later "+avx512vl" would
 * otherwise switch a removed avx512f back on. The C API cannot ask LLVM whether a CPU or
 * feature name exists (LLVM only prints a warning and ignores it), so for x86 targets the
 * names are checked against the tables below, taken from LLVM 19's `llc -mcpu=help` and
 * `-mattr=help`; the CPU table also records the widest vector register each CPU has (found by
 * compiling a <16 x float> add for it), from which vector_bits follows. Other architectures
 * are accepted as given. */
#include "llvm_cg.h"

#include "../runtime/cuda.h"

#include <llvm-c/Target.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* every x86 CPU name of LLVM 19, by the widest vector register it has (space-separated, with
 * spaces at both ends) */
static const char x86_cpus_512[] =
    " cannonlake cascadelake cooperlake emeraldrapids graniterapids graniterapids-d "
    "graniterapids_d icelake-client icelake-server icelake_client icelake_server knl knm "
    "mic_avx512 rocketlake sapphirerapids skx skylake-avx512 skylake_avx512 tigerlake x86-64-v4 "
    "znver4 znver5 ";
static const char x86_cpus_256[] =
    " alderlake arrowlake arrowlake-s arrowlake_s bdver1 bdver2 bdver3 bdver4 broadwell btver2 "
    "clearwaterforest core-avx-i core-avx2 core_2nd_gen_avx core_3rd_gen_avx core_4th_gen_avx "
    "core_4th_gen_avx_tsx core_5th_gen_avx core_5th_gen_avx_tsx corei7-avx gracemont grandridge "
    "haswell ivybridge lunarlake meteorlake pantherlake raptorlake sandybridge sierraforest "
    "skylake x86-64-v3 znver1 znver2 znver3 ";
static const char x86_cpus_128[] =
    " amdfam10 athlon athlon-4 athlon-fx athlon-mp athlon-tbird athlon-xp athlon64 athlon64-sse3 "
    "atom atom_sse4_2 atom_sse4_2_movbe barcelona bonnell btver1 c3 c3-2 core2 core_2_duo_sse4_1 "
    "core_2_duo_ssse3 core_aes_pclmulqdq core_i7_sse4_2 corei7 generic geode goldmont "
    "goldmont-plus goldmont_plus i386 i486 i586 i686 k6 k6-2 k6-3 k8 k8-sse3 lakemont nehalem "
    "nocona opteron opteron-sse3 penryn pentium pentium-m pentium-mmx pentium2 pentium3 "
    "pentium3m pentium4 pentium4m pentium_4 pentium_4_sse3 pentium_ii pentium_iii "
    "pentium_iii_no_xmm_regs pentium_m pentium_mmx pentium_pro pentiumpro prescott silvermont "
    "slm tremont westmere winchip-c6 winchip2 x86-64 x86-64-v2 yonah ";

/* every x86 feature name of LLVM 19, space-separated with spaces at both ends */
static const char x86_features[] =
    " 16bit-mode 32bit-mode 64bit 64bit-mode adx aes allow-light-256-bit amx-bf16 amx-complex "
    "amx-fp16 amx-int8 amx-tile avx avx10.1-256 avx10.1-512 avx2 avx512bf16 avx512bitalg "
    "avx512bw avx512cd avx512dq avx512f avx512fp16 avx512ifma avx512vbmi avx512vbmi2 avx512vl "
    "avx512vnni avx512vp2intersect avx512vpopcntdq avxifma avxneconvert avxvnni avxvnniint16 "
    "avxvnniint8 bmi bmi2 branch-hint branchfusion ccmp cf cldemote clflushopt clwb clzero cmov "
    "cmpccxadd crc32 cx16 cx8 egpr enqcmd ermsb evex512 f16c false-deps-getmant "
    "false-deps-lzcnt-tzcnt false-deps-mulc false-deps-mullq false-deps-perm false-deps-popcnt "
    "false-deps-range fast-11bytenop fast-15bytenop fast-7bytenop fast-bextr fast-dpwssd "
    "fast-gather fast-hops fast-imm16 fast-lzcnt fast-movbe fast-scalar-fsqrt "
    "fast-scalar-shift-masks fast-shld-rotate fast-variable-crosslane-shuffle "
    "fast-variable-perlane-shuffle fast-vector-fsqrt fast-vector-shift-masks "
    "faster-shift-than-shuffle fma fma4 fsgsbase fsrm fxsr gfni harden-sls-ijmp harden-sls-ret "
    "hreset idivl-to-divb idivq-to-divl inline-asm-use-gpr32 invpcid kl lea-sp lea-uses-ag "
    "lvi-cfi lvi-load-hardening lwp lzcnt macrofusion mmx movbe movdir64b movdiri mwaitx ndd nf "
    "no-bypass-delay no-bypass-delay-blend no-bypass-delay-mov no-bypass-delay-shuffle nopl "
    "pad-short-functions pclmul pconfig pku popcnt ppx prefer-128-bit prefer-256-bit "
    "prefer-mask-registers prefer-movmsk-over-vtest prefer-no-gather prefer-no-scatter prefetchi "
    "prfchw ptwrite push2pop2 raoint rdpid rdpru rdrnd rdseed retpoline retpoline-external-thunk "
    "retpoline-indirect-branches retpoline-indirect-calls rtm sahf sbb-dep-breaking serialize "
    "seses sgx sha sha512 shstk slow-3ops-lea slow-incdec slow-lea slow-pmaddwd slow-pmulld "
    "slow-shld slow-two-mem-ops slow-unaligned-mem-16 slow-unaligned-mem-32 sm3 sm4 soft-float "
    "sse sse-unaligned-mem sse2 sse3 sse4.1 sse4.2 sse4a ssse3 tagged-globals tbm tsxldtrk "
    "tuning-fast-imm-vector-shift uintr use-glm-div-sqrt-costs use-slm-arith-costs usermsr vaes "
    "vpclmulqdq vzeroupper waitpkg wbnoinvd widekl x87 xop xsave xsavec xsaveopt xsaves zu ";

static pthread_once_t llvm_once = PTHREAD_ONCE_INIT;

static void
init_llvm(void)
{
    LLVMInitializeAllTargetInfos();
    LLVMInitializeAllTargets();
    LLVMInitializeAllTargetMCs();
    LLVMInitializeAllAsmPrinters();
    LLVMInitializeAllAsmParsers();
}

void
kiln_cg_llvm_init(void)
{
    pthread_once(&llvm_once, init_llvm);
}

void
kiln_cg_set_detail(kiln_ctx *ctx, char *llvm_msg)
{
    if (!llvm_msg)
        return;
    if (ctx->has_err && !ctx->err.detail)
        ctx->err.detail = kiln_arena_strdup(ctx, llvm_msg);
    LLVMDisposeMessage(llvm_msg);
}

void
kiln_cg_set_error_detail(kiln_ctx *ctx, LLVMErrorRef err)
{
    if (!err)
        return;
    char *msg = LLVMGetErrorMessage(err);
    if (ctx->has_err && !ctx->err.detail)
        ctx->err.detail = kiln_arena_strdup(ctx, msg);
    LLVMDisposeErrorMessage(msg);
}

/* ---- feature lists ---- */

#define MAX_FEATURES 320

struct feature_list {
    char     sign[MAX_FEATURES];
    char     name[MAX_FEATURES][40];
    uint32_t n;
};

static bool
is_x86(const char *triple)
{
    return !strncmp(triple, "x86_64", 6) || !strncmp(triple, "i386", 4)
           || !strncmp(triple, "i486", 4) || !strncmp(triple, "i586", 4)
           || !strncmp(triple, "i686", 4);
}

static bool
in_list(const char *list, const char *name)
{
    char key[80];
    if (strlen(name) + 3 > sizeof key)
        return false;
    snprintf(key, sizeof key, " %s ", name);
    return strstr(list, key) != NULL;
}

/* Widest vector register of an x86 CPU (bits), or 0 if LLVM does not know the name. */
static int
cpu_vector_bits(const char *name)
{
    return in_list(x86_cpus_512, name)   ? 512
           : in_list(x86_cpus_256, name) ? 256
           : in_list(x86_cpus_128, name) ? 128
                                         : 0;
}

/* Appends "+name"/"-name" items of the comma-separated list to fl, each replacing an earlier
 * mention of the same feature. check: reject names LLVM does not know (x86). */
static enum kiln_status
add_features(kiln_ctx *ctx, struct feature_list *fl, const char *list, bool check, const char *spec)
{
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t      len = end ? (size_t)(end - p) : strlen(p);
        char        item[64];
        if (len == 0 || len >= sizeof item)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                             "target '%s': bad -mattr item '%.*s' (expected +name or -name)", spec,
                             (int)(len < 60 ? len : 60), p);
        memcpy(item, p, len);
        item[len] = 0;
        if ((item[0] != '+' && item[0] != '-') || !item[1] || strlen(item + 1) >= 40)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                             "target '%s': bad -mattr item '%s' (expected +name or -name)", spec,
                             item);
        if (check && !in_list(x86_features, item + 1))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                             "target '%s': unknown CPU feature '%s'", spec, item + 1);
        uint32_t w = 0;
        for (uint32_t i = 0; i < fl->n; i++) {
            if (strcmp(fl->name[i], item + 1) != 0) {
                fl->sign[w] = fl->sign[i];
                memcpy(fl->name[w], fl->name[i], sizeof fl->name[i]);
                w++;
            }
        }
        fl->n = w;
        if (fl->n == MAX_FEATURES)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target", "target '%s': too many features",
                             spec);
        fl->sign[fl->n] = item[0];
        snprintf(fl->name[fl->n], sizeof fl->name[0], "%s", item + 1);
        fl->n++;
        p += len;
        if (*p == ',')
            p++;
    }
    return KILN_OK;
}

/* Widest vector register after applying the features in order to a CPU with `bits`. */
static int
vector_bits_after(int bits, const struct feature_list *fl)
{
    for (uint32_t i = 0; i < fl->n; i++) {
        const char *n = fl->name[i];
        if (fl->sign[i] == '+') {
            if (!strncmp(n, "avx512", 6) || !strcmp(n, "evex512") || !strcmp(n, "avx10.1-512"))
                bits = bits < 512 && strcmp(n, "evex512") ? 512 : bits;
            else if (!strcmp(n, "avx") || !strcmp(n, "avx2") || !strcmp(n, "fma")
                     || !strcmp(n, "f16c") || !strcmp(n, "avx10.1-256"))
                bits = bits < 256 ? 256 : bits;
        } else {
            if (!strcmp(n, "avx") || !strcmp(n, "sse") || !strcmp(n, "sse2") || !strcmp(n, "sse3")
                || !strcmp(n, "ssse3") || !strcmp(n, "sse4.1") || !strcmp(n, "sse4.2"))
                bits = 128;
            else if (!strcmp(n, "avx512f") || !strcmp(n, "evex512") || !strcmp(n, "avx2")
                     || !strcmp(n, "fma") || !strcmp(n, "f16c"))
                bits = bits > 256 ? 256 : bits;
        }
    }
    return bits;
}

static enum kiln_status
join_features(kiln_ctx *ctx, const struct feature_list *fl, struct kiln_target *t, const char *spec)
{
    size_t len = 0;
    t->features[0] = 0;
    for (uint32_t i = 0; i < fl->n; i++) {
        int w = snprintf(t->features + len, sizeof t->features - len, "%s%c%s", i ? "," : "",
                         fl->sign[i], fl->name[i]);
        if (w < 0 || (size_t)w >= sizeof t->features - len)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                             "target '%s': feature list longer than %zu characters", spec,
                             sizeof t->features - 1);
        len += (size_t)w;
    }
    return KILN_OK;
}

static enum kiln_status
option(kiln_ctx *ctx, const char *spec, const char *tok, const char *name, const char **val)
{
    size_t n = strlen(name);
    if (strncmp(tok, name, n) != 0)
        return KILN_ERR_INVALID; /* not this option; nothing recorded */
    if (!tok[n])
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "target", "target '%s': option %s needs a value",
                         spec, name);
    *val = tok + n;
    return KILN_OK;
}

/* "cuda [-arch=sm_XX] [-fast-math]": the architecture named, else dflt when given, else the
 * first device's (runtime/cuda.c), else sm_80 where no CUDA driver or device is present;
 * -fast-math compiles with NVRTC's --use_fast_math (off by default). */
static enum kiln_status
cuda_target(kiln_ctx *ctx, const char *spec, char **tok, int ntok, const char *dflt,
            struct kiln_target *t)
{
    const char *arch = NULL;
    bool        fast_math = false;
    for (int i = 1; i < ntok; i++) {
        const char *v;
        if (!strcmp(tok[i], "-fast-math")) {
            fast_math = true;
            continue;
        }
        if (option(ctx, spec, tok[i], "-arch=", &v) != KILN_OK) {
            if (!kiln_ok(ctx))
                return ctx->err.status;
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                             "target '%s': unknown option '%s' (expected -arch=sm_XX or "
                             "-fast-math)",
                             spec, tok[i]);
        }
        arch = v;
    }
    if (!arch)
        arch = dflt;
    if (arch) {
        size_t n = strlen(arch);
        bool   ok = n >= 5 && n <= 8 && !strncmp(arch, "sm_", 3);
        for (size_t i = 3; ok && i < n; i++)
            ok = (arch[i] >= '0' && arch[i] <= '9') || (i == n - 1 && i > 4 && arch[i] == 'a');
        if (!ok || atoi(arch + 3) < 50)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                             "target '%s': bad architecture '%s' (expected sm_50 or later, e.g. "
                             "sm_80, sm_90, sm_90a)",
                             spec, arch);
    } else {
        struct kiln_cuda *cu = NULL;
        if (kiln_cuda_open(ctx, 0, &cu) == KILN_OK) {
            arch = kiln_arena_strdup(ctx, kiln_cuda_arch(cu));
            kiln_cuda_close(cu);
        }
        kiln_ctx_error_clear(ctx);
        if (!arch)
            arch = "sm_80";
    }
    memset(t, 0, sizeof *t);
    snprintf(t->kind, sizeof t->kind, "cuda");
    snprintf(t->cpu, sizeof t->cpu, "%s", arch);
    t->fast_math = fast_math;
    return KILN_OK;
}

static enum kiln_status
parse(kiln_ctx *ctx, const char *spec, const char *cuda_arch, struct kiln_target *t)
{
    char        text[2048];
    char       *tok[32];
    int         ntok = 0;
    const char *cpu = NULL, *triple = NULL, *attrs[8];
    int         nattr = 0;

    memset(t, 0, sizeof *t);
    if (!kiln_ok(ctx))
        return ctx->err.status;
    if (!spec)
        spec = "";
    if (strlen(spec) >= sizeof text)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                         "target string of %zu characters is too long", strlen(spec));
    memcpy(text, spec, strlen(spec) + 1);
    char *save = NULL;
    for (char *p = strtok_r(text, " \t\n", &save); p; p = strtok_r(NULL, " \t\n", &save)) {
        if (ntok == (int)KILN_COUNTOF(tok))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target", "target '%s': too many options",
                             spec);
        tok[ntok++] = p;
    }
    if (ntok > 0 && !strcmp(tok[0], "cuda"))
        return cuda_target(ctx, spec, tok, ntok, cuda_arch, t);
    if (ntok > 0 && strcmp(tok[0], "llvm") != 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                         "target '%s': unknown target kind '%s' (expected llvm)", spec, tok[0]);
    for (int i = 1; i < ntok; i++) {
        const char *v;
        if (option(ctx, spec, tok[i], "-mcpu=", &v) == KILN_OK)
            cpu = v;
        else if (option(ctx, spec, tok[i], "-mtriple=", &v) == KILN_OK)
            triple = v;
        else if (option(ctx, spec, tok[i], "-mattr=", &v) == KILN_OK) {
            if (nattr == (int)KILN_COUNTOF(attrs))
                return KILN_FAIL(ctx, KILN_ERR_INVALID, "target", "target '%s': too many -mattr",
                                 spec);
            attrs[nattr++] = v;
        } else if (kiln_ok(ctx))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                             "target '%s': unknown option '%s' (expected -mcpu=, -mattr= or "
                             "-mtriple=)",
                             spec, tok[i]);
        if (!kiln_ok(ctx))
            return ctx->err.status;
    }
    kiln_cg_llvm_init();
    snprintf(t->kind, sizeof t->kind, "llvm");

    char *host_triple = LLVMGetDefaultTargetTriple();
    char *norm = LLVMNormalizeTargetTriple(triple ? triple : host_triple);
    bool  same_arch = true;
    if (triple) {
        const char *a = norm, *h = host_triple;
        size_t      la = strcspn(a, "-"), lh = strcspn(h, "-");
        same_arch = la == lh && !strncmp(a, h, la);
    }
    int w = snprintf(t->triple, sizeof t->triple, "%s", norm);
    LLVMDisposeMessage(norm);
    LLVMDisposeMessage(host_triple);
    if (w < 0 || (size_t)w >= sizeof t->triple)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "target", "target '%s': triple too long", spec);
    LLVMTargetRef target;
    char         *err = NULL;
    if (LLVMGetTargetFromTriple(t->triple, &target, &err)) {
        KILN_FAIL(ctx, KILN_ERR_INVALID, "target", "target '%s': unknown triple '%s'", spec,
                  t->triple);
        kiln_cg_set_detail(ctx, err);
        return KILN_ERR_INVALID;
    }
    if (err)
        LLVMDisposeMessage(err);

    bool host =
        (!cpu && !triple) || (cpu && same_arch && (!strcmp(cpu, "native") || !strcmp(cpu, "host")));
    struct feature_list fl;
    bool                x86 = is_x86(t->triple);
    fl.n = 0;
    if (host) {
        char *name = LLVMGetHostCPUName();
        char *feat = LLVMGetHostCPUFeatures();
        snprintf(t->cpu, sizeof t->cpu, "%s", name);
        enum kiln_status st = add_features(ctx, &fl, feat, false, spec);
        LLVMDisposeMessage(name);
        LLVMDisposeMessage(feat);
        KILN_TRY(st);
        t->num_cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
#ifdef _SC_LEVEL1_DCACHE_SIZE /* glibc; -1 or 0 where the kernel does not say */
        long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        t->l1_bytes = l1 > 0 ? l1 : 0;
        t->l2_bytes = l2 > 0 ? l2 : 0;
#endif
    } else {
        if (cpu && (!strcmp(cpu, "native") || !strcmp(cpu, "host")))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target",
                             "target '%s': -mcpu=%s needs the host's architecture", spec, cpu);
        w = snprintf(t->cpu, sizeof t->cpu, "%s", cpu ? cpu : "generic");
        if (w < 0 || (size_t)w >= sizeof t->cpu)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "target", "target '%s': CPU name too long",
                             spec);
    }
    int cpu_bits = x86 ? cpu_vector_bits(t->cpu) : 0;
    if (x86 && !cpu_bits && !host)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "target", "target '%s': unknown CPU '%s' for %s",
                         spec, t->cpu, t->triple);
    for (int i = 0; i < nattr; i++)
        KILN_TRY(add_features(ctx, &fl, attrs[i], x86, spec));
    KILN_TRY(join_features(ctx, &fl, t, spec));
    /* the host list states every feature; a named CPU starts from its table entry */
    int bits = vector_bits_after(host || !cpu_bits ? 128 : cpu_bits, &fl);
    t->vector_bits = bits;
    return KILN_OK;
}

enum kiln_status
kiln_cg_target_parse(kiln_ctx *ctx, const char *spec, struct kiln_target *t)
{
    return parse(ctx, spec, NULL, t);
}

enum kiln_status
kiln_cg_target_parse_arch(kiln_ctx *ctx, const char *spec, const char *cuda_arch,
                          struct kiln_target *t)
{
    return parse(ctx, spec, cuda_arch, t);
}

const char *
kiln_cg_target_str(kiln_ctx *ctx, const struct kiln_target *t)
{
    if (kiln_target_is_cuda(t))
        return kiln_arena_printf(ctx, "cuda -arch=%s%s", t->cpu, t->fast_math ? " -fast-math" : "");
    if (t->features[0])
        return kiln_arena_printf(ctx, "%s -mtriple=%s -mcpu=%s -mattr=%s", t->kind, t->triple,
                                 t->cpu, t->features);
    return kiln_arena_printf(ctx, "%s -mtriple=%s -mcpu=%s", t->kind, t->triple, t->cpu);
}

LLVMTargetMachineRef
kiln_cg_target_machine(kiln_ctx *ctx, const struct kiln_target *t)
{
    LLVMTargetRef target;
    char         *err = NULL;
    if (kiln_target_is_cuda(t)) {
        KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "llvm",
                  "target %s: the LLVM CPU backend cannot compile for it", t->cpu);
        return NULL;
    }
    kiln_cg_llvm_init();
    if (LLVMGetTargetFromTriple(t->triple, &target, &err)) {
        KILN_FAIL(ctx, KILN_ERR_BACKEND, "llvm", "no LLVM target for triple %s", t->triple);
        kiln_cg_set_detail(ctx, err);
        return NULL;
    }
    if (err)
        LLVMDisposeMessage(err);
    LLVMTargetMachineRef tm =
        LLVMCreateTargetMachine(target, t->triple, t->cpu, t->features, LLVMCodeGenLevelAggressive,
                                LLVMRelocPIC, LLVMCodeModelDefault);
    if (!tm)
        KILN_FAIL(ctx, KILN_ERR_BACKEND, "llvm", "LLVM could not create a target machine for %s",
                  t->triple);
    return tm;
}
