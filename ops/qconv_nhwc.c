/* QLinearConvNhwc: QLinearConv with channels-last input and output
 * (qconv_nhwc.h says why), for 2-D convs of two kinds:
 *
 *   dense      any groups of a multiple of 4 input channels each, x uint8,
 *              w int8 with zero points 0 or uint8 with zero points 128:
 *              the int8 GEMM of qconv_nhwc.h, tiles of QN_MR positions x
 *              QN_NR channels of one group;
 *   depthwise  group = C = M, any 8-bit x and w: per position and channel
 *              sum_t x[t] * (w[t] - zw), in float, which is exact (every
 *              partial sum is an integer below 2^24 for up to 258 taps),
 *              so the same int32 as the integer sum.
 *
 * Both compute what QLinearConv computes on the transposed tensors, byte
 * for byte: the sums (x - zx) (w - zw) exactly in int32 (wrapping), then
 * nn_qgemm_requantize with bias and multiplier per output channel.  The
 * weights, scales and zero points must be constants: prepare packs the
 * weights and folds the zero points into the bias once (without a
 * prepared block, run prepares into its workspace). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_caches.h"
#include "par.h"
#include "qconv_nhwc.h"
#include "qgemm.h"
#include "quant.h"

enum { QN_DENSE = 1, QN_DEPTHWISE = 2 };

/* Inputs, as QLinearConv's */
enum { X, XS, XZ, W, WS, WZ, YS, YZ, B };

#define QN_DW_MAX_TAPS 258 /* 258 * 255 * 255 < 2^24 */
#define QN_DW_LANES    32  /* depthwise weights and biases padded to whole blocks of 32 channels */

typedef struct qn_geom {
    nn_conv_geom g;
    int kind;
    int64_t n, h, w, c, m, oh, ow, taps;
    int64_t groups, cg, mg; /* dense: groups, and each one's input and output channels */
    bool dwb; /* depthwise with w - zw in int8 and uint8 x: prepared for VPDPBUSD too (qn_dwb_args) */
} qn_geom;

/* The prepared block: this header, then (dense) the weight panels, one of
 * taps x Cg/4 4-byte groups per QN_NR output channels of a group, group
 * after group, or (depthwise) the float weights, taps x ch floats; then ch
 * int32 biases and ch float multipliers, ch the output channels with each
 * group's rounded up to whole panels (dense) or all of them to whole
 * blocks of 32 (depthwise).  Checked again when read from the plan cache. */
typedef struct qn_prep {
    int64_t magic, kind, m, c, taps, w_signed, groups, dwb;
} qn_prep;
#define QN_MAGIC 0x6e686763716eLL /* "nqcghn" */
#define QN_DATA  64

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* The output channels the prepared arrays hold. */
static int64_t prep_channels(const qn_geom *q) {
    return q->kind == QN_DENSE ? q->groups * round_up(q->mg, QN_NR) : round_up(q->m, QN_DW_LANES);
}

static size_t prep_weight_bytes(const qn_geom *q) {
    int64_t ch = prep_channels(q);
    return q->kind == QN_DENSE ? (size_t)(ch * q->taps * q->cg) : (size_t)(ch * q->taps) * sizeof(float);
}

/* Where output channel m's bias and multiplier are (dense: each group's padded to whole panels). */
static int64_t prep_index(const qn_geom *q, int64_t m) {
    return q->kind == QN_DENSE ? m / q->mg * round_up(q->mg, QN_NR) + m % q->mg : m;
}

/* Depthwise with dwb: after the biases and multipliers, per block of 64
 * channels and group of 4 taps 256 bytes of weights, then per block 64
 * biases and 64 multipliers, all in qn_dwb_args's order. */
static int64_t dwb_blocks(const qn_geom *q) { return (q->c + 63) / 64; }
static int64_t dwb_tap_groups(const qn_geom *q) { return (q->taps + 3) / 4; }
static size_t dwb_offset(const qn_geom *q) {
    return QN_DATA + (size_t)round_up((int64_t)prep_weight_bytes(q), 64) + (size_t)prep_channels(q) * 8;
}
static size_t dwb_bytes(const qn_geom *q) {
    return q->dwb ? (size_t)(dwb_blocks(q) * (dwb_tap_groups(q) * 256 + 64 * 8)) : 0;
}

static size_t prep_size(const qn_geom *q) { return dwb_offset(q) + dwb_bytes(q); }

/* dwb's weights, biases and multipliers in the prepared block (the rest of
 * qn_dwb_args is the call's) */
