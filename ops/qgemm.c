/* The int8 GEMM (qgemm.h): packing, the portable kernel, and the zero-point
 * correction every kernel shares.
 *
 * Packed A: row blocks of QG_MR rows; within a block, for each group of 4
 * k values, QG_MR runs of 4 bytes (uint8).  Packed B: column panels of
 * QG_NR columns; within a panel, for each group of 4 k values, QG_NR runs of
 * 4 bytes (int8).  A kernel thus reads, per k group, one 32-bit word of A
 * per row and QG_NR words of B: what VPDPBUSD multiplies.  k is padded to a
 * multiple of 4 and rows and columns to whole blocks, with zero bytes, which
 * add nothing to the raw sums; the row and column sums cover real k only. */
#include "qgemm.h"

#include <string.h>

#include "op.h"
#include "qgemm_kernel.h"

size_t nn_qgemm_workspace(int64_t m, int64_t n, int64_t k) {
    if (m < 0 || n < 0 || k < 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return SIZE_MAX;
    int64_t k4 = nn_round_up(k, 4), mp = nn_round_up(m, QG_MR), np = nn_round_up(n, QG_NR), a, b;
    if (__builtin_mul_overflow(k4, mp, &a) || __builtin_mul_overflow(k4, np, &b)) return SIZE_MAX;
    int64_t total = nn_round_up(a, 64) + nn_round_up(b, 64) + 4 * (mp + np) + 64;
    if (total < 0 || (uint64_t)total > SIZE_MAX / 2) return SIZE_MAX;
    return (size_t)total;
}

/* A's rows as uint8 (bytes of int8 A flipped: a + 128), and each row's sum. */
static void pack_a(const nn_qgemm *g, int64_t k4, uint8_t *ap, int32_t *rsum, int threads) {
    uint8_t flip = g->a_signed ? 0x80 : 0;
    int64_t blocks = nn_round_up(g->m, QG_MR) / QG_MR;
#pragma omp parallel for num_threads(threads) if (g->m * g->k > NN_PAR_MIN)
    for (int64_t blk = 0; blk < blocks; blk++) {
        uint8_t *dst = ap + blk * QG_MR * k4;
        if (g->k != k4 || (blk + 1) * QG_MR > g->m) memset(dst, 0, (size_t)(QG_MR * k4)); /* padding only */
        for (int r = 0; r < QG_MR; r++) {
            int64_t i = blk * QG_MR + r;
            uint32_t s = 0;
            if (i < g->m) {
                const uint8_t *src = g->a + i * g->lda;
                for (int64_t p = 0; p < g->k; p++) {
                    uint8_t v = src[p] ^ flip;
                    dst[(p >> 2) * QG_MR * 4 + r * 4 + (p & 3)] = v;
                    s += v;
                }
            }
            rsum[i] = (int32_t)s;
        }
    }
}

/* B's columns as int8 (bytes of uint8 B flipped: b - 128), and each column's sum. */
static void pack_b(const nn_qgemm *g, int64_t k4, int8_t *bp, int32_t *csum, int threads) {
    uint8_t flip = g->b_signed ? 0 : 0x80;
    int64_t panels = nn_round_up(g->n, QG_NR) / QG_NR;
#pragma omp parallel for num_threads(threads) if (g->n * g->k > NN_PAR_MIN)
    for (int64_t pn = 0; pn < panels; pn++) {
        int8_t *dst = bp + pn * QG_NR * k4;
        int64_t j0 = pn * QG_NR, nc = g->n - j0 < QG_NR ? g->n - j0 : QG_NR;
        if (g->k != k4 || nc < QG_NR) memset(dst, 0, (size_t)(QG_NR * k4)); /* padding only */
        int32_t s[QG_NR] = {0};
        for (int64_t p = 0; p < g->k; p++) {
            const uint8_t *src = g->b + p * g->ldb + j0;
            int8_t *d = dst + (p >> 2) * QG_NR * 4 + (p & 3);
            for (int64_t c = 0; c < nc; c++) {
                int8_t v = (int8_t)(src[c] ^ flip);
                d[c * 4] = v;
                s[c] += v;
            }
        }
        for (int c = 0; c < QG_NR; c++)
            csum[j0 + c] = s[c];
    }
}

/* The portable kernel: the same sums the VNNI one makes, in uint32. */
static void tile_scalar(const uint8_t *a, const int8_t *b, int64_t groups, int32_t *acc) {
    uint32_t c[QG_MR][QG_NR];
    memset(c, 0, sizeof c);
    for (int64_t q = 0; q < groups; q++, a += QG_MR * 4, b += QG_NR * 4)
        for (int i = 0; i < QG_MR; i++)
            for (int j = 0; j < QG_NR; j++) {
                int32_t d = 0; /* at most 4 * 255 * 128 in magnitude */
                for (int t = 0; t < 4; t++)
                    d += (int32_t)a[i * 4 + t] * b[j * 4 + t];
                c[i][j] += (uint32_t)d;
            }
    memcpy(acc, c, sizeof c);
}

bool nn_qgemm_has_kernel(nn_isa isa) {
    return NN_HAVE_X86 && isa == NN_ISA_AVX512 && nn_isa_supported(isa) && nn_isa_has(NN_ISA_EXT_AVX512_VNNI);
}

const char *nn_qgemm_kernel_name(void) { return nn_qgemm_has_kernel(nn_isa_active()) ? "vnni512" : "scalar"; }

void nn_qgemm_run_isa(const nn_qgemm *g, void *workspace, int threads, nn_isa isa) {
    if (g->m <= 0 || g->n <= 0) return;
    int64_t k4 = nn_round_up(g->k, 4), mp = nn_round_up(g->m, QG_MR), np = nn_round_up(g->n, QG_NR);
    uint8_t *ap = workspace;
    int8_t *bp = (int8_t *)(ap + nn_round_up(k4 * mp, 64));
    int32_t *rsum = (int32_t *)((uint8_t *)bp + nn_round_up(k4 * np, 64)), *csum = rsum + mp;
    pack_a(g, k4, ap, rsum, threads);
    pack_b(g, k4, bp, csum, threads);
    qg_tile_fn tile = tile_scalar;
#if NN_HAVE_X86
    if (nn_qgemm_has_kernel(isa)) tile = nn_qg_tile_vnni512;
#else
    (void)isa;
#endif
    int64_t blocks = mp / QG_MR, panels = np / QG_NR, groups = k4 / 4;
    /* the zero points, moved with the flips (qgemm.h) */
    uint32_t oa = g->a_signed ? 128u : 0u, ob = g->b_signed ? 0u : 128u, kk = (uint32_t)g->k;
#pragma omp parallel for collapse(2) num_threads(threads) if (g->m * g->n * g->k > NN_PAR_MIN)
    for (int64_t blk = 0; blk < blocks; blk++)
        for (int64_t pn = 0; pn < panels; pn++) {
            int32_t acc[QG_MR * QG_NR];
            tile(ap + blk * QG_MR * k4, bp + pn * QG_NR * k4, groups, acc);
            /* C = S - zb[j] * (rsum[i] - k * za[i]) - za[i] * csum[j], all modulo 2^32 */
            int64_t j0 = pn * QG_NR, nc = g->n - j0 < QG_NR ? g->n - j0 : QG_NR;
            uint32_t zb[QG_NR], cs[QG_NR];
            for (int cc = 0; cc < QG_NR; cc++) {
                zb[cc] = (g->zb ? (uint32_t)g->zb[g->zb_per_col && cc < nc ? j0 + cc : 0] : 0u) - ob;
                cs[cc] = (uint32_t)csum[j0 + cc];
            }
            for (int r = 0; r < QG_MR; r++) {
                int64_t i = blk * QG_MR + r;
                if (i >= g->m) break;
                uint32_t za = (g->za ? (uint32_t)g->za[g->za_per_row ? i : 0] : 0u) + oa;
                uint32_t rs = (uint32_t)rsum[i] - kk * za;
                const uint32_t *a_row = (const uint32_t *)acc + r * QG_NR;
                int32_t *crow = g->c + i * g->ldc + j0;
                for (int64_t cc = 0; cc < nc; cc++)
                    crow[cc] = (int32_t)(a_row[cc] - zb[cc] * rs - za * cs[cc]);
            }
        }
}

void nn_qgemm_run(const nn_qgemm *g, void *workspace, int threads) {
    nn_qgemm_run_isa(g, workspace, threads, nn_isa_active());
}
