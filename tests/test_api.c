/* Library behaviour on good and bad models, built here with protobuf-c:
 * validation errors name what is wrong, batching splits and gathers (also
 * over micro-batch lanes),
 * concurrent predictions on one model are safe. */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ops/par.h"
#include "../ops/registry.h"
#include "check.h"
#include "nn.h"
#include "onnx_builder.h"

/* y = Relu(x * w + bias), x: [N, 4] */
static const int64_t dims_n4[2] = {-1, 4}, dims_4[1] = {4};
static float w_vals[4] = {1, -2, 3, -4}, bias_vals[4] = {0.5f, 0.5f, -0.5f, 0.25f};

static void small_model(builder *b) {
    builder_init(b);
    b->inputs[b->graph.n_input++] = value_info("x", 2, dims_n4);
    b->outputs[b->graph.n_output++] = value_info("y", 2, dims_n4);
    float_init(b, "w", 1, dims_4, 4, w_vals);
    float_init(b, "bias", 1, dims_4, 4, bias_vals);
    node(b, "Mul", "mul", "x", "w", "t0");
    node(b, "Add", "add", "t0", "bias", "t1");
    node(b, "Relu", "relu", "t1", NULL, "y");
}

static float reference(float x, int j) {
    float v = x * w_vals[j] + bias_vals[j];
    return v > 0 ? v : 0;
}

