/* Shape operators: Reshape, Flatten, Squeeze, Unsqueeze (same bytes, new
 * shape), Shape and Size (values from the input's shape alone) and Expand. */
#include <string.h>

#include "op.h"
#include "params.h"

static nn_status check_dtype(nn_call *c, const nn_tensor *t) {
    if (nn_dtype_size(t->dtype) == 0)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(t->dtype));
    return NN_OK;
}

/* Reshape, Flatten, Squeeze and Unsqueeze keep the bytes; the engine may
 * even hand the input's buffer in as the output. */
static nn_status run_copy(nn_call *c) {
    size_t bytes = (size_t)nn_tensor_elements(&c->in[0]) * nn_dtype_size(c->in[0].dtype);
    if (bytes > 0 && c->out[0].data != c->in[0].data) memcpy(c->out[0].data, c->in[0].data, bytes);
    return NN_OK;
}

/* Output with the input's dtype and the given shape, which must hold as many elements. */
static nn_status set_same_size(nn_call *c, int ndim, const int64_t *dims) {
    const nn_tensor *x = &c->in[0];
    int64_t n_in = nn_tensor_elements(x), n_out = nn_shape_elements(dims, ndim);
    if (n_in != n_out)
        return nn_call_error(c, NN_ERR_SHAPE, "cannot reshape %lld elements into %lld", (long long)n_in,
                             (long long)n_out);
    nn_tensor_set_shape(&c->out[0], x->dtype, ndim, dims);
    return NN_OK;
}

/* The axes list shared by Squeeze and Unsqueeze: an attribute before opset 13. */
typedef struct axes_params {
    int n_axes; /* -1: from the optional input */
    int64_t axes[NN_MAX_DIMS];
} axes_params;

static nn_status parse_axes(nn_parse_ctx *ctx) {
    axes_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->n_axes = -1;
    if (ctx->opset >= 13) return NN_OK;
    return nn_attr_ints(ctx, "axes", p->axes, NN_MAX_DIMS, &p->n_axes);
}

static nn_status axes_check(const void *params, char *err, size_t err_size) {
    const axes_params *p = params;
    if (!nn_check_count(p->n_axes, NN_MAX_DIMS))
        return nn_check_error(err, err_size, "axes has %d values (at most %d)", p->n_axes, NN_MAX_DIMS);
    for (int k = 0; k < p->n_axes; k++)
        if (!nn_check_axis(p->axes[k]))
            return nn_check_error(err, err_size, "axes[%d] = %lld is out of range", k, (long long)p->axes[k]);
    return NN_OK;
}

/* Axes given to Squeeze / Unsqueeze, normalized against `rank`, each once.
 * *n = -1 when there are none. */
static nn_status read_axes(nn_call *c, int rank, int64_t *axes, int *n) {
    const axes_params *p = c->params;
    *n = p->n_axes;
    if (*n >= 0) {
        memcpy(axes, p->axes, sizeof(int64_t) * (size_t)*n);
    } else if (nn_present(c, 1)) {
        nn_status st = nn_input_ints(c, 1, "axes", axes, NN_MAX_DIMS, n);
        if (st != NN_OK) return st;
    }
    bool seen[NN_MAX_DIMS] = {false};
    for (int i = 0; i < *n; i++) {
        if (!nn_axis_normalize(axes[i], rank, &axes[i]))
            return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axes[i], rank);
        if (seen[axes[i]]) return nn_call_error(c, NN_ERR_INVALID, "axis %lld given twice", (long long)axes[i]);
        seen[axes[i]] = true;
    }
    return NN_OK;
}

/* ---- Reshape */

typedef nn_reshape_params reshape_params;

static nn_status parse_reshape(nn_parse_ctx *ctx) {
    reshape_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->n_shape = -1;
    nn_status st = nn_attr_int(ctx, "allowzero", 0, &p->allowzero);
    if (st != NN_OK || ctx->opset >= 5) return st;
    st = nn_attr_ints(ctx, "shape", p->shape, NN_MAX_DIMS, &p->n_shape);
    if (st == NN_OK && p->n_shape < 0) return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'shape' is required");
    return st;
}

static nn_status reshape_check(const void *params, char *err, size_t err_size) {
    const reshape_params *p = params;
    if (p->allowzero != 0 && p->allowzero != 1)
        return nn_check_error(err, err_size, "allowzero must be 0 or 1, got %lld", (long long)p->allowzero);
    if (!nn_check_count(p->n_shape, NN_MAX_DIMS))
        return nn_check_error(err, err_size, "shape has %d values (at most %d)", p->n_shape, NN_MAX_DIMS);
    return NN_OK;
}

