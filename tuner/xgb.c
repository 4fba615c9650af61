/* tuner/xgb.c -- the cost model: gradient-boosted trees through the XGBoost C API.
 *
 * Pack-sum (the default, Ansor's model): every feature row (one per store) gets a prediction,
 * a program's score is the sum of its rows' raw margins, and the loss is the squared error
 * between that sum and the program's normalised throughput y, weighted by y, so fast programs
 * dominate and failed ones (y = 0) do not pull. XGBoost cannot express a loss over groups of
 * rows, so each round the gradient is computed here and handed to XGBoosterBoostOneIter: for
 * every row r of program p, grad = y_p * (sum_p - y_p) and hess = y_p * n_p, n_p the program's
 * row count. The loss's true Hessian over p's rows is y_p times an n_p x n_p block of ones;
 * the diagonal y_p * n_p bounds it, so a Newton step cannot overshoot. With hess = y_p (the
 * diagonal alone) a leaf shared by a program's rows moves its sum n_p times too far: lowered
 * convolutions have 15-30 stores, every round multiplied the error by about eta * n_p = 5,
 * early stopping kept no tree, and the search ran on a constant model. Rounds stop early when
 * the training loss (pack-sum RMSE weighted by y) has not improved by KILN_CM_MIN_GAIN for
 * `patience` rounds; prediction then uses the trees up to the last such improvement.
 *
 * Rank (the alternative): one row per program, the mean of its rows, trained with XGBoost's
 * rank:pairwise objective (all programs in one group) for max_rounds rounds.
 *
 * Every XGBoost handle is freed on every path; a failed training leaves the previous model. */
#include "tuner.h"

#include <xgboost/c_api.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A boosting round improves the training loss when it lowers it by this share: the last 1%
 * takes hundreds of rounds of overfitting (gamma 0) and most of the training time. */
#define KILN_CM_MIN_GAIN 0.01

struct kiln_cost_model {
    kiln_ctx             *ctx;
    uint64_t              seed;
    struct kiln_cm_params p;
    BoosterHandle         bst;       /* NULL until trained */
    uint8_t               objective; /* of bst */
    uint32_t              rounds;    /* trees of bst used for prediction */
};

void
kiln_cm_params_default(struct kiln_cm_params *p)
{
    *p = (struct kiln_cm_params){.objective = KILN_CM_PACK_SUM,
                                 .max_rounds = 300,
                                 .patience = 30,
                                 .max_depth = 4,
                                 .max_bin = 64,
                                 .eta = 0.2,
                                 .gamma = 0,
                                 .min_child_weight = 0,
                                 .nthread = 1};
}

struct kiln_cost_model *
kiln_cm_new(kiln_ctx *ctx, uint64_t seed)
{
    struct kiln_cost_model *m = kiln_mem_realloc(ctx, NULL, 0, sizeof *m);
    if (!m) {
        KILN_FAIL(ctx, KILN_ERR_NOMEM, "xgboost", "out of memory creating the cost model");
        return NULL;
    }
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->seed = seed;
    kiln_cm_params_default(&m->p);
    return m;
}

void
kiln_cm_free(struct kiln_cost_model *m)
{
    if (!m)
        return;
    if (m->bst)
        XGBoosterFree(m->bst);
    kiln_mem_free(m->ctx, m, sizeof *m);
}

enum kiln_status
kiln_cm_set_params(struct kiln_cost_model *m, const struct kiln_cm_params *p)
{
    if (!p || p->objective > KILN_CM_RANK || p->max_rounds == 0 || p->max_rounds > 100000
        || p->max_depth < 1 || p->max_depth > 30 || p->max_bin < 2 || p->max_bin > 4096
        || !(p->eta > 0 && p->eta <= 1) || !(p->gamma >= 0) || !(p->min_child_weight >= 0)
        || p->nthread < 1 || p->nthread > 1024)
        return KILN_FAIL(m->ctx, KILN_ERR_INVALID, "xgboost",
                         "cost model parameters out of range (objective 0-1, max_rounds "
                         "1-100000, max_depth 1-30, max_bin 2-4096, eta in (0, 1], gamma >= 0, "
                         "min_child_weight >= 0, nthread 1-1024)");
    m->p = *p;
    return KILN_OK;
}

bool
kiln_cm_trained(const struct kiln_cost_model *m)
{
    return m && m->bst;
}

