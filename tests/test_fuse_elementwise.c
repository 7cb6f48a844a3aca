/* The elementwise fusions: fuse_elementwise (chains of BatchNorm, Mul/Add
 * and activations into one FusedElementwise node or a GEMM epilogue) and
 * fuse_prologue (BatchNorm+Relu ahead of a 1x1 Conv into the Conv's input
 * packing), each with must-rewrite and must-not-rewrite cases and the
 * optimized outputs compared with the unoptimized model's.  Split from
 * test_passes.c; the helpers are in pass_harness.h. */
#include "pass_harness.h"

/* ---- fuse_elementwise */
/* rel L2 between the fused graph and the same pipeline without the fusion */
static const double FUSED_TOL = 1e-6;
#define CHECK_SAME_AS_UNFUSED(path, m) expect_outputs_close(path, m, "fuse_elementwise", FUSED_TOL, __LINE__)

/* The FusedElementwise node: its label and its inputs, by value name. */
static void expect_fused_chain(nn_model *m, const char *label, int n_in, const char *const *inputs, int line) {
    nn_node *f = find_op(m, NN_OP_FusedElementwise);
    if (!CHECK_AT(line, f != NULL, "FusedElementwise node: expected one, got none (nodes [%s])", ops_string(m))) return;
    CHECK_AT(line, f->fused && !strcmp(f->fused, label), "fused label: expected '%s', got '%s'", label,
             f->fused ? f->fused : "(null)");
    if (!CHECK_AT(line, f->n_in == n_in, "FusedElementwise inputs: expected %d, got %d", n_in, f->n_in)) return;
    for (int k = 0; k < n_in; k++)
        CHECK_AT(line, !strcmp(input_name(m, f, k), inputs[k]), "FusedElementwise input %d: expected '%s', got '%s'", k,
                 inputs[k], input_name(m, f, k));
}
#define CHECK_FUSED_CHAIN(m, label, ...)                                                                               \
    expect_fused_chain(m, label, (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)),                  \
                       (const char *[]){__VA_ARGS__}, __LINE__)

static void test_fuse_elementwise_bn(void) {
    check_set_case("fuse_elementwise: BN after a non-conv, then Relu, becomes one node (DenseNet)");
    builder b;
    bn_stats s;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 3, 20, 25});
    graph_output(&b, "y", 4, (int64_t[]){-1, 3, 20, 25});
    add_bn(&b, "bn", "x", "t", 3, 1e-5f, 131, &s);
    node(&b, "Relu", "relu", "t", NULL, "y");
    const char *path = save(&b, "bn_relu.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "FusedElementwise");
        CHECK_FUSED_CHAIN(m, "Mul+Add+Relu", "x", "bn/scale", "bn/shift");
        nn_node *f = find_op(m, NN_OP_FusedElementwise);
        if (f) {
            CHECK(!strcmp(f->name, "bn"), "FusedElementwise name: expected the first node's 'bn', got '%s'", f->name);
            /* scale, shift and Relu in one loop */
            const nn_ew_program *p = f->params;
            CHECK(p->n_steps == 1 && p->steps[0].op == NN_EW_MulAdd && p->steps[0].act == NN_ACT_RELU,
                  "program: expected one MulAdd step with Relu, got %d steps, the first opcode %d act %s", p->n_steps,
                  p->steps[0].op, act_name(p->steps[0].act));
        }
        CHECK_SAME_AS_UNFUSED(path, m);
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    m = load_opts(path, 1, NULL, "fuse_elementwise");
    if (m) CHECK_OPS(m, "Mul Add");
    nn_free(m);
    builder_free(&b);
}

/* Every kind of operand in one chain: per channel (both sides), a
 * same-shape graph input (twice), a trailing vector, scalars, a computed
 * [N,C,1,1] and activations left standalone or in an epilogue. */
