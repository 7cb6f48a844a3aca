/* The AVX2 and AVX-512 GEMM kernels (gemm_kernel.h), each compiled for its
 * ISA with a target attribute, so the build needs no -m flags; a non-x86
 * target compiles none of this. */
#include "gemm_kernel.h"

#include "act_x86.h"

#if NN_HAVE_X86
#include <immintrin.h>

#include "avx2.h"
#include "gemm_x86_store.h"

/* ---- AVX2 kernel: 6 x 16 */
#define V8_MR 6

/* n lines of 8 floats in buf (8 apart) through an activation other than
 * ReLU and Clip, line l stored at c + l * ldc under the lane mask m. */
T256 static __attribute__((noinline)) void act_store256(const float *buf, int n, float *c, int64_t ldc, __m256i m,
                                                        nn_act act, float alpha, float beta) {
    switch (act) {
#define LINES(A)                                                                                                       \
    case A:                                                                                                            \
        for (int l = 0; l < n; l++)                                                                                    \
            _mm256_maskstore_ps(c + l * ldc, m, nn_act256(_mm256_loadu_ps(buf + 8 * l), A, alpha, beta));              \
        return;
        NN_ACT_VEC_OTHERS(LINES)
#undef LINES
    default:
        for (int l = 0; l < n; l++)
            _mm256_maskstore_ps(c + l * ldc, m, _mm256_loadu_ps(buf + 8 * l));
    }
}

/* A transposed C (positions x channels into NCHW, "Pointwise convs on 7x7
 * planes"): the R rows of accumulators for columns j0..j0+7, transposed as
 * 8 x 8, become one vector per column whose lanes are the tile's rows,
 * stored down C's column under a mask of mr lanes.  Each test is made once
 * for the 8 columns (AVX-512's store512_transposed).  The scalar merge_tile
 * this replaces, element by element with the activation's switch in each,
 * was 7% of the tile's samples in MobileNetV2 at batch 1. */
