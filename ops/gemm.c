/* Single-precision GEMM with packed panels and per-ISA microkernels (see gemm.h).
 *
 * Blocking follows the usual recipe: K is cut into blocks of at most KC; for
 * each block a KC x NC slab of B is packed into NR-column panels (it lives in
 * L2) and each MR x NR tile of C is computed by the microkernel from an MR-row
 * panel of A and one NR-column panel of B, the A panel (MR x KC, broadcast)
 * staying in L1 while the B panels of the slab stream past it.  The first K
 * block writes C, later ones add to it, the last applies the epilogue while
 * the tile is in cache.
 *
 * Kernels (picked once with __builtin_cpu_supports; each compiled for its ISA
 * with a target attribute, so the build needs no -m flags):
 *   avx512  14 x 32: 28 zmm accumulators, B read as 2 vectors, A broadcast
 *   avx2     6 x 16: 12 ymm accumulators
 *   scalar   4 x 16: plain C, the reference the others must agree with */
#include "gemm.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "act_x86.h"
#include "epilogue.h"
#include "isa.h"

#define KC_MAX 384

typedef struct tile_args {
    int64_t kc;
    const float *a, *b; /* a: a packed panel, a[p*mr_stride + i]; b: b[p*ldb + j] */
    /* The A panel the next tile will read, pulled toward the cache while this
     * one computes (see run_task); a itself when there is none. */
    const float *next_a;
    /* Likewise the next tile's pre-packed B panel (the AVX-512 kernel's, whose
     * transposed-C convs take their weights as B); b itself when none. */
    const float *next_b;
    int64_t ldb; /* NR for a packed panel, B's row stride when read in place */
    float *c;
    int64_t ldc;
    int mr, nr; /* valid rows / columns of this tile */
    bool load_c, last;
    bool trans_c;                           /* C(i, j) at c[j*ldc + i], the residual likewise */
    const float *bias_row, *bias_col, *res; /* already offset to the tile; NULL when absent */
    int64_t ldr;
    nn_act act; /* only the activations act_in_tile accepts reach kernels */
    float alpha, beta;
} tile_args;

typedef struct conv_table conv_table;
typedef struct b_prologue b_prologue;

typedef struct gemm_kernel {
    const char *name;
    int mr, nr;
    int mc, nc;      /* cache blocks (multiples of mr, nr) */
    bool b_in_place; /* tile reads a plain B where it lies (masked at its right edge) */
    void (*tile)(const tile_args *t);
    void (*act)(float *y, int64_t n, nn_act act, float alpha, float beta);
    float (*dot)(const float *x, const float *y, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n);
    /* rows [p0, p0 + kc) of an implicit im2col matrix, or kc rows of a plain B, into NR panels */
    void (*pack_conv)(const conv_table *t, const float *x, int64_t p0, int64_t kc, int nr, float *dst);
    void (*pack_plain)(const float *src, int64_t ld, int64_t kc, int64_t nc, int nr, float *dst, const b_prologue *pr);
} gemm_kernel;

/* Activations applied to the accumulators in registers; tanh runs over the
 * stored tile with the kernel's act(). */
static bool act_in_tile(nn_act act) { return act != NN_ACT_TANH; }

/* ---- element-wise helpers, compiled once per ISA through the wrappers below */

/* The activations of act.h over an array, the switch outside the loops so
 * that each case vectorizes for the ISA it is compiled for. */
static inline __attribute__((always_inline)) void act_body(float *y, int64_t n, nn_act act, float a, float b) {
    switch (act) {
#define ACT_LOOP(A)                                                                                                        case A:                                                                                                                    for (int64_t i = 0; i < n; i++)                                                                                            y[i] = nn_act_apply(A, a, b, y[i]);                                                                                break;
        ACT_LOOP(NN_ACT_RELU)
        ACT_LOOP(NN_ACT_CLIP)
        ACT_LOOP(NN_ACT_LEAKY_RELU)
        ACT_LOOP(NN_ACT_SIGMOID)
        ACT_LOOP(NN_ACT_HARD_SIGMOID)
        ACT_LOOP(NN_ACT_HARD_SWISH)
        ACT_LOOP(NN_ACT_SILU)
        ACT_LOOP(NN_ACT_TANH)
#undef ACT_LOOP
    case NN_ACT_NONE: break;
    }
}

