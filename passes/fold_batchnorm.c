/* BatchNormalization folding.  Inference BN is y = s * x + t per channel,
 * with s = scale / sqrt(var + epsilon) and t = B - mean * s (computed in
 * double, epsilon read from the node).  It folds into:
 *   Conv     W'[m] = W[m] * s[m],  b'[m] = b[m] * s[m] + t[m]
 *   Gemm     B' scaled along N,     C' = beta * C * s + t (beta becomes 1)
 *   MatMul   (2-D A, constant B) becomes a Gemm the same way
 * when the BN is the only reader of that node's output.  A BN that follows
 * anything else becomes a per-channel Mul + Add. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/params.h"
#include "../ops/registry.h"
#include "pass.h"

typedef struct affine {
    int64_t channels;
    double *s, *t;
} affine;

static const float *const_floats(const nn_graph *g, int v, int64_t count) {
    if (v < 0) return NULL;
    const nn_value *val = &g->values[v];
    if (!val->is_const || val->t.dtype != NN_DTYPE_FLOAT || nn_tensor_elements(&val->t) != count) return NULL;
    return val->t.data;
}

/* The BN's per-channel scale and shift; false when it cannot be folded. */
static bool bn_affine(const nn_graph *g, const nn_node *bn, affine *a) {
    if (bn->n_in != 5 || bn->n_out != 1 || bn->in[0] < 0) return false;
    const nn_value *x = &g->values[bn->in[0]];
    const nn_norm_params *p = bn->params;
    if (!x->shape_known || x->t.dtype != NN_DTYPE_FLOAT || x->t.ndim < 2 || (p && p->training_mode)) return false;
    int64_t c = x->t.dims[1];
    const float *scale = const_floats(g, bn->in[1], c), *bias = const_floats(g, bn->in[2], c),
                *mean = const_floats(g, bn->in[3], c), *var = const_floats(g, bn->in[4], c);
    if (!scale || !bias || !mean || !var) return false;
    a->channels = c;
    a->s = malloc(sizeof(double) * (size_t)c);
    a->t = malloc(sizeof(double) * (size_t)c);
    if (!a->s || !a->t) {
        free(a->s);
        free(a->t);
        return false;
    }
    double eps = p ? p->epsilon : 1e-5;
    for (int64_t i = 0; i < c; i++) {
        a->s[i] = scale[i] / sqrt((double)var[i] + eps);
        a->t[i] = bias[i] - mean[i] * a->s[i];
    }
    return true;
}

/* A constant named after the node: "<node>/<what>". */
static int new_const(nn_graph *g, const nn_node *n, const char *what, const nn_tensor *t) {
    char name[256];
    snprintf(name, sizeof name, "%s/%s", n->name, what);
    return nn_graph_add_const(g, name, t);
}

/* W'[m] = W[m] * s[m]: in place when this conv is W's only reader, so the
 * model does not carry a second copy of its conv weights. */
static bool fold_into_conv(nn_graph *g, const int *uses, nn_node *conv, nn_node *bn, const affine *a) {
    int w_id = conv->n_in > 1 ? conv->in[1] : -1;
    nn_value *w = w_id >= 0 ? &g->values[w_id] : NULL;
    if (!w || !w->is_const || w->t.dtype != NN_DTYPE_FLOAT || w->t.dims[0] != a->channels || conv->has_epilogue)
        return false;
    const float *b = conv->n_in > 2 ? const_floats(g, conv->in[2], a->channels) : NULL;
    if (conv->n_in > 2 && conv->in[2] >= 0 && !b) return false;
    int64_t per = nn_tensor_elements(&w->t) / a->channels;
    bool shared = uses[w_id] != 1 || w->is_output;
    nn_tensor bt = {NN_DTYPE_FLOAT, 1, {a->channels}, NULL};
    float *bd = malloc(sizeof(float) * (size_t)a->channels);
    float *wd = shared ? malloc(sizeof(float) * (size_t)(per * a->channels)) : w->t.data;
    bool ok = wd && bd;
    for (int64_t m = 0; ok && m < a->channels; m++) {
        for (int64_t j = 0; j < per; j++)
            wd[m * per + j] = (float)(((const float *)w->t.data)[m * per + j] * a->s[m]);
        bd[m] = (float)((b ? b[m] : 0.0) * a->s[m] + a->t[m]);
    }
    bt.data = bd;
    int wv = w_id;
    if (ok && shared) {
        nn_tensor wt = w->t;
        wt.data = wd;
        wv = new_const(g, conv, "W_bn", &wt);
    }
    int bv = ok ? new_const(g, conv, "B_bn", &bt) : -1;
    if (shared) free(wd);
    free(bd);
    if (wv < 0 || bv < 0) return false;
    conv->in[1] = wv;
    if (conv->n_in > 2)
        conv->in[2] = bv;
    else if (nn_node_append_input(g, conv, bv, 2) < 0)
        return false;
    nn_node_absorb(g, conv, bn, "BatchNormalization");
    return true;
}

