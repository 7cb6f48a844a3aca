#ifndef NN_IMPORT_H
#define NN_IMPORT_H

#include "ir.h"

/* Read and validate an ONNX file into g (g is cleared first; freed on failure). */
nn_status nn_import_onnx(const char *path, nn_graph *g);
/* Read a whole file into malloc'ed memory (free *buf). */
nn_status nn_read_file(const char *path, uint8_t **buf, size_t *len);
/* Read a protobuf file with the given unpack function. */
nn_status nn_read_protobuf(const char *path, void *(*unpack)(size_t, const uint8_t *), void **msg);

#endif
