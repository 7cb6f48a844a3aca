/* The plugin's side of engine/plugin.h: its entry point, and the engine
 * functions the backend calls, each forwarded to libnn through the table
 * that libnn handed over (the plugin links no part of libnn). */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

extern "C" {
#include "../engine/plugin.h"
}

static const nn_plugin_host *host;

/* Whether libnn lays out what the plugin reads as this plugin was built for. */
static bool host_fits(const nn_plugin_host *h) {
    return h->abi == NN_PLUGIN_ABI && h->model_size == sizeof(nn_model) && h->graph_size == sizeof(nn_graph) &&
           h->node_size == sizeof(nn_node) && h->call_size == sizeof(nn_call) &&
           h->op_desc_size == sizeof(nn_op_desc) && h->backend_size == sizeof(nn_backend) &&
           h->op_count == NN_OP_COUNT;
}

extern "C" __attribute__((visibility("default"))) const nn_backend *nn_plugin_backend(const nn_plugin_host *h,
                                                                                      char *err, size_t err_size) {
    if (!h || !host_fits(h)) {
        snprintf(err, err_size, "it was built for another version of libnn (plugin interface %u, libnn's %u)",
                 (unsigned)NN_PLUGIN_ABI, h ? (unsigned)h->abi : 0u);
        return NULL;
    }
    host = h;
    return &nn_cuda_backend;
}

extern "C" {
nn_status nn_set_error(nn_status st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return host->set_error(st, msg);
}
const char *nn_last_error(void) { return host->last_error(); }
void nn_clear_error(void) { host->clear_error(); }
const char *nn_strerror(nn_status st) { return host->strerror(st); }
size_t nn_dtype_size(nn_dtype dtype) { return host->dtype_size(dtype); }
int64_t nn_tensor_elements(const nn_tensor *t) { return host->tensor_elements(t); }
int64_t nn_shape_elements(const int64_t *dims, int ndim) { return host->shape_elements(dims, ndim); }
const nn_op_desc *nn_op_get(int id) { return host->op_get(id); }
nn_call nn_node_call(const nn_model *m, const nn_node *n, const nn_tensor *in, nn_tensor *out, char *err,
                     size_t err_size) {
    return host->node_call(m, n, in, out, err, err_size);
}
int nn_value_root(const nn_graph *g, int v, int64_t *offset) { return host->value_root(g, v, offset); }
nn_status nn_check_memory_limit(const nn_model *m, size_t workspace) { return host->check_memory_limit(m, workspace); }
bool nn_axis_normalize(int64_t axis, int rank, int64_t *out) { return host->axis_normalize(axis, rank, out); }
void nn_broadcast_strides(const nn_tensor *in, int ndim, const int64_t *out_dims, int64_t *strides) {
    host->broadcast_strides(in, ndim, out_dims, strides);
}
nn_status nn_conv_resolve(const nn_call *c, bool transpose, nn_conv_geom *g) {
    return host->conv_resolve(c, transpose, g);
}
nn_status nn_pool_resolve(const nn_call *c, nn_pool_geom *g) { return host->pool_resolve(c, g); }
nn_status nn_softmax_view(nn_call *c, int64_t *outer, int64_t *n, int64_t *inner) {
    return host->softmax_view(c, outer, n, inner);
}
nn_status nn_reduce_mask(nn_call *c, bool reduced[NN_MAX_DIMS], bool *noop) {
    return host->reduce_mask(c, reduced, noop);
}
nn_status nn_transpose_perm(nn_call *c, int64_t *perm) { return host->transpose_perm(c, perm); }
nn_status nn_resize_taps(nn_call *c, nn_resize_tap *taps, bool *linear) { return host->resize_taps(c, taps, linear); }
}
