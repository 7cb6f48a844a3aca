/* The graph optimizer, pass by pass, on small models built here: each test
 * checks that the rewrite happened, that it did not happen where it must
 * not, and that the optimized model computes what the unoptimized one does.
 * Every model loaded also has its memory plan checked for overlapping live
 * buffers.  Reaches into the IR (engine/model.h): the test links the static
 * library. */
#include "pass_harness.h"

static void test_fold_constants(void) {
    check_set_case("fold_constants: Shape->Gather->Unsqueeze->Concat->Reshape");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 3, 4, 4});
    graph_output(&b, "y", 2, (int64_t[]){-1, 48});
    int64_t zero = 0, minus_one = -1;
    int64_init(&b, "idx0", 0, NULL, 1, &zero);
    int64_init(&b, "axes0", 1, D1, 1, &zero);
    int64_init(&b, "rest", 1, D1, 1, &minus_one);
    float c1[48], c2[48];
    float_init(&b, "c1", 1, (int64_t[]){48}, 48, fill(c1, 48, -1, 1, 11));
    float_init(&b, "c2", 1, (int64_t[]){48}, 48, fill(c2, 48, -1, 1, 12));
    node(&b, "Shape", "shape", "x", NULL, "s");
    node(&b, "Gather", "gather", "s", "idx0", "n");
    node(&b, "Unsqueeze", "unsqueeze", "n", "axes0", "n1");
    attr_int(&b, node(&b, "Concat", "concat", "n1", "rest", "shp"), "axis", 0);
    node(&b, "Reshape", "reshape", "x", "shp", "r");
    node(&b, "Relu", "relu", "r", NULL, "t");
    node(&b, "Add", "const_add", "c1", "c2", "k"); /* constant-only: folds */
    node(&b, "Mul", "mul", "t", "k", "y");
    const char *path = save(&b, "fold_constants.onnx");

    nn_model *raw = load_opts(path, 0, NULL, NULL);
    if (raw) CHECK(raw->dynamic, "unoptimized model: expected dynamic (Reshape's shape known only at run time)");
    nn_free(raw);

    nn_model *m = load(path, "fold_constants");
    if (m) {
        CHECK_OPS(m, "Reshape Relu Mul");
        CHECK(!m->dynamic, "folded model: expected static shapes, got dynamic");
        nn_node *r = find_op(m, NN_OP_Reshape);
        const nn_value *shp = r && r->n_in > 1 ? &m->g.values[r->in[1]] : NULL;
        if (CHECK(shp && shp->is_const && shp->t.dtype == NN_DTYPE_INT64 && nn_tensor_elements(&shp->t) == 2,
                  "Reshape shape input: expected a constant int64[2], got %s",
                  shp ? (shp->is_const ? "another constant" : "a computed value") : "none")) {
            const int64_t *d = shp->t.data;
            CHECK(d[0] == BATCH && d[1] == -1, "Reshape shape: expected [%d, -1], got [%lld, %lld]", BATCH,
                  (long long)d[0], (long long)d[1]);
        }
        CHECK(r && !strcmp(input_name(m, r, 0), "x"), "Reshape data input: expected 'x', got '%s'",
              r ? input_name(m, r, 0) : "(no Reshape)");
        nn_node *mul = find_op(m, NN_OP_Mul);
        const nn_value *k = mul ? &m->g.values[mul->in[1]] : NULL;
        if (CHECK(k && k->is_const, "Mul's constant operand: expected folded c1 + c2, got a computed value")) {
            const float *kd = k->t.data;
            float worst = 0;
            for (int i = 0; i < 48; i++)
                worst = fmaxf(worst, fabsf(kd[i] - (c1[i] + c2[i])));
            CHECK(worst == 0.0f, "folded c1 + c2: expected exact, got max error %g", worst);
        }
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    /* once folded, the later passes see a static graph: the Reshape becomes a view */
    m = load(path, NULL);
    if (m) {
        nn_node *r = find_op(m, NN_OP_Reshape);
        CHECK(r && r->elided, "Reshape after the default pipeline: expected a view, got %s",
              r ? "a copy" : "no Reshape");
    }
    nn_free(m);
    builder_free(&b);
}

