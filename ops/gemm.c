/* Single-precision GEMM with packed panels and per-ISA microkernels (see gemm.h).
 *
 * Blocking follows the usual recipe: K is cut into blocks of at most KC; for
 * each block a KC x NC slab of B is packed into NR-column panels (it lives in
 * L2) and each MR x NR tile of C is computed by the microkernel from an MR-row
 * panel of A and one NR-column panel of B, the A panel (MR x KC, broadcast)
 * staying in L1 while the B panels of the slab stream past it.  The first K
 * block writes C, later ones add to it, the last applies the epilogue while
 * the tile is in cache.
 *
 * Kernels (the one for nn_isa_active(); gemm_scalar.c, gemm_x86.c):
 *   avx512  14 x 32: 28 zmm accumulators, B read as 2 vectors, A broadcast
 *   avx2     6 x 16: 12 ymm accumulators
 *   scalar   OpenBLAS (single-threaded) on each task's whole block, MR 1 x NR 256
 *            (the plain-C 4 x 16 tile, the reference, stays in gemm_scalar.c) */
#include <omp.h>
#include <stdio.h>
#include "par.h"
#include <string.h>

#include "gemm_kernel.h"

const gemm_kernel *nn_gemm_kernel_at(int ki) {
    static const gemm_kernel *const kernels[GEMM_KERNEL_AMX + 1] = {
        [NN_ISA_SCALAR] = &nn_gemm_kernel_blas, /* OpenBLAS per block; nn_gemm_kernel_scalar is the reference */
#if NN_HAVE_X86
        [NN_ISA_AVX2] = &nn_gemm_kernel_avx2,
        [NN_ISA_AVX512] = &nn_gemm_kernel_avx512,
        [GEMM_KERNEL_BF16] = &nn_gemm_kernel_bf16,
        [GEMM_KERNEL_AMX] = &nn_gemm_kernel_amx,
#endif
    };
    return ki >= 0 && ki <= GEMM_KERNEL_AMX && kernels[ki] ? kernels[ki] : &nn_gemm_kernel_blas;
}

bool nn_gemm_bf16_available(void) { return nn_isa_ext_at(nn_isa_active(), NN_ISA_EXT_AVX512_BF16); }

static bool amx_off; /* nn_gemm_bf16_use_amx(false); read and written atomically */

void nn_gemm_bf16_use_amx(bool on) { __atomic_store_n(&amx_off, !on, __ATOMIC_RELAXED); }

bool nn_gemm_bf16_amx(void) {
    return !__atomic_load_n(&amx_off, __ATOMIC_RELAXED) && nn_gemm_bf16_available() &&
           nn_isa_ext_at(nn_isa_active(), NN_ISA_EXT_AMX_BF16);
}

/* AMX where it runs and every K block holds at least 16 steps: its panels
 * pad K to a multiple of 32, which fits the panel's place only then
 * (kd_pair_rows); a K that small is a few multiply-adds a column anyway. */
int nn_gemm_bf16_kernel(const nn_gemm *g) {
#if NN_HAVE_X86
    if (nn_gemm_bf16_amx() && g->k >= 32) {
        kblocks kb = k_blocks(&nn_gemm_kernel_amx, g->k);
        if (g->k - (kb.count - 1) * kb.size >= 16) return GEMM_KERNEL_AMX;
    }
#else
    (void)g;
#endif
    return GEMM_KERNEL_BF16;
}

const char *nn_gemm_kernel_name(void) { return nn_isa_name(nn_isa_active()); }

bool nn_gemm_use_kernel(const char *name) {
    nn_isa isa;
    return nn_isa_parse(name, &isa) && nn_isa_select(isa);
}

void nn_gemm_describe_blocking(char *buf, size_t size, bool compact) {
    const gemm_kernel *kd = nn_gemm_kernel_at(kernel_index());
    nn_gemm_blocking b = gemm_blocks(kd);
    const nn_cpu_caches *cc = nn_cpu_caches_get();
    if (compact) {
        snprintf(buf, size, "l1d%lld,l2%lld,l3%lld,kc%lld,mc%lld,nc%lld", (long long)cc->l1d, (long long)cc->l2,
                 (long long)cc->l3, (long long)b.kc, (long long)b.mc, (long long)b.nc);
        return;
    }
    char caches[160];
    nn_cpu_caches_describe(cc, caches, sizeof caches);
    snprintf(buf, size, "%s; GEMM %s %dx%d: KC %lld, MC %lld, NC %lld", caches, nn_isa_name(nn_isa_active()), kd->mr,
             kd->nr, (long long)b.kc, (long long)b.mc, (long long)b.nc);
}

