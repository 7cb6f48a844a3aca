/* Winograd F(4x4, 3x3) convolution (Lavin & Gray), interpolation points
 * 0, +-1, +-2 and infinity.
 *
 * A 4x4 output tile follows from its 6x6 input patch d and the 3x3 weights g:
 *     Y = At [ sum over c of (G g Gt) .* (Bt d B) ] A
 * so for each of the 36 transformed positions p the sum over input channels
 * is a matrix product U[p] (M x C) . V[p] (C x tiles): 144 multiplies per
 * tile and channel pair where the direct convolution spends 4x more.  In
 * fp32 this costs about 2e-6 of relative error (1.6e-7 direct); the points
 * +-1/2 gain little, and only when mixed asymmetrically (0, +-1, 1/2, -2),
 * which loses the shared terms of the transforms.
 *
 * U is transformed once (prepare), as panels of 32 output channels.  The
 * tiles are cut into blocks: a thread transforms a block's patches into V,
 * multiplies position by position (every weight panel streamed once per
 * block, by a register-blocked kernel that reads V as the transform wrote
 * it), and transforms the products back, adding bias and the epilogue while
 * they are in cache.  When the weights outweigh the patches, threads share
 * a block's tiles and split its weight panels instead.  A 16-float vector
 * carries 16 channels throughout; the same code is compiled for AVX-512,
 * AVX2 and plain C and picked at run time.
 *
 * A conv dilated by dh x dw whose leading pads are multiples of the
 * dilation is dh x dw undilated convs, one per phase (a, b): output rows
 * a, a + dh, ... and columns b, b + dw, ... read only the input's rows and
 * columns of the same phase, with the pads divided by the dilation.  Each
 * phase is a virtual image of the batch (FCN's and DeepLab's dilated 3x3
 * convs, docs/perf-notes.md, "Dilated convs by phases"). */
#include <math.h>
#include "par.h"
#include <string.h>

#include "cpu_caches.h"
#include "epilogue.h"
#include "isa.h"
#include "winograd.h"

enum {
    TILE = 4,  /* outputs per tile side */
    ALPHA = 6, /* patch side */
    NPOS = ALPHA * ALPHA,
    LANES = 16,         /* floats per vector */
    PANEL = 2 * LANES,  /* output channels per weight panel */
    GEMM_PANEL = 32,    /* output positions per panel of the GEMM path (AVX-512) */
    NR_MAX = 12,        /* most tiles per product step (AVX-512: 24 accumulators) */
    /* Up to RUN tiles of one tile row are staged together: their 6 input
     * rows, 16 channels interleaved, written once for all patches. */
    RUN = 16,
    RUN_COLS = TILE * RUN + ALPHA - TILE,
};

/* Bytes of transformed patches and products per block: half of L2 (1 MiB,
 * half of the 2 MiB L2 it was first fitted on, with NN_CPU_CACHES=fixed),
 * and at most WORK_BYTES when larger blocks save weight traffic. */
#define BLOCK_BYTES nn_cpu_l2_share(1 << 20, 1, 2)
#define WORK_BYTES (8 << 20)
/* Multiply-adds (x2) this machine kind does in the time it reads a byte of
 * weights from memory: about 200 GFLOP/s of sustained GEMM on 2 cores
 * against about 12 GB/s.  A network's weights come from memory, not cache,
 * on every call. */
#define FLOPS_PER_WEIGHT_BYTE 16.0

typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
_Static_assert(TILE * TILE == LANES, "an output tile is transposed as one 16x16 block");

#define INLINE static inline __attribute__((always_inline))

/* Unaligned loads and stores; macros, since passing vectors by value to a
 * function compiled for a narrower instruction set changes the ABI. */
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) memcpy((p), &(v), sizeof(vf))

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* How one call's work is cut: work items are (group, block of tiles, range
 * of weight panels). */
typedef struct plan {
    int64_t cg, mg, panels;        /* channels per group; weight panels per group */
    int64_t phases;                /* dilation_h x dilation_w phases: virtual images per image */
    int64_t th, tw, tiles;         /* tile grid of one phase of an image; tiles over the batch */
    int64_t msplit, per;           /* panel ranges, panels per range */
    int64_t block, blocks;         /* tiles per block, blocks */
    int64_t items;                 /* group x blocks x msplit */
    int64_t scratch;               /* floats per thread */
} plan;

