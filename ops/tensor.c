/* Data movement: Concat, Split, Slice, Pad, Transpose, Tile, Gather,
 * DepthToSpace, SpaceToDepth (the ops that make values are in constant.c).
 *
 * Kernels move elements as opaque units of nn_dtype_size() bytes, so one body
 * serves every dtype the engine holds.  Most of them are a single strided view
 * of the input written out densely (nn_copy_strided). */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "geom.h"
#include "op.h"
#include "par.h"
#include "params.h"

/* Copies smaller than this stay on one thread: a team costs more than it saves. */
#define PARALLEL_BYTES ((int64_t)1 << 18)

static nn_status check_dtype(nn_call *c, const nn_tensor *t) {
    if (nn_dtype_size(t->dtype) == 0)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(t->dtype));
    return NN_OK;
}

/* Row-major element strides of a tensor. */
static void dense_strides(const nn_tensor *t, int64_t *strides) {
    int64_t s = 1;
    for (int k = t->ndim - 1; k >= 0; k--) {
        strides[k] = s;
        s *= t->dims[k];
    }
}

/* ---- ops with one `axis` attribute */

typedef nn_axis_params axis_params;

static nn_status parse_axis(nn_parse_ctx *ctx, int64_t dflt) {
    axis_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    return nn_attr_int(ctx, "axis", dflt, &p->axis);
}

/* ---- Concat */

static nn_status parse_concat(nn_parse_ctx *ctx) {
    /* axis became required in opset 4; before, it defaulted to 1 */
    if (ctx->opset >= 4 && !nn_attr_find(ctx, "axis"))
        return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'axis' is required");
    return parse_axis(ctx, 1);
}

/* Concat and Gather */
static nn_status axis_check(const void *params, char *err, size_t err_size) {
    const axis_params *p = params;
    if (!nn_check_axis(p->axis)) return nn_check_error(err, err_size, "axis %lld is out of range", (long long)p->axis);
    return NN_OK;
}

static nn_status infer_concat(nn_call *c) {
    const axis_params *p = c->params;
    const nn_tensor *a = &c->in[0];
    nn_status st = check_dtype(c, a);
    if (st != NN_OK) return st;
    int64_t axis;
    if (!nn_axis_normalize(p->axis, a->ndim, &axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis,
                             a->ndim);
    int64_t total = 0;
    for (int i = 0; i < c->n_in; i++) {
        const nn_tensor *t = &c->in[i];
        if (t->dtype != a->dtype)
            return nn_call_error(c, NN_ERR_INVALID, "input %d is %s, input 0 is %s", i, nn_dtype_name(t->dtype),
                                 nn_dtype_name(a->dtype));
        if (t->ndim != a->ndim)
            return nn_call_error(c, NN_ERR_SHAPE, "input %d has rank %d, input 0 has rank %d", i, t->ndim,
                                 a->ndim);
        for (int k = 0; k < a->ndim; k++)
            if (k != axis && t->dims[k] != a->dims[k])
                return nn_call_error(c, NN_ERR_SHAPE, "input %d dim %d is %lld, input 0 has %lld", i, k,
                                     (long long)t->dims[k], (long long)a->dims[k]);
        total += t->dims[axis];
    }
    nn_tensor_set_shape(&c->out[0], a->dtype, a->ndim, a->dims);
    c->out[0].dims[axis] = total;
    return NN_OK;
}

/* n rows of `row` bytes, dst and src rows dstride and sstride bytes apart,
 * copied in ranges of rows taken on demand (ops/par.h). */
typedef struct rows_copy {
    char *dst;
    const char *src;
    int64_t dstride, sstride, row;
} rows_copy;

static void copy_rows_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const rows_copy *r = ctx;
    for (int64_t o = lo; o < hi; o++) memcpy(r->dst + o * r->dstride, r->src + o * r->sstride, (size_t)r->row);
}

static void copy_rows(int threads, char *dst, int64_t dstride, const char *src, int64_t sstride, int64_t row,
                      int64_t n) {
    rows_copy r = {.dst = dst, .src = src, .dstride = dstride, .sstride = sstride, .row = row};
    nn_par_for_range(threads, n, 1, copy_rows_range, &r);
}

static nn_status run_concat(nn_call *c) {
    const axis_params *p = c->params;
    nn_tensor *y = &c->out[0];
    int64_t axis;
    nn_axis_normalize(p->axis, y->ndim, &axis);
    size_t esz = nn_dtype_size(y->dtype);
    int64_t outer = nn_shape_elements(y->dims, (int)axis);
    int64_t tail = nn_shape_elements(y->dims + axis + 1, y->ndim - (int)axis - 1) * (int64_t)esz;
    int64_t out_row = y->dims[axis] * tail;
    if (outer * out_row == 0) return NN_OK;
    int64_t offset = 0;
    for (int i = 0; i < c->n_in; i++) {
        int64_t row = c->in[i].dims[axis] * tail;
        const char *src = c->in[i].data;
        char *dst = (char *)y->data + offset;
        if (row > 0) {
            copy_rows(outer > 1 && outer * row > PARALLEL_BYTES ? c->threads : 1, dst, out_row, src, row, row, outer);
        }
        offset += row;
    }
    return NN_OK;
}

