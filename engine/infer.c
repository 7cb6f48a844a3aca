/* Static shape inference at the bound batch size, with constant folding:
 * a node whose inputs are all known is evaluated once here, by the same CPU
 * kernels, and leaves the graph. */
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "error.h"
#include "model.h"
#include "onnx_tensor.h"

/* Whether a tensor of these dims has a byte size that fits in int64_t (and
 * so in every size computed from it). */
static bool bytes_fit(const nn_tensor *t) {
    int64_t n = nn_dims_checked_elements(t->dims, (size_t)t->ndim);
    return n >= 0 && n <= INT64_MAX / (int64_t)nn_dtype_size(t->dtype);
}

/* Check an inferred output shape before anything is sized from it. */
static nn_status check_output(const nn_node *n, const nn_tensor *t, int k) {
    if (!nn_dtype_size(t->dtype) || t->ndim < 0 || t->ndim > NN_MAX_DIMS)
        return nn_set_error(NN_ERR_INTERNAL, "node '%s' (%s): output %d got an invalid shape from inference", n->name,
                            nn_op_get(n->op)->name, k);
    if (!bytes_fit(t))
        return nn_set_error(NN_ERR_SHAPE, "node '%s' (%s): output %d has negative dims or its size overflows 64 bits",
                            n->name, nn_op_get(n->op)->name, k);
    return NN_OK;
}

/* An empty name stands for an absent optional input or output; one the
 * operator requires (and every output of a variadic one, Split's) must be
 * there, or its kernel would read or write through a missing buffer. */
nn_status nn_node_check_wiring(const nn_node *n, const nn_op_desc *d) {
    for (int k = 0; k < n->n_in && k < d->min_inputs; k++)
        if (n->in[k] < 0)
            return nn_set_error(NN_ERR_INVALID, "node '%s' (%s): input %d is required but has no name", n->name,
                                d->name, k);
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k] < 0 && (k < d->min_outputs || d->max_outputs < 0))
            return nn_set_error(NN_ERR_INVALID, "node '%s' (%s): output %d is required but has no name", n->name,
                                d->name, k);
    return NN_OK;
}

nn_status nn_bind_inputs(nn_model *m) {
    nn_graph *g = &m->g;
    /* a symbolic dim 0 is the batch, unless an op runs across it (an RNN's
     * time axis): then it stays a run-time dimension, so nothing splits it */
    bool dim0_batch = m->depth == 0; /* a body's inputs are whatever its node feeds it */
    for (int n = 0; n < g->n_nodes; n++)
        if (nn_op_get(g->nodes[n].op)->flags & NN_OPF_SPANS_DIM0) dim0_batch = false;
    for (int i = 0; i < g->n_inputs; i++) {
        nn_value *v = &g->values[g->inputs[i]];
        if (v->t.ndim < 0) {
            m->dynamic = true;
            continue;
        }
        bool known = true;
        for (int d = 0; d < v->t.ndim; d++) {
            if (v->t.dims[d] >= 0) continue;
            if (d == 0 && dim0_batch) {
                v->t.dims[0] = m->plan_batch;
                m->has_batch = true;
            } else {
                known = false; /* only the batch dimension is bound at load */
            }
        }
        v->shape_known = known;
        if (!dim0_batch) v->batched = false;
        if (!known) m->dynamic = true;
        if (known && nn_dtype_size(v->t.dtype) && !bytes_fit(&v->t))
            return nn_set_error(NN_ERR_SHAPE, "graph input '%s': its size overflows 64 bits", v->name);
    }
    return NN_OK;
}

static nn_status fold_node(nn_model *m, const nn_node *n, nn_call *call) {
    nn_graph *g = &m->g;
    const nn_op_desc *d = nn_op_get(n->op);
    for (int k = 0; k < n->n_out; k++) {
        size_t bytes = (size_t)nn_tensor_elements(&call->out[k]) * nn_dtype_size(call->out[k].dtype);
        call->out[k].data = nn_arena_alloc(&g->weights, bytes ? bytes : 1);
        if (!call->out[k].data) return nn_set_error(NN_ERR_NOMEM, "out of memory folding node '%s'", n->name);
    }
    size_t ws = d->workspace ? d->workspace(call) : 0;
    call->workspace = ws ? malloc(ws) : NULL;
    call->workspace_size = ws;
    if (ws && !call->workspace) return nn_set_error(NN_ERR_NOMEM, "out of memory folding node '%s'", n->name);
    nn_status st = d->run(call);
    free(call->workspace);
    if (st != NN_OK) return nn_set_error(st, "node '%s' (%s): %s", n->name, d->name, call->err);
    for (int k = 0; k < n->n_out; k++) {
        if (n->out[k] < 0) continue;
        nn_value *v = &g->values[n->out[k]];
        v->t.data = call->out[k].data;
        v->is_const = true;
        v->producer = -1;
    }
    return NN_OK;
}

