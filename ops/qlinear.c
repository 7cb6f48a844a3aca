/* The integer ops (opset 10): ConvInteger and MatMulInteger (int32 out),
 * QLinearConv and QLinearMatMul (requantized to 8 bits).  All run the int8
 * GEMM (qgemm.h): a conv as one product per (image, group) of its weights
 * and an im2col matrix padded with the input's zero point, so that padding
 * adds nothing; a matmul as one product per broadcast batch entry.
 *
 * Requantization, as ONNX Runtime computes it:
 *     y = saturate(round_half_even(float(acc + bias) * multiplier) + y_zp)
 * with multiplier = x_scale * w_scale[m] / y_scale in float, per output
 * channel (conv) or column (matmul) where the weights' scale is per axis.
 *
 * Constant weights are packed for the GEMM once, at load (prepare), with
 * their sums for the zero-point correction; requantization runs in the
 * GEMM's epilogue, tile by tile, so no int32 matrix is written and read.
 *
 * Zero points and scales: x / a per tensor; w per tensor or per output
 * channel; b per tensor or per column.  Other layouts (a per-row a_zero_point,
 * batched b scales) are refused. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "act_x86.h"
#include "conv_kernels.h"
#include "cpu_caches.h"
#include "geom.h"
#include "op.h"
#include "par.h"
#include "qgemm.h"
#include "qconv_nhwc.h"
#include "qgemm_kernel.h"
#include "quant.h"
#include "window.h"

static bool is_int8(nn_dtype t) { return t == NN_DTYPE_UINT8 || t == NN_DTYPE_INT8; }

/* Per-tensor (one value) or per-channel (`count` values, 1-D) input i. */
static nn_status per_channel(nn_call *c, int i, const char *what, int64_t count, bool *per) {
    *per = false;
    if (!nn_present(c, i)) return NN_OK;
    const nn_tensor *t = &c->in[i];
    int64_t n = nn_tensor_elements(t);
    if (n == 1 && t->ndim <= 1) return NN_OK;
    if (t->ndim == 1 && n == count) {
        *per = true;
        return NN_OK;
    }
    return nn_call_error(c, NN_ERR_UNSUPPORTED, "%s (input %d) must hold 1 or %lld values (1-D), got rank %d with %lld",
                         what, i, (long long)count, t->ndim, (long long)n);
}

static nn_status scalar_input(nn_call *c, int i, const char *what) {
    if (!nn_present(c, i)) return NN_OK;
    if (nn_tensor_elements(&c->in[i]) != 1 || c->in[i].ndim > 1)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "%s (input %d) must be one value (per tensor)", what, i);
    return NN_OK;
}

static nn_status dtype_is(nn_call *c, int i, const char *what, nn_dtype want) {
    if (nn_present(c, i) && c->in[i].dtype != want)
        return nn_call_error(c, NN_ERR_INVALID, "%s (input %d) has dtype %s, want %s", what, i,
                             nn_dtype_name(c->in[i].dtype), nn_dtype_name(want));
    return NN_OK;
}

static nn_status check_int8(nn_call *c, int i, const char *what) {
    if (!is_int8(c->in[i].dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "%s (input %d) has dtype %s (uint8 or int8 only)", what, i,
                             nn_dtype_name(c->in[i].dtype));
    return NN_OK;
}

/* Inputs of the two families, by role. */
typedef struct qio {
    int x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias; /* -1: the op has none */
} qio;
static const qio conv_int_io = {0, -1, 2, 1, -1, 3, -1, -1, -1};
static const qio qconv_io = {0, 1, 2, 3, 4, 5, 6, 7, 8};

/* Dtypes and zero-point / scale layouts, for `channels` output channels
 * (conv) or columns (matmul) along which w's may vary. */
static nn_status check_quant_inputs(nn_call *c, const qio *io, int64_t channels, bool *w_per) {
    nn_status st;
    bool scale_per = false;
    if ((st = check_int8(c, io->x, "x")) || (st = check_int8(c, io->w, "w")) ||
        (st = dtype_is(c, io->x_zero, "x zero point", c->in[io->x].dtype)) ||
        (st = dtype_is(c, io->w_zero, "w zero point", c->in[io->w].dtype)) ||
        (st = scalar_input(c, io->x_zero, "x zero point")) ||
        (st = per_channel(c, io->w_zero, "w zero point", channels, w_per)))
        return st;
    if (io->y_scale < 0) return NN_OK;
    if ((st = dtype_is(c, io->x_scale, "x scale", NN_DTYPE_FLOAT)) ||
        (st = dtype_is(c, io->w_scale, "w scale", NN_DTYPE_FLOAT)) ||
        (st = dtype_is(c, io->y_scale, "y scale", NN_DTYPE_FLOAT)) || (st = check_int8(c, io->y_zero, "y zero point")) ||
        (st = scalar_input(c, io->x_scale, "x scale")) || (st = scalar_input(c, io->y_scale, "y scale")) ||
        (st = scalar_input(c, io->y_zero, "y zero point")) ||
        (st = per_channel(c, io->w_scale, "w scale", channels, &scale_per)))
        return st;
    if (io->bias >= 0 && nn_present(c, io->bias)) {
        const nn_tensor *b = &c->in[io->bias];
        if (b->dtype != NN_DTYPE_INT32 || b->ndim != 1 || b->dims[0] != channels)
            return nn_call_error(c, NN_ERR_SHAPE, "B must be int32 of shape [%lld]", (long long)channels);
    }
    *w_per = *w_per || scale_per;
    return NN_OK;
}

/* Output element of channel m from int32 accumulators. */
typedef struct requant {
    float xs_over_ys; /* unused for int32 outputs */
    const float *ws;
    bool ws_per;
    int32_t zp, lo, hi;
    const int32_t *bias;
} requant;

static requant requant_of(const nn_call *c, const qio *io) {
    requant r = {0};
    if (io->y_scale < 0) return r;
    r.xs_over_ys = ((const float *)c->in[io->x_scale].data)[0];
    r.ws = c->in[io->w_scale].data;
    r.ws_per = nn_tensor_elements(&c->in[io->w_scale]) > 1;
    r.zp = nn_quant_zero(c, io->y_zero, 0);
    bool sgn = c->in[io->y_zero].dtype == NN_DTYPE_INT8;
    r.lo = sgn ? -128 : 0;
    r.hi = sgn ? 127 : 255;
    r.bias = io->bias >= 0 && nn_present(c, io->bias) ? c->in[io->bias].data : NULL;
    return r;
}

/* y_scale divides last: (x_scale * w_scale) / y_scale, ONNX Runtime's order. */
static float multiplier(const nn_call *c, const qio *io, const requant *r, int64_t m) {
    return r->xs_over_ys * r->ws[r->ws_per ? m : 0] / ((const float *)c->in[io->y_scale].data)[0];
}


/* What prepare makes (conv: A, one block per group; matmul: B): this
 * header, then the packed blocks, each nn_qgemm_packed_*_size rounded up to
 * 64 bytes, from QPREP_DATA on.  Checked again when read from the cache. */
typedef struct qprep {
    int64_t magic, rows, k, blocks, is_signed;
} qprep;
#define QPREP_MAGIC 0x716770726570ll /* "qgprep" */
#define QPREP_DATA 64

/* Bytes of the prepared block for `blocks` packs of `one` bytes; 0 when too large. */
static size_t qprep_size(size_t one, int64_t blocks) {
    if (one == SIZE_MAX || blocks < 1) return 0;
    size_t b = (size_t)nn_round_up((int64_t)one, 64), total;
    if (__builtin_mul_overflow(b, (size_t)blocks, &total) || total > SIZE_MAX / 2) return 0;
    return total + QPREP_DATA;
}

static bool qprep_fits(const void *prepared, size_t size, size_t want, int64_t rows, int64_t k, int64_t blocks,
                       bool is_signed) {
    const qprep *h = prepared;
    return want && size == want && h->magic == QPREP_MAGIC && h->rows == rows && h->k == k && h->blocks == blocks &&
           h->is_signed == (int64_t)is_signed;
}

static const void *qprep_block(const void *prepared, size_t one, int64_t i) {
    return (const uint8_t *)prepared + QPREP_DATA + (size_t)i * (size_t)nn_round_up((int64_t)one, 64);
}

/* ---- ConvInteger and QLinearConv */

typedef nn_qconv_params qconv_params;

static nn_status parse_qconv(nn_parse_ctx *ctx) {
    qconv_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    nn_status st = nn_window_parse(ctx, &p->w);
    return st != NN_OK ? st : nn_attr_int(ctx, "group", 1, &p->group);
}

static nn_status check_qconv(const void *params, char *err, size_t err_size) {
    const qconv_params *p = params;
    nn_status st = nn_window_check(&p->w, err, err_size);
    if (st != NN_OK) return st;
    if (p->group < 1 || p->group > NN_ATTR_EXTENT_MAX)
        return nn_check_error(err, err_size, "group must be >= 1, got %lld", (long long)p->group);
    return NN_OK;
}

/* The conv's geometry (as ops/conv.c resolves a float Conv's). */
static nn_status qconv_resolve(const nn_call *c, const qio *io, nn_conv_geom *g) {
    const qconv_params *p = c->params;
    const nn_tensor *x = &c->in[io->x], *w = &c->in[io->w];
    if (x->ndim < 3 || w->ndim != x->ndim)
        return nn_call_error(c, NN_ERR_SHAPE, "x must have rank >= 3 and w the same rank (x rank %d, w rank %d)",
                             x->ndim, w->ndim);
    int nsp = g->nsp = x->ndim - 2;
    g->batch = x->dims[0];
    g->in_ch = x->dims[1];
    g->group = p->group;
    g->out_ch = w->dims[0];
    int64_t in_ch;
    if (__builtin_mul_overflow(w->dims[1], g->group, &in_ch) || in_ch != g->in_ch || g->out_ch % g->group)
        return nn_call_error(c, NN_ERR_SHAPE, "w %lldx%lld does not fit x channels %lld with group %lld",
                             (long long)w->dims[0], (long long)w->dims[1], (long long)g->in_ch, (long long)g->group);
    if ((p->w.n_kernel >= 0 && p->w.n_kernel != nsp) || (p->w.n_strides >= 0 && p->w.n_strides != nsp) ||
        (p->w.n_dilations >= 0 && p->w.n_dilations != nsp) || (p->w.n_pads >= 0 && p->w.n_pads != 2 * nsp))
        return nn_call_error(c, NN_ERR_INVALID, "kernel_shape/strides/dilations/pads lengths do not fit %d spatial dims",
                             nsp);
    g->in_size = g->out_size = g->kernel_size = 1;
    for (int d = 0; d < nsp; d++) {
        int64_t in = g->in[d] = x->dims[2 + d], k = g->kernel[d] = w->dims[2 + d];
        int64_t s = g->stride[d] = p->w.n_strides >= 0 ? p->w.strides[d] : 1;
        int64_t dil = g->dilation[d] = p->w.n_dilations >= 0 ? p->w.dilations[d] : 1;
        int64_t pb = p->w.n_pads >= 0 ? p->w.pads[d] : 0, pe = p->w.n_pads >= 0 ? p->w.pads[nsp + d] : 0, out;
        if (p->w.n_kernel >= 0 && p->w.kernel[d] != k)
            return nn_call_error(c, NN_ERR_SHAPE, "kernel_shape[%d] = %lld but w has %lld", d,
                                 (long long)p->w.kernel[d], (long long)k);
        if (s < 1 || dil < 1 || pb < 0 || pe < 0 || k < 1)
            return nn_call_error(c, NN_ERR_INVALID, "strides, dilations and kernel must be >= 1, pads >= 0");
        out = nn_window_out(p->w.auto_pad, in, (k - 1) * dil + 1, s, &pb, &pe);
        if (out < 1)
            return nn_call_error(c, NN_ERR_SHAPE, "spatial dim %d: output size %lld (input %lld, kernel %lld)", d,
                                 (long long)out, (long long)in, (long long)k);
        g->out[d] = out;
        g->pad[d] = pb;
        g->in_size *= in;
        g->out_size *= out;
        g->kernel_size *= k;
    }
    if (g->in_size > INT_MAX || g->out_size > INT_MAX || g->kernel_size * g->in_ch > INT_MAX || g->out_ch > INT_MAX)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "convolution too large for 32-bit sizes");
    return NN_OK;
}