static inline __attribute__((always_inline)) float dot_body(const float *x, const float *y, int64_t n) {
#pragma clang fp reassociate(on)
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

static inline __attribute__((always_inline)) void axpy_body(float *restrict y, float a, const float *restrict x,
                                                            int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

#define ELEMENTWISE_FOR(SUFFIX, TARGET)                                                                                \
    TARGET static void act_##SUFFIX(float *y, int64_t n, nn_act act, float a, float b) { act_body(y, n, act, a, b); }  \
    TARGET static float dot_##SUFFIX(const float *x, const float *y, int64_t n) { return dot_body(x, y, n); }          \
    TARGET static void axpy_##SUFFIX(float *y, float a, const float *x, int64_t n) { axpy_body(y, a, x, n); }

ELEMENTWISE_FOR(avx512, T512)
ELEMENTWISE_FOR(avx2, T256)
ELEMENTWISE_FOR(scalar, )

/* ---- the epilogue of a tile, one element at a time: the scalar kernel's,
 *      and the vector kernels' for ragged tiles. */
static void merge_tile(const tile_args *t, const float *acc, int ld) {
    int64_t row_step = t->trans_c ? 1 : t->ldc, col_step = t->trans_c ? t->ldc : 1;
    int64_t res_row = t->trans_c ? 1 : t->ldr, res_col = t->trans_c ? t->ldr : 1;
    for (int i = 0; i < t->mr; i++)
        for (int j = 0; j < t->nr; j++) {
            float *c = t->c + i * row_step + j * col_step;
            float v = acc[i * ld + j];
            if (t->load_c) v += *c;
            if (t->last) {
                if (t->bias_row) v += t->bias_row[i];
                if (t->bias_col) v += t->bias_col[j];
                if (t->res) v += t->res[i * res_row + j * res_col];
                v = nn_act_apply(t->act, t->alpha, t->beta, v);
            }
            *c = v;
        }
}

/* ---- scalar kernel */
#define SC_MR 4
#define SC_NR 16
static void tile_scalar(const tile_args *t) {
    float acc[SC_MR][SC_NR] = {{0}};
    const float *a = t->a, *b = t->b;
    for (int64_t p = 0; p < t->kc; p++, a += SC_MR, b += t->ldb)
        for (int i = 0; i < SC_MR; i++)
            for (int j = 0; j < SC_NR; j++)
                acc[i][j] += a[i] * b[j];
    merge_tile(t, &acc[0][0], SC_NR);
}

/* ---- AVX2 kernel: 6 x 16 */
#define V8_MR 6
/* R rows by V vectors of 8 columns: V = 1 serves a tile whose valid columns
 * fit in the panel's first half (N = 49 ends on a 1-column tile), at half
 * the multiply-adds of a full one. */
static inline __attribute__((always_inline)) T256 void tile256_rows(const int R, const int V, const tile_args *t) {
    __m256 c[2][V8_MR];
#pragma clang loop unroll(full)
    for (int i = 0; i < R; i++)
        c[0][i] = c[1][i] = _mm256_setzero_ps();
    const float *a = t->a, *b = t->b, *next = t->next_a;
    for (int64_t p = 0; p < t->kc; p++, a += V8_MR, b += t->ldb, next += V8_MR) {
        if (p % 2 == 0) _mm_prefetch((const char *)next, _MM_HINT_T1); /* 12 floats a step: a line per two */
        __m256 b0 = _mm256_load_ps(b), b1 = V > 1 ? _mm256_load_ps(b + 8) : b0;
#pragma clang loop unroll(full)
        for (int i = 0; i < R; i++) {
            __m256 ai = _mm256_broadcast_ss(a + i);
            c[0][i] = _mm256_fmadd_ps(ai, b0, c[0][i]);
            if (V > 1) c[1][i] = _mm256_fmadd_ps(ai, b1, c[1][i]);
        }
    }
    if (t->nr < 8 * V || t->trans_c) { /* ragged right edge or a transposed C: through a buffer */
        float acc[V8_MR * 16];
#pragma clang loop unroll(full)
        for (int i = 0; i < R; i++)
#pragma clang loop unroll(full)
            for (int v = 0; v < V; v++)
                _mm256_storeu_ps(acc + i * 16 + 8 * v, c[v][i]);
        merge_tile(t, acc, 16);
        return;
    }
    /* The epilogue, one step at a time over all of the tile's values: each
     * test is made once per tile, not once per vector (tested per vector,
     * the activation's switch spilled the accumulators); ReLU and Clip, the
     * common ones, are spelled out, the others go through act256.  It works
     * on a copy: updating c itself here, clang kept c in memory and stored
     * all of it on every k step (check the k loop's code after changes
     * here).  Rows past t->mr are neither read nor written. */
#define EACH_ROW_VEC                                                                                                   \
    _Pragma("clang loop unroll(full)") for (int i = 0; i < R; i++) if (i < t->mr)                                      \
        _Pragma("clang loop unroll(full)") for (int v = 0; v < V; v++)
    __m256 y[2][V8_MR];
    EACH_ROW_VEC y[v][i] = c[v][i];
    if (t->load_c) EACH_ROW_VEC y[v][i] = _mm256_add_ps(y[v][i], _mm256_loadu_ps(t->c + i * t->ldc + 8 * v));
    if (t->last) {
        if (t->bias_row) EACH_ROW_VEC y[v][i] = _mm256_add_ps(y[v][i], _mm256_broadcast_ss(t->bias_row + i));
        if (t->bias_col) EACH_ROW_VEC y[v][i] = _mm256_add_ps(y[v][i], _mm256_loadu_ps(t->bias_col + 8 * v));
        if (t->res) EACH_ROW_VEC y[v][i] = _mm256_add_ps(y[v][i], _mm256_loadu_ps(t->res + i * t->ldr + 8 * v));
        switch (t->act) {
        case NN_ACT_NONE: break;
        case NN_ACT_RELU: EACH_ROW_VEC y[v][i] = _mm256_max_ps(y[v][i], _mm256_setzero_ps()); break;
        case NN_ACT_CLIP: {
            __m256 lo = _mm256_set1_ps(t->alpha), hi = _mm256_set1_ps(t->beta);
            EACH_ROW_VEC y[v][i] = _mm256_min_ps(_mm256_max_ps(y[v][i], lo), hi);
            break;
        }
        default: EACH_ROW_VEC y[v][i] = nn_act256(y[v][i], t->act, t->alpha, t->beta);
        }
    }
    EACH_ROW_VEC _mm256_storeu_ps(t->c + i * t->ldc + 8 * v, y[v][i]);
#undef EACH_ROW_VEC
}

static inline __attribute__((always_inline)) T256 void tile256_width(const int V, const tile_args *t) {
    if (t->mr > 4)
        tile256_rows(6, V, t);
    else if (t->mr > 2)
        tile256_rows(4, V, t);
    else if (t->mr > 1)
        tile256_rows(2, V, t);
    else
        tile256_rows(1, V, t);
}

T256 static void tile_avx2(const tile_args *t) {
    if (t->nr > 8)
        tile256_width(2, t);
    else
        tile256_width(1, t);
}

/* ---- AVX-512 kernel: 14 x 32; ragged edges through masks */
#define V16_MR 14
static inline __attribute__((always_inline)) T512 __m512 epi512(__m512 v, const tile_args *t, int i, int j,
                                                                __mmask16 m) {
    const float *c = t->c + i * t->ldc + j;
    if (t->load_c) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, c));
    if (!t->last) return v;
    if (t->bias_row) v = _mm512_add_ps(v, _mm512_set1_ps(t->bias_row[i]));
    if (t->bias_col) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t->bias_col + j));
    if (t->res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t->res + i * t->ldr + j));
    return nn_act512(v, t->act, t->alpha, t->beta);
}

/* r[i] lane j -> r[j] lane i, for 16 rows of 16: 32-bit, then 64-bit
 * interleaves inside 128-bit lanes (after which r[4k + q]'s lane L holds
 * rows 4k..4k+3 of column 4L + q), then two 128-bit lane shuffles. */
static inline __attribute__((always_inline)) T512 void transpose16(__m512 r[16]) {
    __m512 a[16], b[16];
#pragma clang loop unroll(full)
    for (int k = 0; k < 8; k++) {
        a[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
#pragma clang loop unroll(full)
    for (int k = 0; k < 4; k++)
#pragma clang loop unroll(full)
        for (int h = 0; h < 2; h++) {
            __m512d x = _mm512_castps_pd(a[4 * k + h]), y = _mm512_castps_pd(a[4 * k + h + 2]);
            b[4 * k + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(x, y));
            b[4 * k + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x, y));
        }
#pragma clang loop unroll(full)
    for (int q = 0; q < 4; q++) {
        __m512 lo01 = _mm512_shuffle_f32x4(b[q], b[4 + q], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 hi01 = _mm512_shuffle_f32x4(b[q], b[4 + q], _MM_SHUFFLE(3, 2, 3, 2));
        __m512 lo23 = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 hi23 = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], _MM_SHUFFLE(3, 2, 3, 2));
        r[q] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0));
        r[4 + q] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1));
        r[8 + q] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0));
        r[12 + q] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* A transposed C: the R rows of accumulators for columns j0..j0+15 become
 * one vector per column, its lanes the tile's rows, stored down C's column
 * (a row of the NCHW output when rows are positions and columns channels). */
static inline __attribute__((always_inline)) T512 void store512_transposed(const int R, const __m512 *acc,
                                                                           const tile_args *t, int j0) {
    __m512 r[16];
#pragma clang loop unroll(full)
    for (int i = 0; i < 16; i++)
        r[i] = i < R ? acc[i] : _mm512_setzero_ps();
    transpose16(r);
    __mmask16 rows = (__mmask16)((1u << t->mr) - 1);
    for (int j = 0; j < 16 && j0 + j < t->nr; j++) {
        float *c = t->c + (j0 + j) * t->ldc;
        __m512 v = r[j];
        if (t->load_c) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rows, c));
        if (t->last) {
            if (t->bias_row) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rows, t->bias_row));
            if (t->bias_col) v = _mm512_add_ps(v, _mm512_set1_ps(t->bias_col[j0 + j]));
            if (t->res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rows, t->res + (j0 + j) * t->ldr));
            v = nn_act512(v, t->act, t->alpha, t->beta);
        }
        _mm512_mask_storeu_ps(c, rows, v);
    }
}

/* R rows by V vectors of 16 columns: V = 1 serves a tile whose valid
 * columns fit in the panel's first half (N = 196, a 14x14 plane, ends on a
 * 4-column tile) in 0.55 of a full tile's time. */
