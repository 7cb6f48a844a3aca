/* ops/gemm.c against a naive double-precision reference: every kernel this
 * CPU runs, odd sizes, transposes, pre-packed operands, each epilogue part,
 * batches, the matrix-vector paths, implicit-im2col convolutions, and the
 * vector activations.  Ends with "N passed, N failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/cpu_caches.h"
#include "../ops/epilogue.h"
#include "../ops/gemm.h"
#include "../ops/gemm_kernel.h"
#include "check.h"

static uint32_t seed = 12345;
static float frand(void) {
    seed = seed * 1664525u + 1013904223u;
    return (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

static float *rand_buf(size_t n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64);
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static double act_ref(nn_act act, double a, double b, double y) {
    switch (act) {
    case NN_ACT_NONE: return y;
    case NN_ACT_RELU: return y > 0 ? y : 0;
    case NN_ACT_CLIP: return y < a ? a : (y > b ? b : y);
    case NN_ACT_LEAKY_RELU: return y < 0 ? a * y : y;
    case NN_ACT_SIGMOID: return 1 / (1 + exp(-y));
    case NN_ACT_HARD_SIGMOID: return fmax(0, fmin(1, a * y + b));
    case NN_ACT_HARD_SWISH: return y * fmax(0, fmin(1, y / 6 + 0.5));
    case NN_ACT_SILU: return y / (1 + exp(-y));
    case NN_ACT_TANH: return tanh(y);
    case NN_ACT_GELU: return 0.5 * y * erfc(-y / sqrt(2.0));
    case NN_ACT_GELU_TANH: return 0.5 * y * (1 + tanh(sqrt(2.0 / M_PI) * (y + 0.044715 * y * y * y)));
    }
    return y;
}

/* Largest error allowed, relative to the sum of |products| + 1 */
static const double GEMM_TOL = 2e-6;

/* Compare C (with ldc) to the reference computed here for problem g; c0 is
 * C's content before the run (for accumulate). */
static void verify(const nn_gemm *g, const float *c0, const char *what) {
    int64_t bo_n = g->batch[0] ? g->batch[0] : 1, bi_n = g->batch[1] ? g->batch[1] : 1;
    double worst = 0, worst_want = 0;
    int64_t bad = 0, worst_at = -1, padding_changed = 0;
    for (int64_t bo = 0; bo < bo_n; bo++)
        for (int64_t bi = 0; bi < bi_n; bi++) {
            const float *a = g->a + bo * g->stride_a[0] + bi * g->stride_a[1];
            const float *b = g->b + bo * g->stride_b[0] + bi * g->stride_b[1];
            int64_t co = bo * g->stride_c[0] + bi * g->stride_c[1];
            const float *bias = g->bias ? g->bias + bo * g->stride_bias[0] + bi * g->stride_bias[1] : NULL;
            for (int64_t i = 0; i < g->m; i++)
                for (int64_t j = 0; j < g->n; j++) {
                    double s = 0, mag = 0;
                    for (int64_t p = 0; p < g->k; p++) {
                        double av = g->trans_a ? a[p * g->lda + i] : a[i * g->lda + p];
                        double bv = g->trans_b ? b[j * g->ldb + p] : b[p * g->ldb + j];
                        if (g->b_scale) bv = act_ref(g->b_act, 0, 0, bv * g->b_scale[p] + g->b_shift[p]);
                        s += av * bv;
                        mag += fabs(av * bv);
                    }
                    s *= g->alpha;
                    mag = mag * fabs(g->alpha) + 1;
                    int64_t at = co + (g->trans_c ? j * g->ldc + i : i * g->ldc + j);
                    if (g->accumulate) s += c0[at];
                    if (g->bias_kind == NN_GEMM_BIAS_ROW) s += bias[i];
                    if (g->bias_kind == NN_GEMM_BIAS_COL) s += bias[j];
                    if (g->residual) s += g->residual[at]; /* ldr == ldc here */
                    s = act_ref(g->act, g->act_alpha, g->act_beta, s);
                    double err = fabs(s - g->c[at]) / mag;
                    if (!(err <= GEMM_TOL)) bad++;
                    if (!(err <= worst) && !isnan(worst)) {
                        worst = err;
                        worst_at = at;
                        worst_want = s;
                    }
                }
            /* the padding between rows (columns of a transposed C) must be left alone */
            int64_t lines = g->trans_c ? g->n : g->m, used = g->trans_c ? g->m : g->n;
            for (int64_t i = 0; i < lines; i++)
                for (int64_t j = used; j < g->ldc; j++)
                    padding_changed += g->c[co + i * g->ldc + j] != c0[co + i * g->ldc + j];
        }
    CHECK(bad == 0, "%s: %lld values off by more than %g relative; the worst (%.3g) is C[%lld] = %.9g, expected %.9g",
          what, (long long)bad, GEMM_TOL, worst, (long long)worst_at, worst_at >= 0 ? g->c[worst_at] : 0.0, worst_want);
    CHECK(padding_changed == 0, "%s: %lld values written into the padding of C's lines, expected none", what,
          (long long)padding_changed);
}

