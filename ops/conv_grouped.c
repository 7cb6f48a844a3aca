/* Grouped 2-D convs with few channels per group (conv_kernels.h). */
#include <string.h>

#include "act_x86.h"
#include "conv_kernels.h"
#include "isa.h"
#include "par.h"
#include "window.h"

/* ResNeXt's 32 groups of 4 to 32 channels and RegNet's groups of 8: as a
 * GEMM per (image, group), M is the group's output channels, which fill
 * under half of the kernel's 14-row tiles, and each tiny product pays its
 * own packing.  Here each task is one (image, group): its input channels
 * are copied into zero-padded planes (for stride s, split into s x s
 * phases, so that every tap reads consecutive floats), and the outputs are
 * computed along the flat padded plane, oh * PW + ow, 16 to a vector
 * whatever the row width: a tap is one offset into the plane, and the
 * columns past the output row (PW - OW of every PW) are computed and
 * dropped.  A block of 4 output channels x 3 vectors accumulates in 12
 * registers: per tap 3 loads, 4 broadcasts, 12 multiply-adds
 * (docs/perf-notes.md, "Grouped convs"). */
#define GROUPED_MAX_CH     64 /* channels per group, in and out */
#define GROUPED_MAX_STRIDE 2 /* grouped_planes splits stride 2 into phases */
#define GROUPED_MAX_TAPS   49
#define GROUPED_OCB        4
#define GROUPED_V          3

typedef struct grouped_geom {
    int64_t s, ph, pw;   /* stride, padded extents (multiples of s) */
    int64_t PH, PW;      /* one phase plane's extents */
    int64_t phase;       /* floats per phase plane, its slack included */
    int64_t flat;        /* outputs along the flat plane, OH * PW, rounded up to 16 */
    int64_t cg, mg;      /* channels per group in and out */
    int64_t taps;        /* kernel taps */
} grouped_geom;

static void grouped_resolve(const conv_geom *g, grouped_geom *q) {
    int64_t s = q->s = g->stride[0];
    q->ph = nn_round_up(nn_padded_extent(g->out[0], s, g->kernel[0], g->dilation[0], g->pad[0], g->in[0]), s);
    q->pw = nn_round_up(nn_padded_extent(g->out[1], s, g->kernel[1], g->dilation[1], g->pad[1], g->in[1]), s);
    q->PH = q->ph / s;
    q->PW = q->pw / s;
    q->flat = nn_round_up(g->out[0] * q->PW, 16);
    q->cg = g->in_ch / g->group;
    q->mg = g->out_ch / g->group;
    q->taps = g->kernel_size;
    /* the last vector's reads reach past the plane by the farthest tap */
    int64_t far = (g->kernel[0] - 1) * g->dilation[0] / s * q->PW + (g->kernel[1] - 1) * g->dilation[1] / s;
    int64_t need = q->flat + far;
    q->phase = nn_round_up(need > q->PH * q->PW ? need : q->PH * q->PW, 16);
}

/* floats of one thread's scratch: the group's phase planes, then its flat outputs */
static int64_t grouped_thread_floats(const grouped_geom *q) {
    return q->cg * q->s * q->s * q->phase + q->mg * q->flat;
}

bool nn_conv_grouped_fits(const conv_geom *g) {
    if (nn_isa_active() != NN_ISA_AVX512 || g->nsp != 2 || g->group < 2 || g->in_ch == g->group) return false;
    int64_t cg = g->in_ch / g->group, mg = g->out_ch / g->group;
    if (cg > GROUPED_MAX_CH || mg > GROUPED_MAX_CH || g->kernel_size > GROUPED_MAX_TAPS || g->stride[0] != g->stride[1] ||
        g->stride[0] > GROUPED_MAX_STRIDE)
        return false;
    grouped_geom q;
    grouped_resolve(g, &q);
    /* the flat plane's offsets and the scratch stay modest (a 112x112 plane of 64 channels is 3.3 MB) */
    return grouped_thread_floats(&q) <= (8 << 20) / (int64_t)sizeof(float);
}

