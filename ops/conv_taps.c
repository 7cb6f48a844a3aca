/* 2-D convs whose taps mostly read padding, one GEMM per tap.
 *
 * A conv dilated across much of its plane multiplies zeros for most of its
 * (tap, output) pairs: DeepLabV3's ASPP conv at rate 12 on the 14x14 map
 * of a 224x224 input reads the input with 324 of its 9 x 196 pairs (18%).
 * trim_taps (conv.c) drops the taps that read only padding everywhere;
 * here every tap that reaches the input at all is one product over the
 * rectangle of outputs where it does:
 *
 *     X_t = the input under tap t for those outputs   (C x n_images*|R_t|, gathered)
 *     T   = W_t X_t                                   (M x n_images*|R_t|, the GEMM, W_t packed in prepare)
 *     y[R_t] += T                                     (scattered)
 *
 * with y starting at the bias, and the epilogue (residual, activation)
 * applied once every tap is in.  Images go through in chunks, so the two
 * buffers stay within CHUNK_FLOATS.  Weights are packed in prepare as one
 * GEMM block of the live taps' M x C slices, in (ky, kx) order. */
#include <stdlib.h>
#include <string.h>

#include "conv_kernels.h"
#include "par.h"

/* the gathered input and the GEMM's result of one chunk of images, at most
 * (floats, 1 MiB: DeepLab's ASPP conv, 960 + 256 channels on 196 outputs,
 * takes one image at a time) */
#define CHUNK_FLOATS (1 << 18)

/* The outputs [*lo, *hi) along spatial dim d whose input under tap t lies
 * inside the input: 0 <= o * stride - pad + t * dilation < in. */
