/* The Winograd convolution (ops/winograd.c) against a direct convolution in
 * double precision: random shapes (channels, sizes, pads, batch, groups),
 * with and without bias, residual and activation, on 1 to 3 threads, and
 * with a workspace that holds fewer threads than asked for. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/isa.h"
#include "../ops/winograd.h"
#include "check.h"

/* relative L2 error and largest error over the largest |reference| */
static const double REL_L2_TOL = 1e-5, REL_MAX_TOL = 5e-5;
/* multiply-adds per case: the suite runs under valgrind */
static const double MAC_BUDGET = 4e6;

static double worst_l2, worst_max;

static uint32_t seed = 12345;
static uint32_t next(void) {
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
}
static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)next() / (float)(1u << 24); }
static int64_t pick(const int64_t *v, int n) { return v[next() % (uint32_t)n]; }

typedef struct conv_case {
    nn_winograd_shape s;
    int64_t pad_bottom, pad_right;
    bool bias, residual;
    nn_act act;
    int threads;
    bool short_workspace; /* room for one thread only */
} conv_case;

/* y = act(conv(x, w) + bias + residual) in double. */
static void reference(const conv_case *k, const float *x, const float *w, const float *b, const float *res,
                      double *y) {
    const nn_winograd_shape *s = &k->s;
    int64_t cg = s->in_ch / s->group, mg = s->out_ch / s->group;
    for (int64_t n = 0; n < s->batch; n++)
        for (int64_t m = 0; m < s->out_ch; m++)
            for (int64_t oy = 0; oy < s->out_h; oy++)
                for (int64_t ox = 0; ox < s->out_w; ox++) {
                    double acc = b ? b[m] : 0.0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t kh = 0; kh < 3; kh++)
                            for (int64_t kw = 0; kw < 3; kw++) {
                                int64_t iy = oy + kh * s->dilation_h - s->pad_top;
                                int64_t ix = ox + kw * s->dilation_w - s->pad_left;
                                if (iy < 0 || iy >= s->in_h || ix < 0 || ix >= s->in_w) continue;
                                acc += (double)x[((n * s->in_ch + m / mg * cg + c) * s->in_h + iy) * s->in_w + ix] *
                                       w[((m * cg + c) * 3 + kh) * 3 + kw];
                            }
                    int64_t i = ((n * s->out_ch + m) * s->out_h + oy) * s->out_w + ox;
                    if (res) acc += res[i];
                    if (k->act == NN_ACT_RELU) acc = acc > 0 ? acc : 0;
                    if (k->act == NN_ACT_SIGMOID) acc = 1 / (1 + exp(-acc));
                    y[i] = acc;
                }
}

