/* Activation fusion: an activation whose input comes from a node that
 * applies epilogues (Conv, Gemm, MatMul, binary arithmetic) becomes part of
 * that node, applied while the output is in cache.  Also recognizes SiLU
 * written as x * Sigmoid(x). */
#include <stdlib.h>

#include "../ops/registry.h"
#include "pass.h"

/* The producer of v, if it takes epilogues and has no activation yet. */
static nn_node *epilogue_host(nn_graph *g, int v) {
    int p = v >= 0 ? g->values[v].producer : -1;
    if (p < 0) return NULL;
    nn_node *host = &g->nodes[p];
    if (host->op < 0 || !(nn_op_get(host->op)->flags & NN_OPF_EPILOGUE) || host->n_out != 1) return NULL;
    if (host->has_epilogue && host->epilogue.act != NN_ACT_NONE) return NULL;
    return host;
}

/* host now writes the activation node's output, applying e */
static void absorb(nn_graph *g, nn_node *host, const nn_epilogue *e, nn_node *activation, const char *what) {
    if (!host->has_epilogue) host->epilogue.residual = -1;
    host->has_epilogue = true;
    host->epilogue.act = e->act;
    host->epilogue.alpha = e->alpha;
    host->epilogue.beta = e->beta;
    nn_node_absorb(g, host, activation, what);
}

/* Mul(x, Sigmoid(x)) with the Sigmoid read only by the Mul */
static bool fuse_silu(nn_graph *g, const int *uses, nn_node *mul) {
    if (mul->op != NN_OP_Mul || mul->n_in != 2) return false;
    for (int side = 0; side < 2; side++) {
        int x = mul->in[side], s = mul->in[1 - side];
        int sp = s >= 0 ? g->values[s].producer : -1;
        if (sp < 0 || g->nodes[sp].op != NN_OP_Sigmoid || g->nodes[sp].in[0] != x || !nn_fusable(g, uses, s)) continue;
        /* x is read by exactly the Sigmoid and the Mul */
        if (uses[x] != 2 || g->values[x].is_output) continue;
        nn_node *host = epilogue_host(g, x);
        if (!host) continue;
        nn_epilogue e = {.residual = -1, .act = NN_ACT_SILU};
        absorb(g, host, &e, mul, "SiLU");
        g->nodes[sp].op = -1;
        return true;
    }
    return false;
}

static nn_status fuse_activation(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *n = &g->nodes[i];
        if (n->op < 0) continue;
        if (fuse_silu(g, uses, n)) {
            (*rewrites)++;
            continue;
        }
        const nn_op_desc *d = nn_op_get(n->op);
        if (!d->as_activation || n->n_out != 1 || !nn_fusable(g, uses, n->in[0])) continue;
        nn_node *host = epilogue_host(g, n->in[0]);
        if (!host) continue;
        /* the activation's own inputs (Clip's bounds) must be constants */
        nn_tensor in[3] = {{0}};
        bool consts = n->n_in <= 3;
        for (int k = 0; consts && k < n->n_in; k++) {
            if (n->in[k] < 0) continue;
            in[k] = g->values[n->in[k]].t;
            consts = k == 0 || g->values[n->in[k]].is_const;
        }
        nn_epilogue e = {.residual = -1};
        nn_call call = {.params = n->params, .n_in = n->n_in, .n_out = 1, .in = in};
        if (!consts || !d->as_activation(&call, &e)) continue;
        absorb(g, host, &e, n, d->name);
        (*rewrites)++;
    }
    free(uses);
    nn_graph_compact(g);
    return NN_OK;
}

const nn_pass nn_pass_fuse_activation = {
    "fuse_activation", "fold activations (Relu, Clip, LeakyRelu, Sigmoid, HardSwish, SiLU ...) into their producer",
    fuse_activation};
