/* The transformer fusions (passes/fuse_layernorm.c, passes/fuse_gelu.c) on
 * small models built here, in the style of test_passes.c: each case checks
 * that the rewrite happened or, where it must not, that it did not, and that
 * the optimized model computes what the unoptimized one does. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/model.h"
#include "../ops/act.h"
#include "../ops/params.h"
#include "../ops/registry.h"
#include "../passes/pass.h"
#include "check.h"
#include "nn.h"
#include "onnx_builder.h"

enum { BATCH = 2, MAX_IO = 4 };
static const double REL_TOL = 1e-5;

static float *fill(float *buf, int n, float lo, float hi, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        buf[i] = lo + (hi - lo) * (float)(seed >> 8) / (float)(1u << 24);
    }
    return buf;
}

static nn_model *load_opts(const char *path, int optimize, const char *passes) {
    nn_options o = nn_options_default();
    o.batch = o.micro_batch = BATCH;
    o.threads = 1;
    o.optimize = optimize;
    o.passes = passes;
    o.verify = 1;
    nn_model *m = NULL;
    nn_status st = nn_load(path, &o, &m);
    CHECK(st == NN_OK, "load (optimize %d, passes %s): expected OK, got %s: %s", optimize, passes ? passes : "default",
          nn_strerror(st), nn_last_error());
    return m;
}

static const char *op_name(int op) { return op >= 0 && nn_op_get(op) ? nn_op_get(op)->name : "?"; }

static void expect_ops(const nn_model *m, const char *want, int line) {
    char s[1024] = "";
    for (int i = 0; i < m->g.n_nodes; i++)
        snprintf(s + strlen(s), sizeof s - strlen(s), "%s%s", i ? " " : "", op_name(m->g.nodes[i].op));
    CHECK_AT(line, !strcmp(s, want), "nodes: expected [%s], got [%s]", want, s);
}
#define CHECK_OPS(m, want) expect_ops(m, want, __LINE__)

/* The optimized model and the unoptimized one agree on the same random input. */
static void expect_same_outputs(const char *path, nn_model *opt, int line) {
    nn_model *ref = load_opts(path, 0, NULL);
    if (!opt || !ref) {
        nn_free(ref);
        return;
    }
    nn_tensor in[MAX_IO], a[MAX_IO], b[MAX_IO];
    int n_in = nn_input_count(opt), n_out = nn_output_count(opt);
    for (int i = 0; i < n_in; i++) {
        const char *name;
        nn_input_info(opt, i, &name, &in[i]);
        int64_t count = nn_tensor_elements(&in[i]);
        in[i].data = fill(malloc(sizeof(float) * (size_t)count), (int)count, -3.0f, 3.0f, 7u + (uint32_t)i);
    }
    nn_status sa = nn_predict(opt, in, n_in, a, n_out);
    nn_status sb = sa == NN_OK ? nn_predict(ref, in, n_in, b, n_out) : NN_ERR_INTERNAL;
    CHECK_AT(line, sa == NN_OK && sb == NN_OK, "predict: expected OK, got %s / %s: %s", nn_strerror(sa),
             nn_strerror(sb), nn_last_error());
    for (int k = 0; sa == NN_OK && sb == NN_OK && k < n_out; k++)
        check_rel_l2_at("optimized vs unoptimized", a[k].data, b[k].data, nn_tensor_elements(&b[k]), REL_TOL,
                        __FILE__, line);
    for (int k = 0; k < n_out; k++) {
        if (sa == NN_OK) nn_tensor_release(&a[k]);
        if (sa == NN_OK && sb == NN_OK) nn_tensor_release(&b[k]);
    }
    for (int i = 0; i < n_in; i++) free(in[i].data);
    nn_free(ref);
}
#define CHECK_SAME_OUTPUTS(path, m) expect_same_outputs(path, m, __LINE__)

static const nn_node *find_op(const nn_model *m, int op) {
    for (int i = 0; i < m->g.n_nodes; i++)
        if (m->g.nodes[i].op == op) return &m->g.nodes[i];
    return NULL;
}

/* ---- fuse_layernorm */
enum { LN_ROWS = 5, LN_D = 16 };

