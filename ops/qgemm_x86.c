/* The AVX-512 VNNI and AVX2 tiles of the int8 GEMM (qgemm_kernel.h),
 * compiled for those extensions with target attributes; a non-x86 target compiles none
 * of this.  VPDPBUSD, not VPDPBUSDS: the saturating form would clamp a sum
 * that the portable kernel wraps, and the zero-point correction after the
 * kernel relies on arithmetic modulo 2^32. */
#include "qgemm_kernel.h"

#if NN_HAVE_X86
#include <immintrin.h>
#include <string.h>

/* The tile's dot products into c: both 16-column halves of the packed
 * panel, or only the first (halves 1: a panel's last 16 columns or fewer,
 * 196 = 6 x 32 + 4 on a 14x14 plane, need half the dot products).
 * Inlined into each tile, so that c stays in registers. */
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline void
vnni_dots(const uint8_t *a, const int8_t *b, int64_t groups, int halves, __m512i c[QG_MR][2]) {
    for (int i = 0; i < QG_MR; i++)
        c[i][0] = c[i][1] = _mm512_setzero_si512();
    if (halves == 1)
        for (int64_t q = 0; q < groups; q++, a += QG_MR * 4, b += QG_NR * 4) {
            __m512i b0 = _mm512_loadu_si512(b);
            for (int i = 0; i < QG_MR; i++) {
                int32_t w;
                memcpy(&w, a + 4 * i, 4);
                c[i][0] = _mm512_dpbusd_epi32(c[i][0], _mm512_set1_epi32(w), b0);
            }
        }
    else
        for (int64_t q = 0; q < groups; q++, a += QG_MR * 4, b += QG_NR * 4) {
            __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
            for (int i = 0; i < QG_MR; i++) {
                int32_t w;
                memcpy(&w, a + 4 * i, 4);
                __m512i ai = _mm512_set1_epi32(w);
                c[i][0] = _mm512_dpbusd_epi32(c[i][0], ai, b0);
                c[i][1] = _mm512_dpbusd_epi32(c[i][1], ai, b1);
            }
        }
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void nn_qg_tile_vnni512(const uint8_t *a, const int8_t *b,
                                                                                int64_t groups, int32_t *acc) {
    __m512i c[QG_MR][2];
    vnni_dots(a, b, groups, 2, c);
    for (int i = 0; i < QG_MR; i++) {
        _mm512_storeu_si512(acc + i * QG_NR, c[i][0]);
        _mm512_storeu_si512(acc + i * QG_NR + 16, c[i][1]);
    }
}

/* The VNNI tile with its requantizing epilogue in registers: the zero-point
 * correction in 32-bit lanes (wrapping, as run_tile), then float, clamp, and
 * VCVTPS2DQ, which rounds half to even in the default rounding mode, as
 * nn_round_small does within the clamped range: the same bytes as the
 * portable epilogue. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void nn_qg_tile_vnni512_q8(const uint8_t *a, const int8_t *b,
                                                                                   int64_t groups, const qg_epi *e) {
    __m512i c[QG_MR][2];
    int halves = e->cols > 16 ? 2 : 1;
    vnni_dots(a, b, groups, halves, c);
    __m512i zb[2] = {_mm512_loadu_si512(e->zb), _mm512_loadu_si512(e->zb + 16)};
    __m512i cs[2] = {_mm512_loadu_si512(e->cs), _mm512_loadu_si512(e->cs + 16)};
    __m512 flo = _mm512_set1_ps((float)(e->lo - e->zp)), fhi = _mm512_set1_ps((float)(e->hi - e->zp));
    __m512i zp = _mm512_set1_epi32(e->zp);
    /* the columns to store, per half: masked stores (a memcpy of e->cols
     * bytes per row was a library call, 13% of MobileNetV2 QDQ's time) */
    __mmask16 keep[2];
    for (int h = 0; h < 2; h++) {
        int n = e->cols - 16 * h;
        keep[h] = n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
    }
    if (e->uniform) { /* the corrections folded (qg_epi) */
        __m512i za = _mm512_set1_epi32((int32_t)e->za[0]);
        __m512i zcs[2] = {_mm512_mullo_epi32(za, cs[0]), _mm512_mullo_epi32(za, cs[1])};
        for (int i = 0; i < e->rows; i++) {
            __m512i rk = _mm512_set1_epi32((int32_t)e->rk[i]);
            __m512 mu = e->mu_col ? _mm512_setzero_ps() : _mm512_set1_ps(e->mu[i]);
            for (int h = 0; h < halves; h++) {
                __m512i v = _mm512_sub_epi32(_mm512_add_epi32(c[i][h], rk), zcs[h]);
                if (e->bias_col) v = _mm512_add_epi32(v, _mm512_loadu_si512(e->bias_col + 16 * h));
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), e->mu_col ? _mm512_loadu_ps(e->mu_col + 16 * h) : mu);
                f = _mm512_min_ps(_mm512_max_ps(f, flo), fhi);
                __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
                _mm512_mask_cvtepi32_storeu_epi8(e->y + i * e->ldy + 16 * h, keep[h], r);
            }
        }
        return;
    }
    for (int i = 0; i < e->rows; i++) {
        __m512i rs = _mm512_set1_epi32((int32_t)e->rs[i]), za = _mm512_set1_epi32((int32_t)e->za[i]);
        for (int h = 0; h < halves; h++) {
            __m512i bias = e->bias_col ? _mm512_loadu_si512(e->bias_col + 16 * h) : _mm512_set1_epi32((int32_t)e->bias[i]);
            __m512 mu = e->mu_col ? _mm512_loadu_ps(e->mu_col + 16 * h) : _mm512_set1_ps(e->mu[i]);
            __m512i v = _mm512_sub_epi32(c[i][h], _mm512_mullo_epi32(zb[h], rs));
            v = _mm512_add_epi32(_mm512_sub_epi32(v, _mm512_mullo_epi32(za, cs[h])), bias);
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), mu);
            f = _mm512_min_ps(_mm512_max_ps(f, flo), fhi);
            __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
            _mm512_mask_cvtepi32_storeu_epi8(e->y + i * e->ldy + 16 * h, keep[h], r);
        }
    }
}