static void tap_range(const conv_geom *g, int d, int64_t t, int64_t *lo, int64_t *hi) {
    int64_t s = g->stride[d], off = t * g->dilation[d] - g->pad[d];
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = g->in[d] - 1 - off < 0 ? 0 : (g->in[d] - 1 - off) / s + 1;
    if (b > g->out[d]) b = g->out[d];
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* Outputs tap (ky, kx) reaches, and their rectangle. */
static int64_t tap_rect(const conv_geom *g, int64_t ky, int64_t kx, int64_t r[4]) {
    tap_range(g, 0, ky, &r[0], &r[1]);
    tap_range(g, 1, kx, &r[2], &r[3]);
    return (r[1] - r[0]) * (r[3] - r[2]);
}

/* Taps that reach the input, and the largest rectangle among them. */
static int64_t live_taps(const conv_geom *g, int64_t *largest) {
    int64_t n = 0, big = 0, r[4];
    for (int64_t ky = 0; ky < g->kernel[0]; ky++)
        for (int64_t kx = 0; kx < g->kernel[1]; kx++) {
            int64_t a = tap_rect(g, ky, kx, r);
            n += a > 0;
            big = a > big ? a : big;
        }
    if (largest) *largest = big;
    return n;
}

/* NN_CONV_TAPS=0 in the environment (read once) leaves these convs to the
 * GEMM, for A/B measurements; nn_conv_taps_enable overrides it (tests). */
static int enabled = -1; /* nn_env_switch's state; nn_conv_taps_enable stores it too */

void nn_conv_taps_enable(bool on) { __atomic_store_n(&enabled, on ? 1 : 0, __ATOMIC_RELAXED); }

static bool taps_enabled(void) { return nn_env_switch(&enabled, "NN_CONV_TAPS"); }

bool nn_conv_taps_fits(const conv_geom *g) {
    if (g->nsp != 2 || g->group != 1 || g->kernel_size < 2 || !taps_enabled()) return false;
    /* along each dim: the outputs its taps reach, summed (a tap's pairs are
     * the product of its two ranges, so the pairs are the product of the
     * sums), and the taps that reach the input somewhere: the kernel conv.c's
     * trim_taps cuts it to (DeepLab's rates 24 and 36 on 14x14: its centre
     * alone, a plain 1x1 GEMM that needs no gather) */
    int64_t reached[2] = {0, 0}, live[2] = {0, 0}, lo, hi;
    for (int d = 0; d < 2; d++)
        for (int64_t t = 0; t < g->kernel[d]; t++) {
            tap_range(g, d, t, &lo, &hi);
            reached[d] += hi - lo;
            live[d] += hi > lo;
        }
    /* at most half the pairs of that kernel reach the input: below that the
     * per-tap GEMMs' gathers and scatters cost less than the zeros they skip */
    return reached[0] * reached[1] * 2 <= live[0] * live[1] * g->out_size;
}

/* Images per chunk: as many as keep both buffers within CHUNK_FLOATS, at
 * least one (also for an empty batch, which runs no chunk). */
static int64_t chunk_images(const conv_geom *g, int64_t largest) {
    int64_t per = (g->in_ch + g->out_ch) * (largest > 0 ? largest : 1);
    int64_t nb = CHUNK_FLOATS / per;
    if (nb > g->batch) nb = g->batch;
    return nb < 1 ? 1 : nb;
}

/* The GEMM of one tap: W_t (packed, or not yet when `packed` is NULL) times
 * the gathered X (C x n) into T (M x n). */
static nn_gemm tap_gemm(const conv_geom *g, const nn_gemm_packed *packed, const float *x, float *t, int64_t n) {
    return (nn_gemm){.m = g->out_ch,
                     .n = n,
                     .k = g->in_ch,
                     .lda = g->in_ch,
                     .a_packed = packed,
                     .b = x,
                     .ldb = n,
                     .c = t,
                     .ldc = n,
                     .alpha = 1.0f};
}

/* The packing of every live tap's slice at once: batch {1, live}. */
static nn_gemm pack_gemm(const conv_geom *g, const float *slices, int64_t live) {
    nn_gemm gm = tap_gemm(g, NULL, NULL, NULL, 1);
    gm.a = slices;
    gm.batch[0] = 1;
    gm.batch[1] = live;
    gm.stride_a[1] = g->out_ch * g->in_ch;
    return gm;
}

size_t nn_conv_taps_prepared_size(const conv_geom *g) {
    int64_t live = live_taps(g, NULL);
    if (live == 0) return 0;
    nn_gemm gm = pack_gemm(g, NULL, live);
    return nn_gemm_pack_a_block_bytes(&gm);
}

bool nn_conv_taps_prepare(const conv_geom *g, const float *w, void *block) {
    int64_t live = live_taps(g, NULL), mc = g->out_ch * g->in_ch, r[4];
    if (live == 0) return true;
    float *slices = malloc(sizeof(float) * (size_t)(live * mc));
    if (!slices) return false;
    int64_t li = 0;
    for (int64_t ky = 0; ky < g->kernel[0]; ky++)
        for (int64_t kx = 0; kx < g->kernel[1]; kx++) {
            if (tap_rect(g, ky, kx, r) == 0) continue;
            float *s = slices + li++ * mc;
            int64_t t = ky * g->kernel[1] + kx;
            for (int64_t i = 0; i < mc; i++) /* W[m][c][ky][kx] for (m, c) in order */
                s[i] = w[i * g->kernel_size + t];
        }
    nn_gemm gm = pack_gemm(g, slices, live);
    nn_gemm_pack_a_block(&gm, block);
    free(slices);
    return true;
}

bool nn_conv_taps_prepared_fits(const conv_geom *g, const void *block, size_t size) {
    int64_t live = live_taps(g, NULL);
    if (live == 0) return size == 0;
    nn_gemm gm = pack_gemm(g, NULL, live);
    return nn_gemm_block_fits_a(&gm, block, size);
}

/* Floats of the two buffers, then the GEMM's own scratch (64-byte aligned). */
static size_t buffer_floats(const conv_geom *g, int64_t nb, int64_t largest) {
    return ((size_t)((g->in_ch + g->out_ch) * nb * largest) + 15) / 16 * 16;
}

size_t nn_conv_taps_workspace(const conv_geom *g, int threads) {
    int64_t largest;
    live_taps(g, &largest);
    int64_t nb = chunk_images(g, largest), last = g->batch % nb, r[4];
    size_t most = 0;
    /* the GEMM's scratch follows its plan, which follows n: the most over
     * every product run (full chunks, and a last, shorter one) */
    for (int64_t ky = 0; ky < g->kernel[0]; ky++)
        for (int64_t kx = 0; kx < g->kernel[1]; kx++) {
            int64_t a = tap_rect(g, ky, kx, r);
            for (int k = 0; k < 2 && a > 0; k++) {
                int64_t images = k ? last : nb;
                if (images == 0) continue;
                nn_gemm gm = tap_gemm(g, NULL, NULL, NULL, images * a);
                size_t s = nn_gemm_workspace(&gm, threads);
                most = s > most ? s : most;
            }
        }
    return sizeof(float) * buffer_floats(g, nb, largest) + most + 64;
}

typedef struct taps_job {
    const conv_geom *g;
    const float *x, *bias, *res;
    float *y, *buf, *t;
    const nn_epilogue *e;
    int64_t n0, nb, r[4], ky, kx, area;
} taps_job;

/* Planes [lo, hi) of the chunk's outputs start at their bias. */
static void init_planes(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const taps_job *j = ctx;
    const conv_geom *g = j->g;
    for (int64_t p = lo; p < hi; p++) {
        float v = j->bias ? j->bias[p % g->out_ch] : 0.0f, *y = j->y + (j->n0 * g->out_ch + p) * g->out_size;
        for (int64_t i = 0; i < g->out_size; i++)
            y[i] = v;
    }
}

/* Input channels [lo, hi): X[c][image * area + position] under the tap. */
static void gather(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const taps_job *j = ctx;
    const conv_geom *g = j->g;
    int64_t w = j->r[3] - j->r[2], s0 = g->stride[0], s1 = g->stride[1];
    int64_t iy0 = j->r[0] * s0 - g->pad[0] + j->ky * g->dilation[0];
    int64_t ix0 = j->r[2] * s1 - g->pad[1] + j->kx * g->dilation[1];
    for (int64_t c = lo; c < hi; c++)
        for (int64_t i = 0; i < j->nb; i++) {
            const float *src = j->x + ((j->n0 + i) * g->in_ch + c) * g->in_size + ix0;
            float *dst = j->buf + (c * j->nb + i) * j->area;
            for (int64_t oy = j->r[0]; oy < j->r[1]; oy++, dst += w) {
                const float *row = src + (iy0 + (oy - j->r[0]) * s0) * g->in[1];
                if (s1 == 1)
                    memcpy(dst, row, sizeof(float) * (size_t)w);
                else
                    for (int64_t k = 0; k < w; k++)
                        dst[k] = row[k * s1];
            }
        }
}

/* Output channels [lo, hi): y[R] += T. */
static void scatter(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const taps_job *j = ctx;
    const conv_geom *g = j->g;
    int64_t w = j->r[3] - j->r[2];
    for (int64_t m = lo; m < hi; m++)
        for (int64_t i = 0; i < j->nb; i++) {
            const float *src = j->t + (m * j->nb + i) * j->area;
            float *y = j->y + ((j->n0 + i) * g->out_ch + m) * g->out_size + j->r[2];
            for (int64_t oy = j->r[0]; oy < j->r[1]; oy++, src += w)
                for (int64_t k = 0; k < w; k++)
                    y[oy * g->out[1] + k] += src[k];
        }
}

/* Planes [lo, hi) of the chunk: residual and activation. */
static void finish_planes(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const taps_job *j = ctx;
    const conv_geom *g = j->g;
    for (int64_t p = lo; p < hi; p++) {
        int64_t at = (j->n0 * g->out_ch + p) * g->out_size;
        nn_conv_epilogue(j->e, j->y + at, j->res ? j->res + at : NULL, g->out_size);
    }
}

bool nn_conv_taps_run(const conv_geom *g, const void *block, const float *x, const float *bias, float *y,
                      const nn_epilogue *e, const float *res, void *workspace, size_t workspace_size, int threads) {
    int64_t largest, live = live_taps(g, &largest), nb = chunk_images(g, largest);
    /* the buffers here; each GEMM checks its own scratch after them */
    if (workspace_size < sizeof(float) * buffer_floats(g, nb, largest) + 64) return false;
    nn_gemm_packed all = live ? nn_gemm_block_view(block) : (nn_gemm_packed){0};
    float *buf = (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    float *t = buf + g->in_ch * nb * largest;
    float *scratch = buf + buffer_floats(g, nb, largest);
    size_t scratch_size = workspace_size - (size_t)((char *)scratch - (char *)workspace);
    int64_t min_floats = 4096; /* per task: a claim costs tens of nanoseconds */
    for (int64_t n0 = 0; n0 < g->batch; n0 += nb) {
        taps_job j = {.g = g, .x = x, .bias = bias, .res = res, .y = y, .buf = buf, .t = t, .e = e, .n0 = n0,
                      .nb = g->batch - n0 < nb ? g->batch - n0 : nb};
        int64_t planes = j.nb * g->out_ch;
        nn_par_for_range(threads, planes, min_floats / g->out_size + 1, init_planes, &j);
        int64_t li = 0;
        for (j.ky = 0; j.ky < g->kernel[0]; j.ky++)
            for (j.kx = 0; j.kx < g->kernel[1]; j.kx++) {
                if ((j.area = tap_rect(g, j.ky, j.kx, j.r)) == 0) continue;
                nn_gemm_packed w = all;
                w.data += (size_t)li++ * all.stride;
                w.count = 1;
                int64_t per = j.nb * j.area;
                nn_par_for_range(threads, g->in_ch, min_floats / per + 1, gather, &j);
                nn_gemm gm = tap_gemm(g, &w, buf, t, per);
                if (!nn_gemm_run(&gm, scratch, scratch_size, threads)) return false;
                nn_par_for_range(threads, g->out_ch, min_floats / per + 1, scatter, &j);
            }
        if (e) nn_par_for_range(threads, planes, min_floats / g->out_size + 1, finish_planes, &j);
    }
    return true;
}
