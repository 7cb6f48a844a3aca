/* The channels-last int8 conv, QLinearConvNhwc (ops/qconv_nhwc.c), which
 * passes/layout_nhwc.c puts in place of QLinearConvs (tests/test_layout_nhwc.c).
 *
 * It must give the bytes QLinearConv gives on the same data transposed,
 * exactly: seeded random convs (dense, grouped and depthwise; 1x1 to 7x7, strides 1
 * to 3, dilations, uneven pads; uint8 and int8 weights, per-tensor and
 * per-channel scales, biases or none, uint8 and int8 outputs; channel
 * counts off every vector width) under each ISA this CPU runs, prepared at
 * load or not, on 1 and 2 threads.  It must refuse, with a status and no
 * crash, what it does not run (channels per group not a multiple of 4, int8 x and
 * weight zero points other than 0 for a dense conv, groups, rank 3,
 * weights that are not constants). */
#include <stdlib.h>
#include <string.h>

#include "../ops/isa.h"
#include "../ops/quant.h"
#include "op_harness.h"

/* ---- the op against QLinearConv */

typedef struct qcase {
    int n, c, h, w, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, group;
    bool depthwise, w_u8, ws_per, bias, y_s8, x_s8;
    bool dw_any_zero; /* depthwise: weight zero points anything (else 0 / 128: the VPDPBUSD form) */
} qcase;

static int irand(int lo, int hi) { return lo + (int)(uniform(0.0f, 1.0f) * (float)(hi - lo + 1)) % (hi - lo + 1); }

static nn_tensor copy_tensor(const nn_tensor *t) {
    nn_tensor c = *t;
    size_t bytes = (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype);
    c.data = malloc(bytes + 1);
    memcpy(c.data, t->data, bytes);
    return c;
}

static nn_tensor bytes_tensor(nn_dtype dt, int ndim, const int64_t *dims) {
    nn_tensor t = {.dtype = dt, .ndim = ndim};
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)ndim);
    t.data = calloc((size_t)nn_tensor_elements(&t) + 1, nn_dtype_size(dt));
    return t;
}

static nn_tensor scalar(nn_dtype dt, const void *v) {
    nn_tensor t = {.dtype = dt, .ndim = 0};
    t.data = malloc(8);
    memcpy(t.data, v, nn_dtype_size(dt));
    return t;
}

/* A random conv of the kind (depthwise or dense) asked for. */
static qcase random_case(bool depthwise) {
    static const int dense_c[] = {4, 8, 12, 16, 20, 36, 64, 68};
    static const int dw_c[] = {1, 3, 8, 15, 16, 17, 31, 32, 33, 40, 64, 70};
    qcase q = {.n = irand(1, 2), .kh = irand(1, 4), .kw = irand(1, 4), .sh = irand(1, 3), .sw = irand(1, 3)};
    if (q.kh == 4) q.kh = irand(5, 7);
    if (q.kw == 4) q.kw = irand(5, 7);
    q.dh = irand(1, 4) == 4 ? 2 : 1;
    q.dw = irand(1, 4) == 4 ? 2 : 1;
    q.pt = irand(0, q.kh / 2 + 1);
    q.pl = irand(0, q.kw / 2 + 1);
    q.pb = irand(0, q.kh / 2);
    q.pr = irand(0, q.kw / 2);
    q.h = irand((q.kh - 1) * q.dh + 1, 13);
    q.w = irand((q.kw - 1) * q.dw + 1, 13);
    q.depthwise = depthwise;
    q.c = depthwise ? dw_c[irand(0, 11)] : dense_c[irand(0, 7)];
    q.m = depthwise ? q.c : irand(1, 70);
    q.group = depthwise ? q.c : 1;
    if (!depthwise && irand(0, 2) == 0) { /* grouped: 4k input channels per group, any outputs per group */
        static const int groups[] = {2, 3, 4, 8};
        q.group = groups[irand(0, 3)];
        q.c = q.group * 4 * irand(1, 3);
        q.m = q.group * irand(1, 40);
    }
    q.w_u8 = irand(0, 1);
    q.ws_per = irand(0, 1);
    q.bias = irand(0, 3) > 0;
    q.y_s8 = irand(0, 1);
    q.x_s8 = depthwise && irand(0, 2) == 0;
    q.dw_any_zero = depthwise && irand(0, 1);
    return q;
}

