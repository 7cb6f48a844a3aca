/* The bf16 GEMM kernel (nn_gemm.bf16): A and B packed as bf16 pairs
 * (gemm_kernel.h, `pairs`), each 14 x 32 tile accumulated in fp32 by
 * VDPBF16PS, which adds both products of a pair in one step, so a K step
 * of two costs what one costs the fp32 kernel.  The epilogue is the fp32
 * kernel's (gemm_x86_store.h).  Needs AVX512-BF16 (nn_gemm_bf16_available);
 * a non-x86 target compiles none of this. */
#include "gemm_kernel.h"

#if NN_HAVE_X86
#include <immintrin.h>

#include "gemm_x86_store.h"

#define TBF16 __attribute__((target("avx512f,avx512dq,avx512bw,avx512bf16,avx2,fma")))
#define BF_MR 14
#define BF_NR 32
#define BF_NC 512

/* R rows by V vectors of 16 columns over kc / 2 pairs (the last one's upper
 * half zero in both panels when kc is odd). */
static inline __attribute__((always_inline)) TBF16 void tile_bf16_rows(const int R, const int V, const tile_args *t) {
    __m512 c0[BF_MR], c1[BF_MR];
#pragma clang loop unroll(full)
    for (int i = 0; i < R; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
    const uint32_t *a = (const uint32_t *)t->a, *b = (const uint32_t *)t->b;
    const char *next = (const char *)t->next_a;
    for (int64_t q = 0; q < (t->kc + 1) / 2; q++, a += BF_MR, b += BF_NR, next += BF_MR * 4) {
        _mm_prefetch(next, _MM_HINT_T1);
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = V > 1 ? (__m512bh)_mm512_loadu_si512(b + 16) : b0;
#pragma clang loop unroll(full)
        for (int i = 0; i < R; i++) {
            __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
            c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);
            if (V > 1) c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);
        }
    }
    if (t->trans_c) {
        store512_transposed(R, c0, t, 0);
        if (V > 1) store512_transposed(R, c1, t, 16);
        return;
    }
    __mmask16 m0 = t->nr >= 16 ? 0xffff : (__mmask16)((1u << t->nr) - 1);
    __mmask16 m1 = t->nr >= 32 ? 0xffff : t->nr <= 16 ? 0 : (__mmask16)((1u << (t->nr - 16)) - 1);
    store512_rows(R, V, c0, c1, t, m0, m1);
}

static inline __attribute__((always_inline)) TBF16 void tile_bf16_width(const int V, const tile_args *t) {
    if (t->mr > 8)
        tile_bf16_rows(14, V, t);
    else if (t->mr > 4)
        tile_bf16_rows(8, V, t);
    else if (t->mr > 2)
        tile_bf16_rows(4, V, t);
    else if (t->mr > 1)
        tile_bf16_rows(2, V, t);
    else
        tile_bf16_rows(1, V, t);
}

TBF16 static void tile_bf16(const tile_args *t) {
    if (t->nr > 16)
        tile_bf16_width(2, t);
    else
        tile_bf16_width(1, t);
}

/* 16 words of pairs from two rows of 16 floats (lo: the even K step). */
static inline __attribute__((always_inline)) TBF16 __m512i pair16(__m512 lo, __m512 hi) {
    __m512i l = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
    __m512i h = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
    return _mm512_or_si512(l, _mm512_slli_epi32(h, 16));
}

/* Rows 2q and 2q + 1 of nc columns (padded to whole nr panels) as fp32
 * lines lo and hi into the pair panels at dst: panel j0 / nr starts at
 * j0 * kc words, pair q at q * nr words into it. */
static inline __attribute__((always_inline)) TBF16 void store_pairs(const float *lo, const float *hi, int64_t nc,
                                                                   int64_t kc, int nr, int64_t q, uint32_t *dst) {
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
        uint32_t *d = dst + j0 * kc + q * nr;
        for (int j = 0; j < nr; j += VEC) {
            int width = nr - j < VEC ? nr - j : VEC;
            __m512i v = pair16(_mm512_loadu_ps(lo + j0 + j), _mm512_loadu_ps(hi + j0 + j));
            _mm512_mask_storeu_epi32(d + j, (__mmask16)((1u << width) - 1), v);
        }
    }
}

