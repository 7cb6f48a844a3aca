/* Packing the GEMM's operands into the panels its kernels read
 * (gemm_kernel.h), ahead of time (nn_gemm_pack_*) or per block while a
 * product runs, and the implicit im2col's table. */
#include "gemm_kernel.h"
#include "par.h"

static int64_t conv_taps(const nn_gemm_conv *cv) {
    int64_t t = 1;
    for (int d = 0; d < cv->nsp; d++)
        t *= cv->kernel[d];
    return t;
}

/* Scratch floats for a table over `ncp` columns. */
size_t nn_gemm_table_floats(const nn_gemm_conv *cv, int64_t ncp) {
    int64_t taps = conv_taps(cv), nvec = ncp / VEC;
    return (size_t)(taps * ncp + taps * nvec * (int64_t)(sizeof(vec_desc) / sizeof(float)) + (cv->nsp + 1) * ncp);
}

/* The runs of one vector's indices, each lane `step` floats on from the
 * last (1 or 2). */
static void classify(const int32_t *idx, int step, vec_desc *d) {
    int runs = 0;
    *d = (vec_desc){.kind = step == 2 ? VEC_RUNS_STEP2 : VEC_RUNS}; /* unused runs: empty masks, offset 0 */
    for (int j = 0; j < VEC;) {
        if (idx[j] < 0) {
            j++;
            continue;
        }
        if (runs == 2) {
            d->kind = VEC_GATHER;
            return;
        }
        int start = j;
        while (j + 1 < VEC && idx[j + 1] == idx[j] + step)
            j++;
        j++;
        d->off[runs] = idx[start] - step * start;
        d->mask[runs] = (uint16_t)(((1u << j) - 1) & ~((1u << start) - 1));
        for (int lane = start; step == 2 && lane < j; lane++) /* it reads float 2 * lane of the 32 at off */
            d->wide[runs][lane / 8] |= (uint16_t)(1u << (2 * lane % VEC));
        runs++;
    }
}

/* The table for columns [n0, n0 + nc), padded with zero columns to ncp (a
 * multiple of VEC); `mem` holds nn_gemm_table_floats(cv, ncp) floats.  Plane
 * offsets fit int32 (conv checks the plane size). */
void nn_gemm_table_build(const nn_gemm_conv *cv, int64_t n0, int64_t nc, int64_t ncp, float *mem, conv_table *t) {
    int nsp = cv->nsp;
    t->taps = conv_taps(cv);
    t->nvec = ncp / VEC;
    t->in_size = 1;
    for (int d = 0; d < nsp; d++)
        t->in_size *= cv->in[d];
    t->idx = (int32_t *)mem;
    t->desc = (vec_desc *)(t->idx + t->taps * ncp);
    /* per column: the input index of tap 0 along each dim, and its plane offset */
    int32_t *first = (int32_t *)(t->desc + t->taps * t->nvec), *base = first + nsp * ncp;
    int64_t pos[NN_GEMM_CONV_DIMS], rest = n0;
    for (int d = nsp - 1; d >= 0; d--) {
        pos[d] = rest % cv->out[d];
        rest /= cv->out[d];
    }
    for (int64_t j = 0; j < ncp; j++) {
        int64_t at = 0;
        for (int d = 0; d < nsp; d++) {
            int64_t i = pos[d] * cv->stride[d] - cv->pad[d];
            first[d * ncp + j] = j < nc ? (int32_t)i : INT32_MIN / 2; /* padding columns: far outside */
            at = at * cv->in[d] + i;
        }
        base[j] = j < nc ? (int32_t)at : 0;
        for (int d = nsp - 1; d >= 0 && j < nc; d--) {
            if (++pos[d] < cv->out[d]) break;
            pos[d] = 0;
        }
    }
    /* wider strides never form runs: every vector gathers */
    int step = (int)cv->stride[nsp - 1];
    for (int64_t tap = 0; tap < t->taps; tap++) {
        int32_t k[NN_GEMM_CONV_DIMS], shift = 0;
        int64_t r = tap;
        for (int d = nsp - 1; d >= 0; d--) {
            k[d] = (int32_t)(r % cv->kernel[d] * cv->dilation[d]);
            r /= cv->kernel[d];
        }
        for (int d = 0; d < nsp; d++)
            shift = shift * (int32_t)cv->in[d] + k[d];
        int32_t *restrict idx = t->idx + tap * ncp;
        for (int64_t j = 0; j < ncp; j++)
            idx[j] = base[j] + shift;
        for (int d = 0; d < nsp; d++) { /* outside along d: all bits set, -1 */
            const int32_t *restrict f = first + d * ncp;
            uint32_t kd = (uint32_t)k[d], in = (uint32_t)cv->in[d];
            for (int64_t j = 0; j < ncp; j++)
                idx[j] |= -(int32_t)((uint32_t)f[j] + kd >= in);
        }
        vec_desc *desc = t->desc + tap * t->nvec;
        for (int64_t v = 0; v < t->nvec; v++) {
            if (step > 2)
                desc[v] = (vec_desc){.kind = VEC_GATHER};
            else
                classify(idx + v * VEC, step, &desc[v]);
        }
    }
}

