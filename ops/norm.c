/* Normalizations (fp32): BatchNormalization (inference), InstanceNormalization,
 * LayerNormalization, MeanVarianceNormalization (statistics accumulate in
 * double), and LRN (a window across channels). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "op.h"
#include "par.h"
#include "params.h"

static nn_status parse_norm(nn_parse_ctx *ctx) {
    nn_norm_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    nn_status st;
    /* is_test, momentum and consumed_inputs (older BatchNormalization) do not
     * change inference and are not read */
    if ((st = nn_attr_float(ctx, "epsilon", 1e-5f, &p->epsilon)) || (st = nn_attr_int(ctx, "axis", -1, &p->axis)) ||
        (st = nn_attr_int(ctx, "training_mode", 0, &p->training_mode)) ||
        (st = nn_attr_int(ctx, "spatial", 1, &p->spatial)))
        return st;
    ctx->params = p;
    return NN_OK;
}

static nn_status norm_check(const void *params, char *err, size_t err_size) {
    const nn_norm_params *p = params;
    if (!isfinite(p->epsilon) || p->epsilon < 0.0f)
        return nn_check_error(err, err_size, "epsilon %g must be finite and >= 0", (double)p->epsilon);
    if (!nn_check_axis(p->axis)) return nn_check_error(err, err_size, "axis %lld is out of range", (long long)p->axis);
    if ((p->training_mode != 0 && p->training_mode != 1) || (p->spatial != 0 && p->spatial != 1))
        return nn_check_error(err, err_size, "training_mode (%lld) and spatial (%lld) must be 0 or 1",
                              (long long)p->training_mode, (long long)p->spatial);
    return NN_OK;
}

static nn_status check_float_inputs(nn_call *c) {
    for (int i = 0; i < c->n_in; i++)
        if (nn_present(c, i) && c->in[i].dtype != NN_DTYPE_FLOAT)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d: dtype %s not supported (float only)", i,
                                 nn_dtype_name(c->in[i].dtype));
    return NN_OK;
}

/* Inputs first..n_in-1 (when present) must be vectors of `channels` values. */
static nn_status check_channel_vectors(nn_call *c, int first, int64_t channels) {
    for (int i = first; i < c->n_in; i++)
        if (nn_present(c, i) && (c->in[i].ndim != 1 || c->in[i].dims[0] != channels))
            return nn_call_error(c, NN_ERR_SHAPE, "input %d must have shape [%lld]", i, (long long)channels);
    return NN_OK;
}

/* ---- BatchNormalization: y = (x - mean) / sqrt(var + eps) * scale + B per channel */

static nn_status infer_batch_norm(nn_call *c) {
    const nn_norm_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (p->training_mode || c->n_out > 1)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "training mode (running statistics outputs) not supported");
    if (!p->spatial) return nn_call_error(c, NN_ERR_UNSUPPORTED, "spatial=0 not supported");
    nn_status st = check_float_inputs(c);
    if (st != NN_OK) return st;
    if (x->ndim < 2) return nn_call_error(c, NN_ERR_SHAPE, "X must have rank >= 2, got %d", x->ndim);
    if ((st = check_channel_vectors(c, 1, x->dims[1])) != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, x->dims);
    return NN_OK;
}

typedef struct bn_job {
    const nn_norm_params *p;
    const float *scale, *bias, *mean, *var, *src;
    float *dst;
    int64_t channels, n;
} bn_job;

static void bn_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const bn_job *j = ctx;
    int64_t n = j->n;
    for (int64_t pl = lo; pl < hi; pl++) {
        int64_t ch = pl % j->channels;
        float a = (float)(j->scale[ch] / sqrt((double)j->var[ch] + j->p->epsilon));
        float b = (float)(j->bias[ch] - (double)j->mean[ch] * a);
        const float *xp = j->src + pl * n;
        float *yp = j->dst + pl * n;
        for (int64_t i = 0; i < n; i++) yp[i] = xp[i] * a + b;
    }
}

static nn_status run_batch_norm(nn_call *c) {
    const nn_norm_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    const float *scale = c->in[1].data, *bias = c->in[2].data, *mean = c->in[3].data, *var = c->in[4].data;
    int64_t channels = x->dims[1], planes = x->dims[0] * channels;
    int64_t n = nn_shape_elements(x->dims + 2, x->ndim - 2);
    const float *src = x->data;
    float *dst = c->out[0].data;
    bn_job j = {.p = p, .scale = scale, .bias = bias, .mean = mean, .var = var, .src = src, .dst = dst,
                .channels = channels, .n = n};
    nn_par_for_range(planes * n > NN_PAR_MIN ? c->threads : 1, planes, 1, bn_range, &j);
    return NN_OK;
}

