/* Sequences, optionals and strings (docs/sequences.md): a round trip whose
 * answer is the input itself, the error paths (a position out of range, an
 * empty optional where a tensor is required, a sequence past
 * NN_SEQ_MAX_LENGTH, malformed SequenceProto files, text that is no number,
 * non-ASCII case mapping), and the public API's refusal of sequence inputs. */
#include <unistd.h>

#include "check.h"
#include "error.h"
#include "onnx_builder.h"
#include "values.h"

/* Wrap graph input/output vi's tensor type in an optional or sequence type
 * (restored by unwrap before builder_free, which frees tensor types only). */
static Onnx__TypeProto *wrap(Onnx__ValueInfoProto *vi, nn_value_kind kind) {
    Onnx__TypeProto *outer = calloc(1, sizeof *outer);
    onnx__type_proto__init(outer);
    if (kind == NN_KIND_SEQUENCE) {
        Onnx__TypeProto__Sequence *s = calloc(1, sizeof *s);
        onnx__type_proto__sequence__init(s);
        s->elem_type = vi->type;
        outer->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
        outer->sequence_type = s;
    } else {
        Onnx__TypeProto__Optional *o = calloc(1, sizeof *o);
        onnx__type_proto__optional__init(o);
        o->elem_type = vi->type;
        outer->value_case = ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
        outer->optional_type = o;
    }
    Onnx__TypeProto *inner = vi->type;
    vi->type = outer;
    return inner;
}

static void unwrap(Onnx__ValueInfoProto *vi, Onnx__TypeProto *inner) {
    Onnx__TypeProto *outer = vi->type;
    free(outer->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ? (void *)outer->sequence_type
                                                                    : (void *)outer->optional_type);
    free(outer);
    vi->type = inner;
}

static nn_model *load(builder *b, const char *file) {
    nn_options opt = nn_options_default();
    opt.cache = 0;
    nn_model *m = NULL;
    nn_status st = nn_load(save(b, file), &opt, &m);
    CHECK(st == NN_OK, "load %s: %s", file, nn_last_error());
    return m;
}

/* X [4,3] -> SplitToSequence(axis 0, split 1 each) -> SequenceInsert(X row
 * copies) -> SequenceAt(pos) and ConcatFromSequence(axis 0): the concat is
 * X itself, the item the row asked for, so the expected values are the
 * inputs', not the engine's. */
static void test_round_trip_and_position(void) {
    check_set_case("SplitToSequence / SequenceAt / ConcatFromSequence");
    builder b;
    builder_init(&b);
    b.opset.version = 13;
    int64_t xd[2] = {4, 3};
    graph_input(&b, "X", 2, xd);
    graph_input(&b, "pos", 0, NULL);
    b.inputs[1]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    Onnx__NodeProto *split = node(&b, "SplitToSequence", "split", "X", NULL, "seq");
    attr_int(&b, split, "axis", 0);
    Onnx__NodeProto *cat = node(&b, "ConcatFromSequence", "cat", "seq", NULL, "Y");
    attr_int(&b, cat, "axis", 0);
    node(&b, "SequenceAt", "at", "seq", "pos", "row");
    graph_output(&b, "Y", 2, xd);
    int64_t rd[2] = {1, 3};
    graph_output(&b, "row", 2, rd);
    nn_model *m = load(&b, "seq.onnx");
    float x[12];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i * 0.5f - 2.0f;
    int64_t pos = -2; /* the third row */
    nn_tensor in[2] = {{.dtype = NN_DTYPE_FLOAT, .ndim = 2, .dims = {4, 3}, .data = x},
                       {.dtype = NN_DTYPE_INT64, .ndim = 0, .data = &pos}};
    nn_tensor out[2];
    nn_status st = m ? nn_predict_values(m, in, 2, out, 2) : NN_ERR_ARG;
    if (CHECK(st == NN_OK, "predict: %s", nn_last_error())) {
        CHECK(out[0].ndim == 2 && out[0].dims[0] == 4 && out[0].dims[1] == 3, "concat shape");
        CHECK(!memcmp(out[0].data, x, sizeof x), "the concatenated split differs from X");
        CHECK(out[1].ndim == 2 && out[1].dims[0] == 1 && !memcmp(out[1].data, x + 6, 3 * sizeof(float)),
              "SequenceAt(-2) is not row 2 of X");
        nn_tensor_release(&out[0]);
        nn_tensor_release(&out[1]);
    }
    /* positions 4 and -5 are past either end of 4 items */
    int64_t bad[2] = {4, -5};
    for (int k = 0; k < 2 && m; k++) {
        pos = bad[k];
        st = nn_predict_values(m, in, 2, out, 2);
        char want[96];
        snprintf(want, sizeof want, "position %lld is out of range for a sequence of 4 tensors", (long long)bad[k]);
        CHECK(st == NN_ERR_INVALID && strstr(nn_last_error(), want) && strstr(nn_last_error(), "'at'"),
              "SequenceAt(%lld): status %d, '%s'", (long long)bad[k], (int)st, nn_last_error());
    }
    /* the public API takes tensors only: this model has none but sequence-free I/O, so it runs */
    nn_free(m);
    builder_free(&b);
}