void nn_gemm_act(float *y, int64_t n, nn_act act, float alpha, float beta) {
    nn_gemm_kernel_at(kernel_index())->act(y, n, act, alpha, beta);
}

/* ---- partition into tasks: (batch) x (M ranges) x (N ranges) */
#define MAX_MPARTS 16
#define MAX_NPARTS 64

typedef struct plan {
    const gemm_kernel *kd;
    bool a_packed, b_packed;
    /* Each thread packs the B it needs, even where an M split makes two
     * threads pack the same columns: a shared packed B makes one thread wait
     * at a barrier while the other packs (docs/perf-notes.md, "GEMM: B
     * packed per thread"). */
    bool b_in_place;                        /* the tiles read a plain B where it lies, unpacked */
    /* the M and N parts, in tiles: part i covers tiles [cut[i], cut[i + 1]) */
    int64_t mparts, nparts, mcut[MAX_MPARTS + 1], ncut[MAX_NPARTS + 1];
    int64_t tasks;
} plan;

/* Whether the tiles read a plain B unpacked.  Packing costs a read and a
 * write of every float of B per task and pays for itself when each packed
 * float serves many tiles of rows.  Up to B_IN_PLACE_MAX_ROWS rows it does
 * not, whatever B's size and K (the 1x1 convs that reduce channels, 64 to
 * 512 rows, took 0.82-0.96x the time read in place in ResNet-50 and
 * FCN-ResNet50 with B of 0.4-3.2 MB; 1024 rows were level).  Up to
 * B_IN_PLACE_SHORT_MAX_ROWS, also while B is small and its rows short (a
 * 14x14 or 7x7 plane: a tile's K rows lie close together) and its K rows
 * few: one K block, or up to B_IN_PLACE_MAX_K in several.  The limits are
 * measured (docs/perf-notes.md, "GEMM: B read in place"). */
#define B_IN_PLACE_MAX_ROWS        512
#define B_IN_PLACE_MAX_K           704
#define B_IN_PLACE_SHORT_MAX_ROWS  960
#define B_IN_PLACE_SHORT_MAX_COLS  256
#define B_IN_PLACE_SHORT_MAX_BYTES nn_cpu_l2_share(256 << 10, 1, 4)
static bool reads_b_in_place(const nn_gemm *g, const gemm_kernel *kd) {
    double b_bytes =
        (double)sizeof(float) * (double)g->k * (double)g->n * (double)batch_count(g, 0) * (double)batch_count(g, 1);
    bool few_rows = g->m <= B_IN_PLACE_MAX_ROWS;
    bool short_rows = g->m <= B_IN_PLACE_SHORT_MAX_ROWS && g->n <= B_IN_PLACE_SHORT_MAX_COLS &&
                      b_bytes <= B_IN_PLACE_SHORT_MAX_BYTES &&
                      (g->k <= gemm_blocks(kd).kc || g->k <= B_IN_PLACE_MAX_K);
    /* OpenBLAS packs B itself: a plain B is passed as it lies, whatever its size */
    return kd->b_in_place && g->b && !g->trans_b && !g->b_conv && !g->b_scale &&
           (kd->block || few_rows || short_rows);
}

/* A B read in place is K rows of a plane each (a 1x1 conv's input), and a
 * tile reads each of its K rows in turn: one stream per row, too many for
 * the processor's prefetchers to follow, so a tile that found B in another
 * core's cache or in L3 (the layer before wrote it) waited on every row.
 * The tile pulls rows toward L2 ahead of its reads (next_b): this many rows
 * ahead in its own columns, or, in a K block of at most
 * B_IN_PLACE_NEXT_TILE_K rows, where that would leave a large share of each
 * tile's first rows unfetched, the same row of the next tile's columns.  On
 * a Xeon (AMX machine, 2 threads, batch 1): MobileNetV2 0.92x, ResNet-50
 * 0.94x the time with the rows ahead (8 rows: 0.96x, 32: 0.95x), then
 * MobileNetV2 0.96x again with the next tile's for short K, whose large K
 * blocks lost by it (1024 -> 256 on 14x14: 1.10-1.14x); docs/perf-notes.md,
 * "GEMM: B read in place, pulled in ahead". */
#define B_IN_PLACE_AHEAD       16
#define B_IN_PLACE_NEXT_TILE_K 128

static bool packed_ok(const nn_gemm_packed *p, int ki, int64_t rows, int64_t k) {
    return p && p->kernel == ki && p->kc == k_blocks(nn_gemm_kernel_at(ki), k).size && p->rows == rows && p->k == k;
}

/* A tile's time relative to a full one, by its valid rows or columns: the
 * tile kernels run a ragged edge with the row count rounded up to 14, 8,
 * 4, 2 or 1 (AVX2: 6, 4, 2, 1), up to `narrow` columns (the kernel's, 0 for
 * a transposed C) with vectors down the rows (0.2: a 14x14 plane's N = 196
 * ends on a 4-column tile), and other columns that fit in half a panel with
 * half the vectors (0.55).  The scalar path runs whole blocks: all 1. */
