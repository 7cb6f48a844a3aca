/* The int8 GEMM behind QLinearConv, ConvInteger, QLinearMatMul and
 * MatMulInteger:
 *
 *     C[i][j] = sum_p (A[i][p] - za[i]) * (B[p][j] - zb[j])      (int32)
 *
 * A and B hold uint8 or int8 bytes (each side either), za is one zero point
 * or one per row, zb one or one per column.  Both operands are packed into
 * one form, A as uint8 and B as int8 (flipping the top bit of whichever
 * side has the other signedness and moving its zero point by 128), so one
 * u8 x s8 kernel serves every combination: VPDPBUSD on AVX-512 VNNI, plain
 * C elsewhere.  The kernel sums raw products; the zero points are applied
 * afterwards from row and column sums.  Every step wraps modulo 2^32 (the
 * VNNI instruction used does not saturate), so each path gives the same
 * int32 as summing the products one by one in 64 bits and truncating, and
 * the exact value whenever it fits an int32 (always for k < 33000). */
#ifndef NN_QGEMM_H
#define NN_QGEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "isa.h"

typedef struct nn_qgemm {
    int64_t m, n, k;
    const uint8_t *a; /* A[i * lda + p] */
    int64_t lda;
    bool a_signed;
    const uint8_t *b; /* B[p * ldb + j] */
    int64_t ldb;
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
/* Whether the int8 kernel for `isa` differs from the portable one and this
 * CPU runs it (AVX-512 with VNNI). */
bool nn_qgemm_has_kernel(nn_isa isa);
/* "vnni512" or "scalar": the kernel nn_qgemm_run uses now. */
const char *nn_qgemm_kernel_name(void);

#endif
