/* The int8 GEMM's tile kernels (qgemm.c packs for them): each sums, for a
 * QG_MR x QG_NR tile, the raw u8 x s8 products over `groups` groups of 4 k
 * values, wrapping modulo 2^32, into acc (row-major, QG_NR to a row). */
#ifndef NN_QGEMM_KERNEL_H
#define NN_QGEMM_KERNEL_H

#include <stdint.h>

#include "isa.h"

enum { QG_MR = 6, QG_NR = 32 };

typedef void (*qg_tile_fn)(const uint8_t *a, const int8_t *b, int64_t groups, int32_t *acc);

/* One tap of the int8 depthwise conv (qlinear.c): acc[i] += src[i] * w for
 * i < n, each product exact in int32 (|src|, |w| <= 255), the sums wrapping
 * modulo 2^32. */
typedef void (*qg_dw_tap_fn)(uint32_t *acc, const int16_t *src, int32_t w, int64_t n);

#if NN_HAVE_X86
void nn_qg_tile_vnni512(const uint8_t *a, const int8_t *b, int64_t groups, int32_t *acc);
void nn_qg_tile_avx2(const uint8_t *a, const int8_t *b, int64_t groups, int32_t *acc);
void nn_qg_dw_tap_avx512(uint32_t *acc, const int16_t *src, int32_t w, int64_t n);
void nn_qg_dw_tap_avx2(uint32_t *acc, const int16_t *src, int32_t w, int64_t n);
#endif
/* The depthwise tap for `isa` on this CPU (qgemm.c). */
qg_dw_tap_fn nn_qg_dw_tap_for(nn_isa isa);

#endif