/* The fp32 kernel's packers make each row (kc 1: a row's panels lie end to
 * end, so the row comes out as it is) into two lines on the stack; the
 * lines, rounded, become the pairs.  A block has at most NN_GEMM_NC_MAX
 * columns (the blocking derived from the caches can exceed BF_NC), padded
 * to VEC: 64 KiB of stack. */
TBF16 static void pack_conv_bf16(const conv_table *t, const float *x, int64_t p0, int64_t kc, int nr, float *dst) {
    _Alignas(64) float line[2][NN_GEMM_NC_MAX + 2 * VEC];
    int64_t ncp = t->nvec * VEC;
    if (ncp > NN_GEMM_NC_MAX) return; /* cannot happen: the driver's blocks are at most NN_GEMM_NC_MAX */
    for (int64_t q = 0; q < (kc + 1) / 2; q++) {
        for (int h = 0; h < 2; h++) {
            if (2 * q + h < kc)
                nn_gemm_kernel_avx512.pack_conv(t, x, p0 + 2 * q + h, 1, nr, line[h]);
            else
                memset(line[h], 0, sizeof(float) * (size_t)ncp);
            memset(line[h] + ncp, 0, sizeof(float) * VEC); /* whole vectors past a ragged panel */
        }
        store_pairs(line[0], line[1], ncp, kc, nr, q, (uint32_t *)dst);
    }
}

TBF16 static void pack_plain_bf16(const float *src, int64_t ld, int64_t kc, int64_t nc, int nr, float *dst,
                                  const b_prologue *pr) {
    for (int64_t q = 0; q < (kc + 1) / 2; q++)
        for (int64_t j0 = 0; j0 < nc; j0 += nr) {
            uint32_t *d = (uint32_t *)dst + j0 * kc + q * nr;
            for (int j = 0; j < nr; j += VEC) {
                int width = nr - j < VEC ? nr - j : VEC;
                int64_t left = min64(width, nc - j0 - j);
                __mmask16 m = left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
                __m512 v[2];
                for (int h = 0; h < 2; h++) {
                    int64_t p = 2 * q + h;
                    if (p >= kc) {
                        v[h] = _mm512_setzero_ps();
                        continue;
                    }
                    v[h] = _mm512_maskz_loadu_ps(m, src + p * ld + j0 + j);
                    if (pr) {
                        v[h] = _mm512_fmadd_ps(v[h], _mm512_set1_ps(pr->scale[p]), _mm512_set1_ps(pr->shift[p]));
                        if (pr->relu) v[h] = _mm512_max_ps(v[h], _mm512_setzero_ps()); /* NaN -> 0, as fp32 */
                        v[h] = _mm512_maskz_mov_ps(m, v[h]);                           /* padding stays zero */
                    }
                }
                _mm512_mask_storeu_epi32(d + j, (__mmask16)((1u << width) - 1), pair16(v[0], v[1]));
            }
        }
}

static void act_bf16(float *y, int64_t n, nn_act act, float a, float b) { nn_gemm_kernel_avx512.act(y, n, act, a, b); }
static void dot_bf16(const float *x, const float *r, int64_t ld, int64_t n, int count, float *out) {
    nn_gemm_kernel_avx512.dot(x, r, ld, n, count, out);
}
static void axpy_bf16(float *y, float a, const float *x, int64_t n) { nn_gemm_kernel_avx512.axpy(y, a, x, n); }

const gemm_kernel nn_gemm_kernel_bf16 = {.name = "avx512-bf16",
                                         .mr = BF_MR,
                                         .nr = BF_NR,
                                         .mc = BF_MR * 24,
                                         .nc = BF_NC,
                                         .pairs = true,
                                         .tile = tile_bf16,
                                         .act = act_bf16,
                                         .dot = dot_bf16,
                                         .axpy = axpy_bf16,
                                         .pack_conv = pack_conv_bf16,
                                         .pack_plain = pack_plain_bf16};
#endif
