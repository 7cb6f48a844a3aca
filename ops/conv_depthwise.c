/* Depthwise 2-D convolutions (conv_kernels.h): one input channel per group,
 * the MobileNet case, where per-group GEMMs would be tiny.  Several kernels
 * by plane size and ISA: channel-blocked for small planes, per plane
 * (rotated rows, a flat plane, stride-2 direct) for the others. */
#include <limits.h>
#include "par.h"
#include <string.h>

#include "act_x86.h"
#include "cpu_caches.h"
#include "conv_kernels.h"
#include "isa.h"
#include "window.h"

#if NN_HAVE_X86
#include <immintrin.h>

#include "avx2.h"
#include "gemm_x86_store.h"
#endif

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
    else if (unit && kh == 7 && kw == 7 && sh == 1 && sw == 1) /* ConvNeXt's */
        dw_window(false, p->xp, p->pw_n, 0, p->w, p->y, oh_n, ow_n, 7, 7, 1, 1, 1, 1, p->bias);
    else if (kh == kw && (kh == 3 || kh == 5) && sh == 1 && sw == 1) /* dilated (DeepLab's) */
        dw_window(false, p->xp, p->pw_n, 0, p->w, p->y, oh_n, ow_n, kh == 3 ? 3 : 5, kh == 3 ? 3 : 5, 1, 1, dh,
                  g->dilation[1], p->bias);
    else
        dw_window(false, p->xp, p->pw_n, 0, p->w, p->y, oh_n, ow_n, kh, kw, sh, sw, dh, g->dilation[1], p->bias);
}

/* compiled once per instruction set; the GEMM kernel in use picks one */
#define DW_PLANE_FOR(SUFFIX, ATTR)                                                                                     \
    ATTR static void dw_plane_##SUFFIX(const conv_geom *g, const dw_plane *p) { dw_plane_body(g, p); }
#if NN_HAVE_X86
DW_PLANE_FOR(avx2, __attribute__((target("avx2,fma"))))
#endif
DW_PLANE_FOR(scalar, )

#if NN_HAVE_X86 /* the vector kernels and their predicates; other targets run dw_plane_scalar */
/* AVX-512, square K x K kernels (K <= 7), stride 1, any dilation D: 16
 * outputs per vector, the weights held in registers (spilled past 32).
 * Loads may run up to 16 floats past a row (into the next row or the
 * buffer's slack); those lanes are never stored.  (Stride 2 has dw_s2_512,
 * which needs no padded copy.) */
static inline __attribute__((always_inline)) T512 void dw_vec512(const int K, const int64_t D, const conv_geom *g,
                                                                 const dw_plane *p) {
    __m512 wv[49];
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
                    acc = _mm512_fmadd_ps(wv[kh * K + kw], _mm512_loadu_ps(xr + kh * D * p->pw_n + ow + kw * D), acc);
            int64_t left = ow_n - ow;
            _mm512_mask_storeu_ps(yr + ow, left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1), acc);
        }
    }
}

T512 static void dw_plane_avx512(const conv_geom *g, const dw_plane *p) {
    int64_t k = g->kernel[0], d = g->dilation[0];
    bool unit = d == g->dilation[1] && g->stride[0] == 1 && g->stride[1] == 1 && k == g->kernel[1];
    /* dilation 1 as a constant: the taps' offsets fold into the loads */
    if (unit && k == 3 && d == 1)
        dw_vec512(3, 1, g, p);
    else if (unit && k == 5 && d == 1)
        dw_vec512(5, 1, g, p);
    else if (unit && k == 7 && d == 1)
        dw_vec512(7, 1, g, p);
    else if (unit && k == 3)
        dw_vec512(3, d, g, p);
    else if (unit && k == 5)
        dw_vec512(5, d, g, p);
    else if (unit && k == 7)
        dw_vec512(7, d, g, p);
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
 * with rows of at least 8 outputs (7-output rows fill under half a vector;
 * docs/perf-notes.md, "Depthwise stride 2"). */
static bool dw_s2_direct(const conv_geom *g) {
    int64_t k = g->kernel[0];
    return nn_isa_active() == NN_ISA_AVX512 && (k == 3 || (k == 5 && g->out[1] >= 8)) && g->kernel[1] == k &&
           g->stride[0] == 2 && g->stride[1] == 2 && g->dilation[0] == 1 && g->dilation[1] == 1;
}

/* The epilogue (nn_conv_epilogue's: the residual, then the activation) on
 * a vector of outputs before its store; res NULL: none, NN_ACT_NONE: none. */
static inline __attribute__((always_inline)) T512 __m512 dw_epilogue512(__m512 v, __mmask16 lanes, nn_act act,
                                                                        float alpha, float beta, const float *res) {
    if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(lanes, res));
    return nn_act512(v, act, alpha, beta);
}

/* AVX-512, stride-1 K x K kernels (K <= 7, any dilation) that keep a small
 * plane's size and that dw_rows and the channel-blocked kernel leave (7x7
 * kernels on 7x7 planes, dilated ones on planes past the blocked limits): 16
 * positions of the flat plane per vector, each tap a load masked to the
 * lanes whose neighbour is inside (window.h), so no padded copy and no
 * half-empty vectors at the ends of short rows. */
static inline __attribute__((always_inline)) T512 void dw_flat512(const int K, const int NP, const nn_flat_taps *t,
                                                                  const float *const *x, const float *const *w,
                                                                  const float *bias, float *const *y,
                                                                  const nn_epilogue *e, const float *const *res) {
    nn_act act = e ? e->act : NN_ACT_NONE;
    float alpha = e ? e->alpha : 0.0f, beta = e ? e->beta : 0.0f;
    __m512 wv[2][49];
    int64_t off[49];
    for (int q = 0; q < NP; q++)
        for (int i = 0; i < K * K; i++)
            wv[q][i] = _mm512_set1_ps(w[q][i]);
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++)
            off[kh * K + kw] = (kh * t->dh - t->pt) * t->w + (kw * t->dw - t->pl);
    for (int64_t v = 0; v < t->vecs; v++) {
        __m512 acc[2];
        for (int q = 0; q < NP; q++)
            acc[q] = _mm512_set1_ps(bias[q]);
        for (int kh = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++) {
                int64_t at = v * 16 + off[kh * K + kw];
                __mmask16 m = t->row_tap[v][kw] & t->col_tap[v][kh];
                for (int q = 0; q < NP; q++)
                    acc[q] = _mm512_fmadd_ps(wv[q][kh * K + kw], _mm512_maskz_loadu_ps(m, x[q] + at), acc[q]);
            }
        __mmask16 lanes = nn_flat_lanes(t->n, v);
        for (int q = 0; q < NP; q++)
            _mm512_mask_storeu_ps(y[q] + v * 16, lanes,
                                  dw_epilogue512(acc[q], lanes, act, alpha, beta, res[q] ? res[q] + v * 16 : NULL));
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
 * multiply-adds overlap.  On 7x7 (9x9 padded) it ties with
 * depthwise_blocked, which keeps those (docs/perf-notes.md, "Depthwise
 * 3x3 by lane rotation"). */
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

/* The epilogue (residual, then activation) is applied to each vector before
 * its store; act is a constant where dw_rotate_avx512 passes one, so that
 * nn_act512's switch is resolved once per plane, not once per vector. */
static inline __attribute__((always_inline)) T512 void dw_rotate_body(const nn_act act, int64_t n, int64_t w_n,
                                                                      const uint16_t (*edges)[2], const float *xp,
                                                                      const float *w, float bias, float *y,
                                                                      float alpha, float beta, const float *res) {
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
        __mmask16 lanes = nn_flat_lanes(n, v);
        __m512 out = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), acc[2]);
        _mm512_mask_storeu_ps(y + v * 16, lanes,
                              dw_epilogue512(out, lanes, act, alpha, beta, res ? res + v * 16 : NULL));
    }
}

/* The fused kernels' act dispatch: BODY(A) with A a constant for the
 * activations MobileNets and ResNets fuse, so that the body's per-vector
 * switch on it folds away; any other passes through as a variable. */
