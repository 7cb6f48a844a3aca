/* Resize and Upsample, modes nearest and (N-)linear.
 *
 * Each axis is resampled independently, so run precomputes per output
 * coordinate of every axis which input indices it reads and with what
 * weights (two taps; nearest uses one).  An output value is then the
 * separable product of the taps of its coordinates.
 *
 * Coordinates follow the ONNX reference: with scales, the "resized length"
 * in the transforms is in_dim * scale (not the floored output dim); with
 * sizes, the scale is out_dim / in_dim.  Samples outside the input clamp to
 * the edge. */
#include <math.h>
#include <string.h>

#include "geom.h"
#include "op.h"

typedef enum coord_mode {
    COORD_HALF_PIXEL,
    COORD_HALF_PIXEL_SYMMETRIC,
    COORD_PYTORCH_HALF_PIXEL,
    COORD_ALIGN_CORNERS,
    COORD_ASYMMETRIC,
    COORD_TF_HALF_PIXEL_FOR_NN,
} coord_mode;

typedef enum nearest_mode {
    NEAREST_ROUND_PREFER_FLOOR,
    NEAREST_ROUND_PREFER_CEIL,
    NEAREST_FLOOR,
    NEAREST_CEIL,
} nearest_mode;

typedef struct resize_params {
    bool linear;
    coord_mode coord;
    nearest_mode nearest;
    /* input positions of scales and sizes; -1 when the form has none */
    int scales_input, sizes_input;
    int n_scales_attr; /* Upsample 7-8: scales as an attribute; -1 otherwise */
    float scales_attr[NN_MAX_DIMS];
    int n_axes; /* opset 18: scales/sizes cover only these axes; -1 = all */
    int64_t axes[NN_MAX_DIMS];
} resize_params;

/* Finds `s` in a NULL-terminated list; -1 if absent. */
static int name_index(const char *s, const char *const *names) {
    for (int i = 0; names[i]; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static nn_status parse_mode(nn_parse_ctx *ctx, resize_params *p) {
    const char *mode;
    nn_status st = nn_attr_string(ctx, "mode", "nearest", &mode);
    if (st != NN_OK) return st;
    if (strcmp(mode, "cubic") == 0)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "mode 'cubic' is not supported (only nearest and linear)");
    if (strcmp(mode, "nearest") != 0 && strcmp(mode, "linear") != 0)
        return nn_parse_error(ctx, NN_ERR_INVALID, "unknown mode '%s'", mode);
    p->linear = strcmp(mode, "linear") == 0;
    return NN_OK;
}

/* Resize 10 and Upsample behave like Resize 11 with asymmetric coordinates
 * and floor rounding (the conversion ONNX's own version converter applies). */
static resize_params *params_legacy(nn_parse_ctx *ctx) {
    resize_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NULL;
    p->coord = COORD_ASYMMETRIC;
    p->nearest = NEAREST_FLOOR;
    p->scales_input = 1;
    p->sizes_input = -1;
    p->n_scales_attr = -1;
    p->n_axes = -1;
    ctx->params = p;
    return p;
}

static nn_status parse_resize(nn_parse_ctx *ctx) {
    resize_params *p = params_legacy(ctx);
    if (!p) return NN_ERR_NOMEM;
    nn_status st = parse_mode(ctx, p);
    if (st != NN_OK || ctx->opset < 11) return st;

    static const char *const coord_names[] = {"half_pixel",   "half_pixel_symmetric", "pytorch_half_pixel",
                                              "align_corners", "asymmetric",           "tf_half_pixel_for_nn",
                                              NULL};
    static const char *const nearest_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", NULL};
    const char *coord, *nearest, *policy;
    int64_t antialias;
    if ((st = nn_attr_string(ctx, "coordinate_transformation_mode", "half_pixel", &coord)) != NN_OK ||
        (st = nn_attr_string(ctx, "nearest_mode", "round_prefer_floor", &nearest)) != NN_OK ||
        (st = nn_attr_string(ctx, "keep_aspect_ratio_policy", "stretch", &policy)) != NN_OK ||
        (st = nn_attr_int(ctx, "antialias", 0, &antialias)) != NN_OK ||
        (st = nn_attr_ints(ctx, "axes", p->axes, NN_MAX_DIMS, &p->n_axes)) != NN_OK)
        return st;
    if (strcmp(coord, "tf_crop_and_resize") == 0)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED,
                              "coordinate_transformation_mode 'tf_crop_and_resize' is not supported");
    int ci = name_index(coord, coord_names), ni = name_index(nearest, nearest_names);
    if (ci < 0) return nn_parse_error(ctx, NN_ERR_INVALID, "unknown coordinate_transformation_mode '%s'", coord);
    if (ni < 0) return nn_parse_error(ctx, NN_ERR_INVALID, "unknown nearest_mode '%s'", nearest);
    if (antialias) return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "antialias is not supported");
    if (strcmp(policy, "stretch") != 0)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "keep_aspect_ratio_policy '%s' is not supported", policy);
    p->coord = (coord_mode)ci;
    p->nearest = (nearest_mode)ni;
    p->scales_input = 2;
    p->sizes_input = 3;
    return NN_OK;
}

