/* Building ONNX models in C for tests, over the protobuf-c structs generated
 * from onnx.proto.  Models are written into `nn_test_dir` (created by the
 * test with mkdtemp). */
#ifndef NN_TEST_ONNX_BUILDER_H
#define NN_TEST_ONNX_BUILDER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

static char nn_test_dir[] = "/tmp/nn_test_XXXXXX";

/* ---- tiny model builder over the generated protobuf-c structs */
typedef struct builder {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset, *opsets[1];
    Onnx__NodeProto *nodes[16];
    Onnx__ValueInfoProto *inputs[4], *outputs[4];
    Onnx__TensorProto *inits[4];
} builder;

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

static inline Onnx__NodeProto *node(builder *b, const char *op, const char *name, const char *in0, const char *in1,
                             const char *out) {
    Onnx__NodeProto *n = calloc(1, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = (char *)op;
    n->name = (char *)name;
    n->input = calloc(2, sizeof(char *));
    n->input[0] = (char *)in0;
    n->input[1] = (char *)in1;
    n->n_input = in1 ? 2 : 1;
    n->output = calloc(1, sizeof(char *));
    n->output[0] = (char *)out;
    n->n_output = 1;
    b->nodes[b->graph.n_node++] = n;
    return n;
}

static inline Onnx__TensorProto *float_init(builder *b, const char *name, int ndim, const int64_t *dims, int n_values,
                                     float *values) {
    Onnx__TensorProto *t = calloc(1, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = 1;
    t->n_dims = (size_t)ndim;
    t->dims = (int64_t *)dims;
    t->n_float_data = (size_t)n_values;
    t->float_data = values;
    b->inits[b->graph.n_initializer++] = t;
    return t;
}

static inline void builder_free(builder *b) {
    for (size_t i = 0; i < b->graph.n_node; i++) {
        free(b->nodes[i]->input);
        free(b->nodes[i]->output);
        free(b->nodes[i]);
    }
    for (size_t i = 0; i < b->graph.n_input; i++) free_value_info(b->inputs[i]);
    for (size_t i = 0; i < b->graph.n_output; i++) free_value_info(b->outputs[i]);
    for (size_t i = 0; i < b->graph.n_initializer; i++) free(b->inits[i]);
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