static void make_plan(const nn_winograd_shape *s, int threads, plan *p) {
    p->cg = s->in_ch / s->group;
    p->mg = s->out_ch / s->group;
    p->panels = cdiv(p->mg, PANEL);
    p->phases = s->dilation_h * s->dilation_w;
    p->th = cdiv(cdiv(s->out_h, s->dilation_h), TILE);
    p->tw = cdiv(cdiv(s->out_w, s->dilation_w), TILE);
    p->tiles = s->batch * p->phases * p->th * p->tw;
    /* Threads split the weight panels of the same tiles when the weights
     * outweigh the transformed input (each thread then streams its share of
     * them, and transforms the input itself), else they take blocks.  One
     * panel (32 output channels or fewer, DenseNet's 3x3 convs) has nothing
     * to split: its tiles are shared out (docs/perf-notes.md, "Winograd:
     * one weight panel on several threads"). */
    bool split =
        threads > 1 && p->panels > 1 && (p->mg >= p->tiles || s->group * cdiv(p->tiles, NR_MAX) < threads);
    p->per = cdiv(p->panels, split ? min64(threads, p->panels) : 1);
    p->msplit = cdiv(p->panels, p->per);
    /* Every block streams the weights once: blocks as large as the cache
     * holds (patches and products in L2), larger up to `balance`, where a
     * block's weight bytes per tile equal its patch and product bytes per
     * tile, within WORK_BYTES. */
    int64_t mr = p->per * PANEL, per_tile = (int64_t)sizeof(float) * NPOS * (p->cg + mr);
    int64_t most = BLOCK_BYTES / per_tile, balance = mr * p->cg / (2 * (p->cg + mr));
    most = most > balance ? most : balance;
    most = min64(most, WORK_BYTES / per_tile);
    most = most < NR_MAX ? NR_MAX : most;
    most = min64(most, p->tiles > 0 ? p->tiles : 1);
    p->scratch = ALPHA * RUN_COLS * LANES + NPOS * most * (p->cg + mr);
    int64_t blocks = p->tiles > 0 ? cdiv(p->tiles, most) : 1;
    if (!split && s->group == 1 && p->tiles > 0) /* an even share */
        blocks = min64(p->tiles, cdiv(blocks, threads) * threads);
    else if (s->group == 1 && p->tiles > 0 && p->msplit < threads) /* fewer panel ranges than threads */
        blocks = min64(p->tiles, blocks > cdiv(threads, p->msplit) ? blocks : cdiv(threads, p->msplit));
    p->blocks = blocks;
    p->block = cdiv(p->tiles, blocks);
    p->items = s->group * p->blocks * p->msplit;
}

/* ---- the transforms, on 16 channels at once */

/* v = Bt d for six values taken `ds` apart, stored `vs` apart. */
INLINE void input_1d(const vf *d, int ds, vf *v, int vs) {
    vf d0 = d[0], d1 = d[ds], d2 = d[2 * ds], d3 = d[3 * ds], d4 = d[4 * ds], d5 = d[5 * ds];
    vf a = d4 - 4.0f * d2, b = d3 - 4.0f * d1, c = d4 - d2, e = 2.0f * (d3 - d1);
    v[0] = 4.0f * d0 - 5.0f * d2 + d4;
    v[vs] = a + b;
    v[2 * vs] = a - b;
    v[3 * vs] = c + e;
    v[4 * vs] = c - e;
    v[5 * vs] = 4.0f * d1 - 5.0f * d3 + d5;
}

/* y = At m for six values taken `ms` apart, four stored `ys` apart. */
INLINE void output_1d(const vf *m, int ms, vf *y, int ys) {
    vf s12 = m[ms] + m[2 * ms], d12 = m[ms] - m[2 * ms], s34 = m[3 * ms] + m[4 * ms], d34 = m[3 * ms] - m[4 * ms];
    y[0] = m[0] + s12 + s34;
    y[ys] = d12 + 2.0f * d34;
    y[2 * ys] = s12 + 4.0f * s34;
    y[3 * ys] = d12 + 8.0f * d34 + m[5 * ms];
}

