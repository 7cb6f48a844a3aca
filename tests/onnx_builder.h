/* Building ONNX models in C for tests, over the protobuf-c structs generated
 * from onnx.proto.  Models are written into `nn_test_dir` (created by the
 * test with mkdtemp).
 *
 * Everything a builder allocates (nodes, attributes, copies of initializer
 * data) is recorded in it and released by builder_free; a test may still
 * point fields at its own memory (a stack attribute, other dims) to build a
 * broken model, since only the recorded allocations are freed. */
#ifndef NN_TEST_ONNX_BUILDER_H
#define NN_TEST_ONNX_BUILDER_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

static char nn_test_dir[] = "/tmp/nn_test_XXXXXX";

enum { BUILDER_NODES = 64, BUILDER_IO = 8, BUILDER_INITS = 64, BUILDER_OWNED = 1024 };

/* ---- tiny model builder over the generated protobuf-c structs */
typedef struct builder {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset, *opsets[1];
    Onnx__NodeProto *nodes[BUILDER_NODES];
    Onnx__ValueInfoProto *inputs[BUILDER_IO], *outputs[BUILDER_IO];
    Onnx__TensorProto *inits[BUILDER_INITS];
    void *owned[BUILDER_OWNED];
    int n_owned;
} builder;

/* A builder is only used by tests: running out of room is a bug in the test. */
static inline void builder_room(int used, int cap, const char *what) {
    if (used < cap) return;
    fprintf(stderr, "onnx_builder: more than %d %s (raise the limit in tests/onnx_builder.h)\n", cap, what);
    exit(2);
}

/* zeroed memory released by builder_free */
static inline void *builder_alloc(builder *b, size_t size) {
    builder_room(b->n_owned, BUILDER_OWNED, "allocations");
    void *p = calloc(1, size ? size : 1);
    if (!p) {
        perror("onnx_builder");
        exit(2);
    }
    b->owned[b->n_owned++] = p;
    return p;
}

static inline void *builder_dup(builder *b, const void *src, size_t size) {
    void *p = builder_alloc(b, size);
    if (size) memcpy(p, src, size);
    return p;
}

/* A formatted name that lives as long as the builder (protobuf fields keep
 * pointers, not copies). */