static nn_status parse_upsample(nn_parse_ctx *ctx) {
    resize_params *p = params_legacy(ctx);
    if (!p) return NN_ERR_NOMEM;
    nn_status st = parse_mode(ctx, p);
    if (st != NN_OK || ctx->opset >= 9) return st;
    p->scales_input = -1;
    st = nn_attr_floats(ctx, "scales", p->scales_attr, NN_MAX_DIMS, &p->n_scales_attr);
    if (st == NN_OK && p->n_scales_attr < 0)
        return nn_parse_error(ctx, NN_ERR_INVALID, "Upsample before opset 9 needs the 'scales' attribute");
    return st;
}

/* Resize and Upsample: the forms parse_resize and parse_upsample make. */
static nn_status resize_check(const void *params, char *err, size_t err_size) {
    const resize_params *p = params;
    if (!nn_check_bool(&p->linear)) return nn_check_error(err, err_size, "mode is not a boolean");
    if (p->coord < COORD_HALF_PIXEL || p->coord > COORD_TF_HALF_PIXEL_FOR_NN)
        return nn_check_error(err, err_size, "coordinate_transformation_mode %d is unknown", (int)p->coord);
    if (p->nearest < NEAREST_ROUND_PREFER_FLOOR || p->nearest > NEAREST_CEIL)
        return nn_check_error(err, err_size, "nearest_mode %d is unknown", (int)p->nearest);
    if ((p->scales_input != -1 && p->scales_input != 1 && p->scales_input != 2) ||
        (p->sizes_input != -1 && p->sizes_input != 3))
        return nn_check_error(err, err_size, "scales (input %d) or sizes (input %d) at an impossible position",
                              p->scales_input, p->sizes_input);
    if (!nn_check_count(p->n_scales_attr, NN_MAX_DIMS) || !nn_check_count(p->n_axes, NN_MAX_DIMS))
        return nn_check_error(err, err_size, "scales (%d) or axes (%d) has too many values", p->n_scales_attr,
                              p->n_axes);
    for (int k = 0; k < p->n_scales_attr; k++)
        if (!(p->scales_attr[k] > 0.0f && p->scales_attr[k] <= (float)NN_ATTR_EXTENT_MAX))
            return nn_check_error(err, err_size, "scales[%d] = %g must be positive and finite", k,
                                  (double)p->scales_attr[k]);
    for (int k = 0; k < p->n_axes; k++)
        if (!nn_check_axis(p->axes[k]))
            return nn_check_error(err, err_size, "axes[%d] = %lld is out of range", k, (long long)p->axes[k]);
    return NN_OK;
}

/* Per axis: output dim and the scale used in the coordinate transform. */
typedef struct resize_geom {
    int64_t out[NN_MAX_DIMS];
    double scale[NN_MAX_DIMS];
} resize_geom;

/* The tensor of input `i` when present with at least one element. */
static const nn_tensor *nonempty_input(const nn_call *c, int i) {
    if (i < 0 || !nn_present(c, i)) return NULL;
    const nn_tensor *t = &c->in[i];
    return nn_shape_elements(t->dims, t->ndim) > 0 ? t : NULL;
}