static double tile_weight(const gemm_kernel *kd, int64_t valid, int64_t full, bool cols, int narrow) {
    if (kd->block || valid >= full) return 1.0;
    if (cols && valid <= narrow) return 0.2;
    if (cols) return valid * 2 <= full ? 0.55 : 1.0;
    return (double)(valid + 2) / (double)(full + 2);
}

/* Cut `tiles` tiles (the last with `last` valid of `full` rows or columns)
 * into `parts` contiguous parts of nearly equal weight: each cut where the
 * weight before it is nearest its share, so a light ragged tile goes with
 * a part one tile longer (N = 196 in 32-column tiles on two threads: 3 and
 * 3 + the 4-column tile, where ceil-sized parts gave 4 and 2 + it). */
static void cut_tiles(const gemm_kernel *kd, int64_t tiles, int64_t last, int64_t full, bool cols, int narrow,
                      int64_t parts, int64_t *cut) {
    double total = (double)(tiles - 1) + tile_weight(kd, last, full, cols, narrow);
    cut[0] = 0;
    for (int64_t i = 1; i <= parts; i++) {
        double share = total * (double)i / (double)parts;
        int64_t c = i == parts ? tiles : (int64_t)(share + 0.5); /* tiles before the last weigh 1 each */
        if (c > tiles - (parts - i)) c = tiles - (parts - i);    /* every part keeps a tile */
        if (c <= cut[i - 1]) c = cut[i - 1] + 1;
        cut[i] = c;
    }
}

/* What packing a float of B costs in the split's estimate, in
 * multiply-adds: read in place or pre-packed, packed plain, and packed
 * through a prologue (BN-ReLU, passes/fuse_prologue.c) by a task of a
 * split that cuts the rows.  A prologue's B is the concatenated features
 * of the layers before (DenseNet), packed again, transform and all, by
 * every row part; at the plain cost DenseNet-201's 128-row products on
 * 14x14 and 7x7 planes split their rows in two, and kept whole they took
 * 0.94-0.96x the model's time at batch 1 (the rows split's gain in
 * balance is smaller than the estimate's rounds count: its last column
 * part is a light one).  32 keeps them whole; splits of the columns alone
 * are costed as before (docs/perf-notes.md, "GEMM: a prologue's B packed
 * once"). */
#define B_COST_READY    4.0
#define B_COST_PACKED   16.0
#define B_COST_PROLOGUE 32.0

/* What a float of pre-packed weights costs, in multiply-adds, where a
 * thread fetches it from beyond its L2 (docs/perf-notes.md, "GEMM: weights
 * fetched once a seat").  At batch 1 weights come from memory on every run,
 * so each seat fetches those of the parts it touches at least once.  A
 * seat's tasks run M fastest: it cycles through the A of every row part it
 * holds for each part of the columns, and where those A parts together
 * outgrow half of L2 each of its tasks fetches its A again; the B of one
 * column part is reused by the consecutive tasks of its row parts unless
 * that part alone outgrows half of L2. */
#define FAR_COST 16.0

/* Floats of pre-packed operand a seat fetches from beyond L2: `part` floats
 * a task, `distinct` different parts in the product, `per_seat` tasks a
 * seat, `run` consecutive tasks of a seat on the same part; `l2_half` in
 * floats. */
static double far_floats(double part, int64_t distinct, int64_t per_seat, int64_t run, double l2_half) {
    double touched = (double)min64(per_seat, distinct);
    if (run > 1 ? part > l2_half : touched * part > l2_half) return (double)per_seat * part;
    return touched * part;
}

/* Choose the split that minimizes the estimated makespan, in multiply-adds:
 * rounds of `threads` tasks, a task costing its padded multiply-adds, a
 * fixed overhead, and per float of A and B it reads: streaming it through
 * the caches, or packing it where it is not pre-packed (so an M split
 * repacks B, an N split an A).  Tasks are taken on demand from contiguous
 * shares (nn_gemm_run); a third of a task is added with several threads,
 * for one that starts or finishes late (the OS took its core for a while),
 * which favours more, smaller tasks while they are cheap; and the weights
 * each seat fetches from beyond L2 (far_floats).  The parts are
 * then cut by weight (cut_tiles).  Costing the parts by weight instead
 * chose fewer, wider N parts, which stream a B read in place from L2 once
 * per tile of rows (64 -> 384 on 14x14: 1.15x the time). */