nn_status nn_qlinearconv_parse(nn_parse_ctx *ctx) { return parse_qconv(ctx); }
nn_status nn_qlinearconv_check(const void *params, char *err, size_t err_size) {
    return check_qconv(params, err, err_size);
}

nn_status nn_qlinearconv_resolve(nn_call *c, nn_conv_geom *g) {
    bool w_per;
    nn_status st = qconv_resolve(c, &qconv_io, g);
    return st != NN_OK ? st : check_quant_inputs(c, &qconv_io, g->out_ch, &w_per);
}

static bool qconv_pointwise(const nn_conv_geom *g) {
    for (int d = 0; d < g->nsp; d++)
        if (g->kernel[d] != 1 || g->stride[d] != 1 || g->pad[d] != 0 || g->out[d] != g->in[d]) return false;
    return true;
}

static nn_status qconv_infer(nn_call *c, const qio *io) {
    nn_conv_geom g;
    nn_status st = qconv_resolve(c, io, &g);
    bool w_per;
    if (st == NN_OK) st = check_quant_inputs(c, io, g.out_ch, &w_per);
    if (st != NN_OK) return st;
    int64_t dims[NN_MAX_DIMS] = {g.batch, g.out_ch};
    for (int d = 0; d < g.nsp; d++)
        dims[2 + d] = g.out[d];
    nn_dtype out = io->y_zero >= 0 ? c->in[io->y_zero].dtype : NN_DTYPE_INT32;
    nn_tensor_set_shape(&c->out[0], out, g.nsp + 2, dims);
    return NN_OK;
}

/* dst[o] = src[o * stride]; stride 2 (ResNet's strided convs) on its own,
 * a loop the compiler vectorizes with restrict operands. */
static void gather_strided(uint8_t *restrict dst, const uint8_t *restrict src, int64_t n, int64_t stride) {
    if (stride == 2)
        for (int64_t o = 0; o < n; o++)
            dst[o] = src[2 * o];
    else
        for (int64_t o = 0; o < n; o++)
            dst[o] = src[o * stride];
}

/* One im2col row of a stride-1 tap whose output rows are as long as the
 * input's (3x3 pad-1 convs): output row oh reads input row oh + dh from
 * column lo + off on, so the rows inside the plane are one shifted copy of
 * it, whose columns outside [lo, hi) are then set to the pad, column by
 * column.  A memset and a memcpy of a few bytes per output row cost more
 * in calls than in bytes (12% of QDQ ResNet-50's time on one thread). */
static void im2col_same_rows(uint8_t *restrict dst, const uint8_t *restrict plane, const nn_conv_geom *g, int64_t dh,
                             int64_t off, int64_t lo, int64_t hi, uint8_t pad) {
    int64_t w = g->out[1], oh_n = g->out[0], a, b;
    nn_valid_range(dh, 1, g->in[0], oh_n, &a, &b);
    if (b < a) b = a;
    memset(dst, pad, (size_t)(a * w));
    memset(dst + b * w, pad, (size_t)((oh_n - b) * w));
    if (b == a) return;
    int64_t first = a * w + lo, last = (b - 1) * w + hi; /* input offset: + dh * w + off, inside the plane */
    memcpy(dst + first, plane + first + dh * w + off, (size_t)(last - first));
    for (int64_t c = 0; c < lo; c++) /* row a's before the copy, the others over what it wrapped in */
        for (int64_t oh = a; oh < b; oh++)
            dst[oh * w + c] = pad;
    for (int64_t c = hi; c < w; c++)
        for (int64_t oh = a; oh < b; oh++)
            dst[oh * w + c] = pad;
}

typedef struct im2col_job {
    const nn_conv_geom *g;
    const uint8_t *x;
    uint8_t pad;
    uint8_t *col;
} im2col_job;

/* Rows [lo, hi) of qconv_im2col. */
static void im2col_range(void *ctx, int64_t lo_row, int64_t hi_row, int seat) {
    (void)seat;
    const im2col_job *j = ctx;
    const nn_conv_geom *g = j->g;
    const uint8_t *x = j->x;
    uint8_t pad = j->pad, *col = j->col;
    int nsp = g->nsp;
    for (int64_t r = lo_row; r < hi_row; r++) {
        int64_t ci = r / g->kernel_size, kk = r % g->kernel_size, tap[NSP_MAX];
        for (int d = nsp - 1; d >= 0; d--) {
            tap[d] = kk % g->kernel[d];
            kk /= g->kernel[d];
        }
        const uint8_t *plane = x + ci * g->in_size;
        uint8_t *dst = col + r * g->out_size;
        if (nsp == 2) { /* rows at a time: a tap's valid columns are one range */
            int64_t ow = g->out[1], iw = g->in[1], off = tap[1] * g->dilation[1] - g->pad[1], lo, hi;
            nn_valid_range(off, g->stride[1], iw, ow, &lo, &hi);
            if (hi < lo) hi = lo;
            if (g->stride[0] == 1 && g->stride[1] == 1 && ow == iw && hi > lo) {
                im2col_same_rows(dst, plane, g, tap[0] * g->dilation[0] - g->pad[0], off, lo, hi, pad);
                continue;
            }
            for (int64_t oh = 0; oh < g->out[0]; oh++, dst += ow) {
                int64_t ih = oh * g->stride[0] - g->pad[0] + tap[0] * g->dilation[0];
                if (ih < 0 || ih >= g->in[0]) {
                    memset(dst, pad, (size_t)ow);
                    continue;
                }
                const uint8_t *src = plane + ih * iw + off;
                memset(dst, pad, (size_t)lo);
                if (g->stride[1] == 1) memcpy(dst + lo, src + lo, (size_t)(hi - lo));
                else
                    gather_strided(dst + lo, src + lo * g->stride[1], hi - lo, g->stride[1]);
                memset(dst + hi, pad, (size_t)(ow - hi));
            }
            continue;
        }
        for (int64_t pos = 0; pos < g->out_size; pos++) {
            int64_t q = pos, off = 0, stride = 1;
            bool inside = true;
            for (int d = nsp - 1; d >= 0; d--) {
                int64_t o = q % g->out[d];
                q /= g->out[d];
                int64_t i = o * g->stride[d] - g->pad[d] + tap[d] * g->dilation[d];
                if (i < 0 || i >= g->in[d]) inside = false;
                off += i * stride;
                stride *= g->in[d];
            }
            dst[pos] = inside ? plane[off] : pad;
        }
    }
}

