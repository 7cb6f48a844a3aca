/* The GEMM's inside (gemm.h is its outside), shared by gemm.c (plan and
 * run), gemm_pack.c (packing) and the kernel families gemm_scalar.c and
 * gemm_x86.c: the microkernel's arguments, a family's descriptor, the K
 * blocking, the implicit im2col's table, and the generic bodies each family
 * instantiates for its ISA. */
#ifndef NN_GEMM_KERNEL_H
#define NN_GEMM_KERNEL_H

#include <stdint.h>
#include <string.h>

#include "act.h"
#include "cpu_caches.h"
#include "gemm.h"
#include "isa.h"

typedef struct tile_args {
    int64_t kc;
    const float *a, *b; /* a: a packed panel, a[p*mr_stride + i]; b: b[p*ldb + j] */
    /* The A panel the next tile will read, pulled toward the cache while this
     * one computes (see run_task); a itself when there is none. */
    const float *next_a;
    /* Likewise B ahead of this tile, from next_b on, next_b_ld floats a K
     * step (the AVX-512 and AMX kernels pull it in): this tile's share of
     * the next pre-packed panel (gemm.c, next_b_panel), or for a B read in
     * place its rows some rows ahead of b (B_IN_PLACE_AHEAD); b and 0 when
     * none. */
    const float *next_b;
    int64_t next_b_ld;
    int64_t ldb; /* NR for a packed panel, B's row stride when read in place */
    float *c;
    int64_t ldc;
    int mr, nr; /* valid rows / columns of this tile */
    bool load_c, last;
    bool trans_c;                           /* C(i, j) at c[j*ldc + i], the residual likewise */
    const float *bias_row, *bias_col, *res; /* already offset to the tile; NULL when absent */
    int64_t ldr;
    nn_act act; /* nn_act_has_vec's only: tanh and GELU run after, with act() */
    float alpha, beta;
} tile_args;

typedef struct conv_table conv_table;
typedef struct b_prologue b_prologue;

typedef struct gemm_kernel {
    const char *name;
    int mr, nr;
    int mc, nc;      /* cache blocks (multiples of mr, nr) with NN_CPU_CACHES=fixed or a block hook */
    bool b_in_place; /* tile reads a plain B where it lies (masked at its right edge) */
    /* Panels of bf16 pairs (nn_gemm.bf16): K step 2q and 2q+1 of a row (A) or
     * column (B) share one 32-bit word, low half first, an odd K's last pair
     * zero-padded.  A panel keeps the fp32 panel's place and size (offsets
     * stay the driver's) and fills its first half. */
    bool pairs;
    /* With pairs: an A panel holds its rows one after another, each row's
     * pairs contiguous (pair q of row i at word i * P + q, P =
     * kd_pair_rows(kc)), instead of a K step's rows together (the AMX
     * kernel's tiles load A by rows). */
    bool a_rows;
    /* With pairs: a panel's K is zero-padded to a multiple of this many steps
     * (0: to an even count), and K blocks but the last are multiples of it. */
    int k_align;
    /* A last tile of at most this many columns (not of a transposed C) runs
     * with vectors down its rows, at about a fifth of a full tile's time (0: none) */
    int narrow;
    void (*tile)(const tile_args *t);
    /* Set: the whole block of a task's rows at once instead of tiles, with t->mr
     * rows of a row-major A (row stride kc: MR is 1, so A's panels are its rows)
     * and t->nr columns of a row-major B (row stride ldb). */
    void (*block)(const tile_args *t);
    void (*act)(float *y, int64_t n, nn_act act, float alpha, float beta);
    /* out[r] = rows[r * ld : + n] . x for r < count (1 to DOT_ROWS): the rows
     * streamed side by side, x read once for all of them */
    void (*dot)(const float *x, const float *rows, int64_t ld, int64_t n, int count, float *out);
    void (*axpy)(float *y, float a, const float *x, int64_t n);
    /* rows [p0, p0 + kc) of an implicit im2col matrix, or kc rows of a plain B, into NR panels */
    void (*pack_conv)(const conv_table *t, const float *x, int64_t p0, int64_t kc, int nr, float *dst);
    void (*pack_plain)(const float *src, int64_t ld, int64_t kc, int64_t nc, int nr, float *dst, const b_prologue *pr);
    /* Rows [0, mc) x K [0, kc) of a row-major A (row stride ld), times
     * alpha, into MR panels, rows past mc zero: a transposition, in
     * registers where the family has it (NULL: pack_rows_body). */
    void (*pack_rows)(const float *src, int64_t ld, int64_t kc, int64_t mc, float alpha, float *dst);
} gemm_kernel;

/* ---- element-wise helpers, compiled once per ISA through the wrappers below */

