/* layout_nhwc: int8 convs channels-last.  Every QLinearConv that the
 * channels-last op accepts (ops/qconv_nhwc.c: 2-D, dense with uint8 x and
 * channels a multiple of 4, or depthwise; constant weights with zero
 * points 0 / 128) becomes a QLinearConvNhwc, and the nodes around it that
 * do not care about the layout follow it, so that the bytes stay
 * channels-last from conv to conv:
 *
 *   elementwise nodes (QLinearAdd, QLookup, per-tensor QuantizeLinear and
 *   DequantizeLinear, FusedElementwise, the unary activations, Add, Sub,
 *   Mul, Div, Max, Min, PRelu, Clip) reading a channels-last value: every
 *   input of the output's shape is read channels-last, scalars as they
 *   are, and a per-channel operand ([C, 1, 1] or [N, C, 1, 1]: squeeze-
 *   excitation's scale) through a Reshape to [N, 1, 1, C], the same bytes;
 *   GlobalAveragePool of a channels-last value: GlobalAveragePoolNhwc,
 *   whose [N, C, 1, 1] output is the same either way.
 *
 * Where a region meets the rest of the graph, one Transpose per value and
 * direction moves the bytes: NCHW -> NHWC where a region node reads a
 * value from outside (or a graph input), NHWC -> NCHW where a value made
 * inside is read outside or returned.  The value keeps its name and NCHW
 * shape there; the region reads and writes a channels-last twin.  A value
 * that leaves through a Transpose and comes back through another (a later
 * round's new conv) is read from before the first.  Every node computes
 * what it computed before on the same elements, so the outputs are the
 * same bytes.
 *
 * Runs after fuse_qdq has made the QLinearConvs and QLinearAdds and after
 * constant folding and the elementwise fusions (static shapes, constant
 * weights, final nodes); QDQ ResNets, MobileNets and EfficientNets then run
 * channels-last from their first conv with 4k input channels to their
 * last.  A later round finds nothing left to convert. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/params.h"
#include "../ops/registry.h"
#include "pass.h"

static const int64_t TO_NHWC[4] = {0, 2, 3, 1}, TO_NCHW[4] = {0, 3, 1, 2};

static bool is_transpose(const nn_node *n, const int64_t *perm) {
    const nn_transpose_params *p = n->params;
    return n->op == NN_OP_Transpose && p && n->params_size == sizeof *p && p->n_perm == 4 &&
           memcmp(p->perm, perm, sizeof(int64_t) * 4) == 0;
}

static bool is_4d(const nn_graph *g, int v) {
    return v >= 0 && g->values[v].shape_known && g->values[v].t.ndim == 4 && g->values[v].kind == NN_KIND_TENSOR;
}

/* Whether the channels-last op takes this QLinearConv (its own infer
 * decides, on x's dims permuted: no copy of its rules here). */
static bool conv_accepted(const nn_model *m, const nn_node *n) {
    const nn_graph *g = &m->g;
    if (n->n_in < 8 || n->n_in > 9 || n->n_out != 1 || n->has_epilogue || n->has_prologue || !is_4d(g, n->in[0]))
        return false;
    nn_tensor in[9] = {{0}}, out[1] = {{0}};
    for (int k = 0; k < n->n_in; k++) {
        if (n->in[k] < 0) continue;
        if (!g->values[n->in[k]].shape_known) return false;
        in[k] = g->values[n->in[k]].t;
        if (!g->values[n->in[k]].is_const) in[k].data = NULL;
    }
    for (int k = 1; k < n->n_in; k++) /* weights, scales and zero points: constants */
        if (n->in[k] >= 0 && !g->values[n->in[k]].is_const) return false;
    const int64_t *d = g->values[n->in[0]].t.dims;
    int64_t nhwc[4] = {d[0], d[2], d[3], d[1]};
    memcpy(in[0].dims, nhwc, sizeof nhwc);
    char err[256];
    nn_call call = nn_node_call(m, n, in, out, err, sizeof err);
    return nn_op_get(NN_OP_QLinearConvNhwc)->infer(&call) == NN_OK;
}