static qn_dwb_args dwb_layout(const qn_geom *q, const void *prepared) {
    const int8_t *w = (const int8_t *)prepared + dwb_offset(q);
    const int32_t *bias = (const int32_t *)(w + dwb_blocks(q) * dwb_tap_groups(q) * 256);
    return (qn_dwb_args){
        .w = w, .tap_groups = dwb_tap_groups(q), .bias = bias, .mult = (const float *)(bias + dwb_blocks(q) * 64)};
}

static bool is_int8(nn_dtype t) { return t == NN_DTYPE_UINT8 || t == NN_DTYPE_INT8; }

/* The geometry, and which kind of conv this is; an error for anything else.
 * x's NHWC dims are handed to QLinearConv's checks as NCHW. */
static nn_status qn_resolve(nn_call *c, qn_geom *q) {
    const nn_tensor *x = &c->in[X];
    if (c->n_in < 8 || x->ndim != 4 || !is_int8(x->dtype))
        return nn_call_error(c, NN_ERR_SHAPE, "x must be a 4-D uint8 or int8 tensor [N, H, W, C]");
    nn_tensor in[9];
    memcpy(in, c->in, sizeof(nn_tensor) * (size_t)(c->n_in < 9 ? c->n_in : 9));
    int64_t nhwc[4] = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
    in[X].dims[1] = nhwc[3];
    in[X].dims[2] = nhwc[1];
    in[X].dims[3] = nhwc[2];
    nn_call cc = *c;
    cc.in = in;
    cc.n_in = c->n_in < 9 ? c->n_in : 9;
    nn_status st = nn_qlinearconv_resolve(&cc, &q->g);
    if (st != NN_OK) return st;
    const nn_conv_geom *g = &q->g;
    q->n = g->batch;
    q->h = g->in[0];
    q->w = g->in[1];
    q->c = g->in_ch;
    q->m = g->out_ch;
    q->oh = g->out[0];
    q->ow = g->out[1];
    q->taps = g->kernel_size;
    q->groups = g->group;
    q->cg = q->c / g->group;
    q->mg = q->m / g->group;
    if (g->nsp != 2) return nn_call_error(c, NN_ERR_UNSUPPORTED, "channels-last convs are 2-D");
    const nn_tensor *w = &c->in[W], *wz = &c->in[WZ];
    if (g->group == q->c && q->m == q->c) { /* depthwise (one channel: either kind, the same sums) */
        if (q->taps > QN_DW_MAX_TAPS || q->w * q->c > (1 << 28))
            return nn_call_error(c, NN_ERR_UNSUPPORTED,
                                 "depthwise channels-last convs take at most %d taps and rows of at most 2^28 bytes",
                                 QN_DW_MAX_TAPS);
        q->kind = QN_DEPTHWISE;
        /* w - zw in int8 (zero points 0, or 128 on uint8), x uint8: the VPDPBUSD form too */
        int32_t want = w->dtype == NN_DTYPE_INT8 ? 0 : 128;
        q->dwb = x->dtype == NN_DTYPE_UINT8 && (nn_present(c, WZ) ? wz->data != NULL : want == 0);
        for (int64_t i = 0; q->dwb && nn_present(c, WZ) && i < nn_tensor_elements(wz); i++)
            q->dwb = nn_quant_zero(c, WZ, i) == want;
    } else {
        q->dwb = false;
        if (q->cg % 4 || x->dtype != NN_DTYPE_UINT8 || q->taps > QN_MAX_TAPS)
            return nn_call_error(c, NN_ERR_UNSUPPORTED,
                                 "a dense channels-last conv needs uint8 x, channels per group a multiple of 4 and at "
                                 "most %d taps (x %s, %lld channels per group, %lld taps)",
                                 QN_MAX_TAPS, nn_dtype_name(x->dtype), (long long)q->cg, (long long)q->taps);
        /* the weights' zero points: 0 for int8, 128 for uint8 (flipped to int8 at load) */
        int32_t want = w->dtype == NN_DTYPE_INT8 ? 0 : 128;
        if (nn_present(c, WZ)) {
            if (!wz->data) return nn_call_error(c, NN_ERR_UNSUPPORTED, "w zero point must be a constant");
            for (int64_t i = 0; i < nn_tensor_elements(wz); i++)
                if (nn_quant_zero(c, WZ, i) != want)
                    return nn_call_error(c, NN_ERR_UNSUPPORTED, "w zero point %d at %lld: channels-last convs need %d",
                                         nn_quant_zero(c, WZ, i), (long long)i, want);
        } else if (want)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "uint8 w without a zero point: channels-last convs need 128");
        q->kind = QN_DENSE;
    }
    if (prep_size(q) > (size_t)INT_MAX) return nn_call_error(c, NN_ERR_UNSUPPORTED, "weights too large");
    return NN_OK;
}