#define DW_BY_ACT(act, BODY)                                                                                           \
    do {                                                                                                               \
        if ((act) == NN_ACT_NONE)                                                                                      \
            BODY(NN_ACT_NONE);                                                                                         \
        else if ((act) == NN_ACT_RELU)                                                                                 \
            BODY(NN_ACT_RELU);                                                                                         \
        else if ((act) == NN_ACT_CLIP)                                                                                 \
            BODY(NN_ACT_CLIP);                                                                                         \
        else                                                                                                           \
            BODY(act);                                                                                                 \
    } while (0)

/* res: the residual, read only with an epilogue e (nn_conv_epilogue's order). */
T512 static void dw_rotate_avx512(int64_t n, int64_t w_n, const uint16_t (*edges)[2], const float *xp, const float *w,
                                  float bias, float *y, const nn_epilogue *e, const float *res) {
    if (e && !nn_act_has_vec(e->act)) { /* after the plane, as nn_conv_epilogue does */
        dw_rotate_body(NN_ACT_NONE, n, w_n, edges, xp, w, bias, y, 0.0f, 0.0f, NULL);
        nn_conv_epilogue(e, y, res, n);
        return;
    }
    nn_act act = e ? e->act : NN_ACT_NONE;
    float alpha = e ? e->alpha : 0.0f, beta = e ? e->beta : 0.0f;
    res = e ? res : NULL;
#define ROTATE(A) dw_rotate_body(A, n, w_n, edges, xp, w, bias, y, alpha, beta, res)
    DW_BY_ACT(act, ROTATE);
#undef ROTATE
}

/* Stride-1 3x3, 5x5 and 7x7 depthwise convs padded by K/2 on every side
 * with rows of 9 to 128 columns (dw_rows: MobileNet's, MnasNet's,
 * EfficientNet's and ConvNeXt's layers on 112x112 to 14x14 planes), a row
 * of the plane at a time.  Each input row is loaded once (masked, so the lanes past
 * the row are zero), shifted left and right by 1 to K/2 lanes (valignd with
 * the row's other vector, or with zeros at its ends: the taps past a row's
 * ends read zeros), and multiplied into the K output rows it reaches, whose
 * accumulators rotate through K slots (slot o mod K for output row o, known
 * at compile time within the K-fold unrolled loop); an output row goes
 * through the epilogue to its store once its last input row is in.  No
 * padded copy and no masked taps, and each shift serves K output rows,
 * where dw_rotate_avx512 shifts per output vector and dw_block16
 * transposes channels in and out (docs/perf-notes.md, "Depthwise by
 * rows"). */
#define DW_ROWS_MAX_V 4

/* One input row's taps, in either width (VOP(op): the width's intrinsic,
 * act_x86.h): the row's vectors c[0, V) shifted by 1 to R lanes each way
 * (LEFT and RIGHT, with the vectors BEFORE and AFTER the row's or chunk's
 * ends shifting in) into sh[R + d], then each row of taps multiplied into
 * the accumulator slot of the output row it reaches (input row i, the u-th
 * of its K-fold unrolled step).  The names it uses are dw_rows_body's and
 * dw_rows8_body's. */
#define DW_ROWS_TAPS(VOP, LEFT, RIGHT, BEFORE, AFTER)                                                                  \
    do {                                                                                                               \
        _Pragma("clang loop unroll(full)") for (int q = 0; q < V; q++) {                                               \
            sh[R][q] = c[q];                                                                                           \
            _Pragma("clang loop unroll(full)") for (int d = 1; d <= R; d++) {                                          \
                sh[R - d][q] = LEFT(c[q], q > 0 ? c[q - 1] : BEFORE, d);                                               \
                sh[R + d][q] = RIGHT(c[q], q + 1 < V ? c[q + 1] : AFTER, d);                                           \
            }                                                                                                          \
        }                                                                                                              \
        _Pragma("clang loop unroll(full)") for (int kh = 0; kh < K; kh++) {                                            \
            int64_t o = i + R - kh; /* the output row this row of taps reaches */                                      \
            if (o < 0 || o >= h) continue;                                                                             \
            const int s = ((u + R - kh) % K + K) % K;                                                                  \
            _Pragma("clang loop unroll(full)") for (int kw = 0; kw < K; kw++)                                          \
                _Pragma("clang loop unroll(full)") for (int q = 0; q < V; q++)                                         \
                    acc[s][q] = VOP(fmadd_ps)(VOP(set1_ps)(w[kh * K + kw]), sh[kw][q], acc[s][q]);                     \
        }                                                                                                              \
    } while (0)

/* cur's lanes moved d up, the lanes shifted in the last d of prev: each
 * lane's neighbour d columns left; and d down from next: d columns right. */
static inline __attribute__((always_inline)) T512 __m512 dw_left(__m512 cur, __m512 prev, const int d) {
    __m512i c = _mm512_castps_si512(cur), p = _mm512_castps_si512(prev);
    return _mm512_castsi512_ps(d == 1   ? _mm512_alignr_epi32(c, p, 15)
                               : d == 2 ? _mm512_alignr_epi32(c, p, 14)
                                        : _mm512_alignr_epi32(c, p, 13));
}
static inline __attribute__((always_inline)) T512 __m512 dw_right(__m512 cur, __m512 next, const int d) {
    __m512i c = _mm512_castps_si512(cur), n = _mm512_castps_si512(next);
    return _mm512_castsi512_ps(d == 1   ? _mm512_alignr_epi32(n, c, 1)
                               : d == 2 ? _mm512_alignr_epi32(n, c, 2)
                                        : _mm512_alignr_epi32(n, c, 3));
}

/* Vectors [q0, q0 + V) of each row; a chunk of a longer row also reads the
 * vectors either side of it (zero past the row's ends), a whole row
 * (chunk false, q0 0) none. */
static inline __attribute__((always_inline)) T512 void dw_rows_body(const int K, const int V, const bool chunk,
                                                                    const nn_act act, int64_t h, int64_t w_n,
                                                                    int64_t q0, const float *x, const float *w,
                                                                    float bias, float *y, float alpha, float beta,
                                                                    const float *res) {
    const int R = K / 2;
    const __m512 zero = _mm512_setzero_ps(), b = _mm512_set1_ps(bias);
    __mmask16 m[DW_ROWS_MAX_V];
    __m512 acc[7][DW_ROWS_MAX_V];
    int64_t left = w_n - 16 * q0; /* columns from the chunk on */
    __mmask16 next_m = chunk && left > 16 * V ? nn_flat_lanes(left, V) : 0;
    bool prev = chunk && q0 > 0;
    x += 16 * q0;
    y += 16 * q0;
    res = res ? res + 16 * q0 : NULL;
#pragma clang loop unroll(full)
    for (int q = 0; q < V; q++) {
        m[q] = left > 16 * q ? nn_flat_lanes(left, q) : 0; /* V rounds up: a vector past the row is empty */
#pragma clang loop unroll(full)
        for (int s = 0; s < K; s++)
            acc[s][q] = b;
    }
    for (int64_t i0 = 0; i0 < h + R; i0 += K) {
#pragma clang loop unroll(full)
        for (int u = 0; u < K; u++) {
            int64_t i = i0 + u; /* the input row */
            if (i >= h + R) break;
            if (i < h) {
                __m512 c[DW_ROWS_MAX_V], sh[7][DW_ROWS_MAX_V]; /* sh[R + d]: the row shifted to column offset d */
#pragma clang loop unroll(full)
                for (int q = 0; q < V; q++)
                    c[q] = _mm512_maskz_loadu_ps(m[q], x + i * w_n + 16 * q);
                __m512 before = prev ? _mm512_loadu_ps(x + i * w_n - 16) : zero;
                __m512 after = next_m ? _mm512_maskz_loadu_ps(next_m, x + i * w_n + 16 * V) : zero;
                DW_ROWS_TAPS(V512, dw_left, dw_right, before, after);
            }
            int64_t o = i - R; /* complete now */
            if (o >= 0) {
                const int s = ((u - R) % K + K) % K;
#pragma clang loop unroll(full)
                for (int q = 0; q < V; q++) {
                    int64_t at = o * w_n + 16 * q;
                    _mm512_mask_storeu_ps(y + at, m[q],
                                          dw_epilogue512(acc[s][q], m[q], act, alpha, beta, res ? res + at : NULL));
                    acc[s][q] = b;
                }
            }
        }
    }
}

