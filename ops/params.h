/* Parameter structs that the optimizer reads or builds as well as the
 * kernels; every other op keeps its params private to its file. */
#ifndef NN_PARAMS_H
#define NN_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "../engine/nn.h" /* NN_MAX_DIMS */

/* BatchNormalization, InstanceNormalization, LayerNormalization */
typedef struct nn_norm_params {
    float epsilon;
    int64_t axis;          /* LayerNormalization */
    int64_t training_mode; /* BatchNormalization */
    int64_t spatial;       /* BatchNormalization opset < 9 */
} nn_norm_params;

/* Gemm: Y = alpha * A' B' + beta * C */
typedef struct nn_gemm_params {
    float alpha, beta;
    int64_t trans_a, trans_b;
} nn_gemm_params;

/* Gelu: approximate "tanh" (1) or "none" (0) */
typedef struct nn_gelu_params {
    int64_t tanh;
} nn_gelu_params;

/* Pad (read by passes/fuse_pad.c): the mode, and before opset 11 the pads
 * and the constant, which later opsets take as inputs (n_pads -1) */
enum { NN_PAD_CONSTANT, NN_PAD_REFLECT, NN_PAD_EDGE };
typedef struct nn_pad_params {
    int mode;
    int n_pads;
    float value;
    int64_t pads[2 * NN_MAX_DIMS];
} nn_pad_params;

/* ops with a single `axis` attribute: Concat, Gather, ... */
typedef struct nn_axis_params {
    int64_t axis;
} nn_axis_params;

/* Transpose (built by passes/layout_nhwc.c around channels-last regions):
 * n_perm -1 reverses the axes */
typedef struct nn_transpose_params {
    int n_perm;
    int64_t perm[NN_MAX_DIMS];
} nn_transpose_params;

/* Reshape (built by passes/layout_nhwc.c too): the shape attribute before
 * opset 5 (n_shape values), else n_shape -1 and the shape is input 1 */
typedef struct nn_reshape_params {
    int64_t allowzero;
    int n_shape;
    int64_t shape[NN_MAX_DIMS];
} nn_reshape_params;

/* Softmax, LogSoftmax (read by passes/fuse_attention.c) */
typedef struct softmax_params {
    int64_t axis;
    bool flatten; /* pre-13 semantics: normalize over dims[axis:] as one block */
} softmax_params;

#endif
