/* Applying a fused epilogue (see nn_epilogue in op.h) to a block of outputs. */
#ifndef NN_EPILOGUE_H
#define NN_EPILOGUE_H

#include <math.h>

#include "act.h"
#include "op.h"

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
    case NN_ACT_GELU:
        for (int64_t i = 0; i < n; i++) y[i] = nn_gelu(y[i]);
        break;
    case NN_ACT_GELU_TANH:
        for (int64_t i = 0; i < n; i++) y[i] = nn_gelu_tanh(y[i]);
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