size_t nn_conv_grouped_workspace(const conv_geom *g, int threads) {
    if (!nn_conv_grouped_fits(g)) return 0;
    grouped_geom q;
    grouped_resolve(g, &q);
    return (size_t)threads * (size_t)grouped_thread_floats(&q) * sizeof(float);
}

#if NN_HAVE_X86
#include <immintrin.h>

/* OCB output channels x V vectors of the flat plane from vector v0 on. */
static inline __attribute__((always_inline)) T512 void grouped_tile(const int OCB, const int V, const grouped_geom *q,
                                                                    const float *planes, const int64_t *off,
                                                                    const float *w, const float *bias, float *out,
                                                                    int64_t v0) {
    __m512 acc[GROUPED_OCB][GROUPED_V];
    int64_t wstride = q->cg * q->taps, plane = q->s * q->s * q->phase;
    for (int o = 0; o < OCB; o++)
        for (int j = 0; j < V; j++)
            acc[o][j] = _mm512_set1_ps(bias ? bias[o] : 0.0f);
    for (int64_t ic = 0; ic < q->cg; ic++) {
        const float *xp = planes + ic * plane + v0 * 16;
        const float *wp = w + ic * q->taps;
        for (int64_t t = 0; t < q->taps; t++) {
            __m512 x[GROUPED_V];
            for (int j = 0; j < V; j++)
                x[j] = _mm512_loadu_ps(xp + off[t] + 16 * j);
            for (int o = 0; o < OCB; o++) {
                __m512 wv = _mm512_set1_ps(wp[o * wstride + t]);
                for (int j = 0; j < V; j++)
                    acc[o][j] = _mm512_fmadd_ps(wv, x[j], acc[o][j]);
            }
        }
    }
    for (int o = 0; o < OCB; o++)
        for (int j = 0; j < V; j++)
            _mm512_storeu_ps(out + o * q->flat + (v0 + j) * 16, acc[o][j]);
}

#define GROUPED_TILE_V(OCB)                                                                                            \
    T512 static void grouped_tiles_##OCB(const grouped_geom *q, const float *planes, const int64_t *off,               \
                                         const float *w, const float *bias, float *out) {                              \
        int64_t vecs = q->flat / 16, v = 0;                                                                            \
        for (; v + GROUPED_V <= vecs; v += GROUPED_V)                                                                  \
            grouped_tile(OCB, GROUPED_V, q, planes, off, w, bias, out, v);                                             \
        if (vecs - v == 2)                                                                                             \
            grouped_tile(OCB, 2, q, planes, off, w, bias, out, v);                                                     \
        else if (vecs - v == 1)                                                                                        \
            grouped_tile(OCB, 1, q, planes, off, w, bias, out, v);                                                     \
    }
GROUPED_TILE_V(4)
GROUPED_TILE_V(3)
GROUPED_TILE_V(2)
GROUPED_TILE_V(1)

/* x's cg planes of one (image, group) into zero-padded phase planes. */
static void grouped_planes(const conv_geom *g, const grouped_geom *q, const float *x, float *planes) {
    int64_t s = q->s, ih_n = g->in[0], iw_n = g->in[1], pt = g->pad[0], pl = g->pad[1];
    for (int64_t ic = 0; ic < q->cg; ic++) {
        float *dst = planes + ic * s * s * q->phase;
        const float *src = x + ic * g->in_size;
        if (s == 1) {
            nn_pad_plane(dst, q->ph, q->pw, q->phase - q->ph * q->pw, src, ih_n, iw_n, pt, pl, 0.0f);
            continue;
        }
        memset(dst, 0, sizeof(float) * (size_t)(s * s * q->phase));
        /* stride 2: input column 2j + e lands in column phase (e + pl) % 2, at (e + pl) / 2 + j */
        for (int64_t ih = 0; ih < ih_n; ih++) {
            int64_t r = ih + pt;
            const float *row = src + ih * iw_n;
            float *base = dst + r % 2 * 2 * q->phase + r / 2 * q->PW;
            for (int64_t e = 0; e < 2; e++) {
                float *restrict to = base + (e + pl) % 2 * q->phase + (e + pl) / 2;
                const float *restrict from = row + e;
                for (int64_t j = 0; j < (iw_n - e + 1) / 2; j++)
                    to[j] = from[2 * j];
            }
        }
    }
}