const nn_op_desc nn_op_Concat = {.name = "Concat",
                                 .min_inputs = 1,
                                 .max_inputs = -1,
                                 .min_outputs = 1,
                                 .max_outputs = 1,
                                 .parse = parse_concat,
                                 .check = axis_check,
                                 .infer = infer_concat,
                                 .run = run_concat};

/* ---- Split */

typedef struct split_params {
    int64_t axis;
    int n_split; /* -1: sizes come from the optional input, or are equal */
    int64_t split[];
} split_params;

static nn_status parse_split(nn_parse_ctx *ctx) {
    const nn_attr *a = ctx->opset < 13 ? nn_attr_find(ctx, "split") : NULL;
    int n = a && a->type == NN_ATTR_INTS ? a->n : 0;
    split_params *p = nn_params_alloc(ctx, sizeof *p + sizeof(int64_t) * (size_t)n);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    nn_status st = nn_attr_int(ctx, "axis", 0, &p->axis);
    if (st != NN_OK) return st;
    p->n_split = -1;
    if (a) return nn_attr_ints(ctx, "split", p->split, n, &p->n_split);
    return NN_OK;
}

/* The sizes must fit in NN_PARAMS_MAX bytes (op.h). */
static nn_status split_check(const void *params, char *err, size_t err_size) {
    const split_params *p = params;
    const int cap = (int)((NN_PARAMS_MAX - sizeof *p) / sizeof(int64_t));
    if (!nn_check_axis(p->axis)) return nn_check_error(err, err_size, "axis %lld is out of range", (long long)p->axis);
    if (!nn_check_count(p->n_split, cap))
        return nn_check_error(err, err_size, "split has %d sizes (at most %d)", p->n_split, cap);
    return NN_OK;
}

/* Size of output k along the split axis (infer has checked the sizes). */
static int64_t split_size(const nn_call *c, int64_t dim, int k) {
    const split_params *p = c->params;
    if (p->n_split >= 0) return p->split[k];
    if (nn_present(c, 1)) return nn_tensor_get_int(&c->in[1], k);
    return dim / c->n_out;
}

