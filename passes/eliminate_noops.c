/* Dead code and no-op elimination: Identity, inference Dropout, Pad by
 * zeros, and Reshape/Flatten/Squeeze/Unsqueeze that leave the shape as it is
 * disappear; so do nodes whose outputs nobody reads. */
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "pass.h"

/* A node that passes input 0 through unchanged. */
static bool is_noop(const nn_graph *g, const nn_node *n) {
    const nn_value *in = n->n_in > 0 && n->in[0] >= 0 ? &g->values[n->in[0]] : NULL;
    const nn_value *out = n->out[0] >= 0 ? &g->values[n->out[0]] : NULL;
    if (!in || !out || !in->shape_known || !out->shape_known) return false;
    switch (n->op) {
    case NN_OP_Identity: return true;
    case NN_OP_Dropout: /* inference Dropout: an unused mask output is all it may add */
        return n->n_out == 1 || n->out[1] < 0;
    case NN_OP_Pad: { /* all-zero pads (from opset 11 they are an input) */
        const nn_value *pads = n->n_in > 1 && n->in[1] >= 0 ? &g->values[n->in[1]] : NULL;
        if (!pads || !pads->is_const || (pads->t.dtype != NN_DTYPE_INT64 && pads->t.dtype != NN_DTYPE_INT32))
            return false;
        for (int64_t i = 0; i < nn_tensor_elements(&pads->t); i++)
            if (nn_tensor_get_int(&pads->t, i) != 0) return false;
        return true;
    }
    case NN_OP_Reshape:
    case NN_OP_Flatten:
    case NN_OP_Squeeze:
    case NN_OP_Unsqueeze:
        return in->t.ndim == out->t.ndim &&
               nn_shape_elements(in->t.dims, in->t.ndim) == nn_shape_elements(out->t.dims, out->t.ndim) &&
               !memcmp(in->t.dims, out->t.dims, sizeof(int64_t) * (size_t)in->t.ndim);
    default: return false;
    }
}

static nn_status eliminate_noops(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    /* backwards, so a chain of dead nodes goes in one sweep */
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        nn_node *n = &g->nodes[i];
        bool read = false;
        for (int k = 0; k < n->n_out; k++)
            read |= n->out[k] >= 0 && uses[n->out[k]] > 0;
        if (!read) {
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0) uses[n->in[k]]--;
            n->op = -1;
            (*rewrites)++;
            continue;
        }
        if (!is_noop(g, n)) continue;
        int src = n->in[0], dst = n->out[0];
        if (!g->values[dst].is_output) {
            nn_graph_replace_uses(g, dst, src);
            uses[src] += uses[dst] - 1;
        } else {
            /* The output keeps its name: the producer of the input writes it
             * directly, when nothing else reads the input. */
            const nn_value *s = &g->values[src];
            if (s->is_input || s->is_const || s->is_output || uses[src] != 1) continue;
            nn_node *p = &g->nodes[s->producer];
            for (int k = 0; k < p->n_out; k++)
                if (p->out[k] == src) p->out[k] = dst;
            g->values[dst].producer = s->producer;
            g->values[src].producer = -1;
            uses[src] = 0;
        }
        n->op = -1;
        (*rewrites)++;
    }
    free(uses);
    nn_graph_compact(g);
    return NN_OK;
}

const nn_pass nn_pass_eliminate_noops = {
    "eliminate_noops", "drop Identity, inference Dropout, zero Pad, shape-preserving reshapes and dead nodes",
    eliminate_noops};