static nn_status infer_qnhwc(nn_call *c) {
    qn_geom q;
    nn_status st = qn_resolve(c, &q);
    if (st != NN_OK) return st;
    int64_t dims[4] = {q.n, q.oh, q.ow, q.m};
    nn_tensor_set_shape(&c->out[0], c->in[YZ].dtype, 4, dims);
    return NN_OK;
}

/* ---- prepare: weights packed, zero points folded into the biases */

/* Whether the inputs prepare reads are there (constants at load). */
static bool prep_inputs_known(const nn_call *c) {
    static const int need[] = {XS, XZ, W, WS, WZ, YS, YZ, B};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (nn_present(c, need[i]) && !c->in[need[i]].data) return false;
    return true;
}

static float multiplier(const nn_call *c, int64_t m) {
    const float *ws = c->in[WS].data;
    int64_t nws = nn_tensor_elements(&c->in[WS]);
    return ((const float *)c->in[XS].data)[0] * ws[nws > 1 ? m : 0] / ((const float *)c->in[YS].data)[0];
}

static void qn_prepare_into(const nn_call *c, const qn_geom *q, void *prepared) {
    *(qn_prep *)prepared = (qn_prep){QN_MAGIC,  q->kind,   q->m, q->c, q->taps, c->in[W].dtype == NN_DTYPE_INT8,
                                     q->groups, q->dwb};
    uint8_t *data = (uint8_t *)prepared + QN_DATA;
    int64_t ch = prep_channels(q), T = q->taps, C = q->cg, M = q->m, mp = round_up(q->mg, QN_NR);
    int32_t *bias = (int32_t *)(data + round_up((int64_t)prep_weight_bytes(q), 64));
    float *mult = (float *)(bias + ch);
    const uint8_t *w = c->in[W].data;
    bool w_signed = c->in[W].dtype == NN_DTYPE_INT8;
    bool wz_per = nn_present(c, WZ) && nn_tensor_elements(&c->in[WZ]) > 1;
    uint32_t zx = (uint32_t)nn_quant_zero(c, XZ, 0);
    const int32_t *b = nn_present(c, B) ? c->in[B].data : NULL;
    for (int64_t m = 0; m < M; m++) {
        uint32_t sum = 0;
        if (q->kind == QN_DENSE) {
            /* group m / mg's panel (m % mg) / QN_NR: (tap, 4 channels) after (tap, 4 channels),
             * each QN_NR columns of 4 int8; w is [M, Cg, taps] */
            int64_t local = m / q->mg * mp + m % q->mg;
            int8_t *panel = (int8_t *)data + local / QN_NR * T * C * QN_NR;
            for (int64_t t = 0; t < T; t++)
                for (int64_t k = 0; k < C; k++) {
                    uint8_t raw = w[(m * C + k) * T + t];
                    int8_t v = (int8_t)(w_signed ? raw : raw ^ 0x80);
                    panel[((t * C / 4 + k / 4) * QN_NR + local % QN_NR) * 4 + k % 4] = v;
                    sum += (uint32_t)(int32_t)v;
                }
        } else {
            float *wf = (float *)data;
            int32_t zw = nn_quant_zero(c, WZ, wz_per ? m : 0);
            for (int64_t t = 0; t < T; t++) {
                int32_t v = (w_signed ? (int32_t)(int8_t)w[m * T + t] : (int32_t)w[m * T + t]) - zw;
                wf[t * ch + m] = (float)v;
                sum += (uint32_t)v;
            }
        }
        /* sum (x - zx)(w - zw) = sum x (w - zw) - zx sum (w - zw), modulo 2^32 */
        bias[prep_index(q, m)] = (int32_t)((b ? (uint32_t)b[m] : 0u) - zx * sum);
        mult[prep_index(q, m)] = multiplier(c, m);
    }
    if (!q->dwb) return;
    qn_dwb_args at = dwb_layout(q, prepared); /* the block is ours to write */
    int8_t *wb = (int8_t *)at.w;
    int32_t *bias_b = (int32_t *)at.bias;
    float *mult_b = (float *)at.mult;
    int64_t tgs = at.tap_groups;
    for (int64_t m = 0; m < M; m++) {
        /* channel 64 b + 16 L + 4 k + i: block b, vector k, dword 4 L + i (qn_dwb_args) */
        int64_t blk = m / 64, r = m % 64, lane = r / 16, k = r % 16 / 4, i = r % 4, dword = lane * 4 + i;
        for (int64_t t = 0; t < T; t++) {
            uint8_t raw = w[m * T + t];
            wb[((blk * tgs + t / 4) * 4 + k) * 64 + dword * 4 + t % 4] = (int8_t)(w_signed ? raw : raw ^ 0x80);
        }
        bias_b[blk * 64 + k * 16 + dword] = bias[m];
        mult_b[blk * 64 + k * 16 + dword] = mult[m];
    }
}

