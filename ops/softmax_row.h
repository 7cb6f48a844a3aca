/* One softmax row in 16 running lanes, so that the loops vectorize to
 * whatever width the including function is compiled for: Softmax's rows
 * (ops/softmax.c) and FusedAttention's score rows (ops/attention.c, per
 * ISA).  A chain of dependent float adds and compares, the plain way, is
 * not vectorized without reassociation and kept attention's rows scalar
 * (docs/perf-notes.md, "Attention: softmax rows in lanes"). */
#ifndef NN_SOFTMAX_ROW_H
#define NN_SOFTMAX_ROW_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "act.h"

#define NN_SOFTMAX_LANES 16

/* The maximum of n floats (NaN where one is NaN). */
static inline __attribute__((always_inline)) float nn_softmax_row_max(const float *x, int64_t n) {
    float lane[NN_SOFTMAX_LANES];
    for (int l = 0; l < NN_SOFTMAX_LANES; l++)
        lane[l] = -INFINITY;
    int64_t k = 0;
    bool nan = false;
    for (; k + NN_SOFTMAX_LANES <= n; k += NN_SOFTMAX_LANES)
        for (int l = 0; l < NN_SOFTMAX_LANES; l++) {
            nan |= x[k + l] != x[k + l];
            lane[l] = x[k + l] > lane[l] ? x[k + l] : lane[l];
        }
    float mx = -INFINITY;
    for (; k < n; k++) {
        nan |= x[k] != x[k];
        mx = x[k] > mx ? x[k] : mx;
    }
    for (int l = 0; l < NN_SOFTMAX_LANES; l++)
        mx = lane[l] > mx ? lane[l] : mx;
    return nan ? NAN : mx;
}

/* y = exp(x - mx) / sum over the row (y may be x).  nn_exp; a value far
 * below the maximum gives exactly 0 (a masked score). */
static inline __attribute__((always_inline)) void nn_softmax_row_exp(const float *x, float *y, int64_t n, float mx) {
    float lane[NN_SOFTMAX_LANES] = {0}, sum = 0.0f;
    int64_t k = 0;
    for (; k + NN_SOFTMAX_LANES <= n; k += NN_SOFTMAX_LANES)
        for (int l = 0; l < NN_SOFTMAX_LANES; l++) {
            float d = x[k + l] - mx;
            y[k + l] = d < NN_EXP_MIN ? 0.0f : nn_exp(d);
            lane[l] += y[k + l];
        }
    for (; k < n; k++) {
        float d = x[k] - mx;
        y[k] = d < NN_EXP_MIN ? 0.0f : nn_exp(d);
        sum += y[k];
    }
    for (int l = 0; l < NN_SOFTMAX_LANES; l++)
        sum += lane[l];
    float inv = 1.0f / sum;
    for (k = 0; k < n; k++)
        y[k] *= inv;
}

#endif