static plan make_plan(const nn_gemm *g, int threads) {
    int ki = gemm_kernel_index(g);
    plan pl = {.kd = nn_gemm_kernel_at(ki)};
    pl.a_packed = packed_ok(g->a_packed, ki, g->m, g->k) && g->a_packed->count >= batch_count(g, 1);
    pl.b_packed = packed_ok(g->b_packed, ki, g->n, g->k);
    pl.b_in_place = !pl.b_packed && reads_b_in_place(g, pl.kd);
    int64_t mr = pl.kd->mr, nr = pl.kd->nr, bt = batch_count(g, 0) * batch_count(g, 1);
    int64_t mt = (g->m + mr - 1) / mr, nt = (g->n + nr - 1) / nr, k = g->k > 0 ? g->k : 1;
    double b_cost = pl.b_packed || pl.b_in_place ? B_COST_READY : B_COST_PACKED;
    /* (image, group) products with different weights */
    int64_t a_batches = (g->stride_a[0] ? batch_count(g, 0) : 1) * (g->stride_a[1] ? batch_count(g, 1) : 1);
    int64_t b_batches = (g->stride_b[0] ? batch_count(g, 0) : 1) * (g->stride_b[1] ? batch_count(g, 1) : 1);
    double l2_half = (double)nn_cpu_l2_share(1 << 20, 1, 2) / sizeof(float);
    double best = -1;
    for (int64_t sm = 1; sm <= mt && sm <= MAX_MPARTS; sm++)
        for (int64_t sn = 1; sn <= nt && sn <= MAX_NPARTS; sn++) {
            int64_t mrange = (mt + sm - 1) / sm * mr, nrange = (nt + sn - 1) / sn * nr;
            int64_t msplit = (g->m + mrange - 1) / mrange, nsplit = (g->n + nrange - 1) / nrange;
            if (msplit != sm || nsplit != sn) continue; /* same as a smaller split */
            int64_t tasks = bt * sm * sn;
            /* a prologue's B packed again by each of several row parts */
            double task = (double)mrange * (double)nrange * (double)k +
                          (g->b_scale && sm > 1 ? B_COST_PROLOGUE : b_cost) * nrange * k +
                          (pl.a_packed ? 4.0 : 16.0) * mrange * k + 8000.0;
            int64_t per_seat = (tasks + threads - 1) / threads;
            double rounds = (double)per_seat + (threads > 1 ? 0.3 : 0.0);
            double cost = rounds * task;
            if (threads > 1) {
                if (pl.a_packed)
                    cost += FAR_COST * far_floats((double)mrange * k, sm * a_batches, per_seat, 1, l2_half);
                if (pl.b_packed)
                    cost += FAR_COST * far_floats((double)nrange * k, sn * b_batches, per_seat, sm, l2_half);
            }
            if (best < 0 || cost < best * 0.97) {
                best = cost;
                pl.mparts = sm;
                pl.nparts = sn;
                pl.tasks = tasks;
            }
        }
    cut_tiles(pl.kd, mt, g->m - (mt - 1) * mr, mr, false, 0, pl.mparts, pl.mcut);
    cut_tiles(pl.kd, nt, g->n - (nt - 1) * nr, nr, true, g->trans_c ? 0 : pl.kd->narrow, pl.nparts, pl.ncut);
    return pl;
}

/* Per-thread packing buffers: a KC x NC slab of B and a KC x MC block of A,
 * where these are not pre-packed, and a conv B's table.  Independent of the
 * split, so that a workspace sized before A was packed still fits. */
static int64_t block_cols(const nn_gemm *g, const gemm_kernel *kd) {
    return min64(nn_round_up(g->n, kd->nr), gemm_blocks(kd).nc);
}
static int64_t block_rows(const nn_gemm *g, const gemm_kernel *kd) {
    return min64(nn_round_up(g->m, kd->mr), gemm_blocks(kd).mc);
}

/* Whether each thread packs B into its own buffer. */
static bool b_buffered(const plan *pl) { return !pl->b_packed && !pl->b_in_place; }

static size_t thread_scratch_floats(const nn_gemm *g, const plan *pl) {
    const gemm_kernel *kd = pl->kd;
    kblocks kb = k_blocks(kd, g->k);
    size_t f = b_buffered(pl) ? (size_t)(kb.size * block_cols(g, kd)) : 0;
    if (!pl->a_packed) f += (size_t)(kb.size * block_rows(g, kd));
    f = (f + 15) / 16 * 16;
    if (g->b_conv) f += (nn_gemm_table_floats(g->b_conv, block_cols(g, kd)) + 15) / 16 * 16;
    return f; /* each thread's share stays 64-byte aligned */
}

void nn_gemm_split(const nn_gemm *g, int threads, int64_t *mparts, int64_t *nparts) {
    plan pl = make_plan(g, threads < 1 ? 1 : threads);
    *mparts = pl.mparts;
    *nparts = pl.nparts;
}

