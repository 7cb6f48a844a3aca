/* Conv and ConvTranspose over any number of spatial dims (fp32).
 *
 * Conv is one GEMM per (image, group): W[g] (M/g x C/g*K) times the im2col
 * matrix (C/g*K x out positions), run by ops/gemm.c, which packs the im2col
 * panels straight from the input (nothing is materialized) and applies bias
 * and the fused epilogue (residual, activation) to each output tile while it
 * is in cache.  The weights are packed for the kernel once, in prepare.
 * Depthwise 2-D convolutions (one input channel per group, the MobileNet
 * case) skip the GEMM: per-group products would be tiny; so do, on AVX2,
 * convs with a few input channels (the RGB stems), whose short K makes the
 * im2col packing cost as much as the product.  ConvTranspose is
 * the adjoint: the GEMM W[g]^T x X[g] (OpenBLAS) gives per-tap contributions
 * that col2im scatter-adds into the output. */
#include <cblas.h>
#include <immintrin.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "../engine/arena.h"
#include "avx2.h"
#include "epilogue.h"
#include "gemm.h"
#include "geom.h"
#include "op.h"
#include "window.h"
#include "winograd.h"

typedef struct conv_params {
    nn_window_attrs w;
    int64_t group;
    /* element counts; -1 when the attribute is absent */
    int n_out_padding, n_out_shape;
    int64_t out_padding[NSP_MAX], out_shape[NN_MAX_DIMS];
} conv_params;

/* Everything a kernel needs, resolved once from params and input shapes
 * (geom.h: the CUDA backend resolves it through nn_conv_resolve). */
typedef nn_conv_geom conv_geom;

static nn_status parse_conv(nn_parse_ctx *ctx) {
    conv_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    nn_status st;
    if ((st = nn_window_parse(ctx, &p->w)) || (st = nn_attr_int(ctx, "group", 1, &p->group)) ||
        (st = nn_attr_ints(ctx, "output_padding", p->out_padding, NSP_MAX, &p->n_out_padding)) ||
        (st = nn_attr_ints(ctx, "output_shape", p->out_shape, NN_MAX_DIMS, &p->n_out_shape)))
        return st;
    ctx->params = p;
    return NN_OK;
}

/* group divides channel counts and multiplies them (conv_resolve): at
 * least 1, and small enough that the product cannot overflow. */
static nn_status conv_check(const void *params, char *err, size_t err_size) {
    const conv_params *p = params;
    nn_status st = nn_window_check(&p->w, err, err_size);
    if (st != NN_OK) return st;
    if (p->group < 1 || p->group > NN_ATTR_EXTENT_MAX)
        return nn_check_error(err, err_size, "group must be >= 1, got %lld", (long long)p->group);
    if (!nn_check_count(p->n_out_padding, NSP_MAX) || !nn_check_count(p->n_out_shape, NN_MAX_DIMS))
        return nn_check_error(err, err_size, "output_padding (%d) or output_shape (%d) has too many values",
                              p->n_out_padding, p->n_out_shape);
    for (int k = 0; k < p->n_out_padding; k++)
        if (!nn_check_extent(p->out_padding[k]))
            return nn_check_error(err, err_size, "output_padding[%d] = %lld is out of range", k,
                                  (long long)p->out_padding[k]);
    for (int k = 0; k < p->n_out_shape; k++)
        if (!nn_check_extent(p->out_shape[k]))
            return nn_check_error(err, err_size, "output_shape[%d] = %lld is out of range", k,
                                  (long long)p->out_shape[k]);
    return NN_OK;
}

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

/* A conv whose im2col matrix is its input as it lies: 1x1, stride 1, no
 * padding on either side (trailing pads alone would add output positions). */
static bool is_pointwise(const conv_geom *g) {
    for (int d = 0; d < g->nsp; d++)
        if (g->kernel[d] != 1 || g->stride[d] != 1 || g->pad[d] != 0 || g->out[d] != g->in[d]) return false;
    return true;
}

/* A prologue (nn_prologue) is applied while the GEMM packs a pointwise
 * conv's input, whose rows are the channels; other convs read their input
 * through padding or windows, where it has no place. */
static nn_status check_prologue(const nn_call *c, const conv_geom *g) {
    const nn_prologue *pr = c->prologue;
    if (!is_pointwise(g) || g->group != 1 || (pr->act != NN_ACT_NONE && pr->act != NN_ACT_RELU))
        return nn_call_error(c, NN_ERR_UNSUPPORTED,
                             "an input prologue needs a 1x1, stride-1, unpadded conv with one group, and Relu or no "
                             "activation");
    int ops[2] = {pr->scale, pr->shift};
    for (int k = 0; k < 2; k++)
        if (ops[k] < 0 || !nn_present(c, ops[k]) || nn_tensor_elements(&c->in[ops[k]]) != g->in_ch)
            return nn_call_error(c, NN_ERR_SHAPE, "prologue %s (input %d) must hold %lld floats, one per channel",
                                 k ? "shift" : "scale", ops[k], (long long)g->in_ch);
    return NN_OK;
}

/* Validate shapes and attributes and resolve pads and output dims: the one
 * place infer, workspace and run get their geometry from. */
static nn_status conv_resolve(const nn_call *c, bool transpose, conv_geom *g) {
    const conv_params *p = c->params;
    const nn_tensor *x = &c->in[0], *w = &c->in[1];
    for (int i = 0; i < c->n_in; i++)
        if (nn_present(c, i) && c->in[i].dtype != NN_DTYPE_FLOAT)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d: dtype %s not supported (float only)", i,
                                 nn_dtype_name(c->in[i].dtype));
    if (x->ndim < 3 || w->ndim != x->ndim)
        return nn_call_error(c, NN_ERR_SHAPE, "X must have rank >= 3 and W the same rank (X rank %d, W rank %d)",
                             x->ndim, w->ndim);
    int nsp = g->nsp = x->ndim - 2;
    g->batch = x->dims[0];
    g->in_ch = x->dims[1];
    g->group = p->group;
    if (transpose) {
        if (w->dims[0] != g->in_ch || g->in_ch % g->group)
            return nn_call_error(c, NN_ERR_SHAPE,
                                 "W dim 0 (%lld) must equal X channels (%lld), divisible by group %lld",
                                 (long long)w->dims[0], (long long)g->in_ch, (long long)g->group);
        if (__builtin_mul_overflow(w->dims[1], g->group, &g->out_ch))
            return nn_call_error(c, NN_ERR_SHAPE, "W dim 1 (%lld) times group %lld overflows", (long long)w->dims[1],
                                 (long long)g->group);
    } else {
        int64_t in_ch; /* shapes are untrusted (a model's declared input, a plan cache): no overflow */
        if (__builtin_mul_overflow(w->dims[1], g->group, &in_ch) || in_ch != g->in_ch || w->dims[0] % g->group)
            return nn_call_error(c, NN_ERR_SHAPE, "W %lldx%lld does not fit X channels %lld with group %lld",
                                 (long long)w->dims[0], (long long)w->dims[1], (long long)g->in_ch,
                                 (long long)g->group);
        g->out_ch = w->dims[0];
    }
    if (nn_present(c, 2) && (c->in[2].ndim != 1 || c->in[2].dims[0] != g->out_ch))
        return nn_call_error(c, NN_ERR_SHAPE, "bias must have shape [%lld]", (long long)g->out_ch);
    if ((p->w.n_kernel >= 0 && p->w.n_kernel != nsp) || (p->w.n_strides >= 0 && p->w.n_strides != nsp) ||
        (p->w.n_dilations >= 0 && p->w.n_dilations != nsp) || (p->w.n_pads >= 0 && p->w.n_pads != 2 * nsp) ||
        (p->n_out_padding >= 0 && p->n_out_padding != nsp) ||
        (p->n_out_shape >= 0 && p->n_out_shape != nsp && p->n_out_shape != nsp + 2))
        return nn_call_error(c, NN_ERR_INVALID,
                             "kernel_shape/strides/dilations/pads/output_* lengths do not fit %d spatial dims", nsp);

    g->in_size = g->out_size = g->kernel_size = 1;
    for (int d = 0; d < nsp; d++) {
        int64_t in = g->in[d] = x->dims[2 + d];
        int64_t k = g->kernel[d] = w->dims[2 + d];
        int64_t s = g->stride[d] = p->w.n_strides >= 0 ? p->w.strides[d] : 1;
        int64_t dil = g->dilation[d] = p->w.n_dilations >= 0 ? p->w.dilations[d] : 1;
        int64_t pb = p->w.n_pads >= 0 ? p->w.pads[d] : 0, pe = p->w.n_pads >= 0 ? p->w.pads[nsp + d] : 0;
        int64_t opad = p->n_out_padding >= 0 ? p->out_padding[d] : 0;
        if (p->w.n_kernel >= 0 && p->w.kernel[d] != k)
            return nn_call_error(c, NN_ERR_SHAPE, "kernel_shape[%d] = %lld but W has %lld", d,
                                 (long long)p->w.kernel[d], (long long)k);
        if (s < 1 || dil < 1 || pb < 0 || pe < 0 || opad < 0 || k < 1)
            return nn_call_error(c, NN_ERR_INVALID, "strides, dilations and kernel must be >= 1, pads >= 0");
        int64_t ext = (k - 1) * dil + 1, out;
        if (!transpose) {
            if (p->w.auto_pad == NN_AUTO_PAD_SAME_UPPER || p->w.auto_pad == NN_AUTO_PAD_SAME_LOWER) {
                out = (in + s - 1) / s;
                int64_t total = (out - 1) * s + ext - in;
                if (total < 0) total = 0;
                pb = p->w.auto_pad == NN_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
            } else {
                if (p->w.auto_pad == NN_AUTO_PAD_VALID) pb = pe = 0;
                out = in + pb + pe < ext ? 0 : (in + pb + pe - ext) / s + 1;
            }
        } else {
            int64_t full = s * (in - 1) + ext + opad; /* output length before cropping pads */
            if (p->n_out_shape >= 0 || p->w.auto_pad == NN_AUTO_PAD_SAME_UPPER ||
                p->w.auto_pad == NN_AUTO_PAD_SAME_LOWER) {
                out = p->n_out_shape >= 0 ? p->out_shape[p->n_out_shape - nsp + d] : in * s;
                /* total may be negative (output_shape longer than the full
                 * result): the floor split then appends zeros at the end */
                int64_t total = full - out;
                pb = p->w.auto_pad == NN_AUTO_PAD_SAME_UPPER ? floor_div(total, 2) : total - floor_div(total, 2);
            } else {
                if (p->w.auto_pad == NN_AUTO_PAD_VALID) pb = pe = 0;
                out = full - pb - pe;
            }
        }
        if (out < 1)
            return nn_call_error(c, NN_ERR_SHAPE, "spatial dim %d: output size %lld (input %lld, kernel %lld)", d,
                                 (long long)out, (long long)in, (long long)k);
        g->out[d] = out;
        g->pad[d] = pb;
        g->in_size *= in;
        g->out_size *= out;
        g->kernel_size *= k;
    }
    /* plane offsets are 32-bit in the GEMM's im2col tables, all sizes in BLAS */
    if (g->in_size > INT_MAX ||
        (transpose && (g->out_size > INT_MAX || g->kernel_size * (g->in_ch + g->out_ch) > INT_MAX)))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "convolution too large for 32-bit sizes");
    return c->prologue && !transpose ? check_prologue(c, g) : NN_OK;
}

