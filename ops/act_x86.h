/* act.h's activations on AVX2 and AVX-512 vectors, for the kernels'
 * epilogues: nn_exp's steps with its constants, 2^r put in by scalef
 * (AVX-512) or the exponent bits (AVX2).  Each function carries its own
 * target attribute, so the including file needs no -m flags. */
#ifndef NN_ACT_X86_H
#define NN_ACT_X86_H

#include "act.h"
#include "isa.h"

#define T512 __attribute__((target("avx512f,avx512dq,avx2,fma")))
#define T256 __attribute__((target("avx2,fma")))

#if NN_HAVE_X86
#include <immintrin.h>

/* One body for both widths: V(op) names the intrinsic of the width. */
/* After the clamp of x and r = round(x log2 e): e^x = 2^r * p. */
#define NN_EXP_VEC_STEPS(V, x, r, f, p)                                                                                \
    f = V(fnmadd_ps)(r, V(set1_ps)(NN_EXP_LN2_HI), x);                                                                 \
    f = V(fnmadd_ps)(r, V(set1_ps)(NN_EXP_LN2_LO), f);                                                                 \
    p = V(set1_ps)(NN_EXP_P0);                                                                                         \
    p = V(fmadd_ps)(p, f, V(set1_ps)(NN_EXP_P1));                                                                      \
    p = V(fmadd_ps)(p, f, V(set1_ps)(NN_EXP_P2));                                                                      \
    p = V(fmadd_ps)(p, f, V(set1_ps)(NN_EXP_P3));                                                                      \
    p = V(fmadd_ps)(p, f, V(set1_ps)(NN_EXP_P4));                                                                      \
    p = V(fmadd_ps)(p, f, V(set1_ps)(NN_EXP_P5));                                                                      \
    p = V(fmadd_ps)(V(mul_ps)(p, f), f, V(add_ps)(f, V(set1_ps)(1.0f)));

#define V512(op) _mm512_##op
#define V256(op) _mm256_##op

static inline __attribute__((always_inline)) T512 __m512 nn_exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(NN_EXP_MAX)), _mm512_set1_ps(NN_EXP_MIN));
    __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(NN_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f, p;
    NN_EXP_VEC_STEPS(V512, x, r, f, p)
    return _mm512_scalef_ps(p, r);
}

static inline __attribute__((always_inline)) T256 __m256 nn_exp256(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(NN_EXP_MAX)), _mm256_set1_ps(NN_EXP_MIN));
    __m256 r =
        _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(NN_EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f, p;
    NN_EXP_VEC_STEPS(V256, x, r, f, p)
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(r), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* The activations the kernels' epilogues run besides ReLU and Clip (which
 * they spell out), X(act) for each: a switch over these with a constant
 * act in each case folds nn_act512 / nn_act256 to the case's expression. */
#define NN_ACT_VEC_OTHERS(X)                                                                                           \
    X(NN_ACT_LEAKY_RELU) X(NN_ACT_SIGMOID) X(NN_ACT_HARD_SIGMOID) X(NN_ACT_HARD_SWISH) X(NN_ACT_SILU)

/* nn_act_apply's cases (tanh excepted: the kernels run it after the tile). */
#define NN_ACT_VEC_BODY(V, EXP)                                                                                        \
    switch (act) {                                                                                                     \
    case NN_ACT_RELU: return V(max_ps)(v, V(setzero_ps)());                                                            \
    case NN_ACT_CLIP: return V(min_ps)(V(max_ps)(v, V(set1_ps)(a)), V(set1_ps)(b));                                    \
    case NN_ACT_LEAKY_RELU: return V(max_ps)(v, V(setzero_ps)()) + V(min_ps)(v, V(setzero_ps)()) * V(set1_ps)(a);      \
    case NN_ACT_SIGMOID: return V(div_ps)(V(set1_ps)(1.0f), V(set1_ps)(1.0f) + EXP(-v));                               \
    case NN_ACT_HARD_SIGMOID:                                                                                          \
        return V(min_ps)(V(max_ps)(v * V(set1_ps)(a) + V(set1_ps)(b), V(setzero_ps)()), V(set1_ps)(1.0f));             \
    case NN_ACT_HARD_SWISH:                                                                                            \
        return v * V(min_ps)(V(max_ps)(v / V(set1_ps)(6.0f) + V(set1_ps)(0.5f), V(setzero_ps)()), V(set1_ps)(1.0f));   \
    case NN_ACT_SILU: return V(div_ps)(v, V(set1_ps)(1.0f) + EXP(-v));                                                 \
    default: return v;                                                                                                 \
    }
static inline __attribute__((always_inline)) T512 __m512 nn_act512(__m512 v, nn_act act, float a, float b) {
    NN_ACT_VEC_BODY(V512, nn_exp512)
}
static inline __attribute__((always_inline)) T256 __m256 nn_act256(__m256 v, nn_act act, float a, float b) {
    NN_ACT_VEC_BODY(V256, nn_exp256)
}
#endif

#endif
