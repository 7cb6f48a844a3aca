#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "error.h"
#include "ir.h"

static bool grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int ncap = *cap ? *cap * 2 : 64;
    while (ncap < need)
        ncap *= 2;
    void *q = realloc(*p, (size_t)ncap * elem);
    if (!q) return false;
    memset((char *)q + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
    *p = q;
    *cap = ncap;
    return true;
}

int nn_graph_add_value(nn_graph *g, const char *name) {
    if (!grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values)) return -1;
    nn_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = nn_arena_strdup(&g->meta, name);
    v->producer = -1;
    v->alias = -1;
    if (!v->name) return -1;
    return g->n_values++;
}

int nn_graph_add_node(nn_graph *g, const char *name, int op, int n_in, int n_out) {
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) return -1;
    nn_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->name = nn_arena_strdup(&g->meta, name);
    n->op = op;
    n->n_in = n_in;
    n->n_out = n_out;
    n->in = nn_arena_alloc(&g->meta, sizeof(int) * (size_t)(n_in ? n_in : 1));
    n->out = nn_arena_alloc(&g->meta, sizeof(int) * (size_t)(n_out ? n_out : 1));
    if (!n->name || !n->in || !n->out) return -1;
    return g->n_nodes++;
}

int nn_value_root(const nn_graph *g, int v, int64_t *offset) {
    int64_t off = 0;
    while (g->values[v].alias >= 0) {
        off += g->values[v].alias_offset;
        v = g->values[v].alias;
    }
    if (offset) *offset = off;
    return v;
}

bool nn_graph_add_body(nn_graph *g, struct nn_model *body) {
    if (!grow((void **)&g->bodies, &g->cap_bodies, g->n_bodies + 1, sizeof *g->bodies)) {
        nn_free(body);
        return false;
    }
    g->bodies[g->n_bodies++] = body;
    return true;
}

void nn_graph_free(nn_graph *g) {
    for (int i = 0; i < g->n_bodies; i++)
        nn_free(g->bodies[i]);
    free(g->bodies);
    free(g->values);
    free(g->nodes);
    nn_arena_free(&g->meta);
    nn_arena_free(&g->weights);
    memset(g, 0, sizeof *g);
}

/* ONNX requires nodes in topological order, but files in the wild are not
 * always so: keep the file's order when it is valid, else sort with Kahn's
 * algorithm (which also finds cycles). */
nn_status nn_graph_toposort(nn_graph *g) {
    int n = g->n_nodes;
    bool sorted_already = true;
    for (int i = 0; i < n; i++) {
        const nn_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_in; k++) {
            int v = nd->in[k];
            if (v < 0) continue;
            const nn_value *val = &g->values[v];
            if (val->producer < 0 && !val->is_input && !val->is_const)
                return nn_set_error(
                    NN_ERR_INVALID,
                    "node '%s' (%s): input '%s' is produced by no node and is not a graph input or initializer",
                    nd->name, nn_op_get(nd->op)->name, val->name);
            sorted_already &= val->producer < i;
        }
    }
    if (sorted_already) return NN_OK;

    nn_status st = NN_OK;
    int *pending = calloc((size_t)n + 1, sizeof(int)); /* unmet inputs per node */
    int *order = calloc((size_t)n + 1, sizeof(int));   /* ready queue, then the result */
    nn_node *sorted = malloc(sizeof(nn_node) * ((size_t)n + 1));
    if (!pending || !order || !sorted) {
        st = nn_set_error(NN_ERR_NOMEM, "out of memory sorting %d nodes", n);
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0 && g->values[g->nodes[i].in[k]].producer >= 0) pending[i]++;
    int head = 0, tail = 0;
    for (int i = 0; i < n; i++)
        if (!pending[i]) order[tail++] = i;
    while (head < tail) {
        int i = order[head++];
        for (int k = 0; k < g->nodes[i].n_out; k++) {
            int v = g->nodes[i].out[k];
            if (v < 0) continue;
            /* consumers: a scan is fine, this only runs for unsorted files, once */
            for (int j = 0; j < n; j++)
                for (int m = 0; m < g->nodes[j].n_in; m++)
                    if (g->nodes[j].in[m] == v && --pending[j] == 0) order[tail++] = j;
        }
    }
    if (tail != n) {
        for (int i = 0; i < n; i++)
            if (pending[i]) {
                st = nn_set_error(NN_ERR_INVALID, "graph has a cycle through node '%s'", g->nodes[i].name);
                break;
            }
        goto done;
    }
    for (int i = 0; i < n; i++)
        sorted[i] = g->nodes[order[i]];
    memcpy(g->nodes, sorted, sizeof(nn_node) * (size_t)n);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0) g->values[g->nodes[i].out[k]].producer = i;
done:
    free(pending);
    free(order);
    free(sorted);
    return st;
}
