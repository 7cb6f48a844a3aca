/* Direct convolution for a few input channels (conv_kernels.h). */
#include <math.h>
#include "par.h"
#include <string.h>

#include "act_x86.h"
#include "conv_kernels.h"
#include "isa.h"
#include "window.h"

/* Direct, for convs with few input channels: the RGB stems (3 -> 32
 * 3x3 stride 2 in MobileNetV2 and EfficientNet-B0, 3 -> 64 7x7 stride 2 in
 * ResNet-50, GoogLeNet and DenseNet-201, 3 -> 64 3x3 in VGG-19).  As a GEMM
 * their K (channels x taps: 27 to 147) is short, and gathering the im2col
 * panels costs about as much as the multiply-adds.  Here each image's
 * channels are copied once into zero-padded planes (rows split by column
 * phase for strides above 1: by parity for 2, by column mod 4 for
 * AlexNet's 11x11 stride 4, so a tap's outputs are consecutive floats), and a
 * block of 4 output channels x up to 3 vectors of outputs along a row (24
 * with AVX2) or 4 (64 with AVX-512) accumulates every tap in 12 or 16
 * registers: per tap 3 or 4 loads, 4 broadcasts of the weights as they lie,
 * 12 or 16 multiply-adds (docs/perf-notes.md, "Direct stems").  Six
 * channels a block spilled (2x the time), as eight did. */
#define DIRECT_MAX_IN_CH 4
#define DIRECT_OC        4
#define DIRECT_VECS      3 /* AVX2's vectors a block (16 registers) */
#define DIRECT_VECS_512  4 /* AVX-512's (16 accumulators of 32 registers) */
#define DIRECT_SLACK     64 /* vector reads past a plane's last row: under 3 x 16 floats */
#define DIRECT_MAX_KW    11
#define DIRECT_MAX_S     4 /* AlexNet's stem */

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

bool nn_conv_direct_fits(const conv_geom *g, int64_t *ph, int64_t *pw) {
    int64_t s = g->stride[0];
    if (nn_isa_active() < NN_ISA_AVX2 || g->nsp != 2 || g->group != 1 || g->in_ch > DIRECT_MAX_IN_CH || s < 1 ||
        s > DIRECT_MAX_S || g->stride[1] != s || g->dilation[0] != 1 || g->dilation[1] != 1 ||
        g->kernel[1] > DIRECT_MAX_KW)
        return false;
    /* Above stride 2 only where the taps overlap: a patchifying stem
     * (Swin-T's and ConvNeXt-T's 4x4 stride 4) gathers each input once, and
     * the GEMM ran it as fast alone and faster in those models
     * (docs/perf-notes.md, "Direct stems at strides 3 and 4"). */
    if (s > 2 && (g->kernel[0] <= s || g->kernel[1] <= s)) return false;
    *ph = nn_padded_extent(g->out[0], s, g->kernel[0], 1, g->pad[0], g->in[0]);
    *pw = nn_padded_extent(g->out[1], s, g->kernel[1], 1, g->pad[1], g->in[1]);
    if (s > 2) *pw = (*pw + s - 1) / s * s; /* s phases of pw / s columns each */
    return true;
}

size_t nn_conv_direct_workspace(const conv_geom *g) {
    int64_t ph, pw;
    return nn_conv_direct_fits(g, &ph, &pw) ? sizeof(float) * (size_t)(g->in_ch * (ph * pw + DIRECT_SLACK)) : 0;
}

#if NN_HAVE_X86 /* the kernels are AVX2 and AVX-512 code: nn_conv_direct_fits is false elsewhere */
#include <immintrin.h>

#include "avx2.h"

/* Output channels [oc0, oc0 + R) of output row oh, NV vectors of LANES
 * outputs per block (fewer on the row's last block, which computes only the
 * vectors it stores); KW: the kernel's width when constant (its taps
 * unroll), 0 for any.  One body for both widths: V(op) names the intrinsic
 * of the width, STORE_FIRST(p, v, n) stores a vector's first n floats. */