/* ---- a conv's im2col matrix as a packed, transposed A (gemm.h) */

static int64_t conv_positions(const nn_gemm_conv *cv) {
    int64_t n = 1;
    for (int d = 0; d < cv->nsp; d++)
        n *= cv->out[d];
    return n;
}

/* The scratch of nn_gemm_pack_conv_a past the packed A: the index table,
 * then per thread one K block of the im2col matrix, rows of ld floats. */
typedef struct conv_a_layout {
    const gemm_kernel *kd;
    kblocks kb;
    int64_t ld, mp;                     /* im2col row; rows of A rounded to MR */
    size_t packed, table, block, total; /* floats */
} conv_a_layout;

static conv_a_layout conv_a_layout_of(const nn_gemm *g, const nn_gemm_conv *cv, int threads) {
    conv_a_layout l = {.kd = nn_gemm_kernel_at(gemm_kernel_index(g))};
    l.kb = k_blocks(l.kd, g->k);
    l.ld = nn_round_up(conv_positions(cv), VEC);
    l.mp = nn_round_up(g->m, l.kd->mr);
    l.packed = (size_t)nn_round_up(l.mp * g->k, 16);
    l.table = (size_t)nn_round_up((int64_t)nn_gemm_table_floats(cv, l.ld), 16);
    l.block = (size_t)(l.kb.size * l.ld);
    l.total = l.packed + l.table + (size_t)(threads < 1 ? 1 : threads) * l.block;
    return l;
}

size_t nn_gemm_conv_a_bytes(const nn_gemm *g, const nn_gemm_conv *cv, int threads) {
    return sizeof(float) * conv_a_layout_of(g, cv, threads).total + 64;
}

typedef struct conv_a_job {
    const nn_gemm *g;
    const conv_a_layout *l;
    const conv_table *t;
    const gemm_kernel *fp32; /* its im2col packer (the bf16 family's packs pairs) */
    const float *x;
    float *packed, *blocks;
} conv_a_job;

/* K block `task`: its rows of the im2col matrix into the thread's block,
 * then packed into MR panels where the packed A keeps that block. */
static void conv_a_block(void *ctx, int64_t task, int seat) {
    const conv_a_job *j = ctx;
    const conv_a_layout *l = j->l;
    int64_t p0 = task * l->kb.size, kc = min64(l->kb.size, j->g->k - p0);
    float *block = j->blocks + (size_t)seat * l->block;
    j->fp32->pack_conv(j->t, j->x, p0, kc, (int)l->ld, block);
    nn_gemm view = *j->g;
    view.a = block;
    view.lda = l->ld;
    nn_gemm_pack_a_panels(l->kd, &view, block, 0, kc, 0, j->g->m, j->packed + p0 * l->mp);
}

