/* Signal-processing ops of opset 17: the HannWindow, HammingWindow and
 * BlackmanWindow tables, MelWeightMatrix, DFT and STFT.
 *
 * Output sizes come from input values (a window's size, dft_length, the frame
 * count), so infer says NN_DYNAMIC until those are known.  Transforms are
 * direct sums in double with twiddles from one table per length: exact
 * enough for fp32 outputs at the lengths these ops see in models (frames of
 * a few hundred samples); no FFT. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

/* Largest window, frame, transform length or mel bin count accepted: a hostile
 * size must not turn into a giant allocation, and the direct sum costs len^2
 * per transformed line (2^32 at this bound: seconds). */
#define SPECTRAL_MAX_LEN (1 << 16)

static nn_status scalar_int(nn_call *c, int i, const char *what, int64_t *v) {
    const nn_tensor *t = &c->in[i];
    if (t->dtype != NN_DTYPE_INT32 && t->dtype != NN_DTYPE_INT64)
        return nn_call_error(c, NN_ERR_INVALID, "%s must be INT32 or INT64, got %s", what, nn_dtype_name(t->dtype));
    if (nn_tensor_elements(t) != 1) return nn_call_error(c, NN_ERR_SHAPE, "%s must be a scalar", what);
    if (!t->data) return NN_DYNAMIC;
    *v = nn_tensor_get_int(t, 0);
    return NN_OK;
}

static bool float_out(int64_t dt) {
    return dt == NN_DTYPE_FLOAT || dt == NN_DTYPE_DOUBLE || dt == NN_DTYPE_FLOAT16;
}

/* ---- the window tables: sum of cosines a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N),
 *      N = size (periodic) or size - 1 (symmetric) */

typedef struct window_params {
    int32_t dtype, periodic;
} window_params;

static nn_status parse_window(nn_parse_ctx *ctx) {
    window_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t dt, periodic;
    nn_status st = nn_attr_int(ctx, "output_datatype", NN_DTYPE_FLOAT, &dt);
    if (st == NN_OK) st = nn_attr_int(ctx, "periodic", 1, &periodic);
    if (st != NN_OK) return st;
    if (!float_out(dt)) return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "output_datatype %lld not supported", (long long)dt);
    if (periodic != 0 && periodic != 1) return nn_parse_error(ctx, NN_ERR_INVALID, "periodic must be 0 or 1");
    p->dtype = (int32_t)dt;
    p->periodic = (int32_t)periodic;
    return NN_OK;
}

static nn_status check_window(const void *params, char *err, size_t err_size) {
    const window_params *p = params;
    if (!float_out(p->dtype)) return nn_check_error(err, err_size, "output_datatype %d not supported", (int)p->dtype);
    if (p->periodic != 0 && p->periodic != 1) return nn_check_error(err, err_size, "periodic is not 0 or 1");
    return NN_OK;
}

static nn_status infer_window(nn_call *c) {
    const window_params *p = c->params;
    int64_t n;
    nn_status st = scalar_int(c, 0, "size", &n);
    if (st != NN_OK) return st;
    if (n < 0 || n > SPECTRAL_MAX_LEN)
        return nn_call_error(c, NN_ERR_INVALID, "size %lld outside [0, %d]", (long long)n, SPECTRAL_MAX_LEN);
    nn_tensor_set_shape(&c->out[0], (nn_dtype)p->dtype, 1, &n);
    return NN_OK;
}

static nn_status run_window(nn_call *c, double a0, double a1, double a2) {
    const window_params *p = c->params;
    nn_tensor *y = &c->out[0];
    int64_t n = y->dims[0];
    double period = (double)(p->periodic ? n : n - 1);
    size_t esz = nn_dtype_size(y->dtype);
    for (int64_t i = 0; i < n; i++) {
        /* a symmetric window of one sample is the window's peak */
        double x = period > 0 ? 2.0 * M_PI * (double)i / period : 0.0;
        nn_store_double((char *)y->data + (size_t)i * esz, y->dtype, a0 - a1 * cos(x) + a2 * cos(2.0 * x));
    }
    return NN_OK;
}

static nn_status run_hann(nn_call *c) { return run_window(c, 0.5, 0.5, 0.0); }
static nn_status run_hamming(nn_call *c) { return run_window(c, 25.0 / 46.0, 21.0 / 46.0, 0.0); }
static nn_status run_blackman(nn_call *c) { return run_window(c, 0.42, 0.5, 0.08); }