typedef struct ln_variant {
    float exponent;      /* the Pow's */
    bool eps_input;      /* epsilon from a graph input instead of a constant */
    int gamma_ndim;      /* 0: no Mul; 1: [D]; 2: [1, D]; -1: [ROWS, 1] (per row: the wrong axis) */
    bool beta;           /* the Add of a bias */
    bool sub_read_twice; /* Sub's output is also a graph output */
    int64_t axis;        /* ReduceMean's axes */
} ln_variant;

/* x [N, ROWS, D] through the decomposition torch exports for nn.LayerNorm */
static const char *ln_model(builder *b, const ln_variant *v, const char *file) {
    builder_init(b);
    graph_input(b, "x", 3, (int64_t[]){-1, LN_ROWS, LN_D});
    graph_output(b, "y", 3, (int64_t[]){-1, LN_ROWS, LN_D});
    if (v->sub_read_twice) graph_output(b, "d", 3, (int64_t[]){-1, LN_ROWS, LN_D});
    float gamma[LN_D * LN_ROWS], beta[LN_D], eps = 1e-5f;
    float_init(b, "two", 0, NULL, 1, &v->exponent);
    if (v->eps_input)
        graph_input(b, "eps", 1, (int64_t[]){1});
    else
        float_init(b, "eps", 0, NULL, 1, &eps);
    int64_t axes = v->axis;
    attr_ints(b, node(b, "ReduceMean", "mean", "x", NULL, "m"), "axes", 1, &axes);
    node(b, "Sub", "sub", "x", "m", "d");
    node(b, "Pow", "pow", "d", "two", "p");
    attr_ints(b, node(b, "ReduceMean", "var", "p", NULL, "v"), "axes", 1, &axes);
    node(b, "Add", "add_eps", "v", "eps", "ve");
    node(b, "Sqrt", "sqrt", "ve", NULL, "s");
    const char *last = "q";
    node(b, "Div", "div", "d", "s", v->gamma_ndim || v->beta ? "q" : "y");
    if (v->gamma_ndim) {
        int64_t dims[2] = {1, LN_D};
        int n = LN_D;
        if (v->gamma_ndim < 0) dims[0] = LN_ROWS, dims[1] = 1, n = LN_ROWS;
        if (v->gamma_ndim == 1)
            float_init(b, "gamma", 1, (int64_t[]){LN_D}, n, fill(gamma, n, 0.5f, 1.5f, 3));
        else
            float_init(b, "gamma", 2, dims, n, fill(gamma, n, 0.5f, 1.5f, 3));
        node(b, "Mul", "mul", "q", "gamma", v->beta ? "g" : "y");
        last = "g";
    }
    if (v->beta) {
        float_init(b, "beta", 1, (int64_t[]){LN_D}, LN_D, fill(beta, LN_D, -0.5f, 0.5f, 4));
        node(b, "Add", "add_beta", "beta", last, "y"); /* torch puts the bias first */
    }
    return save(b, file);
}