bool nn_gemm_pack_conv_a(const nn_gemm *g, const nn_gemm_conv *cv, const float *x, void *mem, size_t size, int threads,
                         nn_gemm_packed *out) {
    if (threads < 1) threads = 1;
    conv_a_layout l = conv_a_layout_of(g, cv, threads);
    if (!g->trans_a || g->m != conv_positions(cv) || g->k != cv->channels * conv_taps(cv) ||
        size < sizeof(float) * l.total + 64)
        return false;
    float *base = (float *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    conv_table t;
    nn_gemm_table_build(cv, 0, g->m, l.ld, base + l.packed, &t);
    conv_a_job j = {.g = g,
                    .l = &l,
                    .t = &t,
                    .fp32 = nn_gemm_kernel_at(kernel_index()),
                    .x = x,
                    .packed = base,
                    .blocks = base + l.packed + l.table};
    nn_par_for(g->m * g->k > NN_PAR_MIN ? threads : 1, l.kb.count, conv_a_block, &j);
    *out = (nn_gemm_packed){.kernel = gemm_kernel_index(g),
                            .kc = (int)l.kb.size,
                            .rows = g->m,
                            .k = g->k,
                            .count = 1,
                            .stride = (size_t)(l.mp * g->k),
                            .data = base};
    return true;
}

/* ---- packing */

/* One row of A or column of B, kc values `step` floats apart (NULL: a
 * padding one, zeros), scaled, as `pairs` bf16 pairs (gemm_kernel.h; those
 * past kc zero) every `stride` words of d: the portable packer, for
 * weights at load and transposed operands. */
static void pack_pairs(const float *src, int64_t step, int64_t kc, int64_t pairs, float scale, int64_t stride,
                       uint32_t *d) {
    for (int64_t p = 0; p < 2 * pairs; p += 2, d += stride) {
        float lo = src && p < kc ? scale * src[p * step] : 0.0f;
        float hi = src && p + 1 < kc ? scale * src[(p + 1) * step] : 0.0f;
        *d = bf16_pair(lo, hi);
    }
}

/* B rows [p0, p0 + kc) x columns [n0, n0 + nc) into NR panels at dst (the
 * last panel zero-padded).  A conv B needs the block's table. */
void nn_gemm_pack_b_panels(const gemm_kernel *kd, const nn_gemm *g, const float *b, const conv_table *table, int64_t p0,
                           int64_t kc, int64_t n0, int64_t nc, float *dst) {
    int nr = kd->nr;
    int64_t panel = kc * nr, ncp = nn_round_up(nc, nr);
    if (table) {
        kd->pack_conv(table, b, p0, kc, nr, dst);
    } else if (g->trans_b && kd->pairs) {
        for (int64_t j = 0; j < ncp; j++)
            pack_pairs(j < nc ? b + (n0 + j) * g->ldb + p0 : NULL, 1, kc, kd_pair_rows(kd, kc), 1.0f, nr,
                       (uint32_t *)(dst + j / nr * panel) + j % nr);
    } else if (g->trans_b) {
        for (int64_t j = 0; j < ncp; j++) {
            float *d = dst + j / nr * panel + j % nr;
            const float *src = b + (n0 + j) * g->ldb + p0;
            if (j < nc)
                for (int64_t p = 0; p < kc; p++)
                    d[p * nr] = src[p];
            else
                for (int64_t p = 0; p < kc; p++)
                    d[p * nr] = 0.0f;
        }
    } else {
        b_prologue pr = {0};
        if (g->b_scale) pr = (b_prologue){g->b_scale + p0, g->b_shift + p0, g->b_act == NN_ACT_RELU};
        kd->pack_plain(b + p0 * g->ldb + n0, g->ldb, kc, nc, nr, dst, g->b_scale ? &pr : NULL);
    }
}

/* A rows [m0, m0 + mc) x K [p0, p0 + kc), scaled by alpha, into MR panels. */
void nn_gemm_pack_a_panels(const gemm_kernel *kd, const nn_gemm *g, const float *a, int64_t p0, int64_t kc, int64_t m0,
                           int64_t mc, float *dst) {
    int mr = kd->mr;
    int64_t mcp = nn_round_up(mc, mr), pairs = kd_pair_rows(kd, kc);
    if (g->trans_a && g->alpha == 1.0f && !kd->a_rows) { /* A's storage is B's layout: a K row holds a row of each panel */
        kd->pack_plain(a + p0 * g->lda + m0, g->lda, kc, mc, mr, dst, NULL);
        return;
    }
    for (int64_t i = 0; i < mcp && kd->pairs; i++) {
        const float *src = g->trans_a ? a + p0 * g->lda + m0 + i : a + (m0 + i) * g->lda + p0;
        uint32_t *panel = (uint32_t *)(dst + i / mr * mr * kc);
        if (kd->a_rows) /* row i % mr of its panel: its pairs contiguous */
            pack_pairs(i < mc ? src : NULL, g->trans_a ? g->lda : 1, kc, pairs, g->alpha, 1, panel + i % mr * pairs);
        else
            pack_pairs(i < mc ? src : NULL, g->trans_a ? g->lda : 1, kc, pairs, g->alpha, mr, panel + i % mr);
    }
    if (kd->pairs) return;
    if (!g->trans_a) {
        if (kd->pack_rows)
            kd->pack_rows(a + m0 * g->lda + p0, g->lda, kc, mc, g->alpha, dst);
        else
            pack_rows_body(a + m0 * g->lda + p0, g->lda, kc, mc, g->alpha, mr, dst);
        return;
    }
    for (int64_t i = 0; i < mcp; i++) { /* a transposed A scaled by alpha */
        float *d = dst + i / mr * mr * kc + i % mr;
        const float *src = a + p0 * g->lda + m0 + i;
        for (int64_t p = 0; p < kc; p++)
            d[p * mr] = i < mc ? g->alpha * src[p * g->lda] : 0.0f;
    }
}

size_t nn_gemm_pack_a_floats(const nn_gemm *g) {
    const gemm_kernel *kd = nn_gemm_kernel_at(gemm_kernel_index(g));
    return (size_t)(batch_count(g, 1) * nn_round_up(g->m, kd->mr) * g->k);
}

size_t nn_gemm_pack_b_floats(const nn_gemm *g) {
    const gemm_kernel *kd = nn_gemm_kernel_at(gemm_kernel_index(g));
    return (size_t)(nn_round_up(g->n, kd->nr) * g->k);
}

/* Packed layouts: K block kb starts at kb * kcs * (rows rounded to the panel
 * height); inside it panel q starts at q * panel height * kc.  So a block of
 * panels starting at row r0 is contiguous: r0 * kc floats into the K block. */
/* The header packing `g`'s A (or B) gives with the current kernel. */
static nn_gemm_packed packed_a_layout(const nn_gemm *g) {
    int ki = gemm_kernel_index(g);
    int64_t mp = nn_round_up(g->m, nn_gemm_kernel_at(ki)->mr);
    return (nn_gemm_packed){.kernel = ki,
                            .kc = (int)k_blocks(nn_gemm_kernel_at(ki), g->k).size,
                            .rows = g->m,
                            .k = g->k,
                            .count = batch_count(g, 1),
                            .stride = (size_t)(mp * g->k)};
}

static nn_gemm_packed packed_b_layout(const nn_gemm *g) {
    int ki = gemm_kernel_index(g);
    int64_t np = nn_round_up(g->n, nn_gemm_kernel_at(ki)->nr);
    return (nn_gemm_packed){.kernel = ki,
                            .kc = (int)k_blocks(nn_gemm_kernel_at(ki), g->k).size,
                            .rows = g->n,
                            .k = g->k,
                            .count = 1,
                            .stride = (size_t)(np * g->k)};
}

void nn_gemm_pack_a(const nn_gemm *g, float *mem, nn_gemm_packed *out) {
    const gemm_kernel *kd = nn_gemm_kernel_at(gemm_kernel_index(g));
    int64_t mp = nn_round_up(g->m, kd->mr);
    kblocks kb = k_blocks(kd, g->k);
    *out = packed_a_layout(g);
    out->data = mem;
    for (int64_t bi = 0; bi < out->count; bi++)
        for (int64_t p0 = 0; p0 < g->k; p0 += kb.size)
            nn_gemm_pack_a_panels(kd, g, g->a + bi * g->stride_a[1], p0, min64(kb.size, g->k - p0), 0, g->m,
                                  mem + bi * out->stride + p0 * mp);
}

void nn_gemm_pack_b(const nn_gemm *g, float *mem, nn_gemm_packed *out) {
    const gemm_kernel *kd = nn_gemm_kernel_at(gemm_kernel_index(g));
    int64_t np = nn_round_up(g->n, kd->nr);
    kblocks kb = k_blocks(kd, g->k);
    *out = packed_b_layout(g);
    out->data = mem;
    for (int64_t p0 = 0; p0 < g->k; p0 += kb.size)
        nn_gemm_pack_b_panels(kd, g, g->b, NULL, p0, min64(kb.size, g->k - p0), 0, g->n, mem + p0 * np);
}

_Static_assert(sizeof(nn_gemm_packed) <= NN_GEMM_BLOCK_DATA, "packed header must fit before the data");

size_t nn_gemm_pack_a_block_bytes(const nn_gemm *g) {
    return NN_GEMM_BLOCK_DATA + sizeof(float) * nn_gemm_pack_a_floats(g);
}
size_t nn_gemm_pack_b_block_bytes(const nn_gemm *g) {
    return NN_GEMM_BLOCK_DATA + sizeof(float) * nn_gemm_pack_b_floats(g);
}

static void store_block_header(void *block, nn_gemm_packed p) {
    /* Field by field into zeroed bytes: the padding after `kernel` would carry
     * stack garbage into the plan cache.  `data` stays NULL: its place is
     * implied, the block may move. */
    nn_gemm_packed header;
    memset(&header, 0, sizeof header);
    header.kernel = p.kernel;
    header.kc = p.kc;
    header.rows = p.rows;
    header.k = p.k;
    header.count = p.count;
    header.stride = p.stride;
    memcpy(block, &header, sizeof header);
}

void nn_gemm_pack_a_block(const nn_gemm *g, void *block) {
    nn_gemm_packed p;
    nn_gemm_pack_a(g, (float *)((char *)block + NN_GEMM_BLOCK_DATA), &p);
    store_block_header(block, p);
}

void nn_gemm_pack_b_block(const nn_gemm *g, void *block) {
    nn_gemm_packed p;
    nn_gemm_pack_b(g, (float *)((char *)block + NN_GEMM_BLOCK_DATA), &p);
    store_block_header(block, p);
}

/* A block read back from the plan cache is untrusted: its header must be
 * exactly what packing would give now, and its size must hold the floats. */
static bool block_fits(nn_gemm_packed want, const void *block, size_t size) {
    nn_gemm_packed have;
    if (size < NN_GEMM_BLOCK_DATA) return false;
    memcpy(&have, block, sizeof have);
    return have.kernel == want.kernel && have.kc == want.kc && have.rows == want.rows && have.k == want.k &&
           have.count == want.count && have.stride == want.stride &&
           (size - NN_GEMM_BLOCK_DATA) / sizeof(float) >= want.count * want.stride;
}

bool nn_gemm_block_fits_a(const nn_gemm *g, const void *block, size_t size) {
    return block_fits(packed_a_layout(g), block, size);
}
bool nn_gemm_block_fits_b(const nn_gemm *g, const void *block, size_t size) {
    return block_fits(packed_b_layout(g), block, size);
}

nn_gemm_packed nn_gemm_block_view(const void *block) {
    nn_gemm_packed p;
    memcpy(&p, block, sizeof p);
    p.data = (float *)((char *)block + NN_GEMM_BLOCK_DATA);
    return p;
}