/* How a product is set up, as flags */
enum {
    TA = 1 << 0,    /* A transposed */
    TB = 1 << 1,    /* B transposed */
    TC = 1 << 2,    /* C transposed */
    PA = 1 << 3,    /* A pre-packed */
    PB = 1 << 4,    /* B pre-packed (unbatched products only) */
    ACC = 1 << 5,   /* C += the product */
    RES = 1 << 6,   /* a residual added */
    PAD_C = 1 << 7, /* C's lines longer than used */
    PAD_B = 1 << 8, /* B's rows longer than used: a B read in place must stop at each row's end */
};
enum { ROW = NN_GEMM_BIAS_ROW, COL = NN_GEMM_BIAS_COL };

typedef struct gemm_case {
    int64_t m, n, k, batch_o, batch_i;
    unsigned flags;
    int prologue; /* B read through a per-row scale and shift (nn_gemm.b_scale): 0 none, 1 alone, 2 with Relu */
    int bias;     /* nn_gemm_bias */
    nn_act act;
    float alpha;
    int threads;
} gemm_case;

static void run_case(const gemm_case *cs) {
    int64_t m = cs->m, n = cs->n, k = cs->k, batch_o = cs->batch_o, batch_i = cs->batch_i;
    bool trans_a = cs->flags & TA, trans_b = cs->flags & TB, trans_c = cs->flags & TC;
    int64_t ldc = (trans_c ? m : n) + (cs->flags & PAD_C ? 3 : 0), lda = trans_a ? m : k;
    int64_t ldb = (trans_b ? k : n) + (cs->flags & PAD_B ? 5 : 0);
    int64_t sa = m * k, sb = (trans_b ? n : k) * ldb, sc = (trans_c ? n : m) * ldc, nb = batch_o * batch_i;
    float *a = rand_buf((size_t)(sa * batch_i)), *b = rand_buf((size_t)(sb * nb)), *c = rand_buf((size_t)(sc * nb));
    float *res = cs->flags & RES ? rand_buf((size_t)(sc * nb)) : NULL;
    float *bias = rand_buf((size_t)((m > n ? m : n) * batch_i));
    float *scale = cs->prologue ? rand_buf((size_t)k) : NULL, *shift = cs->prologue ? rand_buf((size_t)k) : NULL;
    float *c0 = malloc(sizeof(float) * (size_t)(sc * nb));
    memcpy(c0, c, sizeof(float) * (size_t)(sc * nb));
    nn_gemm g = {.m = m,
                 .n = n,
                 .k = k,
                 .a = a,
                 .lda = lda,
                 .trans_a = trans_a,
                 .b = b,
                 .ldb = ldb,
                 .trans_b = trans_b,
                 .c = c,
                 .ldc = ldc,
                 .trans_c = trans_c,
                 .alpha = cs->alpha,
                 .accumulate = cs->flags & ACC,
                 .bias_kind = (nn_gemm_bias)cs->bias,
                 .bias = cs->bias ? bias : NULL,
                 .residual = res,
                 .ldr = ldc,
                 .act = cs->act,
                 .act_alpha = cs->act == NN_ACT_CLIP ? -0.5f : (cs->act == NN_ACT_HARD_SIGMOID ? 0.2f : 0.1f),
                 .act_beta = cs->act == NN_ACT_CLIP ? 0.7f : 0.5f,
                 .b_scale = scale,
                 .b_shift = shift,
                 .b_act = cs->prologue == 2 ? NN_ACT_RELU : NN_ACT_NONE,
                 .batch = {batch_o, batch_i},
                 .stride_a = {0, sa},
                 .stride_b = {sb * batch_i, sb},
                 .stride_c = {sc * batch_i, sc},
                 .stride_bias = {0, m > n ? m : n}};
    nn_gemm_packed pa, pb;
    float *pa_mem = NULL, *pb_mem = NULL;
    if (cs->flags & PA) {
        pa_mem = aligned_alloc(64, (nn_gemm_pack_a_floats(&g) * sizeof(float) + 63) / 64 * 64 + 64);
        nn_gemm_pack_a(&g, pa_mem, &pa);
        g.a_packed = &pa;
    }
    if (cs->flags & PB && nb == 1) {
        pb_mem = aligned_alloc(64, (nn_gemm_pack_b_floats(&g) * sizeof(float) + 63) / 64 * 64 + 64);
        nn_gemm_pack_b(&g, pb_mem, &pb);
        g.b_packed = &pb;
    }
    char what[200];
    snprintf(what, sizeof what,
             "%lldx%lldx%lld batch %lldx%lld ta%d tb%d tc%d pa%d pb%d ldb+%d pro%d acc%d res%d bias%d act%d alpha%g "
             "threads%d",
             (long long)m, (long long)n, (long long)k, (long long)batch_o, (long long)batch_i, trans_a, trans_b,
             trans_c, !!(cs->flags & PA), !!(cs->flags & PB), cs->flags & PAD_B ? 5 : 0, cs->prologue,
             !!(cs->flags & ACC), !!(cs->flags & RES), cs->bias, (int)cs->act, cs->alpha, cs->threads);
    size_t ws = nn_gemm_workspace(&g, cs->threads);
    void *w = malloc(ws);
    CHECK(nn_gemm_run(&g, w, ws, cs->threads), "%s: run refused its own workspace size %zu", what, ws);
    verify(&g, c0, what);
    free(w);
    free(a);
    free(b);
    free(c);
    free(c0);
    free(res);
    free(bias);
    free(scale);
    free(shift);
    free(pa_mem);
    free(pb_mem);
}