static nn_status infer_split(nn_call *c) {
    const split_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    int64_t axis;
    if (!nn_axis_normalize(p->axis, x->ndim, &axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis,
                             x->ndim);
    int64_t dim = x->dims[axis];
    if (p->n_split >= 0 || nn_present(c, 1)) {
        int64_t n = p->n_split;
        if (n < 0) {
            const nn_tensor *s = &c->in[1];
            if (s->dtype != NN_DTYPE_INT64 && s->dtype != NN_DTYPE_INT32)
                return nn_call_error(c, NN_ERR_INVALID, "split must be int64, got %s", nn_dtype_name(s->dtype));
            n = nn_shape_elements(s->dims, s->ndim);
            if (n > 0 && !s->data) return NN_DYNAMIC;
        }
        if (n != c->n_out)
            return nn_call_error(c, NN_ERR_INVALID, "split has %lld sizes for %d outputs", (long long)n, c->n_out);
        int64_t sum = 0;
        for (int k = 0; k < c->n_out; k++) {
            int64_t s = split_size(c, dim, k);
            if (s < 0) return nn_call_error(c, NN_ERR_INVALID, "split size %d is negative (%lld)", k, (long long)s);
            sum += s;
        }
        if (sum != dim)
            return nn_call_error(c, NN_ERR_SHAPE, "split sizes add up to %lld, axis %lld has %lld", (long long)sum,
                                 (long long)axis, (long long)dim);
    } else if (dim % c->n_out != 0) {
        return nn_call_error(c, NN_ERR_SHAPE, "axis %lld of size %lld does not split into %d equal parts",
                             (long long)axis, (long long)dim, c->n_out);
    }
    for (int k = 0; k < c->n_out; k++) {
        nn_tensor_set_shape(&c->out[k], x->dtype, x->ndim, x->dims);
        c->out[k].dims[axis] = split_size(c, dim, k);
    }
    return NN_OK;
}

static nn_status run_split(nn_call *c) {
    const split_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t axis;
    nn_axis_normalize(p->axis, x->ndim, &axis);
    size_t esz = nn_dtype_size(x->dtype);
    int64_t outer = nn_shape_elements(x->dims, (int)axis);
    int64_t tail = nn_shape_elements(x->dims + axis + 1, x->ndim - (int)axis - 1) * (int64_t)esz;
    int64_t in_row = x->dims[axis] * tail;
    if (outer * in_row == 0) return NN_OK;
    int64_t offset = 0;
    for (int k = 0; k < c->n_out; k++) {
        int64_t row = split_size(c, x->dims[axis], k) * tail;
        const char *src = (const char *)x->data + offset;
        char *dst = c->out[k].data;
        if (row > 0) {
            copy_rows(outer > 1 && outer * row > PARALLEL_BYTES ? c->threads : 1, dst, row, src, in_row, row, outer);
        }
        offset += row;
    }
    return NN_OK;
}

/* any number of outputs */
const nn_op_desc nn_op_Split = {.name = "Split",
                                .min_inputs = 1,
                                .max_inputs = 2,
                                .min_outputs = 1,
                                .max_outputs = -1,
                                .parse = parse_split,
                                .check = split_check,
                                .infer = infer_split,
                                .run = run_split};

/* ---- Slice */

typedef struct slice_params {
    int n;             /* opset < 10: starts/ends/axes attributes; -1 from opset 10 */
    bool has_axes;
    int64_t starts[NN_MAX_DIMS], ends[NN_MAX_DIMS], axes[NN_MAX_DIMS];
} slice_params;

static nn_status parse_slice(nn_parse_ctx *ctx) {
    slice_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->n = -1;
    if (ctx->opset >= 10) return NN_OK;
    int ns, ne, na;
    nn_status st = nn_attr_ints(ctx, "starts", p->starts, NN_MAX_DIMS, &ns);
    if (st == NN_OK) st = nn_attr_ints(ctx, "ends", p->ends, NN_MAX_DIMS, &ne);
    if (st == NN_OK) st = nn_attr_ints(ctx, "axes", p->axes, NN_MAX_DIMS, &na);
    if (st != NN_OK) return st;
    if (ns < 0 || ns != ne || (na >= 0 && na != ns))
        return nn_parse_error(ctx, NN_ERR_INVALID, "starts, ends and axes must be given with equal lengths");
    p->n = ns;
    p->has_axes = na >= 0;
    return NN_OK;
}

static nn_status slice_check(const void *params, char *err, size_t err_size) {
    const slice_params *p = params;
    if (!nn_check_bool(&p->has_axes)) return nn_check_error(err, err_size, "has_axes is not a boolean");
    if (!nn_check_count(p->n, NN_MAX_DIMS))
        return nn_check_error(err, err_size, "starts has %d values (at most %d)", p->n, NN_MAX_DIMS);
    return NN_OK;
}

/* Effective start, step and element count per axis of the input, per the
 * ONNX clamping rules. */
static nn_status slice_plan(nn_call *c, int64_t *start, int64_t *step, int64_t *count) {
    const slice_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t starts[NN_MAX_DIMS], ends[NN_MAX_DIMS], axes[NN_MAX_DIMS], steps[NN_MAX_DIMS];
    int n = p->n, n_axes = p->has_axes ? p->n : -1, n_steps = -1;
    if (n >= 0) {
        memcpy(starts, p->starts, sizeof(int64_t) * (size_t)n);
        memcpy(ends, p->ends, sizeof(int64_t) * (size_t)n);
        memcpy(axes, p->axes, sizeof(int64_t) * (size_t)n);
    } else {
        int ne;
        if (!nn_present(c, 1) || !nn_present(c, 2))
            return nn_call_error(c, NN_ERR_INVALID, "inputs starts and ends are required");
        nn_status st = nn_input_ints(c, 1, "starts", starts, NN_MAX_DIMS, &n);
        if (st == NN_OK) st = nn_input_ints(c, 2, "ends", ends, NN_MAX_DIMS, &ne);
        if (st == NN_OK && nn_present(c, 3)) st = nn_input_ints(c, 3, "axes", axes, NN_MAX_DIMS, &n_axes);
        if (st == NN_OK && nn_present(c, 4)) st = nn_input_ints(c, 4, "steps", steps, NN_MAX_DIMS, &n_steps);
        if (st != NN_OK) return st;
        if (ne != n || (n_axes >= 0 && n_axes != n) || (n_steps >= 0 && n_steps != n))
            return nn_call_error(c, NN_ERR_INVALID, "starts, ends, axes and steps must have equal lengths");
    }
    for (int k = 0; k < x->ndim; k++) {
        start[k] = 0;
        step[k] = 1;
        count[k] = x->dims[k];
    }
    bool seen[NN_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        int64_t axis = n_axes >= 0 ? axes[i] : i;
        if (!nn_axis_normalize(axis, x->ndim, &axis))
            return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, x->ndim);
        if (seen[axis]) return nn_call_error(c, NN_ERR_INVALID, "axis %lld sliced twice", (long long)axis);
        seen[axis] = true;
        int64_t dim = x->dims[axis], s = starts[i], e = ends[i];
        int64_t st = n_steps >= 0 ? steps[i] : 1;
        if (st == 0) return nn_call_error(c, NN_ERR_INVALID, "step for axis %lld is 0", (long long)axis);
        if (st == INT64_MIN) st = -INT64_MAX; /* so that -st exists; the count is the same */
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        int64_t n_el;
        if (st > 0) {
            s = s < 0 ? 0 : s > dim ? dim : s;
            e = e < 0 ? 0 : e > dim ? dim : e;
            n_el = e > s ? (e - s - 1) / st + 1 : 0;
        } else {
            s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            n_el = s > e ? (s - e - 1) / -st + 1 : 0;
        }
        start[axis] = n_el > 0 ? s : 0;
        step[axis] = n_el > 1 ? st : 1; /* a single element needs no stride (and cannot overflow one) */
        count[axis] = n_el;
    }
    return NN_OK;
}

