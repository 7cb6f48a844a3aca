/* Ops that compute positions or select by them: NonZero, Compress, TopK,
 * Unique, Trilu, OneHot, EyeLike, ReverseSequence.
 *
 * NonZero's and Compress's output sizes depend on their input's values:
 * infer counts them when the values are known (at run time, or for
 * constants) and says NN_DYNAMIC otherwise.  Unique's count needs the
 * whole sort, so its `bound` sizes the outputs for all-distinct input and
 * run shrinks them. */
#include <math.h>
#include <string.h>

#include "op.h"
#include "par.h"

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
    for (int64_t i = 0; i < n; i++)
        count += nonzero_at(x, i);
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

const nn_op_desc nn_op_NonZero = {.name = "NonZero",
                                  .min_inputs = 1,
                                  .max_inputs = 1,
                                  .min_outputs = 1,
                                  .max_outputs = 1,
                                  .infer = infer_nonzero,
                                  .run = run_nonzero};

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
    for (int64_t i = 0; i < cond->dims[0]; i++)
        kept += ((const uint8_t *)cond->data)[i] != 0;
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

const nn_op_desc nn_op_Compress = {.name = "Compress",
                                   .min_inputs = 2,
                                   .max_inputs = 2,
                                   .min_outputs = 1,
                                   .max_outputs = 1,
                                   .parse = parse_compress,
                                   .check = check_compress,
                                   .infer = infer_compress,
                                   .run = run_compress};

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
    if (ctx->opset < 10 && p->k < 0)
        return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'k' is required (opset < 10)");
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

typedef struct topk_job {
    const nn_tensor *x;
    void *values;
    int64_t *indices, *heaps; /* heaps: len per seat */
    int64_t len, inner, k;
    size_t esz;
    bool largest;
} topk_job;

/* Slices [lo, hi) of run_topk, each with its seat's heap in the workspace. */
static void topk_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    const topk_job *jb = ctx;
    const nn_tensor *x = jb->x;
    int64_t len = jb->len, inner = jb->inner, k = jb->k;
    size_t esz = jb->esz;
    bool largest = jb->largest;
    for (int64_t s = lo; s < hi; s++) {
        int64_t *heap = jb->heaps + (size_t)seat * (size_t)len;
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
            memcpy((char *)jb->values + dst * (int64_t)esz, (const char *)x->data + (base + top * inner) * (int64_t)esz,
                   esz);
            jb->indices[dst] = top;
        }
    }
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
    topk_job jb = {.x = x,
                   .values = c->out[0].data,
                   .indices = c->out[1].data,
                   .heaps = c->workspace,
                   .len = len,
                   .inner = inner,
                   .k = k,
                   .esz = esz,
                   .largest = p->largest};
    nn_par_for_range(slices > 1 && slices * len > 4096 ? c->threads : 1, slices, 1, topk_range, &jb);
    return NN_OK;
}

const nn_op_desc nn_op_TopK = {.name = "TopK",
                               .min_inputs = 1,
                               .max_inputs = 2,
                               .min_outputs = 2,
                               .max_outputs = 2,
                               .parse = parse_topk,
                               .check = check_topk,
                               .infer = infer_topk,
                               .workspace = workspace_topk,
                               .run = run_topk};

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

const nn_op_desc nn_op_Trilu = {.name = "Trilu",
                                .min_inputs = 1,
                                .max_inputs = 2,
                                .min_outputs = 1,
                                .max_outputs = 1,
                                .parse = parse_trilu,
                                .check = check_trilu,
                                .infer = infer_trilu,
                                .run = run_trilu};

/* ---- OneHot: depth inserted at axis; `on` where the index points, `off`
 *      elsewhere (an index outside [-depth, depth) leaves its row all off) */

typedef struct onehot_params {
    int64_t axis;
} onehot_params;

static nn_status parse_onehot(nn_parse_ctx *ctx) {
    onehot_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    return nn_attr_int(ctx, "axis", -1, &p->axis);
}

