/* The bf16 GEMM (nn_gemm.bf16, ops/gemm_bf16_x86.c) and --precision bf16.
 *
 * With AVX512-BF16: every way the kernel's operands are packed (A packed
 * ahead or on the fly, transposed; B plain, transposed, pre-packed, a
 * conv's im2col, through a prologue) on odd M, N and K (odd K ends on half
 * a pair, K over KC_MAX takes several K blocks), with each epilogue, against
 * a double-precision product of the inputs rounded to bf16 here; then a seed
 * model loaded fp32 and bf16 through one plan cache folder in both orders
 * (neither gets the other's plan), a 3x3 conv Winograd takes run in fp32
 * under bf16 (bit for bit fp32's output) and the same conv at stride 2 in
 * bf16, and NN_ISA's avx2 refusing bf16.
 * Without it (or under valgrind, which hides AVX-512) only the refusal is
 * checked.  `--available` exits 0 where the kernel runs (tests/run_all.sh). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ops/gemm.h"
#include "../ops/gemm_kernel.h"
#include "../ops/isa.h"
#include "check.h"
#include "nn.h"
#include "onnx_builder.h"

static uint32_t rng = 2024;
static float uniform(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

/* bf16 by truncating and rounding the dropped half up past one half, or at
 * one half to even (written apart from the engine's bf16_round). */
static double to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t kept = u & 0xffff0000u, dropped = u & 0xffffu;
    if (dropped > 0x8000u || (dropped == 0x8000u && (u & 0x10000u))) kept += 0x10000u;
    float r;
    memcpy(&r, &kept, 4);
    return r;
}

static const char *pass_name = "avx512-bf16"; /* the kernel the cases run on */

typedef struct gcase {
    const char *name;
    int64_t m, n, k;
    bool trans_a, trans_b, pack_a, pack_b, prologue, trans_c;
    nn_gemm_bias bias;
    bool residual;
    nn_act act;
    float alpha;
    float act_alpha, act_beta; /* Clip's bounds, LeakyReLU's slope */
} gcase;

/* One product: dense A (m x k) and B (k x n) give both the operands in the
 * layout the case asks for and the reference. */
