/* tests/ir/test_ir.c -- expressions: interning, canonical forms, folding, type errors,
 * substitution, rollback; graphs built through the internal API. */
#include "../harness.h"

#include <math.h>
#include <string.h>

static void
test_interning(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    kiln_expr i = kiln_axis(ctx, 0), j = kiln_axis(ctx, 1);
    kiln_expr a = kiln_add(ctx, kiln_mul(ctx, i, kiln_idx(ctx, 4)), j);
    kiln_expr b = kiln_add(ctx, j, kiln_mul(ctx, kiln_idx(ctx, 4), i));
    CHECK(a.id != 0);
    CHECK_EQ_INT(a.id, b.id); /* commutative operands canonicalised */
    uint32_t  n = ctx->nnode;
    kiln_expr c = kiln_add(ctx, kiln_mul(ctx, i, kiln_idx(ctx, 4)), j);
    CHECK_EQ_INT(a.id, c.id);
    CHECK_EQ_INT(n, ctx->nnode); /* nothing new interned */
    kiln_ctx_free(ctx);
}

static void
test_folding(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    kiln_expr i = kiln_axis(ctx, 0);
    int64_t   v;
    CHECK(kiln_expr_is_int(ctx, kiln_add(ctx, kiln_idx(ctx, 3), kiln_idx(ctx, 4)), &v));
    CHECK_EQ_INT(7, v);
    CHECK(kiln_expr_is_int(ctx, kiln_floordiv(ctx, kiln_idx(ctx, -7), kiln_idx(ctx, 2)), &v));
    CHECK_EQ_INT(-4, v);
    CHECK(kiln_expr_is_int(ctx, kiln_floormod(ctx, kiln_idx(ctx, -7), kiln_idx(ctx, 2)), &v));
    CHECK_EQ_INT(1, v);
    CHECK(kiln_expr_is_int(ctx, kiln_floormod(ctx, kiln_idx(ctx, 7), kiln_idx(ctx, -2)), &v));
    CHECK_EQ_INT(-1, v);
    CHECK_EQ_INT(i.id, kiln_add(ctx, i, kiln_idx(ctx, 0)).id);
    CHECK_EQ_INT(i.id, kiln_mul(ctx, kiln_idx(ctx, 1), i).id);
    CHECK(kiln_expr_is_int(ctx, kiln_mul(ctx, i, kiln_idx(ctx, 0)), &v) && v == 0);
    CHECK(kiln_expr_is_int(ctx, kiln_sub(ctx, i, i), &v) && v == 0);
    CHECK_EQ_INT(i.id, kiln_min(ctx, i, i).id);
    kiln_expr x = kiln_float(ctx, 2.0, KILN_DTYPE_F32);
    double    d;
    CHECK(kiln_expr_is_const(ctx, kiln_unary(ctx, KILN_OP_SQRT, x), &d));
    CHECK_NEAR(sqrt(2.0), d, 1e-15);
    kiln_expr c = kiln_lt(ctx, i, kiln_idx(ctx, 3));
    CHECK_EQ_INT(i.id, kiln_select(ctx, kiln_bool(ctx, true), i, kiln_idx(ctx, 5)).id);
    CHECK_EQ_INT(i.id, kiln_select(ctx, c, i, i).id);
    CHECK_EQ_INT(c.id, kiln_unary(ctx, KILN_OP_NOT, kiln_unary(ctx, KILN_OP_NOT, c)).id);
    CHECK_EQ_INT(c.id, kiln_and(ctx, c, kiln_bool(ctx, true)).id);
    CHECK_EQ_INT(c.id, kiln_and(ctx, kiln_bool(ctx, true), c).id); /* constant first */
    CHECK_EQ_INT(c.id, kiln_binary(ctx, KILN_OP_OR, kiln_bool(ctx, false), c).id);
    /* float x*0 is not folded (NaN * 0 is NaN) */
    kiln_expr f = kiln_load(ctx, 0, KILN_DTYPE_F32, 1, &i);
    CHECK(kiln_mul(ctx, f, kiln_float(ctx, 0, KILN_DTYPE_F32)).id
          != kiln_float(ctx, 0, KILN_DTYPE_F32).id);
    CHECK(kiln_expr_is_int(
              ctx, kiln_cast(ctx, KILN_DTYPE_I32, kiln_float(ctx, -2.7, KILN_DTYPE_F32)), &v)
          && v == -2);
    /* kiln_const saturates to the dtype: +-inf are the identities of min and max reductions */
    CHECK(kiln_expr_is_int(ctx, kiln_const(ctx, INFINITY, KILN_DTYPE_I32), &v) && v == INT32_MAX);
    CHECK(kiln_expr_is_int(ctx, kiln_const(ctx, -INFINITY, KILN_DTYPE_I32), &v) && v == INT32_MIN);
    CHECK(kiln_expr_is_int(ctx, kiln_const(ctx, -INFINITY, KILN_DTYPE_I64), &v) && v == INT64_MIN);
    CHECK(kiln_expr_is_int(ctx, kiln_const(ctx, -3.5, KILN_DTYPE_I32), &v) && v == -3);
    CHECK(kiln_ok(ctx));
    kiln_ctx_free(ctx);
}

