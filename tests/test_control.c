/* Control flow (If, Loop, Scan): nested bodies reading values from two
 * scopes out, the plan cache round trip of nested plans, and the bounds:
 * Loop iterations, body nesting depth, body outputs that contradict their
 * declared types.  Expected values are computed here in plain C. */
#include <stdlib.h>
#include <string.h>

#include "../engine/nn.h"
#include "check.h"
#include "onnx_builder.h"

enum { T_FLOAT = 1, T_BOOL = 9, T_INT64 = 7 };

/* A typed value info (the builder's are float). */
static Onnx__ValueInfoProto *typed(const char *name, int elem, int ndim, const int64_t *dims) {
    Onnx__ValueInfoProto *vi = value_info(name, ndim, dims);
    vi->type->tensor_type->elem_type = elem;
    return vi;
}

static void body_input(builder *b, const char *name, int elem, int ndim, const int64_t *dims) {
    b->inputs[b->graph.n_input++] = typed(name, elem, ndim, dims);
}

static void body_output(builder *b, const char *name, int elem, int ndim, const int64_t *dims) {
    b->outputs[b->graph.n_output++] = typed(name, elem, ndim, dims);
}

static void attr_graph(builder *b, Onnx__NodeProto *n, const char *name, builder *body) {
    Onnx__AttributeProto *a = attr_new(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    a->g = &body->graph;
}

static const int64_t two[1] = {2};

/* y = Loop(M = 4, x):  iteration i adds w while i < limit (= 2), then
 * multiplies by w; the If inside reads `limit` and `w`, two scopes out.
 * Outputs: the final x and every iteration's value, stacked. */
static const char *nested_model(const char *file) {
    builder top, loop, then_b, else_b;
    builder_init(&top);
    builder_init(&loop);
    builder_init(&then_b);
    builder_init(&else_b);
    loop.graph.name = "loop_body";
    then_b.graph.name = "then";
    else_b.graph.name = "else";
    graph_input(&top, "x", 1, two);
    float w[2] = {1.5f, -2.0f};
    float_init(&top, "w", 1, two, 2, w);
    int64_t m = 4, limit = 2;
    int64_init(&top, "M", 0, NULL, 1, &m);
    int64_init(&top, "limit", 0, NULL, 1, &limit);
    const char *lin[] = {"M", "", "x"}, *lout[] = {"x_final", "x_all"};
    Onnx__NodeProto *ln = node_io(&top, "Loop", "the_loop", 3, lin, 2, lout);
    attr_graph(&top, ln, "body", &loop);
    graph_output(&top, "x_final", 1, two);
    int64_t all[2] = {4, 2};
    graph_output(&top, "x_all", 2, all);

    body_input(&loop, "i", T_INT64, 0, NULL);
    body_input(&loop, "c", T_BOOL, 0, NULL);
    body_input(&loop, "x_in", T_FLOAT, 1, two);
    node(&loop, "Less", "early", "i", "limit", "is_early");
    const char *iout[] = {"y"};
    const char *iin[] = {"is_early"};
    Onnx__NodeProto *in = node_io(&loop, "If", "the_if", 1, iin, 1, iout);
    attr_graph(&loop, in, "then_branch", &then_b);
    attr_graph(&loop, in, "else_branch", &else_b);
    node(&loop, "Identity", "keep", "c", NULL, "c_out");
    node(&loop, "Identity", "scan", "y", NULL, "y_scan");
    body_output(&loop, "c_out", T_BOOL, 0, NULL);
    body_output(&loop, "y", T_FLOAT, 1, two);
    body_output(&loop, "y_scan", T_FLOAT, 1, two);

    node(&then_b, "Add", "add", "x_in", "w", "t");
    body_output(&then_b, "t", T_FLOAT, 1, two);
    node(&else_b, "Mul", "mul", "x_in", "w", "e");
    body_output(&else_b, "e", T_FLOAT, 1, two);
    const char *path = save(&top, file);
    builder_free(&else_b);
    builder_free(&then_b);
    builder_free(&loop);
    builder_free(&top);
    return path;
}

static void check_nested(nn_model *m, const char *what) {
    check_set_case("%s", what);
    float x[2] = {0.25f, 3.0f}, w[2] = {1.5f, -2.0f}, want_all[8], want[2] = {x[0], x[1]};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 2; k++)
            want_all[i * 2 + k] = want[k] = i < 2 ? want[k] + w[k] : want[k] * w[k];
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {2}, .data = x}, out[2];
    nn_status st = nn_predict(m, &in, 1, out, 2);
    if (!CHECK(st == NN_OK, "predict: %s", nn_last_error())) return;
    CHECK(out[0].ndim == 1 && out[0].dims[0] == 2, "final value has rank %d", out[0].ndim);
    CHECK(out[1].ndim == 2 && out[1].dims[0] == 4 && out[1].dims[1] == 2, "scan output is %lldx%lld",
          (long long)out[1].dims[0], (long long)out[1].dims[1]);
    CHECK_CLOSE("final", (float *)out[0].data, want, 2, 1e-6, 1e-6);
    CHECK_CLOSE("all", (float *)out[1].data, want_all, 8, 1e-6, 1e-6);
    nn_tensor_release(&out[0]);
    nn_tensor_release(&out[1]);
    check_set_case("%s", "");
}