static void run_case(const gcase *cs) {
    check_set_case("%s: %s %lldx%lldx%lld", pass_name, cs->name, (long long)cs->m, (long long)cs->n, (long long)cs->k);
    int64_t m = cs->m, n = cs->n, k = cs->k;
    float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n));
    float *at = malloc(sizeof(float) * (size_t)(m * k)), *bt = malloc(sizeof(float) * (size_t)(k * n));
    float *scale = malloc(sizeof(float) * (size_t)k), *shift = malloc(sizeof(float) * (size_t)k);
    float *bias = malloc(sizeof(float) * (size_t)(m + n)), *res = malloc(sizeof(float) * (size_t)(m * n));
    float *c = malloc(sizeof(float) * (size_t)(m * n));
    double *want = malloc(sizeof(double) * (size_t)(m * n)), *bound = malloc(sizeof(double) * (size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++)
        a[i] = uniform();
    for (int64_t i = 0; i < k * n; i++)
        b[i] = uniform() * 4.0f;
    for (int64_t p = 0; p < k; p++) {
        scale[p] = uniform();
        shift[p] = uniform();
    }
    for (int64_t i = 0; i < m + n; i++)
        bias[i] = uniform();
    for (int64_t i = 0; i < m * n; i++)
        res[i] = uniform();
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++)
            at[p * m + i] = a[i * k + p];
    for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < n; j++)
            bt[j * k + p] = b[p * n + j];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                float bv = b[p * n + j];
                if (cs->prologue) bv = fmaxf(fmaf(bv, scale[p], shift[p]), 0.0f);
                double t = to_bf16(cs->alpha * a[i * k + p]) * to_bf16(bv);
                s += t;
                mag += fabs(t);
            }
            if (cs->bias == NN_GEMM_BIAS_ROW) s += bias[i];
            if (cs->bias == NN_GEMM_BIAS_COL) s += bias[m + j];
            if (cs->residual) s += res[i * n + j];
            if (cs->act == NN_ACT_RELU) s = s > 0 ? s : 0;
            if (cs->act == NN_ACT_SIGMOID) s = 1 / (1 + exp(-s));
            if (cs->act == NN_ACT_CLIP) s = fmin(fmax(s, cs->act_alpha), cs->act_beta);
            if (cs->act == NN_ACT_LEAKY_RELU && s < 0) s *= cs->act_alpha;
            if (cs->act == NN_ACT_HARD_SWISH) s *= fmin(fmax(s / 6 + 0.5, 0), 1);
            if (cs->act == NN_ACT_SILU) s /= 1 + exp(-s);
            want[i * n + j] = s;
            bound[i * n + j] = 2e-6 * (double)k * mag / sqrt((double)k) + 1e-5 * (1 + fabs(s)); /* fp32 sums */
        }
    nn_gemm g = {.m = m,
                 .n = n,
                 .k = k,
                 .a = cs->trans_a ? at : a,
                 .lda = cs->trans_a ? m : k,
                 .trans_a = cs->trans_a,
                 .b = cs->trans_b ? bt : b,
                 .ldb = cs->trans_b ? k : n,
                 .trans_b = cs->trans_b,
                 .c = c,
                 .ldc = cs->trans_c ? m : n,
                 .trans_c = cs->trans_c,
                 .alpha = cs->alpha,
                 .bias_kind = cs->bias,
                 .bias = cs->bias == NN_GEMM_BIAS_COL ? bias + m : bias,
                 .act = cs->act,
                 .act_alpha = cs->act_alpha,
                 .act_beta = cs->act_beta,
                 .bf16 = true};
    float *rest = NULL;
    if (cs->residual && cs->trans_c) {
        rest = malloc(sizeof(float) * (size_t)(m * n));
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                rest[j * m + i] = res[i * n + j];
    }
    g.residual = cs->residual ? (rest ? rest : res) : NULL;
    g.ldr = g.ldc;
    if (cs->prologue) {
        g.b_scale = scale;
        g.b_shift = shift;
        g.b_act = NN_ACT_RELU;
    }
    float *pa = NULL, *pb = NULL;
    nn_gemm_packed packed_a, packed_b;
    if (cs->pack_a) {
        pa = aligned_alloc(64, (sizeof(float) * nn_gemm_pack_a_floats(&g) + 63) / 64 * 64);
        nn_gemm_pack_a(&g, pa, &packed_a);
        g.a_packed = &packed_a;
        g.a = NULL;
    }
    if (cs->pack_b) {
        pb = aligned_alloc(64, (sizeof(float) * nn_gemm_pack_b_floats(&g) + 63) / 64 * 64);
        nn_gemm_pack_b(&g, pb, &packed_b);
        g.b_packed = &packed_b;
        g.b = NULL;
    }
    for (int threads = 1; threads <= 2; threads++) {
        size_t ws = nn_gemm_workspace(&g, threads);
        void *w = malloc(ws);
        memset(c, 0, sizeof(float) * (size_t)(m * n));
        CHECK(nn_gemm_run(&g, w, ws, threads), "run refused (%d threads)", threads);
        int bad = 0;
        double worst = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double got = c[cs->trans_c ? j * m + i : i * n + j], e = fabs(got - want[i * n + j]);
                if (!(e <= bound[i * n + j])) bad++;
                if (e / bound[i * n + j] > worst || e != e) worst = e / bound[i * n + j];
            }
        CHECK(bad == 0, "%d of %lld values beyond the fp32-accumulation bound (worst %.2f x bound), %d threads", bad,
              (long long)(m * n), worst, threads);
        free(w);
    }
    free(a), free(b), free(at), free(bt), free(scale), free(shift), free(bias), free(res), free(c);
    free(want), free(bound), free(pa), free(pb), free(rest);
}

/* A 3x3 conv's im2col as B (pad 1, stride s) with A pre-packed: the
 * reference reads the same padded windows. */
