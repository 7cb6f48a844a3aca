/* Softmax, LogSoftmax and Hardmax.
 *
 * Before opset 13 the input is viewed as a 2-D matrix split at `axis`
 * (default 1) and each row of the flattened trailing block is normalized;
 * from opset 13 on, only the single dimension `axis` (default -1) is.  Both
 * reduce to the same kernel over an [outer, n, inner] view: the old form is
 * the new one with inner = 1. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "act.h"
#include "geom.h"
#include "op.h"
#include "par.h"
#include "params.h"
#include "softmax_row.h"


static nn_status parse_softmax(nn_parse_ctx *ctx) {
    softmax_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    p->flatten = ctx->opset < 13;
    nn_status st = nn_attr_int(ctx, "axis", p->flatten ? 1 : -1, &p->axis);
    ctx->params = p;
    return st;
}

static nn_status softmax_check(const void *params, char *err, size_t err_size) {
    const softmax_params *p = params;
    if (!nn_check_bool(&p->flatten)) return nn_check_error(err, err_size, "flatten is not a boolean");
    if (!nn_check_axis(p->axis)) return nn_check_error(err, err_size, "axis %lld is out of range", (long long)p->axis);
    return NN_OK;
}

/* The [outer, n, inner] view of the input around the normalized axis. */
static nn_status softmax_view(nn_call *c, int64_t *outer, int64_t *n, int64_t *inner) {
    const softmax_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t axis;
    /* a scalar is normalized as a one-element vector */
    int rank = x->ndim > 0 ? x->ndim : 1;
    if (!nn_axis_normalize(p->axis, rank, &axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis,
                             x->ndim);
    if (x->ndim == 0) {
        *outer = *n = *inner = 1;
        return NN_OK;
    }
    *outer = nn_shape_elements(x->dims, (int)axis);
    if (p->flatten) {
        *n = nn_shape_elements(x->dims + axis, x->ndim - (int)axis);
        *inner = 1;
    } else {
        *n = x->dims[axis];
        *inner = nn_shape_elements(x->dims + axis + 1, x->ndim - (int)axis - 1);
    }
    return NN_OK;
}

nn_status nn_softmax_view(nn_call *c, int64_t *outer, int64_t *n, int64_t *inner) {
    return softmax_view(c, outer, n, inner);
}

static nn_status infer_softmax(nn_call *c) {
    if (c->in[0].dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (FLOAT only)",
                             nn_dtype_name(c->in[0].dtype));
    int64_t outer, n, inner;
    nn_status st = softmax_view(c, &outer, &n, &inner);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

/* Columns handled together when the normalized axis is strided: enough to
 * walk each row of the block contiguously, small enough for the stack. */
#define SOFTMAX_CHUNK 256

/* One row, contiguous (inner == 1).  Subtracting the maximum keeps exp()
 * from overflowing; log-softmax then is x - max - log(sum).  Softmax itself
 * takes nn_exp (a few ulp, branch-free) and sums in lanes, so that the
 * rows of attention scores vectorize (a masked score, far below the
 * maximum, still gives exactly 0). */
static void softmax_row(const float *x, float *y, int64_t n, bool log_form) {
    if (!log_form) {
        nn_softmax_row_exp(x, y, n, nn_softmax_row_max(x, n));
        return;
    }
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t k = 0; k < n; k++) mx = x[k] > mx ? x[k] : mx;
    for (int64_t k = 0; k < n; k++) sum += expf(x[k] - mx);
    float shift = mx + logf(sum);
    for (int64_t k = 0; k < n; k++) y[k] = x[k] - shift;
}

/* Columns [j0, j0 + w) of one [n, inner] block: the same steps as
 * softmax_row, vectorized across columns so every row read is contiguous. */
static void softmax_cols(const float *x, float *y, int64_t n, int64_t inner, int w, bool log_form) {
    float mx[SOFTMAX_CHUNK], sum[SOFTMAX_CHUNK];
    for (int j = 0; j < w; j++) {
        mx[j] = -INFINITY;
        sum[j] = 0.0f;
    }
    for (int64_t k = 0; k < n; k++) {
        const float *xr = x + k * inner;
        for (int j = 0; j < w; j++) mx[j] = xr[j] > mx[j] ? xr[j] : mx[j];
    }
    for (int64_t k = 0; k < n; k++) {
        const float *xr = x + k * inner;
        float *yr = y + k * inner;
        for (int j = 0; j < w; j++) {
            float e = expf(xr[j] - mx[j]);
            if (!log_form) yr[j] = e;
            sum[j] += e;
        }
    }
    for (int j = 0; j < w; j++) sum[j] = log_form ? mx[j] + logf(sum[j]) : 1.0f / sum[j];
    for (int64_t k = 0; k < n; k++) {
        const float *xr = x + k * inner;
        float *yr = y + k * inner;
        if (log_form)
            for (int j = 0; j < w; j++) yr[j] = xr[j] - sum[j];
        else
            for (int j = 0; j < w; j++) yr[j] *= sum[j];
    }
}

typedef struct softmax_job {
    const float *x;
    float *y;
    int64_t n, inner, chunks;
    bool log_form;
} softmax_job;

static void softmax_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const softmax_job *j = ctx;
    int64_t n = j->n, inner = j->inner, chunks = j->chunks;
    for (int64_t it = lo; it < hi; it++) {
        int64_t o = it / chunks, j0 = (it % chunks) * SOFTMAX_CHUNK;
        const float *xb = j->x + o * n * inner + j0;
        float *yb = j->y + o * n * inner + j0;
        if (inner == 1) {
            softmax_row(xb, yb, n, j->log_form);
        } else {
            int w = (int)(inner - j0 < SOFTMAX_CHUNK ? inner - j0 : SOFTMAX_CHUNK);
            softmax_cols(xb, yb, n, inner, w, j->log_form);
        }
    }
}

