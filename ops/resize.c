/* Resize and Upsample, modes nearest, (N-)linear and (N-)cubic.
 *
 * Each axis is resampled independently, so run precomputes per output
 * coordinate of every axis which input indices it reads and with what
 * weights (up to four taps: cubic four, linear two, nearest one).  An
 * output value is then the separable product of the taps of its
 * coordinates.
 *
 * Coordinates follow the ONNX reference: with scales, the "resized length"
 * in the transforms is in_dim * scale (not the floored output dim); with
 * sizes, the scale is out_dim / in_dim.  Samples outside the input clamp to
 * the edge, except that tf_crop_and_resize gives extrapolation_value for a
 * coordinate outside the input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "geom.h"
#include "op.h"
#include "par.h"

typedef enum coord_mode {
    COORD_HALF_PIXEL,
    COORD_HALF_PIXEL_SYMMETRIC,
    COORD_PYTORCH_HALF_PIXEL,
    COORD_ALIGN_CORNERS,
    COORD_ASYMMETRIC,
    COORD_TF_HALF_PIXEL_FOR_NN,
    COORD_TF_CROP_AND_RESIZE,
} coord_mode;

typedef enum interp_mode {
    MODE_NEAREST,
    MODE_LINEAR,
    MODE_CUBIC,
} interp_mode;

typedef enum nearest_mode {
    NEAREST_ROUND_PREFER_FLOOR,
    NEAREST_ROUND_PREFER_CEIL,
    NEAREST_FLOOR,
    NEAREST_CEIL,
} nearest_mode;

typedef struct resize_params {
    interp_mode mode;
    coord_mode coord;
    nearest_mode nearest;
    float cubic_a;
    bool exclude_outside;
    float extrapolation; /* tf_crop_and_resize's value outside the input */
    /* input positions of roi, scales and sizes; -1 when the form has none */
    int roi_input, scales_input, sizes_input;
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

/* Cubic exists from Resize 11 on (not in Resize 10 or Upsample). */
static nn_status parse_mode(nn_parse_ctx *ctx, resize_params *p, bool cubic_allowed) {
    const char *mode;
    nn_status st = nn_attr_string(ctx, "mode", "nearest", &mode);
    if (st != NN_OK) return st;
    static const char *const mode_names[] = {"nearest", "linear", "cubic", NULL};
    int mi = name_index(mode, mode_names);
    if (mi < 0) return nn_parse_error(ctx, NN_ERR_INVALID, "unknown mode '%s'", mode);
    if (mi == MODE_CUBIC && !cubic_allowed)
        return nn_parse_error(ctx, NN_ERR_INVALID, "mode 'cubic' needs Resize from opset 11");
    p->mode = (interp_mode)mi;
    return NN_OK;
}

/* Resize 10 and Upsample behave like Resize 11 with asymmetric coordinates
 * and floor rounding (the conversion ONNX's own version converter applies). */
static resize_params *params_legacy(nn_parse_ctx *ctx) {
    resize_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NULL;
    p->coord = COORD_ASYMMETRIC;
    p->nearest = NEAREST_FLOOR;
    p->cubic_a = -0.75f;
    p->roi_input = -1;
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
    nn_status st = parse_mode(ctx, p, ctx->opset >= 11);
    if (st != NN_OK || ctx->opset < 11) return st;

    static const char *const coord_names[] = {
        "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
        "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize", NULL};
    static const char *const nearest_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", NULL};
    const char *coord, *nearest, *policy;
    int64_t antialias, exclude;
    if ((st = nn_attr_float(ctx, "cubic_coeff_a", -0.75f, &p->cubic_a)) != NN_OK ||
        (st = nn_attr_int(ctx, "exclude_outside", 0, &exclude)) != NN_OK ||
        (st = nn_attr_float(ctx, "extrapolation_value", 0.0f, &p->extrapolation)) != NN_OK ||
        (st = nn_attr_string(ctx, "coordinate_transformation_mode", "half_pixel", &coord)) != NN_OK ||
        (st = nn_attr_string(ctx, "nearest_mode", "round_prefer_floor", &nearest)) != NN_OK ||
        (st = nn_attr_string(ctx, "keep_aspect_ratio_policy", "stretch", &policy)) != NN_OK ||
        (st = nn_attr_int(ctx, "antialias", 0, &antialias)) != NN_OK ||
        (st = nn_attr_ints(ctx, "axes", p->axes, NN_MAX_DIMS, &p->n_axes)) != NN_OK)
        return st;
    int ci = name_index(coord, coord_names), ni = name_index(nearest, nearest_names);
    if (ci < 0) return nn_parse_error(ctx, NN_ERR_INVALID, "unknown coordinate_transformation_mode '%s'", coord);
    if (ni < 0) return nn_parse_error(ctx, NN_ERR_INVALID, "unknown nearest_mode '%s'", nearest);
    /* antialias (opset 18) changes the filter when downsampling; not implemented. */
    if (antialias)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "antialias=%lld is not supported", (long long)antialias);
    if (exclude != 0 && exclude != 1)
        return nn_parse_error(ctx, NN_ERR_INVALID, "exclude_outside must be 0 or 1, got %lld", (long long)exclude);
    if (!isfinite(p->cubic_a) || !isfinite(p->extrapolation))
        return nn_parse_error(ctx, NN_ERR_INVALID, "cubic_coeff_a and extrapolation_value must be finite");
    p->exclude_outside = exclude == 1;
    if (strcmp(policy, "stretch") != 0)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "keep_aspect_ratio_policy '%s' is not supported", policy);
    p->coord = (coord_mode)ci;
    p->nearest = (nearest_mode)ni;
    p->roi_input = 1;
    p->scales_input = 2;
    p->sizes_input = 3;
    return NN_OK;
}

