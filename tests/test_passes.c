/* The graph optimizer, pass by pass, on small models built here: each test
 * checks that the rewrite happened, that it did not happen where it must
 * not, and that the optimized model computes what the unoptimized one does.
 * Every model loaded also has its memory plan checked for overlapping live
 * buffers.  Reaches into the IR (engine/model.h): the test links the static
 * library. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/backend.h"
#include "../engine/model.h"
#include "../ops/fused_elementwise.h"
#include "../ops/registry.h"
#include "../passes/pass.h"
#include "check.h"
#include "nn.h"
#include "onnx_builder.h"

enum { BATCH = 2 };
/* optimized vs unoptimized outputs, relative L2 */
static const double REL_TOL = 1e-5;

/* ---- deterministic data */
static float uniform(uint32_t *seed, float lo, float hi) {
    *seed = *seed * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(*seed >> 8) / (float)(1u << 24);
}

static float *fill(float *buf, int n, float lo, float hi, uint32_t seed) {
    for (int i = 0; i < n; i++)
        buf[i] = uniform(&seed, lo, hi);
    return buf;
}

/* ---- loading and looking at the IR */
static nn_model *load_opts(const char *path, int optimize, const char *passes, const char *disable);

static nn_model *load(const char *path, const char *passes) { return load_opts(path, 1, passes, NULL); }

static int count_op(const nn_model *m, int op) {
    int n = 0;
    for (int i = 0; i < m->g.n_nodes; i++)
        n += m->g.nodes[i].op == op;
    return n;
}

static const char *op_name(int op) { return op >= 0 && nn_op_get(op) ? nn_op_get(op)->name : "?"; }

/* the node ops in order, "Conv Relu" */
static const char *ops_string(const nn_model *m) {
    static char s[1024];
    s[0] = 0;
    for (int i = 0; i < m->g.n_nodes; i++)
        snprintf(s + strlen(s), sizeof s - strlen(s), "%s%s", i ? " " : "", op_name(m->g.nodes[i].op));
    return s;
}

static void expect_ops(const nn_model *m, const char *want, int line) {
    const char *got = ops_string(m);
    CHECK_AT(line, !strcmp(got, want), "nodes: expected [%s], got [%s]", want, got);
}
#define CHECK_OPS(m, want) expect_ops(m, want, __LINE__)

static nn_node *find_op(const nn_model *m, int op) {
    for (int i = 0; i < m->g.n_nodes; i++)
        if (m->g.nodes[i].op == op) return &m->g.nodes[i];
    return NULL;
}

static int value_id(const nn_model *m, const char *name) {
    for (int v = 0; v < m->g.n_values; v++)
        if (m->g.values[v].name && !strcmp(m->g.values[v].name, name)) return v;
    return -1;
}

static const char *value_name(const nn_model *m, int v) { return v >= 0 ? m->g.values[v].name : "(none)"; }

static const char *input_name(const nn_model *m, const nn_node *n, int k) {
    return k < n->n_in ? value_name(m, n->in[k]) : "(absent)";
}

static const char *act_name(nn_act a) {
    static const char *names[] = {"NONE",         "RELU",       "CLIP", "LEAKY_RELU", "SIGMOID",
                                  "HARD_SIGMOID", "HARD_SWISH", "SILU", "TANH", "GELU", "GELU_TANH"};
    return (unsigned)a < sizeof names / sizeof *names ? names[a] : "?";
}

/* A fused node: epilogue with activation `act` and residual input `residual`
 * (a value name, NULL for none), `label` somewhere in its fused label. */
static void expect_epilogue(nn_model *m, const nn_node *n, nn_act act, const char *residual, const char *label,
                            int line) {
    if (!CHECK_AT(line, n != NULL, "fused node: expected one, got none")) return;
    if (!CHECK_AT(line, n->has_epilogue, "%s has_epilogue: expected true, got false", op_name(n->op))) return;
    CHECK_AT(line, n->epilogue.act == act, "%s epilogue act: expected %s, got %s", op_name(n->op), act_name(act),
             act_name(n->epilogue.act));
    if (residual) {
        int r = n->epilogue.residual;
        const char *got = r >= 0 && r < n->n_in ? value_name(m, n->in[r]) : "(none)";
        CHECK_AT(line, !strcmp(got, residual), "%s epilogue residual: expected input '%s', got '%s' (index %d)",
                 op_name(n->op), residual, got, r);
    } else {
        CHECK_AT(line, n->epilogue.residual < 0, "%s epilogue residual: expected none, got index %d", op_name(n->op),
                 n->epilogue.residual);
    }
    CHECK_AT(line, n->fused && strstr(n->fused, label), "%s fused label: expected to contain '%s', got '%s'",
             op_name(n->op), label, n->fused ? n->fused : "(null)");
}
#define CHECK_EPILOGUE(m, n, act, residual, label) expect_epilogue(m, n, act, residual, label, __LINE__)