static void run_conv(int64_t ch, int64_t h, int64_t w, int64_t stride, int64_t out_ch, int threads) {
    check_set_case("%s: conv %lldch %lldx%lld stride %lld, %d thread(s)", pass_name, (long long)ch, (long long)h, (long long)w,
                   (long long)stride, threads);
    int64_t oh = (h + 2 - 3) / stride + 1, ow = (w + 2 - 3) / stride + 1, k = ch * 9, n = oh * ow;
    float *x = malloc(sizeof(float) * (size_t)(ch * h * w)), *wt = malloc(sizeof(float) * (size_t)(out_ch * k));
    float *c = malloc(sizeof(float) * (size_t)(out_ch * n));
    for (int64_t i = 0; i < ch * h * w; i++)
        x[i] = uniform();
    for (int64_t i = 0; i < out_ch * k; i++)
        wt[i] = uniform();
    nn_gemm_conv cv = {.nsp = 2,
                       .channels = ch,
                       .in = {h, w},
                       .out = {oh, ow},
                       .kernel = {3, 3},
                       .stride = {stride, stride},
                       .dilation = {1, 1},
                       .pad = {1, 1}};
    nn_gemm g = {.m = out_ch, .n = n, .k = k, .a = wt, .lda = k, .b = x, .ldb = h * w, .b_conv = &cv, .c = c,
                 .ldc = n, .alpha = 1.0f, .act = NN_ACT_RELU, .bf16 = true};
    float *pa = aligned_alloc(64, (sizeof(float) * nn_gemm_pack_a_floats(&g) + 63) / 64 * 64);
    nn_gemm_packed packed;
    nn_gemm_pack_a(&g, pa, &packed);
    g.a_packed = &packed;
    size_t ws = nn_gemm_workspace(&g, threads);
    void *work = malloc(ws);
    CHECK(nn_gemm_run(&g, work, ws, threads), "run refused");
    int bad = 0;
    for (int64_t o = 0; o < out_ch; o++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t xo = 0; xo < ow; xo++) {
                double s = 0, mag = 0;
                for (int64_t cc = 0; cc < ch; cc++)
                    for (int64_t t = 0; t < 9; t++) {
                        int64_t iy = y * stride - 1 + t / 3, ix = xo * stride - 1 + t % 3;
                        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                        double v = to_bf16(wt[o * k + cc * 9 + t]) * to_bf16(x[(cc * h + iy) * w + ix]);
                        s += v;
                        mag += fabs(v);
                    }
                s = s > 0 ? s : 0;
                double e = fabs(c[o * n + y * ow + xo] - s);
                if (!(e <= 2e-6 * sqrt((double)k) * mag + 1e-5 * (1 + fabs(s)))) bad++;
            }
    CHECK(bad == 0, "%d of %lld values beyond the fp32-accumulation bound", bad, (long long)(out_ch * n));
    free(x), free(wt), free(c), free(pa), free(work);
}

/* the committed MobileNetV2: present in a clean checkout, before `make models` */
static const char *model = "models/mobilenetv2.onnx";

/* Runs `path` once on a fixed input, its plans cached in `cache_dir` (NULL:
 * no cache); NULL when it does not load. */
