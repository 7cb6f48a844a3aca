/* The int8 GEMM behind QLinearConv, ConvInteger, QLinearMatMul and
 * MatMulInteger:
 *
 *     C[i][j] = sum_p (A[i][p] - za[i]) * (B[p][j] - zb[j])      (int32)
 *
 * A and B hold uint8 or int8 bytes (each side either), za is one zero point
 * or one per row, zb one or one per column.  Both operands are packed into
 * one form, A as uint8 and B as int8 (flipping the top bit of whichever
 * side has the other signedness and moving its zero point by 128), so one
 * u8 x s8 kernel serves every combination: VPDPBUSD on AVX-512 VNNI,
 * widened 16-bit products (VPMADDWD, exact) on AVX2, plain C elsewhere.  The kernel sums raw products; the zero points are applied
 * afterwards from row and column sums.  Every step wraps modulo 2^32 (the
 * VNNI instruction used does not saturate), so each path gives the same
 * int32 as summing the products one by one in 64 bits and truncating, and
 * the exact value whenever it fits an int32 (always for k < 33000). */
#ifndef NN_QGEMM_H
#define NN_QGEMM_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "isa.h"

/* Requantized 8-bit output written by the GEMM's epilogue instead of C:
 *     y = saturate(round_half_even(float(C + bias) * mult) + zp)
 * with mult and bias per row (per_col false) or per column (true); bias
 * may be NULL. */
typedef struct nn_qgemm_out8 {
    uint8_t *y; /* y[i * ldy + j] */
    int64_t ldy;
    const float *mult;
    const int32_t *bias;
    bool per_col;
    int32_t zp, lo, hi;
} nn_qgemm_out8;

/* Round half to even (in the default rounding mode, as rintf) for
 * |v| <= 2^22: adding and removing 1.5 * 2^23 leaves no fraction bits, and
 * the FPU rounds the sum as rintf would.  Plain arithmetic, so loops using
 * it vectorize, where a call to rintf does not. */
static inline float nn_round_small(float v) { return (v + 12582912.0f) - 12582912.0f; }

/* One accumulator requantized, as ONNX Runtime computes it (qlinear.c).
 * Clamped before rounding (the bounds less zp are whole numbers, so the
 * result is the same), which keeps the rounding within nn_round_small's
 * range; NaN cannot arise from an int32 times a finite multiplier, and a
 * non-finite multiplier gives lo for NaN, as before. */
static inline int32_t nn_qgemm_requantize(int32_t acc, float mult, int32_t zp, int32_t lo, int32_t hi) {
    float v = (float)acc * mult, flo = (float)(lo - zp), fhi = (float)(hi - zp);
    v = v >= flo ? v : flo; /* NaN too */
    v = v > fhi ? fhi : v;
    return (int32_t)nn_round_small(v) + zp;
}

typedef struct nn_qgemm {
    int64_t m, n, k;
    /* A or B already packed (nn_qgemm_pack_a / _b, e.g. constant weights
     * packed at load): the run packs only the other side; a and b may then
     * be NULL for that side, a_signed / b_signed must still be right. */
    const void *a_packed, *b_packed;
    const nn_qgemm_out8 *out8; /* non-NULL: write y, not c */
    const uint8_t *a; /* A[i * lda + p] */
    int64_t lda;
    bool a_signed;
    const uint8_t *b; /* B[p * ldb + j] */
    int64_t ldb;
    /* Non-NULL: B[p][j] = b[b_row_off[p] + j] instead, rows anywhere in b
     * (a conv's taps as shifted views of its padded or phase planes). */
    const int64_t *b_row_off;
    bool b_signed;
    const int32_t *za; /* za[0], or za[i] with za_per_row; NULL: 0 */
    bool za_per_row;
    const int32_t *zb; /* zb[0], or zb[j] with zb_per_col; NULL: 0 */
    bool zb_per_col;
    int32_t *c; /* C[i * ldc + j] */
    int64_t ldc;
} nn_qgemm;

/* Scratch bytes nn_qgemm_run needs for these sizes; SIZE_MAX when they are
 * too large to pack (the caller refuses the call). */
size_t nn_qgemm_workspace(int64_t m, int64_t n, int64_t k);
/* C for g, with the kernel of `isa` (one nn_qgemm_supported says runs). */
void nn_qgemm_run_isa(const nn_qgemm *g, void *workspace, int threads, nn_isa isa);
/* ... with the kernel the active ISA selects. */
void nn_qgemm_run(const nn_qgemm *g, void *workspace, int threads);
/* Bytes of A (m x k) or B (k x n) packed once, with their row / column
 * sums; SIZE_MAX when too large. */
size_t nn_qgemm_packed_a_size(int64_t m, int64_t k);
size_t nn_qgemm_packed_b_size(int64_t k, int64_t n);
/* Pack g's A (m, k, a, lda, a_signed) or B (k, n, b, ldb, b_signed) into
 * dst of the size above: the form nn_qgemm.a_packed / b_packed takes. */
void nn_qgemm_pack_a(const nn_qgemm *g, void *dst);
void nn_qgemm_pack_b(const nn_qgemm *g, void *dst);
/* Whether the int8 kernel for `isa` differs from the portable one and this
 * CPU runs it (AVX2; AVX-512 with VNNI). */
bool nn_qgemm_has_kernel(nn_isa isa);
/* "vnni512", "avx2" or "scalar": the kernel nn_qgemm_run uses now. */
const char *nn_qgemm_kernel_name(void);

#endif
