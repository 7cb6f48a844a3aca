/* Winograd F(4x4, 3x3) convolution: the fast path for 3x3, stride-1 2-D
 * Conv in fp32 NCHW (ops/winograd.c), dilated too where the leading pads
 * are multiples of the dilation (as one conv per phase).
 *
 * Use from a Conv kernel:
 *   load     if nn_winograd_applicable(&s): allocate nn_winograd_prepared_size(&s)
 *            bytes and fill them with nn_winograd_prepare (weights transformed
 *            once);
 *   sizing   reserve nn_winograd_workspace(&s, threads) bytes of scratch;
 *   run      nn_winograd_run with the prepared weights.
 * Results match a direct convolution to a relative L2 error of a few 1e-6. */
#ifndef NN_WINOGRAD_H
#define NN_WINOGRAD_H

#include "op.h"

typedef struct nn_winograd_shape {
    int64_t batch, in_ch, out_ch, group; /* channel counts over all groups */
    int64_t in_h, in_w, out_h, out_w;
    int64_t pad_top, pad_left; /* leading pads; the trailing ones follow from out_h, out_w */
    int64_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
} nn_winograd_shape;

/* The shapes nn_winograd_run computes: a 3x3 kernel, stride 1, dilation
 * 1..64 with leading pads >= 0 that are multiples of it, consistent sizes,
 * any batch, groups and channel counts. */
bool nn_winograd_supported(const nn_winograd_shape *s);

/* Supported and expected to beat the GEMM path: at least 16 input and 16
 * output channels per group, and less time estimated for the larger of its
 * multiply-adds and its weight traffic (its weights are 4x the direct
 * ones); at batch 1 that rules out the 7x7 layers of ResNet-50 and
 * GoogLeNet. */
bool nn_winograd_applicable(const nn_winograd_shape *s);

/* Bytes of transformed weights (any alignment); they depend on the channel
 * counts and groups only, not on batch or image size. */
size_t nn_winograd_prepared_size(const nn_winograd_shape *s);

/* Transform the weights w [out_ch, in_ch / group, 3, 3] into `prepared`
 * (nn_winograd_prepared_size bytes) on up to `threads` threads.
 * NN_ERR_UNSUPPORTED for shapes that are not supported. */
nn_status nn_winograd_prepare(const nn_winograd_shape *s, const float *w, void *prepared, int threads);

/* Scratch bytes nn_winograd_run needs with `threads` threads. */
size_t nn_winograd_workspace(const nn_winograd_shape *s, int threads);

/* y = act(conv(x, w) + bias + residual) with the weights nn_winograd_prepare
 * made.  bias [out_ch], e and residual (shaped like y) may each be NULL; the
 * residual is added when given (e->residual is not looked at).  Runs on
 * at most `threads` threads, fewer when the workspace holds less than
 * nn_winograd_workspace(s, threads) asks for.  NN_ERR_UNSUPPORTED for shapes
 * that are not supported, NN_ERR_INTERNAL when the workspace is too small
 * for even one thread. */
nn_status nn_winograd_run(const nn_winograd_shape *s, const float *x, const void *prepared, const float *bias,
                          const nn_epilogue *e, const float *residual, float *y, void *workspace,
                          size_t workspace_size, int threads);

#endif