static nn_status infer_reshape(nn_call *c) {
    const reshape_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    int64_t dims[NN_MAX_DIMS];
    int n = p->n_shape;
    if (n >= 0) {
        memcpy(dims, p->shape, sizeof(int64_t) * (size_t)n);
    } else {
        if (!nn_present(c, 1)) return nn_call_error(c, NN_ERR_INVALID, "shape input is missing");
        st = nn_input_ints(c, 1, "shape", dims, NN_MAX_DIMS, &n);
        if (st != NN_OK) return st;
    }
    int infer_at = -1;
    int64_t known = 1;
    for (int k = 0; k < n; k++) {
        if (dims[k] == 0 && !p->allowzero) {
            if (k >= x->ndim)
                return nn_call_error(c, NN_ERR_SHAPE, "shape[%d] = 0 copies a dim the rank-%d input lacks", k, x->ndim);
            dims[k] = x->dims[k];
        }
        if (dims[k] == -1) {
            if (infer_at >= 0) return nn_call_error(c, NN_ERR_INVALID, "shape has more than one -1");
            infer_at = k;
        } else if (dims[k] < 0) {
            return nn_call_error(c, NN_ERR_INVALID, "shape[%d] is negative (%lld)", k, (long long)dims[k]);
        } else if (__builtin_mul_overflow(known, dims[k], &known)) {
            return nn_call_error(c, NN_ERR_SHAPE, "shape holds more elements than fit in 64 bits");
        }
    }
    if (infer_at >= 0) {
        int64_t total = nn_tensor_elements(x);
        if (known == 0 || total % known != 0)
            return nn_call_error(c, NN_ERR_SHAPE, "cannot infer the -1 in shape: %lld elements, others make %lld",
                                 (long long)total, (long long)known);
        dims[infer_at] = total / known;
    }
    return set_same_size(c, n, dims);
}

const nn_op_desc nn_op_Reshape = {.name = "Reshape",
                                  .min_inputs = 1,
                                  .max_inputs = 2,
                                  .min_outputs = 1,
                                  .max_outputs = 1,
                                  .parse = parse_reshape,
                                  .check = reshape_check,
                                  .infer = infer_reshape,
                                  .run = run_copy};

/* ---- Flatten */

typedef struct flatten_params {
    int64_t axis;
} flatten_params;

static nn_status parse_flatten(nn_parse_ctx *ctx) {
    flatten_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    return nn_attr_int(ctx, "axis", 1, &p->axis);
}

static nn_status flatten_check(const void *params, char *err, size_t err_size) {
    const flatten_params *p = params;
    /* axis may equal the rank */
    if (p->axis < -NN_MAX_DIMS || p->axis > NN_MAX_DIMS)
        return nn_check_error(err, err_size, "axis %lld is out of range", (long long)p->axis);
    return NN_OK;
}

static nn_status infer_flatten(nn_call *c) {
    const flatten_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    /* axis may equal the rank: everything goes into the first dim */
    int64_t axis = p->axis < 0 ? p->axis + x->ndim : p->axis;
    if (axis < 0 || axis > x->ndim)
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis, x->ndim);
    int64_t dims[2] = {nn_shape_elements(x->dims, (int)axis),
                       nn_shape_elements(x->dims + axis, x->ndim - (int)axis)};
    return set_same_size(c, 2, dims);
}

const nn_op_desc nn_op_Flatten = {.name = "Flatten",
                                  .min_inputs = 1,
                                  .max_inputs = 1,
                                  .min_outputs = 1,
                                  .max_outputs = 1,
                                  .parse = parse_flatten,
                                  .check = flatten_check,
                                  .infer = infer_flatten,
                                  .run = run_copy};

/* ---- Squeeze */

static nn_status infer_squeeze(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    int64_t axes[NN_MAX_DIMS], dims[NN_MAX_DIMS];
    int n;
    st = read_axes(c, x->ndim, axes, &n);
    if (st != NN_OK) return st;
    bool drop[NN_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        if (x->dims[axes[i]] != 1)
            return nn_call_error(c, NN_ERR_SHAPE, "cannot squeeze axis %lld of size %lld", (long long)axes[i],
                                 (long long)x->dims[axes[i]]);
        drop[axes[i]] = true;
    }
    int r = 0;
    for (int k = 0; k < x->ndim; k++)
        if (!(n < 0 ? x->dims[k] == 1 : drop[k])) dims[r++] = x->dims[k];
    return set_same_size(c, r, dims);
}

const nn_op_desc nn_op_Squeeze = {.name = "Squeeze",
                                  .min_inputs = 1,
                                  .max_inputs = 2,
                                  .min_outputs = 1,
                                  .max_outputs = 1,
                                  .parse = parse_axes,
                                  .check = axes_check,
                                  .infer = infer_squeeze,
                                  .run = run_copy};

/* ---- Unsqueeze */