__attribute__((format(printf, 2, 3))) static inline char *builder_str(builder *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = builder_alloc(b, (size_t)len + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    va_end(ap);
    return s;
}

static inline void builder_init(builder *b) {
    memset(b, 0, sizeof *b);
    onnx__model_proto__init(&b->model);
    onnx__graph_proto__init(&b->graph);
    onnx__operator_set_id_proto__init(&b->opset);
    b->opset.domain = "";
    b->opset.has_version = 1;
    b->opset.version = 13;
    b->opsets[0] = &b->opset;
    b->model.n_opset_import = 1;
    b->model.opset_import = b->opsets;
    b->model.has_ir_version = 1;
    b->model.ir_version = 7;
    b->model.graph = &b->graph;
    b->graph.name = "g";
    b->graph.node = b->nodes;
    b->graph.input = b->inputs;
    b->graph.output = b->outputs;
    b->graph.initializer = b->inits;
}

/* value info: float tensor; dim -1 = symbolic "N" */
static inline Onnx__ValueInfoProto *value_info(const char *name, int ndim, const int64_t *dims) {
    Onnx__ValueInfoProto *vi = calloc(1, sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = (char *)name;
    Onnx__TypeProto *tp = calloc(1, sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = calloc(1, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = 1;
    Onnx__TensorShapeProto *sh = calloc(1, sizeof *sh);
    onnx__tensor_shape_proto__init(sh);
    sh->n_dim = (size_t)ndim;
    sh->dim = calloc((size_t)ndim + 1, sizeof *sh->dim);
    for (int i = 0; i < ndim; i++) {
        Onnx__TensorShapeProto__Dimension *d = calloc(1, sizeof *d);
        onnx__tensor_shape_proto__dimension__init(d);
        if (dims[i] < 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = "N";
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
        }
        sh->dim[i] = d;
    }
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    return vi;
}

static inline void free_value_info(Onnx__ValueInfoProto *vi) {
    Onnx__TensorShapeProto *sh = vi->type->tensor_type->shape;
    for (size_t i = 0; i < sh->n_dim; i++) free(sh->dim[i]);
    free(sh->dim);
    free(sh);
    free(vi->type->tensor_type);
    free(vi->type);
    free(vi);
}

/* float graph input / output; dims as for value_info */
static inline void graph_input(builder *b, const char *name, int ndim, const int64_t *dims) {
    builder_room((int)b->graph.n_input, BUILDER_IO, "graph inputs");
    b->inputs[b->graph.n_input++] = value_info(name, ndim, dims);
}

static inline void graph_output(builder *b, const char *name, int ndim, const int64_t *dims) {
    builder_room((int)b->graph.n_output, BUILDER_IO, "graph outputs");
    b->outputs[b->graph.n_output++] = value_info(name, ndim, dims);
}

/* A node with any number of inputs and outputs; "" names an absent optional one. */
static inline Onnx__NodeProto *node_io(builder *b, const char *op, const char *name, int n_in,
                                       const char *const *in, int n_out, const char *const *out) {
    builder_room((int)b->graph.n_node, BUILDER_NODES, "nodes");
    Onnx__NodeProto *n = builder_alloc(b, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = (char *)op;
    n->name = (char *)name;
    n->input = builder_dup(b, in, sizeof(char *) * (size_t)n_in);
    n->n_input = (size_t)n_in;
    n->output = builder_dup(b, out, sizeof(char *) * (size_t)n_out);
    n->n_output = (size_t)n_out;
    b->nodes[b->graph.n_node++] = n;
    return n;
}

/* The common case: one or two inputs (in1 NULL for one), one output. */
static inline Onnx__NodeProto *node(builder *b, const char *op, const char *name, const char *in0, const char *in1,
                                    const char *out) {
    const char *in[2] = {in0, in1};
    return node_io(b, op, name, in1 ? 2 : 1, in, 1, &out);
}

/* ---- attributes on a node */
static inline Onnx__AttributeProto *attr_new(builder *b, Onnx__NodeProto *n, const char *name,
                                             Onnx__AttributeProto__AttributeType type) {
    Onnx__AttributeProto *a = builder_alloc(b, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = type;
    /* grow by copying: the old array stays owned by the builder */
    Onnx__AttributeProto **list = builder_alloc(b, sizeof *list * (n->n_attribute + 1));
    if (n->n_attribute) memcpy(list, n->attribute, sizeof *list * n->n_attribute);
    list[n->n_attribute++] = a;
    n->attribute = list;
    return a;
}

static inline void attr_int(builder *b, Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = attr_new(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static inline void attr_float(builder *b, Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = attr_new(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = v;
}

static inline void attr_ints(builder *b, Onnx__NodeProto *n, const char *name, int count, const int64_t *v) {
    Onnx__AttributeProto *a = attr_new(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = (size_t)count;
    a->ints = builder_dup(b, v, sizeof *v * (size_t)count);
}

/* ---- initializers; dims and values are copied (ndim 0 makes a scalar) */
static inline Onnx__TensorProto *tensor_init(builder *b, const char *name, int dtype, int ndim,
                                             const int64_t *dims) {
    builder_room((int)b->graph.n_initializer, BUILDER_INITS, "initializers");
    Onnx__TensorProto *t = builder_alloc(b, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)ndim;
    t->dims = builder_dup(b, dims, sizeof(int64_t) * (size_t)ndim);
    b->inits[b->graph.n_initializer++] = t;
    return t;
}

static inline Onnx__TensorProto *float_init(builder *b, const char *name, int ndim, const int64_t *dims, int n_values,
                                            const float *values) {
    Onnx__TensorProto *t = tensor_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ndim, dims);
    t->n_float_data = (size_t)n_values;
    t->float_data = builder_dup(b, values, sizeof(float) * (size_t)n_values);
    return t;
}

/* bytes as they lie in memory (raw_data): int8, uint8, int32 ... */
static inline Onnx__TensorProto *raw_init(builder *b, const char *name, int dtype, int ndim, const int64_t *dims,
                                          const void *data, size_t bytes) {
    Onnx__TensorProto *t = tensor_init(b, name, dtype, ndim, dims);
    t->has_raw_data = 1;
    t->raw_data.len = bytes;
    t->raw_data.data = builder_dup(b, data, bytes);
    return t;
}

static inline Onnx__TensorProto *int64_init(builder *b, const char *name, int ndim, const int64_t *dims, int n_values,
                                            const int64_t *values) {
    Onnx__TensorProto *t = tensor_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, ndim, dims);
    t->n_int64_data = (size_t)n_values;
    t->int64_data = builder_dup(b, values, sizeof(int64_t) * (size_t)n_values);
    return t;
}

static inline void builder_free(builder *b) {
    for (size_t i = 0; i < b->graph.n_input; i++) free_value_info(b->inputs[i]);
    for (size_t i = 0; i < b->graph.n_output; i++) free_value_info(b->outputs[i]);
    for (int i = 0; i < b->n_owned; i++) free(b->owned[i]);
    b->n_owned = 0;
}

static inline void write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

static inline const char *save(builder *b, const char *file) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", nn_test_dir, file);
    size_t len = onnx__model_proto__get_packed_size(&b->model);
    uint8_t *buf = malloc(len);
    onnx__model_proto__pack(&b->model, buf);
    write_bytes(path, buf, len);
    free(buf);
    return path;
}

#endif