/* The row whole, or in chunks of V vectors (the last one shorter). */
static inline __attribute__((always_inline)) T512 void dw_rows_act(const int K, const int V, const bool chunk,
                                                                   const nn_act act, int64_t h, int64_t w_n,
                                                                   const float *x, const float *w, float bias, float *y,
                                                                   float alpha, float beta, const float *res) {
    if (!chunk) {
        dw_rows_body(K, V, false, act, h, w_n, 0, x, w, bias, y, alpha, beta, res);
        return;
    }
    int64_t vt = (w_n + 15) / 16;
    for (int64_t q0 = 0; q0 < vt; q0 += V) {
        int64_t n = vt - q0 < V ? vt - q0 : V;
        if (n == V)
            dw_rows_body(K, V, true, act, h, w_n, q0, x, w, bias, y, alpha, beta, res);
        else if (n == 1)
            dw_rows_body(K, 1, true, act, h, w_n, q0, x, w, bias, y, alpha, beta, res);
        else if (n == 2)
            dw_rows_body(K, V > 2 ? 2 : 1, true, act, h, w_n, q0, x, w, bias, y, alpha, beta, res);
        else
            dw_rows_body(K, V > 3 ? 3 : 1, true, act, h, w_n, q0, x, w, bias, y, alpha, beta, res);
    }
}

static inline __attribute__((always_inline)) T512 void dw_rows_k(const int K, const int V, const bool chunk, int64_t h,
                                                                 int64_t w_n, const float *x, const float *w,
                                                                 float bias, float *y, const nn_epilogue *e,
                                                                 const float *res) {
    if (e && !nn_act_has_vec(e->act)) { /* after the plane, as nn_conv_epilogue does */
        dw_rows_act(K, V, chunk, NN_ACT_NONE, h, w_n, x, w, bias, y, 0.0f, 0.0f, NULL);
        nn_conv_epilogue(e, y, res, h * w_n);
        return;
    }
    nn_act act = e ? e->act : NN_ACT_NONE;
    float alpha = e ? e->alpha : 0.0f, beta = e ? e->beta : 0.0f;
    res = e ? res : NULL;
#define ROWS(A) dw_rows_act(K, V, chunk, A, h, w_n, x, w, bias, y, alpha, beta, res)
    DW_BY_ACT(act, ROWS);
#undef ROWS
}

/* Rows longer than dw_rows_avx512 takes whole, in chunks. */
T512 __attribute__((noinline)) static void dw_rows_chunks(int k, int64_t h, int64_t w_n, const float *x, const float *w,
                                                          float bias, float *y, const nn_epilogue *e,
                                                          const float *res) {
    if (k == 3)
        dw_rows_k(3, 4, true, h, w_n, x, w, bias, y, e, res);
    else if (k == 5)
        dw_rows_k(5, 2, true, h, w_n, x, w, bias, y, e, res);
    else
        dw_rows_k(7, 2, true, h, w_n, x, w, bias, y, e, res);
}

/* One h x w_n plane; res: the residual, read only with an epilogue e.
 * Rows of up to 4 vectors (3x3) or 2 (5x5, 7x7) whole, longer ones in
 * chunks of that many, apart in dw_rows_chunks (with the chunks as the
 * only loop, whole rows took 1.1-1.16x the time: perf-notes.md). */
T512 static void dw_rows_avx512(int k, int64_t h, int64_t w_n, const float *x, const float *w, float bias, float *y,
                                const nn_epilogue *e, const float *res) {
    int64_t v = (w_n + 15) / 16;
    if (k == 3 && v == 1)
        dw_rows_k(3, 1, false, h, w_n, x, w, bias, y, e, res);
    else if (k == 3 && v == 2)
        dw_rows_k(3, 2, false, h, w_n, x, w, bias, y, e, res);
    else if (k == 3 && v == 3)
        dw_rows_k(3, 3, false, h, w_n, x, w, bias, y, e, res);
    else if (k == 3 && v == 4)
        dw_rows_k(3, 4, false, h, w_n, x, w, bias, y, e, res);
    else if (k == 5 && v == 1)
        dw_rows_k(5, 1, false, h, w_n, x, w, bias, y, e, res);
    else if (k == 5 && v == 2)
        dw_rows_k(5, 2, false, h, w_n, x, w, bias, y, e, res);
    else if (k == 7 && v == 1)
        dw_rows_k(7, 1, false, h, w_n, x, w, bias, y, e, res);
    else if (k == 7 && v == 2)
        dw_rows_k(7, 2, false, h, w_n, x, w, bias, y, e, res);
    else
        dw_rows_chunks(k, h, w_n, x, w, bias, y, e, res);
}

/* dw_rows_body in 8-lane AVX2 vectors, for the processors without AVX-512
 * (Zen 3): the same order, with 16 registers instead of 32, so a row goes
 * in chunks of at most DW_ROWS8_V vectors (dw_rows_avx2).  Shifts across
 * the 128-bit halves take a vperm2f128 (shared by every distance) and a
 * vpalignr each.  No masked loads or stores (slow on AMD, whose masked
 * loads may also fault on the lanes they skip): a row's last, partial
 * vector is loaded whole with the lanes past the row cleared (dw_load8),
 * and stored whole where dw_rows_avx2 allows ("spill"). */
static inline __attribute__((always_inline)) T256 __m256 dw_left256(__m256 cur, __m256 prev, const int d) {
    __m256i c = _mm256_castps_si256(cur), t = _mm256_castps_si256(_mm256_permute2f128_ps(prev, cur, 0x21));
    return _mm256_castsi256_ps(d == 1   ? _mm256_alignr_epi8(c, t, 12)
                               : d == 2 ? _mm256_alignr_epi8(c, t, 8)
                                        : _mm256_alignr_epi8(c, t, 4));
}
static inline __attribute__((always_inline)) T256 __m256 dw_right256(__m256 cur, __m256 next, const int d) {
    __m256i c = _mm256_castps_si256(cur), t = _mm256_castps_si256(_mm256_permute2f128_ps(cur, next, 0x21));
    return _mm256_castsi256_ps(d == 1   ? _mm256_alignr_epi8(t, c, 4)
                               : d == 2 ? _mm256_alignr_epi8(t, c, 8)
                                        : _mm256_alignr_epi8(t, c, 12));
}

/* n (1 to 8) floats at p, the last of a row of more than 8, the lanes
 * past them zero; `more`: p + 8 floats are readable (the plane goes on
 * past the row), else the 8 floats that end the row are loaded and moved
 * down. */
static inline __attribute__((always_inline)) T256 __m256 dw_load8(const float *p, int64_t n, __m256 lanes, bool more) {
    if (n >= 8) return _mm256_loadu_ps(p);
    if (more) return _mm256_and_ps(_mm256_loadu_ps(p), lanes);
    __m256i down = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)(8 - n)));
    return _mm256_and_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(p + n - 8), down), lanes);
}
/* The plane's last row's partial vector (a call: its spills stay off the
 * other rows' path). */
T256 __attribute__((noinline)) static void dw_store_first8(float *p, __m256 v, int64_t n) { nn_store_first8(p, v, n); }

#define DW_ROWS8_V 2