/* Products that reach particular paths, in the order they run; columns:
 * m, n, k, batches (outer, inner), flags, B prologue, bias, activation, alpha, threads */
static const gemm_case products[] = {
    /* K blocked (> 256), every epilogue part at once, both thread counts */
    {67, 75, 600, 1, 1, PA | ACC | RES | PAD_C | PAD_B, 0, ROW, NN_ACT_SILU, 1.0f, 1},
    {70, 260, 513, 1, 1, PB | ACC | RES | PAD_C | PAD_B, 0, COL, NN_ACT_LEAKY_RELU, 1.0f, 1},
    {67, 75, 600, 1, 1, PA | ACC | RES | PAD_C | PAD_B, 0, ROW, NN_ACT_SILU, 1.0f, 2},
    {70, 260, 513, 1, 1, PB | ACC | RES | PAD_C | PAD_B, 0, COL, NN_ACT_LEAKY_RELU, 1.0f, 2},
    /* two tiles of rows or fewer read a large B in place (MobileNetV2's
     * projections to 16 and 24 channels), its rows longer than used */
    {23, 9001, 40, 1, 1, PA | RES | PAD_B, 0, ROW, NN_ACT_CLIP, 1.0f, 1},
    {23, 9001, 40, 1, 1, PA | RES | PAD_B, 0, ROW, NN_ACT_CLIP, 1.0f, 2},
    /* ... and over several K blocks (KC 288-512): MobileNetV2's 14x14
     * projection (576 -> 96 channels) and a two-tile one from 600 */
    {96, 196, 576, 1, 1, PA | RES | PAD_B, 0, ROW, NN_ACT_CLIP, 1.0f, 2},
    {23, 300, 600, 1, 1, PA | PAD_B | ACC, 0, ROW, NN_ACT_RELU, 1.0f, 1},
    /* up to 512 rows read B in place whatever its size and K: ResNet-50's
     * channel-reducing 1x1 convs, here with 230 rows (ragged in 14-row
     * tiles), K 750 in several blocks and a 3.3 MB B wider than used */
    {230, 1100, 750, 1, 1, PA | RES | PAD_B, 0, ROW, NN_ACT_RELU, 1.0f, 1},
    {230, 1100, 750, 1, 1, PA | RES | PAD_B | ACC, 0, ROW, NN_ACT_RELU, 1.0f, 2},
    /* B's prologue over several K blocks (each block's rows offset into
     * scale and shift), a conv's image batch sharing it, and on a B that
     * would be read in place without it */
    {67, 75, 600, 3, 1, PA, 2, ROW, NN_ACT_RELU, 1.0f, 1},
    {23, 9001, 40, 1, 1, PA, 1, ROW, NN_ACT_RELU, 1.0f, 1},
    {128, 49, 900, 1, 1, PA, 1, ROW, NN_ACT_RELU, 1.0f, 1},
    {67, 75, 600, 3, 1, PA, 2, ROW, NN_ACT_RELU, 1.0f, 2},
    {23, 9001, 40, 1, 1, PA, 1, ROW, NN_ACT_RELU, 1.0f, 2},
    {128, 49, 900, 1, 1, PA, 1, ROW, NN_ACT_RELU, 1.0f, 2},
    /* a transposed C: positions x channels of a pointwise conv into NCHW
     * (MobileNetV2's 14x14 and 7x7 planes), X read transposed as A, the
     * weights pre-packed as a transposed B; K blocked, every epilogue part,
     * tanh after the tile */
    {196, 96, 576, 1, 1, TA | TB | TC | PB | RES, 0, COL, NN_ACT_CLIP, 1.0f, 1},
    {49, 160, 960, 1, 1, TA | TB | TC | PB | RES, 0, COL, NN_ACT_CLIP, 1.0f, 1},
    {30, 45, 70, 1, 1, TA | TB | TC | PB | RES | ACC | PAD_C, 0, ROW, NN_ACT_TANH, 1.0f, 1},
    {30, 45, 70, 1, 1, TA | PB | RES | PAD_C, 0, ROW, NN_ACT_GELU, 1.0f, 1},
    {13, 33, 20, 2, 3, TB | RES | ACC, 0, ROW, NN_ACT_GELU_TANH, 1.0f, 2},
    {13, 33, 20, 2, 3, TA | TB | TC | RES | ACC | PAD_C, 0, ROW, NN_ACT_TANH, 1.0f, 1},
    {196, 96, 576, 1, 1, TA | TB | TC | PB | RES, 0, COL, NN_ACT_CLIP, 1.0f, 2},
    {49, 160, 960, 1, 1, TA | TB | TC | PB | RES, 0, COL, NN_ACT_CLIP, 1.0f, 2},
    {30, 45, 70, 1, 1, TA | TB | TC | PB | RES | ACC | PAD_C, 0, ROW, NN_ACT_TANH, 1.0f, 2},
    {13, 33, 20, 2, 3, TA | TB | TC | RES | ACC | PAD_C, 0, ROW, NN_ACT_TANH, 1.0f, 2},
    /* activations times pre-packed weights split along N (a transformer's
     * MatMuls at batch 1): every task packs the A rows it reads; K blocked,
     * A transposed and scaled, three threads */
    {128, 512, 200, 1, 1, PB | RES, 0, COL, NN_ACT_GELU, 1.0f, 2},
    {70, 400, 600, 1, 1, PB | ACC | PAD_C, 0, COL, NN_ACT_NONE, 1.0f, 2},
    {90, 500, 130, 1, 1, TA | ACC | PAD_C | PAD_B, 0, ROW, NN_ACT_SILU, 0.5f, 2},
    {49, 960, 160, 1, 1, TA | TB | TC | PB | RES, 0, COL, NN_ACT_CLIP, 1.0f, 2},
    {128, 512, 200, 1, 1, PB, 0, COL, NN_ACT_NONE, 1.0f, 3},
    /* pre-packed weights' panels outside the tiles of rows (run_task), over
     * several blocks of rows, of columns and of K, a ragged last panel */
    {650, 1250, 900, 1, 1, PB | RES | ACC | PAD_C, 0, COL, NN_ACT_RELU, 1.0f, 1},
    {650, 1250, 900, 1, 1, TA | TB | TC | PB | RES, 0, COL, NN_ACT_CLIP, 1.0f, 2},
    /* K = 0: C is bias (and the rest of the epilogue) */
    {5, 9, 0, 1, 1, RES, 0, ROW, NN_ACT_RELU, 1.0f, 1},
    /* batches: shared A across the outer index, packed and not */
    {20, 45, 30, 3, 2, PA, 0, ROW, NN_ACT_NONE, 1.0f, 2},
    {9, 33, 18, 2, 3, RES, 0, 0, NN_ACT_CLIP, 1.0f, 2},
    /* a last tile of at most 8 columns (AVX-512's narrow tile: vectors down the
     * rows), odd K and K blocks, every epilogue part, in place and packed B */
    {103, 103, 301, 1, 1, PA | ACC | RES | PAD_C | PAD_B, 0, ROW, NN_ACT_CLIP, 1.0f, 2},
    {29, 6, 600, 1, 1, RES | PAD_B, 0, COL, NN_ACT_RELU, -0.5f, 1},
    {45, 36, 77, 1, 1, PB | ACC | RES, 0, COL, NN_ACT_SILU, 1.0f, 2},
    /* matrix-vector shapes */
    {1, 300, 70, 1, 1, 0, 0, COL, NN_ACT_NONE, 1.0f, 2},
    {1, 300, 70, 1, 1, TB, 0, COL, NN_ACT_SIGMOID, 2.0f, 2},
    {300, 1, 70, 2, 2, TB | RES | ACC, 0, ROW, NN_ACT_NONE, 1.0f, 2},
    {1, 1, 5000, 1, 1, 0, 0, 0, NN_ACT_TANH, 1.0f, 1},
    /* ... their rows dotted eight at a time: tails of 5 and 7 rows, odd K,
     * rows longer than used, batches */
    {1, 29, 1001, 1, 1, TB | PAD_B | ACC, 0, COL, NN_ACT_RELU, 1.0f, 1},
    {1, 1003, 37, 2, 1, TB | PAD_B | RES, 0, COL, NN_ACT_NONE, -0.5f, 2},
    {15, 1, 515, 1, 2, RES | PAD_C, 0, ROW, NN_ACT_CLIP, 1.0f, 1},
};