/* The activations of act.h over an array, the switch outside the loops so
 * that each case vectorizes for the ISA it is compiled for. */
static inline __attribute__((always_inline)) void act_body(float *y, int64_t n, nn_act act, float a, float b) {
    switch (act) {
#define ACT_LOOP(A)                                                                                                    \
    case A:                                                                                                            \
        for (int64_t i = 0; i < n; i++)                                                                                \
            y[i] = nn_act_apply(A, a, b, y[i]);                                                                        \
        break;
        ACT_LOOP(NN_ACT_RELU)
        ACT_LOOP(NN_ACT_CLIP)
        ACT_LOOP(NN_ACT_LEAKY_RELU)
        ACT_LOOP(NN_ACT_SIGMOID)
        ACT_LOOP(NN_ACT_HARD_SIGMOID)
        ACT_LOOP(NN_ACT_HARD_SWISH)
        ACT_LOOP(NN_ACT_SILU)
        ACT_LOOP(NN_ACT_TANH)
        ACT_LOOP(NN_ACT_GELU)
        ACT_LOOP(NN_ACT_GELU_TANH)
#undef ACT_LOOP
    case NN_ACT_NONE: break;
    }
}

/* rows a matrix-vector product streams at once (memory-level parallelism) */
#define DOT_ROWS 8
static inline __attribute__((always_inline)) void dot_rows_body(const float *x, const float *r, int64_t ld, int64_t n,
                                                                int count, float *out) {
#pragma clang fp reassociate(on)
    float s[DOT_ROWS] = {0};
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
#pragma clang loop unroll(full)
        for (int q = 0; q < DOT_ROWS; q++)
            if (q < count) s[q] += v * r[q * ld + i];
    }
    for (int i = 0; i < count; i++)
        out[i] = s[i];
}

static inline __attribute__((always_inline)) void dot_body(const float *x, const float *r, int64_t ld, int64_t n,
                                                           int count, float *out) {
    switch (count) {
    case 8: dot_rows_body(x, r, ld, n, 8, out); break;
    case 7: dot_rows_body(x, r, ld, n, 7, out); break;
    case 6: dot_rows_body(x, r, ld, n, 6, out); break;
    case 5: dot_rows_body(x, r, ld, n, 5, out); break;
    case 4: dot_rows_body(x, r, ld, n, 4, out); break;
    case 3: dot_rows_body(x, r, ld, n, 3, out); break;
    case 2: dot_rows_body(x, r, ld, n, 2, out); break;
    default: dot_rows_body(x, r, ld, n, 1, out); break;
    }
}

static inline __attribute__((always_inline)) void axpy_body(float *restrict y, float a, const float *restrict x,
                                                            int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

#define ELEMENTWISE_FOR(SUFFIX, TARGET)                                                                                \
    TARGET static void act_##SUFFIX(float *y, int64_t n, nn_act act, float a, float b) { act_body(y, n, act, a, b); }  \
    TARGET static void dot_##SUFFIX(const float *x, const float *r, int64_t ld, int64_t n, int count, float *out) {    \
        dot_body(x, r, ld, n, count, out);                                                                             \
    }                                                                                                                  \
    TARGET static void axpy_##SUFFIX(float *y, float a, const float *x, int64_t n) { axpy_body(y, a, x, n); }

/* ---- the epilogue of a tile, one element at a time: the scalar kernel's,
 *      and the vector kernels' for ragged tiles. */