static inline __attribute__((always_inline)) T256 void store256_transposed(const int R, const __m256 *acc,
                                                                           const tile_args *t, int j0) {
    const tile_args e = *t; /* the stores may alias *t */
    __m256 r[8];
#pragma clang loop unroll(full)
    for (int i = 0; i < 8; i++)
        r[i] = i < R ? acc[i] : _mm256_setzero_ps();
    nn_transpose8(r);
    __m256i rows = nn_lanes8(e.mr);
#define EACH_COL _Pragma("clang loop unroll(full)") for (int j = 0; j < 8; j++) if (j0 + j < e.nr)
    if (e.load_c) EACH_COL r[j] = _mm256_add_ps(r[j], _mm256_maskload_ps(e.c + (j0 + j) * e.ldc, rows));
    if (e.last) {
        if (e.bias_row) {
            __m256 b = _mm256_maskload_ps(e.bias_row, rows);
            EACH_COL r[j] = _mm256_add_ps(r[j], b);
        }
        if (e.bias_col) EACH_COL r[j] = _mm256_add_ps(r[j], _mm256_broadcast_ss(e.bias_col + j0 + j));
        if (e.res) EACH_COL r[j] = _mm256_add_ps(r[j], _mm256_maskload_ps(e.res + (j0 + j) * e.ldr, rows));
        switch (e.act) {
        case NN_ACT_NONE: break;
        case NN_ACT_RELU: EACH_COL r[j] = _mm256_max_ps(r[j], _mm256_setzero_ps()); break;
        case NN_ACT_CLIP: {
            __m256 lo = _mm256_set1_ps(e.alpha), hi = _mm256_set1_ps(e.beta);
            EACH_COL r[j] = _mm256_min_ps(_mm256_max_ps(r[j], lo), hi);
            break;
        }
        default: { /* the rest out of line (as act_store512) */
            float buf[8 * 8];
            EACH_COL _mm256_storeu_ps(buf + 8 * j, r[j]);
            act_store256(buf, e.nr - j0 < 8 ? e.nr - j0 : 8, e.c + j0 * e.ldc, e.ldc, rows, e.act, e.alpha, e.beta);
            return;
        }
        }
    }
    EACH_COL _mm256_maskstore_ps(e.c + (j0 + j) * e.ldc, rows, r[j]);
#undef EACH_COL
}

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
    if (t->trans_c) {
        store256_transposed(R, c[0], t, 0);
        if (V > 1) store256_transposed(R, c[1], t, 8);
        return;
    }
    if (t->nr < 8 * V) { /* ragged right edge: through a buffer */
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
/* R rows by V vectors of 16 columns: V = 1 serves a tile whose valid
 * columns fit in the panel's first half (N = 784, a 28x28 plane, ends on a
 * 16-column tile) in 0.55 of a full tile's time. */
static inline __attribute__((always_inline)) T512 void tile512_rows(const int R, const int V, const tile_args *t) {
    __m512 c0[V16_MR], c1[V16_MR];
#pragma clang loop unroll(full)
    for (int i = 0; i < R; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
    __mmask16 m0 = t->nr >= 16 ? 0xffff : (__mmask16)((1u << t->nr) - 1);
    __mmask16 m1 = t->nr >= 32 ? 0xffff : t->nr <= 16 ? 0 : (__mmask16)((1u << (t->nr - 16)) - 1);
    const float *a = t->a, *b = t->b, *next = t->next_a, *next_b = t->next_b;
#define K_STEP                                                                                                         \
    do {                                                                                                               \
        _mm_prefetch((const char *)next, _MM_HINT_T1);                                                                 \
        _mm_prefetch((const char *)next_b, _MM_HINT_T1);                                                               \
        if (V > 1) _mm_prefetch((const char *)(next_b + 16), _MM_HINT_T1);                                             \
        /* masked: a B read in place ends at its last valid column */                                                  \
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = V > 1 ? _mm512_maskz_loadu_ps(m1, b + 16) : b0;                 \
        _Pragma("clang loop unroll(full)") for (int i = 0; i < R; i++) {                                               \
            __m512 ai = _mm512_set1_ps(a[i]);                                                                          \
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);                                                                    \
            if (V > 1) c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);                                                         \
        }                                                                                                              \
        a += V16_MR, b += t->ldb, next += V16_MR, next_b += t->next_b_ld;                                              \
    } while (0)
    /* The residual the epilogue adds is a block's input, written layers ago
     * and perhaps no longer in L1 or L2: waiting for its lines after the
     * last K step stalled the tile.  One line of it is pulled in per K step
     * of the last block, a row (or a transposed C's column) at a time, from
     * the first step on (docs/perf-notes.md, "GEMM: the residual pulled in
     * during the last K block"). */
    int64_t p = 0, lines = 0;
    if (t->last && t->res) lines = t->trans_c ? t->nr : (int64_t)(t->mr < R ? t->mr : R) * V;
    for (lines = lines < t->kc ? lines : t->kc; p < lines; p++) {
        _mm_prefetch((const char *)(t->res + (t->trans_c ? p * t->ldr : p / V * t->ldr + p % V * 16)), _MM_HINT_T0);
        K_STEP;
    }
    for (; p < t->kc; p++)
        K_STEP;
#undef K_STEP
    if (t->trans_c) {
        store512_transposed(R, c0, t, 0);
        if (V > 1) store512_transposed(R, c1, t, 16);
        return;
    }
    store512_rows(R, V, c0, c1, t, m0, m1);
}

static inline __attribute__((always_inline)) T512 void tile512_width(const int V, const tile_args *t) {
    if (t->mr > 12)
        tile512_rows(14, V, t);
    else if (t->mr > 10)
        tile512_rows(12, V, t);
    else if (t->mr > 8)
        tile512_rows(10, V, t);
    else if (t->mr > 4)
        tile512_rows(8, V, t);
    else if (t->mr > 2)
        tile512_rows(4, V, t);
    else if (t->mr > 1)
        tile512_rows(2, V, t);
    else
        tile512_rows(1, V, t);
}

