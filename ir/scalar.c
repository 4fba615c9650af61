/* ir/scalar.c -- rounding to a float dtype; the rest of the scalar semantics is inline in
 * scalar.h (the interpreters' per-element path). */
#include "ir.h"

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