/* Everything a work item reads. */
typedef struct job {
    const nn_winograd_shape *s;
    plan pl;
    const float *x, *u, *bias, *res;
    const nn_epilogue *e;
    float *y;
} job;

/* Where tile t lies: image n, phase (a, b), and its first output row and
 * column within the phase. */
typedef struct tile_at {
    int64_t n, a, b, y0, x0;
} tile_at;

static tile_at locate(const job *j, int64_t t) {
    const plan *pl = &j->pl;
    int64_t per_image = pl->th * pl->tw, v = t / per_image, r = t % per_image, ph = v % pl->phases;
    return (tile_at){.n = v / pl->phases,
                     .a = ph / j->s->dilation_w,
                     .b = ph % j->s->dilation_w,
                     .y0 = r / pl->tw * TILE,
                     .x0 = r % pl->tw * TILE};
}

/* Rows (or columns) of phase a of `size` rows at dilation d. */
static int64_t phase_extent(int64_t size, int64_t a, int64_t d) { return size > a ? cdiv(size - a, d) : 0; }

/* A 16x16 block: the rows r[0..16) become its columns.  Four rounds of
 * 2x2 block swaps at distances 1, 2, 4, 8, each a two-source shuffle. */
#define SWAP_LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define SWAP_HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define SWAP_LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define SWAP_HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define SWAP_LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define SWAP_HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define SWAP_LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define SWAP_HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define SWAP_ROUND(d)                                                                                                 \
    for (int i = 0; i < LANES; i++)                                                                                   \
        if (!(i & d)) {                                                                                               \
            vf a = r[i], b = r[i + d];                                                                                \
            r[i] = __builtin_shufflevector(a, b, SWAP_LO##d);                                                         \
            r[i + d] = __builtin_shufflevector(a, b, SWAP_HI##d);                                                     \
        }
INLINE void transpose16(vf *r) {
    SWAP_ROUND(1)
    SWAP_ROUND(2)
    SWAP_ROUND(4)
    SWAP_ROUND(8)
}

/* stage[row][q][16] = x at phase row iy0 + row, phase column ix0 + q of
 * phase (a, b), channels [c, c + nl) from `at` (channel c's plane), zero
 * outside the image. */
INLINE void stage_rows(const job *j, int64_t at, int nl, int64_t a, int64_t b, int64_t iy0, int64_t ix0, int64_t cols,
                       float *stage) {
    const nn_winograd_shape *s = j->s;
    int64_t hw = s->in_h * s->in_w, dh = s->dilation_h, dw = s->dilation_w;
    int64_t rows_in = phase_extent(s->in_h, a, dh), cols_in = phase_extent(s->in_w, b, dw);
    /* the columns inside the image */
    int64_t qa = min64(ix0 < 0 ? -ix0 : 0, cols), qb = min64(cols_in - ix0, cols);
    qb = qb < qa ? qa : qb;
    for (int64_t row = 0; row < ALPHA; row++) {
        float *dst = stage + row * RUN_COLS * LANES;
        int64_t iy = iy0 + row;
        if (iy < 0 || iy >= rows_in || qa == qb) {
            memset(dst, 0, sizeof(float) * LANES * (size_t)cols);
            continue;
        }
        /* column q of the phase at src[q * dw]; only q in [qa, qb) is read */
        const float *src = j->x + at + (a + iy * dh) * s->in_w + b;
        if (nl < LANES || qb - qa < LANES || dw > 1) {
            for (int64_t q = 0; q < cols; q++)
                for (int l = 0; l < LANES; l++)
                    dst[q * LANES + l] = l < nl && q >= qa && q < qb ? src[l * hw + (ix0 + q) * dw] : 0.0f;
            continue;
        }
        src += ix0;
        memset(dst, 0, sizeof(float) * LANES * (size_t)qa);
        memset(dst + qb * LANES, 0, sizeof(float) * LANES * (size_t)(cols - qb));
        /* 16 columns at a time; the last block ends at qb, overlapping the one before */
        for (int64_t q0 = qa;; q0 += LANES) {
            q0 = min64(q0, qb - LANES);
            vf r[LANES];
            for (int l = 0; l < LANES; l++) VLOAD(r[l], src + l * hw + q0);
            transpose16(r);
            for (int q = 0; q < LANES; q++) VSTORE(dst + (q0 + q) * LANES, r[q]);
            if (q0 == qb - LANES) break;
        }
    }
}

/* V[p][t][c] = (Bt d B)[p] for the block's tiles [t0, t0 + nt) and group g's channels. */
INLINE void transform_input(const job *j, int64_t g, int64_t t0, int64_t nt, float *v, float *stage) {
    const nn_winograd_shape *s = j->s;
    int64_t cg = j->pl.cg, tw = j->pl.tw;
    for (int64_t t = 0, run; t < nt; t += run) {
        tile_at at = locate(j, t0 + t);
        run = min64(min64(RUN, tw - at.x0 / TILE), nt - t);
        /* the pads are multiples of the dilation (nn_winograd_supported) */
        int64_t iy0 = at.y0 - s->pad_top / s->dilation_h, ix0 = at.x0 - s->pad_left / s->dilation_w;
        for (int64_t c0 = 0; c0 < cg; c0 += LANES) {
            int nl = (int)min64(LANES, cg - c0);
            stage_rows(j, (at.n * s->in_ch + g * cg + c0) * s->in_h * s->in_w, nl, at.a, at.b, iy0, ix0,
                       TILE * run + ALPHA - TILE, stage);
            for (int64_t k = 0; k < run; k++) {
                vf d[NPOS], tmp[NPOS];
                for (int row = 0; row < ALPHA; row++)
                    for (int col = 0; col < ALPHA; col++)
                        VLOAD(d[row * ALPHA + col], stage + (row * RUN_COLS + k * TILE + col) * LANES);
                for (int col = 0; col < ALPHA; col++) input_1d(d + col, ALPHA, tmp + col, ALPHA);
                for (int row = 0; row < ALPHA; row++) input_1d(tmp + row * ALPHA, 1, d + row * ALPHA, 1);
                float *dst = v + (t + k) * cg + c0;
                for (int p = 0; p < NPOS; p++, dst += nt * cg) {
                    if (nl == LANES) VSTORE(dst, d[p]);
                    else memcpy(dst, &d[p], sizeof(float) * (size_t)nl);
                }
            }
        }
    }
}

/* o[t * os + 0..PANEL) = sum over c of u[c][0..PANEL) * v[t][c] for nr tiles,
 * pulling the weight panel read next, next_u, toward L2 meanwhile (see
 * run_item).  Spelled out per tile: with nr a constant the branches fold
 * away and the accumulators live in registers (a loop over them is not
 * always unrolled). */
#define TILES_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
INLINE void product(int nr, const float *u, const float *v, int64_t cg, float *o, int64_t os, const float *next_u) {
    vf acc[NR_MAX][2];
#define ACC_ZERO(t)                                                                                                   \
    if (t < nr) acc[t][0] = acc[t][1] = (vf){0};
#define ACC_FMA(t)                                                                                                    \
    if (t < nr) {                                                                                                     \
        float b = v[t * cg + c];                                                                                      \
        acc[t][0] += u0 * b;                                                                                          \
        acc[t][1] += u1 * b;                                                                                          \
    }
#define ACC_STORE(t)                                                                                                  \
    if (t < nr) {                                                                                                     \
        VSTORE(o + t * os, acc[t][0]);                                                                                \
        VSTORE(o + t * os + LANES, acc[t][1]);                                                                        \
    }
    TILES_12(ACC_ZERO)
    for (int64_t c = 0; c < cg; c++) {
        vf u0, u1;
        __builtin_prefetch(next_u + c * PANEL, 0, 2);
        __builtin_prefetch(next_u + c * PANEL + LANES, 0, 2);
        VLOAD(u0, u + c * PANEL);
        VLOAD(u1, u + c * PANEL + LANES);
        TILES_12(ACC_FMA)
    }
    TILES_12(ACC_STORE)
#undef ACC_ZERO
#undef ACC_FMA
#undef ACC_STORE
}

/* y for the block's tiles and group g's output channels [m0, m1) from the
 * products o[p][t][m - m0] (mr channels per tile): At o A, bias, epilogue. */
INLINE void transform_output(const job *j, int64_t g, int64_t t0, int64_t nt, int64_t m0, int64_t m1, int64_t mr,
                             const float *o) {
    const nn_winograd_shape *s = j->s;
    int64_t mg = j->pl.mg, osz = s->out_h * s->out_w, dh = s->dilation_h, dw = s->dilation_w;
    for (int64_t t = 0; t < nt; t++) {
        tile_at at = locate(j, t0 + t);
        int64_t rows = min64(TILE, phase_extent(s->out_h, at.a, dh) - at.y0);
        int64_t cols = min64(TILE, phase_extent(s->out_w, at.b, dw) - at.x0);
        if (rows <= 0 || cols <= 0) continue; /* a phase shorter than the grid */
        /* output row i, column q of the tile at first + i * row_step + q * dw */
        int64_t row_step = dh * s->out_w;
        for (int64_t mc = m0; mc < m1; mc += LANES) {
            int nl = (int)min64(LANES, m1 - mc);
            vf m[NPOS], tmp[TILE * ALPHA], yv[TILE * TILE];
            const float *src = o + t * mr + (mc - m0);
            for (int p = 0; p < NPOS; p++) VLOAD(m[p], src + p * nt * mr);
            for (int col = 0; col < ALPHA; col++) output_1d(m + col, ALPHA, tmp + col, ALPHA);
            for (int row = 0; row < TILE; row++) output_1d(tmp + row * ALPHA, 1, yv + row * TILE, 1);
            float bias[LANES] = {0}, out[LANES][TILE * TILE];
            if (j->bias) memcpy(bias, j->bias + g * mg + mc, sizeof(float) * (size_t)nl);
            vf bv;
            VLOAD(bv, bias);
            for (int k = 0; k < TILE * TILE; k++) yv[k] += bv;
            transpose16(yv); /* now one channel's 4x4 tile per vector */
            for (int l = 0; l < LANES; l++) VSTORE(out[l], yv[l]);
            int64_t first =
                (at.n * s->out_ch + g * mg + mc) * osz + (at.a + at.y0 * dh) * s->out_w + at.b + at.x0 * dw;
            size_t row_bytes = sizeof(float) * (size_t)cols;
            if (j->e) {
                float res[LANES][TILE * TILE];
                if (j->res) {
                    if (rows < TILE || cols < TILE || nl < LANES) memset(res, 0, sizeof res);
                    for (int l = 0; l < nl; l++)
                        for (int64_t i = 0; i < rows; i++) {
                            const float *src = j->res + first + l * osz + i * row_step;
                            if (dw == 1) memcpy(res[l] + i * TILE, src, row_bytes);
                            else
                                for (int64_t q = 0; q < cols; q++) res[l][i * TILE + q] = src[q * dw];
                        }
                }
                nn_epilogue_apply(j->e, out[0], j->res ? res[0] : NULL, TILE * TILE * LANES);
            }
            for (int l = 0; l < nl; l++)
                for (int64_t i = 0; i < rows; i++) {
                    float *dst = j->y + first + l * osz + i * row_step;
                    if (dw > 1)
                        for (int64_t q = 0; q < cols; q++) dst[q * dw] = out[l][i * TILE + q];
                    else if (cols == TILE) memcpy(dst, out[l] + i * TILE, sizeof(float) * TILE);
                    else memcpy(dst, out[l] + i * TILE, row_bytes);
                }
        }
    }
}

typedef void (*product_fn)(int nr, const float *u, const float *v, int64_t cg, float *o, int64_t os,
                           const float *next_u);

/* One work item: a block of tiles, a range of weight panels, one group.
 * Position by position, each weight panel is read once for all the block's
 * tiles.  The weights come from memory on every call, and at batch 1 a
 * panel serves only a few product steps (16 tiles at 14x14): the next panel
 * is prefetched while one computes, or the steps wait on memory. */
INLINE void run_item(const job *j, int64_t item, float *scratch, int nr_max, product_fn prod) {
    const plan *pl = &j->pl;
    int64_t ms = item % pl->msplit, blk = item / pl->msplit % pl->blocks, g = item / (pl->msplit * pl->blocks);
    int64_t t0 = blk * pl->block, nt = min64(pl->block, pl->tiles - t0);
    int64_t mp0 = ms * pl->per, mp1 = min64(pl->panels, mp0 + pl->per), mr = (mp1 - mp0) * PANEL;
    if (nt <= 0 || mp0 >= mp1) return;
    int64_t cg = pl->cg;
    float *stage = scratch, *v = stage + ALPHA * RUN_COLS * LANES, *o = v + NPOS * nt * cg;
    transform_input(j, g, t0, nt, v, stage);
    for (int p = 0; p < NPOS; p++) {
        const float *vp = v + p * nt * cg;
        float *op = o + p * nt * mr;
        for (int64_t mp = mp0; mp < mp1; mp++) {
            const float *u = j->u + ((g * NPOS + p) * pl->panels + mp) * cg * PANEL;
            const float *next_u = mp + 1 < mp1     ? u + cg * PANEL
                                  : p + 1 < NPOS ? j->u + ((g * NPOS + p + 1) * pl->panels + mp0) * cg * PANEL
                                                 : u;
            for (int64_t t = 0; t < nt; t += nr_max)
                prod((int)min64(nr_max, nt - t), u, vp + t * cg, cg, op + t * mr + (mp - mp0) * PANEL, mr, next_u);
        }
    }
    transform_output(j, g, t0, nt, mp0 * PANEL, min64(mp1 * PANEL, pl->mg), mr, o);
}

/* One instance per instruction set: `nr` tiles per product step keep the
 * accumulators (2 * nr * 16 floats) in registers.  AVX2 has 16 registers of
 * 8 floats: 2 tiles take 8 for accumulators and 4 for the weights; 3 tiles
 * spilled, and the products ran 25-33% slower (Zen 3). */
#define PRODUCT_CASE(n)                                                                                               \
    case n: product(n, u, v, cg, o, os, next_u); break;
#define CASES_12(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)
#define CASES_2(X) X(1) X(2)
#define DEFINE_ISA(name, attr, nr, CASES)                                                                             \
    attr static void name##_product(int nr_, const float *u, const float *v, int64_t cg, float *o, int64_t os,     \
                                    const float *next_u) {                                                        \
        switch (nr_) { CASES(PRODUCT_CASE) }                                                                          \
    }                                                                                                                 \
    attr static void name##_item(const job *j, int64_t item, float *scratch) {                                     \
        run_item(j, item, scratch, nr, name##_product);                                                               \
    }

typedef void (*item_fn)(const job *j, int64_t item, float *scratch);

#if defined(__x86_64__) || defined(__i386__)
DEFINE_ISA(avx512, __attribute__((target("avx512f"))), 12, CASES_12)
DEFINE_ISA(avx2, __attribute__((target("avx2,fma"))), 2, CASES_2)
#endif
DEFINE_ISA(portable, , 2, CASES_2)

static item_fn pick_item(void) {
#if defined(__x86_64__) || defined(__i386__)
    if (nn_isa_active() == NN_ISA_AVX512) return avx512_item;
    if (nn_isa_active() == NN_ISA_AVX2) return avx2_item;
#endif
    return portable_item;
}

/* ---- the API */

/* Beyond this a dilated conv's phases are a row or two each, mostly the
 * tiles' padding (DeepLab's rates 12..36 go per tap, conv_taps.c); the
 * bound also keeps phases x tiles far from overflow. */
#define WINOGRAD_DILATION_MAX 64

bool nn_winograd_supported(const nn_winograd_shape *s) {
    return s->kernel_h == 3 && s->kernel_w == 3 && s->stride_h == 1 && s->stride_w == 1 && s->dilation_h >= 1 &&
           s->dilation_w >= 1 && s->dilation_h <= WINOGRAD_DILATION_MAX && s->dilation_w <= WINOGRAD_DILATION_MAX &&
           s->pad_top % s->dilation_h == 0 && s->pad_left % s->dilation_w == 0 && s->group >= 1 &&
           s->in_ch >= s->group && s->out_ch >= s->group &&
           s->in_ch % s->group == 0 && s->out_ch % s->group == 0 && s->batch >= 0 && s->in_h >= 1 && s->in_w >= 1 &&
           s->out_h >= 1 && s->out_w >= 1 && s->pad_top >= 0 && s->pad_left >= 0;
}

bool nn_winograd_applicable(const nn_winograd_shape *s) {
    if (!nn_winograd_supported(s)) return false;
    int64_t cg = s->in_ch / s->group, mg = s->out_ch / s->group;
    if (cg < LANES || mg < LANES) return false; /* idle vector lanes */
    /* Estimated time of each path (per group, in flops): the larger of its
     * multiply-adds and its weight traffic.  Winograd does 36 where the
     * GEMM does 9 per 16 outputs, but its weights are 4x larger, which
     * decides on small images at batch 1 (docs/perf-notes.md, "Winograd or
     * GEMM"). */
    plan pl;
    make_plan(s, 1, &pl);
    double pairs = (double)(cg * mg), tiles = (double)pl.tiles; /* a dilated conv's phases pad more */
    double columns = (double)s->batch * (double)(cdiv(s->out_h * s->out_w, GEMM_PANEL) * GEMM_PANEL);
    double winograd = fmax(FLOPS_PER_WEIGHT_BYTE * NPOS * sizeof(float) * pairs, 2.0 * NPOS * pairs * tiles);
    double gemm = fmax(FLOPS_PER_WEIGHT_BYTE * 9 * sizeof(float) * pairs, 2.0 * 9 * pairs * columns);
    return winograd < gemm;
}

size_t nn_winograd_prepared_size(const nn_winograd_shape *s) {
    if (!nn_winograd_supported(s)) return 0;
    plan pl;
    make_plan(s, 1, &pl);
    return sizeof(float) * (size_t)(s->group * NPOS * pl.panels * pl.cg * PANEL);
}

/* G, the weight transform, in double: the weights are rounded once.  Its
 * rows are (1/4, 0, 0), -(1, 1, 1)/6, -(1, -1, 1)/6, (1/24, 1/12, 1/6),
 * (1/24, -1/12, 1/6) and (0, 0, 1); g_apply computes them through their
 * shared terms (k0 + k2, k0/24 + k2/6, k1/12), PANEL lanes at once. */
INLINE void g_apply(const double *k0, const double *k1, const double *k2, double out[ALPHA][PANEL]) {
    for (int m = 0; m < PANEL; m++) {
        double s = k0[m] + k2[m], t = k0[m] * (1.0 / 24) + k2[m] * (1.0 / 6), c = k1[m] * (1.0 / 12);
        out[0][m] = k0[m] * 0.25;
        out[1][m] = (s + k1[m]) * (-1.0 / 6);
        out[2][m] = (s - k1[m]) * (-1.0 / 6);
        out[3][m] = t + c;
        out[4][m] = t - c;
        out[5][m] = k2[m];
    }
}

typedef struct prep_job {
    const float *w;
    float *u;
    const plan *pl;
} prep_job;

/* Rows lo..hi of U: a row is (group, panel, input channel), G g Gt of the
 * panel's 3x3 kernels with the output channel in the lane, so the loops
 * vectorize (in double: 8 lanes under AVX-512). */
INLINE void prep_rows(const prep_job *j, int64_t lo, int64_t hi) {
    const float *w = j->w;
    float *u = j->u;
    plan pl = *j->pl;
    for (int64_t i = lo; i < hi; i++) {
        int64_t c = i % pl.cg, mp = i / pl.cg % pl.panels, g = i / (pl.cg * pl.panels);
        int64_t lanes = min64(PANEL, pl.mg - mp * PANEL);
        double k[9][PANEL], gk[3][ALPHA][PANEL], out[ALPHA][PANEL];
        float panel[NPOS][PANEL];
        if (lanes < PANEL) memset(k, 0, sizeof k);
        for (int64_t m = 0; m < lanes; m++)
            for (int e = 0; e < 9; e++) k[e][m] = w[((g * pl.mg + mp * PANEL + m) * pl.cg + c) * 9 + e];
        for (int col = 0; col < 3; col++) /* G down each column of the kernel */
            g_apply(k[col], k[3 + col], k[6 + col], gk[col]);
        for (int a = 0; a < ALPHA; a++) { /* then along each row of G g */
            g_apply(gk[0][a], gk[1][a], gk[2][a], out);
            for (int b = 0; b < ALPHA; b++)
                for (int m = 0; m < PANEL; m++) panel[a * ALPHA + b][m] = (float)out[b][m];
        }
        for (int p = 0; p < NPOS; p++)
            memcpy(u + (((g * NPOS + p) * pl.panels + mp) * pl.cg + c) * PANEL, panel[p], sizeof panel[p]);
    }
}

typedef void prep_fn(const prep_job *j, int64_t lo, int64_t hi);
#if NN_HAVE_X86
__attribute__((target("avx512f"))) static void prep_avx512(const prep_job *j, int64_t lo, int64_t hi) {
    prep_rows(j, lo, hi);
}
__attribute__((target("avx2,fma"))) static void prep_avx2(const prep_job *j, int64_t lo, int64_t hi) {
    prep_rows(j, lo, hi);
}
#endif
static void prep_portable(const prep_job *j, int64_t lo, int64_t hi) { prep_rows(j, lo, hi); }

static void prep_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    prep_fn *f = NN_ISA_PICK(prep);
    f(ctx, lo, hi);
}

