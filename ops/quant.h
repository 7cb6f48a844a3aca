/* Helpers shared by the quantization ops (ops/quant.c, ops/qlinear.c). */
#ifndef NN_QUANT_H
#define NN_QUANT_H

#include <math.h>

#include "op.h"

#include "window.h"

/* ConvInteger's and QLinearConv's attributes (ops/qlinear.c). */
typedef struct nn_qconv_params {
    nn_window_attrs w;
    int64_t group;
} nn_qconv_params;

/* QuantizeLinear's and DequantizeLinear's attributes (ops/quant.c). */
typedef struct nn_qdq_params {
    int64_t axis;
    int32_t per_axis_ok; /* opset >= 13: a 1-D scale runs along axis */
} nn_qdq_params;

/* A tensor seen as [outer, len, inner] around its quantization axis
 * (len 1: one scale for the whole tensor). */
typedef struct nn_quant_view {
    int64_t outer, len, inner;
} nn_quant_view;

/* Validate input `scale` (float, scalar or 1-D) and the optional input
 * `zero` (same shape) against input `data`, and lay data out around `axis`
 * (a 1-D scale runs along it; before opset 13 only one value is allowed). */
nn_status nn_quant_layout(nn_call *c, int data, int scale, int zero, int64_t axis, bool per_axis_ok, nn_quant_view *v);
/* Element i of the zero-point input `zero` (int8, uint8 or int32); 0 when absent. */
int32_t nn_quant_zero(const nn_call *c, int zero, int64_t i);

/* saturate(round_half_even(x / scale) + zp) into [lo, hi]; NaN gives lo,
 * as ONNX Runtime's kernel (its float max picks the bound). */
static inline int32_t nn_quantize_value(float x, float scale, int32_t zp, int32_t lo, int32_t hi) {
    float v = x / scale, flo = (float)(lo - zp), fhi = (float)(hi - zp);
    v = v >= flo ? v : flo; /* NaN too */
    v = v > fhi ? fhi : v;
    /* branch-free and without a call to rintf, so that loops vectorize; the
     * bounds less zp are whole numbers, so clamping first changes nothing,
     * and |v| <= 2^22 after it, where adding and removing 1.5 * 2^23 rounds
     * half to even exactly as rintf does */
    return (int32_t)((v + 12582912.0f) - 12582912.0f) + zp;
}

#endif