/* col[(ci * K + kk) * P + pos] = x at the tap, or `pad` outside the plane. */
static void qconv_im2col(const nn_conv_geom *g, const uint8_t *x, int64_t cg, uint8_t pad, uint8_t *col,
                         int threads) {
    int64_t rows = cg * g->kernel_size;
    im2col_job j = {.g = g, .x = x, .pad = pad, .col = col};
    nn_par_for_range(rows * g->out_size > NN_PAR_MIN ? threads : 1, rows, 1, im2col_range, &j);
}

/* A 2-D conv reads its taps from padded planes instead of an im2col
 * matrix (docs/perf-notes.md, "Int8: convs over padded planes"): each
 * input plane is copied once into a plane padded with x's zero point, hp x
 * wp, split at stride s > 1 into s x s phase planes (rows and columns of
 * one remainder mod s), each hph x wph.  Tap (ci, kh, kw) at offsets (oy,
 * ox) = (kh dh, kw dw) is then phase (oy mod s, ox mod s) of channel ci
 * read from (oy / s) wph + ox / s on, for every stride: the GEMM's row of
 * B.  Its columns are a grid wph wide: column oh wph + ow is output (oh,
 * ow) for ow < out[1]; the other columns of each grid row are work thrown
 * away when the grid is copied into y.  Used where that rounds to at most
 * an eighth more 32-column panels than the im2col matrix has. */
typedef struct qpad {
    int64_t s, hp, wp, hph, wph, phase, plane, grid; /* phase: hph x wph; plane: s x s of them */
} qpad;

static bool qconv_padded(const nn_conv_geom *g, qpad *q) {
    if (g->nsp != 2 || g->kernel_size == 1 || g->stride[0] != g->stride[1] || g->stride[0] > 4) return false;
    int64_t sh, sw; /* the taps' spans less one */
    if (__builtin_mul_overflow(g->kernel[0] - 1, g->dilation[0], &sh) ||
        __builtin_mul_overflow(g->kernel[1] - 1, g->dilation[1], &sw) || sh > INT_MAX || sw > INT_MAX)
        return false;
    q->s = g->stride[0];
    q->hp = (g->out[0] - 1) * q->s + sh + 1; /* the padded rows and columns any tap reads */
    q->wp = (g->out[1] - 1) * q->s + sw + 1;
    q->hph = (q->hp + q->s - 1) / q->s; /* below 2^34 each: out < 2^31, s <= 4 */
    q->wph = (q->wp + q->s - 1) / q->s;
    if (__builtin_mul_overflow(q->hph, q->wph, &q->phase) || q->phase > INT_MAX / 16) return false;
    q->plane = q->phase * q->s * q->s;
    q->grid = (g->out[0] - 1) * q->wph + g->out[1];
    return nn_round_up(q->grid, 32) * 8 <= nn_round_up(g->out_size, 32) * 9;
}

/* Bytes before the zero points in the workspace: the im2col matrix, or the
 * padded planes, tap offsets and output grid; -1 if too large. */
static int64_t qconv_col_bytes(const nn_conv_geom *g, int64_t esize) {
    int64_t cg = g->in_ch / g->group, mg = g->out_ch / g->group, kdim = cg * g->kernel_size, planes, grid;
    if (qconv_pointwise(g)) return 0;
    qpad q;
    if (!qconv_padded(g, &q)) return nn_round_up(kdim * g->out_size, 64); /* < 2^62: both below 2^31 */
    if (__builtin_mul_overflow(cg, q.plane, &planes) || __builtin_mul_overflow(mg * esize, q.grid, &grid) ||
        planes > INT64_MAX / 4 || grid > INT64_MAX / 4)
        return -1;
    return nn_round_up(planes, 64) + nn_round_up(kdim * 8, 64) + nn_round_up(grid, 64);
}

typedef struct qpad_job {
    const nn_conv_geom *g;
    const qpad *q;
    const uint8_t *x;
    uint8_t *xp, pad;
} qpad_job;

/* Padded planes [lo, hi): each row copied once, the pad around them set. */
static void qpad_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const qpad_job *j = ctx;
    const qpad *q = j->q;
    int64_t ih = j->g->in[0], iw = j->g->in[1], pt = j->g->pad[0], pl = j->g->pad[1], s = q->s, wp = q->wp;
    for (int64_t ci = lo; ci < hi; ci++) {
        const uint8_t *src = j->x + ci * j->g->in_size;
        uint8_t *dst = j->xp + ci * q->plane;
        if (s == 1 && pt + ih <= q->hp && pl + iw <= wp) { /* rows in place, the pad between them */
            uint8_t *row = dst + pt * wp + pl;
            memset(dst, j->pad, (size_t)(row - dst));
            for (int64_t r = 0; r < ih; r++, row += wp) {
                memcpy(row, src + r * iw, (size_t)iw);
                uint8_t *end = r + 1 < ih ? row + wp : dst + q->plane; /* to the next row's first byte */
                memset(row + iw, j->pad, (size_t)(end - row - iw));
            }
            continue;
        }
        /* phases, or input rows and columns past what any tap reads: the pad
         * everywhere, then each row's columns dealt to their phases */
        memset(dst, j->pad, (size_t)q->plane);
        int64_t rows = ih < q->hp - pt ? ih : q->hp - pt, cols = iw < wp - pl ? iw : wp - pl;
        for (int64_t r = 0; r < rows; r++) {
            int64_t y = r + pt;
            uint8_t *prow = dst + (y % s) * s * q->phase + y / s * q->wph;
            for (int64_t pc = 0; pc < s; pc++) {
                int64_t x0 = ((pc - pl) % s + s) % s; /* the first input column whose padded column is pc mod s */
                if (x0 >= cols) continue;
                gather_strided(prow + pc * q->phase + (x0 + pl) / s, src + r * iw + x0, (cols - x0 + s - 1) / s, s);
            }
        }
    }
}

typedef struct qgrid_job {
    const uint8_t *grid;
    uint8_t *y;
    int64_t wp, rows, cols, esize, grid_n, out_size;
} qgrid_job;

/* Output channels [lo, hi) of the grid copied into y, each grid row's
 * first `cols` columns. */
static void qgrid_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const qgrid_job *j = ctx;
    size_t e = (size_t)j->esize;
    for (int64_t i = lo; i < hi; i++)
        for (int64_t r = 0; r < j->rows; r++)
            memcpy(j->y + (i * j->out_size + r * j->cols) * e, j->grid + (i * j->grid_n + r * j->wp) * e,
                   (size_t)j->cols * e);
}

/* A 2-D depthwise conv (one input and one output channel per group): a GEMM
 * per channel would be a 1-row product with k = the kernel's taps, all
 * overhead; here each channel's taps are summed directly, over rows of
 * output positions, in the same wrapping int32 arithmetic (padding taps,
 * x_zero - x_zero, add nothing and are skipped).  Weights read as they are:
 * such convs are not packed in prepare. */
static bool qconv_depthwise2d(const nn_conv_geom *g) {
    return g->nsp == 2 && g->group == g->in_ch && g->group == g->out_ch;
}

typedef struct qdw {
    const nn_conv_geom *g;
    const uint8_t *x, *w;
    bool x_signed, w_signed;
    int32_t xz;
    const int32_t *wz; /* wz[ch] when per channel, else wz[0] */
    bool wz_per;
    const nn_qgemm_out8 *o8; /* mult / bias for all channels; y for the whole output; NULL: int32 */
    int32_t *out32;
    uint8_t *scratch; /* qdw_scratch bytes per thread; NULL: qconv_depthwise_plane */
    qg_dw_tap_fn tap;
} qdw;

