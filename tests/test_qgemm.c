/* The int8 GEMM (ops/qgemm.h): every kernel this CPU runs (the portable
 * one, AVX2's widening one, and AVX-512 VNNI where present, each forced
 * through the ISA argument) against a plain 64-bit sum of
 * (a - za) * (b - zb), on odd sizes that leave ragged tiles and k groups,
 * for each signedness of A and B, per-tensor and per-row/column zero
 * points, strided operands, and bytes at the extremes (255 x -128 sums,
 * where a saturating u8 x s8 instruction would differ).  tests/run_all.sh
 * runs it both under valgrind (which hides AVX-512: portable kernel only)
 * and natively. */
#include <stdlib.h>
#include <string.h>

#include "../ops/qgemm.h"
#include "check.h"

static uint32_t rng = 12345;
static uint32_t next(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* C from the definition, one product at a time, truncated to 32 bits. */
static void reference(const nn_qgemm *g, int32_t *c) {
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            int64_t za = g->za ? g->za[g->za_per_row ? i : 0] : 0, zb = g->zb ? g->zb[g->zb_per_col ? j : 0] : 0;
            int64_t s = 0;
            for (int64_t p = 0; p < g->k; p++) {
                uint8_t ra = g->a[i * g->lda + p], rb = g->b[p * g->ldb + j];
                int64_t a = g->a_signed ? (int8_t)ra : ra, b = g->b_signed ? (int8_t)rb : rb;
                s += (a - za) * (b - zb);
            }
            c[i * g->ldc + j] = (int32_t)(uint32_t)(uint64_t)s;
        }
}

static void fill(uint8_t *p, int64_t n, int mode) {
    for (int64_t i = 0; i < n; i++)
        p[i] = mode == 0 ? (uint8_t)next() : mode == 1 ? 0xFF : 0x80; /* random, 255 / -1, 128 / -128 */
}

