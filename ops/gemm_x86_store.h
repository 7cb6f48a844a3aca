/* The AVX-512 tiles' stores (gemm_x86.c's fp32 kernel, gemm_bf16_x86.c's
 * bf16 one): a tile's rows through the epilogue, and a tile stored
 * transposed.  Included only where NN_HAVE_X86, after immintrin.h. */
#ifndef NN_GEMM_X86_STORE_H
#define NN_GEMM_X86_STORE_H

#include "act_x86.h"
#include "gemm_kernel.h"

/* The activations besides ReLU and Clip, out of line: n lines of up to 32
 * floats in buf (32 apart), line l stored at c + l * ldc under masks m0
 * (its first 16 floats) and m1 (the next 16; 0 for none).  Each case is a
 * loop with its one expression (nn_act512 with a constant act folds to it);
 * unrolled into every tile shape, these cases made the kernels' code 2.4x
 * as large. */
T512 static __attribute__((noinline)) void act_store512(const float *buf, int n, float *c, int64_t ldc, __mmask16 m0,
                                                        __mmask16 m1, nn_act act, float alpha, float beta) {
    switch (act) {
#define LINES(A)                                                                                                       \
    case A:                                                                                                            \
        for (int l = 0; l < n; l++) {                                                                                  \
            _mm512_mask_storeu_ps(c + l * ldc, m0, nn_act512(_mm512_loadu_ps(buf + 32 * l), A, alpha, beta));          \
            if (m1)                                                                                                    \
                _mm512_mask_storeu_ps(c + l * ldc + 16, m1,                                                            \
                                      nn_act512(_mm512_loadu_ps(buf + 32 * l + 16), A, alpha, beta));                  \
        }                                                                                                              \
        return;
        NN_ACT_VEC_OTHERS(LINES)
#undef LINES
    default:
        for (int l = 0; l < n; l++) {
            _mm512_mask_storeu_ps(c + l * ldc, m0, _mm512_loadu_ps(buf + 32 * l));
            if (m1) _mm512_mask_storeu_ps(c + l * ldc + 16, m1, _mm512_loadu_ps(buf + 32 * l + 16));
        }
    }
}

/* A row-major tile's epilogue and store: rows [0, min(R, mr)) of V vectors
 * (y0, and y1 when V is 2; m0, m1 their columns).  Each test is made once
 * per tile and runs over all of the tile's vectors, as in gemm_x86.c's tile256_rows:
 * tested per vector, the tile's code was tens of KB, every test
 * repeated for each of its 28 vectors and the activation's switch for each
 * too, more than the L1 instruction cache, and at K = 16 (the projections
 * of MobileNetV2's first blocks) the epilogue took a third of the tile's
 * time.  The tile's fields are read once into e: the stores may alias *t.
 * The trip counts stay constant (R, with a test inside) so that the loops
 * unroll and the accumulators stay in registers. */
static inline __attribute__((always_inline)) T512 void store512_rows(const int R, const int V, __m512 *y0, __m512 *y1,
                                                                     const tile_args *t, __mmask16 m0, __mmask16 m1) {
    const tile_args e = *t;
#define EACH_ROW _Pragma("clang loop unroll(full)") for (int i = 0; i < R; i++) if (i < e.mr)
    if (e.load_c) EACH_ROW {
            y0[i] = _mm512_add_ps(y0[i], _mm512_maskz_loadu_ps(m0, e.c + i * e.ldc));
            if (V > 1) y1[i] = _mm512_add_ps(y1[i], _mm512_maskz_loadu_ps(m1, e.c + i * e.ldc + 16));
        }
    if (e.last) {
        if (e.bias_row) EACH_ROW {
                __m512 b = _mm512_set1_ps(e.bias_row[i]);
                y0[i] = _mm512_add_ps(y0[i], b);
                if (V > 1) y1[i] = _mm512_add_ps(y1[i], b);
            }
        if (e.bias_col) {
            __m512 b0 = _mm512_maskz_loadu_ps(m0, e.bias_col),
                   b1 = V > 1 ? _mm512_maskz_loadu_ps(m1, e.bias_col + 16) : b0;
            EACH_ROW {
                y0[i] = _mm512_add_ps(y0[i], b0);
                if (V > 1) y1[i] = _mm512_add_ps(y1[i], b1);
            }
        }
        if (e.res) EACH_ROW {
                y0[i] = _mm512_add_ps(y0[i], _mm512_maskz_loadu_ps(m0, e.res + i * e.ldr));
                if (V > 1) y1[i] = _mm512_add_ps(y1[i], _mm512_maskz_loadu_ps(m1, e.res + i * e.ldr + 16));
            }
        switch (e.act) {
        case NN_ACT_NONE: break;
        case NN_ACT_RELU:
            EACH_ROW {
                y0[i] = _mm512_max_ps(y0[i], _mm512_setzero_ps());
                if (V > 1) y1[i] = _mm512_max_ps(y1[i], _mm512_setzero_ps());
            }
            break;
        case NN_ACT_CLIP: {
            __m512 lo = _mm512_set1_ps(e.alpha), hi = _mm512_set1_ps(e.beta);
            EACH_ROW {
                y0[i] = _mm512_min_ps(_mm512_max_ps(y0[i], lo), hi);
                if (V > 1) y1[i] = _mm512_min_ps(_mm512_max_ps(y1[i], lo), hi);
            }
            break;
        }
        default: {
            /* the rest out of line, through a buffer */
            float buf[16 * 32]; /* R <= 16 */
            EACH_ROW {
                _mm512_storeu_ps(buf + 32 * i, y0[i]);
                if (V > 1) _mm512_storeu_ps(buf + 32 * i + 16, y1[i]);
            }
            act_store512(buf, R < e.mr ? R : e.mr, e.c, e.ldc, m0, V > 1 ? m1 : 0, e.act, e.alpha, e.beta);
            return;
        }
        }
    }
    EACH_ROW {
        _mm512_mask_storeu_ps(e.c + i * e.ldc, m0, y0[i]);
        if (V > 1) _mm512_mask_storeu_ps(e.c + i * e.ldc + 16, m1, y1[i]);
    }
#undef EACH_ROW
}