/* How an elementwise node's input reads in the region. */
enum { IN_ABSENT, IN_SCALAR, IN_DATA, IN_CHANNEL };
enum { MAX_EW_INPUTS = 16 };

static bool elementwise_op(const nn_node *n) {
    return n->op == NN_OP_QLinearAdd || n->op == NN_OP_QLookup || n->op == NN_OP_QuantizeLinear ||
           n->op == NN_OP_DequantizeLinear || nn_float_elementwise(n);
}

/* An elementwise node the region can take: one 4-D output, every input of
 * its shape, a scalar, or per channel ([C, 1, 1], [1 or N, C, 1, 1]);
 * role[k] says which. */
static bool elementwise_roles(const nn_graph *g, const nn_node *n, int *role) {
    if (!elementwise_op(n) || n->n_out != 1 || n->has_prologue || n->n_in > MAX_EW_INPUTS || !is_4d(g, n->out[0]))
        return false;
    const nn_tensor *y = &g->values[n->out[0]].t;
    for (int k = 0; k < n->n_in; k++) {
        role[k] = IN_ABSENT;
        int v = n->in[k];
        if (v < 0) continue;
        const nn_value *val = &g->values[v];
        if (!val->shape_known || val->kind != NN_KIND_TENSOR || val->t.ndim > 4) return false;
        const nn_tensor *t = &val->t;
        if (nn_tensor_elements(t) == 1 || (n->op == NN_OP_QLookup && k == 1)) /* a scalar, or the table */
            role[k] = IN_SCALAR;
        else if (t->ndim == 4 && !memcmp(t->dims, y->dims, sizeof(int64_t) * 4))
            role[k] = IN_DATA;
        else if (t->ndim >= 3 && t->dims[t->ndim - 3] == y->dims[1] && t->dims[t->ndim - 2] == 1 &&
                 t->dims[t->ndim - 1] == 1 && (t->ndim == 3 || t->dims[0] == 1 || t->dims[0] == y->dims[0]) &&
                 nn_float_elementwise(n))
            role[k] = IN_CHANNEL; /* broadcasting ops only: Q / DQ per axis are not broadcasts */
        else
            return false;
    }
    return true;
}

typedef struct layout {
    nn_model *m;
    int n_values;  /* the arrays' length: values made here are twins or copies, never looked up */
    int *twin;     /* per value: its channels-last twin made this round, -1 */
    bool *nhwc;    /* per value: channels-last already (an earlier round's region) */
    int *to_nhwc;  /* per NCHW value: its Transpose'd copy, -1 */
    int *as_nhwc;  /* per per-channel value: its [N, 1, 1, C] Reshape, -1 */
    int *made;     /* values whose twin this round made: [n_made] */
    int n_made;
} layout;

/* A new value: v's shape with dims `dims`, named v's name + suffix. */
static int new_value(nn_graph *g, int v, int ndim, const int64_t *dims, const char *suffix) {
    char name[512];
    snprintf(name, sizeof name, "%s%s", g->values[v].name, suffix);
    int nv = nn_graph_add_value(g, name);
    if (nv < 0) return -1;
    nn_value *src = &g->values[v], *dst = &g->values[nv];
    dst->t = src->t;
    dst->t.data = NULL;
    dst->t.ndim = ndim;
    memcpy(dst->t.dims, dims, sizeof(int64_t) * (size_t)ndim);
    dst->shape_known = true;
    return nv;
}

static int permuted_value(nn_graph *g, int v, const int64_t *perm, const char *suffix) {
    int64_t dims[4];
    for (int k = 0; k < 4; k++)
        dims[k] = g->values[v].t.dims[perm[k]];
    return new_value(g, v, 4, dims, suffix);
}

/* Insert Transpose(perm) from `from` into `to` at node index `at`. */
static bool insert_transpose(nn_graph *g, int at, int from, int to, const int64_t *perm) {
    char name[512];
    snprintf(name, sizeof name, "%s/transpose", g->values[to].name);
    if (nn_graph_insert_node(g, at, name, NN_OP_Transpose, 1, 1) < 0) return false;
    nn_node *t = &g->nodes[at];
    nn_transpose_params p = {.n_perm = 4};
    memcpy(p.perm, perm, sizeof p.perm[0] * 4);
    if (!nn_node_set_params(g, t, &p, sizeof p)) return false;
    t->in[0] = from;
    t->out[0] = to;
    g->values[to].producer = at;
    return true;
}