static void test_products(void) {
    /* every pair of sizes, the setup varying from case to case */
    static const int64_t sizes[] = {1, 2, 3, 7, 13, 17, 24, 31, 64, 100, 257}; /* 24: an 8-column AVX2 tail */
    enum { NS = sizeof sizes / sizeof sizes[0] };
    int n_case = 0;
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < NS; j++) {
            int64_t m = sizes[i], n = sizes[j], k = sizes[(i * 3 + j * 7) % NS];
            if (m * n * k > 2000000) k = 17; /* keep the reference quick (valgrind) */
            int r = n_case++;
            gemm_case cs = {m, n, k, 1, 1};
            cs.flags = (r % 5 == 1 ? TA : 0) | (r % 3 == 1 ? TB : 0) | (r % 7 == 5 ? TC : 0) | (r % 4 == 2 ? PA : 0) |
                       (r % 7 == 3 ? PB : 0) | (r % 6 == 5 ? ACC : 0) | (r % 4 == 1 ? RES : 0) |
                       (r % 5 == 3 ? PAD_C : 0) | (r % 4 == 3 ? PAD_B : 0);
            cs.bias = r % 3;
            cs.act = (nn_act)(r % 9);
            cs.alpha = r % 8 == 7 ? -0.5f : 1.0f;
            cs.threads = 1 + r % 2;
            if (r % 5 == 4 && !(cs.flags & (TB | PB))) cs.prologue = 1 + r / 5 % 2;
            run_case(&cs);
        }
    for (size_t i = 0; i < sizeof products / sizeof *products; i++)
        run_case(&products[i]);
    /* a prologue on a B it does not apply to is refused, not ignored */
    float one = 1.0f, x[4] = {0}, y[4] = {0};
    static char ws[1 << 16];
    nn_gemm bad = {.m = 2,
                   .n = 2,
                   .k = 2,
                   .a = x,
                   .lda = 2,
                   .b = x,
                   .ldb = 2,
                   .trans_b = true,
                   .c = y,
                   .ldc = 2,
                   .alpha = 1.0f,
                   .b_scale = &one,
                   .b_shift = &one};
    CHECK(!nn_gemm_run(&bad, ws, sizeof ws, 1), "a prologue on a transposed B: expected refused, was accepted");
}

