/* Elementwise chain fusion: a run of float elementwise nodes, each the only
 * reader of the one before, becomes one FusedElementwise node
 * (ops/fused_elementwise.h) that reads its input once and writes its output
 * once.  DenseNet's BatchNormalization after a Concat, folded to
 * Mul(x, scale) + Add(., shift) with the Relu in the Add's epilogue, is the
 * typical chain.
 *
 * It runs after the epilogue fusions, which put activations and residual
 * Adds straight into a Conv or Gemm: what is left are chains whose head is
 * not such a producer.  A chain must have two nodes at least; one node (an
 * Add with its Relu epilogue, say) is one pass over memory already.
 *
 * A node joins when it is unary (an activation with an as_activation hook,
 * or simple math), or binary with the running value on one side and on the
 * other an operand that lies along one run of the output's dims (the same
 * shape, per channel, a trailing vector, a scalar), and the output keeps the
 * chain's shape.  The FusedElementwise node takes the place of the chain's
 * last node: every operand is produced before that. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/fused_elementwise.h"
#include "../ops/registry.h"
#include "pass.h"

typedef struct chain {
    nn_ew_program prog;
    int inputs[NN_EW_MAX_INPUTS], n_inputs; /* value ids; inputs[0] is the chain's input */
    int nodes[NN_EW_MAX_STEPS], n_nodes;
    char label[256];
} chain;

static const nn_tensor *shape_of(const nn_graph *g, int v) {
    const nn_value *val = v >= 0 ? &g->values[v] : NULL;
    return val && val->shape_known && val->t.dtype == NN_DTYPE_FLOAT ? &val->t : NULL;
}

static bool same_shape(const nn_tensor *a, const nn_tensor *b) {
    return a && b && a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim);
}

static int ew_opcode(int op) {
    switch (op) {
#define NN_EW_CASE(name, expr)                                                                                         \
    case NN_OP_##name: return NN_EW_##name;
        NN_EW_UNARY_OPS(NN_EW_CASE)
        NN_EW_BINARY_OPS(NN_EW_CASE)
#undef NN_EW_CASE
    case NN_OP_Sum: return NN_EW_Add; /* two inputs only, checked by the caller */
    default: return -1;
    }
}

static const char *act_name(nn_act a) {
    switch (a) {
    case NN_ACT_RELU: return "Relu";
    case NN_ACT_CLIP: return "Clip";
    case NN_ACT_LEAKY_RELU: return "LeakyRelu";
    case NN_ACT_SIGMOID: return "Sigmoid";
    case NN_ACT_HARD_SIGMOID: return "HardSigmoid";
    case NN_ACT_HARD_SWISH: return "HardSwish";
    case NN_ACT_SILU: return "SiLU";
    case NN_ACT_TANH: return "Tanh";
    case NN_ACT_GELU:
    case NN_ACT_GELU_TANH: return "Gelu";
    case NN_ACT_NONE: break;
    }
    return "?";
}

/* The input index holding value v, added if new; -1 when the node is full. */
static int chain_input(chain *c, int v) {
    for (int k = 0; k < c->n_inputs; k++)
        if (c->inputs[k] == v) return k;
    if (c->n_inputs == NN_EW_MAX_INPUTS) return -1;
    c->inputs[c->n_inputs] = v;
    return c->n_inputs++;
}

/* Append a step.  Mul then Add by operands shaped alike (a folded
 * BatchNormalization), and an activation after that, become one MulAdd
 * step: one loop instead of three. */
