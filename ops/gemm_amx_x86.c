/* The bf16 GEMM on AMX tiles (nn_gemm.bf16 where nn_gemm_bf16_amx()):
 * each 32 x 32 tile of C is four 16 x 16 fp32 tiles in AMX's registers,
 * accumulated by TDPBF16PS, which multiplies a 16-row tile of A (16 rows of
 * 32 bf16: K steps) by a tile of B (16 K pairs of 16 columns) in one
 * instruction: 16 x 16 x 32 multiply-adds, 16 times a VDPBF16PS's.
 *
 * Operands: B's panels are the AVX512-BF16 kernel's (pairs of K steps, a
 * pair row of the 32-column panel 128 bytes: one tile row per 16 columns,
 * loaded with a 128-byte stride); A's panels hold their rows one after
 * another (gemm_kernel.h, `a_rows`), each row's K pairs contiguous, as a
 * tile row of A must be.  Both pad K to a multiple of 32 with zeros
 * (`k_align`), so every K step is a whole tile (a partial one would load
 * past the panel).  The tiles go through a 4 KiB buffer on the stack to the
 * AVX-512 kernels' epilogue (gemm_x86_store.h).
 *
 * The tiles' shapes (palette 1, all eight 16 rows x 64 bytes) are loaded
 * once per thread, on its first tile: this code is the only user of AMX in
 * the process, so they stay.  Needs the OS's permission (isa.c asks it). */
#include "gemm_kernel.h"

#if NN_HAVE_X86
#include <immintrin.h>

#include "gemm_x86_store.h"

#define TAMX __attribute__((target("avx512f,avx512dq,avx512bw,avx512bf16,avx2,fma,amx-tile,amx-bf16")))
#define AMX_MR 32
#define AMX_NR 32

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static _Thread_local bool configured;

TAMX static void configure(void) {
    _Alignas(64) tile_config cfg = {.palette = 1};
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
    configured = true;
}

/* Tiles: C 0 (rows 0-15, columns 0-15), 1 (rows 0-15, columns 16-31), 2
 * and 3 (rows 16-31); A 4 (rows 0-15), 5 (rows 16-31); B 6 (columns 0-15),
 * 7 (16-31).  M2 / N2: whether the tile's second 16 rows / columns are
 * computed (a ragged tile's padding is skipped where it is a whole half). */