/* A tile of at most W (4 or 8) columns, as a 14x14 plane's last 4 (N = 196
 * = 6 x 32 + 4): vectors run down the rows, one per column, so each K step
 * is one load of the A panel's 14 floats and W broadcasts of B instead of 14
 * broadcasts into 14 vectors of which W lanes count.  Even and odd K steps
 * go to separate accumulators (an accumulator per column alone would wait
 * on the multiply-add's latency).  The columns are then transposed into
 * rows for the row-major C's epilogue. */
static inline __attribute__((always_inline)) T512 void tile512_narrow(const int W, const tile_args *t) {
    __m512 e[8], o[8];
#pragma clang loop unroll(full)
    for (int j = 0; j < W; j++)
        e[j] = o[j] = _mm512_setzero_ps();
    const __mmask16 panel = (1u << V16_MR) - 1;
    const float *a = t->a, *b = t->b;
    int64_t p = 0;
    for (; p + 1 < t->kc; p += 2, a += 2 * V16_MR, b += 2 * t->ldb) {
        __m512 a0 = _mm512_maskz_loadu_ps(panel, a), a1 = _mm512_maskz_loadu_ps(panel, a + V16_MR);
#pragma clang loop unroll(full)
        for (int j = 0; j < W; j++) {
            if (j >= t->nr) break;
            e[j] = _mm512_fmadd_ps(a0, _mm512_set1_ps(b[j]), e[j]);
            o[j] = _mm512_fmadd_ps(a1, _mm512_set1_ps(b[t->ldb + j]), o[j]);
        }
    }
    if (p < t->kc) {
        __m512 a0 = _mm512_maskz_loadu_ps(panel, a);
#pragma clang loop unroll(full)
        for (int j = 0; j < W; j++) {
            if (j >= t->nr) break;
            e[j] = _mm512_fmadd_ps(a0, _mm512_set1_ps(b[j]), e[j]);
        }
    }
    __m512 r[16];
#pragma clang loop unroll(full)
    for (int j = 0; j < 16; j++)
        r[j] = j < W && j < t->nr ? _mm512_add_ps(e[j], o[j]) : _mm512_setzero_ps();
    transpose16(r); /* r[i]: row i of the tile */
    store512_rows(V16_MR, 1, r, r, t, (__mmask16)((1u << t->nr) - 1), 0);
}