static size_t prepared_size_qnhwc(const nn_call *c) {
    qn_geom q;
    if (!prep_inputs_known(c) || qn_resolve((nn_call *)c, &q) != NN_OK) return 0;
    return prep_size(&q);
}

static nn_status prepare_qnhwc(const nn_call *c, void *prepared) {
    qn_geom q;
    if (!prep_inputs_known(c) || qn_resolve((nn_call *)c, &q) != NN_OK) return NN_ERR_INTERNAL;
    qn_prepare_into(c, &q, prepared);
    return NN_OK;
}

static bool prep_fits(const nn_call *c, const qn_geom *q, const void *prepared, size_t size) {
    const qn_prep *h = prepared;
    return size == prep_size(q) && h->magic == QN_MAGIC && h->kind == q->kind && h->m == q->m && h->c == q->c &&
           h->taps == q->taps && h->w_signed == (c->in[W].dtype == NN_DTYPE_INT8) && h->groups == q->groups &&
           h->dwb == q->dwb;
}

static bool prepared_fits_qnhwc(const nn_call *c, const void *prepared, size_t size) {
    qn_geom q;
    return size >= QN_DATA && qn_resolve((nn_call *)c, &q) == NN_OK && prep_fits(c, &q, prepared, size);
}

/* Scratch: a row of x's zero point (what a padded tap reads), and the
 * prepared block when the call comes without one. */
static size_t zero_row_bytes(const qn_geom *q) { return (size_t)round_up(q->c, 64); }

/* Depthwise, after those: a whole input row of zero points, which the taps
 * of a padded row read. */
static size_t dw_zero_image_row(const qn_geom *q) { return (size_t)round_up(q->w * q->c, 64); }

static size_t workspace_qnhwc(const nn_call *c) {
    qn_geom q;
    if (qn_resolve((nn_call *)c, &q) != NN_OK) return 0;
    size_t base = zero_row_bytes(&q) + (c->prepared ? 0 : prep_size(&q));
    if (q.kind != QN_DEPTHWISE) return base;
    return base + dw_zero_image_row(&q);
}

/* ---- the dense conv: tiles of QN_MR positions x QN_NR channels */

/* The portable tile (NN_ISA=scalar, and processors without AVX2). */
static void tile_portable(const uint8_t *const *a, int64_t a_off, int64_t taps, int64_t groups, const int8_t *b,
                          const qn_epi *e) {
    uint32_t acc[QN_MR][QN_NR];
    memset(acc, 0, sizeof acc);
    for (int64_t t = 0; t < taps; t++)
        for (int64_t q = 0; q < groups; q++, b += QN_NR * 4)
            for (int i = 0; i < QN_MR; i++) {
                const uint8_t *r = a[t * QN_MR + i] + a_off + 4 * q;
                for (int j = 0; j < e->cols; j++)
                    for (int k = 0; k < 4; k++)
                        acc[i][j] += (uint32_t)r[k] * (uint32_t)(int32_t)b[j * 4 + k];
            }
    for (int i = 0; i < e->rows; i++)
        for (int j = 0; j < e->cols; j++)
            e->y[i * e->ldy + j] = (uint8_t)nn_qgemm_requantize((int32_t)(acc[i][j] + (uint32_t)e->bias[j]),
                                                                 e->mult[j], e->zp, e->lo, e->hi);
}

static qn_tile_fn tile_for(nn_isa isa) {
#if NN_HAVE_X86
    if (nn_isa_ext_at(isa, NN_ISA_EXT_AVX512_VNNI)) return nn_qn_tile_vnni512;
    if (isa >= NN_ISA_AVX2 && nn_isa_supported(NN_ISA_AVX2)) return nn_qn_tile_avx2;
#else
    (void)isa;
#endif
    return tile_portable;
}

typedef struct dense_job {
    const qn_geom *q;
    const uint8_t *x, *zrow;
    uint8_t *y;
    const int8_t *panels;
    const int32_t *bias;
    const float *mult;
    int64_t tap_off[QN_MAX_TAPS]; /* bytes from a window's first input to each tap's */
    int64_t tap_dy[QN_MAX_TAPS], tap_dx[QN_MAX_TAPS];
    bool pointwise; /* 1x1, stride 1, no pads: position p reads row p */
    int64_t row_tiles, col_tiles, units_per_task;
    bool col_major; /* units numbered panel after panel (large weights), else tile row after tile row */
    int32_t zp, lo, hi;
    qn_tile_fn tile;
} dense_job;

