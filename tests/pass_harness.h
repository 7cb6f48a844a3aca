/* Helpers shared by the optimizer's tests (test_passes.c,
 * test_fuse_elementwise.c): deterministic data, loading with chosen passes,
 * looking at the IR, the memory-plan check, and outputs compared with the
 * unoptimized model's.  Reaches into the IR (engine/model.h): the tests link
 * the static library. */
#ifndef NN_TEST_PASS_HARNESS_H
#define NN_TEST_PASS_HARNESS_H

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
static inline float uniform(uint32_t *seed, float lo, float hi) {
    *seed = *seed * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(*seed >> 8) / (float)(1u << 24);
}

static inline float *fill(float *buf, int n, float lo, float hi, uint32_t seed) {
    for (int i = 0; i < n; i++)
        buf[i] = uniform(&seed, lo, hi);
    return buf;
}

/* ---- loading and looking at the IR */
static inline nn_model *load_opts(const char *path, int optimize, const char *passes, const char *disable);

static inline nn_model *load(const char *path, const char *passes) { return load_opts(path, 1, passes, NULL); }

static inline int count_op(const nn_model *m, int op) {
    int n = 0;
    for (int i = 0; i < m->g.n_nodes; i++)
        n += m->g.nodes[i].op == op;
    return n;
}

static inline const char *op_name(int op) { return op >= 0 && nn_op_get(op) ? nn_op_get(op)->name : "?"; }

/* the node ops in order, "Conv Relu" */
static inline const char *ops_string(const nn_model *m) {
    static char s[1024];
    s[0] = 0;
    for (int i = 0; i < m->g.n_nodes; i++)
        snprintf(s + strlen(s), sizeof s - strlen(s), "%s%s", i ? " " : "", op_name(m->g.nodes[i].op));
    return s;
}

static inline void expect_ops(const nn_model *m, const char *want, int line) {
    const char *got = ops_string(m);
    CHECK_AT(line, !strcmp(got, want), "nodes: expected [%s], got [%s]", want, got);
}
#define CHECK_OPS(m, want) expect_ops(m, want, __LINE__)

static inline nn_node *find_op(const nn_model *m, int op) {
    for (int i = 0; i < m->g.n_nodes; i++)
        if (m->g.nodes[i].op == op) return &m->g.nodes[i];
    return NULL;
}

static inline int value_id(const nn_model *m, const char *name) {
    for (int v = 0; v < m->g.n_values; v++)
        if (m->g.values[v].name && !strcmp(m->g.values[v].name, name)) return v;
    return -1;
}

static inline const char *value_name(const nn_model *m, int v) { return v >= 0 ? m->g.values[v].name : "(none)"; }

static inline const char *input_name(const nn_model *m, const nn_node *n, int k) {
    return k < n->n_in ? value_name(m, n->in[k]) : "(absent)";
}

static inline const char *act_name(nn_act a) {
    static const char *names[] = {"NONE",         "RELU",       "CLIP", "LEAKY_RELU", "SIGMOID",
                                  "HARD_SIGMOID", "HARD_SWISH", "SILU", "TANH", "GELU", "GELU_TANH"};
    return (unsigned)a < sizeof names / sizeof *names ? names[a] : "?";
}

/* A fused node: epilogue with activation `act` and residual input `residual`
 * (a value name, NULL for none), `label` somewhere in its fused label. */
static inline void expect_epilogue(nn_model *m, const nn_node *n, nn_act act, const char *residual, const char *label,
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
static inline bool expect_activation_hook(int op, int line) {
    return CHECK_AT(line, nn_op_get(op)->as_activation != NULL,
                    "%s: expected an as_activation hook in its descriptor (ops/unary.c), got NULL: fusion cannot "
                    "happen, skipping the structure checks of this case",
                    op_name(op));
}
#define CHECK_ACTIVATION_HOOK(op) expect_activation_hook(op, __LINE__)

/* ---- the memory plan: every pair of distinct buffers live at the same time
 * lies apart, and everything fits in the arena */
static inline void check_plan(const nn_model *m) {
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
static int load_batch __attribute__((unused)) = BATCH;

static inline nn_model *load_opts(const char *path, int optimize, const char *passes, const char *disable) {
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
/* The inputs random_inputs makes lie in [-bound, bound]. */
static float random_input_bound __attribute__((unused)) = 2.0f;

/* Seeded random inputs at the model's shapes; returns how many (data malloc'd). */
static inline int random_inputs(const nn_model *m, uint32_t seed, nn_tensor *in, int cap) {
    int n = nn_input_count(m);
    for (int i = 0; i < n && i < cap; i++) {
        const char *name;
        nn_input_info(m, i, &name, &in[i]);
        int64_t count = nn_tensor_elements(&in[i]);
        in[i].data = malloc(sizeof(float) * (size_t)count);
        fill(in[i].data, (int)count, -random_input_bound, random_input_bound, seed + (uint32_t)i);
    }
    return n;
}

static inline void free_tensors(nn_tensor *t, int n, bool library_owned) {
    for (int i = 0; i < n; i++) {
        if (library_owned)
            nn_tensor_release(&t[i]);
        else
            free(t[i].data);
    }
}

static inline bool same_shape(const nn_tensor *a, const nn_tensor *b) {
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim);
}

enum { MAX_IO = 4 };

/* Predict with `opt` and with a reference on the same random input: every
 * output agrees within `tol`.  The reference is the unoptimized model, or,
 * with `ref_disable`, the optimized one without those passes. */
static inline void expect_outputs_close(const char *path, nn_model *opt, const char *ref_disable, double tol, int line) {
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
static inline Onnx__NodeProto *add_conv_k(builder *b, const char *name, const char *in, const char *out, int cin, int cout,
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
static inline void add_conv(builder *b, const char *name, const char *in, const char *out, int cin, int cout, bool bias,
                     uint32_t seed) {
    add_conv_k(b, name, in, out, cin, cout, bias, seed, 3, (int64_t[]){1, 1, 1, 1}, 1);
}

typedef struct bn_stats {
    float scale[16], bias[16], mean[16], var[16];
} bn_stats;

/* BatchNormalization `name` over `c` channels with epsilon `eps`; small
 * variances so that epsilon matters */
static inline void add_bn(builder *b, const char *name, const char *in, const char *out, int c, float eps, uint32_t seed,
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

#endif