/* ---- convolutions through implicit im2col, against a direct loop */

typedef struct conv_case {
    int nsp;
    int64_t batch, in_ch, out_ch, group;
    int64_t in[3], kernel[3], stride[3], dilation[3], pad[3], pad_end[3];
} conv_case;

static void test_conv(conv_case cc) {
    char what[200];
    int len = snprintf(what, sizeof what, "conv nsp %d batch %lld C %lld M %lld group %lld", cc.nsp,
                       (long long)cc.batch, (long long)cc.in_ch, (long long)cc.out_ch, (long long)cc.group);
    for (int d = 0; d < cc.nsp; d++)
        len += snprintf(what + len, sizeof what - (size_t)len, " | in %lld k %lld s %lld d %lld pads %lld,%lld",
                        (long long)cc.in[d], (long long)cc.kernel[d], (long long)cc.stride[d],
                        (long long)cc.dilation[d], (long long)cc.pad[d], (long long)cc.pad_end[d]);
    nn_gemm_conv cv = {.nsp = cc.nsp, .channels = cc.in_ch / cc.group};
    int64_t in_size = 1, out_size = 1, ksz = 1;
    for (int d = 0; d < cc.nsp; d++) {
        cv.in[d] = cc.in[d];
        cv.kernel[d] = cc.kernel[d];
        cv.stride[d] = cc.stride[d];
        cv.dilation[d] = cc.dilation[d];
        cv.pad[d] = cc.pad[d];
        cv.out[d] = (cc.in[d] + cc.pad[d] + cc.pad_end[d] - (cc.kernel[d] - 1) * cc.dilation[d] - 1) / cc.stride[d] + 1;
        in_size *= cv.in[d];
        out_size *= cv.out[d];
        ksz *= cv.kernel[d];
    }
    int64_t cg = cc.in_ch / cc.group, mg = cc.out_ch / cc.group, kdim = cg * ksz;
    float *x = rand_buf((size_t)(cc.batch * cc.in_ch * in_size)), *w = rand_buf((size_t)(cc.out_ch * kdim));
    float *bias = rand_buf((size_t)cc.out_ch), *y = rand_buf((size_t)(cc.batch * cc.out_ch * out_size));
    nn_gemm g = {.m = mg,
                 .n = out_size,
                 .k = kdim,
                 .a = w,
                 .lda = kdim,
                 .b = x,
                 .ldb = in_size,
                 .b_conv = &cv,
                 .c = y,
                 .ldc = out_size,
                 .alpha = 1.0f,
                 .bias_kind = NN_GEMM_BIAS_ROW,
                 .bias = bias,
                 .act = NN_ACT_RELU,
                 .batch = {cc.batch, cc.group},
                 .stride_a = {0, mg * kdim},
                 .stride_b = {cc.in_ch * in_size, cg * in_size},
                 .stride_c = {cc.out_ch * out_size, mg * out_size},
                 .stride_bias = {0, mg}};
    nn_gemm_packed pa;
    float *pa_mem = aligned_alloc(64, (nn_gemm_pack_a_floats(&g) * sizeof(float) + 63) / 64 * 64 + 64);
    nn_gemm_pack_a(&g, pa_mem, &pa);
    g.a_packed = &pa;
    size_t ws = nn_gemm_workspace(&g, 2);
    void *scratch = malloc(ws);
    CHECK(nn_gemm_run(&g, scratch, ws, 2), "%s: run refused its own workspace size %zu", what, ws);
    int64_t bad = 0, worst_at = -1;
    double worst = 0, worst_want = 0;
    for (int64_t n = 0; n < cc.batch; n++)
        for (int64_t oc = 0; oc < cc.out_ch; oc++)
            for (int64_t o = 0; o < out_size; o++) {
                int64_t opos[3] = {0}, rest = o;
                for (int d = cc.nsp - 1; d >= 0; d--) {
                    opos[d] = rest % cv.out[d];
                    rest /= cv.out[d];
                }
                double s = bias[oc], mag = 1;
                int64_t grp = oc / mg;
                for (int64_t ci = 0; ci < cg; ci++)
                    for (int64_t t = 0; t < ksz; t++) {
                        int64_t tpos[3] = {0}, tr = t, idx = 0;
                        bool inside = true;
                        for (int d = cc.nsp - 1; d >= 0; d--) {
                            tpos[d] = tr % cv.kernel[d];
                            tr /= cv.kernel[d];
                        }
                        for (int d = 0; d < cc.nsp; d++) {
                            int64_t i = opos[d] * cv.stride[d] + tpos[d] * cv.dilation[d] - cv.pad[d];
                            inside = inside && i >= 0 && i < cv.in[d];
                            idx = idx * cv.in[d] + i;
                        }
                        if (!inside) continue;
                        double p =
                            (double)w[oc * kdim + ci * ksz + t] * x[(n * cc.in_ch + grp * cg + ci) * in_size + idx];
                        s += p;
                        mag += fabs(p);
                    }
                s = s > 0 ? s : 0;
                int64_t at = (n * cc.out_ch + oc) * out_size + o;
                double err = fabs(y[at] - s) / mag;
                if (!(err <= GEMM_TOL)) bad++;
                if (!(err <= worst) && !isnan(worst)) {
                    worst = err;
                    worst_at = at;
                    worst_want = s;
                }
            }
    CHECK(bad == 0, "%s: %lld values off by more than %g relative; the worst (%.3g) is y[%lld] = %.9g, expected %.9g",
          what, (long long)bad, GEMM_TOL, worst, (long long)worst_at, worst_at >= 0 ? y[worst_at] : 0.0, worst_want);
    free(scratch);
    free(pa_mem);
    free(x);
    free(w);
    free(bias);
    free(y);
}

