/* The fuse_qdq pass (passes/fuse_qdq.c) on small QDQ convs built here, as
 * models/quantize.py and ONNX Runtime's quantizer lay them out:
 *   x -> Q -> DQ -> Conv(DQ(w int8 per channel), DQ(b int32)) -> Q -> DQ -> y
 * must become QuantizeLinear QLinearConv DequantizeLinear and compute what
 * the unoptimized graph computes, to within one output quantization step
 * (the float path rounds its sums, the int8 one does not); and must stay
 * as it is when the bias scale is not x_scale * w_scale, when the Conv's
 * output is also a graph output, when no QuantizeLinear follows, and when
 * the pass is disabled by name.  Then the same for DQ, DQ -> Add -> Q
 * (QLinearAdd, bit for bit: test_add), DQ -> MaxPool -> Q (the MaxPool
 * on the bytes, bit for bit: test_maxpool) and DQ -> Gemm -> Q (a 1 x 1
 * QLinearConv: test_gemm). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/model.h"
#include "../ops/registry.h"
#include "check.h"
#include "nn.h"
#include "onnx_builder.h"

enum { CIN = 4, COUT = 6, HW = 7, KS = 3 };
static const float XS = 0.02f, YS = 0.05f;

typedef enum variant { PLAIN, BAD_BIAS_SCALE, CONV_IS_OUTPUT, NO_QUANTIZE } variant;

static const char *build(builder *b, variant v) {
    builder_init(b);
    int64_t xd[4] = {1, CIN, HW, HW}, wd[4] = {COUT, CIN, KS, KS}, cd[1] = {COUT};
    graph_input(b, "x", 4, xd);
    int64_t yd[4] = {1, COUT, HW, HW};
    graph_output(b, "y", 4, yd);
    if (v == CONV_IS_OUTPUT) graph_output(b, "conv_out", 4, yd);
    int8_t w[COUT * CIN * KS * KS], wz[COUT] = {0};
    float ws[COUT], bs[COUT];
    int32_t bias[COUT];
    uint32_t seed = 7;
    for (int i = 0; i < COUT * CIN * KS * KS; i++) {
        seed = seed * 1664525u + 1013904223u;
        w[i] = (int8_t)((int)(seed >> 24) % 255 - 127);
    }
    for (int c = 0; c < COUT; c++) {
        ws[c] = 0.001f * (float)(c + 1);
        bs[c] = XS * ws[c] * (v == BAD_BIAS_SCALE ? 1.5f : 1.0f);
        bias[c] = (c - 3) * 200;
    }
    uint8_t xz = 128, yz = 100;
    float xs = XS, ys = YS;
    float_init(b, "xs", 0, NULL, 1, &xs);
    raw_init(b, "xz", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &xz, 1);
    float_init(b, "ys", 0, NULL, 1, &ys);
    raw_init(b, "yz", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &yz, 1);
    raw_init(b, "w_q", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 4, wd, w, sizeof w);
    float_init(b, "w_s", 1, cd, COUT, ws);
    raw_init(b, "w_z", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 1, cd, wz, sizeof wz);
    raw_init(b, "b_q", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, cd, bias, sizeof bias);
    float_init(b, "b_s", 1, cd, COUT, bs);
    const char *q_in[3] = {"x", "xs", "xz"}, *dq_in[3] = {"x_q", "xs", "xz"};
    node_io(b, "QuantizeLinear", "q_x", 3, q_in, 1, (const char *[]){"x_q"});
    node_io(b, "DequantizeLinear", "dq_x", 3, dq_in, 1, (const char *[]){"x_dq"});
    attr_int(b, node_io(b, "DequantizeLinear", "dq_w", 3, (const char *[]){"w_q", "w_s", "w_z"}, 1,
                        (const char *[]){"w_dq"}),
             "axis", 0);
    attr_int(b, node_io(b, "DequantizeLinear", "dq_b", 2, (const char *[]){"b_q", "b_s"}, 1, (const char *[]){"b_dq"}),
             "axis", 0);
    Onnx__NodeProto *conv =
        node_io(b, "Conv", "conv", 3, (const char *[]){"x_dq", "w_dq", "b_dq"}, 1, (const char *[]){"conv_out"});
    attr_ints(b, conv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
    const char *act = "conv_out";
    if (v == NO_QUANTIZE) {
        node(b, "Relu", "relu", "conv_out", NULL, "relu_out");
        act = "relu_out";
    }
    node_io(b, "QuantizeLinear", "q_y", 3, (const char *[]){act, "ys", "yz"}, 1, (const char *[]){"y_q"});
    node_io(b, "DequantizeLinear", "dq_y", 3, (const char *[]){"y_q", "ys", "yz"}, 1, (const char *[]){"y"});
    static const char *files[] = {"qdq_plain.onnx", "qdq_bad_bias.onnx", "qdq_conv_out.onnx", "qdq_relu.onnx"};
    return save(b, files[v]);
}

static nn_model *load(const char *path, int optimize, const char *passes, const char *disable) {
    nn_options o = nn_options_default();
    o.threads = 1;
    o.optimize = optimize;
    o.passes = passes;
    o.disable_passes = disable;
    o.verify = 1;
    nn_model *m = NULL;
    nn_status st = nn_load(path, &o, &m);
    CHECK(st == NN_OK, "load %s: %s", path, nn_last_error());
    return m;
}

static int count_op(const nn_model *m, int op) {
    int n = 0;
    for (int i = 0; i < m->g.n_nodes; i++)
        n += m->g.nodes[i].op == op;
    return n;
}

/* A copy of output 0 (n floats) of m on inputs in (caller frees), NULL if
 * the prediction fails. */