#define WINDOW_OP(Name, runner)                                                                                     \
    const nn_op_desc nn_op_##Name = {.name = #Name, .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,             \
                                     .max_outputs = 1, .parse = parse_window, .check = check_window,                \
                                     .infer = infer_window, .run = runner};
WINDOW_OP(HannWindow, run_hann)
WINDOW_OP(HammingWindow, run_hamming)
WINDOW_OP(BlackmanWindow, run_blackman)

/* ---- MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
 *      [dft_length / 2 + 1, num_mel_bins] triangular filters on the mel scale, their corners
 *      rounded down to spectrogram bins as the ONNX reference does */

typedef struct mel_params {
    int32_t dtype;
} mel_params;

static nn_status parse_mel(nn_parse_ctx *ctx) {
    mel_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t dt;
    nn_status st = nn_attr_int(ctx, "output_datatype", NN_DTYPE_FLOAT, &dt);
    if (st != NN_OK) return st;
    if (!float_out(dt)) return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "output_datatype %lld not supported", (long long)dt);
    p->dtype = (int32_t)dt;
    return NN_OK;
}

static nn_status check_mel(const void *params, char *err, size_t err_size) {
    const mel_params *p = params;
    if (!float_out(p->dtype)) return nn_check_error(err, err_size, "output_datatype %d not supported", (int)p->dtype);
    return NN_OK;
}

static nn_status mel_args(nn_call *c, int64_t *bins, int64_t *dft, int64_t *rate, double *lo, double *hi) {
    nn_status st = scalar_int(c, 0, "num_mel_bins", bins);
    if (st == NN_OK) st = scalar_int(c, 1, "dft_length", dft);
    if (st == NN_OK) st = scalar_int(c, 2, "sample_rate", rate);
    if (st != NN_OK) return st;
    for (int i = 3; i < 5; i++) {
        const nn_tensor *t = &c->in[i];
        if ((t->dtype != NN_DTYPE_FLOAT && t->dtype != NN_DTYPE_DOUBLE) || nn_tensor_elements(t) != 1)
            return nn_call_error(c, NN_ERR_INVALID, "%s must be a float scalar", i == 3 ? "lower_edge_hertz" : "upper_edge_hertz");
        if (!t->data) return NN_DYNAMIC;
    }
    *lo = nn_tensor_get_double(&c->in[3], 0);
    *hi = nn_tensor_get_double(&c->in[4], 0);
    if (*bins < 1 || *bins > SPECTRAL_MAX_LEN || *dft < 1 || *dft > SPECTRAL_MAX_LEN || *rate < 1)
        return nn_call_error(c, NN_ERR_INVALID, "num_mel_bins %lld, dft_length %lld, sample_rate %lld: need 1..%d",
                             (long long)*bins, (long long)*dft, (long long)*rate, SPECTRAL_MAX_LEN);
    if (!(*lo >= 0 && *lo < *hi && *hi <= 0.5 * (double)*rate))
        return nn_call_error(c, NN_ERR_INVALID, "need 0 <= lower_edge_hertz (%g) < upper_edge_hertz (%g) <= sample_rate / 2",
                             *lo, *hi);
    return NN_OK;
}

static nn_status infer_mel(nn_call *c) {
    const mel_params *p = c->params;
    int64_t bins, dft, rate;
    double lo, hi;
    nn_status st = mel_args(c, &bins, &dft, &rate, &lo, &hi);
    if (st != NN_OK) return st;
    int64_t dims[2] = {dft / 2 + 1, bins};
    nn_tensor_set_shape(&c->out[0], (nn_dtype)p->dtype, 2, dims);
    return NN_OK;
}