/* Row pointers of tile row rt: per tap, the QN_MR positions' input rows. */
static void tile_rows(const dense_job *j, int64_t rt, const uint8_t **a) {
    const qn_geom *q = j->q;
    const nn_conv_geom *g = &q->g;
    int64_t P = q->n * q->oh * q->ow, T = q->taps, KW = g->kernel[1], p0 = rt * QN_MR;
    if (j->pointwise) { /* position p's input row is row p of x */
        for (int i = 0; i < QN_MR; i++)
            a[i] = p0 + i < P ? j->x + (p0 + i) * q->c : j->zrow;
        return;
    }
    int64_t n = p0 / (q->oh * q->ow), oy = p0 % (q->oh * q->ow) / q->ow, ox = p0 % q->ow;
    int64_t ext_y = (g->kernel[0] - 1) * g->dilation[0], ext_x = (KW - 1) * g->dilation[1];
    for (int i = 0; i < QN_MR; i++) {
        if (p0 + i >= P) { /* past the end: any readable row; the epilogue drops it */
            for (int64_t t = 0; t < T; t++)
                a[t * QN_MR + i] = j->zrow;
            continue;
        }
        int64_t iy = oy * g->stride[0] - g->pad[0], ix = ox * g->stride[1] - g->pad[1];
        const uint8_t *img = j->x + n * q->h * q->w * q->c;
        if (iy >= 0 && ix >= 0 && iy + ext_y < q->h && ix + ext_x < q->w) {
            const uint8_t *base = img + (iy * q->w + ix) * q->c;
            for (int64_t t = 0; t < T; t++)
                a[t * QN_MR + i] = base + j->tap_off[t];
        } else
            for (int64_t t = 0; t < T; t++) {
                int64_t y = iy + j->tap_dy[t], x = ix + j->tap_dx[t];
                a[t * QN_MR + i] = y >= 0 && y < q->h && x >= 0 && x < q->w ? img + (y * q->w + x) * q->c : j->zrow;
            }
        if (++ox == q->ow) { /* the next position */
            ox = 0;
            if (++oy == q->oh) {
                oy = 0;
                n++;
            }
        }
    }
}

static void dense_task(void *ctx, int64_t task, int seat) {
    (void)seat;
    const dense_job *j = ctx;
    const qn_geom *q = j->q;
    const uint8_t *a[QN_MAX_TAPS * QN_MR];
    int64_t units = j->row_tiles * j->col_tiles, P = q->n * q->oh * q->ow, groups = q->cg / 4;
    int64_t per_group = (q->mg + QN_NR - 1) / QN_NR; /* panels */
    int64_t lo = task * j->units_per_task, hi = lo + j->units_per_task < units ? lo + j->units_per_task : units;
    int64_t have = -1; /* the tile row whose pointers a holds */
    for (int64_t u = lo; u < hi; u++) {
        int64_t rt = j->col_major ? u % j->row_tiles : u / j->col_tiles;
        int64_t ct = j->col_major ? u / j->row_tiles : u % j->col_tiles;
        if (rt != have) {
            tile_rows(j, rt, a);
            have = rt;
        }
        /* panel ct: conv group gi, its output channels from c0 */
        int64_t p0 = rt * QN_MR, gi = ct / per_group, c0 = ct % per_group * QN_NR;
        qn_epi e = {.bias = j->bias + ct * QN_NR,
                    .mult = j->mult + ct * QN_NR,
                    .y = j->y + p0 * q->m + gi * q->mg + c0,
                    .ldy = q->m,
                    .rows = (int)(P - p0 < QN_MR ? P - p0 : QN_MR),
                    .cols = (int)(q->mg - c0 < QN_NR ? q->mg - c0 : QN_NR),
                    .zp = j->zp,
                    .lo = j->lo,
                    .hi = j->hi};
        j->tile(a, gi * q->cg, q->taps, groups, j->panels + ct * q->taps * q->cg * QN_NR, &e);
    }
}