static float *predict_copy(nn_model *m, const nn_tensor *in, int n_in, size_t n) {
    nn_tensor out[2] = {0};
    int n_out = nn_output_count(m);
    if (!CHECK(nn_predict(m, in, n_in, out, n_out) == NN_OK, "predict: %s", nn_last_error())) return NULL;
    float *y = malloc(sizeof(float) * n);
    memcpy(y, out[0].data, sizeof(float) * n);
    for (int k = 0; k < n_out; k++)
        nn_tensor_release(&out[k]);
    return y;
}

/* y of a model on a seeded input (caller frees) */
static float *run(nn_model *m) {
    static float x[CIN * HW * HW];
    uint32_t seed = 3;
    for (int i = 0; i < CIN * HW * HW; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = -2.5f + 5.0f * (float)(seed >> 8) / (float)(1u << 24);
    }
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 4, .dims = {1, CIN, HW, HW}, .data = x};
    return predict_copy(m, &in, 1, COUT * HW * HW);
}


/* ---- DQ(a), DQ(b) -> Add -> Q -> DQ: QLinearAdd, which must give the very
 * bytes the unoptimized graph gives; and no rewrite when b broadcasts,
 * when the Add's output is also a graph output, or when a Relu sits
 * between the Add and the Q. */
typedef enum add_variant { ADD_PLAIN, ADD_BROADCAST, ADD_IS_OUTPUT, ADD_RELU, ADD_SAME } add_variant;
enum { AC = 3, AHW = 5, AYZ = 130 };
static const float AYS = 0.025f; /* y spans [-3.25, 3.125], a + b [-3.68, 6.78] */

static const char *build_add(builder *b, add_variant v) {
    builder_init(b);
    int64_t ad[4] = {1, AC, AHW, AHW}, bd[4] = {1, AC, 1, 1};
    graph_input(b, "a", 4, ad);
    graph_input(b, "b", 4, v == ADD_BROADCAST ? bd : ad);
    graph_output(b, "y", 4, ad);
    if (v == ADD_IS_OUTPUT) graph_output(b, "sum", 4, ad);
    float as = 0.03f, bs = 0.011f, ys = AYS;
    uint8_t az = 120, bz = 7, yz = AYZ;
    float_init(b, "as", 0, NULL, 1, &as);
    float_init(b, "bs", 0, NULL, 1, &bs);
    float_init(b, "ys", 0, NULL, 1, &ys);
    raw_init(b, "az", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &az, 1);
    raw_init(b, "bz", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &bz, 1);
    raw_init(b, "yz", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &yz, 1);
    node_io(b, "QuantizeLinear", "q_a", 3, (const char *[]){"a", "as", "az"}, 1, (const char *[]){"a_q"});
    node_io(b, "DequantizeLinear", "dq_a", 3, (const char *[]){"a_q", "as", "az"}, 1, (const char *[]){"a_dq"});
    node_io(b, "QuantizeLinear", "q_b", 3, (const char *[]){"b", "bs", "bz"}, 1, (const char *[]){"b_q"});
    node_io(b, "DequantizeLinear", "dq_b", 3, (const char *[]){"b_q", "bs", "bz"}, 1, (const char *[]){"b_dq"});
    node(b, "Add", "add", "a_dq", v == ADD_SAME ? "a_dq" : "b_dq", "sum");
    const char *act = "sum";
    if (v == ADD_RELU) {
        node(b, "Relu", "relu", "sum", NULL, "relu_out");
        act = "relu_out";
    }
    node_io(b, "QuantizeLinear", "q_y", 3, (const char *[]){act, "ys", "yz"}, 1, (const char *[]){"y_q"});
    node_io(b, "DequantizeLinear", "dq_y", 3, (const char *[]){"y_q", "ys", "yz"}, 1, (const char *[]){"y"});
    static const char *files[] = {"qadd_plain.onnx", "qadd_bcast.onnx", "qadd_out.onnx", "qadd_relu.onnx",
                                  "qadd_same.onnx"};
    return save(b, files[v]);
}