static inline __attribute__((always_inline)) T256 void dw_rows8_body(const int K, const int V, const bool chunk,
                                                                     const nn_act act, int64_t h, int64_t w_n,
                                                                     int64_t q0, bool spill, const float *x,
                                                                     const float *w, float bias, float *y, float alpha,
                                                                     float beta, const float *res) {
    const int R = K / 2;
    const __m256 zero = _mm256_setzero_ps(), b = _mm256_set1_ps(bias);
    __m256 acc[7][DW_ROWS8_V];
    int64_t left = w_n - 8 * q0;       /* columns from the chunk on */
    int64_t tail = left - 8 * (V - 1); /* the last vector's columns: 1 to 8 */
    tail = tail > 8 ? 8 : tail;
    int64_t after = chunk ? left - 8 * V : 0; /* the next chunk's columns (<= 0: none) */
    const __m256 tail_lanes = _mm256_castsi256_ps(nn_lanes8(tail)), after_lanes = _mm256_castsi256_ps(nn_lanes8(after));
    bool prev = chunk && q0 > 0;
    x += 8 * q0;
    y += 8 * q0;
    res = res ? res + 8 * q0 : NULL;
#pragma clang loop unroll(full)
    for (int q = 0; q < V; q++)
#pragma clang loop unroll(full)
        for (int s = 0; s < K; s++)
            acc[s][q] = b;
    for (int64_t i0 = 0; i0 < h + R; i0 += K) {
#pragma clang loop unroll(full)
        for (int u = 0; u < K; u++) {
            int64_t i = i0 + u; /* the input row */
            if (i >= h + R) break;
            if (i < h) {
                const float *row = x + i * w_n;
                bool more = i + 1 < h;
                __m256 c[DW_ROWS8_V], sh[7][DW_ROWS8_V]; /* sh[R + d]: the row shifted to column offset d */
#pragma clang loop unroll(full)
                for (int q = 0; q + 1 < V; q++)
                    c[q] = _mm256_loadu_ps(row + 8 * q);
                c[V - 1] = dw_load8(row + 8 * (V - 1), tail, tail_lanes, more);
                __m256 before = prev ? _mm256_loadu_ps(row - 8) : zero;
                __m256 next = after > 0 ? dw_load8(row + 8 * V, after, after_lanes, more) : zero;
                DW_ROWS_TAPS(V256, dw_left256, dw_right256, before, next);
            }
            int64_t o = i - R; /* complete now */
            if (o >= 0) {
                const int s = ((u - R) % K + K) % K;
                bool more = o + 1 < h;
                float *out = y + o * w_n;
                const float *r = res ? res + o * w_n : NULL;
#pragma clang loop unroll(full)
                for (int q = 0; q + 1 < V; q++) {
                    __m256 v = r ? _mm256_add_ps(acc[s][q], _mm256_loadu_ps(r + 8 * q)) : acc[s][q];
                    _mm256_storeu_ps(out + 8 * q, nn_act256(v, act, alpha, beta));
                    acc[s][q] = b;
                }
                __m256 v = acc[s][V - 1];
                if (r) v = _mm256_add_ps(v, dw_load8(r + 8 * (V - 1), tail, tail_lanes, more));
                v = nn_act256(v, act, alpha, beta);
                if (tail == 8 || (spill && o + 1 < h))
                    _mm256_storeu_ps(out + 8 * (V - 1), v);
                else
                    dw_store_first8(out + 8 * (V - 1), v, tail);
                acc[s][V - 1] = b;
            }
        }
    }
}

static inline __attribute__((always_inline)) T256 void dw_rows8_k(const int K, const int V, const bool chunk, int64_t h,
                                                                  int64_t w_n, int64_t q0, bool spill, const float *x,
                                                                  const float *w, float bias, float *y,
                                                                  const nn_epilogue *e, const float *res) {
    nn_act act = e ? e->act : NN_ACT_NONE;
    float alpha = e ? e->alpha : 0.0f, beta = e ? e->beta : 0.0f;
    res = e ? res : NULL;
#define ROWS8(A) dw_rows8_body(K, V, chunk, A, h, w_n, q0, spill, x, w, bias, y, alpha, beta, res)
    DW_BY_ACT(act, ROWS8);
#undef ROWS8
}

/* A function per variant: called from one function, clang merged the
 * calls into one with the sizes as variables, and no loop unrolled. */
#define DW_ROWS8_FOR(NAME, K, V, CHUNK)                                                                                \
    T256 __attribute__((noinline)) static void NAME(int64_t h, int64_t w_n, int64_t q0, bool spill, const float *x,    \
                                                    const float *w, float bias, float *y, const nn_epilogue *e,        \
                                                    const float *res) {                                                \
        dw_rows8_k(K, V, CHUNK, h, w_n, q0, spill, x, w, bias, y, e, res);                                             \
    }
DW_ROWS8_FOR(dw_rows8_3_whole, 3, 2, false)
DW_ROWS8_FOR(dw_rows8_3_chunk, 3, 2, true)
DW_ROWS8_FOR(dw_rows8_3_last, 3, 1, true)
DW_ROWS8_FOR(dw_rows8_5_whole, 5, 2, false)
DW_ROWS8_FOR(dw_rows8_5_chunk, 5, 2, true)
DW_ROWS8_FOR(dw_rows8_5_last, 5, 1, true)
DW_ROWS8_FOR(dw_rows8_7_chunk, 7, 1, true)
#undef DW_ROWS8_FOR

/* dw_rows_avx512's plane in AVX2: a 3x3's or 5x5's rows of 9 to 16
 * columns whole, longer ones in chunks of 2 vectors (the last one 1 where
 * their count is odd); a 7x7's in chunks of 1.  The chunks run right to
 * left, so that a row's last vector may be stored whole ("spill": its
 * lanes past the row land on the next row's first columns, which the
 * first chunk writes later), except on the plane's last row and where the
 * residual lies under the plane. */
static void dw_rows_avx2(int k, int64_t h, int64_t w_n, const float *x, const float *w, float bias, float *y,
                         const nn_epilogue *e, const float *res) {
    if (e && !nn_act_has_vec(e->act)) { /* after the plane, as nn_conv_epilogue does */
        dw_rows_avx2(k, h, w_n, x, w, bias, y, NULL, NULL);
        nn_conv_epilogue(e, y, res, h * w_n);
        return;
    }
    int64_t vt = (w_n + 7) / 8, n = h * w_n;
    bool spill = !e || !res || res + n <= y || y + n <= res;
    if (vt == 2 && k != 7) {
        (k == 3 ? dw_rows8_3_whole : dw_rows8_5_whole)(h, w_n, 0, spill, x, w, bias, y, e, res);
        return;
    }
    int64_t v = k == 7 ? 1 : 2, q0 = vt - vt % v;
    if (q0 < vt) (k == 3 ? dw_rows8_3_last : dw_rows8_5_last)(h, w_n, q0, spill, x, w, bias, y, e, res);
    for (q0 -= v; q0 >= 0; q0 -= v)
        (k == 3   ? dw_rows8_3_chunk
         : k == 5 ? dw_rows8_5_chunk
                  : dw_rows8_7_chunk)(h, w_n, q0, spill, x, w, bias, y, e, res);
}

/* AVX2, stride-2 3x3 and 5x5 on the zero-padded plane p->xp (rows p->pw_n
 * apart, DW_SLACK floats after the last): dw_s2_512's order in 8 lanes.
 * For 8 outputs of a row, each input row's 16 + K - 1 floats are three
 * loads (the lanes past the row read the next row or the slack, and only
 * reach outputs past the row), split into even and odd columns; tap kw is
 * the even or odd vector moved on by kw / 2.  A row's last vector is
 * stored whole over the next row's start, which is written later, except
 * on the plane's last row. */
static inline __attribute__((always_inline)) T256 void dw_s2_256(const int K, const conv_geom *g, const dw_plane *p) {
    int64_t oh_n = g->out[0], ow_n = g->out[1];
    const float *w = p->w;
    for (int64_t oh = 0; oh < oh_n; oh++) {
        float *y = p->y + oh * ow_n;
        for (int64_t ow = 0; ow < ow_n; ow += 8) {
            __m256 acc = _mm256_set1_ps(p->bias);
#pragma clang loop unroll(full)
            for (int kh = 0; kh < K; kh++) {
                const float *src = p->xp + (2 * oh + kh) * p->pw_n + 2 * ow;
                __m256 a = _mm256_loadu_ps(src), b = _mm256_loadu_ps(src + 8), c = _mm256_loadu_ps(src + 16);
                __m256 e0 = nn_evens8(a, b), o1 = nn_odds8(a, b);
                __m256 ce = _mm256_shuffle_ps(c, c, _MM_SHUFFLE(2, 0, 2, 0)); /* low lanes: c0 c2 */
                acc = _mm256_fmadd_ps(_mm256_set1_ps(w[kh * K]), e0, acc);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(w[kh * K + 1]), o1, acc);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(w[kh * K + 2]), dw_right256(e0, ce, 1), acc);
                if (K == 5) {
                    __m256 co = _mm256_shuffle_ps(c, c, _MM_SHUFFLE(3, 1, 3, 1)); /* low lanes: c1 c3 */
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(w[kh * K + 3]), dw_right256(o1, co, 1), acc);
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(w[kh * K + 4]), dw_right256(e0, ce, 2), acc);
                }
            }
            if (ow + 8 <= ow_n || oh + 1 < oh_n)
                _mm256_storeu_ps(y + ow, acc);
            else
                dw_store_first8(y + ow, acc, ow_n - ow);
        }
    }
}

T256 static void dw_s2_avx2(const conv_geom *g, const dw_plane *p) {
    if (g->kernel[0] == 3)
        dw_s2_256(3, g, p);
    else
        dw_s2_256(5, g, p);
}