static inline __attribute__((always_inline)) TAMX void amx_product(const int M2, const int N2, const char *a,
                                                                 const char *b, int64_t steps, int64_t lda,
                                                                 const char *next_b, int64_t next_b_step,
                                                                 float *buf) {
    _tile_zero(0);
    if (N2) _tile_zero(1);
    if (M2) _tile_zero(2);
    if (M2 && N2) _tile_zero(3);
    for (int64_t s = 0; s < steps; s++, a += 64, b += 16 * 4 * AMX_NR, next_b += next_b_step) {
        for (int64_t l = 0; l < next_b_step; l += 64) /* a share of the next B panel (tile_args.next_b) */
            _mm_prefetch(next_b + l, _MM_HINT_T1);
        _tile_loadd(4, a, lda);
        _tile_loadd(6, b, 4 * AMX_NR);
        if (N2) _tile_loadd(7, b + 64, 4 * AMX_NR);
        _tile_dpbf16ps(0, 4, 6);
        if (N2) _tile_dpbf16ps(1, 4, 7);
        if (M2) {
            _tile_loadd(5, a + 16 * lda, lda);
            _tile_dpbf16ps(2, 5, 6);
            if (N2) _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, buf, 4 * AMX_NR);
    if (N2) _tile_stored(1, buf + 16, 4 * AMX_NR);
    if (M2) _tile_stored(2, buf + 16 * AMX_NR, 4 * AMX_NR);
    if (M2 && N2) _tile_stored(3, buf + 16 * AMX_NR + 16, 4 * AMX_NR);
}

/* Rows [16h, 16h + 16) of the buffered tile through the epilogue. */
static inline __attribute__((always_inline)) TAMX void store_half(const tile_args *t, const float *buf, int h,
                                                                const int V) {
    tile_args e = *t;
    e.mr = t->mr - 16 * h < 16 ? t->mr - 16 * h : 16;
    if (h) {
        e.c += t->trans_c ? 16 : 16 * t->ldc;
        if (e.res) e.res += t->trans_c ? 16 : 16 * t->ldr;
        if (e.bias_row) e.bias_row += 16;
    }
    __m512 c0[16], c1[16];
    buf += 16 * AMX_NR * h;
#pragma clang loop unroll(full)
    for (int i = 0; i < 16; i++) {
        c0[i] = _mm512_loadu_ps(buf + i * AMX_NR);
        c1[i] = V > 1 ? _mm512_loadu_ps(buf + i * AMX_NR + 16) : c0[i];
    }
    if (e.trans_c) {
        store512_transposed(16, c0, &e, 0);
        if (V > 1) store512_transposed(16, c1, &e, 16);
        return;
    }
    __mmask16 m0 = e.nr >= 16 ? 0xffff : (__mmask16)((1u << e.nr) - 1);
    __mmask16 m1 = e.nr >= 32 ? 0xffff : e.nr <= 16 ? 0 : (__mmask16)((1u << (e.nr - 16)) - 1);
    store512_rows(16, V, c0, c1, &e, m0, m1);
}

static inline __attribute__((always_inline)) TAMX void tile_amx_shape(const int M2, const int N2,
                                                                    const tile_args *t) {
    _Alignas(64) float buf[AMX_MR * AMX_NR];
    int64_t pairs = (t->kc + 31) / 32 * 16;
    /* next_b_ld floats a K step are 32 of them a step of 32 K steps */
    amx_product(M2, N2, (const char *)t->a, (const char *)t->b, pairs / 16, 4 * pairs, (const char *)t->next_b,
                4 * 32 * t->next_b_ld, buf);
    store_half(t, buf, 0, N2 ? 2 : 1);
    if (M2) store_half(t, buf, 1, N2 ? 2 : 1);
}

TAMX static void tile_amx(const tile_args *t) {
    if (!configured) configure();
    if (t->mr > 16 && t->nr > 16)
        tile_amx_shape(1, 1, t);
    else if (t->mr > 16)
        tile_amx_shape(1, 0, t);
    else if (t->nr > 16)
        tile_amx_shape(0, 1, t);
    else
        tile_amx_shape(0, 0, t);
}

/* B's packers: the AVX512-BF16 kernel's pairs, then zero pair rows up to
 * the next multiple of 16 in each of the block's panels. */
static void pad_panels(int64_t panels, int64_t kc, int nr, float *dst) {
    int64_t have = (kc + 1) / 2, pairs = (kc + 31) / 32 * 16;
    for (int64_t j = 0; j < panels; j++)
        memset((uint32_t *)(dst + j * nr * kc) + have * nr, 0, sizeof(uint32_t) * (size_t)((pairs - have) * nr));
}

static void pack_conv_amx(const conv_table *t, const float *x, int64_t p0, int64_t kc, int nr, float *dst) {
    nn_gemm_kernel_bf16.pack_conv(t, x, p0, kc, nr, dst);
    pad_panels((t->nvec * VEC + nr - 1) / nr, kc, nr, dst);
}

static void pack_plain_amx(const float *src, int64_t ld, int64_t kc, int64_t nc, int nr, float *dst,
                           const b_prologue *pr) {
    nn_gemm_kernel_bf16.pack_plain(src, ld, kc, nc, nr, dst, pr);
    pad_panels((nc + nr - 1) / nr, kc, nr, dst);
}

static void act_amx(float *y, int64_t n, nn_act act, float a, float b) { nn_gemm_kernel_avx512.act(y, n, act, a, b); }
static void dot_amx(const float *x, const float *r, int64_t ld, int64_t n, int count, float *out) {
    nn_gemm_kernel_avx512.dot(x, r, ld, n, count, out);
}
static void axpy_amx(float *y, float a, const float *x, int64_t n) { nn_gemm_kernel_avx512.axpy(y, a, x, n); }

const gemm_kernel nn_gemm_kernel_amx = {.name = "amx-bf16",
                                        .mr = AMX_MR,
                                        .nr = AMX_NR,
                                        .mc = AMX_MR * 12,
                                        .nc = 512,
                                        .pairs = true,
                                        .a_rows = true,
                                        .k_align = 32,
                                        .tile = tile_amx,
                                        .act = act_amx,
                                        .dot = dot_amx,
                                        .axpy = axpy_amx,
                                        .pack_conv = pack_conv_amx,
                                        .pack_plain = pack_plain_amx};
#endif
