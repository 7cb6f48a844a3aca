/* Scans and linear algebra over one axis or matrix: CumSum and Det. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "op.h"
#include "par.h"

/* ---- CumSum(x, axis): running sums along `axis`.  exclusive leaves the
 * element itself out (the first output is 0); reverse runs from the end. */

typedef struct cumsum_params {
    int64_t exclusive, reverse; /* 0 or 1 */
} cumsum_params;

static nn_status parse_CumSum(nn_parse_ctx *ctx) {
    cumsum_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    nn_status st = nn_attr_int(ctx, "exclusive", 0, &p->exclusive);
    if (st == NN_OK) st = nn_attr_int(ctx, "reverse", 0, &p->reverse);
    p->exclusive = p->exclusive != 0;
    p->reverse = p->reverse != 0;
    return st;
}

static nn_status check_CumSum(const void *params, char *err, size_t err_size) {
    const cumsum_params *p = params;
    if ((p->exclusive == 0 || p->exclusive == 1) && (p->reverse == 0 || p->reverse == 1)) return NN_OK;
    snprintf(err, err_size, "exclusive / reverse must be 0 or 1");
    return NN_ERR_INVALID;
}

/* The axis input resolved against x's rank; NN_DYNAMIC when not known yet. */
static nn_status cumsum_axis(nn_call *c, int64_t *axis) {
    const nn_tensor *a = &c->in[1];
    if (a->dtype != NN_DTYPE_INT32 && a->dtype != NN_DTYPE_INT64)
        return nn_call_error(c, NN_ERR_INVALID, "axis must be INT32 or INT64, got %s", nn_dtype_name(a->dtype));
    if (a->ndim > 1 || nn_shape_elements(a->dims, a->ndim) != 1)
        return nn_call_error(c, NN_ERR_SHAPE, "axis must be a scalar");
    if (!a->data) return NN_DYNAMIC;
    int64_t v = nn_tensor_get_int(a, 0);
    if (!nn_axis_normalize(v, c->in[0].ndim, axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)v, c->in[0].ndim);
    return NN_OK;
}

/* The dtypes CumSum runs on, X(code, C type): ONNX's list but the 16-bit floats. */
#define CUMSUM_DTYPES(X)                                                                                               \
    X(FLOAT, float) X(DOUBLE, double) X(INT32, int32_t) X(INT64, int64_t) X(UINT32, uint32_t) X(UINT64, uint64_t)

static bool cumsum_dtype_ok(nn_dtype t) {
#define CUMSUM_IS(code, T) t == NN_DTYPE_##code ||
    return CUMSUM_DTYPES(CUMSUM_IS) false;
#undef CUMSUM_IS
}