static void check_case(const conv_case *k, const char *label) {
    const nn_winograd_shape *s = &k->s;
    int64_t cg = s->in_ch / s->group;
    size_t nx = (size_t)(s->batch * s->in_ch * s->in_h * s->in_w), nw = (size_t)(s->out_ch * cg * 9);
    size_t ny = (size_t)(s->batch * s->out_ch * s->out_h * s->out_w);
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw), *b = malloc(sizeof(float) * s->out_ch);
    float *res = malloc(sizeof(float) * ny), *y = malloc(sizeof(float) * ny);
    double *ref = malloc(sizeof(double) * ny);
    size_t prep_size = nn_winograd_prepared_size(s), ws_size = nn_winograd_workspace(s, k->threads);
    if (k->short_workspace) ws_size = nn_winograd_workspace(s, 1);
    void *prep = malloc(prep_size), *ws = malloc(ws_size);
    /* post-ReLU-like activations for half the cases, weights at He scale */
    bool nonneg = next() & 1;
    for (size_t i = 0; i < nx; i++) x[i] = uniform(nonneg ? 0.0f : -1.0f, 1.0f);
    float scale = sqrtf(6.0f / (float)(9 * cg));
    for (size_t i = 0; i < nw; i++) w[i] = uniform(-scale, scale);
    for (int64_t i = 0; i < s->out_ch; i++) b[i] = uniform(-0.5f, 0.5f);
    for (size_t i = 0; i < ny; i++) res[i] = uniform(-1.0f, 1.0f);
    for (size_t i = 0; i < ny; i++) y[i] = NAN; /* every output must be written */

    nn_epilogue e = {.residual = 1, .act = k->act};
    const nn_epilogue *ep = k->act != NN_ACT_NONE || k->residual ? &e : NULL;
    nn_status st = nn_winograd_prepare(s, w, prep, k->threads);
    if (st == NN_OK)
        st = nn_winograd_run(s, x, prep, k->bias ? b : NULL, ep, k->residual ? res : NULL, y, ws, ws_size,
                             k->threads);
    reference(k, x, w, k->bias ? b : NULL, k->residual ? res : NULL, ref);

    double err2 = 0, ref2 = 0, err_max = 0, ref_max = 0;
    for (size_t i = 0; i < ny; i++) {
        double d = fabs((double)y[i] - ref[i]);
        if (!(d <= err_max)) err_max = d; /* NaN sticks */
        err2 += d * d;
        ref2 += ref[i] * ref[i];
        if (fabs(ref[i]) > ref_max) ref_max = fabs(ref[i]);
    }
    double rel_l2 = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2), rel_max = ref_max > 0 ? err_max / ref_max : err_max;
    if (st == NN_OK) {
        if (!(rel_l2 <= worst_l2)) worst_l2 = rel_l2;
        if (!(rel_max <= worst_max)) worst_max = rel_max;
    }
    CHECK(st == NN_OK && rel_l2 <= REL_L2_TOL && rel_max <= REL_MAX_TOL,
          "%s: N=%lld C=%lld M=%lld group=%lld %lldx%lld dilation %lldx%lld pads %lld,%lld,%lld,%lld bias=%d res=%d "
          "act=%d threads=%d%s: "
          "expected status 0, rel L2 <= %g, rel max <= %g; got status %d, rel L2 %.3g, rel max %.3g",
          label, (long long)s->batch, (long long)s->in_ch, (long long)s->out_ch, (long long)s->group,
          (long long)s->in_h, (long long)s->in_w, (long long)s->dilation_h, (long long)s->dilation_w,
          (long long)s->pad_top, (long long)s->pad_left,
          (long long)k->pad_bottom, (long long)k->pad_right, k->bias, k->residual, (int)k->act, k->threads,
          k->short_workspace ? " (workspace for 1)" : "", REL_L2_TOL, REL_MAX_TOL, (int)st, rel_l2, rel_max);
    free(x);
    free(w);
    free(b);
    free(res);
    free(y);
    free(ref);
    free(prep);
    free(ws);
}

static conv_case make_case(int64_t n, int64_t c, int64_t m, int64_t group, int64_t h, int64_t w, int64_t pt,
                           int64_t pl, int64_t pb, int64_t pr) {
    conv_case k = {.s = {.batch = n, .in_ch = c, .out_ch = m, .group = group, .in_h = h, .in_w = w,
                         .out_h = h + pt + pb - 2, .out_w = w + pl + pr - 2, .pad_top = pt, .pad_left = pl,
                         .kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .dilation_h = 1,
                         .dilation_w = 1},
                   .pad_bottom = pb, .pad_right = pr, .threads = 1};
    return k;
}

/* The same case dilated by dh x dw: the output shrinks by 2 (d - 1) per side pair. */
static conv_case dilate(conv_case k, int64_t dh, int64_t dw) {
    k.s.dilation_h = dh;
    k.s.dilation_w = dw;
    k.s.out_h = k.s.in_h + k.s.pad_top + k.pad_bottom - 2 * dh;
    k.s.out_w = k.s.in_w + k.s.pad_left + k.pad_right - 2 * dw;
    return k;
}

static void random_cases(int count) {
    static const int64_t channels[] = {1, 3, 16, 64, 130}, sizes[] = {1, 2, 3, 5, 7, 8, 14, 28, 56};
    static const nn_act acts[] = {NN_ACT_NONE, NN_ACT_RELU, NN_ACT_SIGMOID};
    for (int i = 0; i < count;) {
        int64_t pads[4];
        int style = (int)(next() % 3); /* none, symmetric 1, independent 0..2 */
        for (int d = 0; d < 4; d++) pads[d] = style == 0 ? 0 : style == 1 ? 1 : (int64_t)(next() % 3);
        int64_t group = next() % 4 == 0 ? 2 : 1;
        /* a third dilated (1..3 per dim), leading pads multiples of it */
        static const int64_t dilations[] = {1, 1, 2, 3};
        int64_t dh = 1, dw = 1;
        if (next() % 3 == 0) dh = pick(dilations, 4), dw = pick(dilations, 4);
        pads[0] *= dh;
        pads[1] *= dw;
        conv_case k = make_case(1 + next() % 3, group * pick(channels, 5), group * pick(channels, 5), group,
                                pick(sizes, 9), pick(sizes, 9), pads[0], pads[1], pads[2], pads[3]);
        k = dilate(k, dh, dw);
        const nn_winograd_shape *s = &k.s;
        if (s->out_h < 1 || s->out_w < 1 ||
            (double)(s->batch * s->in_ch * s->out_ch / group * s->out_h * s->out_w * 9) > MAC_BUDGET)
            continue;
        k.bias = next() & 1;
        k.residual = next() & 1;
        k.act = acts[next() % 3];
        k.threads = 1 + (int)(next() % 3);
        k.short_workspace = next() % 8 == 0;
        check_case(&k, "random");
        i++;
    }
}