/* AVX2 has no u8 x s8 dot product that is exact: VPMADDUBSW adds two
 * products in saturating int16 (255 * -128 * 2 overflows).  So both sides
 * are widened to int16 and VPMADDWD adds pairs of products exactly in
 * int32 (at most 2 * 255 * 128); the two pair sums of each column stay in
 * adjacent lanes until the end, where one horizontal add joins them.  All
 * adds wrap modulo 2^32, as the other kernels do.  Eight columns at a time
 * for all QG_MR rows: twelve accumulators, B widened once per group. */
__attribute__((target("avx2"))) void nn_qg_tile_avx2(const uint8_t *a, const int8_t *b, int64_t groups,
                                                      int32_t *acc) {
    for (int cp = 0; cp < QG_NR / 8; cp++) {
        __m256i c[QG_MR][2];
        for (int i = 0; i < QG_MR; i++)
            c[i][0] = c[i][1] = _mm256_setzero_si256();
        const uint8_t *ap = a;
        const int8_t *bq = b + cp * 32;
        for (int64_t q = 0; q < groups; q++, ap += QG_MR * 4, bq += QG_NR * 4) {
            __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)bq));
            __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bq + 16)));
            for (int i = 0; i < QG_MR; i++) {
                int32_t w;
                memcpy(&w, ap + 4 * i, 4);
                __m256i ai = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(w)));
                c[i][0] = _mm256_add_epi32(c[i][0], _mm256_madd_epi16(ai, b0));
                c[i][1] = _mm256_add_epi32(c[i][1], _mm256_madd_epi16(ai, b1));
            }
        }
        for (int i = 0; i < QG_MR; i++) {
            __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c[i][0], c[i][1]), 0xD8);
            _mm256_storeu_si256((__m256i *)(acc + i * QG_NR + cp * 8), s);
        }
    }
}