uint32_t
kiln_cm_rounds(const struct kiln_cost_model *m)
{
    return m && m->bst ? m->rounds : 0;
}

static enum kiln_status
xgb_fail(kiln_ctx *ctx, const char *call)
{
    const char *msg = XGBGetLastError();
    return KILN_FAIL(ctx, KILN_ERR_BACKEND, "xgboost", "%s failed: %s", call,
                     msg && *msg ? msg : "(no message)");
}

#define XGB(ctx, call)                 \
    do {                               \
        if ((call) != 0) {             \
            st = xgb_fail(ctx, #call); \
            goto out;                  \
        }                              \
    } while (0)

/* Checks the programs and counts their rows. */
static enum kiln_status
check_feats(kiln_ctx *ctx, const struct kiln_feat *feats, uint32_t n, size_t *nrows)
{
    *nrows = 0;
    if (n && !feats)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost", "no features given for %u programs", n);
    for (uint32_t i = 0; i < n; i++) {
        if (feats[i].nrow && !feats[i].row)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost",
                             "program %u has %u feature rows but no data", i, feats[i].nrow);
        *nrows += feats[i].nrow;
    }
    return KILN_OK;
}

/* The matrix the booster sees: every row (pack-sum) or one mean row per program with rows
 * (rank; prog[i] = its program). */
static float *
build_matrix(const struct kiln_feat *feats, uint32_t n, size_t nrows, bool pooled, uint32_t *prog,
             size_t *out_rows)
{
    size_t rows = pooled ? 0 : nrows;
    if (pooled)
        for (uint32_t i = 0; i < n; i++)
            rows += feats[i].nrow > 0;
    float *x = malloc(sizeof(float) * KILN_FEAT_DIM * (rows ? rows : 1));
    if (!x)
        return NULL;
    size_t r = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct kiln_feat *F = &feats[i];
        if (!pooled) {
            memcpy(x + r * KILN_FEAT_DIM, F->row, sizeof(float) * KILN_FEAT_DIM * F->nrow);
            for (uint32_t k = 0; k < F->nrow; k++)
                prog[r++] = i;
            continue;
        }
        if (!F->nrow)
            continue;
        float *dst = x + r * KILN_FEAT_DIM;
        for (uint32_t c = 0; c < KILN_FEAT_DIM; c++) {
            double s = 0;
            for (uint32_t k = 0; k < F->nrow; k++)
                s += F->row[(size_t)k * KILN_FEAT_DIM + c];
            dst[c] = (float)(s / F->nrow);
        }
        prog[r++] = i;
    }
    *out_rows = r;
    return x;
}

static enum kiln_status
set_params(kiln_ctx *ctx, BoosterHandle b, const struct kiln_cm_params *p, uint64_t seed)
{
    char depth[32], bins[32], eta[32], gamma[32], mcw[32], nth[32], sd[32];
    snprintf(depth, sizeof depth, "%d", p->max_depth);
    snprintf(bins, sizeof bins, "%d", p->max_bin);
    snprintf(eta, sizeof eta, "%.17g", p->eta);
    snprintf(gamma, sizeof gamma, "%.17g", p->gamma);
    snprintf(mcw, sizeof mcw, "%.17g", p->min_child_weight);
    snprintf(nth, sizeof nth, "%d", p->nthread);
    snprintf(sd, sizeof sd, "%d", (int)(seed % 2147483647u));
    const char *kv[][2] = {
        {"verbosity", "0"},
        {"booster", "gbtree"},
        {"tree_method", "hist"},
        {"max_depth", depth},
        {"eta", eta},
        {"gamma", gamma},
        {"min_child_weight", mcw},
        {"nthread", nth},
        {"seed", sd},
        {"base_score", p->objective == KILN_CM_RANK ? "0.5" : "0"},
        {"max_bin", bins},
        {"objective", p->objective == KILN_CM_RANK ? "rank:pairwise" : "reg:squarederror"},
    };
    for (size_t i = 0; i < KILN_COUNTOF(kv); i++)
        if (XGBoosterSetParam(b, kv[i][0], kv[i][1]) != 0)
            return xgb_fail(ctx, "XGBoosterSetParam");
    return KILN_OK;
}

/* Pack-sum RMSE over programs with rows, weighted by y as the loss is; sums per program into
 * sum[]. */
