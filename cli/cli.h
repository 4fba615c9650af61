/* cli/cli.h -- internal to the kiln command: the subcommands main.c dispatches to, helpers they
 * share (reading and parsing a .kg file, reporting errors, number formatting, rounding values
 * to a dtype) and the .npy reader and writer of cli/npy.c.
 *
 * Every subcommand is `int cmd_NAME(int argc, char **argv)` with argv[0] the subcommand's name;
 * it prints its usage to stdout and returns 0 for --help, returns 2 after a usage error (message
 * and usage on stderr) and 1 after a failure (`kiln: ` and the formatted error on stderr). */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- subcommands (one file each) ---- */
int cmd_inspect(int argc, char **argv);   /* cli/cmd_inspect.c */
int cmd_eval(int argc, char **argv);      /* cli/cmd_eval.c */
int cmd_compile(int argc, char **argv);   /* cli/cmd_compile.c */
int cmd_run(int argc, char **argv);       /* cli/cmd_run.c */
int cmd_tune(int argc, char **argv);      /* cli/cmd_tune.c */
int cmd_records(int argc, char **argv);   /* cli/cmd_records.c */
int cmd_costmodel(int argc, char **argv); /* cli/cmd_costmodel.c */
int cmd_onnx_test(int argc, char **argv); /* cli/cmd_onnx_test.c */
int cmd_sample(int argc, char **argv);    /* cli/cmd_sample.c */
int cmd_search(int argc, char **argv);    /* cli/cmd_search.c (runs python -m kiln.search) */
int cmd_worker(int argc, char **argv);    /* cli/cmd_worker.c */

/* ---- shared helpers (cli/common.c) ---- */
/* A new context (NULL when out of memory) whose temporary files go to $TMPDIR when it is set:
 * the command reads the environment, the library does not (kiln_ctx_set_tmp_dir). */
kiln_ctx *cli_ctx_new(void);
/* Prints "kiln: " and the context's formatted error to stderr; returns 1. */
int cli_report(kiln_ctx *ctx);
/* Prints "kiln CMD: MSG" and "Try 'kiln help CMD'." to stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* True when a is -h or --help. */
bool cli_is_help(const char *a);
/* Reads a whole file (NUL-terminated, malloc'ed); NULL with errno set on failure. */
char *cli_read_file(const char *path, size_t *len);
struct cli_passes;
/* Reads and parses a .kg file, or imports an ONNX model (a path ending in .onnx), into ctx,
 * also giving an ONNX model's weights (kiln_graph_import_onnx: one pointer per argument, NULL
 * for inputs; *weights is NULL for a .kg file); on failure prints the error and returns NULL. */
struct kiln_graph *cli_load_model(kiln_ctx *ctx, const char *path, const struct cli_passes *p,
                                  const double *const **weights);
/* The bytes of a .kg file or an ONNX model (path ending in .onnx, imported with p's shapes)
 * into *g; the status (the error is in ctx). */
enum kiln_status cli_import(kiln_ctx *ctx, const char *text, size_t len, const char *path,
                            const struct cli_passes *p, struct kiln_graph **g,
                            const double *const **weights);
bool             cli_is_onnx(const char *path); /* path ends in .onnx */
/* The graph pipeline options of compile, tune, inspect and eval: --no-simplify (no graph pass:
 * the model as imported), --no-channels-last, --no-winograd (that pass off), --dump-after PASS
 * (the graph after PASS on stderr, in .kg text). Zero-initialise, then set dump_after = -1. */
#define CLI_MAX_SHAPES 16 /* --input-shape options one command takes */
struct cli_passes {
    unsigned skip;       /* kiln_optimize_options.skip */
    int      dump_after; /* enum kiln_graph_pass, -1 for none */
    /* --input-shape NAME=AxBxC (an ONNX model's input or symbolic dimension) */
    struct kiln_onnx_shape shapes[CLI_MAX_SHAPES];
    int64_t                extents[CLI_MAX_SHAPES][KILN_MAX_DIMS];
    char                   names[CLI_MAX_SHAPES][256];
    uint32_t               nshapes;
};
/* Takes argv[*i] (and its value, advancing *i) when it is one of those options: returns 1;
 * 0 when it is not one; after a usage error (message on stderr, naming the valid passes for an
 * unknown PASS) -2, the command's exit status negated. */
