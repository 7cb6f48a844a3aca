/* The IR verifier: run between passes to catch a rewrite that broke the
 * graph before it turns into wrong numbers. */
#include <stdlib.h>
#include <string.h>

#include "../engine/error.h"
#include "../ops/registry.h"
#include "pass.h"

nn_status nn_verify_graph(nn_model *m, const char *after) {
    const nn_graph *g = &m->g;
    /* where each value gets defined: -2 = before the first node (input, constant) */
    int *defined = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    if (!defined) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_status st = NN_OK;
    for (int v = 0; v < g->n_values; v++)
        defined[v] = g->values[v].is_input || g->values[v].is_const ? -2 : -1;
    nn_tensor out[64];
    for (int i = 0; i < g->n_nodes && st == NN_OK; i++) {
        const nn_node *n = &g->nodes[i];
        const nn_op_desc *d = nn_op_get(n->op);
        if (!d) {
            st = nn_set_error(NN_ERR_INTERNAL, "after %s: node %d has no operator", after, i);
            break;
        }
        for (int k = 0; k < n->n_in && st == NN_OK; k++) {
            int v = n->in[k];
            if (v >= g->n_values || (v >= 0 && defined[v] == -1))
                st = nn_set_error(NN_ERR_INTERNAL, "after %s: node '%s' (%s) reads '%s' before it is produced", after,
                                  n->name, d->name, v >= 0 && v < g->n_values ? g->values[v].name : "?");
        }
        for (int k = 0; k < n->n_out && st == NN_OK; k++) {
            int v = n->out[k];
            if (v < 0) continue;
            if (defined[v] != -1)
                st = nn_set_error(NN_ERR_INTERNAL, "after %s: value '%s' has more than one producer", after,
                                  g->values[v].name);
            else if (g->values[v].producer != i)
                st = nn_set_error(NN_ERR_INTERNAL, "after %s: value '%s' names the wrong producer", after,
                                  g->values[v].name);
            defined[v] = i;
        }
        if (st != NN_OK || m->dynamic || n->n_out > 64) continue;
        /* shapes stored on the values must be what inference gives now */
        bool known = true;
        for (int k = 0; k < n->n_in; k++)
            known &= n->in[k] < 0 || g->values[n->in[k]].shape_known;
        if (!known) continue;
        nn_tensor *in = calloc((size_t)n->n_in + 1, sizeof *in);
        if (!in) {
            st = nn_set_error(NN_ERR_NOMEM, "out of memory");
            break;
        }
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) in[k] = g->values[n->in[k]].t;
        memset(out, 0, sizeof out);
        char err[256];
        nn_call call = nn_node_call(m, n, in, out, err, sizeof err);
        nn_status ist = d->infer(&call);
        if (ist != NN_OK && ist != NN_DYNAMIC)
            st = nn_set_error(NN_ERR_INTERNAL, "after %s: node '%s' (%s) no longer infers: %s", after, n->name, d->name,
                              err);
        for (int k = 0; ist == NN_OK && st == NN_OK && k < n->n_out; k++) {
            if (n->out[k] < 0) continue;
            const nn_tensor *t = &g->values[n->out[k]].t;
            bool same = t->dtype == out[k].dtype && t->ndim == out[k].ndim &&
                        !memcmp(t->dims, out[k].dims, sizeof(int64_t) * (size_t)t->ndim);
            if (!same)
                st = nn_set_error(NN_ERR_INTERNAL, "after %s: output '%s' of node '%s' (%s) has a stale shape", after,
                                  g->values[n->out[k]].name, n->name, d->name);
        }
        free(in);
    }
    for (int i = 0; i < g->n_outputs && st == NN_OK; i++)
        if (defined[g->outputs[i]] == -1)
            st = nn_set_error(NN_ERR_INTERNAL, "after %s: graph output '%s' is no longer produced", after,
                              g->values[g->outputs[i]].name);
    free(defined);
    return st;
}
