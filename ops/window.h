/* Sliding-window attributes and index arithmetic shared by Conv,
 * ConvTranspose, MaxPool and AveragePool. */
#ifndef NN_WINDOW_H
#define NN_WINDOW_H

#include "op.h"

/* spatial dims a window op supports: the tensor's rank less N and C */
#define NSP_MAX (NN_MAX_DIMS - 2)

typedef enum nn_auto_pad {
    NN_AUTO_PAD_NOTSET,
    NN_AUTO_PAD_SAME_UPPER,
    NN_AUTO_PAD_SAME_LOWER,
    NN_AUTO_PAD_VALID,
} nn_auto_pad;

typedef struct nn_window_attrs {
    nn_auto_pad auto_pad;
    /* element counts; -1 when the attribute is absent */
    int n_kernel, n_strides, n_dilations, n_pads;
    int64_t kernel[NSP_MAX], strides[NSP_MAX], dilations[NSP_MAX], pads[2 * NSP_MAX];
} nn_window_attrs;

/* Read auto_pad, kernel_shape, strides, dilations and pads. */
nn_status nn_window_parse(nn_parse_ctx *ctx, nn_window_attrs *w);
/* Indices i in [0, count) with 0 <= i*stride + off < limit form [*lo, *hi). */
void nn_valid_range(int64_t off, int64_t stride, int64_t limit, int64_t count, int64_t *lo, int64_t *hi);
/* Length of one axis of an input plane padded so that every output's window
 * lies inside it: what the windows touch, and at least the leading pad and
 * the input. */
int64_t nn_padded_extent(int64_t out, int64_t stride, int64_t kernel, int64_t dilation, int64_t pad, int64_t in);
/* Copy the h x w plane src into dst, a ph x pw plane followed by `slack`
 * more floats, at row pt and column pl; every other float of dst gets
 * `fill` (0 for convolutions, -inf for max pooling). */
void nn_pad_plane(float *dst, int64_t ph, int64_t pw, int64_t slack, const float *src, int64_t h, int64_t w, int64_t pt,
                  int64_t pl, float fill);
/* Advance a multi-dimensional position over dims, last dim fastest. */
void nn_odometer_next(int64_t *pos, const int64_t *dims, int n);

#endif