nn_status nn_conv_resolve(const nn_call *c, bool transpose, nn_conv_geom *g) { return conv_resolve(c, transpose, g); }

static nn_status infer_common(nn_call *c, bool transpose) {
    conv_geom g;
    nn_status st = conv_resolve(c, transpose, &g);
    if (st != NN_OK) return st;
    int64_t dims[NN_MAX_DIMS] = {g.batch, g.out_ch};
    for (int d = 0; d < g.nsp; d++)
        dims[2 + d] = g.out[d];
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, g.nsp + 2, dims);
    return NN_OK;
}

static nn_status infer_conv(nn_call *c) { return infer_common(c, false); }
static nn_status infer_conv_transpose(nn_call *c) { return infer_common(c, true); }

/* Offsets of kernel tap `tap`: along dim d it reads position i*stride + off[d]. */
static void tap_offsets(const conv_geom *g, int64_t tap, int64_t *off) {
    for (int d = g->nsp - 1; d >= 0; d--) {
        off[d] = (tap % g->kernel[d]) * g->dilation[d] - g->pad[d];
        tap /= g->kernel[d];
    }
}

/* Advance a row-major position over dims[0..n); wraps to all zeros at the end. */

/* Row offset (in units of the last dim) that positions pos*stride + off map to
 * in a grid of `dims`, over all but the last dim; -1 when outside the grid. */
static int64_t outer_offset(const conv_geom *g, const int64_t *pos, const int64_t *off, const int64_t *dims) {
    int64_t base = 0;
    for (int d = 0; d < g->nsp - 1; d++) {
        int64_t i = pos[d] * g->stride[d] + off[d];
        if (i < 0 || i >= dims[d]) return -1;
        base = base * dims[d] + i;
    }
    return base;
}

static bool is_depthwise_2d(const conv_geom *g) { return g->nsp == 2 && g->in_ch == g->group; }

/* y (channels x out positions) = bias + scatter-add of col (channels*K x in
 * positions), then the epilogue (res: the residual planes matching y, or NULL). */
static void col2im(const conv_geom *g, int64_t channels, const float *col, const float *bias, float *y,
                   const nn_epilogue *e, const float *res, int threads) {
    int last = g->nsp - 1;
    int64_t inner = g->in[last], outer = g->in_size / inner;
#pragma omp parallel for num_threads(threads) if (channels * g->kernel_size * g->in_size > 32768)
    for (int64_t m = 0; m < channels; m++) {
        float *dst = y + m * g->out_size;
        float b0 = bias ? bias[m] : 0.0f;
        for (int64_t i = 0; i < g->out_size; i++)
            dst[i] = b0;
        for (int64_t tap = 0; tap < g->kernel_size; tap++) {
            int64_t off[NSP_MAX], pos[NSP_MAX] = {0}, lo, hi;
            tap_offsets(g, tap, off);
            nn_valid_range(off[last], g->stride[last], g->out[last], inner, &lo, &hi);
            const float *src = col + (m * g->kernel_size + tap) * g->in_size;
            for (int64_t o = 0; o < outer; o++, src += inner) {
                int64_t base = outer_offset(g, pos, off, g->out);
                nn_odometer_next(pos, g->in, last);
                if (base < 0) continue;
                float *row = dst + base * g->out[last];
                for (int64_t j = lo; j < hi; j++)
                    row[j * g->stride[last] + off[last]] += src[j];
            }
        }
        nn_epilogue_apply(e, dst, res ? res + m * g->out_size : NULL, g->out_size);
    }
}

/* y[ow] += sum over kw of w[kw] * x[ow*s + kw*d + off] for ow in [a, b), all
 * taps inside the row.  Inlined with constant k, s, d for the common kernels
 * so that the kw loop unrolls and the ow loop vectorizes. */
static inline __attribute__((always_inline)) void dw_span(float *restrict y, const float *restrict x,
                                                          const float *restrict w, int64_t k, int64_t s, int64_t d,
                                                          int64_t a, int64_t b, int64_t off) {
    for (int64_t ow = a; ow < b; ow++) {
        float acc = y[ow];
        for (int64_t kw = 0; kw < k; kw++)
            acc += w[kw] * x[ow * s + kw * d + off];
        y[ow] = acc;
    }
}

static void dw_row(float *restrict y, const float *restrict x, const float *restrict w, int64_t k, int64_t s, int64_t d,
                   int64_t a, int64_t b, int64_t off) {
    if (d == 1 && k == 3 && s == 1)
        dw_span(y, x, w, 3, 1, 1, a, b, off);
    else if (d == 1 && k == 3 && s == 2)
        dw_span(y, x, w, 3, 2, 1, a, b, off);
    else if (d == 1 && k == 5 && s == 1)
        dw_span(y, x, w, 5, 1, 1, a, b, off);
    else if (d == 1 && k == 5 && s == 2)
        dw_span(y, x, w, 5, 2, 1, a, b, off);
    else
        dw_span(y, x, w, k, s, d, a, b, off);
}

/* dw_span for columns [from, to) whose kernel row crosses the input's edge. */
static void dw_border(float *y, const float *x, const float *w, const conv_geom *g, int64_t from, int64_t to) {
    for (int64_t ow = from; ow < to; ow++)
        for (int64_t kw = 0; kw < g->kernel[1]; kw++) {
            int64_t iw = ow * g->stride[1] + kw * g->dilation[1] - g->pad[1];
            if (iw >= 0 && iw < g->in[1]) y[ow] += w[kw] * x[iw];
        }
}

/* y[oh][ow] = b + sum over the window of w * x, for a zero-padded plane xp
 * (row length pw_n) that holds every tap: the whole window per output, so
 * each output is written once.  Inlined with constant kernel, strides and
 * dilations for the common shapes so that the taps unroll and the ow loop
 * vectorizes.  With `split`, xp's rows are stored even columns first, the
 * odd ones from `half` on (nn_pad_plane_split), for a column stride of 2
 * and dilation 1: tap kw of output ow is then float ow + kw / 2 of its
 * parity's half, consecutive along ow, where the plain layout would read
 * every other float. */
static inline __attribute__((always_inline)) void dw_window(const bool split, const float *restrict xp, int64_t pw_n,
                                                            int64_t half, const float *restrict w, float *restrict y,
                                                            int64_t oh_n, int64_t ow_n, int64_t kh_n, int64_t kw_n,
                                                            int64_t sh, int64_t sw, int64_t dh, int64_t dw, float b) {
    for (int64_t oh = 0; oh < oh_n; oh++) {
        const float *xr = xp + oh * sh * pw_n;
        float *yr = y + oh * ow_n;
        for (int64_t ow = 0; ow < ow_n; ow++) {
            float acc = b;
            for (int64_t kh = 0; kh < kh_n; kh++)
                for (int64_t kw = 0; kw < kw_n; kw++) {
                    int64_t col = split ? (kw & 1) * half + kw / 2 + ow : ow * sw + kw * dw;
                    acc += w[kh * kw_n + kw] * xr[kh * dh * pw_n + col];
                }
            yr[ow] = acc;
        }
    }
}

typedef struct dw_plane {
    const float *xp, *w;
    float *y, bias;
    int64_t pw_n;
    int64_t half; /* > 0: xp's rows are split by column parity, the odd columns from here */
} dw_plane;

static inline __attribute__((always_inline)) void dw_plane_body(const conv_geom *g, const dw_plane *p) {
    int64_t kh = g->kernel[0], kw = g->kernel[1], sh = g->stride[0], sw = g->stride[1];
    int64_t oh_n = g->out[0], ow_n = g->out[1], dh = g->dilation[0];
    bool unit = dh == 1 && g->dilation[1] == 1;
    if (p->half) /* see depthwise_2d: 3x3, stride 2, dilation 1 */
        dw_window(true, p->xp, p->pw_n, p->half, p->w, p->y, oh_n, ow_n, 3, 3, 2, 2, 1, 1, p->bias);
    else if (unit && kh == 3 && kw == 3 && sh == 1 && sw == 1)
        dw_window(false, p->xp, p->pw_n, 0, p->w, p->y, oh_n, ow_n, 3, 3, 1, 1, 1, 1, p->bias);
    else if (unit && kh == 3 && kw == 3 && sh == 2 && sw == 2)
        dw_window(false, p->xp, p->pw_n, 0, p->w, p->y, oh_n, ow_n, 3, 3, 2, 2, 1, 1, p->bias);
    else if (unit && kh == 5 && kw == 5 && sh == 1 && sw == 1)
        dw_window(false, p->xp, p->pw_n, 0, p->w, p->y, oh_n, ow_n, 5, 5, 1, 1, 1, 1, p->bias);
    else if (unit && kh == 5 && kw == 5 && sh == 2 && sw == 2)
        dw_window(false, p->xp, p->pw_n, 0, p->w, p->y, oh_n, ow_n, 5, 5, 2, 2, 1, 1, p->bias);
    else
        dw_window(false, p->xp, p->pw_n, 0, p->w, p->y, oh_n, ow_n, kh, kw, sh, sw, dh, g->dilation[1], p->bias);
}