/* inputs of QLinearConv for q, x NCHW */
static int make_inputs(const qcase *q, nn_tensor *in) {
    int cg = q->c / q->group, taps = q->kh * q->kw;
    nn_tensor x = bytes_tensor(q->x_s8 ? NN_DTYPE_INT8 : NN_DTYPE_UINT8, 4, (int64_t[]){q->n, q->c, q->h, q->w});
    for (int64_t i = 0; i < nn_tensor_elements(&x); i++)
        ((uint8_t *)x.data)[i] = (uint8_t)irand(0, 255);
    nn_tensor w = bytes_tensor(q->w_u8 ? NN_DTYPE_UINT8 : NN_DTYPE_INT8, 4, (int64_t[]){q->m, cg, q->kh, q->kw});
    for (int64_t i = 0; i < nn_tensor_elements(&w); i++)
        ((uint8_t *)w.data)[i] = (uint8_t)irand(0, 255);
    int nws = q->ws_per ? q->m : 1;
    nn_tensor ws = q->ws_per ? bytes_tensor(NN_DTYPE_FLOAT, 1, (int64_t[]){q->m}) : scalar(NN_DTYPE_FLOAT, &(float){0});
    /* multipliers that keep most outputs inside the 8-bit range */
    float xs = 0.02f, ys = 0.1f, spread = sqrtf((float)(cg * taps)) * 128.0f * 74.0f;
    for (int i = 0; i < nws; i++)
        ((float *)ws.data)[i] = 60.0f * ys / (xs * spread) * uniform(0.5f, 2.0f);
    /* weight zero points: what a dense channels-last conv needs; anything for depthwise */
    nn_tensor wz = bytes_tensor(w.dtype, 1, (int64_t[]){q->m});
    if (!q->ws_per) wz.ndim = 0;
    for (int i = 0; i < (q->ws_per ? q->m : 1); i++)
        ((uint8_t *)wz.data)[i] = q->dw_any_zero ? (uint8_t)irand(0, 255) : q->w_u8 ? 128 : 0;
    uint8_t xz = (uint8_t)irand(0, 255), yz = (uint8_t)irand(0, 255);
    in[0] = x;
    in[1] = scalar(NN_DTYPE_FLOAT, &xs);
    in[2] = scalar(x.dtype, &xz);
    in[3] = w;
    in[4] = ws;
    in[5] = wz;
    in[6] = scalar(NN_DTYPE_FLOAT, &ys);
    in[7] = scalar(q->y_s8 ? NN_DTYPE_INT8 : NN_DTYPE_UINT8, &yz);
    if (!q->bias) return 8;
    in[8] = bytes_tensor(NN_DTYPE_INT32, 1, (int64_t[]){q->m});
    for (int i = 0; i < q->m; i++)
        ((int32_t *)in[8].data)[i] = irand(-20000, 20000);
    return 9;
}

static nn_tensor to_nhwc(const nn_tensor *x) {
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    nn_tensor y = bytes_tensor(x->dtype, 4, (int64_t[]){N, H, W, C});
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < H * W; i++)
                ((uint8_t *)y.data)[(n * H * W + i) * C + c] = ((const uint8_t *)x->data)[(n * C + c) * H * W + i];
    return y;
}

static const char *case_str(const qcase *q) {
    static char s[256];
    snprintf(s, sizeof s,
             "%s g%d n%d c%d %dx%d m%d k%dx%d s%dx%d d%dx%d pads %d,%d,%d,%d w %s%s%s y %s x %s",
             q->depthwise ? (q->dw_any_zero ? "depthwise (any zero points)" : "depthwise") : "dense", q->group, q->n, q->c, q->h, q->w, q->m, q->kh, q->kw, q->sh, q->sw, q->dh,
             q->dw, q->pt, q->pl, q->pb, q->pr, q->w_u8 ? "u8" : "s8", q->ws_per ? " per-channel" : "",
             q->bias ? " bias" : "", q->y_s8 ? "s8" : "u8", q->x_s8 ? "s8" : "u8");
    return s;
}

static void op_case(const qcase *q) {
    nn_tensor in[9], in2[9];
    int n_in = make_inputs(q, in);
    for (int k = 0; k < n_in; k++)
        in2[k] = k == 0 ? to_nhwc(&in[0]) : copy_tensor(&in[k]);
    const int64_t kernel[2] = {q->kh, q->kw}, strides[2] = {q->sh, q->sw}, dil[2] = {q->dh, q->dw},
                  pads[4] = {q->pt, q->pl, q->pb, q->pr};
    nn_attr attrs[5] = {attr_ints("kernel_shape", 2, kernel), attr_ints("strides", 2, strides),
                        attr_ints("dilations", 2, dil), attr_ints("pads", 4, pads),
                        attr_int("group", q->group)};
    op_run ref, got;
    bool ok_ref = cpu_run(&ref, "QLinearConv", 13, attrs, 5, NULL, in, n_in, 1, NULL);
    bool ok_got = cpu_run(&got, "QLinearConvNhwc", 13, attrs, 5, NULL, in2, n_in, 1, NULL);
    if (ok_ref && ok_got) {
        const nn_tensor *r = &ref.out[0], *y = &got.out[0];
        int64_t N = r->dims[0], M = r->dims[1], OH = r->dims[2], OW = r->dims[3];
        bool shape = y->ndim == 4 && y->dims[0] == N && y->dims[1] == OH && y->dims[2] == OW && y->dims[3] == M;
        int64_t bad = -1;
        for (int64_t n = 0; shape && n < N && bad < 0; n++)
            for (int64_t m = 0; m < M && bad < 0; m++)
                for (int64_t i = 0; i < OH * OW; i++)
                    if (((const uint8_t *)r->data)[(n * M + m) * OH * OW + i] !=
                        ((const uint8_t *)y->data)[(n * OH * OW + i) * M + m]) {
                        bad = (n * M + m) * OH * OW + i;
                        break;
                    }
        CHECK(shape && bad < 0, "%s: expected QLinearConv's bytes, got %s at NCHW index %lld (%d vs %d)",
              case_str(q), shape ? "a difference" : "another shape", (long long)bad,
              bad >= 0 ? ((const uint8_t *)r->data)[bad] : -1,
              bad >= 0 ? ((const uint8_t *)y->data)[(bad / (M * OH * OW) * OH * OW + bad % (OH * OW)) * M +
                                                    bad / (OH * OW) % M]
                       : -1);
    }
    release(&ref);
    release(&got);
}