/* expect loading `path` to fail with `st` and a message containing `needle` */
static void expect_load_error(const char *path, nn_status st, const char *needle) {
    nn_model *m = (nn_model *)1;
    nn_status got = nn_load(path, NULL, &m);
    CHECK(got == st, "%s: status %s, expected %s (%s)", path, nn_strerror(got), nn_strerror(st), nn_last_error());
    CHECK(m == NULL, "%s: model pointer not cleared on failure", path);
    CHECK(strstr(nn_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", path, nn_last_error(), needle);
    CHECK(strchr(nn_last_error(), '\n') == NULL, "message is not one line: '%s'", nn_last_error());
}

static void test_bad_files(void) {
    check_set_case("test_bad_files");
    char path[256];
    snprintf(path, sizeof path, "%s/garbage.onnx", nn_test_dir);
    write_bytes(path, "\xff\xff\xff\xff this is not protobuf", 26);
    expect_load_error(path, NN_ERR_PARSE, "not a valid ONNX");
    snprintf(path, sizeof path, "%s/empty.onnx", nn_test_dir);
    write_bytes(path, "", 0);
    expect_load_error(path, NN_ERR_PARSE, "empty file");
    expect_load_error("/nonexistent/model.onnx", NN_ERR_IO, "cannot open");

    builder b;
    small_model(&b);
    const char *good = save(&b, "good.onnx");
    /* truncate a valid model at every 7th byte: never a crash, always an error */
    FILE *f = fopen(good, "rb");
    uint8_t buf[4096];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int truncated_ok = 0, tried = 0;
    for (size_t cut = 1; cut < len; cut += 7) {
        snprintf(path, sizeof path, "%s/cut.onnx", nn_test_dir);
        write_bytes(path, buf, cut);
        nn_model *m = NULL;
        tried++;
        if (nn_load(path, NULL, &m) != NN_OK && m == NULL && nn_last_error()[0]) truncated_ok++;
        nn_free(m);
    }
    CHECK(truncated_ok == tried, "truncated models: %d of %d rejected", truncated_ok, tried);
    builder_free(&b);
}

static void test_invalid_graphs(void) {
    check_set_case("test_invalid_graphs");
    builder b;
    small_model(&b);
    /* a real ONNX operator (opset 20) the engine does not implement */
    b.nodes[2]->op_type = "ImageDecoder";
    b.nodes[2]->name = "decode_3";
    expect_load_error(save(&b, "unsupported.onnx"), NN_ERR_UNSUPPORTED,
                      "unsupported operator 'ImageDecoder' at node 'decode_3'");
    builder_free(&b);

    small_model(&b);
    b.nodes[1]->input[0] = "nowhere";
    expect_load_error(save(&b, "dangling.onnx"), NN_ERR_INVALID, "'nowhere' is produced by no node");
    builder_free(&b);

    small_model(&b);
    b.nodes[1]->output[0] = "t0"; /* produced twice */
    expect_load_error(save(&b, "twice.onnx"), NN_ERR_INVALID, "produced more than once");
    builder_free(&b);

    small_model(&b);
    b.nodes[0]->input[0] = "t1"; /* mul reads add's output: a cycle */
    b.nodes[0]->input[1] = "w";
    expect_load_error(save(&b, "cycle.onnx"), NN_ERR_INVALID, "cycle");
    builder_free(&b);

    small_model(&b);
    b.inits[0]->n_float_data = 3; /* dims say 4 */
    expect_load_error(save(&b, "short_init.onnx"), NN_ERR_INVALID, "initializer 'w' holds 3 values, dims need 4");
    builder_free(&b);

    small_model(&b);
    static const int64_t negative[1] = {-4};
    b.inits[0]->dims = (int64_t *)negative;
    expect_load_error(save(&b, "negative.onnx"), NN_ERR_INVALID, "negative or overflowing dims");
    builder_free(&b);

    small_model(&b);
    static const int64_t huge[3] = {1ll << 40, 1ll << 40, 1ll << 40};
    b.inits[0]->dims = (int64_t *)huge;
    b.inits[0]->n_dims = 3;
    expect_load_error(save(&b, "overflow.onnx"), NN_ERR_INVALID, "negative or overflowing dims");
    builder_free(&b);

    /* external data may not leave the model's folder */
    small_model(&b);
    Onnx__StringStringEntryProto loc;
    onnx__string_string_entry_proto__init(&loc);
    loc.key = "location";
    loc.value = "../../etc/passwd";
    Onnx__StringStringEntryProto *entries[1] = {&loc};
    b.inits[0]->n_float_data = 0;
    b.inits[0]->has_data_location = 1;
    b.inits[0]->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    b.inits[0]->n_external_data = 1;
    b.inits[0]->external_data = entries;
    expect_load_error(save(&b, "escape.onnx"), NN_ERR_INVALID, "leaves the model's folder");
    loc.value = "/etc/passwd";
    expect_load_error(save(&b, "absolute.onnx"), NN_ERR_INVALID, "leaves the model's folder");
    /* and inside the folder it is read */
    char path[256];
    snprintf(path, sizeof path, "%s/w.bin", nn_test_dir);
    write_bytes(path, w_vals, sizeof w_vals);
    loc.value = "w.bin";
    nn_model *m = NULL;
    CHECK(nn_load(save(&b, "external.onnx"), NULL, &m) == NN_OK, "external data in folder: %s", nn_last_error());
    nn_free(m);
    builder_free(&b);

    /* an attribute of the wrong type */
    small_model(&b);
    b.nodes[2]->op_type = "LeakyRelu";
    Onnx__AttributeProto alpha, *attrs[1] = {&alpha};
    onnx__attribute_proto__init(&alpha);
    alpha.name = "alpha";
    alpha.has_type = 1;
    alpha.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    alpha.has_s = 1;
    alpha.s.len = 1;
    alpha.s.data = (uint8_t *)"x";
    b.nodes[2]->n_attribute = 1;
    b.nodes[2]->attribute = attrs;
    expect_load_error(save(&b, "attr_type.onnx"), NN_ERR_INVALID,
                      "node 'relu' (LeakyRelu): attribute 'alpha' must be of type float");
    b.nodes[2]->n_attribute = 0;
    builder_free(&b);

    /* shapes that cannot broadcast */
    small_model(&b);
    static const int64_t dims_3[1] = {3};
    b.inits[0]->dims = (int64_t *)dims_3;
    b.inits[0]->n_float_data = 3;
    expect_load_error(save(&b, "broadcast.onnx"), NN_ERR_SHAPE, "node 'mul' (Mul)");
    builder_free(&b);
}

static void test_batching(void) {
    check_set_case("test_batching");
    builder b;
    small_model(&b);
    const char *path = save(&b, "batching.onnx");
    nn_options opt = nn_options_default();
    opt.batch = 2;
    nn_model *m;
    CHECK(nn_load(path, &opt, &m) == NN_OK, "load: %s", nn_last_error());
    if (!m) return;
    enum { N = 5 }; /* two full batches and one short one */
    float xs[N * 4];
    for (int i = 0; i < N * 4; i++)
        xs[i] = (float)(i % 7) - 3.0f;
    nn_tensor in = {NN_DTYPE_FLOAT, 2, {N, 4}, xs}, out;
    CHECK(nn_predict(m, &in, 1, &out, 1) == NN_OK, "predict: %s", nn_last_error());
    CHECK(out.ndim == 2 && out.dims[0] == N && out.dims[1] == 4, "output shape: expected [%d, 4], got [%lld, %lld]", N,
          (long long)out.dims[0], (long long)out.dims[1]);
    int wrong = 0;
    for (int i = 0; i < N * 4 && out.data; i++)
        wrong += fabsf(((float *)out.data)[i] - reference(xs[i], i % 4)) > 1e-6f;
    CHECK(wrong == 0, "%d batched outputs differ from the reference", wrong);
    nn_tensor_release(&out);

    nn_tensor bad = {NN_DTYPE_FLOAT, 2, {N, 3}, xs};
    nn_status st = nn_predict(m, &bad, 1, &out, 1);
    CHECK(st == NN_ERR_SHAPE, "input of the wrong shape: expected %s, got %s", nn_strerror(NN_ERR_SHAPE),
          nn_strerror(st));
    CHECK(strstr(nn_last_error(), "input 'x' dimension 1 must be 4, got 3"), "message: %s", nn_last_error());
    nn_tensor bad_type = {NN_DTYPE_INT64, 2, {N, 4}, xs};
    st = nn_predict(m, &bad_type, 1, &out, 1);
    CHECK(st == NN_ERR_ARG, "input of the wrong dtype: expected %s, got %s", nn_strerror(NN_ERR_ARG), nn_strerror(st));
    nn_free(m);
    builder_free(&b);
}

/* A file listing nodes out of order is sorted, not rejected. */
static void test_unsorted_nodes(void) {
    check_set_case("test_unsorted_nodes");
    builder b;
    small_model(&b);
    Onnx__NodeProto *first = b.nodes[0];
    b.nodes[0] = b.nodes[2];
    b.nodes[2] = first; /* relu, add, mul */
    nn_model *m = NULL;
    CHECK(nn_load(save(&b, "unsorted.onnx"), NULL, &m) == NN_OK, "unsorted nodes: %s", nn_last_error());
    float xs[4] = {1, 2, -3, 0.5f};
    nn_tensor in = {NN_DTYPE_FLOAT, 2, {1, 4}, xs}, out = {0};
    CHECK(m && nn_predict(m, &in, 1, &out, 1) == NN_OK, "unsorted predict: %s", nn_last_error());
    for (int j = 0; j < 4 && out.data; j++)
        CHECK(((float *)out.data)[j] == reference(xs[j], j), "unsorted output %d: %g, expected %g", j,
              ((float *)out.data)[j], reference(xs[j], j));
    nn_tensor_release(&out);
    nn_free(m);
    builder_free(&b);
}

typedef struct worker {
    nn_model *m;
    int errors;
} worker;

static void *predict_many(void *arg) {
    worker *w = arg;
    float xs[3 * 4];
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < 12; i++)
            xs[i] = (float)((i + rep) % 5) - 2.0f;
        nn_tensor in = {NN_DTYPE_FLOAT, 2, {3, 4}, xs}, out;
        if (nn_predict(w->m, &in, 1, &out, 1) != NN_OK) {
            w->errors++;
            continue;
        }
        for (int i = 0; i < 12; i++)
            w->errors += ((float *)out.data)[i] != reference(xs[i], i % 4);
        nn_tensor_release(&out);
    }
    return NULL;
}

