/* cli/npy.c -- reading and writing NumPy .npy files, for `kiln eval --inputs/--out`.
 *
 * The format (numpy.lib.format): the magic "\x93NUMPY", a major and minor version byte, the
 * header length (2 bytes little-endian for version 1.0, 4 bytes for 2.0 and 3.0), then the
 * header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces to a multiple of 16 (64 since NumPy 1.14) and ending in '\n', then the
 * raw elements in C order. We read versions 1.0-3.0, C order only, the little-endian/byte
 * dtypes <f2 <f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1 (and '<' spellings of the one-byte
 * ones), converting
 * every element to double; big-endian ('>') files are refused with a message that says how to
 * convert them, never byte-swapped silently. The reader treats the file as hostile: every length is
 * checked against the bytes present, the dict is parsed by a small strict scanner (exactly the keys
 * descr, fortran_order and shape, each once), extents must be non-negative and their product
 * at most 2^40, the data must be exactly numel * itemsize bytes, and booleans must be 0 or 1.
 * The writer emits version 1.0 with the descr of a kiln dtype ('<f8', '<u2', ...; bf16, which
 * NumPy lacks, as '<f4') and a header padded to 64 bytes. Elements are
 * decoded byte by byte (little-endian), so the host's byte order does not matter. */
#include "cli.h"

#include "../ir/ir.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_NUMEL ((int64_t)1 << 40)

