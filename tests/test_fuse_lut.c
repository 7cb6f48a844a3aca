/* The fuse_lut pass (passes/fuse_lut.c) on small QDQ graphs
 *   x -> Q -> DQ -> (float activation) -> Q -> DQ -> y
 * must turn the middle into one QLookup and give the bytes the graph
 * gives without the pass: SiLU (Sigmoid and a Mul of the DQ output by
 * it), HardSwish, and LeakyRelu after a scalar Mul; and must leave the
 * chain when a value inside it is also a graph output, when a Mul's other
 * operand is per channel, when the Mul's operands come from two different
 * DQs, and when the pass is disabled by name; under each ISA this CPU
 * runs.  The inputs span x's whole quantized range, so every table entry
 * is read. */
#include "../ops/isa.h"
#include "pass_harness.h"

typedef enum variant { SILU, HARDSWISH, SCALED_LEAKY, INNER_OUTPUT, PER_CHANNEL, TWO_INPUTS, N_VARIANTS } variant;
static const char *names[] = {
    "SiLU (Sigmoid, Mul)", "HardSwish",       "a scalar Mul, then LeakyRelu", "the Sigmoid is also a graph output",
    "a per-channel Mul",   "a Mul of two DQs"};
enum { C = 4, HW = 6 };

static const char *build(builder *b, variant v) {
    builder_init(b);
    int64_t d[4] = {1, C, HW, HW};
    graph_input(b, "x", 4, d);
    graph_output(b, "y", 4, d);
    float s = 0.04f, s2 = 0.03f, k = 1.5f;
    uint8_t z = 128, z2 = 90;
    float_init(b, "s", 0, NULL, 1, &s);
    float_init(b, "s2", 0, NULL, 1, &s2);
    float_init(b, "k", 0, NULL, 1, &k);
    raw_init(b, "z", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &z, 1);
    raw_init(b, "z2", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &z2, 1);
    float per_ch[C] = {0.5f, 1.0f, 1.5f, 2.0f};
    float_init(b, "per_ch", 3, (int64_t[]){C, 1, 1}, C, per_ch);
    node_io(b, "QuantizeLinear", "q_x", 3, (const char *[]){"x", "s", "z"}, 1, (const char *[]){"x_q"});
    node_io(b, "DequantizeLinear", "dq_x", 3, (const char *[]){"x_q", "s", "z"}, 1, (const char *[]){"x_dq"});
    const char *act = "act";
    switch (v) {
    case SILU:
    case INNER_OUTPUT:
    case PER_CHANNEL:
        node(b, "Sigmoid", "sigmoid", "x_dq", NULL, "sig");
        node(b, "Mul", "mul", "x_dq", v == PER_CHANNEL ? "per_ch" : "sig", v == PER_CHANNEL ? "pre" : "act");
        if (v == PER_CHANNEL) node(b, "Mul", "mul2", "pre", "sig", "act");
        if (v == INNER_OUTPUT) graph_output(b, "sig", 4, d);
        break;
    case HARDSWISH: node(b, "HardSwish", "hardswish", "x_dq", NULL, "act"); break;
    case SCALED_LEAKY:
        node(b, "Mul", "scale", "x_dq", "k", "scaled");
        attr_float(b, node(b, "LeakyRelu", "leaky", "scaled", NULL, "act"), "alpha", 0.1f);
        break;
    case TWO_INPUTS: /* x's bytes read back with another scale: a second varying input */
        node_io(b, "DequantizeLinear", "dq_x2", 3, (const char *[]){"x_q", "s2", "z2"}, 1, (const char *[]){"x_dq2"});
        node(b, "Mul", "mul", "x_dq", "x_dq2", "act");
        break;
    default: break;
    }
    node_io(b, "QuantizeLinear", "q_y", 3, (const char *[]){act, "s", "z"}, 1, (const char *[]){"y_q"});
    node_io(b, "DequantizeLinear", "dq_y", 3, (const char *[]){"y_q", "s", "z"}, 1, (const char *[]){"y"});
    static const char *files[] = {"lut_silu.onnx",  "lut_hardswish.onnx", "lut_leaky.onnx",
                                  "lut_inner.onnx", "lut_channel.onnx",   "lut_two.onnx"};
    return save(b, files[v]);
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 1;
    }
    random_input_bound = 5.2f; /* x's whole quantized range, [-5.12, 5.08], and past it */
    /* each ISA's lookup (AVX-512 VBMI's VPERMI2B, the byte loop) and kernels that make the table */
    static const nn_isa isas[] = {NN_ISA_AVX512, NN_ISA_AVX2, NN_ISA_SCALAR};
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        if (!nn_isa_select(isas[ii])) continue;
        for (int v = 0; v < N_VARIANTS; v++) {
            check_set_case("fuse_lut: %s, %s", names[v], nn_isa_name(isas[ii]));
            builder b;
            const char *path = build(&b, (variant)v);
            nn_model *m = load_opts(path, 1, NULL, NULL), *ref = load_opts(path, 1, NULL, "fuse_lut");
            bool rewrite = v <= SCALED_LEAKY;
            if (m && ref) {
                CHECK_EQ_INT("QLookup nodes", rewrite, count_op(m, NN_OP_QLookup));
                CHECK_EQ_INT("QLookup nodes with the pass disabled", 0, count_op(ref, NN_OP_QLookup));
                if (rewrite) /* only the model's own Q of x and DQ of y are left */
                    CHECK_EQ_INT("nodes", 3, m->g.n_nodes);
                expect_outputs_close(path, m, "fuse_lut", 0.0, __LINE__); /* the same bytes */
            }
            nn_free(m);
            nn_free(ref);
            builder_free(&b);
        }
    }
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", nn_test_dir);
    return check_summary();
}
