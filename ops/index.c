/* Ops that compute positions or select by them: NonZero, Compress, TopK,
 * Trilu, OneHot, EyeLike, ReverseSequence.
 *
 * NonZero's and Compress's output sizes depend on their input's values:
 * infer counts them when the values are known (at run time, or for
 * constants) and says NN_DYNAMIC otherwise. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "op.h"

/* Whether element i of t is not zero (any dtype the engine holds). */
static bool nonzero_at(const nn_tensor *t, int64_t i) {
    switch (t->dtype) {
    case NN_DTYPE_FLOAT: return ((const float *)t->data)[i] != 0.0f;
    case NN_DTYPE_INT64: return ((const int64_t *)t->data)[i] != 0;
    case NN_DTYPE_INT32: return ((const int32_t *)t->data)[i] != 0;
    default: return ((const uint8_t *)t->data)[i] != 0; /* INT8, UINT8, BOOL: one byte */
    }
}

static nn_status check_dtype(nn_call *c, const nn_tensor *t) {
    if (!nn_dtype_size(t->dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(t->dtype));
    return NN_OK;
}

/* ---- NonZero: [rank, count] int64 coordinates, in row-major order */

static nn_status infer_nonzero(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    int64_t n = nn_tensor_elements(x), count = 0;
    if (n > 0 && !x->data) return NN_DYNAMIC;
    for (int64_t i = 0; i < n; i++) count += nonzero_at(x, i);
    /* a scalar reads as one element of a 1-D tensor (numpy's nonzero) */
    int64_t dims[2] = {x->ndim ? x->ndim : 1, count};
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_INT64, 2, dims);
    return NN_OK;
}

static nn_status run_nonzero(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int64_t n = nn_tensor_elements(x), count = c->out[0].dims[1], w = 0;
    int64_t *y = c->out[0].data;
    for (int64_t i = 0; i < n; i++) {
        if (!nonzero_at(x, i)) continue;
        if (w == count) return nn_call_error(c, NN_ERR_INTERNAL, "more non-zero elements than inferred");
        int64_t q = i;
        for (int k = x->ndim - 1; k >= 0; k--) {
            y[k * count + w] = q % x->dims[k];
            q /= x->dims[k];
        }
        if (!x->ndim) y[w] = 0;
        w++;
    }
    if (w != count) return nn_call_error(c, NN_ERR_INTERNAL, "fewer non-zero elements than inferred");
    return NN_OK;
}

const nn_op_desc nn_op_NonZero = {.name = "NonZero", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
                                  .max_outputs = 1, .infer = infer_nonzero, .run = run_nonzero};

/* ---- Compress: the slices along axis (or the flattened elements) whose
 *      condition is true; a condition shorter than the axis leaves the rest
 *      out */

typedef struct compress_params {
    int64_t axis;
    int32_t has_axis;
} compress_params;

static nn_status parse_compress(nn_parse_ctx *ctx) {
    compress_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->has_axis = nn_attr_find(ctx, "axis") != NULL;
    return nn_attr_int(ctx, "axis", 0, &p->axis);
}