static void test_concurrency(void) {
    check_set_case("test_concurrency");
    builder b;
    small_model(&b);
    nn_model *m;
    CHECK(nn_load(save(&b, "threads.onnx"), NULL, &m) == NN_OK, "load: %s", nn_last_error());
    worker w[4] = {{m, 0}, {m, 0}, {m, 0}, {m, 0}};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, predict_many, &w[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++)
        CHECK(w[i].errors == 0, "thread %d saw %d wrong results", i, w[i].errors);
    nn_free(m);
    builder_free(&b);
}

/* An input without the batch dimension feeds every chunk, even when the
 * plan reuses its buffer once it has been read (here, without the
 * optimizer, for t0 = x + y's successors). */
static void test_unbatched_input(void) {
    check_set_case("test_unbatched_input");
    builder b;
    builder_init(&b);
    b.inputs[b.graph.n_input++] = value_info("x", 2, dims_n4);
    b.inputs[b.graph.n_input++] = value_info("y", 1, dims_4);
    b.outputs[b.graph.n_output++] = value_info("z", 2, dims_n4);
    node(&b, "Add", "add", "x", "y", "t0");
    node(&b, "Neg", "neg", "t0", NULL, "t1");
    node(&b, "Sigmoid", "sigmoid", "t1", NULL, "t2");
    node(&b, "Mul", "mul", "t2", "x", "z");
    const char *path = save(&b, "unbatched.onnx");
    builder_free(&b);
    nn_options opt = nn_options_default();
    opt.optimize = 0;
    opt.cache = 0;
    nn_model *m;
    CHECK(nn_load(path, &opt, &m) == NN_OK, "load: %s", nn_last_error());
    if (!m) return;
    float xs[12], ys[4] = {0.5f, -1, 2, 0.25f};
    for (int i = 0; i < 12; i++)
        xs[i] = (float)i / 4 - 1;
    nn_tensor in[2] = {{NN_DTYPE_FLOAT, 2, {3, 4}, xs}, {NN_DTYPE_FLOAT, 1, {4}, ys}}, out;
    CHECK(nn_predict(m, in, 2, &out, 1) == NN_OK, "predict: %s", nn_last_error());
    int wrong = 0;
    for (int i = 0; out.data && i < 12; i++) {
        float want = xs[i] / (1 + expf(xs[i] + ys[i % 4]));
        wrong += fabsf(((float *)out.data)[i] - want) > 1e-6f;
    }
    CHECK(out.data && wrong == 0, "%d of 12 outputs wrong with an unbatched input over 3 chunks", wrong);
    nn_tensor_release(&out);
    CHECK(nn_input_batch_axis(m, 0) == 0 && nn_input_batch_axis(m, 1) == -1 && nn_output_batch_axis(m, 0) == 0,
          "batch axes: x %d, y %d, z %d (expected 0, -1, 0)", nn_input_batch_axis(m, 0), nn_input_batch_axis(m, 1),
          nn_output_batch_axis(m, 0));
    CHECK(nn_input_batch_axis(m, 2) == -1 && nn_output_batch_axis(m, -1) == -1, "batch axis of a missing index");
    CHECK(nn_input_index(m, "y") == 1 && nn_input_index(m, "x") == 0 && nn_output_index(m, "z") == 0,
          "name lookup: y %d, x %d, z %d", nn_input_index(m, "y"), nn_input_index(m, "x"), nn_output_index(m, "z"));
    nn_free(m);
}