static nn_status parse_upsample(nn_parse_ctx *ctx) {
    resize_params *p = params_legacy(ctx);
    if (!p) return NN_ERR_NOMEM;
    nn_status st = parse_mode(ctx, p, false);
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
    if (p->mode < MODE_NEAREST || p->mode > MODE_CUBIC)
        return nn_check_error(err, err_size, "mode %d is unknown", (int)p->mode);
    if (!nn_check_bool(&p->exclude_outside)) return nn_check_error(err, err_size, "exclude_outside is not a boolean");
    if (!isfinite(p->cubic_a) || !isfinite(p->extrapolation))
        return nn_check_error(err, err_size, "cubic_coeff_a (%g) or extrapolation_value (%g) is not finite",
                              (double)p->cubic_a, (double)p->extrapolation);
    if (p->roi_input != -1 && p->roi_input != 1)
        return nn_check_error(err, err_size, "roi at impossible input %d", p->roi_input);
    if (p->coord < COORD_HALF_PIXEL || p->coord > COORD_TF_CROP_AND_RESIZE)
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

/* Per axis: output dim, the scale used in the coordinate transform and
 * (tf_crop_and_resize) the roi's start and end, relative to the input. */
typedef struct resize_geom {
    int64_t out[NN_MAX_DIMS];
    double scale[NN_MAX_DIMS];
    double roi_start[NN_MAX_DIMS], roi_end[NN_MAX_DIMS];
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
    const nn_tensor *roi = NULL;
    if (p->coord == COORD_TF_CROP_AND_RESIZE) {
        roi = nonempty_input(c, p->roi_input);
        if (!roi)
            return nn_call_error(c, NN_ERR_INVALID, "coordinate_transformation_mode tf_crop_and_resize needs roi");
        if (roi->dtype != NN_DTYPE_FLOAT)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "roi must be FLOAT, got %s", nn_dtype_name(roi->dtype));
        if (!roi->data) return NN_DYNAMIC;
    }

    int axes[NN_MAX_DIMS], n = rank;
    for (int d = 0; d < rank; d++) {
        axes[d] = d;
        g->out[d] = x->dims[d];
        g->scale[d] = 1.0;
        g->roi_start[d] = 0.0;
        g->roi_end[d] = 1.0;
    }
    if (p->n_axes >= 0) {
        n = p->n_axes;
        bool seen[NN_MAX_DIMS] = {false};
        for (int i = 0; i < n; i++) {
            int64_t a;
            if (!nn_axis_normalize(p->axes[i], rank, &a) || seen[a])
                return nn_call_error(c, NN_ERR_INVALID, "axes[%d] = %lld is out of range or repeated for rank %d", i,
                                     (long long)p->axes[i], rank);
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
    if (roi && nn_shape_elements(roi->dims, roi->ndim) != 2 * n)
        return nn_call_error(c, NN_ERR_SHAPE, "roi has %lld values, expected %d",
                             (long long)nn_shape_elements(roi->dims, roi->ndim), 2 * n);

    for (int i = 0; i < n; i++) {
        int d = axes[i];
        int64_t in = x->dims[d];
        double extent = 1.0; /* the roi's share of the input, which scales multiply */
        if (roi) {
            const float *r = roi->data;
            if (!isfinite(r[i]) || !isfinite(r[n + i]))
                return nn_call_error(c, NN_ERR_INVALID, "roi for dim %d is not finite", d);
            g->roi_start[d] = r[i];
            g->roi_end[d] = r[n + i];
            extent = fabs(g->roi_end[d] - g->roi_start[d]);
        }
        if (sizes) {
            int64_t s = ((const int64_t *)sizes->data)[i];
            if (s < 0 || (s > 0 && in == 0))
                return nn_call_error(c, NN_ERR_SHAPE, "cannot resize dim %d of size %lld to %lld", d, (long long)in,
                                     (long long)s);
            g->out[d] = s;
            g->scale[d] = in > 0 ? (double)s / (double)in : 1.0;
        } else {
            float s = scales ? ((const float *)scales->data)[i] : p->scales_attr[i];
            if (!(s > 0.0f) || !isfinite(s))
                return nn_call_error(c, NN_ERR_INVALID, "scale %g for dim %d must be positive", (double)s, d);
            g->scale[d] = s;
            double out = floor((double)in * extent * (double)s);
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
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (FLOAT only)", nn_dtype_name(x->dtype));
    if (x->ndim < 1) return nn_call_error(c, NN_ERR_SHAPE, "cannot resize a scalar");
    resize_geom g;
    nn_status st = resize_geometry(c, &g);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, g.out);
    return NN_OK;
}

/* The taps of one output coordinate along one axis: input offsets (already
 * times the axis stride) and weights, n of them (zero weights dropped);
 * n == 0 means the coordinate lies outside a tf_crop_and_resize input and
 * reads extrapolation_value. */
#define RESIZE_TAPS 4
typedef struct resize_tap {
    int64_t i[RESIZE_TAPS];
    float w[RESIZE_TAPS];
    int n;
} resize_tap;

/* The last axis's two linear taps, compact (resize_planes). */
typedef struct row_tap {
    int64_t i0, i1;
    float w0, w1;
} row_tap;

/* Taps over all axes of an output of these dims: one per output coordinate. */
static int64_t count_taps(const int64_t *out, int nd) {
    int64_t n = 0;
    for (int d = 0; d < nd; d++)
        n += out[d];
    return n;
}

/* The taps, then for resize_planes the last axis's row_taps and two rows
 * of the output's width per thread. */
static size_t workspace_resize(const nn_call *c) {
    int64_t taps = count_taps(c->out[0].dims, c->out[0].ndim);
    int64_t w = c->out[0].ndim ? c->out[0].dims[c->out[0].ndim - 1] : 0, threads = c->threads > 1 ? c->threads : 1;
    return sizeof(resize_tap) * (size_t)taps + sizeof(row_tap) * (size_t)w + sizeof(float) * (size_t)(2 * w * threads);
}

/* Input coordinate of output coordinate x along axis d (ONNX's
 * coordinate_transformation_mode formulas). */
static double source_coord(coord_mode m, double x, const resize_geom *g, int d, int64_t in) {
    double scale = g->scale[d];
    double len = scale * (double)in; /* the reference's unfloored resized length */
    switch (m) {
    case COORD_HALF_PIXEL: return (x + 0.5) / scale - 0.5;
    case COORD_HALF_PIXEL_SYMMETRIC: {
        double offset = 0.5 * (double)in * (1.0 - (double)g->out[d] / len);
        return offset + (x + 0.5) / scale - 0.5;
    }
    case COORD_PYTORCH_HALF_PIXEL: return len > 1.0 ? (x + 0.5) / scale - 0.5 : 0.0;
    case COORD_ALIGN_CORNERS: return len == 1.0 ? 0.0 : x * (double)(in - 1) / (len - 1.0);
    case COORD_ASYMMETRIC: return x / scale;
    case COORD_TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / scale;
    case COORD_TF_CROP_AND_RESIZE: {
        /* The spec's length_resized here is the output dim itself. */
        double s = g->roi_start[d], e = g->roi_end[d], span = (double)(in - 1);
        if (g->out[d] > 1) return s * span + x * (e - s) * span / (double)(g->out[d] - 1);
        return 0.5 * (s + e) * span;
    }
    }
    return x;
}

static int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* Keys' cubic convolution kernel with coefficient a at distance |t| <= 2. */
static double cubic_weight(double t, double a) {
    t = fabs(t);
    if (t <= 1.0) return ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
    if (t < 2.0) return ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a;
    return 0.0;
}

static bool nearest_rounds_up(nearest_mode m, double r) {
    if (r <= 0.0) return false;
    switch (m) {
    case NEAREST_ROUND_PREFER_FLOOR: return r > 0.5;
    case NEAREST_ROUND_PREFER_CEIL: return r >= 0.5;
    case NEAREST_FLOOR: return false;
    case NEAREST_CEIL: return true;
    }
    return false;
}

static void axis_taps(const resize_params *p, const resize_geom *g, int d, int64_t in, int64_t stride, resize_tap *t) {
    for (int64_t x = 0; x < g->out[d]; x++) {
        double xo = source_coord(p->coord, (double)x, g, d, in);
        double k = floor(xo), r = xo - k;
        int64_t ki = (int64_t)k;
        resize_tap *tx = &t[x];
        tx->n = 0;
        if (p->coord == COORD_TF_CROP_AND_RESIZE && (xo < 0.0 || xo > (double)(in - 1))) {
            memset(tx, 0, sizeof *tx); /* reads input 0 with weight 0; run writes the fill */
            continue;
        }
        /* Candidate input indices and weights before clamping to the edge. */
        int64_t idx[RESIZE_TAPS];
        double w[RESIZE_TAPS];
        int n;
        if (p->mode == MODE_NEAREST) {
            idx[0] = ki + nearest_rounds_up(p->nearest, r);
            w[0] = 1.0;
            n = 1;
        } else if (p->mode == MODE_LINEAR) {
            idx[0] = ki;
            idx[1] = ki + 1;
            w[0] = 1.0 - r;
            w[1] = r;
            n = 2;
        } else {
            double sum = 0.0;
            for (int j = 0; j < 4; j++) {
                idx[j] = ki - 1 + j;
                w[j] = cubic_weight(r + 1.0 - j, p->cubic_a);
                if (p->exclude_outside && (idx[j] < 0 || idx[j] >= in)) w[j] = 0.0;
                sum += w[j];
            }
            if (p->exclude_outside && sum != 0.0)
                for (int j = 0; j < 4; j++)
                    w[j] /= sum;
            n = 4;
        }
        for (int j = 0; j < n; j++) {
            if (w[j] == 0.0 && !(j == n - 1 && tx->n == 0)) continue; /* keep at least one tap */
            tx->i[tx->n] = clamp_index(idx[j], in) * stride;
            tx->w[tx->n] = (float)w[j];
            tx->n++;
        }
        /* Unused slots repeat the first tap with weight 0, so run can
         * read a fixed count per mode on the last axis. */
        for (int j = tx->n; j < RESIZE_TAPS; j++) {
            tx->i[j] = tx->i[0];
            tx->w[j] = 0.0f;
        }
    }
}

/* Every axis's taps into `taps` (room for the sum of the output dims),
 * the last axis first and axis d's at first[d]. */
static void all_taps(const resize_params *p, const resize_geom *g, const nn_tensor *x, resize_tap *taps,
                     resize_tap *per_axis[NN_MAX_DIMS]) {
    int64_t at = 0, stride = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        per_axis[d] = taps + at;
        at += g->out[d];
        axis_taps(p, g, d, x->dims[d], stride, per_axis[d]);
        stride *= x->dims[d];
    }
}

nn_status nn_resize_taps(nn_call *c, nn_resize_tap *taps, bool *linear) {
    const resize_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    /* The GPU's two-tap form has no room for cubic's four taps or for
     * tf_crop_and_resize's extrapolation. */
    if (p->mode == MODE_CUBIC || p->coord == COORD_TF_CROP_AND_RESIZE)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "mode cubic and tf_crop_and_resize have no two-tap form");
    resize_geom g;
    nn_status st = resize_geometry(c, &g);
    if (st != NN_OK) return st;
    int64_t n_taps = count_taps(g.out, x->ndim);
    resize_tap *full = malloc(sizeof *full * (size_t)(n_taps ? n_taps : 1)), *per_axis[NN_MAX_DIMS];
    if (!full) return nn_call_error(c, NN_ERR_NOMEM, "out of memory for %lld resize taps", (long long)n_taps);
    all_taps(p, &g, x, full, per_axis);
    int64_t at = 0;
    for (int d = 0; d < x->ndim; d++)
        for (int64_t o = 0; o < g.out[d]; o++, at++) {
            const resize_tap *t = &per_axis[d][o];
            taps[at].i0 = t->i[0];
            taps[at].w0 = t->w[0];
            taps[at].i1 = t->n > 1 ? t->i[1] : t->i[0];
            taps[at].w1 = t->n > 1 ? t->w[1] : 0.0f;
        }
    free(full);
    *linear = p->mode == MODE_LINEAR;
    return NN_OK;
}

/* One output row's last axis, read at `s` and added times `wt`: the tap
 * count is fixed per mode so the loop is branch-free. */
static void blend_row(float *out, const float *s, const resize_tap *tw, int64_t w, float wt, int taps) {
    if (taps == 2) {
        for (int64_t i = 0; i < w; i++)
            out[i] += wt * (tw[i].w[0] * s[tw[i].i[0]] + tw[i].w[1] * s[tw[i].i[1]]);
        return;
    }
    for (int64_t i = 0; i < w; i++) {
        const resize_tap *t = &tw[i];
        out[i] += wt * (t->w[0] * s[t->i[0]] + t->w[1] * s[t->i[1]] + t->w[2] * s[t->i[2]] + t->w[3] * s[t->i[3]]);
    }
}

/* Everything a range of output rows (the last axis) reads. */
typedef struct resize_job {
    const resize_params *p;
    const resize_tap *taps[NN_MAX_DIMS], *tw; /* tw: the last axis's taps */
    const int64_t *out_dims;
    const float *src;
    float *dst;
    int64_t w;
    float fill;
    int nd, last_taps;
} resize_job;

static void resize_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const resize_job *rj = ctx;
    const resize_params *p = rj->p;
    const resize_tap *const *taps = rj->taps, *tw = rj->tw;
    const int64_t *out_dims = rj->out_dims;
    const float *src = rj->src;
    float *dst = rj->dst;
    const int64_t w = rj->w;
    const float fill = rj->fill;
    const int nd = rj->nd, last_taps = rj->last_taps;
    for (int64_t row = lo; row < hi; row++) {
        const resize_tap *t[NN_MAX_DIMS];
        int j[NN_MAX_DIMS] = {0};
        bool outside = false;
        int64_t rem = row;
        for (int d = nd - 2; d >= 0; d--) {
            t[d] = &taps[d][rem % out_dims[d]];
            rem /= out_dims[d];
            outside |= t[d]->n == 0;
        }
        float *out = dst + row * w;
        if (outside) {
            for (int64_t i = 0; i < w; i++)
                out[i] = fill;
            continue;
        }
        if (p->mode == MODE_NEAREST) { /* one tap per axis */
            const float *s = src;
            for (int d = 0; d < nd - 1; d++)
                s += t[d]->i[0];
            for (int64_t i = 0; i < w; i++)
                out[i] = s[tw[i].i[0]];
        } else {
            for (int64_t i = 0; i < w; i++)
                out[i] = 0.0f;
            /* Every combination of the other axes' taps (an odometer over j). */
            for (int d = 0; d >= 0;) {
                int64_t off = 0;
                float wt = 1.0f;
                for (int e = 0; e < nd - 1; e++) {
                    off += t[e]->i[j[e]];
                    wt *= t[e]->w[j[e]];
                }
                blend_row(out, src + off, tw, w, wt, last_taps);
                for (d = nd - 2; d >= 0 && ++j[d] == t[d]->n; d--)
                    j[d] = 0;
            }
        }
        if (p->coord == COORD_TF_CROP_AND_RESIZE)
            for (int64_t i = 0; i < w; i++)
                if (tw[i].n == 0) out[i] = fill;
    }
}