static void test_nested_and_cache(void) {
    const char *path = nested_model("nested.onnx");
    char dir[300];
    snprintf(dir, sizeof dir, "%s/cache", nn_test_dir);
    nn_options opt = nn_options_default();
    opt.cache_dir = dir;
    opt.threads = 1;
    nn_model *m = NULL;
    nn_model_stats s;
    if (!CHECK(nn_load(path, &opt, &m) == NN_OK, "load: %s", nn_last_error())) return;
    nn_model_get_stats(m, &s);
    CHECK(s.cache == NN_CACHE_MISS && !s.cache_warning, "first load: cache state %d, warning %s", (int)s.cache,
          s.cache_warning ? s.cache_warning : "none");
    check_nested(m, "Loop > If, built");
    nn_free(m);
    m = NULL;
    if (!CHECK(nn_load(path, &opt, &m) == NN_OK, "load again: %s", nn_last_error())) return;
    nn_model_get_stats(m, &s);
    CHECK(s.cache == NN_CACHE_HIT, "second load is not a hit: %s", s.cache_warning ? s.cache_warning : "no warning");
    check_nested(m, "Loop > If, from the cache");
    nn_free(m);
    opt.cache = 0;
    opt.optimize = 0;
    if (CHECK(nn_load(path, &opt, &m) == NN_OK, "load unoptimized: %s", nn_last_error()))
        check_nested(m, "Loop > If, unoptimized");
    nn_free(m);
}

/* Loop(M = 2^62, cond absent) with a trivial body: stopped by NN_LOOP_MAX. */
static void test_loop_bound(void) {
    builder top, body;
    builder_init(&top);
    builder_init(&body);
    graph_input(&top, "x", 1, two);
    int64_t m = (int64_t)1 << 62;
    int64_init(&top, "M", 0, NULL, 1, &m);
    const char *lin[] = {"M", "", "x"}, *lout[] = {"y"};
    Onnx__NodeProto *ln = node_io(&top, "Loop", "endless", 3, lin, 1, lout);
    attr_graph(&top, ln, "body", &body);
    graph_output(&top, "y", 1, two);
    body_input(&body, "i", T_INT64, 0, NULL);
    body_input(&body, "c", T_BOOL, 0, NULL);
    body_input(&body, "x_in", T_FLOAT, 1, two);
    node(&body, "Identity", "keep", "c", NULL, "c_out");
    node(&body, "Neg", "neg", "x_in", NULL, "x_out");
    body_output(&body, "c_out", T_BOOL, 0, NULL);
    body_output(&body, "x_out", T_FLOAT, 1, two);
    const char *path = save(&top, "endless.onnx");
    builder_free(&body);
    builder_free(&top);

    nn_options opt = nn_options_default();
    opt.cache = 0;
    nn_model *mdl = NULL;
    if (!CHECK(nn_load(path, &opt, &mdl) == NN_OK, "load: %s", nn_last_error())) return;
    setenv("NN_LOOP_MAX", "101", 1);
    float x[2] = {1, 2};
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {2}, .data = x}, out;
    nn_status st = nn_predict(mdl, &in, 1, &out, 1);
    CHECK(st == NN_ERR_UNSUPPORTED, "M = 2^62 gave status %d", (int)st);
    const char *e = nn_last_error();
    CHECK(strstr(e, "endless") && strstr(e, "101 iterations") && strstr(e, "NN_LOOP_MAX"),
          "error does not name the node and the bound: %s", e);
    unsetenv("NN_LOOP_MAX");
    nn_free(mdl);
}