static void test_fuse_elementwise_long(void) {
    check_set_case("fuse_elementwise: 13 ops, every operand kind, one node");
    builder b;
    builder_init(&b);
    const int64_t shape[4] = {-1, 3, 20, 25};
    graph_input(&b, "x", 4, shape);
    graph_input(&b, "z", 4, shape);
    graph_output(&b, "y", 4, shape);
    float scale[3], shift[3], row[25], two = 2.0f, p15 = 1.5f, lo = 0.05f, hi = 0.9f;
    float_init(&b, "scale", 3, (int64_t[]){3, 1, 1}, 3, fill(scale, 3, 0.5f, 1.5f, 141));
    float_init(&b, "shift", 3, (int64_t[]){3, 1, 1}, 3, fill(shift, 3, -0.5f, 0.5f, 142));
    float_init(&b, "row", 1, (int64_t[]){25}, 25, fill(row, 25, -1.0f, 1.0f, 143));
    float_init(&b, "two", 0, NULL, 1, &two);
    float_init(&b, "p15", 1, D1, 1, &p15);
    float_init(&b, "lo", 0, NULL, 1, &lo);
    float_init(&b, "hi", 0, NULL, 1, &hi);
    node(&b, "GlobalAveragePool", "gap", "x", NULL, "g");
    node(&b, "Neg", "neg", "x", NULL, "a");
    node(&b, "Mul", "mul_scale", "a", "scale", "b");
    node(&b, "Sub", "sub_shift", "shift", "b", "c"); /* the running value on the right */
    node(&b, "Sigmoid", "sigmoid", "c", NULL, "d");  /* goes into the Sub's epilogue first */
    node(&b, "Mul", "mul_z", "d", "z", "e");
    node(&b, "Add", "add_row", "e", "row", "f");
    node(&b, "Div", "div_two", "f", "two", "g2");
    node(&b, "Max", "max_z", "z", "g2", "h");
    node(&b, "Tanh", "tanh", "h", NULL, "i");
    node(&b, "Abs", "abs", "i", NULL, "j");
    node(&b, "Pow", "pow", "j", "p15", "k");
    node_io(&b, "Clip", "clip", 3, (const char *[]){"k", "lo", "hi"}, 1, (const char *[]){"l"});
    node(&b, "Mul", "mul_gap", "l", "g", "y");
    const char *path = save(&b, "ew_long.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "GlobalAveragePool FusedElementwise");
        CHECK_FUSED_CHAIN(m, "Neg+Mul+Sub+Sigmoid+Mul+Add+Div+Max+Tanh+Abs+Pow+Clip+Mul", "x", "scale", "shift", "z",
                          "row", "two", "p15", "g");
        CHECK_SAME_AS_UNFUSED(path, m);
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fuse_elementwise_muladd(void) {
    check_set_case("fuse_elementwise: Mul+Add pairs by same-shape and per-channel operands, with and without Tanh");
    builder b;
    builder_init(&b);
    const int64_t shape[4] = {-1, 3, 20, 25};
    graph_input(&b, "x", 4, shape);
    graph_input(&b, "z", 4, shape);
    graph_input(&b, "w", 4, shape);
    graph_output(&b, "y", 4, shape);
    float scale[3], shift[3];
    float_init(&b, "scale", 3, (int64_t[]){3, 1, 1}, 3, fill(scale, 3, 0.5f, 1.5f, 171));
    float_init(&b, "shift", 3, (int64_t[]){3, 1, 1}, 3, fill(shift, 3, -0.5f, 0.5f, 172));
    node(&b, "Neg", "neg", "x", NULL, "a");
    node(&b, "Mul", "mul_z", "a", "z", "p");
    node(&b, "Add", "add_w", "w", "p", "q"); /* fuse_residual puts it into the Mul first */
    node(&b, "Tanh", "tanh", "q", NULL, "t");
    node(&b, "Mul", "mul_scale", "t", "scale", "u");
    node(&b, "Add", "add_shift", "u", "shift", "y");
    const char *path = save(&b, "ew_muladd.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "FusedElementwise");
        CHECK_FUSED_CHAIN(m, "Neg+Mul+Add+Tanh+Mul+Add", "x", "z", "w", "scale", "shift");
        nn_node *f = find_op(m, NN_OP_FusedElementwise);
        const nn_ew_program *p = f ? f->params : NULL;
        if (p)
            CHECK(p->n_steps == 3 && p->steps[1].op == NN_EW_MulAdd && p->steps[1].act == NN_ACT_TANH &&
                      p->steps[2].op == NN_EW_MulAdd && p->steps[2].act == NN_ACT_NONE,
                  "program: expected Neg, MulAdd+Tanh, MulAdd, got %d steps", p->n_steps);
        CHECK_SAME_AS_UNFUSED(path, m);
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fuse_elementwise_epilogue(void) {
    check_set_case("fuse_elementwise: a Mul holding a residual Add and a Relu joins the chain");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 4, 6, 6});
    graph_input(&b, "r", 4, (int64_t[]){-1, 4, 6, 6});
    graph_output(&b, "y", 4, (int64_t[]){-1, 4, 6, 6});
    float k[4];
    float_init(&b, "k", 3, (int64_t[]){4, 1, 1}, 4, fill(k, 4, -1.0f, 1.0f, 151));
    node(&b, "Exp", "exp", "x", NULL, "a");
    node(&b, "Mul", "mul", "a", "k", "p");
    node(&b, "Add", "add", "p", "r", "s");    /* fuse_residual: into the Mul */
    node(&b, "Relu", "relu", "s", NULL, "y"); /* fuse_activation: into the Mul */
    const char *path = save(&b, "ew_epilogue.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "FusedElementwise");
        CHECK_FUSED_CHAIN(m, "Exp+Mul+Add+Relu", "x", "k", "r");
        CHECK_SAME_AS_UNFUSED(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fuse_elementwise_stops(void) {
    check_set_case("fuse_elementwise: an intermediate with a second reader ends the chain");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 4, 6, 6});
    graph_output(&b, "y", 4, (int64_t[]){-1, 4, 6, 6});
    graph_output(&b, "z", 4, (int64_t[]){-1, 4, 6, 6});
    node(&b, "Neg", "neg", "x", NULL, "a");
    node(&b, "Abs", "abs", "a", NULL, "b");
    node(&b, "Exp", "exp", "b", NULL, "y");
    node(&b, "Sigmoid", "sigmoid", "a", NULL, "z");
    const char *path = save(&b, "ew_shared.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "Neg FusedElementwise Sigmoid");
        CHECK_FUSED_CHAIN(m, "Abs+Exp", "a");
        CHECK_SAME_AS_UNFUSED(path, m);
    }
    nn_free(m);
    builder_free(&b);

    check_set_case("fuse_elementwise: an intermediate that is a graph output ends the chain");
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 4, 6, 6});
    graph_output(&b, "a", 4, (int64_t[]){-1, 4, 6, 6});
    graph_output(&b, "y", 4, (int64_t[]){-1, 4, 6, 6});
    node(&b, "Neg", "neg", "x", NULL, "a");
    node(&b, "Abs", "abs", "a", NULL, "y");
    path = save(&b, "ew_output.onnx");
    m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "Neg Abs");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);

    check_set_case("fuse_elementwise: an operand broadcast across a gap in the dims stays out");
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 4, 6, 6});
    graph_output(&b, "y", 4, (int64_t[]){-1, 4, 6, 6});
    float w[24];
    float_init(&b, "w", 3, (int64_t[]){4, 1, 6}, 24, fill(w, 24, -1.0f, 1.0f, 161)); /* varies along C and W */
    node(&b, "Neg", "neg", "x", NULL, "a");
    node(&b, "Mul", "mul", "a", "w", "b");
    node(&b, "Abs", "abs", "b", NULL, "y");
    path = save(&b, "ew_gap.onnx");
    m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "Neg Mul Abs");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);

    check_set_case("fuse_elementwise: FusedElementwise in a model file is refused");
    builder_init(&b);
    graph_input(&b, "x", 2, (int64_t[]){-1, 4});
    graph_output(&b, "y", 2, (int64_t[]){-1, 4});
    node(&b, "FusedElementwise", "smuggled", "x", NULL, "y");
    path = save(&b, "ew_in_file.onnx");
    nn_options o = nn_options_default();
    m = NULL;
    nn_status st = nn_load(path, &o, &m);
    CHECK(st == NN_ERR_UNSUPPORTED && !m, "load: expected %s, got %s", nn_strerror(NN_ERR_UNSUPPORTED),
          nn_strerror(st));
    CHECK(strstr(nn_last_error(), "optimizer") != NULL, "message: expected to say it is the optimizer's, got '%s'",
          nn_last_error());
    nn_free(m);
    builder_free(&b);
}
/* ---- fuse_prologue */
/* A DenseNet layer: BatchNormalization+Relu over a Concat of all earlier
 * features, read by a 1x1 conv, which takes the scale, shift and Relu into
 * its input packing and reads the Concat itself. */