static void run_dense(const nn_call *c, const qn_geom *q, const uint8_t *prepared, const uint8_t *zrow) {
    const nn_conv_geom *g = &q->g;
    int64_t ch = prep_channels(q);
    dense_job job, *j = &job;
    *j = (dense_job){.q = q,
                     .x = c->in[X].data,
                     .zrow = zrow,
                     .y = c->out[0].data,
                     .panels = (const int8_t *)prepared + QN_DATA,
                     .tile = tile_for(nn_isa_active())};
    j->bias = (const int32_t *)(prepared + QN_DATA + round_up((int64_t)prep_weight_bytes(q), 64));
    j->mult = (const float *)(j->bias + ch);
    j->zp = nn_quant_zero(c, YZ, 0);
    bool sgn = c->in[YZ].dtype == NN_DTYPE_INT8;
    j->lo = sgn ? -128 : 0;
    j->hi = sgn ? 127 : 255;
    for (int64_t t = 0; t < q->taps; t++) {
        j->tap_dy[t] = t / g->kernel[1] * g->dilation[0];
        j->tap_dx[t] = t % g->kernel[1] * g->dilation[1];
        j->tap_off[t] = (j->tap_dy[t] * q->w + j->tap_dx[t]) * q->c;
    }
    j->pointwise = q->taps == 1 && g->stride[0] == 1 && g->stride[1] == 1 && g->pad[0] == 0 && g->pad[1] == 0 &&
                   q->oh == q->h && q->ow == q->w;
    int64_t P = q->n * q->oh * q->ow;
    j->row_tiles = (P + QN_MR - 1) / QN_MR;
    j->col_tiles = q->groups * ((q->mg + QN_NR - 1) / QN_NR);
    /* Weights past half of L2 (the deep layers: 3x3 x 512 -> 512 is 2.4 MB)
     * would stream from L3 once per tile row: then a task runs one panel
     * over many tile rows instead, and reads the (small) input again. */
    j->col_major = (int64_t)q->m * q->taps * q->cg > nn_cpu_l2_share(512 << 10, 1, 2);
    /* a tile is taps * Cg / 4 * QN_MR * 2 dot products of 64 multiply-adds:
     * tasks of at least about 4096 of them, so that a claim costs little */
    int64_t units = j->row_tiles * j->col_tiles, dots = q->taps * q->cg / 4 * QN_MR * 2;
    int threads = c->threads > 0 ? c->threads : 1;
    int64_t ntasks = nn_par_tasks(units, 1 + 4096 / (dots > 0 ? dots : 1), threads);
    j->units_per_task = (units + ntasks - 1) / ntasks;
    ntasks = (units + j->units_per_task - 1) / j->units_per_task;
    nn_par_for(P * q->m * q->taps * q->cg > NN_PAR_MIN ? threads : 1, ntasks, dense_task, j);
}

/* ---- the depthwise conv, in float lanes (exact: see the top of the file).
 * Each output row's positions whose windows lie inside the input's columns
 * run as one stretch (qn_dw_row: the kernels take 4 positions at a time),
 * a padded row's taps reading a row of x's zero point; the positions at
 * the left and right edges run one by one, each padded tap pointing at
 * the zero point. */

/* The portable form of the x86 kernels (qn_dw_fn), 16 channels at a time. */
static void dw_portable(const qn_dw_row *r, const qn_dw_args *a) {
    for (int64_t p = 0; p < r->n; p++)
        for (int64_t c0 = 0; c0 < r->c; c0 += 16) {
            int nc = r->c - c0 < 16 ? (int)(r->c - c0) : 16;
            float acc[16] = {0};
            for (int64_t t = 0; t < r->taps; t++) {
                const uint8_t *x = r->tap[t] + p * r->step + c0;
                const float *w = a->wf + t * a->ch + c0;
                for (int k = 0; k < nc; k++)
                    acc[k] += (r->sgn ? (float)(int8_t)x[k] : (float)x[k]) * w[k];
            }
            for (int k = 0; k < nc; k++)
                r->y[p * r->ldy + c0 + k] = (uint8_t)nn_qgemm_requantize(
                    (int32_t)((uint32_t)(int32_t)acc[k] + (uint32_t)a->bias[c0 + k]), a->mult[c0 + k], a->zp, a->lo,
                    a->hi);
        }
}

#if NN_HAVE_X86
/* AVX2 for whole vectors of 8 channels, the portable loop for the rest. */
static void dw_avx2_any(const qn_dw_row *r, const qn_dw_args *a) {
    int64_t c8 = r->c / 8 * 8;
    if (c8) nn_qn_dw_avx2(r, a);
    if (c8 == r->c) return;
    const uint8_t *rest[QN_DW_MAX_TAPS];
    for (int64_t t = 0; t < r->taps; t++)
        rest[t] = r->tap[t] + c8;
    qn_dw_row rr = *r;
    rr.tap = rest;
    rr.c = r->c - c8;
    rr.y = r->y + c8;
    qn_dw_args ra = *a;
    ra.wf += c8;
    ra.bias += c8;
    ra.mult += c8;
    dw_portable(&rr, &ra);
}
#endif

