/* The one place a node becomes a kernel call (ops/op.h's nn_call): the
 * executor, shape inference, the passes, the plan cache and the CUDA
 * backend all build theirs here, so a field nn_call gains is set once. */
#include <string.h>

#include "../ops/registry.h"
#include "model.h"

nn_call nn_node_call(const nn_model *m, const nn_node *n, const nn_tensor *in, nn_tensor *out, char *err,
                     size_t err_size) {
    err[0] = 0;
    return (nn_call){.params = n->params,
                     .n_in = n->n_in,
                     .n_out = n->n_out,
                     .in = in,
                     .out = out,
                     .threads = m->kernel_threads,
                     .epilogue = n->has_epilogue ? &n->epilogue : NULL,
                     .prologue = n->has_prologue ? &n->prologue : NULL,
                     .prepared = n->prepared,
                     .pool = (nn_arena *)&m->g.weights, /* folding; a run gives its lane's pool */
                     /* Winograd stays on with bf16, in fp32, where the bf16 GEMM runs on
                      * AVX512-BF16: on the convs it takes it beat that GEMM; the AMX GEMM beats
                      * it (docs/precision.md, "Winograd under bf16") */
                     .winograd = m->opt.winograd != 0 && !(m->opt.precision == NN_PRECISION_BF16 && nn_ops_cpu_amx()),
                     .bf16 = m->opt.precision == NN_PRECISION_BF16,
                     .err = err,
                     .err_size = err_size};
}

void nn_node_gather(const nn_node *n, const nn_tensor *values, nn_tensor *in, nn_tensor *out) {
    for (int k = 0; k < n->n_in; k++) {
        if (n->in[k] >= 0)
            in[k] = values[n->in[k]];
        else
            memset(&in[k], 0, sizeof in[k]);
    }
    for (int k = 0; k < n->n_out; k++) {
        if (n->out[k] >= 0)
            out[k] = values[n->out[k]];
        else
            memset(&out[k], 0, sizeof out[k]);
    }
}