size_t nn_gemm_workspace(const nn_gemm *g, int threads) {
    if (threads < 1) threads = 1;
    plan pl = make_plan(g, threads);
    return sizeof(float) * thread_scratch_floats(g, &pl) * (size_t)threads + 64;
}

/* Where a thread's scratch keeps a conv table (after its B and A buffers). */
static float *table_scratch(const nn_gemm *g, const plan *pl, float *scratch) {
    kblocks kb = k_blocks(pl->kd, g->k);
    float *t = scratch + (b_buffered(pl) ? kb.size * block_cols(g, pl->kd) : 0) +
               (pl->a_packed ? 0 : kb.size * block_rows(g, pl->kd));
    return (float *)(((uintptr_t)t + 63) & ~(uintptr_t)63);
}

/* ---- running */

/* Pre-packed A of inner batch entry bi: K block p0 from row `row` (a panel
 * boundary) on; the block's panels are its kc floats deep. */
static const float *packed_a_at(const nn_gemm *g, const gemm_kernel *kd, int64_t bi, int64_t p0, int64_t row) {
    int64_t kc = min64(k_blocks(kd, g->k).size, g->k - p0);
    return g->a_packed->data + (size_t)bi * g->a_packed->stride + p0 * nn_round_up(g->m, kd->mr) + row * kc;
}

/* Likewise the pre-packed B: K block p0 from column `col` (a panel boundary) on. */
static const float *packed_b_at(const nn_gemm *g, const gemm_kernel *kd, int64_t p0, int64_t col) {
    int64_t kc = min64(k_blocks(kd, g->k).size, g->k - p0);
    return g->b_packed->data + p0 * nn_round_up(g->n, kd->nr) + col * kc;
}

/* The kernel's block hook over C rows [mb, mb + mc) x columns [nb, nb + nc)
 * of one K block: A's block ablk, B's bblk (in place, or NR panels). */
static void run_block(const nn_gemm *g, const plan *pl, tile_args *t, const float *ablk, const float *bblk, float *c,
                      const float *bias, const float *res, int64_t mb, int64_t mc, int64_t nb, int64_t nc) {
    const gemm_kernel *kd = pl->kd;
    for (int64_t jr = 0; jr < nc; jr += kd->nr) {
        int64_t col = nb + jr;
        t->a = ablk;
        t->b = pl->b_in_place ? bblk + jr : bblk + jr * t->kc;
        t->c = c + (g->trans_c ? col * g->ldc + mb : mb * g->ldc + col);
        t->res = res ? res + (g->trans_c ? col * g->ldr + mb : mb * g->ldr + col) : NULL;
        t->mr = (int)mc;
        t->nr = (int)min64(kd->nr, nc - jr);
        t->bias_row = bias && g->bias_kind == NN_GEMM_BIAS_ROW ? bias + mb : NULL;
        t->bias_col = bias && g->bias_kind == NN_GEMM_BIAS_COL ? bias + col : NULL;
        kd->block(t);
        if (!t->last || nn_act_has_vec(g->act)) continue;
        int lines = g->trans_c ? t->nr : t->mr, len = g->trans_c ? t->mr : t->nr;
        for (int i = 0; i < lines; i++)
            kd->act(t->c + i * g->ldc, len, g->act, g->act_alpha, g->act_beta);
    }
}

/* For the tile of rows at ir (of mc rows) over the pre-packed panel at
 * column jr (of a block of nc from nb) in K block p0: its 1/T share of the
 * next panel (T the block's tiles of rows), or of the next K block's first
 * panel after the block's last, as next_b stepping next_b_ld floats a K
 * step (run_task). */
static void next_b_panel(const nn_gemm *g, const gemm_kernel *kd, tile_args *t, int64_t p0, int64_t nb, int64_t jr,
                         int64_t nc, int64_t ir, int64_t mc) {
    int64_t nr = kd->nr, tiles = (mc + kd->mr - 1) / kd->mr, kc = t->kc, kn = kc;
    const float *next = t->b + nr * kc;
    if (jr + nr >= nc) {
        if (p0 + kc >= g->k) {
            t->next_b_ld = 0; /* the task's last panel: nothing to pull in */
            return;
        }
        kn = min64(k_blocks(kd, g->k).size, g->k - p0 - kc);
        next = packed_b_at(g, kd, p0 + kc, nb);
    }
    /* a pairs kernel's panel fills the first half of its place (kd_pair_rows) */
    int64_t floats = kd->pairs ? kd_pair_rows(kd, kn) * nr : kn * nr, per_step = kd->pairs ? nr / 2 : nr;
    t->next_b = next + ir / kd->mr * (floats / tiles);
    t->next_b_ld = (per_step + tiles - 1) / tiles;
}

