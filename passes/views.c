/* Views, not copies: Reshape, Flatten, Squeeze and Unsqueeze of contiguous
 * data only relabel the shape, so their output aliases their input's memory
 * (the planner gives both one buffer) and nothing runs for them.  So does a
 * Transpose that only moves axes of size 1 (torch's batch_first attention
 * at batch 1: [1, T, C] -> [T, 1, C]), its bytes being in order.  Runs
 * after Concat elimination: a view whose output is a slice of a Concat's
 * buffer puts its input in that slice. */
#include "../ops/geom.h"
#include "../ops/registry.h"
#include "pass.h"

/* A Transpose that keeps the axes larger than 1 in their order. */
static bool order_preserving_transpose(const nn_graph *g, const nn_node *n) {
    if (n->op != NN_OP_Transpose || n->n_in != 1 || n->in[0] < 0 || !g->values[n->in[0]].shape_known) return false;
    const nn_tensor *x = &g->values[n->in[0]].t;
    int64_t perm[NN_MAX_DIMS];
    char err[8];
    nn_call call = {.params = n->params, .n_in = 1, .in = x, .err = err, .err_size = sizeof err};
    if (nn_transpose_perm(&call, perm) != NN_OK) return false;
    int64_t last = -1;
    for (int j = 0; j < x->ndim; j++) {
        if (x->dims[perm[j]] == 1) continue;
        if (perm[j] < last) return false;
        last = perm[j];
    }
    return true;
}

static nn_status views(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    if (m->dynamic) return NN_OK; /* buffers are allocated per node there: nothing to alias */
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *n = &g->nodes[i];
        bool reshaping = n->op == NN_OP_Reshape || n->op == NN_OP_Flatten || n->op == NN_OP_Squeeze ||
                         n->op == NN_OP_Unsqueeze || order_preserving_transpose(g, n);
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

const nn_pass nn_pass_views = {
    "views", "let Reshape/Flatten/Squeeze/Unsqueeze, and Transposes of size-1 axes, alias their input", views,
    .memory = true};