/* Gemm (or a 2-D MatMul turned into one): scale B along N, fold the shift into C. */
static bool fold_into_gemm(nn_graph *g, nn_node *host, nn_node *bn, const affine *a) {
    bool is_matmul = host->op == NN_OP_MatMul;
    const nn_gemm_params identity = {1.0f, 1.0f, 0, 0};
    const nn_gemm_params *p = is_matmul ? &identity : host->params;
    const nn_value *av = &g->values[host->in[0]], *bv = host->in[1] >= 0 ? &g->values[host->in[1]] : NULL;
    if (!p || !bv || !bv->is_const || bv->t.ndim != 2 || bv->t.dtype != NN_DTYPE_FLOAT || av->t.ndim != 2 ||
        host->has_epilogue || g->values[host->out[0]].t.ndim != 2)
        return false;
    int64_t n = a->channels, k = p->trans_b ? bv->t.dims[1] : bv->t.dims[0];
    if ((p->trans_b ? bv->t.dims[0] : bv->t.dims[1]) != n) return false;
    /* C: absent, broadcast along rows ([N], [1,N], [1], scalar), or full [M,N] */
    const nn_value *cv = host->n_in > 2 && host->in[2] >= 0 ? &g->values[host->in[2]] : NULL;
    int64_t rows = 1;
    if (cv) {
        int64_t ce = nn_tensor_elements(&cv->t);
        if (!cv->is_const || cv->t.dtype != NN_DTYPE_FLOAT) return false;
        if (cv->t.ndim == 2 && cv->t.dims[0] != 1) rows = cv->t.dims[0];
        if (ce != 1 && ce != n * rows) return false;
        if (cv->t.ndim == 2 && cv->t.dims[1] != n && ce != 1) return false;
    }
    float *bd = malloc(sizeof(float) * (size_t)(n * k)), *cd = malloc(sizeof(float) * (size_t)(rows * n));
    bool ok = bd && cd;
    const float *b = bv->t.data, *c = cv ? cv->t.data : NULL;
    int64_t ce = cv ? nn_tensor_elements(&cv->t) : 0;
    for (int64_t i = 0; ok && i < k; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t at = p->trans_b ? j * k + i : i * n + j;
            bd[at] = (float)(b[at] * a->s[j]);
        }
    for (int64_t r = 0; ok && r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double cval = c ? c[ce == 1 ? 0 : r * n + j] : 0.0;
            cd[r * n + j] = (float)(p->beta * cval * a->s[j] + a->t[j]);
        }
    nn_tensor bt = bv->t, ct = {NN_DTYPE_FLOAT, rows > 1 ? 2 : 1, {rows > 1 ? rows : n, n}, cd};
    bt.data = bd;
    int nb = ok ? new_const(g, host, "B_bn", &bt) : -1, nc = ok ? new_const(g, host, "C_bn", &ct) : -1;
    free(bd);
    free(cd);
    nn_gemm_params np = *p;
    np.beta = 1.0f;
    if (nb < 0 || nc < 0 || !nn_node_set_params(g, host, &np, sizeof np)) return false;
    host->op = NN_OP_Gemm;
    host->in[1] = nb;
    if (host->n_in > 2)
        host->in[2] = nc;
    else if (nn_node_append_input(g, host, nc, 2) < 0)
        return false;
    if (is_matmul) nn_node_note_fused(g, host, "MatMul->Gemm");
    nn_node_absorb(g, host, bn, "BatchNormalization");
    return true;
}