static nn_status infer_CumSum(nn_call *c) {
    nn_dtype t = c->in[0].dtype;
    if (!cumsum_dtype_ok(t))
        return nn_call_error(c, NN_ERR_UNSUPPORTED,
                             "dtype %s not supported (FLOAT, DOUBLE, INT32, INT64, UINT32, UINT64)", nn_dtype_name(t));
    if (c->in[0].ndim == 0) return nn_call_error(c, NN_ERR_SHAPE, "x must have rank >= 1");
    int64_t axis;
    nn_status st = cumsum_axis(c, &axis);
    if (st != NN_OK && st != NN_DYNAMIC) return st; /* the output shape does not depend on the axis */
    nn_tensor_set_shape(&c->out[0], t, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

/* Columns handled together: each step along the axis reads and writes rows
 * of this many contiguous values. */
#define CUMSUM_CHUNK 1024

/* Integer sums wrap (through uint64) instead of overflowing. */
#define CUMSUM_ADD(a, b) _Generic((a), float : (a) + (b), double : (a) + (b), default : (uint64_t)(a) + (uint64_t)(b))

/* Columns [j0, j1) of block o of the [outer, n, inner] view.  Each output row
 * is the previous output row plus one input row; the first is x or 0. */
#define CUMSUM_BODY(T)                                                                                                 \
    {                                                                                                                  \
        const T *x = (const T *)xd + o * n * inner;                                                                    \
        T *y = (T *)yd + o * n * inner;                                                                                \
        for (int64_t s = 0; s < n; s++) {                                                                              \
            int64_t k = p->reverse ? n - 1 - s : s, prev = p->reverse ? k + 1 : k - 1;                                 \
            int64_t src = p->exclusive ? prev : k; /* the input row added at this step */                              \
            for (int64_t j = j0; j < j1; j++) {                                                                        \
                T add = s == 0 && p->exclusive ? (T)0 : x[src * inner + j];                                            \
                y[k * inner + j] = s == 0 ? add : (T)CUMSUM_ADD(y[prev * inner + j], add);                             \
            }                                                                                                          \
        }                                                                                                              \
    }

typedef struct cumsum_job {
    const cumsum_params *p;
    const void *x;
    void *y;
    int64_t n, inner, chunks;
    nn_dtype t;
} cumsum_job;

/* Items [lo, hi) of run_CumSum: item it is block it / chunks, columns chunk it % chunks. */
static void cumsum_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const cumsum_job *jb = ctx;
    const cumsum_params *p = jb->p;
    const void *xd = jb->x;
    void *yd = jb->y;
    int64_t n = jb->n, inner = jb->inner, chunks = jb->chunks;
    for (int64_t it = lo; it < hi; it++) {
        int64_t o = it / chunks, j0 = (it % chunks) * CUMSUM_CHUNK;
        int64_t j1 = j0 + CUMSUM_CHUNK < inner ? j0 + CUMSUM_CHUNK : inner;
        switch (jb->t) {
#define CUMSUM_CASE(code, T)                                                                                           \
    case NN_DTYPE_##code:                                                                                              \
        CUMSUM_BODY(T) break;
            CUMSUM_DTYPES(CUMSUM_CASE)
#undef CUMSUM_CASE
        default: break; /* infer refused it */
        }
    }
}

static nn_status run_CumSum(nn_call *c) {
    const cumsum_params *p = c->params;
    int64_t axis;
    nn_status st = cumsum_axis(c, &axis);
    if (st == NN_DYNAMIC) return nn_call_error(c, NN_ERR_INVALID, "axis has no value at run time");
    if (st != NN_OK) return st;
    const nn_tensor *xt = &c->in[0];
    int64_t outer = nn_shape_elements(xt->dims, (int)axis), n = xt->dims[axis];
    int64_t inner = nn_shape_elements(xt->dims + axis + 1, xt->ndim - (int)axis - 1);
    int64_t chunks = (inner + CUMSUM_CHUNK - 1) / CUMSUM_CHUNK, items = outer * chunks;
    cumsum_job jb = {
        .p = p, .x = xt->data, .y = c->out[0].data, .n = n, .inner = inner, .chunks = chunks, .t = xt->dtype};
    nn_par_for_range(items > 1 && outer * n * inner > 32768 ? c->threads : 1, items, 1, cumsum_range, &jb);
    return NN_OK;
}

const nn_op_desc nn_op_CumSum = {.name = "CumSum",
                                 .min_inputs = 2,
                                 .max_inputs = 2,
                                 .min_outputs = 1,
                                 .max_outputs = 1,
                                 .flags = NN_OPF_ANY_DTYPE, /* infer_CumSum checks the dtype */
                                 .parse = parse_CumSum,
                                 .check = check_CumSum,
                                 .infer = infer_CumSum,
                                 .run = run_CumSum};

/* ---- Det: determinants of the [*, M, M] matrices, by LU factorization with
 * partial pivoting in double (one matrix at a time in the workspace). */

static nn_status infer_Det(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (FLOAT only)", nn_dtype_name(x->dtype));
    if (x->ndim < 2 || x->dims[x->ndim - 1] != x->dims[x->ndim - 2])
        return nn_call_error(c, NN_ERR_SHAPE, "X must be [*, M, M]");
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim - 2, x->dims);
    return NN_OK;
}

static size_t workspace_Det(const nn_call *c) {
    int64_t m = c->in[0].dims[c->in[0].ndim - 1];
    return sizeof(double) * (size_t)(m * m);
}

static double lu_det(double *a, int64_t m) {
    double det = 1.0;
    for (int64_t k = 0; k < m; k++) {
        int64_t piv = k;
        for (int64_t i = k + 1; i < m; i++)
            if (fabs(a[i * m + k]) > fabs(a[piv * m + k])) piv = i;
        if (a[piv * m + k] == 0.0) return 0.0;
        if (piv != k) {
            for (int64_t j = 0; j < m; j++) {
                double t = a[k * m + j];
                a[k * m + j] = a[piv * m + j];
                a[piv * m + j] = t;
            }
            det = -det;
        }
        det *= a[k * m + k];
        for (int64_t i = k + 1; i < m; i++) {
            double f = a[i * m + k] / a[k * m + k];
            for (int64_t j = k + 1; j < m; j++)
                a[i * m + j] -= f * a[k * m + j];
        }
    }
    return det;
}

static nn_status run_Det(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int64_t m = x->dims[x->ndim - 1], batch = nn_shape_elements(x->dims, x->ndim - 2);
    double *a = c->workspace;
    const float *src = x->data;
    float *y = c->out[0].data;
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < m * m; i++)
            a[i] = src[b * m * m + i];
        y[b] = (float)lu_det(a, m);
    }
    return NN_OK;
}

const nn_op_desc nn_op_Det = {.name = "Det",
                              .min_inputs = 1,
                              .max_inputs = 1,
                              .min_outputs = 1,
                              .max_outputs = 1,
                              .infer = infer_Det,
                              .workspace = workspace_Det,
                              .run = run_Det};