/* np (1 or 2) planes at once: 3x3 windows take two, whose chains of
 * multiply-adds then interleave and share each tap's mask.  The epilogue e
 * (NULL: none) adds res[q] (NULL: none) and applies the activation. */
T512 static void dw_flat_avx512(const nn_flat_taps *t, int np, const float *const *x, const float *const *w,
                                const float *bias, float *const *y, const nn_epilogue *e, const float *const *res) {
    if (e && !nn_act_has_vec(e->act)) { /* after the planes, as nn_conv_epilogue does */
        static const float *const none[2] = {NULL, NULL};
        dw_flat_avx512(t, np, x, w, bias, y, NULL, none);
        for (int q = 0; q < np; q++)
            nn_conv_epilogue(e, y[q], res[q], t->n);
        return;
    }
    if (t->kh == 3 && np == 2)
        dw_flat512(3, 2, t, x, w, bias, y, e, res);
    else if (t->kh == 3)
        dw_flat512(3, 1, t, x, w, bias, y, e, res);
    else if (t->kh == 5)
        dw_flat512(5, 1, t, x, w, bias, y, e, res);
    else
        dw_flat512(7, 1, t, x, w, bias, y, e, res);
}

/* Whether depthwise_2d runs g on the flat plane: 3x3, 5x5 and 7x7 kernels,
 * dilated or not. */
static bool dw_flat(const conv_geom *g, nn_flat_taps *t) {
    int64_t k = g->kernel[0];
    if (nn_isa_active() != NN_ISA_AVX512 || (k != 3 && k != 5 && k != 7) || g->kernel[1] != k) return false;
    for (int d = 0; d < 2; d++)
        if (g->stride[d] != 1 || g->out[d] != g->in[d]) return false;
    return nn_flat_taps_init(t, g->in[0], g->in[1], k, k, g->pad[0], g->pad[1], g->dilation[0], g->dilation[1]);
}

#endif

/* Channel-blocked (AVX2, 8 channels per block; AVX-512, 16): on small
 * planes (MobileNet's and EfficientNet's 28x28 and below) vectors along a
 * row are short and each output's taps form one dependent chain.  Here a
 * block of channels' planes is transposed into one zero-padded block of
 * pixels, one vector each, where each tap of 8 outputs is 8 independent
 * full-width FMAs with the block's weights (laid out at load), and the
 * outputs are transposed back to planes.
 * Larger planes, whose rows already fill vectors, stay with the per-plane
 * kernels: the limits below per ISA (docs/perf-notes.md, "Channel-blocked
 * depthwise"). */
static int64_t dw_blocked_max_pixels(nn_isa isa, int64_t k, int64_t s) {
    switch (isa) {
    case NN_ISA_AVX2: return k == 3 ? 32 * 32 : 64 * 64;
    case NN_ISA_AVX512: return k == 5 ? 64 * 64 : s == 2 ? 32 * 32 : 9 * 9;
    default: return 0;
    }
}

#define DWB_STEP      8  /* outputs per step */
#define DWB_MAX_LANES 16 /* channels per block: 16 with AVX-512, else 8 */

int nn_conv_depthwise_lanes(void) { return nn_isa_active() >= NN_ISA_AVX512 ? 16 : 8; }

typedef struct dw_blocked {
    int64_t pw;               /* padded row, in pixels */
    int64_t dh, dw;           /* dilation: a tap's step down and across, in pixels */
    int64_t in_n, out_n;      /* positions per input and output plane */
    const int32_t *in_pixel;  /* per input position: its padded pixel */
    const int32_t *out_pixel; /* per output position, rounded up to DWB_STEP: its window's first padded pixel */
} dw_blocked;

#if NN_HAVE_X86
static bool dw_rows(const conv_geom *g);
#endif

static bool dw_blocked_fits(const conv_geom *g, int64_t *ph, int64_t *pw) {
    int64_t k = g->kernel[0], s = g->stride[0];
    if (g->out_ch != g->group || (k != 3 && k != 5) || g->kernel[1] != k || (s != 1 && s != 2) || g->stride[1] != s)
        return false;
#if NN_HAVE_X86
    if (dw_s2_direct(g) || dw_rows(g)) return false;
#endif
    *ph = nn_padded_extent(g->out[0], s, k, g->dilation[0], g->pad[0], g->in[0]);
    *pw = nn_padded_extent(g->out[1], s, k, g->dilation[1], g->pad[1], g->in[1]);
    return *ph * *pw <= dw_blocked_max_pixels(nn_isa_active(), k, s);
}

/* floats of one thread's scratch: the padded block, the outputs (rounded
 * up to whole steps and whole transposes), then a block's weights when
 * they were not prepared */
static size_t dw_blocked_thread_floats(const conv_geom *g, int64_t ph, int64_t pw) {
    int64_t lanes = nn_conv_depthwise_lanes();
    return (size_t)((ph * pw + nn_round_up(g->out_size, DWB_MAX_LANES)) * lanes + g->kernel_size * lanes);
}

/* bytes of the position tables ahead of the threads' scratch */
static size_t dw_blocked_table_bytes(const conv_geom *g) {
    return (size_t)nn_round_up(g->in_size + nn_round_up(g->out_size, DWB_STEP), 16) * sizeof(int32_t);
}

/* workspace bytes for a g that fits, with padded extents ph x pw */
static size_t dw_blocked_bytes(const conv_geom *g, int64_t ph, int64_t pw, int threads) {
    return dw_blocked_table_bytes(g) + (size_t)threads * dw_blocked_thread_floats(g, ph, pw) * sizeof(float);
}

static size_t dw_blocked_workspace(const conv_geom *g, int threads) {
    int64_t ph, pw;
    return dw_blocked_fits(g, &ph, &pw) ? dw_blocked_bytes(g, ph, pw, threads) : 0;
}

/* The blocked kernel's weights: per block of `lanes` channels, tap-major,
 * `lanes` floats per tap (channels past out_ch zero), so that a tap's
 * weights are one vector load.  Made once at load
 * (nn_conv_depthwise_prepare), or per block when the weights were not
 * prepared. */
static void dw_blocked_weights(int64_t lanes, int64_t taps, int64_t nch, const float *w, float *wt) {
    for (int64_t t = 0; t < taps; t++)
        for (int64_t c = 0; c < lanes; c++)
            wt[t * lanes + c] = c < nch ? w[c * taps + t] : 0.0f;
}

size_t nn_conv_depthwise_prepared_floats(const conv_geom *g) {
    int64_t ph, pw;
    if (!dw_blocked_fits(g, &ph, &pw)) return 0;
    return (size_t)(nn_round_up(g->out_ch, nn_conv_depthwise_lanes()) * g->kernel_size);
}

void nn_conv_depthwise_prepare(const conv_geom *g, const float *w, float *blocked) {
    int64_t lanes = nn_conv_depthwise_lanes();
    for (int64_t c0 = 0; c0 < g->out_ch; c0 += lanes) {
        int64_t nch = g->out_ch - c0 < lanes ? g->out_ch - c0 : lanes;
        dw_blocked_weights(lanes, g->kernel_size, nch, w + c0 * g->kernel_size, blocked + c0 * g->kernel_size);
    }
}

#if NN_HAVE_X86
/* nch (<= 8) channels: planes x (in_n apart) into y (out_n apart), with
 * the block's weights wt laid out by dw_blocked_weights.  Each step
 * computes 8 outputs: 8 independent chains of multiply-adds, what two
 * FMA pipes of 4 cycles' latency need to stay busy (4 chains ran at half
 * their rate: docs/perf-notes.md, "Depthwise: blocked weights at load"). */
