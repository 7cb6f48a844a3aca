/* The layout_nhwc pass (passes/layout_nhwc.c) on small int8 graphs:
 *   x -> Q -> QLinearConv a (3x3) -> QLinearConv b (1x1) -> DQ(a) + DQ(b) -> Q -> DQ -> y
 * must become one channels-last region (two QLinearConvNhwc and the
 * QLinearAdd fuse_qdq makes) with one Transpose in and one out; with a
 * 3-channel a (which the channels-last op refuses) a stays NCHW and one
 * Transpose of its output serves both of its readers; an a that is also a
 * graph output (through its DQ) comes back through a Transpose of its own;
 * an a of 2 channels per group and an a with weight zero point 3 stay as
 * they are (the op takes groups of 4k channels: tests/test_qconv_nhwc.c);
 * squeeze-excitation between the convs (DQ, GlobalAveragePool, Sigmoid,
 * a broadcast Mul, Q) stays inside the region, the pool reading
 * channels-last, with no Transpose of its own; so does a Clip with an
 * absent min.  The pass
 * disabled by name leaves no channels-last node, and every graph gives the
 * bytes it gives without the pass.  The op itself: tests/test_qconv_nhwc.c. */
#include "pass_harness.h"

/* ---- the pass on QDQ graphs */

typedef enum graph_variant { CHAIN, STEM3, MID_OUTPUT, GROUPED, WZP, SQUEEZE, ABSENT_MIN, N_VARIANTS } graph_variant;
enum { PC = 8, PHW = 9 };
static const char *variant_names[] = {"a chain of two convs and an Add", "a 3-channel first conv (stays NCHW)",
                                      "a region value that is a graph output", "a first conv of 2 channels per group",
                                      "a first conv with weight zero point 3",
                                      "squeeze-excitation between the convs (float, broadcast Mul)",
                                      "a Clip with no min between the convs (fuse_lut off)"};

/* QLinearConv `name` from x_q to y_q, cin -> PC channels, k x k (pad k / 2) */
static void qconv(builder *b, const char *name, const char *x_q, const char *y_q, int cin, int k, int group,
                  int8_t wzp, uint32_t seed) {
    static char names[8][5][64];
    static int used;
    char(*nm)[64] = names[used++ % 8];
    snprintf(nm[0], 64, "%s_w", name);
    snprintf(nm[1], 64, "%s_ws", name);
    snprintf(nm[2], 64, "%s_wz", name);
    snprintf(nm[3], 64, "%s_b", name);
    int cg = cin / group, n = PC * cg * k * k;
    int8_t *w = malloc((size_t)n), wz[PC];
    float ws[PC];
    int32_t bias[PC];
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        w[i] = (int8_t)((int)(seed >> 24) - 128);
    }
    for (int c = 0; c < PC; c++) {
        ws[c] = 0.05f / ((float)(cg * k * k) * 40.0f) * (1.0f + 0.1f * (float)c);
        wz[c] = wzp;
        bias[c] = (c - 4) * 300;
    }
    raw_init(b, nm[0], ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 4, (int64_t[]){PC, cg, k, k}, w, (size_t)n);
    float_init(b, nm[1], 1, (int64_t[]){PC}, PC, ws);
    raw_init(b, nm[2], ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 1, (int64_t[]){PC}, wz, sizeof wz);
    raw_init(b, nm[3], ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, (int64_t[]){PC}, bias, sizeof bias);
    free(w);
    Onnx__NodeProto *c = node_io(b, "QLinearConv", name, 9,
                                 (const char *[]){x_q, "s", "z", nm[0], nm[1], nm[2], "s", "z", nm[3]}, 1,
                                 (const char *[]){y_q});
    attr_ints(b, c, "pads", 4, (const int64_t[]){k / 2, k / 2, k / 2, k / 2});
    if (group > 1) attr_int(b, c, "group", group);
}