/* compiled once per instruction set; the GEMM kernel in use picks one */
#define T512 __attribute__((target("avx512f,avx512dq,avx2,fma")))
#define DW_PLANE_FOR(SUFFIX, ATTR)                                                                                     \
    ATTR static void dw_plane_##SUFFIX(const conv_geom *g, const dw_plane *p) { dw_plane_body(g, p); }
DW_PLANE_FOR(avx2, __attribute__((target("avx2,fma"))))
DW_PLANE_FOR(scalar, )

/* AVX-512, square K x K kernels, stride 1, dilation 1: 16 outputs per
 * vector, the weights held in registers.  Loads may run up to 16 floats past
 * a row (into the next row or the buffer's slack); those lanes are never
 * stored.  (Stride 2 has dw_s2_512, which needs no padded copy.) */
static inline __attribute__((always_inline)) T512 void dw_vec512(const int K, const conv_geom *g, const dw_plane *p) {
    __m512 wv[25];
    for (int i = 0; i < K * K; i++)
        wv[i] = _mm512_set1_ps(p->w[i]);
    int64_t oh_n = g->out[0], ow_n = g->out[1];
    for (int64_t oh = 0; oh < oh_n; oh++) {
        const float *xr = p->xp + oh * p->pw_n;
        float *yr = p->y + oh * ow_n;
        for (int64_t ow = 0; ow < ow_n; ow += 16) {
            __m512 acc = _mm512_set1_ps(p->bias);
            for (int kh = 0; kh < K; kh++)
                for (int kw = 0; kw < K; kw++)
                    acc = _mm512_fmadd_ps(wv[kh * K + kw], _mm512_loadu_ps(xr + kh * p->pw_n + ow + kw), acc);
            int64_t left = ow_n - ow;
            _mm512_mask_storeu_ps(yr + ow, left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1), acc);
        }
    }
}

T512 static void dw_plane_avx512(const conv_geom *g, const dw_plane *p) {
    bool unit = g->dilation[0] == 1 && g->dilation[1] == 1 && g->stride[0] == 1 && g->stride[1] == 1;
    int64_t k = g->kernel[0];
    if (unit && k == g->kernel[1] && k == 3)
        dw_vec512(3, g, p);
    else if (unit && k == g->kernel[1] && k == 5)
        dw_vec512(5, g, p);
    else
        dw_plane_body(g, p);
}

/* AVX-512, K x K (3 or 5) stride 2, dilation 1, read straight from the
 * unpadded plane: no padded copy.  For a block of 16 outputs of a row, each
 * input row's 31 + K floats are three loads, masked to the columns inside the
 * plane (a masked lane neither faults nor counts), split once into even and
 * odd columns; tap kw is the even or odd vector moved on by kw / 2. */
