/* LayerNormalization from its exported decomposition (torch's nn.LayerNorm
 * at opset <= 16):
 *     mean = ReduceMean(X); d = Sub(X, mean); var = ReduceMean(Pow(d, 2))
 *     Y = Div(d, Sqrt(Add(var, eps))) [* gamma] [+ beta]
 * becomes one LayerNormalization node over the reduced trailing dims.  The
 * reduced axes are read from the static shapes (ReduceMean keeps them as 1),
 * so axes given as an attribute or as an input are handled alike. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/params.h"
#include "../ops/registry.h"
#include "pass.h"

/* The node producing v when its op is `op` and v is read by one node only, else NULL. */
static nn_node *sole_from(nn_graph *g, const int *uses, int v, int op) {
    int p = v >= 0 ? g->values[v].producer : -1;
    if (p < 0 || g->nodes[p].op != op || g->nodes[p].has_epilogue || !nn_fusable(g, uses, v)) return NULL;
    return &g->nodes[p];
}

/* The node (other than `not`) reading v; v must have no other reader. */
static nn_node *reader(nn_graph *g, int v, const nn_node *not, int op) {
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *n = &g->nodes[i];
        if (n == not || n->op < 0) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == v) return n->op == op && !n->has_epilogue ? n : NULL;
    }
    return NULL;
}

static bool float_shape(const nn_value *v) { return v->shape_known && v->t.dtype == NN_DTYPE_FLOAT; }

/* A constant float scalar (any shape of one element). */
static bool const_scalar(const nn_graph *g, int v, float *out) {
    const nn_value *c = v >= 0 ? &g->values[v] : NULL;
    if (!c || !c->is_const || c->t.dtype != NN_DTYPE_FLOAT || !c->t.data || nn_tensor_elements(&c->t) != 1)
        return false;
    *out = *(const float *)c->t.data;
    return true;
}

static bool same_shape(const nn_tensor *a, const nn_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* The first reduced axis when `mean` (keepdims) reduces x over trailing dims
 * [axis, rank) and no others; -1 otherwise.  A dim of 1 may count either way. */
static int reduced_axis(const nn_tensor *x, const nn_tensor *mean) {
    if (x->ndim != mean->ndim || x->ndim < 1) return -1;
    int axis = x->ndim;
    while (axis > 0 && mean->dims[axis - 1] == 1) axis--;
    for (int d = 0; d < axis; d++)
        if (mean->dims[d] != x->dims[d]) return -1;
    /* statistics over size-1 dims only: a no-op the pattern does not mean */
    return axis < x->ndim ? axis : -1;
}

/* The operand of a Mul/Add that is not `main`, when it is a float constant
 * holding one value per normalized element (shaped like x's dims[axis:],
 * with leading 1s), so that it neither broadcasts the result nor varies
 * along the statistics' rows. */
static int affine_operand(const nn_graph *g, const nn_node *n, int main, const nn_tensor *x, int axis) {
    if (n->n_in != 2 || (n->in[0] == main) == (n->in[1] == main)) return -1;
    int v = n->in[0] == main ? n->in[1] : n->in[0];
    const nn_tensor *t = &g->values[v].t;
    if (!g->values[v].is_const || t->dtype != NN_DTYPE_FLOAT || !t->data || t->ndim > x->ndim) return -1;
    for (int j = 0; j < t->ndim; j++) {
        int64_t td = t->dims[t->ndim - 1 - j];
        int xd = x->ndim - 1 - j;
        if (xd >= axis ? td != x->dims[xd] : td != 1) return -1;
    }
    if (t->ndim < x->ndim - axis) return -1; /* would broadcast along normalized dims */
    if (!same_shape(&g->values[n->out[0]].t, x)) return -1;
    return v;
}

/* A constant shaped like x's dims[axis:] holding t's data (or `fill` where t is NULL). */
static int normalized_const(nn_graph *g, const nn_node *node, const char *what, const nn_tensor *x, int axis,
                            const nn_tensor *t, float fill) {
    char name[256];
    snprintf(name, sizeof name, "%s/%s", node->name, what);
    nn_tensor c = {.dtype = NN_DTYPE_FLOAT, .ndim = x->ndim - axis};
    memcpy(c.dims, x->dims + axis, sizeof(int64_t) * (size_t)c.ndim);
    int64_t n = nn_tensor_elements(&c);
    float *data = t ? NULL : malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!t && !data) return -1;
    for (int64_t i = 0; !t && i < n; i++) data[i] = fill;
    c.data = t ? t->data : data;
    int v = nn_graph_add_const(g, name, &c);
    free(data);
    return v;
}

