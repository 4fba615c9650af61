/* cli/cmd_sample.c -- `kiln sample`: samples N new kernels (kas/) that can replace a
 * convolution at every placeholder given, inside a FLOPs/parameter budget, and writes each as
 * a PyTorch module (kNNNN.py) and as one kernel graph per placeholder (kNNNN_pJ.kg); prints one
 * line per kernel and the sampler's throughput. */
#include "cli.h"

#include "../kas/kas.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
parse_ph(const char *s, struct kas_placeholder *ph)
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
        *ph = (struct kas_placeholder){v[0], v[0], v[1], v[2]};
        return true;
    }
    if (n == 4) {
        *ph = (struct kas_placeholder){v[0], v[1], v[2], v[3]};
        return true;
    }
    return false;
}

static bool
write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(text, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* {"kernel": 1, "hash": "...", "flops": 0.12, "params": 0.1, "design": "...",
 *  "values": {"x0": "C/4"}, "ops": 3, "py": "DIR/k0001.py", "kg": ["DIR/k0001_p1.kg"]} */
static void
print_json(const struct kas_design *d, uint64_t k, double f, double p, const char *out,
           const struct kas_spec *s)
{
    char desc[1024];
    kas_design_describe(d, desc, sizeof desc);
    printf("{\"kernel\": %llu, \"hash\": \"%016llx\", \"flops\": %.6g, \"params\": %.6g, "
           "\"ops\": %d, \"design\": ",
           (unsigned long long)k, (unsigned long long)d->hash, f, p, d->nnode - 1);
    cli_json_string(stdout, desc);
    printf(", \"values\": {");
    const char *sep = "";
    for (int v = KAS_G; v < KAS_NVAR; v++)
        if (d->val[v].num) {
            char m[64];
            kas_mono_print(d->val[v], false, m, sizeof m);
            printf("%s\"%s\": ", sep, kas_var_name[v]);
            cli_json_string(stdout, m);
            sep = ", ";
        }
    printf("}");
    if (out) {
        char path[4096];
        snprintf(path, sizeof path, "%s/k%04llu.py", out, (unsigned long long)k);
        printf(", \"py\": ");
        cli_json_string(stdout, path);
        printf(", \"kg\": [");
        for (uint32_t j = 0; j < s->nph; j++) {
            snprintf(path, sizeof path, "%s/k%04llu_p%u.kg", out, (unsigned long long)k, j + 1);
            printf("%s", j ? ", " : "");
            cli_json_string(stdout, path);
        }
        printf("]");
    }
    printf("}\n");
}

static double
now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int
cmd_sample(int argc, char **argv)
{
    struct kas_spec s;
    kas_spec_default(&s);
    uint64_t    n = 10, seed = 0, batch = 1, tries = 100000, v;
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
            if (s.nph >= KAS_MAX_PH)
                return cli_usage_error("sample", "at most %d placeholders", KAS_MAX_PH);
            if (!parse_ph(arg, &s.ph[s.nph]))
                return cli_usage_error("sample",
                                       "placeholder '%s' is not C,K,H,W or C,H,W (positive "
                                       "integers)",
                                       arg);
            s.nph++;
        } else if (!strcmp(a, "-n")) {
            if (!cli_parse_u64(arg, &n) || n == 0 || n > 10000000)
                return cli_usage_error("sample", "-n must be in 1..10000000, got '%s'", arg);
        } else if (!strcmp(a, "--max-tries")) {
            if (!cli_parse_u64(arg, &tries) || tries == 0 || tries > UINT32_MAX)
                return cli_usage_error("sample", "--max-tries must be in 1..%u, got '%s'",
                                       UINT32_MAX, arg);
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_u64(arg, &seed))
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
                batch = v;
        } else if (!strcmp(a, "--flops") || !strcmp(a, "--params")) {
            bool f = !strcmp(a, "--flops");
            if (!parse_range(arg, f ? &s.flops_lo : &s.params_lo, f ? &s.flops_hi : &s.params_hi))
                return cli_usage_error("sample", "%s wants LO:HI with 0 <= LO <= HI, got '%s'", a,
                                       arg);
        } else if (!strcmp(a, "--out")) {
            out = arg;
        } else if (!strcmp(a, "--no-fingerprint")) {
            s.no_fingerprint = true;
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
    if (!s.nph)
        return cli_usage_error("sample", "give at least one placeholder with -p C,K,H,W");
    kiln_ctx *ctx = cli_ctx_new();
    if (!ctx)
        return 1;
    if (kas_spec_check(ctx, &s) != KILN_OK) {
        int rc = cli_report(ctx);
        kiln_ctx_free(ctx);
        return rc;
    }
    if (out && !cli_mkdirs(out)) {
        fprintf(stderr, "kiln: cannot create %s: %s\n", out, strerror(errno));
        kiln_ctx_free(ctx);
        return 1;
    }
    struct kas_sampler *sm = kas_sampler_new(ctx, &s, seed);
    if (!sm) {
        int rc = cli_report(ctx);
        kiln_ctx_free(ctx);
        return rc;
    }
    double rf, rp, tsample = 0;
    kas_spec_ref_cost(&s, &rf, &rp);
    int      rc = 0;
    uint64_t got = 0;
    for (; got < n && !rc; got++) {
        struct kas_design d;
        double            t0 = now();
        bool              ok = kas_sampler_next(sm, &d, (uint32_t)tries);
        tsample += now() - t0;
        if (!ok) {
            fprintf(stderr,
                    "kiln: no further kernel after %llu (%llu designs grown without a new one "
                    "inside the budget): the budget or the placeholders leave too little room "
                    "(try wider --flops/--params)\n",
                    (unsigned long long)got, (unsigned long long)tries);
            rc = 1;
            break;
        }
        double f = 0, p = 0;
        for (uint32_t j = 0; j < s.nph; j++) {
            double fj, pj;
            kas_design_cost(&d, &s.ph[j], &fj, &pj);
            f += fj;
            p += pj;
        }
        if (json) {
            print_json(&d, got + 1, f / rf, p / rp, out, &s);
        } else if (!quiet) {
            char desc[1024];
            kas_design_describe(&d, desc, sizeof desc);
            printf("k%04llu %016llx flops %.3f params %.3f  %s", (unsigned long long)got + 1,
                   (unsigned long long)d.hash, f / rf, p / rp, desc);
            char vals[256];
            kas_design_values(&d, false, vals, sizeof vals);
            printf("%s%s\n", vals[0] ? " " : "", vals);
        }
        if (!out)
            continue;
        struct kiln_arena_mark mark = kiln_arena_mark(ctx); /* the texts die with the kernel */
        char                   path[4096];
        struct kiln_buf        b = {0};
        if (kas_emit_py(ctx, &d, "Kernel", &b) != KILN_OK) {
            rc = cli_report(ctx);
            break;
        }
        snprintf(path, sizeof path, "%s/k%04llu.py", out, (unsigned long long)got + 1);
        if (!write_text(path, b.data, b.len)) {
            fprintf(stderr, "kiln: cannot write %s: %s\n", path, strerror(errno));
            rc = 1;
            break;
        }
        for (uint32_t j = 0; j < s.nph && !rc; j++) {
            struct kiln_buf kb = {0};
            if (kas_emit_kg(ctx, &d, &s.ph[j], (int64_t)batch, &kb) != KILN_OK) {
                rc = cli_report(ctx);
                break;
            }
            snprintf(path, sizeof path, "%s/k%04llu_p%u.kg", out, (unsigned long long)got + 1,
                     j + 1);
            if (!write_text(path, kb.data, kb.len)) {
                fprintf(stderr, "kiln: cannot write %s: %s\n", path, strerror(errno));
                rc = 1;
            }
        }
        kiln_arena_rewind(ctx, mark);
    }
    const struct kas_stats *st = kas_sampler_stats(sm);
    fprintf(stderr,
            "sampled %llu kernels in %.3f s: %.0f kernels/s on one thread (grown %llu: %llu "
            "filtered, %llu duplicate hashes, %llu over budget, %llu duplicate fingerprints)\n",
            (unsigned long long)st->accepted, tsample,
            tsample > 0 ? (double)st->accepted / tsample : 0.0, (unsigned long long)st->attempts,
            (unsigned long long)st->filtered, (unsigned long long)st->dup_hash,
            (unsigned long long)st->over_budget, (unsigned long long)st->dup_fp);
    kas_sampler_free(sm);
    kiln_ctx_free(ctx);
    return rc;
}
