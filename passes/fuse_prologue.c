/* Prologue fusion: a per-channel scale and shift with an optional Relu
 * (a FusedElementwise of one MulAdd step: a BatchNormalization folded to
 * Mul+Add, and its Relu) whose only reader is a pointwise Conv becomes that
 * Conv's prologue (nn_prologue), applied while the GEMM packs the conv's
 * input.  DenseNet's dense layers are BatchNormalization+Relu on the Concat
 * of all earlier features, then a 1x1 conv: the pass over memory that wrote
 * the normalized copy of the whole Concat, and the conv's read of it, give
 * way to the conv reading the Concat itself.
 *
 * Only where the target's kernels run the fused Conv (its supports_node: the
 * CPU's do; the CUDA backend would run such a Conv on the host). */
#include <stdio.h>
#include <stdlib.h>

#include "../engine/backend.h"
#include "../ops/fused_elementwise.h"
#include "../ops/registry.h"
#include "pass.h"

/* Whether value v holds one float per channel of x (dim 1) laid along that
 * dim when broadcast against x (right-aligned): [C,1,1] or [1,C,1,1] for a
 * 4-D x. */
static bool per_channel(const nn_graph *g, int v, const nn_tensor *x) {
    if (v < 0) return false;
    const nn_tensor *t = &g->values[v].t;
    int axis = t->ndim - (x->ndim - 1); /* x's dim 1, right-aligned onto t */
    if (!g->values[v].shape_known || t->dtype != NN_DTYPE_FLOAT || axis < 0) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] != (d == axis ? x->dims[1] : 1)) return false;
    return true;
}

/* The scale, shift and activation of a FusedElementwise that maps its input
 * per channel: one MulAdd step with Relu or no activation. */
static bool channel_affine(const nn_graph *g, const nn_node *n, int *scale, int *shift, nn_act *act) {
    if (n->op != NN_OP_FusedElementwise || !n->params || n->params_size != sizeof(nn_ew_program)) return false;
    const nn_ew_program *prog = n->params;
    const nn_ew_step *s = &prog->steps[0];
    if (prog->n_steps != 1 || s->op != NN_EW_MulAdd || (s->act != NN_ACT_NONE && s->act != NN_ACT_RELU)) return false;
    if (s->operand <= 0 || s->operand >= n->n_in || s->operand2 <= 0 || s->operand2 >= n->n_in) return false;
    const nn_tensor *x = &g->values[n->in[0]].t;
    *scale = n->in[s->operand];
    *shift = n->in[s->operand2];
    *act = s->act;
    return x->ndim >= 3 && per_channel(g, *scale, x) && per_channel(g, *shift, x);
}

/* Whether the Conv, given the prologue, still infers: ops/conv.c accepts
 * one only where its GEMM applies it (a 1x1, stride-1, unpadded conv with
 * one group), so the op decides, not a copy of its rules here. */
static bool conv_accepts(const nn_model *m, const nn_node *conv) {
    const nn_graph *g = &m->g;
    nn_tensor in[8] = {{0}}, out[1] = {{0}};
    if (conv->n_in > 8) return false;
    for (int k = 0; k < conv->n_in; k++) {
        if (conv->in[k] < 0) continue;
        if (!g->values[conv->in[k]].shape_known) return false;
        in[k] = g->values[conv->in[k]].t;
    }
    char err[256];
    nn_call call = nn_node_call(m, conv, in, out, err, sizeof err);
    return conv->n_out == 1 && nn_op_get(conv->op)->infer(&call) == NN_OK;
}

static nn_status fuse_prologue(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    if (m->dynamic) return NN_OK;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *conv = &g->nodes[i];
        if (conv->op != NN_OP_Conv || conv->n_in < 1) continue;
        int x = conv->in[0], p = x >= 0 ? g->values[x].producer : -1;
        if (p < 0 || !nn_fusable(g, uses, x) || g->values[x].alias >= 0) continue;
        nn_node *ew = &g->nodes[p];
        int scale, shift;
        nn_act act;
        if (conv->has_prologue || !channel_affine(g, ew, &scale, &shift, &act)) continue;
        int *old_in = conv->in, old_n_in = conv->n_in;
        int at_scale = nn_node_append_input(g, conv, scale, 3);
        int at_shift = at_scale < 0 ? -1 : nn_node_append_input(g, conv, shift, at_scale + 1);
        if (at_shift < 0) {
            free(uses);
            return nn_set_error(NN_ERR_NOMEM, "out of memory");
        }
        conv->in[0] = ew->in[0];
        conv->has_prologue = true;
        conv->prologue = (nn_prologue){.scale = at_scale, .shift = at_shift, .act = act};
        if (!conv_accepts(m, conv) || !m->backend->supports_node(m, conv)) {
            conv->in = old_in; /* the longer copy stays in the arena, unused */
            conv->n_in = old_n_in;
            conv->has_prologue = false;
            continue;
        }
        char what[160];
        snprintf(what, sizeof what, "input(%s)", ew->fused ? ew->fused : "Mul+Add");
        nn_node_note_fused(g, conv, what);
        g->values[x].producer = -1;
        ew->op = -1;
        (*rewrites)++;
    }
    free(uses);
    nn_graph_compact(g);
    return NN_OK;
}

const nn_pass nn_pass_fuse_prologue = {
    "fuse_prologue", "apply a per-channel scale, shift and Relu ahead of a 1x1 Conv while it packs its input",
    fuse_prologue};