/* Linear resizes of the last two axes, the others passed through (one tap
 * each, as when only H and W are scaled): segmentation heads upsample
 * their logits so, 8x or more.  An output row blends two source rows
 * already interpolated along the last axis, and those are kept (two per
 * thread) while consecutive output rows read the same source rows: the
 * gathers run once per source row, where resize_range runs them twice per
 * output row. */
typedef struct planes_job {
    const resize_tap *const *taps;
    const row_tap *tw;
    const int64_t *out_dims;
    const float *src;
    float *dst, *rows;
    int64_t w;
    int nd;
} planes_job;

static bool planes_apply(const resize_params *p, int nd, const int64_t *out_dims, resize_tap *const *taps) {
    if (p->mode != MODE_LINEAR || p->coord == COORD_TF_CROP_AND_RESIZE || nd < 2) return false;
    for (int d = 0; d < nd - 2; d++)
        for (int64_t o = 0; o < out_dims[d]; o++)
            if (taps[d][o].n != 1) return false;
    return true;
}

static void interp_row(float *out, const float *s, const row_tap *tw, int64_t w) {
    for (int64_t x = 0; x < w; x++)
        out[x] = tw[x].w0 * s[tw[x].i0] + tw[x].w1 * s[tw[x].i1];
}

static void resize_planes(void *ctx, int64_t lo, int64_t hi, int seat) {
    const planes_job *pj = ctx;
    const int64_t w = pj->w, oh = pj->out_dims[pj->nd - 2];
    float *ra = pj->rows + (size_t)seat * 2 * (size_t)w, *rb = ra + w;
    int64_t ka = -1, kb = -1; /* the source rows (offsets) that ra and rb hold */
    for (int64_t row = lo; row < hi; row++) {
        int64_t rem = row / oh, off = 0;
        for (int d = pj->nd - 3; d >= 0; d--) {
            off += pj->taps[d][rem % pj->out_dims[d]].i[0];
            rem /= pj->out_dims[d];
        }
        const resize_tap *th = &pj->taps[pj->nd - 2][row % oh];
        int64_t s0 = off + th->i[0], s1 = off + th->i[1]; /* s1 == s0 with one tap (w[1] 0) */
        float w0 = th->w[0], w1 = th->w[1];
        if (kb == s0 || ka == s1) { /* moving down: the row below becomes the row above */
            float *t = ra;
            ra = rb;
            rb = t;
            int64_t k = ka;
            ka = kb;
            kb = k;
        }
        if (ka != s0) {
            interp_row(ra, pj->src + s0, pj->tw, w);
            ka = s0;
        }
        const float *b = ra;
        if (s1 != s0) {
            if (kb != s1) {
                interp_row(rb, pj->src + s1, pj->tw, w);
                kb = s1;
            }
            b = rb;
        }
        float *out = pj->dst + row * w;
        for (int64_t x = 0; x < w; x++)
            out[x] = w0 * ra[x] + w1 * b[x];
    }
}

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
    all_taps(p, &g, x, c->workspace, taps);

    if (planes_apply(p, nd, y->dims, taps)) {
        row_tap *tw = (row_tap *)((resize_tap *)c->workspace + count_taps(y->dims, nd));
        for (int64_t x = 0; x < w; x++)
            tw[x] = (row_tap){.i0 = taps[nd - 1][x].i[0],
                              .i1 = taps[nd - 1][x].i[1],
                              .w0 = taps[nd - 1][x].w[0],
                              .w1 = taps[nd - 1][x].w[1]};
        planes_job pj = {.taps = (const resize_tap *const *)taps,
                         .tw = tw,
                         .out_dims = y->dims,
                         .src = x->data,
                         .dst = y->data,
                         .rows = (float *)(tw + w),
                         .w = w,
                         .nd = nd};
        nn_par_for_range(rows * w > 16384 ? c->threads : 1, rows, 4096 / w + 1, resize_planes, &pj);
        return NN_OK;
    }
    resize_job j = {.p = p,
                    .tw = taps[nd - 1],
                    .out_dims = y->dims,
                    .src = x->data,
                    .dst = y->data,
                    .w = w,
                    .fill = p->extrapolation,
                    .nd = nd,
                    .last_taps = p->mode == MODE_LINEAR ? 2 : RESIZE_TAPS};
    for (int d = 0; d < nd; d++)
        j.taps[d] = taps[d];
    /* a task writes at least ~4096 outputs */
    nn_par_for_range(rows * w > 16384 ? c->threads : 1, rows, 4096 / w + 1, resize_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_Resize = {.name = "Resize",
                                 .min_inputs = 1,
                                 .max_inputs = 4,
                                 .min_outputs = 1,
                                 .max_outputs = 1,
                                 .parse = parse_resize,
                                 .check = resize_check,
                                 .infer = infer_resize,
                                 .workspace = workspace_resize,
                                 .run = run_resize};
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