static inline __attribute__((always_inline)) T512 void dw_s2_512(const int K, const conv_geom *g, const float *x,
                                                                 const float *w, float bias, float *y) {
    __m512 wv[25];
    for (int i = 0; i < K * K; i++)
        wv[i] = _mm512_set1_ps(w[i]);
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    /* a vector of columns moved on by two: its lanes 1..15, then lane 0, 1
     * or 2 of the third load (the column that follows the even, odd or
     * moved-on even run) */
    const __m512i on1 = _mm512_set_epi32(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    const __m512i on1_odd = _mm512_set_epi32(17, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    const __m512i on1_even2 = _mm512_set_epi32(18, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    int64_t oh_n = g->out[0], ow_n = g->out[1], ih_n = g->in[0], iw_n = g->in[1], pt = g->pad[0], pl = g->pad[1];
    for (int64_t ow = 0; ow < ow_n; ow += 16) {
        int64_t c0 = 2 * ow - pl; /* first input column of the block */
        __mmask16 m[3];
        for (int k = 0; k < 3; k++) {
            int64_t lo = -(c0 + 16 * k), hi = iw_n - (c0 + 16 * k); /* lanes [lo, hi) are inside */
            lo = lo < 0 ? 0 : lo;
            hi = hi > 16 ? 16 : hi;
            m[k] = lo >= hi ? 0 : (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
        }
        int64_t left = ow_n - ow;
        __mmask16 out_mask = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        for (int64_t oh = 0; oh < oh_n; oh++) {
            __m512 acc = _mm512_set1_ps(bias);
            for (int kh = 0; kh < K; kh++) {
                int64_t ih = 2 * oh - pt + kh;
                if (ih < 0 || ih >= ih_n) continue;
                const float *src = x + ih * iw_n + c0;
                __m512 a = _mm512_maskz_loadu_ps(m[0], src), b = _mm512_maskz_loadu_ps(m[1], src + 16);
                __m512 c = _mm512_maskz_loadu_ps(m[2], src + 32);
                __m512 e0 = _mm512_permutex2var_ps(a, even, b), o1 = _mm512_permutex2var_ps(a, odd, b);
                __m512 e2 = _mm512_permutex2var_ps(e0, on1, c);
                acc = _mm512_fmadd_ps(wv[kh * K], e0, acc);
                acc = _mm512_fmadd_ps(wv[kh * K + 1], o1, acc);
                acc = _mm512_fmadd_ps(wv[kh * K + 2], e2, acc);
                if (K == 5) {
                    acc = _mm512_fmadd_ps(wv[kh * K + 3], _mm512_permutex2var_ps(o1, on1_odd, c), acc);
                    acc = _mm512_fmadd_ps(wv[kh * K + 4], _mm512_permutex2var_ps(e2, on1_even2, c), acc);
                }
            }
            _mm512_mask_storeu_ps(y + oh * ow_n + ow, out_mask, acc);
        }
    }
}

T512 static void dw_s2_avx512(const conv_geom *g, const float *x, const float *w, float bias, float *y) {
    if (g->kernel[0] == 3)
        dw_s2_512(3, g, x, w, bias, y);
    else
        dw_s2_512(5, g, x, w, bias, y);
}

/* Whether the AVX-512 stride-2 kernel (dw_s2_512) takes g: 3x3, and 5x5
 * with rows of at least 8 outputs.  In-process on Zen 5, batch 1, against
 * the padded copy (dw_vec512) and the channel-blocked kernel: 0.53-0.75x the
 * time for MobileNetV2's and EfficientNet-B0's 3x3 layers 112->56 and 56->28
 * (padded copy), 0.48-0.57x for 3x3 28->14 and 0.93x for 14->7 (blocked),
 * 0.64x for 5x5 56->28 (blocked); but 1.23x for 5x5 14->7, whose 7-output
 * rows fill under half a vector. */
static bool dw_s2_direct(const conv_geom *g) {
    int64_t k = g->kernel[0];
    return !strcmp(nn_gemm_kernel_name(), "avx512") && (k == 3 || (k == 5 && g->out[1] >= 8)) && g->kernel[1] == k &&
           g->stride[0] == 2 && g->stride[1] == 2 && g->dilation[0] == 1 && g->dilation[1] == 1;
}

/* AVX-512, stride-1 K x K kernels (K <= 5) that keep a small plane's size
 * (MobileNet's and EfficientNet's 14x14 and 7x7 layers): 16 positions of
 * the flat plane per vector, each tap a load masked to the lanes whose
 * neighbour is inside (window.h), so no padded copy and no half-empty
 * vectors at the ends of short rows. */
static inline __attribute__((always_inline)) T512 void dw_flat512(const int K, const int NP, const nn_flat_taps *t,
                                                                  const float *const *x, const float *const *w,
                                                                  const float *bias, float *const *y) {
    __m512 wv[2][25];
    for (int q = 0; q < NP; q++)
        for (int i = 0; i < K * K; i++)
            wv[q][i] = _mm512_set1_ps(w[q][i]);
    for (int64_t v = 0; v < t->vecs; v++) {
        __m512 acc[2];
        for (int q = 0; q < NP; q++)
            acc[q] = _mm512_set1_ps(bias[q]);
        for (int kh = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++) {
                int64_t at = v * 16 + (kh - t->pt) * t->w + (kw - t->pl);
                __mmask16 m = t->row_tap[v][kw] & t->col_tap[v][kh];
                for (int q = 0; q < NP; q++)
                    acc[q] = _mm512_fmadd_ps(wv[q][kh * K + kw], _mm512_maskz_loadu_ps(m, x[q] + at), acc[q]);
            }
        for (int q = 0; q < NP; q++)
            _mm512_mask_storeu_ps(y[q] + v * 16, nn_flat_lanes(t->n, v), acc[q]);
    }
}

/* Stride-1 3x3 depthwise convs padded by 1 on every side (MobileNetV2's
 * and EfficientNet-B0's, from 112x112 down to 14x14), on the flat plane
 * copied into the middle of a zeroed buffer (xp: its first float; a row
 * and a vector of zeros, DW_ROTATE_MARGIN(w), on either side).  Per row of
 * taps, the vectors before, at and after the output vector give the left
 * and right taps by lane rotation (valignd): one new load per row of taps
 * as the window slides, where dw_flat512 spent 9 masked loads, most split
 * across cache lines, on 9 multiply-adds, and dw_plane_avx512 9 unaligned
 * ones on row vectors that rows of 56 or 28 leave partly empty.  Rows above
 * and below the plane read zeros; the left and right taps are masked at the
 * row ends.  The three rows accumulate apart, so their chains of
 * multiply-adds overlap.  In-process on Zen 5, MobileNetV2 at batch 1, one
 * thread: 0.59x dw_flat512's time on 28x28 and 0.73-0.75x on 14x14 (with
 * the row ends from a table per conv, as now, 0.9x more), 0.64x
 * dw_plane_avx512's on 56x56 and 0.86x on 112x112; on two threads 56x56
 * 0.67x, 112x112 unchanged while the row-end table took a division per
 * lane, 0.86x of that once it counted columns instead.  The model 0.976x
 * with the flat planes alone, 0.973x more with the larger ones
 * (EfficientNet-B0 0.985x).  On 7x7 (9x9
 * padded) it ties with depthwise_blocked, which keeps those. */
#define DW_ROTATE_MAX_W     256
#define DW_ROTATE_MARGIN(w) ((w) + 32)

/* Per 16-float vector of a plane with rows of w_n floats: the lanes whose
 * left (edges[v][0]) and right (edges[v][1]) neighbours lie in the same row.
 * Built on every run, so the column is counted along, not divided out. */
static void dw_rotate_edges(int64_t n, int64_t w_n, uint16_t (*edges)[2]) {
    int64_t col = 0;
    for (int64_t v = 0; v * 16 < n; v++) {
        uint16_t left = 0, right = 0;
        for (int j = 0; j < 16; j++, col = col + 1 == w_n ? 0 : col + 1) {
            left |= (uint16_t)((col > 0) << j);
            right |= (uint16_t)((col < w_n - 1) << j);
        }
        edges[v][0] = left;
        edges[v][1] = right;
    }
}

T512 static void dw_rotate_avx512(int64_t n, int64_t w_n, const uint16_t (*edges)[2], const float *xp, const float *w,
                                  float bias, float *y) {
    __m512 wv[9], win[3][3]; /* per row of taps: the vectors before, at and after */
    for (int i = 0; i < 9; i++)
        wv[i] = _mm512_set1_ps(w[i]);
    const float *row[3];
    for (int r = 0; r < 3; r++) {
        row[r] = xp + (r - 1) * w_n;
        win[r][1] = _mm512_loadu_ps(row[r] - 16);
        win[r][2] = _mm512_loadu_ps(row[r]);
    }
    for (int64_t v = 0; v * 16 < n; v++) {
        __m512 acc[3];
        for (int r = 0; r < 3; r++) {
            win[r][0] = win[r][1];
            win[r][1] = win[r][2];
            win[r][2] = _mm512_loadu_ps(row[r] + v * 16 + 16);
            __m512 left = _mm512_castsi512_ps(
                _mm512_alignr_epi32(_mm512_castps_si512(win[r][1]), _mm512_castps_si512(win[r][0]), 15));
            __m512 right = _mm512_castsi512_ps(
                _mm512_alignr_epi32(_mm512_castps_si512(win[r][2]), _mm512_castps_si512(win[r][1]), 1));
            acc[r] = _mm512_fmadd_ps(wv[r * 3 + 1], win[r][1], r == 0 ? _mm512_set1_ps(bias) : _mm512_setzero_ps());
            acc[r] = _mm512_mask3_fmadd_ps(wv[r * 3], left, acc[r], edges[v][0]);
            acc[r] = _mm512_mask3_fmadd_ps(wv[r * 3 + 2], right, acc[r], edges[v][1]);
        }
        _mm512_mask_storeu_ps(y + v * 16, nn_flat_lanes(n, v), _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), acc[2]));
    }
}

/* np (1 or 2) planes at once: 3x3 windows take two, whose chains of
 * multiply-adds then interleave and share each tap's mask. */
T512 static void dw_flat_avx512(const nn_flat_taps *t, int np, const float *const *x, const float *const *w,
                                const float *bias, float *const *y) {
    if (t->kh == 3 && np == 2)
        dw_flat512(3, 2, t, x, w, bias, y);
    else if (t->kh == 3)
        dw_flat512(3, 1, t, x, w, bias, y);
    else
        dw_flat512(5, 1, t, x, w, bias, y);
}

/* Whether depthwise_2d runs g on the flat plane. */
static bool dw_flat(const conv_geom *g, nn_flat_taps *t) {
    int64_t k = g->kernel[0];
    if (strcmp(nn_gemm_kernel_name(), "avx512") || (k != 3 && k != 5) || g->kernel[1] != k) return false;
    for (int d = 0; d < 2; d++)
        if (g->stride[d] != 1 || g->dilation[d] != 1 || g->out[d] != g->in[d]) return false;
    return nn_flat_taps_init(t, g->in[0], g->in[1], k, k, g->pad[0], g->pad[1]);
}

/* y += residual, then the activation, over n outputs. */
static void dw_epilogue(const nn_epilogue *e, float *y, const float *res, int64_t n) {
    if (!e) return;
    if (res)
        for (int64_t i = 0; i < n; i++)
            y[i] += res[i];
    nn_gemm_act(y, n, e->act, e->alpha, e->beta);
}

/* Channel-blocked (AVX2 code, which AVX-512 machines run too): on small
 * planes (MobileNet's and EfficientNet's 28x28 and below) vectors along a
 * row are short and each output's taps form one dependent chain.  Here 8
 * channels' planes are transposed into one zero-padded block of 8-float
 * pixels, where each tap of 4 outputs is 4 independent full-width FMAs with
 * the 8 channels' weights, and the outputs are transposed back to planes.
 * Measured on Zen 3 against dw_plane: 0.2x (5x5 on 28x28) to 0.4-0.9x (3x3
 * on 14x14 and 7x7), and 0.5x for 5x5 stride 2 on 56x56; but 1.2-2x slower
 * for 3x3 on 56x56 and 112x112 planes, whose rows already fill vectors, so
 * 3x3 stops at 32x32 padded pixels.
 * With AVX-512 (Zen 5, in-process against dw_plane_avx512 and dw_flat512):
 * 0.4-0.8x for 5x5, 0.5-0.9x for 3x3 stride 2 and 0.9x for 3x3 on 7x7, but
 * 1.02-1.12x for 3x3 stride 1 on 14x14 and 28x28, where dw_flat512 keeps
 * them. */
static int64_t dw_blocked_max_pixels(const char *isa, int64_t k, int64_t s) {
    if (!strcmp(isa, "avx2")) return k == 3 ? 32 * 32 : 64 * 64;
    if (!strcmp(isa, "avx512")) return k == 5 ? 64 * 64 : s == 2 ? 32 * 32 : 9 * 9;
    return 0;
}

#define DWB_LANES 8

typedef struct dw_blocked {
    int64_t pw;               /* padded row, in pixels */
    int64_t in_n, out_n;      /* positions per input and output plane */
    const int32_t *in_pixel;  /* per input position: its padded pixel */
    const int32_t *out_pixel; /* per output position, rounded up to 4: its window's first padded pixel */
} dw_blocked;

static bool dw_blocked_fits(const conv_geom *g, int64_t *ph, int64_t *pw) {
    int64_t k = g->kernel[0], s = g->stride[0];
    if (g->out_ch != g->group || (k != 3 && k != 5) || g->kernel[1] != k || (s != 1 && s != 2) || g->stride[1] != s ||
        g->dilation[0] != 1 || g->dilation[1] != 1)
        return false;
    if (dw_s2_direct(g)) return false;
    *ph = nn_padded_extent(g->out[0], s, k, 1, g->pad[0], g->in[0]);
    *pw = nn_padded_extent(g->out[1], s, k, 1, g->pad[1], g->in[1]);
    return *ph * *pw <= dw_blocked_max_pixels(nn_gemm_kernel_name(), k, s);
}

/* floats of one thread's scratch: the padded block, then the outputs */
static size_t dw_blocked_thread_floats(const conv_geom *g, int64_t ph, int64_t pw) {
    return (size_t)((ph * pw + nn_round_up(g->out_size, DWB_LANES)) * DWB_LANES);
}

/* bytes of the position tables ahead of the threads' scratch */
static size_t dw_blocked_table_bytes(const conv_geom *g) {
    return (size_t)nn_round_up(g->in_size + nn_round_up(g->out_size, 4), 16) * sizeof(int32_t);
}

/* workspace bytes for a g that fits, with padded extents ph x pw */
static size_t dw_blocked_bytes(const conv_geom *g, int64_t ph, int64_t pw, int threads) {
    return dw_blocked_table_bytes(g) + (size_t)threads * dw_blocked_thread_floats(g, ph, pw) * sizeof(float);
}

static size_t dw_blocked_workspace(const conv_geom *g, int threads) {
    int64_t ph, pw;
    return dw_blocked_fits(g, &ph, &pw) ? dw_blocked_bytes(g, ph, pw, threads) : 0;
}

#define T256     __attribute__((target("avx2,fma")))
#define V256(op) _mm256_##op
#define V512(op) _mm512_##op

/* r[0..7] (rows) become their columns. */
static inline __attribute__((always_inline)) T256 void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4h + j], 128-bit half L: column j + 4L of rows 4h..4h+3 */
    for (int h = 0; h < 8; h += 4) {
        u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
        u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xee);
        u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xee);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        r[j + 4] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}

/* nch (<= 8) channels: planes x (in_n apart) into y (out_n apart). */
static inline __attribute__((always_inline)) T256 void dw_block8(const int K, const dw_blocked *b, int64_t nch,
                                                                 const float *x, const float *w, const float *bias,
                                                                 float *pixels, float *outs, float *y) {
    for (int64_t p = 0; p < b->in_n; p += 8) {
        int64_t left = b->in_n - p;
        __m256 r[8];
        for (int c = 0; c < 8; c++)
            r[c] = c >= nch    ? _mm256_setzero_ps()
                   : left >= 8 ? _mm256_loadu_ps(x + c * b->in_n + p)
                               : nn_load_first8(x + c * b->in_n + p, left);
        transpose8(r);
        for (int64_t i = 0; i < 8 && p + i < b->in_n; i++)
            _mm256_storeu_ps(pixels + (int64_t)b->in_pixel[p + i] * 8, r[i]);
    }
    float wt[25][8];
    for (int t = 0; t < K * K; t++)
        for (int c = 0; c < 8; c++)
            wt[t][c] = c < nch ? w[c * K * K + t] : 0.0f;
    __m256 bv = !bias ? _mm256_setzero_ps() : nch == 8 ? _mm256_loadu_ps(bias) : nn_load_first8(bias, nch);
    for (int64_t o = 0; o < b->out_n; o += 4) {
        __m256 acc[4];
        const float *src[4];
        for (int j = 0; j < 4; j++) {
            acc[j] = bv;
            src[j] = pixels + (int64_t)b->out_pixel[o + j] * 8;
        }
        for (int kh = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++) {
                __m256 wv = _mm256_loadu_ps(wt[kh * K + kw]);
                for (int j = 0; j < 4; j++)
                    acc[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src[j] + (kh * b->pw + kw) * 8), acc[j]);
            }
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(outs + (o + j) * 8, acc[j]);
    }
    for (int64_t o = 0; o < b->out_n; o += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; i++)
            r[i] = _mm256_loadu_ps(outs + (o + i) * 8);
        transpose8(r);
        int64_t left = b->out_n - o;
        for (int c = 0; c < nch; c++) {
            if (left >= 8)
                _mm256_storeu_ps(y + c * b->out_n + o, r[c]);
            else
                nn_store_first8(y + c * b->out_n + o, r[c], left);
        }
    }
}