/* The channels-last form of input value v for the region node at *at:
 * its twin, the NHWC value an NCHW Transpose was made from, or a new
 * Transpose inserted before *at (which then moves up one). */
static int nhwc_input(layout *L, int v, int *at) {
    nn_graph *g = &L->m->g;
    if (v < L->n_values && L->twin[v] >= 0) return L->twin[v];
    int p = g->values[v].producer;
    if (p >= 0 && is_transpose(&g->nodes[p], TO_NCHW)) return g->nodes[p].in[0];
    if (v < L->n_values && L->to_nhwc[v] >= 0) return L->to_nhwc[v];
    int nv = permuted_value(g, v, TO_NHWC, "/nhwc");
    if (nv < 0 || !insert_transpose(g, *at, v, nv, TO_NHWC)) return -1;
    (*at)++;
    if (v < L->n_values) L->to_nhwc[v] = nv;
    return nv;
}

/* A per-channel operand ([C, 1, 1] or [B, C, 1, 1]) as [B, 1, 1, C]: the
 * same bytes, through a Reshape inserted before *at. */
static int channel_input(layout *L, int v, int *at) {
    nn_graph *g = &L->m->g;
    if (v < L->n_values && L->as_nhwc[v] >= 0) return L->as_nhwc[v];
    const nn_tensor *t = &g->values[v].t;
    int64_t dims[4] = {t->ndim == 4 ? t->dims[0] : 1, 1, 1, t->dims[t->ndim - 3]};
    /* the batch copied from the operand (0), so that the node holds at any batch */
    int64_t target[4] = {t->ndim == 4 ? 0 : 1, 1, 1, dims[3]};
    int nv = new_value(g, v, 4, dims, "/nhwc");
    nn_tensor shape = {.dtype = NN_DTYPE_INT64, .ndim = 1, .dims = {4}, .data = target};
    char name[512];
    snprintf(name, sizeof name, "%s/nhwc_shape", g->values[v].name);
    int sv = nv >= 0 ? nn_graph_add_const(g, name, &shape) : -1;
    snprintf(name, sizeof name, "%s/nhwc_reshape", g->values[v].name);
    if (sv < 0 || nn_graph_insert_node(g, *at, name, NN_OP_Reshape, 2, 1) < 0) return -1;
    nn_node *r = &g->nodes[*at];
    nn_reshape_params rp = {.allowzero = 0, .n_shape = -1};
    if (!nn_node_set_params(g, r, &rp, sizeof rp)) return -1;
    r->in[0] = v;
    r->in[1] = sv;
    r->out[0] = nv;
    g->values[nv].producer = *at;
    (*at)++;
    if (v < L->n_values) L->as_nhwc[v] = nv;
    return nv;
}

/* Node *at into the region: its inputs by role (role NULL: input 0 alone,
 * a conv's), its output through a twin, or (GlobalAveragePool) kept. */
static bool convert(layout *L, int *at, const int *role) {
    nn_graph *g = &L->m->g;
    int n_in = g->nodes[*at].n_in;
    for (int k = 0; k < n_in; k++) {
        int r = role ? role[k] : k == 0 ? IN_DATA : IN_SCALAR;
        int v = g->nodes[*at].in[k], nv = v;
        if (v < 0) continue; /* an absent optional input (Clip's min before a max) */
        if (r == IN_DATA) nv = nhwc_input(L, v, at);
        if (r == IN_CHANNEL) nv = channel_input(L, v, at);
        if (nv < 0) return false;
        g->nodes[*at].in[k] = nv;
    }
    nn_node *n = &g->nodes[*at];
    if (n->op == NN_OP_QLinearConv) n->op = NN_OP_QLinearConvNhwc;
    if (n->op == NN_OP_GlobalAveragePool) { /* [N, C, 1, 1] either way: the output stays */
        n->op = NN_OP_GlobalAveragePoolNhwc;
        return true;
    }
    int y = n->out[0], ny = permuted_value(g, y, TO_NHWC, "/nhwc");
    if (ny < 0) return false;
    g->nodes[*at].out[0] = ny;
    g->values[ny].producer = *at;
    g->values[y].producer = -1; /* until its Transpose back, if anything reads it */
    L->twin[y] = ny;
    L->made[L->n_made++] = y;
    return true;
}

