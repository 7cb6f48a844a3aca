/* Small AVX2 helpers shared by the CPU kernels (cuda/ never includes this).
 * Each function carries its own target attribute, so the including file
 * needs no -m flags; callers are compiled for AVX2 themselves. */
#ifndef NN_OPS_AVX2_H
#define NN_OPS_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The first n (< 8) floats at p, the rest zero; and the converse store.
 * Through a buffer: masked stores are slow on AMD, and masked loads would
 * still address floats past the tensor's end. */
static inline __attribute__((always_inline, target("avx2"))) __m256 nn_load_first8(const float *p, int64_t n) {
    float part[8] = {0};
    memcpy(part, p, sizeof(float) * (size_t)n);
    return _mm256_loadu_ps(part);
}
static inline __attribute__((always_inline, target("avx2"))) void nn_store_first8(float *p, __m256 v, int64_t n) {
    float part[8];
    _mm256_storeu_ps(part, v);
    memcpy(p, part, sizeof(float) * (size_t)n);
}

/* Lanes [0, n) set (n from 0 to 8, more counts as 8): a mask for
 * vmaskmovps, or through a cast for an and. */
static inline __attribute__((always_inline, target("avx2"))) __m256i nn_lanes8(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 8 ? n : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The even and the odd floats of a then b (16 consecutive ones): per
 * 128-bit half, then the halves in order. */
static inline __attribute__((always_inline, target("avx2"))) __m256 nn_evens8(__m256 a, __m256 b) {
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline __attribute__((always_inline, target("avx2"))) __m256 nn_odds8(__m256 a, __m256 b) {
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* r[0..7] (rows) become their columns: r[j] lane i is row i's lane j. */
static inline __attribute__((always_inline, target("avx2"))) void nn_transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4h + j], 128-bit half L: column j + 4L of rows 4h..4h+3 */
    for (int h = 0; h < 8; h += 4) {
        u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
        u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xee);
        u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xee);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        r[j + 4] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}

#endif