static void ln_case(const char *what, const ln_variant *v, const char *want_ops) {
    check_set_case("fuse_layernorm: %s", what);
    builder b;
    const char *path = ln_model(&b, v, "layernorm.onnx");
    nn_model *m = load_opts(path, 1, "fold_constants,fuse_layernorm");
    if (m) {
        CHECK_OPS(m, want_ops);
        const nn_node *ln = find_op(m, NN_OP_LayerNormalization);
        if (ln) {
            const nn_norm_params *p = ln->params;
            CHECK(p && p->epsilon == 1e-5f && p->axis == 2, "LayerNormalization params: expected eps 1e-5 axis 2");
        }
        /* a cube's mean can be negative: its sqrt is NaN in both models */
        if (v->exponent == 2) CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fuse_layernorm(void) {
    ln_case("full chain", &(ln_variant){.exponent = 2, .gamma_ndim = 1, .beta = true, .axis = -1},
            "LayerNormalization");
    ln_case("gamma [1, D]", &(ln_variant){.exponent = 2, .gamma_ndim = 2, .beta = true, .axis = 2},
            "LayerNormalization");
    ln_case("no affine part", &(ln_variant){.exponent = 2, .axis = -1}, "LayerNormalization");
    ln_case("bias without gamma", &(ln_variant){.exponent = 2, .beta = true, .axis = -1}, "LayerNormalization");
    /* must not rewrite */
    ln_case("Pow 3", &(ln_variant){.exponent = 3, .gamma_ndim = 1, .beta = true, .axis = -1},
            "ReduceMean Sub Pow ReduceMean Add Sqrt Div Mul Add");
    ln_case("eps not a constant", &(ln_variant){.exponent = 2, .eps_input = true, .gamma_ndim = 1, .axis = -1},
            "ReduceMean Sub Pow ReduceMean Add Sqrt Div Mul");
    ln_case("statistics over a middle axis", &(ln_variant){.exponent = 2, .gamma_ndim = 1, .axis = 1},
            "ReduceMean Sub Pow ReduceMean Add Sqrt Div Mul");
    ln_case("Sub read twice", &(ln_variant){.exponent = 2, .gamma_ndim = 1, .sub_read_twice = true, .axis = -1},
            "ReduceMean Sub Pow ReduceMean Add Sqrt Div Mul");
    /* gamma per row (the wrong axis): the normalization fuses, Mul and Add stay */
    ln_case("gamma on the wrong axis", &(ln_variant){.exponent = 2, .gamma_ndim = -1, .beta = true, .axis = -1},
            "LayerNormalization Mul Add");
}

/* ---- Pow's scalar exponents with their own loops (ops/binary.c), against libm's powf */
static void test_pow_exponents(void) {
    const float exps[] = {0.5f, 1.0f, 2.0f, 3.0f, 1.5f};
    enum { N = 37 };
    float x[N];
    fill(x, N, -4.0f, 4.0f, 11);
    x[0] = -0.0f, x[1] = -INFINITY, x[2] = INFINITY, x[3] = 0.0f;
    for (size_t e = 0; e < sizeof exps / sizeof *exps; e++) {
        check_set_case("Pow x^%g", (double)exps[e]);
        builder b;
        builder_init(&b);
        graph_input(&b, "x", 1, (int64_t[]){N});
        graph_output(&b, "y", 1, (int64_t[]){N});
        float_init(&b, "e", 0, NULL, 1, &exps[e]);
        node(&b, "Pow", "pow", "x", "e", "y");
        nn_model *m = load_opts(save(&b, "pow.onnx"), 0, NULL);
        nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {N}, .data = x}, out;
        if (m && CHECK(nn_predict(m, &in, 1, &out, 1) == NN_OK, "predict: %s", nn_last_error())) {
            const float *y = out.data;
            for (int i = 0; i < N; i++) {
                float want = powf(x[i], exps[e]);
                bool same = isnan(want) ? isnan(y[i]) : (y[i] == want || fabsf(y[i] - want) <= 2e-7f * fabsf(want));
                CHECK(same && signbit(y[i]) == signbit(want), "pow(%g, %g): expected %g, got %g", (double)x[i],
                      (double)exps[e], (double)want, (double)y[i]);
            }
            nn_tensor_release(&out);
        }
        nn_free(m);
        builder_free(&b);
    }
}

/* ---- fuse_gelu */
enum { G_D = 24 };

typedef struct gelu_variant {
    bool tanh_form;
    int order;        /* the outer product: 0 (x * a) * 0.5, 1 (x * 0.5) * a, 2 (a * 0.5) * x */
    bool mul_inverse; /* erf form: x * (1/sqrt 2) instead of x / sqrt 2 */
    bool pow_cube;    /* tanh form: Pow(x, 3) instead of x * (x * x) */
    float scale;      /* sqrt 2, or sqrt(2/pi) for tanh */
    float one;        /* the 1 added */
    float cubic;      /* tanh form's 0.044715 */
    bool f_read_twice;
    bool matmul;      /* x = MatMul(input, W) + bias: the Gelu then folds into a Gemm */
} gelu_variant;

static const char *gelu_model(builder *b, const gelu_variant *v) {
    builder_init(b);
    graph_input(b, "in", 2, (int64_t[]){-1, G_D});
    graph_output(b, "y", 2, (int64_t[]){-1, G_D});
    if (v->f_read_twice) graph_output(b, "f", 2, (int64_t[]){-1, G_D});
    const char *x = "in";
    if (v->matmul) {
        float w[G_D * G_D], bias[G_D];
        float_init(b, "W", 2, (int64_t[]){G_D, G_D}, G_D * G_D, fill(w, G_D * G_D, -0.3f, 0.3f, 5));
        float_init(b, "bias", 1, (int64_t[]){G_D}, G_D, fill(bias, G_D, -0.5f, 0.5f, 6));
        node(b, "MatMul", "mm", "in", "W", "p");
        node(b, "Add", "add_bias", "bias", "p", "x");
        x = "x";
    }
    float half = 0.5f, three = 3.0f;
    float_init(b, "scale", 0, NULL, 1, &v->scale);
    float_init(b, "one", 0, NULL, 1, &v->one);
    float_init(b, "half", 0, NULL, 1, &half);
    if (!v->tanh_form) {
        node(b, v->mul_inverse ? "Mul" : "Div", "arg", x, "scale", "u");
        node(b, "Erf", "erf", "u", NULL, "f");
    } else {
        float_init(b, "cubic", 0, NULL, 1, &v->cubic);
        if (v->pow_cube) {
            float_init(b, "three", 0, NULL, 1, &three);
            node(b, "Pow", "cube", x, "three", "x3");
        } else {
            node(b, "Mul", "sq", x, x, "x2");
            node(b, "Mul", "cube", x, "x2", "x3");
        }
        node(b, "Mul", "cubic_mul", "cubic", "x3", "k");
        node(b, "Add", "inner", x, "k", "s");
        node(b, "Mul", "arg", "scale", "s", "u");
        node(b, "Tanh", "tanh", "u", NULL, "f");
    }
    node(b, "Add", "plus_one", "one", "f", "a");
    if (v->order == 0) {
        node(b, "Mul", "mx", x, "a", "m");
        node(b, "Mul", "mhalf", "half", "m", "y");
    } else if (v->order == 1) {
        node(b, "Mul", "mhalf", x, "half", "h");
        node(b, "Mul", "mx", "h", "a", "y");
    } else {
        node(b, "Mul", "mhalf", "a", "half", "h");
        node(b, "Mul", "mx", x, "h", "y");
    }
    return save(b, "gelu.onnx");
}

static void gelu_case(const char *what, const gelu_variant *v, const char *passes, const char *want_ops) {
    check_set_case("fuse_gelu: %s", what);
    builder b;
    const char *path = gelu_model(&b, v);
    nn_model *m = load_opts(path, 1, passes);
    if (m) {
        CHECK_OPS(m, want_ops);
        const nn_node *n = find_op(m, v->matmul ? NN_OP_Gemm : NN_OP_Gelu);
        if (v->matmul && n)
            CHECK(n->has_epilogue && n->epilogue.act == (v->tanh_form ? NN_ACT_GELU_TANH : NN_ACT_GELU),
                  "Gemm epilogue: expected the GELU activation");
        else if (n)
            CHECK(((const nn_gelu_params *)n->params)->tanh == v->tanh_form, "Gelu approximate: expected %s",
                  v->tanh_form ? "tanh" : "none");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_fuse_gelu(void) {
    const float r2 = 1.41421356f, k = 0.79788456f;
    const char *only = "fuse_gelu";
    gelu_case("erf form", &(gelu_variant){.scale = r2, .one = 1, .order = 0}, only, "Gelu");
    gelu_case("erf form, x * 0.5 first", &(gelu_variant){.scale = r2, .one = 1, .order = 1}, only, "Gelu");
    gelu_case("erf form, times 1/sqrt 2", &(gelu_variant){.scale = 0.70710678f, .one = 1, .mul_inverse = true, .order = 2},
              only, "Gelu");
    gelu_case("tanh form", &(gelu_variant){.tanh_form = true, .scale = k, .one = 1, .cubic = 0.044715f}, only, "Gelu");
    gelu_case("tanh form with Pow",
              &(gelu_variant){.tanh_form = true, .pow_cube = true, .scale = k, .one = 1, .cubic = 0.044715f, .order = 1},
              only, "Gelu");
    gelu_case("MatMul + bias + GELU -> one Gemm", &(gelu_variant){.scale = r2, .one = 1, .matmul = true}, NULL, "Gemm");
    gelu_case("MatMul + bias + tanh GELU -> one Gemm",
              &(gelu_variant){.tanh_form = true, .scale = k, .one = 1, .cubic = 0.044715f, .matmul = true}, NULL,
              "Gemm");
    /* must not rewrite */
    gelu_case("x / 2", &(gelu_variant){.scale = 2.0f, .one = 1}, only, "Div Erf Add Mul Mul");
    gelu_case("2 + erf", &(gelu_variant){.scale = r2, .one = 2}, only, "Div Erf Add Mul Mul");
    gelu_case("Erf read twice", &(gelu_variant){.scale = r2, .one = 1, .f_read_twice = true}, only,
              "Div Erf Add Mul Mul");
    gelu_case("tanh form with 0.05", &(gelu_variant){.tanh_form = true, .scale = k, .one = 1, .cubic = 0.05f}, only,
              "Mul Mul Mul Add Mul Tanh Add Mul Mul");
}

/* ---- fuse_bias on a MatMul of a 3-D A: the bias (and the activation) in its epilogue */
static void nd_bias_case(const char *what, bool b_const, int bias_rows, const char *want_ops) {
    check_set_case("fuse_bias N-D: %s", what);
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 3, (int64_t[]){-1, 5, 16});
    if (!b_const) graph_input(&b, "W", 2, (int64_t[]){16, 8});
    graph_output(&b, "y", 3, (int64_t[]){-1, 5, 8});
    float w[16 * 8], bias[5 * 8];
    if (b_const) float_init(&b, "W", 2, (int64_t[]){16, 8}, 16 * 8, fill(w, 16 * 8, -0.5f, 0.5f, 21));
    if (bias_rows)
        float_init(&b, "bias", 2, (int64_t[]){bias_rows, 8}, bias_rows * 8, fill(bias, bias_rows * 8, -1, 1, 22));
    else
        float_init(&b, "bias", 1, (int64_t[]){8}, 8, fill(bias, 8, -1, 1, 22));
    node(&b, "MatMul", "mm", "x", "W", "p");
    node(&b, "Add", "add", "bias", "p", "q");
    node(&b, "Relu", "relu", "q", NULL, "y");
    const char *path = save(&b, "matmul_nd_bias.onnx");
    nn_model *m = load_opts(path, 1, NULL);
    if (m) {
        CHECK_OPS(m, want_ops);
        const nn_node *n = find_op(m, NN_OP_MatMul);
        if (n && !strcmp(want_ops, "MatMul"))
            CHECK(n->n_in == 3 && n->has_epilogue && n->epilogue.act == NN_ACT_RELU && n->epilogue.residual < 0,
                  "MatMul: expected the bias as input 2 and Relu in the epilogue");
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

static void test_matmul_nd_bias(void) {
    nd_bias_case("bias [N] + Relu", true, 0, "MatMul");
    nd_bias_case("bias [1, N] + Relu", true, 1, "MatMul");
    nd_bias_case("B not constant", false, 0, "MatMul Add");
    nd_bias_case("bias per row and column", true, 5, "MatMul Add");
}

/* ---- the GELU kernels against double-precision references */
static void test_gelu_accuracy(void) {
    double worst[2] = {0, 0};
    const double range[2] = {5.0, 5.0}, tol[2] = {3e-6, 3e-6};
    for (int form = 0; form < 2; form++) {
        for (int i = -20000; i <= 20000; i++) {
            float x = (float)(range[form] * i / 20000.0);
            double xd = x, want = form ? 0.5 * xd * (1.0 + tanh(sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd)))
                                       : 0.5 * xd * erfc(-xd / sqrt(2.0)); /* 1 + erf cancels */
            double got = form ? nn_gelu_tanh(x) : nn_gelu(x);
            double err = want != 0.0 ? fabs(got - want) / fabs(want) : fabs(got);
            if (err > worst[form]) worst[form] = err;
        }
        check_set_case("GELU %s form accuracy on [-%g, %g]", form ? "tanh" : "erf", range[form], range[form]);
        CHECK(worst[form] <= tol[form], "largest relative error: expected <= %g, got %g", tol[form], worst[form]);
    }
    printf("GELU largest relative error: erf form %.2g on [-5, 5], tanh form %.2g on [-5, 5]\n", worst[0], worst[1]);
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_fuse_layernorm();
    test_pow_exponents();
    test_fuse_gelu();
    test_matmul_nd_bias();
    test_gelu_accuracy();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", nn_test_dir);
    return check_summary();
}