static nn_status check_compress(const void *params, char *err, size_t err_size) {
    const compress_params *p = params;
    if (p->axis < -NN_MAX_DIMS || p->axis >= NN_MAX_DIMS || (p->has_axis != 0 && p->has_axis != 1)) {
        snprintf(err, err_size, "axis %lld out of range", (long long)p->axis);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

/* Geometry: outer x len x inner with the axis of len in the middle. */
static nn_status compress_geometry(nn_call *c, int64_t *axis, int64_t *outer, int64_t *len, int64_t *inner) {
    const compress_params *p = c->params;
    const nn_tensor *x = &c->in[0], *cond = &c->in[1];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    if (cond->dtype != NN_DTYPE_BOOL || cond->ndim != 1)
        return nn_call_error(c, NN_ERR_INVALID, "condition must be a 1-D bool tensor");
    if (p->has_axis) {
        if (!nn_axis_normalize(p->axis, x->ndim, axis))
            return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis, x->ndim);
        *outer = nn_shape_elements(x->dims, (int)*axis);
        *len = x->dims[*axis];
        *inner = nn_shape_elements(x->dims + *axis + 1, x->ndim - (int)*axis - 1);
    } else {
        *axis = -1;
        *outer = *inner = 1;
        *len = nn_tensor_elements(x);
    }
    if (cond->dims[0] > *len)
        return nn_call_error(c, NN_ERR_SHAPE, "condition has %lld values, the axis %lld", (long long)cond->dims[0],
                             (long long)*len);
    return NN_OK;
}

static nn_status infer_compress(nn_call *c) {
    const nn_tensor *x = &c->in[0], *cond = &c->in[1];
    int64_t axis, outer, len, inner, kept = 0;
    nn_status st = compress_geometry(c, &axis, &outer, &len, &inner);
    if (st != NN_OK) return st;
    if (cond->dims[0] > 0 && !cond->data) return NN_DYNAMIC;
    for (int64_t i = 0; i < cond->dims[0]; i++) kept += ((const uint8_t *)cond->data)[i] != 0;
    nn_tensor *y = &c->out[0];
    if (axis < 0) {
        nn_tensor_set_shape(y, x->dtype, 1, &kept);
    } else {
        nn_tensor_set_shape(y, x->dtype, x->ndim, x->dims);
        y->dims[axis] = kept;
    }
    return NN_OK;
}

static nn_status run_compress(nn_call *c) {
    const nn_tensor *cond = &c->in[1];
    int64_t axis, outer, len, inner;
    compress_geometry(c, &axis, &outer, &len, &inner);
    size_t row = (size_t)inner * nn_dtype_size(c->in[0].dtype);
    const char *src = c->in[0].data;
    const uint8_t *keep = cond->data;
    char *dst = c->out[0].data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < cond->dims[0]; i++)
            if (keep[i]) {
                memcpy(dst, src + (size_t)(o * len + i) * row, row);
                dst += row;
            }
    return NN_OK;
}

const nn_op_desc nn_op_Compress = {.name = "Compress", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
                                   .max_outputs = 1, .parse = parse_compress, .check = check_compress,
                                   .infer = infer_compress, .run = run_compress};

/* ---- TopK: the k largest (or smallest) along axis, with their indices;
 *      equal values keep the lower index first, as onnxruntime does */

typedef struct topk_params {
    int64_t axis, k; /* k: the attribute of opset 1 (-1 from opset 10, where it is input 1) */
    int32_t largest, sorted;
} topk_params;

static nn_status parse_topk(nn_parse_ctx *ctx) {
    topk_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t largest, sorted;
    nn_status st = nn_attr_int(ctx, "axis", -1, &p->axis);
    if (st == NN_OK) st = nn_attr_int(ctx, "k", -1, &p->k);
    if (st == NN_OK) st = nn_attr_int(ctx, "largest", 1, &largest);
    if (st == NN_OK) st = nn_attr_int(ctx, "sorted", 1, &sorted);
    if (st != NN_OK) return st;
    if (ctx->opset < 10 && p->k < 0) return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'k' is required (opset < 10)");
    if (ctx->opset >= 10) p->k = -1;
    p->largest = largest != 0;
    p->sorted = sorted != 0; /* unsorted may come in any order: sorted is one */
    return NN_OK;
}

