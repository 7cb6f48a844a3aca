/* The elementwise kernel: unary and binary ops with numpy broadcasting,
 * FusedElementwise programs, activations, and the epilogue passes of
 * convolutions and GEMMs (nn_cu_ew_element in index.h does the work). */
#include "internal.h"

enum { EW_THREADS = 256 };
static const int64_t MAX_BLOCKS = 1 << 16;

unsigned cu_blocks(int64_t n, int per_block) {
    int64_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

typedef struct ew_args {
    nn_cu_ew e;
    const void *in[NN_EW_MAX_INPUTS];
    void *out;
    bool half;
} ew_args;

/* __grid_constant__: the kernel reads the descriptor where the launch put
 * it instead of copying its kilobyte to every thread's local memory */
__global__ void ew_kernel(const __grid_constant__ ew_args a) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.e.total; i += step)
        nn_cu_ew_element(&a.e, a.in, a.out, a.half, i);
}

nn_status cu_ew_launch(const cu_ctx *c, const nn_cu_ew *e, const void *const *in, void *out, cudaStream_t s) {
    if (e->total == 0 || e->n_steps == 0 && in[0] == out) return NN_OK;
    ew_args a;
    memset(&a, 0, sizeof a);
    a.e = *e;
    for (int k = 0; k < e->n_in; k++)
        a.in[k] = in[k];
    a.out = out;
    a.half = c->opt.fp16;
    ew_kernel<<<cu_blocks(e->total, EW_THREADS), EW_THREADS, 0, s>>>(a);
    CU_CUDA(c->device, cudaGetLastError());
    return NN_OK;
}

nn_status cu_ew_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    if (!nn_cu_ew_for_node(&dn->u.ew, n->op, call, c->m->g.opset, why)) return NN_ERR_UNSUPPORTED;
    for (int k = 0; k < dn->u.ew.n_in; k++)
        if (!cu_on_device(c, n->in[k])) {
            *why = "an operand has no data";
            return NN_ERR_UNSUPPORTED;
        }
    return NN_OK;
}

nn_status cu_ew_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    const void *in[NN_EW_MAX_INPUTS];
    for (int k = 0; k < dn->u.ew.n_in; k++)
        in[k] = cu_ptr(c, n->in[k]);
    return cu_ew_launch(c, &dn->u.ew, in, cu_ptr(c, n->out[0]), s);
}