static inline __attribute__((always_inline)) T512 void tile512_rows(const int R, const int V, const tile_args *t) {
    __m512 c0[V16_MR], c1[V16_MR];
#pragma clang loop unroll(full)
    for (int i = 0; i < R; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
    __mmask16 m0 = t->nr >= 16 ? 0xffff : (__mmask16)((1u << t->nr) - 1);
    __mmask16 m1 = t->nr >= 32 ? 0xffff : t->nr <= 16 ? 0 : (__mmask16)((1u << (t->nr - 16)) - 1);
    const float *a = t->a, *b = t->b, *next = t->next_a, *next_b = t->next_b;
    for (int64_t p = 0; p < t->kc; p++, a += V16_MR, b += t->ldb, next += V16_MR, next_b += t->ldb) {
        _mm_prefetch((const char *)next, _MM_HINT_T1);
        _mm_prefetch((const char *)next_b, _MM_HINT_T1);
        if (V > 1) _mm_prefetch((const char *)(next_b + 16), _MM_HINT_T1);
        /* masked: a B read in place ends at its last valid column */
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = V > 1 ? _mm512_maskz_loadu_ps(m1, b + 16) : b0;
#pragma clang loop unroll(full)
        for (int i = 0; i < R; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            if (V > 1) c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
    }
    if (t->trans_c) {
        store512_transposed(R, c0, t, 0);
        if (V > 1) store512_transposed(R, c1, t, 16);
        return;
    }
#pragma clang loop unroll(full)
    for (int i = 0; i < R && i < t->mr; i++) {
        float *c = t->c + i * t->ldc;
        _mm512_mask_storeu_ps(c, m0, epi512(c0[i], t, i, 0, m0));
        if (V > 1) _mm512_mask_storeu_ps(c + 16, m1, epi512(c1[i], t, i, 16, m1));
    }
}

static inline __attribute__((always_inline)) T512 void tile512_width(const int V, const tile_args *t) {
    if (t->mr > 8)
        tile512_rows(14, V, t);
    else if (t->mr > 4)
        tile512_rows(8, V, t);
    else if (t->mr > 2)
        tile512_rows(4, V, t);
    else if (t->mr > 1)
        tile512_rows(2, V, t);
    else
        tile512_rows(1, V, t);
}

T512 static void tile_avx512(const tile_args *t) {
    if (t->nr > 16)
        tile512_width(2, t);
    else
        tile512_width(1, t);
}

/* ---- K blocking: ceil(K / KC_MAX) blocks of equal size (the last smaller) */
typedef struct kblocks {
    int64_t count, size;
} kblocks;

static kblocks k_blocks(int64_t k) {
    kblocks b = {.count = k > 0 ? (k + KC_MAX - 1) / KC_MAX : 1};
    b.size = k > 0 ? (k + b.count - 1) / b.count : 0;
    return b;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t batch_count(const nn_gemm *g, int i) { return g->batch[i] > 0 ? g->batch[i] : 1; }

/* ---- implicit im2col.  For one block of output positions (columns), a
 * table gives, per kernel tap and column, the source offset inside a
 * channel plane (-1: padding, a zero).  Every channel shares it, so the
 * packing of a row is a few masked loads per 16 columns: each 16-column
 * vector is classified once as up to two runs (zeros: none), or (a
 * vector over three or more rows, strides above 2) a gather.  A run steps
 * through the plane by the conv's column stride: 1, or 2, whose run is two
 * masked loads of 16 floats and a permute picking the even ones. */
#define VEC 16
typedef enum vec_kind { VEC_RUNS, VEC_RUNS_STEP2, VEC_GATHER } vec_kind;
typedef struct vec_desc {
    int32_t off[2];      /* lane j of run r reads plane[off[r] + step * j] */
    uint16_t mask[2];    /* lanes of each run */
    uint16_t wide[2][2]; /* step 2: the floats run r reads at plane + off[r] and at 16 floats on */
    int32_t kind;
} vec_desc;

struct conv_table {
    int64_t taps, in_size, nvec; /* nvec: 16-column vectors covering the padded block */
    int32_t *idx;                /* [taps][nvec * VEC] */
    vec_desc *desc;              /* [taps][nvec] */
};

static int64_t conv_taps(const nn_gemm_conv *cv) {
    int64_t t = 1;
    for (int d = 0; d < cv->nsp; d++)
        t *= cv->kernel[d];
    return t;
}

/* Scratch floats for a table over `ncp` columns. */
static size_t conv_table_floats(const nn_gemm_conv *cv, int64_t ncp) {
    int64_t taps = conv_taps(cv), nvec = ncp / VEC;
    return (size_t)(taps * ncp + taps * nvec * (int64_t)(sizeof(vec_desc) / sizeof(float)) + (cv->nsp + 1) * ncp);
}

/* The runs of one vector's indices, each lane `step` floats on from the
 * last (1 or 2). */
static void classify(const int32_t *idx, int step, vec_desc *d) {
    int runs = 0;
    *d = (vec_desc){.kind = step == 2 ? VEC_RUNS_STEP2 : VEC_RUNS}; /* unused runs: empty masks, offset 0 */
    for (int j = 0; j < VEC;) {
        if (idx[j] < 0) {
            j++;
            continue;
        }
        if (runs == 2) {
            d->kind = VEC_GATHER;
            return;
        }
        int start = j;
        while (j + 1 < VEC && idx[j + 1] == idx[j] + step)
            j++;
        j++;
        d->off[runs] = idx[start] - step * start;
        d->mask[runs] = (uint16_t)(((1u << j) - 1) & ~((1u << start) - 1));
        for (int lane = start; step == 2 && lane < j; lane++) /* it reads float 2 * lane of the 32 at off */
            d->wide[runs][lane / 8] |= (uint16_t)(1u << (2 * lane % VEC));
        runs++;
    }
}

/* The table for columns [n0, n0 + nc), padded with zero columns to ncp (a
 * multiple of VEC); `mem` holds conv_table_floats(cv, ncp) floats.  Plane
 * offsets fit int32 (conv checks the plane size). */
static void conv_table_build(const nn_gemm_conv *cv, int64_t n0, int64_t nc, int64_t ncp, float *mem, conv_table *t) {
    int nsp = cv->nsp;
    t->taps = conv_taps(cv);
    t->nvec = ncp / VEC;
    t->in_size = 1;
    for (int d = 0; d < nsp; d++)
        t->in_size *= cv->in[d];
    t->idx = (int32_t *)mem;
    t->desc = (vec_desc *)(t->idx + t->taps * ncp);
    /* per column: the input index of tap 0 along each dim, and its plane offset */
    int32_t *first = (int32_t *)(t->desc + t->taps * t->nvec), *base = first + nsp * ncp;
    int64_t pos[NN_GEMM_CONV_DIMS], rest = n0;
    for (int d = nsp - 1; d >= 0; d--) {
        pos[d] = rest % cv->out[d];
        rest /= cv->out[d];
    }
    for (int64_t j = 0; j < ncp; j++) {
        int64_t at = 0;
        for (int d = 0; d < nsp; d++) {
            int64_t i = pos[d] * cv->stride[d] - cv->pad[d];
            first[d * ncp + j] = j < nc ? (int32_t)i : INT32_MIN / 2; /* padding columns: far outside */
            at = at * cv->in[d] + i;
        }
        base[j] = j < nc ? (int32_t)at : 0;
        for (int d = nsp - 1; d >= 0 && j < nc; d--) {
            if (++pos[d] < cv->out[d]) break;
            pos[d] = 0;
        }
    }
    /* wider strides never form runs: every vector gathers */
    int step = (int)cv->stride[nsp - 1];
    for (int64_t tap = 0; tap < t->taps; tap++) {
        int32_t k[NN_GEMM_CONV_DIMS], shift = 0;
        int64_t r = tap;
        for (int d = nsp - 1; d >= 0; d--) {
            k[d] = (int32_t)(r % cv->kernel[d] * cv->dilation[d]);
            r /= cv->kernel[d];
        }
        for (int d = 0; d < nsp; d++)
            shift = shift * (int32_t)cv->in[d] + k[d];
        int32_t *restrict idx = t->idx + tap * ncp;
        for (int64_t j = 0; j < ncp; j++)
            idx[j] = base[j] + shift;
        for (int d = 0; d < nsp; d++) { /* outside along d: all bits set, -1 */
            const int32_t *restrict f = first + d * ncp;
            uint32_t kd = (uint32_t)k[d], in = (uint32_t)cv->in[d];
            for (int64_t j = 0; j < ncp; j++)
                idx[j] |= -(int32_t)((uint32_t)f[j] + kd >= in);
        }
        vec_desc *desc = t->desc + tap * t->nvec;
        for (int64_t v = 0; v < t->nvec; v++) {
            if (step > 2)
                desc[v] = (vec_desc){.kind = VEC_GATHER};
            else
                classify(idx + v * VEC, step, &desc[v]);
        }
    }
}

/* B's prologue (nn_gemm.b_scale) for a block, offset to the block's first
 * row; NULL where there is none. */
struct b_prologue {
    const float *scale, *shift;
    bool relu;
};

static inline float prologue1(const b_prologue *pr, int64_t p, float x) {
    float y = x * pr->scale[p] + pr->shift[p];
    return pr->relu && !(y > 0.0f) ? 0.0f : y; /* a NaN becomes 0, like the Relu kernels */
}

/* Rows [0, kc) x columns [0, nc) of a plain row-major B (row stride ld)
 * into NR panels, zero-padded to whole panels, through the prologue pr. */
static inline __attribute__((always_inline)) void pack_plain_body(const float *src, int64_t ld, int64_t kc, int64_t nc,
                                                                  int nr, float *dst, const b_prologue *pr) {
    for (int64_t p = 0; p < kc; p++) {
        const float *s = src + p * ld;
        float *row = dst + p * nr;
        for (int64_t j0 = 0; j0 < nc; j0 += nr, row += kc * nr) {
            int64_t n = min64(nr, nc - j0);
            for (int64_t j = 0; j < n; j++)
                row[j] = pr ? prologue1(pr, p, s[j0 + j]) : s[j0 + j];
            for (int64_t j = n; j < nr; j++)
                row[j] = 0.0f;
        }
    }
}

/* Any panel width: B's (32) and, for a transposed A, A's (14), whose
 * panels are stored by masked vectors of up to 16 of their floats. */
T512 static void pack_plain_avx512(const float *src, int64_t ld, int64_t kc, int64_t nc, int nr, float *dst,
                                   const b_prologue *pr) {
    for (int64_t p = 0; p < kc; p++) {
        const float *s = src + p * ld;
        float *row = dst + p * nr;
        __m512 scale = _mm512_set1_ps(pr ? pr->scale[p] : 1.0f), shift = _mm512_set1_ps(pr ? pr->shift[p] : 0.0f);
        for (int64_t j0 = 0; j0 < nc; j0 += nr, row += kc * nr)
            for (int q = 0; q < nr; q += VEC) {
                int64_t width = min64(VEC, nr - q), left = min64(width, nc - j0 - q);
                __mmask16 m = left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
                __m512 v = _mm512_maskz_loadu_ps(m, s + j0 + q);
                if (pr) {
                    v = _mm512_fmadd_ps(v, scale, shift);
                    if (pr->relu) v = _mm512_max_ps(v, _mm512_setzero_ps()); /* NaN -> 0: max returns its 2nd operand */
                    v = _mm512_maskz_mov_ps(m, v);                           /* the padding stays zero */
                }
                _mm512_mask_storeu_ps(row + q, (__mmask16)((1u << width) - 1), v);
            }
    }
}

T256 static inline __m256 prologue256(__m256 v, __m256 scale, __m256 shift, bool relu) {
    v = _mm256_fmadd_ps(v, scale, shift);
    return relu ? _mm256_max_ps(v, _mm256_setzero_ps()) : v;
}

/* nr = 16: whole panels as two vector copies a row; the last one, partial,
 * through a zeroed row (the compiler's version of the loop was a third of
 * the time of small-M products). */
T256 static void pack_plain_avx2(const float *src, int64_t ld, int64_t kc, int64_t nc, int nr, float *dst,
                                 const b_prologue *pr) {
    if (nr != 16) {
        pack_plain_body(src, ld, kc, nc, nr, dst, pr);
        return;
    }
    int64_t whole = nc / 16 * 16;
    for (int64_t p = 0; p < kc; p++) {
        const float *s = src + p * ld;
        float *row = dst + p * nr;
        __m256 scale = _mm256_set1_ps(pr ? pr->scale[p] : 1.0f), shift = _mm256_set1_ps(pr ? pr->shift[p] : 0.0f);
        for (int64_t j = 0; j < whole; j += 16, row += kc * nr) {
            __m256 lo = _mm256_loadu_ps(s + j), hi = _mm256_loadu_ps(s + j + 8);
            if (pr) {
                lo = prologue256(lo, scale, shift, pr->relu);
                hi = prologue256(hi, scale, shift, pr->relu);
            }
            _mm256_store_ps(row, lo);
            _mm256_store_ps(row + 8, hi);
        }
        if (whole < nc) {
            float last[16] = {0};
            for (int64_t j = 0; j < nc - whole; j++)
                last[j] = pr ? prologue1(pr, p, s[whole + j]) : s[whole + j];
            _mm256_store_ps(row, _mm256_loadu_ps(last));
            _mm256_store_ps(row + 8, _mm256_loadu_ps(last + 8));
        }
    }
}

static void pack_plain_scalar(const float *src, int64_t ld, int64_t kc, int64_t nc, int nr, float *dst,
                              const b_prologue *pr) {
    pack_plain_body(src, ld, kc, nc, nr, dst, pr);
}

/* Rows [p0, p0 + kc) of an implicit im2col matrix into NR panels, one
 * VEC-column vector at a time by `pack_vec`: the vector's descriptor, its
 * input indices (negative: padding, zero), the input plane, where it goes. */
typedef void pack_vec_fn(const vec_desc *dv, const int32_t *idx, const float *plane, float *d);
static inline __attribute__((always_inline)) void pack_conv_rows(const conv_table *t, const float *x, int64_t p0,
                                                                 int64_t kc, int nr, float *dst,
                                                                 pack_vec_fn *const pack_vec) {
    for (int64_t p = p0; p < p0 + kc; p++) {
        int64_t ch = p / t->taps, tap = p - ch * t->taps;
        const float *plane = x + ch * t->in_size;
        const vec_desc *desc = t->desc + tap * t->nvec;
        const int32_t *idx = t->idx + tap * t->nvec * VEC;
        float *row = dst + (p - p0) * nr;
        for (int64_t v = 0; v < t->nvec; v++)
            pack_vec(&desc[v], idx + v * VEC, plane, row + v * VEC / nr * (kc * nr) + v * VEC % nr);
    }
}

static inline __attribute__((always_inline)) void pack_vec_scalar(const vec_desc *dv, const int32_t *idx,
                                                                  const float *plane, float *d) {
    (void)dv;
    for (int j = 0; j < VEC; j++)
        d[j] = idx[j] >= 0 ? plane[idx[j]] : 0.0f;
}

static inline __attribute__((always_inline)) T512 void pack_vec_avx512(const vec_desc *dv, const int32_t *idx,
                                                                       const float *plane, float *d) {
    __m512 val;
    if (dv->kind == VEC_GATHER) {
        __m512i vi = _mm512_loadu_si512(idx);
        __mmask16 ok = _mm512_cmpge_epi32_mask(vi, _mm512_setzero_si512());
        val = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), ok, vi, plane, 4);
    } else if (dv->kind == VEC_RUNS_STEP2) {
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        val = _mm512_setzero_ps();
        for (int r = 0; r < 2; r++) {
            __m512 lo = _mm512_maskz_loadu_ps(dv->wide[r][0], plane + dv->off[r]);
            __m512 hi = _mm512_maskz_loadu_ps(dv->wide[r][1], plane + dv->off[r] + VEC);
            val = _mm512_mask_mov_ps(val, dv->mask[r], _mm512_permutex2var_ps(lo, even, hi));
        }
    } else { /* zeros and one run are two runs with empty masks: no branch to mispredict */
        val = _mm512_maskz_loadu_ps(dv->mask[0], plane + dv->off[0]);
        val = _mm512_mask_loadu_ps(val, dv->mask[1], plane + dv->off[1]);
    }
    _mm512_store_ps(d, val);
}

/* Lanes whose bit is set in `bits` (8 bits), as an AVX2 lane mask. */
static inline __attribute__((always_inline)) T256 __m256i lane_mask8(unsigned bits) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), bit), bit);
}