/* nn_predict_into writes the same results as nn_predict into the caller's
 * buffers, after nn_output_shapes sized them; wrong buffers are refused. */
static void test_predict_into(void) {
    check_set_case("test_predict_into");
    builder b;
    small_model(&b);
    const char *path = save(&b, "into.onnx");
    builder_free(&b);
    nn_options opt = nn_options_default();
    opt.batch = 2;
    nn_model *m;
    CHECK(nn_load(path, &opt, &m) == NN_OK, "load: %s", nn_last_error());
    if (!m) return;
    CHECK(nn_input_index(m, "nope") == -1 && strstr(nn_last_error(), "no input named 'nope'"), "unknown input name: %s",
          nn_last_error());
    CHECK(nn_output_index(m, "x") == -1 && strstr(nn_last_error(), "no output named 'x'"), "input name as output");
    enum { N = 5 };
    float xs[N * 4], ys[N * 4 + 1];
    for (int i = 0; i < N * 4; i++)
        xs[i] = (float)(i % 5) - 2.5f;
    nn_tensor in = {NN_DTYPE_FLOAT, 2, {N, 4}, xs}, shape;
    CHECK(nn_output_shapes(m, &in, 1, &shape, 1) == NN_OK, "output shapes: %s", nn_last_error());
    CHECK(shape.dtype == NN_DTYPE_FLOAT && shape.ndim == 2 && shape.dims[0] == N && shape.dims[1] == 4 && !shape.data,
          "output shape for %d samples: ndim %d [%lld, %lld]", N, shape.ndim, (long long)shape.dims[0],
          (long long)shape.dims[1]);
    ys[N * 4] = 42; /* a guard: nothing is written past the output */
    nn_tensor out = shape;
    out.data = ys;
    CHECK(nn_predict_into(m, &in, 1, &out, 1) == NN_OK, "predict_into: %s", nn_last_error());
    int wrong = 0;
    for (int i = 0; i < N * 4; i++)
        wrong += fabsf(ys[i] - reference(xs[i], i % 4)) > 1e-6f;
    CHECK(wrong == 0 && ys[N * 4] == 42, "%d of %d outputs wrong, guard %g", wrong, N * 4, ys[N * 4]);
    CHECK(out.data == ys, "the output buffer was replaced");

    nn_tensor short_out = out;
    short_out.dims[0] = N - 1;
    nn_status st = nn_predict_into(m, &in, 1, &short_out, 1);
    CHECK(st == NN_ERR_SHAPE && strstr(nn_last_error(), "output 'y'"), "short output buffer: %s, %s", nn_strerror(st),
          nn_last_error());
    nn_tensor int_out = out;
    int_out.dtype = NN_DTYPE_INT32;
    CHECK(nn_predict_into(m, &in, 1, &int_out, 1) == NN_ERR_ARG, "int32 buffer for a float output accepted");
    nn_tensor no_data = shape;
    CHECK(nn_predict_into(m, &in, 1, &no_data, 1) == NN_ERR_ARG, "output without data accepted");
    nn_tensor bad = {NN_DTYPE_FLOAT, 2, {N, 3}, xs};
    CHECK(nn_output_shapes(m, &bad, 1, &shape, 1) == NN_ERR_SHAPE, "output shapes of a wrong input: %s",
          nn_last_error());
    nn_free(m);
}