/* BN -> Mul(x, s) + Add(., t) with [C, 1, ...] constants. */
static bool split_standalone(nn_graph *g, int at, const affine *a) {
    nn_node *bn = &g->nodes[at];
    /* a copy: adding values below may move g->values */
    const nn_tensor x = g->values[bn->in[0]].t;
    nn_tensor st = {NN_DTYPE_FLOAT, x.ndim - 1, {a->channels}, NULL};
    for (int d = 1; d < st.ndim; d++)
        st.dims[d] = 1;
    nn_tensor tt = st;
    float *sd = malloc(sizeof(float) * (size_t)a->channels), *td = malloc(sizeof(float) * (size_t)a->channels);
    bool ok = sd && td;
    for (int64_t c = 0; ok && c < a->channels; c++) {
        sd[c] = (float)a->s[c];
        td[c] = (float)a->t[c];
    }
    st.data = sd;
    tt.data = td;
    int sv = ok ? new_const(g, bn, "scale", &st) : -1, tv = ok ? new_const(g, bn, "shift", &tt) : -1;
    free(sd);
    free(td);
    char name[256];
    snprintf(name, sizeof name, "%s/scaled", g->nodes[at].name);
    int mid = sv >= 0 && tv >= 0 ? nn_graph_add_value(g, name) : -1;
    if (mid < 0) return false;
    g->values[mid].t = x;
    g->values[mid].t.data = NULL;
    g->values[mid].shape_known = true;
    snprintf(name, sizeof name, "%s/shift", g->nodes[at].name);
    if (nn_graph_insert_node(g, at + 1, name, NN_OP_Add, 2, 1) < 0) return false;
    bn = &g->nodes[at]; /* the node array may have moved */
    nn_node *add = &g->nodes[at + 1];
    add->in[0] = mid;
    add->in[1] = tv;
    add->out[0] = bn->out[0];
    g->values[bn->out[0]].producer = at + 1;
    bn->op = NN_OP_Mul;
    nn_node_set_params(g, bn, NULL, 0);
    bn->n_in = 2;
    bn->in[1] = sv;
    bn->out[0] = mid;
    g->values[mid].producer = at;
    nn_node_note_fused(g, bn, "BatchNormalization(scale)");
    nn_node_note_fused(g, add, "BatchNormalization(shift)");
    return true;
}

static nn_status fold_batchnorm(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    if (m->dynamic) return NN_OK; /* needs static shapes */
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].op != NN_OP_BatchNormalization) continue;
        affine a;
        if (!bn_affine(g, &g->nodes[i], &a)) continue;
        int x = g->nodes[i].in[0], p = g->values[x].producer;
        nn_node *host = p >= 0 && nn_fusable(g, uses, x) ? &g->nodes[p] : NULL;
        bool done = false;
        if (host && host->op == NN_OP_Conv)
            done = fold_into_conv(g, uses, host, &g->nodes[i], &a);
        else if (host && (host->op == NN_OP_Gemm || host->op == NN_OP_MatMul))
            done = fold_into_gemm(g, host, &g->nodes[i], &a);
        if (!done && split_standalone(g, i, &a)) {
            done = true;
            i++; /* skip the Add just inserted */
            free(uses);
            uses = nn_value_uses(g);
        }
        free(a.s);
        free(a.t);
        if (done) (*rewrites)++;
        if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    }
    free(uses);
    nn_graph_compact(g);
    return NN_OK;
}

const nn_pass nn_pass_fold_batchnorm = {
    "fold_batchnorm", "fold BatchNormalization into Conv/Gemm/MatMul weights, else into Mul+Add", fold_batchnorm};