/* pack_vec_avx512 in two halves of 8 lanes: runs as masked loads (they
 * never touch masked-out lanes, so a run's vector may start before the
 * plane), the rest gathered.  The compiler's own loop went one float and
 * one branch at a time; against it, in-process medians on Zen 3 with 2
 * threads: stride-1 3x3 and 5x5 convs -5% to -22%, stride-2 ones (all
 * gathers) -4% to -7%. */
static inline __attribute__((always_inline)) T256 void pack_vec_avx2(const vec_desc *dv, const int32_t *idx,
                                                                     const float *plane, float *d) {
    for (int h = 0; h < VEC; h += 8) {
        __m256 val;
        if (dv->kind != VEC_RUNS) { /* step-2 runs too: no AVX2 permute across 16 floats */
            __m256i vi = _mm256_loadu_si256((const __m256i *)(idx + h));
            __m256 ok = _mm256_castsi256_ps(_mm256_cmpgt_epi32(vi, _mm256_set1_epi32(-1)));
            val = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), plane, vi, ok, 4);
        } else {
            __m256i m0 = lane_mask8((dv->mask[0] >> h) & 0xffu), m1 = lane_mask8((dv->mask[1] >> h) & 0xffu);
            val = _mm256_maskload_ps(plane + dv->off[0] + h, m0);
            val = _mm256_blendv_ps(val, _mm256_maskload_ps(plane + dv->off[1] + h, m1), _mm256_castsi256_ps(m1));
        }
        _mm256_store_ps(d + h, val);
    }
}

