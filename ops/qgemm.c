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
#include "par.h"
#include "qgemm_kernel.h"

size_t nn_qgemm_workspace(int64_t m, int64_t n, int64_t k) {
    if (m < 0 || n < 0 || k < 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return SIZE_MAX;
    int64_t k4 = nn_round_up(k, 4), mp = nn_round_up(m, QG_MR), np = nn_round_up(n, QG_NR), a, b;
    if (__builtin_mul_overflow(k4, mp, &a) || __builtin_mul_overflow(k4, np, &b)) return SIZE_MAX;
    /* + the row and column sums, and the requantizing epilogue's five row arrays (qg_rows) */
    int64_t total = nn_round_up(a, 64) + nn_round_up(b, 64) + 4 * (mp + np) + 20 * mp + 64;
    if (total < 0 || (uint64_t)total > SIZE_MAX / 2) return SIZE_MAX;
    return (size_t)total;
}

/* Bytes of a packed side: the panels, then one int32 sum per row/column. */
static int64_t packed_bytes(int64_t k, int64_t rows, int block) {
    return nn_round_up(nn_round_up(k, 4) * nn_round_up(rows, block), 64) + 4 * nn_round_up(rows, block);
}

static size_t packed_size(int64_t rows, int64_t k, int block) {
    if (rows < 0 || k < 0 || rows > INT32_MAX || k > INT32_MAX) return SIZE_MAX;
    int64_t k4 = nn_round_up(k, 4), rp = nn_round_up(rows, block), a;
    if (__builtin_mul_overflow(k4, rp, &a) || a > INT64_MAX / 4) return SIZE_MAX;
    return (size_t)packed_bytes(k, rows, block);
}

size_t nn_qgemm_packed_a_size(int64_t m, int64_t k) { return packed_size(m, k, QG_MR); }
size_t nn_qgemm_packed_b_size(int64_t k, int64_t n) { return packed_size(n, k, QG_NR); }

/* Row block blk of A as uint8 (bytes of int8 A flipped: a + 128), and each row's sum. */
static void pack_a_block(const nn_qgemm *g, int64_t k4, uint8_t *ap, int32_t *rsum, int64_t blk) {
    uint8_t flip = g->a_signed ? 0x80 : 0;
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

/* B[p][j0 ...], where it lies. */
static inline const uint8_t *b_row(const nn_qgemm *g, int64_t p, int64_t j0) {
    return g->b + (g->b_row_off ? g->b_row_off[p] : p * g->ldb) + j0;
}

/* Column panel pn of B as int8 (bytes of uint8 B flipped: b - 128), and each column's sum. */
/* Whether `isa` packs B with the AVX2 routine (same bytes as the loops below). */
static bool simd_pack(nn_isa isa) {
#if NN_HAVE_X86
    return isa >= NN_ISA_AVX2 && nn_isa_supported(NN_ISA_AVX2);
#else
    (void)isa;
    return false;
#endif
}

static void pack_b_panel(const nn_qgemm *g, int64_t k4, int8_t *bp, int32_t *csum, int64_t pn, bool simd) {
    uint8_t flip = g->b_signed ? 0 : 0x80;
    int8_t *dst = bp + pn * QG_NR * k4;
    int64_t j0 = pn * QG_NR, nc = g->n - j0 < QG_NR ? g->n - j0 : QG_NR;
    if (g->k != k4 || nc < QG_NR) memset(dst, 0, (size_t)(QG_NR * k4)); /* padding only */
    int32_t s[QG_NR] = {0};
    int64_t p0 = 0;
#if NN_HAVE_X86
    if (simd && nc == QG_NR && g->k >= 4) {
        p0 = g->k / 4 * 4;
        nn_qg_pack_b_avx2(g->b + j0, g->ldb, g->b_row_off, g->k / 4, flip, dst, s);
    }
#else
    (void)simd;
#endif
    if (nc == QG_NR) /* whole panels, four rows at a time: fixed-size loops that vectorize */
        for (; p0 + 4 <= g->k; p0 += 4) {
            const uint8_t *r0 = b_row(g, p0, j0), *r1 = b_row(g, p0 + 1, j0), *r2 = b_row(g, p0 + 2, j0),
                          *r3 = b_row(g, p0 + 3, j0);
            int8_t *d = dst + (p0 >> 2) * QG_NR * 4;
            for (int c = 0; c < QG_NR; c++) {
                int8_t v0 = (int8_t)(r0[c] ^ flip), v1 = (int8_t)(r1[c] ^ flip), v2 = (int8_t)(r2[c] ^ flip),
                       v3 = (int8_t)(r3[c] ^ flip);
                d[c * 4] = v0, d[c * 4 + 1] = v1, d[c * 4 + 2] = v2, d[c * 4 + 3] = v3;
                s[c] += v0 + v1 + v2 + v3;
            }
        }
    for (int64_t p = p0; p < g->k; p++) {
        const uint8_t *src = b_row(g, p, j0);
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

void nn_qgemm_pack_a(const nn_qgemm *g, void *dst) {
    int64_t k4 = nn_round_up(g->k, 4), blocks = nn_round_up(g->m, QG_MR) / QG_MR;
    int32_t *rsum = (int32_t *)((uint8_t *)dst + nn_round_up(k4 * blocks * QG_MR, 64));
    for (int64_t blk = 0; blk < blocks; blk++)
        pack_a_block(g, k4, dst, rsum, blk);
}

void nn_qgemm_pack_b(const nn_qgemm *g, void *dst) {
    int64_t k4 = nn_round_up(g->k, 4), panels = nn_round_up(g->n, QG_NR) / QG_NR;
    int32_t *csum = (int32_t *)((uint8_t *)dst + nn_round_up(k4 * panels * QG_NR, 64));
    for (int64_t pn = 0; pn < panels; pn++)
        pack_b_panel(g, k4, dst, csum, pn, simd_pack(nn_isa_active()));
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

/* The tile kernel for `isa` on this CPU. */
static qg_tile_fn tile_for(nn_isa isa) {
#if NN_HAVE_X86
    if (nn_isa_ext_at(isa, NN_ISA_EXT_AVX512_VNNI)) return nn_qg_tile_vnni512;
    if (isa >= NN_ISA_AVX2 && nn_isa_supported(NN_ISA_AVX2)) return nn_qg_tile_avx2;
#else
    (void)isa;
#endif
    return tile_scalar;
}

static void dw_tap_scalar(uint32_t *acc, const int16_t *src, int32_t w, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        acc[i] += (uint32_t)((int32_t)src[i] * w);
}

qg_dw_tap_fn nn_qg_dw_tap_for(nn_isa isa) {
#if NN_HAVE_X86
    if (isa >= NN_ISA_AVX512 && nn_isa_supported(NN_ISA_AVX512)) return nn_qg_dw_tap_avx512;
    if (isa >= NN_ISA_AVX2 && nn_isa_supported(NN_ISA_AVX2)) return nn_qg_dw_tap_avx2;
#else
    (void)isa;
#endif
    return dw_tap_scalar;
}

bool nn_qgemm_has_kernel(nn_isa isa) { return tile_for(isa) != tile_scalar; }

const char *nn_qgemm_kernel_name(void) {
    qg_tile_fn t = tile_for(nn_isa_active());
#if NN_HAVE_X86
    if (t == nn_qg_tile_vnni512) return "vnni512";
    if (t == nn_qg_tile_avx2) return "avx2";
#endif
    return t == tile_scalar ? "scalar" : "?";
}

/* What the tiles of column panel pn share: its columns, the zero points of
 * B and the column sums, and per-column multipliers and biases.  Made once
 * per panel where a task runs every row block against it: per tile, it
 * cost as much as the tile for pointwise convs with k of 16 to 32. */
typedef struct qg_panel {
    int64_t pn, j0, nc;
    uint32_t zb[QG_NR];
    const uint32_t *cs; /* the panel's column sums where they lie */
    float mu_col[QG_NR];
    uint32_t bias_col[QG_NR];
} qg_panel;

/* B's zero point for column j (any j when it is one), moved with B's flip
 * (qgemm.h). */
static uint32_t b_zero(const nn_qgemm *g, int64_t j) {
    return (g->zb ? (uint32_t)g->zb[g->zb_per_col ? j : 0] : 0u) - (g->b_signed ? 0u : 128u);
}

static void panel_prep(const nn_qgemm *g, bool q8, const int32_t *csum, int64_t pn, qg_panel *p) {
    p->pn = pn;
    p->j0 = pn * QG_NR;
    p->nc = g->n - p->j0 < QG_NR ? g->n - p->j0 : QG_NR;
    for (int cc = 0; cc < QG_NR; cc++)
        p->zb[cc] = b_zero(g, cc < p->nc ? p->j0 + cc : 0);
    p->cs = (const uint32_t *)csum + p->j0;
    const nn_qgemm_out8 *o = g->out8;
    if (q8 && o && o->per_col)
        for (int cc = 0; cc < QG_NR; cc++) {
            p->mu_col[cc] = cc < p->nc ? o->mult[p->j0 + cc] : 0.0f;
            p->bias_col[cc] = o->bias && cc < p->nc ? (uint32_t)o->bias[p->j0 + cc] : 0u;
        }
}

/* What the tiles read per row, made once per product (made per tile, it
 * cost a quarter of a k = 16 pointwise conv's time): za[i] with A's flip,
 * rs[i] = rowsum - k za; with a requantized output also the multiplier and
 * bias of a row, and rk[i] = bias - zb rs (qg_epi's uniform form). */
typedef struct qg_rows {
    uint32_t *za, *rs, *bias, *rk;
    float *mu;
} qg_rows;

static void rows_prep(const nn_qgemm *g, const int32_t *rsum, const qg_rows *w) {
    const nn_qgemm_out8 *o = g->out8;
    uint32_t oa = g->a_signed ? 128u : 0u, kk = (uint32_t)g->k, zb0 = b_zero(g, 0); /* used when uniform */
    for (int64_t i = 0; i < g->m; i++) {
        w->za[i] = (g->za ? (uint32_t)g->za[g->za_per_row ? i : 0] : 0u) + oa;
        w->rs[i] = (uint32_t)rsum[i] - kk * w->za[i];
        if (!o) continue;
        w->mu[i] = o->per_col ? 0.0f : o->mult[i];
        w->bias[i] = !o->per_col && o->bias ? (uint32_t)o->bias[i] : 0u;
        w->rk[i] = w->bias[i] - zb0 * w->rs[i];
    }
}

/* Tile (blk, p->pn): the kernel's raw sums, the zero-point correction, then
 * C or the requantized bytes. */
static void run_tile(const nn_qgemm *g, qg_tile_fn tile, qg_tile_q8_fn tile_q8, const uint8_t *ap, const int8_t *bp,
                     const qg_rows *w, const qg_panel *p, int64_t k4, int64_t blk) {
    /* C = S - zb[j] * (rsum[i] - k * za[i]) - za[i] * csum[j], all modulo 2^32 */
    int64_t pn = p->pn, j0 = p->j0, nc = p->nc;
    const uint32_t *zb = p->zb, *cs = p->cs;
    const nn_qgemm_out8 *o = g->out8;
    if (tile_q8 && o) { /* the kernel requantizes from its registers */
        qg_epi e = {.zb = zb,
                    .cs = cs,
                    .cols = (int)nc,
                    .zp = o->zp,
                    .lo = o->lo,
                    .hi = o->hi,
                    .uniform = !(g->zb && g->zb_per_col) && !(g->za && g->za_per_row)};
        if (o->per_col) {
            e.mu_col = p->mu_col;
            e.bias_col = p->bias_col;
        }
        int64_t i0 = blk * QG_MR;
        e.rows = (int)(g->m - i0 < QG_MR ? g->m - i0 : QG_MR);
        e.za = w->za + i0, e.rs = w->rs + i0, e.bias = w->bias + i0, e.rk = w->rk + i0, e.mu = w->mu + i0;
        e.y = o->y + i0 * o->ldy + j0;
        e.ldy = o->ldy;
        tile_q8(ap + blk * QG_MR * k4, bp + pn * QG_NR * k4, k4 / 4, &e);
        return;
    }
    int32_t acc[QG_MR * QG_NR];
    tile(ap + blk * QG_MR * k4, bp + pn * QG_NR * k4, k4 / 4, acc);
    for (int r = 0; r < QG_MR; r++) {
        int64_t i = blk * QG_MR + r;
        if (i >= g->m) break;
        uint32_t za = w->za[i], rs = w->rs[i];
        const uint32_t *a_row = (const uint32_t *)acc + r * QG_NR;
        if (!o) {
            int32_t *crow = g->c + i * g->ldc + j0;
            for (int64_t cc = 0; cc < nc; cc++)
                crow[cc] = (int32_t)(a_row[cc] - zb[cc] * rs - za * cs[cc]);
            continue;
        }
        /* two loops without branches inside, so that each vectorizes; o's
         * fields read into locals first, since a byte store may alias them */
        uint8_t *restrict yrow = o->y + i * o->ldy + j0;
        int32_t zp = o->zp, lo = o->lo, hi = o->hi;
        if (!o->per_col) {
            float mu = o->mult[i];
            uint32_t bi = o->bias ? (uint32_t)o->bias[i] : 0u;
            for (int64_t cc = 0; cc < nc; cc++) {
                uint32_t v = a_row[cc] - zb[cc] * rs - za * cs[cc] + bi;
                yrow[cc] = (uint8_t)nn_qgemm_requantize((int32_t)v, mu, zp, lo, hi);
            }
        } else {
            const float *mu = o->mult + j0;
            const int32_t *bias = o->bias;
            for (int64_t cc = 0; cc < nc; cc++) {
                uint32_t v = a_row[cc] - zb[cc] * rs - za * cs[cc] + (bias ? (uint32_t)bias[j0 + cc] : 0u);
                yrow[cc] = (uint8_t)nn_qgemm_requantize((int32_t)v, mu[cc], zp, lo, hi);
            }
        }
    }
}

/* What the tasks of nn_qgemm_run_isa read: the packed sides, their sums,
 * and pa / pb, the row blocks / column panels still to pack (0: packed). */
typedef struct qgemm_job {
    const nn_qgemm *g;
    qg_tile_fn tile;
    qg_tile_q8_fn tile_q8;
    uint8_t *ap;
    int8_t *bp;
    int32_t *rsum, *csum;
    qg_rows rows;
    int64_t k4, blocks, pa, pb;
    bool simd;
} qgemm_job;

/* Panel pn: pack it (if B is not packed), then every row block against it. */
static void qgemm_panel_task(void *ctx, int64_t pn, int seat) {
    (void)seat;
    const qgemm_job *j = ctx;
    if (j->pb) pack_b_panel(j->g, j->k4, j->bp, j->csum, pn, j->simd);
    qg_panel p;
    panel_prep(j->g, j->tile_q8 != NULL, j->csum, pn, &p);
    for (int64_t blk = 0; blk < j->blocks; blk++)
        run_tile(j->g, j->tile, j->tile_q8, j->ap, j->bp, &j->rows, &p, j->k4, blk);
}

/* Task t of the packing: row block t of A, then column panel t - pa of B. */
static void qgemm_pack_task(void *ctx, int64_t t, int seat) {
    (void)seat;
    const qgemm_job *j = ctx;
    if (t < j->pa) pack_a_block(j->g, j->k4, j->ap, j->rsum, t);
    else
        pack_b_panel(j->g, j->k4, j->bp, j->csum, t - j->pa, j->simd);
}

/* Task t of the tiles: panel t / blocks, row block t % blocks. */
static void qgemm_tile_task(void *ctx, int64_t t, int seat) {
    (void)seat;
    const qgemm_job *j = ctx;
    qg_panel p;
    panel_prep(j->g, j->tile_q8 != NULL, j->csum, t / j->blocks, &p);
    run_tile(j->g, j->tile, j->tile_q8, j->ap, j->bp, &j->rows, &p, j->k4, t % j->blocks);
}

void nn_qgemm_run_isa(const nn_qgemm *g, void *workspace, int threads, nn_isa isa) {
    if (g->m <= 0 || g->n <= 0) return;
    int64_t k4 = nn_round_up(g->k, 4), mp = nn_round_up(g->m, QG_MR), np = nn_round_up(g->n, QG_NR);
    int64_t blocks = mp / QG_MR, panels = np / QG_NR;
    uint8_t *ap = workspace;
    int8_t *bp = (int8_t *)(ap + nn_round_up(k4 * mp, 64));
    int32_t *rsum = (int32_t *)((uint8_t *)bp + nn_round_up(k4 * np, 64)), *csum = rsum + mp;
    uint32_t *rows = (uint32_t *)(csum + np); /* five arrays of mp (nn_qgemm_workspace) */
    if (g->a_packed) {
        ap = (uint8_t *)g->a_packed;
        rsum = (int32_t *)(ap + nn_round_up(k4 * mp, 64));
    }
    if (g->b_packed) {
        bp = (int8_t *)g->b_packed;
        csum = (int32_t *)((uint8_t *)bp + nn_round_up(k4 * np, 64));
    }
    qg_tile_fn tile = tile_for(isa);
    qg_tile_q8_fn tile_q8 = NULL;
    bool simd = simd_pack(isa);
#if NN_HAVE_X86
    if (tile == nn_qg_tile_vnni512) tile_q8 = nn_qg_tile_vnni512_q8;
#endif
    int64_t pa = g->a_packed ? 0 : blocks, pb = g->b_packed ? 0 : panels;
    qgemm_job j = {.g = g,
                   .tile = tile,
                   .tile_q8 = tile_q8,
                   .ap = ap,
                   .bp = bp,
                   .rsum = rsum,
                   .csum = csum,
                   .rows = {.za = rows, .rs = rows + mp, .bias = rows + 2 * mp, .rk = rows + 3 * mp,
                            .mu = (float *)(rows + 4 * mp)},
                   .k4 = k4,
                   .blocks = blocks,
                   .pa = pa,
                   .pb = pb,
                   .simd = simd};
    int par = g->m * g->n * g->k > NN_PAR_MIN ? threads : 1;
    /* With A packed already and panels enough to share: each thread packs
     * a panel of B and runs every row block against it while it is in
     * cache; panels are taken on demand and no thread waits for another
     * until the end. */
    if (pa == 0 && panels >= 4 * (int64_t)threads) {
        rows_prep(g, rsum, &j.rows);
        nn_par_for(par, panels, qgemm_panel_task, &j);
        return;
    }
    /* Otherwise the packing (both sides, one call), then the tiles, each
     * taken on demand so that a late thread delays only what it has taken. */
    if (pa + pb > 0) nn_par_for(par, pa + pb, qgemm_pack_task, &j);
    rows_prep(g, rsum, &j.rows); /* after A's row sums */
    nn_par_for(par, panels * blocks, qgemm_tile_task, &j);
}

void nn_qgemm_run(const nn_qgemm *g, void *workspace, int threads) {
    nn_qgemm_run_isa(g, workspace, threads, nn_isa_active());
}