static inline __attribute__((always_inline)) T256 void dw_block8(const int K, const dw_blocked *b, int64_t nch,
                                                                 const float *x, const float *wt, const float *bias,
                                                                 float *pixels, float *outs, float *y) {
    for (int64_t p = 0; p < b->in_n; p += 8) {
        int64_t left = b->in_n - p;
        __m256 r[8];
        for (int c = 0; c < 8; c++)
            r[c] = c >= nch    ? _mm256_setzero_ps()
                   : left >= 8 ? _mm256_loadu_ps(x + c * b->in_n + p)
                               : nn_load_first8(x + c * b->in_n + p, left);
        nn_transpose8(r);
        for (int64_t i = 0; i < 8 && p + i < b->in_n; i++)
            _mm256_storeu_ps(pixels + (int64_t)b->in_pixel[p + i] * 8, r[i]);
    }
    __m256 bv = !bias ? _mm256_setzero_ps() : nch == 8 ? _mm256_loadu_ps(bias) : nn_load_first8(bias, nch);
    for (int64_t o = 0; o < b->out_n; o += DWB_STEP) {
        __m256 acc[DWB_STEP];
        const float *src[DWB_STEP];
        for (int j = 0; j < DWB_STEP; j++) {
            acc[j] = bv;
            src[j] = pixels + (int64_t)b->out_pixel[o + j] * 8;
        }
        for (int kh = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++) {
                __m256 wv = _mm256_loadu_ps(wt + (kh * K + kw) * 8);
                int64_t tap = (kh * b->dh * b->pw + kw * b->dw) * 8;
                for (int j = 0; j < DWB_STEP; j++)
                    acc[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src[j] + tap), acc[j]);
            }
        for (int j = 0; j < DWB_STEP; j++)
            _mm256_storeu_ps(outs + (o + j) * 8, acc[j]);
    }
    for (int64_t o = 0; o < b->out_n; o += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; i++)
            r[i] = _mm256_loadu_ps(outs + (o + i) * 8);
        nn_transpose8(r);
        int64_t left = b->out_n - o;
        for (int c = 0; c < nch; c++) {
            if (left >= 8)
                _mm256_storeu_ps(y + c * b->out_n + o, r[c]);
            else
                nn_store_first8(y + c * b->out_n + o, r[c], left);
        }
    }
}

T256 static void dw_block8_avx2(const dw_blocked *b, int k, int64_t nch, const float *x, const float *wt,
                                const float *bias, float *pixels, float *outs, float *y) {
    if (k == 3)
        dw_block8(3, b, nch, x, wt, bias, pixels, outs, y);
    else
        dw_block8(5, b, nch, x, wt, bias, pixels, outs, y);
}

/* dw_block8 with 16 channels per block in 512-bit vectors: half the
 * multiply-adds and transposes of two 8-channel blocks (docs/perf-notes.md,
 * "Depthwise: blocked weights at load"). */
static inline __attribute__((always_inline)) T512 void dw_block16(const int K, const dw_blocked *b, int64_t nch,
                                                                  const float *x, const float *wt, const float *bias,
                                                                  float *pixels, float *outs, float *y) {
    __mmask16 cm = (__mmask16)(nch >= 16 ? 0xffff : (1u << nch) - 1);
    for (int64_t p = 0; p < b->in_n; p += 16) {
        int64_t left = b->in_n - p;
        __mmask16 m = (__mmask16)(left >= 16 ? 0xffff : (1u << left) - 1);
        __m512 r[16];
        for (int c = 0; c < 16; c++)
            r[c] = c < nch ? _mm512_maskz_loadu_ps(m, x + c * b->in_n + p) : _mm512_setzero_ps();
        transpose16(r);
        for (int64_t i = 0; i < 16 && p + i < b->in_n; i++)
            _mm512_storeu_ps(pixels + (int64_t)b->in_pixel[p + i] * 16, r[i]);
    }
    __m512 bv = bias ? _mm512_maskz_loadu_ps(cm, bias) : _mm512_setzero_ps();
    int64_t steps = nn_round_up(b->out_n, DWB_STEP);
    for (int64_t o = 0; o < steps; o += DWB_STEP) {
        __m512 acc[DWB_STEP];
        const float *src[DWB_STEP];
        for (int j = 0; j < DWB_STEP; j++) {
            acc[j] = bv;
            src[j] = pixels + (int64_t)b->out_pixel[o + j] * 16;
        }
        for (int kh = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++) {
                __m512 wv = _mm512_loadu_ps(wt + (kh * K + kw) * 16);
                int64_t tap = (kh * b->dh * b->pw + kw * b->dw) * 16;
                for (int j = 0; j < DWB_STEP; j++)
                    acc[j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(src[j] + tap), acc[j]);
            }
        for (int j = 0; j < DWB_STEP; j++)
            _mm512_storeu_ps(outs + (o + j) * 16, acc[j]);
    }
    for (int64_t o = 0; o < b->out_n; o += 16) {
        __m512 r[16];
        for (int i = 0; i < 16; i++) /* rows past the last step were not computed */
            r[i] = o + i < steps ? _mm512_loadu_ps(outs + (o + i) * 16) : _mm512_setzero_ps();
        transpose16(r);
        int64_t left = b->out_n - o;
        __mmask16 m = (__mmask16)(left >= 16 ? 0xffff : (1u << left) - 1);
        for (int c = 0; c < nch; c++)
            _mm512_mask_storeu_ps(y + c * b->out_n + o, m, r[c]);
    }
}

T512 static void dw_block16_avx512(const dw_blocked *b, int k, int64_t nch, const float *x, const float *wt,
                                   const float *bias, float *pixels, float *outs, float *y) {
    if (k == 3)
        dw_block16(3, b, nch, x, wt, bias, pixels, outs, y);
    else
        dw_block16(5, b, nch, x, wt, bias, pixels, outs, y);
}

typedef struct dwb_job {
    const conv_geom *g;
    const dw_blocked *b;
    float *scratch;
    size_t per_thread;
    int64_t ph, pw, groups, lanes;
    const float *x, *w, *wblk, *bias, *res; /* wblk: the weights prepared, or NULL */
    float *y;
    const nn_epilogue *e;
    bool zeroed[NN_PAR_MAX_THREADS]; /* the seat's pads are zero */
} dwb_job;

static void dwb_task(void *ctx, int64_t t, int seat) {
    dwb_job *j = ctx;
    const conv_geom *g = j->g;
    int64_t lanes = j->lanes;
    float *pixels = j->scratch + j->per_thread * (size_t)seat, *outs = pixels + j->ph * j->pw * lanes;
    float *wt = pixels + j->per_thread - g->kernel_size * lanes;
    if (!j->zeroed[seat]) { /* the pads: blocks write the interior */
        memset(pixels, 0, sizeof(float) * (size_t)(j->ph * j->pw * lanes));
        j->zeroed[seat] = true;
    }
    int64_t n = t / j->groups, c0 = t % j->groups * lanes;
    int64_t nch = g->out_ch - c0 < lanes ? g->out_ch - c0 : lanes, plane = n * g->out_ch + c0;
    if (j->wblk)
        wt = (float *)j->wblk + c0 * g->kernel_size; /* read only */
    else
        dw_blocked_weights(lanes, g->kernel_size, nch, j->w + c0 * g->kernel_size, wt);
    (lanes == 16 ? dw_block16_avx512 : dw_block8_avx2)(j->b, (int)g->kernel[0], nch, j->x + plane * g->in_size, wt,
                                                       j->bias ? j->bias + c0 : NULL, pixels, outs,
                                                       j->y + plane * g->out_size);
    nn_conv_epilogue(j->e, j->y + plane * g->out_size, j->res ? j->res + plane * g->out_size : NULL,
                     nch * g->out_size);
}

/* One (image, block of channels) per task; g fits (dw_blocked_fits, which
 * gave ph and pw) and the workspace holds dw_blocked_bytes. */
static void depthwise_blocked(const conv_geom *g, int64_t ph, int64_t pw, const float *x, const float *w,
                              const float *wblk, const float *bias, float *y, const nn_epilogue *e, const float *res,
                              void *workspace, int threads) {
    int64_t s = g->stride[0], ow_n = g->out[1];
    int32_t *in_pixel = workspace, *out_pixel = in_pixel + g->in_size;
    for (int64_t i = 0; i < g->in_size; i++)
        in_pixel[i] = (int32_t)((i / g->in[1] + g->pad[0]) * pw + i % g->in[1] + g->pad[1]);
    for (int64_t o = 0; o < nn_round_up(g->out_size, DWB_STEP); o++) { /* those past the plane repeat its last window */
        int64_t q = o < g->out_size ? o : g->out_size - 1;
        out_pixel[o] = (int32_t)(q / ow_n * s * pw + q % ow_n * s);
    }
    dw_blocked b = {.pw = pw,
                    .dh = g->dilation[0],
                    .dw = g->dilation[1],
                    .in_n = g->in_size,
                    .out_n = g->out_size,
                    .in_pixel = in_pixel,
                    .out_pixel = out_pixel};
    float *scratch = (float *)((char *)workspace + dw_blocked_table_bytes(g));
    size_t per_thread = dw_blocked_thread_floats(g, ph, pw);
    int64_t lanes = nn_conv_depthwise_lanes(), groups = (g->out_ch + lanes - 1) / lanes, tasks = g->batch * groups;
    dwb_job j = {.g = g, .b = &b, .scratch = scratch, .per_thread = per_thread, .ph = ph, .pw = pw, .groups = groups,
                 .lanes = lanes, .x = x, .w = w, .wblk = wblk, .bias = bias, .res = res, .y = y, .e = e};
    nn_par_for(tasks * g->out_size * g->kernel_size * lanes > NN_PAR_MIN ? threads : 1, tasks, dwb_task, &j);
}