nn_status nn_winograd_prepare(const nn_winograd_shape *s, const float *w, void *prepared, int threads) {
    if (!nn_winograd_supported(s)) return NN_ERR_UNSUPPORTED;
    plan pl;
    make_plan(s, 1, &pl);
    float *u = prepared;
    int64_t rows = s->group * pl.panels * pl.cg; /* (group, panel, input channel): 36 x PANEL values each */
    prep_job j = {.w = w, .u = u, .pl = &pl};
    nn_par_for_range(rows > 256 ? threads : 1, rows, 1, prep_range, &j);
    return NN_OK;
}

size_t nn_winograd_workspace(const nn_winograd_shape *s, int threads) {
    if (!nn_winograd_supported(s)) return 0;
    plan pl;
    make_plan(s, threads, &pl);
    return sizeof(float) * (size_t)pl.scratch * (size_t)(threads > 1 ? threads : 1);
}

typedef struct run_ctx {
    job *j;
    item_fn item;
    float *ws;
} run_ctx;

/* Items are taken on demand (ops/par.h); each seat has its own scratch. */
static void par_item(void *ctx, int64_t i, int seat) {
    run_ctx *r = ctx;
    r->item(r->j, i, r->ws + seat * r->j->pl.scratch);
}

nn_status nn_winograd_run(const nn_winograd_shape *s, const float *x, const void *prepared, const float *bias,
                          const nn_epilogue *e, const float *residual, float *y, void *workspace,
                          size_t workspace_size, int threads) {
    if (!nn_winograd_supported(s)) return NN_ERR_UNSUPPORTED;
    /* a residual without an activation still needs an epilogue to add it */
    static const nn_epilogue add_only = {.residual = 0, .act = NN_ACT_NONE};
    job j = {.s = s, .x = x, .u = prepared, .bias = bias, .res = residual, .e = e || !residual ? e : &add_only, .y = y};
    int nthr = threads > 1 ? threads : 1;
    for (; nthr >= 1; nthr--) { /* as many threads as the workspace holds */
        make_plan(s, nthr, &j.pl);
        if ((size_t)nthr * (size_t)j.pl.scratch * sizeof(float) <= workspace_size) break;
    }
    if (nthr < 1) return NN_ERR_INTERNAL;
    run_ctx r = {.j = &j, .item = pick_item(), .ws = workspace};
    nn_par_for(nthr, j.pl.items, par_item, &r);
    return NN_OK;
}