T256 static void dw_block8_avx2(const dw_blocked *b, int k, int64_t nch, const float *x, const float *w,
                                const float *bias, float *pixels, float *outs, float *y) {
    if (k == 3)
        dw_block8(3, b, nch, x, w, bias, pixels, outs, y);
    else
        dw_block8(5, b, nch, x, w, bias, pixels, outs, y);
}

/* One (image, 8 channels) block per task; g fits (dw_blocked_fits, which
 * gave ph and pw) and the workspace holds dw_blocked_bytes. */
static void depthwise_blocked(const conv_geom *g, int64_t ph, int64_t pw, const float *x, const float *w,
                              const float *bias, float *y, const nn_epilogue *e, const float *res, void *workspace,
                              int threads) {
    int64_t s = g->stride[0], ow_n = g->out[1];
    int32_t *in_pixel = workspace, *out_pixel = in_pixel + g->in_size;
    for (int64_t i = 0; i < g->in_size; i++)
        in_pixel[i] = (int32_t)((i / g->in[1] + g->pad[0]) * pw + i % g->in[1] + g->pad[1]);
    for (int64_t o = 0; o < nn_round_up(g->out_size, 4); o++) { /* those past the plane repeat its last window */
        int64_t q = o < g->out_size ? o : g->out_size - 1;
        out_pixel[o] = (int32_t)(q / ow_n * s * pw + q % ow_n * s);
    }
    dw_blocked b = {.pw = pw, .in_n = g->in_size, .out_n = g->out_size, .in_pixel = in_pixel, .out_pixel = out_pixel};
    float *scratch = (float *)((char *)workspace + dw_blocked_table_bytes(g));
    size_t per_thread = dw_blocked_thread_floats(g, ph, pw);
    int64_t groups = (g->out_ch + DWB_LANES - 1) / DWB_LANES, tasks = g->batch * groups;
#pragma omp parallel num_threads(threads) if (tasks > 1 && tasks * g->out_size * g->kernel_size * DWB_LANES > 32768)
    {
        float *pixels = scratch + per_thread * (size_t)omp_get_thread_num(), *outs = pixels + ph * pw * DWB_LANES;
        memset(pixels, 0, sizeof(float) * (size_t)(ph * pw * DWB_LANES)); /* the pads: blocks write the interior */
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t n = t / groups, c0 = t % groups * DWB_LANES;
            int64_t nch = g->out_ch - c0 < DWB_LANES ? g->out_ch - c0 : DWB_LANES, plane = n * g->out_ch + c0;
            dw_block8_avx2(&b, (int)g->kernel[0], nch, x + plane * g->in_size, w + c0 * g->kernel_size,
                           bias ? bias + c0 : NULL, pixels, outs, y + plane * g->out_size);
            dw_epilogue(e, y + plane * g->out_size, res ? res + plane * g->out_size : NULL, nch * g->out_size);
        }
    }
}

/* Planes up to this many floats are copied into a zero-padded stack buffer
 * first, so that every tap is in bounds; larger ones check at the edges. */
#define DW_PADDED_MAX     16384
#define DW_SLACK          64 /* vector reads past the last row */
#define DW_SPLIT_MIN_COLS 32

/* depthwise_2d on flat planes (dw_flat gave t): two planes per task for
 * 3x3 windows whose input is small enough to be in cache.  In-process on
 * Zen 5 against one plane per task, batch 1: 0.68-0.95x the time on
 * MobileNetV2's 28x28 and 14x14 layers (input 0.3-0.6 MB), 0.89-0.92x on
 * EfficientNet-B0's 3x3 ones on 14x14; but at batch 64 (19-38 MB) 1.45-1.55x
 * on the 14x14 ones. */
#define DW_FLAT_PAIR_MAX_BYTES (1 << 20)

/* The input plane that output plane p (image-major) of a depthwise conv reads. */
static const float *dw_input_plane(const conv_geom *g, const float *x, int64_t p) {
    int64_t n = p / g->out_ch, oc = p % g->out_ch;
    return x + (n * g->in_ch + oc / (g->out_ch / g->group)) * g->in_size;
}

static void depthwise_flat(const conv_geom *g, const nn_flat_taps *t, const float *x, const float *w, const float *bias,
                           float *y, const nn_epilogue *e, const float *res, int threads) {
    int64_t planes = g->batch * g->out_ch;
    bool pairs = t->kh == 3 && (double)planes * (double)g->in_size * sizeof(float) <= DW_FLAT_PAIR_MAX_BYTES;
    int64_t np = pairs ? 2 : 1, tasks = (planes + np - 1) / np;
#pragma omp parallel for num_threads(threads) if (planes * g->out_size * g->kernel_size > 32768)
    for (int64_t task = 0; task < tasks; task++) {
        int64_t p0 = task * np, here = planes - p0 < np ? planes - p0 : np;
        const float *xs[2], *ws[2];
        float bs[2], *ys[2];
        for (int64_t q = 0; q < here; q++) {
            int64_t oc = (p0 + q) % g->out_ch;
            xs[q] = dw_input_plane(g, x, p0 + q);
            ws[q] = w + oc * g->kernel_size;
            bs[q] = bias ? bias[oc] : 0.0f;
            ys[q] = y + (p0 + q) * g->out_size;
        }
        dw_flat_avx512(t, (int)here, xs, ws, bs, ys);
        dw_epilogue(e, ys[0], res ? res + p0 * g->out_size : NULL, here * g->out_size);
    }
}

/* Whether dw_rotate_avx512 runs g. */
static bool dw_rotate(const conv_geom *g) {
    if (strcmp(nn_gemm_kernel_name(), "avx512") || g->kernel[0] != 3 || g->kernel[1] != 3 ||
        g->in_size > DW_PADDED_MAX || g->in[1] > DW_ROTATE_MAX_W)
        return false;
    for (int d = 0; d < 2; d++)
        if (g->stride[d] != 1 || g->dilation[d] != 1 || g->pad[d] != 1 || g->out[d] != g->in[d]) return false;
    return true;
}

#define DW_ROTATE_BUF_FLOATS (DW_PADDED_MAX + 2 * DW_ROTATE_MARGIN(DW_ROTATE_MAX_W))

/* depthwise_2d by dw_rotate_avx512, one plane per task, each copied into
 * the middle of the thread's zeroed buffer (only the plane's part is ever
 * written, so the margins stay zero). */
static void depthwise_rotate(const conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                             const nn_epilogue *e, const float *res, int threads) {
    int64_t planes = g->batch * g->out_ch, margin = DW_ROTATE_MARGIN(g->in[1]);
    uint16_t edges[DW_PADDED_MAX / 16][2];
    dw_rotate_edges(g->in_size, g->in[1], edges);
#pragma omp parallel num_threads(threads) if (planes * g->out_size * g->kernel_size > 32768)
    {
        float buf[DW_ROTATE_BUF_FLOATS];
        memset(buf, 0, sizeof(float) * (size_t)(g->in_size + 2 * margin));
#pragma omp for schedule(static)
        for (int64_t p = 0; p < planes; p++) {
            int64_t oc = p % g->out_ch;
            float *yp = y + p * g->out_size;
            memcpy(buf + margin, dw_input_plane(g, x, p), sizeof(float) * (size_t)g->in_size);
            dw_rotate_avx512(g->in_size, g->in[1], (const uint16_t(*)[2])edges, buf + margin, w + oc * g->kernel_size,
                             bias ? bias[oc] : 0.0f, yp);
            dw_epilogue(e, yp, res ? res + p * g->out_size : NULL, g->out_size);
        }
    }
}