static nn_status check_onehot(const void *params, char *err, size_t err_size) {
    const int64_t *axis = &((const onehot_params *)params)->axis;
    if (*axis < -NN_MAX_DIMS - 1 || *axis > NN_MAX_DIMS) {
        snprintf(err, err_size, "axis %lld out of range", (long long)*axis);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

static bool numeric_index_dtype(nn_dtype dt) {
    return dt == NN_DTYPE_FLOAT || dt == NN_DTYPE_INT64 || dt == NN_DTYPE_INT32;
}

/* Element i of an index tensor (float ones truncate, as a cast would). */
static int64_t index_value(const nn_tensor *t, int64_t i) {
    if (t->dtype != NN_DTYPE_FLOAT) return nn_tensor_get_int(t, i);
    double v = nn_tensor_get_double(t, i);
    return v >= -9e18 && v <= 9e18 ? (int64_t)v : INT64_MIN; /* NaN and huge: out of every range */
}

static nn_status onehot_geometry(nn_call *c, int64_t *axis, int64_t *depth) {
    const onehot_params *p = c->params;
    const nn_tensor *ind = &c->in[0], *dep = &c->in[1], *val = &c->in[2];
    if (!numeric_index_dtype(ind->dtype) || !numeric_index_dtype(dep->dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "indices and depth must be float, int32 or int64");
    nn_status st = check_dtype(c, val);
    if (st != NN_OK) return st;
    if (nn_tensor_elements(val) != 2) return nn_call_error(c, NN_ERR_SHAPE, "values must hold [off, on]");
    if (nn_tensor_elements(dep) != 1) return nn_call_error(c, NN_ERR_SHAPE, "depth must hold one value");
    if (ind->ndim + 1 > NN_MAX_DIMS) return nn_call_error(c, NN_ERR_UNSUPPORTED, "output rank exceeds %d", NN_MAX_DIMS);
    if (!nn_axis_normalize(p->axis, ind->ndim + 1, axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis,
                             ind->ndim + 1);
    if (!dep->data) return NN_DYNAMIC;
    *depth = index_value(dep, 0);
    if (*depth < 0 || *depth > INT32_MAX)
        return nn_call_error(c, NN_ERR_INVALID, "depth %lld out of range", (long long)*depth);
    return NN_OK;
}

static nn_status infer_onehot(nn_call *c) {
    const nn_tensor *ind = &c->in[0];
    int64_t axis, depth;
    nn_status st = onehot_geometry(c, &axis, &depth);
    if (st != NN_OK) return st;
    nn_tensor *y = &c->out[0];
    y->dtype = c->in[2].dtype;
    y->ndim = ind->ndim + 1;
    for (int k = 0, d = 0; k < y->ndim; k++)
        y->dims[k] = k == axis ? depth : ind->dims[d++];
    return NN_OK;
}

static nn_status run_onehot(nn_call *c) {
    const nn_tensor *ind = &c->in[0];
    int64_t axis, depth;
    nn_status st = onehot_geometry(c, &axis, &depth);
    if (st != NN_OK) return st;
    size_t esz = nn_dtype_size(c->in[2].dtype);
    const char *off = c->in[2].data, *on = off + esz;
    char *dst = c->out[0].data;
    int64_t n = nn_tensor_elements(&c->out[0]), inner = nn_shape_elements(ind->dims + axis, ind->ndim - (int)axis);
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + (size_t)i * esz, off, esz);
    for (int64_t t = 0; t < nn_tensor_elements(ind); t++) {
        int64_t v = index_value(ind, t);
        if (v < -depth || v >= depth) continue;
        if (v < 0) v += depth;
        memcpy(dst + (size_t)((t / inner * depth + v) * inner + t % inner) * esz, on, esz);
    }
    return NN_OK;
}

const nn_op_desc nn_op_OneHot = {.name = "OneHot",
                                 .min_inputs = 3,
                                 .max_inputs = 3,
                                 .min_outputs = 1,
                                 .max_outputs = 1,
                                 .parse = parse_onehot,
                                 .check = check_onehot,
                                 .infer = infer_onehot,
                                 .run = run_onehot};

/* ---- EyeLike: ones on diagonal k of a 2-D shape, in `dtype` or the input's */

typedef struct eyelike_params {
    int64_t k;
    int32_t dtype; /* 0: the input's */
} eyelike_params;

static nn_status parse_eyelike(nn_parse_ctx *ctx) {
    eyelike_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t dt;
    nn_status st = nn_attr_int(ctx, "k", 0, &p->k);
    if (st == NN_OK) st = nn_attr_int(ctx, "dtype", 0, &dt);
    if (st != NN_OK) return st;
    if (dt != 0 && (dt < 0 || dt > 64 || !nn_dtype_size((nn_dtype)dt)))
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "dtype %lld not supported", (long long)dt);
    p->dtype = (int32_t)dt;
    return NN_OK;
}

static nn_status check_eyelike(const void *params, char *err, size_t err_size) {
    const eyelike_params *p = params;
    if (p->dtype != 0 && (p->dtype < 0 || p->dtype > 64 || !nn_dtype_size((nn_dtype)p->dtype))) {
        snprintf(err, err_size, "dtype %d not supported", (int)p->dtype);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

static nn_status infer_eyelike(nn_call *c) {
    const eyelike_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    if (x->ndim != 2) return nn_call_error(c, NN_ERR_SHAPE, "input must be 2-D, got rank %d", x->ndim);
    nn_tensor_set_shape(&c->out[0], p->dtype ? (nn_dtype)p->dtype : x->dtype, 2, x->dims);
    return NN_OK;
}

static nn_status run_eyelike(nn_call *c) {
    const eyelike_params *p = c->params;
    nn_tensor *y = &c->out[0];
    int64_t rows = y->dims[0], cols = y->dims[1];
    size_t esz = nn_dtype_size(y->dtype);
    memset(y->data, 0, (size_t)(rows * cols) * esz);
    for (int64_t i = 0; i < rows; i++) {
        int64_t j = i + p->k;
        if (j >= 0 && j < cols) nn_store_double((char *)y->data + (size_t)(i * cols + j) * esz, y->dtype, 1.0);
    }
    return NN_OK;
}

const nn_op_desc nn_op_EyeLike = {.name = "EyeLike",
                                  .min_inputs = 1,
                                  .max_inputs = 1,
                                  .min_outputs = 1,
                                  .max_outputs = 1,
                                  .parse = parse_eyelike,
                                  .check = check_eyelike,
                                  .infer = infer_eyelike,
                                  .run = run_eyelike};

/* ---- ReverseSequence: along time_axis, the first sequence_lens[b]
 *      elements of each batch entry b reversed, the rest copied */

typedef struct revseq_params {
    int64_t batch_axis, time_axis;
} revseq_params;

static nn_status parse_revseq(nn_parse_ctx *ctx) {
    revseq_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    nn_status st = nn_attr_int(ctx, "batch_axis", 1, &p->batch_axis);
    if (st == NN_OK) st = nn_attr_int(ctx, "time_axis", 0, &p->time_axis);
    if (st == NN_OK && !((p->batch_axis == 0 && p->time_axis == 1) || (p->batch_axis == 1 && p->time_axis == 0)))
        return nn_parse_error(ctx, NN_ERR_INVALID, "batch_axis %lld and time_axis %lld must be 0 and 1",
                              (long long)p->batch_axis, (long long)p->time_axis);
    return st;
}

static nn_status check_revseq(const void *params, char *err, size_t err_size) {
    const revseq_params *p = params;
    if (!((p->batch_axis == 0 && p->time_axis == 1) || (p->batch_axis == 1 && p->time_axis == 0))) {
        snprintf(err, err_size, "batch_axis %lld and time_axis %lld must be 0 and 1", (long long)p->batch_axis,
                 (long long)p->time_axis);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

static nn_status infer_revseq(nn_call *c) {
    const revseq_params *p = c->params;
    const nn_tensor *x = &c->in[0], *lens = &c->in[1];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    if (x->ndim < 2) return nn_call_error(c, NN_ERR_SHAPE, "input must have rank >= 2, got %d", x->ndim);
    if ((lens->dtype != NN_DTYPE_INT64 && lens->dtype != NN_DTYPE_INT32) || lens->ndim != 1 ||
        lens->dims[0] != x->dims[p->batch_axis])
        return nn_call_error(c, NN_ERR_SHAPE, "sequence_lens must be int64 [%lld]", (long long)x->dims[p->batch_axis]);
    nn_tensor_set_shape(&c->out[0], x->dtype, x->ndim, x->dims);
    return NN_OK;
}

static nn_status run_revseq(nn_call *c) {
    const revseq_params *p = c->params;
    const nn_tensor *x = &c->in[0], *lens = &c->in[1];
    int64_t steps = x->dims[p->time_axis], batch = x->dims[p->batch_axis];
    for (int64_t b = 0; b < batch; b++) {
        int64_t len = nn_tensor_get_int(lens, b);
        if (len < 0 || len > steps)
            return nn_call_error(c, NN_ERR_INVALID, "sequence_lens[%lld] = %lld out of range [0, %lld]", (long long)b,
                                 (long long)len, (long long)steps);
    }
    size_t row = (size_t)nn_shape_elements(x->dims + 2, x->ndim - 2) * nn_dtype_size(x->dtype);
    /* element strides (in rows) of the time and batch axes */
    int64_t ts = p->time_axis == 0 ? batch : 1, bs = p->time_axis == 0 ? 1 : steps;
    for (int64_t b = 0; b < batch; b++) {
        int64_t len = nn_tensor_get_int(lens, b);
        for (int64_t t = 0; t < steps; t++) {
            int64_t from = t < len ? len - 1 - t : t;
            memcpy((char *)c->out[0].data + (size_t)(t * ts + b * bs) * row,
                   (const char *)x->data + (size_t)(from * ts + b * bs) * row, row);
        }
    }
    return NN_OK;
}

const nn_op_desc nn_op_ReverseSequence = {.name = "ReverseSequence",
                                          .min_inputs = 2,
                                          .max_inputs = 2,
                                          .min_outputs = 1,
                                          .max_outputs = 1,
                                          .parse = parse_revseq,
                                          .check = check_revseq,
                                          .infer = infer_revseq,
                                          .run = run_revseq};

/* ---- Unique (opset 11): the distinct elements (or slices along axis),
 *      sorted or in order of first appearance, with the first index of
 *      each, every input's position among them, and their counts */

typedef struct unique_params {
    int64_t axis;
    int32_t has_axis, sorted;
} unique_params;

static nn_status parse_unique(nn_parse_ctx *ctx) {
    unique_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t sorted = 1;
    p->has_axis = nn_attr_find(ctx, "axis") != NULL;
    nn_status st = nn_attr_int(ctx, "axis", 0, &p->axis);
    if (st == NN_OK) st = nn_attr_int(ctx, "sorted", 1, &sorted);
    p->sorted = sorted != 0;
    return st;
}

static nn_status check_unique(const void *params, char *err, size_t err_size) {
    const unique_params *p = params;
    if (p->axis < -NN_MAX_DIMS || p->axis >= NN_MAX_DIMS || (p->has_axis & ~1) || (p->sorted & ~1)) {
        snprintf(err, err_size, "axis %lld, has_axis %d or sorted %d out of range", (long long)p->axis,
                 (int)p->has_axis, (int)p->sorted);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

/* The input as outer x len x inner: the len slices compared, each of
 * outer x inner elements (the flattened input: 1 x n x 1). */
typedef struct unique_geom {
    int64_t axis, outer, len, inner;
} unique_geom;

static nn_status unique_geometry(nn_call *c, unique_geom *g) {
    const unique_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT && x->dtype != NN_DTYPE_INT64 && x->dtype != NN_DTYPE_INT32 &&
        x->dtype != NN_DTYPE_INT8 && x->dtype != NN_DTYPE_UINT8)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(x->dtype));
    if (!p->has_axis) {
        *g = (unique_geom){.axis = -1, .outer = 1, .len = nn_tensor_elements(x), .inner = 1};
        return NN_OK;
    }
    if (!nn_axis_normalize(p->axis, x->ndim, &g->axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis, x->ndim);
    g->outer = nn_shape_elements(x->dims, (int)g->axis);
    g->len = x->dims[g->axis];
    g->inner = nn_shape_elements(x->dims + g->axis + 1, x->ndim - (int)g->axis - 1);
    return NN_OK;
}

static nn_status infer_unique(nn_call *c) {
    unique_geom g;
    nn_status st = unique_geometry(c, &g);
    return st != NN_OK ? st : NN_DYNAMIC; /* how many are distinct is only known once it ran */
}

/* Outputs sized for u distinct slices. */
static void unique_shapes(nn_call *c, const unique_geom *g, int64_t u) {
    const nn_tensor *x = &c->in[0];
    if (g->axis < 0) {
        nn_tensor_set_shape(&c->out[0], x->dtype, 1, &u);
    } else {
        nn_tensor_set_shape(&c->out[0], x->dtype, x->ndim, x->dims);
        c->out[0].dims[g->axis] = u;
    }
    int64_t dims[3] = {u, g->len, u};
    for (int k = 1; k < c->n_out && k < 4; k++)
        nn_tensor_set_shape(&c->out[k], NN_DTYPE_INT64, 1, &dims[k - 1]);
}

static nn_status bound_unique(nn_call *c) {
    unique_geom g;
    nn_status st = unique_geometry(c, &g);
    if (st == NN_OK) unique_shapes(c, &g, g.len);
    return st;
}

/* order, merge scratch, group of each slice, output position of each group */
static size_t workspace_unique(const nn_call *c) {
    unique_geom g;
    return unique_geometry((nn_call *)c, &g) == NN_OK ? 4 * (size_t)g.len * sizeof(int64_t) : 0;
}

/* -1, 0, 1 as slice a ranks below, equal to or above slice b (row-major
 * lexicographic, elements by elem_cmp). */
static int slice_cmp(const nn_tensor *x, const unique_geom *g, int64_t a, int64_t b) {
    for (int64_t o = 0; o < g->outer; o++)
        for (int64_t i = 0; i < g->inner; i++) {
            int cmp = elem_cmp(x, (o * g->len + a) * g->inner + i, (o * g->len + b) * g->inner + i);
            if (cmp) return cmp;
        }
    return 0;
}

static nn_status run_unique(nn_call *c) {
    const unique_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    unique_geom g;
    nn_status st = unique_geometry(c, &g);
    if (st != NN_OK) return st;
    if (c->out[0].ndim < 1 || c->out[0].dims[g.axis < 0 ? 0 : g.axis] < g.len)
        return nn_call_error(c, NN_ERR_INTERNAL, "outputs sized for fewer than every slice");
    int64_t n = g.len, *order = c->workspace, *tmp = order + n, *group = tmp + n, *pos = group + n;
    /* stable merge sort of the slice order: equal slices keep index order */
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                tmp[o++] = slice_cmp(x, &g, order[j], order[i]) < 0 ? order[j++] : order[i++];
            while (i < mid)
                tmp[o++] = order[i++];
            while (j < hi)
                tmp[o++] = order[j++];
        }
        memcpy(order, tmp, sizeof *order * (size_t)n);
    }
    /* groups of equal slices, numbered in sorted order */
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || slice_cmp(x, &g, order[i - 1], order[i]) != 0) u++;
        group[order[i]] = u - 1;
    }
    /* output position of each group: its sorted rank, or its first appearance */
    for (int64_t k = 0; k < u; k++)
        pos[k] = -1;
    for (int64_t i = 0, next = 0; i < n; i++) {
        int64_t k = group[p->sorted ? order[i] : i];
        if (pos[k] < 0) pos[k] = next++;
    }
    unique_shapes(c, &g, u);
    int64_t *first = c->n_out > 1 ? c->out[1].data : NULL, *inverse = c->n_out > 2 ? c->out[2].data : NULL;
    int64_t *counts = c->n_out > 3 ? c->out[3].data : NULL;
    if (counts) memset(counts, 0, sizeof *counts * (size_t)u);
    size_t esz = nn_dtype_size(x->dtype), row = (size_t)g.inner * esz;
    for (int64_t i = n - 1; i >= 0; i--) { /* backwards: the first appearance is written last */
        int64_t at = pos[group[i]];
        if (first) first[at] = i;
        if (inverse) inverse[i] = at;
        if (counts) counts[at]++;
        for (int64_t o = 0; o < g.outer; o++)
            memcpy((char *)c->out[0].data + (size_t)(o * u + at) * row,
                   (const char *)x->data + (size_t)(o * g.len + i) * row, row);
    }
    return NN_OK;
}

const nn_op_desc nn_op_Unique = {.name = "Unique",
                                 .min_inputs = 1,
                                 .max_inputs = 1,
                                 .min_outputs = 1,
                                 .max_outputs = 4,
                                 .parse = parse_unique,
                                 .check = check_unique,
                                 .infer = infer_unique,
                                 .workspace = workspace_unique,
                                 .run = run_unique,
                                 .bound = bound_unique};
