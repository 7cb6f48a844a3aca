/* Concat elimination.  When the concatenated slices are contiguous in the
 * output (every dimension before the axis is 1: a channel concat at batch 1),
 * each input gets its slice of the output's buffer, its producer writes
 * straight into place, and the Concat has nothing left to do.
 *
 * Concats are visited last to first, so that DenseNet's growing
 * concatenations (cat[x0], cat[x0,x1], ..., cat[x0..xn]) end up in one
 * buffer: the last one owns it, and each earlier one is its prefix, found
 * through an input that already has its place.  An input whose place
 * disagrees (it sits elsewhere already) leaves the Concat as a copy. */
#include "../ops/params.h"
#include "../ops/registry.h"
#include "pass.h"

static int64_t value_bytes(const nn_value *v) { return nn_tensor_elements(&v->t) * (int64_t)nn_dtype_size(v->t.dtype); }

/* An input that may move into the concat's buffer: a computed or fed value
 * that owns its memory today. */
static bool movable(const nn_graph *g, int v) {
    const nn_value *val = &g->values[v];
    if (val->is_const || val->alias >= 0) return false;
    if (val->producer >= 0) return !g->nodes[val->producer].elided;
    return val->is_input;
}

static bool try_concat(nn_graph *g, nn_node *c) {
    int out = c->out[0];
    const nn_value *o = &g->values[out];
    const nn_axis_params *p = c->params;
    int64_t axis;
    if (!o->shape_known || !p || !nn_axis_normalize(p->axis, o->t.ndim, &axis)) return false;
    if (nn_shape_elements(o->t.dims, (int)axis) != 1) return false; /* slices would be strided */
    int64_t tail =
        nn_shape_elements(o->t.dims + axis + 1, o->t.ndim - (int)axis - 1) * (int64_t)nn_dtype_size(o->t.dtype);
    /* where the output lives: its own buffer, or inside the buffer an input already sits in */
    int64_t base_off;
    int base = nn_value_root(g, out, &base_off);
    bool place_output = false;
    for (int64_t i = 0, off = 0; base == out && i < c->n_in; off += g->values[c->in[i]].t.dims[axis] * tail, i++) {
        int64_t at;
        int r = nn_value_root(g, c->in[i], &at);
        if (r != c->in[i] && at - off >= 0 && at - off + value_bytes(o) <= value_bytes(&g->values[r])) {
            base = r;
            base_off = at - off;
            place_output = true;
        }
    }
    /* every input must be movable, or already exactly in its slice */
    for (int i = 0; i < c->n_in; i++) {
        for (int j = 0; j < i; j++)
            if (c->in[j] == c->in[i]) return false; /* one value cannot sit in two slices */
        if (c->in[i] == base) return false;
    }
    for (int64_t i = 0, off = 0; i < c->n_in; off += g->values[c->in[i]].t.dims[axis] * tail, i++) {
        int64_t at;
        int r = nn_value_root(g, c->in[i], &at);
        bool in_place = r == base && at == base_off + off;
        if (!in_place && !(r == c->in[i] && movable(g, c->in[i]))) return false;
    }
    if (place_output) {
        g->values[out].alias = base;
        g->values[out].alias_offset = base_off;
    }
    for (int64_t i = 0, off = 0; i < c->n_in; off += g->values[c->in[i]].t.dims[axis] * tail, i++) {
        nn_value *v = &g->values[c->in[i]];
        if (nn_value_root(g, c->in[i], NULL) == c->in[i]) {
            v->alias = out;
            v->alias_offset = off;
        }
    }
    c->elided = true;
    return true;
}

static nn_status eliminate_concat(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    if (m->dynamic) return NN_OK; /* buffers are allocated per node there */
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        nn_node *c = &g->nodes[i];
        if (c->op == NN_OP_Concat && !c->elided && c->n_out == 1 && try_concat(g, c)) (*rewrites)++;
    }
    return NN_OK;
}

const nn_pass nn_pass_eliminate_concat = {"eliminate_concat",
                                          "let Concat inputs be written straight into their slice of the output",
                                          eliminate_concat, .memory = true};