static qn_dw_fn dw_for(nn_isa isa) {
#if NN_HAVE_X86
    if (isa >= NN_ISA_AVX512 && nn_isa_supported(NN_ISA_AVX512)) return nn_qn_dw_avx512;
    if (isa >= NN_ISA_AVX2 && nn_isa_supported(NN_ISA_AVX2)) return dw_avx2_any;
#else
    (void)isa;
#endif
    return dw_portable;
}

typedef struct dw_job {
    const qn_geom *q;
    const uint8_t *x, *zimg; /* zimg: a row of W * C zero points */
    uint8_t *y;
    qn_dw_args args;
    qn_dw_fn kernel;
    qn_dwb_args bargs; /* with the VPDPBUSD kernel (dwb) instead */
    bool dwb, sgn;
    int64_t ox_lo, ox_hi; /* the output columns whose windows lie inside x's columns */
    int64_t tap_dy[QN_DW_MAX_TAPS], tap_dx[QN_DW_MAX_TAPS];
} dw_job;

static void dw_kernel(const dw_job *j, const qn_dw_row *r) {
#if NN_HAVE_X86
    if (j->dwb) {
        nn_qn_dw_vnni512(r, &j->bargs);
        return;
    }
#endif
    j->kernel(r, &j->args);
}

/* Output rows [lo, hi) (n * OH + oy). */
static void dw_rows(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const dw_job *j = ctx;
    const qn_geom *q = j->q;
    const nn_conv_geom *g = &q->g;
    int64_t T = q->taps, C = q->c, sw = g->stride[1], pw = g->pad[1];
    const uint8_t *tap[QN_DW_MAX_TAPS + 3];
    qn_dw_row r = {.tap = tap, .taps = T, .c = C, .sgn = j->sgn, .ldy = C};
    int64_t padded = j->dwb ? (T + 3) / 4 * 4 : T; /* the VPDPBUSD kernel's 4-tap groups: the rest weigh 0 */
    for (int64_t row = lo; row < hi; row++) {
        int64_t n = row / q->oh, oy = row % q->oh, iy0 = oy * g->stride[0] - g->pad[0];
        const uint8_t *img = j->x + n * q->h * q->w * C;
        uint8_t *yrow = j->y + row * q->ow * C;
        if (j->ox_hi > j->ox_lo) { /* the inside stretch, read in place (a padded row: the zero row) */
            int64_t ix = j->ox_lo * sw - pw;
            for (int64_t t = 0; t < T; t++) {
                int64_t iy = iy0 + j->tap_dy[t];
                tap[t] = (iy >= 0 && iy < q->h ? img + iy * q->w * C : j->zimg) + (ix + j->tap_dx[t]) * C;
            }
            for (int64_t t = T; t < padded; t++)
                tap[t] = tap[0];
            r.step = sw * C;
            r.n = j->ox_hi - j->ox_lo;
            r.y = yrow + j->ox_lo * C;
            dw_kernel(j, &r);
        }
        for (int64_t ox = 0; ox < q->ow; ox++) { /* the edges, a position at a time */
            if (ox == j->ox_lo && j->ox_hi > j->ox_lo) ox = j->ox_hi;
            if (ox >= q->ow) break;
            int64_t ix0 = ox * sw - pw;
            for (int64_t t = 0; t < T; t++) {
                int64_t iy = iy0 + j->tap_dy[t], ix = ix0 + j->tap_dx[t];
                tap[t] = iy >= 0 && iy < q->h && ix >= 0 && ix < q->w ? img + (iy * q->w + ix) * C : j->zimg;
            }
            for (int64_t t = T; t < padded; t++)
                tap[t] = tap[0];
            r.step = 0;
            r.n = 1;
            r.y = yrow + ox * C;
            dw_kernel(j, &r);
        }
    }
}