static nn_status infer_slice(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    int64_t start[NN_MAX_DIMS], step[NN_MAX_DIMS], count[NN_MAX_DIMS];
    st = slice_plan(c, start, step, count);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], x->dtype, x->ndim, count);
    return NN_OK;
}

static nn_status run_slice(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int64_t start[NN_MAX_DIMS], step[NN_MAX_DIMS], count[NN_MAX_DIMS], strides[NN_MAX_DIMS];
    nn_status st = slice_plan(c, start, step, count);
    if (st != NN_OK) return st;
    if (nn_shape_elements(count, x->ndim) == 0) return NN_OK;
    dense_strides(x, strides);
    int64_t offset = 0;
    for (int k = 0; k < x->ndim; k++) {
        offset += start[k] * strides[k];
        strides[k] *= step[k];
    }
    size_t esz = nn_dtype_size(x->dtype);
    nn_copy_strided(c->out[0].data, (const char *)x->data + offset * (int64_t)esz, esz, x->ndim, count, strides,
                    c->threads);
    return NN_OK;
}

const nn_op_desc nn_op_Slice = {.name = "Slice", .min_inputs = 1, .max_inputs = 5, .min_outputs = 1, .max_outputs = 1,
                                .parse = parse_slice, .check = slice_check, .infer = infer_slice, .run = run_slice};

/* ---- Pad */

enum { PAD_CONSTANT = NN_PAD_CONSTANT, PAD_REFLECT = NN_PAD_REFLECT, PAD_EDGE = NN_PAD_EDGE };
typedef nn_pad_params pad_params; /* params.h: passes/fuse_pad.c reads it */

static nn_status parse_pad(nn_parse_ctx *ctx) {
    pad_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    const char *mode;
    nn_status st = nn_attr_string(ctx, "mode", "constant", &mode);
    if (st != NN_OK) return st;
    if (strcmp(mode, "constant") == 0) p->mode = PAD_CONSTANT;
    else if (strcmp(mode, "reflect") == 0) p->mode = PAD_REFLECT;
    else if (strcmp(mode, "edge") == 0) p->mode = PAD_EDGE;
    else return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "mode '%s' not supported", mode);
    p->n_pads = -1;
    if (ctx->opset >= 11) return NN_OK;
    /* opset 1 named the attribute `paddings` */
    const char *name = nn_attr_find(ctx, "paddings") ? "paddings" : "pads";
    st = nn_attr_ints(ctx, name, p->pads, 2 * NN_MAX_DIMS, &p->n_pads);
    if (st == NN_OK) st = nn_attr_float(ctx, "value", 0.0f, &p->value);
    if (st == NN_OK && p->n_pads < 0) return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'pads' is required");
    return st;
}

static nn_status pad_check(const void *params, char *err, size_t err_size) {
    const pad_params *p = params;
    if (p->mode != PAD_CONSTANT && p->mode != PAD_REFLECT && p->mode != PAD_EDGE)
        return nn_check_error(err, err_size, "mode %d is unknown", p->mode);
    if (!nn_check_count(p->n_pads, 2 * NN_MAX_DIMS))
        return nn_check_error(err, err_size, "pads has %d values (at most %d)", p->n_pads, 2 * NN_MAX_DIMS);
    for (int k = 0; k < p->n_pads; k++)
        if (!nn_check_extent(p->pads[k]))
            return nn_check_error(err, err_size, "pads[%d] = %lld is out of range", k, (long long)p->pads[k]);
    return NN_OK;
}