/* Match the decomposition whose Sub is `sub`; rewrite it and return true. */
static bool fuse_one(nn_graph *g, const int *uses, nn_node *sub, bool *nomem) {
    if (sub->n_in != 2 || sub->has_epilogue) return false;
    int x = sub->in[0], dv = sub->out[0];
    nn_node *mean = sole_from(g, uses, sub->in[1], NN_OP_ReduceMean);
    if (!mean || mean->in[0] != x || !float_shape(&g->values[x]) || !float_shape(&g->values[dv])) return false;
    const nn_tensor *xt = &g->values[x].t;
    int axis = reduced_axis(xt, &g->values[mean->out[0]].t);
    if (axis < 0 || !same_shape(&g->values[dv].t, xt)) return false;
    /* d is read by the Pow and the Div only */
    if (uses[dv] != 2 || g->values[dv].is_output) return false;
    nn_node *pow = NULL, *div = NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *n = &g->nodes[i];
        if (n->op == NN_OP_Pow && n->n_in == 2 && n->in[0] == dv) pow = n;
        if (n->op == NN_OP_Div && n->n_in == 2 && n->in[0] == dv) div = n;
    }
    float two, eps;
    if (!pow || !div || pow->has_epilogue || div->has_epilogue || !const_scalar(g, pow->in[1], &two) || two != 2.0f)
        return false;
    nn_node *var = reader(g, pow->out[0], NULL, NN_OP_ReduceMean);
    if (!var || !nn_fusable(g, uses, pow->out[0]) || var->in[0] != pow->out[0] ||
        !same_shape(&g->values[var->out[0]].t, &g->values[mean->out[0]].t) || !nn_fusable(g, uses, var->out[0]))
        return false;
    nn_node *add = reader(g, var->out[0], NULL, NN_OP_Add);
    if (!add || add->n_in != 2 || !nn_fusable(g, uses, add->out[0])) return false;
    if (!const_scalar(g, add->in[add->in[0] == var->out[0]], &eps) || !isfinite(eps) || eps < 0.0f) return false;
    nn_node *sqrt = reader(g, add->out[0], NULL, NN_OP_Sqrt);
    if (!sqrt || !nn_fusable(g, uses, sqrt->out[0]) || div->in[1] != sqrt->out[0]) return false;
    if (!same_shape(&g->values[div->out[0]].t, xt)) return false;

    /* the optional affine part: * gamma, then + beta */
    nn_node *host = div, *mul = NULL, *bias = NULL;
    int gamma = -1, beta = -1;
    nn_node *n = nn_fusable(g, uses, host->out[0]) ? reader(g, host->out[0], NULL, NN_OP_Mul) : NULL;
    if (n && (gamma = affine_operand(g, n, host->out[0], xt, axis)) >= 0) host = mul = n;
    n = nn_fusable(g, uses, host->out[0]) ? reader(g, host->out[0], NULL, NN_OP_Add) : NULL;
    if (n && (beta = affine_operand(g, n, host->out[0], xt, axis)) >= 0) host = bias = n;

    /* LayerNormalization's Scale and B broadcast over dims[axis:] only: give
     * them that rank (an all-ones Scale where there was no Mul) */
    if (gamma < 0 || g->values[gamma].t.ndim != xt->ndim - axis) {
        const nn_tensor *t = gamma >= 0 ? &g->values[gamma].t : NULL;
        if ((gamma = normalized_const(g, mul ? mul : div, "scale", xt, axis, t, 1.0f)) < 0) return *nomem = true;
        xt = &g->values[x].t; /* values may have moved */
    }
    if (beta >= 0 && g->values[beta].t.ndim != xt->ndim - axis) {
        if ((beta = normalized_const(g, bias, "bias", xt, axis, &g->values[beta].t, 0.0f)) < 0) return *nomem = true;
        xt = &g->values[x].t;
    }
    nn_norm_params p;
    memset(&p, 0, sizeof p); /* the padding too: the plan cache stores these bytes */
    p.epsilon = eps;
    p.axis = axis;
    p.spatial = 1;
    int *in = nn_arena_alloc(&g->meta, sizeof(int) * 3);
    if (!in || !nn_node_set_params(g, host, &p, sizeof p)) return *nomem = true;
    in[0] = x;
    in[1] = gamma;
    in[2] = beta;
    host->in = in;
    host->n_in = beta >= 0 ? 3 : 2;
    host->op = NN_OP_LayerNormalization;
    nn_node_note_fused(g, host, "ReduceMean+Sub+Pow+ReduceMean+Add+Sqrt+Div");
    if (mul) nn_node_note_fused(g, host, "Mul");
    if (bias) nn_node_note_fused(g, host, "Add");
    nn_node *dead[] = {mean, sub, pow, var, add, sqrt, div, mul};
    for (size_t k = 0; k < sizeof dead / sizeof *dead; k++)
        if (dead[k] && dead[k] != host) dead[k]->op = -1;
    return true;
}

static nn_status fuse_layernorm(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    bool nomem = false;
    for (int i = 0; i < g->n_nodes && !nomem; i++) {
        if (g->nodes[i].op != NN_OP_Sub) continue;
        if (fuse_one(g, uses, &g->nodes[i], &nomem) && !nomem) (*rewrites)++;
    }
    free(uses);
    nn_graph_compact(g);
    return nomem ? nn_set_error(NN_ERR_NOMEM, "fuse_layernorm: out of memory") : NN_OK;
}

const nn_pass nn_pass_fuse_layernorm = {
    "fuse_layernorm", "turn LayerNorm's ReduceMean/Sub/Pow/Sqrt/Div decomposition into one LayerNormalization",
    fuse_layernorm};