/* Targets for fuse_prologue: one whose kernels apply no prologue, one that runs every node. */
static bool no_prologue(const nn_model *m, const nn_node *n) {
    (void)m;
    return !n->has_prologue;
}
static bool any_node(const nn_model *m, const nn_node *n) {
    (void)m;
    (void)n;
    return true;
}

static void test_fuse_prologue(void) {
    check_set_case("fuse_prologue: BN+Relu over a Concat moves into the 1x1 conv reading it (DenseNet)");
    builder b;
    bn_stats s;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 6, 9, 11});
    graph_output(&b, "y", 4, (int64_t[]){-1, 5, 9, 11});
    node(&b, "Neg", "stem", "x", NULL, "r");
    attr_int(&b, node(&b, "Concat", "concat", "x", "r", "c"), "axis", 1);
    add_bn(&b, "bn", "c", "t", 12, 1e-5f, 211, &s);
    node(&b, "Relu", "relu", "t", NULL, "u");
    add_conv_k(&b, "conv", "u", "y", 12, 5, true, 212, 1, (int64_t[]){0, 0, 0, 0}, 1);
    const char *path = save(&b, "dense_layer.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_EQ_INT("FusedElementwise nodes", 0, count_op(m, NN_OP_FusedElementwise));
        nn_node *conv = find_op(m, NN_OP_Conv);
        if (CHECK(conv && conv->has_prologue, "the Conv: expected a prologue (nodes [%s])", ops_string(m))) {
            CHECK(conv->prologue.act == NN_ACT_RELU, "prologue activation: expected Relu, got %s",
                  act_name(conv->prologue.act));
            CHECK(!strcmp(input_name(m, conv, 0), "c"), "conv input: expected the Concat's 'c', got '%s'",
                  input_name(m, conv, 0));
            CHECK(!strcmp(input_name(m, conv, conv->prologue.scale), "bn/scale") &&
                      !strcmp(input_name(m, conv, conv->prologue.shift), "bn/shift"),
                  "prologue operands: expected bn/scale and bn/shift, got '%s' and '%s'",
                  input_name(m, conv, conv->prologue.scale), input_name(m, conv, conv->prologue.shift));
            CHECK(conv->fused && strstr(conv->fused, "input(Mul+Add+Relu)"),
                  "fused label: expected it to name input(Mul+Add+Relu), got '%s'", conv->fused ? conv->fused : "");
        }
        expect_outputs_close(path, m, "fuse_prologue", FUSED_TOL, __LINE__);
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    m = load_opts(path, 1, NULL, "fuse_prologue");
    if (m) CHECK_EQ_INT("FusedElementwise nodes without the pass", 1, count_op(m, NN_OP_FusedElementwise));
    /* the pass asks the target whether it runs the fused Conv, whatever its name */
    if (m) {
        const nn_backend without = {.name = "cpu", .supports_node = no_prologue},
                         with = {.name = "other", .supports_node = any_node};
        int rewrites = 0;
        m->backend = &without;
        CHECK(nn_pass_fuse_prologue.run(m, &rewrites) == NN_OK, "run on a target without prologues: %s",
               nn_last_error());
        CHECK_EQ_INT("rewrites on a target without prologues", 0, rewrites);
        m->backend = &with;
        CHECK(nn_pass_fuse_prologue.run(m, &rewrites) == NN_OK, "run on a target with prologues: %s", nn_last_error());
        CHECK_EQ_INT("rewrites on a target with prologues", 1, rewrites);
        m->backend = &nn_cpu_backend;
    }
    nn_free(m);
    builder_free(&b);
}