/* One task: one (image, group), its input planes and flat output in the
 * seat's scratch. */
typedef struct grouped_job {
    const conv_geom *g;
    const grouped_geom *q;
    const int64_t *off;
    const float *x, *w, *bias, *res;
    float *y, *workspace;
    const nn_epilogue *e;
    size_t per_thread;
} grouped_job;

static T512 void grouped_task(void *ctx, int64_t t, int seat) {
    const grouped_job *j = ctx;
    const conv_geom *g = j->g;
    const grouped_geom q = *j->q;
    int64_t oh_n = g->out[0], ow_n = g->out[1];
    float *planes = j->workspace + j->per_thread * (size_t)seat;
    float *flat = planes + q.cg * q.s * q.s * q.phase;
    int64_t n = t / g->group, gr = t % g->group, oc0 = gr * q.mg;
    grouped_planes(g, &q, j->x + (n * g->in_ch + gr * q.cg) * g->in_size, planes);
    for (int64_t o = 0; o < q.mg; o += GROUPED_OCB) {
        const float *wo = j->w + (oc0 + o) * q.cg * q.taps, *bo = j->bias ? j->bias + oc0 + o : NULL;
        float *fo = flat + o * q.flat;
        switch (q.mg - o < GROUPED_OCB ? q.mg - o : GROUPED_OCB) {
        case 4: grouped_tiles_4(&q, planes, j->off, wo, bo, fo); break;
        case 3: grouped_tiles_3(&q, planes, j->off, wo, bo, fo); break;
        case 2: grouped_tiles_2(&q, planes, j->off, wo, bo, fo); break;
        default: grouped_tiles_1(&q, planes, j->off, wo, bo, fo); break;
        }
    }
    float *yg = j->y + (n * g->out_ch + oc0) * g->out_size;
    for (int64_t o = 0; o < q.mg; o++)
        for (int64_t oh = 0; oh < oh_n; oh++)
            memcpy(yg + o * g->out_size + oh * ow_n, flat + o * q.flat + oh * q.PW, sizeof(float) * (size_t)ow_n);
    nn_conv_epilogue(j->e, yg, j->res ? j->res + (n * g->out_ch + oc0) * g->out_size : NULL, q.mg * g->out_size);
}

void nn_conv_grouped_run(const conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                         const nn_epilogue *e, const float *res, void *workspace, int threads) {
    grouped_geom q;
    grouped_resolve(g, &q);
    int64_t off[GROUPED_MAX_TAPS], s = q.s, kw_n = g->kernel[1];
    for (int64_t t = 0; t < q.taps; t++) {
        int64_t rh = t / kw_n * g->dilation[0], rw = t % kw_n * g->dilation[1];
        off[t] = (rh % s * s + rw % s) * q.phase + rh / s * q.PW + rw / s;
    }
    int64_t tasks = g->batch * g->group;
    grouped_job job = {.g = g, .q = &q, .off = off, .x = x, .w = w, .bias = bias, .res = res, .y = y,
                       .workspace = workspace, .e = e, .per_thread = (size_t)grouped_thread_floats(&q)};
    bool par = tasks > 1 && tasks * g->out_size * q.mg * q.cg * q.taps > NN_PAR_MIN;
    nn_par_for(par ? threads : 1, tasks, grouped_task, &job);
}
#endif