/* One task: C rows [m0, m1) x columns [n0, n1) of batch entry (bo, bi). */
static void run_task(const nn_gemm *g, const plan *pl, int64_t bo, int64_t bi, int64_t m0, int64_t m1, int64_t n0,
                     int64_t n1, float *scratch) {
    const gemm_kernel *kd = pl->kd;
    int mr = kd->mr, nr = kd->nr;
    kblocks kb = k_blocks(kd, g->k);
    nn_gemm_blocking blk = gemm_blocks(kd);
    /* a or b is NULL when the operand comes pre-packed (no offset on a null pointer) */
    const float *a = g->a ? g->a + bo * g->stride_a[0] + bi * g->stride_a[1] : NULL;
    const float *b = g->b ? g->b + bo * g->stride_b[0] + bi * g->stride_b[1] : NULL;
    int64_t coff = bo * g->stride_c[0] + bi * g->stride_c[1];
    float *c = g->c + coff;
    const float *res = g->residual ? g->residual + coff : NULL;
    const float *bias =
        g->bias_kind != NN_GEMM_BIAS_NONE && g->bias ? g->bias + bo * g->stride_bias[0] + bi * g->stride_bias[1] : NULL;
    bool post_act = !nn_act_has_vec(g->act);
    float *bbuf = scratch, *abuf = bbuf + (b_buffered(pl) ? kb.size * block_cols(g, kd) : 0);
    float *tbuf = table_scratch(g, pl, scratch);
    conv_table table;
    tile_args t = {.ldb = pl->b_in_place ? g->ldb : nr,
                   .ldc = g->ldc,
                   .ldr = g->ldr,
                   .trans_c = g->trans_c,
                   .act = post_act ? NN_ACT_NONE : g->act,
                   .alpha = g->act_alpha,
                   .beta = g->act_beta};
    for (int64_t nb = n0; nb < n1; nb += blk.nc) {
        int64_t nc = min64(blk.nc, n1 - nb);
        if (g->b_conv) nn_gemm_table_build(g->b_conv, nb, nc, nn_round_up(nc, nr), tbuf, &table);
        int64_t p0 = 0;
        do {
            int64_t kc = min64(kb.size, g->k - p0);
            const float *bblk = bbuf;
            if (pl->b_packed)
                bblk = packed_b_at(g, kd, p0, nb);
            else if (pl->b_in_place)
                bblk = b + p0 * g->ldb + nb;
            else
                nn_gemm_pack_b_panels(kd, g, b, g->b_conv ? &table : NULL, p0, kc, nb, nc, bbuf);
            t.kc = kc;
            t.load_c = g->accumulate || p0 > 0;
            t.last = p0 + kc >= g->k;
            for (int64_t mb = m0; mb < m1; mb += blk.mc) {
                int64_t mc = min64(blk.mc, m1 - mb);
                const float *ablk = abuf;
                if (pl->a_packed)
                    ablk = packed_a_at(g, kd, bi, p0, mb);
                else
                    nn_gemm_pack_a_panels(kd, g, a, p0, kc, mb, mc, abuf);
                if (kd->block) { /* the whole block at once, a panel of B at a time (gemm_scalar.c) */
                    run_block(g, pl, &t, ablk, bblk, c, bias, res, mb, mc, nb, nc);
                    continue;
                }
                /* A pre-packed B is weights (a transposed-C conv's, a
                 * MatMul's constant B), megabytes read from memory once per
                 * run.  In the task's first block of rows (later ones find
                 * the slab in L2 and keep the old order, which reads less
                 * from L2) its panels go outside and the tiles of rows inside,
                 * and each of a panel's tiles of rows pulls in its share of
                 * the next panel (next_b_panel): the weights stream in
                 * evenly through the product.  Panels inside, the first tile
                 * of rows read them all from memory while the others read
                 * them from L2, the one waiting on memory and the memory
                 * idle for the rest; docs/perf-notes.md, "GEMM: pre-packed
                 * weights streamed through the product". */
                bool cols_outer = pl->b_packed && mb == m0;
                int64_t outer = cols_outer ? nc : mc, inner = cols_outer ? mc : nc;
                int64_t ostep = cols_outer ? nr : mr, istep = cols_outer ? mr : nr;
                for (int64_t o = 0; o < outer; o += ostep)
                    for (int64_t in = 0; in < inner; in += istep) {
                        int64_t ir = cols_outer ? in : o, jr = cols_outer ? o : in;
                        /* Pre-packed weights come from memory once per run, and at a
                         * few tiles of columns (N = 49 at ResNet-50's 7x7 stage)
                         * the processor's own prefetch left the tile waiting on
                         * them: the next panel (the task's rows are consecutive
                         * panels, then the next K block's) is pulled in ahead. */
                        const float *next_a = ablk + ir * kc; /* none, or packed here: already in cache */
                        if (pl->a_packed && mb + ir + mr < m1)
                            next_a = ablk + (ir + mr) * kc;
                        else if (pl->a_packed && p0 + kc < g->k)
                            next_a = packed_a_at(g, kd, bi, p0 + kc, m0);
                        int64_t row = mb + ir, col = nb + jr;
                        t.a = ablk + ir * kc;
                        t.next_a = next_a;
                        t.b = pl->b_in_place ? bblk + jr : bblk + jr * kc;
                        t.next_b = t.b; /* packed here: in cache */
                        t.next_b_ld = 0;
                        if (pl->b_in_place) {
                            t.next_b = kc <= B_IN_PLACE_NEXT_TILE_K ? t.b + nr : t.b + B_IN_PLACE_AHEAD * g->ldb;
                            t.next_b_ld = g->ldb;
                        } else if (cols_outer)
                            next_b_panel(g, kd, &t, p0, nb, jr, nc, ir, mc);
                        int64_t c_at = g->trans_c ? col * g->ldc + row : row * g->ldc + col;
                        int64_t r_at = g->trans_c ? col * g->ldr + row : row * g->ldr + col;
                        t.c = c + c_at;
                        t.mr = (int)min64(mr, mc - ir);
                        t.nr = (int)min64(nr, nc - jr);
                        t.bias_row = bias && g->bias_kind == NN_GEMM_BIAS_ROW ? bias + row : NULL;
                        t.bias_col = bias && g->bias_kind == NN_GEMM_BIAS_COL ? bias + col : NULL;
                        t.res = res ? res + r_at : NULL;
                        kd->tile(&t);
                        /* a row of C (a column of a transposed one) at a time */
                        int lines = g->trans_c ? t.nr : t.mr, len = g->trans_c ? t.mr : t.nr;
                        for (int i = 0; t.last && post_act && i < lines; i++)
                            kd->act(t.c + i * g->ldc, len, g->act, g->act_alpha, g->act_beta);
                    }
            }
            p0 += kc;
        } while (p0 < g->k);
    }
}