/* One output plane per task (but see depthwise_flat). */
static void depthwise_2d(const conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                         const nn_epilogue *e, const float *res, int threads) {
    if (dw_rotate(g)) {
        depthwise_rotate(g, x, w, bias, y, e, res, threads);
        return;
    }
    nn_flat_taps flat;
    if (dw_flat(g, &flat)) {
        depthwise_flat(g, &flat, x, w, bias, y, e, res, threads);
        return;
    }
    int64_t planes = g->batch * g->out_ch;
    int64_t oh_n = g->out[0], ow_n = g->out[1], ih_n = g->in[0], iw_n = g->in[1];
    int64_t kh_n = g->kernel[0], kw_n = g->kernel[1], sh = g->stride[0], sw = g->stride[1];
    int64_t dh = g->dilation[0], dw = g->dilation[1], pt = g->pad[0], pl = g->pad[1];
    /* padded extent: everything the windows touch */
    int64_t ph_n = nn_padded_extent(oh_n, sh, kh_n, dh, pt, ih_n),
            pw_n = nn_padded_extent(ow_n, sw, kw_n, dw, pl, iw_n);
    bool padded = ph_n * pw_n <= DW_PADDED_MAX;
    int64_t a = 0, b = ow_n; /* interior columns */
    if (!padded) nn_valid_range(-pl, sw, iw_n - (kw_n - 1) * dw, ow_n, &a, &b);
    const char *isa = nn_gemm_kernel_name();
    void (*plane_fn)(const conv_geom *, const dw_plane *) = !strcmp(isa, "avx512") ? dw_plane_avx512
                                                            : !strcmp(isa, "avx2") ? dw_plane_avx2
                                                                                   : dw_plane_scalar;
    /* Stride 2 along rows reads every other float; the padded copy splits
     * each row by column parity instead (AVX-512 has dw_s2_512).
     * Measured in-process on Zen 3 (AVX2) for 3x3: 0.80x the time with 56
     * outputs per row, 0.85x with 40, 0.96x with 32; but 1.08-1.24x with
     * 28, 30 and 36, rows that end in a partial vector; and 2x for 5x5. */
    bool direct_s2 = dw_s2_direct(g);
    bool split = padded && kh_n == 3 && kw_n == 3 && sh == 2 && sw == 2 && dh == 1 && dw == 1 &&
                 ow_n >= DW_SPLIT_MIN_COLS && ow_n % 8 == 0 && plane_fn != dw_plane_avx512;
    int64_t half = split ? (pw_n + 1) / 2 : 0;
#pragma omp parallel for num_threads(threads) if (planes * g->out_size * g->kernel_size > 32768)
    for (int64_t p = 0; p < planes; p++) {
        float buf[DW_PADDED_MAX + DW_SLACK];
        int64_t oc = p % g->out_ch;
        const float *xp = dw_input_plane(g, x, p), *wp = w + oc * g->kernel_size;
        float *yp = y + p * g->out_size, b0 = bias ? bias[oc] : 0.0f;
        if (direct_s2) {
            dw_s2_avx512(g, xp, wp, b0, yp);
        } else if (padded) {
            if (half)
                nn_pad_plane_split(buf, ph_n, pw_n, DW_SLACK, xp, ih_n, iw_n, pt, pl, 0.0f);
            else
                nn_pad_plane(buf, ph_n, pw_n, DW_SLACK, xp, ih_n, iw_n, pt, pl, 0.0f);
            plane_fn(g, &(dw_plane){.xp = buf, .w = wp, .y = yp, .bias = b0, .pw_n = pw_n, .half = half});
        } else {
            for (int64_t oh = 0; oh < oh_n; oh++) {
                float *yrow = yp + oh * ow_n;
                int64_t kh_lo, kh_hi, ih0 = oh * sh - pt;
                nn_valid_range(ih0, dh, ih_n, kh_n, &kh_lo, &kh_hi);
                for (int64_t ow = 0; ow < ow_n; ow++)
                    yrow[ow] = b0;
                for (int64_t kh = kh_lo; kh < kh_hi; kh++) {
                    const float *xrow = xp + (ih0 + kh * dh) * iw_n, *wrow = wp + kh * kw_n;
                    dw_row(yrow, xrow, wrow, kw_n, sw, dw, a, b, -pl);
                    dw_border(yrow, xrow, wrow, g, 0, a);
                    dw_border(yrow, xrow, wrow, g, b, ow_n);
                }
            }
        }
        dw_epilogue(e, yp, res ? res + p * g->out_size : NULL, g->out_size);
    }
}

/* Direct, for convs with few input channels: the RGB stems (3 -> 32
 * 3x3 stride 2 in MobileNetV2 and EfficientNet-B0, 3 -> 64 7x7 stride 2 in
 * ResNet-50, GoogLeNet and DenseNet-201, 3 -> 64 3x3 in VGG-19).  As a GEMM
 * their K (channels x taps: 27 to 147) is short, and gathering the im2col
 * panels costs about as much as the multiply-adds.  Here each image's
 * channels are copied once into zero-padded planes (rows split by column
 * parity for stride 2, so a tap's outputs are consecutive floats), and a
 * block of 4 output channels x 3 vectors of outputs along a row (24 with
 * AVX2, 48 with AVX-512) accumulates every tap in 12 registers: per tap 3
 * loads, 4 broadcasts of the weights as they lie, 12 multiply-adds.  On
 * Zen 5 (AVX-512) against the GEMM, in-process: 0.65-0.7x the time for the
 * 3x3 stems, 0.6x for the 7x7. */
#define DIRECT_MAX_IN_CH 4
#define DIRECT_OC        4
#define DIRECT_VECS      3
#define DIRECT_SLACK     64 /* vector reads past a plane's last row: under 3 x 16 floats */
#define DIRECT_MAX_KW    11

typedef struct conv_direct {
    const conv_geom *g;
    const float *planes; /* in_ch padded planes of one image, `plane` floats apart */
    int64_t plane, pw;
    int64_t col[DIRECT_MAX_KW]; /* where tap kw of a row's first output lies in its padded row */
    const float *w, *bias, *res;
    float *y;
    const nn_epilogue *e;
    /* the stems' ReLU and Clip are applied in registers, min(max(acc, lo),
     * hi); any other epilogue runs over each finished row */
    bool clip, row_epilogue;
    float lo, hi;
} conv_direct;

static bool direct_fits(const conv_geom *g, int64_t *ph, int64_t *pw) {
    int64_t s = g->stride[0];
    const char *isa = nn_gemm_kernel_name();
    if ((strcmp(isa, "avx2") && strcmp(isa, "avx512")) || g->nsp != 2 || g->group != 1 || g->in_ch > DIRECT_MAX_IN_CH ||
        (s != 1 && s != 2) || g->stride[1] != s || g->dilation[0] != 1 || g->dilation[1] != 1 ||
        g->kernel[1] > DIRECT_MAX_KW)
        return false;
    *ph = nn_padded_extent(g->out[0], s, g->kernel[0], 1, g->pad[0], g->in[0]);
    *pw = nn_padded_extent(g->out[1], s, g->kernel[1], 1, g->pad[1], g->in[1]);
    return true;
}

static size_t direct_workspace(const conv_geom *g) {
    int64_t ph, pw;
    return direct_fits(g, &ph, &pw) ? sizeof(float) * (size_t)(g->in_ch * (ph * pw + DIRECT_SLACK)) : 0;
}

/* Output channels [oc0, oc0 + R) of output row oh, NV vectors of LANES
 * outputs per block (fewer on the row's last block, which computes only the
 * vectors it stores); KW: the kernel's width when constant (its taps
 * unroll), 0 for any.  One body for both widths: V(op) names the intrinsic
 * of the width, STORE_FIRST(p, v, n) stores a vector's first n floats. */
#define DIRECT_BLOCK_BODY(VEC, V, LANES, STORE_FIRST)                                                                  \
    const conv_geom *g = d->g;                                                                                         \
    int64_t kh_n = g->kernel[0], kw_n = KW ? KW : g->kernel[1], s = g->stride[0];                                      \
    int64_t taps = g->in_ch * kh_n * kw_n, left = g->out[1] - ow0;                                                     \
    VEC acc[DIRECT_OC][DIRECT_VECS];                                                                                   \
    for (int r = 0; r < R; r++)                                                                                        \
        for (int v = 0; v < NV; v++)                                                                                   \
            acc[r][v] = V(set1_ps)(d->bias ? d->bias[oc0 + r] : 0.0f);                                                 \
    const float *w = d->w + oc0 * taps;                                                                                \
    for (int64_t c = 0; c < g->in_ch; c++)                                                                             \
        for (int64_t kh = 0; kh < kh_n; kh++) {                                                                        \
            const float *row = d->planes + c * d->plane + (oh * s + kh) * d->pw + ow0;                                 \
            for (int64_t kw = 0; kw < kw_n; kw++, w++) {                                                               \
                const float *src = row + d->col[kw];                                                                   \
                VEC x[DIRECT_VECS];                                                                                    \
                for (int v = 0; v < NV; v++)                                                                           \
                    x[v] = V(loadu_ps)(src + LANES * v);                                                               \
                for (int r = 0; r < R; r++) {                                                                          \
                    VEC a = V(set1_ps)(w[r * taps]);                                                                   \
                    for (int v = 0; v < NV; v++)                                                                       \
                        acc[r][v] = V(fmadd_ps)(a, x[v], acc[r][v]);                                                   \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    if (d->clip)                                                                                                       \
        for (int r = 0; r < R; r++)                                                                                    \
            for (int v = 0; v < NV; v++)                                                                               \
                acc[r][v] = V(min_ps)(V(max_ps)(acc[r][v], V(set1_ps)(d->lo)), V(set1_ps)(d->hi));                     \
    for (int r = 0; r < R; r++) {                                                                                      \
        float *y = d->y + (oc0 + r) * g->out_size + oh * g->out[1] + ow0;                                              \
        for (int v = 0; v < NV; v++) {                                                                                 \
            if (left >= LANES * (v + 1))                                                                               \
                V(storeu_ps)(y + LANES * v, acc[r][v]);                                                                \
            else                                                                                                       \
                STORE_FIRST(y + LANES * v, acc[r][v], left - LANES * v);                                               \
        }                                                                                                              \
    }

static inline __attribute__((always_inline)) T512 void store_first16(float *p, __m512 v, int64_t n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), v);
}
static inline __attribute__((always_inline)) T256 void
direct_block256(const int R, const int NV, const int KW, const conv_direct *d, int64_t oc0, int64_t oh, int64_t ow0) {
    DIRECT_BLOCK_BODY(__m256, V256, 8, nn_store_first8)
}
static inline __attribute__((always_inline)) T512 void
direct_block512(const int R, const int NV, const int KW, const conv_direct *d, int64_t oc0, int64_t oh, int64_t ow0) {
    DIRECT_BLOCK_BODY(__m512, V512, 16, store_first16)
}

/* One block of R (1 to DIRECT_OC) channels, with R a constant. */
#define DIRECT_BLOCK_ROWS(BLOCK, NV)                                                                                   \
    (R == 4   ? BLOCK(4, NV, KW, d, oc0, oh, ow0)                                                                      \
     : R == 3 ? BLOCK(3, NV, KW, d, oc0, oh, ow0)                                                                      \
     : R == 2 ? BLOCK(2, NV, KW, d, oc0, oh, ow0)                                                                      \
              : BLOCK(1, NV, KW, d, oc0, oh, ow0))
/* Output row oh, every channel: blocks of DIRECT_OC channels x DIRECT_VECS
 * vectors, the row's last block with only the vectors it needs. */
#define DIRECT_ROW_BODY(BLOCK, LANES)                                                                                  \
    int64_t oc_n = d->g->out_ch, ow_n = d->g->out[1];                                                                  \
    for (int64_t oc0 = 0; oc0 < oc_n; oc0 += DIRECT_OC) {                                                              \
        int R = oc_n - oc0 >= DIRECT_OC ? DIRECT_OC : (int)(oc_n - oc0);                                               \
        for (int64_t ow0 = 0; ow0 < ow_n; ow0 += LANES * DIRECT_VECS) {                                                \
            int64_t vecs = (ow_n - ow0 + LANES - 1) / LANES;                                                           \
            int NV = vecs >= DIRECT_VECS ? DIRECT_VECS : (int)vecs;                                                    \
            /* constant R and NV: the accumulators stay in registers */                                                \
            if (NV == 3)                                                                                               \
                DIRECT_BLOCK_ROWS(BLOCK, 3);                                                                           \
            else if (NV == 2)                                                                                          \
                DIRECT_BLOCK_ROWS(BLOCK, 2);                                                                           \
            else                                                                                                       \
                DIRECT_BLOCK_ROWS(BLOCK, 1);                                                                           \
        }                                                                                                              \
    }                                                                                                                  \
    for (int64_t oc = 0; oc < oc_n && d->row_epilogue; oc++) { /* the row is still in L1 */                            \
        float *y = d->y + oc * d->g->out_size + oh * ow_n;                                                             \
        dw_epilogue(d->e, y, d->res ? d->res + (y - d->y) : NULL, ow_n);                                               \
    }

/* Bodies built by macros: clang-format would take them for statements and
 * indent what follows. */
/* clang-format off */
static inline __attribute__((always_inline)) T256 void direct_row256(const int KW, const conv_direct *d, int64_t oh) {
    DIRECT_ROW_BODY(direct_block256, 8)
}
static inline __attribute__((always_inline)) T512 void direct_row512(const int KW, const conv_direct *d, int64_t oh) {
    DIRECT_ROW_BODY(direct_block512, 16)
}

/* KW unrolled for the stems' 3 and 7 */
#define DIRECT_ROW_FOR(SUFFIX, TARGET, ROW)                                                                            \
    TARGET static void direct_row_##SUFFIX(const conv_direct *d, int64_t oh) {                                         \
        if (d->g->kernel[1] == 3)                                                                                      \
            ROW(3, d, oh);                                                                                             \
        else if (d->g->kernel[1] == 7)                                                                                 \
            ROW(7, d, oh);                                                                                             \
        else                                                                                                           \
            ROW(0, d, oh);                                                                                             \
    }