static void
test_type_errors(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    kiln_expr i = kiln_axis(ctx, 0);
    kiln_expr f = kiln_float(ctx, 1.5, KILN_DTYPE_F32);
    CHECK_EQ_INT(0, kiln_add(ctx, i, f).id);
    CHECK(kiln_ctx_error(ctx) != NULL);
    CHECK_EQ_STR("add: operand types i64 and f32 differ", kiln_ctx_error(ctx)->msg);
    /* sticky: later builders return nil */
    CHECK_EQ_INT(0, kiln_add(ctx, i, i).id);
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(0, kiln_div(ctx, i, i).id);
    CHECK_EQ_STR("div: needs float operands, not i64 (use floordiv for integers)",
                 kiln_ctx_error(ctx)->msg);
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(0, kiln_floordiv(ctx, i, kiln_idx(ctx, 0)).id);
    CHECK_EQ_STR("floordiv: division by zero", kiln_ctx_error(ctx)->msg);
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(0, kiln_unary(ctx, KILN_OP_EXP, i).id);
    CHECK_EQ_STR("exp: needs a float operand, not i64", kiln_ctx_error(ctx)->msg);
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(0, kiln_select(ctx, i, f, f).id);
    CHECK_EQ_STR("select: condition must be bool, not i64", kiln_ctx_error(ctx)->msg);
    kiln_ctx_free(ctx);
}

static void
test_subst_and_rollback(void)
{
    kiln_ctx *ctx = kiln_ctx_new(NULL);
    kiln_expr i = kiln_axis(ctx, 0), r = kiln_rvar(ctx, 0);
    kiln_expr e = kiln_add(ctx, kiln_mul(ctx, i, kiln_idx(ctx, 2)), r);
    kiln_expr ax[1] = {kiln_idx(ctx, 3)}, rv[1] = {kiln_idx(ctx, 1)};
    int64_t   v;
    CHECK(kiln_expr_is_int(ctx, kiln_expr_subst(ctx, e, ax, 1, rv, 1), &v) && v == 7);
    CHECK_EQ_INT(e.id, kiln_expr_subst(ctx, e, NULL, 0, NULL, 0).id);
    kiln_expr ld = kiln_load(ctx, 2, KILN_DTYPE_F32, 1, &e);
    kiln_expr rt = kiln_expr_retarget(ctx, ld, 2, 5);
    CHECK_EQ_INT(5, kiln_node_get(ctx, rt)->imm);
    CHECK_EQ_INT(e.id, kiln_load_idx(ctx, rt, 0).id);
    uint32_t  mark = kiln_expr_mark(ctx);
    kiln_expr big = kiln_add(ctx, e, kiln_idx(ctx, 12345));
    CHECK(big.id >= mark);
    kiln_expr_rollback(ctx, mark);
    CHECK_EQ_INT(mark, ctx->nnode);
    kiln_expr again = kiln_add(ctx, e, kiln_idx(ctx, 12345));
    CHECK(again.id >= mark); /* re-interned after rollback */
    CHECK_EQ_INT(e.id, kiln_add(ctx, kiln_mul(ctx, i, kiln_idx(ctx, 2)), r).id);
    kiln_ctx_free(ctx);
}