/* Padding before and after each axis of the input. */
static nn_status pad_plan(nn_call *c, int64_t *before, int64_t *after) {
    const pad_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t pads[2 * NN_MAX_DIMS], axes[NN_MAX_DIMS];
    int n = p->n_pads, n_axes = -1;
    if (n >= 0) {
        memcpy(pads, p->pads, sizeof(int64_t) * (size_t)n);
    } else {
        if (!nn_present(c, 1)) return nn_call_error(c, NN_ERR_INVALID, "input pads is required");
        nn_status st = nn_input_ints(c, 1, "pads", pads, 2 * NN_MAX_DIMS, &n);
        if (st == NN_OK && nn_present(c, 3)) st = nn_input_ints(c, 3, "axes", axes, NN_MAX_DIMS, &n_axes);
        if (st != NN_OK) return st;
    }
    int n_ax = n_axes >= 0 ? n_axes : x->ndim;
    if (n != 2 * n_ax)
        return nn_call_error(c, NN_ERR_INVALID, "pads has %d values, expected %d", n, 2 * n_ax);
    for (int k = 0; k < x->ndim; k++) before[k] = after[k] = 0;
    for (int i = 0; i < n_ax; i++) {
        int64_t axis = n_axes >= 0 ? axes[i] : i;
        if (!nn_axis_normalize(axis, x->ndim, &axis))
            return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, x->ndim);
        before[axis] = pads[i];
        after[axis] = pads[i + n_ax];
        int64_t dim = x->dims[axis], out = dim + pads[i] + pads[i + n_ax];
        if (out < 0)
            return nn_call_error(c, NN_ERR_SHAPE, "pads %lld, %lld crop more than axis %lld has (%lld)",
                                 (long long)pads[i], (long long)pads[i + n_ax], (long long)axis, (long long)dim);
        if (p->mode != PAD_CONSTANT && dim == 0 && out > 0)
            return nn_call_error(c, NN_ERR_SHAPE, "cannot %s-pad empty axis %lld",
                                 p->mode == PAD_EDGE ? "edge" : "reflect", (long long)axis);
    }
    return NN_OK;
}

static nn_status infer_pad(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    if (nn_present(c, 2) && c->in[2].dtype != x->dtype)
        return nn_call_error(c, NN_ERR_INVALID, "constant_value is %s, data is %s", nn_dtype_name(c->in[2].dtype),
                             nn_dtype_name(x->dtype));
    int64_t before[NN_MAX_DIMS], after[NN_MAX_DIMS];
    st = pad_plan(c, before, after);
    if (st != NN_OK) return st;
    nn_tensor *y = &c->out[0];
    nn_tensor_set_shape(y, x->dtype, x->ndim, x->dims);
    for (int k = 0; k < x->ndim; k++) y->dims[k] += before[k] + after[k];
    return NN_OK;
}

/* Input index that output position p (relative to the unpadded start) reads;
 * -1 for the constant. */
static int64_t pad_source(int64_t p, int64_t n, int mode) {
    if (p >= 0 && p < n) return p;
    if (mode == PAD_EDGE) return p < 0 ? 0 : n - 1;
    if (mode == PAD_REFLECT) {
        if (n == 1) return 0;
        int64_t period = 2 * (n - 1);
        p %= period;
        if (p < 0) p += period;
        return p < n ? p : period - p;
    }
    return -1;
}

/* Everything a range of Pad output rows (`len` elements each) reads. */
typedef struct pad_job {
    const char *src;
    char *dst;
    const int64_t *x_dims, *y_dims, *before, *strides;
    uint64_t value; /* one element of x's dtype */
    size_t esz;
    int64_t len, n_last, b_last, lo, hi; /* lo, hi: the unpadded middle of a row */
    int r, mode;
} pad_job;

static void pad_range(void *ctx, int64_t row_lo, int64_t row_hi, int seat) {
    (void)seat;
    const pad_job *pj = ctx;
    const char *src = pj->src;
    size_t esz = pj->esz;
    int64_t len = pj->len, n_last = pj->n_last, b_last = pj->b_last, lo = pj->lo, hi = pj->hi;
    int r = pj->r, mode = pj->mode;
    for (int64_t row = row_lo; row < row_hi; row++) {
        char *dst = pj->dst + row * len * (int64_t)esz;
        int64_t off = 0, q = row;
        bool inside = true;
        for (int k = r - 2; k >= 0; k--) {
            int64_t s = pad_source(q % pj->y_dims[k] - pj->before[k], pj->x_dims[k], mode);
            q /= pj->y_dims[k];
            if (s < 0) inside = false;
            off += s * pj->strides[k];
        }
        if (!inside) {
            nn_copy_run(dst, (const char *)&pj->value, esz, len, 0);
            continue;
        }
        for (int64_t j = 0; j < len; j++) {
            if (j == lo && hi > lo) {
                memcpy(dst + j * esz, src + (off + lo - b_last) * (int64_t)esz, (size_t)(hi - lo) * esz);
                j = hi - 1;
                continue;
            }
            int64_t s = pad_source(j - b_last, n_last, mode);
            memcpy(dst + j * esz, s < 0 ? (const char *)&pj->value : src + (off + s) * (int64_t)esz, esz);
        }
    }
}

