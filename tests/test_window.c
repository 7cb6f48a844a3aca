/* Sliding-window ops against references, through the op table as the
 * engine runs them.
 *
 * Depthwise convolutions (one channel per group, MobileNet's and
 * EfficientNet's), against double precision: every kernel family this CPU
 * has (each has its own depthwise paths), one and two threads, channel
 * counts that leave a partial vector of channels, planes from 5x5 to 66x62
 * (up to 28x28 they take the channel-blocked path on AVX2, larger ones the
 * per-plane paths), odd and non-square sizes, asymmetric pads, 3x3 and 5x5
 * kernels at strides 1 and 2, dilation, and fused epilogues (bias,
 * residual, activation).
 *
 * Convs with few input channels (the RGB stems), against double precision:
 * 3x3 stride 2, 7x7 stride 2, 3x3 stride 1, 11x11 stride 4 and other
 * kernels and strides, output
 * channel counts and row widths that leave partial blocks, every kind of
 * epilogue; and one grouped conv.
 *
 * MaxPool (exactly) and AveragePool, with and without count_include_pad,
 * on every kernel family, and MaxPool on uint8 and int8 bytes: row widths that leave partial vectors, strides 1
 * to 3, pads, ceil mode, windows inside the input, rows a block each and rows
 * too wide for the row buffers, the pools of ResNet, GoogLeNet, VGG,
 * DenseNet and Inception-v3. */
#include "../ops/act.h"
#include "../ops/conv_kernels.h"
#include "../ops/gemm.h"
#include "op_harness.h"

/* A 2-D Conv of `group` groups (depthwise: one channel per group) with a
 * square kernel. */
typedef struct conv_case {
    int batch, in_ch, out_ch, group, h, w, k, stride, dilation;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias;
    nn_epilogue ep; /* residual 3 when set: the input after x, w and bias */
} conv_case;

/* depthwise: channels in, channels out, one per group */
#define DW(batch, ch, h, w, k, s, d, ...)                                                                              \
    { batch, ch, ch, ch, h, w, k, s, d, __VA_ARGS__ }
/* few input channels, one group, no dilation */
#define STEM(batch, in, out, h, w, k, s, ...)                                                                          \
    { batch, in, out, 1, h, w, k, s, 1, __VA_ARGS__ }

/* y = act(conv(x, w) + bias + residual), in double */
static void reference(const conv_case *c, const float *x, const float *w, const float *bias, const float *res, int oh_n,
                      int ow_n, float *y) {
    int cg = c->in_ch / c->group, mg = c->out_ch / c->group;
    for (int n = 0; n < c->batch; n++)
        for (int oc = 0; oc < c->out_ch; oc++)
            for (int oh = 0; oh < oh_n; oh++)
                for (int ow = 0; ow < ow_n; ow++) {
                    double acc = bias ? bias[oc] : 0.0;
                    for (int ic = 0; ic < cg; ic++)
                        for (int kh = 0; kh < c->k; kh++)
                            for (int kw = 0; kw < c->k; kw++) {
                                int ih = oh * c->stride - (int)c->pads[0] + kh * c->dilation;
                                int iw = ow * c->stride - (int)c->pads[1] + kw * c->dilation;
                                if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                                acc += (double)x[((n * c->in_ch + oc / mg * cg + ic) * c->h + ih) * c->w + iw] *
                                       w[((oc * cg + ic) * c->k + kh) * c->k + kw];
                            }
                    int64_t at = ((int64_t)(n * c->out_ch + oc) * oh_n + oh) * ow_n + ow;
                    if (res) acc += res[at];
                    y[at] = nn_act_apply(c->ep.act, c->ep.alpha, c->ep.beta, (float)acc);
                }
}

/* with cpu_prepare: 1 when the case must run per-tap GEMMs (conv_taps.c), -1 when it must not, 0 either */
static int check_taps;
/* 1 when the case must run its GEMM positions x channels (conv.c), -1 when it must not, 0 either */
static int check_rows;
/* what the case's description (as nndump shows it) must contain, or NULL */
static const char *check_how;
/* set for cases through Winograd: its transforms round more than a direct
 * sum (test_winograd.c measures it against double precision, relative L2
 * within 1e-5), so the cases here are checked element by element 10x wider */
static double tol_scale = 1.0;

