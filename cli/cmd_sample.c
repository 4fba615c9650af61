/* cli/cmd_sample.c -- `kiln sample`: samples N new kernels (kiln_kas_sampler_*, kas/) that can
 * replace a convolution at every placeholder given, inside a FLOPs/parameter budget, and writes
 * each as a PyTorch module (kNNNN.py) and as one kernel graph per placeholder (kNNNN_pJ.kg);
 * prints one line per kernel and the sampler's throughput. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PH 16 /* placeholders kiln_kas_sampler_new takes */

static const char usage[] =
    "usage: kiln sample -p C,K,H,W [-p ...] [-n N] [--seed S] [--stride 1|2]\n"
    "                   [--flops LO:HI] [--params LO:HI] [--ref-k K] [--max-ops N] [--min-rf R]\n"
    "                   [--out DIR] [--batch N] [--max-tries N] [--no-fingerprint]\n"
    "                   [--quiet | --json]\n"
    "\n"
    "Samples N kernels (default 10) that replace a 3x3 convolution with C input and K output\n"
    "channels on H x W inputs (-p C,H,W means K = C), one design legal for every placeholder\n"
    "given. --flops and --params bound the kernel's FLOPs and parameters, summed over the\n"
    "placeholders, relative to the convolutions' (defaults 0.05:1 and 0:1; --ref-k 1, 5 or 7\n"
    "for a 1x1, 5x5 or 7x7 convolution instead of 3x3). --max-ops bounds\n"
    "the primitives grown before closing (default 8), --min-rf the receptive field (default\n"
    "3). With --out DIR, writes DIR/kNNNN.py (a PyTorch nn.Module) and DIR/kNNNN_pJ.kg (the\n"
    "kernel graph for placeholder J, batch --batch, default 1). --max-tries bounds the designs\n"
    "grown per new kernel (default 100000) before giving up. --json prints one JSON object per\n"
    "kernel instead of a line of text. Same seed, same kernels.\n";

static bool
parse_range(const char *s, double *lo, double *hi)
{
    char *end;
    errno = 0;
    *lo = strtod(s, &end);
    if (end == s || *end != ':' || errno)
        return false;
    const char *h = end + 1;
    *hi = strtod(h, &end);
    return end != h && !*end && !errno && *lo >= 0 && *lo <= *hi;
}

static bool
parse_ph(const char *s, struct kiln_kas_placeholder *ph)
{
    int64_t v[4];
    int     n = 0;
    for (const char *p = s; n < 4;) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x <= 0)
            return false;
        v[n++] = x;
        if (!*end)
            break;
        if (*end != ',')
            return false;
        p = end + 1;
    }
    if (n == 3) {
        *ph = (struct kiln_kas_placeholder){v[0], v[0], v[1], v[2]};
        return true;
    }
    if (n == 4) {
        *ph = (struct kiln_kas_placeholder){v[0], v[1], v[2], v[3]};
        return true;
    }
    return false;
}

/* {"kernel": 1, "hash": "...", "flops": 0.12, "params": 0.1, "design": "...",
 *  "values": {"x0": "C/4"}, "ops": 3, "py": "DIR/k0001.py", "kg": ["DIR/k0001_p1.kg"]} */
static void
print_json(const struct kiln_kas_kernel *k, uint32_t nph)
{
    printf("{\"kernel\": %llu, \"hash\": \"%016llx\", \"flops\": %.6g, \"params\": %.6g, "
           "\"ops\": %u, \"design\": ",
           (unsigned long long)k->index, (unsigned long long)k->hash, k->flops, k->params, k->ops);
    cli_json_string(stdout, k->design);
    printf(", \"values\": {");
    /* values is "x0=C/4 G=8": one member per name=size */
    for (const char *v = k->values; *v;) {
        const char *eq = strchr(v, '='), *end = strchr(v, ' ');
        size_t      len = end ? (size_t)(end - v) : strlen(v);
        char        name[64], size[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - v), v);
        snprintf(size, sizeof size, "%.*s", (int)(len - (size_t)(eq - v) - 1), eq + 1);
        printf("%s\"%s\": ", v == k->values ? "" : ", ", name);
        cli_json_string(stdout, size);
        v += len + (end != NULL);
    }
    printf("}");
    if (k->py_path) {
        printf(", \"py\": ");
        cli_json_string(stdout, k->py_path);
        printf(", \"kg\": [");
        for (uint32_t j = 0; j < nph; j++) {
            printf("%s", j ? ", " : "");
            cli_json_string(stdout, k->kg_paths[j]);
        }
        printf("]");
    }
    printf("}\n");
}