static void run_depthwise(const nn_call *c, const qn_geom *q, const uint8_t *prepared, uint8_t *scratch) {
    const nn_conv_geom *g = &q->g;
    int64_t ch = prep_channels(q);
    dw_job j = {.q = q,
                .x = c->in[X].data,
                .zimg = scratch,
                .y = c->out[0].data,
                .kernel = dw_for(nn_isa_active()),
                .sgn = c->in[X].dtype == NN_DTYPE_INT8};
    memset(scratch, (uint8_t)nn_quant_zero(c, XZ, 0), (size_t)(q->w * q->c));
    j.args.wf = (const float *)(prepared + QN_DATA);
    j.args.ch = ch;
    j.args.bias = (const int32_t *)(prepared + QN_DATA + round_up((int64_t)prep_weight_bytes(q), 64));
    j.args.mult = (const float *)(j.args.bias + ch);
    j.args.zp = nn_quant_zero(c, YZ, 0);
    bool sgn = c->in[YZ].dtype == NN_DTYPE_INT8;
    j.args.lo = sgn ? -128 : 0;
    j.args.hi = sgn ? 127 : 255;
    for (int64_t t = 0; t < q->taps; t++) {
        j.tap_dy[t] = t / g->kernel[1] * g->dilation[0];
        j.tap_dx[t] = t % g->kernel[1] * g->dilation[1];
    }
#if NN_HAVE_X86
    /* VPDPBUSD where it runs and the weights were laid out for it */
    j.dwb = q->dwb && nn_isa_ext_at(nn_isa_active(), NN_ISA_EXT_AVX512_VNNI);
    if (j.dwb) {
        j.bargs = dwb_layout(q, prepared);
        j.bargs.zp = j.args.zp;
        j.bargs.lo = j.args.lo;
        j.bargs.hi = j.args.hi;
    }
#endif
    /* inside: ox * sw - pw >= 0 and ox * sw - pw + (KW - 1) * dw < W */
    nn_valid_range(-g->pad[1], g->stride[1], q->w - (g->kernel[1] - 1) * g->dilation[1], q->ow, &j.ox_lo, &j.ox_hi);
    int64_t rows = q->n * q->oh, work = rows * q->ow * q->c * q->taps;
    int threads = c->threads > 0 ? c->threads : 1;
    nn_par_for_range(work > NN_PAR_MIN ? threads : 1, rows, 1, dw_rows, &j);
}

static nn_status run_qnhwc(nn_call *c) {
    qn_geom q;
    nn_status st = qn_resolve(c, &q);
    if (st != NN_OK) return st;
    if (workspace_qnhwc(c) > c->workspace_size) return nn_call_error(c, NN_ERR_INTERNAL, "workspace too small");
    uint8_t *zrow = c->workspace;
    memset(zrow, (uint8_t)nn_quant_zero(c, XZ, 0), zero_row_bytes(&q));
    const uint8_t *prepared = c->prepared;
    if (prepared && !prep_fits(c, &q, prepared, prep_size(&q)))
        return nn_call_error(c, NN_ERR_INTERNAL, "prepared weights do not fit");
    if (!prepared) {
        if (!prep_inputs_known(c))
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "weights, scales and zero points must be constants");
        uint8_t *p = zrow + zero_row_bytes(&q); /* 64-byte aligned: the workspace is */
        memset(p, 0, prep_size(&q));
        qn_prepare_into(c, &q, p);
        prepared = p;
    }
    if (q.kind == QN_DENSE)
        run_dense(c, &q, prepared, zrow);
    else /* its scratch after the zero row and any prepared block, 64-byte aligned as both are */
        run_depthwise(c, &q, prepared, zrow + zero_row_bytes(&q) + (c->prepared ? 0 : prep_size(&q)));
    return NN_OK;
}

static void describe_qnhwc(const nn_call *c, char *buf, size_t size) {
    qn_geom q;
    char err[256];
    nn_call cc = *c;
    cc.err = err;
    cc.err_size = sizeof err;
    if (qn_resolve(&cc, &q) != NN_OK) {
        buf[0] = 0;
        return;
    }
    snprintf(buf, size, "%lldx%lld stride %lld, %s, channels-last", (long long)q.g.kernel[0], (long long)q.g.kernel[1],
             (long long)q.g.stride[0], q.kind == QN_DENSE ? "dense" : "depthwise");
}

const nn_op_desc nn_op_QLinearConvNhwc = {.name = "QLinearConvNhwc",
                                          .flags = NN_OPF_INTERNAL,
                                          .min_inputs = 8,
                                          .max_inputs = 9,
                                          .min_outputs = 1,
                                          .max_outputs = 1,
                                          .parse = nn_qlinearconv_parse,
                                          .check = nn_qlinearconv_check,
                                          .infer = infer_qnhwc,
                                          .workspace = workspace_qnhwc,
                                          .run = run_qnhwc,
                                          .prepared_size = prepared_size_qnhwc,
                                          .prepare = prepare_qnhwc,
                                          .prepared_fits = prepared_fits_qnhwc,
                                          .prepared_inputs = 1u << W,
                                          .describe = describe_qnhwc};