static void
test_structural_hash_independent_of_order(void)
{
    /* Build the same expression in two contexts in different creation orders. */
    kiln_ctx *a = kiln_ctx_new(NULL), *b = kiln_ctx_new(NULL);
    kiln_expr ai = kiln_axis(a, 0), aj = kiln_axis(a, 1);
    kiln_expr ea = kiln_add(a, kiln_mul(a, ai, aj), kiln_max(a, aj, kiln_idx(a, 3)));
    kiln_expr bj = kiln_axis(b, 1);
    (void)kiln_max(b, bj, kiln_idx(b, 3));
    kiln_expr bi = kiln_axis(b, 0);
    kiln_expr eb = kiln_add(b, kiln_max(b, kiln_idx(b, 3), bj), kiln_mul(b, bj, bi));
    CHECK(kiln_expr_hash(a, ea) == kiln_expr_hash(b, eb));
    kiln_ctx_free(a);
    kiln_ctx_free(b);
}

static void
test_graph_api_errors(void)
{
    kiln_ctx          *ctx = kiln_ctx_new(NULL);
    struct kiln_graph *g = kiln_graph_new(ctx);
    int64_t            shape[2] = {4, 0};
    CHECK_EQ_INT(KILN_NONE,
                 kiln_graph_add_tensor(g, "x", KILN_DTYPE_F32, 2, shape, KILN_TENSOR_INPUT));
    CHECK_EQ_STR("tensor x: dimension 1 has extent 0; extents must be positive",
                 kiln_ctx_error(ctx)->msg);
    kiln_ctx_error_clear(ctx);
    int64_t big[4] = {1 << 20, 1 << 20, 2, 1};
    CHECK_EQ_INT(KILN_NONE,
                 kiln_graph_add_tensor(g, "y", KILN_DTYPE_F32, 4, big, KILN_TENSOR_INPUT));
    CHECK_EQ_STR("tensor y is too large: more than 2^40 elements", kiln_ctx_error(ctx)->msg);
    kiln_ctx_error_clear(ctx);
    shape[1] = 3;
    uint32_t x = kiln_graph_add_tensor(g, "x", KILN_DTYPE_F32, 2, shape, KILN_TENSOR_INPUT);
    CHECK_EQ_INT(0, x);
    CHECK_EQ_INT(KILN_NONE,
                 kiln_graph_add_tensor(g, "x", KILN_DTYPE_F32, 2, shape, KILN_TENSOR_WEIGHT));
    CHECK_EQ_STR("tensor x is defined twice", kiln_ctx_error(ctx)->msg);
    kiln_ctx_error_clear(ctx);
    uint32_t  y = kiln_graph_add_tensor(g, "y", KILN_DTYPE_F32, 2, shape, KILN_TENSOR_OP);
    kiln_expr ix[2] = {kiln_axis(ctx, 0), kiln_axis(ctx, 1)};
    kiln_expr body = kiln_unary(ctx, KILN_OP_EXP, kiln_load(ctx, x, KILN_DTYPE_F32, 2, ix));
    CHECK_EQ_INT(KILN_OK, kiln_graph_begin_call(g, "compute", 0, NULL, 0, NULL, 1, 1));
    CHECK_EQ_INT(KILN_OK, kiln_graph_add_op(g, y, KILN_REDUCE_NONE, 0, NULL, body, NULL, NULL));
    CHECK_EQ_INT(KILN_OK, kiln_graph_end_call(g, y));
    /* a body reading its own output is rejected */
    uint32_t  z = kiln_graph_add_tensor(g, "z", KILN_DTYPE_F32, 2, shape, KILN_TENSOR_OP);
    kiln_expr self = kiln_load(ctx, z, KILN_DTYPE_F32, 2, ix);
    CHECK(kiln_graph_add_op(g, z, KILN_REDUCE_NONE, 0, NULL, self, NULL, NULL) == KILN_ERR_INVALID);
    CHECK_EQ_STR("z: body reads the tensor it defines", kiln_ctx_error(ctx)->msg);
    kiln_ctx_error_clear(ctx);
    CHECK_EQ_INT(KILN_OK, kiln_graph_default_outputs(g));
    CHECK_EQ_INT(1, g->noutput); /* y only: z was never defined */
    kiln_ctx_free(ctx);
}