/* y of an Add model on seeded inputs spanning past both ranges (caller frees) */
static float *run_add(nn_model *m, add_variant v) {
    static float a[AC * AHW * AHW], bv[AC * AHW * AHW];
    uint32_t seed = 11;
    for (int i = 0; i < AC * AHW * AHW; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = -4.5f + 9.0f * (float)(seed >> 8) / (float)(1u << 24);
        seed = seed * 1664525u + 1013904223u;
        bv[i] = -0.5f + 3.5f * (float)(seed >> 8) / (float)(1u << 24);
    }
    nn_tensor in[2] = {{.dtype = NN_DTYPE_FLOAT, .ndim = 4, .dims = {1, AC, AHW, AHW}, .data = a},
                       {.dtype = NN_DTYPE_FLOAT, .ndim = 4, .dims = {1, AC, AHW, AHW}, .data = bv}};
    if (v == ADD_BROADCAST) in[1].dims[2] = in[1].dims[3] = 1;
    return predict_copy(m, in, 2, AC * AHW * AHW);
}

static void test_add(void) {
    static const char *names[] = {"plain", "b broadcasts", "Add output is a graph output", "Relu between Add and Q",
                                  "a + a"};
    for (int v = ADD_PLAIN; v <= ADD_SAME; v++) {
        check_set_case("fuse_qdq Add: %s", names[v]);
        builder b;
        const char *path = build_add(&b, (add_variant)v);
        nn_model *ref = load(path, 0, NULL, NULL), *m = load(path, 1, "fuse_qdq", NULL);
        if (ref && m) {
            int want = v == ADD_PLAIN || v == ADD_SAME;
            CHECK_EQ_INT("QLinearAdd nodes", want, count_op(m, NN_OP_QLinearAdd));
            CHECK_EQ_INT("Add nodes", 1 - want, count_op(m, NN_OP_Add));
            if (want) /* only the output's DQ is left (and b's, unread, in a + a) */
                CHECK_EQ_INT("DequantizeLinear nodes", v == ADD_SAME ? 2 : 1, count_op(m, NN_OP_DequantizeLinear));
            float *r = run_add(ref, (add_variant)v), *c = run_add(m, (add_variant)v);
            if (r && c) {
                int differ = 0, lo = 0, hi = 0;
                for (int i = 0; i < AC * AHW * AHW; i++) {
                    differ += memcmp(&r[i], &c[i], sizeof(float)) != 0;
                    lo += r[i] <= -AYZ * AYS + 1e-6f, hi += r[i] >= (255 - AYZ) * AYS - 1e-6f;
                }
                CHECK_EQ_INT("outputs differing from the unoptimized graph's", 0, differ);
                if (v == ADD_PLAIN) CHECK(lo > 0 && hi > 0, "inputs should saturate both ends (%d low, %d high)", lo, hi);
            }
            free(r);
            free(c);
        }
        nn_free(ref);
        nn_free(m);
        builder_free(&b);
    }
}

/* ---- Q -> DQ -> MaxPool -> Q -> DQ: the MaxPool on the bytes when the Q
 * after it has the DQ's scale and zero point, the very bytes of the
 * unoptimized graph; no rewrite when the scale or the zero point differs
 * or the MaxPool's output is also a graph output. */