static void check_case(const conv_case *c, const char *kernel) {
    int64_t kernel_shape[2] = {c->k, c->k}, strides[2] = {c->stride, c->stride},
            dilations[2] = {c->dilation, c->dilation};
    nn_attr attrs[] = {attr_int("group", c->group), attr_ints("kernel_shape", 2, kernel_shape),
                       attr_ints("strides", 2, strides), attr_ints("dilations", 2, dilations),
                       attr_ints("pads", 4, c->pads)};
    int span = (c->k - 1) * c->dilation + 1;
    int oh_n = (c->h + (int)(c->pads[0] + c->pads[2]) - span) / c->stride + 1;
    int ow_n = (c->w + (int)(c->pads[1] + c->pads[3]) - span) / c->stride + 1;
    bool residual = c->ep.residual >= 0;
    nn_tensor in[4] = {rand_tensor(-1, 1, 4, c->batch, c->in_ch, c->h, c->w),
                       rand_tensor(-1, 1, 4, c->out_ch, c->in_ch / c->group, c->k, c->k),
                       c->bias ? rand_tensor(-1, 1, 1, c->out_ch) : (nn_tensor){0},
                       residual ? rand_tensor(-1, 1, 4, c->batch, c->out_ch, oh_n, ow_n) : (nn_tensor){0}};
    int n_in = residual ? 4 : c->bias ? 3 : 2;
    char label[200];
    snprintf(label, sizeof label,
             "%s%s, %d thread(s): N=%d C=%d M=%d group %d %dx%d k%d s%d d%d pads %lld,%lld,%lld,%lld%s act %d%s",
             kernel, cpu_prepare ? " prepared" : "", cpu_threads, c->batch, c->in_ch, c->out_ch, c->group, c->h, c->w,
             c->k, c->stride, c->dilation, (long long)c->pads[0], (long long)c->pads[1], (long long)c->pads[2],
             (long long)c->pads[3], c->bias ? " bias" : "", (int)c->ep.act, residual ? " residual" : "");
    op_run r;
    bool fused = residual || c->ep.act != NN_ACT_NONE;
    if (cpu_run(&r, "Conv", 13, attrs, 5, NULL, in, n_in, 1, fused ? &c->ep : NULL)) {
        if (cpu_prepare && check_taps) { /* the path the case is for: what prepare picked, as nndump shows it */
            char how[160];
            nn_op_get(nn_op_lookup("Conv"))->describe(&r.call, how, sizeof how);
            CHECK(!!strstr(how, "per tap") == (check_taps > 0), "%s: expected %s per-tap GEMMs, got '%s'", label,
                  check_taps > 0 ? "" : "no", how);
        }
        if (check_rows) {
            char how[160];
            nn_op_get(nn_op_lookup("Conv"))->describe(&r.call, how, sizeof how);
            CHECK(!!strstr(how, "positions x channels") == (check_rows > 0),
                  "%s: expected %spositions x channels, got '%s'", label, check_rows > 0 ? "" : "not ", how);
        }
        if (check_how) {
            char how[160];
            nn_op_get(nn_op_lookup("Conv"))->describe(&r.call, how, sizeof how);
            CHECK(strstr(how, check_how) != NULL, "%s: expected '%s' in '%s'", label, check_how, how);
        }
        CHECK(r.out[0].ndim == 4 && r.out[0].dims[2] == oh_n && r.out[0].dims[3] == ow_n, "%s: output shape", label);
        int64_t n = (int64_t)c->batch * c->out_ch * oh_n * ow_n;
        float *want = malloc(sizeof(float) * (size_t)n);
        reference(c, r.in[0].data, r.in[1].data, c->bias ? r.in[2].data : NULL, residual ? r.in[3].data : NULL, oh_n,
                  ow_n, want);
        /* fp32 sums of K products of values in [-1, 1] drift from the double
         * reference as K grows (K = 576: 1.2e-5 seen on an output of 0.08,
         * the summation order being the kernel's), so the absolute tolerance
         * grows with K past 256; a wrong tap or index is off by ~0.1-1 */
        int64_t kdim = (int64_t)(c->in_ch / c->group) * c->k * c->k;
        CHECK_CLOSE(label, r.out[0].data, want, n, tol_scale * 1e-5 * (kdim > 256 ? (double)kdim / 256.0 : 1.0),
                    tol_scale * 1e-5);
        free(want);
    }
    release(&r);
}

typedef struct pool_case {
    int channels, h, w, k, stride, ceil_mode;
    int64_t pads[4];
} pool_case;

/* An output size: the spec's formula; in ceil mode a last window that would
 * start in the end padding is dropped (as PyTorch does: it covers no input). */
static int64_t pool_out(int64_t in, int k, int stride, int64_t pad, int64_t pad_end, int ceil_mode) {
    int64_t span = in + pad + pad_end - k, out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad) out--;
    return out;
}

/* MaxPool, or AveragePool with or without count_include_pad, against the
 * definition: the max of the taps inside the input, or their sum divided by
 * their count, counting the pads with count_include_pad (but not taps past
 * the end pad, where ceil mode's last window may reach). */
