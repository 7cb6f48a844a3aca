/* Bias fusion: MatMul(A, B) + bias, with A a matrix, B and the bias
 * constants, becomes one Gemm whose C is the bias (added in the GEMM's
 * epilogue; a following activation then folds in too).  With A of higher
 * rank (a transformer's [batch, tokens, features]) the MatMul stays and
 * takes the bias as its input 2, which ops/matmul.c adds in the same
 * epilogue.  A Gemm without C takes a following bias Add the same way. */
#include <stdlib.h>

#include "../ops/params.h"
#include "../ops/registry.h"
#include "pass.h"

/* The bias side of an Add: a constant float of N elements shaped [N] or [1, N]. */
static int bias_input(const nn_graph *g, const nn_node *add, int main_in, int64_t n) {
    int other = add->in[0] == main_in ? add->in[1] : add->in[0];
    const nn_value *b = other >= 0 ? &g->values[other] : NULL;
    if (!b || !b->is_const || b->t.dtype != NN_DTYPE_FLOAT || nn_tensor_elements(&b->t) != n) return -1;
    if (!(b->t.ndim == 1 || (b->t.ndim == 2 && b->t.dims[0] == 1))) return -1;
    return other;
}

static bool same_dims(const nn_tensor *a, const nn_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

static nn_status fuse_bias(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *add = &g->nodes[i];
        if (add->op != NN_OP_Add || add->n_in != 2 || add->has_epilogue) continue;
        for (int side = 0; side < 2; side++) {
            int x = add->in[side];
            if (x < 0 || !nn_fusable(g, uses, x) || g->values[x].producer < 0) continue;
            nn_node *host = &g->nodes[g->values[x].producer];
            const nn_value *out = &g->values[x];
            bool matmul = host->op == NN_OP_MatMul, gemm = host->op == NN_OP_Gemm;
            if ((!matmul && !gemm) || host->has_epilogue || out->t.ndim < 2 || out->t.dtype != NN_DTYPE_FLOAT)
                continue;
            if (host->n_in > 2 && host->in[2] >= 0) continue; /* already has a C / a bias */
            if (gemm && out->t.ndim != 2) continue;
            /* N-D: B one constant matrix shared by every batch entry, and the sum shaped like the product */
            bool nd = matmul && (out->t.ndim != 2 || g->values[host->in[0]].t.ndim != 2);
            if (matmul && g->values[host->in[1]].t.ndim != 2) continue;
            if (nd && (!g->values[host->in[1]].is_const || !same_dims(&g->values[add->out[0]].t, &out->t))) continue;
            int bias = bias_input(g, add, x, out->t.dims[out->t.ndim - 1]);
            if (bias < 0) continue;
            if (nd) {
                if (nn_node_append_input(g, host, bias, 2) < 0) {
                    free(uses);
                    return nn_set_error(NN_ERR_NOMEM, "out of memory");
                }
                nn_node_absorb(g, host, add, "Add");
                (*rewrites)++;
                break;
            }
            if (matmul) {
                const nn_gemm_params p = {.alpha = 1.0f, .beta = 1.0f};
                if (!nn_node_set_params(g, host, &p, sizeof p)) {
                    free(uses);
                    return nn_set_error(NN_ERR_NOMEM, "out of memory");
                }
                host->op = NN_OP_Gemm;
            } else if (((const nn_gemm_params *)host->params)->beta != 1.0f) {
                continue; /* C is scaled by beta */
            }
            if (nn_node_append_input(g, host, bias, 2) < 0) {
                free(uses);
                return nn_set_error(NN_ERR_NOMEM, "out of memory");
            }
            nn_node_absorb(g, host, add, matmul ? "MatMul->Gemm+Add" : "Add");
            (*rewrites)++;
            break;
        }
    }
    free(uses);
    nn_graph_compact(g);
    return NN_OK;
}

const nn_pass nn_pass_fuse_bias = {"fuse_bias", "turn MatMul/Gemm + a constant bias Add into one Gemm (a MatMul with a bias when A is N-D)", fuse_bias};