typedef enum pool_variant { POOL_PLAIN, POOL_OTHER_SCALE, POOL_OTHER_ZERO, POOL_IS_OUTPUT } pool_variant;
enum { PC = 3, PHW = 9, POHW = 5 };

static const char *build_pool(builder *b, pool_variant v) {
    builder_init(b);
    int64_t xd[4] = {1, PC, PHW, PHW}, yd[4] = {1, PC, POHW, POHW};
    graph_input(b, "x", 4, xd);
    graph_output(b, "y", 4, yd);
    if (v == POOL_IS_OUTPUT) graph_output(b, "pooled", 4, yd);
    float xs = 0.02f, ys = v == POOL_OTHER_SCALE ? 0.021f : 0.02f;
    uint8_t xz = 100, yz = v == POOL_OTHER_ZERO ? 101 : 100;
    float_init(b, "xs", 0, NULL, 1, &xs);
    float_init(b, "ys", 0, NULL, 1, &ys);
    raw_init(b, "xz", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &xz, 1);
    raw_init(b, "yz", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &yz, 1);
    node_io(b, "QuantizeLinear", "q_x", 3, (const char *[]){"x", "xs", "xz"}, 1, (const char *[]){"x_q"});
    node_io(b, "DequantizeLinear", "dq_x", 3, (const char *[]){"x_q", "xs", "xz"}, 1, (const char *[]){"x_dq"});
    Onnx__NodeProto *n = node(b, "MaxPool", "pool", "x_dq", NULL, "pooled");
    int64_t k[2] = {3, 3}, s[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
    attr_ints(b, n, "kernel_shape", 2, k);
    attr_ints(b, n, "strides", 2, s);
    attr_ints(b, n, "pads", 4, pads);
    node_io(b, "QuantizeLinear", "q_y", 3, (const char *[]){"pooled", "ys", "yz"}, 1, (const char *[]){"y_q"});
    node_io(b, "DequantizeLinear", "dq_y", 3, (const char *[]){"y_q", "ys", "yz"}, 1, (const char *[]){"y"});
    static const char *files[] = {"qpool_plain.onnx", "qpool_scale.onnx", "qpool_zero.onnx", "qpool_out.onnx"};
    return save(b, files[v]);
}

/* y on a seeded x spanning past both ends of the quantized range (caller frees) */
static float *run_pool(nn_model *m) {
    static float x[PC * PHW * PHW];
    uint32_t seed = 5;
    for (int i = 0; i < PC * PHW * PHW; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = -2.5f + 6.0f * (float)(seed >> 8) / (float)(1u << 24);
    }
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 4, .dims = {1, PC, PHW, PHW}, .data = x};
    return predict_copy(m, &in, 1, PC * POHW * POHW);
}

static void test_maxpool(void) {
    static const char *names[] = {"plain", "Q's scale differs", "Q's zero point differs",
                                  "MaxPool output is a graph output"};
    for (int v = POOL_PLAIN; v <= POOL_IS_OUTPUT; v++) {
        check_set_case("fuse_qdq MaxPool: %s", names[v]);
        builder b;
        const char *path = build_pool(&b, (pool_variant)v);
        nn_model *ref = load(path, 0, NULL, NULL), *m = load(path, 1, "fuse_qdq", NULL);
        if (ref && m) {
            int want = v == POOL_PLAIN;
            CHECK_EQ_INT("MaxPool nodes", 1, count_op(m, NN_OP_MaxPool));
            CHECK_EQ_INT("QuantizeLinear nodes", 2 - want, count_op(m, NN_OP_QuantizeLinear));
            CHECK_EQ_INT("DequantizeLinear nodes", 2 - want, count_op(m, NN_OP_DequantizeLinear));
            float *r = run_pool(ref), *c = run_pool(m);
            if (r && c) {
                int differ = 0;
                for (int i = 0; i < PC * POHW * POHW; i++)
                    differ += memcmp(&r[i], &c[i], sizeof(float)) != 0;
                CHECK_EQ_INT("outputs differing from the unoptimized graph's", 0, differ);
            }
            free(r);
            free(c);
        }
        nn_free(ref);
        nn_free(m);
        builder_free(&b);
    }
}