/* infer (and run) must refuse with an error status, never crash */
static void refuses(const char *what, qcase q, void (*edit)(nn_tensor *in), nn_status want) {
    nn_tensor in[9];
    int n_in = make_inputs(&q, in);
    nn_tensor x = to_nhwc(&in[0]);
    free(in[0].data);
    in[0] = x;
    if (edit) edit(in);
    char err[256] = "";
    nn_tensor out[1] = {{0}};
    nn_qconv_params p = {.w = {.n_kernel = -1, .n_strides = -1, .n_dilations = -1, .n_pads = -1},
                         .group = q.group};
    nn_call c = {.params = &p, .n_in = n_in, .n_out = 1, .in = in, .out = out, .threads = 1, .err = err,
                 .err_size = sizeof err};
    const nn_op_desc *d = nn_op_get(NN_OP_QLinearConvNhwc);
    nn_status st = d->infer(&c);
    if (st == NN_OK) { /* the weights are not constants: the run refuses */
        size_t ws = d->workspace(&c);
        c.workspace = malloc(ws + 1);
        c.workspace_size = ws;
        out[0].data = malloc((size_t)nn_tensor_elements(&out[0]) + 1);
        st = d->run(&c);
        free(out[0].data);
        free(c.workspace);
    }
    check_set_case("QLinearConvNhwc refuses %s", what);
    CHECK(st == want && err[0], "expected %s with a message, got %s '%s'", nn_strerror(want), nn_strerror(st), err);
    for (int k = 0; k < n_in; k++)
        free(in[k].data);
}

static void six_channels(nn_tensor *in) { (void)in; }
static void int8_x(nn_tensor *in) {
    in[0].dtype = NN_DTYPE_INT8;
    in[2].dtype = NN_DTYPE_INT8;
}
static void zero_point_3(nn_tensor *in) { ((uint8_t *)in[5].data)[0] = 3; }
static void rank3(nn_tensor *in) { in[0].ndim = 3; }
static void no_weights(nn_tensor *in) {
    free(in[3].data);
    in[3].data = NULL;
}

static void test_op(void) {
    static const nn_isa isas[] = {NN_ISA_AVX512, NN_ISA_AVX2, NN_ISA_SCALAR};
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        if (!nn_isa_select(isas[k])) continue;
        for (int i = 0; i < 80; i++) {
            cpu_threads = 1 + i % 2;
            cpu_prepare = i % 4 < 2;
            check_set_case("QLinearConvNhwc vs QLinearConv, %s, %d thread(s)%s", nn_isa_name(isas[k]), cpu_threads,
                           cpu_prepare ? ", prepared" : "");
            qcase q = random_case(i % 3 == 2 || i % 7 == 3);
            op_case(&q);
        }
    }
    nn_isa_select(NN_ISA_AVX512) || nn_isa_select(NN_ISA_AVX2) || nn_isa_select(NN_ISA_SCALAR);
    cpu_threads = 1;
    cpu_prepare = false;
    qcase base = {.n = 1, .c = 8, .h = 5, .w = 5, .m = 8, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .dh = 1, .dw = 1,
                  .group = 1};
    qcase six = base;
    six.c = 6;
    refuses("6 channels (dense)", six, six_channels, NN_ERR_UNSUPPORTED);
    refuses("int8 x (dense)", base, int8_x, NN_ERR_UNSUPPORTED);
    refuses("a weight zero point of 3", base, zero_point_3, NN_ERR_UNSUPPORTED);
    refuses("x of rank 3", base, rank3, NN_ERR_SHAPE);
    refuses("weights that are not constants", base, no_weights, NN_ERR_UNSUPPORTED);
    qcase grouped = base;
    grouped.group = 4;
    refuses("4 groups of 2 channels", grouped, NULL, NN_ERR_UNSUPPORTED);
}

int main(void) {
    test_op();
    return check_summary();
}