#define DIRECT_BLOCK_BODY(VEC, V, LANES, STORE_FIRST)                                                                  \
    const conv_geom *g = d->g;                                                                                         \
    int64_t kh_n = g->kernel[0], kw_n = KW ? KW : g->kernel[1], s = g->stride[0];                                      \
    int64_t taps = g->in_ch * kh_n * kw_n, left = g->out[1] - ow0;                                                     \
    VEC acc[DIRECT_OC][DIRECT_VECS_512];                                                                               \
    for (int r = 0; r < R; r++)                                                                                        \
        for (int v = 0; v < NV; v++)                                                                                   \
            acc[r][v] = V(set1_ps)(d->bias ? d->bias[oc0 + r] : 0.0f);                                                 \
    const float *w = d->w + oc0 * taps;                                                                                \
    for (int64_t c = 0; c < g->in_ch; c++)                                                                             \
        for (int64_t kh = 0; kh < kh_n; kh++) {                                                                        \
            const float *row = d->planes + c * d->plane + (oh * s + kh) * d->pw + ow0;                                 \
            for (int64_t kw = 0; kw < kw_n; kw++, w++) {                                                               \
                const float *src = row + d->col[kw];                                                                   \
                VEC x[DIRECT_VECS_512];                                                                                \
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
/* Output row oh, every channel: blocks of DIRECT_OC channels x at most
 * MAXV vectors, the row cut into blocks as equal as MAXV allows (AVX-512's
 * 112-wide rows, 7 vectors, as 4 + 3, not 3 + 3 + 1: a block of one
 * vector has 4 accumulators, too few to hide the multiply-add's latency). */
#define DIRECT_ROW_BODY(BLOCK, LANES, MAXV)                                                                            \
    int64_t oc_n = d->g->out_ch, ow_n = d->g->out[1], row_vecs = (ow_n + LANES - 1) / LANES;                           \
    int64_t cut = (row_vecs + MAXV - 1) / MAXV, step = (row_vecs + cut - 1) / cut;                                     \
    for (int64_t oc0 = 0; oc0 < oc_n; oc0 += DIRECT_OC) {                                                              \
        int R = oc_n - oc0 >= DIRECT_OC ? DIRECT_OC : (int)(oc_n - oc0);                                               \
        for (int64_t ow0 = 0; ow0 < ow_n; ow0 += LANES * step) {                                                       \
            int64_t vecs = (ow_n - ow0 + LANES - 1) / LANES;                                                           \
            int NV = vecs >= step ? (int)step : (int)vecs;                                                             \
            /* constant R and NV: the accumulators stay in registers */                                                \
            if (NV == 4 && MAXV >= 4)                                                                                  \
                DIRECT_BLOCK_ROWS(BLOCK, 4);                                                                           \
            else if (NV == 3)                                                                                          \
                DIRECT_BLOCK_ROWS(BLOCK, 3);                                                                           \
            else if (NV == 2)                                                                                          \
                DIRECT_BLOCK_ROWS(BLOCK, 2);                                                                           \
            else                                                                                                       \
                DIRECT_BLOCK_ROWS(BLOCK, 1);                                                                           \
        }                                                                                                              \
    }                                                                                                                  \
    for (int64_t oc = 0; oc < oc_n && d->row_epilogue; oc++) { /* the row is still in L1 */                            \
        float *y = d->y + oc * d->g->out_size + oh * ow_n;                                                             \
        nn_conv_epilogue(d->e, y, d->res ? d->res + (y - d->y) : NULL, ow_n);                                          \
    }

/* Bodies built by macros: clang-format would take them for statements and
 * indent what follows. */
/* clang-format off */
static inline __attribute__((always_inline)) T256 void direct_row256(const int KW, const conv_direct *d, int64_t oh) {
    DIRECT_ROW_BODY(direct_block256, 8, DIRECT_VECS)
}
static inline __attribute__((always_inline)) T512 void direct_row512(const int KW, const conv_direct *d, int64_t oh) {
    DIRECT_ROW_BODY(direct_block512, 16, DIRECT_VECS_512)
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

/* The input planes of one image, padded (and split by column phase), one
 * range of channels per task; then the output rows, one range per task. */
typedef struct direct_pad {
    const conv_geom *g;
    float *planes;
    const float *xn;
    int64_t plane, ph, pw, half, s;
} direct_pad;

/* A plane padded as nn_pad_plane does, each row's column c stored at
 * (c % s) * (pw / s) + c / s: s phases of pw / s columns (pw a multiple
 * of s), and `slack` zeros after the last row. */
static void pad_plane_phases(float *dst, int64_t ph, int64_t pw, int64_t s, int64_t slack, const float *src,
                             int64_t h, int64_t w, int64_t pt, int64_t pl) {
    int64_t span = pw / s;
    memset(dst, 0, sizeof(float) * (size_t)(pt * pw));
    for (int64_t r = 0; r < h; r++) {
        float *row = dst + (pt + r) * pw;
        const float *from = src + r * w;
        for (int64_t q = 0; q < s; q++)
            for (int64_t j = 0; j < span; j++) {
                int64_t c = j * s + q - pl; /* the input column of padded column j * s + q */
                row[q * span + j] = c >= 0 && c < w ? from[c] : 0.0f;
            }
    }
    memset(dst + (pt + h) * pw, 0, sizeof(float) * (size_t)((ph - pt - h) * pw + slack));
}

static void pad_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const direct_pad *p = ctx;
    const conv_geom *g = p->g;
    for (int64_t c = lo; c < hi; c++) {
        if (p->s > 2)
            pad_plane_phases(p->planes + c * p->plane, p->ph, p->pw, p->s, DIRECT_SLACK, p->xn + c * g->in_size,
                             g->in[0], g->in[1], g->pad[0], g->pad[1]);
        else if (p->half)
            nn_pad_plane_split(p->planes + c * p->plane, p->ph, p->pw, DIRECT_SLACK, p->xn + c * g->in_size, g->in[0],
                               g->in[1], g->pad[0], g->pad[1], 0.0f);
        else
            nn_pad_plane(p->planes + c * p->plane, p->ph, p->pw, DIRECT_SLACK, p->xn + c * g->in_size, g->in[0],
                         g->in[1], g->pad[0], g->pad[1], 0.0f);
    }
}

typedef struct direct_rows {
    const conv_direct *d;
    void (*row)(const conv_direct *, int64_t);
} direct_rows;

static void rows_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const direct_rows *r = ctx;
    for (int64_t oh = lo; oh < hi; oh++) r->row(r->d, oh);
}

/* g fits (nn_conv_direct_fits gave ph and pw); `planes` holds nn_conv_direct_workspace. */
void nn_conv_direct_run(const conv_geom *g, int64_t ph, int64_t pw, const float *x, const float *w,
                            const float *bias, float *y, const nn_epilogue *e, const float *res, float *planes,
                            int threads) {
    /* clang-format on */
    int64_t s = g->stride[0], plane = ph * pw + DIRECT_SLACK, half = s == 2 ? (pw + 1) / 2 : 0;
    void (*row)(const conv_direct *, int64_t) = nn_isa_active() == NN_ISA_AVX512 ? direct_row_avx512 : direct_row_avx2;
    double work = (double)g->batch * (double)g->out_ch * (double)g->out_size * (double)(g->in_ch * g->kernel_size);
    int par = work > 1e5 ? threads : 1;
    for (int64_t n = 0; n < g->batch; n++) {
        direct_pad pad = {.g = g, .planes = planes, .xn = x + n * g->in_ch * g->in_size, .plane = plane, .ph = ph,
                          .pw = pw, .half = half, .s = s};
        nn_par_for_range(par, g->in_ch, 1, pad_range, &pad);
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
        for (int64_t kw = 0; kw < g->kernel[1]; kw++) /* split rows: tap kw reads its phase's columns */
            d.col[kw] = s > 2 ? kw % s * (pw / s) + kw / s : half ? (kw & 1) * half + kw / 2 : kw;
        direct_rows r = {.d = &d, .row = row};
        nn_par_for_range(par, g->out[0], 1, rows_range, &r);
    }
}
#endif