/* options.cache: a miss writes, a hit reads back the same plan; options.max_memory refuses what does not fit */
static void test_cache_and_limits(void) {
    check_set_case("test_cache_and_limits");
    builder b;
    small_model(&b);
    const char *path = save(&b, "cached.onnx");
    builder_free(&b);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/plans", nn_test_dir);
    nn_options opt = nn_options_default();
    opt.batch = 2;
    opt.cache_dir = dir;
    float xs[8] = {-3, -1, 0, 0.5f, 1, 2, 3, 4}, got[2][8];
    nn_model_stats stats[2];
    for (int round = 0; round < 2; round++) {
        nn_model *m;
        CHECK(nn_load(path, &opt, &m) == NN_OK, "cached load %d: %s", round, nn_last_error());
        if (!m) return;
        nn_model_get_stats(m, &stats[round]);
        if (round == 0) /* the strings live as long as the model */
            CHECK(stats[0].cache_path && strstr(stats[0].cache_path, "/plans/cached-") && !stats[0].cache_warning,
                  "miss path %s", stats[0].cache_path ? stats[0].cache_path : "(none)");
        nn_tensor in = {NN_DTYPE_FLOAT, 2, {2, 4}, xs}, out;
        CHECK(nn_predict(m, &in, 1, &out, 1) == NN_OK, "cached predict %d: %s", round, nn_last_error());
        if (out.data) memcpy(got[round], out.data, sizeof got[round]);
        nn_tensor_release(&out);
        nn_free(m);
    }
    CHECK(stats[0].cache == NN_CACHE_MISS && stats[1].cache == NN_CACHE_HIT,
          "cache states: expected %d (miss) then %d (hit), got %d then %d", NN_CACHE_MISS, NN_CACHE_HIT, stats[0].cache,
          stats[1].cache);
    CHECK(!memcmp(got[0], got[1], sizeof got[0]), "outputs from the cache differ");
    CHECK(stats[1].nodes == stats[0].nodes && stats[1].nodes_parsed == stats[0].nodes_parsed &&
              stats[1].arena_bytes == stats[0].arena_bytes && stats[1].parameters == stats[0].parameters,
          "stats from the cache differ");

    nn_model *m = (nn_model *)1;
    opt.max_memory = 64; /* fewer bytes than the weights alone: refused on a hit and on a miss */
    for (int use_cache = 1; use_cache >= 0; use_cache--) {
        opt.cache = use_cache;
        nn_status st = nn_load(path, &opt, &m);
        CHECK(st == NN_ERR_NOMEM && !m, "memory limit (cache %d): expected %s and no model, got %s", use_cache,
              nn_strerror(NN_ERR_NOMEM), nn_strerror(st));
        CHECK(strstr(nn_last_error(), "more than the memory limit"), "message: %s", nn_last_error());
    }
    opt.max_memory = -1;
    nn_status st = nn_load(path, &opt, &m);
    CHECK(st == NN_ERR_ARG && !m, "negative memory limit: expected %s and no model, got %s", nn_strerror(NN_ERR_ARG),
          nn_strerror(st));
    opt.max_memory = 0;
    CHECK(nn_load(path, &opt, &m) == NN_OK && m, "load with cache off: %s", nn_last_error());
    nn_model_get_stats(m, &stats[0]);
    CHECK(stats[0].cache == NN_CACHE_OFF && !stats[0].cache_path, "cache off: expected no cache file, got state %d, %s",
          stats[0].cache, stats[0].cache_path ? stats[0].cache_path : "(no path)");
    nn_free(m);
}

/* Micro-batches: a batch split over lanes gives the whole batch's results
 * while the API still reports the bound batch. */
static void expect_reference(const nn_tensor *out, const float *xs, int n, const char *what) {
    int wrong = 0;
    for (int i = 0; i < n * 4 && out->data; i++)
        wrong += fabsf(((float *)out->data)[i] - reference(xs[i], i % 4)) > 1e-6f;
    CHECK(out->data && wrong == 0, "%s: %d of %d outputs differ from the reference", what, wrong, n * 4);
}

/* `path` loaded for `batch` samples in micro-batches of `micro`, on 2 threads,
 * with its plan batch and lane count in *st; NULL (and a failed check) when
 * it does not load. */