/* The depthwise conv over phase planes.  With strides s0 x s1, the padded
 * input is split into s0 * s1 planes, plane (a, b) holding padded rows
 * r * s0 + a and columns c * s1 + b as int16, less x's zero point (padding:
 * 0), each hp x wp.  Tap (kh, kw) then reads plane ((kh*d0) % s0, (kw*d1) % s1)
 * at a fixed offset from output position (oh, ow) taken as oh * wp + ow:
 * one contiguous run of OH * wp sums per tap for the whole output plane,
 * whatever its width (7x7 planes included), with no bounds inside.  The
 * columns from OW to wp are computed and dropped. */
typedef struct qdw_layout {
    int64_t hp, wp, plane, acc_elems;
    size_t bytes; /* per thread: the planes, then the uint32 sums */
} qdw_layout;

enum { QDW_SCRATCH_MAX = 4 << 20 };

/* false: too large for per-thread scratch (the row-wise path runs). */
static bool qdw_scratch(const nn_conv_geom *g, qdw_layout *l) {
    int64_t s0 = g->stride[0], s1 = g->stride[1];
    l->hp = g->out[0] + (g->kernel[0] - 1) * g->dilation[0] / s0;
    l->wp = g->out[1] + (g->kernel[1] - 1) * g->dilation[1] / s1;
    int64_t planes, acc;
    if (__builtin_mul_overflow(l->hp, l->wp, &l->plane) || __builtin_mul_overflow(l->plane, s0 * s1, &planes) ||
        __builtin_mul_overflow(g->out[0], l->wp, &acc) || planes > QDW_SCRATCH_MAX || acc > QDW_SCRATCH_MAX)
        return false;
    l->acc_elems = acc;
    int64_t bytes = nn_round_up(planes * 2, 64) + nn_round_up(acc * 4, 64);
    l->bytes = (size_t)bytes;
    return bytes <= QDW_SCRATCH_MAX;
}

static void qdw_plane_phased(const qdw *d, const qdw_layout *l, int64_t t, uint8_t *scratch) {
    const nn_conv_geom *g = d->g;
    int64_t ch = t % g->out_ch, s0 = g->stride[0], s1 = g->stride[1], ih_n = g->in[0], iw_n = g->in[1];
    int64_t oh_n = g->out[0], ow_n = g->out[1], hp = l->hp, wp = l->wp;
    int16_t *restrict ph = (int16_t *)scratch;
    uint32_t *acc = (uint32_t *)(scratch + nn_round_up(l->plane * s0 * s1 * 2, 64));
    const uint8_t *plane = d->x + t * g->in_size;
    int32_t xz = d->xz;
    for (int64_t a = 0; a < s0; a++)
        for (int64_t b = 0; b < s1; b++) {
            int16_t *restrict dst = ph + (a * s1 + b) * l->plane;
            /* columns c with c * s1 + b - pad inside the row: one range */
            int64_t lo, hi;
            nn_valid_range(b - g->pad[1], s1, iw_n, wp, &lo, &hi);
            if (hi < lo) hi = lo;
            for (int64_t r = 0; r < hp; r++, dst += wp) {
                int64_t ih = r * s0 + a - g->pad[0];
                if (ih < 0 || ih >= ih_n) {
                    memset(dst, 0, (size_t)wp * 2);
                    continue;
                }
                const uint8_t *src = plane + ih * iw_n + b - g->pad[1];
                for (int64_t c = 0; c < lo; c++)
                    dst[c] = 0;
                if (d->x_signed)
                    for (int64_t c = lo; c < hi; c++)
                        dst[c] = (int16_t)((int32_t)(int8_t)src[c * s1] - xz);
                else if (s1 == 1) /* contiguous: vectorizes */
                    for (int64_t c = lo; c < hi; c++)
                        dst[c] = (int16_t)((int32_t)src[c] - xz);
                else
                    for (int64_t c = lo; c < hi; c++)
                        dst[c] = (int16_t)((int32_t)src[c * s1] - xz);
                for (int64_t c = hi; c < wp; c++)
                    dst[c] = 0;
            }
        }
    int64_t n = (oh_n - 1) * wp + ow_n; /* the last row's dropped columns are not needed */
    memset(acc, 0, (size_t)n * 4);
    const uint8_t *wk = d->w + ch * g->kernel_size;
    int32_t wzv = d->wz[d->wz_per ? ch : 0];
    for (int64_t kh = 0; kh < g->kernel[0]; kh++)
        for (int64_t kw = 0; kw < g->kernel[1]; kw++) {
            uint8_t wb = wk[kh * g->kernel[1] + kw];
            int32_t wv = (d->w_signed ? (int32_t)(int8_t)wb : (int32_t)wb) - wzv;
            int64_t dh = kh * g->dilation[0], dw = kw * g->dilation[1];
            const int16_t *src = ph + ((dh % s0) * s1 + dw % s1) * l->plane + (dh / s0) * wp + dw / s1;
            if (wv) d->tap(acc, src, wv, n);
        }
    int64_t P = g->out_size;
    for (int64_t oh = 0; oh < oh_n; oh++) {
        const uint32_t *ar = acc + oh * wp;
        int64_t at = t * P + oh * ow_n;
        if (!d->o8) {
            for (int64_t o = 0; o < ow_n; o++)
                d->out32[at + o] = (int32_t)ar[o];
            continue;
        }
        /* locals, since the byte stores may alias o8's fields: the loop then vectorizes */
        const nn_qgemm_out8 *o8 = d->o8;
        float mu = o8->mult[ch];
        uint32_t bi = o8->bias ? (uint32_t)o8->bias[ch] : 0u;
        int32_t zp = o8->zp, lo = o8->lo, hi = o8->hi;
        uint8_t *restrict y = o8->y + at;
        for (int64_t o = 0; o < ow_n; o++)
            y[o] = (uint8_t)nn_qgemm_requantize((int32_t)(ar[o] + bi), mu, zp, lo, hi);
    }
}

enum { QDW_CHUNK = 256 };

static void qconv_depthwise_plane(const qdw *d, int64_t t) {
    const nn_conv_geom *g = d->g;
    int64_t ch = t % g->out_ch, kh_n = g->kernel[0], kw_n = g->kernel[1], ow = g->out[1], iw = g->in[1];
    const uint8_t *plane = d->x + t * g->in_size, *wk = d->w + ch * g->kernel_size;
    int32_t wzv = d->wz[d->wz_per ? ch : 0], xz = d->xz;
    int64_t P = g->out_size;
    for (int64_t oh = 0; oh < g->out[0]; oh++)
        for (int64_t c0 = 0; c0 < ow; c0 += QDW_CHUNK) {
            int64_t len = ow - c0 < QDW_CHUNK ? ow - c0 : QDW_CHUNK;
            uint32_t acc[QDW_CHUNK];
            memset(acc, 0, sizeof acc);
            for (int64_t kh = 0; kh < kh_n; kh++) {
                int64_t ih = oh * g->stride[0] - g->pad[0] + kh * g->dilation[0];
                if (ih < 0 || ih >= g->in[0]) continue;
                const uint8_t *row = plane + ih * iw;
                for (int64_t kw = 0; kw < kw_n; kw++) {
                    uint8_t wb = wk[kh * kw_n + kw];
                    int32_t wv = (d->w_signed ? (int32_t)(int8_t)wb : (int32_t)wb) - wzv;
                    int64_t off = kw * g->dilation[1] - g->pad[1], lo, hi, s1 = g->stride[1];
                    nn_valid_range(off, s1, iw, ow, &lo, &hi);
                    if (lo < c0) lo = c0;
                    if (hi > c0 + len) hi = c0 + len;
                    /* stride 1 apart, so that the common case reads contiguously and vectorizes */
                    if (d->x_signed)
                        for (int64_t o = lo; o < hi; o++)
                            acc[o - c0] += (uint32_t)(((int32_t)(int8_t)row[o * s1 + off] - xz) * wv);
                    else if (s1 == 1)
                        for (int64_t o = lo; o < hi; o++)
                            acc[o - c0] += (uint32_t)(((int32_t)row[o + off] - xz) * wv);
                    else
                        for (int64_t o = lo; o < hi; o++)
                            acc[o - c0] += (uint32_t)(((int32_t)row[o * s1 + off] - xz) * wv);
                }
            }
            int64_t at = t * P + oh * ow + c0;
            if (!d->o8) {
                for (int64_t o = 0; o < len; o++)
                    d->out32[at + o] = (int32_t)acc[o];
                continue;
            }
            const nn_qgemm_out8 *o8 = d->o8;
            float mu = o8->mult[ch];
            uint32_t bi = o8->bias ? (uint32_t)o8->bias[ch] : 0u;
            for (int64_t o = 0; o < len; o++)
                o8->y[at + o] = (uint8_t)nn_qgemm_requantize((int32_t)(acc[o] + bi), mu, o8->zp, o8->lo, o8->hi);
        }
}

