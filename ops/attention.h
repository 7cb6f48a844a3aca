/* FusedAttention, the optimizer's scaled-dot-product attention
 * (passes/fuse_attention.c makes it; a model file cannot name it):
 *
 *     O = softmax(scale * Q K^T + mask0 + mask1) V      (softmax over the last axis)
 *
 * with Q [batch..., m, d], K [batch..., n, d], V [batch..., n, dv] and
 * O [batch..., m, dv].  Each of Q, K, V and O is a strided view into the
 * node's input (or output) tensor, so the Transposes, head splits and
 * constant Gathers around attention cost no copy: the kernel reads through
 * the strides.  A mask is broadcast against a shape of its own (the scores
 * reshaped, last axis n kept), the shape of the Add it came from. */
#ifndef NN_OPS_ATTENTION_H
#define NN_OPS_ATTENTION_H

#include <stdint.h>

#include "op.h"

enum { NN_ATTN_MAX_MASKS = 2 };

/* Element offset and strides of a logical [batch..., rows, cols] matrix
 * stack in its tensor (strides per logical axis, rank = params' rank). */
typedef struct nn_attn_view {
    int64_t offset;
    int64_t stride[NN_MAX_DIMS];
} nn_attn_view;

typedef struct nn_attn_mask {
    int rank;
    int64_t dims[NN_MAX_DIMS]; /* the scores' elements, last dim n */
} nn_attn_mask;

typedef struct nn_attention_params {
    float scale;
    int rank; /* logical rank: rank - 2 batch dims, 2 .. NN_MAX_DIMS */
    int64_t batch[NN_MAX_DIMS];
    int64_t m, n, d, dv;
    nn_attn_view q, k, v, o; /* inputs 0, 1, 2; output 0 */
    int out_rank;            /* output 0's shape (O permuted) */
    int64_t out_dims[NN_MAX_DIMS];
    int n_masks; /* inputs 3, 4 */
    nn_attn_mask mask[NN_ATTN_MAX_MASKS];
} nn_attention_params;

#endif
