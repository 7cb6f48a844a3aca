/* Applying a fused epilogue (see nn_epilogue in op.h) to a block of outputs. */
#ifndef NN_EPILOGUE_H
#define NN_EPILOGUE_H

#include <math.h>

#include "op.h"

static inline float nn_act_apply(nn_act act, float alpha, float beta, float y) {
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

/* y[i] = act(y[i] + residual[i]) for i < n; residual may be NULL.  The
 * switch sits outside the loop so each case vectorizes. */
static inline void nn_epilogue_apply(const nn_epilogue *e, float *y, const float *residual, int64_t n) {
    if (!e) return;
    if (residual)
        for (int64_t i = 0; i < n; i++) y[i] += residual[i];
    switch (e->act) {
    case NN_ACT_NONE: break;
    case NN_ACT_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        break;
    case NN_ACT_CLIP:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < e->alpha ? e->alpha : (y[i] > e->beta ? e->beta : y[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) y[i] = nn_act_apply(e->act, e->alpha, e->beta, y[i]);
        break;
    }
}

/* The residual tensor's data when the epilogue has one, else NULL. */
static inline const float *nn_epilogue_residual(const nn_call *c) {
    return c->epilogue && c->epilogue->residual >= 0 ? (const float *)c->in[c->epilogue->residual].data : NULL;
}

#endif
