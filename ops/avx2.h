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

#endif