static void check_pool(const pool_case *c, const char *kernel, bool mean, int include_pad) {
    int64_t kernel_shape[2] = {c->k, c->k}, strides[2] = {c->stride, c->stride};
    nn_attr attrs[] = {attr_ints("kernel_shape", 2, kernel_shape), attr_ints("strides", 2, strides),
                       attr_ints("pads", 4, c->pads), attr_int("ceil_mode", c->ceil_mode),
                       attr_int("count_include_pad", include_pad)};
    nn_tensor in[1] = {rand_tensor(-1, 1, 4, 2, c->channels, c->h, c->w)};
    char label[200];
    snprintf(label, sizeof label, "%s%s, %s, %d thread(s): C=%d %dx%d k%d s%d pads %lld,%lld,%lld,%lld ceil %d",
             mean ? "AveragePool" : "MaxPool", mean && include_pad ? " count_include_pad" : "", kernel, cpu_threads,
             c->channels, c->h, c->w, c->k, c->stride, (long long)c->pads[0], (long long)c->pads[1],
             (long long)c->pads[2], (long long)c->pads[3], c->ceil_mode);
    op_run r;
    if (cpu_run(&r, mean ? "AveragePool" : "MaxPool", mean ? 19 : 12, attrs, mean ? 5 : 4, NULL, in, 1, 1, NULL)) {
        const float *x = r.in[0].data;
        int64_t oh_n = r.out[0].dims[2], ow_n = r.out[0].dims[3], n = 2LL * c->channels * oh_n * ow_n;
        int64_t want_h = pool_out(c->h, c->k, c->stride, c->pads[0], c->pads[2], c->ceil_mode),
                want_w = pool_out(c->w, c->k, c->stride, c->pads[1], c->pads[3], c->ceil_mode);
        CHECK(r.out[0].ndim == 4 && oh_n == want_h && ow_n == want_w,
              "%s: output shape: expected [2, %d, %lld, %lld], got %d dims [.., .., %lld, %lld]", label, c->channels,
              (long long)want_h, (long long)want_w, r.out[0].ndim, (long long)oh_n, (long long)ow_n);
        float *want = malloc(sizeof(float) * (size_t)n);
        for (int64_t p = 0; p < 2LL * c->channels; p++)
            for (int64_t oh = 0; oh < oh_n; oh++)
                for (int64_t ow = 0; ow < ow_n; ow++) {
                    double m = -INFINITY, sum = 0;
                    int count = 0;
                    for (int kh = 0; kh < c->k; kh++)
                        for (int kw = 0; kw < c->k; kw++) {
                            int64_t ih = oh * c->stride - c->pads[0] + kh, iw = ow * c->stride - c->pads[1] + kw;
                            bool inside = ih >= 0 && ih < c->h && iw >= 0 && iw < c->w;
                            bool padded = ih < c->h + c->pads[2] && iw < c->w + c->pads[3];
                            count += inside || (include_pad && padded);
                            if (!inside) continue;
                            float v = x[(p * c->h + ih) * c->w + iw];
                            sum += v;
                            if (v > m) m = v;
                        }
                    want[(p * oh_n + oh) * ow_n + ow] = (float)(mean ? sum / count : m);
                }
        if (mean)
            CHECK_CLOSE(label, r.out[0].data, want, n, 1e-6, 1e-6);
        else
            CHECK_CLOSE(label, r.out[0].data, want, n, 0.0, 0.0);
        free(want);
    }
    release(&r);
}

/* MaxPool on uint8 or int8 bytes, exactly: the max of the taps inside the
 * input, the type's least value for a window with none (ceil mode's last
 * window can lie in the end pad). */
static void check_pool_bytes(const pool_case *c, nn_dtype dt) {
    int64_t kernel_shape[2] = {c->k, c->k}, strides[2] = {c->stride, c->stride};
    nn_attr attrs[] = {attr_ints("kernel_shape", 2, kernel_shape), attr_ints("strides", 2, strides),
                       attr_ints("pads", 4, c->pads), attr_int("ceil_mode", c->ceil_mode)};
    bool sgn = dt == NN_DTYPE_INT8;
    nn_tensor in[1] = {tensor(dt, 4, 2, c->channels, c->h, c->w)};
    for (int64_t i = 0; i < nn_tensor_elements(&in[0]); i++)
        ((uint8_t *)in[0].data)[i] = (uint8_t)(uniform(0, 1) * 256.0f);
    char label[200];
    snprintf(label, sizeof label, "MaxPool %s, %d thread(s): C=%d %dx%d k%d s%d pads %lld,%lld,%lld,%lld ceil %d",
             sgn ? "int8" : "uint8", cpu_threads, c->channels, c->h, c->w, c->k, c->stride, (long long)c->pads[0],
             (long long)c->pads[1], (long long)c->pads[2], (long long)c->pads[3], c->ceil_mode);
    op_run r;
    if (cpu_run(&r, "MaxPool", 12, attrs, 4, NULL, in, 1, 1, NULL)) {
        const uint8_t *x = r.in[0].data, *y = r.out[0].data;
        int64_t oh_n = r.out[0].dims[2], ow_n = r.out[0].dims[3], bad = 0, first = -1;
        int64_t want_h = pool_out(c->h, c->k, c->stride, c->pads[0], c->pads[2], c->ceil_mode),
                want_w = pool_out(c->w, c->k, c->stride, c->pads[1], c->pads[3], c->ceil_mode);
        CHECK(r.out[0].ndim == 4 && r.out[0].dtype == dt && oh_n == want_h && ow_n == want_w,
              "%s: output: expected [2, %d, %lld, %lld] of the input's type", label, c->channels, (long long)want_h,
              (long long)want_w);
        for (int64_t p = 0; p < 2LL * c->channels && oh_n == want_h && ow_n == want_w; p++)
            for (int64_t oh = 0; oh < oh_n; oh++)
                for (int64_t ow = 0; ow < ow_n; ow++) {
                    int m = sgn ? -128 : 0;
                    for (int kh = 0; kh < c->k; kh++)
                        for (int kw = 0; kw < c->k; kw++) {
                            int64_t ih = oh * c->stride - c->pads[0] + kh, iw = ow * c->stride - c->pads[1] + kw;
                            if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                            uint8_t b = x[(p * c->h + ih) * c->w + iw];
                            int v = sgn ? (int)(int8_t)b : (int)b;
                            if (v > m) m = v;
                        }
                    int64_t at = (p * oh_n + oh) * ow_n + ow;
                    int got = sgn ? (int)(int8_t)y[at] : (int)y[at];
                    if (got != m && bad++ == 0) first = at;
                }
        CHECK(bad == 0, "%s: %lld outputs differ from the taps' max (first at %lld)", label, (long long)bad,
              (long long)first);
    }
    release(&r);
}

/* Each case on every kernel family this CPU has, weights prepared and
 * not, on 1 and 2 threads; the AVX-512 and AVX2 families must take the
 * path named `how` (the scalar family runs its own kernel). */
