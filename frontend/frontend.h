/* frontend/frontend.h -- internal: ONNX import (frontend/onnx*.c) and the decoding of ONNX
 * TensorProto data (frontend/tensor.c). The public entry points are kiln_graph_import_onnx and
 * kiln_onnx_tensor_decode in include/kiln.h; this header shares the pieces between the importer
 * and the decoder (the importer's own header is onnx_impl.h). The ONNX schema is Debian's
 * onnx/onnx.proto, compiled by protoc-c at build time into the build directory (onnx.pb-c.h);
 * nothing here decodes protobuf by hand (onnx.c only walks the framing to bound the nesting
 * depth before protobuf-c's recursive unpacking). */
#ifndef KILN_FRONTEND_H
#define KILN_FRONTEND_H

#include "../ir/ir.h"

#include <onnx.pb-c.h>

/* A tensor's value known at import time (an initializer, a Constant node, test data). */
struct frontend_const {
    enum kiln_dtype dtype;
    uint32_t        ndim;
    int64_t         shape[KILN_MAX_DIMS];
    int64_t         numel;
    double         *data; /* numel values, ctx arena */
};

/* Maps an ONNX element type to a kiln dtype; KILN_DTYPE_COUNT when kiln has none. */
enum kiln_dtype frontend_onnx_dtype(int32_t onnx_type);
/* Name of an ONNX element type ("FLOAT", "UINT8", ...) for messages. */
const char *frontend_onnx_type_name(int32_t onnx_type);

/* Decodes t (raw_data or the typed repeated fields) into out. Errors (KILN_ERR_INVALID for a
 * malformed tensor: data size that does not match the dims, negative dims; KILN_ERR_UNSUPPORTED
 * for an element type kiln has no dtype for, external data, more than KILN_MAX_DIMS dims or an
 * empty tensor) name the tensor as `what`. */
enum kiln_status frontend_tensor_decode(kiln_ctx *ctx, const Onnx__TensorProto *t, const char *what,
                                        struct frontend_const *out);

#endif /* KILN_FRONTEND_H */