/* ---- eliminate_noops */
static void test_eliminate_noops(void) {
    check_set_case("eliminate_noops: Identity, Dropout, same-shape Reshape, dead nodes");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 2, (int64_t[]){-1, 4});
    graph_output(&b, "y", 2, (int64_t[]){-1, 4});
    int64_init(&b, "same", 1, (int64_t[]){2}, 2, (int64_t[]){-1, 4});
    node(&b, "Identity", "identity", "x", NULL, "a");
    node(&b, "Dropout", "dropout", "a", NULL, "b");
    node(&b, "Reshape", "reshape", "b", "same", "c");
    node(&b, "Relu", "relu", "c", NULL, "d");
    node(&b, "Neg", "dead1", "x", NULL, "unused1"); /* a dead chain: goes in one sweep */
    node(&b, "Abs", "dead2", "unused1", NULL, "unused2");
    node(&b, "Identity", "out_identity", "d", NULL, "y"); /* the graph output keeps its name */
    const char *path = save(&b, "noops.onnx");
    nn_model *m = load(path, "eliminate_noops");
    if (m) {
        CHECK_OPS(m, "Relu");
        nn_node *relu = find_op(m, NN_OP_Relu);
        if (relu) {
            CHECK(!strcmp(input_name(m, relu, 0), "x"), "Relu input: expected 'x', got '%s'", input_name(m, relu, 0));
            CHECK(!strcmp(value_name(m, relu->out[0]), "y"), "Relu output: expected 'y', got '%s'",
                  value_name(m, relu->out[0]));
        }
        const char *name = NULL;
        nn_tensor info;
        nn_output_info(m, 0, &name, &info);
        CHECK(name && !strcmp(name, "y"), "graph output name: expected 'y', got '%s'", name ? name : "(null)");
        int y = m->g.outputs[0];
        CHECK(m->g.values[y].producer >= 0 && &m->g.nodes[m->g.values[y].producer] == relu,
              "graph output 'y' producer: expected the Relu, got node %d", m->g.values[y].producer);
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);

    check_set_case("eliminate_noops: a real Reshape and an input->output Identity stay correct");
    builder_init(&b);
    graph_input(&b, "x", 2, (int64_t[]){-1, 4});
    graph_output(&b, "y1", 3, (int64_t[]){-1, 2, 2});
    graph_output(&b, "y2", 2, (int64_t[]){-1, 4});
    int64_init(&b, "other", 1, (int64_t[]){3}, 3, (int64_t[]){-1, 2, 2});
    node(&b, "Reshape", "reshape", "x", "other", "r");
    node(&b, "Relu", "relu", "r", NULL, "y1");
    node(&b, "Identity", "identity", "x", NULL, "y2");
    path = save(&b, "noops_keep.onnx");
    m = load(path, "eliminate_noops");
    if (m) {
        CHECK_EQ_INT("Reshape nodes (shape changes)", 1, count_op(m, NN_OP_Reshape));
        const char *name = NULL;
        nn_tensor info;
        nn_output_info(m, 1, &name, &info);
        CHECK(name && !strcmp(name, "y2"), "second output name: expected 'y2', got '%s'", name ? name : "(null)");
        float xs[BATCH * 4];
        nn_tensor in = {NN_DTYPE_FLOAT, 2, {BATCH, 4}, fill(xs, BATCH * 4, -2, 2, 3)}, out[2];
        nn_status st = nn_predict(m, &in, 1, out, 2);
        if (CHECK(st == NN_OK, "predict: expected OK, got %s: %s", nn_strerror(st), nn_last_error())) {
            CHECK(!memcmp(out[1].data, xs, sizeof xs), "y2 = Identity(x): expected x, got different values");
            free_tensors(out, 2, true);
        }
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

/* ---- fold_batchnorm */
static void conv_bn_model(builder *b, bool conv_bias, float eps, bn_stats *s) {
    builder_init(b);
    graph_input(b, "x", 4, (int64_t[]){-1, 3, 8, 8});
    graph_output(b, "y", 4, (int64_t[]){-1, 4, 8, 8});
    add_conv(b, "conv", "x", "c", 3, 4, conv_bias, 21);
    add_bn(b, "bn", "c", "y", 4, eps, 31, s);
}

/* The folded weights, read right after the pass: once the model is ready,
 * Conv's prepare may have packed them and dropped the plain copy. */
typedef struct folded_weights {
    const float *w; /* the original weights */
    const bn_stats *s;
    float eps;
    int checked;
    double worst; /* relative error of W_bn against W * scale / sqrt(var + eps) */
    char name[64];
} folded_weights;

static void check_folded_weights(void *ctx, const nn_model *m, const char *pass, int rewrites) {
    folded_weights *f = ctx;
    if (strcmp(pass, "fold_batchnorm") != 0 || rewrites == 0) return; /* the round that folded */
    nn_node *conv = find_op(m, NN_OP_Conv);
    if (!conv) return;
    const nn_value *wv = &m->g.values[conv->in[1]];
    snprintf(f->name, sizeof f->name, "%s", wv->name);
    int per = 27;
    for (int i = 0; wv->is_const && wv->t.data && i < 4 * per; i++) {
        int c = i / per;
        double want = f->w[i] * f->s->scale[c] / sqrt((double)f->s->var[c] + f->eps);
        f->worst = fmax(f->worst, fabs(((const float *)wv->t.data)[i] - want) / (fabs(want) + 1e-6));
        f->checked++;
    }
}

static void test_fold_batchnorm_conv(bool conv_bias) {
    check_set_case(conv_bias ? "fold_batchnorm: Conv(bias)+BN, epsilon 0.1" : "fold_batchnorm: Conv(no bias)+BN");
    builder b;
    bn_stats s;
    const float eps = 0.1f;
    conv_bn_model(&b, conv_bias, eps, &s);
    const Onnx__TensorProto *w = b.inits[0];
    const char *path = save(&b, conv_bias ? "conv_bn.onnx" : "conv_nobias_bn.onnx");
    nn_model *m = load(path, "fold_batchnorm");
    if (m) {
        CHECK_OPS(m, "Conv");
        nn_node *conv = find_op(m, NN_OP_Conv);
        if (conv) {
            /* the conv is its weights' only reader: they are scaled in place */
            CHECK(!strcmp(input_name(m, conv, 1), w->name), "Conv weight: expected '%s' scaled in place, got '%s'",
                  w->name, input_name(m, conv, 1));
            CHECK(!strcmp(input_name(m, conv, 2), "conv/B_bn"), "Conv bias: expected 'conv/B_bn', got '%s'",
                  input_name(m, conv, 2));
            CHECK(!strcmp(value_name(m, conv->out[0]), "y"), "Conv output: expected 'y', got '%s'",
                  value_name(m, conv->out[0]));
            CHECK(conv->fused && strstr(conv->fused, "BatchNormalization"),
                  "fused label: expected 'BatchNormalization', got '%s'", conv->fused ? conv->fused : "(null)");
            /* W_bn = W * scale / sqrt(var + eps) with the node's epsilon */
            folded_weights f = {.w = w->float_data, .s = &s, .eps = eps};
            nn_options opt = nn_options_default();
            opt.passes = "fold_batchnorm";
            nn_model *again = NULL;
            CHECK(nn_load_hooked(path, &opt, check_folded_weights, &f, &again) == NN_OK, "reload: %s", nn_last_error());
            nn_free(again);
            CHECK(f.checked == 4 * 27 && f.worst < 1e-5,
                  "W_bn vs W * scale / sqrt(var + 0.1): expected 108 values within 1e-5, got %d with %.3g", f.checked,
                  f.worst);
        }
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    /* the whole pipeline gets there too, and leaving the pass out keeps the BN */
    m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "Conv");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    m = load_opts(path, 1, NULL, "fold_batchnorm");
    if (m)
        CHECK_EQ_INT("BatchNormalization nodes with fold_batchnorm disabled", 1, count_op(m, NN_OP_BatchNormalization));
    nn_free(m);
    builder_free(&b);
}

static void test_fold_batchnorm_shared(void) {
    check_set_case("fold_batchnorm: conv output also read elsewhere: BN becomes Mul+Add");
    builder b;
    bn_stats s;
    conv_bn_model(&b, true, 1e-5f, &s);
    graph_output(&b, "z", 4, (int64_t[]){-1, 4, 8, 8});
    node(&b, "Sigmoid", "other_reader", "c", NULL, "z");
    const char *path = save(&b, "conv_bn_shared.onnx");
    nn_model *m = load(path, "fold_batchnorm");
    if (m) {
        CHECK_EQ_INT("BatchNormalization nodes", 0, count_op(m, NN_OP_BatchNormalization));
        CHECK_EQ_INT("Mul nodes", 1, count_op(m, NN_OP_Mul));
        CHECK_EQ_INT("Add nodes", 1, count_op(m, NN_OP_Add));
        nn_node *conv = find_op(m, NN_OP_Conv), *mul = find_op(m, NN_OP_Mul);
        if (conv) {
            CHECK(!strcmp(input_name(m, conv, 1), "conv_W"), "Conv weight: expected unchanged 'conv_W', got '%s'",
                  input_name(m, conv, 1));
            CHECK(!strcmp(value_name(m, conv->out[0]), "c"), "Conv output: expected 'c', got '%s'",
                  value_name(m, conv->out[0]));
        }
        if (mul) CHECK(!strcmp(input_name(m, mul, 0), "c"), "Mul input: expected 'c', got '%s'", input_name(m, mul, 0));
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fold_batchnorm_gemm(bool matmul) {
    check_set_case(matmul ? "fold_batchnorm: MatMul+BN becomes Gemm" : "fold_batchnorm: Gemm(beta 0.7)+BN");
    builder b;
    bn_stats s;
    builder_init(&b);
    graph_input(&b, "x", 2, (int64_t[]){-1, 8});
    graph_output(&b, "y", 2, (int64_t[]){-1, 6});
    float w[48], c[6];
    if (matmul) {
        float_init(&b, "W", 2, (int64_t[]){8, 6}, 48, fill(w, 48, -1, 1, 41));
        node(&b, "MatMul", "gemm", "x", "W", "g");
    } else {
        float_init(&b, "W", 2, (int64_t[]){6, 8}, 48, fill(w, 48, -1, 1, 41));
        float_init(&b, "C", 1, (int64_t[]){6}, 6, fill(c, 6, -1, 1, 42));
        Onnx__NodeProto *n = node_io(&b, "Gemm", "gemm", 3, (const char *[]){"x", "W", "C"}, 1, (const char *[]){"g"});
        attr_int(&b, n, "transB", 1);
        attr_float(&b, n, "beta", 0.7f);
        attr_float(&b, n, "alpha", 1.3f);
    }
    add_bn(&b, "bn", "g", "y", 6, 0.1f, 51, &s);
    const char *path = save(&b, matmul ? "matmul_bn.onnx" : "gemm_bn.onnx");
    nn_model *m = load(path, "fold_batchnorm");
    if (m) {
        CHECK_OPS(m, "Gemm");
        nn_node *g = find_op(m, NN_OP_Gemm);
        if (g) {
            CHECK(!strcmp(input_name(m, g, 1), "gemm/B_bn"), "Gemm B: expected 'gemm/B_bn', got '%s'",
                  input_name(m, g, 1));
            CHECK(!strcmp(input_name(m, g, 2), "gemm/C_bn"), "Gemm C: expected 'gemm/C_bn', got '%s'",
                  input_name(m, g, 2));
        }
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fold_batchnorm_standalone(void) {
    check_set_case("fold_batchnorm: standalone BN becomes Mul+Add, epsilon 0.1");
    builder b;
    bn_stats s;
    const float eps = 0.1f;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 3, 4, 4});
    graph_output(&b, "y", 4, (int64_t[]){-1, 3, 4, 4});
    add_bn(&b, "bn", "x", "y", 3, eps, 61, &s);
    const char *path = save(&b, "bn_alone.onnx");
    nn_model *m = load(path, "fold_batchnorm");
    if (m) {
        CHECK_OPS(m, "Mul Add");
        /* against the formula, not only against the engine's own BN kernel */
        enum { N = BATCH * 3 * 16 };
        float xs[N];
        nn_tensor in = {NN_DTYPE_FLOAT, 4, {BATCH, 3, 4, 4}, fill(xs, N, -2, 2, 5)}, out;
        nn_status st = nn_predict(m, &in, 1, &out, 1);
        if (CHECK(st == NN_OK, "predict: expected OK, got %s: %s", nn_strerror(st), nn_last_error())) {
            double worst = 0;
            for (int i = 0; i < N; i++) {
                int c = i / 16 % 3;
                double want = s.scale[c] * (xs[i] - s.mean[c]) / sqrt((double)s.var[c] + eps) + s.bias[c];
                worst = fmax(worst, fabs(((float *)out.data)[i] - want) / (fabs(want) + 1e-3));
            }
            CHECK(worst < 1e-5, "y vs scale * (x - mean) / sqrt(var + 0.1) + bias: expected rel error < 1e-5, got %.3g",
                  worst);
            nn_tensor_release(&out);
        }
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

/* ---- fuse_activation */
/* x [N,3,6,6] -> Conv "conv" -> c, then the test adds the activation */
static void conv_model(builder *b, const char *out_name) {
    builder_init(b);
    graph_input(b, "x", 4, (int64_t[]){-1, 3, 6, 6});
    graph_output(b, out_name, 4, (int64_t[]){-1, 4, 6, 6});
    add_conv(b, "conv", "x", "c", 3, 4, true, 71);
}

static void test_fuse_relu(void) {
    check_set_case("fuse_activation: Conv+Relu");
    builder b;
    conv_model(&b, "y");
    node(&b, "Relu", "relu", "c", NULL, "y");
    const char *path = save(&b, "conv_relu.onnx");
    bool hook = CHECK_ACTIVATION_HOOK(NN_OP_Relu);
    nn_model *m = load(path, "fuse_activation");
    if (m && hook) {
        CHECK_OPS(m, "Conv");
        nn_node *conv = find_op(m, NN_OP_Conv);
        CHECK_EPILOGUE(m, conv, NN_ACT_RELU, NULL, "Relu");
        if (conv)
            CHECK(!strcmp(value_name(m, conv->out[0]), "y"), "Conv output: expected 'y', got '%s'",
                  value_name(m, conv->out[0]));
    }
    if (m) CHECK_SAME_OUTPUTS(path, m);
    nn_free(m);
    builder_free(&b);

    check_set_case("fuse_activation: Relu of a conv output read twice stays");
    conv_model(&b, "y");
    graph_output(&b, "z", 4, (int64_t[]){-1, 4, 6, 6});
    node(&b, "Relu", "relu", "c", NULL, "y");
    node(&b, "Neg", "other_reader", "c", NULL, "z");
    path = save(&b, "conv_relu_shared.onnx");
    m = load(path, NULL);
    if (m) {
        CHECK_EQ_INT("Relu nodes", 1, count_op(m, NN_OP_Relu));
        nn_node *conv = find_op(m, NN_OP_Conv);
        CHECK(conv && !(conv->has_epilogue && conv->epilogue.act != NN_ACT_NONE),
              "Conv activation: expected none, got %s", conv ? act_name(conv->epilogue.act) : "(no Conv)");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fuse_clip(void) {
    check_set_case("fuse_activation: Conv+Clip(opset 13 bounds -0.5, 0.75)");
    builder b;
    conv_model(&b, "y");
    float lo = -0.5f, hi = 0.75f;
    float_init(&b, "lo", 0, NULL, 1, &lo);
    float_init(&b, "hi", 0, NULL, 1, &hi);
    node_io(&b, "Clip", "clip", 3, (const char *[]){"c", "lo", "hi"}, 1, (const char *[]){"y"});
    const char *path = save(&b, "conv_clip.onnx");
    bool hook = CHECK_ACTIVATION_HOOK(NN_OP_Clip);
    nn_model *m = load(path, "fuse_activation");
    if (m && hook) {
        CHECK_OPS(m, "Conv");
        nn_node *conv = find_op(m, NN_OP_Conv);
        CHECK_EPILOGUE(m, conv, NN_ACT_CLIP, NULL, "Clip");
        if (conv && conv->has_epilogue)
            CHECK(conv->epilogue.alpha == lo && conv->epilogue.beta == hi,
                  "Clip bounds: expected [%g, %g], got [%g, %g]", lo, hi, conv->epilogue.alpha, conv->epilogue.beta);
    }
    if (m) CHECK_SAME_OUTPUTS(path, m);
    nn_free(m);
    builder_free(&b);
}

static void test_fuse_silu(void) {
    check_set_case("fuse_activation: Conv, x * Sigmoid(x) becomes SiLU");
    builder b;
    conv_model(&b, "y");
    node(&b, "Sigmoid", "sigmoid", "c", NULL, "s");
    node(&b, "Mul", "mul", "c", "s", "y");
    const char *path = save(&b, "conv_silu.onnx");
    nn_model *m = load(path, "fuse_activation");
    if (m) {
        CHECK_OPS(m, "Conv");
        CHECK_EPILOGUE(m, find_op(m, NN_OP_Conv), NN_ACT_SILU, NULL, "SiLU");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fuse_leaky_gemm(void) {
    check_set_case("fuse_activation: Gemm+LeakyRelu(alpha 0.2)");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 2, (int64_t[]){-1, 8});
    graph_output(&b, "y", 2, (int64_t[]){-1, 6});
    float w[48], c[6];
    float_init(&b, "W", 2, (int64_t[]){8, 6}, 48, fill(w, 48, -1, 1, 81));
    float_init(&b, "C", 1, (int64_t[]){6}, 6, fill(c, 6, -1, 1, 82));
    node_io(&b, "Gemm", "gemm", 3, (const char *[]){"x", "W", "C"}, 1, (const char *[]){"g"});
    attr_float(&b, node(&b, "LeakyRelu", "leaky", "g", NULL, "y"), "alpha", 0.2f);
    const char *path = save(&b, "gemm_leaky.onnx");
    bool hook = CHECK_ACTIVATION_HOOK(NN_OP_LeakyRelu);
    nn_model *m = load(path, "fuse_activation");
    if (m && hook) {
        CHECK_OPS(m, "Gemm");
        nn_node *g = find_op(m, NN_OP_Gemm);
        CHECK_EPILOGUE(m, g, NN_ACT_LEAKY_RELU, NULL, "LeakyRelu");
        if (g && g->has_epilogue)
            CHECK(g->epilogue.alpha == 0.2f, "LeakyRelu alpha: expected 0.2, got %g", g->epilogue.alpha);
    }
    if (m) CHECK_SAME_OUTPUTS(path, m);
    nn_free(m);
    builder_free(&b);
}

/* ---- fuse_bias */
static void test_fuse_bias(void) {
    check_set_case("fuse_bias: MatMul + bias Add + Relu -> one Gemm");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 2, (int64_t[]){-1, 8});
    graph_output(&b, "y", 2, (int64_t[]){-1, 6});
    graph_output(&b, "z", 2, (int64_t[]){-1, 6});
    float w[48], c[6], w2[48];
    float_init(&b, "W", 2, (int64_t[]){8, 6}, 48, fill(w, 48, -1, 1, 91));
    float_init(&b, "bias", 1, (int64_t[]){6}, 6, fill(c, 6, -1, 1, 92));
    float_init(&b, "W2", 2, (int64_t[]){8, 6}, 48, fill(w2, 48, -1, 1, 93));
    node(&b, "MatMul", "mm", "x", "W", "p");
    node(&b, "Add", "add", "p", "bias", "q");
    node(&b, "Relu", "relu", "q", NULL, "y");
    /* not fused: the product is read twice */
    node(&b, "MatMul", "mm2", "x", "W2", "p2");
    node(&b, "Add", "add2", "p2", "bias", "q2");
    node(&b, "Mul", "mul2", "p2", "q2", "z");
    const char *path = save(&b, "matmul_bias.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "Gemm MatMul FusedElementwise"); /* the second Add+Mul: one elementwise pass */
        nn_node *g = find_op(m, NN_OP_Gemm);
        CHECK_EPILOGUE(m, g, NN_ACT_RELU, NULL, "MatMul->Gemm+Add+Relu");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

/* ---- fuse_residual */
/* x [N,4,6,6] -> Conv "conv" (4 -> 4) -> c */
static void residual_model(builder *b) {
    builder_init(b);
    graph_input(b, "x", 4, (int64_t[]){-1, 4, 6, 6});
    graph_output(b, "y", 4, (int64_t[]){-1, 4, 6, 6});
    add_conv(b, "conv", "x", "c", 4, 4, true, 91);
}

static void test_fuse_residual(void) {
    static const char *const sides[2][2] = {{"c", "x"}, {"x", "c"}};
    for (int side = 0; side < 2; side++) {
        check_set_case(side ? "fuse_residual: Add(x, conv)" : "fuse_residual: Add(conv, x)");
        builder b;
        residual_model(&b);
        node(&b, "Add", "add", sides[side][0], sides[side][1], "y");
        const char *path = save(&b, side ? "residual_swapped.onnx" : "residual.onnx");
        nn_model *m = load(path, "fuse_residual");
        if (m) {
            CHECK_OPS(m, "Conv");
            nn_node *conv = find_op(m, NN_OP_Conv);
            CHECK_EPILOGUE(m, conv, NN_ACT_NONE, "x", "Add");
            if (conv)
                CHECK(!strcmp(value_name(m, conv->out[0]), "y"), "Conv output: expected 'y', got '%s'",
                      value_name(m, conv->out[0]));
            CHECK_SAME_OUTPUTS(path, m);
        }
        nn_free(m);
        builder_free(&b);
    }

    check_set_case("fuse_residual: a broadcasting Add stays");
    builder b;
    residual_model(&b);
    float bias[4] = {0.1f, -0.2f, 0.3f, -0.4f};
    float_init(&b, "bias", 3, (int64_t[]){4, 1, 1}, 4, bias);
    node(&b, "Add", "add", "c", "bias", "y");
    const char *path = save(&b, "residual_broadcast.onnx");
    nn_model *m = load(path, "fuse_residual");
    if (m) {
        CHECK_OPS(m, "Conv Add");
        nn_node *conv = find_op(m, NN_OP_Conv);
        CHECK(conv && !conv->has_epilogue, "Conv epilogue: expected none, got residual %d",
              conv ? conv->epilogue.residual : -1);
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);

    check_set_case("fuse_residual: Add of a conv output read twice stays");
    residual_model(&b);
    graph_output(&b, "z", 4, (int64_t[]){-1, 4, 6, 6});
    node(&b, "Add", "add", "c", "x", "y");
    node(&b, "Neg", "other_reader", "c", NULL, "z");
    path = save(&b, "residual_shared.onnx");
    m = load(path, "fuse_residual");
    if (m) {
        CHECK_EQ_INT("Add nodes", 1, count_op(m, NN_OP_Add));
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);

    check_set_case("fuse_residual: Conv+Add+Relu ends as one node");
    residual_model(&b);
    node(&b, "Add", "add", "c", "x", "s");
    node(&b, "Relu", "relu", "s", NULL, "y");
    path = save(&b, "residual_relu.onnx");
    bool hook = CHECK_ACTIVATION_HOOK(NN_OP_Relu);
    m = load(path, NULL);
    if (m && hook) {
        CHECK_OPS(m, "Conv");
        CHECK_EPILOGUE(m, find_op(m, NN_OP_Conv), NN_ACT_RELU, "x", "Add+Relu");
    }
    if (m) CHECK_SAME_OUTPUTS(path, m);
    nn_free(m);
    builder_free(&b);
}

/* ---- views */
static void expect_alias(const nn_model *m, const char *out, const char *in) {
    int o = value_id(m, out), i = value_id(m, in);
    if (!CHECK(o >= 0 && i >= 0, "values '%s' and '%s': expected both in the graph", out, in)) return;
    CHECK(m->plan.offset[o] >= 0 && m->plan.offset[o] == m->plan.offset[i],
          "offset of '%s' (view of '%s'): expected %lld, got %lld", out, in, (long long)m->plan.offset[i],
          (long long)m->plan.offset[o]);
}

static void test_views(void) {
    check_set_case("views: Flatten and Reshape alias their input");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 2, 4, 4});
    graph_output(&b, "y", 3, (int64_t[]){-1, 2, 16});
    int64_init(&b, "shape", 1, (int64_t[]){3}, 3, (int64_t[]){-1, 2, 16});
    node(&b, "Relu", "relu", "x", NULL, "a");
    node(&b, "Flatten", "flatten", "a", NULL, "f");
    node(&b, "Sigmoid", "sigmoid", "f", NULL, "s");
    node(&b, "Reshape", "reshape", "s", "shape", "y");
    const char *path = save(&b, "views.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "Relu Flatten Sigmoid Reshape");
        for (int i = 0; i < m->g.n_nodes; i++) {
            const nn_node *n = &m->g.nodes[i];
            bool want = n->op == NN_OP_Flatten || n->op == NN_OP_Reshape;
            CHECK(n->elided == want, "%s elided: expected %s, got %s", op_name(n->op), want ? "true" : "false",
                  n->elided ? "true" : "false");
        }
        expect_alias(m, "f", "a");
        expect_alias(m, "y", "s");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

/* ---- memory plan */
static void test_plan_chain(void) {
    check_set_case("memory plan: chain of 10 Conv/elementwise nodes");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 16, 16, 16});
    graph_output(&b, "t10", 4, (int64_t[]){-1, 16, 16, 16});
    static const char *const elementwise[2] = {"Neg", "Abs"};
    for (int i = 0; i < 10; i++) {
        const char *in = i ? builder_str(&b, "t%d", i) : "x", *out = builder_str(&b, "t%d", i + 1);
        if (i % 2 == 0)
            add_conv(&b, builder_str(&b, "conv%d", i), in, out, 16, 16, true, 100 + (uint32_t)i);
        else
            node(&b, elementwise[i / 2 % 2], builder_str(&b, "ew%d", i), in, NULL, out);
    }
    const char *path = save(&b, "chain.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_EQ_INT("nodes", 10, m->g.n_nodes);
        const nn_plan *p = &m->plan;
        size_t one = (size_t)BATCH * 16 * 16 * 16 * sizeof(float);
        CHECK(p->naive_bytes >= 11 * one, "naive bytes: expected >= 11 buffers (%zu), got %zu", 11 * one,
              p->naive_bytes);
        CHECK(p->arena_bytes * 4 <= p->naive_bytes, "arena: expected <= naive / 4 = %zu, got %zu", p->naive_bytes / 4,
              p->arena_bytes);
        CHECK(p->arena_bytes >= p->lower_bound_bytes, "arena: expected >= lower bound %zu, got %zu",
              p->lower_bound_bytes, p->arena_bytes);
        CHECK(p->arena_bytes * 10 <= p->lower_bound_bytes * 11, "arena: expected <= 1.10 * lower bound %zu, got %zu",
              p->lower_bound_bytes, p->arena_bytes);
        /* Neg/Abs run in place, their input dying with them; not the last,
         * whose output is the graph's */
        int in_place = 0;
        for (int i = 0; i < m->g.n_nodes; i++) {
            const nn_node *n = &m->g.nodes[i];
            if (n->op == NN_OP_Neg || n->op == NN_OP_Abs) in_place += p->offset[n->out[0]] == p->offset[n->in[0]];
        }
        CHECK_EQ_INT("elementwise nodes writing over their input", 4, in_place);
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

/* branches, several buffer sizes, views and a concat: check_plan in load()
 * checks every pair of buffers live together */
static void test_plan_branches(void) {
    check_set_case("memory plan: branches, pooling, views, concat");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 4, (int64_t[]){-1, 8, 8, 8});
    graph_output(&b, "y", 2, (int64_t[]){-1, 272});
    add_conv(&b, "conv", "x", "a", 8, 16, true, 121);
    Onnx__NodeProto *pool = node(&b, "MaxPool", "pool", "a", NULL, "p");
    attr_ints(&b, pool, "kernel_shape", 2, (int64_t[]){2, 2});
    attr_ints(&b, pool, "strides", 2, (int64_t[]){2, 2});
    node(&b, "Neg", "neg", "a", NULL, "n");
    node(&b, "Sigmoid", "sigmoid", "n", NULL, "s");
    node(&b, "Add", "add", "a", "s", "d");
    node(&b, "GlobalAveragePool", "gap", "d", NULL, "e");
    node(&b, "Flatten", "flatten_e", "e", NULL, "f");
    node(&b, "Flatten", "flatten_p", "p", NULL, "q");
    attr_int(&b, node(&b, "Concat", "concat", "f", "q", "y"), "axis", 1);
    const char *path = save(&b, "branches.onnx");
    nn_model *m = load(path, NULL);
    if (m) CHECK_SAME_OUTPUTS(path, m);
    nn_free(m);
    /* at batch 1 the Concat's slices are contiguous: it is eliminated, and
     * the Flattens feeding it must put their inputs in its buffer */
    load_batch = 1;
    m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "Conv MaxPool FusedElementwise GlobalAveragePool Flatten Flatten Concat");
        for (int i = 0; i < m->g.n_nodes; i++) {
            const nn_node *n = &m->g.nodes[i];
            bool want = n->op == NN_OP_Flatten || n->op == NN_OP_Concat;
            CHECK(n->elided == want, "batch 1: %s elided: expected %s", op_name(n->op), want ? "true" : "false");
        }
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    load_batch = BATCH;
    m = load_opts(path, 0, NULL, NULL);
    nn_free(m);
    builder_free(&b);
}

/* ---- verifier and manager */
static void expect_verify(nn_model *m, nn_status want, const char *needle, const char *what) {
    nn_status st = nn_verify_graph(m, "test");
    CHECK(st == want, "%s: expected %s, got %s (%s)", what, nn_strerror(want), nn_strerror(st),
          st == NN_OK ? "no message" : nn_last_error());
    if (needle && st != NN_OK)
        CHECK(strstr(nn_last_error(), needle) != NULL, "%s: message expected to contain '%s', got '%s'", what, needle,
              nn_last_error());
}

static void swap_nodes(nn_graph *g, int i, int j) {
    nn_node t = g->nodes[i];
    g->nodes[i] = g->nodes[j];
    g->nodes[j] = t;
    for (int k = 0; k < g->nodes[i].n_out; k++)
        g->values[g->nodes[i].out[k]].producer = i;
    for (int k = 0; k < g->nodes[j].n_out; k++)
        g->values[g->nodes[j].out[k]].producer = j;
}

/* the passes a hooked load ran, in order */
typedef struct pass_log {
    const char *names[64];
    int n;
} pass_log;

static void log_pass(void *ctx, const nn_model *m, const char *pass, int rewrites) {
    (void)m, (void)rewrites;
    pass_log *log = ctx;
    if (strcmp(pass, "parsed") && log->n < 64) log->names[log->n++] = pass;
}

static void test_verifier(void) {
    check_set_case("verifier: catches broken graphs");
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 2, (int64_t[]){-1, 4});
    graph_output(&b, "y", 2, (int64_t[]){-1, 4});
    node(&b, "Neg", "neg", "x", NULL, "a");
    node(&b, "Abs", "abs", "a", NULL, "b");
    node(&b, "Sigmoid", "sigmoid", "b", NULL, "y");
    const char *path = save(&b, "verify.onnx");
    nn_model *m = load_opts(path, 0, NULL, NULL);
    if (m) {
        nn_graph *g = &m->g;
        expect_verify(m, NN_OK, NULL, "intact graph");
        swap_nodes(g, 0, 1);
        expect_verify(m, NN_ERR_INTERNAL, "before it is produced", "Abs moved before the Neg it reads");
        swap_nodes(g, 0, 1);
        int b_id = value_id(m, "b");
        g->values[b_id].producer = 0;
        expect_verify(m, NN_ERR_INTERNAL, "wrong producer", "value naming the wrong producer");
        g->values[b_id].producer = 1;
        g->values[b_id].t.dims[1] = 5;
        expect_verify(m, NN_ERR_INTERNAL, "stale shape", "value with a stale shape");
        g->values[b_id].t.dims[1] = 4;
        int op = g->nodes[1].op;
        g->nodes[1].op = NN_OP_COUNT;
        expect_verify(m, NN_ERR_INTERNAL, "no operator", "node without an operator");
        g->nodes[1].op = op;
        g->n_nodes--;
        expect_verify(m, NN_ERR_INTERNAL, "no longer produced", "graph output whose producer is gone");
        g->n_nodes++;
        expect_verify(m, NN_OK, NULL, "graph restored");
    }
    nn_free(m);

    check_set_case("pass manager: unknown pass names are rejected");
    nn_options o = nn_options_default();
    o.passes = "fold_constants,no_such_pass";
    m = NULL;
    nn_status st = nn_load(path, &o, &m);
    CHECK(st == NN_ERR_ARG && !m, "unknown pass: expected %s, got %s", nn_strerror(NN_ERR_ARG), nn_strerror(st));
    CHECK(strstr(nn_last_error(), "no_such_pass") != NULL, "message: expected to name 'no_such_pass', got '%s'",
          nn_last_error());
    nn_free(m);

    /* the chain fuses in the first round, so the rewriting passes run twice;
     * the memory passes, which alias values, only once and after them */
    check_set_case("pass manager: memory passes run once, after the rewriting rounds");
    pass_log log = {0};
    nn_options ho = nn_options_default();
    ho.batch = load_batch;
    ho.cache = 0;
    m = NULL;
    st = nn_load_hooked(path, &ho, log_pass, &log, &m);
    CHECK(st == NN_OK, "load: %s", nn_last_error());
    int concat_at = -1, views_at = -1, last_rewriting = -1, fuse_runs = 0;
    for (int i = 0; i < log.n; i++) {
        const nn_pass *p = NULL;
        for (int k = 0; nn_default_pipeline[k]; k++)
            if (!strcmp(nn_default_pipeline[k]->name, log.names[i])) p = nn_default_pipeline[k];
        if (!strcmp(log.names[i], "eliminate_concat")) {
            CHECK(concat_at < 0, "eliminate_concat ran twice");
            concat_at = i;
        }
        if (!strcmp(log.names[i], "views")) {
            CHECK(views_at < 0, "views ran twice");
            views_at = i;
        }
        if (p && !p->memory) last_rewriting = i;
        fuse_runs += !strcmp(log.names[i], "fuse_elementwise");
    }
    CHECK_EQ_INT("fuse_elementwise runs (two rounds)", 2, fuse_runs);
    CHECK(concat_at > last_rewriting && views_at > concat_at,
           "order: expected eliminate_concat then views after the last rewriting pass (at %d), got %d and %d",
           last_rewriting, concat_at, views_at);
    nn_free(m);
    builder_free(&b);
}

/* ---- fuse_pad */
enum pad_kind { PAD_ZEROS, PAD_REFLECT, PAD_VALUE, PAD_CHANNELS, PAD_CROP };
enum pad_host { HOST_CONV, HOST_AVG, HOST_AVG_OWN_PADS, HOST_AVG_CEIL };

/* x [-1, 3, 9, 9] -> Pad -> a Conv (3x3, pads 1) or an AveragePool (3x3,
 * stride 1) -> y; `also_read`: the Pad's output is a second graph output. */
static const char *pad_model(builder *b, enum pad_kind kind, enum pad_host host, bool also_read) {
    builder_init(b);
    graph_input(b, "x", 4, (int64_t[]){-1, 3, 9, 9});
    graph_output(b, "y", 4, (int64_t[]){-1, -1, -1, -1});
    if (also_read) graph_output(b, "p", 4, (int64_t[]){-1, -1, -1, -1});
    /* begins then ends, per axis N, C, H, W: asymmetric, as TensorFlow's SAME pads are */
    int64_t pads[8] = {0, 0, 1, 2, 0, 0, 2, 1};
    if (kind == PAD_CHANNELS) pads[1] = 1;
    if (kind == PAD_CROP) pads[6] = -1;
    int64_init(b, "pads", 1, (int64_t[]){8}, 8, pads);
    float_init(b, "value", 0, NULL, 1, (float[]){kind == PAD_VALUE ? 0.5f : 0.0f});
    const char *in[3] = {"x", "pads", "value"}, *out = "p";
    Onnx__NodeProto *pad = node_io(b, "Pad", "pad", 3, in, 1, &out);
    if (kind == PAD_REFLECT) {
        Onnx__AttributeProto *a = attr_new(b, pad, "mode", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
        a->has_s = 1;
        a->s.data = (uint8_t *)"reflect";
        a->s.len = 7;
    }
    if (host == HOST_CONV) {
        add_conv(b, "conv", "p", "y", kind == PAD_CHANNELS ? 4 : 3, 4, true, 41);
    } else {
        Onnx__NodeProto *n = node(b, "AveragePool", "pool", "p", NULL, "y");
        attr_ints(b, n, "kernel_shape", 2, (int64_t[]){3, 3});
        if (host == HOST_AVG_OWN_PADS) attr_ints(b, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
        if (host == HOST_AVG_CEIL) {
            attr_ints(b, n, "strides", 2, (int64_t[]){2, 2});
            attr_int(b, n, "ceil_mode", 1);
        }
    }
    return save(b, "pad.onnx");
}

static void pad_case(enum pad_kind kind, enum pad_host host, bool also_read, bool fused, const char *what) {
    check_set_case("fuse_pad: %s", what);
    builder b;
    const char *path = pad_model(&b, kind, host, also_read);
    nn_model *m = load(path, "fuse_pad");
    if (m) {
        const char *host_op = host == HOST_CONV ? "Conv" : "AveragePool";
        char want[64];
        snprintf(want, sizeof want, "%s%s", fused ? "" : "Pad ", host_op);
        CHECK_OPS(m, want);
        nn_node *n = find_op(m, host == HOST_CONV ? NN_OP_Conv : NN_OP_AveragePool);
        if (n && fused) {
            CHECK(!strcmp(input_name(m, n, 0), "x"), "%s input: expected 'x', got '%s'", host_op, input_name(m, n, 0));
            CHECK(n->fused && !strcmp(n->fused, "Pad"), "fused label: expected 'Pad', got '%s'",
                  n->fused ? n->fused : "(null)");
        }
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

/* Opset 10: the pads and the constant are attributes. */
static void pad_attr_case(float value, bool fused, const char *what) {
    check_set_case("fuse_pad: %s", what);
    builder b;
    builder_init(&b);
    b.opset.version = 10;
    graph_input(&b, "x", 4, (int64_t[]){-1, 3, 9, 9});
    graph_output(&b, "y", 4, (int64_t[]){-1, -1, -1, -1});
    Onnx__NodeProto *pad = node(&b, "Pad", "pad", "x", NULL, "p");
    attr_ints(&b, pad, "pads", 8, (int64_t[]){0, 0, 2, 0, 0, 0, 1, 2});
    attr_float(&b, pad, "value", value);
    add_conv(&b, "conv", "p", "y", 3, 4, false, 43);
    const char *path = save(&b, "pad10.onnx");
    nn_model *m = load(path, "fuse_pad");
    if (m) {
        CHECK_OPS(m, fused ? "Conv" : "Pad Conv");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fuse_pad(void) {
    /* must rewrite: zeros on H and W only, the Pad read by its host alone */
    pad_case(PAD_ZEROS, HOST_CONV, false, true, "Pad by zeros + Conv with pads of its own");
    pad_case(PAD_ZEROS, HOST_AVG, false, true, "Pad by zeros + AveragePool (counts them: count_include_pad)");
    /* must not: other values, modes or axes, a crop, a second reader, pads
     * an AveragePool does not count, ceil mode's windows past the end */
    pad_case(PAD_REFLECT, HOST_CONV, false, false, "reflect Pad + Conv");
    pad_case(PAD_VALUE, HOST_AVG, false, false, "Pad by 0.5 + AveragePool");
    pad_case(PAD_CHANNELS, HOST_CONV, false, false, "Pad along channels + Conv");
    pad_case(PAD_CROP, HOST_CONV, false, false, "Pad that crops + Conv");
    pad_case(PAD_ZEROS, HOST_CONV, true, false, "Pad also a graph output + Conv");
    pad_case(PAD_ZEROS, HOST_AVG_OWN_PADS, false, false, "Pad + AveragePool with uncounted pads of its own");
    pad_case(PAD_ZEROS, HOST_AVG_CEIL, false, false, "Pad + AveragePool in ceil mode");
    pad_attr_case(0.0f, true, "opset 10 Pad by zeros (attributes) + Conv");
    pad_attr_case(-1.0f, false, "opset 10 Pad by -1 + Conv");
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_fold_constants();
    test_eliminate_noops();
    test_fold_batchnorm_conv(true);
    test_fold_batchnorm_conv(false);
    test_fold_batchnorm_shared();
    test_fold_batchnorm_gemm(false);
    test_fold_batchnorm_gemm(true);
    test_fold_batchnorm_standalone();
    test_fuse_relu();
    test_fuse_clip();
    test_fuse_silu();
    test_fuse_leaky_gemm();
    test_fuse_bias();
    test_fuse_residual();
    test_fuse_pad();
    test_views();
    test_plan_chain();
    test_plan_branches();
    test_verifier();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", nn_test_dir);
    return check_summary();
}
