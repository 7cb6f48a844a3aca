/* QLinearConvNhwc (ops/qconv_nhwc.c): QLinearConv on channels-last
 * tensors, x [N, H, W, C] and y [N, OH, OW, M], which passes/layout_nhwc.c
 * puts in place of QLinearConvs between a Transpose in and a Transpose out.
 *
 * Why the layout: the int8 dot product (VPDPBUSD) multiplies 4 consecutive
 * bytes of one operand, broadcast, with 4-byte groups of the other.  In
 * NCHW an output position's 4 input channels lie a plane apart, so every
 * conv packed its activations into 4-byte groups (a 3x3 one once per tap);
 * in NHWC they are 4 consecutive bytes of the input, read in place, and the
 * weights, packed once at load, are the groups.  A tile is QN_MR output
 * positions by QN_NR output channels; the positions' input rows come as
 * pointers, one per tap and position (a padded tap points at a row of the
 * input's zero point), so strides, pads and dilations cost nothing in the
 * tile.  Weights must have zero points of 0 (int8) or 128 (uint8, flipped
 * to int8 at load): then the zero-point correction is one constant per
 * output channel, folded into the bias at load, and the epilogue is the
 * requantization alone. */
#ifndef NN_QCONV_NHWC_H
#define NN_QCONV_NHWC_H

#include <stdint.h>

#include "geom.h"
#include "isa.h"
#include "op.h"

enum { QN_MR = 6, QN_NR = 32 };

/* Most taps (KH x KW) of a channels-last conv: a tile's row pointers live
 * on the stack. */
#define QN_MAX_TAPS 256

/* A tile's epilogue, per valid row r < rows and column j < cols:
 *     y[r * ldy + j] = requantize(acc[r][j] + bias[j], mult[j], zp, lo, hi)
 * bias and mult hold QN_NR values (the panel's output channels). */
typedef struct qn_epi {
    const int32_t *bias;
    const float *mult;
    uint8_t *y;
    int64_t ldy;
    int rows, cols;
    int32_t zp, lo, hi;
} qn_epi;

/* One tile: row i of tap t is a[t * QN_MR + i] + a_off (a_off: the conv
 * group's first input channel), `groups` 4-byte groups of uint8 each; b is
 * the panel, taps * groups groups of QN_NR columns x 4 int8 (column-major
 * within a group); the sums wrap modulo 2^32. */
typedef void (*qn_tile_fn)(const uint8_t *const *a, int64_t a_off, int64_t taps, int64_t groups, const int8_t *b,
                           const qn_epi *e);

/* A run of a depthwise conv's output positions: for position p < n and
 * channel c < C,
 *     y[p * ldy + c] = requantize(sum_t float(tap[t][p * step + c]) * wf[t * ch + c] + bias[c])
 * tap[t] tap t's input bytes for position 0 (int8 when sgn; x's zero point
 * for a padded tap, with step 0 and n 1 then); wf = w - zw as floats
 * ([taps][ch]; the sums are exact integers). */
typedef struct qn_dw_row {
    const uint8_t *const *tap;
    int64_t taps, step, n, c; /* bytes between positions */
    bool sgn;
    uint8_t *y; /* position p at y + p * ldy */
    int64_t ldy;
} qn_dw_row;

/* The per-channel constants: wf, ch floats per tap (the channels padded to
 * a block of 32, so a vector never reads past a row), bias and mult. */
typedef struct qn_dw_args {
    const float *wf;
    int64_t ch;
    const int32_t *bias;
    const float *mult;
    int32_t zp, lo, hi;
} qn_dw_args;

typedef void (*qn_dw_fn)(const qn_dw_row *r, const qn_dw_args *a);

/* The same sums with VPDPBUSD, where w - zw fits int8 (zero points 0, or
 * 128 on uint8 weights) and x is uint8: 4 taps at a time, the taps' bytes
 * of 64 channels interleaved in registers.  w holds, per block of 64
 * channels and group of 4 taps (taps padded to a multiple of 4 with zero
 * weights; r->tap has that many entries), 4 vectors of 16 channels x 4
 * taps in the order the interleaving makes: vector k, dword 4L + i is
 * channel 16L + 4k + i; bias and mult per block in the same order. */
typedef struct qn_dwb_args {
    const int8_t *w;
    int64_t tap_groups;
    const int32_t *bias;
    const float *mult;
    int32_t zp, lo, hi;
} qn_dwb_args;

#if NN_HAVE_X86
/* AVX-512: any C; AVX2: C a multiple of 8 */
void nn_qn_dw_avx512(const qn_dw_row *r, const qn_dw_args *a);
void nn_qn_dw_avx2(const qn_dw_row *r, const qn_dw_args *a);
void nn_qn_dw_vnni512(const qn_dw_row *r, const qn_dwb_args *a);
void nn_qn_tile_vnni512(const uint8_t *const *a, int64_t a_off, int64_t taps, int64_t groups, const int8_t *b,
                        const qn_epi *e);
void nn_qn_tile_avx2(const uint8_t *const *a, int64_t a_off, int64_t taps, int64_t groups, const int8_t *b,
                     const qn_epi *e);
#endif

/* QLinearConv's geometry and input checks (ops/qlinear.c) for a call whose
 * x has NCHW dims: the channels-last op passes x's dims permuted. */
nn_status nn_qlinearconv_resolve(nn_call *c, nn_conv_geom *g);
/* Its attributes (nn_qconv_params), which the channels-last op shares. */
nn_status nn_qlinearconv_parse(nn_parse_ctx *ctx);
nn_status nn_qlinearconv_check(const void *params, char *err, size_t err_size);

#endif