/* ---- InstanceNormalization: per (image, channel) plane statistics */

static nn_status infer_instance_norm(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_status st = check_float_inputs(c);
    if (st != NN_OK) return st;
    if (x->ndim < 3) return nn_call_error(c, NN_ERR_SHAPE, "X must have rank >= 3, got %d", x->ndim);
    if ((st = check_channel_vectors(c, 1, x->dims[1])) != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, x->dims);
    return NN_OK;
}

/* Mean and 1/sqrt(var + eps) of n values (population variance, two passes),
 * each sum in IN_LANES running double sums: one chain of dependent adds
 * took 3.3 ms for wav2vec2's 512 planes of 3199 (1 thread, Zen 4), the
 * lanes 0.4 ms. */
#define IN_LANES 16
static double lane_sum_f64(const float *x, int64_t n, double shift, bool square) {
    double acc[IN_LANES] = {0};
    int64_t i = 0;
    for (; i + IN_LANES <= n; i += IN_LANES)
        for (int l = 0; l < IN_LANES; l++) {
            double v = (double)x[i + l] - shift;
            acc[l] += square ? v * v : v;
        }
    double s = 0.0;
    for (; i < n; i++) {
        double v = (double)x[i] - shift;
        s += square ? v * v : v;
    }
    for (int l = 0; l < IN_LANES; l++) s += acc[l];
    return s;
}

static void moments(const float *x, int64_t n, float epsilon, double *mean, double *inv_std) {
    double m = n > 0 ? lane_sum_f64(x, n, 0.0, false) / (double)n : 0.0;
    double var = n > 0 ? lane_sum_f64(x, n, m, true) / (double)n : 0.0;
    *mean = m;
    *inv_std = 1.0 / sqrt(var + epsilon);
}

typedef struct in_job {
    const float *src, *scale, *bias;
    float *dst;
    int64_t channels, n;
    float epsilon;
} in_job;

static void in_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const in_job *j = ctx;
    for (int64_t pl = lo; pl < hi; pl++) {
        int64_t ch = pl % j->channels;
        double mean, inv_std;
        const float *xp = j->src + pl * j->n;
        float *yp = j->dst + pl * j->n;
        moments(xp, j->n, j->epsilon, &mean, &inv_std);
        float a = (float)(j->scale[ch] * inv_std), b = (float)(j->bias[ch] - mean * j->scale[ch] * inv_std);
        for (int64_t i = 0; i < j->n; i++) yp[i] = xp[i] * a + b;
    }
}

static nn_status run_instance_norm(nn_call *c) {
    const nn_norm_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t channels = x->dims[1], planes = x->dims[0] * channels;
    in_job j = {.src = x->data,
                .scale = c->in[1].data,
                .bias = c->in[2].data,
                .dst = c->out[0].data,
                .channels = channels,
                .n = nn_shape_elements(x->dims + 2, x->ndim - 2),
                .epsilon = p->epsilon};
    nn_par_for_range(planes * j.n > NN_PAR_MIN ? c->threads : 1, planes, 1, in_range, &j);
    return NN_OK;
}

/* ---- LayerNormalization: statistics over dims [axis, rank) */

/* Scale / B broadcast to dims[axis:]: stride 1 when it holds one value per
 * normalized element, 0 when it is a single value. */
static nn_status norm_operand_stride(nn_call *c, int i, const nn_tensor *x, int axis, int64_t inner,
                                     int64_t *stride) {
    const nn_tensor *t = &c->in[i];
    int tail = x->ndim - axis;
    bool fits = t->ndim <= tail;
    for (int d = 0; fits && d < t->ndim; d++) {
        int64_t td = t->dims[t->ndim - 1 - d], xd = x->dims[x->ndim - 1 - d];
        fits = td == xd || td == 1;
    }
    int64_t count = nn_shape_elements(t->dims, t->ndim);
    if (!fits) return nn_call_error(c, NN_ERR_SHAPE, "input %d does not broadcast to the normalized dims", i);
    if (count != inner && count != 1)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d: partial broadcast over the normalized dims", i);
    *stride = count == inner ? 1 : 0;
    return NN_OK;
}

static nn_status layer_norm_axis(nn_call *c, int *axis) {
    const nn_norm_params *p = c->params;
    int64_t a;
    if (!nn_axis_normalize(p->axis, c->in[0].ndim, &a))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis,
                             c->in[0].ndim);
    *axis = (int)a;
    return NN_OK;
}

