/* The CPU target's load-time step: each node's op precomputes what it can
 * from its constants (packed weights), the constants only the packing read
 * are freed, and the one scratch workspace is sized to the hungriest
 * kernel, knowing what each has prepared (a pre-packed operand needs no
 * packing room).  After memory planning, before the lanes' buffers. */
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "error.h"
#include "model.h"

/* Constants that a node's prepare repacked and nothing else reads are freed
 * as soon as they are packed, so the model never holds both forms. */
static void release_prepared_inputs(nn_model *m, int node, unsigned inputs) {
    nn_graph *g = &m->g;
    const nn_node *n = &g->nodes[node];
    for (int k = 0; k < n->n_in && k < 32; k++) {
        int v = n->in[k];
        if (!(inputs & (1u << k)) || v < 0 || !g->values[v].is_const || g->values[v].is_output) continue;
        bool shared = false;
        for (int i = 0; i < g->n_nodes && !shared; i++)
            for (int j = 0; j < g->nodes[i].n_in; j++)
                shared |= g->nodes[i].in[j] == v && (i != node || j != k);
        if (!shared && nn_arena_release(&g->weights, g->values[v].t.data)) {
            g->values[v].t.data = NULL;
            for (int l = 0; l < m->n_lanes; l++)
                m->lanes[l].rt[v].data = NULL;
        }
    }
}

/* Node i's call for prepare and workspace: shapes, and data for the
 * constants only (the rest would point into an arena not filled). */
static nn_call load_time_call(const nn_model *m, int i, nn_tensor *in, nn_tensor *out, char *err, size_t err_size) {
    const nn_graph *g = &m->g;
    const nn_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
        memset(&in[k], 0, sizeof in[k]);
        if (n->in[k] < 0) continue;
        in[k] = g->values[n->in[k]].t;
        if (!g->values[n->in[k]].is_const) in[k].data = NULL;
    }
    for (int k = 0; k < n->n_out; k++) {
        memset(&out[k], 0, sizeof out[k]);
        if (n->out[k] >= 0) out[k] = g->values[n->out[k]].t;
        out[k].data = NULL;
    }
    return nn_node_call(m, n, in, out, err, err_size);
}

nn_status nn_prepare_weights(nn_model *m) {
    nn_graph *g = &m->g;
    int max_io = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].n_in > max_io) max_io = g->nodes[i].n_in;
        if (g->nodes[i].n_out > max_io) max_io = g->nodes[i].n_out;
    }
    nn_tensor *in = calloc((size_t)max_io, sizeof *in), *out = calloc((size_t)max_io, sizeof *out);
    nn_status st = NN_OK;
    if (!in || !out) {
        st = nn_set_error(NN_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t ws = 0;
    char err[256];
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *n = &g->nodes[i];
        const nn_op_desc *d = nn_op_get(n->op);
        if (n->elided || (!d->workspace && !d->prepare)) continue;
        nn_call call = load_time_call(m, i, in, out, err, sizeof err);
        /* a plan from the cache comes with its prepared blocks */
        size_t bytes = d->prepare && !m->from_cache ? d->prepared_size(&call) : 0;
        if (bytes) {
            void *prepared = nn_arena_alloc(&g->weights, bytes);
            if (!prepared) {
                st = nn_set_error(NN_ERR_NOMEM, "node '%s': out of memory for %zu bytes of packed weights", n->name,
                                  bytes);
                goto done;
            }
            if ((st = d->prepare(&call, prepared)) != NN_OK) {
                st = nn_set_error(st, "node '%s' (%s): %s", n->name, d->name, err[0] ? err : nn_strerror(st));
                goto done;
            }
            n->prepared = call.prepared = prepared;
            n->prepared_size = bytes;
            release_prepared_inputs(m, i, d->prepared_inputs);
        }
        size_t need = d->workspace ? d->workspace(&call) : 0;
        if (need > ws) ws = need;
    }
    m->plan.workspace_bytes = ws;
done:
    free(in);
    free(out);
    return st;
}