/* r[i] lane j -> r[j] lane i, for 16 rows of 16: 32-bit, then 64-bit
 * interleaves inside 128-bit lanes (after which r[4k + q]'s lane L holds
 * rows 4k..4k+3 of column 4L + q), then two 128-bit lane shuffles. */
static inline __attribute__((always_inline)) T512 void transpose16(__m512 r[16]) {
    __m512 a[16], b[16];
#pragma clang loop unroll(full)
    for (int k = 0; k < 8; k++) {
        a[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
#pragma clang loop unroll(full)
    for (int k = 0; k < 4; k++)
#pragma clang loop unroll(full)
        for (int h = 0; h < 2; h++) {
            __m512d x = _mm512_castps_pd(a[4 * k + h]), y = _mm512_castps_pd(a[4 * k + h + 2]);
            b[4 * k + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(x, y));
            b[4 * k + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x, y));
        }
#pragma clang loop unroll(full)
    for (int q = 0; q < 4; q++) {
        __m512 lo01 = _mm512_shuffle_f32x4(b[q], b[4 + q], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 hi01 = _mm512_shuffle_f32x4(b[q], b[4 + q], _MM_SHUFFLE(3, 2, 3, 2));
        __m512 lo23 = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 hi23 = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], _MM_SHUFFLE(3, 2, 3, 2));
        r[q] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0));
        r[4 + q] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1));
        r[8 + q] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0));
        r[12 + q] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* A transposed C: the R rows of accumulators for columns j0..j0+15 become
 * one vector per column, its lanes the tile's rows, stored down C's column
 * (a row of the NCHW output when rows are positions and columns channels). */
static inline __attribute__((always_inline)) T512 void store512_transposed(const int R, const __m512 *acc,
                                                                           const tile_args *t, int j0) {
    const tile_args e = *t; /* as in store512_rows: each test once, the fields in registers */
    __m512 r[16];
#pragma clang loop unroll(full)
    for (int i = 0; i < 16; i++)
        r[i] = i < R ? acc[i] : _mm512_setzero_ps();
    transpose16(r);
    __mmask16 rows = (__mmask16)((1u << e.mr) - 1);
#define EACH_COL _Pragma("clang loop unroll(full)") for (int j = 0; j < 16; j++) if (j0 + j < e.nr)
    if (e.load_c) EACH_COL r[j] = _mm512_add_ps(r[j], _mm512_maskz_loadu_ps(rows, e.c + (j0 + j) * e.ldc));
    if (e.last) {
        if (e.bias_row) {
            __m512 b = _mm512_maskz_loadu_ps(rows, e.bias_row);
            EACH_COL r[j] = _mm512_add_ps(r[j], b);
        }
        if (e.bias_col) EACH_COL r[j] = _mm512_add_ps(r[j], _mm512_set1_ps(e.bias_col[j0 + j]));
        if (e.res) EACH_COL r[j] = _mm512_add_ps(r[j], _mm512_maskz_loadu_ps(rows, e.res + (j0 + j) * e.ldr));
        switch (e.act) {
        case NN_ACT_NONE: break;
        case NN_ACT_RELU: EACH_COL r[j] = _mm512_max_ps(r[j], _mm512_setzero_ps()); break;
        case NN_ACT_CLIP: {
            __m512 lo = _mm512_set1_ps(e.alpha), hi = _mm512_set1_ps(e.beta);
            EACH_COL r[j] = _mm512_min_ps(_mm512_max_ps(r[j], lo), hi);
            break;
        }
        default: {
            float buf[16 * 32];
            EACH_COL _mm512_storeu_ps(buf + 32 * j, r[j]);
            int n = e.nr - j0 < 16 ? e.nr - j0 : 16;
            act_store512(buf, n, e.c + j0 * e.ldc, e.ldc, rows, 0, e.act, e.alpha, e.beta);
            return;
        }
        }
    }
    EACH_COL _mm512_mask_storeu_ps(e.c + (j0 + j) * e.ldc, rows, r[j]);
#undef EACH_COL
}

#endif
