/* ops/gemm.c against a naive double-precision reference: every kernel this
 * CPU runs, odd sizes, transposes, pre-packed operands, each epilogue part,
 * batches, the matrix-vector paths, implicit-im2col convolutions, and the
 * vector activations.  Ends with "N passed, N failed". */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/epilogue.h"
#include "../ops/gemm.h"

static int passed, failed;
static char where[256];

__attribute__((format(printf, 2, 3))) static void check(bool ok, const char *fmt, ...) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    printf("FAIL [%s] ", where);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

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
    }
    return y;
}

/* Compare C (with ldc) to the reference computed here for problem g; c0 is
 * C's content before the run (for accumulate). */
static void verify(const nn_gemm *g, const float *c0, const char *what) {
    int64_t bo_n = g->batch[0] ? g->batch[0] : 1, bi_n = g->batch[1] ? g->batch[1] : 1;
    double worst = 0;
    int64_t bad = 0;
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
                    if (!(err <= 2e-6)) bad++;
                    if (!(err <= worst)) worst = err;
                }
            /* the padding between rows (columns of a transposed C) must be left alone */
            int64_t lines = g->trans_c ? g->n : g->m, used = g->trans_c ? g->m : g->n;
            for (int64_t i = 0; i < lines; i++)
                for (int64_t j = used; j < g->ldc; j++)
                    if (g->c[co + i * g->ldc + j] != c0[co + i * g->ldc + j]) bad++;
        }
    check(bad == 0, "%s: %lld bad values, worst relative error %.3g", what, (long long)bad, worst);
}

typedef struct variant {
    bool trans_a, trans_b, trans_c, pack_a, pack_b, accumulate, residual, pad_ldc;
    bool pad_ldb; /* B's rows longer than it uses: a B read in place must stop at each row's end */
    int prologue; /* B read through a per-row scale and shift (nn_gemm.b_scale): 0 none, 1 alone, 2 with Relu */
    nn_gemm_bias bias;
    nn_act act;
    float alpha;
    int threads;
} variant;