static double
pack_rmse(const float *pred, const uint32_t *prog, size_t rows, const double *y, uint32_t n,
          const struct kiln_feat *feats, double *sum)
{
    memset(sum, 0, sizeof(double) * n);
    for (size_t r = 0; r < rows; r++)
        sum[prog[r]] += pred ? pred[r] : 0;
    double se = 0, w = 0;
    for (uint32_t i = 0; i < n; i++)
        if (feats[i].nrow) {
            se += y[i] * (sum[i] - y[i]) * (sum[i] - y[i]);
            w += y[i];
        }
    return w > 0 ? sqrt(se / w) : 0;
}

enum kiln_status
kiln_cm_train(struct kiln_cost_model *m, const struct kiln_feat *feats, const double *y, uint32_t n)
{
    kiln_ctx *ctx = m->ctx;
    size_t    nrows;
    if (n == 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost",
                         "no programs to train the cost model on");
    if (!y)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost", "no throughputs given");
    KILN_TRY(check_feats(ctx, feats, n, &nrows));
    for (uint32_t i = 0; i < n; i++)
        if (!isfinite(y[i]) || y[i] < 0)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost",
                             "throughput of program %u is %g; expected a finite value >= 0", i,
                             y[i]);
    if (nrows == 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost",
                         "none of the %u programs has a feature row", n);

    const struct kiln_cm_params *p = &m->p;
    bool                         rank = p->objective == KILN_CM_RANK;
    enum kiln_status             st = KILN_OK;
    DMatrixHandle                d = NULL;
    BoosterHandle                b = NULL;
    size_t                       rows = 0;
    uint32_t                    *prog = malloc(sizeof(uint32_t) * nrows);
    float                       *x = prog ? build_matrix(feats, n, nrows, rank, prog, &rows) : NULL;
    float                       *grad = malloc(sizeof(float) * nrows);
    float                       *hess = malloc(sizeof(float) * nrows);
    double                      *sum = malloc(sizeof(double) * n);
    uint32_t                     kept = 0;
    if (!prog || !x || !grad || !hess || !sum) {
        st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "xgboost", "out of memory training the cost model");
        goto out;
    }
    XGB(ctx, XGDMatrixCreateFromMat(x, (bst_ulong)rows, KILN_FEAT_DIM, NAN, &d));
    if (rank) {
        for (size_t r = 0; r < rows; r++)
            grad[r] = (float)y[prog[r]]; /* labels */
        unsigned group = (unsigned)rows;
        XGB(ctx, XGDMatrixSetFloatInfo(d, "label", grad, (bst_ulong)rows));
        XGB(ctx, XGDMatrixSetUIntInfo(d, "group", &group, 1));
    }
    XGB(ctx, XGBoosterCreate(&d, 1, &b));
    if ((st = set_params(ctx, b, p, m->seed)) != KILN_OK)
        goto out;
    if (rank) {
        for (uint32_t it = 0; it < p->max_rounds; it++)
            XGB(ctx, XGBoosterUpdateOneIter(b, (int)it, d));
        kept = p->max_rounds;
    } else {
        double   best = INFINITY;
        uint32_t best_it = 0;
        for (uint32_t it = 0;; it++) {
            const float *pred = NULL;
            bst_ulong    len = 0;
            if (it > 0) {
                XGB(ctx, XGBoosterPredict(b, d, 1, 0, 1, &len, &pred));
                if (len != rows) {
                    st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "xgboost",
                                   "XGBoosterPredict returned %llu values for %zu rows",
                                   (unsigned long long)len, rows);
                    goto out;
                }
            }
            double rmse = pack_rmse(pred, prog, rows, y, n, feats, sum);
            if (rmse < best * (1 - KILN_CM_MIN_GAIN)) {
                best = rmse;
                best_it = it;
            } else if (it - best_it >= p->patience) {
                break;
            }
            if (it == p->max_rounds)
                break;
            for (size_t r = 0; r < rows; r++) {
                double yp = y[prog[r]];
                grad[r] = (float)(yp * (sum[prog[r]] - yp));
                hess[r] = (float)(yp * feats[prog[r]].nrow);
            }
            XGB(ctx, XGBoosterBoostOneIter(b, d, grad, hess, (bst_ulong)rows));
        }
        kept = best_it;
    }
    if (m->bst)
        XGBoosterFree(m->bst);
    m->bst = b;
    m->objective = p->objective;
    m->rounds = kept;
    b = NULL;
