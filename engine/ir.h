/* The engine's own IR: values (tensors) and nodes, owned by a graph.
 * Nothing here refers to protobuf; the ONNX importer fills it and frees the
 * protobuf before anything else runs. */
#ifndef NN_IR_H
#define NN_IR_H

#include <stdbool.h>
#include <stdint.h>

#include "../ops/op.h"
#include "arena.h"
#include "nn.h"

/* What a value holds (docs/sequences.md): a tensor, a sequence of tensors,
 * or an optional (of a tensor or a sequence).  At run time the kind shows
 * in the value's tensor dtype (ops/op.h: NN_DTYPE_SEQUENCE, NN_DTYPE_NONE). */
typedef enum nn_value_kind { NN_KIND_TENSOR = 0, NN_KIND_SEQUENCE, NN_KIND_OPTIONAL } nn_value_kind;

typedef struct nn_value {
    const char *name;
    nn_tensor t;      /* dtype and shape once inferred; t.data set for constants */
    int producer;     /* index of the producing node, -1 for graph inputs and constants */
    bool is_input;    /* fed by the caller */
    bool is_output;   /* returned to the caller */
    bool is_const;    /* value known at load time (initializer, Constant, folded) */
    bool shape_known; /* t's dtype and dims are valid */
    bool batched;     /* graph input/output whose dim 0 is the symbolic batch */
    int alias;        /* -1, or: this value's bytes lie inside value `alias`, at alias_offset */
    int64_t alias_offset;
    nn_value_kind kind;      /* declared for graph inputs and outputs, inferred for the rest */
    nn_value_kind elem_kind; /* an optional's element: NN_KIND_TENSOR or NN_KIND_SEQUENCE */
} nn_value;

typedef struct nn_node {
    const char *name;
    int op; /* nn_op_id */
    int n_in, n_out;
    int *in, *out; /* value ids; -1 marks an absent optional input */
    const void *params;
    size_t params_size;   /* bytes at params (plain bytes: see nn_parse_ctx) */
    const void *prepared; /* from the op's prepare at load (static plans) */
    size_t prepared_size;
    bool has_epilogue; /* set by fusion passes for ops with NN_OPF_EPILOGUE */
    nn_epilogue epilogue;
    bool has_prologue; /* set by passes/fuse_prologue.c for ops with NN_OPF_PROLOGUE */
    nn_prologue prologue;
    const char *fused; /* what fusion absorbed, e.g. "BatchNormalization+Relu"; NULL if nothing */
    bool elided;       /* nothing to run: its outputs alias memory that other nodes write
                        * (a view's output is its input; a Concat's inputs are its output's slices) */
} nn_node;

typedef struct nn_graph {
    nn_arena meta;    /* names, node arrays, op params, attribute tensors */
    nn_arena weights; /* constant tensor data */
    nn_value *values;
    int n_values, cap_values;
    nn_node *nodes;
    int n_nodes, cap_nodes;
    int *inputs, n_inputs;   /* graph inputs fed by the caller, in ONNX order */
    int *outputs, n_outputs; /* graph outputs, in ONNX order */
    int opset;
    /* Nested models for the GRAPH attributes of control-flow nodes
     * (docs/control-flow.md), owned here and freed with the graph. */
    struct nn_model **bodies;
    int n_bodies, cap_bodies;
    const char *name;         /* the GraphProto's name (bodies are named in errors) */
    nn_tensor *declared_out;  /* per output, its declared type (dims -1 where symbolic, ndim -1 if open) */
    bool external_data; /* some initializer was read from an external data file */
    int nodes_parsed;
    int64_t parameters;
    bool has_containers; /* some value is a sequence, an optional or strings: run dynamically, never cached */
} nn_graph;

/* Append a value / node; return its index or -1 when out of memory. */
int nn_graph_add_value(nn_graph *g, const char *name);
int nn_graph_add_node(nn_graph *g, const char *name, int op, int n_in, int n_out);
void nn_graph_free(nn_graph *g);
/* Record a body the graph owns; false when out of memory (the body is freed). */
bool nn_graph_add_body(nn_graph *g, struct nn_model *body);
/* Follow value aliases to the value that owns the memory; *offset gets the
 * byte offset of v inside it. */
int nn_value_root(const nn_graph *g, int v, int64_t *offset);

/* Check and establish topological order: every used value has exactly one
 * producer (or is an input/constant), and there are no cycles.  Reorders
 * g->nodes when the file listed them out of order. */
nn_status nn_graph_toposort(nn_graph *g);

#endif