T512 static void tile_avx512(const tile_args *t) {
    if (!t->trans_c && t->nr <= 4)
        tile512_narrow(4, t);
    else if (!t->trans_c && t->nr <= 8) /* the kernel's .narrow */
        tile512_narrow(8, t);
    else if (t->nr > 16)
        tile512_width(2, t);
    else
        tile512_width(1, t);
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

/* pack_rows for MR 14: per 16 K steps, the panel's rows as 16 vectors
 * (the two past MR zero), transposed in registers (transpose16, the
 * transposed-C store's), each K step's 14 floats one masked store.  The
 * scalar loop stored one float at a time, MR floats apart: 6-8% of a
 * transformer's time at batch 1 (docs/perf-notes.md, "GEMM: A packed in
 * registers"). */
T512 static void pack_rows_avx512(const float *src, int64_t ld, int64_t kc, int64_t mc, float alpha, float *dst) {
    const __mmask16 panel = (1u << V16_MR) - 1;
    const __m512 scale = _mm512_set1_ps(alpha);
    for (int64_t i0 = 0; i0 < mc; i0 += V16_MR, dst += V16_MR * kc) {
        int rows = (int)min64(V16_MR, mc - i0);
        const float *s = src + i0 * ld;
        for (int64_t p = 0; p < kc; p += 16) {
            __mmask16 k = kc - p >= 16 ? 0xffff : (__mmask16)((1u << (kc - p)) - 1);
            __m512 r[16];
#pragma clang loop unroll(full)
            for (int i = 0; i < 16; i++) {
                r[i] = i < rows ? _mm512_maskz_loadu_ps(k, s + i * ld + p) : _mm512_setzero_ps();
                if (alpha != 1.0f) r[i] = _mm512_mul_ps(r[i], scale);
            }
            transpose16(r); /* r[j]: K step p + j of each row */
            float *d = dst + p * V16_MR;
            int64_t n = min64(16, kc - p);
#pragma clang loop unroll(full)
            for (int j = 0; j < 16; j++)
                if (j < n) _mm512_mask_storeu_ps(d + j * V16_MR, panel, r[j]);
        }
    }
}

/* pack_rows for MR 6: 8 K steps at a time, the rows (two zero ones past
 * MR) transposed as 8 x 8, each K step's 6 floats stored as 4 and 2. */
T256 static void pack_rows_avx2(const float *src, int64_t ld, int64_t kc, int64_t mc, float alpha, float *dst) {
    const __m256 scale = _mm256_set1_ps(alpha);
    for (int64_t i0 = 0; i0 < mc; i0 += V8_MR, dst += V8_MR * kc) {
        int rows = (int)min64(V8_MR, mc - i0);
        const float *s = src + i0 * ld;
        for (int64_t p = 0; p < kc; p += 8) {
            int64_t n = min64(8, kc - p);
            __m256i k = nn_lanes8(n);
            __m256 r[8];
#pragma clang loop unroll(full)
            for (int i = 0; i < 8; i++) {
                r[i] = i < rows ? _mm256_maskload_ps(s + i * ld + p, k) : _mm256_setzero_ps();
                if (alpha != 1.0f) r[i] = _mm256_mul_ps(r[i], scale);
            }
            nn_transpose8(r); /* r[j]: K step p + j of each row */
            float *d = dst + p * V8_MR;
#pragma clang loop unroll(full)
            for (int j = 0; j < 8; j++)
                if (j < n) {
                    _mm_storeu_ps(d + j * V8_MR, _mm256_castps256_ps128(r[j]));
                    _mm_storel_pi((__m64 *)(d + j * V8_MR + 4), _mm256_extractf128_ps(r[j], 1));
                }
        }
    }
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
 * plane), the rest gathered: the compiler's own loop went one float and
 * one branch at a time (docs/perf-notes.md, "GEMM: AVX2 im2col packing"). */
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

ELEMENTWISE_FOR(avx512, T512)
ELEMENTWISE_FOR(avx2, T256)
PACK_CONV_FOR(avx512, T512)
PACK_CONV_FOR(avx2, T256)

const gemm_kernel nn_gemm_kernel_avx512 = {.name = "avx512",
                                           .mr = V16_MR,
                                           .nr = 32,
                                           .mc = 14 * 24,
                                           .nc = 512,
                                           .b_in_place = true,
                                           .narrow = 8,
                                           .tile = tile_avx512,
                                           .act = act_avx512,
                                           .dot = dot_avx512,
                                           .axpy = axpy_avx512,
                                           .pack_conv = pack_conv_avx512,
                                           .pack_plain = pack_plain_avx512,
                                           .pack_rows = pack_rows_avx512};

const gemm_kernel nn_gemm_kernel_avx2 = {.name = "avx2",
                                         .mr = V8_MR,
                                         .nr = 16,
                                         .mc = 6 * 24,
                                         .nc = 256,
                                         .tile = tile_avx2,
                                         .act = act_avx2,
                                         .dot = dot_avx2,
                                         .axpy = axpy_avx2,
                                         .pack_conv = pack_conv_avx2,
                                         .pack_plain = pack_plain_avx2,
                                         .pack_rows = pack_rows_avx2};
#endif