static bool fail(char *err, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static bool
fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- header dict scanner ---- */

struct scan {
    const char *p, *end;
};

static void
skip_space(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool
accept(struct scan *s, char c)
{
    skip_space(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

/* A quoted string ('...' or "...", no escapes) into buf; false if malformed or too long. */
static bool
string(struct scan *s, char *buf, size_t size)
{
    skip_space(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
        return false;
    char   q = *s->p++;
    size_t n = 0;
    while (s->p < s->end && *s->p != q) {
        if (*s->p == '\\' || n + 1 >= size)
            return false;
        buf[n++] = *s->p++;
    }
    if (s->p >= s->end)
        return false;
    s->p++;
    buf[n] = 0;
    return true;
}

static bool
word(struct scan *s, const char *w)
{
    skip_space(s);
    size_t n = strlen(w);
    if ((size_t)(s->end - s->p) >= n && !memcmp(s->p, w, n)) {
        s->p += n;
        return true;
    }
    return false;
}

/* A tuple of non-negative integers: (), (5,), (2, 3), (2, 3,). */
static bool
tuple(struct scan *s, struct npy_array *a, char *err, size_t errsize)
{
    if (!accept(s, '('))
        return fail(err, errsize, "header: shape is not a tuple");
    a->ndim = 0;
    for (;;) {
        if (accept(s, ')'))
            return true;
        skip_space(s);
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return fail(err, errsize,
                        "header: shape holds something other than a "
                        "non-negative integer");
        int64_t v = 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return fail(err, errsize, "header: an extent of the shape is too large");
            v = v * 10 + (*s->p++ - '0');
        }
        if (s->p < s->end && *s->p == 'L') /* Python 2 long suffix */
            s->p++;
        if (a->ndim == KILN_MAX_DIMS)
            return fail(err, errsize, "shape has more than %d dimensions", KILN_MAX_DIMS);
        a->shape[a->ndim++] = v;
        bool comma = accept(s, ',');
        if (accept(s, ')'))
            return a->ndim != 1 || comma ? true
                                         : fail(err, errsize, "header: shape is not a tuple");
        if (!comma)
            return fail(err, errsize, "header: malformed shape tuple");
    }
}

struct dtype_desc {
    const char *descr[2]; /* accepted spellings */
    int         size;
    char        kind; /* 'f', 'i', 'u', 'b' */
};

static const struct dtype_desc dtypes[] = {
    {{"<f2", NULL}, 2, 'f'},  {{"<f4", NULL}, 4, 'f'},  {{"<f8", NULL}, 8, 'f'},
    {{"|i1", "<i1"}, 1, 'i'}, {{"<i4", NULL}, 4, 'i'},  {{"<i8", NULL}, 8, 'i'},
    {{"|u1", "<u1"}, 1, 'u'}, {{"|b1", "<b1"}, 1, 'b'}, {{"<i2", NULL}, 2, 'i'},
    {{"<u2", NULL}, 2, 'u'},  {{"<u4", NULL}, 4, 'u'},  {{"<u8", NULL}, 8, 'u'},
};

static const struct dtype_desc *
find_dtype(const char *descr)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        for (int k = 0; k < 2; k++)
            if (dtypes[i].descr[k] && !strcmp(dtypes[i].descr[k], descr))
                return &dtypes[i];
    return NULL;
}

static bool
parse_header(const char *h, size_t n, struct npy_array *a, const struct dtype_desc **dt, char *err,
             size_t errsize)
{
    struct scan s = {h, h + n};
    bool        seen_descr = false, seen_order = false, seen_shape = false;
    if (!accept(&s, '{'))
        return fail(err, errsize, "header is not a Python dict");
    while (!accept(&s, '}')) {
        char key[32], descr[32];
        if (!string(&s, key, sizeof key) || !accept(&s, ':'))
            return fail(err, errsize, "header: malformed dict entry");
        if (!strcmp(key, "descr") && !seen_descr) {
            seen_descr = true;
            if (!string(&s, descr, sizeof descr))
                return fail(err, errsize,
                            "header: descr is not a simple dtype string "
                            "(structured dtypes are not supported)");
            *dt = find_dtype(descr);
            if (!*dt && descr[0] == '>')
                return fail(err, errsize,
                            "dtype '%s' is big-endian; kiln reads little-endian .npy files "
                            "only (convert with a.astype('<%s'))",
                            descr, descr + 1);
            if (!*dt)
                return fail(err, errsize,
                            "unsupported dtype '%s' (supported: <f2 <f4 <f8 |i1 <i2 <i4 <i8 "
                            "|u1 <u2 <u4 <u8 |b1, little-endian)",
                            descr);
            snprintf(a->descr, sizeof a->descr, "%s", descr);
        } else if (!strcmp(key, "fortran_order") && !seen_order) {
            seen_order = true;
            if (word(&s, "True"))
                return fail(err, errsize,
                            "fortran_order is True; only C order is supported "
                            "(save np.ascontiguousarray(a))");
            if (!word(&s, "False"))
                return fail(err, errsize, "header: fortran_order is not True or False");
        } else if (!strcmp(key, "shape") && !seen_shape) {
            seen_shape = true;
            if (!tuple(&s, a, err, errsize))
                return false;
        } else {
            return fail(err, errsize, "header: unexpected or repeated key '%s'", key);
        }
        if (!accept(&s, ',')) {
            if (!accept(&s, '}'))
                return fail(err, errsize, "header: malformed dict");
            break;
        }
    }
    skip_space(&s);
    if (s.p != s.end)
        return fail(err, errsize, "header: text after the dict");
    if (!seen_descr || !seen_order || !seen_shape)
        return fail(err, errsize, "header: missing key '%s'",
                    !seen_descr   ? "descr"
                    : !seen_order ? "fortran_order"
                                  : "shape");
    return true;
}

/* ---- element decoding ---- */

static uint64_t
le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n; i-- > 0;)
        v = (v << 8) | p[i];
    return v;
}

static bool
decode(const unsigned char *p, const struct dtype_desc *dt, double *out, int64_t numel, char *err,
       size_t errsize)
{
    for (int64_t i = 0; i < numel; i++, p += dt->size) {
        uint64_t bits = le(p, dt->size);
        switch (dt->kind) {
        case 'f':
            if (dt->size == 2) {
                out[i] = kiln_scalar_f16_value((uint16_t)bits);
            } else if (dt->size == 4) {
                uint32_t u = (uint32_t)bits;
                float    f;
                memcpy(&f, &u, sizeof f);
                out[i] = f;
            } else {
                double d;
                memcpy(&d, &bits, sizeof d);
                out[i] = d;
            }
            break;
        case 'i':
            if (dt->size == 1)
                out[i] = (int8_t)(uint8_t)bits;
            else if (dt->size == 2)
                out[i] = (int16_t)(uint16_t)bits;
            else if (dt->size == 4)
                out[i] = (int32_t)(uint32_t)bits;
            else
                out[i] = (double)(int64_t)bits;
            break;
        case 'u':
            out[i] = (double)bits;
            break;
        case 'b':
            if (bits > 1)
                return fail(err, errsize, "boolean element %lld holds the byte %u, not 0 or 1",
                            (long long)i, (unsigned)bits);
            out[i] = (double)bits;
            break;
        default:
            return fail(err, errsize, "internal: unknown dtype kind");
        }
    }
    return true;
}

bool
npy_parse(const unsigned char *buf, size_t len, struct npy_array *out, char *err, size_t errsize)
{
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return fail(err, errsize, "not a .npy file (no \\x93NUMPY magic)");
    int    major = buf[6], minor = buf[7];
    size_t hlen, pre;
    if (major == 1) {
        hlen = (size_t)le(buf + 8, 2);
        pre = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return fail(err, errsize, "truncated header");
        hlen = (size_t)le(buf + 8, 4);
        pre = 12;
    } else {
        return fail(err, errsize, "unsupported .npy format version %d.%d", major, minor);
    }
    if (minor != 0)
        return fail(err, errsize, "unsupported .npy format version %d.%d", major, minor);
    if (hlen > len - pre)
        return fail(err, errsize, "truncated header: %zu bytes announced, %zu present", hlen,
                    len - pre);
    const struct dtype_desc *dt = NULL;
    if (!parse_header((const char *)buf + pre, hlen, out, &dt, err, errsize))
        return false;
    int64_t numel = 1;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] > MAX_NUMEL || (out->shape[i] && numel > MAX_NUMEL / out->shape[i]))
            return fail(err, errsize, "shape is too large (more than 2^40 elements)");
        numel *= out->shape[i];
    }
    size_t want = (size_t)numel * (size_t)dt->size, have = len - pre - hlen;
    if (have < want)
        return fail(err, errsize, "truncated data: shape needs %zu bytes, file has %zu", want,
                    have);
    if (have > want)
        return fail(err, errsize, "%zu bytes after the data (shape needs %zu)", have - want, want);
    out->numel = numel;
    out->is_int = dt->kind != 'f';
    out->data = malloc(sizeof(double) * (size_t)(numel ? numel : 1));
    if (!out->data)
        return fail(err, errsize, "out of memory for %lld elements", (long long)numel);
    if (!decode(buf + pre + hlen, dt, out->data, numel, err, errsize)) {
        free(out->data);
        out->data = NULL;
        return false;
    }
    return true;
}