typedef struct qdw_job {
    const qdw *d;
    const qdw_layout *l;
} qdw_job;

/* Plane t of the depthwise conv, with seat's scratch when phased. */
static void qdw_task(void *ctx, int64_t t, int seat) {
    const qdw_job *j = ctx;
    const qdw *d = j->d;
    if (d->scratch) qdw_plane_phased(d, j->l, t, d->scratch + j->l->bytes * (size_t)seat);
    else
        qconv_depthwise_plane(d, t);
}

/* The depthwise conv through the float kernels (conv_depthwise.c), exact:
 * x - x_zero and w - w_zero are integers in [-255, 255], so each product is
 * at most 255 * 255 in magnitude, and with at most QDWF_MAX_TAPS taps every
 * partial sum, in whatever order a kernel adds them, is an integer below
 * 2^24: a float holds it exactly.  The sums are then the int32 ones, and
 * requantize as above, to the same bytes; where they cannot wrap, the
 * phased path's wrapping arithmetic agrees.  Per task, a block of one
 * image's channels is widened to float in the seat's scratch, run on one
 * thread, and requantized while it is in cache: those kernels block channels
 * and keep small planes in registers, where the phased path spends a run
 * per tap per plane (docs/quantization.md, "Depthwise through the float
 * kernels"). */
#define QDWF_MAX_TAPS  258       /* 258 * 255 * 255 < 2^24 */
#define QDWF_LANES     8         /* channels per block of conv_depthwise.c's blocked kernel */
#define QDWF_PLANE_MAX (8 << 20) /* bytes of one channel's float planes, in and out: larger stay integer */

typedef struct qdwf_plan {
    nn_conv_geom gc;    /* one task's conv: one image, cb channels */
    int64_t cb, blocks; /* channels per task, tasks per image */
    size_t x_bytes, w_bytes, y_bytes, dw_bytes, per_seat;
} qdwf_plan;

/* NN_QDW_FLOAT=0 in the environment (read once) keeps these convs on the
 * integer paths below, for A/B measurements and their tests. */
static int qdwf_enabled = -1; /* nn_env_switch's state */

static bool qdwf_fits(const nn_conv_geom *g) {
    return nn_env_switch(&qdwf_enabled, "NN_QDW_FLOAT") && qconv_depthwise2d(g) && g->kernel_size <= QDWF_MAX_TAPS &&
           (g->in_size + g->out_size) * (int64_t)sizeof(float) <= QDWF_PLANE_MAX;
}

/* Channels per task: as many as keep a task's float planes and weights
 * within half of L2 (whole blocks of 8 where that is 8 or more; one, for
 * planes larger than that), but at least two tasks per thread where the
 * channels allow, and fewer than 8 evened out so that the threads get as
 * many tasks. */
static qdwf_plan qdwf_plan_of(const nn_conv_geom *g, int threads) {
    qdwf_plan p = {.gc = *g};
    int64_t ch = g->out_ch, per_ch = (g->in_size + g->out_size + g->kernel_size) * (int64_t)sizeof(float);
    int64_t cb = nn_cpu_l2_share(512 << 10, 1, 2) / (per_ch > 0 ? per_ch : 1);
    if (cb >= QDWF_LANES) cb = cb / QDWF_LANES * QDWF_LANES;
    int64_t spread = nn_round_up((ch + 2 * threads - 1) / (2 * threads), QDWF_LANES);
    if (g->batch < 2 * threads && cb > spread) cb = spread;
    if (cb < 1) cb = 1;
    if (cb > ch) cb = ch;
    if (cb < QDWF_LANES && threads > 1) { /* large planes, few per task: as many tasks per thread */
        int64_t blocks = (ch + cb - 1) / cb;
        blocks = (blocks + threads - 1) / threads * threads;
        cb = (ch + blocks - 1) / blocks;
    }
    p.cb = cb;
    p.blocks = (ch + cb - 1) / cb;
    p.gc.batch = 1;
    p.gc.in_ch = p.gc.out_ch = p.gc.group = cb;
    p.x_bytes = (size_t)nn_round_up(cb * g->in_size * (int64_t)sizeof(float), 64);
    p.w_bytes = (size_t)nn_round_up(cb * g->kernel_size * (int64_t)sizeof(float), 64);
    p.y_bytes = (size_t)nn_round_up(cb * g->out_size * (int64_t)sizeof(float), 64);
    p.dw_bytes = (size_t)nn_round_up((int64_t)nn_conv_depthwise_workspace(&p.gc, 1), 64);
    p.per_seat = p.x_bytes + p.w_bytes + p.y_bytes + p.dw_bytes;
    return p;
}

/* qdwf_task's widening and requantizing loops, compiled once per ISA:
 * as baseline x86-64 code they ran 4 lanes wide and took as long as the
 * conv itself. */
static inline __attribute__((always_inline)) void qdwf_widen_body(float *restrict f, const uint8_t *restrict x,
                                                                  int64_t n, bool sgn, float z) {
    if (sgn)
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)(int8_t)x[i] - z;
    else
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)x[i] - z;
}

static inline __attribute__((always_inline)) void qdwf_requant_body(uint8_t *restrict y, const float *restrict a,
                                                                    int64_t n, uint32_t bias, float mu, int32_t zp,
                                                                    int32_t lo, int32_t hi) {
    for (int64_t i = 0; i < n; i++)
        y[i] = (uint8_t)nn_qgemm_requantize((int32_t)((uint32_t)(int32_t)a[i] + bias), mu, zp, lo, hi);
}

typedef void (*qdwf_widen_fn)(float *, const uint8_t *, int64_t, bool, float);
typedef void (*qdwf_requant_fn)(uint8_t *, const float *, int64_t, uint32_t, float, int32_t, int32_t, int32_t);

#define QDWF_LOOPS_FOR(SUFFIX, ATTR)                                                                                   \
    ATTR static void qdwf_widen_##SUFFIX(float *f, const uint8_t *x, int64_t n, bool sgn, float z) {                   \
        qdwf_widen_body(f, x, n, sgn, z);                                                                              \
    }                                                                                                                  \
    ATTR static void qdwf_requant_##SUFFIX(uint8_t *y, const float *a, int64_t n, uint32_t bias, float mu, int32_t zp, \
                                           int32_t lo, int32_t hi) {                                                   \
        qdwf_requant_body(y, a, n, bias, mu, zp, lo, hi);                                                              \
    }
#if NN_HAVE_X86
QDWF_LOOPS_FOR(avx512, T512)
QDWF_LOOPS_FOR(avx2, T256)
#endif
QDWF_LOOPS_FOR(scalar, )

typedef struct qdwf_job {
    const qdw *d;
    const qdwf_plan *p;
    uint8_t *scratch; /* 64-byte aligned, p->per_seat bytes per seat */
    qdwf_widen_fn widen;
    qdwf_requant_fn requant;
} qdwf_job;

static void qdwf_task(void *ctx, int64_t t, int seat) {
    const qdwf_job *j = ctx;
    const qdw *d = j->d;
    const qdwf_plan *p = j->p;
    const nn_conv_geom *g = d->g;
    int64_t n = t / p->blocks, c0 = t % p->blocks * p->cb, nch = g->out_ch - c0 < p->cb ? g->out_ch - c0 : p->cb;
    int64_t in_n = nch * g->in_size, P = g->out_size, K = g->kernel_size;
    uint8_t *ws = j->scratch + p->per_seat * (size_t)seat;
    float *restrict fx = (float *)ws, *restrict fw = (float *)(ws + p->x_bytes);
    float *restrict fy = (float *)(ws + p->x_bytes + p->w_bytes);
    void *dws = ws + p->x_bytes + p->w_bytes + p->y_bytes;
    j->widen(fx, d->x + (n * g->in_ch + c0) * g->in_size, in_n, d->x_signed, (float)d->xz);
    for (int64_t c = 0; c < nch; c++) {
        const uint8_t *wk = d->w + (c0 + c) * K;
        float wz = (float)d->wz[d->wz_per ? c0 + c : 0];
        for (int64_t k = 0; k < K; k++)
            fw[c * K + k] = (d->w_signed ? (float)(int8_t)wk[k] : (float)wk[k]) - wz;
    }
    nn_conv_geom gc = p->gc;
    gc.in_ch = gc.out_ch = gc.group = nch;
    nn_conv_depthwise_run(&gc, fx, fw, NULL, NULL, fy, NULL, NULL, dws, p->dw_bytes, 1);
    int64_t at = (n * g->out_ch + c0) * P;
    if (!d->o8) {
        for (int64_t i = 0; i < nch * P; i++)
            d->out32[at + i] = (int32_t)fy[i];
        return;
    }
    const nn_qgemm_out8 *o8 = d->o8;
    for (int64_t c = 0; c < nch; c++)
        j->requant(o8->y + at + c * P, fy + c * P, P, o8->bias ? (uint32_t)o8->bias[c0 + c] : 0u, o8->mult[c0 + c],
                   o8->zp, o8->lo, o8->hi);
}

