/* The activations a fused epilogue applies (nn_act in op.h), one formula
 * for every backend: the CPU kernels and cuda/ (which compiles it for the
 * device as well) call this same function. */
#ifndef NN_ACT_H
#define NN_ACT_H

#include <math.h>

#include "op.h"

#ifdef __CUDACC__
#define NN_HOST_DEVICE __host__ __device__
#else
#define NN_HOST_DEVICE
#endif

static inline NN_HOST_DEVICE float nn_act_apply(nn_act act, float alpha, float beta, float y) {
    switch (act) {
    case NN_ACT_NONE: return y;
    case NN_ACT_RELU: return y > 0.0f ? y : 0.0f;
    case NN_ACT_CLIP: return y < alpha ? alpha : (y > beta ? beta : y);
    case NN_ACT_LEAKY_RELU: return y < 0.0f ? alpha * y : y;
    case NN_ACT_SIGMOID: return 1.0f / (1.0f + expf(-y));
    case NN_ACT_HARD_SIGMOID: {
        float v = alpha * y + beta;
        return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
    }
    case NN_ACT_HARD_SWISH: {
        float v = y / 6.0f + 0.5f;
        return y * (v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v));
    }
    case NN_ACT_SILU: return y / (1.0f + expf(-y));
    case NN_ACT_TANH: return tanhf(y);
    }
    return y;
}

#endif