/* B packing: 4 rows x 16 columns at a time, bytes interleaved with
 * unpack steps (row pairs by byte, then pairs of pairs by 16 bits), which
 * gives each column's 4 bytes in k order; column sums from PMADDUBSW with
 * unsigned ones (pairs of int8, no saturation) and PMADDWD. */
__attribute__((target("avx2"))) void nn_qg_pack_b_avx2(const uint8_t *b, int64_t ldb, const int64_t *row_off,
                                                        int64_t groups, uint8_t flip, int8_t *dst, int32_t *s) {
    __m128i fl = _mm_set1_epi8((char)flip), ones8 = _mm_set1_epi8(1), ones16 = _mm_set1_epi16(1);
    __m128i sum[8];
    for (int i = 0; i < 8; i++)
        sum[i] = _mm_setzero_si128();
    for (int64_t q = 0; q < groups; q++, dst += QG_NR * 4) {
        const uint8_t *row[4];
        for (int i = 0; i < 4; i++)
            row[i] = b + (row_off ? row_off[4 * q + i] : (4 * q + i) * ldb);
        for (int h = 0; h < 2; h++) {
            __m128i r0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(row[0] + 16 * h)), fl);
            __m128i r1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(row[1] + 16 * h)), fl);
            __m128i r2 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(row[2] + 16 * h)), fl);
            __m128i r3 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(row[3] + 16 * h)), fl);
            __m128i a_lo = _mm_unpacklo_epi8(r0, r1), a_hi = _mm_unpackhi_epi8(r0, r1);
            __m128i b_lo = _mm_unpacklo_epi8(r2, r3), b_hi = _mm_unpackhi_epi8(r2, r3);
            __m128i o[4] = {_mm_unpacklo_epi16(a_lo, b_lo), _mm_unpackhi_epi16(a_lo, b_lo),
                            _mm_unpacklo_epi16(a_hi, b_hi), _mm_unpackhi_epi16(a_hi, b_hi)};
            for (int k = 0; k < 4; k++) {
                _mm_storeu_si128((__m128i *)(dst + 64 * h + 16 * k), o[k]);
                __m128i pair = _mm_maddubs_epi16(ones8, o[k]);
                sum[4 * h + k] = _mm_add_epi32(sum[4 * h + k], _mm_madd_epi16(pair, ones16));
            }
        }
    }
    for (int i = 0; i < 8; i++) {
        int32_t t[4];
        _mm_storeu_si128((__m128i *)t, sum[i]);
        for (int j = 0; j < 4; j++)
            s[4 * i + j] += t[j];
    }
}

/* 32-bit products of int16 values below 2^8 in magnitude: exact, and
 * VPMULLD keeps the low 32 bits as the portable loop does. */
__attribute__((target("avx512f,avx512bw"))) void nn_qg_dw_tap_avx512(uint32_t *acc, const int16_t *src, int32_t w,
                                                                     int64_t n) {
    __m512i wv = _mm512_set1_epi32(w);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512i a = _mm512_loadu_si512(acc + i);
        _mm512_storeu_si512(acc + i, _mm512_add_epi32(a, _mm512_mullo_epi32(x, wv)));
    }
    for (; i < n; i++)
        acc[i] += (uint32_t)((int32_t)src[i] * w);
}

__attribute__((target("avx2"))) void nn_qg_dw_tap_avx2(uint32_t *acc, const int16_t *src, int32_t w, int64_t n) {
    __m256i wv = _mm256_set1_epi32(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        __m256i a = _mm256_loadu_si256((const __m256i *)(acc + i));
        _mm256_storeu_si256((__m256i *)(acc + i), _mm256_add_epi32(a, _mm256_mullo_epi32(x, wv)));
    }
    for (; i < n; i++)
        acc[i] += (uint32_t)((int32_t)src[i] * w);
}
#endif