static nn_model *load_micro(const char *path, int batch, int micro, nn_model_stats *st) {
    nn_options opt = nn_options_default();
    opt.batch = batch;
    opt.micro_batch = micro;
    opt.threads = 2;
    opt.cache = 0;
    nn_model *m = NULL;
    CHECK(nn_load(path, &opt, &m) == NN_OK, "load %s: %s", path, nn_last_error());
    if (m) nn_model_get_stats(m, st);
    return m;
}

static void test_micro_batches(void) {
    check_set_case("test_micro_batches");
    builder b;
    small_model(&b);
    const char *path = save(&b, "micro.onnx");
    builder_free(&b);
    nn_model_stats st;
    nn_model *m = load_micro(path, 4, 1, &st);
    if (!m) return;
    CHECK(st.batch == 4 && st.plan_batch == 1 && st.lanes == 2, "batch %d in micro-batches of %d on %d lanes", st.batch,
          st.plan_batch, st.lanes);
    nn_tensor shape;
    nn_input_info(m, 0, NULL, &shape);
    CHECK(shape.dims[0] == 4, "input info says batch %lld, the model was loaded for 4", (long long)shape.dims[0]);
    nn_output_info(m, 0, NULL, &shape);
    CHECK(shape.dims[0] == 4, "output info says batch %lld, the model was loaded for 4", (long long)shape.dims[0]);
    enum { N = 7 };
    float xs[N * 4];
    for (int i = 0; i < N * 4; i++)
        xs[i] = (float)(i % 9) - 4.0f;
    nn_tensor in = {NN_DTYPE_FLOAT, 2, {N, 4}, xs}, out;
    CHECK(nn_predict(m, &in, 1, &out, 1) == NN_OK, "predict: %s", nn_last_error());
    CHECK(out.dims[0] == N, "%lld output rows for %d samples", (long long)out.dims[0], N);
    expect_reference(&out, xs, N, "7 samples on 2 lanes");
    nn_tensor_release(&out);
    nn_free(m);

    if ((m = load_micro(path, 4, 4, &st))) { /* the bound batch: never split */
        CHECK(st.plan_batch == 4 && st.lanes == 1, "micro-batch = batch: %d per run on %d lanes", st.plan_batch,
              st.lanes);
        nn_free(m);
    }
    nn_options opt = nn_options_default();
    opt.micro_batch = -1;
    m = (nn_model *)1;
    CHECK(nn_load(path, &opt, &m) == NN_ERR_ARG && !m && strstr(nn_last_error(), "micro-batch size"),
          "negative micro-batch: %s", nn_last_error());
}

/* y = Reshape(x, [2, -1]): at the bound batch of 2 its dim 0 equals the
 * batch, at any other it does not: the samples do not stay in their rows, so
 * the batch runs whole, and a call with another sample count is refused. */
static void test_micro_batch_refused(void) {
    check_set_case("test_micro_batch_refused");
    static const int64_t dims_any[2] = {-1, -1}, dims_2[1] = {2};
    static const int64_t two_rows[2] = {2, -1};
    builder b;
    builder_init(&b);
    b.inputs[b.graph.n_input++] = value_info("x", 2, dims_n4);
    b.outputs[b.graph.n_output++] = value_info("y", 2, dims_any);
    int64_init(&b, "shape", 1, dims_2, 2, two_rows);
    node(&b, "Reshape", "two_rows", "x", "shape", "y");
    const char *path = save(&b, "two_rows.onnx");
    builder_free(&b);
    nn_model_stats st;
    nn_model *m = load_micro(path, 2, 1, &st);
    if (m) {
        CHECK(st.plan_batch == 2 && st.lanes == 1, "an output that does not follow the batch: %d per run on %d lanes",
              st.plan_batch, st.lanes);
        float xs[16];
        for (int i = 0; i < 16; i++)
            xs[i] = (float)i - 7.5f;
        nn_tensor four = {NN_DTYPE_FLOAT, 2, {4, 4}, xs}, two = {NN_DTYPE_FLOAT, 2, {2, 4}, xs}, out;
        CHECK(nn_predict(m, &four, 1, &out, 1) == NN_ERR_SHAPE && !out.data &&
                  strstr(nn_last_error(), "'two_rows' (Reshape)") && strstr(nn_last_error(), "whole batches of 2"),
              "4 samples for a batch that cannot split: %s", nn_last_error());
        CHECK(nn_predict(m, &two, 1, &out, 1) == NN_OK && out.ndim == 2 && out.dims[0] == 2 && out.dims[1] == 4,
              "2 samples: %s", nn_last_error());
        for (int i = 0; i < 8 && out.data && out.dims[0] == 2; i++)
            CHECK(((float *)out.data)[i] == xs[i], "output %d: %g, expected %g", i, ((float *)out.data)[i], xs[i]);
        nn_tensor_release(&out);
        nn_free(m);
    }
}

