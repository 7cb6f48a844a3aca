/* The AVX-512 VNNI and AVX2 tiles of the channels-last int8 conv
 * (qconv_nhwc.h), compiled for those extensions with target attributes; a
 * non-x86 target compiles none of this.  Both sum the raw u8 x s8
 * products modulo 2^32 (VPDPBUSD, not the saturating VPDPBUSDS; on AVX2
 * widened 16-bit products, VPMADDWD, exact), then requantize in registers
 * exactly as nn_qgemm_requantize does: float(acc + bias) * mult, clamped
 * to [lo - zp, hi - zp], rounded half to even (VCVTPS2DQ in the default
 * rounding mode), plus zp. */
#include "qconv_nhwc.h"

#if NN_HAVE_X86
#include <immintrin.h>
#include <string.h>

#define TVNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* The dot products of one tap: `halves` 16-column halves of the panel
 * (1 when the tile's columns are 16 or fewer). */
TVNNI __attribute__((always_inline)) static inline void vnni_tap(const uint8_t *const *a, int64_t a_off,
                                                                 int64_t groups, const int8_t *b, int halves,
                                                                 __m512i c[QN_MR][2]) {
    const uint8_t *r0 = a[0] + a_off, *r1 = a[1] + a_off, *r2 = a[2] + a_off, *r3 = a[3] + a_off, *r4 = a[4] + a_off,
                  *r5 = a[5] + a_off;
#define QN_ROW(I, R)                                                                                                   \
    do {                                                                                                               \
        int32_t v;                                                                                                     \
        memcpy(&v, (R) + 4 * q, 4);                                                                                    \
        __m512i ai = _mm512_set1_epi32(v);                                                                             \
        c[I][0] = _mm512_dpbusd_epi32(c[I][0], ai, b0);                                                                \
        if (halves == 2) c[I][1] = _mm512_dpbusd_epi32(c[I][1], ai, b1);                                               \
    } while (0)
    for (int64_t q = 0; q < groups; q++, b += QN_NR * 4) {
        __m512i b0 = _mm512_loadu_si512(b), b1 = halves == 2 ? _mm512_loadu_si512(b + 64) : b0;
        QN_ROW(0, r0);
        QN_ROW(1, r1);
        QN_ROW(2, r2);
        QN_ROW(3, r3);
        QN_ROW(4, r4);
        QN_ROW(5, r5);
    }
#undef QN_ROW
}

TVNNI __attribute__((always_inline)) static inline void vnni_sum(const uint8_t *const *a, int64_t a_off,
                                                                 int64_t taps, int64_t groups, const int8_t *b,
                                                                 int halves, __m512i c[QN_MR][2]) {
    for (int i = 0; i < QN_MR; i++)
        c[i][0] = c[i][1] = _mm512_setzero_si512();
    for (int64_t t = 0; t < taps; t++, a += QN_MR, b += groups * QN_NR * 4)
        vnni_tap(a, a_off, groups, b, halves, c);
}

TVNNI void nn_qn_tile_vnni512(const uint8_t *const *a, int64_t a_off, int64_t taps, int64_t groups, const int8_t *b,
                              const qn_epi *e) {
    __m512i c[QN_MR][2];
    int halves = e->cols > 16 ? 2 : 1;
    /* two instances, so that the half-panel loop carries no test per group */
    if (halves == 2)
        vnni_sum(a, a_off, taps, groups, b, 2, c);
    else
        vnni_sum(a, a_off, taps, groups, b, 1, c);
    __m512 flo = _mm512_set1_ps((float)(e->lo - e->zp)), fhi = _mm512_set1_ps((float)(e->hi - e->zp));
    __m512i zp = _mm512_set1_epi32(e->zp);
    for (int h = 0; h < halves; h++) {
        int n = e->cols - 16 * h;
        __mmask16 keep = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
        __m512i bias = _mm512_loadu_si512(e->bias + 16 * h);
        __m512 mu = _mm512_loadu_ps(e->mult + 16 * h);
        for (int i = 0; i < e->rows; i++) {
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(c[i][h], bias)), mu);
            f = _mm512_min_ps(_mm512_max_ps(f, flo), fhi);
            __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
            _mm512_mask_cvtepi32_storeu_epi8(e->y + i * e->ldy + 16 * h, keep, r);
        }
    }
}