#define PACK_CONV_FOR(SUFFIX, TARGET)                                                                                  \
    TARGET static void pack_conv_##SUFFIX(const conv_table *t, const float *x, int64_t p0, int64_t kc, int nr,         \
                                          float *dst) {                                                                \
        pack_conv_rows(t, x, p0, kc, nr, dst, pack_vec_##SUFFIX);                                                      \
    }
PACK_CONV_FOR(avx512, T512)
PACK_CONV_FOR(avx2, T256)
PACK_CONV_FOR(scalar, )

/* Indexed by nn_isa: the family isa.h chose is the one that runs. */
static const gemm_kernel kernels[NN_ISA_COUNT] = {
    [NN_ISA_AVX512] = {.name = "avx512",
                       .mr = V16_MR,
                       .nr = 32,
                       .mc = 14 * 24,
                       .nc = 512,
                       .b_in_place = true,
                       .tile = tile_avx512,
                       .act = act_avx512,
                       .dot = dot_avx512,
                       .axpy = axpy_avx512,
                       .pack_conv = pack_conv_avx512,
                       .pack_plain = pack_plain_avx512},
    [NN_ISA_AVX2] = {.name = "avx2",
                     .mr = V8_MR,
                     .nr = 16,
                     .mc = 6 * 24,
                     .nc = 256,
                     .tile = tile_avx2,
                     .act = act_avx2,
                     .dot = dot_avx2,
                     .axpy = axpy_avx2,
                     .pack_conv = pack_conv_avx2,
                     .pack_plain = pack_plain_avx2},
    [NN_ISA_SCALAR] = {.name = "scalar",
                       .mr = SC_MR,
                       .nr = SC_NR,
                       .mc = 64,
                       .nc = 256,
                       .tile = tile_scalar,
                       .act = act_scalar,
                       .dot = dot_scalar,
                       .axpy = axpy_scalar,
                       .pack_conv = pack_conv_scalar,
                       .pack_plain = pack_plain_scalar},
};

static int kernel_index(void) { return (int)nn_isa_active(); }

const char *nn_gemm_kernel_name(void) { return nn_isa_name(nn_isa_active()); }

bool nn_gemm_use_kernel(const char *name) {
    nn_isa isa;
    return nn_isa_parse(name, &isa) && nn_isa_select(isa);
}

void nn_gemm_act(float *y, int64_t n, nn_act act, float alpha, float beta) {
    kernels[kernel_index()].act(y, n, act, alpha, beta);
}

/* ---- packing */

/* B rows [p0, p0 + kc) x columns [n0, n0 + nc) into NR panels at dst (the
 * last panel zero-padded).  A conv B needs the block's table. */
static void pack_b_block(const gemm_kernel *kd, const nn_gemm *g, const float *b, const conv_table *table, int64_t p0,
                         int64_t kc, int64_t n0, int64_t nc, float *dst) {
    int nr = kd->nr;
    int64_t panel = kc * nr, ncp = nn_round_up(nc, nr);
    if (table) {
        kd->pack_conv(table, b, p0, kc, nr, dst);
    } else if (g->trans_b) {
        for (int64_t j = 0; j < ncp; j++) {
            float *d = dst + j / nr * panel + j % nr;
            const float *src = b + (n0 + j) * g->ldb + p0;
            if (j < nc)
                for (int64_t p = 0; p < kc; p++)
                    d[p * nr] = src[p];
            else
                for (int64_t p = 0; p < kc; p++)
                    d[p * nr] = 0.0f;
        }
    } else {
        b_prologue pr = {0};
        if (g->b_scale) pr = (b_prologue){g->b_scale + p0, g->b_shift + p0, g->b_act == NN_ACT_RELU};
        kd->pack_plain(b + p0 * g->ldb + n0, g->ldb, kc, nc, nr, dst, g->b_scale ? &pr : NULL);
    }
}

/* A rows [m0, m0 + mc) x K [p0, p0 + kc), scaled by alpha, into MR panels. */
static void pack_a_block(const gemm_kernel *kd, const nn_gemm *g, const float *a, int64_t p0, int64_t kc, int64_t m0,
                         int64_t mc, float *dst) {
    int mr = kd->mr;
    int64_t mcp = nn_round_up(mc, mr);
    if (g->trans_a && g->alpha == 1.0f) { /* A's storage is B's layout: a K row holds a row of each panel */
        kd->pack_plain(a + p0 * g->lda + m0, g->lda, kc, mc, mr, dst, NULL);
        return;
    }
    for (int64_t i = 0; i < mcp; i++) {
        float *d = dst + i / mr * mr * kc + i % mr;
        if (i >= mc) {
            for (int64_t p = 0; p < kc; p++)
                d[p * mr] = 0.0f;
        } else if (g->trans_a) {
            const float *src = a + p0 * g->lda + m0 + i;
            for (int64_t p = 0; p < kc; p++)
                d[p * mr] = g->alpha * src[p * g->lda];
        } else {
            const float *src = a + (m0 + i) * g->lda + p0;
            for (int64_t p = 0; p < kc; p++)
                d[p * mr] = g->alpha * src[p];
        }
    }
}

size_t nn_gemm_pack_a_floats(const nn_gemm *g) {
    const gemm_kernel *kd = &kernels[kernel_index()];
    return (size_t)(batch_count(g, 1) * nn_round_up(g->m, kd->mr) * g->k);
}

size_t nn_gemm_pack_b_floats(const nn_gemm *g) {
    const gemm_kernel *kd = &kernels[kernel_index()];
    return (size_t)(nn_round_up(g->n, kd->nr) * g->k);
}

/* Packed layouts: K block kb starts at kb * kcs * (rows rounded to the panel
 * height); inside it panel q starts at q * panel height * kc.  So a block of
 * panels starting at row r0 is contiguous: r0 * kc floats into the K block. */
/* The header packing `g`'s A (or B) gives with the current kernel. */
static nn_gemm_packed packed_a_layout(const nn_gemm *g) {
    int ki = kernel_index();
    int64_t mp = nn_round_up(g->m, kernels[ki].mr);
    return (nn_gemm_packed){
        .kernel = ki, .rows = g->m, .k = g->k, .count = batch_count(g, 1), .stride = (size_t)(mp * g->k)};
}

static nn_gemm_packed packed_b_layout(const nn_gemm *g) {
    int ki = kernel_index();
    int64_t np = nn_round_up(g->n, kernels[ki].nr);
    return (nn_gemm_packed){.kernel = ki, .rows = g->n, .k = g->k, .count = 1, .stride = (size_t)(np * g->k)};
}

void nn_gemm_pack_a(const nn_gemm *g, float *mem, nn_gemm_packed *out) {
    const gemm_kernel *kd = &kernels[kernel_index()];
    int64_t mp = nn_round_up(g->m, kd->mr);
    kblocks kb = k_blocks(g->k);
    *out = packed_a_layout(g);
    out->data = mem;
    for (int64_t bi = 0; bi < out->count; bi++)
        for (int64_t p0 = 0; p0 < g->k; p0 += kb.size)
            pack_a_block(kd, g, g->a + bi * g->stride_a[1], p0, min64(kb.size, g->k - p0), 0, g->m,
                         mem + bi * out->stride + p0 * mp);
}

void nn_gemm_pack_b(const nn_gemm *g, float *mem, nn_gemm_packed *out) {
    const gemm_kernel *kd = &kernels[kernel_index()];
    int64_t np = nn_round_up(g->n, kd->nr);
    kblocks kb = k_blocks(g->k);
    *out = packed_b_layout(g);
    out->data = mem;
    for (int64_t p0 = 0; p0 < g->k; p0 += kb.size)
        pack_b_block(kd, g, g->b, NULL, p0, min64(kb.size, g->k - p0), 0, g->n, mem + p0 * np);
}

_Static_assert(sizeof(nn_gemm_packed) <= NN_GEMM_BLOCK_DATA, "packed header must fit before the data");

size_t nn_gemm_pack_a_block_bytes(const nn_gemm *g) {
    return NN_GEMM_BLOCK_DATA + sizeof(float) * nn_gemm_pack_a_floats(g);
}
size_t nn_gemm_pack_b_block_bytes(const nn_gemm *g) {
    return NN_GEMM_BLOCK_DATA + sizeof(float) * nn_gemm_pack_b_floats(g);
}

static void store_block_header(void *block, nn_gemm_packed p) {
    /* Field by field into zeroed bytes: the padding after `kernel` would carry
     * stack garbage into the plan cache.  `data` stays NULL: its place is
     * implied, the block may move. */
    nn_gemm_packed header;
    memset(&header, 0, sizeof header);
    header.kernel = p.kernel;
    header.rows = p.rows;
    header.k = p.k;
    header.count = p.count;
    header.stride = p.stride;
    memcpy(block, &header, sizeof header);
}

void nn_gemm_pack_a_block(const nn_gemm *g, void *block) {
    nn_gemm_packed p;
    nn_gemm_pack_a(g, (float *)((char *)block + NN_GEMM_BLOCK_DATA), &p);
    store_block_header(block, p);
}

void nn_gemm_pack_b_block(const nn_gemm *g, void *block) {
    nn_gemm_packed p;
    nn_gemm_pack_b(g, (float *)((char *)block + NN_GEMM_BLOCK_DATA), &p);
    store_block_header(block, p);
}

/* A block read back from the plan cache is untrusted: its header must be
 * exactly what packing would give now, and its size must hold the floats. */
static bool block_fits(nn_gemm_packed want, const void *block, size_t size) {
    nn_gemm_packed have;
    if (size < NN_GEMM_BLOCK_DATA) return false;
    memcpy(&have, block, sizeof have);
    return have.kernel == want.kernel && have.rows == want.rows && have.k == want.k && have.count == want.count &&
           have.stride == want.stride && (size - NN_GEMM_BLOCK_DATA) / sizeof(float) >= want.count * want.stride;
}

bool nn_gemm_block_fits_a(const nn_gemm *g, const void *block, size_t size) {
    return block_fits(packed_a_layout(g), block, size);
}
bool nn_gemm_block_fits_b(const nn_gemm *g, const void *block, size_t size) {
    return block_fits(packed_b_layout(g), block, size);
}

nn_gemm_packed nn_gemm_block_view(const void *block) {
    nn_gemm_packed p;
    memcpy(&p, block, sizeof p);
    p.data = (float *)((char *)block + NN_GEMM_BLOCK_DATA);
    return p;
}

/* ---- partition into tasks: (batch) x (M ranges) x (N ranges) */
typedef struct plan {
    const gemm_kernel *kd;
    bool a_packed, b_packed;
    /* Each thread packs the B it needs, even where an M split makes two
     * threads pack the same columns.  Packing B once into a shared buffer,
     * then splitting M, lost: on Zen 3 (AVX2, 2 threads) by up to 39%
     * (M = 32..256, N = 49..196, K = 384..3000: one thread packs a K block,
     * the other waits at the barrier); on Zen 5 (AVX-512) by 0-5% while the
     * VM ran smoothly and 1.3-1.45x while it took a vCPU away now and then
     * (512x49x4608, 256x196x1024; DenseNet-201 and GoogLeNet at batch 1
     * took 0.91x the time without it). */
    bool b_in_place;                        /* the tiles read a plain B where it lies, unpacked */
    int64_t mparts, nparts, mrange, nrange; /* ranges: multiples of mr / nr */
    int64_t tasks;
} plan;

/* Whether the tiles read a plain B unpacked.  Packing pays for itself when
 * each packed float is used by many rows of A, or when B comes from memory:
 * a tile reads each of its K rows from another page, which the prefetchers
 * do not follow.  A small B still in cache (a pointwise conv at batch 1,
 * right after the layer that wrote it) used by few rows is cheaper to read
 * where it lies, while its K rows are few (one K block).  Measured with 2
 * threads: pointwise-conv shapes with M <= 192 and B in cache gain 2-30%
 * (M = 32, K = 192, N = 784: 30%); M >= 1024 loses 3-7%; B out of cache
 * (MobileNetV2 at batch 64) loses 12%, and K = 752 (DenseNet's 14x14
 * bottlenecks) 14%.
 * Up to 960 rows gain too while B is small and its rows short (N <= 256, a
 * 14x14 or 7x7 plane: a tile's K rows lie close together): the pointwise
 * convs of MobileNetV2 and EfficientNet-B0 on those planes took 0.84-0.94x
 * the time (in-process on Zen 5, batch 1).  With N = 784 the same widths
 * lost 8-20% (EfficientNet's 240 rows, ResNet-50's 512), with B of 1-4 MB
 * up to 59% (DenseNet-201, whose B was not in cache), and 1024 rows lost
 * 5-7% at N = 196 (ResNet-50).
 * At most two tiles of rows read B in place whatever its size, a packed
 * float serving no more than two tiles: MobileNetV2's and EfficientNet-B0's
 * projections to 16 and 24 channels on 112x112 and 56x56 planes (B of
 * 1.2-1.8 MB) took 0.76-0.85x the time (in-process on Zen 5, batch 1, one
 * and two threads). */
#define B_IN_PLACE_MAX_ROWS        192
#define B_IN_PLACE_MAX_BYTES       (1 << 20)
#define B_IN_PLACE_SHORT_MAX_ROWS  960
#define B_IN_PLACE_SHORT_MAX_COLS  256
#define B_IN_PLACE_SHORT_MAX_BYTES (256 << 10)
static bool reads_b_in_place(const nn_gemm *g, const gemm_kernel *kd) {
    double b_bytes =
        (double)sizeof(float) * (double)g->k * (double)g->n * (double)batch_count(g, 0) * (double)batch_count(g, 1);
    bool few_rows = g->m <= B_IN_PLACE_MAX_ROWS && b_bytes <= B_IN_PLACE_MAX_BYTES;
    bool short_rows =
        g->m <= B_IN_PLACE_SHORT_MAX_ROWS && g->n <= B_IN_PLACE_SHORT_MAX_COLS && b_bytes <= B_IN_PLACE_SHORT_MAX_BYTES;
    bool two_tiles = g->m <= 2 * kd->mr;
    return kd->b_in_place && g->b && !g->trans_b && !g->b_conv && !g->b_scale && g->k <= KC_MAX &&
           (few_rows || short_rows || two_tiles);
}

static bool packed_ok(const nn_gemm_packed *p, int ki, int64_t rows, int64_t k) {
    return p && p->kernel == ki && p->rows == rows && p->k == k;
}

/* Choose the split that minimizes the estimated makespan, in multiply-adds:
 * rounds of `threads` tasks, a task costing its padded multiply-adds, a
 * fixed overhead, and per float of A and B it reads: streaming it through
 * the caches, or packing it where it is not pre-packed (so an M split
 * repacks B, an N split an A).  Tasks are dealt to the threads in turn
 * (nn_gemm_run says why not on demand); a third of a task is added with
 * several threads, for one that starts or finishes late (the OS took its
 * core for a while), which favours more, smaller tasks while they are cheap. */
static plan make_plan(const nn_gemm *g, int threads) {
    int ki = kernel_index();
    plan pl = {.kd = &kernels[ki]};
    pl.a_packed = packed_ok(g->a_packed, ki, g->m, g->k) && g->a_packed->count >= batch_count(g, 1);
    pl.b_packed = packed_ok(g->b_packed, ki, g->n, g->k);
    pl.b_in_place = !pl.b_packed && reads_b_in_place(g, pl.kd);
    int64_t mr = pl.kd->mr, nr = pl.kd->nr, bt = batch_count(g, 0) * batch_count(g, 1);
    int64_t mt = (g->m + mr - 1) / mr, nt = (g->n + nr - 1) / nr, k = g->k > 0 ? g->k : 1;
    bool b_ready = pl.b_packed || pl.b_in_place;
    double best = -1;
    for (int64_t sm = 1; sm <= mt && sm <= 16; sm++)
        for (int64_t sn = 1; sn <= nt && sn <= 64; sn++) {
            int64_t mrange = (mt + sm - 1) / sm * mr, nrange = (nt + sn - 1) / sn * nr;
            int64_t msplit = (g->m + mrange - 1) / mrange, nsplit = (g->n + nrange - 1) / nrange;
            if (msplit != sm || nsplit != sn) continue; /* same as a smaller split */
            int64_t tasks = bt * sm * sn;
            double task = (double)mrange * (double)nrange * (double)k + (b_ready ? 4.0 : 16.0) * nrange * k +
                          (pl.a_packed ? 4.0 : 16.0) * mrange * k + 8000.0;
            double rounds = (double)((tasks + threads - 1) / threads) + (threads > 1 ? 0.3 : 0.0);
            double cost = rounds * task;
            if (best < 0 || cost < best * 0.97) {
                best = cost;
                pl.mparts = sm;
                pl.nparts = sn;
                pl.mrange = mrange;
                pl.nrange = nrange;
                pl.tasks = tasks;
            }
        }
    return pl;
}

/* Per-thread packing buffers: a KC x NC slab of B and a KC x MC block of A,
 * where these are not pre-packed, and a conv B's table.  Independent of the
 * split, so that a workspace sized before A was packed still fits. */
static int64_t block_cols(const nn_gemm *g, const gemm_kernel *kd) { return min64(nn_round_up(g->n, kd->nr), kd->nc); }
static int64_t block_rows(const nn_gemm *g, const gemm_kernel *kd) { return min64(nn_round_up(g->m, kd->mr), kd->mc); }

/* Whether each thread packs B into its own buffer. */
static bool b_buffered(const plan *pl) { return !pl->b_packed && !pl->b_in_place; }

static size_t thread_scratch_floats(const nn_gemm *g, const plan *pl) {
    kblocks kb = k_blocks(g->k);
    const gemm_kernel *kd = pl->kd;
    size_t f = b_buffered(pl) ? (size_t)(kb.size * block_cols(g, kd)) : 0;
    if (!pl->a_packed) f += (size_t)(kb.size * block_rows(g, kd));
    f = (f + 15) / 16 * 16;
    if (g->b_conv) f += (conv_table_floats(g->b_conv, block_cols(g, kd)) + 15) / 16 * 16;
    return f; /* each thread's share stays 64-byte aligned */
}

size_t nn_gemm_workspace(const nn_gemm *g, int threads) {
    if (threads < 1) threads = 1;
    plan pl = make_plan(g, threads);
    return sizeof(float) * thread_scratch_floats(g, &pl) * (size_t)threads + 64;
}

/* Where a thread's scratch keeps a conv table (after its B and A buffers). */
static float *table_scratch(const nn_gemm *g, const plan *pl, float *scratch) {
    kblocks kb = k_blocks(g->k);
    float *t = scratch + (b_buffered(pl) ? kb.size * block_cols(g, pl->kd) : 0) +
               (pl->a_packed ? 0 : kb.size * block_rows(g, pl->kd));
    return (float *)(((uintptr_t)t + 63) & ~(uintptr_t)63);
}

/* ---- running */

/* Pre-packed A of inner batch entry bi: K block p0 from row `row` (a panel
 * boundary) on; the block's panels are its kc floats deep. */
static const float *packed_a_at(const nn_gemm *g, int mr, int64_t bi, int64_t p0, int64_t row) {
    int64_t kc = min64(k_blocks(g->k).size, g->k - p0);
    return g->a_packed->data + (size_t)bi * g->a_packed->stride + p0 * nn_round_up(g->m, mr) + row * kc;
}

/* One task: C rows [m0, m1) x columns [n0, n1) of batch entry (bo, bi). */
static void run_task(const nn_gemm *g, const plan *pl, int64_t bo, int64_t bi, int64_t m0, int64_t m1, int64_t n0,
                     int64_t n1, float *scratch) {
    const gemm_kernel *kd = pl->kd;
    int mr = kd->mr, nr = kd->nr;
    kblocks kb = k_blocks(g->k);
    /* a or b is NULL when the operand comes pre-packed (no offset on a null pointer) */
    const float *a = g->a ? g->a + bo * g->stride_a[0] + bi * g->stride_a[1] : NULL;
    const float *b = g->b ? g->b + bo * g->stride_b[0] + bi * g->stride_b[1] : NULL;
    int64_t coff = bo * g->stride_c[0] + bi * g->stride_c[1];
    float *c = g->c + coff;
    const float *res = g->residual ? g->residual + coff : NULL;
    const float *bias =
        g->bias_kind != NN_GEMM_BIAS_NONE && g->bias ? g->bias + bo * g->stride_bias[0] + bi * g->stride_bias[1] : NULL;
    bool post_act = !act_in_tile(g->act);
    float *bbuf = scratch, *abuf = bbuf + (b_buffered(pl) ? kb.size * block_cols(g, kd) : 0);
    float *tbuf = table_scratch(g, pl, scratch);
    conv_table table;
    tile_args t = {.ldb = pl->b_in_place ? g->ldb : nr,
                   .ldc = g->ldc,
                   .ldr = g->ldr,
                   .trans_c = g->trans_c,
                   .act = post_act ? NN_ACT_NONE : g->act,
                   .alpha = g->act_alpha,
                   .beta = g->act_beta};
    for (int64_t nb = n0; nb < n1; nb += kd->nc) {
        int64_t nc = min64(kd->nc, n1 - nb);
        if (g->b_conv) conv_table_build(g->b_conv, nb, nc, nn_round_up(nc, nr), tbuf, &table);
        int64_t p0 = 0;
        do {
            int64_t kc = min64(kb.size, g->k - p0);
            const float *bblk = bbuf;
            if (pl->b_packed)
                bblk = g->b_packed->data + p0 * nn_round_up(g->n, nr) + nb * kc;
            else if (pl->b_in_place)
                bblk = b + p0 * g->ldb + nb;
            else
                pack_b_block(kd, g, b, g->b_conv ? &table : NULL, p0, kc, nb, nc, bbuf);
            t.kc = kc;
            t.load_c = g->accumulate || p0 > 0;
            t.last = p0 + kc >= g->k;
            for (int64_t mb = m0; mb < m1; mb += kd->mc) {
                int64_t mc = min64(kd->mc, m1 - mb);
                const float *ablk = abuf;
                if (pl->a_packed)
                    ablk = packed_a_at(g, mr, bi, p0, mb);
                else
                    pack_a_block(kd, g, a, p0, kc, mb, mc, abuf);
                for (int64_t ir = 0; ir < mc; ir += mr) {
                    /* Pre-packed weights come from memory once per run, and at a
                     * few tiles of columns (N = 49 at ResNet-50's 7x7 stage)
                     * the processor's own prefetch left the tile waiting on
                     * them: the next panel (the task's rows are consecutive
                     * panels, then the next K block's) is pulled in ahead. */
                    const float *next_a = ablk + ir * kc; /* none, or packed here: already in cache */
                    if (pl->a_packed && mb + ir + mr < m1)
                        next_a = ablk + (ir + mr) * kc;
                    else if (pl->a_packed && p0 + kc < g->k)
                        next_a = packed_a_at(g, mr, bi, p0 + kc, m0);
                    for (int64_t jr = 0; jr < nc; jr += nr) {
                        int64_t row = mb + ir, col = nb + jr;
                        t.a = ablk + ir * kc;
                        t.next_a = next_a;
                        t.b = pl->b_in_place ? bblk + jr : bblk + jr * kc;
                        /* while the first tile of rows streams the block's panels */
                        t.next_b = pl->b_packed && ir == 0 && mb == m0 && jr + nr < nc ? t.b + nr * kc : t.b;
                        int64_t c_at = g->trans_c ? col * g->ldc + row : row * g->ldc + col;
                        int64_t r_at = g->trans_c ? col * g->ldr + row : row * g->ldr + col;
                        t.c = c + c_at;
                        t.mr = (int)min64(mr, mc - ir);
                        t.nr = (int)min64(nr, nc - jr);
                        t.bias_row = bias && g->bias_kind == NN_GEMM_BIAS_ROW ? bias + row : NULL;
                        t.bias_col = bias && g->bias_kind == NN_GEMM_BIAS_COL ? bias + col : NULL;
                        t.res = res ? res + r_at : NULL;
                        kd->tile(&t);
                        /* a row of C (a column of a transposed one) at a time */
                        int lines = g->trans_c ? t.nr : t.mr, len = g->trans_c ? t.mr : t.nr;
                        for (int i = 0; t.last && post_act && i < lines; i++)
                            kd->act(t.c + i * g->ldc, len, g->act, g->act_alpha, g->act_beta);
                    }
                }
            }
            p0 += kc;
        } while (p0 < g->k);
    }
}

/* Matrix-vector products (one output row or column): no packing, the
 * operand is streamed once with the kernel's dot / axpy.  Output element e
 * of batch entry (bo, bi) sits at C offset e * step. */
static bool gemv_shape(const nn_gemm *g) {
    /* an operand only packed, or B through a prologue: the panel path */
    if (g->b_conv || g->trans_a || g->trans_c || !g->a || !g->b || g->b_scale) return false;
    if (g->n == 1) return g->trans_b || g->ldb == 1 || g->k <= 1;
    return g->m == 1;
}

static void gemv(const nn_gemm *g, int threads) {
    const gemm_kernel *kd = &kernels[kernel_index()];
    bool cols = g->n == 1; /* one column: C[i] = A[i,:] . b */
    int64_t len = cols ? g->m : g->n, step = cols ? g->ldc : 1, bt = batch_count(g, 0) * batch_count(g, 1);
    for (int64_t e = 0; e < bt; e++) {
        int64_t bo = e / batch_count(g, 1), bi = e % batch_count(g, 1);
        const float *a = g->a + bo * g->stride_a[0] + bi * g->stride_a[1];
        const float *b = g->b + bo * g->stride_b[0] + bi * g->stride_b[1];
        int64_t coff = bo * g->stride_c[0] + bi * g->stride_c[1];
        float *c = g->c + coff;
        const float *res = g->residual ? g->residual + coff : NULL;
        const float *bias = g->bias_kind != NN_GEMM_BIAS_NONE && g->bias
                                ? g->bias + bo * g->stride_bias[0] + bi * g->stride_bias[1]
                                : NULL;
        bool axpy = !cols && !g->trans_b;
#pragma omp parallel num_threads(threads) if (threads > 1 && len * g->k > NN_PAR_MIN)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            int64_t lo = len * id / nt, hi = len * (id + 1) / nt;
            if (axpy) { /* C[0, j] = sum_p a[p] B[p, j]: rows of B, contiguous */
                for (int64_t j = lo; j < hi; j++)
                    c[j] = g->accumulate ? c[j] : 0.0f;
                for (int64_t p = 0; p < g->k && hi > lo; p++)
                    kd->axpy(c + lo, g->alpha * a[p], b + p * g->ldb + lo, hi - lo);
            }
            for (int64_t e2 = lo; e2 < hi; e2++) {
                float *y = c + e2 * step, v;
                if (axpy)
                    v = *y;
                else {
                    v = g->alpha * (cols ? kd->dot(a + e2 * g->lda, b, g->k) : kd->dot(a, b + e2 * g->ldb, g->k));
                    if (g->accumulate) v += *y;
                }
                if (bias) v += bias[g->bias_kind == NN_GEMM_BIAS_ROW ? (cols ? e2 : 0) : (cols ? 0 : e2)];
                if (res) v += res[cols ? e2 * g->ldr : e2];
                *y = v;
            }
            if (step == 1)
                kd->act(c + lo, hi - lo, g->act, g->act_alpha, g->act_beta);
            else
                for (int64_t e2 = lo; e2 < hi; e2++)
                    kd->act(c + e2 * step, 1, g->act, g->act_alpha, g->act_beta);
        }
    }
}

