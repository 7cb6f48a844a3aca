/* GELU from the graphs exporters write for it, as one Gelu node (which
 * fuse_activation may then fold into its producer's epilogue):
 *     erf form:   x * 0.5 * (1 + Erf(x / sqrt 2))         (x * (1/sqrt 2) too)
 *     tanh form:  x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
 * with the cube as x * (x * x), (x * x) * x or Pow(x, 3), and the outer
 * product in any of its association orders. */
#include <math.h>
#include <stdlib.h>

#include "../ops/params.h"
#include "../ops/registry.h"
#include "pass.h"

/* The node producing v, when it has op `op`, no epilogue, and v is read once. */
static nn_node *from(nn_graph *g, const int *uses, int v, int op) {
    int p = v >= 0 ? g->values[v].producer : -1;
    if (p < 0 || g->nodes[p].op != op || g->nodes[p].has_epilogue || !nn_fusable(g, uses, v)) return NULL;
    return &g->nodes[p];
}

static bool is_const_scalar(const nn_graph *g, int v, float *out) {
    const nn_value *c = v >= 0 ? &g->values[v] : NULL;
    if (!c || !c->is_const || c->t.dtype != NN_DTYPE_FLOAT || !c->t.data || nn_tensor_elements(&c->t) != 1)
        return false;
    *out = *(const float *)c->t.data;
    return true;
}

static bool near(float a, double want) { return fabs((double)a - want) <= 1e-6 * fabs(want); }

/* A binary node with a constant scalar on one side: the other side's value, its constant in *k. */
static int other_than_scalar(const nn_graph *g, const nn_node *n, float *k) {
    if (n->n_in != 2) return -1;
    if (is_const_scalar(g, n->in[1], k)) return n->in[0];
    if (is_const_scalar(g, n->in[0], k)) return n->in[1];
    return -1;
}

/* x^3 as Pow(x, 3) or products of x with x * x; returns x. */
static int cube_of(nn_graph *g, const int *uses, int v, nn_node **dead) {
    float k;
    nn_node *n = from(g, uses, v, NN_OP_Pow);
    if (n) {
        dead[0] = n;
        return is_const_scalar(g, n->in[1], &k) && k == 3.0f ? n->in[0] : -1;
    }
    if (!(n = from(g, uses, v, NN_OP_Mul)) || n->n_in != 2) return -1;
    dead[0] = n;
    for (int side = 0; side < 2; side++) {
        nn_node *sq = from(g, uses, n->in[side], NN_OP_Mul);
        int x = n->in[1 - side];
        if (sq && sq->n_in == 2 && sq->in[0] == x && sq->in[1] == x) {
            dead[1] = sq;
            return x;
        }
    }
    return -1;
}

/* The argument u of Erf/Tanh: returns x when u is x / sqrt 2 (x * 1/sqrt 2)
 * for the erf form, sqrt(2/pi) * (x + 0.044715 x^3) for the tanh form. */
static int gelu_argument(nn_graph *g, const int *uses, int u, bool tanh_form, nn_node **dead) {
    float k;
    nn_node *n = from(g, uses, u, tanh_form ? NN_OP_Mul : NN_OP_Div);
    if (!tanh_form && !n) n = from(g, uses, u, NN_OP_Mul);
    if (!n) return -1;
    dead[0] = n;
    int inner = other_than_scalar(g, n, &k);
    if (inner < 0) return -1;
    if (!tanh_form) {
        bool div = n->op == NN_OP_Div;
        if (div && n->in[0] != inner) return -1; /* sqrt 2 / x */
        return near(k, div ? sqrt(2.0) : sqrt(0.5)) ? inner : -1;
    }
    if (!near(k, sqrt(2.0 / M_PI))) return -1;
    nn_node *add = from(g, uses, inner, NN_OP_Add);
    if (!add || add->n_in != 2) return -1;
    dead[1] = add;
    for (int side = 0; side < 2; side++) {
        int x = add->in[side];
        dead[2] = dead[3] = dead[4] = NULL; /* nothing from the other side's attempt */
        nn_node *scaled = from(g, uses, add->in[1 - side], NN_OP_Mul);
        if (!scaled) continue;
        int cube = other_than_scalar(g, scaled, &k);
        if (cube < 0 || !near(k, 0.044715)) continue;
        dead[2] = scaled;
        if (cube_of(g, uses, cube, dead + 3) == x) return x;
    }
    return -1;
}