/* Matrix-vector products (one output row or column): no packing, the
 * operand is streamed once with the kernel's dot / axpy.  Output element e
 * of batch entry (bo, bi) sits at C offset e * step. */
static bool gemv_shape(const nn_gemm *g) {
    /* an operand only packed, or B through a prologue: the panel path */
    if (g->b_conv || g->trans_a || g->trans_c || !g->a || !g->b || g->b_scale) return false;
    if (g->n == 1) return g->trans_b || g->ldb == 1 || g->k <= 1;
    return g->m == 1;
}

typedef struct gemv_job {
    const nn_gemm *g;
    const gemm_kernel *kd;
    const float *a, *b, *bias, *res;
    float *c;
    int64_t len, step, tasks;
    bool cols, axpy;
} gemv_job;

static void gemv_task(void *ctx, int64_t task, int seat) {
    (void)seat;
    const gemv_job *w = ctx;
    const nn_gemm *g = w->g;
    const gemm_kernel *kd = w->kd;
    const float *a = w->a, *b = w->b, *bias = w->bias, *res = w->res;
    float *c = w->c;
    int64_t len = w->len, step = w->step, lo, hi;
    bool cols = w->cols, axpy = w->axpy;
    nn_par_range(len, w->tasks, task, &lo, &hi);
    if (axpy) { /* C[0, j] = sum_p a[p] B[p, j]: rows of B, contiguous */
        for (int64_t j = lo; j < hi; j++)
            c[j] = g->accumulate ? c[j] : 0.0f;
        for (int64_t p = 0; p < g->k && hi > lo; p++)
            kd->axpy(c + lo, g->alpha * a[p], b + p * g->ldb + lo, hi - lo);
    }
    /* the other form: each output a row of A (or of a transposed B) dotted
     * with the vector, DOT_ROWS rows streamed side by side: one row at a
     * time left AlexNet's 150 MB Gemm at 22 GB/s, eight at once reach 29 */
    const float *vec = cols ? b : a, *rows = cols ? a : b;
    int64_t ld = cols ? g->lda : g->ldb;
    float dots[DOT_ROWS] = {0};
    for (int64_t e2 = lo; e2 < hi; e2++) {
        float *y = c + e2 * step, v;
        if (axpy)
            v = *y;
        else {
            int64_t q = (e2 - lo) % DOT_ROWS;
            if (q == 0) kd->dot(vec, rows + e2 * ld, ld, g->k, (int)min64(DOT_ROWS, hi - e2), dots);
            v = g->alpha * dots[q];
            if (g->accumulate) v += *y;
        }
        if (bias) v += bias[g->bias_kind == NN_GEMM_BIAS_ROW ? (cols ? e2 : 0) : (cols ? 0 : e2)];
        if (res) v += res[cols ? e2 * g->ldr : e2];
        *y = v;
    }
    if (step == 1)
        kd->act(c + lo, hi - lo, g->act, g->act_alpha, g->act_beta);
    else
        for (int64_t e2 = lo; e2 < hi; e2++)
            kd->act(c + e2 * step, 1, g->act, g->act_alpha, g->act_beta);
}