/* Shapes that reach particular paths. */
static void fixed_cases(void) {
    /* several blocks of tiles (130 channels: 56 tiles per block), one panel */
    conv_case k = make_case(1, 130, 16, 1, 56, 56, 1, 1, 1, 1);
    k.threads = 2;
    check_case(&k, "blocks");
    /* one block split across threads by weight panels, edge tiles */
    k = make_case(1, 64, 130, 1, 7, 7, 1, 1, 1, 1);
    k.threads = 3;
    k.bias = k.residual = true;
    k.act = NN_ACT_RELU;
    check_case(&k, "panels");
    /* one weight panel (DenseNet's 128 -> 32 on 14x14): its tiles shared out */
    k = make_case(1, 128, 32, 1, 14, 14, 1, 1, 1, 1);
    k.threads = 2;
    k.bias = true;
    k.act = NN_ACT_RELU;
    check_case(&k, "one panel");
    /* depthwise (one channel per group), crop on one side only */
    k = make_case(2, 16, 16, 16, 14, 9, 0, 2, 2, 0);
    k.threads = 2;
    k.bias = true;
    check_case(&k, "depthwise");
    /* a residual without an activation */
    k = make_case(1, 16, 32, 1, 8, 8, 1, 1, 1, 1);
    k.residual = true;
    check_case(&k, "residual only");
    /* dilated as FCN's and DeepLab's backbones are (same-size output, pads = dilation), by phases */
    k = dilate(make_case(1, 32, 48, 1, 28, 28, 4, 4, 4, 4), 4, 4);
    k.threads = 2;
    k.bias = k.residual = true;
    k.act = NN_ACT_RELU;
    check_case(&k, "dilated 4");
    /* phases of unequal sizes (13 = 7 + 6 rows), the fast column copy of dilation 1 beside dilation 2 */
    k = dilate(make_case(2, 20, 17, 1, 13, 35, 2, 0, 2, 1), 2, 1);
    k.threads = 3;
    k.bias = true;
    check_case(&k, "dilated 2x1");
    /* more phases than rows */
    k = dilate(make_case(1, 16, 16, 1, 5, 6, 6, 6, 6, 6), 6, 6);
    k.residual = true;
    check_case(&k, "dilated 6, tiny");
}

/* The prepared weights against G g Gt in double, rounded once to float,
 * on every ISA this processor runs (valgrind hides AVX-512; run_all.sh also
 * runs this program natively).  The layout is winograd.c's: position p,
 * panel of PANEL output channels, input channel, lane; lanes past the last
 * output channel are zero. */