static float *predict(const char *path, const char *cache_dir, nn_precision precision, int threads, int64_t *count) {
    nn_options o = nn_options_default();
    o.precision = precision;
    o.cache_dir = cache_dir;
    o.cache = cache_dir != NULL;
    o.threads = threads;
    nn_model *mdl = NULL;
    if (!CHECK(nn_load(path, &o, &mdl) == NN_OK, "load %s (%s): %s", path, precision ? "bf16" : "fp32",
               nn_last_error()))
        return NULL;
    nn_tensor shape;
    const char *name;
    nn_input_info(mdl, 0, &name, &shape);
    int64_t elems = 1;
    for (int d = 0; d < shape.ndim; d++)
        elems *= shape.dims[d] > 0 ? shape.dims[d] : 1;
    float *in = malloc(sizeof(float) * (size_t)elems);
    uint32_t saved = rng;
    rng = 7;
    for (int64_t i = 0; i < elems; i++)
        in[i] = uniform();
    rng = saved;
    nn_tensor x = shape, y = {0};
    for (int d = 0; d < x.ndim; d++)
        x.dims[d] = x.dims[d] > 0 ? x.dims[d] : 1;
    x.data = in;
    float *out = NULL;
    if (CHECK(nn_predict(mdl, &x, 1, &y, 1) == NN_OK, "predict: %s", nn_last_error())) {
        *count = nn_tensor_elements(&y);
        out = malloc(sizeof(float) * (size_t)*count);
        memcpy(out, y.data, sizeof(float) * (size_t)*count);
        nn_tensor_release(&y);
    }
    free(in);
    nn_free(mdl);
    return out;
}

static double rel_l2(const float *x, const float *y, int64_t n) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        r += (double)y[i] * y[i];
    }
    return sqrt(d / r);
}

/* fp32 then bf16 then each again, all through one cache folder: the second
 * of each comes from the cache and must equal the first; bf16 must differ
 * from fp32 (so it did not get the fp32 plan) by no more than bf16 does. */
static void check_cache(void) {
    check_set_case("plan cache");
    if (access(model, R_OK) != 0) {
        printf("skipped: plan cache check (%s not built)\n", model);
        return;
    }
    char dir[] = "/tmp/nn-bf16-cache.XXXXXX";
    if (!CHECK(mkdtemp(dir) != NULL, "mkdtemp failed")) return;
    int64_t n32 = 0, n16 = 0, n32b = 0, n16b = 0;
    float *f32 = predict(model, dir, NN_PRECISION_FP32, 2, &n32), *b16 = predict(model, dir, NN_PRECISION_BF16, 2, &n16);
    float *f32b = predict(model, dir, NN_PRECISION_FP32, 2, &n32b);
    float *b16b = predict(model, dir, NN_PRECISION_BF16, 2, &n16b);
    if (f32 && b16 && f32b && b16b && CHECK(n32 == n16 && n32 == n32b && n16 == n16b, "output sizes differ")) {
        double d = rel_l2(b16, f32, n32);
        CHECK(d > 1e-4 && d < 1e-1, "bf16 vs fp32 relative L2 %.3g: want within (1e-4, 1e-1)", d);
        CHECK(!memcmp(f32, f32b, sizeof(float) * (size_t)n32), "fp32 from the cache differs from fp32 built");
        CHECK(!memcmp(b16, b16b, sizeof(float) * (size_t)n16), "bf16 from the cache differs from bf16 built");
    }
    free(f32), free(b16), free(f32b), free(b16b);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cannot remove %s", dir);
}

/* A 64 -> 64 3x3 conv on 28x28 at `stride`, run once fp32 and once bf16
 * (1 thread, no cache, the same input): relative L2 of bf16 against fp32,
 * or -1 when something failed (a failed check says what). */