/* The same chain ahead of convs that read their input through padding (a
 * 3x3 window; a 1x1 kernel with trailing pads, whose padded positions must
 * stay zero, not become Relu(shift)) or per group: the chain stays. */
static void test_fuse_prologue_stops(void) {
    check_set_case("fuse_prologue: convs with padding, windows or groups keep the chain");
    builder b;
    bn_stats s;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 8, 7, 9});
    graph_output(&b, "y1", 4, (int64_t[]){-1, 4, 7, 9});
    graph_output(&b, "y2", 4, (int64_t[]){-1, 4, 8, 11});
    graph_output(&b, "y3", 4, (int64_t[]){-1, 4, 7, 9});
    for (int i = 1; i <= 3; i++) {
        add_bn(&b, builder_str(&b, "bn%d", i), "x", builder_str(&b, "t%d", i), 8, 1e-5f, 220 + 10 * (uint32_t)i, &s);
        node(&b, "Relu", builder_str(&b, "relu%d", i), builder_str(&b, "t%d", i), NULL, builder_str(&b, "u%d", i));
    }
    add_conv_k(&b, "window", "u1", "y1", 8, 4, true, 261, 3, (int64_t[]){1, 1, 1, 1}, 1);
    add_conv_k(&b, "padded", "u2", "y2", 8, 4, true, 262, 1, (int64_t[]){0, 0, 1, 2}, 1);
    add_conv_k(&b, "grouped", "u3", "y3", 8, 4, true, 263, 1, (int64_t[]){0, 0, 0, 0}, 2);
    const char *path = save(&b, "prologue_stops.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_EQ_INT("FusedElementwise nodes", 3, count_op(m, NN_OP_FusedElementwise));
        for (int i = 0; i < m->g.n_nodes; i++)
            CHECK(!m->g.nodes[i].has_prologue, "node '%s': expected no prologue", m->g.nodes[i].name);
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_fuse_elementwise_bn();
    test_fuse_elementwise_long();
    test_fuse_elementwise_muladd();
    test_fuse_elementwise_epilogue();
    test_fuse_elementwise_stops();
    test_fuse_prologue();
    test_fuse_prologue_stops();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", nn_test_dir);
    return check_summary();
}