int main(void) {
    static const int64_t sizes[][3] = {{1, 1, 1},  {5, 7, 3},   {6, 32, 4},   {7, 33, 5},  {13, 31, 17},
                                       {1, 65, 9}, {19, 3, 64}, {12, 64, 13}, {2, 97, 130}, {1, 2, 70001}};
    int ns = (int)(sizeof sizes / sizeof sizes[0]);
    int kernels = 0;
    for (int isa = 0; isa < NN_ISA_COUNT; isa++) {
        if (isa != NN_ISA_SCALAR && !nn_qgemm_has_kernel((nn_isa)isa)) continue;
        kernels++;
        for (int s = 0; s < ns; s++)
            for (int combo = 0; combo < 4; combo++)
                for (int zmode = 0; zmode < 3; zmode++)
                    for (int fillmode = 0; fillmode < 3; fillmode++) {
                        int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
                        int64_t lda = k + 3, ldb = n + 2, ldc = n + 1; /* strided views */
                        uint8_t *a = malloc((size_t)(m * lda)), *b = malloc((size_t)(k * ldb));
                        int32_t *za = malloc((size_t)m * 4), *zb = malloc((size_t)n * 4);
                        int32_t *got = calloc((size_t)(m * ldc), 4), *want = calloc((size_t)(m * ldc), 4);
                        fill(a, m * lda, fillmode);
                        fill(b, k * ldb, fillmode == 1 ? 2 : fillmode);
                        bool as = combo & 1, bs = combo & 2;
                        for (int64_t i = 0; i < m; i++)
                            za[i] = as ? (int32_t)(next() % 256) - 128 : (int32_t)(next() % 256);
                        for (int64_t j = 0; j < n; j++)
                            zb[j] = bs ? (int32_t)(next() % 256) - 128 : (int32_t)(next() % 256);
                        nn_qgemm g = {.m = m,
                                      .n = n,
                                      .k = k,
                                      .a = a,
                                      .lda = lda,
                                      .a_signed = as,
                                      .b = b,
                                      .ldb = ldb,
                                      .b_signed = bs,
                                      .za = zmode ? za : NULL,
                                      .za_per_row = zmode == 2,
                                      .zb = zmode ? zb : NULL,
                                      .zb_per_col = zmode == 2,
                                      .c = got,
                                      .ldc = ldc};
                        size_t ws = nn_qgemm_workspace(m, n, k);
                        void *w = malloc(ws);
                        nn_qgemm_run_isa(&g, w, 2, (nn_isa)isa);
                        g.c = want;
                        reference(&g, want);
                        int64_t bad = -1;
                        for (int64_t i = 0; i < m && bad < 0; i++)
                            for (int64_t j = 0; j < n; j++)
                                if (got[i * ldc + j] != want[i * ldc + j]) {
                                    bad = i * ldc + j;
                                    break;
                                }
                        /* A and B packed beforehand (weights packed at load), then the
                         * requantizing epilogue, per row and per column */
                        size_t pas = nn_qgemm_packed_a_size(m, k), pbs = nn_qgemm_packed_b_size(k, n);
                        void *pa = malloc(pas), *pb = malloc(pbs);
                        int32_t *got2 = calloc((size_t)(m * ldc), 4);
                        uint8_t *y = calloc((size_t)(m * ldc), 1);
                        float *mult = malloc((size_t)(m > n ? m : n) * 4);
                        int32_t *bias = malloc((size_t)(m > n ? m : n) * 4);
                        for (int64_t q = 0; q < (m > n ? m : n); q++) {
                            mult[q] = (float)(next() % 1000 + 1) * 1e-6f;
                            bias[q] = (int32_t)(next() % 20001) - 10000;
                        }
                        nn_qgemm_pack_a(&g, pa);
                        nn_qgemm_pack_b(&g, pb);
                        nn_qgemm g2 = g;
                        g2.c = got2;
                        g2.a_packed = (combo + fillmode) & 1 ? pa : NULL;
                        g2.b_packed = (combo + zmode) & 1 ? pb : NULL;
                        nn_qgemm_run_isa(&g2, w, 2, (nn_isa)isa);
                        bool per_col = s & 1;
                        nn_qgemm_out8 o8 = {.y = y, .ldy = ldc, .mult = mult, .bias = zmode ? bias : NULL,
                                            .per_col = per_col, .zp = as ? -3 : 7, .lo = as ? -128 : 0,
                                            .hi = as ? 127 : 255};
                        g2.out8 = &o8;
                        nn_qgemm_run_isa(&g2, w, 2, (nn_isa)isa);
                        int64_t bad2 = -1, bad8 = -1;
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t j = 0; j < n; j++) {
                                int64_t q = per_col ? j : i;
                                uint32_t v = (uint32_t)want[i * ldc + j] + (zmode ? (uint32_t)bias[q] : 0u);
                                uint8_t w8 = (uint8_t)nn_qgemm_requantize((int32_t)v, mult[q], o8.zp, o8.lo, o8.hi);
                                if (got2[i * ldc + j] != want[i * ldc + j] && bad2 < 0) bad2 = i * ldc + j;
                                if (y[i * ldc + j] != w8 && bad8 < 0) bad8 = i * ldc + j;
                            }
                        CHECK(bad2 < 0 && bad8 < 0, "%s %lldx%lldx%lld combo %d zp %d fill %d: prepacked C[%lld] or y[%lld] differs",
                              nn_isa_name((nn_isa)isa), (long long)m, (long long)n, (long long)k, combo, zmode,
                              fillmode, (long long)bad2, (long long)bad8);
                        free(pa), free(pb), free(got2), free(y), free(mult), free(bias);
                        CHECK(bad < 0, "%s %lldx%lldx%lld A %s B %s zero points %d fill %d: C[%lld] = %d, want %d",
                              nn_isa_name((nn_isa)isa), (long long)m, (long long)n, (long long)k, as ? "s8" : "u8",
                              bs ? "s8" : "u8", zmode, fillmode, (long long)bad, bad < 0 ? 0 : got[bad],
                              bad < 0 ? 0 : want[bad]);
                        free(a), free(b), free(za), free(zb), free(got), free(want), free(w);
                    }
    }
    CHECK(nn_qgemm_workspace(-1, 2, 2) == SIZE_MAX && nn_qgemm_workspace(INT64_MAX / 2, 4, 4) == SIZE_MAX,
          "absurd sizes must be refused");
    printf("qgemm: %d kernel(s) checked, active %s\n", kernels, nn_qgemm_kernel_name());
    return check_summary();
}