/* ---- x -> Q -> DQ -> Gemm(DQ(w int8 per row), DQ(b int32)) -> Q -> DQ -> y,
 * a classifier as the static quantizer writes it: a 1 x 1 QLinearConv
 * between two Reshapes, within one output step of the unoptimized graph
 * (the int32 sums against the float ones), the batch of 2 kept; no
 * rewrite without transB, with alpha 0.5, and when the Gemm's output is
 * also a graph output. */
typedef enum gemm_variant { GEMM_PLAIN, GEMM_NO_TRANS_B, GEMM_ALPHA, GEMM_IS_OUTPUT } gemm_variant;
enum { GN = 2, GK = 24, GM = 10 };
static const float GYS = 0.04f;

static const char *build_gemm(builder *b, gemm_variant v) {
    builder_init(b);
    graph_input(b, "x", 2, (int64_t[]){GN, GK});
    graph_output(b, "y", 2, (int64_t[]){GN, GM});
    if (v == GEMM_IS_OUTPUT) graph_output(b, "fc", 2, (int64_t[]){GN, GM});
    float xs = 0.03f, ys = GYS, ws[GM], bs[GM];
    uint8_t xz = 110, yz = 120;
    int8_t w[GM * GK], wz[GM] = {0};
    int32_t bias[GM];
    uint32_t seed = 9;
    for (int i = 0; i < GM * GK; i++) {
        seed = seed * 1664525u + 1013904223u;
        w[i] = (int8_t)((int)(seed >> 24) % 255 - 127);
    }
    bool per_tensor = v == GEMM_NO_TRANS_B; /* a per-axis scale on axis 0 would not fit [K, M] */
    for (int m = 0; m < GM; m++) {
        ws[m] = per_tensor ? 0.004f : 0.002f * (float)(m + 1);
        bs[m] = xs * ws[m];
        bias[m] = (m - 5) * 150;
    }
    float_init(b, "xs", 0, NULL, 1, &xs);
    float_init(b, "ys", 0, NULL, 1, &ys);
    raw_init(b, "xz", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &xz, 1);
    raw_init(b, "yz", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &yz, 1);
    int64_t wd[2] = {v == GEMM_NO_TRANS_B ? GK : GM, v == GEMM_NO_TRANS_B ? GM : GK};
    raw_init(b, "w_q", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, wd, w, sizeof w);
    float_init(b, "w_s", per_tensor ? 0 : 1, (int64_t[]){GM}, per_tensor ? 1 : GM, ws);
    raw_init(b, "w_z", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, per_tensor ? 0 : 1, (int64_t[]){GM}, wz,
             per_tensor ? 1 : GM);
    raw_init(b, "b_q", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, (int64_t[]){GM}, bias, sizeof bias);
    float_init(b, "b_s", 1, (int64_t[]){GM}, GM, bs);
    node_io(b, "QuantizeLinear", "q_x", 3, (const char *[]){"x", "xs", "xz"}, 1, (const char *[]){"x_q"});
    node_io(b, "DequantizeLinear", "dq_x", 3, (const char *[]){"x_q", "xs", "xz"}, 1, (const char *[]){"x_dq"});
    attr_int(b, node_io(b, "DequantizeLinear", "dq_w", 3, (const char *[]){"w_q", "w_s", "w_z"}, 1,
                        (const char *[]){"w_dq"}),
             "axis", 0);
    attr_int(b, node_io(b, "DequantizeLinear", "dq_b", 2, (const char *[]){"b_q", "b_s"}, 1, (const char *[]){"b_dq"}),
             "axis", 0);
    Onnx__NodeProto *g = node_io(b, "Gemm", "fc", 3, (const char *[]){"x_dq", "w_dq", "b_dq"}, 1,
                                 (const char *[]){"fc"});
    if (v != GEMM_NO_TRANS_B) attr_int(b, g, "transB", 1);
    if (v == GEMM_ALPHA) attr_float(b, g, "alpha", 0.5f);
    node_io(b, "QuantizeLinear", "q_y", 3, (const char *[]){"fc", "ys", "yz"}, 1, (const char *[]){"y_q"});
    node_io(b, "DequantizeLinear", "dq_y", 3, (const char *[]){"y_q", "ys", "yz"}, 1, (const char *[]){"y"});
    static const char *files[] = {"qgemm_plain.onnx", "qgemm_no_trans.onnx", "qgemm_alpha.onnx", "qgemm_out.onnx"};
    return save(b, files[v]);
}