/* An activation can only be fused when its op describes itself as one. */
static bool expect_activation_hook(int op, int line) {
    return CHECK_AT(line, nn_op_get(op)->as_activation != NULL,
                    "%s: expected an as_activation hook in its descriptor (ops/unary.c), got NULL: fusion cannot "
                    "happen, skipping the structure checks of this case",
                    op_name(op));
}
#define CHECK_ACTIVATION_HOOK(op) expect_activation_hook(op, __LINE__)

/* ---- the memory plan: every pair of distinct buffers live at the same time
 * lies apart, and everything fits in the arena */
static void check_plan(const nn_model *m) {
    if (m->dynamic) return; /* planned per run */
    const nn_graph *g = &m->g;
    const nn_plan *p = &m->plan;
    int *root = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    if (!root) return;
    for (int v = 0; v < g->n_values; v++)
        root[v] = nn_value_root(g, v, NULL);
    int bad = 0;
    for (int u = 0; u < g->n_values && bad < 5; u++) {
        if (p->offset[u] < 0) continue;
        int64_t ub = nn_tensor_elements(&g->values[u].t) * (int64_t)nn_dtype_size(g->values[u].t.dtype);
        if (!CHECK(p->offset[u] + ub <= (int64_t)p->arena_bytes,
                   "plan: '%s' [%lld, %lld) expected inside the arena of %zu bytes", g->values[u].name,
                   (long long)p->offset[u], (long long)(p->offset[u] + ub), p->arena_bytes))
            bad++;
        for (int v = u + 1; v < g->n_values && bad < 5; v++) {
            if (p->offset[v] < 0 || root[u] == root[v]) continue;
            bool live_together = p->first_use[u] <= p->last_use[v] && p->first_use[v] <= p->last_use[u];
            if (!live_together) continue;
            int64_t vb = nn_tensor_elements(&g->values[v].t) * (int64_t)nn_dtype_size(g->values[v].t.dtype);
            bool apart = p->offset[u] + ub <= p->offset[v] || p->offset[v] + vb <= p->offset[u];
            if (!CHECK(apart,
                       "plan: '%s' [%lld, %lld) live %d..%d and '%s' [%lld, %lld) live %d..%d: expected disjoint, "
                       "got overlapping",
                       g->values[u].name, (long long)p->offset[u], (long long)(p->offset[u] + ub), p->first_use[u],
                       p->last_use[u], g->values[v].name, (long long)p->offset[v], (long long)(p->offset[v] + vb),
                       p->first_use[v], p->last_use[v]))
                bad++;
        }
    }
    CHECK(p->lower_bound_bytes <= p->arena_bytes && p->arena_bytes <= p->naive_bytes,
          "plan sizes: expected lower bound <= arena <= naive, got %zu, %zu, %zu", p->lower_bound_bytes, p->arena_bytes,
          p->naive_bytes);
    free(root);
}

/* The batch load_opts binds, and runs whole: the passes see the shapes the
 * test case was written for, not a micro-batch's. */
static int load_batch = BATCH;

static nn_model *load_opts(const char *path, int optimize, const char *passes, const char *disable) {
    nn_options o = nn_options_default();
    o.batch = o.micro_batch = load_batch;
    o.threads = 1;
    o.optimize = optimize;
    o.passes = passes;
    o.disable_passes = disable;
    o.verify = 1;
    nn_model *m = NULL;
    nn_status st = nn_load(path, &o, &m);
    CHECK(st == NN_OK, "load (optimize %d, passes %s, disabled %s): expected OK, got %s: %s", optimize,
          passes ? passes : "default", disable ? disable : "none", nn_strerror(st), nn_last_error());
    if (m) check_plan(m);
    return m;
}

/* ---- running */
/* Seeded random inputs at the model's shapes; returns how many (data malloc'd). */
static int random_inputs(const nn_model *m, uint32_t seed, nn_tensor *in, int cap) {
    int n = nn_input_count(m);
    for (int i = 0; i < n && i < cap; i++) {
        const char *name;
        nn_input_info(m, i, &name, &in[i]);
        int64_t count = nn_tensor_elements(&in[i]);
        in[i].data = malloc(sizeof(float) * (size_t)count);
        fill(in[i].data, (int)count, -2.0f, 2.0f, seed + (uint32_t)i);
    }
    return n;
}

static void free_tensors(nn_tensor *t, int n, bool library_owned) {
    for (int i = 0; i < n; i++) {
        if (library_owned)
            nn_tensor_release(&t[i]);
        else
            free(t[i].data);
    }
}

static bool same_shape(const nn_tensor *a, const nn_tensor *b) {
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim);
}

enum { MAX_IO = 4 };

/* Predict with `opt` and with a reference on the same random input: every
 * output agrees within `tol`.  The reference is the unoptimized model, or,
 * with `ref_disable`, the optimized one without those passes. */