static inline void merge_tile(const tile_args *t, const float *acc, int ld) {
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

/* ---- blocking: the family's KC, MC, NC for this processor's caches
 * (cpu_caches.c says the rule); OpenBLAS's block hook blocks for itself and
 * keeps the constants, as does NN_CPU_CACHES=fixed. */
static inline nn_gemm_blocking gemm_blocks(const gemm_kernel *kd) {
    const nn_cpu_caches *c = nn_cpu_caches_get();
    if (c->fixed || kd->block) return (nn_gemm_blocking){.kc = NN_GEMM_KC_FIXED, .mc = kd->mc, .nc = kd->nc};
    return nn_gemm_blocking_derive(c, kd->mr, kd->nr);
}

/* K blocking: ceil(K / KC) blocks of equal size (the last smaller).  The
 * size is even (KC is), so only the last block can end on half a pair of
 * K steps: the bf16 kernel packs K in pairs and pads a block's odd end
 * with zeros, which in a middle block would shift the next block's K. */
typedef struct kblocks {
    int64_t count, size;
} kblocks;

static inline kblocks k_blocks(const gemm_kernel *kd, int64_t k) {
    int64_t kc = gemm_blocks(kd).kc;
    if (k <= 0) return (kblocks){.count = 1, .size = 0};
    int64_t count = (k + kc - 1) / kc, size = (k + count - 1) / count, align = kd->k_align > 2 ? kd->k_align : 2;
    /* even: <= kc (kc is even); aligned to more (AMX), up to align - 1 past kc */
    if (count > 1) size = (size + align - 1) / align * align;
    return (kblocks){.count = (k + size - 1) / size, .size = size};
}

/* The K pairs a panel of a pairs kernel holds for a block of kc steps: kc
 * rounded up to the kernel's alignment, halved.  At most kc when kc >= 16,
 * so that the pairs fit the fp32 panel's place (nn_gemm_bf16_kernel keeps
 * the AMX kernel, the only one aligning to more than 2, to such blocks). */
static inline int64_t kd_pair_rows(const gemm_kernel *kd, int64_t kc) {
    int64_t align = kd->k_align > 2 ? kd->k_align : 2;
    return (kc + align - 1) / align * align / 2;
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t batch_count(const nn_gemm *g, int i) { return g->batch[i] > 0 ? g->batch[i] : 1; }

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

/* The reference for pack_rows: one row at a time, each float to its own
 * place MR floats after the last. */
static inline void pack_rows_body(const float *src, int64_t ld, int64_t kc, int64_t mc, float alpha, int mr,
                                  float *dst) {
    for (int64_t i = 0; i < (mc + mr - 1) / mr * mr; i++) {
        float *d = dst + i / mr * mr * kc + i % mr;
        for (int64_t p = 0; p < kc; p++)
            d[p * mr] = i < mc ? alpha * src[i * ld + p] : 0.0f;
    }
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

#define PACK_CONV_FOR(SUFFIX, TARGET)                                                                                  \
    TARGET static void pack_conv_##SUFFIX(const conv_table *t, const float *x, int64_t p0, int64_t kc, int nr,         \
                                          float *dst) {                                                                \
        pack_conv_rows(t, x, p0, kc, nr, dst, pack_vec_##SUFFIX);                                                      \
    }

/* The families (gemm_scalar.c, gemm_x86.c), and the one for an nn_isa:
 * the packed operands record it as their `kernel`. */
extern const gemm_kernel nn_gemm_kernel_scalar, nn_gemm_kernel_blas;
#if NN_HAVE_X86
extern const gemm_kernel nn_gemm_kernel_avx2, nn_gemm_kernel_avx512;
#endif
#if NN_HAVE_X86
extern const gemm_kernel nn_gemm_kernel_bf16, nn_gemm_kernel_amx;
#endif
const gemm_kernel *nn_gemm_kernel_at(int ki);
static inline int kernel_index(void) { return (int)nn_isa_active(); }
/* The kernel a product runs with: the ISA's, or a bf16 family past them
 * (AVX512-BF16's, or AMX's where nn_gemm_bf16_kernel takes it). */
#define GEMM_KERNEL_BF16 ((int)NN_ISA_COUNT)
#define GEMM_KERNEL_AMX  ((int)NN_ISA_COUNT + 1)
int nn_gemm_bf16_kernel(const nn_gemm *g);
static inline int gemm_kernel_index(const nn_gemm *g) { return g->bf16 ? nn_gemm_bf16_kernel(g) : kernel_index(); }

/* fp32 to bf16, rounded to nearest even; a NaN stays a (quiet) NaN. */
static inline uint16_t bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40u);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}
static inline uint32_t bf16_pair(float lo, float hi) { return bf16_round(lo) | (uint32_t)bf16_round(hi) << 16; }

/* Packing (gemm_pack.c).  The im2col table for columns [n0, n0 + nc),
 * padded with zero columns to ncp (a multiple of VEC), in `mem` of
 * nn_gemm_table_floats(cv, ncp) floats. */
size_t nn_gemm_table_floats(const nn_gemm_conv *cv, int64_t ncp);
void nn_gemm_table_build(const nn_gemm_conv *cv, int64_t n0, int64_t nc, int64_t ncp, float *mem, conv_table *t);
/* B rows [p0, p0 + kc) x columns [n0, n0 + nc) into NR panels at dst (the
 * last panel zero-padded); a conv B needs the block's table. */
void nn_gemm_pack_b_panels(const gemm_kernel *kd, const nn_gemm *g, const float *b, const conv_table *table, int64_t p0,
                           int64_t kc, int64_t n0, int64_t nc, float *dst);
/* A rows [m0, m0 + mc) x K [p0, p0 + kc), scaled by alpha, into MR panels. */
void nn_gemm_pack_a_panels(const gemm_kernel *kd, const nn_gemm *g, const float *a, int64_t p0, int64_t kc, int64_t m0,
                           int64_t mc, float *dst);

#endif