/* Scratch: the im2col bytes, int32 accumulators (QLinearConv), the GEMM's packing. */
static size_t qconv_workspace_of(const nn_call *c, const qio *io) {
    nn_conv_geom g;
    if (qconv_resolve(c, io, &g) != NN_OK) return 0;
    int64_t mg = g.out_ch / g.group, kdim = g.in_ch / g.group * g.kernel_size;
    qpad q;
    size_t gemm = nn_qgemm_workspace(mg, qconv_padded(&g, &q) ? q.grid : g.out_size, kdim);
    if (gemm == SIZE_MAX) return SIZE_MAX;
    int64_t col, acc, total; /* sizes are below 2^31 each (qconv_resolve): the products fit, their sum is checked */
    col = qconv_col_bytes(&g, io->y_zero >= 0 ? 1 : 4);
    if (col < 0) return SIZE_MAX;
    acc = nn_round_up(g.out_ch, 16) * 8; /* per-channel zero points and multipliers */
    if (__builtin_add_overflow(col, acc, &total) || (uint64_t)total > SIZE_MAX / 2 - gemm) return SIZE_MAX;
    size_t threads = (size_t)(c->threads > 0 ? c->threads : 1);
    if (qdwf_fits(&g)) { /* a float block per thread, instead of the GEMM's */
        qdwf_plan p = qdwf_plan_of(&g, (int)threads);
        return (size_t)total + 64 + p.per_seat * threads;
    }
    qdw_layout l;
    if (qconv_depthwise2d(&g) && qdw_scratch(&g, &l)) /* the phase planes, one set per thread, instead of the GEMM's */
        return (size_t)total + l.bytes * threads;
    return (size_t)total + gemm;
}

static nn_status qconv_run(nn_call *c, const qio *io) {
    nn_conv_geom g;
    bool w_per;
    nn_status st = qconv_resolve(c, io, &g);
    if (st == NN_OK) st = check_quant_inputs(c, io, g.out_ch, &w_per);
    if (st != NN_OK) return st;
    if (qconv_workspace_of(c, io) > c->workspace_size)
        return nn_call_error(c, NN_ERR_INTERNAL, "workspace too small");
    int64_t cg = g.in_ch / g.group, mg = g.out_ch / g.group, kdim = cg * g.kernel_size, P = g.out_size;
    bool pointwise = qconv_pointwise(&g), q8 = io->y_zero >= 0;
    qpad q;
    bool padded = qconv_padded(&g, &q);
    int64_t esize = q8 ? 1 : 4;
    uint8_t *col = c->workspace;
    int32_t *wzs = (int32_t *)(col + qconv_col_bytes(&g, esize));
    float *mults = (float *)(wzs + nn_round_up(g.out_ch, 16));
    void *gemm_ws = mults + nn_round_up(g.out_ch, 16);
    int32_t xz = nn_quant_zero(c, io->x_zero, 0);
    const uint8_t *x = c->in[io->x].data, *w = c->in[io->w].data;
    bool w_signed = c->in[io->w].dtype == NN_DTYPE_INT8;
    size_t one = nn_qgemm_packed_a_size(mg, kdim);
    if (c->prepared && !qprep_fits(c->prepared, qprep_size(one, g.group), qprep_size(one, g.group), mg, kdim,
                                   g.group, w_signed))
        return nn_call_error(c, NN_ERR_INTERNAL, "prepared weights do not fit");
    if (!c->prepared && !w) return nn_call_error(c, NN_ERR_INTERNAL, "weights neither present nor prepared");
    bool za_rows = nn_present(c, io->w_zero) && nn_tensor_elements(&c->in[io->w_zero]) > 1;
    for (int64_t m = 0; m < (za_rows ? g.out_ch : 1); m++)
        wzs[m] = nn_quant_zero(c, io->w_zero, m);
    if (za_rows) { /* per-channel zero points all equal (symmetric weights: all 0) are one (qgemm's uniform epilogue) */
        int64_t m = 1;
        while (m < g.out_ch && wzs[m] == wzs[0])
            m++;
        za_rows = m < g.out_ch;
    }
    requant r = requant_of(c, io);
    nn_qgemm_out8 o8 = {0};
    if (q8) {
        for (int64_t m = 0; m < g.out_ch; m++)
            mults[m] = multiplier(c, io, &r, m);
        o8 = (nn_qgemm_out8){.ldy = P, .zp = r.zp, .lo = r.lo, .hi = r.hi};
    }
    if (qconv_depthwise2d(&g) && w) { /* one parallel region over (image, channel) */
        o8.y = c->out[0].data;
        o8.mult = mults;
        o8.bias = r.bias;
        qdw d = {&g,   x, w, c->in[io->x].dtype == NN_DTYPE_INT8, w_signed, xz, wzs, za_rows, q8 ? &o8 : NULL,
                 c->out[0].data};
        if (qdwf_fits(&g)) {
            qdwf_plan p = qdwf_plan_of(&g, c->threads > 0 ? c->threads : 1);
            qdwf_job j = {.d = &d,
                          .p = &p,
                          .scratch = (uint8_t *)(((uintptr_t)gemm_ws + 63) & ~(uintptr_t)63),
                          .widen = qdwf_widen_scalar,
                          .requant = qdwf_requant_scalar};
#if NN_HAVE_X86
            if (nn_isa_active() == NN_ISA_AVX512) {
                j.widen = qdwf_widen_avx512;
                j.requant = qdwf_requant_avx512;
            } else if (nn_isa_active() == NN_ISA_AVX2) {
                j.widen = qdwf_widen_avx2;
                j.requant = qdwf_requant_avx2;
            }
#endif
            int64_t tasks = g.batch * p.blocks;
            nn_par_for(tasks * P * g.kernel_size * p.cb > NN_PAR_MIN ? c->threads : 1, tasks, qdwf_task, &j);
            return NN_OK;
        }
        int64_t planes = g.batch * g.out_ch;
        qdw_layout l;
        if (qdw_scratch(&g, &l)) {
            d.scratch = gemm_ws;
            d.tap = nn_qg_dw_tap_for(nn_isa_active());
        }
        qdw_job j = {.d = &d, .l = &l};
        nn_par_for(planes * P * g.kernel_size > NN_PAR_MIN ? c->threads : 1, planes, qdw_task, &j);
        return NN_OK;
    }
    /* padded planes: the tap offsets (rows of B), then the output grid */
    int64_t *roff = padded ? (int64_t *)(col + nn_round_up(cg * q.plane, 64)) : NULL;
    uint8_t *grid = padded ? (uint8_t *)roff + nn_round_up(kdim * 8, 64) : NULL;
    if (padded)
        for (int64_t p = 0; p < kdim; p++) {
            int64_t ci = p / g.kernel_size, oy = p % g.kernel_size / g.kernel[1] * g.dilation[0],
                    ox = p % g.kernel[1] * g.dilation[1];
            roff[p] = ci * q.plane + (oy % q.s * q.s + ox % q.s) * q.phase + oy / q.s * q.wph + ox / q.s;
        }
    for (int64_t n = 0; n < g.batch; n++)
        for (int64_t gi = 0; gi < g.group; gi++) {
            const uint8_t *xg = x + (n * g.in_ch + gi * cg) * g.in_size;
            if (padded) {
                qpad_job pj = {.g = &g, .q = &q, .x = xg, .xp = col, .pad = (uint8_t)xz};
                nn_par_for_range(cg * q.plane > NN_PAR_MIN ? c->threads : 1, cg, 1, qpad_range, &pj);
            } else if (!pointwise)
                qconv_im2col(&g, xg, cg, (uint8_t)xz, col, c->threads);
            int64_t off = (n * g.out_ch + gi * mg) * P, ld = padded ? q.grid : P;
            uint8_t *y = padded ? grid : (uint8_t *)c->out[0].data + off * esize;
            if (q8) {
                o8.y = y;
                o8.ldy = ld;
                o8.mult = mults + gi * mg;
                o8.bias = r.bias ? r.bias + gi * mg : NULL;
            }
            nn_qgemm qg = {.m = mg,
                           .n = padded ? q.grid : P,
                           .k = kdim,
                           .a = w ? w + gi * mg * kdim : NULL,
                           .lda = kdim,
                           .a_signed = w_signed,
                           .a_packed = c->prepared ? qprep_block(c->prepared, one, gi) : NULL,
                           .b = pointwise ? xg : col,
                           .ldb = P,
                           .b_row_off = roff,
                           .b_signed = c->in[io->x].dtype == NN_DTYPE_INT8,
                           .za = wzs + (za_rows ? gi * mg : 0),
                           .za_per_row = za_rows,
                           .zb = &xz,
                           .out8 = q8 ? &o8 : NULL,
                           .c = q8 ? NULL : (int32_t *)y,
                           .ldc = ld};
            nn_qgemm_run(&qg, gemm_ws, c->threads);
            if (padded) {
                qgrid_job gj = {.grid = grid,
                                .y = (uint8_t *)c->out[0].data + off * esize,
                                .wp = q.wph,
                                .rows = g.out[0],
                                .cols = g.out[1],
                                .esize = esize,
                                .grid_n = q.grid,
                                .out_size = P};
                nn_par_for_range(mg * P > NN_PAR_MIN ? c->threads : 1, mg, 1, qgrid_range, &gj);
            }
        }
    return NN_OK;
}