#endif

/* What the per-plane kernels below share with their tasks. */
typedef struct dw_job {
    const conv_geom *g;
    const float *x, *w, *bias, *res;
    float *y;
    const nn_epilogue *e;
    const void *taps; /* depthwise_flat: its nn_flat_taps; depthwise_rotate: its edges */
    int64_t np;       /* depthwise_flat: planes per task */
    /* depthwise_rows: dw_rows_avx512 or dw_rows_avx2 */
    void (*rows)(int k, int64_t h, int64_t w_n, const float *x, const float *w, float bias, float *y,
                 const nn_epilogue *e, const float *res);
} dw_job;

/* Planes up to this many floats are copied into a zero-padded stack buffer
 * first, so that every tap is in bounds; larger ones check at the edges. */
#define DW_PADDED_MAX     16384
#define DW_SLACK          64 /* vector reads past the last row */
#define DW_SPLIT_MIN_COLS 32

/* The input plane that output plane p (image-major) of a depthwise conv reads. */
static const float *dw_input_plane(const conv_geom *g, const float *x, int64_t p) {
    int64_t n = p / g->out_ch, oc = p % g->out_ch;
    return x + (n * g->in_ch + oc / (g->out_ch / g->group)) * g->in_size;
}

#if NN_HAVE_X86
/* depthwise_2d on flat planes (dw_flat gave t): two planes per task for
 * 3x3 windows whose input is small enough to be in cache, their chains of
 * multiply-adds overlapping; out of cache pairs lose (docs/perf-notes.md,
 * "Depthwise flat planes in pairs"). */
#define DW_FLAT_PAIR_MAX_BYTES nn_cpu_l2_share(1 << 20, 1, 1) /* the input planes within L2 */

static void dw_flat_range(void *ctx, int64_t lo, int64_t hi, int seat);

static void depthwise_flat(const conv_geom *g, const nn_flat_taps *t, const float *x, const float *w, const float *bias,
                           float *y, const nn_epilogue *e, const float *res, int threads) {
    int64_t planes = g->batch * g->out_ch;
    bool pairs = t->kh == 3 && (double)planes * (double)g->in_size * sizeof(float) <= DW_FLAT_PAIR_MAX_BYTES;
    int64_t np = pairs ? 2 : 1, tasks = (planes + np - 1) / np;
    dw_job j = {.g = g, .x = x, .w = w, .bias = bias, .res = res, .y = y, .e = e, .taps = t, .np = np};
    nn_par_for_range(planes * g->out_size * g->kernel_size > NN_PAR_MIN ? threads : 1, tasks, 1, dw_flat_range, &j);
}

static void dw_flat_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const dw_job *j = ctx;
    const conv_geom *g = j->g;
    const float *x = j->x, *w = j->w, *bias = j->bias, *res = j->res;
    float *y = j->y;
    const nn_epilogue *e = j->e;
    const nn_flat_taps *t = j->taps;
    int64_t planes = g->batch * g->out_ch, np = j->np;
    for (int64_t task = lo; task < hi; task++) {
        int64_t p0 = task * np, here = planes - p0 < np ? planes - p0 : np;
        const float *xs[2], *ws[2], *rs[2] = {NULL, NULL};
        float bs[2], *ys[2];
        for (int64_t q = 0; q < here; q++) {
            int64_t oc = (p0 + q) % g->out_ch;
            xs[q] = dw_input_plane(g, x, p0 + q);
            ws[q] = w + oc * g->kernel_size;
            bs[q] = bias ? bias[oc] : 0.0f;
            ys[q] = y + (p0 + q) * g->out_size;
            rs[q] = e && res ? res + (p0 + q) * g->out_size : NULL;
        }
        dw_flat_avx512(t, (int)here, xs, ws, bs, ys, e, rs);
    }
}

/* Whether dw_rotate_avx512 runs g. */
static bool dw_rotate(const conv_geom *g) {
    if (nn_isa_active() != NN_ISA_AVX512 || g->kernel[0] != 3 || g->kernel[1] != 3 || g->in_size > DW_PADDED_MAX ||
        g->in[1] > DW_ROTATE_MAX_W)
        return false;
    for (int d = 0; d < 2; d++)
        if (g->stride[d] != 1 || g->dilation[d] != 1 || g->pad[d] != 1 || g->out[d] != g->in[d]) return false;
    return true;
}

#define DW_ROTATE_BUF_FLOATS (DW_PADDED_MAX + 2 * DW_ROTATE_MARGIN(DW_ROTATE_MAX_W))

/* depthwise_2d by dw_rotate_avx512, one plane per task, each copied into
 * the middle of the thread's zeroed buffer (only the plane's part is ever
 * written, so the margins stay zero). */
static void dw_rotate_range(void *ctx, int64_t lo, int64_t hi, int seat);

static void depthwise_rotate(const conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                             const nn_epilogue *e, const float *res, int threads) {
    int64_t planes = g->batch * g->out_ch;
    uint16_t edges[DW_PADDED_MAX / 16][2];
    dw_rotate_edges(g->in_size, g->in[1], edges);
    dw_job j = {.g = g, .x = x, .w = w, .bias = bias, .res = res, .y = y, .e = e, .taps = edges};
    nn_par_for_range(planes * g->out_size * g->kernel_size > NN_PAR_MIN ? threads : 1, planes, 1, dw_rotate_range,
                     &j);
}

static void dw_rotate_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const dw_job *j = ctx;
    const conv_geom *g = j->g;
    const float *x = j->x, *w = j->w, *bias = j->bias, *res = j->res;
    float *y = j->y;
    const nn_epilogue *e = j->e;
    const uint16_t(*edges)[2] = j->taps;
    int64_t margin = DW_ROTATE_MARGIN(g->in[1]);
    {
        float buf[DW_ROTATE_BUF_FLOATS];
        memset(buf, 0, sizeof(float) * (size_t)(g->in_size + 2 * margin));
        for (int64_t p = lo; p < hi; p++) {
            int64_t oc = p % g->out_ch;
            float *yp = y + p * g->out_size;
            memcpy(buf + margin, dw_input_plane(g, x, p), sizeof(float) * (size_t)g->in_size);
            dw_rotate_avx512(g->in_size, g->in[1], edges, buf + margin, w + oc * g->kernel_size,
                             bias ? bias[oc] : 0.0f, yp, e, res ? res + p * g->out_size : NULL);
        }
    }
}

/* NN_DW_ROWS=0 in the environment (read once) leaves these convs to the
 * other kernels, for A/B measurements. */
static bool dw_rows_enabled(void) {
    static int enabled = -1;
    return nn_env_switch(&enabled, "NN_DW_ROWS");
}

/* Whether dw_rows_avx512 or dw_rows_avx2 runs g: rows of 9 to 128 floats
 * (AVX-512: up to 4 vectors of a 3x3's row at once, 2 of a 5x5's or 7x7's:
 * more spill the accumulators and shifts; longer rows in chunks of that
 * many); 7x7 planes stay with depthwise_blocked (by rows, 7 of 16 lanes
 * count: 1.0x its time for 5x5, 1.13x for 3x3). */
static bool dw_rows(const conv_geom *g) {
    int64_t k = g->kernel[0];
    nn_isa isa = nn_isa_active();
    if (!dw_rows_enabled() || (isa != NN_ISA_AVX512 && isa != NN_ISA_AVX2) || (k != 3 && k != 5 && k != 7) ||
        g->kernel[1] != k || g->in[1] <= 8 || g->in[1] > 128 || g->out_ch != g->group)
        return false;
    for (int d = 0; d < 2; d++)
        if (g->stride[d] != 1 || g->dilation[d] != 1 || g->pad[d] != k / 2 || g->out[d] != g->in[d]) return false;
    return true;
}