static void
test_symbols_survive_rewind(void)
{
    kiln_ctx              *ctx = kiln_ctx_new(NULL);
    struct kiln_arena_mark m = kiln_arena_mark(ctx);
    uint32_t               a = kiln_sym_cstr(ctx, "made.after.the.mark");
    (void)kiln_arena_alloc(ctx, 1 << 20); /* force a new block, then free it */
    kiln_arena_rewind(ctx, m);
    CHECK_EQ_STR("made.after.the.mark", kiln_sym_str(ctx, a));
    CHECK_EQ_INT(a, kiln_sym_cstr(ctx, "made.after.the.mark"));
    kiln_ctx_free(ctx);
}

/* ---- one element of an array of any dtype (kiln_scalar_load / kiln_scalar_store) ---- */

static uint16_t
bits16(const void *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* Storing rounds floats like kiln_scalar_round (directly from double: no double rounding
 * through float for bf16) and converts integers like kiln_scalar_to_int; every f16/bf16 bit
 * pattern round-trips; f16 agrees with the compiler's _Float16 conversion where it has one. */
static void
test_scalar_elements(void)
{
    unsigned char buf[32];
    /* every f16 and bf16 bit pattern survives load -> store (NaNs stay NaN) */
    uint32_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t in = (uint16_t)h;
        for (int k = 0; k < 2; k++) {
            enum kiln_dtype dt = k ? KILN_DTYPE_BF16 : KILN_DTYPE_F16;
            memcpy(buf, &in, 2);
            double v = kiln_scalar_load(dt, buf, 0), got = kiln_scalar_store(dt, buf + 2, 0, v);
            bool   ok = isnan(v) ? isnan(got) : bits16(buf + 2) == in && got == v;
            if (!ok && bad++ < 5)
                printf("%s bits 0x%04x: value %.17g stored as 0x%04x\n", k ? "bf16" : "f16",
                       (unsigned)h, v, (unsigned)bits16(buf + 2));
        }
    }
    CHECK_EQ_INT(0, bad);
    /* random values over many binades: the stored value is kiln_scalar_round's, loads agree */
    struct kiln_rng       r = kiln_rng_new(opt_seed());
    const enum kiln_dtype fdt[] = {KILN_DTYPE_F16, KILN_DTYPE_BF16, KILN_DTYPE_F32, KILN_DTYPE_F64};
    uint64_t              n = opt_iters_or(20000);
    bad = 0;
    for (uint64_t t = 0; t < n; t++) {
        double v = ldexp(2 * kiln_rng_uniform(&r) - 1, (int)kiln_rng_below(&r, 80) - 40);
        if (t % 3 == 0) /* ties and near-ties of the narrow formats */
            v = ldexp(1 + ldexp((double)kiln_rng_below(&r, 4096), -12),
                      (int)kiln_rng_below(&r, 40) - 30)
                + ldexp((double)kiln_rng_below(&r, 3) - 1, -60);
        for (size_t k = 0; k < KILN_COUNTOF(fdt); k++) {
            double got = kiln_scalar_store(fdt[k], buf, 1, v), want = kiln_scalar_round(v, fdt[k]);
            bool   ok = got == want && kiln_scalar_load(fdt[k], buf, 1) == want;
#ifdef __FLT16_MAX__
            if (fdt[k] == KILN_DTYPE_F16) {
                _Float16 h = (_Float16)v;
                ok = ok && memcmp(&h, buf + 2, 2) == 0;
            }
#endif
            if (!ok && bad++ < 5)
                printf("dtype %d: %.17g stored as %.17g, want %.17g\n", (int)fdt[k], v, got, want);
        }
    }
    CHECK_EQ_INT(0, bad);
    /* bf16 rounds once: 1 + 2^-8 + 2^-30 is above the tie, so it rounds up to 1 + 2^-7
     * (through float it would be the tie 1 + 2^-8 and round to even, 1) */
    double up = 1 + ldexp(1, -8) + ldexp(1, -30);
    CHECK(kiln_scalar_store(KILN_DTYPE_BF16, buf, 0, up) == 1 + ldexp(1, -7));
    CHECK_EQ_INT(0x3f81, bits16(buf));
    CHECK(kiln_scalar_store(KILN_DTYPE_F16, buf, 0, 65520) == INFINITY); /* overflow */
    CHECK(kiln_scalar_store(KILN_DTYPE_F16, buf, 0, 65519) == 65504);
    CHECK(kiln_scalar_store(KILN_DTYPE_F16, buf, 0, -ldexp(1, -25)) == 0); /* tie to 0 */
    CHECK(signbit(kiln_scalar_load(KILN_DTYPE_F16, buf, 0)));
    CHECK(isnan(kiln_scalar_store(KILN_DTYPE_BF16, buf, 0, NAN)));
    CHECK(isnan(kiln_scalar_store(KILN_DTYPE_F16, buf, 0, -NAN)));
    /* integers: truncation toward zero, saturation, NaN -> 0, bool is v != 0 */
    CHECK(kiln_scalar_store(KILN_DTYPE_I32, buf, 3, -3.7) == -3);
    CHECK(kiln_scalar_store(KILN_DTYPE_I32, buf, 3, 1e20) == 2147483647.0);
    CHECK(kiln_scalar_store(KILN_DTYPE_I32, buf, 3, -1e20) == -2147483648.0);
    CHECK(kiln_scalar_store(KILN_DTYPE_I8, buf, 3, 300) == 127);
    CHECK(kiln_scalar_store(KILN_DTYPE_I8, buf, 3, -4) == -4);
    CHECK_EQ_INT(0xfc, buf[3]);
    CHECK(kiln_scalar_store(KILN_DTYPE_I64, buf, 1, NAN) == 0);
    CHECK(kiln_scalar_store(KILN_DTYPE_I64, buf, 1, 1e30) == ldexp(1, 63));
    int64_t i64;
    memcpy(&i64, buf + 8, 8);
    CHECK(i64 == INT64_MAX);
    CHECK(kiln_scalar_store(KILN_DTYPE_I64, buf, 1, -ldexp(1, 53) - 2) == -ldexp(1, 53) - 2);
    CHECK(kiln_scalar_store(KILN_DTYPE_BOOL, buf, 5, 0.25) == 1);
    CHECK_EQ_INT(1, buf[5]);
    CHECK(kiln_scalar_store(KILN_DTYPE_BOOL, buf, 5, 0) == 0);
    CHECK(kiln_scalar_store(KILN_DTYPE_F32, buf, 2, 0.1) == (double)0.1f);
}

static const struct test tests[] = {
    {"symbols_survive_rewind", test_symbols_survive_rewind},
    {"interning", test_interning},
    {"folding", test_folding},
    {"type_errors", test_type_errors},
    {"subst_and_rollback", test_subst_and_rollback},
    {"structural_hash_independent_of_order", test_structural_hash_independent_of_order},
    {"graph_api_errors", test_graph_api_errors},
    {"scalar_elements", test_scalar_elements},
};

int
main(int argc, char **argv)
{
    return harness_main(argc, argv, tests, KILN_COUNTOF(tests));
}