/* The tasks are dealt round-robin, not handed out on demand: on a 2-core
 * Zen 5 VM a hand-out cost about 170 ns (an OpenMP loop of 64 one-iteration
 * chunks on 2 threads: 11 us dynamic, 0.6 us static), 2-3 us for a product
 * of 10 to 30 tasks.  Dealt, MobileNetV2 at batch 1 took 0.93x the time
 * (EfficientNet-B0 0.96x, GoogLeNet and DenseNet-201 0.97x), in-process;
 * batch 64 did not change. */
bool nn_gemm_run(const nn_gemm *g, void *workspace, size_t workspace_size, int threads) {
    if (threads < 1) threads = 1;
    if (g->m <= 0 || g->n <= 0) return true;
    if (g->b_scale && (!g->b_shift || !g->b || g->trans_b || g->b_packed || g->b_conv ||
                       (g->b_act != NN_ACT_NONE && g->b_act != NN_ACT_RELU)))
        return false;
    if (gemv_shape(g)) {
        gemv(g, threads);
        return true;
    }
    plan pl = make_plan(g, threads);
    if ((!pl.a_packed && !g->a) || (!pl.b_packed && !g->b)) return false; /* packed for another kernel */
    size_t per_thread = thread_scratch_floats(g, &pl);
    if (workspace_size < sizeof(float) * per_thread * (size_t)threads + 64) return false;
    float *base = (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    int64_t bin = batch_count(g, 1), per_batch = pl.mparts * pl.nparts;
    double flops = (double)g->m * (double)g->n * (double)g->k * (double)(batch_count(g, 0) * bin);
#pragma omp parallel for num_threads(threads) schedule(static, 1) if (threads > 1 && pl.tasks > 1 && flops > 1e5)
    for (int64_t task = 0; task < pl.tasks; task++) {
        int64_t e = task / per_batch, r = task % per_batch;
        int64_t m0 = r % pl.mparts * pl.mrange, n0 = r / pl.mparts * pl.nrange;
        run_task(g, &pl, e / bin, e % bin, m0, min64(g->m, m0 + pl.mrange), n0, min64(g->n, n0 + pl.nrange),
                 base + per_thread * (size_t)omp_get_thread_num());
    }
    return true;
}