/* columns: spatial dims, batch, channels in and out, groups, then per
 * spatial dim: input size, kernel, stride, dilation, pads before and after */
static const conv_case convs[] = {
    /* 3x3 pad 1 (the ResNet body), with an output row longer than a panel */
    {2, 2, 5, 17, 1, {9, 40}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
    /* stride 2 on rows longer than a vector (runs of every other element),
     * the 7x7 stem and ResNet's 1x1 downsampling */
    {2, 1, 3, 8, 1, {21, 77}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}},
    {2, 2, 9, 20, 1, {10, 70}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}},
    /* 3x3 stride 2 pad 1 on a 28-wide plane (ResNet's 28 -> 14): output rows
     * of 14, so a vector holds two step-2 runs, the second starting in the
     * left padding; then the same with a dilated column */
    {2, 1, 7, 12, 1, {28, 28}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
    {2, 1, 3, 5, 1, {12, 27}, {2, 3}, {2, 2}, {1, 2}, {0, 2}, {1, 2}},
    /* stride 2, asymmetric pads, groups */
    {2, 1, 6, 9, 3, {11, 13}, {3, 5}, {2, 2}, {1, 1}, {0, 2}, {2, 1}},
    /* dilation, 7x7 stem-like with stride 2 pad 3 */
    {2, 1, 3, 16, 1, {23, 21}, {3, 3}, {1, 1}, {2, 3}, {2, 3}, {2, 3}},
    {2, 1, 3, 8, 1, {30, 30}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}},
    /* 1x1 stride 2 (downsampling shortcut), kernel larger than the padded input leaves zero rows */
    {2, 2, 8, 4, 1, {7, 7}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}},
    {2, 1, 2, 3, 1, {2, 3}, {3, 3}, {1, 1}, {1, 1}, {2, 2}, {2, 2}},
    /* 1-D and 3-D */
    {1, 2, 4, 5, 1, {50}, {5}, {3}, {1}, {2}, {1}},
    {3, 1, 4, 6, 2, {5, 6, 7}, {3, 2, 3}, {1, 2, 1}, {1, 1, 2}, {1, 0, 2}, {1, 1, 2}},
};