static void test_gemm(void) {
    static const char *names[] = {"plain", "no transB", "alpha 0.5", "Gemm output is a graph output"};
    static float x[GN * GK];
    uint32_t seed = 13;
    for (int i = 0; i < GN * GK; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = -3.5f + 8.0f * (float)(seed >> 8) / (float)(1u << 24);
    }
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 2, .dims = {GN, GK}, .data = x};
    for (int v = GEMM_PLAIN; v <= GEMM_IS_OUTPUT; v++) {
        check_set_case("fuse_qdq Gemm: %s", names[v]);
        builder b;
        const char *path = build_gemm(&b, (gemm_variant)v);
        nn_model *ref = load(path, 0, NULL, NULL), *m = load(path, 1, NULL, NULL);
        if (ref && m) {
            int want = v == GEMM_PLAIN;
            CHECK_EQ_INT("Gemm nodes", 1 - want, count_op(m, NN_OP_Gemm));
            CHECK_EQ_INT("QLinearConv nodes (either layout)", want,
                         count_op(m, NN_OP_QLinearConv) + count_op(m, NN_OP_QLinearConvNhwc));
            float *r = predict_copy(ref, &in, 1, GN * GM), *c = predict_copy(m, &in, 1, GN * GM);
            if (r && c) {
                float worst = 0.0f;
                for (int i = 0; i < GN * GM; i++)
                    worst = fabsf(r[i] - c[i]) > worst ? fabsf(r[i] - c[i]) : worst;
                CHECK(worst <= GYS * 1.001f, "optimized vs unoptimized: expected within one step (%g), got %g apart",
                      (double)GYS, (double)worst);
            }
            free(r);
            free(c);
        }
        nn_free(ref);
        nn_free(m);
        builder_free(&b);
    }
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 1;
    }
    static const char *names[] = {"plain", "bias scale != x_scale * w_scale", "Conv output is a graph output",
                                  "Relu between Conv and Q"};
    for (int v = PLAIN; v <= NO_QUANTIZE; v++) {
        check_set_case("fuse_qdq: %s", names[v]);
        builder b;
        const char *path = build(&b, (variant)v);
        nn_model *ref = load(path, 0, NULL, NULL), *m = load(path, 1, "fuse_qdq", NULL);
        if (ref && m) {
            int want = v == PLAIN;
            CHECK_EQ_INT("QLinearConv nodes", want, count_op(m, NN_OP_QLinearConv));
            CHECK_EQ_INT("Conv nodes", 1 - want, count_op(m, NN_OP_Conv));
            if (v == PLAIN) /* the DQs of x, w and b had no other reader */
                CHECK_EQ_INT("DequantizeLinear nodes", 1, count_op(m, NN_OP_DequantizeLinear));
            float *a = run(ref), *c = run(m);
            if (a && c) {
                int equal = 0;
                float worst = 0.0f;
                for (int i = 0; i < COUT * HW * HW; i++) {
                    float d = fabsf(a[i] - c[i]);
                    worst = d > worst ? d : worst;
                    equal += a[i] == c[i];
                }
                CHECK(worst <= YS * 1.001f && equal >= COUT * HW * HW * 9 / 10,
                      "optimized vs unoptimized: expected within one step (%g) and 90%% equal, got %g apart, %d of %d "
                      "equal",
                      (double)YS, (double)worst, equal, COUT * HW * HW);
            }
            free(a);
            free(c);
        }
        nn_free(ref);
        nn_free(m);
        if (v == PLAIN) {
            check_set_case("fuse_qdq: disabled by name");
            m = load(path, 1, NULL, "fuse_qdq");
            if (m) CHECK_EQ_INT("QLinearConv nodes with fuse_qdq disabled", 0, count_op(m, NN_OP_QLinearConv));
            nn_free(m);
            check_set_case("fuse_qdq: default pipeline");
            m = load(path, 1, NULL, NULL);
            if (m) /* channels-last by then (passes/layout_nhwc.c) */
                CHECK_EQ_INT("QLinearConv nodes (either layout) in the default pipeline", 1,
                             count_op(m, NN_OP_QLinearConv) + count_op(m, NN_OP_QLinearConvNhwc));
            nn_free(m);
        }
        builder_free(&b);
    }
    test_add();
    test_maxpool();
    test_gemm();
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", nn_test_dir);
    return check_summary();
}
