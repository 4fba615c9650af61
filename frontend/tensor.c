/* frontend/tensor.c -- ONNX TensorProto values to doubles: initializers, Constant nodes and the
 * test data of ONNX's backend tests (kiln_onnx_tensor_decode). A tensor holds its elements either
 * in raw_data (little-endian, packed) or in the typed repeated field of its element type
 * (float_data, int32_data for every type of 32 bits or fewer, int64_data, double_data,
 * uint64_data); both are checked against the element count of dims before anything is read. */
#include "frontend.h"

#include <math.h>
#include <string.h>

enum kiln_dtype
frontend_onnx_dtype(int32_t t)
{
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        return KILN_DTYPE_F32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        return KILN_DTYPE_F64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
        return KILN_DTYPE_F16;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
        return KILN_DTYPE_BF16;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
        return KILN_DTYPE_I8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        return KILN_DTYPE_I32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        return KILN_DTYPE_I64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return KILN_DTYPE_BOOL;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
        return KILN_DTYPE_U8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
        return KILN_DTYPE_U16;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
        return KILN_DTYPE_U32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
        return KILN_DTYPE_U64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
        return KILN_DTYPE_I16;
    default:
        return KILN_DTYPE_COUNT;
    }
}

const char *
frontend_onnx_type_name(int32_t t)
{
    static const char *const names[] = {"UNDEFINED",  "FLOAT",   "UINT8",  "INT8",   "UINT16",
                                        "INT16",      "INT32",   "INT64",  "STRING", "BOOL",
                                        "FLOAT16",    "DOUBLE",  "UINT32", "UINT64", "COMPLEX64",
                                        "COMPLEX128", "BFLOAT16"};
    return t >= 0 && (size_t)t < KILN_COUNTOF(names) ? names[t] : "unknown";
}

/* Bytes per element in raw_data, 0 for types not stored packed. */
static size_t
raw_size(int32_t t)
{
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
        return 8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
        return 4;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
        return 2;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return 1;
    default:
        return 0;
    }
}

/* Element i of packed little-endian data of type t (b points at it). */
static double
raw_value(int32_t t, const uint8_t *b)
{
    uint64_t u = 0;
    for (size_t k = raw_size(t); k-- > 0;)
        u = (u << 8) | b[k];
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: {
        uint32_t w = (uint32_t)u;
        float    f;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: {
        double d;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        return (double)(int64_t)u;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        return (double)(int32_t)(uint32_t)u;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
        return (double)(int16_t)(uint16_t)u;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
        return (double)(int8_t)(uint8_t)u;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
        return kiln_scalar_f16_value((uint16_t)u);
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
        return kiln_scalar_bf16_value((uint16_t)u);
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return u != 0;
    default:
        return (double)u; /* unsigned types */
    }
}

/* Element i of the typed field of int32_data (types of 32 bits or fewer but float). */
static double
int32_field_value(int32_t t, int32_t v)
{
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
        return kiln_scalar_f16_value((uint16_t)v);
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
        return kiln_scalar_bf16_value((uint16_t)v);
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return v != 0;
    default:
        return v;
    }
}

enum kiln_status
frontend_tensor_decode(kiln_ctx *ctx, const Onnx__TensorProto *t, const char *what,
                       struct frontend_const *out)
{
    memset(out, 0, sizeof *out);
    int32_t type = t->has_data_type ? t->data_type : 0;
    if (t->n_external_data
        || (t->has_data_location
            && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "%s: tensor data stored in an external file is not supported", what);
    if (t->segment)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "%s: segmented tensors are not supported", what);
    enum kiln_dtype dt = frontend_onnx_dtype(type);
    if (dt == KILN_DTYPE_COUNT)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "%s: element type %s (%d) has no kiln dtype", what,
                         frontend_onnx_type_name(type), (int)type);
    if (t->n_dims > KILN_MAX_DIMS)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx", "%s has %zu dimensions; at most %d",
                         what, t->n_dims, KILN_MAX_DIMS);
    int64_t numel = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0)
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "%s: dimension %zu is negative (%lld)",
                             what, i, (long long)t->dims[i]);
        if (kiln_mul_overflows(numel, t->dims[i], &numel) || numel > ((int64_t)1 << 40))
            return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx", "%s: more than 2^40 elements", what);
        out->shape[i] = t->dims[i];
    }
    if (numel == 0)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "onnx",
                         "%s: empty tensors (a dimension of extent 0) are not supported", what);
    size_t have;
    if (t->has_raw_data) {
        have = t->raw_data.len / raw_size(type);
        if (t->raw_data.len % raw_size(type))
            have = SIZE_MAX;
    } else {
        switch (type) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
            have = t->n_float_data;
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
            have = t->n_double_data;
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
            have = t->n_int64_data;
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
        case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
            have = t->n_uint64_data;
            break;
        default:
            have = t->n_int32_data;
            break;
        }
    }
    if (have != (size_t)numel)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "onnx",
                         "%s: dims give %lld elements but the data holds %s%zu", what,
                         (long long)numel, have == SIZE_MAX ? "a partial element after " : "",
                         have == SIZE_MAX ? t->raw_data.len / raw_size(type) : have);
    double *d = kiln_arena_alloc(ctx, sizeof(double) * (size_t)numel);
    if (!d)
        return ctx->err.status;
    for (int64_t i = 0; i < numel; i++) {
        size_t k = (size_t)i;
        if (t->has_raw_data)
            d[i] = raw_value(type, t->raw_data.data + k * raw_size(type));
        else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
            d[i] = t->float_data[k];
        else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE)
            d[i] = t->double_data[k];
        else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64)
            d[i] = (double)t->int64_data[k];
        else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT32
                 || type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT64)
            d[i] = (double)t->uint64_data[k];
        else
            d[i] = int32_field_value(type, t->int32_data[k]);
    }
    out->dtype = dt;
    out->ndim = (uint32_t)t->n_dims;
    out->numel = numel;
    out->data = d;
    return KILN_OK;
}
