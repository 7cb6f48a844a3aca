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
/* Their counts and values in range (for the op's check). */
nn_status nn_window_check(const nn_window_attrs *w, char *err, size_t err_size);
/* One spatial axis of a forward window (Conv, QLinearConv, pooling without
 * ceil_mode) of extent ext = (kernel - 1) * dilation + 1 and stride s over
 * `in` values: the output length (0 when the window does not fit), with the
 * pads *pb and *pe (given, as attributes) resolved as auto_pad says. */
int64_t nn_window_out(nn_auto_pad auto_pad, int64_t in, int64_t ext, int64_t s, int64_t *pb, int64_t *pe);
/* Indices i in [0, count) with 0 <= i*stride + off < limit form [*lo, *hi).
 * Inline: the pools call it per output row, where a call cost 20% of a
 * 14x14 pool's time. */
static inline void nn_valid_range(int64_t off, int64_t stride, int64_t limit, int64_t count, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int64_t h = limit - off <= 0 ? 0 : (limit - 1 - off) / stride + 1;
    if (h > count) h = count;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}
/* Length of one axis of an input plane padded so that every output's window
 * lies inside it: what the windows touch, and at least the leading pad and
 * the input. */
int64_t nn_padded_extent(int64_t out, int64_t stride, int64_t kernel, int64_t dilation, int64_t pad, int64_t in);
/* Copy the h x w plane src into dst, a ph x pw plane followed by `slack`
 * more floats, at row pt and column pl; every other float of dst gets
 * `fill` (0 for convolutions, -inf for max pooling). */
void nn_pad_plane(float *dst, int64_t ph, int64_t pw, int64_t slack, const float *src, int64_t h, int64_t w, int64_t pt,
                  int64_t pl, float fill);
/* nn_pad_plane with each row's even columns first, then its odd ones: a
 * stride-2 window's taps then read consecutive floats. */
void nn_pad_plane_split(float *dst, int64_t ph, int64_t pw, int64_t slack, const float *src, int64_t h, int64_t w,
                        int64_t pt, int64_t pl, float fill);
/* Stride-1 windows that keep a small plane's size (GoogLeNet's 3x3 pools,
 * MobileNet's and EfficientNet's depthwise convs on 14x14 and 7x7) run on
 * the flat plane, 16 positions to a vector whatever the row width: a tap is
 * one load masked to the lanes whose neighbour lies inside the plane.  The
 * masks depend on the geometry only; for vector v, a tap kw columns along
 * (kw * dil_w - pad_w away) keeps the lanes of row_tap[v][kw], a tap kh
 * rows along those of col_tap[v][kh], a 2-D tap both. */
enum { NN_FLAT_VECS = 64, NN_FLAT_TAPS = 7 };
typedef struct nn_flat_taps {
    int64_t n, w, vecs;             /* plane floats, row length, 16-float vectors */
    int64_t kh, kw, pt, pl, dh, dw; /* tap k of a row lies k * dw - pl columns along */
    uint16_t row_tap[NN_FLAT_VECS][NN_FLAT_TAPS], col_tap[NN_FLAT_VECS][NN_FLAT_TAPS];
} nn_flat_taps;
/* false when the plane or the kernel is too large, or a pad reaches past
 * the kernel's extent (the caller checks stride 1, output size = input). */
bool nn_flat_taps_init(nn_flat_taps *t, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t pt, int64_t pl,
                       int64_t dh, int64_t dw);
/* Lanes of vector v that a plane of n floats holds. */
static inline uint16_t nn_flat_lanes(int64_t n, int64_t v) {
    return (uint16_t)(n - v * 16 >= 16 ? 0xffff : (1u << (n - v * 16)) - 1);
}

/* Advance a multi-dimensional position over dims, last dim fastest. */
void nn_odometer_next(int64_t *pos, const int64_t *dims, int n);

#endif
