/* Small graph-editing helpers the passes share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "pass.h"

int *nn_value_uses(const nn_graph *g) {
    int *uses = calloc((size_t)g->n_values + 1, sizeof(int));
    if (!uses) return NULL;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) uses[g->nodes[i].in[k]]++;
    for (int i = 0; i < g->n_outputs; i++)
        uses[g->outputs[i]]++;
    return uses;
}

bool nn_fusable(const nn_graph *g, const int *uses, int v) { return v >= 0 && uses[v] == 1 && !g->values[v].is_output; }

int nn_sole_consumer(const nn_graph *g, const int *uses, int v) {
    if (!nn_fusable(g, uses, v)) return -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == v && g->nodes[i].op >= 0) return i;
    return -1;
}

int nn_graph_add_const(nn_graph *g, const char *name, const nn_tensor *t) {
    size_t bytes = (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype);
    void *data = nn_arena_memdup(&g->weights, t->data, bytes);
    if (!data) return -1;
    int v = nn_graph_add_value(g, name);
    if (v < 0) return -1;
    nn_value *val = &g->values[v];
    val->t = *t;
    val->t.data = data;
    val->is_const = val->shape_known = true;
    return v;
}

void nn_graph_replace_uses(nn_graph *g, int from, int to) {
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == from) g->nodes[i].in[k] = to;
}

void nn_graph_compact(nn_graph *g) {
    int w = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].op < 0) continue;
        g->nodes[w] = g->nodes[i];
        for (int k = 0; k < g->nodes[w].n_out; k++)
            if (g->nodes[w].out[k] >= 0) g->values[g->nodes[w].out[k]].producer = w;
        w++;
    }
    g->n_nodes = w;
}

int nn_node_append_input(nn_graph *g, nn_node *n, int value, int at_least_index) {
    int idx = n->n_in > at_least_index ? n->n_in : at_least_index;
    int *in = nn_arena_alloc(&g->meta, sizeof(int) * (size_t)(idx + 1));
    if (!in) return -1;
    for (int k = 0; k <= idx; k++)
        in[k] = k < n->n_in ? n->in[k] : -1;
    in[idx] = value;
    n->in = in;
    n->n_in = idx + 1;
    return idx;
}

void nn_node_absorb(nn_graph *g, nn_node *host, nn_node *absorbed, const char *what) {
    host->out[0] = absorbed->out[0];
    g->values[host->out[0]].producer = (int)(host - g->nodes);
    nn_node_note_fused(g, host, what);
    absorbed->op = -1;
}

bool nn_node_set_params(nn_graph *g, nn_node *n, const void *params, size_t size) {
    void *copy = params ? nn_arena_memdup(&g->meta, params, size) : NULL;
    if (params && !copy) return false;
    n->params = copy;
    n->params_size = params ? size : 0;
    return true;
}

void nn_node_note_fused(nn_graph *g, nn_node *n, const char *what) {
    size_t len = (n->fused ? strlen(n->fused) + 1 : 0) + strlen(what) + 1;
    char *s = nn_arena_alloc(&g->meta, len);
    if (!s) return; /* the label is for display only */
    snprintf(s, len, "%s%s%s", n->fused ? n->fused : "", n->fused ? "+" : "", what);
    n->fused = s;
}

int nn_graph_insert_node(nn_graph *g, int at, const char *name, int op, int n_in, int n_out) {
    int id = nn_graph_add_node(g, name, op, n_in, n_out);
    if (id < 0) return -1;
    nn_node node = g->nodes[id];
    memmove(&g->nodes[at + 1], &g->nodes[at], sizeof(nn_node) * (size_t)(g->n_nodes - 1 - at));
    g->nodes[at] = node;
    for (int i = at; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0) g->values[g->nodes[i].out[k]].producer = i;
    return at;
}

bool nn_float_elementwise(const nn_node *n) {
    switch (n->op) {
    case NN_OP_FusedElementwise:
    case NN_OP_Add:
    case NN_OP_Sub:
    case NN_OP_Mul:
    case NN_OP_Div:
    case NN_OP_Max:
    case NN_OP_Min:
    case NN_OP_Pow:
    case NN_OP_PRelu:
    case NN_OP_Clip: return true;
    /* the unary ones; BatchNormalization's inputs are per channel, not broadcasts */
    default: return n->op != NN_OP_BatchNormalization && (nn_op_get(n->op)->flags & NN_OPF_ELEMENTWISE) && n->n_in == 1;
    }
}