int cli_passes_arg(const char *cmd, int argc, char **argv, int *i, struct cli_passes *p);

/* ---- the per-user records cache (cli/cache.c) ----
 * `--no-cache` (none), `--cache PATH`; without either, the environment's KILN_CACHE ("off" or
 * empty: none; else the path), else $XDG_CACHE_HOME/kiln/records.db, else
 * $HOME/.cache/kiln/records.db. The tests run with KILN_CACHE=off (CMakeLists.txt). */
#define CLI_MAX_DB 16 /* --db files one command reads */
struct cli_cache_opt {
    bool        off;  /* --no-cache */
    const char *path; /* --cache PATH, or NULL */
};
/* Takes argv[*i] (and its value) when it is --cache or --no-cache, as cli_passes_arg does. */
int cli_cache_arg(const char *cmd, int argc, char **argv, int *i, struct cli_cache_opt *o);
/* The cache's path by the rules above (o may be NULL), or NULL when there is none. The result
 * may point at a static buffer, overwritten by the next call. */
const char *cli_records_cache(const struct cli_cache_opt *o);
/* Creates the missing directories above path (mode 0700) before the cache is first written;
 * false with errno set. */
bool cli_records_cache_mkdir(const char *path);
/* The graph pipeline (kiln_graph_optimize) on an ONNX model: replaces *g and *weights by its
 * result when path is an .onnx file (a .kg file is left alone: its weights have no values).
 * When report is true prints one line on stderr, "kiln CMD: simplify: folded ...;
 * channels-last: ...; winograd: ..." (a pass switched off counts nothing; "simplify: off"). On
 * failure prints the error and returns false. */
bool cli_optimize(kiln_ctx *ctx, const char *cmd, const char *path, const struct cli_passes *p,
                  struct kiln_graph **g, const double *const **weights, bool report);
/* Parses a non-negative decimal integer (no sign, no trailing text); false if malformed. */
bool cli_parse_u64(const char *s, uint64_t *out);
/* "[1, 32, 28, 28]" into buf (size >= 16 suggested). */
const char *cli_shape(char *buf, size_t size, int ndim, const int64_t *shape);
/* 231.2 MFLOP, 1.5 MiB, 12,345: human-readable numbers into buf. */
const char *cli_flops(char *buf, size_t size, double flops);
const char *cli_bytes(char *buf, size_t size, double bytes);
const char *cli_count(char *buf, size_t size, double n);
/* Prints s as a JSON string literal (quotes and escapes included). */
void cli_json_string(FILE *f, const char *s);
/* Creates directory path and its missing parents (mode & ~umask; cli_mkdirs: 0777); false
 * with errno set. */
bool cli_mkdirs(const char *path);
bool cli_mkdirs_mode(const char *path, unsigned mode);

/* ---- .npy files (cli/npy.c) ----
 * Reads format versions 1.0, 2.0 and 3.0 in C order with dtypes <f2 <f4 <f8 |i1 (<i1) <i4 <i8
 * |u1 |b1, converting every element to double; writes version 1.0, <f8. Errors are written as
 * one line (without the file name) into err. */
struct npy_array {
    int     ndim;
    int64_t shape[KILN_MAX_DIMS];
    int64_t numel;
    char    descr[32]; /* the dtype as written in the file, e.g. "<f4" */
    double *data;      /* numel values, malloc'ed; free with free() */
    bool    is_int;    /* integer or bool dtype: values are integral */
};
bool npy_read(const char *path, struct npy_array *out, char *err, size_t errsize);
/* Parses an in-memory .npy image (npy_read's work after reading the file). */
bool npy_parse(const unsigned char *buf, size_t len, struct npy_array *out, char *err,
               size_t errsize);
/* Writes a little-endian f64 .npy file: to a temporary file beside path, renamed into place, so
 * path is either the old file or the whole new one. */
bool npy_write_f64(const char *path, int ndim, const int64_t *shape, const double *data, char *err,
                   size_t errsize);
/* The same in dtype dt (values stored as kiln_scalar_store stores them; bf16 written as f32). */
bool npy_write(const char *path, int ndim, const int64_t *shape, const double *data,
               enum kiln_dtype dt, char *err, size_t errsize);

#endif /* KILN_CLI_H */