enum { PANEL = 32 };
static void prepare_cases(void) {
    static const double G[6][3] = {{1.0 / 4, 0, 0},          {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                   {-1.0 / 6, 1.0 / 6, -1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                   {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
    static const int64_t shapes[][3] = {{5, 7, 1}, {16, 32, 1}, {33, 70, 1}, {24, 40, 2}, {3, 96, 3}};
    nn_isa first = nn_isa_active();
    for (int isa = 0; isa < NN_ISA_COUNT; isa++) {
        if (!nn_isa_select((nn_isa)isa)) continue; /* not on this processor */
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            int64_t c_in = shapes[i][0], c_out = shapes[i][1], group = shapes[i][2];
            conv_case k = make_case(1, c_in * group, c_out * group, group, 6, 6, 1, 1, 1, 1);
            int64_t panels = (c_out + PANEL - 1) / PANEL;
            size_t count = (size_t)(group * 36 * panels * c_in * PANEL), nw = (size_t)(group * c_out * c_in * 9);
            CHECK(nn_winograd_prepared_size(&k.s) == count * sizeof(float),
                  "prepared size, C=%lld M=%lld group %lld: expected %zu bytes (the layout this test reads), got %zu",
                  (long long)c_in, (long long)c_out, (long long)group, count * sizeof(float),
                  nn_winograd_prepared_size(&k.s));
            if (nn_winograd_prepared_size(&k.s) != count * sizeof(float)) continue;
            float *w = malloc(sizeof(float) * nw), *u = malloc(sizeof(float) * count);
            for (size_t e = 0; e < nw; e++) w[e] = uniform(-1.0f, 1.0f);
            for (size_t e = 0; e < count; e++) u[e] = NAN; /* every value must be written */
            nn_status st = nn_winograd_prepare(&k.s, w, u, 1 + (int)(i % 2));
            int64_t bad = 0, worst = -1;
            double worst_err = 0;
            for (int64_t g = 0; g < group && st == NN_OK; g++)
                for (int64_t m = 0; m < panels * PANEL; m++)
                    for (int64_t c = 0; c < c_in; c++)
                        for (int p = 0; p < 36; p++) {
                            double want = 0, size = 0;
                            if (m < c_out)
                                for (int r = 0; r < 3; r++)
                                    for (int q = 0; q < 3; q++) {
                                        double t = G[p / 6][r] * w[((g * c_out + m) * c_in + c) * 9 + r * 3 + q] *
                                                   G[p % 6][q];
                                        want += t;
                                        size += fabs(t);
                                    }
                            int64_t at = (((g * 36 + p) * panels + m / PANEL) * c_in + c) * PANEL + m % PANEL;
                            /* rounded once: within half an ulp of the exact value, plus double's own error */
                            double err = fabs((double)u[at] - want), tol = fabs(want) * 0x1p-24 + size * 0x1p-50;
                            if (!(err <= tol)) {
                                if (bad++ == 0) worst = at;
                                if (!(err <= worst_err)) worst_err = err;
                            }
                        }
            CHECK(st == NN_OK && bad == 0,
                  "prepare on %s, C=%lld M=%lld group %lld: expected every value G g Gt rounded once; status %d, "
                  "%lld values off (first at %lld, largest error %.3g)",
                  nn_isa_name((nn_isa)isa), (long long)c_in, (long long)c_out, (long long)group, (int)st,
                  (long long)bad, (long long)worst, worst_err);
            free(w);
            free(u);
        }
    }
    nn_isa_select(first);
}

static void error_cases(void) {
    conv_case k = make_case(1, 4, 4, 1, 8, 8, 1, 1, 1, 1);
    float x[4 * 64] = {0}, w[4 * 4 * 9] = {0}, y[4 * 64], ws[16], prep[16];
    k.s.stride_h = 2;
    CHECK_EQ_INT("stride 2 prepare: status", NN_ERR_UNSUPPORTED, nn_winograd_prepare(&k.s, w, prep, 1));
    CHECK_EQ_INT("stride 2 run: status", NN_ERR_UNSUPPORTED,
                 nn_winograd_run(&k.s, x, prep, NULL, NULL, NULL, y, ws, sizeof ws, 1));
    k.s.stride_h = 1;
    /* a leading pad that is no multiple of the dilation mixes phases */
    k = dilate(k, 2, 2);
    CHECK_EQ_INT("dilation 2, pad 1: status", NN_ERR_UNSUPPORTED, nn_winograd_prepare(&k.s, w, prep, 1));
    k = dilate(make_case(1, 4, 4, 1, 8, 8, 1, 1, 1, 1), 1, 1);
    CHECK_EQ_INT("small workspace: status", NN_ERR_INTERNAL,
                 nn_winograd_run(&k.s, x, prep, NULL, NULL, NULL, y, ws, sizeof ws, 1));
    /* else the case above tells nothing */
    CHECK(nn_winograd_workspace(&k.s, 1) > sizeof ws, "workspace for one thread: expected more than %zu bytes, got %zu",
          sizeof ws, nn_winograd_workspace(&k.s, 1));
    /* an empty batch writes nothing */
    k.s.batch = 0;
    size_t ws_size = nn_winograd_workspace(&k.s, 2);
    void *big = malloc(ws_size);
    CHECK_EQ_INT("batch 0: status", NN_OK, nn_winograd_run(&k.s, x, prep, NULL, NULL, NULL, y, big, ws_size, 2));
    free(big);
}

int main(void) {
    prepare_cases();
    fixed_cases();
    random_cases(60);
    error_cases();
    printf("worst relative L2 error %.3g, worst max error / max |y| %.3g\n", worst_l2, worst_max);
    return check_summary();
}
