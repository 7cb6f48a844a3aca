/* The activations a fused epilogue applies (nn_act in op.h), one formula
 * for every backend: the CPU kernels and cuda/ (which compiles it for the
 * device as well) call this same function. */
#ifndef NN_ACT_H
#define NN_ACT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "op.h"

#ifdef __CUDACC__
#define NN_HOST_DEVICE __host__ __device__
#else
#define NN_HOST_DEVICE
#endif

/* e^x by Cody-Waite range reduction and a degree-6 polynomial (Cephes'
 * expf coefficients, a couple of ulp), branch-free so that loops over it
 * vectorize; x is clamped to where e^x is a normal float.  The constants are
 * the definition: the CPU kernels' vector forms (act_x86.h) take the same
 * steps with them. */
#define NN_EXP_MIN    -87.0f
#define NN_EXP_MAX    88.0f
#define NN_EXP_LOG2E  1.44269504088896341f
#define NN_EXP_LN2_HI 0.693359375f /* ln 2 = HI + LO, HI exact in few bits */
#define NN_EXP_LN2_LO -2.12194440e-4f
#define NN_EXP_P0     1.9875691500e-4f /* p(f) = ((((P0 f + P1) f + P2) f + P3) f + P4) f + P5 */
#define NN_EXP_P1     1.3981999507e-3f
#define NN_EXP_P2     8.3334519073e-3f
#define NN_EXP_P3     4.1665795894e-2f
#define NN_EXP_P4     1.6666665459e-1f
#define NN_EXP_P5     5.0000001201e-1f /* e^f = p(f) f^2 + f + 1 */

static inline NN_HOST_DEVICE float nn_exp(float x) {
    x = x < NN_EXP_MIN ? NN_EXP_MIN : (x > NN_EXP_MAX ? NN_EXP_MAX : x);
    float r = (x * NN_EXP_LOG2E + 12582912.0f) - 12582912.0f; /* round(x / ln 2): 1.5 * 2^23 drops the fraction */
    float f = x - r * NN_EXP_LN2_HI - r * NN_EXP_LN2_LO;
    float p = NN_EXP_P0;
    p = p * f + NN_EXP_P1;
    p = p * f + NN_EXP_P2;
    p = p * f + NN_EXP_P3;
    p = p * f + NN_EXP_P4;
    p = p * f + NN_EXP_P5;
    p = p * f * f + f + 1.0f;
    int32_t bits = ((int32_t)r + 127) << 23; /* 2^r */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* GELU, y * Phi(y) = max(y, 0) - |y| * erfc(|y| / sqrt 2) / 2, with erfc by
 * the Chebyshev fit of Numerical Recipes' erfcc (fractional error below
 * 1.2e-7 for every argument): branch-free, so loops over it vectorize, and
 * accurate relative to the result on both sides of 0. */
static inline NN_HOST_DEVICE float nn_gelu(float y) {
    float a = y < 0.0f ? -y : y, z = a * 0.70710678118654752f;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float half_erfc = 0.5f * t * nn_exp(p - z * z);
    return (y > 0.0f ? y : 0.0f) - a * half_erfc;
}

/* GELU's tanh form, 0.5 y (1 + tanh(u)) = y * sigmoid(2u), u = sqrt(2/pi) (y + 0.044715 y^3) */
static inline NN_HOST_DEVICE float nn_gelu_tanh(float y) {
    float u2 = 1.5957691216057308f * (y + 0.044715f * y * y * y);
    return y / (1.0f + nn_exp(-u2));
}

/* Whether the vector kernels apply act in registers (act_x86.h's nn_act512
 * and nn_act256): tanh and the GELUs they leave to nn_gemm_act over the
 * stored outputs. */
static inline bool nn_act_has_vec(nn_act act) {
    return act != NN_ACT_TANH && act != NN_ACT_GELU && act != NN_ACT_GELU_TANH;
}

static inline NN_HOST_DEVICE float nn_act_apply(nn_act act, float alpha, float beta, float y) {
    switch (act) {
    case NN_ACT_NONE: return y;
    case NN_ACT_RELU: return y > 0.0f ? y : 0.0f;
    case NN_ACT_CLIP: return y < alpha ? alpha : (y > beta ? beta : y);
    case NN_ACT_LEAKY_RELU: return y < 0.0f ? alpha * y : y;
    case NN_ACT_SIGMOID: return 1.0f / (1.0f + nn_exp(-y));
    case NN_ACT_HARD_SIGMOID: {
        float v = alpha * y + beta;
        return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
    }
    case NN_ACT_HARD_SWISH: {
        float v = y / 6.0f + 0.5f;
        return y * (v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v));
    }
    case NN_ACT_SILU: return y / (1.0f + nn_exp(-y));
    case NN_ACT_TANH: return tanhf(y);
    case NN_ACT_GELU: return nn_gelu(y);
    case NN_ACT_GELU_TANH: return nn_gelu_tanh(y);
    }
    return y;
}

#endif