static nn_status run_pad(nn_call *c) {
    const pad_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nn_tensor *y = &c->out[0];
    int64_t before[NN_MAX_DIMS], after[NN_MAX_DIMS], strides[NN_MAX_DIMS];
    nn_status st = pad_plan(c, before, after);
    if (st != NN_OK) return st;
    size_t esz = nn_dtype_size(x->dtype);
    int r = x->ndim;
    if (r == 0) {
        memcpy(y->data, x->data, esz);
        return NN_OK;
    }
    int64_t len = y->dims[r - 1], rows = nn_shape_elements(y->dims, r - 1);
    if (rows * len == 0) return NN_OK;
    uint64_t value = 0; /* one element of x's dtype, zero by default */
    if (p->n_pads >= 0) nn_store_double(&value, x->dtype, p->value);
    else if (nn_present(c, 2) && nn_tensor_elements(&c->in[2]) > 0) memcpy(&value, c->in[2].data, esz);
    dense_strides(x, strides);
    int64_t n_last = x->dims[r - 1], b_last = before[r - 1];
    /* the unpadded middle of each output row is one contiguous input run */
    int64_t lo = b_last < 0 ? 0 : b_last > len ? len : b_last;
    int64_t hi = b_last + n_last < lo ? lo : b_last + n_last > len ? len : b_last + n_last;
    pad_job j = {.src = x->data,
                 .dst = y->data,
                 .x_dims = x->dims,
                 .y_dims = y->dims,
                 .before = before,
                 .strides = strides,
                 .value = value,
                 .esz = esz,
                 .len = len,
                 .n_last = n_last,
                 .b_last = b_last,
                 .lo = lo,
                 .hi = hi,
                 .r = r,
                 .mode = p->mode};
    /* a task copies at least ~4 KiB */
    nn_par_for_range(rows > 1 && rows * len * (int64_t)esz > PARALLEL_BYTES ? c->threads : 1, rows,
                     4096 / (len * (int64_t)esz) + 1, pad_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_Pad = {.name = "Pad", .min_inputs = 1, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
                              .parse = parse_pad, .check = pad_check, .infer = infer_pad, .run = run_pad};

/* ---- Transpose */

typedef nn_transpose_params transpose_params;

static nn_status parse_transpose(nn_parse_ctx *ctx) {
    transpose_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    return nn_attr_ints(ctx, "perm", p->perm, NN_MAX_DIMS, &p->n_perm);
}

static nn_status transpose_check(const void *params, char *err, size_t err_size) {
    const transpose_params *p = params;
    if (!nn_check_count(p->n_perm, NN_MAX_DIMS))
        return nn_check_error(err, err_size, "perm has %d values (at most %d)", p->n_perm, NN_MAX_DIMS);
    return NN_OK;
}

static nn_status transpose_perm(nn_call *c, int64_t *perm) {
    const transpose_params *p = c->params;
    int r = c->in[0].ndim;
    if (p->n_perm < 0) {
        for (int k = 0; k < r; k++) perm[k] = r - 1 - k;
        return NN_OK;
    }
    if (p->n_perm != r)
        return nn_call_error(c, NN_ERR_INVALID, "perm has %d axes, input has rank %d", p->n_perm, r);
    bool seen[NN_MAX_DIMS] = {false};
    for (int k = 0; k < r; k++) {
        if (!nn_axis_normalize(p->perm[k], r, &perm[k]) || seen[perm[k]])
            return nn_call_error(c, NN_ERR_INVALID, "perm is not a permutation of 0..%d", r - 1);
        seen[perm[k]] = true;
    }
    return NN_OK;
}

nn_status nn_transpose_perm(nn_call *c, int64_t *perm) { return transpose_perm(c, perm); }

static nn_status infer_transpose(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    int64_t perm[NN_MAX_DIMS];
    st = transpose_perm(c, perm);
    if (st != NN_OK) return st;
    nn_tensor *y = &c->out[0];
    y->dtype = x->dtype;
    y->ndim = x->ndim;
    for (int k = 0; k < x->ndim; k++) y->dims[k] = x->dims[perm[k]];
    return NN_OK;
}

static nn_status run_transpose(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int64_t perm[NN_MAX_DIMS], in_strides[NN_MAX_DIMS], strides[NN_MAX_DIMS];
    nn_status st = transpose_perm(c, perm);
    if (st != NN_OK) return st;
    dense_strides(x, in_strides);
    for (int k = 0; k < x->ndim; k++) strides[k] = in_strides[perm[k]];
    nn_copy_strided(c->out[0].data, x->data, nn_dtype_size(x->dtype), x->ndim, c->out[0].dims, strides,
                    c->threads);
    return NN_OK;
}

const nn_op_desc nn_op_Transpose = {.name = "Transpose",
                                    .min_inputs = 1,
                                    .max_inputs = 1,
                                    .min_outputs = 1,
                                    .max_outputs = 1,
                                    .parse = parse_transpose,
                                    .check = transpose_check,
                                    .infer = infer_transpose,
                                    .run = run_transpose};

/* ---- Tile */

static nn_status tile_repeats(nn_call *c, int64_t *repeats) {
    const nn_tensor *x = &c->in[0];
    int n;
    nn_status st = nn_input_ints(c, 1, "repeats", repeats, NN_MAX_DIMS, &n);
    if (st != NN_OK) return st;
    if (n != x->ndim) return nn_call_error(c, NN_ERR_INVALID, "repeats has %d values, input has rank %d", n, x->ndim);
    for (int k = 0; k < n; k++)
        if (repeats[k] < 0)
            return nn_call_error(c, NN_ERR_INVALID, "repeats[%d] is negative (%lld)", k, (long long)repeats[k]);
    return NN_OK;
}

static nn_status infer_tile(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    int64_t repeats[NN_MAX_DIMS];
    st = tile_repeats(c, repeats);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], x->dtype, x->ndim, x->dims);
    for (int k = 0; k < x->ndim; k++) c->out[0].dims[k] *= repeats[k];
    return NN_OK;
}