static bool add_step(const nn_graph *g, chain *c, nn_ew_step s, const char *what) {
    nn_ew_step *prev = c->prog.n_steps ? &c->prog.steps[c->prog.n_steps - 1] : NULL;
    if (prev && prev->op == NN_EW_Mul && s.op == NN_EW_Add &&
        same_shape(&g->values[c->inputs[prev->operand]].t, &g->values[c->inputs[s.operand]].t)) {
        *prev = (nn_ew_step){.op = NN_EW_MulAdd, .operand = prev->operand, .operand2 = s.operand};
    } else if (prev && prev->op == NN_EW_MulAdd && prev->act == NN_ACT_NONE && s.op == NN_EW_Act) {
        prev->act = s.act;
        prev->alpha = s.alpha;
        prev->beta = s.beta;
    } else if (c->prog.n_steps < NN_EW_MAX_STEPS) {
        c->prog.steps[c->prog.n_steps++] = s;
    } else {
        return false;
    }
    size_t len = strlen(c->label);
    snprintf(c->label + len, sizeof c->label - len, "%s%s", len ? "+" : "", what);
    return true;
}

static bool add_binary(const nn_graph *g, chain *c, int opcode, int operand, bool swap, const char *what) {
    int k = chain_input(c, operand);
    return k >= 0 && add_step(g, c, (nn_ew_step){.op = opcode, .operand = k, .swap = swap}, what);
}

/* An activation node as one step, when its extra inputs (Clip's bounds) are constants. */
static bool add_activation(const nn_graph *g, chain *c, const nn_node *n) {
    const nn_op_desc *d = nn_op_get(n->op);
    nn_tensor in[3] = {{0}};
    if (n->n_in > 3) return false;
    for (int k = 0; k < n->n_in; k++) {
        if (n->in[k] < 0) continue;
        if (k > 0 && !g->values[n->in[k]].is_const) return false;
        in[k] = g->values[n->in[k]].t;
    }
    nn_epilogue e = {.residual = -1};
    nn_call call = {.params = n->params, .n_in = n->n_in, .n_out = 1, .in = in};
    if (!d->as_activation(&call, &e) || e.act == NN_ACT_NONE) return false;
    return add_step(g, c, (nn_ew_step){.op = NN_EW_Act, .act = e.act, .alpha = e.alpha, .beta = e.beta}, d->name);
}

/* Node n as steps on the running value `x` (one of its inputs), shaped `shape`. */
static bool add_node_steps(const nn_graph *g, chain *c, const nn_node *n, int x, const nn_tensor *shape) {
    const nn_op_desc *d = nn_op_get(n->op);
    if (n->n_out != 1 || n->elided || !same_shape(shape_of(g, n->out[0]), shape)) return false;
    if (d->as_activation) return n->in[0] == x && add_activation(g, c, n);
    int opcode = ew_opcode(n->op);
    if (opcode < 0) return false;
    if (!nn_ew_is_binary(opcode))
        return n->n_in == 1 && n->in[0] == x && add_step(g, c, (nn_ew_step){.op = opcode}, d->name);
    /* two ONNX inputs, and a third when the epilogue adds a residual */
    const nn_epilogue *e = n->has_epilogue ? &n->epilogue : NULL;
    int residual = e && e->residual >= 0 ? 2 : -1;
    if (n->n_in != (residual < 0 ? 2 : 3) || (e && e->residual != residual)) return false;
    bool swap = n->in[0] != x; /* the running value on the right */
    int operand = n->in[swap ? 0 : 1];
    if (n->in[swap ? 1 : 0] != x) return false;
    /* only the chain's input is both the running value and an operand (x * x, x + f(x)) */
    bool reads_x_twice = operand == x || (residual >= 0 && n->in[residual] == x);
    if (reads_x_twice && x != c->inputs[0]) return false;
    const nn_tensor *t = shape_of(g, operand);
    if (!t || (swap && opcode == NN_EW_PRelu)) return false;
    /* before opset 7 a smaller operand was laid from an `axis`, not numpy's way */
    if (g->opset < 7 && nn_tensor_elements(t) != 1 && !same_shape(t, shape)) return false;
    if (!add_binary(g, c, opcode, operand, swap, d->name)) return false;
    if (!e) return true;
    if (residual >= 0 && !add_binary(g, c, NN_EW_Add, n->in[residual], false, "Add")) return false;
    return e->act == NN_ACT_NONE ||
           add_step(g, c, (nn_ew_step){.op = NN_EW_Act, .act = e->act, .alpha = e->alpha, .beta = e->beta},
                    act_name(e->act));
}