static nn_status infer_layer_norm(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int axis;
    int64_t inner, stride;
    nn_status st = check_float_inputs(c);
    if (st != NN_OK || (st = layer_norm_axis(c, &axis)) != NN_OK) return st;
    inner = nn_shape_elements(x->dims + axis, x->ndim - axis);
    for (int i = 1; i < c->n_in; i++)
        if (nn_present(c, i) && (st = norm_operand_stride(c, i, x, axis, inner, &stride)) != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, x->dims);
    int64_t stat_dims[NN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) stat_dims[d] = d < axis ? x->dims[d] : 1;
    for (int o = 1; o < c->n_out; o++) nn_tensor_set_shape(&c->out[o], NN_DTYPE_FLOAT, x->ndim, stat_dims);
    return NN_OK;
}

/* Sum of n floats in LN_LANES running sums, a loop the compiler vectorizes;
 * with a few thousand values the error stays near float's epsilon. */
#define LN_LANES 16
static float lane_sum(const float *x, int64_t n, float shift, bool square) {
    float acc[LN_LANES] = {0};
    int64_t i = 0;
    for (; i + LN_LANES <= n; i += LN_LANES)
        for (int l = 0; l < LN_LANES; l++) {
            float v = x[i + l] - shift;
            acc[l] += square ? v * v : v;
        }
    float s = 0.0f;
    for (; i < n; i++) {
        float v = x[i] - shift;
        s += square ? v * v : v;
    }
    for (int l = 0; l < LN_LANES; l++) s += acc[l];
    return s;
}

/* One row: mean, then the variance around it (two passes, as the exported
 * decomposition computes it), then y = (x - mean) / std * scale + bias. */
static void layer_norm_row(const float *x, float *y, int64_t n, float epsilon, const float *scale,
                           int64_t scale_stride, const float *bias, int64_t bias_stride, float *mean_out,
                           float *inv_out) {
    float mean = n > 0 ? lane_sum(x, n, 0.0f, false) / (float)n : 0.0f;
    float var = n > 0 ? lane_sum(x, n, mean, true) / (float)n : 0.0f;
    float inv = 1.0f / sqrtf(var + epsilon);
    if (scale_stride && bias && bias_stride)
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * inv * scale[i] + bias[i];
    else
        for (int64_t i = 0; i < n; i++) {
            float v = (x[i] - mean) * inv * scale[i * scale_stride];
            y[i] = bias ? v + bias[i * bias_stride] : v;
        }
    if (mean_out) *mean_out = mean;
    if (inv_out) *inv_out = inv;
}

typedef struct ln_job {
    const float *src;
    float *dst;
    const float *scale, *bias;
    float *mean_out, *inv_out;
    int64_t inner, scale_stride, bias_stride;
    float epsilon;
} ln_job;

static void ln_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const ln_job *j = ctx;
    for (int64_t r = lo; r < hi; r++)
        layer_norm_row(j->src + r * j->inner, j->dst + r * j->inner, j->inner, j->epsilon, j->scale, j->scale_stride,
                       j->bias, j->bias_stride, j->mean_out ? j->mean_out + r : NULL,
                       j->inv_out ? j->inv_out + r : NULL);
}

static nn_status run_layer_norm(nn_call *c) {
    const nn_norm_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int axis;
    int64_t scale_stride, bias_stride = 0;
    nn_status st = layer_norm_axis(c, &axis);
    if (st != NN_OK) return st;
    int64_t inner = nn_shape_elements(x->dims + axis, x->ndim - axis);
    int64_t rows = nn_shape_elements(x->dims, axis);
    if ((st = norm_operand_stride(c, 1, x, axis, inner, &scale_stride)) != NN_OK ||
        (nn_present(c, 2) && (st = norm_operand_stride(c, 2, x, axis, inner, &bias_stride)) != NN_OK))
        return st;
    const float *src = x->data, *scale = c->in[1].data;
    const float *bias = nn_present(c, 2) ? c->in[2].data : NULL;
    float *dst = c->out[0].data;
    float *mean_out = c->n_out > 1 ? c->out[1].data : NULL, *inv_out = c->n_out > 2 ? c->out[2].data : NULL;
    ln_job j = {.src = src, .dst = dst, .scale = scale, .bias = bias, .mean_out = mean_out, .inv_out = inv_out,
                .inner = inner, .scale_stride = scale_stride, .bias_stride = bias_stride, .epsilon = p->epsilon};
    nn_par_for_range(rows * inner > NN_PAR_MIN && rows > 1 ? c->threads : 1, rows, 1, ln_range, &j);
    return NN_OK;
}