/* AVX2: eight columns at a time.  A row's group of 4 bytes is widened to
 * four int16 and broadcast; the panel's 8 x 4 bytes to two vectors of
 * int16 (4 columns x 4 k each); VPMADDWD gives each column two pair sums
 * in adjacent lanes, joined by one horizontal add at the end. */
__attribute__((target("avx2,fma"))) void nn_qn_tile_avx2(const uint8_t *const *a, int64_t a_off, int64_t taps,
                                                          int64_t groups, const int8_t *b, const qn_epi *e) {
    __m256 flo = _mm256_set1_ps((float)(e->lo - e->zp)), fhi = _mm256_set1_ps((float)(e->hi - e->zp));
    __m256i zp = _mm256_set1_epi32(e->zp);
    bool sgn = e->lo < 0;
    for (int cp = 0; cp * 8 < e->cols; cp++) {
        __m256i c[QN_MR][2];
        for (int i = 0; i < QN_MR; i++)
            c[i][0] = c[i][1] = _mm256_setzero_si256();
        const int8_t *bt = b + cp * 32;
        const uint8_t *const *at = a;
        for (int64_t t = 0; t < taps; t++, at += QN_MR) {
            const uint8_t *r[QN_MR];
            for (int i = 0; i < QN_MR; i++)
                r[i] = at[i] + a_off;
            for (int64_t q = 0; q < groups; q++, bt += QN_NR * 4) {
                __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)bt));
                __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bt + 16)));
                for (int i = 0; i < QN_MR; i++) {
                    int32_t v;
                    memcpy(&v, r[i] + 4 * q, 4);
                    __m256i ai = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(v)));
                    c[i][0] = _mm256_add_epi32(c[i][0], _mm256_madd_epi16(ai, b0));
                    c[i][1] = _mm256_add_epi32(c[i][1], _mm256_madd_epi16(ai, b1));
                }
            }
        }
        int n = e->cols - 8 * cp < 8 ? e->cols - 8 * cp : 8;
        __m256i bias = _mm256_loadu_si256((const __m256i *)(e->bias + 8 * cp));
        __m256 mu = _mm256_loadu_ps(e->mult + 8 * cp);
        for (int i = 0; i < e->rows; i++) {
            __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c[i][0], c[i][1]), 0xD8);
            __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s, bias)), mu);
            f = _mm256_min_ps(_mm256_max_ps(f, flo), fhi);
            __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(f), zp);
            /* within [lo, hi] already: the saturating packs change nothing */
            __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            __m128i y8 = sgn ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
            uint8_t *dst = e->y + i * e->ldy + 8 * cp;
            if (n == 8)
                _mm_storel_epi64((__m128i *)dst, y8);
            else {
                uint8_t tmp[16];
                _mm_storeu_si128((__m128i *)tmp, y8);
                memcpy(dst, tmp, (size_t)n);
            }
        }
    }
}
#endif

#if NN_HAVE_X86
/* Depthwise, AVX-512: one vector of 16 channels for 4 output positions at
 * a time (4 chains of multiply-adds, each weight vector loaded once for
 * the 4), the last C % 16 channels masked; each input byte widened to
 * float as it is loaded.  Each product x * (w - zw) and every partial sum
 * is an integer below 2^24, so the float sums are exact. */
#define T512DW __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

T512DW __attribute__((always_inline)) static inline void dw_store512(__m512 acc, int64_t c0, __mmask16 m,
                                                                     const qn_dw_args *a, uint8_t *y) {
    __m512 flo = _mm512_set1_ps((float)(a->lo - a->zp)), fhi = _mm512_set1_ps((float)(a->hi - a->zp));
    __m512i v = _mm512_add_epi32(_mm512_cvttps_epi32(acc), _mm512_maskz_loadu_epi32(m, a->bias + c0));
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_maskz_loadu_ps(m, a->mult + c0));
    f = _mm512_min_ps(_mm512_max_ps(f, flo), fhi);
    _mm512_mask_cvtepi32_storeu_epi8(y + c0, m, _mm512_add_epi32(_mm512_cvtps_epi32(f), _mm512_set1_epi32(a->zp)));
}