/* x -> Q -> conv a (3x3) -> conv b (1x1) -> DQ(a) + DQ(b) -> Q -> DQ -> y */
static const char *build_graph(builder *b, graph_variant v) {
    builder_init(b);
    int cin = v == STEM3 ? 3 : PC;
    graph_input(b, "x", 4, (int64_t[]){1, cin, PHW, PHW});
    graph_output(b, "y", 4, (int64_t[]){1, PC, PHW, PHW});
    float s = 0.05f;
    uint8_t z = 120;
    float_init(b, "s", 0, NULL, 1, &s);
    raw_init(b, "z", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &z, 1);
    node_io(b, "QuantizeLinear", "q_x", 3, (const char *[]){"x", "s", "z"}, 1, (const char *[]){"x_q"});
    qconv(b, "conv_a", "x_q", "a_q", cin, 3, v == GROUPED ? 4 : 1, v == WZP ? 3 : 0, 11);
    node_io(b, "DequantizeLinear", "dq_a", 3, (const char *[]){"a_q", "s", "z"}, 1, (const char *[]){"a"});
    if (v == ABSENT_MIN) { /* Clip(a, "", 2) -> Q -> conv b -> DQ -> y: an absent input inside the region */
        float two = 2.0f;
        float_init(b, "two", 0, NULL, 1, &two);
        node_io(b, "Clip", "clip", 3, (const char *[]){"a", "", "two"}, 1, (const char *[]){"a_clip"});
        node_io(b, "QuantizeLinear", "q_clip", 3, (const char *[]){"a_clip", "s", "z"}, 1, (const char *[]){"clip_q"});
        qconv(b, "conv_b", "clip_q", "b_q", PC, 1, 1, 0, 12);
        node_io(b, "DequantizeLinear", "dq_y", 3, (const char *[]){"b_q", "s", "z"}, 1, (const char *[]){"y"});
        return save(b, "nhwc_absent_min.onnx");
    }
    if (v == SQUEEZE) { /* a * sigmoid(mean of a per channel) -> Q -> conv b -> DQ -> y */
        node(b, "GlobalAveragePool", "gap", "a", NULL, "a_mean");
        node(b, "Sigmoid", "gate", "a_mean", NULL, "a_gate");
        node(b, "Mul", "excite", "a", "a_gate", "a_se");
        node_io(b, "QuantizeLinear", "q_se", 3, (const char *[]){"a_se", "s", "z"}, 1, (const char *[]){"se_q"});
        qconv(b, "conv_b", "se_q", "b_q", PC, 1, 1, 0, 12);
        node_io(b, "DequantizeLinear", "dq_y", 3, (const char *[]){"b_q", "s", "z"}, 1, (const char *[]){"y"});
        return save(b, "nhwc_squeeze.onnx");
    }
    qconv(b, "conv_b", "a_q", "b_q", PC, 1, 1, 0, 12);
    node_io(b, "DequantizeLinear", "dq_b", 3, (const char *[]){"b_q", "s", "z"}, 1, (const char *[]){"bb"});
    node(b, "Add", "add", "a", "bb", "sum");
    node_io(b, "QuantizeLinear", "q_sum", 3, (const char *[]){"sum", "s", "z"}, 1, (const char *[]){"sum_q"});
    node_io(b, "DequantizeLinear", "dq_y", 3, (const char *[]){"sum_q", "s", "z"}, 1, (const char *[]){"y"});
    if (v == MID_OUTPUT) graph_output(b, "a", 4, (int64_t[]){1, PC, PHW, PHW});
    static const char *files[] = {"nhwc_chain.onnx", "nhwc_stem3.onnx", "nhwc_mid.onnx", "nhwc_grouped.onnx",
                                  "nhwc_wzp.onnx"};
    return save(b, files[v]);
}

static void test_pass(void) {
    /* channels-last convs, Adds and Transposes each variant must end with */
    static const int want[N_VARIANTS][3] = {{2, 1, 2}, {1, 1, 2}, {2, 1, 3}, {1, 1, 2}, {1, 1, 2}, {2, 0, 2}, {2, 0, 2}};
    for (int v = 0; v < N_VARIANTS; v++) {
        check_set_case("layout_nhwc: %s", variant_names[v]);
        builder b;
        const char *path = build_graph(&b, (graph_variant)v);
        /* the Clip would become a byte table otherwise (passes/fuse_lut.c) */
        const char *off = v == ABSENT_MIN ? "fuse_lut" : NULL, *ref_off = v == ABSENT_MIN ? "fuse_lut,layout_nhwc" : "layout_nhwc";
        nn_model *m = load_opts(path, 1, NULL, off), *ref = load_opts(path, 1, NULL, ref_off);
        if (m && ref) {
            CHECK_EQ_INT("QLinearConvNhwc nodes", want[v][0], count_op(m, NN_OP_QLinearConvNhwc));
            CHECK_EQ_INT("QLinearConv nodes left", 2 - want[v][0], count_op(m, NN_OP_QLinearConv));
            CHECK_EQ_INT("QLinearAdd nodes", want[v][1], count_op(m, NN_OP_QLinearAdd));
            CHECK_EQ_INT("Transpose nodes", want[v][2], count_op(m, NN_OP_Transpose));
            if (v == SQUEEZE) { /* the pool reads channels-last; the gate reaches the Mul as [1, 1, 1, C] */
                CHECK_EQ_INT("GlobalAveragePoolNhwc nodes", 1, count_op(m, NN_OP_GlobalAveragePoolNhwc));
                CHECK_EQ_INT("GlobalAveragePool nodes left", 0, count_op(m, NN_OP_GlobalAveragePool));
            }
            CHECK_EQ_INT("QLinearConvNhwc nodes with the pass disabled", 0, count_op(ref, NN_OP_QLinearConvNhwc));
            CHECK_EQ_INT("Transpose nodes with the pass disabled", 0, count_op(ref, NN_OP_Transpose));
            expect_outputs_close(path, m, ref_off, 0.0, __LINE__); /* the same bytes */
        }
        nn_free(m);
        nn_free(ref);
        builder_free(&b);
    }
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 1;
    }
    random_input_bound = 6.0f; /* past x's quantized range, [-6, 6.75] */
    test_pass();
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", nn_test_dir);
    return check_summary();
}