static nn_status resize_geometry(nn_call *c, resize_geom *g) {
    const resize_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int rank = x->ndim;
    const nn_tensor *scales = nonempty_input(c, p->scales_input), *sizes = nonempty_input(c, p->sizes_input);
    if (scales && sizes) return nn_call_error(c, NN_ERR_INVALID, "only one of scales and sizes may be given");
    if (!scales && !sizes && p->n_scales_attr < 0)
        return nn_call_error(c, NN_ERR_INVALID, "one of scales and sizes must be given");
    const nn_tensor *given = scales ? scales : sizes;
    if (given && !given->data) return NN_DYNAMIC;

    int axes[NN_MAX_DIMS], n = rank;
    for (int d = 0; d < rank; d++) {
        axes[d] = d;
        g->out[d] = x->dims[d];
        g->scale[d] = 1.0;
    }
    if (p->n_axes >= 0) {
        n = p->n_axes;
        bool seen[NN_MAX_DIMS] = {false};
        for (int i = 0; i < n; i++) {
            int64_t a;
            if (!nn_axis_normalize(p->axes[i], rank, &a) || seen[a])
                return nn_call_error(c, NN_ERR_INVALID, "axes[%d] = %lld is out of range or repeated for rank %d",
                                     i, (long long)p->axes[i], rank);
            seen[a] = true;
            axes[i] = (int)a;
        }
    }
    int64_t count = given ? nn_shape_elements(given->dims, given->ndim) : p->n_scales_attr;
    if (count != n)
        return nn_call_error(c, NN_ERR_SHAPE, "%s has %lld values, expected %d", sizes ? "sizes" : "scales",
                             (long long)count, n);
    if (sizes && sizes->dtype != NN_DTYPE_INT64)
        return nn_call_error(c, NN_ERR_INVALID, "sizes must be INT64, got %s", nn_dtype_name(sizes->dtype));
    if (scales && scales->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_INVALID, "scales must be FLOAT, got %s", nn_dtype_name(scales->dtype));

    for (int i = 0; i < n; i++) {
        int d = axes[i];
        int64_t in = x->dims[d];
        if (sizes) {
            int64_t s = ((const int64_t *)sizes->data)[i];
            if (s < 0 || (s > 0 && in == 0))
                return nn_call_error(c, NN_ERR_SHAPE, "cannot resize dim %d of size %lld to %lld", d,
                                     (long long)in, (long long)s);
            g->out[d] = s;
            g->scale[d] = in > 0 ? (double)s / (double)in : 1.0;
        } else {
            float s = scales ? ((const float *)scales->data)[i] : p->scales_attr[i];
            if (!(s > 0.0f) || !isfinite(s))
                return nn_call_error(c, NN_ERR_INVALID, "scale %g for dim %d must be positive", (double)s, d);
            g->scale[d] = s;
            double out = floor((double)in * (double)s);
            if (out >= 0x1p62) /* converting a larger double to int64 is undefined */
                return nn_call_error(c, NN_ERR_SHAPE, "scale %g makes dim %d of size %lld too large", (double)s, d,
                                     (long long)in);
            g->out[d] = (int64_t)out;
        }
    }
    return NN_OK;
}

static nn_status infer_resize(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (FLOAT only)",
                             nn_dtype_name(x->dtype));
    if (x->ndim < 1) return nn_call_error(c, NN_ERR_SHAPE, "cannot resize a scalar");
    resize_geom g;
    nn_status st = resize_geometry(c, &g);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, g.out);
    return NN_OK;
}

/* Taps of one output coordinate along one axis (geom.h). */
typedef nn_resize_tap resize_tap;

static size_t workspace_resize(const nn_call *c) {
    int64_t taps = 0;
    for (int d = 0; d < c->out[0].ndim; d++) taps += c->out[0].dims[d];
    return sizeof(resize_tap) * (size_t)taps;
}

/* Input coordinate of output coordinate x along one axis (ONNX's
 * coordinate_transformation_mode formulas). */
static double source_coord(coord_mode m, double x, double scale, int64_t in, int64_t out) {
    double len = scale * (double)in; /* the reference's unfloored resized length */
    switch (m) {
    case COORD_HALF_PIXEL: return (x + 0.5) / scale - 0.5;
    case COORD_HALF_PIXEL_SYMMETRIC: {
        double offset = 0.5 * (double)in * (1.0 - (double)out / len);
        return offset + (x + 0.5) / scale - 0.5;
    }
    case COORD_PYTORCH_HALF_PIXEL: return len > 1.0 ? (x + 0.5) / scale - 0.5 : 0.0;
    case COORD_ALIGN_CORNERS: return len == 1.0 ? 0.0 : x * (double)(in - 1) / (len - 1.0);
    case COORD_ASYMMETRIC: return x / scale;
    case COORD_TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / scale;
    }
    return x;
}

static int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

static void axis_taps(const resize_params *p, double scale, int64_t in, int64_t out, int64_t stride,
                      resize_tap *t) {
    for (int64_t x = 0; x < out; x++) {
        double xo = source_coord(p->coord, (double)x, scale, in, out);
        double k = floor(xo), r = xo - k;
        int64_t ki = (int64_t)k;
        if (p->linear) {
            t[x].i0 = clamp_index(ki, in) * stride;
            t[x].i1 = clamp_index(ki + 1, in) * stride;
            t[x].w0 = (float)(1.0 - r);
            t[x].w1 = (float)r;
            continue;
        }
        bool up = false; /* round to k + 1 rather than k */
        if (r > 0.0) {
            switch (p->nearest) {
            case NEAREST_ROUND_PREFER_FLOOR: up = r > 0.5; break;
            case NEAREST_ROUND_PREFER_CEIL: up = r >= 0.5; break;
            case NEAREST_FLOOR: up = false; break;
            case NEAREST_CEIL: up = true; break;
            }
        }
        t[x].i0 = t[x].i1 = clamp_index(ki + up, in) * stride;
        t[x].w0 = 1.0f;
        t[x].w1 = 0.0f;
    }
}