/* NP (1 to 4) positions from p of one vector of channels from c0. */
T512DW __attribute__((always_inline)) static inline void dw_pos512(const qn_dw_row *r, const qn_dw_args *a,
                                                                   int64_t p, int64_t c0, __mmask16 m, const int NP) {
    __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    const float *w = a->wf + c0;
    for (int64_t t = 0; t < r->taps; t++, w += a->ch) {
        const uint8_t *x = r->tap[t] + p * r->step + c0;
        __m512 wv = _mm512_loadu_ps(w); /* padded to whole blocks of 32: always readable */
        for (int i = 0; i < NP; i++) {
            __m128i b = _mm_maskz_loadu_epi8(m, x + i * r->step);
            __m512 xv = _mm512_cvtepi32_ps(r->sgn ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
            s[i] = _mm512_fmadd_ps(xv, wv, s[i]);
        }
    }
    for (int i = 0; i < NP; i++)
        dw_store512(s[i], c0, m, a, r->y + (p + i) * r->ldy);
}

T512DW void nn_qn_dw_avx512(const qn_dw_row *r, const qn_dw_args *a) {
    for (int64_t c0 = 0; c0 < r->c; c0 += 16) {
        int64_t n = r->c - c0;
        __mmask16 m = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
        int64_t p = 0;
        for (; p + 4 <= r->n; p += 4)
            dw_pos512(r, a, p, c0, m, 4);
        for (; p < r->n; p++)
            dw_pos512(r, a, p, c0, m, 1);
    }
}

/* Depthwise, AVX2: one vector of 8 channels for 4 positions at a time,
 * for channel counts that are a multiple of 8 (the caller runs the rest
 * through the portable loop). */
__attribute__((always_inline, target("avx2,fma"))) static inline void dw_store256(__m256 acc, int64_t c0,
                                                                                 const qn_dw_args *a, uint8_t *y) {
    __m256 flo = _mm256_set1_ps((float)(a->lo - a->zp)), fhi = _mm256_set1_ps((float)(a->hi - a->zp));
    __m256i v = _mm256_add_epi32(_mm256_cvttps_epi32(acc), _mm256_loadu_si256((const __m256i *)(a->bias + c0)));
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_loadu_ps(a->mult + c0));
    f = _mm256_min_ps(_mm256_max_ps(f, flo), fhi);
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(f), _mm256_set1_epi32(a->zp));
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64((__m128i *)(y + c0), a->lo < 0 ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w));
}

