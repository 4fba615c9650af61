/* util/hash.c -- stable 64-bit hashing (FNV-1a over bytes, splitmix64 mixing), the seeded
 * xoshiro256** generator and checked integer arithmetic. Nothing here depends on the machine's
 * endianness or on addresses: hashes are keys in the tuning database. */
#include "util.h"

#include <math.h>

uint64_t
kiln_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t
kiln_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t             f = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        f = (f ^ s[i]) * 0x100000001b3ull;
    return kiln_mix64(h ^ kiln_mix64(f ^ n));
}

uint64_t
kiln_hash_u64(uint64_t h, uint64_t x)
{
    return kiln_mix64(h * 0x2545f4914f6cdd1dull ^ kiln_mix64(x));
}

uint64_t
kiln_hash_str(uint64_t h, const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return kiln_hash_bytes(h, s, n);
}

static uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

struct kiln_rng
kiln_rng_new(uint64_t seed)
{
    struct kiln_rng r;
    uint64_t        z = seed;
    for (int i = 0; i < 4; i++) {
        z += 0x9e3779b97f4a7c15ull;
        r.s[i] = kiln_mix64(z);
    }
    return r;
}

uint64_t
kiln_rng_next(struct kiln_rng *r)
{
    uint64_t *s = r->s;
    uint64_t  out = rotl(s[1] * 5, 7) * 9;
    uint64_t  t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint64_t
kiln_rng_below(struct kiln_rng *r, uint64_t n)
{
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = kiln_rng_next(r);
    while (x >= lim);
    return x % n;
}

double
kiln_rng_uniform(struct kiln_rng *r)
{
    return (double)(kiln_rng_next(r) >> 11) * 0x1.0p-53;
}

double
kiln_rng_normal(struct kiln_rng *r)
{
    double u = kiln_rng_uniform(r), v = kiln_rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

bool
kiln_mul_overflows(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

bool
kiln_add_overflows(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

int64_t
kiln_gcd64(int64_t a, int64_t b)
{
    uint64_t x = a < 0 ? 0 - (uint64_t)a : (uint64_t)a, y = b < 0 ? 0 - (uint64_t)b : (uint64_t)b;
    while (y) {
        uint64_t t = x % y;
        x = y;
        y = t;
    }
    return x > (uint64_t)INT64_MAX ? 0 : (int64_t)x;
}