/* BatchNormalization maps each element on its own (per-channel constants): safe in place. */
const nn_op_desc nn_op_BatchNormalization = {.name = "BatchNormalization", .min_inputs = 5, .max_inputs = 5,
                                             .min_outputs = 1, .max_outputs = 5, .flags = NN_OPF_ELEMENTWISE,
                                             .parse = parse_norm, .check = norm_check, .infer = infer_batch_norm,
                                             .run = run_batch_norm};
const nn_op_desc nn_op_InstanceNormalization = {.name = "InstanceNormalization", .min_inputs = 3, .max_inputs = 3,
                                                .min_outputs = 1, .max_outputs = 1, .parse = parse_norm,
                                                .check = norm_check, .infer = infer_instance_norm, .run = run_instance_norm};
const nn_op_desc nn_op_LayerNormalization = {.name = "LayerNormalization", .min_inputs = 2, .max_inputs = 3,
                                             .min_outputs = 1, .max_outputs = 3, .parse = parse_norm,
                                             .check = norm_check, .infer = infer_layer_norm, .run = run_layer_norm};

/* ---- LRN */

typedef struct lrn_params {
    int64_t size;
    float alpha, beta, bias;
} lrn_params;

static nn_status parse_lrn(nn_parse_ctx *ctx) {
    lrn_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    nn_status st;
    if ((st = nn_attr_int(ctx, "size", 0, &p->size)) || (st = nn_attr_float(ctx, "alpha", 1e-4f, &p->alpha)) ||
        (st = nn_attr_float(ctx, "beta", 0.75f, &p->beta)) || (st = nn_attr_float(ctx, "bias", 1.0f, &p->bias)))
        return st;
    ctx->params = p;
    return NN_OK;
}

static nn_status lrn_check(const void *params, char *err, size_t err_size) {
    const lrn_params *p = params;
    if (p->size < 1 || p->size > NN_ATTR_EXTENT_MAX)
        return nn_check_error(err, err_size, "size must be >= 1, got %lld", (long long)p->size);
    return NN_OK;
}

static nn_status infer_lrn(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (float only)", nn_dtype_name(x->dtype));
    if (x->ndim < 2) return nn_call_error(c, NN_ERR_SHAPE, "input must have rank >= 2, got %d", x->ndim);
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, x->dims);
    return NN_OK;
}

typedef struct lrn_job {
    const lrn_params *p;
    const float *src;
    float *dst;
    int64_t channels, n;
    float scale;
} lrn_job;

/* The output plane first holds the channel window's sum of squares. */
static void lrn_range(void *ctx, int64_t plo, int64_t phi, int seat) {
    (void)seat;
    const lrn_job *j = ctx;
    const lrn_params *p = j->p;
    const float *src = j->src;
    float *dst = j->dst, scale = j->scale;
    int64_t channels = j->channels, n = j->n;
    for (int64_t pl = plo; pl < phi; pl++) {
        int64_t ch = pl % channels, img = pl - ch;
        int64_t lo = ch - (p->size - 1) / 2, hi = ch + p->size / 2;
        if (lo < 0) lo = 0;
        if (hi > channels - 1) hi = channels - 1;
        float *yp = dst + pl * n;
        memset(yp, 0, sizeof(float) * (size_t)n);
        for (int64_t k = lo; k <= hi; k++) {
            const float *xk = src + (img + k) * n;
            for (int64_t i = 0; i < n; i++)
                yp[i] += xk[i] * xk[i];
        }
        const float *xp = src + pl * n;
        for (int64_t i = 0; i < n; i++)
            yp[i] = xp[i] / powf(p->bias + scale * yp[i], p->beta);
    }
}