static void expect_outputs_close(const char *path, nn_model *opt, const char *ref_disable, double tol, int line) {
    nn_model *ref = ref_disable ? load_opts(path, 1, NULL, ref_disable) : load_opts(path, 0, NULL, NULL);
    if (!opt || !ref) {
        nn_free(ref);
        return;
    }
    nn_tensor in[MAX_IO], a[MAX_IO], b[MAX_IO];
    int n_in = random_inputs(opt, 7, in, MAX_IO), n_out = nn_output_count(opt);
    nn_status sa = nn_predict(opt, in, n_in, a, n_out), sb = NN_ERR_INTERNAL;
    char ref_name[128] = "unoptimized";
    if (ref_disable) snprintf(ref_name, sizeof ref_name, "optimized without %s", ref_disable);
    CHECK_AT(line, sa == NN_OK, "predict (optimized): expected OK, got %s: %s", nn_strerror(sa), nn_last_error());
    if (sa == NN_OK) {
        sb = nn_predict(ref, in, n_in, b, n_out);
        CHECK_AT(line, sb == NN_OK, "predict (%s): expected OK, got %s: %s", ref_name, nn_strerror(sb),
                 nn_last_error());
    }
    for (int k = 0; sa == NN_OK && sb == NN_OK && k < n_out; k++) {
        const char *name;
        nn_tensor info;
        nn_output_info(opt, k, &name, &info);
        if (!CHECK_AT(line, same_shape(&a[k], &b[k]), "output '%s': shapes differ between optimized and %s", name,
                      ref_name))
            continue;
        char what[300];
        snprintf(what, sizeof what, "output '%s' optimized vs %s", name, ref_name);
        check_rel_l2_at(what, a[k].data, b[k].data, nn_tensor_elements(&b[k]), tol, __FILE__, line);
    }
    if (sa == NN_OK) free_tensors(a, n_out, true);
    if (sa == NN_OK && sb == NN_OK) free_tensors(b, n_out, true);
    free_tensors(in, n_in, false);
    nn_free(ref);
}
#define CHECK_SAME_OUTPUTS(path, m) expect_outputs_close(path, m, NULL, REL_TOL, __LINE__)

/* ---- model pieces */
static const int64_t D1[1] = {1};

/* Conv `name`: in (cin channels) -> out (cout), k x k kernel, pads (top,
 * left, bottom, right), `group` groups, W "<name>_W", B "<name>_B" */
static Onnx__NodeProto *add_conv_k(builder *b, const char *name, const char *in, const char *out, int cin, int cout,
                                   bool bias, uint32_t seed, int k, const int64_t pads[4], int group) {
    int nw = cout * cin / group * k * k;
    float *w = malloc(sizeof(float) * (size_t)nw), bv[64];
    const char *wn = builder_str(b, "%s_W", name), *bn = builder_str(b, "%s_B", name);
    float_init(b, wn, 4, (int64_t[]){cout, cin / group, k, k}, nw, fill(w, nw, -0.5f, 0.5f, seed));
    if (bias) float_init(b, bn, 1, (int64_t[]){cout}, cout, fill(bv, cout, -0.5f, 0.5f, seed + 1));
    free(w);
    const char *ins[3] = {in, wn, bn};
    Onnx__NodeProto *n = node_io(b, "Conv", name, bias ? 3 : 2, ins, 1, &out);
    attr_ints(b, n, "kernel_shape", 2, (int64_t[]){k, k});
    attr_ints(b, n, "pads", 4, pads);
    if (group != 1) attr_int(b, n, "group", group);
    return n;
}

/* Conv `name`: 3x3 kernel, pad 1 */
static void add_conv(builder *b, const char *name, const char *in, const char *out, int cin, int cout, bool bias,
                     uint32_t seed) {
    add_conv_k(b, name, in, out, cin, cout, bias, seed, 3, (int64_t[]){1, 1, 1, 1}, 1);
}

typedef struct bn_stats {
    float scale[16], bias[16], mean[16], var[16];
} bn_stats;

/* BatchNormalization `name` over `c` channels with epsilon `eps`; small
 * variances so that epsilon matters */
static void add_bn(builder *b, const char *name, const char *in, const char *out, int c, float eps, uint32_t seed,
                   bn_stats *s) {
    fill(s->scale, c, 0.5f, 1.5f, seed);
    fill(s->bias, c, -0.5f, 0.5f, seed + 1);
    fill(s->mean, c, -0.5f, 0.5f, seed + 2);
    fill(s->var, c, 0.05f, 0.5f, seed + 3);
    const char *names[4] = {builder_str(b, "%s_scale", name), builder_str(b, "%s_bias", name),
                            builder_str(b, "%s_mean", name), builder_str(b, "%s_var", name)};
    const float *data[4] = {s->scale, s->bias, s->mean, s->var};
    for (int i = 0; i < 4; i++)
        float_init(b, names[i], 1, (int64_t[]){c}, c, data[i]);
    const char *ins[5] = {in, names[0], names[1], names[2], names[3]};
    Onnx__NodeProto *n = node_io(b, "BatchNormalization", name, 5, ins, 1, &out);
    attr_float(b, n, "epsilon", eps);
}

/* ---- fold_constants */
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
    test_fuse_elementwise_bn();
    test_fuse_elementwise_long();
    test_fuse_elementwise_muladd();
    test_fuse_elementwise_epilogue();
    test_fuse_elementwise_stops();
    test_fuse_prologue();
    test_fuse_prologue_stops();
    test_views();
    test_plan_chain();
    test_plan_branches();
    test_verifier();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", nn_test_dir);
    return check_summary();
}