out:
    if (b)
        XGBoosterFree(b);
    if (d)
        XGDMatrixFree(d);
    free(prog);
    free(x);
    free(grad);
    free(hess);
    free(sum);
    return st;
}

enum kiln_status
kiln_cm_predict(struct kiln_cost_model *m, const struct kiln_feat *feats, uint32_t n, double *score)
{
    kiln_ctx *ctx = m->ctx;
    size_t    nrows;
    if (n == 0)
        return KILN_OK;
    if (!score)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost", "no score array given");
    KILN_TRY(check_feats(ctx, feats, n, &nrows));
    for (uint32_t i = 0; i < n; i++)
        score[i] = 0;
    if (!m->bst || m->rounds == 0 || nrows == 0)
        return KILN_OK;
    bool             rank = m->objective == KILN_CM_RANK;
    enum kiln_status st = KILN_OK;
    DMatrixHandle    d = NULL;
    size_t           rows = 0;
    uint32_t        *prog = malloc(sizeof(uint32_t) * nrows);
    float           *x = prog ? build_matrix(feats, n, nrows, rank, prog, &rows) : NULL;
    if (!prog || !x) {
        st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "xgboost", "out of memory predicting");
        goto out;
    }
    XGB(ctx, XGDMatrixCreateFromMat(x, (bst_ulong)rows, KILN_FEAT_DIM, NAN, &d));
    char config[160];
    snprintf(config, sizeof config,
             "{\"type\": 1, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": %u, "
             "\"strict_shape\": false}",
             m->rounds);
    const bst_ulong *shape = NULL;
    bst_ulong        dim = 0;
    const float     *pred = NULL;
    XGB(ctx, XGBoosterPredictFromDMatrix(m->bst, d, config, &shape, &dim, &pred));
    if (dim < 1 || shape[0] != rows) {
        st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "xgboost", "prediction has an unexpected shape");
        goto out;
    }
    for (size_t r = 0; r < rows; r++)
        score[prog[r]] += pred[r];
out:
    if (d)
        XGDMatrixFree(d);
    free(prog);
    free(x);
    return st;
}

/* ---- model files ----
 * A header line, then the booster in XGBoost's UBJSON (the trees prediction uses, sliced):
 *     kiln-cost-model 1 feat_dim=182 objective=0 rounds=57 bytes=N hash=16HEX\n<ubjson>
 * The feature count is checked on load: a model trained on other features ranks nonsense. The
 * body's length and hash (kiln_hash_bytes) are checked before XGBoost sees it: its UBJSON
 * reader trusts lengths inside the data, and a damaged body crashed it. */
#define CM_MAGIC "kiln-cost-model 1 "