DIRECT_ROW_FOR(avx2, T256, direct_row256)
DIRECT_ROW_FOR(avx512, T512, direct_row512)

/* g fits (direct_fits gave ph and pw); `planes` holds direct_workspace. */
static void conv_direct_run(const conv_geom *g, int64_t ph, int64_t pw, const float *x, const float *w,
                            const float *bias, float *y, const nn_epilogue *e, const float *res, float *planes,
                            int threads) {
    /* clang-format on */
    int64_t plane = ph * pw + DIRECT_SLACK, half = g->stride[0] == 2 ? (pw + 1) / 2 : 0;
    void (*row)(const conv_direct *, int64_t) =
        strcmp(nn_gemm_kernel_name(), "avx512") ? direct_row_avx2 : direct_row_avx512;
    double work = (double)g->batch * (double)g->out_ch * (double)g->out_size * (double)(g->in_ch * g->kernel_size);
#pragma omp parallel num_threads(threads) if (work > 1e5)
    for (int64_t n = 0; n < g->batch; n++) {
        const float *xn = x + n * g->in_ch * g->in_size;
#pragma omp for schedule(static)
        for (int64_t c = 0; c < g->in_ch; c++) {
            if (half)
                nn_pad_plane_split(planes + c * plane, ph, pw, DIRECT_SLACK, xn + c * g->in_size, g->in[0], g->in[1],
                                   g->pad[0], g->pad[1], 0.0f);
            else
                nn_pad_plane(planes + c * plane, ph, pw, DIRECT_SLACK, xn + c * g->in_size, g->in[0], g->in[1],
                             g->pad[0], g->pad[1], 0.0f);
        }
        int64_t first = n * g->out_ch * g->out_size;
        conv_direct d = {.g = g,
                         .planes = planes,
                         .plane = plane,
                         .pw = pw,
                         .w = w,
                         .bias = bias,
                         .res = res ? res + first : NULL,
                         .y = y + first,
                         .e = e};
        if (e && e->residual < 0 && (e->act == NN_ACT_RELU || e->act == NN_ACT_CLIP)) {
            d.clip = true;
            d.lo = e->act == NN_ACT_CLIP ? e->alpha : 0.0f;
            d.hi = e->act == NN_ACT_CLIP ? e->beta : INFINITY;
        } else {
            d.row_epilogue = e && (e->residual >= 0 || e->act != NN_ACT_NONE);
        }
        for (int64_t kw = 0; kw < g->kernel[1]; kw++) /* split rows: tap kw reads its parity's half */
            d.col[kw] = half ? (kw & 1) * half + kw / 2 : kw;
#pragma omp for schedule(static)
        for (int64_t oh = 0; oh < g->out[0]; oh++)
            row(&d, oh);
    }
}

/* Whether the depthwise kernels, or the direct ones for few input
 * channels, run the call.  They read the input as it is, so a conv with a
 * prologue goes to the GEMM, which applies it. */
static bool runs_depthwise(const nn_call *c, const conv_geom *g) { return !c->prologue && is_depthwise_2d(g); }
static bool runs_direct(const nn_call *c, const conv_geom *g, int64_t *ph, int64_t *pw) {
    return !c->prologue && direct_fits(g, ph, pw);
}

/* A pointwise conv on at most this many positions (a 7x7 plane) computes
 * positions x channels, its output stored transposed into NCHW: its rows
 * (positions) pad to the kernel's 14-row tiles instead of its columns to
 * 32-column ones (49 positions: 56 computed instead of 64), and its
 * columns (channels) come in multiples of 32.  With two threads, on
 * Zen 5: 0.79-0.99x the time of channels x positions on every 7x7
 * pointwise shape of MobileNetV2, EfficientNet-B0 and ResNet-50 (49 x 320
 * -> 1280: 92 us instead of 114).  On a 14x14 plane it gained as often as
 * it lost (0.80-1.08x): the transposition costs as much as the padding it
 * saves. */
#define POSITIONS_AS_ROWS_MAX 64
static bool positions_as_rows(const nn_call *c, const conv_geom *g) {
    /* one position is a matrix-vector product (squeeze-excitation's convs), which the GEMM runs as one */
    return is_pointwise(g) && g->group == 1 && !c->prologue && g->out_size > 1 && g->out_size <= POSITIONS_AS_ROWS_MAX;
}

/* The GEMM for all (image, group) products of a Conv; `packed` is the
 * weights packed in prepare (as A, or as B for positions_as_rows), or NULL. */
static nn_gemm conv_gemm(const nn_call *c, const conv_geom *g, nn_gemm_conv *cv, const nn_gemm_packed *packed) {
    int64_t cg = g->in_ch / g->group, mg = g->out_ch / g->group, kdim = cg * g->kernel_size;
    const nn_epilogue *e = c->epilogue;
    bool pointwise = is_pointwise(g);
    *cv = (nn_gemm_conv){.nsp = g->nsp, .channels = cg};
    for (int d = 0; d < g->nsp; d++) {
        cv->in[d] = g->in[d];
        cv->out[d] = g->out[d];
        cv->kernel[d] = g->kernel[d];
        cv->stride[d] = g->stride[d];
        cv->dilation[d] = g->dilation[d];
        cv->pad[d] = g->pad[d];
    }
    nn_gemm gm = {
        .m = mg,
        .n = g->out_size,
        .k = kdim,
        .a = c->in[1].data,
        .lda = kdim,
        .a_packed = packed,
        .b = c->in[0].data,
        .ldb = g->in_size,
        /* a pointwise conv's B is its input as it lies: channels x positions */
        .b_conv = pointwise ? NULL : cv,
        .c = c->out[0].data,
        .ldc = g->out_size,
        .alpha = 1.0f,
        .bias_kind = nn_present(c, 2) ? NN_GEMM_BIAS_ROW : NN_GEMM_BIAS_NONE,
        .bias = nn_present(c, 2) ? c->in[2].data : NULL,
        .residual = nn_epilogue_residual(c),
        .ldr = g->out_size,
        .act = e ? e->act : NN_ACT_NONE,
        .act_alpha = e ? e->alpha : 0.0f,
        .act_beta = e ? e->beta : 0.0f,
        .b_scale = c->prologue ? c->in[c->prologue->scale].data : NULL,
        .b_shift = c->prologue ? c->in[c->prologue->shift].data : NULL,
        .b_act = c->prologue ? c->prologue->act : NN_ACT_NONE,
        .batch = {g->batch, g->group},
        .stride_a = {0, mg * kdim},
        .stride_b = {g->in_ch * g->in_size, cg * g->in_size},
        .stride_c = {g->out_ch * g->out_size, mg * g->out_size},
        .stride_bias = {0, mg},
    };
    if (!positions_as_rows(c, g)) return gm;
    /* positions x in_ch times in_ch x out_ch: X and W read transposed, C stored transposed (group 1, no prologue) */
    gm.m = g->out_size;
    gm.n = g->out_ch;
    gm.k = g->in_ch;
    gm.a = c->in[0].data;
    gm.lda = g->in_size;
    gm.trans_a = true;
    gm.a_packed = NULL;
    gm.b = c->in[1].data;
    gm.ldb = g->in_ch;
    gm.trans_b = true;
    gm.b_packed = packed;
    gm.trans_c = true;
    if (gm.bias_kind != NN_GEMM_BIAS_NONE) gm.bias_kind = NN_GEMM_BIAS_COL;
    gm.stride_a[0] = g->in_ch * g->in_size;
    gm.stride_b[0] = 0;
    return gm;
}

/* Which way prepare goes: Winograd weights, packed GEMM weights, or nothing
 * (depthwise convs, the direct few-channel convs and matrix-vector
 * products read the weights as they are).  The engine frees the original
 * weights once prepared (prepared_inputs), so run must use what is made
 * here. */
typedef enum conv_prep { PREP_NONE, PREP_WINOGRAD, PREP_GEMM } conv_prep;

/* What prepare makes: this header, then at CONV_PREPARED_DATA bytes either
 * the weights transformed for Winograd or a packed GEMM block. */
typedef struct conv_prepared {
    int32_t kind; /* conv_prep */
} conv_prepared;
#define CONV_PREPARED_DATA 64
static const void *prepared_data(const conv_prepared *p) { return (const char *)p + CONV_PREPARED_DATA; }

