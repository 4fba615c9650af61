/* benchmarks/ref.c -- see ref.h. oneDNN is driven through its C API (version 2.x, Debian's
 * libdnnl-dev): memory descriptors with format `any` let each primitive choose its layout
 * (blocked nChw16c-style for convolutions); inputs and weights are reordered into it once,
 * before timing, so the timed region is the primitive alone, as a user who pre-packs weights
 * would run it. */
#include "ref.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double
bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double
bench_median(void (*fn)(void *), void *ud, int warm, int reps)
{
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < warm; i++)
        fn(ud);
    for (int i = 0; i < reps; i++) {
        double t0 = bench_now();
        fn(ud);
        t[i] = bench_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    double m = t[reps / 2];
    free(t);
    return m;
}

void
bench_set_threads(int n)
{
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

struct sgemm {
    int          M, N, K;
    const float *A, *B;
    float       *C;
};

static void
run_sgemm(void *ud)
{
    struct sgemm *s = ud;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->M, s->N, s->K, 1.0f, s->A, s->K, s->B,
                s->N, 0.0f, s->C, s->N);
}

double
ref_blas_sgemm(int M, int N, int K, const float *A, const float *B, float *C, int reps)
{
    struct sgemm s = {M, N, K, A, B, C};
    return bench_median(run_sgemm, &s, 2, reps);
}

/* ---- oneDNN ---- */

struct prim {
    dnnl_primitive_t prim;
    dnnl_stream_t    stream;
    dnnl_exec_arg_t  args[4];
    int              nargs;
};

static void
run_prim(void *ud)
{
    struct prim *p = ud;
    dnnl_primitive_execute(p->prim, p->stream, p->nargs, p->args);
    dnnl_stream_wait(p->stream);
}

/* Reorders user memory (plain layout) into a memory of descriptor md; returns the new one. */
static dnnl_memory_t
reorder_to(dnnl_engine_t eng, dnnl_stream_t st, dnnl_memory_t user, const dnnl_memory_desc_t *md)
{
    const dnnl_memory_desc_t *umd;
    dnnl_memory_get_memory_desc(user, &umd);
    if (dnnl_memory_desc_equal(umd, md))
        return user;
    dnnl_memory_t out;
    dnnl_memory_create(&out, md, eng, DNNL_MEMORY_ALLOCATE);
    dnnl_primitive_desc_t rpd;
    dnnl_reorder_primitive_desc_create(&rpd, umd, eng, md, eng, NULL);
    dnnl_primitive_t r;
    dnnl_primitive_create(&r, rpd);
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, out}};
    dnnl_primitive_execute(r, st, 2, a);
    dnnl_stream_wait(st);
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    return out;
}

double
ref_dnnl_matmul(int M, int N, int K, const float *A, const float *B, float *C, int reps)
{
    dnnl_engine_t eng;
    dnnl_stream_t st;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success)
        return -1;
    dnnl_stream_create(&st, eng, dnnl_stream_default_flags);
    dnnl_dims_t        da = {M, K}, db = {K, N}, dc = {M, N};
    dnnl_memory_desc_t ma, mb, mc, mb_any;
    dnnl_memory_desc_init_by_tag(&ma, 2, da, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&mb, 2, db, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&mb_any, 2, db, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&mc, 2, dc, dnnl_f32, dnnl_ab);
    dnnl_matmul_desc_t d;
    dnnl_matmul_desc_init(&d, &ma, &mb_any, NULL, &mc);
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &d, NULL, eng, NULL) != dnnl_success)
        return -1;
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t             a, b, c;
    dnnl_memory_create(&a, &ma, eng, (void *)A);
    dnnl_memory_create(&b, &mb, eng, (void *)B);
    dnnl_memory_create(&c, &mc, eng, C);
    dnnl_memory_t bw = reorder_to(eng, st, b, wmd);
    struct prim   p = {.stream = st, .nargs = 3};
    dnnl_primitive_create(&p.prim, pd);
    p.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, a};
    p.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, bw};
    p.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, c};
    double t = bench_median(run_prim, &p, 2, reps);
    dnnl_primitive_destroy(p.prim);
    dnnl_primitive_desc_destroy(pd);
    if (bw != b)
        dnnl_memory_destroy(bw);
    dnnl_memory_destroy(a);
    dnnl_memory_destroy(b);
    dnnl_memory_destroy(c);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    return t;
}

