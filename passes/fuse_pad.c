/* Pad fusion: a Pad by zeros along the spatial axes, read only by a Conv
 * or an AveragePool, becomes that node's own padding, so the padded copy
 * is never made.  PyTorch writes avg_pool2d(padding=p, count_include_pad=
 * True) as such a Pad then an AveragePool without pads (Inception-v3's
 * branch pools); converters from TensorFlow write "SAME" convs as a Pad
 * then a Conv.  The window ops already treat their pads as zeros (a Conv)
 * or as counted zeros (an AveragePool with count_include_pad), so the
 * product is the same. */
#include <stdlib.h>
#include <string.h>

#include "../ops/geom.h"
#include "../ops/params.h"
#include "../ops/registry.h"
#include "pass.h"

/* The Pad's padding before and after each axis of its rank-`ndim` input,
 * when it pads by the constant zero and no axis shrinks; false otherwise
 * (another mode, a non-zero or unknown constant, pads not constants,
 * negative pads, axes given). */
static bool zero_pads(const nn_graph *g, const nn_node *pad, int ndim, int64_t *before, int64_t *after) {
    const nn_pad_params *p = pad->params;
    if (!p || pad->params_size != sizeof *p || p->mode != NN_PAD_CONSTANT) return false;
    int64_t pads[2 * NN_MAX_DIMS];
    int n = p->n_pads;
    if (n >= 0) { /* opset < 11: attributes */
        if (p->value != 0.0f) return false;
        memcpy(pads, p->pads, sizeof(int64_t) * (size_t)n);
    } else {
        if (pad->n_in < 2 || pad->in[1] < 0 || (pad->n_in > 3 && pad->in[3] >= 0)) return false;
        const nn_value *pv = &g->values[pad->in[1]];
        if (!pv->is_const || (pv->t.dtype != NN_DTYPE_INT64 && pv->t.dtype != NN_DTYPE_INT32)) return false;
        n = (int)nn_tensor_elements(&pv->t);
        if (n != 2 * ndim) return false;
        for (int i = 0; i < n; i++)
            pads[i] = nn_tensor_get_int(&pv->t, i);
        if (pad->n_in > 2 && pad->in[2] >= 0) { /* constant_value: a constant zero, or absent */
            const nn_value *cv = &g->values[pad->in[2]];
            if (!cv->is_const || cv->t.dtype != NN_DTYPE_FLOAT || nn_tensor_elements(&cv->t) != 1 ||
                ((const float *)cv->t.data)[0] != 0.0f)
                return false;
        }
    }
    if (n != 2 * ndim) return false;
    for (int d = 0; d < ndim; d++) {
        before[d] = pads[d];
        after[d] = pads[d + ndim];
        if (before[d] < 0 || after[d] < 0) return false;
    }
    return true;
}

/* The window's pads (begin for each spatial axis, then end) with the Pad's
 * spatial padding added; false when the window resolves its own pads
 * (auto_pad) or names too few of them. */
static bool add_window_pads(nn_window_attrs *w, int nsp, const int64_t *before, const int64_t *after) {
    if (w->auto_pad != NN_AUTO_PAD_NOTSET || nsp > NSP_MAX) return false;
    if (w->n_pads < 0) {
        w->n_pads = 2 * nsp;
        memset(w->pads, 0, sizeof w->pads);
    }
    if (w->n_pads != 2 * nsp) return false;
    for (int d = 0; d < nsp; d++) {
        w->pads[d] += before[2 + d];
        w->pads[nsp + d] += after[2 + d];
    }
    return true;
}

static bool all_zero(const int64_t *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i] != 0) return false;
    return true;
}

/* Give `host` (reading the Pad's output as its input 0) the Pad's spatial
 * padding in a copy of its params; false when that would change what it
 * computes. */
static nn_status absorb_pads(nn_graph *g, nn_node *host, int ndim, const int64_t *before, const int64_t *after,
                             bool *done) {
    *done = false;
    int nsp = ndim - 2;
    if (host->params_size == 0 || !host->params) return NN_OK;
    void *p = malloc(host->params_size);
    if (!p) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    memcpy(p, host->params, host->params_size);
    bool ok = false;
    if (host->op == NN_OP_Conv) {
        nn_window_attrs w;
        int64_t group;
        ok = nn_conv_window(p, &w, &group) && add_window_pads(&w, nsp, before, after) && nn_conv_set_window(p, &w);
    } else if (host->op == NN_OP_AveragePool && host->params_size == sizeof(nn_pool_params)) {
        /* The Pad's zeros are counted in every window that reaches them, as
         * count_include_pad counts padding; pads of the pool's own that do
         * not count cannot be told apart from them, and ceil_mode's
         * windows past the end would count the Pad's zeros but not its own. */
        nn_pool_params *pp = p;
        bool own = pp->w.n_pads > 0 && !all_zero(pp->w.pads, pp->w.n_pads);
        if (pp->ceil_mode == 0 && (!own || pp->count_include_pad == 1)) {
            ok = add_window_pads(&pp->w, nsp, before, after);
            pp->count_include_pad = 1;
        }
    }
    if (ok && !nn_node_set_params(g, host, p, host->params_size)) {
        free(p);
        return nn_set_error(NN_ERR_NOMEM, "out of memory");
    }
    free(p);
    *done = ok;
    return NN_OK;
}

static nn_status fuse_pad(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_status st = NN_OK;
    for (int i = 0; i < g->n_nodes && st == NN_OK; i++) {
        nn_node *pad = &g->nodes[i];
        if (pad->op != NN_OP_Pad || pad->n_in < 1 || pad->in[0] < 0 || pad->out[0] < 0) continue;
        const nn_value *x = &g->values[pad->in[0]];
        int ndim = x->t.ndim;
        if (!x->shape_known || x->t.dtype != NN_DTYPE_FLOAT || ndim < 3) continue;
        int at = nn_sole_consumer(g, uses, pad->out[0]);
        if (at < 0) continue;
        nn_node *host = &g->nodes[at];
        if ((host->op != NN_OP_Conv && host->op != NN_OP_AveragePool) || host->in[0] != pad->out[0] ||
            host->has_prologue)
            continue;
        int64_t before[NN_MAX_DIMS], after[NN_MAX_DIMS];
        /* batch and channels unpadded: only the window's axes */
        if (!zero_pads(g, pad, ndim, before, after) || before[0] || after[0] || before[1] || after[1]) continue;
        bool done;
        st = absorb_pads(g, host, ndim, before, after, &done);
        if (st != NN_OK || !done) continue;
        host->in[0] = pad->in[0];
        nn_node_note_fused(g, host, "Pad");
        pad->op = -1;
        (*rewrites)++;
    }
    free(uses);
    nn_graph_compact(g);
    return st;
}

const nn_pass nn_pass_fuse_pad = {"fuse_pad", "fold a Pad by zeros into the Conv or AveragePool that reads it",
                                  fuse_pad};