nn_status nn_infer_graph(nn_model *m, bool fold, int *n_folded) {
    nn_graph *g = &m->g;
    nn_status st = NN_OK;
    int max_io = 1;
    *n_folded = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].n_in > max_io) max_io = g->nodes[i].n_in;
        if (g->nodes[i].n_out > max_io) max_io = g->nodes[i].n_out;
    }
    nn_tensor *in = calloc((size_t)max_io, sizeof *in), *out = calloc((size_t)max_io, sizeof *out);
    bool *folded = calloc((size_t)g->n_nodes + 1, 1);
    if (!in || !out || !folded) {
        st = nn_set_error(NN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *n = &g->nodes[i];
        const nn_op_desc *d = nn_op_get(n->op);
        if ((st = nn_node_check_wiring(n, d)) != NN_OK) goto done;
        bool known = true, all_const = true, outputs_known = true;
        for (int k = 0; k < n->n_out; k++)
            outputs_known &= n->out[k] < 0 || g->values[n->out[k]].shape_known;
        for (int k = 0; k < n->n_in; k++) {
            memset(&in[k], 0, sizeof in[k]);
            if (n->in[k] < 0) continue;
            const nn_value *v = &g->values[n->in[k]];
            known &= v->shape_known;
            all_const &= v->is_const;
            in[k] = v->t;
            if (!v->is_const) in[k].data = NULL;
        }
        if (!known) continue; /* downstream of a run-time shape */
        bool foldable = n->n_in == 0 || (fold && (all_const || (d->flags & NN_OPF_SHAPE_ONLY)));
        if (outputs_known && !foldable) continue; /* nothing new to learn */
        memset(out, 0, sizeof *out * (size_t)n->n_out);
        char err[256];
        nn_call call = nn_node_call(m, n, in, out, err, sizeof err);
        st = nn_op_check_dtypes(d, &call);
        if (st == NN_OK) st = d->infer(&call);
        if (st == NN_DYNAMIC) { /* left to run time */
            st = NN_OK;
            continue;
        }
        if (st != NN_OK) {
            st = nn_set_error(st, "node '%s' (%s): %s", n->name, d->name, err[0] ? err : nn_strerror(st));
            goto done;
        }
        for (int k = 0; k < n->n_out; k++) {
            if ((st = check_output(n, &out[k], k)) != NN_OK) goto done;
            if (n->out[k] < 0) continue;
            nn_value *v = &g->values[n->out[k]];
            v->t = out[k];
            v->t.data = NULL;
            v->shape_known = true;
        }
        if (foldable) {
            if ((st = fold_node(m, n, &call)) != NN_OK) goto done;
            folded[i] = true;
            (*n_folded)++;
        }
    }
    /* drop folded nodes, renumber producers */
    int w = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (folded[i]) continue;
        g->nodes[w] = g->nodes[i];
        for (int k = 0; k < g->nodes[w].n_out; k++)
            if (g->nodes[w].out[k] >= 0) g->values[g->nodes[w].out[k]].producer = w;
        w++;
    }
    g->n_nodes = w;
    /* Static once every value is known: folding may have resolved what an
     * earlier walk had to leave to run time. */
    m->dynamic = false;
    for (int i = 0; i < g->n_inputs; i++)
        m->dynamic |= !g->values[g->inputs[i]].shape_known;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            m->dynamic |= g->nodes[i].out[k] >= 0 && !g->values[g->nodes[i].out[k]].shape_known;
    nn_batch_refine_outputs(m);
done:
    free(in);
    free(out);
    free(folded);
    return st;
}