static void gemv(const nn_gemm *g, int threads) {
    const gemm_kernel *kd = nn_gemm_kernel_at(kernel_index());
    bool cols = g->n == 1; /* one column: C[i] = A[i,:] . b */
    int64_t len = cols ? g->m : g->n, step = cols ? g->ldc : 1, bt = batch_count(g, 0) * batch_count(g, 1);
    for (int64_t e = 0; e < bt; e++) {
        int64_t bo = e / batch_count(g, 1), bi = e % batch_count(g, 1);
        const float *a = g->a + bo * g->stride_a[0] + bi * g->stride_a[1];
        const float *b = g->b + bo * g->stride_b[0] + bi * g->stride_b[1];
        int64_t coff = bo * g->stride_c[0] + bi * g->stride_c[1];
        float *c = g->c + coff;
        const float *res = g->residual ? g->residual + coff : NULL;
        const float *bias = g->bias_kind != NN_GEMM_BIAS_NONE && g->bias
                                ? g->bias + bo * g->stride_bias[0] + bi * g->stride_bias[1]
                                : NULL;
        gemv_job j = {.g = g, .kd = kd, .a = a, .b = b, .bias = bias, .res = res, .c = c, .len = len, .step = step,
                      .cols = cols, .axpy = !cols && !g->trans_b};
        j.tasks = threads > 1 && len * g->k > NN_PAR_MIN ? nn_par_tasks(len, 64, threads) : 1;
        nn_par_for(threads, j.tasks, gemv_task, &j);
    }
}

typedef struct gemm_job {
    const nn_gemm *g;
    const plan *pl;
    float *base;
    size_t per_thread;
    int64_t bin, per_batch;
} gemm_job;

static void gemm_task(void *ctx, int64_t task, int seat) {
    const gemm_job *j = ctx;
    const nn_gemm *g = j->g;
    const plan *pl = j->pl;
    int64_t e = task / j->per_batch, r = task % j->per_batch;
    int64_t mi = r % pl->mparts, ni = r / pl->mparts, mr = pl->kd->mr, nr = pl->kd->nr;
    run_task(g, pl, e / j->bin, e % j->bin, pl->mcut[mi] * mr, min64(g->m, pl->mcut[mi + 1] * mr), pl->ncut[ni] * nr,
             min64(g->n, pl->ncut[ni + 1] * nr), j->base + j->per_thread * (size_t)seat);
}

/* The tasks are taken on demand (ops/par.h): a claim is one
 * compare-and-swap, tens of nanoseconds, where OpenMP's dynamic hand-out
 * cost about 170 (docs/perf-notes.md, "GEMM: tasks dealt, not handed
 * out"), and a thread the OS has not scheduled leaves its tasks to the
 * others instead of stalling the product. */
bool nn_gemm_run(const nn_gemm *g, void *workspace, size_t workspace_size, int threads) {
    if (threads < 1) threads = 1;
    if (g->m <= 0 || g->n <= 0) return true;
    if (g->b_scale && (!g->b_shift || !g->b || g->trans_b || g->b_packed || g->b_conv ||
                       (g->b_act != NN_ACT_NONE && g->b_act != NN_ACT_RELU)))
        return false;
    if (gemv_shape(g)) {
        gemv(g, threads);
        return true;
    }
    plan pl = make_plan(g, threads);
    if ((!pl.a_packed && !g->a) || (!pl.b_packed && !g->b)) return false; /* packed for another kernel */
    size_t per_thread = thread_scratch_floats(g, &pl);
    if (workspace_size < sizeof(float) * per_thread * (size_t)threads + 64) return false;
    float *base = (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    int64_t bin = batch_count(g, 1), per_batch = pl.mparts * pl.nparts;
    double flops = (double)g->m * (double)g->n * (double)g->k * (double)(batch_count(g, 0) * bin);
    gemm_job j = {.g = g, .pl = &pl, .base = base, .per_thread = per_thread, .bin = bin, .per_batch = per_batch};
    nn_par_for(threads > 1 && flops > 1e5 ? threads : 1, pl.tasks, gemm_task, &j);
    return true;
}
