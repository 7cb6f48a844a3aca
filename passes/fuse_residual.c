/* Residual fusion: Add(conv(x), r) becomes conv(x) with r added in its
 * epilogue, so the sum is formed while the conv's output tile is in cache
 * (and a following Relu then folds in too).  Works for any producer that
 * takes epilogues; the Add must not broadcast. */
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "pass.h"

static bool same_shape(const nn_tensor *a, const nn_tensor *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim);
}

static nn_status fuse_residual(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *add = &g->nodes[i];
        if (add->op != NN_OP_Add || add->n_in != 2 || add->has_epilogue) continue;
        const nn_tensor *out = &g->values[add->out[0]].t;
        if (out->dtype != NN_DTYPE_FLOAT) continue;
        for (int side = 0; side < 2; side++) {
            int main_in = add->in[side], residual = add->in[1 - side];
            if (main_in < 0 || residual < 0 || main_in == residual || !nn_fusable(g, uses, main_in)) continue;
            int p = g->values[main_in].producer;
            if (p < 0) continue;
            nn_node *host = &g->nodes[p];
            const nn_op_desc *hd = nn_op_get(host->op);
            if (!(hd->flags & NN_OPF_EPILOGUE) || host->n_out != 1 || host->has_epilogue) continue;
            const nn_value *r = &g->values[residual];
            if (!same_shape(&g->values[main_in].t, out) || !same_shape(&r->t, out)) continue;
            /* the host runs earlier than the Add: the residual must exist by then */
            if (r->producer >= p) continue;
            int at = nn_node_append_input(g, host, residual, hd->max_inputs);
            if (at < 0) {
                free(uses);
                return nn_set_error(NN_ERR_NOMEM, "out of memory");
            }
            host->has_epilogue = true;
            host->epilogue = (nn_epilogue){.residual = at, .act = NN_ACT_NONE};
            nn_node_absorb(g, host, add, "Add");
            (*rewrites)++;
            break;
        }
    }
    free(uses);
    nn_graph_compact(g);
    return NN_OK;
}

const nn_pass nn_pass_fuse_residual = {"fuse_residual", "add a residual input in the producer's epilogue",
                                       fuse_residual};