/* Outputs whose dim 0 merely equals the bound batch: z = -u from a fixed
 * [4, 3] input (declared with a symbolic dim 0) is returned whole whatever
 * the sample count, while y = Relu(x) is gathered over micro-batches; and
 * y = Transpose(x) at batch 3 ([3, 3]) moves the batch to dim 1, and
 * s = Shape(x) holds the batch size, so only whole batches run. */
static void test_batch_follows(void) {
    check_set_case("test_batch_follows");
    static const int64_t dims_n3[2] = {-1, 3}, dims_43[2] = {4, 3}, dims_any[2] = {-1, -1};
    builder b;
    builder_init(&b);
    b.inputs[b.graph.n_input++] = value_info("x", 2, dims_n3);
    b.inputs[b.graph.n_input++] = value_info("u", 2, dims_43);
    b.outputs[b.graph.n_output++] = value_info("y", 2, dims_n3);
    b.outputs[b.graph.n_output++] = value_info("z", 2, dims_n3);
    node(&b, "Relu", "relu", "x", NULL, "y");
    node(&b, "Neg", "neg", "u", NULL, "z");
    const char *path = save(&b, "fixed_output.onnx");
    builder_free(&b);
    nn_model_stats st;
    nn_model *m = load_micro(path, 4, 1, &st);
    if (m) {
        CHECK(st.plan_batch == 1, "y follows the batch, z does not read it: %d per run", st.plan_batch);
        float xs[24], us[12];
        for (int i = 0; i < 24; i++)
            xs[i] = (float)(i % 7) - 3.0f;
        for (int i = 0; i < 12; i++)
            us[i] = (float)i * 0.5f;
        nn_tensor in[2] = {{NN_DTYPE_FLOAT, 2, {8, 3}, xs}, {NN_DTYPE_FLOAT, 2, {4, 3}, us}}, out[2];
        CHECK(nn_predict(m, in, 2, out, 2) == NN_OK, "predict: %s", nn_last_error());
        CHECK(out[0].dims[0] == 8 && out[1].dims[0] == 4 && out[1].dims[1] == 3,
              "y has %lld rows (expected 8), z %lld (expected 4: it does not carry the batch)",
              (long long)out[0].dims[0], (long long)out[1].dims[0]);
        int wrong = 0;
        for (int i = 0; i < 24 && out[0].data && out[0].dims[0] == 8; i++)
            wrong += ((float *)out[0].data)[i] != (xs[i] > 0 ? xs[i] : 0);
        for (int i = 0; i < 12 && out[1].data && out[1].dims[0] == 4; i++)
            wrong += ((float *)out[1].data)[i] != -us[i];
        CHECK(wrong == 0, "%d outputs wrong", wrong);
        nn_tensor_release(&out[0]);
        nn_tensor_release(&out[1]);
        nn_free(m);
    }

    builder_init(&b);
    b.inputs[b.graph.n_input++] = value_info("x", 2, dims_n3);
    b.outputs[b.graph.n_output++] = value_info("y", 2, dims_any);
    node(&b, "Transpose", "turn", "x", NULL, "y");
    path = save(&b, "transpose_batch.onnx");
    builder_free(&b);
    if ((m = load_micro(path, 3, 0, &st))) {
        float xs[18];
        for (int i = 0; i < 18; i++)
            xs[i] = (float)i;
        nn_tensor six = {NN_DTYPE_FLOAT, 2, {6, 3}, xs}, three = {NN_DTYPE_FLOAT, 2, {3, 3}, xs}, out;
        CHECK(nn_predict(m, &six, 1, &out, 1) == NN_ERR_SHAPE && strstr(nn_last_error(), "'turn' (Transpose)"),
              "6 samples through a Transpose of the batch: %s", nn_last_error());
        CHECK(nn_predict(m, &three, 1, &out, 1) == NN_OK && out.dims[0] == 3 && out.dims[1] == 3, "3 samples: %s",
              nn_last_error());
        int wrong = 0;
        for (int i = 0; i < 3 && out.data; i++)
            for (int j = 0; j < 3; j++)
                wrong += ((float *)out.data)[i * 3 + j] != xs[j * 3 + i];
        CHECK(out.data && wrong == 0, "%d transposed outputs wrong", wrong);
        nn_tensor_release(&out);
        nn_free(m);
    }

    static const int64_t dims_2[1] = {2};
    builder_init(&b);
    b.inputs[b.graph.n_input++] = value_info("x", 2, dims_n3);
    Onnx__ValueInfoProto *shape = value_info("s", 1, dims_2);
    shape->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    b.outputs[b.graph.n_output++] = shape;
    node(&b, "Shape", "size", "x", NULL, "s");
    path = save(&b, "shape_output.onnx");
    builder_free(&b);
    if ((m = load_micro(path, 3, 1, &st))) {
        CHECK(st.plan_batch == 3, "an output holding the batch size: %d per run", st.plan_batch);
        float xs[18] = {0};
        nn_tensor six = {NN_DTYPE_FLOAT, 2, {6, 3}, xs}, three = {NN_DTYPE_FLOAT, 2, {3, 3}, xs}, out;
        CHECK(nn_predict(m, &six, 1, &out, 1) == NN_ERR_SHAPE && strstr(nn_last_error(), "'s'"),
              "6 samples for Shape(x) at batch 3: %s", nn_last_error());
        CHECK(nn_predict(m, &three, 1, &out, 1) == NN_OK && out.dims[0] == 2 && ((int64_t *)out.data)[0] == 3 &&
                  ((int64_t *)out.data)[1] == 3,
              "Shape(x) of 3 samples: %s", nn_last_error());
        nn_tensor_release(&out);
        nn_free(m);
    }
}