/* OptionalGetElement on an empty optional: a clear error; OptionalHasElement
 * says false. */
static void test_empty_optional(void) {
    check_set_case("empty optional");
    builder b;
    builder_init(&b);
    b.opset.version = 18;
    int64_t d[1] = {3};
    graph_input(&b, "opt", 1, d);
    Onnx__TypeProto *inner = wrap(b.inputs[0], NN_KIND_OPTIONAL);
    node(&b, "OptionalHasElement", "has", "opt", NULL, "has_it");
    node(&b, "OptionalGetElement", "get", "opt", NULL, "Y");
    graph_output(&b, "has_it", 0, NULL);
    b.outputs[0]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    graph_output(&b, "Y", 1, d);
    nn_model *m = load(&b, "opt.onnx");
    nn_tensor none = {.dtype = NN_DTYPE_NONE}, out[2];
    nn_status st = m ? nn_predict_values(m, &none, 1, out, 2) : NN_ERR_ARG;
    CHECK(st == NN_ERR_INVALID && strstr(nn_last_error(), "'get' (OptionalGetElement)") &&
              strstr(nn_last_error(), "the optional is empty"),
          "an empty optional where a tensor is required: status %d, '%s'", (int)st, nn_last_error());
    float x[3] = {1, 2, 3};
    nn_tensor full = {.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {3}, .data = x};
    st = m ? nn_predict_values(m, &full, 1, out, 2) : NN_ERR_ARG;
    if (CHECK(st == NN_OK, "a full optional: %s", nn_last_error())) {
        CHECK(*(uint8_t *)out[0].data == 1, "OptionalHasElement of a full optional is false");
        CHECK(!memcmp(out[1].data, x, sizeof x), "OptionalGetElement changed the values");
        nn_tensor_release(&out[0]);
        nn_tensor_release(&out[1]);
    }
    /* nn_predict, the public API, takes tensors only and says so */
    st = m ? nn_predict(m, &full, 1, out, 2) : NN_ERR_ARG;
    CHECK(st == NN_ERR_UNSUPPORTED && strstr(nn_last_error(), "graph input 'opt' is an optional"),
          "nn_predict on an optional input: status %d, '%s'", (int)st, nn_last_error());
    nn_free(m);
    unwrap(b.inputs[0], inner);
    builder_free(&b);
}

/* SplitToSequence into NN_SEQ_MAX_LENGTH + 1 tensors: refused by name. */
static void test_length_bound(void) {
    check_set_case("NN_SEQ_MAX_LENGTH");
    builder b;
    builder_init(&b);
    int64_t d[1] = {NN_SEQ_MAX_LENGTH + 1}, symbolic[1] = {-1};
    graph_input(&b, "X", 1, symbolic);
    node(&b, "SplitToSequence", "split", "X", NULL, "seq");
    node(&b, "SequenceLength", "len", "seq", NULL, "n");
    graph_output(&b, "n", 0, NULL);
    b.outputs[0]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    nn_model *m = load(&b, "long.onnx");
    float *x = calloc((size_t)d[0], sizeof *x);
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {d[0]}, .data = x}, out;
    nn_status st = m ? nn_predict_values(m, &in, 1, &out, 1) : NN_ERR_ARG;
    CHECK(st == NN_ERR_UNSUPPORTED && strstr(nn_last_error(), "longer than NN_SEQ_MAX_LENGTH") &&
              strstr(nn_last_error(), "'split'"),
          "a sequence past the bound: status %d, '%s'", (int)st, nn_last_error());
    /* one short of the bound is fine, and its length is the element count */
    in.dims[0] = 1000;
    st = m ? nn_predict_values(m, &in, 1, &out, 1) : NN_ERR_ARG;
    if (CHECK(st == NN_OK, "1000 items: %s", nn_last_error())) {
        CHECK(*(int64_t *)out.data == 1000, "SequenceLength %lld, expected 1000", (long long)*(int64_t *)out.data);
        nn_tensor_release(&out);
    }
    free(x);
    nn_free(m);
    builder_free(&b);
}