static nn_status run_tile(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int64_t repeats[NN_MAX_DIMS], in_strides[NN_MAX_DIMS];
    nn_status st = tile_repeats(c, repeats);
    if (st != NN_OK) return st;
    /* output axis k read as (repeat, index): the repeat axis has stride 0 */
    int64_t dims[VIEW_MAX_DIMS], strides[VIEW_MAX_DIMS];
    dense_strides(x, in_strides);
    for (int k = 0; k < x->ndim; k++) {
        dims[2 * k] = repeats[k];
        strides[2 * k] = 0;
        dims[2 * k + 1] = x->dims[k];
        strides[2 * k + 1] = in_strides[k];
    }
    nn_copy_strided(c->out[0].data, x->data, nn_dtype_size(x->dtype), 2 * x->ndim, dims, strides, c->threads);
    return NN_OK;
}

const nn_op_desc nn_op_Tile = {.name = "Tile", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
                               .infer = infer_tile, .run = run_tile};

/* ---- Gather */

static nn_status parse_gather(nn_parse_ctx *ctx) { return parse_axis(ctx, 0); }

static nn_status infer_gather(nn_call *c) {
    const axis_params *p = c->params;
    const nn_tensor *x = &c->in[0], *idx = &c->in[1];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    if (idx->dtype != NN_DTYPE_INT64 && idx->dtype != NN_DTYPE_INT32)
        return nn_call_error(c, NN_ERR_INVALID, "indices must be int32 or int64, got %s", nn_dtype_name(idx->dtype));
    int64_t axis;
    if (!nn_axis_normalize(p->axis, x->ndim, &axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis, x->ndim);
    int r = x->ndim - 1 + idx->ndim;
    if (r > NN_MAX_DIMS)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, NN_MAX_DIMS);
    nn_tensor *y = &c->out[0];
    y->dtype = x->dtype;
    y->ndim = r;
    int d = 0;
    for (int k = 0; k < axis; k++) y->dims[d++] = x->dims[k];
    for (int k = 0; k < idx->ndim; k++) y->dims[d++] = idx->dims[k];
    for (int k = (int)axis + 1; k < x->ndim; k++) y->dims[d++] = x->dims[k];
    return NN_OK;
}

/* Output rows [lo, hi) of Gather: row t is input row (t / n_idx, idx[t % n_idx]). */
typedef struct gather_job {
    const char *src;
    char *dst;
    const nn_tensor *idx;
    int64_t dim, n_idx, row; /* row: bytes */
} gather_job;

static void gather_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const gather_job *j = ctx;
    int64_t dim = j->dim, n_idx = j->n_idx, row = j->row;
    for (int64_t t = lo; t < hi; t++) {
        int64_t o = t / n_idx, i = nn_tensor_get_int(j->idx, t % n_idx);
        if (i < 0) i += dim;
        memcpy(j->dst + t * row, j->src + (o * dim + i) * row, (size_t)row);
    }
}

