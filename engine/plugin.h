/* Device backends built as plugins: the CUDA backend is libnn_cuda.so, which
 * libnn opens with dlopen when a model asks for a gpuN device, so that
 * neither libnn nor the programs linking it need CUDA.  The plugin links no
 * part of libnn (a static and a shared libnn serve it alike): libnn hands it
 * the engine functions it calls in a table, and it returns its backend. */
#ifndef NN_PLUGIN_H
#define NN_PLUGIN_H

#include "../ops/geom.h"
#include "../ops/registry.h"
#include "backend.h"

/* Bumped whenever the table, nn_backend or anything the plugin reads of the
 * IR changes shape; the sizes below catch a forgotten bump. */
#define NN_PLUGIN_ABI 1
/* The plugin's entry point, exported under this name. */
#define NN_PLUGIN_ENTRY "nn_plugin_backend"
#define NN_CUDA_PLUGIN_NAME "libnn_cuda.so"

typedef struct nn_plugin_host {
    uint32_t abi;                                            /* NN_PLUGIN_ABI */
    uint32_t model_size, graph_size, node_size, call_size, op_desc_size, backend_size, op_count;
    nn_status (*set_error)(nn_status st, const char *message); /* nn_set_error(st, "%s", message) */
    const char *(*last_error)(void);
    void (*clear_error)(void);
    const char *(*strerror)(nn_status st);
    size_t (*dtype_size)(nn_dtype dtype);
    int64_t (*tensor_elements)(const nn_tensor *t);
    int64_t (*shape_elements)(const int64_t *dims, int ndim);
    const nn_op_desc *(*op_get)(int id);
    nn_call (*node_call)(const nn_model *m, const nn_node *n, const nn_tensor *in, nn_tensor *out, char *err,
                         size_t err_size);
    int (*value_root)(const nn_graph *g, int v, int64_t *offset);
    nn_status (*check_memory_limit)(const nn_model *m, size_t workspace);
    bool (*axis_normalize)(int64_t axis, int rank, int64_t *out);
    void (*broadcast_strides)(const nn_tensor *in, int ndim, const int64_t *out_dims, int64_t *strides);
    nn_status (*conv_resolve)(const nn_call *c, bool transpose, nn_conv_geom *g);
    nn_status (*pool_resolve)(const nn_call *c, nn_pool_geom *g);
    nn_status (*softmax_view)(nn_call *c, int64_t *outer, int64_t *n, int64_t *inner);
    nn_status (*reduce_mask)(nn_call *c, bool reduced[NN_MAX_DIMS], bool *noop);
    nn_status (*transpose_perm)(nn_call *c, int64_t *perm);
    nn_status (*resize_taps)(nn_call *c, nn_resize_tap *taps, bool *linear);
} nn_plugin_host;

/* The table as this build of libnn lays it out (the sizes filled in). */
#define NN_PLUGIN_HOST_SIZES                                                                                           \
    .abi = NN_PLUGIN_ABI, .model_size = sizeof(nn_model), .graph_size = sizeof(nn_graph),                             \
    .node_size = sizeof(nn_node), .call_size = sizeof(nn_call), .op_desc_size = sizeof(nn_op_desc),                    \
    .backend_size = sizeof(nn_backend), .op_count = NN_OP_COUNT

/* Returns the plugin's backend, or NULL with a one-line reason in err (a
 * table from another build of libnn). */
typedef const nn_backend *(*nn_plugin_entry_fn)(const nn_plugin_host *host, char *err, size_t err_size);

/* The backend for a device kind ("cuda"), loading its plugin on first use:
 * $NN_CUDA_PLUGIN when set, else libnn_cuda.so next to the library (or
 * program) that holds libnn, else in the install's lib folder.  Errors:
 * NN_ERR_DEVICE naming the device, the plugin and what is missing. */
nn_status nn_plugin_backend_for(const char *device, const nn_backend **out);
/* The CUDA plugin file nn_plugin_backend_for would open, or NULL when none is found. */
const char *nn_cuda_plugin_path(void);

#endif