/* SequenceProto files: a good one reads back its values; truncated or
 * nested ones fail with a message, never a crash. */
static void test_value_files(void) {
    check_set_case("SequenceProto files");
    Onnx__TensorProto t;
    onnx__tensor_proto__init(&t);
    int64_t dims[1] = {2}, vals[2] = {7, -9};
    t.n_dims = 1;
    t.dims = dims;
    t.has_data_type = 1;
    t.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    t.n_int64_data = 2;
    t.int64_data = vals;
    uint8_t tb[64], file[160];
    size_t tlen = onnx__tensor_proto__pack(&t, tb), len = 0;
    file[len++] = 2 << 3; /* elem_type = TENSOR */
    file[len++] = 1;
    for (int k = 0; k < 2; k++) { /* two tensor_values (field 3) */
        file[len++] = 3 << 3 | 2;
        file[len++] = (uint8_t)tlen;
        memcpy(file + len, tb, tlen);
        len += tlen;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/seq.pb", nn_test_dir);
    write_bytes(path, file, len);
    nn_tensor v;
    nn_status st = nn_value_load(path, NN_KIND_SEQUENCE, &v);
    if (CHECK(st == NN_OK && v.dtype == NN_DTYPE_SEQUENCE, "read a sequence: %s", nn_last_error())) {
        const nn_seq *s = v.data;
        CHECK(s->n == 2 && s->items[1].dtype == NN_DTYPE_INT64 && ((int64_t *)s->items[1].data)[1] == -9,
              "the sequence read back differs");
        nn_tensor_release(&v);
    }
    write_bytes(path, file, len - 3); /* cut inside the second tensor */
    st = nn_value_load(path, NN_KIND_SEQUENCE, &v);
    CHECK(st == NN_ERR_PARSE && strstr(nn_last_error(), "not a valid SequenceProto"), "truncated: %d '%s'", (int)st,
          nn_last_error());
    uint8_t nested[2] = {5 << 3 | 2, 0}; /* an (empty) sequence inside */
    write_bytes(path, nested, 2);
    st = nn_value_load(path, NN_KIND_SEQUENCE, &v);
    CHECK(st == NN_ERR_UNSUPPORTED && strstr(nn_last_error(), "a sequence of sequences"), "nested: %d '%s'", (int)st,
          nn_last_error());
    unlink(path);
}

/* X (float or string) -> Cast(to) -> Y, loaded */
static nn_model *cast_model(builder *b, int from, int to, int n) {
    builder_init(b);
    int64_t d[1] = {n};
    graph_input(b, "X", 1, d);
    b->inputs[0]->type->tensor_type->elem_type = from;
    attr_int(b, node(b, "Cast", "cast", "X", NULL, "Y"), "to", to);
    graph_output(b, "Y", 1, d);
    b->outputs[0]->type->tensor_type->elem_type = to;
    return load(b, "cast.onnx");
}

/* Cast to STRING writes what std::to_chars writes (the shortest digits that
 * read back, fixed or scientific, whichever is shorter); from STRING, a
 * string that is no number is an error naming it. */
static void test_cast_strings(void) {
    check_set_case("Cast and strings");
    builder b;
    float x[6] = {0.1f, 1e10f, 123456.0f, -2.5e-7f, 100000.0f, 0.039187793f};
    const char *want[6] = {"0.1", "1e+10", "123456", "-2.5e-07", "1e+05", "0.039187793"};
    nn_model *m = cast_model(&b, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 6);
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {6}, .data = x}, out;
    nn_status st = m ? nn_predict(m, &in, 1, &out, 1) : NN_ERR_ARG;
    if (CHECK(st == NN_OK && out.dtype == NN_DTYPE_STRING, "float to string: %s", nn_last_error())) {
        for (int i = 0; i < 6; i++)
            CHECK(!strcmp(((char **)out.data)[i], want[i]), "%.9g: got '%s', expected '%s'", x[i],
                  ((char **)out.data)[i], want[i]);
        nn_tensor_release(&out); /* one block: valgrind checks nothing is left */
    }
    nn_free(m);
    builder_free(&b);

    m = cast_model(&b, ONNX__TENSOR_PROTO__DATA_TYPE__STRING, ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 3);
    const char *text[3] = {"12", "-7", "3x"};
    nn_tensor sin = {.dtype = NN_DTYPE_STRING, .ndim = 1, .dims = {3}, .data = (void *)text};
    st = m ? nn_predict(m, &sin, 1, &out, 1) : NN_ERR_ARG;
    CHECK(st == NN_ERR_INVALID && strstr(nn_last_error(), "string 2 (\"3x\") is not a INT32"),
          "'3x' to int32: status %d, '%s'", (int)st, nn_last_error());
    text[2] = "2147483648"; /* one past INT32_MAX */
    st = m ? nn_predict(m, &sin, 1, &out, 1) : NN_ERR_ARG;
    CHECK(st == NN_ERR_INVALID, "2^31 to int32: status %d, '%s'", (int)st, nn_last_error());
    text[2] = NULL; /* a caller's NULL string: refused before anything reads it */
    st = m ? nn_predict(m, &sin, 1, &out, 1) : NN_ERR_ARG;
    CHECK(st == NN_ERR_ARG && strstr(nn_last_error(), "string 2 is NULL"), "NULL string: status %d, '%s'", (int)st,
          nn_last_error());
    text[2] = "2147483647";
    st = m ? nn_predict(m, &sin, 1, &out, 1) : NN_ERR_ARG;
    if (CHECK(st == NN_OK, "strings to int32: %s", nn_last_error())) {
        const int32_t *v = out.data;
        CHECK(v[0] == 12 && v[1] == -7 && v[2] == INT32_MAX, "got %d %d %d", v[0], v[1], v[2]);
        nn_tensor_release(&out);
    }
    nn_free(m);
    builder_free(&b);

    /* FLOAT16 to STRING has a spelling of ONNX Runtime's own: refused at load */
    builder_init(&b);
    int64_t d[1] = {2};
    graph_input(&b, "X", 1, d);
    b.inputs[0]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    attr_int(&b, node(&b, "Cast", "cast", "X", NULL, "Y"), "to", ONNX__TENSOR_PROTO__DATA_TYPE__STRING);
    graph_output(&b, "Y", 1, d);
    b.outputs[0]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__STRING;
    nn_options opt = nn_options_default();
    opt.cache = 0;
    st = nn_load(save(&b, "cast.onnx"), &opt, &m);
    CHECK(st == NN_ERR_UNSUPPORTED && strstr(nn_last_error(), "cast from FLOAT16 to STRING not supported"),
          "float16 to string: status %d, '%s'", (int)st, nn_last_error());
    builder_free(&b);
}