static void test_convs(void) {
    for (size_t i = 0; i < sizeof convs / sizeof *convs; i++)
        test_conv(convs[i]);
}

/* ---- vector activations against double precision */
static void test_act(void) {
    enum { N = 4099 };
    static float y[N], x[N];
    for (nn_act act = NN_ACT_NONE; act <= NN_ACT_TANH; act++) {
        for (int i = 0; i < N; i++)
            x[i] = y[i] = (float)(i - N / 2) * 0.05f; /* [-102, 102] */
        float alpha = act == NN_ACT_CLIP ? -1.0f : 0.2f, beta = act == NN_ACT_CLIP ? 2.0f : 0.5f;
        nn_gemm_act(y + 1, N - 1, act, alpha, beta); /* unaligned start */
        double worst = 0;
        int bad = 0, worst_at = 1;
        for (int i = 1; i < N; i++) {
            double r = act_ref(act, alpha, beta, x[i]);
            double err = fabs(y[i] - r) / (fabs(r) + 1e-30);
            if (fabs(r) < 1e-30 && fabs(y[i]) < 1e-30) err = 0;
            bad += !(err < 2e-6);
            if (!(err <= worst) && !isnan(worst)) {
                worst = err;
                worst_at = i;
            }
        }
        CHECK(bad == 0,
              "activation %d: %d values off by 2e-6 relative or more; the worst (%.3g) is f(%.9g) = %.9g, "
              "expected %.9g",
              (int)act, bad, worst, x[worst_at], y[worst_at], act_ref(act, alpha, beta, x[worst_at]));
    }
}

/* The active kernel's pack_rows (A row-major, packed in registers) against
 * the one-float-at-a-time reference, bit for bit: partial panels, K tails
 * of every length around the vector width, alpha, a row stride past K,
 * and nothing written past the panels. */
static void test_pack_rows(void) {
    const gemm_kernel *kd = nn_gemm_kernel_at((int)nn_isa_active());
    if (!kd->pack_rows) return;
    static const int64_t rows[] = {1, 5, 6, 7, 13, 14, 15, 29, 42};
    static const int64_t ks[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 40, 96};
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (int scaled = 0; scaled < 2; scaled++) {
                int64_t mc = rows[ri], kc = ks[ki], ld = kc + 3, mr = kd->mr;
                size_t panels = (size_t)((mc + mr - 1) / mr * mr * kc), guard = 32;
                float *src = rand_buf((size_t)(mc * ld)), alpha = scaled ? 0.5f : 1.0f;
                float *got = malloc(sizeof(float) * (panels + guard)), *want = malloc(sizeof(float) * panels);
                for (size_t i = 0; i < panels + guard; i++)
                    got[i] = -7.0f;
                kd->pack_rows(src, ld, kc, mc, alpha, got);
                pack_rows_body(src, ld, kc, mc, alpha, kd->mr, want);
                size_t bad = 0;
                for (size_t i = 0; i < panels; i++)
                    bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
                for (size_t i = panels; i < panels + guard; i++)
                    bad += got[i] != -7.0f;
                CHECK(bad == 0,
                      "pack_rows %lld rows x %lld K alpha %g: %zu floats differ or were written past the panels",
                      (long long)mc, (long long)kc, alpha, bad);
                free(src);
                free(got);
                free(want);
            }
}

/* A B read through a prologue is packed again by every row part: DenseNet's
 * BN-ReLU-conv products (128 rows on 14x14 and 7x7 planes) keep their rows
 * whole and split their columns on two threads (ops/gemm.c, B_COST_PROLOGUE),
 * where the same products with their B packed plain split the rows too. */