/* Weights packed at load when they are constants. */
static size_t qconv_prepared_size(const nn_call *c, const qio *io) {
    nn_conv_geom g;
    bool w_per;
    if (!c->in[io->w].data || qconv_resolve(c, io, &g) != NN_OK || check_quant_inputs((nn_call *)c, io, g.out_ch, &w_per))
        return 0;
    if (qconv_depthwise2d(&g)) return 0; /* reads the weights as they are */
    int64_t mg = g.out_ch / g.group, kdim = g.in_ch / g.group * g.kernel_size;
    return qprep_size(nn_qgemm_packed_a_size(mg, kdim), g.group);
}

static nn_status qconv_prepare(const nn_call *c, const qio *io, void *prepared) {
    nn_conv_geom g;
    if (qconv_resolve(c, io, &g) != NN_OK) return NN_ERR_INTERNAL;
    int64_t mg = g.out_ch / g.group, kdim = g.in_ch / g.group * g.kernel_size;
    size_t one = nn_qgemm_packed_a_size(mg, kdim);
    bool sgn = c->in[io->w].dtype == NN_DTYPE_INT8;
    *(qprep *)prepared = (qprep){QPREP_MAGIC, mg, kdim, g.group, sgn};
    for (int64_t gi = 0; gi < g.group; gi++) {
        nn_qgemm qg = {.m = mg, .k = kdim, .a = (const uint8_t *)c->in[io->w].data + gi * mg * kdim, .lda = kdim,
                       .a_signed = sgn};
        nn_qgemm_pack_a(&qg, (void *)qprep_block(prepared, one, gi));
    }
    return NN_OK;
}

static bool qconv_prepared_fits(const nn_call *c, const qio *io, const void *prepared, size_t size) {
    nn_conv_geom g;
    if (qconv_resolve(c, io, &g) != NN_OK || size < QPREP_DATA || qconv_depthwise2d(&g)) return false;
    int64_t mg = g.out_ch / g.group, kdim = g.in_ch / g.group * g.kernel_size;
    return qprep_fits(prepared, size, qprep_size(nn_qgemm_packed_a_size(mg, kdim), g.group), mg, kdim, g.group,
                      c->in[io->w].dtype == NN_DTYPE_INT8);
}

static size_t prepared_size_convinteger(const nn_call *c) { return qconv_prepared_size(c, &conv_int_io); }
static nn_status prepare_convinteger(const nn_call *c, void *p) { return qconv_prepare(c, &conv_int_io, p); }
static bool prepared_fits_convinteger(const nn_call *c, const void *p, size_t size) {
    return qconv_prepared_fits(c, &conv_int_io, p, size);
}
static size_t prepared_size_qlinearconv(const nn_call *c) { return qconv_prepared_size(c, &qconv_io); }
static nn_status prepare_qlinearconv(const nn_call *c, void *p) { return qconv_prepare(c, &qconv_io, p); }
static bool prepared_fits_qlinearconv(const nn_call *c, const void *p, size_t size) {
    return qconv_prepared_fits(c, &qconv_io, p, size);
}

static nn_status infer_convinteger(nn_call *c) { return qconv_infer(c, &conv_int_io); }
static size_t workspace_convinteger(const nn_call *c) { return qconv_workspace_of(c, &conv_int_io); }
static nn_status run_convinteger(nn_call *c) { return qconv_run(c, &conv_int_io); }
static nn_status infer_qlinearconv(nn_call *c) { return qconv_infer(c, &qconv_io); }
static size_t workspace_qlinearconv(const nn_call *c) { return qconv_workspace_of(c, &qconv_io); }
static nn_status run_qlinearconv(nn_call *c) { return qconv_run(c, &qconv_io); }

const nn_op_desc nn_op_ConvInteger = {.name = "ConvInteger",
                                      .min_inputs = 2,
                                      .max_inputs = 4,
                                      .min_outputs = 1,
                                      .max_outputs = 1,
                                      .parse = parse_qconv,
                                      .check = check_qconv,
                                      .infer = infer_convinteger,
                                      .workspace = workspace_convinteger,
                                      .run = run_convinteger,
                                      .prepared_size = prepared_size_convinteger,
                                      .prepare = prepare_convinteger,
                                      .prepared_fits = prepared_fits_convinteger,
                                      .prepared_inputs = 1u << 1};

const nn_op_desc nn_op_QLinearConv = {.name = "QLinearConv",
                                      .min_inputs = 8,
                                      .max_inputs = 9,
                                      .min_outputs = 1,
                                      .max_outputs = 1,
                                      .parse = parse_qconv,
                                      .check = check_qconv,
                                      .infer = infer_qlinearconv,
                                      .workspace = workspace_qlinearconv,
                                      .run = run_qlinearconv,
                                      .prepared_size = prepared_size_qlinearconv,
                                      .prepare = prepare_qlinearconv,
                                      .prepared_fits = prepared_fits_qlinearconv,
                                      .prepared_inputs = 1u << 3};

/* ---- MatMulInteger and QLinearMatMul: numpy matmul with broadcast batch dims */

static const qio matmul_int_io = {0, -1, 2, 1, -1, 3, -1, -1, -1};
static const qio qmatmul_io = {0, 1, 2, 3, 4, 5, 6, 7, -1};

typedef struct qmm {
    int64_t m, n, k, batch;
    int nb; /* batch dims */
    int64_t bd[NN_MAX_DIMS], sa[NN_MAX_DIMS], sb[NN_MAX_DIMS]; /* dims, and A's and B's matrix strides (0: broadcast) */
    int ndim;
    int64_t dims[NN_MAX_DIMS];
} qmm;

static nn_status qmm_resolve(nn_call *c, const qio *io, qmm *q) {
    const nn_tensor *a = &c->in[io->x], *b = &c->in[io->w];
    if (a->ndim < 1 || b->ndim < 1) return nn_call_error(c, NN_ERR_SHAPE, "a and b must have rank >= 1");
    int ra = a->ndim > 1 ? a->ndim - 2 : 0, rb = b->ndim > 1 ? b->ndim - 2 : 0;
    q->m = a->ndim > 1 ? a->dims[a->ndim - 2] : 1;
    q->k = a->dims[a->ndim - 1];
    int64_t kb = b->ndim > 1 ? b->dims[b->ndim - 2] : b->dims[0];
    q->n = b->ndim > 1 ? b->dims[b->ndim - 1] : 1;
    if (kb != q->k)
        return nn_call_error(c, NN_ERR_SHAPE, "a has %lld columns, b %lld rows", (long long)q->k, (long long)kb);
    q->nb = ra > rb ? ra : rb;
    q->batch = 1;
    int64_t stra = q->m * q->k, strb = q->k * q->n;
    for (int d = q->nb - 1; d >= 0; d--) {
        int ia = d - (q->nb - ra), ib = d - (q->nb - rb);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return nn_call_error(c, NN_ERR_SHAPE, "batch dims %lld and %lld do not broadcast", (long long)da,
                                 (long long)db);
        q->bd[d] = da > db ? da : db;
        if (da == 0 || db == 0) q->bd[d] = 0;
        q->sa[d] = da == 1 ? 0 : stra;
        q->sb[d] = db == 1 ? 0 : strb;
        stra *= da;
        strb *= db;
        q->batch *= q->bd[d];
    }
    q->ndim = 0;
    for (int d = 0; d < q->nb; d++)
        q->dims[q->ndim++] = q->bd[d];
    if (a->ndim > 1) q->dims[q->ndim++] = q->m;
    if (b->ndim > 1) q->dims[q->ndim++] = q->n;
    return NN_OK;
}

static nn_status qmm_infer(nn_call *c, const qio *io) {
    qmm q;
    bool w_per;
    nn_status st = qmm_resolve(c, io, &q);
    if (st == NN_OK) st = check_quant_inputs(c, io, q.n, &w_per);
    if (st != NN_OK) return st;
    nn_dtype out = io->y_zero >= 0 ? c->in[io->y_zero].dtype : NN_DTYPE_INT32;
    nn_tensor_set_shape(&c->out[0], out, q.ndim, q.dims);
    return NN_OK;
}

