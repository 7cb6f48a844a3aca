/* Conversion of ONNX TensorProto messages into nn tensors (used by the model
 * importer for initializers and attributes, and by nn_tensor_load for .pb files). */
#ifndef NN_ONNX_TENSOR_H
#define NN_ONNX_TENSOR_H

#include "arena.h"
#include "nn.h"
#include "onnx.pb-c.h"
#include "onnx_slim.h"

/* Fill *out from tp.  Data goes into `arena`, or into malloc'ed memory when
 * arena is NULL.  `raw`, when not NULL, holds the raw_data that was cut out
 * of tp (see onnx_slim.h).  External data is read relative to `base_dir`
 * (NULL: not allowed) and may not leave it.  `what` names the tensor in
 * messages. */
nn_status nn_tensor_from_proto(const Onnx__TensorProto *tp, const nn_payload *raw, nn_arena *arena,
                               const char *base_dir, const char *what, nn_tensor *out);
const char *nn_onnx_dtype_name(int32_t onnx_dtype);
/* true for the dtypes the engine holds */
int nn_dtype_supported(int32_t onnx_dtype);
/* element count of dims with overflow and sign checks; -1 if invalid */
int64_t nn_dims_checked_elements(const int64_t *dims, size_t ndim);

#endif