static nn_status run_lrn(nn_call *c) {
    const lrn_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t channels = x->dims[1], planes = x->dims[0] * channels;
    lrn_job j = {.p = p,
                 .src = x->data,
                 .dst = c->out[0].data,
                 .channels = channels,
                 .n = nn_shape_elements(x->dims + 2, x->ndim - 2),
                 .scale = p->alpha / (float)p->size};
    nn_par_for_range(planes * j.n * p->size > NN_PAR_MIN ? c->threads : 1, planes, 1, lrn_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_LRN = {.name = "LRN",
                              .min_inputs = 1,
                              .max_inputs = 1,
                              .min_outputs = 1,
                              .max_outputs = 1,
                              .parse = parse_lrn,
                              .check = lrn_check,
                              .infer = infer_lrn,
                              .run = run_lrn};

/* ---- MeanVarianceNormalization: Y = (X - E[X]) / (sqrt(Var[X]) + 1e-9),
 * the statistics taken over `axes` (default 0, 2, 3) for each index of the
 * other dims; the 1e-9 is the epsilon of ONNX's function body. */

typedef struct mvn_params {
    int n_axes;
    int64_t axes[NN_MAX_DIMS];
} mvn_params;

static nn_status parse_mvn(nn_parse_ctx *ctx) {
    mvn_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    nn_status st = nn_attr_ints(ctx, "axes", p->axes, NN_MAX_DIMS, &p->n_axes);
    if (st == NN_OK && p->n_axes < 0) {
        p->n_axes = 3;
        p->axes[0] = 0, p->axes[1] = 2, p->axes[2] = 3;
    }
    return st;
}

static nn_status check_mvn(const void *params, char *err, size_t err_size) {
    const mvn_params *p = params;
    if (p->n_axes >= 0 && p->n_axes <= NN_MAX_DIMS) return NN_OK;
    snprintf(err, err_size, "axes: %d values (0 to %d)", p->n_axes, NN_MAX_DIMS);
    return NN_ERR_INVALID;
}

/* Per dim: its stride in the array of statistics (0 for a normalized dim),
 * and the number of statistics. */
static nn_status mvn_layout(const nn_call *c, int64_t stat_stride[NN_MAX_DIMS], int64_t *count) {
    const mvn_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    bool reduced[NN_MAX_DIMS] = {false};
    for (int i = 0; i < p->n_axes; i++) {
        int64_t a;
        if (!nn_axis_normalize(p->axes[i], x->ndim, &a))
            return nn_call_error(c, NN_ERR_INVALID, "axes: %lld out of range for rank %d", (long long)p->axes[i],
                                 x->ndim);
        if (reduced[a]) return nn_call_error(c, NN_ERR_INVALID, "axes: %lld given twice", (long long)p->axes[i]);
        reduced[a] = true;
    }
    int64_t s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        stat_stride[d] = reduced[d] ? 0 : s;
        if (!reduced[d]) s *= x->dims[d];
    }
    *count = s;
    return NN_OK;
}

static nn_status infer_mvn(nn_call *c) {
    int64_t stride[NN_MAX_DIMS], count;
    nn_status st = check_float_inputs(c);
    if (st == NN_OK) st = mvn_layout(c, stride, &count);
    if (st == NN_OK) nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, c->in[0].ndim, c->in[0].dims);
    return st;
}

/* two doubles per statistic: the mean, then the divisor */
static size_t workspace_mvn(const nn_call *c) {
    int64_t stride[NN_MAX_DIMS], count;
    return mvn_layout(c, stride, &count) == NN_OK ? sizeof(double) * 2 * (size_t)count : 0;
}

/* pass 0: sum into acc; 1: squared deviations from mean into acc; 2: write y */
static void mvn_pass(const nn_tensor *x, const int64_t *stride, int pass, const double *mean, double *acc,
                     float *y) {
    const float *src = x->data;
    int64_t n = nn_tensor_elements(x), idx[NN_MAX_DIMS] = {0}, k = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = src[i];
        if (pass == 0) acc[k] += v;
        else if (pass == 1) acc[k] += (v - mean[k]) * (v - mean[k]);
        else y[i] = (float)((v - mean[k]) / acc[k]);
        for (int d = x->ndim - 1; d >= 0; d--) { /* odometer over x, k following */
            k += stride[d];
            if (++idx[d] < x->dims[d]) break;
            k -= stride[d] * idx[d];
            idx[d] = 0;
        }
    }
}

static nn_status run_mvn(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int64_t stride[NN_MAX_DIMS], count;
    nn_status st = mvn_layout(c, stride, &count);
    if (st != NN_OK) return st;
    double *mean = c->workspace, *acc = mean + count;
    int64_t per = count > 0 ? nn_tensor_elements(x) / count : 0; /* values behind each statistic */
    memset(mean, 0, sizeof(double) * 2 * (size_t)count);
    mvn_pass(x, stride, 0, NULL, mean, NULL);
    for (int64_t k = 0; k < count; k++) mean[k] = per > 0 ? mean[k] / (double)per : 0.0;
    mvn_pass(x, stride, 1, mean, acc, NULL);
    for (int64_t k = 0; k < count; k++) acc[k] = sqrt(per > 0 ? acc[k] / (double)per : 0.0) + 1e-9;
    mvn_pass(x, stride, 2, mean, acc, c->out[0].data);
    return NN_OK;
}

const nn_op_desc nn_op_MeanVarianceNormalization = {
    .name = "MeanVarianceNormalization", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .parse = parse_mvn, .check = check_mvn, .infer = infer_mvn, .workspace = workspace_mvn, .run = run_mvn};
