/* Views, not copies: Reshape, Flatten, Squeeze and Unsqueeze of contiguous
 * data only relabel the shape, so their output aliases their input's memory
 * (the planner gives both one buffer) and nothing runs for them.  Runs
 * after Concat elimination: a view whose output is a slice of a Concat's
 * buffer puts its input in that slice. */
#include "../ops/registry.h"
#include "pass.h"

static nn_status views(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    if (m->dynamic) return NN_OK; /* buffers are allocated per node there: nothing to alias */
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *n = &g->nodes[i];
        bool reshaping =
            n->op == NN_OP_Reshape || n->op == NN_OP_Flatten || n->op == NN_OP_Squeeze || n->op == NN_OP_Unsqueeze;
        if (!reshaping || n->elided || n->n_out != 1 || n->in[0] < 0 || g->values[n->in[0]].is_const) continue;
        nn_value *out = &g->values[n->out[0]], *in = &g->values[n->in[0]];
        if (out->alias >= 0) {
            /* the output already has a place (a slice of an eliminated
             * Concat): the input moves there, if its memory is its own */
            bool owns = in->alias < 0 && (in->is_input || (in->producer >= 0 && !g->nodes[in->producer].elided));
            if (!owns) continue;
            in->alias = out->alias;
            in->alias_offset = out->alias_offset;
        }
        out->alias = n->in[0];
        out->alias_offset = 0;
        n->elided = true;
        (*rewrites)++;
    }
    return NN_OK;
}

const nn_pass nn_pass_views = {"views", "let Reshape/Flatten/Squeeze/Unsqueeze alias their input", views,
                               .memory = true};
