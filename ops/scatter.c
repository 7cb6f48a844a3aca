/* Indexed reads and writes: GatherElements, GatherND, ScatterElements,
 * Scatter (its deprecated name), ScatterND and MaxUnpool (a scatter into
 * zeros by flat index).
 *
 * Indices come from data, so every one is checked against its axis before
 * anything is read or written (negative ones count from the end, as the
 * spec allows); an index out of range fails the run with its position. */
#include <string.h>

#include "op.h"

/* Scatter reductions, in the order of the `reduction` attribute's values. */
enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN, RED_COUNT };
static const char *const red_names[RED_COUNT] = {"none", "add", "mul", "max", "min"};

static nn_status check_indices_dtype(nn_call *c, const nn_tensor *t) {
    if (t->dtype != NN_DTYPE_INT64 && t->dtype != NN_DTYPE_INT32)
        return nn_call_error(c, NN_ERR_INVALID, "indices must be int32 or int64, got %s", nn_dtype_name(t->dtype));
    return NN_OK;
}

static nn_status check_data_dtype(nn_call *c, const nn_tensor *t) {
    if (!nn_dtype_size(t->dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(t->dtype));
    return NN_OK;
}

/* Index i of an axis of size dim, negative counting from the end; false
 * when out of range. */
static bool index_in_range(int64_t i, int64_t dim, int64_t *out) {
    if (i < -dim || i >= dim) return false;
    *out = i < 0 ? i + dim : i;
    return true;
}

static void dense_strides(const nn_tensor *t, int64_t *strides) {
    int64_t s = 1;
    for (int k = t->ndim - 1; k >= 0; k--) {
        strides[k] = s;
        s *= t->dims[k];
    }
}

/* dst[0..n) = reduce(dst, src) elementwise, both of dtype dt. */
#define REDUCE_BODY(T)                                                                                                 \
    do {                                                                                                               \
        T *d = dst;                                                                                                    \
        const T *s = src;                                                                                              \
        for (int64_t i = 0; i < n; i++) {                                                                              \
            switch (red) {                                                                                             \
            case RED_ADD: d[i] = (T)(d[i] + s[i]); break;                                                              \
            case RED_MUL: d[i] = (T)(d[i] * s[i]); break;                                                              \
            case RED_MAX: d[i] = s[i] > d[i] ? s[i] : d[i]; break;                                                     \
            case RED_MIN: d[i] = s[i] < d[i] ? s[i] : d[i]; break;                                                     \
            default: d[i] = s[i]; break;                                                                               \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

static void reduce_into(void *dst, const void *src, nn_dtype dt, int64_t n, int red) {
    if (red == RED_NONE) {
        memcpy(dst, src, (size_t)n * nn_dtype_size(dt));
        return;
    }
    switch (dt) {
    case NN_DTYPE_FLOAT: REDUCE_BODY(float); break;
    case NN_DTYPE_INT64: REDUCE_BODY(int64_t); break;
    case NN_DTYPE_INT32: REDUCE_BODY(int32_t); break;
    case NN_DTYPE_INT8: REDUCE_BODY(int8_t); break;
    case NN_DTYPE_UINT8: REDUCE_BODY(uint8_t); break;
    default: break; /* refused by infer */
    }
}

static bool reducible(nn_dtype dt) {
    return dt == NN_DTYPE_FLOAT || dt == NN_DTYPE_INT64 || dt == NN_DTYPE_INT32 || dt == NN_DTYPE_INT8 ||
           dt == NN_DTYPE_UINT8;
}

/* ---- params: an axis and a reduction (GatherElements uses the axis only,
 *      ScatterND the reduction only, GatherND's batch_dims rides in axis) */

typedef struct index_params {
    int64_t axis;
    int32_t reduction;
} index_params;

static nn_status parse_reduction(nn_parse_ctx *ctx, index_params *p) {
    const char *r;
    nn_status st = nn_attr_string(ctx, "reduction", "none", &r);
    if (st != NN_OK) return st;
    for (int k = 0; k < RED_COUNT; k++)
        if (!strcmp(r, red_names[k])) {
            /* add and mul came with opset 16, max and min with 18 */
            int since = k == RED_NONE ? 0 : k <= RED_MUL ? 16 : 18;
            if (ctx->opset < since)
                return nn_parse_error(ctx, NN_ERR_INVALID, "reduction '%s' needs opset %d, the model imports %d", r,
                                      since, ctx->opset);
            p->reduction = k;
            return NN_OK;
        }
    return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "reduction '%s' not supported (none, add, mul, max, min)", r);
}

static index_params *alloc_params(nn_parse_ctx *ctx) {
    index_params *p = nn_params_alloc(ctx, sizeof *p);
    ctx->params = p;
    return p;
}

static nn_status parse_axis_only(nn_parse_ctx *ctx) {
    index_params *p = alloc_params(ctx);
    if (!p) return NN_ERR_NOMEM;
    return nn_attr_int(ctx, "axis", 0, &p->axis);
}

static nn_status parse_axis_reduction(nn_parse_ctx *ctx) {
    index_params *p = alloc_params(ctx);
    if (!p) return NN_ERR_NOMEM;
    nn_status st = nn_attr_int(ctx, "axis", 0, &p->axis);
    return st != NN_OK ? st : parse_reduction(ctx, p);
}

static nn_status parse_batch_dims(nn_parse_ctx *ctx) {
    index_params *p = alloc_params(ctx);
    if (!p) return NN_ERR_NOMEM;
    nn_status st = nn_attr_int(ctx, "batch_dims", 0, &p->axis);
    if (st == NN_OK && p->axis < 0)
        return nn_parse_error(ctx, NN_ERR_INVALID, "batch_dims must be >= 0, got %lld", (long long)p->axis);
    return st;
}

static nn_status parse_reduction_only(nn_parse_ctx *ctx) {
    index_params *p = alloc_params(ctx);
    return p ? parse_reduction(ctx, p) : NN_ERR_NOMEM;
}

static nn_status check_index_params(const void *params, char *err, size_t err_size) {
    const index_params *p = params;
    if (p->axis < -NN_MAX_DIMS || p->axis >= NN_MAX_DIMS) {
        snprintf(err, err_size, "axis / batch_dims %lld out of range", (long long)p->axis);
        return NN_ERR_INVALID;
    }
    if (p->reduction < 0 || p->reduction >= RED_COUNT) {
        snprintf(err, err_size, "reduction %d out of range", (int)p->reduction);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

/* ---- GatherElements, ScatterElements: indices shaped like the output (or
 *      the updates), one index per element along `axis` */

/* Shared checks; *axis normalized.  indices may be no larger than data on
 * the other axes, so that their coordinates stay inside data. */
static nn_status elements_shapes(nn_call *c, const nn_tensor *x, const nn_tensor *idx, int64_t *axis) {
    const index_params *p = c->params;
    nn_status st = check_data_dtype(c, x);
    if (st == NN_OK) st = check_indices_dtype(c, idx);
    if (st != NN_OK) return st;
    if (x->ndim < 1 || idx->ndim != x->ndim)
        return nn_call_error(c, NN_ERR_SHAPE, "indices must have the rank of data (%d), got %d", x->ndim, idx->ndim);
    if (!nn_axis_normalize(p->axis, x->ndim, axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis, x->ndim);
    for (int k = 0; k < x->ndim; k++)
        if (k != *axis && idx->dims[k] > x->dims[k])
            return nn_call_error(c, NN_ERR_SHAPE, "indices dim %d is %lld, larger than data's %lld", k,
                                 (long long)idx->dims[k], (long long)x->dims[k]);
    return NN_OK;
}

/* Offset in data (dense strides xs) of element t of indices (shape idx),
 * with the coordinate along axis replaced by `at`. */
static int64_t element_offset(const nn_tensor *idx, const int64_t *xs, int axis, int64_t t, int64_t at) {
    int64_t off = 0;
    for (int k = idx->ndim - 1; k >= 0; k--) {
        int64_t q = t % idx->dims[k];
        t /= idx->dims[k];
        off += (k == axis ? at : q) * xs[k];
    }
    return off;
}

static nn_status infer_gather_elements(nn_call *c) {
    int64_t axis;
    nn_status st = elements_shapes(c, &c->in[0], &c->in[1], &axis);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], c->in[0].dtype, c->in[1].ndim, c->in[1].dims);
    return NN_OK;
}

static nn_status run_gather_elements(nn_call *c) {
    const nn_tensor *x = &c->in[0], *idx = &c->in[1];
    int64_t axis, xs[NN_MAX_DIMS], n = nn_tensor_elements(idx);
    elements_shapes(c, x, idx, &axis);
    dense_strides(x, xs);
    size_t esz = nn_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = c->out[0].data;
    for (int64_t t = 0; t < n; t++) {
        int64_t i = nn_tensor_get_int(idx, t), at;
        if (!index_in_range(i, x->dims[axis], &at))
            return nn_call_error(c, NN_ERR_INVALID,
                                 "index %lld at element %lld out of range for axis %lld of size %lld", (long long)i,
                                 (long long)t, (long long)axis, (long long)x->dims[axis]);
        memcpy(dst + t * (int64_t)esz, src + element_offset(idx, xs, (int)axis, t, at) * (int64_t)esz, esz);
    }
    return NN_OK;
}

const nn_op_desc nn_op_GatherElements = {.name = "GatherElements",
                                         .min_inputs = 2,
                                         .max_inputs = 2,
                                         .min_outputs = 1,
                                         .max_outputs = 1,
                                         .parse = parse_axis_only,
                                         .check = check_index_params,
                                         .infer = infer_gather_elements,
                                         .run = run_gather_elements};

static nn_status infer_scatter_elements(nn_call *c) {
    const index_params *p = c->params;
    const nn_tensor *x = &c->in[0], *idx = &c->in[1], *upd = &c->in[2];
    int64_t axis;
    nn_status st = elements_shapes(c, x, idx, &axis);
    if (st != NN_OK) return st;
    if (upd->dtype != x->dtype)
        return nn_call_error(c, NN_ERR_INVALID, "updates are %s, data %s", nn_dtype_name(upd->dtype),
                             nn_dtype_name(x->dtype));
    if (upd->ndim != idx->ndim || memcmp(upd->dims, idx->dims, sizeof(int64_t) * (size_t)idx->ndim))
        return nn_call_error(c, NN_ERR_SHAPE, "updates must have the shape of indices");
    if (p->reduction != RED_NONE && !reducible(x->dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "reduction '%s' on %s not supported", red_names[p->reduction],
                             nn_dtype_name(x->dtype));
    nn_tensor_set_shape(&c->out[0], x->dtype, x->ndim, x->dims);
    return NN_OK;
}

static nn_status run_scatter_elements(nn_call *c) {
    const index_params *p = c->params;
    const nn_tensor *x = &c->in[0], *idx = &c->in[1], *upd = &c->in[2];
    int64_t axis, xs[NN_MAX_DIMS], n = nn_tensor_elements(idx);
    elements_shapes(c, x, idx, &axis);
    dense_strides(x, xs);
    size_t esz = nn_dtype_size(x->dtype);
    /* every index is checked before the output is touched */
    for (int64_t t = 0; t < n; t++) {
        int64_t i = nn_tensor_get_int(idx, t), at;
        if (!index_in_range(i, x->dims[axis], &at))
            return nn_call_error(c, NN_ERR_INVALID,
                                 "index %lld at element %lld out of range for axis %lld of size %lld", (long long)i,
                                 (long long)t, (long long)axis, (long long)x->dims[axis]);
    }
    char *dst = c->out[0].data;
    if (dst != x->data) memcpy(dst, x->data, (size_t)nn_tensor_elements(x) * esz);
    /* in order: duplicates reduce one after the other (none: the last wins) */
    for (int64_t t = 0; t < n; t++) {
        int64_t at = 0; /* every index was checked above */
        index_in_range(nn_tensor_get_int(idx, t), x->dims[axis], &at);
        reduce_into(dst + element_offset(idx, xs, (int)axis, t, at) * (int64_t)esz,
                    (const char *)upd->data + t * (int64_t)esz, x->dtype, 1, p->reduction);
    }
    return NN_OK;
}

const nn_op_desc nn_op_ScatterElements = {.name = "ScatterElements",
                                          .min_inputs = 3,
                                          .max_inputs = 3,
                                          .min_outputs = 1,
                                          .max_outputs = 1,
                                          .parse = parse_axis_reduction,
                                          .check = check_index_params,
                                          .infer = infer_scatter_elements,
                                          .run = run_scatter_elements};

/* Scatter (opsets 9-10) is ScatterElements without a reduction. */
const nn_op_desc nn_op_Scatter = {.name = "Scatter",
                                  .min_inputs = 3,
                                  .max_inputs = 3,
                                  .min_outputs = 1,
                                  .max_outputs = 1,
                                  .parse = parse_axis_only,
                                  .check = check_index_params,
                                  .infer = infer_scatter_elements,
                                  .run = run_scatter_elements};

/* ---- GatherND, ScatterND: the last dim of indices (m) addresses a slice
 *      of data after its first b (batch_dims) dims */

typedef struct nd_plan {
    int64_t m;                    /* coordinates per index tuple */
    int64_t tuples;               /* index tuples (indices' elements / m) */
    int64_t per_batch;            /* tuples per batch entry */
    int64_t slice;                /* elements each tuple addresses */
    int64_t batch_stride;         /* data elements per batch entry */
    int64_t strides[NN_MAX_DIMS]; /* data strides of the m indexed dims */
} nd_plan;

static nn_status nd_shapes(nn_call *c, int64_t b, nd_plan *pl) {
    const nn_tensor *x = &c->in[0], *idx = &c->in[1];
    nn_status st = check_data_dtype(c, x);
    if (st == NN_OK) st = check_indices_dtype(c, idx);
    if (st != NN_OK) return st;
    int r = x->ndim, q = idx->ndim;
    if (r < 1 || q < 1) return nn_call_error(c, NN_ERR_SHAPE, "data and indices must have rank >= 1");
    if (b >= q || b >= r)
        return nn_call_error(c, NN_ERR_SHAPE, "batch_dims %lld must be less than both ranks (%d, %d)", (long long)b, r,
                             q);
    for (int k = 0; k < b; k++)
        if (x->dims[k] != idx->dims[k])
            return nn_call_error(c, NN_ERR_SHAPE, "batch dim %d: data has %lld, indices %lld", k, (long long)x->dims[k],
                                 (long long)idx->dims[k]);
    pl->m = idx->dims[q - 1];
    if (pl->m < 1 || pl->m > r - b)
        return nn_call_error(c, NN_ERR_SHAPE, "indices' last dim %lld must be in [1, %lld]", (long long)pl->m,
                             (long long)(r - b));
    pl->tuples = nn_shape_elements(idx->dims, q - 1);
    pl->per_batch = nn_shape_elements(idx->dims + b, q - 1 - (int)b);
    pl->slice = nn_shape_elements(x->dims + b + pl->m, r - (int)b - (int)pl->m);
    pl->batch_stride = nn_shape_elements(x->dims + b, r - (int)b);
    int64_t s = pl->slice;
    for (int k = (int)pl->m - 1; k >= 0; k--) {
        pl->strides[k] = s;
        s *= x->dims[b + k];
    }
    return NN_OK;
}

/* Element offset in data of tuple t, or -1 (with the error set) when one
 * of its coordinates is out of range. */
static int64_t nd_offset(nn_call *c, int64_t b, const nd_plan *pl, int64_t t) {
    const nn_tensor *x = &c->in[0], *idx = &c->in[1];
    int64_t off = pl->per_batch ? t / pl->per_batch * pl->batch_stride : 0;
    for (int64_t j = 0; j < pl->m; j++) {
        int64_t i = nn_tensor_get_int(idx, t * pl->m + j), at, dim = x->dims[b + j];
        if (!index_in_range(i, dim, &at)) {
            nn_call_error(c, NN_ERR_INVALID, "index %lld (tuple %lld, coordinate %lld) out of range for a dim of %lld",
                          (long long)i, (long long)t, (long long)j, (long long)dim);
            return -1;
        }
        off += at * pl->strides[j];
    }
    return off;
}

static nn_status infer_gather_nd(nn_call *c) {
    const index_params *p = c->params;
    const nn_tensor *x = &c->in[0], *idx = &c->in[1];
    nd_plan pl;
    nn_status st = nd_shapes(c, p->axis, &pl);
    if (st != NN_OK) return st;
    nn_tensor *y = &c->out[0];
    y->dtype = x->dtype;
    y->ndim = 0;
    for (int k = 0; k < idx->ndim - 1; k++)
        y->dims[y->ndim++] = idx->dims[k];
    for (int k = (int)(p->axis + pl.m); k < x->ndim; k++) {
        if (y->ndim == NN_MAX_DIMS) return nn_call_error(c, NN_ERR_UNSUPPORTED, "output rank exceeds %d", NN_MAX_DIMS);
        y->dims[y->ndim++] = x->dims[k];
    }
    return NN_OK;
}

static nn_status run_gather_nd(nn_call *c) {
    const index_params *p = c->params;
    nd_plan pl;
    nd_shapes(c, p->axis, &pl);
    size_t esz = nn_dtype_size(c->in[0].dtype), row = (size_t)pl.slice * esz;
    const char *src = c->in[0].data;
    char *dst = c->out[0].data;
    for (int64_t t = 0; t < pl.tuples; t++) {
        int64_t off = nd_offset(c, p->axis, &pl, t);
        if (off < 0) return NN_ERR_INVALID;
        memcpy(dst + (size_t)t * row, src + off * (int64_t)esz, row);
    }
    return NN_OK;
}

const nn_op_desc nn_op_GatherND = {.name = "GatherND",
                                   .min_inputs = 2,
                                   .max_inputs = 2,
                                   .min_outputs = 1,
                                   .max_outputs = 1,
                                   .parse = parse_batch_dims,
                                   .check = check_index_params,
                                   .infer = infer_gather_nd,
                                   .run = run_gather_nd};

static nn_status infer_scatter_nd(nn_call *c) {
    const index_params *p = c->params;
    const nn_tensor *x = &c->in[0], *idx = &c->in[1], *upd = &c->in[2];
    nd_plan pl;
    nn_status st = nd_shapes(c, 0, &pl);
    if (st != NN_OK) return st;
    if (upd->dtype != x->dtype)
        return nn_call_error(c, NN_ERR_INVALID, "updates are %s, data %s", nn_dtype_name(upd->dtype),
                             nn_dtype_name(x->dtype));
    /* updates: indices.shape[:-1] + data.shape[m:] */
    int want = idx->ndim - 1 + x->ndim - (int)pl.m;
    bool ok = upd->ndim == want;
    for (int k = 0; ok && k < idx->ndim - 1; k++)
        ok = upd->dims[k] == idx->dims[k];
    for (int k = 0; ok && k < x->ndim - pl.m; k++)
        ok = upd->dims[idx->ndim - 1 + k] == x->dims[pl.m + k];
    if (!ok)
        return nn_call_error(c, NN_ERR_SHAPE, "updates must have shape indices.shape[:-1] + data.shape[%lld:]",
                             (long long)pl.m);
    if (p->reduction != RED_NONE && !reducible(x->dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "reduction '%s' on %s not supported", red_names[p->reduction],
                             nn_dtype_name(x->dtype));
    nn_tensor_set_shape(&c->out[0], x->dtype, x->ndim, x->dims);
    return NN_OK;
}

static nn_status run_scatter_nd(nn_call *c) {
    const index_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nd_plan pl;
    nd_shapes(c, 0, &pl);
    for (int64_t t = 0; t < pl.tuples; t++) /* every tuple is checked before the output is touched */
        if (nd_offset(c, 0, &pl, t) < 0) return NN_ERR_INVALID;
    size_t esz = nn_dtype_size(x->dtype);
    char *dst = c->out[0].data;
    const char *upd = c->in[2].data;
    if (dst != x->data) memcpy(dst, x->data, (size_t)nn_tensor_elements(x) * esz);
    for (int64_t t = 0; t < pl.tuples; t++)
        reduce_into(dst + nd_offset(c, 0, &pl, t) * (int64_t)esz, upd + t * pl.slice * (int64_t)esz, x->dtype, pl.slice,
                    p->reduction);
    return NN_OK;
}

const nn_op_desc nn_op_ScatterND = {.name = "ScatterND",
                                    .min_inputs = 3,
                                    .max_inputs = 3,
                                    .min_outputs = 1,
                                    .max_outputs = 1,
                                    .parse = parse_reduction_only,
                                    .check = check_index_params,
                                    .infer = infer_scatter_nd,
                                    .run = run_scatter_nd};

/* ---- MaxUnpool (opset 11): zeros of the unpooled shape, X written where
 *      I points (indices flat over the whole output, as MaxPool gives them) */

typedef struct unpool_params {
    int32_t n; /* spatial dims */
    int64_t kernel[NN_MAX_DIMS], stride[NN_MAX_DIMS], pads[2 * NN_MAX_DIMS];
} unpool_params;

static nn_status check_unpool(const void *params, char *err, size_t err_size) {
    const unpool_params *p = params;
    if (p->n < 1 || p->n > NN_MAX_DIMS - 2) {
        snprintf(err, err_size, "%d kernel dims, 1 to %d supported", (int)p->n, NN_MAX_DIMS - 2);
        return NN_ERR_INVALID;
    }
    for (int k = 0; k < p->n; k++)
        if (p->kernel[k] < 1 || p->kernel[k] > INT32_MAX || p->stride[k] < 1 || p->stride[k] > INT32_MAX ||
            p->pads[k] < 0 || p->pads[k] > INT32_MAX || p->pads[p->n + k] < 0 || p->pads[p->n + k] > INT32_MAX) {
            snprintf(err, err_size, "kernel_shape, strides or pads of dim %d out of range", k);
            return NN_ERR_INVALID;
        }
    return NN_OK;
}

static nn_status parse_unpool(nn_parse_ctx *ctx) {
    unpool_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int nk, ns, np;
    nn_status st = nn_attr_ints(ctx, "kernel_shape", p->kernel, NN_MAX_DIMS, &nk);
    if (st == NN_OK) st = nn_attr_ints(ctx, "strides", p->stride, NN_MAX_DIMS, &ns);
    if (st == NN_OK) st = nn_attr_ints(ctx, "pads", p->pads, 2 * NN_MAX_DIMS, &np);
    if (st != NN_OK) return st;
    if (nk < 1) return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'kernel_shape' is required");
    if ((ns >= 0 && ns != nk) || (np >= 0 && np != 2 * nk))
        return nn_parse_error(ctx, NN_ERR_INVALID, "strides and pads must have one (two) values per kernel dim");
    p->n = nk;
    for (int k = 0; k < nk; k++) {
        if (ns < 0) p->stride[k] = 1;
        if (np < 0) p->pads[k] = p->pads[nk + k] = 0;
    }
    return check_unpool(p, ctx->err, ctx->err_size);
}

/* The unpooled shape the attributes give: (in - 1) * stride + kernel - pads. */
static nn_status unpool_inferred(nn_call *c, int64_t *dims) {
    const unpool_params *p = c->params;
    const nn_tensor *x = &c->in[0], *idx = &c->in[1];
    if (x->dtype != NN_DTYPE_FLOAT) return nn_call_error(c, NN_ERR_UNSUPPORTED, "X must be float");
    nn_status st = check_indices_dtype(c, idx);
    if (st != NN_OK) return st;
    if (x->ndim != p->n + 2 || idx->ndim != x->ndim || memcmp(idx->dims, x->dims, sizeof(int64_t) * (size_t)x->ndim))
        return nn_call_error(c, NN_ERR_SHAPE, "X and I must both be [N, C] + %d spatial dims", (int)p->n);
    dims[0] = x->dims[0], dims[1] = x->dims[1];
    for (int k = 0; k < p->n; k++) {
        /* in 64 bits from values below 2^31 */
        int64_t d = (x->dims[k + 2] - 1) * p->stride[k] + p->kernel[k] - p->pads[k] - p->pads[p->n + k];
        if (x->dims[k + 2] > INT32_MAX || d < 0)
            return nn_call_error(c, NN_ERR_SHAPE, "unpooled dim %d would be %lld", k, (long long)d);
        dims[k + 2] = d;
    }
    return NN_OK;
}

/* output_shape, when given, may only add room after the unpooled shape
 * (the result sits at its start, as in ONNX's reference). */
static nn_status infer_unpool(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int64_t inferred[NN_MAX_DIMS];
    nn_status st = unpool_inferred(c, inferred);
    if (st != NN_OK) return st;
    nn_tensor *y = &c->out[0];
    nn_tensor_set_shape(y, x->dtype, x->ndim, inferred);
    if (!nn_present(c, 2)) return NN_OK;
    int n;
    if ((st = nn_input_ints(c, 2, "output_shape", y->dims, NN_MAX_DIMS, &n)) != NN_OK) return st;
    if (n != x->ndim || y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1])
        return nn_call_error(c, NN_ERR_SHAPE, "output_shape must be [N, C, ...] of rank %d", x->ndim);
    for (int k = 2; k < n; k++)
        if (y->dims[k] < inferred[k])
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "output_shape dim %d is %lld, smaller than the unpooled %lld",
                                 k, (long long)y->dims[k], (long long)inferred[k]);
    return NN_OK;
}

static nn_status run_unpool(nn_call *c) {
    const nn_tensor *x = &c->in[0], *idx = &c->in[1];
    nn_tensor *y = &c->out[0];
    int64_t inferred[NN_MAX_DIMS];
    nn_status st = unpool_inferred(c, inferred);
    if (st != NN_OK) return st;
    int64_t n = nn_tensor_elements(x), total = nn_shape_elements(inferred, x->ndim);
    for (int64_t t = 0; t < n; t++) {
        int64_t i = nn_tensor_get_int(idx, t);
        if (i < 0 || i >= total)
            return nn_call_error(c, NN_ERR_INVALID, "index %lld at element %lld out of range for %lld unpooled values",
                                 (long long)i, (long long)t, (long long)total);
    }
    float *dst = y->data;
    const float *src = x->data;
    memset(dst, 0, sizeof *dst * (size_t)nn_tensor_elements(y));
    for (int64_t t = 0; t < n; t++) {
        /* flat index in the unpooled shape -> the same coordinates in y */
        int64_t i = nn_tensor_get_int(idx, t), off = 0, scale = 1;
        for (int k = x->ndim - 1; k >= 0; k--) {
            off += i % inferred[k] * scale;
            i /= inferred[k];
            scale *= y->dims[k];
        }
        dst[off] = src[t];
    }
    return NN_OK;
}

const nn_op_desc nn_op_MaxUnpool = {.name = "MaxUnpool",
                                    .min_inputs = 2,
                                    .max_inputs = 3,
                                    .min_outputs = 1,
                                    .max_outputs = 1,
                                    .parse = parse_unpool,
                                    .check = check_unpool,
                                    .infer = infer_unpool,
                                    .run = run_unpool};