/* If whose then_branch declares int64 but returns float, and one whose
 * else_branch returns a rank other than declared. */
static void test_declared_types(void) {
    for (int which = 0; which < 2; which++) {
        builder top, then_b, else_b;
        builder_init(&top);
        builder_init(&then_b);
        builder_init(&else_b);
        then_b.graph.name = "then";
        else_b.graph.name = "else";
        graph_input(&top, "x", 1, two);
        top.inputs[top.graph.n_input++] = typed("c", T_BOOL, 0, NULL);
        const char *iin[] = {"c"}, *iout[] = {"y"};
        Onnx__NodeProto *n = node_io(&top, "If", "typed_if", 1, iin, 1, iout);
        attr_graph(&top, n, "then_branch", &then_b);
        attr_graph(&top, n, "else_branch", &else_b);
        graph_output(&top, "y", 1, two);
        node(&then_b, "Identity", "t", "x", NULL, "t_out");
        body_output(&then_b, "t_out", which == 0 ? T_INT64 : T_FLOAT, 1, two);
        int64_t one[2] = {1, 2};
        node(&else_b, "Unsqueeze", "e", "x", "axes", "e_out");
        int64_t zero = 0;
        int64_init(&else_b, "axes", 1, one, 1, &zero);
        body_output(&else_b, "e_out", T_FLOAT, 1, two);
        const char *path = save(&top, "typed.onnx");
        builder_free(&else_b);
        builder_free(&then_b);
        builder_free(&top);
        nn_options opt = nn_options_default();
        opt.cache = 0;
        nn_model *m = NULL;
        if (!CHECK(nn_load(path, &opt, &m) == NN_OK, "load: %s", nn_last_error())) continue;
        float x[2] = {1, 2};
        uint8_t c = which == 0;
        nn_tensor in[2] = {{.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {2}, .data = x},
                           {.dtype = NN_DTYPE_BOOL, .ndim = 0, .data = &c}};
        nn_tensor out;
        nn_status st = nn_predict(m, in, 2, &out, 1);
        const char *e = nn_last_error();
        CHECK(st == NN_ERR_SHAPE, "branch %d: status %d", which, (int)st);
        CHECK(strstr(e, "typed_if") && strstr(e, "declared") && strstr(e, which == 0 ? "'then'" : "'else'"),
              "branch %d: error does not name the node, body and type: %s", which, e);
        nn_free(m);
    }
}

