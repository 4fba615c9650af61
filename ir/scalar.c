/* ir/scalar.c -- rounding to a float dtype and reading/writing one element of an array of any
 * dtype; the rest of the scalar semantics is inline in scalar.h (the interpreters' per-element
 * path). */
#include "ir.h"

#include <math.h>
#include <string.h>

/* v rounded to `mant` explicit mantissa bits with exponents down to emin (below that the
 * spacing stays fixed: subnormals), ties to even; above max it overflows to infinity. */
static double
round_to(double v, int mant, int emin, double max)
{
    if (!isfinite(v) || v == 0)
        return v;
    int e;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    e -= 1;
    if (e < emin)
        e = emin;
    double q = ldexp(1, e - mant);   /* spacing of representable values near v */
    double r = nearbyint(v / q) * q; /* ties to even in the default rounding mode */
    if (fabs(r) > max)
        return v > 0 ? INFINITY : -INFINITY;
    return r;
}

double
kiln_scalar_held(double v, enum kiln_dtype dt)
{
    if (dt == KILN_DTYPE_F16 || dt == KILN_DTYPE_BF16) /* compiled code stores them rounded */
        return kiln_scalar_round(v, dt);
    if (dt != KILN_DTYPE_F32 || isinf(v) || isnan(v))
        return v;
    double r = kiln_scalar_round(v, dt);
    return isinf(r) ? r : v;
}

double
kiln_scalar_round(double v, enum kiln_dtype dt)
{
    if (dt == KILN_DTYPE_F32)
        return (double)(float)v;
    if (dt == KILN_DTYPE_F16)
        return round_to(v, 10, -14, 65504);
    if (dt == KILN_DTYPE_BF16)
        return round_to(v, 7, -126, 3.3895313892515355e38);
    return v;
}

/* ---- elements of arrays: one definition of every dtype's storage ---- */

double
kiln_scalar_f16_value(uint16_t h)
{
    int    e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

double
kiln_scalar_bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float    f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f16 bits of v, which kiln_scalar_round(., F16) left exact (or infinite, or NaN). */
static uint16_t
f16_bits(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double   a = fabs(v);
    if (isnan(v))
        return sign | 0x7e00;
    if (isinf(a))
        return sign | 0x7c00;
    if (a < ldexp(1, -14)) /* subnormal: a multiple of 2^-24 */
        return sign | (uint16_t)(a * ldexp(1, 24));
    int    e;
    double f = frexp(a, &e); /* a = f 2^e, f in [0.5, 1) */
    return sign | (uint16_t)((e + 14) << 10) | (uint16_t)((f * 2 - 1) * 1024);
}

/* bf16 bits of v, which kiln_scalar_round(., BF16) left exact: the top half of the float. */
static uint16_t
bf16_bits(double v)
{
    float    f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return isnan(f) ? (uint16_t)((u >> 16) | 0x40) : (uint16_t)(u >> 16);
}

double
kiln_scalar_load(enum kiln_dtype dt, const void *data, int64_t i)
{
    const unsigned char *p = data;
    size_t               at = (size_t)i * kiln_dtype_size(dt);
    union {
        float    f32;
        double   f64;
        uint16_t u16;
        int16_t  i16;
        int32_t  i32;
        uint32_t u32;
        int64_t  i64;
        uint64_t u64;
    } u;
    switch (dt) {
    case KILN_DTYPE_F32:
        memcpy(&u.f32, p + at, 4);
        return u.f32;
    case KILN_DTYPE_F64:
        memcpy(&u.f64, p + at, 8);
        return u.f64;
    case KILN_DTYPE_F16:
        memcpy(&u.u16, p + at, 2);
        return kiln_scalar_f16_value(u.u16);
    case KILN_DTYPE_BF16:
        memcpy(&u.u16, p + at, 2);
        return kiln_scalar_bf16_value(u.u16);
    case KILN_DTYPE_I8:
        return (int8_t)p[at];
    case KILN_DTYPE_I32:
        memcpy(&u.i32, p + at, 4);
        return u.i32;
    case KILN_DTYPE_I64:
        memcpy(&u.i64, p + at, 8);
        return (double)u.i64;
    case KILN_DTYPE_BOOL:
        return p[at] != 0;
    case KILN_DTYPE_U8:
        return p[at];
    case KILN_DTYPE_U16:
        memcpy(&u.u16, p + at, 2);
        return u.u16;
    case KILN_DTYPE_U32:
        memcpy(&u.u32, p + at, 4);
        return u.u32;
    case KILN_DTYPE_U64:
        memcpy(&u.u64, p + at, 8);
        return (double)u.u64;
    case KILN_DTYPE_I16:
        memcpy(&u.i16, p + at, 2);
        return u.i16;
    case KILN_DTYPE_COUNT:
        break;
    }
    return NAN;
}

double
kiln_scalar_store(enum kiln_dtype dt, void *data, int64_t i, double v)
{
    unsigned char *p = data;
    size_t         at = (size_t)i * kiln_dtype_size(dt);
    bool           fl = kiln_dtype_is_float(dt);
    int64_t        x = fl ? 0 : kiln_scalar_to_int(v, dt);
    union {
        float    f32;
        int32_t  i32;
        uint16_t u16;
        uint32_t u32;
    } u;
    v = fl ? kiln_scalar_round(v, dt) : v;
    switch (dt) {
    case KILN_DTYPE_F32:
        u.f32 = (float)v;
        memcpy(p + at, &u.f32, 4);
        break;
    case KILN_DTYPE_F64:
        memcpy(p + at, &v, 8);
        break;
    case KILN_DTYPE_F16: {
        uint16_t h = f16_bits(v);
        memcpy(p + at, &h, 2);
        break;
    }
    case KILN_DTYPE_BF16: {
        uint16_t h = bf16_bits(v);
        memcpy(p + at, &h, 2);
        break;
    }
    case KILN_DTYPE_I8:
    case KILN_DTYPE_U8:
    case KILN_DTYPE_BOOL: /* x is in range: 0 or 1 for bool */
        p[at] = (unsigned char)((uint64_t)x & 0xffu);
        break;
    case KILN_DTYPE_I16:
    case KILN_DTYPE_U16:
        u.u16 = (uint16_t)((uint64_t)x & 0xffffu);
        memcpy(p + at, &u.u16, 2);
        break;
    case KILN_DTYPE_U32:
        u.u32 = (uint32_t)x;
        memcpy(p + at, &u.u32, 4);
        break;
    case KILN_DTYPE_I32:
        u.i32 = (int32_t)x;
        memcpy(p + at, &u.i32, 4);
        break;
    case KILN_DTYPE_I64:
    case KILN_DTYPE_U64:
        memcpy(p + at, &x, 8);
        break;
    case KILN_DTYPE_COUNT:
        break;
    }
    return kiln_scalar_load(dt, data, i);
}