static void check_every_family(const conv_case *cases, size_t n, const char *how) {
    static const char *const families[] = {"avx512", "avx2", "scalar"};
    for (int prep = 0; prep <= 1; prep++) {
        cpu_prepare = prep;
        for (size_t k = 0; k < sizeof families / sizeof families[0]; k++) {
            if (!nn_gemm_use_kernel(families[k])) continue;
            check_how = strcmp(families[k], "scalar") ? how : NULL;
            for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
                for (size_t i = 0; i < n; i++)
                    check_case(&cases[i], families[k]);
        }
    }
    check_how = NULL;
    cpu_prepare = false;
}

int main(void) {
    const nn_epilogue none = {.residual = -1}, relu6 = {.residual = -1, .act = NN_ACT_CLIP, .beta = 6.0f},
                      res_clip = {.residual = 3, .act = NN_ACT_CLIP, .alpha = -0.5f, .beta = 0.5f},
                      silu = {.residual = -1, .act = NN_ACT_SILU}, res_only = {.residual = 3},
                      relu = {.residual = -1, .act = NN_ACT_RELU}, tanh_only = {.residual = -1, .act = NN_ACT_TANH},
                      res_gelu = {.residual = 3, .act = NN_ACT_GELU};
    const conv_case cases[] = {
        /* MobileNetV2's 7x7 and 14x14 layers, a partial vector of channels */
        DW(1, 20, 7, 7, 3, 1, 1, {1, 1, 1, 1}, true, relu6),
        DW(2, 13, 14, 14, 3, 1, 1, {1, 1, 1, 1}, true, res_clip),
        DW(1, 24, 14, 14, 3, 2, 1, {1, 1, 1, 1}, true, relu6),
        /* EfficientNet's 5x5, stride 1 and 2 */
        DW(2, 17, 7, 7, 5, 1, 1, {2, 2, 2, 2}, true, silu),
        DW(1, 9, 14, 14, 5, 2, 1, {2, 2, 2, 2}, false, silu),
        /* odd, non-square, asymmetric pads, no pads, a lone channel */
        DW(1, 11, 9, 13, 3, 2, 1, {0, 1, 1, 0}, true, res_only),
        DW(3, 1, 5, 6, 3, 1, 1, {0, 0, 0, 0}, false, none),
        DW(1, 8, 6, 11, 5, 1, 1, {1, 2, 3, 0}, true, res_clip),
        /* 3x3 on flat planes with rows that end mid-vector, many rows per
         * vector, the largest flat plane, and one row of 1000 (the rows of
         * taps above and below it lie wholly in the zero margin) */
        DW(1, 7, 9, 13, 3, 1, 1, {1, 1, 1, 1}, true, relu6),
        DW(1, 5, 10, 12, 3, 1, 1, {0, 0, 2, 2}, true, relu6), /* pads after only: not by rotation */
        DW(2, 3, 40, 3, 3, 1, 1, {1, 1, 1, 1}, true, res_clip),
        DW(1, 3, 32, 32, 3, 1, 1, {1, 1, 1, 1}, true, res_only),
        DW(1, 2, 1, 1000, 3, 1, 1, {1, 1, 1, 1}, false, none),
        /* ... and larger planes (MobileNetV2's 56x56 and 112x112), rows of
         * 1 and 2, a row as wide as the rotation path takes and one wider */
        DW(1, 3, 57, 56, 3, 1, 1, {1, 1, 1, 1}, true, res_clip),
        DW(1, 2, 112, 112, 3, 1, 1, {1, 1, 1, 1}, true, relu6),
        DW(1, 2, 30, 1, 3, 1, 1, {1, 1, 1, 1}, true, relu6),
        DW(1, 2, 21, 2, 3, 1, 1, {1, 1, 1, 1}, false, none),
        DW(1, 2, 5, 256, 3, 1, 1, {1, 1, 1, 1}, true, res_only),
        DW(1, 2, 5, 257, 3, 1, 1, {1, 1, 1, 1}, true, res_only),
        /* the epilogue in the vector before its store: ReLU by rotation,
         * and the activations left until after the plane (tanh, GELU),
         * by rotation and on flat planes, one and two at a time */
        DW(1, 4, 30, 30, 3, 1, 1, {1, 1, 1, 1}, true, relu),
        DW(1, 3, 57, 56, 3, 1, 1, {1, 1, 1, 1}, true, res_gelu),
        DW(1, 5, 10, 12, 3, 1, 1, {0, 0, 2, 2}, true, res_gelu),
        DW(1, 3, 10, 12, 3, 1, 1, {0, 0, 2, 2}, false, tanh_only),
        DW(1, 6, 14, 14, 5, 1, 1, {2, 2, 2, 2}, true, tanh_only),
        /* ... and on the channel-blocked kernel's outputs before they are
         * transposed back (without a residual), or after (tanh) */
        DW(1, 20, 7, 7, 3, 1, 1, {1, 1, 1, 1}, true, silu),
        DW(1, 20, 7, 7, 3, 1, 1, {1, 1, 1, 1}, true, tanh_only),
        /* ... and by the stride-2 kernel */
        DW(1, 3, 17, 112, 3, 2, 1, {1, 1, 1, 1}, true, tanh_only),
        DW(1, 2, 40, 104, 5, 2, 1, {2, 3, 1, 2}, true, res_gelu),
        DW(1, 3, 30, 64, 3, 2, 1, {1, 1, 1, 1}, false, relu),
        /* dilation, and planes around and past the blocked path's limits */
        DW(1, 10, 12, 12, 3, 1, 2, {2, 2, 2, 2}, true, relu6),
        DW(1, 19, 28, 28, 3, 1, 1, {1, 1, 1, 1}, true, res_clip),
        DW(1, 12, 30, 29, 3, 2, 1, {1, 1, 1, 1}, false, relu6),
        DW(1, 9, 40, 40, 3, 1, 1, {1, 1, 1, 1}, true, relu6),
        DW(1, 5, 66, 62, 5, 2, 1, {2, 2, 2, 2}, true, silu),
        /* 3x3 stride 2 past the blocked path, rows of 32 outputs and more,
         * a multiple of 8 (rows split by column parity): odd and even left
         * pads, odd and even widths; beside them rows of 36 and a 5x5 */
        DW(1, 4, 15, 79, 3, 2, 1, {1, 1, 1, 1}, true, relu6),
        DW(2, 3, 20, 64, 3, 2, 1, {0, 0, 1, 1}, false, none),
        DW(1, 3, 17, 112, 3, 2, 1, {1, 1, 1, 1}, true, res_clip),
        DW(1, 2, 33, 72, 3, 2, 1, {1, 1, 1, 1}, true, relu6),
        DW(2, 2, 40, 104, 5, 2, 1, {2, 3, 1, 2}, true, res_clip),
        /* MobileNetV2's and EfficientNet-B0's, ResNet's, VGG's: output
         * channels that leave a partial block of 4, rows that end in a
         * partial vector of 8 or a partial block of 24 */
        STEM(1, 3, 6, 33, 37, 3, 2, {1, 1, 1, 1}, true, relu6),
        STEM(2, 3, 5, 20, 35, 3, 2, {1, 1, 1, 1}, true, silu),
        STEM(1, 3, 9, 30, 53, 7, 2, {3, 3, 3, 3}, true, relu),
        STEM(1, 3, 7, 12, 50, 3, 1, {1, 1, 1, 1}, false, none),
        /* rows cut into near-equal blocks of up to 4 AVX-512 vectors: 112
         * outputs (4 + 3 vectors, ResNet's stem), 72 (3 + 2, the last
         * partial), 150 (4 + 4 + 2, the last partial) */
        STEM(1, 3, 9, 9, 224, 7, 2, {3, 3, 3, 3}, true, relu),
        STEM(1, 3, 5, 7, 72, 3, 1, {1, 1, 1, 1}, true, res_clip),
        STEM(1, 2, 6, 5, 150, 3, 1, {1, 1, 1, 1}, false, silu),
        /* kernels of other widths, asymmetric pads and odd left pads, one
         * and four channels, a residual */
        STEM(2, 1, 3, 11, 26, 5, 1, {0, 2, 1, 1}, true, res_clip),
        STEM(1, 4, 4, 17, 25, 3, 2, {0, 1, 1, 0}, true, res_only),
        STEM(1, 2, 8, 23, 31, 11, 2, {5, 5, 5, 5}, false, relu6),
        STEM(1, 2, 2, 9, 9, 2, 2, {0, 0, 0, 0}, true, none),
        STEM(1, 3, 7, 16, 28, 4, 4, {0, 0, 0, 0}, true, none), /* Swin's patches: the GEMM */
        /* ConvNeXt's 7x7 (flat planes up to 32x32, padded copies past
         * them), dilated 3x3 and 5x5 (DeepLab's) at dilations 2, 4 and 6,
         * flat and padded, asymmetric pads, and strides the fast paths
         * leave to the generic one */
        DW(1, 10, 14, 14, 7, 1, 1, {3, 3, 3, 3}, true, res_clip),
        DW(2, 3, 7, 7, 7, 1, 1, {3, 3, 3, 3}, false, none),
        DW(1, 3, 13, 11, 7, 1, 1, {3, 2, 3, 4}, true, relu6),
        DW(1, 5, 56, 56, 7, 1, 1, {3, 3, 3, 3}, true, relu6),
        DW(1, 3, 37, 33, 7, 1, 1, {2, 4, 4, 2}, true, res_only),
        DW(1, 4, 16, 15, 7, 2, 1, {3, 3, 3, 3}, true, relu6),
        DW(1, 6, 14, 14, 5, 1, 2, {4, 4, 4, 4}, true, silu),
        DW(1, 5, 40, 36, 5, 1, 2, {4, 4, 4, 4}, true, relu6),
        DW(1, 3, 33, 33, 3, 1, 4, {4, 4, 4, 4}, true, res_clip),
        DW(1, 4, 20, 21, 3, 1, 6, {6, 6, 6, 6}, false, none),
        DW(1, 3, 19, 17, 3, 1, 2, {1, 3, 3, 1}, true, relu6),
        DW(1, 3, 21, 22, 3, 2, 2, {2, 2, 2, 2}, true, relu6),
        DW(1, 2, 9, 9, 5, 1, 4, {8, 8, 8, 8}, true, res_only),
        /* grouped convs, 2 to 32 channels per group (ResNeXt's, RegNet's),
         * strides 1 and 2, a dilated one */
        {1, 32, 32, 8, 14, 14, 3, 1, 1, {1, 1, 1, 1}, true, relu},
        {1, 48, 48, 6, 15, 15, 3, 2, 1, {1, 1, 1, 1}, true, relu},
        {2, 64, 64, 2, 7, 7, 3, 1, 1, {1, 1, 1, 1}, false, res_only},
        {1, 24, 36, 12, 10, 9, 3, 1, 2, {2, 2, 2, 2}, true, relu6},
        {1, 40, 10, 2, 11, 13, 5, 2, 1, {2, 1, 2, 3}, true, res_clip},
        {1, 128, 128, 2, 5, 6, 3, 1, 1, {1, 1, 1, 1}, true, relu},
        {1, 130, 4, 2, 5, 5, 3, 1, 1, {1, 1, 1, 1}, true, none}, /* 65 channels per group: the GEMM */
        /* two groups of 2 input channels: the grouped path (the GEMM without AVX-512) */
        {1, 4, 6, 2, 9, 11, 3, 1, 1, {1, 1, 1, 1}, true, relu6},
    };
    const char *kernels[] = {"avx512", "avx2", "scalar"};
    int families = 0;
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        if (!nn_gemm_use_kernel(kernels[k])) continue;
        families++;
        for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
                check_case(&cases[i], kernels[k]);
    }
    CHECK(families >= 2, "only %d kernel families ran (the scalar one is always there)", families);
    /* the depthwise ones with the weights prepared as the engine prepares
     * constants (and then frees): the channel-blocked kernel reads them laid
     * out per block, the per-plane ones the copy as they are */
    cpu_prepare = true;
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        if (!nn_gemm_use_kernel(kernels[k])) continue;
        for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
                if (cases[i].group == cases[i].in_ch && cases[i].group > 1) check_case(&cases[i], kernels[k]);
    }
    cpu_prepare = false;
    /* AVX2's stride-2 3x3 and 5x5 with the columns split in registers, on
     * the planes the channel-blocked kernel and the split copy leave (rows
     * of outputs under 32 or not a multiple of 8): odd widths, asymmetric
     * pads, residuals */
    const conv_case s2_avx2[] = {
        DW(1, 2, 33, 72, 3, 2, 1, {1, 1, 1, 1}, true, relu6),
        DW(1, 3, 45, 47, 3, 2, 1, {1, 1, 1, 1}, true, res_clip),
        DW(2, 2, 40, 104, 5, 2, 1, {2, 3, 1, 2}, true, res_clip),
        DW(1, 2, 70, 69, 5, 2, 1, {2, 2, 2, 2}, false, relu6),
    };
    if (nn_gemm_use_kernel("avx2")) {
        check_how = "columns split in registers";
        for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
            for (size_t i = 0; i < sizeof s2_avx2 / sizeof s2_avx2[0]; i++) check_case(&s2_avx2[i], "avx2");
        check_how = NULL;
    }
    /* depthwise by rows (3x3, 5x5 and 7x7 at stride 1 on rows of 9 to 128;
     * AVX-512 up to four vectors a row at once, AVX2 in chunks of two or
     * one): planes of fewer rows than the kernel, rows of 9 to 128,
     * residuals, activations in the vector and after the plane, two images,
     * no bias; the scalar family runs them on its own kernel */
    const conv_case by_rows[] = {
        DW(2, 3, 1, 20, 3, 1, 1, {1, 1, 1, 1}, true, res_clip),
        DW(1, 4, 2, 9, 5, 1, 1, {2, 2, 2, 2}, true, relu6),
        DW(1, 3, 5, 33, 3, 1, 1, {1, 1, 1, 1}, true, res_only),
        DW(1, 3, 3, 49, 3, 1, 1, {1, 1, 1, 1}, false, none),
        DW(2, 5, 14, 14, 5, 1, 1, {2, 2, 2, 2}, true, res_clip),
        DW(1, 4, 11, 16, 5, 1, 1, {2, 2, 2, 2}, true, tanh_only),
        DW(1, 3, 28, 28, 5, 1, 1, {2, 2, 2, 2}, true, silu),
        DW(1, 2, 13, 17, 3, 1, 1, {1, 1, 1, 1}, true, res_gelu),
        DW(1, 3, 9, 48, 3, 1, 1, {1, 1, 1, 1}, true, relu),
        DW(1, 2, 7, 64, 3, 1, 1, {1, 1, 1, 1}, true, res_clip),
        DW(1, 2, 6, 32, 5, 1, 1, {2, 2, 2, 2}, false, relu6),
        DW(1, 3, 14, 14, 7, 1, 1, {3, 3, 3, 3}, true, res_clip),
        DW(2, 2, 4, 29, 7, 1, 1, {3, 3, 3, 3}, true, relu6),
        DW(1, 2, 9, 10, 7, 1, 1, {3, 3, 3, 3}, false, res_gelu),
        /* AVX2's whole 3x3 rows: 2 vectors, the last of 4 and of 8 columns */
        DW(1, 3, 6, 12, 3, 1, 1, {1, 1, 1, 1}, true, res_clip),
        DW(2, 2, 5, 16, 3, 1, 1, {1, 1, 1, 1}, true, relu6),
        /* rows in chunks, the last one of 1 to 3 vectors */
        DW(1, 2, 7, 66, 3, 1, 1, {1, 1, 1, 1}, true, res_clip),
        DW(1, 2, 6, 82, 3, 1, 1, {1, 1, 1, 1}, true, relu6),
        DW(1, 2, 5, 100, 3, 1, 1, {1, 1, 1, 1}, false, tanh_only),
        DW(1, 2, 9, 40, 5, 1, 1, {2, 2, 2, 2}, true, res_only),
        DW(2, 2, 5, 128, 5, 1, 1, {2, 2, 2, 2}, true, silu),
        DW(1, 2, 8, 100, 7, 1, 1, {3, 3, 3, 3}, true, res_clip),
    };
    check_every_family(by_rows, sizeof by_rows / sizeof by_rows[0], "depthwise by rows");
    /* dilated 3x3 and 5x5 depthwise on the channel-blocked kernel (each
     * tap a step of the dilation across the padded block): DeepLab's and
     * LR-ASPP's 5x5 at dilation 2 on 14x14, partial blocks of channels,
     * stride 2, dilation 4 with pads past the plane, weights prepared and
     * not; the scalar family runs them on its own kernel */
    const conv_case dilated_blocked[] = {
        DW(1, 20, 14, 14, 5, 1, 2, {4, 4, 4, 4}, true, res_clip),
        DW(2, 5, 10, 13, 5, 1, 2, {4, 4, 4, 4}, false, relu6),
        DW(1, 18, 12, 11, 3, 2, 2, {2, 2, 2, 2}, true, relu6),
        DW(1, 3, 9, 9, 5, 1, 4, {8, 8, 8, 8}, true, silu),
    };
    check_every_family(dilated_blocked, sizeof dilated_blocked / sizeof dilated_blocked[0], "channel-blocked");
    /* few-channel convs at strides 3 and 4 on the direct kernel, rows split
     * into 3 or 4 column phases: AlexNet's 11x11 stride 4 stem (pad 2), a
     * 5x5 stride 3 with asymmetric pads and a residual, a 5x5 stride 4 (one
     * phase read by two taps), widths that leave partial vectors and blocks
     * of 4 channels (a kernel no wider than its stride goes to the GEMM) */
    const conv_case strided_stems[] = {
        STEM(1, 3, 6, 39, 47, 11, 4, {2, 2, 2, 2}, true, relu),
        STEM(2, 3, 5, 19, 29, 5, 3, {1, 2, 0, 1}, true, res_clip),
        STEM(1, 2, 9, 16, 70, 5, 4, {0, 0, 0, 0}, false, none),
        STEM(1, 4, 4, 23, 203, 7, 4, {3, 1, 2, 3}, true, relu6),
    };
    check_every_family(strided_stems, sizeof strided_stems / sizeof strided_stems[0], "direct");
    /* Dense and grouped convs dilated past their planes, weights prepared
     * as the engine prepares constants: the GEMM runs a kernel cut to the
     * taps that reach the input (DeepLab's ASPP: only the centre tap at
     * rates 24 and 36 on 14x14); beside them cuts on one side, in one dim,
     * a stride, and convs whose every tap counts. */
    const conv_case dilated[] = {
        {1, 16, 8, 1, 6, 6, 3, 1, 8, {8, 8, 8, 8}, true, relu},
        {1, 12, 6, 1, 7, 5, 3, 1, 4, {4, 4, 4, 4}, true, res_clip},
        {1, 8, 8, 2, 8, 12, 3, 1, 6, {6, 1, 0, 1}, false, relu6},
        {2, 6, 10, 1, 5, 12, 3, 2, 5, {5, 0, 5, 0}, true, none},
        {1, 9, 4, 1, 8, 8, 5, 1, 3, {0, 6, 12, 6}, true, res_only},
        {1, 8, 8, 1, 14, 14, 3, 1, 2, {2, 2, 2, 2}, true, relu},
        {1, 4, 4, 1, 1, 1, 5, 1, 1, {2, 2, 2, 2}, true, none}, /* one position: cut to a matrix-vector product */
        /* DeepLab's ASPP at rate 12 on a 14x14 map, a stride, batches that
         * span two chunks of conv_taps.c (128x128 outputs, 8 channels: two
         * images, then one), asymmetric pads, a tap per corner only, and outputs
         * that no tap reaches (the bias, then the epilogue) */
        {1, 20, 12, 1, 14, 14, 3, 1, 12, {12, 12, 12, 12}, true, relu},
        {2, 9, 7, 1, 14, 13, 3, 2, 10, {10, 9, 10, 11}, true, res_clip},
        {3, 4, 4, 1, 128, 128, 3, 1, 70, {70, 70, 70, 70}, true, res_only},
        {1, 5, 6, 1, 9, 11, 3, 1, 7, {2, 9, 12, 1}, false, relu6},
        {2, 3, 5, 1, 3, 3, 2, 1, 8, {4, 4, 4, 4}, true, none},
        {1, 4, 3, 1, 1, 1, 2, 5, 1, {3, 3, 3, 3}, true, relu6},
    };
    /* each with per-tap GEMMs where at most half the (tap, output) pairs
     * reach the input (conv_taps.c), and with the GEMM on the cut kernel */
    cpu_prepare = true;
    for (int taps = 1; taps >= 0; taps--) {
        nn_conv_taps_enable(taps);
        for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
            if (!nn_gemm_use_kernel(kernels[k])) continue;
            for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
                for (size_t i = 0; i < sizeof dilated / sizeof dilated[0]; i++) {
                    /* the last six are the per-tap cases; the others may be either */
                    bool per_tap = i >= sizeof dilated / sizeof dilated[0] - 6;
                    check_taps = !taps ? -1 : per_tap ? 1 : 0;
                    check_case(&dilated[i], kernels[k]);
                }
        }
    }
    check_taps = 0;
    nn_conv_taps_enable(true);
    /* KxK convs with many output channels on planes of 64 positions or
     * fewer: positions x channels, the im2col matrix packed as A an image
     * at a time (conv.c, im2col_rows); ResNet's 3x3 on 7x7, a stride-2 one
     * into 7x7, a 5x5, a 1x1 stride 2, asymmetric pads, batches, residuals, 544 channels
     * (a partial 32-column tile); weights prepared (packed as B) and as
     * they are.  Beside them a 7x7 conv with 32 channels, which stays
     * channels x positions. */
    const conv_case as_rows[] = {
        {1, 24, 512, 1, 7, 7, 3, 1, 1, {1, 1, 1, 1}, true, relu},
        {2, 16, 512, 1, 13, 13, 3, 2, 1, {1, 1, 1, 1}, false, res_only},
        {2, 8, 544, 1, 7, 6, 5, 1, 1, {2, 1, 2, 3}, true, res_clip},
        {1, 12, 640, 1, 5, 9, 3, 1, 1, {0, 1, 2, 0}, true, relu6},
        {2, 32, 512, 1, 13, 13, 1, 2, 1, {0, 0, 0, 0}, true, res_only}, /* ResNet's 1x1 stride-2 downsample */
        {1, 24, 32, 1, 7, 7, 3, 1, 1, {1, 1, 1, 1}, true, relu},
    };
    for (int prep = 1; prep >= 0; prep--) {
        cpu_prepare = prep;
        for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
            if (!nn_gemm_use_kernel(kernels[k])) continue;
            for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
                for (size_t i = 0; i < sizeof as_rows / sizeof as_rows[0]; i++) {
                    check_rows = i + 1 < sizeof as_rows / sizeof as_rows[0] ? 1 : -1;
                    check_case(&as_rows[i], kernels[k]);
                }
        }
    }
    check_rows = 0;
    /* Dilated 3x3 convs as FCN's and DeepLab's ResNet backbones have them,
     * through Winograd one phase at a time (winograd.c): dilation 4 on
     * 28x28, 2 on 14x14 with a batch, phases of unequal sizes (27 and 21
     * rows and columns at dilation 2), a trailing pad that differs. */
    const conv_case phases[] = {
        {1, 32, 32, 1, 28, 28, 3, 1, 4, {4, 4, 4, 4}, true, relu},
        {2, 16, 24, 1, 14, 14, 3, 1, 2, {2, 2, 2, 2}, true, res_clip},
        {1, 16, 48, 1, 27, 21, 3, 1, 2, {2, 2, 2, 0}, false, res_only},
    };
    cpu_prepare = cpu_winograd = true;
    check_how = "winograd F(4x4,3x3) by phases";
    tol_scale = 10;
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        if (!nn_gemm_use_kernel(kernels[k])) continue;
        for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
            for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) check_case(&phases[i], kernels[k]);
    }
    check_how = NULL;
    tol_scale = 1;
    cpu_winograd = false;
    cpu_prepare = false;
    const pool_case pools[] = {
        {5, 112, 112, 3, 2, 0, {1, 1, 1, 1}}, /* ResNet's */
        {3, 56, 56, 3, 2, 1, {0, 0, 0, 0}},   /* GoogLeNet's, ceil mode */
        {4, 28, 28, 3, 1, 0, {1, 1, 1, 1}},   /* GoogLeNet's branch pools */
        {6, 14, 14, 3, 1, 0, {1, 1, 1, 1}},
        {7, 7, 7, 3, 1, 0, {1, 1, 1, 1}},
        {2, 14, 14, 2, 2, 0, {0, 0, 0, 0}}, /* VGG's */
        {3, 13, 19, 3, 2, 1, {1, 0, 0, 1}},
        {2, 9, 23, 5, 3, 0, {2, 2, 2, 2}},
        {3, 10, 17, 2, 1, 0, {0, 1, 1, 0}},
        {2, 5, 5, 2, 2, 1, {1, 1, 1, 1}}, /* ceil mode: a last window in the end padding, dropped */
        /* windows inside the input: Inception's 3x3/2 on 147x147, a window
         * as large as the plane, DenseNet's 2x2/2 transitions, and a stride
         * of 3 */
        {2, 147, 147, 3, 2, 0, {0, 0, 0, 0}},
        {3, 6, 9, 6, 1, 0, {0, 0, 0, 0}},
        {5, 28, 28, 2, 2, 0, {0, 0, 0, 0}},
        {2, 20, 23, 3, 3, 0, {0, 0, 0, 0}},
        /* Inception's branch pools once passes/fuse_pad.c gave them their Pad */
        {6, 17, 17, 3, 1, 0, {1, 1, 1, 1}},
        {3, 35, 35, 3, 1, 0, {1, 1, 1, 1}},
        /* rows of one block each, and rows too wide for the row buffers (the separable passes) */
        {2, 3, 2000, 3, 1, 1, {1, 1, 1, 1}},
        {1, 4, 9000, 2, 2, 0, {0, 0, 0, 0}},
    };
    /* every kernel family: each has its own rows; an AveragePool with its
     * pads counted or not, which goes to the separable passes */
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        if (!nn_gemm_use_kernel(kernels[k])) continue;
        for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
            for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
                check_pool(&pools[i], kernels[k], false, 0);
                check_pool(&pools[i], kernels[k], true, 0);
                check_pool(&pools[i], kernels[k], true, 1);
            }
    }
    /* the same pools on bytes (their own row loops, no ISA families), one
     * and two threads, and pads as wide as the window: its first and last
     * rows and columns hold no input, so they are the type's least value */
    const pool_case all_pad = {2, 6, 7, 2, 1, 0, {2, 2, 2, 2}};
    for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++) {
        for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
            check_pool_bytes(&pools[i], NN_DTYPE_UINT8);
            check_pool_bytes(&pools[i], NN_DTYPE_INT8);
        }
        check_pool_bytes(&all_pad, NN_DTYPE_UINT8);
        check_pool_bytes(&all_pad, NN_DTYPE_INT8);
    }
    printf("window ops: %d kernel families\n", families);
    return check_summary();
}