/* StringNormalizer maps case for ASCII only: other text is refused where
 * case matters, and passes where it does not. */
static void test_normalizer_ascii(void) {
    check_set_case("StringNormalizer");
    builder b;
    builder_init(&b);
    b.opset.version = 10;
    int64_t d[1] = {2};
    graph_input(&b, "X", 1, d);
    b.inputs[0]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__STRING;
    Onnx__NodeProto *n = node(&b, "StringNormalizer", "norm", "X", NULL, "Y");
    Onnx__AttributeProto *a = attr_new(&b, n, "case_change_action", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->s.data = (uint8_t *)"UPPER";
    a->s.len = 5;
    a->has_s = 1;
    int64_t any[1] = {-1};
    graph_output(&b, "Y", 1, any);
    b.outputs[0]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__STRING;
    nn_model *m = load(&b, "norm.onnx");
    const char *text[2] = {"monday", "stra\xc3\x9f"
                                     "e"};
    nn_tensor in = {.dtype = NN_DTYPE_STRING, .ndim = 1, .dims = {2}, .data = (void *)text}, out;
    nn_status st = m ? nn_predict(m, &in, 1, &out, 1) : NN_ERR_ARG;
    CHECK(st == NN_ERR_UNSUPPORTED && strstr(nn_last_error(), "string 1 is not ASCII"),
          "non-ASCII upper-cased: status %d, '%s'", (int)st, nn_last_error());
    text[1] = "Tuesday";
    st = m ? nn_predict(m, &in, 1, &out, 1) : NN_ERR_ARG;
    if (CHECK(st == NN_OK, "ASCII: %s", nn_last_error())) {
        CHECK(out.dims[0] == 2 && !strcmp(((char **)out.data)[0], "MONDAY") &&
                  !strcmp(((char **)out.data)[1], "TUESDAY"),
              "upper-cased wrongly");
        nn_tensor_release(&out);
    }
    nn_free(m);
    builder_free(&b);
}

/* ---- sequences crossing control flow (docs/control-flow.md) */

static void attr_graph(builder *b, Onnx__NodeProto *n, const char *name, builder *body) {
    Onnx__AttributeProto *a = attr_new(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    a->g = &body->graph;
}

static Onnx__ValueInfoProto *typed(const char *name, int elem, int ndim, const int64_t *dims) {
    Onnx__ValueInfoProto *vi = value_info(name, ndim, dims);
    vi->type->tensor_type->elem_type = elem;
    return vi;
}

enum { T_FLOAT = 1, T_INT64 = 7, T_BOOL = 9 };

/* Y = ConcatFromSequence(Loop(M = 3, SequenceEmpty)), the body appending
 * X * i to its loop-carried sequence: Y = [0*X, 1*X, 2*X]. */
static void test_loop_carried_sequence(void) {
    check_set_case("Loop carrying a sequence");
    builder top, body;
    builder_init(&top);
    builder_init(&body);
    int64_t two[1] = {2}, m = 3;
    graph_input(&top, "X", 1, two);
    int64_init(&top, "M", 0, NULL, 1, &m);
    node_io(&top, "SequenceEmpty", "empty", 0, NULL, 1, (const char *[]){"s0"});
    Onnx__NodeProto *ln = node_io(&top, "Loop", "seq_loop", 3, (const char *[]){"M", "", "s0"}, 1,
                                  (const char *[]){"s"});
    attr_graph(&top, ln, "body", &body);
    Onnx__NodeProto *cat = node(&top, "ConcatFromSequence", "cat", "s", NULL, "Y");
    attr_int(&top, cat, "axis", 0);
    int64_t six[1] = {6};
    graph_output(&top, "Y", 1, six);
    body.inputs[body.graph.n_input++] = typed("i", T_INT64, 0, NULL);
    body.inputs[body.graph.n_input++] = typed("c", T_BOOL, 0, NULL);
    body.inputs[body.graph.n_input++] = typed("s_in", T_FLOAT, 1, two);
    Onnx__TypeProto *in_inner = wrap(body.inputs[2], NN_KIND_SEQUENCE);
    Onnx__NodeProto *cast = node(&body, "Cast", "cast", "i", NULL, "fi");
    attr_int(&body, cast, "to", T_FLOAT);
    node(&body, "Mul", "mul", "X", "fi", "xi");
    node(&body, "SequenceInsert", "insert", "s_in", "xi", "s_out");
    node(&body, "Identity", "keep", "c", NULL, "c_out");
    body.outputs[body.graph.n_output++] = typed("c_out", T_BOOL, 0, NULL);
    body.outputs[body.graph.n_output++] = typed("s_out", T_FLOAT, 1, two);
    Onnx__TypeProto *out_inner = wrap(body.outputs[1], NN_KIND_SEQUENCE);
    nn_model *mdl = load(&top, "seqloop.onnx");
    unwrap(body.inputs[2], in_inner);
    unwrap(body.outputs[1], out_inner);
    builder_free(&body);
    builder_free(&top);
    if (!mdl) return;
    float x[2] = {1.5f, -2};
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {2}, .data = x}, out;
    for (int run = 0; run < 2; run++) { /* twice: nothing of the first run may linger */
        nn_status st = nn_predict(mdl, &in, 1, &out, 1);
        if (!CHECK(st == NN_OK, "run %d: %s", run, nn_last_error())) break;
        float want[6];
        for (int k = 0; k < 6; k++)
            want[k] = x[k % 2] * (float)(k / 2);
        CHECK(out.ndim == 1 && out.dims[0] == 6, "Y has rank %d", out.ndim);
        if (out.ndim == 1 && out.dims[0] == 6) CHECK_CLOSE("Y", (float *)out.data, want, 6, 0, 0);
        nn_tensor_release(&out);
    }
    nn_free(mdl);
}

/* An If whose then_branch returns a sequence and else_branch a tensor:
 * refused at load, naming the node and both kinds. */
static void test_if_mixed_kinds(void) {
    check_set_case("If branches of different kinds");
    builder top, then_b, else_b;
    builder_init(&top);
    builder_init(&then_b);
    builder_init(&else_b);
    int64_t two[1] = {2};
    graph_input(&top, "X", 1, two);
    top.inputs[top.graph.n_input++] = typed("C", T_BOOL, 0, NULL);
    Onnx__NodeProto *n = node_io(&top, "If", "mixed_if", 1, (const char *[]){"C"}, 1, (const char *[]){"Y"});
    attr_graph(&top, n, "then_branch", &then_b);
    attr_graph(&top, n, "else_branch", &else_b);
    graph_output(&top, "Y", 1, two);
    node(&then_b, "SequenceConstruct", "make", "X", NULL, "t");
    then_b.outputs[then_b.graph.n_output++] = typed("t", T_FLOAT, 1, two);
    Onnx__TypeProto *inner = wrap(then_b.outputs[0], NN_KIND_SEQUENCE);
    node(&else_b, "Identity", "same", "X", NULL, "e");
    else_b.outputs[else_b.graph.n_output++] = typed("e", T_FLOAT, 1, two);
    nn_options opt = nn_options_default();
    opt.cache = 0;
    nn_model *m = NULL;
    nn_status st = nn_load(save(&top, "mixed.onnx"), &opt, &m);
    unwrap(then_b.outputs[0], inner);
    builder_free(&else_b);
    builder_free(&then_b);
    builder_free(&top);
    const char *e = nn_last_error();
    CHECK(st == NN_ERR_INVALID && strstr(e, "mixed_if") && strstr(e, "a sequence in then_branch") &&
              strstr(e, "a tensor in else_branch"),
          "mixed branches: status %d, '%s'", (int)st, e);
    nn_free(m);
}

/* A Loop body that splits the captured X into a sequence and returns its
 * length: past NN_SEQ_MAX_LENGTH the error names the Loop and the bound;
 * below it the length is X's element count. */
static void test_loop_long_sequence(void) {
    check_set_case("Loop body making a sequence past NN_SEQ_MAX_LENGTH");
    builder top, body;
    builder_init(&top);
    builder_init(&body);
    int64_t symbolic[1] = {-1}, m = 1, zero = 0;
    graph_input(&top, "X", 1, symbolic);
    int64_init(&top, "M", 0, NULL, 1, &m);
    int64_init(&top, "n0", 0, NULL, 1, &zero);
    Onnx__NodeProto *ln = node_io(&top, "Loop", "long_loop", 3, (const char *[]){"M", "", "n0"}, 1,
                                  (const char *[]){"N"});
    attr_graph(&top, ln, "body", &body);
    graph_output(&top, "N", 0, NULL);
    top.outputs[0]->type->tensor_type->elem_type = T_INT64;
    body.inputs[body.graph.n_input++] = typed("i", T_INT64, 0, NULL);
    body.inputs[body.graph.n_input++] = typed("c", T_BOOL, 0, NULL);
    body.inputs[body.graph.n_input++] = typed("n_in", T_INT64, 0, NULL);
    node(&body, "SplitToSequence", "split", "X", NULL, "sq");
    node(&body, "SequenceLength", "len", "sq", NULL, "n_out");
    node(&body, "Identity", "keep", "c", NULL, "c_out");
    body.outputs[body.graph.n_output++] = typed("c_out", T_BOOL, 0, NULL);
    body.outputs[body.graph.n_output++] = typed("n_out", T_INT64, 0, NULL);
    nn_model *mdl = load(&top, "longloop.onnx");
    builder_free(&body);
    builder_free(&top);
    if (!mdl) return;
    int64_t len = NN_SEQ_MAX_LENGTH + 1;
    float *x = calloc((size_t)len, sizeof *x);
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {len}, .data = x}, out;
    nn_status st = nn_predict(mdl, &in, 1, &out, 1);
    const char *e = nn_last_error();
    CHECK(st == NN_ERR_UNSUPPORTED && strstr(e, "long_loop") && strstr(e, "longer than NN_SEQ_MAX_LENGTH"),
          "a body's sequence past the bound: status %d, '%s'", (int)st, e);
    in.dims[0] = 777;
    st = nn_predict(mdl, &in, 1, &out, 1);
    if (CHECK(st == NN_OK, "777 items: %s", nn_last_error())) {
        CHECK(out.dtype == NN_DTYPE_INT64 && *(int64_t *)out.data == 777, "length %lld, expected 777",
              (long long)*(int64_t *)out.data);
        nn_tensor_release(&out);
    }
    free(x);
    nn_free(mdl);
}