int
cmd_sample(int argc, char **argv)
{
    struct kiln_kas_params      s;
    struct kiln_kas_placeholder ph[MAX_PH];
    kiln_kas_params_default(&s);
    s.placeholders = ph;
    uint64_t    n = 10, tries = 100000, v;
    const char *out = NULL;
    bool        quiet = false, json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *arg = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            fputs(usage, stdout);
            return 0;
        }
        bool takes = !strcmp(a, "-p") || !strcmp(a, "--placeholder") || !strcmp(a, "-n")
                     || !strcmp(a, "--seed") || !strcmp(a, "--stride") || !strcmp(a, "--flops")
                     || !strcmp(a, "--params") || !strcmp(a, "--max-ops") || !strcmp(a, "--min-rf")
                     || !strcmp(a, "--out") || !strcmp(a, "--batch") || !strcmp(a, "--max-tries")
                     || !strcmp(a, "--ref-k");
        if (takes && !arg)
            return cli_usage_error("sample", "%s needs a value", a);
        if (!strcmp(a, "-p") || !strcmp(a, "--placeholder")) {
            if (s.nplaceholders >= MAX_PH)
                return cli_usage_error("sample", "at most %d placeholders", MAX_PH);
            if (!parse_ph(arg, &ph[s.nplaceholders]))
                return cli_usage_error("sample",
                                       "placeholder '%s' is not C,K,H,W or C,H,W (positive "
                                       "integers)",
                                       arg);
            s.nplaceholders++;
        } else if (!strcmp(a, "-n")) {
            if (!cli_parse_u64(arg, &n) || n == 0 || n > 10000000)
                return cli_usage_error("sample", "-n must be in 1..10000000, got '%s'", arg);
        } else if (!strcmp(a, "--max-tries")) {
            if (!cli_parse_u64(arg, &tries) || tries == 0 || tries > UINT32_MAX)
                return cli_usage_error("sample", "--max-tries must be in 1..%u, got '%s'",
                                       UINT32_MAX, arg);
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_u64(arg, &s.seed))
                return cli_usage_error("sample", "--seed must be a non-negative integer");
        } else if (!strcmp(a, "--stride") || !strcmp(a, "--max-ops") || !strcmp(a, "--min-rf")
                   || !strcmp(a, "--batch") || !strcmp(a, "--ref-k")) {
            if (!cli_parse_u64(arg, &v) || v > 4096)
                return cli_usage_error("sample",
                                       "%s must be a small non-negative integer, got "
                                       "'%s'",
                                       a, arg);
            if (!strcmp(a, "--stride"))
                s.stride = (int)v;
            else if (!strcmp(a, "--max-ops"))
                s.max_ops = (int)v;
            else if (!strcmp(a, "--min-rf"))
                s.min_rf = (int)v;
            else if (!strcmp(a, "--ref-k"))
                s.ref_k = (int)v;
            else if (v == 0)
                return cli_usage_error("sample", "--batch must be positive");
            else
                s.batch = (int64_t)v;
        } else if (!strcmp(a, "--flops") || !strcmp(a, "--params")) {
            bool f = !strcmp(a, "--flops");
            if (!parse_range(arg, f ? &s.flops_lo : &s.params_lo, f ? &s.flops_hi : &s.params_hi))
                return cli_usage_error("sample", "%s wants LO:HI with 0 <= LO <= HI, got '%s'", a,
                                       arg);
        } else if (!strcmp(a, "--out")) {
            out = arg;
        } else if (!strcmp(a, "--no-fingerprint")) {
            s.no_fingerprint = 1;
            continue;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        } else if (!strcmp(a, "--json")) {
            json = true;
            continue;
        } else {
            return cli_usage_error("sample", "unknown argument '%s'", a);
        }
        i++;
    }
    if (!s.nplaceholders)
        return cli_usage_error("sample", "give at least one placeholder with -p C,K,H,W");
    s.max_tries = (uint32_t)tries;
    s.out_dir = out;
    kiln_ctx *ctx = cli_ctx_new();
    if (!ctx)
        return 1;
    struct kiln_kas_sampler *sm;
    if (kiln_kas_sampler_new(ctx, &s, &sm) != KILN_OK) { /* checks the parameters */
        int rc = cli_report(ctx);
        kiln_ctx_free(ctx);
        return rc;
    }
    if (out && !cli_mkdirs(out)) { /* the sampler writes its files from the first kernel on */
        fprintf(stderr, "kiln: cannot create %s: %s\n", out, strerror(errno));
        kiln_kas_sampler_free(sm);
        kiln_ctx_free(ctx);
        return 1;
    }
    int rc = 0;
    for (uint64_t got = 0; got < n; got++) {
        struct kiln_kas_kernel k;
        enum kiln_status       st = kiln_kas_sampler_next(sm, &k);
        if (st == KILN_ERR_UNSUPPORTED) {
            fprintf(stderr,
                    "kiln: no further kernel after %llu (%llu designs grown without a new one "
                    "inside the budget): the budget or the placeholders leave too little room "
                    "(try wider --flops/--params)\n",
                    (unsigned long long)got, (unsigned long long)tries);
            rc = 1;
            break;
        }
        if (st != KILN_OK) {
            rc = cli_report(ctx);
            break;
        }
        if (json) {
            print_json(&k, s.nplaceholders);
        } else if (!quiet) {
            printf("k%04llu %016llx flops %.3f params %.3f  %s", (unsigned long long)k.index,
                   (unsigned long long)k.hash, k.flops, k.params, k.design);
            printf("%s%s\n", k.values[0] ? " " : "", k.values);
        }
    }
    struct kiln_kas_stats st;
    kiln_kas_sampler_stats(sm, &st);
    fprintf(stderr,
            "sampled %llu kernels in %.3f s: %.0f kernels/s on one thread (grown %llu: %llu "
            "filtered, %llu duplicate hashes, %llu over budget, %llu duplicate fingerprints)\n",
            (unsigned long long)st.accepted, st.seconds,
            st.seconds > 0 ? (double)st.accepted / st.seconds : 0.0,
            (unsigned long long)st.attempts, (unsigned long long)st.filtered,
            (unsigned long long)st.dup_hash, (unsigned long long)st.over_budget,
            (unsigned long long)st.dup_fp);
    kiln_kas_sampler_free(sm);
    kiln_ctx_free(ctx);
    return rc;
}