static void dw_rows_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const dw_job *j = ctx;
    const conv_geom *g = j->g;
    for (int64_t p = lo; p < hi; p++) {
        int64_t oc = p % g->out_ch;
        j->rows((int)g->kernel[0], g->in[0], g->in[1], dw_input_plane(g, j->x, p), j->w + oc * g->kernel_size,
                j->bias ? j->bias[oc] : 0.0f, j->y + p * g->out_size, j->e, j->res ? j->res + p * g->out_size : NULL);
    }
}

/* One plane per task. */
static void depthwise_rows(const conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                           const nn_epilogue *e, const float *res, int threads) {
    int64_t planes = g->batch * g->out_ch;
    dw_job j = {.g = g, .x = x, .w = w, .bias = bias, .res = res, .y = y, .e = e,
                .rows = nn_isa_active() == NN_ISA_AVX512 ? dw_rows_avx512 : dw_rows_avx2};
    nn_par_for_range(planes * g->out_size * g->kernel_size > NN_PAR_MIN ? threads : 1, planes, 1, dw_rows_range, &j);
}

#endif

/* What depthwise_2d's tasks compute, derived from g alone. */
typedef struct dw2d {
    int64_t ph_n, pw_n, a, b, half;
    bool padded, direct_s2;
    void (*plane_fn)(const conv_geom *, const dw_plane *);
} dw2d;

static dw2d dw2d_setup(const conv_geom *g) {
    int64_t oh_n = g->out[0], ow_n = g->out[1], ih_n = g->in[0], iw_n = g->in[1];
    int64_t kh_n = g->kernel[0], kw_n = g->kernel[1], sh = g->stride[0], sw = g->stride[1];
    int64_t dh = g->dilation[0], dw = g->dilation[1], pt = g->pad[0], pl = g->pad[1];
    /* padded extent: everything the windows touch */
    int64_t ph_n = nn_padded_extent(oh_n, sh, kh_n, dh, pt, ih_n),
            pw_n = nn_padded_extent(ow_n, sw, kw_n, dw, pl, iw_n);
    bool padded = ph_n * pw_n <= DW_PADDED_MAX;
    int64_t a = 0, b = ow_n; /* interior columns */
    if (!padded) nn_valid_range(-pl, sw, iw_n - (kw_n - 1) * dw, ow_n, &a, &b);
    nn_isa isa = nn_isa_active();
    void (*plane_fn)(const conv_geom *, const dw_plane *) = dw_plane_scalar;
    bool direct_s2 = false;
#if NN_HAVE_X86
    if (isa == NN_ISA_AVX512)
        plane_fn = dw_plane_avx512;
    else if (isa == NN_ISA_AVX2)
        plane_fn = dw_plane_avx2;
    direct_s2 = dw_s2_direct(g);
#endif
    /* Stride 2 along rows reads every other float; the padded copy splits
     * each row by column parity instead (AVX-512 has dw_s2_512), for 3x3
     * rows of whole vectors (docs/perf-notes.md, "Depthwise stride 2"). */
    bool split = padded && kh_n == 3 && kw_n == 3 && sh == 2 && sw == 2 && dh == 1 && dw == 1 &&
                 ow_n >= DW_SPLIT_MIN_COLS && ow_n % 8 == 0 && isa != NN_ISA_AVX512;
#if NN_HAVE_X86
    /* AVX2 splits the columns in registers where the copy does not
     * (dw_s2_avx2: 0.83-0.91x the time of dw_plane_avx2 on 56x56, 1.05-1.12x
     * that of the split copy on 112x112) */
    if (!split && padded && isa == NN_ISA_AVX2 && (kh_n == 3 || kh_n == 5) && kw_n == kh_n && sh == 2 && sw == 2 &&
        dh == 1 && dw == 1)
        plane_fn = dw_s2_avx2;
#endif
    int64_t half = split ? (pw_n + 1) / 2 : 0;
    return (dw2d){.ph_n = ph_n, .pw_n = pw_n, .a = a, .b = b, .half = half, .padded = padded, .direct_s2 = direct_s2,
                  .plane_fn = plane_fn};
}

static void dw2d_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const dw_job *j = ctx;
    const conv_geom *g = j->g;
    const float *x = j->x, *w = j->w, *bias = j->bias, *res = j->res;
    float *y = j->y;
    const nn_epilogue *e = j->e;
    dw2d d = dw2d_setup(g);
    int64_t oh_n = g->out[0], ow_n = g->out[1], ih_n = g->in[0], iw_n = g->in[1];
    int64_t kh_n = g->kernel[0], kw_n = g->kernel[1], sh = g->stride[0], sw = g->stride[1];
    int64_t dh = g->dilation[0], dw = g->dilation[1], pt = g->pad[0], pl = g->pad[1];
    int64_t ph_n = d.ph_n, pw_n = d.pw_n, a = d.a, b = d.b, half = d.half;
    bool padded = d.padded, direct_s2 = d.direct_s2;
    void (*plane_fn)(const conv_geom *, const dw_plane *) = d.plane_fn;
    (void)sh;
    for (int64_t p = lo; p < hi; p++) {
        float buf[DW_PADDED_MAX + DW_SLACK];
        int64_t oc = p % g->out_ch;
        const float *xp = dw_input_plane(g, x, p), *wp = w + oc * g->kernel_size;
        float *yp = y + p * g->out_size, b0 = bias ? bias[oc] : 0.0f;
        if (direct_s2) {
#if NN_HAVE_X86
            dw_s2_avx512(g, xp, wp, b0, yp);
#endif
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
        nn_conv_epilogue(e, yp, res ? res + p * g->out_size : NULL, g->out_size);
    }
}

/* One output plane per task (but see depthwise_flat). */
static void depthwise_2d(const conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                         const nn_epilogue *e, const float *res, int threads) {
#if NN_HAVE_X86
    if (dw_rotate(g)) {
        depthwise_rotate(g, x, w, bias, y, e, res, threads);
        return;
    }
    nn_flat_taps flat;
    if (dw_flat(g, &flat)) {
        depthwise_flat(g, &flat, x, w, bias, y, e, res, threads);
        return;
    }
#endif
    int64_t planes = g->batch * g->out_ch;
    dw_job j = {.g = g, .x = x, .w = w, .bias = bias, .res = res, .y = y, .e = e};
    nn_par_for_range(planes * g->out_size * g->kernel_size > NN_PAR_MIN ? threads : 1, planes, 1, dw2d_range, &j);
}

size_t nn_conv_depthwise_workspace(const conv_geom *g, int threads) { return dw_blocked_workspace(g, threads); }

const char *nn_conv_depthwise_kernel(const conv_geom *g) {
#if NN_HAVE_X86
    int64_t ph, pw;
    nn_flat_taps t;
    if (dw_rows(g)) return "by rows";
    if (dw_blocked_fits(g, &ph, &pw)) return "channel-blocked";
    if (dw_rotate(g)) return "by lane rotation";
    if (dw_flat(g, &t)) return "on flat planes";
    if (dw_s2_direct(g)) return "stride 2 direct";
    if (dw2d_setup(g).plane_fn == dw_s2_avx2) return "stride 2, columns split in registers";
#else
    (void)g;
#endif
    return "per plane";
}

void nn_conv_depthwise_run(const conv_geom *g, const float *x, const float *w, const float *wblk, const float *bias,
                           float *y, const nn_epilogue *e, const float *res, void *workspace, size_t workspace_size,
                           int threads) {
#if NN_HAVE_X86
    if (dw_rows(g)) {
        depthwise_rows(g, x, w, bias, y, e, res, threads);
        return;
    }
    int64_t ph, pw;
    if (dw_blocked_fits(g, &ph, &pw) && workspace_size >= dw_blocked_bytes(g, ph, pw, threads)) {
        depthwise_blocked(g, ph, pw, x, w, wblk, bias, y, e, res, workspace, threads);
        return;
    }
#else
    (void)wblk, (void)workspace, (void)workspace_size; /* the blocked kernel is AVX2 code */
#endif
    depthwise_2d(g, x, w, bias, y, e, res, threads);
}