nn_status nn_resize_taps(nn_call *c, nn_resize_tap *taps, bool *linear) {
    const resize_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    resize_geom g;
    nn_status st = resize_geometry(c, &g);
    if (st != NN_OK) return st;
    int64_t first[NN_MAX_DIMS], at = 0, stride = 1;
    for (int d = 0; d < x->ndim; d++) {
        first[d] = at;
        at += g.out[d];
    }
    for (int d = x->ndim - 1; d >= 0; d--) {
        axis_taps(p, g.scale[d], x->dims[d], g.out[d], stride, taps + first[d]);
        stride *= x->dims[d];
    }
    *linear = p->linear;
    return NN_OK;
}

/* Most corners one output row can combine: two taps on every axis but the last. */
#define RESIZE_MAX_CORNERS (1 << (NN_MAX_DIMS - 1))

static nn_status run_resize(nn_call *c) {
    const resize_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nn_tensor *y = &c->out[0];
    resize_geom g;
    nn_status st = resize_geometry(c, &g);
    if (st != NN_OK) return st;
    int nd = x->ndim;
    if (c->workspace_size < workspace_resize(c))
        return nn_call_error(c, NN_ERR_INTERNAL, "workspace of %zu bytes, need %zu", c->workspace_size,
                             workspace_resize(c));
    int64_t rows = nn_shape_elements(y->dims, nd - 1), w = y->dims[nd - 1];
    if (rows == 0 || w == 0) return NN_OK;

    resize_tap *taps[NN_MAX_DIMS];
    resize_tap *next = c->workspace;
    int64_t stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        taps[d] = next;
        next += y->dims[d];
        axis_taps(p, g.scale[d], x->dims[d], y->dims[d], stride, taps[d]);
        stride *= x->dims[d];
    }

    const float *src = x->data;
    float *dst = y->data;
    const resize_tap *tw = taps[nd - 1];
#pragma omp parallel for num_threads(c->threads) if (rows * w > 16384)
    for (int64_t row = 0; row < rows; row++) {
        int64_t off[RESIZE_MAX_CORNERS];
        float wt[RESIZE_MAX_CORNERS];
        int nc = 1;
        off[0] = 0;
        wt[0] = 1.0f;
        int64_t rem = row;
        for (int d = nd - 2; d >= 0; d--) {
            const resize_tap *t = &taps[d][rem % y->dims[d]];
            rem /= y->dims[d];
            if (t->w1 != 0.0f) {
                for (int k = 0; k < nc; k++) {
                    off[k + nc] = off[k] + t->i1;
                    wt[k + nc] = wt[k] * t->w1;
                }
                for (int k = 0; k < nc; k++) {
                    off[k] += t->i0;
                    wt[k] *= t->w0;
                }
                nc *= 2;
            } else {
                for (int k = 0; k < nc; k++) off[k] += t->i0;
            }
        }
        float *out = dst + row * w;
        if (!p->linear) {
            const float *s = src + off[0];
            for (int64_t i = 0; i < w; i++) out[i] = s[tw[i].i0];
            continue;
        }
        for (int64_t i = 0; i < w; i++) out[i] = 0.0f;
        for (int k = 0; k < nc; k++) {
            const float *s = src + off[k];
            for (int64_t i = 0; i < w; i++) out[i] += wt[k] * (tw[i].w0 * s[tw[i].i0] + tw[i].w1 * s[tw[i].i1]);
        }
    }
    return NN_OK;
}

const nn_op_desc nn_op_Resize = {.name = "Resize", .min_inputs = 1, .max_inputs = 4, .min_outputs = 1,
                                 .max_outputs = 1, .parse = parse_resize, .check = resize_check, .infer = infer_resize,
                                 .workspace = workspace_resize, .run = run_resize};
const nn_op_desc nn_op_Upsample = {.name = "Upsample",
                                   .min_inputs = 1,
                                   .max_inputs = 2,
                                   .min_outputs = 1,
                                   .max_outputs = 1,
                                   .parse = parse_upsample,
                                   .check = resize_check,
                                   .infer = infer_resize,
                                   .workspace = workspace_resize,
                                   .run = run_resize};