static void run_case(int64_t m, int64_t n, int64_t k, variant v, int64_t batch_o, int64_t batch_i) {
    int64_t ldc = (v.trans_c ? m : n) + (v.pad_ldc ? 3 : 0), lda = v.trans_a ? m : k;
    int64_t ldb = (v.trans_b ? k : n) + (v.pad_ldb ? 5 : 0);
    int64_t sa = m * k, sb = (v.trans_b ? n : k) * ldb, sc = (v.trans_c ? n : m) * ldc, nb = batch_o * batch_i;
    float *a = rand_buf((size_t)(sa * batch_i)), *b = rand_buf((size_t)(sb * nb)), *c = rand_buf((size_t)(sc * nb));
    float *res = v.residual ? rand_buf((size_t)(sc * nb)) : NULL;
    float *bias = rand_buf((size_t)((m > n ? m : n) * batch_i));
    float *scale = v.prologue ? rand_buf((size_t)k) : NULL, *shift = v.prologue ? rand_buf((size_t)k) : NULL;
    float *c0 = malloc(sizeof(float) * (size_t)(sc * nb));
    memcpy(c0, c, sizeof(float) * (size_t)(sc * nb));
    nn_gemm g = {.m = m,
                 .n = n,
                 .k = k,
                 .a = a,
                 .lda = lda,
                 .trans_a = v.trans_a,
                 .b = b,
                 .ldb = ldb,
                 .trans_b = v.trans_b,
                 .c = c,
                 .ldc = ldc,
                 .trans_c = v.trans_c,
                 .alpha = v.alpha,
                 .accumulate = v.accumulate,
                 .bias_kind = v.bias,
                 .bias = v.bias ? bias : NULL,
                 .residual = res,
                 .ldr = ldc,
                 .act = v.act,
                 .act_alpha = v.act == NN_ACT_CLIP ? -0.5f : (v.act == NN_ACT_HARD_SIGMOID ? 0.2f : 0.1f),
                 .act_beta = v.act == NN_ACT_CLIP ? 0.7f : 0.5f,
                 .b_scale = scale,
                 .b_shift = shift,
                 .b_act = v.prologue == 2 ? NN_ACT_RELU : NN_ACT_NONE,
                 .batch = {batch_o, batch_i},
                 .stride_a = {0, sa},
                 .stride_b = {sb * batch_i, sb},
                 .stride_c = {sc * batch_i, sc},
                 .stride_bias = {0, m > n ? m : n}};
    nn_gemm_packed pa, pb;
    float *pa_mem = NULL, *pb_mem = NULL;
    if (v.pack_a) {
        pa_mem = aligned_alloc(64, (nn_gemm_pack_a_floats(&g) * sizeof(float) + 63) / 64 * 64 + 64);
        nn_gemm_pack_a(&g, pa_mem, &pa);
        g.a_packed = &pa;
    }
    if (v.pack_b && nb == 1) {
        pb_mem = aligned_alloc(64, (nn_gemm_pack_b_floats(&g) * sizeof(float) + 63) / 64 * 64 + 64);
        nn_gemm_pack_b(&g, pb_mem, &pb);
        g.b_packed = &pb;
    }
    size_t ws = nn_gemm_workspace(&g, v.threads);
    void *w = malloc(ws);
    check(nn_gemm_run(&g, w, ws, v.threads), "run refused its own workspace size %zu", ws);
    char what[200];
    snprintf(what, sizeof what,
             "%lldx%lldx%lld batch %lldx%lld ta%d tb%d tc%d pa%d pb%d ldb+%d pro%d acc%d res%d bias%d act%d alpha%g "
             "threads%d",
             (long long)m, (long long)n, (long long)k, (long long)batch_o, (long long)batch_i, v.trans_a, v.trans_b,
             v.trans_c, v.pack_a, v.pack_b, v.pad_ldb ? 5 : 0, v.prologue, v.accumulate, v.residual, (int)v.bias,
             (int)v.act, v.alpha, v.threads);
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

static void test_products(void) {
    static const int64_t sizes[] = {1, 2, 3, 7, 13, 17, 24, 31, 64, 100, 257}; /* 24: an 8-column AVX2 tail */
    enum { NS = sizeof sizes / sizeof sizes[0] };
    int n_case = 0;
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < NS; j++) {
            int64_t m = sizes[i], n = sizes[j], k = sizes[(i * 3 + j * 7) % NS];
            if (m * n * k > 2000000) k = 17; /* keep the reference quick (valgrind) */
            int r = n_case++;
            variant v = {.trans_a = r % 5 == 1,
                         .trans_b = r % 3 == 1,
                         .trans_c = r % 7 == 5,
                         .pack_a = r % 4 == 2,
                         .pack_b = r % 7 == 3,
                         .accumulate = r % 6 == 5,
                         .residual = r % 4 == 1,
                         .pad_ldc = r % 5 == 3,
                         .pad_ldb = r % 4 == 3,
                         .bias = (nn_gemm_bias)(r % 3),
                         .act = (nn_act)(r % 9),
                         .alpha = r % 8 == 7 ? -0.5f : 1.0f,
                         .threads = 1 + r % 2};
            if (r % 5 == 4 && !v.trans_b && !v.pack_b) v.prologue = 1 + r / 5 % 2;
            run_case(m, n, k, v, 1, 1);
        }
    /* K blocked (> 256), every epilogue part at once, both thread counts */
    for (int t = 1; t <= 2; t++) {
        variant all = {.pack_a = true,
                       .accumulate = true,
                       .residual = true,
                       .bias = NN_GEMM_BIAS_ROW,
                       .act = NN_ACT_SILU,
                       .alpha = 1.0f,
                       .threads = t,
                       .pad_ldc = true,
                       .pad_ldb = true};
        run_case(67, 75, 600, all, 1, 1);
        all.bias = NN_GEMM_BIAS_COL;
        all.act = NN_ACT_LEAKY_RELU;
        all.pack_a = false;
        all.pack_b = true;
        run_case(70, 260, 513, all, 1, 1);
    }
    /* two tiles of rows or fewer read a large B in place (MobileNetV2's
     * projections to 16 and 24 channels), its rows longer than used */
    for (int t = 1; t <= 2; t++)
        run_case(23, 9001, 40,
                 (variant){.pack_a = true,
                           .residual = true,
                           .bias = NN_GEMM_BIAS_ROW,
                           .act = NN_ACT_CLIP,
                           .alpha = 1.0f,
                           .threads = t,
                           .pad_ldb = true},
                 1, 1);
    /* B's prologue over several K blocks (each block's rows offset into
     * scale and shift), a conv's image batch sharing it, and on a B that
     * would be read in place without it */
    for (int t = 1; t <= 2; t++) {
        variant v = {.pack_a = true, .bias = NN_GEMM_BIAS_ROW, .act = NN_ACT_RELU, .alpha = 1.0f, .threads = t};
        v.prologue = 2;
        run_case(67, 75, 600, v, 3, 1);
        v.prologue = 1;
        run_case(23, 9001, 40, v, 1, 1);
        run_case(128, 49, 900, v, 1, 1);
    }
    /* a transposed C: positions x channels of a pointwise conv into NCHW
     * (MobileNetV2's 14x14 and 7x7 planes), X read transposed as A, the
     * weights pre-packed as a transposed B; K blocked, every epilogue part,
     * tanh after the tile */
    for (int t = 1; t <= 2; t++) {
        variant v = {.trans_a = true,
                     .trans_b = true,
                     .trans_c = true,
                     .pack_b = true,
                     .residual = true,
                     .bias = NN_GEMM_BIAS_COL,
                     .act = NN_ACT_CLIP,
                     .alpha = 1.0f,
                     .threads = t};
        run_case(196, 96, 576, v, 1, 1);
        run_case(49, 160, 960, v, 1, 1);
        v.act = NN_ACT_TANH;
        v.accumulate = true;
        v.pad_ldc = true;
        v.bias = NN_GEMM_BIAS_ROW;
        run_case(30, 45, 70, v, 1, 1);
        v.pack_b = false;
        run_case(13, 33, 20, v, 2, 3);
    }
    /* K = 0: C is bias (and the rest of the epilogue) */
    run_case(5, 9, 0,
             (variant){.bias = NN_GEMM_BIAS_ROW, .residual = true, .act = NN_ACT_RELU, .alpha = 1.0f, .threads = 1}, 1,
             1);
    /* batches: shared A across the outer index, packed and not */
    run_case(20, 45, 30, (variant){.pack_a = true, .bias = NN_GEMM_BIAS_ROW, .alpha = 1.0f, .threads = 2}, 3, 2);
    run_case(9, 33, 18, (variant){.residual = true, .act = NN_ACT_CLIP, .alpha = 1.0f, .threads = 2}, 2, 3);
    /* matrix-vector shapes */
    run_case(1, 300, 70, (variant){.bias = NN_GEMM_BIAS_COL, .alpha = 1.0f, .threads = 2}, 1, 1);
    run_case(1, 300, 70,
             (variant){.trans_b = true, .bias = NN_GEMM_BIAS_COL, .act = NN_ACT_SIGMOID, .alpha = 2.0f, .threads = 2},
             1, 1);
    run_case(300, 1, 70,
             (variant){.trans_b = true,
                       .bias = NN_GEMM_BIAS_ROW,
                       .residual = true,
                       .alpha = 1.0f,
                       .threads = 2,
                       .accumulate = true},
             2, 2);
    run_case(1, 1, 5000, (variant){.act = NN_ACT_TANH, .alpha = 1.0f, .threads = 1}, 1, 1);
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
    check(!nn_gemm_run(&bad, ws, sizeof ws, 1), "a prologue on a transposed B was accepted");
}