static double conv_bf16_vs_fp32(int64_t stride) {
    enum { CH = 64, HW = 28 };
    builder b;
    builder_init(&b);
    int64_t out_hw = (HW + 2 - 3) / stride + 1;
    const int64_t x_dims[] = {1, CH, HW, HW}, y_dims[] = {1, CH, out_hw, out_hw}, w_dims[] = {CH, CH, 3, 3};
    static float w[CH * CH * 9];
    for (int i = 0; i < CH * CH * 9; i++)
        w[i] = uniform() * 0.06f;
    graph_input(&b, "X", 4, x_dims);
    graph_output(&b, "Y", 4, y_dims);
    float_init(&b, "W", 4, w_dims, CH * CH * 9, w);
    const char *conv_in[] = {"X", "W"}, *conv_out[] = {"Y"};
    Onnx__NodeProto *conv = node_io(&b, "Conv", "conv", 2, conv_in, 1, conv_out);
    attr_ints(&b, conv, "kernel_shape", 2, (const int64_t[]){3, 3});
    attr_ints(&b, conv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
    attr_ints(&b, conv, "strides", 2, (const int64_t[]){stride, stride});
    const char *path = save(&b, "conv3x3.onnx");
    builder_free(&b);
    int64_t n32 = 0, n16 = 0;
    float *f32 = predict(path, NULL, NN_PRECISION_FP32, 1, &n32), *b16 = predict(path, NULL, NN_PRECISION_BF16, 1, &n16);
    double d = f32 && b16 && CHECK(n32 == CH * out_hw * out_hw && n16 == n32, "output sizes %lld and %lld",
                                   (long long)n32, (long long)n16)
                   ? rel_l2(b16, f32, n32)
                   : -1;
    free(f32), free(b16);
    return d;
}

/* Winograd's 3x3 convs stay in fp32 under bf16 on AVX512-BF16, faster there
 * than its bf16 GEMM, and go to the GEMM on AMX, which beats Winograd
 * (docs/precision.md, "Winograd under bf16"); a stride-2 one, which
 * Winograd does not take, runs in bf16 on either.  `amx`: which. */
static void check_winograd(bool amx) {
    check_set_case("winograd under bf16, %s", amx ? "amx-bf16" : "avx512-bf16");
    nn_gemm_bf16_use_amx(amx);
    if (!CHECK(mkdtemp(nn_test_dir) != NULL, "mkdtemp failed")) return;
    double d1 = conv_bf16_vs_fp32(1), d2 = conv_bf16_vs_fp32(2);
    if (amx)
        CHECK(d1 > 1e-4 && d1 < 1e-1, "stride 1 (the AMX GEMM): relative L2 against fp32 %.3g, want within (1e-4, 1e-1)",
              d1);
    else
        CHECK(d1 == 0, "stride 1 (Winograd): bf16 output should equal fp32's bit for bit, relative L2 %.3g", d1);
    CHECK(d2 > 1e-4 && d2 < 1e-1, "stride 2 (the bf16 GEMM): relative L2 against fp32 %.3g, want within (1e-4, 1e-1)",
          d2);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    CHECK(system(cmd) == 0, "cannot remove %s", nn_test_dir);
    memcpy(nn_test_dir + strlen(nn_test_dir) - 6, "XXXXXX", 6); /* the template again, for the next mkdtemp */
}

static void check_refused(void) {
    check_set_case("refusal");
    nn_options o = nn_options_default();
    o.precision = NN_PRECISION_BF16;
    o.cache = 0;
    nn_model *mdl = NULL;
    nn_status st = nn_load(model, &o, &mdl);
    CHECK(st == NN_ERR_UNSUPPORTED && !mdl && strstr(nn_last_error(), "bf16 precision needs AVX512-BF16"),
          "bf16 load without AVX512-BF16: status %d, error '%s'", (int)st, nn_last_error());
    nn_free(mdl);
}

int main(int argc, char **argv) {
    bool have = nn_gemm_bf16_available();
    if (argc > 1 && !strcmp(argv[1], "--available")) return have ? 0 : 1;
    if (!have) {
        printf("skipped: the bf16 kernel (no AVX512-BF16 here, or NN_ISA below avx512); checking the refusal\n");
        check_refused();
        return check_summary();
    }
    const gcase cases[] = {
        {"packed A, one value", 1, 1, 1, .pack_a = true, .alpha = 1}, /* plain: a matrix-vector product, fp32 */
        {"plain relu bias", 15, 33, 7, .bias = NN_GEMM_BIAS_ROW, .act = NN_ACT_RELU, .alpha = 1},
        {"plain 2 K blocks sigmoid", 29, 47, 777, .bias = NN_GEMM_BIAS_COL, .act = NN_ACT_SIGMOID, .alpha = 1},
        {"packed A residual", 37, 65, 129, .pack_a = true, .residual = true, .act = NN_ACT_RELU, .alpha = 1},
        {"packed B transposed", 9, 70, 401, .trans_b = true, .pack_b = true, .bias = NN_GEMM_BIAS_COL, .alpha = 1},
        {"trans A alpha", 17, 31, 63, .trans_a = true, .alpha = 0.5f},
        {"trans A, packed B, trans C", 49, 96, 65, .trans_a = true, .trans_b = true, .pack_b = true, .trans_c = true,
         .bias = NN_GEMM_BIAS_COL, .residual = true, .act = NN_ACT_RELU, .alpha = 1},
        {"prologue", 21, 100, 35, .prologue = true, .bias = NN_GEMM_BIAS_ROW, .alpha = 1},
        {"wide", 300, 600, 96, .pack_a = true, .alpha = 1},
        /* AMX's tile halves (M, N at 16 and 17, 32 and 33), K padded to 32
         * (16 the least it takes, 31, 32, 33), K blocks aligned to 32 with a
         * short last one, each epilogue on the lower half's rows */
        {"K 16, 16 x 16", 16, 16, 16, .pack_a = true, .bias = NN_GEMM_BIAS_ROW, .alpha = 1},
        {"K 31, 17 x 17", 17, 17, 31, .residual = true, .act = NN_ACT_HARD_SWISH, .alpha = 1},
        {"K 32, 32 x 32", 32, 32, 32, .pack_a = true, .act = NN_ACT_CLIP, .alpha = 1, .act_alpha = -1,
         .act_beta = 2},
        {"K 33, 33 x 33", 33, 33, 33, .bias = NN_GEMM_BIAS_COL, .act = NN_ACT_SILU, .alpha = 1},
        {"K 1100 trans C", 40, 50, 1100, .pack_a = true, .trans_c = true, .bias = NN_GEMM_BIAS_ROW, .residual = true,
         .alpha = 1},
        {"K 530 trans B", 70, 45, 530, .trans_b = true, .act = NN_ACT_LEAKY_RELU, .alpha = 1, .act_alpha = 0.1f},
        {"trans A K 100 trans C", 20, 40, 100, .trans_a = true, .trans_c = true, .act = NN_ACT_RELU, .alpha = 1},
    };
    /* every case on each bf16 kernel this processor runs: AVX512-BF16's
     * vectors, then AMX's tiles where it has them */
    bool amx = nn_gemm_bf16_amx();
    printf("bf16 kernels: avx512-bf16%s\n", amx ? ", amx-bf16" : " (no AMX-BF16 here)");
    for (int pass = 0; pass < (amx ? 2 : 1); pass++) {
        nn_gemm_bf16_use_amx(pass == 1);
        pass_name = pass ? "amx-bf16" : "avx512-bf16";
        nn_gemm g = {.m = 64, .n = 64, .k = 64, .bf16 = true};
        CHECK(gemm_kernel_index(&g) == (pass ? GEMM_KERNEL_AMX : GEMM_KERNEL_BF16), "pass %d: kernel %d", pass,
              gemm_kernel_index(&g));
        g.k = 15; /* too short a K for AMX's padded panels: the vectors' kernel */
        CHECK(gemm_kernel_index(&g) == GEMM_KERNEL_BF16, "K 15 on pass %d: kernel %d", pass, gemm_kernel_index(&g));
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_case(&cases[i]);
        run_conv(3, 9, 11, 1, 5, 2);
        run_conv(13, 20, 17, 2, 40, 2);
        run_conv(64, 14, 14, 1, 30, 2);
        /* a plane wider than the kernel's own 512-column block: the blocking
         * derived from a large L2 (tests/run_all.sh runs this with one) packs
         * blocks of up to NN_GEMM_NC_MAX columns; one thread takes all of N */
        run_conv(16, 48, 50, 1, 20, 1);
    }
    check_cache();
    check_winograd(false);
    if (amx) check_winograd(true);
    /* the ISA chosen below avx512 takes the kernel away: refused, not run in fp32 */
    if (nn_isa_select(NN_ISA_AVX2)) {
        CHECK(!nn_gemm_bf16_available(), "bf16 still available under avx2");
        check_refused();
    }
    return check_summary();
}
