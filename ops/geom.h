/* What a call's attributes and shapes resolve to, for the ops whose device
 * kernels (cuda/) must see exactly the geometry the CPU kernels use: the CPU
 * op files compute it, the CUDA backend asks them through these functions
 * instead of parsing attributes a second time. */
#ifndef NN_GEOM_H
#define NN_GEOM_H

#include "window.h"

/* Conv and ConvTranspose (ops/conv.c) */
typedef struct nn_conv_geom {
    int nsp; /* spatial dims */
    int64_t batch, in_ch, out_ch, group;
    int64_t in[NSP_MAX], out[NSP_MAX], kernel[NSP_MAX], stride[NSP_MAX], dilation[NSP_MAX];
    int64_t pad[NSP_MAX];                   /* leading pad; negative for ConvTranspose when output_shape crops less */
    int64_t in_size, out_size, kernel_size; /* products over the spatial dims */
} nn_conv_geom;
nn_status nn_conv_resolve(const nn_call *c, bool transpose, nn_conv_geom *g);
/* A Conv node's window attributes and group (for passes/fuse_qdq.c, which
 * turns the node into a QLinearConv); false for ConvTranspose-only fields. */
bool nn_conv_window(const void *params, nn_window_attrs *w, int64_t *group);
/* Replace a Conv node's window attributes (passes/fuse_pad.c, on the
 * node's own copy of its params); false as nn_conv_window. */
bool nn_conv_set_window(void *params, const nn_window_attrs *w);

/* MaxPool and AveragePool (ops/pool.c) */
typedef struct nn_pool_params {
    nn_window_attrs w;
    int64_t ceil_mode, count_include_pad, storage_order;
} nn_pool_params;

typedef struct nn_pool_geom {
    int nsp;
    int64_t planes; /* batch x channels */
    int64_t in[NSP_MAX], out[NSP_MAX], kernel[NSP_MAX], stride[NSP_MAX], dilation[NSP_MAX];
    int64_t pad[NSP_MAX], pad_end[NSP_MAX];
    int64_t in_size, out_size;
} nn_pool_geom;
nn_status nn_pool_resolve(const nn_call *c, nn_pool_geom *g);

/* Softmax and LogSoftmax (ops/softmax.c): the [outer, n, inner] view of the
 * input around the normalized axis. */
nn_status nn_softmax_view(nn_call *c, int64_t *outer, int64_t *n, int64_t *inner);

/* Reduce* (ops/reduce.c): which dims of input 0 are reduced; *noop when
 * none are and the op is the identity (noop_with_empty_axes). */
nn_status nn_reduce_mask(nn_call *c, bool reduced[NN_MAX_DIMS], bool *noop);

/* Transpose (ops/tensor.c): output dim k is input dim perm[k]. */
nn_status nn_transpose_perm(nn_call *c, int64_t *perm);

/* Resize and Upsample (ops/resize.c).  The taps of one output coordinate
 * along one axis: input offsets (already times the axis stride) and
 * weights; w1 == 0 marks a single tap. */
typedef struct nn_resize_tap {
    int64_t i0, i1;
    float w0, w1;
} nn_resize_tap;
/* The taps of every output coordinate, axis after axis (out dims[0] taps for
 * axis 0 first), into `taps` (room for the sum of the output dims); *linear
 * tells whether the last axis blends its two taps (linear mode) or reads i0
 * (nearest).  NN_DYNAMIC when scales or sizes are not known yet;
 * NN_ERR_UNSUPPORTED for mode cubic and tf_crop_and_resize, which need
 * more taps or extrapolation (ops/resize.c runs them). */
nn_status nn_resize_taps(nn_call *c, nn_resize_tap *taps, bool *linear);

#endif