/* After the walk: each value whose twin was made and that something
 * outside the region still reads (or the caller gets) comes back through
 * a Transpose before its first reader. */
static bool transposes_back(layout *L) {
    nn_graph *g = &L->m->g;
    for (int i = 0; i < L->n_made; i++) {
        int y = L->made[i], ny = L->twin[y];
        int first = -1;
        for (int j = 0; j < g->n_nodes && first < 0; j++)
            for (int k = 0; k < g->nodes[j].n_in; k++)
                if (g->nodes[j].in[k] == y) {
                    first = j;
                    break;
                }
        if (first < 0 && !g->values[y].is_output) continue; /* read only inside the region */
        int at = first >= 0 ? first : g->values[ny].producer + 1;
        if (!insert_transpose(g, at, ny, y, TO_NCHW)) return false;
    }
    return true;
}

/* Whether input v is channels-last now: a twin made this round, or an
 * earlier round's region value. */
static bool region_value(const layout *L, int v) {
    return v >= 0 && v < L->n_values && (L->twin[v] >= 0 || L->nhwc[v]);
}

static nn_status layout_nhwc(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    if (m->dynamic) return NN_OK;
    int nv = g->n_values;
    layout L = {.m = m, .n_values = nv};
    L.twin = malloc(sizeof(int) * (size_t)(nv + 1));
    L.to_nhwc = malloc(sizeof(int) * (size_t)(nv + 1));
    L.as_nhwc = malloc(sizeof(int) * (size_t)(nv + 1));
    L.made = malloc(sizeof(int) * (size_t)(nv + 1));
    L.nhwc = calloc((size_t)nv + 1, sizeof(bool));
    nn_status st = NN_OK;
    if (!L.twin || !L.to_nhwc || !L.as_nhwc || !L.made || !L.nhwc) {
        st = nn_set_error(NN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int v = 0; v < nv; v++)
        L.twin[v] = L.to_nhwc[v] = L.as_nhwc[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *n = &g->nodes[i];
        int role[MAX_EW_INPUTS];
        bool convertible = false, already = false, ew = false;
        if (n->op == NN_OP_QLinearConv)
            convertible = conv_accepted(m, n);
        else if (n->op == NN_OP_GlobalAveragePool)
            convertible = n->n_in == 1 && n->n_out == 1 && region_value(&L, n->in[0]) && !L.nhwc[n->in[0]];
        else if (elementwise_roles(g, n, role)) {
            ew = true;
            bool fresh = false, old = false;
            for (int k = 0; k < n->n_in; k++)
                if (role[k] == IN_DATA) {
                    fresh |= n->in[k] < nv && L.twin[n->in[k]] >= 0;
                    old |= n->in[k] < nv && L.nhwc[n->in[k]];
                }
            already = old; /* an earlier round's region node: its data inputs are channels-last */
            convertible = fresh && !old;
        }
        if (convertible) {
            if (!convert(&L, &i, ew ? role : NULL)) {
                st = nn_set_error(NN_ERR_NOMEM, "out of memory");
                goto done;
            }
            (*rewrites)++;
            continue;
        }
        n = &g->nodes[i];
        if (n->n_out >= 1 && n->out[0] >= 0 && n->out[0] < nv &&
            (n->op == NN_OP_QLinearConvNhwc || is_transpose(n, TO_NHWC) || already))
            L.nhwc[n->out[0]] = true;
    }
    if (L.n_made && !transposes_back(&L)) st = nn_set_error(NN_ERR_NOMEM, "out of memory");
done:
    free(L.twin);
    free(L.to_nhwc);
    free(L.as_nhwc);
    free(L.made);
    free(L.nhwc);
    return st;
}

const nn_pass nn_pass_layout_nhwc = {"layout_nhwc",
                                     "run int8 convs (QLinearConv) channels-last, with the elementwise nodes and "
                                     "global pools between them, and Transposes where the region meets NCHW",
                                     layout_nhwc};
