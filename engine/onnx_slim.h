/* Loading ONNX files without holding their weights twice.
 *
 * protobuf-c copies every bytes field while decoding, so decoding a model
 * the usual way holds the weights twice (file buffer + decoded copy) and then
 * a third time once the engine copies them into its own region.  Instead the
 * file is mapped, a slim copy of the protobuf without the initializers'
 * raw_data payloads is decoded (it is small), and each payload is copied
 * from the mapping into the weights region, dropping the mapped pages behind
 * it: peak memory stays near one copy of the weights. */
#ifndef NN_ONNX_SLIM_H
#define NN_ONNX_SLIM_H

#include <stddef.h>
#include <stdint.h>

#include "nn.h"

typedef struct nn_payload {
    const uint8_t *data; /* inside the mapping; NULL when the initializer had no raw_data */
    size_t length;
} nn_payload;

typedef struct nn_onnx_file {
    uint8_t *map; /* the whole file, mapped read-only */
    size_t size;
    uint8_t *slim; /* the ModelProto without initializer payloads */
    size_t slim_size;
    nn_payload *payloads; /* per graph initializer, in file order */
    size_t n_payloads;
} nn_onnx_file;

/* Map `path` and build the slim protobuf; one-line error on failure. */
nn_status nn_onnx_file_open(const char *path, nn_onnx_file *f);
/* Let the kernel drop the mapped pages of a payload already copied. */
void nn_onnx_file_release(const nn_onnx_file *f, const nn_payload *p);
void nn_onnx_file_close(nn_onnx_file *f);

#endif