enum kiln_status
kiln_cm_save(const struct kiln_cost_model *m, struct kiln_buf *out)
{
    kiln_ctx *ctx = m->ctx;
    if (!m->bst || m->rounds == 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost", "the cost model is not trained");
    enum kiln_status st = KILN_OK;
    BoosterHandle    sl = NULL;
    bst_ulong        len = 0;
    const char      *data = NULL;
    XGB(ctx, XGBoosterSlice(m->bst, 0, (int)m->rounds, 1, &sl));
    XGB(ctx, XGBoosterSaveModelToBuffer(sl, "{\"format\": \"ubj\"}", &len, &data));
    if (!kiln_buf_printf(ctx, out,
                         CM_MAGIC "feat_dim=%d objective=%d rounds=%u bytes=%llu hash=%016llx\n",
                         KILN_FEAT_DIM, (int)m->objective, m->rounds, (unsigned long long)len,
                         (unsigned long long)kiln_hash_bytes(0, data, (size_t)len))
        || !kiln_buf_put(ctx, out, data, (size_t)len))
        st = KILN_ERR_NOMEM;
out:
    if (sl)
        XGBoosterFree(sl);
    return st;
}

enum kiln_status
kiln_cm_load(struct kiln_cost_model *m, const void *data, size_t len, const char *what)
{
    kiln_ctx          *ctx = m->ctx;
    const char        *s = data, *nl = data ? memchr(s, '\n', len < 256 ? len : 256) : NULL;
    int                dim = 0, obj = -1, used = 0;
    unsigned           rounds = 0;
    unsigned long long bytes = 0, hash = 0;
    char               head[256];
    if (!nl || len < sizeof CM_MAGIC || memcmp(s, CM_MAGIC, sizeof CM_MAGIC - 1))
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost",
                         "%s: not a kiln cost model (no \"" CM_MAGIC "...\" header line)", what);
    memcpy(head, s, (size_t)(nl - s));
    head[nl - s] = 0;
    if (sscanf(head + sizeof CM_MAGIC - 1, "feat_dim=%d", &dim) == 1 && dim != KILN_FEAT_DIM)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost",
                         "%s: trained on %d features; this kiln extracts %d (retrain it: kiln "
                         "costmodel train)",
                         what, dim, KILN_FEAT_DIM);
    if (sscanf(head + sizeof CM_MAGIC - 1,
               "feat_dim=%d objective=%d rounds=%u bytes=%llu hash=%16llx%n", &dim, &obj, &rounds,
               &bytes, &hash, &used)
            != 5
        || head[sizeof CM_MAGIC - 1 + used] != 0 || obj < 0 || obj > KILN_CM_RANK || rounds == 0
        || rounds > 100000)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost", "%s: damaged header line \"%s\"", what,
                         head);
    size_t off = (size_t)(nl - s) + 1;
    if (len - off != bytes || kiln_hash_bytes(0, s + off, len - off) != hash)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost",
                         "%s: damaged model: %zu bytes after the header line, whose length (%llu) "
                         "and hash do not match them",
                         what, len - off, bytes);
    enum kiln_status st = KILN_OK;
    BoosterHandle    b = NULL;
    XGB(ctx, XGBoosterCreate(NULL, 0, &b));
    if (XGBoosterLoadModelFromBuffer(b, s + off, (bst_ulong)(len - off)) != 0) {
        const char *msg = XGBGetLastError();
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost", "%s: damaged model: %.200s", what,
                       msg && *msg ? msg : "(no message)");
        goto out;
    }
    /* a loaded booster would otherwise predict on OpenMP's default thread count: every core,
     * under each of kiln_graph_schedule's predicting threads */
    char nth[16];
    snprintf(nth, sizeof nth, "%d", m->p.nthread);
    XGB(ctx, XGBoosterSetParam(b, "nthread", nth));
    bst_ulong nfeat = 0;
    XGB(ctx, XGBoosterGetNumFeature(b, &nfeat));
    if (nfeat != (bst_ulong)KILN_FEAT_DIM) {
        st = KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost",
                       "%s: the booster reads %llu features; its header says %d", what,
                       (unsigned long long)nfeat, dim);
        goto out;
    }
    if (m->bst)
        XGBoosterFree(m->bst);
    m->bst = b;
    m->objective = (uint8_t)obj;
    m->rounds = rounds;
    b = NULL;
out:
    if (b)
        XGBoosterFree(b);
    return st;
}

enum kiln_status
kiln_cm_load_file(struct kiln_cost_model *m, const char *path)
{
    kiln_ctx *ctx = m->ctx;
    FILE     *f = fopen(path, "rb");
    if (!f)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost", "cannot open cost model %s: %s", path,
                         strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode) || sb.st_size > KILN_CM_MAX_BYTES) {
        fclose(f);
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost",
                         "%s: not a regular file of at most %d MiB", path, KILN_CM_MAX_BYTES >> 20);
    }
    size_t len = (size_t)sb.st_size;
    char  *buf = malloc(len ? len : 1);
    if (!buf) {
        fclose(f);
        return KILN_FAIL(ctx, KILN_ERR_NOMEM, "xgboost", "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, len, f);
    fclose(f);
    enum kiln_status st =
        got == len ? kiln_cm_load(m, buf, len, path)
                   : KILN_FAIL(ctx, KILN_ERR_INVALID, "xgboost", "cannot read cost model %s", path);
    free(buf);
    return st;
}

/* cm_shipped.c, generated from tuner/model/cpu.kcm by cmake/embed.cmake */
extern const unsigned char kiln_cm_shipped_bytes[];
extern const size_t        kiln_cm_shipped_bytes_len;

const unsigned char *
kiln_cm_shipped(size_t *len)
{
    *len = kiln_cm_shipped_bytes_len;
    return kiln_cm_shipped_bytes_len ? kiln_cm_shipped_bytes : NULL;
}
