/* Values beyond plain tensors at the engine's edge (docs/sequences.md):
 * reading SequenceProto / OptionalProto files, handing sequences, optionals
 * and strings to a caller in one block each, and running a model whose graph
 * inputs or outputs are sequences or optionals.  Internal: the public API
 * (nn.h) takes and returns tensors only. */
#ifndef NN_VALUES_H
#define NN_VALUES_H

#include "ir.h"

/* Deep copy of a run-time value (a tensor of any dtype, strings included,
 * a sequence, or an empty optional) into one malloc'ed block with the
 * pointers inside it: nn_tensor_release (free of data) releases it whole. */
nn_status nn_value_pack(const nn_tensor *src, nn_tensor *dst, const char *what);
/* The same block taken from `arena` instead (NULL: malloc). */
nn_status nn_value_pack_in(const nn_tensor *src, nn_tensor *dst, nn_arena *arena, const char *what);

/* Read a test-data file holding a value of `kind`: a TensorProto
 * (NN_KIND_TENSOR), a SequenceProto of tensors, or an OptionalProto of a
 * tensor or such a sequence.  The result is packed as nn_value_pack's. */
nn_status nn_value_load(const char *path, nn_value_kind kind, nn_tensor *out);

/* nn_predict for models whose graph inputs or outputs may be sequences
 * (dtype NN_DTYPE_SEQUENCE, data an nn_seq) or optionals (their element, or
 * dtype NN_DTYPE_NONE when empty).  Outputs are packed (nn_tensor_release). */
nn_status nn_predict_values(nn_model *m, const nn_tensor *in, int n_in, nn_tensor *out, int n_out);

/* The kind of graph input / output i. */
nn_value_kind nn_input_kind(const nn_model *m, int i);
nn_value_kind nn_output_kind(const nn_model *m, int i);

#endif