static void test_split(void) {
    static const int64_t shapes[][3] = {{128, 196, 1024}, {128, 196, 256}, {128, 49, 1500}, {128, 49, 900}};
    float scale = 1.0f, shift = 0.0f, x = 0.0f;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2], mp, np;
        nn_gemm g = {.m = m, .n = n, .k = k, .a = &x, .lda = k, .b = &x, .ldb = n, .c = &x, .ldc = n, .alpha = 1.0f,
                     .batch = {1, 1}, .b_scale = &scale, .b_shift = &shift, .b_act = NN_ACT_RELU};
        nn_gemm_split(&g, 2, &mp, &np);
        CHECK(mp == 1 && np >= 2, "%lld x %lld x %lld with a prologue on 2 threads: split %lld x %lld, expected rows whole",
              (long long)m, (long long)n, (long long)k, (long long)mp, (long long)np);
        /* the same product with its B packed plain (read transposed): rows split */
        nn_gemm plain = g;
        plain.b_scale = plain.b_shift = NULL;
        plain.b_act = NN_ACT_NONE;
        plain.trans_b = true;
        plain.ldb = k;
        nn_gemm_split(&plain, 2, &mp, &np);
        CHECK(mp == 2, "%lld x %lld x %lld, B packed plain, on 2 threads: split %lld x %lld, expected rows in two",
              (long long)m, (long long)n, (long long)k, (long long)mp, (long long)np);
    }
}

/* Weights a seat fetches from beyond L2 (ops/gemm.c, far_floats): ResNet-50's
 * stride-2 3x3 conv on 14x14 (256 x 196 x 2304, 2.3 MB of packed weights)
 * on two threads keeps its columns whole, so that each seat reads its half
 * of the weights once rather than once per part of the columns (on this
 * Xeon 0.79x the node's time in the model, docs/perf-notes.md); the same
 * with a 256-deep K on Zen 3's 512 KiB L2 (without the rule: 2 x 7 parts
 * with the AVX-512 tiles, 1 x 13 with AVX2's).  Each product is checked
 * against the reference. */
static void test_split_far(void) {
    const nn_cpu_caches saved = *nn_cpu_caches_get();
    static const struct { int64_t k, l2; } cases[] = {{2304, 2 << 20}, {256, 512 << 10}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        nn_cpu_caches c = saved;
        c.l2 = cases[ci].l2;
        c.fixed = false;
        nn_cpu_caches_set(&c);
        int64_t m = 256, n = 196, k = cases[ci].k, mp, np;
        float *a = rand_buf((size_t)(m * k)), *b = rand_buf((size_t)(k * n));
        float *got = calloc((size_t)(m * n), sizeof(float));
        nn_gemm g = {.m = m, .n = n, .k = k, .a = a, .lda = k, .b = b, .ldb = n, .c = got, .ldc = n, .alpha = 1.0f,
                     .batch = {1, 1}};
        nn_gemm_packed pa;
        float *pa_mem = aligned_alloc(64, (nn_gemm_pack_a_floats(&g) * sizeof(float) + 63) / 64 * 64 + 64);
        nn_gemm_pack_a(&g, pa_mem, &pa);
        g.a_packed = &pa;
        nn_gemm_split(&g, 2, &mp, &np);
        CHECK(np == 1 && mp >= 2,
              "%lld x %lld x %lld, A pre-packed, L2 %lld KiB, 2 threads: split %lld x %lld, expected rows split and "
              "the columns whole",
              (long long)m, (long long)n, (long long)k, (long long)(cases[ci].l2 >> 10), (long long)mp, (long long)np);
        size_t ws = nn_gemm_workspace(&g, 2);
        void *w = aligned_alloc(64, (ws + 63) / 64 * 64);
        CHECK(nn_gemm_run(&g, w, ws, 2), "%lld x %lld x %lld: nn_gemm_run refused", (long long)m, (long long)n,
              (long long)k);
        char what[96];
        snprintf(what, sizeof what, "%lld x %lld x %lld split %lld x %lld", (long long)m, (long long)n, (long long)k,
                 (long long)mp, (long long)np);
        verify(&g, NULL, what);
        free(w);
        free(pa_mem);
        free(a);
        free(b);
        free(got);
    }
    nn_cpu_caches_set(&saved);
}

int main(void) {
    static const char *const names[] = {"avx512", "avx2", "scalar"};
    for (int i = 0; i < 3; i++) {
        if (!nn_gemm_use_kernel(names[i])) {
            printf("kernel %s: not supported here, skipped\n", names[i]);
            continue;
        }
        int before = check_failures();
        check_set_case("%s A rows packed", names[i]);
        test_pack_rows();
        check_set_case("%s products", names[i]);
        test_products();
        check_set_case("%s convolutions", names[i]);
        test_convs();
        check_set_case("%s activations", names[i]);
        test_act();
        if (i < 2) { /* the tile kernels; the scalar path hands OpenBLAS whole blocks */
            check_set_case("%s split", names[i]);
            test_split();
            test_split_far();
        }
        printf("kernel %s: %s\n", names[i], check_failures() == before ? "ok" : "FAILED");
    }
    return check_summary();
}