double
ref_dnnl_conv(int N, int C, int H, int W, int K, int R, int S, int stride, int pad, int groups,
              const float *x, const float *w, float *y, int reps)
{
    dnnl_engine_t eng;
    dnnl_stream_t st;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success)
        return -1;
    dnnl_stream_create(&st, eng, dnnl_stream_default_flags);
    int         OH = (H + 2 * pad - R) / stride + 1, OW = (W + 2 * pad - S) / stride + 1;
    dnnl_dims_t dx = {N, C, H, W}, dy = {N, K, OH, OW}, strides = {stride, stride},
                pads = {pad, pad};
    dnnl_dims_t        dw5 = {groups, K / groups, C / groups, R, S}, dw4 = {K, C, R, S};
    dnnl_memory_desc_t ux, uw, uy, ax, aw, ay;
    dnnl_memory_desc_init_by_tag(&ux, 4, dx, dnnl_f32, dnnl_nchw);
    dnnl_memory_desc_init_by_tag(&uy, 4, dy, dnnl_f32, dnnl_nchw);
    dnnl_memory_desc_init_by_tag(&ax, 4, dx, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&ay, 4, dy, dnnl_f32, dnnl_format_tag_any);
    if (groups > 1) {
        dnnl_memory_desc_init_by_tag(&uw, 5, dw5, dnnl_f32, dnnl_goihw);
        dnnl_memory_desc_init_by_tag(&aw, 5, dw5, dnnl_f32, dnnl_format_tag_any);
    } else {
        dnnl_memory_desc_init_by_tag(&uw, 4, dw4, dnnl_f32, dnnl_oihw);
        dnnl_memory_desc_init_by_tag(&aw, 4, dw4, dnnl_f32, dnnl_format_tag_any);
    }
    dnnl_convolution_desc_t d;
    dnnl_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct, &ax,
                                       &aw, NULL, &ay, strides, pads, pads);
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &d, NULL, eng, NULL) != dnnl_success)
        return -1;
    dnnl_memory_t mx, mw, my;
    dnnl_memory_create(&mx, &ux, eng, (void *)x);
    dnnl_memory_create(&mw, &uw, eng, (void *)w);
    dnnl_memory_create(&my, &uy, eng, y);
    dnnl_memory_t px =
        reorder_to(eng, st, mx, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0));
    dnnl_memory_t pw =
        reorder_to(eng, st, mw, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0));
    const dnnl_memory_desc_t *ymd = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    dnnl_memory_t             py = my;
    if (!dnnl_memory_desc_equal(ymd, &uy))
        dnnl_memory_create(&py, ymd, eng, DNNL_MEMORY_ALLOCATE);
    struct prim p = {.stream = st, .nargs = 3};
    dnnl_primitive_create(&p.prim, pd);
    p.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, px};
    p.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, pw};
    p.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, py};
    double t = bench_median(run_prim, &p, 3, reps);
    if (py != my) { /* back to NCHW so callers can compare */
        dnnl_primitive_desc_t rpd;
        dnnl_primitive_t      r;
        dnnl_reorder_primitive_desc_create(&rpd, ymd, eng, &uy, eng, NULL);
        dnnl_primitive_create(&r, rpd);
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, py}, {DNNL_ARG_TO, my}};
        dnnl_primitive_execute(r, st, 2, a);
        dnnl_stream_wait(st);
        dnnl_primitive_destroy(r);
        dnnl_primitive_desc_destroy(rpd);
        dnnl_memory_destroy(py);
    }
    dnnl_primitive_destroy(p.prim);
    dnnl_primitive_desc_destroy(pd);
    if (px != mx)
        dnnl_memory_destroy(px);
    if (pw != mw)
        dnnl_memory_destroy(pw);
    dnnl_memory_destroy(mx);
    dnnl_memory_destroy(mw);
    dnnl_memory_destroy(my);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    return t;
}