/* From the Erf or Tanh node `f`: 1 + f(u), then the product with x and 0.5.
 * Rewrites the last Mul into Gelu and returns true. */
static bool fuse_one(nn_graph *g, const int *uses, nn_node *f, bool *nomem) {
    bool tanh_form = f->op == NN_OP_Tanh;
    nn_node *dead[16] = {0};
    int nd = 0;
    if (f->has_epilogue || !nn_fusable(g, uses, f->out[0])) return false;
    int x = gelu_argument(g, uses, f->in[0], tanh_form, dead);
    while (nd < 16 && dead[nd]) nd++;
    if (x < 0 || !g->values[x].shape_known || g->values[x].t.dtype != NN_DTYPE_FLOAT) return false;
    dead[nd++] = f;
    /* 1 + f */
    int sole = nn_sole_consumer(g, uses, f->out[0]);
    nn_node *one = sole >= 0 ? &g->nodes[sole] : NULL;
    float k;
    if (!one || one->op != NN_OP_Add || one->has_epilogue || other_than_scalar(g, one, &k) != f->out[0] || k != 1.0f)
        return false;
    dead[nd++] = one;
    /* the product of x, 0.5 and (1 + f), as two Muls in any order */
    int a = one->out[0];
    sole = nn_sole_consumer(g, uses, a);
    nn_node *m1 = sole >= 0 ? &g->nodes[sole] : NULL, *host = NULL;
    if (!m1 || m1->op != NN_OP_Mul || m1->has_epilogue || m1->n_in != 2) return false;
    int b = m1->in[0] == a ? m1->in[1] : m1->in[0];
    if (b == x) { /* (x * a) * 0.5 */
        sole = nn_sole_consumer(g, uses, m1->out[0]);
        nn_node *m2 = sole >= 0 ? &g->nodes[sole] : NULL;
        if (!m2 || m2->op != NN_OP_Mul || m2->has_epilogue || other_than_scalar(g, m2, &k) != m1->out[0] ||
            k != 0.5f)
            return false;
        dead[nd++] = m1;
        host = m2;
    } else if (is_const_scalar(g, b, &k)) { /* (a * 0.5) * x */
        if (k != 0.5f) return false;
        sole = nn_sole_consumer(g, uses, m1->out[0]);
        nn_node *m2 = sole >= 0 ? &g->nodes[sole] : NULL;
        if (!m2 || m2->op != NN_OP_Mul || m2->has_epilogue || m2->n_in != 2 ||
            (m2->in[0] == m1->out[0] ? m2->in[1] : m2->in[0]) != x)
            return false;
        dead[nd++] = m1;
        host = m2;
    } else { /* (x * 0.5) * a */
        nn_node *h = from(g, uses, b, NN_OP_Mul);
        if (!h || other_than_scalar(g, h, &k) != x || k != 0.5f) return false;
        dead[nd++] = h;
        host = m1;
    }
    const nn_value *out = &g->values[host->out[0]];
    if (!out->shape_known || out->t.ndim != g->values[x].t.ndim) return false;
    for (int d = 0; d < out->t.ndim; d++)
        if (out->t.dims[d] != g->values[x].t.dims[d]) return false;
    const nn_gelu_params p = {.tanh = tanh_form};
    int *in = nn_arena_alloc(&g->meta, sizeof(int));
    if (!in || !nn_node_set_params(g, host, &p, sizeof p)) return *nomem = true;
    in[0] = x;
    host->in = in;
    host->n_in = 1;
    host->op = NN_OP_Gelu;
    nn_node_note_fused(g, host, tanh_form ? "Gelu(tanh form)" : "Gelu(erf form)");
    for (int i = 0; i < nd; i++)
        if (dead[i] != host) dead[i]->op = -1;
    return true;
}

static nn_status fuse_gelu(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    bool nomem = false;
    for (int i = 0; i < g->n_nodes && !nomem; i++) {
        nn_node *n = &g->nodes[i];
        if ((n->op == NN_OP_Erf || n->op == NN_OP_Tanh) && n->n_in == 1 && fuse_one(g, uses, n, &nomem) && !nomem)
            (*rewrites)++;
    }
    free(uses);
    nn_graph_compact(g);
    return nomem ? nn_set_error(NN_ERR_NOMEM, "fuse_gelu: out of memory") : NN_OK;
}

const nn_pass nn_pass_fuse_gelu = {"fuse_gelu", "turn GELU's erf and tanh forms into one Gelu node", fuse_gelu};