static nn_status run_gather(nn_call *c) {
    const axis_params *p = c->params;
    const nn_tensor *x = &c->in[0], *idx = &c->in[1];
    int64_t axis;
    nn_axis_normalize(p->axis, x->ndim, &axis);
    int64_t dim = x->dims[axis], n_idx = nn_tensor_elements(idx);
    for (int64_t j = 0; j < n_idx; j++) {
        int64_t i = nn_tensor_get_int(idx, j);
        if (i < -dim || i >= dim)
            return nn_call_error(c, NN_ERR_INVALID, "index %lld out of range for axis %lld of size %lld",
                                 (long long)i, (long long)axis, (long long)dim);
    }
    size_t esz = nn_dtype_size(x->dtype);
    int64_t outer = nn_shape_elements(x->dims, (int)axis);
    int64_t row = nn_shape_elements(x->dims + axis + 1, x->ndim - (int)axis - 1) * (int64_t)esz;
    int64_t n = outer * n_idx;
    if (n * row == 0) return NN_OK;
    gather_job j = {.src = x->data, .dst = c->out[0].data, .idx = idx, .dim = dim, .n_idx = n_idx, .row = row};
    /* a task copies at least ~4 KiB */
    nn_par_for_range(n > 1 && n * row > PARALLEL_BYTES ? c->threads : 1, n, 4096 / row + 1, gather_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_Gather = {.name = "Gather", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
                                 .parse = parse_gather, .check = axis_check, .infer = infer_gather, .run = run_gather};

/* ---- DepthToSpace / SpaceToDepth: block rearrangements of NCHW tensors */

typedef struct block_params {
    int64_t blocksize;
    bool crd; /* DepthToSpace mode CRD (column, row, depth); default DCR */
} block_params;

static nn_status parse_block(nn_parse_ctx *ctx) {
    block_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    const char *mode;
    nn_status st = nn_attr_int(ctx, "blocksize", 0, &p->blocksize);
    if (st == NN_OK) st = nn_attr_string(ctx, "mode", "DCR", &mode);
    if (st != NN_OK) return st;
    if (strcmp(mode, "CRD") == 0) p->crd = true;
    else if (strcmp(mode, "DCR") != 0) return nn_parse_error(ctx, NN_ERR_INVALID, "mode '%s' is not DCR or CRD", mode);
    return NN_OK;
}

/* blocksize is squared against channel counts: bounded so that cannot overflow */
static nn_status block_check(const void *params, char *err, size_t err_size) {
    const block_params *p = params;
    if (p->blocksize <= 0 || p->blocksize > NN_ATTR_EXTENT_MAX)
        return nn_check_error(err, err_size, "blocksize must be positive, got %lld", (long long)p->blocksize);
    if (!nn_check_bool(&p->crd)) return nn_check_error(err, err_size, "mode is not a boolean");
    return NN_OK;
}

static nn_status infer_block(nn_call *c, bool to_space) {
    const block_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nn_status st = check_dtype(c, x);
    if (st != NN_OK) return st;
    if (x->ndim != 4) return nn_call_error(c, NN_ERR_SHAPE, "input must be 4-D (NCHW), got rank %d", x->ndim);
    int64_t b = p->blocksize;
    nn_tensor *y = &c->out[0];
    nn_tensor_set_shape(y, x->dtype, 4, x->dims);
    if (to_space) {
        if (x->dims[1] % (b * b) != 0)
            return nn_call_error(c, NN_ERR_SHAPE, "channels %lld not divisible by blocksize^2 = %lld",
                                 (long long)x->dims[1], (long long)(b * b));
        y->dims[1] /= b * b;
        y->dims[2] *= b;
        y->dims[3] *= b;
    } else {
        if (x->dims[2] % b != 0 || x->dims[3] % b != 0)
            return nn_call_error(c, NN_ERR_SHAPE, "spatial dims %lldx%lld not divisible by blocksize %lld",
                                 (long long)x->dims[2], (long long)x->dims[3], (long long)b);
        y->dims[1] *= b * b;
        y->dims[2] /= b;
        y->dims[3] /= b;
    }
    return NN_OK;
}

static nn_status infer_depth_to_space(nn_call *c) { return infer_block(c, true); }
static nn_status infer_space_to_depth(nn_call *c) { return infer_block(c, false); }

/* The output, viewed as 6 axes, reads the input through these strides
 * (the reshape-transpose-reshape of the ONNX definition, as one view). */
static nn_status run_depth_to_space(nn_call *c) {
    const block_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t b = p->blocksize, C = x->dims[1], H = x->dims[2], W = x->dims[3], Co = C / (b * b), HW = H * W;
    /* output (N, C', H, b, W, b) */
    int64_t dims[6] = {x->dims[0], Co, H, b, W, b};
    int64_t dcr[6] = {C * HW, HW, W, b * Co * HW, 1, Co * HW};
    int64_t crd[6] = {C * HW, b * b * HW, W, b * HW, 1, HW};
    nn_copy_strided(c->out[0].data, x->data, nn_dtype_size(x->dtype), 6, dims, p->crd ? crd : dcr, c->threads);
    return NN_OK;
}

static nn_status run_space_to_depth(nn_call *c) {
    const block_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t b = p->blocksize, C = x->dims[1], H = x->dims[2], W = x->dims[3];
    /* output (N, b, b, C, H/b, W/b) */
    int64_t dims[6] = {x->dims[0], b, b, C, H / b, W / b};
    int64_t strides[6] = {C * H * W, W, 1, H * W, b * W, b};
    nn_copy_strided(c->out[0].data, x->data, nn_dtype_size(x->dtype), 6, dims, strides, c->threads);
    return NN_OK;
}

const nn_op_desc nn_op_DepthToSpace = {.name = "DepthToSpace",
                                       .min_inputs = 1,
                                       .max_inputs = 1,
                                       .min_outputs = 1,
                                       .max_outputs = 1,
                                       .parse = parse_block,
                                       .check = block_check,
                                       .infer = infer_depth_to_space,
                                       .run = run_depth_to_space};
const nn_op_desc nn_op_SpaceToDepth = {.name = "SpaceToDepth",
                                       .min_inputs = 1,
                                       .max_inputs = 1,
                                       .min_outputs = 1,
                                       .max_outputs = 1,
                                       .parse = parse_block,
                                       .check = block_check,
                                       .infer = infer_space_to_depth,
                                       .run = run_space_to_depth};