/* 17 Ifs, each in the previous one's then_branch: one more than allowed. */
static void test_depth(void) {
    enum { LEVELS = 17 };
    builder *b = calloc(LEVELS + 1, sizeof *b);
    if (!b) return;
    for (int l = 0; l <= LEVELS; l++)
        builder_init(&b[l]);
    graph_input(&b[0], "x", 1, two);
    b[0].inputs[b[0].graph.n_input++] = typed("c", T_BOOL, 0, NULL);
    for (int l = 0; l <= LEVELS; l++) {
        char *out = builder_str(&b[l], "y%d", l);
        if (l == LEVELS) {
            node(&b[l], "Identity", "leaf", "x", NULL, out);
        } else {
            const char *iin[] = {"c"}, *iout[] = {out};
            Onnx__NodeProto *n = node_io(&b[l], "If", builder_str(&b[l], "if%d", l), 1, iin, 1, iout);
            attr_graph(&b[l], n, "then_branch", &b[l + 1]);
            attr_graph(&b[l], n, "else_branch", &b[l + 1]);
            if (l) b[l + 1].graph.name = builder_str(&b[l + 1], "level%d", l + 1);
        }
        if (l)
            body_output(&b[l], out, T_FLOAT, 1, two);
        else
            graph_output(&b[l], out, 1, two);
    }
    const char *path = save(&b[0], "deep.onnx");
    for (int l = LEVELS; l >= 0; l--)
        builder_free(&b[l]);
    free(b);
    nn_options opt = nn_options_default();
    opt.cache = 0;
    nn_model *m = NULL;
    nn_status st = nn_load(path, &opt, &m);
    CHECK(st == NN_ERR_UNSUPPORTED && strstr(nn_last_error(), "nest more than 16 deep"),
          "17 nested bodies: status %d, %s", (int)st, nn_last_error());
    nn_free(m);
}

/* A branch reading a batched input: the model binds the batch at load but,
 * being dynamic, takes any at run time; so must the branch. */
static void test_batched_capture(void) {
    builder top, then_b, else_b;
    builder_init(&top);
    builder_init(&then_b);
    builder_init(&else_b);
    const int64_t nx2[2] = {-1, 2};
    graph_input(&top, "x", 2, nx2);
    top.inputs[top.graph.n_input++] = typed("c", T_BOOL, 0, NULL);
    const char *iin[] = {"c"}, *iout[] = {"y"};
    Onnx__NodeProto *n = node_io(&top, "If", "batched_if", 1, iin, 1, iout);
    attr_graph(&top, n, "then_branch", &then_b);
    attr_graph(&top, n, "else_branch", &else_b);
    graph_output(&top, "y", 2, nx2);
    node(&then_b, "Neg", "neg", "x", NULL, "t");
    body_output(&then_b, "t", T_FLOAT, 2, nx2);
    node(&else_b, "Identity", "id", "x", NULL, "e");
    body_output(&else_b, "e", T_FLOAT, 2, nx2);
    const char *path = save(&top, "batched_if.onnx");
    builder_free(&else_b);
    builder_free(&then_b);
    builder_free(&top);
    nn_options opt = nn_options_default();
    opt.cache = 0;
    nn_model *m = NULL;
    if (!CHECK(nn_load(path, &opt, &m) == NN_OK, "load: %s", nn_last_error())) return;
    float x[6] = {1, -2, 3, -4, 5, -6}, want[6];
    for (int i = 0; i < 6; i++)
        want[i] = -x[i];
    uint8_t c = 1;
    nn_tensor in[2] = {{.dtype = NN_DTYPE_FLOAT, .ndim = 2, .dims = {3, 2}, .data = x},
                       {.dtype = NN_DTYPE_BOOL, .ndim = 0, .data = &c}};
    nn_tensor out;
    if (CHECK(nn_predict(m, in, 2, &out, 1) == NN_OK, "3 samples through a model loaded for 1: %s", nn_last_error())) {
        CHECK(out.ndim == 2 && out.dims[0] == 3 && out.dims[1] == 2, "output is %lldx%lld", (long long)out.dims[0],
              (long long)out.dims[1]);
        CHECK_CLOSE("then branch", (float *)out.data, want, 6, 0, 0);
        nn_tensor_release(&out);
    }
    nn_free(m);
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_nested_and_cache();
    test_loop_bound();
    test_declared_types();
    test_depth();
    test_batched_capture();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", nn_test_dir);
    return check_summary();
}