static nn_status run_mel(nn_call *c) {
    int64_t bins, dft, rate;
    double lo, hi;
    nn_status st = mel_args(c, &bins, &dft, &rate, &lo, &hi);
    if (st != NN_OK) return st;
    nn_tensor *y = &c->out[0];
    int64_t rows = dft / 2 + 1;
    int64_t *corner = malloc(sizeof *corner * (size_t)(bins + 2));
    double *w = calloc((size_t)(rows * bins), sizeof *w);
    if (!corner || !w) {
        free(corner);
        free(w);
        return nn_call_error(c, NN_ERR_NOMEM, "out of memory for a %lld x %lld mel matrix", (long long)rows, (long long)bins);
    }
    double mel_lo = 2595.0 * log10(1.0 + lo / 700.0), mel_hi = 2595.0 * log10(1.0 + hi / 700.0);
    double step = (mel_hi - mel_lo) / (double)(bins + 2);
    for (int64_t i = 0; i < bins + 2; i++) {
        double hz = 700.0 * (pow(10.0, ((double)i * step + mel_lo) / 2595.0) - 1.0);
        corner[i] = (int64_t)floor((double)(dft + 1) * hz / (double)rate);
        if (corner[i] < 0) corner[i] = 0;
        if (corner[i] >= rows) corner[i] = rows - 1;
    }
    for (int64_t i = 0; i < bins; i++) {
        int64_t left = corner[i], center = corner[i + 1], right = corner[i + 2];
        if (center == left) {
            w[center * bins + i] = 1.0;
        } else {
            for (int64_t j = left; j <= center; j++) w[j * bins + i] = (double)(j - left) / (double)(center - left);
        }
        for (int64_t j = center; j < right; j++) w[j * bins + i] = (double)(right - j) / (double)(right - center);
    }
    size_t esz = nn_dtype_size(y->dtype);
    for (int64_t k = 0; k < rows * bins; k++) nn_store_double((char *)y->data + (size_t)k * esz, y->dtype, w[k]);
    free(corner);
    free(w);
    return NN_OK;
}

const nn_op_desc nn_op_MelWeightMatrix = {.name = "MelWeightMatrix", .min_inputs = 5, .max_inputs = 5,
                                          .min_outputs = 1, .max_outputs = 1, .parse = parse_mel,
                                          .check = check_mel, .infer = infer_mel, .run = run_mel};

/* ---- the transform shared by DFT and STFT: out[k] = scale * sum_n x[n] w[n] e^(sign 2 pi i k n / len),
 *      n < count (the samples present; the rest of len is zero padding), k < bins.  x and out
 *      are interleaved complex with strides in complex elements; x may be real (xc = 1). */

typedef struct dft_line {
    const float *x;
    int64_t x_stride, count;
    int xc;
    const float *window; /* NULL: none */
    float *out;
    int64_t out_stride, bins;
} dft_line;

static void dft_run_line(const dft_line *l, const double *cs, const double *sn, int64_t len, double sign, double scale) {
    for (int64_t k = 0; k < l->bins; k++) {
        double re = 0, im = 0;
        int64_t idx = 0; /* k * n mod len, advanced without overflow */
        for (int64_t n = 0; n < l->count; n++) {
            const float *v = l->x + n * l->x_stride * l->xc;
            double w = l->window ? (double)l->window[n] : 1.0;
            double a = (double)v[0] * w, b = l->xc == 2 ? (double)v[1] * w : 0.0;
            double cr = cs[idx], ci = sign * sn[idx];
            re += a * cr - b * ci;
            im += a * ci + b * cr;
            idx += k;
            if (idx >= len) idx %= len;
        }
        l->out[k * l->out_stride * 2] = (float)(re * scale);
        l->out[k * l->out_stride * 2 + 1] = (float)(im * scale);
    }
}

static nn_status twiddles(nn_call *c, int64_t len, double **cs, double **sn) {
    *cs = malloc(sizeof **cs * (size_t)len);
    *sn = malloc(sizeof **sn * (size_t)len);
    if (!*cs || !*sn) {
        free(*cs);
        free(*sn);
        return nn_call_error(c, NN_ERR_NOMEM, "out of memory for %lld twiddles", (long long)len);
    }
    for (int64_t i = 0; i < len; i++) {
        double t = 2.0 * M_PI * (double)i / (double)len;
        (*cs)[i] = cos(t);
        (*sn)[i] = sin(t);
    }
    return NN_OK;
}

/* ---- DFT (opset 17): along `axis` of [batch, n_1, ..., n_k, 1 | 2]; dft_length pads or
 *      truncates; onesided keeps bins 0 .. len / 2; inverse divides by len */

typedef struct dft_params {
    int64_t axis;
    int32_t inverse, onesided;
} dft_params;