static nn_status run_common(nn_call *c, bool log_form) {
    int64_t outer, n, inner;
    nn_status st = softmax_view(c, &outer, &n, &inner);
    if (st != NN_OK) return st;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    if (n == 0) return NN_OK;
    int64_t chunks = (inner + SOFTMAX_CHUNK - 1) / SOFTMAX_CHUNK;
    int64_t items = outer * chunks;
    softmax_job j = {.x = x, .y = y, .n = n, .inner = inner, .chunks = chunks, .log_form = log_form};
    nn_par_for_range(outer * n * inner > 16384 ? c->threads : 1, items, 1, softmax_range, &j);
    return NN_OK;
}

static nn_status run_softmax(nn_call *c) { return run_common(c, false); }
static nn_status run_log_softmax(nn_call *c) { return run_common(c, true); }

const nn_op_desc nn_op_Softmax = {.name = "Softmax",
                                  .min_inputs = 1,
                                  .max_inputs = 1,
                                  .min_outputs = 1,
                                  .max_outputs = 1,
                                  .parse = parse_softmax,
                                  .check = softmax_check,
                                  .infer = infer_softmax,
                                  .run = run_softmax};
const nn_op_desc nn_op_LogSoftmax = {.name = "LogSoftmax",
                                     .min_inputs = 1,
                                     .max_inputs = 1,
                                     .min_outputs = 1,
                                     .max_outputs = 1,
                                     .parse = parse_softmax,
                                     .check = softmax_check,
                                     .infer = infer_softmax,
                                     .run = run_log_softmax};

/* ---- Hardmax: 1 at the first maximum along the axis, 0 elsewhere; the
 * same [outer, n, inner] view and opset rule as Softmax (flattened before
 * 13, one axis since).  A NaN counts as the maximum, as numpy's argmax
 * (the reference) takes it: the first NaN of a row is marked. */

static nn_status check_Hardmax(const void *params, char *err, size_t err_size) {
    const softmax_params *p = params;
    uint8_t flatten;
    memcpy(&flatten, &p->flatten, 1); /* a bool read back from the cache may hold any byte */
    if (flatten > 1) {
        snprintf(err, err_size, "flatten flag must be 0 or 1, got %u", flatten);
        return NN_ERR_INVALID;
    }
    if (p->axis < -NN_MAX_DIMS || p->axis >= NN_MAX_DIMS) {
        snprintf(err, err_size, "axis %lld out of range", (long long)p->axis);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

typedef struct hardmax_job {
    const float *x;
    float *y;
    int64_t n, inner;
} hardmax_job;

static void hardmax_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const hardmax_job *hj = ctx;
    const float *x = hj->x;
    float *y = hj->y;
    int64_t n = hj->n, inner = hj->inner;
    for (int64_t it = lo; it < hi; it++) {
        int64_t o = it / inner, j = it % inner;
        const float *xr = x + o * n * inner + j;
        int64_t best = 0;
        for (int64_t k = 1; k < n; k++) {
            float b = xr[best * inner], v = xr[k * inner];
            if (b == b && (v > b || v != v)) best = k;
        }
        y[o * n * inner + best * inner + j] = 1.0f;
    }
}

static nn_status run_hardmax(nn_call *c) {
    int64_t outer, n, inner;
    nn_status st = softmax_view(c, &outer, &n, &inner);
    if (st != NN_OK) return st;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    int64_t total = outer * n * inner;
    memset(y, 0, sizeof(float) * (size_t)total);
    if (n == 0) return NN_OK;
    hardmax_job j = {.x = x, .y = y, .n = n, .inner = inner};
    /* each item scans n values: a task gets at least ~4096 of them */
    nn_par_for_range(total > 16384 ? c->threads : 1, outer * inner, 4096 / n + 1, hardmax_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_Hardmax = {.name = "Hardmax", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
                                  .max_outputs = 1, .parse = parse_softmax, .check = check_Hardmax,
                                  .infer = infer_softmax, .run = run_hardmax};