static size_t qmm_workspace_of(const nn_call *c, const qio *io) {
    qmm q;
    if (qmm_resolve((nn_call *)c, io, &q) != NN_OK) return 0;
    size_t gemm = nn_qgemm_workspace(q.m, q.n, q.k);
    if (gemm == SIZE_MAX) return SIZE_MAX;
    /* + per-column multipliers (QLinearMatMul) and zero points as int32;
     * n < 2^31 (nn_qgemm_workspace refuses more) */
    int64_t acc = io->y_zero >= 0 ? nn_round_up(q.n, 16) * 4 : 0, total; /* the multipliers */
    if (__builtin_add_overflow(acc, q.n * 4 + 64, &total) || (uint64_t)total > SIZE_MAX / 2 - gemm) return SIZE_MAX;
    return nn_round_up((int64_t)gemm, 64) + (size_t)total;
}

static nn_status qmm_run(nn_call *c, const qio *io) {
    qmm q;
    bool w_per;
    nn_status st = qmm_resolve(c, io, &q);
    if (st == NN_OK) st = check_quant_inputs(c, io, q.n, &w_per);
    if (st != NN_OK) return st;
    if (qmm_workspace_of(c, io) > c->workspace_size) return nn_call_error(c, NN_ERR_INTERNAL, "workspace too small");
    bool q8 = io->y_zero >= 0;
    float *mults = c->workspace;
    void *gemm_ws = (uint8_t *)c->workspace + (q8 ? nn_round_up(q.n, 16) * 4 : 0);
    int32_t xz = nn_quant_zero(c, io->x_zero, 0), wz1 = nn_quant_zero(c, io->w_zero, 0);
    int32_t *wz = &wz1;
    bool wz_per = nn_present(c, io->w_zero) && nn_tensor_elements(&c->in[io->w_zero]) > 1;
    if (wz_per) { /* the per-column zero points as int32, after the GEMM's packing space */
        wz = (int32_t *)((uint8_t *)gemm_ws + nn_round_up((int64_t)nn_qgemm_workspace(q.m, q.n, q.k), 64));
        for (int64_t j = 0; j < q.n; j++)
            wz[j] = nn_quant_zero(c, io->w_zero, j);
    }
    bool b_signed = c->in[io->w].dtype == NN_DTYPE_INT8;
    size_t one = nn_qgemm_packed_b_size(q.k, q.n);
    if (c->prepared && !qprep_fits(c->prepared, qprep_size(one, 1), qprep_size(one, 1), q.n, q.k, 1, b_signed))
        return nn_call_error(c, NN_ERR_INTERNAL, "prepared weights do not fit");
    requant r = requant_of(c, io);
    nn_qgemm_out8 o8 = {0};
    if (q8) {
        for (int64_t j = 0; j < q.n; j++)
            mults[j] = multiplier(c, io, &r, j);
        o8 = (nn_qgemm_out8){.ldy = q.n, .mult = mults, .per_col = true, .zp = r.zp, .lo = r.lo, .hi = r.hi};
    }
    const uint8_t *a = c->in[io->x].data, *b = c->in[io->w].data;
    if (!c->prepared && !b) return nn_call_error(c, NN_ERR_INTERNAL, "b neither present nor prepared");
    for (int64_t bi = 0; bi < q.batch; bi++) {
        int64_t oa = 0, ob = 0, rem = bi;
        for (int d = q.nb - 1; d >= 0; d--) {
            int64_t i = rem % q.bd[d];
            rem /= q.bd[d];
            oa += i * q.sa[d];
            ob += i * q.sb[d];
        }
        if (q8) o8.y = (uint8_t *)c->out[0].data + bi * q.m * q.n;
        nn_qgemm g = {.m = q.m,
                      .n = q.n,
                      .k = q.k,
                      .a = a + oa,
                      .lda = q.k,
                      .a_signed = c->in[io->x].dtype == NN_DTYPE_INT8,
                      .b = b ? b + ob : NULL,
                      .ldb = q.n,
                      .b_signed = b_signed,
                      .b_packed = c->prepared ? qprep_block(c->prepared, one, 0) : NULL,
                      .za = &xz,
                      .zb = wz,
                      .zb_per_col = wz_per,
                      .out8 = q8 ? &o8 : NULL,
                      .c = q8 ? NULL : (int32_t *)c->out[0].data + bi * q.m * q.n,
                      .ldc = q.n};
        nn_qgemm_run(&g, gemm_ws, c->threads);
    }
    return NN_OK;
}

/* A constant B with no batch dims of its own (the weights of a linear
 * layer) is packed at load; every batch entry shares it. */
static size_t qmm_prepared_size(const nn_call *c, const qio *io) {
    qmm q;
    bool w_per;
    const nn_tensor *b = &c->in[io->w];
    if (!b->data || b->ndim > 2 || qmm_resolve((nn_call *)c, io, &q) != NN_OK ||
        check_quant_inputs((nn_call *)c, io, q.n, &w_per) != NN_OK)
        return 0;
    return qprep_size(nn_qgemm_packed_b_size(q.k, q.n), 1);
}

static nn_status qmm_prepare(const nn_call *c, const qio *io, void *prepared) {
    qmm q;
    if (qmm_resolve((nn_call *)c, io, &q) != NN_OK) return NN_ERR_INTERNAL;
    bool sgn = c->in[io->w].dtype == NN_DTYPE_INT8;
    *(qprep *)prepared = (qprep){QPREP_MAGIC, q.n, q.k, 1, sgn};
    nn_qgemm g = {.n = q.n, .k = q.k, .b = c->in[io->w].data, .ldb = q.n, .b_signed = sgn};
    nn_qgemm_pack_b(&g, (void *)qprep_block(prepared, nn_qgemm_packed_b_size(q.k, q.n), 0));
    return NN_OK;
}

static bool qmm_prepared_fits(const nn_call *c, const qio *io, const void *prepared, size_t size) {
    qmm q;
    if (c->in[io->w].ndim > 2 || size < QPREP_DATA || qmm_resolve((nn_call *)c, io, &q) != NN_OK) return false;
    return qprep_fits(prepared, size, qprep_size(nn_qgemm_packed_b_size(q.k, q.n), 1), q.n, q.k, 1,
                      c->in[io->w].dtype == NN_DTYPE_INT8);
}

static size_t prepared_size_matmulinteger(const nn_call *c) { return qmm_prepared_size(c, &matmul_int_io); }
static nn_status prepare_matmulinteger(const nn_call *c, void *p) { return qmm_prepare(c, &matmul_int_io, p); }
static bool prepared_fits_matmulinteger(const nn_call *c, const void *p, size_t size) {
    return qmm_prepared_fits(c, &matmul_int_io, p, size);
}
static size_t prepared_size_qlinearmatmul(const nn_call *c) { return qmm_prepared_size(c, &qmatmul_io); }
static nn_status prepare_qlinearmatmul(const nn_call *c, void *p) { return qmm_prepare(c, &qmatmul_io, p); }
static bool prepared_fits_qlinearmatmul(const nn_call *c, const void *p, size_t size) {
    return qmm_prepared_fits(c, &qmatmul_io, p, size);
}

static nn_status infer_matmulinteger(nn_call *c) { return qmm_infer(c, &matmul_int_io); }
static size_t workspace_matmulinteger(const nn_call *c) { return qmm_workspace_of(c, &matmul_int_io); }
static nn_status run_matmulinteger(nn_call *c) { return qmm_run(c, &matmul_int_io); }
static nn_status infer_qlinearmatmul(nn_call *c) { return qmm_infer(c, &qmatmul_io); }
static size_t workspace_qlinearmatmul(const nn_call *c) { return qmm_workspace_of(c, &qmatmul_io); }
static nn_status run_qlinearmatmul(nn_call *c) { return qmm_run(c, &qmatmul_io); }

const nn_op_desc nn_op_MatMulInteger = {.name = "MatMulInteger",
                                        .min_inputs = 2,
                                        .max_inputs = 4,
                                        .min_outputs = 1,
                                        .max_outputs = 1,
                                        .infer = infer_matmulinteger,
                                        .workspace = workspace_matmulinteger,
                                        .run = run_matmulinteger,
                                        .prepared_size = prepared_size_matmulinteger,
                                        .prepare = prepare_matmulinteger,
                                        .prepared_fits = prepared_fits_matmulinteger,
                                        .prepared_inputs = 1u << 1};

const nn_op_desc nn_op_QLinearMatMul = {.name = "QLinearMatMul",
                                        .min_inputs = 8,
                                        .max_inputs = 8,
                                        .min_outputs = 1,
                                        .max_outputs = 1,
                                        .infer = infer_qlinearmatmul,
                                        .workspace = workspace_qlinearmatmul,
                                        .run = run_qlinearmatmul,
                                        .prepared_size = prepared_size_qlinearmatmul,
                                        .prepare = prepare_qlinearmatmul,
                                        .prepared_fits = prepared_fits_qlinearmatmul,
                                        .prepared_inputs = 1u << 3};