static nn_status parse_dft(nn_parse_ctx *ctx) {
    dft_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t inverse, onesided;
    nn_status st = nn_attr_int(ctx, "axis", 1, &p->axis);
    if (st == NN_OK) st = nn_attr_int(ctx, "inverse", 0, &inverse);
    if (st == NN_OK) st = nn_attr_int(ctx, "onesided", 0, &onesided);
    if (st != NN_OK) return st;
    if ((inverse != 0 && inverse != 1) || (onesided != 0 && onesided != 1))
        return nn_parse_error(ctx, NN_ERR_INVALID, "inverse and onesided must be 0 or 1");
    if (inverse && onesided) return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "onesided inverse DFT not supported");
    if (p->axis < 1 || p->axis > NN_MAX_DIMS)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "axis %lld not supported (1 .. rank - 2)", (long long)p->axis);
    p->inverse = (int32_t)inverse;
    p->onesided = (int32_t)onesided;
    return NN_OK;
}

static nn_status check_dft(const void *params, char *err, size_t err_size) {
    const dft_params *p = params;
    if ((p->inverse != 0 && p->inverse != 1) || (p->onesided != 0 && p->onesided != 1) || (p->inverse && p->onesided))
        return nn_check_error(err, err_size, "inverse / onesided out of range");
    if (p->axis < 1 || p->axis > NN_MAX_DIMS) return nn_check_error(err, err_size, "axis %lld out of range", (long long)p->axis);
    return NN_OK;
}

static nn_status dft_length(nn_call *c, int64_t *len) {
    const dft_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT) return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(x->dtype));
    if (x->ndim < 3 || (x->dims[x->ndim - 1] != 1 && x->dims[x->ndim - 1] != 2))
        return nn_call_error(c, NN_ERR_SHAPE, "input must be [batch, ..., 1 or 2], got rank %d", x->ndim);
    if (p->axis > x->ndim - 2) return nn_call_error(c, NN_ERR_INVALID, "axis %lld outside 1 .. %d", (long long)p->axis, x->ndim - 2);
    if (p->onesided && x->dims[x->ndim - 1] != 1) return nn_call_error(c, NN_ERR_UNSUPPORTED, "onesided DFT of a complex input");
    *len = x->dims[p->axis];
    if (nn_present(c, 1)) {
        nn_status st = scalar_int(c, 1, "dft_length", len);
        if (st != NN_OK) return st;
    }
    if (*len < 1 || *len > SPECTRAL_MAX_LEN)
        return nn_call_error(c, NN_ERR_INVALID, "dft_length %lld outside 1 .. %d", (long long)*len, SPECTRAL_MAX_LEN);
    return NN_OK;
}

static nn_status infer_dft(nn_call *c) {
    const dft_params *p = c->params;
    int64_t len;
    nn_status st = dft_length(c, &len);
    if (st != NN_OK) return st;
    int64_t dims[NN_MAX_DIMS];
    memcpy(dims, c->in[0].dims, sizeof(int64_t) * (size_t)c->in[0].ndim);
    dims[p->axis] = p->onesided ? len / 2 + 1 : len;
    dims[c->in[0].ndim - 1] = 2;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, c->in[0].ndim, dims);
    return NN_OK;
}

static nn_status run_dft(nn_call *c) {
    const dft_params *p = c->params;
    int64_t len;
    nn_status st = dft_length(c, &len);
    if (st != NN_OK) return st;
    const nn_tensor *x = &c->in[0];
    nn_tensor *y = &c->out[0];
    int xc = (int)x->dims[x->ndim - 1];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < p->axis; d++) outer *= x->dims[d];
    for (int d = (int)p->axis + 1; d < x->ndim - 1; d++) inner *= x->dims[d];
    int64_t n_in = x->dims[p->axis], bins = y->dims[p->axis];
    double *cs, *sn;
    if ((st = twiddles(c, len, &cs, &sn)) != NN_OK) return st;
    const float *xd = x->data;
    float *yd = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            dft_line l = {.x = xd + (o * n_in * inner + i) * xc, .x_stride = inner, .count = n_in < len ? n_in : len,
                          .xc = xc, .out = yd + (o * bins * inner + i) * 2, .out_stride = inner, .bins = bins};
            dft_run_line(&l, cs, sn, len, p->inverse ? 1.0 : -1.0, p->inverse ? 1.0 / (double)len : 1.0);
        }
    free(cs);
    free(sn);
    return NN_OK;
}

const nn_op_desc nn_op_DFT = {.name = "DFT", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
                              .parse = parse_dft, .check = check_dft, .infer = infer_dft, .run = run_dft};

/* ---- STFT (opset 17): signal [batch, length, 1 | 2], frames of frame_length every
 *      frame_step samples, each times the window, transformed; [batch, frames, bins, 2] */