__attribute__((always_inline, target("avx2,fma"))) static inline void dw_pos256(const qn_dw_row *r,
                                                                               const qn_dw_args *a, int64_t p,
                                                                               int64_t c0, const int NP) {
    __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const float *w = a->wf + c0;
    for (int64_t t = 0; t < r->taps; t++, w += a->ch) {
        const uint8_t *x = r->tap[t] + p * r->step + c0;
        __m256 wv = _mm256_loadu_ps(w);
        for (int i = 0; i < NP; i++) {
            __m128i b = _mm_loadl_epi64((const __m128i *)(x + i * r->step));
            __m256 xv = _mm256_cvtepi32_ps(r->sgn ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
            s[i] = _mm256_fmadd_ps(xv, wv, s[i]);
        }
    }
    for (int i = 0; i < NP; i++)
        dw_store256(s[i], c0, a, r->y + (p + i) * r->ldy);
}

__attribute__((target("avx2,fma"))) void nn_qn_dw_avx2(const qn_dw_row *r, const qn_dw_args *a) {
    for (int64_t c0 = 0; c0 + 8 <= r->c; c0 += 8) {
        int64_t p = 0;
        for (; p + 4 <= r->n; p += 4)
            dw_pos256(r, a, p, c0, 4);
        for (; p < r->n; p++)
            dw_pos256(r, a, p, c0, 1);
    }
}

/* Depthwise, AVX-512 VNNI (qn_dwb_args): per position and 64 channels, a
 * group of 4 taps is 4 byte loads interleaved into 4 vectors of (tap 0..3)
 * bytes per channel, 4 VPDPBUSD; 2 positions at a time.  The packs at the
 * end undo the interleaving's order, so the 64 bytes store as they are. */
TVNNI __attribute__((always_inline)) static inline void dwb_pos(const qn_dw_row *r, const qn_dwb_args *a, int64_t p,
                                                                int64_t c0, __mmask64 m, const int NP) {
    __m512i acc[2][4];
    for (int i = 0; i < NP; i++)
        for (int k = 0; k < 4; k++)
            acc[i][k] = _mm512_setzero_si512();
    const int8_t *w = a->w + c0 / 64 * a->tap_groups * 256;
    for (int64_t tg = 0; tg < a->tap_groups; tg++, w += 256) {
        __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 64), w2 = _mm512_loadu_si512(w + 128),
                w3 = _mm512_loadu_si512(w + 192);
        const uint8_t *const *t = r->tap + 4 * tg;
        for (int i = 0; i < NP; i++) {
            int64_t off = (p + i) * r->step + c0;
            __m512i x0 = _mm512_maskz_loadu_epi8(m, t[0] + off), x1 = _mm512_maskz_loadu_epi8(m, t[1] + off);
            __m512i x2 = _mm512_maskz_loadu_epi8(m, t[2] + off), x3 = _mm512_maskz_loadu_epi8(m, t[3] + off);
            __m512i lo01 = _mm512_unpacklo_epi8(x0, x1), hi01 = _mm512_unpackhi_epi8(x0, x1);
            __m512i lo23 = _mm512_unpacklo_epi8(x2, x3), hi23 = _mm512_unpackhi_epi8(x2, x3);
            acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], _mm512_unpacklo_epi16(lo01, lo23), w0);
            acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], _mm512_unpackhi_epi16(lo01, lo23), w1);
            acc[i][2] = _mm512_dpbusd_epi32(acc[i][2], _mm512_unpacklo_epi16(hi01, hi23), w2);
            acc[i][3] = _mm512_dpbusd_epi32(acc[i][3], _mm512_unpackhi_epi16(hi01, hi23), w3);
        }
    }
    const int32_t *bias = a->bias + c0;
    const float *mult = a->mult + c0;
    __m512 flo = _mm512_set1_ps((float)(a->lo - a->zp)), fhi = _mm512_set1_ps((float)(a->hi - a->zp));
    __m512i zp = _mm512_set1_epi32(a->zp);
    for (int i = 0; i < NP; i++) {
        __m512i q[4];
        for (int k = 0; k < 4; k++) {
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc[i][k], _mm512_loadu_si512(bias + 16 * k))),
                                     _mm512_loadu_ps(mult + 16 * k));
            f = _mm512_min_ps(_mm512_max_ps(f, flo), fhi);
            q[k] = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
        }
        /* within [lo, hi] already: the saturating packs change nothing but the order */
        __m512i w01 = _mm512_packs_epi32(q[0], q[1]), w23 = _mm512_packs_epi32(q[2], q[3]);
        __m512i y = a->lo < 0 ? _mm512_packs_epi16(w01, w23) : _mm512_packus_epi16(w01, w23);
        _mm512_mask_storeu_epi8(r->y + (p + i) * r->ldy + c0, m, y);
    }
}

TVNNI void nn_qn_dw_vnni512(const qn_dw_row *r, const qn_dwb_args *a) {
    for (int64_t c0 = 0; c0 < r->c; c0 += 64) {
        int64_t n = r->c - c0;
        __mmask64 m = n >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
        int64_t p = 0;
        for (; p + 2 <= r->n; p += 2)
            dwb_pos(r, a, p, c0, m, 2);
        for (; p < r->n; p++)
            dwb_pos(r, a, p, c0, m, 1);
    }
}
#endif