/* ---- convolutions through implicit im2col, against a direct loop */

typedef struct conv_case {
    int nsp;
    int64_t batch, in_ch, out_ch, group;
    int64_t in[3], kernel[3], stride[3], dilation[3], pad[3], pad_end[3];
} conv_case;

static void test_conv(conv_case cc) {
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
    check(nn_gemm_run(&g, scratch, ws, 2), "conv run refused its workspace");
    int64_t bad = 0;
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
                double got = y[(n * cc.out_ch + oc) * out_size + o];
                if (!(fabs(got - s) / mag <= 2e-6)) bad++;
            }
    check(bad == 0, "conv nsp %d batch %lld C %lld M %lld group %lld: %lld bad values", cc.nsp, (long long)cc.batch,
          (long long)cc.in_ch, (long long)cc.out_ch, (long long)cc.group, (long long)bad);
    free(scratch);
    free(pa_mem);
    free(x);
    free(w);
    free(bias);
    free(y);
}

static void test_convs(void) {
    /* 3x3 pad 1 (the ResNet body), with an output row longer than a panel */
    test_conv((conv_case){.nsp = 2,
                          .batch = 2,
                          .in_ch = 5,
                          .out_ch = 17,
                          .group = 1,
                          .in = {9, 40},
                          .kernel = {3, 3},
                          .stride = {1, 1},
                          .dilation = {1, 1},
                          .pad = {1, 1},
                          .pad_end = {1, 1}});
    /* stride 2 on rows longer than a vector (runs of every other element),
     * the 7x7 stem and ResNet's 1x1 downsampling */
    test_conv((conv_case){.nsp = 2,
                          .batch = 1,
                          .in_ch = 3,
                          .out_ch = 8,
                          .group = 1,
                          .in = {21, 77},
                          .kernel = {7, 7},
                          .stride = {2, 2},
                          .dilation = {1, 1},
                          .pad = {3, 3},
                          .pad_end = {3, 3}});
    test_conv((conv_case){.nsp = 2,
                          .batch = 2,
                          .in_ch = 9,
                          .out_ch = 20,
                          .group = 1,
                          .in = {10, 70},
                          .kernel = {1, 1},
                          .stride = {2, 2},
                          .dilation = {1, 1},
                          .pad = {0, 0},
                          .pad_end = {0, 0}});
    /* 3x3 stride 2 pad 1 on a 28-wide plane (ResNet's 28 -> 14): output rows
     * of 14, so a vector holds two step-2 runs, the second starting in the
     * left padding; then the same with a dilated column */
    test_conv((conv_case){.nsp = 2,
                          .batch = 1,
                          .in_ch = 7,
                          .out_ch = 12,
                          .group = 1,
                          .in = {28, 28},
                          .kernel = {3, 3},
                          .stride = {2, 2},
                          .dilation = {1, 1},
                          .pad = {1, 1},
                          .pad_end = {1, 1}});
    test_conv((conv_case){.nsp = 2,
                          .batch = 1,
                          .in_ch = 3,
                          .out_ch = 5,
                          .group = 1,
                          .in = {12, 27},
                          .kernel = {2, 3},
                          .stride = {2, 2},
                          .dilation = {1, 2},
                          .pad = {0, 2},
                          .pad_end = {1, 2}});
    /* stride 2, asymmetric pads, groups */
    test_conv((conv_case){.nsp = 2,
                          .batch = 1,
                          .in_ch = 6,
                          .out_ch = 9,
                          .group = 3,
                          .in = {11, 13},
                          .kernel = {3, 5},
                          .stride = {2, 2},
                          .dilation = {1, 1},
                          .pad = {0, 2},
                          .pad_end = {2, 1}});
    /* dilation, 7x7 stem-like with stride 2 pad 3 */
    test_conv((conv_case){.nsp = 2,
                          .batch = 1,
                          .in_ch = 3,
                          .out_ch = 16,
                          .group = 1,
                          .in = {23, 21},
                          .kernel = {3, 3},
                          .stride = {1, 1},
                          .dilation = {2, 3},
                          .pad = {2, 3},
                          .pad_end = {2, 3}});
    test_conv((conv_case){.nsp = 2,
                          .batch = 1,
                          .in_ch = 3,
                          .out_ch = 8,
                          .group = 1,
                          .in = {30, 30},
                          .kernel = {7, 7},
                          .stride = {2, 2},
                          .dilation = {1, 1},
                          .pad = {3, 3},
                          .pad_end = {3, 3}});
    /* 1x1 stride 2 (downsampling shortcut), kernel larger than the padded input leaves zero rows */
    test_conv((conv_case){.nsp = 2,
                          .batch = 2,
                          .in_ch = 8,
                          .out_ch = 4,
                          .group = 1,
                          .in = {7, 7},
                          .kernel = {1, 1},
                          .stride = {2, 2},
                          .dilation = {1, 1}});
    test_conv((conv_case){.nsp = 2,
                          .batch = 1,
                          .in_ch = 2,
                          .out_ch = 3,
                          .group = 1,
                          .in = {2, 3},
                          .kernel = {3, 3},
                          .stride = {1, 1},
                          .dilation = {1, 1},
                          .pad = {2, 2},
                          .pad_end = {2, 2}});
    /* 1-D and 3-D */
    test_conv((conv_case){.nsp = 1,
                          .batch = 2,
                          .in_ch = 4,
                          .out_ch = 5,
                          .group = 1,
                          .in = {50},
                          .kernel = {5},
                          .stride = {3},
                          .dilation = {1},
                          .pad = {2},
                          .pad_end = {1}});
    test_conv((conv_case){.nsp = 3,
                          .batch = 1,
                          .in_ch = 4,
                          .out_ch = 6,
                          .group = 2,
                          .in = {5, 6, 7},
                          .kernel = {3, 2, 3},
                          .stride = {1, 2, 1},
                          .dilation = {1, 1, 2},
                          .pad = {1, 0, 2},
                          .pad_end = {1, 1, 2}});
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
        for (int i = 1; i < N; i++) {
            double r = act_ref(act, alpha, beta, x[i]);
            double err = fabs(y[i] - r) / (fabs(r) + 1e-30);
            if (fabs(r) < 1e-30 && fabs(y[i]) < 1e-30) err = 0;
            if (!(err <= worst)) worst = err;
        }
        check(worst < 2e-6, "activation %d: worst relative error %.3g", (int)act, worst);
    }
}

int main(void) {
    static const char *const names[] = {"avx512", "avx2", "scalar"};
    for (int i = 0; i < 3; i++) {
        if (!nn_gemm_use_kernel(names[i])) {
            printf("kernel %s: not supported here, skipped\n", names[i]);
            continue;
        }
        int before = failed;
        snprintf(where, sizeof where, "%s products", names[i]);
        test_products();
        snprintf(where, sizeof where, "%s convolutions", names[i]);
        test_convs();
        snprintf(where, sizeof where, "%s activations", names[i]);
        test_act();
        printf("kernel %s: %s\n", names[i], failed == before ? "ok" : "FAILED");
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