static nn_status check_topk(const void *params, char *err, size_t err_size) {
    const topk_params *p = params;
    if (p->axis < -NN_MAX_DIMS || p->axis >= NN_MAX_DIMS || p->k < -1 || (p->largest & ~1) || (p->sorted & ~1)) {
        snprintf(err, err_size, "axis %lld, k %lld, largest %d or sorted %d out of range", (long long)p->axis,
                 (long long)p->k, (int)p->largest, (int)p->sorted);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

static nn_status topk_k(nn_call *c, int64_t *axis, int64_t *k) {
    const topk_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT && x->dtype != NN_DTYPE_INT64 && x->dtype != NN_DTYPE_INT32 &&
        x->dtype != NN_DTYPE_INT8 && x->dtype != NN_DTYPE_UINT8)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(x->dtype));
    if (!nn_axis_normalize(p->axis, x->ndim, axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis, x->ndim);
    *k = p->k;
    if (p->k < 0) {
        if (!nn_present(c, 1)) return nn_call_error(c, NN_ERR_INVALID, "input K is required");
        int n;
        nn_status st = nn_input_ints(c, 1, "K", k, 1, &n);
        if (st != NN_OK) return st;
        if (n != 1) return nn_call_error(c, NN_ERR_SHAPE, "K must hold one value, got %d", n);
    }
    if (*k < 0 || *k > x->dims[*axis])
        return nn_call_error(c, NN_ERR_INVALID, "K = %lld out of range for axis %lld of size %lld", (long long)*k,
                             (long long)*axis, (long long)x->dims[*axis]);
    return NN_OK;
}

static nn_status infer_topk(nn_call *c) {
    int64_t axis, k;
    nn_status st = topk_k(c, &axis, &k);
    if (st != NN_OK) return st;
    const nn_tensor *x = &c->in[0];
    nn_tensor_set_shape(&c->out[0], x->dtype, x->ndim, x->dims);
    c->out[0].dims[axis] = k;
    nn_tensor_set_shape(&c->out[1], NN_DTYPE_INT64, x->ndim, x->dims);
    c->out[1].dims[axis] = k;
    return NN_OK;
}

static size_t workspace_topk(const nn_call *c) {
    int64_t axis;
    const topk_params *p = c->params;
    if (!nn_axis_normalize(p->axis, c->in[0].ndim, &axis)) return 0;
    return (size_t)c->threads * (size_t)c->in[0].dims[axis] * sizeof(int64_t);
}

/* Element of x as a double: exact for every value of the 32-bit and
 * smaller dtypes; int64 compares through its own path. */
static double elem_double(const nn_tensor *x, int64_t i) {
    switch (x->dtype) {
    case NN_DTYPE_FLOAT: return ((const float *)x->data)[i];
    case NN_DTYPE_INT32: return ((const int32_t *)x->data)[i];
    case NN_DTYPE_INT8: return ((const int8_t *)x->data)[i];
    default: return ((const uint8_t *)x->data)[i];
    }
}

/* -1, 0, 1 as element a of x is below, equal to or above element b; NaN
 * ranks above every number (numpy's sort order). */
static int elem_cmp(const nn_tensor *x, int64_t a, int64_t b) {
    if (x->dtype == NN_DTYPE_INT64) {
        int64_t va = ((const int64_t *)x->data)[a], vb = ((const int64_t *)x->data)[b];
        return (va > vb) - (va < vb);
    }
    double va = elem_double(x, a), vb = elem_double(x, b);
    if (isnan(va) || isnan(vb)) return isnan(va) - isnan(vb);
    return (va > vb) - (va < vb);
}

/* Whether element a (flat offset) ranks ahead of b in TopK's order;
 * positions along the axis break ties, lower first. */
static bool topk_ahead(const nn_tensor *x, bool largest, int64_t base, int64_t stride, int64_t a, int64_t b) {
    int cmp = elem_cmp(x, base + a * stride, base + b * stride);
    if (cmp) return largest ? cmp > 0 : cmp < 0;
    return a < b;
}

static nn_status run_topk(nn_call *c) {
    const topk_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t axis, k;
    nn_status st = topk_k(c, &axis, &k);
    if (st != NN_OK) return st;
    int64_t len = x->dims[axis], inner = nn_shape_elements(x->dims + axis + 1, x->ndim - (int)axis - 1);
    int64_t slices = nn_shape_elements(x->dims, (int)axis) * inner;
    size_t esz = nn_dtype_size(x->dtype);
    if (k == 0 || slices == 0) return NN_OK;
    bool largest = p->largest;
#pragma omp parallel for num_threads(c->threads) if (slices > 1 && slices * len > 4096)
    for (int64_t s = 0; s < slices; s++) {
        int64_t *heap = (int64_t *)c->workspace + (size_t)omp_get_thread_num() * (size_t)len;
        int64_t o = s / inner, i = s % inner, base = o * len * inner + i, n = 0;
        /* a heap of the best k so far with the last-ranked on top */
        for (int64_t j = 0; j < len; j++) {
            if (n == k && !topk_ahead(x, largest, base, inner, j, heap[0])) continue;
            int64_t at;
            if (n < k) { /* sift up */
                at = n++;
                while (at > 0 && topk_ahead(x, largest, base, inner, heap[(at - 1) / 2], j)) {
                    heap[at] = heap[(at - 1) / 2];
                    at = (at - 1) / 2;
                }
            } else { /* replace the top, sift down */
                at = 0;
                for (;;) {
                    int64_t l = 2 * at + 1, r = l + 1, worst = at;
                    int64_t wv = j;
                    if (l < n && topk_ahead(x, largest, base, inner, wv, heap[l])) worst = l, wv = heap[l];
                    if (r < n && topk_ahead(x, largest, base, inner, wv, heap[r])) worst = r;
                    if (worst == at) break;
                    heap[at] = heap[worst];
                    at = worst;
                }
            }
            heap[at] = j;
        }
        /* pop the last-ranked into the last free slot: best first */
        for (int64_t r = k - 1; r >= 0; r--) {
            int64_t top = heap[0], last = heap[--n], at = 0;
            for (;;) {
                int64_t l = 2 * at + 1, rr = l + 1, worst = at, wv = last;
                if (l < n && topk_ahead(x, largest, base, inner, wv, heap[l])) worst = l, wv = heap[l];
                if (rr < n && topk_ahead(x, largest, base, inner, wv, heap[rr])) worst = rr;
                if (worst == at) break;
                heap[at] = heap[worst];
                at = worst;
            }
            if (n) heap[at] = last;
            int64_t dst = o * k * inner + r * inner + i;
            memcpy((char *)c->out[0].data + dst * (int64_t)esz, (const char *)x->data + (base + top * inner) * (int64_t)esz,
                   esz);
            ((int64_t *)c->out[1].data)[dst] = top;
        }
    }
    return NN_OK;
}

const nn_op_desc nn_op_TopK = {.name = "TopK", .min_inputs = 1, .max_inputs = 2, .min_outputs = 2, .max_outputs = 2,
                               .parse = parse_topk, .check = check_topk, .infer = infer_topk,
                               .workspace = workspace_topk, .run = run_topk};

/* ---- Trilu: keep the upper (j - i >= k) or lower (j - i <= k) triangle of
 *      the last two dims, zero the rest */

typedef struct trilu_params {
    int32_t upper;
} trilu_params;

static nn_status parse_trilu(nn_parse_ctx *ctx) {
    trilu_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t upper;
    nn_status st = nn_attr_int(ctx, "upper", 1, &upper);
    p->upper = upper != 0;
    return st;
}

static nn_status check_trilu(const void *params, char *err, size_t err_size) {
    const trilu_params *p = params;
    if (p->upper != 0 && p->upper != 1) {
        snprintf(err, err_size, "upper %d not 0 or 1", (int)p->upper);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

static nn_status trilu_k(nn_call *c, int64_t *k) {
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    if (x->ndim < 2) return nn_call_error(c, NN_ERR_SHAPE, "input must have rank >= 2, got %d", x->ndim);
    *k = 0;
    if (!nn_present(c, 1)) return NN_OK;
    int n;
    st = nn_input_ints(c, 1, "k", k, 1, &n);
    if (st == NN_OK && n != 1) return nn_call_error(c, NN_ERR_SHAPE, "k must hold one value, got %d", n);
    return st;
}

static nn_status infer_trilu(nn_call *c) {
    int64_t k;
    nn_status st = trilu_k(c, &k);
    if (st == NN_DYNAMIC) st = NN_OK; /* the shape does not depend on k */
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], c->in[0].dtype, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

static nn_status run_trilu(nn_call *c) {
    const trilu_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t k;
    nn_status st = trilu_k(c, &k);
    if (st != NN_OK) return st;
    int64_t rows = x->dims[x->ndim - 2], cols = x->dims[x->ndim - 1], n = nn_tensor_elements(x);
    size_t esz = nn_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = c->out[0].data;
    for (int64_t r = 0; r < n / (cols ? cols : 1); r++) {
        int64_t i = r % rows;
        /* columns kept: [lo, hi) */
        int64_t lo = p->upper ? i + k : 0, hi = p->upper ? cols : i + k + 1;
        lo = lo < 0 ? 0 : lo > cols ? cols : lo;
        hi = hi < lo ? lo : hi > cols ? cols : hi;
        char *d = dst + (size_t)(r * cols) * esz;
        memset(d, 0, (size_t)lo * esz);
        memcpy(d + (size_t)lo * esz, src + (size_t)(r * cols + lo) * esz, (size_t)(hi - lo) * esz);
        memset(d + (size_t)hi * esz, 0, (size_t)(cols - hi) * esz);
    }
    return NN_OK;
}

const nn_op_desc nn_op_Trilu = {.name = "Trilu", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
                                .parse = parse_trilu, .check = check_trilu, .infer = infer_trilu, .run = run_trilu};