/* y = Gather(table, idx) over 6 samples on 2 lanes: an index out of range in
 * one sample fails the call, with the lane's message on the caller's thread */
static void test_lane_error(void) {
    check_set_case("test_lane_error");
    static const int64_t dims_n1[2] = {-1, 1};
    builder b;
    builder_init(&b);
    Onnx__ValueInfoProto *idx = value_info("idx", 2, dims_n1);
    idx->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    b.inputs[b.graph.n_input++] = idx;
    b.outputs[b.graph.n_output++] = value_info("y", 2, dims_n1);
    float_init(&b, "table", 1, dims_4, 4, w_vals);
    node(&b, "Gather", "lookup", "table", "idx", "y");
    const char *path = save(&b, "gather.onnx");
    builder_free(&b);
    nn_model_stats st;
    nn_model *m = load_micro(path, 4, 1, &st);
    if (m) {
        int64_t ids[6] = {0, 1, 2, 3, 9, 1};
        nn_tensor bad = {NN_DTYPE_INT64, 2, {6, 1}, ids}, out = {0};
        CHECK(nn_predict(m, &bad, 1, &out, 1) == NN_ERR_INVALID && !out.data, "an index out of range was accepted");
        CHECK(strstr(nn_last_error(), "'lookup'") && strstr(nn_last_error(), "index 9 out of range"),
              "lane error message: '%s'", nn_last_error());
        ids[4] = 2;
        CHECK(nn_predict(m, &bad, 1, &out, 1) == NN_OK && out.data && ((float *)out.data)[4] == w_vals[2],
              "after a failed call: %s", nn_last_error());
        nn_tensor_release(&out);
        nn_free(m);
    }
}

/* Every kernel, the lanes of a micro-batched call and the load's hashing
 * run on the engine's one pool (ops/par.h): after every load and prediction
 * above (2 threads, lanes, Gather, the plan cache), the process holds its
 * main thread and the pool's workers, and no OpenMP team, whose threads
 * would spin beside the pool's for 200 ms after each region. */
static void test_one_pool(void) {
    check_set_case("test_one_pool");
    DIR *d = opendir("/proc/self/task");
    if (!d) return; /* not Linux */
    int threads = 0;
    for (struct dirent *e; (e = readdir(d));)
        threads += e->d_name[0] != '.';
    closedir(d);
    CHECK(nn_par_workers() >= 1, "no pool worker started: the calls above ran on one thread");
    CHECK(threads == 1 + nn_par_workers(), "%d threads in the process: expected the main thread and %d pool workers",
          threads, nn_par_workers());
}

static void test_op_table(void) {
    check_set_case("test_op_table");
    CHECK(nn_op_table_check() == 0, "ops/ops.def out of order or mislabelled at line %d", nn_op_table_check());
    CHECK(nn_op_lookup("Conv") >= 0 && nn_op_lookup("NoSuchOp") < 0, "op lookup");
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_op_table();
    test_bad_files();
    test_invalid_graphs();
    test_batching();
    test_unsorted_nodes();
    test_concurrency();
    test_cache_and_limits();
    test_unbatched_input();
    test_predict_into();
    test_micro_batches();
    test_micro_batch_refused();
    test_batch_follows();
    test_lane_error();
    test_one_pool();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", nn_test_dir);
    return check_summary();
}