typedef struct stft_params {
    int32_t onesided;
} stft_params;

static nn_status parse_stft(nn_parse_ctx *ctx) {
    stft_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t onesided;
    nn_status st = nn_attr_int(ctx, "onesided", 1, &onesided);
    if (st != NN_OK) return st;
    if (onesided != 0 && onesided != 1) return nn_parse_error(ctx, NN_ERR_INVALID, "onesided must be 0 or 1");
    p->onesided = (int32_t)onesided;
    return NN_OK;
}

static nn_status check_stft(const void *params, char *err, size_t err_size) {
    const stft_params *p = params;
    if (p->onesided != 0 && p->onesided != 1) return nn_check_error(err, err_size, "onesided is not 0 or 1");
    return NN_OK;
}

/* frame length, step and count, checked against the signal */
static nn_status stft_frames(nn_call *c, int64_t *len, int64_t *step, int64_t *frames) {
    const stft_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT) return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(x->dtype));
    if (x->ndim != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
        return nn_call_error(c, NN_ERR_SHAPE, "signal must be [batch, length, 1 or 2], got rank %d", x->ndim);
    if (p->onesided && x->dims[2] != 1) return nn_call_error(c, NN_ERR_UNSUPPORTED, "onesided STFT of a complex signal");
    nn_status st = scalar_int(c, 1, "frame_step", step);
    if (st != NN_OK) return st;
    int64_t wlen = -1;
    if (nn_present(c, 2)) {
        const nn_tensor *w = &c->in[2];
        if (w->dtype != NN_DTYPE_FLOAT || w->ndim != 1) return nn_call_error(c, NN_ERR_INVALID, "window must be a 1-D FLOAT tensor");
        wlen = w->dims[0];
    }
    *len = wlen;
    if (nn_present(c, 3)) {
        if ((st = scalar_int(c, 3, "frame_length", len)) != NN_OK) return st;
        if (wlen >= 0 && *len != wlen)
            return nn_call_error(c, NN_ERR_INVALID, "frame_length %lld differs from the window's %lld", (long long)*len,
                                 (long long)wlen);
    }
    if (*len < 1) return nn_call_error(c, NN_ERR_INVALID, "STFT needs a window or frame_length >= 1");
    if (*len > SPECTRAL_MAX_LEN || *len > x->dims[1] || *step < 1)
        return nn_call_error(c, NN_ERR_INVALID, "frame_length %lld, frame_step %lld: need 1 <= frame_length <= %lld "
                             "(and %d), frame_step >= 1", (long long)*len, (long long)*step, (long long)x->dims[1], SPECTRAL_MAX_LEN);
    *frames = (x->dims[1] - *len) / *step + 1;
    return NN_OK;
}

static nn_status infer_stft(nn_call *c) {
    const stft_params *p = c->params;
    int64_t len, step, frames;
    nn_status st = stft_frames(c, &len, &step, &frames);
    if (st != NN_OK) return st;
    int64_t dims[4] = {c->in[0].dims[0], frames, p->onesided ? len / 2 + 1 : len, 2};
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, 4, dims);
    return NN_OK;
}

static nn_status run_stft(nn_call *c) {
    int64_t len, step, frames;
    nn_status st = stft_frames(c, &len, &step, &frames);
    if (st != NN_OK) return st;
    const nn_tensor *x = &c->in[0];
    nn_tensor *y = &c->out[0];
    int xc = (int)x->dims[2];
    int64_t bins = y->dims[2];
    double *cs, *sn;
    if ((st = twiddles(c, len, &cs, &sn)) != NN_OK) return st;
    const float *window = nn_present(c, 2) ? c->in[2].data : NULL;
    for (int64_t b = 0; b < x->dims[0]; b++)
        for (int64_t f = 0; f < frames; f++) {
            dft_line l = {.x = (const float *)x->data + (b * x->dims[1] + f * step) * xc, .x_stride = 1, .count = len,
                          .xc = xc, .window = window, .out = (float *)y->data + ((b * frames + f) * bins) * 2,
                          .out_stride = 1, .bins = bins};
            dft_run_line(&l, cs, sn, len, -1.0, 1.0);
        }
    free(cs);
    free(sn);
    return NN_OK;
}

const nn_op_desc nn_op_STFT = {.name = "STFT", .min_inputs = 2, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
                               .parse = parse_stft, .check = check_stft, .infer = infer_stft, .run = run_stft};