/* Append node i to the chain, or leave the chain as it was.  The operator's
 * own inference has the last word on whether the operands fit. */
static bool extend(const nn_graph *g, chain *c, int i, int x) {
    chain before = *c;
    const nn_tensor *shape = shape_of(g, c->inputs[0]);
    bool ok = c->n_nodes < NN_EW_MAX_STEPS && add_node_steps(g, c, &g->nodes[i], x, shape);
    if (ok) {
        nn_tensor in[NN_EW_MAX_INPUTS], out[1] = {{0}};
        for (int k = 0; k < c->n_inputs; k++)
            in[k] = g->values[c->inputs[k]].t;
        char err[256];
        nn_call call = {.params = &c->prog,
                        .n_in = c->n_inputs,
                        .n_out = 1,
                        .in = in,
                        .out = out,
                        .threads = 1,
                        .err = err,
                        .err_size = sizeof err};
        ok = nn_op_get(NN_OP_FusedElementwise)->infer(&call) == NN_OK;
    }
    if (!ok) {
        *c = before;
        return false;
    }
    c->nodes[c->n_nodes++] = i;
    return true;
}

/* The input a chain starting at node n runs on: its input shaped like its output. */
static int chain_head(const nn_graph *g, const nn_node *n) {
    if (n->n_out != 1 || n->n_in < 1) return -1;
    const nn_tensor *out = shape_of(g, n->out[0]);
    for (int k = 0; k < n->n_in && k < 2; k++)
        if (same_shape(shape_of(g, n->in[k]), out)) return n->in[k];
    return -1;
}

/* The last node of the chain becomes the FusedElementwise node, under the first one's name. */
static bool replace_chain(nn_graph *g, const chain *c) {
    int *in = nn_arena_alloc(&g->meta, sizeof(int) * (size_t)c->n_inputs);
    nn_node *last = &g->nodes[c->nodes[c->n_nodes - 1]];
    if (!in || !nn_node_set_params(g, last, &c->prog, sizeof c->prog)) return false;
    memcpy(in, c->inputs, sizeof(int) * (size_t)c->n_inputs);
    last->name = g->nodes[c->nodes[0]].name;
    for (int k = 0; k < c->n_nodes - 1; k++) {
        nn_node *n = &g->nodes[c->nodes[k]];
        g->values[n->out[0]].producer = -1;
        n->op = -1;
    }
    last->op = NN_OP_FusedElementwise;
    last->prepared = NULL;
    last->in = in;
    last->n_in = c->n_inputs;
    last->has_epilogue = false;
    last->epilogue = (nn_epilogue){.residual = -1};
    last->fused = NULL;
    nn_node_note_fused(g, last, c->label);
    return true;
}

static nn_status fuse_elementwise(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    if (m->dynamic) return NN_OK; /* operands are checked against static shapes */
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_status st = NN_OK;
    for (int i = 0; i < g->n_nodes && st == NN_OK; i++) {
        if (g->nodes[i].op < 0) continue;
        chain c = {.n_inputs = 1};
        c.inputs[0] = chain_head(g, &g->nodes[i]);
        if (c.inputs[0] < 0 || !extend(g, &c, i, c.inputs[0])) continue;
        /* follow the running value while its one reader can take it */
        for (int v = g->nodes[i].out[0];;) {
            int j = g->values[v].alias < 0 ? nn_sole_consumer(g, uses, v) : -1;
            if (j < 0 || !extend(g, &c, j, v)) break;
            v = g->nodes[j].out[0];
        }
        if (c.n_nodes < 2) continue;
        if (!replace_chain(g, &c))
            st = nn_set_error(NN_ERR_NOMEM, "out of memory");
        else
            (*rewrites)++;
    }
    free(uses);
    nn_graph_compact(g);
    return st;
}

const nn_pass nn_pass_fuse_elementwise = {
    "fuse_elementwise", "evaluate chains of elementwise ops in one pass over memory", fuse_elementwise};