bool
npy_read(const char *path, struct npy_array *out, char *err, size_t errsize)
{
    size_t len = 0;
    char  *buf = cli_read_file(path, &len);
    memset(out, 0, sizeof *out);
    if (!buf)
        return fail(err, errsize, "%s", strerror(errno));
    bool ok = npy_parse((const unsigned char *)buf, len, out, err, errsize);
    free(buf);
    return ok;
}

/* The .npy descr kiln writes for dt: bf16 (no NumPy dtype) as f32. */
static const char *
write_descr(enum kiln_dtype dt)
{
    switch (dt) {
    case KILN_DTYPE_F16:
        return "<f2";
    case KILN_DTYPE_F32:
    case KILN_DTYPE_BF16:
        return "<f4";
    case KILN_DTYPE_I8:
        return "|i1";
    case KILN_DTYPE_I16:
        return "<i2";
    case KILN_DTYPE_I32:
        return "<i4";
    case KILN_DTYPE_I64:
        return "<i8";
    case KILN_DTYPE_U8:
        return "|u1";
    case KILN_DTYPE_U16:
        return "<u2";
    case KILN_DTYPE_U32:
        return "<u4";
    case KILN_DTYPE_U64:
        return "<u8";
    case KILN_DTYPE_BOOL:
        return "|b1";
    case KILN_DTYPE_F64:
    case KILN_DTYPE_COUNT:
        break;
    }
    return "<f8";
}

/* Element v stored as dt (kiln_scalar_store: rounded or saturated), as little-endian bytes. */
static void
put_le(unsigned char *out, enum kiln_dtype dt, size_t size, double v)
{
    unsigned char native[8];
    uint64_t      bits = 0;
    kiln_scalar_store(dt, native, 0, v);
    if (size == 1) {
        bits = native[0];
    } else if (size == 2) {
        uint16_t u;
        memcpy(&u, native, 2);
        bits = u;
    } else if (size == 4) {
        uint32_t u;
        memcpy(&u, native, 4);
        bits = u;
    } else {
        memcpy(&bits, native, 8);
    }
    for (size_t k = 0; k < size; k++)
        out[k] = (unsigned char)(bits >> (8 * k));
}

bool
npy_write_f64(const char *path, int ndim, const int64_t *shape, const double *data, char *err,
              size_t errsize)
{
    return npy_write(path, ndim, shape, data, KILN_DTYPE_F64, err, errsize);
}

bool
npy_write(const char *path, int ndim, const int64_t *shape, const double *data, enum kiln_dtype dt,
          char *err, size_t errsize)
{
    char        header[512];
    const char *descr = write_descr(dt);
    if (dt == KILN_DTYPE_BF16 || dt >= KILN_DTYPE_COUNT)
        dt = KILN_DTYPE_F32;
    size_t esize = kiln_dtype_size(dt);
    size_t n = (size_t)snprintf(header, sizeof header,
                                "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < ndim; i++)
        n += (size_t)snprintf(header + n, sizeof header - n, "%lld,%s", (long long)shape[i],
                              i + 1 < ndim ? " " : "");
    n += (size_t)snprintf(header + n, sizeof header - n, "), }");
    size_t total = (10 + n + 1 + 63) / 64 * 64; /* magic..header..'\n', padded to 64 */
    while (10 + n + 1 < total)
        header[n++] = ' ';
    header[n++] = '\n';

    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    /* written to a temporary file beside path and renamed into place: an interrupted or
     * failed write never leaves a truncated array under the name */
    size_t plen = strlen(path);
    char  *tmp = malloc(plen + 8);
    if (!tmp)
        return fail(err, errsize, "%s", strerror(ENOMEM));
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".XXXXXX", 8);
    int    fd = mkstemp(tmp);
    mode_t um = umask(0);
    umask(um);
    FILE *f = fd >= 0 && fchmod(fd, 0666 & ~um) == 0 ? fdopen(fd, "wb") : NULL; /* as fopen's */
    if (!f) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(tmp);
        return fail(err, errsize, "%s", strerror(e));
    }
    unsigned char pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
    bool          ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, n, f) == n;
    unsigned char chunk[8 * 1024];
    for (int64_t i = 0; i < numel && ok;) {
        size_t m = 0;
        for (; m < sizeof chunk && i < numel; i++, m += esize)
            put_le(chunk + m, dt, esize, data[i]);
        ok = fwrite(chunk, 1, m, f) == m;
    }
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok)
        unlink(tmp);
    free(tmp);
    if (!ok)
        return fail(err, errsize, "write failed: %s", strerror(saved));
    return true;
}
