/* The int8 GEMM's tile kernels (qgemm.c packs for them): each sums, for a
 * QG_MR x QG_NR tile, the raw u8 x s8 products over `groups` groups of 4 k
 * values, wrapping modulo 2^32, into acc (row-major, QG_NR to a row). */
#ifndef NN_QGEMM_KERNEL_H
#define NN_QGEMM_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "isa.h"

enum { QG_MR = 6, QG_NR = 32 };

typedef void (*qg_tile_fn)(const uint8_t *a, const int8_t *b, int64_t groups, int32_t *acc);

/* What a tile's requantizing epilogue needs (qgemm.c run_tile): per valid
 * row r (rows of them), the correction rs[r] (row sum less k * za) and
 * za[r], the multiplier and bias of the row (mu_col NULL) or of each
 * column (mu_col, bias_col: 32 each), and the destination bytes; per
 * column zb and csum; cols valid columns.  The result is
 *     y = requantize(acc - zb[c] * rs[r] - za[r] * cs[c] + bias)
 * as nn_qgemm_requantize computes it.  With `uniform` (one zb for every
 * column, one za for every row: a per-tensor activation zero point and
 * per-tensor weight zero point) the same sum, modulo 2^32, is
 *     acc + rk[r] - za[0] * cs[c] (+ bias_col[c])
 * with rk[r] = bias[r] - zb[0] * rs[r]: one product per column for the
 * tile instead of two per element. */
typedef struct qg_epi {
    const uint32_t *zb, *cs;
    const uint32_t *rs, *za, *bias, *rk; /* the tile's rows of arrays made once per product */
    bool uniform;
    const float *mu;
    const float *mu_col;
    const uint32_t *bias_col;
    uint8_t *y; /* row r at y + r * ldy */
    int64_t ldy;
    int rows, cols;
    int32_t zp, lo, hi;
} qg_epi;

typedef void (*qg_tile_q8_fn)(const uint8_t *a, const int8_t *b, int64_t groups, const qg_epi *e);

/* Pack `groups` groups of 4 rows of a whole 32-column B panel (row p at
 * b + p * ldb, or at b + row_off[p] when row_off is not NULL) into dst as
 * pack_b_panel lays them out, each byte xor flip, adding each column's sum
 * of the int8 values to s[32]. */
typedef void (*qg_pack_b_fn)(const uint8_t *b, int64_t ldb, const int64_t *row_off, int64_t groups, uint8_t flip,
                             int8_t *dst, int32_t *s);

/* One tap of the int8 depthwise conv (qlinear.c): acc[i] += src[i] * w for
 * i < n, each product exact in int32 (|src|, |w| <= 255), the sums wrapping
 * modulo 2^32. */
typedef void (*qg_dw_tap_fn)(uint32_t *acc, const int16_t *src, int32_t w, int64_t n);

#if NN_HAVE_X86
void nn_qg_tile_vnni512(const uint8_t *a, const int8_t *b, int64_t groups, int32_t *acc);
void nn_qg_tile_avx2(const uint8_t *a, const int8_t *b, int64_t groups, int32_t *acc);
void nn_qg_tile_vnni512_q8(const uint8_t *a, const int8_t *b, int64_t groups, const qg_epi *e);
void nn_qg_pack_b_avx2(const uint8_t *b, int64_t ldb, const int64_t *row_off, int64_t groups, uint8_t flip,
                       int8_t *dst, int32_t *s);
void nn_qg_dw_tap_avx512(uint32_t *acc, const int16_t *src, int32_t w, int64_t n);
void nn_qg_dw_tap_avx2(uint32_t *acc, const int16_t *src, int32_t w, int64_t n);
#endif
/* The depthwise tap for `isa` on this CPU (qgemm.c). */
qg_dw_tap_fn nn_qg_dw_tap_for(nn_isa isa);

#endif