static nn_status infer_unsqueeze(nn_call *c) {
    const axes_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    if (p->n_axes < 0 && !nn_present(c, 1)) return nn_call_error(c, NN_ERR_INVALID, "axes are required");
    /* the count decides the output rank the axes are normalized against */
    int n = p->n_axes >= 0 ? p->n_axes : (int)nn_tensor_elements(&c->in[1]);
    int r = x->ndim + n;
    if (r > NN_MAX_DIMS) return nn_call_error(c, NN_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, NN_MAX_DIMS);
    int64_t axes[NN_MAX_DIMS], dims[NN_MAX_DIMS];
    st = read_axes(c, r, axes, &n);
    if (st != NN_OK) return st;
    bool inserted[NN_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) inserted[axes[i]] = true;
    for (int k = 0, j = 0; k < r; k++) dims[k] = inserted[k] ? 1 : x->dims[j++];
    return set_same_size(c, r, dims);
}

const nn_op_desc nn_op_Unsqueeze = {.name = "Unsqueeze",
                                    .min_inputs = 1,
                                    .max_inputs = 2,
                                    .min_outputs = 1,
                                    .max_outputs = 1,
                                    .parse = parse_axes,
                                    .check = axes_check,
                                    .infer = infer_unsqueeze,
                                    .run = run_copy};

/* ---- Shape and Size: their values follow from the input's shape, so run
 * never touches the input's data (it may not exist when they are folded). */

typedef struct shape_params {
    int64_t start, end;
    bool has_end;
} shape_params;

static nn_status parse_shape(nn_parse_ctx *ctx) {
    shape_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->has_end = nn_attr_find(ctx, "end") != NULL;
    nn_status st = nn_attr_int(ctx, "start", 0, &p->start);
    if (st == NN_OK) st = nn_attr_int(ctx, "end", 0, &p->end);
    return st;
}

/* start and end may be anything: Shape clamps them to the rank. */
static nn_status shape_check(const void *params, char *err, size_t err_size) {
    const shape_params *p = params;
    if (!nn_check_bool(&p->has_end)) return nn_check_error(err, err_size, "has_end is not a boolean");
    return NN_OK;
}

/* The [start, end) range of axes, clamped into [0, rank] as the spec says. */
static void shape_range(const nn_call *c, int64_t *start, int64_t *end) {
    const shape_params *p = c->params;
    int64_t r = c->in[0].ndim;
    *start = p->start < 0 ? p->start + r : p->start;
    *end = p->has_end ? (p->end < 0 ? p->end + r : p->end) : r;
    *start = *start < 0 ? 0 : *start > r ? r : *start;
    *end = *end < *start ? *start : *end > r ? r : *end;
}

static nn_status infer_shape(nn_call *c) {
    int64_t start, end;
    shape_range(c, &start, &end);
    int64_t n = end - start;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_INT64, 1, &n);
    return NN_OK;
}

static nn_status run_shape(nn_call *c) {
    int64_t start, end;
    shape_range(c, &start, &end);
    int64_t *dst = c->out[0].data;
    for (int64_t k = start; k < end; k++) dst[k - start] = c->in[0].dims[k];
    return NN_OK;
}

const nn_op_desc nn_op_Shape = {.name = "Shape",
                                .min_inputs = 1,
                                .max_inputs = 1,
                                .min_outputs = 1,
                                .max_outputs = 1,
                                .flags = NN_OPF_SHAPE_ONLY,
                                .parse = parse_shape,
                                .check = shape_check,
                                .infer = infer_shape,
                                .run = run_shape};

static nn_status infer_size(nn_call *c) {
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_INT64, 0, NULL);
    return NN_OK;
}

static nn_status run_size(nn_call *c) {
    *(int64_t *)c->out[0].data = nn_tensor_elements(&c->in[0]);
    return NN_OK;
}

const nn_op_desc nn_op_Size = {.name = "Size", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
                               .flags = NN_OPF_SHAPE_ONLY, .infer = infer_size, .run = run_size};

/* ---- Expand: numpy broadcast of the input against a shape (either may be larger) */

static nn_status infer_expand(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    nn_tensor shape = {.dtype = x->dtype};
    st = nn_input_ints(c, 1, "shape", shape.dims, NN_MAX_DIMS, &shape.ndim);
    if (st != NN_OK) return st;
    for (int k = 0; k < shape.ndim; k++)
        if (shape.dims[k] < 0)
            return nn_call_error(c, NN_ERR_INVALID, "shape[%d] is negative (%lld)", k, (long long)shape.dims[k]);
    c->out[0].dtype = x->dtype;
    return nn_broadcast_shape(c, x, &shape, &c->out[0]);
}

static nn_status run_expand(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_tensor *y = &c->out[0];
    int64_t strides[NN_MAX_DIMS];
    nn_broadcast_strides(x, y->ndim, y->dims, strides);
    nn_copy_strided(y->data, x->data, nn_dtype_size(x->dtype), y->ndim, y->dims, strides, c->threads);
    return NN_OK;
}

const nn_op_desc nn_op_Expand = {.name = "Expand", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
                                 .infer = infer_expand, .run = run_expand};