/* The Winograd view of a 2-D conv; false when Winograd does not apply or
 * would not win (nn_winograd_applicable says when). */
static bool winograd_shape(const conv_geom *g, nn_winograd_shape *s) {
    if (g->nsp != 2) return false;
    *s = (nn_winograd_shape){.batch = g->batch,
                             .in_ch = g->in_ch,
                             .out_ch = g->out_ch,
                             .group = g->group,
                             .in_h = g->in[0],
                             .in_w = g->in[1],
                             .out_h = g->out[0],
                             .out_w = g->out[1],
                             .pad_top = g->pad[0],
                             .pad_left = g->pad[1],
                             .kernel_h = g->kernel[0],
                             .kernel_w = g->kernel[1],
                             .stride_h = g->stride[0],
                             .stride_w = g->stride[1],
                             .dilation_h = g->dilation[0],
                             .dilation_w = g->dilation[1]};
    return nn_winograd_applicable(s);
}

/* the engine asks after prepare: room for the path prepare picked */
static size_t workspace_conv(const nn_call *c) {
    conv_geom g;
    nn_gemm_conv cv;
    nn_winograd_shape ws;
    const conv_prepared *p = c->prepared;
    if (conv_resolve(c, false, &g) != NN_OK) return 0;
    int64_t ph, pw;
    if (runs_depthwise(c, &g)) return dw_blocked_workspace(&g, c->threads);
    if (!p && runs_direct(c, &g, &ph, &pw)) return direct_workspace(&g);
    if (p && p->kind == PREP_WINOGRAD && winograd_shape(&g, &ws)) return nn_winograd_workspace(&ws, c->threads);
    nn_gemm_packed packed = p ? nn_gemm_block_view(prepared_data(p)) : (nn_gemm_packed){0};
    nn_gemm gm = conv_gemm(c, &g, &cv, p ? &packed : NULL);
    return nn_gemm_workspace(&gm, c->threads);
}

static conv_prep prepare_kind(const nn_call *c, conv_geom *g, nn_winograd_shape *ws) {
    int64_t ph, pw;
    if (conv_resolve(c, false, g) != NN_OK || runs_depthwise(c, g) || !c->in[1].data ||
        (is_pointwise(g) && g->out_size == 1) || runs_direct(c, g, &ph, &pw))
        return PREP_NONE;
    return c->winograd && winograd_shape(g, ws) ? PREP_WINOGRAD : PREP_GEMM;
}

static size_t prepared_size_conv(const nn_call *c) {
    conv_geom g;
    nn_gemm_conv cv;
    nn_winograd_shape ws;
    switch (prepare_kind(c, &g, &ws)) {
    case PREP_WINOGRAD: return CONV_PREPARED_DATA + nn_winograd_prepared_size(&ws);
    case PREP_GEMM: {
        nn_gemm gm = conv_gemm(c, &g, &cv, NULL);
        return CONV_PREPARED_DATA +
               (positions_as_rows(c, &g) ? nn_gemm_pack_b_block_bytes(&gm) : nn_gemm_pack_a_block_bytes(&gm));
    }
    default: return 0;
    }
}

static nn_status prepare_conv(const nn_call *c, void *prepared) {
    conv_geom g;
    nn_gemm_conv cv;
    nn_winograd_shape ws;
    conv_prepared *p = prepared;
    void *data = (char *)prepared + CONV_PREPARED_DATA;
    switch (prepare_kind(c, &g, &ws)) {
    case PREP_WINOGRAD: p->kind = PREP_WINOGRAD; return nn_winograd_prepare(&ws, c->in[1].data, data, c->threads);
    case PREP_GEMM: {
        nn_gemm gm = conv_gemm(c, &g, &cv, NULL);
        p->kind = PREP_GEMM;
        if (positions_as_rows(c, &g))
            nn_gemm_pack_b_block(&gm, data);
        else
            nn_gemm_pack_a_block(&gm, data);
        return NN_OK;
    }
    default: return nn_call_error(c, NN_ERR_INTERNAL, "nothing to prepare");
    }
}

static bool prepared_fits_conv(const nn_call *c, const void *prepared, size_t size) {
    conv_geom g;
    nn_gemm_conv cv;
    nn_winograd_shape ws;
    const conv_prepared *p = prepared;
    if (size < CONV_PREPARED_DATA || conv_resolve(c, false, &g) != NN_OK || runs_depthwise(c, &g)) return false;
    size -= CONV_PREPARED_DATA;
    if (p->kind == PREP_WINOGRAD) return winograd_shape(&g, &ws) && size == nn_winograd_prepared_size(&ws);
    nn_gemm gm = conv_gemm(c, &g, &cv, NULL);
    if (p->kind != PREP_GEMM) return false;
    return positions_as_rows(c, &g) ? nn_gemm_block_fits_b(&gm, prepared_data(p), size)
                                    : nn_gemm_block_fits_a(&gm, prepared_data(p), size);
}

static nn_status run_conv(nn_call *c) {
    conv_geom g;
    nn_status st = conv_resolve(c, false, &g);
    if (st != NN_OK) return st;
    if (runs_depthwise(c, &g)) {
        int64_t ph, pw;
        if (dw_blocked_fits(&g, &ph, &pw) && c->workspace_size >= dw_blocked_bytes(&g, ph, pw, c->threads)) {
            depthwise_blocked(&g, ph, pw, c->in[0].data, c->in[1].data, nn_present(c, 2) ? c->in[2].data : NULL,
                              c->out[0].data, c->epilogue, nn_epilogue_residual(c), c->workspace, c->threads);
            return NN_OK;
        }
        depthwise_2d(&g, c->in[0].data, c->in[1].data, nn_present(c, 2) ? c->in[2].data : NULL, c->out[0].data,
                     c->epilogue, nn_epilogue_residual(c), c->threads);
        return NN_OK;
    }
    const conv_prepared *p = c->prepared;
    int64_t ph, pw;
    if (!p && runs_direct(c, &g, &ph, &pw) && c->workspace_size >= direct_workspace(&g)) {
        conv_direct_run(&g, ph, pw, c->in[0].data, c->in[1].data, nn_present(c, 2) ? c->in[2].data : NULL,
                        c->out[0].data, c->epilogue, nn_epilogue_residual(c), c->workspace, c->threads);
        return NN_OK;
    }
    nn_winograd_shape ws;
    if (p && p->kind == PREP_WINOGRAD) {
        if (!winograd_shape(&g, &ws))
            return nn_call_error(c, NN_ERR_INTERNAL, "weights were prepared for Winograd, shapes no longer fit it");
        st = nn_winograd_run(&ws, c->in[0].data, prepared_data(p), nn_present(c, 2) ? c->in[2].data : NULL, c->epilogue,
                             nn_epilogue_residual(c), c->out[0].data, c->workspace, c->workspace_size, c->threads);
        return st == NN_OK ? NN_OK
                           : nn_call_error(c, st, "Winograd conv failed (workspace of %zu bytes)", c->workspace_size);
    }
    nn_gemm_conv cv;
    nn_gemm_packed packed = p ? nn_gemm_block_view(prepared_data(p)) : (nn_gemm_packed){0};
    nn_gemm gm = conv_gemm(c, &g, &cv, p ? &packed : NULL);
    if (!nn_gemm_run(&gm, c->workspace, c->workspace_size, c->threads))
        return nn_call_error(c, NN_ERR_INTERNAL, "conv workspace too small or weights packed for another kernel");
    return NN_OK;
}

static size_t workspace_conv_transpose(const nn_call *c) {
    conv_geom g;
    if (conv_resolve(c, true, &g) != NN_OK) return 0;
    return sizeof(float) * (size_t)(g.out_ch / g.group * g.kernel_size * g.in_size);
}

static nn_status run_conv_transpose(nn_call *c) {
    conv_geom g;
    nn_status st = conv_resolve(c, true, &g);
    if (st != NN_OK) return st;
    const float *x = c->in[0].data, *w = c->in[1].data;
    const float *bias = nn_present(c, 2) ? c->in[2].data : NULL, *res = nn_epilogue_residual(c);
    float *y = c->out[0].data, *col = c->workspace;
    int64_t cg = g.in_ch / g.group, mg = g.out_ch / g.group, rows = mg * g.kernel_size;
    if (c->workspace_size < sizeof(float) * (size_t)(rows * g.in_size))
        return nn_call_error(c, NN_ERR_INTERNAL, "conv-transpose workspace too small");
    for (int64_t n = 0; n < g.batch; n++)
        for (int64_t grp = 0; grp < g.group; grp++) {
            /* W is (C, M/group, k...): group grp's rows are its input channels */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)g.in_size, (int)cg, 1.0f,
                        w + grp * cg * rows, (int)rows, x + (n * g.in_ch + grp * cg) * g.in_size, (int)g.in_size, 0.0f,
                        col, (int)g.in_size);
            int64_t first = (n * g.out_ch + grp * mg) * g.out_size;
            col2im(&g, mg, col, bias ? bias + grp * mg : NULL, y + first, c->epilogue, res ? res + first : NULL,
                   c->threads);
        }
    return NN_OK;
}

const nn_op_desc nn_op_Conv = {.name = "Conv",
                               .min_inputs = 2,
                               .max_inputs = 3,
                               .min_outputs = 1,
                               .max_outputs = 1,
                               .flags = NN_OPF_EPILOGUE | NN_OPF_PROLOGUE,
                               .parse = parse_conv,
                               .check = conv_check,
                               .infer = infer_conv,
                               .workspace = workspace_conv,
                               .run = run_conv,
                               .prepared_size = prepared_size_conv,
                               .prepare = prepare_conv,
                               .prepared_fits = prepared_fits_conv,
                               .prepared_inputs = 1u << 1};
const nn_op_desc nn_op_ConvTranspose = {.name = "ConvTranspose",
                                        .min_inputs = 2,
                                        .max_inputs = 3,
                                        .min_outputs = 1,
                                        .max_outputs = 1,
                                        .flags = NN_OPF_EPILOGUE,
                                        .parse = parse_conv,
                                        .check = conv_check,
                                        .infer = infer_conv_transpose,
                                        .workspace = workspace_conv_transpose,
                                        .run = run_conv_transpose};
