/* The AVX-512 tiles' stores (gemm_x86.c's fp32 kernel, gemm_bf16_x86.c's
 * bf16 one): a row of accumulators through the epilogue, and a tile stored
 * transposed.  Included only where NN_HAVE_X86, after immintrin.h. */
#ifndef NN_GEMM_X86_STORE_H
#define NN_GEMM_X86_STORE_H

#include "act_x86.h"
#include "gemm_kernel.h"

static inline __attribute__((always_inline)) T512 __m512 epi512(__m512 v, const tile_args *t, int i, int j,
                                                                __mmask16 m) {
    const float *c = t->c + i * t->ldc + j;
    if (t->load_c) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, c));
    if (!t->last) return v;
    if (t->bias_row) v = _mm512_add_ps(v, _mm512_set1_ps(t->bias_row[i]));
    if (t->bias_col) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t->bias_col + j));
    if (t->res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t->res + i * t->ldr + j));
    return nn_act512(v, t->act, t->alpha, t->beta);
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
    __m512 r[16];
#pragma clang loop unroll(full)
    for (int i = 0; i < 16; i++)
        r[i] = i < R ? acc[i] : _mm512_setzero_ps();
    transpose16(r);
    __mmask16 rows = (__mmask16)((1u << t->mr) - 1);
    for (int j = 0; j < 16 && j0 + j < t->nr; j++) {
        float *c = t->c + (j0 + j) * t->ldc;
        __m512 v = r[j];
        if (t->load_c) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rows, c));
        if (t->last) {
            if (t->bias_row) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rows, t->bias_row));
            if (t->bias_col) v = _mm512_add_ps(v, _mm512_set1_ps(t->bias_col[j0 + j]));
            if (t->res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rows, t->res + (j0 + j) * t->ldr));
            v = nn_act512(v, t->act, t->alpha, t->beta);
        }
        _mm512_mask_storeu_ps(c, rows, v);
    }
}

#endif