/* SequenceMap over two sequences of different lengths: refused, naming
 * the node and both lengths; of equal lengths, item i is X[i] + Z[i]. */
static void test_sequence_map_lengths(void) {
    check_set_case("SequenceMap");
    builder top, body;
    builder_init(&top);
    builder_init(&body);
    top.opset.version = 17;
    int64_t symbolic[1] = {-1}, one[1] = {1};
    graph_input(&top, "X", 1, symbolic);
    graph_input(&top, "Z", 1, symbolic);
    node(&top, "SplitToSequence", "sx", "X", NULL, "qx");
    node(&top, "SplitToSequence", "sz", "Z", NULL, "qz");
    Onnx__NodeProto *n = node(&top, "SequenceMap", "map", "qx", "qz", "qy");
    attr_graph(&top, n, "body", &body);
    Onnx__NodeProto *cat = node(&top, "ConcatFromSequence", "cat", "qy", NULL, "Y");
    attr_int(&top, cat, "axis", 0);
    graph_output(&top, "Y", 1, symbolic);
    body.inputs[body.graph.n_input++] = typed("a", T_FLOAT, 1, one);
    body.inputs[body.graph.n_input++] = typed("b", T_FLOAT, 1, one);
    node(&body, "Add", "add", "a", "b", "y");
    body.outputs[body.graph.n_output++] = typed("y", T_FLOAT, 1, one);
    nn_model *m = load(&top, "seqmap.onnx");
    builder_free(&body);
    builder_free(&top);
    if (!m) return;
    float x[3] = {1, 2, 3}, z[3] = {10, 20, 30};
    nn_tensor in[2] = {{.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {3}, .data = x},
                       {.dtype = NN_DTYPE_FLOAT, .ndim = 1, .dims = {2}, .data = z}},
              out;
    nn_status st = nn_predict(m, in, 2, &out, 1);
    const char *e = nn_last_error();
    CHECK(st == NN_ERR_SHAPE && strstr(e, "'map'") && strstr(e, "input 1 holds 2 tensors, input 0 3"),
          "different lengths: status %d, '%s'", (int)st, e);
    in[1].dims[0] = 3;
    st = nn_predict(m, in, 2, &out, 1);
    if (CHECK(st == NN_OK, "equal lengths: %s", nn_last_error())) {
        float want[3] = {11, 22, 33};
        if (CHECK(out.ndim == 1 && out.dims[0] == 3, "Y has rank %d", out.ndim))
            CHECK_CLOSE("Y", (float *)out.data, want, 3, 0, 0);
        nn_tensor_release(&out);
    }
    nn_free(m);
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_round_trip_and_position();
    test_empty_optional();
    test_length_bound();
    test_value_files();
    test_cast_strings();
    test_normalizer_ascii();
    test_loop_carried_sequence();
    test_if_mixed_kinds();
    test_loop_long_sequence();
    test_sequence_map_lengths();
    const char *files[] = {"seq.onnx", "opt.onnx", "long.onnx", "cast.onnx", "norm.onnx",
                           "seqloop.onnx", "mixed.onnx", "longloop.onnx", "seqmap.onnx"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s/%s", nn_test_dir, files[i]);
        unlink(p);
    }
    rmdir(nn_test_dir);
    return check_summary();
}
